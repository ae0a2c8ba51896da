//! candle networks: the actor (logits) and critic (value) MLPs, orthogonal initialisation,
//! Adam with global gradient-norm clipping, masked categorical helpers.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Tensor, Var, D};
use greenwave_core::mlp::DenseLayer;
use greenwave_core::ObsLayout;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use crate::weights::{ObsNormalization, PolicyWeights};

/// The logit given to masked actions. Finite rather than −∞ so that `p · log p` of a
/// masked action is exactly `0 · (−1e9) = 0` in the entropy instead of NaN; `exp` of it
/// underflows to exactly 0, so masked actions have probability 0 either way.
pub const MASKED_LOGIT: f32 = -1e9;

/// A tanh MLP whose last layer is linear. Weights `[out, in]`, like ONNX Gemm with transB.
#[derive(Clone, Debug)]
pub struct MlpNet {
    layers: Vec<(Var, Var)>,
}

/// An orthogonal `[rows, cols]` matrix scaled by `gain` (rows or columns orthonormal,
/// whichever are fewer), by modified Gram–Schmidt on a Gaussian matrix.
pub fn orthogonal(rows: usize, cols: usize, gain: f32, rng: &mut StdRng) -> Vec<f32> {
    let (n, m) = if rows <= cols {
        (rows, cols)
    } else {
        (cols, rows)
    };
    // n vectors of length m, made orthonormal.
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|_| (0..m).map(|_| StandardNormal.sample(rng)).collect())
        .collect();
    for i in 0..n {
        for j in 0..i {
            let dot: f64 = v[i].iter().zip(&v[j]).map(|(a, b)| a * b).sum();
            let vj = v[j].clone();
            v[i].iter_mut().zip(&vj).for_each(|(a, b)| *a -= dot * b);
        }
        let norm = v[i].iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-12);
        v[i].iter_mut().for_each(|a| *a /= norm);
    }
    let mut out = vec![0.0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let x = if rows <= cols { v[r][c] } else { v[c][r] };
            out[r * cols + c] = gain * x as f32;
        }
    }
    out
}

/// `y + b` on every row of `y [n, out]`, written as `y + 1ₙ bᵀ` so that the bias's
/// gradient is a matrix product (`1ₙᵀ · grad`): candle sums a broadcast's gradient over
/// the batch dimension element by element down a column stride, which took a third of a
/// shared-network update over large lane batches.
fn add_bias(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = y.dim(0)?;
    let ones = Tensor::ones((n, 1), y.dtype(), y.device())?;
    y + ones.matmul(&b.unsqueeze(0)?)?
}

impl MlpNet {
    /// Orthogonally initialised layers `widths[0] → … → widths[last]`: hidden gain √2,
    /// output gain `out_gain`, zero biases.
    pub fn new(widths: &[usize], out_gain: f32, rng: &mut StdRng, dev: &Device) -> Result<Self> {
        let mut layers = Vec::new();
        for (i, w) in widths.windows(2).enumerate() {
            let gain = if i + 2 == widths.len() {
                out_gain
            } else {
                2f32.sqrt()
            };
            let weights = orthogonal(w[1], w[0], gain, rng);
            layers.push(DenseLayer {
                inputs: w[0],
                outputs: w[1],
                weights,
                bias: vec![0.0; w[1]],
            });
        }
        Self::from_dense(&layers, dev)
    }

    /// Layers from plain data.
    pub fn from_dense(layers: &[DenseLayer], dev: &Device) -> Result<Self> {
        let layers = layers
            .iter()
            .map(|l| {
                let w = Tensor::from_slice(&l.weights, (l.outputs, l.inputs), dev)?;
                let b = Tensor::from_slice(&l.bias, l.outputs, dev)?;
                Ok((Var::from_tensor(&w)?, Var::from_tensor(&b)?))
            })
            .collect::<Result<_>>()?;
        Ok(MlpNet { layers })
    }

    /// Layers as plain data.
    pub fn to_dense(&self) -> Result<Vec<DenseLayer>> {
        self.layers
            .iter()
            .map(|(w, b)| {
                let (outputs, inputs) = w.dims2()?;
                Ok(DenseLayer {
                    inputs,
                    outputs,
                    weights: w.flatten_all()?.to_vec1()?,
                    bias: b.to_vec1()?,
                })
            })
            .collect()
    }

