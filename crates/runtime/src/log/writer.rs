//! The log writer: append, group commit, rotation, disk cap, and tail recovery on open.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use greenwave_core::Transition;

use super::segment::{
    encode_frame, highest_segment_name, list_quarantine, list_segments, oversized,
    parse_quarantine_name, quarantine_name, refuse_newer_formats, scan_segment, segment_name,
    Damage, Header, IssueKind, QuarantineFile, SegmentFile, HEADER_BYTES, MAX_SEGMENT_FILE_BYTES,
    SEGMENT_VERSION,
};
use super::LogError;

/// When appended records are made durable (`fdatasync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// After every record: each `append` returns with its record committed.
    EveryRecord,
    /// After every N records (group commit).
    EveryRecords(NonZeroU32),
    /// When the oldest unsynced record is at least this many milliseconds old, checked on
    /// every `append` and by [`LogWriter::commit_if_due`] (the controller calls it every
    /// decision, so nothing stays uncommitted much longer than this).
    EveryMillis(NonZeroU32),
}

impl Default for SyncPolicy {
    /// One second: at most a second of records at risk on power loss, at most one `fsync`
    /// per second however many signals a controller runs.
    fn default() -> Self {
        SyncPolicy::EveryMillis(NonZeroU32::new(1000).expect("non-zero"))
    }
}

impl FromStr for SyncPolicy {
    type Err = String;

    /// `record`, `records:N` or `ms:T`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("fsync policy `{s}`: expected `record`, `records:N` or `ms:T` with N, T ≥ 1")
        };
        let number = |v: &str| {
            v.parse::<u32>()
                .ok()
                .and_then(NonZeroU32::new)
                .ok_or_else(bad)
        };
        match s.split_once(':') {
            None if s == "record" => Ok(SyncPolicy::EveryRecord),
            Some(("records", n)) => Ok(SyncPolicy::EveryRecords(number(n)?)),
            Some(("ms", t)) => Ok(SyncPolicy::EveryMillis(number(t)?)),
            _ => Err(bad()),
        }
    }
}

/// Where and how a log is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The log directory (created if missing).
    pub dir: PathBuf,
    /// When records are synced.
    pub sync: SyncPolicy,
    /// A segment is sealed before a record would take it past this size.
    pub max_segment_bytes: u64,
    /// Oldest sealed segments are deleted while all segments together exceed this.
    pub max_total_bytes: u64,
    /// Wall-clock time (ms since the Unix epoch) that records' `timestamp_ms` count from;
    /// written into each segment header. Defaults to the time of [`LogConfig::new`].
    pub epoch_unix_ms: u64,
    /// After a rotation failed (the new segment could not be made: a full disk, say),
    /// appends that need one fail at once, without touching the disk, until this long has
    /// passed; then the rotation is tried again. 1 s unless set: a controller appends each
    /// decision, and each try costs several fsyncs.
    pub rotation_retry: Duration,
}

impl LogConfig {
    /// Defaults for `dir`: 1 s group commit, 16 MiB segments, 1 GiB in all.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LogConfig {
            dir: dir.into(),
            sync: SyncPolicy::default(),
            max_segment_bytes: 16 << 20,
            max_total_bytes: 1 << 30,
            epoch_unix_ms: unix_ms_now(),
            rotation_retry: Duration::from_secs(1),
        }
    }

    fn validate(&self) -> Result<(), LogError> {
        const MIN_SEGMENT: u64 = 4096;
        if self.max_segment_bytes < MIN_SEGMENT {
            return Err(LogError::Config(format!(
                "max_segment_bytes = {} is below {MIN_SEGMENT}",
                self.max_segment_bytes
            )));
        }
        // Recovery and the reader hold a whole segment in memory (and a record per frame):
        // a segment of gigabytes could keep a small controller from opening its own log.
        if self.max_segment_bytes > MAX_SEGMENT_BYTES {
            return Err(LogError::Config(format!(
                "max_segment_bytes = {} is above {MAX_SEGMENT_BYTES} (256 MiB; recovery \
                 reads a whole segment into memory)",
                self.max_segment_bytes
            )));
        }
        if self.max_total_bytes < self.max_segment_bytes {
            return Err(LogError::Config(format!(
                "max_total_bytes = {} is below max_segment_bytes = {}",
                self.max_total_bytes, self.max_segment_bytes
            )));
        }
        Ok(())
    }
}

