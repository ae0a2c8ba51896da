//! The single-4way cabinet with the shipped policy quantised to int8 (`models/single-4way.int8.blob`).
#![no_std]
#![no_main]

use core::mem::MaybeUninit;

use cortex_m_rt::entry;
use greenwave_board_mps2::Mps2Cabinet;

/// The policy blob, in flash.
static BLOB: &[u8] = include_bytes!("../../../../models/single-4way.int8.blob");

#[entry]
fn main() -> ! {
    // cortex-m-rt hands this out as `&'static mut` (safe: `main` runs once).
    static mut CABINET: MaybeUninit<Mps2Cabinet> = MaybeUninit::uninit();
    greenwave_board_mps2::boot(BLOB, CABINET)
}
