//! `realtime`: the display follows the wall clock, and a stretch that is due before the
//! work ahead of it ended (here a field whose step takes 60 ms after every interval) is
//! shown whole, late, with the schedule after it moved back: a yellow that begins at a
//! decision is never cut by that decision's latency.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{add_program_clock, fixture, Recorder, TestField};
use greenwave_core::sequencer::Segment;
use greenwave_core::{Interval, LaneReading, Millis, ProgramClock, RewardKind};
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

fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.unwrap().as_millis() as u64
}

/// A realtime controller with its field, the observations its policy was shown, the
/// number of detector lanes (where the clock's lanes begin) and its program clock.
struct Clocked {
    c: Controller,
    field: SlowField,
    seen: Arc<Mutex<Vec<Vec<f32>>>>,
    detected: usize,
    clock: ProgramClock,
}

/// A realtime controller on single-4way whose signal reads a program clock (phase 0 for
/// `first` ms, then 20 s for each other phase) on Unix time from `origin(cycle)`, on a
/// field whose step takes `lag`, its policy asking for phase 0.
fn clocked(first: u32, lag: Duration, origin: impl FnOnce(u64) -> u64) -> Clocked {
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let inner = TestField::new(&scenario, 3);
    let mut specs = inner.inner.signal_specs();
    let duration = |k| match k {
        0 => Millis(first),
        _ => Millis::from_secs(20),
    };
    let (detected, clock) = add_program_clock(&mut specs, duration, 0);
    let mut cfg = ControllerConfig::new(inner.inner.decision_interval());
    cfg.realtime = true;
    cfg.inference_budget = Duration::from_secs(60);
    // The clock's offset is already on Unix time: its cycle begins at the origin.
    cfg.program_clock_unix_origin_ms = Some(origin(u64::from(clock.cycle().0)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let policy = Policy {
        backend: Box::new(Recorder { seen: seen.clone() }),
        version: 1,
        explorer: Explorer::greedy(),
    };
    let fallback = Fallback::for_scenario(&scenario, FallbackKind::FixedTime);
    let c = Controller::new(specs, Ok(policy), fallback, cfg, None).unwrap();
    let field = SlowField {
        inner,
        lag,
        shown: Vec::new(),
    };
    Clocked {
        c,
        field,
        seen,
        detected,
        clock,
    }
}

impl Clocked {
    /// The phase the program-clock lanes of the `k`th observation show.
    fn shown_phase(&self, k: usize) -> Option<usize> {
        let seen = self.seen.lock().unwrap();
        let p = self.clock.stages().len();
        let lanes = &seen[k][self.detected..self.detected + p];
        lanes.iter().position(|&d| d == 1.0)
    }
}

/// Program clocks on Unix time read the system clock, not the controller's time, which
/// falls behind it by the slip: the field's 60 ms step after the first interval puts the
/// second decision, due at the controller's 5 s, at 5.06 s or later on the wall clock,
/// where a program that changes phase at 5.03 s has changed.
#[test]
fn program_clocks_on_unix_time_read_the_system_clock() {
    let change = 5030;
    let mut run = clocked(change, Duration::from_millis(60), |_| unix_ms());
    // After the origin: the time since it is at least the time since this.
    let made = Instant::now();
    let mut bounds = Vec::new();
    for _ in 0..2 {
        let t = run.c.now_ms();
        let before = made.elapsed().as_millis() as u64;
        assert!(run.c.step(&mut run.field).unwrap());
        bounds.push((t, before));
    }
    assert_eq!(run.seen.lock().unwrap().len(), 2);
    let (t, wall_at_least) = bounds[1];
    assert_eq!(
        t, 5000,
        "the second decision, on the controller's time (5 s intervals)"
    );
    // The field's lag put the wall clock past the change; nothing here takes 20 s more.
    assert!(wall_at_least >= u64::from(change), "{wall_at_least} ms");
    assert_eq!(
        run.clock.phase_at(t).0,
        0,
        "the controller's time is before the change"
    );
    assert_eq!(run.clock.phase_at(wall_at_least).0, 1);
    assert_eq!(run.shown_phase(1), Some(1));
    assert_eq!(run.shown_phase(0), Some(0), "phase 0 at the start");
}

/// A system clock stepped back to before the controller's Unix origin (a cabinet that
/// started with its clock ahead, then synchronised): the program clock still reads the
/// program's phase at that Unix time, not the phase at the origin. Here the origin is set
/// 10 s short of a cycle ahead of the clock, so that the program stands 10 s into its
/// cycle, in its second stage, at the first decision.
#[test]
fn a_clock_behind_the_origin_reads_the_programs_phase_at_its_time() {
    let mut run = clocked(5000, Duration::ZERO, |cycle| unix_ms() + cycle - 10_000);
    assert!(run.c.step(&mut run.field).unwrap());
    assert_eq!(run.clock.phase_at(10_000).0, 1);
    assert_eq!(run.shown_phase(0), Some(1));
}