/// The largest segment a log may rotate at (256 MiB).
pub const MAX_SEGMENT_BYTES: u64 = 256 << 20;

/// Milliseconds since the Unix epoch now (0 if the clock is before 1970).
pub(crate) fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What an `append` (or `commit`) leaves behind: counts since this writer was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Commit {
    /// Records appended by this writer.
    pub appended: u64,
    /// Of those, the first `committed` are durable (see the module docs).
    pub committed: u64,
}

/// What recovery did to the newest segment on open. Whatever it cuts or removes was
/// copied to a quarantine file (and synced) first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TailRepair {
    /// A torn or damaged tail (nothing valid after it) was cut after the last valid record.
    Cut {
        /// The segment.
        segment: PathBuf,
        /// Where the damage started (the new file length).
        offset: u64,
        /// Bytes removed.
        bytes_cut: u64,
        /// What was wrong there.
        reason: IssueKind,
        /// The file holding the removed bytes.
        quarantine: PathBuf,
    },
    /// A segment without a single valid record (a header torn while it was being created,
    /// or nothing but damage) was removed.
    Removed {
        /// The segment.
        segment: PathBuf,
        /// Its size.
        bytes: u64,
        /// What was wrong with it.
        reason: IssueKind,
        /// The file holding its bytes (`None` if it was empty).
        quarantine: Option<PathBuf>,
    },
}

/// A damaged byte range the writer found in the newest segment, and its quarantine copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedRange {
    /// The segment index.
    pub segment: u64,
    /// Where the range starts.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// What was found there.
    pub kind: IssueKind,
    /// The copy.
    pub quarantine: PathBuf,
}

/// What [`LogWriter::open`] found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenReport {
    /// Segment files found.
    pub segments_found: usize,
    /// Intact records in the newest segment found.
    pub tail_records: u64,
    /// Every damaged range of the newest segment, copied to quarantine. Ranges with valid
    /// records after them stay in the segment (the reader skips them).
    pub damage: Vec<QuarantinedRange>,
    /// The cut or removal at the newest segment's end, if it needed one.
    pub repair: Option<TailRepair>,
    /// The segment this writer appends to.
    pub segment: PathBuf,
}

/// Counters of a writer since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records appended.
    pub records: u64,
    /// Bytes appended (frames).
    pub bytes: u64,
    /// `fsync` calls on segment data.
    pub syncs: u64,
    /// Segments started (the first included).
    pub segments_started: u64,
    /// Sealed segments deleted to keep under the disk cap.
    pub segments_dropped: u64,
    /// Bytes those held, with their quarantine files (deleted with them).
    pub bytes_dropped: u64,
}

/// Appends transitions to a log directory. See the module docs for the guarantees.
#[derive(Debug)]
pub struct LogWriter {
    cfg: LogConfig,
    file: File,
    path: PathBuf,
    index: u64,
    seg_bytes: u64,
    sealed: VecDeque<SegmentFile>,
    /// The sealed segments' bytes, with the quarantine files'.
    sealed_bytes: u64,
    /// The folder's quarantine files (only opening makes them), counted against the cap:
    /// each is deleted with its segment, and one whose segment is gone (removed by
    /// recovery, or dropped by an older build without it) with the first segment dropped.
    quarantine: Vec<QuarantineFile>,
    commit: Commit,
    unsynced: u32,
    oldest_unsynced: Option<Instant>,
    frame: Vec<u8>,
    stats: LogStats,
    poisoned: bool,
    /// When the last rotation failed (cleared when one succeeds).
    rotation_failed_at: Option<Instant>,
    /// The disk cap could not be kept at the last rotation (a sealed segment could not be
    /// deleted): nothing is written until it is.
    over_cap: bool,
    /// The folder and its lock file, locked ([`lock_for_writing`]) while the writer lives.
    _lock: (Option<File>, File),
}

