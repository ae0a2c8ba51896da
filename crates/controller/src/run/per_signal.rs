//! `run --bundle A --bundle B …`: a field whose signals have different plans or layouts
//! (a policy exported once per signal, `greenwave export`) runs each signal from the
//! bundle made for it, all in one controller. Which signal runs which is
//! greenwave-runtime's `bundle_set` rule; every bundle also passes every check a single
//! bundle does (signature against the trusted keys, integrity, plan hash and layout for
//! each signal it serves, program clock, decision interval). A set that fails any of them
//! is refused whole, and every signal runs its fallback (or, with `--require-policy`, the
//! run stops).

use std::path::PathBuf;

use anyhow::{Context, Result};
use greenwave_core::Millis;
use greenwave_runtime::bundle::{self, VerifiedBundle};
use greenwave_runtime::bundle_set::BundleSet;
use greenwave_runtime::controller::{Policy, SignalSpec};
use greenwave_runtime::inference::{load_backend, PerSignalBackend, PolicyBackend};

use super::{check_run_timing, explorer, RunArgs};
use crate::keys::trusted_keys;

/// Verifies every bundle in `dirs`, gives each signal of `specs` its bundle and loads
/// them as one policy; with the first bundle, for the report.
pub(super) fn load(
    args: &RunArgs,
    dirs: &[PathBuf],
    specs: &[SignalSpec],
    interval: Millis,
) -> Result<(Policy, VerifiedBundle)> {
    let set = verify_set(&args.trust, dirs, specs)?;
    let mut backends: Vec<Box<dyn PolicyBackend>> = Vec::with_capacity(set.bundles.len());
    for (k, b) in set.bundles.iter().enumerate() {
        let context = || format!("bundle {}", b.dir.display());
        check_run_timing(args, b, specs, interval).with_context(context)?;
        let layout = specs[set.first_signal(k)].layout;
        let ort = args.ort_lib.as_deref();
        backends.push(load_backend(args.backend, &b.model, layout, ort).with_context(context)?);
    }
    for (s, b) in specs.iter().zip(&set.of_signal) {
        tracing::info!(signal = %s.id, bundle = %set.bundles[*b].dir.display(), "signal's policy");
    }
    let policy = Policy {
        backend: Box::new(PerSignalBackend::new(backends, set.of_signal)?),
        version: set.bundles[0].manifest.policy_version,
        explorer: explorer(args)?,
    };
    let first = set.bundles.into_iter().next().context("no bundle given")?;
    Ok((policy, first))
}

/// Verifies every bundle in `dirs` against the keys in `trust` and gives each of `specs`
/// its bundle.
fn verify_set(trust: &[PathBuf], dirs: &[PathBuf], specs: &[SignalSpec]) -> Result<BundleSet> {
    let keys = trusted_keys(trust)?;
    let bundles = dirs
        .iter()
        .map(|d| bundle::verify(d, &keys).with_context(|| format!("bundle {}", d.display())))
        .collect::<Result<Vec<_>>>()?;
    Ok(BundleSet::assign(bundles, specs)?)
}
