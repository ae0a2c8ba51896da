//! Training is deterministic for a seed on CPU, and `--resume` continues exactly.

mod common;

use std::path::Path;

use common::tmp;
use greenwave_tools::train::{checkpoint, train, Algo, TrainConfig};

fn tiny(algo: Algo, steps: u64) -> TrainConfig {
    let mut c = TrainConfig::new("single-4way", algo, steps, 7);
    c.n_envs = 2;
    c.rollout_steps = 60;
    c.hidden = vec![16, 16];
    c.episode_s = Some(600); // 120 decisions: checkpoints every 2 iterations
    c.ppo.minibatch = 64;
    c.offpolicy.q_epochs = 2;
    c.offpolicy.epochs = 2;
    c
}

fn actor(run: &Path) -> Vec<f32> {
    let (w, _, _) = checkpoint::load_policy(run, checkpoint::PolicyChoice::Last).unwrap();
    w.actor
        .iter()
        .flat_map(|l| l.weights.iter().chain(&l.bias).copied())
        .collect()
}

#[test]
fn same_seed_same_policy_and_resume_continues_exactly() {
    for algo in [Algo::Ppo, Algo::OffpolicyPpo] {
        let (a, b, c) = (tmp("a"), tmp("b"), tmp("c"));
        // 4 iterations of 2 envs × 60 decisions.
        let full = tiny(algo, 480);
        train(&full, &a, false, false).unwrap();
        train(&full, &b, false, false).unwrap();
        assert!(actor(&a) == actor(&b), "{algo:?}: same seed, same policy");
        // Interrupted after half, then resumed to the full length.
        let mut half = full.clone();
        half.stop_after_iterations = Some(2);
        train(&half, &c, false, false).unwrap();
        train(&full, &c, true, false).unwrap();
        assert!(
            actor(&a) == actor(&c),
            "{algo:?}: resumed run equals the uninterrupted one"
        );
        let csv = std::fs::read_to_string(c.join("metrics.csv")).unwrap();
        assert_eq!(
            csv.lines().count(),
            5,
            "header + 4 iterations, no duplicates after resume"
        );
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert_eq!(header[header.len() - 2..], ["rollout_s", "update_s"]);
        for row in csv.lines().skip(1) {
            let times: Vec<f64> = row
                .split(',')
                .rev()
                .take(2)
                .map(|x| x.parse().unwrap())
                .collect();
            assert!(
                times.iter().all(|t| t.is_finite() && *t >= 0.0) && times[1] > 0.0,
                "{algo:?}: rollout and update seconds in {row}"
            );
        }
        assert!(c.join("training.png").exists() && c.join("losses.png").exists());
        for d in [a, b, c] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[test]
fn pipelined_rollouts_are_deterministic_for_a_seed() {
    let (a, b) = (tmp("pipe-a"), tmp("pipe-b"));
    let mut pipelined = tiny(Algo::Ppo, 240);
    pipelined.pipelined = true;
    train(&pipelined, &a, false, false).unwrap();
    train(&pipelined, &b, false, false).unwrap();
    assert!(
        actor(&a) == actor(&b),
        "--pipelined serves the simulators in whatever order they answer; the policy must not depend on it"
    );
    let run = std::fs::read_to_string(a.join("run.json")).unwrap();
    assert!(
        run.contains("\"pipelined\": true"),
        "run.json records --pipelined"
    );
    for d in [a, b] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn resume_without_checkpoint_is_a_clear_error() {
    let d = tmp("none");
    let err = train(&tiny(Algo::Ppo, 120), &d, true, false).unwrap_err();
    assert!(
        format!("{err:#}").contains("no checkpoint to resume from"),
        "{err:#}"
    );
    let _ = std::fs::remove_dir_all(d);
}

fn shared_actor(run: &Path) -> Vec<f32> {
    let (p, _, _) = checkpoint::load_run_policy(run, checkpoint::PolicyChoice::Last).unwrap();
    let checkpoint::RunPolicy::Shared(w) = p else {
        panic!("{} holds a shared policy", run.display())
    };
    w.actor
        .iter()
        .flat_map(|l| l.weights.iter().chain(&l.bias).copied())
        .chain([
            w.norm.density.0,
            w.norm.density.1,
            w.norm.queue.0,
            w.norm.queue.1,
        ])
        .collect()
}

#[test]
fn shared_policy_is_deterministic_and_resumes_exactly() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scenarios/arterial-mixed.toml"
    );
    let (a, b, c) = (tmp("sa"), tmp("sb"), tmp("sc"));
    let mut full = tiny(Algo::Ppo, 960); // 4 iterations of 2 envs × 60 decisions × 2 signals
    full.scenario = scenario.into();
    full.hidden = vec![8, 8];
    full.policy = Some(greenwave_tools::train::policy::PolicyKind::Shared);
    train(&full, &a, false, false).unwrap();
    train(&full, &b, false, false).unwrap();
    assert!(
        shared_actor(&a) == shared_actor(&b),
        "same seed, same policy"
    );
    let mut half = full.clone();
    half.stop_after_iterations = Some(2);
    train(&half, &c, false, false).unwrap();
    // Resuming with the other architecture is refused.
    let mut other = full.clone();
    other.policy = Some(greenwave_tools::train::policy::PolicyKind::Mlp);
    assert!(train(&other, &c, true, false).is_err());
    train(&full, &c, true, false).unwrap();
    assert!(
        shared_actor(&a) == shared_actor(&c),
        "resumed run equals the uninterrupted one"
    );
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_plot_that_cannot_be_drawn_does_not_fail_a_finished_run() {
    // training.png cannot be written where a folder of that name stands, as when a
    // headless machine has no font for the curves.
    let run = tmp("noplot");
    std::fs::create_dir_all(run.join("training.png")).unwrap();
    let summary = train(&tiny(Algo::Ppo, 240), &run, false, false);
    assert!(summary.is_ok(), "{:#}", summary.err().unwrap());
    assert!(
        run.join("policy.safetensors").exists(),
        "the policy is saved"
    );
    assert!(run.join("metrics.csv").exists(), "the metrics are saved");
}

/// `--anneal-ent-coef`: the first iteration trains with the whole entropy bonus (the same
/// weights as a run without it), later ones with less (other weights); annealing a bonus
/// of 0 changes nothing.
#[test]
fn entropy_annealing_starts_at_the_full_bonus_and_then_lowers_it() {
    let mut plain = tiny(Algo::Ppo, 480);
    plain.ppo.ent_coef = 0.05;
    let mut annealed = plain.clone();
    annealed.ppo.anneal_ent_coef = true;
    let train_to = |cfg: &TrainConfig, stop: Option<u64>, name: &str| {
        let dir = tmp(name);
        let mut cfg = cfg.clone();
        cfg.stop_after_iterations = stop;
        train(&cfg, &dir, false, false).unwrap();
        let a = actor(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        a
    };
    assert!(
        train_to(&plain, Some(1), "p1") == train_to(&annealed, Some(1), "a1"),
        "iteration 1 of 4 trains with the whole bonus"
    );
    assert!(
        train_to(&plain, None, "p4") != train_to(&annealed, None, "a4"),
        "later iterations train with a lower bonus"
    );
    let (mut plain0, mut annealed0) = (plain.clone(), annealed.clone());
    plain0.ppo.ent_coef = 0.0;
    annealed0.ppo.ent_coef = 0.0;
    assert!(
        train_to(&plain0, None, "p0") == train_to(&annealed0, None, "a0"),
        "a bonus of 0 annealed is 0"
    );
}

#[test]
fn resume_with_other_learner_settings_is_refused_by_name() {
    let d = tmp("other-lr");
    let mut half = tiny(Algo::Ppo, 480);
    half.stop_after_iterations = Some(2);
    train(&half, &d, false, false).unwrap();
    let mut other = tiny(Algo::Ppo, 480);
    other.ppo.learning_rate *= 2.0;
    let err = format!("{:#}", train(&other, &d, true, false).unwrap_err());
    assert!(
        err.contains("other learner settings") && err.contains("ppo.learning_rate"),
        "{err}"
    );
    // Threads are the machine's: a resume may change them.
    let mut more_threads = tiny(Algo::Ppo, 480);
    more_threads.threads += 1;
    train(&more_threads, &d, true, false).unwrap();
    let _ = std::fs::remove_dir_all(d);
}

/// Seed 0 would seed training's episodes 0, 1, 2, …: the evaluation's held-out seeds among
/// them. It is refused; seed 1's episodes keep apart from them.
#[test]
fn seed_zero_is_refused_for_its_episodes_would_be_the_held_out_ones() {
    let mut c = tiny(Algo::Ppo, 120);
    c.seed = 0;
    let err = format!("{:#}", train(&c, &tmp("seed0"), false, false).unwrap_err());
    assert!(err.contains("--seed 0") && err.contains("1000"), "{err}");
    use greenwave_tools::train::rollout::episode_seed;
    let held_out = 500..1005u64;
    for slot in 0..8 {
        for episode in 0..10_000 {
            assert!(!held_out.contains(&episode_seed(1, slot, episode)));
        }
    }
}
