//! Times one PPO update of the shared lane–phase policy on a synthetic many-signal batch
//! shaped like a real net's iteration (8 environments × 180 decisions × `signals`
//! signals of three junction layouts), the learner's share of a training iteration.
//!
//! `cargo run --release -p greenwave-learn --example shared_update_bench -- [signals] [epochs]`

use std::time::Instant;

use candle_core::Device;
use greenwave_learn::ppo::{update_groups, PpoBatch, PpoConfig};
use greenwave_learn::shared::{Incidence, IncidenceTensors, SharedActorCritic, SharedGroups};
use greenwave_learn::Adam;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Junction layouts `(lanes, phases)` the signals cycle through.
const LAYOUTS: [(usize, usize); 3] = [(8, 4), (12, 4), (6, 2)];
/// Decisions per signal in one iteration (8 environments × 180).
const DECISIONS: usize = 1440;

fn incidence(lanes: usize, phases: usize) -> Incidence {
    let rows: Vec<Vec<bool>> = (0..phases)
        .map(|p| (0..lanes).map(|l| l % phases == p).collect())
        .collect();
    Incidence::new(&rows).expect("a valid incidence")
}

fn batch(inc: &Incidence, len: usize, rng: &mut StdRng) -> PpoBatch {
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

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let signals = args.next().and_then(Result::ok).unwrap_or(15);
    let epochs = args.next().and_then(Result::ok).unwrap_or(10);
    let dev = Device::Cpu;
    let mut rng = StdRng::seed_from_u64(1);
    let incs: Vec<Incidence> = LAYOUTS.iter().map(|&(l, p)| incidence(l, p)).collect();
    let groups: Vec<IncidenceTensors> = incs
        .iter()
        .map(|i| IncidenceTensors::new(i, &dev).expect("incidence tensors"))
        .collect();
    let per_layout = |g: usize| (0..signals).filter(|s| s % LAYOUTS.len() == g).count();
    let batches: Vec<PpoBatch> = incs
        .iter()
        .enumerate()
        .map(|(g, inc)| batch(inc, per_layout(g) * DECISIONS, &mut rng))
        .collect();
    let net = SharedActorCritic::new(&[64, 64], 1, &dev).expect("network");
    let model = SharedGroups { net: &net, groups };
    let mut opt = Adam::new(net.vars(), 1e-5).expect("optimiser");
    let cfg = PpoConfig {
        epochs,
        minibatch: 64,
        ..Default::default()
    };
    let rows: usize = batches.iter().map(PpoBatch::len).sum();
    let t = Instant::now();
    let st = update_groups(&model, &mut opt, &batches, &cfg, 3e-4, &mut rng).expect("update");
    let s = t.elapsed().as_secs_f64();
    println!(
        "{signals} signals, {rows} rows, {epochs} epochs, {} minibatches: {s:.2} s ({:.1} µs per row-pass)",
        st.minibatches,
        s * 1e6 / (rows * epochs) as f64
    );
}
