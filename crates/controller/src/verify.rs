//! `greenwave-controller verify`: check a bundle's signature, integrity and manifest, and
//! with `--site` (or `--scenario`, feature `sim`) also its plan against every signal.
//! With `--bundle` repeated, each bundle, and then that the set runs the field as `run`
//! would take it (greenwave-runtime's `bundle_set`: each signal its bundle).
//! With `--firmware-blob`, writes the verified bundle's blob for a firmware image.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use greenwave_core::mlp::MlpBlob;
use greenwave_core::Millis;
use greenwave_runtime::bundle::{self, key_hex, VerifiedBundle};
use greenwave_runtime::bundle_set::{check_runs_on, exported_for, BundleSet};
use greenwave_runtime::controller::SignalSpec;
#[cfg(feature = "sim")]
use greenwave_runtime::controller::SimField;
use greenwave_runtime::site::SiteConfig;

use crate::keys::trusted_keys;

/// Arguments of `greenwave-controller verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// The bundle directory (repeat for a field whose signals run one bundle each).
    #[arg(long, required = true)]
    bundle: Vec<PathBuf>,
    /// A trusted public key file (repeat for several).
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Also check the bundle against every signal of this site configuration.
    #[arg(long)]
    site: Option<PathBuf>,
    /// Also check the bundle against this scenario's signals (feature `sim`).
    #[cfg(feature = "sim")]
    #[arg(long)]
    scenario: Option<String>,
    /// Once the bundle verified and matched --site (or --scenario), which this needs, write
    /// its firmware blob to this file: the blob to build a firmware image with, so that an
    /// image only ever holds a policy a trusted key signed for the cabinet's plan.
    #[arg(long, value_name = "FILE")]
    firmware_blob: Option<PathBuf>,
    /// With --firmware-blob: the bundle's int8 blob instead of its f32 one.
    #[arg(long, requires = "firmware_blob")]
    int8: bool,
}

/// `greenwave-controller verify`: verifies each bundle and prints its signer and manifest;
/// with a site or scenario, checks the bundles against its signals.
pub fn run(args: VerifyArgs) -> Result<()> {
    #[cfg(feature = "sim")]
    let signals_given = args.site.is_some() || args.scenario.is_some();
    #[cfg(not(feature = "sim"))]
    let signals_given = args.site.is_some();
    if args.firmware_blob.is_some() && !signals_given {
        anyhow::bail!(
            "--firmware-blob needs --site (or --scenario): a blob is written only once its \
             plan has been checked against the cabinet's signals"
        );
    }
    let keys = trusted_keys(&args.trust)?;
    let mut bundles = Vec::with_capacity(args.bundle.len());
    for dir in &args.bundle {
        let b = bundle::verify(dir, &keys).with_context(|| format!("bundle {}", dir.display()))?;
        describe(&b);
        bundles.push(b);
    }
    if let Some(path) = &args.site {
        let site = SiteConfig::load(path)?;
        let what = path.display().to_string();
        let specs = site.signal_specs();
        check_set(&bundles, &specs, Some(site.decision_interval()), &what)?;
        say!("matches every signal of {what}");
    }
    #[cfg(feature = "sim")]
    if let Some(name) = &args.scenario {
        let (specs, interval) = scenario_specs(name)?;
        check_set(&bundles, &specs, Some(interval), name)?;
        say!("matches every signal of {name}");
    }
    if let Some(out) = &args.firmware_blob {
        let [b] = bundles.as_slice() else {
            anyhow::bail!(
                "--firmware-blob writes one bundle's blob; {} bundles were given",
                bundles.len()
            );
        };
        write_firmware_blob(b, args.int8, out)?;
    }
    Ok(())
}

