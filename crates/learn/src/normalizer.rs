//! Running observation statistics (parallel Welford), frozen into the exported graph.

use crate::weights::ObsNormalization;

/// Running mean and variance per observation feature.
#[derive(Clone, Debug, PartialEq)]
pub struct RunningObsStats {
    /// Per-feature mean.
    pub mean: Vec<f64>,
    /// Per-feature variance.
    pub var: Vec<f64>,
    /// Observations seen (starts at a tiny count so the first batch dominates).
    pub count: f64,
}

impl RunningObsStats {
    /// Fresh statistics for `dim` features.
    pub fn new(dim: usize) -> Self {
        RunningObsStats {
            mean: vec![0.0; dim],
            var: vec![1.0; dim],
            count: 1e-4,
        }
    }

    /// Adds a batch of observations (`rows × dim`, row-major).
    pub fn update(&mut self, obs: &[f32]) {
        let dim = self.mean.len();
        let n = obs.len() / dim;
        if n == 0 {
            return;
        }
        let mut mean = vec![0.0f64; dim];
        for row in obs.chunks_exact(dim) {
            for (m, &x) in mean.iter_mut().zip(row) {
                *m += x as f64;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let mut var = vec![0.0f64; dim];
        for row in obs.chunks_exact(dim) {
            for ((v, &x), m) in var.iter_mut().zip(row).zip(&mean) {
                *v += (x as f64 - m).powi(2);
            }
        }
        var.iter_mut().for_each(|v| *v /= n as f64);
        let (na, nb) = (self.count, n as f64);
        let total = na + nb;
        for i in 0..dim {
            let delta = mean[i] - self.mean[i];
            let m2 = self.var[i] * na + var[i] * nb + delta * delta * na * nb / total;
            self.mean[i] += delta * nb / total;
            self.var[i] = m2 / total;
        }
        self.count = total;
    }

    /// The normalisation to apply (and to export).
    pub fn normalization(&self, clip: f32) -> ObsNormalization {
        ObsNormalization {
            mean: self.mean.iter().map(|&m| m as f32).collect(),
            inv_std: self
                .var
                .iter()
                .map(|&v| (1.0 / (v + 1e-8).sqrt()) as f32)
                .collect(),
            clip,
        }
    }
}

/// Reward scaling by the running spread of the discounted return (as Stable-Baselines3's
/// `VecNormalize` and "Implementation Matters in Deep RL", Engstrom et al. 2020, do):
/// rewards are divided by the standard deviation of `G_t = γ G_{t−1} + r_t`, never shifted,
/// so the optimal policy is unchanged while the critic's targets stay of order 1 on any
/// net. Without it a junction with long approach zones gives per-decision rewards of tens,
/// value losses in the thousands, and a global gradient-norm clip that the critic's
/// gradient fills, leaving the actor with almost none.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RewardScale {
    /// Returns seen.
    pub count: f64,
    /// Their mean.
    pub mean: f64,
    /// Their summed squared deviation (Welford).
    pub m2: f64,
}

impl RewardScale {
    /// Adds the discounted returns of one trajectory's rewards; the return restarts after
    /// each `episode_end`.
    pub fn update(&mut self, rewards: &[f32], episode_end: &[bool], gamma: f32) {
        let mut g = 0.0f64;
        for (&r, &end) in rewards.iter().zip(episode_end) {
            g = gamma as f64 * g + r as f64;
            self.count += 1.0;
            let delta = g - self.mean;
            self.mean += delta / self.count;
            self.m2 += delta * (g - self.mean);
            if end {
                g = 0.0;
            }
        }
    }

    /// The factor rewards are multiplied by: 1 / std of the returns (1 before any).
    pub fn factor(&self) -> f32 {
        if self.count < 2.0 {
            return 1.0;
        }
        let var = self.m2 / self.count;
        (1.0 / var.max(1e-8).sqrt()) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_scale_makes_returns_unit_spread_whatever_the_reward_units() {
        // The same reward stream in two units gets the same scaled stream.
        let rewards: Vec<f32> = (0..400).map(|i| -((i * 13 % 7) as f32)).collect();
        let ends: Vec<bool> = (0..400).map(|i| i % 100 == 99).collect();
        let mut a = RewardScale::default();
        a.update(&rewards, &ends, 0.9);
        let big: Vec<f32> = rewards.iter().map(|r| r * 250.0).collect();
        let mut b = RewardScale::default();
        b.update(&big, &ends, 0.9);
        assert!((a.factor() / b.factor() - 250.0).abs() < 1e-2);
        // Scaled returns have unit spread.
        let mut c = RewardScale::default();
        let scaled: Vec<f32> = big.iter().map(|r| r * b.factor()).collect();
        c.update(&scaled, &ends, 0.9);
        assert!((c.m2 / c.count - 1.0).abs() < 1e-3, "{}", c.m2 / c.count);
        assert_eq!(RewardScale::default().factor(), 1.0);
    }

    #[test]
    fn batches_equal_one_pass() {
        let data: Vec<f32> = (0..200).map(|i| ((i * 37 % 23) as f32) / 7.0).collect();
        let mut a = RunningObsStats::new(2);
        a.update(&data[..60]);
        a.update(&data[60..]);
        let mut b = RunningObsStats::new(2);
        b.update(&data);
        for i in 0..2 {
            assert!((a.mean[i] - b.mean[i]).abs() < 1e-6);
            assert!((a.var[i] - b.var[i]).abs() < 1e-6);
        }
        let col0: Vec<f64> = data.chunks(2).map(|r| r[0] as f64).collect();
        let mean = col0.iter().sum::<f64>() / 100.0;
        assert!((b.mean[0] - mean).abs() < 1e-3);
    }
}
