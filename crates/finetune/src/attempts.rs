//! Attempts against the same data: every candidate judged by the gate is counted under a
//! key naming the running version and the held-back records it was judged on (the first
//! and last), in a small JSON file. Retrying with other seeds until one candidate passes
//! would multiply the gate's error rate, so a candidate whose held-back records overlap
//! those of [`super::FinetuneConfig::max_attempts`] earlier candidates is refused without
//! judging; one judged on held-back records all newer than theirs is a fresh test. (Keying
//! on the whole log let a log that a running controller grew by a few records count as new
//! data.) Earlier candidates of any version count: a version accepted on some records and
//! its own candidate judged on the same records are two looks at one sample, so counting per
//! version let a chain of fine-tunes (v1 → v2 → v3 …) test the same records without end.
//!
//! The file is part of the gate's guarantee, so it fails closed: one that cannot be read,
//! does not parse, or whose CRC-32 does not match its counts (a flipped bit can turn a 2
//! into a 0) refuses the gate, naming the file, as does one that cannot be written. Files
//! written before the checksum (a bare map of counts) are still read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{FinetuneConfig, LogPosition};

/// The attempts file.
pub(super) struct Ledger {
    path: PathBuf,
}

/// The file as written: the counts, and a CRC-32 of their JSON.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LedgerFile {
    attempts: BTreeMap<String, u32>,
    crc32: u32,
}

/// CRC-32 of the counts' JSON (a `BTreeMap` writes its keys in order).
fn checksum(counts: &BTreeMap<String, u32>) -> u32 {
    crc32fast::hash(&serde_json::to_vec(counts).unwrap_or_default())
}

/// Why the attempts file cannot be trusted.
#[derive(Debug, thiserror::Error)]
#[error("attempts file {path}: {problem}")]
pub(super) struct LedgerError {
    path: PathBuf,
    problem: String,
}

/// Whether a candidate may be judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attempt {
    /// Counted: this is attempt `number` (from 1).
    Counted { number: u32 },
    /// Refused: `tried` candidates were already judged, the limit or more.
    Exhausted { tried: u32 },
}

/// The key of an attempt: the running version, the signal whose records alone it was
/// judged on (`--signal`; none: every signal's), and the first and last held-back records
/// (segment:offset:unix_ms each).
pub(super) fn key(
    held: Option<(LogPosition, LogPosition)>,
    version: u32,
    signal: Option<u16>,
) -> String {
    let pos = |p: LogPosition| format!("{}:{}:{}", p.segment, p.offset, p.unix_ms);
    let scope = signal.map_or(String::new(), |s| format!(" signal {s}"));
    match held {
        Some((first, last)) => format!("v{version}{scope} held {}..{}", pos(first), pos(last)),
        None => format!("v{version}{scope} held -"),
    }
}

/// A log position as a key writes it: segment, offset, Unix time (ms).
type Pos = (u64, u64, u64);

/// The first and last held-back records of a key; `None` where a key does not say.
type Span = Option<(Pos, Pos)>;

/// A key's version, signal and span; `None` for a key no writer of this file makes. Keys
/// from before held-back ranges (`v<version> <first>..<last> n=<records>`) name the whole
/// log their candidates were judged on, which holds their held-back records.
fn parse_key(key: &str) -> Option<(u32, Option<u16>, Span)> {
    let (version, rest) = key.strip_prefix('v')?.split_once(' ')?;
    let version = version.parse().ok()?;
    let (signal, rest) = match rest.strip_prefix("signal ") {
        Some(r) => {
            let (s, r) = r.split_once(' ')?;
            (Some(s.parse().ok()?), r)
        }
        None => (None, rest),
    };
    let range = match rest.strip_prefix("held ") {
        Some(r) => r,
        None => rest.split(" n=").next()?,
    };
    let pos = |p: &str| -> Option<Pos> {
        let mut n = p.split(':').map(|x| x.parse().ok());
        Some((n.next()??, n.next()??, n.next()??))
    };
    let span = range
        .split_once("..")
        .and_then(|(a, b)| Some((pos(a)?, pos(b)?)));
    Some((version, signal, span))
}

