//! `greenwave export`: a run folder → ONNX policy (manifest in `metadata_props`), the
//! firmware's postcard blobs (f32 and int8) and the manifest JSON beside it. A shared
//! policy (`--policy shared`) is compiled into one per-signal MLP per signal, each exported
//! the same way with its own plan hash.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use greenwave_core::{Millis, PhasePlan};
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_learn::{specialize, Incidence, Manifest, PolicyWeights, Provenance};
use greenwave_sim::{Scenario, SignalSpec};

use crate::backend::{Backend, BackendArgs, EnvSource, OnOff};

use crate::train::checkpoint::{
    load_policy_at, load_run_policy_at, PolicyChoice, PolicyInfo, RunInfo, RunPolicy, SelectedInfo,
};
use crate::train::policy::PolicyKind;

/// Paths of the side files of an ONNX model path: `X.blob`, `X.int8.blob`, `X.manifest.json`.
pub use greenwave_learn::files::side_paths;
/// Files written by an export.
pub use greenwave_learn::files::PolicyFiles as Exported;

fn provenance(info: &RunInfo, pinfo: &PolicyInfo, plans: &[PhasePlan]) -> Provenance {
    let mut details = serde_json::Map::new();
    let hashes: Vec<String> = plans.iter().map(plan_hash_hex).collect();
    details.insert("plan_hashes".into(), serde_json::json!(hashes));
    details.insert("iterations".into(), serde_json::json!(pinfo.iteration));
    let scenario = match info.config.sim.sumo_label() {
        Some(label) => {
            details.insert("backend".into(), serde_json::json!("sumo"));
            details.insert("sumo_net".into(), serde_json::json!(info.config.sim.net));
            details.insert(
                "sumo_routes".into(),
                serde_json::json!(info.config.sim.routes),
            );
            details.insert(
                "sumo_additional".into(),
                serde_json::json!(info.config.sim.additional),
            );
            details.insert(
                "sumo_begin_s".into(),
                serde_json::json!(info.config.sim.begin.unwrap_or(0.0)),
            );
            if let Some(step) = info.config.sim.step_length {
                details.insert("sumo_step_length_s".into(), serde_json::json!(step));
            }
            if let Some(cfg) = &info.config.sim.sumocfg {
                details.insert("sumocfg".into(), serde_json::json!(cfg));
                details.insert(
                    "sumocfg_options".into(),
                    serde_json::json!(info.config.sim.sumocfg_options),
                );
            }
            if let Some(args) = &info.config.sim.sumo_args {
                details.insert("sumo_args".into(), serde_json::json!(args));
            }
            label
        }
        None => info.config.scenario.clone(),
    };
    let mut p = Provenance {
        command: info.config.command.clone(),
        git_rev: info.git_rev.clone(),
        seed: info.config.seed,
        scenario,
        algorithm: info.config.algo.name().into(),
        env_steps: pinfo.env_steps,
        parent_version: None,
        details,
    };
    if let Some(kind) = info.reward_kind {
        p.set_reward_kind(kind);
    }
    p
}

/// The plans the environment trained on (run.json); older run folders have only their
/// scenario.toml.
fn trained_plans(run: &Path, info: &RunInfo) -> Result<Vec<PhasePlan>> {
    if info.plans.is_empty() {
        let scenario = Scenario::from_file(&run.join("scenario.toml"))
            .context("reading the run's scenario.toml")?;
        Ok(scenario.plans().into_iter().cloned().collect())
    } else {
        Ok(info.plans.clone())
    }
}

/// Whether `info`'s run observed program-clock lanes (SUMO, `--program-clock on`).
fn trained_with_clock(info: &RunInfo) -> bool {
    info.config.sim.backend == Backend::Sumo
        && info.config.sim.program_clock.is_some_and(OnOff::is_on)
}

/// `run.json`'s decision interval, checked to fit a duration (a damaged or hand-edited
/// file must not wrap it).
fn checked_secs(decision_interval_s: u32) -> Result<u32> {
    if decision_interval_s == 0 || decision_interval_s > Millis::MAX_SECS {
        bail!(
            "run.json's decision_interval_s is {decision_interval_s}: not a decision interval \
             (1..={} s); is the run folder damaged?",
            Millis::MAX_SECS
        );
    }
    Ok(decision_interval_s)
}

