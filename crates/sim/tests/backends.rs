//! The same controller code on both backends: one short episode of max-pressure and of
//! actuated control on the embedded simulator (`tests/data/sumo-single-twin.toml`, the
//! embedded counterpart of the SUMO fixture) and on SUMO (`fixtures/sumo/single.*`),
//! through the same `Env` trait object and the same `run_episode`, with every signal's
//! display checked at every decision, and on SUMO every state string greenwave sent
//! checked for conflicting greens and cut clearance intervals.
//!
//! Needs feature `sumo` and a `sumo` binary (SUMO_HOME or PATH); without SUMO the test
//! skips, saying why, except under CI (`CI` set), where a missing SUMO is a failure.
#![cfg(feature = "sumo")]

use std::path::{Path, PathBuf};

use greenwave_core::{Interval, Millis, MovementId, PhaseId};
use greenwave_sim::controllers::{Actuated, MaxPressure};
use greenwave_sim::sumo::{SumoConfig, SumoEnv, TlsModel};
use greenwave_sim::{run_episode, Controller, EmbeddedEnv, Env, EpisodeMetrics, Scenario};

const SECONDS: f64 = 300.0;
const SEED: u64 = 7;

fn sumo_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sumo")
        .join(name)
}

/// The controllers that need nothing but the `Env` (no scenario demand), fresh.
fn controllers() -> Vec<Box<dyn Controller>> {
    vec![
        Box::new(MaxPressure::default()),
        Box::new(Actuated::default()),
    ]
}

/// A controller wrapper that checks what every signal displays at each decision before
/// passing the decision on.
struct Watched {
    inner: Box<dyn Controller>,
    decisions: u64,
    /// Changes of a signal's target phase seen between decisions.
    phase_changes: u64,
    last_target: Vec<Option<PhaseId>>,
    violations: Vec<String>,
}

impl Watched {
    fn new(inner: Box<dyn Controller>) -> Self {
        Watched {
            inner,
            decisions: 0,
            phase_changes: 0,
            last_target: Vec::new(),
            violations: Vec::new(),
        }
    }

    fn check(&mut self, env: &dyn Env) {
        let t = env.now();
        for (s, spec) in env.signals().iter().enumerate() {
            let seq = env.sequencer(s);
            let frame = seq.frame();
            let conflicts = spec.plan.conflicts();
            let shown: Vec<MovementId> = frame.non_red().iter().collect();
            for (i, &a) in shown.iter().enumerate() {
                for &b in &shown[i + 1..] {
                    if conflicts.conflicts(a, b) {
                        self.violations.push(format!(
                            "t={t}: signal {s} shows conflicting movements {a:?} and {b:?}"
                        ));
                    }
                }
            }
            let phase_timing = |p: PhaseId| spec.plan.phase(p).map(|ph| ph.timing);
            match seq.interval() {
                Interval::Yellow { from, .. } => {
                    if phase_timing(from).is_none_or(|tm| seq.in_interval() >= tm.yellow) {
                        self.violations
                            .push(format!("t={t}: signal {s} yellow overran or unknown phase"));
                    }
                }
                Interval::AllRed { from, .. } => {
                    if phase_timing(from).is_none_or(|tm| seq.in_interval() >= tm.all_red) {
                        self.violations.push(format!(
                            "t={t}: signal {s} all-red overran or unknown phase"
                        ));
                    }
                }
                Interval::Green { phase } => {
                    if phase_timing(phase).is_none_or(|tm| seq.in_interval() > tm.max_green) {
                        self.violations
                            .push(format!("t={t}: signal {s} green past max green"));
                    }
                }
            }
            let target = Some(seq.interval().target());
            if self.last_target.len() <= s {
                self.last_target.resize(s + 1, None);
            }
            if self.last_target[s].is_some() && self.last_target[s] != target {
                self.phase_changes += 1;
            }
            self.last_target[s] = target;
        }
    }
}

