//! `greenwave-controller finetune`: fine-tune the current policy on the transition log,
//! gate it on held-back data and switch to it atomically if it passes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use ed25519_dalek::{SigningKey, VerifyingKey};
use greenwave_finetune::store::{HistoryEntry, Switched};
use greenwave_finetune::{self as ft, PolicyStore};
use greenwave_runtime::bundle;
use serde::Serialize;

use crate::keys::trusted_keys;
#[cfg(feature = "sim")]
use crate::verify::check_scenario;
use crate::verify::check_site;
use crate::Exit;

/// Arguments of `greenwave-controller finetune`.
#[derive(Args)]
pub struct FinetuneArgs {
    /// The controller's policy store (created if missing only with --bundle, which it
    /// adopts); the controller runs `--bundle <STORE>/current`.
    #[arg(long)]
    store: PathBuf,
    /// The flashed bundle, adopted as the store's first version when the store has none.
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// A trusted public key file (repeat for several); the controller's own key (--key) is
    /// trusted too.
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// The controller's own signing key: fine-tuned bundles are signed with it.
    #[arg(long)]
    key: PathBuf,
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Also check the running bundle against this site configuration: a shared policy
    /// against every signal, a per-signal export against its own signal (whose records are
    /// then the ones fine-tuned on).
    #[arg(long)]
    site: Option<PathBuf>,
    /// Fine-tune on this signal's records only (its index in the controller's signals, as
    /// the log records it). Needed for a bundle exported for one signal when the log holds
    /// several signals' records and neither --site nor --scenario says which is its own;
    /// with them, it must be that signal.
    #[arg(long)]
    signal: Option<u16>,
    /// Also check the running bundle against this scenario's signals (plan and layout;
    /// feature `sim`), as --site does.
    #[cfg(feature = "sim")]
    #[arg(long)]
    scenario: Option<String>,
    /// Fine-tune and gate, but switch nothing, write no bundle and adopt no --bundle into
    /// an empty store. The gate's verdict still counts as an attempt against the log (see
    /// --max-attempts), and a rejection is recorded in the store's history if it has a
    /// version.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Also write the report (JSON) to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Seed (critic initialisation, minibatches, bootstrap).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Policy epochs K.
    #[arg(long)]
    epochs: Option<usize>,
    /// Policy learning rate.
    #[arg(long)]
    lr: Option<f64>,
    /// Clip ε.
    #[arg(long)]
    clip: Option<f32>,
    /// KL limit of the update (epochs stop, and the crossing epoch is undone, beyond it).
    #[arg(long)]
    max_kl: Option<f32>,
    /// KL limit of the gate (on held-back states).
    #[arg(long)]
    gate_max_kl: Option<f32>,
    /// One-sided confidence level of the gate's lower bound on the improvement (default
    /// 0.95).
    #[arg(long)]
    gate_level: Option<f32>,
    /// Fewest held-back records where exploration served the candidate's changed choice.
    #[arg(long)]
    gate_min_covered: Option<usize>,
    /// Candidates (of any version) judged on overlapping held-back records before the gate
    /// refuses (default 3; new data: held-back records all newer than those judged).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Discount half-life in seconds (update and gate; γ per decision follows from the
    /// policy's decision interval). Default: the same as training (60 s).
    #[arg(long)]
    discount_half_life_s: Option<f64>,
    /// Critic fitting epochs.
    #[arg(long)]
    q_epochs: Option<usize>,
    /// Expectations over actions: `exact`, or `sampled:M` (M sampled actions).
    #[arg(long, default_value = "exact")]
    expectation: String,
    /// The most recent fraction of the log, held back for the gate (default 0.3).
    #[arg(long)]
    holdout_fraction: Option<f64>,
    /// Fewest usable records to fine-tune on.
    #[arg(long)]
    min_records: Option<usize>,
    /// DIAGNOSTIC ONLY: train the update on the negated reward (a deliberately harmful
    /// update, to see the gate reject it). The gate always uses the logged reward.
    #[arg(long)]
    diagnostic_flip_reward_sign: bool,
}

