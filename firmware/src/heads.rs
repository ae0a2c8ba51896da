//! Signal heads: the red, yellow and green lamp outputs of each signal group, and the
//! lamp-sense inputs the conflict monitor reads them back through.
//!
//! One signal group drives one movement of the phase plan (group `i` = movement `i`).

use embedded_hal::digital::{Error as _, ErrorKind, InputPin, OutputPin};
use greenwave_core::{MovementId, Signal, SignalFrame};
use serde::{Deserialize, Serialize};

use crate::board::Polarity;

/// Which lamps of one head are lit (commanded, or sensed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lamps {
    /// Red lamp lit.
    pub red: bool,
    /// Yellow lamp lit.
    pub yellow: bool,
    /// Green lamp lit.
    pub green: bool,
}

impl Lamps {
    /// Steady red.
    pub const RED: Lamps = Lamps {
        red: true,
        yellow: false,
        green: false,
    };
    /// Steady yellow.
    pub const YELLOW: Lamps = Lamps {
        red: false,
        yellow: true,
        green: false,
    };
    /// Steady green.
    pub const GREEN: Lamps = Lamps {
        red: false,
        yellow: false,
        green: true,
    };
    /// All lamps off (the dark half of a flash period).
    pub const DARK: Lamps = Lamps {
        red: false,
        yellow: false,
        green: false,
    };

    /// What movement `m` shows in `frame`.
    pub fn for_movement(frame: &SignalFrame, m: MovementId) -> Lamps {
        match frame.signal(m) {
            Signal::Green => Lamps::GREEN,
            Signal::Yellow => Lamps::YELLOW,
            Signal::Red => Lamps::RED,
        }
    }

    /// Number of lamps lit.
    pub const fn lit(self) -> u8 {
        self.red as u8 + self.yellow as u8 + self.green as u8
    }

    fn get(self, lamp: Lamp) -> bool {
        match lamp {
            Lamp::Red => self.red,
            Lamp::Yellow => self.yellow,
            Lamp::Green => self.green,
        }
    }
}

/// One lamp of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lamp {
    /// The red lamp.
    Red,
    /// The yellow lamp.
    Yellow,
    /// The green lamp.
    Green,
}

impl Lamp {
    /// The three lamps, top to bottom.
    pub const ALL: [Lamp; 3] = [Lamp::Red, Lamp::Yellow, Lamp::Green];
}

impl core::fmt::Display for Lamp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Lamp::Red => "red",
            Lamp::Yellow => "yellow",
            Lamp::Green => "green",
        })
    }
}

/// The three pins of one head (lamp outputs, or lamp-sense inputs, or their pin ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeadPins<P> {
    /// Red lamp.
    pub red: P,
    /// Yellow lamp.
    pub yellow: P,
    /// Green lamp.
    pub green: P,
}

impl<P> HeadPins<P> {
    /// The same head with each pin converted by `f` (red, yellow, green in that order).
    pub fn map<T>(self, mut f: impl FnMut(P) -> T) -> HeadPins<T> {
        HeadPins {
            red: f(self.red),
            yellow: f(self.yellow),
            green: f(self.green),
        }
    }

    fn pin_mut(&mut self, lamp: Lamp) -> &mut P {
        match lamp {
            Lamp::Red => &mut self.red,
            Lamp::Yellow => &mut self.yellow,
            Lamp::Green => &mut self.green,
        }
    }
}

/// A pin operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinFault {
    /// The lamp whose pin failed.
    pub lamp: Lamp,
    /// The HAL's error kind.
    pub kind: ErrorKind,
}

/// One signal head driven through three output pins.
///
/// Only lamps whose state changes are written, and lamps being switched on are switched on
/// before the others are switched off, so a head is never dark between two indications (a
/// momentary double indication lasts one pin write; the monitor reads back after all writes).
#[derive(Debug)]
pub struct SignalHead<O> {
    pins: HeadPins<O>,
    /// What the pins are known to show; `None` after a failed write (all are rewritten).
    driven: Option<Lamps>,
}

