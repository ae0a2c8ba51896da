//! The transition log under damage: nothing the damage did not touch is ever lost.
//!
//! * The field report's scenario: 720 records, one bit flipped at byte 19,823 of the
//!   segment. Reading loses only the record the bit lies in; a writer reopening the log and
//!   appending loses nothing more; `greenwave-controller log` names the damaged range.
//! * The corruption battery: 1,050 seeded damages (single bit flips, bursts, zeroed 4 KiB
//!   pages, truncation inside a record, garbage appended, a segment duplicated, a segment
//!   missing) of a 4-segment log. After each, every record whose bytes the damage did not
//!   touch is read back, no record is read twice or wrong, and a writer opened on the
//!   damaged log and appending loses none of them.
//! * The old (version 1) format stays readable, resynchronises after damage, and a writer
//!   never truncates valid version-1 records behind damage.

// The runtime's test fixtures (one copy: this package tests the same controller).
#[path = "../../runtime/tests/common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use common::{log_record, tmp};
use greenwave_core::Transition;
use greenwave_runtime::log::{
    encode_frame_v1, encode_header, read_all, scan_segment, LogConfig, LogReader, LogWriter,
    SyncPolicy, TailRepair, SEGMENT_VERSION_V1,
};
use rand::{Rng, SeedableRng};

/// The field report's records: 31-float observations (the single-4way controller's).
fn field_record(seq: u64) -> Transition {
    let mut t = log_record(seq);
    t.obs = (0..31).map(|j| ((seq + j) % 13) as f32 / 13.0).collect();
    t.next_obs = (0..31).map(|j| ((seq * 3 + j) % 7) as f32 / 7.0).collect();
    t
}

fn config(dir: &Path, segment_bytes: u64) -> LogConfig {
    let mut c = LogConfig::new(dir);
    c.sync = SyncPolicy::EveryRecords(NonZeroU32::new(1000).unwrap());
    c.max_segment_bytes = segment_bytes;
    c
}

fn append(cfg: LogConfig, seqs: std::ops::Range<u64>, make: fn(u64) -> Transition) {
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    for s in seqs {
        w.append(&make(s)).unwrap();
    }
    w.close().unwrap();
}

/// Sequence numbers read back; panics if a record is not the one its number says, or is
/// read twice.
fn read_seqs(dir: &Path, make: fn(u64) -> Transition) -> BTreeSet<u64> {
    let (records, _) = read_all(dir).unwrap();
    let mut seen = BTreeSet::new();
    for r in records {
        let seq = r.transition.timestamp_ms;
        assert_eq!(r.transition, make(seq), "record {seq} read back wrong");
        assert!(seen.insert(seq), "record {seq} read twice");
    }
    seen
}

