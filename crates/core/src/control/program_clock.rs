//! The junction's own timing program as a clock: which plan phase the incumbent program
//! serves, or is changing to, at each moment of its cycle.
//!
//! A roadside controller knows two things a learned policy otherwise cannot see: the time,
//! and the timing plan the junction ran before it (its cycle, splits and offset, which on
//! a coordinated corridor or grid is what makes a green wave). A [`ProgramClock`] turns
//! them into readings: one pseudo-lane per plan phase, density 1 for the phase the program
//! is in at that moment (0 for the others), queue 0. They go after the detector lanes of
//! the signal's observation (see [`crate::observation`]), so a shared policy reads them
//! through the same lane–phase incidence as real lanes: clock lane `p` is "green" in the
//! phases that share a movement with phase `p`.
//!
//! Time is milliseconds on the program's time base: SUMO's simulation time, or a field
//! controller's cycle reference. The program is `(t − offset) mod cycle` into its cycle.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::observation::LaneReading;
use crate::plan::{PhaseId, PhasePlan};
use crate::units::Millis;

/// Most stages a program clock holds after merging neighbours that serve the same phase.
pub const MAX_CLOCK_STAGES: usize = 32;

/// One stage of a program: the plan phase it serves (or changes to) and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClockStage {
    /// The plan phase.
    pub phase: u8,
    /// How long the program stays in it (its green with the change interval before it).
    pub duration: Millis,
}

/// Why a program clock was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProgramClockError {
    /// No stage with a duration: the program never moves.
    #[error("a program clock needs at least one stage longer than 0 ms")]
    Empty,
    /// More stages than [`MAX_CLOCK_STAGES`] after merging.
    #[error("{got} stages, a program clock holds at most {max}")]
    TooManyStages {
        /// Stages after merging.
        got: usize,
        /// [`MAX_CLOCK_STAGES`].
        max: usize,
    },
    /// The cycle does not fit in a `u32` of milliseconds.
    #[error("the program's cycle is longer than {max_ms} ms")]
    CycleTooLong {
        /// The longest cycle counted.
        max_ms: u32,
    },
    /// A stage's phase is not in the plan.
    #[error("stage {stage}: phase {phase} is not in the plan ({n_phases} phases)")]
    UnknownPhase {
        /// The stage (after merging).
        stage: usize,
        /// Its phase.
        phase: u8,
        /// Phases in the plan.
        n_phases: usize,
    },
}

/// A signal's timing program as a clock (see the module documentation).
///
/// Not `Deserialize`: a clock is only made by [`ProgramClock::new`], whose checks
/// (a cycle above 0, stages merged and counted) the readings rely on. A site's clock is
/// stored as greenwave-runtime's `SiteProgramClock` and built through it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProgramClock {
    stages: Vec<ClockStage, MAX_CLOCK_STAGES>,
    /// The offset, reduced into `0..cycle`.
    offset: Millis,
    cycle: Millis,
}

impl ProgramClock {
    /// A clock of `stages` in program order, the program starting its cycle at time
    /// `offset_ms` (any sign; only its remainder modulo the cycle matters). Stages of
    /// 0 ms are dropped and neighbours serving the same phase merged.
    pub fn new(stages: &[ClockStage], offset_ms: i64) -> Result<Self, ProgramClockError> {
        let mut merged: Vec<ClockStage, MAX_CLOCK_STAGES> = Vec::new();
        let mut count = 0usize;
        let mut last_phase = None;
        let mut cycle_ms = 0u32;
        for s in stages.iter().filter(|s| s.duration.0 > 0) {
            cycle_ms = cycle_ms
                .checked_add(s.duration.0)
                .ok_or(ProgramClockError::CycleTooLong { max_ms: u32::MAX })?;
            if last_phase == Some(s.phase) {
                if let Some(last) = merged.last_mut().filter(|_| count <= MAX_CLOCK_STAGES) {
                    // Cannot overflow: the cycle, which includes both, fits a u32.
                    last.duration.0 += s.duration.0;
                }
                continue;
            }
            last_phase = Some(s.phase);
            count += 1;
            // Past capacity only the count grows, for the error below.
            let _ = merged.push(*s);
        }
        if count > MAX_CLOCK_STAGES {
            return Err(ProgramClockError::TooManyStages {
                got: count,
                max: MAX_CLOCK_STAGES,
            });
        }
        if cycle_ms == 0 {
            return Err(ProgramClockError::Empty);
        }
        let offset = Millis(offset_ms.rem_euclid(i64::from(cycle_ms)) as u32);
        Ok(ProgramClock {
            stages: merged,
            offset,
            cycle: Millis(cycle_ms),
        })
    }

