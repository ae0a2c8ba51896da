//! The controller loop: detectors → observation → policy (or fixed time) → sequencer →
//! lamp outputs → readback → conflict monitor.
//!
//! Call [`Controller::poll`] often (every 10–100 ms). Each poll:
//!
//! 1. reads the clock, samples every loop detector and checks the next
//!    [`SCRUB_BYTES_PER_POLL`] bytes of the running policy's blob against its CRC-32 (a
//!    blob found damaged is dropped for the fallback: [`FallbackReason::DamagedWhileRunning`]);
//! 2. in flash, drives the red flash and stops there;
//! 3. advances the sequencer by the elapsed time, *stopping at the next interval boundary*:
//!    a new interval therefore always starts at a poll instant, so no interval is ever shown
//!    shorter than the plan says (the time cut off at a boundary is counted as clock slip;
//!    it is zero when the poll period divides every timing);
//! 4. every decision interval: closes the detector interval, builds the observation, asks the
//!    policy (masked argmax) or the fixed-time program, requests the phase from the
//!    sequencer, and writes the previous decision's transition into the ring;
//! 5. drives the lamp outputs, reads the lamp-sense inputs back and lets the monitor check
//!    them; a latched fault switches to flash until [`Controller::reset_from_flash`].

use embedded_hal::digital::{InputPin, OutputPin};
use embedded_io::Write;
use greenwave_core::control::{
    max_out_cycle, phases_with_calls, MaxRed, ProgramClock, ProgramClockError,
};
use greenwave_core::mlp::BlobScrub;
use greenwave_core::plan::MAX_PHASES;
use greenwave_core::sequencer::SequencerError;
use greenwave_core::{
    ActionSource, ActuatedSignal, FixedCycle, FixedCycleError, Interval, LaneReading, Millis,
    MovementDetector, MovementId, MovementSet, ObsLayout, PhaseId, PhasePlan, RewardInputs,
    RewardKind, Sequencer,
};
use serde::{Deserialize, Serialize};

use crate::board::{BoardConfig, BoardPins};
use crate::clock::{MonotonicClock, Uptime};
use crate::detectors::{Lane, LaneEstimate};
use crate::frames::{DrainError, TransitionRing};
use crate::heads::{LampSense, Lamps, SignalHead};
use crate::monitor::{CardError, ConflictMonitor, FaultKind, MonitorCard, MonitorFault};
use crate::policy::{FallbackReason, Policy, SCRATCH_FLOATS};
use crate::{FieldTransition, OBS_CAPACITY};

/// Bytes of the transition ring by default (3.5 KiB). It holds frames, whose length
/// follows the observation's: 12 of the single-4way cabinet's (31 floats, 276 bytes once
/// the uptime passes 35 minutes), one minute of 5 s decisions, and 10 with the program
/// clock's lanes (39 floats, 340 bytes).
pub const DEFAULT_RING_BYTES: usize = 3584;

/// The reward logged with each transition: the queue estimate is what loop detectors
/// measure (waiting times are not observable in the field).
pub const FIELD_REWARD: RewardKind = RewardKind::Queue;

/// Bytes of the policy blob each poll checks again (about 5,100 instructions of CRC-32 a
/// poll in the QEMU replay of the MPS2 image, firmware/README.md "Sizes"): the 26 kB f32
/// blob of the single-4way cabinet is read whole every 52 polls, every 0.5–5 s at a
/// 10–100 ms poll.
pub const SCRUB_BYTES_PER_POLL: usize = 512;

/// Most lanes an observation within [`OBS_CAPACITY`] can have (`2·lanes + phases + 3`
/// floats, at least one phase).
const MAX_OBS_LANES: usize = (OBS_CAPACITY - 4) / 2;

/// What the controller is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Steady all-red before the first green (power-up, or after a reset from flash).
    StartupAllRed,
    /// Normal operation under the sequencer.
    Running,
    /// All red flashing after a monitor fault, until an explicit reset.
    Flash,
}

/// One decision, as reported by [`Controller::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The phase requested (by the policy, or by the fixed-time program).
    pub requested: u8,
    /// The phase green now or next, as the sequencer decided.
    pub served: u8,
    /// Who chose it.
    pub source: ActionSource,
    /// `log π(requested | obs)` (0 when the fixed-time program chose).
    pub log_prob: f32,
}

