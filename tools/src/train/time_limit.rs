//! `--time-limit-min`: where a run with a wall-clock budget stops.
//!
//! A run stops only at a resumable checkpoint (an episode end), and at the last one that
//! leaves time for the next checkpoint interval and for the validations that end the run
//! (the last weights', and the end test's second look on fresh seeds):
//! each is estimated from the last one measured (a validation not yet run: from the
//! checkpoint interval, as greedy episodes cost about what training episodes do). The
//! weights up to the stop are those of a run without a limit (the learning-rate schedule
//! follows `--steps` either way), so `--resume` continues it as if never stopped.

use std::time::{Duration, Instant};

/// The budget of one invocation and the pace measured so far.
#[derive(Clone, Debug)]
pub struct Deadline {
    at: Instant,
    last_checkpoint: Instant,
    /// Wall time of the last validation (none before the first one).
    validation: Option<Duration>,
}

/// Why a run stops at a checkpoint, for the line that reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stop {
    /// The time left when it stopped.
    pub left: Duration,
    /// What the next checkpoint interval and the validations still due were estimated
    /// to take.
    pub needed: Duration,
}

impl Deadline {
    /// A budget ending at `at`; the pace is measured from `now`.
    pub fn new(at: Instant, now: Instant) -> Self {
        Deadline {
            at,
            last_checkpoint: now,
            validation: None,
        }
    }

    /// Records a validation that took `took` (not counted in the checkpoint interval it
    /// fell in).
    pub fn validated(&mut self, took: Duration) {
        self.validation = Some(took);
        self.last_checkpoint += took;
    }

    /// At a resumable checkpoint reached at `now`: whether the run stops here, where it
    /// would still run another checkpoint interval and `validations` validations (those
    /// that end the run, and one due at this checkpoint). `validation_share` is what a
    /// validation costs against a checkpoint interval while none has run (validation seeds
    /// over the training episodes of an interval; 0 with validation off).
    pub fn at_checkpoint(
        &mut self,
        now: Instant,
        validation_share: f64,
        validations: u32,
    ) -> Option<Stop> {
        let interval = now.saturating_duration_since(self.last_checkpoint);
        self.last_checkpoint = now;
        let validation = self
            .validation
            .unwrap_or_else(|| interval.mul_f64(validation_share.max(0.0)));
        let needed = interval + validation * validations;
        let left = self.at.saturating_duration_since(now);
        (needed > left).then_some(Stop { left, needed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn stops_where_the_next_interval_and_a_validation_would_pass_the_limit() {
        let t0 = Instant::now();
        let mut d = Deadline::new(t0 + secs(100), t0);
        // 30 s intervals, a validation estimated at half of one: 45 s fit in 70 s left.
        assert_eq!(d.at_checkpoint(t0 + secs(30), 0.5, 1), None);
        // 45 s needed, 40 s left.
        let stop = d.at_checkpoint(t0 + secs(60), 0.5, 1).unwrap();
        assert_eq!(stop.left, secs(40));
        assert_eq!(stop.needed, secs(45));
    }

    #[test]
    fn a_validation_due_at_the_checkpoint_counts_too() {
        let t0 = Instant::now();
        let mut d = Deadline::new(t0 + secs(80), t0);
        // 30 s + 2 × 15 s = 60 s do not fit in the 50 s left; 30 s + 15 s would.
        assert!(d.clone().at_checkpoint(t0 + secs(30), 0.5, 1).is_none());
        assert_eq!(
            d.at_checkpoint(t0 + secs(30), 0.5, 2).unwrap().needed,
            secs(60)
        );
    }

    #[test]
    fn validations_are_not_counted_in_the_interval() {
        let t0 = Instant::now();
        let mut d = Deadline::new(t0 + secs(1000), t0);
        d.validated(secs(40));
        // 100 s passed, 40 s of them validating: a 60 s interval, plus the 40 s validation.
        assert_eq!(
            d.at_checkpoint(t0 + secs(100), 0.0, 1),
            None,
            "fits in the 900 s left"
        );
        d.validated(secs(40));
        let mut late = d.clone();
        let stop = late.at_checkpoint(t0 + secs(990), 0.0, 1).unwrap();
        assert_eq!(stop.needed, secs(850 + 40));
    }

    #[test]
    fn a_measured_validation_replaces_the_estimate() {
        let t0 = Instant::now();
        let mut d = Deadline::new(t0 + secs(200), t0);
        assert!(d.at_checkpoint(t0 + secs(20), 0.1, 1).is_none());
        // A 100 s validation, then a 20 s interval: at 140 s, 20 s + the estimate (2 s)
        // would fit in the 60 s left; 20 s + the 100 s the validation took does not.
        d.validated(secs(100));
        let stop = d.at_checkpoint(t0 + secs(140), 0.1, 1).unwrap();
        assert_eq!(stop.needed, secs(120));
    }

    #[test]
    fn a_spent_budget_stops_at_the_first_checkpoint() {
        let t0 = Instant::now();
        let mut d = Deadline::new(t0, t0);
        let stop = d.at_checkpoint(t0 + secs(1), 0.0, 1).unwrap();
        assert_eq!(stop.left, Duration::ZERO);
    }
}
