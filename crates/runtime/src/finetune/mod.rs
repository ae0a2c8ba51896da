//! On-device fine-tuning: small, clipped, off-policy PPO updates from the controller's own
//! transition log, gated so that a worse policy is never switched in.
//!
//! One fine-tune ([`finetune`]):
//!
//! 1. **Data** ([`data::read_log`]): every intact record of the log; a corrupt segment is
//!    reported and the rest of it skipped, every other segment is used. Observations are
//!    normalised with the running policy's own (baked-in) normalisation; each record's action
//!    mask is recovered from its observation ([`greenwave_core::ObsLayout::mask_from_obs`]).
//!    Records are split into blocks; every `held_back_every`-th block is held back for the
//!    gate and never trained on.
//! 2. **Critic**: a fresh `Q_φ(s, a)` fitted on the training records to expected-SARSA
//!    targets under the running policy `π_θt`: `y = r + γ Σ_a' π_θt(a'|s') Q_φ(s', a')`
//!    (exact expectation by default, or sampled: [`Expectation`]).
//! 3. **Update**: advantages `Â(s, a) = Q_φ(s, a) − E_{π_θt}[Q_φ(s, ·)]` for actions resampled
//!    from `π_θt` (or all actions, weighted by `π_θt`), `K` epochs of the clipped objective
//!    with ratio `π_θ(a|s) / π_θt(a|s)`, Adam at a small learning rate, stopped — and the
//!    crossing epoch undone — once `KL(π_θt ‖ π_θ)` exceeds the limit. Only the actor
//!    changes; normalisation and the value head are kept, so the graph is the same.
//! 4. **Gate** ([`gate::judge`]): on the held-back records with the *logged* reward, an
//!    independent evaluation critic estimates whether the candidate's greedy choices are
//!    at least as good as the running policy's, and the KL must be within its limit.
//!
//! [`store::PolicyStore`] then writes the accepted candidate as a new signed bundle (new
//! ONNX with the same graph, manifest with the version bumped and the provenance) and
//! switches to it atomically, keeping the previous version for rollback.
//!
//! ## Who chose the action: policy, supervisor, fallback
//!
//! Every record's *served* phase (`Transition::action`) is real experience of what that
//! phase did in that state, whoever chose it, so every record is used to fit `Q_φ`
//! (steps 2 and 4). No step uses a logged action as a sample of the policy: the update's
//! ratios are between the new and the running policy on actions *resampled* from the running
//! policy, and the gate evaluates by fitted Q, not by importance weights. So records where the
//! supervisor overrode the request (`Supervisor`: the logged `log_prob` is of the request,
//! not of what was served) or the fallback acted (`Fallback`: `log_prob` 0, the policy was
//! not consulted), and records from older policy versions or ε-greedy exploration, need no
//! importance correction and cannot bias the update; their logged `log_prob` is not used.
//! The states of all records are states the junction was really in, so the update improves
//! the policy on all of them.
//!
//! `done` marks the end of a controller session, not a terminal state of the junction:
//! traffic goes on, so targets bootstrap through it (a time limit, not a termination).
//!
//! ## Threads
//!
//! candle's CPU kernels use a thread pool sized by `RAYON_NUM_THREADS`; on a 2-core cabinet
//! computer one thread is several times faster for these small networks. The
//! `greenwave-controller` binary sets it to 1 unless it is set.

pub mod data;
pub mod gate;
#[cfg(feature = "sim")]
pub mod sim;
pub mod store;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use greenwave_learn::manifest::Manifest;
use greenwave_learn::nets::Adam;
pub use greenwave_learn::offpolicy::Expectation;
use greenwave_learn::offpolicy::{self, OffPolicyConfig, OffPolicyStats, QCritic};
use greenwave_learn::{onnx, MlpNet, PolicyWeights};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

pub use data::{LogPosition, LogSummary};
pub use gate::{GateConfig, GateReport};
pub use store::{PolicyStore, StoreError};

