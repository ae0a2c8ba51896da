//! UART0 of the mps2-an386 (an Arm CMSDK APB UART at 0x4000_4000), transmit only: the
//! transition frames leave through it exactly as they would through a cabinet's serial
//! port (QEMU: `-serial file:uart0.bin` captures them).

use core::convert::Infallible;
use core::ptr::{read_volatile, write_volatile};

const BASE: usize = 0x4000_4000;
const DATA: *mut u32 = BASE as *mut u32;
const STATE: *const u32 = (BASE + 0x04) as *const u32;
const CTRL: *mut u32 = (BASE + 0x08) as *mut u32;
const BAUDDIV: *mut u32 = (BASE + 0x10) as *mut u32;
/// STATE: transmit buffer full.
const TX_FULL: u32 = 1 << 0;
/// CTRL: transmitter enabled.
const TX_ENABLE: u32 = 1 << 0;
/// 25 MHz / 115 200 baud (QEMU refuses dividers below 16).
const DIVIDER_115200: u32 = 217;

/// The transmitter of UART0.
pub struct Uart0 {
    _owned: (),
}

impl Uart0 {
    /// Enables the transmitter at 115 200 baud. Call once.
    pub fn enable() -> Self {
        // SAFETY: the UART0 registers of the mps2-an386; nothing else in this firmware
        // touches them.
        unsafe {
            write_volatile(BAUDDIV, DIVIDER_115200);
            write_volatile(CTRL, TX_ENABLE);
        }
        Uart0 { _owned: () }
    }

    fn send(&mut self, byte: u8) {
        // SAFETY: as in `enable`.
        unsafe {
            while read_volatile(STATE) & TX_FULL != 0 {}
            write_volatile(DATA, byte as u32);
        }
    }
}

impl embedded_io::ErrorType for Uart0 {
    type Error = Infallible;
}

impl embedded_io::Write for Uart0 {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Infallible> {
        for &b in bytes {
            self.send(b);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        // SAFETY: as in `enable`.
        unsafe { while read_volatile(STATE) & TX_FULL != 0 {} }
        Ok(())
    }
}
