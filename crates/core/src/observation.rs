//! The observation layout shared by the simulators, the runtime and the firmware.
//!
//! For one signal with `L` observed lanes and `P` phases the observation is `2L + P + 3`
//! floats, in this order. An observed "lane" is a detection zone: the embedded simulator
//! and the firmware observe each incoming lane once; the SUMO backend observes each as a
//! stop-bar zone then an advance zone (greenwave-sim's `sumo::ZONES_PER_LANE`), so there
//! `L` is twice its incoming lanes, plus two pedestrian zones per crossing the light
//! controls (the pedestrians at its kerb and on it, per 8 people; `sumo::PEDESTRIANS_PER_ZONE`)
//! unless they are left out.
//!
//! | offset | size | meaning | range |
//! |---|---|---|---|
//! | 0 | L | density of each incoming lane: vehicles / lane storage | 0..=1.5 |
//! | L | L | queue of each incoming lane: halted vehicles / lane storage | 0..=1.5 |
//! | 2L | P | one-hot of the target phase (green now, or being changed to) | 0 or 1 |
//! | 2L+P | 1 | 1 during a change (yellow or all-red) | 0 or 1 |
//! | 2L+P+1 | 1 | 1 once the current green has served min green | 0 or 1 |
//! | 2L+P+2 | 1 | time in the current green / its max green (0 during a change) | 0..=1 |
//!
//! **Program-clock lanes.** A policy trained on SUMO with its program clock (the default
//! of `greenwave train` there; the manifest's `program_clock`) reads `P` more lanes after
//! the detector zones: lane `L − P + p` has density 1 when the junction's own timing
//! program serves (or changes to) phase `p` at that moment, 0 otherwise, and queue 0
//! ([`crate::ProgramClock::write_readings`]). The table is unchanged: they are lanes, and a
//! shared policy reads them through the lane–phase incidence (each carries its phase's
//! movements).
//!
//! Lane fractions may exceed 1 a little (short vehicles pack tighter than the storage
//! estimate), never 1.5: a reading outside `0..=1.5`, or not finite, is refused, because
//! it can only come from a faulty detector.

use serde::{Deserialize, Serialize};

use crate::sequencer::{Interval, Sequencer};

/// Layout version; bump when the table above changes.
pub const OBS_LAYOUT_VERSION: u16 = 1;
/// Largest lane fraction accepted from a detector.
pub const MAX_LANE_FRACTION: f32 = 1.5;

/// One incoming lane's detector reading, as fractions of the lane's storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaneReading {
    /// Vehicles on the lane / vehicles the lane can store.
    pub density: f32,
    /// Halted vehicles on the lane / vehicles the lane can store.
    pub queue: f32,
}

impl LaneReading {
    /// A reading from vehicle counts and the lane's storage in vehicles.
    pub fn from_counts(vehicles: f32, halted: f32, storage_veh: f32) -> Self {
        LaneReading {
            density: vehicles / storage_veh,
            queue: halted / storage_veh,
        }
    }
}

/// Which field of a lane reading was bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneField {
    /// The density.
    Density,
    /// The queue.
    Queue,
}

impl core::fmt::Display for LaneField {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            LaneField::Density => "density",
            LaneField::Queue => "queue",
        })
    }
}

/// Why an observation could not be built.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum ObsError {
    /// Readings for the wrong number of lanes.
    #[error("expected readings for {expected} lanes, got {got}")]
    LaneCount {
        /// Lanes in the layout.
        expected: usize,
        /// Readings given.
        got: usize,
    },
    /// Output buffer of the wrong size.
    #[error("observation buffer holds {got} floats, layout needs {expected}")]
    BufferSize {
        /// The layout's dimension.
        expected: usize,
        /// The buffer's length.
        got: usize,
    },
    /// The sequencer's plan has a different phase count from the layout.
    #[error("layout has {expected} phases, the signal's plan has {got}")]
    PhaseCount {
        /// Phases in the layout.
        expected: usize,
        /// Phases in the plan.
        got: usize,
    },
    /// A reading that no working detector can produce.
    #[error("lane {lane}: {field} reading {value} is not a finite value in 0..=1.5")]
    ImpossibleReading {
        /// The lane index.
        lane: usize,
        /// Which field.
        field: LaneField,
        /// The value read.
        value: f32,
    },
}

/// The shape of one signal's observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObsLayout {
    /// Incoming lanes observed.
    pub n_lanes: u16,
    /// Phases of the plan (one-hot width, and the policy's action count).
    pub n_phases: u8,
}

