//! `greenwave eval`: a policy next to fixed-time, actuated and max-pressure, on the same
//! scenario and seeds.

use std::path::Path;

use anyhow::{bail, Context, Result};
use greenwave_core::Millis;
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_learn::{onnx, Manifest, PolicyWeights};
use greenwave_sim::{
    run_episode, Controller, ControllerKind, EmbeddedEnv, Env, EpisodeMetrics, MaxRedBound,
    Scenario, SignalSpec,
};
use serde::Serialize;

use crate::backend::{episode_of_secs, BackendArgs, EnvSource};
use crate::policy_controller::ActionRule;

/// The controller name of the policy's row.
pub const POLICY_ROW: &str = "policy";

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
    /// Seconds between the controller's decisions (a policy runs at its manifest's).
    pub decision_interval_s: f64,
    /// The temperature a policy drew its phases at (its manifest's `decision_temperature`,
    /// or `--temperature`); absent when it acted greedily, and for the classic controllers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Whether the policy acted by another rule than its manifest's (`--temperature`,
    /// `--greedy`): then it is not what a controller runs. Written only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overrides_manifest: bool,
}

/// Loads a policy from ONNX, checking it was trained for `scenario`'s plan and layout.
pub fn load_policy_for(model: &Path, scenario: &Scenario) -> Result<PolicyWeights> {
    let specs = EmbeddedEnv::from_scenario(scenario, 0).signals().to_vec();
    load_policy_for_signals(model, &specs, &format!("scenario '{}'", scenario.name()))
}

/// Loads a policy from ONNX, checking it fits the signals `specs` of `what` (a scenario or
/// a SUMO net): the manifest's plan hash must be that of the first signal's plan (one
/// shared policy acts for every signal) and its observation layout that of every signal.
pub fn load_policy_for_signals(
    model: &Path,
    specs: &[SignalSpec],
    what: &str,
) -> Result<PolicyWeights> {
    Ok(load_checked(model, specs, what)?.0)
}

/// The weights and manifest of `model`, checked to fit the signals `specs` of `what`.
fn load_checked(
    model: &Path,
    specs: &[SignalSpec],
    what: &str,
) -> Result<(PolicyWeights, Manifest)> {
    let bytes = std::fs::read(model).with_context(|| format!("reading {}", model.display()))?;
    let (weights, manifest) =
        onnx::import(&bytes).with_context(|| format!("loading {}", model.display()))?;
    check_fits(&manifest, specs, what)
        .with_context(|| format!("{} cannot run on {what}", model.display()))?;
    Ok((weights, manifest))
}

/// What to try when a policy's plan hash is not the signal's: another net or scenario
/// has other plans, and the hash covers the plan's timing, so on the same net the timing
/// options must be those it was trained with (its `run.json` says).
fn plan_mismatch_hint(plan: &greenwave_core::PhasePlan) -> &'static str {
    if plan.intergreens().is_empty() {
        "; a policy runs only on the plans it was trained (or, shared, exported) for: on \
         another net or scenario export it for that one's signals, and on its own SUMO net \
         give the timing options it was trained with (--timing, --program, --yellow, \
         --all-red, --min-green, --max-green, --program-intergreens; its run.json has them)"
    } else {
        "; the plan hash covers its timing, and this plan keeps the program's per-pair \
         intergreens (--program-intergreens on): a policy trained without them runs with \
         --program-intergreens off"
    }
}

/// Whether a policy with `manifest` may act on the signals `specs` of `what`: every
/// signal must have the plan and layout it binds, as on a controller.
pub fn check_fits(manifest: &Manifest, specs: &[SignalSpec], what: &str) -> Result<()> {
    if specs.is_empty() {
        bail!("{what} has no signals");
    }
    for s in specs {
        let hash = plan_hash_hex(&s.plan);
        if manifest.plan_hash != hash {
            let several = match specs.len() {
                1 => "",
                _ => {
                    "; a policy for signals with different plans is exported once per \
                     signal (`greenwave export` writes OUT.SIGNAL.onnx) and `eval --model \
                     OUT.onnx` runs those when OUT.onnx does not exist"
                }
            };
            bail!(
                "it was trained for phase plan {} but {what} runs plan {hash} (signal '{}'){}{several}",
                manifest.plan_hash,
                s.id,
                plan_mismatch_hint(&s.plan)
            );
        }
        if manifest.obs_layout != s.layout {
            bail!(
                "it reads observations of layout {:?} but signal '{}' of {what} produces {:?}",
                manifest.obs_layout,
                s.id,
                s.layout
            );
        }
    }
    Ok(())
}

