//! int8 vs f32 action agreement of the policy blob.
//!
//! Until training and export land, the policy is synthetic: 31 → 64 → 64 → 4, tanh,
//! Glorot-uniform weights from a fixed seed, compared on 5000 plausible single-4way
//! observations with the masks the sequencer would give. To measure a real policy, point
//! `GREENWAVE_F32_BLOB` and `GREENWAVE_INT8_BLOB` at its two blobs (same policy, written
//! by `OwnedMlp::to_blob(false / true)`); the observations follow the blob's layout.
//! Run with `-- --nocapture` to see the rates.

mod common;

use common::plan;
use common::synthetic::{agreement, plausible_observations, synthetic_mlp};
use greenwave_core::mlp::MlpBlob;
use greenwave_core::ObsLayout;

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
    assert!(a.masked_rate() >= 0.99, "{a:?}");
    assert!(a.unmasked_rate() >= 0.95, "{a:?}");
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
