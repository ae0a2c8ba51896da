//! Synthetic policies and observation sets, until training and export produce real blobs.
//! Shared by the tests and the `decision_cost` bench example.
#![allow(dead_code)]

use greenwave_core::mlp::{masked_argmax, Activation, DenseLayer, MlpBlob, OwnedMlp};
use greenwave_core::{ObsLayout, PhaseMask};

/// xorshift64*, so the data does not depend on a crate's RNG across versions.
pub struct SplitRng(pub u64);

impl SplitRng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in [-a, a).
    pub fn sym(&mut self, a: f32) -> f32 {
        (2.0 * self.unit() - 1.0) * a
    }
}

/// An `obs_dim → hidden → hidden → n_phases` tanh MLP with Glorot-uniform weights from
/// `seed`, biases in ±0.1, and a plausible observation normalisation.
pub fn synthetic_mlp(plan_hash: u64, layout: ObsLayout, hidden: usize, seed: u64) -> OwnedMlp {
    let mut rng = SplitRng(seed);
    let dim = layout.dim();
    let widths = [dim, hidden, hidden, layout.n_phases as usize];
    let layers = widths
        .windows(2)
        .map(|w| {
            let (inputs, outputs) = (w[0], w[1]);
            let a = (6.0 / (inputs + outputs) as f32).sqrt();
            DenseLayer {
                inputs,
                outputs,
                weights: (0..inputs * outputs).map(|_| rng.sym(a)).collect(),
                bias: (0..outputs).map(|_| rng.sym(0.1)).collect(),
            }
        })
        .collect();
    let lanes = 2 * layout.n_lanes as usize;
    OwnedMlp {
        plan_hash,
        obs_layout: layout,
        policy_version: 1,
        activation: Activation::Tanh,
        obs_clip: 5.0,
        obs_mean: (0..dim)
            .map(|i| if i < lanes { 0.3 } else { 0.25 })
            .collect(),
        obs_inv_std: (0..dim)
            .map(|i| if i < lanes { 4.0 } else { 2.0 })
            .collect(),
        layers,
    }
}

/// `n` observations a controller could produce for `layout`, with the action mask the
/// sequencer would give: lane densities in [0, 1), queues at most the density, a target
/// phase, 20 % in a change, 70 % of greens past min green (min green taken as 1/6 of max).
pub fn plausible_observations(
    layout: ObsLayout,
    n: usize,
    seed: u64,
) -> Vec<(Vec<f32>, PhaseMask)> {
    let mut rng = SplitRng(seed);
    let lanes = layout.n_lanes as usize;
    let phases = layout.n_phases as usize;
    (0..n)
        .map(|_| {
            let mut obs = vec![0.0f32; layout.dim()];
            for i in 0..lanes {
                let density = rng.unit() * rng.unit().sqrt();
                obs[i] = density;
                obs[lanes + i] = density * rng.unit();
            }
            let target = (rng.next_u64() % phases as u64) as usize;
            obs[2 * lanes + target] = 1.0;
            let flags = 2 * lanes + phases;
            let in_change = rng.unit() < 0.2;
            let min_served = !in_change && rng.unit() < 0.7;
            obs[flags] = in_change as u8 as f32;
            obs[flags + 1] = min_served as u8 as f32;
            obs[flags + 2] = match (in_change, min_served) {
                (true, _) => 0.0,
                (false, true) => 1.0 / 6.0 + rng.unit() * 5.0 / 6.0,
                (false, false) => rng.unit() / 6.0,
            };
            let mask = if min_served {
                PhaseMask(((1u32 << phases) - 1) as u16)
            } else {
                PhaseMask(1 << target)
            };
            (obs, mask)
        })
        .collect()
}

/// How often two policies pick the same phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Agreement {
    /// Observations compared.
    pub n: usize,
    /// Same masked argmax (with the sequencer's mask: what the controller actually does).
    pub same_masked: usize,
    /// Same argmax over all phases (the harder comparison).
    pub same_unmasked: usize,
    /// Largest |logit difference|.
    pub max_abs_logit_diff: f32,
}

impl Agreement {
    pub fn masked_rate(&self) -> f64 {
        self.same_masked as f64 / self.n as f64
    }
    pub fn unmasked_rate(&self) -> f64 {
        self.same_unmasked as f64 / self.n as f64
    }
}

/// Compares the actions of `a` and `b` (e.g. the f32 blob and its int8 version) on `obs`.
pub fn agreement(a: &MlpBlob, b: &MlpBlob, obs: &[(Vec<f32>, PhaseMask)]) -> Agreement {
    let n_out = a.obs_layout.n_phases as usize;
    let mut scratch = vec![0.0f32; 2 * a.max_width().max(b.max_width())];
    let (mut la, mut lb) = (vec![0.0f32; n_out], vec![0.0f32; n_out]);
    let all = PhaseMask(((1u32 << n_out) - 1) as u16);
    let mut r = Agreement {
        n: obs.len(),
        same_masked: 0,
        same_unmasked: 0,
        max_abs_logit_diff: 0.0,
    };
    for (o, mask) in obs {
        a.forward(o, &mut scratch, &mut la).expect("forward a");
        b.forward(o, &mut scratch, &mut lb).expect("forward b");
        for (x, y) in la.iter().zip(&lb) {
            r.max_abs_logit_diff = r.max_abs_logit_diff.max((x - y).abs());
        }
        r.same_masked += (masked_argmax(&la, *mask) == masked_argmax(&lb, *mask)) as usize;
        r.same_unmasked += (masked_argmax(&la, all) == masked_argmax(&lb, all)) as usize;
    }
    r
}

/// The f32 blob of [`synthetic_mlp`] with 64-wide hidden layers and seed 7, for
/// `plan_hash` and `layout`: what most tests load.
pub fn synthetic_blob(plan_hash: u64, layout: ObsLayout) -> Vec<u8> {
    synthetic_mlp(plan_hash, layout, 64, 7)
        .to_blob(false)
        .expect("a synthetic MLP writes as a blob")
}
