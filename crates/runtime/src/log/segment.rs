//! Segment files: naming, the header, and the frame scanner shared by recovery and reading.

use std::fs;
use std::path::{Path, PathBuf};

use greenwave_core::Transition;

use super::LogError;

/// First four bytes of every segment.
pub const SEGMENT_MAGIC: [u8; 4] = *b"GWTL";
/// Segment format version written: 3 (version 2's resynchronisable frames; records carry
/// their reward kind). Versions 1 and 2 stay readable (their records read with
/// `reward_kind: None`); older software refuses a version-3 segment by its header instead
/// of misreading its records.
pub const SEGMENT_VERSION: u16 = 3;
/// Version 2: resynchronisable frames, records without a reward kind.
pub const SEGMENT_VERSION_V2: u16 = 2;
/// The first format: records framed `len | crc32(payload) | payload`, no frame magic.
pub const SEGMENT_VERSION_V1: u16 = 1;
/// Bytes in a segment header.
pub const HEADER_BYTES: usize = 28;
/// First four bytes of every version-2 record frame (never the start of a segment header).
pub const FRAME_MAGIC: [u8; 4] = [0x9e, b'G', b'W', b'R'];
/// Bytes of a version-2 frame before its payload: magic, `len`, `crc32(payload)`, and
/// `crc32` of those 12 bytes.
pub const FRAME_OVERHEAD: usize = 16;
/// Bytes of a version-1 frame before its payload (`len`, `crc32(payload)`).
pub const FRAME_OVERHEAD_V1: usize = 8;
/// Largest payload accepted. A `Transition` with the default 256-float observations encodes
/// to under 2.1 kB; anything far larger can only be a corrupt length field.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

const PREFIX: &str = "seg-";
const SUFFIX: &str = ".gwlog";
const QUARANTINE_INFIX: &str = ".quarantine-";

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

/// The largest segment file a writer makes: [`super::MAX_SEGMENT_BYTES`] (a segment is
/// rotated before a record would take it past its limit, and one record alone can exceed a
/// small limit), with a frame's room to spare. A larger file is not read into memory.
pub(crate) const MAX_SEGMENT_FILE_BYTES: u64 =
    super::MAX_SEGMENT_BYTES + 2 * (MAX_RECORD_BYTES + FRAME_OVERHEAD + HEADER_BYTES) as u64;

/// The size of segment file `seg` on disk now, if larger than any writer makes
/// ([`MAX_SEGMENT_FILE_BYTES`]).
pub(crate) fn oversized(seg: &SegmentFile) -> Option<u64> {
    let bytes = fs::metadata(&seg.path).map_or(seg.bytes, |m| m.len());
    (bytes > MAX_SEGMENT_FILE_BYTES).then_some(bytes)
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
    /// A version-2 frame header that is not one: wrong magic, or its checksum fails.
    #[error("no valid record frame here: {0}")]
    BadFrame(String),
    /// A segment whose header is intact but names another segment that the log also holds:
    /// a copy. Its records are not read twice.
    #[error("copy of segment {of} (its header names that segment): not read")]
    Duplicate {
        /// The segment its header names.
        of: u64,
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
    /// The file is larger than any segment a writer makes: not read.
    #[error("{bytes} bytes, more than any segment holds ({max}): not read")]
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The most a segment file holds.
        max: u64,
    },
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

/// The quarantine file holding the damaged bytes found at `offset` of segment `index`.
pub(crate) fn quarantine_name(index: u64, offset: u64) -> String {
    format!("{}{QUARANTINE_INFIX}{offset}", segment_name(index))
}

/// The segment index and offset in a quarantine file name, if it is one.
pub(crate) fn parse_quarantine_name(name: &str) -> Option<(u64, u64)> {
    let (segment, offset) = name.split_once(QUARANTINE_INFIX)?;
    if offset.is_empty() || !offset.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parse_segment_name(segment)?, offset.parse().ok()?))
}

/// A quarantine file: bytes copied out of a segment before a writer cut or removed them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantineFile {
    /// The segment the bytes came from.
    pub segment: u64,
    /// Where in that segment they started.
    pub offset: u64,
    /// How many bytes (the file's size).
    pub length: u64,
    /// The file.
    pub path: PathBuf,
}

