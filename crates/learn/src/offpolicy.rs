//! Off-policy clipped PPO with a Q-critic (the project's source algorithm):
//!
//! 1. `(s, a, r, s', log π(a|s))` records in a replay set;
//! 2. fit `Q_φ(s, a)` to `y = r + γ · E_{a'~π_θt}[Q_φ(s', a')]` (expected SARSA under the
//!    current policy);
//! 3. advantage `Â(s, aᵗ) = Q_φ(s, aᵗ) − E_{a~π_θt}[Q_φ(s, a)]` for actions `aᵗ ~ π_θt(·|s)`
//!    resampled from the current policy;
//! 4. K epochs of the clipped objective with ratio `π_θ(aᵗ|s) / π_θt(aᵗ|s)`.
//!
//! With a discrete action set each expectation can be exact (a sum over all allowed actions
//! weighted by π) or a Monte-Carlo average over M sampled actions; [`Expectation`] picks,
//! and the tests show the two agree as M grows.
//!
//! Logged actions enter only the critic's regression (any action that was actually served
//! is valid experience for `Q`, whoever chose it: policy, supervisor or fallback). The
//! policy step never uses logged actions in a ratio, so records the policy did not choose
//! need no importance correction and cannot bias it.

use candle_core::{Device, Result, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::nets::{clip_grad_norm, masked_log_softmax, Adam, MlpNet};

/// How an expectation over actions is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expectation {
    /// Exact: `Σ_a π(a|s) f(a)` over the allowed actions.
    Exact,
    /// Monte Carlo: `(1/M) Σ_m f(a_m)`, `a_m ~ π(·|s)`.
    Sampled(usize),
}

/// Which policy the critic evaluates and the advantages are taken against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetPolicy {
    /// The softmax policy `π_θt` (expected SARSA, advantage against `E_π Q`): what
    /// training on the simulator samples from.
    #[default]
    Stochastic,
    /// The greedy policy `g(s) = argmax_{a allowed} π_θt(a|s)` (ties to the lower index, as
    /// the controller's masked argmax): targets `r + γ Q(s', g(s'))`, advantages
    /// `Q(s, a) − Q(s, g(s))`. What a controller deploys, so what fine-tuning improves.
    Greedy,
}

/// Off-policy PPO hyper-parameters. Defaults are conservative (small steps) because they
/// run on a controller, on field data, unattended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OffPolicyConfig {
    /// Discount γ.
    pub gamma: f32,
    /// Critic fitting epochs.
    pub q_epochs: usize,
    /// Critic learning rate.
    pub q_learning_rate: f64,
    /// Policy epochs K.
    pub epochs: usize,
    /// Policy learning rate.
    pub learning_rate: f64,
    /// Minibatch size (critic and policy).
    pub minibatch: usize,
    /// Clip ε.
    pub clip_eps: f32,
    /// Stop policy epochs once the KL from the starting policy exceeds this.
    pub max_kl: f32,
    /// When the KL limit stops the epochs, also undo the epoch that crossed it, so the
    /// returned policy is the last one *within* the limit (a hard limit, for fine-tuning on
    /// a controller whose gate checks the KL). Off: the crossing epoch is kept, as in
    /// the usual PPO early stop.
    #[serde(default)]
    pub kl_hard_limit: bool,
    /// Global gradient-norm limit.
    pub max_grad_norm: f32,
    /// How expectations over actions are taken.
    pub expectation: Expectation,
    /// Actions resampled per state for the policy step (ignored with `Exact`).
    pub resample: usize,
    /// The policy the critic evaluates and the advantages refer to.
    #[serde(default)]
    pub target: TargetPolicy,
}

impl Default for OffPolicyConfig {
    fn default() -> Self {
        OffPolicyConfig {
            gamma: 0.99,
            q_epochs: 20,
            q_learning_rate: 1e-3,
            epochs: 10,
            learning_rate: 1e-4,
            minibatch: 256,
            clip_eps: 0.1,
            max_kl: 0.02,
            kl_hard_limit: false,
            max_grad_norm: 0.5,
            expectation: Expectation::Exact,
            resample: 4,
            target: TargetPolicy::Stochastic,
        }
    }
}

/// Logged experience, normalised, flattened.
#[derive(Clone, Debug, Default)]
pub struct ReplayBatch {
    /// Observation width.
    pub obs_dim: usize,
    /// Action count.
    pub n_actions: usize,
    /// Normalised `s`, `len × obs_dim`.
    pub obs: Vec<f32>,
    /// Masks at `s`, `len × n_actions`.
    pub masks: Vec<u8>,
    /// The action actually served at `s`.
    pub actions: Vec<u32>,
    /// Rewards.
    pub rewards: Vec<f32>,
    /// Normalised `s'`.
    pub next_obs: Vec<f32>,
    /// Masks at `s'`.
    pub next_masks: Vec<u8>,
}

