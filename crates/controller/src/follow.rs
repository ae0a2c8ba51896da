//! `greenwave-controller run --store`: the controller follows the policy store's `current`
//! while it runs, switching a new version in under the runtime's live KPI watch and
//! recording the watch's verdict in the store.
//!
//! - **Switch.** Every `--store-poll-s` of controller time the follower reads `current`.
//!   A version folder other than the one running is loaded with every check the start
//!   makes (signature, manifest, plans, layouts, interval, program clock) and switched in
//!   only once the switch can be watched (`Controller::switch_watchable`: a whole rollback
//!   window of KPIs recorded since the start, so the comparable period before the switch is
//!   as long as the one after). A folder that fails a check is refused, named, and not
//!   tried again by this run; the running policy stays.
//! - **Verdict.** When the watch rolls a version back (the runtime has already switched to
//!   the one before), the store's `current` is switched back to that folder and the event
//!   recorded with its KPI evidence (`watch-rollback`); when it keeps the version,
//!   `watch-kept` is recorded. A version rolled back is never switched in again by this run.
//!   A switch waits while a watch is in progress, and after a rollback (or a switch out
//!   of the fallback, which nothing judges and which is made at once) the next switch
//!   waits for a whole window of the version running then: a version is always compared
//!   with a window of the one it replaces. An operator's `rollback` during a watch (back
//!   to the version it compares with) is followed at the next poll, ending the watch
//!   without a verdict.
//! - **Restart.** A version the store has no verdict on (greenwave-finetune's
//!   `standing`: only an adoption or a `watch-kept` judges a version; a rollback to it says
//!   nothing new) is not trusted at start: the controller starts on its baseline
//!   (`PolicyStore::baseline`: the first judged version going back from `previous`) and
//!   switches the new version in under the watch as above. So a restart in the middle of
//!   a watch, or a controller stopped before it ran one, cannot put an unjudged version in
//!   charge unwatched without saying so: where the store has no baseline, or it fails its
//!   checks, or (out of the fallback) nothing ran to compare with, the unjudged version
//!   runs unwatched and the run reports it as a store error (exit status 1 after the
//!   report).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{value_parser, Args};
use ed25519_dalek::VerifyingKey;
use greenwave_core::Millis;
use greenwave_finetune::{PolicyStore, StoreError};
use greenwave_runtime::controller::{Controller, Policy, RollbackConfig};
use serde::Serialize;

use crate::run::MAX_SECONDS;

/// Warns (a log warning on stderr; `--quiet` shows errors only) of damaged lines in the
/// store's history before a command acts on its verdicts (`run --store`, `finetune`,
/// `rollback`); the command goes on, as the store reads such lines as no verdict.
pub fn warn_of_history_damage(store: &PolicyStore) -> Result<()> {
    if let Some(damage) = store.history_damage()? {
        tracing::warn!("policy store history: {damage}");
    }
    Ok(())
}

/// The `run` options of a controller that follows a policy store.
#[derive(Args, Clone, Debug)]
pub struct FollowArgs {
    /// Run the policy store's `current` version (instead of --bundle) and follow it: a new
    /// version is switched in under the live KPI watch, which rolls it back (in the store
    /// too) on a significant regression. Give --trust for the controller's own key as
    /// well, which signs its fine-tuned versions.
    #[arg(long, conflicts_with = "bundle")]
    pub store: Option<PathBuf>,
    /// Seconds of controller time between two reads of the store's `current` [default:
    /// 10].
    #[arg(long, conflicts_with = "bundle", value_parser = value_parser!(u32).range(1..=MAX_SECONDS))]
    pub store_poll_s: Option<u32>,
    /// The live watch's window (s): how long a switched-in version runs before its KPIs
    /// are compared with the same length of controller time before the switch [default:
    /// 1800].
    #[arg(long, conflicts_with = "bundle", value_parser = value_parser!(u32).range(1..=MAX_SECONDS))]
    pub rollback_window_s: Option<u32>,
    /// The watch's batch (s): the test's unit, at most a quarter of the window (four a side:
    /// fewer could never give a significant test at the default level) [default: 300].
    #[arg(long, conflicts_with = "bundle", value_parser = value_parser!(u32).range(1..=MAX_SECONDS))]
    pub rollback_batch_s: Option<u32>,
}

