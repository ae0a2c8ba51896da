//! The `greenwave` binary, run as a user would.

mod common;

use std::process::Output;

use common::{greenwave, ok};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn sim_json_has_the_promised_fields() {
    let o = greenwave(&[
        "sim",
        "--scenario",
        "single-4way",
        "--controller",
        "max-pressure",
        "--seconds",
        "600",
        "--seed",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    for key in [
        "mean_delay_s",
        "mean_wait_s",
        "mean_travel_time_s",
        "throughput_veh",
        "backlog_veh",
        "sim_seconds",
        "wall_seconds",
    ] {
        assert!(v.get(key).is_some_and(|x| x.is_number()), "{key} in {v}");
    }
    assert_eq!(v["sim_seconds"], 600.0);
    assert_eq!(v["controller"], "max-pressure");
    assert_eq!(v["scenario"], "single-4way");
    assert_eq!(v["seed"], 3);
}

#[test]
fn sim_compares_all_controllers_side_by_side() {
    let o = greenwave(&["sim", "--scenario", "single-4way", "--seconds", "300"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    for name in ["fixed-time", "actuated", "max-pressure"] {
        assert!(table.contains(name), "{table}");
    }
    let o = greenwave(&[
        "sim",
        "--scenario",
        "single-4way",
        "--demand",
        "shifted",
        "--controller",
        "all",
        "--seconds",
        "300",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["demand"], "shifted");
    let runs = v["controllers"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r["mean_delay_s"].is_number()));
}

/// Five seconds are too short for any trip through single-4way: the table shows no mean
/// travel time (a dash), not a mean of 0 over no vehicles.
#[test]
fn sim_shows_no_travel_time_where_no_trip_finished() {
    let o = greenwave(&["sim", "--scenario", "single-4way", "--seconds", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("max-pressure"))
        .collect();
    assert_eq!(rows.len(), 1, "{table}");
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        (cells[3], cells[4]),
        ("–", "0"),
        "travel, throughput: {table}"
    );
}

#[test]
fn sim_is_deterministic_per_seed() {
    let run = || {
        let o = greenwave(&[
            "sim",
            "--scenario",
            "arterial-3",
            "--controller",
            "actuated",
            "--seconds",
            "300",
            "--json",
        ]);
        let mut v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["wall_seconds"] = 0.into();
        v
    };
    assert_eq!(run(), run());
}

#[test]
fn sim_reports_bad_input_with_context() {
    let o = greenwave(&["sim", "--scenario", "nowhere-4way"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("loading scenario `nowhere-4way`") && err.contains("single-4way"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("greenwave-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.toml");
    std::fs::write(
        &path,
        "name = \"broken\"\n\n[[links]]\nid = \"a\"\nlength_m = -5\n",
    )
    .unwrap();
    let o = greenwave(&["sim", "--scenario", path.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("broken.toml"), "{err}");

    let o = greenwave(&["sim", "--demand", "evening"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("evening"), "{}", stderr(&o));

    let o = greenwave(&["sim", "--controller", "smart"]);
    assert!(!o.status.success());
}

#[test]
fn sim_prints_the_scenario_file() {
    let o = greenwave(&["sim", "--scenario", "grid-4x4", "--print-scenario"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("name = \"grid-4x4\"") && text.contains("[[signals]]"));
}

/// The simulator options are shared by `sim`, `train` and `eval`; SUMO's options without
/// `--backend sumo` are refused rather than ignored.
#[test]
fn sumo_options_need_backend_sumo() {
    for cmd in [
        vec!["sim"],
        vec!["train", "--out", "/nonexistent/greenwave-run"],
        vec!["eval", "--model", "/nonexistent/policy.onnx"],
    ] {
        let mut args = cmd.clone();
        args.extend(["--net", "x.net.xml", "--routes", "x.rou.xml"]);
        let o = greenwave(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            stderr(&o).contains("--backend sumo"),
            "{args:?}: {}",
            stderr(&o)
        );
        // `--backend sumo` needs both files, and takes no embedded scenario.
        let mut args = cmd.clone();
        args.extend(["--backend", "sumo", "--net", "x.net.xml"]);
        let o = greenwave(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains("--routes"), "{args:?}: {}", stderr(&o));
    }
    for cmd in ["train", "eval"] {
        let o = greenwave(&[
            cmd,
            "--scenario",
            "arterial-3",
            "--backend",
            "sumo",
            "--net",
            "x.net.xml",
            "--routes",
            "x.rou.xml",
        ]);
        assert!(!o.status.success(), "{cmd}");
        assert!(
            stderr(&o).contains("cannot be used with"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
}

/// Without feature `sumo`, `--backend sumo` says how to rebuild.
#[cfg(not(feature = "sumo"))]
#[test]
fn backend_sumo_without_the_feature_says_how_to_rebuild() {
    for cmd in [
        vec!["sim"],
        vec!["train", "--out", "/nonexistent/greenwave-run"],
        vec!["eval", "--model", "/nonexistent/policy.onnx"],
    ] {
        let mut args = cmd;
        args.extend([
            "--backend",
            "sumo",
            "--net",
            "x.net.xml",
            "--routes",
            "x.rou.xml",
        ]);
        let o = greenwave(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = stderr(&o);
        assert!(err.contains("--features sumo"), "{args:?}: {err}");
    }
}

/// `greenwave site` writes a site configuration the controller's reader accepts, with the
/// scenario's plan and Webster fallback, and refuses an unknown scenario by name.
#[test]
fn site_writes_what_the_controller_reads() {
    let dir = std::env::temp_dir().join(format!("gw-site-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("site.toml");
    let _ = std::fs::remove_file(&out);
    let o = greenwave(&[
        "site",
        "--scenario",
        "single-4way",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let site = greenwave_runtime::site::SiteConfig::load(&out).unwrap();
    let scenario = greenwave_sim::load("single-4way").unwrap();
    assert_eq!(site.signals.len(), 1);
    assert_eq!(site.signals[0].plan.hash(), scenario.plans()[0].hash());
    assert_eq!(site.decision_interval_ms, scenario.decision_interval().0);
    let webster = greenwave_sim::controllers::FixedTime::webster(&scenario);
    assert_eq!(site.signals[0].fixed_cycle, webster.plans()[0].stages);
    // A cabinet's file (edited by hand, say) is replaced only with --force.
    std::fs::write(&out, "# edited at the cabinet\n").unwrap();
    let args = [
        "site",
        "--scenario",
        "single-4way",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = greenwave(&args);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "# edited at the cabinet\n"
    );
    let o = greenwave(&[&args[..], &["--force"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    greenwave_runtime::site::SiteConfig::load(&out).unwrap();
    let o = greenwave(&[
        "site",
        "--scenario",
        "no-such-place",
        "--out",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no-such-place"), "{}", stderr(&o));
}

/// `greenwave train` for `steps` decisions of a tiny policy (2 environments × 60
/// decisions an iteration, 8-wide layers) into `out`, quietly.
fn tiny_train<'a>(steps: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "--steps",
        steps,
        "--rollout-steps",
        "60",
        "--envs",
        "2",
        "--hidden",
        "8,8",
        "--quiet",
        "--out",
        out,
    ]
}

#[test]
fn train_records_whether_it_anneals_the_entropy_bonus() {
    for (flag, annealed) in [(Some("--anneal-ent-coef"), true), (None, false)] {
        let run = common::tmp(&format!("anneal-ent-{annealed}"));
        let mut args = tiny_train("240", run.to_str().unwrap());
        args.extend(flag);
        ok(&greenwave(&args));
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            info["config"]["ppo"]["anneal_ent_coef"].as_bool(),
            Some(annealed),
            "{flag:?}"
        );
        let _ = std::fs::remove_dir_all(&run);
    }
}

#[test]
fn train_stops_at_its_time_limit_and_refuses_a_bad_one() {
    let run = common::tmp("time-limit");
    let out = run.to_str().unwrap();
    let args = |limit: &'static str| {
        let mut a = tiny_train("480", out);
        a.extend(["--episode-seconds", "600", "--time-limit-min", limit]);
        a
    };
    // 60 µs: spent before the first checkpoint (iteration 2 of 4: 600 s episodes of 5 s
    // decisions end every 120 decisions).
    let o = ok(&greenwave(&args("0.000001")));
    assert!(
        o.contains("stopped by the time limit at iteration 2 of 4"),
        "{o}"
    );
    for bad in ["0", "1e9", "NaN", "inf", "soon"] {
        let o = greenwave(&args(bad));
        assert!(!o.status.success(), "{bad} was taken");
        let err = stderr(&o);
        assert!(err.contains("--time-limit-min"), "{bad}: {err}");
    }
    let _ = std::fs::remove_dir_all(&run);
}

/// A fresh run never replaces an earlier one in the same folder: without `--resume` the
/// second `train` is refused by name and the first run's weights stay as they were.
#[test]
fn train_refuses_to_replace_an_earlier_run() {
    let run = common::tmp("train-twice");
    let out = run.to_str().unwrap();
    ok(&greenwave(&tiny_train("240", out)));
    let weights = std::fs::read(run.join("policy.safetensors")).unwrap();
    let mut again = tiny_train("240", out);
    again.extend(["--seed", "2"]);
    let o = greenwave(&again);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("already holds a training run"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(run.join("policy.safetensors")).unwrap(),
        weights
    );
    let _ = std::fs::remove_dir_all(&run);
}

/// Settings that can only give NaN weights are refused before training starts.
#[test]
fn train_refuses_a_learning_rate_or_target_kl_that_is_not_a_positive_number() {
    for (flag, value) in [
        ("--learning-rate", "nan"),
        ("--learning-rate", "inf"),
        ("--learning-rate", "-1"),
        ("--target-kl", "nan"),
        ("--target-kl", "-1"),
    ] {
        let run = common::tmp("train-bad-rate");
        let set = format!("{flag}={value}");
        let mut args = tiny_train("240", run.to_str().unwrap());
        args.push(&set);
        let o = greenwave(&args);
        assert!(!o.status.success(), "{flag} {value} was accepted");
        assert!(stderr(&o).contains(flag), "{flag} {value}: {}", stderr(&o));
        let _ = std::fs::remove_dir_all(&run);
    }
}

/// A reader of standard output that has gone (`greenwave sim --json | head -c1`) costs the
/// rest of the report, never a panic or the command's own exit status.
#[test]
fn a_reader_that_went_away_stops_no_command() {
    for args in [
        &[
            "sim",
            "--scenario",
            "single-4way",
            "--seconds",
            "60",
            "--json",
        ][..],
        &["sim", "--scenario", "single-4way", "--seconds", "60"][..],
        &["sim", "--scenario", "single-4way", "--print-scenario"][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // gone before the command writes a byte
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_greenwave"))
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A model that is not there is named as given, with the per-signal export looked for
/// beside it.
#[test]
fn eval_names_a_missing_model_as_given() {
    let missing = std::env::temp_dir().join("gw-no-such-model.onnx");
    let o = greenwave(&["eval", "--model", missing.to_str().unwrap(), "--seeds", "1"]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("no policy at") && err.contains("gw-no-such-model.onnx,"),
        "{err}"
    );
    assert!(err.contains("gw-no-such-model.center.onnx"), "{err}");
}

/// A damaged run.json is named when exporting (it said only "EOF while parsing a value").
#[test]
fn export_names_a_damaged_run_json() {
    let run = std::env::temp_dir().join(format!("gw-damaged-run-{}", std::process::id()));
    std::fs::create_dir_all(&run).unwrap();
    for text in ["", "{\"steps\": -"] {
        std::fs::write(run.join("run.json"), text).unwrap();
        let out = run.join("p.onnx");
        let o = greenwave(&[
            "export",
            run.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains("parsing"), "{err}");
        assert!(err.contains("run.json"), "{err}");
    }
    let _ = std::fs::remove_dir_all(run);
}
