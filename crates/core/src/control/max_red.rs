//! The max-red rule (a starvation bound): a phase with a call is kept from green for at
//! most `max_red`; then, once the green showing has served its min green, it is served
//! next, the longest-waiting first. The maximum-red bound of cyclic max-pressure variants
//! (Levin, Hu & Odell 2020, "Max-pressure signal control with cyclical phase structure").
//! Max-pressure uses two minutes ([`DEFAULT_MAX_RED`]); a learned policy by default its
//! plan's max-out cycle ([`max_out_cycle`]).
//!
//! Max-pressure control needs it because a major phase can keep more pressure than a minor
//! one for ever. A learned policy needs it for the same reason seen from the other side: a
//! policy trained as a stochastic one serves a rarely-best phase now and then by chance,
//! but run greedily (as a controller runs it) it may never choose that phase at all, and
//! the movements only it serves wait until the end of the day (tools/README.md, "Training
//! on real networks", finding 11). The sequencer's min green, max green and clearances stay
//! as they are; this rule only narrows which phase a decision may ask for.

use super::MovementDetector;
use crate::plan::{PhasePlan, MAX_PHASES};
use crate::sequencer::{PhaseMask, Sequencer};
use crate::{Millis, PhaseId};

/// Max-pressure's longest time a phase with a call is kept from green: two minutes.
pub const DEFAULT_MAX_RED: Millis = Millis::from_secs(120);

/// A learned policy's default bound for `plan`: its max-out cycle, every phase at max green
/// plus its longest switch to another phase (its yellow and all-red, or longer where
/// intergreens hold the next phase's starts). No phase waits longer than that under the plan's own
/// actuated control at max-out, so the rule binds only a policy that starves a phase
/// outright, never one that merely runs long greens. (A fixed two minutes cut into a good
/// policy's cycle on a busy junction: tools/README.md, finding 11.)
pub fn max_out_cycle(plan: &PhasePlan) -> Millis {
    let ms = plan.phases().iter().enumerate().fold(0u32, |sum, (k, p)| {
        sum.saturating_add(p.timing.max_green.0)
            .saturating_add(plan.longest_switch_from(PhaseId(k as u8)).0)
    });
    Millis(ms)
}

/// The phases of `plan` with a call: one of their movements' detectors calls
/// ([`MovementDetector::calls`]). Movements without a detector never call.
pub fn phases_with_calls(plan: &PhasePlan, detectors: &[MovementDetector]) -> PhaseMask {
    let mut mask = 0u16;
    for (q, phase) in plan.phases().iter().enumerate().take(MAX_PHASES) {
        let calls = phase
            .movements
            .iter()
            .filter_map(|m| detectors.get(m.0 as usize))
            .any(MovementDetector::calls);
        if calls {
            mask |= 1 << q;
        }
    }
    PhaseMask(mask)
}

/// The max-red rule for one signal: when each phase was last seen green at a decision, and
/// which phase a decision must serve because it has waited too long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxRed {
    max_red: Millis,
    last_green: [Millis; MAX_PHASES],
}

impl MaxRed {
    /// The rule with bound `max_red`, every phase counted as green at `now` (the start of
    /// an episode or of operation).
    pub const fn new(max_red: Millis, now: Millis) -> Self {
        MaxRed {
            max_red,
            last_green: [now; MAX_PHASES],
        }
    }

    /// When phase `p` was last seen green (or the start).
    pub fn last_green(&self, p: PhaseId) -> Option<Millis> {
        self.last_green.get(p.0 as usize).copied()
    }

    /// Notes the phase `seq` shows green at the decision at `now`. Call at every decision
    /// point; before or after [`MaxRed::starved`] gives the same answer, since the phase
    /// green now is never the one starved.
    pub fn note(&mut self, seq: &Sequencer, now: Millis) {
        if let Some(p) = seq.green_phase() {
            if let Some(t) = self.last_green.get_mut(p.0 as usize) {
                *t = now;
            }
        }
    }

    /// The phase a decision at `now` must ask for: among the phases with a call (`calls`)
    /// that `mask` allows, other than the one green, the one longest from green, if that is
    /// at least the bound. Only while a green has served its min green (a switch is
    /// possible); `None` otherwise.
    pub fn starved(
        &self,
        seq: &Sequencer,
        mask: PhaseMask,
        calls: PhaseMask,
        now: Millis,
    ) -> Option<PhaseId> {
        let green = seq.green_phase()?;
        if !seq.min_green_served() {
            return None;
        }
        (0..seq.plan().n_phases().min(MAX_PHASES))
            .map(|q| PhaseId(q as u8))
            .filter(|&q| q != green && mask.allows(q) && calls.allows(q))
            .filter(|&q| self.red_for(q, now) >= self.max_red)
            .max_by_key(|&q| (self.red_for(q, now), core::cmp::Reverse(q.0)))
    }

    /// How long phase `q` has been kept from green at `now`. Times are compared modulo
    /// 2³² ms (49.7 days), so a controller's uptime clock may wrap: only the wait itself
    /// must stay below that.
    fn red_for(&self, q: PhaseId, now: Millis) -> Millis {
        Millis(now.0.wrapping_sub(self.last_green[q.0 as usize].0))
    }

