//! The controller against `embedded-hal-mock` pins: every pin write and read is an exact
//! expectation, built from a hand-written timeline of a two-phase crossing (north–south
//! through vs east–west through, min green 5 s, yellow 3 s, all-red 2 s, 6 s splits,
//! 2 s start-up all-red, 1 s polls).

use std::cell::Cell;
use std::rc::Rc;

use embedded_hal_mock::eh1::digital::{Mock as PinMock, State, Transaction as Pin};
use greenwave_core::{
    ConflictMatrix, Millis, Movement, MovementSet, Phase, PhasePlan, PhaseTiming, Turn,
};
use greenwave_firmware::detectors::{Detector, LaneDetectorPins};
use greenwave_firmware::heads::{HeadPins, SignalHead};
use greenwave_firmware::{
    BoardConfig, BoardPins, Controller, FaultKind, FixedCycle, Lamps, LaneConfig, Mode,
    MonitorCard, MonotonicClock, Polarity,
};

struct StepClock(Rc<Cell<u32>>);

impl MonotonicClock for StepClock {
    fn now_ms(&mut self) -> u32 {
        self.0.get()
    }
}

fn two_phase_plan() -> PhasePlan {
    let ms = [
        Movement::new(0, Turn::Through),
        Movement::new(1, Turn::Through),
    ];
    let timing = PhaseTiming::from_secs(5, 20, 3, 2);
    let phases = [0u8, 1].map(|m| Phase {
        movements: MovementSet::from_ids(&[m]),
        timing,
    });
    PhasePlan::new(&ms, ConflictMatrix::four_arm(&ms), &phases).unwrap()
}

fn board(flash_half_period_ms: u32) -> BoardConfig<1> {
    BoardConfig {
        signal_id: 0,
        lamp_polarity: Polarity::ActiveHigh,
        sense_polarity: Polarity::ActiveHigh,
        detector_polarity: Polarity::ActiveHigh,
        lanes: [LaneConfig {
            movements: MovementSet::from_ids(&[0]),
            storage_veh: 10,
        }],
        detector_debounce: Millis::ZERO,
        standing_queue: Millis(3000),
        empty_lane_gap: Millis(6000),
        decision_interval: Millis(5000),
        startup_all_red: Millis(2000),
        flash_half_period: Millis(flash_half_period_ms),
        fault_persistence: Millis::ZERO,
        max_clearance_step: Millis(1000), // at least the 1 s poll period
    }
}

/// What the heads must show after the poll at `t_ms`, from the timing alone.
fn expected(t_ms: u32) -> [Lamps; 2] {
    use Lamps as L;
    match t_ms {
        0..2000 => [L::RED, L::RED],          // start-up all-red
        2000..8000 => [L::GREEN, L::RED],     // phase 0, 6 s split
        8000..11_000 => [L::YELLOW, L::RED],  // 3 s yellow
        11_000..13_000 => [L::RED, L::RED],   // 2 s all-red
        13_000..19_000 => [L::RED, L::GREEN], // phase 1
        19_000..22_000 => [L::RED, L::YELLOW],
        22_000..24_000 => [L::RED, L::RED],
        24_000..30_000 => [L::GREEN, L::RED], // phase 0 again
        _ => [L::YELLOW, L::RED],
    }
}

fn level(on: bool) -> State {
    if on {
        State::High
    } else {
        State::Low
    }
}

fn lamp(l: Lamps, k: usize) -> bool {
    [l.red, l.yellow, l.green][k]
}

/// Per-pin expectations for a sequence of polls: `shown[i]` is what poll `i` drives;
/// `sensed[i]` what its readback returns (`None`: no readback, as in flash).
struct Expectations {
    outputs: [[Vec<Pin>; 3]; 2],
    sense: [[Vec<Pin>; 3]; 2],
    loops: Vec<Pin>,
}