impl FollowArgs {
    /// The runtime's watch settings from these options (its defaults otherwise).
    pub fn rollback_config(&self) -> Result<RollbackConfig> {
        let d = RollbackConfig::default();
        let window = self.rollback_window_s.map_or(d.window, Millis::from_secs);
        let batch = self.rollback_batch_s.map_or(d.batch, Millis::from_secs);
        let cfg = RollbackConfig { window, batch, ..d };
        cfg.check()
            .context("--rollback-window-s and --rollback-batch-s")?;
        Ok(cfg)
    }
}

/// One policy switch made while running.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchReport {
    /// Controller time of the switch (ms).
    pub at_ms: u64,
    /// The version running before (none: the fallback ran).
    pub from_version: Option<u32>,
    /// The version switched in.
    pub to_version: u32,
    /// Whether the live watch judges it.
    pub watched: bool,
}

/// What following the store did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StoreReport {
    /// The store.
    pub store: PathBuf,
    /// The version folder `current` named at the start.
    pub current_at_start: Option<PathBuf>,
    /// Whether that version awaited the watch's verdict (so the run started on the one
    /// before it, where the store has one).
    pub current_unjudged_at_start: bool,
    /// Switches made while running (in, and the watch's rollbacks).
    pub switches: Vec<SwitchReport>,
    /// Versions refused (a failed check), and why.
    pub refused: Vec<String>,
    /// Verdicts recorded in the store ("watch-kept vN", "watch-rollback vN -> vM").
    pub recorded: Vec<String>,
    /// Store reads and writes that failed (a verdict not recorded, for one).
    pub errors: Vec<String>,
}

/// Follows a policy store while the controller runs (see the module docs).
pub struct StoreFollower {
    store: PolicyStore,
    keys: Vec<VerifyingKey>,
    poll_ms: u64,
    next_poll_ms: u64,
    /// The folder of the version running (none: the fallback).
    running: Option<PathBuf>,
    /// The folder running before the switch now watched.
    before: Option<PathBuf>,
    /// Folders not to switch to again: refused by a check, or rolled back.
    refused: BTreeSet<PathBuf>,
    verdicts_seen: usize,
    deferred_logged: bool,
    /// What it did.
    pub report: StoreReport,
}

impl StoreFollower {
    /// Attaches to the store; returns the follower and the version folders to start on,
    /// in order of preference (the first that loads runs).
    pub fn attach(
        args: &FollowArgs,
        dir: &Path,
        keys: Vec<VerifyingKey>,
    ) -> Result<(Self, Vec<PathBuf>)> {
        let store = PolicyStore::attach(dir)?;
        warn_of_history_damage(&store)?;
        // One state of the store: a fine-tune switching `current` meanwhile must not give
        // the start one state's current and another's baseline.
        let (current, unjudged, baseline) = store.reading(|s| {
            let current = s
                .current()?
                .ok_or_else(|| StoreError::Empty(dir.to_path_buf()))?;
            let unjudged = s.current_unjudged()?.unwrap_or(false);
            Ok((current, unjudged, unjudged.then(|| s.baseline())))
        })?;
        let mut errors = Vec::new();
        let mut start = Vec::new();
        if let Some(baseline) = baseline {
            match baseline {
                Ok(Some(base)) => {
                    tracing::warn!(
                        current = %current.display(),
                        baseline = %base.display(),
                        "the store's current version has no live-watch verdict: starting on \
                         the version before it, to switch it in under the watch"
                    );
                    start.push(base);
                }
                Ok(None) => errors.push(format!(
                    "{} has no live-watch verdict and the store no version before it to \
                     compare it with: it runs unwatched",
                    current.display()
                )),
                Err(e) => errors.push(format!(
                    "{} has no live-watch verdict and the version before it cannot be read \
                     ({e}): it runs unwatched",
                    current.display()
                )),
            }
        }
        start.push(current.clone());
        let start = start
            .into_iter()
            .map(|d| store.version_folder(&d).unwrap_or(d))
            .collect();
        let mut follower = StoreFollower {
            store,
            keys,
            poll_ms: 0,
            next_poll_ms: 0,
            running: None,
            before: None,
            refused: BTreeSet::new(),
            verdicts_seen: 0,
            deferred_logged: false,
            report: StoreReport {
                store: dir.to_path_buf(),
                current_at_start: Some(current),
                current_unjudged_at_start: unjudged,
                ..StoreReport::default()
            },
        };
        for e in errors {
            follower.error(e);
        }
        Ok((follower.with_poll(args.store_poll_s.unwrap_or(10)), start))
    }

