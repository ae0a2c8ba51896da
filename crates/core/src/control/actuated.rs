//! Vehicle-actuated control: gap-out / max-out on detector calls.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use super::{assigned_movements, MovementDetector};
use crate::plan::{MovementSet, PhaseId, MAX_PHASES};
use crate::sequencer::{Interval, Sequencer};
use crate::units::Millis;

/// Actuated control of one signal.
///
/// The green phase is extended while a vehicle of one of the movements assigned to it is
/// in the detector zone, or left it less than `passage_s` ago. It ends when the gap is
/// longer (gap-out) or its max green is reached (max-out). The next phase is the first one
/// after it, in plan order, with a call on a movement assigned to it and not to the green;
/// with no call anywhere the green rests. A phase's movements are all assigned to it unless
/// `assigned` says otherwise ([`assigned_movements`](super::assigned_movements)): a left
/// turn that yields in the through phase and has a protected phase of its own, from a lane
/// of its own, is assigned to that one only, so its queue, waiting for a gap, neither holds
/// the through phase to max green nor leaves its protected phase uncalled. A movement whose downstream is nearly full
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
    /// Per phase, in plan order, the movements whose detectors extend and call it (the
    /// detector-to-phase assignment); empty, or a phase without an entry: all its
    /// movements.
    #[serde(default)]
    pub assigned: Vec<MovementSet, MAX_PHASES>,
}

impl Default for ActuatedSignal {
    /// Passage 1 s, max greens from the plan.
    fn default() -> Self {
        ActuatedSignal {
            passage_s: 1.0,
            max_green: Vec::new(),
            assigned: Vec::new(),
        }
    }
}

impl ActuatedSignal {
    /// Actuated control with passage `passage_s` and max greens `max_green` (per phase in
    /// plan order; phases beyond the slice, or beyond [`MAX_PHASES`], use the plan's).
    pub fn new(passage_s: f32, max_green: &[Millis]) -> Self {
        ActuatedSignal {
            passage_s,
            max_green: per_phase(max_green),
            assigned: Vec::new(),
        }
    }

    /// The same rule with `assigned` (per phase in plan order; phases beyond the slice, or
    /// beyond [`MAX_PHASES`], keep all their movements) as its detector-to-phase assignment.
    pub fn with_assigned(mut self, assigned: &[MovementSet]) -> Self {
        self.assigned = per_phase(assigned);
        self
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
        let green = assigned_movements(plan, &self.assigned, phase.0 as usize);
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
                    && of(assigned_movements(plan, &self.assigned, q).minus(green))
                        .any(|d| d.calls())
            })
            .map_or(phase.0, |q| q as u8)
    }
}

/// The first [`MAX_PHASES`] entries of a per-phase slice.
fn per_phase<T: Copy>(values: &[T]) -> Vec<T, MAX_PHASES> {
    let n = values.len().min(MAX_PHASES);
    // Cannot fail: at most MAX_PHASES entries.
    Vec::from_slice(&values[..n]).unwrap_or_default()
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

    /// North–south through and right with permissive lefts, then the lefts protected;
    /// the same east–west. Movement `3·arm + k` (k = 0 left, 1 through, 2 right).
    fn permissive_left_seq(green_s: u32) -> Sequencer {
        use crate::{ConflictMatrix, Movement, Phase, Turn};
        let movements: std::vec::Vec<Movement> = (0..4u8)
            .flat_map(|arm| [Turn::Left, Turn::Through, Turn::Right].map(|t| Movement::new(arm, t)))
            .collect();
        let axis = |a: u8, b: u8| [3 * a, 3 * a + 1, 3 * a + 2, 3 * b, 3 * b + 1, 3 * b + 2];
        let mut pairs = std::vec::Vec::new();
        for x in axis(0, 2) {
            for y in axis(1, 3) {
                pairs.push((crate::MovementId(x), crate::MovementId(y)));
            }
        }
        let timing = PhaseTiming::from_secs(5, 60, 3, 2);
        let phases = [
            MovementSet::from_ids(&axis(0, 2)),
            MovementSet::from_ids(&[0, 6]),
            MovementSet::from_ids(&axis(1, 3)),
            MovementSet::from_ids(&[3, 9]),
        ]
        .map(|movements| Phase { movements, timing });
        let plan = PhasePlan::new(&movements, ConflictMatrix::from_pairs(&pairs), &phases).unwrap();
        let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
        seq.tick(Millis::from_secs(green_s));
        seq
    }

    #[test]
    fn a_yielding_left_queue_neither_holds_the_through_phase_nor_leaves_its_own_uncalled() {
        let seq = permissive_left_seq(10);
        let mut d = idle(12);
        d[0].gap_s = 0.0; // the north left's queue, waiting for a gap, sits on the loop
        d[0].queue_veh = 3.0;
        assert_eq!(
            ActuatedSignal::default().decide(&seq, &d),
            0,
            "every movement assigned to its phases: the waiting left holds the through phase"
        );
        let rule = ActuatedSignal::default().with_assigned(&[
            MovementSet::from_ids(&[1, 2, 7, 8]),
            MovementSet::from_ids(&[0, 6]),
            MovementSet::from_ids(&[4, 5, 10, 11]),
            MovementSet::from_ids(&[3, 9]),
        ]);
        assert_eq!(
            rule.decide(&seq, &d),
            1,
            "the through phase gaps out to the lefts' protected phase"
        );
        d[7].gap_s = 0.5;
        assert_eq!(rule.decide(&seq, &d), 0, "a through vehicle still extends");
    }

    #[test]
    fn a_phase_always_answers_to_some_detector() {
        let seq = permissive_left_seq(10);
        let plan = seq.plan();
        let own = plan.phases()[1].movements;
        let elsewhere = MovementSet::from_ids(&[1]);
        assert_eq!(assigned_movements(plan, &[], 1), own, "no assignment: all");
        assert_eq!(
            assigned_movements(plan, &[own, elsewhere], 1),
            own,
            "an entry naming none of the phase's movements: all"
        );
        let one = MovementSet::from_ids(&[0, 1]);
        assert_eq!(
            assigned_movements(plan, &[MovementSet::EMPTY, one], 1),
            MovementSet::from_ids(&[0]),
            "only the phase's own movements of its entry"
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
