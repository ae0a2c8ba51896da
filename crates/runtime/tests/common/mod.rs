//! Shared test fixtures: synthetic and trained policies, bundles, an instrumented field,
//! and the checker of the supervisor's invariants on recorded signal frames.
#![allow(dead_code)]

use std::cell::Cell;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use greenwave_core::mlp::DenseLayer;
use greenwave_core::sequencer::Segment;
use greenwave_core::{Interval, LaneReading, Millis, ObsLayout, PhaseId, PhasePlan, Response};
use greenwave_policy::{onnx, Manifest, ObsNormalization, PolicyWeights, Provenance};
use greenwave_runtime::bundle::{self, BundleInputs, KeyPairPaths};
use greenwave_runtime::controller::{
    DetectorError, DetectorSource, Readback, SignalSink, SimField, SinkError,
};
use greenwave_runtime::inference::{InferenceError, PolicyBackend};
use greenwave_sim::{EmbeddedEnv, EpisodeMetrics, MovementDetector, Scenario};
use rand::{Rng, SeedableRng};

/// A fresh temporary directory for `name` (removed first if left over).
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gw-runtime-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The single-4way scenario (one signal, 12 lanes, 4 phases).
pub fn scenario() -> Scenario {
    greenwave_sim::load("single-4way").unwrap()
}

/// The plan and layout of `scenario`'s first signal.
pub fn plan_and_layout(scenario: &Scenario) -> (PhasePlan, ObsLayout) {
    let field = SimField::new(EmbeddedEnv::from_scenario(scenario, 0));
    let s = field.signal_specs().remove(0);
    (s.plan, s.layout)
}

fn layer(rng: &mut impl Rng, inputs: usize, outputs: usize) -> DenseLayer {
    let bound = (6.0 / (inputs + outputs) as f32).sqrt();
    DenseLayer {
        inputs,
        outputs,
        weights: (0..inputs * outputs)
            .map(|_| rng.random_range(-bound..bound))
            .collect(),
        bias: (0..outputs).map(|_| rng.random_range(-0.1..0.1)).collect(),
    }
}

/// A random (untrained) policy for `layout`, hidden widths `hidden`.
pub fn synthetic_weights(layout: ObsLayout, hidden: &[usize], seed: u64) -> PolicyWeights {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let d = layout.dim();
    let head = |rng: &mut rand_pcg::Pcg64Mcg, out: usize| {
        let mut widths = vec![d];
        widths.extend_from_slice(hidden);
        widths.push(out);
        widths
            .windows(2)
            .map(|w| layer(rng, w[0], w[1]))
            .collect::<Vec<_>>()
    };
    let actor = head(&mut rng, layout.n_phases as usize);
    let critic = head(&mut rng, 1);
    let mut norm = ObsNormalization::identity(d, 10.0);
    for (m, s) in norm.mean.iter_mut().zip(&mut norm.inv_std) {
        *m = rng.random_range(0.0..0.3);
        *s = rng.random_range(0.5..3.0);
    }
    PolicyWeights {
        obs_layout: layout,
        norm,
        actor,
        critic,
    }
}

/// Writes `X.onnx`, `X.blob`, `X.int8.blob`, `X.manifest.json` for `weights` the way
/// `greenwave export` does; returns `X.onnx`.
pub fn write_export(
    dir: &Path,
    weights: &PolicyWeights,
    plan: &PhasePlan,
    interval: Millis,
) -> PathBuf {
    write_export_clocked(dir, weights, plan, interval, false)
}

/// [`write_export`], for a policy whose last `n_phases` lanes are program-clock lanes
/// when `program_clock` (the manifest's flag).
pub fn write_export_clocked(
    dir: &Path,
    weights: &PolicyWeights,
    plan: &PhasePlan,
    interval: Millis,
    program_clock: bool,
) -> PathBuf {
    write_export_with(dir, weights, plan, interval, |m| {
        m.program_clock = program_clock
    })
}

