//! Which policy network a run trains (`--policy mlp|shared`), and what the shared one needs:
//! every signal's lane–phase incidence, and the signals grouped by incidence for the
//! PPO update (one forward pass per distinct junction geometry).

use anyhow::{bail, Context, Result};
use candle_core::{Device, Var};
use greenwave_learn::nets::MlpNet;
use greenwave_learn::shared::{Incidence, LaneNormalization};
use greenwave_learn::{ActorCritic, SharedActorCritic};
use greenwave_sim::SignalSpec;
use serde::{Deserialize, Serialize};

/// The policy architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// One tanh MLP over the observation; every signal must have the same layout.
    Mlp,
    /// The shared lane–phase network (any junction; compiled to one MLP per signal on
    /// export).
    Shared,
}

impl PolicyKind {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Mlp => "mlp",
            PolicyKind::Shared => "shared",
        }
    }

    /// The architecture asked for, or by default: `shared` when the signals' layouts
    /// differ (an MLP cannot serve them), `mlp` otherwise.
    pub fn resolve(asked: Option<PolicyKind>, specs: &[SignalSpec]) -> PolicyKind {
        asked.unwrap_or_else(|| {
            let mixed = specs.windows(2).any(|w| w[0].layout != w[1].layout);
            if mixed {
                PolicyKind::Shared
            } else {
                PolicyKind::Mlp
            }
        })
    }
}

/// The PPO settings the `shared` network trains with in place of the run's defaults,
/// where the command left them unset (tools/README.md, finding 14: on a net of many signals
/// ten passes took twice the rollout's time and moved the policy a third as far, by
/// approx-KL, as the MLP's update does, so it takes larger steps and fewer passes). `None`
/// keeps `TrainConfig::ppo`'s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SharedOverrides {
    /// Initial learning rate.
    pub learning_rate: Option<f64>,
    /// Epochs per iteration.
    pub epochs: Option<usize>,
}

impl SharedOverrides {
    /// The SUMO recipe's: learning rate 1e-3 and 5 epochs, each where not asked for.
    pub fn sumo(asked_learning_rate: Option<f64>, asked_epochs: Option<usize>) -> Self {
        SharedOverrides {
            learning_rate: asked_learning_rate.is_none().then_some(1e-3),
            epochs: asked_epochs.is_none().then_some(5),
        }
    }

    /// `ppo` as the `kind` of policy trains it.
    pub fn apply(self, kind: PolicyKind, ppo: &mut greenwave_learn::ppo::PpoConfig) {
        if kind != PolicyKind::Shared {
            return;
        }
        if let Some(lr) = self.learning_rate {
            ppo.learning_rate = lr;
        }
        if let Some(epochs) = self.epochs {
            ppo.epochs = epochs;
        }
    }
}

/// Every signal's incidence, checked against its layout.
pub fn signal_incidences(specs: &[SignalSpec]) -> Result<Vec<Incidence>> {
    specs
        .iter()
        .map(|s| {
            let inc = Incidence::new(&s.incidence)
                .with_context(|| format!("signal '{}': lane–phase incidence", s.id))?;
            if inc.layout() != s.layout {
                bail!(
                    "signal '{}': incidence is {:?}, the observation layout {:?}",
                    s.id,
                    inc.layout(),
                    s.layout
                );
            }
            Ok(inc)
        })
        .collect()
}

/// Signals grouped by identical incidence: `(distinct incidences, group of each signal)`.
pub fn group_by_incidence(incidences: &[Incidence]) -> (Vec<Incidence>, Vec<usize>) {
    let mut groups: Vec<Incidence> = Vec::new();
    let of_signal = incidences
        .iter()
        .map(|inc| match groups.iter().position(|g| g == inc) {
            Some(g) => g,
            None => {
                groups.push(inc.clone());
                groups.len() - 1
            }
        })
        .collect();
    (groups, of_signal)
}

/// The learner's networks.
pub enum PolicyNet {
    /// Per-signal MLP actor-critic.
    Mlp(ActorCritic),
    /// Shared lane–phase actor-critic.
    Shared(SharedActorCritic),
}

impl PolicyNet {
    /// Fresh networks of `kind` (`layout` sizes the MLP).
    pub fn new(
        kind: PolicyKind,
        layout: greenwave_core::ObsLayout,
        hidden: &[usize],
        seed: u64,
        dev: &Device,
    ) -> Result<Self> {
        Ok(match kind {
            PolicyKind::Mlp => PolicyNet::Mlp(ActorCritic::new(layout, hidden, seed, dev)?),
            PolicyKind::Shared => PolicyNet::Shared(
                SharedActorCritic::new(hidden, seed, dev).context("--policy shared")?,
            ),
        })
    }

    /// Actor and critic networks (what checkpoints save under `actor` and `critic`).
    pub fn nets(&self) -> (&MlpNet, &MlpNet) {
        match self {
            PolicyNet::Mlp(n) => (&n.actor, &n.critic),
            PolicyNet::Shared(n) => (&n.actor, &n.critic),
        }
    }

    /// All trainable variables, actor first.
    pub fn vars(&self) -> Vec<Var> {
        match self {
            PolicyNet::Mlp(n) => n.vars(),
            PolicyNet::Shared(n) => n.vars(),
        }
    }

    /// The MLP, for the code paths only it supports (off-policy PPO).
    pub fn mlp(&self) -> Result<&ActorCritic> {
        match self {
            PolicyNet::Mlp(n) => Ok(n),
            PolicyNet::Shared(_) => bail!("this needs --policy mlp"),
        }
    }
}

/// The shared network's normalisation from the run's lane statistics.
pub fn lane_norm(stats: &greenwave_learn::RunningObsStats, clip: f32) -> LaneNormalization {
    LaneNormalization::from_stats(stats, clip)
}
