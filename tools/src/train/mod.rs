//! `greenwave train`: PPO (on-policy) or off-policy Q-critic PPO on a scenario of the
//! embedded simulator or on a SUMO net (`--backend sumo`), with a progress bar, a metrics
//! CSV, PNG plots, checkpoints and `--resume`. The training loop is generic over the
//! [`Env`] trait; the backend only decides how environments are made.
//!
//! Determinism: every random stream is derived from the seed and the iteration number
//! (rollout sampling per worker thread, minibatch shuffling, episode seeds per env slot),
//! so a run is reproducible on CPU for a given seed whatever the thread timing, and a run
//! resumed from a checkpoint continues exactly as the uninterrupted run would have.
//! Checkpoints are written at iteration ends where every environment has just finished an
//! episode (all slots share the episode length), so no simulator state needs saving.

pub mod checkpoint;
pub mod cli;
pub mod demand_probe;
pub mod device;
pub mod plots;
pub mod policy;
pub mod rollout;
pub mod selection;
pub mod time_limit;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use greenwave_core::{Millis, ObsLayout};
use greenwave_learn::gae::{gae, Trajectory};
use greenwave_learn::offpolicy::{self, OffPolicyConfig, QCritic, ReplayBatch};
use greenwave_learn::ppo::{self, PpoBatch, PpoConfig};
use greenwave_learn::shared::{lane_pairs, Incidence, IncidenceTensors, SharedGroups};
use greenwave_learn::Discount;
use greenwave_learn::{Adam, PolicyWeights, RewardScale, RunningObsStats};
use greenwave_sim::{EmbeddedEnv, Env, Scenario};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::backend::{episode_of_secs, Backend, BackendArgs};
use device::ComputeDevice;
use policy::{PolicyKind, PolicyNet, SharedOverrides};
use rollout::{
    collect_parallel, episode_seed, AgentTrajectory, EnvSlot, RolloutPolicy, RolloutSpec,
};
use selection::{Kept, Selector, Validation};
use time_limit::Deadline;

/// Normalised observations are clipped to ±this.
pub const OBS_CLIP: f32 = 10.0;

/// Which learning algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Algo {
    /// On-policy PPO with GAE.
    Ppo,
    /// Off-policy PPO with a Q-critic over a replay buffer.
    OffpolicyPpo,
}

impl Algo {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Ppo => "ppo",
            Algo::OffpolicyPpo => "offpolicy-ppo",
        }
    }
}

/// Everything a training run needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Scenario name or file (embedded simulator).
    pub scenario: String,
    /// The simulator: embedded (the scenario) or SUMO (net, routes, begin). Written into
    /// `run.json` as `backend`, `net`, `routes`, `begin` (absent in older runs: embedded).
    #[serde(flatten)]
    pub sim: BackendArgs,
    /// Algorithm.
    pub algo: Algo,
    /// Agent decisions to train for (summed over envs and signals).
    pub total_steps: u64,
    /// Seed.
    pub seed: u64,
    /// Parallel environments.
    pub n_envs: usize,
    /// Decisions per environment per iteration.
    pub rollout_steps: usize,
    /// Hidden widths of actor and critic (`--policy shared`: lane encoder, phase layer).
    pub hidden: Vec<usize>,
    /// Policy architecture (`--policy`); `None` picks `shared` when the signals' layouts
    /// differ and `mlp` otherwise. `run.json` holds the one trained (absent in older runs:
    /// `mlp`).
    #[serde(default)]
    pub policy: Option<PolicyKind>,
    /// Rollout worker threads.
    pub threads: usize,
    /// Pipelined rollouts (`--pipelined`): every environment of a worker keeps a step in
    /// flight. Absent in older runs: off.
    #[serde(default)]
    pub pipelined: bool,
    /// The discount, per second (a half-life), shared with on-device fine-tuning: at the
    /// start of a run it sets `ppo.gamma` and `offpolicy.gamma` from the environment's
    /// decision interval, so the horizon in seconds does not depend on the interval.
    #[serde(default)]
    pub discount: Discount,
    /// On-policy PPO settings (`gamma` is set from `discount`).
    pub ppo: PpoConfig,
    /// What PPO changes when the policy turns out `shared` (`greenwave train` on SUMO sets
    /// it for the settings its command left unset). Absent in older runs: nothing.
    #[serde(default)]
    pub shared_overrides: SharedOverrides,
    /// Off-policy PPO settings.
    pub offpolicy: OffPolicyConfig,
    /// Replay capacity (decisions) for off-policy PPO.
    pub replay_capacity: usize,
    /// Override of the episode length (s): the scenario's, or SUMO's default 3600 s.
    pub episode_s: Option<u32>,
    /// Demand set of the scenario (e.g. `shifted`), if not its default.
    #[serde(default)]
    pub demand: Option<String>,
    /// The command line, for provenance.
    pub command: String,
    /// Stop after this many iterations in total, as if interrupted (resume later with the
    /// same settings; the learning-rate schedule follows `total_steps`).
    #[serde(default)]
    pub stop_after_iterations: Option<u64>,
    /// Where the learner runs (`--device`); absent in older runs: CPU.
    #[serde(default)]
    pub device: ComputeDevice,
    /// The demand probe that chose a SUMO run's decision interval (none where the command
    /// or the timing file named one, and in older runs).
    #[serde(default)]
    pub demand_probe: Option<demand_probe::DemandProbe>,
    /// Checkpoint selection on validation seeds ([`selection`]); off in the library's
    /// default and in older runs, on (3 seeds) in `greenwave train`.
    #[serde(default)]
    pub validation: selection::ValidationConfig,
    /// Whether the run's end tries a sampled decision rule against the greedy one
    /// ([`selection::DecisionRuleTrial`]); greedy in the library's default and in older
    /// runs, `auto` in `greenwave train`.
    #[serde(default)]
    pub decision_rule: selection::DecisionRuleTrial,
    /// When this invocation must be done by (`--time-limit-min`): it stops at the last
    /// resumable checkpoint that leaves time for another interval and a validation
    /// ([`time_limit`]). Not recorded: a resumed run has its own.
    #[serde(skip)]
    pub deadline: Option<Instant>,
}