    fn with_poll(mut self, seconds: u32) -> Self {
        self.poll_ms = u64::from(seconds) * 1000;
        self.next_poll_ms = self.poll_ms;
        self
    }

    /// The start: `loaded` is the folder whose version runs (none: the fallback); folders
    /// tried before it failed a check and are not tried again.
    pub fn started(&mut self, loaded: Option<&Path>, failed: &[(PathBuf, String)]) {
        self.running = loaded.map(Path::to_path_buf);
        for (dir, why) in failed {
            self.refuse(dir, why);
        }
        let current = self.report.current_at_start.clone();
        let unwatched = self.report.current_unjudged_at_start
            && !failed.is_empty()
            && loaded.is_some()
            && loaded == current.as_deref();
        if unwatched {
            self.error(format!(
                "{} has no live-watch verdict and the version before it failed its checks: \
                 it runs unwatched",
                loaded.map_or(String::new(), |d| d.display().to_string())
            ));
        }
    }

    /// A version that failed to load: refused for the rest of the run when the version is
    /// at fault, tried again at the next poll when the system may be ([`may_pass`]).
    fn refuse_or_retry(&mut self, dir: &Path, e: &anyhow::Error) {
        let why = greenwave_runtime::error_chain(e.as_ref());
        if may_pass(e) {
            self.error(format!(
                "loading {}: {why} (tried again at the next poll)",
                dir.display()
            ));
        } else {
            self.refuse(dir, &why);
        }
    }

    fn refuse(&mut self, dir: &Path, why: &str) {
        tracing::error!(version = %dir.display(), error = why, "policy version refused");
        self.report
            .refused
            .push(format!("{}: {why}", dir.display()));
        self.refused.insert(dir.to_path_buf());
    }

    /// After each decision interval: records the watch's new verdicts, then (every poll
    /// period) switches to the store's `current` if it is new and the switch can be
    /// watched. `load` loads a version folder with the start's checks.
    pub fn between(&mut self, c: &mut Controller, load: &mut dyn FnMut(&Path) -> Result<Policy>) {
        self.record_verdicts(c);
        let now = c.now_ms();
        if now < self.next_poll_ms {
            return;
        }
        self.next_poll_ms = now + self.poll_ms;
        // `current` and, where it names a version to act on, whether an operator's rollback
        // put it there, from one state of the store (a change between the two reads would
        // pair one state's link with another's history); the history is read only then.
        let (running, refused) = (&self.running, &self.refused);
        let read = self.store.reading(|s| {
            let Some(t) = s.current()? else {
                return Ok(None);
            };
            let target = s.version_folder(&t).unwrap_or(t);
            if running.as_ref() == Some(&target) || refused.contains(&target) {
                return Ok(None);
            }
            let rolled_back_to = s.rolled_back_to(&target).unwrap_or(false);
            Ok(Some((target, rolled_back_to)))
        });
        let (target, rolled_back_to) = match read {
            Ok(Some(t)) => t,
            Ok(None) => return,
            Err(e) => return self.error(format!("reading `current`: {e}")),
        };
        // `rollback` by an operator: during a watch, back to the version it compares with;
        // after one, to a version already judged, which is not judged again against the
        // version the operator left (nor would the watch roll the operator's choice back).
        let operator = self.before.as_ref() == Some(&target) || rolled_back_to;
        if operator {
            return self.return_to_before(c, load, target);
        }
        // With a policy running, wait until the switch can be watched; with none (the
        // fallback) there is nothing to compare with, and the policy is better than none.
        if c.policy().is_ok() && !c.switch_watchable() {
            if !self.deferred_logged {
                tracing::info!(
                    version = %target.display(),
                    "new policy version: switching it in once the rollback window before it \
                     is recorded"
                );
                self.deferred_logged = true;
            }
            return;
        }
        match load(&target) {
            Err(e) => self.refuse_or_retry(&target, &e),
            Ok(policy) => {
                if c.policy().is_err() && !self.store.is_judged(&target).unwrap_or(false) {
                    self.error(format!(
                        "{} has no live-watch verdict and nothing ran to compare it with \
                         (the fallback ran): it runs unwatched",
                        target.display()
                    ));
                }
                self.switch_in(c, policy, target)
            }
        }
    }

