//! The SUMO backend against real SUMO (feature `sumo`; needs `sumo` via SUMO_HOME or PATH:
//! `pip install eclipse-sumo==1.28.0`, SUMO_HOME=<venv>/lib/python3.11/site-packages/sumo).
//! Plan-building tests read the fixtures only and need no SUMO.
#![cfg(feature = "sumo")]

use std::path::PathBuf;

use greenwave_core::{MovementId, Turn};
use greenwave_sim::sumo::model::{build_models, ModelOptions};
use greenwave_sim::sumo::TimingSpec;

/// Every light's model under the net's own timing.
fn net_models(net: &NetFile) -> Vec<greenwave_sim::sumo::TlsModel> {
    let opts = ModelOptions {
        program: None,
        timing: &TimingSpec::default(),
        step_ms: 1000,
    };
    build_models(net, opts).unwrap().models
}
use greenwave_sim::sumo::{
    run_static_program, NetFile, ReadMode, SumoConfig, SumoEnv, SumoError, PEDESTRIANS_PER_ZONE,
};
use greenwave_sim::Env;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sumo")
        .join(name)
}

fn config(net: &str, seconds: f64) -> SumoConfig {
    let mut cfg = SumoConfig::new(
        fixture(&format!("{net}.net.xml")),
        fixture(&format!("{net}.rou.xml")),
    );
    cfg.seconds = seconds;
    cfg.seed = 7;
    cfg.reply_timeout_s = 30.0;
    cfg
}

/// Longest queue first, once min green allows: enough to exercise every path.
fn greedy(env: &SumoEnv, signal: usize) -> u8 {
    let det = env.detectors(signal);
    let plan = &env.signals()[signal].plan;
    let mask = env.action_mask(signal);
    (0..plan.n_phases() as u8)
        .filter(|&p| mask.allows(greenwave_core::PhaseId(p)))
        .max_by(|&a, &b| {
            let q = |p: u8| -> f32 {
                plan.phases()[p as usize]
                    .movements
                    .iter()
                    .map(|m| det[m.0 as usize].queue_veh)
                    .sum()
            };
            q(a).total_cmp(&q(b))
        })
        .unwrap_or(0)
}

/// A program that gives crossing links priority (`G`) together is named in the light's
/// notes; the fixture's own program (its left turns yield, `g`) gets no such note.
#[test]
fn a_program_that_greens_crossing_links_with_priority_is_noted() {
    let text = std::fs::read_to_string(fixture("single.net.xml")).unwrap();
    let notes = |text: &str| {
        let net = NetFile::parse(std::io::Cursor::new(text)).unwrap();
        net_models(&net).remove(0).timing_notes
    };
    let said = |n: &[String]| n.iter().any(|n| n.contains("both with priority (G)"));
    assert!(!said(&notes(&text)), "{:?}", notes(&text));
    let unyielding = text
        .replace("GGGgrrrrGGGgrrrr", "GGGGrrrrGGGGrrrr")
        .replace("rrrrGGGgrrrrGGGg", "rrrrGGGGrrrrGGGG");
    assert!(said(&notes(&unyielding)), "{:?}", notes(&unyielding));
}

#[test]
fn single_intersection_plan_from_the_net() {
    let net = NetFile::read(&fixture("single.net.xml")).unwrap();
    let models = net_models(&net);
    assert_eq!(models.len(), 1);
    let m = &models[0];
    assert_eq!(m.id, "A0");
    assert_eq!(m.n_links(), 16);
    assert!(m.conflicts_from_junction);
    // Approaches clockwise from north.
    assert_eq!(m.approaches, ["top0A0", "right0A0", "bottom0A0", "left0A0"]);
    // Left, through (both lanes), right from each of the four arms.
    let plan = &m.plan;
    assert_eq!(plan.movements().len(), 12);
    assert_eq!(plan.n_phases(), 2);
    assert_eq!(m.static_phases, [0, 2]);
    let id = |arm: u8, turn: Turn| {
        MovementId(
            plan.movements()
                .iter()
                .position(|mv| mv.approach == arm && mv.turn == turn)
                .unwrap() as u8,
        )
    };
    let c = plan.conflicts();
    // Perpendicular throughs conflict; the static program's permissive left does not.
    assert!(c.conflicts(id(0, Turn::Through), id(1, Turn::Through)));
    assert!(c.conflicts(id(0, Turn::Left), id(3, Turn::Through)));
    assert!(!c.conflicts(id(0, Turn::Left), id(2, Turn::Through)));
    assert!(!c.conflicts(id(0, Turn::Through), id(2, Turn::Through)));
    // Phase 0 serves north-south, phase 1 east-west.
    let p0 = plan.phases()[0].movements;
    assert!(p0.contains(id(0, Turn::Through)) && p0.contains(id(2, Turn::Left)));
    assert!(!p0.contains(id(1, Turn::Through)));
    assert_eq!(m.in_lanes.len(), 8);
    assert_eq!(m.in_lanes[0], "top0A0_0");
    assert_eq!(
        m.movement_in_lanes[id(0, Turn::Through).0 as usize].len(),
        2
    );
    // Display: phase 0 green shows the program's own G/g.
    let seq = greenwave_core::Sequencer::new(plan.clone(), greenwave_core::PhaseId(0)).unwrap();
    assert_eq!(seq_state(m, &seq), "GGGgrrrrGGGgrrrr");
}

