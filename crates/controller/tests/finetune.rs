//! On-device fine-tuning: the update, the gate, the log's corrupt segments, the policy
//! store's atomic switch and rollback, and the `finetune` / `rollback` subcommands.
//!
//! The data: the project's trained `models/single-4way.onnx` run by the controller on the
//! embedded simulator with ε-greedy exploration, logging every transition.
//!
//! That sampled and exact expectations agree is tested on the algorithm itself in
//! `greenwave-learn` (`offpolicy::tests::sampled_expectations_converge_to_exact`: the
//! expected Q and the clipped objective), as are a zero learning rate and the KL limit on
//! `update_policy` alone; here the last two are checked through the whole fine-tune
//! (log → import → update → gate → re-export).

// The runtime's test fixtures (one copy: this package tests the same controller).
#[path = "../../runtime/tests/common/mod.rs"]
mod common;
// A site's keys and the trained policy signed with them (one copy for this package's tests).
mod keyed;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tmp;
use greenwave_finetune::store::Switched;
use greenwave_finetune::{
    self as finetune, candidate_manifest, sim, FinetuneConfig, Outcome, PolicyStore, StoreError,
};
use greenwave_policy::onnx;
use greenwave_runtime::bundle;
use greenwave_runtime::log::SegmentIssue;
use keyed::{model_path, site, Site};

fn model() -> Vec<u8> {
    std::fs::read(model_path()).unwrap()
}

/// Logs `sessions` controller sessions of `seconds` each (one segment per session) with
/// ε = 0.2 on single-4way.
fn log_sessions(dir: &Path, sessions: u64, seconds: u32) {
    let scenario = common::scenario();
    for s in 0..sessions {
        sim::run_controller(&scenario, &model(), 1, 100 + s, seconds, 0.2, Some(dir)).unwrap();
    }
}

fn quick(cfg: FinetuneConfig) -> FinetuneConfig {
    FinetuneConfig {
        min_records: 500,
        gate: finetune::GateConfig {
            min_states: 100,
            ..cfg.gate
        },
        ..cfg
    }
}

fn run(log: &Path, cfg: &FinetuneConfig) -> Outcome {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    finetune::finetune(&model(), log, cfg, &mut |l| eprintln!("{l}")).unwrap()
}

#[test]
fn a_corrupt_segment_is_reported_and_skipped_and_the_others_are_used() {
    let dir = tmp("ft-corrupt");
    let log = dir.join("log");
    log_sessions(&log, 3, 1800); // 3 segments × 360 records
    let mut segs: Vec<PathBuf> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".gwlog"))
        .collect();
    segs.sort();
    assert_eq!(segs.len(), 3, "{segs:?}");
    // Flip a byte in the middle of the second segment: a CRC mismatch there.
    let mut bytes = std::fs::read(&segs[1]).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&segs[1], &bytes).unwrap();

    let (weights, _) = onnx::import(&model()).unwrap();
    let data = finetune::data::read_log(&log, weights.obs_layout, &weights.norm, None).unwrap();
    let s = &data.summary;
    assert_eq!(data.issues.len(), 1, "{:?}", data.issues);
    let issue: &SegmentIssue = &data.issues[0];
    assert_eq!(issue.path, segs[1]);
    assert!(s.issues[0].contains("seg-"), "{:?}", s.issues);
    // Everything of segments 1 and 3, and segment 2 up to the corruption.
    assert!(
        s.records_used >= 720 && s.records_used < 1080,
        "{} records",
        s.records_used
    );
    assert_eq!(s.records_used, s.records_read);
    let seg_of = |p: &PathBuf| -> u64 {
        p.file_stem().unwrap().to_str().unwrap()[4..]
            .parse()
            .unwrap()
    };
    assert_eq!(s.first.unwrap().segment, seg_of(&segs[0]));
    assert_eq!(s.last.unwrap().segment, seg_of(&segs[2]));

    // The fine-tune runs on the rest and reports the problem.
    let out = run(&log, &quick(FinetuneConfig::default()));
    assert_eq!(out.report.log.issues.len(), 1);
    assert_eq!(out.report.log.records_used, s.records_used);
}

