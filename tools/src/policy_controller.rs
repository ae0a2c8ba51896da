//! A trained policy as a [`Controller`], so it runs through the same episode loop as the
//! classic controllers (and on every backend).

use greenwave_core::mlp::masked_argmax;
use greenwave_learn::weights::InputMajorLayers;
use greenwave_learn::PolicyWeights;
use greenwave_sim::{Controller, Env, MaxRedBound, PolicyMasks};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::sampling::masked_sample;

/// How a policy turns its phase scores into a request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum ActionRule {
    /// The allowed phase with the highest score (masked argmax): what the roadside
    /// controller runs for a greedy policy, and the firmware for every policy.
    #[default]
    Greedy,
    /// A phase drawn from the softmax of the scores over `temperature` (1: the policy's own
    /// distribution, as in training); `seed` and the episode's seed seed the draws. For
    /// measuring a trained policy (`greenwave eval --temperature`), for the decision-rule
    /// trial, and how a policy whose manifest names a decision temperature acts.
    Sampled {
        /// Divides the scores before the softmax; positive and finite.
        temperature: f32,
        /// Seeds the draws together with each episode's seed.
        seed: u64,
    },
}

impl ActionRule {
    /// The temperature of a sampling rule; `None` for the greedy one.
    pub fn temperature(self) -> Option<f32> {
        match self {
            ActionRule::Greedy => None,
            ActionRule::Sampled { temperature, .. } => Some(temperature),
        }
    }

    /// `--temperature` checked: positive and finite, else an error that says so.
    pub fn sampled(temperature: f32, seed: u64) -> Result<Self, String> {
        if temperature.is_finite() && temperature > 0.0 {
            Ok(ActionRule::Sampled { temperature, seed })
        } else {
            Err(format!(
                "temperature {temperature}: it must be a positive, finite number (1 samples the policy's own distribution; smaller values sharpen it towards the greedy choice)"
            ))
        }
    }
}

/// Control by a policy, greedy (masked argmax) unless told to sample ([`ActionRule`]): one
/// network for every signal, or one per signal (a shared policy exported per junction),
/// under the max-red rule ([`PolicyMasks`]) as in training and on the controller.
#[derive(Clone, Debug)]
pub struct PolicyController {
    /// One network (acting for every signal) or one per signal, in signal order.
    weights: Vec<PolicyWeights>,
    /// Each network's actor, input-major (the same logits as `dense_forward`, bit for
    /// bit, in vectorised loops: a compiled shared policy's layers are wide).
    actors: Vec<InputMajorLayers>,
    raw: Vec<f32>,
    x: Vec<f32>,
    masks: PolicyMasks,
    /// Temperature and random stream of a sampling policy (`None`: greedy).
    sampling: Option<(f32, StdRng)>,
}

impl PolicyController {
    /// A controller acting with `weights` for every signal.
    pub fn new(weights: PolicyWeights) -> Self {
        Self::per_signal(vec![weights])
    }

    /// A controller acting for signal `s` with `weights[s]` (or `weights[0]` for every
    /// signal when there is one).
    pub fn per_signal(weights: Vec<PolicyWeights>) -> Self {
        let d = weights.iter().map(|w| w.obs_dim()).max().unwrap_or(0);
        PolicyController {
            actors: weights
                .iter()
                .map(|w| InputMajorLayers::new(&w.actor))
                .collect(),
            weights,
            raw: vec![0.0; d],
            x: vec![0.0; d],
            masks: PolicyMasks::default(),
            sampling: None,
        }
    }
}

impl PolicyController {
    /// The max-red rule's bound (default: each signal's max-out cycle);
    /// [`MaxRedBound::Off`] switches the rule off, to measure what it changes.
    pub fn with_max_red(mut self, bound: MaxRedBound) -> Self {
        self.masks = PolicyMasks::with_bound(bound);
        self
    }

    /// Acts by `rule` in the episode seeded `episode_seed` (greedy by default).
    pub fn with_rule(mut self, rule: ActionRule, episode_seed: u64) -> Self {
        self.sampling = match rule {
            ActionRule::Greedy => None,
            ActionRule::Sampled { temperature, seed } => Some((
                temperature,
                StdRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ episode_seed),
            )),
        };
        self
    }
}