impl Controller for Watched {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn reset(&mut self, env: &dyn Env) {
        self.last_target.clear();
        self.inner.reset(env);
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        self.decisions += 1;
        self.check(env);
        self.inner.decide(env)
    }
}

/// One episode of `controller` on `env`: the code path both backends share.
fn episode(env: &mut dyn Env, controller: Box<dyn Controller>) -> (EpisodeMetrics, Watched) {
    let mut watched = Watched::new(controller);
    let m = run_episode(env, &mut watched, SEED, Millis::from_secs(SECONDS as u32))
        .unwrap_or_else(|e| panic!("{}: {e}", watched.name()));
    (m, watched)
}

fn assert_sane(backend: &str, m: &EpisodeMetrics, w: &Watched) {
    let who = format!("{backend} / {}", w.name());
    assert!(w.violations.is_empty(), "{who}: {:#?}", w.violations);
    assert_eq!(w.decisions, (SECONDS / 5.0) as u64, "{who}");
    assert!(
        w.phase_changes > 0,
        "{who}: the controller never changed phase"
    );
    assert_eq!(m.sim_seconds, SECONDS, "{who}: {m:?}");
    assert!(m.throughput_veh > 20, "{who}: {m:?}");
    for (name, x) in [
        ("mean delay", m.mean_delay_s),
        ("mean wait", m.mean_wait_s),
        ("mean travel time", m.mean_travel_time_s),
        ("mean queue", m.mean_queue_veh),
    ] {
        assert!(x.is_finite() && x >= 0.0, "{who}: {name} {x}: {m:?}");
    }
    assert!(m.mean_travel_time_s > 0.0, "{who}: {m:?}");
    // 200 m approach + 200 m exit at 50 km/h: under 30 s free-flow; a sane controller at
    // this light demand keeps the delay well below a few minutes.
    assert!(m.mean_delay_s < 120.0, "{who}: {m:?}");
}

/// The `(duration ms, state)` phases of one `tlLogic` of a replay file.
fn replay_phases(xml: &str, tls: &str) -> Vec<(u64, String)> {
    let start = xml
        .find(&format!("<tlLogic id=\"{tls}\""))
        .unwrap_or_else(|| panic!("no program for {tls} in the replay"));
    let end = start + xml[start..].find("</tlLogic>").unwrap();
    let attr = |line: &str, name: &str| -> String {
        let k = line.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        line[k..k + line[k..].find('"').unwrap()].to_string()
    };
    xml[start..end]
        .lines()
        .filter(|l| l.trim_start().starts_with("<phase "))
        .map(|l| {
            let secs: f64 = attr(l, "duration").parse().unwrap();
            ((secs * 1000.0).round() as u64, attr(l, "state"))
        })
        .collect()
}

/// Checks every state greenwave sent to SUMO for `model` (as `(duration, state)` pairs)
/// with the backend's own display audit, [`TlsModel::audit_states`].
fn check_sent_states(model: &TlsModel, phases: &[(u64, String)]) -> Vec<String> {
    let mut t = 0u64;
    let history: Vec<(u64, String)> = phases
        .iter()
        .map(|(dur, state)| {
            let at = (t, state.clone());
            t += dur;
            at
        })
        .collect();
    model
        .audit_states(&history)
        .err()
        .map(|e| e.to_string())
        .into_iter()
        .collect()
}

