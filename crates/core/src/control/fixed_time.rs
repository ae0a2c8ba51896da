//! Fixed-time control: a cycle of stages, each a phase green for a fixed time.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::plan::{PhaseId, PhasePlan, MAX_PHASES};
use crate::sequencer::{Interval, Sequencer};
use crate::units::Millis;

/// Most stages a cycle may hold (a phase may appear more than once in a cycle).
pub const MAX_STAGES: usize = MAX_PHASES;

/// One stage of a fixed cycle: a phase and its displayed green.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CycleStage {
    /// The phase.
    pub phase: u8,
    /// Its displayed green.
    pub green: Millis,
}

/// Why a fixed cycle was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FixedCycleError {
    /// More stages than [`MAX_STAGES`].
    #[error("{got} stages given, a cycle holds at most {max}")]
    TooManyStages {
        /// Stages given.
        got: usize,
        /// [`MAX_STAGES`].
        max: usize,
    },
    /// Not one green split per phase.
    #[error("{got} green splits given, the plan has {expected} phases")]
    SplitCount {
        /// Phases in the plan.
        expected: usize,
        /// Splits given.
        got: usize,
    },
    /// A cycle without stages (it would rest on one phase for good).
    #[error("a fixed cycle needs at least one stage")]
    Empty,
    /// A stage's phase is not in the plan.
    #[error("stage {stage}: phase {phase} is not in the plan ({n_phases} phases)")]
    UnknownPhase {
        /// The stage.
        stage: usize,
        /// Its phase.
        phase: u8,
        /// Phases in the plan.
        n_phases: usize,
    },
    /// A green outside its phase's min and max green.
    #[error("phase {phase}: green split {split_ms} ms is outside min green {min_green_ms} ms .. max green {max_green_ms} ms")]
    SplitOutsideGreens {
        /// The phase.
        phase: u8,
        /// The green given.
        split_ms: u32,
        /// The phase's min green.
        min_green_ms: u32,
        /// The phase's max green.
        max_green_ms: u32,
    },
}

/// The fixed cycle of one signal: each stage's phase green for its time, in order.
///
/// The cycle follows the sequencer when they are out of step (the first decision, after a
/// max-green change, when taking over from a policy): if the green phase is a stage, the
/// cycle continues from there; otherwise it asks for its current stage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FixedCycle {
    stages: Vec<CycleStage, MAX_STAGES>,
    current: u8,
}

impl FixedCycle {
    /// A cycle of `stages` (check them against a plan with [`FixedCycle::check_plan`]).
    pub fn new(stages: &[CycleStage]) -> Result<Self, FixedCycleError> {
        let stages = Vec::from_slice(stages).map_err(|_| FixedCycleError::TooManyStages {
            got: stages.len(),
            max: MAX_STAGES,
        })?;
        Ok(FixedCycle { stages, current: 0 })
    }

    /// Every phase of `plan` in phase order, phase `p` green for `green_split_ms[p]`; each
    /// split must lie within its phase's min and max green.
    pub fn from_splits(plan: &PhasePlan, green_split_ms: &[u32]) -> Result<Self, FixedCycleError> {
        if green_split_ms.len() != plan.n_phases() {
            return Err(FixedCycleError::SplitCount {
                expected: plan.n_phases(),
                got: green_split_ms.len(),
            });
        }
        let mut stages = Vec::new();
        for (p, &ms) in green_split_ms.iter().enumerate() {
            // Cannot fail: a plan has at most MAX_PHASES = MAX_STAGES phases.
            let _ = stages.push(CycleStage {
                phase: p as u8,
                green: Millis(ms),
            });
        }
        let cycle = FixedCycle { stages, current: 0 };
        cycle.check_plan(plan)?;
        Ok(cycle)
    }

    /// Every phase of `plan` in order, each green for the midpoint of its min and max green.
    pub fn midpoint(plan: &PhasePlan) -> Self {
        Self::each_phase(plan, |t| {
            t.min_green + Millis((t.max_green.0 - t.min_green.0) / 2)
        })
    }

