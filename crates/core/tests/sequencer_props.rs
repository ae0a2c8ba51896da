//! Property tests of the safety sequencer, and of core's control rules driving it.
//!
//! An independent monitor (like a cabinet's malfunction management unit) watches every
//! stretch of constant display the sequencer reports and checks, on every tick:
//!
//! 1. no two conflicting movements are ever non-red together;
//! 2. a movement never goes from green straight to red, nor from yellow back to green;
//! 3. every yellow lasts exactly the ending phase's yellow, every all-red exactly its all-red
//!    (or, with intergreen entries, until the last starting movement is due);
//! 4. a movement turns green only after every conflicting movement has shown its full
//!    yellow and then red for the full all-red of the phase it ended with, and only once
//!    every intergreen entry into it has passed since the conflicting movement left green;
//!    and then at once, not later (checked on the display itself, movement by movement, not
//!    on the sequencer's interval labels, so a frame that lights the next green early is
//!    caught even if the labels look right);
//! 5. intervals follow Green → Yellow → AllRed → Green (AllRed omitted only when it is 0 s);
//! 6. every completed green lasts at least min green (from its last movement's start), and
//!    no green ever exceeds max green (from its first movement's start);
//! 7. the segments of a tick add up to the tick, and the action mask is honest: a request
//!    inside the mask is never overridden.
//!
//! Plans are random (random movements on four arms, conflicts from geometry, phases as
//! random maximal conflict-free sets, random timing, random intergreen entries on half of
//! them); requests are random, adversarial
//! (always switch, never switch, out-of-range phases, requests during clearance, bursts
//! every millisecond) and tick sizes random from 1 ms to a minute.

use greenwave_core::plan::{INTERGREEN_CEILING, MAX_MOVEMENTS, MAX_PHASES};
use greenwave_core::sequencer::Segment;
use greenwave_core::{
    ActuatedSignal, ConflictMatrix, CycleStage, FixedCycle, Intergreen, Interval, Millis, Movement,
    MovementDetector, MovementId, MovementSet, OverrideReason, Phase, PhaseId, PhasePlan,
    PhaseTiming, Sequencer, Signal, SignalFrame, Turn,
};
use proptest::prelude::*;

/// The independent monitor.
struct Monitor {
    plan: PhasePlan,
    prev_signal: [Signal; MAX_MOVEMENTS],
    yellow_since_ms: [u64; MAX_MOVEMENTS],
    /// When each movement last turned red (0 for movements red from the start).
    red_since_ms: [u64; MAX_MOVEMENTS],
    /// The yellow and all-red each movement owes, from the phase whose green it ended.
    owed_yellow_ms: [u64; MAX_MOVEMENTS],
    owed_all_red_ms: [u64; MAX_MOVEMENTS],
    interval: Option<Interval>,
    interval_ms: u64,
    now_ms: u64,
    ticks: u64,
    /// Greens that began under watch (counted from the segments, so a green that starts
    /// and ends inside one tick counts too).
    greens_started: u64,
    /// Movements that have left green at least once (their `yellow_since_ms` is when).
    ever_left_green: MovementSet,
    /// For the change under way: when each starting movement is due green, when the change
    /// ends, and how much sooner than the last the first starts (the next green's head start).
    due_green_ms: [u64; MAX_MOVEMENTS],
    change_end_ms: u64,
    head_start_ms: u64,
}

impl Monitor {
    fn new(seq: &Sequencer) -> Self {
        let frame = seq.frame();
        let mut prev_signal = [Signal::Red; MAX_MOVEMENTS];
        for (i, s) in prev_signal
            .iter_mut()
            .enumerate()
            .take(seq.plan().movements().len())
        {
            *s = frame.signal(MovementId(i as u8));
        }
        Monitor {
            plan: seq.plan().clone(),
            prev_signal,
            yellow_since_ms: [0; MAX_MOVEMENTS],
            red_since_ms: [0; MAX_MOVEMENTS],
            owed_yellow_ms: [0; MAX_MOVEMENTS],
            owed_all_red_ms: [0; MAX_MOVEMENTS],
            interval: Some(seq.interval()),
            interval_ms: 0,
            now_ms: 0,
            ticks: 0,
            greens_started: 0,
            ever_left_green: MovementSet::EMPTY,
            due_green_ms: [0; MAX_MOVEMENTS],
            change_end_ms: 0,
            head_start_ms: 0,
        }
    }

