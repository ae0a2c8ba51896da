//! The controller loop on a simulated field: full signal cycles (fixed time and policy),
//! the transitions it logs, and the fallback when the blob cannot be trusted.

mod common;

use common::synthetic::{synthetic_blob, synthetic_mlp};
use common::*;
use greenwave_core::mlp::{masked_argmax, BlobError, MlpBlob};
use greenwave_core::{
    ActionSource, Millis, MovementId, ObsLayout, PhaseMask, PhasePlan, PhaseTiming,
};
use greenwave_firmware::controller::SCRUB_BYTES_PER_POLL;
use greenwave_firmware::policy::MAX_LAYER_WIDTH;
use greenwave_firmware::{FallbackReason, Lamps, Mode};

fn layout() -> ObsLayout {
    ObsLayout {
        n_lanes: 12,
        n_phases: 4,
    }
}

fn policy_blob(int8: bool) -> Vec<u8> {
    synthetic_mlp(plan().hash(), layout(), 64, 7)
        .to_blob(int8)
        .unwrap()
}

/// Order and timing of every change, in fixed time: start-up all-red, then each phase
/// green for its split, 3 s yellow, 2 s all-red, phases in order.
#[test]
fn fixed_time_cycles_have_full_yellow_and_all_red() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    assert_eq!(ctl.policy_status(), Err(FallbackReason::NoBlob));
    let mut run = Run::default();
    run_for(&mut ctl, &field, None, 300_000, &mut || 10, &mut run);
    assert_eq!(ctl.mode(), Mode::Running);
    let yellows = check_timeline(&plan(), &run.timeline, 10);
    // One cycle: 12 + 6 + 12 + 6 s of green + 4 × 5 s of change = 56 s.
    assert!(yellows >= 5 * 4, "{yellows} yellows");
    // Exact times for group 1 (N through, phase 0): green at 3 s (after start-up all-red),
    // yellow at 15 s, red at 18 s, green again after one 56 s cycle.
    let g1: Vec<(u32, Lamps)> = run
        .timeline
        .of(1)
        .iter()
        .map(|c| (c.at_ms, c.lamps))
        .collect();
    assert_eq!(
        &g1[..5],
        &[
            (10, Lamps::RED),
            (3000, Lamps::GREEN),
            (15_000, Lamps::YELLOW),
            (18_000, Lamps::RED),
            (59_000, Lamps::GREEN),
        ]
    );
    // Group 0 (N left, phase 1) follows phase 0's all-red.
    let g0 = run.timeline.of(0);
    assert_eq!((g0[1].at_ms, g0[1].lamps), (20_000, Lamps::GREEN));
    assert_eq!((g0[2].at_ms, g0[2].lamps), (26_000, Lamps::YELLOW));
    assert_eq!(ctl.clock_slip_ms(), 0, "10 ms polls divide every timing");
    assert!(run
        .decisions
        .iter()
        .all(|(_, d)| d.source == ActionSource::Fallback));
}

/// The actuated fallback (greenwave-core's rule on the stop-bar loops): a green held by a
/// vehicle on its stop bar runs to the rule's max green, then goes to the next phase with a
/// call, skipping phases nobody waits for; with no vehicle anywhere the green rests (until
/// the plan's max green).
#[test]
fn actuated_fallback_extends_on_the_stop_bar_and_skips_uncalled_phases() {
    use greenwave_core::{ActuatedSignal, Millis};
    let served_greens = |occupied: &[usize]| -> (Vec<u8>, Run) {
        let field = Shared::default();
        let p = plan();
        for &phase in occupied {
            let lane = p.phases()[phase].movements.iter().next().unwrap().0 as usize;
            field.borrow_mut().loops.insert((lane, 1), true);
        }
        let rule = ActuatedSignal::new(1.0, &[Millis::from_secs(20); 4]);
        let mut ctl = cabinet(&field, None).with_actuated(rule);
        let mut run = Run::default();
        run_for(&mut ctl, &field, None, 200_000, &mut || 10, &mut run);
        let mut greens: Vec<u8> = Vec::new();
        for (_, d) in &run.decisions {
            if greens.last() != Some(&d.served) {
                greens.push(d.served);
            }
        }
        (greens, run)
    };
    let (greens, run) = served_greens(&[0, 2]);
    assert!(greens.len() >= 6, "{greens:?}");
    assert!(
        greens.iter().enumerate().all(|(k, &g)| g == [0, 2][k % 2]),
        "{greens:?}"
    );
    assert!(run
        .decisions
        .iter()
        .all(|(_, d)| d.source == ActionSource::Fallback));
    check_timeline(&plan(), &run.timeline, 12);
    // Phase 0's green lasts its 20 s max green (from 3 s, after the start-up all-red).
    let group1 = |run: &Run| -> Vec<(u32, Lamps)> {
        run.timeline
            .of(1)
            .iter()
            .map(|c| (c.at_ms, c.lamps))
            .collect()
    };
    assert_eq!(
        &group1(&run)[1..3],
        &[(3000, Lamps::GREEN), (23_000, Lamps::YELLOW)]
    );
    // No call anywhere: the green rests past the rule's max green, until the plan's max
    // green (30 s, the sequencer's) moves it on.
    let (idle, run) = served_greens(&[]);
    assert_eq!(&idle[..4], &[0, 1, 2, 3]);
    assert_eq!(
        &group1(&run)[1..3],
        &[(3000, Lamps::GREEN), (33_000, Lamps::YELLOW)]
    );
}

