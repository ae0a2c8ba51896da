//! Rollback by itself: a policy switched in behind the gate's back that makes traffic worse
//! is rolled back by the controller within the configured window, with the evidence; an
//! equally good one is kept.
//!
//! The field: the `finetune-shift` scenario (single-4way's junction, steady demand, so the
//! windows before and after a switch are comparable), run by the project's trained
//! `models/single-4way.onnx`.

mod common;

use common::AlwaysFirstPhase;
use std::path::Path;

use greenwave_core::{Millis, ObsLayout};
use greenwave_runtime::controller::{
    Controller, ControllerConfig, Fallback, FallbackKind, Policy, RollbackEvent, SimField,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer, PolicyBackend};
use greenwave_sim::EmbeddedEnv;

fn trained(version: u32, n: &ObsLayout) -> Policy {
    let model =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/single-4way.onnx"))
            .unwrap();
    Policy {
        backend: load_backend(BackendKind::Tract, &model, *n, None).unwrap(),
        version,
        explorer: Explorer::greedy(),
    }
}

/// A controller with the default watch on the steady `finetune-shift` field (seed 11),
/// starting with `policy`; its field, the signal's layout and the watch's window (ms).
fn steady(
    policy: impl FnOnce(&ObsLayout) -> Result<Policy, String>,
) -> (Controller, SimField<EmbeddedEnv>, ObsLayout, u64) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/finetune-shift.toml");
    let scenario = greenwave_sim::load(path.to_str().unwrap()).unwrap();
    let field = SimField::new(EmbeddedEnv::from_scenario(&scenario, 11));
    let specs = field.signal_specs();
    let sig = specs[0].layout;
    let cfg = ControllerConfig::for_simulated_time(field.decision_interval());
    assert!(cfg.rollback.enabled, "on by default");
    let window = cfg.rollback.window.0 as u64;
    let c = Controller::new(
        specs,
        policy(&sig),
        Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
        cfg,
        None,
    )
    .unwrap();
    (c, field, sig, window)
}

/// Runs the trained policy for an hour, switches to `next` (version 2), runs 50 more
/// minutes; returns the watch's verdicts and the version running at the end.
fn switch_and_watch(
    make_next: impl FnOnce(&ObsLayout) -> Box<dyn PolicyBackend>,
) -> (Vec<RollbackEvent>, u32, u64) {
    let (mut c, mut field, sig, window) = steady(|sig| Ok(trained(1, sig)));
    while c.now_ms() < 3_600_000 {
        assert!(c.step(&mut field).unwrap());
    }
    let next = Policy {
        backend: make_next(&sig),
        version: 2,
        explorer: Explorer::greedy(),
    };
    let switched_at = c.now_ms();
    assert!(c.switch_policy(next), "the switch is watched");
    while c.now_ms() < switched_at + window + 1_200_000 {
        assert!(c.step(&mut field).unwrap());
    }
    let version = c.policy().unwrap().version;
    (c.stats().rollback_events, version, switched_at)
}

#[test]
fn a_bad_policy_switched_in_behind_the_gates_back_is_rolled_back_within_the_window() {
    let (events, version, switched_at) = switch_and_watch(|s| {
        Box::new(AlwaysFirstPhase {
            n: s.n_phases as usize,
        })
    });
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    eprintln!("{}", serde_json::to_string_pretty(e).unwrap());
    assert!(e.rolled_back, "{e:?}");
    assert_eq!((e.from_version, e.to_version), (2, 1));
    assert_eq!(e.switched_at_ms, switched_at);
    let window = ControllerConfig::new(Millis::from_secs(5))
        .rollback
        .window
        .0 as u64;
    assert!(
        e.at_ms - switched_at <= window + 5_000,
        "verdict {} ms after the switch",
        e.at_ms - switched_at
    );
    assert_eq!(version, 1, "the previous version runs again");
    let q = &e.evidence[0];
    assert!(q.relative_change > 0.05 && q.p_value < 0.025, "{q:?}");
}

#[test]
fn an_equally_good_policy_is_kept() {
    let (events, version, _) = switch_and_watch(|s| trained(2, s).backend);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(!events[0].rolled_back, "{:?}", events[0]);
    assert_eq!(version, 2);
}

/// Out of the fallback a switch is not watched (nothing ran to compare with), and the
/// fallback's KPIs are forgotten: the next switch waits for a whole window of the policy
/// switched in.
#[test]
fn a_switch_out_of_the_fallback_is_unwatched_and_the_next_waits_a_whole_window() {
    let (mut c, mut field, sig, window) = steady(|_| Err("no policy".into()));
    while c.now_ms() < window + 600_000 {
        assert!(c.step(&mut field).unwrap());
    }
    assert!(!c.switch_watchable(), "no policy runs");
    assert!(!c.switch_policy(trained(1, &sig)), "unwatched");
    let switched_at = c.now_ms();
    while c.now_ms() < switched_at + window - 5_000 {
        assert!(c.step(&mut field).unwrap());
        assert!(!c.switch_watchable(), "at {} ms", c.now_ms());
    }
    while c.now_ms() < switched_at + window + 5_000 {
        assert!(c.step(&mut field).unwrap());
    }
    assert!(c.switch_watchable(), "a whole window of version 1");
    assert!(c.switch_policy(trained(2, &sig)));
}
