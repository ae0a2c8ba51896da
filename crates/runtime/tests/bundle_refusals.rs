//! A controller loads a bundle only if it is signed by a trusted key, intact, internally
//! consistent and made for its own phase plan and layout; every refusal names its check.

mod common;

use std::fs;
use std::path::Path;

use common::{fixture, inputs, synthetic_weights, write_export, write_export_with};
use ed25519_dalek::Signer;
use greenwave_core::{Millis, ObsLayout, PhasePlan, PhaseTiming};
use greenwave_runtime::bundle::{
    self, pack_and_sign, verify_and_load, BundleError, MANIFEST_FILE, MODEL_FILE, SIGNATURE_FILE,
};
use sha2::Digest;

fn copy_dir(from: &Path, to: &Path) {
    let _ = fs::remove_dir_all(to);
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Re-signs a bundle directory as it is now (to get past the signature checks and reach
/// the consistency checks behind them).
fn resign(dir: &Path, key: &ed25519_dalek::SigningKey) {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != SIGNATURE_FILE)
        .collect();
    names.sort();
    let mut text = format!(
        "greenwave-bundle v1\nsigner {}\n",
        bundle::key_hex(&key.verifying_key())
    );
    for n in names {
        let bytes = fs::read(dir.join(&n)).unwrap();
        let digest: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text += &format!("file {n} {} {digest}\n", bytes.len());
    }
    let sig: String = key
        .sign(text.as_bytes())
        .to_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    fs::write(dir.join(SIGNATURE_FILE), format!("{text}signature {sig}\n")).unwrap();
}

#[test]
fn a_good_bundle_loads_with_the_bytes_that_were_signed() {
    let fx = fixture("good");
    let b = verify_and_load(&fx.bundle, &[fx.public], &fx.plan, fx.layout).unwrap();
    assert_eq!(b.model, fs::read(&fx.onnx).unwrap());
    assert_eq!(b.manifest.obs_layout, fx.layout);
    assert!(b.blob_int8.is_some());
    assert_eq!(b.signer, fx.public);
    let _ = fs::remove_dir_all(&fx.dir);
}

#[test]
fn tampered_model_byte_is_refused_naming_the_file() {
    let fx = fixture("tamper");
    let path = fx.bundle.join(MODEL_FILE);
    let mut bytes = fs::read(&path).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    let err = verify_and_load(&fx.bundle, &[fx.public], &fx.plan, fx.layout).unwrap_err();
    assert!(
        matches!(&err, BundleError::TamperedFile { name, .. } if name == MODEL_FILE),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("integrity check failed: policy.onnx"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&fx.dir);
}

/// A file grown far past its signed size (here a sparse 8 GiB), or a SIGNATURE of the same
/// sort, is refused by its size without being read whole into memory.
#[test]
fn an_oversized_file_is_refused_without_reading_it_whole() {
    let fx = fixture("oversized");
    let path = fx.bundle.join(MODEL_FILE);
    let signed = fs::metadata(&path).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(8 << 30).unwrap();
    drop(f);
    let err = verify_and_load(&fx.bundle, &[fx.public], &fx.plan, fx.layout).unwrap_err();
    assert!(
        matches!(&err, BundleError::TamperedFile { name, .. } if name == MODEL_FILE),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&format!("({signed} bytes)")), "{text}");
    assert!(text.contains(&format!("{} bytes", 8u64 << 30)), "{text}");
    let sig = fx.bundle.join(SIGNATURE_FILE);
    let f = fs::OpenOptions::new().write(true).open(&sig).unwrap();
    f.set_len(8 << 30).unwrap();
    drop(f);
    let err = verify_and_load(&fx.bundle, &[fx.public], &fx.plan, fx.layout).unwrap_err();
    assert!(
        matches!(&err, BundleError::MalformedSignature { .. }),
        "{err}"
    );
    let _ = fs::remove_dir_all(&fx.dir);
}

#[test]
fn wrong_key_is_refused() {
    let fx = fixture("wrongkey");
    let (_, other) = bundle::keygen(&fx.dir.join("other"), false).unwrap();
    let err = verify_and_load(&fx.bundle, &[other], &fx.plan, fx.layout).unwrap_err();
    assert!(matches!(err, BundleError::UntrustedKey { .. }), "{err}");
    assert!(err.to_string().starts_with("trust check failed"), "{err}");
    // Trusting both keys is fine.
    verify_and_load(&fx.bundle, &[other, fx.public], &fx.plan, fx.layout).unwrap();
    let err = verify_and_load(&fx.bundle, &[], &fx.plan, fx.layout).unwrap_err();
    assert!(matches!(err, BundleError::NoTrustedKeys), "{err}");
    let _ = fs::remove_dir_all(&fx.dir);
}

#[test]
fn bundle_for_another_phase_plan_is_refused() {
    let fx = fixture("otherplan");
    let other = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(7, 50, 4, 2)).unwrap();
    let err = verify_and_load(&fx.bundle, &[fx.public], &other, fx.layout).unwrap_err();
    assert!(matches!(err, BundleError::PlanMismatch { .. }), "{err}");
    assert!(err.to_string().starts_with("plan check failed"), "{err}");
    let layout = ObsLayout {
        n_lanes: fx.layout.n_lanes + 2,
        ..fx.layout
    };
    let err = verify_and_load(&fx.bundle, &[fx.public], &fx.plan, layout).unwrap_err();
    assert!(matches!(err, BundleError::LayoutMismatch { .. }), "{err}");
    let _ = fs::remove_dir_all(&fx.dir);
}

