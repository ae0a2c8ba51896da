//! `greenwave train` arguments.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Args;

use super::checkpoint::{self, RunInfo};
use super::demand_probe::DemandProbe;
use super::device::ComputeDevice;
use super::policy::{PolicyKind, SharedOverrides};
use super::selection::{self, ValidationConfig};
use super::{check_settings, train, Algo, TrainConfig, TrainSummary};
use crate::backend::{episode_of_secs, Backend, BackendArgs, EnvSource, OnOff, RewardArg};

/// Arguments of `greenwave train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Built-in scenario (single-4way, arterial-3, grid-4x4) or a TOML scenario file
    /// (embedded simulator).
    #[arg(long, default_value = "single-4way", conflicts_with_all = ["net", "sumocfg"])]
    pub scenario: String,
    /// Demand set of the scenario (e.g. `shifted`; embedded simulator).
    #[arg(long, conflicts_with_all = ["net", "sumocfg"])]
    pub demand: Option<String>,
    /// Simulator (`--backend sumo --net F.net.xml --routes F.rou.xml [--begin S]`), as for
    /// `greenwave sim`. On SUMO every environment runs its own `sumo` process, the signals
    /// are the net's traffic lights and their phase plans come from the net.
    #[command(flatten)]
    pub sim: BackendArgs,
    /// Learning algorithm.
    #[arg(long, value_enum, default_value_t = Algo::Ppo)]
    pub algo: Algo,
    /// Agent decisions to train for (all environments and signals together), rounded up
    /// to whole iterations (one rollout of every environment and signal).
    #[arg(long, default_value_t = 300_000)]
    pub steps: u64,
    /// Seed: the same seed gives the same policy on CPU.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run folder (checkpoints, metrics.csv, plots).
    #[arg(long)]
    pub out: PathBuf,
    /// Continue the run in `--out` from its last checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Parallel environments.
    #[arg(long, default_value_t = 8)]
    pub envs: usize,
    /// Decisions per environment per iteration.
    #[arg(long, default_value_t = 180)]
    pub rollout_steps: usize,
    /// Rollout worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Keep a step in flight in every environment of a worker thread while the policy acts
    /// on the others (SUMO: the simulators run while the worker waits on none of them).
    /// Off by default: on the 2-core machine it measured slower (BENCHMARKS.md, "Training
    /// throughput"); it is meant for machines with more cores than worker threads.
    #[arg(long)]
    pub pipelined: bool,
    /// Hidden layer widths of actor and critic. With `--policy shared`: exactly two, the
    /// lane encoder's and the phase layer's.
    #[arg(long, value_delimiter = ',', default_value = "64,64")]
    pub hidden: Vec<usize>,
    /// Policy architecture: `mlp` (one MLP over the observation; every signal needs the
    /// same layout) or `shared` (one lane–phase network for any junction, exported as one
    /// MLP per signal). Default: `shared` when the signals' layouts differ, else `mlp`.
    #[arg(long, value_enum)]
    pub policy: Option<PolicyKind>,
    /// Initial learning rate (annealed linearly to 0). Default 3e-4; 1e-3 for the `shared`
    /// policy on SUMO.
    #[arg(long)]
    pub learning_rate: Option<f64>,
    /// Stop early once approx-KL exceeds this (PPO).
    #[arg(long)]
    pub target_kl: Option<f32>,
    /// Passes over each iteration's batch (PPO). Default 4 on the embedded simulator, 10 on
    /// SUMO (5 for the `shared` policy).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Decisions per gradient step (PPO). Default 256 on the embedded simulator, 64 on
    /// SUMO.
    #[arg(long)]
    pub minibatch: Option<usize>,
    /// Entropy bonus coefficient (PPO). Default 0.01; 0.02 for the `shared` policy on
    /// SUMO.
    #[arg(long)]
    pub ent_coef: Option<f32>,
    /// Anneal the entropy bonus linearly to 0 over the run, as the learning rate (PPO): the
    /// policy explores early and ends near the greedy one that `eval`, the controller and
    /// the firmware run. Off by default; a resumed run needs it again.
    #[arg(long)]
    pub anneal_ent_coef: bool,
    /// Discount half-life in seconds (γ per decision follows from the decision interval;
    /// the same definition and default, 60 s, as on-device fine-tuning).
    #[arg(long, default_value_t = greenwave_learn::discount::DEFAULT_HALF_LIFE_S)]
    pub discount_half_life_s: f64,
    /// Episode length override (s); on SUMO the default is 3600 s from `--begin`. Rounded
    /// up to whole decision intervals: the last decision runs its full interval.
    #[arg(long)]
    pub episode_seconds: Option<u32>,
    /// Stop after this many iterations. `--resume` goes on from the run's last resumable
    /// checkpoint, written only where an iteration ends on every environment's episode end;
    /// a stop before the first leaves weights to export but nothing to resume.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub stop_after_iterations: Option<u64>,
    /// Be done within this many minutes of wall time from the command's start (the demand
    /// probe included): the run stops at the last resumable checkpoint that leaves time
    /// for another checkpoint interval and the validations that end a run (the end test's
    /// second look on fresh seeds included), validates the weights there and
    /// selects as at a run's end. The learning rate still anneals over `--steps`, so the
    /// weights up to the stop are the unlimited run's; `--resume` continues it.
    #[arg(long, value_parser = parse_time_limit_min)]
    pub time_limit_min: Option<f64>,
    /// Where the learner's networks and updates run. `cuda` needs a build with
    /// `--features cuda` (never in CI); rollouts always run on the CPU.
    #[arg(long, value_enum, default_value_t = ComputeDevice::Cpu)]
    pub device: ComputeDevice,
    /// Checkpoint selection: in the run's second half the policy runs greedily on this
    /// many validation seeds at a few checkpoints and at the end, and the weights with
    /// the lowest mean delay are kept (`best.safetensors`; `greenwave export` takes them,
    /// `--last` the last ones), unless at the end they do not beat the last weights
    /// clearly (a paired one-sided t-test over the seeds, p < 0.10; where these seeds
    /// cannot tell, the lower mean on twice as many fresh seeds after them decides): then
    /// the last ones are kept. 0 turns it off; at least 2 otherwise. Default 3 (a resumed
    /// run: what it started with).
    #[arg(long)]
    pub validation_seeds: Option<u32>,
    /// The first validation seed (then the next ones, and the end test's fresh seeds after
    /// them: up to S + 3N − 1): apart from `greenwave eval`'s held-out seeds (1000 on) and
    /// from the training episodes' (hashed from `--seed`). Default 500 (a resumed run: what
    /// it started with).
    #[arg(long)]
    pub validation_first_seed: Option<u64>,
    /// The rule the exported policy acts by. `auto`: at the run's end the selected weights
    /// run on the end test's fresh seeds greedily and drawing at temperature 0.5, and the
    /// draw is kept (the manifest's `decision_temperature`) only where its mean delay is
    /// at most 0.9 of the greedy rule's; `greedy`: greedy always,
    /// for a policy that must run on the firmware, which acts greedily, or be fine-tuned in
    /// the field. Needs checkpoint selection (`--validation-seeds` above 0). Default `auto`
    /// on SUMO, `greedy` on the embedded simulator (a resumed run: what it started with).
    #[arg(long, value_enum)]
    pub decision_rule: Option<super::selection::DecisionRuleTrial>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// PPO epochs per iteration on SUMO.