/// Why a fine-tune could not be carried out (a *rejected* candidate is not an error: see
/// [`GateReport`]).
#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    /// The log directory could not be listed.
    #[error("transition log {dir}: {source}")]
    Log {
        /// The directory.
        dir: PathBuf,
        /// The reader's error.
        source: crate::log::LogError,
    },
    /// The running policy could not be read from its ONNX model.
    #[error("running policy: {0}")]
    Model(#[from] onnx::OnnxError),
    /// Too little usable data.
    #[error("not enough data: {found} usable records in the log ({needed} needed){detail}")]
    NotEnoughData {
        /// Usable records.
        found: u64,
        /// Required.
        needed: usize,
        /// What else was found (skipped records, segment problems).
        detail: String,
    },
    /// A setting is out of range.
    #[error("invalid fine-tuning setting: {0}")]
    Config(String),
    /// The learning code failed (a shape problem: a bug, or a malformed model).
    #[error("learning: {0}")]
    Learn(#[from] candle_core::Error),
}

/// Fine-tuning settings. The defaults are conservative: they run unattended on field data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FinetuneConfig {
    /// The off-policy PPO settings (γ, critic and policy epochs, learning rates, clip ε,
    /// KL limit, expectations).
    pub update: OffPolicyConfig,
    /// The gate.
    pub gate: GateConfig,
    /// Every this many blocks of records, one is held back for the gate (5 = 20 %).
    pub held_back_every: usize,
    /// Records per block (consecutive decisions, all signals).
    pub block_records: usize,
    /// Fewest usable records to fine-tune on.
    pub min_records: usize,
    /// Seed of the critic initialisation, minibatch order and resampling.
    pub seed: u64,
    /// **Diagnostic only**: train the update on the *negated* logged reward — a
    /// deliberately harmful update, to check that the gate rejects it. The gate always
    /// uses the logged reward as it is. Never set in operation.
    pub flip_reward_sign: bool,
}

impl Default for FinetuneConfig {
    fn default() -> Self {
        FinetuneConfig {
            update: OffPolicyConfig {
                gamma: 0.95,
                q_epochs: 30,
                q_learning_rate: 1e-3,
                epochs: 10,
                learning_rate: 3e-4,
                minibatch: 256,
                clip_eps: 0.1,
                max_kl: 0.02,
                kl_hard_limit: true,
                max_grad_norm: 0.5,
                expectation: Expectation::Exact,
                resample: 4,
            },
            gate: GateConfig::default(),
            held_back_every: 5,
            block_records: 60,
            min_records: 1000,
            seed: 0,
            flip_reward_sign: false,
        }
    }
}

impl FinetuneConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), FinetuneError> {
        let u = &self.update;
        let bad = |s: String| Err(FinetuneError::Config(s));
        if !(0.0..1.0).contains(&u.gamma) {
            return bad(format!("gamma {} must be in [0, 1)", u.gamma));
        }
        if !(u.learning_rate.is_finite() && u.learning_rate >= 0.0) {
            return bad(format!("learning rate {} must be ≥ 0", u.learning_rate));
        }
        if !(u.q_learning_rate.is_finite() && u.q_learning_rate > 0.0) {
            return bad(format!(
                "critic learning rate {} must be > 0",
                u.q_learning_rate
            ));
        }
        if !(u.clip_eps > 0.0 && u.clip_eps < 1.0) {
            return bad(format!("clip ε {} must be in (0, 1)", u.clip_eps));
        }
        if !(u.max_kl > 0.0 && u.max_kl.is_finite()) {
            return bad(format!("KL limit {} must be > 0", u.max_kl));
        }
        if !(self.gate.max_kl > 0.0 && self.gate.max_kl.is_finite()) {
            return bad(format!("gate KL limit {} must be > 0", self.gate.max_kl));
        }
        if !(0.0..1.0).contains(&self.gate.gamma) {
            return bad(format!("gate gamma {} must be in [0, 1)", self.gate.gamma));
        }
        if u.minibatch == 0 || self.block_records == 0 || self.held_back_every < 2 {
            return bad("minibatch and block size must be ≥ 1, held-back-every ≥ 2".into());
        }
        if let Expectation::Sampled(0) = u.expectation {
            return bad("a sampled expectation needs at least one sample".into());
        }
        Ok(())
    }
}

