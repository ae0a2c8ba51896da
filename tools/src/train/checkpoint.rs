//! The run folder: `run.json` (what was trained, on which backend, the signals' phase
//! plans) and, on the embedded simulator, `scenario.toml` (for export and inspection),
//! `policy.safetensors` + `policy.json` (latest weights and normalisation),
//! `best.safetensors` + `best.json` (the validation-selected weights, see
//! [`super::selection`]), `validation.csv` and, where the end test looked again on fresh
//! seeds, `end_test.json`, where `--decision-rule auto` tried a draw against the argmax,
//! `decision_rule.json`,
//! `checkpoint.safetensors` + `checkpoint.json` (everything `--resume` needs), and
//! `metrics.csv`. Files are written to a temporary name and renamed, so an interrupted
//! run never leaves a half-written checkpoint.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use greenwave_core::{ObsLayout, PhasePlan};
use greenwave_learn::nets::MlpNet;
use greenwave_learn::{
    Adam, ObsNormalization, PolicyWeights, RewardScale, RunningObsStats, SharedWeights,
};
use greenwave_sim::Scenario;
use serde::{Deserialize, Serialize};

use super::policy::{lane_norm, PolicyKind, PolicyNet};
use super::selection::{EndTest, Validation};
use super::{IterationRow, Learner, Replay, TrainConfig, OBS_CLIP};

/// `run.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// The configuration.
    pub config: TrainConfig,
    /// Scenario name, or `sumo:NET` on SUMO.
    pub scenario_name: String,
    /// Observation layout.
    pub obs_layout: ObsLayout,
    /// Seconds per decision.
    pub decision_interval_s: u32,
    /// Git revision of the trainer.
    pub git_rev: String,
    /// The phase plan of every signal, in signal order, as the environment built it (from
    /// the scenario, or from the SUMO net). Export takes the manifest's plan from here;
    /// empty in runs written before this field existed (export then reads scenario.toml).
    #[serde(default)]
    pub plans: Vec<PhasePlan>,
    /// Every signal's id, in signal order (empty in older runs).
    #[serde(default)]
    pub signal_ids: Vec<String>,
    /// Every signal's lane–phase incidence `[phase][lane]`, in signal order (what export
    /// compiles a shared policy with; empty in older runs).
    #[serde(default)]
    pub incidences: Vec<Vec<Vec<bool>>>,
    /// The reward trained on, as the environment computed it (absent in older runs).
    /// Export writes it into the manifest, and on-device fine-tuning refuses a log of
    /// another.
    #[serde(default)]
    pub reward_kind: Option<greenwave_core::RewardKind>,
}

impl RunInfo {
    /// The policy architecture trained.
    pub fn policy(&self) -> PolicyKind {
        self.config.policy.unwrap_or(PolicyKind::Mlp)
    }
}

/// What [`write_run_info`] records about the environment trained on.
pub struct RunFacts<'a> {
    /// Scenario name, or `sumo:NET`.
    pub name: &'a str,
    /// Seconds per decision.
    pub decision_interval_s: u32,
    /// The scenario, on the embedded simulator (written as `scenario.toml`).
    pub scenario: Option<&'a Scenario>,
    /// Every signal's phase plan, in signal order.
    pub plans: Vec<PhasePlan>,
    /// Every signal's id, in signal order.
    pub signal_ids: Vec<String>,
    /// Every signal's lane–phase incidence, in signal order.
    pub incidences: Vec<Vec<Vec<bool>>>,
    /// The reward the environment computes.
    pub reward_kind: greenwave_core::RewardKind,
}

/// `policy.json`: the latest policy's normalisation and progress.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Iterations done.
    pub iteration: u64,
    /// Decisions done.
    pub env_steps: u64,
    /// Observation statistics.
    pub stats: Stats,
}

/// Serialisable observation statistics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    /// Mean.
    pub mean: Vec<f64>,
    /// Variance.
    pub var: Vec<f64>,
    /// Count.
    pub count: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CheckpointInfo {
    policy: PolicyInfo,
    slot_episodes: Vec<u64>,
    adam_t: u64,
    q_adam_t: Option<u64>,
    /// Absent in checkpoints from before reward scaling: starts afresh.
    #[serde(default)]
    reward_scale: RewardScale,
}

