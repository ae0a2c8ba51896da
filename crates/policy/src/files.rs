//! A policy as files: what `greenwave export` (and the Python package's export) writes and
//! `greenwave bundle` packs — the ONNX model with the manifest inside, the firmware's f32
//! and int8 postcard blobs and the manifest JSON beside it (`X.onnx`, `X.blob`,
//! `X.int8.blob`, `X.manifest.json`).

use std::path::{Path, PathBuf};

use greenwave_core::mlp::BlobError;

use crate::{onnx, Manifest, PolicyWeights};

/// The files of one exported policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFiles {
    /// The ONNX model.
    pub onnx: PathBuf,
    /// f32 firmware blob.
    pub blob: PathBuf,
    /// int8 firmware blob.
    pub blob_int8: PathBuf,
    /// Manifest JSON.
    pub manifest: PathBuf,
}

/// Why the files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file or folder could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The actor does not fit the firmware blob format.
    #[error("{which} firmware blob: {source}")]
    Blob {
        /// `f32` or `int8`.
        which: &'static str,
        /// The cause.
        source: BlobError,
    },
    /// The manifest could not be serialised.
    #[error("manifest JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The weights are not a sound policy (a NaN or infinite weight).
    #[error("the policy's weights: {0}")]
    Weights(#[from] onnx::OnnxError),
}

/// Paths of the side files of an ONNX model path: `X.blob`, `X.int8.blob`, `X.manifest.json`.
pub fn side_paths(onnx_path: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        onnx_path.with_extension("blob"),
        onnx_path.with_extension("int8.blob"),
        onnx_path.with_extension("manifest.json"),
    )
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    std::fs::write(path, bytes).map_err(|source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `weights` under `manifest` to `out` (an `.onnx` path) and its side files;
/// `plan_hash` is the plan's `PhasePlan::hash()` (the blob carries it as a number).
pub fn write_policy_files(
    weights: &PolicyWeights,
    manifest: &Manifest,
    plan_hash: u64,
    out: &Path,
) -> Result<PolicyFiles, WriteError> {
    // Every file is made, and checked, before the first is written: a policy that cannot be
    // exported whole leaves the files of an earlier export as they were, never a mix.
    let model = onnx::export(weights, manifest);
    onnx::check_finite(&model)?;
    let mlp = weights.actor_mlp(plan_hash, manifest.policy_version);
    let blob_of = |int8: bool, which: &'static str| {
        mlp.to_blob(int8)
            .map_err(|source| WriteError::Blob { which, source })
    };
    let (f32_bytes, int8_bytes) = (blob_of(false, "f32")?, blob_of(true, "int8")?);
    let manifest_json = serde_json::to_string_pretty(manifest)?;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| WriteError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let (blob, blob_int8, manifest_path) = side_paths(out);
    write(out, &model)?;
    write(&blob, &f32_bytes)?;
    write(&blob_int8, &int8_bytes)?;
    write(&manifest_path, manifest_json.as_bytes())?;
    Ok(PolicyFiles {
        onnx: out.to_path_buf(),
        blob,
        blob_int8,
        manifest: manifest_path,
    })
}