    /// The store's `current` went back by an operator's `rollback` (during a watch, to the
    /// version running before the watched one): run it now, unwatched, ending any watch
    /// without a verdict; the version left is not switched in again by this run.
    fn return_to_before(
        &mut self,
        c: &mut Controller,
        load: &mut dyn FnMut(&Path) -> Result<Policy>,
        target: PathBuf,
    ) {
        let policy = match load(&target) {
            Ok(p) => p,
            Err(e) => return self.refuse_or_retry(&target, &e),
        };
        let (to_version, from_version) = (policy.version, c.policy().ok().map(|p| p.version));
        if !self.store.is_judged(&target).unwrap_or(false) {
            // A version never kept by a watch (fine-tuned, and rolled back to before any
            // controller watched it): it runs unwatched, which is said, not done silently.
            self.error(format!(
                "{} has no live-watch verdict, and the store's rollback put it in charge: it \
                 runs unwatched",
                target.display()
            ));
        }
        tracing::warn!(
            from = from_version,
            to = to_version,
            "an operator rolled the store's current back: running that version now, \
             unwatched (any watch in progress ended without a verdict)"
        );
        c.switch_policy_unwatched(policy);
        if let Some(watched) = self.running.replace(target) {
            self.refused.insert(watched);
        }
        self.before = None;
        self.report.switches.push(SwitchReport {
            at_ms: c.now_ms(),
            from_version,
            to_version,
            watched: false,
        });
    }

    fn switch_in(&mut self, c: &mut Controller, policy: Policy, dir: PathBuf) {
        let to_version = policy.version;
        let from_version = c.policy().ok().map(|p| p.version);
        let watched = c.switch_policy(policy);
        if !watched {
            tracing::warn!(
                version = to_version,
                "policy version switched in unwatched (no policy ran before it)"
            );
        }
        self.before = if watched { self.running.take() } else { None };
        self.running = Some(dir);
        self.deferred_logged = false;
        self.report.switches.push(SwitchReport {
            at_ms: c.now_ms(),
            from_version,
            to_version,
            watched,
        });
    }

    /// Puts each new verdict of the watch into the store.
    fn record_verdicts(&mut self, c: &Controller) {
        let events = c.rollback_events();
        while self.verdicts_seen < events.len() {
            let e = &events[self.verdicts_seen];
            self.verdicts_seen += 1;
            let evidence = serde_json::to_string(e).unwrap_or_default();
            if !e.rolled_back {
                self.before = None;
                match self.store.record_kept(e.from_version, &evidence) {
                    Ok(()) => self
                        .report
                        .recorded
                        .push(format!("watch-kept v{}", e.from_version)),
                    Err(err) => self.error(format!("recording v{} kept: {err}", e.from_version)),
                }
                continue;
            }
            // The runtime runs the version before again.
            let (bad, good) = (self.running.take(), self.before.take());
            self.running = good.clone();
            if let Some(bad) = &bad {
                self.refused.insert(bad.clone());
            }
            self.report.switches.push(SwitchReport {
                at_ms: e.at_ms,
                from_version: Some(e.from_version),
                to_version: e.to_version,
                watched: false,
            });
            let (Some(bad), Some(good)) = (bad, good) else {
                self.error(format!(
                    "the watch rolled v{} back to v{}, and no version folder is known for \
                     them: not recorded",
                    e.from_version, e.to_version
                ));
                continue;
            };
            match self
                .store
                .watch_rollback(&bad, &good, &self.keys, &evidence)
            {
                Ok(s) => self.report.recorded.push(format!(
                    "watch-rollback v{} -> v{}",
                    s.from.map_or("?".into(), |v| v.to_string()),
                    s.version
                )),
                // A newer version was installed meanwhile: it is the next candidate, judged
                // against the version running again; the verdict is in the history.
                Err(StoreError::Moved { current, .. }) => {
                    tracing::warn!(
                        rolled_back = e.from_version,
                        current = %current,
                        "rolled back in the controller; the store's current moved on \
                         meanwhile and is left as it is"
                    );
                    self.report.recorded.push(format!(
                        "watch-rollback-unapplied v{} -> v{}",
                        e.from_version, e.to_version
                    ));
                }
                Err(err) => self.error(format!(
                    "switching the store back from v{} to v{}: {err}",
                    e.from_version, e.to_version
                )),
            }
        }
    }

