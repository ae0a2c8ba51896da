//! `greenwave train`, `export` and `eval` on SUMO (`--backend sumo`), run as a user would,
//! on the single-intersection fixture of greenwave-sim (`crates/sim/fixtures/sumo`).
//!
//! Needs a build with feature `sumo` (`required-features` in Cargo.toml) and, for the tests
//! that run SUMO, a `sumo` binary (SUMO_HOME or PATH; `pip install eclipse-sumo==1.28.0`).
//! Without one those tests skip, saying why, except under CI (`CI` set), where a missing
//! SUMO is a failure so they can never be skipped silently where they are meant to run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{failed, greenwave, ok, tmp};

use greenwave_learn::manifest::plan_hash_hex;
use greenwave_sim::sumo::model::{build_models, ModelOptions};
use greenwave_sim::sumo::{observed_layout, TimingSpec};

/// Every light's model under the net's own timing.
fn net_models(net: &NetFile) -> Vec<greenwave_sim::sumo::TlsModel> {
    let opts = ModelOptions {
        program: None,
        timing: &TimingSpec::default(),
        step_ms: 1000,
    };
    build_models(net, opts).unwrap().models
}
use greenwave_sim::sumo::NetFile;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/sim/fixtures/sumo")
        .join(name)
}

/// The plan hash greenwave derives from the fixture net (no SUMO needed to read it).
fn single_net_plan_hash() -> String {
    let net = NetFile::read(&fixture("single.net.xml")).unwrap();
    let models = net_models(&net);
    plan_hash_hex(&models[0].plan)
}

/// A test's scratch folder `d` with a run folder and a model path in it, on the
/// single-intersection fixture.
struct SingleRun {
    d: PathBuf,
    run: PathBuf,
    model: PathBuf,
    net: PathBuf,
    routes: PathBuf,
}

impl SingleRun {
    fn new(name: &str, model: &str) -> Self {
        let d = tmp(name);
        SingleRun {
            run: d.join("run"),
            model: d.join(model),
            net: fixture("single.net.xml"),
            routes: fixture("single.rou.xml"),
            d,
        }
    }

    /// `--backend sumo --net … --routes …` for the fixture.
    fn sumo(&self) -> [&str; 6] {
        let (net, routes) = (self.net.to_str().unwrap(), self.routes.to_str().unwrap());
        ["--backend", "sumo", "--net", net, "--routes", routes]
    }
}

#[test]
fn train_export_eval_on_the_sumo_single_intersection() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let s = SingleRun::new("tee", "models/sumo-tiny.onnx");
    let (d, run, model, net) = (&s.d, &s.run, &s.model, &s.net);
    let (run_s, model_s) = (run.to_str().unwrap(), model.to_str().unwrap());
    let net_s = net.to_str().unwrap();
    let sumo = s.sumo();

    // 4 iterations × 2 envs × 60 decisions = 480 decisions: one 120 s SUMO episode per
    // env and iteration (a decision every 2 s, the SUMO training default).
    let t0 = Instant::now();
    let mut train = vec!["train"];
    train.extend(sumo);
    train.extend([
        "--episode-seconds",
        "120",
        "--steps",
        "480",
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--hidden",
        "16,16",
        "--seed",
        "5",
        "--out",
        run_s,
        "--quiet",
    ]);
    let out = ok(&greenwave(&train));
    eprintln!("train: {:.1} s: {}", t0.elapsed().as_secs_f64(), out.trim());
    assert!(out.contains("trained 480 decisions"), "{out}");
    run_folder_and_manifest_name_the_net(run, model, net_s);
    bundle_is_refused_under_other_timing(d, model, net);
    site_from_the_net_gives_the_program_clock(d, sumo);

    eval_next_to_the_classic_controllers(model_s, sumo);
    eval_and_resume_refuse_what_does_not_match(model_s, sumo, run_s);
    let _ = std::fs::remove_dir_all(d);
}