/// Locks the log folder `dir` for this writer, or says that another writer holds it: a
/// second writer's recovery would cut or remove the segment the first is appending to.
/// Two locks, each refusing a second writer: an advisory `flock` on the folder itself
/// (what writers before the second lock took), and one on [`FALLBACK_LOCK`] in the
/// folder, opened for writing. The second is the one that holds across hosts: NFS has
/// no `flock` for folders (the kernel then locks the folder on this host only, and says
/// nothing), while a file's `flock` it sends to the server as a lock. The locks go with
/// the returned handles, or with the process. Only where neither can be taken does the
/// writer go on unlocked, with a warning.
fn lock_for_writing(dir: &Path) -> Result<(Option<File>, File), LogError> {
    let folder = File::open(dir).map_err(|e| LogError::io("opening", dir, e))?;
    let folder = match try_lock_awhile(&folder) {
        Ok(()) => Ok(folder),
        Err(fs::TryLockError::WouldBlock) => return Err(LogError::InUse(dir.to_path_buf())),
        Err(fs::TryLockError::Error(e)) => Err(e),
    };
    let path = dir.join(FALLBACK_LOCK);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io("opening the writer lock", &path, e))?;
    match (try_lock_awhile(&file), folder) {
        (Err(fs::TryLockError::WouldBlock), _) => Err(LogError::InUse(dir.to_path_buf())),
        (Ok(()), folder) => Ok((folder.ok(), file)),
        (Err(fs::TryLockError::Error(_)), Ok(folder)) => Ok((Some(folder), file)),
        (Err(fs::TryLockError::Error(e)), Err(folder_error)) => {
            tracing::warn!(
                dir = %dir.display(), folder = %folder_error, file = %e,
                "transition log: the folder cannot be locked here; a second writer on it would not be refused"
            );
            Ok((None, file))
        }
    }
}

