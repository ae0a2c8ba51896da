//! End to end on the controller side: an exported policy signed into a bundle → the
//! controller verifies and loads it and runs a simulated hour on the embedded simulator
//! with logging → the log reads back every record intact. Then the `greenwave-controller`
//! binary on such a bundle: a run with `--json`, a refused bundle (fallback, or an error
//! with `--require-policy`), `verify` and `log`.
//!
//! The policy is synthetic (the runtime does not depend on the workstation crate that
//! trains); the same steps with a trained policy, from `greenwave train` on, are the
//! workspace's end-to-end chain (`tests/chain.rs`).

// The runtime's test fixtures (one copy: this package tests the same controller).
#[path = "../../runtime/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{check_invariants, fixture, TestField};
use greenwave_core::{ActionSource, ClockStage, Millis, ObsLayout, ProgramClock};
use greenwave_runtime::bundle::{self, verify_and_load};
use greenwave_runtime::controller::{Controller, ControllerConfig, Fallback, FallbackKind, Policy};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer};
use greenwave_runtime::log::{read_all, LogConfig, LogRecord, LogWriter, SyncPolicy};

/// No inference budget to speak of, for runs whose actions are compared: a slow inference
/// on a busy host must not send the policy to its fallback and change them.
const NO_BUDGET: [&str; 2] = ["--inference-budget-ms", "60000"];

