//! # greenwave-firmware-replay
//!
//! The replay harness shared by the host build and the Cortex-M build of
//! `greenwave-firmware`: the same code, compiled twice, must produce the same bytes.
//!
//! * [`io`]: an emulated I/O bank behind the firmware's example pin map (lamp output latch,
//!   lamp sense wired to the field terminals, loop inputs), and its millisecond timer;
//! * [`trace`]: detector traces (loop levels poll by poll, plus fault-injection commands);
//! * [`events`]: the event log (decisions, displayed signal states, latched fault, summary);
//! * [`replay`]: builds the single-4way cabinet over the bank and runs it through a trace,
//!   writing the event log and the transition frames (the firmware's own serial format);
//! * [`stats`]: what the target build measures about itself (stack, instructions).
#![cfg_attr(not(test), no_std)]
#![warn(missing_docs)]

pub mod events;
pub mod io;
pub mod stats;
pub mod trace;

use embedded_io::{Read, Write};
use greenwave_core::{
    ClockStage, Millis, MovementSet, PhaseId, PhasePlan, PhaseTiming, ProgramClock,
    ProgramClockError,
};
use greenwave_firmware::board::PinMapError;
use greenwave_firmware::frames::DrainError;
use greenwave_firmware::{
    BoardConfig, Controller, ControllerError, FixedCycle, MonitorCard, PinMap, PollReport,
};

use events::{Event, EventLog, EventLogError, Summary};
use io::{BankClock, BankPins, BankRef, LampOutput, LampSenseInput, LoopInput};
use trace::{Record, TraceError, TraceReader};

/// Signal groups of the single-4way cabinet (one per movement).
pub const GROUPS: usize = 12;
/// Lanes of the single-4way cabinet.
pub const LANES: usize = 12;
/// Frames the replay drains per poll (the ring holds 12 of single-4way's).
pub const FRAMES_PER_POLL: usize = 4;

/// The single-4way cabinet over the emulated I/O bank `B`, with a policy blob borrowed for
/// `'a`.
pub type Cabinet<'a, B> =
    Controller<'a, LampOutput<B>, LampSenseInput<B>, LoopInput<B>, BankClock<B>, GROUPS, LANES>;

/// Why the cabinet could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CabinetError {
    /// The plan could not be built.
    #[error("phase plan: {0:?}")]
    Plan(greenwave_core::plan::PlanError),
    /// The pin map does not fit the bank.
    #[error("pin map: {0}")]
    Pins(PinMapError),
    /// The controller refused its configuration.
    #[error("controller: {0}")]
    Controller(ControllerError),
    /// The program clock could not be built.
    #[error("program clock: {0}")]
    ProgramClock(ProgramClockError),
}

/// The plan of the shipped `single-4way` policy (`models/single-4way.manifest.json`):
/// four-arm protected-left phasing, min green 8 s, max green 60 s, yellow 3 s, all-red 2 s.
pub fn single_4way_plan() -> Result<PhasePlan, CabinetError> {
    PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(8, 60, 3, 2))
        .map_err(CabinetError::Plan)
}

/// The `single-4way` lanes: per arm (clockwise from north) a left lane, a through lane and a
/// through-right lane, each 40 vehicles of storage (300 m at 7.5 m jam spacing).
pub fn single_4way_board() -> BoardConfig<LANES> {
    let mut board = BoardConfig::one_lane_per_movement(1, 40);
    for arm in 0..4u8 {
        board.lanes[3 * arm as usize + 2].movements =
            MovementSet::from_ids(&[3 * arm + 1, 3 * arm + 2]);
    }
    board
}

/// Builds the single-4way cabinet over bank `B` through the example pin map, with `blob`
/// as its policy (the fixed-time program runs if the blob is missing or refused).
pub fn cabinet<B: BankRef>(blob: Option<&[u8]>) -> Result<Cabinet<'_, B>, CabinetError> {
    let plan = single_4way_plan()?;
    let board = single_4way_board();
    let pins = PinMap::example_single_4way()
        .take_pins(&mut BankPins::<B>::default())
        .map_err(CabinetError::Pins)?;
    let card = MonitorCard::from_plan(&plan, board.fault_persistence);
    let fixed = FixedCycle::midpoint(&plan);
    Controller::new(plan, board, pins, card, fixed, blob, BankClock::default())
        .map_err(CabinetError::Controller)
}

/// The most stages [`single_4way_program_clock`] builds: one per phase and the change
/// back to the first.
const CLOCK_STAGES: usize = greenwave_core::plan::MAX_PHASES + 1;

/// The single-4way junction's own program as a program clock: the fixed cycle its
/// cabinet falls back to ([`FixedCycle::midpoint`]), each green followed by its switch to
/// the next phase (yellow and all-red), which stands for the green it leads to, as on SUMO
/// (`greenwave_sim::sumo::clock`). The cycle starts with phase 0's green at the first
/// green after power-on (offset 0).
pub fn single_4way_program_clock() -> Result<ProgramClock, CabinetError> {
    let plan = single_4way_plan()?;
    let cycle = FixedCycle::midpoint(&plan);
    let cycle = cycle.stages();
    // Stages of 0 ms are dropped by `ProgramClock::new`: the unused ones stay so.
    let mut stages = [ClockStage {
        phase: 0,
        duration: Millis(0),
    }; CLOCK_STAGES];
    let mut change = Millis(0);
    for (k, s) in cycle.iter().enumerate() {
        let next = cycle[(k + 1) % cycle.len()].phase;
        stages[k] = ClockStage {
            phase: s.phase,
            duration: Millis(change.0 + s.green.0),
        };
        change = plan.switch_time(PhaseId(s.phase), PhaseId(next));
    }
    stages[cycle.len()] = ClockStage {
        phase: cycle[0].phase,
        duration: change,
    };
    ProgramClock::new(&stages, 0).map_err(CabinetError::ProgramClock)
}

