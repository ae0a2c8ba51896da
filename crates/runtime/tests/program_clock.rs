//! A site's program clock on the controller: the policy reads the detector lanes the field
//! supplies, then one lane per phase that the controller sets, at its own time, for the
//! phase the junction's program serves; a bundle and a controller must agree on it.

mod common;

use std::sync::{Arc, Mutex};

use common::Recorder;
use greenwave_core::Millis;
use greenwave_runtime::controller::{Controller, ControllerConfig, Fallback, FallbackKind, Policy};
use greenwave_runtime::inference::Explorer;

#[test]
fn the_controller_writes_the_clock_lanes_from_its_own_time() {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let mut field = common::TestField::new(&scenario, 3);
    let mut specs = field.inner.signal_specs();
    let p = specs[0].plan.n_phases();
    // 20 s per phase, the cycle starting 7 s into the controller's time.
    let (detected, clock) = common::add_program_clock(&mut specs, |_| Millis::from_secs(20), 7_000);
    assert_eq!(specs[0].field_lanes(), detected);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut c = Controller::new(
        specs,
        Ok(Policy {
            backend: Box::new(Recorder { seen: seen.clone() }),
            version: 1,
            explorer: Explorer::greedy(),
        }),
        Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
        ControllerConfig::for_simulated_time(field.inner.decision_interval()),
        None,
    )
    .unwrap();
    // The controller's time at each observation the policy was shown.
    let mut times = Vec::new();
    while c.now_ms() < 300_000 {
        let (t, before) = (c.now_ms(), seen.lock().unwrap().len());
        assert!(c.step(&mut field).unwrap());
        let shown = seen.lock().unwrap().len() - before;
        times.extend(std::iter::repeat_n(t, shown));
    }
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 30, "{} decisions", seen.len());
    let lanes = detected + p;
    for (obs, &t) in seen.iter().zip(&times) {
        let densities = &obs[detected..lanes];
        let queues = &obs[lanes + detected..2 * lanes];
        let on = clock.phase_at(t).0 as usize;
        for (k, &d) in densities.iter().enumerate() {
            assert_eq!(d, if k == on { 1.0 } else { 0.0 }, "t {t} ms");
        }
        assert!(queues.iter().all(|&q| q == 0.0));
    }
    // The detector lanes are the field's, not zero.
    assert!(seen.iter().any(|o| o[..detected].iter().any(|&x| x > 0.0)));
}
