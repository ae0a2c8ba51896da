//! The emulated I/O bank: eight 16-pin ports laid out like the firmware's example pin map
//! (`PinMap::example_single_4way`), with the field wired behind them.
//!
//! | ports | role | what backs them |
//! |---|---|---|
//! | 0–2 | lamp outputs (R, Y, G of group g at index 3g, 3g+1, 3g+2) | an output data latch |
//! | 3–5 | lamp sense, same layout | the field terminals: port k+3 reads latch k, except where a fault forces them |
//! | 6–7 | loops (lane l entry at index 2l, stop bar at 2l+1) | the detector trace |
//!
//! The bank is plain atomics (single-core: relaxed loads and stores) in a `static`, and its
//! pins are two bytes (port, pin) that name the bank by type ([`BankRef`], zero-sized), like
//! a HAL's pins name their GPIO block: the pins cost the controller's static RAM what real
//! ones would. Declare a bank with [`io_bank!`](crate::io_bank): one for the board, one per
//! host test that runs in parallel.

use core::convert::Infallible;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU16, AtomicU32, Ordering::Relaxed};

use embedded_hal::digital::{ErrorType, InputPin, OutputPin};
use greenwave_firmware::heads::Lamp;
use greenwave_firmware::{Lamps, MonotonicClock, PinId, PinProvider};

/// Pins per port.
pub const PORT_PINS: u8 = 16;
/// First lamp-output port.
pub const LAMP_OUTPUT_PORT: u8 = 0;
/// First lamp-sense port.
pub const LAMP_SENSE_PORT: u8 = 3;
/// First loop port.
pub const LOOP_PORT: u8 = 6;
/// Lamp ports (outputs; the sense ports mirror them).
pub const LAMP_PORTS: usize = 3;
/// Loop ports.
pub const LOOP_PORTS: usize = 2;

/// The emulated ports and the emulated millisecond timer.
#[derive(Debug, Default)]
pub struct IoBank {
    lamp_latch: [AtomicU16; LAMP_PORTS],
    forced_mask: [AtomicU16; LAMP_PORTS],
    forced_lit: [AtomicU16; LAMP_PORTS],
    loops: [AtomicU16; LOOP_PORTS],
    now_ms: AtomicU32,
}

/// Index of `lamp` within a group's three pins.
const fn lamp_index(lamp: Lamp) -> usize {
    match lamp {
        Lamp::Red => 0,
        Lamp::Yellow => 1,
        Lamp::Green => 2,
    }
}

impl IoBank {
    /// All outputs off, no forced terminals, loops empty, timer at 0.
    pub const fn new() -> Self {
        IoBank {
            lamp_latch: [AtomicU16::new(0), AtomicU16::new(0), AtomicU16::new(0)],
            forced_mask: [AtomicU16::new(0), AtomicU16::new(0), AtomicU16::new(0)],
            forced_lit: [AtomicU16::new(0), AtomicU16::new(0), AtomicU16::new(0)],
            loops: [AtomicU16::new(0), AtomicU16::new(0)],
            now_ms: AtomicU32::new(0),
        }
    }

    /// Back to the state of [`IoBank::new`].
    pub fn reset(&self) {
        for word in self
            .lamp_latch
            .iter()
            .chain(&self.forced_mask)
            .chain(&self.forced_lit)
            .chain(&self.loops)
        {
            word.store(0, Relaxed);
        }
        self.now_ms.store(0, Relaxed);
    }

    /// Advances the timer by `dt_ms` and sets every loop input: bit `2l` of `loops` is lane
    /// `l`'s entry loop, bit `2l + 1` its stop-bar loop (bits 0–15 port 6, 16–31 port 7).
    pub fn advance(&self, dt_ms: u32, loops: u32) {
        self.now_ms
            .store(self.now_ms.load(Relaxed).wrapping_add(dt_ms), Relaxed);
        self.loops[0].store(loops as u16, Relaxed);
        self.loops[1].store((loops >> 16) as u16, Relaxed);
    }

