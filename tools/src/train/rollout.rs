//! Rollout collection: N environments stepped in parallel worker threads, each thread
//! running its own environments with a plain-Rust copy of the policy and its own seeded
//! random stream, so results do not depend on thread timing.

use greenwave_core::mlp::masked_log_prob;
use greenwave_core::PhaseMask;
use greenwave_learn::shared::Incidence;
use greenwave_learn::weights::dense_forward;
use greenwave_learn::{ObsNormalization, PolicyWeights, SharedWeights};
use greenwave_sim::{Env, EnvError, EpisodeMetrics};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One agent's (environment × signal) experience over a rollout, time-ordered.
#[derive(Clone, Debug, Default)]
pub struct AgentTrajectory {
    /// Raw observations `s_t`.
    pub raw_obs: Vec<f32>,
    /// Raw observations `s_{t+1}` (the true next state, before any reset).
    pub raw_next_obs: Vec<f32>,
    /// Normalised observations (with the rollout's frozen statistics).
    pub obs: Vec<f32>,
    /// Masks at `s_t`.
    pub masks: Vec<u8>,
    /// Masks at `s_{t+1}`.
    pub next_masks: Vec<u8>,
    /// Actions.
    pub actions: Vec<u32>,
    /// `log π(a|s)`.
    pub log_probs: Vec<f32>,
    /// `V(s_t)`.
    pub values: Vec<f32>,
    /// `V(s_{t+1})` (after a truncation: of the final observation).
    pub next_values: Vec<f32>,
    /// Rewards.
    pub rewards: Vec<f32>,
    /// Episode ended (time limit) after this step.
    pub episode_end: Vec<bool>,
}

/// What a finished episode scored.
#[derive(Clone, Debug)]
pub struct EpisodeResult {
    /// Summed reward over its signals and decisions.
    pub episode_return: f64,
    /// The environment's metrics.
    pub metrics: EpisodeMetrics,
}

/// One environment slot: the env, its episode counter and running return.
pub struct EnvSlot<E> {
    /// The environment.
    pub env: E,
    /// Index of this slot (seeds its episodes).
    pub index: usize,
    /// Episodes started in this slot.
    pub episodes: u64,
    /// Return of the running episode.
    pub running_return: f64,
}

/// Seed of episode `episode` of slot `slot` in a run seeded `seed`.
pub fn episode_seed(seed: u64, slot: usize, episode: u64) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((slot as u64) << 40) ^ episode
}

