//! The policy manifest: what a controller must know about a policy before trusting it.
//!
//! Stored as JSON in the ONNX model's `metadata_props` (key [`MANIFEST_KEY`]) and beside
//! it in a bundle.
//!
//! ## Formats
//!
//! `format_version` says how the rest of the JSON is to be read; [`Manifest`]'s
//! `Deserialize` reads it first and then reads the document as exactly that format:
//!
//! * **4** (written for a policy that draws): format 3 and `decision_temperature`, the
//!   rule the policy was selected to act by: it draws each phase from
//!   `softmax(scores / T)` over the allowed phases (greenwave-core's `masked_sample`),
//!   `T` in [`MIN_DECISION_TEMPERATURE`]`..=`[`MAX_DECISION_TEMPERATURE`]. A format-3
//!   reader would ignore the field and run such a policy greedily, which is not the
//!   policy that was measured: so it is a new format, which such a build refuses. A
//!   greedy policy (no temperature) is written as format 3, which every controller since
//!   format 3 reads; a format-4 document without the field is refused.
//! * **3** (written for a greedy policy): format 2 and `program_clock`, whether the observation's last
//!   `P` lanes are program-clock lanes (greenwave-core's `ProgramClock`: the phase the
//!   junction's own timing program serves at that moment), which a controller must
//!   supply from the junction's timing plan. A build that reads only formats 1 and 2
//!   refuses it, rather than feed detector readings where the policy reads its clock.
//!   Optionally `intergreens`, the plan's per-pair intergreen entries (`from_movement`,
//!   `to_movement`, `time_ms`), written only when the plan has any: for people reading,
//!   as `phase_timing` is (the plan hash covers them). Format-3 readers that predate the
//!   field ignore it, so it needs no new format.
//! * **2**: durations are whole milliseconds ([`Millis`], a JSON integer):
//!   `decision_interval_ms`, and per phase `min_green_ms`, `max_green_ms`, `yellow_ms`,
//!   `all_red_ms`; no program clock.
//! * **1**: the same fields, but durations in seconds as JSON numbers (`f32`):
//!   `decision_interval_s`, and per phase `min_green_s`, `max_green_s`, `yellow_s`,
//!   `all_red_s`. Still read, so that bundles already signed and flashed verify and load:
//!   each value is rounded to the nearest millisecond ([`Millis::from_secs_f32`]; the
//!   seconds were written from milliseconds, so nothing is lost), and a negative or
//!   too-large value is refused with the field named.
//!
//! Any other `format_version` is refused. A format-1, -2 or -3 manifest read in is held
//! as the current format (its `format_version` is [`MANIFEST_FORMAT`]), so anything
//! written from it (a re-export, a fine-tuned candidate) is written as format 3; a
//! format-1 to -3 manifest acts greedily, and one that names a decision temperature is
//! refused.

use greenwave_core::{Intergreen, Millis, ObsLayout, PhasePlan, PhaseTiming};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// `metadata_props` key holding the manifest JSON.
pub const MANIFEST_KEY: &str = "greenwave.manifest";
/// Current manifest format version (see the [module docs](self) for the formats read);
/// a greedy policy is written as format 3.
pub const MANIFEST_FORMAT: u32 = 4;

/// The smallest decision temperature a manifest holds: colder is the argmax in all but
/// name, and a draw's logged probability must stay a number.
pub const MIN_DECISION_TEMPERATURE: f32 = 0.01;
/// The largest: hotter is a uniform draw in all but name.
pub const MAX_DECISION_TEMPERATURE: f32 = 100.0;

/// Whether `t` is a decision temperature a manifest may hold
/// ([`MIN_DECISION_TEMPERATURE`]`..=`[`MAX_DECISION_TEMPERATURE`]).
pub fn decision_temperature_ok(t: f32) -> bool {
    (MIN_DECISION_TEMPERATURE..=MAX_DECISION_TEMPERATURE).contains(&t)
}