/// Writes `weights` for `plan` to `out` (ONNX with the manifest inside) and its side
/// files; the manifest says whether the observation has `program_clock` lanes, and the
/// temperature the policy acts at (`None`: greedy; such a policy has no firmware blobs).
fn write_policy(
    weights: &PolicyWeights,
    plan: &PhasePlan,
    info: &RunInfo,
    (program_clock, decision_temperature): (bool, Option<f32>),
    provenance: Provenance,
    out: &Path,
) -> Result<Exported> {
    let mut manifest = Manifest::new(
        plan,
        weights.obs_layout,
        Millis::from_secs(checked_secs(info.decision_interval_s)?),
        weights.hidden(),
        provenance,
    );
    manifest.program_clock = program_clock;
    manifest.decision_temperature = decision_temperature;
    greenwave_learn::files::write_policy_files(weights, &manifest, plan.hash(), out)
        .with_context(|| format!("exporting to {}", out.display()))
}

/// The provenance of one signal's export of a policy of kind `kind`: the run's, the
/// selection of its weights (`selected`; `None`: the last weights), and `details.policy`
/// and `details.signal_id`.
fn signal_provenance(
    (info, pinfo, plans): (&RunInfo, &PolicyInfo, &[PhasePlan]),
    selected: Option<&SelectedInfo>,
    kind: PolicyKind,
    id: &str,
) -> Provenance {
    let mut prov = provenance(info, pinfo, plans);
    note_selection(&mut prov, selected);
    prov.details
        .insert("policy".into(), serde_json::json!(kind.name()));
    prov.set_signal_id(id);
    prov
}

/// Adds to `prov` the validation that selected the exported weights (`None`: the last
/// weights were exported).
fn note_selection(prov: &mut Provenance, selected: Option<&SelectedInfo>) {
    if let Some(s) = selected {
        let mut by = serde_json::json!({
            "validation_seeds": s.validation.seeds,
            "validation_delay_s": s.validation.delay_s,
        });
        // Kept over the last weights by the end test's second look: its fresh seeds too.
        if let Some(t) = &s.kept_on_fresh_seeds {
            by["fresh_seeds"] = serde_json::json!(t.earlier.seeds);
            by["fresh_delay_s"] = serde_json::json!(t.earlier.delay_s);
            by["last_weights_fresh_delay_s"] = serde_json::json!(t.last.delay_s);
        }
        prov.details.insert("selected_by".into(), by);
    }
}

/// Exports the policy of `run` (its validation-selected weights, or its last ones where it
/// selected none) to `out` (an `.onnx` path). The run must hold a per-signal MLP
/// (`--policy mlp`); a shared policy is exported per signal with [`export_signals`].
pub fn export(run: &Path, out: &Path) -> Result<Exported> {
    export_at(run, out, PolicyChoice::Selected.resolve(run)?.as_ref())
}

/// [`export`] of the selected weights `selected` (as [`PolicyChoice::resolve`] read them;
/// `None`: the last weights).
fn export_at(run: &Path, out: &Path, selected: Option<&SelectedInfo>) -> Result<Exported> {
    let (weights, info, pinfo) = load_policy_at(run, selected)
        .with_context(|| format!("reading run folder {}", run.display()))?;
    let plans = trained_plans(run, &info)?;
    let plan = plans
        .first()
        .context("the trained environment has no signals")?;
    let mut provenance = provenance(&info, &pinfo, &plans);
    note_selection(&mut provenance, selected);
    let rule = (
        trained_with_clock(&info),
        decision_temperature(run, selected)?,
    );
    write_policy(&weights, plan, &info, rule, provenance, out)
}

