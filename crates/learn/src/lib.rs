//! # greenwave-learn
//!
//! The learning code the workstation and the controller share: candle actor/critic
//! networks, on-policy PPO with GAE, and the off-policy Q-critic PPO used for fine-tuning.
//! Policies as ONNX and their manifest are `greenwave-policy`'s (re-exported here).
//! CPU by default; feature `cuda` builds candle with CUDA (never in CI).
#![warn(missing_docs)]

pub mod activation;
pub mod discount;
pub mod gae;
mod lane_pool;
pub mod nets;
pub mod normalizer;
pub mod offpolicy;
pub mod ppo;
pub mod shared;

// The policy contract lives in greenwave-policy (no candle); re-exported so that
// `greenwave_learn::{manifest, onnx, weights}` keep working.
pub use greenwave_policy::{files, manifest, onnx, weights};

pub use discount::Discount;
pub use greenwave_policy::{Manifest, ObsNormalization, PolicyWeights, Provenance};
pub use nets::{ActorCritic, Adam, MlpNet};
pub use normalizer::{RewardScale, RunningObsStats};
pub use shared::{specialize, Incidence, SharedActorCritic, SharedWeights};
