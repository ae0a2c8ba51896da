//! `greenwave-controller run`: the controller on a field (a replay of recorded detector
//! readings, or with feature `sim` the embedded simulator or SUMO), with the signed policy,
//! the fallback, the supervisor and the transition log.
//!
//! A cabinet takes its signals (plans, layouts, fallback timing) from a site configuration
//! (`--site`, written by `greenwave site`); the simulators are fields for tests and demos,
//! and a build without feature `sim` has none.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{value_parser, Args};
use greenwave_core::Millis;
use greenwave_runtime::bundle::{self, key_hex, VerifiedBundle};
use greenwave_runtime::bundle_set::check_runs_on;
#[cfg(feature = "sim")]
use greenwave_runtime::controller::SimField;
use greenwave_runtime::controller::{
    Controller, ControllerConfig, ControllerError, ControllerStats, Fallback, FallbackKind, Field,
    NullSink, Policy, ReplayRecorder, ReplaySource, SignalSpec, Split,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer, MAX_EPSILON};
use greenwave_runtime::log::{LogConfig, LogWriter, SyncPolicy};
use greenwave_runtime::site::{ClockTime, SiteConfig};
#[cfg(feature = "sim")]
use greenwave_sim::EpisodeMetrics;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::follow::{load_first, FollowArgs, StoreFollower, StoreReport};
use crate::keys::trusted_keys;
use crate::stop::StopSignals;

mod per_signal;

/// `--timing`, `--program` and per-value overrides of the SUMO signals' timing (the same
/// options as `greenwave sim --backend sumo`).
#[cfg(feature = "sumo")]
#[derive(Args)]
struct SumoTiming {
    /// Timing file (TOML: decision_interval_s, [defaults], [signals."ID"]).
    #[arg(long, requires = "sumo_field")]
    timing: Option<PathBuf>,
    /// Program id to run on lights that have it.
    #[arg(long, requires = "sumo_field")]
    program: Option<String>,
    /// Yellow of every signal (s, 3-6).
    #[arg(long, requires = "sumo_field")]
    yellow: Option<f64>,
    /// All-red of every signal (s, 0-6).
    #[arg(long, requires = "sumo_field")]
    all_red: Option<f64>,
    /// Min green of every signal (s).
    #[arg(long, requires = "sumo_field")]
    min_green: Option<f64>,
    /// Max green of every signal (s).
    #[arg(long, requires = "sumo_field")]
    max_green: Option<f64>,
    /// Per-pair intergreens from each light's own program (`off` unless given, or the
    /// timing file's `program_intergreens`): as `greenwave --program-intergreens`.
    #[arg(long, requires = "sumo_field", value_parser = ["on", "off"])]
    program_intergreens: Option<String>,
    /// Seconds between decisions (default: the timing file's, else the bundle's).
    #[arg(long, requires = "sumo_field")]
    decision_interval: Option<f64>,
    /// Pedestrian zones in the observation (`on` unless given): `off` for a bundle whose
    /// policy was trained before them, as `greenwave --pedestrian-zones`.
    #[arg(long, requires = "sumo_field", value_parser = ["on", "off"])]
    pedestrian_zones: Option<String>,
}

#[cfg(feature = "sumo")]
impl SumoTiming {
    fn apply(&self, cfg: &mut greenwave_sim::sumo::SumoConfig) -> Result<()> {
        let flags = greenwave_sim::sumo::TimingOverrides {
            yellow_s: self.yellow,
            all_red_s: self.all_red,
            min_green_s: self.min_green,
            max_green_s: self.max_green,
            program_intergreens: self.program_intergreens.as_deref().map(|v| v == "on"),
        };
        if let Some(zones) = &self.pedestrian_zones {
            cfg.pedestrian_zones = zones == "on";
        }
        cfg.set_timing(
            self.timing.as_deref(),
            flags,
            self.decision_interval,
            self.program.clone(),
        )
        .context("SUMO timing options")
    }
}