const SUMO_EPOCHS: usize = 10;
/// PPO minibatch on SUMO.
const SUMO_MINIBATCH: usize = 64;

/// The decision interval a SUMO training run records, and the demand probe that chose it:
/// the flag's, else the timing file's, else — for a fresh run — the probe's
/// ([`DemandProbe`]: 2 s where the net carries its demand, 5 s where it is saturated); a
/// resumed run keeps what its `run.json` recorded (none for runs from before the 2 s
/// default: SUMO's 5 s). The classic controllers keep SUMO's default of 5 s, at which
/// max-pressure does better than at 2 s.
fn sumo_decision_interval(
    args: &TrainArgs,
    resumed: Option<&RunInfo>,
) -> Result<(Option<f64>, Option<DemandProbe>)> {
    let timing = &args.sim.timing;
    if timing.decision_interval.is_some() {
        return Ok((timing.decision_interval, None));
    }
    #[cfg(feature = "sumo")]
    if let Some(file) = &timing.timing {
        use anyhow::Context as _;
        let spec = greenwave_sim::sumo::TimingSpec::load(file)
            .with_context(|| format!("reading {}", file.display()))?;
        if spec.decision_interval_s.is_some() {
            return Ok((None, None));
        }
    }
    if let Some(run) = resumed {
        return Ok((
            run.config.sim.timing.decision_interval,
            run.config.demand_probe.clone(),
        ));
    }
    let source = EnvSource::from_args(&args.sim, &args.scenario, None)?;
    let episode = match args.episode_seconds {
        Some(s) => episode_of_secs(s)?,
        None => source.episode(),
    };
    let probe = DemandProbe::run(&source, args.seed, episode)?;
    eprintln!("{}", probe.describe());
    Ok((Some(probe.decision_interval_s), Some(probe)))
}

