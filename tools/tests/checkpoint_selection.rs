//! Checkpoint selection: the validated weights with the lowest greedy delay are kept (unless
//! they do not beat the last weights clearly, on the validation seeds or, where those
//! cannot tell, on fresh ones), they are exactly the weights that were validated, export
//! takes them (`--last` the last ones), validation leaves training untouched, and a
//! resumed run selects as the uninterrupted one.

mod common;

use std::path::Path;

use common::{greenwave, ok, tmp};
use greenwave_core::Millis;
use greenwave_sim::{run_episode, EmbeddedEnv};
use greenwave_tools::policy_controller::ActionRule;
use greenwave_tools::policy_controller::PolicyController;
use greenwave_tools::train::checkpoint::{self, PolicyChoice};
use greenwave_tools::train::selection::{
    DecisionRuleTest, DecisionRuleTrial, EndTest, Validation, ValidationConfig,
};
use greenwave_tools::train::{train, Algo, TrainConfig};

/// 10 iterations of 2 envs × 60 decisions, checkpoints every 2 iterations, validated on 2
/// seeds at iterations 6, 8 and 10.
fn tiny(validation_seeds: u32) -> TrainConfig {
    let mut c = TrainConfig::new("single-4way", Algo::Ppo, 1200, 7);
    c.n_envs = 2;
    c.rollout_steps = 60;
    c.hidden = vec![16, 16];
    c.episode_s = Some(600);
    c.ppo.minibatch = 64;
    c.validation = ValidationConfig {
        seeds: validation_seeds,
        first_seed: 500,
    };
    c
}

/// `(iteration, mean delay, best)` of each row of `validation.csv`.
fn log_rows(run: &Path) -> Vec<(u64, f64, bool)> {
    log_fields(run)
        .into_iter()
        .map(|f| (f[0].parse().unwrap(), f[2].parse().unwrap(), f[4] == "1"))
        .collect()
}