impl TrainConfig {
    /// Defaults suited to `single-4way` on 2 cores.
    pub fn new(scenario: &str, algo: Algo, total_steps: u64, seed: u64) -> Self {
        TrainConfig {
            scenario: scenario.into(),
            sim: BackendArgs::embedded(),
            algo,
            total_steps,
            seed,
            n_envs: 8,
            rollout_steps: 180,
            hidden: vec![64, 64],
            policy: None,
            threads: 2,
            pipelined: false,
            discount: Discount::default(),
            ppo: PpoConfig::default(),
            shared_overrides: SharedOverrides::default(),
            offpolicy: OffPolicyConfig {
                epochs: 4,
                learning_rate: 3e-4,
                ..Default::default()
            },
            replay_capacity: 20_000,
            episode_s: None,
            demand: None,
            command: String::new(),
            stop_after_iterations: None,
            device: ComputeDevice::Cpu,
            demand_probe: None,
            validation: selection::ValidationConfig::default(),
            decision_rule: selection::DecisionRuleTrial::Greedy,
            deadline: None,
        }
    }
}

/// One row of `metrics.csv`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IterationRow {
    /// Iteration (1-based).
    pub iteration: u64,
    /// Decisions so far.
    pub env_steps: u64,
    /// Wall seconds since the run (or resume) started.
    pub wall_s: f64,
    /// Decisions per wall second over this iteration (rollout + update).
    pub steps_per_s: f64,
    /// Episodes finished in this iteration.
    pub episodes: usize,
    /// Mean delay of those episodes (s), NaN if none.
    pub episode_delay_s: f64,
    /// Mean return of those episodes, NaN if none.
    pub episode_return: f64,
    /// Learning rate used.
    pub learning_rate: f64,
    /// Policy loss (PPO) or minus the clipped objective (off-policy).
    pub policy_loss: f32,
    /// Value loss (PPO) or critic loss (off-policy).
    pub value_loss: f32,
    /// Mean entropy (PPO; NaN off-policy).
    pub entropy: f32,
    /// Approx-KL (PPO) or KL to the pre-update policy (off-policy).
    pub approx_kl: f32,
    /// Clip fraction (PPO; NaN off-policy).
    pub clip_frac: f32,
    /// Wall seconds of this iteration's rollout (the simulators and the policy acting).
    #[serde(default)]
    pub rollout_s: f64,
    /// Wall seconds of this iteration's update (the learner alone).
    #[serde(default)]
    pub update_s: f64,
}

/// What a finished run reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Decisions trained on.
    pub env_steps: u64,
    /// Iterations.
    pub iterations: u64,
    /// Wall seconds of this invocation.
    pub wall_s: f64,
    /// Decisions per second over this invocation.
    pub steps_per_s: f64,
    /// Mean delay of the episodes finished in the last iterations.
    pub recent_episode_delay_s: f64,
    /// The validation of the selected weights (none with validation off).
    pub selected: Option<Validation>,
    /// The iterations the run has in all, where the time limit stopped it before them.
    #[serde(default)]
    pub stopped_short_of: Option<u64>,
}

/// Loads the scenario a config names, with its episode-length override.
pub fn scenario_of(cfg: &TrainConfig) -> Result<Scenario> {
    let mut sc = greenwave_sim::load(&cfg.scenario)
        .with_context(|| format!("loading scenario '{}'", cfg.scenario))?;
    if let Some(d) = &cfg.demand {
        sc = sc.with_demand(d)?;
    }
    if let Some(s) = cfg.episode_s {
        sc = sc.with_episode(episode_of_secs(s)?)?;
    }
    Ok(sc)
}

/// The one observation layout shared by all signals (parameter sharing needs it).
pub fn shared_layout(env: &dyn Env) -> Result<ObsLayout> {
    let specs = env.signals();
    let Some(first) = specs.first() else {
        bail!("scenario has no signals")
    };
    for s in specs {
        if s.layout != first.layout {
            bail!(
                "signals '{}' and '{}' have different observation layouts ({:?} vs {:?}); one MLP policy needs one layout (--policy shared serves any layout)",
                first.id, s.id, first.layout, s.layout
            );
        }
    }
    Ok(first.layout)
}

fn git_rev() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

/// The trajectories with their rewards scaled by the running return spread, after adding
/// them to it (see [`RewardScale`]).
fn scale_rewards(
    scale: &mut RewardScale,
    trajs: &[AgentTrajectory],
    gamma: f32,
) -> Vec<AgentTrajectory> {
    for t in trajs {
        scale.update(&t.rewards, &t.episode_end, gamma);
    }
    let k = scale.factor();
    trajs
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.rewards.iter_mut().for_each(|r| *r *= k);
            t
        })
        .collect()
}

fn ppo_batch<'a>(
    trajs: impl IntoIterator<Item = &'a AgentTrajectory>,
    layout: ObsLayout,
    cfg: &PpoConfig,
) -> PpoBatch {
    let mut b = PpoBatch {
        obs_dim: layout.dim(),
        n_actions: layout.n_phases as usize,
        ..Default::default()
    };
    for t in trajs {
        let terminated = vec![false; t.rewards.len()];
        let (adv, ret) = gae(
            Trajectory {
                rewards: &t.rewards,
                values: &t.values,
                next_values: &t.next_values,
                terminated: &terminated,
                episode_end: &t.episode_end,
            },
            cfg.gamma,
            cfg.gae_lambda,
        );
        b.obs.extend_from_slice(&t.obs);
        b.masks.extend_from_slice(&t.masks);
        b.actions.extend_from_slice(&t.actions);
        b.old_log_probs.extend_from_slice(&t.log_probs);
        b.old_values.extend_from_slice(&t.values);
        b.advantages.extend(adv);
        b.returns.extend(ret);
    }
    b
}

/// Raw replay records kept for off-policy PPO (normalised afresh at each update).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Replay {
    /// Raw `s`.
    pub obs: Vec<f32>,
    /// Raw `s'`.
    pub next_obs: Vec<f32>,
    /// Masks at `s`.
    pub masks: Vec<u8>,
    /// Masks at `s'`.
    pub next_masks: Vec<u8>,
    /// Served actions.
    pub actions: Vec<u32>,
    /// Rewards.
    pub rewards: Vec<f32>,
}

impl Replay {
    fn push(&mut self, t: &AgentTrajectory) {
        self.obs.extend_from_slice(&t.raw_obs);
        self.next_obs.extend_from_slice(&t.raw_next_obs);
        self.masks.extend_from_slice(&t.masks);
        self.next_masks.extend_from_slice(&t.next_masks);
        self.actions.extend_from_slice(&t.actions);
        self.rewards.extend_from_slice(&t.rewards);
    }

    fn truncate_front(&mut self, capacity: usize, d: usize, a: usize) {
        let n = self.actions.len();
        if n <= capacity {
            return;
        }
        let drop = n - capacity;
        self.obs.drain(..drop * d);
        self.next_obs.drain(..drop * d);
        self.masks.drain(..drop * a);
        self.next_masks.drain(..drop * a);
        self.actions.drain(..drop);
        self.rewards.drain(..drop);
    }