#[test]
fn a_zero_learning_rate_changes_nothing_and_the_gate_refuses_the_no_op() {
    let dir = tmp("ft-lr0");
    let log = dir.join("log");
    log_sessions(&log, 1, 7200);
    let mut cfg = quick(FinetuneConfig::default());
    cfg.update.learning_rate = 0.0;
    let out = run(&log, &cfg);
    let (parent, _) = onnx::import(&model()).unwrap();
    assert_eq!(
        out.weights, parent,
        "lr = 0 leaves every parameter as it was"
    );
    let r = &out.report;
    assert_eq!(r.update.policy.kl, 0.0);
    assert_eq!(r.update.policy.epochs, cfg.update.epochs);
    assert!(!r.update.policy.stopped_by_kl);
    assert_eq!(r.gate.kl, 0.0);
    assert_eq!(r.gate.greedy_changed, 0.0);
    assert_eq!(r.gate.estimate, 0.0);
    assert!(!r.gate.accepted, "a no-op is not an improvement");
    assert!(
        r.gate.reason.contains("nothing would change"),
        "{}",
        r.gate.reason
    );
    // Re-exported, it is the same model with a new manifest.
    let m = candidate_manifest(&out.parent, 2, r, &cfg, "test");
    let bytes = onnx::reexport(&out.weights, &m);
    let (w2, m2) = onnx::import(&bytes).unwrap();
    assert_eq!(w2, parent);
    assert_eq!(m2.policy_version, 2);
    assert_eq!(m2.provenance.parent_version, Some(1));
    assert_eq!(m2.provenance.algorithm, "finetune");
    assert!(m2.provenance.details.contains_key("log"));
    assert_eq!(
        m2.provenance.signal_id(),
        None,
        "a shared export names no signal"
    );
    // A per-signal export's binding is kept: the controller's key signs the child, which
    // must not run on another signal of the same layout.
    let mut per_signal = out.parent.clone();
    per_signal.provenance.set_signal_id("J3");
    let m3 = candidate_manifest(&per_signal, 2, r, &cfg, "test");
    assert_eq!(m3.provenance.signal_id(), Some("J3"));
    assert!(m2.provenance.details.contains_key("gate"));
}

#[test]
fn the_kl_limit_stops_the_update_early_within_the_limit() {
    let dir = tmp("ft-kl");
    let log = dir.join("log");
    log_sessions(&log, 1, 7200);
    let mut cfg = quick(FinetuneConfig::default());
    cfg.update.learning_rate = 1e-2;
    cfg.update.epochs = 100;
    cfg.update.max_kl = 0.005;
    let out = run(&log, &cfg);
    let p = &out.report.update.policy;
    assert!(p.stopped_by_kl && p.reverted_epoch, "{p:?}");
    assert!(p.epochs < 100, "{p:?}");
    assert!(p.kl <= 0.005, "the kept policy is within the limit: {p:?}");
}

#[test]
fn the_gate_rejects_an_update_trained_on_the_negated_reward() {
    let dir = tmp("ft-harm");
    let log = dir.join("log");
    log_sessions(&log, 2, 7200);
    // An update large enough to change many greedy choices, with a KL limit the gate does
    // not trip: the estimate must be what rejects it.
    let mut cfg = quick(FinetuneConfig::default());
    cfg.update.learning_rate = 3e-3;
    cfg.update.max_kl = 0.5;
    cfg.gate.max_kl = 1.0;
    cfg.flip_reward_sign = true;
    let out = run(&log, &cfg);
    let g = &out.report.gate;
    eprintln!("harmful: {g:?}");
    assert!(out.report.update.flipped_reward_sign);
    assert!(g.greedy_changed > 0.0, "{g:?}");
    assert!(!g.accepted, "{}", g.reason);
    assert!(g.reason.starts_with("refused"), "{}", g.reason);
    // Judged, the estimate itself says worse; or refused earlier for want of coverage.
    assert!(
        g.estimate < 0.0 || g.reason.contains("exploration served"),
        "{g:?}"
    );
}

