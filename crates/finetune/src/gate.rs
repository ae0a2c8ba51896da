//! The gate: a one-sided statistical test that the candidate's **greedy** policy is better
//! than the running policy's greedy policy, judged on logged data the update never saw (the
//! most recent records), with the reward that was actually logged.
//!
//! The controller acts greedily (masked argmax; ε-greedy only while collecting data), so
//! the gate compares `g_new(s) = argmax π_new(·|s)` with `g_old(s) = argmax π_old(·|s)`
//! under the deployed masks. On the held-back records it:
//!
//! 1. refuses a candidate whose greedy choice changes nowhere (nothing to gain), and one
//!    whose changed choices the log has not tried: it needs `min_covered` held-back records
//!    where `g_new(s) ≠ g_old(s)` and the policy's exploration served exactly `g_new(s)`
//!    (supervisor and fallback records do not count: they were not chosen in that state);
//! 2. fits an ensemble of `ensemble` evaluation critics by fitted-Q evaluation of `g_old`,
//!    `Q_k(s, a) ← r + γ Q_k(s', g_old(s'))`, each on its own moving-block bootstrap
//!    resample of the held-back records (fresh networks, independent of the update's critic,
//!    so a candidate cannot pass by exploiting that critic's errors);
//! 3. checks each critic's fit on the records its resample left out: the explained
//!    variance of its one-step targets, `1 − Var(y − Q_k(s, a)) / Var(y)`, must reach
//!    `min_explained_variance`, else the gate refuses (the critic has not learnt enough to
//!    judge);
//! 4. estimates, per held-back decision state, the doubly-robust change of return of
//!    deviating to `g_new` once and then following `g_old`
//!    (`Δ_i = Q(s, g_new) − Q(s, g_old) + (1[a = g_new] − 1[a = g_old]) / μ(a|s) · δ`,
//!    `δ = r + γ Q(s', g_old(s')) − Q(s, a)`, with the logged behaviour probability `μ`
//!    where the policy chose the served phase, the direct estimate alone elsewhere); by the
//!    performance-difference lemma its mean is the first-order change of the discounted
//!    return;
//! 5. forms `bootstrap` replicates of the mean, each with one critic of the ensemble (in
//!    turn) and a moving-block bootstrap of the per-state series over time (blocks of
//!    `block_records` consecutive records per signal, so autocorrelated neighbours stay
//!    together):
//!    the spread covers both the sampling of traffic and the critic's own error;
//! 6. accepts only when the lower `1 − level` quantile of the replicates is above zero
//!    (default: a one-sided 95 % lower bound), and the KL to the running policy is within
//!    `max_kl` (a trust region: the estimate is first order).
//!
//! Every refusal names the failed check with its numbers.

use std::collections::BTreeSet;

use candle_core::{Device, Tensor};
use greenwave_core::ActionSource;
use greenwave_learn::nets::Adam;
use greenwave_learn::offpolicy::{self, mean_kl, one_hot, OffPolicyConfig, QCritic, ReplayBatch};
use greenwave_learn::MlpNet;
use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::data::RecordMeta;
use super::FinetuneError;

/// Gate settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GateConfig {
    /// One-sided confidence level of the lower bound on the improvement (0.95: accept only
    /// if the improvement is positive with 95 % confidence).
    pub level: f32,
    /// Largest KL(π_old ‖ π_new) accepted, averaged over the held-back decision states.
    pub max_kl: f32,
    /// Fewest held-back decision states to judge on.
    pub min_states: usize,
    /// Fewest held-back records where the candidate's greedy choice differs from the
    /// running one's and the policy's exploration served exactly the candidate's choice.
    pub min_covered: usize,
    /// Evaluation critics in the ensemble (each on its own bootstrap resample).
    pub ensemble: usize,
    /// Bootstrap replicates of the mean improvement.
    pub bootstrap: usize,
    /// Records per moving block, per signal (consecutive decisions of one signal: with `k`
    /// signals in the log a block is `k` times as many records): the bootstrap's unit.
    pub block_records: usize,
    /// Smallest explained variance of each critic's one-step targets on the held-back
    /// records its resample left out.
    pub min_explained_variance: f32,
    /// Largest importance weight `1 / μ(a|s)` in the doubly-robust correction.
    pub max_importance_weight: f32,
    /// Epochs of each evaluation critic.
    pub q_epochs: usize,
    /// Learning rate of the evaluation critics.
    pub q_learning_rate: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            level: 0.95,
            max_kl: 0.03,
            min_states: 200,
            min_covered: 30,
            ensemble: 5,
            bootstrap: 2000,
            block_records: 120,
            min_explained_variance: 0.5,
            max_importance_weight: 50.0,
            q_epochs: 60,
            q_learning_rate: 1e-3,
        }
    }
}