    /// Checks every stage's phase against `plan`.
    pub fn check_plan(&self, plan: &PhasePlan) -> Result<(), ProgramClockError> {
        let n_phases = plan.n_phases();
        match self
            .stages
            .iter()
            .enumerate()
            .find(|(_, s)| s.phase as usize >= n_phases)
        {
            Some((stage, s)) => Err(ProgramClockError::UnknownPhase {
                stage,
                phase: s.phase,
                n_phases,
            }),
            None => Ok(()),
        }
    }

    /// The stages, merged, in program order.
    pub fn stages(&self) -> &[ClockStage] {
        &self.stages
    }

    /// The cycle length.
    pub fn cycle(&self) -> Millis {
        self.cycle
    }

    /// The offset, reduced into `0..cycle`.
    pub fn offset(&self) -> Millis {
        self.offset
    }

    /// The same program on a time base whose 0 is `origin_ms` of this one (a controller
    /// that starts counting at SUMO time `origin_ms`).
    pub fn with_time_origin(&self, origin_ms: u64) -> Self {
        let cycle = u64::from(self.cycle.0);
        let shift = origin_ms % cycle;
        ProgramClock {
            stages: self.stages.clone(),
            // (offset − origin) mod cycle, in 0..cycle.
            offset: Millis(((u64::from(self.offset.0) + cycle - shift) % cycle) as u32),
            cycle: self.cycle,
        }
    }

    /// The phase the program serves (or changes to) at time `t_ms`.
    pub fn phase_at(&self, t_ms: u64) -> PhaseId {
        let cycle = u64::from(self.cycle.0);
        let pos = (t_ms % cycle + cycle - u64::from(self.offset.0)) % cycle;
        let mut end = 0u64;
        for s in &self.stages {
            end += u64::from(s.duration.0);
            if pos < end {
                return PhaseId(s.phase);
            }
        }
        // Unreachable: the stages' durations sum to the cycle and pos < cycle.
        PhaseId(self.stages[self.stages.len() - 1].phase)
    }