/// [`write_export`] with the manifest as `edit` leaves it.
pub fn write_export_with(
    dir: &Path,
    weights: &PolicyWeights,
    plan: &PhasePlan,
    interval: Millis,
    edit: impl FnOnce(&mut Manifest),
) -> PathBuf {
    let mut manifest = Manifest::new(
        plan,
        weights.obs_layout,
        interval,
        weights.hidden(),
        Provenance {
            command: "synthetic (test)".into(),
            git_rev: "test".into(),
            ..Provenance::default()
        },
    );
    edit(&mut manifest);
    let out = dir.join("policy.onnx");
    std::fs::write(&out, onnx::export(weights, &manifest)).unwrap();
    let mlp = weights.actor_mlp(plan.hash(), manifest.policy_version);
    std::fs::write(out.with_extension("blob"), mlp.to_blob(false).unwrap()).unwrap();
    std::fs::write(out.with_extension("int8.blob"), mlp.to_blob(true).unwrap()).unwrap();
    std::fs::write(
        out.with_extension("manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap(),
    )
    .unwrap();
    out
}

/// The bundle inputs beside an exported `X.onnx`.
pub fn inputs(onnx_path: &Path) -> BundleInputs {
    BundleInputs {
        model: onnx_path.to_path_buf(),
        manifest: onnx_path.with_extension("manifest.json"),
        blob: onnx_path.with_extension("blob"),
        blob_int8: Some(onnx_path.with_extension("int8.blob")),
    }
}

/// A synthetic policy for single-4way, exported, bundled and signed in `dir`.
pub struct Fixture {
    pub dir: PathBuf,
    pub keys: KeyPairPaths,
    pub public: ed25519_dalek::VerifyingKey,
    pub onnx: PathBuf,
    pub bundle: PathBuf,
    pub scenario: Scenario,
    pub plan: PhasePlan,
    pub layout: ObsLayout,
}

pub fn fixture(name: &str) -> Fixture {
    let dir = tmp(name);
    let scenario = scenario();
    let (plan, layout) = plan_and_layout(&scenario);
    let weights = synthetic_weights(layout, &[64, 64], 2024);
    let onnx = write_export(&dir, &weights, &plan, scenario.decision_interval());
    let (keys, public) = bundle::keygen(&dir.join("site"), false).unwrap();
    let key = bundle::load_signing_key(&keys.secret).unwrap();
    let bundle_dir = dir.join("bundle");
    bundle::pack_and_sign(&inputs(&onnx), &key, &bundle_dir).unwrap();
    Fixture {
        dir,
        keys,
        public,
        onnx,
        bundle: bundle_dir,
        scenario,
        plan,
        layout,
    }
}

/// One recorded stretch of display: start time and segment.
pub type Shown = (u64, Segment);

/// The embedded simulator as a field, recording every displayed segment, with optional
/// detector faults injected by controller time.
pub struct TestField {
    pub inner: SimField<EmbeddedEnv>,
    pub shown: Vec<Vec<Shown>>,
    /// Lane 0 of signal 0 does not report during this controller-time window (ms).
    pub dead_detector: Option<Range<u64>>,
    /// Lane 1 of signal 0 reads an impossible density during this window (ms).
    pub impossible: Option<Range<u64>>,
    pub now_ms: u64,
}

impl TestField {
    pub fn new(scenario: &Scenario, seed: u64) -> Self {
        let inner = SimField::new(EmbeddedEnv::from_scenario(scenario, seed));
        let n = inner.signal_specs().len();
        TestField {
            inner,
            shown: vec![Vec::new(); n],
            dead_detector: None,
            impossible: None,
            now_ms: 0,
        }
    }
}

impl DetectorSource for TestField {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        self.inner.read(signal, lanes)?;
        let now = self.now_ms;
        if signal == 0
            && self
                .dead_detector
                .as_ref()
                .is_some_and(|w| w.contains(&now))
        {
            return Err(DetectorError::NoReport { signal, lane: 0 });
        }
        if signal == 0 && self.impossible.as_ref().is_some_and(|w| w.contains(&now)) {
            lanes[1].density = 7.5;
        }
        Ok(())
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        self.now_ms += dt.0 as u64;
        self.inner.advance(dt)
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        self.inner.movement_detectors(signal)
    }

    fn reward_kind(&self) -> Option<greenwave_core::RewardKind> {
        self.inner.reward_kind()
    }

    fn metrics(&self) -> Option<EpisodeMetrics> {
        self.inner.metrics()
    }
}

