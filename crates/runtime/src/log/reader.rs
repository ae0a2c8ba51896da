//! Reading a log back: every intact record, oldest first, with every damaged range reported.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use greenwave_core::Transition;

use super::segment::{
    list_quarantine, list_segments, oversized, refuse_newer_formats, scan_segment, Header,
    IssueKind, QuarantineFile, SegmentFile, SegmentScan, HEADER_BYTES, MAX_SEGMENT_FILE_BYTES,
};
use super::LogError;

/// One record read back, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRecord {
    /// Index of its segment.
    pub segment: u64,
    /// Byte offset of its frame in the segment.
    pub offset: u64,
    /// The segment's epoch: the record's `timestamp_ms` counts from this Unix time (ms).
    /// For a segment whose header is damaged, the epoch of the nearest segment with an
    /// intact header (a writer session writes one epoch into all its segments).
    pub epoch_unix_ms: u64,
    /// The record.
    pub transition: Transition,
}

/// A damaged byte range in one segment. Reading goes on with the next valid record after
/// it (in the same segment, or the next).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "segment {path} bytes {offset}..{} ({skipped_bytes} bytes skipped): {kind}{}",
    offset + skipped_bytes,
    if *newest && *to_end && !matches!(kind, IssueKind::Decode(_)) {
        " (torn tail of the newest segment)"
    } else {
        ""
    }
)]
pub struct SegmentIssue {
    /// Index of the segment.
    pub segment: u64,
    /// Its path.
    pub path: PathBuf,
    /// Where the damaged range starts (0 for a header problem).
    pub offset: u64,
    /// Length of the damaged range: no valid record starts inside it.
    pub skipped_bytes: u64,
    /// Whether the range runs to the end of the segment (nothing valid after it).
    pub to_end: bool,
    /// Whether this is the newest segment (where a torn tail after a crash is expected
    /// until a writer reopens the log, quarantines and cuts it).
    pub newest: bool,
    /// What was found at `offset`.
    pub kind: IssueKind,
}

/// Reads a log directory without modifying it.
#[derive(Clone, Debug)]
pub struct LogReader {
    dir: PathBuf,
    segments: Vec<SegmentFile>,
}

impl LogReader {
    /// Lists the segments of the log in `dir` (which must exist).
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LogError> {
        let dir = dir.as_ref().to_path_buf();
        let segments = list_segments(&dir)?;
        refuse_newer_formats(&segments)?;
        Ok(LogReader { dir, segments })
    }

    /// The log directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segments found at open, oldest first.
    pub fn segments(&self) -> &[SegmentFile] {
        &self.segments
    }

    /// Quarantine files in the directory: damaged bytes a writer copied out of a segment
    /// before cutting them (see [`super::LogWriter::open`]).
    pub fn quarantine(&self) -> Result<Vec<QuarantineFile>, LogError> {
        list_quarantine(&self.dir)
    }

    /// Every intact record, oldest first, interleaved (in file order) with one `Err` per
    /// damaged range.
    pub fn records(&self) -> Records<'_> {
        Records {
            segments: &self.segments,
            indices: self.segments.iter().map(|s| s.index).collect(),
            next: 0,
            current: None,
            pending: VecDeque::new(),
            last_epoch: None,
        }
    }
}

/// Reads all of `dir`: the records, and the damaged ranges met on the way.
pub fn read_all(dir: impl AsRef<Path>) -> Result<(Vec<LogRecord>, Vec<SegmentIssue>), LogError> {
    let reader = LogReader::open(dir)?;
    let mut records = Vec::new();
    let mut issues = Vec::new();
    for item in reader.records() {
        match item {
            Ok(r) => records.push(r),
            Err(i) => issues.push(i),
        }
    }
    Ok((records, issues))
}

/// Iterator over a log's records; see [`LogReader::records`]. Holds one segment's bytes in
/// memory at a time, with where its records and damaged ranges lie, and decodes each
/// record as it is yielded: a decoded record takes room for the longest observation
/// (about 2 kB), several times its frame, so a segment's records decoded at once would
/// take several times the segment.
pub struct Records<'a> {
    segments: &'a [SegmentFile],
    indices: BTreeSet<u64>,
    next: usize,
    /// The segment being read: its index in `segments`, bytes, scan and epoch.
    current: Option<Loaded>,
    pending: VecDeque<Pending>,
    last_epoch: Option<u64>,
}

/// A segment read into memory.
struct Loaded {
    at: usize,
    bytes: Vec<u8>,
    scan: SegmentScan,
    epoch_unix_ms: u64,
}

/// What the current segment yields next, in file order.
enum Pending {
    /// The record of the frame at this offset (decoded when yielded).
    Record(u64),
    /// A problem found before the segment's scan (it could not be read, or is a copy).
    Issue(Box<SegmentIssue>),
    /// The current segment's damaged range of this index in its scan (its issue made when
    /// yielded: a segment of many small damaged ranges takes no path copy for each).
    Damage(usize),
}

