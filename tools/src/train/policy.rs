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
/// approx-KL, as the MLP's update does, so it takes larger steps and fewer passes; finding
/// 11: twice the entropy bonus helped DRT, fkk_in and random/seed2 and left random/seed3
/// within its bar). `None` keeps `TrainConfig::ppo`'s; runs recorded before a field existed
/// load it as `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SharedOverrides {
    /// Initial learning rate.
    pub learning_rate: Option<f64>,
    /// Epochs per iteration.
    pub epochs: Option<usize>,
    /// Entropy bonus coefficient.
    pub ent_coef: Option<f32>,
}

/// The SUMO recipe's entropy bonus for the shared network (twice PPO's default 0.01).
pub const SUMO_SHARED_ENT_COEF: f32 = 0.02;

impl SharedOverrides {
    /// The SUMO recipe's: learning rate 1e-3, 5 epochs and entropy bonus
    /// [`SUMO_SHARED_ENT_COEF`], each where the command did not ask for its own.
    pub fn sumo(
        asked_learning_rate: Option<f64>,
        asked_epochs: Option<usize>,
        asked_ent_coef: Option<f32>,
    ) -> Self {
        SharedOverrides {
            learning_rate: asked_learning_rate.is_none().then_some(1e-3),
            epochs: asked_epochs.is_none().then_some(5),
            ent_coef: asked_ent_coef.is_none().then_some(SUMO_SHARED_ENT_COEF),
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
        if let Some(ent_coef) = self.ent_coef {
            ppo.ent_coef = ent_coef;
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

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_learn::ppo::PpoConfig;

    #[test]
    fn the_sumo_recipe_changes_only_the_shared_network_and_only_what_was_not_asked() {
        let base = PpoConfig::default();
        let recipe = SharedOverrides::sumo(None, None, None);
        let mut shared = base.clone();
        recipe.apply(PolicyKind::Shared, &mut shared);
        assert_eq!(
            (shared.learning_rate, shared.epochs, shared.ent_coef),
            (1e-3, 5, SUMO_SHARED_ENT_COEF)
        );
        let mut mlp = base.clone();
        recipe.apply(PolicyKind::Mlp, &mut mlp);
        assert_eq!(mlp, base, "the MLP keeps PPO's defaults");
        // A value the command asked for is not overridden (the command sets it itself;
        // tools/tests/sumo_backend.rs checks that end to end).
        let asked = SharedOverrides::sumo(Some(5e-4), None, Some(0.005));
        assert_eq!((asked.learning_rate, asked.ent_coef), (None, None));
        assert_eq!(asked.epochs, Some(5));
    }

    #[test]
    fn runs_recorded_before_the_entropy_override_load_without_it() {
        let old: SharedOverrides =
            serde_json::from_str(r#"{"learning_rate":0.001,"epochs":5}"#).unwrap();
        assert_eq!(old.ent_coef, None);
        assert_eq!(old.learning_rate, Some(1e-3));
    }
}