/// Writes `bytes` to `path` through a synced temporary file renamed over it: a crash or a
/// full disk leaves the old file whole.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    greenwave_learn::files::write_together(&[(path, bytes, 0o644)])
        .map_err(|(p, e)| anyhow::Error::new(e).context(format!("writing {}", p.display())))
}

fn save_tensors(path: &Path, tensors: &HashMap<String, Tensor>) -> Result<()> {
    let tmp = path.with_extension("tmp");
    candle_core::safetensors::save(tensors, &tmp)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn put_net(map: &mut HashMap<String, Tensor>, prefix: &str, net: &MlpNet) {
    for (i, v) in net.vars().iter().enumerate() {
        map.insert(format!("{prefix}.{i}"), v.as_tensor().clone());
    }
}

fn put_adam(map: &mut HashMap<String, Tensor>, prefix: &str, opt: &Adam) {
    for (i, (m, v)) in opt.m.iter().zip(&opt.v).enumerate() {
        map.insert(format!("{prefix}.m.{i}"), m.clone());
        map.insert(format!("{prefix}.v.{i}"), v.clone());
    }
}

fn take<'a>(map: &'a HashMap<String, Tensor>, key: &str, file: &Path) -> Result<&'a Tensor> {
    map.get(key)
        .with_context(|| format!("{}: tensor '{key}' is missing", file.display()))
}

fn load_net(map: &HashMap<String, Tensor>, prefix: &str, net: &MlpNet, file: &Path) -> Result<()> {
    for (i, v) in net.vars().iter().enumerate() {
        let t = take(map, &format!("{prefix}.{i}"), file)?;
        if t.dims() != v.dims() {
            bail!(
                "{}: '{prefix}.{i}' has shape {:?}, the network needs {:?}",
                file.display(),
                t.dims(),
                v.dims()
            );
        }
        v.set(&t.to_device(v.device())?)?;
    }
    Ok(())
}

fn load_adam(
    map: &HashMap<String, Tensor>,
    prefix: &str,
    opt: &mut Adam,
    t: u64,
    file: &Path,
) -> Result<()> {
    for i in 0..opt.m.len() {
        let dev = opt.m[i].device().clone();
        opt.m[i] = take(map, &format!("{prefix}.m.{i}"), file)?.to_device(&dev)?;
        opt.v[i] = take(map, &format!("{prefix}.v.{i}"), file)?.to_device(&dev)?;
    }
    opt.t = t;
    Ok(())
}

fn stats_of(s: &RunningObsStats) -> Stats {
    Stats {
        mean: s.mean.clone(),
        var: s.var.clone(),
        count: s.count,
    }
}

/// Writes `run.json`, and `scenario.toml` when the run is on a scenario (a stale one from an
/// earlier run in the same folder is removed otherwise).
pub fn write_run_info(
    out: &Path,
    cfg: &TrainConfig,
    facts: &RunFacts<'_>,
    layout: ObsLayout,
    git_rev: &str,
) -> Result<()> {
    let info = RunInfo {
        config: cfg.clone(),
        scenario_name: facts.name.to_string(),
        obs_layout: layout,
        decision_interval_s: facts.decision_interval_s,
        git_rev: git_rev.to_string(),
        plans: facts.plans.clone(),
        signal_ids: facts.signal_ids.clone(),
        incidences: facts.incidences.clone(),
        reward_kind: Some(facts.reward_kind),
    };
    write_atomic(
        &out.join("run.json"),
        serde_json::to_string_pretty(&info)?.as_bytes(),
    )?;
    let toml = out.join("scenario.toml");
    match facts.scenario {
        Some(sc) => write_atomic(&toml, sc.to_toml_string().as_bytes()),
        None => match std::fs::remove_file(&toml) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("removing stale {}", toml.display()))
            }
            _ => Ok(()),
        },
    }
}

