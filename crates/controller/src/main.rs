//! `greenwave-controller`: the roadside controller.
//!
//! ```text
//! greenwave-controller run --bundle B --trust KEY.pub --scenario single-4way --log-dir D
//! greenwave-controller verify --bundle B --trust KEY.pub --scenario single-4way
//! greenwave-controller log --log-dir D
//! greenwave-controller collect --from frames.bin --log-dir D
//! greenwave-controller finetune --store S [--bundle B] --trust KEY.pub --key OWN.key --log-dir D
//! greenwave-controller rollback --store S --trust KEY.pub --trust OWN.pub
//! ```

mod collect;

use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use greenwave_core::{ActionSource, Millis};
use greenwave_runtime::bundle::{self, key_hex, VerifiedBundle};
use greenwave_runtime::controller::{
    Controller, ControllerConfig, ControllerStats, Fallback, FallbackKind, Field, NullSink, Policy,
    ReplayRecorder, ReplaySource, SignalSpec, SimField, Split,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer};
use greenwave_runtime::log::{read_all, LogConfig, LogWriter, SyncPolicy};
use greenwave_sim::EpisodeMetrics;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

#[derive(Parser)]
#[command(
    name = "greenwave-controller",
    version,
    about = "greenwave roadside controller: signed policy, supervisor, watchdog, transition log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Errors only.
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller on a field (embedded simulator, SUMO, or a replay).
    Run(Box<RunArgs>),
    /// Verify a bundle (signature, integrity, manifest; with --scenario also the plan).
    Verify(VerifyArgs),
    /// Summarise a transition log (records, sources, segment problems).
    Log(LogArgs),
    /// Append transitions from firmware serial frames to a transition log.
    Collect(CollectArgs),
    /// Fine-tune the current policy on the transition log (off-policy clipped PPO), gate
    /// it on held-back data, and switch to it atomically if it passes. Exit status: 0
    /// switched in (or passed, with --dry-run), 2 rejected by the gate, 1 error.
    Finetune(Box<FinetuneArgs>),
    /// Switch the policy store back to its previous version.
    Rollback(RollbackArgs),
}

/// `--timing`, `--program` and per-value overrides of the SUMO signals' timing (the same
/// options as `greenwave sim --backend sumo`).
#[cfg(feature = "sumo")]
#[derive(Args)]
struct SumoTiming {
    /// Timing file (TOML: decision_interval_s, [defaults], [signals."ID"]).
    #[arg(long, requires = "sumo_net")]
    timing: Option<PathBuf>,
    /// Program id to run on lights that have it.
    #[arg(long, requires = "sumo_net")]
    program: Option<String>,
    /// Yellow of every signal (s, 3-6).
    #[arg(long, requires = "sumo_net")]
    yellow: Option<f64>,
    /// All-red of every signal (s, 0-6).
    #[arg(long, requires = "sumo_net")]
    all_red: Option<f64>,
    /// Min green of every signal (s).
    #[arg(long, requires = "sumo_net")]
    min_green: Option<f64>,
    /// Max green of every signal (s).
    #[arg(long, requires = "sumo_net")]
    max_green: Option<f64>,
    /// Seconds between decisions.
    #[arg(long, requires = "sumo_net")]
    decision_interval: Option<f64>,
}

#[cfg(feature = "sumo")]
impl SumoTiming {
    fn apply(&self, cfg: &mut greenwave_sim::sumo::SumoConfig) -> Result<()> {
        let flags = greenwave_sim::sumo::TimingOverrides {
            yellow_s: self.yellow,
            all_red_s: self.all_red,
            min_green_s: self.min_green,
            max_green_s: self.max_green,
        };
        cfg.set_timing(
            self.timing.as_deref(),
            flags,
            self.decision_interval,
            self.program.clone(),
        )
        .context("SUMO timing options")
    }
}

