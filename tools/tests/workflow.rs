//! The README's workstation commands, run as a user would: train → export → eval, and the
//! demo at smoke-test size.

mod common;

use common::{failed, greenwave, ok, tmp};
use std::collections::HashMap;
use std::path::Path;

/// A scenario file of tools/tests/scenarios.
fn test_scenario(name: &str) -> String {
    format!("{}/tests/scenarios/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// `greenwave plot` redraws the curves of `run` from its metrics.csv (a run stopped
/// early), and refuses a folder with none (`not_a_run`).
fn plot_redraws_the_curves(run: &Path, not_a_run: &Path) {
    for f in ["training.png", "losses.png"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    ok(&greenwave(&["plot", run.to_str().unwrap()]));
    for f in ["training.png", "losses.png"] {
        assert!(run.join(f).exists(), "{f} not redrawn by greenwave plot");
    }
    let o = greenwave(&["plot", not_a_run.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no metrics.csv"),
        "{o:?}"
    );
    // A metrics.csv cut off mid-row (a run killed while writing it) is named, line and
    // all, not a panic; the curves drawn before stay.
    let csv = run.join("metrics.csv");
    let text = std::fs::read_to_string(&csv).unwrap();
    let drawn = std::fs::read(run.join("training.png")).unwrap();
    std::fs::write(&csv, &text[..text.len() - 20]).unwrap();
    let o = greenwave(&["plot", run.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cut off mid-write") && err.contains("metrics.csv: line"),
        "{err}"
    );
    assert_eq!(std::fs::read(run.join("training.png")).unwrap(), drawn);
    std::fs::write(&csv, text).unwrap();
}

#[test]
fn train_export_eval() {
    let d = tmp("tee");
    let run = d.join("run");
    let model = d.join("models/tiny.onnx");
    let (run_s, model_s) = (run.to_str().unwrap(), model.to_str().unwrap());
    ok(&greenwave(&[
        "train",
        "--scenario",
        "single-4way",
        "--steps",
        "2000",
        "--seed",
        "3",
        "--out",
        run_s,
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--hidden",
        "16,16",
        "--quiet",
    ]));
    for f in [
        "metrics.csv",
        "training.png",
        "losses.png",
        "policy.safetensors",
        "run.json",
        "scenario.toml",
    ] {
        assert!(run.join(f).exists(), "{f} missing from the run folder");
    }
    plot_redraws_the_curves(&run, &d);
    let out = ok(&greenwave(&["export", run_s, "--out", model_s]));
    assert!(out.contains("tiny.onnx"));
    for f in [
        "tiny.onnx",
        "tiny.blob",
        "tiny.int8.blob",
        "tiny.manifest.json",
    ] {
        assert!(d.join("models").join(f).exists(), "{f} missing");
    }
    let out = ok(&greenwave(&[
        "eval",
        "--model",
        model_s,
        "--scenario",
        "single-4way",
        "--seeds",
        "2",
        "--seconds",
        "600",
        "--json",
    ]));
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["controller"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["policy", "fixed-time", "actuated", "max-pressure"]);
    for r in &rows {
        for k in [
            "mean_delay_s",
            "mean_wait_s",
            "mean_travel_time_s",
            "throughput_veh",
            "backlog_veh",
            "sim_seconds",
            "wall_seconds",
        ] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
    }
    // A policy for another plan is refused, naming both plans.
    let o = greenwave(&[
        "eval",
        "--model",
        model_s,
        "--scenario",
        "arterial-3",
        "--seeds",
        "1",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("trained for phase plan") || err.contains("layout"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A per-signal MLP trained on signals of one layout but two plans (J3 keeps a shorter
/// max green) is exported once per signal, each manifest bound to its own plan, and `eval`
/// runs the exports together; a single file bound to one plan is refused on the signal
/// whose plan it is not, naming that signal (as a controller refuses it).
#[test]
fn an_mlp_for_signals_of_two_plans_is_exported_per_signal() {
    let d = tmp("two-plans");
    let scenario = &test_scenario("arterial-two-timings");
    let run = d.join("run");
    let run_s = run.to_str().unwrap();
    ok(&greenwave(&[
        "train",
        "--scenario",
        scenario,
        "--policy",
        "mlp",
        "--steps",
        "1200",
        "--seed",
        "3",
        "--out",
        run_s,
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--hidden",
        "8,8",
        "--quiet",
    ]));
    let model = d.join("models/two.onnx");
    let out = ok(&greenwave(&[
        "export",
        run_s,
        "--out",
        model.to_str().unwrap(),
    ]));
    assert!(out.contains("one export per signal"), "{out}");
    assert!(!model.exists(), "no single file for signals of two plans");
    let manifest = |id: &str| -> serde_json::Value {
        let path = d.join(format!("models/two.{id}.manifest.json"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let (j1, j3) = (manifest("J1"), manifest("J3"));
    assert_ne!(j1["plan_hash"], j3["plan_hash"]);
    assert_eq!(manifest("J2")["plan_hash"], j1["plan_hash"]);
    assert_eq!(j3["phase_timing"][0]["max_green_ms"], 50_000);
    assert_eq!(j3["provenance"]["details"]["policy"], "mlp");
    assert_eq!(j3["provenance"]["details"]["signal_id"], "J3");
    let eval = |model: &std::path::Path| {
        greenwave(&[
            "eval",
            "--model",
            model.to_str().unwrap(),
            "--scenario",
            scenario,
            "--seeds",
            "1",
            "--seconds",
            "300",
            "--json",
        ])
    };
    let rows = ok(&eval(&model));
    assert!(
        rows.lines().next().unwrap().contains("\"policy\""),
        "{rows}"
    );
    // J1's export alone, as one file for all three signals: refused on J3.
    let single = d.join("models/two.J1.onnx");
    let err = failed(&eval(&single));
    assert!(
        err.contains("signal 'J3'") && err.contains("exported once per signal"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn demo_quick_writes_a_report() {
    let d = tmp("demo");
    let o = greenwave(&[
        "demo",
        "--quick",
        "--seeds",
        "1",
        "--out",
        d.to_str().unwrap(),
    ]);
    let out = ok(&o);
    assert!(out.contains("report:"), "{out}");
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains("(2000 decisions)"),
        "--quick trains its own budget: {said}"
    );
    let report = d.join("report");
    for f in [
        "README.md",
        "training.png",
        "delay_by_controller.png",
        "queue_over_time.png",
    ] {
        assert!(report.join(f).exists(), "{f} missing from the report");
    }
    let md = std::fs::read_to_string(report.join("README.md")).unwrap();
    assert!(md.contains("| max-pressure |") && md.contains("| policy |"));
    assert!(md.contains("policy / best classic controller ("), "{md}");
    let _ = std::fs::remove_dir_all(d);
}

/// The policy committed for the demo scenario.
const COMMITTED_POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/single-4way.onnx");

/// `greenwave eval --json` of the committed policy on `single-4way`, one seed, with
/// `extra` flags: each controller's row by name (wall time taken out), and stderr.
fn eval_committed(extra: &[&str]) -> (HashMap<String, serde_json::Value>, String) {
    let base = [
        "eval",
        "--model",
        COMMITTED_POLICY,
        "--scenario",
        "single-4way",
        "--seeds",
        "1",
        "--json",
    ];
    let o = greenwave(&[&base[..], extra].concat());
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    let rows = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let mut r: serde_json::Value = serde_json::from_str(l).unwrap();
            r.as_object_mut().unwrap().remove("wall_seconds");
            (r["controller"].as_str().unwrap().to_string(), r)
        })
        .collect();
    (rows, stderr)
}

#[test]
fn the_committed_default_policy_loads_and_beats_fixed_time() {
    let (rows, stderr) = eval_committed(&[]);
    let delay = |name: &str| rows[name]["mean_delay_s"].as_f64().unwrap();
    assert!(delay("policy") < delay("fixed-time"), "{rows:?}");
    // The verdict against the best classic controller goes to stderr beside the JSON rows,
    // with the warning exactly where the policy is no faster than that controller.
    let best = ["fixed-time", "actuated", "max-pressure"]
        .map(delay)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    assert!(
        stderr.contains("policy / best classic controller ("),
        "{stderr}"
    );
    assert_eq!(
        stderr.contains("no faster"),
        delay("policy") >= best,
        "{stderr}"
    );
}

/// `eval --temperature` samples the policy's phases, reproducibly per sampling seed; a
/// temperature near 0 is the greedy rule again, and a temperature that is not positive is
/// refused by name.
#[test]
fn eval_samples_the_policy_at_a_temperature_reproducibly() {
    let policy = |extra: &[&str]| {
        let (mut rows, stderr) = eval_committed(&[&["--seconds", "900"][..], extra].concat());
        let sampled = stderr.contains("samples its phases at temperature");
        assert_eq!(sampled, !extra.is_empty(), "{stderr}");
        let mut row = rows.remove("policy").unwrap();
        // The JSON row says how the policy acted.
        let t = row.as_object_mut().unwrap().remove("temperature");
        assert_eq!(t.is_some(), sampled, "{row}");
        // The committed policy is greedy: a draw is not its manifest's rule.
        let off = row.as_object_mut().unwrap().remove("overrides_manifest");
        assert_eq!(off.is_some(), sampled, "{row}");
        assert!(rows.values().all(|r| r.get("temperature").is_none()));
        row
    };
    let greedy = policy(&[]);
    let hot = policy(&["--temperature", "1", "--sample-seed", "3"]);
    assert_eq!(hot, policy(&["--temperature", "1", "--sample-seed", "3"]));
    assert_ne!(hot, greedy, "sampling at temperature 1 changed nothing");
    assert_eq!(policy(&["--temperature", "1e-6"]), greedy);
    for bad in ["0", "-1", "NaN", "inf"] {
        let flag = format!("--temperature={bad}");
        let o = greenwave(&["eval", "--model", COMMITTED_POLICY, "--seeds", "1", &flag]);
        assert!(!o.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        let want = format!("temperature {bad}: it must be a positive, finite number");
        assert!(err.contains(&want), "{err}");
    }
}

/// Mixed junction layouts: `--policy` defaults to `shared` there, `--policy mlp` is refused
/// with the reason, and export writes one model per signal, named by signal id.
#[test]
fn mixed_layouts_train_a_shared_policy_and_export_per_signal() {
    let d = tmp("mixed");
    let scenario = &test_scenario("arterial-mixed");
    let run = d.join("run");
    let run_s = run.to_str().unwrap();
    let common = [
        "train",
        "--scenario",
        scenario,
        "--steps",
        "1200",
        "--envs",
        "2",
        "--rollout-steps",
        "60",
        "--hidden",
        "8,8",
        "--episode-seconds",
        "300",
        "--quiet",
        "--out",
    ];
    let err = failed(&greenwave(
        &[&common[..], &[run_s, "--policy", "mlp"]].concat(),
    ));
    assert!(err.contains("different observation layouts"), "{err}");
    ok(&greenwave(&[&common[..], &[run_s]].concat()));
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(info["config"]["policy"], "shared");
    assert_eq!(info["signal_ids"], serde_json::json!(["J1", "J2"]));
    let model = d.join("models/m.onnx");
    let out = ok(&greenwave(&[
        "export",
        run_s,
        "--out",
        model.to_str().unwrap(),
    ]));
    for id in ["J1", "J2"] {
        for ext in ["onnx", "blob", "int8.blob", "manifest.json"] {
            let f = d.join(format!("models/m.{id}.{ext}"));
            assert!(f.exists(), "{} missing; export said: {out}", f.display());
        }
    }
    let zs = d.join("models/zs.onnx");
    ok(&greenwave(&[
        "export",
        run_s,
        "--out",
        zs.to_str().unwrap(),
        "--scenario",
        "single-4way",
    ]));
    assert!(d.join("models/zs.center.onnx").exists());
    let _ = std::fs::remove_dir_all(&d);
}