    /// From now on the field terminals of `group` show `lamps` whatever the outputs drive
    /// (a welded load switch, a crossed field wire). Groups beyond the bank are ignored.
    pub fn force(&self, group: u8, lamps: Lamps) {
        for (lamp, lit) in [
            (Lamp::Red, lamps.red),
            (Lamp::Yellow, lamps.yellow),
            (Lamp::Green, lamps.green),
        ] {
            let index = 3 * group as usize + lamp_index(lamp);
            let (port, pin) = (index / PORT_PINS as usize, index % PORT_PINS as usize);
            if port < LAMP_PORTS {
                let set = |word: &AtomicU16, on: bool| {
                    let old = word.load(Relaxed);
                    word.store(
                        if on {
                            old | 1 << pin
                        } else {
                            old & !(1 << pin)
                        },
                        Relaxed,
                    );
                };
                set(&self.forced_mask[port], true);
                set(&self.forced_lit[port], lit);
            }
        }
    }

    /// The timer, ms.
    pub fn now_ms(&self) -> u32 {
        self.now_ms.load(Relaxed)
    }

    fn lamp_terminal(&self, port: usize, mask: u16) -> bool {
        let forced = self.forced_mask[port].load(Relaxed);
        let terminals =
            self.lamp_latch[port].load(Relaxed) & !forced | self.forced_lit[port].load(Relaxed);
        terminals & mask != 0
    }
}

/// Names a `static` [`IoBank`] by type. Declare one with [`io_bank!`](crate::io_bank).
pub trait BankRef: 'static {
    /// The bank.
    fn bank() -> &'static IoBank;
}

/// Declares a zero-sized type naming a new `static` [`IoBank`]:
/// `io_bank!(pub Board);` then `Board::bank()`.
#[macro_export]
macro_rules! io_bank {
    ($vis:vis $name:ident) => {
        /// A `static` I/O bank.
        #[derive(Debug)]
        $vis struct $name;
        impl $crate::io::BankRef for $name {
            fn bank() -> &'static $crate::io::IoBank {
                static BANK: $crate::io::IoBank = $crate::io::IoBank::new();
                &BANK
            }
        }
    };
}

/// One pin of bank `B`: a port index within its group of ports, and a pin number.
#[derive(Debug)]
struct BankPin<B> {
    port: u8,
    pin: u8,
    bank: PhantomData<fn() -> B>,
}

impl<B: BankRef> BankPin<B> {
    fn new(port: usize, pin: u8) -> Self {
        BankPin {
            port: port as u8,
            pin,
            bank: PhantomData,
        }
    }

    fn port(&self) -> usize {
        self.port as usize
    }

    fn mask(&self) -> u16 {
        1 << self.pin
    }
}

/// A lamp output: one bit of the output latch.
#[derive(Debug)]
pub struct LampOutput<B>(BankPin<B>);

impl<B> ErrorType for LampOutput<B> {
    type Error = Infallible;
}

impl<B: BankRef> OutputPin for LampOutput<B> {
    fn set_low(&mut self) -> Result<(), Infallible> {
        let latch = &B::bank().lamp_latch[self.0.port()];
        latch.store(latch.load(Relaxed) & !self.0.mask(), Relaxed);
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), Infallible> {
        let latch = &B::bank().lamp_latch[self.0.port()];
        latch.store(latch.load(Relaxed) | self.0.mask(), Relaxed);
        Ok(())
    }
}

/// A lamp-sense input: the field terminal of the output at the same index.
#[derive(Debug)]
pub struct LampSenseInput<B>(BankPin<B>);

impl<B> ErrorType for LampSenseInput<B> {
    type Error = Infallible;
}

impl<B: BankRef> InputPin for LampSenseInput<B> {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        Ok(B::bank().lamp_terminal(self.0.port(), self.0.mask()))
    }
    fn is_low(&mut self) -> Result<bool, Infallible> {
        self.is_high().map(|h| !h)
    }
}

/// A loop detector input, set by the trace.
#[derive(Debug)]
pub struct LoopInput<B>(BankPin<B>);

impl<B> ErrorType for LoopInput<B> {
    type Error = Infallible;
}

impl<B: BankRef> InputPin for LoopInput<B> {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        Ok(B::bank().loops[self.0.port()].load(Relaxed) & self.0.mask() != 0)
    }
    fn is_low(&mut self) -> Result<bool, Infallible> {
        self.is_high().map(|h| !h)
    }
}

