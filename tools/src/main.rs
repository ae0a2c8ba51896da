//! `greenwave`: the workstation command of greenwave.
//!
//! Each subcommand lives in its own module with its `clap` arguments and a `run`
//! function; add one by adding a module, a variant to [`Command`] and a match arm.

mod sim_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Reinforcement-learning traffic-signal control, workstation side.
#[derive(Debug, Parser)]
#[command(name = "greenwave", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train, export, evaluate and report on the embedded simulator, in a few minutes.
    Demo(greenwave_tools::demo::DemoArgs),
    /// Simulate a scenario under a classic controller (or all of them) and print metrics.
    Sim(sim_cmd::SimArgs),
    /// Train a PPO policy on a scenario.
    Train(greenwave_tools::train::cli::TrainArgs),
    /// Redraw a training run's curves (training.png, losses.png) from its metrics.csv.
    Plot(greenwave_tools::train::plots::PlotArgs),
    /// Export a trained run as ONNX (+ firmware blobs and manifest).
    Export(greenwave_tools::export_cmd::ExportArgs),
    /// Evaluate a policy next to fixed-time, actuated and max-pressure.
    Eval(greenwave_tools::eval_cmd::EvalArgs),
    /// Make an ed25519 key pair for signing policy bundles.
    Keygen(greenwave_tools::bundle_cmd::KeygenArgs),
    /// Pack an exported policy into a signed bundle for controllers.
    Bundle(greenwave_tools::bundle_cmd::BundleArgs),
    /// Write a cabinet's site configuration (plans, layouts, fallback timing) from a
    /// scenario or a SUMO network, for `greenwave-controller run --site`.
    Site(greenwave_tools::site_cmd::SiteArgs),
}

fn main() -> ExitCode {
    // candle's CPU kernels use rayon; on a 2-core machine its worker threads contend with the
    // rollout threads and make small-matrix PPO updates slower (see BENCHMARKS.md), so one
    // thread is the default unless the user chose otherwise.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let mut cli = Cli::parse();
    let result = resolve_sumocfg(&mut cli.command).and_then(|()| run(&cli.command));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole context chain: what we were doing, then why it failed.
            eprintln!("error: {}", greenwave_runtime::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Reads `--sumocfg` into the simulator options of the commands that take it, once, before
/// they run.
fn resolve_sumocfg(command: &mut Command) -> anyhow::Result<()> {
    let sim = match command {
        Command::Sim(args) => &mut args.sim,
        Command::Train(args) => &mut args.sim,
        Command::Export(args) => &mut args.sim,
        Command::Eval(args) => &mut args.sim,
        Command::Site(args) => &mut args.sim,
        Command::Demo(_) | Command::Plot(_) | Command::Keygen(_) | Command::Bundle(_) => {
            return Ok(())
        }
    };
    sim.resolve_sumocfg()
}

fn run(command: &Command) -> anyhow::Result<()> {
    match command {
        Command::Demo(args) => greenwave_tools::demo::run(args),
        Command::Sim(args) => sim_cmd::run(args),
        Command::Train(args) => greenwave_tools::train::cli::run(args),
        Command::Plot(args) => greenwave_tools::train::plots::run(args),
        Command::Export(args) => greenwave_tools::export_cmd::run(args),
        Command::Eval(args) => greenwave_tools::eval_cmd::run(args),
        Command::Keygen(args) => greenwave_tools::bundle_cmd::run_keygen(args),
        Command::Bundle(args) => greenwave_tools::bundle_cmd::run_bundle(args),
        Command::Site(args) => greenwave_tools::site_cmd::run(args),
    }
}