/// Whether the earlier attempt `earlier` counts against one of `version` judged on the
/// held-back records `held` (in log order) of `signal` (none: every signal's), whatever
/// version it was of, unless the two were judged on two different signals' records alone:
/// either
/// - its first or last judged record is one of `held`, the same record (position and
///   time): held-back records are a log's most recent, so an earlier attempt on a log that
///   only grew shares its last one, or, where the log did not grow, its first; or
/// - its records and `held` overlap both in position (segment, offset) and in time: they
///   may share records in the middle where the earlier attempt's last one was lost since
///   (a power cut before its sync, a damaged frame).
///
/// A log whose segments were moved away and begun again reuses positions, but later in
/// time and never with the same records: new data. A key that does not parse counts (the
/// file is the gate's guarantee: it fails closed); one of an attempt that held back no
/// records (refused before judging) counts against its own version only.
fn counts_against(earlier: &str, version: u32, signal: Option<u16>, held: &[LogPosition]) -> bool {
    let Some((v, earlier_signal, span)) = parse_key(earlier) else {
        return true;
    };
    if let (Some(a), Some(b)) = (earlier_signal, signal) {
        if a != b {
            return false;
        }
    }
    let Some((first, last)) = span else {
        return v == version;
    };
    let (Some(h1), Some(h2)) = (held.first(), held.last()) else {
        return v == version;
    };
    let judged = |(segment, offset, unix_ms): Pos| {
        held.binary_search_by_key(&(segment, offset), |p| (p.segment, p.offset))
            .is_ok_and(|i| held[i].unix_ms == unix_ms)
    };
    let at = |p: Pos| (p.0, p.1);
    let positions_meet =
        at(first) <= (h2.segment, h2.offset) && (h1.segment, h1.offset) <= at(last);
    // Times by their range: sessions of a simulated controller need not follow each other.
    let (t1, t2) = (first.2.min(last.2), first.2.max(last.2));
    let held_t1 = held.iter().map(|p| p.unix_ms).min().unwrap_or(0);
    let held_t2 = held.iter().map(|p| p.unix_ms).max().unwrap_or(0);
    let times_meet = t1 <= held_t2 && held_t1 <= t2;
    judged(last) || judged(first) || (positions_meet && times_meet)
}

impl Ledger {
    /// The ledger `cfg` names, or the default one in `log_dir`.
    pub(super) fn at(cfg: &FinetuneConfig, log_dir: &Path) -> Self {
        Ledger {
            path: cfg
                .attempts_file
                .clone()
                .unwrap_or_else(|| log_dir.join(".finetune-attempts.json")),
        }
    }

    fn error(&self, problem: String) -> LedgerError {
        LedgerError {
            path: self.path.clone(),
            problem,
        }
    }

    /// The counts, and whether the file is in the format from before the checksum (a bare
    /// map of counts). A missing file is no attempts.
    fn read(&self) -> Result<(BTreeMap<String, u32>, bool), LedgerError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => parse(&bytes).map_err(|problem| self.error(problem)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((BTreeMap::new(), false)),
            Err(e) => Err(self.error(format!("reading it: {e}"))),
        }
    }

    /// Takes the ledger's lock (an advisory `flock` on `<file>.lock` beside it, waiting
    /// for it), so that two fine-tunes at once count one after the other instead of both
    /// reading the same count. Released when the returned handle is dropped.
    fn lock(&self) -> Result<std::fs::File, LedgerError> {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .and_then(|f| f.lock().map(|()| f))
            .map_err(|e| self.error(format!("locking {}: {e}", path.display())))?;
        Ok(file)
    }

    /// Writes `counts` with their checksum: a temporary file, synced, renamed into place,
    /// and the folder synced, so that the count survives a power cut.
    fn write(&self, counts: BTreeMap<String, u32>) -> Result<(), LedgerError> {
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            let bytes = encode(counts)?;
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            let dir = match self.path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| self.error(format!("writing it: {e}")))
    }

    /// Attempts counted under `key`.
    #[cfg(test)]
    fn count(&self, key: &str) -> Result<u32, LedgerError> {
        Ok(self.read()?.0.get(key).copied().unwrap_or(0))
    }

    /// Counts one more attempt of the running `version` judged on the held-back records
    /// `held` (log order), unless `max` or more that share them are counted already; the
    /// count is on disk ([`Ledger::write`]) before this returns. A file from before the
    /// checksum is rewritten with one either way. Under the ledger's lock
    /// ([`Ledger::lock`]): two fine-tunes at once are counted one after the other.
    pub(super) fn begin(
        &self,
        version: u32,
        signal: Option<u16>,
        held: &[LogPosition],
        max: u32,
    ) -> Result<Attempt, LedgerError> {
        let key = key(
            held.first().copied().zip(held.last().copied()),
            version,
            signal,
        );
        let _held = self.lock()?;
        let (mut counts, legacy) = self.read()?;
        let tried = counts
            .iter()
            .filter(|(k, _)| counts_against(k, version, signal, held))
            .fold(0u32, |sum, (_, n)| sum.saturating_add(*n));
        if tried >= max {
            if legacy {
                self.write(counts)?;
            }
            return Ok(Attempt::Exhausted { tried });
        }
        *counts.entry(key).or_default() += 1;
        self.write(counts)?;
        Ok(Attempt::Counted { number: tried + 1 })
    }
}

