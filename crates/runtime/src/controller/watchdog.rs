//! The watchdog: decides, per signal and per decision, whether the policy may act.
//!
//! Rules:
//! * Any fault at a decision (the model is unavailable, inference failed, returned a NaN
//!   or infinite value, took longer than its budget, or no allowed phase had a usable
//!   logit; a detector did not report or reported an impossible value) switches the
//!   signal to its fallback *at that decision*: the faulty output is never used.
//! * The fallback's requests go through the same sequencer, so the switch happens at the
//!   next point the sequencer allows a change: a running yellow or all-red always runs
//!   to its end, and min green is always served.
//! * The policy is consulted (as a probe) at every decision while the fallback acts. The
//!   signal returns to the policy once every decision for `healthy_period` has been
//!   fault-free; any fault restarts that period. A model that failed to load never
//!   returns.
//! * Every switch is logged (`tracing`, with its reason) and counted.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// What kind of fault made the watchdog act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The model could not be loaded (or its bundle was refused).
    ModelUnavailable,
    /// The backend returned an error.
    InferenceError,
    /// A NaN or infinite logit or value, or no allowed phase with a usable logit.
    NonFiniteOutput,
    /// Inference took longer than its budget.
    SlowInference,
    /// A detector did not report.
    DetectorSilent,
    /// A detector reported a value no working detector can produce.
    ImpossibleReading,
}

impl FaultKind {
    /// Kebab-case name (as in metrics).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::ModelUnavailable => "model-unavailable",
            FaultKind::InferenceError => "inference-error",
            FaultKind::NonFiniteOutput => "non-finite-output",
            FaultKind::SlowInference => "slow-inference",
            FaultKind::DetectorSilent => "detector-silent",
            FaultKind::ImpossibleReading => "impossible-reading",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One fault: its kind and a human-readable detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The kind.
    pub kind: FaultKind,
    /// Detail (the error message, the measured latency, the bad lane).
    pub detail: String,
}

/// Who acts for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The policy.
    Policy,
    /// The fallback controller.
    Fallback,
}

#[derive(Clone, Debug)]
struct Health {
    mode: Mode,
    reason: Option<FaultKind>,
    healthy_since_ms: Option<u64>,
}

/// Switch and fault counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WatchdogCounts {
    /// Switches from the policy to the fallback.
    pub fallback_switches: u64,
    /// Returns from the fallback to the policy.
    pub policy_returns: u64,
    /// Switches to the fallback by the fault that caused them.
    pub switches_by_reason: BTreeMap<FaultKind, u64>,
    /// Faulty decisions by kind (also those while already in fallback).
    pub faults: BTreeMap<FaultKind, u64>,
}

/// Per-signal policy/fallback state.
#[derive(Clone, Debug)]
pub struct Watchdog {
    healthy_period_ms: u64,
    signals: Vec<Health>,
    counts: WatchdogCounts,
}

impl Watchdog {
    /// A watchdog for `n_signals` signals, all starting on the policy.
    pub fn new(n_signals: usize, healthy_period_ms: u64) -> Self {
        Watchdog {
            healthy_period_ms,
            signals: vec![
                Health {
                    mode: Mode::Policy,
                    reason: None,
                    healthy_since_ms: None,
                };
                n_signals
            ],
            counts: WatchdogCounts::default(),
        }
    }

    /// The mode of `signal`.
    pub fn mode(&self, signal: usize) -> Mode {
        self.signals.get(signal).map_or(Mode::Fallback, |h| h.mode)
    }

    /// Why `signal` is on its fallback, if it is.
    pub fn reason(&self, signal: usize) -> Option<FaultKind> {
        self.signals.get(signal).and_then(|h| h.reason)
    }

    /// Counts so far.
    pub fn counts(&self) -> &WatchdogCounts {
        &self.counts
    }

    /// A policy has been loaded (switched in out of the fallback): every signal held on
    /// its fallback only because no model was available goes back to the policy at once.
    /// Signals on their fallback for a fault of the field or the policy keep their healthy
    /// period.
    pub fn model_available(&mut self, now_ms: u64) {
        for (signal, h) in self.signals.iter_mut().enumerate() {
            if h.mode == Mode::Fallback && h.reason == Some(FaultKind::ModelUnavailable) {
                tracing::info!(
                    signal,
                    t_ms = now_ms,
                    "watchdog: a model is loaded; back to the policy"
                );
                h.mode = Mode::Policy;
                h.reason = None;
                h.healthy_since_ms = None;
                self.counts.policy_returns += 1;
            }
        }
    }

