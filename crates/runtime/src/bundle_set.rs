//! Several bundles for one field: which signal runs which.
//!
//! A policy for junctions of different plans or layouts (a shared policy, or an MLP over
//! lights of different plans) is exported once per signal and signed into one bundle per
//! signal. A controller running several such junctions takes them together, and this is
//! the one rule that gives each signal its bundle:
//!
//! * a bundle whose manifest names a signal (`provenance.details.signal_id`, which a
//!   per-signal export writes) runs on that signal and on no other, and must fit its plan
//!   and layout: plan hash and layout do not say which lane feeds which movement, and a
//!   shared policy's per-signal network is compiled for its own signal's lanes;
//! * a signal no bundle names runs the first bundle, in the order given, that names no
//!   signal and fits its plan and layout (an export of one network for every signal).
//!
//! A signal no bundle fits, a bundle no signal runs, a bundle given twice, two bundles
//! naming one signal, or bundles of different policy versions (the transition log records
//! one version per decision, and fine-tuning and the policy store work on one) refuse the
//! whole set.

use std::path::PathBuf;

use crate::bundle::{BundleError, VerifiedBundle};
use crate::controller::SignalSpec;

/// Why a set of bundles cannot run a field.
#[derive(Debug, thiserror::Error)]
pub enum BundleSetError {
    /// No bundle was given.
    #[error("no bundle given")]
    Empty,
    /// Two bundles whose policies act by different rules (a manifest's
    /// `decision_temperature`; `None`: greedy): one controller acts by one rule.
    #[error(
        "bundle {} acts at decision temperature {second:?} and bundle {} at {first:?} (None: \
         greedy): one controller runs every signal by one rule",
        second_dir.display(),
        first_dir.display()
    )]
    MixedRules {
        /// The first bundle.
        first_dir: PathBuf,
        /// Its rule.
        first: Option<f32>,
        /// The first bundle of another rule.
        second_dir: PathBuf,
        /// Its rule.
        second: Option<f32>,
    },
    /// The same bundle directory given twice.
    #[error("bundle {} is given twice", dir.display())]
    Twice {
        /// The bundle.
        dir: PathBuf,
    },
    /// Two bundles exported for one signal.
    #[error("bundles {} and {} are both exported for signal {id}", first.display(), second.display())]
    SameSignal {
        /// The signal's id.
        id: String,
        /// The first bundle naming it.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
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
    /// A bundle no signal runs.
    #[error("bundle {}: no signal of the field runs it ({why})", dir.display())]
    Unused {
        /// The bundle.
        dir: PathBuf,
        /// Why not.
        why: String,
    },
    /// A bundle exported for one signal, given for another.
    #[error(
        "signal {signal} ({id}): bundle {} was exported for signal {exported} and runs on no \
         other, even one of the same plan and layout (its network was compiled for that \
         signal's lanes)",
        dir.display()
    )]
    OtherSignal {
        /// The signal's index.
        signal: usize,
        /// Its id.
        id: String,
        /// The bundle.
        dir: PathBuf,
        /// The signal it was exported for.
        exported: String,
    },
    /// Bundles of different policy versions.
    #[error(
        "bundle {} holds policy version {version}, bundle {} version {first_version}: the \
         bundles run together must carry one policy version (the transition log records \
         one per decision)",
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
    bundles: Vec<VerifiedBundle>,
    of_signal: Vec<usize>,
}

impl BundleSet {
    /// Gives each of `signals` its bundle from `bundles` (the module's rule).
    pub fn assign(
        bundles: Vec<VerifiedBundle>,
        signals: &[SignalSpec],
    ) -> Result<Self, BundleSetError> {
        check_distinct(&bundles)?;
        check_one_rule(&bundles)?;
        let of_signal = signals
            .iter()
            .enumerate()
            .map(|(i, s)| bundle_of(&bundles, i, s))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(k) = (0..bundles.len()).find(|k| !of_signal.contains(k)) {
            let why = match exported_for(&bundles[k]) {
                Some(id) if !signals.iter().any(|s| s.id == id) => {
                    format!("it was exported for signal {id}, which the field does not have")
                }
                _ => "every signal it fits runs another: the bundle exported for it, or one \
                      given before"
                    .to_string(),
            };
            return Err(BundleSetError::Unused {
                dir: bundles[k].dir.clone(),
                why,
            });
        }
        Ok(Self { bundles, of_signal })
    }

