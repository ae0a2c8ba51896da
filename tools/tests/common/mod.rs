//! Shared pieces of the `greenwave` binary's tests: running it as a user would, and
//! scratch folders.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `greenwave` binary with `args`.
pub fn greenwave(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_greenwave"))
        .args(args)
        .output()
        .expect("the greenwave binary runs")
}

/// Stdout of a run that must have succeeded (its stderr in the failure message otherwise).
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr of a run that must have failed.
pub fn failed(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "expected a failure, got stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch path for one test, unique per process, removed first if left over (not
/// created: the commands under test create their output folders).
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("greenwave-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
