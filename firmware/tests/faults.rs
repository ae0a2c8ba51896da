//! Fault injection on the simulated field: the monitor latches flash (all red flashing) on
//! a stuck-on green, a short yellow, a green during all-red, a conflict or a failed output,
//! and only an explicit reset clears it.

mod common;

use common::synthetic::synthetic_blob;
use common::*;
use greenwave_core::{ActionSource, Millis, ObsLayout};
use greenwave_firmware::heads::Lamp;
use greenwave_firmware::{FaultKind, Lamps, Mode};

fn advance(ctl: &mut Cabinet, field: &Shared, ms: u32, run: &mut Run) {
    run_for(ctl, field, None, ms, &mut || 10, run);
}

/// Checks the flash pattern for `ms`: every yellow and green off, every red on for 500 ms
/// and off for 500 ms, starting lit when the fault latched.
fn assert_flashing(ctl: &mut Cabinet, field: &Shared, latched_at_ms: u64, ms: u32) {
    let mut run = Run::default();
    let end = field.borrow().now_ms + ms;
    while field.borrow().now_ms < end {
        field.borrow_mut().now_ms += 10;
        let report = ctl.poll();
        assert_eq!(report.mode, Mode::Flash);
        assert!(report.decision.is_none(), "no decision in flash");
        let f = field.borrow();
        let lit = ((report.uptime_ms - latched_at_ms) / 500) % 2 == 0;
        for g in 0..12 {
            let want = if lit { Lamps::RED } else { Lamps::DARK };
            assert_eq!(f.driven_lamps(g), want, "group {g} at {} ms", f.now_ms);
        }
        drop(f);
        run.reports += 1;
    }
}

#[test]
fn stuck_on_green_latches_flash_until_reset() {
    let bytes = synthetic_blob(plan().hash(), ObsLayout::for_signal(12, 4, false).unwrap());
    let field = Shared::default();
    let mut ctl = cabinet(&field, Some(&bytes));
    let mut run = Run::default();
    // Phase 0 is green from 3 s; the policy holds it at least to min green (8 s).
    advance(&mut ctl, &field, 6000, &mut run);
    assert_eq!(ctl.mode(), Mode::Running);
    // Group 1's green load switch welds shut: its green lamp stays lit whatever is driven.
    field
        .borrow_mut()
        .sense_faults
        .insert((1, 2), SenseFault::Stuck(true));
    advance(&mut ctl, &field, 60_000, &mut run);
    let fault = ctl.fault().expect("latched");
    // The first change away from phase 0 shows yellow and green together on group 1;
    // the monitor latches after the 250 ms persistence.
    assert!(
        matches!(
            fault.kind,
            FaultKind::MultipleIndications { channel: 1 } | FaultKind::Conflict { .. }
        ),
        "{fault:?}"
    );
    assert_eq!(ctl.mode(), Mode::Flash);
    // The policy keeps no say: minutes later, still flashing, no decisions.
    assert_flashing(&mut ctl, &field, fault.at_ms, 120_000);
    assert_eq!(ctl.fault(), Some(fault));
    // The last transition before the fault closes the episode.
    let ts = run.transitions();
    assert!(ts.last().unwrap().done);
    assert!(ts[..ts.len() - 1].iter().all(|t| !t.done));
    // Reset with the fault still there: start-up all-red shows red + green on group 1 → flash.
    ctl.reset_from_flash();
    assert_eq!(ctl.mode(), Mode::StartupAllRed);
    advance(&mut ctl, &field, 1000, &mut run);
    assert_eq!(ctl.mode(), Mode::Flash);
    assert_eq!(
        ctl.fault().unwrap().kind,
        FaultKind::MultipleIndications { channel: 1 }
    );
    // Repaired and reset: back to normal cycling.
    field.borrow_mut().sense_faults.clear();
    ctl.reset_from_flash();
    let mut after = Run::default();
    advance(&mut ctl, &field, 120_000, &mut after);
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    assert!(check_timeline(&plan(), &after.timeline, 10) > 4);
}

/// A fault that latches in a green cuts that green's yellow and all-red (flash shows red at
/// once): a reset right after it holds the plan's longest switch (3 s yellow + 2 s all-red)
/// on top of the start-up all-red before any green.
#[test]
fn a_reset_right_after_a_fault_in_a_green_clears_the_junction_first() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    let mut run = Run::default();
    // Phase 0 is green from 3 s (group 1 among its movements).
    advance(&mut ctl, &field, 5000, &mut run);
    assert!(field.borrow().driven_lamps(1).green);
    // Group 1's red lamp reads lit beside its green: flash within the persistence.
    field
        .borrow_mut()
        .sense_faults
        .insert((1, 0), SenseFault::Stuck(true));
    advance(&mut ctl, &field, 500, &mut run);
    assert_eq!(ctl.mode(), Mode::Flash, "{:?}", ctl.fault());
    field.borrow_mut().sense_faults.clear();
    ctl.reset_from_flash();
    let all_red = poll_until(&mut ctl, &field, 20_000, |f| {
        (0..12).any(|g| f.driven_lamps(g).green)
    });
    let required = board().startup_all_red.0 + 5_000;
    assert!(
        all_red >= required,
        "green {all_red} ms after the reset, want ≥ {required}"
    );
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
}