impl GateConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), String> {
        // Below 90 % a one-sided bound lets one worse candidate in ten through; with no
        // covered record the correction is absent and the bound is the critics' alone.
        if !(self.level >= 0.9 && self.level < 1.0) {
            return Err(format!("gate level {} must be in [0.9, 1)", self.level));
        }
        if self.min_covered == 0 {
            return Err("gate: at least 1 covered record (the default is 30)".into());
        }
        if !(self.max_kl > 0.0 && self.max_kl.is_finite()) {
            return Err(format!("gate KL limit {} must be > 0", self.max_kl));
        }
        if self.ensemble == 0 || self.bootstrap < 100 || self.block_records == 0 {
            return Err("gate: ensemble ≥ 1, bootstrap ≥ 100, block ≥ 1 record".into());
        }
        if self.max_importance_weight.is_nan() || self.max_importance_weight < 1.0 {
            return Err("gate: the importance-weight cap must be ≥ 1".into());
        }
        Ok(())
    }
}

/// What the gate found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GateReport {
    /// Whether the candidate may be switched in.
    pub accepted: bool,
    /// Why (for a refusal: which check failed, with the numbers).
    pub reason: String,
    /// Held-back records.
    pub held_back_records: usize,
    /// Held-back decision states (more than one phase allowed).
    pub held_back_decision_states: usize,
    /// Held-back decision states where the candidate's greedy choice differs.
    pub changed_states: usize,
    /// Of those, records where the policy's exploration served the candidate's choice.
    pub covered_records: usize,
    /// How many such records the logged exploration made likely: the sum over the
    /// changed states of the behaviour probability of the candidate's choice (ε-greedy:
    /// ε / allowed phases, ε recovered from each record's logged probability). Sizes the
    /// "log more" advice; the gate decides on `covered_records`.
    #[serde(default)]
    pub expected_covered: f32,
    /// Smallest explained variance of the ensemble's critics (out of resample).
    pub explained_variance: f32,
    /// Δ: estimated change of discounted return per decision state (mean over the
    /// ensemble, doubly robust).
    pub estimate: f32,
    /// The lower bound of Δ at `level`.
    pub lower_bound: f32,
    /// The confidence level of `lower_bound`.
    pub level: f32,
    /// Mean `Q(s, g_old(s))` over the held-back decision states (the scale of Δ).
    pub running_value: f32,
    /// Fraction of held-back decision states where the greedy choice changed.
    pub greedy_changed: f32,
    /// KL(π_old ‖ π_new) over the held-back decision states.
    pub kl: f32,
}

fn probs(actor: &MlpNet, data: &ReplayBatch, next: bool) -> Result<Vec<Vec<f32>>, FinetuneError> {
    let (obs, mask) = states(data, next)?;
    Ok(offpolicy::policy_probs(actor, &obs, &mask)?)
}

/// The controller's choice per record of `data` (its next states if `next`).
fn greedy(actor: &MlpNet, data: &ReplayBatch, next: bool) -> Result<Vec<usize>, FinetuneError> {
    let (obs, mask) = states(data, next)?;
    Ok(offpolicy::greedy_of(actor, &obs, &mask)?)
}

/// The observations and masks of `data`'s records (of their next states if `next`).
fn states(data: &ReplayBatch, next: bool) -> Result<(Tensor, Tensor), FinetuneError> {
    let (n, d, a) = (data.len(), data.obs_dim, data.n_actions);
    let (obs, mask) = if next {
        (&data.next_obs, &data.next_masks)
    } else {
        (&data.obs, &data.masks)
    };
    Ok((
        Tensor::from_slice(obs, (n, d), &Device::Cpu)?,
        Tensor::from_slice(mask, (n, a), &Device::Cpu)?,
    ))
}

