//! Rollout collection: N environments stepped in parallel worker threads, each thread
//! running its own environments with a plain-Rust copy of the policy and its own seeded
//! random stream, so results do not depend on thread timing.

use crate::sampling::masked_sample;
use greenwave_core::mlp::masked_log_prob;
use greenwave_core::PhaseMask;
use greenwave_learn::shared::{Incidence, SharedForward};
use greenwave_learn::weights::InputMajorLayers;
use greenwave_learn::{ObsNormalization, PolicyWeights, SharedWeights};
use greenwave_sim::{Env, EnvError, EpisodeMetrics, PolicyMasks, StepOutcome, StepStarted};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

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
    /// The policy's action masks (the env's under the max-red rule).
    pub masks: PolicyMasks,
}

/// Seed of episode `episode` of slot `slot` in a run seeded `seed`.
pub fn episode_seed(seed: u64, slot: usize, episode: u64) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((slot as u64) << 40) ^ episode
}

/// Samples from masked logits (at temperature 1: the policy's own distribution),
/// returning the action and its log-probability.
fn sample_masked(logits: &[f32], mask: PhaseMask, rng: &mut StdRng) -> (u8, f32) {
    let pick = masked_sample(logits, mask, 1.0, rng.random::<f32>())
        .expect("the sequencer's action mask always allows the phase it serves or changes to");
    let lp = masked_log_prob(logits, mask, pick).unwrap_or(0.0);
    (pick, lp)
}

fn mask_bytes(mask: PhaseMask, n: usize) -> impl Iterator<Item = u8> {
    (0..n).map(move |i| mask.allows(greenwave_core::PhaseId(i as u8)) as u8)
}

/// The policy a rollout acts with: one per-signal MLP for every signal (one layout), or
/// the shared lane–phase network with every signal's incidence. Built only by
/// [`RolloutPolicy::mlp`] and [`RolloutPolicy::shared`], which prepare its forward passes
/// once per rollout, so the weights and their prepared form cannot disagree.
pub struct RolloutPolicy(Acting);

enum Acting {
    /// The same MLP for every signal.
    Mlp {
        weights: PolicyWeights,
        forward: Box<MlpForward>,
    },
    /// The shared network; `signals[s]` is signal `s`'s.
    Shared {
        weights: SharedWeights,
        forward: Box<SharedForward>,
        signals: Vec<SharedSignal>,
    },
}

/// An MLP's actor and critic, input-major ([`InputMajorLayers`]: the numbers of
/// `dense_forward` bit for bit, in vectorised loops).
struct MlpForward {
    actor: InputMajorLayers,
    critic: InputMajorLayers,
}

/// What the shared network needs of one signal.
struct SharedSignal {
    incidence: Incidence,
    /// The per-feature normalisation of its layout.
    norm: ObsNormalization,
    /// Its incidence's phase pooling ([`Incidence::row_normalised`]).
    pooling: Vec<f32>,
}

impl RolloutPolicy {
    /// One MLP acting for every signal.
    pub fn mlp(weights: PolicyWeights) -> Self {
        let forward = Box::new(MlpForward {
            actor: InputMajorLayers::new(&weights.actor),
            critic: InputMajorLayers::new(&weights.critic),
        });
        RolloutPolicy(Acting::Mlp { weights, forward })
    }

    /// The shared network acting on signals with incidences `incidences`.
    pub fn shared(weights: SharedWeights, incidences: &[Incidence]) -> Self {
        let signals = incidences
            .iter()
            .map(|i| SharedSignal {
                incidence: i.clone(),
                norm: weights.norm.for_layout(i.layout()),
                pooling: i.row_normalised(),
            })
            .collect();
        let forward = Box::new(SharedForward::new(&weights));
        RolloutPolicy(Acting::Shared {
            weights,
            forward,
            signals,
        })
    }

