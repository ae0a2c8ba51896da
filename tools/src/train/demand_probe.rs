//! The demand probe: how often a policy decides when training on a SUMO net that names no
//! interval (tools/README.md, "Training on real networks", finding 13).
//!
//! Before a fresh SUMO run, one training-length episode of the net under max-pressure (the
//! classic controller the policy is judged against, which needs no timing of its own) says
//! whether the net can carry its demand. Where it cannot — max-pressure leaves more than
//! [`SATURATED_BACKLOG_SHARE`] of the episode's vehicles waiting to enter the net when the
//! episode ends — the gain is in capacity (fewer switches, fewer clearance seconds lost),
//! and the policy decides every [`SATURATED_DECISION_INTERVAL_S`]; otherwise the gain is in
//! starting a green as a platoon arrives, and it decides every
//! [`LIGHT_DECISION_INTERVAL_S`].

use anyhow::{Context, Result};
use greenwave_core::Millis;
use greenwave_sim::{ControllerKind, EpisodeMetrics};
use serde::{Deserialize, Serialize};

use crate::backend::EnvSource;

/// Seconds between decisions where the net carries its demand (finding 9).
pub const LIGHT_DECISION_INTERVAL_S: f64 = 2.0;

/// Seconds between decisions on a saturated net (finding 13).
pub const SATURATED_DECISION_INTERVAL_S: f64 = 5.0;

/// The share of an episode's vehicles that max-pressure may leave never inserted before a
/// net counts as saturated. Development nets either leave none or about 1 % (a junction
/// near capacity: `pocket-junction-0.9`) or more than a quarter (game/fkk_in, game/grid6).
pub const SATURATED_BACKLOG_SHARE: f64 = 0.05;

/// What the probe measured and what it chose; `run.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DemandProbe {
    /// The controller probed with.
    pub controller: String,
    /// Its episode's seed (the training seed).
    pub seed: u64,
    /// Seconds simulated.
    pub seconds: f64,
    /// Vehicles that completed their trip.
    pub throughput_veh: u64,
    /// Vehicles never inserted by the episode's end.
    pub backlog_veh: u64,
    /// `backlog / (throughput + backlog)`: of the vehicles that finished or are still
    /// waiting to enter (those on the road at the end count in neither).
    pub backlog_share: f64,
    /// Whether the share is above [`SATURATED_BACKLOG_SHARE`].
    pub saturated: bool,
    /// The interval chosen (s).
    pub decision_interval_s: f64,
}

impl DemandProbe {
    /// The verdict on one episode's metrics.
    pub fn judge(controller: &str, seed: u64, m: &EpisodeMetrics) -> Self {
        let asked = m.throughput_veh + m.backlog_veh;
        let share = if asked == 0 {
            0.0
        } else {
            m.backlog_veh as f64 / asked as f64
        };
        let saturated = share > SATURATED_BACKLOG_SHARE;
        DemandProbe {
            controller: controller.into(),
            seed,
            seconds: m.sim_seconds,
            throughput_veh: m.throughput_veh,
            backlog_veh: m.backlog_veh,
            backlog_share: share,
            saturated,
            decision_interval_s: if saturated {
                SATURATED_DECISION_INTERVAL_S
            } else {
                LIGHT_DECISION_INTERVAL_S
            },
        }
    }

    /// Runs max-pressure for one `episode` of `source` with `seed` and judges it.
    pub fn run(source: &EnvSource, seed: u64, episode: Millis) -> Result<Self> {
        let kind = ControllerKind::MaxPressure;
        let m = source.run_classic(kind, seed, episode).with_context(|| {
            format!(
                "probing the demand of {} under {kind} (pass --decision-interval to skip the probe)",
                source.describe()
            )
        })?;
        Ok(Self::judge(kind.name(), seed, &m))
    }

    /// One line for the terminal.
    pub fn describe(&self) -> String {
        let verdict = if self.saturated {
            "is saturated"
        } else {
            "carries its demand"
        };
        format!(
            "demand probe: {} left {} vehicles never inserted ({:.1} % of those that came) in a \
             {:.0} s episode, seed {}: the net {verdict}, so the policy decides every {} s \
             (--decision-interval overrides)",
            self.controller,
            self.backlog_veh,
            100.0 * self.backlog_share,
            self.seconds,
            self.seed,
            self.decision_interval_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(throughput: u64, backlog: u64) -> EpisodeMetrics {
        EpisodeMetrics {
            throughput_veh: throughput,
            backlog_veh: backlog,
            sim_seconds: 3600.0,
            ..Default::default()
        }
    }

    #[test]
    fn a_net_that_carries_its_demand_decides_every_two_seconds() {
        for (t, b) in [(2000, 0), (3728, 42), (0, 0)] {
            let p = DemandProbe::judge("max-pressure", 1, &metrics(t, b));
            assert!(!p.saturated, "{p:?}");
            assert_eq!(p.decision_interval_s, LIGHT_DECISION_INTERVAL_S);
        }
    }

    #[test]
    fn a_saturated_net_decides_every_five_seconds() {
        let p = DemandProbe::judge("max-pressure", 1, &metrics(1665, 657));
        assert!(p.saturated, "{p:?}");
        assert_eq!(p.decision_interval_s, SATURATED_DECISION_INTERVAL_S);
        assert!((p.backlog_share - 657.0 / 2322.0).abs() < 1e-12);
        assert!(p.describe().contains("every 5 s"), "{}", p.describe());
    }

    #[test]
    fn the_threshold_is_strict() {
        // 5 of 100 exactly is not above 5 %.
        let p = DemandProbe::judge("max-pressure", 1, &metrics(95, 5));
        assert!(!p.saturated, "{p:?}");
        let p = DemandProbe::judge("max-pressure", 1, &metrics(94, 6));
        assert!(p.saturated, "{p:?}");
    }
}