/// Parses `exact` or `sampled:M`.
fn parse_expectation(s: &str) -> Result<greenwave_finetune::Expectation> {
    use greenwave_finetune::Expectation;
    match s.split_once(':') {
        None if s == "exact" => Ok(Expectation::Exact),
        Some(("sampled", m)) => {
            let m: usize = m
                .parse()
                .with_context(|| format!("--expectation {s}: M is not a number"))?;
            if m == 0 {
                bail!("--expectation {s}: M must be at least 1");
            }
            Ok(Expectation::Sampled(m))
        }
        _ => bail!("--expectation {s}: expected `exact` or `sampled:M`"),
    }
}

fn finetune_config(args: &FinetuneArgs) -> Result<greenwave_finetune::FinetuneConfig> {
    let mut cfg = greenwave_finetune::FinetuneConfig {
        seed: args.seed,
        signal: args.signal,
        flip_reward_sign: args.diagnostic_flip_reward_sign,
        ..Default::default()
    };
    let u = &mut cfg.update;
    u.expectation = parse_expectation(&args.expectation)?;
    if let greenwave_finetune::Expectation::Sampled(m) = u.expectation {
        u.resample = m;
    }
    macro_rules! set {
        ($field:expr, $arg:expr) => {
            if let Some(v) = $arg {
                $field = v;
            }
        };
    }
    set!(u.epochs, args.epochs);
    set!(u.learning_rate, args.lr);
    set!(u.clip_eps, args.clip);
    set!(u.max_kl, args.max_kl);
    set!(u.q_epochs, args.q_epochs);
    set!(cfg.discount.half_life_s, args.discount_half_life_s);
    set!(cfg.gate.max_kl, args.gate_max_kl);
    set!(cfg.gate.level, args.gate_level);
    set!(cfg.gate.min_covered, args.gate_min_covered);
    set!(cfg.max_attempts, args.max_attempts);
    set!(cfg.holdout_fraction, args.holdout_fraction);
    set!(cfg.min_records, args.min_records);
    cfg.validate()?;
    Ok(cfg)
}

#[derive(Serialize)]
struct FinetuneCliReport<'a> {
    /// Whether the candidate is now current.
    switched: bool,
    dry_run: bool,
    /// The version now current.
    current_version: u32,
    /// The candidate's directory, when switched in.
    bundle: Option<String>,
    #[serde(flatten)]
    report: &'a greenwave_finetune::FinetuneReport,
}