#[test]
fn forged_missing_and_unsigned_content_is_refused() {
    let fx = fixture("forged");
    let key = bundle::load_signing_key(&fx.keys.secret).unwrap();
    let check = |dir: &Path| verify_and_load(dir, &[fx.public], &fx.plan, fx.layout).unwrap_err();

    // A digest line edited to match a tampered file: the signature no longer verifies.
    let d = fx.dir.join("b1");
    copy_dir(&fx.bundle, &d);
    let sig = fs::read_to_string(d.join(SIGNATURE_FILE)).unwrap();
    let forged = sig.replacen("file manifest.json ", "file manifest.json 1", 1);
    fs::write(d.join(SIGNATURE_FILE), forged).unwrap();
    let err = check(&d);
    assert!(
        matches!(
            err,
            BundleError::BadSignature { .. } | BundleError::MalformedSignature { .. }
        ),
        "{err}"
    );

    // No signature at all.
    fs::remove_file(d.join(SIGNATURE_FILE)).unwrap();
    assert!(matches!(check(&d), BundleError::MissingSignature(_)));

    // An extra, unsigned file.
    let d = fx.dir.join("b2");
    copy_dir(&fx.bundle, &d);
    fs::write(d.join("extra.bin"), b"x").unwrap();
    assert!(matches!(check(&d), BundleError::UnsignedFile { name } if name == "extra.bin"));

    // A signed file removed.
    let d = fx.dir.join("b3");
    copy_dir(&fx.bundle, &d);
    fs::remove_file(d.join("policy.int8.blob")).unwrap();
    assert!(matches!(check(&d), BundleError::MissingFile { name } if name == "policy.int8.blob"));

    // Signed, but the manifest beside the model differs from the one inside it.
    let d = fx.dir.join("b4");
    copy_dir(&fx.bundle, &d);
    let text = fs::read_to_string(d.join(MANIFEST_FILE)).unwrap();
    fs::write(
        d.join(MANIFEST_FILE),
        text.replace("\"policy_version\": 1", "\"policy_version\": 2"),
    )
    .unwrap();
    resign(&d, &key);
    let err = check(&d);
    assert!(
        matches!(&err, BundleError::ManifestMismatch { fields } if fields == "policy_version"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("manifest check failed"),
        "{err}"
    );

    // Signed, but the firmware blob is for another plan.
    let d = fx.dir.join("b5");
    copy_dir(&fx.bundle, &d);
    let other = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(7, 50, 4, 2)).unwrap();
    let w = synthetic_weights(fx.layout, &[8], 1);
    fs::write(
        d.join("policy.blob"),
        w.actor_mlp(other.hash(), 1).to_blob(false).unwrap(),
    )
    .unwrap();
    resign(&d, &key);
    assert!(matches!(
        check(&d),
        BundleError::BlobMismatch {
            file: "policy.blob",
            ..
        }
    ));

    // Signed, with blobs of the same plan and version but other weights: an earlier
    // export's side files left beside a new model. The headers agree; the network does not.
    let other_weights = synthetic_weights(fx.layout, &[64, 64], 7);
    for (file, int8) in [("policy.blob", false), ("policy.int8.blob", true)] {
        let d = fx.dir.join(format!("b6-{int8}"));
        copy_dir(&fx.bundle, &d);
        let stale = other_weights
            .actor_mlp(fx.plan.hash(), 1)
            .to_blob(int8)
            .unwrap();
        fs::write(d.join(file), stale).unwrap();
        resign(&d, &key);
        let err = check(&d);
        assert!(
            matches!(&err, BundleError::BlobMismatch { file: f, problem }
                if *f == file && problem.contains("weights differ")),
            "{err}"
        );
    }
    let _ = fs::remove_dir_all(&fx.dir);
}

