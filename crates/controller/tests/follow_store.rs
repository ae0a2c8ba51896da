//! `greenwave-controller run --store`: the controller follows the policy store while it
//! runs. A fine-tuned version is switched in under the live KPI watch once a whole window
//! of KPIs is recorded before it; a worse one is rolled back in the controller and in the
//! store (`watch-rollback`, with the evidence), an equally good one is kept
//! (`watch-kept`); a restart runs a judged version at once and an unjudged one only after
//! its predecessor, under the watch; a version failing its checks is refused and the
//! running policy stays.
//!
//! The field: the `finetune-shift` scenario (single-4way's junction and plan, steady
//! demand, so windows before and after a switch are comparable), the project's trained
//! `models/single-4way.onnx` as version 1.

#[path = "../../runtime/tests/common/mod.rs"]
mod common;
mod keyed;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tmp;
use greenwave_finetune::PolicyStore;
use greenwave_runtime::bundle;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

type Site = keyed::StoreSite;

fn site(name: &str) -> Site {
    keyed::store_site(name)
}

fn install(s: &Site, v: u32, parent: u32, always_first: bool) {
    s.install(v, parent, always_first)
}

/// Runs the controller on the store for `seconds` of the scenario; returns the report.
fn run(s: &Site, seconds: u32, tag: &str) -> Value {
    let p = |x: &Path| x.to_str().unwrap().to_string();
    let scenario = repo().join("crates/runtime/scenarios/finetune-shift.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
        .args([
            "run",
            "--store",
            &p(&s.store),
            "--trust",
            &p(&s.keyed.site_pub),
            "--trust",
            &p(&s.keyed.own_pub),
            "--scenario",
            &p(&scenario),
            "--seed",
            "11",
            "--log-dir",
            &p(&s.keyed.dir.join(format!("log-{tag}"))),
            "--seconds",
            &seconds.to_string(),
            // Simulated time: a slow inference on a busy host must not change the run.
            "--inference-budget-ms",
            "60000",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tag}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{tag}: {e}: {stderr}"))
}

fn current(s: &Site) -> PathBuf {
    PolicyStore::attach(&s.store)
        .unwrap()
        .current()
        .unwrap()
        .unwrap()
}

fn events(s: &Site) -> Vec<String> {
    let store = PolicyStore::attach(&s.store).unwrap();
    store
        .history()
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect()
}

fn switches(j: &Value) -> Vec<(u64, Option<u64>, u64, bool)> {
    j["store"]["switches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["at_ms"].as_u64().unwrap(),
                w["from_version"].as_u64(),
                w["to_version"].as_u64().unwrap(),
                w["watched"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_worse_fine_tuned_version_is_rolled_back_in_the_controller_and_the_store() {
    let s = site("follow-worse");
    install(&s, 2, 1, true);
    let j = run(&s, 4200, "worse");
    let store = &j["store"];
    assert_eq!(store["current_unjudged_at_start"], true, "{store}");
    assert_eq!(j["policy"]["policy_version"], 1, "started on v1: {store}");
    let sw = switches(&j);
    assert_eq!(sw.len(), 2, "{store}");
    // In once a whole 30-minute window was recorded (a poll every 10 s), watched; out at
    // the end of its own window.
    let (at, from, to, watched) = sw[0];
    assert!((1_800_000..=1_810_000).contains(&at), "{store}");
    assert_eq!((from, to, watched), (Some(1), 2, true), "{store}");
    let (back, from, to, _) = sw[1];
    assert!(back >= at + 1_800_000 && back <= at + 1_810_000, "{store}");
    assert_eq!((from, to), (Some(2), 1), "{store}");
    let verdict = &j["controller"]["rollback_events"][0];
    assert_eq!(verdict["rolled_back"], true, "{verdict}");
    assert_eq!(store["recorded"][0], "watch-rollback v2 -> v1", "{store}");
    assert!(store["errors"].as_array().unwrap().is_empty(), "{store}");
    // The store runs v1 again, with the evidence in its history.
    assert!(current(&s).ends_with("versions/v000001"));
    let history = PolicyStore::attach(&s.store).unwrap().history().unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.event, "watch-rollback");
    assert_eq!((last.from_version, last.to_version), (Some(2), Some(1)));
    assert!(last.detail.contains("\"queue\""), "{}", last.detail);

    // A restart runs v1 at once (judged), with nothing to switch to.
    let j = run(&s, 600, "restart");
    assert_eq!(j["store"]["current_unjudged_at_start"], false);
    assert_eq!(j["policy"]["policy_version"], 1);
    assert!(switches(&j).is_empty(), "{}", j["store"]);
}

#[test]
fn an_equally_good_version_is_kept_and_a_restart_mid_watch_watches_it_again() {
    let s = site("follow-kept");
    install(&s, 2, 1, false);
    // Stopped before the verdict: nothing recorded, so the restart starts on v1 again.
    let j = run(&s, 2400, "cut-short");
    assert_eq!(switches(&j).len(), 1, "{}", j["store"]);
    assert!(j["store"]["recorded"].as_array().unwrap().is_empty());
    let j = run(&s, 4200, "kept");
    assert_eq!(j["store"]["current_unjudged_at_start"], true);
    assert_eq!(j["policy"]["policy_version"], 1);
    let sw = switches(&j);
    assert_eq!(sw.len(), 1, "{}", j["store"]);
    assert_eq!((sw[0].1, sw[0].2, sw[0].3), (Some(1), 2, true));
    assert_eq!(j["controller"]["rollback_events"][0]["rolled_back"], false);
    assert_eq!(j["store"]["recorded"][0], "watch-kept v2");
    assert!(current(&s).ends_with("versions/v000002"));
    assert_eq!(events(&s), ["adopt", "finetune-accepted", "watch-kept"]);
    // Judged now: a restart runs v2 at once.
    let j = run(&s, 600, "restart");
    assert_eq!(j["store"]["current_unjudged_at_start"], false);
    assert_eq!(j["policy"]["policy_version"], 2);
    assert!(switches(&j).is_empty());
}

#[test]
fn a_version_that_fails_its_checks_is_refused_and_the_running_one_stays() {
    let s = site("follow-tampered");
    install(&s, 2, 1, false);
    keyed::tamper(&s.store.join("versions/v000002"));
    let j = run(&s, 2400, "tampered");
    let store = &j["store"];
    assert_eq!(j["policy"]["policy_version"], 1);
    assert!(switches(&j).is_empty(), "{store}");
    let refused = store["refused"][0].as_str().unwrap();
    assert!(
        refused.contains("v000002") && refused.contains("integrity"),
        "{store}"
    );
    assert_eq!(j["controller"]["policy_decisions"], j["decisions"]);
    // The store is left as it was: the operator decides.
    assert!(current(&s).ends_with("versions/v000002"));
    assert_eq!(events(&s), ["adopt", "finetune-accepted"]);
}

/// A store the controller cannot attach (here: no version yet) does not darken the
/// junction: the fallback runs and the run exits 1 naming why; with `--require-policy` it
/// is refused before the log opens.
#[test]
fn a_store_without_a_version_runs_the_fallback_or_is_refused_with_require_policy() {
    let dir = tmp("follow-empty");
    let (keys, _) = bundle::keygen(&dir.join("keys/site"), false).unwrap();
    PolicyStore::open(dir.join("store")).unwrap();
    let run = |log: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
            .args(["run", "--store"])
            .arg(dir.join("store"))
            .arg("--trust")
            .arg(&keys.public)
            .args(["--scenario", "single-4way", "--log-dir"])
            .arg(dir.join(log))
            .args(["--seconds", "60", "--quiet", "--json"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run("log", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("has no current version"), "{stderr}");
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["policy"]["loaded"], false);
    assert_eq!(j["controller"]["fallback_decisions"], j["decisions"]);
    assert!(j["decisions"].as_u64().unwrap() > 0);
    assert!(j["store"]["errors"][0]
        .as_str()
        .unwrap()
        .contains("has no current version"));
    let out = run("log-required", &["--require-policy"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("has no current version"), "{stderr}");
    assert!(
        !dir.join("log-required").exists(),
        "refused before the log opens"
    );
}