#[test]
fn one_flipped_bit_loses_one_record_before_and_after_a_writer_restart() {
    let dir = tmp("bitflip");
    append(config(&dir, 16 << 20), 0..720, field_record);
    let seg = LogReader::open(&dir).unwrap().segments()[0].path.clone();
    let mut bytes = std::fs::read(&seg).unwrap();
    let scan = scan_segment(&bytes);
    let at = 19_823u64;
    let hit = scan
        .records
        .iter()
        .find(|r| r.0 <= at && at < r.0 + r.1)
        .map(|r| (r.0, r.1, scan.record(&bytes, r.0).unwrap().timestamp_ms))
        .unwrap();
    bytes[at as usize] ^= 0x08;
    std::fs::write(&seg, &bytes).unwrap();

    let all: BTreeSet<u64> = (0..720).collect();
    let lost = |read: &BTreeSet<u64>| all.difference(read).copied().collect::<Vec<_>>();
    assert_eq!(lost(&read_seqs(&dir, field_record)), vec![hit.2]);
    let (_, issues) = read_all(&dir).unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!((issues[0].offset, issues[0].skipped_bytes), (hit.0, hit.1));
    assert!(!issues[0].to_end);

    // A controller restart: the writer quarantines the damaged range, cuts nothing, and
    // appends a while.
    let (mut w, report) = LogWriter::open(config(&dir, 16 << 20)).unwrap();
    assert_eq!(report.repair, None, "{report:?}");
    assert_eq!(report.damage.len(), 1);
    let q = &report.damage[0];
    assert_eq!((q.offset, q.length), (hit.0, hit.1));
    let range = &bytes[hit.0 as usize..(hit.0 + hit.1) as usize];
    assert_eq!(std::fs::read(&q.quarantine).unwrap(), range);
    for s in 720..1440 {
        w.append(&field_record(s)).unwrap();
    }
    w.close().unwrap();
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "the damaged segment was modified"
    );
    let all: BTreeSet<u64> = (0..1440).collect();
    let read = read_seqs(&dir, field_record);
    assert_eq!(
        all.difference(&read).copied().collect::<Vec<_>>(),
        vec![hit.2]
    );

    // The operator's report names the damaged range.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_greenwave-controller"))
        .args(["log", "--json", "--log-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["records"], 1439);
    let d = &json["damaged"][0];
    assert_eq!(d["segment"], 0);
    assert_eq!(d["offset"], hit.0);
    assert_eq!(d["length"], hit.1);
    assert_eq!(json["quarantined"][0]["offset"], hit.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where a record lies in the pristine log.
#[derive(Clone, Copy, Debug)]
struct Placed {
    seq: u64,
    segment: usize,
    offset: u64,
    len: u64,
}

/// The pristine log: its segment files (name, bytes) and where each record lies.
struct Pristine {
    files: Vec<(String, Vec<u8>)>,
    placed: Vec<Placed>,
}

fn pristine(n: u64, segment_bytes: u64) -> Pristine {
    let dir = tmp("battery-pristine");
    append(config(&dir, segment_bytes), 0..n, log_record);
    let mut files = Vec::new();
    let mut placed = Vec::new();
    for (i, s) in LogReader::open(&dir).unwrap().segments().iter().enumerate() {
        let bytes = std::fs::read(&s.path).unwrap();
        let scan = scan_segment(&bytes);
        for &(offset, len) in &scan.records {
            placed.push(Placed {
                seq: scan.record(&bytes, offset).unwrap().timestamp_ms,
                segment: i,
                offset,
                len,
            });
        }
        let name = s.path.file_name().unwrap().to_str().unwrap().to_string();
        files.push((name, bytes));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(placed.len() as u64, n);
    Pristine { files, placed }
}

/// One damage: what it did, and which records' bytes it touched.
#[derive(Debug)]
enum Damage {
    /// Bytes `range` of segment `segment` changed (flip, burst, zeroed page).
    Overwrite {
        segment: usize,
        range: std::ops::Range<u64>,
    },
    /// Segment cut at `at`.
    Truncate { segment: usize, at: u64 },
    /// Bytes appended to a segment.
    Append,
    /// A copy of a segment under another name.
    Duplicate,
    /// A segment removed.
    Missing { segment: usize },
}

impl Damage {
    fn touches(&self, p: &Placed) -> bool {
        match *self {
            Damage::Overwrite { segment, ref range } => {
                segment == p.segment && p.offset < range.end && range.start < p.offset + p.len
            }
            Damage::Truncate { segment, at } => segment == p.segment && p.offset + p.len > at,
            Damage::Missing { segment } => segment == p.segment,
            Damage::Append | Damage::Duplicate => false,
        }
    }
}

/// Applies damage number `case` (seeded) to the files in `dir`.
fn damage(case: u64, dir: &Path, log: &Pristine) -> Damage {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(0x5eed_0000 + case);
    let segment = rng.random_range(0..log.files.len());
    let (name, orig) = &log.files[segment];
    let path = dir.join(name);
    let mut bytes = orig.clone();
    let len = bytes.len() as u64;
    let kind = match case % 7 {
        0 => {
            let at = rng.random_range(0..len);
            bytes[at as usize] ^= 1 << rng.random_range(0..8);
            Damage::Overwrite {
                segment,
                range: at..at + 1,
            }
        }
        1 => {
            let n = rng.random_range(2..=64u64).min(len);
            let at = rng.random_range(0..=len - n);
            for b in &mut bytes[at as usize..(at + n) as usize] {
                *b = rng.random();
            }
            Damage::Overwrite {
                segment,
                range: at..at + n,
            }
        }
        2 => {
            let page = rng.random_range(0..len.div_ceil(4096));
            let range = page * 4096..((page + 1) * 4096).min(len);
            bytes[range.start as usize..range.end as usize].fill(0);
            Damage::Overwrite { segment, range }
        }
        3 => {
            let in_seg: Vec<&Placed> = log.placed.iter().filter(|p| p.segment == segment).collect();
            let p = in_seg[rng.random_range(0..in_seg.len())];
            let at = p.offset + rng.random_range(1..p.len);
            bytes.truncate(at as usize);
            Damage::Truncate { segment, at }
        }
        4 => {
            let n = rng.random_range(1..=300);
            bytes.extend((0..n).map(|_| rng.random::<u8>()));
            Damage::Append
        }
        5 => {
            let last = log.files.len() as u64;
            let name = format!("seg-{:020}.gwlog", last + rng.random_range(0..3));
            std::fs::write(dir.join(name), orig).unwrap();
            return Damage::Duplicate;
        }
        _ => {
            std::fs::remove_file(&path).unwrap();
            return Damage::Missing { segment };
        }
    };
    std::fs::write(&path, &bytes).unwrap();
    kind
}

fn run_battery(cases: std::ops::Range<u64>) -> (u64, u64) {
    let n = 400;
    let log = pristine(n, 16 << 10);
    assert!(log.files.len() >= 4, "{} segments", log.files.len());
    let dir = tmp("battery");
    let (mut touched_total, mut damaged_files_quarantined) = (0, 0);
    for case in cases {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &log.files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        let d = damage(case, &dir, &log);
        let untouched: BTreeSet<u64> = log
            .placed
            .iter()
            .filter(|p| !d.touches(p))
            .map(|p| p.seq)
            .collect();
        touched_total += n - untouched.len() as u64;
        let read = read_seqs(&dir, log_record);
        let lost: Vec<_> = untouched.difference(&read).collect();
        assert!(lost.is_empty(), "case {case} {d:?}: lost {lost:?}");

        let (mut w, report) = LogWriter::open(config(&dir, 16 << 10)).unwrap();
        if let Some(TailRepair::Cut { quarantine, .. }) = &report.repair {
            assert!(quarantine.exists(), "case {case}: {report:?}");
        }
        damaged_files_quarantined += report.damage.len() as u64;
        for s in n..n + 30 {
            w.append(&log_record(s)).unwrap();
        }
        w.close().unwrap();
        let after = read_seqs(&dir, log_record);
        let appended: BTreeSet<u64> = (n..n + 30).collect();
        let lost: Vec<_> = untouched
            .union(&appended)
            .filter(|s| !after.contains(s))
            .collect();
        assert!(
            lost.is_empty(),
            "case {case} {d:?}: after reopen lost {lost:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    (touched_total, damaged_files_quarantined)
}

#[test]
fn corruption_battery_loses_no_untouched_record() {
    let cases = 1050;
    let (touched, quarantined) = run_battery(0..cases);
    eprintln!(
        "{cases} seeded damages: 0 untouched records lost; {touched} records touched in all; \
         {quarantined} damaged ranges quarantined by writers"
    );
}

/// Writes a version-1 segment (the first format) by hand.
fn write_v1_segment(path: &Path, index: u64, seqs: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    let mut bytes = encode_header(index, 1_700_000_000_000, SEGMENT_VERSION_V1).to_vec();
    let mut frames = Vec::new();
    for s in seqs {
        let f = encode_frame_v1(&log_record(s)).unwrap();
        frames.push((bytes.len() as u64, f.len() as u64));
        bytes.extend_from_slice(&f);
    }
    std::fs::write(path, bytes).unwrap();
    frames
}

#[test]
fn version_1_segments_stay_readable_and_are_never_cut_behind_damage() {
    let dir = tmp("v1");
    let seg: PathBuf = dir.join("seg-00000000000000000000.gwlog");
    let frames = write_v1_segment(&seg, 0, 0..60);
    assert_eq!(read_seqs(&dir, log_record), (0..60).collect());
    let (records, _) = read_all(&dir).unwrap();
    assert_eq!(records[0].epoch_unix_ms, 1_700_000_000_000);

    // A flipped bit in record 20's length field: v1 has no frame magic, but the reader
    // still finds the next valid frame.
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[frames[20].0 as usize + 2] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let expect: BTreeSet<u64> = (0..60).filter(|&s| s != 20).collect();
    assert_eq!(read_seqs(&dir, log_record), expect);

    // A writer restart keeps every valid v1 record and appends in the new format.
    let (mut w, report) = LogWriter::open(config(&dir, 16 << 20)).unwrap();
    assert_eq!(report.repair, None);
    for s in 60..80 {
        w.append(&log_record(s)).unwrap();
    }
    w.close().unwrap();
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    let expect: BTreeSet<u64> = (0..80).filter(|&s| s != 20).collect();
    assert_eq!(read_seqs(&dir, log_record), expect);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_header_loses_no_record_and_keeps_the_epoch_of_its_neighbours() {
    let dir = tmp("header");
    append(config(&dir, 4096), 0..120, log_record);
    let segs = LogReader::open(&dir).unwrap().segments().to_vec();
    assert!(segs.len() >= 3);
    let (before, _) = read_all(&dir).unwrap();
    let mut bytes = std::fs::read(&segs[1].path).unwrap();
    bytes[..28].fill(0xff);
    std::fs::write(&segs[1].path, &bytes).unwrap();
    let (after, issues) = read_all(&dir).unwrap();
    assert_eq!(after, before, "{issues:?}");
    assert_eq!(
        (issues.len(), issues[0].offset, issues[0].skipped_bytes),
        (1, 0, 28)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
