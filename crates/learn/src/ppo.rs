//! On-policy PPO: the clipped-surrogate update over a collected batch.
//!
//! Follows the well-known implementation details: per-minibatch advantage normalisation,
//! clipped surrogate `max(−Â·r, −Â·clip(r, 1−ε, 1+ε))`, optional value clipping, entropy
//! bonus, global gradient-norm clipping, Adam (ε 1e-5), approx-KL `E[(r − 1) − log r]` and
//! clip fraction per minibatch, optional early stop when approx-KL exceeds a target.

use candle_core::{Device, Result, Tensor, Var};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::nets::{clip_grad_norm, entropy, gather_actions, masked_log_softmax, ActorCritic, Adam};

/// PPO hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoConfig {
    /// Discount γ.
    pub gamma: f32,
    /// GAE λ.
    pub gae_lambda: f32,
    /// Clip ε of the surrogate.
    pub clip_eps: f32,
    /// Epochs over each batch.
    pub epochs: usize,
    /// Minibatch size.
    pub minibatch: usize,
    /// Initial learning rate (annealed linearly to 0 by the trainer when `anneal_lr`).
    pub learning_rate: f64,
    /// Anneal the learning rate linearly to 0 over training.
    pub anneal_lr: bool,
    /// Entropy bonus coefficient (annealed linearly to 0 by the trainer when
    /// `anneal_ent_coef`).
    pub ent_coef: f32,
    /// Anneal the entropy bonus linearly to 0 over training, as the learning rate: the
    /// policy explores early and ends near the deterministic one that `eval`, the
    /// controller and the firmware run (its argmax). Off for runs recorded before it.
    #[serde(default)]
    pub anneal_ent_coef: bool,
    /// Value loss coefficient.
    pub vf_coef: f32,
    /// Clip the value update to ±clip_eps around the old value.
    pub clip_value: bool,
    /// Global gradient-norm limit.
    pub max_grad_norm: f32,
    /// Stop the epochs early once approx-KL exceeds this.
    pub target_kl: Option<f32>,
    /// Normalise advantages per minibatch.
    pub norm_adv: bool,
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            gamma: 0.99,
            gae_lambda: 0.95,
            clip_eps: 0.2,
            epochs: 4,
            minibatch: 256,
            learning_rate: 3e-4,
            anneal_lr: true,
            ent_coef: 0.01,
            anneal_ent_coef: false,
            vf_coef: 0.5,
            clip_value: false,
            max_grad_norm: 0.5,
            target_kl: None,
            norm_adv: true,
        }
    }
}

impl PpoConfig {
    /// The configuration for an iteration with `frac_left` of the run's iterations left
    /// (1 at the start, towards 0 at the end): the learning rate and the entropy bonus
    /// each annealed linearly when asked, everything else as configured.
    pub fn scheduled(&self, frac_left: f64) -> PpoConfig {
        let frac_left = frac_left.clamp(0.0, 1.0);
        let mut cfg = self.clone();
        if self.anneal_lr {
            cfg.learning_rate *= frac_left;
        }
        if self.anneal_ent_coef {
            cfg.ent_coef *= frac_left as f32;
        }
        cfg
    }
}

/// A batch of decisions, flattened over time, environments and signals.
#[derive(Clone, Debug, Default)]
pub struct PpoBatch {
    /// Observation width.
    pub obs_dim: usize,
    /// Action count.
    pub n_actions: usize,
    /// Normalised observations, `len × obs_dim`.
    pub obs: Vec<f32>,
    /// Action masks, `len × n_actions`, 1 = allowed.
    pub masks: Vec<u8>,
    /// Actions taken.
    pub actions: Vec<u32>,
    /// `log π_old(a|s)` at collection.
    pub old_log_probs: Vec<f32>,
    /// `V_old(s)` at collection.
    pub old_values: Vec<f32>,
    /// GAE advantages.
    pub advantages: Vec<f32>,
    /// Value targets (advantages + old values).
    pub returns: Vec<f32>,
}

impl PpoBatch {
    /// Number of decisions.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// Statistics of one update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// Mean clipped-surrogate loss.
    pub policy_loss: f32,
    /// Mean value loss.
    pub value_loss: f32,
    /// Mean entropy.
    pub entropy: f32,
    /// Approx-KL of the last minibatch.
    pub approx_kl: f32,
    /// Mean fraction of samples whose ratio was clipped.
    pub clip_frac: f32,
    /// Mean gradient norm before clipping.
    pub grad_norm: f32,
    /// Epochs completed (fewer than configured after a KL early stop).
    pub epochs: usize,
    /// Minibatch steps taken.
    pub minibatches: usize,
    /// Largest |ratio − 1| on the very first minibatch (0 when the policy is unchanged).
    pub first_ratio_dev: f32,
}

