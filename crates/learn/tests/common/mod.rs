//! Fixtures shared by the ONNX tests.
#![allow(dead_code)]

use candle_core::Device;
use greenwave_core::{Millis, ObsLayout, PhasePlan, PhaseTiming};
use greenwave_learn::{ActorCritic, Manifest, ObsNormalization, PolicyWeights, Provenance};

pub fn policy() -> (PolicyWeights, Manifest) {
    let layout = ObsLayout {
        n_lanes: 12,
        n_phases: 4,
    };
    let net = ActorCritic::new(layout, &[64, 64], 42, &Device::Cpu).unwrap();
    let d = layout.dim();
    let norm = ObsNormalization {
        mean: (0..d).map(|i| 0.01 * i as f32).collect(),
        inv_std: (0..d).map(|i| 0.5 + 0.05 * i as f32).collect(),
        clip: 5.0,
    };
    // Make the actor head non-trivial (its init gain is 0.01).
    let mut w = net.to_weights(norm).unwrap();
    for (i, x) in w.actor.last_mut().unwrap().weights.iter_mut().enumerate() {
        *x += ((i * 13 % 7) as f32 - 3.0) * 0.1;
    }
    let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
    let manifest = Manifest::new(
        &plan,
        layout,
        Millis::from_secs(5),
        vec![64, 64],
        Provenance::default(),
    );
    (w, manifest)
}

/// A small shared (any-junction) policy with a non-trivial head and lane normalisation.
pub fn shared_weights() -> greenwave_learn::SharedWeights {
    use greenwave_learn::shared::LaneNormalization;
    let net = greenwave_learn::SharedActorCritic::new(&[8, 6], 3, &Device::Cpu).unwrap();
    let norm = LaneNormalization {
        density: (0.3, 2.0),
        queue: (0.1, 4.0),
        clip: 10.0,
    };
    let mut shared = net.to_weights(norm).unwrap();
    // Make the policy head non-trivial (its init gain is 0.01).
    for (i, x) in shared.actor[2].weights.iter_mut().enumerate() {
        *x += ((i * 13 % 7) as f32 - 3.0) * 0.1;
    }
    shared
}

/// A lane–phase incidence of `lanes` lanes and `phases` phases where every lane and
/// phase is used and phases overlap.
pub fn incidence(lanes: usize, phases: usize) -> greenwave_learn::Incidence {
    let rows: Vec<Vec<bool>> = (0..phases)
        .map(|p| {
            (0..lanes)
                .map(|l| l % phases == p || (l + p) % 3 == 0)
                .collect()
        })
        .collect();
    greenwave_learn::Incidence::new(&rows).unwrap()
}

/// [`shared_weights`] compiled for a 10-lane, 4-phase junction, with the manifest of
/// [`policy`] adjusted to its layout and widths.
pub fn specialised_policy() -> (PolicyWeights, Manifest) {
    let w = greenwave_learn::specialize(&shared_weights(), &incidence(10, 4)).unwrap();
    let (_, mut m) = policy();
    m.obs_layout = w.obs_layout;
    m.hidden = w.hidden();
    (w, m)
}

pub fn observations(n: usize, d: usize) -> Vec<f32> {
    (0..n * d)
        .map(|i| ((i * 7919 % 1000) as f32) / 500.0 - 0.5)
        .collect()
}

pub fn candle_outputs(w: &PolicyWeights, obs: &[f32], n: usize) -> (Vec<f32>, Vec<f32>) {
    let d = w.obs_dim();
    let net = ActorCritic::from_weights(w, &Device::Cpu).unwrap();
    let mut x = vec![0.0; n * d];
    for (o, r) in x.chunks_mut(d).zip(obs.chunks(d)) {
        w.norm.apply(r, o);
    }
    let t = candle_core::Tensor::from_vec(x, (n, d), &Device::Cpu).unwrap();
    let logits = net
        .actor
        .forward(&t)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let value = net
        .critic
        .forward(&t)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    (logits, value)
}

pub fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= 1e-5, "{what}[{i}]: {x} vs {y}");
    }
}
