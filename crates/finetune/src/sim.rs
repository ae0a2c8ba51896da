//! The controller on the embedded simulator, for the fine-tuning demonstration, tests and
//! benchmark: log a stretch of "field" operation, and evaluate a policy on several seeds
//! (feature `sim`).

use std::path::Path;

use greenwave_core::{Millis, ObsLayout, PhasePlan};
use greenwave_policy::bundle::check_manifest_runs;
use greenwave_sim::{EmbeddedEnv, Env, EpisodeMetrics, Scenario};

use greenwave_runtime::controller::{
    Controller, ControllerConfig, DetectorSource, Fallback, FallbackKind, Policy, SignalSpec,
    SimField,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer};
use greenwave_runtime::log::{LogConfig, LogWriter, SyncPolicy};

/// The fine-tuning demonstration scenario (`scenarios/finetune-shift.toml`): single-4way's
/// junction and plan, demand `train` (north–south heavy) and `field` (the heavy direction
/// flipped, the default). Carried in the library so the demo can write it out anywhere.
pub const SHIFT_SCENARIO_TOML: &str = include_str!("../../runtime/scenarios/finetune-shift.toml");

/// Why a simulated run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimRunError {
    /// The policy could not be loaded.
    #[error("loading the policy: {0}")]
    Inference(#[from] greenwave_runtime::InferenceError),
    /// ε out of range.
    #[error("{0}")]
    Epsilon(#[from] greenwave_runtime::inference::EpsilonOutOfRange),
    /// The manifest's decision temperature is outside the range a manifest holds.
    #[error(transparent)]
    Temperature(#[from] greenwave_runtime::inference::TemperatureOutOfRange),
    /// The controller failed.
    #[error("controller: {0}")]
    Controller(#[from] greenwave_runtime::ControllerError),
    /// The log failed.
    #[error("transition log: {0}")]
    Log(#[from] greenwave_runtime::log::LogError),
    /// The scenario could not be adjusted.
    #[error("scenario: {0}")]
    Scenario(#[from] greenwave_sim::ScenarioError),
    /// The simulator reported no metrics.
    #[error("the simulator reported no metrics")]
    NoMetrics,
    /// Appends to the transition log failed during the run: the logged day has gaps.
    #[error(
        "the transition log failed {errors} time(s) during the run, so the logged day has \
         gaps; {dropped} transitions in all were not logged (see the log messages above)"
    )]
    LogGaps {
        /// Failed appends and commits.
        errors: u64,
        /// Transitions not logged.
        dropped: u64,
    },
    /// The model's manifest does not read.
    #[error("the policy model: {0}")]
    Model(#[from] greenwave_policy::onnx::OnnxError),
    /// The simulator has no signal the controller could run.
    #[error("the simulator has no signal for the controller to run")]
    NoSignals,
    /// The model was not made for a signal's plan and layout: it would decide for another
    /// junction, or every decision would fail and fall back.
    #[error("the policy does not run signal {signal}: {problem}")]
    NotForSignal {
        /// The signal's id.
        signal: String,
        /// What differs.
        problem: greenwave_policy::bundle::BundleError,
    },
}

/// Runs the controller with the policy `model` (ONNX bytes, `version` logged with each
/// decision) on `scenario` for `seconds` with simulation seed `seed`: greedy, or ε-greedy
/// with `epsilon` > 0 (the runtime's bounded exploration, ≤ 0.2). With `log_dir`, every
/// transition is logged there. Returns the episode metrics.
pub fn run_controller(
    scenario: &Scenario,
    model: &[u8],
    version: u32,
    seed: u64,
    seconds: u32,
    epsilon: f32,
    log_dir: Option<&Path>,
) -> Result<EpisodeMetrics, SimRunError> {
    let episode = seconds.checked_mul(1000).map(Millis).ok_or_else(|| {
        greenwave_sim::ScenarioError::Setting {
            scenario: scenario.name().to_string(),
            message: format!("an episode of {seconds} s is longer than the clock counts (u32 ms)"),
        }
    })?;
    let scenario = scenario.with_episode(episode)?;
    let env = EmbeddedEnv::from_scenario(&scenario, seed);
    let fallback = Fallback::for_scenario(&scenario, FallbackKind::FixedTime);
    let run = Run {
        model,
        version,
        seed,
        seconds,
        epsilon,
        log_dir,
    };
    run_on(env, |_, _| fallback, &run)
}

/// One controller run on any simulator: what [`run_on`] needs besides the simulator.
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    /// The policy (ONNX bytes).
    pub model: &'a [u8],
    /// The policy version logged with each decision.
    pub version: u32,
    /// Seed of the exploration (the simulator has its own).
    pub seed: u64,
    /// Simulated seconds.
    pub seconds: u32,
    /// ε of ε-greedy exploration (0: greedy).
    pub epsilon: f32,
    /// Where to log every transition, if anywhere.
    pub log_dir: Option<&'a Path>,
}

/// Runs the controller on the simulator `env` (just reset; e.g. SUMO's `Env`) as `run`
/// says, with the fallback `fallback(plans, decision interval)` makes. Returns the episode
/// metrics.
pub fn run_on<E: Env>(
    env: E,
    fallback: impl FnOnce(&[&PhasePlan], Millis) -> Fallback,
    run: &Run<'_>,
) -> Result<EpisodeMetrics, SimRunError> {
    let mut field = SimField::new(env);
    let specs = field.signal_specs();
    let interval = field.decision_interval();
    let (layout, temperature) = check_model_runs(run.model, &specs)?;
    // The model's own rule (its manifest's), with `epsilon` of exploration on top.
    let explorer =
        Explorer::epsilon_greedy(run.epsilon, run.seed ^ 0x5eed)?.acting_at(temperature)?;
    let policy = Policy {
        backend: load_backend(BackendKind::Tract, run.model, layout, None)?,
        version: run.version,
        explorer,
    };
    let log = match run.log_dir {
        Some(dir) => {
            let mut cfg = LogConfig::new(dir);
            // Simulated time runs far faster than real time: group commits by count.
            cfg.sync = SyncPolicy::EveryRecords(1024.try_into().expect("non-zero"));
            Some(LogWriter::open(cfg)?.0)
        }
        None => None,
    };
    let plans: Vec<&PhasePlan> = specs.iter().map(|s| &s.plan).collect();
    let fallback = fallback(&plans, interval);
    let cfg = ControllerConfig::for_simulated_time(interval);
    let mut c = Controller::new(specs.clone(), Ok(policy), fallback, cfg, log)?;
    let stats = c.run(&mut field, f64::from(run.seconds), |_| {})?;
    c.close_log()?;
    if stats.log_errors > 0 {
        return Err(SimRunError::LogGaps {
            errors: stats.log_errors,
            dropped: stats.transitions_dropped,
        });
    }
    field.metrics().ok_or(SimRunError::NoMetrics)
}

/// The layout `model` reads and its decision temperature (`None`: greedy), once its
/// manifest is checked to be for every signal's plan and layout (the controller runs one
/// policy on all of them here).
fn check_model_runs(
    model: &[u8],
    specs: &[SignalSpec],
) -> Result<(ObsLayout, Option<f32>), SimRunError> {
    let manifest = greenwave_policy::onnx::read_manifest(model)?;
    let first = specs.first().ok_or(SimRunError::NoSignals)?;
    for s in specs {
        check_manifest_runs(&manifest, &s.plan, s.layout).map_err(|problem| {
            SimRunError::NotForSignal {
                signal: s.id.clone(),
                problem,
            }
        })?;
    }
    Ok((first.layout, manifest.decision_temperature))
}

/// Evaluation of `model` on `scenario` by its manifest's rule (greedy, or a draw at its
/// decision temperature), one run of `seconds` per seed.
pub fn evaluate(
    scenario: &Scenario,
    model: &[u8],
    seeds: &[u64],
    seconds: u32,
) -> Result<Vec<EpisodeMetrics>, SimRunError> {
    seeds
        .iter()
        .map(|&s| run_controller(scenario, model, 0, s, seconds, 0.0, None))
        .collect()
}

/// A Markdown table of mean delay per seed for a before/after comparison, with the means.
pub fn delay_table(seeds: &[u64], before: &[EpisodeMetrics], after: &[EpisodeMetrics]) -> String {
    let mut t = String::from(
        "| eval seed | deployed: mean delay (s) | fine-tuned: mean delay (s) | change (s) |\n|---:|---:|---:|---:|\n",
    );
    for ((s, b), a) in seeds.iter().zip(before).zip(after) {
        t.push_str(&format!(
            "| {s} | {:.2} | {:.2} | {:+.2} |\n",
            b.mean_delay_s,
            a.mean_delay_s,
            a.mean_delay_s - b.mean_delay_s
        ));
    }
    let mean = |m: &[EpisodeMetrics]| {
        m.iter().map(|x| x.mean_delay_s).sum::<f64>() / m.len().max(1) as f64
    };
    t.push_str(&format!(
        "| **mean** | **{:.2}** | **{:.2}** | **{:+.2}** |\n",
        mean(before),
        mean(after),
        mean(after) - mean(before)
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare model for another plan is refused by signal, not run (before, its choices
    /// were served on this junction's phases, or every decision fell back).
    #[test]
    fn a_model_for_another_plan_is_refused_before_the_run() {
        let scenario = greenwave_sim::load("single-4way").unwrap();
        let model = include_bytes!("../../../models/single-4way.onnx");
        run_controller(&scenario, model, 1, 1, 60, 0.0, None).unwrap();
        let (w, mut m) = greenwave_policy::onnx::import(model).unwrap();
        m.plan_hash = "0".repeat(16);
        let other = greenwave_policy::onnx::export(&w, &m);
        let err = run_controller(&scenario, &other, 1, 1, 60, 0.0, None).unwrap_err();
        assert!(
            matches!(
                &err,
                SimRunError::NotForSignal {
                    problem: greenwave_policy::bundle::BundleError::PlanMismatch { .. },
                    ..
                }
            ),
            "{err}"
        );
    }
}
