//! The controller's view of the field: detectors in, signal heads out.

use greenwave_core::sequencer::Segment;
use greenwave_core::{
    Interval, LaneReading, Millis, MovementDetector, Response, RewardKind, SignalFrame,
};

/// Why detector readings are missing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DetectorError {
    /// A detector did not report for this decision (dead, disconnected, stale). The
    /// signal goes to its fallback; the controller carries on.
    #[error("signal {signal}: detector on lane {lane} did not report")]
    NoReport {
        /// The signal.
        signal: usize,
        /// The lane whose detector is silent.
        lane: usize,
    },
    /// The detector hardware reported a fault for this signal.
    #[error("signal {signal}: detector fault: {message}")]
    Faulty {
        /// The signal.
        signal: usize,
        /// What it reported.
        message: String,
    },
    /// The source as a whole failed (simulator died, replay file unreadable). Fatal.
    #[error("detector source: {0}")]
    Source(String),
}

/// Where detector readings come from: the embedded simulator, SUMO, a recorded replay,
/// or (on a real controller) the detector cards.
pub trait DetectorSource {
    /// Reads `signal`'s incoming lanes now, one reading per lane of its layout.
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError>;

    /// Lets the field run to the next decision point, `dt` later (a simulator steps; a
    /// replay moves to its next record; hardware returns at once, the controller keeps
    /// time). Returns each signal's reward over the interval, or `None` when the source
    /// has no more data.
    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError>;

    /// Per-movement detector readings of `signal` (indexed like its plan's movements) for
    /// the actuated fallback, if this source has them: detector cards that report gaps
    /// and calls per movement, a simulator, or a replay of either.
    fn movement_detectors(&self, _signal: usize) -> Option<Vec<MovementDetector>> {
        None
    }

    /// Which reward [`DetectorSource::advance`] returns (recorded in every transition, so
    /// that fine-tuning never mixes kinds); `None` when the source cannot say.
    fn reward_kind(&self) -> Option<RewardKind> {
        None
    }

    /// Traffic metrics of the run so far, where the source measures them (simulators).
    #[cfg(feature = "sim")]
    fn metrics(&self) -> Option<greenwave_sim::EpisodeMetrics> {
        None
    }

    /// Called once after the last decision (flush recordings, close connections).
    fn finish(&mut self) -> Result<(), DetectorError> {
        Ok(())
    }

    /// Whether the readings now are the source's last (a replay at its last record): the
    /// controller then takes no decision on them; they complete the last transition, as
    /// the recorded run's final readings did. Sources that run on say `false`.
    fn exhausted(&self) -> bool {
        false
    }
}

/// A signal output failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signal {signal}: output failed: {message}")]
pub struct SinkError {
    /// The signal.
    pub signal: usize,
    /// What failed.
    pub message: String,
}

/// What the field actually displays, as a conflict monitor reads it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readback {
    /// The interval shown.
    pub interval: Interval,
    /// Time into it.
    pub in_interval: Millis,
    /// Every movement's display.
    pub frame: SignalFrame,
}

/// Where the supervisor's decisions go: signal heads, or a simulator's signals.
pub trait SignalSink {
    /// At a decision point: the request the controller handed `signal`'s sequencer and
    /// the sequencer's answer. A simulator adapter forwards the request to its own copy
    /// of the sequencer, so it shows exactly what the supervisor decided.
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        response: &Response,
    ) -> Result<(), SinkError> {
        let _ = (signal, requested, response);
        Ok(())
    }

    /// One stretch of constant display of `signal`, starting `at_ms` after the controller
    /// started, in time order (in real time, called when the stretch begins).
    fn show(&mut self, signal: usize, at_ms: u64, segment: &Segment) -> Result<(), SinkError>;

    /// What the field displays now, if it can tell. The controller compares it with its
    /// own supervisor after every interval and stops on a difference.
    fn readback(&self, signal: usize) -> Option<Readback> {
        let _ = signal;
        None
    }
}

/// Detectors and signal outputs together: what the controller runs against.
pub trait Field: DetectorSource + SignalSink {}

impl<T: DetectorSource + SignalSink + ?Sized> Field for T {}

/// A field made of a separate detector source and signal sink.
#[derive(Debug)]
pub struct Split<D, S> {
    /// The detectors.
    pub detectors: D,
    /// The outputs.
    pub sink: S,
}

impl<D: DetectorSource, S> DetectorSource for Split<D, S> {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        self.detectors.read(signal, lanes)
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        self.detectors.advance(dt)
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        self.detectors.movement_detectors(signal)
    }

    fn reward_kind(&self) -> Option<RewardKind> {
        self.detectors.reward_kind()
    }

    #[cfg(feature = "sim")]
    fn metrics(&self) -> Option<greenwave_sim::EpisodeMetrics> {
        self.detectors.metrics()
    }

    fn finish(&mut self) -> Result<(), DetectorError> {
        self.detectors.finish()
    }

    fn exhausted(&self) -> bool {
        self.detectors.exhausted()
    }
}

impl<D, S: SignalSink> SignalSink for Split<D, S> {
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        response: &Response,
    ) -> Result<(), SinkError> {
        self.sink.request(signal, requested, response)
    }

    fn show(&mut self, signal: usize, at_ms: u64, segment: &Segment) -> Result<(), SinkError> {
        self.sink.show(signal, at_ms, segment)
    }

    fn readback(&self, signal: usize) -> Option<Readback> {
        self.sink.readback(signal)
    }
}

/// A sink that drives nothing (dry runs, replays).
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl SignalSink for NullSink {
    fn show(&mut self, _signal: usize, _at_ms: u64, _segment: &Segment) -> Result<(), SinkError> {
        Ok(())
    }
}