/// How long [`try_lock_awhile`] waits for a lock that is held before it gives up.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// Tries to lock `file`, and keeps trying for [`LOCK_WAIT`] while the lock is held. A
/// lock can be held for a moment by nobody that writes: a child process that this process
/// (any thread of it) is starting holds a copy of every open handle between its fork and
/// its exec, and the lock lives until the last copy is closed. A writer that was just
/// dropped would otherwise refuse its successor as [`LogError::InUse`].
fn try_lock_awhile(file: &File) -> Result<(), fs::TryLockError> {
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Err(fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// The file in a log folder that a writer locks besides the folder (see [`lock_for_writing`]).
pub const FALLBACK_LOCK: &str = ".writer.lock";

/// Creates `dir` and any missing folders above it, syncing the folder that holds each new
/// one (or, where `dir` was there already, the one that holds it), so that a record
/// committed into it cannot vanish with a folder entry a power cut lost.
fn create_dir_durably(dir: &Path) -> Result<(), LogError> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    fs::create_dir_all(dir).map_err(|e| LogError::io("creating", dir, e))?;
    let parent_of = |d: &Path| match d.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    for d in missing.iter().rev() {
        sync_dir(&parent_of(d))?;
    }
    // The folder's own entry too, where it was there already: an earlier open killed
    // before its sync, or a folder made by hand just before, may not be durable yet.
    if missing.is_empty() {
        sync_dir(&parent_of(dir))?;
    }
    Ok(())
}

impl LogWriter {
    /// Opens (creating if needed) the log in `cfg.dir`: repairs the newest segment (see
    /// the module docs), starts a new segment, and applies the disk cap.
    pub fn open(cfg: LogConfig) -> Result<(LogWriter, OpenReport), LogError> {
        cfg.validate()?;
        create_dir_durably(&cfg.dir)?;
        let lock = lock_for_writing(&cfg.dir)?;
        remove_unfinished_quarantine(&cfg.dir)?;
        let mut segments = list_segments(&cfg.dir)?;
        refuse_newer_formats(&segments)?;
        let segments_found = segments.len();
        let highest = highest_segment_name(&cfg.dir)?;
        let next_index = match highest {
            None => 0,
            Some(i) => i.checked_add(1).ok_or_else(|| {
                LogError::Config(format!(
                    "{} holds an entry named for the last segment index there can be ({i}); \
                     no segment can follow it (move it away)",
                    cfg.dir.display()
                ))
            })?,
        };
        if highest != segments.last().map(|s| s.index) {
            tracing::warn!(
                dir = %cfg.dir.display(), next = next_index,
                "transition log: an entry named like a later segment is no segment file; the new segment goes above it"
            );
        }
        let mut recovery = Recovery::default();
        if let Some(last) = segments.pop() {
            recovery = recover_tail(&last)?;
            if let Some(kept) = recovery.kept.take() {
                segments.push(kept);
            }
        }
        for d in &recovery.damage {
            tracing::warn!(
                segment = d.segment, offset = d.offset, length = d.length, kind = %d.kind,
                quarantine = %d.quarantine.display(),
                "transition log: damaged range in the newest segment, copied to quarantine"
            );
        }
        if let Some(r) = &recovery.repair {
            tracing::warn!(repair = ?r, "transition log: repaired the newest segment on open");
        }
        // Quarantine files count against the cap, and go with their segment.
        let quarantine = list_quarantine(&cfg.dir)?;
        let sealed_bytes = segments
            .iter()
            .map(|s| s.bytes)
            .chain(quarantine.iter().map(|q| q.length))
            .fold(0u64, u64::saturating_add);
        let (file, path) =
            create_segment(&cfg.dir, next_index, cfg.epoch_unix_ms).map_err(|f| f.error)?;
        let mut w = LogWriter {
            file,
            path: path.clone(),
            index: next_index,
            seg_bytes: HEADER_BYTES as u64,
            sealed: segments.into(),
            sealed_bytes,
            quarantine,
            commit: Commit::default(),
            unsynced: 0,
            oldest_unsynced: None,
            frame: Vec::with_capacity(1024),
            stats: LogStats {
                segments_started: 1,
                ..LogStats::default()
            },
            poisoned: false,
            rotation_failed_at: None,
            over_cap: false,
            _lock: lock,
            cfg,
        };
        w.enforce_cap()?;
        Ok((
            w,
            OpenReport {
                segments_found,
                tail_records: recovery.records,
                damage: recovery.damage,
                repair: recovery.repair,
                segment: path,
            },
        ))
    }

    /// Appends one record (written to the file before returning; synced per policy).
    pub fn append(&mut self, t: &Transition) -> Result<Commit, LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned(self.cfg.dir.clone()));
        }
        let mut frame = std::mem::take(&mut self.frame);
        let result = encode_frame(t, &mut frame).and_then(|()| self.append_frame(&frame));
        self.frame = frame;
        result
    }

    fn append_frame(&mut self, frame: &[u8]) -> Result<Commit, LogError> {
        let len = frame.len() as u64;
        if self.over_cap {
            // The log never grows past its cap: no record until the oldest segment goes.
            self.enforce_cap()?;
            self.over_cap = false;
        }
        if self.seg_bytes > HEADER_BYTES as u64 && self.seg_bytes + len > self.cfg.max_segment_bytes
        {
            self.rotate()?;
        }
        if let Err(e) = self.file.write_all(frame) {
            // The file may hold part of the frame: cut it back so the segment stays well
            // formed, and refuse further appends either way (the caller reopens).
            self.poisoned = true;
            let _ = self.file.set_len(self.seg_bytes);
            return Err(LogError::io("appending to", &self.path, e));
        }
        self.seg_bytes += len;
        self.commit.appended += 1;
        self.stats.records += 1;
        self.stats.bytes += len;
        self.unsynced += 1;
        self.oldest_unsynced.get_or_insert_with(Instant::now);
        let due = match self.cfg.sync {
            SyncPolicy::EveryRecord => true,
            SyncPolicy::EveryRecords(n) => self.unsynced >= n.get(),
            SyncPolicy::EveryMillis(_) => self.time_due(),
        };
        if due {
            self.sync()?;
        }
        Ok(self.commit)
    }

    fn time_due(&self) -> bool {
        match (self.cfg.sync, self.oldest_unsynced) {
            (SyncPolicy::EveryMillis(ms), Some(t)) => {
                t.elapsed() >= Duration::from_millis(ms.get() as u64)
            }
            _ => false,
        }
    }

    /// Syncs now if the time-based policy says so (call it periodically).
    pub fn commit_if_due(&mut self) -> Result<Commit, LogError> {
        if self.unsynced > 0 && self.time_due() {
            self.sync()?;
        }
        Ok(self.commit)
    }

    /// Syncs every appended record now.
    pub fn commit(&mut self) -> Result<Commit, LogError> {
        if self.unsynced > 0 {
            self.sync()?;
        }
        Ok(self.commit)
    }

    /// Syncs and closes the writer.
    pub fn close(mut self) -> Result<Commit, LogError> {
        self.commit()
    }

    fn sync(&mut self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned(self.cfg.dir.clone()));
        }
        self.file.sync_data().map_err(|e| {
            // After a failed fsync the page cache state is unknown (Linux may have dropped
            // the dirty pages): never report these records as committed.
            self.poisoned = true;
            LogError::io("syncing", &self.path, e)
        })?;
        self.commit.committed = self.commit.appended;
        self.unsynced = 0;
        self.oldest_unsynced = None;
        self.stats.syncs += 1;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), LogError> {
        if let Some(at) = self.rotation_failed_at {
            let since = at.elapsed();
            if since < self.cfg.rotation_retry {
                return Err(LogError::RotationBackoff {
                    dir: self.cfg.dir.clone(),
                    failed_ms_ago: since.as_millis() as u64,
                    retry_ms: self.cfg.rotation_retry.as_millis() as u64,
                });
            }
        }
        if self.unsynced > 0 {
            self.sync()?;
        }
        let next = self.index.checked_add(1).ok_or_else(|| {
            LogError::Config(format!(
                "segment {} is the last index there can be; no segment can follow it",
                self.index
            ))
        })?;
        let (file, path) =
            create_segment(&self.cfg.dir, next, self.cfg.epoch_unix_ms).map_err(|f| {
                // The sealed segment stays the one appended to; a later append tries the
                // rotation again, unless the half-made next segment could not be removed.
                self.poisoned |= f.left_behind;
                self.rotation_failed_at = Some(Instant::now());
                f.error
            })?;
        self.rotation_failed_at = None;
        let old_path = std::mem::replace(&mut self.path, path);
        self.sealed.push_back(SegmentFile {
            index: self.index,
            path: old_path,
            bytes: self.seg_bytes,
        });
        self.sealed_bytes = self.sealed_bytes.saturating_add(self.seg_bytes);
        self.file = file;
        self.index = next;
        self.seg_bytes = HEADER_BYTES as u64;
        self.stats.segments_started += 1;
        self.over_cap = true;
        self.enforce_cap()?;
        self.over_cap = false;
        Ok(())
    }

    fn enforce_cap(&mut self) -> Result<(), LogError> {
        let mut dropped = false;
        // Counting the active segment at its full size keeps the total under the cap at
        // every moment, not only at rotation.
        while self.sealed_bytes.saturating_add(self.cfg.max_segment_bytes)
            > self.cfg.max_total_bytes
        {
            let Some(oldest) = self.sealed.front().cloned() else {
                break;
            };
            // Its quarantine files (and those whose segment is gone) first, each counted
            // off as it goes, so that a failure part-way leaves the count true and the
            // segment listed.
            let sealed = &self.sealed;
            let (mut going, staying): (Vec<QuarantineFile>, Vec<QuarantineFile>) =
                std::mem::take(&mut self.quarantine)
                    .into_iter()
                    .partition(|q| {
                        q.segment == oldest.index || !sealed.iter().any(|s| s.index == q.segment)
                    });
            self.quarantine = staying;
            while let Some(q) = going.pop() {
                if let Err(e) = remove_if_present(&q.path) {
                    self.quarantine.extend(going.into_iter().chain([q.clone()]));
                    return Err(LogError::io("removing", &q.path, e));
                }
                self.sealed_bytes = self.sealed_bytes.saturating_sub(q.length);
                self.stats.bytes_dropped += q.length;
            }
            // Already gone (removed by hand): it no longer takes any room.
            remove_if_present(&oldest.path)
                .map_err(|e| LogError::io("removing", &oldest.path, e))?;
            self.sealed.pop_front();
            self.sealed_bytes = self.sealed_bytes.saturating_sub(oldest.bytes);
            self.stats.segments_dropped += 1;
            self.stats.bytes_dropped += oldest.bytes;
            tracing::warn!(
                segment = %oldest.path.display(),
                bytes = oldest.bytes,
                "transition log: disk cap reached, oldest segment dropped"
            );
            dropped = true;
        }
        if dropped {
            sync_dir(&self.cfg.dir)?;
        }
        Ok(())
    }

    /// Whether an earlier failure left the writer unusable (every append then fails with
    /// [`LogError::Poisoned`]: reopen it). After any other error an append may be tried
    /// again: a failed rotation, say, is tried again by the first append after
    /// [`LogConfig::rotation_retry`] (those before it fail with
    /// [`LogError::RotationBackoff`]).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Counters since open.
    pub fn stats(&self) -> LogStats {
        self.stats
    }

    /// Appended / committed counts since open.
    pub fn counts(&self) -> Commit {
        self.commit
    }

    /// The segment being appended to.
    pub fn segment_path(&self) -> &Path {
        &self.path
    }

    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.cfg
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        // Best effort: a writer dropped without `close` still gets its records synced.
        if self.unsynced > 0 && !self.poisoned {
            if let Err(e) = self.file.sync_data() {
                tracing::error!(segment = %self.path.display(), error = %e, "transition log: final sync failed");
            }
        }
    }
}

