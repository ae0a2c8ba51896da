//! The controller's policy store: every version it has run, which one is current, and the
//! atomic switch between them.
//!
//! ```text
//! <store>/
//!   versions/v000001/      a signed bundle per version (as flashed, or fine-tuned here)
//!   versions/v000002/
//!   current  -> versions/v000002     symlink: what the controller loads (--bundle <store>/current)
//!   previous -> versions/v000001     symlink: what `rollback` returns to
//!   history.jsonl          one JSON line per adopt / fine-tune (accepted or rejected) /
//!                          rollback / live-watch verdict (watch-kept, watch-rollback,
//!                          watch-rollback-unapplied), each followed by a tab and its CRC-32
//!   staging/               scratch for a bundle being written (cleared on open)
//! ```
//!
//! **Atomic switch.** A new version is written and signed under `staging/`, every file and
//! the directory are `fsync`ed, and the directory is renamed into `versions/` (then
//! `versions/` is synced). The `current` link is switched by creating a new link beside it
//! and `rename`-ing it over the old one, then syncing the store directory: `rename` replaces
//! the link atomically, so anyone resolving `current` — a controller starting up, a crash at
//! any point — finds either the complete old bundle or the complete new one, never a mix.
//! `previous` is pointed at the old version *before* `current` moves, so after a crash
//! between the two steps both name the old version (still consistent). A controller
//! started with `--store` follows `current` while it runs, switching a new version in
//! under its live KPI watch and recording the verdict here (`watch-kept`, or
//! `watch-rollback` with `current` switched back); one started with `--bundle` keeps the
//! policy it loaded.
//!
//! **Lock.** Every change of the links and the history holds an exclusive advisory lock on
//! `<store>/.lock` (`fd-lock`), so a fine-tune's install and the running controller's
//! watch rollback (check `current`, then switch it back) do not interleave; a controller's
//! start reads what it starts on (`current`, its verdict, its baseline) under the same lock
//! held shared (`PolicyStore::reading`), so a fine-tune switching `current` meanwhile cannot
//! give it one half of each state. Writing a new
//! version's folder under `staging/` is not locked: one fine-tune at a time is assumed
//! (the controller runs them one after the other), and `open` clears `staging/`.
//! Symlinks make this Unix-only; elsewhere the store reports `Unsupported`.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};
use greenwave_policy::manifest::Manifest;
use greenwave_policy::{onnx, PolicyWeights};
use serde::{Deserialize, Serialize};

use greenwave_policy::bundle::{self, BundleError, BundleInputs, VerifiedBundle, SIGNATURE_FILE};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A bundle check failed (on adopting, after signing, or before a rollback).
    #[error("{context}: {source}")]
    Bundle {
        /// Which bundle.
        context: String,
        /// The failed check.
        source: BundleError,
    },
    /// The store has no current version yet.
    #[error(
        "policy store {0} has no current version: give the flashed bundle to adopt (--bundle)"
    )]
    Empty(PathBuf),
    /// No previous version to roll back to.
    #[error("policy store {store}: no previous version to roll back to (current is {current})")]
    NoPrevious {
        /// The store.
        store: PathBuf,
        /// The current version's directory.
        current: String,
    },
    /// The highest version number is taken: a new one would wrap and reuse a number.
    #[error(
        "policy store {store}: version {highest} is the highest a version number can be; a \
         fine-tune would reuse a number (adopt a bundle of a lower policy version in a new \
         store)"
    )]
    VersionsSpent {
        /// The store.
        store: PathBuf,
        /// The highest version there (or the parent's).
        highest: u32,
    },
    /// A version directory exists with other contents.
    #[error("{0} already exists with a different bundle")]
    Conflict(PathBuf),
    /// The model could not be written.
    #[error("writing the candidate: {0}")]
    Model(String),
    /// Not available on this platform.
    #[error("the policy store needs symbolic links (Unix)")]
    Unsupported,
    /// `current` no longer names the version a switch back was meant to leave.
    #[error(
        "policy store {store}: `current` is {current}, no longer {expected}: not switched back"
    )]
    Moved {
        /// The store.
        store: PathBuf,
        /// The version folder expected to be current.
        expected: String,
        /// What `current` names now.
        current: String,
    },
    /// `current` moved while a candidate was fine-tuned from (and gated against) the
    /// version it named.
    #[error(
        "policy store {store}: the candidate was fine-tuned from {parent} and gated against \
         it, but `current` is {current}: not installed (fine-tune the current version \
         instead)"
    )]
    ParentNotCurrent {
        /// The store.
        store: PathBuf,
        /// The candidate's parent version folder.
        parent: String,
        /// What `current` names now.
        current: String,
    },
    /// A link points somewhere other than one of the store's version folders.
    #[error("policy store {store}: `{link}` points at {target}, not at a folder of versions/")]
    StrayLink {
        /// The store.
        store: PathBuf,
        /// The link's name.
        link: &'static str,
        /// Where it points.
        target: String,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn fsync_file(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io("syncing", path))
}

/// Syncs a directory (its entries: created, renamed, removed files).
fn fsync_dir(path: &Path) -> Result<(), StoreError> {
    // Opening a directory read-only and fsync-ing it is how Linux persists its entries.
    fsync_file(path)
}

/// One line of `history.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Unix time (ms).
    pub unix_ms: u64,
    /// "adopt", "finetune-accepted", "finetune-rejected", "rollback", and the running
    /// controller's live-watch verdicts "watch-kept", "watch-rollback" and
    /// "watch-rollback-unapplied".
    pub event: String,
    /// The version current before.
    pub from_version: Option<u32>,
    /// The version current after.
    pub to_version: Option<u32>,
    /// Reason or summary.
    pub detail: String,
}

/// A version switched in by [`PolicyStore::install`] or [`PolicyStore::rollback`].
#[derive(Clone, Debug)]
pub struct Switched {
    /// The version now current.
    pub version: u32,
    /// Its bundle directory.
    pub dir: PathBuf,
    /// The version current before, if any.
    pub from: Option<u32>,
}