    /// At the start of a change from `from` to `to`, works out on its own when each
    /// starting movement is due green: the ending phase's yellow and all-red, or later where
    /// an intergreen entry from a movement that has left green (now, or earlier) asks for it.
    fn schedule_change(&mut self, from: PhaseId, to: PhaseId) {
        let (f, t) = (
            self.plan.phases()[from.0 as usize].movements,
            self.plan.phases()[to.0 as usize].movements,
        );
        let timing = self.timing(from);
        let now = self.now_ms;
        let base = now + (timing.yellow.0 + timing.all_red.0) as u64;
        let (mut first, mut last) = (u64::MAX, base);
        for n in t.minus(f).iter() {
            let mut due = base;
            for e in self.plan.intergreens() {
                if e.to != n {
                    continue;
                }
                let left = if f.minus(t).contains(e.from) {
                    Some(now)
                } else if self.ever_left_green.contains(e.from) {
                    Some(self.yellow_since_ms[e.from.0 as usize])
                } else {
                    None
                };
                if let Some(left) = left {
                    due = due.max(left + e.time.0 as u64);
                }
            }
            self.due_green_ms[n.0 as usize] = due;
            first = first.min(due);
            last = last.max(due);
        }
        self.change_end_ms = last;
        self.head_start_ms = if first == u64::MAX { 0 } else { last - first };
    }

    fn timing(&self, p: PhaseId) -> PhaseTiming {
        self.plan.phases()[p.0 as usize].timing
    }

    fn check_interval_end(&self, ended: Interval, next: Interval) -> Result<(), String> {
        let d = self.interval_ms;
        match (ended, next) {
            (Interval::Green { phase }, Interval::Yellow { from, .. }) if from == phase => {
                let t = self.timing(phase);
                if d < t.min_green.0 as u64 {
                    return Err(format!(
                        "green of phase {} lasted {d} ms < min green",
                        phase.0
                    ));
                }
            }
            (Interval::Yellow { from, to }, Interval::AllRed { from: f2, to: t2 })
                if (from, to) == (f2, t2) =>
            {
                if d != self.timing(from).yellow.0 as u64 {
                    return Err(format!("yellow after phase {} lasted {d} ms", from.0));
                }
            }
            (Interval::Yellow { from, to }, Interval::Green { phase }) if phase == to => {
                if d != self.timing(from).yellow.0 as u64 {
                    return Err(format!("yellow after phase {} lasted {d} ms", from.0));
                }
                if self.change_end_ms != self.now_ms {
                    return Err(format!("all-red after phase {} skipped", from.0));
                }
            }
            (Interval::AllRed { from, to }, Interval::Green { phase }) if phase == to => {
                if self.now_ms != self.change_end_ms {
                    return Err(format!(
                        "all-red after phase {} lasted {d} ms and ended at {} ms, due at {} ms",
                        from.0, self.now_ms, self.change_end_ms
                    ));
                }
            }
            (a, b) => return Err(format!("illegal interval order {a:?} -> {b:?}")),
        }
        Ok(())
    }

    fn observe(&mut self, seg: &Segment) -> Result<(), String> {
        self.enter(seg.interval)?;
        check_no_conflict(&self.plan, &seg.frame)?;
        // 2, 3 and 4 on the display, movement by movement. First the endings (green to
        // yellow, yellow to red), so a foe that turns red in this very segment is seen as
        // red since now when the onsets are checked.
        let n = self.plan.movements().len();
        for i in 0..n {
            self.check_ending(i, seg)?;
        }
        for i in 0..n {
            let m = MovementId(i as u8);
            if (self.prev_signal[i], seg.frame.signal(m)) == (Signal::Red, Signal::Green) {
                self.check_onset(m)?;
            }
        }
        for i in 0..n {
            self.prev_signal[i] = seg.frame.signal(MovementId(i as u8));
        }
        self.check_interval_lengths(seg)
    }