/// Why a segment could not be created.
struct CreateFailure {
    error: LogError,
    /// The half-made file is still there (its removal failed too): a later try at the same
    /// index would fail on the name, so the writer is unusable.
    left_behind: bool,
}

/// Creates segment `index` with its header, durably (file and directory entry synced). A
/// file created but not finished (the header write, its sync or the directory's sync
/// failed: a full disk, an I/O error) is removed again, so that a later try at the same
/// index can succeed; it holds no record.
fn create_segment(
    dir: &Path,
    index: u64,
    epoch_unix_ms: u64,
) -> Result<(File, PathBuf), CreateFailure> {
    let path = dir.join(segment_name(index));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| CreateFailure {
            error: LogError::io("creating", &path, e),
            left_behind: false,
        })?;
    let header = Header {
        index,
        epoch_unix_ms,
        version: SEGMENT_VERSION,
    };
    let finished = file
        .write_all(&header.encode())
        .and_then(|()| file.sync_all())
        .map_err(|e| LogError::io("writing the header of", &path, e))
        .and_then(|()| sync_dir(dir));
    match finished {
        Ok(()) => Ok((file, path)),
        Err(error) => {
            drop(file);
            let left_behind = remove_if_present(&path).is_err();
            if !left_behind {
                let _ = sync_dir(dir);
            }
            Err(CreateFailure { error, left_behind })
        }
    }
}