impl Expectations {
    fn build(shown: &[[Lamps; 2]], sensed: &[Option<[Lamps; 2]>]) -> Self {
        let mut e = Expectations {
            outputs: Default::default(),
            sense: Default::default(),
            loops: Vec::new(),
        };
        let mut before: [Option<Lamps>; 2] = [None, None];
        for (now, read) in shown.iter().zip(sensed) {
            for g in 0..2 {
                for k in 0..3 {
                    let on = lamp(now[g], k);
                    if before[g].is_none_or(|b| lamp(b, k) != on) {
                        e.outputs[g][k].push(Pin::set(level(on)));
                    }
                    if let Some(read) = read {
                        e.sense[g][k].push(Pin::get(level(lamp(read[g], k))));
                    }
                }
                before[g] = Some(now[g]);
            }
            e.loops.push(Pin::get(State::Low));
        }
        e
    }

    fn pins(&self) -> BoardPins<PinMock, PinMock, PinMock, 2, 1> {
        let head = |p: &[Vec<Pin>; 3]| HeadPins {
            red: PinMock::new(&p[0]),
            yellow: PinMock::new(&p[1]),
            green: PinMock::new(&p[2]),
        };
        BoardPins {
            lamp_outputs: [head(&self.outputs[0]), head(&self.outputs[1])],
            lamp_sense: [head(&self.sense[0]), head(&self.sense[1])],
            loops: [LaneDetectorPins {
                entry: PinMock::new(&self.loops),
                stop_bar: PinMock::new(&self.loops),
            }],
        }
    }
}

/// Clones of every mock (they share expectations) so they can be checked after the run.
fn clones(p: &BoardPins<PinMock, PinMock, PinMock, 2, 1>) -> Vec<PinMock> {
    let mut v = Vec::new();
    for h in p.lamp_outputs.iter().chain(&p.lamp_sense) {
        v.extend([h.red.clone(), h.yellow.clone(), h.green.clone()]);
    }
    v.extend([p.loops[0].entry.clone(), p.loops[0].stop_bar.clone()]);
    v
}

type MockController = Controller<'static, PinMock, PinMock, PinMock, StepClock, 2, 1>;

fn controller(
    pins: BoardPins<PinMock, PinMock, PinMock, 2, 1>,
    flash_half_period_ms: u32,
    clock: &Rc<Cell<u32>>,
) -> MockController {
    let plan = two_phase_plan();
    let card = MonitorCard::from_plan(&plan, Millis::ZERO);
    let fixed = FixedCycle::from_splits(&plan, &[6000, 6000]).unwrap();
    Controller::new(
        plan,
        board(flash_half_period_ms),
        pins,
        card,
        fixed,
        None,
        StepClock(clock.clone()),
    )
    .unwrap()
}

#[test]
fn full_cycle_writes_exactly_the_expected_pin_sequence() {
    let polls: Vec<u32> = (1..=30).map(|s| s * 1000).collect();
    let shown: Vec<[Lamps; 2]> = polls.iter().map(|&t| expected(t)).collect();
    let sensed: Vec<Option<[Lamps; 2]>> = shown.iter().map(|&s| Some(s)).collect();
    let e = Expectations::build(&shown, &sensed);
    let pins = e.pins();
    let mut mocks = clones(&pins);
    let clock = Rc::new(Cell::new(0));
    let mut ctl = controller(pins, 500, &clock);
    for &t in &polls {
        clock.set(t);
        let report = ctl.poll();
        assert_ne!(report.mode, Mode::Flash, "at {t} ms: {:?}", report.fault);
        assert_eq!(ctl.commanded_lamps(), &expected(t), "at {t} ms");
    }
    for m in &mut mocks {
        m.done();
    }
}

