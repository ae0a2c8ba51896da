//! One policy for any junction: a lane–phase parameter-sharing actor-critic (FRAP /
//! MPLight style) whose parameters do not depend on the junction's lane count `L` or
//! phase count `P`, and which compiles, for one junction, into an *exactly* equivalent
//! per-signal tanh MLP ([`PolicyWeights`]), so that ONNX export, the runtime, fine-tuning
//! and the firmware blob consume it unchanged.
//!
//! For a signal with lane–phase incidence `inc[p][l]` (1 when incoming lane `l` carries a
//! movement that is green in phase `p`; see [`Incidence`]) and a (normalised) observation
//! in layout v1 (`2L + P + 3` floats):
//!
//! * lane features `x_l = [density_l, queue_l, served_l, in_change, min_green_served,
//!   time_frac]` with `served_l = Σ_p inc[p][l] · onehot_p` (1 when the target phase
//!   serves lane `l`);
//! * actor: `enc_l = tanh(W1 x_l + b1)` (H units), phase embedding
//!   `e_p = Σ_l ninc[p][l] · enc_l` (`ninc` = `inc` row-normalised: the mean over the
//!   phase's lanes), `z_p = tanh(W2 e_p + b2)`, `logit_p = w3 · z_p + b3`;
//! * critic: its own lane encoder, mean over all lanes, one tanh layer, a linear value.
//!
//! Compiled ([`specialize`]): layer 1 is a dense `[L·H, D]` layer whose unit `(l, h)` reads
//! `obs[l]`, `obs[L+l]`, `Σ_p inc[p][l] · obs[2L+p]` and the three globals; layer 2 folds
//! the pooling into a dense `[P·H2, L·H]`; layer 3 is block-diagonal `[P, P·H2]`. The
//! critic compiles likewise, with the same widths because the exported format shares the
//! actor's hidden widths with the critic: `[L·H, D]`, its tanh layer repeated per phase
//! `[P·H2, L·H]`, and a head averaging the copies `[1, P·H2]`. Normalisation is shared per
//! feature type ([`LaneNormalization`]: one mean/std for all densities, one for all
//! queues, identity for the 0/1 and fraction features), so it compiles into
//! [`ObsNormalization`]'s per-feature vectors.

use candle_core::{Device, Result as CResult, Tensor, Var, D};
use greenwave_core::mlp::DenseLayer;
use greenwave_core::ObsLayout;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::activation::Tanh;
use crate::lane_pool::{self, LanePool};
use crate::nets::MlpNet;
use crate::normalizer::RunningObsStats;
use crate::ppo::{PolicyModel, PpoBatch};
use crate::weights::{InputMajorLayers, ObsNormalization, PolicyWeights};

/// Features each lane's encoder reads.
pub const LANE_FEATURES: usize = 6;

/// Why a shared policy could not be built or compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharedError {
    /// An incidence needs at least one phase and one lane.
    #[error("an incidence needs at least one phase and one lane (got {phases} × {lanes})")]
    Empty {
        /// Phases given.
        phases: usize,
        /// Lanes given.
        lanes: usize,
    },
    /// Phase rows of different lengths.
    #[error("phase {phase} lists {got} lanes, phase 0 lists {expected}")]
    Ragged {
        /// The phase.
        phase: usize,
        /// Lanes in phase 0's row.
        expected: usize,
        /// Lanes in this row.
        got: usize,
    },
    /// More lanes or phases than an observation layout can name.
    #[error("{phases} phases × {lanes} lanes do not fit an observation layout")]
    TooLarge {
        /// Phases.
        phases: usize,
        /// Lanes.
        lanes: usize,
    },
    /// Shared parameters of the wrong shape.
    #[error("shared network: {0}")]
    Shape(String),
}

/// A signal's lane–phase incidence: `green(p, l)` when incoming lane `l` (observation
/// order) carries a movement that is green in phase `p`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Incidence {
    n_phases: usize,
    n_lanes: usize,
    /// Row-major `[phase][lane]`.
    green: Vec<bool>,
}

