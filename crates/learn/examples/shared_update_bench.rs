//! Times one PPO update of the shared lane–phase policy on a synthetic many-signal batch
//! shaped like a real net's iteration (8 environments × 180 decisions × `signals`
//! signals of three junction layouts), the learner's share of a training iteration.
//!
//! `cargo run --release -p greenwave-learn --example shared_update_bench -- [signals] [epochs]
//! [minibatch] [cpu|cuda]` (defaults 15, 10, 64 — `greenwave train`'s SUMO minibatch — and
//! cpu). `cuda` needs `--features cuda`; there one untimed update runs first, so the timed
//! one does not include loading the kernels or starting cuBLAS. The update ends by reading
//! its statistics back to the host, so the time includes every queued GPU kernel.

use std::time::Instant;

use candle_core::Device;
use greenwave_learn::ppo::{update_groups, PpoBatch, PpoConfig};
use greenwave_learn::shared::{Incidence, IncidenceTensors, SharedActorCritic, SharedGroups};
use greenwave_learn::Adam;
use rand::rngs::StdRng;
use rand::SeedableRng;

#[path = "../tests/synthetic/mod.rs"]
mod synthetic;
use synthetic::batch;

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

/// The device named by the fourth argument.
fn device(name: Option<&str>) -> Device {
    match name {
        None | Some("cpu") => Device::Cpu,
        Some("cuda") => Device::new_cuda(0).unwrap_or_else(|e| {
            eprintln!("cuda: {e} (build the example with --features cuda)");
            std::process::exit(2)
        }),
        Some(other) => {
            eprintln!("device {other:?}: expected cpu or cuda");
            std::process::exit(2)
        }
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: usize| match argv.get(i) {
        None => default,
        Some(a) => a.parse::<usize>().unwrap_or_else(|_| {
            eprintln!(
                "argument {}: {a:?} is not a count ([signals] [epochs] [minibatch] [cpu|cuda])",
                i + 1
            );
            std::process::exit(2)
        }),
    };
    let (signals, epochs, minibatch) = (number(0, 15), number(1, 10), number(2, 64));
    let dev = device(argv.get(3).map(String::as_str));
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
        minibatch,
        ..Default::default()
    };
    let rows: usize = batches.iter().map(PpoBatch::len).sum();
    if !dev.is_cpu() {
        let warm = PpoConfig { epochs: 1, ..cfg };
        update_groups(&model, &mut opt, &batches, &warm, 3e-4, &mut rng).expect("warm-up");
    }
    let t = Instant::now();
    let st = update_groups(&model, &mut opt, &batches, &cfg, 3e-4, &mut rng).expect("update");
    let s = t.elapsed().as_secs_f64();
    println!(
        "{dev:?}: {signals} signals, {rows} rows, {epochs} epochs, {} minibatches of {minibatch}: \
         {s:.2} s ({:.1} µs per row-pass)",
        st.minibatches,
        s * 1e6 / (rows * epochs) as f64
    );
}
