//! The fine-tune gate's battery: candidate updates of known true effect, judged by the gate
//! and measured by simulation. Ignored by default (about ten minutes on 2 cores); run with
//!
//! ```text
//! cargo test -p greenwave-e2e --release --test gate_battery -- --ignored --nocapture
//! ```
//!
//! Two junction settings share the single-4way junction and plan:
//!
//! - **A**: `single-4way` (morning peak) run by the project's `models/single-4way.onnx`, a
//!   policy already good for it; logs of 8 simulated hours (8 sessions of an hour).
//! - **S**: `finetune-shift` (steady demand; the heavy direction flipped between `train`
//!   and `field`), run by a policy trained here for `train` and deployed under `field`.
//!
//! Every candidate is judged by the gate with the default settings (each with a fresh
//! attempts ledger: the battery measures the test itself, not the retry limit) and
//! evaluated greedily against the running policy on 5 held-out seeds (an hour each, in the
//! setting where it would run). A **false accept** is an accepted candidate whose mean delay
//! is not lower than the running policy's; a **true accept** an accepted candidate whose
//! mean delay is lower by more than 1 %.

use std::path::{Path, PathBuf};

use greenwave_e2e::scratch;
use greenwave_learn::{onnx, MlpNet, PolicyWeights};
use greenwave_runtime::finetune::{self, sim, FinetuneConfig, GateReport};
use greenwave_sim::Scenario;
use greenwave_tools::train::{train, Algo, TrainConfig};
use rand::{Rng, SeedableRng};

const EVAL_SEEDS: [u64; 5] = [2000, 2001, 2002, 2003, 2004];

struct Setting {
    scenario: Scenario,
    model: Vec<u8>,
    base_delay: f64,
}

fn mean_delay(scenario: &Scenario, model: &[u8]) -> f64 {
    let m = sim::evaluate(scenario, model, &EVAL_SEEDS, 3600).unwrap();
    m.iter().map(|x| x.mean_delay_s).sum::<f64>() / m.len() as f64
}

/// Logs `sessions` controller sessions of `seconds` with `epsilon`, seeds from `seed`.
fn log(s: &Scenario, model: &[u8], dir: &Path, sessions: u64, seconds: u32, eps: f32, seed: u64) {
    for k in 0..sessions {
        sim::run_controller(s, model, 1, seed + k, seconds, eps, Some(dir)).unwrap();
    }
}

fn cfg(dir: &Path, name: &str) -> FinetuneConfig {
    FinetuneConfig {
        attempts_file: Some(dir.join(format!("attempts-{name}.json"))),
        ..FinetuneConfig::default()
    }
}

/// `candidate`'s actor rewritten to read the running policy's normalised observations
/// (the normalisation folded into its first layer; exact where no feature is clipped).
fn in_running_norm(candidate: &PolicyWeights, running: &PolicyWeights) -> MlpNet {
    let mut layers = candidate.actor.clone();
    let (c, o) = (&candidate.norm, &running.norm);
    let l = &mut layers[0];
    for r in 0..l.outputs {
        for j in 0..l.inputs {
            let w = l.weights[r * l.inputs + j];
            l.bias[r] += w * (o.mean[j] - c.mean[j]) * c.inv_std[j];
            l.weights[r * l.inputs + j] = w * c.inv_std[j] / o.inv_std[j];
        }
    }
    MlpNet::from_dense(&layers, &candidate_device()).unwrap()
}

fn candidate_device() -> candle_core::Device {
    candle_core::Device::Cpu
}

struct Row {
    name: String,
    accepted: bool,
    reason: String,
    effect_pct: f64,
}

fn judge_weights(
    setting: &Setting,
    log_dir: &Path,
    dir: &Path,
    name: &str,
    cand: &PolicyWeights,
) -> Row {
    let c = cfg(dir, name);
    let p = finetune::prepare(&setting.model, log_dir, &c, &mut |_| {}).unwrap();
    let actor = in_running_norm(cand, &p.weights);
    let g = finetune::judge_candidate(&p, &actor, &c).unwrap();
    row(setting, name, &g, cand, &p.parent)
}

