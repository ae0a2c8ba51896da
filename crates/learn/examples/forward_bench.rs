//! Times the plain-Rust forward passes that rollouts and greedy episodes run, row-major
//! (`dense_forward`, as before `InputMajorLayers`) against input-major, alternated in one
//! process, on a junction of `lanes` observed lanes and `phases` phases with the
//! default 64-wide shared network:
//!
//! * the shared network as a training rollout runs it (`row_major_forward` against
//!   `SharedForward`), and
//! * its compiled per-signal MLP as validation, `greenwave eval` and the controller run
//!   its actor (`dense_forward` against `InputMajorLayers`).
//!
//! Both pairs give the same numbers bit for bit (checked here too).
//!
//! `cargo run --release -p greenwave-learn --example forward_bench -- [lanes] [phases] [calls]`

use std::hint::black_box;
use std::time::Instant;

use candle_core::Device;
use greenwave_learn::shared::reference::row_major_forward;
use greenwave_learn::shared::{Incidence, LaneNormalization, SharedActorCritic, SharedForward};
use greenwave_learn::specialize;
use greenwave_learn::weights::{dense_forward, InputMajorLayers};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Microseconds per call of `f` over `calls` calls.
fn time(calls: usize, mut f: impl FnMut(usize)) -> f64 {
    let t = Instant::now();
    for k in 0..calls {
        f(k);
    }
    t.elapsed().as_secs_f64() * 1e6 / calls as f64
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let lanes = args.next().and_then(Result::ok).unwrap_or(24);
    let phases = args.next().and_then(Result::ok).unwrap_or(4);
    let calls = args.next().and_then(Result::ok).unwrap_or(20_000);
    let rows: Vec<Vec<bool>> = (0..phases)
        .map(|p| (0..lanes).map(|l| l % phases == p).collect())
        .collect();
    let inc = Incidence::new(&rows).expect("a valid incidence");
    let net = SharedActorCritic::new(&[64, 64], 1, &Device::Cpu).expect("network");
    let shared = net
        .to_weights(LaneNormalization::identity(10.0))
        .expect("weights");
    let mut rng = StdRng::seed_from_u64(1);
    let obs: Vec<Vec<f32>> = (0..64)
        .map(|_| {
            (0..inc.layout().dim())
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        })
        .collect();
    let (prepared, pooling) = (SharedForward::new(&shared), inc.row_normalised());
    let compiled = specialize(&shared, &inc).expect("compiled");
    let actor = InputMajorLayers::new(&compiled.actor);
    for x in &obs {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (a, b) = (
            prepared.forward_normalised(&inc, &pooling, x),
            row_major_forward(&shared, &inc, x),
        );
        assert_eq!((bits(&a.0), a.1.to_bits()), (bits(&b.0), b.1.to_bits()));
        assert_eq!(
            bits(&actor.forward(x)),
            bits(&dense_forward(&compiled.actor, x))
        );
    }
    println!(
        "{lanes} lanes, {phases} phases, {calls} calls each; compiled actor layers: {:?}",
        compiled
            .actor
            .iter()
            .map(|l| (l.outputs, l.inputs))
            .collect::<Vec<_>>()
    );
    for round in 1..=2 {
        let x = |k: usize| &obs[k % obs.len()];
        let old = time(calls, |k| {
            black_box(row_major_forward(&shared, &inc, x(k)));
        });
        let new = time(calls, |k| {
            black_box(prepared.forward_normalised(&inc, &pooling, x(k)));
        });
        let old_c = time(calls / 10, |k| {
            black_box(dense_forward(&compiled.actor, x(k)));
        });
        let new_c = time(calls / 10, |k| {
            black_box(actor.forward(x(k)));
        });
        println!(
            "round {round}: shared (rollout) {old:.1} → {new:.1} µs ({:.2}); compiled actor (greedy) {old_c:.1} → {new_c:.1} µs ({:.2})",
            new / old,
            new_c / old_c
        );
    }
}
