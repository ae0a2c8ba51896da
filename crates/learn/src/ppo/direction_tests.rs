//! Direction tests: the real [`update`] (with advantages from the crate's own [`gae`]) on a
//! contextual bandit with known best actions must raise the policy's expected return, and
//! the same harness with the advantage sign flipped must lower it — so the first test fails
//! if the learner moves the wrong way. The same harness runs the per-signal MLP
//! ([`ActorCritic`]) and the shared lane–phase network ([`SharedActorCritic`], through
//! [`update_groups`]).

use candle_core::{Device, Tensor};
use greenwave_core::ObsLayout;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{update_groups, PolicyModel, PpoBatch, PpoConfig};
use crate::gae::{gae, Trajectory};
use crate::nets::{masked_log_softmax, ActorCritic, Adam};
use crate::shared::{Incidence, IncidenceTensors, SharedActorCritic, SharedGroups};

/// Two approaches (contexts), three phases (actions). Reward per `[context][action]`; the
/// best action is 2 in context 0 and 0 in context 1, so a context-blind policy cannot win.
const REWARD: [[f32; 3]; 2] = [[0.0, 0.2, 1.0], [1.0, 0.0, 0.3]];
const BEST: [usize; 2] = [2, 0];
const LAYOUT: ObsLayout = ObsLayout {
    n_lanes: 1,
    n_phases: 3,
};
/// The shared network's bandit: three lanes, phase `p` serves lane `p` alone, and a
/// context loads the lane of its best phase (a lane–phase network cannot tell phases
/// apart by anything but the lanes they serve).
const SHARED_LAYOUT: ObsLayout = ObsLayout {
    n_lanes: 3,
    n_phases: 3,
};
const BATCH: usize = 256;
const ITERATIONS: usize = 15;

/// Which network the bandit trains.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Mlp,
    Shared,
}

impl Kind {
    fn layout(self) -> ObsLayout {
        match self {
            Kind::Mlp => LAYOUT,
            Kind::Shared => SHARED_LAYOUT,
        }
    }

    /// The observation of a context: for the MLP a ±1 code in the two lane slots; for the
    /// shared network the best phase's lane loaded (density and queue 1). The rest zero.
    fn context_obs(self, context: usize) -> Vec<f32> {
        let layout = self.layout();
        let mut o = vec![0.0; layout.dim()];
        match self {
            Kind::Mlp => {
                o[0] = if context == 0 { 1.0 } else { -1.0 };
                o[1] = -o[0];
            }
            Kind::Shared => {
                let lane = BEST[context];
                o[lane] = 1.0;
                o[layout.n_lanes as usize + lane] = 1.0;
            }
        }
        o
    }
}

/// `(π(·|context), V(context))` for both contexts.
fn evaluate(model: &dyn PolicyModel, kind: Kind) -> ([[f32; 3]; 2], [f32; 2]) {
    let dim = kind.layout().dim();
    let obs: Vec<f32> = (0..2).flat_map(|c| kind.context_obs(c)).collect();
    let obs = Tensor::from_vec(obs, (2, dim), &Device::Cpu).unwrap();
    let mask = Tensor::ones((2, 3), candle_core::DType::U8, &Device::Cpu).unwrap();
    let (logits, v) = model.forward_group(0, &obs).unwrap();
    let lp = masked_log_softmax(&logits, &mask).unwrap();
    let p: Vec<Vec<f32>> = lp.exp().unwrap().to_vec2().unwrap();
    let v: Vec<f32> = v.to_vec1().unwrap();
    ([0, 1].map(|c| [p[c][0], p[c][1], p[c][2]]), [v[0], v[1]])
}

/// Exact expected reward of the policy, contexts equally likely.
fn expected_return(probs: &[[f32; 3]; 2]) -> f32 {
    (0..2)
        .map(|c| (0..3).map(|a| probs[c][a] * REWARD[c][a]).sum::<f32>())
        .sum::<f32>()
        / 2.0
}

/// Mean probability of the best action over the contexts.
fn best_action_prob(probs: &[[f32; 3]; 2]) -> f32 {
    (probs[0][BEST[0]] + probs[1][BEST[1]]) / 2.0
}

fn sample(probs: &[f32; 3], rng: &mut StdRng) -> usize {
    let u: f32 = rng.random();
    let mut acc = 0.0;
    for (a, p) in probs.iter().enumerate() {
        acc += p;
        if u < acc {
            return a;
        }
    }
    2
}

/// One batch of one-step episodes collected from the current policy, advantages from
/// [`gae`] (every step terminates) multiplied by `advantage_sign`.
fn collect(
    model: &dyn PolicyModel,
    kind: Kind,
    cfg: &PpoConfig,
    advantage_sign: f32,
    rng: &mut StdRng,
) -> PpoBatch {
    let (probs, v) = evaluate(model, kind);
    let contexts: Vec<usize> = (0..BATCH).map(|_| rng.random_range(0..2)).collect();
    let actions: Vec<usize> = contexts.iter().map(|&c| sample(&probs[c], rng)).collect();
    let rewards: Vec<f32> = contexts
        .iter()
        .zip(&actions)
        .map(|(&c, &a)| REWARD[c][a] + rng.random_range(-0.1..0.1))
        .collect();
    let old_values: Vec<f32> = contexts.iter().map(|&c| v[c]).collect();
    let done = vec![true; BATCH];
    let (advantages, returns) = gae(
        Trajectory {
            rewards: &rewards,
            values: &old_values,
            next_values: &vec![0.0; BATCH],
            terminated: &done,
            episode_end: &done,
        },
        cfg.gamma,
        cfg.gae_lambda,
    );
    PpoBatch {
        obs_dim: kind.layout().dim(),
        n_actions: 3,
        obs: contexts.iter().flat_map(|&c| kind.context_obs(c)).collect(),
        masks: vec![1; BATCH * 3],
        actions: actions.iter().map(|&a| a as u32).collect(),
        old_log_probs: contexts
            .iter()
            .zip(&actions)
            .map(|(&c, &a)| probs[c][a].ln())
            .collect(),
        old_values,
        advantages: advantages.iter().map(|a| a * advantage_sign).collect(),
        returns,
    }
}