/// What one poll did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PollReport {
    /// Controller uptime, ms (an instant on the `u64` uptime: a raw integer, not a
    /// [`Millis`], which is a `u32` duration).
    pub uptime_ms: u64,
    /// Mode after the poll.
    pub mode: Mode,
    /// The decision taken in this poll, if one was due.
    pub decision: Option<Decision>,
    /// The latched fault, if in flash.
    pub fault: Option<MonitorFault>,
}

/// Why a controller could not be built. Each names what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    /// The board has a different number of signal groups than the plan has movements.
    #[error("board has {groups} signal groups, the plan has {movements} movements")]
    SignalGroupCount {
        /// Signal groups wired.
        groups: usize,
        /// Movements in the plan.
        movements: usize,
    },
    /// The observation does not fit the logged transition.
    #[error("observation of {dim} floats exceeds the firmware's capacity of {capacity}")]
    ObservationTooLarge {
        /// The layout's dimension.
        dim: usize,
        /// [`OBS_CAPACITY`].
        capacity: usize,
    },
    /// A lane feeds no movement, or a movement the plan does not have.
    #[error("lane {lane} feeds movements {movements:#x}, not a non-empty subset of the plan's")]
    LaneMovements {
        /// The lane.
        lane: usize,
        /// Its movement set.
        movements: u32,
    },
    /// A lane with no storage.
    #[error("lane {lane} has a storage of 0 vehicles")]
    LaneStorage {
        /// The lane.
        lane: usize,
    },
    /// A board timing is shorter than it must be: zero where it must be positive, or a
    /// start-up all-red (which also follows a reset from flash) shorter than the red the
    /// plan keeps between conflicting greens (its longest switch less the yellow).
    #[error("board setting {field} must be at least {} ms", .least.0)]
    BoardTiming {
        /// The field.
        field: &'static str,
        /// The least it may be.
        least: Millis,
    },
    /// The fixed-time program does not fit the plan.
    #[error("fixed-time program: {0}")]
    FixedTime(FixedCycleError),
    /// The monitor card refuses the plan.
    #[error("monitor card: {0}")]
    MonitorCard(CardError),
    /// The sequencer refused the plan.
    #[error("sequencer: {0}")]
    Sequencer(SequencerError),
    /// The program clock does not fit the plan.
    #[error("program clock: {0}")]
    ProgramClock(ProgramClockError),
}

/// The observation layout of `detector_lanes` lanes under `plan`, with the program clock's
/// lane per phase when `program_clock` (greenwave-core's [`ObsLayout::for_signal`]);
/// refused when it does not fit a logged transition ([`OBS_CAPACITY`]).
fn checked_layout(
    detector_lanes: usize,
    plan: &PhasePlan,
    program_clock: bool,
) -> Result<ObsLayout, ControllerError> {
    match ObsLayout::for_signal(detector_lanes, plan.n_phases(), program_clock) {
        Some(layout) if layout.dim() <= OBS_CAPACITY => Ok(layout),
        other => Err(ControllerError::ObservationTooLarge {
            dim: other.map_or(usize::MAX, |l| l.dim()),
            capacity: OBS_CAPACITY,
        }),
    }
}

/// The signal controller for one intersection: `G` signal groups (one per movement of the
/// plan), `L` lanes, a transition ring of `R` bytes. The policy blob is borrowed for `'b` (in
/// firmware: `'static`, from flash).
pub struct Controller<
    'b,
    O,
    S,
    D,
    C,
    const G: usize,
    const L: usize,
    const R: usize = DEFAULT_RING_BYTES,
> {
    board: BoardConfig<L>,
    heads: [SignalHead<O>; G],
    sense: [LampSense<S>; G],
    lanes: [Lane<D>; L],
    clock: C,
    uptime: Uptime,
    seq: Sequencer,
    layout: ObsLayout,
    /// The blob as given, kept so that a layout change can check it again.
    blob: Option<&'b [u8]>,
    policy: Result<Policy<'b>, FallbackReason>,
    /// The accepted blob's CRC-32 checked again while it runs, [`SCRUB_BYTES_PER_POLL`] a poll.
    scrub: BlobScrub,
    /// The junction's program as a clock, when the observation reads one (borrowed like
    /// the blob: the configuration lives in flash or a static, not in the controller).
    program_clock: Option<&'b ProgramClock>,
    fixed: FixedCycle,
    actuated: Option<ActuatedSignal>,
    /// The max-red rule over the policy's decisions.
    max_red: MaxRed,
    monitor: ConflictMonitor,
    mode: Mode,
    mode_since_ms: u64,
    next_decision_ms: u64,
    clock_slip_ms: u64,
    commanded: [Lamps; G],
    sensed: [Lamps; G],
    lane_estimates: [LaneEstimate; L],
    obs: [f32; OBS_CAPACITY],
    scratch: [f32; SCRATCH_FLOATS],
    pending: Option<FieldTransition>,
    /// Whether the pending transition's observation came from readings that passed.
    pending_obs_trusted: bool,
    /// Transitions not stored because an observation in them did not pass.
    untrusted_dropped: u32,
    ring: TransitionRing<R>,
}