#[test]
fn attempts_against_the_same_log_are_limited() {
    let dir = tmp("ft-attempts");
    let log = dir.join("log");
    log_sessions(&log, 1, 7200);
    let mut cfg = quick(FinetuneConfig::default());
    cfg.max_attempts = 2;
    for seed in 0..2 {
        cfg.seed = seed;
        let g = run(&log, &cfg).report.gate;
        assert!(!g.reason.contains("already judged"), "{}", g.reason);
    }
    cfg.seed = 2;
    let g = run(&log, &cfg).report.gate;
    assert!(!g.accepted);
    assert!(
        g.reason.contains("2 candidates of v1 were already judged"),
        "{}",
        g.reason
    );
    // A session appended (a quarter more records) is not new data: the held-back records
    // (the most recent 30 %) still overlap those already judged.
    log_sessions(&log, 1, 1800);
    let g = run(&log, &cfg).report.gate;
    assert!(g.reason.contains("already judged"), "{}", g.reason);
    // Held-back records all newer than those judged are: judged again.
    log_sessions(&log, 1, 3600);
    let g = run(&log, &cfg).report.gate;
    assert!(!g.reason.contains("already judged"), "{}", g.reason);
    // A damaged attempts file refuses the gate rather than forgetting the count.
    let ledger = log.join(".finetune-attempts.json");
    let mut bytes = std::fs::read(&ledger).unwrap();
    let digit = bytes.iter().rposition(u8::is_ascii_digit).unwrap();
    bytes[digit] ^= 0x01;
    std::fs::write(&ledger, &bytes).unwrap();
    let g = run(&log, &cfg).report.gate;
    assert!(!g.accepted);
    assert!(
        g.reason.starts_with("refused: attempts file") && g.reason.contains("CRC-32"),
        "{}",
        g.reason
    );
}

/// A bundle of the repo's model, signed by a fresh site key.
#[test]
fn the_store_switches_atomically_keeps_the_previous_version_and_rolls_back() {
    let s = site("ft-store");
    let store_dir = s.dir.join("store");
    // Leftovers of an interrupted write are cleared on open.
    std::fs::create_dir_all(store_dir.join("staging/v9-1/bundle")).unwrap();
    let store = PolicyStore::open(&store_dir).unwrap();
    assert!(!store_dir.join("staging/v9-1").exists());
    assert!(store.current().unwrap().is_none());
    let adopted = store.adopt(&s.bundle, &[s.site]).unwrap();
    assert_eq!(adopted.version, 1);
    assert!(store.previous().unwrap().is_none());

    let log = s.dir.join("log");
    log_sessions(&log, 1, 3600);
    let mut cfg = quick(FinetuneConfig::default());
    cfg.update.learning_rate = 1e-3;
    let out = run(&log, &cfg);
    let own = bundle::load_signing_key(&s.own_key).unwrap();
    let v = store.next_version(1).unwrap();
    assert_eq!(v, 2);
    let m = candidate_manifest(&out.parent, v, &out.report, &cfg, "test");
    let sw = store
        .install(&out.weights, &m, &own, &[s.site], "test")
        .unwrap();
    assert_eq!((sw.version, sw.from), (2, Some(1)));
    let cur = store.current().unwrap().unwrap();
    assert!(cur.ends_with("versions/v000002"), "{cur:?}");
    assert!(store
        .previous()
        .unwrap()
        .unwrap()
        .ends_with("versions/v000001"));
    // `current` is what a controller loads: it verifies against the site key plus the
    // controller's own, for the single-4way plan, and carries the new weights.
    let (plan, layout) = common::plan_and_layout(&common::scenario());
    let b = bundle::verify_and_load(
        &store.current_link(),
        &[s.site, own.verifying_key()],
        &plan,
        layout,
    )
    .unwrap();
    assert_eq!(b.manifest.policy_version, 2);
    assert_eq!(b.manifest.provenance.parent_version, Some(1));
    let (w, _) = onnx::import(&b.model).unwrap();
    assert_eq!(w, out.weights);
    // Only the site key: the controller-signed version is refused.
    assert!(bundle::verify(&store.current_link(), &[s.site]).is_err());

    // Rollback: back to v1; v2 stays on disk and its number is not reused.
    let rb = store
        .rollback(&[s.site, own.verifying_key()], "test")
        .unwrap();
    assert_eq!((rb.version, rb.from), (1, Some(2)));
    assert!(store
        .current()
        .unwrap()
        .unwrap()
        .ends_with("versions/v000001"));
    assert!(store.previous().unwrap().is_none());
    assert!(store_dir.join("versions/v000002").is_dir());
    assert_eq!(store.next_version(1).unwrap(), 3);
    assert!(
        store.rollback(&[s.site], "again").is_err(),
        "nothing to roll back to"
    );
    let events: Vec<String> = store
        .history()
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect();
    assert_eq!(events, ["adopt", "finetune-accepted", "rollback"]);
}