/// The pedestrian fixture's program runs, per axis, a walk stage (vehicles and crossings
/// green, 37 s) then the vehicles alone (5 s, the crossings' clearance). The walk stage
/// answers to its crossings' pedestrians only and the vehicles to their own stage, whose
/// actuated max green scales both stages' program time.
#[test]
fn walk_stages_answer_to_their_pedestrians_only() {
    let net = NetFile::read(&fixture("peds.net.xml")).unwrap();
    let m = &net_models(&net)[0];
    let plan = &m.plan;
    assert_eq!(m.static_phases, [0, 1, 3, 4]);
    let walking = |set: greenwave_core::MovementSet| {
        set.iter()
            .all(|mv| plan.movements()[mv.0 as usize].turn == Turn::Pedestrian)
    };
    for (walk, vehicles) in [(0, 1), (2, 3)] {
        let (w, v) = (
            plan.phases()[walk].movements,
            plan.phases()[vehicles].movements,
        );
        assert!(v.minus(w).is_empty() && walking(w.minus(v)) && !w.minus(v).is_empty());
        assert_eq!(m.walk_stages[walk], Some(vehicles));
        let (assigned, greens) = (m.actuated_assignment(), m.actuated_greens());
        assert_eq!(assigned[walk], w.minus(v), "phase {walk}");
        assert_eq!(assigned[vehicles], v, "phase {vehicles}");
        assert_eq!(
            m.program_greens[vehicles],
            greenwave_core::Millis::from_secs(5)
        );
        assert_eq!(greens[vehicles], greenwave_core::Millis::from_secs(42));
        assert_eq!(greens[walk], m.program_greens[walk]);
    }
    // A net without crossings keeps its assignment and greens.
    let net = NetFile::read(&fixture("single.net.xml")).unwrap();
    let m = &net_models(&net)[0];
    assert_eq!(m.actuated_greens(), m.program_greens);
    for (p, phase) in m.plan.phases().iter().enumerate() {
        assert_eq!(m.actuated_assignment()[p], phase.movements);
    }
}

/// With `--pedestrian-zones off` nothing counts pedestrians, so none calls: a walk stage
/// then answers to its vehicles as before walk stages were told apart, and actuated
/// control's greens are the program's (otherwise the walk stage would never be called).
#[test]
fn without_pedestrian_zones_walk_stages_answer_to_their_vehicles() {
    let mut cfg = config("peds", 60.0);
    cfg.routes.push(fixture("peds.walks.xml"));
    cfg.pedestrian_zones = false;
    let env = SumoEnv::new(cfg).unwrap();
    assert!(env.models()[0].walk_stages.iter().all(Option::is_none));
    let plan = &env.signals()[0].plan;
    let assigned = env.detector_assignment(0).unwrap();
    for (p, phase) in plan.phases().iter().enumerate() {
        assert_eq!(assigned[p], phase.movements, "phase {p}");
    }
    assert_eq!(env.actuated_greens(0), env.program_greens(0));
}

fn seq_state(m: &greenwave_sim::sumo::TlsModel, seq: &greenwave_core::Sequencer) -> String {
    m.state(seq.interval(), seq.frame())
}

#[test]
fn grid_plans_and_change_display() {
    let net = NetFile::read(&fixture("grid2x2.net.xml")).unwrap();
    let models = net_models(&net);
    let ids: Vec<_> = models.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["A0", "A1", "B0", "B1"]);
    for m in &models {
        assert_eq!(m.plan.n_phases(), 2, "{}", m.id);
        assert_eq!(m.in_lanes.len(), 8, "{}", m.id);
        // Yellow then all-red on a change, every link accounted for.
        let mut seq =
            greenwave_core::Sequencer::new(m.plan.clone(), greenwave_core::PhaseId(0)).unwrap();
        seq.tick(greenwave_core::Millis::from_secs(6));
        seq.request(1);
        let yellow = seq_state(m, &seq);
        assert_eq!(yellow, "yyyyrrrryyyyrrrr", "{}", m.id);
        // The net's program has a 3 s yellow and no all-red: green follows at once.
        assert_eq!(
            m.plan.phases()[0].timing.yellow,
            greenwave_core::Millis(3000)
        );
        assert_eq!(
            m.plan.phases()[0].timing.all_red,
            greenwave_core::Millis::ZERO
        );
        seq.tick(greenwave_core::Millis::from_secs(3));
        assert_eq!(seq_state(m, &seq), "rrrrGGGgrrrrGGGg");
    }
}

#[test]
fn net_without_traffic_lights_is_refused() {
    let mut cfg = config("single", 60.0);
    cfg.net = fixture("notls.net.xml");
    let err = SumoEnv::new(cfg).err().expect("no traffic lights");
    assert!(matches!(err, SumoError::NoTrafficLights { .. }), "{err}");
    assert!(err.to_string().contains("notls.net.xml"), "{err}");
}

#[test]
fn a_program_no_light_has_is_refused() {
    let mut cfg = config("single", 60.0);
    cfg.program = Some("nosuch".into());
    let Err(err) = cfg.models() else {
        panic!("a program no light has was accepted");
    };
    assert!(err.to_string().contains("--program nosuch"), "{err}");
}

#[test]
fn missing_binary_says_how_to_install() {
    let mut cfg = config("single", 60.0);
    cfg.sumo_binary = Some("/nonexistent/sumo-home/bin/sumo".into());
    let err = SumoEnv::new(cfg).err().expect("no binary");
    let msg = err.to_string();
    assert!(matches!(err, SumoError::NotFound { .. }), "{msg}");
    assert!(msg.contains("pip install eclipse-sumo==1.28.0"), "{msg}");
    assert!(msg.contains("SUMO_HOME"), "{msg}");
}