/// Arguments of `greenwave-controller run`.
#[derive(Args)]
#[cfg_attr(
    feature = "sumo",
    command(group(clap::ArgGroup::new("sumo_field").args(["sumo_net", "sumocfg"]).multiple(true)))
)]
pub struct RunArgs {
    /// The signed policy bundle (directory); or --store. Repeat it for a field whose
    /// signals have different plans or layouts: each signal runs the bundle exported for
    /// it (its manifest's signal id), else the first that names no signal and fits it.
    #[arg(long, required_unless_present = "store")]
    bundle: Vec<PathBuf>,
    /// Whether the simulated SUMO field observes with a program clock (set when it is
    /// built, from the bundle it is built for; not a flag): every version loaded, at the
    /// start or followed in the store, must read the clock exactly where the field has it.
    #[arg(skip)]
    sumo_field_clock: Option<bool>,
    #[command(flatten)]
    follow: FollowArgs,
    /// A trusted public key file (repeat for several).
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Site configuration (TOML, written by `greenwave site`): the signals' phase plans,
    /// observation layouts and fallback timing. With --replay the controller needs no
    /// simulator; with --scenario the simulator is the field and must have the same plans.
    #[arg(long)]
    site: Option<PathBuf>,
    /// Scenario name or TOML file (feature `sim`): the signals' phase plans (unless --site),
    /// and the embedded simulator as the field unless --replay is given.
    #[cfg(feature = "sim")]
    #[arg(long)]
    scenario: Option<String>,
    /// SUMO network (.net.xml) to run against instead of the embedded simulator.
    #[cfg(feature = "sumo")]
    #[arg(long, conflicts_with_all = ["scenario", "replay", "site"])]
    sumo_net: Option<PathBuf>,
    /// A SUMO configuration (.sumocfg) to run against, as `greenwave --sumocfg`: its net,
    /// routes, additional files and begin where --sumo-net, --sumo-routes,
    /// --sumo-additional and --sumo-begin do not give them, and the options that shape its
    /// traffic (end, step length, seeds, outputs, TraCI port, logging, GUI settings and
    /// tls.all-off are not used).
    #[cfg(feature = "sumo")]
    #[arg(long, conflicts_with_all = ["scenario", "replay", "site"])]
    sumocfg: Option<PathBuf>,
    /// SUMO time the run starts at (s), with --sumo-net or --sumocfg (default the
    /// configuration's, else 0).
    #[cfg(feature = "sumo")]
    #[arg(long, requires = "sumo_field")]
    sumo_begin: Option<f64>,
    /// SUMO route files (with --sumo-net; repeated or comma-separated).
    #[cfg(feature = "sumo")]
    #[arg(long, value_delimiter = ',', requires = "sumo_field")]
    sumo_routes: Vec<PathBuf>,
    /// SUMO additional files (with --sumo-net; repeated or comma-separated): vehicle types,
    /// signal programs (a `<tlLogic>` in one becomes that light's program), ...
    #[cfg(feature = "sumo")]
    #[arg(long, value_delimiter = ',', requires = "sumo_field")]
    sumo_additional: Vec<PathBuf>,
    /// SUMO signal timing (with --sumo-net): as `greenwave sim --backend sumo`, each light's
    /// own program unless overridden; the bundle's plan hash must match the result.
    #[cfg(feature = "sumo")]
    #[command(flatten)]
    sumo_timing: SumoTiming,
    /// Replay recorded detector readings instead of simulating (plans from --site or
    /// --scenario).
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
    /// Seconds to run, at least 1 (default: the scenario's episode length, also with a
    /// replay on a scenario; 3600 for SUMO; a site's replay to its last line), rounded up
    /// to whole decision intervals. SIGINT or SIGTERM stops the run sooner, cleanly (see
    /// the README).
    #[arg(long, value_parser = parse_run_seconds)]
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
    /// Exploration for data collection: with this probability a uniformly random allowed
    /// phase instead of the policy's rule (0 = none; at most 0.2).
    #[arg(long, default_value_t = 0.0, value_parser = parse_epsilon)]
    epsilon: f32,
    /// Inference budget (ms, above 0, at most 60,000): slower inferences are faults.
    #[arg(long, default_value_t = 20.0, value_parser = parse_budget_ms)]
    inference_budget_ms: f64,
    /// Fault-free seconds before a signal returns from its fallback to the policy.
    #[arg(long, default_value_t = 60, value_parser = value_parser!(u32).range(..=MAX_SECONDS))]
    healthy_s: u32,
    /// Longest (s) a phase whose detectors call is kept from green while the policy acts;
    /// then it is served next (the max-red rule, as in training and `greenwave eval`).
    /// Default: each signal's max-out cycle (every phase at max green, plus clearances).
    #[arg(long, value_parser = value_parser!(u32).range(1..=MAX_SECONDS))]
    max_red_s: Option<u32>,
    /// Log fsync policy: record, records:N or ms:T.
    #[arg(long, default_value = "ms:1000")]
    fsync: SyncPolicy,
    /// Log segment size (MiB) before rotation (1 to 256: recovery reads a whole segment
    /// into memory).
    #[arg(long, default_value_t = 16, value_parser = value_parser!(u64).range(1..=MAX_SEGMENT_MIB))]
    segment_mib: u64,
    /// Disk cap of the log (MiB, 1 to 2^20); oldest segments are dropped beyond it.
    #[arg(long, default_value_t = 1024, value_parser = value_parser!(u64).range(1..=MAX_MIB))]
    log_cap_mib: u64,
    /// Exit with an error instead of running the fallback when the bundle is refused.
    #[arg(long)]
    require_policy: bool,
}

/// Largest whole seconds a [`Millis`] holds.
pub(crate) const MAX_SECONDS: i64 = Millis::MAX_SECS as i64;
/// Largest log size flag (1 TiB): MiB shifted to bytes stays far inside a `u64`, so a
/// huge cap cannot wrap to a small one that deletes committed segments.
const MAX_MIB: u64 = 1 << 20;
/// The largest `--segment-mib`: the log's own limit.
const MAX_SEGMENT_MIB: u64 = greenwave_runtime::log::MAX_SEGMENT_BYTES >> 20;

/// `--inference-budget-ms`: a finite number of ms above 0, at most a minute.
fn parse_budget_ms(s: &str) -> Result<f64, String> {
    let ms: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(ms.is_finite() && ms > 0.0 && ms <= 60_000.0) {
        return Err(format!(
            "{s} is not a number of ms above 0 and at most 60000"
        ));
    }
    Ok(ms)
}

/// `--seconds`: at least 1 (a run of no decision — 0 s, or under a millisecond — did
/// nothing and said it succeeded) and at most [`MAX_SECONDS`], the longest controller time
/// a [`Millis`] holds.
fn parse_run_seconds(s: &str) -> Result<f64, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(secs.is_finite() && (1.0..=MAX_SECONDS as f64).contains(&secs)) {
        return Err(format!(
            "{s} is not a number of seconds from 1 to {MAX_SECONDS}"
        ));
    }
    Ok(secs)
}