impl ReplayBatch {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// The records at `idx`, as a new batch.
    pub fn select(&self, idx: &[usize]) -> ReplayBatch {
        let (d, a) = (self.obs_dim, self.n_actions);
        let rows = |v: &[f32], w: usize| -> Vec<f32> {
            idx.iter()
                .flat_map(|&i| v[i * w..(i + 1) * w].iter().copied())
                .collect()
        };
        let rows_u8 = |v: &[u8]| -> Vec<u8> {
            idx.iter()
                .flat_map(|&i| v[i * a..(i + 1) * a].iter().copied())
                .collect()
        };
        ReplayBatch {
            obs_dim: d,
            n_actions: a,
            obs: rows(&self.obs, d),
            masks: rows_u8(&self.masks),
            actions: idx.iter().map(|&i| self.actions[i]).collect(),
            rewards: idx.iter().map(|&i| self.rewards[i]).collect(),
            next_obs: rows(&self.next_obs, d),
            next_masks: rows_u8(&self.next_masks),
        }
    }
}

/// `Q(s, ·)`: one output per action.
#[derive(Clone, Debug)]
pub struct QCritic {
    /// The network.
    pub net: MlpNet,
}

impl QCritic {
    /// A fresh critic.
    pub fn new(
        obs_dim: usize,
        n_actions: usize,
        hidden: &[usize],
        rng: &mut StdRng,
        dev: &Device,
    ) -> Result<Self> {
        let mut w = vec![obs_dim];
        w.extend_from_slice(hidden);
        w.push(n_actions);
        Ok(QCritic {
            net: MlpNet::new(&w, 1.0, rng, dev)?,
        })
    }
}

/// Policy probabilities `[n, A]` (masked) as plain rows.
pub fn policy_probs(actor: &MlpNet, obs: &Tensor, mask: &Tensor) -> Result<Vec<Vec<f32>>> {
    masked_log_softmax(&actor.forward(obs)?, mask)?
        .exp()?
        .to_vec2()
}

fn sample(probs: &[f32], rng: &mut StdRng) -> usize {
    let u: f32 = rng.random();
    let mut acc = 0.0;
    for (i, &p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return i;
        }
    }
    // Rounding: fall back to the most probable action.
    probs
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .unwrap_or(0)
}

/// The choice the controller makes per row: the allowed phase (`mask` 1) with the largest
/// logit, by the controller's own rule (`greenwave_core::mlp::masked_argmax`). Taken on
/// the logits: softmax can round two logits a float step apart to one probability, and
/// then [`greedy_actions`] picks the lower index where the controller picks the larger.
pub fn greedy_of(actor: &MlpNet, obs: &Tensor, mask: &Tensor) -> Result<Vec<usize>> {
    use greenwave_core::plan::MAX_PHASES;
    use greenwave_core::PhaseMask;
    let logits: Vec<Vec<f32>> = actor.forward(obs)?.to_vec2()?;
    let masks: Vec<Vec<f32>> = mask.to_dtype(candle_core::DType::F32)?.to_vec2()?;
    if masks.iter().any(|m| m.len() > MAX_PHASES) {
        candle_core::bail!("greedy_of: more than {MAX_PHASES} phases");
    }
    Ok(logits
        .iter()
        .zip(&masks)
        .map(|(z, m)| {
            let bits = m
                .iter()
                .enumerate()
                .filter(|(_, &x)| x > 0.5)
                .fold(0u16, |b, (i, _)| b | (1 << i));
            greenwave_core::mlp::masked_argmax(z, PhaseMask(bits)).map_or(0, usize::from)
        })
        .collect())
}

/// The greedy choice per row of probabilities (masked entries are 0; ties go to the lower
/// index, as the controller's masked argmax): for training targets, where only the
/// probabilities are at hand. What the controller would run is [`greedy_of`].
pub fn greedy_actions(probs: &[Vec<f32>]) -> Vec<usize> {
    probs
        .iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &x)| {
                        if x > b.1 {
                            (i, x)
                        } else {
                            b
                        }
                    },
                )
                .0
        })
        .collect()
}

/// One-hot rows for `idx` over `n_actions`.
pub fn one_hot(idx: &[usize], n_actions: usize) -> Vec<Vec<f32>> {
    idx.iter()
        .map(|&i| {
            let mut r = vec![0.0; n_actions];
            r[i] = 1.0;
            r
        })
        .collect()
}

/// `E_{a~π}[Q(s, a)]` per row, exact or sampled.
pub fn expected_q(
    q: &[Vec<f32>],
    probs: &[Vec<f32>],
    how: Expectation,
    rng: &mut StdRng,
) -> Vec<f32> {
    q.iter()
        .zip(probs)
        .map(|(qr, pr)| match how {
            Expectation::Exact => qr.iter().zip(pr).map(|(q, p)| q * p).sum(),
            Expectation::Sampled(m) => {
                let m = m.max(1);
                (0..m).map(|_| qr[sample(pr, rng)]).sum::<f32>() / m as f32
            }
        })
        .collect()
}

fn tensor2(v: &[f32], rows: usize, cols: usize, dev: &Device) -> Result<Tensor> {
    Tensor::from_slice(v, (rows, cols), dev)
}