fn average(runs: &[EpisodeMetrics]) -> EpisodeMetrics {
    let n = runs.len().max(1) as f64;
    let f = |g: fn(&EpisodeMetrics) -> f64| runs.iter().map(g).sum::<f64>() / n;
    EpisodeMetrics {
        mean_delay_s: f(|m| m.mean_delay_s),
        mean_wait_s: f(|m| m.mean_wait_s),
        mean_travel_time_s: mean_where(runs, EpisodeMetrics::travel_time_s),
        throughput_veh: (f(|m| m.throughput_veh as f64)).round() as u64,
        backlog_veh: (f(|m| m.backlog_veh as f64)).round() as u64,
        pedestrians: (f(|m| m.pedestrians as f64)).round() as u64,
        mean_pedestrian_wait_s: mean_where(runs, |m| {
            (m.pedestrians > 0).then_some(m.mean_pedestrian_wait_s)
        }),
        mean_queue_veh: f(|m| m.mean_queue_veh),
        // Rounded up: one teleport in five runs still shows.
        teleports: (f(|m| m.teleports as f64)).ceil() as u64,
        sim_seconds: f(|m| m.sim_seconds),
        wall_seconds: f(|m| m.wall_seconds),
    }
}

/// The mean over runs of a per-run mean that some runs lack (a mean travel time where no
/// vehicle finished, a pedestrian wait where no one walked: their 0 is a mean over
/// nobody): those runs are left out; 0 when every run lacks it.
fn mean_where(runs: &[EpisodeMetrics], value: impl Fn(&EpisodeMetrics) -> Option<f64>) -> f64 {
    let values: Vec<f64> = runs.iter().filter_map(value).collect();
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// Runs `episode(seed)` for every seed of `seeds`, split over 2 threads; results in seed
/// order.
pub fn evaluate_with(
    seeds: &[u64],
    episode: &(dyn Fn(u64) -> Result<EpisodeMetrics> + Sync),
) -> Result<Vec<EpisodeMetrics>> {
    let half = seeds.len().div_ceil(2).max(1);
    let results: Vec<Result<Vec<EpisodeMetrics>>> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .chunks(half)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| episode(seed).with_context(|| format!("seed {seed}")))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("an evaluation thread panicked")))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    Ok(all)
}

/// Runs `controller` on `seeds` episodes of `scenario` (split over 2 threads).
pub fn evaluate(
    scenario: &Scenario,
    make: &(dyn Fn() -> Box<dyn Controller> + Sync),
    seeds: &[u64],
    episode: Millis,
) -> Result<Vec<EpisodeMetrics>> {
    evaluate_with(seeds, &|seed| {
        let mut env = EmbeddedEnv::from_scenario(scenario, seed);
        let mut c = make();
        Ok(run_episode(&mut env, c.as_mut(), seed, episode)?)
    })
}

/// The policy and the three classic controllers on the same seeds of `scenario`.
pub fn compare(
    model: &Path,
    scenario: &Scenario,
    seeds: &[u64],
    episode: Millis,
) -> Result<Vec<EvalRow>> {
    compare_on(
        model,
        &EnvSource::Embedded(scenario.clone()),
        seeds,
        episode,
        MaxRedBound::PlanCycle,
        None,
    )
}

/// A policy loaded for a set of signals: one network per signal (or one for all), and the
/// decision interval it was trained at (its manifest's).
pub struct LoadedPolicy {
    /// The networks: one for every signal, or one per signal in the signals' order.
    pub weights: Vec<PolicyWeights>,
    /// Time between the policy's decisions.
    pub decision_interval: Millis,
    /// The temperature it acts at (its manifest's `decision_temperature`; `None`: greedy).
    pub decision_temperature: Option<f32>,
}

/// The policy for the signals `specs` of `what`: `model` itself (one network for every
/// signal), or, when no file has that name, the per-signal exports of a shared policy
/// beside it (`m.onnx` → `m.<signal id>.onnx`, as `greenwave export` writes them), each
/// checked against its own signal. Per-signal exports must agree on the decision interval.
pub fn load_policies(model: &Path, specs: &[SignalSpec], what: &str) -> Result<LoadedPolicy> {
    if model.exists() {
        let (w, m) = load_checked(model, specs, what)?;
        return Ok(LoadedPolicy {
            weights: vec![w],
            decision_interval: m.decision_interval,
            decision_temperature: m.decision_temperature,
        });
    }
    let mut weights = Vec::with_capacity(specs.len());
    let mut interval: Option<Millis> = None;
    let mut temperature: Option<Option<f32>> = None;
    for s in specs {
        let path = crate::export_cmd::signal_path(model, &s.id);
        if !path.exists() {
            bail!(
                "{} does not exist, nor does {} (the export for signal '{}')",
                model.display(),
                path.display(),
                s.id
            );
        }
        let (w, m) = load_checked(&path, std::slice::from_ref(s), what)?;
        if let Some(i) = interval.filter(|&i| i != m.decision_interval) {
            bail!(
                "{} decides every {} ms but the exports before it every {} ms",
                path.display(),
                m.decision_interval.0,
                i.0
            );
        }
        if let Some(t) = temperature.filter(|&t| t != m.decision_temperature) {
            bail!(
                "{} acts at decision temperature {:?} but the exports before it at {t:?} \
                 (None: greedy)",
                path.display(),
                m.decision_temperature
            );
        }
        interval = Some(m.decision_interval);
        temperature = Some(m.decision_temperature);
        weights.push(w);
    }
    Ok(LoadedPolicy {
        weights,
        decision_interval: interval.context("no signals to load a policy for")?,
        decision_temperature: temperature.flatten(),
    })
}

