//! The transition log under damage and crashes.
//!
//! * Every possible torn tail (a cut at each byte of the last segment) is reported,
//!   quarantined and cut on reopen, and never read back as a record.
//! * A corrupt record in a sealed segment is reported and only that record is skipped.
//! * Rotation and the disk cap drop the oldest segments first, and count them.
//! * Crash test: a child process appending records is killed with SIGKILL at random
//!   points, ≥ 200 times; after each kill no record reported committed is lost, no
//!   corrupt record is ever read, and the only problems are at the newest segment's end
//!   (a torn record, or a header torn while the segment was being created). A longer run:
//!   `cargo test --release -p greenwave-runtime --test log_crash -- --ignored`.

mod common;

use std::io::{BufRead, BufReader};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{log_record as record, tmp};
use greenwave_runtime::log::{
    encode_header, foreign_entries, read_all, IssueKind, LogConfig, LogError, LogReader, LogWriter,
    OpenReport, SyncPolicy, TailRepair, FRAME_OVERHEAD, HEADER_BYTES, SEGMENT_VERSION,
};
use rand::{Rng, SeedableRng};

fn config(dir: &Path, sync: SyncPolicy) -> LogConfig {
    let mut c = LogConfig::new(dir);
    c.sync = sync;
    c
}

fn write(cfg: LogConfig, seqs: std::ops::Range<u64>) {
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    for s in seqs {
        w.append(&record(s)).unwrap();
    }
    w.close().unwrap();
}

/// Reads the log and checks every record is the expected one, in order from 0.
fn read_checked(dir: &Path) -> (u64, Vec<greenwave_runtime::log::SegmentIssue>) {
    let (records, issues) = read_all(dir).unwrap();
    for (i, r) in records.iter().enumerate() {
        assert_eq!(
            r.transition,
            record(i as u64),
            "record {i} read back differs (segment {} offset {})",
            r.segment,
            r.offset
        );
    }
    (records.len() as u64, issues)
}

/// Opens the log in `dir` for writing (its start-up check) and closes it again.
fn reopen(dir: &Path) -> OpenReport {
    let (w, report) = LogWriter::open(config(dir, SyncPolicy::EveryRecord)).unwrap();
    w.close().unwrap();
    report
}

fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    LogReader::open(dir)
        .unwrap()
        .segments()
        .iter()
        .map(|s| s.path.clone())
        .collect()
}