/// The bank's millisecond timer as the controller's clock.
#[derive(Debug)]
pub struct BankClock<B>(PhantomData<fn() -> B>);

impl<B> Default for BankClock<B> {
    fn default() -> Self {
        BankClock(PhantomData)
    }
}

impl<B: BankRef> MonotonicClock for BankClock<B> {
    fn now_ms(&mut self) -> u32 {
        B::bank().now_ms()
    }
}

/// Hands out the bank's pins for a pin map: lamp outputs on ports 0–2, lamp sense on
/// ports 3–5, loops on ports 6–7; any other pin is unavailable.
#[derive(Debug)]
pub struct BankPins<B>(PhantomData<fn() -> B>);

impl<B> Default for BankPins<B> {
    fn default() -> Self {
        BankPins(PhantomData)
    }
}

/// `(port index within the group of ports, pin)` if `pin` lies in `count` ports from
/// `first`.
fn locate(pin: PinId, first: u8, count: usize) -> Option<(usize, u8)> {
    let port = pin.port.checked_sub(first)? as usize;
    (port < count && pin.pin < PORT_PINS).then_some((port, pin.pin))
}

impl<B: BankRef> PinProvider for BankPins<B> {
    type LampOutput = LampOutput<B>;
    type LampSense = LampSenseInput<B>;
    type Loop = LoopInput<B>;

    fn lamp_output(&mut self, pin: PinId) -> Option<LampOutput<B>> {
        let (port, pin) = locate(pin, LAMP_OUTPUT_PORT, LAMP_PORTS)?;
        Some(LampOutput(BankPin::new(port, pin)))
    }

    fn lamp_sense(&mut self, pin: PinId) -> Option<LampSenseInput<B>> {
        let (port, pin) = locate(pin, LAMP_SENSE_PORT, LAMP_PORTS)?;
        Some(LampSenseInput(BankPin::new(port, pin)))
    }

    fn loop_input(&mut self, pin: PinId) -> Option<LoopInput<B>> {
        let (port, pin) = locate(pin, LOOP_PORT, LOOP_PORTS)?;
        Some(LoopInput(BankPin::new(port, pin)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sense_reads_the_terminals_and_loops_follow_the_trace() {
        crate::io_bank!(TestBank);
        let bank = TestBank::bank();
        let mut pins = BankPins::<TestBank>::default();
        // Group 5 green: index 17 → port 1 pin 1 (output), port 4 pin 1 (sense).
        let mut out = pins.lamp_output(PinId::new(1, 1)).unwrap();
        let mut sense = pins.lamp_sense(PinId::new(4, 1)).unwrap();
        assert!(!sense.is_high().unwrap());
        out.set_high().unwrap();
        assert!(sense.is_high().unwrap());
        out.set_low().unwrap();
        assert!(!sense.is_high().unwrap());
        bank.force(5, Lamps::GREEN);
        assert!(sense.is_high().unwrap(), "a forced lamp stays lit");
        let mut red = pins.lamp_output(PinId::new(0, 15)).unwrap();
        let mut red_sense = pins.lamp_sense(PinId::new(3, 15)).unwrap();
        red.set_high().unwrap();
        assert!(
            !red_sense.is_high().unwrap(),
            "a forced group's red reads dark"
        );
        // Lane 11 stop bar: bit 23 → port 7 pin 7.
        let mut stop_bar = pins.loop_input(PinId::new(7, 7)).unwrap();
        bank.advance(10, 1 << 23);
        assert!(stop_bar.is_high().unwrap());
        bank.advance(10, 0);
        assert!(stop_bar.is_low().unwrap());
        assert_eq!(bank.now_ms(), 20);
        assert!(pins.lamp_output(PinId::new(3, 0)).is_none());
        assert!(pins.loop_input(PinId::new(8, 0)).is_none());
        assert!(pins.lamp_sense(PinId::new(5, 16)).is_none());
        assert_eq!(core::mem::size_of::<LampOutput<TestBank>>(), 2);
        assert_eq!(core::mem::size_of::<BankClock<TestBank>>(), 0);
        bank.reset();
        assert!(!sense.is_high().unwrap() && bank.now_ms() == 0);
    }
}