fn q_rows(q: &QCritic, obs: &[f32], n: usize, d: usize) -> Result<Vec<Vec<f32>>, FinetuneError> {
    let t = Tensor::from_slice(obs, (n, d), &Device::Cpu)?;
    Ok(q.net.forward(&t)?.to_vec2()?)
}

/// Moving-block bootstrap indices of a series of length `n`: `ceil(n / block)` blocks of
/// `block` consecutive indices, each starting uniformly in `0..=n − block`, cut to `n`.
pub fn block_resample(n: usize, block: usize, rng: &mut StdRng) -> Vec<usize> {
    let block = block.clamp(1, n.max(1));
    let mut idx = Vec::with_capacity(n + block);
    while idx.len() < n {
        let start = rng.random_range(0..=n - block);
        idx.extend(start..start + block);
    }
    idx.truncate(n);
    idx
}

/// The `p` quantile of `v` (sorted in place; nearest rank: the ⌈p·n⌉-th smallest, so that
/// at most a fraction `p` of the values lie below it). `p·n` within 10⁻³ of a whole number
/// counts as that number (`1 − 0.95` is 0.050000012 in `f32`).
fn quantile(v: &mut [f32], p: f32) -> f32 {
    v.sort_by(f32::total_cmp);
    let r = f64::from(p) * v.len() as f64;
    let rank = if (r - r.round()).abs() < 1e-3 {
        r.round()
    } else {
        r.ceil()
    };
    let k = (rank as usize)
        .saturating_sub(1)
        .min(v.len().saturating_sub(1));
    v[k]
}

/// What one evaluation critic says about the held-back records.
struct CriticView {
    /// Per decision state (in order): doubly-robust Δ.
    delta: Vec<f32>,
    /// Mean `Q(s, g_old(s))` over the decision states.
    running_value: f32,
    /// Explained variance of the one-step targets out of resample.
    explained_variance: f32,
}

/// The held-back data and the two greedy policies on it.
pub struct Judged<'a> {
    /// Held-back records.
    pub held: &'a ReplayBatch,
    /// Their sources and behaviour probabilities.
    pub meta: &'a [RecordMeta],
    /// The per-decision discount.
    pub gamma: f32,
}

struct Greedy {
    decision: Vec<usize>,
    old: Vec<usize>,
    new: Vec<usize>,
    next_old: Vec<usize>,
}

/// One evaluation critic: fitted by FQE of `g_old` on a resample of the held-back records
/// in blocks of `block` ([`block_records`]), checked on the records left out, and its
/// per-decision-state `Δ`.
fn fit_view(
    j: &Judged<'_>,
    g: &Greedy,
    (hidden, block): (&[usize], usize),
    cfg: &GateConfig,
    rng: &mut StdRng,
) -> Result<CriticView, FinetuneError> {
    let held = j.held;
    let (n, d) = (held.len(), held.obs_dim);
    let (q, in_sample) = fit_critic(j, g, (hidden, block), cfg, rng)?;
    let q_s = q_rows(&q, &held.obs, n, d)?;
    let q_next = q_rows(&q, &held.next_obs, n, d)?;
    // One-step targets and residuals, for the fit check (out of resample) and δ.
    let target: Vec<f32> = (0..n)
        .map(|i| held.rewards[i] + j.gamma * q_next[i][g.next_old[i]])
        .collect();
    let resid: Vec<f32> = (0..n)
        .map(|i| target[i] - q_s[i][held.actions[i] as usize])
        .collect();
    let running_value = g
        .decision
        .iter()
        .enumerate()
        .map(|(k, &i)| q_s[i][g.old[k]])
        .sum::<f32>()
        / g.decision.len().max(1) as f32;
    Ok(CriticView {
        delta: deltas(j, g, &q_s, &resid, cfg.max_importance_weight),
        running_value,
        explained_variance: out_of_sample_fit(&target, &resid, &in_sample),
    })
}