#[test]
fn short_episode_on_the_single_intersection() {
    let mut env = SumoEnv::new(config("single", 120.0)).unwrap();
    assert!(env.sumo_version().unwrap().contains("SUMO"));
    assert_eq!(env.signals().len(), 1);
    let dim = env.signals()[0].layout.dim();
    // 8 incoming lanes, each a stop-bar and an advance zone, then the program clock's
    // lane for each of the 2 phases.
    assert_eq!(dim, 2 * (16 + 2) + 2 + 3);
    let mut obs = vec![0.0; dim];
    let mut steps = 0;
    loop {
        env.observe(0, &mut obs).unwrap();
        assert!(obs.iter().all(|x| x.is_finite()));
        let a = greedy(&env, 0);
        let out = env.step(&[a]).unwrap();
        assert_eq!(out.rewards.len(), 1);
        steps += 1;
        if out.done {
            break;
        }
        assert!(steps < 100, "episode never ended");
    }
    assert_eq!(steps, 24);
    assert!(env.finished());
    let m = env.metrics();
    assert_eq!(m.sim_seconds, 120.0);
    assert!(m.throughput_veh > 10, "{m:?}");
    assert!(m.mean_delay_s > 0.0 && m.mean_travel_time_s > 0.0, "{m:?}");
    assert!(m.wall_seconds > 0.0);
    // The episode is over: stepping again is an error, not a hang; reset starts anew.
    assert!(env.step(&[0]).is_err());
    env.reset(8).unwrap();
    assert_eq!(env.now(), greenwave_core::Millis::ZERO);
    env.step(&[0]).unwrap();
}

/// Each incoming lane is observed as its stop-bar zone then its advance zone, vehicles
/// placed by position: a queue held at red fills the stop-bar zone first, and no zone
/// holds more halted vehicles than vehicles.
#[test]
fn queues_fill_the_stop_bar_zone_first() {
    let mut cfg = config("single", 300.0);
    cfg.program_clock = false; // the zones alone
    let mut env = SumoEnv::new(cfg).unwrap();
    let layout = env.signals()[0].layout;
    let zones = layout.n_lanes as usize;
    assert_eq!(zones, 2 * 8);
    let mut obs = vec![0.0; layout.dim()];
    let (mut stop_bar_queue, mut advance_queue) = (0.0f32, 0.0f32);
    loop {
        env.observe(0, &mut obs).unwrap();
        let (density, queue) = (&obs[..zones], &obs[zones..2 * zones]);
        for z in 0..zones {
            assert!(queue[z] <= density[z] + 0.15, "zone {z}: {obs:?}");
        }
        for lane in 0..zones / 2 {
            stop_bar_queue += queue[2 * lane];
            advance_queue += queue[2 * lane + 1];
        }
        // Hold phase 0: the other approaches queue at red.
        if env.step(&[0]).unwrap().done {
            break;
        }
    }
    assert!(stop_bar_queue > 1.0, "no queue seen at the stop bars");
    assert!(
        stop_bar_queue > advance_queue,
        "stop bar {stop_bar_queue}, advance {advance_queue}"
    );
}

#[test]
fn sumo_shows_the_sequencer_yellow_and_all_red() {
    let mut cfg = config("single", 60.0);
    // The net's program has no all-red; ask for 2 s so SUMO must show one.
    let flags = greenwave_sim::sumo::TimingOverrides {
        all_red_s: Some(2.0),
        ..Default::default()
    };
    cfg.set_timing(None, flags, Some(1.0), None).unwrap();
    let mut env = SumoEnv::new(cfg).unwrap();
    // Before any step SUMO still runs its own program.
    for _ in 0..5 {
        env.step(&[0]).unwrap();
    }
    assert_eq!(env.sumo_state(0).unwrap(), "GGGgrrrrGGGgrrrr");
    env.step(&[1]).unwrap(); // min green (5 s) served: the change starts now
    assert_eq!(env.sumo_state(0).unwrap(), "yyyyrrrryyyyrrrr");
    env.step(&[1]).unwrap();
    env.step(&[1]).unwrap();
    env.step(&[1]).unwrap(); // 3 s yellow done
    assert_eq!(env.sumo_state(0).unwrap(), "rrrrrrrrrrrrrrrr");
    env.step(&[1]).unwrap();
    env.step(&[1]).unwrap(); // 2 s all-red done
    assert_eq!(env.sumo_state(0).unwrap(), "rrrrGGGgrrrrGGGg");
}

#[test]
fn getters_and_subscriptions_read_the_same() {
    let cfg = config("single", 60.0);
    let mut subscribed = cfg.clone();
    subscribed.read_mode = ReadMode::Subscriptions;
    let mut a = SumoEnv::new(cfg).unwrap();
    let mut b = SumoEnv::new(subscribed).unwrap();
    let dim = a.signals()[0].layout.dim();
    let (mut oa, mut ob) = (vec![0.0; dim], vec![0.0; dim]);
    for k in 0..12u8 {
        let action = [(k / 4) % 2];
        let (ra, rb) = (a.step(&action).unwrap(), b.step(&action).unwrap());
        assert_eq!(ra, rb);
        assert_eq!(a.detectors(0), b.detectors(0));
        a.observe(0, &mut oa).unwrap();
        b.observe(0, &mut ob).unwrap();
        assert_eq!(oa, ob);
    }
    assert!(a.detectors(0).iter().any(|d| d.upstream_veh > 0.0));
    let no_wall = |env: &SumoEnv| greenwave_sim::EpisodeMetrics {
        wall_seconds: 0.0,
        ..env.metrics()
    };
    assert!(a.finished());
    assert_eq!(no_wall(&a), no_wall(&b));
}

/// One episode on the pedestrians' junction (`peds`: vehicles and walkers), the light
/// driven by [`greedy`]: each interval's reward, and the metrics.
fn pedestrian_episode(
    reward: greenwave_core::RewardKind,
    weight: f32,
) -> (Vec<f32>, greenwave_sim::EpisodeMetrics) {
    let mut cfg = config("peds", 300.0);
    cfg.routes.push(fixture("peds.walks.xml"));
    cfg.reward = reward;
    cfg.pedestrian_weight = weight;
    let mut env = SumoEnv::new(cfg).unwrap();
    let mut rewards = Vec::new();
    loop {
        let out = env.step(&[greedy(&env, 0)]).unwrap();
        rewards.push(out.rewards[0]);
        if out.done {
            return (rewards, env.metrics());
        }
    }
}