/// A store that adopted the site's bundle (v1), and a way to install the repo's model as
/// version `v` fine-tuned from `parent`, signed with the controller's own key.
struct Adopted {
    s: Site,
    store: PolicyStore,
    trusted: [bundle::VerifyingKey; 2],
}

impl Adopted {
    fn new(name: &str) -> Self {
        let s = site(name);
        let store = PolicyStore::open(s.dir.join("store")).unwrap();
        store.adopt(&s.bundle, &[s.site]).unwrap();
        let own = bundle::load_signing_key(&s.own_key).unwrap();
        let trusted = [s.site, own.verifying_key()];
        Adopted { s, store, trusted }
    }

    fn install(&self, v: u32, parent: u32) -> Result<Switched, StoreError> {
        let (w, mut m) = onnx::import(&model()).unwrap();
        m.policy_version = v;
        m.provenance.parent_version = Some(parent);
        let own = bundle::load_signing_key(&self.s.own_key).unwrap();
        self.store.install(&w, &m, &own, &[self.s.site], "test")
    }

    fn version(&self, v: u32) -> PathBuf {
        self.s.dir.join(format!("store/versions/v{v:06}"))
    }
}

/// A fine-tune of v2 that finishes after an operator rolled the store back to v1 is not
/// installed: it was gated against v2 only, and installing it would undo the rollback.
#[test]
fn a_fine_tune_is_not_installed_once_current_moved_off_its_parent() {
    let a = Adopted::new("ft-moved");
    a.install(2, 1).unwrap();
    a.store.rollback(&a.trusted, "operator").unwrap();
    let before = a.store.history().unwrap().len();
    let e = a.install(3, 2).unwrap_err();
    assert!(matches!(e, StoreError::ParentNotCurrent { .. }), "{e}");
    assert!(e.to_string().contains("v000002"), "{e}");
    assert!(a.store.current().unwrap().unwrap().ends_with("v000001"));
    assert!(!a.version(3).exists());
    assert_eq!(a.store.history().unwrap().len(), before, "no line for it");
    // A fine-tune of the current version is installed as before.
    a.install(3, 1).unwrap();
    assert!(a.store.current().unwrap().unwrap().ends_with("v000003"));
}

/// A version the watch rolled back after `current` had moved on (v2, while its child v3
/// ran) is never brought back by `rollback`: going back from v3 skips to v1.
#[test]
fn rollback_never_returns_to_a_version_the_watch_rolled_back() {
    let a = Adopted::new("ft-skip-rolled-back");
    a.install(2, 1).unwrap();
    a.install(3, 2).unwrap();
    // The watch, which ran v2, rolls it back to v1; current is v3 by then.
    let unapplied = a
        .store
        .watch_rollback(&a.version(2), &a.version(1), &a.trusted, "{}");
    assert!(matches!(unapplied, Err(StoreError::Moved { .. })));
    a.install(4, 3).unwrap();
    assert!(a.store.previous().unwrap().unwrap().ends_with("v000003"));
    assert_eq!(a.store.rollback(&a.trusted, "operator").unwrap().version, 3);
    assert!(
        a.store.previous().unwrap().unwrap().ends_with("v000001"),
        "v3's parent v2 was rolled back: previous is where the watch returned to"
    );
    assert_eq!(a.store.rollback(&a.trusted, "again").unwrap().version, 1);
}

