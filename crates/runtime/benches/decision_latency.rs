//! Decision latency (observation → phase request) per backend, and the controller's RSS.
//!
//! ```text
//! cargo bench -p greenwave-runtime --bench decision_latency
//! ORT_DYLIB_PATH=... cargo bench -p greenwave-runtime --features ort --bench decision_latency
//! ```
//!
//! One decision = build the observation from 12 lane readings and the sequencer
//! (`ObsLayout::write`), run the policy, check its outputs are finite, masked argmax. The
//! policy is the single-4way shape (31 → 64 → 64 → 4 actor, same-shaped critic), random
//! weights (latency depends on the shape only). Rows: tract, ONNX Runtime (feature `ort`
//! and `ORT_DYLIB_PATH`), the plain-Rust matvec of the same MLP (actor and critic), and the
//! firmware blob's forward pass (actor only). Each decision is timed on its own. Then the
//! median time of loading the ONNX file into tract (once per bundle on a controller).
//!
//! First, before any latency run, the controller runs a simulated hour of single-4way
//! with tract and logging, and the process's peak RSS is reported.

use std::hint::black_box;
use std::time::Instant;

use greenwave_core::mlp::{masked_argmax, DenseLayer, MlpBlob};
use greenwave_core::{LaneReading, Millis, ObsLayout, PhaseId, PhasePlan, Sequencer};
use greenwave_policy::{onnx, Manifest, ObsNormalization, PolicyWeights, Provenance};
use greenwave_runtime::controller::{
    Controller, ControllerConfig, Fallback, FallbackKind, Policy, SimField,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer, PolicyBackend};
use greenwave_runtime::log::{LogConfig, LogWriter};
use rand::{Rng, SeedableRng};

fn weights(layout: ObsLayout, hidden: usize, seed: u64) -> PolicyWeights {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let d = layout.dim();
    let mut layer = |i: usize, o: usize| DenseLayer {
        inputs: i,
        outputs: o,
        weights: (0..i * o).map(|_| rng.random_range(-0.3..0.3)).collect(),
        bias: (0..o).map(|_| rng.random_range(-0.1..0.1)).collect(),
    };
    let actor = vec![
        layer(d, hidden),
        layer(hidden, hidden),
        layer(hidden, layout.n_phases as usize),
    ];
    let critic = vec![layer(d, hidden), layer(hidden, hidden), layer(hidden, 1)];
    PolicyWeights {
        obs_layout: layout,
        norm: ObsNormalization::identity(d, 10.0),
        actor,
        critic,
    }
}

struct Case {
    lanes: Vec<Vec<LaneReading>>,
    seq: Sequencer,
    layout: ObsLayout,
}

impl Case {
    fn new(plan: PhasePlan, layout: ObsLayout) -> Self {
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(1);
        let lanes = (0..64)
            .map(|_| {
                (0..layout.n_lanes)
                    .map(|_| LaneReading {
                        density: rng.random_range(0.0..1.0),
                        queue: rng.random_range(0.0..0.6),
                    })
                    .collect()
            })
            .collect();
        let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
        seq.tick(Millis::from_secs(10));
        Case { lanes, seq, layout }
    }

    /// Times `iters` decisions made by `decide`; returns (p50, p99, mean) in µs.
    fn time(&self, iters: usize, mut decide: impl FnMut(&[f32]) -> u8) -> (f64, f64, f64) {
        let mut obs = vec![0.0f32; self.layout.dim()];
        let mut samples = Vec::with_capacity(iters);
        for k in 0..iters + iters / 10 {
            let lanes = &self.lanes[k % self.lanes.len()];
            let t0 = Instant::now();
            self.layout.write(lanes, &self.seq, &mut obs).unwrap();
            black_box(decide(black_box(&obs)));
            let dt = t0.elapsed().as_secs_f64() * 1e6;
            if k >= iters / 10 {
                samples.push(dt);
            }
        }
        samples.sort_by(f64::total_cmp);
        let p = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        (
            p(0.5),
            p(0.99),
            samples.iter().sum::<f64>() / samples.len() as f64,
        )
    }
}

fn backend_decider<'a>(
    b: &'a mut dyn PolicyBackend,
    seq: &'a Sequencer,
    n: usize,
) -> impl FnMut(&[f32]) -> u8 + 'a {
    let mut logits = vec![0.0f32; n];
    let mask = seq.action_mask();
    move |obs| {
        let v = b.infer(obs, &mut logits).unwrap();
        assert!(v.is_finite() && logits.iter().all(|z| z.is_finite()));
        masked_argmax(&logits, mask).unwrap()
    }
}