impl Incidence {
    /// From one row per phase, each with one entry per incoming lane.
    pub fn new(rows: &[Vec<bool>]) -> Result<Self, SharedError> {
        let lanes = rows.first().map_or(0, Vec::len);
        if rows.is_empty() || lanes == 0 {
            return Err(SharedError::Empty {
                phases: rows.len(),
                lanes,
            });
        }
        if rows.len() > u8::MAX as usize || lanes > u16::MAX as usize {
            return Err(SharedError::TooLarge {
                phases: rows.len(),
                lanes,
            });
        }
        if let Some((phase, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != lanes) {
            return Err(SharedError::Ragged {
                phase,
                expected: lanes,
                got: r.len(),
            });
        }
        Ok(Incidence {
            n_phases: rows.len(),
            n_lanes: lanes,
            green: rows.concat(),
        })
    }

    /// The observation layout of a signal with this incidence.
    pub fn layout(&self) -> ObsLayout {
        ObsLayout {
            n_lanes: self.n_lanes as u16,
            n_phases: self.n_phases as u8,
        }
    }

    /// Phases `P`.
    pub fn n_phases(&self) -> usize {
        self.n_phases
    }

    /// Lanes `L`.
    pub fn n_lanes(&self) -> usize {
        self.n_lanes
    }

    /// Whether phase `p` serves lane `l`.
    pub fn green(&self, p: usize, l: usize) -> bool {
        self.green[p * self.n_lanes + l]
    }

    /// `inc` as 0/1 floats, row-major `[P][L]`.
    pub fn matrix(&self) -> Vec<f32> {
        self.green.iter().map(|&g| g as u8 as f32).collect()
    }

    /// `inc` row-normalised (each phase's row sums to 1; a phase serving no lane is all
    /// zero), row-major `[P][L]`.
    pub fn row_normalised(&self) -> Vec<f32> {
        let mut m = self.matrix();
        for row in m.chunks_mut(self.n_lanes) {
            let n: f32 = row.iter().sum();
            if n > 0.0 {
                row.iter_mut().for_each(|x| *x /= n);
            }
        }
        m
    }
}

/// Normalisation per feature type: one mean and 1/std for every lane density, one for
/// every lane queue; the phase one-hot, flags and time fraction pass unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneNormalization {
    /// Mean and 1/std of lane densities.
    pub density: (f32, f32),
    /// Mean and 1/std of lane queues.
    pub queue: (f32, f32),
    /// Normalised values are clipped to ±this.
    pub clip: f32,
}

impl LaneNormalization {
    /// The identity with the given clip.
    pub fn identity(clip: f32) -> Self {
        LaneNormalization {
            density: (0.0, 1.0),
            queue: (0.0, 1.0),
            clip,
        }
    }

    /// From running statistics over `[density, queue]` pairs (see [`lane_pairs`]).
    pub fn from_stats(stats: &RunningObsStats, clip: f32) -> Self {
        let n = stats.normalization(clip);
        LaneNormalization {
            density: (n.mean[0], n.inv_std[0]),
            queue: (n.mean[1], n.inv_std[1]),
            clip,
        }
    }

    /// The per-feature normalisation of one layout.
    pub fn for_layout(&self, layout: ObsLayout) -> ObsNormalization {
        let (l, rest) = (layout.n_lanes as usize, layout.n_phases as usize + 3);
        let mut n = ObsNormalization::identity(layout.dim(), self.clip);
        n.mean[..l].fill(self.density.0);
        n.inv_std[..l].fill(self.density.1);
        n.mean[l..2 * l].fill(self.queue.0);
        n.inv_std[l..2 * l].fill(self.queue.1);
        debug_assert_eq!(n.mean.len(), 2 * l + rest);
        n
    }
}