/// `--epsilon`: a number from 0 to [`MAX_EPSILON`] (not NaN), refused as the flags are
/// parsed rather than when the bundle loads, where it read as a refused bundle.
fn parse_epsilon(s: &str) -> Result<f32, String> {
    let e: f32 = s.parse().map_err(|e| format!("{e}"))?;
    if !(0.0..=MAX_EPSILON).contains(&e) {
        return Err(format!(
            "{s} is not an exploration rate from 0 to {MAX_EPSILON}"
        ));
    }
    Ok(e)
}

/// The bundle a simulated field takes its decision interval and program clock from: the
/// one given, or the store's current version.
#[cfg(feature = "sumo")]
fn any_bundle(args: &RunArgs) -> Option<PathBuf> {
    match (args.bundle.first(), &args.follow.store) {
        (Some(b), _) => Some(b.clone()),
        (None, Some(store)) => Some(store.join("current")),
        (None, None) => None,
    }
}

/// A loaded policy: from one bundle for every signal, or from one bundle per signal.
struct LoadedPolicy {
    policy: Policy,
    /// Who signed the (first) bundle.
    signer: bundle::VerifyingKey,
    /// With one bundle per signal: which signal runs which.
    signals: Vec<SignalBundle>,
}

/// The bundle a signal runs, in the report.
#[derive(Serialize)]
struct SignalBundle {
    signal: String,
    bundle: String,
    signer: String,
}

/// Verifies the bundle in `dir` for every signal and loads its model.
fn load_policy(
    args: &RunArgs,
    dir: &Path,
    signals: &[SignalSpec],
    interval: Millis,
) -> Result<LoadedPolicy> {
    let keys = trusted_keys(&args.trust)?;
    let Some(first) = signals.first() else {
        bail!(
            "the field has no signals to control (a net whose lights all stay on their programs?)"
        );
    };
    let b = bundle::verify_and_load(dir, &keys, &first.plan, first.layout)
        .with_context(|| format!("signal 0 ({})", first.id))?;
    for (i, s) in signals.iter().enumerate() {
        b.check_signal(&s.plan, s.layout)
            .with_context(|| format!("signal {i} ({})", s.id))?;
        check_runs_on(&b, i, s)?;
    }
    check_run_timing(args, &b, signals, interval)?;
    let backend = load_backend(
        args.backend,
        &b.model,
        first.layout,
        args.ort_lib.as_deref(),
    )?;
    let policy = Policy {
        backend,
        version: b.manifest.policy_version,
        explorer: explorer(args, b.manifest.decision_temperature)?,
    };
    Ok(LoadedPolicy {
        policy,
        signer: b.signer,
        signals: vec![],
    })
}

/// Checks `b`, run on `signals`, reads the program clock exactly where this run supplies
/// one, and decides at `interval`, as the controller will.
fn check_run_timing(
    args: &RunArgs,
    b: &VerifiedBundle,
    signals: &[SignalSpec],
    interval: Millis,
) -> Result<()> {
    // A simulated SUMO field observes with the program clock of the bundle it was built
    // for (`run_simulated`; a light whose program has nothing to follow keeps zeros in
    // those lanes); a site configuration supplies one where it gives every signal its
    // program; embedded scenarios have none.
    if let Some(clock) = args.sumo_field_clock {
        b.check_program_clock(clock)?;
    } else {
        // Signal by signal: the controller writes a clock into the lanes of each signal
        // that has one, and only those.
        for (i, s) in signals.iter().enumerate() {
            b.check_program_clock(s.program_clock.is_some())
                .with_context(|| format!("signal {i} ({})", s.id))?;
        }
    }
    b.check_decision_interval(interval)?;
    Ok(())
}

/// The policy's decision rule (greedy, or drawing at its manifest's `temperature`), with
/// `--epsilon` of exploration on top; both draw from a stream seeded by `--seed`.
fn explorer(args: &RunArgs, temperature: Option<f32>) -> Result<Explorer> {
    let e = Explorer::epsilon_greedy(args.epsilon, args.seed ^ 0x5eed)?;
    Ok(e.acting_at(temperature)?)
}

#[derive(Serialize)]
struct PolicyReport {
    loaded: bool,
    backend: String,
    policy_version: Option<u32>,
    signer: Option<String>,
    error: Option<String>,
    /// With `--bundle` repeated: the bundle each signal runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bundles: Vec<SignalBundle>,
}

/// Traffic metrics, where the field measures them (simulators; feature `sim`).
#[cfg(feature = "sim")]
type Metrics = EpisodeMetrics;
/// Without simulators no field measures traffic.
#[cfg(not(feature = "sim"))]
#[derive(Serialize)]
struct Metrics {}

#[derive(Serialize)]
struct RunReport {
    #[serde(flatten)]
    metrics: Option<Metrics>,
    decisions: u64,
    fallback_switches: u64,
    policy_returns: u64,
    supervisor_overrides: u64,
    fallback_decisions: u64,
    transitions_logged: u64,
    transitions_committed: u64,
    peak_rss_kib: Option<u64>,
    /// For a site on Unix time (`program_clock_time = "unix"`): the Unix time (ms) the
    /// program clocks put at the controller's time 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    program_clock_unix_origin_ms: Option<u64>,
    /// The signal (SIGINT or SIGTERM) that ended the run before its time, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_by: Option<&'static str>,
    policy: PolicyReport,
    /// With `--store`: the switches made while running, the live watch's verdicts recorded
    /// in the store, and versions refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    store: Option<StoreReport>,
    controller: ControllerStats,
}

/// `greenwave-controller run`: builds the field (SUMO, replay or embedded simulator) and
/// the fallback, and drives the controller on it.
pub fn run(mut args: RunArgs, quiet: bool) -> Result<()> {
    StopSignals::install()?;
    // Refused before anything starts (checked again where the controller is configured).
    args.follow.rollback_config()?;
    if let Some(path) = &args.site {
        return run_site(&args, path, quiet);
    }
    run_simulated(&mut args, quiet)
}

