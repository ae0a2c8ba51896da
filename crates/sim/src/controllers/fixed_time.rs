//! Fixed-time control with Webster's optimal cycle and green splits.

use greenwave_core::{CycleStage, FixedCycle, Millis, PhaseId, PhasePlan};

use super::Controller;
use crate::env::Env;
use crate::scenario::{FlowModel, LaneGroupDemand, Scenario};

/// Shortest and longest cycle Webster's method may choose.
const CYCLE_RANGE_S: (f64, f64) = (30.0, 150.0);
/// Above this total critical flow ratio the junction is treated as oversaturated and
/// gets the longest cycle.
const MAX_FLOW_RATIO: f64 = 0.9;

/// The fixed cycle of one signal.
#[derive(Clone, Debug, PartialEq)]
pub struct FixedTimePlan {
    /// Stages in cycle order.
    pub stages: Vec<CycleStage>,
    /// Cycle length including clearances.
    pub cycle: Millis,
}

/// Fixed-time control: every signal runs its cycle, stage after stage (greenwave-core's
/// [`FixedCycle`], the one fixed-time rule of the workspace).
#[derive(Clone, Debug)]
pub struct FixedTime {
    plans: Vec<FixedTimePlan>,
    cycles: Vec<FixedCycle>,
}

impl FixedTime {
    /// A controller running `plans` (one per signal, in signal order). A plan with more
    /// stages than [`greenwave_core::control::MAX_STAGES`] keeps its first ones.
    pub fn new(plans: Vec<FixedTimePlan>) -> Self {
        let cycles = plans
            .iter()
            .map(|p| {
                let n = p.stages.len().min(greenwave_core::control::MAX_STAGES);
                FixedCycle::new(&p.stages[..n]).unwrap_or_default()
            })
            .collect();
        FixedTime { plans, cycles }
    }

    /// Webster-optimal plans for every signal of `scenario`, from the mean flows of its
    /// active demand over the episode.
    pub fn webster(scenario: &Scenario) -> Self {
        let flow = scenario.flow_model();
        let plans = scenario
            .plans()
            .into_iter()
            .zip(scenario.lane_group_demand())
            .map(|(plan, groups)| webster_plan(plan, &groups, &flow, scenario.decision_interval()))
            .collect();
        FixedTime::new(plans)
    }

    /// The plans, one per signal.
    pub fn plans(&self) -> &[FixedTimePlan] {
        &self.plans
    }
}

/// Webster's optimal cycle `C0 = (1.5 L + 5) / (1 − Y)` and greens in proportion to each
/// phase's critical flow ratio `y = flow / (lanes · saturation flow)`, for one signal.
///
/// `L` adds up each phase's lost time (start-up lost time plus the unused part of the switch
/// that follows it: yellow and all-red, or the plan's intergreens where longer). Phases that carry no demand are left out of the cycle (all of them are
/// kept when none carries any). Greens are rounded to whole decision intervals (taken as at
/// least 1 s), since the controller can only switch at decision points, and kept within
/// min/max green.
pub fn webster_plan(
    plan: &PhasePlan,
    groups: &[LaneGroupDemand],
    flow: &FlowModel,
    decision_interval: Millis,
) -> FixedTimePlan {
    let s = flow.saturation_flow_veh_per_hour_per_lane;
    let ratios: Vec<f64> = plan
        .phases()
        .iter()
        .map(|phase| {
            groups
                .iter()
                .filter(|g| !g.movements.and(phase.movements).is_empty())
                .map(|g| g.flow_veh_per_hour / (g.lanes as f64 * s))
                .fold(0.0, f64::max)
        })
        .collect();
    let mut served: Vec<usize> = (0..ratios.len()).filter(|&p| ratios[p] > 0.0).collect();
    if served.is_empty() {
        served = (0..ratios.len()).collect();
    }
    // The switch from each served phase to the next in the cycle (its yellow and all-red,
    // or longer where intergreens hold the next phase's starts).
    let switch_after = |k: usize| {
        let (p, q) = (served[k], served[(k + 1) % served.len()]);
        plan.switch_time(PhaseId(p as u8), PhaseId(q as u8))
    };
    let lost_s = |k: usize| {
        let clearance = switch_after(k).0 as f64 / 1000.0;
        flow.startup_lost_time_s + (clearance - flow.yellow_used_s).max(0.0)
    };
    let total_lost_s: f64 = (0..served.len()).map(lost_s).sum();
    let y_total: f64 = served.iter().map(|&p| ratios[p]).sum();
    let cycle_s = if y_total >= MAX_FLOW_RATIO {
        CYCLE_RANGE_S.1
    } else {
        ((1.5 * total_lost_s + 5.0) / (1.0 - y_total)).clamp(CYCLE_RANGE_S.0, CYCLE_RANGE_S.1)
    };
    let effective_green_s = (cycle_s - total_lost_s).max(0.0);
    let dt = f64::from(decision_interval.max(Millis::from_secs(1)).0) / 1000.0;
    let stages: Vec<CycleStage> = served
        .iter()
        .map(|&p| {
            let t = plan.phases()[p].timing;
            let share = if y_total > 0.0 {
                ratios[p] / y_total
            } else {
                1.0 / served.len() as f64
            };
            // Displayed green = effective green − yellow used + start-up lost time.
            let g = effective_green_s * share - flow.yellow_used_s + flow.startup_lost_time_s;
            let min_s = (t.min_green.0 as f64 / 1000.0 / dt).ceil() * dt;
            let max_s = t.max_green.0 as f64 / 1000.0;
            let green_s = ((g / dt).round() * dt).max(min_s).min(max_s);
            CycleStage {
                phase: p as u8,
                green: Millis((green_s * 1000.0).round() as u32),
            }
        })
        .collect();
    let cycle = stages
        .iter()
        .enumerate()
        .fold(Millis::ZERO, |cycle, (k, st)| {
            cycle
                .saturating_add(st.green)
                .saturating_add(switch_after(k))
        });
    FixedTimePlan { stages, cycle }
}

impl Controller for FixedTime {
    fn name(&self) -> &'static str {
        "fixed-time"
    }

    fn reset(&mut self, _env: &dyn Env) {
        self.cycles.iter_mut().for_each(FixedCycle::restart);
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        (0..env.signals().len())
            .map(|i| {
                let seq = env.sequencer(i);
                match self.cycles.get_mut(i) {
                    Some(cycle) => cycle.decide(seq),
                    // No plan for this signal: keep whatever it is doing.
                    None => seq.interval().target().0,
                }
            })
            .collect()
    }
}