#[derive(Args)]
struct RunArgs {
    /// The signed policy bundle (directory).
    #[arg(long)]
    bundle: PathBuf,
    /// A trusted public key file (repeat for several).
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Scenario name or TOML file: the signals' phase plans, and the embedded simulator as
    /// the field unless --replay is given.
    #[arg(long)]
    scenario: Option<String>,
    /// SUMO network (.net.xml) to run against instead of the embedded simulator.
    #[cfg(feature = "sumo")]
    #[arg(long, conflicts_with_all = ["scenario", "replay"], requires = "sumo_routes")]
    sumo_net: Option<PathBuf>,
    /// SUMO route files (with --sumo-net).
    #[cfg(feature = "sumo")]
    #[arg(long)]
    sumo_routes: Vec<PathBuf>,
    /// SUMO signal timing (with --sumo-net): as `greenwave sim --backend sumo`, each light's
    /// own program unless overridden; the bundle's plan hash must match the result.
    #[cfg(feature = "sumo")]
    #[command(flatten)]
    sumo_timing: SumoTiming,
    /// Replay recorded detector readings instead of simulating (plans from --scenario).
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Record the detector readings of this run as a replay file.
    #[arg(long)]
    record: Option<PathBuf>,
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Inference backend: tract, ort (feature `ort`) or matvec.
    #[arg(long, default_value = "tract")]
    backend: BackendKind,
    /// ONNX Runtime library (default: $ORT_DYLIB_PATH).
    #[arg(long)]
    ort_lib: Option<PathBuf>,
    /// Pace decisions and signal changes by the wall clock.
    #[arg(long)]
    realtime: bool,
    /// Seconds to run (default: the scenario's episode length; 3600 for SUMO).
    #[arg(long)]
    seconds: Option<f64>,
    /// Simulation seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the final report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Fallback controller: fixed-time or actuated.
    #[arg(long, default_value = "fixed-time")]
    fallback: FallbackKind,
    /// ε-greedy exploration for data collection (0 = greedy; at most 0.2).
    #[arg(long, default_value_t = 0.0)]
    epsilon: f32,
    /// Inference budget (ms): slower inferences are faults.
    #[arg(long, default_value_t = 20.0)]
    inference_budget_ms: f64,
    /// Fault-free seconds before a signal returns from its fallback to the policy.
    #[arg(long, default_value_t = 60)]
    healthy_s: u32,
    /// Log fsync policy: record, records:N or ms:T.
    #[arg(long, default_value = "ms:1000")]
    fsync: SyncPolicy,
    /// Log segment size (MiB) before rotation.
    #[arg(long, default_value_t = 16)]
    segment_mib: u64,
    /// Disk cap of the log (MiB); oldest segments are dropped beyond it.
    #[arg(long, default_value_t = 1024)]
    log_cap_mib: u64,
    /// Exit with an error instead of running the fallback when the bundle is refused.
    #[arg(long)]
    require_policy: bool,
}

#[derive(Args)]
struct VerifyArgs {
    /// The bundle directory.
    #[arg(long)]
    bundle: PathBuf,
    /// A trusted public key file (repeat for several).
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Also check the bundle against this scenario's signals.
    #[arg(long)]
    scenario: Option<String>,
}