    fn normalized(
        &self,
        norm: &greenwave_learn::ObsNormalization,
        d: usize,
        a: usize,
    ) -> ReplayBatch {
        let apply = |raw: &[f32]| -> Vec<f32> {
            let mut out = vec![0.0; raw.len()];
            for (o, r) in out.chunks_mut(d).zip(raw.chunks(d)) {
                norm.apply(r, o);
            }
            out
        };
        ReplayBatch {
            obs_dim: d,
            n_actions: a,
            obs: apply(&self.obs),
            masks: self.masks.clone(),
            actions: self.actions.clone(),
            rewards: self.rewards.clone(),
            next_obs: apply(&self.next_obs),
            next_masks: self.next_masks.clone(),
        }
    }
}

/// Learner state: what a checkpoint holds.
pub struct Learner {
    /// Actor and critic.
    pub net: PolicyNet,
    /// Their optimiser.
    pub opt: Adam,
    /// Q-critic (off-policy only).
    pub q: Option<(QCritic, Adam)>,
    /// Observation statistics: per feature (MLP), or of `[density, queue]` lane pairs
    /// (shared policy).
    pub stats: RunningObsStats,
    /// Reward scaling (PPO).
    pub reward_scale: RewardScale,
    /// Iterations done.
    pub iteration: u64,
    /// Decisions done.
    pub env_steps: u64,
    /// Episodes started per env slot.
    pub slot_episodes: Vec<u64>,
    /// Replay (off-policy only).
    pub replay: Replay,
}

impl Learner {
    fn fresh(cfg: &TrainConfig, layout: ObsLayout) -> Result<Self> {
        let dev = cfg.device.candle()?;
        let kind = cfg.policy.unwrap_or(PolicyKind::Mlp);
        let net = PolicyNet::new(kind, layout, &cfg.hidden, cfg.seed, &dev)?;
        let opt = Adam::new(net.vars(), 1e-5)?;
        let q = match cfg.algo {
            Algo::Ppo => None,
            Algo::OffpolicyPpo if kind == PolicyKind::Shared => {
                bail!("--policy shared trains with --algo ppo only")
            }
            Algo::OffpolicyPpo => {
                let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x51);
                let q = QCritic::new(
                    layout.dim(),
                    layout.n_phases as usize,
                    &cfg.hidden,
                    &mut rng,
                    &dev,
                )?;
                let qopt = Adam::new(q.net.vars(), 1e-5)?;
                Some((q, qopt))
            }
        };
        Ok(Learner {
            net,
            opt,
            q,
            stats: RunningObsStats::new(match kind {
                PolicyKind::Mlp => layout.dim(),
                PolicyKind::Shared => 2,
            }),
            reward_scale: RewardScale::default(),
            iteration: 0,
            env_steps: 0,
            slot_episodes: vec![0; cfg.n_envs],
            replay: Replay::default(),
        })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// What a run trains on, beside the environments themselves.
struct RunSource<'a> {
    /// Scenario name, or `sumo:NET`.
    name: String,
    /// Decisions per episode (checkpoints fall on episode ends).
    episode_decisions: u64,
    /// Episode length (validation episodes run this long).
    episode: Millis,
    /// The scenario (embedded simulator), written to the run folder as `scenario.toml`.
    scenario: Option<&'a Scenario>,
}

/// Most hidden layers, and units per layer, `--hidden` takes: far past any policy a
/// controller runs (64,64 by default), short of sizes that only exhaust memory.
pub const MAX_HIDDEN_LAYERS: usize = 8;
/// See [`MAX_HIDDEN_LAYERS`].
pub const MAX_HIDDEN_WIDTH: usize = 4096;
/// Most parallel environments `--envs` takes (each holds a simulator; on SUMO a process).
pub const MAX_ENVS: usize = 1024;

/// Refuses settings that cannot train: zero sizes, sizes that only exhaust memory, and
/// learning settings that can only give NaN weights.
fn check_settings(cfg: &TrainConfig) -> Result<()> {
    if cfg.seed == 0 {
        // `episode_seed` spreads a seed over its bits by multiplying it: 0 stays 0, and the
        // episodes' seeds are then 0, 1, 2, … (slot 1's 512 on from SUMO's 31-bit fold),
        // the validation's (500 on) and the evaluation's (1000 on) among them.
        bail!(
            "--seed 0: training's episodes would be seeded 0, 1, 2, …, among them the held-out \
             seeds of validation (500 on) and evaluation (1000 on); any other seed keeps them apart"
        );
    }
    if cfg.n_envs == 0 || cfg.rollout_steps == 0 || cfg.total_steps == 0 {
        bail!("--envs, --rollout-steps and --steps must all be at least 1");
    }
    if cfg.ppo.epochs == 0 || cfg.ppo.minibatch == 0 {
        bail!("--epochs and --minibatch must both be at least 1");
    }
    if cfg.hidden.is_empty()
        || cfg.hidden.len() > MAX_HIDDEN_LAYERS
        || cfg.hidden.iter().any(|&w| w == 0 || w > MAX_HIDDEN_WIDTH)
    {
        bail!(
            "--hidden {:?}: 1 to {MAX_HIDDEN_LAYERS} layers of 1 to {MAX_HIDDEN_WIDTH} units each",
            cfg.hidden
        );
    }
    if cfg.n_envs > MAX_ENVS {
        bail!("--envs {}: at most {MAX_ENVS}", cfg.n_envs);
    }
    let lr = cfg.ppo.learning_rate;
    if !(lr.is_finite() && lr > 0.0) {
        bail!("--learning-rate must be a finite number > 0, got {lr}");
    }
    if let Some(kl) = cfg
        .ppo
        .target_kl
        .filter(|kl| !(kl.is_finite() && *kl > 0.0))
    {
        bail!("--target-kl must be a finite number > 0, got {kl}");
    }
    if !(cfg.ppo.ent_coef.is_finite() && cfg.ppo.ent_coef >= 0.0) {
        bail!(
            "--ent-coef must be a finite number ≥ 0, got {}",
            cfg.ppo.ent_coef
        );
    }
    if cfg.algo == Algo::OffpolicyPpo && cfg.device != ComputeDevice::Cpu {
        bail!("--algo offpolicy-ppo learns on the CPU only (its critic's batches are built there); --device cuda is for --algo ppo");
    }
    Ok(())
}

