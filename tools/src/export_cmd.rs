//! `greenwave export`: a run folder → ONNX policy (manifest in `metadata_props`), the
//! firmware's postcard blobs (f32 and int8) and the manifest JSON beside it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use greenwave_core::PhasePlan;
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_learn::{onnx, Manifest, Provenance};
use greenwave_sim::Scenario;

use crate::train::checkpoint::load_policy;

/// Files written by an export.
#[derive(Clone, Debug)]
pub struct Exported {
    /// The ONNX model.
    pub onnx: PathBuf,
    /// f32 firmware blob.
    pub blob: PathBuf,
    /// int8 firmware blob.
    pub blob_int8: PathBuf,
    /// Manifest JSON.
    pub manifest: PathBuf,
}

/// Paths of the side files of an ONNX model path: `X.blob`, `X.int8.blob`, `X.manifest.json`.
pub fn side_paths(onnx_path: &Path) -> (PathBuf, PathBuf, PathBuf) {
    (
        onnx_path.with_extension("blob"),
        onnx_path.with_extension("int8.blob"),
        onnx_path.with_extension("manifest.json"),
    )
}

/// Exports the latest policy of `run` to `out` (an `.onnx` path).
pub fn export(run: &Path, out: &Path) -> Result<Exported> {
    let (weights, info, pinfo) =
        load_policy(run).with_context(|| format!("reading run folder {}", run.display()))?;
    // The plans the environment trained on (run.json); older run folders have only their
    // scenario.toml.
    let plans: Vec<PhasePlan> = if info.plans.is_empty() {
        let scenario = Scenario::from_file(&run.join("scenario.toml"))
            .context("reading the run's scenario.toml")?;
        scenario.plans().into_iter().cloned().collect()
    } else {
        info.plans.clone()
    };
    let plan = plans
        .first()
        .context("the trained environment has no signals")?;
    let mut details = serde_json::Map::new();
    let hashes: Vec<String> = plans.iter().map(plan_hash_hex).collect();
    details.insert("plan_hashes".into(), serde_json::json!(hashes));
    details.insert("iterations".into(), serde_json::json!(pinfo.iteration));
    let scenario = match info.config.sim.sumo_label() {
        Some(label) => {
            details.insert("backend".into(), serde_json::json!("sumo"));
            details.insert("sumo_net".into(), serde_json::json!(info.config.sim.net));
            details.insert(
                "sumo_routes".into(),
                serde_json::json!(info.config.sim.routes),
            );
            details.insert(
                "sumo_begin_s".into(),
                serde_json::json!(info.config.sim.begin),
            );
            label
        }
        None => info.config.scenario.clone(),
    };
    let provenance = Provenance {
        command: info.config.command.clone(),
        git_rev: info.git_rev.clone(),
        seed: info.config.seed,
        scenario,
        algorithm: info.config.algo.name().into(),
        env_steps: pinfo.env_steps,
        parent_version: None,
        details,
    };
    let manifest = Manifest::new(
        plan,
        weights.obs_layout,
        info.decision_interval_s as f32,
        info.config.hidden.clone(),
        provenance,
    );
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bytes = onnx::export(&weights, &manifest);
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let (blob, blob_int8, manifest_path) = side_paths(out);
    let mlp = weights.actor_mlp(plan.hash(), manifest.policy_version);
    std::fs::write(
        &blob,
        mlp.to_blob(false)
            .map_err(|e| anyhow::anyhow!("f32 blob: {e}"))?,
    )?;
    std::fs::write(
        &blob_int8,
        mlp.to_blob(true)
            .map_err(|e| anyhow::anyhow!("int8 blob: {e}"))?,
    )?;
    std::fs::write(&manifest_path, serde_json::to_string_pretty(&manifest)?)?;
    Ok(Exported {
        onnx: out.to_path_buf(),
        blob,
        blob_int8,
        manifest: manifest_path,
    })
}

/// Arguments of `greenwave export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The run folder (from `greenwave train --out`).
    pub run: PathBuf,
    /// The ONNX file to write; `.blob`, `.int8.blob` and `.manifest.json` go beside it.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `greenwave export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let e = export(&args.run, &args.out)?;
    println!("wrote {}", e.onnx.display());
    println!("wrote {} (f32 firmware blob)", e.blob.display());
    println!("wrote {} (int8 firmware blob)", e.blob_int8.display());
    println!("wrote {}", e.manifest.display());
    Ok(())
}