fn rows<T: Copy>(data: &[T], width: usize, idx: &[usize]) -> Vec<T> {
    idx.iter()
        .flat_map(|&i| data[i * width..(i + 1) * width].iter().copied())
        .collect()
}

/// A policy the PPO update can train: logits and values per *group* of decisions that
/// share one observation layout (one group for a per-signal MLP; one per junction layout
/// for the shared lane–phase network).
pub trait PolicyModel {
    /// The trainable variables (actor and critic).
    fn vars(&self) -> Vec<Var>;
    /// Device of the variables.
    fn device(&self) -> &Device;
    /// `(logits [m, n_actions], values [m])` of normalised observations `[m, obs_dim]` of
    /// group `group`.
    fn forward_group(&self, group: usize, obs: &Tensor) -> Result<(Tensor, Tensor)>;
    /// `(logits [m, A], values [m])` of the decisions `rows` — `(group, row)` pairs into
    /// `batches`, whose observations are normalised — in one pass and in `rows`' order,
    /// where `A` is the most actions of any batch (a group with fewer has its logits
    /// padded; its mask hides the padding). `None` when the model can only go group by
    /// group ([`PolicyModel::forward_group`]); the update then does that, with the same
    /// result (up to float rounding) and one pass per group in each minibatch.
    fn forward_rows(
        &self,
        _batches: &[PpoBatch],
        _rows: &[(usize, usize)],
    ) -> Option<Result<(Tensor, Tensor)>> {
        None
    }
}