#[test]
fn packing_refuses_inconsistent_inputs_and_existing_output() {
    let fx = fixture("pack");
    let key = bundle::load_signing_key(&fx.keys.secret).unwrap();
    let err = pack_and_sign(&inputs(&fx.onnx), &key, &fx.bundle).unwrap_err();
    assert!(matches!(err, BundleError::Exists(_)), "{err}");
    // A file where the bundle's folder would go: named as such, left as it was.
    let file = fx.dir.join("a-file");
    fs::write(&file, "kept").unwrap();
    let err = pack_and_sign(&inputs(&fx.onnx), &key, &file).unwrap_err();
    assert!(err.to_string().contains("is not an empty folder"), "{err}");
    assert_eq!(fs::read_to_string(&file).unwrap(), "kept");
    // A model exported for another plan, with this plan's manifest beside it.
    let other = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(7, 50, 4, 2)).unwrap();
    let d = fx.dir.join("other");
    fs::create_dir_all(&d).unwrap();
    let onnx = write_export(
        &d,
        &synthetic_weights(fx.layout, &[8], 5),
        &other,
        Millis::from_secs(5),
    );
    fs::copy(
        fx.onnx.with_extension("manifest.json"),
        onnx.with_extension("manifest.json"),
    )
    .unwrap();
    let err = pack_and_sign(&inputs(&onnx), &key, &fx.dir.join("b")).unwrap_err();
    assert!(matches!(err, BundleError::ManifestMismatch { .. }), "{err}");
    assert!(
        !fx.dir.join("b").exists(),
        "nothing written for refused inputs"
    );
    let _ = fs::remove_dir_all(&fx.dir);
}

