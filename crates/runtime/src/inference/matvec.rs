//! A plain-Rust pass over the policy's dense layers, allocation-free after load.

use greenwave_core::mlp::DenseLayer;
use greenwave_core::ObsLayout;
use greenwave_policy::{onnx, ObsNormalization};

use super::{check_len, InferenceError, PolicyBackend};

const NAME: &str = "matvec";

/// The policy's MLPs (actor and critic) as plain row-major matrices.
#[derive(Clone, Debug)]
pub struct MatvecBackend {
    norm: ObsNormalization,
    actor: Vec<DenseLayer>,
    critic: Vec<DenseLayer>,
    x: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
}

impl MatvecBackend {
    /// Reads the weights from the ONNX initialisers (greenwave's own export layout).
    pub fn load(onnx_bytes: &[u8], layout: ObsLayout) -> Result<Self, InferenceError> {
        let (w, m) = onnx::import(onnx_bytes).map_err(|e| InferenceError::Load {
            backend: NAME,
            message: e.to_string(),
        })?;
        if m.obs_layout != layout {
            return Err(InferenceError::Load {
                backend: NAME,
                message: format!(
                    "model is for observation layout {:?}, not {layout:?}",
                    m.obs_layout
                ),
            });
        }
        let width = w
            .actor
            .iter()
            .chain(&w.critic)
            .map(|l| l.outputs.max(l.inputs))
            .max()
            .unwrap_or(0);
        Ok(MatvecBackend {
            x: vec![0.0; w.obs_dim()],
            a: vec![0.0; width],
            b: vec![0.0; width],
            norm: w.norm,
            actor: w.actor,
            critic: w.critic,
        })
    }
}

/// Dot product with four independent accumulators (the add chains overlap).
fn dot(w: &[f32], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (wc, xc) = (w.chunks_exact(4), x.chunks_exact(4));
    let (wr, xr) = (wc.remainder(), xc.remainder());
    for (wq, xq) in wc.zip(xc) {
        for k in 0..4 {
            acc[k] += wq[k] * xq[k];
        }
    }
    for (a, b) in wr.iter().zip(xr) {
        acc[0] += a * b;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Runs tanh hidden layers and a linear last layer from `x` into `out`.
fn head(layers: &[DenseLayer], x: &[f32], a: &mut [f32], b: &mut [f32], out: &mut [f32]) {
    let last = layers.len().saturating_sub(1);
    let (mut cur, mut next) = (a, b);
    cur[..x.len()].copy_from_slice(x);
    let mut width = x.len();
    for (i, l) in layers.iter().enumerate() {
        for (j, y) in next[..l.outputs].iter_mut().enumerate() {
            let z = l.bias[j] + dot(&l.weights[j * l.inputs..(j + 1) * l.inputs], &cur[..width]);
            *y = if i == last { z } else { z.tanh() };
        }
        width = l.outputs;
        std::mem::swap(&mut cur, &mut next);
    }
    out.copy_from_slice(&cur[..out.len()]);
}

impl PolicyBackend for MatvecBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        check_len(NAME, "observation", self.x.len(), obs.len())?;
        let n_actions = self.actor.last().map_or(0, |l| l.outputs);
        check_len(NAME, "logits buffer", n_actions, logits.len())?;
        self.norm.apply(obs, &mut self.x);
        head(&self.actor, &self.x, &mut self.a, &mut self.b, logits);
        let mut value = [0.0f32];
        head(&self.critic, &self.x, &mut self.a, &mut self.b, &mut value);
        Ok(value[0])
    }
}
