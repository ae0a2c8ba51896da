//! The fine-tune gate's battery: candidate updates of known true effect, judged by the gate
//! and measured by simulation. Ignored by default (over an hour on 2 shared cores); run with
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
use std::time::Instant;

use greenwave_e2e::scratch;
use greenwave_finetune::sim;
use greenwave_learn::onnx;
use greenwave_sim::Scenario;
use greenwave_tools::train::{train, Algo, TrainConfig};

#[path = "gate_common.rs"]
mod gate_common;
use gate_common::{finetuned, flipped_large_step, judge_weights, perturbed, report, Setting};
use greenwave_finetune::FinetuneConfig;

const EVAL_SEEDS: [u64; 5] = [2000, 2001, 2002, 2003, 2004];

/// `model` running `scenario`, judged by its greedy mean delay on the held-out seeds.
fn setting(scenario: &Scenario, model: Vec<u8>) -> Setting {
    let scenario = scenario.clone();
    Setting::new(
        model,
        Box::new(move |m| {
            let r = sim::evaluate(&scenario, m, &EVAL_SEEDS, 3600).unwrap();
            r.iter().map(|x| x.mean_delay_s).sum::<f64>() / r.len() as f64
        }),
    )
}

/// Logs `sessions` controller sessions of `seconds` with `epsilon`, seeds from `seed`.
fn log(s: &Scenario, model: &[u8], dir: &Path, sessions: u64, seconds: u32, eps: f32, seed: u64) {
    for k in 0..sessions {
        sim::run_controller(s, model, 1, seed + k, seconds, eps, Some(dir)).unwrap();
    }
}

/// A PPO policy trained for 200k decisions on `scenario` (name or file) under `demand`,
/// exported to ONNX.
fn trained_policy(dir: &Path, scenario: &str, demand: &str, name: &str) -> Vec<u8> {
    let mut tc = TrainConfig::new(scenario, Algo::Ppo, 200_000, 1);
    tc.demand = Some(demand.into());
    tc.episode_s = Some(3600);
    tc.command = "gate battery".into();
    let run = dir.join(format!("train-{name}"));
    train(&tc, &run, false, false).unwrap();
    let onnx_path = dir.join(format!("{name}.onnx"));
    greenwave_tools::export_cmd::export(&run, &onnx_path).unwrap();
    std::fs::read(onnx_path).unwrap()
}