/// Fits `Q` to targets under `actor` — expected SARSA under its softmax policy, or under
/// its greedy policy with `cfg.target` = [`TargetPolicy::Greedy`]; returns the last epoch's
/// mean loss.
/// Targets are recomputed at the start of each epoch from the critic as it then is (fitted
/// Q-iteration), which keeps the regression stable without a separate target network.
pub fn fit_critic(
    q: &QCritic,
    opt: &mut Adam,
    actor: &MlpNet,
    data: &ReplayBatch,
    cfg: &OffPolicyConfig,
    rng: &mut StdRng,
) -> Result<f32> {
    let (n, d, a) = (data.len(), data.obs_dim, data.n_actions);
    let next_obs = tensor2(&data.next_obs, n, d, &Device::Cpu)?;
    let next_mask = Tensor::from_slice(&data.next_masks, (n, a), &Device::Cpu)?;
    let next_probs = match cfg.target {
        TargetPolicy::Greedy => one_hot(&greedy_of(actor, &next_obs, &next_mask)?, a),
        TargetPolicy::Stochastic => policy_probs(actor, &next_obs, &next_mask)?,
    };
    fit_critic_for(q, opt, &next_probs, data, cfg, rng)
}

/// [`fit_critic`] for any target policy, given as its probabilities at each `s'`
/// (`next_probs[i]` for record `i`): e.g. a deterministic (greedy) policy as one-hot rows,
/// for fitted-Q evaluation of what a controller actually runs.
pub fn fit_critic_for(
    q: &QCritic,
    opt: &mut Adam,
    next_probs: &[Vec<f32>],
    data: &ReplayBatch,
    cfg: &OffPolicyConfig,
    rng: &mut StdRng,
) -> Result<f32> {
    let dev = Device::Cpu;
    let (n, d) = (data.len(), data.obs_dim);
    if next_probs.len() != n {
        candle_core::bail!(
            "fit_critic_for: {} probability rows for {n} records",
            next_probs.len()
        );
    }
    let next_obs = tensor2(&data.next_obs, n, d, &dev)?;
    let vars = q.net.vars();
    let mut idx: Vec<usize> = (0..n).collect();
    let mut last = 0.0;
    for _ in 0..cfg.q_epochs {
        let q_next: Vec<Vec<f32>> = q.net.forward(&next_obs)?.to_vec2()?;
        let v_next = expected_q(&q_next, next_probs, cfg.expectation, rng);
        let y: Vec<f32> = data
            .rewards
            .iter()
            .zip(&v_next)
            .map(|(r, v)| r + cfg.gamma * v)
            .collect();
        idx.shuffle(rng);
        let (mut sum, mut k) = (0.0f32, 0);
        for chunk in idx.chunks(cfg.minibatch.max(1)) {
            let m = chunk.len();
            let obs: Vec<f32> = chunk
                .iter()
                .flat_map(|&i| data.obs[i * d..(i + 1) * d].iter().copied())
                .collect();
            let obs = tensor2(&obs, m, d, &dev)?;
            let act = Tensor::from_vec(
                chunk.iter().map(|&i| data.actions[i]).collect::<Vec<u32>>(),
                m,
                &dev,
            )?;
            let target =
                Tensor::from_vec(chunk.iter().map(|&i| y[i]).collect::<Vec<f32>>(), m, &dev)?;
            let q_sa = q
                .net
                .forward(&obs)?
                .gather(&act.unsqueeze(1)?, 1)?
                .squeeze(1)?;
            let loss = (q_sa - target)?.sqr()?.mean_all()?;
            let mut grads = loss.backward()?;
            clip_grad_norm(&mut grads, &vars, cfg.max_grad_norm * 20.0)?;
            opt.step(&grads, cfg.q_learning_rate)?;
            sum += loss.to_scalar::<f32>()?;
            k += 1;
        }
        last = sum / k.max(1) as f32;
    }
    Ok(last)
}

/// Statistics of one off-policy policy update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OffPolicyStats {
    /// Mean clipped objective (to be maximised) over the last epoch kept (0 when none
    /// was: an undone epoch's objective is not the returned policy's).
    pub objective: f32,
    /// KL(π_θt ‖ π_θ) over the batch at the end.
    pub kl: f32,
    /// Epochs completed.
    pub epochs: usize,
    /// Whether the KL limit stopped the epochs.
    pub stopped_by_kl: bool,
    /// Whether the epoch that crossed the KL limit was undone (`kl_hard_limit`); `epochs`
    /// and `kl` then describe the policy returned.
    #[serde(default)]
    pub reverted_epoch: bool,
    /// Mean |Â| of the resampled actions.
    pub mean_abs_advantage: f32,
}

/// The clipped off-policy objective's pieces for one batch of states.
struct PolicyTargets {
    /// Per (state, action) weight in the objective: π_θt(a|s) for Exact (all actions),
    /// 1/resample for each sampled action.
    weights: Vec<f32>,
    /// Â(s, a) for the same entries.
    adv: Vec<f32>,
    /// log π_θt(a|s).
    old_lp: Vec<f32>,
    /// Which action, per entry.
    actions: Vec<u32>,
    /// Which state, per entry.
    states: Vec<u32>,
}