/// The policy and the three classic controllers on the same seeds, on either backend. The
/// policy must fit the source's signals (plan hash and observation layout), else nothing
/// runs.
/// The policy acts by `rule` (`None`: its manifest's, as a controller does) under the
/// max-red rule with bound `max_red`.
pub fn compare_on(
    model: &Path,
    source: &EnvSource,
    seeds: &[u64],
    episode: Millis,
    max_red: MaxRedBound,
    rule: Option<ActionRule>,
) -> Result<Vec<EvalRow>> {
    let what = source.describe();
    let specs = source.signals()?;
    let clock = first_manifest(model, &specs)?.program_clock;
    let check_clock = || {
        if clock == source.program_clock() {
            return Ok(());
        }
        let state = |on: bool| if on { "on" } else { "off" };
        match source.scenario() {
            Some(_) => bail!(
                "{} was trained on SUMO with its program clock on, which {what} has not",
                model.display()
            ),
            None => bail!(
                "{} was trained with its program clock {} but {what} runs with it {} \
                 (--program-clock {}, or leave the option out)",
                model.display(),
                state(clock),
                state(source.program_clock()),
                state(clock)
            ),
        }
    };
    // On SUMO the clock explains a layout mismatch; elsewhere the plan check comes first.
    if source.scenario().is_none() {
        check_clock()?;
    }
    let policy = load_policies(model, &specs, &what)?;
    check_clock()?;
    let own = match policy.decision_temperature {
        None => ActionRule::Greedy,
        Some(t) => ActionRule::sampled(t, 0).map_err(anyhow::Error::msg)?,
    };
    let (rule, overrides_manifest) = match rule {
        Some(r) => (r, r.temperature() != own.temperature()),
        None => (own, false),
    };
    if let (Some(t), false) = (rule.temperature(), overrides_manifest) {
        eprintln!(
            "note: the policy draws its phases at temperature {t}, as its manifest says (the \
             controller does the same)"
        );
    }
    // The policy runs at the interval it was trained at (as the controller does); the
    // classic controllers at the source's.
    let policy_source = source.with_decision_interval(policy.decision_interval)?;
    if policy.decision_interval != source.decision_interval() {
        eprintln!(
            "note: the policy decides every {} s (its manifest), the classic controllers every {} s and, in the rows that say so, at the policy's",
            secs(policy.decision_interval),
            secs(source.decision_interval())
        );
    }
    if let Some(note) = source.adaptive_programs_note() {
        eprintln!("{note}");
    }
    let mut rows = Vec::new();
    rows.push(EvalRow {
        controller: POLICY_ROW.into(),
        metrics: average(&evaluate_with(seeds, &|seed| {
            policy_source.run_policy(&policy.weights, max_red, rule, seed, episode)
        })?),
        seeds: seeds.len(),
        decision_interval_s: secs(policy_source.decision_interval()),
        temperature: rule.temperature(),
        overrides_manifest,
    });
    rows.extend(classic_rows(source, &policy_source, seeds, episode)?);
    if let Some(note) = source.empty_runs_note(rows.iter().map(|r| &r.metrics)) {
        eprintln!("{note}");
    }
    Ok(rows)
}

/// The classic controllers' rows on `seeds`: each at the source's decision interval, and
/// actuated and max-pressure also at the policy's (`policy_source`) where it differs (a
/// SUMO net's policy at 2 s): the best classic is the best at either, so the policy is
/// never compared only with controllers held to a coarser clock than its own. (The
/// static program does not decide.)
fn classic_rows(
    source: &EnvSource,
    policy_source: &EnvSource,
    seeds: &[u64],
    episode: Millis,
) -> Result<Vec<EvalRow>> {
    let mut rows = Vec::new();
    for kind in ControllerKind::ALL {
        rows.push(classic_row(
            source,
            kind,
            seeds,
            episode,
            kind.name().into(),
        )?);
    }
    if policy_source.decision_interval() != source.decision_interval() {
        let interval = secs(policy_source.decision_interval());
        for kind in [ControllerKind::Actuated, ControllerKind::MaxPressure] {
            let name = format!("{} ({interval} s)", kind.name());
            rows.push(classic_row(policy_source, kind, seeds, episode, name)?);
        }
    }
    Ok(rows)
}