    /// Interval bookkeeping: a segment of a new interval ends the one before.
    fn enter(&mut self, interval: Interval) -> Result<(), String> {
        if self.interval == Some(interval) {
            return Ok(());
        }
        if let Some(prev) = self.interval {
            self.check_interval_end(prev, interval)?;
        }
        self.interval = Some(interval);
        self.interval_ms = 0;
        if matches!(interval, Interval::Green { .. }) {
            self.greens_started += 1;
        }
        if let Interval::Yellow { from, to } = interval {
            self.schedule_change(from, to);
        }
        Ok(())
    }

    /// Movement `i`'s ending in `seg`: green only to yellow, yellow only to red, each
    /// yellow as long as its phase's.
    fn check_ending(&mut self, i: usize, seg: &Segment) -> Result<(), String> {
        let (m, now) = (MovementId(i as u8), self.now_ms);
        match (self.prev_signal[i], seg.frame.signal(m)) {
            (Signal::Green, Signal::Red) => return Err(format!("movement {i}: green -> red")),
            (Signal::Yellow, Signal::Green) => {
                return Err(format!("movement {i}: yellow -> green"))
            }
            (Signal::Green, Signal::Yellow) => {
                let Interval::Yellow { from, .. } = seg.interval else {
                    return Err(format!("movement {i} turned yellow in {:?}", seg.interval));
                };
                let t = self.timing(from);
                self.yellow_since_ms[i] = now;
                self.ever_left_green.insert(m);
                self.owed_yellow_ms[i] = t.yellow.0 as u64;
                self.owed_all_red_ms[i] = t.all_red.0 as u64;
            }
            (Signal::Yellow, Signal::Red) => {
                let shown = now - self.yellow_since_ms[i];
                if shown != self.owed_yellow_ms[i] {
                    return Err(format!(
                        "movement {i}: yellow shown {shown} ms, owed {} ms",
                        self.owed_yellow_ms[i]
                    ));
                }
                self.red_since_ms[i] = now;
            }
            _ => {}
        }
        Ok(())
    }

    /// Movement `m` turns green now: every intergreen from a foe kept, at the time its
    /// change was scheduled, and no foe green just before or red for less than its all-red.
    fn check_onset(&self, m: MovementId) -> Result<(), String> {
        let (i, now) = (m.0 as usize, self.now_ms);
        for e in self.plan.intergreens().iter().filter(|e| e.to == m) {
            let f = e.from.0 as usize;
            let since = now - self.yellow_since_ms[f];
            if self.ever_left_green.contains(e.from) && since < e.time.0 as u64 {
                return Err(format!(
                    "movement {i} green {since} ms after foe {f} left green; \
                     intergreen {} ms",
                    e.time.0
                ));
            }
        }
        if now != self.due_green_ms[i] {
            return Err(format!(
                "movement {i} green at {now} ms, due at {} ms",
                self.due_green_ms[i]
            ));
        }
        for f in self.plan.conflicts().foes(m).iter() {
            let f = f.0 as usize;
            if self.prev_signal[f] == Signal::Green {
                return Err(format!("movement {i} green right after foe {f}'s green"));
            }
            let red_ms = now - self.red_since_ms[f];
            if red_ms < self.owed_all_red_ms[f] {
                return Err(format!(
                    "movement {i} green {red_ms} ms after foe {f} turned red; \
                     all-red owed {} ms",
                    self.owed_all_red_ms[f]
                ));
            }
        }
        Ok(())
    }

