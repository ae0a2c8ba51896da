//! A simulator ([`Env`]: the embedded one, or SUMO) as the controller's field.
//!
//! The simulator keeps its own sequencer per signal (that is how `Env` works). The
//! adapter forwards exactly the request the controller handed its own sequencer, and the
//! controller compares the two after every interval (read-back), so the simulator shows
//! precisely what the controller's supervisor decided.

use greenwave_core::sequencer::Segment;
use greenwave_core::{Interval, LaneReading, Millis, Response};
use greenwave_sim::{Env, EnvError, EpisodeMetrics, MovementDetector};

use super::field::{DetectorError, DetectorSource, Readback, SignalSink, SinkError};
use super::SignalSpec;

/// The signals of a (just reset) simulator, with their initial phases and, where its
/// observation has program-clock lanes (SUMO), each light's own program as the clock: what
/// a controller runs on it, or what `greenwave site` writes from it. The controller then
/// writes the clock's lanes itself, as on a cabinet, and the simulator supplies the
/// detector lanes only (so a recording of it holds detector lanes only too).
pub fn env_signal_specs(env: &(impl Env + ?Sized)) -> Vec<SignalSpec> {
    env.signals()
        .iter()
        .enumerate()
        .map(|(i, s)| SignalSpec {
            id: s.id.clone(),
            plan: s.plan.clone(),
            layout: s.layout,
            initial_phase: env.sequencer(i).interval().target(),
            // On the simulator's time base, 0 at reset: the controller's too.
            program_clock: env.program_clock(i),
        })
        .collect()
}

/// A simulator as detectors and signal heads.
#[derive(Debug)]
pub struct SimField<E> {
    env: E,
    requests: Vec<Option<u8>>,
    obs: Vec<f32>,
    /// Per signal, the lanes the simulator supplies: its layout's, less a program clock's
    /// (which the controller writes; `env_signal_specs`).
    detected: Vec<usize>,
}

impl<E: Env> SimField<E> {
    /// Wraps `env`, which must have just been reset (every signal at the start of its
    /// initial green).
    pub fn new(env: E) -> Self {
        let n = env.signals().len();
        let detected = env_signal_specs(&env)
            .iter()
            .map(SignalSpec::field_lanes)
            .collect();
        SimField {
            env,
            requests: vec![None; n],
            obs: Vec::new(),
            detected,
        }
    }

    /// The signals of the simulation, with their initial phases, for
    /// [`Controller::new`](super::Controller::new).
    pub fn signal_specs(&self) -> Vec<SignalSpec> {
        env_signal_specs(&self.env)
    }

    /// The simulator's decision interval.
    pub fn decision_interval(&self) -> Millis {
        self.env.decision_interval()
    }

    /// The simulator.
    pub fn env(&self) -> &E {
        &self.env
    }

    /// The simulator, mutably (fault injection in tests).
    pub fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }
}

fn env_err(e: EnvError) -> DetectorError {
    DetectorError::Source(e.to_string())
}

impl<E: Env> DetectorSource for SimField<E> {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        let spec = self.env.signals().get(signal).ok_or_else(|| {
            DetectorError::Source(format!("signal {signal} does not exist in the simulation"))
        })?;
        let n = spec.layout.n_lanes as usize;
        let detected = self.detected[signal];
        if lanes.len() != detected {
            return Err(DetectorError::Source(format!(
                "signal {signal}: {} lane buffers for {detected} detector lanes",
                lanes.len()
            )));
        }
        self.obs.resize(spec.layout.dim(), 0.0);
        // The simulator's readings come through its observation (the layout puts lane
        // densities then queues first); the controller rebuilds the observation itself
        // from its own sequencer.
        self.env
            .observe(signal, &mut self.obs)
            .map_err(|e| match e {
                EnvError::Observation { signal, source } => DetectorError::Faulty {
                    signal,
                    message: source.to_string(),
                },
                other => env_err(other),
            })?;
        for (j, r) in lanes.iter_mut().enumerate() {
            *r = LaneReading {
                density: self.obs[j],
                queue: self.obs[n + j],
            };
        }
        Ok(())
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        let interval = self.decision_interval();
        if dt != interval {
            return Err(DetectorError::Source(format!(
                "controller interval {dt} differs from the simulation's {interval}"
            )));
        }
        let actions: Option<Vec<u8>> = self.requests.iter().copied().collect();
        let actions = actions.ok_or_else(|| {
            DetectorError::Source("a signal received no request this interval".into())
        })?;
        let out = self.env.step(&actions).map_err(env_err)?;
        self.requests.iter_mut().for_each(|r| *r = None);
        Ok(Some(out.rewards))
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        Some(self.env.detectors(signal))
    }

    fn reward_kind(&self) -> Option<greenwave_core::RewardKind> {
        Some(self.env.reward_kind())
    }

    fn metrics(&self) -> Option<EpisodeMetrics> {
        Some(self.env.metrics())
    }
}

impl<E: Env> SignalSink for SimField<E> {
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        _response: &Response,
    ) -> Result<(), SinkError> {
        let slot = self.requests.get_mut(signal).ok_or_else(|| SinkError {
            signal,
            message: "no such signal in the simulation".into(),
        })?;
        *slot = Some(requested);
        Ok(())
    }

    fn show(&mut self, _signal: usize, _at_ms: u64, _segment: &Segment) -> Result<(), SinkError> {
        Ok(())
    }

    fn readback(&self, signal: usize) -> Option<Readback> {
        if signal >= self.env.signals().len() {
            return None;
        }
        let seq = self.env.sequencer(signal);
        let interval: Interval = seq.interval();
        Some(Readback {
            interval,
            in_interval: seq.in_interval(),
            frame: seq.frame(),
        })
    }
}