fn policy_targets(
    q_all: &[Vec<f32>],
    probs: &[Vec<f32>],
    cfg: &OffPolicyConfig,
    rng: &mut StdRng,
) -> PolicyTargets {
    let baseline = match cfg.target {
        TargetPolicy::Stochastic => expected_q(q_all, probs, cfg.expectation, rng),
        TargetPolicy::Greedy => greedy_actions(probs)
            .iter()
            .zip(q_all)
            .map(|(&g, qr)| qr[g])
            .collect(),
    };
    let mut t = PolicyTargets {
        weights: vec![],
        adv: vec![],
        old_lp: vec![],
        actions: vec![],
        states: vec![],
    };
    for (s, (qr, pr)) in q_all.iter().zip(probs).enumerate() {
        let mut push = |a: usize, w: f32| {
            t.weights.push(w);
            t.adv.push(qr[a] - baseline[s]);
            t.old_lp.push(pr[a].max(1e-30).ln());
            t.actions.push(a as u32);
            t.states.push(s as u32);
        };
        match cfg.expectation {
            Expectation::Exact => {
                for (a, &p) in pr.iter().enumerate() {
                    if p > 0.0 {
                        push(a, p);
                    }
                }
            }
            Expectation::Sampled(_) => {
                let k = cfg.resample.max(1);
                for _ in 0..k {
                    push(sample(pr, rng), 1.0 / k as f32);
                }
            }
        }
    }
    t
}

/// The clipped objective `Σ w · min(r·Â, clip(r)·Â)` per state, averaged, for the current
/// actor: exposed for tests comparing the exact and sampled forms.
pub fn clipped_objective(
    actor: &MlpNet,
    q: &QCritic,
    data: &ReplayBatch,
    cfg: &OffPolicyConfig,
    rng: &mut StdRng,
) -> Result<f32> {
    let dev = Device::Cpu;
    let (n, d, a) = (data.len(), data.obs_dim, data.n_actions);
    let obs = tensor2(&data.obs, n, d, &dev)?;
    let mask = Tensor::from_slice(&data.masks, (n, a), &dev)?;
    let probs = policy_probs(actor, &obs, &mask)?;
    let q_all: Vec<Vec<f32>> = q.net.forward(&obs)?.to_vec2()?;
    let t = policy_targets(&q_all, &probs, cfg, rng);
    // At θ = θt every ratio is 1, so the objective is Σ w·Â.
    Ok(t.weights
        .iter()
        .zip(&t.adv)
        .map(|(w, a)| w * a)
        .sum::<f32>()
        / n as f32)
}

/// KL(π_old ‖ π_new) averaged over states, from probability rows.
pub fn mean_kl(old: &[Vec<f32>], new: &[Vec<f32>]) -> f32 {
    let n = old.len().max(1) as f32;
    old.iter()
        .zip(new)
        .map(|(p, q)| {
            p.iter()
                .zip(q)
                .filter(|(p, _)| **p > 0.0)
                .map(|(p, q)| p * (p.ln() - q.max(1e-30).ln()))
                .sum::<f32>()
        })
        .sum::<f32>()
        / n
}

/// Steps 3–4: K epochs of the clipped objective on actions resampled from the policy as it
/// was at the start (`π_θt`), stopping once KL(π_θt ‖ π_θ) exceeds `cfg.max_kl` (and, with
/// `cfg.kl_hard_limit`, restoring the parameters from before that epoch). The optimiser's
/// moments are not restored: they only shape later steps, which a stop ends.
pub fn update_policy(
    actor: &MlpNet,
    opt: &mut Adam,
    q: &QCritic,
    data: &ReplayBatch,
    cfg: &OffPolicyConfig,
    rng: &mut StdRng,
) -> Result<OffPolicyStats> {
    let dev = Device::Cpu;
    let (n, d, a) = (data.len(), data.obs_dim, data.n_actions);
    let obs = tensor2(&data.obs, n, d, &dev)?;
    let mask = Tensor::from_slice(&data.masks, (n, a), &dev)?;
    let probs0 = policy_probs(actor, &obs, &mask)?;
    let q_all: Vec<Vec<f32>> = q.net.forward(&obs)?.to_vec2()?;
    let t = policy_targets(&q_all, &probs0, cfg, rng);
    let mut st = OffPolicyStats {
        mean_abs_advantage: t.adv.iter().map(|x| x.abs()).sum::<f32>() / t.adv.len().max(1) as f32,
        ..Default::default()
    };
    let objective = ClippedObjective::new(data, t, cfg.clip_eps as f64);
    let mut states: Vec<usize> = (0..n).collect();
    for _ in 0..cfg.epochs {
        // Parameters before this epoch, to undo it if it crosses a hard KL limit.
        let snapshot = if cfg.kl_hard_limit {
            Some(actor.to_dense()?)
        } else {
            None
        };
        let (kl_before, objective_before) = (st.kl, st.objective);
        states.shuffle(rng);
        st.objective = policy_epoch(actor, opt, &objective, &states, cfg)?;
        st.epochs += 1;
        let probs = policy_probs(actor, &obs, &mask)?;
        st.kl = mean_kl(&probs0, &probs);
        if st.kl > cfg.max_kl {
            st.stopped_by_kl = true;
            if let Some(layers) = snapshot {
                actor.set_dense(&layers)?;
                st.kl = kl_before;
                st.objective = objective_before;
                st.epochs -= 1;
                st.reverted_epoch = true;
            }
            break;
        }
    }
    Ok(st)
}