/// What the update did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateReport {
    /// Records the critic was fitted on.
    pub training_records: usize,
    /// Of those, decision states the policy was updated on.
    pub training_decision_states: usize,
    /// The critic's final mean squared error.
    pub critic_loss: f32,
    /// The policy update's statistics (objective, KL, epochs, early stop).
    pub policy: OffPolicyStats,
    /// Whether the reward was negated for this update (diagnostic).
    pub flipped_reward_sign: bool,
}

/// Everything one fine-tune found and did: printed by the CLI, stored in the new
/// manifest's provenance, appended to the store's history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FinetuneReport {
    /// Version of the running (parent) policy.
    pub parent_version: u32,
    /// The log that was read.
    pub log: LogSummary,
    /// The update.
    pub update: UpdateReport,
    /// The gate's verdict.
    pub gate: GateReport,
    /// Wall seconds of the whole fine-tune.
    pub wall_s: f64,
    /// Peak RSS of the process (KiB) afterwards.
    pub peak_rss_kib: Option<u64>,
}

/// A fine-tuned candidate and its report.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The running policy's manifest.
    pub parent: Manifest,
    /// The candidate's parameters (normalisation and value head as the parent's).
    pub weights: PolicyWeights,
    /// What happened, including the gate's verdict.
    pub report: FinetuneReport,
}

