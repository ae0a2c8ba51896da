//! `realtime`: the display follows the wall clock, and a stretch that is due before the
//! work ahead of it ended (here a field whose step takes 60 ms after every interval) is
//! shown whole, late, with the schedule after it moved back: a yellow that begins at a
//! decision is never cut by that decision's latency.

mod common;

use std::time::{Duration, Instant};

use common::{fixture, TestField};
use greenwave_core::sequencer::Segment;
use greenwave_core::{Interval, LaneReading, Millis, RewardKind};
use greenwave_runtime::controller::{
    Controller, ControllerConfig, DetectorError, DetectorSource, Fallback, FallbackKind, Policy,
    SignalSink, SinkError,
};
use greenwave_runtime::inference::{Explorer, InferenceError, PolicyBackend};
use greenwave_sim::MovementDetector;

/// Always asks for phase 1.
struct PhaseOne;

impl PolicyBackend for PhaseOne {
    fn name(&self) -> &'static str {
        "phase-1"
    }

    fn infer(&mut self, _obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        for (i, z) in logits.iter_mut().enumerate() {
            *z = if i == 1 { 1.0 } else { 0.0 };
        }
        Ok(0.0)
    }
}

/// A field whose step takes `lag`, recording when each stretch of signal 0 was shown.
struct SlowField {
    inner: TestField,
    lag: Duration,
    shown: Vec<(Instant, u64, Segment)>,
}

impl DetectorSource for SlowField {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        self.inner.read(signal, lanes)
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        std::thread::sleep(self.lag);
        self.inner.advance(dt)
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        self.inner.movement_detectors(signal)
    }

    fn reward_kind(&self) -> Option<RewardKind> {
        self.inner.reward_kind()
    }
}

impl SignalSink for SlowField {
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        response: &greenwave_core::Response,
    ) -> Result<(), SinkError> {
        self.inner.request(signal, requested, response)
    }

    fn show(&mut self, signal: usize, at_ms: u64, segment: &Segment) -> Result<(), SinkError> {
        if signal == 0 {
            self.shown.push((Instant::now(), at_ms, *segment));
        }
        Ok(())
    }
}

#[test]
fn a_stretch_shown_late_still_lasts_its_whole_length() {
    let fx = fixture("realtime-slip");
    let inner = TestField::new(&fx.scenario, 3);
    let specs = inner.inner.signal_specs();
    let interval = inner.inner.decision_interval();
    let mut field = SlowField {
        inner,
        lag: Duration::from_millis(60),
        shown: Vec::new(),
    };
    let policy = Policy {
        backend: Box::new(PhaseOne),
        version: 1,
        explorer: Explorer::greedy(),
    };
    let mut cfg = ControllerConfig::new(interval);
    cfg.realtime = true;
    let fallback = Fallback::for_scenario(&fx.scenario, FallbackKind::FixedTime);
    let mut c = Controller::new(specs, Ok(policy), fallback, cfg, None).unwrap();
    // Phase 0 holds its 8 s min green: the switch, a yellow at the third decision.
    let seconds = 3.0 * f64::from(interval.0) / 1000.0;
    let stats = c.run(&mut field, seconds, |_| {}).unwrap();
    let shown = &field.shown;
    assert!(
        shown
            .iter()
            .any(|(_, _, s)| matches!(s.interval, Interval::Yellow { .. })),
        "a yellow was shown: {shown:?}"
    );
    for pair in shown.windows(2) {
        let ((wall_a, at_a, a), (wall_b, at_b, _)) = (pair[0], pair[1]);
        let nominal = Duration::from_millis(at_b - at_a);
        let lasted = wall_b - wall_a;
        assert!(
            lasted + Duration::from_millis(2) >= nominal,
            "{:?} shown {lasted:?}, {nominal:?} due",
            a.interval
        );
    }
    assert!(stats.realtime_slip_ms >= 60, "{stats:?}");
}