/// The signals of a site configuration, on a replay (or with feature `sim` a simulator).
fn run_site(args: &RunArgs, path: &std::path::Path, quiet: bool) -> Result<()> {
    let site = SiteConfig::load(path)?;
    let setup = Setup {
        specs: site.signal_specs(),
        interval: site.decision_interval(),
        fallback: site.fallback(args.fallback),
        seconds: args.seconds.unwrap_or(f64::INFINITY),
        clock_time: site.program_clock_time,
    };
    if let Some(replay) = &args.replay {
        let detectors = ReplaySource::open(replay, &setup.specs)?;
        let field = Split {
            detectors,
            sink: NullSink,
        };
        return drive(args, field, setup, quiet);
    }
    #[cfg(feature = "sim")]
    if let Some(name) = &args.scenario {
        let scenario =
            greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
        let field = SimField::new(greenwave_sim::EmbeddedEnv::from_scenario(
            &scenario, args.seed,
        ));
        check_site_matches(&setup.specs, &field.signal_specs(), name)?;
        let seconds = args
            .seconds
            .unwrap_or(f64::from(scenario.episode().0) / 1000.0);
        return drive(args, field, Setup { seconds, ..setup }, quiet);
    }
    bail!(
        "--site {} needs a field: --replay FILE (recorded detector readings){}",
        path.display(),
        if cfg!(feature = "sim") {
            ", or --scenario NAME for a simulated one"
        } else {
            ""
        }
    )
}

/// The simulator's signals must be the site's (same ids, plans and detector lanes, in
/// order; a site's program-clock lanes come from the controller, not the simulator): a
/// per-signal bundle is assigned by the site's id, and must read that junction's lanes.
#[cfg(feature = "sim")]
fn check_site_matches(site: &[SignalSpec], sim: &[SignalSpec], name: &str) -> Result<()> {
    if site.len() != sim.len() {
        bail!(
            "the site has {} signals, scenario {name} {}",
            site.len(),
            sim.len()
        );
    }
    for (i, (a, b)) in site.iter().zip(sim).enumerate() {
        if a.id != b.id || a.plan.hash() != b.plan.hash() || a.field_lanes() != b.field_lanes() {
            bail!(
                "signal {i}: the site's `{}` ({} lanes, plan {:016x}) is not scenario {name}'s `{}` ({} lanes, plan {:016x})",
                a.id,
                a.field_lanes(),
                a.plan.hash(),
                b.id,
                b.layout.n_lanes,
                b.plan.hash()
            );
        }
    }
    Ok(())
}

/// The SUMO field's files, begin and options: the flags', else `--sumocfg`'s.
#[cfg(feature = "sumo")]
fn sumo_config(args: &RunArgs, quiet: bool) -> Result<greenwave_sim::sumo::SumoConfig> {
    use greenwave_sim::sumo::{SumoCfgFile, SumoFiles};
    let file = match &args.sumocfg {
        Some(path) => SumoCfgFile::read(path)?,
        None => SumoCfgFile::default(),
    };
    if !quiet && !file.left_out.is_empty() {
        eprintln!(
            "note: --sumocfg: not used (set by the controller, or not for a field): {}",
            file.left_out.join(", ")
        );
    }
    let files = file.under(SumoFiles {
        net: args.sumo_net.clone(),
        routes: args.sumo_routes.clone(),
        additional: args.sumo_additional.clone(),
        begin_s: args.sumo_begin,
    });
    let net = files
        .net
        .context("no SUMO network: give --sumo-net, or a --sumocfg that names a net-file")?;
    if files.routes.is_empty() && args.sumocfg.is_none() {
        bail!("no SUMO routes: give --sumo-routes, or a --sumocfg");
    }
    let mut cfg = greenwave_sim::sumo::SumoConfig::with_routes(net, files.routes);
    cfg.additional = files.additional;
    cfg.begin_s = files.begin_s.unwrap_or(0.0);
    cfg.extra_args = file.passed;
    // A Ctrl-C stops the run cleanly (`stop`), closing SUMO after the last interval: it
    // must not reach SUMO first.
    cfg.own_process_group = true;
    Ok(cfg)
}

