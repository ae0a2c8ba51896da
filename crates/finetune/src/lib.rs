//! # greenwave-finetune
//!
//! On-device fine-tuning: small, clipped, off-policy PPO updates from the controller's own
//! transition log, gated so that a worse policy is never switched in. A crate of its own
//! (it needs candle, through `greenwave-learn`), so that the runtime library the controller
//! runs every decision does not; the `greenwave-controller` binary includes it.
//!
//! One objective throughout: the controller runs the **greedy** policy (masked argmax of the
//! logits; ε-greedy only while collecting data), so the update improves the greedy policy
//! under the deployed masks and the gate judges greedy against greedy. One discount,
//! [`FinetuneConfig::discount`] (a half-life in seconds, the same default as training),
//! converted to γ per decision by the running policy's decision interval.
//!
//! One fine-tune ([`finetune`]):
//!
//! 1. **Data** ([`data::read_log`]): every intact record of the log; a corrupt segment is
//!    reported and the rest of it skipped, every other segment is used. Observations are
//!    normalised with the running policy's own (baked-in) normalisation; each record's action
//!    mask is recovered from its observation ([`greenwave_core::ObsLayout::mask_from_obs`]).
//!    The most recent `holdout_fraction` of the records is held back for the gate and never
//!    trained on (a forward-in-time holdout).
//! 2. **Critic**: a fresh `Q_φ(s, a)` fitted on the training records to targets under the
//!    running greedy policy `g_t(s) = argmax π_θt(·|s)`: `y = r + γ Q_φ(s', g_t(s'))`.
//! 3. **Update**: advantages `Â(s, a) = Q_φ(s, a) − Q_φ(s, g_t(s))` (how much better than the
//!    deployed choice), `K` epochs of the clipped objective with ratio `π_θ(a|s) / π_θt(a|s)`
//!    over all allowed actions weighted by `π_θt`, Adam at a small learning rate, stopped —
//!    and the crossing epoch undone — once `KL(π_θt ‖ π_θ)` exceeds the limit. The greedy
//!    choice moves where another phase is worth more than the deployed one. Only the actor
//!    changes; normalisation and the value head are kept, so the graph is the same.
//! 4. **Gate** ([`gate::judge`]): a one-sided test on the held-back records that the
//!    candidate's greedy policy beats the running one's (doubly-robust off-policy estimate,
//!    block bootstrap over time × an ensemble of evaluation critics), with coverage and
//!    critic-fit checks; and a limit on attempts judged on overlapping held-back records
//!    ([`FinetuneConfig::max_attempts`]), so that retrying with other seeds until something
//!    passes is refused.
//!
//! [`store::PolicyStore`] then writes the accepted candidate as a new signed bundle (new
//! ONNX with the same graph, manifest with the version bumped and the provenance) and
//! switches to it atomically, keeping the previous version for rollback.
//!
//! ## Who chose the action: policy, supervisor, fallback
//!
//! Every record's *served* phase (`Transition::action`) is real experience of what that
//! phase did in that state, whoever chose it, so every record is used to fit `Q_φ`
//! (steps 2 and 4). The update never uses a logged action as a sample of the policy (its
//! ratios are between the new and the running policy over all allowed actions). The gate
//! uses the logged behaviour probability `exp(log π(a|s))` only where the policy chose the
//! served phase (`Policy`): its doubly-robust correction and its coverage count. Records
//! where the supervisor overrode the request (`Supervisor`: the logged `log_prob` is of the
//! request, not of what was served) or the fallback acted (`Fallback`) enter through the
//! critics only.
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

#![warn(missing_docs)]

pub mod attempts;
pub mod data;
pub mod gate;
#[cfg(feature = "sim")]
pub mod sim;
pub mod standing;
pub mod store;

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;
use greenwave_learn::nets::Adam;
pub use greenwave_learn::offpolicy::Expectation;
use greenwave_learn::offpolicy::{self, OffPolicyConfig, OffPolicyStats, QCritic, TargetPolicy};
use greenwave_learn::{Discount, MlpNet};
use greenwave_policy::manifest::{Manifest, Provenance};
use greenwave_policy::{onnx, PolicyWeights};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