/// The `[density, queue]` pair of every lane of raw observations (`rows × layout.dim()`),
/// flattened: what [`RunningObsStats`] of dimension 2 accumulates for a shared policy.
pub fn lane_pairs(raw_obs: &[f32], layout: ObsLayout) -> Vec<f32> {
    let (d, l) = (layout.dim(), layout.n_lanes as usize);
    raw_obs
        .chunks_exact(d)
        .flat_map(|o| (0..l).flat_map(move |k| [o[k], o[l + k]]))
        .collect()
}

/// The shared parameters as plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedWeights {
    /// Normalisation.
    pub norm: LaneNormalization,
    /// Actor: lane encoder `[H, 6]`, phase layer `[H2, H]`, head `[1, H2]`.
    pub actor: Vec<DenseLayer>,
    /// Critic: lane encoder `[H, 6]`, tanh layer `[H2, H]`, head `[1, H2]` (the same
    /// widths as the actor's).
    pub critic: Vec<DenseLayer>,
}

fn check_shapes(layers: &[DenseLayer], name: &str) -> Result<(), SharedError> {
    let ok = layers.len() == 3
        && layers[0].inputs == LANE_FEATURES
        && layers[1].inputs == layers[0].outputs
        && layers[2].inputs == layers[1].outputs
        && layers[2].outputs == 1
        && layers
            .iter()
            .all(|l| l.weights.len() == l.inputs * l.outputs && l.bias.len() == l.outputs);
    if ok {
        Ok(())
    } else {
        Err(SharedError::Shape(format!(
            "the {name} needs layers [H, {LANE_FEATURES}], [H2, H], [1, H2]"
        )))
    }
}

/// The lane features `[L][6]` of a normalised observation.
fn lane_features(inc: &Incidence, x: &[f32]) -> Vec<[f32; LANE_FEATURES]> {
    let (l, p) = (inc.n_lanes, inc.n_phases);
    let g = &x[2 * l + p..2 * l + p + 3];
    (0..l)
        .map(|k| {
            let served: f32 = (0..p)
                .filter(|&q| inc.green(q, k))
                .map(|q| x[2 * l + q])
                .sum();
            [x[k], x[l + k], served, g[0], g[1], g[2]]
        })
        .collect()
}

/// `tanh(layer 0 (f))` of every lane's features `f`, one row of `h` after another.
fn encode(layer: &InputMajorLayers, h: usize, feats: &[[f32; LANE_FEATURES]]) -> Vec<f32> {
    let mut enc = vec![0.0f32; feats.len() * h];
    // A zero-width encoder has no rows: `max(1)` only keeps `chunks_exact` legal.
    for (f, row) in feats.iter().zip(enc.chunks_exact_mut(h.max(1))) {
        layer.first_affine(f, row);
        row.iter_mut().for_each(|z| *z = z.tanh());
    }
    enc
}

impl SharedWeights {
    /// Plain-Rust forward pass of one raw observation of a signal with incidence `inc`:
    /// `(logits, value)`, computed the shared way (the reference [`specialize`] matches).
    pub fn forward(&self, inc: &Incidence, obs: &[f32]) -> (Vec<f32>, f32) {
        let mut x = vec![0.0; obs.len()];
        self.norm.for_layout(inc.layout()).apply(obs, &mut x);
        self.forward_normalised(inc, &x)
    }

    /// [`SharedWeights::forward`] of an already normalised observation `x`. For many
    /// calls (rollouts), prepare a [`SharedForward`] once instead.
    pub fn forward_normalised(&self, inc: &Incidence, x: &[f32]) -> (Vec<f32>, f32) {
        SharedForward::new(self).forward_normalised(inc, &inc.row_normalised(), x)
    }
}

/// The shared network's plain-Rust forward pass, prepared for many calls: its layers
/// input-major ([`InputMajorLayers`]: the same results as `dense_forward`, bit for bit,
/// in vectorised loops). What rollouts run: far fewer operations than the compiled MLP
/// on a large junction.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedForward {
    actor_lane: InputMajorLayers,
    actor_phase: InputMajorLayers,
    critic_lane: InputMajorLayers,
    critic_head: InputMajorLayers,
}