/// `greenwave-controller finetune`: fine-tunes, gates and (unless `--dry-run`) switches
/// in the candidate; [`Exit::Rejected`] when the gate refuses it.
pub fn run(args: FinetuneArgs, quiet: bool) -> Result<Exit> {
    let mut cfg = finetune_config(&args)?;
    if let Some(path) = &args.report {
        check_report_path(path)?;
    }
    // Before the store is opened or a bundle adopted: a mistyped log changes nothing.
    if !args.log_dir.is_dir() {
        bail!(
            "--log-dir {}: no such folder (nothing was adopted or fine-tuned)",
            args.log_dir.display()
        );
    }
    let key = bundle::load_signing_key(&args.key)?;
    let mut keys = trusted_keys(&args.trust)?;
    // The controller trusts its own key for its own updates.
    keys.push(key.verifying_key());
    if args.bundle.is_none() {
        // Nothing to adopt: the store must exist (a mistyped path is named, not created).
        PolicyStore::attach(&args.store)
            .with_context(|| format!("opening the policy store {}", args.store.display()))?;
    }
    let store = PolicyStore::open(&args.store)
        .with_context(|| format!("opening the policy store {}", args.store.display()))?;
    crate::follow::warn_of_history_damage(&store)?;
    let current = current_bundle(&store, &args, &keys)?;
    let running = bundle::verify(&current, &keys)
        .with_context(|| format!("verifying the running bundle {}", current.display()))?;
    let mut own = Vec::new();
    if let Some(path) = &args.site {
        own.push((check_site(&running, path)?, path.display().to_string()));
    }
    #[cfg(feature = "sim")]
    if let Some(name) = &args.scenario {
        own.push((check_scenario(&running, name)?, name.clone()));
    }
    cfg.signal = signal_to_tune(args.signal, &own, &running)?;
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("finetune: {line}");
        }
    };
    let outcome =
        ft::finetune(&running.model, &args.log_dir, &cfg, &mut progress).context("fine-tuning")?;
    let report = &outcome.report;
    let parent_version = outcome.parent.policy_version;
    let switched = apply_verdict(&store, &outcome, &args, &cfg, &key, &keys)?;
    let out = FinetuneCliReport {
        switched: switched.is_some(),
        dry_run: args.dry_run,
        current_version: switched.as_ref().map_or(parent_version, |s| s.version),
        bundle: switched.as_ref().map(|s| s.dir.display().to_string()),
        report,
    };
    let json = serde_json::to_string_pretty(&out)?;
    if args.json {
        say!("{json}");
    } else {
        print_report(report, switched.as_ref(), args.dry_run, parent_version);
    }
    if let Some(path) = &args.report {
        std::fs::write(path, &json).with_context(|| {
            let done = match &switched {
                Some(s) => format!("the store did switch to version {}; ", s.version),
                None => String::new(),
            };
            format!("{done}writing the report {}", path.display())
        })?;
    }
    Ok(if report.gate.accepted {
        Exit::Ok
    } else {
        Exit::Rejected
    })
}

/// The signal whose records are fine-tuned on: `--signal`, which must be the index that
/// each checked site or scenario (`own`: the index it gives the signal a per-signal
/// export was made for, and its name) gives that signal; without `--signal`, that index.
fn signal_to_tune(
    asked: Option<u16>,
    own: &[(Option<u16>, String)],
    running: &bundle::VerifiedBundle,
) -> Result<Option<u16>> {
    let mut chosen = asked;
    let id = greenwave_runtime::bundle_set::exported_for(running).unwrap_or_default();
    for (index, what) in own {
        let Some(index) = *index else { continue };
        match chosen {
            Some(s) if s != index && asked.is_some() => bail!(
                "--signal {s}: the bundle was exported for signal {id}, which is signal {index} of {what}"
            ),
            Some(s) if s != index => bail!(
                "the bundle was exported for signal {id}, which is signal {s} of --site and signal {index} of {what}"
            ),
            Some(_) => {}
            None => {
                eprintln!(
                    "fine-tuning on signal {index}'s records: the bundle was exported for {id}, signal {index} of {what}"
                );
                chosen = Some(index);
            }
        }
    }
    Ok(chosen)
}

/// Refuses a `--report` path whose folder is missing, or that is a folder, before anything
/// is fine-tuned or switched: the report is written last, after the store may have changed.
fn check_report_path(path: &Path) -> Result<()> {
    let folder = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !folder.is_dir() {
        bail!(
            "--report {}: its folder {} does not exist",
            path.display(),
            folder.display()
        );
    }
    if path.is_dir() {
        bail!("--report {}: is a folder, not a file", path.display());
    }
    Ok(())
}

