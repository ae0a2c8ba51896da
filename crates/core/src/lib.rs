//! # greenwave-core
//!
//! The part of greenwave every other part stands on, the controller firmware included:
//! `#![no_std]`, and no allocator needed for anything a controller runs.
//!
//! * [`plan`]: movements, phases, the conflict matrix, per-phase timing and per-pair
//!   intergreens, validated once.
//! * [`sequencer`]: the safety sequencer. The policy proposes, the sequencer disposes: min
//!   green, max green, full yellow and all-red (and every intergreen) on every change, never
//!   conflicting greens.
//! * [`observation`]: the observation layout shared by the simulators, runtime and firmware.
//! * [`reward`]: reward definitions.
//! * [`transition`]: the `(s, a, r, s', log π)` record logged in the field.
//! * [`control`]: the classic control rules (fixed-time cycle, actuated gap-out / max-out),
//!   written once for simulators, runtime fallback and firmware.
//! * [`frames`]: the serial frame format of transition records (COBS, CRC-32), shared by
//!   the firmware that sends them and the cabinet that receives them.
//! * [`mlp`]: the postcard MLP blob and its allocation-free forward pass.
#![no_std]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod control;
pub mod frames;
pub mod mlp;
pub mod observation;
pub mod plan;
pub mod reward;
pub mod sequencer;
pub mod transition;
pub mod units;

pub use control::{
    ActuatedSignal, ClockStage, CycleStage, FixedCycle, FixedCycleError, MaxRed, MovementDetector,
    ProgramClock, ProgramClockError, ReadingsProblem,
};
pub use observation::{LaneReading, ObsError, ObsLayout};
pub use plan::{
    ConflictMatrix, Intergreen, Movement, MovementId, MovementSet, Phase, PhaseId, PhasePlan,
    PhaseTiming, PlanError, Turn,
};
pub use reward::{RewardInputs, RewardKind};
pub use sequencer::{
    Interval, OverrideReason, PhaseMask, Response, Sequencer, Signal, SignalFrame,
};
pub use transition::{ActionSource, Transition};
pub use units::Millis;