    /// The bundles, in the order given.
    pub fn bundles(&self) -> &[VerifiedBundle] {
        &self.bundles
    }

    /// For each signal, the index of its bundle in [`bundles`](Self::bundles).
    pub fn of_signal(&self) -> &[usize] {
        &self.of_signal
    }

    /// The bundle signal `i` runs, if there is a signal `i`.
    pub fn for_signal(&self, i: usize) -> Option<&VerifiedBundle> {
        self.of_signal.get(i).map(|&k| &self.bundles[k])
    }

    /// The indices of the signals that run bundle `k` (at least one for every bundle).
    pub fn signals_of(&self, k: usize) -> Vec<usize> {
        (0..self.of_signal.len())
            .filter(|&i| self.of_signal[i] == k)
            .collect()
    }

    /// The decision temperature every bundle of the set acts at (`None`: greedy), which
    /// [`assign`](Self::assign) checked is one.
    pub fn decision_temperature(&self) -> Option<f32> {
        self.bundles
            .first()
            .and_then(|b| b.manifest.decision_temperature)
    }

    /// The bundles and, for each signal, the index of its bundle.
    pub fn into_parts(self) -> (Vec<VerifiedBundle>, Vec<usize>) {
        (self.bundles, self.of_signal)
    }
}

/// Every bundle's policy acts by the first one's rule ([`BundleSetError::MixedRules`]).
fn check_one_rule(bundles: &[VerifiedBundle]) -> Result<(), BundleSetError> {
    let rule = |b: &VerifiedBundle| b.manifest.decision_temperature;
    let Some(first) = bundles.first() else {
        return Ok(());
    };
    match bundles.iter().find(|b| rule(b) != rule(first)) {
        Some(b) => Err(BundleSetError::MixedRules {
            first_dir: first.dir.clone(),
            first: rule(first),
            second_dir: b.dir.clone(),
            second: rule(b),
        }),
        None => Ok(()),
    }
}

/// That `b` may run signal `i` (`s`): a bundle exported for one signal runs on no other.
/// A bundle given alone is held to it as a set's are.
pub fn check_runs_on(b: &VerifiedBundle, i: usize, s: &SignalSpec) -> Result<(), BundleSetError> {
    match exported_for(b) {
        Some(id) if id != s.id => Err(BundleSetError::OtherSignal {
            signal: i,
            id: s.id.clone(),
            dir: b.dir.clone(),
            exported: id.to_string(),
        }),
        _ => Ok(()),
    }
}

/// The signal a per-signal export was made for.
pub fn exported_for(b: &VerifiedBundle) -> Option<&str> {
    b.manifest.provenance.signal_id()
}

/// One policy version, no directory twice, no signal named twice.
fn check_distinct(bundles: &[VerifiedBundle]) -> Result<(), BundleSetError> {
    let first = bundles.first().ok_or(BundleSetError::Empty)?;
    for (k, b) in bundles.iter().enumerate() {
        if b.manifest.policy_version != first.manifest.policy_version {
            return Err(BundleSetError::Versions {
                dir: b.dir.clone(),
                version: b.manifest.policy_version,
                first: first.dir.clone(),
                first_version: first.manifest.policy_version,
            });
        }
        for earlier in &bundles[..k] {
            if earlier.dir == b.dir {
                return Err(BundleSetError::Twice { dir: b.dir.clone() });
            }
            if let (Some(id), Some(other)) = (exported_for(b), exported_for(earlier)) {
                if id == other {
                    return Err(BundleSetError::SameSignal {
                        id: id.to_string(),
                        first: earlier.dir.clone(),
                        second: b.dir.clone(),
                    });
                }
            }
        }
    }
    Ok(())
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
        if let Some(other) = exported_for(b) {
            reasons.push(format!("{}: exported for signal {other}", b.dir.display()));
            continue;
        }
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
