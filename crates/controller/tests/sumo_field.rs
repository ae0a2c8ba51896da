//! The controller on a SUMO field (feature `sumo`, SUMO 1.28 at run time): a scenario from
//! its `.sumocfg`, run as a cabinet would when its policy is refused, on each light's own
//! program. Without SUMO the test skips, saying why, except under CI (`CI` set), where
//! that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use greenwave_runtime::bundle;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sim/fixtures/sumo")
        .join(name)
}

/// `--sumocfg` (the fixture's own `single.sumocfg`: its net and routes) with no bundle to
/// run: every decision is the fallback's, which is the light's own program (42 s + 42 s),
/// so the field runs as SUMO runs that program; `--sumo-begin` moves the start, and a
/// `--sumo-*` option without a field is refused.
#[test]
fn a_sumocfg_field_runs_the_lights_own_program_when_no_policy_is_loaded() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("gw-ctl-sumo-field-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (keys, _) = bundle::keygen(&dir.join("keys/site"), false).unwrap();
    let run = |log: &str, extra: &[&str]| -> serde_json::Value {
        let cfg = fixture("single.sumocfg");
        let log_dir = dir.join(log);
        let mut args = vec![
            "run",
            "--bundle",
            "/nonexistent/bundle",
            "--trust",
            keys.public.to_str().unwrap(),
            "--log-dir",
            log_dir.to_str().unwrap(),
            "--sumocfg",
            cfg.to_str().unwrap(),
            "--seconds",
            "600",
            "--json",
        ];
        args.extend(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = run("log", &[]);
    assert_eq!(v["policy"]["loaded"], false);
    let decisions = v["decisions"].as_u64().unwrap();
    assert!(decisions > 0);
    assert_eq!(v["fallback_decisions"].as_u64(), Some(decisions));
    assert_eq!(v["transitions_committed"].as_u64(), Some(decisions));
    assert!(v["throughput_veh"].as_u64().unwrap() > 50, "{v}");
    // SUMO running the program itself, on the controller's seed (0) and length.
    let mut cfg =
        greenwave_sim::sumo::SumoConfig::new(fixture("single.net.xml"), fixture("single.rou.xml"));
    cfg.seconds = 600.0;
    let own = greenwave_sim::sumo::run_static_program(cfg).unwrap();
    let delay = v["mean_delay_s"].as_f64().unwrap();
    assert!(
        (delay - own.mean_delay_s).abs() < 0.25 * own.mean_delay_s,
        "fallback {delay} s, the program in SUMO {} s",
        own.mean_delay_s
    );
    // Actuated on the program's greens (1.5 × as max greens) also runs every decision.
    let actuated = run("log-actuated", &["--fallback", "actuated"]);
    assert_eq!(actuated["fallback_decisions"], actuated["decisions"]);
    assert_ne!(actuated["mean_delay_s"], v["mean_delay_s"], "another rule");
    // Starting later shifts the demand the field sees.
    let later = run("log-later", &["--sumo-begin", "300"]);
    assert_ne!(later["throughput_veh"], v["throughput_veh"]);
    let out = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
        .args(["run", "--bundle", "b", "--trust", "k", "--log-dir", "l"])
        .args(["--sumo-begin", "5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sumo-net"));
    let _ = std::fs::remove_dir_all(dir);
}
