//! # greenwave-board-mps2
//!
//! `greenwave-firmware` on the Arm MPS2+ AN386 (Cortex-M4F) as `qemu-system-arm -machine
//! mps2-an386` emulates it. The board boots into the single-4way controller over the
//! emulated I/O bank of `greenwave-firmware-replay` (QEMU's MPS2 GPIO is not emulated), feeds
//! it the detector trace `trace.bin` read through semihosting, and writes:
//!
//! * `events.bin` (semihosting): decisions, displayed signal states, the latched fault;
//! * UART0: the transition frames (the firmware's COBS + CRC-32 serial format);
//! * `stats.bin` (semihosting): stack high-water marks and SysTick counts per poll.
//!
//! It exits through semihosting: status 0 when the trace was replayed, 1 otherwise.
#![no_std]

mod meter;
mod semihost;
mod stack;
mod uart;

use core::mem::MaybeUninit;
use core::panic::PanicInfo;

use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};
use embedded_io::Write;
use greenwave_firmware::Policy;
use greenwave_firmware_replay::stats::TargetStats;
use greenwave_firmware::ProgramClock;
use greenwave_firmware_replay::{
    cabinet, io_bank, replay, single_4way_program_clock, Cabinet, ReplayError,
};

use meter::Meter;
use semihost::{eprint, eprint_u32, HostReader, HostWriter};

io_bank!(pub Io);

/// The board's cabinet: the single-4way controller over the emulated ports and timer (see
/// `greenwave_firmware_replay::io`), its policy blob in flash.
pub type Mps2Cabinet = Cabinet<'static, Io>;

/// Why the board stopped before the end of the trace.
enum BoardError {
    Peripherals,
    Cabinet,
    HostFile,
    Replay(ReplayError),
    Stats,
}

impl BoardError {
    fn describe(&self) -> &'static [u8] {
        match self {
            BoardError::Peripherals => b"core peripherals already taken",
            BoardError::Cabinet => b"the cabinet refused its configuration",
            BoardError::HostFile => b"cannot open trace.bin / events.bin (semihosting)",
            BoardError::Replay(ReplayError::Trace(_)) => b"bad detector trace",
            BoardError::Replay(ReplayError::Events(_)) => b"event log write failed",
            BoardError::Replay(ReplayError::Serial(_)) => b"UART write failed",
            BoardError::Stats => b"cannot write stats.bin",
        }
    }
}

/// Boots: paints the stack, builds the controller into `slot` (static RAM) with `blob` as
/// its policy, replays the trace, reports, and exits QEMU.
pub fn boot(blob: &'static [u8], slot: &'static mut MaybeUninit<Mps2Cabinet>) -> ! {
    boot_reading(blob, None, slot)
}

/// As [`boot`], with the junction's own program as a clock in the policy's observation:
/// the single-4way cycle (`single_4way_program_clock`), built into `clock` (static RAM).
/// `blob` must be for the layout with the clock's lanes.
pub fn boot_with_clock(
    blob: &'static [u8],
    clock: &'static mut MaybeUninit<ProgramClock>,
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> ! {
    boot_reading(blob, Some(clock), slot)
}

fn boot_reading(
    blob: &'static [u8],
    clock: Option<&'static mut MaybeUninit<ProgramClock>>,
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> ! {
    stack::paint();
    let code = match run(blob, clock, slot) {
        Ok(()) => EXIT_SUCCESS,
        Err(e) => {
            eprint(b"greenwave-mps2: ");
            eprint(e.describe());
            eprint(b"\n");
            EXIT_FAILURE
        }
    };
    debug::exit(code);
    #[allow(clippy::empty_loop)]
    loop {}
}

fn run(
    blob: &'static [u8],
    clock: Option<&'static mut MaybeUninit<ProgramClock>>,
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> Result<(), BoardError> {
    let core = cortex_m::Peripherals::take().ok_or(BoardError::Peripherals)?;
    meter::start_systick(core.SYST);
    let mut stats = TargetStats::default();
    (stats.calibration_instructions, stats.calibration_ticks) = meter::calibrate();
    let ctl = build(blob, clock, slot)?;
    stats.startup_stack_bytes = stack::used_bytes();
    stats.stack_size_bytes = stack::size_bytes();
    stack::paint();
    let plan_hash = ctl.sequencer().plan().hash();
    let policy = Policy::load(Some(blob), plan_hash, ctl.layout()).ok();
    let mut meter = Meter::new(policy, stats);
    let trace = HostReader::open(b"trace.bin\0").map_err(|_| BoardError::HostFile)?;
    let events = HostWriter::create(b"events.bin\0").map_err(|_| BoardError::HostFile)?;
    let mut serial = uart::Uart0::enable();
    replay(ctl, trace, events, &mut serial, &mut meter).map_err(BoardError::Replay)?;
    let mut stats = meter.stats;
    stats.loop_stack_bytes = stack::used_bytes();
    write_stats(&stats)
}

/// Builds the controller into `slot`, reading `clock` if given. Each kind is built in a
/// frame of its own (`inline(never)`) that holds the by-value temporaries of
/// `Controller::new`, so they are gone from the stack before the replay loop starts.
fn build(
    blob: &'static [u8],
    clock: Option<&'static mut MaybeUninit<ProgramClock>>,
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> Result<&'static mut Mps2Cabinet, BoardError> {
    match clock {
        None => build_plain(blob, slot),
        Some(clock) => build_clocked(blob, clock, slot),
    }
}

#[inline(never)]
fn build_plain(
    blob: &'static [u8],
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> Result<&'static mut Mps2Cabinet, BoardError> {
    let ctl = cabinet::<Io>(Some(blob)).map_err(|_| BoardError::Cabinet)?;
    Ok(slot.write(ctl))
}

/// The cabinet goes into `slot` first and reads the clock there (`read_program_clock`):
/// `cabinet_with_clock` returns it by value, which moves it on the stack again.
#[inline(never)]
fn build_clocked(
    blob: &'static [u8],
    clock: &'static mut MaybeUninit<ProgramClock>,
    slot: &'static mut MaybeUninit<Mps2Cabinet>,
) -> Result<&'static mut Mps2Cabinet, BoardError> {
    let clock: &'static ProgramClock =
        clock.write(single_4way_program_clock().map_err(|_| BoardError::Cabinet)?);
    let ctl = build_plain(blob, slot)?;
    ctl.read_program_clock(clock).map_err(|_| BoardError::Cabinet)?;
    Ok(ctl)
}

fn write_stats(stats: &TargetStats) -> Result<(), BoardError> {
    let mut buf = [0u8; 128];
    let bytes = postcard::to_slice(stats, &mut buf).map_err(|_| BoardError::Stats)?;
    let mut out = HostWriter::create(b"stats.bin\0").map_err(|_| BoardError::Stats)?;
    out.write_all(bytes).map_err(|_| BoardError::Stats)?;
    out.flush().map_err(|_| BoardError::Stats)
}

/// Names the panic's location on QEMU's standard error and exits with status 1 (no
/// message formatting: it would pull `core::fmt` into flash).
#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    eprint(b"greenwave-mps2: panic at ");
    if let Some(location) = info.location() {
        eprint(location.file().as_bytes());
        eprint(b":");
        eprint_u32(location.line());
    }
    eprint(b"\n");
    debug::exit(EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}