/// Quarantine files of `dir`, by segment and offset.
pub(crate) fn list_quarantine(dir: &Path) -> Result<Vec<QuarantineFile>, LogError> {
    let entries = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let name = entry.file_name();
        let Some((segment, offset)) = name.to_str().and_then(parse_quarantine_name) else {
            continue;
        };
        let path = entry.path();
        let length = entry
            .metadata()
            .map_err(|e| LogError::io("reading metadata of", &path, e))?
            .len();
        out.push(QuarantineFile {
            segment,
            offset,
            length,
            path,
        });
    }
    out.sort_by_key(|q| (q.segment, q.offset));
    Ok(out)
}

/// Segment files of `dir`, oldest first. Other files (`*.corrupt`, anything foreign), and
/// anything named like a segment that is not a file (a folder), are left alone; see
/// [`foreign_entries`].
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
        let meta =
            fs::metadata(&path).map_err(|e| LogError::io("reading metadata of", &path, e))?;
        if !meta.is_file() {
            continue;
        }
        out.push(SegmentFile {
            index,
            path,
            bytes: meta.len(),
        });
    }
    out.sort_by_key(|s| s.index);
    Ok(out)
}

/// The highest index any entry of `dir` is named for, file or not: a writer starts its
/// segment above it, so a folder named like a later segment never takes a segment's name.
pub(crate) fn highest_segment_name(dir: &Path) -> Result<Option<u64>, LogError> {
    let entries = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    let mut highest = None;
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let index = entry.file_name().to_str().and_then(parse_segment_name);
        highest = highest.max(index);
    }
    Ok(highest)
}

