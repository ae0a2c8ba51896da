//! A policy's parameters as plain data: what is exported, imported and fine-tuned.

use greenwave_core::mlp::{Activation, DenseLayer, OwnedMlp};
use greenwave_core::ObsLayout;

/// Observation normalisation baked into exported models: `clip((obs − mean) · inv_std)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ObsNormalization {
    /// Per-feature mean.
    pub mean: Vec<f32>,
    /// Per-feature 1 / std.
    pub inv_std: Vec<f32>,
    /// Normalised values are clipped to ±this.
    pub clip: f32,
}

impl ObsNormalization {
    /// The identity (mean 0, std 1) with the given clip.
    pub fn identity(dim: usize, clip: f32) -> Self {
        ObsNormalization {
            mean: vec![0.0; dim],
            inv_std: vec![1.0; dim],
            clip,
        }
    }

    /// Normalises one observation into `out`.
    pub fn apply(&self, obs: &[f32], out: &mut [f32]) {
        for (((o, x), m), s) in out.iter_mut().zip(obs).zip(&self.mean).zip(&self.inv_std) {
            *o = ((x - m) * s).clamp(-self.clip, self.clip);
        }
    }
}

/// Actor and critic parameters, plus normalisation.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyWeights {
    /// Observation layout the policy reads.
    pub obs_layout: ObsLayout,
    /// Normalisation.
    pub norm: ObsNormalization,
    /// Actor layers, input to output (last = logits, one per phase).
    pub actor: Vec<DenseLayer>,
    /// Critic layers, input to output (last = one value).
    pub critic: Vec<DenseLayer>,
}

impl PolicyWeights {
    /// Observation width.
    pub fn obs_dim(&self) -> usize {
        self.obs_layout.dim()
    }

    /// Number of actions (phases).
    pub fn n_actions(&self) -> usize {
        self.obs_layout.n_phases as usize
    }

    /// Hidden widths of the actor.
    pub fn hidden(&self) -> Vec<usize> {
        self.actor
            .iter()
            .take(self.actor.len().saturating_sub(1))
            .map(|l| l.outputs)
            .collect()
    }

    /// The actor as a firmware MLP (for the postcard blob).
    pub fn actor_mlp(&self, plan_hash: u64, policy_version: u32) -> OwnedMlp {
        OwnedMlp {
            plan_hash,
            obs_layout: self.obs_layout,
            policy_version,
            activation: Activation::Tanh,
            obs_clip: self.norm.clip,
            obs_mean: self.norm.mean.clone(),
            obs_inv_std: self.norm.inv_std.clone(),
            layers: self.actor.clone(),
        }
    }

    /// Plain-Rust forward pass of one observation (raw, unnormalised): `(logits, value)`.
    /// Used for rollouts and as the reference the exported models are checked against.
    pub fn forward(&self, obs: &[f32]) -> (Vec<f32>, f32) {
        let mut x = vec![0.0; obs.len()];
        self.norm.apply(obs, &mut x);
        let logits = dense_forward(&self.actor, &x);
        let value = dense_forward(&self.critic, &x)[0];
        (logits, value)
    }
}

/// Runs tanh hidden layers and a linear last layer.
pub fn dense_forward(layers: &[DenseLayer], x: &[f32]) -> Vec<f32> {
    let mut cur = x.to_vec();
    for (i, l) in layers.iter().enumerate() {
        let last = i + 1 == layers.len();
        cur = (0..l.outputs)
            .map(|j| {
                let row = &l.weights[j * l.inputs..(j + 1) * l.inputs];
                let z = l.bias[j] + row.iter().zip(&cur).map(|(w, v)| w * v).sum::<f32>();
                if last {
                    z
                } else {
                    z.tanh()
                }
            })
            .collect();
    }
    cur
}