/// One epoch: a gradient step on the clipped objective per minibatch of `states` (in their
/// order); returns the objective averaged over the states.
fn policy_epoch(
    actor: &MlpNet,
    opt: &mut Adam,
    objective: &ClippedObjective<'_>,
    states: &[usize],
    cfg: &OffPolicyConfig,
) -> Result<f32> {
    let vars = actor.vars();
    let mut sum_obj = 0.0f32;
    for chunk in states.chunks(cfg.minibatch.max(1)) {
        let obj = objective.on_states(actor, chunk)?;
        let loss = obj.neg()?;
        let mut grads = loss.backward()?;
        clip_grad_norm(&mut grads, &vars, cfg.max_grad_norm)?;
        opt.step(&grads, cfg.learning_rate)?;
        sum_obj += obj.to_scalar::<f32>()? * chunk.len() as f32;
    }
    Ok(sum_obj / states.len().max(1) as f32)
}

/// The clipped objective's entries on a replay batch, grouped by state so that a minibatch
/// of states carries all of their entries.
struct ClippedObjective<'a> {
    data: &'a ReplayBatch,
    targets: PolicyTargets,
    /// Per state, its entries in `targets`.
    by_state: Vec<Vec<usize>>,
    clip_eps: f64,
}

impl<'a> ClippedObjective<'a> {
    fn new(data: &'a ReplayBatch, targets: PolicyTargets, clip_eps: f64) -> Self {
        let mut by_state: Vec<Vec<usize>> = vec![Vec::new(); data.len()];
        for (e, &s) in targets.states.iter().enumerate() {
            by_state[s as usize].push(e);
        }
        ClippedObjective {
            data,
            targets,
            by_state,
            clip_eps,
        }
    }

    /// `Σ w · min(r·Â, clip(r)·Â)` over the entries of the states `chunk`, divided by their
    /// number, for the actor's current parameters (differentiable).
    fn on_states(&self, actor: &MlpNet, chunk: &[usize]) -> Result<Tensor> {
        let dev = Device::Cpu;
        let (d, a) = (self.data.obs_dim, self.data.n_actions);
        let (t, eps, m) = (&self.targets, self.clip_eps, chunk.len());
        let entries: Vec<usize> = chunk
            .iter()
            .flat_map(|&s| self.by_state[s].iter().copied())
            .collect();
        let local: Vec<u32> = chunk
            .iter()
            .enumerate()
            .flat_map(|(k, &s)| std::iter::repeat_n(k as u32, self.by_state[s].len()))
            .collect();
        let o: Vec<f32> = chunk
            .iter()
            .flat_map(|&s| self.data.obs[s * d..(s + 1) * d].iter().copied())
            .collect();
        let mk: Vec<u8> = chunk
            .iter()
            .flat_map(|&s| self.data.masks[s * a..(s + 1) * a].iter().copied())
            .collect();
        let lp_all = masked_log_softmax(
            &actor.forward(&tensor2(&o, m, d, &dev)?)?,
            &Tensor::from_vec(mk, (m, a), &dev)?,
        )?;
        let rows = Tensor::from_vec(local, entries.len(), &dev)?;
        let acts = entry_tensor(&t.actions, &entries, &dev)?;
        let lp = lp_all
            .index_select(&rows, 0)?
            .gather(&acts.unsqueeze(1)?, 1)?
            .squeeze(1)?;
        let old = entry_tensor(&t.old_lp, &entries, &dev)?;
        let adv = entry_tensor(&t.adv, &entries, &dev)?;
        let w = entry_tensor(&t.weights, &entries, &dev)?;
        let ratio = (lp - old)?.exp()?;
        let s1 = (&ratio * &adv)?;
        let s2 = (ratio.clamp(1.0 - eps, 1.0 + eps)? * &adv)?;
        (s1.minimum(&s2)? * w)?.sum_all()? / m as f64
    }
}