/// `--scenario` (with `--replay`) or `--sumo-net` (feature `sim`).
#[cfg(feature = "sim")]
fn run_simulated(args: &mut RunArgs, quiet: bool) -> Result<()> {
    #[cfg(feature = "sumo")]
    if args.sumo_net.is_some() || args.sumocfg.is_some() {
        let mut cfg = sumo_config(args, quiet)?;
        // The simulated field decides at the bundle's interval unless the timing file or
        // flag names one. A bundle that does not verify is reported by `load_policy`.
        // So do its program-clock lanes.
        let keys = trusted_keys(&args.trust)?;
        if let Some(Ok(b)) = any_bundle(args).map(|dir| bundle::verify(&dir, &keys)) {
            cfg.decision_interval_s = f64::from(b.manifest.decision_interval.0) / 1000.0;
            cfg.program_clock = b.manifest.program_clock;
        }
        args.sumo_timing.apply(&mut cfg)?;
        cfg.seconds = args.seconds.unwrap_or(3600.0);
        cfg.seed = args.seed;
        args.sumo_field_clock = Some(cfg.program_clock);
        let env = greenwave_sim::sumo::SumoEnv::new(cfg).context("starting SUMO")?;
        let field = SimField::new(env);
        let specs = field.signal_specs();
        let interval = field.decision_interval();
        let plans: Vec<_> = specs.iter().map(|s| &s.plan).collect();
        // Each light's own program, as a cabinet's site configuration from `greenwave
        // site` has it (fixed time), or actuated control with max greens from it.
        let mut fallback = Fallback::from_programs(field.env(), &plans);
        if args.fallback == FallbackKind::FixedTime {
            fallback = Fallback::fixed_time(fallback.cycles().to_vec());
        }
        let seconds = args.seconds.unwrap_or(3600.0);
        let setup = Setup {
            specs,
            fallback,
            interval,
            seconds,
            clock_time: ClockTime::Controller,
        };
        return drive(args, field, setup, quiet);
    }
    let name = args
        .scenario
        .as_deref()
        .context("--site (a site configuration) or --scenario is required")?;
    let scenario = greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
    let field = SimField::new(greenwave_sim::EmbeddedEnv::from_scenario(
        &scenario, args.seed,
    ));
    let setup = Setup {
        specs: field.signal_specs(),
        interval: field.decision_interval(),
        fallback: Fallback::for_scenario(&scenario, args.fallback),
        seconds: args
            .seconds
            .unwrap_or(f64::from(scenario.episode().0) / 1000.0),
        clock_time: ClockTime::Controller,
    };
    match &args.replay {
        Some(path) => {
            let detectors = ReplaySource::open(path, &setup.specs)?;
            let field = Split {
                detectors,
                sink: NullSink,
            };
            drive(args, field, setup, quiet)
        }
        None => drive(args, field, setup, quiet),
    }
}

/// Without feature `sim` a controller runs only from a site configuration.
#[cfg(not(feature = "sim"))]
fn run_simulated(_args: &mut RunArgs, _quiet: bool) -> Result<()> {
    bail!("--site is required (this greenwave-controller is built without simulators)")
}

/// What the controller runs on a field: its signals, their fallback, the decision interval
/// and how long to run.
struct Setup {
    specs: Vec<SignalSpec>,
    fallback: Fallback,
    interval: Millis,
    seconds: f64,
    /// The time the specs' program clocks count on (a site's `program_clock_time`).
    clock_time: ClockTime,
}

fn drive<F: Field>(args: &RunArgs, field: F, setup: Setup, quiet: bool) -> Result<()> {
    match &args.record {
        Some(path) => {
            let mut field = ReplayRecorder::create(field, path, &setup.specs, setup.interval)?;
            drive_field(args, &mut field, setup, quiet)
        }
        None => {
            let mut field = field;
            drive_field(args, &mut field, setup, quiet)
        }
    }
}

fn drive_field<F: Field>(args: &RunArgs, field: &mut F, setup: Setup, quiet: bool) -> Result<()> {
    let Setup {
        mut specs,
        fallback,
        interval,
        seconds,
        clock_time,
    } = setup;
    let Start {
        policy,
        report: policy_report,
        mut follower,
        detached,
    } = start_policy(args, &specs, interval)?;
    let log = open_log(args)?;
    let mut cfg = controller_config(args, interval)?;
    // Last before the controller starts, so that its time 0 is this Unix time.
    let unix_origin_ms = anchor_program_clocks(args, clock_time, &mut specs)?;
    cfg.program_clock_unix_origin_ms = unix_origin_ms;
    let loader_specs = specs.clone();
    let mut controller = Controller::new(specs, policy, fallback, cfg, Some(log))?;

    // Until the field ends (a replay's last line) when no length is given: no total.
    let total = if seconds.is_finite() {
        (seconds * 1000.0 / interval.0.max(1) as f64).ceil() as u64
    } else {
        0
    };
    let bar = progress_bar(quiet, total);
    let started = Instant::now();
    let mut load = |dir: &Path| load_policy(args, dir, &loader_specs, interval).map(|l| l.policy);
    // Installed by `run` before anything started; a signal since then stops the run
    // before its first decision.
    let stop = StopSignals::install()?;
    let stop_if_asked = |c: &mut Controller| {
        if stop.received().is_some() {
            c.request_stop();
        }
    };
    stop_if_asked(&mut controller);
    stop.arm_on_signal()?;
    let run = controller.run_with(field, seconds, |c| {
        if let Some(f) = &mut follower {
            f.between(c, &mut load);
        }
        stop_if_asked(c);
        show_progress(&bar, c);
    });
    bar.finish_and_clear();
    let stats = match run {
        Ok(stats) => stats,
        Err(e) => return Err(stopped_by_error(&mut controller, e)),
    };
    let commit = controller
        .close_log()
        .context("closing the transition log")?;
    let stopped_by = stop.received().filter(|_| controller.stop_requested());
    if let Some(signal) = stopped_by {
        eprintln!(
            "stopped by {signal} after {} decision{} ({:.0} s of controller time), at the \
             end of the interval under way; its transitions are committed",
            stats.decisions,
            if stats.decisions == 1 { "" } else { "s" },
            controller.now_ms() as f64 / 1000.0
        );
    }
    let metrics = field_metrics(field, started);
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
        program_clock_unix_origin_ms: unix_origin_ms,
        stopped_by,
        policy: policy_report,
        store: follower.map(|f| f.report).or(detached),
        controller: stats,
    };
    finish(args, &report)
}

