//! A policy trained in Python (an MLP: Stable-Baselines3's `MlpPolicy`, a plain torch
//! network) written in greenwave's policy contract for one signal of an environment: the
//! ONNX model with its manifest (plan hash, layout, timing), the firmware blobs and the
//! manifest JSON, by greenwave-policy's own writer, so `greenwave bundle` signs it and
//! `greenwave-controller` runs it like a policy `greenwave export` wrote.

use std::path::Path;

use greenwave_core::mlp::DenseLayer;
use greenwave_core::Millis;
use greenwave_policy::files::{write_policy_files, PolicyFiles};
use greenwave_policy::{Manifest, ObsNormalization, PolicyWeights, Provenance};
use greenwave_sim::SignalSpec;

/// One dense layer as given: `weight` `[outputs][inputs]` row-major, `bias` `[outputs]`.
pub struct LayerIn {
    /// Output width.
    pub outputs: usize,
    /// Input width.
    pub inputs: usize,
    /// Row-major weights.
    pub weight: Vec<f32>,
    /// Biases.
    pub bias: Vec<f32>,
}

/// Checks a network's layers chain from `inputs` to `outputs` and holds finite numbers.
fn dense(
    name: &str,
    layers: Vec<LayerIn>,
    inputs: usize,
    outputs: usize,
) -> Result<Vec<DenseLayer>, String> {
    if layers.is_empty() {
        return Err(format!("{name}: no layers"));
    }
    let mut width = inputs;
    let n = layers.len();
    let mut out = Vec::with_capacity(n);
    for (k, l) in layers.into_iter().enumerate() {
        if l.inputs != width {
            return Err(format!(
                "{name} layer {k}: takes {} inputs, but {} come in (the observation has {inputs})",
                l.inputs, width
            ));
        }
        if l.bias.len() != l.outputs {
            return Err(format!(
                "{name} layer {k}: {} biases for {} outputs",
                l.bias.len(),
                l.outputs
            ));
        }
        if !l.weight.iter().chain(&l.bias).all(|v| v.is_finite()) {
            return Err(format!("{name} layer {k}: a weight or bias is not finite"));
        }
        width = l.outputs;
        out.push(DenseLayer {
            inputs: l.inputs,
            outputs: l.outputs,
            weights: l.weight.into_iter().collect(),
            bias: l.bias.into_iter().collect(),
        });
    }
    if width != outputs {
        return Err(format!(
            "{name}: the last layer gives {width} outputs; this signal needs {outputs}"
        ));
    }
    Ok(out)
}

/// Observation normalisation from a mean and standard deviation (identity when absent).
fn normalization(
    dim: usize,
    mean: Option<Vec<f32>>,
    std: Option<Vec<f32>>,
    clip: f32,
) -> Result<ObsNormalization, String> {
    if !(clip.is_finite() && clip > 0.0) {
        return Err(format!("clip {clip} must be a positive number"));
    }
    let mean = mean.unwrap_or_else(|| vec![0.0; dim]);
    let std = std.unwrap_or_else(|| vec![1.0; dim]);
    if mean.len() != dim || std.len() != dim {
        return Err(format!(
            "obs_mean has {} and obs_std {} values; the observation has {dim}",
            mean.len(),
            std.len()
        ));
    }
    if let Some(bad) = std.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(format!("obs_std[{bad}] = {} must be positive", std[bad]));
    }
    if mean.iter().any(|m| !m.is_finite()) {
        return Err("obs_mean holds a value that is not finite".into());
    }
    Ok(ObsNormalization {
        mean,
        inv_std: std.iter().map(|s| 1.0 / s).collect(),
        clip,
    })
}

/// The networks and settings of one export.
pub struct ExportRequest {
    /// Actor layers, input to output (logits, one per phase); tanh between them.
    pub actor: Vec<LayerIn>,
    /// Critic layers, input to output (one value); tanh between them.
    pub critic: Vec<LayerIn>,
    /// Observation mean (identity normalisation when absent).
    pub obs_mean: Option<Vec<f32>>,
    /// Observation standard deviation.
    pub obs_std: Option<Vec<f32>>,
    /// Normalised observations are clipped to ±this.
    pub clip: f32,
    /// Where the policy came from.
    pub provenance: Provenance,
}

/// Writes the policy for `signal` (with the environment's decision interval; with
/// `program_clock` when its observation's last `P` lanes are the program clock) to `out`.
pub fn export(
    signal: &SignalSpec,
    decision_interval: Millis,
    program_clock: bool,
    req: ExportRequest,
    out: &Path,
) -> Result<PolicyFiles, String> {
    let layout = signal.layout;
    let actor = dense("actor", req.actor, layout.dim(), layout.n_phases as usize)?;
    let critic = dense("critic", req.critic, layout.dim(), 1)?;
    let weights = PolicyWeights {
        obs_layout: layout,
        norm: normalization(layout.dim(), req.obs_mean, req.obs_std, req.clip)?,
        actor,
        critic,
    };
    let mut manifest = Manifest::new(
        &signal.plan,
        layout,
        decision_interval,
        weights.hidden(),
        req.provenance,
    );
    manifest.program_clock = program_clock;
    write_policy_files(&weights, &manifest, signal.plan.hash(), out).map_err(|e| e.to_string())
}
