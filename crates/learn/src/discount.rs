//! One discount for the whole project, defined **per second of traffic time** and
//! converted to a per-decision γ by the decision interval, so that training, the on-device
//! update and the fine-tune gate value the future over the same horizon whatever the
//! junction's decision interval.
//!
//! `γ_decision = 0.5^(interval_s / half_life_s)`: a reward `half_life_s` seconds ahead
//! counts half as much as one now.

use serde::{Deserialize, Serialize};

/// Default half-life of the discount (s). A phase choice's effect on queues plays out
/// within one or two signal cycles (60–120 s at the project's junctions); weighting a
/// reward one minute ahead by one half keeps those consequences while keeping the
/// horizon short enough for fitted-Q evaluation on a day of field data (about
/// `1 / (1 − γ)` = 18 decisions at 5 s).
pub const DEFAULT_HALF_LIFE_S: f64 = 60.0;

/// A discount defined per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Discount {
    /// Seconds after which a reward counts half as much as one now (> 0).
    pub half_life_s: f64,
}

impl Default for Discount {
    fn default() -> Self {
        Discount {
            half_life_s: DEFAULT_HALF_LIFE_S,
        }
    }
}

/// A discount or interval that cannot be converted.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum DiscountError {
    /// The half-life is not a positive finite number of seconds.
    #[error("discount half-life {0} s must be a positive finite number of seconds")]
    HalfLife(f64),
    /// The decision interval is not a positive finite number of seconds.
    #[error("decision interval {0} s must be a positive finite number of seconds")]
    Interval(f64),
}

impl Discount {
    /// A discount with `half_life_s`.
    pub fn from_half_life_s(half_life_s: f64) -> Result<Self, DiscountError> {
        let d = Discount { half_life_s };
        d.check()?;
        Ok(d)
    }

    fn check(&self) -> Result<(), DiscountError> {
        if self.half_life_s.is_finite() && self.half_life_s > 0.0 {
            Ok(())
        } else {
            Err(DiscountError::HalfLife(self.half_life_s))
        }
    }

    /// The discount per second, `0.5^(1 / half_life_s)`.
    pub fn per_second(&self) -> Result<f64, DiscountError> {
        self.check()?;
        Ok(0.5f64.powf(1.0 / self.half_life_s))
    }

    /// γ per decision for decisions `interval_s` apart.
    pub fn per_decision(&self, interval_s: f64) -> Result<f32, DiscountError> {
        if !(interval_s.is_finite() && interval_s > 0.0) {
            return Err(DiscountError::Interval(interval_s));
        }
        Ok(self.per_second()?.powf(interval_s) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_half_life_halves_and_intervals_compose() {
        let d = Discount::from_half_life_s(60.0).unwrap();
        assert!((d.per_decision(60.0).unwrap() - 0.5).abs() < 1e-6);
        let g5 = d.per_decision(5.0).unwrap() as f64;
        let g10 = d.per_decision(10.0).unwrap() as f64;
        assert!((g5 * g5 - g10).abs() < 1e-6, "{g5}² vs {g10}");
        assert!((g5 - 0.943_874).abs() < 1e-5, "{g5}");
    }

    #[test]
    fn bad_half_life_or_interval_is_an_error() {
        assert!(Discount::from_half_life_s(0.0).is_err());
        assert!(Discount::from_half_life_s(f64::NAN).is_err());
        let d = Discount::default();
        assert_eq!(
            d.per_decision(-1.0).unwrap_err(),
            DiscountError::Interval(-1.0)
        );
    }
}
