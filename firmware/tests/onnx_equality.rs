//! The firmware's f32 forward pass (the postcard blob written by `greenwave export`) gives
//! the same logits as the exported ONNX model run in tract, to 1e-5, on the same inputs.

use greenwave_core::mlp::MlpBlob;
use greenwave_core::{Millis, ObsLayout, PhasePlan, PhaseTiming};
use greenwave_learn::{onnx, ActorCritic, Manifest, ObsNormalization, Provenance};
use tract_onnx::prelude::*;

#[test]
fn blob_forward_equals_onnx_in_tract() {
    let layout = ObsLayout {
        n_lanes: 12,
        n_phases: 4,
    };
    let d = layout.dim();
    let net = ActorCritic::new(layout, &[64, 64], 5, &candle_core::Device::Cpu).unwrap();
    let norm = ObsNormalization {
        mean: (0..d).map(|i| 0.02 * i as f32).collect(),
        inv_std: (0..d).map(|i| 0.7 + 0.03 * i as f32).collect(),
        clip: 10.0,
    };
    let mut w = net.to_weights(norm).unwrap();
    // A trained-looking head (the init gain of 0.01 would make every logit ~0).
    for (i, x) in w.actor.last_mut().unwrap().weights.iter_mut().enumerate() {
        *x += ((i * 31 % 17) as f32 - 8.0) * 0.05;
    }
    let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(8, 60, 3, 2)).unwrap();
    let manifest = Manifest::new(
        &plan,
        layout,
        Millis::from_secs(5),
        vec![64, 64],
        Provenance::default(),
    );
    let model_bytes = onnx::export(&w, &manifest);
    let blob_bytes = w.actor_mlp(plan.hash(), 1).to_blob(false).unwrap();
    let blob = MlpBlob::parse(&blob_bytes).unwrap();
    let model = tract_onnx::onnx()
        .model_for_read(&mut &model_bytes[..])
        .unwrap()
        .with_input_fact(0, f32::fact([1, d]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let mut scratch = vec![0.0f32; 2 * blob.max_width()];
    let mut logits = [0.0f32; 4];
    for k in 0..200usize {
        let obs: Vec<f32> = (0..d)
            .map(|i| ((k * 131 + i * 71) % 97) as f32 / 60.0)
            .collect();
        blob.forward(&obs, &mut scratch, &mut logits).unwrap();
        let input = tract_ndarray::Array2::from_shape_vec((1, d), obs).unwrap();
        let out = model.run(tvec!(Tensor::from(input).into())).unwrap();
        let reference: Vec<f32> = out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        for (a, b) in logits.iter().zip(&reference) {
            assert!(
                (a - b).abs() <= 1e-5,
                "observation {k}: firmware {a} vs tract {b}"
            );
        }
    }
}
