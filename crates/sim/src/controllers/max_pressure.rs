//! Max-pressure control (Varaiya, 2013), with the lost time of a switch accounted for.

use greenwave_core::control::{phases_with_calls, MaxRed, DEFAULT_MAX_RED};
use greenwave_core::{Millis, PhaseId};

use super::{decide_switchable, Controller};
use crate::env::{Env, MovementDetector};

/// Max-pressure control.
///
/// A movement's pressure is `w = x_up − x_down`: its queue minus the queue on the link it
/// feeds. The detector view counts the vehicles `N` on the downstream link but not how
/// many of them are queued, so `x_down` is estimated as `N · N / storage`: almost none on
/// a free-flowing link, all of them on a full one. (Subtracting all of `N` would count
/// vehicles driving freely away as if they were queued, and bias every choice towards
/// phases with fewer movements.) A movement's weight counts only when positive: one with
/// nothing to send cannot send a negative amount, and a movement whose downstream lanes
/// are nearly full ([`SPILLBACK_FRACTION`](super::SPILLBACK_FRACTION)) has none: green
/// given to it is lost while its vehicles cannot leave the junction (the capacity-aware
/// variant of Gregoire et al. 2015, "Capacity-aware backpressure traffic signal control").
/// A phase's pressure is the sum over its movements.
///
/// Varaiya's rule serves the phase of largest pressure every slot. Switching is not free
/// here: the switch's time (`L`: the ending phase's yellow and all-red, or longer where the
/// plan's intergreens hold the new phase's starts) is lost, and the new phase then runs
/// at least its min green `G` (rounded up to a decision interval). Over that horizon,
/// staying serves the current phase for `G + L`, switching serves phase `j` for `G`; so
/// each decision (once min green is served) the controller switches to the phase with the
/// largest `w_j · G_j / (G_j + L)` if that beats the current phase's pressure, and stays
/// otherwise. Without this, it switches on every small fluctuation and loses capacity to
/// clearance near saturation.
///
/// **No starvation.** Pure max-pressure can hold a minor phase red indefinitely while a
/// major one keeps more pressure; on real networks the starved approaches back up into the
/// junctions upstream and to the network's entries. So a phase with demand (a queue or a
/// call on a movement it serves) that has not been green for `max_red` is served next,
/// the longest-waiting first: greenwave-core's [`MaxRed`] rule, which every learned policy
/// runs under too.
#[derive(Clone, Debug)]
pub struct MaxPressure {
    /// Longest a phase with demand is kept from green.
    pub max_red: Millis,
    /// Per signal: the max-red rule (when each phase was last green, env time).
    rules: Vec<MaxRed>,
}

impl Default for MaxPressure {
    fn default() -> Self {
        MaxPressure {
            max_red: DEFAULT_MAX_RED,
            rules: Vec::new(),
        }
    }
}

/// How far before the stop line arriving vehicles count towards a movement's pressure
/// (m): a typical advance-detection range. Vehicles further up a long lane will not reach
/// the stop line within a green and are left out.
pub const DETECTION_RANGE_M: f32 = 200.0;

/// The vehicles of movement `d` that a green can serve: every queued one, plus the moving
/// ones estimated to be within [`DETECTION_RANGE_M`] of the stop line (moving vehicles
/// spread evenly along the lane). With the lane length unknown, all of them.
fn upstream_load(d: &MovementDetector) -> f32 {
    let moving = (d.upstream_veh - d.queue_veh).max(0.0);
    let share = if d.upstream_length_m > DETECTION_RANGE_M {
        DETECTION_RANGE_M / d.upstream_length_m
    } else {
        1.0
    };
    d.queue_veh + moving * share
}

/// The pressure of one movement; none when its downstream is full (it cannot send).
fn pressure(d: &MovementDetector) -> f32 {
    if !d.can_discharge() {
        return 0.0;
    }
    let downstream_queue_veh =
        d.downstream_veh * d.downstream_veh / d.downstream_storage_veh.max(1.0);
    (upstream_load(d) - downstream_queue_veh).max(0.0)
}

impl Controller for MaxPressure {
    fn name(&self) -> &'static str {
        "max-pressure"
    }

    fn reset(&mut self, env: &dyn Env) {
        let now = env.now();
        self.rules = vec![MaxRed::new(self.max_red, now); env.signals().len()];
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        let decision_s = (f64::from(env.decision_interval().0) / 1000.0).max(1.0) as f32;
        let now = env.now();
        if self.rules.len() != env.signals().len() {
            self.reset(env);
        }
        for (i, rule) in self.rules.iter_mut().enumerate() {
            rule.note(env.sequencer(i), now);
        }
        let this = &*self;
        decide_switchable(env, |i, seq, phase, detectors| {
            let plan = seq.plan();
            let mask = env.action_mask(i);
            let phase_pressure = |q: usize| -> f32 {
                plan.phases()[q]
                    .movements
                    .iter()
                    .filter_map(|m| detectors.get(m.0 as usize))
                    .map(pressure)
                    .sum()
            };
            let calls = phases_with_calls(plan, detectors);
            if let Some(q) = this.rules[i].starved(seq, mask, calls, now) {
                return q.0;
            }
            let mut best = (phase.0, phase_pressure(phase.0 as usize));
            for q in 0..plan.n_phases() {
                if q == phase.0 as usize || !mask.allows(PhaseId(q as u8)) {
                    continue;
                }
                let lost_s = plan.switch_time(phase, PhaseId(q as u8)).0 as f32 / 1000.0;
                let min_green_s = plan.phases()[q].timing.min_green.0 as f32 / 1000.0;
                let green_s = (min_green_s / decision_s).ceil() * decision_s;
                let score = phase_pressure(q) * green_s / (green_s + lost_s);
                if score > best.1 {
                    best = (q as u8, score);
                }
            }
            best.0
        })
    }
}
