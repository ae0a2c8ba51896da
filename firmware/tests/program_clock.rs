//! The program clock on the firmware: a policy exported with `program_clock` reads one
//! pseudo-lane per phase after the detector lanes, set for the phase the junction's own
//! program serves; the firmware writes them itself at its uptime.

mod common;

use common::synthetic::synthetic_blob;
use common::*;
use greenwave_core::{ActionSource, Millis, ObsLayout, PhaseId};
use greenwave_firmware::{
    BoardConfig, ClockStage, Controller, ControllerError, FallbackReason, ProgramClock,
    ProgramClockError,
};

/// The single-4way plan's 12 signal groups with loops on 8 lanes (lane i feeds movement i):
/// 8 detector lanes and the clock's 4 make the 12-lane layout, 31 floats.
type ClockCabinet<'b> = Controller<'b, LampOut, FieldIn, FieldIn, FieldClock, 12, 8>;

fn cabinet8<'b>(field: &Shared, blob: Option<&'b [u8]>) -> ClockCabinet<'b> {
    cabinet_with(field, blob, BoardConfig::<8>::one_lane_per_movement(1, 10))
}

fn stage(phase: u8, secs: u32) -> ClockStage {
    ClockStage {
        phase,
        duration: Millis::from_secs(secs),
    }
}

/// A 60 s program whose cycle starts 7 s after the first green.
fn program() -> ProgramClock {
    let stages = [stage(0, 20), stage(1, 10), stage(2, 20), stage(3, 10)];
    ProgramClock::new(&stages, 7000).unwrap()
}

/// A blob for the layout with the clock's lanes, and the controller that runs it only
/// once it supplies them; then, over five cycles, every decision's observation marks
/// the phase the program serves at that time (the uptime less the 3 s start-up
/// all-red; density 1, queue 0), the policy acts, and the logged transitions carry the
/// same lanes. On a cabinet with 8 detector lanes (31 floats) and on the single-4way
/// cabinet's 12 (39 floats, the widest observation the firmware logs for 4 phases).
#[test]
fn the_clock_lanes_follow_the_program_from_the_first_green() {
    clock_lanes_follow_the_program(BoardConfig::<8>::one_lane_per_movement(1, 10));
    clock_lanes_follow_the_program(board());
}

fn clock_lanes_follow_the_program<const L: usize>(board: BoardConfig<L>) {
    let with_clock = ObsLayout::for_signal(L, 4, true).unwrap();
    let bytes = synthetic_blob(plan().hash(), with_clock);
    let field = Shared::default();
    let ctl = cabinet_with(&field, Some(&bytes), board);
    assert_eq!(
        ctl.policy_status(),
        Err(FallbackReason::LayoutMismatch {
            blob_lanes: L as u16 + 4,
            blob_phases: 4,
            lanes: L as u16,
            phases: 4
        }),
        "without the clock the blob's layout is not the cabinet's"
    );
    let clock = program();
    let Ok(mut ctl) = ctl.with_program_clock(&clock) else {
        panic!("the clock fits the plan and the capacity");
    };
    assert_eq!(ctl.policy_status(), Ok(1));
    assert_eq!(ctl.layout(), with_clock);

    let mut traffic = Traffic::new(L, 0.08, 3);
    let mut serial = SerialCapture::default();
    let mut seen = [0usize; 4];
    let mut decisions = Vec::new();
    while field.borrow().now_ms < 300_000 {
        field.borrow_mut().now_ms += 10;
        traffic.step(&mut field.borrow_mut(), 10);
        let report = ctl.poll();
        if report.decision.is_none() {
            continue;
        }
        let obs = ctl.observation();
        let on = clock.phase_at(report.uptime_ms - 3000).0 as usize;
        for p in 0..4 {
            let want = if p == on { 1.0 } else { 0.0 };
            assert_eq!(obs[L + p], want, "clock density, phase {p}, {report:?}");
            assert_eq!(obs[(L + 4) + L + p], 0.0, "clock queue, phase {p}");
        }
        seen[on] += 1;
        decisions.push(obs.to_vec());
        ctl.drain_transitions(&mut serial, 4).unwrap();
    }
    assert_eq!(decisions.len(), 60);
    // 20 s, 10 s, 20 s, 10 s of each 60 s cycle, sampled every 5 s.
    assert_eq!(seen, [20, 10, 20, 10]);
    assert_eq!(clock.phase_at(3000), PhaseId(3), "the cycle starts 7 s in");
    let run = Run {
        serial,
        ..Run::default()
    };
    let logged = run.transitions();
    assert_eq!(logged.len(), 59);
    assert_eq!(ctl.transitions_dropped(), 0);
    for (t, obs) in logged.iter().zip(&decisions) {
        assert_eq!(t.obs.as_slice(), obs.as_slice());
        assert_eq!(t.obs.len(), with_clock.dim());
        assert_ne!(t.source, ActionSource::Fallback, "the policy acts");
    }
}