/// The run folder of a SUMO run on the fixture (its `run.json`: backend, net, one plan,
/// the layout with the program clock) and the export's manifest (the net's plan hash and
/// phases, provenance, format 3 with the clock).
fn run_folder_and_manifest_name_the_net(run: &Path, model: &Path, net_s: &str) {
    let model_s = model.to_str().unwrap();
    let run_s = run.to_str().unwrap();
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["config"]["backend"], "sumo");
    assert_eq!(info["config"]["net"], net_s);
    assert_eq!(info["plans"].as_array().map(Vec::len), Some(1));
    // 8 incoming lanes of two detection zones each, then a program-clock lane for each of
    // the 2 phases (the default): 2·(16 + 2) + 2 + 3 observations.
    assert_eq!(info["obs_layout"]["n_lanes"], 18);
    assert_eq!(info["obs_layout"]["n_phases"], 2);
    assert_eq!(info["config"]["program_clock"], "on");
    assert!(!run.join("scenario.toml").exists(), "no scenario on SUMO");
    for f in ["metrics.csv", "policy.safetensors", "checkpoint.json"] {
        assert!(run.join(f).exists(), "{f} missing from the run folder");
    }

    // Export: the manifest carries the plan greenwave derives from the net.
    ok(&greenwave(&["export", run_s, "--out", model_s]));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(model.with_extension("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["plan_hash"], single_net_plan_hash().as_str());
    assert_eq!(manifest["action_phases"], serde_json::json!([0, 1]));
    let prov = &manifest["provenance"];
    assert_eq!(prov["scenario"], format!("sumo:{net_s}").as_str());
    assert_eq!(prov["details"]["backend"], "sumo");
    // Format 4 for a policy that draws, 3 for a greedy one.
    let draws = manifest.get("decision_temperature").is_some();
    assert_eq!(manifest["format_version"], if draws { 4 } else { 3 });
    assert_eq!(manifest["program_clock"], true);
    // On SUMO the run's end tried a draw against the argmax (`--decision-rule auto`), and
    // the manifest acts by what it kept: a draw 10 % faster or more, else greedy.
    assert_eq!(info["config"]["decision_rule"], "auto");
    let trial: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("decision_rule.json")).unwrap())
            .unwrap();
    assert_eq!(trial["temperature"], manifest["decision_temperature"]);
    assert_eq!(
        model.with_extension("blob").exists(),
        manifest.get("decision_temperature").is_none()
    );
}

/// `eval` on the net: the policy next to the static program, actuated and max-pressure,
/// each with finite delays and traffic through.
fn eval_next_to_the_classic_controllers(model_s: &str, sumo: [&str; 6]) {
    let t0 = Instant::now();
    let mut eval = vec!["eval", "--model", model_s];
    eval.extend(sumo);
    eval.extend(["--seeds", "2", "--seconds", "300", "--json"]);
    let out = ok(&greenwave(&eval));
    eprintln!("eval: {:.1} s", t0.elapsed().as_secs_f64());
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["controller"].as_str().unwrap())
        .collect();
    // The policy decides every 2 s: actuated and max-pressure run at its interval too.
    assert_eq!(
        names,
        [
            "policy",
            "fixed-time",
            "actuated",
            "max-pressure",
            "actuated (2 s)",
            "max-pressure (2 s)"
        ]
    );
    for r in &rows {
        eprintln!("{r}");
        let delay = r["mean_delay_s"].as_f64().unwrap();
        assert!(delay.is_finite() && delay >= 0.0, "{r}");
        assert!(r["throughput_veh"].as_u64().unwrap() > 20, "{r}");
        assert_eq!(r["sim_seconds"], 300.0, "{r}");
        assert_eq!(r["seeds"], 2, "{r}");
    }
}

/// `eval` with the other observation or on another plan, and a resume on another
/// backend, are refused naming why.
fn eval_and_resume_refuse_what_does_not_match(model_s: &str, sumo: [&str; 6], run_s: &str) {
    // Eval builds the net with the program clock the manifest names; asked for the other
    // observation, it refuses before running anything.
    let mut eval = vec!["eval", "--model", model_s];
    eval.extend(sumo);
    eval.extend(["--seeds", "1", "--program-clock", "off"]);
    let err = failed(&greenwave(&eval));
    assert!(
        err.contains("was trained with its program clock on") && err.contains("runs with it off"),
        "{err}"
    );

    // A policy for the net's 2-phase plan is refused on the embedded 4-phase single-4way.
    let err = failed(&greenwave(&[
        "eval",
        "--model",
        model_s,
        "--scenario",
        "single-4way",
        "--seeds",
        "1",
    ]));
    assert!(
        err.contains("trained for phase plan") && err.contains("--program-intergreens"),
        "{err}"
    );

    // Resuming the SUMO run on another backend is refused, naming both.
    let err = failed(&greenwave(&[
        "train",
        "--steps",
        "960",
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--hidden",
        "16,16",
        "--seed",
        "5",
        "--out",
        run_s,
        "--resume",
        "--quiet",
    ]));
    assert!(err.contains("resume with the same --backend"), "{err}");
    assert!(err.contains("sumo:"), "{err}");
}

/// Two 60-decision iterations of a 120 s episode with a tiny network: a SUMO training run
/// that takes seconds.
const TINY_TRAINING: [&str; 10] = [
    "--episode-seconds",
    "120",
    "--steps",
    "120",
    "--envs",
    "1",
    "--rollout-steps",
    "60",
    "--hidden",
    "8,8",
];

