//! The transition log: append-only segment files of framed records, crash-safe.
//!
//! ## On disk
//!
//! A log is a directory of segment files `seg-<index, 20 digits>.gwlog`, oldest first.
//! Each segment is a 28-byte header followed by records:
//!
//! ```text
//! header: "GWTL" | version u16 = 1 | header length u16 = 28 | segment index u64
//!         | epoch_unix_ms u64 | crc32 u32 of the 24 bytes before it          (little-endian)
//! record: len u32 | crc32(payload) u32 | payload = postcard(Transition)       (little-endian)
//! ```
//!
//! A record's `timestamp_ms` counts from its segment's `epoch_unix_ms` (the controller's
//! start). `len` is 1..=[`MAX_RECORD_BYTES`]; CRC-32 is IEEE (crc32fast), the same checksum
//! the firmware's serial frames carry, so collected frames are appended without re-encoding.
//!
//! ## Commit semantics
//!
//! Every [`LogWriter::append`] writes its record to the file at once (one `write` call), so
//! a crash of the controller process loses nothing it appended; an `fsync` follows according
//! to the [`SyncPolicy`]. A record is **committed** once an `append`, [`LogWriter::commit`],
//! [`LogWriter::commit_if_due`] or [`LogWriter::close`] call has *returned* a [`Commit`] whose
//! `committed` count covers it: that call's `fsync` (`fdatasync`) had completed, so the
//! record survives power loss. Sealing a segment (rotation) syncs it first, and new segment
//! files are synced together with their directory entry.
//!
//! ## Recovery
//!
//! [`LogWriter::open`] checks the newest segment (the only one that can have been active in
//! a crash): a torn or corrupt tail is reported (in [`OpenReport`] and through `tracing`) and
//! cut at the last intact record; a newest segment with a torn header and no room for a
//! record is removed, one with a corrupt header is renamed `*.corrupt` and kept aside. Each
//! writer session then starts a new segment. [`LogReader`] never modifies files: it reports a
//! problem in any segment (torn tail, CRC mismatch, bad length, undecodable payload) as a
//! [`SegmentIssue`] and skips the rest of that segment only; other segments are read as
//! usual. No record that fails its CRC or does not decode is ever yielded.
//!
//! ## Rotation and disk cap
//!
//! A segment is sealed and a new one started when the next record would take it past
//! [`LogConfig::max_segment_bytes`]. Whenever a segment starts, the oldest sealed segments
//! are deleted (never the active one) until the sealed ones plus a full active segment fit
//! in [`LogConfig::max_total_bytes`], so the log never exceeds the cap; deletions are
//! counted in [`LogStats`] and logged.

mod reader;
mod segment;
mod writer;

use std::path::PathBuf;

pub use reader::{read_all, LogReader, LogRecord, Records, SegmentIssue};
pub use segment::{IssueKind, SegmentFile, HEADER_BYTES, MAX_RECORD_BYTES, SEGMENT_MAGIC};
pub use writer::{Commit, LogConfig, LogStats, LogWriter, OpenReport, SyncPolicy, TailRepair};

/// Why the log could not be opened, written or listed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file system operation failed.
    #[error("transition log: {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A record could not be encoded (observation longer than the record type holds).
    #[error("transition log: record could not be encoded: {0}")]
    Encode(postcard::Error),
    /// An encoded record is longer than [`MAX_RECORD_BYTES`].
    #[error("transition log: record of {bytes} bytes exceeds the {max}-byte limit")]
    RecordTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A configuration value is unusable.
    #[error("transition log: {0}")]
    Config(String),
    /// A record was appended after a write failed (the segment's end is unknown).
    #[error("transition log: writer is unusable after an earlier write failure; reopen it")]
    Poisoned,
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LogError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