impl<'b, O, S, D, C, const G: usize, const L: usize, const R: usize>
    Controller<'b, O, S, D, C, G, L, R>
where
    O: OutputPin,
    S: InputPin,
    D: InputPin,
    C: MonotonicClock,
{
    /// Builds a controller and checks everything that can be checked before the first poll:
    /// signal groups against movements, lanes, board timing, the fixed-time program and the
    /// monitor card against the plan. The policy blob is *not* a reason to refuse: a missing,
    /// corrupt or mismatched blob selects the fixed-time program (see
    /// [`policy_status`](Self::policy_status)).
    pub fn new(
        plan: PhasePlan,
        board: BoardConfig<L>,
        pins: BoardPins<O, S, D, G, L>,
        card: MonitorCard,
        fixed: FixedCycle,
        blob: Option<&'b [u8]>,
        mut clock: C,
    ) -> Result<Self, ControllerError> {
        let movements = plan.movements().len();
        if movements != G {
            return Err(ControllerError::SignalGroupCount {
                groups: G,
                movements,
            });
        }
        let layout = checked_layout(L, &plan, false)?;
        let all = MovementSet(if G >= 32 { u32::MAX } else { (1u32 << G) - 1 });
        for (lane, cfg) in board.lanes.iter().enumerate() {
            if cfg.movements.is_empty() || !cfg.movements.minus(all).is_empty() {
                return Err(ControllerError::LaneMovements {
                    lane,
                    movements: cfg.movements.0,
                });
            }
            if cfg.storage_veh == 0 {
                return Err(ControllerError::LaneStorage { lane });
            }
        }
        check_board_timing(&board, &plan)?;
        fixed
            .check_plan(&plan)
            .map_err(ControllerError::FixedTime)?;
        card.check_plan(&plan)
            .map_err(ControllerError::MonitorCard)?;
        let policy = Policy::load(blob, plan.hash(), layout);
        let max_red = MaxRed::new(max_out_cycle(&plan), Millis(0));
        let seq = Sequencer::new(plan, PhaseId(0)).map_err(ControllerError::Sequencer)?;
        let mut lane_index = 0;
        let lanes = pins.loops.map(|p| {
            let lane = Lane::new(p, board.lanes[lane_index]);
            lane_index += 1;
            lane
        });
        Ok(Controller {
            board,
            heads: pins.lamp_outputs.map(SignalHead::new),
            sense: pins.lamp_sense.map(LampSense::new),
            lanes,
            uptime: Uptime::starting_at(clock.now_ms()),
            clock,
            seq,
            layout,
            blob,
            policy,
            scrub: BlobScrub::default(),
            program_clock: None,
            fixed,
            actuated: None,
            max_red,
            monitor: ConflictMonitor::new(card),
            mode: Mode::StartupAllRed,
            mode_since_ms: 0,
            next_decision_ms: 0,
            clock_slip_ms: 0,
            commanded: [Lamps::RED; G],
            sensed: [Lamps::RED; G],
            lane_estimates: [LaneEstimate::default(); L],
            obs: [0.0; OBS_CAPACITY],
            scratch: [0.0; SCRATCH_FLOATS],
            pending: None,
            pending_obs_trusted: false,
            untrusted_dropped: 0,
            ring: TransitionRing::new(),
        })
    }

    /// Runs greenwave-core's actuated control (gap-out / max-out on the stop-bar loops)
    /// instead of the fixed cycle whenever the policy does not act and the detectors are
    /// trusted; a decision with a detector fault still runs the fixed cycle ("max recall").
    /// Actuated decisions come once per decision interval. A movement's gap is the shortest
    /// stop-bar gap of its lanes, and it calls while a vehicle stands on a stop bar or its
    /// lanes hold a queue; downstream storage is not detected, so no movement is gated by
    /// spill-back.
    pub fn with_actuated(mut self, rule: ActuatedSignal) -> Self {
        self.actuated = Some(rule);
        self
    }

    /// Sets how long a phase whose movements call may be kept from green while the policy
    /// acts (greenwave-core's max-red rule, as in training; default the plan's max-out
    /// cycle, [`max_out_cycle`]). Calls come from the stop-bar loops, as for actuated control.
    pub fn with_max_red(mut self, max_red: Millis) -> Self {
        self.max_red = MaxRed::new(max_red, Millis(0));
        self
    }

    /// Supplies the observation's program-clock lanes (greenwave-core's [`ProgramClock`];
    /// a policy exported with `program_clock` reads them): one pseudo-lane per plan
    /// phase after the `L` detector lanes, set for the phase the junction's program
    /// serves at the program clock's time: ms since the first green after power-on (the
    /// uptime less the start-up all-red), as the runtime counts from its first green; a
    /// reset from flash does not restart it. So `clock`'s offset says where in the
    /// cycle the program stands when that first green starts. The layout grows by `P` lanes and the blob is checked
    /// against it again (a blob for the detector lanes alone then falls back to fixed
    /// time, [`FallbackReason::LayoutMismatch`]). Refused, naming why, when the clock's
    /// phases are not the plan's or the wider observation does not fit
    /// [`OBS_CAPACITY`].
    pub fn with_program_clock(mut self, clock: &'b ProgramClock) -> Result<Self, ControllerError> {
        self.read_program_clock(clock)?;
        Ok(self)
    }

    /// [`Controller::with_program_clock`] in place, for a controller already in its
    /// static slot (a cabinet is kilobytes: building it by value moves it on the stack).
    /// Refused as `with_program_clock` is, with the controller unchanged. Read once running,
    /// it ends the pending transition (`done`) under the layout it was observed in.
    pub fn read_program_clock(&mut self, clock: &'b ProgramClock) -> Result<(), ControllerError> {
        let plan = self.seq.plan();
        clock
            .check_plan(plan)
            .map_err(ControllerError::ProgramClock)?;
        let layout = checked_layout(L, plan, true)?;
        if self.pending.is_some() {
            // Read mid-run: the decision pending ends here under the old layout, so that
            // no record pairs an observation of one layout with a next of the other.
            let (reward, trusted) = self.observe(self.uptime.uptime_ms());
            self.finish_pending(reward, true, trusted);
        }
        let hash = self.seq.plan().hash();
        self.policy = Policy::load(self.blob, hash, layout);
        self.scrub = BlobScrub::default();
        self.layout = layout;
        self.program_clock = Some(clock);
        Ok(())
    }

    /// The program clock's time at uptime `now`: 0 when the first green after power-on
    /// starts (the end of the start-up all-red), as the runtime's and the simulators'
    /// clocks count from their first green; it keeps running through a reset from flash.
    fn program_time_ms(&self, now: u64) -> u64 {
        now.saturating_sub(u64::from(self.board.startup_all_red.0))
    }

    /// Per-movement detector readings from the lanes (see [`Controller::with_actuated`]).
    fn movement_detectors(&self, now: u64) -> [MovementDetector; G] {
        let mut out = [MovementDetector {
            gap_s: f32::MAX,
            ..MovementDetector::default()
        }; G];
        for (lane, est) in self.lanes.iter().zip(&self.lane_estimates) {
            let gap_s = lane.stop_bar_gap(now).as_secs_f32();
            let on_bar = gap_s == 0.0;
            for m in lane.config().movements.iter() {
                if let Some(d) = out.get_mut(m.0 as usize) {
                    d.gap_s = d.gap_s.min(gap_s);
                    d.queue_veh += est.halted_veh as f32;
                    d.upstream_veh += est.vehicles as f32;
                    d.call |= on_bar;
                }
            }
        }
        out
    }

    /// One pass of the loop (see the module docs).
    pub fn poll(&mut self) -> PollReport {
        let elapsed = self.uptime.update(self.clock.now_ms());
        let now = self.uptime.uptime_ms();
        for lane in &mut self.lanes {
            lane.sample(now, &self.board);
        }
        self.scrub_policy();
        let mut decision = None;
        match self.mode {
            Mode::Flash => {
                self.drive_flash(now);
                return self.report(now, None);
            }
            Mode::StartupAllRed => {
                // Time beyond one clearance step does not count towards the all-red.
                let beyond = elapsed.0.saturating_sub(self.board.max_clearance_step.0);
                self.mode_since_ms += u64::from(beyond);
                self.clock_slip_ms += u64::from(beyond);
                let held = now.saturating_sub(self.mode_since_ms);
                if held >= u64::from(self.board.startup_all_red.0) {
                    self.mode = Mode::Running;
                    self.mode_since_ms = now;
                    self.next_decision_ms = now;
                    // Detector counts from before the first green are not part of any decision.
                    for lane in &mut self.lanes {
                        lane.close_interval(now, false, &self.board);
                    }
                }
            }
            Mode::Running => self.advance_sequencer(elapsed),
        }
        if self.mode == Mode::Running && now >= self.next_decision_ms {
            decision = Some(self.decide(now));
            let interval = u64::from(self.board.decision_interval.0);
            self.next_decision_ms += interval;
            if self.next_decision_ms <= now {
                // The loop stalled for more than a decision interval: do not catch up in a burst.
                self.next_decision_ms = now + interval;
            }
        }
        let mut want = [Lamps::RED; G];
        if self.mode == Mode::Running {
            let frame = self.seq.frame();
            for (g, lamps) in want.iter_mut().enumerate() {
                *lamps = Lamps::for_movement(&frame, MovementId(g as u8));
            }
        }
        self.display(now, &want);
        self.report(now, decision)
    }

    /// Checks the next piece of the running policy's blob against its CRC-32 (a bit can flip
    /// in flash after the load checked it); a blob found damaged is not run again (until a
    /// load checks it whole again): the fallback takes over as from a blob refused at
    /// load, its requests going through the sequencer's clearances like any other.
    fn scrub_policy(&mut self) {
        let (Ok(_), Some(bytes)) = (&self.policy, self.blob) else {
            return;
        };
        if let Err(e) = self.scrub.step(bytes, SCRUB_BYTES_PER_POLL) {
            self.policy = Err(FallbackReason::DamagedWhileRunning(e));
        }
    }

    fn report(&self, now: u64, decision: Option<Decision>) -> PollReport {
        PollReport {
            uptime_ms: now,
            mode: self.mode,
            decision,
            fault: self.monitor.latched(),
        }
    }

    /// Advances the sequencer by up to `elapsed`, stopping at the next interval boundary.
    fn advance_sequencer(&mut self, elapsed: Millis) {
        // Carry out any change already due (e.g. a held request whose min green was reached).
        self.seq.advance(Millis::ZERO, |_| {});
        let left = self.time_to_boundary();
        let step = if left == Millis::ZERO {
            elapsed
        } else {
            elapsed.min(left)
        };
        // Every interval advances by at most one step a poll: a clock that jumps lengthens
        // it, never cuts it. A green counts too: the time a per-pair intergreen needs, a min
        // green and the walk and clearance inside it run on through greens.
        let step = step.min(self.board.max_clearance_step);
        self.clock_slip_ms += u64::from((elapsed - step).0);
        self.seq.advance(step, |_| {});
        if self.policy.is_err() && self.actuated.is_none() {
            self.serve_fixed_time();
        }
    }

    /// Time until the current interval ends if nothing is requested (zero if due now), or
    /// until the fixed-time split ends when the fallback is driving. A split already served
    /// (its green held on, the next stage serving the same phase) ends nothing: the
    /// interval's own end counts, so that a step never runs past max green into a yellow
    /// the lamps would then show short.
    fn time_to_boundary(&self) -> Millis {
        let left = self.seq.time_to_boundary();
        match self.seq.interval() {
            Interval::Green { .. } if self.policy.is_err() && self.actuated.is_none() => {
                match self.fixed.green_left(&self.seq) {
                    Some(split_left) if split_left > Millis::ZERO => left.min(split_left),
                    _ => left,
                }
            }
            _ => left,
        }
    }

    /// The fallback's request: actuated on trusted detectors where configured, else the
    /// fixed cycle.
    fn fallback_decide(&mut self, now: u64, trusted: bool) -> u8 {
        match &self.actuated {
            Some(rule) if trusted => rule.decide(&self.seq, &self.movement_detectors(now)),
            _ => self.fixed.decide(&self.seq),
        }
    }

    /// Fixed-time operation: request the next phase once the current split is served.
    fn serve_fixed_time(&mut self) {
        if let Interval::Green { phase } = self.seq.interval() {
            let wanted = self.fixed.decide(&self.seq);
            if wanted != phase.0 {
                self.seq.request(wanted);
            }
        }
    }

    /// Closes the detector interval, writes the observation into `self.obs` and returns the
    /// reward for the interval that ended and whether the observation can be trusted.
    fn observe(&mut self, now: u64) -> (f32, bool) {
        let frame = self.seq.frame();
        // Detector lanes, then the program clock's (the layout's dimension was checked
        // against the capacity, so they fit).
        let mut readings = [LaneReading::default(); MAX_OBS_LANES];
        let n_lanes = usize::from(self.layout.n_lanes);
        let (detected, clock) = readings[..n_lanes].split_at_mut(L);
        if let Some(program) = self.program_clock {
            program.write_readings(self.program_time_ms(now), clock);
        }
        let mut halted_veh = 0u32;
        let mut trusted = true;
        for ((lane, est), reading) in self
            .lanes
            .iter_mut()
            .zip(self.lane_estimates.iter_mut())
            .zip(detected.iter_mut())
        {
            let lane_green = !lane.config().movements.and(frame.green).is_empty();
            *est = lane.close_interval(now, lane_green, &self.board);
            *reading = est.reading;
            halted_veh += est.halted_veh as u32;
            trusted &= !est.detector_fault;
        }
        let dim = self.layout.dim();
        trusted &= self
            .layout
            .write(&readings[..n_lanes], &self.seq, &mut self.obs[..dim])
            .is_ok();
        let now_inputs = RewardInputs {
            queue_veh: halted_veh as f32,
            ..RewardInputs::default()
        };
        let reward = FIELD_REWARD.reward(&RewardInputs::default(), &now_inputs);
        (reward, trusted)
    }

    /// Completes the pending transition with the current observation and stores it, unless
    /// either observation came from readings that did not pass (a detector fault, an
    /// impossible reading): such a record is counted and dropped, as the runtime drops it,
    /// so that fine-tuning never learns from an observation known to be wrong.
    fn finish_pending(&mut self, reward: f32, done: bool, next_trusted: bool) {
        if let Some(mut t) = self.pending.take() {
            if !(self.pending_obs_trusted && next_trusted) {
                self.untrusted_dropped = self.untrusted_dropped.saturating_add(1);
                return;
            }
            t.relabel_max_green(&self.seq);
            t.reward = reward;
            t.done = done;
            t.next_obs = self.obs_vec();
            self.ring.push(&t);
        }
    }

    fn obs_vec(&self) -> heapless::Vec<f32, OBS_CAPACITY> {
        let mut v = heapless::Vec::new();
        // Cannot fail: the layout's dimension was checked against the capacity.
        let _ = v.extend_from_slice(&self.obs[..self.layout.dim()]);
        v
    }

    fn decide(&mut self, now: u64) -> Decision {
        let (reward, trusted) = self.observe(now);
        self.finish_pending(reward, false, trusted);
        let mask = self.seq.action_mask();
        let dim = self.layout.dim();
        let choice = match &self.policy {
            Ok(policy) if trusted => policy
                .decide(&self.obs[..dim], mask, &mut self.scratch)
                .ok()
                .map(|c| (c, policy.version())),
            _ => None,
        };
        let version = self.policy.as_ref().map(Policy::version).unwrap_or(0);
        let (requested, log_prob, from_policy) = match choice {
            Some((c, _)) => (c.phase, c.log_prob, true),
            None => (self.fallback_decide(now, trusted), 0.0, false),
        };
        // The max-red rule: a phase with a call kept from green too long is served next,
        // whatever the policy chose (the uptime may wrap: the rule compares modulo 2³² ms).
        let at = Millis(now as u32);
        self.max_red.note(&self.seq, at);
        let forced = match from_policy {
            true => {
                let calls = phases_with_calls(self.seq.plan(), &self.movement_detectors(now));
                self.max_red.starved(&self.seq, mask, calls, at)
            }
            false => None,
        };
        // The record keeps the policy's request (its log-prob is of that); the served phase
        // and the source say the supervisor overrode it.
        let (asked, max_red_forced) = match forced {
            Some(q) if q.0 != requested => (q.0, true),
            _ => (requested, false),
        };
        let response = self.seq.request(asked);
        let source = match (from_policy, response.overridden, max_red_forced) {
            (false, _, _) => ActionSource::Fallback,
            (true, None, false) => ActionSource::Policy,
            (true, _, _) => ActionSource::Supervisor,
        };
        let served = response.next_green.0;
        self.pending_obs_trusted = trusted;
        self.pending = Some(FieldTransition {
            timestamp_ms: now,
            signal: self.board.signal_id,
            obs: self.obs_vec(),
            requested,
            action: served,
            log_prob,
            reward: 0.0,
            next_obs: heapless::Vec::new(),
            done: false,
            policy_version: version,
            source,
            reward_kind: Some(FIELD_REWARD),
        });
        Decision {
            requested,
            served,
            source,
            log_prob,
        }
    }

    /// Drives `want`, reads the lamps back and lets the monitor judge them. Heads without
    /// a green are driven first, the greens last: a switch with no all-red (a yellow
    /// ending as the next green starts, in one poll) never shows a green beside a
    /// conflicting yellow, however slowly the outputs are written.
    fn display(&mut self, now: u64, want: &[Lamps; G]) {
        let polarity = self.board.lamp_polarity;
        self.commanded = *want;
        for k in 0..2 * G {
            let (g, greens) = (k % G, k >= G);
            let lamps = want[g];
            if lamps.green != greens {
                continue;
            }
            if let Err(f) = self.heads[g].drive(lamps, polarity) {
                let kind = FaultKind::LampOutputFailed {
                    channel: g as u8,
                    lamp: f.lamp,
                };
                return self.trip(kind, now);
            }
        }
        let polarity = self.board.sense_polarity;
        for (g, sense) in self.sense.iter_mut().enumerate() {
            match sense.read(polarity) {
                Ok(lamps) => self.sensed[g] = lamps,
                Err(f) => {
                    let kind = FaultKind::LampSenseFailed {
                        channel: g as u8,
                        lamp: f.lamp,
                    };
                    return self.trip(kind, now);
                }
            }
        }
        if self.monitor.check(now, &self.sensed).is_some() {
            self.enter_flash(now);
        }
    }

    fn trip(&mut self, kind: FaultKind, now: u64) {
        self.monitor.trip(kind, now);
        self.enter_flash(now);
    }

    fn enter_flash(&mut self, now: u64) {
        if self.mode != Mode::Flash {
            if self.pending.is_some() {
                let (reward, trusted) = self.observe(now);
                self.finish_pending(reward, true, trusted);
            }
            self.mode = Mode::Flash;
            self.mode_since_ms = now;
        }
        self.drive_flash(now);
    }

    /// All red flashing: red lamps on for one half period, off for the next; yellow and
    /// green off throughout. Output errors are ignored here: flash is already the last resort.
    fn drive_flash(&mut self, now: u64) {
        let half = u64::from(self.board.flash_half_period.0.max(1));
        let lit = (now.saturating_sub(self.mode_since_ms) / half) % 2 == 0;
        let lamps = if lit { Lamps::RED } else { Lamps::DARK };
        let polarity = self.board.lamp_polarity;
        for head in &mut self.heads {
            let _ = head.drive(lamps, polarity);
        }
        self.commanded = [lamps; G];
    }

    /// The technician's reset: clears a latched fault and restarts with the start-up all-red,
    /// lengthened by the plan's longest switch (yellow, all-red and intergreens), and the
    /// plan's first phase. Does nothing unless in flash. Wire it to a cabinet input;
    /// never call it from policy output. If the fault persists, the monitor latches again.
    pub fn reset_from_flash(&mut self) {
        if self.mode != Mode::Flash {
            return;
        }
        if let Ok(seq) = Sequencer::new(self.seq.plan().clone(), PhaseId(0)) {
            self.seq = seq;
        }
        self.monitor.reset();
        self.mode = Mode::StartupAllRed;
        // The fault may have latched in a green, whose yellow and all-red the flash cut:
        // the plan's longest switch is held on top of the start-up all-red.
        let plan = self.seq.plan();
        let clear = (0..plan.phases().len())
            .map(|p| plan.longest_switch_from(PhaseId(p as u8)))
            .max()
            .unwrap_or(Millis::ZERO);
        self.mode_since_ms = self.uptime.uptime_ms() + u64::from(clear.0);
    }

    /// Writes up to `max_frames` waiting transitions to `w` as frames (see [`crate::frames`]).
    pub fn drain_transitions<W: Write>(
        &mut self,
        w: &mut W,
        max_frames: usize,
    ) -> Result<usize, DrainError> {
        self.ring.drain(w, max_frames)
    }

    /// Current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Stands for the flash under the running policy's blob changing to `bytes` (a bit
    /// flipped): the blob check reads `bytes` from now on, the policy goes on running the
    /// blob it parsed until the check finds the damage. Tests only (`fault-injection`).
    #[cfg(feature = "fault-injection")]
    pub fn damage_flash_under_policy(&mut self, bytes: &'b [u8]) {
        self.blob = Some(bytes);
    }

    /// The latched monitor fault, if any.
    pub fn fault(&self) -> Option<MonitorFault> {
        self.monitor.latched()
    }

    /// The acting policy's version, or why the fixed-time program runs instead.
    pub fn policy_status(&self) -> Result<u32, FallbackReason> {
        self.policy.as_ref().map(Policy::version).map_err(|e| *e)
    }

    /// The sequencer.
    pub fn sequencer(&self) -> &Sequencer {
        &self.seq
    }

    /// The observation layout.
    pub fn layout(&self) -> ObsLayout {
        self.layout
    }

    /// Lamps commanded in the last poll, per signal group.
    pub fn commanded_lamps(&self) -> &[Lamps; G] {
        &self.commanded
    }

    /// Lamps sensed in the last poll, per signal group.
    pub fn sensed_lamps(&self) -> &[Lamps; G] {
        &self.sensed
    }

    /// Each lane's estimate at the last decision (counts and occupancy of its loops).
    pub fn lane_estimates(&self) -> &[LaneEstimate; L] {
        &self.lane_estimates
    }

    /// The last observation built.
    pub fn observation(&self) -> &[f32] {
        &self.obs[..self.layout.dim()]
    }

    /// Transitions waiting to be collected.
    pub fn transitions_waiting(&self) -> usize {
        self.ring.len()
    }

    /// Transitions dropped because nobody collected them in time.
    pub fn transitions_dropped(&self) -> u32 {
        self.ring.dropped()
    }

    /// Transitions not stored because one of their observations came from readings that
    /// did not pass (a detector fault, an impossible reading).
    pub fn transitions_untrusted(&self) -> u32 {
        self.untrusted_dropped
    }

    /// Time cut off at interval boundaries so intervals start on poll instants, ms. A raw
    /// `u64`, not a [`Millis`]: it accumulates over the whole uptime, which outgrows a `u32`.
    pub fn clock_slip_ms(&self) -> u64 {
        self.clock_slip_ms
    }

    /// Controller uptime at the last poll, ms.
    pub fn uptime_ms(&self) -> u64 {
        self.uptime.uptime_ms()
    }

    /// Most phases a plan may have (the width of the logits buffer).
    pub const MAX_PHASES: usize = MAX_PHASES;
}

/// The board's timings that must be above zero are, and its start-up all-red keeps at
/// least the red the plan keeps between conflicting greens: a reset from flash, which may
/// have cut a yellow, then still clears the junction before the first green.
fn check_board_timing<const L: usize>(
    board: &BoardConfig<L>,
    plan: &PhasePlan,
) -> Result<(), ControllerError> {
    for (field, v) in [
        ("decision_interval", board.decision_interval),
        ("flash_half_period", board.flash_half_period),
        ("max_clearance_step", board.max_clearance_step),
    ] {
        if v == Millis::ZERO {
            let least = Millis(1);
            return Err(ControllerError::BoardTiming { field, least });
        }
    }
    let required = plan
        .phases()
        .iter()
        .enumerate()
        .map(|(p, phase)| {
            plan.longest_switch_from(PhaseId(p as u8))
                .saturating_sub(phase.timing.yellow)
        })
        .max()
        .unwrap_or(Millis::ZERO);
    if board.startup_all_red < required {
        return Err(ControllerError::BoardTiming {
            field: "startup_all_red",
            least: required,
        });
    }
    Ok(())
}