pub use data::{LogPosition, LogSummary, RecordMeta};
pub use gate::{GateConfig, GateReport};
pub use standing::{standing, Standing};
pub use store::{HistoryDamage, PolicyStore, StoreError};

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
        source: greenwave_runtime::log::LogError,
    },
    /// The running policy could not be read from its ONNX model.
    #[error("running policy: {0}")]
    Model(#[from] onnx::OnnxError),
    /// The log holds records of more than one reward kind (e.g. firmware frames logging
    /// the queue collected into a log of the runtime's wait-delta records).
    #[error(
        "transition log {dir} mixes reward kinds ({kinds}): fine-tune on a log of one kind \
         (collect each controller's transitions into its own log)"
    )]
    MixedRewardKinds {
        /// The directory.
        dir: PathBuf,
        /// Records per kind.
        kinds: String,
    },
    /// The log's rewards are of another kind than the one the running policy was trained
    /// on (its manifest's `reward_kind`).
    #[error(
        "transition log {dir} holds rewards of kind {logged}, and the running policy was \
         trained on {trained}: a fine-tune would optimise, and be gated on, another aim \
         (log with a field of the policy's reward)"
    )]
    OtherReward {
        /// The directory.
        dir: PathBuf,
        /// The log's reward kind.
        logged: String,
        /// The policy's.
        trained: String,
    },
    /// The running policy was exported for one signal, and the log holds the records of
    /// several: which are that signal's is not known.
    #[error(
        "transition log {dir} holds the records of signals {signals}, and the running policy \
         was exported for signal '{id}' alone: name its index (--signal) so that only its \
         records are used"
    )]
    SeveralSignals {
        /// The directory.
        dir: PathBuf,
        /// The signal the policy was exported for.
        id: String,
        /// The signal indices in the log.
        signals: String,
    },
    /// The running policy is shared (it runs on every signal of the controller), and
    /// `--signal` chose one signal's records: a candidate judged on that signal alone would
    /// replace the policy on all of them.
    #[error(
        "transition log {dir}: --signal {signal} keeps signal {signal}'s records only, but the          running policy is shared and runs on every signal ({skipped} records of other signals):          fine-tune it on all of them (leave --signal out)"
    )]
    SharedPolicyOneSignal {
        /// The directory.
        dir: PathBuf,
        /// The signal asked for.
        signal: u16,
        /// Records of other signals left out.
        skipped: u64,
    },
    /// The running policy acts at a decision temperature: the gate judges the greedy
    /// policy's value (what a greedy controller runs), not that of a draw, so it cannot
    /// vouch for a candidate acting so.
    #[error(
        "the running policy acts at decision temperature {temperature} (its manifest), and \
         the fine-tune's gate judges greedy policies only: train and export it with \
         `--decision-rule greedy` to fine-tune it in the field"
    )]
    SampledPolicy {
        /// The manifest's decision temperature.
        temperature: f32,
    },
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
    /// The discount, per second: converted to γ per decision by the running policy's
    /// decision interval for the update and the gate (`update.gamma` is overwritten).
    pub discount: Discount,
    /// The off-policy PPO settings (critic and policy epochs, learning rates, clip ε, KL
    /// limit, expectations; the target is the greedy policy).
    pub update: OffPolicyConfig,
    /// The gate.
    pub gate: GateConfig,
    /// The most recent fraction of the records, held back for the gate.
    pub holdout_fraction: f64,
    /// Attempts (candidates judged) of one running version allowed on overlapping held-back
    /// records; later ones are refused without judging, so the gate's error rate is not
    /// multiplied by retries. Counted in `attempts_file`.
    pub max_attempts: u32,
    /// Where attempts are counted (default: `.finetune-attempts.json` in the log
    /// directory).
    #[serde(default)]
    pub attempts_file: Option<PathBuf>,
    /// Fewest usable records to fine-tune on.
    pub min_records: usize,
    /// Only the records of this signal (the controller's signal index, as logged). Needed
    /// for a policy exported for one signal when the log holds several: the others' records
    /// are another junction's traffic under another policy.
    #[serde(default)]
    pub signal: Option<u16>,
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
            discount: Discount::default(),
            update: OffPolicyConfig {
                gamma: 0.95,
                q_epochs: 60,
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
                target: TargetPolicy::Greedy,
            },
            gate: GateConfig::default(),
            holdout_fraction: 0.3,
            max_attempts: 3,
            attempts_file: None,
            min_records: 1000,
            signal: None,
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
        if let Err(e) = self.discount.per_second() {
            return bad(e.to_string());
        }
        if u.target != TargetPolicy::Greedy {
            return bad("the update must target the greedy policy the controller runs".into());
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
        self.gate.validate().map_err(FinetuneError::Config)?;
        if !(self.holdout_fraction > 0.0 && self.holdout_fraction < 1.0) {
            return bad(format!(
                "holdout fraction {} must be in (0, 1)",
                self.holdout_fraction
            ));
        }
        if u.minibatch == 0 {
            return bad("the update's minibatch must hold at least one record".into());
        }
        if self.max_attempts == 0 {
            return bad("max attempts (--max-attempts) 0: no candidate could be judged".into());
        }
        if u.epochs == 0 {
            return bad(
                "policy epochs (--epochs) 0: the candidate would be the running policy, and \
                 judging it would use up one of the gate's attempts on these records"
                    .into(),
            );
        }
        if let Expectation::Sampled(0) = u.expectation {
            return bad("a sampled expectation needs at least one sample".into());
        }
        if let Expectation::Sampled(m) = u.expectation {
            if m > MAX_SAMPLED_ACTIONS {
                return bad(format!(
                    "a sampled expectation of {m} actions: at most {MAX_SAMPLED_ACTIONS} \
                     (`exact` sums over every phase)"
                ));
            }
        }
        if u.q_epochs == 0 {
            return bad("critic epochs 0: the update would act on a critic never fitted".into());
        }
        if u.epochs > MAX_EPOCHS || u.q_epochs > MAX_EPOCHS {
            return bad(format!(
                "policy epochs {} and critic epochs {}: each at most {MAX_EPOCHS} (a \
                 controller fine-tunes in minutes)",
                u.epochs, u.q_epochs
            ));
        }
        Ok(())
    }
}