/// Records per bootstrap block: `block_records` per signal. The records of several
/// signals interleave in the log, and each signal's own series is what is correlated over
/// time, so `k` signals need blocks `k` times as long to keep as much of it together.
fn block_records(j: &Judged<'_>, cfg: &GateConfig) -> usize {
    let signals = j
        .meta
        .iter()
        .map(|r| r.signal)
        .collect::<BTreeSet<_>>()
        .len();
    cfg.block_records.saturating_mul(signals.max(1))
}

/// A refusal where the held-back records hold fewer than two bootstrap blocks of `block`
/// records: every resample would then be the whole series, and the interval the critics'
/// spread alone.
fn too_few_blocks(j: &Judged<'_>, block: usize, cfg: &GateConfig) -> Option<String> {
    (j.held.len() < 2 * block).then(|| {
        format!(
            "refused: {} held-back records are fewer than two bootstrap blocks of {block} \
             ({} records per signal of the log): too few to judge the traffic's variation; \
             log more",
            j.held.len(),
            cfg.block_records
        )
    })
}

/// A fresh critic fitted by FQE of `g_old` on a moving-block resample of the held-back
/// records (blocks of `block`), and which records the resample holds.
fn fit_critic(
    j: &Judged<'_>,
    g: &Greedy,
    (hidden, block): (&[usize], usize),
    cfg: &GateConfig,
    rng: &mut StdRng,
) -> Result<(QCritic, Vec<bool>), FinetuneError> {
    let held = j.held;
    let (n, d, a) = (held.len(), held.obs_dim, held.n_actions);
    let sample = block_resample(n, block, rng);
    let mut in_sample = vec![false; n];
    sample.iter().for_each(|&i| in_sample[i] = true);
    let fit_on = held.select(&sample);
    let next_old: Vec<usize> = sample.iter().map(|&i| g.next_old[i]).collect();
    let q = QCritic::new(d, a, hidden, rng, &Device::Cpu)?;
    let mut opt = Adam::new(q.net.vars(), 1e-5)?;
    let qcfg = OffPolicyConfig {
        gamma: j.gamma,
        q_epochs: cfg.q_epochs,
        q_learning_rate: cfg.q_learning_rate,
        ..OffPolicyConfig::default()
    };
    offpolicy::fit_critic_for(&q, &mut opt, &one_hot(&next_old, a), &fit_on, &qcfg, rng)?;
    Ok((q, in_sample))
}

/// The explained variance `1 − Var(resid) / Var(target)` over the records out of the
/// resample; NaN with fewer than two of them or targets without variance.
fn out_of_sample_fit(target: &[f32], resid: &[f32], in_sample: &[bool]) -> f32 {
    let oob: Vec<usize> = (0..target.len()).filter(|&i| !in_sample[i]).collect();
    let var = |v: &mut dyn Iterator<Item = f32>| {
        let v: Vec<f32> = v.collect();
        let m = v.iter().sum::<f32>() / v.len().max(1) as f32;
        v.iter().map(|x| (x - m).powi(2)).sum::<f32>() / v.len().max(1) as f32
    };
    let var_y = var(&mut oob.iter().map(|&i| target[i]));
    let var_r = var(&mut oob.iter().map(|&i| resid[i]));
    if oob.len() < 2 || var_y <= 0.0 {
        f32::NAN
    } else {
        1.0 - var_r / var_y
    }
}

/// The doubly-robust `Δ` per decision state (0 where the greedy choice is unchanged), with
/// the critic's values `q_s`, its one-step residuals and importance weights capped at `cap`.
fn deltas(j: &Judged<'_>, g: &Greedy, q_s: &[Vec<f32>], resid: &[f32], cap: f32) -> Vec<f32> {
    let held = j.held;
    g.decision
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let (go, gn) = (g.old[k], g.new[k]);
            if go == gn {
                return 0.0;
            }
            let mut v = q_s[i][gn] - q_s[i][go];
            let served = held.actions[i] as usize;
            if let (Some(mu), ActionSource::Policy) = (j.meta[i].behaviour_prob, j.meta[i].source) {
                let w = (1.0 / mu).min(cap);
                if served == gn {
                    v += w * resid[i];
                } else if served == go {
                    v -= w * resid[i];
                }
            }
            v
        })
        .collect()
}