impl SharedForward {
    /// The forward pass of `w`.
    pub fn new(w: &SharedWeights) -> Self {
        let split = |layers: &[DenseLayer]| {
            let k = layers.len().min(1);
            (
                InputMajorLayers::new(&layers[..k]),
                InputMajorLayers::new(&layers[k..]),
            )
        };
        let (actor_lane, actor_phase) = split(&w.actor);
        let (critic_lane, critic_head) = split(&w.critic);
        SharedForward {
            actor_lane,
            actor_phase,
            critic_lane,
            critic_head,
        }
    }

    /// `(logits, value)` of the normalised observation `x` of a signal with incidence
    /// `inc`, whose phase pooling is `pooling` (`inc.row_normalised()`, kept by the
    /// caller across calls).
    pub fn forward_normalised(
        &self,
        inc: &Incidence,
        pooling: &[f32],
        x: &[f32],
    ) -> (Vec<f32>, f32) {
        let feats = lane_features(inc, x);
        let (h, hv) = (
            self.actor_lane.first_outputs(),
            self.critic_lane.first_outputs(),
        );
        let enc = encode(&self.actor_lane, h, &feats);
        let logits = (0..inc.n_phases)
            .map(|p| {
                let mut e = vec![0.0f32; h];
                for (k, enc_k) in enc.chunks_exact(h.max(1)).enumerate() {
                    let w = pooling[p * inc.n_lanes + k];
                    e.iter_mut().zip(enc_k).for_each(|(a, b)| *a += w * b);
                }
                self.actor_phase.forward(&e)[0]
            })
            .collect();
        let venc = encode(&self.critic_lane, hv, &feats);
        let mut mean = vec![0.0f32; hv];
        for v in venc.chunks_exact(hv.max(1)) {
            mean.iter_mut()
                .zip(v)
                .for_each(|(a, b)| *a += b / inc.n_lanes as f32);
        }
        let value = self.critic_head.forward(&mean)[0];
        (logits, value)
    }
}

/// Reference passes, kept to hold faster ones to the numbers of the passes they
/// replaced; nothing in training, export or control calls them.
pub mod reference {
    use super::*;

    /// The shared forward pass as it was written before [`SharedForward`]: each lane and
    /// each phase through `dense_forward`, row-major. `SharedForward`'s test holds it to
    /// these numbers bit for bit (runs made before it must run the same now), and the
    /// `forward_bench` example times the two.
    pub fn row_major_forward(w: &SharedWeights, inc: &Incidence, x: &[f32]) -> (Vec<f32>, f32) {
        use crate::weights::dense_forward;
        let feats = lane_features(inc, x);
        let encode = |layer: &DenseLayer| -> Vec<Vec<f32>> {
            feats
                .iter()
                .map(|f| {
                    let z = dense_forward(std::slice::from_ref(layer), f);
                    z.iter().map(|z| z.tanh()).collect()
                })
                .collect()
        };
        let (enc, ninc, h) = (
            encode(&w.actor[0]),
            inc.row_normalised(),
            w.actor[0].outputs,
        );
        let logits = (0..inc.n_phases)
            .map(|p| {
                let mut e = vec![0.0f32; h];
                for (k, enc_k) in enc.iter().enumerate() {
                    let wt = ninc[p * inc.n_lanes + k];
                    e.iter_mut().zip(enc_k).for_each(|(a, b)| *a += wt * b);
                }
                dense_forward(&w.actor[1..], &e)[0]
            })
            .collect();
        let mut mean = vec![0.0f32; w.critic[0].outputs];
        for v in &encode(&w.critic[0]) {
            mean.iter_mut()
                .zip(v)
                .for_each(|(a, b)| *a += b / inc.n_lanes as f32);
        }
        (logits, dense_forward(&w.critic[1..], &mean)[0])
    }
}