impl<O: OutputPin> SignalHead<O> {
    /// A head whose pin state is not yet known (the first [`drive`](Self::drive) writes all).
    pub fn new(pins: HeadPins<O>) -> Self {
        SignalHead { pins, driven: None }
    }

    /// Lamps as last driven successfully, if known.
    pub fn driven(&self) -> Option<Lamps> {
        self.driven
    }

    /// Shows `want`.
    pub fn drive(&mut self, want: Lamps, polarity: Polarity) -> Result<(), PinFault> {
        let before = self.driven;
        let changed = |lamp: Lamp| before.is_none_or(|b| b.get(lamp) != want.get(lamp));
        // Switch on first, then off.
        for on_pass in [true, false] {
            for lamp in Lamp::ALL {
                if want.get(lamp) != on_pass || !changed(lamp) {
                    continue;
                }
                let level_high = polarity.level_for(on_pass);
                let pin = self.pins.pin_mut(lamp);
                let result = if level_high {
                    pin.set_high()
                } else {
                    pin.set_low()
                };
                if let Err(e) = result {
                    self.driven = None;
                    return Err(PinFault {
                        lamp,
                        kind: e.kind(),
                    });
                }
            }
        }
        self.driven = Some(want);
        Ok(())
    }
}

/// The lamp-sense inputs of one head: what the field wiring actually shows.
#[derive(Debug)]
pub struct LampSense<S> {
    pins: HeadPins<S>,
}

impl<S: InputPin> LampSense<S> {
    /// Sense inputs of one head.
    pub fn new(pins: HeadPins<S>) -> Self {
        LampSense { pins }
    }

    /// Reads which lamps are lit.
    pub fn read(&mut self, polarity: Polarity) -> Result<Lamps, PinFault> {
        let mut lit = [false; 3];
        for (slot, lamp) in lit.iter_mut().zip(Lamp::ALL) {
            let high = self.pins.pin_mut(lamp).is_high().map_err(|e| PinFault {
                lamp,
                kind: e.kind(),
            })?;
            *slot = polarity.is_active(high);
        }
        Ok(Lamps {
            red: lit[0],
            yellow: lit[1],
            green: lit[2],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;
    use core::convert::Infallible;
    use std::vec::Vec;

    /// Output pins that log (lamp, level) into one shared list.
    struct LogPin<'a> {
        lamp: Lamp,
        log: &'a RefCell<Vec<(Lamp, bool)>>,
    }
    impl embedded_hal::digital::ErrorType for LogPin<'_> {
        type Error = Infallible;
    }
    impl OutputPin for LogPin<'_> {
        fn set_low(&mut self) -> Result<(), Infallible> {
            self.log.borrow_mut().push((self.lamp, false));
            Ok(())
        }
        fn set_high(&mut self) -> Result<(), Infallible> {
            self.log.borrow_mut().push((self.lamp, true));
            Ok(())
        }
    }

    #[test]
    fn new_lamp_goes_on_before_the_old_goes_off() {
        let log = RefCell::new(Vec::new());
        let pin = |lamp| LogPin { lamp, log: &log };
        let mut head = SignalHead::new(HeadPins {
            red: pin(Lamp::Red),
            yellow: pin(Lamp::Yellow),
            green: pin(Lamp::Green),
        });
        head.drive(Lamps::GREEN, Polarity::ActiveHigh).unwrap();
        head.drive(Lamps::YELLOW, Polarity::ActiveHigh).unwrap();
        head.drive(Lamps::RED, Polarity::ActiveHigh).unwrap();
        assert_eq!(
            log.into_inner(),
            [
                (Lamp::Green, true),
                (Lamp::Red, false),
                (Lamp::Yellow, false),
                (Lamp::Yellow, true),
                (Lamp::Green, false),
                (Lamp::Red, true),
                (Lamp::Yellow, false),
            ]
        );
    }
}