/// Judges `new` against `old` on the held-back records. `hidden` sizes the evaluation
/// critics.
pub fn judge(
    old: &MlpNet,
    new: &MlpNet,
    j: &Judged<'_>,
    hidden: &[usize],
    cfg: &GateConfig,
    rng: &mut StdRng,
) -> Result<GateReport, FinetuneError> {
    let held = j.held;
    let decision = super::data::decision_states(held);
    let mut rep = GateReport {
        held_back_records: held.len(),
        held_back_decision_states: decision.len(),
        level: cfg.level,
        ..Default::default()
    };
    if decision.len() < cfg.min_states.max(1) {
        rep.reason = format!(
            "refused: only {} held-back decision states (at least {} needed); log more",
            decision.len(),
            cfg.min_states.max(1)
        );
        return Ok(rep);
    }
    let sub = held.select(&decision);
    let (p_old, p_new) = (probs(old, &sub, false)?, probs(new, &sub, false)?);
    let g = Greedy {
        old: greedy(old, &sub, false)?,
        new: greedy(new, &sub, false)?,
        next_old: greedy(old, held, true)?,
        decision,
    };
    count_changes(&mut rep, j, &g);
    rep.kl = mean_kl(&p_old, &p_new);
    let block_records = block_records(j, cfg);
    if let Some(why) = precheck(&rep, cfg).or_else(|| too_few_blocks(j, block_records, cfg)) {
        rep.reason = why;
        return Ok(rep);
    }
    let views: Vec<CriticView> = (0..cfg.ensemble)
        .map(|_| fit_view(j, &g, (hidden, block_records), cfg, rng))
        .collect::<Result<_, _>>()?;
    let m = g.decision.len();
    summarise_views(&mut rep, &views, m);
    let block = (block_records * m).div_ceil(held.len().max(1)).max(1);
    let mut reps: Vec<f32> = (0..cfg.bootstrap)
        .map(|b| {
            let v = &views[b % views.len()].delta;
            block_resample(m, block, rng)
                .iter()
                .map(|&i| v[i])
                .sum::<f32>()
                / m as f32
        })
        .collect();
    // A NaN replicate would sort above +∞ or below −∞ by its sign bit (which differs
    // between CPUs): no bound is taken from a bootstrap with one.
    rep.lower_bound = if reps.iter().all(|x| x.is_finite()) {
        quantile(&mut reps, 1.0 - cfg.level)
    } else {
        f32::NAN
    };
    rep.reason = verdict(&mut rep, cfg);
    Ok(rep)
}

/// Where the greedy choice changes, and how many of those records (and how many expected)
/// the policy's exploration served the new choice in.
fn count_changes(rep: &mut GateReport, j: &Judged<'_>, g: &Greedy) {
    let held = j.held;
    let m = g.decision.len();
    let changed: Vec<usize> = (0..m).filter(|&k| g.old[k] != g.new[k]).collect();
    rep.changed_states = changed.len();
    rep.greedy_changed = changed.len() as f32 / m as f32;
    rep.covered_records = changed
        .iter()
        .filter(|&&k| {
            let i = g.decision[k];
            // Only a record with its logged probability corrects the critics (`deltas`).
            j.meta[i].source == ActionSource::Policy
                && j.meta[i].behaviour_prob.is_some()
                && held.actions[i] as usize == g.new[k]
        })
        .count();
    rep.expected_covered = changed
        .iter()
        .map(|&k| {
            let i = g.decision[k];
            exploration_prob(held, &j.meta[i], i, g.old[k])
        })
        .sum();
}

/// The ensemble's worst fit (NaN if any is NaN), mean running value and mean estimate over
/// the `m` decision states.
fn summarise_views(rep: &mut GateReport, views: &[CriticView], m: usize) {
    rep.explained_variance =
        views
            .iter()
            .map(|v| v.explained_variance)
            .fold(f32::INFINITY, |a, b| {
                if a.is_nan() || b.is_nan() {
                    f32::NAN
                } else {
                    a.min(b)
                }
            });
    let k = views.len() as f32;
    rep.running_value = views.iter().map(|v| v.running_value).sum::<f32>() / k;
    rep.estimate = views
        .iter()
        .map(|v| v.delta.iter().sum::<f32>() / m as f32)
        .sum::<f32>()
        / k;
}

