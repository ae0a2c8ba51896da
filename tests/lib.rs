//! Shared pieces of greenwave's end-to-end tests (`chain.rs`): scratch folders and the rule
//! for tests that need an external install.

use std::path::PathBuf;

/// A fresh scratch folder for one test, unique per process.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gw-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("creating a scratch folder");
    d
}

/// The ONNX Runtime library (`ORT_DYLIB_PATH`). Outside CI a missing library skips the
/// ONNX Runtime checks with a message; under CI (`CI` set, where `.ci/run` installs it) it
/// is a failure, so those checks can never be skipped silently where they are meant to run.
pub fn ort_library() -> Option<PathBuf> {
    match std::env::var_os("ORT_DYLIB_PATH") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => {
            panic!("ORT_DYLIB_PATH (libonnxruntime.so) is required under CI (.ci/run installs it)")
        }
        None => {
            eprintln!("SKIPPED: ONNX Runtime checks (set ORT_DYLIB_PATH; see .ci/run)");
            None
        }
    }
}
