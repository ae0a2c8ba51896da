//! A synthetic PPO batch of one junction layout: random observations, actions and
//! advantages, as if from a uniform policy. Shared by `tests/cuda.rs` and
//! `examples/shared_update_bench.rs` (which includes this file by path).

use greenwave_learn::ppo::PpoBatch;
use greenwave_learn::shared::Incidence;
use rand::rngs::StdRng;
use rand::Rng;

/// `len` decisions of a junction with incidence `inc`; returns equal the advantages.
pub fn batch(inc: &Incidence, len: usize, rng: &mut StdRng) -> PpoBatch {
    let (d, a) = (inc.layout().dim(), inc.layout().n_phases as usize);
    let advantages: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0..1.0)).collect();
    PpoBatch {
        obs_dim: d,
        n_actions: a,
        obs: (0..len * d).map(|_| rng.random_range(-1.0..1.0)).collect(),
        masks: vec![1; len * a],
        actions: (0..len).map(|_| rng.random_range(0..a as u32)).collect(),
        old_log_probs: vec![-(a as f32).ln(); len],
        old_values: vec![0.0; len],
        returns: advantages.clone(),
        advantages,
    }
}