/// Runs (or resumes) training into `out`, on the backend `cfg.sim` names.
pub fn train(cfg: &TrainConfig, out: &Path, resume: bool, progress: bool) -> Result<TrainSummary> {
    check_settings(cfg)?;
    cfg.sim.check()?;
    cfg.validation.check()?;
    // Fail before any simulator starts when this build cannot give the asked device.
    cfg.device.candle()?;
    match cfg.sim.backend {
        Backend::Embedded => {
            let scenario = scenario_of(cfg)?;
            let source = RunSource {
                name: scenario.name().to_string(),
                // The simulator ends an episode at the first decision at or past its end.
                episode_decisions: u64::from(
                    scenario
                        .episode()
                        .0
                        .div_ceil(scenario.decision_interval().0.max(1)),
                ),
                episode: scenario.episode(),
                scenario: Some(&scenario),
            };
            train_on(cfg, out, resume, progress, &source, |seed| {
                Ok(EmbeddedEnv::from_scenario(&scenario, seed))
            })
        }
        Backend::Sumo => train_sumo(cfg, out, resume, progress),
    }
}

/// Training on SUMO: every environment slot runs its own `sumo` process.
#[cfg(feature = "sumo")]
fn train_sumo(cfg: &TrainConfig, out: &Path, resume: bool, progress: bool) -> Result<TrainSummary> {
    if let Some(d) = &cfg.demand {
        bail!("--demand {d} is a scenario option; on SUMO the demand is the route file");
    }
    let base = cfg
        .sim
        .sumo_config(cfg.episode_s.map(f64::from), cfg.seed)?;
    // run.json and the exported manifest keep the interval in whole seconds: a policy
    // trained at 2.5 s would be deployed deciding every 3 s.
    let interval_ms = base.decision_interval().0;
    if interval_ms % 1000 != 0 {
        bail!(
            "decision interval {} s: training needs whole seconds (the run and the exported \
             policy's manifest record it so); give --decision-interval a whole number",
            f64::from(interval_ms) / 1000.0
        );
    }
    let source = RunSource {
        name: cfg.sim.sumo_label().unwrap_or_default(),
        episode_decisions: (base.seconds / base.decision_interval_s).ceil() as u64,
        episode: base.episode(),
        scenario: None,
    };
    train_on(cfg, out, resume, progress, &source, |seed| {
        let mut c = base.clone();
        c.seed = seed;
        greenwave_sim::sumo::SumoEnv::new(c)
            .with_context(|| format!("starting SUMO on {}", base.net.display()))
    })
}

#[cfg(not(feature = "sumo"))]
fn train_sumo(
    _cfg: &TrainConfig,
    _out: &Path,
    _resume: bool,
    _progress: bool,
) -> Result<TrainSummary> {
    Err(crate::backend::sumo_not_built())
}

/// `cfg` with both learners' γ per decision set from its per-second discount at the
/// decision interval `interval_s`.
pub fn with_discount(cfg: &TrainConfig, interval_s: f64) -> Result<TrainConfig> {
    let gamma = cfg
        .discount
        .per_decision(interval_s)
        .context("training discount")?;
    let mut c = cfg.clone();
    c.ppo.gamma = gamma;
    c.offpolicy.gamma = gamma;
    Ok(c)
}

/// What training the shared policy needs: every signal's incidence, the distinct ones as
/// tensors (one PPO group each), and each signal's group.
struct SharedSetup {
    incidences: Vec<Incidence>,
    groups: Vec<IncidenceTensors>,
    of_signal: Vec<usize>,
}

impl SharedSetup {
    fn new(specs: &[greenwave_sim::SignalSpec], dev: &candle_core::Device) -> Result<Self> {
        let incidences = policy::signal_incidences(specs)?;
        let (distinct, of_signal) = policy::group_by_incidence(&incidences);
        let groups = distinct
            .iter()
            .map(|i| IncidenceTensors::new(i, dev))
            .collect::<candle_core::Result<_>>()?;
        Ok(SharedSetup {
            incidences,
            groups,
            of_signal,
        })
    }

    /// Signal of trajectory `k` (trajectories are slot-major, one per signal).
    fn signal_of(&self, k: usize) -> usize {
        k % self.incidences.len()
    }
}

/// The policy the next rollout acts with (the learner's, with the current statistics).
fn rollout_policy(learner: &Learner, shared: Option<&SharedSetup>) -> Result<RolloutPolicy> {
    let weights = match &learner.net {
        PolicyNet::Mlp(net) => {
            checkpoint::RunPolicy::Mlp(net.to_weights(learner.stats.normalization(OBS_CLIP))?)
        }
        PolicyNet::Shared(net) => checkpoint::RunPolicy::Shared(
            net.to_weights(policy::lane_norm(&learner.stats, OBS_CLIP))?,
        ),
    };
    acting_policy(weights, shared)
}

/// A run's weights as the policy that acts in its episodes (a shared one with its
/// signals' incidences).
fn acting_policy(
    weights: checkpoint::RunPolicy,
    shared: Option<&SharedSetup>,
) -> Result<RolloutPolicy> {
    Ok(match (weights, shared) {
        (checkpoint::RunPolicy::Mlp(w), _) => RolloutPolicy::mlp(w),
        (checkpoint::RunPolicy::Shared(w), Some(setup)) => {
            RolloutPolicy::shared(w, &setup.incidences)
        }
        (checkpoint::RunPolicy::Shared(_), None) => {
            bail!("a shared policy needs its signals' incidences")
        }
    })
}

/// What every iteration's update needs besides the learner and the rollout.
struct UpdateCtx<'a> {
    cfg: &'a TrainConfig,
    /// The shared policy's signals and groups (`None`: MLP policy).
    shared: Option<&'a SharedSetup>,
    /// The observation layout of the MLP policy (of the first signal for a shared one).
    layout: ObsLayout,
}

/// One PPO update on a rollout under `ppo_cfg` (the run's, scheduled for this iteration:
/// [`PpoConfig::scheduled`]): one batch (MLP), or one group per junction geometry.
fn ppo_step(
    learner: &mut Learner,
    ctx: &UpdateCtx<'_>,
    ppo_cfg: &PpoConfig,
    trajs: &[AgentTrajectory],
    rng: &mut StdRng,
) -> Result<ppo::UpdateStats> {
    let lr = ppo_cfg.learning_rate;
    Ok(match (&learner.net, ctx.shared) {
        (PolicyNet::Mlp(net), _) => {
            let batch = ppo_batch(trajs, ctx.layout, ppo_cfg);
            ppo::update(net, &mut learner.opt, &batch, ppo_cfg, lr, rng)?
        }
        (PolicyNet::Shared(net), Some(setup)) => {
            let batches: Vec<PpoBatch> = setup
                .groups
                .iter()
                .enumerate()
                .map(|(g, tensors)| {
                    let mine = trajs
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| setup.of_signal[setup.signal_of(*k)] == g)
                        .map(|(_, t)| t);
                    ppo_batch(mine, tensors.layout, ppo_cfg)
                })
                .collect();
            let model = SharedGroups {
                net,
                groups: setup.groups.clone(),
            };
            ppo::update_groups(&model, &mut learner.opt, &batches, ppo_cfg, lr, rng)?
        }
        (PolicyNet::Shared(_), None) => bail!("a shared policy needs its signals' incidences"),
    })
}