/// The fields of each row of `validation.csv`.
fn log_fields(run: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(run.join("validation.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// The row of `validation.csv` at `iteration` as a validation on `seeds`.
fn logged_validation(run: &Path, iteration: u64, seeds: &[u64]) -> Validation {
    let f = log_fields(run)
        .into_iter()
        .find(|f| f[0] == iteration.to_string())
        .unwrap();
    Validation {
        iteration,
        env_steps: f[1].parse().unwrap(),
        seeds: seeds.to_vec(),
        delay_s: f[3].split(';').map(|d| d.parse().unwrap()).collect(),
    }
}

fn actor(run: &Path, choice: PolicyChoice) -> Vec<f32> {
    let (w, _, _) = checkpoint::load_policy(run, choice).unwrap();
    w.actor
        .iter()
        .flat_map(|l| l.weights.iter().chain(&l.bias).copied())
        .collect()
}

/// The iteration count an exported manifest's provenance records (and that it records
/// the reward trained on, which on-device fine-tuning holds a log to).
fn exported_iteration(manifest: &Path) -> u64 {
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let details = &m["provenance"]["details"];
    assert!(details["reward_kind"].is_string(), "{details}");
    details["iterations"].as_u64().unwrap()
}

#[test]
fn the_lowest_validated_delay_is_kept_and_is_what_was_validated() {
    let run = tmp("sel-run");
    let s = train(&tiny(2), &run, false, false).unwrap();
    let rows = log_rows(&run);
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![6, 8, 10],
        "validated at the second half's checkpoints and the end"
    );
    // Rows flagged before the end: the running minimum, strictly falling.
    let flagged: Vec<u64> = rows
        .iter()
        .filter(|r| r.2 && r.0 < 10)
        .map(|r| r.0)
        .collect();
    let mean = |it| rows.iter().find(|r| r.0 == it).unwrap().1;
    assert!(
        flagged.windows(2).all(|w| mean(w[1]) < mean(w[0])),
        "rows: {rows:?}"
    );
    // At the end: a lower mean is kept; a higher one is kept only if the earlier best does
    // not beat it clearly (p ≥ 0.10). From the log's rounded delays, calls too close to
    // make (means within 2 ms, p within 0.02 of the level) accept either.
    let selected = checkpoint::read_selected(&run).unwrap().unwrap();
    let seeds = selected.validation.seeds.clone();
    let earlier = *flagged.last().expect("the first validation is always kept");
    let (best, last) = (
        logged_validation(&run, earlier, &seeds),
        logged_validation(&run, 10, &seeds),
    );
    let p = best.paired_p_value(&last).unwrap();
    let gap = last.mean_delay_s() - best.mean_delay_s();
    // Where the validation seeds cannot tell, the fresh seeds decide (`end_test.json`).
    let end_test = read_end_test(&run);
    let on_fresh_seeds = |t: &EndTest| {
        let lower = t.earlier.mean_delay_s() < t.last.mean_delay_s();
        assert_eq!(t.earlier_kept, lower, "{t:?}");
        Some(if lower { earlier } else { 10 })
    };
    let expected = match gap {
        g if g < -2e-3 => Some(10),
        g if g <= 2e-3 => None,
        _ if p < 0.08 => Some(earlier),
        _ if p > 0.12 => on_fresh_seeds(end_test.as_ref().expect("no end test on fresh seeds")),
        _ => None,
    };
    if p < 0.08 || gap < -2e-3 {
        assert!(end_test.is_none(), "an end test where none was due");
    }
    if let Some(t) = &end_test {
        assert_eq!(t.earlier.seeds, vec![502, 503, 504, 505]);
        assert_eq!((t.earlier.iteration, t.last.iteration), (earlier, 10));
        assert_eq!(t.last.seeds, t.earlier.seeds);
        // The earlier weights it ran are `best.*`'s (gone where the last ones replaced
        // them), the last ones `policy.*`'s.
        if t.earlier_kept {
            rerun(&run, PolicyChoice::Selected, &t.earlier);
        }
        let recorded = checkpoint::read_selected(&run).unwrap().unwrap();
        assert_eq!(recorded.kept_on_fresh_seeds.is_some(), t.earlier_kept);
        rerun(&run, PolicyChoice::Last, &t.last);
    }
    let chosen = selected.policy.iteration;
    assert!(
        expected.map_or([earlier, 10].contains(&chosen), |e| e == chosen),
        "selected {chosen}, expected {expected:?} (p = {p:.3}); rows: {rows:?}"
    );
    assert_eq!(rows.iter().find(|r| r.0 == 10).unwrap().2, chosen == 10);
    let row = rows.iter().find(|r| r.0 == chosen).unwrap();
    assert!((selected.validation.mean_delay_s() - row.1).abs() < 1e-3);
    assert_eq!(s.selected.as_ref().unwrap().iteration, chosen);

    // The saved weights, run again on the validation seeds, give the logged delays.
    rerun(&run, PolicyChoice::Selected, &selected.validation);
    let _ = std::fs::remove_dir_all(run);
}

/// `end_test.json`, where the run made one.
fn read_end_test(run: &Path) -> Option<EndTest> {
    let text = std::fs::read_to_string(run.join("end_test.json")).ok()?;
    Some(serde_json::from_str(&text).unwrap())
}

/// Runs the `choice` weights of `run` greedily on `v`'s seeds and checks they give `v`'s
/// delays.
fn rerun(run: &Path, choice: PolicyChoice, v: &Validation) {
    let (w, _, _) = checkpoint::load_policy(run, choice).unwrap();
    let scenario = greenwave_sim::load("single-4way").unwrap();
    for (&seed, &logged) in v.seeds.iter().zip(&v.delay_s) {
        let mut env = EmbeddedEnv::from_scenario(&scenario, seed);
        let mut c = PolicyController::new(w.clone());
        let m = run_episode(&mut env, &mut c, seed, Millis::from_secs(600)).unwrap();
        assert!(
            (m.mean_delay_s - logged).abs() < 1e-9,
            "{choice:?}, seed {seed}: {} s again against {logged} s logged",
            m.mean_delay_s
        );
    }
}

#[test]
fn validation_leaves_training_untouched_and_export_takes_the_selection() {
    let (with, without) = (tmp("sel-with"), tmp("sel-without"));
    train(&tiny(2), &with, false, false).unwrap();
    train(&tiny(0), &without, false, false).unwrap();
    assert!(
        actor(&with, PolicyChoice::Last) == actor(&without, PolicyChoice::Last),
        "validation changed the trained weights"
    );
    assert!(checkpoint::read_selected(&without).unwrap().is_none());
    assert!(!without.join("validation.csv").exists());

    // Which checkpoint wins depends on the machine's floating point (a run is
    // deterministic on one machine, not across CPUs), so the two exports are told apart
    // by what they record, and by their weights where the winner is not the last.
    let selected = checkpoint::read_selected(&with).unwrap().unwrap();
    let out = with.join("p.onnx");
    let o = out.to_str().unwrap();
    let manifest = with.join("p.manifest.json");
    let selected_by = || {
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        m["provenance"]["details"]["selected_by"]["validation_seeds"].clone()
    };
    let stdout = ok(&greenwave(&["export", with.to_str().unwrap(), "--out", o]));
    assert!(stdout.contains("selected on validation seeds"), "{stdout}");
    assert_eq!(exported_iteration(&manifest), selected.policy.iteration);
    assert_eq!(selected_by(), serde_json::json!([500, 501]));
    // Kept by the end test's second look: the manifest names its fresh seeds too.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let fresh = &m["provenance"]["details"]["selected_by"]["fresh_seeds"];
    match &selected.kept_on_fresh_seeds {
        Some(t) => assert_eq!(*fresh, serde_json::json!(t.earlier.seeds)),
        None => assert!(fresh.is_null(), "{fresh}"),
    }
    let last = ok(&greenwave(&[
        "export",
        with.to_str().unwrap(),
        "--out",
        o,
        "--last",
    ]));
    assert!(last.contains("the run's last weights"), "{last}");
    assert_eq!(exported_iteration(&manifest), 10);
    assert_eq!(selected_by(), serde_json::Value::Null);
    if selected.policy.iteration != 10 {
        assert!(
            actor(&with, PolicyChoice::Selected) != actor(&with, PolicyChoice::Last),
            "export's two choices load the same weights"
        );
    }

    // A best.json that does not describe best.safetensors (a torn write) is refused.
    let json = with.join("best.json");
    let text = std::fs::read_to_string(&json).unwrap();
    let torn = text.replacen(
        &format!("\"iteration\": {}", selected.policy.iteration),
        "\"iteration\": 9",
        1,
    );
    assert_ne!(torn, text);
    std::fs::write(&json, torn).unwrap();
    let o2 = greenwave(&["export", with.to_str().unwrap(), "--out", o]);
    let err = common::failed(&o2);
    assert!(err.contains("holds the weights of iteration"), "{err}");
    std::fs::write(&json, text).unwrap();
    // So are the last weights' and the checkpoint's pairs (a crash between their writes).
    for (file, args) in [("policy.json", "--last"), ("checkpoint.json", "")] {
        let json = with.join(file);
        let text = std::fs::read_to_string(&json).unwrap();
        let torn = text.replacen("\"iteration\": 10", "\"iteration\": 9", 1);
        assert_ne!(torn, text, "{file}");
        std::fs::write(&json, torn).unwrap();
        let err = match args {
            "--last" => common::failed(&greenwave(&[
                "export",
                with.to_str().unwrap(),
                "--out",
                o,
                "--last",
            ])),
            _ => format!("{:#}", train(&tiny(2), &with, true, false).unwrap_err()),
        };
        assert!(
            err.contains("the pair was not written whole"),
            "{file}: {err}"
        );
        std::fs::write(&json, text).unwrap();
    }

    // A resume that changes the validation seeds is refused.
    let mut other = tiny(3);
    other.stop_after_iterations = Some(10);
    let e = train(&other, &with, true, false).unwrap_err();
    assert!(format!("{e:#}").contains("--validation-seeds 2"), "{e:#}");
    // So is one that changes the run's length: it sets the validations and the end test.
    let mut longer = tiny(2);
    longer.total_steps = 2400;
    let e = train(&longer, &with, true, false).unwrap_err();
    assert!(format!("{e:#}").contains("--steps 1200"), "{e:#}");
    // And one on another scenario, demand or rollout length: its episodes and checkpoints
    // were laid out for the run's.
    let mut elsewhere = tiny(2);
    elsewhere.scenario = "arterial-3".into();
    let e = train(&elsewhere, &with, true, false).unwrap_err();
    assert!(format!("{e:#}").contains("--scenario single-4way"), "{e:#}");
    let mut shorter = tiny(2);
    shorter.rollout_steps += 1;
    let e = train(&shorter, &with, true, false).unwrap_err();
    assert!(format!("{e:#}").contains("--rollout-steps"), "{e:#}");

    // A fresh run into the same folder without validation drops the old selection.
    train(&tiny(0), &with, false, false).unwrap();
    assert!(checkpoint::read_selected(&with).unwrap().is_none());
    assert!(!with.join("best.safetensors").exists() && !with.join("validation.csv").exists());
    for d in [with, without] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_resumed_run_selects_as_the_uninterrupted_one() {
    let (full, parts) = (tmp("sel-full"), tmp("sel-parts"));
    train(&tiny(2), &full, false, false).unwrap();
    let mut first = tiny(2);
    first.stop_after_iterations = Some(8);
    train(&first, &parts, false, false).unwrap();
    assert_eq!(
        log_rows(&parts).iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![6, 8]
    );
    // An end test left from an earlier end is not this run's: the resumed run drops it.
    std::fs::write(parts.join("end_test.json"), "{\"stale\": true}").unwrap();
    train(&tiny(2), &parts, true, false).unwrap();
    assert_eq!(log_rows(&parts), log_rows(&full));
    assert_eq!(read_end_test(&parts), read_end_test(&full));
    assert!(
        actor(&parts, PolicyChoice::Selected) == actor(&full, PolicyChoice::Selected),
        "the resumed run selected other weights"
    );
    for d in [full, parts] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_run_out_of_time_stops_at_a_checkpoint_validated_and_resumes_exactly() {
    let (full, parts) = (tmp("time-full"), tmp("time-parts"));
    train(&tiny(0), &full, false, false).unwrap();
    // A spent budget: the run stops at its first resumable checkpoint (iteration 2 of 10),
    // and those weights are validated and selected as at a run's end.
    let mut late = tiny(2);
    late.deadline = Some(std::time::Instant::now());
    let s = train(&late, &parts, false, false).unwrap();
    assert_eq!((s.iterations, s.stopped_short_of), (2, Some(10)));
    assert_eq!(
        log_rows(&parts).iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(s.selected.map(|v| v.iteration), Some(2));
    assert_eq!(
        checkpoint::read_selected(&parts)
            .unwrap()
            .unwrap()
            .policy
            .iteration,
        2
    );
    // Resumed without a limit it trains the weights the unlimited run trained.
    let s = train(&tiny(2), &parts, true, false).unwrap();
    assert_eq!((s.iterations, s.stopped_short_of), (10, None));
    assert!(
        actor(&parts, PolicyChoice::Last) == actor(&full, PolicyChoice::Last),
        "the time limit changed the trained weights"
    );
    assert_eq!(
        log_rows(&parts).iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![2, 6, 8, 10]
    );
    for d in [full, parts] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `--decision-rule auto`: the run's end runs the selected weights on the fresh seeds
/// greedily and drawing at 0.5, keeps the draw only where it is 10 % faster, and
/// export writes what it kept: a drawing policy's manifest names its temperature and it
/// gets no firmware blobs; a trial of other weights than those exported counts for nothing.
#[test]
fn the_decision_rule_trial_decides_what_export_writes() {
    let run = tmp("sel-rule");
    let mut cfg = tiny(2);
    cfg.decision_rule = DecisionRuleTrial::Auto;
    train(&cfg, &run, false, false).unwrap();
    let text = std::fs::read_to_string(run.join("decision_rule.json")).unwrap();
    let test: DecisionRuleTest = serde_json::from_str(&text).unwrap();
    let selected = checkpoint::read_selected(&run).unwrap().unwrap();
    assert_eq!(test.greedy.iteration, selected.validation.iteration);
    assert_eq!(test.greedy.seeds, vec![502, 503, 504, 505]);
    assert_eq!(test.sampled.seeds, test.greedy.seeds);
    let faster = test.sampled.mean_delay_s() <= 0.9 * test.greedy.mean_delay_s();
    assert_eq!(test.temperature, faster.then_some(0.5));
    // Both are what the selected weights do on those seeds, by those rules.
    rerun(&run, PolicyChoice::Selected, &test.greedy);
    let (w, _, _) = checkpoint::load_policy(&run, PolicyChoice::Selected).unwrap();
    let scenario = greenwave_sim::load("single-4way").unwrap();
    for (&seed, &logged) in test.sampled.seeds.iter().zip(&test.sampled.delay_s) {
        let mut env = EmbeddedEnv::from_scenario(&scenario, seed);
        let rule = ActionRule::sampled(0.5, 0).unwrap();
        let mut c = PolicyController::new(w.clone()).with_rule(rule, seed);
        let m = run_episode(&mut env, &mut c, seed, Millis::from_secs(600)).unwrap();
        assert!((m.mean_delay_s - logged).abs() < 1e-9, "seed {seed}");
    }

    let out = run.join("p.onnx");
    let export = || {
        ok(&greenwave(&[
            "export",
            run.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]))
    };
    let manifest = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(run.join("p.manifest.json")).unwrap())
            .unwrap()
    };
    export();
    let kept = manifest()["decision_temperature"].as_f64();
    assert_eq!(kept, test.temperature.map(f64::from));
    assert_eq!(run.join("p.blob").exists(), kept.is_none());
    // A trial that kept the draw: the manifest says so, and no firmware blobs.
    let drawn = DecisionRuleTest::decide(
        test.greedy.clone(),
        Validation {
            delay_s: test.greedy.delay_s.iter().map(|d| d * 0.5).collect(),
            ..test.sampled.clone()
        },
        0.5,
    );
    assert_eq!(drawn.temperature, Some(0.5));
    std::fs::write(
        run.join("decision_rule.json"),
        serde_json::to_string(&drawn).unwrap(),
    )
    .unwrap();
    let said = export();
    assert!(said.contains("no firmware blobs"), "{said}");
    assert_eq!(manifest()["decision_temperature"], 0.5);
    assert_eq!(manifest()["format_version"], 4);
    assert!(!run.join("p.blob").exists() && !run.join("p.int8.blob").exists());
    // `eval` draws as the manifest says, and `--greedy` overrides it.
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "--model", out.to_str().unwrap(), "--scenario"];
        args.extend(["single-4way", "--seeds", "1", "--seconds", "300"]);
        args.extend(extra);
        let o = greenwave(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout)
    };
    let as_said = eval(&[]);
    assert!(as_said.contains("as its manifest says"), "{as_said}");
    let greedy = eval(&["--greedy"]);
    assert!(
        greedy.contains("greedy, not its manifest's rule"),
        "{greedy}"
    );
    // A trial of other weights than those exported: greedy, with blobs again.
    let mut other = drawn;
    other.greedy.iteration += 1;
    std::fs::write(
        run.join("decision_rule.json"),
        serde_json::to_string(&other).unwrap(),
    )
    .unwrap();
    let said = export();
    assert!(said.contains("acting greedily"), "{said}");
    assert!(manifest().get("decision_temperature").is_none());
    assert!(run.join("p.blob").exists());
    let _ = std::fs::remove_dir_all(run);
}
