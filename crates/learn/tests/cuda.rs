//! The shared lane–phase network on CUDA computes what it computes on the CPU: the same
//! outputs from the same weights, and the same PPO update. Built only with `--features
//! cuda` and run on a machine with a GPU (never in CI): `cargo test --release -p
//! greenwave-learn --features cuda --test cuda`. Written after the one GPU session so far
//! (BENCHMARKS.md, "The learner on a GPU"), whose end-to-end runs trained on CUDA; it
//! compiles, but has not yet run on a GPU (`tools/diagnostics/issue14/gpu/` builds it for
//! one and runs it there). On the CPU the lane encoder is the fused op with the
//! rational tanh (`lane_pool.rs`), on CUDA candle's own ops, so the two agree up to that
//! approximation and float order, not bit for bit.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor};
use greenwave_learn::ppo::{update_groups, PolicyModel, PpoBatch, PpoConfig};
use greenwave_learn::shared::{Incidence, IncidenceTensors, SharedActorCritic, SharedGroups};
use greenwave_learn::Adam;
use rand::rngs::StdRng;
use rand::SeedableRng;

mod synthetic;
use synthetic::batch;

/// Junction layouts `(lanes, phases)`.
const LAYOUTS: [(usize, usize); 3] = [(8, 4), (12, 4), (6, 2)];

fn incidence(lanes: usize, phases: usize) -> Incidence {
    let rows: Vec<Vec<bool>> = (0..phases)
        .map(|p| (0..lanes).map(|l| l % phases == p || l == p).collect())
        .collect();
    Incidence::new(&rows).expect("a valid incidence")
}

/// `net` with the groups of `incs`, its incidence tensors on the network's device.
fn model<'a>(net: &'a SharedActorCritic, incs: &[Incidence]) -> SharedGroups<'a> {
    let groups = incs
        .iter()
        .map(|i| IncidenceTensors::new(i, &net.device).expect("incidence tensors"))
        .collect();
    SharedGroups { net, groups }
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all()
        .and_then(|t| t.to_device(&Device::Cpu))
        .and_then(|t| t.to_vec1::<f32>())
        .expect("a host copy")
}

fn weights(net: &SharedActorCritic) -> Vec<f32> {
    net.vars()
        .iter()
        .flat_map(|v| flat(v.as_tensor()))
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn norm(a: &[f32]) -> f32 {
    a.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[test]
fn the_shared_network_on_cuda_matches_the_cpu() {
    let gpu = Device::new_cuda(0).expect("a CUDA GPU (this test needs one)");
    let mut rng = StdRng::seed_from_u64(11);
    let incs: Vec<Incidence> = LAYOUTS.iter().map(|&(l, p)| incidence(l, p)).collect();
    let batches: Vec<PpoBatch> = incs.iter().map(|i| batch(i, 700, &mut rng)).collect();
    let nets = [&Device::Cpu, &gpu].map(|d| SharedActorCritic::new(&[32, 16], 3, d).unwrap());
    let before = weights(&nets[0]);
    assert_eq!(before, weights(&nets[1]), "the same initial weights");

    // The same outputs from the same weights, group by group.
    let models = [model(&nets[0], &incs), model(&nets[1], &incs)];
    for (g, b) in batches.iter().enumerate() {
        let outs = models.each_ref().map(|m| {
            let obs = Tensor::from_slice(&b.obs, (b.len(), b.obs_dim), &m.net.device).unwrap();
            let (logits, values) = m.forward_group(g, &obs).unwrap();
            (flat(&logits), flat(&values))
        });
        let (dl, dv) = (
            max_abs_diff(&outs[0].0, &outs[1].0),
            max_abs_diff(&outs[0].1, &outs[1].1),
        );
        assert!(
            dl < 1e-4 && dv < 1e-4,
            "group {g}: logits differ by {dl}, values by {dv}"
        );
    }

    // The same update: the same minibatches (one seed), the same statistics and weight steps.
    let cfg = PpoConfig {
        epochs: 2,
        minibatch: 128,
        ..Default::default()
    };
    let stats = models.each_ref().map(|m| {
        let mut opt = Adam::new(m.net.vars(), 1e-5).unwrap();
        let mut rng = StdRng::seed_from_u64(5);
        update_groups(m, &mut opt, &batches, &cfg, 1e-3, &mut rng).unwrap()
    });
    assert_eq!(stats[0].minibatches, stats[1].minibatches);
    for (name, a, b) in [
        ("policy loss", stats[0].policy_loss, stats[1].policy_loss),
        ("value loss", stats[0].value_loss, stats[1].value_loss),
        ("entropy", stats[0].entropy, stats[1].entropy),
    ] {
        assert!(
            (a - b).abs() <= 1e-3 * a.abs().max(1.0),
            "{name}: cpu {a}, cuda {b}"
        );
    }
    let step = |net: &SharedActorCritic| -> Vec<f32> {
        weights(net)
            .iter()
            .zip(&before)
            .map(|(w, w0)| w - w0)
            .collect()
    };
    let (cpu, cuda) = (step(&nets[0]), step(&nets[1]));
    let gap: Vec<f32> = cpu.iter().zip(&cuda).map(|(a, b)| a - b).collect();
    assert!(norm(&cpu) > 0.0, "the update moved the weights");
    assert!(
        norm(&gap) <= 0.05 * norm(&cpu),
        "the weight steps differ by {} of {}",
        norm(&gap),
        norm(&cpu)
    );
}