/// A blob for the detector lanes alone stops running once the cabinet adds the clock's
/// lanes: it falls back to fixed time, naming the layouts.
#[test]
fn a_blob_without_the_clock_falls_back_once_the_clock_is_added() {
    let detectors_only = ObsLayout::for_signal(8, 4, false).unwrap();
    let bytes = synthetic_blob(plan().hash(), detectors_only);
    let field = Shared::default();
    let ctl = cabinet8(&field, Some(&bytes));
    assert_eq!(ctl.policy_status(), Ok(1));
    let clock = program();
    let Ok(ctl) = ctl.with_program_clock(&clock) else {
        panic!("the clock fits");
    };
    assert_eq!(
        ctl.policy_status(),
        Err(FallbackReason::LayoutMismatch {
            blob_lanes: 8,
            blob_phases: 4,
            lanes: 12,
            phases: 4
        })
    );
}

/// A clock with a phase the plan lacks, or one that makes the observation wider than
/// the firmware logs, is refused with the reason named.
#[test]
fn a_clock_that_does_not_fit_is_refused() {
    let field = Shared::default();
    let foreign = ProgramClock::new(&[stage(0, 30), stage(5, 30)], 0).unwrap();
    let Err(e) = cabinet8(&field, None).with_program_clock(&foreign) else {
        panic!("phase 5 is not in the plan");
    };
    assert_eq!(
        e,
        ControllerError::ProgramClock(ProgramClockError::UnknownPhase {
            stage: 1,
            phase: 5,
            n_phases: 4
        })
    );
    assert!(e.to_string().starts_with("program clock: stage 1: phase 5"));

    // Fourteen detector lanes and four clock lanes: 2·18 + 4 + 3 = 43 floats. (Without
    // the clock they fit: 35.)
    let mut board14 = BoardConfig::<14>::one_lane_per_movement(1, 10);
    board14.lanes[12].movements = board14.lanes[0].movements;
    board14.lanes[13].movements = board14.lanes[1].movements;
    let program = program();
    let Err(e) = cabinet_with(&field, None, board14).with_program_clock(&program) else {
        panic!("43 floats do not fit 40");
    };
    assert_eq!(
        e,
        ControllerError::ObservationTooLarge {
            dim: 43,
            capacity: 40
        }
    );
}

/// In place (`read_program_clock`, for a controller already in its static slot): a clock
/// that is refused leaves the controller as it was, its blob still running on the
/// detector lanes; one that fits widens the layout as `with_program_clock` does.
#[test]
fn a_clock_read_in_place_is_refused_without_a_change_or_taken() {
    let detectors_only = ObsLayout::for_signal(8, 4, false).unwrap();
    let bytes = synthetic_blob(plan().hash(), detectors_only);
    let field = Shared::default();
    let mut ctl = cabinet8(&field, Some(&bytes));
    let foreign = ProgramClock::new(&[stage(0, 30), stage(5, 30)], 0).unwrap();
    assert!(matches!(
        ctl.read_program_clock(&foreign),
        Err(ControllerError::ProgramClock(
            ProgramClockError::UnknownPhase { phase: 5, .. }
        ))
    ));
    assert_eq!(ctl.policy_status(), Ok(1));
    assert_eq!(ctl.layout(), detectors_only);

    let clock = program();
    ctl.read_program_clock(&clock).unwrap();
    assert_eq!(ctl.layout().n_lanes, 12);
    assert_eq!(
        ctl.policy_status(),
        Err(FallbackReason::LayoutMismatch {
            blob_lanes: 8,
            blob_phases: 4,
            lanes: 12,
            phases: 4
        })
    );
}

/// A clock read mid-run ends the decision pending under the layout it was observed in: no
/// logged record pairs an observation of one layout with a next of the other.
#[test]
fn a_clock_read_mid_run_logs_no_record_of_two_layouts() {
    let detectors_only = ObsLayout::for_signal(8, 4, false).unwrap();
    let bytes = synthetic_blob(plan().hash(), detectors_only);
    let field = Shared::default();
    let mut ctl = cabinet8(&field, Some(&bytes));
    let mut serial = SerialCapture::default();
    let clock = program();
    let mut traffic = Traffic::new(8, 0.08, 3);
    for poll in 0..6_000 {
        if poll == 3_001 {
            ctl.read_program_clock(&clock).unwrap();
        }
        field.borrow_mut().now_ms += 10;
        traffic.step(&mut field.borrow_mut(), 10);
        ctl.poll();
        ctl.drain_transitions(&mut serial, 4).unwrap();
    }
    let run = Run {
        serial,
        ..Run::default()
    };
    let logged = run.transitions();
    assert!(logged.len() > 8, "{} records", logged.len());
    assert!(logged.iter().any(|t| t.done), "the pending one ended");
    for t in &logged {
        assert_eq!(t.obs.len(), t.next_obs.len(), "{t:?}");
    }
}