/// Layer 1 of a compiled network: unit `(l, h)` applies the lane encoder to lane `l`'s
/// features read straight from the observation.
fn compile_lane_encoder(enc: &DenseLayer, inc: &Incidence) -> DenseLayer {
    let (l, p, h) = (inc.n_lanes, inc.n_phases, enc.outputs);
    let d = 2 * l + p + 3;
    let mut weights = vec![0.0f32; l * h * d];
    for k in 0..l {
        for j in 0..h {
            let w = &enc.weights[j * LANE_FEATURES..(j + 1) * LANE_FEATURES];
            let row = &mut weights[(k * h + j) * d..(k * h + j + 1) * d];
            row[k] = w[0];
            row[l + k] = w[1];
            for q in (0..p).filter(|&q| inc.green(q, k)) {
                row[2 * l + q] = w[2];
            }
            row[2 * l + p..].copy_from_slice(&w[3..]);
        }
    }
    DenseLayer {
        inputs: d,
        outputs: l * h,
        weights,
        bias: (0..l).flat_map(|_| enc.bias.iter().copied()).collect(),
    }
}

/// A layer applied to `groups` pooled lane sums: output unit `(g, j)` reads lane unit
/// `(l, h)` with weight `pool[g][l] · layer[j][h]`.
fn compile_pooled(layer: &DenseLayer, pool: &[f32], groups: usize, lanes: usize) -> DenseLayer {
    let (h, h2) = (layer.inputs, layer.outputs);
    let cols = lanes * h;
    let mut weights = vec![0.0f32; groups * h2 * cols];
    for g in 0..groups {
        for j in 0..h2 {
            let w = &layer.weights[j * h..(j + 1) * h];
            let row = &mut weights[(g * h2 + j) * cols..(g * h2 + j + 1) * cols];
            for k in 0..lanes {
                let a = pool[g * lanes + k];
                row[k * h..(k + 1) * h]
                    .iter_mut()
                    .zip(w)
                    .for_each(|(o, x)| *o = a * x);
            }
        }
    }
    DenseLayer {
        inputs: cols,
        outputs: groups * h2,
        weights,
        bias: (0..groups)
            .flat_map(|_| layer.bias.iter().copied())
            .collect(),
    }
}

/// The head applied to each of `groups` blocks: block-diagonal `[groups, groups · H2]`.
fn compile_block_head(head: &DenseLayer, groups: usize) -> DenseLayer {
    let h2 = head.inputs;
    let mut weights = vec![0.0f32; groups * groups * h2];
    for g in 0..groups {
        weights[g * groups * h2 + g * h2..g * groups * h2 + (g + 1) * h2]
            .copy_from_slice(&head.weights);
    }
    DenseLayer {
        inputs: groups * h2,
        outputs: groups,
        weights,
        bias: vec![head.bias[0]; groups],
    }
}

/// The head applied to the mean of `copies` identical blocks: `[1, copies · H2]`.
fn compile_mean_head(head: &DenseLayer, copies: usize) -> DenseLayer {
    let scale = 1.0 / copies as f32;
    DenseLayer {
        inputs: copies * head.inputs,
        outputs: 1,
        weights: (0..copies)
            .flat_map(|_| head.weights.iter().map(move |w| w * scale))
            .collect(),
        bias: head.bias.clone(),
    }
}

/// Compiles the shared network for one signal into the per-signal tanh MLP it equals.
pub fn specialize(shared: &SharedWeights, inc: &Incidence) -> Result<PolicyWeights, SharedError> {
    check_shapes(&shared.actor, "actor")?;
    check_shapes(&shared.critic, "critic")?;
    if shared.critic[0].outputs != shared.actor[0].outputs
        || shared.critic[1].outputs != shared.actor[1].outputs
    {
        return Err(SharedError::Shape(
            "actor and critic need the same hidden widths (the exported format shares them)".into(),
        ));
    }
    let (l, p) = (inc.n_lanes, inc.n_phases);
    let layout = inc.layout();
    let actor = vec![
        compile_lane_encoder(&shared.actor[0], inc),
        compile_pooled(&shared.actor[1], &inc.row_normalised(), p, l),
        compile_block_head(&shared.actor[2], p),
    ];
    // The exported format gives actor and critic the same hidden widths, so the critic's
    // tanh layer is repeated once per phase and its head averages the copies.
    let critic = vec![
        compile_lane_encoder(&shared.critic[0], inc),
        compile_pooled(&shared.critic[1], &vec![1.0 / l as f32; p * l], p, l),
        compile_mean_head(&shared.critic[2], p),
    ];
    Ok(PolicyWeights {
        obs_layout: layout,
        norm: shared.norm.for_layout(layout),
        actor,
        critic,
    })
}