fn row(
    setting: &Setting,
    name: &str,
    g: &GateReport,
    cand: &PolicyWeights,
    parent: &greenwave_learn::Manifest,
) -> Row {
    let bytes = onnx::reexport(cand, parent);
    let d = mean_delay(&setting.scenario, &bytes);
    let r = Row {
        name: name.into(),
        accepted: g.accepted,
        reason: g.reason.clone(),
        effect_pct: 100.0 * (d / setting.base_delay - 1.0),
    };
    eprintln!(
        "{:<40} {:>8} {:+7.2}%  {}",
        r.name,
        if r.accepted { "ACCEPT" } else { "refuse" },
        r.effect_pct,
        r.reason
    );
    r
}

fn finetuned(
    setting: &Setting,
    log_dir: &Path,
    dir: &Path,
    name: &str,
    tweak: impl FnOnce(&mut FinetuneConfig),
) -> Row {
    let mut c = cfg(dir, name);
    tweak(&mut c);
    match finetune::finetune(&setting.model, log_dir, &c, &mut |_| {}) {
        Ok(o) => row(setting, name, &o.report.gate, &o.weights, &o.parent),
        Err(e) => Row {
            name: name.into(),
            accepted: false,
            reason: format!("error: {e}"),
            effect_pct: f64::NAN,
        },
    }
}

fn perturbed(w: &PolicyWeights, sigma: f32, seed: u64) -> PolicyWeights {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = w.clone();
    for l in &mut out.actor {
        let rms = (l.weights.iter().map(|x| x * x).sum::<f32>() / l.weights.len() as f32).sqrt();
        for x in l.weights.iter_mut() {
            // Box–Muller from two uniforms.
            let (u1, u2): (f32, f32) = (rng.random(), rng.random());
            let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            *x += sigma * rms * z;
        }
    }
    out
}

fn shift_policy(dir: &Path, scenario_path: &str) -> Vec<u8> {
    let mut tc = TrainConfig::new(scenario_path, Algo::Ppo, 200_000, 1);
    tc.demand = Some("train".into());
    tc.episode_s = Some(3600);
    tc.command = "gate battery".into();
    let run = dir.join("train");
    train(&tc, &run, false, false).unwrap();
    let onnx_path = dir.join("shift.onnx");
    greenwave_tools::export_cmd::export(&run, &onnx_path).unwrap();
    std::fs::read(onnx_path).unwrap()
}

