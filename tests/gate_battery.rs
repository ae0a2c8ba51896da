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
use greenwave_learn::{onnx, PolicyWeights};
use greenwave_sim::Scenario;
use greenwave_tools::train::{train, Algo, TrainConfig};

#[path = "gate_common.rs"]
mod gate_common;
use gate_common::{finetuned, flipped_large_step, judge_weights, perturbed, report, Row, Setting};
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
    let logs = Logs::write(&dir, (&a_scen, &a_model), (&s_field, &s_model));
    stage("logs written");

    let b = Battery {
        a: &a,
        s: &s,
        logs: &logs,
        dir: &dir,
    };
    let mut rows = b.a_fine_tunes();
    stage("A fine-tunes judged");
    let weights = [&a_model, &s_model, &field_model, &shifted_model].map(|m| {
        let (w, _) = onnx::import(m).unwrap();
        w
    });
    rows.extend(b.other_weights(&weights));
    stage("perturbed and other-demand policies judged");
    rows.extend(b.small_greedy_stale_and_flipped());
    stage("tiny, greedy, stale and flipped logs judged");
    rows.extend(b.demand_shifts(&stage));
    let header = format!(
        "Running policies' mean delay: A {:.2} s, S {:.2} s (5 held-out seeds, one hour each).",
        a.base_delay, s.base_delay
    );
    report(&rows, &header, 20);
}

/// The battery's logs: of A (the project's policy, 8 sessions of an hour, with and without
/// exploration, and three tiny ones), and of S (its policy under the field demand for 1 to
/// 14 days, greedy, tiny, at ε = 0.2, and under the demand it was trained for).
struct Logs {
    a: PathBuf,
    a_greedy: PathBuf,
    a_tiny: Vec<PathBuf>,
    s: PathBuf,
    s_2days: PathBuf,
    s_greedy: PathBuf,
    s_tiny: PathBuf,
    s_stale: PathBuf,
    s_6days: PathBuf,
    s_8days: PathBuf,
    s_14days: PathBuf,
    s_7days_eps: PathBuf,
}

impl Logs {
    fn write(
        dir: &Path,
        (a_scen, a_model): (&Scenario, &[u8]),
        (s_field, s_model): (&Scenario, &[u8]),
    ) -> Logs {
        let s_train = s_field.with_demand("train").unwrap();
        let at = |name: &str| dir.join(name);
        let logs = Logs {
            a: at("log-a"),
            a_greedy: at("log-a-greedy"),
            a_tiny: (0..3).map(|k| at(&format!("log-a-tiny-{k}"))).collect(),
            s: at("log-s"),
            s_2days: at("log-s-2days"),
            s_greedy: at("log-s-greedy"),
            s_tiny: at("log-s-tiny"),
            s_stale: at("log-s-stale"),
            s_6days: at("log-s-6days"),
            s_8days: at("log-s-8days"),
            s_14days: at("log-s-14days"),
            s_7days_eps: at("log-s-7days-eps0.2"),
        };
        log(a_scen, a_model, &logs.a, 8, 3600, 0.1, 100);
        log(a_scen, a_model, &logs.a_greedy, 8, 3600, 0.0, 200);
        for (k, d) in logs.a_tiny.iter().enumerate() {
            log(a_scen, a_model, d, 1, 2400, 0.1, 300 + 10 * k as u64); // 480 records
        }
        log(s_field, s_model, &logs.s, 1, 86_400, 0.1, 7);
        log(s_field, s_model, &logs.s_2days, 2, 86_400, 0.1, 17);
        log(s_field, s_model, &logs.s_greedy, 1, 86_400, 0.0, 37);
        log(s_field, s_model, &logs.s_tiny, 1, 2400, 0.1, 47);
        log(&s_train, s_model, &logs.s_stale, 1, 86_400, 0.1, 27);
        log(s_field, s_model, &logs.s_6days, 6, 86_400, 0.1, 60);
        log(s_field, s_model, &logs.s_8days, 8, 86_400, 0.1, 80);
        log(s_field, s_model, &logs.s_14days, 14, 86_400, 0.1, 100);
        log(s_field, s_model, &logs.s_7days_eps, 7, 86_400, 0.2, 120);
        logs
    }
}

/// The two settings, their logs and the scratch folder: what every row is judged with.
struct Battery<'a> {
    a: &'a Setting,
    s: &'a Setting,
    logs: &'a Logs,
    dir: &'a Path,
}

