//! Scenarios: a road network, its signals and plans, demand sets and episode settings.
//!
//! A [`Scenario`] is validated once (built-in or from a TOML file, see the crate README
//! for the format) and is cheap to clone: the compiled network is shared. Use
//! [`load`] to resolve a built-in name or a file path, [`Scenario::with_demand`] to pick
//! another demand set (e.g. `single-4way`'s `shifted`), and
//! [`EmbeddedEnv::from_scenario`](crate::EmbeddedEnv::from_scenario) to simulate it.

mod builtin;
mod compile;
pub mod file;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use greenwave_core::{Millis, MovementSet, PhasePlan, RewardKind};

use crate::demand::Profile;
use crate::network::{LinkEnd, Network};
pub use builtin::BUILTIN_NAMES;
use compile::{compile, demand_names, Origin};
pub use file::ScenarioFile;

/// Why a scenario could not be loaded or changed. Messages name the file, line and field.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the format (the message carries the
    /// line, column and key).
    #[error("{origin}: {message}")]
    Parse {
        /// The file.
        origin: String,
        /// The parser's message.
        message: String,
    },
    /// The file parsed but describes an impossible scenario.
    #[error("{origin}{}: {field}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        /// The file (or built-in scenario).
        origin: String,
        /// Line of the table holding the bad field, when known.
        line: Option<usize>,
        /// The field, as a path (`signals[0].arms.north.in`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Neither a built-in name nor an existing file.
    #[error("no scenario `{name}`: not a built-in ({builtins}) and no such file")]
    Unknown {
        /// What was asked for.
        name: String,
        /// The built-in names.
        builtins: String,
    },
    /// The scenario has no demand set of that name.
    #[error("scenario `{scenario}` has no demand `{name}` (have: {available})")]
    UnknownDemand {
        /// The scenario.
        scenario: String,
        /// The demand asked for.
        name: String,
        /// The demands it has.
        available: String,
    },
    /// A setting changed through the API is out of range.
    #[error("scenario `{scenario}`: {message}")]
    Setting {
        /// The scenario.
        scenario: String,
        /// What is wrong.
        message: String,
    },
}

/// One demand set, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct Demand {
    /// Its name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Multiplier over episode time.
    pub profile: Profile,
    /// `(entry link index, veh/h)` before the profile, flows > 0 only.
    pub(crate) flows_veh_per_hour: Vec<(u32, f64)>,
}

/// Saturation-flow parameters of a scenario, as controllers and Webster's method need them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowModel {
    /// Saturation flow of one lane.
    pub saturation_flow_veh_per_hour_per_lane: f64,
    /// Start-up lost time at green onset.
    pub startup_lost_time_s: f64,
    /// Part of the yellow still used by discharging traffic.
    pub yellow_used_s: f64,
}

/// Lanes at one signal that share movements (and so share their traffic), with the mean
/// flow they carry: the unit of Webster's critical flow ratios.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneGroupDemand {
    /// Movements the group serves.
    pub movements: MovementSet,
    /// Lanes in the group.
    pub lanes: u32,
    /// Mean flow over the episode for the active demand.
    pub flow_veh_per_hour: f64,
}

/// A validated scenario. Cheap to clone (the network is shared).
#[derive(Clone, Debug)]
pub struct Scenario {
    file: Arc<ScenarioFile>,
    network: Arc<Network>,
    demands: Arc<Vec<Demand>>,
    active_demand: usize,
    reward: RewardKind,
}

/// Resolves a built-in scenario name (`single-4way`, `arterial-3`, `grid-4x4`) or a path to
/// a TOML scenario file.
pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
    if let Some(s) = builtin(name_or_path) {
        return s;
    }
    let path = Path::new(name_or_path);
    if path.exists() {
        return Scenario::from_file(path);
    }
    Err(ScenarioError::Unknown {
        name: name_or_path.to_string(),
        builtins: BUILTIN_NAMES.join(", "),
    })
}

/// A built-in scenario by name, `None` if there is none of that name.
pub fn builtin(name: &str) -> Option<Result<Scenario, ScenarioError>> {
    let file = builtin::file(name)?;
    let origin = format!("built-in scenario {name}");
    Some(Scenario::compile(
        file,
        &Origin {
            name: &origin,
            text: None,
        },
    ))
}

