//! The controller loop.
//!
//! Every decision interval, for each signal: read its detectors ([`DetectorSource`]),
//! build the observation with [`ObsLayout`] from the detector readings and the
//! controller's *own* [`Sequencer`] (the authority on what the signal shows), infer, let
//! the [`Watchdog`] decide whether the policy may act, hand the request (the policy's or
//! the fallback's) to the sequencer, then play the interval: every stretch of constant
//! display goes to the [`SignalSink`] (in real time with `realtime`, else as fast as the
//! source allows), the field advances, and each finished transition goes to the log.

mod fallback;
mod field;
mod replay;
mod rollback;
#[cfg(feature = "sim")]
mod sim_field;
mod watchdog;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use greenwave_core::control::{max_out_cycle, phases_with_calls, MaxRed};
use greenwave_core::sequencer::{Segment, SequencerError};
use greenwave_core::transition::MAX_OBS_DIM;
use greenwave_core::{
    ActionSource, LaneReading, Millis, ObsError, ObsLayout, PhaseId, PhasePlan, ProgramClock,
    Sequencer, Transition,
};
use serde::Serialize;

use crate::inference::{Explorer, PolicyBackend};
use crate::log::{LogError, LogWriter};

pub use fallback::{CycleStage, Fallback, FallbackKind, FixedCycle, EQUAL_SPLIT_GREEN};
pub use field::{
    DetectorError, DetectorSource, Field, NullSink, Readback, SignalSink, SinkError, Split,
};
pub use replay::{ReplayRecorder, ReplaySource};
pub use rollback::{KpiBatch, KpiTest, RollbackConfig, RollbackConfigError, RollbackEvent};
#[cfg(feature = "sim")]
pub use sim_field::{env_signal_specs, SimField};
pub use watchdog::{Fault, FaultKind, Mode, Watchdog, WatchdogCounts};

/// One signal the controller runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalSpec {
    /// Its name.
    pub id: String,
    /// Its phase plan (what the supervisor enforces, and what bundles are checked against).
    pub plan: PhasePlan,
    /// Its observation layout (the policy's).
    pub layout: ObsLayout,
    /// The phase green at start.
    pub initial_phase: PhaseId,
    /// The junction's timing program, when the controller supplies the observation's
    /// program-clock lanes (the last `P` of the layout; greenwave-core's observation
    /// docs) itself, at its own time (ms since it started); the field supplies the
    /// others (a simulated SUMO field with its clock too: `env_signal_specs`). `None`: the
    /// field supplies every lane.
    pub program_clock: Option<ProgramClock>,
}

impl SignalSpec {
    /// The sequencer of this spec as the controller's signal `i`, once the spec is checked:
    /// its layout's phases are its plan's, a program clock fits the layout and the plan,
    /// and the observation fits a transition record.
    fn sequencer(&self, i: usize) -> Result<Sequencer, ControllerError> {
        let bad = |problem: String| ControllerError::Signal {
            signal: i,
            id: self.id.clone(),
            problem,
        };
        if self.layout.n_phases as usize != self.plan.n_phases() {
            return Err(bad(format!(
                "layout has {} phases, plan has {}",
                self.layout.n_phases,
                self.plan.n_phases()
            )));
        }
        if let Some(clock) = &self.program_clock {
            if self.field_lanes() == 0 {
                return Err(bad(format!(
                    "a layout of {} lanes leaves no detector lane beside the program \
                     clock's {}",
                    self.layout.n_lanes,
                    self.plan.n_phases()
                )));
            }
            clock
                .check_plan(&self.plan)
                .map_err(|e| bad(format!("program clock: {e}")))?;
        }
        if self.layout.dim() > MAX_OBS_DIM {
            return Err(bad(format!(
                "observation of {} floats exceeds the transition record's {MAX_OBS_DIM}",
                self.layout.dim()
            )));
        }
        Sequencer::new(self.plan.clone(), self.initial_phase)
            .map_err(|source| ControllerError::Sequencer { signal: i, source })
    }

    /// Lanes the field's detectors supply: the layout's, less the program clock's.
    pub fn field_lanes(&self) -> usize {
        self.layout.detector_lanes(self.program_clock.is_some())
    }
}

/// Controller settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// Time between decisions.
    pub decision_interval: Millis,
    /// Longest acceptable inference (wall clock); a slower one is a fault.
    pub inference_budget: Duration,
    /// Fault-free time (controller time) before a signal returns from the fallback.
    pub healthy_period: Millis,
    /// Pace decisions and displays by the wall clock instead of running as fast as the
    /// source allows.
    pub realtime: bool,
    /// With `realtime`, for a site whose programs run on Unix time (so that cabinets stay in
    /// step): the Unix time (ms) put at the controller's time 0, its program clocks having
    /// been put on the controller's time from it. They then read the system clock less
    /// this origin at each decision, not the controller's time, which falls behind the wall
    /// clock by the slip (`ControllerStats::realtime_slip_ms`) and by the step's own work,
    /// and which a clock step (an NTP correction after start-up) does not move.
    pub program_clock_unix_origin_ms: Option<u64>,
    /// The automatic rollback of a switched-in policy on a live KPI regression.
    pub rollback: RollbackConfig,
    /// Longest a phase with a detector call is kept from green while the policy acts
    /// (greenwave-core's max-red rule, as in training and `greenwave eval`); `None`: each
    /// signal's max-out cycle (`max_out_cycle`, the default).
    pub max_red: Option<Millis>,
}

