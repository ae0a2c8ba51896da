//! Several bundles for one field: which signal runs which.
//!
//! A policy for junctions of different plans or layouts (a shared policy, or an MLP over
//! lights of different plans) is exported once per signal and signed into one bundle per
//! signal. A controller running several such junctions takes them together, and this is
//! the one rule that gives each signal its bundle:
//!
//! * the bundle whose manifest names the signal (`provenance.details.signal_id`, which a
//!   per-signal export writes), which must then fit the signal's plan and layout;
//! * else the first bundle, in the order given, that fits them.
//!
//! A signal no bundle fits, a bundle no signal takes, or bundles of different policy
//! versions (the transition log records one version per decision, and fine-tuning and the
//! policy store work on one) refuse the whole set.

use std::path::PathBuf;

use crate::bundle::{BundleError, VerifiedBundle};
use crate::controller::SignalSpec;

/// Why a set of bundles cannot run a field.
#[derive(Debug, thiserror::Error)]
pub enum BundleSetError {
    /// No bundle was given.
    #[error("no bundle given")]
    Empty,
    /// The bundle exported for a signal does not fit it.
    #[error("signal {signal} ({id}): bundle {}, exported for it", dir.display())]
    ExportedFor {
        /// The signal's index.
        signal: usize,
        /// Its id.
        id: String,
        /// The bundle that names it.
        dir: PathBuf,
        /// Why it does not fit.
        #[source]
        source: Box<BundleError>,
    },
    /// No bundle fits a signal.
    #[error("signal {signal} ({id}): no bundle given fits it ({reasons})")]
    NoFit {
        /// The signal's index.
        signal: usize,
        /// Its id.
        id: String,
        /// Each bundle and why it does not fit.
        reasons: String,
    },
    /// A bundle no signal takes.
    #[error(
        "bundle {}: no signal of the field runs it (each signal runs the bundle exported \
         for it, else the first given that fits its plan and layout)",
        dir.display()
    )]
    Unused {
        /// The bundle.
        dir: PathBuf,
    },
    /// Bundles of different policy versions.
    #[error(
        "bundle {} holds policy version {version}, bundle {} version {first_version}: the \
         bundles run together must be one policy's (one export, signed per signal)",
        dir.display(),
        first.display()
    )]
    Versions {
        /// The bundle that differs.
        dir: PathBuf,
        /// Its version.
        version: u32,
        /// The first bundle.
        first: PathBuf,
        /// Its version.
        first_version: u32,
    },
}

/// Verified bundles and the one each signal runs.
#[derive(Debug)]
pub struct BundleSet {
    /// The bundles, in the order given.
    pub bundles: Vec<VerifiedBundle>,
    /// For each signal, the index of its bundle.
    pub of_signal: Vec<usize>,
}

impl BundleSet {
    /// Gives each of `signals` its bundle from `bundles` (the module's rule).
    pub fn assign(
        bundles: Vec<VerifiedBundle>,
        signals: &[SignalSpec],
    ) -> Result<Self, BundleSetError> {
        let first = bundles.first().ok_or(BundleSetError::Empty)?;
        let first_version = first.manifest.policy_version;
        if let Some(b) = bundles
            .iter()
            .find(|b| b.manifest.policy_version != first_version)
        {
            return Err(BundleSetError::Versions {
                dir: b.dir.clone(),
                version: b.manifest.policy_version,
                first: first.dir.clone(),
                first_version,
            });
        }
        let of_signal = signals
            .iter()
            .enumerate()
            .map(|(i, s)| bundle_of(&bundles, i, s))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(k) = (0..bundles.len()).find(|k| !of_signal.contains(k)) {
            return Err(BundleSetError::Unused {
                dir: bundles[k].dir.clone(),
            });
        }
        Ok(Self { bundles, of_signal })
    }

    /// The bundle signal `i` runs.
    pub fn for_signal(&self, i: usize) -> &VerifiedBundle {
        &self.bundles[self.of_signal[i]]
    }

    /// The first signal that runs bundle `k` (every bundle has one).
    pub fn first_signal(&self, k: usize) -> usize {
        self.of_signal
            .iter()
            .position(|&x| x == k)
            .expect("assign leaves no bundle unused")
    }
}

/// The signal a per-signal export was made for.
pub fn exported_for(b: &VerifiedBundle) -> Option<&str> {
    b.manifest.provenance.details.get("signal_id")?.as_str()
}

fn bundle_of(
    bundles: &[VerifiedBundle],
    i: usize,
    s: &SignalSpec,
) -> Result<usize, BundleSetError> {
    if let Some(k) = bundles
        .iter()
        .position(|b| exported_for(b) == Some(s.id.as_str()))
    {
        return match bundles[k].check_signal(&s.plan, s.layout) {
            Ok(()) => Ok(k),
            Err(source) => Err(BundleSetError::ExportedFor {
                signal: i,
                id: s.id.clone(),
                dir: bundles[k].dir.clone(),
                source: Box::new(source),
            }),
        };
    }
    let mut reasons = Vec::with_capacity(bundles.len());
    for (k, b) in bundles.iter().enumerate() {
        match b.check_signal(&s.plan, s.layout) {
            Ok(()) => return Ok(k),
            Err(e) => reasons.push(format!("{}: {e}", b.dir.display())),
        }
    }
    Err(BundleSetError::NoFit {
        signal: i,
        id: s.id.clone(),
        reasons: reasons.join("; "),
    })
}