/// The error a run stopped on, with what it had done by then: the log is closed (its
/// records synced) and the decisions and committed transitions are named, so the operator
/// knows what the log holds without the report the run could not finish.
fn stopped_by_error(controller: &mut Controller, e: ControllerError) -> anyhow::Error {
    let stats = controller.stats();
    let committed = match controller.close_log() {
        Ok(c) => c.map_or(stats.transitions_committed, |c| c.committed),
        Err(close) => {
            eprintln!("closing the transition log after the error: {close}");
            stats.transitions_committed
        }
    };
    anyhow::Error::new(e).context(format!(
        "the controller stopped at {:.0} s of controller time, after {} decision{}; {} \
         transition{} committed to the log",
        controller.now_ms() as f64 / 1000.0,
        stats.decisions,
        if stats.decisions == 1 { "" } else { "s" },
        committed,
        if committed == 1 { " is" } else { "s are" },
    ))
}

/// What a run starts on: the policy (or why the fallback runs) and its report, and with
/// `--store` the follower, or the report of a store that could not be attached.
struct Start {
    policy: Result<Policy, String>,
    report: PolicyReport,
    follower: Option<StoreFollower>,
    detached: Option<StoreReport>,
}

fn start_policy(args: &RunArgs, specs: &[SignalSpec], interval: Millis) -> Result<Start> {
    let (follower, detached) = attach_store(args)?;
    let start: Vec<PathBuf> = match &follower {
        Some((_, dirs)) => dirs.clone(),
        // Without a store, the bundles given; a store that could not be attached gives
        // none: nothing to load, the fallback runs.
        None => args.bundle.clone(),
    };
    let (policy, policy_report, loaded, failed) =
        policy_or_fallback(args, &start, specs, interval)?;
    let follower = follower.map(|(mut f, _)| {
        f.started(loaded.as_deref(), &failed);
        f
    });
    Ok(Start {
        policy,
        report: policy_report,
        follower,
        detached,
    })
}

/// With program clocks on Unix time, puts them on the controller's time from now (the
/// origin returned); on the controller's own time, leaves them.
fn anchor_program_clocks(
    args: &RunArgs,
    clock_time: ClockTime,
    specs: &mut [SignalSpec],
) -> Result<Option<u64>> {
    let ClockTime::Unix = clock_time else {
        return Ok(None);
    };
    let origin = unix_now_ms()?;
    clock_time.to_controller_time(specs, origin);
    if !args.realtime {
        tracing::warn!(
            origin_unix_ms = origin,
            "program clocks on Unix time without --realtime: the controller's time runs \
             at the field's pace from this origin, not with the wall clock"
        );
    }
    Ok(Some(origin))
}

fn show_progress(bar: &ProgressBar, c: &Controller) {
    let s = c.status();
    bar.inc(1);
    bar.set_message(format!(
        "t={:.0}s fallback {}/{} switches {} logged {}",
        s.now_ms as f64 / 1000.0,
        s.on_fallback,
        s.signals,
        s.fallback_switches,
        s.transitions_logged
    ));
}

/// Prints the report, and fails the run where the store or the log failed during it.
fn finish(args: &RunArgs, report: &RunReport) -> Result<()> {
    if args.json {
        say!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print_report(report);
    }
    if let Some(store) = report.store.as_ref().filter(|s| !s.errors.is_empty()) {
        bail!(
            "the policy store failed during the run: {} (see the report)",
            store.errors.join("; ")
        );
    }
    // Control went on, but a log that failed lost what came after: not a clean run.
    if report.controller.log_errors > 0 {
        bail!(
            "the transition log failed during the run ({} error(s)); {} transitions were not \
             logged (see the report and the log above)",
            report.controller.log_errors,
            report.controller.transitions_dropped
        );
    }
    Ok(())
}

/// With `--store`: the follower and the folders to start on; or, where the store cannot
/// be attached (no such store, no current version, an unreadable link, a bad key file),
/// a report of why, the fallback running instead (unless `--require-policy`), as for a
/// refused bundle: a broken store does not darken the junction.
type Attached = (Option<(StoreFollower, Vec<PathBuf>)>, Option<StoreReport>);

fn attach_store(args: &RunArgs) -> Result<Attached> {
    let Some(dir) = &args.follow.store else {
        return Ok((None, None));
    };
    let attached =
        trusted_keys(&args.trust).and_then(|keys| StoreFollower::attach(&args.follow, dir, keys));
    match attached {
        Ok(f) => Ok((Some(f), None)),
        Err(e) if args.require_policy => Err(e.context("policy store refused (--require-policy)")),
        Err(e) => {
            let why = greenwave_runtime::error_chain(e.as_ref());
            eprintln!("policy store refused, running the fallback only: {why}");
            let report = StoreReport {
                store: dir.clone(),
                errors: vec![why],
                ..StoreReport::default()
            };
            Ok((None, Some(report)))
        }
    }
}

/// What the start loaded: the policy or why none, the report on it, the folder it came
/// from, and the folders that failed a check before it.
type Loaded = (
    Result<Policy, String>,
    PolicyReport,
    Option<PathBuf>,
    Vec<(PathBuf, String)>,
);

/// The first of `dirs` whose bundle passes every check, or (unless `--require-policy`) why
/// none did, for the controller to run the fallback only; with what the report says.
fn policy_or_fallback(
    args: &RunArgs,
    dirs: &[PathBuf],
    specs: &[SignalSpec],
    interval: Millis,
) -> Result<Loaded> {
    let (loaded, from, failed) = match (args.follow.store.is_some(), dirs) {
        (false, [bundle]) => (
            load_policy(args, bundle, specs, interval),
            Some(bundle.clone()),
            vec![],
        ),
        (false, [first, ..]) => (
            per_signal::load(args, dirs, specs, interval),
            Some(first.clone()),
            vec![],
        ),
        _ => load_first(dirs, |d| load_policy(args, d, specs, interval)),
    };
    let (policy, report) = report_policy(args, loaded)?;
    Ok((policy, report, from, failed))
}