/// An attempts file's bytes, read as the gate reads them: the counts, and whether the
/// file is in the format from before the checksum; or what is wrong with it (the file's
/// path is the caller's to add). Fails closed: JSON that does not parse as either format,
/// or counts whose CRC-32 does not match, are refused.
pub fn parse(bytes: &[u8]) -> Result<(BTreeMap<String, u32>, bool), String> {
    let current = serde_json::from_slice::<LedgerFile>(bytes);
    if let Ok(f) = current {
        return match checksum(&f.attempts) == f.crc32 {
            true => Ok((f.attempts, false)),
            false => Err("its CRC-32 does not match its counts (damaged)".into()),
        };
    }
    // Written before the checksum: the counts alone.
    serde_json::from_slice(bytes)
        .map(|counts| (counts, true))
        .map_err(|legacy| {
            // Name the error of the format the file claims to be in.
            // (A legacy file's keys are `v<version> ...`.)
            let has = |k: &[u8]| bytes.windows(k.len()).any(|w| w == k);
            let claims_current = has(b"\"crc32\"") || has(b"\"attempts\"");
            match (claims_current, current) {
                (true, Err(e)) => format!("damaged ({e})"),
                _ => format!("not an attempts file ({legacy})"),
            }
        })
}

/// The bytes of an attempts file holding `counts`, with their checksum.
pub fn encode(counts: BTreeMap<String, u32>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec_pretty(&LedgerFile {
        crc32: checksum(&counts),
        attempts: counts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(name: &str) -> (Ledger, PathBuf) {
        let dir = std::env::temp_dir().join(format!("gw-attempts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (Ledger::at(&FinetuneConfig::default(), &dir), dir)
    }

    /// The held-back records (the last 30 %) of a log of `n` records, one segment, a
    /// record a second; `shift_ms` later in time for a log that began again.
    fn held_of(n: u64, shift_ms: u64) -> Vec<LogPosition> {
        (n - n * 3 / 10..n)
            .map(|i| LogPosition {
                segment: 0,
                offset: i,
                unix_ms: shift_ms + 1_000 * i,
            })
            .collect()
    }

    /// `l.begin` on every signal's records, unwrapped.
    fn begin(l: &Ledger, version: u32, held: &[LogPosition], max: u32) -> Attempt {
        l.begin(version, None, held, max).unwrap()
    }

    fn key_of(held: &[LogPosition], version: u32) -> String {
        key(Some((held[0], *held.last().unwrap())), version, None)
    }

    /// Attempts on one version count against each other when they share held-back
    /// records, so a log grown by a few records is not new data; held-back records all
    /// newer than those judged are, and so is a log begun again under the same names.
    #[test]
    fn attempts_count_against_shared_held_back_records() {
        let (l, dir) = ledger("overlap");
        let h = held_of(1000, 0);
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Counted { number: 1 });
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Counted { number: 2 });
        // A quarter more log: its held-back records still hold the last ones judged.
        let grown = held_of(1250, 0);
        assert_eq!(begin(&l, 1, &grown, 2), Attempt::Exhausted { tried: 2 });
        assert_eq!(begin(&l, 1, &grown, 3), Attempt::Counted { number: 3 });
        // Held-back records all newer than every one judged: a fresh test.
        let fresh = held_of(1800, 0);
        assert!(fresh[0].offset > grown.last().unwrap().offset);
        assert_eq!(begin(&l, 1, &fresh, 2), Attempt::Counted { number: 1 });
        // The segments moved away and the log begun again: same positions, later times.
        let again = held_of(1000, 1_000_000_000);
        assert_eq!(begin(&l, 1, &again, 2), Attempt::Counted { number: 1 });
        // The last records judged were lost (a power cut before their sync), and the log
        // grew past them: the records in the middle are shared still.
        let (l3, dir3) = ledger("overlap-lost-tail");
        assert_eq!(begin(&l3, 1, &h, 1), Attempt::Counted { number: 1 });
        let after_loss: Vec<LogPosition> = held_of(1200, 0)
            .into_iter()
            .filter(|p| !(990..1000).contains(&p.offset))
            .collect();
        assert_eq!(
            begin(&l3, 1, &after_loss, 1),
            Attempt::Exhausted { tried: 1 }
        );
        std::fs::remove_dir_all(&dir3).unwrap();
        // Another version on the same records (a child of a version accepted on them):
        // the same sample, so the same count; a key from before held-back ranges (its
        // whole log).
        // (h's two attempts and the grown log's one.)
        assert_eq!(begin(&l, 2, &h, 2), Attempt::Exhausted { tried: 3 });
        assert_eq!(begin(&l, 2, &h, 9), Attempt::Counted { number: 4 });
        let (l2, dir2) = ledger("overlap-legacy");
        std::fs::write(&l2.path, "{\"v1 0:0:0..0:999:999000 n=1000\": 3}").unwrap();
        assert_eq!(begin(&l2, 1, &grown, 3), Attempt::Exhausted { tried: 3 });
        assert_eq!(begin(&l2, 1, &fresh, 3), Attempt::Counted { number: 1 });
        // Keys that do not name their records count against every attempt.
        assert!(counts_against("not a key", 1, None, &h), "fails closed");
        assert!(counts_against(&key(None, 1, None), 1, None, &fresh));
        assert!(!counts_against(&key(None, 2, None), 1, None, &fresh));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&dir2).unwrap();
    }

    /// Attempts on one signal's records alone (`--signal`) do not count against another
    /// signal's, whose records are others though they interleave in the log; an attempt on
    /// every signal's records counts against each.
    #[test]
    fn attempts_on_one_signals_records_count_for_that_signal_only() {
        let (l, dir) = ledger("signals");
        let h = held_of(1000, 0);
        let on = |signal: u16| l.begin(1, Some(signal), &h, 2).unwrap();
        assert_eq!(on(0), Attempt::Counted { number: 1 });
        assert_eq!(on(0), Attempt::Counted { number: 2 });
        assert_eq!(on(0), Attempt::Exhausted { tried: 2 });
        assert_eq!(on(1), Attempt::Counted { number: 1 });
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Exhausted { tried: 3 });
        assert!(parse_key(&key(Some((h[0], h[1])), 4, Some(7))).is_some_and(|k| k.1 == Some(7)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn attempts_are_counted_per_log_whatever_the_version_up_to_the_limit() {
        let (l, dir) = ledger("count");
        let h = held_of(1000, 0);
        let (k1, k2) = (key_of(&h, 1), key_of(&h, 2));
        assert_eq!(l.count(&k1).unwrap(), 0);
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Counted { number: 1 });
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Counted { number: 2 });
        assert_eq!(begin(&l, 1, &h, 2), Attempt::Exhausted { tried: 2 });
        // v2, fine-tuned from v1 and accepted on these records, may not test its own
        // candidates on them again beyond the limit.
        assert_eq!(begin(&l, 2, &h, 2), Attempt::Exhausted { tried: 2 });
        assert_eq!(begin(&l, 2, &h, 3), Attempt::Counted { number: 3 });
        assert_eq!((l.count(&k1).unwrap(), l.count(&k2).unwrap()), (2, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_or_unwritable_file_refuses_instead_of_forgetting() {
        let (l, dir) = ledger("damaged");
        let h = held_of(1000, 0);
        let k1 = key_of(&h, 1);
        begin(&l, 1, &h, 3);
        begin(&l, 1, &h, 3);
        let good = std::fs::read(&l.path).unwrap();
        // Every single flipped bit is refused (or, in the layout alone, reads the same).
        for i in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[i / 8] ^= 1 << (i % 8);
            std::fs::write(&l.path, &bad).unwrap();
            match l.count(&k1) {
                Ok(n) => assert_eq!(n, 2, "bit {i} read as {n} attempts"),
                Err(e) => assert!(e.to_string().contains(".finetune-attempts.json"), "{e}"),
            }
        }
        std::fs::write(&l.path, &good[..good.len() / 2]).unwrap();
        assert!(l.begin(1, None, &h, 3).is_err());
        // A damaged file in today's format is named so, not as some other file.
        let e = l.count(&k1).unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
        // Files from before the checksum still count, and are rewritten with one, even
        // when the limit refuses.
        std::fs::write(&l.path, format!("{{\"{k1}\": 2}}")).unwrap();
        assert_eq!(l.count(&k1).unwrap(), 2);
        assert_eq!(begin(&l, 1, &h, 3), Attempt::Counted { number: 3 });
        std::fs::write(&l.path, format!("{{\"{k1}\": 3}}")).unwrap();
        assert_eq!(begin(&l, 1, &h, 3), Attempt::Exhausted { tried: 3 });
        assert!(std::fs::read_to_string(&l.path).unwrap().contains("crc32"));
        // A path that cannot be written (a directory in the way) refuses to count.
        let blocked = Ledger {
            path: dir.join("blocked"),
        };
        std::fs::create_dir_all(dir.join("blocked.json.tmp")).unwrap();
        let e = blocked.begin(1, None, &h, 3).unwrap_err();
        assert!(e.to_string().contains("writing it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