/// Removes the file at `path`; one that is already gone counts as removed.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io("syncing directory", dir, e))
}

/// What recovery found in, and did to, the newest segment.
#[derive(Debug, Default)]
struct Recovery {
    /// The segment, if kept (with its new size).
    kept: Option<SegmentFile>,
    /// Its valid records.
    records: u64,
    /// Its damaged ranges, each copied to quarantine.
    damage: Vec<QuarantinedRange>,
    /// The cut or removal done.
    repair: Option<TailRepair>,
}

/// Checks the newest segment (the only one a crash can have left open). Every damaged
/// range is copied to a quarantine file first; then a damaged tail with nothing sound in
/// or after it is cut, and a segment without a single sound frame is removed. Damage with
/// sound frames after it is left in place: nothing sound is ever cut.
fn recover_tail(seg: &SegmentFile) -> Result<Recovery, LogError> {
    // Not read into memory whole if larger than any segment a writer makes.
    if let Some(bytes) = oversized(seg) {
        return Err(LogError::SegmentTooLarge {
            path: seg.path.clone(),
            bytes,
            max: MAX_SEGMENT_FILE_BYTES,
        });
    }
    // A read error is not evidence of a bad tail: never cut on it.
    let bytes = fs::read(&seg.path).map_err(|e| LogError::io("reading", &seg.path, e))?;
    let scan = scan_segment(&bytes);
    let dir = seg.path.parent().unwrap_or(Path::new("."));
    let mut rec = Recovery {
        records: scan.records.len() as u64,
        ..Recovery::default()
    };
    // A frame this build cannot decode is sound and stays where it is (below): not copied.
    for d in scan
        .damage
        .iter()
        .filter(|d| !matches!(d.kind, IssueKind::Decode(_)))
    {
        rec.damage.push(QuarantinedRange {
            segment: seg.index,
            offset: d.offset,
            length: d.length,
            kind: d.kind.clone(),
            quarantine: quarantine(dir, seg.index, &bytes, d)?,
        });
    }
    // A frame whose checksums hold is committed, whether or not this build decodes its
    // record (a newer build's, with a longer observation): a segment holding one is never
    // removed, and a torn tail is cut only behind it, never through it. The reader
    // reports such a record, and this session writes a new segment.
    if let Some(d) = scan
        .damage
        .iter()
        .find(|d| matches!(d.kind, IssueKind::Decode(_)))
    {
        tracing::warn!(
            segment = %seg.path.display(), offset = d.offset, reason = %d.kind,
            "transition log: a sound record this software cannot read; it is kept"
        );
    }
    if !scan.has_sound_frame() {
        // A session that never appended (header only), a header torn at creation, or
        // nothing but damage: nothing to keep.
        fs::remove_file(&seg.path).map_err(|e| LogError::io("removing", &seg.path, e))?;
        sync_dir(dir)?;
        rec.repair = scan.damage.first().map(|d| TailRepair::Removed {
            segment: seg.path.clone(),
            bytes: bytes.len() as u64,
            reason: d.kind.clone(),
            quarantine: rec.damage.first().map(|q| q.quarantine.clone()),
        });
        return Ok(rec);
    }
    let mut kept = seg.clone();
    kept.bytes = bytes.len() as u64;
    if let Some(tail) = scan.torn_tail() {
        let file = OpenOptions::new()
            .write(true)
            .open(&seg.path)
            .map_err(|e| LogError::io("opening for repair", &seg.path, e))?;
        file.set_len(tail.offset)
            .and_then(|()| file.sync_all())
            .map_err(|e| LogError::io("cutting the tail of", &seg.path, e))?;
        kept.bytes = tail.offset;
        rec.repair = Some(TailRepair::Cut {
            segment: seg.path.clone(),
            offset: tail.offset,
            bytes_cut: tail.length,
            reason: tail.kind.clone(),
            quarantine: dir.join(quarantine_name(seg.index, tail.offset)),
        });
    }
    rec.kept = Some(kept);
    Ok(rec)
}