/// The report on the loaded policy, or the fallback's reason.
fn report_policy(
    args: &RunArgs,
    loaded: Result<LoadedPolicy>,
) -> Result<(Result<Policy, String>, PolicyReport)> {
    match loaded {
        Ok(l) => {
            let p = l.policy;
            let report = PolicyReport {
                loaded: true,
                backend: p.backend.name().into(),
                policy_version: Some(p.version),
                signer: Some(key_hex(&l.signer)),
                error: None,
                bundles: l.signals,
            };
            Ok((Ok(p), report))
        }
        Err(e) if args.require_policy => Err(e.context("no policy loaded (--require-policy)")),
        Err(e) => {
            // The bundle failed a check, or the inference backend did not load (an ONNX
            // Runtime library that is not there): either way the policy may not act.
            let why = greenwave_runtime::error_chain(e.as_ref());
            eprintln!("no policy loaded, running the fallback only: {why}");
            let report = PolicyReport {
                loaded: false,
                backend: args.backend.name().into(),
                policy_version: None,
                signer: None,
                error: Some(why.clone()),
                bundles: vec![],
            };
            Ok((Err(why), report))
        }
    }
}

/// Opens the transition log with the run's options, reporting damage found (and copied
/// out) or repaired on opening.
fn open_log(args: &RunArgs) -> Result<LogWriter> {
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
    Ok(log)
}

fn controller_config(args: &RunArgs, interval: Millis) -> Result<ControllerConfig> {
    let mut cfg = ControllerConfig::new(interval);
    cfg.rollback = args.follow.rollback_config()?;
    cfg.realtime = args.realtime;
    // In range: checked as the flags were parsed.
    cfg.inference_budget = Duration::from_secs_f64(args.inference_budget_ms / 1000.0);
    cfg.healthy_period = Millis::from_secs(args.healthy_s);
    cfg.max_red = args.max_red_s.map(Millis::from_secs);
    Ok(cfg)
}

/// The system clock's time, ms since the Unix epoch.
fn unix_now_ms() -> Result<u64> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context(
            "the system clock reads before 1970: a site with program_clock_time = \"unix\" \
             needs the time of day",
        )?;
    Ok(since.as_millis() as u64)
}

