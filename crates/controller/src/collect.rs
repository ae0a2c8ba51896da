//! Collecting transitions from MCU firmware: its serial frames
//! (`COBS(postcard(Transition) ‖ crc32_le) ‖ 0x00`, see `greenwave_core::frames`)
//! are decoded, checked and appended to a transition log.
//!
//! A frame that fails its CRC, its COBS decoding or its record decoding is counted and
//! skipped (the reader resynchronises at the next `0x00`); it never reaches the log. A
//! record the log cannot take while the writer stays usable (a new segment that could not
//! be made: a full disk, say) is counted as not logged, and collecting goes on, since a
//! live serial line does not wait; a write failure that leaves the segment's end unknown
//! stops it.
//!
//! `greenwave-controller collect` ([`run`]) reads the frames from a file or stdin.

use std::io::Read;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use greenwave_core::frames::{max_frame_bytes, FrameReader};
use greenwave_core::transition::MAX_OBS_DIM;
use greenwave_core::Transition;

/// Longest frame collected: a record with the largest observation a log holds.
const MAX_FRAME_BYTES: usize = max_frame_bytes(MAX_OBS_DIM);

use greenwave_runtime::log::{Commit, LogConfig, LogError, LogWriter, SyncPolicy};

/// What a collection run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectReport {
    /// Bytes read.
    pub bytes: u64,
    /// Frames that decoded and were appended.
    pub appended: u64,
    /// Frames refused (CRC, COBS, record decoding, too long, or a record no controller
    /// writes: [`Transition::problem`]), with the first reasons.
    pub refused: u64,
    /// Up to 10 refusal reasons, in order.
    pub refusals: Vec<String>,
    /// Bytes after the last frame delimiter (a frame cut off at the end of the input).
    pub incomplete_tail_bytes: u64,
    /// Sound records the log could not take (its writer still usable), with the first
    /// error.
    pub not_logged: u64,
    /// The first such error.
    pub log_error: Option<String>,
    /// The log's counts after the final commit.
    pub commit: Commit,
}

impl CollectReport {
    /// Counts a sound record the log could not take, keeping the first error.
    fn not_logged(&mut self, e: &LogError) {
        self.not_logged += 1;
        if self.log_error.is_none() {
            tracing::error!(error = %e, "collect: a record could not be logged; going on");
            self.log_error = Some(e.to_string());
        }
    }

    /// Counts a refused frame, keeping the first reasons.
    fn refuse(&mut self, why: &str) {
        self.refused += 1;
        if self.refusals.len() < 10 {
            self.refusals.push(why.to_string());
        }
        tracing::warn!(error = %why, "collect: firmware frame refused");
    }
}

/// Why collecting stopped.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The input could not be read.
    #[error("reading firmware frames: {0}")]
    Read(std::io::Error),
    /// The log could not be written.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Reads frames from `input` until it ends, appends every valid record to `log`, and
/// commits.
pub fn collect_frames(
    mut input: impl Read,
    log: &mut LogWriter,
) -> Result<CollectReport, CollectError> {
    let mut reader: FrameReader<MAX_FRAME_BYTES> = FrameReader::new();
    let mut report = CollectReport::default();
    let mut buf = [0u8; 4096];
    let mut since_delimiter = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CollectError::Read(e)),
        };
        report.bytes += n as u64;
        let appended_before = report.appended;
        for &b in &buf[..n] {
            since_delimiter = if b == 0 { 0 } else { since_delimiter + 1 };
            match reader.push::<{ greenwave_core::transition::MAX_OBS_DIM }>(b) {
                None => {}
                Some(Ok(t)) => {
                    let t: Transition = t;
                    match t.problem() {
                        None => match log.append(&t) {
                            Ok(_) => report.appended += 1,
                            Err(e) if log.is_poisoned() => return Err(e.into()),
                            Err(e) => report.not_logged(&e),
                        },
                        Some(why) => report.refuse(why),
                    }
                }
                Some(Err(e)) => report.refuse(&e.to_string()),
            }
        }
        // A short read is a source with nothing more ready (a live serial line between
        // frames; a file's reads fill the buffer until its end): the firmware has dropped
        // what it sent, so what was appended is made durable now, not 64 records later.
        if n < buf.len() && report.appended > appended_before {
            log.commit()?;
        }
    }
    report.incomplete_tail_bytes = since_delimiter;
    report.commit = log.commit()?;
    Ok(report)
}

/// Arguments of `greenwave-controller collect`.
#[derive(Args)]
pub struct CollectArgs {
    /// File of firmware frames (`-` for stdin).
    #[arg(long)]
    from: PathBuf,
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
}

