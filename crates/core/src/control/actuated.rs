//! Vehicle-actuated control: gap-out / max-out on detector calls.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use super::MovementDetector;
use crate::plan::{PhaseId, MAX_PHASES};
use crate::sequencer::{Interval, Sequencer};
use crate::units::Millis;

/// Actuated control of one signal.
///
/// The green phase is extended while a vehicle of one of its movements is in the detector
/// zone, or left it less than `passage_s` ago. It ends when the gap is longer (gap-out) or
/// its max green is reached (max-out). The next phase is the first one after it, in plan
/// order, with a call on a movement it does not already serve; with no call anywhere the
/// green rests. A movement whose downstream is nearly full
/// ([`SPILLBACK_FRACTION`](super::SPILLBACK_FRACTION)) neither extends a green nor places a
/// call: its vehicles could not leave the junction (spill-back gating). Decisions come once
/// per decision interval, so a gap-out takes effect at the next decision point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActuatedSignal {
    /// Largest gap (s) since the detector zone emptied that still extends the green.
    pub passage_s: f32,
    /// Max green per phase, in plan order; a phase without one here is capped by its
    /// plan's max green only (which the sequencer enforces in any case).
    pub max_green: Vec<Millis, MAX_PHASES>,
}

impl Default for ActuatedSignal {
    /// Passage 1 s, max greens from the plan.
    fn default() -> Self {
        ActuatedSignal {
            passage_s: 1.0,
            max_green: Vec::new(),
        }
    }
}

impl ActuatedSignal {
    /// Actuated control with passage `passage_s` and max greens `max_green` (per phase in
    /// plan order; phases beyond the slice, or beyond [`MAX_PHASES`], use the plan's).
    pub fn new(passage_s: f32, max_green: &[Millis]) -> Self {
        let n = max_green.len().min(MAX_PHASES);
        ActuatedSignal {
            passage_s,
            // Cannot fail: at most MAX_PHASES entries.
            max_green: Vec::from_slice(&max_green[..n]).unwrap_or_default(),
        }
    }

    /// The phase to request now, given the signal's sequencer and its movements' detectors
    /// (indexed like the plan's movements; a movement without a detector never extends or
    /// calls). During a change or before min green, the only request honoured then.
    pub fn decide(&self, seq: &Sequencer, detectors: &[MovementDetector]) -> u8 {
        match seq.interval() {
            Interval::Green { phase } if seq.min_green_served() => {
                self.choose(seq, phase, detectors)
            }
            other => other.target().0,
        }
    }

    fn choose(&self, seq: &Sequencer, phase: PhaseId, detectors: &[MovementDetector]) -> u8 {
        let plan = seq.plan();
        let green = plan.phases()[phase.0 as usize].movements;
        let of =
            |set: crate::MovementSet| set.iter().filter_map(move |m| detectors.get(m.0 as usize));
        let max_out = self
            .max_green
            .get(phase.0 as usize)
            .is_some_and(|&max| seq.in_interval() >= max);
        // Gap-out, also when every movement still arriving is blocked downstream.
        let gap_out = !of(green).any(|d| d.extends_green(self.passage_s));
        if !max_out && !gap_out {
            return phase.0;
        }
        let n = plan.n_phases();
        let mask = seq.action_mask();
        (1..n)
            .map(|k| (phase.0 as usize + k) % n)
            .find(|&q| {
                mask.allows(PhaseId(q as u8))
                    && of(plan.phases()[q].movements.minus(green)).any(|d| d.calls())
            })
            .map_or(phase.0, |q| q as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PhasePlan, PhaseTiming};

    fn seq_at(phase: u8, green_s: u32) -> Sequencer {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 60, 3, 2)).unwrap();
        let mut seq = Sequencer::new(plan, PhaseId(phase)).unwrap();
        seq.tick(Millis::from_secs(green_s));
        seq
    }

    fn idle(n: usize) -> std::vec::Vec<MovementDetector> {
        std::vec![
            MovementDetector {
                gap_s: 99.0,
                ..MovementDetector::default()
            };
            n
        ]
    }

    fn movements_of(seq: &Sequencer, phase: usize) -> std::vec::Vec<usize> {
        seq.plan().phases()[phase]
            .movements
            .iter()
            .map(|m| m.0 as usize)
            .collect()
    }

    #[test]
    fn extends_on_a_short_gap_then_gaps_out_to_the_next_called_phase() {
        let seq = seq_at(0, 10);
        let n = seq.plan().movements().len();
        let mut d = idle(n);
        let own = movements_of(&seq, 0)[0];
        d[own].gap_s = 0.5;
        let rule = ActuatedSignal::default();
        assert_eq!(
            rule.decide(&seq, &d),
            0,
            "a vehicle within the passage time extends"
        );
        d[own].gap_s = 3.0;
        assert_eq!(
            rule.decide(&seq, &d),
            0,
            "no call elsewhere: the green rests"
        );
        let called = movements_of(&seq, 2)[0];
        d[called].call = true;
        assert_eq!(
            rule.decide(&seq, &d),
            2,
            "gap-out skips the uncalled phase 1"
        );
        d[called].downstream_veh = 9.5;
        d[called].downstream_storage_veh = 10.0;
        assert_eq!(
            rule.decide(&seq, &d),
            0,
            "a call blocked downstream does not count"
        );
    }

    #[test]
    fn maxes_out_at_its_max_green_and_waits_for_min_green() {
        let seq = seq_at(0, 20);
        let n = seq.plan().movements().len();
        let mut d = idle(n);
        d[movements_of(&seq, 0)[0]].gap_s = 0.0;
        d[movements_of(&seq, 1)[0]].queue_veh = 2.0;
        let rule = ActuatedSignal::new(1.0, &[Millis::from_secs(20)]);
        assert_eq!(
            rule.decide(&seq, &d),
            1,
            "max-out at 20 s despite the extension"
        );
        assert_eq!(ActuatedSignal::default().decide(&seq, &d), 0);
        assert_eq!(
            rule.decide(&seq_at(0, 4), &d),
            0,
            "before min green only the green"
        );
    }
}
