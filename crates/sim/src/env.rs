//! The environment interface shared by the embedded simulator and the SUMO backend.
//!
//! One `Env` is one road network with one or more signals. Each decision interval the
//! learner (or a controller) gives one requested phase per signal; the environment hands the
//! requests to each signal's [`Sequencer`] (so yellow and all-red are real in simulation
//! too), simulates one decision interval, and returns one reward per signal.

use greenwave_core::{
    Millis, MovementSet, ObsLayout, PhaseMask, PhasePlan, ProgramClock, Response, RewardKind,
    Sequencer,
};
use serde::{Deserialize, Serialize};

/// What a signal is: its name, plan and observation layout.
#[derive(Clone, Debug)]
pub struct SignalSpec {
    /// Name (scenario node id or SUMO traffic-light id).
    pub id: String,
    /// The phase plan the sequencer enforces.
    pub plan: PhasePlan,
    /// The observation layout of this signal.
    pub layout: ObsLayout,
    /// Lane–phase incidence, `incidence[p][l]`: whether incoming lane `l` (observation
    /// order) carries a movement that is green in phase `p`. What a shared (any-junction)
    /// policy reads the junction's geometry from.
    pub incidence: Vec<Vec<bool>>,
}

/// The lane–phase incidence of a plan whose incoming lanes serve `lane_movements[l]`.
pub fn lane_phase_incidence(plan: &PhasePlan, lane_movements: &[MovementSet]) -> Vec<Vec<bool>> {
    plan.phases()
        .iter()
        .map(|ph| {
            lane_movements
                .iter()
                .map(|m| ph.movements.0 & m.0 != 0)
                .collect()
        })
        .collect()
}

/// Per-movement detector view of one signal, for the classic controllers (defined in
/// greenwave-core, where the control rules that read it live).
pub use greenwave_core::MovementDetector;

/// Metrics of an episode so far. The same definitions on every backend; delay counts the
/// time vehicles waited to enter the network (backlog), so blocking entry never looks good.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpisodeMetrics {
    /// Mean delay per vehicle (s): travel time minus free-flow time, plus time waiting to
    /// enter; vehicles still inside or never inserted count with their delay so far.
    pub mean_delay_s: f64,
    /// Mean stopped (halted) time per vehicle (s).
    pub mean_wait_s: f64,
    /// Mean travel time of vehicles that completed their trip (s); 0 when none did, which
    /// [`EpisodeMetrics::travel_time_s`] tells apart.
    pub mean_travel_time_s: f64,
    /// Vehicles that completed their trip.
    pub throughput_veh: u64,
    /// Vehicles that arrived but could not enter the network yet (at episode end).
    pub backlog_veh: u64,
    /// Pedestrians that set off (SUMO nets with persons; 0 on the embedded simulator,
    /// which has none).
    #[serde(default)]
    pub pedestrians: u64,
    /// Mean time a pedestrian stood still on foot (s), at red crossings mostly; 0 without
    /// pedestrians. Apart from the vehicle figures, which count vehicles only.
    #[serde(default)]
    pub mean_pedestrian_wait_s: f64,
    /// Mean over decision points of the total queue (halted vehicles), all signals.
    pub mean_queue_veh: f64,
    /// Vehicles SUMO teleported out of a jam (after `--time-to-teleport`, 300 s by
    /// default, standing at its head): their delay from then on is not counted, so a
    /// controller that gridlocks looks better than it is by that much. 0 on the embedded
    /// simulator, which never teleports.
    #[serde(default)]
    pub teleports: u64,
    /// Simulated seconds.
    pub sim_seconds: f64,
    /// Wall-clock seconds spent simulating.
    pub wall_seconds: f64,
}

impl EpisodeMetrics {
    /// The mean travel time of completed trips, or `None` when no vehicle completed its
    /// trip (a mean over no vehicles, which `mean_travel_time_s` holds as 0; a trip takes
    /// time, so a mean of 0 is never a real one, even in an average over seeds whose
    /// throughput rounds to 0).
    pub fn travel_time_s(&self) -> Option<f64> {
        (self.throughput_veh > 0 || self.mean_travel_time_s > 0.0)
            .then_some(self.mean_travel_time_s)
    }
}

/// What one decision interval produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepOutcome {
    /// One reward per signal.
    pub rewards: Vec<f32>,
    /// The sequencer's answer to each signal's request.
    pub responses: Vec<Response>,
    /// The episode reached its time limit (a truncation: bootstrap from the next state).
    pub done: bool,
}

/// What [`Env::step_begin`] did with a decision interval.
#[derive(Clone, Debug, PartialEq)]
pub enum StepStarted {
    /// The interval was simulated already (a simulator in this process): its outcome.
    Done(StepOutcome),
    /// The interval was handed to a simulator elsewhere (SUMO), which works on it now;
    /// [`Env::step_end`] waits for it and returns its outcome.
    Pending,
}

