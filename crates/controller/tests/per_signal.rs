//! One controller, several bundles: a field whose two junctions differ (the arterial of
//! a four-arm junction and a T-junction, `tools/tests/scenarios/arterial-mixed.toml`) runs
//! each signal from the bundle exported for it, as a shared policy's per-signal exports
//! are; and every way the set can be wrong is refused by name.

#[path = "../../runtime/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{inputs, synthetic_weights, tmp};
use greenwave_core::{ActionSource, PhasePlan};
use greenwave_policy::{onnx, Manifest, PolicyWeights, Provenance};
use greenwave_runtime::bundle;
use greenwave_runtime::controller::{SignalSpec, SimField};
use greenwave_runtime::log::read_all;
use greenwave_sim::EmbeddedEnv;

fn arterial() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/tests/scenarios/arterial-mixed.toml")
}

fn signals() -> Vec<SignalSpec> {
    let scenario = greenwave_sim::load(arterial().to_str().unwrap()).unwrap();
    SimField::new(EmbeddedEnv::from_scenario(&scenario, 0)).signal_specs()
}

/// A synthetic policy for `spec`, exported as `greenwave export` writes a per-signal
/// export (its manifest names the signal), with policy version `version`, signed into
/// `dir/NAME`.
fn signed_for(dir: &Path, name: &str, spec: &SignalSpec, version: u32, key: &Path) -> PathBuf {
    signed(dir, name, spec, Some(&spec.id), version, key)
}

/// As [`signed_for`], naming signal `id` (or none: one network for every signal).
fn signed(
    dir: &Path,
    name: &str,
    spec: &SignalSpec,
    id: Option<&str>,
    version: u32,
    key: &Path,
) -> PathBuf {
    let out = dir.join(format!("{name}-export"));
    std::fs::create_dir_all(&out).unwrap();
    let weights = synthetic_weights(spec.layout, &[16, 16], 7);
    write(&out, &weights, &spec.plan, id, version);
    let bundle_dir = dir.join(name);
    let key = bundle::load_signing_key(key).unwrap();
    bundle::pack_and_sign(&inputs(&out.join("policy.onnx")), &key, &bundle_dir).unwrap();
    bundle_dir
}

fn write(out: &Path, weights: &PolicyWeights, plan: &PhasePlan, id: Option<&str>, version: u32) {
    write_at(
        out,
        weights,
        plan,
        id,
        version,
        greenwave_core::Millis::from_secs(5),
    );
}

/// As [`write`], deciding every `interval`.
fn write_at(
    out: &Path,
    weights: &PolicyWeights,
    plan: &PhasePlan,
    id: Option<&str>,
    version: u32,
    interval: greenwave_core::Millis,
) {
    let mut prov = Provenance {
        command: "synthetic per-signal export (test)".into(),
        git_rev: "test".into(),
        ..Provenance::default()
    };
    if let Some(id) = id {
        prov.details.insert("signal_id".into(), id.into());
    }
    let mut manifest = Manifest::new(plan, weights.obs_layout, interval, weights.hidden(), prov);
    manifest.policy_version = version;
    let onnx_path = out.join("policy.onnx");
    std::fs::write(&onnx_path, onnx::export(weights, &manifest)).unwrap();
    let mlp = weights.actor_mlp(plan.hash(), version);
    std::fs::write(
        onnx_path.with_extension("blob"),
        mlp.to_blob(false).unwrap(),
    )
    .unwrap();
    std::fs::write(
        onnx_path.with_extension("int8.blob"),
        mlp.to_blob(true).unwrap(),
    )
    .unwrap();
    let json = serde_json::to_string_pretty(&manifest).unwrap();
    std::fs::write(onnx_path.with_extension("manifest.json"), json).unwrap();
}

/// `greenwave-controller run` on the arterial for 600 s with `bundles`, `--require-policy`.
fn run(dir: &Path, log: &str, public: &Path, bundles: &[&Path]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
    c.arg("run");
    for b in bundles {
        c.arg("--bundle").arg(b);
    }
    c.arg("--trust").arg(public);
    c.arg("--scenario").arg(arterial());
    c.arg("--log-dir").arg(dir.join(log));
    c.args(["--seconds", "600", "--json", "--require-policy"]);
    c.output().unwrap()
}