    /// 6. Max green (and yellow length), checked as time accumulates.
    fn check_interval_lengths(&mut self, seg: &Segment) -> Result<(), String> {
        self.interval_ms += seg.duration.0 as u64;
        self.now_ms += seg.duration.0 as u64;
        if let Interval::Green { phase } = seg.interval {
            if self.interval_ms + self.head_start_ms > self.timing(phase).max_green.0 as u64 {
                return Err(format!("green of phase {} exceeded max green", phase.0));
            }
        }
        if let Interval::Yellow { from, .. } = seg.interval {
            if self.interval_ms > self.timing(from).yellow.0 as u64 {
                return Err(format!("yellow after phase {} too long", from.0));
            }
        }
        Ok(())
    }

    /// Advances the sequencer by `dt` under watch.
    fn tick(&mut self, seq: &mut Sequencer, dt: Millis) -> Result<(), String> {
        let mut total = 0u64;
        let mut err = Ok(());
        seq.advance(dt, |seg| {
            total += seg.duration.0 as u64;
            if err.is_ok() {
                err = self.observe(seg);
            }
        });
        err?;
        if total != dt.0 as u64 {
            return Err(format!("segments sum to {total} ms, tick was {} ms", dt.0));
        }
        self.ticks += 1;
        Ok(())
    }
}

/// Random plan: 2..=12 random movements on four arms (no duplicates), geometric conflicts,
/// phases built greedily as conflict-free sets covering every movement, random timing.
fn arb_plan() -> impl Strategy<Value = PhasePlan> {
    let turn = prop_oneof![
        Just(Turn::Left),
        Just(Turn::Through),
        Just(Turn::Right),
        Just(Turn::UTurn),
        Just(Turn::Pedestrian)
    ];
    let timing = (
        1u32..20_000,
        1u32..60_000,
        3000u32..=6000,
        0u32..=6000,
        any::<bool>(),
    )
        .prop_map(|(min, extra, yellow, all_red, whole)| {
            // Whole seconds half of the time: the usual case, with boundaries that line up.
            let r = |x: u32| if whole { (x / 1000).max(1) * 1000 } else { x };
            let min_green = r(min.max(1000));
            PhaseTiming {
                min_green: Millis(min_green),
                max_green: Millis(min_green + r(extra)),
                yellow: Millis(r(yellow)),
                all_red: Millis(if whole {
                    (all_red / 1000) * 1000
                } else {
                    all_red
                }),
                pedestrian: None,
            }
        });
    (
        proptest::collection::vec((0u8..4, turn), 2..=12),
        proptest::collection::vec(timing, MAX_PHASES),
        any::<u64>(),
        proptest::option::of(proptest::collection::vec(
            (any::<u16>(), 1u32..=12_000),
            1..40,
        )),
    )
        .prop_filter_map("need two phases", |(raw, timings, order_seed, entries)| {
            let mut movements: Vec<Movement> = Vec::new();
            for (a, t) in raw {
                let m = Movement::new(a, t);
                if !movements.contains(&m) {
                    movements.push(m);
                }
            }
            let conflicts = ConflictMatrix::four_arm(&movements);
            // Greedy cover, starting from a seed-dependent rotation so phases overlap.
            let n = movements.len();
            let mut phases: Vec<MovementSet> = Vec::new();
            for start in 0..n {
                let mut set = MovementSet::EMPTY;
                for k in 0..n {
                    let i = (start + k + order_seed as usize) % n;
                    let m = MovementId(i as u8);
                    if conflicts.foes(m).and(set).is_empty() {
                        set.insert(m);
                    }
                }
                if !phases.contains(&set) {
                    phases.push(set);
                }
            }
            phases.truncate(MAX_PHASES);
            if phases.len() < 2 {
                return None;
            }
            let phases: Vec<Phase> = phases
                .into_iter()
                .zip(timings)
                .map(|(movements, mut timing)| {
                    if entries.is_some() {
                        // Room for the largest stagger intergreens can cause.
                        let least = timing.min_green.0 + INTERGREEN_CEILING.0 + 1;
                        timing.max_green = Millis(timing.max_green.0.max(least));
                    }
                    Phase { movements, timing }
                })
                .collect();
            let plan =
                PhasePlan::new(&movements, conflicts, &phases).expect("generated plan is valid");
            Some(match entries {
                None => plan,
                Some(raw) => {
                    let entries = intergreens_for(&plan, &raw);
                    plan.with_intergreens(&entries)
                        .expect("generated entries are valid")
                }
            })
        })
}

