//! The trusted public keys given with `--trust` (`run`, `verify`, `finetune`, `rollback`).

use std::path::PathBuf;

use anyhow::Result;
use greenwave_runtime::bundle;

/// Loads each `--trust` file as an ed25519 public key.
pub fn trusted_keys(paths: &[PathBuf]) -> Result<Vec<ed25519_dalek::VerifyingKey>> {
    paths
        .iter()
        .map(|p| bundle::load_public_key(p).map_err(anyhow::Error::from))
        .collect()
}