/// The delay-accrued rewards charge each second a pedestrian stands on the light's walking
/// areas and crossings, times the weight: nothing at weight 0, twice as much at 2 as at 1,
/// never a credit; the other rewards do not count pedestrians; the traffic is the same.
#[test]
fn pedestrians_waiting_to_cross_cost_the_reward_by_their_weight() {
    use greenwave_core::RewardKind;
    let (r0, m0) = pedestrian_episode(RewardKind::DelayAccruedDelta, 0.0);
    let (r1, m1) = pedestrian_episode(RewardKind::DelayAccruedDelta, 1.0);
    let (r2, _) = pedestrian_episode(RewardKind::DelayAccruedDelta, 2.0);
    assert_eq!(
        (m0.mean_delay_s, m0.throughput_veh),
        (m1.mean_delay_s, m1.throughput_veh)
    );
    assert!(m1.pedestrians > 50, "{m1:?}");
    assert_eq!((r0.len(), r1.len(), r2.len()), (60, 60, 60));
    // Rewards are per 100 s: the pedestrians' seconds in each interval, weight 1.
    let standing_s: Vec<f32> = r0.iter().zip(&r1).map(|(a, b)| 100.0 * (a - b)).collect();
    for (i, (s1, (a, c))) in standing_s.iter().zip(r0.iter().zip(&r2)).enumerate() {
        assert!(*s1 >= -1e-3, "interval {i}: pedestrians credited {s1} s");
        let s2 = 100.0 * (a - c);
        assert!(
            (s2 - 2.0 * s1).abs() <= 1e-3 * (1.0 + s1),
            "interval {i}: {s2} vs 2 x {s1}"
        );
    }
    // What the reward charged is what the pedestrians' trips report as waiting (SUMO's
    // tripinfo: 150 walks, 84 s each, with this greedy light), within what those
    // still walking at the end and any standing off the junction's walkways make.
    let total = f64::from(standing_s.iter().sum::<f32>());
    let reported = m1.mean_pedestrian_wait_s * m1.pedestrians as f64;
    assert!(
        reported > 1000.0 && (total - reported).abs() < 0.25 * reported,
        "the reward counted {total} s of standing, the trips report {reported} s"
    );
    // A reward that does not accrue delay takes no weight.
    let (d0, _) = pedestrian_episode(RewardKind::DelayDelta, 0.0);
    let (d1, _) = pedestrian_episode(RewardKind::DelayDelta, 1.0);
    assert_eq!(d0, d1);
}

/// What [`pedestrian_zone_episode`] saw of the crossings' zones.
#[derive(Debug, Default)]
struct CrossingZones {
    /// Standing at a kerb, summed over decision points, while its crossing was red.
    kerb_standing_red: f32,
    /// On a crossing, summed over decision points.
    on: f32,
    /// On a crossing 20 s or more into another phase's green (none may be).
    on_long_red: f32,
    /// Pedestrian-seconds standing at the kerbs and on the crossings: each decision point's
    /// count held over the interval.
    standing_s: f64,
}

/// One 300 s episode on the pedestrian fixture, longest observed queue first (the program
/// has a phase with the crossings and one without for each axis: only the pedestrians'
/// zones tell them apart); the rewards and what the crossings' zones showed.
fn pedestrian_zone_episode(weight: f32) -> (Vec<f32>, CrossingZones) {
    let mut cfg = config("peds", 300.0);
    cfg.routes.push(fixture("peds.walks.xml"));
    cfg.program_clock = false;
    cfg.pedestrian_weight = weight;
    let interval_s = cfg.decision_interval_s;
    let mut env = SumoEnv::new(cfg).unwrap();
    let spec = env.signals()[0].clone();
    // Four one-lane arms and four crossings, two zones each.
    let n = spec.layout.n_lanes as usize;
    assert_eq!(n, 2 * (4 + 4));
    for k in 8..16 {
        let phases = (0..spec.plan.n_phases()).filter(|&p| spec.incidence[p][k]);
        assert_eq!(phases.count(), 1, "zone {k} serves one of the two phases");
    }
    let mut obs = vec![0.0; spec.layout.dim()];
    let (mut seen, mut rewards) = (CrossingZones::default(), Vec::new());
    loop {
        env.observe(0, &mut obs).unwrap();
        let green = env.sequencer(0).green_phase();
        let long = env.sequencer(0).in_interval().0 >= 20_000;
        for k in (8..16).step_by(2) {
            let served = green.is_some_and(|p| spec.incidence[p.0 as usize][k]);
            let (kerb_standing, on, on_standing) = (obs[n + k], obs[k + 1], obs[n + k + 1]);
            if !served {
                seen.kerb_standing_red += kerb_standing;
            }
            seen.on += on;
            if !served && green.is_some() && long {
                seen.on_long_red += on;
            }
            let standing = f64::from(kerb_standing + on_standing) * PEDESTRIANS_PER_ZONE;
            seen.standing_s += standing * interval_s;
        }
        let mask = env.action_mask(0);
        let queue = |p: usize| -> f32 {
            (0..n)
                .filter(|&l| spec.incidence[p][l])
                .map(|l| obs[n + l])
                .sum()
        };
        let action = (0..spec.plan.n_phases())
            .filter(|&p| mask.allows(greenwave_core::PhaseId(p as u8)))
            .max_by(|&a, &b| queue(a).total_cmp(&queue(b)))
            .unwrap();
        let out = env.step(&[action as u8]).unwrap();
        rewards.push(out.rewards[0]);
        if out.done {
            return (rewards, seen);
        }
    }
}

