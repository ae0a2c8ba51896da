//! The policy manifest: what a controller must know about a policy before trusting it.
//!
//! Stored as JSON in the ONNX model's `metadata_props` (key [`MANIFEST_KEY`]) and beside
//! it in a bundle.

use greenwave_core::{ObsLayout, PhasePlan};
use serde::{Deserialize, Serialize};

/// `metadata_props` key holding the manifest JSON.
pub const MANIFEST_KEY: &str = "greenwave.manifest";
/// Current manifest format version.
pub const MANIFEST_FORMAT: u32 = 1;

/// Timing of one phase, in seconds (for people reading the manifest; the plan hash is what
/// is checked).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimingSecs {
    /// Min green.
    pub min_green_s: f32,
    /// Max green.
    pub max_green_s: f32,
    /// Yellow.
    pub yellow_s: f32,
    /// All-red.
    pub all_red_s: f32,
}

/// Where a policy came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The command that produced it.
    pub command: String,
    /// Git revision of the code that produced it (or "unknown").
    pub git_rev: String,
    /// Training seed.
    pub seed: u64,
    /// Scenario (name or file) it was trained on.
    pub scenario: String,
    /// Algorithm ("ppo", "offpolicy-ppo", "finetune").
    pub algorithm: String,
    /// Environment steps (agent decisions) of training.
    pub env_steps: u64,
    /// Parent policy version, for fine-tuned policies.
    #[serde(default)]
    pub parent_version: Option<u32>,
    /// Free-form details (log range, update statistics, ...).
    #[serde(default)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

/// The manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format_version: u32,
    /// Policy version (1 for a trained policy; bumped by each accepted fine-tune).
    pub policy_version: u32,
    /// Observation layout.
    pub obs_layout: ObsLayout,
    /// Observation layout version (greenwave_core::observation::OBS_LAYOUT_VERSION).
    pub obs_layout_version: u16,
    /// Action index → phase index of the plan.
    pub action_phases: Vec<u8>,
    /// `PhasePlan::hash()` of the plan, hex.
    pub plan_hash: String,
    /// Seconds between decisions.
    pub decision_interval_s: f32,
    /// Per-phase timing.
    pub phase_timing: Vec<PhaseTimingSecs>,
    /// Hidden widths of the actor and critic.
    pub hidden: Vec<usize>,
    /// Hidden activation ("tanh" or "relu").
    pub activation: String,
    /// Where it came from.
    pub provenance: Provenance,
}

impl Manifest {
    /// A manifest for a policy acting on `plan` with `layout`.
    pub fn new(
        plan: &PhasePlan,
        layout: ObsLayout,
        decision_interval_s: f32,
        hidden: Vec<usize>,
        provenance: Provenance,
    ) -> Self {
        Manifest {
            format_version: MANIFEST_FORMAT,
            policy_version: 1,
            obs_layout: layout,
            obs_layout_version: greenwave_core::observation::OBS_LAYOUT_VERSION,
            action_phases: (0..plan.n_phases() as u8).collect(),
            plan_hash: plan_hash_hex(plan),
            decision_interval_s,
            phase_timing: plan
                .phases()
                .iter()
                .map(|p| PhaseTimingSecs {
                    min_green_s: p.timing.min_green.as_secs_f32(),
                    max_green_s: p.timing.max_green.as_secs_f32(),
                    yellow_s: p.timing.yellow.as_secs_f32(),
                    all_red_s: p.timing.all_red.as_secs_f32(),
                })
                .collect(),
            hidden,
            activation: "tanh".into(),
            provenance,
        }
    }

    /// The plan hash as a number, if the hex string is well formed.
    pub fn plan_hash_u64(&self) -> Option<u64> {
        u64::from_str_radix(&self.plan_hash, 16).ok()
    }
}

/// The plan fingerprint as 16 hex digits.
pub fn plan_hash_hex(plan: &PhasePlan) -> String {
    format!("{:016x}", plan.hash())
}