#[test]
#[ignore = "the gate battery: about ten minutes on 2 cores; run with --ignored"]
fn gate_battery() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = scratch("gate-battery");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let a_model = std::fs::read(repo.join("models/single-4way.onnx")).unwrap();
    let a_scen = greenwave_sim::load("single-4way").unwrap();
    let s_path = repo.join("crates/runtime/scenarios/finetune-shift.toml");
    let s_path = s_path.to_str().unwrap();
    let s_field = greenwave_sim::load(s_path).unwrap();
    let s_train = s_field.with_demand("train").unwrap();
    let s_model = shift_policy(&dir, s_path);
    let a = Setting {
        base_delay: mean_delay(&a_scen, &a_model),
        scenario: a_scen.clone(),
        model: a_model.clone(),
    };
    let s = Setting {
        base_delay: mean_delay(&s_field, &s_model),
        scenario: s_field.clone(),
        model: s_model.clone(),
    };
    eprintln!(
        "base mean delay: A {:.2} s, S {:.2} s",
        a.base_delay, s.base_delay
    );
    // Logs.
    let la = dir.join("log-a");
    log(&a_scen, &a_model, &la, 8, 3600, 0.1, 100);
    let la_greedy = dir.join("log-a-greedy");
    log(&a_scen, &a_model, &la_greedy, 8, 3600, 0.0, 200);
    let la_tiny = dir.join("log-a-tiny");
    log(&a_scen, &a_model, &la_tiny, 1, 2400, 0.1, 300); // 480 records
    let ls = dir.join("log-s");
    log(&s_field, &s_model, &ls, 1, 86_400, 0.1, 7);
    let ls2 = dir.join("log-s-2days");
    log(&s_field, &s_model, &ls2, 2, 86_400, 0.1, 17);
    let ls_stale = dir.join("log-s-stale");
    log(&s_train, &s_model, &ls_stale, 1, 86_400, 0.1, 27);

    let (wa, _) = onnx::import(&a_model).unwrap();
    let (ws, _) = onnx::import(&s_model).unwrap();
    let mut rows = Vec::new();
    for seed in 0..3 {
        rows.push(finetuned(
            &a,
            &la,
            &dir,
            &format!("A: fine-tune, seed {seed}"),
            |c| c.seed = seed,
        ));
    }
    rows.push(finetuned(&a, &la, &dir, "A: reward sign flipped", |c| {
        c.flip_reward_sign = true;
    }));
    rows.push(finetuned(
        &a,
        &la,
        &dir,
        "A: reward sign flipped, large step",
        |c| {
            c.flip_reward_sign = true;
            c.update.learning_rate = 3e-3;
            c.update.max_kl = 0.5;
            c.gate.max_kl = 1.0;
        },
    ));
    for (k, sigma) in [0.02f32, 0.05, 0.1, 0.2, 0.5].iter().enumerate() {
        for rep in 0..2u64 {
            let cand = perturbed(&wa, *sigma, 10 * k as u64 + rep);
            let name = format!("A: weights + N(0, ({sigma}·rms)²), #{rep}");
            rows.push(judge_weights(&a, &la, &dir, &name, &cand));
        }
    }
    rows.push(judge_weights(
        &a,
        &la,
        &dir,
        "A: policy trained for S's demand",
        &ws,
    ));
    rows.push(judge_weights(
        &s,
        &ls,
        &dir,
        "S: policy trained for A's demand",
        &wa,
    ));
    rows.push(finetuned(
        &a,
        &la_tiny,
        &dir,
        "A: tiny log (480 records)",
        |c| {
            c.min_records = 100;
        },
    ));
    rows.push(finetuned(
        &a,
        &la_greedy,
        &dir,
        "A: log without exploration",
        |_| {},
    ));
    rows.push(finetuned(
        &s,
        &ls_stale,
        &dir,
        "S: stale log (before the demand change)",
        |_| {},
    ));
    for seed in 0..3 {
        rows.push(finetuned(
            &s,
            &ls,
            &dir,
            &format!("S: demand shift, 1 day, seed {seed}"),
            |c| c.seed = seed,
        ));
    }
    for seed in 0..2 {
        rows.push(finetuned(
            &s,
            &ls2,
            &dir,
            &format!("S: demand shift, 2 days, seed {seed}"),
            |c| c.seed = seed,
        ));
    }
    report(&rows, &a, &s);
}

fn report(rows: &[Row], a: &Setting, s: &Setting) {
    let mut md = format!(
        "Running policies' mean delay: A {:.2} s, S {:.2} s (5 held-out seeds, one hour each).\n\n\
         | candidate | gate | true effect on mean delay | gate's reason |\n|---|---|---:|---|\n",
        a.base_delay, s.base_delay
    );
    for r in rows {
        let reason = r.reason.split(':').next().unwrap_or("");
        md.push_str(&format!(
            "| {} | {} | {:+.2} % | {} |\n",
            r.name,
            if r.accepted {
                "**accepted**"
            } else {
                "refused"
            },
            r.effect_pct,
            reason
        ));
    }
    let worse = |r: &&Row| r.effect_pct.is_nan() || r.effect_pct >= 0.0;
    let better = |r: &&Row| r.effect_pct < -1.0;
    let n_bad = rows.iter().filter(worse).count();
    let false_acc = rows.iter().filter(worse).filter(|r| r.accepted).count();
    let n_good = rows.iter().filter(better).count();
    let true_acc = rows.iter().filter(better).filter(|r| r.accepted).count();
    md.push_str(&format!(
        "\nFalse accepts: {false_acc} of {n_bad} candidates not better than the running policy. \
         True accepts: {true_acc} of {n_good} candidates better by more than 1 %.\n"
    ));
    println!("\n{md}");
    for r in rows {
        eprintln!("{}: {}", r.name, r.reason);
    }
    assert_eq!(
        false_acc, 0,
        "the gate accepted a candidate that is not better"
    );
}