impl Battery<'_> {
    fn fine_tune(
        &self,
        on: &Setting,
        log: &Path,
        name: &str,
        f: impl FnOnce(&mut FinetuneConfig),
    ) -> Row {
        finetuned(on, log, self.dir, name, f)
    }

    /// A's own fine-tunes, and with the reward's sign flipped (at the default step and a
    /// large one).
    fn a_fine_tunes(&self) -> Vec<Row> {
        let (a, la) = (self.a, &self.logs.a);
        let mut rows = Vec::new();
        for seed in 0..3 {
            rows.push(
                self.fine_tune(a, la, &format!("A: fine-tune, seed {seed}"), |c| {
                    c.seed = seed
                }),
            );
        }
        rows.push(self.fine_tune(a, la, "A: reward sign flipped", |c| {
            c.flip_reward_sign = true;
        }));
        for seed in 0..3 {
            let name = format!("A: reward sign flipped, large step, seed {seed}");
            rows.push(self.fine_tune(a, la, &name, |c| flipped_large_step(c, seed)));
        }
        rows
    }

    /// A's weights perturbed by noise of growing size, and policies trained for other
    /// demands; `weights`: A's, S's, S's field demand's, single-4way shifted's.
    fn other_weights(&self, weights: &[PolicyWeights; 4]) -> Vec<Row> {
        let [wa, ws, w_field, w_shifted] = weights;
        let (a, la, dir) = (self.a, &self.logs.a, self.dir);
        let mut rows = Vec::new();
        for (k, sigma) in [0.02f32, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0].iter().enumerate() {
            for rep in 0..2u64 {
                let cand = perturbed(wa, *sigma, 10 * k as u64 + rep);
                let name = format!("A: weights + N(0, ({sigma}·rms)²), #{rep}");
                rows.push(judge_weights(a, la, dir, &name, &cand));
            }
        }
        for (name, w) in [
            ("A: policy trained for S's train demand", ws),
            ("A: policy trained for S's field demand", w_field),
            ("A: policy trained for single-4way shifted", w_shifted),
        ] {
            rows.push(judge_weights(a, la, dir, name, w));
        }
        let name = "S: policy trained for A's demand";
        rows.push(judge_weights(self.s, &self.logs.s, dir, name, wa));
        rows
    }

    /// Logs too small, without exploration, or from before the demand changed, and the
    /// reward's sign flipped where exploration covers the most (the longest logs).
    fn small_greedy_stale_and_flipped(&self) -> Vec<Row> {
        let (a, s, l) = (self.a, self.s, self.logs);
        let mut rows = Vec::new();
        for (k, d) in l.a_tiny.iter().enumerate() {
            let name = format!("A: tiny log (480 records) #{k}");
            rows.push(self.fine_tune(a, d, &name, |c| c.min_records = 100));
        }
        let tiny = |c: &mut FinetuneConfig| c.min_records = 100;
        rows.push(self.fine_tune(s, &l.s_tiny, "S: tiny log (480 records)", tiny));
        rows.push(self.fine_tune(a, &l.a_greedy, "A: log without exploration", |_| {}));
        rows.push(self.fine_tune(s, &l.s_greedy, "S: log without exploration (1 day)", |_| {}));
        for seed in 0..3 {
            let name = format!("S: stale log (before the demand change), seed {seed}");
            rows.push(self.fine_tune(s, &l.s_stale, &name, |c| c.seed = seed));
        }
        let flip = |c: &mut FinetuneConfig| c.flip_reward_sign = true;
        let flip_large = |c: &mut FinetuneConfig| {
            c.flip_reward_sign = true;
            c.update.learning_rate = 3e-3;
            c.update.max_kl = 0.5;
            c.gate.max_kl = 1.0;
        };
        rows.push(self.fine_tune(s, &l.s, "S: reward sign flipped, 1 day", flip));
        for seed in 0..2 {
            let name = format!("S: reward sign flipped, 1 day, large step, seed {seed}");
            rows.push(self.fine_tune(s, &l.s, &name, |c| {
                flip_large(c);
                c.seed = seed;
            }));
        }
        rows.push(self.fine_tune(s, &l.s_14days, "S: reward sign flipped, 14 days", flip));
        let name = "S: reward sign flipped, 14 days, large step";
        rows.push(self.fine_tune(s, &l.s_14days, name, flip_large));
        let name = "S: reward sign flipped, 7 days at ε = 0.2";
        rows.push(self.fine_tune(s, &l.s_7days_eps, name, flip));
        rows
    }

    /// S's fine-tunes after its demand shifted, on logs of 1 to 14 days.
    fn demand_shifts(&self, stage: &dyn Fn(&str)) -> Vec<Row> {
        let l = self.logs;
        let shifts: [(&Path, &str, u64); 6] = [
            (&l.s, "1 day", 3),
            (&l.s_2days, "2 days", 2),
            (&l.s_6days, "6 days", 2),
            (&l.s_8days, "8 days", 3),
            (&l.s_14days, "14 days", 2),
            (&l.s_7days_eps, "7 days at ε = 0.2", 2),
        ];
        let mut rows = Vec::new();
        for (log_dir, what, seeds) in shifts {
            for seed in 0..seeds {
                let name = format!("S: demand shift, {what}, seed {seed}");
                rows.push(self.fine_tune(self.s, log_dir, &name, |c| c.seed = seed));
            }
            stage(&format!("demand shift, {what}, judged"));
        }
        rows
    }
}