/// Entries of `dir` that look meant for the log (`.gwlog` in their name) but that no
/// reader or writer uses: misnamed segments (`seg-7.gwlog`, `weird.gwlog`), segment names
/// that are not files. Sorted. Quarantine files, and the `.corrupt` files writers before
/// format v2 set damaged segments aside as, are the log's own.
pub fn foreign_entries(dir: &Path) -> Result<Vec<PathBuf>, LogError> {
    let used: Vec<PathBuf> = list_segments(dir)?.into_iter().map(|s| s.path).collect();
    let entries = fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let own = parse_quarantine_name(&name).is_some()
            || name
                .strip_suffix(".corrupt")
                .is_some_and(|s| parse_segment_name(s).is_some());
        if name.contains(SUFFIX) && !own && !used.contains(&entry.path()) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// A segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The segment index it names.
    pub index: u64,
    /// Records' `timestamp_ms` count from this Unix time (ms).
    pub epoch_unix_ms: u64,
    /// The format of the records behind it (1, 2 or 3: [`SEGMENT_VERSION`] and before).
    pub version: u16,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&SEGMENT_MAGIC);
        h[4..6].copy_from_slice(&self.version.to_le_bytes());
        h[6..8].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
        h[8..16].copy_from_slice(&self.index.to_le_bytes());
        h[16..24].copy_from_slice(&self.epoch_unix_ms.to_le_bytes());
        let crc = crc32fast::hash(&h[..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and checks a header (not against the file name: see [`scan_segment`]).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, IssueKind> {
        if bytes.len() < HEADER_BYTES {
            return Err(IssueKind::BadHeader(format!(
                "{} of {HEADER_BYTES} header bytes present",
                bytes.len()
            )));
        }
        let stored = u32_at(bytes, 24);
        let computed = crc32fast::hash(&bytes[..24]);
        if stored != computed {
            return Err(IssueKind::BadHeader(format!(
                "header CRC {computed:#010x} does not match the stored {stored:#010x}"
            )));
        }
        if bytes[0..4] != SEGMENT_MAGIC {
            return Err(IssueKind::BadHeader("magic is not GWTL".into()));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        let header_len = u16::from_le_bytes([bytes[6], bytes[7]]);
        let known = matches!(
            version,
            SEGMENT_VERSION | SEGMENT_VERSION_V2 | SEGMENT_VERSION_V1
        );
        if !known || header_len as usize != HEADER_BYTES {
            return Err(IssueKind::BadHeader(format!(
                "format version {version} / header length {header_len} not supported"
            )));
        }
        Ok(Header {
            index: u64_at(bytes, 8),
            epoch_unix_ms: u64_at(bytes, 16),
            version,
        })
    }
}

/// The format version of a segment header that is intact (its CRC and magic check out)
/// and above this software's: a newer one's. Such a segment is refused whole
/// ([`refuse_newer_formats`]), never scanned as damage, cut or removed. (So every later
/// format must keep the magic, the version at bytes 4..6 and the CRC-32 of bytes 0..24 at
/// bytes 24..28.)
pub(crate) fn newer_format(bytes: &[u8]) -> Option<u16> {
    let h = bytes.get(..HEADER_BYTES)?;
    if u32_at(h, 24) != crc32fast::hash(&h[..24]) || h[0..4] != SEGMENT_MAGIC {
        return None;
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    (version > SEGMENT_VERSION).then_some(version)
}

/// Refuses a log holding a segment of a newer format (by its intact header): this software
/// would take its records for damage, and a writer would cut or remove them. A header that
/// cannot be read is left to the segment's own reading (a segment a writer's disk cap
/// removed meanwhile, an I/O error reported as the segment's issue).
pub(crate) fn refuse_newer_formats(segments: &[SegmentFile]) -> Result<(), LogError> {
    use std::io::Read as _;
    for seg in segments {
        let mut head = Vec::with_capacity(HEADER_BYTES);
        let read = fs::File::open(&seg.path)
            .and_then(|f| f.take(HEADER_BYTES as u64).read_to_end(&mut head));
        if read.is_err() {
            continue;
        }
        if let Some(version) = newer_format(&head) {
            return Err(LogError::NewerFormat {
                path: seg.path.clone(),
                version,
            });
        }
    }
    Ok(())
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// Encodes one version-2 record frame into `out` (cleared first).
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
    buf[0..4].copy_from_slice(&FRAME_MAGIC);
    buf[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    buf[8..12].copy_from_slice(&crc.to_le_bytes());
    let head_crc = crc32fast::hash(&buf[0..12]);
    buf[12..16].copy_from_slice(&head_crc.to_le_bytes());
    *out = buf;
    Ok(())
}

/// Encodes one version-1 record frame (the old format; kept so that tests and the fuzz
/// corpora can write old segments).
#[doc(hidden)]
pub fn encode_frame_v1(t: &Transition) -> Result<Vec<u8>, LogError> {
    let payload = postcard::to_stdvec(t).map_err(LogError::Encode)?;
    let mut out = Vec::with_capacity(FRAME_OVERHEAD_V1 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// A segment header as bytes (for tests and corpora writing segments by hand).
#[doc(hidden)]
pub fn encode_header(index: u64, epoch_unix_ms: u64, version: u16) -> [u8; HEADER_BYTES] {
    Header {
        index,
        epoch_unix_ms,
        version,
    }
    .encode()
}

/// Checks the payload of a frame and decodes it.
fn payload(bytes: &[u8], stored_crc: u32) -> Result<Transition, IssueKind> {
    let computed = crc32fast::hash(bytes);
    if computed != stored_crc {
        return Err(IssueKind::Crc {
            stored: stored_crc,
            computed,
        });
    }
    // Records written before reward kinds were recorded (segment versions 1 and 2) decode
    // with `reward_kind: None`.
    Transition::from_record_bytes(bytes).map_err(|e| IssueKind::Decode(e.to_string()))
}

/// The length field's check, and whether the file holds the whole frame.
fn frame_len(len: u32, overhead: usize, available: usize) -> Result<usize, IssueKind> {
    if len == 0 || len as usize > MAX_RECORD_BYTES {
        return Err(IssueKind::BadLength(len));
    }
    let needed = overhead + len as usize;
    if available < needed {
        return Err(IssueKind::Truncated {
            needed: needed as u64,
            available: available as u64,
        });
    }
    Ok(needed)
}

/// The record frame starting at `bytes[0]` in format `version`: its length and record.
/// Where a frame of format `version` holds its length field, and its bytes before the
/// payload.
fn frame_layout(version: u16) -> (usize, usize) {
    if version == SEGMENT_VERSION_V1 {
        (0, FRAME_OVERHEAD_V1)
    } else {
        (4, FRAME_OVERHEAD)
    }
}

fn frame_at(version: u16, bytes: &[u8]) -> Result<(usize, Transition), IssueKind> {
    let (len_at, overhead) = frame_layout(version);
    if bytes.len() < overhead {
        return Err(IssueKind::Truncated {
            needed: overhead as u64,
            available: bytes.len() as u64,
        });
    }
    if version == SEGMENT_VERSION_V1 {
        let n = frame_len(u32_at(bytes, len_at), overhead, bytes.len())?;
        return Ok((n, payload(&bytes[overhead..n], u32_at(bytes, 4))?));
    }
    if bytes[0..4] != FRAME_MAGIC {
        return Err(IssueKind::BadFrame("frame magic missing".into()));
    }
    let (stored, computed) = (u32_at(bytes, 12), crc32fast::hash(&bytes[0..12]));
    if stored != computed {
        return Err(IssueKind::BadFrame(format!(
            "frame header CRC {computed:#010x} does not match the stored {stored:#010x}"
        )));
    }
    let n = frame_len(u32_at(bytes, len_at), overhead, bytes.len())?;
    Ok((n, payload(&bytes[overhead..n], u32_at(bytes, 8))?))
}

/// The length of the frame at `bytes[0]`, whose checksums have been checked (so its length
/// field is in range and the file holds the whole frame).
fn sound_frame_len(version: u16, bytes: &[u8]) -> Option<usize> {
    let (len_at, overhead) = frame_layout(version);
    if bytes.len() < overhead {
        return None;
    }
    frame_len(u32_at(bytes, len_at), overhead, bytes.len()).ok()
}

/// The offset of the next whole, sound frame at or after `from`, if any: one whose
/// checksums hold, whether or not this build decodes its record (a newer build's, with a
/// longer observation, is committed data too, and the scan must stop at it rather than
/// swallow it into the damage before it).
fn resync(version: u16, bytes: &[u8], from: usize) -> Option<usize> {
    let mut p = from;
    while p < bytes.len() {
        if version != SEGMENT_VERSION_V1 {
            // Only a magic word can start a version-2 frame.
            let skip = bytes[p..].windows(4).position(|w| w == FRAME_MAGIC)?;
            p += skip;
        }
        if matches!(
            frame_at(version, &bytes[p..]),
            Ok(_) | Err(IssueKind::Decode(_))
        ) {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// A damaged byte range of a segment: nothing in it is a valid record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Where it starts.
    pub offset: u64,
    /// Its length in bytes.
    pub length: u64,
    /// What was found at `offset`.
    pub kind: IssueKind,
}

/// Everything in one segment file: the header (if intact), the valid records, and the
/// damaged ranges between them. Records and damage tile the file after the header (the
/// whole file if the header is damaged), in offset order.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentScan {
    /// The header, or why it is unusable (then the frame format was guessed from the
    /// frames found).
    pub header: Result<Header, IssueKind>,
    /// The frame format the records were read in.
    pub version: u16,
    /// Valid records: the offset of each frame and its length. The records themselves are
    /// not kept (a decoded [`Transition`] holds room for its longest observation, about
    /// 2 kB, where its frame may take 300 B): [`SegmentScan::record`] decodes one from the
    /// scanned bytes again.
    pub records: Vec<(u64, u64)>,
    /// Damaged ranges, in offset order.
    pub damage: Vec<Damage>,
}

impl SegmentScan {
    /// Whether the segment holds a sound frame: a record, or a frame whose checksums hold
    /// but whose record this build cannot decode (a newer build's), which is committed data
    /// too.
    pub fn has_sound_frame(&self) -> bool {
        !self.records.is_empty()
            || self
                .damage
                .iter()
                .any(|d| matches!(d.kind, IssueKind::Decode(_)))
    }

    /// The record of the frame at `offset` of `bytes`, the bytes this scan read (one of
    /// [`SegmentScan::records`]; any other offset is checked as a frame is).
    pub fn record(&self, bytes: &[u8], offset: u64) -> Result<Transition, IssueKind> {
        let at = usize::try_from(offset)
            .ok()
            .and_then(|o| bytes.get(o..))
            .ok_or(IssueKind::Truncated {
                needed: offset,
                available: bytes.len() as u64,
            })?;
        frame_at(self.version, at).map(|(_, t)| t)
    }

    /// Whether the last damaged range runs to the end of the file with nothing sound in it
    /// or after it (not a record, not a frame this build cannot decode): a torn tail, if
    /// this is the segment a writer had open.
    pub fn torn_tail(&self) -> Option<&Damage> {
        let last_record_end = self.records.last().map_or(0, |r| r.0 + r.1);
        self.damage
            .last()
            .filter(|d| d.offset >= last_record_end && !matches!(d.kind, IssueKind::Decode(_)))
    }
}

/// Scans records from `start` in format `version`, resynchronising after damage.
fn scan_frames(version: u16, bytes: &[u8], start: usize) -> SegmentScan {
    let mut scan = SegmentScan {
        header: Err(IssueKind::BadHeader("not read".into())),
        version,
        records: Vec::new(),
        damage: Vec::new(),
    };
    let mut p = start;
    while p < bytes.len() {
        match frame_at(version, &bytes[p..]) {
            Ok((n, _)) => {
                scan.records.push((p as u64, n as u64));
                p += n;
            }
            Err(kind @ IssueKind::Decode(_)) => {
                // A sound frame (its checksums hold): a range of its own, so that damage
                // after it is not taken for it, nor it for damage.
                let n = sound_frame_len(version, &bytes[p..]).unwrap_or(bytes.len() - p);
                scan.damage.push(Damage {
                    offset: p as u64,
                    length: n as u64,
                    kind,
                });
                p += n;
            }
            Err(kind) => {
                let next = resync(version, bytes, p + 1).unwrap_or(bytes.len());
                scan.damage.push(Damage {
                    offset: p as u64,
                    length: (next - p) as u64,
                    kind,
                });
                p = next;
            }
        }
    }
    scan
}

/// Reads a whole segment file's bytes. A damaged header does not stop the scan: version-2
/// frames are found by their magic word (and checked), version-1 frames from byte 28 on.
pub fn scan_segment(bytes: &[u8]) -> SegmentScan {
    let header = match Header::decode(bytes) {
        Ok(h) => {
            let mut scan = scan_frames(h.version, bytes, HEADER_BYTES);
            scan.header = Ok(h);
            return scan;
        }
        Err(kind) => kind,
    };
    let whole = |kind: IssueKind| Damage {
        offset: 0,
        length: bytes.len() as u64,
        kind,
    };
    let mut scan = scan_frames(SEGMENT_VERSION, bytes, 0);
    if !scan.has_sound_frame() && bytes.len() > HEADER_BYTES {
        let mut v1 = scan_frames(SEGMENT_VERSION_V1, bytes, HEADER_BYTES);
        if !v1.records.is_empty() {
            v1.damage.insert(
                0,
                Damage {
                    offset: 0,
                    length: HEADER_BYTES as u64,
                    kind: header.clone(),
                },
            );
            scan = v1;
        }
    }
    if !scan.has_sound_frame() {
        scan.damage = if bytes.is_empty() {
            Vec::new()
        } else {
            vec![whole(header.clone())]
        };
    } else if let Some(first) = scan.damage.first_mut().filter(|d| d.offset == 0) {
        // The damage at the start is the header's.
        first.kind = header.clone();
    }
    scan.header = Err(header);
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Misnamed segments and a folder named like a segment are not read, and are named as
    /// foreign; the log's own quarantine files are not.
    #[test]
    fn entries_named_for_the_log_that_it_does_not_read_are_foreign() {
        let dir = std::env::temp_dir().join(format!("gw-foreign-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(segment_name(9))).unwrap();
        for name in [
            segment_name(1),
            quarantine_name(1, 40),
            "weird.gwlog".into(),
            "seg-7.gwlog".into(),
            "notes.txt".into(),
        ] {
            fs::write(dir.join(name), b"").unwrap();
        }
        let segments: Vec<u64> = list_segments(&dir)
            .unwrap()
            .iter()
            .map(|s| s.index)
            .collect();
        assert_eq!(segments, [1], "the folder is no segment");
        let foreign = foreign_entries(&dir).unwrap();
        let names: Vec<_> = foreign.iter().map(|p| p.file_name().unwrap()).collect();
        assert_eq!(names, [&*segment_name(9), "seg-7.gwlog", "weird.gwlog"]);
        assert_eq!(
            highest_segment_name(&dir).unwrap(),
            Some(9),
            "the folder's name counts"
        );
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn names_round_trip_and_foreign_names_are_ignored() {
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert_eq!(segment_name(7), "seg-00000000000000000007.gwlog");
        for bad in [
            "seg-7.gwlog",
            "seg-0000000000000000000x.gwlog",
            "seg-00000000000000000007.gwlog.corrupt",
            "seg-00000000000000000007.gwlog.quarantine-19823",
            "x",
        ] {
            assert_eq!(parse_segment_name(bad), None, "{bad}");
        }
        assert_eq!(
            parse_quarantine_name(&quarantine_name(7, 19_823)),
            Some((7, 19_823))
        );
        assert_eq!(
            quarantine_name(7, 5),
            "seg-00000000000000000007.gwlog.quarantine-5"
        );
        assert_eq!(parse_quarantine_name("seg-7.gwlog.quarantine-5"), None);
        assert_eq!(parse_quarantine_name(&segment_name(7)), None);
    }

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = Header {
            index: 9,
            epoch_unix_ms: 1_700_000_000_000,
            version: SEGMENT_VERSION,
        };
        let bytes = h.encode();
        assert_eq!(Header::decode(&bytes), Ok(h));
        assert!(matches!(
            Header::decode(&bytes[..20]),
            Err(IssueKind::BadHeader(_))
        ));
        for i in 0..HEADER_BYTES {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(Header::decode(&b).is_err(), "flip at byte {i}");
        }
    }
}
