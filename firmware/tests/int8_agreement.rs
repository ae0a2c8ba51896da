//! int8 vs f32 action agreement of the policy blob.
//!
//! Two sets of observations:
//!
//! * **recorded**: the shipped default policy (`models/single-4way.blob` and
//!   `.int8.blob`, trained by `greenwave train` and exported) drives the embedded
//!   simulator's `single-4way` for five one-hour episodes (the f32 blob picks every
//!   phase); every observation it saw is recorded with the sequencer's action mask at that
//!   moment, then both blobs are compared on the recording;
//! * **plausible**: a synthetic policy (31 → 64 → 64 → 4, tanh, Glorot-uniform weights
//!   from a fixed seed) on 5000 generated single-4way observations. Point
//!   `GREENWAVE_F32_BLOB` and `GREENWAVE_INT8_BLOB` at two blobs of one policy to measure
//!   that policy instead; the observations follow the blob's layout.
//!
//! Run with `-- --nocapture` to see the rates.

mod common;

use common::plan;
use common::synthetic::{agreement, plausible_observations, synthetic_mlp, Agreement};
use greenwave_core::mlp::{masked_argmax, MlpBlob};
use greenwave_core::{ObsLayout, PhaseMask};
use greenwave_sim::{EmbeddedEnv, Env};

const OBSERVATIONS: usize = 5000;

fn blobs() -> (Vec<u8>, Vec<u8>, &'static str) {
    match (
        std::env::var_os("GREENWAVE_F32_BLOB"),
        std::env::var_os("GREENWAVE_INT8_BLOB"),
    ) {
        (Some(f), Some(q)) => (
            std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.to_string_lossy())),
            std::fs::read(&q).unwrap_or_else(|e| panic!("{}: {e}", q.to_string_lossy())),
            "blobs from GREENWAVE_F32_BLOB / GREENWAVE_INT8_BLOB",
        ),
        _ => {
            let layout = ObsLayout {
                n_lanes: 12,
                n_phases: 4,
            };
            let mlp = synthetic_mlp(plan().hash(), layout, 64, 2024);
            (
                mlp.to_blob(false).unwrap(),
                mlp.to_blob(true).unwrap(),
                "synthetic 31-64-64-4 policy, seed 2024",
            )
        }
    }
}

#[test]
fn int8_picks_the_same_phase_as_f32() {
    let (f32_bytes, int8_bytes, what) = blobs();
    let f = MlpBlob::parse(&f32_bytes).unwrap();
    let q = MlpBlob::parse(&int8_bytes).unwrap();
    assert_eq!(f.obs_layout, q.obs_layout);
    assert_eq!(f.plan_hash, q.plan_hash);
    let obs = plausible_observations(f.obs_layout, OBSERVATIONS, 11);
    let a = agreement(&f, &q, &obs);
    report(what, &f32_bytes, &int8_bytes, &a);
    assert!(a.masked_rate() >= 0.99, "{a:?}");
    assert!(a.unmasked_rate() >= 0.95, "{a:?}");
}

/// Prints the rates (visible with `-- --nocapture`).
fn report(what: &str, f32_bytes: &[u8], int8_bytes: &[u8], a: &Agreement) {
    println!(
        "{what}: blob {} B f32, {} B int8; action agreement on {} observations: \
         {:.2} % with the sequencer's masks, {:.2} % unmasked; max |Δlogit| {:.4}",
        f32_bytes.len(),
        int8_bytes.len(),
        a.n,
        100.0 * a.masked_rate(),
        100.0 * a.unmasked_rate(),
        a.max_abs_logit_diff
    );
}

/// Reads a file of the repository's `models/` folder.
fn shipped_model(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every observation the f32 policy sees while driving `single-4way` for one hour per
/// seed, with the action mask of that moment.
fn record_observations(
    policy: &MlpBlob,
    seeds: std::ops::Range<u64>,
) -> Vec<(Vec<f32>, PhaseMask)> {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let mut env = EmbeddedEnv::from_scenario(&scenario, seeds.start);
    let spec = &env.signals()[0];
    assert_eq!(
        spec.layout, policy.obs_layout,
        "the blob's layout is the scenario's"
    );
    assert_eq!(
        spec.plan.hash(),
        policy.plan_hash,
        "the blob is for the scenario's plan"
    );
    let mut obs = vec![0.0f32; spec.layout.dim()];
    let mut logits = vec![0.0f32; spec.layout.n_phases as usize];
    let mut scratch = vec![0.0f32; 2 * policy.max_width()];
    let mut recorded = Vec::new();
    for seed in seeds {
        env.reset(seed).unwrap();
        loop {
            env.observe(0, &mut obs).unwrap();
            let mask = env.action_mask(0);
            policy.forward(&obs, &mut scratch, &mut logits).unwrap();
            let action = masked_argmax(&logits, mask).expect("a mask allows some phase");
            recorded.push((obs.clone(), mask));
            if env.step(&[action]).unwrap().done {
                break;
            }
        }
    }
    recorded
}

#[test]
fn int8_picks_the_same_phase_as_f32_on_recorded_observations() {
    let (f32_bytes, int8_bytes) = (
        shipped_model("single-4way.blob"),
        shipped_model("single-4way.int8.blob"),
    );
    let f = MlpBlob::parse(&f32_bytes).unwrap();
    let q = MlpBlob::parse(&int8_bytes).unwrap();
    let recorded = record_observations(&f, 1..6);
    let a = agreement(&f, &q, &recorded);
    report(
        "models/single-4way, observations recorded while it drove single-4way (seeds 1-5, \
         one hour each)",
        &f32_bytes,
        &int8_bytes,
        &a,
    );
    assert_eq!(a.n, 5 * 720);
    assert!(a.masked_rate() >= 0.99, "{a:?}");
}

/// The blob sizes the issue sets targets for (f32 ≤ 32 kB, int8 ≤ 10 kB).
#[test]
fn blob_sizes_meet_the_targets() {
    let (f32_bytes, int8_bytes, what) = blobs();
    println!(
        "{what}: f32 blob {} bytes, int8 blob {} bytes",
        f32_bytes.len(),
        int8_bytes.len()
    );
    assert!(f32_bytes.len() <= 32 * 1024);
    assert!(int8_bytes.len() <= 10 * 1024);
}