/// The store's current bundle; a store without one adopts `--bundle` as its first version.
/// With both, `--bundle` must be the current version (same signature).
fn current_bundle(
    store: &PolicyStore,
    args: &FinetuneArgs,
    keys: &[VerifyingKey],
) -> Result<PathBuf> {
    Ok(match (store.current()?, &args.bundle) {
        (None, None) => bail!(ft::StoreError::Empty(args.store.clone())),
        (None, Some(b)) if args.dry_run => {
            eprintln!("dry run: {} is fine-tuned without adopting it", b.display());
            b.clone()
        }
        (None, Some(b)) => {
            let s = store
                .adopt(b, keys)
                .context("adopting the flashed bundle")?;
            eprintln!("adopted {} as version {}", b.display(), s.version);
            s.dir
        }
        (Some(cur), Some(b)) => {
            let sig = |d: &Path| std::fs::read(d.join(bundle::SIGNATURE_FILE)).ok();
            if sig(&cur) != sig(b) {
                bail!(
                    "the store already runs {} and --bundle {} is a different bundle: omit --bundle (the store's current version is fine-tuned)",
                    cur.display(),
                    b.display()
                );
            }
            cur
        }
        (Some(cur), None) => cur,
    })
}

/// Acts on the gate's verdict: an accepted candidate is signed, installed and switched in
/// (unless `--dry-run`); a rejected one is recorded in the store's history.
fn apply_verdict(
    store: &PolicyStore,
    outcome: &ft::Outcome,
    args: &FinetuneArgs,
    cfg: &ft::FinetuneConfig,
    key: &SigningKey,
    keys: &[VerifyingKey],
) -> Result<Option<Switched>> {
    let report = &outcome.report;
    let parent_version = outcome.parent.policy_version;
    if report.gate.accepted && !args.dry_run {
        let version = store.next_version(parent_version)?;
        let command = format!(
            "greenwave-controller finetune --log-dir {} --seed {}",
            args.log_dir.display(),
            args.seed
        );
        let manifest = ft::candidate_manifest(&outcome.parent, version, report, cfg, &command);
        let s = store
            .install(&outcome.weights, &manifest, key, keys, &report.gate.reason)
            .context("writing and switching to the fine-tuned version")?;
        return Ok(Some(s));
    }
    // A dry run on an empty store adopted nothing: no version for the line to be about.
    if !report.gate.accepted && store.current()?.is_some() {
        store.record(&HistoryEntry {
            unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            event: greenwave_finetune::standing::event::FINETUNE_REJECTED.into(),
            from_version: Some(parent_version),
            to_version: Some(parent_version),
            detail: report.gate.reason.clone(),
        })?;
    }
    Ok(None)
}

/// The text report: the log, the update, the gate and what was switched.
fn print_report(
    report: &ft::FinetuneReport,
    switched: Option<&Switched>,
    dry_run: bool,
    parent_version: u32,
) {
    let u = &report.update;
    let g = &report.gate;
    say!(
        "log: {} records used ({} decision states) of {} read, {} segment problem(s) skipped",
        report.log.records_used,
        report.log.decision_states,
        report.log.records_read,
        report.log.issues.len()
    );
    for i in &report.log.issues {
        say!("  skipped: {i}");
    }
    say!(
        "update: critic loss {:.4}; {} policy epoch(s){}, KL {:.4}, objective {:+.5}{}",
        u.critic_loss,
        u.policy.epochs,
        match (u.policy.stopped_by_kl, u.policy.reverted_epoch) {
            (true, true) => " (the epoch that crossed the KL limit was undone)",
            (true, false) => " (stopped by the KL limit)",
            _ => "",
        },
        u.policy.kl,
        u.policy.objective,
        if u.flipped_reward_sign {
            " [DIAGNOSTIC: reward sign flipped]"
        } else {
            ""
        }
    );
    say!(
        "gate: held back {} records ({} decision states); {}",
        g.held_back_records,
        g.held_back_decision_states,
        g.reason
    );
    match (switched, dry_run, g.accepted) {
        (Some(s), _, _) => say!(
            "switched: v{} -> v{} ({}), previous kept for rollback",
            parent_version,
            s.version,
            s.dir.display()
        ),
        (None, true, true) => say!("dry run: would switch in a new version"),
        _ => say!("kept v{parent_version}"),
    }
    say!(
        "{:.1} s, peak RSS {} KiB",
        report.wall_s,
        report.peak_rss_kib.map_or("?".into(), |k| k.to_string())
    );
}
