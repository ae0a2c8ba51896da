//! The single-4way cabinet with a policy that reads the program clock (int8): the
//! junction's own cycle as one pseudo-lane per phase after the detector lanes. The blob,
//! `blobs/single-4way-clock.int8.blob`, is a synthetic network of the clock's layout (see
//! `blobs/README.md`): no policy for this cabinet's plan is trained with the clock, which
//! greenwave's SUMO runs give and its embedded simulator does not.
#![no_std]
#![no_main]

use core::mem::MaybeUninit;

use cortex_m_rt::entry;
use greenwave_board_mps2::Mps2Cabinet;
use greenwave_firmware::ProgramClock;

/// The policy blob, in flash.
static BLOB: &[u8] = include_bytes!("../../blobs/single-4way-clock.int8.blob");

#[entry]
fn main() -> ! {
    // cortex-m-rt hands these out as `&'static mut` (safe: `main` runs once).
    static mut CLOCK: MaybeUninit<ProgramClock> = MaybeUninit::uninit();
    static mut CABINET: MaybeUninit<Mps2Cabinet> = MaybeUninit::uninit();
    greenwave_board_mps2::boot_with_clock(BLOB, CLOCK, CABINET)
}