    /// Logs and reports a store failure, each distinct one once (an unreadable `current`
    /// fails every poll).
    fn error(&mut self, what: String) {
        if self.report.errors.contains(&what) {
            return;
        }
        tracing::error!(store = %self.store.dir().display(), "policy store: {what}");
        self.report.errors.push(what);
    }
}

/// Loads the first of `dirs` that passes every check; returns the policy (or why none
/// did), the folder it came from, and the folders that failed before it.
pub fn load_first<T>(
    dirs: &[PathBuf],
    mut load: impl FnMut(&Path) -> Result<T>,
) -> (Result<T>, Option<PathBuf>, Vec<(PathBuf, String)>) {
    let mut failed = Vec::new();
    let mut last = None;
    for dir in dirs {
        match load(dir) {
            Ok(p) => return (Ok(p), Some(dir.clone()), failed),
            Err(e) => {
                // The refusal names the folder itself; the fallback's reason needs it here.
                failed.push((dir.clone(), greenwave_runtime::error_chain(e.as_ref())));
                last = Some(e.context(format!("policy version {}", dir.display())));
            }
        }
    }
    let e = last.unwrap_or_else(|| anyhow::anyhow!("no policy version to load"));
    (Err(e), None, failed)
}

/// Whether a load failed for a reason that may pass, the system's rather than the
/// version's: an I/O error other than a missing or malformed file (out of file handles or
/// memory, a permission being fixed, a trust file being replaced).
fn may_pass(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::{InvalidData, InvalidInput, NotFound, UnexpectedEof};
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| {
            !matches!(
                io.kind(),
                NotFound | InvalidData | InvalidInput | UnexpectedEof
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version at fault is refused for good; a system that may recover is retried.
    #[test]
    fn only_a_load_failure_of_the_system_is_tried_again() {
        use std::io::{Error, ErrorKind};
        let io = |kind| anyhow::Error::new(Error::new(kind, "x")).context("verifying v2");
        assert!(may_pass(&io(ErrorKind::PermissionDenied)));
        assert!(may_pass(&io(ErrorKind::OutOfMemory)));
        assert!(!may_pass(&io(ErrorKind::NotFound)));
        assert!(!may_pass(&io(ErrorKind::InvalidData)));
        assert!(!may_pass(&anyhow::anyhow!("signature does not verify")));
    }

    #[test]
    fn the_watch_options_give_the_runtime_settings_or_say_what_is_wrong() {
        let args = |window, batch| FollowArgs {
            store: Some("s".into()),
            store_poll_s: None,
            rollback_window_s: window,
            rollback_batch_s: batch,
        };
        assert_eq!(
            args(None, None).rollback_config().unwrap(),
            RollbackConfig::default()
        );
        let c = args(Some(1200), Some(300)).rollback_config().unwrap();
        assert_eq!((c.window.0, c.batch.0), (1_200_000, 300_000));
        let e = args(None, Some(1000)).rollback_config().unwrap_err();
        assert!(format!("{e:#}").contains("1800.000 s"), "{e:#}");
        // One to three batches a side: the exact test could never reach alpha/2 = 0.025
        // (its smallest p-values are 1/2, 1/6 and 1/20), so every version would be kept.
        for (window, batch) in [(600, 301), (600, 300), (1800, 600), (1800, 900)] {
            let e = args(Some(window), Some(batch))
                .rollback_config()
                .unwrap_err();
            let text = format!("{e:#}");
            assert!(
                text.contains("no regression could be rolled back"),
                "{text}"
            );
            assert!(text.contains("--rollback-batch-s"), "{text}");
            assert!(text.contains("needs 4 batches a side"), "{text}");
        }
        assert!(args(Some(1800), Some(450)).rollback_config().is_ok());
    }
}

/// The follower on a controller driven here, interval by interval, with versions installed
/// at chosen controller times: what a run of the binary cannot arrange.
#[cfg(all(test, feature = "sim"))]
mod sim_tests {
    use super::*;
    use crate::keyed;
    use greenwave_runtime::bundle;
    use greenwave_runtime::controller::{ControllerConfig, Fallback, FallbackKind, Mode, SimField};
    use greenwave_runtime::inference::{load_backend, BackendKind, Explorer};
    use greenwave_sim::EmbeddedEnv;

    const MIN: u64 = 60_000;

    type Rig = keyed::StoreSite;

    fn rig(name: &str) -> Rig {
        keyed::store_site(name)
    }

    fn install(r: &Rig, v: u32, parent: u32, always_first: bool) {
        r.install(v, parent, always_first)
    }

    struct Run {
        c: Controller,
        field: SimField<EmbeddedEnv>,
        f: StoreFollower,
        load: Loader,
    }

    /// Loads a version folder with the start's checks.
    type Loader = Box<dyn FnMut(&Path) -> Result<Policy>>;

    fn keys(r: &Rig) -> Vec<VerifyingKey> {
        vec![r.keyed.site, r.own.verifying_key()]
    }

    /// The start of `run --store` on the steady `finetune-shift` field (default watch).
    fn start(r: &Rig) -> (StoreFollower, Vec<PathBuf>) {
        let args = FollowArgs {
            store: Some(r.store.clone()),
            store_poll_s: None,
            rollback_window_s: None,
            rollback_batch_s: None,
        };
        StoreFollower::attach(&args, &r.store, keys(r)).unwrap()
    }

    fn run(r: &Rig) -> Run {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/scenarios/finetune-shift.toml");
        let scenario = greenwave_sim::load(path.to_str().unwrap()).unwrap();
        let field = SimField::new(EmbeddedEnv::from_scenario(&scenario, 11));
        let specs = field.signal_specs();
        let (plan, layout) = (specs[0].plan.clone(), specs[0].layout);
        let keys = keys(r);
        let mut load: Loader = Box::new(move |d: &Path| {
            let b = bundle::verify_and_load(d, &keys, &plan, layout)?;
            Ok(Policy {
                backend: load_backend(BackendKind::Tract, &b.model, layout, None)?,
                version: b.manifest.policy_version,
                explorer: Explorer::greedy(),
            })
        });
        let (mut f, dirs) = start(r);
        let (policy, from, failed) = load_first(&dirs, &mut load);
        f.started(from.as_deref(), &failed);
        let fallback = Fallback::for_scenario(&scenario, FallbackKind::FixedTime);
        let cfg = ControllerConfig::for_simulated_time(field.decision_interval());
        let policy = policy.map_err(|e| e.to_string());
        let c = Controller::new(specs, policy, fallback, cfg, None).unwrap();
        Run { c, field, f, load }
    }

    impl Run {
        fn until(&mut self, t_ms: u64) {
            while self.c.now_ms() < t_ms {
                assert!(self.c.step(&mut self.field).unwrap());
                self.f.between(&mut self.c, &mut self.load);
            }
        }

        /// (at, from, to, watched) of each switch.
        fn switches(&self) -> Vec<(u64, Option<u32>, u32, bool)> {
            let s = &self.f.report.switches;
            s.iter()
                .map(|w| (w.at_ms, w.from_version, w.to_version, w.watched))
                .collect()
        }

        fn version(&self) -> u32 {
            self.c.policy().unwrap().version
        }
    }

    #[test]
    fn after_a_rollback_the_next_version_waits_for_a_whole_window_of_the_one_running() {
        let r = rig("follow-after-rollback");
        install(&r, 2, 1, true);
        let mut run = run(&r);
        run.until(61 * MIN);
        let sw = run.switches();
        assert_eq!(sw.len(), 2, "{sw:?}");
        assert_eq!((sw[1].1, sw[1].2), (Some(2), 1), "rolled back: {sw:?}");
        let back = sw[1].0;
        install(&r, 3, 1, false);
        run.until(back + 30 * MIN - 10_000);
        assert_eq!(run.switches().len(), 2, "v3 waits for 30 min of v1");
        run.until(back + 31 * MIN);
        let sw = run.switches();
        assert_eq!(sw.len(), 3, "{sw:?}");
        let (at, from, to, watched) = sw[2];
        assert!(at >= back + 30 * MIN, "{sw:?}");
        assert_eq!((from, to, watched), (Some(1), 3, true));
    }

    #[test]
    fn a_version_installed_during_a_watch_waits_for_the_verdict() {
        let r = rig("follow-during-watch");
        install(&r, 2, 1, false);
        let mut run = run(&r);
        run.until(35 * MIN);
        assert_eq!(run.switches().len(), 1);
        install(&r, 3, 2, false);
        run.until(60 * MIN - 10_000);
        assert_eq!(run.switches().len(), 1, "v2's watch runs to its end");
        assert_eq!(run.version(), 2);
        run.until(61 * MIN);
        assert_eq!(run.f.report.recorded, ["watch-kept v2"]);
        let sw = run.switches();
        assert_eq!(sw.len(), 2, "{sw:?}");
        assert_eq!((sw[1].1, sw[1].2, sw[1].3), (Some(2), 3, true));
        assert!(sw[1].0 >= 60 * MIN);
    }

    #[test]
    fn a_rollback_after_current_moved_on_is_recorded_and_a_restart_starts_on_the_good_one() {
        let r = rig("follow-moved");
        install(&r, 2, 1, true);
        let mut run = run(&r);
        run.until(35 * MIN);
        install(&r, 3, 2, false);
        run.until(61 * MIN);
        assert_eq!(run.version(), 1, "v2 rolled back in the controller");
        assert_eq!(run.f.report.recorded, ["watch-rollback-unapplied v2 -> v1"]);
        assert!(run.f.report.errors.is_empty(), "{:?}", run.f.report.errors);
        let store = PolicyStore::attach(&r.store).unwrap();
        assert!(store.current().unwrap().unwrap().ends_with("v000003"));
        // A restart compares v3 with v1, not with the rolled-back v2.
        let (f, dirs) = start(&r);
        assert!(f.report.current_unjudged_at_start);
        assert!(dirs[0].ends_with("versions/v000001"), "{dirs:?}");
        assert!(dirs[1].ends_with("versions/v000003"), "{dirs:?}");
        // And this run switches v3 in only after 30 min of v1, watched.
        run.until(91 * MIN);
        let sw = run.switches();
        assert_eq!((sw[2].1, sw[2].2, sw[2].3), (Some(1), 3, true), "{sw:?}");
    }

    /// An operator's `rollback` during a watch takes effect at the next poll and ends the
    /// watch without a verdict; the watched version is not switched in again.
    #[test]
    fn an_operators_rollback_during_a_watch_takes_effect_at_once() {
        let r = rig("follow-operator");
        install(&r, 2, 1, false);
        let mut run = run(&r);
        run.until(35 * MIN);
        assert_eq!(run.version(), 2);
        PolicyStore::open(&r.store)
            .unwrap()
            .rollback(&keys(&r), "operator")
            .unwrap();
        run.until(35 * MIN + 10_000);
        assert_eq!(run.version(), 1, "back at the next poll");
        run.until(100 * MIN);
        let sw = run.switches();
        assert_eq!(sw.len(), 2, "{sw:?}");
        assert_eq!((sw[1].1, sw[1].2, sw[1].3), (Some(2), 1, false));
        assert!(run.c.rollback_events().is_empty(), "no verdict");
        assert!(run.f.report.recorded.is_empty());
        assert!(run.f.report.errors.is_empty(), "{:?}", run.f.report.errors);
    }

    /// An operator's `rollback` after the watch kept a version takes effect at the next
    /// poll, unwatched: the operator's choice is not judged against the version left (a
    /// busier hour would have had the watch switch that one back in, and mark the
    /// operator's version rolled back), and `rollback` can still go further back.
    #[test]
    fn an_operators_rollback_after_the_verdict_takes_effect_at_once_unwatched() {
        let r = rig("follow-operator-after");
        install(&r, 2, 1, false);
        let mut run = run(&r);
        run.until(61 * MIN);
        assert_eq!(run.f.report.recorded, ["watch-kept v2"]);
        run.until(95 * MIN);
        PolicyStore::open(&r.store)
            .unwrap()
            .rollback(&keys(&r), "operator")
            .unwrap();
        run.until(95 * MIN + 10_000);
        assert_eq!(run.version(), 1, "back at the next poll");
        run.until(160 * MIN);
        let sw = run.switches();
        assert_eq!(sw.len(), 2, "{sw:?}");
        assert_eq!((sw[1].1, sw[1].2, sw[1].3), (Some(2), 1, false));
        assert_eq!(run.c.rollback_events().len(), 1, "no verdict after v2's");
        assert_eq!(run.f.report.recorded, ["watch-kept v2"]);
        assert!(run.f.report.errors.is_empty(), "{:?}", run.f.report.errors);
        let store = PolicyStore::attach(&r.store).unwrap();
        assert!(store.current().unwrap().unwrap().ends_with("v000001"));
    }

    /// An operator's `rollback` to a version no watch ever kept (v3 fine-tuned from v2
    /// before any controller ran v2) runs it at once, as any operator's rollback, and says
    /// that it runs unwatched.
    #[test]
    fn an_operators_rollback_to_an_unjudged_version_is_a_store_error() {
        let r = rig("follow-operator-unjudged");
        install(&r, 2, 1, false);
        install(&r, 3, 2, false);
        let mut run = run(&r);
        run.until(5 * MIN);
        assert_eq!(
            run.version(),
            1,
            "the baseline runs until v3 can be watched"
        );
        PolicyStore::open(&r.store)
            .unwrap()
            .rollback(&keys(&r), "operator")
            .unwrap();
        run.until(5 * MIN + 10_000);
        assert_eq!(run.version(), 2, "the operator's choice, at the next poll");
        let sw = run.switches();
        assert_eq!((sw[0].1, sw[0].2, sw[0].3), (Some(1), 2, false), "{sw:?}");
        let e = &run.f.report.errors;
        assert!(
            e.len() == 1 && e[0].contains("no live-watch verdict"),
            "{e:?}"
        );
    }

    /// The watch rolls back in the controller even when the store cannot follow (here the
    /// version to return to no longer verifies on disk): the failure is reported once,
    /// `current` still names the rolled-back version, and it is not switched in again.
    #[test]
    fn a_rollback_the_store_cannot_record_is_reported_and_not_undone() {
        let r = rig("follow-store-fails");
        install(&r, 2, 1, true);
        let mut run = run(&r);
        run.until(10 * MIN);
        keyed::tamper(&r.store.join("versions/v000001"));
        run.until(120 * MIN);
        assert_eq!(run.version(), 1, "rolled back in the controller");
        assert_eq!(run.switches().len(), 2, "{:?}", run.switches());
        let e = &run.f.report.errors;
        assert!(
            e.len() == 1 && e[0].contains("switching the store back from v2 to v1"),
            "{e:?}"
        );
        let store = PolicyStore::attach(&r.store).unwrap();
        assert!(store.current().unwrap().unwrap().ends_with("v000002"));
    }

    /// Out of the fallback a version is switched in at once; one with no verdict then runs
    /// unwatched, which is a store error.
    #[test]
    fn an_unjudged_version_switched_in_out_of_the_fallback_is_a_store_error() {
        let r = rig("follow-from-fallback");
        keyed::tamper(&r.store.join("versions/v000001"));
        let mut run = run(&r);
        assert!(run.c.policy().is_err(), "nothing loads: the fallback runs");
        run.until(5 * MIN);
        install(&r, 2, 1, false);
        run.until(6 * MIN);
        assert_eq!(run.version(), 2);
        // And it decides: the signal waiting on its fallback for a model takes it.
        assert_eq!(run.c.mode(0), Mode::Policy);
        let sw = run.switches();
        assert_eq!((sw[0].1, sw[0].2, sw[0].3), (None, 2, false), "{sw:?}");
        let e = &run.f.report.errors;
        assert!(
            e.len() == 1 && e[0].contains("nothing ran to compare it with"),
            "{e:?}"
        );
    }

    #[test]
    fn a_baseline_that_fails_its_checks_is_a_store_error() {
        let r = rig("follow-bad-baseline");
        install(&r, 2, 1, false);
        keyed::tamper(&r.store.join("versions/v000001"));
        let run = run(&r);
        assert_eq!(run.version(), 2);
        let e = &run.f.report.errors;
        assert!(e.len() == 1 && e[0].contains("it runs unwatched"), "{e:?}");
        assert!(run.f.report.refused[0].contains("v000001"));
    }
}