/// An iteration's PPO update (the learning rate and entropy bonus annealed with `frac_left`,
/// the iterations left, when asked), and the learner's columns of its row.
fn ppo_iteration(
    learner: &mut Learner,
    ctx: &UpdateCtx<'_>,
    trajs: &[AgentTrajectory],
    frac_left: f64,
    rng: &mut StdRng,
) -> Result<IterationRow> {
    let ppo_cfg = ctx.cfg.ppo.scheduled(frac_left);
    let scaled = scale_rewards(&mut learner.reward_scale, trajs, ppo_cfg.gamma);
    let st = ppo_step(learner, ctx, &ppo_cfg, &scaled, rng)?;
    Ok(IterationRow {
        learning_rate: ppo_cfg.learning_rate,
        policy_loss: st.policy_loss,
        value_loss: st.value_loss,
        entropy: st.entropy,
        approx_kl: st.approx_kl,
        clip_frac: st.clip_frac,
        ..Default::default()
    })
}

/// An iteration's off-policy update: the rollout joins the replay, the Q-critic is fitted
/// on it, then the policy is updated against the critic (learning rate annealed with
/// `frac_left`); and the learner's columns of its row.
fn offpolicy_iteration(
    learner: &mut Learner,
    ctx: &UpdateCtx<'_>,
    trajs: &[AgentTrajectory],
    frac_left: f64,
    rng: &mut StdRng,
) -> Result<IterationRow> {
    let cfg = ctx.cfg;
    let (d, a) = (ctx.layout.dim(), ctx.layout.n_phases as usize);
    for tr in trajs {
        learner.replay.push(tr);
    }
    learner.replay.truncate_front(cfg.replay_capacity, d, a);
    let norm = learner.stats.normalization(OBS_CLIP);
    let data = learner.replay.normalized(&norm, d, a);
    let (q, qopt) = learner.q.as_mut().expect("off-policy learner has a critic");
    let actor = &learner.net.mlp()?.actor;
    let q_loss = offpolicy::fit_critic(q, qopt, actor, &data, &cfg.offpolicy, rng)?;
    let mut opc = cfg.offpolicy.clone();
    opc.learning_rate *= frac_left;
    let st = offpolicy::update_policy(actor, &mut learner.opt, q, &data, &opc, rng)?;
    Ok(IterationRow {
        learning_rate: opc.learning_rate,
        policy_loss: -st.objective,
        value_loss: q_loss,
        entropy: f32::NAN,
        approx_kl: st.kl,
        clip_frac: f32::NAN,
        ..Default::default()
    })
}

/// Folds a rollout's raw observations into the statistics (per feature, or per lane pair).
fn update_stats(
    stats: &mut RunningObsStats,
    shared: Option<&SharedSetup>,
    trajs: &[AgentTrajectory],
) {
    for (k, tr) in trajs.iter().enumerate() {
        match shared {
            None => stats.update(&tr.raw_obs),
            Some(setup) => {
                let layout = setup.incidences[setup.signal_of(k)].layout();
                stats.update(&lane_pairs(&tr.raw_obs, layout));
            }
        }
    }
}

/// The training loop on environments made by `make(seed)` (one per slot, first episode
/// seeded `seed`), whatever their backend.
fn train_on<E: Env + Send>(
    cfg: &TrainConfig,
    out: &Path,
    resume: bool,
    progress: bool,
    source: &RunSource<'_>,
    make: impl Fn(u64) -> Result<E> + Sync,
) -> Result<TrainSummary> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("creating run folder {}", out.display()))?;
    let mut slots = make_slots(cfg, &make)?;
    let specs = slots[0].env.signals().to_vec();
    let (kind, layout, shared) = choose_policy(cfg, &slots[0].env, &specs)?;
    let interval_s = f64::from(slots[0].env.decision_interval().0) / 1000.0;
    let cfg = &configure(cfg, kind, interval_s)?;
    let mut learner = start_learner(cfg, out, resume, layout)?;
    reset_slots(&mut slots, &learner, cfg.seed)?;
    let schedule = Schedule::new(cfg, source, specs.len());
    // Before run.json changes: a fresh run must not pair it with an earlier run's selection.
    let mut selector = Selector::start(
        out,
        &cfg.validation,
        resume,
        learner.iteration,
        (schedule.iterations_total, schedule.checkpoint_every),
    )?;
    write_run_info(cfg, out, source, &slots[0].env, layout)?;

    let mut record = Record::open(out, resume, &learner)?;
    let bar = plots::progress_bar(progress, schedule.iterations_total, learner.iteration);
    let ctx = UpdateCtx {
        cfg,
        shared: shared.as_ref(),
        layout,
    };
    let validation = (out, source.episode, &make, &bar);
    let mut deadline = cfg.deadline.map(|at| Deadline::new(at, Instant::now()));
    let mut stopped_short_of = None;
    // A run resumed at a validation point that was not validated yet.
    select_if_due(&mut selector, &learner, &ctx, validation, deadline.as_mut())?;
    while learner.iteration < schedule.stop_at {
        let row = iteration(
            &mut learner,
            &mut slots,
            &ctx,
            schedule.iterations_total,
            record.start,
        )?;
        record.row(&row, &bar)?;
        let on_episode_ends = learner.iteration % schedule.checkpoint_every == 0;
        if on_episode_ends || learner.iteration == schedule.stop_at {
            checkpoint::save(out, &learner, on_episode_ends)?;
        }
        if on_episode_ends
            && learner.iteration < schedule.stop_at
            && out_of_time(
                deadline.as_mut(),
                &mut selector,
                &learner,
                &ctx,
                &schedule,
                source,
                validation,
            )?
        {
            stopped_short_of = Some(schedule.iterations_total);
            break;
        }
        // After the checkpoint: a run stopped while validating validates again on resume.
        select_if_due(&mut selector, &learner, &ctx, validation, deadline.as_mut())?;
        if on_episode_ends && learner.iteration < schedule.stop_at {
            // Curves so far, so that a run stopped early (a timeout, Ctrl-C) has them too.
            record.plot(out, &bar)?;
        }
    }
    if cfg.decision_rule == selection::DecisionRuleTrial::Auto && selector.best().is_some() {
        let line = choose_decision_rule(&ctx, &cfg.validation, out, (source.episode, &make))?;
        bar.suspend(|| eprintln!("{line}"));
    }
    bar.finish_and_clear();
    record.plot(out, &bar)?;
    let mut summary = record.summary(&learner);
    summary.selected = selector.best().cloned();
    summary.stopped_short_of = stopped_short_of;
    Ok(summary)
}