/// What the shared network changes in the SUMO recipe ([`SharedOverrides::sumo`]) for the
/// settings the command leaves unset; a resumed run keeps what its `run.json` recorded
/// (nothing for runs from before: they go on with the recipe they started with).
fn sumo_shared_overrides(args: &TrainArgs, resumed: Option<&RunInfo>) -> SharedOverrides {
    let Some(run) = resumed else {
        return SharedOverrides::sumo(args.learning_rate, args.epochs, args.ent_coef);
    };
    let recorded = run.config.shared_overrides;
    SharedOverrides {
        learning_rate: recorded
            .learning_rate
            .filter(|_| args.learning_rate.is_none()),
        epochs: recorded.epochs.filter(|_| args.epochs.is_none()),
        ent_coef: recorded.ent_coef.filter(|_| args.ent_coef.is_none()),
    }
}

/// The validation settings: the flags', else a resumed run's recorded ones (none for runs
/// from before checkpoint selection), else the defaults.
fn validation(args: &TrainArgs) -> Result<ValidationConfig> {
    let base = match args.resume {
        true => {
            super::checkpoint::read_run_info(&args.out)?
                .config
                .validation
        }
        false => ValidationConfig {
            seeds: selection::DEFAULT_SEEDS,
            first_seed: selection::DEFAULT_FIRST_SEED,
        },
    };
    Ok(ValidationConfig {
        seeds: args.validation_seeds.unwrap_or(base.seeds),
        first_seed: args.validation_first_seed.unwrap_or(base.first_seed),
    })
}

/// `--time-limit-min`: a positive, finite number of minutes (at most a year).
fn parse_time_limit_min(s: &str) -> Result<f64, String> {
    const YEAR_MIN: f64 = 365.0 * 24.0 * 60.0;
    match s.trim().parse::<f64>() {
        Ok(m) if m > 0.0 && m <= YEAR_MIN => Ok(m),
        Ok(m) => Err(format!(
            "{m} is not a time limit: give minutes above 0 and at most {YEAR_MIN} (a year)"
        )),
        Err(e) => Err(format!("'{s}' is not a number of minutes: {e}")),
    }
}