impl Records<'_> {
    /// The epoch of the first segment after `after` whose header is intact.
    fn later_epoch(&self, after: usize) -> Option<u64> {
        self.segments[after + 1..].iter().find_map(|s| {
            let bytes = read_prefix(&s.path, HEADER_BYTES).ok()?;
            Header::decode(&bytes).ok().map(|h| h.epoch_unix_ms)
        })
    }

    /// The issue of segment `i` for the damaged range at `offset`.
    fn issue(
        &self,
        i: usize,
        offset: u64,
        skipped_bytes: u64,
        to_end: bool,
        kind: IssueKind,
    ) -> SegmentIssue {
        let seg = &self.segments[i];
        SegmentIssue {
            segment: seg.index,
            path: seg.path.clone(),
            offset,
            skipped_bytes,
            to_end,
            newest: i + 1 == self.segments.len(),
            kind,
        }
    }

    /// Reads segment `i` into `current`, and where its records and damage lie into
    /// `pending`.
    fn load(&mut self, i: usize) {
        self.current = None;
        let seg = &self.segments[i];
        if let Some(bytes) = oversized(seg) {
            let max = MAX_SEGMENT_FILE_BYTES;
            let issue = self.issue(i, 0, bytes, true, IssueKind::TooLarge { bytes, max });
            self.pending.push_back(Pending::Issue(Box::new(issue)));
            return;
        }
        let bytes = match std::fs::read(&seg.path) {
            Ok(b) => b,
            Err(e) => {
                let issue = self.issue(i, 0, seg.bytes, true, IssueKind::Io(e.to_string()));
                self.pending.push_back(Pending::Issue(Box::new(issue)));
                return;
            }
        };
        let scan = scan_segment(&bytes);
        let len = bytes.len() as u64;
        let epoch_unix_ms = match &scan.header {
            Ok(h) if h.index != seg.index && self.indices.contains(&h.index) => {
                let issue = self.issue(i, 0, len, true, IssueKind::Duplicate { of: h.index });
                self.pending.push_back(Pending::Issue(Box::new(issue)));
                return;
            }
            Ok(h) => h.epoch_unix_ms,
            Err(_) => self.last_epoch.or_else(|| self.later_epoch(i)).unwrap_or(0),
        };
        self.last_epoch = Some(epoch_unix_ms);
        let mut records = scan.records.iter().peekable();
        let mut damage = scan.damage.iter().enumerate().peekable();
        loop {
            let take_record = match (records.peek(), damage.peek()) {
                (Some(r), Some((_, d))) => r.0 < d.offset,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_record {
                let (offset, _) = records.next().expect("peeked");
                self.pending.push_back(Pending::Record(*offset));
            } else {
                let (k, _) = damage.next().expect("peeked");
                self.pending.push_back(Pending::Damage(k));
            }
        }
        self.current = Some(Loaded {
            at: i,
            bytes,
            scan,
            epoch_unix_ms,
        });
    }

    /// The issue of the current segment's damaged range `k` (one of its scan's).
    fn damage_issue(&self, k: usize) -> SegmentIssue {
        // A range is pending only while its segment is loaded.
        let Some(c) = &self.current else {
            let kind = IssueKind::Io("the segment is no longer in memory".into());
            return self.issue(self.next.saturating_sub(1), 0, 0, false, kind);
        };
        let d = &c.scan.damage[k];
        let to_end = d.offset + d.length == c.bytes.len() as u64;
        self.issue(c.at, d.offset, d.length, to_end, d.kind.clone())
    }

    /// The record of the current segment's frame at `offset`. The scan found it sound,
    /// and the bytes in memory have not changed since, so it decodes again; if not, the
    /// frame is reported as damage rather than lost unnoticed.
    fn record_at(&self, offset: u64) -> Result<LogRecord, SegmentIssue> {
        // A record is pending only while its segment is loaded.
        let Some(c) = &self.current else {
            let kind = IssueKind::Io("the segment is no longer in memory".into());
            return Err(self.issue(self.next.saturating_sub(1), offset, 0, false, kind));
        };
        c.scan
            .record(&c.bytes, offset)
            .map(|transition| LogRecord {
                segment: self.segments[c.at].index,
                offset,
                epoch_unix_ms: c.epoch_unix_ms,
                transition,
            })
            .map_err(|kind| self.issue(c.at, offset, 0, false, kind))
    }
}

/// The first `n` bytes of a file (fewer if it is shorter).
fn read_prefix(path: &Path, n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(n);
    std::fs::File::open(path)?
        .take(n as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

impl Iterator for Records<'_> {
    type Item = Result<LogRecord, SegmentIssue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.pending.pop_front() {
                Some(Pending::Record(offset)) => return Some(self.record_at(offset)),
                Some(Pending::Issue(issue)) => return Some(Err(*issue)),
                Some(Pending::Damage(k)) => return Some(Err(self.damage_issue(k))),
                None => {}
            }
            if self.next >= self.segments.len() {
                return None;
            }
            self.next += 1;
            self.load(self.next - 1);
        }
    }
}
