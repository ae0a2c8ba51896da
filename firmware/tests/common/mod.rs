//! Test harness: a simulated cabinet field (lamp outputs, lamp-sense readback, loops), a
//! settable clock, a tiny traffic model, and an independent checker of the lamp timeline.
#![allow(dead_code)]

pub mod synthetic;

use std::cell::RefCell;
use std::collections::HashMap;
use std::convert::Infallible;
use std::rc::Rc;

use embedded_hal::digital::{ErrorType, InputPin, OutputPin};
use greenwave_core::{MovementId, PhasePlan, PhaseTiming};
use greenwave_firmware::detectors::LaneDetectorPins;
use greenwave_firmware::heads::{HeadPins, Lamp};
use greenwave_firmware::{BoardConfig, BoardPins, Lamps, MonotonicClock};

/// The single-4way plan the tests run: min green 5 s, max 30 s, yellow 3 s, all-red 2 s.
pub fn plan() -> PhasePlan {
    PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap()
}

/// Board defaults for the single-4way cabinet: lane i feeds movement i, 10 vehicles storage.
pub fn board() -> BoardConfig<12> {
    BoardConfig::one_lane_per_movement(1, 10)
}

/// How a lamp-sense input misreports, for fault injection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SenseFault {
    /// Reads this level whatever the output does (welded load switch, shorted sense).
    Stuck(bool),
}

/// What the field shows and reads, shared by all fake pins.
#[derive(Debug, Default)]
pub struct Field {
    pub now_ms: u32,
    /// Output level per (group, lamp index 0=R 1=Y 2=G).
    pub driven: HashMap<(usize, usize), bool>,
    pub sense_faults: HashMap<(usize, usize), SenseFault>,
    /// Group whose load switch turns its yellow into red after this many ms.
    pub yellow_cut: Option<(usize, u32)>,
    yellow_since: HashMap<usize, u32>,
    /// Output pins that fail to write.
    pub failing_outputs: Vec<(usize, usize)>,
    /// Loop presence per (lane, 0 = entry, 1 = stop bar).
    pub loops: HashMap<(usize, usize), bool>,
    /// Loop inputs (lane, 0 = entry, 1 = stop bar) whose reads fail.
    pub failing_loops: Vec<(usize, usize)>,
    /// Conflicting pairs of groups watched at every single output write.
    pub watch_conflicts: Vec<(usize, usize)>,
    /// Writes after which a watched pair showed a green beside the other's green or yellow.
    pub conflicts_between_writes: u32,
}

pub type Shared = Rc<RefCell<Field>>;

pub fn lamp_index(l: Lamp) -> usize {
    match l {
        Lamp::Red => 0,
        Lamp::Yellow => 1,
        Lamp::Green => 2,
    }
}

impl Field {
    pub fn driven_lamps(&self, group: usize) -> Lamps {
        let d = |k| *self.driven.get(&(group, k)).unwrap_or(&false);
        Lamps {
            red: d(0),
            yellow: d(1),
            green: d(2),
        }
    }

    fn sensed(&self, group: usize, lamp: usize) -> bool {
        if let Some(SenseFault::Stuck(level)) = self.sense_faults.get(&(group, lamp)) {
            return *level;
        }
        let driven = |k| *self.driven.get(&(group, k)).unwrap_or(&false);
        if let Some((g, cut_ms)) = self.yellow_cut {
            if g == group && driven(1) {
                let since = *self.yellow_since.get(&group).unwrap_or(&self.now_ms);
                let cut = self.now_ms.wrapping_sub(since) >= cut_ms;
                return match lamp {
                    0 => cut || driven(0),
                    1 => !cut,
                    _ => driven(2),
                };
            }
        }
        driven(lamp)
    }
}

/// A lamp output pin.
pub struct LampOut {
    field: Shared,
    group: usize,
    lamp: usize,
}

/// A write failure of a fake output.
#[derive(Debug)]
pub struct PinBroken;

impl embedded_hal::digital::Error for PinBroken {
    fn kind(&self) -> embedded_hal::digital::ErrorKind {
        embedded_hal::digital::ErrorKind::Other
    }
}

impl ErrorType for LampOut {
    type Error = PinBroken;
}

impl OutputPin for LampOut {
    fn set_low(&mut self) -> Result<(), PinBroken> {
        self.set(false)
    }
    fn set_high(&mut self) -> Result<(), PinBroken> {
        self.set(true)
    }
}