/// A plan without all-red ends a yellow and starts the next green in one poll: the heads
/// are written so that no single write leaves a green beside a conflicting green or yellow.
#[test]
fn no_output_write_shows_a_green_beside_a_conflicting_yellow() {
    let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 0)).unwrap();
    let field = Shared::default();
    let conflicts = plan.conflicts();
    let n = plan.movements().len();
    field.borrow_mut().watch_conflicts = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .filter(|&(a, b)| conflicts.conflicts(MovementId(a as u8), MovementId(b as u8)))
        .collect();
    assert!(!field.borrow().watch_conflicts.is_empty());
    let mut ctl = cabinet_of(&field, None, board(), plan.clone());
    let mut run = Run::default();
    run_for(&mut ctl, &field, None, 300_000, &mut || 10, &mut run);
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    assert!(check_timeline(&plan, &run.timeline, 10) >= 20);
    assert_eq!(field.borrow().conflicts_between_writes, 0);
}

/// Polls at irregular intervals (1–37 ms): intervals start on poll instants, so no
/// yellow is ever shown short, and the monitor never trips.
#[test]
fn jittery_polls_never_shorten_a_yellow() {
    let field = Shared::default();
    let mut ctl = cabinet(&field, None);
    let mut rng = Rng(99);
    let mut run = Run::default();
    run_for(
        &mut ctl,
        &field,
        None,
        400_000,
        &mut || 1 + rng.below(37) as u32,
        &mut run,
    );
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    let yellows = check_timeline(&plan(), &run.timeline, 37);
    assert!(yellows > 20);
    assert!(ctl.clock_slip_ms() > 0);
}

/// A fixed cycle whose next stage is the green phase again (here one stage) holds the green
/// until max green forces the change: jittery polls, and a poll stalled for seconds, still
/// start every yellow on a poll and show it whole (the split served, the firmware used to
/// advance its sequencer by a whole poll, past max green into the yellow).
#[test]
fn a_fixed_cycle_that_holds_its_green_never_shortens_the_forced_yellow() {
    use greenwave_core::control::CycleStage;
    let field = Shared::default();
    let stage = CycleStage {
        phase: 0,
        green: Millis::from_secs(12),
    };
    let fixed = greenwave_firmware::FixedCycle::new(&[stage]).unwrap();
    let mut ctl = cabinet_cycling(&field, None, board(), plan(), fixed);
    let mut rng = Rng(7);
    let mut run = Run::default();
    let mut polls = 0u32;
    let mut poll = || {
        polls += 1;
        match polls % 997 {
            0 => 4_000,
            _ => 1 + rng.below(37) as u32,
        }
    };
    run_for(&mut ctl, &field, None, 400_000, &mut poll, &mut run);
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    let yellows = check_timeline(&plan(), &run.timeline, 4_000);
    assert!(yellows > 10, "{yellows} yellows");
}