    /// Overwrites the parameters with `layers` (same shapes), keeping the variables (so
    /// optimisers holding them stay attached).
    pub fn set_dense(&self, layers: &[DenseLayer]) -> Result<()> {
        if layers.len() != self.layers.len() {
            candle_core::bail!(
                "set_dense: {} layers given, the network has {}",
                layers.len(),
                self.layers.len()
            );
        }
        for ((w, b), l) in self.layers.iter().zip(layers) {
            let dev = w.device();
            w.set(&Tensor::from_slice(&l.weights, (l.outputs, l.inputs), dev)?)?;
            b.set(&Tensor::from_slice(&l.bias, l.outputs, dev)?)?;
        }
        Ok(())
    }

    /// `x[batch, in] → [batch, out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for (i, (w, b)) in self.layers.iter().enumerate() {
            x = add_bias(&x.matmul(&w.as_tensor().t()?)?, b.as_tensor())?;
            if i + 1 < self.layers.len() {
                x = crate::activation::tanh(&x)?;
            }
        }
        Ok(x)
    }

    /// Layer `i` alone, without activation: `x[batch, in] → x · Wᵀ + b`.
    pub fn layer(&self, i: usize, x: &Tensor) -> Result<Tensor> {
        let Some((w, b)) = self.layers.get(i) else {
            candle_core::bail!("layer {i} of a {}-layer network", self.layers.len())
        };
        add_bias(&x.matmul(&w.as_tensor().t()?)?, b.as_tensor())
    }

    /// Layer `i`'s weights `[out, in]` and bias `[out]`.
    pub fn layer_params(&self, i: usize) -> Result<(&Tensor, &Tensor)> {
        match self.layers.get(i) {
            Some((w, b)) => Ok((w.as_tensor(), b.as_tensor())),
            None => candle_core::bail!("layer {i} of a {}-layer network", self.layers.len()),
        }
    }

    /// The trainable variables.
    pub fn vars(&self) -> Vec<Var> {
        self.layers
            .iter()
            .flat_map(|(w, b)| [w.clone(), b.clone()])
            .collect()
    }
}

/// Separate actor and critic networks over normalised observations.
#[derive(Clone, Debug)]
pub struct ActorCritic {
    /// Observation layout.
    pub layout: ObsLayout,
    /// obs → logits.
    pub actor: MlpNet,
    /// obs → value.
    pub critic: MlpNet,
    /// Device the tensors live on.
    pub device: Device,
}

impl ActorCritic {
    /// Fresh networks: orthogonal init, policy head gain 0.01 (near-uniform initial policy),
    /// value head gain 1.
    pub fn new(layout: ObsLayout, hidden: &[usize], seed: u64, device: &Device) -> Result<Self> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut widths = vec![layout.dim()];
        widths.extend_from_slice(hidden);
        let mut aw = widths.clone();
        aw.push(layout.n_phases as usize);
        let mut cw = widths;
        cw.push(1);
        Ok(ActorCritic {
            layout,
            actor: MlpNet::new(&aw, 0.01, &mut rng, device)?,
            critic: MlpNet::new(&cw, 1.0, &mut rng, device)?,
            device: device.clone(),
        })
    }

    /// Networks holding `w`'s parameters.
    pub fn from_weights(w: &PolicyWeights, device: &Device) -> Result<Self> {
        Ok(ActorCritic {
            layout: w.obs_layout,
            actor: MlpNet::from_dense(&w.actor, device)?,
            critic: MlpNet::from_dense(&w.critic, device)?,
            device: device.clone(),
        })
    }

    /// Parameters as plain data, with the given normalisation.
    pub fn to_weights(&self, norm: ObsNormalization) -> Result<PolicyWeights> {
        Ok(PolicyWeights {
            obs_layout: self.layout,
            norm,
            actor: self.actor.to_dense()?,
            critic: self.critic.to_dense()?,
        })
    }

    /// All trainable variables, actor first.
    pub fn vars(&self) -> Vec<Var> {
        let mut v = self.actor.vars();
        v.extend(self.critic.vars());
        v
    }
}