/// `greenwave-controller collect`: appends the frames of `--from` to the log and prints
/// what was appended and refused.
pub fn run(args: CollectArgs) -> anyhow::Result<()> {
    // The input first: a missing file leaves no log folder or segment behind.
    let input: Box<dyn std::io::Read> = if args.from == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&args.from)
                .with_context(|| format!("opening {}", args.from.display()))?,
        )
    };
    let mut cfg = LogConfig::new(&args.log_dir);
    cfg.sync = SyncPolicy::EveryRecords(NonZeroU32::new(64).expect("non-zero"));
    // Each record tries a failed rotation again: a file is read far faster than the
    // controller's one-second wait, which would drop nearly every record after a failure.
    cfg.rotation_retry = std::time::Duration::ZERO;
    let (mut log, _) = LogWriter::open(cfg)?;
    let report = collect_frames(std::io::BufReader::new(input), &mut log)?;
    log.close()?;
    say!(
        "{} frames appended, {} refused{}{}; {} bytes read",
        report.appended,
        report.refused,
        if report.not_logged > 0 {
            format!(", {} not logged", report.not_logged)
        } else {
            String::new()
        },
        if report.incomplete_tail_bytes > 0 {
            ", input ended inside a frame"
        } else {
            ""
        },
        report.bytes
    );
    for r in &report.refusals {
        say!("refused: {r}");
    }
    if let Some(e) = &report.log_error {
        anyhow::bail!(
            "sound records the log could not take: {} (the first error: {e}); the others are \
             in the log",
            report.not_logged
        );
    }
    if report.bytes > 0 && report.appended + report.refused == 0 {
        anyhow::bail!(
            "{}: {} bytes and not one frame delimiter (0x00) in them: not the firmware's \
             transition frames",
            args.from.display(),
            report.bytes
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use greenwave_core::frames::encode_frame;
    use greenwave_core::{ActionSource, RewardKind};

    use super::*;

    fn transition(obs: f32, log_prob: f32, action: u8) -> Transition {
        Transition {
            timestamp_ms: 5000,
            signal: 0,
            obs: heapless::Vec::from_slice(&[obs, 0.5]).unwrap(),
            requested: action,
            action,
            log_prob,
            reward: -2.0,
            next_obs: heapless::Vec::from_slice(&[0.25, 1.0]).unwrap(),
            done: false,
            policy_version: 1,
            source: ActionSource::Policy,
            reward_kind: Some(RewardKind::Queue),
        }
    }

    /// Frames that pass their CRC but hold a record no controller writes (a NaN
    /// observation, a positive log-probability, phase 200) are refused by reason; the
    /// sound one around them reaches the log.
    #[test]
    fn sound_frames_reach_the_log_and_impossible_records_are_refused_by_reason() {
        let dir = std::env::temp_dir().join(format!("gw-collect-refuse-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut bytes = Vec::new();
        for t in [
            transition(f32::NAN, -0.3, 1),
            transition(0.5, 5.0, 1),
            transition(0.5, -0.3, 200),
            transition(0.5, -0.3, 1),
        ] {
            let mut buf = [0u8; MAX_FRAME_BYTES];
            bytes.extend_from_slice(encode_frame(&t, &mut buf).unwrap());
        }
        let (mut log, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
        let report = collect_frames(bytes.as_slice(), &mut log).unwrap();
        assert_eq!((report.appended, report.refused), (1, 3), "{report:?}");
        for (reason, says) in report
            .refusals
            .iter()
            .zip(["observation", "log_prob", "phase"])
        {
            assert!(reason.contains(says), "{reason}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `n` frames of one sound record.
    fn sound_frames(n: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for _ in 0..n {
            let mut buf = [0u8; MAX_FRAME_BYTES];
            bytes.extend_from_slice(encode_frame(&transition(0.5, -0.3, 1), &mut buf).unwrap());
        }
        bytes
    }

    /// A live line: frames arrive a few at a time, then the line breaks. What arrived
    /// before the pause was committed (synced) then, not left for the 64th record.
    #[test]
    fn frames_a_live_line_delivered_are_committed_at_its_pause() {
        struct Line(Vec<Vec<u8>>);
        impl Read for Line {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let Some(chunk) = self.0.pop() else {
                    return Err(std::io::Error::other("line dropped"));
                };
                out[..chunk.len()].copy_from_slice(&chunk);
                Ok(chunk.len())
            }
        }
        let dir = std::env::temp_dir().join(format!("gw-collect-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let chunk = sound_frames(3);
        let mut cfg = LogConfig::new(&dir);
        cfg.sync = SyncPolicy::EveryRecords(NonZeroU32::new(64).unwrap());
        let (mut log, _) = LogWriter::open(cfg).unwrap();
        let err = collect_frames(Line(vec![chunk]), &mut log).unwrap_err();
        assert!(matches!(err, CollectError::Read(_)), "{err}");
        let counts = log.counts();
        assert_eq!((counts.appended, counts.committed), (3, 3), "{counts:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The log's next segment cannot be made (a folder holds its name, as a full disk would
    /// refuse it): the records that do not fit are counted as not logged, and collecting
    /// goes on to the end of the input, appending again once the segment can be made.
    #[test]
    fn a_log_that_cannot_rotate_costs_records_not_the_collection() {
        let dir = std::env::temp_dir().join(format!("gw-collect-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bytes = sound_frames(200);
        let mut cfg = LogConfig::new(&dir);
        cfg.max_segment_bytes = 4096;
        cfg.rotation_retry = std::time::Duration::ZERO;
        let (mut log, _) = LogWriter::open(cfg).unwrap();
        // A fresh log appends to segment 0: its first rotation is blocked.
        let second = log
            .segment_path()
            .with_file_name("seg-00000000000000000001.gwlog");
        std::fs::create_dir_all(&second).unwrap();
        let report = collect_frames(&bytes[..], &mut log).unwrap();
        assert!(report.appended > 0 && report.not_logged > 0, "{report:?}");
        assert_eq!(report.appended + report.not_logged, 200);
        assert!(report.log_error.as_ref().unwrap().contains("creating"));
        assert_eq!(report.commit.committed, report.appended);
        // Once the name is free, the same writer appends again.
        std::fs::remove_dir(&second).unwrap();
        let again = collect_frames(&bytes[..], &mut log).unwrap();
        assert_eq!((again.appended, again.not_logged), (200, 0), "{again:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
