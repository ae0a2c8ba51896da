//! # greenwave-policy
//!
//! The policy contract between the workstation and the controller, as plain data and
//! without candle or a simulator, so that the roadside runtime can read and check a policy
//! without the training stack:
//!
//! * [`manifest`]: the [`Manifest`] stored inside the ONNX model and beside it in a bundle.
//! * [`weights`]: a policy's parameters as plain data ([`PolicyWeights`],
//!   [`ObsNormalization`]) and the plain-Rust reference forward pass.
//! * [`onnx`]: writing the policy as ONNX (`obs` → `logits`, `value`) and reading weights
//!   and manifest back.
//! * [`files`]: the exported policy as files (ONNX, firmware blobs, manifest JSON), as
//!   `greenwave export` writes them and `greenwave bundle` packs them.
//! * [`bundle`]: signed policy bundles (ed25519 over SHA-256 digests): [`bundle::keygen`],
//!   [`bundle::pack_and_sign`], [`bundle::verify_and_load`].
#![warn(missing_docs)]

pub mod bundle;
pub mod files;
pub mod manifest;
pub mod onnx;
pub mod weights;

pub use manifest::{Manifest, Provenance};
pub use weights::{ObsNormalization, PolicyWeights};