#[test]
fn rollback_refuses_a_tampered_previous_version() {
    let s = site("ft-tamper");
    let store = PolicyStore::open(s.dir.join("store")).unwrap();
    store.adopt(&s.bundle, &[s.site]).unwrap();
    let (w, m) = onnx::import(&model()).unwrap();
    let mut m2 = m.clone();
    m2.policy_version = 2;
    m2.provenance.parent_version = Some(1);
    let own = bundle::load_signing_key(&s.own_key).unwrap();
    store.install(&w, &m2, &own, &[s.site], "test").unwrap();
    let trusted = [s.site, own.verifying_key()];
    // `previous` pointed (by hand) at a signed copy of v1 outside versions/: refused,
    // since `current` would then name a folder other than the one verified.
    let (root, other) = (s.dir.join("store"), s.dir.join("store/other/v000001"));
    std::fs::create_dir_all(&other).unwrap();
    for f in std::fs::read_dir(root.join("versions/v000001")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, other.join(f.file_name().unwrap())).unwrap();
    }
    let link = root.join("previous");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("other/v000001", &link).unwrap();
    let err = store.rollback(&trusted, "test").unwrap_err().to_string();
    assert!(err.contains("not at a folder of versions/"), "{err}");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("versions/v000001", &link).unwrap();
    // Tamper with v1's model.
    keyed::tamper(&s.dir.join("store/versions/v000001"));
    let err = store.rollback(&trusted, "test").unwrap_err().to_string();
    assert!(err.contains("integrity check failed"), "{err}");
    assert!(
        store
            .current()
            .unwrap()
            .unwrap()
            .ends_with("versions/v000002"),
        "unchanged"
    );
}

fn controller(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
        .args(args)
        .output()
        .unwrap()
}