/// The temperature the selected weights act at: the run's decision-rule trial's
/// (`decision_rule.json`, `greenwave train --decision-rule auto`), where it tried these
/// weights; else `None` (greedy: the last weights, a run without the trial, or one whose
/// trial was of other weights).
fn decision_temperature(run: &Path, selected: Option<&SelectedInfo>) -> Result<Option<f32>> {
    let Some(selected) = selected else {
        return Ok(None);
    };
    let file = crate::train::checkpoint::DECISION_RULE_FILE;
    let Some(test) = crate::train::checkpoint::read_decision_rule(run)? else {
        let info = crate::train::checkpoint::read_run_info(run)?;
        if info.config.decision_rule == crate::train::selection::DecisionRuleTrial::Auto {
            say!(
                "the run asked for the decision-rule trial but has no {file} (stopped before \
                 its end?): acting greedily"
            );
        }
        return Ok(None);
    };
    let (tried, exported) = (&test.greedy, &selected.validation);
    if (tried.iteration, tried.env_steps) != (exported.iteration, exported.env_steps) {
        say!(
            "{file} tried iteration {}'s weights, not the exported {}: acting greedily",
            tried.iteration,
            exported.iteration
        );
        return Ok(None);
    }
    match test.temperature {
        Some(t) if !greenwave_learn::manifest::decision_temperature_ok(t) => bail!(
            "{file}: decision temperature {t} is outside {}..={}; is the run folder damaged?",
            greenwave_learn::manifest::MIN_DECISION_TEMPERATURE,
            greenwave_learn::manifest::MAX_DECISION_TEMPERATURE
        ),
        t => Ok(t),
    }
}

/// Whether the run's signals have more than one plan: then one file bound to one plan
/// cannot run on all of them (a controller checks every signal's plan hash), and a
/// per-signal MLP is exported once per signal, as a shared policy is.
fn plans_differ(plans: &[PhasePlan]) -> bool {
    plans.windows(2).any(|w| w[0].hash() != w[1].hash())
}

/// Exports a per-signal MLP run whose signals have different plans: the same weights once
/// per signal, beside `out` and named by [`signal_path`], each manifest bound to its own
/// signal's plan (`details.policy = "mlp"`, `details.signal_id`).
fn export_mlp_per_signal(
    run: &Path,
    out: &Path,
    selected: Option<&SelectedInfo>,
) -> Result<Vec<SignalExport>> {
    let (weights, info, pinfo) = load_policy_at(run, selected)
        .with_context(|| format!("reading run folder {}", run.display()))?;
    let plans = trained_plans(run, &info)?;
    if info.signal_ids.len() != plans.len() {
        bail!(
            "{}: its signals have different plans, but run.json lacks their ids",
            run.display()
        );
    }
    let paths = signal_paths(out, &info.signal_ids)?;
    let rule = (
        trained_with_clock(&info),
        decision_temperature(run, selected)?,
    );
    let mut written = Vec::new();
    for ((id, plan), path) in info.signal_ids.iter().zip(&plans).zip(paths) {
        let run_of = (&info, &pinfo, plans.as_slice());
        let prov = signal_provenance(run_of, selected, PolicyKind::Mlp, id);
        let files = write_policy(&weights, plan, &info, rule, prov, &path)?;
        written.push(SignalExport {
            signal_id: id.clone(),
            files,
        });
    }
    Ok(written)
}

/// One signal's compiled policy.
#[derive(Clone, Debug)]
pub struct SignalExport {
    /// The signal's id.
    pub signal_id: String,
    /// Its files.
    pub files: Exported,
}

/// `out` with the signal id inserted before the extension: `DIR/policy.onnx` →
/// `DIR/policy.J1.onnx` (characters other than letters, digits, `-` and `_` become `_`).
pub fn signal_path(out: &Path, signal_id: &str) -> PathBuf {
    let safe: String = signal_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = out
        .file_stem()
        .map_or("policy".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}.{safe}.onnx"))
}

/// [`signal_path`] of each of `ids`; refused where two ids give one file (`J.1` and `J_1`),
/// which would leave one signal's export written over by the other's.
fn signal_paths(out: &Path, ids: &[String]) -> Result<Vec<PathBuf>> {
    let paths: Vec<PathBuf> = ids.iter().map(|id| signal_path(out, id)).collect();
    for (i, p) in paths.iter().enumerate() {
        if let Some(j) = paths[..i].iter().position(|q| q == p) {
            bail!(
                "signals '{}' and '{}' would both be exported to {}; rename one of them",
                ids[j],
                ids[i],
                p.display()
            );
        }
    }
    Ok(paths)
}

/// The signals a shared policy is compiled for: `(id, plan, incidence rows)`.
type TargetSignal = (String, PhasePlan, Vec<Vec<bool>>);