impl Controller for PolicyController {
    fn name(&self) -> &'static str {
        "policy"
    }

    fn reset(&mut self, _env: &dyn Env) {
        self.masks.clear();
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        self.masks.note(env);
        (0..env.signals().len())
            .map(|s| {
                let mask = self.masks.mask(env, s);
                let hold = env.sequencer(s).interval().target().0;
                let k = if s < self.weights.len() { s } else { 0 };
                let (Some(w), Some(actor)) = (self.weights.get(k), self.actors.get(k)) else {
                    return hold;
                };
                let d = w.obs_dim();
                let (raw, x) = (&mut self.raw[..d], &mut self.x[..d]);
                // An observation error (an impossible detector reading) leaves the choice
                // to the supervisor: ask for the phase it is already serving.
                if env.observe(s, raw).is_err() {
                    return hold;
                }
                w.norm.apply(raw, x);
                let logits = actor.forward(x);
                match &mut self.sampling {
                    None => masked_argmax(&logits, mask),
                    // A NaN score has no probability: the supervisor's phase, as for a
                    // failed observation.
                    Some(_) if logits.iter().any(|z| z.is_nan()) => None,
                    Some((t, rng)) => masked_sample(&logits, mask, *t, rng.random::<f32>()),
                }
                .unwrap_or(hold)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::mlp::DenseLayer;
    use greenwave_learn::weights::ObsNormalization;
    use greenwave_sim::{EmbeddedEnv, SignalSpec};

    /// A policy for `spec` that ignores its observation and ranks the phases by `bias`.
    fn ranking(spec: &SignalSpec, bias: impl Fn(usize) -> f32) -> PolicyWeights {
        let (d, n) = (spec.layout.dim(), spec.layout.n_phases as usize);
        let layer = |outputs: usize| DenseLayer {
            inputs: d,
            outputs,
            weights: vec![0.0; d * outputs],
            bias: (0..outputs).map(&bias).collect(),
        };
        PolicyWeights {
            obs_layout: spec.layout,
            norm: ObsNormalization::identity(d, 5.0),
            actor: vec![layer(n)],
            critic: vec![layer(1)],
        }
    }

    #[test]
    fn each_signal_acts_with_its_own_network() {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/scenarios/arterial-mixed.toml"
        );
        let scenario = greenwave_sim::load(file).unwrap();
        let mut env = EmbeddedEnv::from_scenario(&scenario, 3);
        env.reset(3).unwrap();
        let specs = env.signals().to_vec();
        assert_ne!(specs[0].layout, specs[1].layout, "mixed layouts");
        // Signal 0 prefers its last allowed phase, signal 1 its first.
        let biases: [fn(usize) -> f32; 2] = [|p| p as f32, |p| -(p as f32)];
        let mut c = PolicyController::per_signal(vec![
            ranking(&specs[0], biases[0]),
            ranking(&specs[1], biases[1]),
        ]);
        let (mut told_apart, mut overruled) = (false, false);
        for _ in 0..120 {
            let actions = c.decide(&env);
            for (s, &a) in actions.iter().enumerate() {
                // The max-red rule narrows the env's mask once a preferred phase has kept
                // the others red for too long.
                let mask = c.masks.mask(&env, s);
                overruled |= mask != env.action_mask(s);
                let n = specs[s].layout.n_phases as usize;
                let logits: Vec<f32> = (0..n).map(biases[s]).collect();
                assert_eq!(Some(a), masked_argmax(&logits, mask), "signal {s}");
                let other: Vec<f32> = (0..n).map(biases[1 - s]).collect();
                told_apart |= masked_argmax(&other, mask) != Some(a);
            }
            if env.step(&actions).unwrap().done {
                break;
            }
        }
        assert!(
            told_apart,
            "the two rankings never differed under the masks"
        );
        assert!(overruled, "the max-red rule never served a starved phase");
    }
}