/// A policy store directory (see the module docs).
#[derive(Clone, Debug)]
pub struct PolicyStore {
    dir: PathBuf,
}

const CURRENT: &str = "current";
const PREVIOUS: &str = "previous";
const VERSIONS: &str = "versions";
const STAGING: &str = "staging";
const HISTORY: &str = "history.jsonl";
/// The lock file every change of links and history holds (see `PolicyStore::locked`).
const LOCK: &str = ".lock";
use crate::standing::event::{self, WATCH_KEPT, WATCH_ROLLBACK, WATCH_ROLLBACK_UNAPPLIED};
use crate::standing::{standing, Standing};

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The store folder and its `versions/`, on a platform whose symlinks and renames the
/// store relies on (Unix).
fn unix_store_dir(dir: impl Into<PathBuf>) -> Result<(PathBuf, PathBuf), StoreError> {
    if !cfg!(unix) {
        return Err(StoreError::Unsupported);
    }
    let dir = dir.into();
    let versions = dir.join(VERSIONS);
    Ok((dir, versions))
}

fn version_dir_name(v: u32) -> String {
    format!("v{v:06}")
}

impl PolicyStore {
    /// Opens (creating if needed) the store at `dir`, clearing leftovers of an interrupted
    /// write from `staging/`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let (dir, versions) = unix_store_dir(dir)?;
        fs::create_dir_all(&versions).map_err(io("creating", &versions))?;
        let staging = dir.join(STAGING);
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(io("clearing", &staging))?;
        }
        fs::create_dir_all(&staging).map_err(io("creating", &staging))?;
        Ok(PolicyStore { dir })
    }

    /// Attaches to the existing store at `dir` without changing it (no folders created,
    /// `staging/` left alone: a fine-tune may be writing there). For a running
    /// controller, which reads `current` and records the live watch's verdicts.
    pub fn attach(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let (dir, versions) = unix_store_dir(dir)?;
        fs::read_dir(&versions).map_err(io("opening the policy store's", &versions))?;
        Ok(PolicyStore { dir })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path a controller loads: `<store>/current`.
    pub fn current_link(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    fn link_target(&self, name: &str) -> Result<Option<PathBuf>, StoreError> {
        let link = self.dir.join(name);
        match fs::read_link(&link) {
            Ok(t) => Ok(Some(self.dir.join(t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io {
                op: "reading link",
                path: link,
                source: e,
            }),
        }
    }

    /// The current version's bundle directory, if any.
    pub fn current(&self) -> Result<Option<PathBuf>, StoreError> {
        self.link_target(CURRENT)
    }

    /// The previous version's bundle directory, if any.
    pub fn previous(&self) -> Result<Option<PathBuf>, StoreError> {
        self.link_target(PREVIOUS)
    }

    /// Points link `name` at `versions/<target>` atomically (or removes it for `None`).
    fn set_link(&self, name: &str, target: Option<&str>) -> Result<(), StoreError> {
        let link = self.dir.join(name);
        match target {
            None => match fs::remove_file(&link) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(StoreError::Io {
                        op: "removing",
                        path: link,
                        source: e,
                    })
                }
            },
            Some(t) => {
                let tmp = self.dir.join(format!(".{name}.new"));
                let _ = fs::remove_file(&tmp);
                let rel = Path::new(VERSIONS).join(t);
                symlink(&rel, &tmp)?;
                fs::rename(&tmp, &link).map_err(io("switching", &link))?;
            }
        }
        fsync_dir(&self.dir)
    }

    /// Versions present in `versions/`, ascending.
    pub fn versions(&self) -> Result<Vec<u32>, StoreError> {
        let dir = self.dir.join(VERSIONS);
        let mut v: Vec<u32> = fs::read_dir(&dir)
            .map_err(io("listing", &dir))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix('v')?.parse().ok())
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// The version number a new fine-tune gets: above every version the store holds (so a
    /// rolled-back version's number is never reused) and above its parent.
    pub fn next_version(&self, parent: u32) -> Result<u32, StoreError> {
        let max = self.versions()?.into_iter().max().unwrap_or(0).max(parent);
        // Past u32::MAX the number would wrap to 0 and be reused.
        max.checked_add(1).ok_or_else(|| StoreError::VersionsSpent {
            store: self.dir.clone(),
            highest: max,
        })
    }

    fn version_of(dir: &Path) -> Option<u32> {
        dir.file_name()?.to_str()?.strip_prefix('v')?.parse().ok()
    }

    /// Appends a line to `history.jsonl` (synced), under the store's lock.
    pub fn record(&self, entry: &HistoryEntry) -> Result<(), StoreError> {
        self.locked(|| self.append_history(entry))
    }

    /// Runs `f` holding the store's exclusive lock (an advisory `flock` on
    /// `<store>/.lock`): every change of the links and the history takes it, so the running
    /// controller's check of `current` and its switch back cannot interleave with a
    /// fine-tune's install. Not re-entrant: `f` must not call a locking method.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        let (mut lock, path) = self.lock_file()?;
        let _held = lock.write().map_err(io("locking", &path))?;
        f()
    }

    /// The store's lock file, opened (created if missing), and its path.
    fn lock_file(&self) -> Result<(fd_lock::RwLock<File>, PathBuf), StoreError> {
        let path = self.dir.join(LOCK);
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("opening the store's lock", &path))?;
        Ok((fd_lock::RwLock::new(file), path))
    }

    /// Runs `f`, which only reads (links, history), holding the store's lock shared: no
    /// change of links or history happens in the middle, so reads that belong together
    /// (`current`, whether it is judged, its baseline) see one state of the store. Not
    /// re-entrant: `f` must not call a locking method (it would wait on itself).
    pub fn reading<T>(
        &self,
        f: impl FnOnce(&Self) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (lock, path) = self.lock_file()?;
        let _held = lock.read().map_err(io("locking", &path))?;
        f(self)
    }

    /// Appends a line to `history.jsonl` (synced); the caller holds the lock. A file whose
    /// last line was cut off (a crash, damaged bytes) gets a newline first, so the new
    /// line is never glued to the damaged one and lost with it.
    fn append_history(&self, entry: &HistoryEntry) -> Result<(), StoreError> {
        let path = self.dir.join(HISTORY);
        let new = !path.exists();
        let mut f = fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .map_err(io("opening", &path))?;
        let start = if ends_mid_line(&mut f).map_err(io("reading", &path))? {
            "\n"
        } else {
            ""
        };
        writeln!(f, "{start}{}", history_line(entry))
            .and_then(|_| f.sync_data())
            .map_err(io("appending to", &path))?;
        // A file just made is durable once its folder's entry is: a power cut would
        // otherwise lose the first line (an adoption), and the version read as unjudged.
        if new {
            fsync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// What is wrong with `history.jsonl`, if anything: lines that fail their checksum or
    /// do not parse (all skipped by [`PolicyStore::history`]), or no readable line at all
    /// while the store holds versions. For the commands to name before they act on the
    /// history's verdicts.
    pub fn history_damage(&self) -> Result<Option<HistoryDamage>, StoreError> {
        let bytes = self.history_bytes()?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<(usize, &str)> = (1..)
            .zip(text.lines())
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let unreadable: Vec<usize> = lines
            .iter()
            .filter(|(_, l)| parse_history_line(l).is_none())
            .map(|&(n, _)| n)
            .collect();
        let versions = self.versions()?.len();
        let readable = lines.len() - unreadable.len();
        Ok(
            (!unreadable.is_empty() || (readable == 0 && versions > 0)).then_some(HistoryDamage {
                path: self.dir.join(HISTORY),
                lines: lines.len(),
                unreadable,
                versions,
            }),
        )
    }

    /// The history, oldest first. A line that fails its checksum or does not parse
    /// (damaged bytes included) is skipped: the verdicts read from the history err
    /// towards watching (see [`standing`]).
    pub fn history(&self) -> Result<Vec<HistoryEntry>, StoreError> {
        Ok(parse_history(&self.history_bytes()?))
    }

    /// The bytes of `history.jsonl` (none before the first line is written).
    fn history_bytes(&self) -> Result<Vec<u8>, StoreError> {
        let path = self.dir.join(HISTORY);
        match fs::read(&path) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io("reading", &path)(e)),
        }
    }

    /// Makes the (flashed) bundle `bundle`, verified against `trusted`, the store's
    /// current version, copying it in as `versions/v<its version>`. If that version is
    /// already present with the same signature, it is reused. The copy is verified again
    /// before it is committed: the source could change between its check and the copy.
    pub fn adopt(
        &self,
        bundle_dir: &Path,
        trusted: &[VerifyingKey],
    ) -> Result<Switched, StoreError> {
        // Verified where it is first, so that a refusal names the bundle's own files.
        bundle::verify(bundle_dir, trusted).map_err(|e| StoreError::Bundle {
            context: format!("bundle {}", bundle_dir.display()),
            source: e,
        })?;
        let stage = self
            .dir
            .join(STAGING)
            .join(format!("adopt-{}", std::process::id()));
        let staged = self.stage_copy(bundle_dir, &stage, trusted);
        let committed = staged.and_then(|v| {
            let dest = self.dir.join(VERSIONS).join(version_dir_name(v));
            if !dest.exists() {
                return self.commit_staged(&stage, &dest).map(|()| v);
            }
            let sig = |d: &Path| fs::read(d.join(SIGNATURE_FILE)).ok();
            match sig(&dest) == sig(&stage) {
                true => Ok(v),
                false => Err(StoreError::Conflict(dest)),
            }
        });
        let _ = fs::remove_dir_all(&stage);
        let detail = format!("adopted {}", bundle_dir.display());
        self.make_current(committed?, event::ADOPT, &detail)
    }

    /// Copies the bundle folder `from` to `stage` (each file synced) and verifies the copy
    /// against `trusted`; its policy version.
    fn stage_copy(
        &self,
        from: &Path,
        stage: &Path,
        trusted: &[VerifyingKey],
    ) -> Result<u32, StoreError> {
        fs::create_dir_all(stage).map_err(io("creating", stage))?;
        for e in fs::read_dir(from).map_err(io("listing", from))? {
            let e = e.map_err(io("listing", from))?;
            let to = stage.join(e.file_name());
            fs::copy(e.path(), &to).map_err(io("copying", &e.path()))?;
            fsync_file(&to)?;
        }
        let b = bundle::verify(stage, trusted).map_err(|e| StoreError::Bundle {
            context: format!(
                "the copy of bundle {} (changed while copied?)",
                from.display()
            ),
            source: e,
        })?;
        Ok(b.manifest.policy_version)
    }

    /// Points `current` at version `v` (a folder of `versions/`), the old current becoming
    /// `previous` unless it is `v` itself, and records `event` with `detail`; under the
    /// lock.
    fn make_current(&self, v: u32, event: &str, detail: &str) -> Result<Switched, StoreError> {
        self.locked(|| self.make_current_locked(v, event, detail))
    }

    /// [`make_current`](Self::make_current) with the lock already held.
    fn make_current_locked(
        &self,
        v: u32,
        event: &str,
        detail: &str,
    ) -> Result<Switched, StoreError> {
        let dest = self.dir.join(VERSIONS).join(version_dir_name(v));
        let cur = self.current()?;
        let from = cur.as_deref().and_then(Self::version_of);
        if let Some(cur) = cur.filter(|c| *c != dest) {
            self.set_link(PREVIOUS, cur.file_name().and_then(|n| n.to_str()))?;
        }
        self.set_link(CURRENT, Some(&version_dir_name(v)))?;
        self.append_history(&HistoryEntry {
            unix_ms: now_ms(),
            event: event.into(),
            from_version: from,
            to_version: Some(v),
            detail: detail.into(),
        })?;
        Ok(Switched {
            version: v,
            dir: dest,
            from,
        })
    }

    /// Syncs the staged directory and renames it to `dest` (in `versions/`).
    fn commit_staged(&self, stage: &Path, dest: &Path) -> Result<(), StoreError> {
        fsync_dir(stage)?;
        fs::rename(stage, dest).map_err(io("renaming into place", dest))?;
        fsync_dir(&self.dir.join(VERSIONS))
    }

    /// Writes `weights` with `manifest` as a new bundle signed by `key`, checks it verifies
    /// (against `trusted` plus `key`'s own public half), and switches `current` to it, the
    /// old current becoming `previous`. `detail` goes to the history.
    ///
    /// The candidate was gated against its parent (the manifest's `parent_version`), so
    /// it is installed only while that version is still `current`: if `current` moved
    /// while it was fine-tuned (an operator's `rollback`, the watch's), nothing is
    /// installed ([`StoreError::ParentNotCurrent`]), and the rollback stands.
    pub fn install(
        &self,
        weights: &PolicyWeights,
        manifest: &Manifest,
        key: &SigningKey,
        trusted: &[VerifyingKey],
        detail: &str,
    ) -> Result<Switched, StoreError> {
        let v = manifest.policy_version;
        let dest = self.dir.join(VERSIONS).join(version_dir_name(v));
        if dest.exists() {
            return Err(StoreError::Conflict(dest));
        }
        let work = self
            .dir
            .join(STAGING)
            .join(format!("v{v}-{}", std::process::id()));
        let inputs = write_bundle_inputs(weights, manifest, &work.join("inputs"))?;
        let stage = work.join("bundle");
        sign_and_check(&inputs, key, trusted, &stage, v)?;
        let installed = self.locked(|| {
            self.check_parent_current(manifest.provenance.parent_version)?;
            self.commit_staged(&stage, &dest)?;
            self.make_current_locked(v, event::FINETUNE_ACCEPTED, detail)
        });
        let _ = fs::remove_dir_all(&work);
        installed
    }

    /// That `current` is still version `parent` (the lock held).
    fn check_parent_current(&self, parent: Option<u32>) -> Result<(), StoreError> {
        let cur = self.current()?;
        let now = cur.as_deref().and_then(Self::version_of);
        if parent.is_some() && now == parent {
            return Ok(());
        }
        let current = match (now, cur) {
            (Some(v), _) => version_dir_name(v),
            (None, Some(c)) => c.display().to_string(),
            (None, None) => "unset".to_string(),
        };
        Err(StoreError::ParentNotCurrent {
            store: self.dir.clone(),
            parent: parent.map_or(
                "a version its manifest does not name".into(),
                version_dir_name,
            ),
            current,
        })
    }

    /// Switches back to the previous version (verified against `trusted` first). The new
    /// `previous` is that version's parent if the store still holds it (past any version
    /// the watch rolled back); the version rolled back from stays in `versions/` (its
    /// number is not reused) and the event is recorded.
    pub fn rollback(&self, trusted: &[VerifyingKey], reason: &str) -> Result<Switched, StoreError> {
        self.locked(|| self.rollback_locked(trusted, reason))
    }

    fn rollback_locked(
        &self,
        trusted: &[VerifyingKey],
        reason: &str,
    ) -> Result<Switched, StoreError> {
        let cur = self
            .current()?
            .ok_or_else(|| StoreError::Empty(self.dir.clone()))?;
        let prev = self.previous()?.ok_or_else(|| StoreError::NoPrevious {
            store: self.dir.clone(),
            current: cur.display().to_string(),
        })?;
        self.switch_back(&cur, &prev, PREVIOUS, trusted, event::ROLLBACK, reason)
    }

    /// The live watch's rollback: `current` goes from `from` (the version the controller
    /// switched in and found worse) back to `to` (the one it ran before and runs again),
    /// recorded as a `watch-rollback` with `evidence`. When `current` no longer names
    /// `from` (a newer version was installed meanwhile) `current` is left alone (and
    /// `previous`, if it named `from`, names `to`), the verdict is recorded as
    /// `watch-rollback-unapplied`, and [`StoreError::Moved`] returned.
    pub fn watch_rollback(
        &self,
        from: &Path,
        to: &Path,
        trusted: &[VerifyingKey],
        evidence: &str,
    ) -> Result<Switched, StoreError> {
        self.locked(|| self.watch_rollback_locked(from, to, trusted, evidence))
    }

    fn watch_rollback_locked(
        &self,
        from: &Path,
        to: &Path,
        trusted: &[VerifyingKey],
        evidence: &str,
    ) -> Result<Switched, StoreError> {
        let cur = self
            .current()?
            .ok_or_else(|| StoreError::Empty(self.dir.clone()))?;
        if cur != from {
            // The verdict is still the store's to know: a restart must not start on the
            // rolled-back version (see `baseline`), nor `rollback` return to it.
            if self.previous()?.as_deref() == Some(from) {
                let name = self.held(to).and_then(|d| d.file_name()?.to_str());
                self.set_link(PREVIOUS, name)?;
            }
            self.append_history(&HistoryEntry {
                unix_ms: now_ms(),
                event: WATCH_ROLLBACK_UNAPPLIED.into(),
                from_version: Self::version_of(from),
                to_version: Self::version_of(to),
                detail: evidence.into(),
            })?;
            return Err(StoreError::Moved {
                store: self.dir.clone(),
                expected: from.display().to_string(),
                current: cur.display().to_string(),
            });
        }
        self.switch_back(&cur, to, "target", trusted, WATCH_ROLLBACK, evidence)
    }

    /// The version an unjudged `current` is to be compared with at a start: the first
    /// judged version (see [`standing`]) going back from `previous` — past a version the
    /// watch rolled back to the one it returned to, past an unjudged fine-tune to the
    /// version current before it. `None` without a `previous`, when the way back leaves
    /// the store's versions, reaches `current`, ends in a version with no line, or loops.
    pub fn baseline(&self) -> Result<Option<PathBuf>, StoreError> {
        let Some(mut dir) = self.previous()? else {
            return Ok(None);
        };
        let current = self.current()?;
        let history = self.history()?;
        for _ in 0..=history.len() {
            let Some(v) = self.held(&dir).and_then(Self::version_of) else {
                return Ok(None);
            };
            if current.as_deref() == Some(dir.as_path()) {
                return Ok(None);
            }
            let back = match standing(&history, v) {
                Standing::Judged => return Ok(Some(dir)),
                Standing::RolledBack { to } => to,
                Standing::Unjudged { from } => from,
            };
            match back {
                Some(b) => dir = self.dir.join(VERSIONS).join(version_dir_name(b)),
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// `dir` if it is a folder of `versions/`.
    fn held<'a>(&self, dir: &'a Path) -> Option<&'a Path> {
        let name = dir.file_name()?;
        (dir == self.dir.join(VERSIONS).join(name) && dir.is_dir()).then_some(dir)
    }

    /// The store's own spelling, `<store>/versions/<name>`, of a version folder reached
    /// some other way (a link made by hand with an absolute path, say), so that one folder
    /// compares equal to itself; `None` if `dir` is not a folder of `versions/`.
    pub fn version_folder(&self, dir: &Path) -> Option<PathBuf> {
        let own = self.dir.join(VERSIONS).join(dir.file_name()?);
        let same = own == dir
            || matches!((fs::canonicalize(&own), fs::canonicalize(dir)), (Ok(a), Ok(b)) if a == b);
        (same && own.is_dir()).then_some(own)
    }

    /// Whether the version in `dir` is judged (see [`standing`]); a folder outside
    /// `versions/` never is.
    pub fn is_judged(&self, dir: &Path) -> Result<bool, StoreError> {
        let Some(v) = self.held(dir).and_then(Self::version_of) else {
            return Ok(false);
        };
        Ok(standing(&self.history()?, v) == Standing::Judged)
    }

    /// Whether the last change of `current` was an operator's [`rollback`](Self::rollback)
    /// to the version in `dir` (not a watch's, an adoption or a fine-tune): a controller
    /// then runs it at once, unwatched, and does not judge it against the version it left.
    pub fn rolled_back_to(&self, dir: &Path) -> Result<bool, StoreError> {
        use crate::standing::event;
        let Some(v) = self.held(dir).and_then(Self::version_of) else {
            return Ok(false);
        };
        let changes_current = [
            event::ADOPT,
            event::FINETUNE_ACCEPTED,
            event::ROLLBACK,
            event::WATCH_ROLLBACK,
        ];
        Ok(self
            .history()?
            .iter()
            .rev()
            .find(|e| changes_current.contains(&e.event.as_str()))
            .is_some_and(|e| e.event == event::ROLLBACK && e.to_version == Some(v)))
    }

    /// Records that the live watch kept `version` (no significant KPI regression after it
    /// was switched in): the store's verdict, so a restarted controller runs it at once.
    pub fn record_kept(&self, version: u32, evidence: &str) -> Result<(), StoreError> {
        self.record(&HistoryEntry {
            unix_ms: now_ms(),
            event: WATCH_KEPT.into(),
            from_version: Some(version),
            to_version: Some(version),
            detail: evidence.into(),
        })
    }

    /// Whether the current version still awaits the live watch's verdict: it is not
    /// [`Standing::Judged`] (see [`standing`]), or `current` points outside `versions/`.
    /// `None` without a current version.
    pub fn current_unjudged(&self) -> Result<Option<bool>, StoreError> {
        let Some(cur) = self.current()? else {
            return Ok(None);
        };
        // A link pointed by hand at some other folder: no verdict can be about it.
        Ok(Some(!self.is_judged(&cur)?))
    }

    /// Points `current` (now `cur`) at `to`, a version folder of this store verified
    /// against `trusted`, and `previous` at its parent if held (past any version the watch
    /// rolled back, to the one it returned to: `rollback` never brings one back); records
    /// `event`.
    fn switch_back(
        &self,
        cur: &Path,
        to: &Path,
        link: &'static str,
        trusted: &[VerifyingKey],
        event: &str,
        reason: &str,
    ) -> Result<Switched, StoreError> {
        let prev = to;
        // Only a version the store holds: the folder verified is the one `current` will name.
        let prev_name = prev
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| prev == self.dir.join(VERSIONS).join(n))
            .ok_or_else(|| StoreError::StrayLink {
                store: self.dir.clone(),
                link,
                target: prev.display().to_string(),
            })?
            .to_string();
        let b: VerifiedBundle = bundle::verify(prev, trusted).map_err(|e| StoreError::Bundle {
            context: format!("previous version {}", prev.display()),
            source: e,
        })?;
        let to = b.manifest.policy_version;
        let from = Self::version_of(cur);
        self.set_link(CURRENT, Some(&prev_name))?;
        let history = self.history()?;
        let grandparent = b
            .manifest
            .provenance
            .parent_version
            .and_then(|v| past_rolled_back(&history, v))
            .map(version_dir_name)
            .filter(|n| self.dir.join(VERSIONS).join(n).is_dir());
        self.set_link(PREVIOUS, grandparent.as_deref())?;
        self.append_history(&HistoryEntry {
            unix_ms: now_ms(),
            event: event.into(),
            from_version: from,
            to_version: Some(to),
            detail: reason.into(),
        })?;
        Ok(Switched {
            version: to,
            dir: prev.to_path_buf(),
            from,
        })
    }
}

