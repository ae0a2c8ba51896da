//! The gate: is the candidate policy at least as good as the running one, judged on logged
//! data the update never saw, with the reward that was actually logged?
//!
//! The controller acts **greedily** (masked argmax; ε-greedy only while collecting data), so
//! what must not get worse is the greedy policy. The gate:
//!
//! 1. fits an *evaluation* critic `Q_e` by fitted-Q evaluation of the running greedy policy
//!    `g_old` on the held-back records only, with their logged rewards:
//!    `Q_e(s, a) ← r + γ Q_e(s', g_old(s'))` (a fresh network, independent of the critic the
//!    update was trained with, so an update cannot pass by exploiting its own critic's errors,
//!    and a reward knob on the update cannot reach it);
//! 2. estimates the change of return from switching to the candidate's greedy choice
//!    `g_new` over the held-back decision states:
//!    `Δ = mean_s [Q_e(s, g_new(s)) − Q_e(s, g_old(s))]` — by the performance-difference
//!    lemma, the first-order change of the expected discounted return, accurate while the
//!    two policies visit similar states (which the KL limit keeps so);
//! 3. accepts iff `Δ − z·stderr(Δ) ≥ −margin`, `KL(π_old ‖ π_new) ≤ max_kl` on the held-back
//!    states, there are enough held-back decision states, and — where the greedy choice
//!    changed — the log holds experience of phases other than the running policy's choice
//!    (without it `Q_e` of any other phase is pure extrapolation).
//!
//! The same `Q_e` also gives the stochastic policies' estimate
//! `Σ_a (π_new − π_old)(a|s) Q_e(s, a)`, reported for information.

use candle_core::{Device, Tensor};
use greenwave_learn::nets::Adam;
use greenwave_learn::offpolicy::{self, mean_kl, OffPolicyConfig, QCritic, ReplayBatch};
use greenwave_learn::MlpNet;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::FinetuneError;

/// Gate settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateConfig {
    /// Accept while the estimated change of return is at least `−margin` (return units,
    /// i.e. discounted reward; 0 = "not worse").
    pub margin: f32,
    /// Standard errors subtracted from the estimate before the comparison (0 = the point
    /// estimate; larger = more conservative).
    pub z: f32,
    /// Largest KL(π_old ‖ π_new) accepted, averaged over the held-back decision states.
    pub max_kl: f32,
    /// Fewest held-back decision states to judge on.
    pub min_states: usize,
    /// Fewest held-back decision records whose served phase is not the running policy's
    /// greedy choice (exploration, supervisor or fallback), required when the candidate's
    /// greedy choice differs anywhere.
    pub min_explored: usize,
    /// Discount of the evaluation critic.
    pub gamma: f32,
    /// Epochs of the evaluation critic.
    pub q_epochs: usize,
    /// Learning rate of the evaluation critic.
    pub q_learning_rate: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            margin: 0.0,
            z: 0.0,
            max_kl: 0.03,
            min_states: 200,
            min_explored: 20,
            gamma: 0.9,
            q_epochs: 30,
            q_learning_rate: 1e-3,
        }
    }
}

/// What the gate found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// Whether the candidate may be switched in.
    pub accepted: bool,
    /// Why (for a rejection: which check failed, with the numbers).
    pub reason: String,
    /// Held-back records.
    pub held_back_records: usize,
    /// Held-back decision states (more than one phase allowed).
    pub held_back_decision_states: usize,
    /// Held-back decision records whose served phase differs from the running policy's
    /// greedy choice.
    pub explored_records: usize,
    /// Final loss of the evaluation critic.
    pub eval_critic_loss: f32,
    /// Δ: estimated change of the greedy policy's return per decision state.
    pub estimate: f32,
    /// Standard error of Δ over the held-back decision states.
    pub estimate_stderr: f32,
    /// Mean `E_{π_old}[Q_e]` over the held-back decision states (the scale of Δ).
    pub running_value: f32,
    /// The stochastic policies' estimate (information only).
    pub stochastic_estimate: f32,
    /// Fraction of held-back decision states where the greedy choice changed.
    pub greedy_changed: f32,
    /// KL(π_old ‖ π_new) over the held-back decision states.
    pub kl: f32,
}

fn probs(actor: &MlpNet, data: &ReplayBatch, next: bool) -> Result<Vec<Vec<f32>>, FinetuneError> {
    let (n, d, a) = (data.len(), data.obs_dim, data.n_actions);
    let (obs, mask) = if next {
        (&data.next_obs, &data.next_masks)
    } else {
        (&data.obs, &data.masks)
    };
    let obs = Tensor::from_slice(obs, (n, d), &Device::Cpu)?;
    let mask = Tensor::from_slice(mask, (n, a), &Device::Cpu)?;
    Ok(offpolicy::policy_probs(actor, &obs, &mask)?)
}

/// The greedy choice per row (the controller's masked argmax; ties to the lower index).
fn greedy(p: &[Vec<f32>]) -> Vec<usize> {
    p.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &x)| if x > b.1 { (i, x) } else { b },
                )
                .0
        })
        .collect()
}

