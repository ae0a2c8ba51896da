//! The exported ONNX model computes what the candle networks compute, in tract (and in
//! ONNX Runtime, and passes `onnx.checker`, where those are installed: see
//! `onnx_external.rs`), and reading it back yields the same weights and manifest.

mod common;

use common::{assert_close, candle_outputs, observations, policy};
use greenwave_learn::onnx;
use tract_onnx::prelude::*;

#[test]
fn round_trip_keeps_weights_and_manifest() {
    let (w, m) = policy();
    let bytes = onnx::export(&w, &m);
    let (w2, m2) = onnx::import(&bytes).unwrap();
    assert_eq!(w2, w);
    assert_eq!(m2, m);
    assert_eq!(onnx::read_manifest(&bytes).unwrap(), m);
}

#[test]
fn tract_matches_candle_for_batch_one_and_many() {
    let (w, m) = policy();
    let d = w.obs_dim();
    let bytes = onnx::export(&w, &m);
    for n in [1usize, 7] {
        let model = tract_onnx::onnx()
            .model_for_read(&mut &bytes[..])
            .unwrap()
            .with_input_fact(0, f32::fact([n, d]).into())
            .unwrap()
            .into_optimized()
            .unwrap()
            .into_runnable()
            .unwrap();
        let obs = observations(n, d);
        let input = tract_ndarray::Array2::from_shape_vec((n, d), obs.clone()).unwrap();
        let out = model.run(tvec!(Tensor::from(input).into())).unwrap();
        let logits: Vec<f32> = out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        let value: Vec<f32> = out[1]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        let (cl, cv) = candle_outputs(&w, &obs, n);
        assert_close(&logits, &cl, "logits");
        assert_close(&value, &cv, "value");
        // And the plain-Rust reference forward pass used for rollouts.
        for (k, row) in obs.chunks(d).enumerate() {
            let (l, v) = w.forward(row);
            assert_close(&l, &cl[k * 4..(k + 1) * 4], "reference logits");
            assert!((v - cv[k]).abs() <= 1e-5);
        }
    }
}

#[test]
fn corrupt_models_are_refused_with_a_reason() {
    let (w, m) = policy();
    let bytes = onnx::export(&w, &m);
    let err = onnx::import(&bytes[..bytes.len() / 2]).unwrap_err();
    assert!(matches!(err, onnx::OnnxError::Decode(_)), "{err}");
    let mut m_bad = m.clone();
    m_bad.hidden = vec![32, 64];
    let err = onnx::import(&onnx::export(&w, &m_bad)).unwrap_err();
    assert!(err.to_string().contains("actor.0.weight"), "{err}");
    let err = onnx::import(b"").unwrap_err();
    assert!(
        matches!(
            err,
            onnx::OnnxError::NoManifest | onnx::OnnxError::Decode(_)
        ),
        "{err}"
    );
}