impl PolicyModel for ActorCritic {
    fn vars(&self) -> Vec<Var> {
        ActorCritic::vars(self)
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn forward_group(&self, _group: usize, obs: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((
            self.actor.forward(obs)?,
            self.critic.forward(obs)?.squeeze(1)?,
        ))
    }
}

/// Runs `cfg.epochs` epochs of shuffled minibatch updates at learning rate `lr`.
pub fn update(
    net: &ActorCritic,
    opt: &mut Adam,
    batch: &PpoBatch,
    cfg: &PpoConfig,
    lr: f64,
    rng: &mut StdRng,
) -> Result<UpdateStats> {
    update_groups(net, opt, std::slice::from_ref(batch), cfg, lr, rng)
}

/// One group's per-sample loss terms and diagnostics inputs, over its rows of a minibatch.
struct GroupTerms {
    pg: Tensor,
    v_loss: Tensor,
    ent: Tensor,
    ratio: Tensor,
    log_ratio: Tensor,
}

/// One minibatch's per-sample loss terms (in group order) and diagnostics inputs.
#[derive(Default)]
struct MinibatchTerms {
    pg: Vec<Tensor>,
    v_loss: Vec<Tensor>,
    ent: Vec<Tensor>,
    ratio: Vec<Tensor>,
    log_ratio: Vec<Tensor>,
}

impl MinibatchTerms {
    fn push(&mut self, g: GroupTerms) {
        self.pg.push(g.pg);
        self.v_loss.push(g.v_loss);
        self.ent.push(g.ent);
        self.ratio.push(g.ratio);
        self.log_ratio.push(g.log_ratio);
    }
}

/// A minibatch's per-decision inputs to the loss besides the network's outputs.
struct LossInputs {
    mask: Tensor,
    act: Tensor,
    old_lp: Tensor,
    old_v: Tensor,
    ret: Tensor,
    adv: Tensor,
}

impl LossInputs {
    /// Of the decisions `rows` (`(group, row)` pairs into `batches`) with advantages `adv`,
    /// every mask padded with "not allowed" to `n_actions` columns.
    fn new(
        batches: &[PpoBatch],
        rows: &[(usize, usize)],
        n_actions: usize,
        adv: Vec<f32>,
        dev: &Device,
    ) -> Result<Self> {
        let m = rows.len();
        let mut mask = Vec::with_capacity(m * n_actions);
        for &(g, i) in rows {
            let b = &batches[g];
            mask.extend_from_slice(&b.masks[i * b.n_actions..(i + 1) * b.n_actions]);
            mask.resize(mask.len() + n_actions.saturating_sub(b.n_actions), 0);
        }
        let column = |f: fn(&PpoBatch) -> &[f32]| -> Result<Tensor> {
            let v: Vec<f32> = rows.iter().map(|&(g, i)| f(&batches[g])[i]).collect();
            Tensor::from_vec(v, m, dev)
        };
        let act: Vec<u32> = rows.iter().map(|&(g, i)| batches[g].actions[i]).collect();
        Ok(LossInputs {
            mask: Tensor::from_vec(mask, (m, n_actions), dev)?,
            act: Tensor::from_vec(act, m, dev)?,
            old_lp: column(|b| &b.old_log_probs)?,
            old_v: column(|b| &b.old_values)?,
            ret: column(|b| &b.returns)?,
            adv: Tensor::from_vec(adv, m, dev)?,
        })
    }
}

/// The per-sample loss terms from the network's `logits` and values `v` on the decisions
/// of `inp`.
fn loss_terms(
    logits: &Tensor,
    v: &Tensor,
    inp: &LossInputs,
    cfg: &PpoConfig,
) -> Result<GroupTerms> {
    let lp_all = masked_log_softmax(logits, &inp.mask)?;
    let lp = gather_actions(&lp_all, &inp.act)?;
    let log_ratio = (&lp - &inp.old_lp)?;
    let ratio = log_ratio.exp()?;
    let eps = cfg.clip_eps as f64;
    let pg1 = (inp.adv.neg()? * &ratio)?;
    let pg2 = (inp.adv.neg()? * ratio.clamp(1.0 - eps, 1.0 + eps)?)?;
    let pg = pg1.maximum(&pg2)?;
    let v_loss = if cfg.clip_value {
        let v_clip = (&inp.old_v + (v - &inp.old_v)?.clamp(-eps, eps)?)?;
        let a = (v - &inp.ret)?.sqr()?;
        let b = (v_clip - &inp.ret)?.sqr()?;
        a.maximum(&b)?
    } else {
        (v - &inp.ret)?.sqr()?
    };
    Ok(GroupTerms {
        pg,
        v_loss,
        ent: entropy(&lp_all)?,
        ratio,
        log_ratio,
    })
}

/// The per-sample loss terms of the rows `local` of group `g`, with their advantages.
fn group_terms(
    model: &dyn PolicyModel,
    g: usize,
    batches: &[PpoBatch],
    local: &[usize],
    adv: Vec<f32>,
    cfg: &PpoConfig,
) -> Result<GroupTerms> {
    let (batch, m, dev) = (&batches[g], local.len(), model.device());
    let obs = Tensor::from_vec(
        rows(&batch.obs, batch.obs_dim, local),
        (m, batch.obs_dim),
        dev,
    )?;
    let owned: Vec<(usize, usize)> = local.iter().map(|&i| (g, i)).collect();
    let inp = LossInputs::new(batches, &owned, batch.n_actions, adv, dev)?;
    let (logits, v) = model.forward_group(g, &obs)?;
    loss_terms(&logits, &v, &inp, cfg)
}

/// Normalises advantages to zero mean and unit standard deviation (when `m > 1`).
fn normalise_advantages(adv: &mut [f32]) {
    let m = adv.len();
    if m > 1 {
        let mean = adv.iter().sum::<f32>() / m as f32;
        let var = adv.iter().map(|a| (a - mean).powi(2)).sum::<f32>() / (m - 1) as f32;
        let sd = var.sqrt() + 1e-8;
        adv.iter_mut().for_each(|a| *a = (*a - mean) / sd);
    }
}

/// [`update`] over decisions in several groups (`batches[g]` holds group `g`'s, each with
/// its own observation width and action count): minibatches are drawn over all decisions
/// together, and every loss term is the mean over the minibatch whatever the groups, so
/// each group weighs by its count.
pub fn update_groups(
    model: &dyn PolicyModel,
    opt: &mut Adam,
    batches: &[PpoBatch],
    cfg: &PpoConfig,
    lr: f64,
    rng: &mut StdRng,
) -> Result<UpdateStats> {
    let vars = model.vars();
    let owner: Vec<(usize, usize)> = batches
        .iter()
        .enumerate()
        .flat_map(|(g, b)| (0..b.len()).map(move |i| (g, i)))
        .collect();
    let n = owner.len();
    let mb = cfg.minibatch.clamp(1, n.max(1));
    let mut idx: Vec<usize> = (0..n).collect();
    let mut progress = Progress::default();
    'epochs: for _ in 0..cfg.epochs {
        idx.shuffle(rng);
        for chunk in idx.chunks(mb) {
            let t = minibatch_terms(model, batches, &owner, chunk, cfg)?;
            let pg_loss = Tensor::cat(&t.pg, 0)?.mean_all()?;
            let v_loss = (Tensor::cat(&t.v_loss, 0)?.mean_all()? * 0.5)?;
            let ent = Tensor::cat(&t.ent, 0)?.mean_all()?;
            let loss =
                ((&pg_loss - (&ent * cfg.ent_coef as f64)?)? + (&v_loss * cfg.vf_coef as f64)?)?;
            let mut grads = loss.backward()?;
            let gn = clip_grad_norm(&mut grads, &vars, cfg.max_grad_norm)?;
            opt.step(&grads, lr)?;
            let losses = [&pg_loss, &v_loss, &ent];
            let kl = progress.record(&t, losses, gn, cfg.clip_eps)?;
            if let Some(t) = cfg.target_kl {
                if kl > t {
                    break 'epochs;
                }
            }
        }
        progress.st.epochs += 1;
    }
    Ok(progress.finish())
}