/// Timing of one phase (for people reading the manifest; the plan hash is what is
/// checked). JSON keys carry the unit: `min_green_ms`, `max_green_ms`, `yellow_ms`,
/// `all_red_ms`, each an integer of milliseconds.
///
/// Not [`greenwave_core::PhaseTiming`] itself: that serializes without units in its keys
/// and with its pedestrian timing, and the manifest's format must not change when the
/// plan's does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseTimingMs {
    /// Min green.
    #[serde(rename = "min_green_ms")]
    pub min_green: Millis,
    /// Max green.
    #[serde(rename = "max_green_ms")]
    pub max_green: Millis,
    /// Yellow.
    #[serde(rename = "yellow_ms")]
    pub yellow: Millis,
    /// All-red.
    #[serde(rename = "all_red_ms")]
    pub all_red: Millis,
}

/// One per-pair intergreen entry of the plan ([`greenwave_core::Intergreen`]), for people
/// reading the manifest: the least time from the end of movement `from_movement`'s green
/// to the start of `to_movement`'s (movement indices of the plan, as `run.json` lists its
/// plans). JSON keys carry the unit, as [`PhaseTimingMs`]'s do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntergreenMs {
    /// The movement whose green ends.
    #[serde(rename = "from_movement")]
    pub from: u8,
    /// The conflicting movement whose green starts.
    #[serde(rename = "to_movement")]
    pub to: u8,
    /// The least time between the two.
    #[serde(rename = "time_ms")]
    pub time: Millis,
}

impl From<&Intergreen> for IntergreenMs {
    fn from(e: &Intergreen) -> Self {
        IntergreenMs {
            from: e.from.0,
            to: e.to.0,
            time: e.time,
        }
    }
}

impl From<&PhaseTiming> for PhaseTimingMs {
    fn from(t: &PhaseTiming) -> Self {
        PhaseTimingMs {
            min_green: t.min_green,
            max_green: t.max_green,
            yellow: t.yellow,
            all_red: t.all_red,
        }
    }
}

/// Where a policy came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The command that produced it.
    pub command: String,
    /// Git revision of the code that produced it (or "unknown").
    pub git_rev: String,
    /// Training seed.
    pub seed: u64,
    /// Scenario (name or file) it was trained on.
    pub scenario: String,
    /// Algorithm ("ppo", "offpolicy-ppo", "finetune").
    pub algorithm: String,
    /// Environment steps (agent decisions) of training.
    pub env_steps: u64,
    /// Parent policy version, for fine-tuned policies.
    #[serde(default)]
    pub parent_version: Option<u32>,
    /// Free-form details (log range, update statistics, ...).
    #[serde(default)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl Provenance {
    /// The key in [`Provenance::details`] of the signal a per-signal export was made for.
    pub const SIGNAL_ID: &'static str = "signal_id";

    /// The signal this policy was exported for (a per-signal export; `None`: any signal
    /// its plan and layout fit). Fine-tuned versions keep their parent's.
    pub fn signal_id(&self) -> Option<&str> {
        self.details.get(Self::SIGNAL_ID)?.as_str()
    }

    /// Binds the policy to signal `id`.
    pub fn set_signal_id(&mut self, id: &str) {
        self.details.insert(Self::SIGNAL_ID.into(), id.into());
    }

    /// The key in [`Provenance::details`] of the reward the policy was trained on.
    pub const REWARD_KIND: &'static str = "reward_kind";

    /// The reward the policy was trained on (`None` in exports from before it was
    /// recorded, or where it does not parse). Fine-tuned versions keep their parent's: a
    /// fine-tune on a log of another reward would optimise, and be gated on, another aim.
    pub fn reward_kind(&self) -> Option<greenwave_core::RewardKind> {
        serde_json::from_value(self.details.get(Self::REWARD_KIND)?.clone()).ok()
    }

    /// Records the reward the policy was trained on.
    pub fn set_reward_kind(&mut self, kind: greenwave_core::RewardKind) {
        let value = serde_json::to_value(kind).unwrap_or_default();
        self.details.insert(Self::REWARD_KIND.into(), value);
    }
}