/// Pedestrians alone at the pedestrian fixture (no vehicles), 300 s under actuated
/// control: per decision, whether a crossing's kerb zone held anyone, whether a
/// pedestrian movement's detector called, and whether the max-red rule saw a phase with a
/// call; the episode's mean pedestrian wait.
fn pedestrians_only_actuated() -> (Vec<[bool; 3]>, f64) {
    use greenwave_core::control::phases_with_calls;
    let mut env = SumoEnv::new(pedestrians_only()).unwrap();
    let spec = env.signals()[0].clone();
    let walking: Vec<usize> = (0..spec.plan.movements().len())
        .filter(|&m| spec.plan.movements()[m].turn == Turn::Pedestrian)
        .collect();
    assert_eq!(walking.len(), 4, "four crossings");
    // Per observed crossing (its zones are lanes 8 + 2k and 9 + 2k), the movements it serves.
    let model = &env.models()[0];
    let serving: Vec<Vec<usize>> = model
        .crossings
        .iter()
        .map(|c| {
            (0..model.movement_crossings.len())
                .filter(|&m| model.movement_crossings[m].contains(c))
                .collect()
        })
        .collect();
    assert_eq!(serving.len(), 4);
    assert!(serving.iter().all(|s| !s.is_empty()));
    let mut obs = vec![0.0; spec.layout.dim()];
    let mut controller = greenwave_sim::controllers::Actuated::default();
    greenwave_sim::Controller::reset(&mut controller, &env);
    let mut seen = Vec::new();
    loop {
        env.observe(0, &mut obs).unwrap();
        let det = env.detectors(0);
        // Crossing by crossing: anyone in its kerb zone (density) if and only if the
        // movements it serves call.
        for (k, movements) in serving.iter().enumerate() {
            let at_kerb = obs[8 + 2 * k] > 0.0;
            assert!(
                movements.iter().all(|&m| det[m].call == at_kerb),
                "crossing {k}"
            );
        }
        let at_kerb = (8..16).step_by(2).any(|k| obs[k] > 0.0);
        let called = walking.iter().any(|&m| det[m].call);
        let max_red_sees = phases_with_calls(&spec.plan, &det).count() > 0;
        seen.push([at_kerb, called, max_red_sees]);
        let actions = greenwave_sim::Controller::decide(&mut controller, &env);
        if env.step(&actions).unwrap().done {
            return (seen, env.metrics().mean_pedestrian_wait_s);
        }
    }
}

/// The pedestrian fixture's walks alone, 300 s.
fn pedestrians_only() -> SumoConfig {
    let mut cfg = SumoConfig::new(fixture("peds.net.xml"), fixture("peds.walks.xml"));
    cfg.seconds = 300.0;
    cfg.seed = 7;
    cfg.reply_timeout_s = 30.0;
    cfg.program_clock = false;
    cfg
}

/// A pedestrian at a crossing's kerb calls the crossing's phase, as a push button does,
/// for actuated control and for the max-red rule (max-pressure's and every policy's).
/// With only pedestrians about, actuated control then leaves them a shorter wait than the
/// static program (1.9 s against 9.7 s); without the call nothing called, each green ran
/// to max green, and they waited 44.6 s.
#[test]
fn pedestrians_at_a_kerb_call_their_crossings_phase() {
    let (seen, actuated_wait_s) = pedestrians_only_actuated();
    assert!(
        seen.iter()
            .all(|&[kerb, called, max_red]| kerb == called && kerb == max_red),
        "{seen:?}"
    );
    assert!(seen.iter().filter(|s| s[0]).count() > 10, "{seen:?}");
    let static_wait_s = run_static_program(pedestrians_only())
        .unwrap()
        .mean_pedestrian_wait_s;
    assert!(
        actuated_wait_s < static_wait_s,
        "actuated {actuated_wait_s} s, static program {static_wait_s} s"
    );
}

/// Vehicles and pedestrians at the pedestrian fixture, 600 s: actuated control runs each
/// walk stage for its pedestrians and then the vehicles in their own stage (green at more
/// than 20 decisions), and beats max-pressure on vehicle delay (45.0 s against 108.8 s,
/// the static program 133.4 s). Before walk stages were told apart, the vehicles held the
/// walk stage to max green, their own stage was never green, and actuated gave 115.9 s.
#[test]
fn actuated_control_runs_a_walk_stage_then_the_vehicles_own() {
    use greenwave_sim::controllers::{Actuated, MaxPressure};
    use greenwave_sim::Controller;
    let cfg = || {
        let mut cfg = config("peds", 600.0);
        cfg.routes.push(fixture("peds.walks.xml"));
        cfg
    };
    let mut env = SumoEnv::new(cfg()).unwrap();
    let spec = env.signals()[0].clone();
    let vehicles_only = |p: usize| {
        spec.plan.phases()[p]
            .movements
            .iter()
            .all(|mv| spec.plan.movements()[mv.0 as usize].turn != Turn::Pedestrian)
    };
    let mut actuated = Actuated::default();
    actuated.reset(&env);
    let (mut vehicle_stage, mut walk_stage) = (0, 0);
    loop {
        if let Some(p) = env.sequencer(0).green_phase() {
            match vehicles_only(p.0 as usize) {
                true => vehicle_stage += 1,
                false => walk_stage += 1,
            }
        }
        let actions = actuated.decide(&env);
        if env.step(&actions).unwrap().done {
            break;
        }
    }
    let actuated_s = env.metrics().mean_delay_s;
    assert!(
        vehicle_stage > 20 && walk_stage > 20,
        "{vehicle_stage}, {walk_stage} decisions"
    );
    // Max-pressure on the same seed (the configuration's).
    let mut env = SumoEnv::new(cfg()).unwrap();
    let episode = env.episode();
    let mp = greenwave_sim::run_episode(&mut env, &mut MaxPressure::default(), 7, episode).unwrap();
    assert!(
        actuated_s < mp.mean_delay_s,
        "actuated {actuated_s} s, max-pressure {} s",
        mp.mean_delay_s
    );
}

