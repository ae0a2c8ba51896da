//! Vehicle-actuated control: gap-out / max-out on detector calls.

use greenwave_core::PhaseId;

use super::{can_discharge, decide_switchable, Controller, FixedTime};
use crate::env::Env;
use crate::scenario::Scenario;

/// How much longer than its Webster green a phase may be extended (the usual setting of
/// max green in actuated timing plans: 1.25 to 1.5 times the fixed-time green).
pub const MAX_GREEN_OVER_WEBSTER: f64 = 1.5;

/// Actuated control.
///
/// The green phase is extended while a vehicle of one of its movements is in the
/// detector zone, or left it less than `passage_s` ago. It ends when the gap is longer
/// (gap-out) or its max green is reached (max-out). The next phase is the first one after
/// it, in plan order, with a call on a movement it does not already serve; with no call
/// anywhere the green rests. A movement whose downstream is nearly full
/// ([`SPILLBACK_FRACTION`](super::SPILLBACK_FRACTION)) neither extends a green nor places
/// a call: its vehicles could not leave the junction (spill-back gating, as in
/// queue-spillback-aware actuated practice). Decisions come once per decision interval, so a gap-out
/// takes effect at the next decision point.
///
/// **Max green.** Where `max_green_s` gives none for a signal, a signal that replaces a
/// program of its own (a SUMO light) caps each phase at [`MAX_GREEN_OVER_WEBSTER`] times
/// the program's green for it, as a timing plan caps actuated greens at 1.25–1.5 times the
/// fixed-time greens; near saturation, gap-out alone lets each long red's queue earn the
/// next long green, and the cycle grows until every phase maxes out at the plan's max green.
#[derive(Clone, Debug)]
pub struct Actuated {
    /// Largest gap (s) since the detector zone emptied that still extends the green.
    pub passage_s: f32,
    /// Max green (s) per signal and phase; a signal or phase missing here uses
    /// [`MAX_GREEN_OVER_WEBSTER`] times its program's green (see above), else its plan's max
    /// green (which the sequencer enforces in any case).
    pub max_green_s: Vec<Vec<f64>>,
    /// The max greens of this episode: `max_green_s`, completed at reset.
    episode_max_green_s: Vec<Vec<f64>>,
}

impl Default for Actuated {
    /// Passage 1 s, max green from the plans.
    fn default() -> Self {
        Actuated::new(1.0, Vec::new())
    }
}

impl Actuated {
    /// Actuated control with passage `passage_s` and max greens `max_green_s` (per signal
    /// and phase; see [`Actuated::max_green_s`]).
    pub fn new(passage_s: f32, max_green_s: Vec<Vec<f64>>) -> Self {
        Actuated {
            passage_s,
            max_green_s,
            episode_max_green_s: Vec::new(),
        }
    }

    /// Actuated control for `scenario`: max green of each phase 1.5 times its Webster green
    /// for the scenario's demand (phases Webster leaves out keep their plan's max green).
    pub fn for_scenario(scenario: &Scenario) -> Self {
        let webster = FixedTime::webster(scenario);
        let max_green_s = webster
            .plans()
            .iter()
            .zip(scenario.plans())
            .map(|(fixed, plan)| {
                let mut max: Vec<f64> = plan
                    .phases()
                    .iter()
                    .map(|p| p.timing.max_green.0 as f64 / 1000.0)
                    .collect();
                for stage in &fixed.stages {
                    if let Some(m) = max.get_mut(stage.phase as usize) {
                        *m = m.min(stage.green_s * MAX_GREEN_OVER_WEBSTER);
                    }
                }
                max
            })
            .collect();
        Actuated::new(Actuated::default().passage_s, max_green_s)
    }
}

impl Controller for Actuated {
    fn name(&self) -> &'static str {
        "actuated"
    }

    fn reset(&mut self, env: &dyn Env) {
        self.episode_max_green_s = (0..env.signals().len())
            .map(|i| match self.max_green_s.get(i) {
                Some(given) if !given.is_empty() => given.clone(),
                _ => env
                    .program_greens_s(i)
                    .map(|greens| greens.iter().map(|g| g * MAX_GREEN_OVER_WEBSTER).collect())
                    .unwrap_or_default(),
            })
            .collect();
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        decide_switchable(env, |i, seq, phase, detectors| {
            let plan = seq.plan();
            let green = plan.phases()[phase.0 as usize].movements;
            let elapsed_s = seq.in_interval().0 as f64 / 1000.0;
            // Before any reset (a controller driven without `run_episode`): as given.
            let caps = if self.episode_max_green_s.is_empty() {
                &self.max_green_s
            } else {
                &self.episode_max_green_s
            };
            let max_out = caps
                .get(i)
                .and_then(|phases| phases.get(phase.0 as usize))
                .is_some_and(|&max| elapsed_s + 1e-3 >= max);
            // Gap-out, also when every movement still arriving is blocked downstream.
            let gap_out = !green
                .iter()
                .filter_map(|m| detectors.get(m.0 as usize))
                .any(|d| d.gap_s < self.passage_s && can_discharge(d));
            if !max_out && !gap_out {
                return phase.0;
            }
            let n = plan.n_phases();
            let mask = env.action_mask(i);
            (1..n)
                .map(|k| (phase.0 as usize + k) % n)
                .find(|&q| {
                    mask.allows(PhaseId(q as u8))
                        && plan.phases()[q]
                            .movements
                            .minus(green)
                            .iter()
                            .filter_map(|m| detectors.get(m.0 as usize))
                            .any(|d| (d.call || d.queue_veh > 0.0) && can_discharge(d))
                })
                .map_or(phase.0, |q| q as u8)
        })
    }
}
