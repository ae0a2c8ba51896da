//! The transition record logged on controllers and used for fine-tuning.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::reward::RewardKind;

/// Largest observation a [`Transition`] holds by default (the host's controller, logs and
/// fine-tuning): 256 floats, 118 lanes at 16 phases. Real junctions need more than the 96
/// this once was: SUMO's `fokr_bs_demo` observes 115 (52 lanes, 44 of them detector lanes
/// and 8 clock lanes, and 8 phases), and the controller refused its policy. The firmware
/// keeps its own smaller capacity; the wire format does not depend on it.
pub const MAX_OBS_DIM: usize = 256;

/// Who chose the phase that was actually served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActionSource {
    /// The policy's request was served as asked.
    #[default]
    Policy,
    /// The supervisor (sequencer) served something else (min/max green, clearance).
    Supervisor,
    /// The fallback plan acted (the policy was not consulted or not trusted).
    Fallback,
}

impl ActionSource {
    /// Its name in reports: "policy", "supervisor" or "fallback".
    pub fn name(self) -> &'static str {
        match self {
            ActionSource::Policy => "policy",
            ActionSource::Supervisor => "supervisor",
            ActionSource::Fallback => "fallback",
        }
    }
}

/// One decision of one signal: `(s, a, r, s', log π(a|s))` plus what the off-policy
/// learner needs to treat it correctly.
///
/// `OBS` is the capacity of the observation vectors; the wire format (postcard) does not
/// depend on it, so a firmware with `Transition<32>` and a host with the default produce and
/// read the same bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transition<const OBS: usize = MAX_OBS_DIM> {
    /// Milliseconds since the controller's epoch (the log says which).
    pub timestamp_ms: u64,
    /// Which signal of the controller.
    pub signal: u16,
    /// Observation before the action.
    pub obs: Vec<f32, OBS>,
    /// The phase the policy requested (meaningless if `source` is `Fallback`).
    pub requested: u8,
    /// The phase actually served next.
    pub action: u8,
    /// `log π(requested | obs)` under the acting policy (0 when the fallback acted).
    pub log_prob: f32,
    /// Reward for the interval that followed.
    pub reward: f32,
    /// Observation after the interval.
    pub next_obs: Vec<f32, OBS>,
    /// Whether the episode (or log session) ended here.
    pub done: bool,
    /// Version of the policy that acted.
    pub policy_version: u32,
    /// Who chose the served phase.
    pub source: ActionSource,
    /// Which reward `reward` is (`None` in records written before reward kinds were
    /// recorded). Fine-tuning refuses a log that mixes kinds.
    pub reward_kind: Option<RewardKind>,
}

/// Why record bytes are not a [`Transition`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not a postcard transition in either layout (or an observation too long).
    #[error("not a transition record: {0}")]
    Decode(postcard::Error),
    /// Bytes left after the record.
    #[error("{0} bytes follow the record")]
    TrailingBytes(usize),
}

/// The record layout before [`Transition::reward_kind`] existed: the same fields in the same
/// order, without it. Kept so that logs and frames written then stay readable.
#[derive(Deserialize)]
struct LegacyTransition<const OBS: usize> {
    timestamp_ms: u64,
    signal: u16,
    obs: Vec<f32, OBS>,
    requested: u8,
    action: u8,
    log_prob: f32,
    reward: f32,
    next_obs: Vec<f32, OBS>,
    done: bool,
    policy_version: u32,
    source: ActionSource,
}

impl<const OBS: usize> From<LegacyTransition<OBS>> for Transition<OBS> {
    fn from(t: LegacyTransition<OBS>) -> Self {
        Transition {
            timestamp_ms: t.timestamp_ms,
            signal: t.signal,
            obs: t.obs,
            requested: t.requested,
            action: t.action,
            log_prob: t.log_prob,
            reward: t.reward,
            next_obs: t.next_obs,
            done: t.done,
            policy_version: t.policy_version,
            source: t.source,
            reward_kind: None,
        }
    }
}

