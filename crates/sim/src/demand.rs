//! Time-varying demand: a piecewise-linear profile and Poisson arrivals that follow it.

use rand::Rng;
use rand_distr::Exp1;
use rand_pcg::Pcg64Mcg;

/// A multiplier of the base flows over episode time: piecewise linear between its points,
/// constant before the first and after the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// `(time_s, multiplier)`, times strictly increasing, multipliers finite and ≥ 0.
    points: Vec<(f64, f64)>,
    max_multiplier: f64,
    /// From this time on the multiplier is 0 for good (infinity if it never is).
    zero_from_s: f64,
}

impl Profile {
    /// A constant multiplier of 1.
    pub fn flat() -> Self {
        Profile::from_points(vec![(0.0, 1.0)])
    }

    /// A profile from validated points (times strictly increasing, multipliers ≥ 0); the
    /// scenario compiler checks them and names the bad point.
    pub(crate) fn from_points(points: Vec<(f64, f64)>) -> Self {
        debug_assert!(!points.is_empty());
        let max_multiplier = points.iter().map(|p| p.1).fold(0.0, f64::max);
        let zero_from_s = match points.iter().rposition(|p| p.1 > 0.0) {
            None => f64::NEG_INFINITY,
            Some(i) if i + 1 < points.len() => points[i + 1].0,
            Some(_) => f64::INFINITY,
        };
        Profile {
            points,
            max_multiplier,
            zero_from_s,
        }
    }

    /// The points.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The multiplier at episode time `t_s`.
    pub fn at(&self, t_s: f64) -> f64 {
        let p = &self.points;
        let i = p.partition_point(|&(t, _)| t <= t_s);
        if i == 0 {
            return p[0].1;
        }
        if i == p.len() {
            return p[i - 1].1;
        }
        let (t0, m0) = p[i - 1];
        let (t1, m1) = p[i];
        m0 + (m1 - m0) * (t_s - t0) / (t1 - t0)
    }

    /// The largest multiplier anywhere.
    pub fn max_multiplier(&self) -> f64 {
        self.max_multiplier
    }

    /// The mean multiplier over `[0, horizon_s]` (exact for a piecewise-linear profile).
    pub fn mean_over(&self, horizon_s: f64) -> f64 {
        if horizon_s <= 0.0 {
            return self.at(0.0);
        }
        // Integrate piecewise: breakpoints inside the horizon, trapezoids between them.
        let mut knots: Vec<f64> = vec![0.0];
        knots.extend(
            self.points
                .iter()
                .map(|p| p.0)
                .filter(|&t| t > 0.0 && t < horizon_s),
        );
        knots.push(horizon_s);
        let area: f64 = knots
            .windows(2)
            .map(|w| 0.5 * (self.at(w[0]) + self.at(w[1])) * (w[1] - w[0]))
            .sum();
        area / horizon_s
    }

    /// Whether the multiplier stays 0 from `t_s` on (no arrival can ever come again).
    fn zero_from(&self, t_s: f64) -> bool {
        t_s >= self.zero_from_s
    }
}

/// Poisson arrivals with rate `base · profile(t)`, drawn by thinning (exact for any
/// profile): candidates at the peak rate, each kept with probability `profile(t) / max`.
#[derive(Clone, Debug)]
pub(crate) struct ArrivalStream {
    peak_rate_per_s: f64,
}

impl ArrivalStream {
    /// A stream of `base_veh_per_hour` scaled by `profile`.
    pub(crate) fn new(base_veh_per_hour: f64, profile: &Profile) -> Self {
        ArrivalStream {
            peak_rate_per_s: base_veh_per_hour / 3600.0 * profile.max_multiplier(),
        }
    }

    /// The first arrival strictly after `after_s`; infinity when none can come.
    pub(crate) fn next_after(&self, after_s: f64, profile: &Profile, rng: &mut Pcg64Mcg) -> f64 {
        if self.peak_rate_per_s <= 0.0 {
            return f64::INFINITY;
        }
        let max = profile.max_multiplier();
        let mut t = after_s;
        loop {
            if profile.zero_from(t) {
                return f64::INFINITY;
            }
            let gap: f64 = rng.sample(Exp1);
            t += gap / self.peak_rate_per_s;
            let u: f64 = rng.random();
            if u * max < profile.at(t) {
                return t;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn peak() -> Profile {
        Profile::from_points(vec![(0.0, 0.5), (1000.0, 1.5), (2000.0, 0.5)])
    }

    #[test]
    fn profile_interpolates_and_holds_ends() {
        let p = peak();
        assert_eq!(p.at(-5.0), 0.5);
        assert_eq!(p.at(500.0), 1.0);
        assert_eq!(p.at(1000.0), 1.5);
        assert_eq!(p.at(1500.0), 1.0);
        assert_eq!(p.at(9000.0), 0.5);
        assert_eq!(p.max_multiplier(), 1.5);
        assert!((p.mean_over(2000.0) - 1.0).abs() < 1e-12);
        assert!((p.mean_over(4000.0) - 0.75).abs() < 1e-12);
        assert_eq!(Profile::flat().mean_over(100.0), 1.0);
    }

    #[test]
    fn arrivals_follow_the_profile() {
        let p = peak();
        let s = ArrivalStream::new(3600.0, &p);
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let (mut early, mut middle) = (0u32, 0u32);
        let mut t = 0.0;
        loop {
            t = s.next_after(t, &p, &mut rng);
            if t >= 2000.0 {
                break;
            }
            // Expected: 0..200 s mean multiplier 0.6 -> 120; 900..1100 s mean ~1.45 -> 290.
            if t < 200.0 {
                early += 1;
            } else if (900.0..1100.0).contains(&t) {
                middle += 1;
            }
        }
        assert!((90..150).contains(&early), "{early}");
        assert!((245..335).contains(&middle), "{middle}");
    }

    #[test]
    fn a_profile_that_ends_at_zero_stops_arrivals() {
        let p = Profile::from_points(vec![(0.0, 1.0), (100.0, 0.0)]);
        let s = ArrivalStream::new(36000.0, &p);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut t = 0.0f64;
        let mut n = 0;
        while t.is_finite() {
            t = s.next_after(t, &p, &mut rng);
            n += 1;
            assert!(
                t < 100.0 || t.is_infinite(),
                "arrival at {t} after the demand ended"
            );
        }
        // 10 veh/s at a mean multiplier of 0.5 over 100 s: about 500.
        assert!((400..600).contains(&n), "{n}");
        let none = ArrivalStream::new(0.0, &p);
        assert_eq!(none.next_after(0.0, &p, &mut rng), f64::INFINITY);
    }
}