/// The probability that the logged ε-greedy exploration served one given non-greedy phase
/// in record `i` (greedy choice `greedy`): ε / n with n allowed phases, ε recovered from the
/// logged probability of the served phase (`1 − ε + ε/n` if it was the greedy one, `ε/n`
/// otherwise). 0 where the policy did not choose (supervisor, fallback) or nothing is
/// logged.
fn exploration_prob(held: &ReplayBatch, meta: &RecordMeta, i: usize, greedy: usize) -> f32 {
    let (ActionSource::Policy, Some(p)) = (meta.source, meta.behaviour_prob) else {
        return 0.0;
    };
    let a = held.n_actions;
    let n = held.masks[i * a..(i + 1) * a]
        .iter()
        .filter(|&&m| m == 1)
        .count() as f32;
    if n < 2.0 {
        return 0.0;
    }
    let eps = if held.actions[i] as usize == greedy {
        (1.0 - p) * n / (n - 1.0)
    } else {
        p * n
    };
    eps.clamp(0.0, 1.0) / n
}

/// The checks that need no critic; `Some(reason)` refuses.
fn precheck(rep: &GateReport, cfg: &GateConfig) -> Option<String> {
    if rep.changed_states == 0 {
        return Some(format!(
            "refused: the candidate's greedy choice equals the running policy's in all {} \
             held-back decision states: nothing would change",
            rep.held_back_decision_states
        ));
    }
    if !rep.kl.is_finite() || rep.kl > cfg.max_kl {
        return Some(format!(
            "refused: KL to the running policy {:.4} exceeds the limit {:.4}",
            rep.kl, cfg.max_kl
        ));
    }
    if rep.covered_records < cfg.min_covered {
        let advice = if rep.expected_covered > 0.0 {
            format!(
                "the logged exploration makes {:.1} expected here: about {:.0}× the held-back \
                 data at this exploration rate",
                rep.expected_covered,
                (cfg.min_covered as f32 / rep.expected_covered).ceil()
            )
        } else {
            "the log has no exploration: run with --epsilon 0.1".to_string()
        };
        return Some(format!(
            "refused: the greedy choice changes in {} held-back decision states ({:.1}%), but \
             the policy's exploration served the new choice in only {} of them (at least {} \
             needed): log more with exploration; {advice}",
            rep.changed_states,
            100.0 * rep.greedy_changed,
            rep.covered_records,
            cfg.min_covered,
        ));
    }
    None
}

