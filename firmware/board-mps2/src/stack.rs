//! Stack high-water mark: the free RAM between the end of static data (`__sheap`, from
//! cortex-m-rt's linker script) and the stack pointer is painted with a pattern; later, the
//! lowest word no longer holding it marks the deepest the stack has been since.

use core::ptr::{addr_of, read_volatile, write_volatile};

const PAINT: u32 = 0x5a5a_5aa5;
/// Bytes below the stack pointer left unpainted (the painting function's own calls).
const MARGIN: usize = 64;

extern "C" {
    static __sheap: u32;
    static _stack_start: u32;
}

fn bottom() -> usize {
    // Taking the address of an extern static is safe (nothing is read).
    addr_of!(__sheap) as usize
}

fn top() -> usize {
    addr_of!(_stack_start) as usize
}

/// Bytes of stack: RAM end minus the end of static data.
pub fn size_bytes() -> u32 {
    (top() - bottom()) as u32
}

/// Paints the unused stack (up to `MARGIN` bytes below the current stack pointer).
#[inline(never)]
pub fn paint() {
    let sp = cortex_m::register::msp::read() as usize;
    let mut p = bottom();
    while p + 4 <= sp - MARGIN {
        // SAFETY: between the end of static data and below the live stack: no object
        // lives there (no heap, no interrupts enabled).
        unsafe { write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
}

/// Bytes of stack used since the last `paint`: from the RAM end down to the lowest word
/// whose paint was overwritten.
#[inline(never)]
pub fn used_bytes() -> u32 {
    let mut p = bottom();
    // SAFETY: reads RAM between the end of static data and the RAM end.
    while p < top() && unsafe { read_volatile(p as *const u32) } == PAINT {
        p += 4;
    }
    (top() - p) as u32
}
