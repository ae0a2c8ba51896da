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
    /// f32 firmware blob (not written for a policy acting at a decision temperature).
    pub blob: PathBuf,
    /// int8 firmware blob (likewise).
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

/// Writes several files as a set: each to a new file of its mode (on Unix) beside it,
/// synced, then all renamed into place (an old file's mode is not kept, and a link at a
/// destination is replaced, not written through). A failure before the renames (a full disk,
/// a destination that is a folder) leaves every destination as it was, never some files
/// of the new set beside others of the old one. On Unix each folder is then synced, so
/// that the new names survive a crash too (a file system that cannot sync a folder,
/// `EINVAL` or unsupported, is let be: the files are in place and their contents synced).
/// Returns the destination and error of the first failure.
pub fn write_together(files: &[(&Path, &[u8], u32)]) -> Result<(), (PathBuf, std::io::Error)> {
    let tmp_of = |p: &Path| {
        let mut name = p.as_os_str().to_owned();
        name.push(format!(".tmp-{}", std::process::id()));
        PathBuf::from(name)
    };
    let staged: Vec<PathBuf> = files.iter().map(|(p, _, _)| tmp_of(p)).collect();
    let unstage = || staged.iter().for_each(|t| drop(std::fs::remove_file(t)));
    for (&(path, bytes, mode), tmp) in files.iter().zip(&staged) {
        let written = refuse_folder(path).and_then(|()| stage(tmp, bytes, mode));
        if let Err(e) = written {
            unstage();
            return Err((path.to_path_buf(), e));
        }
    }
    for (&(path, _, _), tmp) in files.iter().zip(&staged) {
        if let Err(e) = std::fs::rename(tmp, path) {
            unstage();
            return Err((path.to_path_buf(), e));
        }
    }
    #[cfg(unix)]
    {
        let mut folders: Vec<&Path> = files
            .iter()
            .map(|(p, _, _)| p.parent().filter(|f| !f.as_os_str().is_empty()))
            .map(|f| f.unwrap_or(Path::new(".")))
            .collect();
        folders.sort();
        folders.dedup();
        for folder in folders {
            match std::fs::File::open(folder).and_then(|d| d.sync_all()) {
                Err(e)
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
                    ) =>
                {
                    let what =
                        format!("the files are written, but syncing their folder failed: {e}");
                    return Err((folder.to_path_buf(), std::io::Error::new(e.kind(), what)));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn refuse_folder(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(std::io::Error::other("it is a folder")),
        _ => Ok(()),
    }
}

fn stage(tmp: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    let _ = std::fs::remove_file(tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    opts.open(tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
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
    let all: [(&Path, &[u8], u32); 4] = [
        (out, &model, 0o644),
        (&manifest_path, manifest_json.as_bytes(), 0o644),
        (&blob, &f32_bytes, 0o644),
        (&blob_int8, &int8_bytes, 0o644),
    ];
    // A policy acting at a decision temperature gets no firmware blobs (the firmware acts
    // greedily; a bundle refuses them beside it). An earlier export's are removed first:
    // a failure or a crash then leaves the earlier model without its blobs, which no
    // bundle takes, never the new model beside blobs of other weights.
    let sampled = manifest.decision_temperature.is_some();
    if sampled {
        for stale in [&blob, &blob_int8] {
            match std::fs::remove_file(stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(WriteError::Io {
                        path: stale.clone(),
                        source: e,
                    })
                }
                _ => {}
            }
        }
    }
    let set = if sampled { &all[..2] } else { &all[..] };
    write_together(set).map_err(|(path, source)| WriteError::Io { path, source })?;
    Ok(PolicyFiles {
        onnx: out.to_path_buf(),
        blob,
        blob_int8,
        manifest: manifest_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export that fails part-way (its int8 blob's path is a folder) leaves the earlier
    /// export's four files as they were, and no temporary file.
    #[test]
    fn a_failed_export_leaves_the_earlier_one_whole() {
        let dir = std::env::temp_dir().join(format!("gw-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (w, m) = crate::onnx::tests::model();
        let out = dir.join("p.onnx");
        let files = write_policy_files(&w, &m, 7, &out).unwrap();
        let paths = [&files.onnx, &files.blob, &files.blob_int8, &files.manifest];
        let before: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
        std::fs::remove_file(&files.blob_int8).unwrap();
        std::fs::create_dir(&files.blob_int8).unwrap();
        let mut m2 = m.clone();
        m2.policy_version = 2;
        let err = write_policy_files(&w, &m2, 7, &out)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.int8.blob") && err.contains("folder"),
            "{err}"
        );
        for (p, old) in paths.iter().zip(&before).filter(|(p, _)| p.is_file()) {
            assert_eq!(&std::fs::read(p).unwrap(), old, "{} replaced", p.display());
        }
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