/// The manifest, as of format [`MANIFEST_FORMAT`]. Serializes as format 4 where it names a
/// decision temperature and as format 3 otherwise (`ManifestV4`); deserializes
/// from any format listed in the [module docs](self) (JSON only: the format is read first).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "ManifestV4")]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`] (also after reading an older format, which is converted).
    pub format_version: u32,
    /// Policy version (1 for a trained policy; bumped by each accepted fine-tune).
    pub policy_version: u32,
    /// Observation layout.
    pub obs_layout: ObsLayout,
    /// Observation layout version (greenwave_core::observation::OBS_LAYOUT_VERSION).
    pub obs_layout_version: u16,
    /// Whether the last `obs_layout.n_phases` lanes of the layout are program-clock lanes
    /// (see the [module docs](self), format 3).
    pub program_clock: bool,
    /// Action index → phase index of the plan.
    pub action_phases: Vec<u8>,
    /// `PhasePlan::hash()` of the plan, hex.
    pub plan_hash: String,
    /// Time between decisions (JSON `decision_interval_ms`).
    #[serde(rename = "decision_interval_ms")]
    pub decision_interval: Millis,
    /// Per-phase timing.
    pub phase_timing: Vec<PhaseTimingMs>,
    /// The plan's per-pair intergreen entries, sorted by (from, to); left out of the JSON
    /// when there are none (see the [module docs](self), format 3).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intergreens: Vec<IntergreenMs>,
    /// Hidden widths of the actor and critic.
    pub hidden: Vec<usize>,
    /// Hidden activation ("tanh" or "relu").
    pub activation: String,
    /// Where it came from.
    pub provenance: Provenance,
    /// The temperature the policy acts at: `None`, greedily (the allowed phase with the
    /// largest score); `Some(T)`, drawing from `softmax(scores / T)` over the allowed
    /// phases (see the [module docs](self), format 4). Left out of the JSON when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_temperature: Option<f32>,
}

impl Manifest {
    /// A manifest for a policy acting on `plan` with `layout`, deciding every
    /// `decision_interval`.
    pub fn new(
        plan: &PhasePlan,
        layout: ObsLayout,
        decision_interval: Millis,
        hidden: Vec<usize>,
        provenance: Provenance,
    ) -> Self {
        Manifest {
            format_version: MANIFEST_FORMAT,
            policy_version: 1,
            obs_layout: layout,
            obs_layout_version: greenwave_core::observation::OBS_LAYOUT_VERSION,
            program_clock: false,
            action_phases: (0..plan.n_phases() as u8).collect(),
            plan_hash: plan_hash_hex(plan),
            decision_interval,
            phase_timing: plan
                .phases()
                .iter()
                .map(|p| PhaseTimingMs::from(&p.timing))
                .collect(),
            intergreens: plan.intergreens().iter().map(IntergreenMs::from).collect(),
            hidden,
            activation: "tanh".into(),
            provenance,
            decision_temperature: None,
        }
    }

    /// The plan hash as a number, if the hex string is well formed.
    pub fn plan_hash_u64(&self) -> Option<u64> {
        u64::from_str_radix(&self.plan_hash, 16).ok()
    }
}

/// The plan fingerprint as 16 hex digits.
pub fn plan_hash_hex(plan: &PhasePlan) -> String {
    format!("{:016x}", plan.hash())
}

