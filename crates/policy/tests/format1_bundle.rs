//! The shipped policy in `models/` was written as manifest format 1 (seconds as `f32`):
//! its files, and a bundle signed from them, still verify and load, with the same timing
//! in milliseconds. The bundle's files are the format-1 bytes as signed.

use std::path::{Path, PathBuf};

use greenwave_core::Millis;
use greenwave_policy::bundle::{self, BundleInputs, SigningKey};
use greenwave_policy::manifest::{PhaseTimingMs, MANIFEST_FORMAT};
use greenwave_policy::onnx;

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

#[test]
fn shipped_format_1_policy_still_bundles_verifies_and_loads() {
    let manifest_path = models().join("single-4way.manifest.json");
    let text = std::fs::read_to_string(&manifest_path).unwrap();
    assert!(
        text.contains("\"format_version\": 1") && text.contains("\"decision_interval_s\": 5.0"),
        "models/single-4way.manifest.json is no longer a format-1 manifest: this test needs one"
    );
    let inside =
        onnx::read_manifest(&std::fs::read(models().join("single-4way.onnx")).unwrap()).unwrap();
    assert_eq!(inside.decision_interval, Millis(5000));
    assert_eq!(inside.format_version, MANIFEST_FORMAT);
    let timing = PhaseTimingMs {
        min_green: Millis(8000),
        max_green: Millis(60_000),
        yellow: Millis(3000),
        all_red: Millis(2000),
    };
    assert_eq!(inside.phase_timing, vec![timing; 4]);

    let dir = std::env::temp_dir().join(format!("gw-format1-bundle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let key = SigningKey::from_bytes(&[7; 32]);
    let inputs = BundleInputs {
        model: models().join("single-4way.onnx"),
        manifest: manifest_path,
        blob: models().join("single-4way.blob"),
        blob_int8: Some(models().join("single-4way.int8.blob")),
    };
    let public = bundle::pack_and_sign(&inputs, &key, &dir).unwrap();
    let verified = bundle::verify(&dir, &[public]).unwrap();
    assert_eq!(verified.manifest, inside);
    assert_eq!(
        std::fs::read_to_string(dir.join(bundle::MANIFEST_FILE)).unwrap(),
        text,
        "the bundle holds the format-1 manifest as signed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
