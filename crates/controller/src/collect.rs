//! Collecting transitions from MCU firmware: its serial frames
//! (`COBS(postcard(Transition) ‖ crc32_le) ‖ 0x00`, see `greenwave_core::frames`)
//! are decoded, checked and appended to a transition log.
//!
//! A frame that fails its CRC, its COBS decoding or its record decoding is counted and
//! skipped (the reader resynchronises at the next `0x00`); it never reaches the log.
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
    /// Frames refused (CRC, COBS, record decoding, too long), with the first reasons.
    pub refused: u64,
    /// Up to 10 refusal reasons, in order.
    pub refusals: Vec<String>,
    /// Bytes after the last frame delimiter (a frame cut off at the end of the input).
    pub incomplete_tail_bytes: u64,
    /// The log's counts after the final commit.
    pub commit: Commit,
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
        for &b in &buf[..n] {
            since_delimiter = if b == 0 { 0 } else { since_delimiter + 1 };
            match reader.push::<{ greenwave_core::transition::MAX_OBS_DIM }>(b) {
                None => {}
                Some(Ok(t)) => {
                    let t: Transition = t;
                    log.append(&t)?;
                    report.appended += 1;
                }
                Some(Err(e)) => {
                    report.refused += 1;
                    if report.refusals.len() < 10 {
                        report.refusals.push(e.to_string());
                    }
                    tracing::warn!(error = %e, "collect: firmware frame refused");
                }
            }
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
    let mut cfg = LogConfig::new(&args.log_dir);
    cfg.sync = SyncPolicy::EveryRecords(NonZeroU32::new(64).expect("non-zero"));
    let (mut log, _) = LogWriter::open(cfg)?;
    let input: Box<dyn std::io::Read> = if args.from == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&args.from)
                .with_context(|| format!("opening {}", args.from.display()))?,
        )
    };
    let report = collect_frames(std::io::BufReader::new(input), &mut log)?;
    log.close()?;
    println!(
        "{} frames appended, {} refused{}; {} bytes read",
        report.appended,
        report.refused,
        if report.incomplete_tail_bytes > 0 {
            ", input ended inside a frame"
        } else {
            ""
        },
        report.bytes
    );
    for r in &report.refusals {
        println!("refused: {r}");
    }
    Ok(())
}