fn one_hot(idx: &[usize], a: usize) -> Vec<Vec<f32>> {
    idx.iter()
        .map(|&i| {
            let mut r = vec![0.0; a];
            r[i] = 1.0;
            r
        })
        .collect()
}

/// Judges `new` against `old` on the held-back records `held` (logged rewards).
/// `hidden` sizes the evaluation critic.
pub fn judge(
    old: &MlpNet,
    new: &MlpNet,
    held: &ReplayBatch,
    hidden: &[usize],
    cfg: &GateConfig,
    rng: &mut StdRng,
) -> Result<GateReport, FinetuneError> {
    let (n, d, a) = (held.len(), held.obs_dim, held.n_actions);
    let decision: Vec<usize> = super::data::decision_states(held);
    let mut rep = GateReport {
        held_back_records: n,
        held_back_decision_states: decision.len(),
        ..Default::default()
    };
    if decision.len() < cfg.min_states.max(1) {
        rep.reason = format!(
            "rejected: only {} held-back decision states (at least {} needed); log more",
            decision.len(),
            cfg.min_states.max(1)
        );
        return Ok(rep);
    }
    // 1. Fitted-Q evaluation of the running greedy policy on the held-back records.
    let next_greedy = one_hot(&greedy(&probs(old, held, true)?), a);
    let q = QCritic::new(d, a, hidden, rng, &Device::Cpu)?;
    let mut opt = Adam::new(q.net.vars(), 1e-5)?;
    let qcfg = OffPolicyConfig {
        gamma: cfg.gamma,
        q_epochs: cfg.q_epochs,
        q_learning_rate: cfg.q_learning_rate,
        ..OffPolicyConfig::default()
    };
    rep.eval_critic_loss = offpolicy::fit_critic_for(&q, &mut opt, &next_greedy, held, &qcfg, rng)?;
    // 2. Estimates over the decision states.
    let sub = held.select(&decision);
    let obs = Tensor::from_slice(&sub.obs, (sub.len(), d), &Device::Cpu)?;
    let q_all: Vec<Vec<f32>> = q.net.forward(&obs)?.to_vec2()?;
    let (p_old, p_new) = (probs(old, &sub, false)?, probs(new, &sub, false)?);
    let (g_old, g_new) = (greedy(&p_old), greedy(&p_new));
    let m = sub.len() as f32;
    let diffs: Vec<f32> = (0..sub.len())
        .map(|i| q_all[i][g_new[i]] - q_all[i][g_old[i]])
        .collect();
    let mean = diffs.iter().sum::<f32>() / m;
    let var = diffs.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / (m - 1.0).max(1.0);
    rep.estimate = mean;
    rep.estimate_stderr = (var / m).sqrt();
    let dot = |p: &[f32], q: &[f32]| p.iter().zip(q).map(|(p, q)| p * q).sum::<f32>();
    rep.running_value = (0..sub.len())
        .map(|i| dot(&p_old[i], &q_all[i]))
        .sum::<f32>()
        / m;
    rep.stochastic_estimate = (0..sub.len())
        .map(|i| dot(&p_new[i], &q_all[i]) - dot(&p_old[i], &q_all[i]))
        .sum::<f32>()
        / m;
    let changed = (0..sub.len()).filter(|&i| g_new[i] != g_old[i]).count();
    rep.greedy_changed = changed as f32 / m;
    rep.explored_records = (0..sub.len())
        .filter(|&i| sub.actions[i] as usize != g_old[i])
        .count();
    rep.kl = mean_kl(&p_old, &p_new);
    // 3. The decision; the first failed check is the reason.
    let lower = rep.estimate - cfg.z * rep.estimate_stderr;
    rep.reason = if !rep.kl.is_finite() || rep.kl > cfg.max_kl {
        format!(
            "rejected: KL to the running policy {:.4} exceeds the limit {:.4}",
            rep.kl, cfg.max_kl
        )
    } else if changed > 0 && rep.explored_records < cfg.min_explored {
        format!(
            "rejected: the greedy choice changes in {:.1}% of states, but only {} held-back \
             records served another phase than the running policy's (at least {} needed); \
             collect with exploration (run --epsilon)",
            100.0 * rep.greedy_changed,
            rep.explored_records,
            cfg.min_explored
        )
    } else if !lower.is_finite() || lower < -cfg.margin {
        format!(
            "rejected: off-policy estimate says worse than the running policy: \
             Δ = {:+.4} ± {:.4} per decision (running value {:.3}), below −{} with z = {}",
            rep.estimate, rep.estimate_stderr, rep.running_value, cfg.margin, cfg.z
        )
    } else {
        rep.accepted = true;
        format!(
            "accepted: Δ = {:+.4} ± {:.4} per decision (running value {:.3}), greedy choice \
             changed in {:.1}% of states, KL {:.4} ≤ {:.4}",
            rep.estimate,
            rep.estimate_stderr,
            rep.running_value,
            100.0 * rep.greedy_changed,
            rep.kl,
            cfg.max_kl
        )
    };
    Ok(rep)
}
