//! A trained policy as a [`Controller`], so it runs through the same episode loop as the
//! classic controllers (and on every backend).

use greenwave_core::mlp::masked_argmax;
use greenwave_learn::weights::dense_forward;
use greenwave_learn::PolicyWeights;
use greenwave_sim::{Controller, Env};

/// Greedy (masked argmax) control by a policy, one shared network for every signal.
#[derive(Clone, Debug)]
pub struct PolicyController {
    weights: PolicyWeights,
    raw: Vec<f32>,
    x: Vec<f32>,
}

impl PolicyController {
    /// A controller acting with `weights`.
    pub fn new(weights: PolicyWeights) -> Self {
        let d = weights.obs_dim();
        PolicyController {
            weights,
            raw: vec![0.0; d],
            x: vec![0.0; d],
        }
    }
}

impl Controller for PolicyController {
    fn name(&self) -> &'static str {
        "policy"
    }

    fn reset(&mut self, _env: &dyn Env) {}

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        (0..env.signals().len())
            .map(|s| {
                let mask = env.action_mask(s);
                // An observation error (an impossible detector reading) leaves the choice
                // to the supervisor: ask for the phase it is already serving.
                if env.observe(s, &mut self.raw).is_err() {
                    return env.sequencer(s).interval().target().0;
                }
                self.weights.norm.apply(&self.raw, &mut self.x);
                let logits = dense_forward(&self.weights.actor, &self.x);
                masked_argmax(&logits, mask)
                    .unwrap_or_else(|| env.sequencer(s).interval().target().0)
            })
            .collect()
    }
}