#[test]
fn short_yellow_latches_flash() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    // Group 1's load switch turns its yellow into red after 1 s.
    field.borrow_mut().yellow_cut = Some((1, 1000));
    let mut run = Run::default();
    advance(&mut ctl, &field, 30_000, &mut run);
    let fault = ctl.fault().expect("latched");
    // Phase 0 green 3–15 s (12 s split), yellow from 15 s, cut at 16 s.
    assert_eq!(
        fault.kind,
        FaultKind::ShortYellow {
            channel: 1,
            shown: Millis(1000),
            required: Millis(3000)
        }
    );
    assert_eq!(fault.at_ms, 16_000);
    assert_flashing(&mut ctl, &field, fault.at_ms, 5000);
    assert!(run
        .transitions()
        .iter()
        .all(|t| t.source == ActionSource::Fallback));
}

#[test]
fn green_during_all_red_latches_flash() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    let mut run = Run::default();
    let plan = plan();
    let (first, second) = (plan.phases()[0].movements, plan.phases()[1].movements);
    // A channel of the second phase that conflicts with one of the first.
    let next = second
        .iter()
        .find(|&m| !plan.conflicts().foes(m).and(first).is_empty())
        .expect("the plan's second phase conflicts with its first")
        .0 as usize;
    // Run until the first phase's yellow has ended (all its channels red), then 500 ms
    // into the all-red.
    advance(&mut ctl, &field, 5000, &mut run);
    let mut clearing_since = None;
    while clearing_since.is_none() {
        advance(&mut ctl, &field, 10, &mut run);
        let f = field.borrow();
        if first
            .iter()
            .all(|m| f.driven_lamps(m.0 as usize) == Lamps::RED)
        {
            clearing_since = Some(f.now_ms);
        }
    }
    advance(&mut ctl, &field, 490, &mut run);
    assert_eq!(ctl.mode(), Mode::Running);
    // The next phase's load switch closes early: its green shows during the all-red.
    {
        let mut f = field.borrow_mut();
        f.sense_faults.insert((next, 0), SenseFault::Stuck(false));
        f.sense_faults.insert((next, 2), SenseFault::Stuck(true));
    }
    advance(&mut ctl, &field, 10, &mut run);
    let fault = ctl.fault().expect("latched");
    match fault.kind {
        FaultKind::ShortRedClearance {
            channel,
            next: n,
            shown,
            required,
        } => {
            assert_eq!(n as usize, next);
            assert!(first.contains(greenwave_core::MovementId(channel)));
            assert_eq!(shown, Millis(500));
            assert_eq!(required, Millis(2000));
        }
        other => panic!("expected a short red clearance, got {other:?}"),
    }
    assert_eq!(fault.at_ms, clearing_since.unwrap() as u64 + 500);
    assert_flashing(&mut ctl, &field, fault.at_ms, 5000);
}

#[test]
fn conflicting_green_latches_after_persistence() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    let mut run = Run::default();
    advance(&mut ctl, &field, 5000, &mut run);
    // Group 4 (east through) shows green in the field while group 1 (north through) is green.
    {
        let mut f = field.borrow_mut();
        f.sense_faults.insert((4, 0), SenseFault::Stuck(false));
        f.sense_faults.insert((4, 2), SenseFault::Stuck(true));
    }
    advance(&mut ctl, &field, 1000, &mut run);
    let fault = ctl.fault().expect("latched");
    assert_eq!(fault.kind, FaultKind::Conflict { a: 1, b: 4 });
    assert_eq!(fault.at_ms, 5010 + 250, "after the 250 ms persistence");
}

#[test]
fn failed_lamp_output_latches_flash() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    let mut run = Run::default();
    advance(&mut ctl, &field, 10_000, &mut run);
    field.borrow_mut().failing_outputs.push((1, 2));
    advance(&mut ctl, &field, 10_000, &mut run);
    let fault = ctl.fault().expect("latched");
    assert_eq!(
        fault.kind,
        FaultKind::LampOutputFailed {
            channel: 1,
            lamp: Lamp::Green
        }
    );
    assert_eq!(fault.at_ms, 15_000, "when phase 0's green had to go off");
    assert_eq!(
        format!("{}", fault.kind),
        "channel 1: green lamp output failed"
    );
}