fn verdict(rep: &mut GateReport, cfg: &GateConfig) -> String {
    let pct = 100.0 * cfg.level;
    if rep.explained_variance.is_nan() || rep.explained_variance < cfg.min_explained_variance {
        return format!(
            "refused: the evaluation critics explain only {:.2} of the variance of their \
             held-back targets (at least {:.2} needed): too little or too noisy data to judge",
            rep.explained_variance, cfg.min_explained_variance
        );
    }
    if !(rep.estimate.is_finite() && rep.lower_bound.is_finite()) {
        return format!(
            "refused: the critics' Δ is not finite (estimate {}, lower bound {}): the \
             held-back data or the critics hold NaN or infinite values",
            rep.estimate, rep.lower_bound
        );
    }
    let what = format!(
        "Δ = {:+.4} per decision (running value {:.3}), {pct:.0}% lower bound {:+.4}; greedy \
         choice changed in {:.1}% of {} held-back decision states, {} covered by \
         exploration; critics' explained variance ≥ {:.2}; KL {:.4}",
        rep.estimate,
        rep.running_value,
        rep.lower_bound,
        100.0 * rep.greedy_changed,
        rep.held_back_decision_states,
        rep.covered_records,
        rep.explained_variance,
        rep.kl
    );
    if rep.lower_bound > 0.0 {
        rep.accepted = true;
        format!("accepted: {what}")
    } else {
        format!("refused: improvement not shown at {pct:.0}%: {what}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The doubly-robust Δ of each state, by hand: a candidate whose choice the critic values
    /// higher gains, the logged outcome of the choice corrects it by its residual over μ
    /// (added for the new choice, taken away for the old), and an unchanged choice counts
    /// 0. A sign flipped anywhere fails this.
    #[test]
    fn deltas_are_the_doubly_robust_change_with_its_signs() {
        let held = ReplayBatch {
            n_actions: 2,
            actions: vec![1, 0, 1, 0],
            ..Default::default()
        };
        let policy = |p: f32| RecordMeta {
            source: ActionSource::Policy,
            signal: 0,
            behaviour_prob: Some(p),
        };
        let meta = [
            policy(0.25),
            policy(0.5),
            RecordMeta {
                source: ActionSource::Supervisor,
                signal: 0,
                behaviour_prob: None,
            },
            policy(1.0),
        ];
        let j = Judged {
            held: &held,
            meta: &meta,
            gamma: 0.9,
        };
        let g = Greedy {
            decision: vec![0, 1, 2, 3],
            old: vec![0, 0, 0, 0],
            new: vec![1, 1, 1, 0],
            next_old: vec![0; 4],
        };
        let q_s = vec![vec![1.0, 3.0]; 4];
        let resid = [0.5, -1.0, 7.0, 9.0];
        let d = deltas(&j, &g, &q_s, &resid, 50.0);
        // 0: served the new choice (explored, μ = 0.25): 2 + 0.5 / 0.25.
        // 1: served the old (μ = 0.5): 2 − (−1) / 0.5. 2: the supervisor's: the critic's 2.
        // 3: the choice did not change: 0.
        assert_eq!(d, vec![4.0, 4.0, 2.0, 0.0]);
        // The cap bounds the weight.
        assert_eq!(deltas(&j, &g, &q_s, &resid, 3.0)[0], 2.0 + 0.5 * 3.0);
    }

    /// Only a policy's record with its logged probability counts as covering a changed
    /// choice: the one without corrects nothing (`deltas`), the supervisor's is no choice.
    #[test]
    fn coverage_counts_the_records_that_correct_the_critics() {
        let held = ReplayBatch {
            n_actions: 2,
            actions: vec![1, 1, 1, 0],
            masks: vec![1; 8],
            ..Default::default()
        };
        let meta = |source, behaviour_prob| RecordMeta {
            source,
            signal: 0,
            behaviour_prob,
        };
        let meta = [
            meta(ActionSource::Policy, Some(0.1)),
            meta(ActionSource::Policy, None),
            meta(ActionSource::Supervisor, None),
            meta(ActionSource::Policy, Some(0.9)),
        ];
        let j = Judged {
            held: &held,
            meta: &meta,
            gamma: 0.9,
        };
        let g = Greedy {
            decision: vec![0, 1, 2, 3],
            old: vec![0; 4],
            new: vec![1; 4],
            next_old: vec![0; 4],
        };
        let mut rep = GateReport::default();
        count_changes(&mut rep, &j, &g);
        assert_eq!((rep.changed_states, rep.covered_records), (4, 1));
    }

    /// A Δ or bound that is not finite refuses, whatever its sign bit.
    #[test]
    fn a_non_finite_estimate_or_bound_is_refused() {
        let cfg = GateConfig::default();
        for (estimate, lower_bound) in [
            (f32::NAN, 1.0),
            (1.0, f32::NAN),
            (1.0, -f32::NAN),
            (f32::INFINITY, 1.0),
        ] {
            let mut rep = GateReport {
                explained_variance: 1.0,
                estimate,
                lower_bound,
                ..Default::default()
            };
            let why = verdict(&mut rep, &cfg);
            assert!(!rep.accepted && why.contains("not finite"), "{why}");
        }
    }

    /// Blocks are 120 records per signal, and the records must hold two of them: 300 records
    /// of one signal do; 300 of two interleaved signals (blocks of 240) do not.
    #[test]
    fn blocks_grow_with_the_signals_and_two_are_needed() {
        let held = ReplayBatch {
            n_actions: 2,
            actions: vec![0; 300],
            ..Default::default()
        };
        let meta = |signals: u16| -> Vec<RecordMeta> {
            (0..300u16)
                .map(|i| RecordMeta {
                    source: ActionSource::Policy,
                    signal: i % signals,
                    behaviour_prob: Some(1.0),
                })
                .collect()
        };
        let cfg = GateConfig::default();
        let (one, two) = (meta(1), meta(2));
        let one = Judged {
            held: &held,
            meta: &one,
            gamma: 0.9,
        };
        let two = Judged { meta: &two, ..one };
        assert_eq!(block_records(&one, &cfg), 120);
        assert_eq!(block_records(&two, &cfg), 240);
        assert_eq!(too_few_blocks(&one, 120, &cfg), None);
        let why = too_few_blocks(&two, 240, &cfg).unwrap();
        assert!(why.contains("two bootstrap blocks of 240"), "{why}");
    }

    /// Accepted only with a positive, finite lower bound and a fitted critic.
    #[test]
    fn the_verdict_accepts_only_a_positive_lower_bound() {
        let cfg = GateConfig::default();
        let judged = |lower_bound: f32, explained_variance: f32| {
            let mut rep = GateReport {
                lower_bound,
                explained_variance,
                ..Default::default()
            };
            let reason = verdict(&mut rep, &cfg);
            (rep.accepted, reason)
        };
        assert!(judged(0.01, 0.9).0);
        for (lb, ev) in [
            (-0.01, 0.9),
            (0.0, 0.9),
            (f32::NAN, 0.9),
            (f32::INFINITY, 0.9),
            (0.5, 0.4),
            (0.5, f32::NAN),
        ] {
            let (accepted, reason) = judged(lb, ev);
            assert!(
                !accepted && reason.starts_with("refused"),
                "{lb} {ev}: {reason}"
            );
        }
    }

    #[test]
    fn block_resample_keeps_blocks_and_length() {
        let mut rng = StdRng::seed_from_u64(1);
        let idx = block_resample(100, 10, &mut rng);
        assert_eq!(idx.len(), 100);
        for c in idx.chunks(10) {
            assert!(c.windows(2).all(|w| w[1] == w[0] + 1), "{c:?}");
        }
        assert_eq!(block_resample(3, 10, &mut rng).len(), 3);
    }

    #[test]
    fn exploration_prob_recovers_epsilon_over_allowed_phases() {
        // Three records, four phases; ε = 0.1. Record 0: greedy phase 1 served, all four
        // allowed. Record 1: phase 3 explored, two allowed. Record 2: the supervisor served.
        let held = ReplayBatch {
            n_actions: 4,
            masks: vec![1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1],
            actions: vec![1, 3, 0],
            ..Default::default()
        };
        let policy = |p: f32| RecordMeta {
            source: ActionSource::Policy,
            signal: 0,
            behaviour_prob: Some(p),
        };
        let eps = 0.1f32;
        let p0 = exploration_prob(&held, &policy(1.0 - eps + eps / 4.0), 0, 1);
        assert!((p0 - eps / 4.0).abs() < 1e-6, "{p0}");
        let p1 = exploration_prob(&held, &policy(eps / 2.0), 1, 1);
        assert!((p1 - eps / 2.0).abs() < 1e-6, "{p1}");
        assert_eq!(
            exploration_prob(&held, &policy(1.0), 0, 1),
            0.0,
            "greedy log"
        );
        let sup = RecordMeta {
            source: ActionSource::Supervisor,
            signal: 0,
            behaviour_prob: None,
        };
        assert_eq!(exploration_prob(&held, &sup, 2, 1), 0.0);
    }

    #[test]
    fn quantile_is_nearest_rank() {
        let mut v: Vec<f32> = (0..100).rev().map(|x| x as f32).collect();
        // The 5th smallest of 0..100: five values (0–4) at or below it, not six.
        assert_eq!(quantile(&mut v, 0.05), 4.0);
        assert_eq!(quantile(&mut v, 1.0 - 0.95), 4.0);
        let mut reps: Vec<f32> = (0..2000).map(|x| x as f32).collect();
        assert_eq!(quantile(&mut reps, 1.0 - 0.95), 99.0);
        assert_eq!(quantile(&mut v, 0.0), 0.0);
        assert_eq!(quantile(&mut v, 1.0), 99.0);
        assert_eq!(quantile(&mut v, 0.051), 5.0);
    }
}