/// Samples from masked logits, returning the action and its log-probability.
fn sample_masked(logits: &[f32], mask: PhaseMask, rng: &mut StdRng) -> (u8, f32) {
    let allowed: Vec<usize> = (0..logits.len())
        .filter(|&i| mask.allows(greenwave_core::PhaseId(i as u8)))
        .collect();
    let max = allowed
        .iter()
        .map(|&i| logits[i])
        .fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f32> = allowed.iter().map(|&i| (logits[i] - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    let mut u = rng.random::<f32>() * total;
    let mut pick = allowed[allowed.len() - 1];
    for (k, w) in weights.iter().enumerate() {
        if u < *w {
            pick = allowed[k];
            break;
        }
        u -= w;
    }
    let lp = masked_log_prob(logits, mask, pick as u8).unwrap_or(0.0);
    (pick as u8, lp)
}

fn mask_bytes(mask: PhaseMask, n: usize) -> impl Iterator<Item = u8> {
    (0..n).map(move |i| mask.allows(greenwave_core::PhaseId(i as u8)) as u8)
}

/// The policy a rollout acts with: one per-signal MLP for every signal (one layout), or
/// the shared lane–phase network with every signal's incidence.
pub enum RolloutPolicy {
    /// The same MLP for every signal.
    Mlp(PolicyWeights),
    /// The shared network; `signals[s]` is signal `s`'s incidence and normalisation.
    Shared {
        /// Shared parameters.
        weights: SharedWeights,
        /// Per signal: its incidence and the per-feature normalisation of its layout.
        signals: Vec<(Incidence, ObsNormalization)>,
    },
}

impl RolloutPolicy {
    /// The shared network acting on signals with incidences `incidences`.
    pub fn shared(weights: SharedWeights, incidences: &[Incidence]) -> Self {
        let signals = incidences
            .iter()
            .map(|i| (i.clone(), weights.norm.for_layout(i.layout())))
            .collect();
        RolloutPolicy::Shared { weights, signals }
    }

    /// Observation width and action count of signal `s`.
    fn dims(&self, s: usize) -> (usize, usize) {
        match self {
            RolloutPolicy::Mlp(w) => (w.obs_dim(), w.n_actions()),
            RolloutPolicy::Shared { signals, .. } => {
                let l = signals[s].0.layout();
                (l.dim(), l.n_phases as usize)
            }
        }
    }

    /// The normalisation of signal `s`'s observations.
    fn norm(&self, s: usize) -> &ObsNormalization {
        match self {
            RolloutPolicy::Mlp(w) => &w.norm,
            RolloutPolicy::Shared { signals, .. } => &signals[s].1,
        }
    }

    /// `(logits, value)` of signal `s` at the normalised observation `x`.
    fn act(&self, s: usize, x: &[f32]) -> (Vec<f32>, f32) {
        match self {
            RolloutPolicy::Mlp(w) => (dense_forward(&w.actor, x), dense_forward(&w.critic, x)[0]),
            RolloutPolicy::Shared { weights, signals } => {
                weights.forward_normalised(&signals[s].0, x)
            }
        }
    }

    /// `V` of signal `s` at the normalised observation `x`.
    fn value(&self, s: usize, x: &[f32]) -> f32 {
        match self {
            RolloutPolicy::Mlp(w) => dense_forward(&w.critic, x)[0],
            RolloutPolicy::Shared { .. } => self.act(s, x).1,
        }
    }
}

/// Runs `steps` decisions on every slot of `slots`, appending to `out` (one trajectory per
/// slot and signal, in slot-major order) and to `finished`.
pub fn collect<E: Env>(
    slots: &mut [EnvSlot<E>],
    policy: &RolloutPolicy,
    steps: usize,
    seed: u64,
    rng: &mut StdRng,
    out: &mut Vec<AgentTrajectory>,
    finished: &mut Vec<EpisodeResult>,
) -> Result<(), EnvError> {
    for slot in slots.iter_mut() {
        let n_sig = slot.env.signals().len();
        let base = out.len();
        out.extend((0..n_sig).map(|_| AgentTrajectory::default()));
        let mut actions = vec![0u8; n_sig];
        for t in 0..steps {
            for (s, act) in actions.iter_mut().enumerate() {
                let tr = &mut out[base + s];
                let (d, a) = policy.dims(s);
                let (mut raw, mut x) = (vec![0.0f32; d], vec![0.0f32; d]);
                slot.env.observe(s, &mut raw)?;
                policy.norm(s).apply(&raw, &mut x);
                let mask = slot.env.action_mask(s);
                let (logits, value) = policy.act(s, &x);
                let (pick, lp) = sample_masked(&logits, mask, rng);
                *act = pick;
                if t > 0 && !tr.episode_end[t - 1] {
                    tr.next_values.push(value);
                }
                tr.raw_obs.extend_from_slice(&raw);
                tr.obs.extend_from_slice(&x);
                tr.masks.extend(mask_bytes(mask, a));
                tr.actions.push(pick as u32);
                tr.log_probs.push(lp);
                tr.values.push(value);
            }
            let outcome = slot.env.step(&actions)?;
            for (s, &r) in outcome.rewards.iter().enumerate() {
                let tr = &mut out[base + s];
                let (d, a) = policy.dims(s);
                let (mut raw, mut x) = (vec![0.0f32; d], vec![0.0f32; d]);
                tr.rewards.push(r);
                tr.episode_end.push(outcome.done);
                slot.running_return += r as f64;
                // The true next state, before any reset.
                slot.env.observe(s, &mut raw)?;
                tr.raw_next_obs.extend_from_slice(&raw);
                tr.next_masks.extend(mask_bytes(slot.env.action_mask(s), a));
                if outcome.done || t + 1 == steps {
                    policy.norm(s).apply(&raw, &mut x);
                    tr.next_values.push(policy.value(s, &x));
                }
            }
            if outcome.done {
                finished.push(EpisodeResult {
                    episode_return: slot.running_return,
                    metrics: slot.env.metrics(),
                });
                slot.running_return = 0.0;
                slot.episodes += 1;
                slot.env
                    .reset(episode_seed(seed, slot.index, slot.episodes))?;
            }
        }
    }
    Ok(())
}

/// What a rollout produces: trajectories (slot-major, one per signal) and finished episodes.
pub type Rollout = (Vec<AgentTrajectory>, Vec<EpisodeResult>);

/// Collects `steps` decisions from every slot, splitting the slots over `threads` worker
/// threads. Thread `k` uses a random stream seeded from `(seed, iteration, k)`; the output
/// order is the slot order whatever the threads' timing.
pub fn collect_parallel<E: Env + Send>(
    slots: &mut [EnvSlot<E>],
    policy: &RolloutPolicy,
    steps: usize,
    seed: u64,
    iteration: u64,
    threads: usize,
) -> Result<Rollout, EnvError> {
    let per = slots.len().div_ceil(threads.max(1)).max(1);
    let results: Vec<Result<Rollout, EnvError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = slots
            .chunks_mut(per)
            .enumerate()
            .map(|(k, chunk)| {
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(
                        seed ^ iteration.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ ((k as u64) << 56),
                    );
                    let (mut out, mut fin) = (Vec::new(), Vec::new());
                    collect(chunk, policy, steps, seed, &mut rng, &mut out, &mut fin)?;
                    Ok((out, fin))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rollout worker panicked"))
            .collect()
    });
    let (mut out, mut fin) = (Vec::new(), Vec::new());
    for r in results {
        let (o, f) = r?;
        out.extend(o);
        fin.extend(f);
    }
    Ok((out, fin))
}