/// Training on SUMO decides every 2 s unless told otherwise, and `eval` runs a policy at the
/// decision interval it was trained at (its manifest's), as the controller does, and the
/// classic controllers at the command's (5 s by default).
#[test]
fn eval_runs_a_policy_at_its_own_decision_interval() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let s = SingleRun::new("interval", "di2.onnx");
    let (run_s, model_s) = (s.run.to_str().unwrap(), s.model.to_str().unwrap());
    let sumo = s.sumo();
    let mut train = vec!["train"];
    train.extend(sumo);
    // No --decision-interval: the demand probe finds the fixture's demand light, so
    // training decides every 2 s.
    train.extend(TINY_TRAINING);
    train.extend(["--out", run_s, "--quiet"]);
    // Interrupted after one of its two iterations and resumed without the flag: the run
    // keeps the interval it recorded.
    let mut first = train.clone();
    first.extend(["--stop-after-iterations", "1"]);
    ok(&greenwave(&first));
    train.push("--resume");
    let out = ok(&greenwave(&train));
    assert!(out.contains("trained 120 decisions"), "{out}");
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["config"]["demand_probe"]["saturated"], false, "{info}");
    assert_eq!(
        info["config"]["reward"], "delay-accrued-delta",
        "the default, recorded"
    );
    assert_eq!(info["config"]["demand_probe"]["backlog_veh"], 0, "{info}");
    ok(&greenwave(&["export", run_s, "--out", model_s]));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(s.model.with_extension("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["decision_interval_ms"], 2000);

    let mut eval = vec!["eval", "--model", model_s];
    eval.extend(sumo);
    eval.extend(["--seeds", "1", "--seconds", "120", "--json"]);
    let o = greenwave(&eval);
    let out = ok(&o);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let intervals: Vec<f64> = rows
        .iter()
        .map(|r| r["decision_interval_s"].as_f64().unwrap())
        .collect();
    assert_eq!(intervals, [2.0, 5.0, 5.0, 5.0, 2.0, 2.0], "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "the policy decides every 2 s (its manifest), the classic controllers every 5 s"
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&s.d);
}

/// A policy trained without pedestrian zones (as every policy before them) on a net with
/// crossings: its run resumes and exports without them, and `eval` finds by itself that it
/// fits only without them and says so; asked for them, it refuses naming the layout.
#[test]
fn a_policy_from_before_pedestrian_zones_evaluates_without_them() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let d = tmp("no-zones");
    std::fs::create_dir_all(&d).unwrap();
    let (run, model) = (d.join("run"), d.join("nz.onnx"));
    let (run_s, model_s) = (run.to_str().unwrap(), model.to_str().unwrap());
    let (net, routes) = (fixture("peds.net.xml"), fixture("peds.rou.xml"));
    let sumo = [
        "--backend",
        "sumo",
        "--net",
        net.to_str().unwrap(),
        "--routes",
        routes.to_str().unwrap(),
    ];
    let mut train = vec!["train"];
    train.extend(sumo);
    train.extend(TINY_TRAINING);
    train.extend(["--pedestrian-zones", "off", "--out", run_s, "--quiet"]);
    train.extend(["--stop-after-iterations", "1"]);
    ok(&greenwave(&train));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["config"]["pedestrian_zones"], "off");
    // 4 one-lane arms, two zones each, then the clock's 4 lanes (a phase with the
    // crossings and one without for each axis); with the zones, 8 more.
    assert_eq!(info["obs_layout"]["n_lanes"], 12);
    // Resumed without the flag, it goes on without the zones.
    train.truncate(train.len() - 2);
    train.retain(|a| *a != "--pedestrian-zones" && *a != "off");
    train.push("--resume");
    ok(&greenwave(&train));
    ok(&greenwave(&["export", run_s, "--out", model_s]));

    let mut eval = vec!["eval", "--model", model_s];
    eval.extend(sumo);
    eval.extend(["--seeds", "1", "--seconds", "120", "--json"]);
    let o = greenwave(&eval);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("observes no pedestrian zones"), "{err}");
    eval.extend(["--pedestrian-zones", "on"]);
    let err = failed(&greenwave(&eval));
    assert!(err.contains("layout"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A run started with a reward goes on with it when resumed without `--reward` (the
/// default has changed, from `delay-delta` to `delay-accrued`, back, and to
/// `delay-accrued-delta`: a run begun before goes on as it began), and refuses to go on
/// with another.
#[test]
fn a_resumed_run_keeps_its_reward() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let s = SingleRun::new("reward-resume", "unused.onnx");
    let run_s = s.run.to_str().unwrap();
    let mut train = vec!["train"];
    train.extend(s.sumo());
    train.extend(TINY_TRAINING);
    train.extend(["--out", run_s, "--quiet"]);
    let mut first = train.clone();
    first.extend(["--reward", "delay-accrued", "--stop-after-iterations", "1"]);
    ok(&greenwave(&first));
    let reward = || {
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(s.run.join("run.json")).unwrap())
                .unwrap();
        info["config"]["reward"].clone()
    };
    assert_eq!(reward(), "delay-accrued");
    let mut other = train.clone();
    other.extend(["--resume", "--reward", "delay-delta"]);
    let o = greenwave(&other);
    assert!(!o.status.success(), "resumed with another reward");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--reward"), "{err}");
    train.push("--resume");
    let out = ok(&greenwave(&train));
    assert!(out.contains("trained 120 decisions"), "{out}");
    assert_eq!(reward(), "delay-accrued", "the resumed run's run.json");
    let _ = std::fs::remove_dir_all(&s.d);
}

/// The entropy bonus a SUMO run trained with, from its `run.json`.
fn ent_coef(run: &Path) -> f64 {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    info["config"]["ppo"]["ent_coef"].as_f64().unwrap()
}

/// The learning rate and epochs a tiny SUMO run trained with, from its `run.json` and the
/// learning rate of its first `metrics.csv` row.
fn trained_ppo(run: &Path) -> (f64, u64, f64) {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    let csv = std::fs::read_to_string(run.join("metrics.csv")).unwrap();
    let first: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    (
        info["config"]["ppo"]["learning_rate"].as_f64().unwrap(),
        info["config"]["ppo"]["epochs"].as_u64().unwrap(),
        first[7].parse().unwrap(),
    )
}

/// On SUMO the shared network trains at learning rate 1e-3 with 5 epochs and entropy bonus
/// 0.02 (tools/README.md, findings 14 and 11) and the MLP keeps 3e-4, 10 and 0.01; a flag
/// the command gives wins, and a resumed run keeps the recipe it recorded.
#[test]
fn the_shared_policy_trains_with_its_own_sumo_recipe() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let s = SingleRun::new("shared-recipe", "unused.onnx");
    let sumo = s.sumo();
    let train = |name: &str, extra: &[&str]| {
        let run = s.d.join(name);
        let mut args = vec!["train"];
        args.extend(sumo);
        args.extend(TINY_TRAINING);
        args.extend(["--quiet", "--out"]);
        args.push(run.to_str().unwrap());
        args.extend(extra);
        ok(&greenwave(&args));
        run
    };
    let shared = train(
        "shared",
        &["--policy", "shared", "--stop-after-iterations", "1"],
    );
    assert_eq!(trained_ppo(&shared), (1e-3, 5, 1e-3));
    assert_eq!(ent_coef(&shared), 0.02);
    let mlp = train("mlp", &["--policy", "mlp"]);
    assert_eq!(trained_ppo(&mlp), (3e-4, 10, 3e-4));
    assert_eq!(ent_coef(&mlp), 0.01);
    let asked = train(
        "asked",
        &[
            "--policy",
            "shared",
            "--learning-rate",
            "5e-4",
            "--epochs",
            "3",
            "--ent-coef",
            "0.005",
        ],
    );
    assert_eq!(trained_ppo(&asked), (5e-4, 3, 5e-4));
    assert_eq!(ent_coef(&asked), 0.005);
    // The second of two iterations, resumed: the schedule goes on from 1e-3 (half left).
    train("shared", &["--policy", "shared", "--resume"]);
    let csv = std::fs::read_to_string(shared.join("metrics.csv")).unwrap();
    let second: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
    assert_eq!(second[7].parse::<f64>().unwrap(), 5e-4, "{csv}");
    assert_eq!(ent_coef(&shared), 0.02, "the resumed run's run.json");
    let _ = std::fs::remove_dir_all(&s.d);
}