/// Fine-tunes the policy in `model` (ONNX bytes of the running, verified bundle) on the
/// log in `log_dir`. `progress` receives one line per stage.
pub fn finetune(
    model: &[u8],
    log_dir: &Path,
    cfg: &FinetuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, FinetuneError> {
    cfg.validate()?;
    let started = Instant::now();
    let (weights, parent) = onnx::import(model)?;
    let layout = weights.obs_layout;
    progress(&format!(
        "running policy v{} ({} lanes × {} phases, hidden {:?}); reading {}",
        parent.policy_version,
        layout.n_lanes,
        layout.n_phases,
        weights.hidden(),
        log_dir.display()
    ));
    let logged = data::read_log(log_dir, layout, &weights.norm)?;
    let summary = logged.summary;
    progress(&format!(
        "{} records used of {} read in {} segments ({} decision states; by source {:?}){}",
        summary.records_used,
        summary.records_read,
        summary.segments,
        summary.decision_states,
        summary.by_source,
        if summary.issues.is_empty() {
            String::new()
        } else {
            format!("; {} segment problem(s) skipped", summary.issues.len())
        }
    ));
    if (summary.records_used as usize) < cfg.min_records.max(1) {
        return Err(FinetuneError::NotEnoughData {
            found: summary.records_used,
            needed: cfg.min_records.max(1),
            detail: format!(
                " ({} records read, {} of another layout, {} not finite, {} segment problem(s))",
                summary.records_read,
                summary.records_skipped_layout,
                summary.records_skipped_non_finite,
                summary.issues.len()
            ),
        });
    }
    let all = logged.batch;
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let (train_idx, held_idx) = data::split_blocks(
        all.len(),
        cfg.block_records,
        cfg.held_back_every,
        (cfg.seed % cfg.held_back_every as u64) as usize,
    );
    let held = all.select(&held_idx);
    let mut train = all.select(&train_idx);
    drop(all);
    if cfg.flip_reward_sign {
        // Diagnostic: the update optimises the opposite of the logged reward. The held-back
        // records (the gate's data) keep the logged reward.
        train.rewards.iter_mut().for_each(|r| *r = -*r);
    }

    // The running policy, twice: one copy is updated, the other is the reference.
    let dev = Device::Cpu;
    let old = MlpNet::from_dense(&weights.actor, &dev)?;
    let actor = MlpNet::from_dense(&weights.actor, &dev)?;
    let hidden = weights.hidden();

    progress(&format!(
        "fitting Q(s, a) on {} records ({} epochs, γ = {})",
        train.len(),
        cfg.update.q_epochs,
        cfg.update.gamma
    ));
    let q = QCritic::new(
        layout.dim(),
        layout.n_phases as usize,
        &hidden,
        &mut rng,
        &dev,
    )?;
    let mut qopt = Adam::new(q.net.vars(), 1e-5)?;
    let critic_loss = offpolicy::fit_critic(&q, &mut qopt, &old, &train, &cfg.update, &mut rng)?;

    // Only states with a real choice enter the policy step: elsewhere the sequencer forces
    // the target phase, every ratio is 1 and every advantage 0.
    let policy_batch = train.select(&data::decision_states(&train));
    progress(&format!(
        "updating the policy on {} decision states (≤ {} epochs, lr {}, clip {}, KL ≤ {})",
        policy_batch.len(),
        cfg.update.epochs,
        cfg.update.learning_rate,
        cfg.update.clip_eps,
        cfg.update.max_kl
    ));
    let stats = if policy_batch.is_empty() {
        OffPolicyStats::default()
    } else {
        let mut opt = Adam::new(actor.vars(), 1e-5)?;
        offpolicy::update_policy(&actor, &mut opt, &q, &policy_batch, &cfg.update, &mut rng)?
    };
    let update = UpdateReport {
        training_records: train.len(),
        training_decision_states: policy_batch.len(),
        critic_loss,
        policy: stats,
        flipped_reward_sign: cfg.flip_reward_sign,
    };
    drop((train, policy_batch, q, qopt));

    progress(&format!(
        "gate: evaluating on {} held-back records with the logged reward",
        held.len()
    ));
    let gate = gate::judge(&old, &actor, &held, &hidden, &cfg.gate, &mut rng)?;
    progress(&gate.reason);
    let new_weights = PolicyWeights {
        actor: actor.to_dense()?,
        ..weights
    };
    let report = FinetuneReport {
        parent_version: parent.policy_version,
        log: summary,
        update,
        gate,
        wall_s: started.elapsed().as_secs_f64(),
        peak_rss_kib: crate::peak_rss_kib(),
    };
    Ok(Outcome {
        parent,
        weights: new_weights,
        report,
    })
}

/// The candidate's manifest: the parent's, with `version`, and provenance naming the
/// parent, the log range and the update and gate statistics.
pub fn candidate_manifest(
    parent: &Manifest,
    version: u32,
    report: &FinetuneReport,
    cfg: &FinetuneConfig,
    command: &str,
) -> Manifest {
    let mut m = parent.clone();
    m.policy_version = version;
    let p = &mut m.provenance;
    p.command = command.to_string();
    p.git_rev = concat!("greenwave-runtime ", env!("CARGO_PKG_VERSION")).to_string();
    p.seed = cfg.seed;
    p.algorithm = "finetune".into();
    p.env_steps = report.log.records_used;
    p.parent_version = Some(parent.policy_version);
    // The trained-on scenario stays: the fine-tuned policy descends from it.
    let mut details = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        details.insert(k.into(), v);
    };
    put("parent_version", parent.policy_version.into());
    // The originally trained policy's provenance, carried down the chain of fine-tunes
    // (not nested per generation, so manifests stay small).
    let root = parent
        .provenance
        .details
        .get("root")
        .cloned()
        .unwrap_or_else(|| {
            serde_json::json!({
                "policy_version": parent.policy_version,
                "command": parent.provenance.command,
                "git_rev": parent.provenance.git_rev,
                "seed": parent.provenance.seed,
                "algorithm": parent.provenance.algorithm,
                "env_steps": parent.provenance.env_steps,
            })
        });
    put("root", root);
    put(
        "log",
        serde_json::json!({
            "first": report.log.first,
            "last": report.log.last,
            "records_used": report.log.records_used,
            "by_source": report.log.by_source,
            "by_policy_version": report.log.by_policy_version,
            "segment_problems": report.log.issues.len(),
        }),
    );
    put(
        "update",
        serde_json::to_value(&report.update).unwrap_or_default(),
    );
    put(
        "gate",
        serde_json::to_value(&report.gate).unwrap_or_default(),
    );
    put("config", serde_json::to_value(cfg).unwrap_or_default());
    p.details = details;
    m
}
