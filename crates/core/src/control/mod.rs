//! The classic control rules, written once and used everywhere a signal is driven without
//! (or instead of) a policy: greenwave-sim's controllers, the roadside runtime's fallback and
//! the firmware.
//!
//! * [`FixedCycle`]: fixed-time control, each stage's phase green for its time, in order.
//! * [`ActuatedSignal`]: vehicle-actuated gap-out / max-out on per-movement detectors.
//! * [`MaxRed`]: the starvation bound — a phase with a call waits at most `max_red` for
//!   green — for max-pressure control and for every learned policy.
//! * [`ProgramClock`]: the junction's own timing program as a clock, the observation's
//!   program-clock lanes.
//! * [`MovementDetector`]: what a detector tells a controller about one movement.
//! * [`assigned_movements`]: which movements' detectors speak for a phase under actuated
//!   control (the detector-to-phase assignment).
//!
//! Each rule only *requests* phases; the [`Sequencer`](crate::Sequencer) still enforces
//! min/max green and the full clearance intervals. The action mask is
//! [`PhaseMask::for_state`](crate::PhaseMask::for_state), and relabelling a decision that
//! max green overrode is [`Transition::relabel_max_green`](crate::Transition::relabel_max_green).

mod actuated;
mod fixed_time;
mod max_red;
mod program_clock;

pub use actuated::ActuatedSignal;
pub use fixed_time::{CycleStage, FixedCycle, FixedCycleError, MAX_STAGES};
pub use max_red::{max_out_cycle, phases_with_calls, MaxRed, DEFAULT_MAX_RED};
pub use program_clock::{ClockStage, ProgramClock, ProgramClockError, MAX_CLOCK_STAGES};

use serde::{Deserialize, Serialize};

use crate::plan::{MovementSet, PhasePlan};

/// The movements of phase `phase` of `plan` whose detectors speak for it under actuated
/// control (extend it, call it): those of its movements that `assigned` (per phase, in
/// plan order) names, or all of them where `assigned` has no entry for the phase or its
/// entry names none of them (a phase always answers to some detector).
///
/// A movement served in two phases, yielding in one (SUMO's minor green `g`: a left turn
/// beside the opposing through) and with right of way in the other (its protected phase),
/// belongs to the second only where its lane is its own (a pocket): its queue, waiting
/// for a gap, says nothing about whether the first still moves traffic, and its calls must
/// bring up the protected phase, which serves nothing the first does not. From a lane it
/// shares with the through traffic it belongs to both, since a vehicle there may be going
/// straight on (greenwave-sim's SUMO model derives the assignment from the program and the
/// lanes so). Max-pressure does not use it: a yielding movement does discharge
/// in the phase where it yields.
///
/// Where an entry leaves a phase none of its movements, the phase answers to all of them,
/// yielding ones too, and their calls then do not bring up their protected phase from it.
pub fn assigned_movements(plan: &PhasePlan, assigned: &[MovementSet], phase: usize) -> MovementSet {
    let all = plan
        .phases()
        .get(phase)
        .map_or(MovementSet::EMPTY, |p| p.movements);
    match assigned.get(phase).map(|&a| a.and(all)) {
        Some(some) if !some.is_empty() => some,
        _ => all,
    }
}

/// Fraction of its downstream storage at which a movement counts as blocked: its
/// vehicles cannot leave the junction, so green spent on it is lost (and feeds gridlock).
pub const SPILLBACK_FRACTION: f32 = 0.9;

/// What the detectors say about one movement of a signal (indexed like the plan's
/// movements): the inputs of actuated and max-pressure control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MovementDetector {
    /// Vehicles halted (queued) for this movement.
    pub queue_veh: f32,
    /// Vehicles on the movement's incoming lanes (moving or not).
    pub upstream_veh: f32,
    /// Length of the movement's incoming lanes (m; the longest; 0 when unknown).
    pub upstream_length_m: f32,
    /// Vehicles on the movement's outgoing (downstream) lanes.
    pub downstream_veh: f32,
    /// Storage of the downstream lanes, in vehicles.
    pub downstream_storage_veh: f32,
    /// Seconds since a vehicle last passed this movement's stop-line detector
    /// (gap for actuated control); large when none has.
    pub gap_s: f32,
    /// Whether a vehicle is waiting at or approaching the stop line, or a pedestrian at
    /// the kerb of a crossing the movement serves (a detector call; a push button).
    pub call: bool,
}

