//! `greenwave site`: write the site configuration a cabinet's `greenwave-controller run
//! --site` reads (plans, observation layouts, fallback timing) from a scenario or a SUMO
//! network, so that the controller itself needs no simulator.
//!
//! Fallback timing: on the embedded simulator, Webster's cycle for the scenario's demand and
//! actuated max greens of 1.5 × those greens (what `greenwave sim` runs); on SUMO, each
//! light's own program as the fixed cycle (greens kept within the plan's min and max green)
//! and actuated max greens of 1.5 × the program's greens within the plan's max greens (a
//! walk stage's counted in the stage its vehicles go on in: `Env::actuated_greens`;
//! `greenwave_sim::controllers::max_greens_over`) with the detector-to-phase
//! assignment the program implies (what actuated control on SUMO runs).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use greenwave_core::PhasePlan;
use greenwave_runtime::controller::{env_signal_specs, Fallback, FallbackKind};
use greenwave_runtime::site::SiteConfig;

use crate::backend::{BackendArgs, EnvSource};

/// Arguments of `greenwave site`.
#[derive(Debug, Args)]
pub struct SiteArgs {
    /// Built-in scenario or TOML scenario file (embedded backend).
    #[arg(long, default_value = "single-4way", conflicts_with_all = ["net", "sumocfg"])]
    pub scenario: String,
    /// Where the cabinet is (free text, kept in the file).
    #[arg(long)]
    pub name: Option<String>,
    /// The site configuration file to write (an existing one only with `--force`: a
    /// cabinet's file may hold edits of its own).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace an existing `--out` file.
    #[arg(long)]
    pub force: bool,
    /// Writes the program clocks on Unix time (`program_clock_time = "unix"`): the Unix
    /// time, in ms (UTC), that the simulation's start (`--begin`) stands for on the street.
    /// Without it the clocks count from the controller's start (0 at `--begin`).
    #[arg(long, value_name = "MS")]
    pub begin_unix_ms: Option<u64>,
    /// Simulator options (`--backend embedded|sumo`, `--net`, `--routes`, timing flags).
    #[command(flatten)]
    pub sim: BackendArgs,
}

/// Runs `greenwave site`.
pub fn run(args: &SiteArgs) -> Result<()> {
    if args.out.exists() && !args.force {
        bail!(
            "{} exists (a cabinet's site file may hold edits of its own): give another --out, \
             or --force to replace it",
            args.out.display()
        );
    }
    let source = EnvSource::from_args(&args.sim, &args.scenario, None)?;
    let env = source.make(0, source.episode())?;
    // A policy that reads program-clock lanes gets them from the controller, which
    // follows each light's own program as the simulator did (`env_signal_specs`).
    let specs = env_signal_specs(env.as_ref());
    let interval = env.decision_interval();
    let fallback = match source.scenario() {
        Some(sc) => Fallback::for_scenario(sc, FallbackKind::Actuated),
        None => {
            let plans: Vec<&PhasePlan> = specs.iter().map(|s| &s.plan).collect();
            Fallback::from_programs(env.as_ref(), &plans)
        }
    };
    let name = args.name.clone().unwrap_or_else(|| source.name());
    let mut site = SiteConfig::from_specs(&name, interval, &specs, &fallback);
    if let Some(unix_ms) = args.begin_unix_ms {
        site.put_on_unix_time(unix_ms)
            .map_err(anyhow::Error::msg)
            .context("--begin-unix-ms")?;
    }
    let text = site
        .to_toml()
        .context("writing the site configuration as TOML")?;
    // A crash or a full disk leaves the old file whole, never a truncated one.
    crate::train::checkpoint::write_atomic(&args.out, text.as_bytes())?;
    say!(
        "site configuration: {} ({} signals, decision every {interval}, from {})",
        args.out.display(),
        specs.len(),
        source.describe()
    );
    Ok(())
}