/// What a training run did to the policy and the critic.
#[derive(Debug)]
struct Outcome {
    best_prob: (f32, f32),
    expected_return: (f32, f32),
    /// Mean squared error of `V(context)` against the policy's true expected reward there.
    value_error: (f32, f32),
}

fn value_error(model: &dyn PolicyModel, kind: Kind) -> f32 {
    let (p, v) = evaluate(model, kind);
    (0..2)
        .map(|c| {
            let truth: f32 = (0..3).map(|a| p[c][a] * REWARD[c][a]).sum();
            (v[c] - truth).powi(2)
        })
        .sum::<f32>()
        / 2.0
}

/// Trains `model` with the crate's [`update_groups`] (one group) for [`ITERATIONS`] batches.
fn train_model(model: &dyn PolicyModel, kind: Kind, advantage_sign: f32) -> Outcome {
    let mut opt = Adam::new(model.vars(), 1e-5).unwrap();
    let cfg = PpoConfig {
        minibatch: 64,
        ..Default::default()
    };
    let mut rng = StdRng::seed_from_u64(42);
    let p0 = evaluate(model, kind).0;
    let e0 = value_error(model, kind);
    for _ in 0..ITERATIONS {
        let batch = collect(model, kind, &cfg, advantage_sign, &mut rng);
        update_groups(model, &mut opt, &[batch], &cfg, 3e-3, &mut rng).unwrap();
    }
    let p1 = evaluate(model, kind).0;
    let out = Outcome {
        best_prob: (best_action_prob(&p0), best_action_prob(&p1)),
        expected_return: (expected_return(&p0), expected_return(&p1)),
        value_error: (e0, value_error(model, kind)),
    };
    eprintln!("{kind:?}, advantage sign {advantage_sign:+}: {out:?}");
    out
}

/// Trains a fresh network of `kind` on the bandit.
fn train_bandit_with(kind: Kind, advantage_sign: f32) -> Outcome {
    match kind {
        Kind::Mlp => {
            let net = ActorCritic::new(LAYOUT, &[16, 16], 11, &Device::Cpu).unwrap();
            train_model(&net, kind, advantage_sign)
        }
        Kind::Shared => {
            let net = SharedActorCritic::new(&[16, 16], 11, &Device::Cpu).unwrap();
            let rows: Vec<Vec<bool>> = (0..3).map(|p| (0..3).map(|l| l == p).collect()).collect();
            let inc = Incidence::new(&rows).unwrap();
            let model = SharedGroups {
                net: &net,
                groups: vec![IncidenceTensors::new(&inc, &Device::Cpu).unwrap()],
            };
            train_model(&model, kind, advantage_sign)
        }
    }
}

fn train_bandit(advantage_sign: f32) -> Outcome {
    train_bandit_with(Kind::Mlp, advantage_sign)
}

#[test]
fn ppo_update_raises_the_return_on_a_contextual_bandit() {
    let o = train_bandit(1.0);
    assert!(
        (o.best_prob.0 - 1.0 / 3.0).abs() < 0.05,
        "starts near uniform: {o:?}"
    );
    assert!(o.best_prob.1 > 0.8, "best action learned: {o:?}");
    assert!(
        o.expected_return.1 > o.expected_return.0 + 0.3,
        "return rises by a margin: {o:?}"
    );
}

#[test]
fn flipped_advantage_sign_lowers_the_return() {
    let o = train_bandit(-1.0);
    assert!(o.best_prob.1 < 0.15, "best action unlearned: {o:?}");
    assert!(
        o.expected_return.1 < o.expected_return.0 - 0.2,
        "return falls by a margin: {o:?}"
    );
}

#[test]
fn critic_moves_towards_the_gae_returns() {
    let o = train_bandit(1.0);
    assert!(
        o.value_error.1 < 0.1 * o.value_error.0 && o.value_error.1 < 0.01,
        "V(context) approaches the policy's expected reward: {o:?}"
    );
}

#[test]
fn shared_network_update_raises_the_return_on_a_contextual_bandit() {
    let o = train_bandit_with(Kind::Shared, 1.0);
    assert!(
        (o.best_prob.0 - 1.0 / 3.0).abs() < 0.05,
        "starts near uniform: {o:?}"
    );
    assert!(o.best_prob.1 > 0.8, "best action learned: {o:?}");
    assert!(
        o.expected_return.1 > o.expected_return.0 + 0.3,
        "return rises by a margin: {o:?}"
    );
    assert!(o.value_error.1 < 0.01, "critic learns too: {o:?}");
}

#[test]
fn shared_network_flipped_advantage_sign_lowers_the_return() {
    let o = train_bandit_with(Kind::Shared, -1.0);
    assert!(o.best_prob.1 < 0.15, "best action unlearned: {o:?}");
    assert!(
        o.expected_return.1 < o.expected_return.0 - 0.2,
        "return falls by a margin: {o:?}"
    );
}
