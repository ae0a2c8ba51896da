//! `greenwave-controller verify`: check a bundle's signature, integrity and manifest, and
//! with `--scenario` also its plan against the scenario's signals.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use greenwave_runtime::bundle::{self, key_hex, VerifiedBundle};
use greenwave_runtime::controller::SimField;

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
    /// Also check the bundle against this scenario's signals.
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
        "policy v{} for plan {} ({} lanes × {} phases, decisions every {} s), trained by `{}` at {}",
        m.policy_version,
        m.plan_hash,
        m.obs_layout.n_lanes,
        m.obs_layout.n_phases,
        m.decision_interval_s,
        m.provenance.command,
        m.provenance.git_rev
    );
    if let Some(name) = &args.scenario {
        check_scenario(&b, name)?;
        println!("matches every signal of {name}");
    }
    Ok(())
}

/// Checks the bundle against every signal of the scenario `name` (plan and layout).
pub fn check_scenario(b: &VerifiedBundle, name: &str) -> Result<()> {
    let scenario = greenwave_sim::load(name).with_context(|| format!("loading scenario {name}"))?;
    let env = greenwave_sim::EmbeddedEnv::from_scenario(&scenario, 0);
    for (i, s) in SimField::new(env).signal_specs().iter().enumerate() {
        b.check_signal(&s.plan, s.layout)
            .with_context(|| format!("signal {i} ({}) of {name}", s.id))?;
    }
    Ok(())
}
