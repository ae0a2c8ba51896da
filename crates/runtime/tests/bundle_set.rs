//! The rule that gives each signal of a field its bundle when several are given
//! (`greenwave_runtime::bundle_set`): the one exported for it and no other, else the first
//! that names no signal and fits; every signal's bundle fits its plan and layout, whatever
//! order the bundles come in.

use std::path::PathBuf;

use greenwave_core::Millis;
use greenwave_policy::{Manifest, Provenance};
use greenwave_runtime::bundle::VerifiedBundle;
use greenwave_runtime::bundle_set::{BundleSet, BundleSetError};
use greenwave_runtime::controller::{SignalSpec, SimField};
use greenwave_sim::EmbeddedEnv;
use proptest::prelude::*;

/// The arterial's two junctions (different plans and layouts), then single-4way's.
fn signals() -> Vec<SignalSpec> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tools/tests/scenarios/arterial-mixed.toml"
    );
    let mut specs = Vec::new();
    for name in [path, "single-4way"] {
        let scenario = greenwave_sim::load(name).unwrap();
        specs.extend(SimField::new(EmbeddedEnv::from_scenario(&scenario, 0)).signal_specs());
    }
    specs
}

/// An (unsigned, already "verified") bundle for `s`, naming `named` as its signal.
fn bundle_for(s: &SignalSpec, named: Option<&str>, version: u32, dir: &str) -> VerifiedBundle {
    let mut prov = Provenance::default();
    if let Some(id) = named {
        prov.details.insert("signal_id".into(), id.into());
    }
    let mut manifest = Manifest::new(&s.plan, s.layout, Millis::from_secs(5), vec![8], prov);
    manifest.policy_version = version;
    VerifiedBundle {
        dir: PathBuf::from(dir),
        signer: ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key(),
        manifest,
        model: vec![],
        blob: vec![],
        blob_int8: None,
    }
}

fn fits(b: &VerifiedBundle, s: &SignalSpec) -> bool {
    b.check_signal(&s.plan, s.layout).is_ok()
}

#[test]
fn each_signal_takes_the_bundle_exported_for_it_else_the_first_that_fits() {
    let specs = signals();
    let two = &specs[..2];
    // Given in reverse order, each still takes its own.
    let set = BundleSet::assign(
        vec![
            bundle_for(&specs[1], Some(&specs[1].id), 1, "b"),
            bundle_for(&specs[0], Some(&specs[0].id), 1, "a"),
        ],
        two,
    )
    .unwrap();
    assert_eq!(set.of_signal(), [1, 0]);
    assert_eq!(set.for_signal(0).unwrap().dir, PathBuf::from("a"));
    assert!(set.for_signal(2).is_none());
    assert_eq!(set.signals_of(0), [1]);
    // Without signal ids, the first that fits.
    let set = BundleSet::assign(
        vec![
            bundle_for(&specs[1], None, 1, "b"),
            bundle_for(&specs[0], None, 1, "a"),
        ],
        two,
    )
    .unwrap();
    assert_eq!(set.of_signal(), [1, 0]);
}

/// Two signals of one plan and layout (J1 and a copy of it named J3): a bundle exported
/// for J1 never runs on J3, whose lanes may feed its movements otherwise.
#[test]
fn a_bundle_exported_for_one_signal_never_runs_on_another_of_the_same_plan() {
    let specs = signals();
    let mut j3 = specs[0].clone();
    j3.id = "J3".into();
    let field = [specs[0].clone(), specs[1].clone(), j3.clone()];
    let a = || bundle_for(&specs[0], Some(&specs[0].id), 1, "a");
    let b = || bundle_for(&specs[1], Some(&specs[1].id), 1, "b");
    let c = || bundle_for(&j3, Some("J3"), 1, "c");
    for order in [vec![c(), b(), a()], vec![a(), c(), b()]] {
        let set = BundleSet::assign(order, &field).unwrap();
        let dirs: Vec<_> = (0..3)
            .map(|i| set.for_signal(i).unwrap().dir.clone())
            .collect();
        assert_eq!(dirs, ["a", "b", "c"].map(PathBuf::from));
    }
    let e = BundleSet::assign(vec![a(), b()], &field).unwrap_err();
    assert!(matches!(e, BundleSetError::NoFit { signal: 2, .. }), "{e}");
    assert!(e.to_string().contains("a: exported for signal J1"), "{e}");
    // One network for every signal of that plan (no signal named) serves both.
    let shared = bundle_for(&specs[0], None, 1, "shared");
    let set = BundleSet::assign(vec![b(), shared], &field).unwrap();
    assert_eq!(set.of_signal(), [1, 0, 1]);
}

