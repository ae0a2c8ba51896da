//! `run --bundle A --bundle B …`: a field whose signals have different plans or layouts
//! (a policy exported once per signal, `greenwave export`) runs each signal from the
//! bundle made for it, all in one controller. Which signal runs which is
//! greenwave-runtime's `bundle_set` rule; every bundle also passes every check a single
//! bundle does, for the signals it runs (signature against the trusted keys, integrity,
//! plan hash and layout, program clock, decision interval). A set that fails any of them
//! is refused whole, and every signal runs its fallback (or, with `--require-policy`, the
//! run stops).

use std::path::PathBuf;

use anyhow::{Context, Result};
use greenwave_core::Millis;
use greenwave_runtime::bundle::{self, key_hex};
use greenwave_runtime::bundle_set::BundleSet;
use greenwave_runtime::controller::{Policy, SignalSpec};
use greenwave_runtime::inference::{load_backend, PerSignalBackend, PolicyBackend};

use super::{check_run_timing, explorer, LoadedPolicy, RunArgs, SignalBundle};
use crate::keys::trusted_keys;

/// Verifies every bundle in `dirs`, gives each signal of `specs` its bundle and loads
/// them as one policy.
pub(super) fn load(
    args: &RunArgs,
    dirs: &[PathBuf],
    specs: &[SignalSpec],
    interval: Millis,
) -> Result<LoadedPolicy> {
    let set = verify_set(&args.trust, dirs, specs)?;
    let mut backends: Vec<Box<dyn PolicyBackend>> = Vec::with_capacity(set.bundles().len());
    for (k, b) in set.bundles().iter().enumerate() {
        let context = || format!("bundle {}", b.dir.display());
        let own: Vec<SignalSpec> = set
            .signals_of(k)
            .iter()
            .map(|&i| specs[i].clone())
            .collect();
        check_run_timing(args, b, &own, interval).with_context(context)?;
        let ort = args.ort_lib.as_deref();
        backends
            .push(load_backend(args.backend, &b.model, own[0].layout, ort).with_context(context)?);
    }
    let signals = specs
        .iter()
        .zip(set.of_signal())
        .map(|(s, &k)| {
            let b = &set.bundles()[k];
            SignalBundle {
                signal: s.id.clone(),
                bundle: b.dir.display().to_string(),
                signer: key_hex(&b.signer),
            }
        })
        .collect();
    let temperature = set.decision_temperature();
    let (bundles, of_signal) = set.into_parts();
    let policy = Policy {
        backend: Box::new(PerSignalBackend::new(backends, of_signal)?),
        version: bundles[0].manifest.policy_version,
        explorer: explorer(args, temperature)?,
    };
    Ok(LoadedPolicy {
        policy,
        signer: bundles[0].signer,
        signals,
    })
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