/// Why a signal's movement readings cannot be used ([`MovementDetector::check_readings`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadingsProblem {
    /// Not one reading per plan movement.
    Count {
        /// Readings given.
        got: usize,
        /// The plan's movements.
        want: usize,
    },
    /// A reading no detector gives ([`MovementDetector::problem`]).
    Field {
        /// Which movement.
        movement: usize,
        /// Which field.
        field: &'static str,
    },
}

impl core::fmt::Display for ReadingsProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReadingsProblem::Count { got, want } => {
                write!(f, "{got} movement readings, its plan has {want} movements")
            }
            ReadingsProblem::Field { movement, field } => {
                write!(
                    f,
                    "movement {movement}: {field} is negative or not a number"
                )
            }
        }
    }
}

impl MovementDetector {
    /// Why this reading cannot be a detector's, if it cannot: a count, length, storage or
    /// gap that is negative or not a finite number (a faulty loop, a damaged recording).
    /// The fields are named as in the struct.
    pub fn problem(&self) -> Option<&'static str> {
        let fields = [
            ("queue_veh", self.queue_veh),
            ("upstream_veh", self.upstream_veh),
            ("upstream_length_m", self.upstream_length_m),
            ("downstream_veh", self.downstream_veh),
            ("downstream_storage_veh", self.downstream_storage_veh),
            ("gap_s", self.gap_s),
        ];
        fields
            .into_iter()
            .find(|(_, v)| !(v.is_finite() && *v >= 0.0))
            .map(|(name, _)| name)
    }

    /// What is wrong with one signal's readings `readings` for a plan of `n_movements`
    /// movements, if anything: not one reading per movement, or the first reading with a
    /// [`problem`](Self::problem). The one check of a field's movement readings, a replay's
    /// and a live field's alike.
    pub fn check_readings(
        readings: &[MovementDetector],
        n_movements: usize,
    ) -> Option<ReadingsProblem> {
        if readings.len() != n_movements {
            return Some(ReadingsProblem::Count {
                got: readings.len(),
                want: n_movements,
            });
        }
        readings.iter().enumerate().find_map(|(movement, d)| {
            d.problem()
                .map(|field| ReadingsProblem::Field { movement, field })
        })
    }

    /// Whether this movement can discharge: its downstream lanes are not (nearly) full.
    /// Movements without downstream storage (leaving the network) can always discharge.
    pub fn can_discharge(&self) -> bool {
        self.downstream_storage_veh <= 0.0
            || self.downstream_veh < SPILLBACK_FRACTION * self.downstream_storage_veh
    }

    /// Whether a vehicle of this movement still extends a green: one passed the detector
    /// less than `passage_s` ago and can leave the junction.
    pub fn extends_green(&self, passage_s: f32) -> bool {
        self.gap_s < passage_s && self.can_discharge()
    }

    /// Whether this movement calls for a green: a vehicle waits or approaches, and could
    /// leave the junction.
    pub fn calls(&self) -> bool {
        (self.call || self.queue_veh > 0.0) && self.can_discharge()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_that_no_detector_gives_is_named() {
        let ok = MovementDetector {
            gap_s: 1.0e6,
            ..MovementDetector::default()
        };
        assert_eq!(ok.problem(), None);
        let bad = [
            MovementDetector {
                queue_veh: f32::NAN,
                ..ok
            },
            MovementDetector {
                upstream_veh: -1.0,
                ..ok
            },
            MovementDetector {
                downstream_storage_veh: f32::INFINITY,
                ..ok
            },
            MovementDetector { gap_s: -0.5, ..ok },
        ];
        let named: std::vec::Vec<_> = bad.iter().map(MovementDetector::problem).collect();
        assert_eq!(
            named,
            [
                Some("queue_veh"),
                Some("upstream_veh"),
                Some("downstream_storage_veh"),
                Some("gap_s")
            ]
        );
    }
}