/// Intergreen entries on conflicting pairs picked by `raw` (pair index, time), each pair
/// once.
fn intergreens_for(plan: &PhasePlan, raw: &[(u16, u32)]) -> Vec<Intergreen> {
    let n = plan.movements().len() as u8;
    let pairs: Vec<(MovementId, MovementId)> = (0..n)
        .flat_map(|a| (0..n).map(move |b| (MovementId(a), MovementId(b))))
        .filter(|&(a, b)| plan.conflicts().conflicts(a, b))
        .collect();
    let mut entries: Vec<Intergreen> = Vec::new();
    if pairs.is_empty() {
        return entries;
    }
    for &(k, ms) in raw {
        let (from, to) = pairs[k as usize % pairs.len()];
        if !entries.iter().any(|e| (e.from, e.to) == (from, to)) {
            entries.push(Intergreen {
                from,
                to,
                time: Millis(ms),
            });
        }
    }
    entries
}

/// One step of a scenario: request (or not), then tick.
#[derive(Clone, Debug)]
enum Step {
    Request(u8, u32),
    Tick(u32),
}

fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
    let dt = prop_oneof![
        1u32..=5,
        100u32..=1000,
        1000u32..=10_000,
        10_000u32..=60_000
    ];
    let step = prop_oneof![
        4 => (0u8..=17, dt.clone()).prop_map(|(p, d)| Step::Request(p, d)),
        1 => dt.prop_map(Step::Tick),
    ];
    proptest::collection::vec(step, 1..400)
}

fn run(plan: PhasePlan, steps: &[Step]) -> Result<u64, String> {
    let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
    let mut mon = Monitor::new(&seq);
    for s in steps {
        match *s {
            Step::Request(p, dt) => {
                let mask = seq.action_mask();
                let r = seq.request(p);
                if (p as usize) < MAX_PHASES && mask.allows(PhaseId(p)) && r.overridden.is_some() {
                    return Err(format!(
                        "request {p} inside mask {mask:?} overridden: {r:?}"
                    ));
                }
                mon.tick(&mut seq, Millis(dt))?;
            }
            Step::Tick(dt) => mon.tick(&mut seq, Millis(dt))?,
        }
    }
    Ok(mon.ticks)
}

proptest! {
    // The default failure persistence: the shrunk cases in
    // `sequencer_props.proptest-regressions` are replayed before any new case.
    #![proptest_config(ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_requests_never_break_an_invariant(plan in arb_plan(), steps in arb_steps()) {
        run(plan, &steps).map_err(TestCaseError::fail)?;
    }

    /// Adversary: always asks for a different phase, every millisecond.
    #[test]
    fn switch_every_millisecond(plan in arb_plan(), ticks in 1usize..20_000) {
        let n = plan.n_phases() as u8;
        let steps: Vec<Step> = (0..ticks).map(|i| Step::Request((i as u8) % n, 1)).collect();
        run(plan, &steps).map_err(TestCaseError::fail)?;
    }

    /// Adversary: always asks to keep the current green, so max green must force changes.
    #[test]
    fn never_switching_still_cycles(plan in arb_plan(), dt in 1u32..5000) {
        let mut seq = Sequencer::new(plan.clone(), PhaseId(0)).unwrap();
        let mut mon = Monitor::new(&seq);
        for _ in 0..2000 {
            let target = seq.interval().target().0;
            seq.request(target);
            mon.tick(&mut seq, Millis(dt)).map_err(TestCaseError::fail)?;
        }
        // Counted from the displayed segments: sampling the interval once per tick would
        // miss a green shorter than a tick (max green 1001 ms under 1005-ms ticks).
        let greens = mon.greens_started;
        // A change takes at most the longest intergreen (which is at least yellow + all-red).
        let longest = plan.phases().iter().map(|p| {
            p.timing.max_green.0 + INTERGREEN_CEILING.0
        }).max().unwrap() as u64;
        // 2000 ticks of dt: at least one change per longest cycle step.
        prop_assert!(greens >= ((2000 * dt as u64) / longest).saturating_sub(1));
    }
}