impl ControllerConfig {
    /// Defaults for `decision_interval`: 20 ms inference budget, 60 s healthy period,
    /// not real time.
    pub fn new(decision_interval: Millis) -> Self {
        ControllerConfig {
            decision_interval,
            inference_budget: Duration::from_millis(20),
            healthy_period: Millis::from_secs(60),
            realtime: false,
            program_clock_unix_origin_ms: None,
            rollback: RollbackConfig::default(),
            max_red: None,
        }
    }

    /// As [`new`](Self::new), for a run on simulated time (an evaluation, a test): no
    /// inference budget. How long an inference takes on the host's wall clock says nothing
    /// about a cabinet's deadline there, and a host busy with other work must not send the
    /// policy to its fallback and so change the run's figures.
    pub fn for_simulated_time(decision_interval: Millis) -> Self {
        ControllerConfig {
            inference_budget: Duration::MAX,
            ..Self::new(decision_interval)
        }
    }
}

/// A loaded policy, ready to act.
pub struct Policy {
    /// The backend running it.
    pub backend: Box<dyn PolicyBackend>,
    /// Its version (the manifest's `policy_version`), logged with every decision.
    pub version: u32,
    /// How phases are chosen from its logits.
    pub explorer: Explorer,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("backend", &self.backend.name())
            .field("version", &self.version)
            .field("explorer", &self.explorer)
            .finish()
    }
}

/// Why the controller could not be built or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// No signals to run.
    #[error("no signals to control")]
    NoSignals,
    /// More signals than a transition record can name (its `signal` is a `u16`).
    #[error("{0} signals: one controller runs at most 65 536 (a transition names its signal in 16 bits)")]
    TooManySignals(usize),
    /// The rollback watch's settings cannot work.
    #[error(transparent)]
    Rollback(#[from] RollbackConfigError),
    /// A signal's layout does not fit its plan or the transition record.
    #[error("signal {signal} ({id}): {problem}")]
    Signal {
        /// The signal.
        signal: usize,
        /// Its name.
        id: String,
        /// What is wrong.
        problem: String,
    },
    /// A sequencer could not be built.
    #[error("signal {signal}: {source}")]
    Sequencer {
        /// The signal.
        signal: usize,
        /// Why.
        source: SequencerError,
    },
    /// The field failed as a whole.
    #[error("{0}")]
    Field(DetectorError),
    /// A signal output failed.
    #[error("{0}")]
    Sink(SinkError),
    /// The field shows something other than the supervisor decided.
    #[error("signal {signal}: the field shows {got}, the supervisor decided {expected}: stopping")]
    Readback {
        /// The signal.
        signal: usize,
        /// The supervisor's state.
        expected: String,
        /// The field's.
        got: String,
    },
}

/// Counters of a run (all signals together).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ControllerStats {
    /// Decisions (one per signal per interval).
    pub decisions: u64,
    /// Decisions taken by the policy.
    pub policy_decisions: u64,
    /// Decisions taken by the fallback.
    pub fallback_decisions: u64,
    /// Policy decisions chosen by the exploratory branch.
    pub explored_decisions: u64,
    /// Policy requests the supervisor did not serve as asked (min green, clearance,
    /// max-green forcing, the max-red rule).
    pub supervisor_overrides: u64,
    /// Of those, the policy decisions the max-red rule replaced: a phase with a call had
    /// waited `max_red` (see [`ControllerConfig::max_red`]).
    pub max_red_overrides: u64,
    /// Watchdog switches and faults.
    pub watchdog: WatchdogCounts,
    /// Transitions appended to the log.
    pub transitions_logged: u64,
    /// Transitions not logged (no valid observation before or after, or the source
    /// ended).
    pub transitions_dropped: u64,
    /// Transitions the log reports committed (durable).
    pub transitions_committed: u64,
    /// Log write failures: appends that failed (each transition dropped; the next one is
    /// tried, unless the writer is unusable and logging stopped), and a failed final commit.
    /// Control goes on either way.
    pub log_errors: u64,
    /// Inference latency percentiles (µs), over every inference of the run.
    pub inference_p50_us: f64,
    /// 99th percentile.
    pub inference_p99_us: f64,
    /// Slowest.
    pub inference_max_us: f64,
    /// Verdicts of the automatic rollback watch on switched-in policies (kept or rolled
    /// back, with the KPI evidence).
    pub rollback_events: Vec<RollbackEvent>,
    /// With `realtime`: how far (ms) the display schedule moved back because a stretch was
    /// due before it could be shown (the decision step, a store poll or a model load ran
    /// past its start): the whole schedule moves with it, so no stretch is shown short.
    pub realtime_slip_ms: u64,
}

