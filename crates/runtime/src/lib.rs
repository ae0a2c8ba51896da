//! # greenwave-runtime
//!
//! What runs in the signal cabinet: a Linux-class controller that loads a signed policy,
//! chooses signal phases every decision interval under the safety sequencer, falls back to
//! a classic plan whenever the policy or the detectors cannot be trusted, and logs every
//! field transition crash-safely for fine-tuning.
//!
//! * [`bundle`]: signed policy bundles (ed25519 over SHA-256 digests): [`bundle::keygen`],
//!   [`bundle::pack_and_sign`], [`bundle::verify_and_load`].
//! * [`bundle_set`]: several bundles for one field (one per signal of a policy exported
//!   per signal): which signal runs which.
//! * [`inference`]: one [`PolicyBackend`] trait; tract (default), ONNX Runtime (feature
//!   `ort`) and a plain-Rust reference; greedy or bounded ε-greedy action choice.
//! * [`controller`]: the decision loop ([`Controller`]), its [`DetectorSource`] and
//!   [`SignalSink`] interfaces, the watchdog and the fallback controllers.
//! * [`log`]: the append-only, crash-safe transition log and its reader.
//! * [`site`]: the cabinet's site configuration (plans, layouts, fallback timing) from a
//!   TOML file, so a field controller needs no simulator.
//!
//! Fine-tuning from the log is `greenwave-finetune` (it needs candle; this crate does not),
//! and the `greenwave-controller` binary, with `collect` for firmware serial frames, is the
//! `greenwave-controller` package.
//!
//! Feature `sim` (default) adds the simulators as fields and the scenario-derived fallback
//! plans; `ort` the ONNX Runtime backend; `sumo` the SUMO field. Without default features
//! the library depends on neither candle, a simulator nor the firmware crate.
#![warn(missing_docs)]

/// Signed policy bundles (in greenwave-policy, re-exported).
pub use greenwave_policy::bundle;
pub mod bundle_set;
pub mod controller;
pub mod inference;
pub mod log;
pub mod site;

pub use controller::{
    Controller, ControllerConfig, ControllerError, DetectorSource, SignalSink, SignalSpec,
};
pub use inference::{BackendKind, InferenceError, PolicyBackend};

/// An error and its causes on one line, `outer: inner: …`, as the binaries print them. A
/// cause whose text its outer message already ends with (`reading F: … (os error 2)`
/// over the I/O error itself) is not repeated.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut outer = line.clone();
    let mut cause = err.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !outer.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        outer = text;
        cause = e.source();
    }
    line
}

/// Peak resident set size of this process in KiB (`VmHWM` from `/proc/self/status`;
/// `None` where that file does not exist).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("reading x.pub: {source}")]
    struct Reading {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("loading the key")]
    struct Loading {
        #[source]
        inner: Reading,
    }

    #[test]
    fn a_cause_already_in_its_outer_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Loading {
            inner: Reading { source: io },
        };
        assert_eq!(
            super::error_chain(&e),
            "loading the key: reading x.pub: no such file"
        );
    }
}