/// Whether the file (opened for reading) is non-empty and does not end in a newline.
fn ends_mid_line(f: &mut File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if f.metadata()?.len() == 0 {
        return Ok(false);
    }
    f.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    f.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// What [`PolicyStore::history_damage`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryDamage {
    /// The history file.
    pub path: PathBuf,
    /// Its non-blank lines.
    pub lines: usize,
    /// Which of them (line numbers of the file, from 1) fail their checksum or do not parse.
    pub unreadable: Vec<usize>,
    /// Version folders the store holds.
    pub versions: usize,
}

impl std::fmt::Display for HistoryDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = self.path.display();
        if self.unreadable.is_empty() {
            let plural = if self.versions == 1 { "" } else { "s" };
            write!(
                f,
                "{path} holds no line, yet the store holds {} version{plural}",
                self.versions
            )?;
        } else {
            let shown: Vec<String> = self
                .unreadable
                .iter()
                .take(8)
                .map(|n| n.to_string())
                .collect();
            let more = if self.unreadable.len() > 8 {
                ", …"
            } else {
                ""
            };
            write!(
                f,
                "{path}: {} of its {} lines fail their checksum or do not parse (line {}{more}) \
                 and are skipped",
                self.unreadable.len(),
                self.lines,
                shown.join(", ")
            )?;
        }
        write!(
            f,
            "; a version with no readable verdict counts as not yet judged by the live watch"
        )
    }
}