/// The values of `v` at `entries`, as a vector tensor.
fn entry_tensor<T: candle_core::WithDType>(
    v: &[T],
    entries: &[usize],
    dev: &Device,
) -> Result<Tensor> {
    Tensor::from_vec(
        entries.iter().map(|&i| v[i]).collect::<Vec<_>>(),
        entries.len(),
        dev,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn data(n: usize, d: usize, a: usize, seed: u64) -> ReplayBatch {
        let mut rng = StdRng::seed_from_u64(seed);
        let obs: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let next_obs: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        // Reward favours action (state's first feature > 0 ? 0 : 1).
        let actions: Vec<u32> = (0..n).map(|_| rng.random_range(0..a as u32)).collect();
        let rewards = (0..n)
            .map(|i| {
                let good = if obs[i * d] > 0.0 { 0 } else { 1 };
                if actions[i] == good {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        ReplayBatch {
            obs_dim: d,
            n_actions: a,
            obs,
            masks: vec![1; n * a],
            actions,
            rewards,
            next_obs,
            next_masks: vec![1; n * a],
        }
    }

    fn setup() -> (MlpNet, QCritic, ReplayBatch) {
        let dev = Device::Cpu;
        let mut rng = StdRng::seed_from_u64(11);
        let actor = MlpNet::new(&[4, 16, 3], 1.0, &mut rng, &dev).unwrap();
        let q = QCritic::new(4, 3, &[16], &mut rng, &dev).unwrap();
        (actor, q, data(256, 4, 3, 5))
    }

    #[test]
    fn sampled_expectations_converge_to_exact() {
        let (actor, q, data) = setup();
        let mut rng = StdRng::seed_from_u64(1);
        let n = data.len();
        let obs = tensor2(&data.obs, n, 4, &Device::Cpu).unwrap();
        let mask = Tensor::from_slice(&data.masks, (n, 3), &Device::Cpu).unwrap();
        let probs = policy_probs(&actor, &obs, &mask).unwrap();
        let qv: Vec<Vec<f32>> = q.net.forward(&obs).unwrap().to_vec2().unwrap();
        let exact = expected_q(&qv, &probs, Expectation::Exact, &mut rng);
        let err = |m: usize, rng: &mut StdRng| -> f32 {
            let s = expected_q(&qv, &probs, Expectation::Sampled(m), rng);
            s.iter()
                .zip(&exact)
                .map(|(a, b)| (a - b).abs())
                .sum::<f32>()
                / n as f32
        };
        let (e4, e64, e4096) = (err(4, &mut rng), err(64, &mut rng), err(4096, &mut rng));
        assert!(
            e64 < e4 && e4096 < e64,
            "errors {e4} {e64} {e4096} must shrink"
        );
        assert!(e4096 < 0.02, "{e4096}");
        // The clipped objective too.
        let cfg_exact = OffPolicyConfig::default();
        let o_exact = clipped_objective(&actor, &q, &data, &cfg_exact, &mut rng).unwrap();
        let cfg_s = OffPolicyConfig {
            expectation: Expectation::Sampled(2048),
            resample: 2048,
            ..Default::default()
        };
        let o_s = clipped_objective(&actor, &q, &data, &cfg_s, &mut rng).unwrap();
        assert!(
            o_exact.abs() < 1e-5,
            "exact advantage has zero mean under π: {o_exact}"
        );
        assert!((o_s - o_exact).abs() < 0.01, "{o_s} vs {o_exact}");
    }

    #[test]
    fn zero_learning_rate_is_a_no_op() {
        let (actor, q, data) = setup();
        let before = actor.to_dense().unwrap();
        let mut opt = Adam::new(actor.vars(), 1e-5).unwrap();
        let cfg = OffPolicyConfig {
            learning_rate: 0.0,
            ..Default::default()
        };
        let st = update_policy(
            &actor,
            &mut opt,
            &q,
            &data,
            &cfg,
            &mut StdRng::seed_from_u64(2),
        )
        .unwrap();
        assert_eq!(actor.to_dense().unwrap(), before);
        assert_eq!(st.kl, 0.0);
        assert_eq!(st.epochs, cfg.epochs);
    }

    /// [`setup`] with the critic fitted to the one-step reward (γ = 0): the rng and config
    /// to go on with, and the critic's final loss.
    fn with_fitted_critic() -> (MlpNet, QCritic, ReplayBatch, StdRng, OffPolicyConfig, f32) {
        let (actor, q, data) = setup();
        let mut rng = StdRng::seed_from_u64(3);
        let mut qopt = Adam::new(q.net.vars(), 1e-5).unwrap();
        let cfg = OffPolicyConfig {
            gamma: 0.0,
            q_epochs: 60,
            ..Default::default()
        };
        let loss = fit_critic(&q, &mut qopt, &actor, &data, &cfg, &mut rng).unwrap();
        (actor, q, data, rng, cfg, loss)
    }

    #[test]
    fn kl_limit_stops_early_and_the_policy_improves_on_q() {
        let (actor, q, data, mut rng, cfg, loss) = with_fitted_critic();
        assert!(loss < 0.2, "critic fits the one-step reward: {loss}");
        let mut opt = Adam::new(actor.vars(), 1e-5).unwrap();
        let cfg = OffPolicyConfig {
            learning_rate: 3e-2,
            epochs: 200,
            max_kl: 0.05,
            ..cfg
        };
        let st = update_policy(&actor, &mut opt, &q, &data, &cfg, &mut rng).unwrap();
        assert!(st.stopped_by_kl && st.epochs < 200, "{st:?}");
        assert!(st.kl > 0.05);
        // The updated policy prefers the rewarded action more often than chance.
        let n = data.len();
        let obs = tensor2(&data.obs, n, 4, &Device::Cpu).unwrap();
        let mask = Tensor::from_slice(&data.masks, (n, 3), &Device::Cpu).unwrap();
        let probs = policy_probs(&actor, &obs, &mask).unwrap();
        let good_p: f32 = (0..n)
            .map(|i| probs[i][if data.obs[i * 4] > 0.0 { 0 } else { 1 }])
            .sum::<f32>()
            / n as f32;
        assert!(
            good_p > 0.4,
            "mean probability of the rewarded action {good_p}"
        );
    }

    #[test]
    fn hard_kl_limit_returns_a_policy_within_the_limit() {
        let (actor, q, data, mut rng, cfg, _) = with_fitted_critic();
        let n = data.len();
        let obs = tensor2(&data.obs, n, 4, &Device::Cpu).unwrap();
        let mask = Tensor::from_slice(&data.masks, (n, 3), &Device::Cpu).unwrap();
        let before = policy_probs(&actor, &obs, &mask).unwrap();
        let mut opt = Adam::new(actor.vars(), 1e-5).unwrap();
        let cfg = OffPolicyConfig {
            learning_rate: 3e-2,
            epochs: 200,
            max_kl: 0.05,
            kl_hard_limit: true,
            ..cfg
        };
        let st = update_policy(&actor, &mut opt, &q, &data, &cfg, &mut rng).unwrap();
        assert!(st.stopped_by_kl && st.reverted_epoch, "{st:?}");
        let after = policy_probs(&actor, &obs, &mask).unwrap();
        let kl = mean_kl(&before, &after);
        assert!(kl <= 0.05, "kept policy's KL {kl} is within the limit");
        assert!(
            (kl - st.kl).abs() < 1e-6,
            "reported KL {} is the kept one's {kl}",
            st.kl
        );
        // When the first epoch already crosses the limit, nothing is kept, and the stats
        // say so: no epoch, no KL, and not the undone epoch's objective.
        let (actor, q, data, mut rng, cfg, _) = with_fitted_critic();
        let mut opt = Adam::new(actor.vars(), 1e-5).unwrap();
        let cfg = OffPolicyConfig {
            learning_rate: 3e-2,
            epochs: 5,
            max_kl: 1e-12,
            kl_hard_limit: true,
            ..cfg
        };
        let st = update_policy(&actor, &mut opt, &q, &data, &cfg, &mut rng).unwrap();
        assert!(st.reverted_epoch, "{st:?}");
        assert_eq!((st.epochs, st.kl, st.objective), (0, 0.0, 0.0), "{st:?}");
    }

    /// A small deterministic MDP with a masked action: states one-hot, action `a` moves to
    /// state `a`, state 2 forbids action 2. Rewards `R[s][a]` (`NaN` = masked).
    const MDP_R: [[f32; 3]; 3] = [[0.0, 1.0, 0.2], [0.5, 0.0, 2.0], [0.0, 0.3, f32::NAN]];
    const MDP_GAMMA: f32 = 0.8;

    fn mdp_mask(s: usize) -> [u8; 3] {
        if s == 2 {
            [1, 1, 0]
        } else {
            [1, 1, 1]
        }
    }

    /// Exact `Q^g` of the deterministic policy `g` by value iteration on the model.
    fn mdp_q(g: &[usize]) -> [[f32; 3]; 3] {
        let mut v = [0.0f32; 3];
        for _ in 0..2000 {
            v = [0, 1, 2].map(|s| MDP_R[s][g[s]] + MDP_GAMMA * v[g[s]]);
        }
        [0, 1, 2].map(|s| [0, 1, 2].map(|a| MDP_R[s][a] + MDP_GAMMA * v[a]))
    }

    /// The return of `g` averaged over the three start states.
    fn mdp_return(g: &[usize]) -> f32 {
        let q = mdp_q(g);
        (0..3).map(|s| q[s][g[s]]).sum::<f32>() / 3.0
    }

    /// Every allowed `(s, a)` 32 times, with its reward and next state.
    #[allow(clippy::needless_range_loop)] // `s` and `a` are states and actions, not just indices
    fn mdp_data() -> ReplayBatch {
        let mut b = ReplayBatch {
            obs_dim: 3,
            n_actions: 3,
            ..Default::default()
        };
        for _ in 0..32 {
            for s in 0..3 {
                for a in 0..3 {
                    if mdp_mask(s)[a] == 0 {
                        continue;
                    }
                    b.obs.extend((0..3).map(|i| f32::from(i == s)));
                    b.masks.extend(mdp_mask(s));
                    b.actions.push(a as u32);
                    b.rewards.push(MDP_R[s][a]);
                    b.next_obs.extend((0..3).map(|i| f32::from(i == a)));
                    b.next_masks.extend(mdp_mask(a));
                }
            }
        }
        b
    }

    /// A linear actor whose logits in state `s` are `logits[s]`: greedy (1, 0, 1), one
    /// improvement step from the optimum (1, 2, 1).
    fn mdp_actor() -> MlpNet {
        let logits = [[0.0, 0.3, 0.0], [0.3, 0.0, 0.1], [0.0, 0.3, 0.0]];
        let mut w = vec![0.0f32; 9];
        for (s, row) in logits.iter().enumerate() {
            for (a, &z) in row.iter().enumerate() {
                w[a * 3 + s] = z;
            }
        }
        let layer = greenwave_core::mlp::DenseLayer {
            inputs: 3,
            outputs: 3,
            weights: w,
            bias: vec![0.0; 3],
        };
        MlpNet::from_dense(&[layer], &Device::Cpu).unwrap()
    }

    fn mdp_greedy(actor: &MlpNet, data: &ReplayBatch) -> Vec<usize> {
        let obs = tensor2(&[1., 0., 0., 0., 1., 0., 0., 0., 1.], 3, 3, &Device::Cpu).unwrap();
        let _ = data;
        let mask = Tensor::from_slice(
            &[mdp_mask(0), mdp_mask(1), mdp_mask(2)].concat(),
            (3, 3),
            &Device::Cpu,
        )
        .unwrap();
        greedy_of(actor, &obs, &mask).unwrap()
    }

    fn mdp_cfg() -> OffPolicyConfig {
        OffPolicyConfig {
            gamma: MDP_GAMMA,
            q_epochs: 800,
            q_learning_rate: 0.03,
            minibatch: 32,
            epochs: 100,
            learning_rate: 0.03,
            clip_eps: 0.2,
            max_kl: 1.0,
            target: TargetPolicy::Greedy,
            ..Default::default()
        }
    }

    /// Fits the greedy-target critic on the MDP's data; returns it with its largest error
    /// against the exact `Q^g` of the actor's greedy policy.
    fn mdp_fitted_critic(actor: &MlpNet, data: &ReplayBatch) -> (QCritic, f32) {
        let mut rng = StdRng::seed_from_u64(7);
        let q = QCritic::new(3, 3, &[], &mut rng, &Device::Cpu).unwrap();
        let mut opt = Adam::new(q.net.vars(), 1e-8).unwrap();
        fit_critic(&q, &mut opt, actor, data, &mdp_cfg(), &mut rng).unwrap();
        let exact = mdp_q(&mdp_greedy(actor, data));
        let obs = tensor2(&[1., 0., 0., 0., 1., 0., 0., 0., 1.], 3, 3, &Device::Cpu).unwrap();
        let fitted: Vec<Vec<f32>> = q.net.forward(&obs).unwrap().to_vec2().unwrap();
        let err = (0..3)
            .flat_map(|s| (0..3).map(move |a| (s, a)))
            .filter(|&(s, a)| mdp_mask(s)[a] == 1)
            .map(|(s, a)| (fitted[s][a] - exact[s][a]).abs())
            .fold(0.0, f32::max);
        (q, err)
    }

    /// One policy step on the MDP with the critic's advantages multiplied by
    /// `advantage_sign` (−1: a deliberately reversed learner, to show the direction test can
    /// fail). Returns the greedy policy's return before and after.
    fn mdp_policy_step(advantage_sign: f32) -> (f32, f32) {
        let (actor, data) = (mdp_actor(), mdp_data());
        let before = mdp_return(&mdp_greedy(&actor, &data));
        let (q, _) = mdp_fitted_critic(&actor, &data);
        let mut layers = q.net.to_dense().unwrap();
        for l in &mut layers {
            l.weights.iter_mut().for_each(|w| *w *= advantage_sign);
            l.bias.iter_mut().for_each(|b| *b *= advantage_sign);
        }
        q.net.set_dense(&layers).unwrap();
        let mut opt = Adam::new(actor.vars(), 1e-8).unwrap();
        let mut rng = StdRng::seed_from_u64(8);
        update_policy(&actor, &mut opt, &q, &data, &mdp_cfg(), &mut rng).unwrap();
        (before, mdp_return(&mdp_greedy(&actor, &data)))
    }

    #[test]
    fn greedy_target_critic_recovers_the_known_q_with_masks_and_discount() {
        let (actor, data) = (mdp_actor(), mdp_data());
        assert_eq!(mdp_greedy(&actor, &data), [1, 0, 1]);
        let (_, err) = mdp_fitted_critic(&actor, &data);
        // Q^g ranges over 2.7 … 4.6 here: within 0.1 is within about 3 %.
        assert!(err < 0.1, "largest |Q̂ − Q^g| = {err}");
    }

    #[test]
    fn the_policy_step_improves_the_greedy_policy() {
        let (before, after) = mdp_policy_step(1.0);
        assert!(
            after > before + 1.0,
            "greedy return {before:.3} -> {after:.3}"
        );
    }

    #[test]
    fn a_reversed_advantage_sign_fails_the_improvement_check() {
        // The check of `the_policy_step_improves_the_greedy_policy` with the learner's
        // direction reversed: it must not hold, or that test could not fail.
        let (before, after) = mdp_policy_step(-1.0);
        assert!(
            after <= before + 1.0,
            "a reversed learner must not pass: {before:.3} -> {after:.3}"
        );
        assert!(
            after < before,
            "it makes the greedy policy worse: {before:.3} -> {after:.3}"
        );
    }
}
