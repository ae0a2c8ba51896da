//! On `single-4way` with its peaked (morning-peak) demand, max-pressure and actuated
//! control beat fixed-time (Webster) on mean delay, averaged over several seeds; for the
//! base demand and the demand-shifted variant.

use greenwave_sim::{load, run_episode, ControllerKind, EmbeddedEnv};

fn mean_delay_s(demand: &str, kind: ControllerKind, seeds: u64) -> f64 {
    let scenario = load("single-4way").unwrap().with_demand(demand).unwrap();
    let mut env = EmbeddedEnv::from_scenario(&scenario, 0);
    let mut controller = kind.build(&scenario);
    let total: f64 = (0..seeds)
        .map(|seed| {
            run_episode(&mut env, controller.as_mut(), seed, scenario.episode())
                .unwrap()
                .mean_delay_s
        })
        .sum();
    total / seeds as f64
}

#[test]
fn adaptive_control_beats_fixed_time_on_single_4way() {
    for demand in ["base", "shifted"] {
        let fixed = mean_delay_s(demand, ControllerKind::FixedTime, 6);
        let actuated = mean_delay_s(demand, ControllerKind::Actuated, 6);
        let max_pressure = mean_delay_s(demand, ControllerKind::MaxPressure, 6);
        println!(
            "{demand}: fixed-time {fixed:.1} s, actuated {actuated:.1} s, max-pressure {max_pressure:.1} s"
        );
        assert!(
            actuated < fixed,
            "{demand}: actuated {actuated} vs fixed {fixed}"
        );
        assert!(
            max_pressure < fixed,
            "{demand}: max-pressure {max_pressure} vs fixed {fixed}"
        );
    }
}
