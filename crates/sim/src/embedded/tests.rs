use super::*;
use crate::controllers::{run_episode, ControllerKind};
use crate::scenario::load;
use crate::test_support::approach;

/// A one-lane link at 36 km/h in TOML; with a through lane when it arrives at a signal.
fn one_lane_link(id: &str, length_m: f64, arrives_at_signal: bool) -> String {
    let turns = if arrives_at_signal {
        "lane_turns = [\"T\"]\nturn_ratios = { through = 1.0 }\n"
    } else {
        ""
    };
    format!(
        "\n[[links]]\nid = \"{id}\"\nlength_m = {length_m:?}\nspeed_limit_kmh = 36.0\nlanes = 1\n{turns}"
    )
}

/// Two signals in a row, west to east, joined by a link of `mid_m` metres; each has an
/// empty cross street from the north. Phases: 0 = west through, 1 = north through.
fn corridor(mid_m: f64, flow: f64) -> Scenario {
    let mut text = format!(
        "name = \"corridor\"\ndecision_interval_s = 1\n\n\
         [[demand]]\nname = \"base\"\nflows_veh_per_hour = {{ in = {flow:?} }}\n"
    );
    text += &one_lane_link("in", 300.0, true);
    text += &one_lane_link("mid", mid_m, true);
    text += &one_lane_link("out", 100.0, false);
    for (j, west_in, east_out) in [("J1", "in", "mid"), ("J2", "mid", "out")] {
        text += &one_lane_link(&format!("{j}_x_in"), 100.0, true);
        text += &one_lane_link(&format!("{j}_x_out"), 100.0, false);
        text += &format!(
            r#"
[[signals]]
id = "{j}"
arms.west = {{ in = "{west_in}" }}
arms.east = {{ out = "{east_out}" }}
arms.north = {{ in = "{j}_x_in" }}
arms.south = {{ out = "{j}_x_out" }}
timing = {{ min_green_s = 5, max_green_s = 1000, yellow_s = 3, all_red_s = 2 }}
phases = [ {{ movements = ["WT"] }}, {{ movements = ["NT"] }} ]
"#
        );
    }
    Scenario::from_toml_str(&text, "corridor").unwrap_or_else(|e| panic!("{e}"))
}

/// Puts `n` vehicles at the stop line of lane `lane`, all arrived at t = 0.
fn queue_up(env: &mut EmbeddedEnv, lane: u32, n: usize) {
    let link = env.net.lanes[lane as usize].link;
    let movement = env.net.choose_movement(link, 0.5);
    for k in 0..n {
        let v = Vehicle {
            arrival_s: 0.0,
            entered_s: 0.0,
            stop_line_s: 0.0,
            free_flow_s: 0.0,
            wait_s: 0.0,
            route_key: k as u64,
            hop: 0,
            movement,
        };
        env.state.lanes[lane as usize].vehicles.push_back(v);
        env.state.stats.arrived += 1;
        env.state.stats.entered += 1;
    }
    env.state.lanes[lane as usize].refresh_ready();
}

/// Steps one second at a time asking for `phase`, recording every stop-line crossing of
/// lane `lane` (crossing times are exact, at most one per second at 1800 veh/h).
fn crossings(env: &mut EmbeddedEnv, lane: u32, phase: u8, seconds: u32) -> Vec<f64> {
    let sig = env.net.lanes[lane as usize].signal as usize;
    let mut out = Vec::new();
    for _ in 0..seconds {
        let before = env.state.lanes[lane as usize].vehicles.len();
        env.step(&[phase]).unwrap();
        let after = env.state.lanes[lane as usize].vehicles.len();
        if after < before {
            assert_eq!(before - after, 1, "two crossings within one second");
            let m = env.state.signals[sig]
                .movements
                .iter()
                .map(|m| m.last_crossing_s)
                .fold(f64::NEG_INFINITY, f64::max);
            out.push(m);
        }
    }
    out
}

#[test]
fn a_standing_queue_discharges_at_saturation_flow_after_the_lost_time() {
    // Phase 1 (cross street) is green at t = 0; north through gets green at 5 + 3 + 2 = 10 s.
    let s = approach(0.0, 500.0, 1, 100.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 1);
    queue_up(&mut env, 0, 30);
    let times = crossings(&mut env, 0, 0, 80);
    // Start-up lost time 2 s + half a headway: first crossing 3 s after green onset,
    // then one every 2 s (1800 veh/h).
    assert_eq!(times.len(), 30);
    for (k, t) in times.iter().enumerate() {
        assert!(
            (t - (13.0 + 2.0 * k as f64)).abs() < 1e-9,
            "vehicle {k} at {t}"
        );
    }
    let m = env.metrics();
    // Each queued vehicle waited exactly until its crossing.
    let expected_wait: f64 = times.iter().sum::<f64>() / 30.0;
    assert!((m.mean_wait_s - expected_wait).abs() < 1e-9);
    assert!((m.mean_delay_s - expected_wait).abs() < 1e-9);
}