fn controller_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let out = controller_bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn sign_run_an_hour_and_read_the_log_back() {
    let fx = fixture("e2e");
    let (dir, keys, bundle_dir) = (fx.dir.clone(), fx.keys.clone(), fx.bundle.clone());

    let scenario = greenwave_sim::load("single-4way").unwrap();
    let mut field = TestField::new(&scenario, 11);
    let specs = field.inner.signal_specs();
    let interval = field.inner.decision_interval();
    let trusted = bundle::load_public_key(&keys.public).unwrap();
    assert_eq!(trusted, fx.public);
    let b = verify_and_load(&bundle_dir, &[trusted], &specs[0].plan, specs[0].layout).unwrap();
    assert_eq!(b.manifest.provenance.command, "synthetic (test)");
    let policy = Policy {
        backend: load_backend(BackendKind::Tract, &b.model, specs[0].layout, None).unwrap(),
        version: b.manifest.policy_version,
        explorer: Explorer::greedy(),
    };
    let log_dir = dir.join("log");
    let mut log_cfg = LogConfig::new(&log_dir);
    log_cfg.sync = SyncPolicy::EveryRecords(16.try_into().unwrap());
    let (log, _) = LogWriter::open(log_cfg).unwrap();
    let plan = specs[0].plan.clone();
    let layout = specs[0].layout;
    let mut c = Controller::new(
        specs,
        Ok(policy),
        Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
        ControllerConfig::for_simulated_time(interval),
        Some(log),
    )
    .unwrap();
    let stats = c.run(&mut field, 3600.0, |_| {}).unwrap();
    let commit = c.close_log().unwrap().unwrap();

    assert_eq!(stats.decisions, 720);
    assert_eq!(stats.policy_decisions, 720, "{stats:?}");
    assert_eq!(stats.watchdog.fallback_switches, 0);
    assert_eq!(stats.transitions_logged, 720);
    assert_eq!(stats.transitions_dropped, 0);
    assert_eq!(commit.committed, 720);
    check_invariants(&plan, &field.shown[0]).unwrap();
    let metrics = greenwave_sim::Env::metrics(field.inner.env());
    assert!(
        metrics.throughput_veh > 0 && metrics.sim_seconds == 3600.0,
        "{metrics:?}"
    );

    let (records, issues) = read_all(&log_dir).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(records.len(), 720);
    let transitions: Vec<_> = records.into_iter().map(|r| r.transition).collect();
    check_session(&transitions, layout, b.manifest.policy_version);
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// One greedy session's records, in order: every 5 s, of the layout's width, by the
/// bundle's version, within the mask, each one's next observation the next one's, the
/// last one done.
fn check_session(records: &[greenwave_core::Transition], layout: ObsLayout, version: u32) {
    for (k, t) in records.iter().enumerate() {
        assert_eq!(t.timestamp_ms, k as u64 * 5000);
        assert_eq!(
            (t.obs.len(), t.next_obs.len()),
            (layout.dim(), layout.dim())
        );
        assert_eq!(t.policy_version, version);
        assert!(
            matches!(t.source, ActionSource::Policy | ActionSource::Supervisor),
            "{t:?}"
        );
        assert_eq!(t.log_prob, 0.0, "greedy");
        assert!(t.reward.is_finite());
        let mask = layout.mask_from_obs(&t.obs).unwrap();
        assert!(
            mask.allows(greenwave_core::PhaseId(t.requested)),
            "record {k}: request outside the mask"
        );
        if t.source == ActionSource::Policy {
            assert_eq!(t.requested, t.action);
        }
        if let Some(next) = records.get(k + 1) {
            assert_eq!(t.next_obs, next.obs, "record {k}: next_obs is the next obs");
            assert!(!t.done);
        } else {
            assert!(t.done, "the last record ends the session");
        }
    }
}

/// The binary on a signed bundle: a run with `--json` reports its metrics and logs
/// every decision, which `log` reads back; `verify` says the bundle matches.
#[test]
fn the_binary_runs_verifies_and_reads_back_a_signed_bundle() {
    let fx = fixture("e2e-bin");
    let (dir, keys, bundle_dir) = (fx.dir.clone(), fx.keys.clone(), fx.bundle.clone());
    let bundle_s = bundle_dir.to_str().unwrap();
    let trust = keys.public.to_str().unwrap();
    let log2 = dir.join("log2");
    let run = [
        "run",
        "--bundle",
        bundle_s,
        "--trust",
        trust,
        "--scenario",
        "single-4way",
    ];
    let log2_s = log2.to_str().unwrap();
    let flags = ["--seconds", "600", "--seed", "3", "--json", "-q"];
    let v = run_json(&[&run[..], &["--log-dir", log2_s], &flags].concat());
    for key in [
        "mean_delay_s",
        "mean_wait_s",
        "mean_travel_time_s",
        "throughput_veh",
        "backlog_veh",
        "sim_seconds",
        "wall_seconds",
        "fallback_switches",
        "supervisor_overrides",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["sim_seconds"], 600.0);
    assert_eq!(v["policy"]["loaded"], true);
    assert_eq!(v["transitions_logged"], 120);
    assert_eq!(v["transitions_committed"], 120);
    let summary = run_json(&["log", "--log-dir", log2_s, "--json"]);
    assert_eq!(summary["records"], 120);
    assert_eq!(summary["issues"].as_array().unwrap().len(), 0);
    let out = controller_bin()
        .args(["verify", "--bundle", bundle_s, "--trust", trust])
        .args(["--scenario", "single-4way"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("matches every signal"));
    // A reader of stdout that has gone costs the report, not the run or its records.
    let log3 = dir.join("log3");
    let log3_s = log3.to_str().unwrap();
    let run: Vec<&str> = [&run[..], &["--log-dir", log3_s, "--seconds", "60"]].concat();
    for args in [run, vec!["log", "--log-dir", log2_s, "--json"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = controller_bin()
            .args(&args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let summary = run_json(&["log", "--log-dir", log3.to_str().unwrap(), "--json"]);
    assert_eq!(
        summary["records"], 12,
        "every decision committed: {summary}"
    );
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// `verify --firmware-blob`: the blob a firmware image is built with comes only out of a
/// bundle that verified (and matched the scenario), byte for byte as signed, and a blob the
/// firmware would run; a tampered bundle writes nothing.
#[test]
fn verify_writes_the_firmware_blob_of_a_verified_bundle_only() {
    let fx = fixture("e2e-firmware-blob");
    let trust = fx.keys.public.to_str().unwrap();
    let verify = |bundle: &Path, out: &Path, extra: &[&str]| {
        controller_bin()
            .args([
                "verify",
                "--bundle",
                bundle.to_str().unwrap(),
                "--trust",
                trust,
            ])
            .args(["--scenario", "single-4way", "--firmware-blob"])
            .arg(out)
            .args(extra)
            .output()
            .unwrap()
    };
    for (extra, file) in [
        (&[][..], bundle::BLOB_FILE),
        (&["--int8"][..], bundle::BLOB_INT8_FILE),
    ] {
        let out = fx.dir.join(format!("image-{file}"));
        let o = verify(&fx.bundle, &out, extra);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let written = std::fs::read(&out).unwrap();
        assert_eq!(written, std::fs::read(fx.bundle.join(file)).unwrap());
        let blob = greenwave_core::mlp::MlpBlob::parse(&written).unwrap();
        assert_eq!(blob.plan_hash, fx.plan.hash());
        assert_eq!(blob.obs_layout, fx.layout);
    }
    // One byte of the signed blob changed: verification fails and no blob is written.
    let tampered = fx.dir.join("tampered");
    std::fs::create_dir_all(&tampered).unwrap();
    for e in std::fs::read_dir(&fx.bundle).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tampered.join(e.file_name())).unwrap();
    }
    let mut bytes = std::fs::read(tampered.join(bundle::BLOB_FILE)).unwrap();
    bytes[100] ^= 1;
    std::fs::write(tampered.join(bundle::BLOB_FILE), bytes).unwrap();
    let out = fx.dir.join("image-tampered.blob");
    let o = verify(&tampered, &out, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    let tampered_msg = format!("{} was modified after signing", bundle::BLOB_FILE);
    assert!(!o.status.success() && err.contains(&tampered_msg), "{err}");
    assert!(
        !out.exists(),
        "a blob was written from a bundle that did not verify"
    );
    // Without signals to check its plan against, no blob is written either.
    let o = controller_bin()
        .args([
            "verify",
            "--bundle",
            fx.bundle.to_str().unwrap(),
            "--trust",
            trust,
        ])
        .arg("--firmware-blob")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--site"), "{err}");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&fx.dir);
}

/// A key the controller does not trust: the bundle is refused, the signals keep running
/// on the fallback (or the controller stops, with --require-policy).
#[test]
fn a_bundle_signed_by_an_untrusted_key_runs_the_fallback_or_stops() {
    let fx = fixture("e2e-untrusted");
    let (dir, bundle_dir) = (fx.dir.clone(), fx.bundle.clone());
    let bundle_s = bundle_dir.to_str().unwrap();
    let (other, _) = bundle::keygen(&dir.join("keys/other"), false).unwrap();
    let other_pub = other.public.to_str().unwrap();
    let log3 = dir.join("log3");
    let v = run_json(&[
        "run",
        "--bundle",
        bundle_s,
        "--trust",
        other_pub,
        "--scenario",
        "single-4way",
        "--log-dir",
        log3.to_str().unwrap(),
        "--seconds",
        "300",
        "--json",
        "-q",
    ]);
    assert_eq!(v["policy"]["loaded"], false);
    assert!(
        v["policy"]["error"]
            .as_str()
            .unwrap()
            .contains("trust check failed"),
        "{v}"
    );
    assert_eq!(v["fallback_decisions"], 60);
    let out = controller_bin()
        .args(["run", "--bundle", bundle_s, "--trust", other_pub])
        .args([
            "--scenario",
            "single-4way",
            "--log-dir",
            log3.to_str().unwrap(),
        ])
        .args(["--seconds", "60", "--require-policy", "-q"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("trust check failed"));
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// The single-4way scenario's site configuration (actuated fallback), written to
/// `dir/site.toml`.
fn single_4way_site(dir: &Path) -> (greenwave_runtime::site::SiteConfig, PathBuf) {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let sim = greenwave_runtime::controller::SimField::new(
        greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0),
    );
    let site = greenwave_runtime::site::SiteConfig::from_specs(
        "test cabinet",
        sim.decision_interval(),
        &sim.signal_specs(),
        &Fallback::for_scenario(&scenario, FallbackKind::Actuated),
    );
    let site_file = dir.join("site.toml");
    std::fs::write(&site_file, site.to_toml().unwrap()).unwrap();
    (site, site_file)
}

/// Log `replayed` holds the `n` actions of log `live`, each record's reward the site's
/// (wait delta).
fn same_logged_actions(live: &Path, replayed: &Path, n: usize) {
    let records = |log: &Path| -> Vec<LogRecord> {
        let (records, issues) = read_all(log).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
        records
    };
    let (a, b) = (records(live), records(replayed));
    let reward = Some(greenwave_core::RewardKind::WaitDelta);
    assert!(b.iter().all(|r| r.transition.reward_kind == reward));
    let actions =
        |rs: &[LogRecord]| -> Vec<u8> { rs.iter().map(|r| r.transition.action).collect() };
    assert_eq!(a.len(), n);
    assert_eq!(actions(&a), actions(&b));
}

/// A cabinet runs from a site configuration on recorded detector readings, with no
/// simulator: record a simulated run, write the site, replay it — the policy takes the same
/// decisions (the same logged actions); a site whose plan is not the bundle's runs the
/// fallback only, and a site with no field is refused by name.
#[test]
fn a_site_configuration_runs_on_recorded_readings_like_the_simulator() {
    let fx = fixture("site");
    let dir = &fx.dir;
    let (site, site_file) = single_4way_site(dir);
    let (bundle, key) = (
        fx.bundle.to_str().unwrap(),
        fx.keys.public.to_str().unwrap(),
    );
    let path = |p: &str| dir.join(p).to_str().unwrap().to_string();
    let common = [
        "run",
        "--bundle",
        bundle,
        "--trust",
        key,
        "--json",
        "--seconds",
        "600",
        NO_BUDGET[0],
        NO_BUDGET[1],
    ];
    let live = run_json(
        &[
            &common[..],
            &[
                "--scenario",
                "single-4way",
                "--record",
                &path("r.jsonl"),
                "--log-dir",
                &path("live"),
            ],
        ]
        .concat(),
    );
    let replayed = run_json(
        &[
            &common[..],
            &[
                "--site",
                site_file.to_str().unwrap(),
                "--replay",
                &path("r.jsonl"),
                "--log-dir",
                &path("replayed"),
            ],
        ]
        .concat(),
    );
    assert_eq!(replayed["policy"]["loaded"], true, "{replayed}");
    assert_eq!(live["decisions"], 120);
    assert_eq!(replayed["decisions"], 120);
    same_logged_actions(&dir.join("live"), &dir.join("replayed"), 120);

    // Another plan: the bundle is refused for it and the fallback runs.
    let other = site
        .to_toml()
        .unwrap()
        .replace("min_green = 8000", "min_green = 9000");
    let other_file = dir.join("other.toml");
    std::fs::write(&other_file, other).unwrap();
    let refused = run_json(
        &[
            &common[..],
            &[
                "--site",
                other_file.to_str().unwrap(),
                "--replay",
                &path("r.jsonl"),
                "--log-dir",
                &path("other"),
            ],
        ]
        .concat(),
    );
    assert_eq!(refused["policy"]["loaded"], false, "{refused}");
    assert_eq!(refused["fallback_decisions"], 120);

    let out = controller_bin()
        .args(
            [
                &common[..],
                &[
                    "--site",
                    site_file.to_str().unwrap(),
                    "--log-dir",
                    &path("none"),
                ],
            ]
            .concat(),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs a field") && err.contains("--replay"),
        "{err}"
    );

    // A recording damaged in the middle: the run stops on the damaged line, and says how
    // far it got and what its log holds; the log reads back exactly that many records.
    let text = std::fs::read_to_string(dir.join("r.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let middle = lines.len() / 2;
    lines[middle] = "{\"not a record\": true}";
    let damaged = dir.join("damaged.jsonl");
    std::fs::write(&damaged, lines.join("\n") + "\n").unwrap();
    let out = controller_bin()
        .args(
            [
                &common[..],
                &[
                    "--site",
                    site_file.to_str().unwrap(),
                    "--replay",
                    damaged.to_str().unwrap(),
                    "--log-dir",
                    &path("damaged-log"),
                ],
            ]
            .concat(),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("line {}", middle + 1)), "{err}");
    let (records, issues) = read_all(dir.join("damaged-log")).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert!(
        !records.is_empty() && records.len() < 120,
        "{}",
        records.len()
    );
    assert!(
        err.contains(&format!("{} transitions are committed", records.len())),
        "{err}"
    );
}

/// A site with `program_clock_time = "unix"`: the controller reads the program-clock lanes
/// of the system clock's time of day, not of its own time since it started.
#[test]
fn a_unix_time_program_clock_follows_the_system_clock() {
    use greenwave_runtime::site::{ClockTime, SiteConfig};
    use std::time::{SystemTime, UNIX_EPOCH};

    let unix_ms = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let dir = common::tmp("unix-clock");
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let sim = greenwave_runtime::controller::SimField::new(
        greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0),
    );
    let mut specs = sim.signal_specs();
    let detected = specs[0].layout.n_lanes as usize;
    let layout = ObsLayout::for_signal(detected, specs[0].plan.n_phases(), true).unwrap();
    // Signed first: the program is put in mid-cycle as late as it can be, so that a slow
    // machine's key generation and signing do not move "now" out of the middle third.
    let keys = sign_clocked_policy(&dir, layout, &specs[0].plan, sim.decision_interval());
    let on_unix = program_in_mid_cycle(unix_ms());
    specs[0].program_clock = Some(on_unix.clone());
    specs[0].layout = layout;
    let mut site = SiteConfig::from_specs(
        "unix clock",
        sim.decision_interval(),
        &specs,
        &Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
    );
    site.program_clock_time = ClockTime::Unix;
    let site_file = dir.join("site.toml");
    std::fs::write(&site_file, site.to_toml().unwrap()).unwrap();

    // 300 s on `site`, the field and log given by `rest`.
    let bundle_dir = dir.join("bundle");
    let run_site = |site: &Path, rest: &[&str]| {
        let head = [
            "run",
            "--bundle",
            bundle_dir.to_str().unwrap(),
            "--trust",
            keys.public.to_str().unwrap(),
            "--site",
            site.to_str().unwrap(),
            "--seconds",
            "300",
            "--json",
        ];
        run_json(&[&head[..], rest].concat())
    };
    let (log, replay) = (dir.join("log"), dir.join("r.jsonl"));
    let (log, replay) = (log.to_str().unwrap(), replay.to_str().unwrap());
    let started = unix_ms();
    let v = run_site(
        &site_file,
        &[
            "--scenario",
            "single-4way",
            "--log-dir",
            log,
            "--record",
            replay,
        ],
    );
    let ended = unix_ms();
    assert_eq!(v["policy"]["loaded"], true, "{v}");
    // The controller's time 0, on the Unix clock, as it reports it.
    let origin = v["program_clock_unix_origin_ms"].as_u64().unwrap();
    assert!(
        (started..=ended).contains(&origin),
        "{origin} not in {started}..={ended}"
    );
    let (records, issues) = read_all(dir.join("log")).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(records.len(), 60);
    let clock_lanes = detected..detected + specs[0].plan.n_phases();
    let off_by_half = check_unix_clock_lanes(&records, clock_lanes, &on_unix, origin);
    // Read on the controller's own time instead, most decisions would differ.
    assert!(off_by_half >= 20, "{off_by_half} of 60 differ");

    // The recording holds the detector lanes only (the clock's are the controller's), so
    // it replays on the same junction's site with or without the clock.
    let mut plain = site.clone();
    plain.program_clock_time = ClockTime::Controller;
    plain.signals[0].program_clock = None;
    let plain_file = dir.join("plain.toml");
    std::fs::write(&plain_file, plain.to_toml().unwrap()).unwrap();
    for (file, clocked) in [(&site_file, true), (&plain_file, false)] {
        let log = dir.join(format!("replayed-{clocked}"));
        let v = run_site(
            file,
            &["--replay", replay, "--log-dir", log.to_str().unwrap()],
        );
        assert_eq!(v["decisions"], 60, "{v}");
        // The clock-reading bundle runs only where the site gives the clock.
        assert_eq!(v["policy"]["loaded"], clocked, "{v}");
    }
}

/// A four-stage program (whole-second cycle of 40–100 s) on Unix time whose cycle `now_ms`
/// is in the middle third of, so that a clock read on the controller's own time (0 at its
/// start) is a third to two thirds of a cycle off.
fn program_in_mid_cycle(now_ms: u64) -> ProgramClock {
    let cycle_s = (40u64..=100)
        .find(|c| (c * 1000 / 3..c * 2000 / 3).contains(&(now_ms % (c * 1000))))
        .unwrap();
    let green_ms = ((cycle_s * 1000 - 10_000) / 2) as u32;
    let stages =
        [(0u8, green_ms), (1, 5_000), (2, green_ms), (3, 5_000)].map(|(p, ms)| ClockStage {
            phase: p,
            duration: Millis(ms),
        });
    ProgramClock::new(&stages, 0).unwrap()
}

/// A synthetic policy that reads the program clock, exported and signed into
/// `dir/bundle`; the signing keys.
fn sign_clocked_policy(
    dir: &Path,
    layout: ObsLayout,
    plan: &greenwave_core::PhasePlan,
    interval: Millis,
) -> bundle::KeyPairPaths {
    let weights = common::synthetic_weights(layout, &[16], 7);
    let onnx = common::write_export_clocked(dir, &weights, plan, interval, true);
    let (keys, _) = bundle::keygen(&dir.join("site"), false).unwrap();
    let key = bundle::load_signing_key(&keys.secret).unwrap();
    bundle::pack_and_sign(&common::inputs(&onnx), &key, &dir.join("bundle")).unwrap();
    keys
}

/// Every record's clock lanes (`lanes` of its observation) mark the phase the program
/// on Unix time serves at `origin` + its timestamp; returns how many of them the program
/// read on the controller's own time would have got wrong.
fn check_unix_clock_lanes(
    records: &[greenwave_runtime::log::LogRecord],
    lanes: std::ops::Range<usize>,
    on_unix: &ProgramClock,
    origin: u64,
) -> usize {
    let mut off = 0;
    for r in records {
        let t = &r.transition;
        let seen = t.obs[lanes.clone()].iter().position(|&x| x == 1.0);
        let expected = on_unix.phase_at(origin + t.timestamp_ms).0;
        assert_eq!(
            seen.map(|k| k as u8),
            Some(expected),
            "at {} ms the clock reads {seen:?}, the Unix program {expected}",
            t.timestamp_ms
        );
        off += usize::from(on_unix.phase_at(t.timestamp_ms).0 != expected);
    }
    off
}

/// Numbers a controller would wrap or panic on are refused as the flags are read, naming
/// the flag: a log cap of 2^44 + 16 MiB wrapped to 16 MiB, which deleted every sealed
/// segment of the log as it opened.
#[test]
fn out_of_range_flags_are_refused_before_anything_runs() {
    let dir = common::tmp("flags");
    let log = dir.join("log");
    for (flag, value) in [
        ("--log-cap-mib", "17592186044432"),
        ("--segment-mib", "0"),
        ("--inference-budget-ms", "inf"),
        ("--inference-budget-ms", "NaN"),
        ("--max-red-s", "4294968"),
        ("--healthy-s", "5000000"),
    ] {
        let out = controller_bin()
            .args(["run", "--bundle", "none", "--trust", "none", "--scenario"])
            .args(["single-4way", "--seconds", "10", "--log-dir"])
            .arg(&log)
            .args([flag, value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")),
            "{err}"
        );
        assert!(!log.exists(), "{flag} {value}: the log was opened");
    }
}

/// Bytes that hold no frame at all (a JSON file given by mistake) are an error that says
/// so, not "0 frames appended" with exit status 0.
#[test]
fn collect_refuses_input_without_a_single_frame() {
    let dir = std::env::temp_dir().join(format!("gw-collect-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let from = dir.join("readings.jsonl");
    std::fs::write(&from, "{\"t_ms\": 0, \"readings\": []}\n").unwrap();
    let out = controller_bin()
        .args(["collect", "--from", from.to_str().unwrap(), "--log-dir"])
        .arg(dir.join("log"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("not one frame delimiter"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGTERM stops a run cleanly: the interval under way ends, every transition made is
/// committed (the last one `done`), the report is printed with `stopped_by`, the status is
/// 0, and the recording replays on the site to the same decisions. A second SIGTERM ends
/// the process at once.
#[test]
fn sigterm_stops_a_run_with_its_log_committed_and_its_recording_whole() {
    let fx = fixture("sigterm");
    let dir = &fx.dir;
    let (_, site_file) = single_4way_site(dir);
    let path = |p: &str| dir.join(p).to_str().unwrap().to_string();
    let (bundle, key) = (
        fx.bundle.to_str().unwrap(),
        fx.keys.public.to_str().unwrap(),
    );
    let common = ["run", "--bundle", bundle, "--trust", key, "--json", "-q"];
    let common = [&common[..], &NO_BUDGET].concat();
    // A realtime run, under way (its recording has the first decision point's line).
    let start = |record: &str, log: &str| {
        let child = controller_bin()
            .args(&common)
            .args([
                "--scenario",
                "single-4way",
                "--realtime",
                "--seconds",
                "3600",
            ])
            .args(["--record", &path(record), "--log-dir", &path(log)])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::read_to_string(path(record)).map_or(0, |t| t.lines().count()) < 2 {
            assert!(std::time::Instant::now() < deadline, "no decision in 60 s");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        child
    };
    let sigterm = |child: &std::process::Child| {
        let kill = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
    };
    // A second signal mid-interval ends the process at once, as a death by SIGTERM reads.
    let mut twice = start("r2.jsonl", "live2");
    sigterm(&twice);
    std::thread::sleep(std::time::Duration::from_millis(200));
    // Standard signals do not queue: a process that got no time since the first would
    // take two as one. Send again until it has ended.
    while twice.try_wait().unwrap().is_none() {
        sigterm(&twice);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = twice.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{:?}", out.status);
    assert!(out.stdout.is_empty(), "no report");

    let child = start("r.jsonl", "live");
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stopped_by"], "SIGTERM", "{v}");
    let decisions = v["decisions"].as_u64().unwrap();
    assert!((1..720).contains(&decisions), "{v}");
    assert_eq!(v["transitions_committed"], decisions, "{v}");
    let (records, issues) = read_all(dir.join("live")).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(records.len() as u64, decisions);
    assert!(records.last().unwrap().transition.done);
    let replayed = run_json(
        &[
            &common[..],
            &["--site", site_file.to_str().unwrap()],
            &["--replay", &path("r.jsonl"), "--log-dir", &path("replayed")],
        ]
        .concat(),
    );
    assert_eq!(replayed["decisions"], decisions, "{replayed}");
    assert!(replayed.get("stopped_by").is_none(), "{replayed}");
    same_logged_actions(&dir.join("live"), &dir.join("replayed"), decisions as usize);
}
