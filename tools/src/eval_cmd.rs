//! `greenwave eval`: a policy next to fixed-time, actuated and max-pressure, on the same
//! scenario and seeds.

use std::path::Path;

use anyhow::{bail, Context, Result};
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_learn::{onnx, PolicyWeights};
use greenwave_sim::{
    run_episode, Controller, ControllerKind, EmbeddedEnv, Env, EpisodeMetrics, Scenario,
};
use serde::Serialize;

use crate::policy_controller::PolicyController;

/// One controller's averaged results.
#[derive(Clone, Debug, Serialize)]
pub struct EvalRow {
    /// Controller name.
    pub controller: String,
    /// Metrics averaged over the seeds.
    #[serde(flatten)]
    pub metrics: EpisodeMetrics,
    /// Seeds run.
    pub seeds: usize,
}

/// Loads a policy from ONNX, checking it was trained for `scenario`'s plan and layout.
pub fn load_policy_for(model: &Path, scenario: &Scenario) -> Result<PolicyWeights> {
    let bytes = std::fs::read(model).with_context(|| format!("reading {}", model.display()))?;
    let (weights, manifest) =
        onnx::import(&bytes).with_context(|| format!("loading {}", model.display()))?;
    let plans = scenario.plans();
    let plan = plans.first().context("scenario has no signals")?;
    if manifest.plan_hash != plan_hash_hex(plan) {
        bail!(
            "{} was trained for phase plan {} but scenario '{}' runs plan {}",
            model.display(),
            manifest.plan_hash,
            scenario.name(),
            plan_hash_hex(plan)
        );
    }
    let layout = greenwave_sim::EmbeddedEnv::from_scenario(scenario, 0).signals()[0].layout;
    if manifest.obs_layout != layout {
        bail!(
            "{} reads observations of layout {:?} but scenario '{}' produces {:?}",
            model.display(),
            manifest.obs_layout,
            scenario.name(),
            layout
        );
    }
    Ok(weights)
}

fn average(runs: &[EpisodeMetrics]) -> EpisodeMetrics {
    let n = runs.len().max(1) as f64;
    let f = |g: fn(&EpisodeMetrics) -> f64| runs.iter().map(g).sum::<f64>() / n;
    EpisodeMetrics {
        mean_delay_s: f(|m| m.mean_delay_s),
        mean_wait_s: f(|m| m.mean_wait_s),
        mean_travel_time_s: f(|m| m.mean_travel_time_s),
        throughput_veh: (f(|m| m.throughput_veh as f64)).round() as u64,
        backlog_veh: (f(|m| m.backlog_veh as f64)).round() as u64,
        mean_queue_veh: f(|m| m.mean_queue_veh),
        sim_seconds: f(|m| m.sim_seconds),
        wall_seconds: f(|m| m.wall_seconds),
    }
}

/// Runs `controller` on `seeds` episodes of `scenario` (split over 2 threads).
pub fn evaluate(
    scenario: &Scenario,
    make: &(dyn Fn() -> Box<dyn Controller> + Sync),
    seeds: &[u64],
    seconds: f64,
) -> Result<Vec<EpisodeMetrics>> {
    let half = seeds.len().div_ceil(2).max(1);
    let results: Vec<Result<Vec<EpisodeMetrics>>> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(half)
            .map(|chunk| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for &seed in chunk {
                        let mut env = EmbeddedEnv::from_scenario(scenario, seed);
                        let mut c = make();
                        out.push(run_episode(&mut env, c.as_mut(), seed, seconds)?);
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("eval worker panicked"))
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    Ok(all)
}

/// The policy and the three classic controllers on the same seeds.
pub fn compare(
    model: &Path,
    scenario: &Scenario,
    seeds: &[u64],
    seconds: f64,
) -> Result<Vec<EvalRow>> {
    let weights = load_policy_for(model, scenario)?;
    let mut rows = Vec::new();
    let policy =
        move || -> Box<dyn Controller> { Box::new(PolicyController::new(weights.clone())) };
    rows.push(EvalRow {
        controller: "policy".into(),
        metrics: average(&evaluate(scenario, &policy, seeds, seconds)?),
        seeds: seeds.len(),
    });
    for kind in ControllerKind::ALL {
        let make = move || kind.build(scenario);
        rows.push(EvalRow {
            controller: kind.name().into(),
            metrics: average(&evaluate(scenario, &make, seeds, seconds)?),
            seeds: seeds.len(),
        });
    }
    Ok(rows)
}

/// Renders rows as a Markdown table.
pub fn table(rows: &[EvalRow]) -> String {
    let mut s = String::from("| controller | mean delay (s) | mean wait (s) | mean travel time (s) | throughput (veh) | backlog (veh) | mean queue (veh) |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let m = &r.metrics;
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {} | {} | {:.2} |\n",
            r.controller,
            m.mean_delay_s,
            m.mean_wait_s,
            m.mean_travel_time_s,
            m.throughput_veh,
            m.backlog_veh,
            m.mean_queue_veh
        ));
    }
    s
}

/// Arguments of `greenwave eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The policy (ONNX from `greenwave export`).
    #[arg(long)]
    pub model: std::path::PathBuf,
    /// Built-in scenario or TOML scenario file.
    #[arg(long, default_value = "single-4way")]
    pub scenario: String,
    /// Demand set of the scenario (e.g. `shifted`).
    #[arg(long)]
    pub demand: Option<String>,
    /// Number of evaluation seeds.
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// First seed (evaluation seeds are `first..first+seeds`; keep them apart from training).
    #[arg(long, default_value_t = 1000)]
    pub first_seed: u64,
    /// Seconds per episode (default: the scenario's episode length).
    #[arg(long)]
    pub seconds: Option<u32>,
    /// One JSON row per controller instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `greenwave eval`.
pub fn run(args: &EvalArgs) -> Result<()> {
    let mut scenario = greenwave_sim::load(&args.scenario)
        .with_context(|| format!("loading scenario '{}'", args.scenario))?;
    if let Some(d) = &args.demand {
        scenario = scenario.with_demand(d)?;
    }
    let seeds: Vec<u64> = (args.first_seed..args.first_seed + args.seeds.max(1)).collect();
    let seconds = args.seconds.unwrap_or(scenario.episode_s()) as f64;
    let rows = compare(&args.model, &scenario, &seeds, seconds)?;
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        println!(
            "{} on '{}', {} seeds ({}..{}), {} s each\n",
            args.model.display(),
            scenario.name(),
            seeds.len(),
            seeds[0],
            seeds[seeds.len() - 1],
            seconds
        );
        print!("{}", table(&rows));
    }
    Ok(())
}