    /// `mask` narrowed by the rule: only the starved phase when there is one, else `mask`.
    pub fn narrow(
        &self,
        seq: &Sequencer,
        mask: PhaseMask,
        calls: PhaseMask,
        now: Millis,
    ) -> PhaseMask {
        match self.starved(seq, mask, calls, now) {
            Some(q) => PhaseMask(1 << q.0),
            None => mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PhasePlan, PhaseTiming};

    /// Four phases (protected lefts), min green 5 s, max green 60 s, yellow 3 s, all-red 2 s.
    fn plan() -> PhasePlan {
        PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 60, 3, 2)).unwrap()
    }

    /// A sequencer green in phase 0 with min green served at `t_ms`.
    fn green_for(t_ms: u32) -> Sequencer {
        let mut s = Sequencer::new(plan(), PhaseId(0)).unwrap();
        s.advance(Millis(t_ms), |_| {});
        s
    }

    #[test]
    fn a_phase_with_a_call_is_served_once_it_has_waited_max_red() {
        let seq = green_for(30_000);
        let all = seq.action_mask();
        let mut rule = MaxRed::new(Millis::from_secs(120), Millis(0));
        rule.note(&seq, Millis(0));
        let calls = PhaseMask(0b0110);
        assert_eq!(rule.starved(&seq, all, calls, Millis(119_999)), None);
        // Phases 1 and 2 both waited since 0: the lower-numbered tie wins, deterministically.
        assert_eq!(
            rule.starved(&seq, all, calls, Millis(120_000)),
            Some(PhaseId(1))
        );
        assert_eq!(
            rule.narrow(&seq, all, calls, Millis(120_000)),
            PhaseMask(0b0010)
        );
        // Without a call nothing is forced, however long the wait.
        assert_eq!(rule.narrow(&seq, all, PhaseMask(0), Millis(900_000)), all);
        // Nor is a phase the mask does not allow.
        assert_eq!(
            rule.starved(&seq, PhaseMask(0b0001), calls, Millis(900_000)),
            None
        );
    }

    #[test]
    fn the_longest_waiting_phase_goes_first_and_green_resets_the_clock() {
        let mut seq = green_for(30_000);
        let mut rule = MaxRed::new(Millis::from_secs(120), Millis(0));
        // Phase 2 was green at 50 s, so phase 1 (never green since 0) waited longer.
        seq.request(2);
        seq.advance(Millis(20_000), |_| {});
        assert_eq!(seq.green_phase(), Some(PhaseId(2)));
        rule.note(&seq, Millis(50_000));
        seq.request(0);
        seq.advance(Millis(20_000), |_| {});
        rule.note(&seq, Millis(70_000));
        let all = seq.action_mask();
        assert_eq!(
            rule.starved(&seq, all, PhaseMask(0b0110), Millis(170_000)),
            Some(PhaseId(1))
        );
        assert_eq!(
            rule.starved(&seq, all, PhaseMask(0b0100), Millis(169_999)),
            None,
            "phase 2 has waited 119.999 s"
        );
        assert_eq!(rule.last_green(PhaseId(2)), Some(Millis(50_000)));
    }

    #[test]
    fn a_policys_bound_is_the_plans_max_out_cycle() {
        // Four phases of 60 s max green, 3 s yellow and 2 s all-red.
        assert_eq!(max_out_cycle(&plan()), Millis::from_secs(4 * 65));
    }

    #[test]
    fn a_wrapping_uptime_clock_keeps_the_bound() {
        let seq = green_for(30_000);
        let start = Millis(u32::MAX - 10_000);
        let mut rule = MaxRed::new(Millis::from_secs(120), start);
        rule.note(&seq, start);
        let calls = PhaseMask(0b0010);
        let all = seq.action_mask();
        assert_eq!(rule.starved(&seq, all, calls, Millis(100_000)), None);
        assert_eq!(
            rule.starved(&seq, all, calls, Millis(110_000)),
            Some(PhaseId(1)),
            "120 s after the start, across the wrap"
        );
    }

    #[test]
    fn nothing_is_forced_before_min_green_or_during_a_change() {
        let mut seq = Sequencer::new(plan(), PhaseId(0)).unwrap();
        let rule = MaxRed::new(Millis::from_secs(120), Millis(0));
        let calls = PhaseMask(0b1110);
        assert!(!seq.min_green_served());
        assert_eq!(
            rule.starved(&seq, PhaseMask(0b1111), calls, Millis(500_000)),
            None
        );
        seq.advance(Millis(60_000), |_| {});
        seq.request(3);
        seq.advance(Millis(1_000), |_| {});
        assert!(seq.green_phase().is_none(), "in the change to phase 3");
        assert_eq!(
            rule.starved(&seq, PhaseMask(0b1111), calls, Millis(500_000)),
            None
        );
    }

    #[test]
    fn phases_call_through_their_movements_detectors() {
        let p = plan();
        let mut d = [MovementDetector::default(); 8];
        assert_eq!(phases_with_calls(&p, &d), PhaseMask(0));
        let m = p.phases()[2].movements.iter().next().unwrap();
        d[m.0 as usize].call = true;
        let calls = phases_with_calls(&p, &d);
        assert!(calls.allows(PhaseId(2)));
        // A queue calls too; a movement whose downstream is full does not.
        let mut d = [MovementDetector::default(); 8];
        let m = p.phases()[1].movements.iter().next().unwrap();
        d[m.0 as usize].queue_veh = 2.0;
        assert!(phases_with_calls(&p, &d).allows(PhaseId(1)));
        d[m.0 as usize].downstream_storage_veh = 10.0;
        d[m.0 as usize].downstream_veh = 10.0;
        assert!(!phases_with_calls(&p, &d).allows(PhaseId(1)));
    }
}