/// The loss terms of the minibatch `chunk` (indices into `owner`, which maps each decision
/// to its group and row), group by group, with its advantages normalised if asked.
fn minibatch_terms(
    model: &dyn PolicyModel,
    batches: &[PpoBatch],
    owner: &[(usize, usize)],
    chunk: &[usize],
    cfg: &PpoConfig,
) -> Result<MinibatchTerms> {
    let mut adv_v: Vec<f32> = chunk
        .iter()
        .map(|&i| batches[owner[i].0].advantages[owner[i].1])
        .collect();
    if cfg.norm_adv {
        normalise_advantages(&mut adv_v);
    }
    let mut t = MinibatchTerms::default();
    let picked: Vec<(usize, usize)> = chunk.iter().map(|&i| owner[i]).collect();
    if let Some(out) = model.forward_rows(batches, &picked) {
        let (logits, v) = out?;
        let n_actions = batches.iter().map(|b| b.n_actions).max().unwrap_or(0);
        let inp = LossInputs::new(batches, &picked, n_actions, adv_v, model.device())?;
        t.push(loss_terms(&logits, &v, &inp, cfg)?);
        return Ok(t);
    }
    for g in 0..batches.len() {
        let (local, adv): (Vec<usize>, Vec<f32>) = chunk
            .iter()
            .zip(&adv_v)
            .filter(|(&i, _)| owner[i].0 == g)
            .map(|(&i, &a)| (owner[i].1, a))
            .unzip();
        if !local.is_empty() {
            t.push(group_terms(model, g, batches, &local, adv, cfg)?);
        }
    }
    Ok(t)
}

/// An update's statistics as its minibatches go: counts and last values in `st`, sums of
/// the per-minibatch means (averaged by [`Progress::finish`]).
struct Progress {
    st: UpdateStats,
    sum_pl: f32,
    sum_vl: f32,
    sum_ent: f32,
    sum_cf: f32,
    sum_gn: f32,
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            st: UpdateStats {
                first_ratio_dev: f32::NAN,
                ..Default::default()
            },
            sum_pl: 0.0,
            sum_vl: 0.0,
            sum_ent: 0.0,
            sum_cf: 0.0,
            sum_gn: 0.0,
        }
    }
}

impl Progress {
    /// Records a minibatch's diagnostics, from the same forward pass as its step: its terms,
    /// its `[policy, value, entropy]` losses and its gradient norm. Returns its approx-KL.
    fn record(
        &mut self,
        t: &MinibatchTerms,
        [pg_loss, v_loss, ent]: [&Tensor; 3],
        grad_norm: f32,
        clip_eps: f32,
    ) -> Result<f32> {
        let r: Vec<f32> = Tensor::cat(&t.ratio, 0)?.to_vec1()?;
        let lr_v: Vec<f32> = Tensor::cat(&t.log_ratio, 0)?.to_vec1()?;
        let m = r.len();
        let st = &mut self.st;
        if st.minibatches == 0 {
            st.first_ratio_dev = r.iter().fold(0.0f32, |a, x| a.max((x - 1.0).abs()));
        }
        let kl = r.iter().zip(&lr_v).map(|(r, l)| (r - 1.0) - l).sum::<f32>() / m as f32;
        let cf = r.iter().filter(|x| (*x - 1.0).abs() > clip_eps).count() as f32 / m as f32;
        st.approx_kl = kl;
        self.sum_pl += pg_loss.to_scalar::<f32>()?;
        self.sum_vl += v_loss.to_scalar::<f32>()?;
        self.sum_ent += ent.to_scalar::<f32>()?;
        self.sum_cf += cf;
        self.sum_gn += grad_norm;
        st.minibatches += 1;
        Ok(kl)
    }

