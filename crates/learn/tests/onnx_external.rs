//! The exported model in ONNX Runtime (through `ort`, library loaded from
//! `ORT_DYLIB_PATH`) and under Python's `onnx.checker` (interpreter from `GREENWAVE_PYTHON`,
//! default `python3`).
//!
//! Outside CI these tests skip, saying why, when ONNX Runtime or the `onnx` package is not
//! installed; under CI (`CI` set) a missing install is a failure, so they can never be
//! skipped silently where they are meant to run. `.ci/run` installs both.

mod common;

use common::{assert_close, candle_outputs, observations, policy, specialised_policy};
use greenwave_learn::onnx;

fn required_or_skip(what: &str) -> bool {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is required under CI (.ci/run installs it)");
    }
    eprintln!("SKIPPED: {what} is not available; see .ci/run for how to install it");
    false
}

#[test]
fn onnx_runtime_matches_candle() {
    let Some(path) = std::env::var_os("ORT_DYLIB_PATH") else {
        required_or_skip("ORT_DYLIB_PATH (libonnxruntime.so from the onnxruntime wheel)");
        return;
    };
    let env = ort::init_from(&path)
        .expect("load ONNX Runtime")
        .with_name("greenwave-test")
        .build()
        .unwrap();
    // The per-signal MLP, and a shared policy compiled for one junction.
    for (w, m) in [policy(), specialised_policy()] {
        let d = w.obs_dim();
        let bytes = onnx::export(&w, &m);
        let mut session = ort::session::Session::builder(&env)
            .unwrap()
            .commit_from_memory(&bytes)
            .unwrap();
        for n in [1usize, 7] {
            let obs = observations(n, d);
            let input = ort::value::Tensor::from_array(([n, d], obs.clone())).unwrap();
            let out = session.run(ort::inputs!["obs" => input]).unwrap();
            let (_, logits) = out["logits"].try_extract_tensor::<f32>().unwrap();
            let (_, value) = out["value"].try_extract_tensor::<f32>().unwrap();
            let (cl, cv) = candle_outputs(&w, &obs, n);
            assert_close(logits, &cl, "ort logits");
            assert_close(value, &cv, "ort value");
        }
    }
}

#[test]
fn passes_onnx_checker() {
    let python = std::env::var("GREENWAVE_PYTHON").unwrap_or_else(|_| "python3".into());
    let has_onnx = std::process::Command::new(&python)
        .args(["-c", "import onnx"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !has_onnx {
        required_or_skip("Python with the onnx package (GREENWAVE_PYTHON)");
        return;
    }
    for (k, (w, m)) in [policy(), specialised_policy()].into_iter().enumerate() {
        let path =
            std::env::temp_dir().join(format!("greenwave-checker-{}-{k}.onnx", std::process::id()));
        std::fs::write(&path, onnx::export(&w, &m)).unwrap();
        let out = std::process::Command::new(&python)
            .args([
                "-c",
                "import onnx, sys; m = onnx.load(sys.argv[1]); onnx.checker.check_model(m, full_check=True); print('ok')",
            ])
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "onnx.checker (model {k}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