impl LampOut {
    fn set(&mut self, high: bool) -> Result<(), PinBroken> {
        let mut f = self.field.borrow_mut();
        if f.failing_outputs.contains(&(self.group, self.lamp)) {
            return Err(PinBroken);
        }
        let key = (self.group, self.lamp);
        let was = *f.driven.get(&key).unwrap_or(&false);
        if self.lamp == 1 && high && !was {
            let now = f.now_ms;
            f.yellow_since.insert(self.group, now);
        }
        f.driven.insert(key, high);
        let conflicting = f.watch_conflicts.iter().any(|&(a, b)| {
            let (la, lb) = (f.driven_lamps(a), f.driven_lamps(b));
            (la.green && (lb.green || lb.yellow)) || (lb.green && (la.green || la.yellow))
        });
        f.conflicts_between_writes += u32::from(conflicting);
        Ok(())
    }
}

/// What a field input reads.
#[derive(Clone, Copy, Debug)]
pub enum Input {
    /// Lamp sense of (group, lamp index).
    LampSense(usize, usize),
    /// Loop of (lane, 0 = entry / 1 = stop bar).
    Loop(usize, usize),
}

/// A lamp-sense or loop input pin.
pub struct FieldIn {
    field: Shared,
    input: Input,
}

impl ErrorType for FieldIn {
    type Error = PinBroken;
}

impl InputPin for FieldIn {
    fn is_high(&mut self) -> Result<bool, PinBroken> {
        let f = self.field.borrow();
        Ok(match self.input {
            Input::LampSense(group, lamp) => f.sensed(group, lamp),
            Input::Loop(lane, which) if f.failing_loops.contains(&(lane, which)) => {
                return Err(PinBroken)
            }
            Input::Loop(lane, which) => *f.loops.get(&(lane, which)).unwrap_or(&false),
        })
    }
    fn is_low(&mut self) -> Result<bool, PinBroken> {
        self.is_high().map(|h| !h)
    }
}

/// The clock, reading the field's time.
pub struct FieldClock(pub Shared);

impl MonotonicClock for FieldClock {
    fn now_ms(&mut self) -> u32 {
        self.0.borrow().now_ms
    }
}

/// All pins of a `G`-group, `L`-lane cabinet wired to one field.
pub fn field_pins<const G: usize, const L: usize>(
    field: &Shared,
) -> BoardPins<LampOut, FieldIn, FieldIn, G, L> {
    let head = |group: usize| HeadPins {
        red: (group, 0),
        yellow: (group, 1),
        green: (group, 2),
    };
    let out = |(group, lamp)| LampOut {
        field: field.clone(),
        group,
        lamp,
    };
    let inp = |(group, lamp)| FieldIn {
        field: field.clone(),
        input: Input::LampSense(group, lamp),
    };
    BoardPins {
        lamp_outputs: std::array::from_fn(|g| head(g).map(out)),
        lamp_sense: std::array::from_fn(|g| head(g).map(inp)),
        loops: std::array::from_fn(|lane| LaneDetectorPins {
            entry: FieldIn {
                field: field.clone(),
                input: Input::Loop(lane, 0),
            },
            stop_bar: FieldIn {
                field: field.clone(),
                input: Input::Loop(lane, 1),
            },
        }),
    }
}

pub use synthetic::SplitRng as Rng;

/// A tiny lane traffic model driving the loops: Poisson-ish arrivals cross the entry loop
/// (300 ms pulse) and join the lane's queue; the head vehicle stands on the stop-bar loop;
/// while the lane's lamp is green, one vehicle leaves every 2 s (gap on the loop between).
pub struct Traffic {
    rng: Rng,
    arrivals_per_s: f32,
    queue: Vec<u32>,
    entry_until: Vec<u32>,
    discharge_at: Vec<Option<u32>>,
}

impl Traffic {
    pub fn new(lanes: usize, arrivals_per_s: f32, seed: u64) -> Self {
        Traffic {
            rng: Rng(seed),
            arrivals_per_s,
            queue: vec![0; lanes],
            entry_until: vec![0; lanes],
            discharge_at: vec![None; lanes],
        }
    }

    /// Vehicles queued on each lane.
    pub fn queues(&self) -> &[u32] {
        &self.queue
    }

    /// Advances to `field.now_ms` after `dt_ms`; lane `i` is served by group `i`.
    pub fn step(&mut self, field: &mut Field, dt_ms: u32) {
        let now = field.now_ms;
        for lane in 0..self.queue.len() {
            let p = self.arrivals_per_s * dt_ms as f32 / 1000.0;
            if self.rng.unit() < p && now >= self.entry_until[lane] {
                self.queue[lane] += 1;
                self.entry_until[lane] = now + 300;
            }
            field.loops.insert((lane, 0), now < self.entry_until[lane]);
            let green = field.driven_lamps(lane).green;
            match self.discharge_at[lane] {
                Some(t) if now >= t => {
                    self.queue[lane] = self.queue[lane].saturating_sub(1);
                    self.discharge_at[lane] = None;
                }
                None if green && self.queue[lane] > 0 => {
                    self.discharge_at[lane] = Some(now + 1500);
                }
                _ => {}
            }
            // The stop-bar loop is occupied by the head vehicle, except for the 500 ms gap
            // after each departure while the next one moves up.
            let leaving = self.discharge_at[lane].is_some_and(|t| t.saturating_sub(now) <= 500);
            field
                .loops
                .insert((lane, 1), self.queue[lane] > 0 && !leaving);
        }
    }
}

