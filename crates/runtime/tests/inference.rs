//! Every backend computes the policy the exporter wrote (to 1e-5 against the plain-Rust
//! reference), and a missing ONNX Runtime is an error, never a panic.
//!
//! The ONNX Runtime comparison needs the library: outside CI it is skipped, saying why,
//! when `ORT_DYLIB_PATH` is unset; under CI (`CI` set) that is a failure.

mod common;

use common::{plan_and_layout, scenario, synthetic_weights};
use greenwave_core::Millis;
use greenwave_policy::{onnx, Manifest, Provenance};
use greenwave_runtime::inference::{load_backend, BackendKind, InferenceError, PolicyBackend};

fn observations(n: usize, d: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|k| {
            (0..d)
                .map(|j| ((k * 7 + j * 13) % 29) as f32 / 20.0)
                .collect()
        })
        .collect()
}

fn model() -> (Vec<u8>, greenwave_policy::PolicyWeights) {
    let (_, layout) = plan_and_layout(&scenario());
    let w = synthetic_weights(layout, &[64, 64], 9);
    (exported(&w), w)
}

/// `w` exported for the test scenario's plan.
fn exported(w: &greenwave_policy::PolicyWeights) -> Vec<u8> {
    let (plan, layout) = plan_and_layout(&scenario());
    let m = Manifest::new(
        &plan,
        layout,
        Millis::from_secs(5),
        w.hidden(),
        Provenance::default(),
    );
    onnx::export(w, &m)
}

fn assert_matches_reference(backend: &mut dyn PolicyBackend, w: &greenwave_policy::PolicyWeights) {
    let d = w.obs_dim();
    let mut logits = vec![0.0; w.n_actions()];
    for obs in observations(50, d) {
        let value = backend.infer(&obs, &mut logits).unwrap();
        let (rl, rv) = w.forward(&obs);
        for (a, b) in logits.iter().zip(&rl) {
            assert!(
                (a - b).abs() <= 1e-5,
                "{}: logits {logits:?} vs {rl:?}",
                backend.name()
            );
        }
        assert!(
            (value - rv).abs() <= 1e-5,
            "{}: value {value} vs {rv}",
            backend.name()
        );
    }
    let err = backend.infer(&vec![0.0; d - 1], &mut logits).unwrap_err();
    assert!(
        matches!(
            err,
            InferenceError::Shape {
                what: "observation",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn tract_and_matvec_compute_the_exported_policy() {
    let (bytes, w) = model();
    for kind in [BackendKind::Tract, BackendKind::Matvec] {
        let mut b = load_backend(kind, &bytes, w.obs_layout, None).unwrap();
        assert_eq!(b.name(), kind.name());
        assert_matches_reference(b.as_mut(), &w);
    }
}

#[test]
fn unreadable_models_are_load_errors() {
    let (bytes, w) = model();
    for kind in [BackendKind::Tract, BackendKind::Matvec] {
        let err = load_backend(kind, &bytes[..bytes.len() / 3], w.obs_layout, None)
            .err()
            .unwrap();
        assert!(matches!(err, InferenceError::Load { .. }), "{kind}: {err}");
    }
    let mut wrong = w.obs_layout;
    wrong.n_lanes += 1;
    assert!(load_backend(BackendKind::Tract, &bytes, wrong, None).is_err());
    assert!(load_backend(BackendKind::Matvec, &bytes, wrong, None).is_err());
}

/// Finite weights whose outputs overflow on the all-zero observation (hidden layers
/// saturated, the heads' last weights at 1e38): refused at load by every backend, not
/// loaded to fall back on every decision.
#[test]
fn a_model_whose_trial_outputs_overflow_is_refused_at_load() {
    let (mut w, layout) = (model().1, plan_and_layout(&scenario()).1);
    for head in [&mut w.actor, &mut w.critic] {
        let last = head.len() - 1;
        for (k, l) in head.iter_mut().enumerate() {
            let (weight, bias) = if k == last { (1e38, 0.0) } else { (0.0, 10.0) };
            l.weights.iter_mut().for_each(|x| *x = weight);
            l.bias.iter_mut().for_each(|x| *x = bias);
        }
    }
    let bytes = exported(&w);
    for kind in [BackendKind::Tract, BackendKind::Matvec] {
        let err = load_backend(kind, &bytes, layout, None).err().unwrap();
        assert!(
            err.to_string().contains("non-finite outputs"),
            "{kind}: {err}"
        );
    }
}

#[cfg(not(feature = "ort"))]
#[test]
fn ort_backend_is_reported_as_not_built() {
    let (bytes, w) = model();
    let err = load_backend(BackendKind::Ort, &bytes, w.obs_layout, None)
        .err()
        .unwrap();
    assert_eq!(err, InferenceError::NotBuilt("ort"));
}

#[cfg(feature = "ort")]
#[test]
fn ort_without_a_library_is_an_error_not_a_panic() {
    let (bytes, w) = model();
    let missing = std::path::Path::new("/nonexistent/libonnxruntime.so");
    let err = load_backend(BackendKind::Ort, &bytes, w.obs_layout, Some(missing))
        .err()
        .unwrap();
    assert!(matches!(err, InferenceError::OrtLibrary(_)), "{err}");
}

#[cfg(feature = "ort")]
#[test]
fn onnx_runtime_computes_the_exported_policy() {
    let Some(lib) = std::env::var_os("ORT_DYLIB_PATH") else {
        if std::env::var_os("CI").is_some() {
            panic!("ORT_DYLIB_PATH is required under CI (.ci/run installs onnxruntime)");
        }
        eprintln!(
            "SKIPPED: ORT_DYLIB_PATH is not set; see .ci/run for how to install ONNX Runtime"
        );
        return;
    };
    let (bytes, w) = model();
    let mut b = load_backend(
        BackendKind::Ort,
        &bytes,
        w.obs_layout,
        Some(std::path::Path::new(&lib)),
    )
    .unwrap();
    assert_eq!(b.name(), "ort");
    assert_matches_reference(b.as_mut(), &w);
}