/// Policy mode with traffic: decisions every 5 s, transitions framed over serial, decoded
/// by the host reader, each consistent with the next.
#[test]
fn policy_cycles_and_logged_transitions() {
    for int8 in [false, true] {
        let bytes = policy_blob(int8);
        let field = Shared::default();
        let mut ctl = cabinet(&field, Some(&bytes));
        assert_eq!(ctl.policy_status(), Ok(1));
        let run = run_in_traffic(&mut ctl, &field, 600_000);
        // Decisions at 3 s, 8 s, ...: one every 5 s after the start-up all-red.
        assert_eq!(run.decisions.len(), 120);
        assert!(run.decisions.windows(2).all(|w| w[1].0 - w[0].0 == 5000));
        let changes = run.timeline.of(1).len();
        assert!(
            changes > 6,
            "the policy switches phases ({changes} changes of group 1)"
        );
        let ts = run.transitions();
        assert_eq!(ts.len(), 119, "every decision but the last is complete");
        assert_eq!(ctl.transitions_dropped(), 0);
        let blob = MlpBlob::parse(&bytes).unwrap();
        let mut scratch = [0.0f32; 2 * MAX_LAYER_WIDTH];
        let mut logits = [0.0f32; 4];
        for (k, t) in ts.iter().enumerate() {
            assert_eq!(t.obs.len(), 31);
            assert_eq!(t.signal, 1);
            assert_eq!(t.policy_version, 1);
            assert_eq!(t.timestamp_ms, run.decisions[k].0);
            assert!(t.reward <= 0.0 && t.reward.is_finite());
            assert!(matches!(
                t.source,
                ActionSource::Policy | ActionSource::Supervisor
            ));
            if let Some(next) = ts.get(k + 1) {
                assert_eq!(t.next_obs, next.obs, "s' of one record is s of the next");
            }
            // The request is the blob's masked argmax under the mask the observation
            // implies, and the cabinet takes it with probability 1: log π = 0 (the
            // fine-tune gate's behaviour probability).
            blob.forward(&t.obs, &mut scratch, &mut logits).unwrap();
            let min_green_served = t.obs[29] == 1.0;
            let mask = if min_green_served {
                PhaseMask(0b1111)
            } else {
                PhaseMask(1 << t.obs[24..28].iter().position(|&x| x == 1.0).unwrap())
            };
            assert_eq!(masked_argmax(&logits, mask), Some(t.requested));
            assert_eq!(t.log_prob, 0.0);
        }
        // Queues build up on red lanes: some record shows a queue.
        assert!(ts.iter().any(|t| t.obs[12..24].iter().any(|&q| q > 0.0)));
        let counted: u32 = ctl
            .lane_estimates()
            .iter()
            .map(|e| e.entry.count as u32)
            .sum();
        assert!(
            counted < 12 * 5,
            "per-interval counts are plausible: {counted}"
        );
    }
}

/// A missing, corrupt, foreign or too-large blob selects the fixed-time program, with the
/// reason named; the controller still cycles.
#[test]
fn untrusted_blobs_fall_back_to_fixed_time() {
    let good = policy_blob(false);
    let mut corrupt = good.clone();
    corrupt.truncate(good.len() - 3);
    // One bit flipped in a weight (flash damage): the CRC-32 no longer matches.
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x04;
    let body = &flipped[..flipped.len() - 4];
    let stored = u32::from_le_bytes(flipped[flipped.len() - 4..].try_into().unwrap());
    let computed = greenwave_firmware::frames::crc32(body);
    // Cut short (a flash write that stopped): the last four bytes are no CRC of the rest.
    let corrupt_reason = FallbackReason::Corrupt(BlobError::Checksum {
        stored: u32::from_le_bytes(corrupt[corrupt.len() - 4..].try_into().unwrap()),
        computed: greenwave_firmware::frames::crc32(&corrupt[..corrupt.len() - 4]),
    });
    let foreign = synthetic_blob(plan().hash() ^ 1, layout());
    let other_layout = ObsLayout::for_signal(8, 4, false).unwrap();
    let wrong_layout = synthetic_blob(plan().hash(), other_layout);
    let too_wide = synthetic_mlp(plan().hash(), layout(), 128, 7)
        .to_blob(true)
        .unwrap();
    let cases: [(&[u8], FallbackReason); 5] = [
        (&corrupt, corrupt_reason),
        (
            &flipped,
            FallbackReason::Corrupt(BlobError::Checksum { stored, computed }),
        ),
        (
            &foreign,
            FallbackReason::PlanMismatch {
                blob_plan_hash: plan().hash() ^ 1,
                plan_hash: plan().hash(),
            },
        ),
        (
            &wrong_layout,
            FallbackReason::LayoutMismatch {
                blob_lanes: 8,
                blob_phases: 4,
                lanes: 12,
                phases: 4,
            },
        ),
        (
            &too_wide,
            FallbackReason::TooWide {
                width: 128,
                max: 64,
            },
        ),
    ];
    for (bytes, reason) in cases {
        let field = Shared::default();
        let mut ctl = cabinet(&field, Some(bytes));
        assert_eq!(ctl.policy_status(), Err(reason));
        let mut run = Run::default();
        run_for(&mut ctl, &field, None, 120_000, &mut || 100, &mut run);
        assert!(check_timeline(&plan(), &run.timeline, 100) >= 8);
        assert!(run
            .transitions()
            .iter()
            .all(|t| t.source == ActionSource::Fallback && t.log_prob == 0.0));
    }
    let msg = format!(
        "{}",
        FallbackReason::PlanMismatch {
            blob_plan_hash: 1,
            plan_hash: 2
        }
    );
    assert_eq!(
        msg,
        "policy blob is for plan 0x0000000000000001, this controller runs plan 0x0000000000000002"
    );
}