/// Most policy or critic epochs [`FinetuneConfig::validate`] accepts: far above the
/// defaults (10 and 20), and a bound on the time a fine-tune takes on a controller.
pub const MAX_EPOCHS: usize = 1_000;
/// Most sampled actions per expectation [`FinetuneConfig::validate`] accepts (`exact`
/// sums over a plan's at most 16 phases).
pub const MAX_SAMPLED_ACTIONS: usize = 4_096;

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

/// The log read and split for one running policy: what the update and the gate work on.
pub struct Prepared {
    /// The running policy's parameters.
    pub weights: PolicyWeights,
    /// Its manifest.
    pub parent: Manifest,
    /// What was read.
    pub summary: LogSummary,
    /// The records trained on (all but the most recent).
    pub train: offpolicy::ReplayBatch,
    /// The held-back (most recent) records.
    pub held: offpolicy::ReplayBatch,
    /// Sources and behaviour probabilities of `held`.
    pub held_meta: Vec<RecordMeta>,
    /// Where each record of `held` is in the log (what an attempt is counted against).
    pub held_positions: Vec<LogPosition>,
    /// γ per decision: the discount at the policy's decision interval.
    pub gamma: f32,
}

/// Reads the log in `log_dir` for the policy in `model` and splits it forward in time.
pub fn prepare(
    model: &[u8],
    log_dir: &Path,
    cfg: &FinetuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Prepared, FinetuneError> {
    cfg.validate()?;
    let (weights, parent) = onnx::import(model)?;
    if let Some(temperature) = parent.decision_temperature {
        return Err(FinetuneError::SampledPolicy { temperature });
    }
    let layout = weights.obs_layout;
    let gamma = cfg
        .discount
        .per_decision(f64::from(parent.decision_interval.as_secs_f32()))
        .map_err(|e| FinetuneError::Config(format!("running policy's manifest: {e}")))?;
    progress(&format!(
        "running policy v{} ({} lanes × {} phases, hidden {:?}, decision every {} s: γ = {:.4} \
         for a {} s half-life); reading {}",
        parent.policy_version,
        layout.n_lanes,
        layout.n_phases,
        weights.hidden(),
        parent.decision_interval.as_secs_f32(),
        gamma,
        cfg.discount.half_life_s,
        log_dir.display()
    ));
    let logged = data::read_log(log_dir, layout, &weights.norm, cfg.signal)?;
    check_reward_kind(parent.provenance.reward_kind(), &logged.summary, log_dir)?;
    check_one_signal(
        parent.provenance.signal_id(),
        &logged.summary,
        cfg.signal,
        log_dir,
    )?;
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
                " ({} records read, {} of another layout, {} not finite, {} segment \
                 problem(s){})",
                summary.records_read,
                summary.records_skipped_layout,
                summary.records_skipped_non_finite,
                summary.issues.len(),
                match cfg.signal {
                    Some(s) => format!(
                        ", {} of other signals than --signal {s}",
                        summary.records_skipped_signal
                    ),
                    None => String::new(),
                }
            ),
        });
    }
    let (train_idx, held_idx) = data::split_forward(logged.batch.len(), cfg.holdout_fraction);
    Ok(Prepared {
        train: logged.batch.select(&train_idx),
        held: logged.batch.select(&held_idx),
        held_meta: held_idx.iter().map(|&i| logged.meta[i]).collect(),
        held_positions: held_idx.iter().map(|&i| logged.positions[i]).collect(),
        weights,
        parent,
        summary,
        gamma,
    })
}

