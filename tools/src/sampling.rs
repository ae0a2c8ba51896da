//! Drawing a phase from a policy's masked softmax: the rule training's rollouts act by
//! (at temperature 1), and the one `greenwave eval --temperature` measures a trained
//! policy with, and the controller acts by for a policy whose manifest names a decision
//! temperature. The firmware acts greedily (`masked_argmax`).

use greenwave_core::PhaseMask;

/// Draws an allowed phase from `softmax(logits / temperature)` over the allowed phases,
/// at `u` uniform in [0, 1): greenwave-core's [`masked_sample`](greenwave_core::mlp::masked_sample)
/// with the host's `f32::exp`, which training's rollouts have drawn with since the rule
/// was written (so their weights stay bit for bit what they were).
pub fn masked_sample(logits: &[f32], mask: PhaseMask, temperature: f32, u: f32) -> Option<u8> {
    greenwave_core::mlp::masked_sample(logits, mask, temperature, u, f32::exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::mlp::masked_argmax;

    const N: usize = 10_000;

    /// How often each phase is drawn over `N` evenly spaced `u`: the distribution's
    /// quantiles, so the shares equal the probabilities to within 1 / N.
    fn shares(logits: &[f32], mask: PhaseMask, temperature: f32) -> Vec<f64> {
        let mut count = vec![0usize; logits.len()];
        for k in 0..N {
            let u = (k as f32 + 0.5) / N as f32;
            count[masked_sample(logits, mask, temperature, u).unwrap() as usize] += 1;
        }
        count.iter().map(|&c| c as f64 / N as f64).collect()
    }

    fn softmax(z: &[f32]) -> Vec<f64> {
        let e: Vec<f64> = z.iter().map(|&x| f64::from(x).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    #[test]
    fn at_temperature_one_the_draws_follow_the_policys_softmax() {
        let logits = [0.3f32, -1.0, 1.2, 0.0];
        let p = softmax(&logits);
        for (got, want) in shares(&logits, PhaseMask(0b1111), 1.0).iter().zip(&p) {
            assert!((got - want).abs() < 2e-3, "{got} against {want}");
        }
    }

    #[test]
    fn a_lower_temperature_sharpens_the_softmax_towards_the_argmax() {
        let logits = [0.3f32, -1.0, 1.2, 0.0];
        let halved: Vec<f32> = logits.iter().map(|z| z / 0.5).collect();
        let got = shares(&logits, PhaseMask(0b1111), 0.5);
        for (g, want) in got.iter().zip(softmax(&halved)) {
            assert!((g - want).abs() < 2e-3, "{g} against {want}");
        }
        assert!(got[2] > softmax(&logits)[2], "the best phase gains");
        let cold = shares(&logits, PhaseMask(0b1111), 1e-3);
        assert_eq!(cold[2], 1.0);
        assert_eq!(
            masked_argmax(&logits, PhaseMask(0b1111)),
            Some(2),
            "the same phase as the greedy rule"
        );
    }

    #[test]
    fn a_masked_phase_is_never_drawn() {
        let logits = [5.0f32, 0.0, 0.1];
        let mask = PhaseMask(0b110);
        let got = shares(&logits, mask, 1.0);
        assert_eq!(got[0], 0.0);
        let p = softmax(&logits[1..]);
        assert!((got[1] - p[0]).abs() < 2e-3 && (got[2] - p[1]).abs() < 2e-3);
        for u in [0.0f32, 0.999_999] {
            assert_ne!(masked_sample(&logits, mask, 1.0, u), Some(0));
        }
    }

    #[test]
    fn no_allowed_phase_draws_nothing() {
        let logits = [1.0f32, 2.0];
        let none = PhaseMask(0);
        assert_eq!(masked_sample(&logits, none, 1.0, 0.5), None);
        assert_eq!(masked_sample(&[], PhaseMask(0b1111), 1.0, 0.5), None);
    }
}