/// A snapshot for status lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// Controller time (ms since start).
    pub now_ms: u64,
    /// Signals on the fallback now.
    pub on_fallback: usize,
    /// Signals in all.
    pub signals: usize,
    /// Switches to fallback so far.
    pub fallback_switches: u64,
    /// Transitions logged so far.
    pub transitions_logged: u64,
}

/// The controller: sequencers, policy, watchdog, fallback and log.
pub struct Controller {
    cfg: ControllerConfig,
    signals: Vec<SignalSpec>,
    seqs: Vec<Sequencer>,
    /// Per signal: the max-red rule's record of when each phase was last green.
    max_red: Vec<MaxRed>,
    policy: Result<Policy, String>,
    previous: Option<Policy>,
    watch: rollback::RegressionWatch,
    fallback: Fallback,
    watchdog: Watchdog,
    log: Option<LogWriter>,
    /// The log failed and was closed: later transitions are counted as dropped.
    log_lost: bool,
    /// The last append failed, the writer still usable: the next one is tried (the error
    /// is reported once per failing stretch, and again when appends succeed).
    log_failing: bool,
    pending: Vec<Option<Transition>>,
    lanes: Vec<Vec<LaneReading>>,
    obs: Vec<Vec<f32>>,
    logits: Vec<f32>,
    latency: LatencyHistogram,
    stats: ControllerStats,
    segments: Vec<(u64, usize, Segment)>,
    ended: bool,
    /// [`Controller::request_stop`] was called: `run_with` ends after the interval.
    stop_requested: bool,
    started: Instant,
    /// Slip not yet counted in whole milliseconds in `stats.realtime_slip_ms`.
    slip_uncounted: Duration,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("cfg", &self.cfg)
            .field("signals", &self.signals.len())
            .field("policy", &self.policy)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn fault(kind: FaultKind, detail: impl Into<String>) -> Fault {
    Fault {
        kind,
        detail: detail.into(),
    }
}

impl Controller {
    /// A controller for `signals`. `policy` is the loaded policy, or why none could be
    /// loaded (every signal then runs its fallback for good). `log` receives every
    /// transition.
    pub fn new(
        signals: Vec<SignalSpec>,
        policy: Result<Policy, String>,
        fallback: Fallback,
        cfg: ControllerConfig,
        log: Option<LogWriter>,
    ) -> Result<Self, ControllerError> {
        if signals.is_empty() {
            return Err(ControllerError::NoSignals);
        }
        if signals.len() > usize::from(u16::MAX) + 1 {
            return Err(ControllerError::TooManySignals(signals.len()));
        }
        cfg.rollback.check()?;
        let seqs = signals
            .iter()
            .enumerate()
            .map(|(i, s)| s.sequencer(i))
            .collect::<Result<Vec<_>, _>>()?;
        if let Err(why) = &policy {
            tracing::error!(reason = %why, "no policy loaded: every signal runs its fallback");
        }
        let n = signals.len();
        let max_phases = signals.iter().map(|s| s.plan.n_phases()).max().unwrap_or(0);
        Ok(Controller {
            max_red: signals
                .iter()
                .map(|s| MaxRed::new(cfg.max_red.unwrap_or(max_out_cycle(&s.plan)), Millis(0)))
                .collect(),
            watchdog: Watchdog::new(n, cfg.healthy_period.0 as u64),
            pending: vec![None; n],
            lanes: signals
                .iter()
                .map(|s| vec![LaneReading::default(); s.layout.n_lanes as usize])
                .collect(),
            obs: signals.iter().map(|s| vec![0.0; s.layout.dim()]).collect(),
            logits: vec![0.0; max_phases],
            latency: LatencyHistogram::default(),
            stats: ControllerStats::default(),
            segments: Vec::new(),
            ended: false,
            stop_requested: false,
            started: Instant::now(),
            slip_uncounted: Duration::ZERO,
            watch: rollback::RegressionWatch::new(cfg.rollback.clone()),
            previous: None,
            cfg,
            signals,
            seqs,
            policy,
            fallback,
            log,
            log_lost: false,
            log_failing: false,
        })
    }

    /// The signals.
    pub fn signals(&self) -> &[SignalSpec] {
        &self.signals
    }

    /// The supervisor (sequencer) of `signal`.
    pub fn sequencer(&self, signal: usize) -> &Sequencer {
        &self.seqs[signal]
    }

    /// Who acts for `signal` now.
    pub fn mode(&self, signal: usize) -> Mode {
        self.watchdog.mode(signal)
    }

    /// Controller time: milliseconds since start.
    pub fn now_ms(&self) -> u64 {
        self.seqs[0].now_ms()
    }