/// What an invocation of `train` writes as it goes: `metrics.csv`, one row an iteration,
/// and the curves drawn from it; and what its summary needs.
struct Record {
    csv_path: PathBuf,
    csv: std::io::BufWriter<std::fs::File>,
    /// When this invocation started.
    start: Instant,
    /// The decisions done before it (a resumed run's).
    start_steps: u64,
    /// The mean delays of the training episodes that finished.
    recent_delay: Vec<f64>,
}

impl Record {
    /// Opens `out`'s `metrics.csv`, kept up to `learner`'s iteration when resuming.
    fn open(out: &Path, resume: bool, learner: &Learner) -> Result<Self> {
        let csv_path = out.join("metrics.csv");
        let csv = checkpoint::open_csv(&csv_path, resume, learner.iteration)?;
        Ok(Record {
            csv_path,
            csv,
            start: Instant::now(),
            start_steps: learner.env_steps,
            recent_delay: Vec::new(),
        })
    }

    /// Records one iteration's row, and shows it on the progress bar.
    fn row(&mut self, row: &IterationRow, bar: &indicatif::ProgressBar) -> Result<()> {
        if row.episodes > 0 {
            self.recent_delay.push(row.episode_delay_s);
        }
        checkpoint::write_csv_row(&mut self.csv, row)?;
        plots::update_bar(bar, row);
        Ok(())
    }

    /// Flushes the rows and draws the curves so far into `out` (a warning if it cannot).
    fn plot(&mut self, out: &Path, bar: &indicatif::ProgressBar) -> Result<()> {
        self.csv.flush()?;
        plots::write_plots_or_warn(&self.csv_path, out, bar);
        Ok(())
    }

    /// The invocation's summary (selection: none).
    fn summary(&self, learner: &Learner) -> TrainSummary {
        TrainSummary::of(learner, self.start, self.start_steps, &self.recent_delay)
    }
}

/// The run's configuration for policy `kind` deciding every `interval_s`: the discount per
/// decision, the policy, and the shared network's overrides of the PPO settings.
fn configure(cfg: &TrainConfig, kind: PolicyKind, interval_s: f64) -> Result<TrainConfig> {
    let mut cfg = with_discount(cfg, interval_s)?;
    cfg.policy = Some(kind);
    cfg.shared_overrides.apply(kind, &mut cfg.ppo);
    Ok(cfg)
}

/// Puts each slot on the episode the learner has reached for it (the first on a fresh run).
fn reset_slots<E: Env>(slots: &mut [EnvSlot<E>], learner: &Learner, seed: u64) -> Result<()> {
    for (slot, &eps) in slots.iter_mut().zip(&learner.slot_episodes) {
        slot.episodes = eps;
        slot.env.reset(episode_seed(seed, slot.index, eps))?;
    }
    Ok(())
}

/// At a resumable checkpoint: whether the time limit `deadline` (none: no limit) stops the
/// run here (with the validation due here, if any, and those that end the run still to
/// fit). If it does, it says so on stderr and validates these weights as the run's end.
fn out_of_time<E: Env>(
    deadline: Option<&mut Deadline>,
    selector: &mut Selector,
    learner: &Learner,
    ctx: &UpdateCtx<'_>,
    schedule: &Schedule,
    source: &RunSource<'_>,
    validation: (
        &Path,
        Millis,
        &(impl Fn(u64) -> Result<E> + Sync),
        &indicatif::ProgressBar,
    ),
) -> Result<bool> {
    let Some(deadline) = deadline else {
        return Ok(false);
    };
    // The run's end may look again on fresh seeds (`selection::END_VALIDATIONS`), and
    // `--decision-rule auto` runs the selected weights on them twice more.
    let trial = match ctx.cfg.decision_rule {
        selection::DecisionRuleTrial::Auto => selection::DECISION_RULE_VALIDATIONS,
        selection::DecisionRuleTrial::Greedy => 0,
    };
    let validations =
        selection::END_VALIDATIONS + trial + u32::from(selector.pending(learner.iteration));
    let share = validation_share(ctx.cfg, schedule, source);
    let Some(stop) = deadline.at_checkpoint(Instant::now(), share, validations) else {
        return Ok(false);
    };
    let bar = validation.3;
    bar.suspend(|| eprintln!("{}", time_limit_line(learner, schedule, &stop)));
    selector.end_at(learner.iteration);
    select_if_due(selector, learner, ctx, validation, None)?;
    Ok(true)
}

/// What a validation costs against a checkpoint interval, before one has run: its greedy
/// episodes over the training episodes an interval runs (0 with validation off).
fn validation_share(cfg: &TrainConfig, schedule: &Schedule, source: &RunSource<'_>) -> f64 {
    let interval_decisions = schedule.checkpoint_every * cfg.rollout_steps as u64;
    let episodes =
        cfg.n_envs as f64 * interval_decisions as f64 / source.episode_decisions.max(1) as f64;
    f64::from(cfg.validation.seeds) / episodes.max(1.0)
}

/// The line that reports a stop at the time limit.
fn time_limit_line(learner: &Learner, schedule: &Schedule, stop: &time_limit::Stop) -> String {
    format!(
        "time limit: stopping at iteration {} of {} ({} decisions): {:.0} s left, the next \
         checkpoint interval and the validations still due need about {:.0} s; `--resume` continues the run",
        learner.iteration,
        schedule.iterations_total,
        learner.env_steps,
        stop.left.as_secs_f64(),
        stop.needed.as_secs_f64(),
    )
}

impl TrainSummary {
    /// The summary of an invocation that started at `start` with `start_steps` decisions
    /// done, whose finished episodes had mean delays `recent_delay` (selection: none).
    fn of(learner: &Learner, start: Instant, start_steps: u64, recent_delay: &[f64]) -> Self {
        let wall_s = start.elapsed().as_secs_f64();
        let trained = learner.env_steps - start_steps;
        let k = recent_delay.len().min(3);
        TrainSummary {
            env_steps: learner.env_steps,
            iterations: learner.iteration,
            wall_s,
            steps_per_s: trained as f64 / wall_s.max(1e-9),
            recent_episode_delay_s: mean(recent_delay[recent_delay.len() - k..].iter().copied()),
            selected: None,
            stopped_short_of: None,
        }
    }
}

