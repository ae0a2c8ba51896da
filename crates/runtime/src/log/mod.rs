//! The transition log: append-only segment files of framed records, crash-safe.
//!
//! ## On disk
//!
//! A log is a directory of segment files `seg-<index, 20 digits>.gwlog`, oldest first.
//! Each segment is a 28-byte header followed by records:
//!
//! ```text
//! header: "GWTL" | version u16 = 3 | header length u16 = 28 | segment index u64
//!         | epoch_unix_ms u64 | crc32 u32 of the 24 bytes before it          (little-endian)
//! record: magic 9e 47 57 52 | len u32 | crc32(payload) u32 | crc32(previous 12 bytes) u32
//!         | payload = postcard(Transition)                                      (little-endian)
//! ```
//!
//! Version 1 segments (records `len u32 | crc32(payload) u32 | payload`) stay readable.
//! A record's `timestamp_ms` counts from its segment's `epoch_unix_ms` (the controller's
//! start). `len` is 1..=[`MAX_RECORD_BYTES`]; CRC-32 is IEEE (crc32fast), the same checksum
//! the firmware's serial frames carry.
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
//! ## Damage and recovery
//!
//! [`scan_segment`] reads a segment's bytes: valid frames are records; anything else starts
//! a damaged range that ends where the next whole valid frame starts (found by the frame
//! magic and checked by both CRCs and the decode), or at the end of the file. Records and
//! damaged ranges tile the file; a damaged header loses no record. [`LogReader`] never
//! modifies files: it yields every valid record and one [`SegmentIssue`] per damaged range.
//!
//! [`LogWriter::open`] checks the newest segment (the only one a crash can have left open):
//! it copies every damaged range to a quarantine file next to the segment
//! (`seg-….gwlog.quarantine-<offset>`, synced) *before* changing anything, then cuts a
//! damaged tail only if nothing valid follows it (a torn write), and removes the segment
//! only if it holds no valid record. Damage followed by valid records stays in place. Each
//! writer session then starts a new segment. See [`OpenReport`].
//!
//! One writer per directory: a writer holds advisory locks (`flock`) on the directory
//! itself and on a `.writer.lock` file in it while it lives (NFS locks only the file across
//! hosts: a directory's `flock` there is local to each host), and a second one is refused ([`LogError::InUse`]) once it has
//! waited a second for the lock (a child process being started holds a copy of it for a
//! moment, between its fork and its exec), since its
//! recovery of "the newest segment" would cut or remove the segment the first is appending
//! to. Only where neither can be locked does a writer go on unlocked, with a warning.
//! Readers take no lock.
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
#[doc(hidden)]
pub use segment::{encode_frame_v1, encode_header};
pub use segment::{
    foreign_entries, scan_segment, Damage, Header, IssueKind, QuarantineFile, SegmentFile,
    SegmentScan, FRAME_MAGIC, FRAME_OVERHEAD, HEADER_BYTES, MAX_RECORD_BYTES, SEGMENT_MAGIC,
    SEGMENT_VERSION, SEGMENT_VERSION_V1, SEGMENT_VERSION_V2,
};
pub use writer::{
    Commit, LogConfig, LogStats, LogWriter, OpenReport, QuarantinedRange, SyncPolicy, TailRepair,
    MAX_SEGMENT_BYTES,
};

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
    /// A segment's intact header names a format this software does not know (newer
    /// software wrote it): refused rather than read as damage or cut.
    #[error(
        "transition log: {path} is in segment format version {version}, newer than this \
         software reads (up to {max}): read or write this log with the software that \
         wrote it",
        max = SEGMENT_VERSION
    )]
    NewerFormat {
        /// The segment.
        path: PathBuf,
        /// Its format version.
        version: u16,
    },
    /// Another writer (a running `run` or `collect`) holds the folder.
    #[error(
        "transition log {0}: another writer is appending to this folder (its writer lock is \
         held): one writer per log folder"
    )]
    InUse(PathBuf),
    /// A rotation failed a moment ago; it is tried again once [`LogConfig::rotation_retry`]
    /// has passed, and appends that need it fail at once until then.
    #[error(
        "transition log {dir}: a new segment could not be made {failed_ms_ago} ms ago; it is \
         tried again {retry_ms} ms after that, and this record is not appended"
    )]
    RotationBackoff {
        /// The log folder.
        dir: PathBuf,
        /// How long ago the rotation failed.
        failed_ms_ago: u64,
        /// [`LogConfig::rotation_retry`].
        retry_ms: u64,
    },
    /// A record was appended after a write failed (the segment's end is unknown).
    #[error(
        "transition log: the writer of {0} is unusable after an earlier write failure; reopen it"
    )]
    Poisoned(PathBuf),
    /// A segment file far larger than any writer makes ([`MAX_SEGMENT_BYTES`] and a
    /// record): not a segment of this log, or damaged; not read into memory.
    #[error(
        "transition log: segment {path} is {bytes} bytes, more than any writer makes ({max}): \
         not read (move it away)"
    )]
    SegmentTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The most a segment can hold.
        max: u64,
    },
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