#[test]
fn discharge_stops_with_the_used_part_of_the_yellow() {
    // North through green from t = 0; at 10 s it is switched off: yellow 10–13 s, of which
    // the first 2 s are still used. Crossings at 3, 5, 7, 9, 11 s; none at 13.
    let s = approach(0.0, 500.0, 0, 60.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 1);
    queue_up(&mut env, 0, 20);
    let mut times = crossings(&mut env, 0, 0, 10);
    times.extend(crossings(&mut env, 0, 1, 20));
    assert_eq!(times, vec![3.0, 5.0, 7.0, 9.0, 11.0]);
}

#[test]
fn a_lone_vehicle_on_green_is_not_delayed() {
    let s = approach(0.0, 100.0, 0, 60.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 1);
    env.step(&[0]).unwrap();
    // Enters at t = 10 (after the lost time is long over), 100 m at 10 m/s.
    for _ in 0..9 {
        env.step(&[0]).unwrap();
    }
    let v = Vehicle {
        arrival_s: 10.0,
        entered_s: 10.0,
        stop_line_s: 10.0,
        free_flow_s: 0.0,
        wait_s: 0.0,
        route_key: 3,
        hop: 0,
        movement: 0,
    };
    env.state.enter_lane(&env.net, v, 0, 0, 10.0);
    env.state.stats.arrived += 1;
    env.state.stats.entered += 1;
    for _ in 0..30 {
        env.step(&[0]).unwrap();
    }
    let m = env.metrics();
    assert_eq!(m.throughput_veh, 1);
    assert!(m.mean_delay_s.abs() < 1e-9, "{m:?}");
    assert!((m.mean_travel_time_s - 20.0).abs() < 1e-9, "{m:?}");
}

#[test]
fn spill_back_blocks_the_upstream_signal() {
    // `mid` stores 30 / 7.5 = 4 vehicles; J2 never lets them go.
    let s = corridor(30.0, 1200.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 3);
    let mid = s
        .network()
        .links
        .iter()
        .position(|l| l.id == "mid")
        .unwrap();
    let mid_lane = s.network().links[mid].first_lane as usize;
    for _ in 0..300 {
        env.step(&[0, 1]).unwrap();
        for (lane, spec) in env.net.lanes.iter().enumerate() {
            assert!(env.state.lanes[lane].vehicles.len() <= spec.storage_veh as usize);
        }
    }
    assert_eq!(env.state.lanes[mid_lane].vehicles.len(), 4);
    // J1 shows green to the west approach, yet its queue does not move.
    let d = env.detectors(0);
    assert!(d[1].queue_veh > 20.0, "{d:?}");
    assert_eq!(d[1].downstream_veh, 4.0);
    assert_eq!(d[1].downstream_storage_veh, 4.0);
    let before = env.vehicle_counts();
    env.step(&[0, 1]).unwrap();
    assert_eq!(env.vehicle_counts().exited, before.exited);
    // Releasing J2 lets everything flow again.
    for _ in 0..120 {
        env.step(&[0, 0]).unwrap();
    }
    assert!(env.vehicle_counts().exited > before.exited + 30);
}

#[test]
fn delay_counts_vehicles_waiting_to_enter() {
    // A 15 m approach stores 2 vehicles; with the approach kept red, arrivals back up
    // outside the network.
    let s = approach(1200.0, 15.0, 1, 1000.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 5);
    for _ in 0..600 {
        env.step(&[1]).unwrap();
    }
    let m = env.metrics();
    let counts = env.vehicle_counts();
    assert!(m.backlog_veh > 100, "{m:?}");
    assert_eq!(counts.backlog, m.backlog_veh);
    let now = f64::from(env.now().0) / 1000.0;
    let backlog_delay: f64 = env.state.origins[0]
        .backlog
        .iter()
        .map(|v| now - v.arrival_s)
        .sum();
    let inside_delay: f64 = env.state.lanes[0]
        .vehicles
        .iter()
        .map(|v| now - v.arrival_s - v.free_flow_s)
        .sum();
    let expected = (backlog_delay + inside_delay) / counts.arrived as f64;
    assert!(
        (m.mean_delay_s - expected).abs() < 1e-6,
        "{} vs {expected}",
        m.mean_delay_s
    );
    // Waiting outside is delay, but not stopped time on the network.
    assert!(m.mean_wait_s < m.mean_delay_s / 10.0);
}