/// `finetune` with `base` and `extra` flags, refused by the gate (exit status 2): its
/// JSON report.
fn finetune_refused(base: &[&str], extra: &[&str]) -> serde_json::Value {
    let out = controller(&[base, extra, &["--json"]].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Installs the site's policy again as version 2, a fine-tune of version 1, signed with
/// the controller's own key.
fn install_version_2(s: &Site, store: &Path) {
    let own = bundle::load_signing_key(&s.own_key).unwrap();
    let (w, m) = onnx::import(&model()).unwrap();
    let mut m2 = m.clone();
    m2.policy_version = 2;
    m2.provenance.parent_version = Some(1);
    PolicyStore::open(store)
        .unwrap()
        .install(&w, &m2, &own, &[s.site], "test")
        .unwrap();
}

/// The controller runs the store's current version 2 (trusting the site's own key), and
/// `rollback` takes the store back to version 1.
fn run_current_then_roll_back(s: &Site, store: &str) {
    let p = |x: &Path| x.to_str().unwrap().to_string();
    let (site_pub, own_pub) = (p(&s.site_pub), p(&s.own_pub));
    let cur = format!("{store}/current");
    let out = controller(&[
        "run",
        "--bundle",
        &cur,
        "--trust",
        &site_pub,
        "--trust",
        &own_pub,
        "--scenario",
        "single-4way",
        "--log-dir",
        &p(&s.dir.join("log2")),
        "--seconds",
        "60",
        "--json",
        "--require-policy",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["policy"]["policy_version"], 2);

    // A mistyped store is named, not created.
    let typo = format!("{store}-typo");
    let out = controller(&["rollback", "--store", &typo, "--trust", &site_pub]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&typo), "{err}");
    assert!(
        !Path::new(&typo).exists(),
        "rollback made a store at {typo}"
    );
    let (own_key, log) = (p(&s.own_key), p(&s.dir.join("log")));
    let out = controller(&[
        "finetune",
        "--store",
        &typo,
        "--trust",
        &site_pub,
        "--key",
        &own_key,
        "--log-dir",
        &log,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&typo), "{err}");
    assert!(
        !Path::new(&typo).exists(),
        "finetune made a store at {typo}"
    );

    // A history whose last line was cut off mid-write: named, and the rollback's own
    // line still lands whole after it.
    let history = Path::new(store).join("history.jsonl");
    let mut bytes = std::fs::read(&history).unwrap();
    bytes.extend_from_slice(b"{\"unix_ms\":17965");
    std::fs::write(&history, bytes).unwrap();
    let out = controller(&[
        "rollback", "--store", store, "--trust", &site_pub, "--trust", &own_pub,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 of its 5 lines fail their checksum"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("v2 -> v1"));
}

#[test]
fn the_finetune_and_rollback_commands() {
    let s = site("ft-cli");
    let log = s.dir.join("log");
    log_sessions(&log, 2, 7200);
    let p = |x: &Path| x.to_str().unwrap().to_string();
    let (store, bundle_dir, site_pub, own_key, log_s) = (
        p(&s.dir.join("store")),
        p(&s.bundle),
        p(&s.site_pub),
        p(&s.own_key),
        p(&log),
    );
    let base = [
        "finetune",
        "--store",
        &store,
        "--bundle",
        &bundle_dir,
        "--trust",
        &site_pub,
        "--key",
        &own_key,
        "--log-dir",
        &log_s,
        "--scenario",
        "single-4way",
        "--min-records",
        "500",
    ];
    // A mistyped log folder: refused before the store is made or the bundle adopted.
    let mut mistyped = base.to_vec();
    let missing = p(&s.dir.join("no-log"));
    mistyped[10] = &missing;
    let out = controller(&mistyped);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no such folder"),
        "{err}"
    );
    assert!(!Path::new(&store).exists(), "the store was made");

    // A dry run on the empty store: judged (and counted as an attempt), but the flashed
    // bundle is not adopted and nothing is recorded.
    let j = finetune_refused(&base, &["--lr", "0", "--dry-run"]);
    assert_eq!(
        (j["switched"].clone(), j["dry_run"].clone()),
        (false.into(), true.into())
    );
    let empty = PolicyStore::attach(&store).unwrap();
    assert_eq!(
        empty.current().unwrap(),
        None,
        "a dry run adopted the bundle"
    );
    assert!(empty.history().unwrap().is_empty());

    // A deliberately harmful update: rejected, exit status 2, nothing switched.
    let harmful = [
        "--diagnostic-flip-reward-sign",
        "--lr",
        "3e-3",
        "--max-kl",
        "0.5",
        "--gate-max-kl",
        "1",
    ];
    let j = finetune_refused(&base, &harmful);
    assert_eq!(j["switched"], false);
    assert_eq!(j["gate"]["accepted"], false);
    assert_eq!(j["current_version"], 1);

    // lr = 0: nothing changes, so nothing is gained: refused too.
    let j = finetune_refused(&base, &["--lr", "0"]);
    assert_eq!(j["switched"], false, "{j}");
    assert!(
        j["gate"]["reason"]
            .as_str()
            .unwrap()
            .contains("nothing would change"),
        "{j}"
    );

    // A version installed as an accepted fine-tune would be (through the store's API:
    // the gate's acceptances are tested on the simulator), then run and rolled back by
    // command.
    install_version_2(&s, Path::new(&store));

    run_current_then_roll_back(&s, &store);
    let store = PolicyStore::open(&store).unwrap();
    let events: Vec<String> = store
        .history()
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect();
    assert_eq!(
        events,
        [
            "adopt",
            "finetune-rejected",
            "finetune-rejected",
            "finetune-accepted",
            "rollback"
        ]
    );
}