/// The live status line on stderr (hidden with `--quiet`).
fn progress_bar(quiet: bool, total_decisions: u64) -> ProgressBar {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total_decisions)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} decisions {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The field's traffic metrics, with the whole controller's wall time (inference, logging),
/// not only the simulator's.
#[cfg(feature = "sim")]
fn field_metrics<F: Field>(field: &F, started: Instant) -> Option<Metrics> {
    let mut metrics = field.metrics();
    if let Some(m) = &mut metrics {
        m.wall_seconds = started.elapsed().as_secs_f64();
    }
    metrics
}

#[cfg(not(feature = "sim"))]
fn field_metrics<F: Field>(_field: &F, _started: Instant) -> Option<Metrics> {
    None
}

fn print_report(r: &RunReport) {
    #[cfg(feature = "sim")]
    if let Some(m) = &r.metrics {
        let travel = m.travel_time_s().map_or_else(
            || "none (no vehicle finished its trip)".to_string(),
            |t| format!("{t:.1} s"),
        );
        say!(
            "mean delay {:.1} s, mean wait {:.1} s, mean travel time {travel}, throughput {} veh, backlog {} veh",
            m.mean_delay_s, m.mean_wait_s, m.throughput_veh, m.backlog_veh
        );
        say!(
            "{:.0} simulated s in {:.2} wall s",
            m.sim_seconds,
            m.wall_seconds
        );
    }
    if let Some(origin) = r.program_clock_unix_origin_ms {
        say!("program clocks on Unix time, controller time 0 at {origin} ms");
    }
    match &r.policy.error {
        None => say!(
            "policy v{} on {}: {} decisions, {} by the fallback",
            r.policy.policy_version.unwrap_or(0),
            r.policy.backend,
            r.decisions,
            r.fallback_decisions
        ),
        Some(e) => say!(
            "no policy ({e}): all {} decisions by the fallback",
            r.decisions
        ),
    }
    for b in &r.policy.bundles {
        say!(
            "signal {} ran bundle {} (signed by {})",
            b.signal,
            b.bundle,
            b.signer
        );
    }
    if let Some(store) = &r.store {
        print_store(store);
    }
    say!(
        "fallback switches {}, returns to policy {}, supervisor overrides {} ({} by the max-red rule)",
        r.fallback_switches, r.policy_returns, r.supervisor_overrides, r.controller.max_red_overrides
    );
    say!(
        "transitions logged {} (committed {}, dropped {}, log errors {}), inference p50 {:.0} µs \
         p99 {:.0} µs, peak RSS {} KiB",
        r.transitions_logged,
        r.transitions_committed,
        r.controller.transitions_dropped,
        r.controller.log_errors,
        r.controller.inference_p50_us,
        r.controller.inference_p99_us,
        r.peak_rss_kib.map_or("?".into(), |k| k.to_string())
    );
}

/// The `--store` lines of the report.
fn print_store(s: &StoreReport) {
    if let (true, Some(cur)) = (s.current_unjudged_at_start, &s.current_at_start) {
        say!(
            "policy store: {} had no live-watch verdict at the start",
            cur.display()
        );
    }
    for w in &s.switches {
        let from = w
            .from_version
            .map_or("the fallback".into(), |v| format!("v{v}"));
        let how = if w.watched { " (watched)" } else { "" };
        say!(
            "at {:.0} s: {from} -> v{}{how}",
            w.at_ms as f64 / 1000.0,
            w.to_version
        );
    }
    for r in &s.recorded {
        say!("policy store: recorded {r}");
    }
    for r in &s.refused {
        say!("policy store: refused {r}");
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use super::*;
    use greenwave_core::{ClockStage, ProgramClock};

    /// On a simulated SUMO field every version loaded (at the start, or followed in the
    /// store) must read the program clock exactly where the field has it: the check is
    /// against the field, not against the bundle itself.
    #[cfg(feature = "sim")]
    #[test]
    fn a_bundle_is_held_to_the_sumo_fields_program_clock() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let site = crate::keyed::site("run-field-clock");
        let b = bundle::verify(&site.bundle, &[site.site]).unwrap();
        assert!(!b.manifest.program_clock, "the test bundle reads no clock");
        let mut args = <Cli as clap::Parser>::try_parse_from([
            "run",
            "--bundle",
            "b",
            "--trust",
            "t",
            "--scenario",
            "single-4way",
            "--log-dir",
            "l",
        ])
        .unwrap()
        .run;
        let interval = b.manifest.decision_interval;
        args.sumo_field_clock = Some(false);
        check_run_timing(&args, &b, &[], interval).unwrap();
        args.sumo_field_clock = Some(true);
        assert!(check_run_timing(&args, &b, &[], interval).is_err());
    }

    #[test]
    fn a_run_of_no_time_or_of_more_than_a_millis_holds_is_refused() {
        for bad in ["0", "0.0005", "0.5", "-5", "nan", "inf", "1e300", "4294968"] {
            let e = parse_run_seconds(bad).unwrap_err();
            assert!(e.contains("from 1 to 4294967"), "{bad}: {e}");
        }
        assert_eq!(parse_run_seconds("1.5"), Ok(1.5));
        assert_eq!(parse_run_seconds("4294967"), Ok(4_294_967.0));
    }

    /// `--sumocfg` gives the field's files, begin and traffic options; the `--sumo-*` flags
    /// replace what it names; without either, no SUMO options are accepted.
    #[cfg(feature = "sumo")]
    #[test]
    fn a_sumocfg_gives_the_sumo_field_and_the_flags_replace_what_it_names() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let dir = std::env::temp_dir().join(format!("gw-ctl-sumocfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg_path = dir.join("s.sumocfg");
        std::fs::write(
            &cfg_path,
            r#"<configuration><input><net-file value="n.net.xml"/>
            <route-files value="a.rou.xml,b.rou.xml"/></input>
            <time><begin value="1:0:0"/><step-length value="0.1"/></time>
            <processing><scale value="2"/></processing></configuration>"#,
        )
        .unwrap();
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x", "--bundle", "b", "--trust", "k", "--log-dir", "l"];
            argv.push("--sumocfg");
            argv.push(cfg_path.to_str().unwrap());
            argv.extend(extra);
            <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.run)
        };
        let cfg = sumo_config(&parse(&[]).unwrap(), true).unwrap();
        assert_eq!(cfg.net, dir.join("n.net.xml"));
        assert_eq!(cfg.routes, [dir.join("a.rou.xml"), dir.join("b.rou.xml")]);
        assert_eq!(cfg.begin_s, 3600.0);
        assert_eq!(cfg.extra_args, ["--scale=2"]);
        assert_eq!(
            cfg.step_length_s, 1.0,
            "the controller's step, not the file's"
        );
        let args = parse(&["--sumo-routes", "c.rou.xml", "--sumo-begin", "0"]).unwrap();
        let cfg = sumo_config(&args, true).unwrap();
        assert_eq!(cfg.routes, [PathBuf::from("c.rou.xml")]);
        assert_eq!(cfg.begin_s, 0.0);
        std::fs::write(&cfg_path, "<configuration/>").unwrap();
        let err = format!("{:#}", sumo_config(&parse(&[]).unwrap(), true).unwrap_err());
        assert!(err.contains("no SUMO network"), "{err}");
        let orphan = [
            "x",
            "--bundle",
            "b",
            "--trust",
            "k",
            "--log-dir",
            "l",
            "--sumo-begin",
            "5",
        ];
        let err = <Cli as clap::Parser>::try_parse_from(orphan).err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--sumo-net"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A site whose signal has a program clock matches the simulator it runs on by its
    /// detector lanes (the controller writes the clock's); a site with other detector
    /// lanes does not.
    #[test]
    fn a_site_with_a_program_clock_matches_its_simulator_on_detector_lanes() {
        let scenario = greenwave_sim::load("single-4way").unwrap();
        let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
        let sim = SimField::new(env).signal_specs();
        let mut site = sim.clone();
        let p = site[0].plan.n_phases();
        let stages: Vec<ClockStage> = (0..p as u8)
            .map(|phase| ClockStage {
                phase,
                duration: Millis::from_secs(20),
            })
            .collect();
        site[0].program_clock = Some(ProgramClock::new(&stages, 0).unwrap());
        site[0].layout.n_lanes += p as u16;
        check_site_matches(&site, &sim, "single-4way").unwrap();
        site[0].layout.n_lanes -= 1;
        let e = check_site_matches(&site, &sim, "single-4way").unwrap_err();
        assert!(
            e.to_string().contains("is not scenario single-4way's"),
            "{e}"
        );
        // Another junction's id with the same plan and lanes: its bundle would be fed these
        // detectors.
        site[0].layout.n_lanes += 1;
        site[0].id = format!("{}-elsewhere", site[0].id);
        let e = check_site_matches(&site, &sim, "single-4way").unwrap_err();
        assert!(e.to_string().contains("-elsewhere"), "{e}");
    }
}