/// One classic controller's row, `kind` on `source` (at its decision interval) over
/// `seeds`, named `controller`.
fn classic_row(
    source: &EnvSource,
    kind: ControllerKind,
    seeds: &[u64],
    episode: Millis,
    controller: String,
) -> Result<EvalRow> {
    let interval = secs(source.decision_interval());
    let metrics = evaluate_with(seeds, &|seed| source.run_classic(kind, seed, episode))
        .with_context(|| format!("evaluating {kind} at {interval} s"))?;
    Ok(EvalRow {
        controller,
        metrics: average(&metrics),
        seeds: seeds.len(),
        decision_interval_s: interval,
        temperature: None,
        overrides_manifest: false,
    })
}

fn secs(t: Millis) -> f64 {
    f64::from(t.0) / 1000.0
}

/// What a table shows for the mean travel time where no vehicle completed its trip.
const NO_TRIP: &str = "–";

/// A table's mean travel time cell, to `decimals` places, or [`NO_TRIP`] where no vehicle
/// completed its trip (the `sim` and `eval` tables).
pub fn travel_time_cell(m: &EpisodeMetrics, decimals: usize) -> String {
    m.travel_time_s()
        .map_or_else(|| NO_TRIP.to_string(), |t| format!("{t:.decimals$}"))
}

/// Renders rows as a Markdown table; with two more columns, pedestrians and their mean wait,
/// where any run had pedestrians.
pub fn table(rows: &[EvalRow]) -> String {
    // An average over seeds can round a few walkers to 0 pedestrians; their wait shows.
    let walkers = rows
        .iter()
        .any(|r| r.metrics.pedestrians > 0 || r.metrics.mean_pedestrian_wait_s > 0.0);
    let mut s = String::from("| controller | mean delay (s) | mean wait (s) | mean travel time (s) | throughput (veh) | backlog (veh) | mean queue (veh) |");
    s.push_str(if walkers {
        " pedestrians | mean pedestrian wait (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    } else {
        "\n|---|---:|---:|---:|---:|---:|---:|\n"
    });
    for r in rows {
        let m = &r.metrics;
        s.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} | {} | {} | {:.2} |",
            r.controller,
            m.mean_delay_s,
            m.mean_wait_s,
            travel_time_cell(m, 2),
            m.throughput_veh,
            m.backlog_veh,
            m.mean_queue_veh
        ));
        if walkers {
            s.push_str(&format!(
                " {} | {:.2} |",
                m.pedestrians, m.mean_pedestrian_wait_s
            ));
        }
        s.push('\n');
    }
    s
}

/// The policy's mean delay over the best classic controller's (the lowest mean delay of
/// the other rows), with that row: the ratio item 3 of issue 14 bars at 0.9. `None`
/// without a policy row or a classic row, or where either delay is not finite or the best
/// is not above 0 (an empty episode has nothing to compare).
pub fn against_best_classic(rows: &[EvalRow]) -> Option<(f64, &EvalRow)> {
    let policy = policy_row(rows)?;
    let best = rows
        .iter()
        .filter(|r| r.controller != POLICY_ROW && r.metrics.mean_delay_s.is_finite())
        .min_by(|a, b| a.metrics.mean_delay_s.total_cmp(&b.metrics.mean_delay_s))?;
    let (p, b) = (policy.metrics.mean_delay_s, best.metrics.mean_delay_s);
    (p.is_finite() && b > 0.0).then_some((p / b, best))
}

/// The policy's row of `rows`.
fn policy_row(rows: &[EvalRow]) -> Option<&EvalRow> {
    rows.iter().find(|r| r.controller == POLICY_ROW)
}