/// A bit that flips in flash while the policy runs is found by the blob check within two
/// passes over the blob (`SCRUB_BYTES_PER_POLL` bytes a poll), and the fallback takes over
/// through full clearances; on a sound blob, for ten minutes before it (hundreds of
/// passes), the policy runs throughout.
#[test]
fn a_blob_damaged_while_running_is_dropped_for_the_fallback() {
    let good = policy_blob(false);
    let mut flipped = good.clone();
    flipped[good.len() / 3] ^= 0x10;
    let stored = u32::from_le_bytes(good[good.len() - 4..].try_into().unwrap());
    let computed = greenwave_firmware::frames::crc32(&flipped[..flipped.len() - 4]);
    let field = Shared::default();
    let mut ctl = cabinet(&field, Some(&good));
    let mut traffic = Traffic::new(12, 0.08, 3);
    let mut run = Run::default();
    let poll_ms = 10;
    run_for(
        &mut ctl,
        &field,
        Some(&mut traffic),
        600_000,
        &mut || poll_ms,
        &mut run,
    );
    assert_eq!(ctl.policy_status(), Ok(1), "a sound blob is never dropped");
    let sound = run.transitions().len();
    assert!(run
        .transitions()
        .iter()
        .all(|t| t.source != ActionSource::Fallback));
    ctl.damage_flash_under_policy(&flipped);
    let passes_ms = 2 * (good.len() - 4).div_ceil(SCRUB_BYTES_PER_POLL) as u32 * poll_ms;
    run_for(
        &mut ctl,
        &field,
        Some(&mut traffic),
        passes_ms,
        &mut || poll_ms,
        &mut run,
    );
    assert_eq!(
        ctl.policy_status(),
        Err(FallbackReason::DamagedWhileRunning(BlobError::Checksum {
            stored,
            computed
        }))
    );
    let damaged = run.transitions().len();
    run_for(
        &mut ctl,
        &field,
        Some(&mut traffic),
        300_000,
        &mut || poll_ms,
        &mut run,
    );
    let ts = run.transitions();
    assert!(
        ts.len() > damaged + 50,
        "{} decisions after",
        ts.len() - damaged
    );
    // The record open when the damage was found may be the policy's; none after it.
    assert!(ts[damaged + 1..]
        .iter()
        .all(|t| t.source == ActionSource::Fallback));
    assert!(ts[..sound].iter().all(|t| t.policy_version == 1));
    assert!(check_timeline(&plan(), &run.timeline, poll_ms) >= 8);
    assert_eq!(ctl.fault(), None);
}