/// The trained signals of `info`, or (zero-shot) `target`.
fn target_signals(info: &RunInfo, target: Option<&[SignalSpec]>) -> Result<Vec<TargetSignal>> {
    match target {
        Some(specs) => Ok(specs
            .iter()
            .map(|s| (s.id.clone(), s.plan.clone(), s.incidence.clone()))
            .collect()),
        None => {
            if info.signal_ids.len() != info.plans.len()
                || info.incidences.len() != info.plans.len()
            {
                bail!("run.json lacks the signals' ids, plans or incidences");
            }
            Ok(info
                .signal_ids
                .iter()
                .zip(&info.plans)
                .zip(&info.incidences)
                .map(|((id, plan), inc)| (id.clone(), plan.clone(), inc.clone()))
                .collect())
        }
    }
}

/// Zero-shot target signals, and whether their observations have program-clock lanes.
type Target<'a> = (&'a [SignalSpec], bool);

/// Compiles a shared policy of `run` for every signal (those trained on, or with
/// `target` those of another embedded scenario: zero-shot) and writes one ONNX, blobs and
/// manifest per signal beside `out`, named by [`signal_path`]; each manifest binds its
/// signal's plan hash.
pub fn export_signals(run: &Path, out: &Path, target: Option<&str>) -> Result<Vec<SignalExport>> {
    match target {
        Some(name) => {
            let specs = EnvSource::from_args(&BackendArgs::embedded(), name, None)?.signals()?;
            export_signals_for(run, out, Some((&specs, false)))
        }
        None => export_signals_for(run, out, None),
    }
}

/// [`export_signals_for`] of the selected weights `selected` (`None`: the last weights).
fn export_signals_at(
    run: &Path,
    out: &Path,
    target: Option<Target<'_>>,
    selected: Option<&SelectedInfo>,
) -> Result<Vec<SignalExport>> {
    let (policy, info, pinfo) = load_run_policy_at(run, selected)
        .with_context(|| format!("reading run folder {}", run.display()))?;
    let RunPolicy::Shared(shared) = policy else {
        bail!(
            "{} holds a per-signal MLP (--policy mlp): export it with one --out file",
            run.display()
        )
    };
    let plans = trained_plans(run, &info)?;
    let targets = target_signals(&info, target.map(|t| t.0))?;
    let ids: Vec<String> = targets.iter().map(|t| t.0.clone()).collect();
    // Zero-shot, on signals the trial never ran: greedy.
    let temperature = match target {
        Some(_) => None,
        None => decision_temperature(run, selected)?,
    };
    let mut written = Vec::new();
    for ((id, plan, rows), path) in targets.into_iter().zip(signal_paths(out, &ids)?) {
        let inc = Incidence::new(&rows).with_context(|| format!("signal '{id}'"))?;
        let weights = specialize(&shared, &inc).with_context(|| format!("signal '{id}'"))?;
        let run_of = (&info, &pinfo, plans.as_slice());
        let mut prov = signal_provenance(run_of, selected, PolicyKind::Shared, &id);
        prov.details
            .insert("zero_shot".into(), serde_json::json!(target.is_some()));
        let clock = match target {
            Some((_, clock)) => clock,
            None => trained_with_clock(&info),
        };
        let files = write_policy(&weights, &plan, &info, (clock, temperature), prov, &path)?;
        written.push(SignalExport {
            signal_id: id,
            files,
        });
    }
    Ok(written)
}

/// [`export_signals`] for the signals `target` (of any backend: a SUMO net's too), or
/// those trained on.
pub fn export_signals_for(
    run: &Path,
    out: &Path,
    target: Option<Target<'_>>,
) -> Result<Vec<SignalExport>> {
    export_signals_at(
        run,
        out,
        target,
        PolicyChoice::Selected.resolve(run)?.as_ref(),
    )
}