#[test]
fn the_same_controllers_run_one_episode_on_each_backend() {
    if !greenwave_sim::sumo::available_for_tests() {
        return;
    }
    let twin = Scenario::from_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sumo-single-twin.toml"),
    )
    .unwrap();
    let mut cfg = SumoConfig::new(
        sumo_fixture("single.net.xml"),
        sumo_fixture("single.rou.xml"),
    );
    cfg.seconds = SECONDS;
    cfg.seed = SEED;
    cfg.reply_timeout_s = 30.0;
    for (emb_c, sumo_c) in controllers().into_iter().zip(controllers()) {
        let mut embedded = EmbeddedEnv::from_scenario(&twin, SEED);
        let (em, ew) = episode(&mut embedded, emb_c);
        let mut sumo = SumoEnv::new(cfg.clone()).unwrap();
        let (sm, sw) = episode(&mut sumo, sumo_c);
        eprintln!("{:<13} embedded: {em:?}", ew.name());
        eprintln!("{:<13} SUMO:     {sm:?}", sw.name());
        assert_sane("embedded", &em, &ew);
        assert_sane("SUMO", &sm, &sw);
        assert!(sumo.finished(), "the SUMO episode ran to its end");
        // Same geometry and demand: the two backends agree on the order of magnitude.
        let ratio = sm.throughput_veh as f64 / em.throughput_veh as f64;
        assert!(
            (0.6..=1.6).contains(&ratio),
            "{}: throughput SUMO {} vs embedded {}",
            sw.name(),
            sm.throughput_veh,
            em.throughput_veh
        );

        // What SUMO was actually shown: every state greenwave sent this episode.
        let dir = std::env::temp_dir().join(format!("greenwave-backends-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let replay = dir.join("replay.add.xml");
        sumo.write_replay_programs(&replay).unwrap();
        let xml = std::fs::read_to_string(&replay).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for model in sumo.models() {
            let phases = replay_phases(&xml, &model.id);
            assert!(
                phases.len() > 2,
                "{}: {} states sent",
                sw.name(),
                phases.len()
            );
            assert!(
                phases.iter().any(|(_, s)| s.contains('y')),
                "{}: no yellow ever sent",
                sw.name()
            );
            let shown_ms: u64 = phases.iter().map(|(d, _)| d).sum();
            assert_eq!(shown_ms, (SECONDS * 1000.0) as u64, "{}", sw.name());
            let bad = check_sent_states(model, &phases);
            assert!(bad.is_empty(), "{}: {bad:#?}", sw.name());
        }
    }
}

/// The state checker above flags what it should (needs no SUMO: the model comes from the
/// net file).
#[test]
fn the_state_checker_catches_unsafe_displays() {
    let net = greenwave_sim::sumo::NetFile::read(&sumo_fixture("single.net.xml")).unwrap();
    // The net's program has no all-red: impose 2 s so the all-red checks have work.
    let mut timing = greenwave_sim::sumo::TimingSpec::default();
    timing.command_line.all_red_s = Some(2.0);
    let opts = greenwave_sim::sumo::ModelOptions {
        program: None,
        timing: &timing,
        step_ms: 1000,
    };
    let models = greenwave_sim::sumo::build_models(&net, opts)
        .unwrap()
        .models;
    let m = &models[0];
    let (ns, ew) = ("GGGgrrrrGGGgrrrr", "rrrrGGGgrrrrGGGg");
    let (yellow, red) = ("yyyyrrrryyyyrrrr", "rrrrrrrrrrrrrrrr");
    let check = |phases: &[(u64, &str)]| {
        let phases: Vec<(u64, String)> = phases.iter().map(|(d, s)| (*d, s.to_string())).collect();
        check_sent_states(m, &phases)
    };
    assert_eq!(
        check(&[(10_000, ns), (3_000, yellow), (2_000, red), (10_000, ew)]),
        Vec::<String>::new()
    );
    for (what, phases) in [
        ("no yellow", vec![(10_000, ns), (10_000, ew)]),
        (
            "short yellow",
            vec![(10_000, ns), (1_000, yellow), (2_000, red), (10_000, ew)],
        ),
        (
            "short all-red",
            vec![(10_000, ns), (3_000, yellow), (1_000, red), (10_000, ew)],
        ),
        (
            "no all-red",
            vec![(10_000, ns), (3_000, yellow), (10_000, ew)],
        ),
        ("conflicting greens", vec![(10_000, "GGGgGGGgGGGgrrrr")]),
    ] {
        assert!(!check(&phases).is_empty(), "{what} not caught");
    }
}