/// One change of a group's driven lamps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LampChange {
    pub at_ms: u32,
    pub group: usize,
    pub lamps: Lamps,
}

/// Records every change of the driven lamps (as the field sees them after a poll).
#[derive(Default)]
pub struct Timeline {
    pub changes: Vec<LampChange>,
    last: HashMap<usize, Lamps>,
}

impl Timeline {
    pub fn record(&mut self, field: &Field, groups: usize) {
        for g in 0..groups {
            let lamps = field.driven_lamps(g);
            if self.last.get(&g) != Some(&lamps) {
                self.last.insert(g, lamps);
                self.changes.push(LampChange {
                    at_ms: field.now_ms,
                    group: g,
                    lamps,
                });
            }
        }
    }

    /// Changes of one group.
    pub fn of(&self, group: usize) -> Vec<LampChange> {
        self.changes
            .iter()
            .filter(|c| c.group == group)
            .copied()
            .collect()
    }
}

/// Checks a recorded timeline against the plan, independently of the firmware: every group
/// shows exactly one lamp; changes go R→G→Y→R; every yellow lasts at least the plan's
/// yellow and less than yellow + `max_poll_ms`; no foe turns green within the plan's
/// all-red of a group's yellow ending; no two foes are non-red together. Returns the number
/// of completed yellows checked.
pub fn check_timeline(plan: &PhasePlan, t: &Timeline, max_poll_ms: u32) -> usize {
    let timing = plan.phases()[0].timing;
    let (yellow, all_red) = (timing.yellow.0, timing.all_red.0);
    let groups = plan.movements().len();
    let mut yellows = 0;
    let mut red_since: HashMap<usize, u32> = HashMap::new();
    for g in 0..groups {
        let ch = t.of(g);
        for w in ch.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert_eq!(
                b.lamps.lit(),
                1,
                "group {g} at {} ms: {:?}",
                b.at_ms,
                b.lamps
            );
            let ok = matches!(
                (a.lamps, b.lamps),
                (Lamps::RED, Lamps::GREEN)
                    | (Lamps::GREEN, Lamps::YELLOW)
                    | (Lamps::YELLOW, Lamps::RED)
            );
            assert!(
                ok,
                "group {g} at {} ms: {:?} -> {:?}",
                b.at_ms, a.lamps, b.lamps
            );
            if a.lamps == Lamps::YELLOW {
                let shown = b.at_ms - a.at_ms;
                assert!(
                    shown >= yellow && shown < yellow + max_poll_ms.max(1),
                    "group {g}: yellow {shown} ms at {} ms",
                    a.at_ms
                );
                yellows += 1;
            }
        }
    }
    // Walk all changes in time order for conflicts and red clearance.
    let mut shown: HashMap<usize, Lamps> = HashMap::new();
    let mut i = 0;
    while i < t.changes.len() {
        let at = t.changes[i].at_ms;
        while i < t.changes.len() && t.changes[i].at_ms == at {
            let c = t.changes[i];
            if c.lamps == Lamps::RED {
                red_since.insert(c.group, at);
            }
            if c.lamps == Lamps::GREEN {
                for foe in plan.conflicts().foes(MovementId(c.group as u8)).iter() {
                    if let Some(&since) = red_since.get(&(foe.0 as usize)) {
                        if shown.get(&(foe.0 as usize)) == Some(&Lamps::RED) && since > 0 {
                            assert!(
                                at - since >= all_red,
                                "group {} green at {at} ms, foe {} red only since {since} ms",
                                c.group,
                                foe.0
                            );
                        }
                    }
                }
            }
            shown.insert(c.group, c.lamps);
            i += 1;
        }
        for (&g, &l) in &shown {
            if l != Lamps::RED {
                for foe in plan.conflicts().foes(MovementId(g as u8)).iter() {
                    let fl = shown.get(&(foe.0 as usize)).copied().unwrap_or(Lamps::RED);
                    assert_eq!(
                        fl,
                        Lamps::RED,
                        "groups {g} and {} non-red at {at} ms",
                        foe.0
                    );
                }
            }
        }
    }
    yellows
}

use greenwave_core::Transition;
use greenwave_firmware::frames::{FrameReader, MAX_FRAME_BYTES};
use greenwave_firmware::{Controller, Decision, FixedCycle, MonitorCard, PollReport};

/// The single-4way cabinet on a simulated field.
pub type Cabinet<'b> = Controller<'b, LampOut, FieldIn, FieldIn, FieldClock, 12, 12>;