/// Errors an environment reports. A backend with an error type of its own has a variant
/// that keeps it (and its source): `Sumo`, with feature `sumo`.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// `step` got the wrong number of actions.
    #[error("expected {expected} actions (one per signal), got {got}")]
    ActionCount {
        /// Signals.
        expected: usize,
        /// Actions given.
        got: usize,
    },
    /// A signal index out of range.
    #[error("signal {signal} does not exist ({count} signals)")]
    UnknownSignal {
        /// The index.
        signal: usize,
        /// Signals.
        count: usize,
    },
    /// Building an observation failed (impossible reading, wrong buffer size).
    #[error("signal {signal}: {source}")]
    Observation {
        /// The signal.
        signal: usize,
        /// What went wrong.
        source: greenwave_core::ObsError,
    },
    /// The SUMO backend failed (SUMO died, a TraCI timeout or malformed reply, ...): its
    /// error, whose message and source this error shows as its own.
    #[cfg(feature = "sumo")]
    #[error(transparent)]
    Sumo(#[from] crate::sumo::SumoError),
    /// A failure that has no typed source: the step protocol misused (`step_end` without a
    /// pending `step_begin`, `step_begin` with one in flight), an environment refusing an
    /// operation (a read-only view of one), or a test double's injected fault. A backend's
    /// own errors get a variant of their own (as `Sumo`), not this.
    #[error("{0}")]
    Backend(String),
}

/// A traffic simulation controlled one decision interval at a time.
pub trait Env {
    /// The signals, in the order actions and rewards use.
    fn signals(&self) -> &[SignalSpec];

    /// Simulated time per `step`.
    fn decision_interval(&self) -> Millis;

    /// The reward signals are scored on.
    fn reward_kind(&self) -> RewardKind;

    /// Starts a new episode; the same seed gives the same episode.
    fn reset(&mut self, seed: u64) -> Result<(), EnvError>;

    /// Writes signal `signal`'s observation (its layout's `dim()` floats) into `out`.
    fn observe(&self, signal: usize, out: &mut [f32]) -> Result<(), EnvError>;

    /// The sequencer of signal `signal` (its state, and its action mask for the policy).
    fn sequencer(&self, signal: usize) -> &Sequencer;

    /// Which phases signal `signal` may request now.
    fn action_mask(&self, signal: usize) -> PhaseMask {
        self.sequencer(signal).action_mask()
    }

    /// Per-movement detector view of signal `signal` (indexed like its plan's movements).
    fn detectors(&self, signal: usize) -> Vec<MovementDetector>;

    /// Signal `signal`'s green time per phase in the program greenwave replaces, where it
    /// has one (a SUMO light's own program): the fixed-time fallback's cycle. None by
    /// default.
    fn program_greens(&self, _signal: usize) -> Option<Vec<Millis>> {
        None
    }

    /// The program green per phase that actuated control derives its max greens from, as
    /// from a Webster plan: [`Env::program_greens`], except that a phase its vehicles go
    /// on in after a walk stage (a SUMO program's short stage that ends the crossings
    /// while the vehicles keep green) counts the walk stage's green too.
    fn actuated_greens(&self, signal: usize) -> Option<Vec<Millis>> {
        self.program_greens(signal)
    }

    /// Signal `signal`'s detector-to-phase assignment, per phase in plan order: the
    /// movements whose detectors extend and call each phase under actuated control
    /// (greenwave-core's [`assigned_movements`](greenwave_core::control::assigned_movements)),
    /// where its program says more than the plan (a SUMO light whose program shows a
    /// movement yielding, `g`, in one phase and with right of way, `G`, from a lane of its
    /// own, in another; a walk stage, which answers to its pedestrians only). None by default: every phase answers
    /// to all its movements.
    fn detector_assignment(&self, _signal: usize) -> Option<Vec<MovementSet>> {
        None
    }

    /// Signal `signal`'s own program as the clock its observation's program-clock lanes
    /// follow, on the episode's time base (0 at its start), where it has them (SUMO with
    /// `SumoConfig::program_clock`): what a site configuration written from the simulator
    /// gives the controller. None by default.
    fn program_clock(&self, _signal: usize) -> Option<ProgramClock> {
        None
    }

    /// Simulated time since reset.
    fn now(&self) -> Millis;

    /// Applies one requested phase per signal and simulates one decision interval.
    fn step(&mut self, actions: &[u8]) -> Result<StepOutcome, EnvError>;

    /// The first half of [`Env::step`]: applies the requests and starts the interval. A
    /// backend whose simulator runs in another process only sends the interval and returns
    /// [`StepStarted::Pending`], so the caller can act on other environments meanwhile;
    /// [`Env::step_end`] then collects the outcome. Until it has, call nothing else on this
    /// environment but `step_end` or `reset` (which abandons the interval): observations
    /// would still show the state before the interval. The default steps at once.
    /// A failure leaves the environment needing `reset`, as a failed `step` does.
    fn step_begin(&mut self, actions: &[u8]) -> Result<StepStarted, EnvError> {
        self.step(actions).map(StepStarted::Done)
    }

    /// The second half of [`Env::step`]: waits for the interval [`Env::step_begin`]
    /// started (when it returned [`StepStarted::Pending`]) and returns its outcome.
    fn step_end(&mut self) -> Result<StepOutcome, EnvError> {
        Err(EnvError::Backend(
            "step_end without a pending step_begin".into(),
        ))
    }

    /// With a step in flight: whether its outcome has begun to arrive, so [`Env::step_end`]
    /// would not wait for the simulator; waits up to `wait` for it (zero: just looks).
    /// True when nothing is in flight, or when the simulator failed (`step_end` says how).
    /// Lets one thread serve whichever of several environments is ready first.
    fn step_ready(&mut self, _wait: std::time::Duration) -> bool {
        true
    }

    /// Metrics of the episode so far.
    fn metrics(&self) -> EpisodeMetrics;
}
