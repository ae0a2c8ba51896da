//! The fixed-time program: the plan's phases in order, each green for a fixed split within
//! its min and max green. Used when no trusted policy is loaded, and for single decisions the
//! policy cannot take (detector fault).

use greenwave_core::plan::MAX_PHASES;
use greenwave_core::{Interval, PhaseId, PhasePlan, Sequencer};

/// Why a fixed-time program was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FixedTimeError {
    /// Not one split per phase.
    #[error("{got} green splits given, the plan has {expected} phases")]
    SplitCount {
        /// Phases in the plan.
        expected: usize,
        /// Splits given.
        got: usize,
    },
    /// A split outside its phase's min and max green.
    #[error("phase {phase}: green split {split_ms} ms is outside min green {min_green_ms} ms .. max green {max_green_ms} ms")]
    SplitOutsideGreens {
        /// The phase.
        phase: u8,
        /// The split given.
        split_ms: u32,
        /// The phase's min green.
        min_green_ms: u32,
        /// The phase's max green.
        max_green_ms: u32,
    },
}

/// Green splits per phase, served in phase order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedTimeProgram {
    green_split_ms: [u32; MAX_PHASES],
    n_phases: u8,
}

impl FixedTimeProgram {
    /// A program with the given green split per phase; each must lie within the phase's
    /// min and max green.
    pub fn new(plan: &PhasePlan, green_split_ms: &[u32]) -> Result<Self, FixedTimeError> {
        if green_split_ms.len() != plan.n_phases() {
            return Err(FixedTimeError::SplitCount {
                expected: plan.n_phases(),
                got: green_split_ms.len(),
            });
        }
        let mut splits = [0; MAX_PHASES];
        for (p, (phase, &split_ms)) in plan.phases().iter().zip(green_split_ms).enumerate() {
            let (min, max) = (phase.timing.min_green.0, phase.timing.max_green.0);
            if split_ms < min || split_ms > max {
                return Err(FixedTimeError::SplitOutsideGreens {
                    phase: p as u8,
                    split_ms,
                    min_green_ms: min,
                    max_green_ms: max,
                });
            }
            splits[p] = split_ms;
        }
        Ok(FixedTimeProgram {
            green_split_ms: splits,
            n_phases: plan.n_phases() as u8,
        })
    }

    /// Each phase green for the midpoint of its min and max green.
    pub fn midpoint(plan: &PhasePlan) -> Self {
        let mut splits = [0; MAX_PHASES];
        for (s, phase) in splits.iter_mut().zip(plan.phases()) {
            let (min, max) = (phase.timing.min_green.0, phase.timing.max_green.0);
            *s = min + (max - min) / 2;
        }
        FixedTimeProgram {
            green_split_ms: splits,
            n_phases: plan.n_phases() as u8,
        }
    }

    /// Checks the program against `plan`: one split per phase, each within its phase's min
    /// and max green (a program built for another plan is refused).
    pub fn check_plan(&self, plan: &PhasePlan) -> Result<(), FixedTimeError> {
        FixedTimeProgram::new(plan, &self.green_split_ms[..self.n_phases()]).map(|_| ())
    }

    /// Number of phases.
    pub fn n_phases(&self) -> usize {
        self.n_phases as usize
    }

    /// The green split of `phase`, ms (0 for a phase not in the program).
    pub fn green_split_ms(&self, phase: PhaseId) -> u32 {
        self.green_split_ms
            .get(phase.0 as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The phase served after `phase`.
    pub fn next_phase(&self, phase: PhaseId) -> PhaseId {
        PhaseId(((phase.0 as usize + 1) % self.n_phases.max(1) as usize) as u8)
    }

    /// The phase the program wants green now: the current green until its split is served,
    /// then the next phase; during a change, the phase being changed to.
    pub fn wanted(&self, seq: &Sequencer) -> PhaseId {
        match seq.interval() {
            Interval::Green { phase } if seq.in_interval().0 >= self.green_split_ms(phase) => {
                self.next_phase(phase)
            }
            other => other.target(),
        }
    }

    /// Milliseconds until the current green's split is served (`None` during a change).
    pub fn split_left_ms(&self, seq: &Sequencer) -> Option<u32> {
        match seq.interval() {
            Interval::Green { phase } => Some(
                self.green_split_ms(phase)
                    .saturating_sub(seq.in_interval().0),
            ),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::{Millis, PhaseTiming};

    fn plan() -> PhasePlan {
        PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap()
    }

    #[test]
    fn splits_are_checked_against_min_and_max_green() {
        let p = plan();
        assert_eq!(
            FixedTimeProgram::new(&p, &[10_000; 3]),
            Err(FixedTimeError::SplitCount {
                expected: 4,
                got: 3
            })
        );
        assert_eq!(
            FixedTimeProgram::new(&p, &[10_000, 4000, 10_000, 10_000]),
            Err(FixedTimeError::SplitOutsideGreens {
                phase: 1,
                split_ms: 4000,
                min_green_ms: 5000,
                max_green_ms: 30_000
            })
        );
        let mid = FixedTimeProgram::midpoint(&p);
        assert_eq!(mid.check_plan(&p), Ok(()));
        let short =
            PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 12, 3, 2)).unwrap();
        assert!(matches!(
            mid.check_plan(&short),
            Err(FixedTimeError::SplitOutsideGreens { phase: 0, .. })
        ));
        assert_eq!(mid.green_split_ms(PhaseId(2)), 17_500);
        assert_eq!(mid.next_phase(PhaseId(3)), PhaseId(0));
    }

    #[test]
    fn wants_the_next_phase_once_the_split_is_served() {
        let p = plan();
        let prog = FixedTimeProgram::new(&p, &[8000, 5000, 8000, 5000]).unwrap();
        let mut seq = Sequencer::new(p, PhaseId(0)).unwrap();
        seq.tick(Millis(7999));
        assert_eq!(prog.wanted(&seq), PhaseId(0));
        assert_eq!(prog.split_left_ms(&seq), Some(1));
        seq.tick(Millis(1));
        assert_eq!(prog.wanted(&seq), PhaseId(1));
        seq.request(1);
        assert_eq!(prog.wanted(&seq), PhaseId(1));
        assert_eq!(prog.split_left_ms(&seq), None);
    }
}