/// Refuses a log of another reward than the one the policy was trained on (`trained`,
/// from its manifest): the update would optimise, and the gate judge, another aim than
/// the policy's. A log of unrecorded reward (an older controller's) and a manifest that
/// records none (an older export) cannot be compared and pass.
fn check_reward_kind(
    trained: Option<greenwave_core::RewardKind>,
    summary: &LogSummary,
    log_dir: &Path,
) -> Result<(), FinetuneError> {
    let Some(trained) = trained else {
        return Ok(());
    };
    let want = data::reward_kind_name(Some(trained));
    match summary.by_reward_kind.keys().next() {
        Some(logged) if *logged != want && *logged != data::reward_kind_name(None) => {
            Err(FinetuneError::OtherReward {
                dir: log_dir.to_path_buf(),
                logged: logged.clone(),
                trained: want,
            })
        }
        _ => Ok(()),
    }
}

/// Refuses to fine-tune a policy exported for one signal (`exported_for`) on a log of
/// several signals, unless one was chosen (`signal`); and a shared policy (exported for
/// none) on one signal's records where the log holds others': it runs on all of them.
fn check_one_signal(
    exported_for: Option<&str>,
    summary: &LogSummary,
    signal: Option<u16>,
    log_dir: &Path,
) -> Result<(), FinetuneError> {
    let Some(id) = exported_for else {
        return match signal {
            Some(signal) if summary.records_skipped_signal > 0 => {
                Err(FinetuneError::SharedPolicyOneSignal {
                    dir: log_dir.to_path_buf(),
                    signal,
                    skipped: summary.records_skipped_signal,
                })
            }
            _ => Ok(()),
        };
    };
    if signal.is_some() || summary.by_signal.len() <= 1 {
        return Ok(());
    }
    Err(FinetuneError::SeveralSignals {
        dir: log_dir.to_path_buf(),
        id: id.to_string(),
        signals: summary
            .by_signal
            .iter()
            .map(|(s, n)| format!("{s} ({n} records)"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The gate's verdict on `candidate` (an actor of the running policy's shape) against the
/// running policy, on the prepared log's held-back records. Counts no attempt: for
/// benchmarks and tests that judge many candidates of known quality on one log.
pub fn judge_candidate(
    p: &Prepared,
    candidate: &MlpNet,
    cfg: &FinetuneConfig,
) -> Result<GateReport, FinetuneError> {
    let old = MlpNet::from_dense(&p.weights.actor, &Device::Cpu)?;
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x9a7e);
    let judged = gate::Judged {
        held: &p.held,
        meta: &p.held_meta,
        gamma: p.gamma,
    };
    gate::judge(
        &old,
        candidate,
        &judged,
        &p.weights.hidden(),
        &cfg.gate,
        &mut rng,
    )
}

/// Fine-tunes the policy in `model` (ONNX bytes of the running, verified bundle) on the
/// log in `log_dir`. `progress` receives one line per stage.
pub fn finetune(
    model: &[u8],
    log_dir: &Path,
    cfg: &FinetuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, FinetuneError> {
    let started = Instant::now();
    let p = prepare(model, log_dir, cfg, progress)?;
    let ucfg = OffPolicyConfig {
        gamma: p.gamma,
        ..cfg.update.clone()
    };
    let mut train = p.train.clone();
    if cfg.flip_reward_sign {
        // Diagnostic: the update optimises the opposite of the logged reward. The held-back
        // records (the gate's data) keep the logged reward.
        train.rewards.iter_mut().for_each(|r| *r = -*r);
    }
    let (actor, update) = update_actor(&p, &train, &ucfg, cfg, progress)?;
    drop(train);
    let attempts = attempts::Ledger::at(cfg, log_dir);
    let refused = |reason: String| GateReport {
        held_back_records: p.held.len(),
        reason,
        ..Default::default()
    };
    let version = p.parent.policy_version;
    let gate = match attempts.begin(version, cfg.signal, &p.held_positions, cfg.max_attempts) {
        Err(e) => refused(format!(
            "refused: {e}; without it the gate cannot limit how many candidates are judged on \
             this log. Restore the file, or remove it if no candidate was judged on this log \
             since it was last good"
        )),
        Ok(attempts::Attempt::Exhausted { tried }) => refused(format!(
            "refused: {tried} candidates of v{} were already judged on held-back records that \
             overlap these (limit {}); retrying on the same data until one passes would \
             defeat the test: log new data (the gate's held-back records, the most recent \
             {:.0} %, must all be newer than those already judged)",
            p.parent.policy_version,
            cfg.max_attempts,
            cfg.holdout_fraction * 100.0
        )),
        Ok(attempts::Attempt::Counted { number }) => {
            progress(&format!(
                "gate: judging greedy vs greedy on the {} most recent records (attempt {number} \
                 of {})",
                p.held.len(),
                cfg.max_attempts
            ));
            judge_candidate(&p, &actor, cfg)?
        }
    };
    progress(&gate.reason);
    let new_weights = PolicyWeights {
        actor: actor.to_dense()?,
        ..p.weights
    };
    let report = FinetuneReport {
        parent_version: p.parent.policy_version,
        log: p.summary,
        update,
        gate,
        wall_s: started.elapsed().as_secs_f64(),
        peak_rss_kib: greenwave_runtime::peak_rss_kib(),
    };
    Ok(Outcome {
        parent: p.parent,
        weights: new_weights,
        report,
    })
}

/// Steps 2–3: the greedy-target critic on `train`, then the clipped policy epochs.
fn update_actor(
    p: &Prepared,
    train: &offpolicy::ReplayBatch,
    ucfg: &OffPolicyConfig,
    cfg: &FinetuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<(MlpNet, UpdateReport), FinetuneError> {
    let dev = Device::Cpu;
    let layout = p.weights.obs_layout;
    let old = MlpNet::from_dense(&p.weights.actor, &dev)?;
    let actor = MlpNet::from_dense(&p.weights.actor, &dev)?;
    let hidden = p.weights.hidden();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    progress(&format!(
        "fitting Q(s, a) of the running greedy policy on {} records ({} epochs, γ = {:.4})",
        train.len(),
        ucfg.q_epochs,
        ucfg.gamma
    ));
    let q = QCritic::new(
        layout.dim(),
        layout.n_phases as usize,
        &hidden,
        &mut rng,
        &dev,
    )?;
    let mut qopt = Adam::new(q.net.vars(), 1e-5)?;
    let critic_loss = offpolicy::fit_critic(&q, &mut qopt, &old, train, ucfg, &mut rng)?;
    // Only states with a real choice enter the policy step: elsewhere the sequencer forces
    // the target phase, every ratio is 1 and every advantage 0.
    let policy_batch = train.select(&data::decision_states(train));
    progress(&format!(
        "updating the policy on {} decision states (≤ {} epochs, lr {}, clip {}, KL ≤ {})",
        policy_batch.len(),
        ucfg.epochs,
        ucfg.learning_rate,
        ucfg.clip_eps,
        ucfg.max_kl
    ));
    let stats = if policy_batch.is_empty() {
        OffPolicyStats::default()
    } else {
        let mut opt = Adam::new(actor.vars(), 1e-5)?;
        offpolicy::update_policy(&actor, &mut opt, &q, &policy_batch, ucfg, &mut rng)?
    };
    let update = UpdateReport {
        training_records: train.len(),
        training_decision_states: policy_batch.len(),
        critic_loss,
        policy: stats,
        flipped_reward_sign: cfg.flip_reward_sign,
    };
    Ok((actor, update))
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
    // A per-signal export stays bound to its signal: the controller's key signs this
    // version, and without the binding it would run on any signal of the same layout.
    if let Some(id) = parent.provenance.signal_id() {
        put(Provenance::SIGNAL_ID, id.into());
    }
    // And to its reward: the next fine-tune's log must be of it.
    if let Some(kind) = parent.provenance.details.get(Provenance::REWARD_KIND) {
        put(Provenance::REWARD_KIND, kind.clone());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy that acts at a decision temperature is refused before its log is read:
    /// the gate judges greedy policies only.
    #[test]
    fn a_policy_acting_at_a_temperature_is_not_fine_tuned() {
        let model = include_bytes!("../../../models/single-4way.onnx");
        let (w, mut m) = onnx::import(model).unwrap();
        m.decision_temperature = Some(0.5);
        let sampled = onnx::export(&w, &m);
        let cfg = FinetuneConfig::default();
        let missing = Path::new("no-such-log-dir");
        let Err(err) = prepare(&sampled, missing, &cfg, &mut |_| {}) else {
            panic!("prepared a policy that acts at a temperature");
        };
        assert!(
            matches!(err, FinetuneError::SampledPolicy { temperature } if temperature == 0.5),
            "{err}"
        );
        // The greedy original goes on to read the log (and finds none).
        let Err(err) = prepare(model, missing, &cfg, &mut |_| {}) else {
            panic!("prepared from a log folder that does not exist");
        };
        assert!(!matches!(err, FinetuneError::SampledPolicy { .. }), "{err}");
    }

    /// A log of another reward than the policy's is refused, naming both; a log or a
    /// manifest that records none passes. The kind round-trips through the manifest.
    #[test]
    fn a_log_of_another_reward_than_the_policys_is_refused() {
        use greenwave_core::RewardKind;
        let dir = Path::new("log");
        let log = |kind: Option<RewardKind>| LogSummary {
            by_reward_kind: [(data::reward_kind_name(kind), 10)].into(),
            ..Default::default()
        };
        let trained = Some(RewardKind::DelayAccrued);
        let e = check_reward_kind(trained, &log(Some(RewardKind::Queue)), dir).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("Queue") && text.contains("DelayAccrued"),
            "{text}"
        );
        assert!(check_reward_kind(trained, &log(trained), dir).is_ok());
        assert!(check_reward_kind(trained, &log(None), dir).is_ok());
        assert!(check_reward_kind(None, &log(Some(RewardKind::Queue)), dir).is_ok());
        let mut p = Provenance::default();
        assert_eq!(p.reward_kind(), None);
        p.set_reward_kind(RewardKind::DelayAccrued);
        assert_eq!(p.reward_kind(), trained);
    }

    /// A policy exported for one signal is not fine-tuned on a log of several unless one
    /// is chosen; a shared policy, or a log of one signal, needs no choice.
    #[test]
    fn a_per_signal_policy_needs_its_signal_named_on_a_log_of_several() {
        let dir = Path::new("log");
        let two = LogSummary {
            by_signal: [(0, 10), (1, 12)].into(),
            ..Default::default()
        };
        let e = check_one_signal(Some("J3"), &two, None, dir).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("'J3'") && text.contains("1 (12 records)") && text.contains("--signal"),
            "{text}"
        );
        assert!(check_one_signal(Some("J3"), &two, Some(1), dir).is_ok());
        assert!(check_one_signal(None, &two, None, dir).is_ok());
        let one = LogSummary {
            by_signal: [(0, 10)].into(),
            ..Default::default()
        };
        assert!(check_one_signal(Some("J3"), &one, None, dir).is_ok());
    }

    /// A shared policy runs on every signal: it is not fine-tuned (and gated) on one
    /// signal's records where the log holds others', as `--signal` would have it.
    #[test]
    fn a_shared_policy_is_not_fine_tuned_on_one_signal_of_several() {
        let dir = Path::new("log");
        let chosen = LogSummary {
            by_signal: [(1, 12)].into(),
            records_skipped_signal: 10,
            ..Default::default()
        };
        let e = check_one_signal(None, &chosen, Some(1), dir).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("--signal 1") && text.contains("shared") && text.contains("10 records"),
            "{text}"
        );
        let alone = LogSummary {
            by_signal: [(1, 12)].into(),
            ..Default::default()
        };
        assert!(check_one_signal(None, &alone, Some(1), dir).is_ok());
    }

    /// Sizes that would run for hours on a controller, or a critic never fitted, are
    /// refused by name before any record is read.
    #[test]
    fn a_fine_tune_too_long_to_finish_or_on_an_unfitted_critic_is_refused() {
        let refused = |f: fn(&mut FinetuneConfig)| {
            let mut cfg = FinetuneConfig::default();
            f(&mut cfg);
            cfg.validate().unwrap_err().to_string()
        };
        FinetuneConfig::default().validate().unwrap();
        assert!(refused(|c| c.update.q_epochs = 0).contains("never fitted"));
        assert!(refused(|c| c.update.epochs = 0).contains("--epochs"));
        assert!(refused(|c| c.max_attempts = 0).contains("--max-attempts"));
        assert!(refused(|c| c.update.q_epochs = 99_999_999).contains("at most 1000"));
        assert!(refused(|c| c.update.epochs = 1_001).contains("at most 1000"));
        let e = refused(|c| c.update.expectation = Expectation::Sampled(99_999_999_999));
        assert!(e.contains("at most 4096"), "{e}");
        let mut cfg = FinetuneConfig::default();
        (cfg.update.epochs, cfg.update.q_epochs) = (MAX_EPOCHS, MAX_EPOCHS);
        cfg.update.expectation = Expectation::Sampled(MAX_SAMPLED_ACTIONS);
        cfg.validate().unwrap();
    }
}
