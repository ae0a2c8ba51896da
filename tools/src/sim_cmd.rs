//! `greenwave sim`: run the embedded simulator (or SUMO, `--backend sumo`) under the
//! classic controllers.

use greenwave_tools::say;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use greenwave_sim::{run_episode, scenario, ControllerKind, EmbeddedEnv, EpisodeMetrics, Scenario};
use greenwave_tools::backend::{episode_of_secs, Backend, BackendArgs, EnvSource};
use greenwave_tools::eval_cmd::travel_time_cell;
use serde::Serialize;

/// Arguments of `greenwave sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Built-in scenario (single-4way, arterial-3, grid-4x4) or path to a TOML scenario file.
    #[arg(long, default_value = "single-4way", conflicts_with_all = ["net", "sumocfg"])]
    pub scenario: String,
    /// Demand set of the scenario, e.g. `shifted` for single-4way (default: the scenario's).
    #[arg(long, conflicts_with_all = ["net", "sumocfg"])]
    pub demand: Option<String>,
    /// Controller to run; `all` runs each on the same arrivals and prints them side by side.
    #[arg(long, value_enum, default_value_t = ControllerChoice::All)]
    pub controller: ControllerChoice,
    /// Seconds to simulate (default: the scenario's episode length), rounded up to whole
    /// decision intervals: the last decision runs its full interval.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub seconds: Option<u32>,
    /// Random seed (the same seed gives the same arrivals to every controller).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Print the scenario in the TOML file format and exit (a start for your own).
    #[arg(long)]
    pub print_scenario: bool,
    /// Simulator options (`--backend embedded|sumo`, `--net`, `--routes`, `--begin`),
    /// shared with `greenwave train` and `greenwave eval`.
    #[command(flatten)]
    pub sim: BackendArgs,
}

/// `--controller` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ControllerChoice {
    /// Webster-optimal fixed cycle.
    FixedTime,
    /// Gap-out / max-out actuated control.
    Actuated,
    /// Max-pressure.
    MaxPressure,
    /// All three, side by side.
    All,
}

impl ControllerChoice {
    fn kinds(self) -> Vec<ControllerKind> {
        match self {
            ControllerChoice::FixedTime => vec![ControllerKind::FixedTime],
            ControllerChoice::Actuated => vec![ControllerKind::Actuated],
            ControllerChoice::MaxPressure => vec![ControllerKind::MaxPressure],
            ControllerChoice::All => ControllerKind::ALL.to_vec(),
        }
    }
}

/// One controller's result.
#[derive(Debug, Serialize)]
struct ControllerRun {
    controller: &'static str,
    #[serde(flatten)]
    metrics: EpisodeMetrics,
}

/// The JSON printed for one controller.
#[derive(Debug, Serialize)]
struct SingleReport<'a> {
    scenario: &'a str,
    demand: &'a str,
    seed: u64,
    #[serde(flatten)]
    run: &'a ControllerRun,
}

/// The JSON printed for `--controller all`.
#[derive(Debug, Serialize)]
struct CompareReport<'a> {
    scenario: &'a str,
    demand: &'a str,
    seed: u64,
    controllers: &'a [ControllerRun],
}