/// Validates the learner's current weights ([`select`]) if they are due and not yet
/// validated, reporting the result on stderr (above the progress bar `bar`) and how long it
/// took to `deadline`.
fn select_if_due<E: Env>(
    selector: &mut Selector,
    learner: &Learner,
    ctx: &UpdateCtx<'_>,
    (out, episode, make, bar): (
        &Path,
        Millis,
        &(impl Fn(u64) -> Result<E> + Sync),
        &indicatif::ProgressBar,
    ),
    deadline: Option<&mut Deadline>,
) -> Result<()> {
    if !selector.pending(learner.iteration) {
        return Ok(());
    }
    let start = Instant::now();
    let line = select(selector, learner, ctx, out, (episode, make))?;
    if let Some(d) = deadline {
        d.validated(start.elapsed());
    }
    bar.suspend(|| eprintln!("{line}"));
    Ok(())
}

/// Validates the learner's current weights greedily on the validation seeds, in
/// environments from `make` running episodes `episode` long, keeps them if the selection
/// rule ([`selection::decide`], then [`selection::settle`] on fresh seeds where the end
/// test cannot tell) says so, and returns the line that reports it.
fn select<E: Env>(
    selector: &mut Selector,
    learner: &Learner,
    ctx: &UpdateCtx<'_>,
    out: &Path,
    (episode, make): (Millis, &(impl Fn(u64) -> Result<E> + Sync)),
) -> Result<String> {
    let weights = rollout_policy(learner, ctx.shared)?
        .per_signal_weights()
        .context("compiling the shared policy for validation")?;
    let start = Instant::now();
    let run = (episode, ctx.cfg.threads);
    let at = (learner.iteration, learner.env_steps);
    let v = selection::validation_of(make, &weights, selector.seeds(), run, at)?;
    let (mean, n_seeds) = (v.mean_delay_s(), v.seeds.len());
    let look_again = |seeds: &[u64]| -> Result<(Validation, Validation)> {
        let (earlier_weights, earlier_at) = selected_weights(out, ctx.shared)?;
        let earlier =
            selection::validation_of(make, &earlier_weights, seeds.to_vec(), run, earlier_at)?;
        let last = selection::validation_of(make, &weights, seeds.to_vec(), run, at)?;
        Ok((earlier, last))
    };
    let kept = kept_line(selector.record(out, learner, v, look_again)?);
    Ok(format!(
        "validation at iteration {}: greedy delay {mean:.2} s on {n_seeds} seeds ({:.0} s){kept}",
        learner.iteration,
        start.elapsed().as_secs_f64(),
    ))
}

/// The run's end under `--decision-rule auto`: the selected weights run on the end test's
/// fresh seeds greedily and drawing at [`selection::SAMPLED_TEMPERATURE`], and the draw is
/// kept only where it is [`selection::DRAW_MARGIN`] of greedy or less ([`selection::DecisionRuleTest`],
/// saved as `decision_rule.json` for `greenwave export`). Returns the line that reports it.
fn choose_decision_rule<E: Env>(
    ctx: &UpdateCtx<'_>,
    validation: &selection::ValidationConfig,
    out: &Path,
    (episode, make): (Millis, &(impl Fn(u64) -> Result<E> + Sync)),
) -> Result<String> {
    use crate::policy_controller::ActionRule;
    let start = Instant::now();
    let (weights, at) = selected_weights(out, ctx.shared)?;
    let seeds = validation.fresh_seed_list();
    let run = |rule| {
        let ep = (episode, ctx.cfg.threads);
        selection::validation_by(make, &weights, seeds.clone(), ep, at, rule)
    };
    let greedy = run(ActionRule::Greedy)?;
    let temperature = selection::SAMPLED_TEMPERATURE;
    let sampled = run(ActionRule::Sampled {
        temperature,
        seed: 0,
    })?;
    let test = selection::DecisionRuleTest::decide(greedy, sampled, temperature);
    checkpoint::save_decision_rule(out, &test)?;
    Ok(format!(
        "decision rule for iteration {}'s weights on {} fresh seeds: greedy {:.2} s, drawn at \
         temperature {temperature} {:.2} s: {} ({:.0} s)",
        at.0,
        seeds.len(),
        test.greedy.mean_delay_s(),
        test.sampled.mean_delay_s(),
        match test.temperature {
            Some(_) => "the draw, 10 % faster or more, is kept",
            None => "greedy is kept",
        },
        start.elapsed().as_secs_f64()
    ))
}

/// The run's selected weights (`best.*`) per signal, with the iteration and decisions
/// they were selected at.
fn selected_weights(
    out: &Path,
    shared: Option<&SharedSetup>,
) -> Result<(Vec<PolicyWeights>, (u64, u64))> {
    let selected = checkpoint::read_selected(out)?
        .with_context(|| format!("{} has no selected weights (best.json)", out.display()))?;
    let (policy, _, _) = checkpoint::load_run_policy_at(out, Some(&selected))?;
    let weights = acting_policy(policy, shared)?
        .per_signal_weights()
        .context("compiling the selected shared policy for the end test")?;
    let v = &selected.validation;
    Ok((weights, (v.iteration, v.env_steps)))
}

/// What the selection did, as the end of the line that reports a validation.
fn kept_line(kept: Kept) -> String {
    let p = |p: Option<f64>| p.map_or("n/a".into(), |p| format!("{p:.2}"));
    let fresh_seeds = |f: &selection::FreshTest| {
        format!(
            "{} fresh seeds ({}..={}): {:.2} s against {:.2} s",
            f.seeds,
            f.first_seed,
            f.first_seed + f.seeds.saturating_sub(1) as u64,
            f.earlier_mean_s,
            f.last_mean_s,
        )
    };
    let sig = selection::SIGNIFICANCE;
    match kept {
        Kept::No => String::new(),
        Kept::Best => ", best so far: kept".into(),
        Kept::LastOverEarlier {
            earlier,
            p_value,
            fresh,
        } => format!(
            ", kept: iteration {earlier}'s lower mean is not clearly better than the last weights (paired t-test p = {}, needs < {sig}){}",
            p(p_value),
            fresh.map_or(String::new(), |f| format!(
                ", nor has it the lower mean on {}",
                fresh_seeds(&f)
            ))
        ),
        Kept::EarlierOnFreshSeeds {
            earlier,
            p_value,
            fresh,
        } => format!(
            "; iteration {earlier}'s weights stay selected: the validation seeds could not tell (paired t-test p = {}, needs < {sig}), and they have the lower mean on {}",
            p(p_value),
            fresh_seeds(&fresh)
        ),
    }
}