/// Random per-movement detector readings: gaps around the passage time, calls, queues and
/// downstream occupancy on both sides of the spill-back threshold.
fn arb_detectors() -> impl Strategy<Value = Vec<MovementDetector>> {
    let one = (
        0.0f32..5.0,
        any::<bool>(),
        0.0f32..8.0,
        0.0f32..12.0,
        0.0f32..10.0,
    )
        .prop_map(
            |(gap_s, call, queue_veh, downstream_veh, downstream_storage_veh)| MovementDetector {
                gap_s,
                call,
                queue_veh,
                downstream_veh,
                downstream_storage_veh,
                ..MovementDetector::default()
            },
        );
    proptest::collection::vec(one, 0..14)
}

/// Drives the sequencer with `choose` every `dt` under the monitor. `choose` answers a
/// phase and whether it may be held for min green; any other request must be inside the
/// action mask (a rule that asks for what the supervisor would refuse is wrong even though
/// the supervisor would refuse it).
fn drive(
    plan: PhasePlan,
    dt: u32,
    decisions: usize,
    mut choose: impl FnMut(&Sequencer, usize) -> (u8, bool),
) -> Result<(), String> {
    let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
    let mut mon = Monitor::new(&seq);
    for k in 0..decisions {
        let mask = seq.action_mask();
        let (p, may_hold) = choose(&seq, k);
        let r = seq.request(p);
        let held = may_hold && r.overridden == Some(OverrideReason::MinGreen);
        if !held && (!mask.allows(PhaseId(p)) || r.overridden.is_some()) {
            return Err(format!("decision {k}: phase {p} (mask {mask:?}): {r:?}"));
        }
        mon.tick(&mut seq, Millis(dt))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    })]

    /// core's fixed-time rule, with any cycle its plan accepts, only asks for phases the
    /// mask allows (but for taking over a green that is not one of its stages, which the
    /// sequencer holds until min green), and every invariant holds.
    #[test]
    fn fixed_cycles_ask_only_inside_the_mask(
        plan in arb_plan(),
        shares in proptest::collection::vec(0.0f64..=1.0, 1..8),
        order in proptest::collection::vec(0u8..16, 1..8),
        dt in prop_oneof![1u32..=100, 100u32..=5000],
    ) {
        let stages: Vec<CycleStage> = order.iter().zip(&shares).map(|(&p, &share)| {
            let phase = p % plan.n_phases() as u8;
            let t = plan.phases()[phase as usize].timing;
            let span = (t.max_green.0 - t.min_green.0) as f64;
            CycleStage { phase, green: Millis(t.min_green.0 + (span * share) as u32) }
        }).collect();
        let mut cycle = FixedCycle::new(&stages).unwrap();
        prop_assert_eq!(cycle.check_plan(&plan), Ok(()));
        drive(plan, dt, 600, |seq, _| {
            let green = seq.green_phase();
            let out_of_cycle = green.is_some_and(|g| cycle.stages().iter().all(|s| s.phase != g.0));
            (cycle.decide(seq), out_of_cycle)
        })
        .map_err(TestCaseError::fail)?;
    }

    /// Whatever the assignment, every phase answers to some of its own movements and to
    /// none it does not show green.
    #[test]
    fn every_phase_answers_to_some_of_its_own_movements(
        plan in arb_plan(),
        assigned in proptest::collection::vec(any::<u32>(), 0..20),
    ) {
        let assigned: Vec<MovementSet> = assigned.into_iter().map(MovementSet).collect();
        for (q, phase) in plan.phases().iter().enumerate() {
            let set = greenwave_core::control::assigned_movements(&plan, &assigned, q);
            prop_assert!(!set.is_empty());
            prop_assert!(set.minus(phase.movements).is_empty());
        }
    }

    /// core's actuated rule, on any detector readings, max greens and detector-to-phase
    /// assignment (any sets, those naming movements the plan lacks too), only asks for
    /// phases the mask allows, and every invariant holds.
    #[test]
    fn actuated_control_asks_only_inside_the_mask(
        plan in arb_plan(),
        readings in proptest::collection::vec(arb_detectors(), 1..50),
        max_green_ms in proptest::collection::vec(0u32..80_000, 0..6),
        assigned in proptest::collection::vec(any::<u32>(), 0..20),
        passage_s in 0.0f32..4.0,
        dt in prop_oneof![100u32..=1000, 1000u32..=5000],
    ) {
        let max: Vec<Millis> = max_green_ms.into_iter().map(Millis).collect();
        let assigned: Vec<MovementSet> = assigned.into_iter().map(MovementSet).collect();
        let rule = ActuatedSignal::new(passage_s, &max).with_assigned(&assigned);
        drive(plan, dt, 600, |seq, k| (rule.decide(seq, &readings[k % readings.len()]), false))
            .map_err(TestCaseError::fail)?;
    }
}