impl SignalSink for TestField {
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        response: &Response,
    ) -> Result<(), SinkError> {
        self.inner.request(signal, requested, response)
    }

    fn show(&mut self, signal: usize, at_ms: u64, segment: &Segment) -> Result<(), SinkError> {
        self.shown[signal].push((at_ms, *segment));
        Ok(())
    }

    fn readback(&self, signal: usize) -> Option<Readback> {
        self.inner.readback(signal)
    }
}

/// Checks the supervisor's invariants on the displays of one signal: contiguous in time,
/// never two conflicting movements non-red, every green between its min and max green
/// (the last one may be cut by the end of the run), and every change a full yellow of the
/// ending phase, then its full all-red, then the next green.
pub fn check_invariants(plan: &PhasePlan, shown: &[Shown]) -> Result<(), String> {
    let conflicts = plan.conflicts();
    let mut merged: Vec<(u64, Interval, u64)> = Vec::new();
    let mut expect_at = shown.first().map_or(0, |s| s.0);
    for (at, seg) in shown {
        if *at != expect_at {
            return Err(format!("gap or overlap at {at} ms (expected {expect_at})"));
        }
        expect_at = at + seg.duration.0 as u64;
        let non_red = seg.frame.non_red();
        for a in non_red.iter() {
            if let Some(b) = conflicts.foes(a).and(non_red).iter().next() {
                return Err(format!(
                    "at {at} ms movements {} and {} are non-red together",
                    a.0, b.0
                ));
            }
        }
        match merged.last_mut() {
            Some(last) if last.1 == seg.interval => last.2 += seg.duration.0 as u64,
            _ => merged.push((*at, seg.interval, seg.duration.0 as u64)),
        }
    }
    let timing = |p: PhaseId| plan.phases()[p.0 as usize].timing;
    let n = merged.len();
    for (k, &(at, interval, dur)) in merged.iter().enumerate() {
        let last = k + 1 == n;
        let next = merged.get(k + 1).map(|m| m.1);
        match interval {
            Interval::Green { phase } => {
                let t = timing(phase);
                if (!last && dur < t.min_green.0 as u64) || dur > t.max_green.0 as u64 {
                    return Err(format!(
                        "green of phase {} at {at} ms lasted {dur} ms",
                        phase.0
                    ));
                }
                if let Some(nx) = next {
                    if !matches!(nx, Interval::Yellow { from, .. } if from == phase) {
                        return Err(format!(
                            "green of phase {} at {at} ms followed by {nx:?}",
                            phase.0
                        ));
                    }
                }
            }
            Interval::Yellow { from, to } => {
                if !last && dur != timing(from).yellow.0 as u64 {
                    return Err(format!("yellow at {at} ms lasted {dur} ms"));
                }
                let want_all_red = timing(from).all_red.0 > 0;
                let ok = match next {
                    None => true,
                    Some(Interval::AllRed { from: f, to: t }) => {
                        want_all_red && f == from && t == to
                    }
                    Some(Interval::Green { phase }) => !want_all_red && phase == to,
                    Some(_) => false,
                };
                if !ok {
                    return Err(format!("yellow at {at} ms followed by {next:?}"));
                }
            }
            Interval::AllRed { from, to } => {
                if !last && dur != timing(from).all_red.0 as u64 {
                    return Err(format!("all-red at {at} ms lasted {dur} ms"));
                }
                if let Some(nx) = next {
                    if nx != (Interval::Green { phase: to }) {
                        return Err(format!("all-red at {at} ms followed by {nx:?}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Faults injected into a backend by call number (one call per decision of a
/// one-signal controller).
#[derive(Clone, Default)]
pub struct Faults {
    pub nan: Option<Range<u64>>,
    pub slow: Option<(Range<u64>, Duration)>,
    pub error: Option<Range<u64>>,
}

/// Wraps a backend and injects [`Faults`].
pub struct FaultyBackend {
    pub inner: Box<dyn PolicyBackend>,
    pub faults: Faults,
    pub calls: Rc<Cell<u64>>,
}

impl PolicyBackend for FaultyBackend {
    fn name(&self) -> &'static str {
        "faulty"
    }

    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        let k = self.calls.get();
        self.calls.set(k + 1);
        let in_window = |w: &Option<Range<u64>>| w.as_ref().is_some_and(|w| w.contains(&k));
        if in_window(&self.faults.error) {
            return Err(InferenceError::Run {
                backend: "faulty",
                message: "injected".into(),
            });
        }
        if let Some((w, d)) = &self.faults.slow {
            if w.contains(&k) {
                std::thread::sleep(*d);
            }
        }
        let v = self.inner.infer(obs, logits)?;
        if in_window(&self.faults.nan) {
            logits[2] = f32::NAN;
        }
        Ok(v)
    }
}

/// The record with sequence number `seq`: its content is a pure function of `seq`, and
/// its size varies with it.
pub fn log_record(seq: u64) -> greenwave_core::Transition {
    let n = 5 + (seq % 23) as usize;
    let obs = (0..n)
        .map(|j| ((seq * 31 + j as u64) % 97) as f32 / 97.0)
        .collect::<Vec<_>>();
    let next = (0..n)
        .map(|j| ((seq * 17 + j as u64) % 89) as f32 / 89.0)
        .collect::<Vec<_>>();
    greenwave_core::Transition {
        timestamp_ms: seq,
        signal: (seq % 3) as u16,
        obs: heapless::Vec::from_slice(&obs).unwrap(),
        requested: (seq % 4) as u8,
        action: ((seq + 1) % 4) as u8,
        log_prob: -((seq % 7) as f32) / 7.0,
        reward: (seq % 11) as f32 - 5.0,
        next_obs: heapless::Vec::from_slice(&next).unwrap(),
        done: seq % 50 == 49,
        policy_version: 1 + (seq / 100) as u32,
        source: [
            greenwave_core::ActionSource::Policy,
            greenwave_core::ActionSource::Supervisor,
            greenwave_core::ActionSource::Fallback,
        ][(seq % 3) as usize],
        reward_kind: Some(greenwave_core::RewardKind::WaitDelta),
    }
}

/// A broken (stubborn) policy: always asks for phase 0, whatever it sees. The supervisor
/// still cycles the others at max green, and the max-red rule serves the ones that call.
pub struct AlwaysFirstPhase {
    pub n: usize,
}

impl PolicyBackend for AlwaysFirstPhase {
    fn name(&self) -> &'static str {
        "always-phase-0"
    }

    fn infer(&mut self, _obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        logits
            .iter_mut()
            .take(self.n)
            .enumerate()
            .for_each(|(i, z)| *z = -(i as f32));
        Ok(0.0)
    }
}

/// Asks for phase 0 and keeps every observation it is shown.
pub struct Recorder {
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<f32>>>>,
}

impl PolicyBackend for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        self.seen.lock().unwrap().push(obs.to_vec());
        logits.fill(0.0);
        Ok(0.0)
    }
}

/// Gives signal 0 of `specs` a program clock of one stage per phase in order, phase `k`
/// lasting `duration(k)`, from `offset_ms`, and the layout its lanes (after the detectors').
/// Returns the number of detector lanes (where the clock's begin) and the clock.
pub fn add_program_clock(
    specs: &mut [greenwave_runtime::controller::SignalSpec],
    duration: impl Fn(usize) -> Millis,
    offset_ms: i64,
) -> (usize, greenwave_core::ProgramClock) {
    let detected = specs[0].layout.n_lanes as usize;
    let p = specs[0].plan.n_phases();
    let stages: Vec<greenwave_core::ClockStage> = (0..p)
        .map(|k| greenwave_core::ClockStage {
            phase: k as u8,
            duration: duration(k),
        })
        .collect();
    let clock = greenwave_core::ProgramClock::new(&stages, offset_ms).unwrap();
    specs[0].program_clock = Some(clock.clone());
    specs[0].layout.n_lanes += p as u16;
    (detected, clock)
}