/// Runs `greenwave train`.
pub fn run(args: &TrainArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let scenario = match args.sim.backend {
        Backend::Embedded => args.scenario.clone(),
        // A label for run.json and provenance; the net and routes are in `cfg.sim`.
        Backend::Sumo => args.sim.sumo_label().unwrap_or_default(),
    };
    let mut cfg = TrainConfig::new(&scenario, args.algo, args.steps, args.seed);
    cfg.sim = args.sim.clone();
    cfg.demand = args.demand.clone();
    cfg.n_envs = args.envs;
    cfg.rollout_steps = args.rollout_steps;
    cfg.threads = args.threads;
    cfg.pipelined = args.pipelined;
    cfg.hidden = args.hidden.clone();
    cfg.policy = args.policy;
    cfg.episode_s = args.episode_seconds;
    cfg.stop_after_iterations = args.stop_after_iterations;
    cfg.deadline = args
        .time_limit_min
        .map(|m| started + std::time::Duration::from_secs_f64(m * 60.0));
    cfg.device = args.device;
    cfg.validation = validation(args)?;
    use super::selection::DecisionRuleTrial;
    if args.decision_rule == Some(DecisionRuleTrial::Auto) && cfg.validation.seeds == 0 {
        bail!(
            "--decision-rule auto tries the draw on the weights checkpoint selection kept: it \
             needs --validation-seeds above 0"
        );
    }
    cfg.decision_rule = match (args.decision_rule, args.resume) {
        // Without selection there are no selected weights to try a draw on.
        _ if cfg.validation.seeds == 0 => DecisionRuleTrial::Greedy,
        (Some(rule), _) => rule,
        (None, true) => {
            super::checkpoint::read_run_info(&args.out)?
                .config
                .decision_rule
        }
        // Real networks try the draw; greenwave's own scenarios, on which the firmware and
        // field fine-tune flows are built and demonstrated, stay greedy.
        (None, false) => match args.sim.backend {
            Backend::Sumo => super::selection::DecisionRuleTrial::Auto,
            Backend::Embedded => super::selection::DecisionRuleTrial::Greedy,
        },
    };
    // Before the demand probe, which can take a minute: bad settings fail at once.
    cfg.validation.check()?;
    if let Some(lr) = args.learning_rate {
        cfg.ppo.learning_rate = lr;
        cfg.offpolicy.learning_rate = lr;
    }
    cfg.ppo.target_kl = args.target_kl;
    if let Some(epochs) = args.epochs {
        cfg.ppo.epochs = epochs;
    }
    if let Some(minibatch) = args.minibatch {
        cfg.ppo.minibatch = minibatch;
    }
    if let Some(ent_coef) = args.ent_coef {
        cfg.ppo.ent_coef = ent_coef;
    }
    cfg.ppo.anneal_ent_coef = args.anneal_ent_coef;
    // Also before the demand probe: a device this build lacks, or settings that cannot
    // train, are refused before any simulator starts (`train` checks them again).
    cfg.device.candle()?;
    check_settings(&cfg)?;
    if args.sim.backend == Backend::Sumo {
        configure_sumo(&mut cfg, args)?;
    }
    cfg.discount = greenwave_learn::Discount::from_half_life_s(args.discount_half_life_s)?;
    cfg.command = std::env::args().collect::<Vec<_>>().join(" ");
    refuse_to_replace(&args.out, args.resume)?;
    let s = train(&cfg, &args.out, args.resume, !args.quiet)?;
    print_summary(&s, &args.out);
    Ok(())
}