/// Static RAM: the controller with zero-sized pins (as most MCU HAL pin types are) and its
/// transition ring fit the 10 kB budget (8 kB until the plan carried up to 64 intergreen
/// entries, 520 B, and the sequencer each movement's clearance clock, about 400 B; 9 kB
/// until the monitor card carried its own copy of the entries and the monitor each
/// channel's last yellow, 640 B).
#[test]
fn controller_fits_the_static_ram_budget() {
    let size = std::mem::size_of::<Cabinet>();
    let pins =
        12 * 3 * std::mem::size_of::<LampOut>() + (12 * 3 + 24) * std::mem::size_of::<FieldIn>();
    let without_pins = size - pins;
    println!("controller: {size} bytes with the test pins, {without_pins} bytes of state");
    assert!(without_pins <= 10_240, "{without_pins} bytes");
}

/// Bad configuration is refused before the first poll, naming what is wrong.
#[test]
fn bad_configuration_is_refused_with_the_field_named() {
    use greenwave_firmware::monitor::CardError;
    use greenwave_firmware::{Controller, ControllerError, FixedCycle, MonitorCard};
    let build = |board: greenwave_firmware::BoardConfig<12>, card: MonitorCard| {
        let field = Shared::default();
        let plan = plan();
        let fixed = FixedCycle::midpoint(&plan);
        Controller::<_, _, _, _, 12, 12>::new(
            plan,
            board,
            field_pins(&field),
            card,
            fixed,
            None,
            FieldClock(field.clone()),
        )
        .err()
    };
    let card = MonitorCard::from_plan(&plan(), Millis(250));
    let mut b = board();
    b.lanes[3].storage_veh = 0;
    assert_eq!(
        build(b, card),
        Some(ControllerError::LaneStorage { lane: 3 })
    );
    let mut b = board();
    b.lanes[5].movements = greenwave_core::MovementSet::from_ids(&[12]);
    assert_eq!(
        build(b, card),
        Some(ControllerError::LaneMovements {
            lane: 5,
            movements: 1 << 12
        })
    );
    let mut b = board();
    b.decision_interval = Millis::ZERO;
    let err = build(b, card).unwrap();
    assert_eq!(
        format!("{err}"),
        "board setting decision_interval must be at least 1 ms"
    );
    let mut b = board();
    b.max_clearance_step = Millis::ZERO;
    let err = build(b, card).unwrap();
    assert_eq!(
        format!("{err}"),
        "board setting max_clearance_step must be at least 1 ms"
    );
    let long_yellow =
        MonitorCard::new(&[], &[Millis(4000); 12], &[Millis(2000); 12], Millis(250)).unwrap();
    assert!(matches!(
        build(board(), long_yellow),
        Some(ControllerError::MonitorCard(CardError::YellowBelowCard {
            phase: 0,
            ..
        }))
    ));
    // A card asking an intergreen the plan does not keep (it switches on 3 s yellow and
    // 2 s all-red, and has no entries) is refused, naming the pair.
    let (a, b) = intergreen_pairs(&plan())[0];
    let entry = greenwave_core::Intergreen {
        from: a,
        to: b,
        time: Millis(6000),
    };
    let strict = card.with_intergreens(&[entry]).unwrap();
    let err = build(board(), strict).unwrap();
    assert!(
        matches!(
            err,
            ControllerError::MonitorCard(CardError::IntergreenBelowCard {
                from,
                to,
                switch: Millis(5000),
                required: Millis(6000),
                ..
            }) if (from, to) == (a.0, b.0)
        ),
        "{err}"
    );
}

/// Every ordered pair of conflicting movements that some phase serves without the other.
fn intergreen_pairs(
    plan: &greenwave_core::PhasePlan,
) -> Vec<(greenwave_core::MovementId, greenwave_core::MovementId)> {
    use greenwave_core::MovementId;
    let n = plan.movements().len() as u8;
    let serves = |m: MovementId| plan.phases().iter().any(|p| p.movements.contains(m));
    (0..n)
        .flat_map(|a| (0..n).map(move |b| (MovementId(a), MovementId(b))))
        .filter(|&(a, b)| plan.conflicts().conflicts(a, b) && serves(a) && serves(b))
        .collect()
}

/// The single-4way plan with entries of 6–9 s (its switches give 5 s) for every third
/// conflicting pair.
fn intergreen_plan() -> greenwave_core::PhasePlan {
    let entries: Vec<greenwave_core::Intergreen> = intergreen_pairs(&plan())
        .into_iter()
        .enumerate()
        .filter(|(k, _)| k % 3 == 0)
        .map(|(k, (from, to))| greenwave_core::Intergreen {
            from,
            to,
            time: Millis(6000 + 1000 * (k as u32 % 4)),
        })
        .collect();
    assert!(entries.len() >= 8, "{} entries", entries.len());
    plan().with_intergreens(&entries).unwrap()
}