#[test]
#[ignore = "the gate battery: over an hour on 2 cores; run with --ignored"]
fn gate_battery() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let t0 = Instant::now();
    let stage = |what: &str| eprintln!("[{:>6.0} s] {what}", t0.elapsed().as_secs_f64());
    let dir = scratch("gate-battery");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let a_model = std::fs::read(repo.join("models/single-4way.onnx")).unwrap();
    let a_scen = greenwave_sim::load("single-4way").unwrap();
    let s_path = repo.join("crates/runtime/scenarios/finetune-shift.toml");
    let s_path = s_path.to_str().unwrap();
    let s_field = greenwave_sim::load(s_path).unwrap();
    let s_train = s_field.with_demand("train").unwrap();
    // The running policy of S, and two policies trained for other demands of the same
    // junction and plan (candidates for A).
    let s_model = trained_policy(&dir, s_path, "train", "shift");
    let field_model = trained_policy(&dir, s_path, "field", "field");
    let shifted_model = trained_policy(&dir, "single-4way", "shifted", "shifted");
    stage("three policies trained");
    let a = setting(&a_scen, a_model.clone());
    let s = setting(&s_field, s_model.clone());
    eprintln!(
        "base mean delay: A {:.2} s, S {:.2} s",
        a.base_delay, s.base_delay
    );
    // Logs.
    let la = dir.join("log-a");
    log(&a_scen, &a_model, &la, 8, 3600, 0.1, 100);
    let la_greedy = dir.join("log-a-greedy");
    log(&a_scen, &a_model, &la_greedy, 8, 3600, 0.0, 200);
    let la_tiny: Vec<PathBuf> = (0..3u64)
        .map(|k| {
            let d = dir.join(format!("log-a-tiny-{k}"));
            log(&a_scen, &a_model, &d, 1, 2400, 0.1, 300 + 10 * k); // 480 records
            d
        })
        .collect();
    let ls = dir.join("log-s");
    log(&s_field, &s_model, &ls, 1, 86_400, 0.1, 7);
    let ls2 = dir.join("log-s-2days");
    log(&s_field, &s_model, &ls2, 2, 86_400, 0.1, 17);
    let ls_greedy = dir.join("log-s-greedy");
    log(&s_field, &s_model, &ls_greedy, 1, 86_400, 0.0, 37);
    let ls_tiny = dir.join("log-s-tiny");
    log(&s_field, &s_model, &ls_tiny, 1, 2400, 0.1, 47);
    let ls_stale = dir.join("log-s-stale");
    log(&s_train, &s_model, &ls_stale, 1, 86_400, 0.1, 27);
    let ls6 = dir.join("log-s-6days");
    log(&s_field, &s_model, &ls6, 6, 86_400, 0.1, 60);
    let ls8 = dir.join("log-s-8days");
    log(&s_field, &s_model, &ls8, 8, 86_400, 0.1, 80);
    let ls14 = dir.join("log-s-14days");
    log(&s_field, &s_model, &ls14, 14, 86_400, 0.1, 100);
    let ls7_e2 = dir.join("log-s-7days-eps0.2");
    log(&s_field, &s_model, &ls7_e2, 7, 86_400, 0.2, 120);
    stage("logs written");

    let (wa, _) = onnx::import(&a_model).unwrap();
    let (ws, _) = onnx::import(&s_model).unwrap();
    let (w_field, _) = onnx::import(&field_model).unwrap();
    let (w_shifted, _) = onnx::import(&shifted_model).unwrap();
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
    for seed in 0..3 {
        rows.push(finetuned(
            &a,
            &la,
            &dir,
            &format!("A: reward sign flipped, large step, seed {seed}"),
            |c| flipped_large_step(c, seed),
        ));
    }
    stage("A fine-tunes judged");
    for (k, sigma) in [0.02f32, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0].iter().enumerate() {
        for rep in 0..2u64 {
            let cand = perturbed(&wa, *sigma, 10 * k as u64 + rep);
            let name = format!("A: weights + N(0, ({sigma}·rms)²), #{rep}");
            rows.push(judge_weights(&a, &la, &dir, &name, &cand));
        }
    }
    for (name, w) in [
        ("A: policy trained for S's train demand", &ws),
        ("A: policy trained for S's field demand", &w_field),
        ("A: policy trained for single-4way shifted", &w_shifted),
    ] {
        rows.push(judge_weights(&a, &la, &dir, name, w));
    }
    rows.push(judge_weights(
        &s,
        &ls,
        &dir,
        "S: policy trained for A's demand",
        &wa,
    ));
    stage("perturbed and other-demand policies judged");
    for (k, d) in la_tiny.iter().enumerate() {
        rows.push(finetuned(
            &a,
            d,
            &dir,
            &format!("A: tiny log (480 records) #{k}"),
            |c| c.min_records = 100,
        ));
    }
    rows.push(finetuned(
        &s,
        &ls_tiny,
        &dir,
        "S: tiny log (480 records)",
        |c| c.min_records = 100,
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
        &ls_greedy,
        &dir,
        "S: log without exploration (1 day)",
        |_| {},
    ));
    for seed in 0..3 {
        rows.push(finetuned(
            &s,
            &ls_stale,
            &dir,
            &format!("S: stale log (before the demand change), seed {seed}"),
            |c| c.seed = seed,
        ));
    }
    let flip = |c: &mut FinetuneConfig| c.flip_reward_sign = true;
    let flip_large = |c: &mut FinetuneConfig| {
        c.flip_reward_sign = true;
        c.update.learning_rate = 3e-3;
        c.update.max_kl = 0.5;
        c.gate.max_kl = 1.0;
    };
    rows.push(finetuned(
        &s,
        &ls,
        &dir,
        "S: reward sign flipped, 1 day",
        flip,
    ));
    for seed in 0..2 {
        rows.push(finetuned(
            &s,
            &ls,
            &dir,
            &format!("S: reward sign flipped, 1 day, large step, seed {seed}"),
            |c| {
                flip_large(c);
                c.seed = seed;
            },
        ));
    }
    // The harmful updates where exploration covers the most: the longest logs.
    rows.push(finetuned(
        &s,
        &ls14,
        &dir,
        "S: reward sign flipped, 14 days",
        flip,
    ));
    rows.push(finetuned(
        &s,
        &ls14,
        &dir,
        "S: reward sign flipped, 14 days, large step",
        flip_large,
    ));
    rows.push(finetuned(
        &s,
        &ls7_e2,
        &dir,
        "S: reward sign flipped, 7 days at ε = 0.2",
        flip,
    ));
    stage("tiny, greedy, stale and flipped logs judged");
    let shifts: [(&Path, &str, u64); 6] = [
        (&ls, "1 day", 3),
        (&ls2, "2 days", 2),
        (&ls6, "6 days", 2),
        (&ls8, "8 days", 3),
        (&ls14, "14 days", 2),
        (&ls7_e2, "7 days at ε = 0.2", 2),
    ];
    for (log_dir, what, seeds) in shifts {
        for seed in 0..seeds {
            rows.push(finetuned(
                &s,
                log_dir,
                &dir,
                &format!("S: demand shift, {what}, seed {seed}"),
                |c| c.seed = seed,
            ));
        }
        stage(&format!("demand shift, {what}, judged"));
    }
    let header = format!(
        "Running policies' mean delay: A {:.2} s, S {:.2} s (5 held-out seeds, one hour each).",
        a.base_delay, s.base_delay
    );
    report(&rows, &header, 20);
}
