//! Segment files: naming, the header, and the frame scanner shared by recovery and reading.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use greenwave_core::Transition;

use super::LogError;

/// First four bytes of every segment.
pub const SEGMENT_MAGIC: [u8; 4] = *b"GWTL";
/// Segment format version.
pub const SEGMENT_VERSION: u16 = 1;
/// Bytes in a segment header.
pub const HEADER_BYTES: usize = 28;
/// Bytes of a record's frame before its payload (`len`, `crc32`).
pub const FRAME_OVERHEAD: usize = 8;
/// Largest payload accepted. A `Transition` with the default 96-float observations encodes
/// to under 1 kB; anything far larger can only be a corrupt length field.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

const PREFIX: &str = "seg-";
const SUFFIX: &str = ".gwlog";

/// One segment file found in a log directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFile {
    /// Its index (from the file name; increases with age, newest last).
    pub index: u64,
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes when listed.
    pub bytes: u64,
}

/// What is wrong at some offset of a segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IssueKind {
    /// The header is missing, too short, or fails its checks.
    #[error("bad segment header: {0}")]
    BadHeader(String),
    /// The file ends inside a record (a torn write).
    #[error("file ends inside a record ({available} of {needed} bytes present): torn write")]
    Truncated {
        /// Bytes the record needs from this offset.
        needed: u64,
        /// Bytes present from this offset.
        available: u64,
    },
    /// A length field of 0 or above [`MAX_RECORD_BYTES`].
    #[error("record length {0} is outside 1..={MAX_RECORD_BYTES}")]
    BadLength(u32),
    /// The payload's CRC does not match the stored one.
    #[error("record CRC {computed:#010x} does not match the stored {stored:#010x}")]
    Crc {
        /// Stored in the frame.
        stored: u32,
        /// Computed over the payload.
        computed: u32,
    },
    /// The CRC matches but the payload is not a transition record.
    #[error("record payload is not a transition: {0}")]
    Decode(String),
    /// Reading the file failed.
    #[error("read error: {0}")]
    Io(String),
}

/// The name of segment `index`.
pub(crate) fn segment_name(index: u64) -> String {
    format!("{PREFIX}{index:020}{SUFFIX}")
}

/// The index in a segment file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Segment files of `dir`, oldest first. Other files (`*.corrupt`, anything foreign) are
/// left alone.
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<SegmentFile>, LogError> {
    let entries = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let name = entry.file_name();
        let Some(index) = name.to_str().and_then(parse_segment_name) else {
            continue;
        };
        let path = entry.path();
        let bytes = entry
            .metadata()
            .map_err(|e| LogError::io("reading metadata of", &path, e))?
            .len();
        out.push(SegmentFile { index, path, bytes });
    }
    out.sort_by_key(|s| s.index);
    Ok(out)
}