/// Group 7 (south through) is green; its red lamp sense sticks on: red and green together.
#[test]
fn zero_persistence_latches_on_the_first_reading() {
    let field = Shared::default();
    let mut board = board();
    board.fault_persistence = Millis::ZERO;
    let mut ctl = cabinet_with(&field, None, board);
    let mut run = Run::default();
    advance(&mut ctl, &field, 5000, &mut run);
    field
        .borrow_mut()
        .sense_faults
        .insert((7, 0), SenseFault::Stuck(true));
    advance(&mut ctl, &field, 100, &mut run);
    let fault = ctl.fault().expect("latched");
    assert_eq!(fault.kind, FaultKind::MultipleIndications { channel: 7 });
    assert_eq!(fault.at_ms, 5010);
}

/// Polls every 10 ms until `done` holds on the field (at most `limit_ms`); returns the
/// time it took.
fn poll_until(
    ctl: &mut Cabinet,
    field: &Shared,
    limit_ms: u32,
    done: impl Fn(&Field) -> bool,
) -> u32 {
    let mut waited = 0;
    while !done(&field.borrow()) {
        assert!(
            waited < limit_ms,
            "not within {limit_ms} ms; at {} ms: {:?}, {:?}",
            field.borrow().now_ms,
            ctl.mode(),
            ctl.fault()
        );
        field.borrow_mut().now_ms += 10;
        ctl.poll();
        waited += 10;
    }
    waited
}

/// Polls every 10 ms for a second, then once more after the clock jumped by `jump` ms.
fn one_second_then_jump(ctl: &mut Cabinet, field: &Shared, jump: u32) {
    for _ in 0..100 {
        field.borrow_mut().now_ms += 10;
        ctl.poll();
    }
    let now = field.borrow().now_ms;
    field.borrow_mut().now_ms = now.wrapping_add(jump);
    ctl.poll();
}

/// A clock that jumps during a green ends it no sooner than one step early either: the
/// green's split (and so its min green, and any intergreen that runs on through it) is
/// served in polled time, not in the jumped clock's.
#[test]
fn a_clock_jump_cuts_no_green() {
    let step = board().max_clearance_step.0;
    for jump in [60_000u32, u32::MAX] {
        let field = Shared::default();
        let mut ctl = cabinet(&field, None);
        let green = |f: &Field| (0..12).find(|&g| f.driven_lamps(g).green);
        poll_until(&mut ctl, &field, 10_000, |f| green(f).is_some());
        let g = green(&field.borrow()).expect("a green");
        // 1 s into the first split's green (12 s), the clock jumps.
        one_second_then_jump(&mut ctl, &field, jump);
        let rest = poll_until(&mut ctl, &field, 60_000, |f| !f.driven_lamps(g).green);
        assert!(
            rest + 1_000 + step >= SPLITS_MS[0],
            "group {g}: green ended {rest} ms after a {jump} ms jump 1 s in"
        );
        assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    }
}

/// A clock that jumps (forward a minute, or one millisecond back, which reads as 49.7
/// days on) ends no yellow, all-red or start-up all-red early: each advances by at most
/// one clearance step (250 ms) in the poll that sees the jump.
#[test]
fn a_clock_jump_cuts_no_clearance() {
    let step = board().max_clearance_step.0;
    for jump in [60_000u32, u32::MAX] {
        let field = Shared::default();
        let mut ctl = cabinet(&field, None);
        // Start-up all-red (3 s): 1 s in, the clock jumps.
        one_second_then_jump(&mut ctl, &field, jump);
        let rest = poll_until(&mut ctl, &field, 10_000, |f| f.driven_lamps(1).green);
        assert!(
            rest >= 2_000 - step,
            "start-up all-red: {rest} ms left after a {jump} ms jump"
        );
        // Group 1's first yellow (3 s): 1 s in, the clock jumps.
        poll_until(&mut ctl, &field, 60_000, |f| f.driven_lamps(1).yellow);
        one_second_then_jump(&mut ctl, &field, jump);
        let rest = poll_until(&mut ctl, &field, 10_000, |f| !f.driven_lamps(1).yellow);
        assert!(
            rest >= 2_000 - step,
            "yellow: {rest} ms left after a {jump} ms jump"
        );
        // Its all-red (2 s) before the next phase's green (group 3, east–west through).
        let clear = poll_until(&mut ctl, &field, 10_000, |f| {
            (0..12).any(|g| f.driven_lamps(g).green)
        });
        assert!(clear >= 2_000, "all-red {clear} ms");
        assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    }
}