/// The SUMO backend's settings: its update sizes, the shared network's overrides, and the
/// reward, pedestrian weight, program clock, pedestrian zones, intergreens, decision
/// interval and demand probe, each resolved (where the command line does not give it, a
/// resumed run keeps what it started with) and recorded.
fn configure_sumo(cfg: &mut TrainConfig, args: &TrainArgs) -> Result<()> {
    // SUMO's decisions cost ~100× the embedded simulator's: take more from each
    // (tools/README.md, "Training on real networks").
    cfg.ppo.epochs = args.epochs.unwrap_or(SUMO_EPOCHS);
    cfg.ppo.minibatch = args.minibatch.unwrap_or(SUMO_MINIBATCH);
    let resumed = match args.resume {
        true => Some(super::checkpoint::read_run_info(&args.out)?),
        false => None,
    };
    cfg.shared_overrides = sumo_shared_overrides(args, resumed.as_ref());
    // The reward is recorded resolved: a resumed run keeps the one it started with.
    cfg.sim.reward = args.sim.reward.or_else(|| match &resumed {
        Some(run) => run.config.sim.reward,
        None => Some(RewardArg::default()),
    });
    // So is the pedestrians' weight in it (runs from before it have 0).
    cfg.sim.pedestrian_weight = args.sim.pedestrian_weight.or(match &resumed {
        Some(run) => run.config.sim.pedestrian_weight,
        None => Some(greenwave_core::RewardKind::PEDESTRIAN_WEIGHT_DEFAULT),
    });
    // So is the program clock (runs from before it have none).
    cfg.sim.program_clock = args.sim.program_clock.or(match &resumed {
        Some(run) => run.config.sim.program_clock,
        None => Some(OnOff::On),
    });
    // So are the pedestrian zones (runs from before them have none).
    cfg.sim.pedestrian_zones = args.sim.pedestrian_zones.or(match &resumed {
        Some(run) => run.config.sim.pedestrian_zones,
        None => Some(OnOff::On),
    });
    // A resumed run keeps the intergreens it started with; a new one records none given
    // (the timing file's, else on).
    cfg.sim.program_intergreens = args.sim.program_intergreens.or(resumed
        .as_ref()
        .and_then(|run| run.config.sim.program_intergreens));
    let (interval, probe) = sumo_decision_interval(args, resumed.as_ref())?;
    cfg.sim.timing.decision_interval = interval;
    cfg.demand_probe = probe;
    Ok(())
}

/// Refuses to start a fresh run in a folder that already holds one (its `run.json`):
/// without `--resume` training would replace that run's weights and metrics.
fn refuse_to_replace(out: &Path, resume: bool) -> Result<()> {
    if !resume && out.join("run.json").exists() {
        bail!(
            "{} already holds a training run (run.json): `--resume` continues it; to train \
             afresh, choose another --out or remove that folder (nothing was changed)",
            out.display()
        );
    }
    Ok(())
}

/// What the run did, which weights export takes, and where the run folder is.
fn print_summary(s: &TrainSummary, out: &Path) {
    // NaN when no training episode finished (a budget shorter than an episode).
    let recent = if s.recent_episode_delay_s.is_finite() {
        format!("recent episode delay {:.2} s", s.recent_episode_delay_s)
    } else {
        "no training episode finished (the budget is shorter than an episode)".into()
    };
    say!(
        "trained {} decisions in {} iterations, {:.1} s ({:.0} decisions/s); {recent}",
        s.env_steps,
        s.iterations,
        s.wall_s,
        s.steps_per_s
    );
    if let Some(total) = s.stopped_short_of {
        say!(
            "stopped by the time limit at iteration {} of {}: `--resume` (with a new limit, or none) continues the run",
            s.iterations, total
        );
    }
    if let Some(v) = &s.selected {
        say!(
            "selected the weights of iteration {} ({} decisions): greedy delay {:.2} s on validation seeds {:?}; `greenwave export` takes them (validation.csv has every validation)",
            v.iteration,
            v.env_steps,
            v.mean_delay_s(),
            v.seeds
        );
    }
    say!(
        "run folder: {} (metrics.csv, training.png, losses.png, policy.safetensors{}{}{})",
        out.display(),
        match &s.selected {
            Some(_) => ", best.safetensors, validation.csv",
            None => "",
        },
        match out.join(checkpoint::END_TEST_FILE).exists() {
            true => ", end_test.json",
            false => "",
        },
        match out.join(checkpoint::DECISION_RULE_FILE).exists() {
            true => ", decision_rule.json",
            false => "",
        }
    );
}