/// Writes the verified bundle's f32 (or int8) blob to `out`, if the firmware would run it
/// (a format-1 blob, from a bundle signed before blobs carried a CRC-32, it refuses).
fn write_firmware_blob(b: &VerifiedBundle, int8: bool, out: &Path) -> Result<()> {
    if let Some(t) = b.manifest.decision_temperature {
        anyhow::bail!(
            "bundle {}: its policy acts at decision temperature {t} and has no firmware blob \
             (the firmware acts greedily); train with --decision-rule greedy for the firmware",
            b.dir.display()
        );
    }
    let (name, bytes) = if int8 {
        let bytes = b.blob_int8.as_deref().with_context(|| {
            format!(
                "bundle {} has no {}: export the policy with it, or leave out --int8",
                b.dir.display(),
                bundle::BLOB_INT8_FILE
            )
        })?;
        (bundle::BLOB_INT8_FILE, bytes)
    } else {
        (bundle::BLOB_FILE, b.blob.as_slice())
    };
    MlpBlob::parse(bytes).with_context(|| {
        format!(
            "bundle {}: its {name} is one the firmware refuses",
            b.dir.display()
        )
    })?;
    greenwave_policy::files::write_together(&[(out, bytes, 0o644)])
        .map_err(|(path, e)| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    say!(
        "wrote the bundle's {name} ({} bytes, policy v{} for plan {}) to {}",
        bytes.len(),
        b.manifest.policy_version,
        b.manifest.plan_hash,
        out.display()
    );
    Ok(())
}

fn describe(b: &VerifiedBundle) {
    let m = &b.manifest;
    say!(
        "bundle {}: signature by {} verified",
        b.dir.display(),
        key_hex(&b.signer)
    );
    say!(
        "policy v{} for plan {} ({} lanes × {} phases, decisions every {} s), trained by `{}` (code revision {})",
        m.policy_version,
        m.plan_hash,
        m.obs_layout.n_lanes,
        m.obs_layout.n_phases,
        m.decision_interval.as_secs_f32(),
        m.provenance.command,
        m.provenance.git_rev
    );
    match m.decision_temperature {
        Some(t) => say!(
            "it draws its phases at decision temperature {t} (no firmware blob: the firmware \
             acts greedily)"
        ),
        None => say!("it takes its best-scored phase (greedy)"),
    }
}

/// Checks `bundles` against the signals `specs` (`what` naming them): one bundle against
/// every signal, several as a set (each signal its bundle, which it then checks), each at
/// the decision interval `interval` where the signals' configuration fixes one.
fn check_set(
    bundles: &[VerifiedBundle],
    specs: &[SignalSpec],
    interval: Option<Millis>,
    what: &str,
) -> Result<()> {
    if let [b] = bundles {
        if let Some(i) = interval {
            b.check_decision_interval(i)
                .with_context(|| what.to_string())?;
        }
        return check_signals(b, specs, what);
    }
    let set = BundleSet::assign(bundles.to_vec(), specs).with_context(|| what.to_string())?;
    for (k, b) in set.bundles().iter().enumerate() {
        let own: Vec<SignalSpec> = set
            .signals_of(k)
            .iter()
            .map(|&i| specs[i].clone())
            .collect();
        if let Some(i) = interval {
            b.check_decision_interval(i)
                .with_context(|| format!("bundle {} on {what}", b.dir.display()))?;
        }
        check_signals(b, &own, what).with_context(|| format!("bundle {}", b.dir.display()))?;
    }
    for (s, &k) in specs.iter().zip(set.of_signal()) {
        say!("signal {} runs {}", s.id, set.bundles()[k].dir.display());
    }
    Ok(())
}

/// Checks the bundle against the site configuration at `path` as `finetune` runs it: its
/// decision interval against the site's, and a shared policy against every signal, a
/// per-signal export against its own signal only. Returns that signal's index (None for a
/// shared policy).
pub fn check_site(b: &VerifiedBundle, path: &std::path::Path) -> Result<Option<u16>> {
    let site = SiteConfig::load(path)?;
    let what = path.display().to_string();
    b.check_decision_interval(site.decision_interval())
        .with_context(|| what.clone())?;
    check_own_signals(b, &site.signal_specs(), &what)
}

/// A shared policy is checked against every signal of `specs`; a per-signal export
/// against the one it was exported for, whose index is returned (an error when `specs`
/// has no signal of that id).
fn check_own_signals(b: &VerifiedBundle, specs: &[SignalSpec], what: &str) -> Result<Option<u16>> {
    let Some(id) = exported_for(b) else {
        check_signals(b, specs, what)?;
        return Ok(None);
    };
    let Some(i) = specs.iter().position(|s| s.id == id) else {
        let ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
        anyhow::bail!(
            "the bundle was exported for signal {id}, which {what} does not have (its signals: {})",
            ids.join(", ")
        );
    };
    check_signal(b, i, &specs[i], what)?;
    let index = u16::try_from(i)
        .with_context(|| format!("signal {i} ({id}) of {what}: index beyond u16"))?;
    Ok(Some(index))
}

/// Checks the bundle against every signal of `specs` (plan, layout, program clock), `what`
/// naming them.
fn check_signals(b: &VerifiedBundle, specs: &[SignalSpec], what: &str) -> Result<()> {
    for (i, s) in specs.iter().enumerate() {
        check_signal(b, i, s, what)?;
    }
    Ok(())
}

/// Checks the bundle against signal `i` (`s`) of `what`.
fn check_signal(b: &VerifiedBundle, i: usize, s: &SignalSpec, what: &str) -> Result<()> {
    let context = || format!("signal {i} ({}) of {what}", s.id);
    b.check_program_clock(s.program_clock.is_some())
        .with_context(context)?;
    b.check_signal(&s.plan, s.layout).with_context(context)?;
    check_runs_on(b, i, s).with_context(|| what.to_string())?;
    Ok(())
}

/// Checks the bundle against the scenario `name` as `finetune` runs it: its decision
/// interval, and its signals as [`check_site`] does.
#[cfg(feature = "sim")]
pub fn check_scenario(b: &VerifiedBundle, name: &str) -> Result<Option<u16>> {
    let (specs, interval) = scenario_specs(name)?;
    b.check_decision_interval(interval)
        .with_context(|| name.to_string())?;
    check_own_signals(b, &specs, name)
}

/// The signals of the scenario `name`, and its decision interval (what `run --scenario`
/// decides at).
#[cfg(feature = "sim")]
fn scenario_specs(name: &str) -> Result<(Vec<SignalSpec>, Millis)> {
    let scenario = greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
    let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
    let field = SimField::new(env);
    Ok((field.signal_specs(), field.decision_interval()))
}