    /// The update's statistics: the sums averaged over the minibatches.
    fn finish(self) -> UpdateStats {
        let mut st = self.st;
        let k = st.minibatches.max(1) as f32;
        st.policy_loss = self.sum_pl / k;
        st.value_loss = self.sum_vl / k;
        st.entropy = self.sum_ent / k;
        st.clip_frac = self.sum_cf / k;
        st.grad_norm = self.sum_gn / k;
        st
    }
}

/// Gradient of the clipped surrogate alone with respect to the actor's variables, for
/// tests of the clipping behaviour.
pub fn surrogate_grad_norm(
    net: &ActorCritic,
    obs: &Tensor,
    mask: &Tensor,
    actions: &Tensor,
    old_log_probs: &Tensor,
    advantages: &Tensor,
    clip_eps: f64,
) -> Result<f32> {
    let lp = gather_actions(
        &masked_log_softmax(&net.actor.forward(obs)?, mask)?,
        actions,
    )?;
    let ratio = (&lp - old_log_probs)?.exp()?;
    let pg1 = (advantages.neg()? * &ratio)?;
    let pg2 = (advantages.neg()? * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)?)?;
    let loss = pg1.maximum(&pg2)?.mean_all()?;
    let grads = loss.backward()?;
    let mut sq = 0.0f32;
    for v in net.actor.vars() {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g.sqr()?.sum_all()?.to_scalar::<f32>()?;
        }
    }
    Ok(sq.sqrt())
}