/// `log softmax` over the allowed actions; `mask` is u8 `[batch, actions]`, 1 = allowed.
pub fn masked_log_softmax(logits: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let neg = Tensor::full(MASKED_LOGIT, logits.shape(), logits.device())?;
    let masked = mask.where_cond(logits, &neg)?;
    candle_nn::ops::log_softmax(&masked, D::Minus1)
}

/// Entropy per row from masked log-probabilities `[batch, actions]`.
pub fn entropy(log_probs: &Tensor) -> Result<Tensor> {
    (log_probs.exp()? * log_probs)?.sum(D::Minus1)?.neg()
}

/// `log π(a|s)` per row: gathers `actions` (u32 `[batch]`) from `[batch, actions]`.
pub fn gather_actions(log_probs: &Tensor, actions: &Tensor) -> Result<Tensor> {
    log_probs.gather(&actions.unsqueeze(1)?, 1)?.squeeze(1)
}

/// Adam with bias correction and no weight decay (candle's AdamW keeps its moments
/// private; a resumable training run must save and restore them).
#[derive(Debug)]
pub struct Adam {
    vars: Vec<Var>,
    /// First moments, one per var.
    pub m: Vec<Tensor>,
    /// Second moments, one per var.
    pub v: Vec<Tensor>,
    /// Steps taken.
    pub t: u64,
    /// β1, β2, ε.
    pub betas_eps: (f64, f64, f64),
}

impl Adam {
    /// Adam over `vars` with β = (0.9, 0.999) and the given ε (PPO: 1e-5).
    pub fn new(vars: Vec<Var>, eps: f64) -> Result<Self> {
        let m = vars.iter().map(|v| v.zeros_like()).collect::<Result<_>>()?;
        let v = vars.iter().map(|v| v.zeros_like()).collect::<Result<_>>()?;
        Ok(Adam {
            vars,
            m,
            v,
            t: 0,
            betas_eps: (0.9, 0.999, eps),
        })
    }

    /// One step at learning rate `lr`.
    pub fn step(&mut self, grads: &GradStore, lr: f64) -> Result<()> {
        self.t += 1;
        let (b1, b2, eps) = self.betas_eps;
        let bc1 = 1.0 - b1.powi(self.t as i32);
        let bc2 = 1.0 - b2.powi(self.t as i32);
        for (i, var) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            self.m[i] = (self.m[i].affine(b1, 0.0)? + g.affine(1.0 - b1, 0.0)?)?;
            self.v[i] = (self.v[i].affine(b2, 0.0)? + g.sqr()?.affine(1.0 - b2, 0.0)?)?;
            let denom = self.v[i].affine(1.0 / bc2, 0.0)?.sqrt()?.affine(1.0, eps)?;
            let update = (self.m[i].affine(lr / bc1, 0.0)? / denom)?;
            var.set(&(var.as_tensor() - update)?)?;
        }
        Ok(())
    }
}

