//! The monotonic millisecond tick source.
//!
//! Readings of the tick counter and the uptime built from them are *instants*, kept as raw
//! integers (`u32` wrapping counter readings, `u64` uptime) because their arithmetic is
//! wrapping or outgrows a `u32`; the time between two readings is a duration, a
//! [`Millis`].

use greenwave_core::Millis;

/// A free-running millisecond counter (a SysTick or timer counter on an MCU).
///
/// The value wraps at `u32::MAX` (after 49.7 days); the controller only ever takes wrapping
/// differences of consecutive readings, so the wrap is harmless as long as it is polled at
/// least once every 24 days. It must never run backwards (a reading behind the last
/// counts as no time).
pub trait MonotonicClock {
    /// Milliseconds since an arbitrary origin, wrapping.
    fn now_ms(&mut self) -> u32;
}

impl<T: MonotonicClock + ?Sized> MonotonicClock for &mut T {
    fn now_ms(&mut self) -> u32 {
        (**self).now_ms()
    }
}

/// Extends a wrapping 32-bit millisecond counter to a 64-bit uptime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uptime {
    last_raw_ms: u32,
    uptime_ms: u64,
}

impl Uptime {
    /// Starts counting from the reading `raw_ms` (uptime 0).
    pub const fn starting_at(raw_ms: u32) -> Self {
        Uptime {
            last_raw_ms: raw_ms,
            uptime_ms: 0,
        }
    }

    /// Takes a new reading; returns the time elapsed since the previous one. A reading
    /// behind the previous one (a wrapping difference of 2³¹ ms or more, which no poll
    /// 24 days apart gives) is a clock that ran back: no time has elapsed, and counting
    /// goes on from it.
    pub fn update(&mut self, raw_ms: u32) -> Millis {
        let mut elapsed_ms = raw_ms.wrapping_sub(self.last_raw_ms);
        if elapsed_ms >= 1 << 31 {
            elapsed_ms = 0;
        }
        self.last_raw_ms = raw_ms;
        self.uptime_ms += elapsed_ms as u64;
        Millis(elapsed_ms)
    }

    /// Milliseconds since the first reading.
    pub const fn uptime_ms(&self) -> u64 {
        self.uptime_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_is_counted_forward() {
        let mut u = Uptime::starting_at(u32::MAX - 5);
        assert_eq!(u.update(4), Millis(10));
        assert_eq!(u.uptime_ms(), 10);
        assert_eq!(u.update(4), Millis::ZERO);
        assert_eq!(u.update(1004), Millis(1000));
        assert_eq!(u.uptime_ms(), 1010);
    }

    #[test]
    fn a_reading_behind_the_last_is_no_time() {
        let mut u = Uptime::starting_at(1000);
        assert_eq!(u.update(999), Millis::ZERO);
        assert_eq!(u.update(1009), Millis(10));
        assert_eq!(u.uptime_ms(), 10);
        assert_eq!(u.update(1009 + (1 << 31) - 1), Millis((1 << 31) - 1));
    }
}
