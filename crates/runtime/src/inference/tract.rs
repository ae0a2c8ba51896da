//! The tract backend: the ONNX graph typed for `[1, D]`, optimised once, run from one
//! reusable execution state.

use std::sync::Arc;

use greenwave_core::ObsLayout;
use tract_onnx::prelude::*;

use super::{check_len, InferenceError, PolicyBackend};

const NAME: &str = "tract";

/// A policy in tract.
#[derive(Debug)]
pub struct TractBackend {
    // Kept so the plan outlives the state built from it.
    _plan: Arc<TypedRunnableModel>,
    state: TypedSimpleState,
    obs_dim: usize,
    n_actions: usize,
}

fn load_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Load {
        backend: NAME,
        message: format!("{e:#}"),
    }
}

fn run_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Run {
        backend: NAME,
        message: format!("{e:#}"),
    }
}

impl TractBackend {
    /// Reads, types (batch 1), optimises and plans the model.
    pub fn load(onnx: &[u8], layout: ObsLayout) -> Result<Self, InferenceError> {
        let d = layout.dim();
        let plan = tract_onnx::onnx()
            .model_for_read(&mut &onnx[..])
            .map_err(load_err)?
            .with_input_fact(0, f32::fact([1, d]).into())
            .map_err(load_err)?
            .into_optimized()
            .map_err(load_err)?
            .into_runnable()
            .map_err(load_err)?;
        let outputs = plan.model().output_outlets().map_err(load_err)?.len();
        if outputs != 2 {
            return Err(load_err(format!(
                "model has {outputs} outputs, a greenwave policy has 2 (logits, value)"
            )));
        }
        let state = plan.spawn().map_err(load_err)?;
        Ok(TractBackend {
            _plan: plan,
            state,
            obs_dim: d,
            n_actions: layout.n_phases as usize,
        })
    }
}

impl PolicyBackend for TractBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        check_len(NAME, "observation", self.obs_dim, obs.len())?;
        check_len(NAME, "logits buffer", self.n_actions, logits.len())?;
        let input = Tensor::from_shape(&[1, self.obs_dim], obs).map_err(run_err)?;
        let out = self.state.run(tvec!(input.into())).map_err(run_err)?;
        let (Some(l), Some(v)) = (out.first(), out.get(1)) else {
            return Err(run_err("model returned fewer than 2 outputs"));
        };
        let l = l
            .try_as_plain_ram()
            .and_then(|p| p.as_slice::<f32>())
            .map_err(run_err)?;
        let v = v
            .try_as_plain_ram()
            .and_then(|p| p.as_slice::<f32>())
            .map_err(run_err)?;
        check_len(NAME, "logits output", self.n_actions, l.len())?;
        check_len(NAME, "value output", 1, v.len())?;
        logits.copy_from_slice(l);
        Ok(v[0])
    }
}
