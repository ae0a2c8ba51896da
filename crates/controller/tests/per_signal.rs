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
    let mut prov = Provenance {
        command: "synthetic per-signal export (test)".into(),
        git_rev: "test".into(),
        ..Provenance::default()
    };
    if let Some(id) = id {
        prov.details.insert("signal_id".into(), id.into());
    }
    let interval = greenwave_core::Millis::from_secs(5);
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

#[test]
fn each_signal_runs_the_bundle_exported_for_it_in_one_controller() {
    let dir = tmp("per-signal");
    let (keys, _) = bundle::keygen(&dir.join("site"), false).unwrap();
    let specs = signals();
    assert_eq!(specs.len(), 2);
    assert_ne!(specs[0].layout, specs[1].layout, "mixed layouts");
    let j1 = signed_for(&dir, "j1", &specs[0], 1, &keys.secret);
    let j2 = signed_for(&dir, "j2", &specs[1], 1, &keys.secret);

    // Given in either order, each signal runs its own bundle; both take policy decisions.
    for (log, order) in [("log-a", [&j1, &j2]), ("log-b", [&j2, &j1])] {
        let out = run(&dir, log, &keys.public, &[order[0], order[1]]);
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["policy"]["loaded"], true, "{report}");
        assert!(report["throughput_veh"].as_u64().unwrap() > 0, "{report}");
        let ran = &report["policy"]["bundles"];
        assert_eq!(ran[0]["signal"], "J1", "{report}");
        assert_eq!(ran[0]["bundle"], j1.display().to_string(), "{report}");
        assert_eq!(ran[1]["bundle"], j2.display().to_string(), "{report}");
        let (records, issues) = read_all(dir.join(log)).unwrap();
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

    // `verify` checks the set against the field as `run` takes it.
    let out = verify(&keys.public, &[&j2, &j1]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let j1_runs = format!("signal J1 runs {}", j1.display());
    assert!(said.contains(&j1_runs), "{said}");
    assert!(said.contains("matches every signal of"), "{said}");
    // One network for J1's plan that names no signal: it cannot serve J2.
    let unnamed = signed(&dir, "unnamed", &specs[0], None, 1, &keys.secret);
    let out = verify(&keys.public, &[&j1, &unnamed]);
    assert!(!out.status.success());
    let refusal = "signal 1 (J2): no bundle given fits it";
    assert!(stderr(&out).contains(refusal), "{}", stderr(&out));

    // A signal no bundle fits: the set is refused, naming the signal.
    let out = run(&dir, "log-c", &keys.public, &[&j1, &unnamed]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(refusal), "{}", stderr(&out));

    // A bundle no signal runs; a bundle given twice.
    let out = run(&dir, "log-d", &keys.public, &[&j1, &j2, &unnamed]);
    assert!(!out.status.success());
    let unused = "no signal of the field runs it";
    assert!(stderr(&out).contains(unused), "{}", stderr(&out));
    let out = run(&dir, "log-d2", &keys.public, &[&j1, &j2, &j1]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is given twice"), "{}", stderr(&out));

    // Bundles of two policy versions.
    let j2v2 = signed_for(&dir, "j2v2", &specs[1], 2, &keys.secret);
    let out = run(&dir, "log-e", &keys.public, &[&j1, &j2v2]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("holds policy version 2"),
        "{}",
        stderr(&out)
    );

    // A bundle exported for J2, given as J1's: the signal it names refuses it by plan.
    let wrong = dir.join("j1-as-j2-export");
    std::fs::create_dir_all(&wrong).unwrap();
    let w = synthetic_weights(specs[0].layout, &[16, 16], 7);
    write(&wrong, &w, &specs[0].plan, Some("J2"), 1);
    let key = bundle::load_signing_key(&keys.secret).unwrap();
    let mislabelled = dir.join("mislabelled");
    bundle::pack_and_sign(&inputs(&wrong.join("policy.onnx")), &key, &mislabelled).unwrap();
    let out = run(&dir, "log-f", &keys.public, &[&j1, &mislabelled]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("exported for it"), "{}", stderr(&out));

    // Without --require-policy a refused set runs every signal's fallback.
    let mut c = Command::new(env!("CARGO_BIN_EXE_greenwave-controller"));
    c.args(["run", "--bundle"])
        .arg(&j1)
        .arg("--bundle")
        .arg(&j1);
    c.arg("--trust")
        .arg(&keys.public)
        .arg("--scenario")
        .arg(arterial());
    c.arg("--log-dir").arg(dir.join("log-g"));
    let out = c.args(["--seconds", "60", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["policy"]["loaded"], false, "{report}");
    assert!(
        report["policy"]["error"]
            .as_str()
            .unwrap()
            .contains("given twice"),
        "{report}"
    );
}