fn controller_hour_rss(bytes: &[u8], layout: ObsLayout) -> (Option<u64>, f64, u64) {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let mut field = SimField::new(greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 1));
    let specs = field.signal_specs();
    let dir = std::env::temp_dir().join(format!("gw-bench-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (log, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
    let policy = Policy {
        backend: load_backend(BackendKind::Tract, bytes, layout, None).unwrap(),
        version: 1,
        explorer: Explorer::greedy(),
    };
    let mut c = Controller::new(
        specs,
        Ok(policy),
        Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
        ControllerConfig::new(field.decision_interval()),
        Some(log),
    )
    .unwrap();
    let t0 = Instant::now();
    let stats = c.run(&mut field, 3600.0, |_| {}).unwrap();
    let wall = t0.elapsed().as_secs_f64();
    c.close_log().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (
        greenwave_runtime::peak_rss_kib(),
        wall,
        stats.transitions_logged,
    )
}

/// The median time, in ms, of 50 loads of the ONNX `bytes` into tract (what a controller
/// does once per bundle): the importers' share of the runtime's cost.
fn load_ms(bytes: &[u8], layout: ObsLayout) -> f64 {
    let mut ms: Vec<f64> = (0..50)
        .map(|_| {
            let t0 = Instant::now();
            black_box(load_backend(BackendKind::Tract, bytes, layout, None).unwrap());
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let iters: usize = std::env::var("GW_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let specs =
        SimField::new(greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0)).signal_specs();
    let (plan, layout) = (specs[0].plan.clone(), specs[0].layout);

    for hidden in [64usize, 256] {
        let w = weights(layout, hidden, 7);
        let manifest = Manifest::new(
            &plan,
            layout,
            Millis::from_secs(5),
            w.hidden(),
            Provenance::default(),
        );
        let bytes = onnx::export(&w, &manifest);
        if hidden == 64 {
            let (rss, wall, logged) = controller_hour_rss(&bytes, layout);
            println!(
                "controller, single-4way, 1 simulated hour, tract, logging: {logged} transitions in {wall:.2} s wall, peak RSS {} KiB",
                rss.map_or("?".into(), |k| k.to_string())
            );
        }
        let case = Case::new(plan.clone(), layout);
        let n = layout.n_phases as usize;
        println!("\nMLP {} -> {hidden} -> {hidden} -> {n} (+ critic), {iters} decisions each, µs per decision:", layout.dim());
        println!("| backend | p50 | p99 | mean |");
        println!("|---|---|---|---|");
        let row = |name: &str, (p50, p99, mean): (f64, f64, f64)| {
            println!("| {name} | {p50:.2} | {p99:.2} | {mean:.2} |");
        };
        let mut kinds = vec![BackendKind::Tract, BackendKind::Matvec];
        if cfg!(feature = "ort") && std::env::var_os("ORT_DYLIB_PATH").is_some() {
            kinds.insert(1, BackendKind::Ort);
        } else {
            println!(
                "(ONNX Runtime row skipped: build with --features ort and set ORT_DYLIB_PATH)"
            );
        }
        for kind in kinds {
            let mut b = load_backend(kind, &bytes, layout, None).unwrap();
            let label = match kind {
                BackendKind::Matvec => "plain Rust matvec (actor + critic)",
                other => other.name(),
            };
            row(
                label,
                case.time(iters, backend_decider(b.as_mut(), &case.seq, n)),
            );
        }
        println!(
            "tract model load (parse, analyse, optimise): {:.2} ms, the median of 50",
            load_ms(&bytes, layout)
        );
        let blob_bytes = w.actor_mlp(plan.hash(), 1).to_blob(false).unwrap();
        let blob = MlpBlob::parse(&blob_bytes).unwrap();
        let mut scratch = vec![0.0f32; 2 * blob.max_width()];
        let mut logits = vec![0.0f32; n];
        let mask = case.seq.action_mask();
        row(
            "firmware blob forward (actor only)",
            case.time(iters, |obs| {
                blob.forward(obs, &mut scratch, &mut logits).unwrap();
                masked_argmax(&logits, mask).unwrap()
            }),
        );
    }
}