/// The line `eval` ends with: the policy against the best classic controller on the same
/// seeds, and, where the greedy policy is no faster, not to bundle it (a learned
/// controller that loses to a classic one has no reason to be flashed at that junction).
/// A policy run by another rule than its manifest's (`--temperature`, `--greedy`) is not
/// what a controller runs, so its line says how it acted and gives the ratio alone.
pub fn verdict(rows: &[EvalRow]) -> Option<String> {
    let (ratio, best) = against_best_classic(rows)?;
    let name = &best.controller;
    let policy = policy_row(rows)?;
    let overridden = policy.overrides_manifest;
    let how = match (policy.temperature, overridden) {
        (Some(t), true) => format!(" (sampled at temperature {t})"),
        (None, true) => " (greedy, not its manifest's rule)".into(),
        (Some(t), false) => format!(" (drawing at temperature {t}, as its manifest says)"),
        (None, false) => String::new(),
    };
    let head = format!(
        "policy{how} / best classic controller ({name}, {:.2} s): {:.3}",
        best.metrics.mean_delay_s,
        ratio_rounded_up(ratio)
    );
    let (note, hides_jams) = teleport_note(policy_row(rows)?, best);
    let head = head + &note;
    Some(if overridden {
        head
    } else if ratio_rounded_up(ratio) >= 1.0 {
        format!(
            "{head}. The policy is no faster than {name} on these seeds: do not bundle it \
             for this junction."
        )
    } else if hides_jams {
        format!(
            "{head}. Its lower delay may be jams SUMO cleared: do not bundle it for this junction."
        )
    } else {
        head
    })
}

/// `ratio` rounded up in the third decimal, as the verdict prints it: a ratio just over a
/// bar (0.9004 against item 3's 0.9) never prints as meeting it (0.900).
fn ratio_rounded_up(ratio: f64) -> f64 {
    (ratio * 1000.0).ceil() / 1000.0
}

/// What the verdict adds where SUMO teleported vehicles (out of a jam, after standing at
/// its head for `--time-to-teleport`): their delay after the teleport is not counted, so
/// a row that teleports more than another may hide a gridlock behind a lower delay.
/// Returns the note and whether the policy teleported more.
fn teleport_note(policy: &EvalRow, best: &EvalRow) -> (String, bool) {
    let (p, b) = (policy.metrics.teleports, best.metrics.teleports);
    if p == 0 && b == 0 {
        return (String::new(), false);
    }
    let note = format!(
        ". SUMO teleported vehicles out of jams (per run, rounded up; their delay after \
         the teleport is not counted): policy {p}, {} {b}",
        best.controller
    );
    (note, p > b)
}

/// Arguments of `greenwave eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The policy (ONNX from `greenwave export`). For a shared policy exported per signal
    /// (`m.J1.onnx`, `m.J2.onnx`, …) give the `--out` it was exported with (`m.onnx`).
    #[arg(long)]
    pub model: std::path::PathBuf,
    /// Built-in scenario or TOML scenario file (embedded simulator).
    #[arg(long, default_value = "single-4way", conflicts_with_all = ["net", "sumocfg"])]
    pub scenario: String,
    /// Demand set of the scenario (e.g. `shifted`; embedded simulator).
    #[arg(long, conflicts_with_all = ["net", "sumocfg"])]
    pub demand: Option<String>,
    /// Simulator (`--backend sumo --net F.net.xml --routes F.rou.xml [--begin S]`), as for
    /// `greenwave sim`; the policy must have been trained for the same phase plan.
    #[command(flatten)]
    pub sim: BackendArgs,
    /// Number of evaluation seeds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub seeds: u64,
    /// First seed (evaluation seeds are `first..first+seeds`; keep them apart from training).
    #[arg(long, default_value_t = 1000)]
    pub first_seed: u64,
    /// Seconds per episode (default: the scenario's episode length; 3600 on SUMO), rounded
    /// up to whole decision intervals: the last decision runs its full interval.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub seconds: Option<u32>,
    /// One JSON row per controller instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The max-red rule's bound for the policy (s): a phase whose detectors call and that
    /// has been kept from green this long is served next, as in training and on the
    /// controller (`greenwave-controller run --max-red-s`). Default: each signal's
    /// max-out cycle (every phase at max green, plus clearances).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(Millis::MAX_SECS)))]
    pub max_red_s: Option<u32>,
    /// Evaluate the policy without the max-red rule (to see what the rule changes).
    #[arg(long, conflicts_with = "max_red_s")]
    pub no_max_red: bool,
    /// Sample the policy's phases from the softmax of its scores over this temperature
    /// instead of by its manifest's rule (greedy, or its `decision_temperature`): 1 is the
    /// policy's own distribution, as in training; smaller values sharpen it towards the
    /// greedy choice. For measuring what a trained policy has learned (tools/README.md,
    /// finding 22); the controller acts by the manifest's rule.
    #[arg(long, conflicts_with = "greedy")]
    pub temperature: Option<f32>,
    /// Take the best-scored phase even where the policy's manifest names a decision
    /// temperature (to see what the draw changes).
    #[arg(long)]
    pub greedy: bool,
    /// Seeds the draws of `--temperature` (with each evaluation seed).
    #[arg(long, default_value_t = 0, requires = "temperature")]
    pub sample_seed: u64,
}

