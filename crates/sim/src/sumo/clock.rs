//! Each light's own program as greenwave-core's [`ProgramClock`]: the observation's
//! program-clock lanes on SUMO.

use greenwave_core::{ClockStage, Millis, ProgramClock, ProgramClockError};

use super::model::TlsModel;
use super::net::NetFile;

/// The clock of `m`'s program (the last `<tlLogic>` of its id and program id in `net`):
/// each program phase, its duration rounded to the millisecond, stands for the first plan
/// phase at or after it in program order (a yellow for the green it leads to, a program
/// green the plan merged for the plan phase it became). `Ok(None)` when the program has
/// no phase the plan came from (nothing to follow).
pub fn program_clock(
    net: &NetFile,
    m: &TlsModel,
) -> Result<Option<ProgramClock>, ProgramClockError> {
    let Some(prog) = net
        .tl_logics
        .iter()
        .rev()
        .find(|t| t.id == m.id && t.program_id == m.program_id)
    else {
        return Ok(None);
    };
    let n = prog.phases.len();
    let plan_phase_of = |j: usize| m.static_phases.iter().position(|&k| k == j);
    let mut stages = Vec::with_capacity(n);
    for (j, phase) in prog.phases.iter().enumerate() {
        let Some(target) = (0..n).find_map(|d| plan_phase_of((j + d) % n)) else {
            return Ok(None);
        };
        // Durations are finite and non-negative (the net parser checks); `as` saturates
        // past u32 ms, which is refused below as too long a cycle.
        let duration = Millis((phase.duration_s * 1000.0).round() as u32);
        stages.push(ClockStage {
            phase: target as u8,
            duration,
        });
    }
    let clock = ProgramClock::new(&stages, (prog.offset_s * 1000.0).round() as i64)?;
    clock.check_plan(&m.plan)?;
    Ok(Some(clock))
}