/// Scales `grads` of `vars` so their global L2 norm is at most `max_norm`; returns the
/// norm before clipping. A norm that is not finite (a NaN or infinite loss or gradient) is
/// an error: clipping would not catch it (`NaN > max` is false), and the optimiser's step
/// on it would leave NaN in the weights and in Adam's moments for good, to be checkpointed
/// over the last good weights. Every learner steps after this, so none steps on one.
pub fn clip_grad_norm(grads: &mut GradStore, vars: &[Var], max_norm: f32) -> Result<f32> {
    // In f64: squares of f32 gradients above ~1.8e19 would overflow f32 to inf.
    let mut sq = 0.0f64;
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g
                .to_dtype(DType::F64)?
                .sqr()?
                .sum_all()?
                .to_scalar::<f64>()?;
        }
    }
    let norm = sq.sqrt() as f32;
    if !norm.is_finite() {
        return Err(candle_core::Error::Msg(format!(
            "the gradient norm is {norm} (a NaN or infinite loss or gradient); the weights \
             were not stepped"
        )));
    }
    if norm > max_norm {
        let coef = (max_norm / (norm + 1e-6)) as f64;
        for v in vars {
            if let Some(g) = grads.remove(v.as_tensor()) {
                grads.insert(v.as_tensor(), g.affine(coef, 0.0)?);
            }
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NaN or infinite gradient is refused before any optimiser sees it; a finite one is
    /// scaled to the bound.
    #[test]
    fn a_gradient_that_is_not_finite_is_an_error() {
        let dev = Device::Cpu;
        let var = Var::from_slice(&[1.0f32, 2.0], 2, &dev).unwrap();
        for (scale, ok) in [(3.0f64, true), (f64::NAN, false), (f64::INFINITY, false)] {
            let loss = var
                .as_tensor()
                .affine(scale, 0.0)
                .unwrap()
                .sum_all()
                .unwrap();
            let mut grads = loss.backward().unwrap();
            let got = clip_grad_norm(&mut grads, std::slice::from_ref(&var), 1.0);
            assert_eq!(got.is_ok(), ok, "{scale}: {got:?}");
            if ok {
                let g: Vec<f32> = grads.get(var.as_tensor()).unwrap().to_vec1().unwrap();
                let norm = g.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "{norm}");
            }
        }
    }

    #[test]
    fn orthogonal_rows_are_orthonormal() {
        let mut rng = StdRng::seed_from_u64(1);
        let w = orthogonal(4, 9, 1.0, &mut rng);
        for i in 0..4 {
            for j in 0..4 {
                let d: f32 = (0..9).map(|k| w[i * 9 + k] * w[j * 9 + k]).sum();
                assert!((d - if i == j { 1.0 } else { 0.0 }).abs() < 1e-5);
            }
        }
        let tall = orthogonal(9, 4, 2.0, &mut rng);
        for i in 0..4 {
            let d: f32 = (0..9).map(|k| tall[k * 4 + i] * tall[k * 4 + i]).sum();
            assert!((d - 4.0).abs() < 1e-4, "column norm² = gain²");
        }
    }

    #[test]
    fn masked_log_prob_and_entropy() {
        let dev = Device::Cpu;
        let logits = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 0.5, 0.5, 0.5], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1u8, 1, 0, 1, 1, 1], (2, 3), &dev).unwrap();
        let lp = masked_log_softmax(&logits, &mask).unwrap();
        let rows: Vec<Vec<f32>> = lp.to_vec2().unwrap();
        let z = (1f32.exp() + 2f32.exp()).ln();
        assert!((rows[0][0] - (1.0 - z)).abs() < 1e-6);
        assert!((rows[0][1] - (2.0 - z)).abs() < 1e-6);
        assert!(rows[0][2] < -1e8, "masked action has log-prob ~ -1e9");
        let h: Vec<f32> = entropy(&lp).unwrap().to_vec1().unwrap();
        let (p0, p1) = ((1.0 - z).exp(), (2.0 - z).exp());
        assert!(
            (h[0] - (-(p0 * p0.ln() + p1 * p1.ln()))).abs() < 1e-6,
            "masked adds nothing"
        );
        assert!((h[1] - 3f32.ln()).abs() < 1e-6);
        let a = Tensor::from_slice(&[1u32, 2], 2, &dev).unwrap();
        let g: Vec<f32> = gather_actions(&lp, &a).unwrap().to_vec1().unwrap();
        assert!((g[0] - (2.0 - z)).abs() < 1e-6);
        assert!((g[1] + 3f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn adam_moves_against_the_gradient_and_clip_bounds_norm() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&Tensor::from_slice(&[3.0f32, -4.0], 2, &dev).unwrap()).unwrap();
        let mut opt = Adam::new(vec![x.clone()], 1e-5).unwrap();
        let loss = x.as_tensor().sqr().unwrap().sum_all().unwrap();
        let mut grads = loss.backward().unwrap();
        let norm = clip_grad_norm(&mut grads, std::slice::from_ref(&x), 1.0).unwrap();
        assert!((norm - 10.0).abs() < 1e-4, "∇ = 2x = (6, -8)");
        let g: Vec<f32> = grads.get(x.as_tensor()).unwrap().to_vec1().unwrap();
        assert!(((g[0] * g[0] + g[1] * g[1]).sqrt() - 1.0).abs() < 1e-4);
        opt.step(&grads, 0.1).unwrap();
        let after: Vec<f32> = x.as_tensor().to_vec1().unwrap();
        // First Adam step moves each coordinate by ~lr against its gradient's sign.
        assert!(
            (after[0] - 2.9).abs() < 1e-3 && (after[1] + 3.9).abs() < 1e-3,
            "{after:?}"
        );
    }
}