/// Removes the temporary files of quarantine copies a crash interrupted (`<quarantine
/// name>.tmp`). Each is a partial copy of bytes still in their segment: a segment is cut
/// or removed only once every copy of its damage is renamed into place and the directory
/// synced, so this open's check finds the same damage and copies it again.
fn remove_unfinished_quarantine(dir: &Path) -> Result<(), LogError> {
    let entries = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    let mut removed = false;
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let unfinished = name
            .strip_suffix(".tmp")
            .is_some_and(|q| parse_quarantine_name(q).is_some());
        if unfinished && entry.file_type().is_ok_and(|t| t.is_file()) {
            let path = entry.path();
            tracing::warn!(file = %path.display(), "transition log: removing an unfinished quarantine copy");
            fs::remove_file(&path).map_err(|e| LogError::io("removing", path, e))?;
            removed = true;
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Copies the damaged range `d` of segment `index` to its quarantine file, durably (file
/// written to a temporary name, synced, renamed, directory synced). A quarantine file
/// already holding exactly these bytes (an earlier open found the same damage) is kept.
fn quarantine(dir: &Path, index: u64, bytes: &[u8], d: &Damage) -> Result<PathBuf, LogError> {
    let name = quarantine_name(index, d.offset);
    let path = dir.join(&name);
    let range = &bytes[d.offset as usize..(d.offset + d.length) as usize];
    if fs::read(&path).is_ok_and(|old| old == range) {
        return Ok(path);
    }
    let tmp = dir.join(format!("{name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(range)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| LogError::io("writing quarantine file", &path, e))?;
    sync_dir(dir)?;
    Ok(path)
}