/// For every green start of a movement with entries into it: how long since each entry's
/// `from` last began its yellow (its green's end), asserted at least the entry. Returns how
/// many (start, entry) pairs were checked.
fn check_intergreens(plan: &greenwave_core::PhasePlan, t: &Timeline) -> usize {
    let mut checked = 0;
    for e in plan.intergreens() {
        let from = t.of(e.from.0 as usize);
        for start in t.of(e.to.0 as usize).windows(2) {
            if (start[0].lamps, start[1].lamps) != (Lamps::RED, Lamps::GREEN) {
                continue;
            }
            let at = start[1].at_ms;
            let Some(ended) = from
                .iter()
                .rev()
                .find(|c| c.lamps == Lamps::YELLOW && c.at_ms <= at)
                .map(|c| c.at_ms)
            else {
                continue;
            };
            assert!(
                at - ended >= e.time.0,
                "movement {} green at {at} ms, {} ms after movement {}'s green ended; entry {} ms",
                e.to.0,
                at - ended,
                e.from.0,
                e.time.0
            );
            checked += 1;
        }
    }
    checked
}

/// A plan whose intergreens are longer than its switches' yellow and all-red: the card the
/// plan implies carries them, and under a policy (a blob for that plan) in traffic, polled
/// at irregular intervals, every entry is kept on the lamps and the monitor, which checks
/// them, never trips.
#[test]
fn plan_intergreens_are_kept_and_monitored() {
    let plan = intergreen_plan();
    let card = greenwave_firmware::MonitorCard::from_plan(&plan, Millis(250));
    assert_eq!(card.intergreens(), plan.intergreens());
    assert_eq!(card.check_plan(&plan), Ok(()));
    let bytes = synthetic_mlp(plan.hash(), layout(), 64, 7)
        .to_blob(false)
        .unwrap();
    let field = Shared::default();
    // The start-up all-red must keep the plan's longest red clearance (6 s here).
    let mut short = board();
    short.startup_all_red = Millis::from_secs(5);
    let refused = greenwave_firmware::Controller::new(
        plan.clone(),
        short,
        field_pins(&field),
        card,
        greenwave_firmware::FixedCycle::midpoint(&plan),
        None,
        FieldClock(field.clone()),
    );
    let refused: Result<Cabinet, _> = refused;
    assert!(
        matches!(refused.err(), Some(greenwave_firmware::ControllerError::BoardTiming { field: "startup_all_red", least }) if least == Millis::from_secs(6)),
        "the short start-up all-red was not refused"
    );
    let mut long_enough = board();
    long_enough.startup_all_red = Millis::from_secs(6);
    let mut ctl = cabinet_of(&field, Some(&bytes), long_enough, plan.clone());
    assert_eq!(ctl.policy_status(), Ok(1));
    let mut traffic = Traffic::new(12, 0.08, 3);
    let mut rng = Rng(7);
    let mut run = Run::default();
    run_for(
        &mut ctl,
        &field,
        Some(&mut traffic),
        900_000,
        &mut || 1 + rng.below(37) as u32,
        &mut run,
    );
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    check_timeline(&plan, &run.timeline, 37);
    let checked = check_intergreens(&plan, &run.timeline);
    assert!(
        checked > 20,
        "{checked} green starts after an entry's movement"
    );
}

