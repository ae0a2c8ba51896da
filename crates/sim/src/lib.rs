//! # greenwave-sim
//!
//! Traffic simulation for greenwave:
//!
//! * [`env`](mod@env): the [`Env`] trait every simulator backend implements.
//! * [`EmbeddedEnv`]: the embedded mesoscopic simulator (pure Rust, the default).
//! * [`scenario`]: built-in scenarios and the TOML scenario format; [`scenario::load`]
//!   resolves a name or a file path.
//! * [`controllers`]: fixed-time (Webster), actuated and max-pressure control, written
//!   against [`Env`] so they drive every backend.
//! * [`PolicyMasks`]: a learned policy's action masks under the max-red rule.
#![warn(missing_docs)]

pub mod controllers;
pub mod demand;
mod embedded;
pub mod env;
mod network;
mod policy_masks;
pub mod scenario;
#[cfg(feature = "sumo")]
pub mod sumo;
#[cfg(test)]
mod test_support;

pub use controllers::{run_episode, Controller, ControllerKind};
pub use embedded::{EmbeddedEnv, VehicleCounts, GAP_NONE_S};
pub use env::{
    lane_phase_incidence, Env, EnvError, EpisodeMetrics, MovementDetector, SignalSpec, StepOutcome,
    StepStarted,
};
pub use policy_masks::{MaxRedBound, PolicyMasks};
pub use scenario::{load, Scenario, ScenarioError};