impl<'de> Deserialize<'de> for Manifest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The format decides which fields there are, so the document is read whole first
        // and then as the one format it names.
        let doc = serde_json::Value::deserialize(d)?;
        let format = doc
            .get("format_version")
            .ok_or_else(|| D::Error::missing_field("format_version"))?;
        let format = format.as_u64().ok_or_else(|| {
            D::Error::custom(format!(
                "manifest format_version {format} is not a whole number"
            ))
        })?;
        let in_format =
            |e: serde_json::Error| D::Error::custom(format!("manifest format {format}: {e}"));
        match format {
            4 => {
                let m: Manifest = ManifestV4::deserialize(doc).map_err(in_format)?.into();
                match m.decision_temperature {
                    Some(t) if !decision_temperature_ok(t) => Err(D::Error::custom(format!(
                        "manifest format 4: decision_temperature {t} is outside \
                         {MIN_DECISION_TEMPERATURE}..={MAX_DECISION_TEMPERATURE}"
                    ))),
                    None => Err(D::Error::custom(
                        "manifest format 4 without decision_temperature: a greedy policy is \
                         written as format 3",
                    )),
                    Some(_) => Ok(m),
                }
            }
            2 | 3 => {
                // Format 3 is format 4 acting greedily; format 2 is format 3 without a
                // program clock. Neither has a decision temperature: one in such a
                // document is refused, not dropped (the policy would run greedily).
                if doc.get("decision_temperature").is_some() {
                    return Err(D::Error::custom(format!(
                        "manifest format {format} has no decision_temperature (format 4 does)"
                    )));
                }
                let mut doc = doc;
                if let Some(fields) = doc.as_object_mut() {
                    if format == 2 {
                        fields.insert("program_clock".into(), false.into());
                    }
                }
                let mut m: Manifest = ManifestV4::deserialize(doc).map_err(in_format)?.into();
                m.format_version = MANIFEST_FORMAT;
                Ok(m)
            }
            1 => ManifestV1::deserialize(doc)
                .map_err(in_format)?
                .upgrade()
                .map_err(|e| D::Error::custom(format!("manifest format 1: {e}"))),
            _ => Err(D::Error::custom(format!(
                "manifest format {format} is not one this build reads (1 to {MANIFEST_FORMAT})"
            ))),
        }
    }
}

/// Formats 3 and 4 as written: [`Manifest`]'s fields (kept in step with it by the
/// conversions' exhaustive struct literals). Written as format 3 where the policy acts
/// greedily (so a controller that reads formats 1 to 3 still takes it) and as format 4
/// where it names a decision temperature (which such a controller must refuse).
#[derive(Serialize, Deserialize)]
struct ManifestV4 {
    format_version: u32,
    policy_version: u32,
    obs_layout: ObsLayout,
    obs_layout_version: u16,
    program_clock: bool,
    action_phases: Vec<u8>,
    plan_hash: String,
    decision_interval_ms: Millis,
    phase_timing: Vec<PhaseTimingMs>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    intergreens: Vec<IntergreenMs>,
    hidden: Vec<usize>,
    activation: String,
    provenance: Provenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision_temperature: Option<f32>,
}

impl From<Manifest> for ManifestV4 {
    fn from(m: Manifest) -> Self {
        ManifestV4 {
            format_version: match m.decision_temperature {
                Some(_) => MANIFEST_FORMAT,
                None => 3,
            },
            policy_version: m.policy_version,
            obs_layout: m.obs_layout,
            obs_layout_version: m.obs_layout_version,
            program_clock: m.program_clock,
            action_phases: m.action_phases,
            plan_hash: m.plan_hash,
            decision_interval_ms: m.decision_interval,
            phase_timing: m.phase_timing,
            intergreens: m.intergreens,
            hidden: m.hidden,
            activation: m.activation,
            provenance: m.provenance,
            decision_temperature: m.decision_temperature,
        }
    }
}

impl From<ManifestV4> for Manifest {
    fn from(m: ManifestV4) -> Self {
        Manifest {
            format_version: m.format_version,
            policy_version: m.policy_version,
            obs_layout: m.obs_layout,
            obs_layout_version: m.obs_layout_version,
            program_clock: m.program_clock,
            action_phases: m.action_phases,
            plan_hash: m.plan_hash,
            decision_interval: m.decision_interval_ms,
            phase_timing: m.phase_timing,
            intergreens: m.intergreens,
            hidden: m.hidden,
            activation: m.activation,
            provenance: m.provenance,
            decision_temperature: m.decision_temperature,
        }
    }
}

/// Format 1 as it was written (durations in seconds, `f32`). Frozen: never changes.
#[derive(Deserialize)]
struct ManifestV1 {
    policy_version: u32,
    obs_layout: ObsLayout,
    obs_layout_version: u16,
    action_phases: Vec<u8>,
    plan_hash: String,
    decision_interval_s: f32,
    phase_timing: Vec<PhaseTimingSecsV1>,
    hidden: Vec<usize>,
    activation: String,
    provenance: Provenance,
}

/// Format 1's per-phase timing, in seconds.
#[derive(Deserialize)]
struct PhaseTimingSecsV1 {
    min_green_s: f32,
    max_green_s: f32,
    yellow_s: f32,
    all_red_s: f32,
}