/// The run's environment slots, each on the first episode of its seed stream.
fn make_slots<E: Env>(
    cfg: &TrainConfig,
    make: &impl Fn(u64) -> Result<E>,
) -> Result<Vec<EnvSlot<E>>> {
    (0..cfg.n_envs)
        .map(|i| {
            Ok(EnvSlot {
                env: make(episode_seed(cfg.seed, i, 0))?,
                index: i,
                episodes: 0,
                running_return: 0.0,
                masks: greenwave_sim::PolicyMasks::default(),
            })
        })
        .collect()
}

/// The policy architecture for the signals `specs` of `env` (`cfg.policy`, or the one their
/// layouts call for), its observation layout, and what a shared policy needs.
fn choose_policy(
    cfg: &TrainConfig,
    env: &dyn Env,
    specs: &[greenwave_sim::SignalSpec],
) -> Result<(PolicyKind, ObsLayout, Option<SharedSetup>)> {
    let kind = PolicyKind::resolve(cfg.policy, specs);
    let layout = match kind {
        PolicyKind::Mlp => shared_layout(env)?,
        PolicyKind::Shared => specs.first().context("scenario has no signals")?.layout,
    };
    let shared = match kind {
        PolicyKind::Mlp => None,
        PolicyKind::Shared => Some(SharedSetup::new(specs, &cfg.device.candle()?)?),
    };
    Ok((kind, layout, shared))
}

/// The learner from the run folder's checkpoint (`resume`), or a fresh one.
fn start_learner(
    cfg: &TrainConfig,
    out: &Path,
    resume: bool,
    layout: ObsLayout,
) -> Result<Learner> {
    if !resume {
        return Learner::fresh(cfg, layout);
    }
    let l = checkpoint::load(out, cfg, layout).context("resuming")?;
    eprintln!(
        "resuming {} at iteration {}, {} decisions",
        out.display(),
        l.iteration,
        l.env_steps
    );
    Ok(l)
}

/// Writes `run.json` (and `scenario.toml`) for the run on `env`'s signals.
fn write_run_info(
    cfg: &TrainConfig,
    out: &Path,
    source: &RunSource<'_>,
    env: &dyn Env,
    layout: ObsLayout,
) -> Result<()> {
    let signals = env.signals();
    checkpoint::write_run_info(
        out,
        cfg,
        &checkpoint::RunFacts {
            name: &source.name,
            decision_interval_s: (f64::from(env.decision_interval().0) / 1000.0).round() as u32,
            scenario: source.scenario,
            plans: signals.iter().map(|s| s.plan.clone()).collect(),
            signal_ids: signals.iter().map(|s| s.id.clone()).collect(),
            incidences: signals.iter().map(|s| s.incidence.clone()).collect(),
            reward_kind: env.reward_kind(),
        },
        layout,
        &git_rev(),
    )
}

/// How long a run is and where its checkpoints fall.
struct Schedule {
    /// Iterations for `total_steps` decisions (the learning-rate schedule follows them).
    iterations_total: u64,
    /// Where this invocation stops: `stop_after_iterations`, or the end.
    stop_at: u64,
    /// Iterations between resumable checkpoints: the fewest that end on an episode end.
    checkpoint_every: u64,
}

impl Schedule {
    fn new(cfg: &TrainConfig, source: &RunSource<'_>, n_signals: usize) -> Self {
        let per_iter = (cfg.n_envs * cfg.rollout_steps * n_signals) as u64;
        let iterations_total = cfg.total_steps.div_ceil(per_iter);
        let ep = source.episode_decisions.max(1);
        let t = cfg.rollout_steps as u64;
        let checkpoint_every = (t * ep / gcd(t, ep)) / t;
        let stop_at = cfg
            .stop_after_iterations
            .map_or(iterations_total, |s| s.min(iterations_total));
        Schedule {
            iterations_total,
            stop_at,
            checkpoint_every,
        }
    }
}

/// One iteration: a rollout with the current policy, an update on it, and the row of
/// `metrics.csv` reporting both (`start`: when this invocation started).
fn iteration<E: Env + Send>(
    learner: &mut Learner,
    slots: &mut [EnvSlot<E>],
    ctx: &UpdateCtx<'_>,
    iterations_total: u64,
    start: Instant,
) -> Result<IterationRow> {
    let cfg = ctx.cfg;
    let it_start = Instant::now();
    let it = learner.iteration;
    let frac_left = 1.0 - it as f64 / iterations_total as f64;
    let policy = rollout_policy(learner, ctx.shared)?;
    let spec = RolloutSpec {
        policy: &policy,
        steps: cfg.rollout_steps,
        seed: cfg.seed,
    };
    let (trajs, finished) = collect_parallel(slots, &spec, it, cfg.threads, cfg.pipelined)?;
    let steps: u64 = trajs.iter().map(|t| t.actions.len() as u64).sum();
    let rollout_s = it_start.elapsed().as_secs_f64();
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5eed ^ it.wrapping_mul(0x9e37_79b9));
    let mut row = match cfg.algo {
        Algo::Ppo => ppo_iteration(learner, ctx, &trajs, frac_left, &mut rng)?,
        Algo::OffpolicyPpo => offpolicy_iteration(learner, ctx, &trajs, frac_left, &mut rng)?,
    };
    // Statistics move after the update: the update used the ones the rollout used.
    update_stats(&mut learner.stats, ctx.shared, &trajs);
    learner.iteration += 1;
    learner.env_steps += steps;
    for (e, slot) in learner.slot_episodes.iter_mut().zip(slots.iter()) {
        *e = slot.episodes;
    }
    row.rollout_s = rollout_s;
    row.update_s = it_start.elapsed().as_secs_f64() - rollout_s;
    row.iteration = it + 1;
    row.env_steps = learner.env_steps;
    row.wall_s = start.elapsed().as_secs_f64();
    row.steps_per_s = steps as f64 / it_start.elapsed().as_secs_f64();
    row.episodes = finished.len();
    row.episode_delay_s = mean(finished.iter().map(|f| f.metrics.mean_delay_s));
    row.episode_return = mean(finished.iter().map(|f| f.episode_return));
    Ok(row)
}

/// Default run folder for a name: `runs/NAME`.
pub fn run_dir(name: &str) -> PathBuf {
    PathBuf::from("runs").join(name)
}