/// A net that cannot carry its demand trains at 5 s decisions: the demand probe
/// (max-pressure for one episode) leaves most vehicles never inserted, and `run.json` keeps
/// what it measured. The fixture's own light demand (the test above) trains at 2 s.
#[test]
fn a_saturated_net_trains_at_five_second_decisions() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let s = SingleRun::new("saturated", "sat.onnx");
    std::fs::create_dir_all(&s.d).unwrap();
    let routes = s.d.join("flood.rou.xml");
    let mut xml = String::from("<routes>\n");
    for (i, (from, to)) in [
        ("bottom0A0", "A0top0"),
        ("top0A0", "A0bottom0"),
        ("left0A0", "A0right0"),
        ("right0A0", "A0left0"),
    ]
    .iter()
    .enumerate()
    {
        xml.push_str(&format!(
            "  <route id=\"r{i}\" edges=\"{from} {to}\"/>\n  \
             <flow id=\"f{i}\" route=\"r{i}\" begin=\"0\" end=\"120\" number=\"300\"/>\n"
        ));
    }
    xml.push_str("</routes>\n");
    std::fs::write(&routes, xml).unwrap();
    let run_s = s.run.to_str().unwrap();
    let o = greenwave(&[
        "train",
        "--backend",
        "sumo",
        "--net",
        s.net.to_str().unwrap(),
        "--routes",
        routes.to_str().unwrap(),
        "--episode-seconds",
        "120",
        "--steps",
        "24",
        "--envs",
        "1",
        "--rollout-steps",
        "24",
        "--hidden",
        "8,8",
        "--out",
        run_s,
        "--quiet",
    ]);
    let out = ok(&o);
    assert!(out.contains("trained 24 decisions"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the net is saturated, so the policy decides every 5 s"),
        "{err}"
    );
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["decision_interval_s"], 5);
    let probe = &info["config"]["demand_probe"];
    assert_eq!(probe["controller"], "max-pressure");
    assert_eq!(probe["saturated"], true);
    assert!(probe["backlog_share"].as_f64().unwrap() > 0.5, "{probe}");
    let _ = std::fs::remove_dir_all(&s.d);
}