/// The learner's actor and critic tensors and what `policy.json` says about them.
fn policy_tensors(l: &Learner) -> (HashMap<String, Tensor>, PolicyInfo) {
    let mut map = HashMap::new();
    let (actor, critic) = l.net.nets();
    put_net(&mut map, "actor", actor);
    put_net(&mut map, "critic", critic);
    let policy = PolicyInfo {
        iteration: l.iteration,
        env_steps: l.env_steps,
        stats: stats_of(&l.stats),
    };
    (map, policy)
}

/// `best.json`: the selected weights' progress and normalisation (as `policy.json`) and the
/// validation that selected them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SelectedInfo {
    /// As in `policy.json`.
    #[serde(flatten)]
    pub policy: PolicyInfo,
    /// The validation that selected them.
    pub validation: Validation,
    /// The end test's second look, where it kept these weights (read from
    /// `end_test.json`, not stored in `best.json`).
    #[serde(skip)]
    pub kept_on_fresh_seeds: Option<EndTest>,
}

/// The tensor in `best.safetensors` holding the iteration its weights are from, which
/// must equal `best.json`'s (the pair is two files: a crash or a reader between their
/// writes must not pair one iteration's weights with another's statistics).
const SELECTED_ITERATION: &str = "selected.iteration";

/// Saves the learner's current weights as the selected ones (`best.safetensors`,
/// `best.json`), validated by `validation`. `best.json` is removed first, so a crash
/// between the two writes leaves no selection (export then takes the last weights, and a
/// resumed run validates these weights again) rather than a mismatched pair.
pub fn save_selected(out: &Path, l: &Learner, validation: &Validation) -> Result<()> {
    let (mut map, policy) = policy_tensors(l);
    put_iteration(&mut map, SELECTED_ITERATION, policy.iteration)?;
    let info = SelectedInfo {
        policy,
        validation: validation.clone(),
        kept_on_fresh_seeds: None,
    };
    let json = out.join("best.json");
    if json.exists() {
        std::fs::remove_file(&json).with_context(|| format!("removing {}", json.display()))?;
    }
    save_tensors(&out.join("best.safetensors"), &map)?;
    write_atomic(&json, serde_json::to_string_pretty(&info)?.as_bytes())
}

/// The end test's second look (`selection::EndTest`), where a run made one.
pub const END_TEST_FILE: &str = "end_test.json";

/// Saves the end test's validations on fresh seeds (`end_test.json`).
pub fn save_end_test(out: &Path, test: &EndTest) -> Result<()> {
    write_atomic(
        &out.join(END_TEST_FILE),
        serde_json::to_string_pretty(test)?.as_bytes(),
    )
}

/// The decision-rule trial of a run's end (`selection::DecisionRuleTest`), where it made
/// one.
pub const DECISION_RULE_FILE: &str = "decision_rule.json";

/// Saves the decision-rule trial (`decision_rule.json`).
pub fn save_decision_rule(out: &Path, test: &super::selection::DecisionRuleTest) -> Result<()> {
    write_atomic(
        &out.join(DECISION_RULE_FILE),
        serde_json::to_string_pretty(test)?.as_bytes(),
    )
}