#[test]
fn stuck_green_readback_latches_flash_and_flashes_red() {
    // Polls every second to 11 s follow the cycle; at 11 s group 0 should be red but its
    // green still reads lit. Then flash with a 1 s half period: red off at 12 s, on at 13 s...
    let polls: Vec<u32> = (1..=16).map(|s| s * 1000).collect();
    let mut shown = Vec::new();
    let mut sensed = Vec::new();
    for &t in &polls {
        match t {
            ..11_000 => {
                shown.push(expected(t));
                sensed.push(Some(expected(t)));
            }
            11_000 => {
                shown.push(expected(t));
                let stuck = Lamps {
                    red: true,
                    yellow: false,
                    green: true,
                };
                sensed.push(Some([stuck, Lamps::RED]));
            }
            _ => {
                let lit = ((t - 11_000) / 1000) % 2 == 0;
                let l = if lit { Lamps::RED } else { Lamps::DARK };
                shown.push([l, l]);
                sensed.push(None);
            }
        }
    }
    let e = Expectations::build(&shown, &sensed);
    let pins = e.pins();
    let mut mocks = clones(&pins);
    let clock = Rc::new(Cell::new(0));
    let mut ctl = controller(pins, 1000, &clock);
    for &t in &polls {
        clock.set(t);
        ctl.poll();
    }
    let fault = ctl.fault().unwrap();
    assert_eq!(fault.kind, FaultKind::MultipleIndications { channel: 0 });
    assert_eq!(fault.at_ms, 11_000);
    assert_eq!(ctl.mode(), Mode::Flash);
    for m in &mut mocks {
        m.done();
    }
}

/// A head writes only the lamps that change; with active-low drivers the levels are
/// inverted. (The on-before-off order across pins is checked in `heads`' unit tests.)
#[test]
fn head_writes_only_changes_with_active_low_drivers() {
    let red = [Pin::set(State::Low), Pin::set(State::High)];
    let yellow = [
        Pin::set(State::High),
        Pin::set(State::Low),
        Pin::set(State::High),
    ];
    let green = [Pin::set(State::High)];
    let (mut r, mut y, mut g) = (
        PinMock::new(&red),
        PinMock::new(&yellow),
        PinMock::new(&green),
    );
    let mut head = SignalHead::new(HeadPins {
        red: r.clone(),
        yellow: y.clone(),
        green: g.clone(),
    });
    head.drive(Lamps::RED, Polarity::ActiveLow).unwrap(); // R on (low), Y off, G off
    head.drive(Lamps::RED, Polarity::ActiveLow).unwrap(); // nothing changes
    head.drive(Lamps::YELLOW, Polarity::ActiveLow).unwrap(); // Y on, then R off
    head.drive(Lamps::DARK, Polarity::ActiveLow).unwrap(); // Y off
    r.done();
    y.done();
    g.done();
}

/// Debouncing: a 20 ms chatter is ignored, a 60 ms presence counts one vehicle and its
/// occupancy; the interval is reset when taken.
#[test]
fn detector_debounces_and_counts() {
    // Samples every 10 ms: low, chatter high for 2 samples, low, then high for 8 samples, low.
    let levels: Vec<bool> = [false; 3]
        .into_iter()
        .chain([true; 2])
        .chain([false; 3])
        .chain([true; 8])
        .chain([false; 8])
        .collect();
    let tx: Vec<Pin> = levels.iter().map(|&h| Pin::get(level(h))).collect();
    let mut pin = PinMock::new(&tx);
    let mut d = Detector::new(pin.clone());
    let mut rises = Vec::new();
    for (i, _) in levels.iter().enumerate() {
        let t = i as u64 * 10;
        let was = d.present();
        d.sample(t, Polarity::ActiveHigh, Millis(30)).unwrap();
        if d.present() && !was {
            rises.push(t);
        }
    }
    assert_eq!(rises, [110], "raw high at 80 ms, stable for 30 ms");
    let interval = d.take_interval();
    assert_eq!(interval.count, 1);
    // Present from 110 ms until the debounced fall at 190 ms (raw low at 160 ms).
    assert_eq!(interval.occupied, Millis(80));
    assert_eq!(d.take_interval().count, 0);
    pin.done();
}