impl<const OBS: usize> Transition<OBS> {
    /// Why this record cannot be a controller's, if it cannot: an observation or reward
    /// that is not a finite number, a `log_prob` that is NaN or above 0 (no log-probability
    /// is) or −∞ where the policy chose, or a phase index no plan has. A controller never writes such a record; a
    /// firmware frame or log record that decodes to one is damaged or forged, and learning
    /// from it would spread its NaN through every weight.
    pub fn problem(&self) -> Option<&'static str> {
        let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
        if !finite(&self.obs) || !finite(&self.next_obs) {
            Some("an observation value is not a finite number")
        } else if !self.reward.is_finite() {
            Some("the reward is not a finite number")
        } else if self.log_prob.is_nan() || self.log_prob > 0.0 {
            Some("log_prob is NaN or above 0, not a log-probability")
        } else if self.source == ActionSource::Policy && self.log_prob == f32::NEG_INFINITY {
            Some("log_prob is −∞ for a phase the policy chose: it cannot choose one it gives no chance")
        } else if usize::from(self.action.max(self.requested)) >= crate::plan::MAX_PHASES {
            Some("a phase index beyond the largest plan's")
        } else {
            None
        }
    }

    /// Decodes exactly one record (the whole of `bytes`): the current layout, or the
    /// layout before reward kinds were recorded (then `reward_kind` is `None`). The two
    /// cannot be confused: the current layout is the old one plus a last field, so old
    /// bytes end before it and current bytes leave it over for the old layout.
    pub fn from_record_bytes(bytes: &[u8]) -> Result<Self, RecordError> {
        let current = postcard::take_from_bytes::<Self>(bytes);
        if let Ok((t, [])) = current {
            return Ok(t);
        }
        if let Ok((t, [])) = postcard::take_from_bytes::<LegacyTransition<OBS>>(bytes) {
            return Ok(t.into());
        }
        match current {
            Ok((_, rest)) => Err(RecordError::TrailingBytes(rest.len())),
            Err(e) => Err(RecordError::Decode(e)),
        }
    }

    /// Whether this record is a sample of the acting policy (served as the policy asked).
    /// Only such records may enter importance ratios; the others are still valid
    /// experience for a Q-critic.
    pub fn is_policy_sample(&self) -> bool {
        self.source == ActionSource::Policy && self.requested == self.action
    }

    /// The max-green relabel, the one place it is written: when `seq` (the signal's
    /// sequencer at the end of the interval this record's action was served in) changed
    /// phase because max green ran out, the phase served is the one it changed to, and a
    /// policy's decision becomes the supervisor's. Returns whether a policy decision was
    /// relabelled.
    pub fn relabel_max_green(&mut self, seq: &crate::Sequencer) -> bool {
        if !seq.max_green_forced() {
            return false;
        }
        self.action = seq.interval().target().0;
        let relabelled = self.source == ActionSource::Policy;
        if relabelled {
            self.source = ActionSource::Supervisor;
        }
        relabelled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<const N: usize>() -> Transition<N> {
        Transition {
            timestamp_ms: 123_456_789,
            signal: 3,
            obs: Vec::from_slice(&[0.1, 0.2, 1.0]).unwrap(),
            requested: 2,
            action: 1,
            log_prob: -0.7,
            reward: -1.25,
            next_obs: Vec::from_slice(&[0.3, 0.2, 0.0]).unwrap(),
            done: false,
            policy_version: 7,
            source: ActionSource::Supervisor,
            reward_kind: Some(RewardKind::Queue),
        }
    }

    /// What no controller writes is named; a supervisor's record may give its phase no
    /// chance under the policy, a policy's choice may not.
    #[test]
    fn a_record_no_controller_writes_has_a_problem() {
        let ok: Transition = sample();
        assert_eq!(ok.problem(), None);
        let never = Transition {
            log_prob: f32::NEG_INFINITY,
            ..ok.clone()
        };
        assert_eq!(never.problem(), None, "a supervisor's override");
        let chosen = Transition {
            source: ActionSource::Policy,
            ..never
        };
        assert!(chosen.problem().unwrap().contains("−∞"));
        for bad in [
            Transition {
                log_prob: f32::NAN,
                ..ok.clone()
            },
            Transition {
                log_prob: 0.5,
                ..ok.clone()
            },
            Transition {
                reward: f32::INFINITY,
                ..ok.clone()
            },
            Transition {
                action: 16,
                ..ok.clone()
            },
        ] {
            assert!(bad.problem().is_some(), "{bad:?}");
        }
    }

    #[test]
    fn postcard_round_trip_across_capacities() {
        let t: Transition = sample();
        let mut buf = [0u8; 128];
        let used = postcard::to_slice(&t, &mut buf).unwrap();
        let back: Transition = postcard::from_bytes(used).unwrap();
        assert_eq!(back, t);
        let small: Transition<4> = postcard::from_bytes(used).unwrap();
        assert_eq!(small.obs.as_slice(), t.obs.as_slice());
        assert!(!back.is_policy_sample());
    }

    #[test]
    fn max_green_relabels_a_policy_decision_as_the_supervisors() {
        use crate::{PhaseId, PhasePlan, PhaseTiming, Sequencer};
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap();
        let mut seq = Sequencer::new(plan, PhaseId(0)).unwrap();
        let mut t: Transition = sample();
        t.source = ActionSource::Policy;
        t.action = 0;
        seq.request(0);
        seq.tick(crate::Millis::from_secs(20));
        assert!(!t.relabel_max_green(&seq), "no max-green change yet");
        assert_eq!((t.action, t.source), (0, ActionSource::Policy));
        seq.tick(crate::Millis::from_secs(10));
        assert!(t.relabel_max_green(&seq));
        assert_eq!((t.action, t.source), (1, ActionSource::Supervisor));
        let mut f: Transition = sample();
        f.source = ActionSource::Fallback;
        assert!(
            !f.relabel_max_green(&seq),
            "only policy decisions are relabelled"
        );
        assert_eq!((f.action, f.source), (1, ActionSource::Fallback));
    }

    #[test]
    fn records_without_a_reward_kind_stay_readable() {
        #[derive(Serialize)]
        struct Legacy<'a> {
            timestamp_ms: u64,
            signal: u16,
            obs: &'a [f32],
            requested: u8,
            action: u8,
            log_prob: f32,
            reward: f32,
            next_obs: &'a [f32],
            done: bool,
            policy_version: u32,
            source: ActionSource,
        }
        let t: Transition = sample();
        let old = postcard::to_allocvec(&Legacy {
            timestamp_ms: t.timestamp_ms,
            signal: t.signal,
            obs: &t.obs,
            requested: t.requested,
            action: t.action,
            log_prob: t.log_prob,
            reward: t.reward,
            next_obs: &t.next_obs,
            done: t.done,
            policy_version: t.policy_version,
            source: t.source,
        })
        .unwrap();
        let back = Transition::<MAX_OBS_DIM>::from_record_bytes(&old).unwrap();
        assert_eq!(back.reward_kind, None);
        assert_eq!(
            Transition {
                reward_kind: t.reward_kind,
                ..back
            },
            t
        );
        let new = postcard::to_allocvec(&t).unwrap();
        assert_eq!(new.len(), old.len() + 2, "an Option tag and the kind");
        assert_eq!(Transition::<MAX_OBS_DIM>::from_record_bytes(&new), Ok(t));
        let mut long = new.clone();
        long.push(0);
        assert_eq!(
            Transition::<MAX_OBS_DIM>::from_record_bytes(&long),
            Err(RecordError::TrailingBytes(1))
        );
        assert!(Transition::<MAX_OBS_DIM>::from_record_bytes(&new[..new.len() - 3]).is_err());
    }

    #[test]
    fn too_long_observation_is_an_error_not_a_panic() {
        let t: Transition = sample();
        let bytes = postcard::to_allocvec(&t).unwrap();
        assert!(postcard::from_bytes::<Transition<2>>(&bytes).is_err());
        assert!(postcard::from_bytes::<Transition>(&bytes[..bytes.len() - 3]).is_err());
    }
}
