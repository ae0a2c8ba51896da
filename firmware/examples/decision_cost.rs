//! Cost of one policy decision, for `valgrind --tool=callgrind` (instructions, not time).
//!
//! Builds the synthetic 31 → 64 → 64 → 4 single-4way policy (f32 or int8 blob), then takes
//! `DECISIONS` decisions on plausible observations through the firmware's own code:
//! `one_decision` = forward pass + masked argmax + log-prob (what the controller runs per
//! decision); `forward_only` = the forward pass alone. Both are `#[inline(never)]` so
//! callgrind can collect them by name:
//!
//! ```text
//! cargo build --release -p greenwave-firmware --example decision_cost
//! valgrind --tool=callgrind --toggle-collect='*one_decision*' \
//!     target/release/examples/decision_cost f32 1000
//! ```
//!
//! and divide the collected `Ir` by the number of decisions.

#[path = "../tests/common/synthetic.rs"]
mod synthetic;

use greenwave_core::{ObsLayout, PhaseMask, PhasePlan, PhaseTiming};
use greenwave_firmware::policy::{Policy, PolicyChoice, SCRATCH_FLOATS};
use synthetic::{plausible_observations, synthetic_mlp};

#[inline(never)]
fn one_decision(
    policy: &Policy,
    obs: &[f32],
    mask: PhaseMask,
    scratch: &mut [f32; SCRATCH_FLOATS],
) -> Option<PolicyChoice> {
    policy.decide(obs, mask, scratch).ok()
}

#[inline(never)]
fn forward_only(policy: &Policy, obs: &[f32], scratch: &mut [f32; SCRATCH_FLOATS]) -> f32 {
    let mut logits = [0.0f32; 16];
    policy
        .logits(obs, scratch, &mut logits)
        .map(|l| l[0])
        .unwrap_or(f32::NAN)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let format = args.next().unwrap_or_else(|| "f32".into());
    let int8 = match format.as_str() {
        "f32" => false,
        "int8" => true,
        other => {
            eprintln!("usage: decision_cost [f32|int8] [decisions]; got format {other:?}");
            std::process::exit(2);
        }
    };
    let decisions: usize = match args.next().map(|s| s.parse()) {
        None => 1000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("decisions: {e}");
            std::process::exit(2);
        }
    };
    let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2))
        .expect("the standard plan is valid");
    let layout = ObsLayout {
        n_lanes: 12,
        n_phases: 4,
    };
    let blob = synthetic_mlp(plan.hash(), layout, 64, 2024)
        .to_blob(int8)
        .expect("synthetic blob encodes");
    let policy = Policy::load(Some(&blob), plan.hash(), layout).expect("blob fits the plan");
    let observations = plausible_observations(layout, decisions.max(1), 5);
    let mut scratch = [0.0f32; SCRATCH_FLOATS];
    let mut phases = [0usize; 4];
    let mut sum = 0.0f32;
    for (obs, mask) in observations.iter().take(decisions) {
        if let Some(c) = one_decision(&policy, obs, *mask, &mut scratch) {
            phases[c.phase as usize] += 1;
        }
        sum += forward_only(&policy, obs, &mut scratch);
    }
    println!(
        "{format} blob {} bytes; {decisions} decisions; phases chosen {phases:?}; checksum {sum:.3}",
        blob.len()
    );
}
