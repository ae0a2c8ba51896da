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

#[cfg(test)]
mod tests {
    use super::*;

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