/// One signal layout's incidence as tensors, for the candle forward pass.
#[derive(Clone, Debug)]
pub struct IncidenceTensors {
    /// The layout.
    pub layout: ObsLayout,
    /// `inc`, `[P, L]`.
    pub inc: Tensor,
    /// `inc` row-normalised, `[P, L]`.
    pub ninc: Tensor,
    /// The incidence itself (the packed pass builds its inputs from it).
    pub incidence: Incidence,
    /// `inc` row-normalised, row-major `[P][L]`, as plain data.
    ninc_rows: Vec<f32>,
}

impl IncidenceTensors {
    /// Tensors of `inc` on `dev`.
    pub fn new(inc: &Incidence, dev: &Device) -> CResult<Self> {
        let shape = (inc.n_phases, inc.n_lanes);
        let ninc_rows = inc.row_normalised();
        Ok(IncidenceTensors {
            layout: inc.layout(),
            inc: Tensor::from_vec(inc.matrix(), shape, dev)?,
            ninc: Tensor::from_vec(ninc_rows.clone(), shape, dev)?,
            incidence: inc.clone(),
            ninc_rows,
        })
    }
}

/// A weighted sum of lane rows into output rows: output row `to[j]` gains
/// `weight[j] · lane row from[j]`, for every entry `j`.
#[derive(Default)]
struct Pooling {
    from: Vec<u32>,
    to: Vec<u32>,
    weight: Vec<f32>,
}

impl Pooling {
    fn push(&mut self, from: usize, to: usize, weight: f32) {
        self.from.push(from as u32);
        self.to.push(to as u32);
        self.weight.push(weight);
    }

    /// `[rows, H]`: the pooling of `tanh(layer 0 of net (lanes [n, 6]))`, fused into one
    /// op on the CPU ([`LanePool`]), composed of candle's ops elsewhere.
    fn encode(self, net: &MlpNet, lanes: &Tensor, rows: usize) -> CResult<Tensor> {
        if lane_pool::fusable(lanes) {
            let (w, b) = net.layer_params(0)?;
            let op = LanePool {
                from: self.from,
                to: self.to,
                weight: self.weight,
                rows,
                enc: Default::default(),
            };
            return op.encode(lanes, w, b);
        }
        self.apply(&net.layer(0, lanes)?.apply(&Tanh)?, rows)
    }

    /// `[rows, H]`: the pooling of `lanes [n, H]` (gather, scale, scatter-add: candle
    /// differentiates all three).
    fn apply(self, lanes: &Tensor, rows: usize) -> CResult<Tensor> {
        let (dev, n) = (lanes.device(), self.from.len());
        let from = Tensor::from_vec(self.from, n, dev)?;
        let to = Tensor::from_vec(self.to, n, dev)?;
        let w = Tensor::from_vec(self.weight, (n, 1), dev)?;
        let picked = lanes.index_select(&from, 0)?.broadcast_mul(&w)?;
        Tensor::zeros((rows, lanes.dim(1)?), lanes.dtype(), dev)?.index_add(&to, &picked, 0)
    }
}

/// The inputs of [`SharedActorCritic::forward_packed`]: every decision's lanes one after
/// another, and the two poolings over them.
struct PackedInputs {
    /// Lane features `[Σ L, 6]`.
    feats: Vec<f32>,
    /// The actor's phase pooling into row `i · P + p` (decision `i`, phase `p`): the
    /// row-normalised incidence.
    phases: Pooling,
    /// The critic's lane mean into row `i`: `1/L` on each of the decision's lanes.
    mean: Pooling,
}

