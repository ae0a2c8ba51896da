//! Generalised advantage estimation.

/// One environment's trajectory segment, time-ordered.
#[derive(Clone, Copy, Debug)]
pub struct Trajectory<'a> {
    /// `r_t`.
    pub rewards: &'a [f32],
    /// `V(s_t)`.
    pub values: &'a [f32],
    /// `V(s_{t+1})` of the *true* next state: after a truncation (time limit) the value of
    /// the final observation, not of the reset state; for the last step of the segment the
    /// bootstrap value.
    pub next_values: &'a [f32],
    /// `s_{t+1}` is terminal (no future reward at all): no bootstrap.
    pub terminated: &'a [bool],
    /// The episode ended after step `t` (terminated or truncated): the advantage recursion
    /// does not carry across it.
    pub episode_end: &'a [bool],
}

/// GAE(γ, λ): returns `(advantages, returns)` with `returns = advantages + values`.
///
/// `δ_t = r_t + γ·(1 − terminated_t)·V(s_{t+1}) − V(s_t)`,
/// `Â_t = δ_t + γλ·(1 − episode_end_t)·Â_{t+1}`.
pub fn gae(t: Trajectory<'_>, gamma: f32, lambda: f32) -> (Vec<f32>, Vec<f32>) {
    let n = t.rewards.len();
    assert!(
        [
            t.values.len(),
            t.next_values.len(),
            t.terminated.len(),
            t.episode_end.len()
        ]
        .iter()
        .all(|&l| l == n),
        "trajectory fields must have equal lengths"
    );
    let mut adv = vec![0.0f32; n];
    let mut next_adv = 0.0f32;
    for i in (0..n).rev() {
        let bootstrap = if t.terminated[i] {
            0.0
        } else {
            t.next_values[i]
        };
        let delta = t.rewards[i] + gamma * bootstrap - t.values[i];
        let carry = if t.episode_end[i] { 0.0 } else { next_adv };
        adv[i] = delta + gamma * lambda * carry;
        next_adv = adv[i];
    }
    let ret = adv.iter().zip(t.values).map(|(a, v)| a + v).collect();
    (adv, ret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f32]) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn hand_computed_with_truncation_and_termination() {
        // γ = 0.9, λ = 0.5: an episode truncated after step 1, then one terminated after
        // step 3.
        let rewards = [1.0, 0.0, 2.0, -1.0];
        let values = [0.5, 1.0, 0.0, 0.5];
        // step 0 -> 1 (V=1.0); step 1 truncated, final obs V=2.0; step 2 -> 3 (V=0.5);
        // step 3 terminated.
        let next_values = [1.0, 2.0, 0.5, 9.0];
        let terminated = [false, false, false, true];
        let episode_end = [false, true, false, true];
        let (g, l) = (0.9, 0.5);
        let d3 = -1.0 - 0.5; // terminal: no bootstrap
        let d2 = 2.0 + g * 0.5 - 0.0;
        let d1 = 0.0 + g * 2.0 - 1.0; // truncated: bootstrap from the final obs
        let d0 = 1.0 + g * 1.0 - 0.5;
        let a3 = d3;
        let a2 = d2 + g * l * a3;
        let a1 = d1; // episode boundary: no carry
        let a0 = d0 + g * l * a1;
        let (adv, ret) = gae(
            Trajectory {
                rewards: &rewards,
                values: &values,
                next_values: &next_values,
                terminated: &terminated,
                episode_end: &episode_end,
            },
            g,
            l,
        );
        close(&adv, &[a0, a1, a2, a3]);
        close(&ret, &[a0 + 0.5, a1 + 1.0, a2 + 0.0, a3 + 0.5]);
    }

    #[test]
    fn lambda_one_is_discounted_return_minus_value() {
        let rewards = [1.0, 1.0, 1.0];
        let values = [0.0, 0.0, 0.0];
        let next_values = [0.0, 0.0, 10.0];
        let f = [false; 3];
        let (adv, _) = gae(
            Trajectory {
                rewards: &rewards,
                values: &values,
                next_values: &next_values,
                terminated: &f,
                episode_end: &f,
            },
            0.5,
            1.0,
        );
        close(
            &adv,
            &[
                1.0 + 0.5 + 0.25 + 0.125 * 10.0,
                1.0 + 0.5 + 0.25 * 10.0,
                1.0 + 0.5 * 10.0,
            ],
        );
    }
}