/// Deterministic PRNG for the long run (no dependency needed for a 10^7-step soak).
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// 10^7 monitored ticks on the standard plan (with intergreens) and a short-timed plan,
/// adversarial requests.
/// Ignored by default (it takes seconds in release, minutes in debug); `.ci/run` runs it
/// with `cargo test --release -p greenwave-core -- --ignored`.
#[test]
#[ignore]
fn long_run_ten_million_ticks() {
    let standard = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 4, 2)).unwrap();
    // Every pair a through movement ends gets a 8.5 s intergreen, as a program keeping its
    // crossings clear would.
    let entries: Vec<Intergreen> = (0..12u8)
        .filter(|m| m % 3 == 1)
        .flat_map(|m| {
            let foes = standard.conflicts().foes(MovementId(m));
            foes.iter().map(move |n| Intergreen {
                from: MovementId(m),
                to: n,
                time: Millis(8500),
            })
        })
        .collect();
    let plans = [
        standard.with_intergreens(&entries).unwrap(),
        PhasePlan::four_arm_protected_left(PhaseTiming {
            min_green: Millis(1500),
            max_green: Millis(7300),
            yellow: Millis(3100),
            all_red: Millis(0),
            pedestrian: None,
        })
        .unwrap(),
    ];
    let mut rng = SplitMix(2026);
    let mut total = 0u64;
    for plan in plans {
        let n = plan.n_phases() as u64;
        let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
        let mut mon = Monitor::new(&seq);
        for _ in 0..5_000_000 {
            let r = rng.next();
            if r % 3 != 0 {
                seq.request(((r >> 8) % (n + 2)) as u8);
            }
            let dt = match (r >> 16) % 4 {
                0 => 1 + (r >> 24) % 10,
                1 => 100,
                2 => 1000,
                _ => 1 + (r >> 24) % 20_000,
            };
            mon.tick(&mut seq, Millis(dt as u32)).unwrap();
        }
        total += mon.ticks;
    }
    assert_eq!(total, 10_000_000);
}

/// 1. No two conflicting movements non-red, and none green and yellow at once.
fn check_no_conflict(plan: &PhasePlan, frame: &SignalFrame) -> Result<(), String> {
    let non_red = frame.non_red();
    for m in non_red.iter() {
        let clash = plan.conflicts().foes(m).and(non_red);
        if !clash.is_empty() {
            return Err(format!(
                "conflicting movements {} and {:?} non-red",
                m.0, clash
            ));
        }
    }
    if frame.green.and(frame.yellow) != MovementSet::EMPTY {
        return Err("a movement is green and yellow at once".into());
    }
    Ok(())
}