/// A segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub index: u64,
    pub epoch_unix_ms: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&SEGMENT_MAGIC);
        h[4..6].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
        h[6..8].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
        h[8..16].copy_from_slice(&self.index.to_le_bytes());
        h[16..24].copy_from_slice(&self.epoch_unix_ms.to_le_bytes());
        let crc = crc32fast::hash(&h[..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header; `expected_index` is the index in the file name.
    pub(crate) fn decode(bytes: &[u8], expected_index: u64) -> Result<Header, IssueKind> {
        if bytes.len() < HEADER_BYTES {
            return Err(IssueKind::BadHeader(format!(
                "{} of {HEADER_BYTES} header bytes present",
                bytes.len()
            )));
        }
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let stored = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
        let computed = crc32fast::hash(&bytes[..24]);
        if stored != computed {
            return Err(IssueKind::BadHeader(format!(
                "header CRC {computed:#010x} does not match the stored {stored:#010x}"
            )));
        }
        if bytes[0..4] != SEGMENT_MAGIC {
            return Err(IssueKind::BadHeader("magic is not GWTL".into()));
        }
        if u16_at(4) != SEGMENT_VERSION || u16_at(6) as usize != HEADER_BYTES {
            return Err(IssueKind::BadHeader(format!(
                "format version {} / header length {} not supported",
                u16_at(4),
                u16_at(6)
            )));
        }
        let index = u64_at(8);
        if index != expected_index {
            return Err(IssueKind::BadHeader(format!(
                "header says segment {index}, file name says {expected_index}"
            )));
        }
        Ok(Header {
            index,
            epoch_unix_ms: u64_at(16),
        })
    }
}

/// Encodes one record frame into `out` (cleared first).
pub(crate) fn encode_frame(t: &Transition, out: &mut Vec<u8>) -> Result<(), LogError> {
    out.clear();
    out.extend_from_slice(&[0u8; FRAME_OVERHEAD]);
    let out_taken = std::mem::take(out);
    let mut buf = postcard::to_extend(t, out_taken).map_err(LogError::Encode)?;
    let len = buf.len() - FRAME_OVERHEAD;
    if len > MAX_RECORD_BYTES {
        return Err(LogError::RecordTooLarge {
            bytes: len,
            max: MAX_RECORD_BYTES,
        });
    }
    let crc = crc32fast::hash(&buf[FRAME_OVERHEAD..]);
    buf[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    *out = buf;
    Ok(())
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads a segment's header from `r`.
pub(crate) fn read_header(r: &mut impl Read, index: u64) -> Result<Header, IssueKind> {
    let mut h = [0u8; HEADER_BYTES];
    let n = read_full(r, &mut h).map_err(|e| IssueKind::Io(e.to_string()))?;
    Header::decode(&h[..n], index)
}

/// Iterates the records of one segment after its header. Stops for good at the first
/// problem, which it returns with the offset where the bad record starts.
pub(crate) struct FrameScanner<R> {
    r: R,
    offset: u64,
    buf: Vec<u8>,
    done: bool,
}

impl<R: Read> FrameScanner<R> {
    /// A scanner whose next record starts at `offset` of the file.
    pub(crate) fn new(r: R, offset: u64) -> Self {
        FrameScanner {
            r,
            offset,
            buf: Vec::new(),
            done: false,
        }
    }

    /// The next record and its offset, `None` at a clean end, or the problem and the
    /// offset of the record it spoils.
    pub(crate) fn next_record(&mut self) -> Option<Result<(u64, Transition), (u64, IssueKind)>> {
        if self.done {
            return None;
        }
        let at = self.offset;
        let result = self.read_one();
        match result {
            Ok(Some((t, bytes))) => {
                self.offset += bytes;
                Some(Ok((at, t)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(kind) => {
                self.done = true;
                Some(Err((at, kind)))
            }
        }
    }

    fn read_one(&mut self) -> Result<Option<(Transition, u64)>, IssueKind> {
        let io = |e: io::Error| IssueKind::Io(e.to_string());
        let mut head = [0u8; FRAME_OVERHEAD];
        let n = read_full(&mut self.r, &mut head).map_err(io)?;
        if n == 0 {
            return Ok(None);
        }
        if n < FRAME_OVERHEAD {
            return Err(IssueKind::Truncated {
                needed: FRAME_OVERHEAD as u64,
                available: n as u64,
            });
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len == 0 || len as usize > MAX_RECORD_BYTES {
            return Err(IssueKind::BadLength(len));
        }
        self.buf.resize(len as usize, 0);
        let got = read_full(&mut self.r, &mut self.buf).map_err(io)?;
        if got < len as usize {
            return Err(IssueKind::Truncated {
                needed: (FRAME_OVERHEAD + len as usize) as u64,
                available: (FRAME_OVERHEAD + got) as u64,
            });
        }
        let computed = crc32fast::hash(&self.buf);
        if computed != stored {
            return Err(IssueKind::Crc { stored, computed });
        }
        let t: Transition = match postcard::take_from_bytes(&self.buf) {
            Ok((t, [])) => t,
            Ok((_, rest)) => {
                return Err(IssueKind::Decode(format!(
                    "{} bytes follow the record",
                    rest.len()
                )))
            }
            Err(e) => return Err(IssueKind::Decode(e.to_string())),
        };
        Ok(Some((t, (FRAME_OVERHEAD + len as usize) as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_names_are_ignored() {
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert_eq!(segment_name(7), "seg-00000000000000000007.gwlog");
        for bad in [
            "seg-7.gwlog",
            "seg-0000000000000000000x.gwlog",
            "seg-00000000000000000007.gwlog.corrupt",
            "x",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = Header {
            index: 9,
            epoch_unix_ms: 1_700_000_000_000,
        };
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes, 9), Ok(h));
        assert!(matches!(
            Header::decode(&bytes, 8),
            Err(IssueKind::BadHeader(_))
        ));
        assert!(matches!(
            Header::decode(&bytes[..20], 9),
            Err(IssueKind::BadHeader(_))
        ));
        for i in 0..HEADER_BYTES {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(Header::decode(&b, 9).is_err(), "flip at byte {i}");
        }
    }
}
