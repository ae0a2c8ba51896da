//! Freestanding binary: the single-4way controller over dummy pins, built from the example
//! pin map, polled and drained. Nothing runs it; it must link without std or an allocator.
#![no_std]
#![no_main]

use core::convert::Infallible;
use core::mem::MaybeUninit;
use core::panic::PanicInfo;
use core::ptr::addr_of_mut;

use embedded_hal::digital::{ErrorType, InputPin, OutputPin};
use greenwave_core::{PhasePlan, PhaseTiming};
use greenwave_firmware::{
    BoardConfig, Controller, FixedCycle, MonitorCard, MonotonicClock, PinId, PinMap, PinProvider,
};

#[panic_handler]
#[allow(clippy::empty_loop)]
fn panic(_: &PanicInfo) -> ! {
    loop {}
}

/// The host's precompiled `core` names this symbol in its unwinding tables; nothing here
/// unwinds (panic = "abort"). An MCU target's `core` does not need it.
#[no_mangle]
extern "C" fn rust_eh_personality() {}

/// A pin that does nothing (an MCU HAL pin is typically zero-sized too).
#[derive(Clone, Copy)]
struct DummyPin;

impl ErrorType for DummyPin {
    type Error = Infallible;
}
impl OutputPin for DummyPin {
    fn set_low(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
impl InputPin for DummyPin {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        Ok(core::hint::black_box(false))
    }
    fn is_low(&mut self) -> Result<bool, Infallible> {
        Ok(core::hint::black_box(true))
    }
}

struct DummyBoard;

impl PinProvider for DummyBoard {
    type LampOutput = DummyPin;
    type LampSense = DummyPin;
    type Loop = DummyPin;
    fn lamp_output(&mut self, _: PinId) -> Option<DummyPin> {
        Some(DummyPin)
    }
    fn lamp_sense(&mut self, _: PinId) -> Option<DummyPin> {
        Some(DummyPin)
    }
    fn loop_input(&mut self, _: PinId) -> Option<DummyPin> {
        Some(DummyPin)
    }
}

/// A millisecond counter advancing 10 ms per reading.
struct Tick(u32);

impl MonotonicClock for Tick {
    fn now_ms(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(10);
        self.0
    }
}

/// A UART that swallows bytes.
struct Uart;

impl embedded_io::ErrorType for Uart {
    type Error = Infallible;
}
impl embedded_io::Write for Uart {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        Ok(core::hint::black_box(buf).len())
    }
    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

type Cabinet = Controller<'static, DummyPin, DummyPin, DummyPin, Tick, 12, 12>;

/// The controller lives in static RAM, as on the MCU; its symbol size is the firmware's
/// static RAM for state and buffers.
#[no_mangle]
static mut GREENWAVE_CONTROLLER: MaybeUninit<Cabinet> = MaybeUninit::uninit();

/// The policy blob as flashed; empty here (the fixed-time fallback), hidden from the
/// optimiser so the forward pass is linked in.
static BLOB: [u8; 0] = [];

fn run() -> u32 {
    let Ok(plan) = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)) else {
        return 1;
    };
    let Ok(pins) = PinMap::example_single_4way().take_pins(&mut DummyBoard) else {
        return 2;
    };
    let board = BoardConfig::<12>::one_lane_per_movement(1, 10);
    let card = MonitorCard::from_plan(&plan, board.fault_persistence);
    let fixed = FixedCycle::midpoint(&plan);
    let blob: &'static [u8] = core::hint::black_box(&BLOB);
    let Ok(ctl) = Controller::new(plan, board, pins, card, fixed, Some(blob), Tick(0)) else {
        return 3;
    };
    // SAFETY: single-threaded start-up code; nothing else touches the static.
    let ctl: &mut Cabinet = unsafe { (*addr_of_mut!(GREENWAVE_CONTROLLER)).write(ctl) };
    let mut uart = Uart;
    let mut greens = 0;
    for _ in 0..core::hint::black_box(100_000) {
        let report = ctl.poll();
        greens += report.decision.is_some() as u32;
        if ctl.drain_transitions(&mut uart, 1).is_err() {
            return 4;
        }
    }
    ctl.reset_from_flash();
    greens
}

/// Entry point: nothing calls it at run time; it roots `run` for the linker.
#[no_mangle]
#[allow(clippy::empty_loop)]
pub extern "C" fn _start() -> ! {
    core::hint::black_box(run());
    loop {}
}