/// A policy with a NaN weight is refused everywhere it could enter: export writes none of
/// its files (an earlier export's stay whole), packing refuses it, a bundle holding one
/// (signed after the fact) does not verify, and no backend loads it, tract included (which
/// once ran such a model with finite logits and no fault). The NaN sits in the critic,
/// which the firmware blob does not carry, so only the model shows it.
#[test]
fn a_policy_with_a_nan_weight_is_refused_at_export_pack_verify_and_load() {
    let fx = fixture("nan-weight");
    let key = bundle::load_signing_key(&fx.keys.secret).unwrap();
    let mut bad = synthetic_weights(fx.layout, &[64, 64], 2024);
    bad.critic[1].weights[7] = f32::NAN;

    // Export over the good files: refused by name, every earlier file unchanged.
    let manifest = greenwave_policy::onnx::read_manifest(&fs::read(&fx.onnx).unwrap()).unwrap();
    let before: Vec<Vec<u8>> = fx_files(&fx.onnx)
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect();
    let err =
        greenwave_policy::files::write_policy_files(&bad, &manifest, fx.plan.hash(), &fx.onnx)
            .unwrap_err();
    assert!(err.to_string().contains("not finite"), "{err}");
    let after: Vec<Vec<u8>> = fx_files(&fx.onnx)
        .iter()
        .map(|p| fs::read(p).unwrap())
        .collect();
    assert_eq!(
        before, after,
        "a refused export changed the files of the one before"
    );

    // The NaN model beside the good manifest and blobs (as a hand-made export would be).
    let d = fx.dir.join("nan");
    copy_dir(&fx.bundle, &d);
    let nan_model = greenwave_policy::onnx::export(&bad, &manifest);
    let staged = fx.dir.join("staged");
    fs::create_dir_all(&staged).unwrap();
    let staged_onnx = staged.join("policy.onnx");
    fs::write(&staged_onnx, &nan_model).unwrap();
    for side in ["manifest.json", "blob", "int8.blob"] {
        fs::copy(
            fx.onnx.with_extension(side),
            staged_onnx.with_extension(side),
        )
        .unwrap();
    }
    let err = pack_and_sign(&inputs(&staged_onnx), &key, &fx.dir.join("b")).unwrap_err();
    assert!(matches!(err, BundleError::Model(_)), "{err}");
    assert!(err.to_string().contains("not finite"), "{err}");
    assert!(
        !fx.dir.join("b").exists(),
        "nothing written for refused inputs"
    );

    fs::write(d.join(MODEL_FILE), &nan_model).unwrap();
    resign(&d, &key);
    let err = verify_and_load(&d, &[fx.public], &fx.plan, fx.layout).unwrap_err();
    assert!(err.to_string().contains("not finite"), "{err}");

    for kind in [
        greenwave_runtime::BackendKind::Tract,
        greenwave_runtime::BackendKind::Matvec,
    ] {
        let err = greenwave_runtime::inference::load_backend(kind, &nan_model, fx.layout, None)
            .err()
            .expect("a NaN model loaded");
        assert!(err.to_string().contains("not finite"), "{kind}: {err}");
    }
    let _ = fs::remove_dir_all(&fx.dir);
}

/// The four files of an export at `onnx`.
fn fx_files(onnx: &Path) -> [std::path::PathBuf; 4] {
    [
        onnx.to_path_buf(),
        onnx.with_extension("blob"),
        onnx.with_extension("int8.blob"),
        onnx.with_extension("manifest.json"),
    ]
}

/// A manifest mapping actions to phases otherwise than one to one in order is refused at
/// packing: controllers serve action k as phase k, so the mapping would be signed and then
/// silently ignored.
#[test]
fn a_manifest_that_reorders_the_phases_is_refused() {
    let fx = fixture("action-phases");
    let key = bundle::load_signing_key(&fx.keys.secret).unwrap();
    let weights = synthetic_weights(fx.layout, &[64, 64], 7);
    let mut manifest = greenwave_policy::onnx::read_manifest(&fs::read(&fx.onnx).unwrap()).unwrap();
    manifest.action_phases.swap(0, 1);
    let staged = fx.dir.join("staged").join("policy.onnx");
    greenwave_policy::files::write_policy_files(&weights, &manifest, fx.plan.hash(), &staged)
        .unwrap();
    let err = pack_and_sign(&inputs(&staged), &key, &fx.dir.join("b")).unwrap_err();
    assert!(
        matches!(&err, BundleError::ActionPhases { got, .. } if got[..2] == [1, 0]),
        "{err}"
    );
    assert!(!fx.dir.join("b").exists());
    // So is a signal binding that is not text (it would read as no binding at all).
    manifest.action_phases.swap(0, 1);
    manifest
        .provenance
        .details
        .insert("signal_id".into(), serde_json::json!(3));
    greenwave_policy::files::write_policy_files(&weights, &manifest, fx.plan.hash(), &staged)
        .unwrap();
    let err = pack_and_sign(&inputs(&staged), &key, &fx.dir.join("b")).unwrap_err();
    assert!(
        matches!(&err, BundleError::SignalIdNotText(v) if v == "3"),
        "{err}"
    );
}

