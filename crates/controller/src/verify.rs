//! `greenwave-controller verify`: check a bundle's signature, integrity and manifest, and
//! with `--site` (or `--scenario`, feature `sim`) also its plan against every signal.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use greenwave_runtime::bundle::{self, key_hex, VerifiedBundle};
use greenwave_runtime::controller::SignalSpec;
#[cfg(feature = "sim")]
use greenwave_runtime::controller::SimField;
use greenwave_runtime::site::SiteConfig;

use crate::keys::trusted_keys;

/// Arguments of `greenwave-controller verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// The bundle directory.
    #[arg(long)]
    bundle: PathBuf,
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
}

/// `greenwave-controller verify`: verifies the bundle and prints its signer and manifest.
pub fn run(args: VerifyArgs) -> Result<()> {
    let keys = trusted_keys(&args.trust)?;
    let b = bundle::verify(&args.bundle, &keys)?;
    let m = &b.manifest;
    println!(
        "bundle {}: signature by {} verified",
        args.bundle.display(),
        key_hex(&b.signer)
    );
    println!(
        "policy v{} for plan {} ({} lanes × {} phases, decisions every {} s), trained by `{}` (code revision {})",
        m.policy_version,
        m.plan_hash,
        m.obs_layout.n_lanes,
        m.obs_layout.n_phases,
        m.decision_interval.as_secs_f32(),
        m.provenance.command,
        m.provenance.git_rev
    );
    if let Some(path) = &args.site {
        check_site(&b, path)?;
        println!("matches every signal of {}", path.display());
    }
    #[cfg(feature = "sim")]
    if let Some(name) = &args.scenario {
        check_scenario(&b, name)?;
        println!("matches every signal of {name}");
    }
    Ok(())
}

/// Checks the bundle against every signal of the site configuration at `path`, and its
/// decision interval against the site's (what `run --site` checks).
pub fn check_site(b: &VerifiedBundle, path: &std::path::Path) -> Result<()> {
    let site = SiteConfig::load(path)?;
    let what = path.display().to_string();
    b.check_decision_interval(site.decision_interval())
        .with_context(|| what.clone())?;
    check_signals(b, &site.signal_specs(), &what)
}

/// Checks the bundle against every signal of `specs` (plan, layout, program clock), `what`
/// naming them.
fn check_signals(b: &VerifiedBundle, specs: &[SignalSpec], what: &str) -> Result<()> {
    b.check_program_clock(specs.iter().all(|s| s.program_clock.is_some()))
        .with_context(|| what.to_string())?;
    for (i, s) in specs.iter().enumerate() {
        b.check_signal(&s.plan, s.layout)
            .with_context(|| format!("signal {i} ({}) of {what}", s.id))?;
    }
    Ok(())
}

/// Checks the bundle against every signal of the scenario `name` (plan and layout).
#[cfg(feature = "sim")]
pub fn check_scenario(b: &VerifiedBundle, name: &str) -> Result<()> {
    let scenario = greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
    let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
    check_signals(b, &SimField::new(env).signal_specs(), name)
}