    /// Every phase of `plan` in order, each green for `green` rounded up to whole decision
    /// intervals and kept within its min and max green.
    pub fn equal_split(plan: &PhasePlan, green: Millis, decision_interval: Millis) -> Self {
        let dt = decision_interval.0.max(1);
        Self::each_phase(plan, |t| {
            let g = green.max(t.min_green);
            Millis(g.0.div_ceil(dt).saturating_mul(dt)).min(t.max_green)
        })
    }

    fn each_phase(plan: &PhasePlan, green: impl Fn(crate::PhaseTiming) -> Millis) -> Self {
        let mut stages = Vec::new();
        for (p, phase) in plan.phases().iter().enumerate() {
            // Cannot fail: a plan has at most MAX_PHASES = MAX_STAGES phases.
            let _ = stages.push(CycleStage {
                phase: p as u8,
                green: green(phase.timing),
            });
        }
        FixedCycle { stages, current: 0 }
    }

    /// Checks the cycle against `plan`: every stage's phase is in the plan and its green
    /// within the phase's min and max green (a cycle built for another plan is refused),
    /// and there is at least one stage.
    pub fn check_plan(&self, plan: &PhasePlan) -> Result<(), FixedCycleError> {
        if self.stages.is_empty() {
            return Err(FixedCycleError::Empty);
        }
        for (k, s) in self.stages.iter().enumerate() {
            let Some(phase) = plan.phases().get(s.phase as usize) else {
                return Err(FixedCycleError::UnknownPhase {
                    stage: k,
                    phase: s.phase,
                    n_phases: plan.n_phases(),
                });
            };
            let (min, max) = (phase.timing.min_green, phase.timing.max_green);
            if s.green < min || s.green > max {
                return Err(FixedCycleError::SplitOutsideGreens {
                    phase: s.phase,
                    split_ms: s.green.0,
                    min_green_ms: min.0,
                    max_green_ms: max.0,
                });
            }
        }
        Ok(())
    }

    /// The stages, in cycle order.
    pub fn stages(&self) -> &[CycleStage] {
        &self.stages
    }

    /// Starts the cycle again from its first stage.
    pub fn restart(&mut self) {
        self.current = 0;
    }

    /// The phase to request now: the green phase until its stage's time is served, then the
    /// next stage's phase; during a change, the phase being changed to.
    pub fn decide(&mut self, seq: &Sequencer) -> u8 {
        let Interval::Green { phase } = seq.interval() else {
            return seq.interval().target().0;
        };
        if self.stages.is_empty() {
            return phase.0;
        }
        if !self.follow(phase) {
            return self.stage().phase;
        }
        if seq.in_interval() >= self.stage().green {
            self.current = ((self.current as usize + 1) % self.stages.len()) as u8;
        }
        self.stage().phase
    }

    /// How long the green phase has left of its stage (`None` during a change, or when the
    /// green phase is not a stage of the cycle).
    pub fn green_left(&self, seq: &Sequencer) -> Option<Millis> {
        let Interval::Green { phase } = seq.interval() else {
            return None;
        };
        let stage = if self.stage_opt().map(|s| s.phase) == Some(phase.0) {
            self.stage_opt()
        } else {
            self.stages.iter().find(|s| s.phase == phase.0)
        }?;
        Some(stage.green.saturating_sub(seq.in_interval()))
    }

    /// Moves the cycle to the stage of `phase` when out of step; false if `phase` is not a
    /// stage.
    fn follow(&mut self, phase: PhaseId) -> bool {
        if self.stage().phase == phase.0 {
            return true;
        }
        match self.stages.iter().position(|s| s.phase == phase.0) {
            Some(k) => {
                self.current = k as u8;
                true
            }
            None => false,
        }
    }

    fn stage_opt(&self) -> Option<&CycleStage> {
        self.stages.get(self.current as usize)
    }

