//! # greenwave-learn
//!
//! The learning code the workstation and the controller share: candle actor/critic
//! networks, on-policy PPO with GAE, the off-policy Q-critic PPO used for fine-tuning, and
//! policies as ONNX (write, and read back from the initialisers) with their manifest.
//! CPU by default; feature `cuda` builds candle with CUDA (never in CI).
#![warn(missing_docs)]

pub mod discount;
pub mod gae;
pub mod manifest;
pub mod nets;
pub mod normalizer;
pub mod offpolicy;
pub mod onnx;
pub mod ppo;
pub mod shared;
pub mod weights;

pub use discount::Discount;
pub use manifest::{Manifest, Provenance};
pub use nets::{ActorCritic, Adam, MlpNet};
pub use normalizer::{RewardScale, RunningObsStats};
pub use shared::{specialize, Incidence, SharedActorCritic, SharedWeights};
pub use weights::{ObsNormalization, PolicyWeights};
