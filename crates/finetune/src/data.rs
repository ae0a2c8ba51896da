//! The transition log as training data: every intact record, normalised with the running
//! policy's own normalisation, with its action mask recovered from the observation, split
//! into a training part and a held-back part for the gate (the most recent records: a
//! forward-in-time holdout).

use std::collections::BTreeMap;
use std::path::Path;

use greenwave_core::{ActionSource, ObsLayout, Transition};
use greenwave_learn::offpolicy::ReplayBatch;
use greenwave_policy::ObsNormalization;
use serde::{Deserialize, Serialize};

use greenwave_runtime::log::{LogReader, LogRecord, SegmentIssue};

use super::FinetuneError;

/// Where a record sits in the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    /// Segment index.
    pub segment: u64,
    /// Byte offset of the record's frame in the segment.
    pub offset: u64,
    /// Unix time (ms) of the record: segment epoch + record timestamp.
    pub unix_ms: u64,
}

/// What was read from the log, for the report and the manifest's provenance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogSummary {
    /// Segments listed.
    pub segments: usize,
    /// Intact records read.
    pub records_read: u64,
    /// Records used (the rest had an observation of another size or no valid target
    /// phase, e.g. from a controller with another plan, and are counted below).
    pub records_used: u64,
    /// Records skipped because their observation does not fit the policy's layout.
    pub records_skipped_layout: u64,
    /// Records skipped because a value is not finite or not what a controller writes
    /// (`Transition::problem`: a NaN, a `log_prob` above 0, a phase no plan has).
    pub records_skipped_non_finite: u64,
    /// Records skipped because they are of another signal than the one asked for
    /// ([`super::FinetuneConfig::signal`]).
    #[serde(default)]
    pub records_skipped_signal: u64,
    /// Used records by signal (the controller's signal index, as logged).
    #[serde(default)]
    pub by_signal: BTreeMap<u16, u64>,
    /// Used records by who chose the served phase ("policy", "supervisor", "fallback").
    pub by_source: BTreeMap<String, u64>,
    /// Used records by the policy version that was running.
    pub by_policy_version: BTreeMap<u32, u64>,
    /// Used records by the reward they logged (`WaitDelta`, `Queue`, …; `unrecorded` for
    /// records written before transitions carried their reward kind). A log with more
    /// than one is refused: one update cannot learn from two rewards.
    #[serde(default)]
    pub by_reward_kind: BTreeMap<String, u64>,
    /// Used records where the policy had a real choice (more than one phase allowed).
    pub decision_states: u64,
    /// First record used.
    pub first: Option<LogPosition>,
    /// Last record used.
    pub last: Option<LogPosition>,
    /// Segment problems met (each skips its damaged range; everything sound around it is
    /// read), and the ranges writers cut from the log as damaged (its quarantine files).
    pub issues: Vec<String>,
}

/// What the gate needs of a record beyond the replay arrays: who chose the served phase
/// and with what probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordMeta {
    /// Who chose the served phase.
    pub source: ActionSource,
    /// The signal (the controller's index) the record is of.
    pub signal: u16,
    /// The behaviour probability of the served phase, where the log states it: records the
    /// policy chose (greedy: 1; ε-greedy: the logged `exp(log π(a|s))`). `None` where the
    /// supervisor or the fallback chose (the logged probability is not of the served phase).
    pub behaviour_prob: Option<f32>,
}

/// The log read into flat arrays.
#[derive(Clone, Debug)]
pub struct LoggedData {
    /// All usable records (normalised observations, masks from the observations, served
    /// actions, logged rewards).
    pub batch: ReplayBatch,
    /// Per record of `batch`: source and behaviour probability.
    pub meta: Vec<RecordMeta>,
    /// Per record of `batch`: where it is in the log.
    pub positions: Vec<LogPosition>,
    /// Summary.
    pub summary: LogSummary,
    /// The problems, as the reader reported them.
    pub issues: Vec<SegmentIssue>,
}