    /// Whether the field has run out of data.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The log writer, if logging.
    pub fn log(&self) -> Option<&LogWriter> {
        self.log.as_ref()
    }

    /// A status snapshot.
    pub fn status(&self) -> Status {
        Status {
            now_ms: self.now_ms(),
            on_fallback: (0..self.signals.len())
                .filter(|&i| self.mode(i) == Mode::Fallback)
                .count(),
            signals: self.signals.len(),
            fallback_switches: self.watchdog.counts().fallback_switches,
            transitions_logged: self.stats.transitions_logged,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ControllerStats {
        let mut s = self.stats.clone();
        s.watchdog = self.watchdog.counts().clone();
        if let Some(log) = &self.log {
            s.transitions_committed = log.counts().committed;
        }
        s.inference_p50_us = self.latency.percentile_us(0.5);
        s.inference_p99_us = self.latency.percentile_us(0.99);
        s.inference_max_us = self.latency.max_us;
        s
    }

    /// Switches to `policy` now (the caller has verified it, e.g. a gated fine-tune),
    /// keeping the running one as the previous version. With the rollback watch enabled,
    /// the new version's live KPIs are compared with the previous one's over the
    /// configured window and it is rolled back by itself on a significant regression.
    /// Returns whether the switch is watched (it is not when disabled, with no policy
    /// running before it, or before [`switch_watchable`](Self::switch_watchable)).
    pub fn switch_policy(&mut self, policy: Policy) -> bool {
        self.switch(policy, true)
    }

    /// Switches to `policy` now without watching it (an operator's rollback to a version
    /// already judged): any watch in progress ends without a verdict, and the KPIs so far
    /// are forgotten, as after a switch out of the fallback.
    pub fn switch_policy_unwatched(&mut self, policy: Policy) {
        self.switch(policy, false);
    }

    fn switch(&mut self, policy: Policy, watch: bool) -> bool {
        let new_version = policy.version;
        let old = std::mem::replace(&mut self.policy, Ok(policy));
        // Signals waiting on their fallback for a model take this one at once.
        self.watchdog.model_available(self.now_ms());
        let old_version = old.as_ref().map_or(0, |p| p.version);
        self.previous = old.ok();
        tracing::info!(
            from = old_version,
            to = new_version,
            "policy switched; previous version kept for rollback"
        );
        match self.previous {
            Some(_) if watch => self.watch.start(self.now_ms(), new_version, old_version),
            // Out of the fallback: nothing to compare with, and the KPIs so far were the
            // fallback's, not this policy's.
            _ => {
                self.watch.forget(self.now_ms());
                false
            }
        }
    }

    /// Whether a [`switch_policy`](Self::switch_policy) now would be watched: the watch
    /// is enabled, a policy runs (the comparison's baseline), no watch is in progress, and
    /// a whole rollback window of KPI batches of the running policy has been recorded
    /// (since the start, the last switch not watched, or the last rollback), so the
    /// comparable period before the switch is as long as the one after it.
    pub fn switch_watchable(&self) -> bool {
        self.policy.is_ok() && self.watch.ready()
    }

    /// The watch's verdicts so far, oldest first (kept or rolled back, with the evidence).
    pub fn rollback_events(&self) -> &[RollbackEvent] {
        &self.stats.rollback_events
    }

    /// Ends a finished KPI batch; on a watched version's verdict, logs it and rolls back
    /// if it regressed.
    fn watch_kpis(&mut self) {
        let Some(event) = self.watch.tick(self.now_ms()) else {
            return;
        };
        if event.rolled_back {
            if let Some(prev) = self.previous.take() {
                tracing::warn!(
                    from = event.from_version,
                    to = event.to_version,
                    evidence = %serde_json::to_string(&event.evidence).unwrap_or_default(),
                    "live KPIs regressed after the switch: rolled back"
                );
                self.policy = Ok(prev);
                // The batches since the switch were the rolled-back version's: the next
                // switch is compared with a whole window of this one.
                self.watch.forget(self.now_ms());
            }
        } else {
            tracing::info!(
                version = event.from_version,
                evidence = %serde_json::to_string(&event.evidence).unwrap_or_default(),
                "switched-in policy kept: no significant KPI regression"
            );
        }
        self.stats.rollback_events.push(event);
    }

    /// The time the program clocks read now (once a step, the same for every signal, as in
    /// training): the system clock's since the origin where they are on Unix time
    /// ([`ControllerConfig::program_clock_unix_origin_ms`]; negative where a clock step
    /// put it before the origin: a program repeats, so it still reads the program's
    /// phase at that Unix time), else the controller's.
    fn program_clock_ms(&self) -> i128 {
        let Some(origin) = self
            .cfg
            .program_clock_unix_origin_ms
            .filter(|_| self.cfg.realtime)
        else {
            return i128::from(self.now_ms());
        };
        // Exact in i128 for any u64 origin; a clock before 1970 is before it by as much.
        let unix_ms = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => since.as_millis() as i128,
            Err(before) => -(before.duration().as_millis() as i128),
        };
        unix_ms - i128::from(origin)
    }

    /// Reads signal `i`'s detectors and builds its observation into `self.obs[i]`, its
    /// program clock (if any) at `program_ms`.
    fn observe(
        &mut self,
        i: usize,
        program_ms: i128,
        field: &mut (impl Field + ?Sized),
    ) -> Result<(), Fault> {
        let spec = &self.signals[i];
        let (detected, clock) = self.lanes[i].split_at_mut(spec.field_lanes());
        if let Some(program) = &spec.program_clock {
            // The program repeats every cycle (at least 1 ms): the same phase, in 0..cycle.
            let t_ms = program_ms.rem_euclid(i128::from(program.cycle().0.max(1)));
            program.write_readings(t_ms as u64, clock);
        }
        field.read(i, detected).map_err(|e| match e {
            DetectorError::Source(_) => fault(FaultKind::DetectorSilent, e.to_string()),
            DetectorError::NoReport { .. } => fault(FaultKind::DetectorSilent, e.to_string()),
            DetectorError::Faulty { .. } => fault(FaultKind::ImpossibleReading, e.to_string()),
        })?;
        let spec = &self.signals[i];
        spec.layout
            .write(&self.lanes[i], &self.seqs[i], &mut self.obs[i])
            .map_err(|e| match e {
                ObsError::ImpossibleReading { .. } => {
                    fault(FaultKind::ImpossibleReading, e.to_string())
                }
                other => fault(FaultKind::DetectorSilent, other.to_string()),
            })
    }

    /// Notes signal `i`'s green at this decision (ms since start `now`) and returns the
    /// phase the max-red rule makes it serve, if any: a phase whose movements' detectors
    /// call and that has waited `max_red`. A field without per-movement detectors has no
    /// calls, so nothing is forced there.
    fn max_red_phase(
        &mut self,
        i: usize,
        now: u64,
        field: &(impl Field + ?Sized),
    ) -> Option<PhaseId> {
        // The rule compares times modulo 2³² ms, so the uptime may wrap.
        let now = Millis(now as u32);
        let seq = &self.seqs[i];
        self.max_red[i].note(seq, now);
        let detectors = fallback::usable_readings(i, seq.plan(), field.movement_detectors(i))?;
        let calls = phases_with_calls(seq.plan(), &detectors);
        self.max_red[i].starved(seq, seq.action_mask(), calls, now)
    }

    /// Runs the policy on `self.obs[i]`; returns the chosen phase and its log-prob.
    fn infer(&mut self, i: usize) -> Result<(u8, f32, bool), Fault> {
        let n = self.signals[i].plan.n_phases();
        let mask = self.seqs[i].action_mask();
        let policy = match &mut self.policy {
            Ok(p) => p,
            Err(why) => return Err(fault(FaultKind::ModelUnavailable, why.clone())),
        };
        let logits = &mut self.logits[..n];
        let t0 = Instant::now();
        let result = policy.backend.infer_signal(i, &self.obs[i], logits);
        let took = t0.elapsed();
        self.latency.record(took);
        let value = result.map_err(|e| fault(FaultKind::InferenceError, e.to_string()))?;
        if !value.is_finite() || logits.iter().any(|z| !z.is_finite()) {
            return Err(fault(
                FaultKind::NonFiniteOutput,
                format!("logits {logits:?}, value {value}"),
            ));
        }
        if took > self.cfg.inference_budget {
            return Err(fault(
                FaultKind::SlowInference,
                format!("took {took:?}, budget {:?}", self.cfg.inference_budget),
            ));
        }
        let c = policy.explorer.choose(logits, mask).ok_or_else(|| {
            fault(
                FaultKind::NonFiniteOutput,
                "no allowed phase has a usable logit",
            )
        })?;
        Ok((c.phase, c.log_prob, c.explored))
    }

    fn policy_version(&self) -> u32 {
        self.policy.as_ref().map_or(0, |p| p.version)
    }

    fn append(&mut self, t: Transition) {
        let Some(log) = &mut self.log else {
            if self.log_lost {
                self.stats.transitions_dropped += 1;
            }
            return;
        };
        match log.append(&t) {
            Ok(_) => {
                self.stats.transitions_logged += 1;
                if std::mem::take(&mut self.log_failing) {
                    tracing::warn!("transition log: appending again");
                }
            }
            Err(e) if log.is_poisoned() => {
                self.stats.transitions_dropped += 1;
                self.lose_log(&e, "transition log failed");
            }
            Err(e) => {
                // A failed rotation (a full disk, say) or a record that cannot be encoded:
                // this transition is dropped, and the next one tried.
                self.stats.transitions_dropped += 1;
                self.stats.log_errors += 1;
                if !std::mem::replace(&mut self.log_failing, true) {
                    tracing::error!(error = %e, "transition log: a transition could not be \
                        appended and is dropped; the next ones are tried");
                }
            }
        }
    }

    /// A failed log: counted, its committed records kept in the stats, closed; control
    /// goes on, and every later transition counts as dropped.
    fn lose_log(&mut self, e: &LogError, what: &str) {
        self.stats.log_errors += 1;
        if let Some(log) = self.log.take() {
            self.stats.transitions_committed = log.counts().committed;
        }
        self.log_lost = true;
        tracing::error!(error = %e, "{what}: logging stops, control goes on");
    }

    /// Completes signal `i`'s pending transition with the observation just built (or
    /// drops it if there is none).
    fn complete_pending(&mut self, i: usize, obs_ok: bool, done: bool) {
        let Some(mut t) = self.pending[i].take() else {
            return;
        };
        match heapless::Vec::from_slice(&self.obs[i]) {
            Ok(next) if obs_ok => {
                t.next_obs = next;
                t.done = done;
                self.append(t);
            }
            _ => self.stats.transitions_dropped += 1,
        }
    }

    /// One decision interval. Returns `false` once the field has no more data.
    pub fn step(&mut self, field: &mut (impl Field + ?Sized)) -> Result<bool, ControllerError> {
        if self.ended {
            return Ok(false);
        }
        let now = self.now_ms();
        let program_ms = self.program_clock_ms();
        for i in 0..self.signals.len() {
            self.decide_signal(i, now, program_ms, field)?;
        }
        let observed: Vec<&[LaneReading]> = self
            .lanes
            .iter()
            .zip(&self.pending)
            .filter(|(_, p)| p.is_some())
            .map(|(l, _)| l.as_slice())
            .collect();
        self.watch.record(&observed);
        let decided = self.pending.iter().flatten();
        let by_policy = decided
            .clone()
            .filter(|t| t.source != ActionSource::Fallback)
            .count();
        self.watch
            .record_decisions(decided.count() as u64, by_policy as u64);
        self.play_interval(field)?;
        self.finish_interval(field)
    }

    /// Signal `i`'s decision: observe, infer, let the watchdog choose policy or fallback,
    /// request the phase, and keep the decision as the signal's pending transition.
    fn decide_signal(
        &mut self,
        i: usize,
        now: u64,
        program_ms: i128,
        field: &mut (impl Field + ?Sized),
    ) -> Result<(), ControllerError> {
        let observed = self.observe(i, program_ms, field);
        self.complete_pending(i, observed.is_ok(), false);
        let decision = match &observed {
            Ok(()) => self.infer(i),
            Err(f) => Err(f.clone()),
        };
        // An unloadable model is reported once; the watchdog keeps the signal on its
        // fallback for good after that.
        let report = match &decision {
            Err(f)
                if f.kind == FaultKind::ModelUnavailable
                    && self.watchdog.reason(i) == Some(FaultKind::ModelUnavailable) =>
            {
                None
            }
            Err(f) => Some(f),
            Ok(_) => None,
        };
        let mode = self.watchdog.update(i, now, report);
        let starved = self.max_red_phase(i, now, &*field);
        let choice = self.choose(i, mode, decision, starved, observed.is_ok(), &*field);
        self.stats.decisions += 1;
        let response = self.seqs[i].request(choice.asked);
        field
            .request(i, choice.asked, &response)
            .map_err(ControllerError::Sink)?;
        let source = match (choice.source, response.overridden) {
            (ActionSource::Policy, Some(_)) => {
                self.stats.supervisor_overrides += 1;
                ActionSource::Supervisor
            }
            (s, _) => s,
        };
        if observed.is_err() {
            // A decision without an observation cannot become a transition.
            self.stats.transitions_dropped += 1;
            return Ok(());
        }
        self.pending[i] = Some(Transition {
            timestamp_ms: now,
            signal: i as u16,
            obs: heapless::Vec::from_slice(&self.obs[i]).unwrap_or_default(),
            requested: choice.requested,
            action: response.next_green.0,
            log_prob: choice.log_prob,
            reward: 0.0,
            next_obs: heapless::Vec::new(),
            done: false,
            policy_version: self.policy_version(),
            source,
            reward_kind: None,
        });
        Ok(())
    }

    /// What signal `i` asks of its sequencer: the policy's decision in policy mode (the
    /// max-red rule's `starved` phase over it, recorded as a supervisor override), else
    /// the fallback's.
    fn choose(
        &mut self,
        i: usize,
        mode: Mode,
        decision: Result<(u8, f32, bool), Fault>,
        starved: Option<PhaseId>,
        observed: bool,
        field: &(impl Field + ?Sized),
    ) -> Choice {
        match (mode, decision) {
            (Mode::Policy, Ok((phase, log_prob, explored))) => {
                self.stats.policy_decisions += 1;
                self.stats.explored_decisions += explored as u64;
                match starved {
                    Some(q) if q.0 != phase => {
                        self.stats.max_red_overrides += 1;
                        self.stats.supervisor_overrides += 1;
                        Choice {
                            requested: phase,
                            asked: q.0,
                            log_prob,
                            source: ActionSource::Supervisor,
                        }
                    }
                    _ => Choice::of(phase, log_prob, ActionSource::Policy),
                }
            }
            _ => {
                self.stats.fallback_decisions += 1;
                let phase = self.fallback.decide(i, &self.seqs[i], observed, field);
                Choice::of(phase, 0.0, ActionSource::Fallback)
            }
        }
    }

    /// After the interval was played: the field moves on and says each signal's reward;
    /// readback, KPI watch and the log's commit follow. `false` once the field has ended.
    fn finish_interval(
        &mut self,
        field: &mut (impl Field + ?Sized),
    ) -> Result<bool, ControllerError> {
        let rewards = field
            .advance(self.cfg.decision_interval)
            .map_err(ControllerError::Field)?;
        let Some(rewards) = rewards else {
            self.ended = true;
            for p in &mut self.pending {
                if p.take().is_some() {
                    self.stats.transitions_dropped += 1;
                }
            }
            return Ok(false);
        };
        // A reward for every signal, or the field is broken: a missing one logged as 0
        // would look like a real reward to fine-tuning and its gate.
        if rewards.len() != self.pending.len() {
            return Err(ControllerError::Field(DetectorError::Source(format!(
                "the field gave {} rewards for {} signals",
                rewards.len(),
                self.pending.len()
            ))));
        }
        for (i, (p, &reward)) in self.pending.iter_mut().zip(&rewards).enumerate() {
            // A non-finite reward is no experience: the record is not logged (fine-tuning
            // would skip it, and a log holds only records a controller can write).
            if !reward.is_finite() {
                if p.take().is_some() {
                    self.stats.transitions_dropped += 1;
                    tracing::warn!(signal = i, reward, "the field gave a non-finite reward: this interval's transition is not logged");
                }
                continue;
            }
            if let Some(t) = p {
                t.reward = reward;
                t.reward_kind = field.reward_kind();
            }
        }
        self.check_readback(field)?;
        self.watch_kpis();
        if let Some(log) = &mut self.log {
            if let Err(e) = log.commit_if_due() {
                self.lose_log(&e, "transition log commit failed");
            }
        }
        Ok(true)
    }

    /// Advances every sequencer through the interval and shows each stretch of display.
    fn play_interval(&mut self, field: &mut (impl Field + ?Sized)) -> Result<(), ControllerError> {
        let dt = self.cfg.decision_interval;
        let start_ms = self.now_ms();
        let mut segments = std::mem::take(&mut self.segments);
        segments.clear();
        for (i, seq) in self.seqs.iter_mut().enumerate() {
            let mut at = start_ms;
            seq.advance(dt, |s| {
                segments.push((at, i, *s));
                at += s.duration.0 as u64;
            });
            // Max green forced a change during the interval: the served phase is the
            // supervisor's, not the request's.
            if let Some(t) = &mut self.pending[i] {
                if t.relabel_max_green(seq) {
                    self.stats.supervisor_overrides += 1;
                }
            }
        }
        segments.sort_by_key(|(at, i, _)| (*at, *i));
        for (at, i, s) in &segments {
            if self.cfg.realtime {
                self.wait_until(*at);
            }
            field.show(*i, *at, s).map_err(ControllerError::Sink)?;
        }
        if self.cfg.realtime {
            self.wait_until(start_ms + dt.0 as u64);
        }
        self.segments = segments;
        Ok(())
    }

    /// Waits until controller time `at_ms` is due on the wall clock. Returning past due
    /// (the work between two stretches ran over, or the sleep overslept, as it does by up
    /// to milliseconds on a loaded machine), the schedule moves back by the lateness: a
    /// stretch shown late then still lasts its whole length (a yellow that began late is
    /// not cut by the next stretch's earlier due time), and the slip is counted.
    fn wait_until(&mut self, at_ms: u64) {
        let due = self.started + Duration::from_millis(at_ms);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let late = Instant::now().saturating_duration_since(due);
        self.started += late;
        self.slip_uncounted += late;
        let whole_ms = self.slip_uncounted.as_millis() as u64;
        self.stats.realtime_slip_ms += whole_ms;
        self.slip_uncounted -= Duration::from_millis(whole_ms);
    }

    fn check_readback(&self, field: &(impl Field + ?Sized)) -> Result<(), ControllerError> {
        for (i, seq) in self.seqs.iter().enumerate() {
            let Some(rb) = field.readback(i) else {
                continue;
            };
            let ours = Readback {
                interval: seq.interval(),
                in_interval: seq.in_interval(),
                frame: seq.frame(),
            };
            if rb != ours {
                return Err(ControllerError::Readback {
                    signal: i,
                    expected: format!("{ours:?}"),
                    got: format!("{rb:?}"),
                });
            }
        }
        Ok(())
    }

    /// Runs decisions until `seconds` of controller time have passed (or the field ends),
    /// calling `on_status` after each; then [`finish`](Self::finish)es.
    pub fn run(
        &mut self,
        field: &mut (impl Field + ?Sized),
        seconds: f64,
        mut on_status: impl FnMut(&Status),
    ) -> Result<ControllerStats, ControllerError> {
        self.run_with(field, seconds, |c| on_status(&c.status()))
    }

    /// As [`run`](Self::run), handing the controller itself to `between` after each
    /// decision interval (to switch policies while it runs, for one).
    pub fn run_with(
        &mut self,
        field: &mut (impl Field + ?Sized),
        seconds: f64,
        mut between: impl FnMut(&mut Self),
    ) -> Result<ControllerStats, ControllerError> {
        self.started = Instant::now();
        let end_ms = (seconds * 1000.0).max(0.0) as u64;
        while !self.stop_requested
            && self.now_ms() < end_ms
            && !field.exhausted()
            && self.step(field)?
        {
            between(self);
        }
        self.finish(field)
    }

    /// Asks [`run_with`](Self::run_with) to end before its next decision, as if its
    /// `seconds` were up (from `between`, on an operator's stop signal say): the interval
    /// under way has been played to its end (a change may still be in its yellow or
    /// all-red there, as at any end of a run), and [`finish`](Self::finish) then completes
    /// the transitions and commits the log.
    pub fn request_stop(&mut self) {
        self.stop_requested = true;
    }

    /// Whether [`request_stop`](Self::request_stop) was called.
    pub fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// Completes the last transitions (their next observation read now, marked `done`),
    /// commits the log and lets the field finish.
    pub fn finish(
        &mut self,
        field: &mut (impl Field + ?Sized),
    ) -> Result<ControllerStats, ControllerError> {
        let program_ms = self.program_clock_ms();
        for i in 0..self.signals.len() {
            if self.ended {
                break;
            }
            let ok = self.observe(i, program_ms, field).is_ok();
            self.complete_pending(i, ok, true);
        }
        if let Some(log) = &mut self.log {
            if let Err(e) = log.commit() {
                self.stats.log_errors += 1;
                tracing::error!(error = %e, "transition log: final commit failed");
            }
        }
        field.finish().map_err(ControllerError::Field)?;
        Ok(self.stats())
    }

    /// Closes the log (synced), returning the writer's final counts.
    pub fn close_log(&mut self) -> Result<Option<crate::log::Commit>, LogError> {
        self.log.take().map(LogWriter::close).transpose()
    }

    /// The policy, or why there is none.
    pub fn policy(&self) -> Result<&Policy, &str> {
        self.policy.as_ref().map_err(String::as_str)
    }

    /// The fallback.
    pub fn fallback(&self) -> &Fallback {
        &self.fallback
    }

    /// Per-kind fault counts as plain strings (for reports).
    pub fn fault_counts(&self) -> BTreeMap<String, u64> {
        self.watchdog
            .counts()
            .faults
            .iter()
            .map(|(k, v)| (k.name().to_string(), *v))
            .collect()
    }
}

/// One decision's request: the phase asked of the sequencer, and the phase and log-prob
/// the transition records. They differ when the max-red rule forces a phase over the
/// policy's choice: the record keeps the policy's request, whose log-prob it carries, and
/// says the supervisor overrode it.
struct Choice {
    requested: u8,
    asked: u8,
    log_prob: f32,
    source: ActionSource,
}

impl Choice {
    fn of(phase: u8, log_prob: f32, source: ActionSource) -> Self {
        Choice {
            requested: phase,
            asked: phase,
            log_prob,
            source,
        }
    }
}

/// Inference latencies in a fixed histogram (1 µs buckets below 1 ms, 100 µs buckets up to
/// 100 ms, one overflow bucket): bounded memory however long a controller runs.
#[derive(Clone, Debug)]
struct LatencyHistogram {
    fine: Vec<u64>,
    coarse: Vec<u64>,
    over: u64,
    n: u64,
    max_us: f64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            fine: vec![0; 1000],
            coarse: vec![0; 1000],
            over: 0,
            n: 0,
            max_us: 0.0,
        }
    }
}

impl LatencyHistogram {
    fn record(&mut self, d: Duration) {
        let us = d.as_secs_f64() * 1e6;
        self.n += 1;
        self.max_us = self.max_us.max(us);
        let u = us as u64;
        if u < 1000 {
            self.fine[u as usize] += 1;
        } else if u < 100_000 {
            self.coarse[(u / 100) as usize] += 1;
        } else {
            self.over += 1;
        }
    }

    /// The upper edge of the bucket holding the `p` quantile (0 when empty).
    fn percentile_us(&self, p: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((self.n as f64 * p).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.fine.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (i + 1) as f64;
            }
        }
        for (i, c) in self.coarse.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i + 1) * 100) as f64;
            }
        }
        self.max_us
    }
}