/// The entries of `history.jsonl`'s bytes, as [`PolicyStore::history`] reads them: a line
/// that fails its checksum or does not parse is skipped, and damaged bytes are read
/// lossily.
pub fn parse_history(bytes: &[u8]) -> Vec<HistoryEntry> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(parse_history_line)
        .collect()
}

/// One line of `history.jsonl` (without its newline): the entry's JSON, a tab and the
/// CRC-32 of the JSON (8 hex digits), so that a flipped bit, in a version number say, is
/// seen. (JSON escapes tabs inside strings, so the last tab is the separator.)
pub fn history_line(entry: &HistoryEntry) -> String {
    let json = serde_json::to_string(entry).unwrap_or_default();
    format!("{json}\t{:08x}", crc32fast::hash(json.as_bytes()))
}

/// A `history.jsonl` line, if its checksum holds and it parses. Lines written before the
/// checksum (no tab) are read as they are.
/// `v`, or where the watch returned to from it if it rolled `v` back (and so on): a
/// version `rollback` may return to. `None` where the chain ends without one.
fn past_rolled_back(history: &[HistoryEntry], mut v: u32) -> Option<u32> {
    for _ in 0..=history.len() {
        match standing(history, v) {
            Standing::RolledBack { to } => v = to?,
            _ => return Some(v),
        }
    }
    None
}

