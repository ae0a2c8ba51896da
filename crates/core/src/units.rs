//! Time in whole milliseconds.
//!
//! The sequencer counts time in integer milliseconds so that interval boundaries are exact:
//! a 3 s yellow is 3000 ms whatever the tick size, with no floating-point drift over a day
//! of operation (8.64e7 ms fits a `u32` comfortably; one interval never exceeds minutes).

use serde::{Deserialize, Serialize};

/// A duration in milliseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Millis(pub u32);

impl Millis {
    /// Zero duration.
    pub const ZERO: Millis = Millis(0);

    /// The most whole seconds a `Millis` holds ([`Millis::from_secs`] of more overflows).
    pub const MAX_SECS: u32 = u32::MAX / 1000;

    /// Whole seconds (at most [`Millis::MAX_SECS`]).
    pub const fn from_secs(s: u32) -> Millis {
        Millis(s * 1000)
    }

    /// Seconds as `f32` (rounded to the nearest millisecond); `None` for negative, NaN or
    /// values that do not fit.
    pub fn from_secs_f32(s: f32) -> Option<Millis> {
        if !s.is_finite() || s < 0.0 || s > (u32::MAX / 1000) as f32 {
            return None;
        }
        Some(Millis(libm::roundf(s * 1000.0) as u32))
    }

    /// This duration in seconds.
    pub fn as_secs_f32(self) -> f32 {
        self.0 as f32 / 1000.0
    }

    /// Saturating subtraction.
    pub const fn saturating_sub(self, other: Millis) -> Millis {
        Millis(self.0.saturating_sub(other.0))
    }

    /// Saturating addition.
    pub const fn saturating_add(self, other: Millis) -> Millis {
        Millis(self.0.saturating_add(other.0))
    }
}

impl core::ops::Add for Millis {
    type Output = Millis;
    fn add(self, rhs: Millis) -> Millis {
        Millis(self.0 + rhs.0)
    }
}

impl core::ops::Sub for Millis {
    type Output = Millis;
    fn sub(self, rhs: Millis) -> Millis {
        Millis(self.0 - rhs.0)
    }
}

impl core::ops::AddAssign for Millis {
    fn add_assign(&mut self, rhs: Millis) {
        self.0 += rhs.0;
    }
}

impl core::fmt::Display for Millis {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:03} s", self.0 / 1000, self.0 % 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_trip() {
        assert_eq!(Millis::from_secs_f32(3.0), Some(Millis(3000)));
        assert_eq!(Millis::from_secs_f32(0.0015), Some(Millis(2)));
        assert_eq!(Millis::from_secs_f32(-1.0), None);
        assert_eq!(Millis::from_secs_f32(f32::NAN), None);
        assert_eq!(Millis(2500).as_secs_f32(), 2.5);
    }
}