impl Scenario {
    /// Reads and validates a TOML scenario file.
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and validates a scenario from TOML text; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        Self::compile(
            file,
            &Origin {
                name: origin,
                text: Some(text),
            },
        )
    }

    /// Validates a scenario given as file structures.
    pub fn from_file_struct(file: ScenarioFile) -> Result<Self, ScenarioError> {
        let origin = format!("scenario {}", file.name);
        Self::compile(
            file,
            &Origin {
                name: &origin,
                text: None,
            },
        )
    }

    fn compile(file: ScenarioFile, origin: &Origin) -> Result<Self, ScenarioError> {
        let c = compile(&file, origin)?;
        Ok(Scenario {
            file: Arc::new(file),
            network: Arc::new(c.network),
            demands: Arc::new(c.demands),
            active_demand: c.active_demand,
            reward: c.reward,
        })
    }

    /// The scenario as TOML, in the file format (with the active demand as default).
    pub fn to_toml_string(&self) -> String {
        let mut file = (*self.file).clone();
        file.default_demand = Some(self.demand().name.clone());
        // Serialising plain data structures to TOML cannot fail.
        toml::to_string(&file).unwrap_or_default()
    }

    /// The file structures the scenario was built from.
    pub fn file(&self) -> &ScenarioFile {
        &self.file
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// Its description.
    pub fn description(&self) -> &str {
        &self.file.description
    }

    /// Time between decisions (whole seconds; the file's `decision_interval_s`).
    pub fn decision_interval(&self) -> Millis {
        Millis::from_secs(self.file.decision_interval_s)
    }

    /// Episode length (whole seconds; the file's `episode_s`).
    pub fn episode(&self) -> Millis {
        Millis::from_secs(self.file.episode_s)
    }

    /// The reward signals are scored on.
    pub fn reward_kind(&self) -> RewardKind {
        self.reward
    }

    /// The active demand set.
    pub fn demand(&self) -> &Demand {
        &self.demands[self.active_demand]
    }

    /// Names of all demand sets.
    pub fn demand_names(&self) -> Vec<&str> {
        self.demands.iter().map(|d| d.name.as_str()).collect()
    }

    /// The signals' ids, in action order.
    pub fn signal_ids(&self) -> Vec<&str> {
        self.network.signals.iter().map(|s| s.id.as_str()).collect()
    }

    /// The phase plan of each signal, in action order.
    pub fn plans(&self) -> Vec<&PhasePlan> {
        self.network.signals.iter().map(|s| &s.plan).collect()
    }

    /// The same scenario with demand set `name` active (e.g. `shifted` for the
    /// demand-shifted variant of `single-4way`).
    pub fn with_demand(&self, name: &str) -> Result<Scenario, ScenarioError> {
        let active_demand = self
            .demands
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| ScenarioError::UnknownDemand {
                scenario: self.name().to_string(),
                name: name.to_string(),
                available: demand_names(&self.demands),
            })?;
        Ok(Scenario {
            active_demand,
            ..self.clone()
        })
    }

    /// The same scenario with every flow of every demand set multiplied by `factor`.
    pub fn with_demand_scale(&self, factor: f64) -> Result<Scenario, ScenarioError> {
        if !(factor.is_finite() && factor >= 0.0) {
            return Err(self.setting(format!("demand scale {factor} is not a factor ≥ 0")));
        }
        let demands = self
            .demands
            .iter()
            .map(|d| Demand {
                flows_veh_per_hour: d
                    .flows_veh_per_hour
                    .iter()
                    .map(|&(l, q)| (l, q * factor))
                    .collect(),
                ..d.clone()
            })
            .collect();
        let mut file = (*self.file).clone();
        for d in &mut file.demand {
            for q in d.get_mut().flows_veh_per_hour.values_mut() {
                *q *= factor;
            }
        }
        Ok(Scenario {
            file: Arc::new(file),
            demands: Arc::new(demands),
            ..self.clone()
        })
    }

    /// The same scenario with another episode length (whole seconds, at least one
    /// decision interval: the embedded simulator steps whole seconds).
    pub fn with_episode(&self, episode: Millis) -> Result<Scenario, ScenarioError> {
        if !episode.0.is_multiple_of(1000) || episode < self.decision_interval() {
            return Err(self.setting(format!(
                "episode of {episode} must be whole seconds and at least one decision interval"
            )));
        }
        Ok(self.with_file(|f| f.episode_s = episode.0 / 1000))
    }

    /// The same scenario with another decision interval (whole seconds ≥ 1 s, within the
    /// episode: the embedded simulator steps whole seconds).
    pub fn with_decision_interval(&self, interval: Millis) -> Result<Scenario, ScenarioError> {
        if !interval.0.is_multiple_of(1000) || interval == Millis::ZERO || interval > self.episode()
        {
            return Err(self.setting(format!(
                "decision interval of {interval} must be whole seconds ≥ 1 s and within the episode"
            )));
        }
        Ok(self.with_file(|f| f.decision_interval_s = interval.0 / 1000))
    }

    /// The same scenario with another episode and/or decision interval, checked as a pair:
    /// each setter checks against the other's current value, so the interval goes first
    /// (a short episode of short decisions) unless it is longer than the current episode.
    pub fn with_episode_and_interval(
        &self,
        episode: Option<Millis>,
        interval: Option<Millis>,
    ) -> Result<Scenario, ScenarioError> {
        let mut s = self.clone();
        let interval_first = interval.is_none_or(|d| d <= s.episode());
        if let (Some(d), true) = (interval, interval_first) {
            s = s.with_decision_interval(d)?;
        }
        if let Some(e) = episode {
            s = s.with_episode(e)?;
        }
        if let (Some(d), false) = (interval, interval_first) {
            s = s.with_decision_interval(d)?;
        }
        Ok(s)
    }

    /// The same scenario scored on another reward.
    pub fn with_reward(&self, reward: RewardKind) -> Scenario {
        let name = match reward {
            RewardKind::WaitDelta => file::RewardName::WaitDelta,
            RewardKind::Queue => file::RewardName::Queue,
            RewardKind::Pressure => file::RewardName::Pressure,
            RewardKind::Delay => file::RewardName::Delay,
            RewardKind::DelayDelta => file::RewardName::DelayDelta,
            RewardKind::DelayAccrued => file::RewardName::DelayAccrued,
            RewardKind::DelayAccruedDelta => file::RewardName::DelayAccruedDelta,
        };
        Scenario {
            reward,
            ..self.with_file(|f| f.reward = name)
        }
    }

    /// The same scenario with a setting of its file changed that needs no recompiling.
    fn with_file(&self, change: impl FnOnce(&mut ScenarioFile)) -> Scenario {
        let mut file = (*self.file).clone();
        change(&mut file);
        Scenario {
            file: Arc::new(file),
            ..self.clone()
        }
    }

    fn setting(&self, message: String) -> ScenarioError {
        ScenarioError::Setting {
            scenario: self.name().to_string(),
            message,
        }
    }

    /// Saturation flow, start-up lost time and yellow use.
    pub fn flow_model(&self) -> FlowModel {
        let m = &self.file.model;
        FlowModel {
            saturation_flow_veh_per_hour_per_lane: m.saturation_flow_veh_per_hour_per_lane,
            startup_lost_time_s: m.startup_lost_time_s,
            yellow_used_s: m.yellow_used_s,
        }
    }

    /// Per signal: its lane groups and the mean flow (over the episode, active demand) each
    /// carries, assuming vehicles spread evenly over the lanes open to them. The input of
    /// Webster's method.
    pub fn lane_group_demand(&self) -> Vec<Vec<LaneGroupDemand>> {
        let net = &self.network;
        let d = self.demand();
        let mean = d.profile.mean_over(self.file.episode_s as f64);
        let entry: Vec<(u32, f64)> = d
            .flows_veh_per_hour
            .iter()
            .map(|&(l, q)| (l, q * mean))
            .collect();
        let link_flow = net.link_flows(&entry);
        let mut out = vec![Vec::new(); net.signals.len()];
        for (l, link) in net.links.iter().enumerate() {
            let LinkEnd::Signal { signal, .. } = link.end else {
                continue;
            };
            // Movement flows on this link.
            let mut movement_flow = vec![0.0; net.signals[signal as usize].plan.movements().len()];
            let mut prev = 0.0;
            for &(m, cum) in &link.turn_cdf {
                movement_flow[m as usize] += link_flow[l] * (cum - prev);
                prev = cum;
            }
            // Lanes joined by a shared movement form one group.
            let lanes = link.first_lane..link.first_lane + link.n_lanes;
            let mut groups: Vec<(MovementSet, u32)> = Vec::new();
            for lane in lanes {
                let ms = net.lanes[lane as usize].movements;
                let mut merged = (ms, 1u32);
                groups.retain(|&(g, n)| {
                    if g.and(merged.0).is_empty() {
                        true
                    } else {
                        merged = (merged.0.or(g), merged.1 + n);
                        false
                    }
                });
                groups.push(merged);
            }
            for (movements, lanes) in groups {
                let flow_veh_per_hour = movements.iter().map(|m| movement_flow[m.0 as usize]).sum();
                out[signal as usize].push(LaneGroupDemand {
                    movements,
                    lanes,
                    flow_veh_per_hour,
                });
            }
        }
        out
    }

    pub(crate) fn network(&self) -> &Arc<Network> {
        &self.network
    }
}

#[cfg(test)]
mod tests;
