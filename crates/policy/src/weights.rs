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

/// [`dense_forward`]'s layers stored input-major (`[inputs][outputs]`), for the many
/// forward passes of rollouts and greedy episodes.
///
/// Each output still sums its products in input order from −0.0, as `dense_forward`'s
/// `sum` does, and then adds its bias, so the results are the same bit for bit (property
/// test `input_major_layers_equal_dense_forward_bit_for_bit`): runs, their validations and
/// their figures do not change. What changes is the loop: a row-major dot product is one
/// chain of dependent additions the compiler may not reorder, where input-major order
/// updates every output at once and vectorises.
#[derive(Clone, Debug, PartialEq)]
pub struct InputMajorLayers {
    layers: Vec<InputMajorLayer>,
    /// The widest layer's outputs (the capacity of the next row).
    widest: usize,
}

#[derive(Clone, Debug, PartialEq)]
struct InputMajorLayer {
    outputs: usize,
    /// `weights[i * outputs + j]` = the row-major layer's `weights[j * inputs + i]`.
    weights: Vec<f32>,
    bias: Vec<f32>,
}

impl InputMajorLayer {
    fn new(l: &DenseLayer) -> Self {
        let weights = (0..l.inputs)
            .flat_map(|i| (0..l.outputs).map(move |j| l.weights[j * l.inputs + i]))
            .collect();
        InputMajorLayer {
            outputs: l.outputs,
            weights,
            bias: l.bias.clone(),
        }
    }

    /// `out[j] = bias[j] + Σ_i w[j][i] · x[i]`, the sum in the order of `dense_forward`'s
    /// and the bias the first operand, as there (the same bits for NaN payloads too).
    #[allow(clippy::assign_op_pattern)]
    fn affine(&self, x: &[f32], out: &mut [f32]) {
        out.fill(-0.0);
        // A layer of no outputs has no weights: `max(1)` only keeps `chunks_exact` legal.
        for (v, w) in x.iter().zip(self.weights.chunks_exact(self.outputs.max(1))) {
            out.iter_mut().zip(w).for_each(|(o, w)| *o += w * v);
        }
        out.iter_mut()
            .zip(&self.bias)
            .for_each(|(o, b)| *o = b + *o);
    }
}

impl InputMajorLayers {
    /// The layers of `layers` (tanh hidden layers and a linear last one), input-major.
    pub fn new(layers: &[DenseLayer]) -> Self {
        InputMajorLayers {
            layers: layers.iter().map(InputMajorLayer::new).collect(),
            widest: layers.iter().map(|l| l.outputs).max().unwrap_or(0),
        }
    }

    /// Outputs of the first layer (0 with no layers).
    pub fn first_outputs(&self) -> usize {
        self.layers.first().map_or(0, |l| l.outputs)
    }

    /// `dense_forward(layers, x)`, bit for bit.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let (mut cur, mut next) = (x.to_vec(), Vec::with_capacity(self.widest));
        for (i, l) in self.layers.iter().enumerate() {
            next.clear();
            next.resize(l.outputs, 0.0);
            l.affine(&cur, &mut next);
            if i + 1 < self.layers.len() {
                next.iter_mut().for_each(|z| *z = z.tanh());
            }
            std::mem::swap(&mut cur, &mut next);
        }
        cur
    }

    /// The first layer alone, without its activation, into `out` (`out.len()` its
    /// outputs): what a shared network's lane encoder applies to each lane.
    pub fn first_affine(&self, x: &[f32], out: &mut [f32]) {
        if let Some(l) = self.layers.first() {
            l.affine(x, &mut out[..l.outputs]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A layer from `vals`, its weights scaled by 1/√inputs so that hidden units are not
    /// all saturated at ±1 (which would hide their differences behind tanh).
    fn layer(inputs: usize, outputs: usize, vals: &[f32], at: usize) -> DenseLayer {
        let pick = |k: usize| vals[(at + k) % vals.len()];
        let scale = 1.0 / (inputs.max(1) as f32).sqrt();
        DenseLayer {
            inputs,
            outputs,
            weights: (0..inputs * outputs).map(|k| pick(k) * scale).collect(),
            bias: (0..outputs).map(|k| pick(7 * k + 3)).collect(),
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    proptest! {
        /// Zeros of both signs are among the values, so the sums' start (−0.0, as
        /// `Iterator::sum` for floats) is checked too; widths of 0 and observations longer
        /// than the first layer's inputs (which both passes ignore past its width) as well.
        #[test]
        fn input_major_layers_equal_dense_forward_bit_for_bit(
            widths in proptest::collection::vec(0usize..40, 2..5),
            vals in proptest::collection::vec(
                prop_oneof![Just(0.0f32), Just(-0.0f32), -3.0f32..3.0], 1..200),
            x in proptest::collection::vec(
                prop_oneof![Just(0.0f32), Just(-0.0f32), -3.0f32..3.0], 48),
            extra in 0usize..8,
        ) {
            let layers: Vec<DenseLayer> = widths
                .windows(2)
                .enumerate()
                .map(|(k, w)| layer(w[0], w[1], &vals, 31 * k))
                .collect();
            let x = &x[..widths[0] + extra];
            let prepared = InputMajorLayers::new(&layers);
            prop_assert_eq!(bits(&prepared.forward(x)), bits(&dense_forward(&layers, x)));
            let first = &layers[..1];
            let mut out = vec![0.0; widths[1]];
            InputMajorLayers::new(first).first_affine(x, &mut out);
            prop_assert_eq!(bits(&out), bits(&dense_forward(first, x)));
        }
    }
}
