//! The README's workstation commands, run as a user would: train → export → eval, and the
//! demo at smoke-test size.

mod common;

use common::{failed, greenwave, ok, tmp};

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
    // `greenwave plot` redraws the curves from metrics.csv (a run stopped early).
    for f in ["training.png", "losses.png"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    ok(&greenwave(&["plot", run_s]));
    for f in ["training.png", "losses.png"] {
        assert!(run.join(f).exists(), "{f} not redrawn by greenwave plot");
    }
    let o = greenwave(&["plot", d.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no metrics.csv"),
        "{o:?}"
    );
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

#[test]
fn demo_quick_writes_a_report() {
    let d = tmp("demo");
    let out = ok(&greenwave(&[
        "demo",
        "--quick",
        "--steps",
        "1200",
        "--seeds",
        "1",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(out.contains("report:"), "{out}");
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
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn the_committed_default_policy_loads_and_beats_fixed_time() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/single-4way.onnx");
    let out = ok(&greenwave(&[
        "eval",
        "--model",
        model,
        "--scenario",
        "single-4way",
        "--seeds",
        "1",
        "--json",
    ]));
    let delay = |name: &str| -> f64 {
        out.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["controller"] == name)
            .and_then(|r| r["mean_delay_s"].as_f64())
            .unwrap()
    };
    assert!(delay("policy") < delay("fixed-time"), "{out}");
}

/// Mixed junction layouts: `--policy` defaults to `shared` there, `--policy mlp` is refused
/// with the reason, and export writes one model per signal, named by signal id.
#[test]
fn mixed_layouts_train_a_shared_policy_and_export_per_signal() {
    let d = tmp("mixed");
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/scenarios/arterial-mixed.toml"
    );
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