/// The policy's action rule `args` ask for (`None`: its manifest's), checked before
/// anything runs.
fn action_rule(args: &EvalArgs) -> Result<Option<ActionRule>> {
    if args.greedy {
        return Ok(Some(ActionRule::Greedy));
    }
    let Some(t) = args.temperature else {
        return Ok(None);
    };
    let rule = ActionRule::sampled(t, args.sample_seed).map_err(anyhow::Error::msg)?;
    eprintln!(
        "note: the policy samples its phases at temperature {t} (sampling seed {}); \
         the controller acts by its manifest's rule",
        args.sample_seed
    );
    Ok(Some(rule))
}

/// The manifest of `model`, or where no file has that name, of the export for the first
/// of `specs` beside it (as [`load_policies`] finds them).
fn first_manifest(model: &Path, specs: &[SignalSpec]) -> Result<Manifest> {
    let path = match specs.first() {
        Some(s) if !model.exists() => crate::export_cmd::signal_path(model, &s.id),
        _ => model.to_path_buf(),
    };
    if !path.exists() {
        let beside = if path == model {
            String::new()
        } else {
            format!(
                ", nor its export for signal '{}' ({})",
                specs[0].id,
                path.display()
            )
        };
        bail!(
            "no policy at {}{beside}: give the --out of `greenwave export`",
            model.display()
        );
    }
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    onnx::read_manifest(&bytes)
        .with_context(|| format!("reading the manifest of {}", path.display()))
}

/// `source` with program-clock lanes as `model`'s manifest says it was trained (unless
/// `--program-clock` chose), and without pedestrian zones if the policy was trained
/// before them (unless `--pedestrian-zones` chose), so that a policy trained either way
/// evaluates on SUMO.
pub fn source_for_model(source: EnvSource, model: &Path, sim: &BackendArgs) -> Result<EnvSource> {
    if source.scenario().is_some() {
        return Ok(source);
    }
    let source = match sim.program_clock {
        Some(_) => source,
        None => {
            // Per-signal exports are named by signal id, which only the simulator knows.
            let specs = match model.exists() {
                true => Vec::new(),
                false => source.signals()?,
            };
            let manifest = first_manifest(model, &specs)?;
            source.with_program_clock(manifest.program_clock)?
        }
    };
    if sim.pedestrian_zones.is_some() {
        return Ok(source);
    }
    without_zones_if_it_fits(source, model)
}

/// `source`, or, where `model` does not fit its signals but fits them without pedestrian
/// zones (a policy trained before them, finding 36), `source` without them, with a note.
fn without_zones_if_it_fits(source: EnvSource, model: &Path) -> Result<EnvSource> {
    let Some(without) = source.without_pedestrian_zones() else {
        return Ok(source);
    };
    let what = source.describe();
    if load_policies(model, &source.signals()?, &what).is_ok() {
        return Ok(source);
    }
    if load_policies(model, &without.signals()?, &what).is_err() {
        // The error with the zones on is the one to report.
        return Ok(source);
    }
    eprintln!(
        "note: {} observes no pedestrian zones (trained before them): evaluating without \
         them (--pedestrian-zones off)",
        model.display()
    );
    Ok(without)
}