    /// Records the outcome of one decision of `signal` at `now_ms` (controller time) and
    /// returns who acts for it now.
    pub fn update(&mut self, signal: usize, now_ms: u64, fault: Option<&Fault>) -> Mode {
        let period = self.healthy_period_ms;
        let Some(h) = self.signals.get_mut(signal) else {
            return Mode::Fallback;
        };
        match (h.mode, fault) {
            (_, Some(f)) => {
                *self.counts.faults.entry(f.kind).or_default() += 1;
                h.healthy_since_ms = None;
                if h.mode == Mode::Policy {
                    h.mode = Mode::Fallback;
                    h.reason = Some(f.kind);
                    self.counts.fallback_switches += 1;
                    *self.counts.switches_by_reason.entry(f.kind).or_default() += 1;
                    tracing::warn!(
                        signal,
                        t_ms = now_ms,
                        reason = %f.kind,
                        detail = %f.detail,
                        "watchdog: switching to the fallback"
                    );
                }
            }
            (Mode::Policy, None) => {}
            (Mode::Fallback, None) => {
                let since = *h.healthy_since_ms.get_or_insert(now_ms);
                if h.reason != Some(FaultKind::ModelUnavailable) && now_ms - since >= period {
                    tracing::info!(
                        signal,
                        t_ms = now_ms,
                        after = ?h.reason,
                        healthy_ms = now_ms - since,
                        "watchdog: returning to the policy"
                    );
                    h.mode = Mode::Policy;
                    h.reason = None;
                    h.healthy_since_ms = None;
                    self.counts.policy_returns += 1;
                }
            }
        }
        self.signals[signal].mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: FaultKind) -> Fault {
        Fault {
            kind,
            detail: String::new(),
        }
    }

    #[test]
    fn switches_at_once_and_returns_after_a_full_healthy_period() {
        let mut w = Watchdog::new(2, 20_000);
        assert_eq!(w.update(0, 0, None), Mode::Policy);
        assert_eq!(
            w.update(0, 5_000, Some(&fault(FaultKind::NonFiniteOutput))),
            Mode::Fallback
        );
        assert_eq!(
            w.update(1, 5_000, None),
            Mode::Policy,
            "signals are independent"
        );
        assert_eq!(w.update(0, 10_000, None), Mode::Fallback);
        // A fault restarts the healthy period.
        assert_eq!(
            w.update(0, 15_000, Some(&fault(FaultKind::SlowInference))),
            Mode::Fallback
        );
        for t in [20_000, 25_000, 30_000, 35_000] {
            assert_eq!(w.update(0, t, None), Mode::Fallback, "t = {t}");
        }
        assert_eq!(w.update(0, 40_000, None), Mode::Policy);
        let c = w.counts();
        assert_eq!((c.fallback_switches, c.policy_returns), (1, 1));
        assert_eq!(c.faults[&FaultKind::SlowInference], 1);
        assert_eq!(c.switches_by_reason[&FaultKind::NonFiniteOutput], 1);
    }

    #[test]
    fn an_unloadable_model_never_returns() {
        let mut w = Watchdog::new(1, 0);
        w.update(0, 0, Some(&fault(FaultKind::ModelUnavailable)));
        for t in 1..100 {
            assert_eq!(w.update(0, t * 1000, None), Mode::Fallback);
        }
    }

    /// A model loaded later (a store's version switched in) brings back the signals that
    /// waited for one, and only those: a signal on its fallback for a fault keeps its
    /// healthy period.
    #[test]
    fn a_model_loaded_later_brings_back_the_signals_that_waited_for_one() {
        let mut w = Watchdog::new(2, 60_000);
        w.update(0, 0, Some(&fault(FaultKind::ModelUnavailable)));
        w.update(1, 0, Some(&fault(FaultKind::NonFiniteOutput)));
        w.model_available(5_000);
        assert_eq!(w.update(0, 5_000, None), Mode::Policy);
        assert_eq!(w.update(1, 5_000, None), Mode::Fallback);
        assert_eq!(w.counts().policy_returns, 1);
    }
}