    /// The current stage (callers check that the cycle has stages).
    fn stage(&self) -> CycleStage {
        self.stages[self.current as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PhaseTiming;
    use std::vec::Vec as StdVec;

    fn plan() -> PhasePlan {
        PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap()
    }

    #[test]
    fn splits_are_checked_against_the_plan() {
        let p = plan();
        assert_eq!(
            FixedCycle::from_splits(&p, &[10_000; 3]),
            Err(FixedCycleError::SplitCount {
                expected: 4,
                got: 3
            })
        );
        assert_eq!(
            FixedCycle::from_splits(&p, &[10_000, 4000, 10_000, 10_000]),
            Err(FixedCycleError::SplitOutsideGreens {
                phase: 1,
                split_ms: 4000,
                min_green_ms: 5000,
                max_green_ms: 30_000
            })
        );
        let mid = FixedCycle::midpoint(&p);
        assert_eq!(mid.check_plan(&p), Ok(()));
        assert_eq!(mid.stages()[2].green, Millis(17_500));
        let short =
            PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 12, 3, 2)).unwrap();
        assert!(matches!(
            mid.check_plan(&short),
            Err(FixedCycleError::SplitOutsideGreens { phase: 0, .. })
        ));
        let stray = FixedCycle::new(&[CycleStage {
            phase: 4,
            green: Millis(6000),
        }])
        .unwrap();
        assert!(matches!(
            stray.check_plan(&p),
            Err(FixedCycleError::UnknownPhase { phase: 4, .. })
        ));
        assert_eq!(
            FixedCycle::default().check_plan(&p),
            Err(FixedCycleError::Empty)
        );
        let too_many = [CycleStage {
            phase: 0,
            green: Millis(6000),
        }; MAX_STAGES + 1];
        assert!(matches!(
            FixedCycle::new(&too_many),
            Err(FixedCycleError::TooManyStages { .. })
        ));
    }

    #[test]
    fn runs_its_stages_through_the_sequencer_from_the_sequencers_phase() {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        let mut cycle = FixedCycle::equal_split(&plan, Millis::from_secs(12), Millis::from_secs(5));
        assert!(cycle
            .stages()
            .iter()
            .all(|s| s.green == Millis::from_secs(15)));
        let mut seq = Sequencer::new(plan, PhaseId(2)).unwrap();
        let mut greens = StdVec::new();
        for _ in 0..40 {
            let r = cycle.decide(&seq);
            seq.request(r);
            seq.tick(Millis::from_secs(5));
            if let Interval::Green { phase } = seq.interval() {
                if greens.last() != Some(&phase.0) {
                    greens.push(phase.0);
                }
            }
        }
        assert_eq!(&greens[..6], &[2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn switches_once_the_green_is_served_and_reports_what_is_left() {
        let p = plan();
        let mut cycle = FixedCycle::from_splits(&p, &[8000, 5000, 8000, 5000]).unwrap();
        let mut seq = Sequencer::new(p, PhaseId(0)).unwrap();
        seq.tick(Millis(7999));
        assert_eq!(cycle.decide(&seq), 0);
        assert_eq!(cycle.green_left(&seq), Some(Millis(1)));
        seq.tick(Millis(1));
        assert_eq!(cycle.decide(&seq), 1);
        seq.request(1);
        assert_eq!(cycle.decide(&seq), 1);
        assert_eq!(cycle.green_left(&seq), None);
    }

    #[test]
    fn a_green_phase_outside_the_cycle_asks_for_the_current_stage() {
        let p = plan();
        let mut cycle = FixedCycle::new(&[
            CycleStage {
                phase: 0,
                green: Millis(10_000),
            },
            CycleStage {
                phase: 2,
                green: Millis(10_000),
            },
        ])
        .unwrap();
        let seq = Sequencer::new(p, PhaseId(1)).unwrap();
        assert_eq!(cycle.decide(&seq), 0);
        assert_eq!(cycle.green_left(&seq), None);
    }
}
