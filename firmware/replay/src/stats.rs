//! What the Cortex-M build measures about itself under QEMU, written as one postcard
//! record to a semihosting file: the stack high-water marks and per-poll SysTick counts.
//!
//! Under `qemu-system-arm -icount shift=0` the emulated CPU executes one instruction per
//! nanosecond of virtual time, and SysTick counts the 25 MHz system clock of the
//! mps2-an386: one tick per 40 instructions. `calibration_*` measures that ratio on a
//! loop of known length, so the host converts ticks to instructions without assuming it.
//! These are **instructions executed, not Cortex-M4 cycles**.

use serde::{Deserialize, Serialize};

/// Minimum, maximum and sum of a set of tick counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickStats {
    /// Samples.
    pub n: u32,
    /// Smallest sample.
    pub min: u32,
    /// Largest sample.
    pub max: u32,
    /// Sum of the samples.
    pub sum: u64,
}

impl Default for TickStats {
    fn default() -> Self {
        TickStats {
            n: 0,
            min: u32::MAX,
            max: 0,
            sum: 0,
        }
    }
}

impl TickStats {
    /// Adds one sample.
    pub fn add(&mut self, ticks: u32) {
        self.n += 1;
        self.min = self.min.min(ticks);
        self.max = self.max.max(ticks);
        self.sum += ticks as u64;
    }

    /// Mean of the samples (0 if none).
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum as f64 / self.n as f64
        }
    }
}

/// The target's own measurements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetStats {
    /// Stack bytes used from reset until the controller was built and placed in RAM.
    pub startup_stack_bytes: u32,
    /// Stack bytes used by the replay loop after start-up (the stack was painted again).
    pub loop_stack_bytes: u32,
    /// Stack bytes available (RAM end minus the end of static data).
    pub stack_size_bytes: u32,
    /// Instructions of the calibration loop.
    pub calibration_instructions: u32,
    /// SysTick ticks the calibration loop took.
    pub calibration_ticks: u32,
    /// Ticks of every poll that took a decision.
    pub decision_polls: TickStats,
    /// Ticks of every other poll.
    pub other_polls: TickStats,
    /// Ticks of `Policy::decide` alone (forward pass and masked argmax), measured
    /// as [`DECIDE_REPEATS`] back-to-back calls per sample on the observation of each decision.
    pub decide_repeated: TickStats,
}

/// Back-to-back `Policy::decide` calls per sample of [`TargetStats::decide_repeated`].
pub const DECIDE_REPEATS: u32 = 8;
