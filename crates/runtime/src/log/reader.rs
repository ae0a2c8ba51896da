//! Reading a log back: every intact record, oldest first, with per-segment problem reports.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use greenwave_core::Transition;

use super::segment::{
    list_segments, read_header, FrameScanner, IssueKind, SegmentFile, HEADER_BYTES,
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
    pub epoch_unix_ms: u64,
    /// The record.
    pub transition: Transition,
}

/// A problem in one segment. The rest of that segment (from `offset`) is skipped; reading
/// goes on with the next segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("segment {path} at byte {offset}: {kind}{}", if *newest { " (newest segment)" } else { "" })]
pub struct SegmentIssue {
    /// Index of the segment.
    pub segment: u64,
    /// Its path.
    pub path: PathBuf,
    /// Where the problem starts (0 for a header problem).
    pub offset: u64,
    /// Bytes skipped from `offset` to the end of the segment.
    pub skipped_bytes: u64,
    /// Whether this is the newest segment (where a torn tail after a crash is expected
    /// until a writer reopens the log and cuts it).
    pub newest: bool,
    /// What is wrong.
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

    /// Every intact record, oldest first, interleaved with one `Err` per segment problem.
    pub fn records(&self) -> Records<'_> {
        Records {
            segments: &self.segments,
            next: 0,
            current: None,
        }
    }
}

/// Reads all of `dir`: the records, and the problems met on the way.
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

struct OpenSegment<'a> {
    seg: &'a SegmentFile,
    newest: bool,
    epoch_unix_ms: u64,
    scanner: FrameScanner<BufReader<File>>,
}

/// Iterator over a log's records; see [`LogReader::records`].
pub struct Records<'a> {
    segments: &'a [SegmentFile],
    next: usize,
    current: Option<OpenSegment<'a>>,
}

impl Records<'_> {
    fn issue(
        seg: &SegmentFile,
        newest: bool,
        offset: u64,
        size: u64,
        kind: IssueKind,
    ) -> SegmentIssue {
        SegmentIssue {
            segment: seg.index,
            path: seg.path.clone(),
            offset,
            skipped_bytes: size.saturating_sub(offset),
            newest,
            kind,
        }
    }
}

impl Iterator for Records<'_> {
    type Item = Result<LogRecord, SegmentIssue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(cur) = &mut self.current {
                match cur.scanner.next_record() {
                    Some(Ok((offset, transition))) => {
                        return Some(Ok(LogRecord {
                            segment: cur.seg.index,
                            offset,
                            epoch_unix_ms: cur.epoch_unix_ms,
                            transition,
                        }))
                    }
                    Some(Err((offset, kind))) => {
                        let (seg, newest) = (cur.seg, cur.newest);
                        // The size may have grown since listing (a live writer).
                        let size = std::fs::metadata(&seg.path).map_or(seg.bytes, |m| m.len());
                        self.current = None;
                        return Some(Err(Self::issue(seg, newest, offset, size, kind)));
                    }
                    None => self.current = None,
                }
            }
            let seg = self.segments.get(self.next)?;
            self.next += 1;
            let newest = self.next == self.segments.len();
            let file = match File::open(&seg.path) {
                Ok(f) => f,
                Err(e) => {
                    return Some(Err(Self::issue(
                        seg,
                        newest,
                        0,
                        seg.bytes,
                        IssueKind::Io(e.to_string()),
                    )))
                }
            };
            let mut r = BufReader::new(file);
            match read_header(&mut r, seg.index) {
                Ok(h) => {
                    self.current = Some(OpenSegment {
                        seg,
                        newest,
                        epoch_unix_ms: h.epoch_unix_ms,
                        scanner: FrameScanner::new(r, HEADER_BYTES as u64),
                    })
                }
                Err(kind) => return Some(Err(Self::issue(seg, newest, 0, seg.bytes, kind))),
            }
        }
    }
}