fn parse_history_line(line: &str) -> Option<HistoryEntry> {
    let json = match line.rsplit_once('\t') {
        Some((json, crc)) => {
            let crc = u32::from_str_radix(crc, 16)
                .ok()
                .filter(|_| crc.len() == 8)?;
            (crc32fast::hash(json.as_bytes()) == crc).then_some(json)?
        }
        None => line,
    };
    serde_json::from_str(json).ok()
}

/// Writes what a bundle of `weights` and `manifest` is packed from into `inputs_dir`
/// (created): the ONNX model, the manifest and the f32 and int8 firmware blobs.
fn write_bundle_inputs(
    weights: &PolicyWeights,
    manifest: &Manifest,
    inputs_dir: &Path,
) -> Result<BundleInputs, StoreError> {
    let v = manifest.policy_version;
    fs::create_dir_all(inputs_dir).map_err(io("creating", inputs_dir))?;
    let plan_hash = manifest.plan_hash_u64().ok_or_else(|| {
        StoreError::Model(format!("plan hash {:?} is not hex", manifest.plan_hash))
    })?;
    let mlp = weights.actor_mlp(plan_hash, v);
    let blob = mlp
        .to_blob(false)
        .map_err(|e| StoreError::Model(format!("f32 blob: {e}")))?;
    let blob8 = mlp
        .to_blob(true)
        .map_err(|e| StoreError::Model(format!("int8 blob: {e}")))?;
    let manifest_json = serde_json::to_string_pretty(manifest)
        .map_err(|e| StoreError::Model(format!("manifest: {e}")))?;
    let inputs = BundleInputs {
        model: inputs_dir.join("policy.onnx"),
        manifest: inputs_dir.join("policy.manifest.json"),
        blob: inputs_dir.join("policy.blob"),
        blob_int8: Some(inputs_dir.join("policy.int8.blob")),
    };
    let files: [(&Path, &[u8]); 4] = [
        (&inputs.model, &onnx::reexport(weights, manifest)),
        (&inputs.manifest, manifest_json.as_bytes()),
        (&inputs.blob, &blob),
        (
            inputs.blob_int8.as_deref().unwrap_or(inputs.blob.as_path()),
            &blob8,
        ),
    ];
    for (path, bytes) in files {
        fs::write(path, bytes).map_err(io("writing", path))?;
    }
    Ok(inputs)
}