#[test]
fn a_set_that_cannot_run_the_field_is_refused_naming_what_is_wrong() {
    let specs = signals();
    let two = &specs[..2];
    let a = || bundle_for(&specs[0], Some(&specs[0].id), 1, "a");
    let b = |v| bundle_for(&specs[1], Some(&specs[1].id), v, "b");
    let e = BundleSet::assign(vec![], two).unwrap_err();
    assert!(matches!(e, BundleSetError::Empty), "{e}");
    let e = BundleSet::assign(vec![a()], two).unwrap_err();
    assert!(matches!(e, BundleSetError::NoFit { signal: 1, .. }), "{e}");
    assert!(e.to_string().contains("a: exported for signal J1"), "{e}");
    let unnamed = || bundle_for(&specs[0], None, 1, "unnamed");
    let e = BundleSet::assign(vec![a(), unnamed()], two).unwrap_err();
    assert!(e.to_string().contains("unnamed: plan check failed"), "{e}");
    let e = BundleSet::assign(vec![a(), b(1), a()], two).unwrap_err();
    assert!(matches!(e, BundleSetError::Twice { .. }), "{e}");
    let mut a2 = a();
    a2.dir = PathBuf::from("a2");
    let e = BundleSet::assign(vec![a(), b(1), a2], two).unwrap_err();
    assert!(matches!(e, BundleSetError::SameSignal { .. }), "{e}");
    let elsewhere = bundle_for(&specs[2], Some(&specs[2].id), 1, "c");
    let e = BundleSet::assign(vec![a(), b(1), elsewhere], two).unwrap_err();
    assert!(matches!(e, BundleSetError::Unused { .. }), "{e}");
    assert!(
        e.to_string().contains("which the field does not have"),
        "{e}"
    );
    let e = BundleSet::assign(vec![a(), b(1), unnamed()], two).unwrap_err();
    assert!(e.to_string().contains("runs another"), "{e}");
    let e = BundleSet::assign(vec![a(), b(2)], two).unwrap_err();
    assert!(
        matches!(e, BundleSetError::Versions { version: 2, .. }),
        "{e}"
    );
    // A bundle naming signal 1 but made for signal 0's plan.
    let wrong = bundle_for(&specs[0], Some(&specs[1].id), 1, "wrong");
    let e = BundleSet::assign(vec![a(), wrong], two).unwrap_err();
    assert!(
        matches!(e, BundleSetError::ExportedFor { signal: 1, .. }),
        "{e}"
    );
}

proptest! {
    /// Whatever the order of the bundles and whether they name their signals, a set that
    /// is accepted gives every signal a bundle that fits its plan and layout, and uses
    /// every bundle; one naming its signal runs there.
    #[test]
    fn every_signal_runs_a_bundle_that_fits_it(
        order in Just((0..3usize).collect::<Vec<_>>()).prop_shuffle(),
        named in proptest::collection::vec(any::<bool>(), 3),
        field in proptest::sample::subsequence((0..3usize).collect::<Vec<_>>(), 1..=3),
    ) {
        let specs = signals();
        let signals: Vec<SignalSpec> = field.iter().map(|&i| specs[i].clone()).collect();
        let bundles: Vec<VerifiedBundle> = order
            .iter()
            .map(|&i| {
                let id = named[i].then_some(specs[i].id.as_str());
                bundle_for(&specs[i], id, 1, &format!("b{i}"))
            })
            .collect();
        match BundleSet::assign(bundles, &signals) {
            Ok(set) => {
                for (i, s) in signals.iter().enumerate() {
                    let b = set.for_signal(i).unwrap();
                    prop_assert!(fits(b, s));
                    let named = greenwave_runtime::bundle_set::exported_for(b);
                    prop_assert!(named.is_none() || named == Some(s.id.as_str()));
                }
                for k in 0..set.bundles().len() {
                    prop_assert!(set.of_signal().contains(&k));
                }
            }
            // Only a bundle for a junction not in the field may be refused, as unused.
            Err(e) => prop_assert!(
                matches!(e, BundleSetError::Unused { .. }) && field.len() < 3,
                "{}", e
            ),
        }
    }
}