#[test]
fn a_missing_sumo_binary_is_a_clear_error() {
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let (net_s, routes_s) = (net.to_str().unwrap(), routes.to_str().unwrap());
    let d = tmp("nobin");
    let run = d.join("run");
    let model = d.join("none.onnx");
    let commands: [Vec<&str>; 2] = [
        vec![
            "train",
            "--steps",
            "60",
            "--envs",
            "1",
            "--rollout-steps",
            "60",
            "--out",
            run.to_str().unwrap(),
            "--quiet",
        ],
        vec!["eval", "--model", model.to_str().unwrap(), "--seeds", "1"],
    ];
    for mut args in commands {
        args.extend(["--backend", "sumo", "--net", net_s, "--routes", routes_s]);
        let o = Command::new(env!("CARGO_BIN_EXE_greenwave"))
            .args(&args)
            .env("SUMO_HOME", "/nonexistent/sumo-home")
            .env("PATH", "/nonexistent/bin")
            .output()
            .unwrap();
        let err = failed(&o);
        assert!(err.contains("SUMO binary not found"), "{args:?}: {err}");
        assert!(err.contains("pip install eclipse-sumo"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// Settings that cannot train (or not as asked) are refused before SUMO is looked for, let
/// alone the demand probe run (a whole SUMO episode): with no SUMO binary on the path, the
/// error is the setting's, not the missing binary's.
#[test]
fn bad_training_settings_are_refused_before_sumo_starts() {
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let d = tmp("early-refusal");
    let run = d.join("run");
    let mut cases: Vec<(&[&str], &str)> = vec![
        (&["--hidden", "0"], "--hidden"),
        (&["--envs", "0"], "--envs"),
        (&["--epochs", "0"], "--epochs"),
        (&["--ent-coef=-1"], "--ent-coef"),
        // The run and the manifest keep whole seconds: 2.5 s would deploy as 3 s.
        (
            &["--decision-interval", "2.5", "--step-length", "0.5"],
            "whole seconds",
        ),
    ];
    if cfg!(not(feature = "cuda")) {
        cases.push((&["--device", "cuda"], "--features cuda"));
    }
    for (extra, says) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_greenwave"))
            .args(["train", "--steps", "60", "--out", run.to_str().unwrap()])
            .args(["--backend", "sumo", "--net", net.to_str().unwrap()])
            .args(["--routes", routes.to_str().unwrap(), "--quiet"])
            .args(extra)
            .env("SUMO_HOME", "/nonexistent/sumo-home")
            .env("PATH", "/nonexistent/bin")
            .output()
            .unwrap();
        let err = failed(&o);
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!err.contains("SUMO binary not found"), "{extra:?}: {err}");
        assert!(!run.exists(), "{extra:?}: no run folder");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// The plan hash binds the timing: the exported policy, signed into a bundle, passes the
/// controller's check (`VerifiedBundle::check_signal`, what `greenwave-controller run
/// --sumo-net` calls for every signal) against the net's own timing, and is refused by a
/// controller configured with another yellow (`--yellow 4`).
fn bundle_is_refused_under_other_timing(d: &Path, model: &Path, net_path: &Path) {
    use greenwave_runtime::bundle::{self, BundleError};
    let key = d.join("keys/site");
    ok(&greenwave(&["keygen", "--out", key.to_str().unwrap()]));
    let dir = d.join("bundle");
    ok(&greenwave(&[
        "bundle",
        model.to_str().unwrap(),
        "--key",
        key.with_extension("key").to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]));
    let trust = bundle::load_public_key(&key.with_extension("pub")).unwrap();
    let b = bundle::verify(&dir, &[trust]).unwrap();
    let net = NetFile::read(net_path).unwrap();
    let layout_of = |m: &greenwave_sim::sumo::TlsModel| observed_layout(m, true).unwrap();
    let own = &net_models(&net)[0];
    b.check_signal(&own.plan, layout_of(own)).unwrap();
    let mut timing = TimingSpec::default();
    timing.command_line.yellow_s = Some(4.0);
    let opts = ModelOptions {
        program: None,
        timing: &timing,
        step_ms: 1000,
    };
    let other = &build_models(&net, opts).unwrap().models[0];
    match b.check_signal(&other.plan, layout_of(other)) {
        Err(BundleError::PlanMismatch { .. }) => {}
        r => panic!("a bundle exported under the net's timing ran under yellow 4 s: {r:?}"),
    }
}

/// `greenwave site` from the net gives the signal its program clock, so the bundle (which
/// reads one) fits the site; the same site without the clock is refused, on the layout
/// (two lanes fewer) and on the clock itself.
fn site_from_the_net_gives_the_program_clock(d: &Path, sumo: [&str; 6]) {
    use greenwave_runtime::bundle::{self, BundleError};
    use greenwave_runtime::site::SiteConfig;
    let site = d.join("site.toml");
    let mut args = vec!["site", "--out", site.to_str().unwrap()];
    args.extend(sumo);
    ok(&greenwave(&args));
    let trust = bundle::load_public_key(&d.join("keys/site.pub")).unwrap();
    let b = bundle::verify(&d.join("bundle"), &[trust]).unwrap();
    let mut cfg = SiteConfig::load(&site).unwrap();
    assert_eq!(
        cfg.signals[0].n_lanes, 16,
        "n_lanes counts the detector zones"
    );
    // The fallback is the light's own program (42 s + 42 s; `Fallback::from_programs`,
    // what the controller's SUMO field falls back to as well), and 1.5 × it as max greens
    // within the plan's (60 s: 63 s would never be reached, the sequencer ends it first).
    let stages: Vec<(u8, u32)> = cfg.signals[0]
        .fixed_cycle
        .iter()
        .map(|s| (s.phase, s.green.0))
        .collect();
    assert_eq!(stages, [(0, 42_000), (1, 42_000)]);
    let actuated = cfg.signals[0].actuated.as_ref().unwrap();
    assert_eq!(
        actuated.max_green.as_slice(),
        [greenwave_core::Millis(60_000); 2]
    );
    // And the program's detector-to-phase assignment (no movement yields here: each phase
    // answers to all its movements), written and read back.
    let assigned: Vec<_> = cfg.signals[0]
        .plan
        .phases()
        .iter()
        .map(|p| p.movements)
        .collect();
    assert_eq!(actuated.assigned.as_slice(), assigned.as_slice());
    let spec = cfg.signal_specs().remove(0);
    assert!(spec.program_clock.is_some());
    b.check_signal(&spec.plan, spec.layout).unwrap();
    b.check_program_clock(true).unwrap();
    // On Unix time (`--begin-unix-ms`): a controller started at that Unix time sees the
    // program as the simulation did from its --begin.
    let unix_site = d.join("site-unix.toml");
    let begin = "1700000003000";
    let mut args = vec!["site", "--out", unix_site.to_str().unwrap()];
    args.extend(sumo);
    args.extend(["--begin-unix-ms", begin]);
    ok(&greenwave(&args));
    let on_unix = SiteConfig::load(&unix_site).unwrap();
    assert_eq!(
        on_unix.program_clock_time,
        greenwave_runtime::site::ClockTime::Unix
    );
    let mut specs = on_unix.signal_specs();
    on_unix
        .program_clock_time
        .to_controller_time(&mut specs, begin.parse().unwrap());
    assert_eq!(specs, cfg.signal_specs());
    cfg.signals[0].program_clock = None;
    let spec = cfg.signal_specs().remove(0);
    assert!(matches!(
        b.check_signal(&spec.plan, spec.layout),
        Err(BundleError::LayoutMismatch { .. })
    ));
    assert!(matches!(
        b.check_program_clock(false),
        Err(BundleError::ProgramClockMismatch {
            bundle: true,
            controller: false
        })
    ));
}

/// Zero-shot onto a SUMO net: a shared policy trained on the embedded simulator's mixed
/// arterial is compiled for the signal of a SUMO net it never saw (`export --backend sumo`),
/// bound to that signal's plan, and evaluated there.
#[test]
fn a_shared_policy_exports_zero_shot_onto_a_sumo_net_and_runs_there() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let d = tmp("zero-shot");
    let run = d.join("run");
    let model = d.join("models/zs.onnx");
    let mixed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scenarios/arterial-mixed.toml"
    );
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let (run_s, model_s) = (run.to_str().unwrap(), model.to_str().unwrap());
    let (net_s, routes_s) = (net.to_str().unwrap(), routes.to_str().unwrap());
    let sumo = ["--backend", "sumo", "--net", net_s, "--routes", routes_s];
    ok(&greenwave(&[
        "train",
        "--scenario",
        mixed,
        "--policy",
        "shared",
        "--hidden",
        "8,8",
        "--steps",
        "480",
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--episode-seconds",
        "600",
        "--out",
        run_s,
        "--quiet",
    ]));
    let mut export = vec!["export", run_s, "--out", model_s];
    export.extend(sumo);
    let out = ok(&greenwave(&export));
    let ids: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("signal ")?.strip_suffix(':'))
        .collect();
    assert_eq!(ids.len(), 1, "one signal in the SUMO net: {out}");
    let exported = model.with_file_name(format!("zs.{}.onnx", ids[0]));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(exported.with_extension("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["plan_hash"], single_net_plan_hash().as_str());
    assert_eq!(manifest["provenance"]["details"]["zero_shot"], true);

    let mut eval = vec![
        "eval",
        "--model",
        model_s,
        "--seeds",
        "1",
        "--seconds",
        "300",
    ];
    eval.extend(sumo);
    let table = ok(&greenwave(&eval));
    assert!(table.contains("| policy |"), "{table}");

    // One target at a time.
    let mut both = vec![
        "export",
        run_s,
        "--out",
        model_s,
        "--scenario",
        "single-4way",
    ];
    both.extend(sumo);
    let err = failed(&greenwave(&both));
    assert!(err.contains("cannot be used with"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// The controller on a simulated SUMO field with its program clock: the specs carry the
/// light's program, the field supplies the detector zones only, and the controller writes
/// the clock's lanes itself, at its own time, as the simulator's observation has them
/// (`the_program_clock_follows_the_nets_program_from_its_offset`, greenwave-sim).
#[test]
fn the_controller_writes_a_sumo_fields_program_clock_itself() {
    use greenwave_runtime::controller::{Controller, ControllerConfig, Fallback, Policy, SimField};
    use greenwave_runtime::inference::{Explorer, InferenceError, PolicyBackend};
    use std::sync::{Arc, Mutex};

    /// Asks for phase 0 and keeps every observation it is shown.
    struct Recorder(Arc<Mutex<Vec<Vec<f32>>>>);
    impl PolicyBackend for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
            self.0.lock().unwrap().push(obs.to_vec());
            logits.fill(0.0);
            Ok(0.0)
        }
    }

    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let mut cfg =
        greenwave_sim::sumo::SumoConfig::new(fixture("single.net.xml"), fixture("single.rou.xml"));
    cfg.seconds = 300.0;
    cfg.seed = 3;
    cfg.program_clock = true;
    let field = SimField::new(greenwave_sim::sumo::SumoEnv::new(cfg).unwrap());
    let specs = field.signal_specs();
    let clock = specs[0].program_clock.clone().expect("the light's program");
    let (detected, n) = (specs[0].field_lanes(), specs[0].layout.n_lanes as usize);
    assert_eq!(n, detected + specs[0].plan.n_phases());
    let interval = field.decision_interval();
    let plans: Vec<_> = specs.iter().map(|s| &s.plan).collect();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut c = Controller::new(
        specs.clone(),
        Ok(Policy {
            backend: Box::new(Recorder(seen.clone())),
            version: 1,
            explorer: Explorer::greedy(),
        }),
        Fallback::equal_split(&plans, interval),
        ControllerConfig::for_simulated_time(interval),
        None,
    )
    .unwrap();
    let mut field = field;
    let mut times = Vec::new();
    while c.now_ms() < 300_000 {
        let (t, before) = (c.now_ms(), seen.lock().unwrap().len());
        if !c.step(&mut field).unwrap() {
            break;
        }
        let shown = seen.lock().unwrap().len() - before;
        times.extend(std::iter::repeat_n(t, shown));
    }
    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 50, "{} decisions", seen.len());
    let mut phases = [0usize; 2];
    for (obs, &t) in seen.iter().zip(&times) {
        let on = clock.phase_at(t).0 as usize;
        phases[on] += 1;
        for (k, &d) in obs[detected..n].iter().enumerate() {
            assert_eq!(d, if k == on { 1.0 } else { 0.0 }, "t {t} ms");
        }
        assert!(obs[n + detected..2 * n].iter().all(|&q| q == 0.0));
    }
    assert!(
        phases.iter().all(|&k| k > 0),
        "both phases seen: {phases:?}"
    );
    // The detector zones are SUMO's, not zero.
    assert!(seen.iter().any(|o| o[..detected].iter().any(|&x| x > 0.0)));
}

/// A configuration of `net` and `routes` at scale 0.4 with options greenwave sets itself
/// (an output to `d/mine.xml`, the end, the TraCI port), written to `d/scaled.sumocfg`.
fn scaled_sumocfg(d: &Path, net: &Path, routes: &Path) -> PathBuf {
    let scaled = d.join("scaled.sumocfg");
    std::fs::write(
        &scaled,
        format!(
            r#"<sumoConfiguration>
    <input><net-file value="{}"/><route-files value="{}"/></input>
    <time><begin value="0:0:0"/><end value="99999"/></time>
    <processing><scale value="0.4"/></processing>
    <output><tripinfo-output value="{}"/></output>
    <traci_server><remote-port value="8813"/></traci_server>
</sumoConfiguration>"#,
            net.display(),
            routes.display(),
            d.join("mine.xml").display()
        ),
    )
    .unwrap();
    scaled
}

/// `greenwave sim --backend sumo` with the fixed-time controller for 600 s and `extra`:
/// throughput, mean delay and what it said on stderr.
fn sim_600s_fixed_time(extra: &[&str]) -> (u64, f64, String) {
    let mut args = vec![
        "sim",
        "--backend",
        "sumo",
        "--controller",
        "fixed-time",
        "--seconds",
        "600",
        "--json",
    ];
    args.extend(extra);
    let o = greenwave(&args);
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    (
        v["throughput_veh"].as_u64().unwrap(),
        v["mean_delay_s"].as_f64().unwrap(),
        stderr,
    )
}

/// A scenario given as a `.sumocfg` runs as with its files given one by one (the fixture's
/// own `single.sumocfg`, relative names); a configuration's traffic options reach SUMO
/// (`<scale value="0.4"/>` cuts the demand) unless `--sumo-args` gives them too (`--scale
/// 1` puts it back); what greenwave sets itself (an output, the end, the TraCI port) is
/// left out, by name, and never written.
#[test]
fn a_sumocfg_gives_the_files_and_the_traffic_options() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let d = tmp("sumocfg");
    std::fs::create_dir_all(&d).unwrap();
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let scaled = scaled_sumocfg(&d, &net, &routes);
    let sim = sim_600s_fixed_time;
    let (net_s, routes_s) = (net.to_str().unwrap(), routes.to_str().unwrap());
    let base = sim(&["--net", net_s, "--routes", routes_s]);
    let own = sim(&["--sumocfg", fixture("single.sumocfg").to_str().unwrap()]);
    assert_eq!((own.0, own.1), (base.0, base.1), "{}", own.2);
    let cut = sim(&["--sumocfg", scaled.to_str().unwrap()]);
    assert!(
        (cut.0 as f64) < 0.6 * base.0 as f64,
        "scale 0.4: {} of {} vehicles through",
        cut.0,
        base.0
    );
    assert!(
        cut.2
            .contains("not used (greenwave sets these itself): end, tripinfo-output, remote-port"),
        "{}",
        cut.2
    );
    assert!(
        !d.join("mine.xml").exists(),
        "the config's output was written"
    );
    let back = sim(&[
        "--sumocfg",
        scaled.to_str().unwrap(),
        "--sumo-args",
        "--scale 1",
    ]);
    assert_eq!((back.0, back.1), (base.0, base.1));
    // Demand in additional files only, as SUMO's game `square` has it: it runs. Without a
    // configuration, --routes is still required.
    let in_additional = d.join("in-additional.sumocfg");
    std::fs::write(
        &in_additional,
        format!(
            r#"<configuration><net-file value="{}"/><additional-files value="{}"/></configuration>"#,
            net.display(),
            routes.display()
        ),
    )
    .unwrap();
    let extra = sim(&["--sumocfg", in_additional.to_str().unwrap()]);
    assert!(
        extra.0 as f64 > 0.8 * base.0 as f64,
        "{} of {}",
        extra.0,
        base.0
    );
    let o = greenwave(&["sim", "--backend", "sumo", "--net", net_s]);
    assert!(failed(&o).contains("--routes FILE.rou.xml"));
    let o = greenwave(&["sim", "--sumocfg", scaled.to_str().unwrap()]);
    assert!(failed(&o).contains("add `--backend sumo`"));
    std::fs::write(&scaled, "<routes/>").unwrap();
    let o = greenwave(&[
        "sim",
        "--backend",
        "sumo",
        "--sumocfg",
        scaled.to_str().unwrap(),
    ]);
    let err = failed(&o);
    assert!(
        err.contains("scaled.sumocfg") && err.contains("<routes>"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// `--step-length` reaches SUMO: the same traffic under the net's program at half-second
/// steps moves differently (SUMO's car-following and insertion run per step), a step the
/// decision interval is no whole number of is refused, naming both, and the embedded
/// simulator refuses the option.
#[test]
fn the_step_length_reaches_sumo_and_must_divide_the_decision_interval() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let (net_s, routes_s) = (net.to_str().unwrap(), routes.to_str().unwrap());
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--backend",
            "sumo",
            "--net",
            net_s,
            "--routes",
            routes_s,
            "--controller",
            "max-pressure",
            "--seconds",
            "600",
            "--json",
        ];
        args.extend(extra);
        greenwave(&args)
    };
    let delay = |o: &std::process::Output| -> f64 {
        let v: serde_json::Value = serde_json::from_str(&ok(o)).unwrap();
        v["mean_delay_s"].as_f64().unwrap()
    };
    let whole = delay(&sim(&[]));
    assert_eq!(whole, delay(&sim(&["--step-length", "1"])));
    let half = delay(&sim(&["--step-length", "0.5"]));
    assert!(half.is_finite() && half > 0.0, "{half}");
    assert_ne!(half, whole, "--step-length 0.5 changed nothing");
    let err = failed(&sim(&["--step-length", "0.3"]));
    assert!(
        err.contains("decision_interval_s = 5 s is not a multiple of the SUMO step length 0.3 s"),
        "{err}"
    );
    let o = greenwave(&["sim", "--step-length", "0.5"]);
    assert!(failed(&o).contains("add `--backend sumo`"));
}

/// A begin past the routes' last departure runs, but says that no vehicle entered (its
/// delays of 0 s say nothing); a begin past TraCI's "forever" (2^30 s) is refused by name
/// before SUMO starts.
#[test]
fn a_begin_past_the_demand_is_noted_and_one_past_tracis_forever_refused() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let (net, routes) = (fixture("single.net.xml"), fixture("single.rou.xml"));
    let files = [
        "--net",
        net.to_str().unwrap(),
        "--routes",
        routes.to_str().unwrap(),
    ];
    let (throughput, _, said) = sim_600s_fixed_time(&[&files[..], &["--begin", "100000"]].concat());
    assert_eq!(throughput, 0);
    assert!(said.contains("no vehicle entered"), "{said}");
    let (throughput, _, said) = sim_600s_fixed_time(&files);
    assert!(
        throughput > 0 && !said.contains("no vehicle entered"),
        "{said}"
    );
    let mut late = vec!["sim", "--backend", "sumo", "--begin", "1e12"];
    late.extend(files);
    let err = failed(&greenwave(&late));
    assert!(err.contains("TraCI's \"forever\""), "{err}");
}