/// Seconds of a format-1 field as milliseconds, or which field is not a duration.
fn secs_field(field: &str, s: f32) -> Result<Millis, String> {
    Millis::from_secs_f32(s).ok_or_else(|| {
        format!(
            "{field} = {s} is not a duration (negative, not a number, or over {} s)",
            u32::MAX / 1000
        )
    })
}

impl ManifestV1 {
    /// The same manifest in the current format.
    fn upgrade(self) -> Result<Manifest, String> {
        let phase_timing = self
            .phase_timing
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let f = |name: &str, s| secs_field(&format!("phase_timing[{i}].{name}"), s);
                Ok(PhaseTimingMs {
                    min_green: f("min_green_s", t.min_green_s)?,
                    max_green: f("max_green_s", t.max_green_s)?,
                    yellow: f("yellow_s", t.yellow_s)?,
                    all_red: f("all_red_s", t.all_red_s)?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Manifest {
            format_version: MANIFEST_FORMAT,
            policy_version: self.policy_version,
            obs_layout: self.obs_layout,
            obs_layout_version: self.obs_layout_version,
            program_clock: false,
            action_phases: self.action_phases,
            plan_hash: self.plan_hash,
            decision_interval: secs_field("decision_interval_s", self.decision_interval_s)?,
            phase_timing,
            intergreens: Vec::new(),
            hidden: self.hidden,
            activation: self.activation,
            provenance: self.provenance,
            decision_temperature: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> PhasePlan {
        PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(8, 60, 3, 2)).unwrap()
    }

    fn layout() -> ObsLayout {
        ObsLayout {
            n_lanes: 12,
            n_phases: 4,
        }
    }

    /// A format-1 manifest as the format-1 code wrote it (`serde_json::to_string_pretty`
    /// of the old struct, seconds as `f32`), with some fractional seconds.
    const FORMAT_1: &str = r#"{
  "format_version": 1,
  "policy_version": 3,
  "obs_layout": {
    "n_lanes": 12,
    "n_phases": 4
  },
  "obs_layout_version": 1,
  "action_phases": [
    0,
    1,
    2,
    3
  ],
  "plan_hash": "2eeb2622275d4f0b",
  "decision_interval_s": 2.5,
  "phase_timing": [
    {
      "min_green_s": 8.0,
      "max_green_s": 60.0,
      "yellow_s": 3.0,
      "all_red_s": 2.0
    },
    {
      "min_green_s": 7.5,
      "max_green_s": 45.25,
      "yellow_s": 3.5,
      "all_red_s": 0.0
    }
  ],
  "hidden": [
    64,
    64
  ],
  "activation": "tanh",
  "provenance": {
    "command": "greenwave train --scenario single-4way",
    "git_rev": "2280b1c50f34",
    "seed": 1,
    "scenario": "single-4way",
    "algorithm": "ppo",
    "env_steps": 1000800,
    "parent_version": null,
    "details": {
      "iterations": 695
    }
  }
}"#;

    #[test]
    fn format_1_reads_with_the_same_values() {
        let m: Manifest = serde_json::from_str(FORMAT_1).unwrap();
        assert_eq!(m.format_version, MANIFEST_FORMAT);
        assert_eq!(m.policy_version, 3);
        assert_eq!(m.obs_layout, layout());
        assert_eq!(m.obs_layout_version, 1);
        assert_eq!(m.action_phases, [0, 1, 2, 3]);
        assert_eq!(m.plan_hash, "2eeb2622275d4f0b");
        assert_eq!(m.decision_interval, Millis(2500));
        assert_eq!(
            m.phase_timing,
            [
                PhaseTimingMs {
                    min_green: Millis(8000),
                    max_green: Millis(60_000),
                    yellow: Millis(3000),
                    all_red: Millis(2000),
                },
                PhaseTimingMs {
                    min_green: Millis(7500),
                    max_green: Millis(45_250),
                    yellow: Millis(3500),
                    all_red: Millis(0),
                },
            ]
        );
        assert_eq!(m.hidden, [64, 64]);
        assert_eq!(m.activation, "tanh");
        assert_eq!(m.provenance.seed, 1);
        assert_eq!(m.provenance.env_steps, 1_000_800);
        assert_eq!(m.provenance.details["iterations"], 695);
        // Seconds as the old code read them are the new values in seconds.
        assert_eq!(m.decision_interval.as_secs_f32(), 2.5);
        assert_eq!(m.phase_timing[1].max_green.as_secs_f32(), 45.25);
    }

    #[test]
    fn format_1_read_in_is_written_as_format_3() {
        let m: Manifest = serde_json::from_str(FORMAT_1).unwrap();
        assert!(!m.program_clock);
        assert_eq!(m.decision_temperature, None);
        assert_eq!(m.format_version, MANIFEST_FORMAT);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["format_version"], 3,
            "a greedy policy is written as format 3"
        );
        assert!(v.get("decision_temperature").is_none(), "{v}");
        assert_eq!(v["program_clock"], false);
        assert_eq!(v["decision_interval_ms"], 2500);
        assert_eq!(v["phase_timing"][1]["max_green_ms"], 45_250);
        let again: Manifest = serde_json::from_value(v).unwrap();
        assert_eq!(again, m);
    }

    /// A manifest of a small network on [`plan`] and [`layout`].
    fn small() -> Manifest {
        Manifest::new(
            &plan(),
            layout(),
            Millis(5000),
            vec![8],
            Provenance::default(),
        )
    }

    #[test]
    fn format_2_reads_without_a_program_clock() {
        let m = small();
        let mut v = serde_json::to_value(&m).unwrap();
        v["format_version"] = 2.into();
        v.as_object_mut().unwrap().remove("program_clock");
        let back: Manifest = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
        // A format-3 manifest must say whether it has a clock.
        let mut v = serde_json::to_value(&m).unwrap();
        v.as_object_mut().unwrap().remove("program_clock");
        let e = serde_json::from_value::<Manifest>(v)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("manifest format 3: missing field `program_clock`"),
            "{e}"
        );
    }