#[test]
fn vehicles_are_conserved_every_second() {
    let s = corridor(30.0, 1500.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 9);
    let mut phase = 0u8;
    for t in 0..3000u32 {
        if t % 37 == 0 {
            phase ^= 1;
        }
        env.step(&[phase, phase ^ (t as u8 % 2)]).unwrap();
        let c = env.vehicle_counts();
        assert_eq!(c.entered, c.exited + c.inside, "t = {t}");
        assert_eq!(c.arrived, c.entered + c.backlog, "t = {t}");
    }
    assert!(env.vehicle_counts().exited > 100);
}

#[test]
fn the_same_seed_gives_the_same_episode() {
    let s = load("single-4way").unwrap();
    let run = |seed: u64| {
        let mut env = EmbeddedEnv::from_scenario(&s, seed);
        let mut obs = vec![0.0; env.signals()[0].layout.dim()];
        let mut trace = Vec::new();
        for k in 0..300u32 {
            let out = env.step(&[(k / 3 % 4) as u8]).unwrap();
            env.observe(0, &mut obs).unwrap();
            trace.push((out.rewards, obs.clone()));
        }
        let mut m = env.metrics();
        m.wall_seconds = 0.0;
        (m, trace, env)
    };
    let (a, ta, mut env) = run(11);
    let (b, tb, _) = run(11);
    let (c, _, _) = run(12);
    assert_eq!(a, b);
    assert_eq!(ta, tb);
    assert_ne!(a, c);
    // Reset reproduces the episode too.
    env.reset(11).unwrap();
    for k in 0..300u32 {
        env.step(&[(k / 3 % 4) as u8]).unwrap();
    }
    let mut again = env.metrics();
    again.wall_seconds = 0.0;
    assert_eq!(again, a);
}

#[test]
fn arrivals_do_not_depend_on_the_controller() {
    let s = load("single-4way").unwrap();
    let arrived = |kind: ControllerKind| {
        let mut env = EmbeddedEnv::from_scenario(&s, 4);
        let mut c = kind.build(&s);
        run_episode(&mut env, c.as_mut(), 4, Millis::from_secs(1200)).unwrap();
        env.vehicle_counts().arrived
    };
    let fixed = arrived(ControllerKind::FixedTime);
    assert!(fixed > 300);
    assert_eq!(fixed, arrived(ControllerKind::MaxPressure));
    assert_eq!(fixed, arrived(ControllerKind::Actuated));
}

#[test]
fn observations_follow_the_layout() {
    let s = load("grid-4x4").unwrap();
    let mut env = EmbeddedEnv::from_scenario(&s, 2);
    for _ in 0..100 {
        let actions: Vec<u8> = (0..16).map(|i| (i % 4) as u8).collect();
        let out = env.step(&actions).unwrap();
        assert_eq!(out.rewards.len(), 16);
        assert_eq!(out.responses.len(), 16);
        assert!(out.rewards.iter().all(|r| r.is_finite()));
    }
    for (i, spec) in env.signals().iter().enumerate() {
        assert_eq!(spec.layout.n_lanes, 12);
        assert_eq!(spec.layout.n_phases, 4);
        let mut obs = vec![f32::NAN; spec.layout.dim()];
        env.observe(i, &mut obs).unwrap();
        assert!(obs.iter().all(|x| (0.0..=1.5).contains(x)), "{obs:?}");
        let one_hot = &obs[24..28];
        assert_eq!(one_hot.iter().sum::<f32>(), 1.0);
        assert_eq!(
            spec.layout.mask_from_obs(&obs),
            Some(env.action_mask(i)),
            "signal {i}"
        );
    }
    assert!(env.vehicle_counts().inside > 100);
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let s = load("single-4way").unwrap();
    let mut env = EmbeddedEnv::from_scenario(&s, 0);
    assert!(matches!(
        env.step(&[0, 1]),
        Err(EnvError::ActionCount {
            expected: 1,
            got: 2
        })
    ));
    let mut obs = vec![0.0; 31];
    assert!(matches!(
        env.observe(3, &mut obs),
        Err(EnvError::UnknownSignal { signal: 3, .. })
    ));
    let mut short = vec![0.0; 3];
    assert!(matches!(
        env.observe(0, &mut short),
        Err(EnvError::Observation { signal: 0, .. })
    ));
    assert!(env.detectors(7).is_empty());
    // An out-of-range phase is the sequencer's business: overridden, not an error.
    let out = env.step(&[42]).unwrap();
    assert!(out.responses[0].overridden.is_some());
}