impl PackedInputs {
    fn new(groups: &[IncidenceTensors], rows: &[(usize, &[f32])], phases: usize) -> CResult<Self> {
        let mut p = PackedInputs {
            feats: Vec::new(),
            phases: Pooling::default(),
            mean: Pooling::default(),
        };
        for (i, &(g, x)) in rows.iter().enumerate() {
            let Some(group) = groups.get(g) else {
                candle_core::bail!("group {g} of {}", groups.len())
            };
            let inc = &group.incidence;
            let (l, np) = (inc.n_lanes, inc.n_phases);
            if x.len() != inc.layout().dim() {
                candle_core::bail!(
                    "an observation of {} floats for layout {:?}",
                    x.len(),
                    inc.layout()
                )
            }
            let first = p.feats.len() / LANE_FEATURES;
            p.feats.extend(lane_features(inc, x).iter().flatten());
            for q in 0..np {
                for k in 0..l {
                    let w = group.ninc_rows[q * l + k];
                    if w != 0.0 {
                        p.phases.push(first + k, i * phases + q, w);
                    }
                }
            }
            for k in 0..l {
                p.mean.push(first + k, i, 1.0 / l as f32);
            }
        }
        Ok(p)
    }
}

/// The shared actor-critic as candle variables (trained by PPO).
#[derive(Clone, Debug)]
pub struct SharedActorCritic {
    /// Actor layers `6 → H → H2 → 1` (applied per lane, per phase, per phase).
    pub actor: MlpNet,
    /// Critic layers `6 → Hv → H2v → 1` (per lane, after the lane mean, after that).
    pub critic: MlpNet,
    /// Device the tensors live on.
    pub device: Device,
}

impl SharedActorCritic {
    /// Fresh networks with hidden widths `[H, H2]` (both actor and critic): orthogonal
    /// init, policy head gain 0.01, value head gain 1.
    pub fn new(hidden: &[usize], seed: u64, device: &Device) -> Result<Self, SharedError> {
        let [h, h2] = hidden else {
            return Err(SharedError::Shape(format!(
                "hidden widths must be two (lane encoder, phase layer), got {hidden:?}"
            )));
        };
        let mut rng = StdRng::seed_from_u64(seed);
        let widths = [LANE_FEATURES, *h, *h2, 1];
        let err = |e: candle_core::Error| SharedError::Shape(e.to_string());
        Ok(SharedActorCritic {
            actor: MlpNet::new(&widths, 0.01, &mut rng, device).map_err(err)?,
            critic: MlpNet::new(&widths, 1.0, &mut rng, device).map_err(err)?,
            device: device.clone(),
        })
    }