/// [`cabinet`] reading `clock`: the policy's observation has one program-clock lane per
/// phase after the detector lanes (`Controller::with_program_clock`), so `blob` must be
/// for that layout.
pub fn cabinet_with_clock<'a, B: BankRef>(
    blob: Option<&'a [u8]>,
    clock: &'a ProgramClock,
) -> Result<Cabinet<'a, B>, CabinetError> {
    cabinet::<B>(blob)?
        .with_program_clock(clock)
        .map_err(CabinetError::Controller)
}

/// How the replay polls the controller: the target wraps the poll in its instruction
/// counter; the host just polls.
pub trait PollMeter<B> {
    /// Polls `ctl` once and returns its report.
    fn poll(&mut self, ctl: &mut Cabinet<'_, B>) -> PollReport;
}

/// Polls without measuring.
#[derive(Clone, Copy, Debug, Default)]
pub struct JustPoll;

impl<B: BankRef> PollMeter<B> for JustPoll {
    fn poll(&mut self, ctl: &mut Cabinet<'_, B>) -> PollReport {
        ctl.poll()
    }
}

/// Why a replay stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The trace is bad.
    #[error("trace: {0}")]
    Trace(TraceError),
    /// The event log could not be written.
    #[error("event log: {0}")]
    Events(EventLogError),
    /// The serial port failed.
    #[error("serial: {0}")]
    Serial(DrainError),
}

/// Replays `trace` into `ctl` (built over bank `B`): each poll record advances the bank's timer,
/// sets its loops and polls once (through `meter`); each force record forces a group's
/// field terminals.
/// Events go to `events`, transition frames (up to [`FRAMES_PER_POLL`] a poll) to `serial`.
pub fn replay<B: BankRef, R: Read, E: Write, S: Write, M: PollMeter<B>>(
    ctl: &mut Cabinet<'_, B>,
    trace: R,
    events: E,
    serial: &mut S,
    meter: &mut M,
) -> Result<Summary, ReplayError> {
    let bank = B::bank();
    let mut trace = TraceReader::new(trace).map_err(ReplayError::Trace)?;
    let mut log = EventLog::new(events);
    let mut summary = Summary::default();
    let mut shown = None;
    let mut fault_logged = false;
    while let Some(record) = trace.next_record().map_err(ReplayError::Trace)? {
        match record {
            Record::Force { group, lamps } => bank.force(group, lamps),
            Record::Poll { dt_ms, loops } => {
                bank.advance(dt_ms as u32, loops);
                let report = meter.poll(ctl);
                summary.polls += 1;
                log_poll(ctl, &report, &mut log, &mut shown, &mut fault_logged)
                    .map_err(ReplayError::Events)?;
                summary.decisions += report.decision.is_some() as u32;
                let sent = ctl
                    .drain_transitions(serial, FRAMES_PER_POLL)
                    .map_err(ReplayError::Serial)?;
                summary.frames += sent as u32;
            }
        }
    }
    summary.uptime_ms = ctl.uptime_ms();
    summary.clock_slip_ms = ctl.clock_slip_ms();
    summary.transitions_dropped = ctl.transitions_dropped();
    summary.policy_version = ctl.policy_status().ok();
    log.push(&Event::End(summary))
        .map_err(ReplayError::Events)?;
    log.finish().map_err(ReplayError::Events)?;
    Ok(summary)
}

type Shown = (
    greenwave_firmware::Mode,
    [greenwave_firmware::Lamps; GROUPS],
    [greenwave_firmware::Lamps; GROUPS],
);

/// Logs what one poll did: its decision, a changed display or mode, a newly latched fault.
fn log_poll<B: BankRef, E: Write>(
    ctl: &Cabinet<'_, B>,
    report: &PollReport,
    log: &mut EventLog<E>,
    shown: &mut Option<Shown>,
    fault_logged: &mut bool,
) -> Result<(), EventLogError> {
    if let Some(decision) = report.decision {
        log.push(&Event::Decision {
            uptime_ms: report.uptime_ms,
            decision,
        })?;
    }
    let now = (report.mode, *ctl.commanded_lamps(), *ctl.sensed_lamps());
    if *shown != Some(now) {
        *shown = Some(now);
        log.push(&Event::Display {
            uptime_ms: report.uptime_ms,
            mode: now.0,
            commanded: now.1,
            sensed: now.2,
        })?;
    }
    match report.fault {
        Some(fault) if !*fault_logged => {
            *fault_logged = true;
            log.push(&Event::Fault(fault))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cabinet_accepts_the_shipped_policy() {
        assert_eq!(single_4way_plan().unwrap().hash(), 0x2eeb_2622_275d_4f0b);
        let blobs: [&[u8]; 2] = [
            include_bytes!("../../../models/single-4way.blob"),
            include_bytes!("../../../models/single-4way.int8.blob"),
        ];
        crate::io_bank!(TestBank);
        for blob in blobs {
            let ctl = cabinet::<TestBank>(Some(blob)).unwrap();
            assert_eq!(ctl.policy_status(), Ok(1));
        }
    }
}
