//! A learned policy's action masks on an [`Env`]: each signal's mask
//! ([`Env::action_mask`], the sequencer's) narrowed by greenwave-core's max-red rule
//! ([`MaxRed`]), so a phase whose movements call is never kept from green for more than
//! `max_red` whatever the policy prefers. Training rollouts, `greenwave eval` and the
//! Python environments act through it; the roadside runtime and the firmware apply the
//! same rule to their own sequencers.

use greenwave_core::control::{max_out_cycle, phases_with_calls, MaxRed};
use greenwave_core::{Millis, PhaseId, PhaseMask};

use crate::env::Env;

/// The max-red rule over every signal of an environment, for a policy's decisions.
#[derive(Clone, Debug)]
pub struct PolicyMasks {
    /// The bound.
    bound: MaxRedBound,
    rules: Vec<MaxRed>,
    /// The env time of the last decision noted (`None`: none yet).
    noted_at: Option<Millis>,
}

/// How long a phase with a call may be kept from green while a policy acts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaxRedBound {
    /// Each signal's max-out cycle ([`max_out_cycle`]): the default.
    #[default]
    PlanCycle,
    /// The same bound at every signal.
    Fixed(Millis),
    /// No rule: the masks are the env's.
    Off,
}

impl Default for PolicyMasks {
    fn default() -> Self {
        Self::with_bound(MaxRedBound::PlanCycle)
    }
}

impl PolicyMasks {
    /// The rule with bound `max_red` (no decision noted yet).
    pub fn new(max_red: Millis) -> Self {
        Self::with_bound(MaxRedBound::Fixed(max_red))
    }

    /// No rule: every mask is the env's (to measure what the rule changes, as
    /// `greenwave eval --no-max-red` does).
    pub fn off() -> Self {
        Self::with_bound(MaxRedBound::Off)
    }

    /// The rule with bound `bound` (no decision noted yet).
    pub fn with_bound(bound: MaxRedBound) -> Self {
        PolicyMasks {
            bound,
            rules: Vec::new(),
            noted_at: None,
        }
    }

    /// Forgets every decision noted (a new episode starts afresh).
    pub fn clear(&mut self) {
        self.rules.clear();
        self.noted_at = None;
    }

    /// Notes which phase each signal shows green at this decision. Call once per decision,
    /// before [`PolicyMasks::mask`]. A clock that went back (a new episode) or another
    /// number of signals starts the rule afresh: every phase counts as green now.
    pub fn note(&mut self, env: &dyn Env) {
        if self.bound == MaxRedBound::Off {
            return;
        }
        let now = env.now();
        let n = env.signals().len();
        if self.rules.len() != n || self.noted_at.is_none_or(|t| now < t) {
            self.rules = (0..n)
                .map(|s| {
                    let bound = match self.bound {
                        MaxRedBound::Fixed(m) => m,
                        _ => max_out_cycle(env.sequencer(s).plan()),
                    };
                    MaxRed::new(bound, now)
                })
                .collect();
        }
        for (s, rule) in self.rules.iter_mut().enumerate() {
            rule.note(env.sequencer(s), now);
        }
        self.noted_at = Some(now);
    }

    /// The phase the max-red rule makes signal `signal` serve at this decision, if any
    /// (see [`MaxRed::starved`]); `None` before any decision is noted.
    pub fn forced(&self, env: &dyn Env, signal: usize) -> Option<PhaseId> {
        let rule = self.rules.get(signal)?;
        let seq = env.sequencer(signal);
        rule.starved(seq, env.action_mask(signal), calls(env, signal), env.now())
    }

    /// Signal `signal`'s mask at this decision: only the phase the rule forces, else the
    /// env's ([`MaxRed::narrow`]).
    pub fn mask(&self, env: &dyn Env, signal: usize) -> PhaseMask {
        let mask = env.action_mask(signal);
        match self.rules.get(signal) {
            Some(rule) => rule.narrow(env.sequencer(signal), mask, calls(env, signal), env.now()),
            None => mask,
        }
    }

    /// Replaces every action the rule overrules (one per signal) by the phase it forces,
    /// as the roadside supervisor does with a policy's request: for environments stepped
    /// with actions that were not chosen under [`PolicyMasks::mask`].
    pub fn enforce(&self, env: &dyn Env, actions: &mut [u8]) {
        for (s, a) in actions.iter_mut().enumerate() {
            if let Some(q) = self.forced(env, s) {
                *a = q.0;
            }
        }
    }
}