impl ObsLayout {
    /// The layout of a signal whose detectors supply `detector_lanes` lanes under a plan of
    /// `n_phases` phases, with the program clock's `n_phases` lanes after them when
    /// `program_clock` (the module docs). The one place the clock's lanes are added: the
    /// simulators, the runtime and the firmware all build their layouts here, and
    /// [`ObsLayout::detector_lanes`] is its inverse. `None` when the lanes do not fit the
    /// layout's `u16` or the phases its `u8`.
    pub fn for_signal(detector_lanes: usize, n_phases: usize, program_clock: bool) -> Option<Self> {
        let clock_lanes = if program_clock { n_phases } else { 0 };
        let n_lanes = detector_lanes.checked_add(clock_lanes)?;
        Some(ObsLayout {
            n_lanes: u16::try_from(n_lanes).ok()?,
            n_phases: u8::try_from(n_phases).ok()?,
        })
    }

    /// The lanes a signal's detectors supply: the layout's, less the program clock's one
    /// per phase when `program_clock` (the inverse of [`ObsLayout::for_signal`]; 0 for a
    /// layout too narrow to hold the clock).
    pub const fn detector_lanes(&self, program_clock: bool) -> usize {
        let clock_lanes = if program_clock {
            self.n_phases as usize
        } else {
            0
        };
        (self.n_lanes as usize).saturating_sub(clock_lanes)
    }

    /// Number of floats in an observation.
    pub const fn dim(&self) -> usize {
        2 * self.n_lanes as usize + self.n_phases as usize + 3
    }

    /// Offset of the phase one-hot.
    pub const fn phase_offset(&self) -> usize {
        2 * self.n_lanes as usize
    }

    /// The action mask implied by an observation of this layout: during a change or before
    /// min green only the target phase, otherwise every phase. This is exactly
    /// [`Sequencer::action_mask`] at the moment the observation was taken, so logged
    /// observations carry their mask with them. `None` if `obs` has the wrong size or no
    /// target phase is marked.
    pub fn mask_from_obs(&self, obs: &[f32]) -> Option<crate::sequencer::PhaseMask> {
        let p = self.n_phases as usize;
        // A mask has one bit per phase: a layout with more phases than a plan may hold
        // (a corrupt manifest) has no mask.
        if obs.len() != self.dim() || p > crate::plan::MAX_PHASES {
            return None;
        }
        let off = self.phase_offset();
        let target = obs[off..off + p].iter().position(|&x| x > 0.5)?;
        let in_change = obs[off + p] > 0.5;
        let min_green_served = obs[off + p + 1] > 0.5;
        Some(crate::sequencer::PhaseMask::for_state(
            p,
            crate::plan::PhaseId(target as u8),
            !in_change && min_green_served,
        ))
    }