/// Runs `greenwave sim`.
pub fn run(args: &SimArgs) -> Result<()> {
    args.sim.check()?;
    if args.sim.backend == Backend::Sumo {
        return run_sumo(args);
    }
    let scenario = resolve_scenario(args)?;
    if args.print_scenario {
        say!("{}", scenario.to_toml_string().trim_end());
        return Ok(());
    }
    let episode = match args.seconds {
        Some(s) => episode_of_secs(s)?,
        None => scenario.episode(),
    };
    let mut env = EmbeddedEnv::from_scenario(&scenario, args.seed);
    let runs = args
        .controller
        .kinds()
        .into_iter()
        .map(|kind| {
            let mut controller = kind.build(&scenario);
            let metrics = run_episode(&mut env, controller.as_mut(), args.seed, episode)
                .with_context(|| format!("simulating {} under {kind}", scenario.name()))?;
            Ok(ControllerRun {
                controller: kind.name(),
                metrics,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let demand = scenario.demand().name.as_str();
    let title = format!("scenario {} (demand {demand})", scenario.name());
    print_runs(scenario.name(), demand, &title, args, &runs)
}

/// Prints `runs` as JSON or as the side-by-side table.
fn print_runs(
    scenario: &str,
    demand: &str,
    title: &str,
    args: &SimArgs,
    runs: &[ControllerRun],
) -> Result<()> {
    if args.json {
        let json = match runs {
            [one] => serde_json::to_string_pretty(&SingleReport {
                scenario,
                demand,
                seed: args.seed,
                run: one,
            }),
            all => serde_json::to_string_pretty(&CompareReport {
                scenario,
                demand,
                seed: args.seed,
                controllers: all,
            }),
        }?;
        say!("{json}");
    } else {
        say!("{}", table(title, args.seed, runs).trim_end());
    }
    Ok(())
}

/// `--backend sumo`: every controller on SUMO; `fixed-time` runs the network's own static
/// programs. JSON fields as for the embedded simulator, `scenario`/`demand` being the net
/// and route files. Without feature `sumo`, an error saying how to rebuild.
fn run_sumo(args: &SimArgs) -> Result<()> {
    let source = EnvSource::from_args(&args.sim, &args.scenario, None)?;
    if let Some(note) = source.adaptive_programs_note() {
        eprintln!("{note}");
    }
    let episode = match args.seconds {
        Some(s) => episode_of_secs(s)?,
        None => source.episode(),
    };
    let runs = args
        .controller
        .kinds()
        .into_iter()
        .map(|kind| {
            let metrics = source
                .run_classic(kind, args.seed, episode)
                .with_context(|| format!("simulating {} under {kind}", source.describe()))?;
            Ok(ControllerRun {
                controller: kind.name(),
                metrics,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let show = |paths: &mut dyn Iterator<Item = &std::path::PathBuf>| {
        let shown: Vec<_> = paths.map(|p| p.display().to_string()).collect();
        shown.join(",")
    };
    let (net, routes) = (
        show(&mut args.sim.net.iter()),
        show(&mut args.sim.routes.iter()),
    );
    if let Some(note) = source.empty_runs_note(runs.iter().map(|r| &r.metrics)) {
        eprintln!("{note}");
    }
    let title = format!("SUMO net {net} (routes {routes})");
    print_runs(&net, &routes, &title, args, &runs)
}

fn resolve_scenario(args: &SimArgs) -> Result<Scenario> {
    let scenario = scenario::load(&args.scenario)
        .with_context(|| format!("loading scenario `{}`", args.scenario))?;
    match &args.demand {
        None => Ok(scenario),
        Some(name) => scenario
            .with_demand(name)
            .with_context(|| format!("choosing demand `{name}`")),
    }
}

/// The side-by-side table.
fn table(title: &str, seed: u64, runs: &[ControllerRun]) -> String {
    let mut s = format!("{title}, seed {seed}\n\n");
    let walkers = runs.iter().any(|r| r.metrics.pedestrians > 0);
    s.push_str(
        "controller    delay s  wait s  travel s  throughput veh  backlog veh  queue veh  \
         sim s   sim-s/wall-s",
    );
    s.push_str(if walkers {
        "  pedestrians  ped wait s\n"
    } else {
        "\n"
    });
    for r in runs {
        let m = &r.metrics;
        let speed = if m.wall_seconds > 0.0 {
            m.sim_seconds / m.wall_seconds
        } else {
            f64::INFINITY
        };
        s.push_str(&format!(
            "{:<12} {:>8.1} {:>7.1} {:>9} {:>15} {:>12} {:>10.1} {:>6.0} {:>14.0}",
            r.controller,
            m.mean_delay_s,
            m.mean_wait_s,
            travel_time_cell(m, 1),
            m.throughput_veh,
            m.backlog_veh,
            m.mean_queue_veh,
            m.sim_seconds,
            speed
        ));
        if walkers {
            s.push_str(&format!(
                " {:>12} {:>11.1}",
                m.pedestrians, m.mean_pedestrian_wait_s
            ));
        }
        s.push('\n');
    }
    s
}