/// The phases of signal `signal` whose movements' detectors call now.
fn calls(env: &dyn Env, signal: usize) -> PhaseMask {
    phases_with_calls(env.sequencer(signal).plan(), &env.detectors(signal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EmbeddedEnv;

    /// Over an hour of `single-4way` driven by a policy that asks for phase 0 whenever
    /// `mask` lets it (else the one phase it allows): per phase of signal 0, the longest
    /// time (s, at decision points) from when the max-red rule first wanted it — a call,
    /// and red for the plan's max-out cycle — until it showed green (or the hour ended).
    fn longest_overdue_s(mut mask: impl FnMut(&dyn Env) -> PhaseMask) -> Vec<u32> {
        let sc = crate::load("single-4way").unwrap();
        let mut env = EmbeddedEnv::from_scenario(&sc, 3);
        env.reset(3).unwrap();
        let n = env.signals()[0].plan.n_phases();
        let bound = max_out_cycle(&env.signals()[0].plan).0;
        let mut last = vec![0u32; n];
        let mut overdue: Vec<Option<u32>> = vec![None; n];
        let mut longest = vec![0u32; n];
        loop {
            let now = env.now().0;
            if let Some(p) = env.sequencer(0).green_phase() {
                last[p.0 as usize] = now;
                overdue[p.0 as usize] = None;
            }
            let calls = phases_with_calls(env.sequencer(0).plan(), &env.detectors(0));
            for q in 0..n {
                let wanted = calls.allows(PhaseId(q as u8)) && now - last[q] >= bound;
                if wanted && overdue[q].is_none() {
                    overdue[q] = Some(now);
                }
                if let Some(since) = overdue[q] {
                    longest[q] = longest[q].max((now - since) / 1000);
                }
            }
            if env.now() >= Millis::from_secs(3600) {
                return longest;
            }
            let m = mask(&env);
            let pick = (0..n as u8).find(|&q| m.allows(PhaseId(q))).unwrap_or(0);
            env.step(&[pick]).unwrap();
        }
    }

    #[test]
    fn the_rule_switched_off_leaves_the_env_masks() {
        let sc = crate::load("single-4way").unwrap();
        let mut env = EmbeddedEnv::from_scenario(&sc, 3);
        env.reset(3).unwrap();
        let mut masks = PolicyMasks::off();
        for _ in 0..200 {
            masks.note(&env);
            assert_eq!(masks.mask(&env, 0), env.action_mask(0));
            assert_eq!(masks.forced(&env, 0), None);
            env.step(&[0]).unwrap();
        }
    }

    #[test]
    fn a_policy_that_never_switches_still_serves_every_called_phase_within_max_red() {
        // Unguarded, the stubborn policy keeps a phase with a call from green for most of
        // the hour (so the test can fail): max green only ever forces the next phase.
        let bare = longest_overdue_s(|env| env.action_mask(0));
        assert!(bare.iter().any(|&s| s > 1800), "{bare:?}");
        let mut masks = PolicyMasks::default();
        let guarded = longest_overdue_s(|env| {
            masks.note(env);
            masks.mask(env, 0)
        });
        // Overdue phases are served in turn, each after the one before it and the
        // policy's own phase back (a clearance and a min green rounded up to decisions
        // each way: 30 s on single-4way).
        let n = guarded.len() as u32;
        assert!(
            guarded.iter().all(|&s| s <= n * 30),
            "{guarded:?} > {} s",
            n * 30
        );
    }

    #[test]
    fn enforce_replaces_only_what_the_rule_overrules() {
        let sc = crate::load("single-4way").unwrap();
        let mut env = EmbeddedEnv::from_scenario(&sc, 5);
        env.reset(5).unwrap();
        let mut masks = PolicyMasks::new(Millis::from_secs(30));
        let mut forced_seen = false;
        while env.now() < Millis::from_secs(900) {
            masks.note(&env);
            let mut actions = [0u8];
            masks.enforce(&env, &mut actions);
            match masks.forced(&env, 0) {
                Some(q) => {
                    forced_seen = true;
                    assert_eq!(actions[0], q.0);
                    assert_eq!(masks.mask(&env, 0), PhaseMask(1 << q.0));
                }
                None => {
                    assert_eq!(actions[0], 0, "not overruled: the request stands");
                    assert_eq!(masks.mask(&env, 0), env.action_mask(0));
                }
            }
            env.step(&actions).unwrap();
        }
        assert!(forced_seen);
    }
}