    /// The greedy policy as networks per signal: the one MLP, or the shared network
    /// compiled for each signal as `greenwave export` compiles it.
    pub fn per_signal_weights(
        &self,
    ) -> Result<Vec<PolicyWeights>, greenwave_learn::shared::SharedError> {
        match &self.0 {
            Acting::Mlp { weights, .. } => Ok(vec![weights.clone()]),
            Acting::Shared {
                weights, signals, ..
            } => signals
                .iter()
                .map(|s| greenwave_learn::specialize(weights, &s.incidence))
                .collect(),
        }
    }

    /// Observation width and action count of signal `s`.
    fn dims(&self, s: usize) -> (usize, usize) {
        match &self.0 {
            Acting::Mlp { weights: w, .. } => (w.obs_dim(), w.n_actions()),
            Acting::Shared { signals, .. } => {
                let l = signals[s].incidence.layout();
                (l.dim(), l.n_phases as usize)
            }
        }
    }

    /// The normalisation of signal `s`'s observations.
    fn norm(&self, s: usize) -> &ObsNormalization {
        match &self.0 {
            Acting::Mlp { weights: w, .. } => &w.norm,
            Acting::Shared { signals, .. } => &signals[s].norm,
        }
    }

    /// `(logits, value)` of signal `s` at the normalised observation `x`.
    fn act(&self, s: usize, x: &[f32]) -> (Vec<f32>, f32) {
        match &self.0 {
            Acting::Mlp { forward, .. } => (forward.actor.forward(x), forward.critic.forward(x)[0]),
            Acting::Shared {
                forward, signals, ..
            } => {
                let signal = &signals[s];
                forward.forward_normalised(&signal.incidence, &signal.pooling, x)
            }
        }
    }

    /// `V` of signal `s` at the normalised observation `x`.
    fn value(&self, s: usize, x: &[f32]) -> f32 {
        match &self.0 {
            Acting::Mlp { forward, .. } => forward.critic.forward(x)[0],
            Acting::Shared { .. } => self.act(s, x).1,
        }
    }
}

/// What every slot of a rollout shares: the policy acting, the decisions per slot, and the
/// run's seed (episode seeds of the slots that start a new episode).
#[derive(Clone, Copy)]
pub struct RolloutSpec<'a> {
    /// The policy acting.
    pub policy: &'a RolloutPolicy,
    /// Decisions per slot.
    pub steps: usize,
    /// The run's seed.
    pub seed: u64,
}