/// Fixed-time splits of the test program: 12 s through phases, 6 s protected lefts.
pub const SPLITS_MS: [u32; 4] = [12_000, 6000, 12_000, 6000];

/// A cabinet with `blob` (or none) on a fresh field.
pub fn cabinet<'b>(field: &Shared, blob: Option<&'b [u8]>) -> Cabinet<'b> {
    cabinet_with(field, blob, board())
}

/// A cabinet of the single-4way plan's 12 signal groups with a given board configuration
/// (and its `L` lanes).
pub fn cabinet_with<'b, const L: usize>(
    field: &Shared,
    blob: Option<&'b [u8]>,
    board: BoardConfig<L>,
) -> Controller<'b, LampOut, FieldIn, FieldIn, FieldClock, 12, L> {
    cabinet_of(field, blob, board, plan())
}

/// A cabinet running `plan` (12 signal groups, the test splits) with its implied monitor card.
pub fn cabinet_of<'b, const L: usize>(
    field: &Shared,
    blob: Option<&'b [u8]>,
    board: BoardConfig<L>,
    plan: PhasePlan,
) -> Controller<'b, LampOut, FieldIn, FieldIn, FieldClock, 12, L> {
    let fixed = FixedCycle::from_splits(&plan, &SPLITS_MS).unwrap();
    cabinet_cycling(field, blob, board, plan, fixed)
}

/// As [`cabinet_of`], with the fixed cycle `fixed`.
pub fn cabinet_cycling<'b, const L: usize>(
    field: &Shared,
    blob: Option<&'b [u8]>,
    board: BoardConfig<L>,
    plan: PhasePlan,
    fixed: FixedCycle,
) -> Controller<'b, LampOut, FieldIn, FieldIn, FieldClock, 12, L> {
    let card = MonitorCard::from_plan(&plan, board.fault_persistence);
    Controller::new(
        plan,
        board,
        field_pins(field),
        card,
        fixed,
        blob,
        FieldClock(field.clone()),
    )
    .unwrap()
}

/// A serial port into a byte vector.
#[derive(Default)]
pub struct SerialCapture(pub Vec<u8>);

impl embedded_io::ErrorType for SerialCapture {
    type Error = Infallible;
}

impl embedded_io::Write for SerialCapture {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// What a run produced.
#[derive(Default)]
pub struct Run {
    pub timeline: Timeline,
    pub decisions: Vec<(u64, Decision)>,
    pub serial: SerialCapture,
    pub reports: usize,
    pub last: Option<PollReport>,
}

impl Run {
    /// The transitions sent over the serial port, decoded as the host does.
    pub fn transitions(&self) -> Vec<Transition> {
        let mut reader = FrameReader::<MAX_FRAME_BYTES>::new();
        self.serial
            .0
            .iter()
            .filter_map(|&b| reader.push(b))
            .map(|r| r.expect("every frame decodes"))
            .collect()
    }
}

/// Polls `ctl` for `duration_ms`, advancing the field clock by `poll_ms()` before each poll,
/// stepping the traffic, recording the lamps and draining transitions every poll.
pub fn run_for(
    ctl: &mut Cabinet,
    field: &Shared,
    mut traffic: Option<&mut Traffic>,
    duration_ms: u32,
    poll_ms: &mut dyn FnMut() -> u32,
    out: &mut Run,
) {
    let end = field.borrow().now_ms + duration_ms;
    while field.borrow().now_ms < end {
        let dt = poll_ms();
        field.borrow_mut().now_ms += dt;
        if let Some(t) = traffic.as_deref_mut() {
            t.step(&mut field.borrow_mut(), dt);
        }
        let report = ctl.poll();
        out.reports += 1;
        out.timeline.record(&field.borrow(), 12);
        if let Some(d) = report.decision {
            out.decisions.push((report.uptime_ms, d));
        }
        out.last = Some(report);
        ctl.drain_transitions(&mut out.serial, 4).unwrap();
    }
}

/// Runs `ctl` for `duration_ms` in steady traffic on its 12 lanes (8 % arrival chance per
/// lane and poll, seed 3), polled every 10 ms; checks it stayed running and that every
/// stretch of display kept the plan's timing. Returns what the run recorded.
pub fn run_in_traffic(ctl: &mut Cabinet, field: &Shared, duration_ms: u32) -> Run {
    let mut traffic = Traffic::new(12, 0.08, 3);
    let mut run = Run::default();
    run_for(
        ctl,
        field,
        Some(&mut traffic),
        duration_ms,
        &mut || 10,
        &mut run,
    );
    assert_eq!(
        ctl.mode(),
        greenwave_firmware::Mode::Running,
        "{:?}",
        ctl.fault()
    );
    check_timeline(&plan(), &run.timeline, 10);
    run
}