/// Arguments of `greenwave export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The run folder (from `greenwave train --out`).
    pub run: PathBuf,
    /// The ONNX file to write; `.blob`, `.int8.blob` and `.manifest.json` go beside it. A
    /// shared policy (`--policy shared`) writes one set per signal, `OUT_STEM.SIGNAL.onnx`.
    #[arg(long)]
    pub out: PathBuf,
    /// Shared policy only: compile for the signals of this embedded scenario (built-in
    /// name or TOML file) instead of those trained on — zero-shot.
    #[arg(long, conflicts_with = "net")]
    pub scenario: Option<String>,
    /// Shared policy only: `--backend sumo --net F.net.xml --routes F.rou.xml` (and the
    /// timing options) compiles for the signals of that SUMO net instead — zero-shot.
    #[command(flatten)]
    pub sim: BackendArgs,
    /// Export the run's last weights instead of those its validation selected
    /// (`best.safetensors`; runs without validation have only the last).
    #[arg(long)]
    pub last: bool,
}

fn print_files(e: &Exported) {
    say!("wrote {}", e.onnx.display());
    if e.blob.exists() {
        say!("wrote {} (f32 firmware blob)", e.blob.display());
        say!("wrote {} (int8 firmware blob)", e.blob_int8.display());
    } else {
        say!(
            "no firmware blobs: the policy acts at its manifest's decision_temperature (the \
             run's decision-rule trial kept it), and the firmware acts greedily"
        );
    }
    say!("wrote {}", e.manifest.display());
}

/// Runs `greenwave export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let info: RunInfo = crate::train::checkpoint::read_run_info(&args.run)?;
    let choice = match args.last {
        true => PolicyChoice::Last,
        false => PolicyChoice::Selected,
    };
    // Read once: the weights exported and the provenance are of the same selection.
    let selected = choice.resolve(&args.run)?;
    match &selected {
        Some(s) => say!(
            "exporting the weights of iteration {} selected on validation seeds {:?} (greedy delay {:.2} s; --last for the last weights)",
            s.policy.iteration,
            s.validation.seeds,
            s.validation.mean_delay_s()
        ),
        None => say!("exporting the run's last weights"),
    }
    match info.policy() {
        PolicyKind::Mlp => {
            if args.scenario.is_some() || args.sim.backend == Backend::Sumo {
                bail!(
                    "--scenario and --backend sumo need a run with a shared policy \
                     (--policy shared)"
                );
            }
            if plans_differ(&trained_plans(&args.run, &info)?) {
                say!(
                    "its signals have different phase plans: one export per signal, each \
                     bound to its own plan"
                );
                for e in export_mlp_per_signal(&args.run, &args.out, selected.as_ref())? {
                    say!("signal {}:", e.signal_id);
                    print_files(&e.files);
                }
            } else {
                print_files(&export_at(&args.run, &args.out, selected.as_ref())?);
            }
        }
        PolicyKind::Shared => {
            // Zero-shot onto another scenario's or net's signals, else those trained on.
            // A SUMO target has program-clock lanes as the run trained, unless chosen.
            let mut sim = args.sim.clone();
            if sim.backend == Backend::Sumo && sim.program_clock.is_none() {
                sim.program_clock = Some(match trained_with_clock(&info) {
                    true => OnOff::On,
                    false => OnOff::Off,
                });
            }
            // And its pedestrian zones as the run observed them (runs before them: none).
            if sim.backend == Backend::Sumo && sim.pedestrian_zones.is_none() {
                sim.pedestrian_zones = match info.config.sim.backend {
                    Backend::Sumo => info.config.sim.pedestrian_zones,
                    Backend::Embedded => Some(OnOff::On),
                };
            }
            let target = match (args.scenario.as_deref(), sim.backend) {
                (None, Backend::Embedded) => None,
                (name, _) => {
                    let source = EnvSource::from_args(&sim, name.unwrap_or_default(), None)?;
                    Some((source.signals()?, source.program_clock()))
                }
            };
            let target = target.as_ref().map(|(specs, c)| (specs.as_slice(), *c));
            for e in export_signals_at(&args.run, &args.out, target, selected.as_ref())? {
                say!("signal {}:", e.signal_id);
                print_files(&e.files);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ids_that_would_share_one_file_are_refused() {
        let out = Path::new("export/m.onnx");
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let p = signal_paths(out, &ids(&["J1", "J2"])).unwrap();
        assert_eq!(p[0], Path::new("export/m.J1.onnx"));
        let err = signal_paths(out, &ids(&["J.1", "K", "J_1"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'J.1' and 'J_1'") && err.contains("m.J_1.onnx"),
            "{err}"
        );
    }
}