/// The decision-rule trial `decision_rule.json` holds, if the run made one. A file that
/// does not parse is an error: it decides what the exported policy runs.
pub fn read_decision_rule(out: &Path) -> Result<Option<super::selection::DecisionRuleTest>> {
    let path = out.join(DECISION_RULE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("reading {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The end test `end_test.json` holds, if any (`None` too for one that does not parse:
/// it is only a record, rewritten whenever an end test is made).
pub fn read_end_test(out: &Path) -> Option<EndTest> {
    let text = std::fs::read_to_string(out.join(END_TEST_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Checks that `best.safetensors` (`map`, read from `file`) holds the weights of
/// `iteration`, as `best.json` says.
fn check_selected_iteration(
    map: &HashMap<String, Tensor>,
    file: &Path,
    iteration: u64,
) -> Result<()> {
    if let Some(saved) = other_iteration(take(map, SELECTED_ITERATION, file)?, iteration)? {
        bail!(
            "{} holds the weights of iteration {saved:?}, best.json says {iteration}: the pair \
             is being rewritten (a run writing it?); export again, or take the last weights \
             with --last",
            file.display()
        );
    }
    Ok(())
}

/// The tensor in `policy.safetensors` and `checkpoint.safetensors` holding the iteration
/// their weights are from, which must equal their JSON's: a crash between the two writes
/// of a pair must not pair one iteration's weights (and Adam moments) with another's
/// statistics. Files from before it lack it and are read as they were.
const WEIGHTS_ITERATION: &str = "weights.iteration";

/// Puts `iteration` into `map` as the tensor `key`.
fn put_iteration(map: &mut HashMap<String, Tensor>, key: &str, iteration: u64) -> Result<()> {
    let iteration = i64::try_from(iteration).context("iteration count")?;
    map.insert(
        key.into(),
        Tensor::from_slice(&[iteration], 1, &Device::Cpu)?,
    );
    Ok(())
}

/// The iteration the tensor `saved` holds, where it is not `iteration`.
fn other_iteration(saved: &Tensor, iteration: u64) -> Result<Option<Vec<i64>>> {
    let saved: Vec<i64> = saved.to_vec1()?;
    let same = saved.first().and_then(|&i| u64::try_from(i).ok()) == Some(iteration);
    Ok((!same).then_some(saved))
}

fn check_weights_iteration(
    map: &HashMap<String, Tensor>,
    (file, json): (&Path, &str),
    iteration: u64,
) -> Result<()> {
    let Some(t) = map.get(WEIGHTS_ITERATION) else {
        return Ok(());
    };
    if let Some(saved) = other_iteration(t, iteration)? {
        bail!(
            "{} holds the weights of iteration {saved:?}, {json} says {iteration}: the pair was \
             not written whole (a crash between the two, or a run writing them now)",
            file.display()
        );
    }
    Ok(())
}

/// The selected weights' record in `out` (`best.json`), if the run has selected any.
pub fn read_selected(out: &Path) -> Result<Option<SelectedInfo>> {
    let path = out.join("best.json");
    if !path.exists() {
        return Ok(None);
    }
    let mut info: SelectedInfo = read_json(&path)?;
    info.kept_on_fresh_seeds = read_end_test(out)
        .filter(|t| t.earlier_kept && t.earlier.iteration == info.validation.iteration);
    Ok(Some(info))
}

/// Saves the policy, and (when `resumable`) the full checkpoint.
pub fn save(out: &Path, l: &Learner, resumable: bool) -> Result<()> {
    let (mut map, policy) = policy_tensors(l);
    put_iteration(&mut map, WEIGHTS_ITERATION, policy.iteration)?;
    save_tensors(&out.join("policy.safetensors"), &map)?;
    write_atomic(
        &out.join("policy.json"),
        serde_json::to_string_pretty(&policy)?.as_bytes(),
    )?;
    if !resumable {
        return Ok(());
    }
    put_adam(&mut map, "adam", &l.opt);
    if let Some((q, qopt)) = &l.q {
        put_net(&mut map, "q", &q.net);
        put_adam(&mut map, "qadam", qopt);
    }
    let dev = Device::Cpu;
    let r = &l.replay;
    let n = r.actions.len();
    if let (Some(d), Some(a)) = (r.obs.len().checked_div(n), r.masks.len().checked_div(n)) {
        map.insert(
            "replay.obs".into(),
            Tensor::from_slice(&r.obs, (n, d), &dev)?,
        );
        map.insert(
            "replay.next_obs".into(),
            Tensor::from_slice(&r.next_obs, (n, d), &dev)?,
        );
        map.insert(
            "replay.masks".into(),
            Tensor::from_slice(&r.masks, (n, a), &dev)?,
        );
        map.insert(
            "replay.next_masks".into(),
            Tensor::from_slice(&r.next_masks, (n, a), &dev)?,
        );
        map.insert(
            "replay.actions".into(),
            Tensor::from_slice(&r.actions, n, &dev)?,
        );
        map.insert(
            "replay.rewards".into(),
            Tensor::from_slice(&r.rewards, n, &dev)?,
        );
    }
    let info = CheckpointInfo {
        policy,
        slot_episodes: l.slot_episodes.clone(),
        adam_t: l.opt.t,
        q_adam_t: l.q.as_ref().map(|(_, o)| o.t),
        reward_scale: l.reward_scale.clone(),
    };
    save_tensors(&out.join("checkpoint.safetensors"), &map)?;
    write_atomic(
        &out.join("checkpoint.json"),
        serde_json::to_string_pretty(&info)?.as_bytes(),
    )
}

/// The run information (`run.json`) of the run folder `out`.
pub fn read_run_info(out: &Path) -> Result<RunInfo> {
    read_json(&out.join("run.json"))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The tensors of a weights file, each checked finite: a NaN or infinite weight (a diverged
/// or damaged run) is refused by name, so that nothing resumes from it or exports it.
fn load_tensors(path: &Path) -> Result<HashMap<String, Tensor>> {
    let map = candle_core::safetensors::load(path, &Device::Cpu)
        .with_context(|| format!("reading {}", path.display()))?;
    for (name, t) in &map {
        let values = t
            .flatten_all()
            .and_then(|t| t.to_dtype(candle_core::DType::F64))
            .and_then(|t| t.to_vec1::<f64>())
            .with_context(|| format!("reading {} of {}", name, path.display()))?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            bail!(
                "{}: tensor {name}, element {i}, is {} (the run diverged or the file is \
                 damaged; its weights cannot be used)",
                path.display(),
                values[i]
            );
        }
    }
    Ok(map)
}

/// Loads the latest checkpoint of `out` for `cfg`.
pub fn load(out: &Path, cfg: &TrainConfig, layout: ObsLayout) -> Result<Learner> {
    let info_path = out.join("checkpoint.json");
    if !info_path.exists() {
        bail!(
            "{} has no checkpoint to resume from (checkpoint.json is missing): a run keeps \
             one only where an iteration ends on every environment's episode end, and this \
             one stopped before its first (its weights are still there for `greenwave \
             export`; train again with more --steps to go further)",
            out.display()
        );
    }
    check_resumes(out, &read_run_info(out)?, cfg)?;
    let info: CheckpointInfo = read_json(&info_path)?;
    let file = out.join("checkpoint.safetensors");
    let map = load_tensors(&file)?;
    check_weights_iteration(&map, (&file, "checkpoint.json"), info.policy.iteration)?;
    let mut l = Learner::fresh(cfg, layout)?;
    let (actor, critic) = l.net.nets();
    load_net(&map, "actor", actor, &file)?;
    load_net(&map, "critic", critic, &file)?;
    load_adam(&map, "adam", &mut l.opt, info.adam_t, &file)?;
    if let Some((q, qopt)) = l.q.as_mut() {
        load_net(&map, "q", &q.net, &file)?;
        load_adam(&map, "qadam", qopt, info.q_adam_t.unwrap_or(0), &file)?;
    }
    if let Some(replay) = load_replay(&map, &file)? {
        l.replay = replay;
    }
    l.stats = RunningObsStats {
        mean: info.policy.stats.mean,
        var: info.policy.stats.var,
        count: info.policy.stats.count,
    };
    l.iteration = info.policy.iteration;
    l.env_steps = info.policy.env_steps;
    l.slot_episodes = info.slot_episodes;
    l.reward_scale = info.reward_scale;
    Ok(l)
}

/// Refuses a resume whose settings differ from those the run in `out` (its `run.json`,
/// `run`) started with, naming them.
fn check_resumes(out: &Path, run: &RunInfo, cfg: &TrainConfig) -> Result<()> {
    if run.policy() != cfg.policy.unwrap_or(PolicyKind::Mlp) {
        bail!(
            "{} was trained with --policy {}; resume with the same policy",
            out.display(),
            run.policy().name()
        );
    }
    if run.config.algo != cfg.algo
        || run.config.hidden != cfg.hidden
        || run.config.seed != cfg.seed
        || run.config.n_envs != cfg.n_envs
    {
        bail!(
            "{} was trained with algo {:?}, hidden {:?}, seed {}, {} envs; resume with the same settings",
            out.display(),
            run.config.algo,
            run.config.hidden,
            run.config.seed,
            run.config.n_envs
        );
    }
    if run.config.validation != cfg.validation {
        bail!(
            "{} was trained with --validation-seeds {} --validation-first-seed {}; resume with \
             the same (its selected weights were validated on those seeds)",
            out.display(),
            run.config.validation.seeds,
            run.config.validation.first_seed
        );
    }
    if !run.config.sim.resumes_as(&cfg.sim) {
        let describe = |b: &crate::backend::BackendArgs| {
            b.sumo_label()
                .unwrap_or_else(|| format!("the {} simulator", b.backend.name()))
        };
        bail!(
            "{} was trained on {}; resume with the same --backend, --net, --routes, --begin, \
             timing options and --reward (asked: {})",
            out.display(),
            describe(&run.config.sim),
            describe(&cfg.sim)
        );
    }
    check_same_learner(out, &run.config, cfg)?;
    let (was, now) = (&run.config, cfg);
    let episodes = [
        (
            "--scenario",
            // On SUMO the net is the scenario, and `resumes_as` compared it above.
            was.sim.backend == crate::backend::Backend::Embedded && was.scenario != now.scenario,
            was.scenario.clone(),
        ),
        (
            "--demand",
            was.demand != now.demand,
            format!("{:?}", was.demand),
        ),
        (
            "--episode-seconds",
            was.episode_s != now.episode_s,
            format!("{:?}", was.episode_s),
        ),
        (
            "--rollout-steps",
            was.rollout_steps != now.rollout_steps,
            was.rollout_steps.to_string(),
        ),
        (
            "--discount-half-life-s",
            was.discount != now.discount,
            format!("{:?}", was.discount),
        ),
    ];
    if let Some((flag, _, value)) = episodes.iter().find(|(_, differs, _)| *differs) {
        bail!(
            "{} was trained with {flag} {value}; resume with the same (its episodes, \
             checkpoints and schedules were laid out for it)",
            out.display()
        );
    }
    if cfg.validation.seeds > 0 && run.config.total_steps != cfg.total_steps {
        bail!(
            "{} was trained with --steps {}; with checkpoint selection a resume needs the same \
             (the run's length sets when it validates and which validation is its end)",
            out.display(),
            run.config.total_steps
        );
    }
    Ok(())
}

/// Refuses a resume whose learner settings (PPO's, off-policy PPO's, the replay's) differ
/// from the run's, naming each that differs with the run's value: the optimiser state and
/// the schedules in the checkpoint were made under them. Threads, `--pipelined` and the
/// device may change, but the rollouts from then on are not the uninterrupted run's:
/// each worker thread draws its own random stream over its share of the environments,
/// and `--pipelined` draws another way (the device can move the last bits of a float).
fn check_same_learner(out: &Path, was: &TrainConfig, now: &TrainConfig) -> Result<()> {
    let settings = |c: &TrainConfig| {
        serde_json::json!({
            "ppo": c.ppo,
            "offpolicy": c.offpolicy,
            "replay_capacity": c.replay_capacity,
        })
    };
    let (was_s, now_s) = (settings(was), settings(now));
    let mut differ = Vec::new();
    for (group, was_g) in was_s.as_object().into_iter().flatten() {
        let now_g = &now_s[group];
        match (was_g.as_object(), now_g.as_object()) {
            (Some(w), Some(n)) => differ.extend(
                w.iter()
                    .filter(|(k, v)| n.get(*k) != Some(v))
                    .map(|(k, v)| {
                        format!(
                            "{group}.{k} = {v} (asked: {})",
                            n.get(k).unwrap_or(&serde_json::Value::Null)
                        )
                    }),
            ),
            _ if was_g != now_g => differ.push(format!("{group} = {was_g} (asked: {now_g})")),
            _ => {}
        }
    }
    if !differ.is_empty() {
        bail!(
            "{} was trained with other learner settings; resume with the run's: {}",
            out.display(),
            differ.join(", ")
        );
    }
    Ok(())
}

/// The off-policy replay a checkpoint holds, if it holds one.
fn load_replay(map: &HashMap<String, Tensor>, file: &Path) -> Result<Option<Replay>> {
    let Some(obs) = map.get("replay.obs") else {
        return Ok(None);
    };
    let flat =
        |k: &str| -> Result<Tensor> { take(map, k, file)?.flatten_all().map_err(Into::into) };
    Ok(Some(Replay {
        obs: obs.flatten_all()?.to_vec1()?,
        next_obs: flat("replay.next_obs")?.to_vec1()?,
        masks: flat("replay.masks")?.to_vec1()?,
        next_masks: flat("replay.next_masks")?.to_vec1()?,
        actions: flat("replay.actions")?.to_vec1()?,
        rewards: flat("replay.rewards")?.to_vec1()?,
    }))
}

/// A policy of a run folder: a per-signal MLP, or the shared network.
pub enum RunPolicy {
    /// One MLP for every signal.
    Mlp(PolicyWeights),
    /// The shared lane–phase network (compiled per signal on export).
    Shared(SharedWeights),
}

/// Which weights of a run folder to take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PolicyChoice {
    /// The validation-selected ones (`best.*`), or the last where the run selected none
    /// (validation off, or a run from before selection).
    #[default]
    Selected,
    /// The last ones (`policy.*`).
    Last,
}

impl PolicyChoice {
    /// The selected weights' record this choice takes in `run`, or `None` for the last.
    pub fn resolve(self, run: &Path) -> Result<Option<SelectedInfo>> {
        match self {
            PolicyChoice::Selected => read_selected(run),
            PolicyChoice::Last => Ok(None),
        }
    }
}

/// The `choice` policy of a run folder, as plain weights, with the run's info.
pub fn load_run_policy(
    run: &Path,
    choice: PolicyChoice,
) -> Result<(RunPolicy, RunInfo, PolicyInfo)> {
    load_run_policy_at(run, choice.resolve(run)?.as_ref())
}

/// The selected weights `selected` of a run folder (as [`PolicyChoice::resolve`] read
/// them), or its last ones for `None`, as plain weights, with the run's info.
pub fn load_run_policy_at(
    run: &Path,
    selected: Option<&SelectedInfo>,
) -> Result<(RunPolicy, RunInfo, PolicyInfo)> {
    let info: RunInfo = read_json(&run.join("run.json"))?;
    let (pinfo, file) = match selected {
        Some(s) => (s.policy.clone(), run.join("best.safetensors")),
        None => (
            read_json(&run.join("policy.json"))?,
            run.join("policy.safetensors"),
        ),
    };
    let map = load_tensors(&file)?;
    match selected {
        Some(_) => check_selected_iteration(&map, &file, pinfo.iteration)?,
        None => check_weights_iteration(&map, (&file, "policy.json"), pinfo.iteration)?,
    }
    let stats = RunningObsStats {
        mean: pinfo.stats.mean.clone(),
        var: pinfo.stats.var.clone(),
        count: pinfo.stats.count,
    };
    let net = PolicyNet::new(
        info.policy(),
        info.obs_layout,
        &info.config.hidden,
        0,
        &Device::Cpu,
    )?;
    let (actor, critic) = net.nets();
    load_net(&map, "actor", actor, &file)?;
    load_net(&map, "critic", critic, &file)?;
    let policy = match &net {
        PolicyNet::Mlp(n) => {
            let norm: ObsNormalization = stats.normalization(OBS_CLIP);
            RunPolicy::Mlp(n.to_weights(norm)?)
        }
        PolicyNet::Shared(n) => RunPolicy::Shared(n.to_weights(lane_norm(&stats, OBS_CLIP))?),
    };
    Ok((policy, info, pinfo))
}

/// The `choice` per-signal MLP policy of a run folder, with the run's info (a run with a
/// shared policy: see [`load_run_policy`]).
pub fn load_policy(
    run: &Path,
    choice: PolicyChoice,
) -> Result<(PolicyWeights, RunInfo, PolicyInfo)> {
    load_policy_at(run, choice.resolve(run)?.as_ref())
}

/// [`load_policy`] of the selected weights `selected` (`None`: the last ones).
pub fn load_policy_at(
    run: &Path,
    selected: Option<&SelectedInfo>,
) -> Result<(PolicyWeights, RunInfo, PolicyInfo)> {
    match load_run_policy_at(run, selected)? {
        (RunPolicy::Mlp(w), info, pinfo) => Ok((w, info, pinfo)),
        (RunPolicy::Shared(_), _, _) => bail!(
            "{} holds a shared (--policy shared) policy: export it per signal",
            run.display()
        ),
    }
}

const CSV_HEADER: &str = "iteration,env_steps,wall_s,steps_per_s,episodes,episode_delay_s,episode_return,learning_rate,policy_loss,value_loss,entropy,approx_kl,clip_frac,rollout_s,update_s";

/// Opens `metrics.csv`: fresh, or (on resume) keeping only rows up to `iteration`.
pub fn open_csv(path: &Path, resume: bool, iteration: u64) -> Result<BufWriter<File>> {
    reopen_csv(path, CSV_HEADER, resume, iteration).map(|(w, _)| w)
}

/// Opens a per-iteration CSV log (first column the iteration) with header `header`: fresh,
/// or (on resume) keeping only the rows up to `iteration`, the checkpoint resumed from;
/// also returns the iteration of the last row kept.
pub fn reopen_csv(
    path: &Path,
    header: &str,
    resume: bool,
    iteration: u64,
) -> Result<(BufWriter<File>, Option<u64>)> {
    let mut kept = Vec::new();
    let mut last = None;
    if resume && path.exists() {
        for line in BufReader::new(File::open(path)?).lines().skip(1) {
            let line = line?;
            let it: u64 = line
                .split(',')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(u64::MAX);
            if it <= iteration {
                kept.push(line);
                last = Some(it);
            }
        }
    }
    let mut w =
        BufWriter::new(File::create(path).with_context(|| format!("creating {}", path.display()))?);
    writeln!(w, "{header}")?;
    for l in kept {
        writeln!(w, "{l}")?;
    }
    w.flush()?;
    Ok((w, last))
}

/// Appends one row (and flushes, so the file is useful while training runs).
pub fn write_csv_row(w: &mut BufWriter<File>, r: &IterationRow) -> Result<()> {
    writeln!(
        w,
        "{},{},{:.3},{:.1},{},{:.4},{:.4},{:.6e},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6}",
        r.iteration,
        r.env_steps,
        r.wall_s,
        r.steps_per_s,
        r.episodes,
        r.episode_delay_s,
        r.episode_return,
        r.learning_rate,
        r.policy_loss,
        r.value_loss,
        r.entropy,
        r.approx_kl,
        r.clip_frac,
        r.rollout_s,
        r.update_s
    )?;
    w.flush()?;
    Ok(())
}

/// Reads `metrics.csv` back (for plots).
pub fn read_csv(path: &Path) -> Result<Vec<Vec<f64>>> {
    let file = File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = BufReader::new(file).lines();
    let header = lines
        .next()
        .transpose()
        .with_context(|| format!("reading {}", path.display()))?
        .unwrap_or_default();
    if header != CSV_HEADER {
        bail!(
            "{}: line 1 is not greenwave's metrics header (expected `{CSV_HEADER}`)",
            path.display()
        );
    }
    let columns = CSV_HEADER.split(',').count();
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let at = || format!("{}: line {}", path.display(), i + 2);
        let line = line.with_context(at)?;
        let row: Vec<f64> = line
            .split(',')
            .map(|s| s.parse::<f64>())
            .collect::<Result<_, _>>()
            .with_context(at)?;
        if row.len() != columns {
            bail!(
                "{}: {} values, expected {columns} (a row cut off mid-write?)",
                at(),
                row.len()
            );
        }
        rows.push(row);
    }
    Ok(rows)
}
