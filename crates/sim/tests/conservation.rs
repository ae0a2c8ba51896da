//! Vehicle conservation holds exactly after every step: entered = exited + inside and
//! arrived = entered + waiting to enter, on every built-in scenario, under every
//! controller and under random requests, and on a grid loaded until it gridlocks.

use greenwave_core::Millis;
use greenwave_sim::{load, ControllerKind, EmbeddedEnv, Env, Scenario};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

fn check_every_step(env: &mut EmbeddedEnv, mut decide: impl FnMut(&EmbeddedEnv) -> Vec<u8>) {
    while env.now() < env.episode() {
        let actions = decide(env);
        env.step(&actions).unwrap();
        let c = env.vehicle_counts();
        assert_eq!(c.entered, c.exited + c.inside, "at {}: {c:?}", env.now());
        assert_eq!(c.arrived, c.entered + c.backlog, "at {}: {c:?}", env.now());
        let m = env.metrics();
        assert_eq!(m.throughput_veh, c.exited);
        assert_eq!(m.backlog_veh, c.backlog);
    }
}

fn random_requests(seed: u64) -> impl FnMut(&EmbeddedEnv) -> Vec<u8> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    move |env: &EmbeddedEnv| {
        env.signals()
            .iter()
            .map(|s| rng.random_range(0..s.layout.n_phases + 1))
            .collect()
    }
}

#[test]
fn conservation_on_every_builtin_under_every_controller() {
    for name in ["single-4way", "arterial-3", "grid-4x4"] {
        let scenario = load(name)
            .unwrap()
            .with_episode(Millis::from_secs(1800))
            .unwrap();
        for kind in ControllerKind::ALL {
            let mut env = EmbeddedEnv::from_scenario(&scenario, 1);
            let mut controller = kind.build(&scenario);
            controller.reset(&env);
            check_every_step(&mut env, |env| controller.decide(env));
            assert!(env.vehicle_counts().exited > 100, "{name} {kind}");
        }
        let mut env = EmbeddedEnv::from_scenario(&scenario, 2);
        check_every_step(&mut env, random_requests(2));
    }
}

#[test]
fn conservation_every_second_through_gridlock() {
    // Twice the demand, one-second decisions, random requests: the grid locks up, entry
    // backs up, and still no vehicle is created or lost.
    let scenario: Scenario = load("grid-4x4")
        .unwrap()
        .with_demand_scale(2.0)
        .unwrap()
        .with_decision_interval(Millis::from_secs(1))
        .unwrap()
        .with_episode(Millis::from_secs(2400))
        .unwrap();
    let mut env = EmbeddedEnv::from_scenario(&scenario, 3);
    check_every_step(&mut env, random_requests(3));
    let m = env.metrics();
    assert!(
        m.backlog_veh > 100,
        "expected a backlog at the entries: {m:?}"
    );
}