#[derive(Args)]
struct LogArgs {
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CollectArgs {
    /// File of firmware frames (`-` for stdin).
    #[arg(long)]
    from: PathBuf,
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
}

#[derive(Args)]
struct FinetuneArgs {
    /// The controller's policy store (created if missing); the controller runs
    /// `--bundle <STORE>/current`.
    #[arg(long)]
    store: PathBuf,
    /// The flashed bundle, adopted as the store's first version when the store has none.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// A trusted public key file (repeat for several); the controller's own key (--key) is
    /// trusted too.
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// The controller's own signing key: fine-tuned bundles are signed with it.
    #[arg(long)]
    key: PathBuf,
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Also check the running bundle against this scenario's signals (plan and layout).
    #[arg(long)]
    scenario: Option<String>,
    /// Fine-tune and gate, but switch nothing and write no bundle.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Also write the report (JSON) to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Seed (critic initialisation, minibatches, bootstrap).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Policy epochs K.
    #[arg(long)]
    epochs: Option<usize>,
    /// Policy learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Clip ε.
    #[arg(long)]
    clip: Option<f32>,
    /// KL limit of the update (epochs stop, and the crossing epoch is undone, beyond it).
    #[arg(long)]
    max_kl: Option<f32>,
    /// KL limit of the gate (on held-back states).
    #[arg(long)]
    gate_max_kl: Option<f32>,
    /// One-sided confidence level of the gate's lower bound on the improvement (default
    /// 0.95).
    #[arg(long)]
    gate_level: Option<f32>,
    /// Fewest held-back records where exploration served the candidate's changed choice.
    #[arg(long)]
    gate_min_covered: Option<usize>,
    /// Candidates judged against the same log before the gate refuses (default 3).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Discount half-life in seconds (update and gate; γ per decision follows from the
    /// policy's decision interval). Default: the same as training (60 s).
    #[arg(long)]
    discount_half_life_s: Option<f64>,
    /// Critic fitting epochs.
    #[arg(long)]
    q_epochs: Option<usize>,
    /// Expectations over actions: `exact`, or `sampled:M` (M sampled actions).
    #[arg(long, default_value = "exact")]
    expectation: String,
    /// The most recent fraction of the log, held back for the gate (default 0.3).
    #[arg(long)]
    holdout_fraction: Option<f64>,
    /// Fewest usable records to fine-tune on.
    #[arg(long)]
    min_records: Option<usize>,
    /// DIAGNOSTIC ONLY: train the update on the negated reward (a deliberately harmful
    /// update, to see the gate reject it). The gate always uses the logged reward.
    #[arg(long)]
    diagnostic_flip_reward_sign: bool,
}

#[derive(Args)]
struct RollbackArgs {
    /// The controller's policy store.
    #[arg(long)]
    store: PathBuf,
    /// A trusted public key file (repeat; include the controller's own public key, which
    /// signed its fine-tuned versions): the previous version is verified before switching.
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Why (recorded in the store's history).
    #[arg(long, default_value = "manual rollback")]
    reason: String,
}

fn main() {
    // candle's CPU kernels: one thread is several times faster than two on a 2-core
    // cabinet computer for these small networks (set before any thread pool starts).
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => tracing::Level::ERROR,
        (false, 0) => tracing::Level::WARN,
        (false, 1) => tracing::Level::INFO,
        _ => tracing::Level::DEBUG,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Run(args) => run(*args, cli.quiet).map(|()| Exit::Ok),
        Command::Verify(args) => verify(args).map(|()| Exit::Ok),
        Command::Log(args) => log_summary(args).map(|()| Exit::Ok),
        Command::Collect(args) => collect(args).map(|()| Exit::Ok),
        Command::Finetune(args) => finetune(*args, cli.quiet),
        Command::Rollback(args) => rollback(args),
    };
    match result {
        Ok(Exit::Ok) => {}
        Ok(Exit::Rejected) => std::process::exit(2),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// How a successful command ends.
enum Exit {
    /// Done.
    Ok,
    /// The gate rejected the fine-tuned candidate (exit status 2).
    Rejected,
}

fn trusted_keys(paths: &[PathBuf]) -> Result<Vec<ed25519_dalek::VerifyingKey>> {
    paths
        .iter()
        .map(|p| bundle::load_public_key(p).map_err(anyhow::Error::from))
        .collect()
}

/// Verifies the bundle for every signal and loads its model.
fn load_policy(
    args: &RunArgs,
    signals: &[SignalSpec],
    interval: Millis,
) -> Result<(Policy, VerifiedBundle)> {
    let keys = trusted_keys(&args.trust)?;
    let first = &signals[0];
    let b = bundle::verify_and_load(&args.bundle, &keys, &first.plan, first.layout)?;
    for (i, s) in signals.iter().enumerate().skip(1) {
        b.check_signal(&s.plan, s.layout)
            .with_context(|| format!("signal {i} ({})", s.id))?;
    }
    let trained = b.manifest.decision_interval;
    if trained != interval {
        bail!("decision interval check failed: the policy decides every {trained}, this controller every {interval}");
    }
    let backend = load_backend(
        args.backend,
        &b.model,
        first.layout,
        args.ort_lib.as_deref(),
    )?;
    let explorer = if args.epsilon > 0.0 {
        Explorer::epsilon_greedy(args.epsilon, args.seed ^ 0x5eed)?
    } else {
        Explorer::greedy()
    };
    let policy = Policy {
        backend,
        version: b.manifest.policy_version,
        explorer,
    };
    Ok((policy, b))
}

#[derive(Serialize)]
struct PolicyReport {
    loaded: bool,
    backend: String,
    policy_version: Option<u32>,
    signer: Option<String>,
    error: Option<String>,
}

#[derive(Serialize)]
struct RunReport {
    #[serde(flatten)]
    metrics: Option<EpisodeMetrics>,
    decisions: u64,
    fallback_switches: u64,
    policy_returns: u64,
    supervisor_overrides: u64,
    fallback_decisions: u64,
    transitions_logged: u64,
    transitions_committed: u64,
    peak_rss_kib: Option<u64>,
    policy: PolicyReport,
    controller: ControllerStats,
}

fn run(args: RunArgs, quiet: bool) -> Result<()> {
    #[cfg(feature = "sumo")]
    if let Some(net) = args.sumo_net.clone() {
        let mut cfg = greenwave_sim::sumo::SumoConfig::new(net, args.sumo_routes[0].clone());
        cfg.routes = args.sumo_routes.clone();
        args.sumo_timing.apply(&mut cfg)?;
        cfg.seconds = args.seconds.unwrap_or(3600.0);
        cfg.seed = args.seed;
        let env = greenwave_sim::sumo::SumoEnv::new(cfg).context("starting SUMO")?;
        let field = SimField::new(env);
        let specs = field.signal_specs();
        let interval = field.decision_interval();
        let plans: Vec<_> = specs.iter().map(|s| &s.plan).collect();
        let mut fallback = Fallback::equal_split(&plans, interval);
        if args.fallback == FallbackKind::Actuated {
            fallback = fallback.with_actuated(&plans);
        }
        let seconds = args.seconds.unwrap_or(3600.0);
        return drive(&args, field, specs, fallback, interval, seconds, quiet);
    }
    let name = args.scenario.as_deref().context("--scenario is required")?;
    let scenario = greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
    let field = SimField::new(greenwave_sim::EmbeddedEnv::from_scenario(
        &scenario, args.seed,
    ));
    let specs = field.signal_specs();
    let interval = field.decision_interval();
    let fallback = Fallback::for_scenario(&scenario, args.fallback);
    let seconds = args.seconds.unwrap_or(scenario.episode_s() as f64);
    match &args.replay {
        Some(path) => {
            let detectors = ReplaySource::open(path, &specs)?;
            let field = Split {
                detectors,
                sink: NullSink,
            };
            drive(&args, field, specs, fallback, interval, seconds, quiet)
        }
        None => drive(&args, field, specs, fallback, interval, seconds, quiet),
    }
}

fn drive<F: Field>(
    args: &RunArgs,
    field: F,
    specs: Vec<SignalSpec>,
    fallback: Fallback,
    interval: Millis,
    seconds: f64,
    quiet: bool,
) -> Result<()> {
    match &args.record {
        Some(path) => {
            let mut field = ReplayRecorder::create(field, path, &specs, interval)?;
            drive_field(args, &mut field, specs, fallback, interval, seconds, quiet)
        }
        None => {
            let mut field = field;
            drive_field(args, &mut field, specs, fallback, interval, seconds, quiet)
        }
    }
}

fn drive_field<F: Field>(
    args: &RunArgs,
    field: &mut F,
    specs: Vec<SignalSpec>,
    fallback: Fallback,
    interval: Millis,
    seconds: f64,
    quiet: bool,
) -> Result<()> {
    let (policy, policy_report) = match load_policy(args, &specs, interval) {
        Ok((p, b)) => {
            let report = PolicyReport {
                loaded: true,
                backend: p.backend.name().into(),
                policy_version: Some(p.version),
                signer: Some(key_hex(&b.signer)),
                error: None,
            };
            (Ok(p), report)
        }
        Err(e) if args.require_policy => return Err(e.context("bundle refused (--require-policy)")),
        Err(e) => {
            let why = format!("{e:#}");
            eprintln!("bundle refused, running the fallback only: {why}");
            let report = PolicyReport {
                loaded: false,
                backend: args.backend.name().into(),
                policy_version: None,
                signer: None,
                error: Some(why.clone()),
            };
            (Err(why), report)
        }
    };
    let mut log_cfg = LogConfig::new(&args.log_dir);
    log_cfg.sync = args.fsync;
    log_cfg.max_segment_bytes = args.segment_mib << 20;
    log_cfg.max_total_bytes = args.log_cap_mib << 20;
    let (log, open) = LogWriter::open(log_cfg).context("opening the transition log")?;
    for d in &open.damage {
        eprintln!(
            "transition log: segment {} offset {} length {} damaged ({}); copied to {}",
            d.segment,
            d.offset,
            d.length,
            d.kind,
            d.quarantine.display()
        );
    }
    if let Some(r) = &open.repair {
        eprintln!("transition log repaired on open: {r:?}");
    }
    let mut cfg = ControllerConfig::new(interval);
    cfg.realtime = args.realtime;
    cfg.inference_budget = Duration::from_secs_f64(args.inference_budget_ms.max(0.0) / 1000.0);
    cfg.healthy_period = Millis::from_secs(args.healthy_s);
    let mut controller = Controller::new(specs, policy, fallback, cfg, Some(log))?;

    let total = (seconds * 1000.0 / interval.0.max(1) as f64).ceil() as u64;
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} decisions {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let stats = controller.run(field, seconds, |s| {
        bar.inc(1);
        bar.set_message(format!(
            "t={:.0}s fallback {}/{} switches {} logged {}",
            s.now_ms as f64 / 1000.0,
            s.on_fallback,
            s.signals,
            s.fallback_switches,
            s.transitions_logged
        ));
    })?;
    bar.finish_and_clear();
    let commit = controller
        .close_log()
        .context("closing the transition log")?;
    let mut metrics = field.metrics();
    if let Some(m) = &mut metrics {
        // The whole controller's wall time (inference, logging), not only the simulator's.
        m.wall_seconds = started.elapsed().as_secs_f64();
    }
    let report = RunReport {
        metrics,
        decisions: stats.decisions,
        fallback_switches: stats.watchdog.fallback_switches,
        policy_returns: stats.watchdog.policy_returns,
        supervisor_overrides: stats.supervisor_overrides,
        fallback_decisions: stats.fallback_decisions,
        transitions_logged: stats.transitions_logged,
        transitions_committed: commit.map_or(stats.transitions_committed, |c| c.committed),
        peak_rss_kib: greenwave_runtime::peak_rss_kib(),
        policy: policy_report,
        controller: stats,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &RunReport) {
    if let Some(m) = &r.metrics {
        println!(
            "mean delay {:.1} s, mean wait {:.1} s, mean travel time {:.1} s, throughput {} veh, backlog {} veh",
            m.mean_delay_s, m.mean_wait_s, m.mean_travel_time_s, m.throughput_veh, m.backlog_veh
        );
        println!(
            "{:.0} simulated s in {:.2} wall s",
            m.sim_seconds, m.wall_seconds
        );
    }
    match &r.policy.error {
        None => println!(
            "policy v{} on {}: {} decisions, {} by the fallback",
            r.policy.policy_version.unwrap_or(0),
            r.policy.backend,
            r.decisions,
            r.fallback_decisions
        ),
        Some(e) => println!(
            "no policy ({e}): all {} decisions by the fallback",
            r.decisions
        ),
    }
    println!(
        "fallback switches {}, returns to policy {}, supervisor overrides {}",
        r.fallback_switches, r.policy_returns, r.supervisor_overrides
    );
    println!(
        "transitions logged {} (committed {}), inference p50 {:.0} µs p99 {:.0} µs, peak RSS {} KiB",
        r.transitions_logged,
        r.transitions_committed,
        r.controller.inference_p50_us,
        r.controller.inference_p99_us,
        r.peak_rss_kib.map_or("?".into(), |k| k.to_string())
    );
}

fn verify(args: VerifyArgs) -> Result<()> {
    let keys = trusted_keys(&args.trust)?;
    let b = bundle::verify(&args.bundle, &keys)?;
    let m = &b.manifest;
    println!(
        "bundle {}: signature by {} verified",
        args.bundle.display(),
        key_hex(&b.signer)
    );
    println!(
        "policy v{} for plan {} ({} lanes × {} phases, decisions every {} s), trained by `{}` at {}",
        m.policy_version,
        m.plan_hash,
        m.obs_layout.n_lanes,
        m.obs_layout.n_phases,
        m.decision_interval.as_secs_f32(),
        m.provenance.command,
        m.provenance.git_rev
    );
    if let Some(name) = &args.scenario {
        let scenario =
            greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
        let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
        for (i, s) in SimField::new(env).signal_specs().iter().enumerate() {
            b.check_signal(&s.plan, s.layout)
                .with_context(|| format!("signal {i} ({}) of {name}", s.id))?;
        }
        println!("matches every signal of {name}");
    }
    Ok(())
}

#[derive(Serialize)]
struct LogSummary {
    segments: usize,
    records: usize,
    by_source: std::collections::BTreeMap<String, usize>,
    policy_versions: std::collections::BTreeMap<u32, usize>,
    issues: Vec<String>,
    /// Damaged byte ranges still in the segments (the reader skips them).
    damaged: Vec<ByteRange>,
    /// Damaged bytes a writer copied out before cutting them.
    quarantined: Vec<ByteRange>,
}

#[derive(Serialize)]
struct ByteRange {
    segment: u64,
    offset: u64,
    length: u64,
    /// The segment file, or the quarantine file holding the bytes.
    path: PathBuf,
    /// What was found there (damaged ranges only).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
}

fn log_summary(args: LogArgs) -> Result<()> {
    let reader = greenwave_runtime::log::LogReader::open(&args.log_dir)?;
    let (records, issues) = read_all(&args.log_dir)?;
    let mut s = LogSummary {
        segments: reader.segments().len(),
        records: records.len(),
        by_source: Default::default(),
        policy_versions: Default::default(),
        issues: issues.iter().map(|i| i.to_string()).collect(),
        damaged: issues
            .iter()
            .map(|i| ByteRange {
                segment: i.segment,
                offset: i.offset,
                length: i.skipped_bytes,
                path: i.path.clone(),
                kind: Some(i.kind.to_string()),
            })
            .collect(),
        quarantined: reader
            .quarantine()?
            .into_iter()
            .map(|q| ByteRange {
                segment: q.segment,
                offset: q.offset,
                length: q.length,
                path: q.path,
                kind: None,
            })
            .collect(),
    };
    for r in &records {
        let src = match r.transition.source {
            ActionSource::Policy => "policy",
            ActionSource::Supervisor => "supervisor",
            ActionSource::Fallback => "fallback",
        };
        *s.by_source.entry(src.into()).or_default() += 1;
        *s.policy_versions
            .entry(r.transition.policy_version)
            .or_default() += 1;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        println!("{} records in {} segments", s.records, s.segments);
        println!("by source: {:?}", s.by_source);
        println!("by policy version: {:?}", s.policy_versions);
        for d in &s.damaged {
            println!(
                "damaged: segment {} offset {} length {}: {} ({})",
                d.segment,
                d.offset,
                d.length,
                d.kind.as_deref().unwrap_or(""),
                d.path.display()
            );
        }
        for q in &s.quarantined {
            println!(
                "quarantined: segment {} offset {} length {} in {}",
                q.segment,
                q.offset,
                q.length,
                q.path.display()
            );
        }
    }
    Ok(())
}

fn collect(args: CollectArgs) -> Result<()> {
    let mut cfg = LogConfig::new(&args.log_dir);
    cfg.sync = SyncPolicy::EveryRecords(NonZeroU32::new(64).expect("non-zero"));
    let (mut log, _) = LogWriter::open(cfg)?;
    let input: Box<dyn std::io::Read> = if args.from == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&args.from)
                .with_context(|| format!("opening {}", args.from.display()))?,
        )
    };
    let report = collect::collect_frames(std::io::BufReader::new(input), &mut log)?;
    log.close()?;
    println!(
        "{} frames appended, {} refused{}; {} bytes read",
        report.appended,
        report.refused,
        if report.incomplete_tail_bytes > 0 {
            ", input ended inside a frame"
        } else {
            ""
        },
        report.bytes
    );
    for r in &report.refusals {
        println!("refused: {r}");
    }
    Ok(())
}

/// Parses `exact` or `sampled:M`.
fn parse_expectation(s: &str) -> Result<greenwave_finetune::Expectation> {
    use greenwave_finetune::Expectation;
    match s.split_once(':') {
        None if s == "exact" => Ok(Expectation::Exact),
        Some(("sampled", m)) => {
            let m: usize = m
                .parse()
                .with_context(|| format!("--expectation {s}: M is not a number"))?;
            if m == 0 {
                bail!("--expectation {s}: M must be at least 1");
            }
            Ok(Expectation::Sampled(m))
        }
        _ => bail!("--expectation {s}: expected `exact` or `sampled:M`"),
    }
}

fn finetune_config(args: &FinetuneArgs) -> Result<greenwave_finetune::FinetuneConfig> {
    let mut cfg = greenwave_finetune::FinetuneConfig {
        seed: args.seed,
        flip_reward_sign: args.diagnostic_flip_reward_sign,
        ..Default::default()
    };
    let u = &mut cfg.update;
    u.expectation = parse_expectation(&args.expectation)?;
    if let greenwave_finetune::Expectation::Sampled(m) = u.expectation {
        u.resample = m;
    }
    macro_rules! set {
        ($field:expr, $arg:expr) => {
            if let Some(v) = $arg {
                $field = v;
            }
        };
    }
    set!(u.epochs, args.epochs);
    set!(u.learning_rate, args.lr);
    set!(u.clip_eps, args.clip);
    set!(u.max_kl, args.max_kl);
    set!(u.q_epochs, args.q_epochs);
    set!(cfg.discount.half_life_s, args.discount_half_life_s);
    set!(cfg.gate.max_kl, args.gate_max_kl);
    set!(cfg.gate.level, args.gate_level);
    set!(cfg.gate.min_covered, args.gate_min_covered);
    set!(cfg.max_attempts, args.max_attempts);
    set!(cfg.holdout_fraction, args.holdout_fraction);
    set!(cfg.min_records, args.min_records);
    cfg.validate()?;
    Ok(cfg)
}

#[derive(Serialize)]
struct FinetuneCliReport<'a> {
    /// Whether the candidate is now current.
    switched: bool,
    dry_run: bool,
    /// The version now current.
    current_version: u32,
    /// The candidate's directory, when switched in.
    bundle: Option<String>,
    #[serde(flatten)]
    report: &'a greenwave_finetune::FinetuneReport,
}