/// Without pedestrian zones a light observes what it did before them: its lanes' zones, and
/// no person is subscribed to unless the reward counts pedestrians.
#[test]
fn pedestrian_zones_off_observe_the_lanes_only() {
    let mut cfg = config("peds", 60.0);
    cfg.routes.push(fixture("peds.walks.xml"));
    cfg.program_clock = false;
    cfg.pedestrian_zones = false;
    let env = SumoEnv::new(cfg).unwrap();
    let spec = &env.signals()[0];
    assert_eq!(spec.layout.n_lanes, 2 * 4);
    assert!(spec.incidence.iter().all(|row| row.len() == 8));
}

/// Each pedestrian crossing adds two zones to its light's observation, after the incoming
/// lanes': the pedestrians at its kerb (on a walking area, the crossing next; the standing
/// ones as the queue) and those on it. People gather at red crossings, are on a crossing
/// only while it is green or clearing, and the standing ones the zones count are the ones
/// the delay-accrued reward charges for.
#[test]
fn pedestrians_at_a_crossing_show_in_its_zones() {
    let (with, seen) = pedestrian_zone_episode(1.0);
    let (without, again) = pedestrian_zone_episode(0.0);
    assert_eq!(seen.standing_s, again.standing_s, "the same episode");
    assert!(seen.kerb_standing_red > 3.0, "{seen:?}");
    assert!(seen.on > 1.0 && seen.on_long_red == 0.0, "{seen:?}");
    // The reward's charge (per 100 s) is the standing time on all the junction's walkways,
    // read every step; the zones' is sampled at decision points, at kerbs and on crossings.
    let charged_s: f64 = with
        .iter()
        .zip(&without)
        .map(|(a, b)| 100.0 * f64::from(b - a))
        .sum();
    assert!(
        charged_s > 1000.0 && (seen.standing_s - charged_s).abs() < 0.3 * charged_s,
        "the zones counted {} s of standing, the reward charged {charged_s} s",
        seen.standing_s
    );
}

#[test]
fn grid_episode_with_four_signals() {
    let mut env = SumoEnv::new(config("grid2x2", 60.0)).unwrap();
    assert_eq!(env.signals().len(), 4);
    loop {
        let actions: Vec<u8> = (0..4).map(|s| greedy(&env, s)).collect();
        for s in 0..4 {
            let mut obs = vec![0.0; env.signals()[s].layout.dim()];
            env.observe(s, &mut obs).unwrap();
            assert_eq!(
                env.detectors(s).len(),
                env.signals()[s].plan.movements().len()
            );
        }
        if env.step(&actions).unwrap().done {
            break;
        }
    }
    assert!(env.metrics().throughput_veh > 0);
}

#[test]
fn the_classic_controllers_drive_sumo() {
    use greenwave_sim::controllers::{Actuated, MaxPressure};
    let controllers: [Box<dyn greenwave_sim::Controller>; 2] = [
        Box::new(MaxPressure::default()),
        Box::new(Actuated::default()),
    ];
    for mut c in controllers {
        let mut env = SumoEnv::new(config("single", 180.0)).unwrap();
        let episode = env.episode();
        let m = greenwave_sim::run_episode(&mut env, c.as_mut(), 3, episode).unwrap();
        assert!(env.finished(), "{}", c.name());
        assert!(
            m.throughput_veh > 20 && m.mean_delay_s > 0.0,
            "{}: {m:?}",
            c.name()
        );
    }
}