/// A policy that acts at a decision temperature is bundled without firmware blobs (the
/// firmware acts greedily); a greedy one needs its f32 blob.
#[test]
fn a_sampling_policy_is_bundled_without_firmware_blobs_and_a_greedy_one_with_them() {
    let f = fixture("bundle-sampling");
    let weights = synthetic_weights(f.layout, &[64, 64], 2024);
    let key = bundle::load_signing_key(&f.keys.secret).unwrap();
    let dir = f.dir.join("sampling");
    fs::create_dir_all(&dir).unwrap();
    let interval = f.scenario.decision_interval();
    let onnx = write_export_with(&dir, &weights, &f.plan, interval, |m| {
        m.decision_temperature = Some(0.5)
    });
    let err = pack_and_sign(&inputs(&onnx), &key, &dir.join("b1")).unwrap_err();
    assert!(
        matches!(err, BundleError::BlobOfSampledPolicy { file: "policy.blob", temperature } if temperature == 0.5),
        "{err}"
    );
    fs::remove_file(onnx.with_extension("blob")).unwrap();
    let err = pack_and_sign(&inputs(&onnx), &key, &dir.join("b2")).unwrap_err();
    assert!(
        matches!(
            err,
            BundleError::BlobOfSampledPolicy {
                file: "policy.int8.blob",
                ..
            }
        ),
        "{err}"
    );
    fs::remove_file(onnx.with_extension("int8.blob")).unwrap();
    // A greedy manifest beside the drawing model: the mismatch names the field that only
    // one of them has.
    let json = onnx.with_extension("manifest.json");
    let drawing = fs::read_to_string(&json).unwrap();
    let mut greedy: greenwave_policy::Manifest = serde_json::from_str(&drawing).unwrap();
    greedy.decision_temperature = None;
    fs::write(&json, serde_json::to_string_pretty(&greedy).unwrap()).unwrap();
    let mut no_int8 = inputs(&onnx);
    no_int8.blob_int8 = None;
    let err = pack_and_sign(&no_int8, &key, &dir.join("b-mixed")).unwrap_err();
    assert!(
        matches!(&err, BundleError::ManifestMismatch { fields }
            if fields == "decision_temperature, format_version"),
        "{err}"
    );
    fs::write(&json, drawing).unwrap();
    no_int8.blob_int8 = None;
    pack_and_sign(&no_int8, &key, &dir.join("b3")).unwrap();
    let b = verify_and_load(&dir.join("b3"), &[f.public], &f.plan, f.layout).unwrap();
    assert_eq!(b.manifest.decision_temperature, Some(0.5));
    assert!(b.blob.is_empty() && b.blob_int8.is_none());
    // The greedy export without its f32 blob is refused, naming the file.
    let greedy = f.dir.join("greedy");
    fs::create_dir_all(&greedy).unwrap();
    let onnx = write_export(&greedy, &weights, &f.plan, interval);
    fs::remove_file(onnx.with_extension("blob")).unwrap();
    let err = pack_and_sign(&inputs(&onnx), &key, &greedy.join("b")).unwrap_err();
    assert!(
        matches!(&err, BundleError::MissingFile { name } if name == "policy.blob"),
        "{err}"
    );
}
