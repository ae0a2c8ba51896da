//! Physics check: one approach, Poisson arrivals, fixed-time control. The simulated mean
//! delay must be within 10 % of Webster's delay formula for degrees of saturation
//! 0.3–0.85 (several seeds averaged).
//!
//! Webster (1958): `d = c(1−λ)² / (2(1−λx)) + x² / (2q(1−x)) − 0.65 (c/q²)^(1/3) x^(2+5λ)`
//! with cycle `c`, effective green ratio `λ = g/c`, flow `q` and degree of saturation
//! `x = q / (λ s)`. Here `c` = 60 s; the approach shows 30 s of green, and with the
//! model's defaults (start-up lost time 2 s, 2 s of the yellow used) its effective green
//! is also 30 s: λ = 0.5, capacity 900 veh/h.

use greenwave_core::{CycleStage, Millis};
use greenwave_sim::controllers::{FixedTime, FixedTimePlan};
use greenwave_sim::{run_episode, EmbeddedEnv, Scenario};

const CYCLE_S: f64 = 60.0;
const EFFECTIVE_GREEN_S: f64 = 30.0;
const SATURATION_VEH_PER_S: f64 = 0.5;
/// Flow of the scenario file's demand, scaled to each degree of saturation.
const FILE_FLOW_VEH_PER_HOUR: f64 = 900.0;

fn webster_delay_s(q_veh_per_s: f64) -> f64 {
    let (c, lambda) = (CYCLE_S, EFFECTIVE_GREEN_S / CYCLE_S);
    let x = q_veh_per_s / (lambda * SATURATION_VEH_PER_S);
    c * (1.0 - lambda).powi(2) / (2.0 * (1.0 - lambda * x))
        + x * x / (2.0 * q_veh_per_s * (1.0 - x))
        - 0.65 * (c / (q_veh_per_s * q_veh_per_s)).cbrt() * x.powf(2.0 + 5.0 * lambda)
}

fn fixed_cycle() -> FixedTime {
    // Phase 0 (the approach) 30 s, phase 1 (the empty cross street) 20 s, plus 2 × 5 s
    // of yellow and all-red: a 60 s cycle.
    FixedTime::new(vec![FixedTimePlan {
        stages: vec![
            CycleStage {
                phase: 0,
                green: Millis::from_secs(30),
            },
            CycleStage {
                phase: 1,
                green: Millis::from_secs(20),
            },
        ],
        cycle: Millis((CYCLE_S * 1000.0) as u32),
    }])
}

#[test]
fn mean_delay_matches_webster() {
    let base = Scenario::from_toml_str(
        include_str!("data/single-approach.toml"),
        "tests/data/single-approach.toml",
    )
    .unwrap();
    let seeds = 8u64;
    let mut report = Vec::new();
    for x in [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85] {
        let q_veh_per_s = x * SATURATION_VEH_PER_S * EFFECTIVE_GREEN_S / CYCLE_S;
        let scenario = base
            .with_demand_scale(q_veh_per_s * 3600.0 / FILE_FLOW_VEH_PER_HOUR)
            .unwrap();
        let mut env = EmbeddedEnv::from_scenario(&scenario, 0);
        let mut total = 0.0;
        for seed in 0..seeds {
            let m = run_episode(&mut env, &mut fixed_cycle(), seed, scenario.episode()).unwrap();
            assert_eq!(
                m.backlog_veh, 0,
                "the approach is long enough to store the queue"
            );
            total += m.mean_delay_s;
        }
        let simulated = total / seeds as f64;
        let webster = webster_delay_s(q_veh_per_s);
        let ratio = simulated / webster;
        report.push(format!(
            "x = {x:.2}: simulated {simulated:.2} s, Webster {webster:.2} s, ratio {ratio:.3}"
        ));
        assert!(
            (ratio - 1.0).abs() <= 0.10,
            "off by more than 10 %:\n{}",
            report.join("\n")
        );
    }
    println!("{}", report.join("\n"));
}