#[test]
fn detectors_report_queues_calls_and_gaps() {
    let s = approach(0.0, 500.0, 1, 60.0);
    let mut env = EmbeddedEnv::from_scenario(&s, 1);
    env.step(&[1]).unwrap();
    let d = env.detectors(0);
    // Movements: NT (0), ET (1); nothing anywhere yet.
    assert_eq!(d.len(), 2);
    assert!(!d[0].call && d[0].gap_s == GAP_NONE_S);
    queue_up(&mut env, 0, 3);
    let d = env.detectors(0);
    assert_eq!(d[0].queue_veh, 3.0);
    assert_eq!(d[0].upstream_veh, 3.0);
    assert!(d[0].call);
    assert_eq!(d[0].gap_s, 0.0);
    // Serve them: green at 10 s, crossings at 13, 15, 17.
    crossings(&mut env, 0, 0, 19);
    let d = env.detectors(0);
    assert_eq!(d[0].queue_veh, 0.0);
    assert!(!d[0].call);
    assert!((d[0].gap_s - 3.0).abs() < 1e-6, "{d:?}");
    assert_eq!(d[0].downstream_veh, 3.0);
}

#[test]
fn the_environment_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<EmbeddedEnv>();
}

#[test]
fn lane_phase_incidence_follows_the_lane_turns() {
    let env = EmbeddedEnv::from_scenario(&load("single-4way").unwrap(), 1);
    let spec = &env.signals()[0];
    let (p, l) = (spec.layout.n_phases as usize, spec.layout.n_lanes as usize);
    assert_eq!(spec.incidence.len(), p);
    assert!(spec.incidence.iter().all(|row| row.len() == l));
    for (ph, row) in spec.incidence.iter().enumerate() {
        assert!(row.iter().any(|&g| g), "phase {ph} serves some lane");
    }
    for lane in 0..l {
        assert!(
            spec.incidence.iter().any(|row| row[lane]),
            "lane {lane} is served by some phase"
        );
    }
    // Protected lefts: the left-turn phases serve fewer lanes than the through phases.
    let served: Vec<usize> = spec
        .incidence
        .iter()
        .map(|r| r.iter().filter(|&&g| g).count())
        .collect();
    assert!(served[1] < served[0] && served[3] < served[2], "{served:?}");
}

/// The delay-accrued reward charges every second a vehicle stands at a stop line once,
/// in the interval it is lost, and credits nothing back: summed over an episode (and
/// over both signals of the corridor), it is the stop-line wait of every vehicle so far,
/// whatever the decision interval, including the vehicles that crossed mid-interval.
#[test]
fn the_accrued_delay_reward_charges_every_second_of_wait_once() {
    for interval_s in [1u32, 5] {
        let s = corridor(60.0, 1400.0)
            .with_reward(RewardKind::DelayAccrued)
            .with_decision_interval(Millis::from_secs(interval_s))
            .unwrap();
        let mut env = EmbeddedEnv::from_scenario(&s, 3);
        let mut charged_s = 0.0f64;
        for k in 0..600u32 / interval_s {
            let t = k * interval_s;
            let out = env.step(&[(t / 40 % 2) as u8, (t / 25 % 2) as u8]).unwrap();
            assert!(out.rewards.iter().all(|r| *r <= 0.0), "{:?}", out.rewards);
            charged_s -= out
                .rewards
                .iter()
                .map(|r| f64::from(*r) * 100.0)
                .sum::<f64>();
        }
        let now = env.state.tick as f64;
        let inside: f64 = env
            .state
            .lanes
            .iter()
            .flat_map(|l| &l.vehicles)
            .map(|v| v.wait_s + (now - v.stop_line_s).max(0.0))
            .sum();
        let waited_s = env.state.stats.completed_wait_s + inside;
        assert!(
            waited_s > 1000.0,
            "too little waiting to test: {waited_s:.0} s"
        );
        assert!(
            (charged_s - waited_s).abs() < 1e-4 * waited_s,
            "every {interval_s} s: charged {charged_s:.2} s, waited {waited_s:.2} s"
        );
    }
}