/// `greenwave-controller verify` of `bundles` against the arterial.
fn verify(public: &Path, bundles: &[&Path]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
    c.arg("verify");
    for b in bundles {
        c.arg("--bundle").arg(b);
    }
    c.arg("--trust")
        .arg(public)
        .arg("--scenario")
        .arg(arterial());
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two signed per-signal bundles for the arterial's two signals (J1, J2), in `dir`.
struct Fixture {
    dir: PathBuf,
    keys: bundle::KeyPairPaths,
    specs: Vec<SignalSpec>,
    j1: PathBuf,
    j2: PathBuf,
}

fn fixture(name: &str) -> Fixture {
    let dir = tmp(name);
    let (keys, _) = bundle::keygen(&dir.join("site"), false).unwrap();
    let specs = signals();
    assert_eq!(specs.len(), 2);
    assert_ne!(specs[0].layout, specs[1].layout, "mixed layouts");
    let j1 = signed_for(&dir, "j1", &specs[0], 1, &keys.secret);
    let j2 = signed_for(&dir, "j2", &specs[1], 1, &keys.secret);
    Fixture {
        dir,
        keys,
        specs,
        j1,
        j2,
    }
}

impl Fixture {
    /// `run` with `bundles`, logging to `log`.
    fn run(&self, log: &str, bundles: &[&Path]) -> Output {
        run(&self.dir, log, &self.keys.public, bundles)
    }

    /// One network for J1's plan that names no signal: it cannot serve J2.
    fn unnamed(&self) -> PathBuf {
        let (dir, spec) = (&self.dir, &self.specs[0]);
        signed(dir, "unnamed", spec, None, 1, &self.keys.secret)
    }
}

/// Asserts that `out` failed, saying `what`.
fn refused(out: &Output, what: &str) {
    assert!(!out.status.success(), "not refused: {what}");
    assert!(stderr(out).contains(what), "{}", stderr(out));
}

#[test]
fn each_signal_runs_the_bundle_exported_for_it_in_one_controller() {
    let f = fixture("per-signal");
    // Given in either order, each signal runs its own bundle; both take policy decisions.
    for (log, order) in [("log-a", [&f.j1, &f.j2]), ("log-b", [&f.j2, &f.j1])] {
        let out = f.run(log, &[order[0], order[1]]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["policy"]["loaded"], true, "{report}");
        assert!(report["throughput_veh"].as_u64().unwrap() > 0, "{report}");
        let ran = &report["policy"]["bundles"];
        assert_eq!(ran[0]["signal"], "J1", "{report}");
        assert_eq!(ran[0]["bundle"], f.j1.display().to_string(), "{report}");
        assert_eq!(ran[1]["bundle"], f.j2.display().to_string(), "{report}");
        let (records, issues) = read_all(f.dir.join(log)).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
        for signal in 0..2u16 {
            let by_policy = records
                .iter()
                .map(|r| &r.transition)
                .filter(|t| t.signal == signal && t.source == ActionSource::Policy)
                .count();
            assert!(by_policy > 0, "signal {signal}: no policy decision logged");
        }
    }
}

#[test]
fn verify_says_which_signal_runs_which_bundle() {
    let f = fixture("per-signal-verify");
    // `verify` checks the set against the field as `run` takes it.
    let out = verify(&f.keys.public, &[&f.j2, &f.j1]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let j1_runs = format!("signal J1 runs {}", f.j1.display());
    assert!(said.contains(&j1_runs), "{said}");
    assert!(said.contains("matches every signal of"), "{said}");
    let out = verify(&f.keys.public, &[&f.j1, &f.unnamed()]);
    refused(&out, "signal 1 (J2): no bundle given fits it");
}

#[test]
fn a_set_that_does_not_fit_the_field_is_refused_by_name() {
    let f = fixture("per-signal-refusals");
    let unnamed = f.unnamed();
    // A signal no bundle fits.
    let out = f.run("log-c", &[&f.j1, &unnamed]);
    refused(&out, "signal 1 (J2): no bundle given fits it");
    // A bundle no signal runs; a bundle given twice.
    let out = f.run("log-d", &[&f.j1, &f.j2, &unnamed]);
    refused(&out, "no signal of the field runs it");
    let out = f.run("log-d2", &[&f.j1, &f.j2, &f.j1]);
    refused(&out, "is given twice");

    // Bundles of two policy versions.
    let j2v2 = signed_for(&f.dir, "j2v2", &f.specs[1], 2, &f.keys.secret);
    let out = f.run("log-e", &[&f.j1, &j2v2]);
    refused(&out, "holds policy version 2");

    // A bundle exported for J2, given as J1's: the signal it names refuses it by plan.
    let wrong = f.dir.join("j1-as-j2-export");
    std::fs::create_dir_all(&wrong).unwrap();
    let w = synthetic_weights(f.specs[0].layout, &[16, 16], 7);
    write(&wrong, &w, &f.specs[0].plan, Some("J2"), 1);
    let key = bundle::load_signing_key(&f.keys.secret).unwrap();
    let mislabelled = f.dir.join("mislabelled");
    bundle::pack_and_sign(&inputs(&wrong.join("policy.onnx")), &key, &mislabelled).unwrap();
    let out = f.run("log-f", &[&f.j1, &mislabelled]);
    refused(&out, "exported for it");

    // A set deciding at another interval than the field's: `verify` refuses it as `run`
    // does.
    let fast = f.dir.join("j1-2s-export");
    std::fs::create_dir_all(&fast).unwrap();
    let w = synthetic_weights(f.specs[0].layout, &[16, 16], 7);
    let two_s = greenwave_core::Millis::from_secs(2);
    write_at(&fast, &w, &f.specs[0].plan, Some("J1"), 1, two_s);
    let j1_fast = f.dir.join("j1-2s");
    bundle::pack_and_sign(&inputs(&fast.join("policy.onnx")), &key, &j1_fast).unwrap();
    let j2_fast = f.dir.join("j2-2s-export");
    std::fs::create_dir_all(&j2_fast).unwrap();
    let w = synthetic_weights(f.specs[1].layout, &[16, 16], 7);
    write_at(&j2_fast, &w, &f.specs[1].plan, Some("J2"), 1, two_s);
    let j2_fast_b = f.dir.join("j2-2s");
    bundle::pack_and_sign(&inputs(&j2_fast.join("policy.onnx")), &key, &j2_fast_b).unwrap();
    let interval = "the policy decides every 2.000 s, this controller every 5.000 s";
    refused(&f.run("log-h", &[&j1_fast, &j2_fast_b]), interval);
    refused(&verify(&f.keys.public, &[&j1_fast, &j2_fast_b]), interval);
}

/// A per-signal export given alone is held to the signal it names, as in a set: on a
/// junction of the same plan and layout under another id, `run` and `verify` refuse it.
#[test]
fn a_bundle_exported_for_one_signal_is_refused_alone_on_another() {
    let dir = tmp("per-signal-alone");
    let (keys, _) = bundle::keygen(&dir.join("site"), false).unwrap();
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let spec = SimField::new(EmbeddedEnv::from_scenario(&scenario, 0)).signal_specs()[0].clone();
    let other = signed(&dir, "other", &spec, Some("NOT-HERE"), 1, &keys.secret);
    let own = signed(&dir, "own", &spec, Some(&spec.id), 1, &keys.secret);
    let command = |what: &str, b: &Path, log: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
        c.args([what, "--bundle"])
            .arg(b)
            .arg("--trust")
            .arg(&keys.public);
        c.args(["--scenario", "single-4way"]);
        if what == "run" {
            c.arg("--log-dir").arg(dir.join(log));
            c.args(["--seconds", "60", "--require-policy"]);
        }
        c.output().unwrap()
    };
    let said = "was exported for signal NOT-HERE and runs on no other";
    refused(&command("run", &other, "log-a"), said);
    refused(&command("verify", &other, ""), said);
    for what in ["run", "verify"] {
        let out = command(what, &own, "log-b");
        assert!(out.status.success(), "{what}: {}", stderr(&out));
    }
}

#[test]
fn without_require_policy_a_refused_set_runs_every_fallback() {
    let f = fixture("per-signal-fallback");
    let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
    c.args(["run", "--bundle"])
        .arg(&f.j1)
        .arg("--bundle")
        .arg(&f.j1);
    c.arg("--trust")
        .arg(&f.keys.public)
        .arg("--scenario")
        .arg(arterial());
    c.arg("--log-dir").arg(f.dir.join("log-g"));
    let out = c.args(["--seconds", "60", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["policy"]["loaded"], false, "{report}");
    let error = report["policy"]["error"].as_str().unwrap();
    assert!(error.contains("given twice"), "{report}");
}

/// `finetune` of one signal's export, checked against the field it runs in: the bundle is
/// held to its own signal (not refused by the other), and fine-tuned on that signal's
/// records only, unless `--signal` names another, which is refused.
#[test]
fn finetune_of_a_per_signal_export_takes_its_own_signals_records() {
    let f = fixture("per-signal-finetune");
    let out = f.run("log", &[&f.j1, &f.j2]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (own, _) = bundle::keygen(&f.dir.join("own"), false).unwrap();
    let finetune = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
        c.arg("finetune").arg("--store").arg(f.dir.join("store"));
        c.arg("--bundle")
            .arg(&f.j2)
            .arg("--trust")
            .arg(&f.keys.public);
        c.arg("--key").arg(&own.secret);
        c.arg("--log-dir").arg(f.dir.join("log"));
        c.arg("--scenario").arg(arterial());
        c.args(["--min-records", "20", "--lr", "0", "--dry-run", "--json"]);
        c.args(extra).output().unwrap()
    };
    let out = finetune(&[]);
    let said = stderr(&out);
    assert!(said.contains("fine-tuning on signal 1's records"), "{said}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    let by_signal = report["log"]["by_signal"].as_object().unwrap();
    assert_eq!(by_signal.keys().collect::<Vec<_>>(), ["1"], "{report}");
    refused(
        &finetune(&["--signal", "0"]),
        "--signal 0: the bundle was exported for signal J2, which is signal 1 of",
    );
}

/// As [`signed_for`], for a policy that acts at decision temperature 0.5: its manifest
/// says so, and its bundle has no firmware blobs.
fn signed_drawing(dir: &Path, name: &str, spec: &SignalSpec, key: &Path) -> PathBuf {
    let out = dir.join(format!("{name}-export"));
    std::fs::create_dir_all(&out).unwrap();
    let weights = synthetic_weights(spec.layout, &[16, 16], 7);
    write(&out, &weights, &spec.plan, Some(&spec.id), 1);
    let onnx_path = out.join("policy.onnx");
    let text = std::fs::read_to_string(onnx_path.with_extension("manifest.json")).unwrap();
    let mut manifest: Manifest = serde_json::from_str(&text).unwrap();
    manifest.decision_temperature = Some(0.5);
    std::fs::write(&onnx_path, onnx::export(&weights, &manifest)).unwrap();
    let json = serde_json::to_string_pretty(&manifest).unwrap();
    std::fs::write(onnx_path.with_extension("manifest.json"), json).unwrap();
    for blob in ["blob", "int8.blob"] {
        std::fs::remove_file(onnx_path.with_extension(blob)).unwrap();
    }
    let mut files = inputs(&onnx_path);
    files.blob_int8 = None;
    let bundle_dir = dir.join(name);
    let key = bundle::load_signing_key(key).unwrap();
    bundle::pack_and_sign(&files, &key, &bundle_dir).unwrap();
    bundle_dir
}

/// Bundles whose manifests name a decision temperature run drawing their phases: the log
/// holds the probability each was drawn with (below 1, so a log-probability below 0, where
/// greedy bundles log 0), and the draws still pass the sequencer. A set that mixes rules is
/// refused: one controller acts by one rule.
#[test]
fn drawing_bundles_log_their_draws_and_a_mixed_set_is_refused() {
    let f = fixture("per-signal-drawing");
    let d1 = signed_drawing(&f.dir, "d1", &f.specs[0], &f.keys.secret);
    let d2 = signed_drawing(&f.dir, "d2", &f.specs[1], &f.keys.secret);
    let out = f.run("log-drawn", &[&d1, &d2]);
    assert!(out.status.success(), "{}", stderr(&out));
    let logged = |log: &str| -> Vec<f32> {
        let (records, issues) = read_all(f.dir.join(log)).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
        records
            .iter()
            .map(|r| &r.transition)
            .filter(|t| t.source == ActionSource::Policy)
            .map(|t| t.log_prob)
            .collect()
    };
    let drawn = logged("log-drawn");
    assert!(!drawn.is_empty());
    assert!(
        drawn.iter().all(|lp| lp.is_finite() && *lp <= 0.0),
        "{drawn:?}"
    );
    assert!(
        drawn.iter().any(|lp| *lp < -1e-3),
        "no draw below probability 1"
    );
    let out = f.run("log-greedy", &[&f.j1, &f.j2]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(logged("log-greedy").iter().all(|lp| *lp == 0.0));
    refused(&f.run("log-mixed", &[&d1, &f.j2]), "decision temperature");
    // `verify` refuses the mixed set as `run` does, and passes the drawing one.
    refused(
        &verify(&f.keys.public, &[&d1, &f.j2]),
        "one controller runs every signal by one rule",
    );
    let out = verify(&f.keys.public, &[&d1, &d2]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("draws its phases at decision temperature 0.5"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(&f.dir);
}