/// Runs `greenwave eval`.
pub fn run(args: &EvalArgs) -> Result<()> {
    let rule = action_rule(args)?;
    let source = EnvSource::from_args(&args.sim, &args.scenario, args.demand.as_deref())?;
    let source = source_for_model(source, &args.model, &args.sim)?;
    let Some(end) = args.first_seed.checked_add(args.seeds) else {
        bail!(
            "--first-seed {} with --seeds {} runs past the largest seed ({})",
            args.first_seed,
            args.seeds,
            u64::MAX
        );
    };
    let seeds: Vec<u64> = (args.first_seed..end).collect();
    let episode = match args.seconds {
        Some(s) => episode_of_secs(s)?,
        None => source.episode(),
    };
    let max_red = match (args.no_max_red, args.max_red_s) {
        (true, _) => MaxRedBound::Off,
        (false, Some(s)) => MaxRedBound::Fixed(Millis::from_secs(s)),
        (false, None) => MaxRedBound::PlanCycle,
    };
    if max_red == MaxRedBound::Off {
        eprintln!("note: the policy acts without the max-red rule (--no-max-red)");
    }
    let rows = compare_on(&args.model, &source, &seeds, episode, max_red, rule)?;
    if args.json {
        for r in &rows {
            say!("{}", serde_json::to_string(r)?);
        }
        // One JSON row per controller on stdout; the verdict goes beside it.
        if let Some(v) = verdict(&rows) {
            eprintln!("{v}");
        }
    } else {
        say!(
            "{} on '{}', {} seeds ({}..{}), {} s each\n",
            args.model.display(),
            source.name(),
            seeds.len(),
            seeds[0],
            seeds[seeds.len() - 1],
            f64::from(episode.0) / 1000.0
        );
        say!("{}", table(&rows).trim_end());
        if let Some(v) = verdict(&rows) {
            say!("\n{v}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(controller: &str, mean_delay_s: f64) -> EvalRow {
        EvalRow {
            controller: controller.into(),
            metrics: EpisodeMetrics {
                mean_delay_s,
                ..EpisodeMetrics::default()
            },
            seeds: 5,
            decision_interval_s: 5.0,
            temperature: None,
            overrides_manifest: false,
        }
    }

    /// A seed in which no vehicle finished has no mean travel time: the average leaves it
    /// out rather than counting its 0, and the table shows a dash where no seed had one.
    #[test]
    fn a_run_with_no_finished_trip_has_no_travel_time() {
        let run = |throughput_veh, mean_travel_time_s| EpisodeMetrics {
            throughput_veh,
            mean_travel_time_s,
            ..EpisodeMetrics::default()
        };
        let mean = average(&[run(10, 30.0), run(0, 0.0), run(20, 50.0)]);
        assert_eq!(mean.mean_travel_time_s, 40.0);
        assert_eq!(mean.travel_time_s(), Some(40.0));
        // One trip in three seeds: the mean throughput rounds to 0, the trip still shows.
        let rare = average(&[run(1, 90.0), run(0, 0.0), run(0, 0.0)]);
        assert_eq!((rare.throughput_veh, rare.travel_time_s()), (0, Some(90.0)));
        // Likewise a pedestrian wait: seeds no one walked in are left out.
        let walkers = |pedestrians, mean_pedestrian_wait_s| EpisodeMetrics {
            pedestrians,
            mean_pedestrian_wait_s,
            ..EpisodeMetrics::default()
        };
        let peds = average(&[walkers(4, 12.0), walkers(0, 0.0)]);
        assert_eq!(peds.mean_pedestrian_wait_s, 12.0);
        // One walker in three seeds rounds to 0 pedestrians; the columns still show.
        let mut few = row("actuated", 20.0);
        few.metrics = average(&[walkers(1, 9.0), walkers(0, 0.0), walkers(0, 0.0)]);
        assert_eq!(few.metrics.pedestrians, 0);
        let t = table(&[few]);
        assert!(
            t.contains("mean pedestrian wait (s)") && t.ends_with("| 0 | 9.00 |\n"),
            "{t}"
        );
        let none = average(&[run(0, 0.0), run(0, 0.0)]);
        assert_eq!(none.travel_time_s(), None);
        let mut stuck = row("fixed-time", 900.0);
        stuck.metrics = none;
        let mut moving = row("actuated", 20.0);
        moving.metrics.throughput_veh = 3;
        moving.metrics.mean_travel_time_s = 61.5;
        let t = table(&[stuck, moving]);
        assert!(
            t.contains(&format!("| fixed-time | 0.00 | 0.00 | {NO_TRIP} | 0 |")),
            "{t}"
        );
        assert!(t.contains("| actuated | 20.00 | 0.00 | 61.50 | 3 |"), "{t}");
    }

    /// grid6's held-out rows (BENCHMARKS.md): the net's own program is the best classic
    /// controller and the policy loses to it, so the verdict says not to bundle the policy.
    #[test]
    fn a_policy_slower_than_the_incumbent_is_told_not_to_be_bundled() {
        let rows = [
            row(POLICY_ROW, 569.79),
            row("fixed-time", 334.44),
            row("actuated", 691.23),
            row("max-pressure", 541.46),
        ];
        let (ratio, best) = against_best_classic(&rows).unwrap();
        assert_eq!(best.controller, "fixed-time");
        assert!((ratio - 569.79 / 334.44).abs() < 1e-12);
        let v = verdict(&rows).unwrap();
        assert!(
            v.starts_with("policy / best classic controller (fixed-time, 334.44 s): 1.704"),
            "{v}"
        );
        assert!(v.contains("no faster than fixed-time"), "{v}");
        assert!(v.ends_with("do not bundle it for this junction."), "{v}");
    }

    /// game/cross's rows: max-pressure is the best classic controller and the policy
    /// beats it, so the verdict is the ratio alone.
    #[test]
    fn a_faster_policy_gets_its_ratio_and_no_warning() {
        let rows = [
            row(POLICY_ROW, 9.25),
            row("fixed-time", 25.72),
            row("actuated", 14.82),
            row("max-pressure", 14.25),
        ];
        let v = verdict(&rows).unwrap();
        assert_eq!(
            v,
            "policy / best classic controller (max-pressure, 14.25 s): 0.650"
        );
        // Rounded up, never down: just over the bar does not print as on it.
        let over = [row(POLICY_ROW, 9.004), row("actuated", 10.0)];
        assert!(verdict(&over)
            .unwrap()
            .ends_with("(actuated, 10.00 s): 0.901"));
        // A tie is no win.
        let tie = [row(POLICY_ROW, 14.25), row("max-pressure", 14.25)];
        assert!(verdict(&tie).unwrap().contains("no faster"));
    }

    /// A policy whose runs SUMO teleported more vehicles out of jams than the best
    /// classic controller's may owe its lower delay to the jams cleared: the verdict says
    /// so and not to bundle it; teleports alone on the classic side are only reported.
    /// One teleport in five runs still counts (the mean is rounded up).
    #[test]
    fn a_policy_that_teleports_more_is_not_called_faster() {
        let teleporting = |controller: &str, delay: f64, per_seed: &[u64]| {
            let mut r = row(controller, delay);
            let runs: Vec<EpisodeMetrics> = per_seed
                .iter()
                .map(|&teleports| EpisodeMetrics {
                    mean_delay_s: delay,
                    teleports,
                    ..EpisodeMetrics::default()
                })
                .collect();
            r.metrics = average(&runs);
            r
        };
        let rows = [
            teleporting(POLICY_ROW, 100.0, &[0, 0, 0, 0, 1]),
            teleporting("max-pressure", 150.0, &[0; 5]),
        ];
        assert_eq!(rows[0].metrics.teleports, 1);
        let v = verdict(&rows).unwrap();
        assert!(v.contains("policy 1, max-pressure 0"), "{v}");
        assert!(v.ends_with("do not bundle it for this junction."), "{v}");
        let rows = [
            teleporting(POLICY_ROW, 100.0, &[0; 5]),
            teleporting("max-pressure", 150.0, &[60, 62, 0, 0, 0]),
        ];
        let v = verdict(&rows).unwrap();
        assert!(v.ends_with("policy 0, max-pressure 25"), "{v}");
    }

    /// A policy run by another rule than its manifest's is not what the controller runs:
    /// its line says how it acted and gives no advice about bundling, even where it loses.
    /// One that draws as its manifest says is what the controller runs, and gets the
    /// advice.
    #[test]
    fn a_policy_off_its_manifests_rule_gets_its_ratio_and_no_advice() {
        let mut sampled = row(POLICY_ROW, 569.79);
        sampled.temperature = Some(0.5);
        sampled.overrides_manifest = true;
        let v = verdict(&[sampled.clone(), row("fixed-time", 334.44)]).unwrap();
        assert_eq!(
            v,
            "policy (sampled at temperature 0.5) / best classic controller (fixed-time, 334.44 s): 1.704"
        );
        let mut greedy = row(POLICY_ROW, 569.79);
        greedy.overrides_manifest = true;
        let v = verdict(&[greedy, row("fixed-time", 334.44)]).unwrap();
        assert!(
            v.starts_with("policy (greedy, not its manifest's rule) / "),
            "{v}"
        );
        assert!(!v.contains("do not bundle"), "{v}");
        sampled.overrides_manifest = false;
        let v = verdict(&[sampled, row("fixed-time", 334.44)]).unwrap();
        assert!(
            v.starts_with("policy (drawing at temperature 0.5, as its manifest says) / ")
                && v.contains("do not bundle it"),
            "{v}"
        );
    }

    /// A NaN row is passed over for the best; with no policy, no classic row, a NaN
    /// policy or a best delay of 0 there is no ratio, so no verdict.
    #[test]
    fn no_ratio_without_two_finite_delays() {
        let with_nan = [
            row(POLICY_ROW, 10.0),
            row("actuated", f64::NAN),
            row("fixed-time", 20.0),
        ];
        let (ratio, best) = against_best_classic(&with_nan).unwrap();
        assert_eq!((ratio, best.controller.as_str()), (0.5, "fixed-time"));
        for rows in [
            &[row("fixed-time", 20.0)][..],
            &[row(POLICY_ROW, 10.0)][..],
            &[row(POLICY_ROW, f64::NAN), row("fixed-time", 20.0)][..],
            &[row(POLICY_ROW, 10.0), row("fixed-time", 0.0)][..],
            &[row(POLICY_ROW, 10.0), row("fixed-time", f64::NAN)][..],
        ] {
            assert!(verdict(rows).is_none(), "{rows:?}");
        }
    }
}
