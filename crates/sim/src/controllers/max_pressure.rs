//! Max-pressure control (Varaiya, 2013), with the lost time of a switch accounted for.

use greenwave_core::PhaseId;

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
/// nothing to send cannot send a negative amount. A phase's pressure is the sum over its
/// movements.
///
/// Varaiya's rule serves the phase of largest pressure every slot. Switching is not free
/// here: the ending phase's yellow and all-red (`L`) are lost, and the new phase then runs
/// at least its min green `G` (rounded up to a decision interval). Over that horizon,
/// staying serves the current phase for `G + L`, switching serves phase `j` for `G`; so
/// each decision (once min green is served) the controller switches to the phase with the
/// largest `w_j · G_j / (G_j + L)` if that beats the current phase's pressure, and stays
/// otherwise. Without this, it switches on every small fluctuation and loses capacity to
/// clearance near saturation.
#[derive(Clone, Debug, Default)]
pub struct MaxPressure;

/// The pressure of one movement.
fn pressure(d: &MovementDetector) -> f32 {
    let downstream_queue_veh =
        d.downstream_veh * d.downstream_veh / d.downstream_storage_veh.max(1.0);
    (d.queue_veh - downstream_queue_veh).max(0.0)
}

impl Controller for MaxPressure {
    fn name(&self) -> &'static str {
        "max-pressure"
    }

    fn reset(&mut self, _env: &dyn Env) {}

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        let decision_s = env.decision_interval_s().max(1.0) as f32;
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
            let current = plan.phases()[phase.0 as usize].timing;
            let lost_s = (current.yellow.0 + current.all_red.0) as f32 / 1000.0;
            let mut best = (phase.0, phase_pressure(phase.0 as usize));
            for q in 0..plan.n_phases() {
                if q == phase.0 as usize || !mask.allows(PhaseId(q as u8)) {
                    continue;
                }
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
