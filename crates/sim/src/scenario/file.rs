//! The scenario file format (TOML), as serde structures.
//!
//! These structures mirror the file one to one; the scenario compiler validates them and turns
//! them into the simulator's network. Built-in scenarios are written as these same
//! structures, so they go through exactly the same checks as a user's file. The format is
//! documented, with an example, in the crate README.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Scenario name.
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Seconds between decisions (whole seconds, at least 1).
    #[serde(default = "default_decision_interval_s")]
    pub decision_interval_s: u32,
    /// Episode length in seconds.
    #[serde(default = "default_episode_s")]
    pub episode_s: u32,
    /// Reward: `wait-delta`, `queue`, `pressure`, `delay` or `delay-delta`.
    #[serde(default)]
    pub reward: RewardName,
    /// Name of the demand used unless another is chosen; the first one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_demand: Option<String>,
    /// Traffic-flow model parameters.
    #[serde(default)]
    pub model: ModelFile,
    /// Road links.
    pub links: Vec<Spanned<LinkFile>>,
    /// Signalised junctions.
    pub signals: Vec<Spanned<SignalFile>>,
    /// Demand sets; one is active at a time.
    pub demand: Vec<Spanned<DemandFile>>,
}

/// Default decision interval.
pub(crate) fn default_decision_interval_s() -> u32 {
    5
}

/// Default episode length.
pub(crate) fn default_episode_s() -> u32 {
    3600
}

/// The reward as written in a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RewardName {
    /// Decrease in accumulated waiting time.
    #[default]
    WaitDelta,
    /// Minus the halted vehicles.
    Queue,
    /// Minus the absolute pressure.
    Pressure,
    /// Minus the incoming vehicles' delay rate.
    Delay,
    /// Decrease in the incoming vehicles' delay.
    DelayDelta,
    /// Minus the delay the vehicles lost near the signal in the interval.
    DelayAccrued,
    /// The two before, summed.
    DelayAccruedDelta,
}

/// Traffic-flow model parameters, shared by every link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelFile {
    /// Saturation flow of one lane at the stop line.
    pub saturation_flow_veh_per_hour_per_lane: f64,
    /// Start-up lost time of a standing queue when its movement turns green.
    pub startup_lost_time_s: f64,
    /// Part of the yellow still used by discharging vehicles (the end gain).
    pub yellow_used_s: f64,
    /// Road length one queued vehicle takes up (sets lane storage).
    pub jam_spacing_m: f64,
    /// Stop-line detector zone, as seconds of free-flow travel upstream of the stop line.
    pub detector_zone_s: f64,
}

impl Default for ModelFile {
    fn default() -> Self {
        ModelFile {
            saturation_flow_veh_per_hour_per_lane: 1800.0,
            startup_lost_time_s: 2.0,
            yellow_used_s: 2.0,
            jam_spacing_m: 7.5,
            detector_zone_s: 3.0,
        }
    }
}

/// One directed road link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkFile {
    /// Unique id.
    pub id: String,
    /// Length, in (0, 50 000] m.
    pub length_m: f64,
    /// Speed limit (vehicles travel at it when not queued).
    pub speed_limit_kmh: f64,
    /// Number of lanes.
    pub lanes: u32,
    /// For a link ending at a signal: the turns each lane serves, left lane first, e.g.
    /// `["L", "T", "TR"]` (L left, T through, R right, U U-turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane_turns: Option<Vec<String>>,
    /// For a link ending at a signal: the share of its vehicles taking each turn there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_ratios: Option<TurnRatiosFile>,
}

/// Turning shares at the end of a link (normalised; they need not add up to 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TurnRatiosFile {
    /// Turning left.
    pub left: f64,
    /// Going straight on.
    pub through: f64,
    /// Turning right.
    pub right: f64,
    /// Turning back.
    pub u_turn: f64,
}

/// A signalised junction with up to four arms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalFile {
    /// Unique id.
    pub id: String,
    /// The links meeting here, by compass arm.
    pub arms: ArmsFile,
    /// Timing of every phase (phases may override it).
    #[serde(default)]
    pub timing: TimingFile,
    /// A preset plan: `four-arm-protected-left`. Give either this or `phases`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Explicit phases. Give either this or `plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Vec<PhaseFile>>,
    /// The phase green at the start of an episode.
    #[serde(default)]
    pub initial_phase: u8,
}

/// The four compass arms of a junction (arm indices 0–3 clockwise from north).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmsFile {
    /// Arm 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub north: Option<ArmFile>,
    /// Arm 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub east: Option<ArmFile>,
    /// Arm 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub south: Option<ArmFile>,
    /// Arm 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub west: Option<ArmFile>,
}

impl ArmsFile {
    /// The arms in index order with their compass names.
    pub fn by_index(&self) -> [(&'static str, Option<&ArmFile>); 4] {
        [
            ("north", self.north.as_ref()),
            ("east", self.east.as_ref()),
            ("south", self.south.as_ref()),
            ("west", self.west.as_ref()),
        ]
    }
}

/// One arm: the link arriving at the junction and the link leaving it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmFile {
    /// Id of the link arriving on this arm.
    #[serde(rename = "in", default, skip_serializing_if = "Option::is_none")]
    pub incoming: Option<String>,
    /// Id of the link leaving on this arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
}

/// Phase timing in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimingFile {
    /// Shortest green.
    pub min_green_s: f64,
    /// Longest green.
    pub max_green_s: f64,
    /// Yellow change interval (3–6 s).
    pub yellow_s: f64,
    /// All-red clearance (0–6 s).
    pub all_red_s: f64,
}

impl Default for TimingFile {
    fn default() -> Self {
        TimingFile {
            min_green_s: 8.0,
            max_green_s: 60.0,
            yellow_s: 3.0,
            all_red_s: 2.0,
        }
    }
}

/// One explicit phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseFile {
    /// Movements green in this phase, as arm letter + turn letter: `NT` (through from
    /// north), `EL` (left from east), `SR`, `WU`.
    pub movements: Vec<String>,
    /// Overrides the signal's min green.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_green_s: Option<f64>,
    /// Overrides the signal's max green.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_green_s: Option<f64>,
    /// Overrides the signal's yellow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yellow_s: Option<f64>,
    /// Overrides the signal's all-red.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_red_s: Option<f64>,
}

/// One demand set: entry flows and their time profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemandFile {
    /// Name (`--demand NAME`).
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Multiplier of every flow over the episode: `[[time_s, multiplier], ...]`, linear in
    /// between, constant outside; each multiplier in 0..=10. Flat (1.0) when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<[f64; 2]>,
    /// Mean arrival rate (before the profile) at each entry link, by link id.
    pub flows_veh_per_hour: BTreeMap<String, f64>,
}
