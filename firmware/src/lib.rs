//! # greenwave-firmware
//!
//! `#![no_std]` controller firmware for microcontroller-class signal controllers
//! (Cortex-M4F-like: ≥ 256 kB flash, ≥ 64 kB RAM). It runs the same policy blob and the same
//! safety sequencer as the Linux runtime, with no allocator:
//!
//! * [`heads`]: signal heads (red/yellow/green per signal group) over `embedded-hal`
//!   [`OutputPin`](embedded_hal::digital::OutputPin)s, and the lamp-sense readback inputs;
//! * [`detectors`]: debounced loop detectors over [`InputPin`](embedded_hal::digital::InputPin)s,
//!   counts and occupancy per decision interval, and the lane estimate (vehicles, queue)
//!   the observation is built from;
//! * [`clock`]: the monotonic millisecond tick source;
//! * [`board`]: the board configuration and its pin map;
//! * [`policy`]: the MLP policy from the postcard blob (f32 or int8), checked against the plan;
//! * fixed time when no trusted policy is available: greenwave-core's [`FixedCycle`], the
//!   fixed-time rule the simulators and the roadside runtime run too;
//! * [`monitor`]: the conflict monitor, independent of the sequencer, that latches flash;
//! * [`frames`]: the heapless transition ring and its COBS frames over `embedded-io`, plus the
//!   decoder the host side uses;
//! * [`controller`]: the loop tying them together.
#![no_std]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod board;
pub mod clock;
pub mod controller;
pub mod detectors;
pub mod frames;
pub mod heads;
pub mod monitor;
pub mod policy;

use greenwave_core::Transition;

pub use board::{BoardConfig, BoardPins, LaneConfig, PinId, PinMap, PinProvider, Polarity};
pub use clock::MonotonicClock;
pub use controller::{Controller, ControllerError, Decision, Mode, PollReport};
pub use frames::{decode_frame, FrameError, FrameReader, TransitionRing};
pub use greenwave_core::{
    ClockStage, FixedCycle, FixedCycleError, ProgramClock, ProgramClockError,
};
pub use heads::Lamps;
pub use monitor::{ConflictMonitor, FaultKind, MonitorCard, MonitorFault};
pub use policy::{FallbackReason, Policy};

/// Observation capacity of the transitions this firmware logs. The single-4way layout
/// (12 lanes, 4 phases) needs `2·12 + 4 + 3 = 31`, and `2·(12 + 4) + 4 + 3 = 39` with the
/// program clock's lane per phase; layouts that do not fit are refused at start-up.
pub const OBS_CAPACITY: usize = 40;

/// The transition record as the firmware stores it. The wire format does not depend on the
/// capacity, so the host decodes frames into `Transition` with its default capacity.
pub type FieldTransition = Transition<OBS_CAPACITY>;