    /// Writes the observation for `lanes` and the sequencer's state into `out`.
    pub fn write(
        &self,
        lanes: &[LaneReading],
        seq: &Sequencer,
        out: &mut [f32],
    ) -> Result<(), ObsError> {
        let l = self.n_lanes as usize;
        let p = self.n_phases as usize;
        if lanes.len() != l {
            return Err(ObsError::LaneCount {
                expected: l,
                got: lanes.len(),
            });
        }
        if out.len() != self.dim() {
            return Err(ObsError::BufferSize {
                expected: self.dim(),
                got: out.len(),
            });
        }
        if seq.plan().n_phases() != p {
            return Err(ObsError::PhaseCount {
                expected: p,
                got: seq.plan().n_phases(),
            });
        }
        for (lane, r) in lanes.iter().enumerate() {
            for (field, value) in [(LaneField::Density, r.density), (LaneField::Queue, r.queue)] {
                if !(value.is_finite() && (0.0..=MAX_LANE_FRACTION).contains(&value)) {
                    return Err(ObsError::ImpossibleReading { lane, field, value });
                }
            }
            out[lane] = r.density;
            out[l + lane] = r.queue;
        }
        let one_hot = &mut out[2 * l..2 * l + p];
        one_hot.fill(0.0);
        one_hot[seq.interval().target().0 as usize] = 1.0;
        let flags = &mut out[2 * l + p..];
        match seq.interval() {
            Interval::Green { phase } => {
                let max = seq.plan().phases()[phase.0 as usize].timing.max_green;
                flags[0] = 0.0;
                flags[1] = if seq.min_green_served() { 1.0 } else { 0.0 };
                flags[2] = (seq.in_interval().0 as f32 / max.0 as f32).min(1.0);
            }
            _ => {
                flags[0] = 1.0;
                flags[1] = 0.0;
                flags[2] = 0.0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PhaseId, PhasePlan, PhaseTiming};
    use crate::units::Millis;

    fn seq() -> Sequencer {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        Sequencer::new(plan, PhaseId(1)).unwrap()
    }

    #[test]
    fn layout_matches_table() {
        let layout = ObsLayout {
            n_lanes: 2,
            n_phases: 4,
        };
        assert_eq!(layout.dim(), 11);
        let mut s = seq();
        s.tick(Millis::from_secs(10));
        let lanes = [
            LaneReading {
                density: 0.5,
                queue: 0.25,
            },
            LaneReading::from_counts(3.0, 1.0, 10.0),
        ];
        let mut out = [9.0; 11];
        layout.write(&lanes, &s, &mut out).unwrap();
        assert_eq!(
            out,
            [0.5, 0.3, 0.25, 0.1, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.25]
        );
        assert_eq!(layout.mask_from_obs(&out), Some(s.action_mask()));
        s.request(3);
        layout.write(&lanes, &s, &mut out).unwrap();
        assert_eq!(&out[4..], &[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        assert_eq!(layout.mask_from_obs(&out), Some(s.action_mask()));
        let fresh = seq();
        layout.write(&lanes, &fresh, &mut out).unwrap();
        assert_eq!(layout.mask_from_obs(&out), Some(fresh.action_mask()));
        assert_eq!(layout.mask_from_obs(&out[..3]), None);
        // A corrupt manifest's layout with more phases than a mask has bits: no mask.
        let wide = ObsLayout {
            n_lanes: 0,
            n_phases: 40,
        };
        let mut obs = [0.0; 43];
        obs[39] = 1.0;
        obs[41] = 1.0;
        assert_eq!(wide.mask_from_obs(&obs), None);
    }

    #[test]
    fn a_program_clock_adds_one_lane_per_phase() {
        let plain = ObsLayout::for_signal(12, 4, false).unwrap();
        assert_eq!(
            plain,
            ObsLayout {
                n_lanes: 12,
                n_phases: 4
            }
        );
        let clocked = ObsLayout::for_signal(12, 4, true).unwrap();
        assert_eq!(clocked.n_lanes, 16);
        assert_eq!(clocked.dim(), plain.dim() + 8);
        assert_eq!(clocked.detector_lanes(true), 12);
        assert_eq!(clocked.detector_lanes(false), 16);
        assert_eq!(
            ObsLayout::for_signal(0, 3, false)
                .unwrap()
                .detector_lanes(true),
            0
        );
        assert_eq!(ObsLayout::for_signal(65_533, 4, true), None);
        assert_eq!(
            ObsLayout::for_signal(65_535, 0, true).unwrap().n_lanes,
            u16::MAX
        );
        assert_eq!(ObsLayout::for_signal(usize::MAX, 1, true), None);
        assert_eq!(ObsLayout::for_signal(1, 256, false), None);
    }

    proptest::proptest! {
        /// `detector_lanes` undoes `for_signal`, clock or not.
        #[test]
        fn detector_lanes_inverts_for_signal(
            lanes in 0usize..70_000,
            phases in 0usize..300,
            clock: bool,
        ) {
            match ObsLayout::for_signal(lanes, phases, clock) {
                Some(layout) => {
                    proptest::prop_assert_eq!(layout.detector_lanes(clock), lanes);
                    proptest::prop_assert_eq!(layout.n_phases as usize, phases);
                }
                None => {
                    let clock_lanes = if clock { phases } else { 0 };
                    proptest::prop_assert!(phases > 255 || lanes + clock_lanes > 65_535);
                }
            }
        }
    }

    #[test]
    fn impossible_readings_name_the_lane() {
        let layout = ObsLayout {
            n_lanes: 2,
            n_phases: 4,
        };
        let s = seq();
        let mut out = [0.0; 11];
        let bad = [
            LaneReading::default(),
            LaneReading {
                density: 0.1,
                queue: f32::NAN,
            },
        ];
        let err = layout.write(&bad, &s, &mut out).unwrap_err();
        assert!(matches!(
            err,
            ObsError::ImpossibleReading {
                lane: 1,
                field: LaneField::Queue,
                ..
            }
        ));
        let neg = [
            LaneReading {
                density: -0.1,
                queue: 0.0,
            },
            LaneReading::default(),
        ];
        assert!(layout.write(&neg, &s, &mut out).is_err());
        assert_eq!(
            layout.write(&bad[..1], &s, &mut out),
            Err(ObsError::LaneCount {
                expected: 2,
                got: 1
            })
        );
        assert_eq!(
            layout.write(&neg, &s, &mut out[..3]),
            Err(ObsError::BufferSize {
                expected: 11,
                got: 3
            })
        );
    }
}
