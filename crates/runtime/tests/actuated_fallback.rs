//! The actuated fallback runs greenwave-core's gap-out / max-out rule on whatever
//! per-movement detector readings the field gives: a simulator's, or a replay file's
//! recorded ones. A recorded run replayed with the same fallback takes the same decisions;
//! a field without movement readings runs fixed time.

mod common;

use common::scenario;
use greenwave_core::sequencer::Segment;
use greenwave_runtime::controller::{
    Controller, ControllerConfig, Fallback, FallbackKind, ReplayRecorder, ReplaySource, SignalSink,
    SimField, SinkError, Split,
};
use greenwave_sim::EmbeddedEnv;

const DECISIONS: usize = 240;

/// Shows nothing (the replayed field has no lamps).
struct NoLamps;

impl SignalSink for NoLamps {
    fn show(&mut self, _: usize, _: u64, _: &Segment) -> Result<(), SinkError> {
        Ok(())
    }
}

/// The green phase after each decision, with no policy (every decision is the fallback's).
fn greens(
    field: &mut (impl greenwave_runtime::controller::Field + ?Sized),
    kind: FallbackKind,
    decisions: usize,
) -> Vec<u8> {
    let s = scenario();
    let specs = SimField::new(EmbeddedEnv::from_scenario(&s, 1)).signal_specs();
    let fallback = Fallback::for_scenario(&s, kind);
    let cfg = ControllerConfig::new(s.decision_interval());
    let mut c = Controller::new(specs, Err("no policy".into()), fallback, cfg, None).unwrap();
    (0..decisions)
        .map(|_| {
            assert!(c.step(field).unwrap());
            c.sequencer(0).interval().target().0
        })
        .collect()
}

#[test]
fn actuated_fallback_replays_its_decisions_from_recorded_movement_readings() {
    let s = scenario();
    let dir = common::tmp("actuated-replay");
    let path = dir.join("field.jsonl");
    let sim = SimField::new(EmbeddedEnv::from_scenario(&s, 7));
    let specs = sim.signal_specs();
    let interval = s.decision_interval();
    let mut recorder = ReplayRecorder::create(sim, &path, &specs, interval).unwrap();
    let live = greens(&mut recorder, FallbackKind::Actuated, DECISIONS);
    drop(recorder);

    let replay = |kind| {
        let mut field = Split {
            detectors: ReplaySource::open(&path, &specs).unwrap(),
            sink: NoLamps,
        };
        // The recording's last decision has no line after it.
        greens(&mut field, kind, DECISIONS - 1)
    };
    let replayed = replay(FallbackKind::Actuated);
    assert_eq!(replayed[..], live[..DECISIONS - 1]);
    // Actuated, not a fixed cycle: the replayed field's fixed-time run differs.
    assert_ne!(replay(FallbackKind::FixedTime)[..], live[..DECISIONS - 1]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().nth(1).unwrap().contains("\"movements\""));
}

/// A recording never replaces a file: not an earlier recording, not the replay being read
/// (`--record` naming the `--replay` file once truncated it as it was read).
#[test]
fn a_recording_refuses_an_existing_file_and_leaves_it_whole() {
    let s = scenario();
    let dir = common::tmp("record-exists");
    let path = dir.join("field.jsonl");
    std::fs::write(&path, "an earlier recording\n").unwrap();
    let sim = SimField::new(EmbeddedEnv::from_scenario(&s, 7));
    let specs = sim.signal_specs();
    let err = ReplayRecorder::create(sim, &path, &specs, s.decision_interval()).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "an earlier recording\n"
    );
}