fn finetune(args: FinetuneArgs, quiet: bool) -> Result<Exit> {
    use greenwave_finetune::{self as ft, store::HistoryEntry, PolicyStore};
    let cfg = finetune_config(&args)?;
    let key = bundle::load_signing_key(&args.key)?;
    let mut keys = trusted_keys(&args.trust)?;
    // The controller trusts its own key for its own updates.
    keys.push(key.verifying_key());
    let store = PolicyStore::open(&args.store)
        .with_context(|| format!("opening the policy store {}", args.store.display()))?;
    let current = match (store.current()?, &args.bundle) {
        (None, None) => bail!(ft::StoreError::Empty(args.store.clone())),
        (None, Some(b)) => {
            let s = store
                .adopt(b, &keys)
                .context("adopting the flashed bundle")?;
            eprintln!("adopted {} as version {}", b.display(), s.version);
            s.dir
        }
        (Some(cur), Some(b)) => {
            let sig = |d: &Path| std::fs::read(d.join(bundle::SIGNATURE_FILE)).ok();
            if sig(&cur) != sig(b) {
                bail!(
                    "the store already runs {} and --bundle {} is a different bundle: omit --bundle (the store's current version is fine-tuned)",
                    cur.display(),
                    b.display()
                );
            }
            cur
        }
        (Some(cur), None) => cur,
    };
    let running = bundle::verify(&current, &keys)
        .with_context(|| format!("verifying the running bundle {}", current.display()))?;
    if let Some(name) = &args.scenario {
        let scenario =
            greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
        let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
        for (i, s) in SimField::new(env).signal_specs().iter().enumerate() {
            running
                .check_signal(&s.plan, s.layout)
                .with_context(|| format!("signal {i} ({}) of {name}", s.id))?;
        }
    }
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("finetune: {line}");
        }
    };
    let outcome =
        ft::finetune(&running.model, &args.log_dir, &cfg, &mut progress).context("fine-tuning")?;
    let report = &outcome.report;
    let parent_version = outcome.parent.policy_version;
    let mut switched = None;
    if report.gate.accepted && !args.dry_run {
        let version = store.next_version(parent_version)?;
        let command = format!(
            "greenwave-controller finetune --log-dir {} --seed {}",
            args.log_dir.display(),
            args.seed
        );
        let manifest = ft::candidate_manifest(&outcome.parent, version, report, &cfg, &command);
        let s = store
            .install(
                &outcome.weights,
                &manifest,
                &key,
                &keys,
                &report.gate.reason,
            )
            .context("writing and switching to the fine-tuned version")?;
        switched = Some(s);
    } else if !report.gate.accepted {
        store.record(&HistoryEntry {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            event: "finetune-rejected".into(),
            from_version: Some(parent_version),
            to_version: Some(parent_version),
            detail: report.gate.reason.clone(),
        })?;
    }
    let out = FinetuneCliReport {
        switched: switched.is_some(),
        dry_run: args.dry_run,
        current_version: switched.as_ref().map_or(parent_version, |s| s.version),
        bundle: switched.as_ref().map(|s| s.dir.display().to_string()),
        report,
    };
    let json = serde_json::to_string_pretty(&out)?;
    if let Some(path) = &args.report {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    } else {
        let u = &report.update;
        let g = &report.gate;
        println!(
            "log: {} records used ({} decision states) of {} read, {} segment problem(s) skipped",
            report.log.records_used,
            report.log.decision_states,
            report.log.records_read,
            report.log.issues.len()
        );
        for i in &report.log.issues {
            println!("  skipped: {i}");
        }
        println!(
            "update: critic loss {:.4}; {} policy epoch(s){}, KL {:.4}, objective {:+.5}{}",
            u.critic_loss,
            u.policy.epochs,
            if u.policy.stopped_by_kl {
                " (stopped by the KL limit)"
            } else {
                ""
            },
            u.policy.kl,
            u.policy.objective,
            if u.flipped_reward_sign {
                " [DIAGNOSTIC: reward sign flipped]"
            } else {
                ""
            }
        );
        println!(
            "gate: held back {} records ({} decision states); {}",
            g.held_back_records, g.held_back_decision_states, g.reason
        );
        match (&switched, args.dry_run, g.accepted) {
            (Some(s), _, _) => println!(
                "switched: v{} -> v{} ({}), previous kept for rollback",
                parent_version,
                s.version,
                s.dir.display()
            ),
            (None, true, true) => println!("dry run: would switch in a new version"),
            _ => println!("kept v{parent_version}"),
        }
        println!(
            "{:.1} s, peak RSS {} KiB",
            report.wall_s,
            report.peak_rss_kib.map_or("?".into(), |k| k.to_string())
        );
    }
    Ok(if report.gate.accepted {
        Exit::Ok
    } else {
        Exit::Rejected
    })
}

fn rollback(args: RollbackArgs) -> Result<Exit> {
    let keys = trusted_keys(&args.trust)?;
    let store = greenwave_finetune::PolicyStore::open(&args.store)
        .with_context(|| format!("opening the policy store {}", args.store.display()))?;
    let s = store.rollback(&keys, &args.reason)?;
    println!(
        "rolled back: v{} -> v{} ({})",
        s.from.map_or("?".into(), |v| v.to_string()),
        s.version,
        s.dir.display()
    );
    Ok(Exit::Ok)
}
