//! Benchmark: wall time and peak RSS of one on-device fine-tune (log read → critic → policy
//! epochs → gate) over 10k and 50k logged transitions, with the default (conservative)
//! settings: 10 policy epochs (fewer if the KL limit stops them), 30 critic epochs.
//!
//! ```sh
//! cargo bench -p greenwave-finetune --bench finetune
//! ```
//!
//! The logs are made first (the project's `models/single-4way.onnx` run by the controller
//! on the embedded simulator with ε = 0.1). Each fine-tune then runs in a child process of
//! its own, so its peak RSS (`VmHWM`) is the fine-tune's alone, not the simulator's.
//! `RAYON_NUM_THREADS=1` (as the controller binary sets it). Target: 10k transitions ×
//! 10 epochs ≤ 10 s and ≤ 200 MB RSS on 2 cores.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use greenwave_finetune::{self as finetune, sim, FinetuneConfig};

fn model_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/single-4way.onnx")
}

/// Child: one fine-tune of the log in `dir`; prints one JSON line.
fn child(dir: &Path) {
    let model = std::fs::read(model_path()).expect("models/single-4way.onnx");
    let cfg = FinetuneConfig::default();
    let t = Instant::now();
    let out = finetune::finetune(&model, dir, &cfg, &mut |_| {}).expect("fine-tune");
    let wall = t.elapsed().as_secs_f64();
    let r = &out.report;
    println!(
        "{}",
        serde_json::json!({
            "records": r.log.records_used,
            "decision_states": r.log.decision_states,
            "wall_s": wall,
            "peak_rss_kib": greenwave_runtime::peak_rss_kib(),
            "policy_epochs": r.update.policy.epochs,
            "stopped_by_kl": r.update.policy.stopped_by_kl,
            "critic_epochs": cfg.update.q_epochs,
            "gate": r.gate.reason,
        })
    );
}

fn main() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(Path::new(&args[i + 1]));
        return;
    }
    let model = std::fs::read(model_path()).expect("models/single-4way.onnx");
    let scenario = greenwave_sim::load("single-4way").expect("scenario");
    let root = std::env::temp_dir().join(format!("gw-bench-finetune-{}", std::process::id()));
    println!("| transitions | decision states | policy epochs | wall (s) | peak RSS (MiB) |");
    println!("|---:|---:|---:|---:|---:|");
    for n in [10_000u32, 50_000] {
        let dir = root.join(format!("log-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        // 5-s decisions: n records = 5n simulated seconds, in day-long sessions.
        let mut left = n * 5;
        let mut seed = 1;
        let t = Instant::now();
        while left > 0 {
            let s = left.min(86_400);
            sim::run_controller(&scenario, &model, 1, seed, s, 0.1, Some(&dir)).expect("log");
            left -= s;
            seed += 1;
        }
        eprintln!(
            "logged {n} transitions in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let out = Command::new(&args[0])
            .args(["--child", dir.to_str().expect("utf-8 path")])
            .output()
            .expect("child");
        let line = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            std::process::exit(1);
        }
        let j: serde_json::Value = serde_json::from_str(line.trim()).expect("child JSON");
        println!(
            "| {} | {} | {}{} | {:.2} | {:.1} |",
            j["records"],
            j["decision_states"],
            j["policy_epochs"],
            if j["stopped_by_kl"] == true {
                " (KL stop)"
            } else {
                ""
            },
            j["wall_s"].as_f64().unwrap_or(f64::NAN),
            j["peak_rss_kib"].as_f64().unwrap_or(f64::NAN) / 1024.0
        );
        eprintln!("gate: {}", j["gate"]);
    }
    let _ = std::fs::remove_dir_all(&root);
}
