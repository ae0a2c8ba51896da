//! Instruction counting under `qemu-system-arm -icount shift=0` with SysTick on the core
//! clock (see `greenwave_firmware_replay::stats`): every poll is timed, and at every
//! decision `Policy::decide` alone is timed on the same observation.

use core::arch::asm;
use core::hint::black_box;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use greenwave_firmware::policy::SCRATCH_FLOATS;
use greenwave_firmware::{Policy, PollReport};
use greenwave_firmware_replay::stats::{TargetStats, DECIDE_REPEATS};
use greenwave_firmware_replay::PollMeter;

use greenwave_firmware_replay::Cabinet;

use crate::Io;

/// SysTick is a 24-bit down-counter.
const RELOAD: u32 = 0x00ff_ffff;
/// Iterations of the calibration loop (two instructions each).
const CALIBRATION_LOOPS: u32 = 100_000;

/// Starts SysTick free-running on the core clock.
pub fn start_systick(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_counter();
}

/// Ticks from `start` to `end` (SysTick counts down; one wrap at most).
fn ticks(start: u32, end: u32) -> u32 {
    start.wrapping_sub(end) & RELOAD
}

/// Times a loop of `subs` + `bne` pairs: (instructions, ticks).
pub fn calibrate() -> (u32, u32) {
    let start = SYST::get_current();
    // SAFETY: a register-only countdown loop.
    unsafe {
        asm!(
            "2:",
            "subs {n}, {n}, #1",
            "bne 2b",
            n = inout(reg) CALIBRATION_LOOPS => _,
            options(nomem, nostack),
        );
    }
    let end = SYST::get_current();
    (2 * CALIBRATION_LOOPS, ticks(start, end))
}

/// Times every poll; at each decision, times the policy alone as well.
pub struct Meter {
    pub stats: TargetStats,
    policy: Option<Policy<'static>>,
    scratch: [f32; SCRATCH_FLOATS],
}

impl Meter {
    /// A meter timing `policy` (the controller's own blob) at each decision.
    pub fn new(policy: Option<Policy<'static>>, stats: TargetStats) -> Self {
        Meter {
            stats,
            policy,
            scratch: [0.0; SCRATCH_FLOATS],
        }
    }

    fn time_decide(&mut self, ctl: &Cabinet<'_, Io>) {
        let Some(policy) = &self.policy else { return };
        let mask = ctl.sequencer().action_mask();
        let obs = ctl.observation();
        let start = SYST::get_current();
        for _ in 0..DECIDE_REPEATS {
            let _ = black_box(policy.decide(black_box(obs), mask, &mut self.scratch));
        }
        let end = SYST::get_current();
        self.stats.decide_repeated.add(ticks(start, end));
    }
}

impl PollMeter<Io> for Meter {
    fn poll(&mut self, ctl: &mut Cabinet<'_, Io>) -> PollReport {
        let start = SYST::get_current();
        let report = ctl.poll();
        let end = SYST::get_current();
        if report.decision.is_some() {
            self.stats.decision_polls.add(ticks(start, end));
            self.time_decide(ctl);
        } else {
            self.stats.other_polls.add(ticks(start, end));
        }
        report
    }
}