    /// The clock's pseudo-lane readings at time `t_ms` into `out`, one per plan phase:
    /// density 1 for [`ProgramClock::phase_at`], 0 for the others; queue 0.
    pub fn write_readings(&self, t_ms: u64, out: &mut [LaneReading]) {
        let on = self.phase_at(t_ms).0 as usize;
        for (p, r) in out.iter_mut().enumerate() {
            *r = LaneReading {
                density: if p == on { 1.0 } else { 0.0 },
                queue: 0.0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(phase: u8, s: u32) -> ClockStage {
        ClockStage {
            phase,
            duration: Millis::from_secs(s),
        }
    }

    #[test]
    fn follows_the_cycle_from_its_offset() {
        // 30 s of phase 0 (27 s green after a 3 s change), 20 s of phase 1.
        let c = ProgramClock::new(&[stage(0, 3), stage(0, 27), stage(1, 20)], 10_000).unwrap();
        assert_eq!(c.stages().len(), 2, "neighbours of one phase merge");
        assert_eq!(c.cycle(), Millis::from_secs(50));
        // At t = 10 s the program starts its cycle.
        assert_eq!(c.phase_at(10_000), PhaseId(0));
        assert_eq!(c.phase_at(39_999), PhaseId(0));
        assert_eq!(c.phase_at(40_000), PhaseId(1));
        assert_eq!(c.phase_at(59_999), PhaseId(1));
        assert_eq!(c.phase_at(60_000), PhaseId(0));
        // Before the offset: the previous cycle's end.
        assert_eq!(c.phase_at(0), PhaseId(1));
        assert_eq!(c.phase_at(9_999), PhaseId(1));
    }

    #[test]
    fn a_negative_offset_is_the_same_as_its_remainder() {
        let a = ProgramClock::new(&[stage(0, 30), stage(1, 20)], -15_000).unwrap();
        let b = ProgramClock::new(&[stage(0, 30), stage(1, 20)], 35_000).unwrap();
        assert_eq!(a, b);
        for t in (0..200_000).step_by(1_000) {
            assert_eq!(a.phase_at(t), b.phase_at(t));
        }
    }

    #[test]
    fn readings_are_a_one_hot_density() {
        let c = ProgramClock::new(&[stage(0, 30), stage(2, 20)], 0).unwrap();
        let mut out = [LaneReading {
            density: 0.7,
            queue: 0.3,
        }; 3];
        c.write_readings(35_000, &mut out);
        let densities: [f32; 3] = core::array::from_fn(|p| out[p].density);
        assert_eq!(densities, [0.0, 0.0, 1.0]);
        assert!(out.iter().all(|r| r.queue == 0.0));
    }

    proptest::proptest! {
        /// The clock is the program: at every time it names the stage a walk through the
        /// unmerged stages from the offset reaches, and its one-hot has exactly one 1.
        #[test]
        fn phase_at_is_a_walk_through_the_program(
            raw in proptest::collection::vec((0u8..4, 0u32..40_000), 1..12),
            offset_ms in -500_000i64..500_000,
            t_ms in 0u64..10_000_000,
        ) {
            let stages: std::vec::Vec<ClockStage> = raw
                .iter()
                .map(|&(phase, ms)| ClockStage { phase, duration: Millis(ms) })
                .collect();
            let cycle: i64 = raw.iter().map(|&(_, ms)| i64::from(ms)).sum();
            let Ok(c) = ProgramClock::new(&stages, offset_ms) else {
                proptest::prop_assert_eq!(cycle, 0);
                return Ok(());
            };
            let pos = (t_ms as i64 - offset_ms).rem_euclid(cycle);
            let mut end = 0i64;
            let want = stages
                .iter()
                .find(|s| {
                    end += i64::from(s.duration.0);
                    pos < end
                })
                .map(|s| s.phase);
            proptest::prop_assert_eq!(Some(c.phase_at(t_ms).0), want);
            let mut out = [LaneReading::default(); 4];
            c.write_readings(t_ms, &mut out);
            let ones = out.iter().filter(|r| r.density == 1.0).count();
            proptest::prop_assert_eq!(ones, 1);
            proptest::prop_assert_eq!(out[want.unwrap() as usize].density, 1.0);
        }
    }

    #[test]
    fn a_later_time_origin_reads_the_same_program() {
        let c = ProgramClock::new(&[stage(0, 30), stage(1, 20), stage(2, 7)], 13_000).unwrap();
        for origin in [0u64, 5_000, 56_999, 57_000, 1_000_003] {
            let moved = c.with_time_origin(origin);
            for t in (0..300_000u64).step_by(500) {
                assert_eq!(
                    moved.phase_at(t),
                    c.phase_at(t + origin),
                    "origin {origin}, t {t}"
                );
            }
        }
    }

    #[test]
    fn refuses_what_cannot_be_a_clock() {
        assert_eq!(
            ProgramClock::new(&[stage(0, 0)], 0),
            Err(ProgramClockError::Empty)
        );
        let many: std::vec::Vec<ClockStage> = (0..40).map(|k| stage((k % 2) as u8, 1)).collect();
        assert_eq!(
            ProgramClock::new(&many, 0),
            Err(ProgramClockError::TooManyStages { got: 40, max: 32 })
        );
        let long = [
            ClockStage {
                phase: 0,
                duration: Millis(u32::MAX),
            },
            stage(1, 1),
        ];
        assert!(matches!(
            ProgramClock::new(&long, 0),
            Err(ProgramClockError::CycleTooLong { .. })
        ));
    }
}
