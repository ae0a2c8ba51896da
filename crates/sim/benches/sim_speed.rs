//! Speed of the embedded simulator, on one thread:
//!
//! 1. simulated seconds per wall second under max-pressure control (controller time
//!    included), for `single-4way` and `grid-4x4`;
//! 2. agent decisions per second as a learner sees them: `step` with one action per
//!    signal, then `observe` every signal (no policy), for the same scenarios.
//!
//! `cargo bench -p greenwave-sim --bench sim_speed` (pin it to one core with
//! `taskset -c 0` for the figures in BENCHMARKS.md). Each measurement runs several full
//! episodes with different seeds after a warm-up episode and reports the median.

use std::time::Instant;

use greenwave_sim::{load, run_episode, ControllerKind, EmbeddedEnv, Env, Scenario};

fn main() {
    // `cargo bench` passes `--bench`; anything else is taken as a scenario filter.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let targets = [("single-4way", 700_000.0, 12), ("grid-4x4", 150_000.0, 6)];
    let selected: Vec<_> = targets
        .into_iter()
        .filter(|(name, ..)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("max-pressure control, whole episodes (3600 s)");
    println!("scenario      episodes  median sim-s/s  target");
    for &(name, target, episodes) in &selected {
        let scenario = scenario(name);
        let median = median_of(episodes, |seed| controlled_rate(&scenario, seed));
        println!("{name:<13} {episodes:>8}  {median:>14.0}  {target:>6.0}");
    }
    println!();
    println!("learner loop: step (one action per signal) + observe every signal");
    println!("scenario      episodes  median steps/s  median agent decisions/s");
    for &(name, _, episodes) in &selected {
        let scenario = scenario(name);
        let signals = scenario.signal_ids().len() as f64;
        let steps = median_of(episodes, |seed| learner_steps_rate(&scenario, seed));
        println!(
            "{name:<13} {episodes:>8}  {steps:>14.0}  {:>24.0}",
            steps * signals
        );
    }
}

fn scenario(name: &str) -> Scenario {
    load(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Median of `f(seed)` over `episodes` seeds, after one warm-up call.
fn median_of(episodes: usize, mut f: impl FnMut(u64) -> f64) -> f64 {
    f(0);
    let mut rates: Vec<f64> = (1..=episodes as u64).map(&mut f).collect();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// Simulated seconds per wall second of one max-pressure episode.
fn controlled_rate(scenario: &Scenario, seed: u64) -> f64 {
    let mut env = EmbeddedEnv::from_scenario(scenario, seed);
    let mut controller = ControllerKind::MaxPressure.build(scenario);
    let started = Instant::now();
    let m = run_episode(&mut env, controller.as_mut(), seed, scenario.episode())
        .unwrap_or_else(|e| panic!("{e}"));
    m.sim_seconds / started.elapsed().as_secs_f64()
}

/// Steps per wall second of a learner-like loop (actions cycle through the phases).
fn learner_steps_rate(scenario: &Scenario, seed: u64) -> f64 {
    let mut env = EmbeddedEnv::from_scenario(scenario, seed);
    let dims: Vec<usize> = env.signals().iter().map(|s| s.layout.dim()).collect();
    let mut obs: Vec<Vec<f32>> = dims.iter().map(|&d| vec![0.0; d]).collect();
    let mut actions = vec![0u8; dims.len()];
    let started = Instant::now();
    let mut steps = 0u64;
    loop {
        for (i, a) in actions.iter_mut().enumerate() {
            *a = ((steps / 4 + i as u64) % 4) as u8;
        }
        let out = env.step(&actions).unwrap_or_else(|e| panic!("{e}"));
        for (i, o) in obs.iter_mut().enumerate() {
            env.observe(i, o).unwrap_or_else(|e| panic!("{e}"));
        }
        steps += 1;
        if out.done {
            break;
        }
    }
    steps as f64 / started.elapsed().as_secs_f64()
}