/// A policy that only ever asks for phase 0 still lets every phase whose stop-bar loops
/// call show green: the max-red rule (as in training and on the host controller) serves
/// a phase with a call kept from green for `max_red`, and logs the decision it overrules
/// as the supervisor's with the policy's request kept.
#[test]
fn the_max_red_rule_serves_phases_a_policy_never_asks_for() {
    let mut stubborn = synthetic_mlp(plan().hash(), layout(), 64, 7);
    let head = stubborn.layers.last_mut().unwrap();
    head.weights.fill(0.0);
    head.bias = vec![1.0, 0.0, -1.0, -2.0];
    let bytes = stubborn.to_blob(false).unwrap();
    let served = |max_red: Millis| {
        let field = Shared::default();
        let mut ctl = cabinet(&field, Some(&bytes)).with_max_red(max_red);
        let run = run_in_traffic(&mut ctl, &field, 1_200_000);
        run.decisions
    };
    // As good as off: max green only ever forces the next phase, so phases 2 and 3 wait.
    let off = served(Millis(u32::MAX));
    assert!(
        off.iter().all(|(_, d)| d.served <= 1),
        "phases 2 and 3 never served"
    );
    let on = served(Millis::from_secs(120));
    for phase in 0..4 {
        assert!(
            on.iter().any(|(_, d)| d.served == phase),
            "phase {phase} is served"
        );
    }
    // The decisions that started those greens: the policy asked for phase 0, the
    // supervisor served the phase kept waiting.
    assert!(on
        .iter()
        .any(|(_, d)| d.requested == 0 && d.served >= 2 && d.source == ActionSource::Supervisor));
}

/// A loop that cannot be read makes its intervals' observations untrusted: the fixed-time
/// fallback serves those decisions, and no transition with such an observation (as `obs`
/// or `next_obs`) is stored for fine-tuning; each is counted instead. Once the loop reads
/// again, transitions are stored again.
#[test]
fn transitions_with_an_untrusted_observation_are_counted_not_stored() {
    let bytes = policy_blob(false);
    let field = Shared::default();
    let mut ctl = cabinet(&field, Some(&bytes));
    let mut traffic = Traffic::new(12, 0.08, 3);
    let mut run = Run::default();
    // 60 s healthy, 30 s with lane 2's stop-bar loop failing, 60 s healthy again.
    let mut healthy = 0;
    for (ms, failing) in [(60_000, false), (30_000, true), (60_000, false)] {
        field.borrow_mut().failing_loops = if failing { vec![(2, 1)] } else { vec![] };
        let before = run.decisions.len();
        run_for(
            &mut ctl,
            &field,
            Some(&mut traffic),
            ms,
            &mut || 10,
            &mut run,
        );
        if failing {
            let sources: Vec<_> = run.decisions[before..].iter().map(|d| d.1.source).collect();
            assert!(
                sources.iter().all(|&s| s == ActionSource::Fallback),
                "{sources:?}"
            );
        } else if healthy == 0 {
            healthy = run.transitions().len();
            assert_eq!(ctl.transitions_untrusted(), 0);
        }
    }
    assert_eq!(ctl.mode(), Mode::Running, "{:?}", ctl.fault());
    // 7 observations saw failed reads (63 s to 88 s, and 93 s, whose interval began
    // before the loop came back): the 8 transitions that have one as obs or next_obs.
    let untrusted = ctl.transitions_untrusted();
    assert_eq!(untrusted, 8, "transitions dropped as untrusted");
    let ts = run.transitions();
    assert_eq!(ts.len() as u32 + untrusted, run.decisions.len() as u32 - 1);
    assert!(ts.len() > healthy + 5, "stored again after the fault");
    assert_eq!(ctl.transitions_dropped(), 0);
}

/// Finite weights whose logits overflow (a hidden layer saturated at 1, the last layer's
/// weights at 1e38): the decision is refused, as the host runtime refuses any non-finite
/// logit, so the controller falls back instead of serving the phase +inf picked.
#[test]
fn a_logit_that_overflows_is_refused_not_served() {
    use greenwave_firmware::policy::{DecideError, Policy, SCRATCH_FLOATS};
    let mut mlp = synthetic_mlp(plan().hash(), layout(), 64, 7);
    let last = mlp.layers.len() - 1;
    for (k, l) in mlp.layers.iter_mut().enumerate() {
        let (w, b) = if k == last { (1e38, 0.0) } else { (0.0, 10.0) };
        l.weights.iter_mut().for_each(|x| *x = w);
        l.bias.iter_mut().for_each(|x| *x = b);
    }
    let blob = mlp.to_blob(false).unwrap();
    let policy = Policy::load(Some(&blob), plan().hash(), layout()).unwrap();
    let obs = vec![0.5; layout().dim()];
    let mut scratch = [0.0; SCRATCH_FLOATS];
    let got = policy.decide(&obs, PhaseMask(0b1111), &mut scratch);
    assert_eq!(got, Err(DecideError::NonFiniteLogit));
}
