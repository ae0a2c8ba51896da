//! The bodies of greenwave's fuzz targets: one plain function per parser of bytes that come
//! from outside the process. Each takes arbitrary bytes and must return without panicking
//! (a panic, an overflow, a hang or an out-of-memory abort is a bug in the parser).
//!
//! `fuzz/` (its own workspace, cargo-fuzz on nightly) wraps each function in a libFuzzer
//! target of the same name; `tests/replay_corpora.rs` replays the committed corpora
//! `fuzz/corpus/<target>/` through the same functions on the stable toolchain, so CI checks
//! every input the fuzzers kept without nightly.
//!
//! Targets that cover two parsers pick one with the first byte (even / odd), so that one
//! fuzzing run and one corpus serve both.

#![forbid(unsafe_code)]

mod targets;

pub use targets::*;

/// A target: its name (the corpus folder and the cargo-fuzz binary) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target built with the enabled features, by name.
pub fn all_targets() -> Vec<Target> {
    #[allow(unused_mut)]
    let mut v: Vec<Target> = vec![
        ("log_segment", log_segment),
        ("log_recovery", log_recovery),
        ("bundle", bundle),
        ("scenario_toml", scenario_toml),
        ("firmware_frames", firmware_frames),
        ("onnx_policy", onnx_policy),
        ("site_config", site_config),
        ("policy_store", policy_store),
    ];
    #[cfg(feature = "sumo")]
    v.extend([
        ("sumo_xml", sumo_xml as fn(&[u8])),
        ("traci_reply", traci_reply),
        ("sumo_timing", sumo_timing),
        ("sumo_config", sumo_config),
    ]);
    v
}
