//! The max-red rule on the controller: a policy that only ever asks for one phase still
//! lets every phase whose detectors call show green within the bound, and each decision
//! the rule overrules is counted as a supervisor override.

mod common;

use common::AlwaysFirstPhase;
use greenwave_core::{Millis, ObsLayout};
use greenwave_runtime::controller::{
    Controller, ControllerConfig, Fallback, FallbackKind, Policy, SimField,
};
use greenwave_runtime::inference::Explorer;
use greenwave_sim::EmbeddedEnv;

/// Runs the stubborn policy on single-4way for an hour with bound `max_red`; returns the
/// longest time (s) any phase went without green, and the max-red overrides counted.
fn run(max_red: Millis) -> (u64, u64) {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let mut field = SimField::new(EmbeddedEnv::from_scenario(&scenario, 4));
    let specs = field.signal_specs();
    let layout: ObsLayout = specs[0].layout;
    let mut cfg = ControllerConfig::for_simulated_time(field.decision_interval());
    cfg.max_red = Some(max_red);
    let mut c = Controller::new(
        specs,
        Ok(Policy {
            backend: Box::new(AlwaysFirstPhase {
                n: layout.n_phases as usize,
            }),
            version: 1,
            explorer: Explorer::greedy(),
        }),
        Fallback::for_scenario(&scenario, FallbackKind::FixedTime),
        cfg,
        None,
    )
    .unwrap();
    let n = c.signals()[0].plan.n_phases();
    let (mut last, mut longest) = (vec![0u64; n], 0u64);
    while c.now_ms() < 3_600_000 {
        assert!(c.step(&mut field).unwrap());
        let now = c.now_ms();
        if let Some(p) = c.sequencer(0).green_phase() {
            last[p.0 as usize] = now;
        }
        longest = longest.max(last.iter().map(|&t| now - t).max().unwrap_or(0));
    }
    (longest / 1000, c.stats().max_red_overrides)
}

#[test]
fn a_policy_that_asks_for_one_phase_still_lets_every_phase_show_green() {
    // With the rule as good as off, the stubborn policy keeps phases from green for
    // most of the hour (single-4way's demand calls on every phase).
    let (off, overrides) = run(Millis(u32::MAX));
    assert!(off > 1800, "{off} s");
    assert_eq!(overrides, 0);
    let (on, overrides) = run(Millis::from_secs(120));
    assert!(overrides > 10, "{overrides}");
    // Every phase shows green within the bound plus a few phases' turns (each a
    // clearance and a min green rounded up to decisions, and the policy's phase back).
    assert!(on <= 120 + 4 * 30, "{on} s");
}