/// Packs `inputs` into the bundle `stage` signed by `key`, checks that it verifies (the
/// bundle a controller will load: against `trusted` plus `key`'s public half) and syncs its
/// files; `v` is the version, for the errors.
fn sign_and_check(
    inputs: &BundleInputs,
    key: &SigningKey,
    trusted: &[VerifyingKey],
    stage: &Path,
    v: u32,
) -> Result<(), StoreError> {
    bundle::pack_and_sign(inputs, key, stage).map_err(|e| StoreError::Bundle {
        context: format!("signing version {v}"),
        source: e,
    })?;
    // The bundle a controller will load must verify: check it before switching.
    let mut keys = trusted.to_vec();
    keys.push(key.verifying_key());
    bundle::verify(stage, &keys).map_err(|e| StoreError::Bundle {
        context: format!("new version {v} (before switching)"),
        source: e,
    })?;
    let entries = fs::read_dir(stage).map_err(io("listing", stage))?;
    for e in entries {
        let e = e.map_err(io("listing", stage))?;
        fsync_file(&e.path())?;
    }
    Ok(())
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> Result<(), StoreError> {
    std::os::unix::fs::symlink(target, link).map_err(io("linking", link))
}

#[cfg(not(unix))]
fn symlink(_target: &Path, _link: &Path) -> Result<(), StoreError> {
    Err(StoreError::Unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(name: &str) -> PolicyStore {
        let dir = std::env::temp_dir().join(format!("gw-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let s = PolicyStore::open(&dir).unwrap();
        for v in [1, 2] {
            fs::create_dir_all(dir.join(VERSIONS).join(version_dir_name(v))).unwrap();
        }
        s
    }

    fn line(s: &PolicyStore, event: &str, from: Option<u32>, to: u32) {
        s.record(&HistoryEntry {
            unix_ms: 0,
            event: event.into(),
            from_version: from,
            to_version: Some(to),
            detail: String::new(),
        })
        .unwrap();
    }

    /// v1 adopted, v2 fine-tuned from it, v3 from v2 and current (previous: v2); no
    /// verdicts.
    fn fine_tuned_twice(s: &PolicyStore) {
        fs::create_dir_all(s.dir().join(VERSIONS).join("v000003")).unwrap();
        line(s, event::ADOPT, None, 1);
        line(s, event::FINETUNE_ACCEPTED, Some(1), 2);
        line(s, event::FINETUNE_ACCEPTED, Some(2), 3);
        s.set_link(PREVIOUS, Some("v000002")).unwrap();
        s.set_link(CURRENT, Some("v000003")).unwrap();
    }

    /// Only an adoption, a rollback or a verdict judges the current version; anything else
    /// (a fine-tune's acceptance, an unknown or damaged line, no line) leaves it to the
    /// live watch.
    #[test]
    fn the_current_version_is_judged_only_by_a_known_verdict() {
        let s = store("judged");
        assert_eq!(s.current_unjudged().unwrap(), None, "no current version");
        line(&s, "adopt", None, 1);
        s.set_link(CURRENT, Some("v000001")).unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(false), "adopted");
        line(&s, "finetune-rejected", Some(1), 1);
        assert_eq!(s.current_unjudged().unwrap(), Some(false), "a rejection");
        line(&s, "finetune-accepted", Some(1), 2);
        s.set_link(PREVIOUS, Some("v000001")).unwrap();
        s.set_link(CURRENT, Some("v000002")).unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(true), "a fine-tune");
        s.record_kept(2, "{}").unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(false), "kept");
        // A bit flipped in the verdict's event: unknown, so unjudged again.
        let path = s.dir().join(HISTORY);
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replace("watch-kept", "watch-kepu")).unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(true), "damaged verdict");
        // A line that does not parse is skipped: the acceptance before it decides.
        fs::write(&path, text.replace("\"watch-kept\"", "\"watch-kept")).unwrap();
        assert_eq!(
            s.current_unjudged().unwrap(),
            Some(true),
            "unparsable verdict"
        );
        // A link changed by hand to a version with no line at all.
        fs::write(&path, "").unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(true), "no history");
    }

    /// The watch's rollback leaves the links alone when `current` moved on meanwhile, but
    /// records the verdict, so that a start compares the new `current` with the version
    /// the controller returned to, not the one it rolled back.
    #[test]
    fn a_rollback_after_current_moved_on_is_recorded_and_the_baseline_skips_it() {
        let s = store("moved");
        let dir = s.dir().join(VERSIONS);
        // v2 runs under the watch; v3, fine-tuned meanwhile, is installed (previous: v2).
        fine_tuned_twice(&s);
        // v2 has no verdict yet: v3 would be compared with v1.
        assert!(s.baseline().unwrap().unwrap().ends_with("v000001"));
        let e = s
            .watch_rollback(&dir.join("v000002"), &dir.join("v000001"), &[], "{}")
            .unwrap_err();
        assert!(matches!(e, StoreError::Moved { .. }), "{e}");
        assert!(e.to_string().contains("no longer"), "{e}");
        assert!(s.current().unwrap().unwrap().ends_with("v000003"));
        assert!(
            s.previous().unwrap().unwrap().ends_with("v000001"),
            "`rollback` must not return to v2"
        );
        let h = s.history().unwrap();
        assert_eq!(h.len(), 4);
        assert_eq!(h[3].event, WATCH_ROLLBACK_UNAPPLIED);
        assert_eq!((h[3].from_version, h[3].to_version), (Some(2), Some(1)));
        assert_eq!(
            s.current_unjudged().unwrap(),
            Some(true),
            "v3 still unjudged"
        );
        assert!(s.baseline().unwrap().unwrap().ends_with("v000001"));
        // Pointed (by hand) back at v2, the baseline still skips it.
        s.set_link(PREVIOUS, Some("v000002")).unwrap();
        assert!(s.baseline().unwrap().unwrap().ends_with("v000001"));
        // A chain that loops, or leaves versions/, gives no baseline.
        // (v1 "fine-tuned from" v2, which the watch rolled back to v1: only a damaged
        // history says so.)
        line(&s, event::FINETUNE_ACCEPTED, Some(2), 1);
        assert_eq!(s.baseline().unwrap(), None, "a loop");
        let h = s.dir().join(HISTORY);
        fs::write(&h, "").unwrap();
        fs::create_dir_all(s.dir().join("elsewhere/v000002")).unwrap();
        let link = s.dir().join(PREVIOUS);
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("elsewhere/v000002", &link).unwrap();
        assert_eq!(s.baseline().unwrap(), None, "outside versions/");
        // A `current` pointed outside versions/ has no verdict.
        let link = s.dir().join(CURRENT);
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("elsewhere/v000002", &link).unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(true));
        // Bytes that are not UTF-8 in the history skip their line only.
        line(&s, "adopt", None, 2);
        let mut bytes = fs::read(&h).unwrap();
        bytes.extend_from_slice(b"\xff\xfe{\n");
        fs::write(&h, bytes).unwrap();
        assert_eq!(s.history().unwrap().len(), 1);
    }

    /// Fine-tunes installed while no watch judged them are passed over: the baseline is
    /// the last judged version before them, and never `current` itself.
    #[test]
    fn the_baseline_passes_over_unjudged_fine_tunes_and_never_is_current() {
        let s = store("unjudged-chain");
        fine_tuned_twice(&s);
        assert!(s.baseline().unwrap().unwrap().ends_with("v000001"));
        // A manual rollback to the unjudged v2 leaves it unjudged, compared with v1.
        line(&s, event::ROLLBACK, Some(3), 2);
        s.set_link(CURRENT, Some("v000002")).unwrap();
        s.set_link(PREVIOUS, Some("v000001")).unwrap();
        assert_eq!(s.current_unjudged().unwrap(), Some(true));
        assert!(s.baseline().unwrap().unwrap().ends_with("v000001"));
        // `previous` naming `current` (by hand) is no baseline.
        s.set_link(PREVIOUS, Some("v000002")).unwrap();
        assert_eq!(s.baseline().unwrap(), None);
    }

    /// Every single-bit flip of a history file leaves each line read as written or
    /// skipped: a flipped version number or event is not read as another verdict. Lines
    /// written before the checksum are still read.
    #[test]
    fn a_flipped_bit_in_the_history_is_never_read_as_another_line() {
        let s = store("history-crc");
        line(&s, event::ADOPT, None, 1);
        line(&s, event::FINETUNE_ACCEPTED, Some(1), 2);
        s.record_kept(2, "{\"queue\": 0.1}").unwrap();
        let written = s.history().unwrap();
        assert_eq!(written.len(), 3);
        let path = s.dir().join(HISTORY);
        let bytes = fs::read(&path).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            fs::write(&path, &b).unwrap();
            for h in s.history().unwrap() {
                assert!(written.contains(&h), "bit {bit}: read {h:?}");
            }
        }
        let legacy = serde_json::to_string(&written[0]).unwrap();
        fs::write(&path, format!("{legacy}\n")).unwrap();
        assert_eq!(s.history().unwrap(), written[..1]);
    }

    /// Damaged history lines are named (by number) and skipped, and a line appended after
    /// a cut-off one starts on its own line, so the new verdict is read back.
    #[test]
    fn a_damaged_history_is_named_and_a_new_line_never_joins_a_cut_one() {
        let s = store("history-damage");
        assert_eq!(
            s.history_damage().unwrap().map(|d| d.versions),
            Some(2),
            "none read"
        );
        line(&s, event::ADOPT, None, 1);
        assert_eq!(s.history_damage().unwrap(), None);
        let path = s.dir().join(HISTORY);
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(b"\xff\x00garbage, cut off");
        fs::write(&path, &bytes).unwrap();
        line(&s, event::FINETUNE_ACCEPTED, Some(1), 2);
        let read: Vec<_> = s.history().unwrap().iter().map(|h| h.to_version).collect();
        assert_eq!(
            read,
            [Some(1), Some(2)],
            "the new line survives the cut one"
        );
        let damage = s.history_damage().unwrap().expect("the cut line is named");
        assert_eq!((damage.lines, damage.unreadable.clone()), (3, vec![2]));
        let said = damage.to_string();
        assert!(
            said.contains("1 of its 3 lines") && said.contains("line 2"),
            "{said}"
        );
    }

    /// Starts a writer that takes the store's lock, waits 200 ms, then appends an adoption
    /// line; returns once it holds the lock.
    fn adopt_holding_the_lock(s: &PolicyStore) -> std::thread::JoinHandle<Result<(), StoreError>> {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let (s2, b2) = (s.clone(), barrier.clone());
        let holder = std::thread::spawn(move || {
            s2.locked(|| {
                b2.wait();
                std::thread::sleep(std::time::Duration::from_millis(200));
                s2.append_history(&HistoryEntry {
                    unix_ms: 0,
                    event: event::ADOPT.into(),
                    from_version: None,
                    to_version: Some(1),
                    detail: "held".into(),
                })
            })
        });
        barrier.wait();
        holder
    }

    /// The store's lock orders writers: a verdict recorded while another writer holds the
    /// lock lands after that writer's line, not in the middle of its change.
    #[test]
    fn writers_wait_for_the_stores_lock() {
        let s = store("lock");
        let holder = adopt_holding_the_lock(&s);
        s.record_kept(1, "{}").unwrap();
        holder.join().unwrap().unwrap();
        let events: Vec<String> = s.history().unwrap().into_iter().map(|h| h.event).collect();
        assert_eq!(events, [event::ADOPT, WATCH_KEPT]);
    }

    /// A consistent read waits for a writer holding the lock: what it reads is the state
    /// before or after the change, never between.
    #[test]
    fn a_consistent_read_waits_for_a_writer() {
        let s = store("reading");
        let holder = adopt_holding_the_lock(&s);
        let seen = s.reading(|s| Ok(s.history()?.len())).unwrap();
        holder.join().unwrap().unwrap();
        assert_eq!(seen, 1, "the read ran inside the writer's change");
    }

    /// Attaching neither creates a store nor clears a fine-tune's staging folder.
    #[test]
    fn attach_changes_nothing() {
        let s = store("attach");
        let staged = s.dir().join(STAGING).join("v3-1");
        fs::create_dir_all(&staged).unwrap();
        PolicyStore::attach(s.dir()).unwrap();
        assert!(staged.is_dir());
        // A version folder reached by an absolute link is spelt the store's way.
        let own = s.dir().join(VERSIONS).join("v000002");
        let abs = fs::canonicalize(&own).unwrap();
        std::os::unix::fs::symlink(&abs, s.dir().join(CURRENT)).unwrap();
        let cur = s.current().unwrap().unwrap();
        assert_eq!(cur, abs);
        assert_eq!(s.version_folder(&cur), Some(own));
        assert_eq!(s.version_folder(s.dir()), None, "not a version folder");
        let missing = s.dir().join("nothing-here");
        let e = PolicyStore::attach(&missing).unwrap_err().to_string();
        assert!(e.contains("nothing-here"), "{e}");
        assert!(!missing.exists());
    }
}