#[test]
fn replayed_programs_reproduce_the_episode_in_sumo_alone() {
    let mut env = SumoEnv::new(config("single", 300.0)).unwrap();
    let ours = greenwave_sim::run_episode(
        &mut env,
        &mut greenwave_sim::controllers::MaxPressure::default(),
        7,
        greenwave_core::Millis::from_secs(300),
    )
    .unwrap();
    assert_eq!(ours.backlog_veh, 0, "pending vehicles are not in tripinfo");
    let dir = std::env::temp_dir().join(format!("greenwave-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (replay, trips) = (dir.join("replay.add.xml"), dir.join("tripinfo.xml"));
    env.write_replay_programs(&replay).unwrap();
    let sumo = greenwave_sim::sumo::find_sumo_binary(None).unwrap();
    let status = std::process::Command::new(sumo)
        .arg("-n")
        .arg(fixture("single.net.xml"))
        .arg("-r")
        .arg(fixture("single.rou.xml"))
        .arg("--additional-files")
        .arg(&replay)
        .args([
            "--begin",
            "0",
            "--end",
            "300",
            "--seed",
            "7",
            "--no-step-log",
        ])
        .arg("--tripinfo-output")
        .arg(&trips)
        .arg("--tripinfo-output.write-unfinished")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let alone = greenwave_sim::sumo::tripinfo::summarize(&trips, &[]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(alone.throughput_veh, ours.throughput_veh);
    assert_eq!(alone.mean_delay_s, ours.mean_delay_s);
    assert_eq!(alone.mean_travel_time_s, ours.mean_travel_time_s);
}

#[test]
fn static_program_is_deterministic_per_seed() {
    let a = run_static_program(config("single", 300.0)).unwrap();
    let b = run_static_program(config("single", 300.0)).unwrap();
    assert_eq!(a.mean_delay_s, b.mean_delay_s);
    assert_eq!(a.throughput_veh, b.throughput_veh);
    assert!(a.throughput_veh > 50, "{a:?}");
    assert!(a.mean_queue_veh > 0.0, "{a:?}");
    assert_eq!(a.sim_seconds, 300.0);
}

#[test]
fn killed_sumo_is_a_clear_error_not_a_hang() {
    let mut env = SumoEnv::new(config("single", 600.0)).unwrap();
    env.step(&[0]).unwrap();
    let pid = env.sumo_pid().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let err = env.step(&[0]).unwrap_err().to_string();
    assert!(err.contains("SUMO exited"), "{err}");
    assert!(err.contains("signal 9"), "{err}");
    // Later calls fail fast too, and reset recovers.
    assert!(env.step(&[0]).is_err());
    env.reset(1).unwrap();
    env.step(&[0]).unwrap();
}

#[test]
fn split_steps_equal_whole_steps_and_misuse_is_an_error() {
    use greenwave_sim::StepStarted;
    let (mut whole, mut split) = (
        SumoEnv::new(config("single", 300.0)).unwrap(),
        SumoEnv::new(config("single", 300.0)).unwrap(),
    );
    // Out of order: an end without a begin, a second begin before the end.
    assert!(split.step_end().is_err());
    for _ in 0..20 {
        let a = greedy(&whole, 0);
        let w = whole.step(&[a]).unwrap();
        assert_eq!(split.step_begin(&[a]).unwrap(), StepStarted::Pending);
        assert!(split.step_begin(&[a]).is_err(), "begin twice");
        assert!(split.step_ready(std::time::Duration::from_secs(30)));
        let s = split.step_end().unwrap();
        assert_eq!(w, s);
        assert_eq!(whole.detectors(0), split.detectors(0));
    }
    // SUMO killed while an interval is in flight: a clear error, and reset recovers.
    split.step_begin(&[0]).unwrap();
    let pid = split.sumo_pid().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // (It may have answered before it died; then the next interval finds it gone.)
    let r = split.step_end().and_then(|_| {
        split.step_begin(&[0])?;
        split.step_end()
    });
    let err = r.unwrap_err().to_string();
    assert!(err.contains("SUMO exited"), "{err}");
    assert!(split.step_begin(&[0]).is_err());
    split.reset(1).unwrap();
    split.step_begin(&[0]).unwrap();
    split.step_end().unwrap();
}

#[test]
fn sumo_refusing_to_start_shows_its_log() {
    let mut cfg = config("single", 60.0);
    cfg.extra_args = vec!["--no-such-option".into()];
    let err = SumoEnv::new(cfg).err().expect("SUMO refuses the option");
    let msg = err.to_string();
    assert!(matches!(err, SumoError::Died { .. }), "{msg}");
    assert!(msg.contains("no-such-option"), "{msg}");
}

/// The density of each of the observation's last `n_phases` lanes (the program clock's).
fn clock_lanes(env: &SumoEnv, signal: usize) -> Vec<f32> {
    let layout = env.signals()[signal].layout;
    let mut obs = vec![0.0; layout.dim()];
    env.observe(signal, &mut obs).unwrap();
    let (l, p) = (layout.n_lanes as usize, layout.n_phases as usize);
    obs[l - p..l].to_vec()
}

/// With the program clock the observation ends with one lane per plan phase, set for the
/// phase the net's own program serves at SUMO's time, counted from the program's offset
/// and the episode's begin, whatever greenwave shows; without it the layout is the zones
/// alone. single.net.xml's program: 42 s of phase 0, 3 s yellow, 42 s of phase 1, 3 s
/// yellow (a yellow counts for the green after it); here with `offset="17"`.
#[test]
fn the_program_clock_follows_the_nets_program_from_its_offset() {
    let dir = std::env::temp_dir().join(format!("greenwave-clock-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(fixture("single.net.xml")).unwrap();
    assert_eq!(text.matches("offset=\"0\"").count(), 1);
    let net = dir.join("single-offset.net.xml");
    std::fs::write(&net, text.replace("offset=\"0\"", "offset=\"17\"")).unwrap();
    // The phase the program serves at SUMO time t (s).
    let program = |t: f64| {
        let pos = (t - 17.0).rem_euclid(90.0);
        if (42.0..87.0).contains(&pos) {
            1
        } else {
            0
        }
    };
    for begin_s in [0.0, 30.0] {
        let mut cfg = config("single", 120.0);
        cfg.net = net.clone();
        cfg.begin_s = begin_s;
        let mut env = SumoEnv::new(cfg.clone()).unwrap();
        let zones = 2 * env.models()[0].in_lanes.len();
        assert_eq!(env.signals()[0].layout.n_lanes as usize, zones + 2);
        // A clock lane carries its phase's movements: green in its own phase.
        let inc = &env.signals()[0].incidence;
        assert!(inc[0][zones] && inc[1][zones + 1] && !inc[0][zones + 1]);
        for k in 0..20 {
            let t = begin_s + 5.0 * f64::from(k);
            let mut want = vec![0.0; 2];
            want[program(t)] = 1.0;
            assert_eq!(
                clock_lanes(&env, 0),
                want,
                "begin {begin_s} s, SUMO time {t} s"
            );
            // Holding phase 0 throughout does not move the program's clock.
            env.step(&[0]).unwrap();
        }
        cfg.program_clock = false;
        let env = SumoEnv::new(cfg).unwrap();
        assert_eq!(env.signals()[0].layout.n_lanes as usize, zones);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A light bound to a `<WAUT>` starts on the WAUT's program at begin, not on the program
/// loaded last (SUMO's rule, see `greenwave_sim::sumo::waut`): here an additional file
/// loads a copy of the net's program 45 s out of phase (`offset="62"` against the net's
/// 17), binds the light to a WAUT that starts it on the net's program and switches it to the
/// copy at 60 s. So the program clock follows the net's program on an episode that begins
/// at 0 s and the copy on one that begins at 60 s, and the model notes the switch.
#[test]
fn a_waut_decides_the_program_the_clock_follows() {
    let dir = std::env::temp_dir().join(format!("greenwave-waut-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(fixture("single.net.xml")).unwrap();
    let net = dir.join("single-offset.net.xml");
    std::fs::write(&net, text.replace("offset=\"0\"", "offset=\"17\"")).unwrap();
    let add = dir.join("waut.add.xml");
    std::fs::write(
        &add,
        r#"<additional>
    <tlLogic id="A0" type="static" programID="late" offset="62">
        <phase duration="42" state="GGGgrrrrGGGgrrrr"/>
        <phase duration="3"  state="yyyyrrrryyyyrrrr"/>
        <phase duration="42" state="rrrrGGGgrrrrGGGg"/>
        <phase duration="3"  state="rrrryyyyrrrryyyy"/>
    </tlLogic>
    <WAUT id="evening" refTime="0" startProg="0"><wautSwitch time="60" to="late"/></WAUT>
    <wautJunction wautID="evening" junctionID="A0"/>
</additional>"#,
    )
    .unwrap();
    let phase_at = |offset_s: f64, t: f64| {
        usize::from((42.0..87.0).contains(&(t - offset_s).rem_euclid(90.0)))
    };
    for (begin_s, offset_s, program) in [(0.0, 17.0, "0"), (60.0, 62.0, "late")] {
        let mut cfg = config("single", 60.0);
        cfg.net = net.clone();
        cfg.additional = vec![add.clone()];
        cfg.begin_s = begin_s;
        let mut env = SumoEnv::new(cfg).unwrap();
        assert_eq!(env.models()[0].program_id, program, "begin {begin_s} s");
        let notes = &env.models()[0].timing_notes;
        assert!(
            notes
                .iter()
                .any(|n| n.contains("WAUT evening") && n.contains("to late at 60 s")),
            "{notes:?}"
        );
        for k in 0..12 {
            let t = begin_s + 5.0 * f64::from(k);
            let mut want = vec![0.0; 2];
            want[phase_at(offset_s, t)] = 1.0;
            assert_eq!(
                clock_lanes(&env, 0),
                want,
                "begin {begin_s} s, SUMO time {t} s"
            );
            env.step(&[0]).unwrap();
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A program that times its links apart (here the east-west right turns start 4 s before
/// the throughs, which wait 7 s after the north-south greens end) gets a note: greenwave's
/// switch gives that pair only the 3 s yellow. The net's own program, whose stages hand
/// over straight after the yellow, gets none, and neither does the staggered one once
/// `--all-red 4` makes every switch as long as the program's intergreen.
#[test]
fn a_program_that_keeps_longer_intergreens_than_the_plan_is_noted() {
    let mut net = NetFile::read(&fixture("single.net.xml")).unwrap();
    let intergreen_notes = |net: &NetFile, all_red_s: Option<f64>| -> Vec<String> {
        let mut timing = TimingSpec::default();
        timing.command_line.all_red_s = all_red_s;
        let opts = ModelOptions {
            program: None,
            timing: &timing,
            step_ms: 1000,
        };
        let models = build_models(net, opts).unwrap().models;
        assert_eq!(
            models[0].plan.n_phases(),
            2,
            "the staggered start is no stage"
        );
        models[0]
            .timing_notes
            .iter()
            .filter(|n| n.contains("finding 28"))
            .cloned()
            .collect()
    };
    assert_eq!(intergreen_notes(&net, None), Vec::<String>::new());
    let mut staggered = net.tl_logics[0].clone();
    staggered.program_id = "staggered".into();
    for (phase, (duration_s, state)) in staggered.phases.iter_mut().zip([
        (42.0, "GGGgrrrrGGGgrrrr"),
        (3.0, "yyyyrrrryyyyrrrr"),
        (4.0, "rrrrGrrrrrrrGrrr"),
        (38.0, "rrrrGGGgrrrrGGGg"),
    ]) {
        phase.duration_s = duration_s;
        phase.state = state.into();
    }
    staggered.phases.push(greenwave_sim::sumo::net::TlPhase {
        duration_s: 3.0,
        state: "rrrryyyyrrrryyyy".into(),
        min_dur_s: None,
        max_dur_s: None,
        next: None,
    });
    net.tl_logics.push(staggered);
    let notes = intergreen_notes(&net, None);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("keeps 7.000 s between the end of link")
            && notes[0].contains("gives 3.000 s (yellow and all-red)"),
        "{notes:?}"
    );
    assert_eq!(intergreen_notes(&net, Some(4.0)), Vec::<String>::new());
    // Kept (`--program-intergreens on`): the plan holds the program's 7 s for the pairs it
    // staggers, switches take that long, and the note says so instead of warning.
    let mut timing = TimingSpec::default();
    timing.command_line.program_intergreens = Some(true);
    let opts = ModelOptions {
        program: None,
        timing: &timing,
        step_ms: 1000,
    };
    let model = build_models(&net, opts).unwrap().models.remove(0);
    let plan = &model.plan;
    assert!(!plan.intergreens().is_empty());
    assert!(
        plan.intergreens().iter().all(|e| e.time.0 == 7000),
        "{:?}",
        plan.intergreens()
    );
    let (a, b) = (greenwave_core::PhaseId(0), greenwave_core::PhaseId(1));
    assert_eq!(plan.switch_time(a, b).0, 7000);
    let kept: Vec<&String> = model
        .timing_notes
        .iter()
        .filter(|n| n.contains("keeps its intergreens"))
        .collect();
    assert_eq!(kept.len(), 1, "{:?}", model.timing_notes);
    assert!(!model.timing_notes.iter().any(|n| n.contains("finding 28")));
}
