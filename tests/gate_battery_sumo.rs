//! The fine-tune gate's battery, small, on SUMO: the same kinds of candidate as
//! `gate_battery.rs`, judged by the gate with its defaults and measured by SUMO itself.
//! Needs feature `sumo` and SUMO (`SUMO_HOME`); ignored by default (minutes on 2 cores):
//!
//! ```text
//! cargo test -p greenwave-e2e --release --features sumo --test gate_battery_sumo -- --ignored --nocapture
//! ```
//!
//! The net is the SUMO backend's generated development fixture
//! (`crates/sim/fixtures/sumo/single.net.xml`: one four-arm signal, netgenerate; 900 random
//! trips over 1800 s), run in 1800-s sessions with its own 2-green-phase program. The
//! running policy is trained here (PPO, 36k decisions). Logs: 24 sessions with ε = 0.1
//! (SUMO seeds 100–123; the route file is fixed, so sessions differ by SUMO's driver
//! randomness and the exploration), 8 greedy sessions, and one tiny session. True effects:
//! greedy mean delay on SUMO seeds 2000–2004 against the running policy's.

use std::path::{Path, PathBuf};
use std::time::Instant;

use greenwave_e2e::scratch;
use greenwave_finetune::sim::{run_on, Run};
use greenwave_learn::onnx;
use greenwave_runtime::controller::Fallback;
use greenwave_sim::sumo::{SumoConfig, SumoEnv};
use greenwave_tools::backend::BackendArgs;
use greenwave_tools::train::{train, Algo, TrainConfig};

#[path = "gate_common.rs"]
mod gate_common;
use gate_common::{finetuned, flipped_large_step, judge_weights, perturbed, report, Setting};

const SECONDS: u32 = 1800;
const EVAL_SEEDS: [u64; 5] = [2000, 2001, 2002, 2003, 2004];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/sim/fixtures/sumo")
        .join(name)
}

fn backend() -> BackendArgs {
    BackendArgs::sumo(fixture("single.net.xml"), fixture("single.rou.xml"))
}

fn sumo_cfg(seed: u64) -> SumoConfig {
    backend()
        .sumo_config(Some(f64::from(SECONDS)), seed)
        .unwrap()
}

/// One controller session on SUMO (seed `seed`), greedy or ε-greedy, logged to `log_dir`.
fn session(model: &[u8], seed: u64, epsilon: f32, log_dir: Option<&Path>) -> f64 {
    let env = SumoEnv::new(sumo_cfg(seed)).unwrap();
    let run = Run {
        model,
        version: 1,
        seed,
        seconds: SECONDS,
        epsilon,
        log_dir,
    };
    run_on(env, Fallback::equal_split, &run)
        .unwrap()
        .mean_delay_s
}

fn log(model: &[u8], dir: &Path, sessions: u64, eps: f32, seed: u64) {
    for k in 0..sessions {
        session(model, seed + k, eps, Some(dir));
    }
}

#[test]
#[ignore = "the gate battery on SUMO: minutes on 2 cores, needs SUMO; run with --ignored"]
fn gate_battery_on_sumo() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let t0 = Instant::now();
    let stage = |what: &str| eprintln!("[{:>6.0} s] {what}", t0.elapsed().as_secs_f64());
    let dir = scratch("gate-battery-sumo");
    let mut tc = TrainConfig::new("sumo", Algo::Ppo, 36_000, 1);
    tc.sim = backend();
    tc.episode_s = Some(SECONDS);
    tc.n_envs = 4;
    tc.rollout_steps = 360;
    tc.command = "gate battery on SUMO".into();
    let run = dir.join("train");
    train(&tc, &run, false, false).unwrap();
    let onnx_path = dir.join("policy.onnx");
    greenwave_tools::export_cmd::export(&run, &onnx_path).unwrap();
    let model = std::fs::read(&onnx_path).unwrap();
    stage("policy trained");
    let s = Setting::new(
        model.clone(),
        Box::new(|m| {
            EVAL_SEEDS
                .iter()
                .map(|&k| session(m, k, 0.0, None))
                .sum::<f64>()
                / EVAL_SEEDS.len() as f64
        }),
    );
    eprintln!("running policy's mean delay {:.2} s", s.base_delay);
    let l = dir.join("log");
    log(&model, &l, 24, 0.1, 100);
    let l_greedy = dir.join("log-greedy");
    log(&model, &l_greedy, 8, 0.0, 200);
    let l_tiny = dir.join("log-tiny");
    log(&model, &l_tiny, 1, 0.1, 300); // 360 records
    stage("logs written");

    let (w, _) = onnx::import(&model).unwrap();
    let mut rows = Vec::new();
    for seed in 0..2 {
        rows.push(finetuned(
            &s,
            &l,
            &dir,
            &format!("SUMO: fine-tune, seed {seed}"),
            |c| c.seed = seed,
        ));
    }
    rows.push(finetuned(&s, &l, &dir, "SUMO: reward sign flipped", |c| {
        c.flip_reward_sign = true;
    }));
    for seed in 0..2 {
        rows.push(finetuned(
            &s,
            &l,
            &dir,
            &format!("SUMO: reward sign flipped, large step, seed {seed}"),
            |c| flipped_large_step(c, seed),
        ));
    }
    for (k, sigma) in [0.1f32, 0.2, 0.5, 1.0].iter().enumerate() {
        let cand = perturbed(&w, *sigma, 100 + k as u64);
        let name = format!("SUMO: weights + N(0, ({sigma}·rms)²)");
        rows.push(judge_weights(&s, &l, &dir, &name, &cand));
    }
    rows.push(finetuned(
        &s,
        &l_tiny,
        &dir,
        "SUMO: tiny log (360 records)",
        |c| c.min_records = 100,
    ));
    rows.push(finetuned(
        &s,
        &l_greedy,
        &dir,
        "SUMO: log without exploration",
        |_| {},
    ));
    stage("candidates judged");
    let header = format!(
        "Running policy's mean delay on SUMO: {:.2} s (5 held-out seeds, {SECONDS} s each).",
        s.base_delay
    );
    report(&rows, &header, 0);
}
