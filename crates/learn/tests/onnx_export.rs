//! The exported ONNX model computes what the candle networks compute, in tract (and in
//! ONNX Runtime, and passes `onnx.checker`, where those are installed: see
//! `onnx_external.rs`), and reading it back yields the same weights and manifest.

mod common;

use common::{assert_close, candle_outputs, incidence, observations, policy, shared_weights};
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

/// `(logits, value)` of `n` observations through the ONNX model in tract.
fn run_tract(bytes: &[u8], obs: &[f32], n: usize, d: usize) -> (Vec<f32>, Vec<f32>) {
    let model = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .unwrap()
        .with_input_fact(0, f32::fact([n, d]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let input = tract_ndarray::Array2::from_shape_vec((n, d), obs.to_vec()).unwrap();
    let out = model.run(tvec!(Tensor::from(input).into())).unwrap();
    let flat = |k: usize| -> Vec<f32> {
        out[k]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect()
    };
    (flat(0), flat(1))
}

#[test]
fn specialised_shared_policy_in_tract_equals_the_shared_network() {
    use greenwave_learn::specialize;
    let shared = shared_weights();
    let (_, base_manifest) = policy();
    let mut worst = 0.0f32;
    for (lanes, phases) in [(10usize, 4usize), (5, 3), (12, 2)] {
        let inc = incidence(lanes, phases);
        let w = specialize(&shared, &inc).unwrap();
        let mut m = base_manifest.clone();
        m.obs_layout = inc.layout();
        m.action_phases = (0..phases as u8).collect();
        m.hidden = w.hidden();
        let bytes = onnx::export(&w, &m);
        assert_eq!(onnx::import(&bytes).unwrap().0, w, "round trip");
        let (n, d) = (7, inc.layout().dim());
        let obs: Vec<f32> = observations(n, d).iter().map(|x| x.abs()).collect();
        let (logits, value) = run_tract(&bytes, &obs, n, d);
        for (k, row) in obs.chunks(d).enumerate() {
            let (l, v) = shared.forward(&inc, row);
            assert_close(
                &logits[k * phases..(k + 1) * phases],
                &l,
                "tract vs shared logits",
            );
            assert_close(&value[k..k + 1], &[v], "tract vs shared value");
            worst = l
                .iter()
                .zip(&logits[k * phases..])
                .fold(worst, |a, (x, y)| a.max((x - y).abs()));
        }
    }
    eprintln!(
        "specialised ONNX in tract vs the shared network: max |logit difference| {worst:.2e}"
    );
}