    #[test]
    fn the_plans_intergreens_are_listed_only_when_it_has_some() {
        use greenwave_core::MovementId;
        // Without entries the JSON is as format 3 was first written: no `intergreens` key.
        let v = serde_json::to_value(small()).unwrap();
        assert!(v.get("intergreens").is_none(), "{v}");
        // Movement 1 (north through) conflicts with 4 (east through), and 4 with 7.
        let entry = |from, to, ms| Intergreen {
            from: MovementId(from),
            to: MovementId(to),
            time: Millis(ms),
        };
        let with = plan()
            .with_intergreens(&[entry(4, 7, 6500), entry(1, 4, 9000)])
            .unwrap();
        let m = Manifest::new(
            &with,
            layout(),
            Millis(5000),
            vec![8],
            Provenance::default(),
        );
        // The hash covers the entries; the list is what a person reads.
        assert_ne!(m.plan_hash, small().plan_hash);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v["intergreens"],
            serde_json::json!([
                {"from_movement": 1, "to_movement": 4, "time_ms": 9000},
                {"from_movement": 4, "to_movement": 7, "time_ms": 6500},
            ])
        );
        let back: Manifest = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, m);
        // A reader of format 3 from before the field (no `intergreens` in its struct)
        // still reads such a manifest: serde ignores the key it does not know.
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct EarlierV3 {
            format_version: u32,
            plan_hash: String,
            phase_timing: Vec<PhaseTimingMs>,
        }
        let earlier: EarlierV3 = serde_json::from_value(v).unwrap();
        assert_eq!(earlier.plan_hash, m.plan_hash);
    }

    #[test]
    fn format_4_round_trips() {
        let mut m = Manifest::new(
            &plan(),
            layout(),
            Millis(5000),
            vec![64, 32],
            Provenance {
                command: "test".into(),
                seed: 9,
                ..Provenance::default()
            },
        );
        assert_eq!(m.format_version, 4);
        m.program_clock = true;
        m.decision_temperature = Some(0.5);
        let text = serde_json::to_string_pretty(&m).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format_version"], 4);
        assert_eq!(v["decision_temperature"], 0.5);
        assert_eq!(v["program_clock"], true);
        assert_eq!(v["decision_interval_ms"], 5000);
        assert_eq!(v["phase_timing"].as_array().unwrap().len(), 4);
        assert_eq!(
            v["phase_timing"][0],
            serde_json::json!({
                "min_green_ms": 8000,
                "max_green_ms": 60000,
                "yellow_ms": 3000,
                "all_red_ms": 2000
            })
        );
        assert!(!text.contains("_s\""), "seconds keys in format 4: {text}");
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, m);
        assert_eq!(serde_json::to_string_pretty(&back).unwrap(), text);
    }

    fn err(json: &str) -> String {
        serde_json::from_str::<Manifest>(json)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn format_1_refuses_values_that_are_not_durations() {
        let negative = FORMAT_1.replace("\"yellow_s\": 3.5", "\"yellow_s\": -3.5");
        let e = err(&negative);
        assert!(
            e.contains("manifest format 1") && e.contains("phase_timing[1].yellow_s = -3.5"),
            "{e}"
        );
        let huge = FORMAT_1.replace(
            "\"decision_interval_s\": 2.5",
            "\"decision_interval_s\": 1e30",
        );
        let e = err(&huge);
        assert!(e.contains("decision_interval_s = "), "{e}");
        // JSON has no NaN: the old writer wrote `null`, which never read as a number.
        let null = FORMAT_1.replace(
            "\"decision_interval_s\": 2.5",
            "\"decision_interval_s\": null",
        );
        assert!(err(&null).contains("manifest format 1"));
    }

    #[test]
    fn each_format_is_read_with_its_own_keys_only() {
        // Format 2 keys under format 1, and format 1 keys under format 2, are refused.
        let m = small();
        let mut v = serde_json::to_value(&m).unwrap();
        v["format_version"] = 1.into();
        let e = serde_json::from_value::<Manifest>(v)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("manifest format 1: missing field `") && e.contains("_s`"),
            "{e}"
        );
        let e = err(&FORMAT_1.replace("\"format_version\": 1", "\"format_version\": 2"));
        assert!(
            e.starts_with("manifest format 2: missing field `") && e.contains("_ms`"),
            "{e}"
        );
    }

    #[test]
    fn unknown_or_missing_formats_are_refused() {
        let e = err(&FORMAT_1.replace("\"format_version\": 1", "\"format_version\": 5"));
        assert!(
            e.contains("manifest format 5 is not one this build reads"),
            "{e}"
        );
        let e = err(&FORMAT_1.replace("\"format_version\": 1", "\"format_version\": \"1\""));
        assert!(e.contains("not a whole number"), "{e}");
        let e = err(&FORMAT_1.replace("\"format_version\": 1,", ""));
        assert!(e.contains("missing field `format_version`"), "{e}");
        assert!(serde_json::from_str::<Manifest>("[1, 2]").is_err());
    }

    #[test]
    fn a_decision_temperature_is_read_from_format_4_only_and_must_be_positive() {
        let mut m = small();
        m.decision_temperature = Some(0.5);
        let v = serde_json::to_value(&m).unwrap();
        let back: Manifest = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.decision_temperature, Some(0.5));
        assert_eq!(v["format_version"], 4);
        // Format 3 has no such field: one there is refused, not dropped (the policy would
        // run greedily), and format 4 without one is refused too.
        let mut v3 = v.clone();
        v3["format_version"] = 3.into();
        let e = serde_json::from_value::<Manifest>(v3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("format 3 has no decision_temperature"), "{e}");
        let mut v4 = v.clone();
        v4.as_object_mut().unwrap().remove("decision_temperature");
        let e = serde_json::from_value::<Manifest>(v4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a greedy policy is written as format 3"), "{e}");
        for bad in [0.0, -0.5, 0.001, 1e3] {
            let mut bad_v = v.clone();
            bad_v["decision_temperature"] = bad.into();
            let e = serde_json::from_value::<Manifest>(bad_v)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("decision_temperature") && e.contains("is outside 0.01..=100"),
                "{e}"
            );
        }
        let mut text_v = v;
        text_v["decision_temperature"] = "hot".into();
        assert!(serde_json::from_value::<Manifest>(text_v).is_err());
    }
}