    /// Parameters as plain data, with the given normalisation.
    pub fn to_weights(&self, norm: LaneNormalization) -> CResult<SharedWeights> {
        Ok(SharedWeights {
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

    /// Lane features `[B·L, 6]` of normalised observations `[B, D]`.
    fn lane_features(g: &IncidenceTensors, obs: &Tensor) -> CResult<Tensor> {
        let (l, p) = (g.layout.n_lanes as usize, g.layout.n_phases as usize);
        let b = obs.dim(0)?;
        let density = obs.narrow(1, 0, l)?;
        let queue = obs.narrow(1, l, l)?;
        let served = obs.narrow(1, 2 * l, p)?.matmul(&g.inc)?;
        let globals = obs
            .narrow(1, 2 * l + p, 3)?
            .unsqueeze(1)?
            .broadcast_as((b, l, 3))?;
        let per_lane = Tensor::stack(&[density, queue, served], 2)?;
        Tensor::cat(&[per_lane, globals.contiguous()?], 2)?.reshape((b * l, LANE_FEATURES))
    }

    /// `(logits [B, P], values [B])` of normalised observations `[B, D]` of a signal
    /// layout with incidence `g`.
    pub fn forward(&self, g: &IncidenceTensors, obs: &Tensor) -> CResult<(Tensor, Tensor)> {
        let (l, p) = (g.layout.n_lanes as usize, g.layout.n_phases as usize);
        let b = obs.dim(0)?;
        let x = Self::lane_features(g, obs)?;
        let enc = self.actor.layer(0, &x)?.apply(&Tanh)?.reshape((b, l, ()))?;
        let pooled = g.ninc.broadcast_matmul(&enc)?.reshape((b * p, ()))?;
        let z = self.actor.layer(1, &pooled)?.apply(&Tanh)?;
        let logits = self.actor.layer(2, &z)?.reshape((b, p))?;
        let venc = self
            .critic
            .layer(0, &x)?
            .apply(&Tanh)?
            .reshape((b, l, ()))?;
        let vz = self.critic.layer(1, &venc.mean(1)?)?.apply(&Tanh)?;
        let values = self.critic.layer(2, &vz)?.squeeze(D::Minus1)?;
        Ok((logits, values))
    }
}

impl SharedActorCritic {
    /// `(logits [m, P], values [m])` of normalised observations of junctions of several
    /// layouts at once (`rows[i]` = `(group, observation)`), where `P` is the most phases
    /// of any of `groups` (the logits of a junction with fewer are padded with its head's
    /// bias, for the action mask to hide). Every decision's lanes are encoded once, packed
    /// one after another; the phase pooling and the critic's lane mean gather from them.
    /// Equals [`SharedActorCritic::forward`] group by group (up to float rounding), in one
    /// pass whatever the number of layouts.
    pub fn forward_packed(
        &self,
        groups: &[IncidenceTensors],
        rows: &[(usize, &[f32])],
    ) -> CResult<(Tensor, Tensor)> {
        let m = rows.len();
        let phases = groups
            .iter()
            .map(|g| g.incidence.n_phases)
            .max()
            .unwrap_or(0);
        let p = PackedInputs::new(groups, rows, phases)?;
        let n = p.feats.len() / LANE_FEATURES;
        let x = Tensor::from_vec(p.feats, (n, LANE_FEATURES), &self.device)?;
        let pooled = p.phases.encode(&self.actor, &x, m * phases)?;
        let z = self.actor.layer(1, &pooled)?.apply(&Tanh)?;
        let logits = self.actor.layer(2, &z)?.reshape((m, phases))?;
        let vmean = p.mean.encode(&self.critic, &x, m)?;
        let vz = self.critic.layer(1, &vmean)?.apply(&Tanh)?;
        let values = self.critic.layer(2, &vz)?.squeeze(D::Minus1)?;
        Ok((logits, values))
    }
}

/// The shared network over the junction layouts of a training batch: group `g` of a
/// [`crate::ppo::update_groups`] call holds the decisions of signals with incidence
/// `groups[g]`.
pub struct SharedGroups<'a> {
    /// The network.
    pub net: &'a SharedActorCritic,
    /// One incidence per group.
    pub groups: Vec<IncidenceTensors>,
}

impl PolicyModel for SharedGroups<'_> {
    fn vars(&self) -> Vec<Var> {
        self.net.vars()
    }

    fn device(&self) -> &Device {
        &self.net.device
    }

    fn forward_group(&self, group: usize, obs: &Tensor) -> CResult<(Tensor, Tensor)> {
        let Some(g) = self.groups.get(group) else {
            candle_core::bail!("group {group} of {}", self.groups.len())
        };
        self.net.forward(g, obs)
    }

    fn forward_rows(
        &self,
        batches: &[PpoBatch],
        rows: &[(usize, usize)],
    ) -> Option<CResult<(Tensor, Tensor)>> {
        let obs: Option<Vec<(usize, &[f32])>> = rows
            .iter()
            .map(|&(g, i)| {
                let b = batches.get(g)?;
                Some((g, b.obs.get(i * b.obs_dim..(i + 1) * b.obs_dim)?))
            })
            .collect();
        Some(match obs {
            Some(obs) => self.net.forward_packed(&self.groups, &obs),
            None => Err(candle_core::Error::Msg(
                "a minibatch row outside its group's batch".into(),
            )),
        })
    }
}

#[cfg(test)]
mod tests;
