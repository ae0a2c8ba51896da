//! `run --bundle A --bundle B …`: a field whose signals have different plans or layouts
//! (a shared policy exported once per signal, `greenwave export`) runs each signal from
//! the bundle made for it, all in one controller.
//!
//! Each signal takes the bundle whose manifest names it (`provenance.details.signal_id`,
//! written by a per-signal export), else the first given that fits its plan and layout.
//! Every bundle passes every check a single bundle does (signature against the trusted
//! keys, integrity, plan hash and layout for each signal it serves, program clock,
//! decision interval); every bundle given must serve a signal, and all must carry one
//! policy version, since the transition log records one version per decision and the
//! fine-tune and the store work on one version. Anything else refuses the whole set, and
//! every signal runs its fallback (or, with `--require-policy`, the run stops).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use greenwave_core::Millis;
use greenwave_runtime::bundle::{self, VerifiedBundle};
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
    let keys = trusted_keys(&args.trust)?;
    let bundles = dirs
        .iter()
        .map(|d| bundle::verify(d, &keys).with_context(|| format!("bundle {}", d.display())))
        .collect::<Result<Vec<_>>>()?;
    let of_signal = assign(&bundles, specs)?;
    let mut backends: Vec<Box<dyn PolicyBackend>> = Vec::with_capacity(bundles.len());
    for (k, b) in bundles.iter().enumerate() {
        let Some(i) = of_signal.iter().position(|&x| x == k) else {
            bail!(
                "bundle {}: no signal of the field runs it (each signal runs the bundle \
                 exported for it, else the first given that fits its plan and layout)",
                b.dir.display()
            );
        };
        check_same_version(&bundles[0], b)?;
        check_run_timing(args, b, specs, interval)
            .with_context(|| format!("bundle {}", b.dir.display()))?;
        let backend = load_backend(
            args.backend,
            &b.model,
            specs[i].layout,
            args.ort_lib.as_deref(),
        )
        .with_context(|| format!("bundle {}", b.dir.display()))?;
        backends.push(backend);
    }
    for (s, &k) in specs.iter().zip(&of_signal) {
        tracing::info!(signal = %s.id, bundle = %bundles[k].dir.display(), "signal's policy");
    }
    let policy = Policy {
        backend: Box::new(PerSignalBackend::new(backends, of_signal)?),
        version: bundles[0].manifest.policy_version,
        explorer: explorer(args)?,
    };
    let first = bundles.into_iter().next().context("no bundle given")?;
    Ok((policy, first))
}

/// The signal a per-signal export was made for.
fn exported_for(b: &VerifiedBundle) -> Option<&str> {
    b.manifest.provenance.details.get("signal_id")?.as_str()
}

/// For each signal, the index of its bundle: the one exported for it, else the first that
/// fits its plan and layout. A signal no bundle fits is refused with each bundle's reason.
fn assign(bundles: &[VerifiedBundle], specs: &[SignalSpec]) -> Result<Vec<usize>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let name = || format!("signal {i} ({})", s.id);
            if let Some(k) = bundles.iter().position(|b| exported_for(b) == Some(&s.id)) {
                let dir = bundles[k].dir.display();
                bundles[k]
                    .check_signal(&s.plan, s.layout)
                    .with_context(|| format!("{}: bundle {dir}, exported for it", name()))?;
                return Ok(k);
            }
            let mut why = Vec::with_capacity(bundles.len());
            for (k, b) in bundles.iter().enumerate() {
                match b.check_signal(&s.plan, s.layout) {
                    Ok(()) => return Ok(k),
                    Err(e) => why.push(format!("{}: {e}", b.dir.display())),
                }
            }
            bail!("{}: no bundle given fits it ({})", name(), why.join("; "))
        })
        .collect()
}

/// One policy version for every bundle (the log records one per decision).
fn check_same_version(first: &VerifiedBundle, b: &VerifiedBundle) -> Result<()> {
    let (v0, v) = (first.manifest.policy_version, b.manifest.policy_version);
    if v != v0 {
        bail!(
            "bundle {} holds policy version {v}, bundle {} version {v0}: the bundles run \
             together must be one policy's (one export, signed per signal)",
            b.dir.display(),
            first.dir.display()
        );
    }
    Ok(())
}