/// Reads every intact record of the log in `dir` for a policy with `layout` and `norm`;
/// with `signal`, only the records of that signal (the others are counted as skipped).
///
/// A problem in a segment (torn tail, CRC mismatch, bad header…) is reported in
/// [`LogSummary::issues`] and only that damaged range skipped; every valid record is read.
/// Records from every source are kept: the served action is real experience for the
/// Q-critic whoever chose it (see the module docs of [`super`]).
pub fn read_log(
    dir: &Path,
    layout: ObsLayout,
    norm: &ObsNormalization,
    signal: Option<u16>,
) -> Result<LoggedData, FinetuneError> {
    let reader = LogReader::open(dir).map_err(|e| FinetuneError::Log {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    let mut reading = Reading::new(layout, norm, reader.segments().len(), signal);
    for item in reader.records() {
        match item {
            Ok(rec) => reading.record(&rec),
            Err(issue) => reading.issue(issue),
        }
    }
    // Ranges a writer cut or removed (a torn tail, or a last record a flipped bit damaged)
    // are not in the segments any more: said here, so that their loss is not silent.
    let quarantine = reader.quarantine().map_err(|e| FinetuneError::Log {
        dir: dir.to_path_buf(),
        source: e,
    })?;
    for q in quarantine {
        reading.data.summary.issues.push(format!(
            "{} bytes of segment {} at offset {} were damaged and cut from it (copy in {}): \
             not read",
            q.length,
            q.segment,
            q.offset,
            q.path.display()
        ));
    }
    let kinds = &reading.data.summary.by_reward_kind;
    if kinds.len() > 1 {
        return Err(FinetuneError::MixedRewardKinds {
            dir: dir.to_path_buf(),
            kinds: kinds
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(reading.data)
}

/// The name a record's reward kind is counted under.
pub(crate) fn reward_kind_name(kind: Option<greenwave_core::RewardKind>) -> String {
    kind.map_or_else(|| "unrecorded".to_string(), |k| format!("{k:?}"))
}

/// [`LoggedData`] as the log is read, record by record.
struct Reading<'a> {
    layout: ObsLayout,
    norm: &'a ObsNormalization,
    data: LoggedData,
    /// Only this signal's records, if set.
    signal: Option<u16>,
    /// Scratch space for a normalised observation.
    norm_buf: Vec<f32>,
}

impl<'a> Reading<'a> {
    fn new(
        layout: ObsLayout,
        norm: &'a ObsNormalization,
        segments: usize,
        signal: Option<u16>,
    ) -> Self {
        let d = layout.dim();
        let batch = ReplayBatch {
            obs_dim: d,
            n_actions: layout.n_phases as usize,
            ..Default::default()
        };
        let summary = LogSummary {
            segments,
            ..Default::default()
        };
        Reading {
            layout,
            norm,
            data: LoggedData {
                batch,
                meta: Vec::new(),
                positions: Vec::new(),
                summary,
                issues: Vec::new(),
            },
            signal,
            norm_buf: vec![0.0f32; d],
        }
    }

    /// A damaged range of a segment: reported, and skipped.
    fn issue(&mut self, issue: SegmentIssue) {
        tracing::warn!("transition log: {issue}; that range is skipped");
        self.data.summary.issues.push(issue.to_string());
        self.data.issues.push(issue);
    }

    /// An intact record: counted as read, then used unless it does not fit the layout.
    fn record(&mut self, rec: &LogRecord) {
        self.data.summary.records_read += 1;
        let t = &rec.transition;
        if self.signal.is_some_and(|s| s != t.signal) {
            self.data.summary.records_skipped_signal += 1;
            return;
        }
        if !self.push_masks(t) {
            return;
        }
        self.push_arrays(t);
        self.count_used(rec);
    }

    /// Checks that `t` fits the layout and is sound (`Transition::problem`), and appends its masks (recovered
    /// from its observations); `false`, with the reason counted and nothing appended, if
    /// it cannot be used.
    fn push_masks(&mut self, t: &Transition) -> bool {
        let (d, a) = (self.layout.dim(), self.layout.n_phases as usize);
        let summary = &mut self.data.summary;
        if t.obs.len() != d || t.next_obs.len() != d || t.action as usize >= a {
            summary.records_skipped_layout += 1;
            return false;
        }
        if t.problem().is_some() {
            summary.records_skipped_non_finite += 1;
            return false;
        }
        let layout = self.layout;
        let push_mask = |out: &mut Vec<u8>, obs: &[f32]| -> bool {
            match layout.mask_from_obs(obs) {
                Some(m) => {
                    out.extend((0..a).map(|i| u8::from(m.0 & (1 << i) != 0)));
                    true
                }
                None => false,
            }
        };
        let batch = &mut self.data.batch;
        let before = batch.masks.len();
        if !push_mask(&mut batch.masks, &t.obs) {
            summary.records_skipped_layout += 1;
            return false;
        }
        // The supervisor overrode the request (the max-red rule served a starved phase, or
        // max green ended the phase asked for): what the policy chose there did not decide
        // what was served, so the state is no decision state, and the served phase is the
        // only one its record can credit.
        if t.source == ActionSource::Supervisor && t.requested != t.action {
            for (i, m) in batch.masks[before..].iter_mut().enumerate() {
                *m = u8::from(i == usize::from(t.action));
            }
        }
        if !push_mask(&mut batch.next_masks, &t.next_obs) {
            batch.masks.truncate(before);
            summary.records_skipped_layout += 1;
            return false;
        }
        if batch.masks[before..].iter().filter(|&&m| m == 1).count() > 1 {
            summary.decision_states += 1;
        }
        true
    }

    /// Appends `t`'s normalised observations, action, reward and [`RecordMeta`].
    fn push_arrays(&mut self, t: &Transition) {
        let batch = &mut self.data.batch;
        self.norm.apply(&t.obs, &mut self.norm_buf);
        batch.obs.extend_from_slice(&self.norm_buf);
        self.norm.apply(&t.next_obs, &mut self.norm_buf);
        batch.next_obs.extend_from_slice(&self.norm_buf);
        batch.actions.push(t.action as u32);
        batch.rewards.push(t.reward);
        let p = t.log_prob.exp();
        self.data.meta.push(RecordMeta {
            source: t.source,
            signal: t.signal,
            behaviour_prob: (t.source == ActionSource::Policy && p.is_finite() && p > 0.0)
                .then_some(p.min(1.0)),
        });
    }

    /// Counts a used record in the summary (source, policy version, first and last).
    fn count_used(&mut self, rec: &LogRecord) {
        let t = &rec.transition;
        let summary = &mut self.data.summary;
        summary.records_used += 1;
        *summary.by_source.entry(t.source.name().into()).or_default() += 1;
        *summary
            .by_policy_version
            .entry(t.policy_version)
            .or_default() += 1;
        *summary.by_signal.entry(t.signal).or_default() += 1;
        *summary
            .by_reward_kind
            .entry(reward_kind_name(t.reward_kind))
            .or_default() += 1;
        let pos = LogPosition {
            segment: rec.segment,
            offset: rec.offset,
            unix_ms: rec.epoch_unix_ms.saturating_add(t.timestamp_ms),
        };
        summary.first.get_or_insert(pos);
        summary.last = Some(pos);
        self.data.positions.push(pos);
    }
}

/// Splits record indices `0..n` (log order, which is time order) into (training, held
/// back): the most recent `ceil(n · holdout_fraction)` records are held back, everything
/// before them is trained on. A forward-in-time holdout: the gate judges the candidate on
/// the latest traffic, which the update never saw, and no held-back record has trained-on
/// neighbours on both sides.
pub fn split_forward(n: usize, holdout_fraction: f64) -> (Vec<usize>, Vec<usize>) {
    let f = if holdout_fraction.is_finite() {
        holdout_fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let held = ((n as f64 * f).ceil() as usize).min(n);
    ((0..n - held).collect(), (n - held..n).collect())
}

/// Indices of the states where more than one phase is allowed: the only states where the
/// policy has anything to decide (elsewhere the sequencer forces the target phase).
pub fn decision_states(batch: &ReplayBatch) -> Vec<usize> {
    let a = batch.n_actions;
    (0..batch.len())
        .filter(|&i| {
            batch.masks[i * a..(i + 1) * a]
                .iter()
                .filter(|&&m| m == 1)
                .count()
                > 1
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::RewardKind;
    use greenwave_runtime::log::{LogConfig, LogWriter};

    fn record(ts: u64, kind: Option<RewardKind>) -> Transition {
        let layout = ObsLayout {
            n_lanes: 1,
            n_phases: 2,
        };
        let mut obs = vec![0.0f32; layout.dim()];
        obs[2] = 1.0; // target phase 0
        obs[5] = 1.0; // min green served: both phases allowed
        Transition {
            timestamp_ms: ts,
            signal: 0,
            obs: obs.iter().copied().collect(),
            requested: 1,
            action: 1,
            log_prob: -0.5,
            reward: -1.0,
            next_obs: obs.iter().copied().collect(),
            done: false,
            policy_version: 1,
            source: ActionSource::Policy,
            reward_kind: kind,
        }
    }

    fn read(name: &str, kinds: &[Option<RewardKind>]) -> Result<LoggedData, FinetuneError> {
        read_signals(name, kinds, &vec![0; kinds.len()], None)
    }

    /// Records of `kinds`, the `i`-th of signal `signals[i]`, read for `only`.
    fn read_signals(
        name: &str,
        kinds: &[Option<RewardKind>],
        signals: &[u16],
        only: Option<u16>,
    ) -> Result<LoggedData, FinetuneError> {
        let dir = std::env::temp_dir().join(format!("gw-ft-kinds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut w, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
        for (i, (&k, &s)) in kinds.iter().zip(signals).enumerate() {
            let mut t = record(i as u64 * 5000, k);
            t.signal = s;
            w.append(&t).unwrap();
        }
        w.close().unwrap();
        let layout = ObsLayout {
            n_lanes: 1,
            n_phases: 2,
        };
        read_log(
            &dir,
            layout,
            &ObsNormalization::identity(layout.dim(), 10.0),
            only,
        )
    }

    /// Every record of the log in `dir`, read for the 1-lane, 2-phase layout of [`record`].
    fn read_small(dir: &Path) -> LoggedData {
        let layout = ObsLayout {
            n_lanes: 1,
            n_phases: 2,
        };
        read_log(
            dir,
            layout,
            &ObsNormalization::identity(layout.dim(), 10.0),
            None,
        )
        .unwrap()
    }

    /// Where the supervisor overrode the request (max-red, max green), the record is no
    /// decision state: its mask allows the served phase alone.
    #[test]
    fn a_state_the_supervisor_decided_is_no_decision_state() {
        let dir = std::env::temp_dir().join(format!("gw-ft-forced-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut w, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
        let q = Some(RewardKind::Queue);
        w.append(&record(0, q)).unwrap();
        let mut forced = record(5000, q);
        (forced.source, forced.requested, forced.action) = (ActionSource::Supervisor, 0, 1);
        w.append(&forced).unwrap();
        let mut kept = record(10_000, q);
        (kept.source, kept.requested, kept.action) = (ActionSource::Supervisor, 1, 1);
        w.append(&kept).unwrap();
        w.close().unwrap();
        let data = read_small(&dir);
        assert_eq!(data.summary.records_used, 3);
        assert_eq!(data.summary.decision_states, 2, "the override is none");
        assert_eq!(data.batch.masks, [1, 1, 0, 1, 1, 1]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A last record that a flipped bit damaged is cut by the next writer as a torn tail
    /// (its bytes kept in a quarantine file): fine-tuning's summary says so rather than
    /// miss it silently.
    #[test]
    fn a_range_a_writer_cut_from_the_log_is_reported() {
        let dir = std::env::temp_dir().join(format!("gw-ft-cut-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut w, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
        for i in 0..4 {
            w.append(&record(i * 5000, Some(RewardKind::Queue)))
                .unwrap();
        }
        w.close().unwrap();
        let seg = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".gwlog"))
            .unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x10;
        std::fs::write(&seg, &bytes).unwrap();
        drop(LogWriter::open(LogConfig::new(&dir)).unwrap());
        let data = read_small(&dir);
        assert_eq!(data.summary.records_used, 3);
        let issues = &data.summary.issues;
        assert!(
            issues.len() == 1 && issues[0].contains("cut from it"),
            "{issues:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_signals_records_are_read_when_asked_and_every_signal_is_counted() {
        let q = Some(RewardKind::Queue);
        let all = read_signals("signals-all", &[q; 5], &[0, 1, 0, 1, 1], None).unwrap();
        assert_eq!(all.summary.records_used, 5);
        assert_eq!(all.summary.by_signal, BTreeMap::from([(0, 2), (1, 3)]));
        let one = read_signals("signals-one", &[q; 5], &[0, 1, 0, 1, 1], Some(1)).unwrap();
        assert_eq!(one.summary.records_used, 3);
        assert_eq!(one.summary.records_skipped_signal, 2);
        assert_eq!(one.summary.by_signal, BTreeMap::from([(1, 3)]));
        assert!(one.meta.iter().all(|m| m.signal == 1));
    }

    #[test]
    fn a_log_mixing_reward_kinds_is_refused_with_the_counts() {
        let q = Some(RewardKind::Queue);
        let ok = read("same", &[q, q, q]).unwrap();
        assert_eq!(ok.summary.by_reward_kind["Queue"], 3);
        let legacy = read("legacy", &[None, None]).unwrap();
        assert_eq!(legacy.summary.by_reward_kind["unrecorded"], 2);
        for (name, kinds) in [
            ("mixed", [q, Some(RewardKind::WaitDelta), q]),
            ("with-legacy", [q, None, q]),
        ] {
            let e = read(name, &kinds).unwrap_err().to_string();
            assert!(e.contains("2 Queue") && e.contains("mixes"), "{e}");
        }
    }

    #[test]
    fn the_holdout_is_the_most_recent_records() {
        let (t, h) = split_forward(100, 0.3);
        assert_eq!(t, (0..70).collect::<Vec<_>>());
        assert_eq!(h, (70..100).collect::<Vec<_>>());
        let (t, h) = split_forward(10, 0.25);
        assert_eq!((t.len(), h.len()), (7, 3));
        assert_eq!(split_forward(5, f64::NAN).1.len(), 0);
    }
}