#[cfg(test)]
mod direction_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::ObsLayout;
    use rand::{Rng, SeedableRng};

    fn net() -> ActorCritic {
        ActorCritic::new(
            ObsLayout {
                n_lanes: 2,
                n_phases: 3,
            },
            &[16, 16],
            7,
            &Device::Cpu,
        )
        .unwrap()
    }

    fn random_batch(net: &ActorCritic, n: usize, seed: u64) -> PpoBatch {
        let mut rng = StdRng::seed_from_u64(seed);
        let d = net.layout.dim();
        let a = net.layout.n_phases as usize;
        let obs: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let masks: Vec<u8> = (0..n * a)
            .map(|i| {
                if i % a == 0 || rng.random_bool(0.7) {
                    1
                } else {
                    0
                }
            })
            .collect();
        let actions: Vec<u32> = (0..n)
            .map(|i| (0..a).rev().find(|&k| masks[i * a + k] == 1).unwrap() as u32)
            .collect();
        let dev = &net.device;
        let lp_all = masked_log_softmax(
            &net.actor
                .forward(&Tensor::from_slice(&obs, (n, d), dev).unwrap())
                .unwrap(),
            &Tensor::from_slice(&masks, (n, a), dev).unwrap(),
        )
        .unwrap();
        let old_log_probs: Vec<f32> =
            gather_actions(&lp_all, &Tensor::from_slice(&actions, n, dev).unwrap())
                .unwrap()
                .to_vec1()
                .unwrap();
        let advantages: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        PpoBatch {
            obs_dim: d,
            n_actions: a,
            obs,
            masks,
            actions,
            old_log_probs,
            old_values: vec![0.0; n],
            returns: advantages.clone(),
            advantages,
        }
    }

    #[test]
    fn the_schedule_anneals_what_is_asked_linearly_to_zero() {
        let base = PpoConfig {
            learning_rate: 1e-3,
            ent_coef: 0.02,
            ..PpoConfig::default()
        };
        let both = PpoConfig {
            anneal_ent_coef: true,
            ..base.clone()
        };
        let at = |c: &PpoConfig, f: f64| {
            let s = c.scheduled(f);
            (s.learning_rate, s.ent_coef)
        };
        assert_eq!(at(&both, 1.0), (1e-3, 0.02));
        let (lr, ent) = at(&both, 0.25);
        assert!((lr - 2.5e-4).abs() < 1e-12 && (ent - 0.005).abs() < 1e-7);
        assert_eq!(at(&both, 0.0), (0.0, 0.0));
        // Out-of-range progress is clamped, never a negative or growing coefficient.
        assert_eq!(at(&both, -0.5), (0.0, 0.0));
        assert_eq!(at(&both, 2.0), (1e-3, 0.02));
        // Off: the entropy bonus stays; the learning rate anneals unless that is off too.
        assert_eq!(at(&base, 0.25).1, 0.02);
        let fixed = PpoConfig {
            anneal_lr: false,
            ..base.clone()
        };
        assert_eq!(at(&fixed, 0.25), (1e-3, 0.02));
        // Everything else is the configuration's.
        let s = both.scheduled(0.5);
        assert_eq!(
            (s.epochs, s.clip_eps, s.gamma),
            (both.epochs, both.clip_eps, both.gamma)
        );
    }

    #[test]
    fn runs_recorded_before_entropy_annealing_load_without_it() {
        let mut v = serde_json::to_value(PpoConfig::default()).unwrap();
        v.as_object_mut().unwrap().remove("anneal_ent_coef");
        let old: PpoConfig = serde_json::from_value(v).unwrap();
        assert!(!old.anneal_ent_coef);
    }

    #[test]
    fn ratio_is_one_on_the_first_minibatch() {
        let net = net();
        let batch = random_batch(&net, 64, 1);
        let mut opt = Adam::new(net.vars(), 1e-5).unwrap();
        let cfg = PpoConfig {
            minibatch: 16,
            epochs: 2,
            ..Default::default()
        };
        let st = update(
            &net,
            &mut opt,
            &batch,
            &cfg,
            1e-3,
            &mut StdRng::seed_from_u64(3),
        )
        .unwrap();
        assert_eq!(
            st.first_ratio_dev, 0.0,
            "policy unchanged before the first step"
        );
        assert_eq!(st.minibatches, 8);
        assert!(
            st.approx_kl.abs() > 0.0,
            "later minibatches see a changed policy"
        );
    }

    #[test]
    fn zero_policy_gradient_where_the_ratio_is_clipped() {
        let net = net();
        let batch = random_batch(&net, 32, 2);
        let dev = &net.device;
        let (d, a, n) = (batch.obs_dim, batch.n_actions, batch.len());
        let obs = Tensor::from_slice(&batch.obs, (n, d), dev).unwrap();
        let mask = Tensor::from_slice(&batch.masks, (n, a), dev).unwrap();
        let act = Tensor::from_slice(&batch.actions, n, dev).unwrap();
        let pos = Tensor::ones(n, candle_core::DType::F32, dev).unwrap();
        // Pretend the old policy gave these actions much lower probability: ratio ≫ 1+ε.
        let old_low = Tensor::from_vec(
            batch.old_log_probs.iter().map(|l| l - 1.0).collect(),
            n,
            dev,
        )
        .unwrap();
        let g = surrogate_grad_norm(&net, &obs, &mask, &act, &old_low, &pos, 0.2).unwrap();
        assert_eq!(
            g, 0.0,
            "positive advantage, ratio above 1+ε: clipped, no gradient"
        );
        // Same ratio with negative advantages is not clipped (pessimistic bound).
        let g = surrogate_grad_norm(&net, &obs, &mask, &act, &old_low, &pos.neg().unwrap(), 0.2)
            .unwrap();
        assert!(g > 0.0);
        // Inside the clip range there is gradient.
        let old = Tensor::from_slice(&batch.old_log_probs, n, dev).unwrap();
        assert!(surrogate_grad_norm(&net, &obs, &mask, &act, &old, &pos, 0.2).unwrap() > 0.0);
    }

    #[test]
    fn target_kl_stops_early_and_zero_lr_changes_nothing() {
        let net = net();
        let batch = random_batch(&net, 128, 4);
        let before = net.actor.to_dense().unwrap();
        let mut opt = Adam::new(net.vars(), 1e-5).unwrap();
        let cfg = PpoConfig {
            minibatch: 32,
            epochs: 3,
            ..Default::default()
        };
        let st = update(
            &net,
            &mut opt,
            &batch,
            &cfg,
            0.0,
            &mut StdRng::seed_from_u64(5),
        )
        .unwrap();
        assert_eq!(net.actor.to_dense().unwrap(), before, "lr 0 is a no-op");
        assert_eq!(st.epochs, 3);
        let cfg = PpoConfig {
            minibatch: 32,
            epochs: 50,
            target_kl: Some(1e-4),
            ..Default::default()
        };
        let st = update(
            &net,
            &mut opt,
            &batch,
            &cfg,
            0.05,
            &mut StdRng::seed_from_u64(5),
        )
        .unwrap();
        assert!(st.epochs < 50, "stopped after {} epochs", st.epochs);
        assert!(st.approx_kl > 1e-4);
    }
}