#[test]
fn every_torn_tail_is_reported_then_cut_and_never_read() {
    let base = tmp("torn");
    let src = base.join("src");
    write(config(&src, SyncPolicy::EveryRecord), 0..6);
    let seg = segment_paths(&src).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    // Record boundaries, from the reader.
    let (records, _) = read_all(&src).unwrap();
    let mut bounds: Vec<u64> = records.iter().map(|r| r.offset).collect();
    bounds.push(bytes.len() as u64);
    let work = base.join("work");
    for cut in HEADER_BYTES as u64..=bytes.len() as u64 {
        let complete = bounds.windows(2).filter(|w| w[1] <= cut).count() as u64;
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        let name = seg.file_name().unwrap();
        std::fs::write(work.join(name), &bytes[..cut as usize]).unwrap();
        let (n, issues) = read_checked(&work);
        assert_eq!(n, complete, "cut at {cut}");
        let at_boundary = bounds.contains(&cut);
        if at_boundary {
            assert!(issues.is_empty(), "cut at boundary {cut}: {issues:?}");
        } else {
            assert_eq!(issues.len(), 1, "cut at {cut}");
            assert!(
                issues[0].newest && matches!(issues[0].kind, IssueKind::Truncated { .. }),
                "{:?}",
                issues[0]
            );
        }
        // Reopening for writing cuts the tail (checked on a sample: each open syncs).
        if at_boundary || cut % 17 == 0 || bounds.contains(&(cut - 1)) {
            let (w, report) = LogWriter::open(config(&work, SyncPolicy::EveryRecord)).unwrap();
            drop(w);
            match report.repair {
                None => assert!(at_boundary, "cut at {cut} not repaired"),
                Some(TailRepair::Cut {
                    offset, quarantine, ..
                }) => {
                    assert!(!at_boundary);
                    assert_eq!(offset, bounds[complete as usize]);
                    // The cut bytes were kept aside first.
                    let kept = std::fs::read(quarantine).unwrap();
                    assert_eq!(kept, bytes[offset as usize..cut as usize]);
                }
                // A segment left without a single record is removed (its bytes quarantined).
                Some(TailRepair::Removed { quarantine, .. }) => {
                    assert_eq!(complete, 0, "cut at {cut}");
                    assert!(quarantine.is_some());
                }
            }
            let (n2, issues) = read_checked(&work);
            assert_eq!(n2, complete);
            assert!(issues.is_empty(), "after repair: {issues:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn corrupt_record_in_a_sealed_segment_skips_only_that_record() {
    let dir = tmp("sealed");
    let mut cfg = config(&dir, SyncPolicy::EveryRecords(NonZeroU32::new(8).unwrap()));
    cfg.max_segment_bytes = 4096;
    write(cfg.clone(), 0..150);
    let reader = LogReader::open(&dir).unwrap();
    assert!(reader.segments().len() >= 4, "{:?}", reader.segments());
    let victim = reader.segments()[1].clone();
    let (records, _) = read_all(&dir).unwrap();
    let in_victim: Vec<_> = records
        .iter()
        .filter(|r| r.segment == victim.index)
        .collect();
    let target = in_victim[in_victim.len() / 2];
    let next = in_victim[in_victim.len() / 2 + 1];
    let mut bytes = std::fs::read(&victim.path).unwrap();
    bytes[target.offset as usize + 20] ^= 0x40; // in the payload
    std::fs::write(&victim.path, &bytes).unwrap();

    let (after, issues) = read_all(&dir).unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    let issue = &issues[0];
    assert_eq!(
        (
            issue.segment,
            issue.offset,
            issue.skipped_bytes,
            issue.newest
        ),
        (
            victim.index,
            target.offset,
            next.offset - target.offset,
            false
        )
    );
    assert!(matches!(issue.kind, IssueKind::Crc { .. }), "{issue}");
    assert!(issue.to_string().contains("CRC"), "{issue}");
    assert_eq!(after.len(), records.len() - 1);
    for r in &after {
        assert_eq!(r.transition, record(r.transition.timestamp_ms));
    }
    // A writer reopening the log leaves sealed segments alone.
    let (w, report) = LogWriter::open(cfg).unwrap();
    drop(w);
    assert_eq!(report.repair, None);
    assert_eq!(read_all(&dir).unwrap().1.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rotation_and_disk_cap_drop_the_oldest_segments_first() {
    let dir = tmp("cap");
    let mut cfg = config(&dir, SyncPolicy::EveryRecords(NonZeroU32::new(16).unwrap()));
    cfg.max_segment_bytes = 4096;
    cfg.max_total_bytes = 3 * 4096;
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    for s in 0..300 {
        w.append(&record(s)).unwrap();
    }
    let stats = w.stats();
    w.close().unwrap();
    assert!(
        stats.segments_dropped > 0 && stats.bytes_dropped > 0,
        "{stats:?}"
    );
    let reader = LogReader::open(&dir).unwrap();
    let total: u64 = reader.segments().iter().map(|s| s.bytes).sum();
    assert!(total <= 3 * 4096, "{total}");
    assert_eq!(
        reader.segments().len() as u64,
        stats.segments_started - stats.segments_dropped
    );
    let (records, issues) = read_all(&dir).unwrap();
    assert!(issues.is_empty());
    // What is left is the newest stretch, contiguous up to the last record written.
    let first = records[0].transition.timestamp_ms;
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.transition, record(first + i as u64));
    }
    assert_eq!(records.last().unwrap().transition.timestamp_ms, 299);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An oldest segment that cannot be deleted (here a folder took its name) keeps the log
/// from writing, not from keeping its cap: appends fail, and the folder never grows past
/// the cap. One deleted by hand counts as gone, and appending resumes.
#[test]
fn the_cap_holds_while_the_oldest_segment_cannot_be_deleted() {
    let dir = tmp("cap-stuck");
    let mut cfg = config(&dir, SyncPolicy::EveryRecord);
    cfg.max_segment_bytes = 4096;
    cfg.max_total_bytes = 3 * 4096;
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    let mut seq = 0;
    while segment_paths_on_disk(&dir).len() < 3 {
        w.append(&record(seq)).unwrap();
        seq += 1;
    }
    let oldest = segment_paths_on_disk(&dir)[0].clone();
    std::fs::remove_file(&oldest).unwrap();
    std::fs::create_dir_all(oldest.join("in-the-way")).unwrap();
    let on_disk = |dir: &Path| -> u64 {
        segment_paths_on_disk(dir)
            .iter()
            .filter(|p| p.is_file())
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum()
    };
    let mut refused = 0;
    for _ in 0..100 {
        match w.append(&record(seq)) {
            Ok(_) => seq += 1,
            Err(e) => {
                assert!(e.to_string().contains("removing"), "{e}");
                refused += 1;
            }
        }
        assert!(on_disk(&dir) <= 3 * 4096, "{} bytes", on_disk(&dir));
    }
    assert!(
        refused > 50,
        "the stuck segment stopped only {refused} appends"
    );
    std::fs::remove_dir_all(&oldest).unwrap();
    let commit = w.append(&record(seq)).unwrap();
    assert_eq!(commit.committed, seq + 1);
    w.close().unwrap();
    let (records, issues) = read_all(&dir).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(records.last().unwrap().transition, record(seq));
    assert!(on_disk(&dir) <= 3 * 4096);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment's quarantine files count against the disk cap with it and are deleted with
/// it: damage found once does not grow the folder past its cap for ever.
#[test]
fn quarantine_files_go_with_their_segment_under_the_cap() {
    let dir = tmp("cap-quarantine");
    let mut cfg = config(&dir, SyncPolicy::EveryRecords(NonZeroU32::new(16).unwrap()));
    cfg.max_segment_bytes = 4096;
    cfg.max_total_bytes = 3 * 4096;
    write(cfg.clone(), 0..5);
    let first = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&first).unwrap();
    bytes.extend_from_slice(&[0xAB; 1500]);
    std::fs::write(&first, &bytes).unwrap();
    let quarantined = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(".quarantine-"))
            .collect()
    };
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    assert_eq!(quarantined(&dir).len(), 1, "the torn tail is kept aside");
    for s in 5..300 {
        w.append(&record(s)).unwrap();
    }
    let stats = w.stats();
    w.close().unwrap();
    assert!(stats.segments_dropped > 0, "{stats:?}");
    assert!(!first.exists());
    assert!(quarantined(&dir).is_empty(), "left behind its segment");
    let total: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total <= 3 * 4096, "{total}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment recovery removes (nothing valid in it) leaves its quarantine file with no
/// segment: it still counts against the cap and goes with the first segment dropped.
#[test]
fn an_orphaned_quarantine_file_goes_with_the_first_drop() {
    let dir = tmp("cap-orphan");
    let mut cfg = config(&dir, SyncPolicy::EveryRecords(NonZeroU32::new(16).unwrap()));
    cfg.max_segment_bytes = 4096;
    cfg.max_total_bytes = 3 * 4096;
    write(cfg.clone(), 0..5);
    write(cfg.clone(), 5..10);
    let newest = segment_paths(&dir).pop().unwrap();
    std::fs::write(&newest, [0xCD; 2000]).unwrap();
    let (mut w, report) = LogWriter::open(cfg).unwrap();
    assert!(
        matches!(report.repair, Some(TailRepair::Removed { .. })),
        "{report:?}"
    );
    let quarantine = dir.read_dir().unwrap().map(|e| e.unwrap().path());
    let orphans: Vec<PathBuf> = quarantine
        .filter(|p| p.to_string_lossy().contains(".quarantine-"))
        .collect();
    assert_eq!(orphans.len(), 1);
    for s in 10..300 {
        w.append(&record(s)).unwrap();
    }
    let stats = w.stats();
    w.close().unwrap();
    assert!(stats.segments_dropped > 0, "{stats:?}");
    assert!(!orphans[0].exists(), "the orphan outlived the first drop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash while a damaged range was being copied to quarantine leaves the copy's
/// temporary file: the next open removes it, copies the range again (the segment still
/// holds it: nothing is cut before every copy is in place) and only then cuts.
#[test]
fn an_unfinished_quarantine_copy_is_removed_and_made_again() {
    let dir = tmp("quarantine-tmp");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let newest = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let end = bytes.len();
    bytes.extend_from_slice(&[0xAB; 100]);
    std::fs::write(&newest, &bytes).unwrap();
    let name = newest.file_name().unwrap().to_string_lossy().into_owned();
    let unfinished = dir.join(format!("{name}.quarantine-{end}.tmp"));
    std::fs::write(&unfinished, [0xAB; 40]).unwrap();
    assert_eq!(foreign_entries(&dir).unwrap(), vec![unfinished.clone()]);
    let report = reopen(&dir);
    assert!(!unfinished.exists(), "the unfinished copy is left");
    assert!(
        matches!(report.repair, Some(TailRepair::Cut { .. })),
        "{report:?}"
    );
    let copy = dir.join(format!("{name}.quarantine-{end}"));
    assert_eq!(std::fs::read(copy).unwrap(), vec![0xAB; 100]);
    assert_eq!(foreign_entries(&dir).unwrap(), Vec::<PathBuf>::new());
    assert_eq!(read_checked(&dir).0, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A folder named like a later segment does not stop a reopened log: the writer starts
/// above its name, rotates on, and every record written before and after reads back.
#[test]
fn a_folder_named_like_a_later_segment_takes_no_segment_name() {
    let dir = tmp("folder-ahead");
    let mut cfg = config(&dir, SyncPolicy::EveryRecords(NonZeroU32::new(1).unwrap()));
    cfg.max_segment_bytes = 4096;
    write(cfg.clone(), 0..40);
    let before = segment_paths(&dir).len();
    let ahead = before as u64 + 1;
    std::fs::create_dir_all(dir.join(format!("seg-{ahead:020}.gwlog"))).unwrap();
    write(cfg, 40..200);
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 200, "{issues:?}");
    assert!(issues.is_empty(), "{issues:?}");
    let names: Vec<String> = segment_paths(&dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.len() > before + 1,
        "the new writer rotated: {names:?}"
    );
    assert!(
        names[before..]
            .iter()
            .all(|n| n > &format!("seg-{ahead:020}.gwlog")),
        "{names:?}"
    );
    assert!(dir.join(format!("seg-{ahead:020}.gwlog")).is_dir());
    // A name no segment index can follow is refused, naming the folder; nothing is lost.
    std::fs::create_dir_all(dir.join(format!("seg-{:020}.gwlog", u64::MAX))).unwrap();
    let e = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap_err();
    assert!(e.to_string().contains("no segment can follow"), "{e}");
    assert_eq!(read_checked(&dir).0, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second writer on a folder (a `collect` beside a `run`) is refused while the first
/// lives: its tail recovery would remove or cut the segment the first is appending to
/// (a segment with only its header is removed as empty), losing committed records.
#[test]
fn a_second_writer_is_refused_while_the_first_appends() {
    let base = tmp("two-writers");
    let dir = base.join("new/log");
    let cfg = config(&dir, SyncPolicy::EveryRecord);
    let (mut first, _) = LogWriter::open(cfg.clone()).unwrap();
    for (before, after) in [(0, 0), (0, 3)] {
        for s in before..after {
            first.append(&record(s)).unwrap();
        }
        let e = LogWriter::open(cfg.clone()).unwrap_err();
        assert!(matches!(e, LogError::InUse(_)), "{e}");
        assert!(e.to_string().contains("another writer"), "{e}");
    }
    for s in 3..10 {
        first.append(&record(s)).unwrap();
    }
    first.close().unwrap();
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 10, "every committed record is there");
    assert!(issues.is_empty(), "{issues:?}");
    // Once the first has closed, the folder takes a writer again.
    write(cfg, 10..12);
    assert_eq!(read_checked(&dir).0, 12);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ".writer.lock",
            "seg-00000000000000000000.gwlog",
            "seg-00000000000000000001.gwlog"
        ],
        "two segments and the lock file, nothing else"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// The lock on the folder's `.writer.lock` file refuses a second writer on its own: on NFS
/// it is the only one of the two that another host sees (a folder's `flock` there is local
/// to each host), as here, where only the file is locked by someone else.
#[test]
fn the_lock_file_alone_refuses_a_second_writer() {
    let dir = tmp("lock-file-alone");
    write(config(&dir, SyncPolicy::EveryRecord), 0..3);
    let other = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(".writer.lock"))
        .unwrap();
    other.lock().unwrap();
    let e = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap_err();
    assert!(matches!(e, LogError::InUse(_)), "{e}");
    drop(other);
    write(config(&dir, SyncPolicy::EveryRecord), 3..5);
    assert_eq!(read_checked(&dir), (5, vec![]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A lock held for a moment by something that is not a writer (a child process that a
/// thread of this process is starting holds a copy of the folder's handle, and so of its
/// lock, between its fork and its exec; CI once refused a writer that way) is waited for,
/// not taken for a second writer.
#[test]
fn a_lock_held_for_a_moment_is_waited_for() {
    let dir = tmp("lock-for-a-moment");
    write(config(&dir, SyncPolicy::EveryRecord), 0..3);
    let other = std::fs::File::open(&dir).unwrap();
    other.lock().unwrap(); // blocking: a child being started may still hold the last writer's
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(other);
    });
    write(config(&dir, SyncPolicy::EveryRecord), 3..5);
    release.join().unwrap();
    assert_eq!(read_checked(&dir), (5, vec![]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment whose intact header names a newer format (software downgraded under a log)
/// is refused by reader and writer alike, and left as it is: its records are not the
/// damage they would look like to this software, so nothing is cut, removed or skipped.
#[test]
fn a_segment_of_a_newer_format_is_refused_and_left_alone() {
    let dir = tmp("newer-format");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let newest = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let index = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let epoch = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let future = SEGMENT_VERSION + 1;
    bytes[..HEADER_BYTES].copy_from_slice(&encode_header(index, epoch, future));
    std::fs::write(&newest, &bytes).unwrap();
    let e = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap_err();
    assert!(
        matches!(&e, LogError::NewerFormat { version, .. } if *version == future),
        "{e}"
    );
    assert!(
        e.to_string().contains("newer than this software reads"),
        "{e}"
    );
    let e = LogReader::open(&dir).unwrap_err();
    assert!(matches!(e, LogError::NewerFormat { .. }), "{e}");
    assert_eq!(std::fs::read(&newest).unwrap(), bytes, "left as it was");
    assert_eq!(
        segment_paths_on_disk(&dir).len(),
        1,
        "no segment added or removed"
    );
    // An intact header of a format no software wrote (version 0) is damage, not newer.
    bytes[..HEADER_BYTES].copy_from_slice(&encode_header(index, epoch, 0));
    std::fs::write(&newest, &bytes).unwrap();
    assert!(LogReader::open(&dir).is_ok());
    // A header whose CRC fails is damage, as before: read around, not refused.
    bytes[4] ^= 0x01;
    std::fs::write(&newest, &bytes).unwrap();
    assert!(LogReader::open(&dir).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A record whose checksums hold but that this build cannot decode (a newer build's, with
/// a longer observation) is committed data: the writer leaves its segment as it is rather
/// than cut it as a torn tail, and the reader reports it without losing the records before
/// or after it.
#[test]
fn a_sound_record_this_build_cannot_decode_is_never_cut() {
    let dir = tmp("undecodable");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let newest = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let end = bytes.len() as u64;
    bytes.extend_from_slice(&undecodable_frame(&bytes));
    std::fs::write(&newest, &bytes).unwrap();
    let (mut w, report) = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap();
    assert_eq!(report.repair, None, "{report:?}");
    assert_eq!(std::fs::read(&newest).unwrap(), bytes, "left as it was");
    // Kept where it is, so not copied aside either: a downgraded build would otherwise
    // make a quarantine file of every such record at every open, and the copies count
    // against the disk cap, which deletes the oldest segments to make room.
    assert!(report.damage.is_empty(), "{report:?}");
    let copies = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name());
    assert_eq!(
        copies
            .filter(|n| n.to_string_lossy().contains(".quarantine-"))
            .count(),
        0
    );
    for s in 5..8 {
        w.append(&record(s)).unwrap();
    }
    w.close().unwrap();
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 8);
    assert!(
        matches!(&issues[..], [i] if i.offset == end && matches!(i.kind, IssueKind::Decode(_))),
        "{issues:?}"
    );
    assert!(
        !issues[0].to_string().contains("torn tail"),
        "{}",
        issues[0]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment file far larger than any writer makes (here a sparse 1 GiB one named as the
/// newest segment) is not read into memory: the writer refuses to open, naming it, and the
/// reader reports it and reads the other segments.
#[test]
fn a_segment_larger_than_any_writer_makes_is_not_read() {
    let dir = tmp("oversized-segment");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let huge = dir.join("seg-00000000000000000007.gwlog");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let e = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap_err();
    assert!(
        matches!(&e, LogError::SegmentTooLarge { path, bytes, .. } if path == &huge && *bytes == 1 << 30),
        "{e}"
    );
    assert!(
        e.to_string().contains("seg-00000000000000000007.gwlog"),
        "{e}"
    );
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 5);
    assert!(
        matches!(&issues[..], [i] if i.segment == 7 && matches!(i.kind, IssueKind::TooLarge { .. })),
        "{issues:?}"
    );
    assert_eq!(
        std::fs::metadata(&huge).unwrap().len(),
        1 << 30,
        "left alone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A version-2 frame (magic, length, payload CRC, header CRC) around a payload that is no
/// transition, its magic taken from the first frame of `segment`.
fn undecodable_frame(segment: &[u8]) -> Vec<u8> {
    let payload = [0xFFu8; 40];
    let mut frame = segment[HEADER_BYTES..HEADER_BYTES + 4].to_vec();
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    let head = crc32fast::hash(&frame);
    frame.extend_from_slice(&head.to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

/// The same sound record behind a damaged one at the end of the newest segment: the scan
/// stops its damage at the sound record (it does not swallow it into a torn tail), so the
/// segment is left whole and both are reported.
#[test]
fn a_sound_record_behind_a_damaged_one_is_never_cut() {
    let dir = tmp("undecodable-behind-damage");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let newest = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    let end = bytes.len();
    // A flipped bit in the last record's payload: its CRC no longer holds.
    bytes[end - 1] ^= 0x01;
    bytes.extend_from_slice(&undecodable_frame(&bytes));
    std::fs::write(&newest, &bytes).unwrap();
    let (w, report) = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap();
    assert_eq!(report.repair, None, "{report:?}");
    assert_eq!(std::fs::read(&newest).unwrap(), bytes, "left as it was");
    w.close().unwrap();
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 4, "records 0-3; record 4 is damaged");
    assert!(
        matches!(
            &issues[..],
            [a, b] if matches!(a.kind, IssueKind::Crc { .. })
                && b.offset == end as u64
                && matches!(b.kind, IssueKind::Decode(_))
        ),
        "{issues:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A torn tail behind such a sound record is still cut, behind it and not through it.
#[test]
fn a_torn_tail_behind_a_sound_record_is_cut_behind_it() {
    let dir = tmp("undecodable-then-torn");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let newest = segment_paths(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes.extend_from_slice(&undecodable_frame(&bytes));
    let sound_end = bytes.len();
    bytes.extend_from_slice(&[0xAB; 30]);
    std::fs::write(&newest, &bytes).unwrap();
    let report = reopen(&dir);
    assert!(
        matches!(report.repair, Some(TailRepair::Cut { offset, .. }) if offset == sound_end as u64),
        "{report:?}"
    );
    assert_eq!(std::fs::read(&newest).unwrap(), bytes[..sound_end]);
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 5);
    assert!(
        matches!(&issues[..], [i] if matches!(i.kind, IssueKind::Decode(_))),
        "{issues:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A newest segment whose header is damaged and whose only sound frame this build cannot
/// decode is kept, not removed as if it held nothing.
#[test]
fn a_damaged_header_before_a_sound_record_is_not_removed() {
    let dir = tmp("undecodable-bad-header");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    let first = std::fs::read(segment_paths(&dir).pop().unwrap()).unwrap();
    let newest = dir.join("seg-00000000000000000001.gwlog");
    let mut bytes = vec![0x5Au8; HEADER_BYTES];
    bytes.extend_from_slice(&undecodable_frame(&first));
    std::fs::write(&newest, &bytes).unwrap();
    let report = reopen(&dir);
    assert_eq!(report.repair, None, "{report:?}");
    assert_eq!(std::fs::read(&newest).unwrap(), bytes, "left as it was");
    let (n, issues) = read_checked(&dir);
    assert_eq!(n, 5);
    assert!(
        matches!(&issues[..], [h, d] if h.offset == 0 && d.offset == HEADER_BYTES as u64
            && matches!(d.kind, IssueKind::Decode(_))),
        "{issues:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn segment_paths_on_disk(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".gwlog"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_and_corrupt_headers_are_handled_without_losing_records() {
    let dir = tmp("headers");
    write(config(&dir, SyncPolicy::EveryRecord), 0..5);
    // A segment whose creation was torn after 10 header bytes.
    let torn = dir.join("seg-00000000000000000007.gwlog");
    std::fs::write(&torn, [0x47u8; 10]).unwrap();
    let (w, report) = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap();
    drop(w);
    assert!(
        matches!(report.repair, Some(TailRepair::Removed { .. })),
        "{report:?}"
    );
    assert!(!torn.exists());
    assert_eq!(read_checked(&dir), (5, vec![]));
    // A newest segment with nothing valid in it is quarantined whole, then removed.
    let bad = dir.join("seg-00000000000000000020.gwlog");
    std::fs::write(&bad, vec![0x11u8; 200]).unwrap();
    let (w, report) = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap();
    drop(w);
    match report.repair {
        Some(TailRepair::Removed {
            quarantine: Some(q),
            ..
        }) => assert_eq!(std::fs::read(q).unwrap(), vec![0x11u8; 200]),
        other => panic!("{other:?}"),
    }
    assert!(!bad.exists());
    assert_eq!(read_checked(&dir), (5, vec![]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn commit_counts_follow_the_sync_policy() {
    assert_eq!("record".parse::<SyncPolicy>(), Ok(SyncPolicy::EveryRecord));
    assert_eq!(
        "records:4".parse::<SyncPolicy>(),
        Ok(SyncPolicy::EveryRecords(NonZeroU32::new(4).unwrap()))
    );
    assert_eq!(
        "ms:250".parse::<SyncPolicy>(),
        Ok(SyncPolicy::EveryMillis(NonZeroU32::new(250).unwrap()))
    );
    assert!("records:0".parse::<SyncPolicy>().is_err());
    assert!("sometimes".parse::<SyncPolicy>().is_err());

    let dir = tmp("policy");
    let (mut w, _) = LogWriter::open(config(
        &dir,
        SyncPolicy::EveryRecords(NonZeroU32::new(4).unwrap()),
    ))
    .unwrap();
    for s in 0..3 {
        assert_eq!(w.append(&record(s)).unwrap().committed, 0);
    }
    let c = w.append(&record(3)).unwrap();
    assert_eq!((c.appended, c.committed), (4, 4));
    w.append(&record(4)).unwrap();
    assert_eq!(w.commit().unwrap().committed, 5);
    drop(w);
    let (mut w, _) = LogWriter::open(config(
        &dir,
        SyncPolicy::EveryMillis(NonZeroU32::new(20).unwrap()),
    ))
    .unwrap();
    assert_eq!(w.append(&record(5)).unwrap().committed, 0);
    std::thread::sleep(Duration::from_millis(25));
    assert_eq!(w.commit_if_due().unwrap().committed, 1);
    assert_eq!(w.close().unwrap().committed, 1);
    assert_eq!(read_checked(&dir), (6, vec![]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sets the soft limit on the size of files this process writes (`RLIMIT_FSIZE`); a write
/// past it fails with EFBIG (SIGXFSZ is ignored first, or it would end the process).
#[cfg(target_os = "linux")]
fn limit_file_size(bytes: u64) {
    // SAFETY: plain libc calls on a valid `rlimit`; nothing else in this child process
    // depends on SIGXFSZ's disposition.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
        lim.rlim_cur = bytes.min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
}

/// The child side of `a_failed_rotation_leaves_no_half_made_segment` (it changes a process
/// limit, so it runs in a process of its own): fills a segment up to its last record, lets
/// the next segment's header write fail part-way, then appends again with the limit lifted.
/// Without `GW_ROTATION_DIR` (a normal test run) it does nothing.
#[cfg(target_os = "linux")]
#[test]
fn rotation_child() {
    let Some(dir) = std::env::var_os("GW_ROTATION_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let mut cfg = config(dir, SyncPolicy::EveryRecord);
    cfg.max_segment_bytes = 4096;
    cfg.rotation_retry = Duration::from_millis(300);
    let max = cfg.max_segment_bytes;
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    let first = w.segment_path().to_owned();
    let size = || std::fs::metadata(&first).unwrap().len();
    // Each record's frame: its postcard bytes and the frame overhead (records grow with
    // their sequence number, so each is measured).
    let frame = |i: u64| (postcard::to_stdvec(&record(i)).unwrap().len() + FRAME_OVERHEAD) as u64;
    let mut next = 0;
    while size() + frame(next) <= max {
        w.append(&record(next)).unwrap();
        assert_eq!(w.segment_path(), first, "rotated before the limit was set");
        next += 1;
        assert!(next < 1000, "the segment never filled");
    }
    assert_eq!(
        size(),
        HEADER_BYTES as u64 + (0..next).map(frame).sum::<u64>()
    );
    // The next record rotates; the new segment's 28-byte header gets 8 bytes written.
    limit_file_size(8);
    let err = w.append(&record(next)).unwrap_err();
    let failed_at = std::time::Instant::now();
    assert!(
        err.to_string().contains("writing the header of"),
        "unexpected error: {err}"
    );
    assert_eq!(
        w.segment_path(),
        first,
        "the writer must stay on its sealed segment"
    );
    assert_eq!(
        segment_paths_on_disk(dir),
        vec![first.clone()],
        "a half-made segment was left"
    );
    limit_file_size(u64::MAX);
    // Until `rotation_retry` has passed, the append fails at once; then the rotation is
    // tried again, under the same name, and succeeds.
    let retried_already = match w.append(&record(next)) {
        Err(LogError::RotationBackoff { retry_ms: 300, .. }) => false,
        // A machine slow enough to take 300 ms between the two appends may retry already.
        Ok(_) if failed_at.elapsed() >= Duration::from_millis(300) => true,
        other => panic!("expected RotationBackoff, got {other:?}"),
    };
    if !retried_already {
        std::thread::sleep(Duration::from_millis(310));
        w.append(&record(next)).unwrap();
    }
    assert_ne!(w.segment_path(), first);
    w.append(&record(next + 1)).unwrap();
    assert_eq!(w.close().unwrap().committed, next + 2);
    assert_eq!(read_checked(dir), (next + 2, vec![]));
    println!("ROTATION CHILD DONE");
}

#[cfg(target_os = "linux")]
#[test]
fn a_failed_rotation_leaves_no_half_made_segment() {
    let dir = tmp("rotation-fails");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rotation_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GW_ROTATION_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("ROTATION CHILD DONE"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // And a writer opened afterwards finds nothing to repair.
    let report = reopen(&dir);
    assert!(
        report.repair.is_none() && report.damage.is_empty(),
        "{report:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child side of the crash test: appends records from `GW_CRASH_START` on and prints
/// `COMMITTED n` (records with sequence < n are durable) after each append that committed.
/// Without `GW_CRASH_DIR` (a normal test run) it does nothing.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os("GW_CRASH_DIR") else {
        return;
    };
    let start: u64 = std::env::var("GW_CRASH_START").unwrap().parse().unwrap();
    let sync: SyncPolicy = std::env::var("GW_CRASH_SYNC").unwrap().parse().unwrap();
    let mut cfg = config(Path::new(&dir), sync);
    cfg.max_segment_bytes = 8192;
    let (mut w, _) = LogWriter::open(cfg).unwrap();
    println!("OPENED");
    let mut last = 0;
    for i in 0..100_000u64 {
        let c = w.append(&record(start + i)).unwrap();
        if c.committed != last {
            last = c.committed;
            println!("COMMITTED {}", start + c.committed);
        }
    }
}

fn crash_rounds(rounds: usize, seed: u64) {
    let dir = tmp(&format!("crash-{seed}"));
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let policies = ["record", "records:3", "ms:2"];
    let mut committed_ever = 0u64;
    let mut total = 0u64;
    let mut torn_seen = 0;
    for round in 0..rounds {
        let sync = policies[round % policies.len()];
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("GW_CRASH_DIR", &dir)
            .env("GW_CRASH_START", total.to_string())
            .env("GW_CRASH_SYNC", sync)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the child has opened the log (or a little less, sometimes, to kill it
        // during recovery), then a random time more.
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        let early = rng.random_bool(0.1);
        if !early {
            let mut line = String::new();
            while out.read_line(&mut line).unwrap() > 0 {
                let opened = line.contains("OPENED");
                lines.push(std::mem::take(&mut line));
                if opened {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(0..15_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut line = String::new();
        while out.read_line(&mut line).unwrap_or(0) > 0 {
            lines.push(std::mem::take(&mut line));
        }
        for l in &lines {
            if let Some(n) = l.strip_prefix("COMMITTED ") {
                committed_ever = committed_ever.max(n.trim().parse().unwrap());
            }
        }
        // As the crash left it: every record intact and in order, nothing committed
        // missing, and problems only at the newest segment's tail.
        let (n, issues) = read_checked(&dir);
        assert!(
            n >= committed_ever,
            "round {round} ({sync}): {n} records, {committed_ever} were committed"
        );
        for i in &issues {
            // A torn record, or a segment killed while its header was being written.
            let torn_header =
                matches!(i.kind, IssueKind::BadHeader(_)) && i.skipped_bytes < HEADER_BYTES as u64;
            assert!(
                i.newest
                    && i.to_end
                    && (matches!(i.kind, IssueKind::Truncated { .. }) || torn_header),
                "round {round}: {i}"
            );
            torn_seen += 1;
        }
        total = n;
    }
    // A last reopen cuts whatever tail the last crash left.
    let (w, _) = LogWriter::open(config(&dir, SyncPolicy::EveryRecord)).unwrap();
    drop(w);
    let (n, issues) = read_checked(&dir);
    assert!(issues.is_empty(), "{issues:?}");
    assert!(n >= committed_ever);
    assert!(
        committed_ever > 0,
        "no record was ever committed: the child never got going"
    );
    eprintln!("{rounds} kills: {n} records intact, {committed_ever} committed, {torn_seen} torn tails seen");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_at_random_points_loses_no_committed_record() {
    crash_rounds(200, 0xC0FFEE);
}

#[test]
#[ignore = "long crash soak (2000 kills): run with --ignored"]
fn sigkill_soak() {
    crash_rounds(2000, 0xBADC0DE);
}