/// Chooses the actions of slot `slot` at its state `t` (every signal's), recording
/// `s_t`, the mask, action, log-probability and value in `trs` (the slot's trajectories),
/// and `V(s_t)` as the previous step's next value unless an episode ended there.
fn act<E: Env>(
    slot: &mut EnvSlot<E>,
    trs: &mut [AgentTrajectory],
    t: usize,
    policy: &RolloutPolicy,
    rng: &mut StdRng,
    actions: &mut [u8],
) -> Result<(), EnvError> {
    slot.masks.note(&slot.env);
    for (s, (tr, act)) in trs.iter_mut().zip(actions.iter_mut()).enumerate() {
        let (d, a) = policy.dims(s);
        let (mut raw, mut x) = (vec![0.0f32; d], vec![0.0f32; d]);
        slot.env.observe(s, &mut raw)?;
        policy.norm(s).apply(&raw, &mut x);
        let mask = slot.masks.mask(&slot.env, s);
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
    Ok(())
}

/// Records the outcome of slot `slot`'s step `t` (of `spec.steps`) in `trs`: rewards, the
/// true next state (before any reset) and, at an episode's or the rollout's end, its
/// value; a finished episode goes to `finished` and the slot starts its next one.
fn record<E: Env>(
    slot: &mut EnvSlot<E>,
    trs: &mut [AgentTrajectory],
    t: usize,
    outcome: &StepOutcome,
    spec: &RolloutSpec<'_>,
    finished: &mut Vec<EpisodeResult>,
) -> Result<(), EnvError> {
    let RolloutSpec {
        policy,
        steps,
        seed,
    } = *spec;
    for (s, (tr, &r)) in trs.iter_mut().zip(&outcome.rewards).enumerate() {
        let (d, a) = policy.dims(s);
        let (mut raw, mut x) = (vec![0.0f32; d], vec![0.0f32; d]);
        tr.rewards.push(r);
        tr.episode_end.push(outcome.done);
        slot.running_return += r as f64;
        slot.env.observe(s, &mut raw)?;
        tr.raw_next_obs.extend_from_slice(&raw);
        tr.next_masks
            .extend(mask_bytes(slot.masks.mask(&slot.env, s), a));
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
    Ok(())
}

/// Runs `spec.steps` decisions on every slot of `slots`, appending to `out` (one trajectory
/// per slot and signal, in slot-major order) and to `finished`: one slot after the other,
/// each step waiting for its simulator (what [`collect_parallel`] does unless pipelined).
pub fn collect<E: Env>(
    slots: &mut [EnvSlot<E>],
    spec: &RolloutSpec<'_>,
    rng: &mut StdRng,
    out: &mut Vec<AgentTrajectory>,
    finished: &mut Vec<EpisodeResult>,
) -> Result<(), EnvError> {
    for slot in slots.iter_mut() {
        let n_sig = slot.env.signals().len();
        let base = out.len();
        out.extend((0..n_sig).map(|_| AgentTrajectory::default()));
        let mut actions = vec![0u8; n_sig];
        for t in 0..spec.steps {
            act(slot, &mut out[base..], t, spec.policy, rng, &mut actions)?;
            let outcome = slot.env.step(&actions)?;
            record(slot, &mut out[base..], t, &outcome, spec, finished)?;
        }
    }
    Ok(())
}

/// How long a worker waits for the oldest step in flight before it looks at all of its
/// slots again (when none was ready).
const READY_WAIT: Duration = Duration::from_millis(1);

/// Like [`collect`], pipelined over the slots: every slot has a step in flight ([`Env::step_begin`]), and
/// the thread serves whichever slot's simulator answered first ([`Env::step_ready`]):
/// collects its step ([`Env::step_end`]), records it, chooses its next actions and sends
/// them; so with SUMO all of the slots' simulators compute while this thread serves the
/// others, and a slow one holds up no other. Each slot draws its actions from its own
/// random stream (seeded from `rng`, in slot order), so the trajectories do not depend on
/// the order the slots are served in. On an error, the other slots' steps in flight are
/// collected and dropped, so no environment is left mid-interval.
pub fn collect_pipelined<E: Env>(
    slots: &mut [EnvSlot<E>],
    spec: &RolloutSpec<'_>,
    rng: &mut StdRng,
    out: &mut Vec<AgentTrajectory>,
    finished: &mut Vec<EpisodeResult>,
) -> Result<(), EnvError> {
    let (policy, steps) = (spec.policy, spec.steps);
    // Where each slot's trajectories start in `out`.
    let mut bases = Vec::with_capacity(slots.len() + 1);
    for slot in slots.iter() {
        bases.push(out.len());
        let n_sig = slot.env.signals().len();
        out.extend((0..n_sig).map(|_| AgentTrajectory::default()));
    }
    bases.push(out.len());
    let mut rngs: Vec<StdRng> = slots
        .iter()
        .map(|_| StdRng::seed_from_u64(rng.random()))
        .collect();
    let mut actions: Vec<Vec<u8>> = slots
        .iter()
        .map(|s| vec![0u8; s.env.signals().len()])
        .collect();
    // Per slot: its step in flight (`Some(None)`: pending in the simulator), the step it
    // is at, when it was sent (a sequence number), and the episodes it finished.
    let mut in_flight: Vec<Option<Option<StepOutcome>>> = slots.iter().map(|_| None).collect();
    let mut t_of = vec![0usize; slots.len()];
    let mut sent_seq = vec![0u64; slots.len()];
    let mut next_seq = 0u64;
    let mut fin: Vec<Vec<EpisodeResult>> = slots.iter().map(|_| Vec::new()).collect();
    let r = (|| {
        if steps == 0 {
            return Ok(());
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            let trs = &mut out[bases[i]..bases[i + 1]];
            act(slot, trs, 0, policy, &mut rngs[i], &mut actions[i])?;
            in_flight[i] = Some(begin(&mut slot.env, &actions[i])?);
            sent_seq[i] = next_seq;
            next_seq += 1;
        }
        let mut cursor = 0;
        loop {
            let Some(i) = next_ready(slots, &in_flight, &sent_seq, &mut cursor) else {
                return Ok(()); // every slot has run its steps
            };
            let slot = &mut slots[i];
            let outcome = match in_flight[i].take() {
                Some(Some(done)) => done,
                _ => slot.env.step_end()?,
            };
            let t = t_of[i];
            let trs = &mut out[bases[i]..bases[i + 1]];
            record(slot, trs, t, &outcome, spec, &mut fin[i])?;
            t_of[i] = t + 1;
            if t + 1 < steps {
                act(slot, trs, t + 1, policy, &mut rngs[i], &mut actions[i])?;
                in_flight[i] = Some(begin(&mut slot.env, &actions[i])?);
                sent_seq[i] = next_seq;
                next_seq += 1;
            }
        }
    })();
    if r.is_err() {
        for (slot, f) in slots.iter_mut().zip(&in_flight) {
            if let Some(None) = f {
                let _ = slot.env.step_end();
            }
        }
    }
    finished.extend(fin.into_iter().flatten());
    r
}

/// The next slot to serve: the first (from `cursor`, round robin) whose step in flight is
/// ready; when none is, waits for the one sent longest ago (briefly, then looks at all of
/// them again). `None` when no slot has a step in flight.
fn next_ready<E: Env>(
    slots: &mut [EnvSlot<E>],
    in_flight: &[Option<Option<StepOutcome>>],
    sent_seq: &[u64],
    cursor: &mut usize,
) -> Option<usize> {
    let n = slots.len();
    loop {
        let mut oldest: Option<usize> = None;
        for k in 0..n {
            let i = (*cursor + k) % n;
            match &in_flight[i] {
                None => continue,
                Some(Some(_)) => {
                    *cursor = (i + 1) % n;
                    return Some(i);
                }
                Some(None) => {
                    if slots[i].env.step_ready(Duration::ZERO) {
                        *cursor = (i + 1) % n;
                        return Some(i);
                    }
                    if oldest.is_none_or(|o| sent_seq[i] < sent_seq[o]) {
                        oldest = Some(i);
                    }
                }
            }
        }
        let o = oldest?;
        if slots[o].env.step_ready(READY_WAIT) {
            *cursor = (o + 1) % n;
            return Some(o);
        }
    }
}

/// Starts one step: `Some(outcome)` when the environment simulated it at once, `None`
/// when it is in flight.
fn begin<E: Env>(env: &mut E, actions: &[u8]) -> Result<Option<StepOutcome>, EnvError> {
    Ok(match env.step_begin(actions)? {
        StepStarted::Done(outcome) => Some(outcome),
        StepStarted::Pending => None,
    })
}

/// What a rollout produces: trajectories (slot-major, one per signal) and finished episodes.
pub type Rollout = (Vec<AgentTrajectory>, Vec<EpisodeResult>);

/// Collects `spec.steps` decisions from every slot, splitting the slots over `threads`
/// worker threads ([`collect_pipelined`] in each when `pipelined`, else [`collect`]).
/// Thread `k` uses a random stream seeded from `(spec.seed, iteration, k)`; the output
/// order is the slot order whatever the threads' timing.
pub fn collect_parallel<E: Env + Send>(
    slots: &mut [EnvSlot<E>],
    spec: &RolloutSpec<'_>,
    iteration: u64,
    threads: usize,
    pipelined: bool,
) -> Result<Rollout, EnvError> {
    let seed = spec.seed;
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
                    let run = if pipelined {
                        collect_pipelined
                    } else {
                        collect
                    };
                    run(chunk, spec, &mut rng, &mut out, &mut fin)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::mlp::DenseLayer;
    use greenwave_core::{PhaseMask, RewardKind, Sequencer};
    use greenwave_sim::{EmbeddedEnv, MovementDetector, SignalSpec};

    /// The draw as rollouts made it before it became `masked_sample` (commit a49a64e).
    fn sample_masked_before(logits: &[f32], mask: PhaseMask, rng: &mut StdRng) -> (u8, f32) {
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

    /// Training draws exactly as it did: the same phase and log-probability for every
    /// draw of the same stream, so a seed trains the same weights bit for bit.
    #[test]
    fn rollouts_draw_as_they_did_before_the_shared_sampler() {
        let mut gen = StdRng::seed_from_u64(11);
        let (mut old, mut new) = (StdRng::seed_from_u64(5), StdRng::seed_from_u64(5));
        for _ in 0..20_000 {
            let n = gen.random_range(2..=8usize);
            let logits: Vec<f32> = (0..n).map(|_| gen.random_range(-6.0..6.0f32)).collect();
            let mask = PhaseMask(gen.random_range(1..(1u16 << n)));
            let (a, b) = (
                sample_masked_before(&logits, mask, &mut old),
                sample_masked(&logits, mask, &mut new),
            );
            assert_eq!(a.0, b.0, "{logits:?} {mask:?}");
            assert_eq!(a.1.to_bits(), b.1.to_bits(), "{logits:?} {mask:?}");
        }
    }

    /// An embedded environment behind a simulator "elsewhere": `step_begin` only stores
    /// the actions, `step_end` simulates; readiness flips with a counter so slots are served
    /// out of order; `fail_at` makes the `n`th `step_end` fail.
    struct Remote {
        inner: EmbeddedEnv,
        pending: Option<Vec<u8>>,
        polls: u64,
        ends: u64,
        fail_at: Option<u64>,
    }

    impl Env for Remote {
        fn signals(&self) -> &[SignalSpec] {
            self.inner.signals()
        }
        fn decision_interval(&self) -> greenwave_core::Millis {
            self.inner.decision_interval()
        }
        fn reward_kind(&self) -> RewardKind {
            self.inner.reward_kind()
        }
        fn reset(&mut self, seed: u64) -> Result<(), EnvError> {
            self.pending = None;
            self.inner.reset(seed)
        }
        fn observe(&self, signal: usize, out: &mut [f32]) -> Result<(), EnvError> {
            assert!(self.pending.is_none(), "observed mid-interval");
            self.inner.observe(signal, out)
        }
        fn sequencer(&self, signal: usize) -> &Sequencer {
            self.inner.sequencer(signal)
        }
        fn action_mask(&self, signal: usize) -> PhaseMask {
            self.inner.action_mask(signal)
        }
        fn detectors(&self, signal: usize) -> Vec<MovementDetector> {
            self.inner.detectors(signal)
        }
        fn now(&self) -> greenwave_core::Millis {
            self.inner.now()
        }
        fn step(&mut self, actions: &[u8]) -> Result<StepOutcome, EnvError> {
            self.inner.step(actions)
        }
        fn step_begin(&mut self, actions: &[u8]) -> Result<StepStarted, EnvError> {
            if self.pending.is_some() {
                return Err(EnvError::Backend("begin twice".into()));
            }
            self.pending = Some(actions.to_vec());
            Ok(StepStarted::Pending)
        }
        fn step_end(&mut self) -> Result<StepOutcome, EnvError> {
            let actions = self
                .pending
                .take()
                .ok_or_else(|| EnvError::Backend("end without begin".into()))?;
            self.ends += 1;
            if self.fail_at == Some(self.ends) {
                return Err(EnvError::Backend("simulator died".into()));
            }
            self.inner.step(&actions)
        }
        fn step_ready(&mut self, _wait: std::time::Duration) -> bool {
            self.polls += 1;
            self.polls % 3 != 1
        }
        fn metrics(&self) -> EpisodeMetrics {
            self.inner.metrics()
        }
    }

    fn scenario() -> greenwave_sim::Scenario {
        // 60 decisions per episode: episodes end inside the rollout.
        greenwave_sim::load("single-4way")
            .unwrap()
            .with_episode(greenwave_core::Millis::from_secs(300))
            .unwrap()
    }

    fn policy(env: &impl Env) -> RolloutPolicy {
        let layout = env.signals()[0].layout;
        let (d, a) = (layout.dim(), layout.n_phases as usize);
        let layer = |o: usize| DenseLayer {
            inputs: d,
            outputs: o,
            weights: (0..o * d).map(|k| ((k % 7) as f32 - 3.0) * 0.05).collect(),
            bias: vec![0.0; o],
        };
        RolloutPolicy::mlp(PolicyWeights {
            norm: ObsNormalization::identity(d, 5.0),
            obs_layout: layout,
            actor: vec![layer(a)],
            critic: vec![layer(1)],
        })
    }

    fn slots<E: Env>(make: impl Fn(u64) -> E) -> Vec<EnvSlot<E>> {
        (0..3)
            .map(|i| EnvSlot {
                env: make(episode_seed(5, i, 0)),
                index: i,
                episodes: 0,
                running_return: 0.0,
                masks: PolicyMasks::default(),
            })
            .collect()
    }

    fn remote(fail_at: Option<u64>) -> impl Fn(u64) -> Remote {
        move |seed| Remote {
            inner: EmbeddedEnv::from_scenario(&scenario(), seed),
            pending: None,
            polls: 0,
            ends: 0,
            fail_at,
        }
    }

    fn run<E: Env>(slots: &mut [EnvSlot<E>], steps: usize) -> Result<Rollout, EnvError> {
        let policy = policy(&slots[0].env);
        let mut rng = StdRng::seed_from_u64(11);
        let (mut out, mut fin) = (Vec::new(), Vec::new());
        let spec = RolloutSpec {
            policy: &policy,
            steps,
            seed: 5,
        };
        collect_pipelined(slots, &spec, &mut rng, &mut out, &mut fin)?;
        Ok((out, fin))
    }

    type Key = (Vec<u32>, Vec<f32>, Vec<f32>, Vec<bool>, usize);

    fn key(r: &Rollout) -> Vec<Key> {
        r.0.iter()
            .map(|t| {
                (
                    t.actions.clone(),
                    t.rewards.clone(),
                    t.next_values.clone(),
                    t.episode_end.clone(),
                    t.raw_obs.len(),
                )
            })
            .collect()
    }

    #[test]
    fn pipelined_collection_equals_stepping_at_once_and_repeats() {
        let sc = scenario();
        let steps = 150; // two episode ends per slot
        let direct = run(&mut slots(|s| EmbeddedEnv::from_scenario(&sc, s)), steps).unwrap();
        let piped = run(&mut slots(remote(None)), steps).unwrap();
        let again = run(&mut slots(remote(None)), steps).unwrap();
        assert_eq!(direct.0.len(), 3, "one trajectory per slot and signal");
        for t in &piped.0 {
            let d = t.raw_obs.len() / steps;
            assert_eq!(t.actions.len(), steps);
            assert_eq!(t.next_values.len(), steps);
            assert_eq!(t.raw_next_obs.len(), steps * d);
            assert_eq!(t.episode_end.iter().filter(|&&e| e).count(), 2);
        }
        assert_eq!(piped.1.len(), 6, "every slot finished two episodes");
        assert!(
            key(&direct) == key(&piped),
            "served out of order, same trajectories"
        );
        assert!(key(&piped) == key(&again), "same seed, same rollout");
    }

    #[test]
    fn an_env_error_mid_pipeline_is_an_error_and_leaves_nothing_in_flight() {
        let mut s = slots(remote(None));
        s[1].env.fail_at = Some(40);
        let err = run(&mut s, 100).unwrap_err();
        assert!(err.to_string().contains("simulator died"), "{err}");
        for slot in &s {
            assert!(
                slot.env.pending.is_none(),
                "slot {} left mid-interval",
                slot.index
            );
        }
        // The failing env is reset and the others carry on.
        let _ = s[1].env.reset(1);
        s[1].env.fail_at = None;
        run(&mut s, 10).unwrap();
    }
}
