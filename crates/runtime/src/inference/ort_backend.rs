//! The ONNX Runtime backend (feature `ort`): the library is loaded at run time, the
//! session optimised once with the batch dimension fixed to 1.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use greenwave_core::ObsLayout;
use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;

use super::{check_len, InferenceError, PolicyBackend};

const NAME: &str = "ort";

/// A policy in ONNX Runtime.
pub struct OrtBackend {
    session: Session,
    input: Tensor<f32>,
    // The environment outlives the session built in it.
    _env: Environment,
    obs_dim: usize,
    n_actions: usize,
}

impl std::fmt::Debug for OrtBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtBackend")
            .field("obs_dim", &self.obs_dim)
            .field("n_actions", &self.n_actions)
            .finish_non_exhaustive()
    }
}

fn load_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Load {
        backend: NAME,
        message: e.to_string(),
    }
}

fn run_err(e: impl std::fmt::Display) -> InferenceError {
    InferenceError::Run {
        backend: NAME,
        message: e.to_string(),
    }
}

/// The ONNX Runtime library to load: `explicit`, else `ORT_DYLIB_PATH`.
pub(crate) fn library_path(explicit: Option<&Path>) -> Result<PathBuf, InferenceError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os("ORT_DYLIB_PATH")
            .map(PathBuf::from)
            .ok_or_else(|| {
                InferenceError::OrtLibrary(
                    "no library given: pass --ort-lib or set ORT_DYLIB_PATH to libonnxruntime.so \
                 (pip install onnxruntime==1.31.1; it is under onnxruntime/capi/)"
                        .into(),
                )
            })?,
    };
    if !path.is_file() {
        return Err(InferenceError::OrtLibrary(format!(
            "{} does not exist or is not a file",
            path.display()
        )));
    }
    Ok(path)
}

/// ONNX Runtime allows one environment per process, and its library is loaded once: the
/// first load makes it, later loads (a new policy version, a second signal) share it.
static ENVIRONMENT: Mutex<Option<(PathBuf, Environment)>> = Mutex::new(None);

fn environment(lib: &Path) -> Result<Environment, InferenceError> {
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((loaded, env)) = slot.as_ref() {
        if loaded.as_path() != lib {
            return Err(InferenceError::OrtLibrary(format!(
                "ONNX Runtime is already loaded from {} in this process; cannot also load {}",
                loaded.display(),
                lib.display()
            )));
        }
        return Ok(env.clone());
    }
    let env = ort::init_from(lib)
        .map_err(|e| InferenceError::OrtLibrary(e.to_string()))?
        .with_name("greenwave-controller")
        .build()
        .map_err(|e| InferenceError::OrtLibrary(e.to_string()))?;
    *slot = Some((lib.to_path_buf(), env.clone()));
    Ok(env)
}

impl OrtBackend {
    /// Loads the ONNX Runtime library (`ort_lib`, else `ORT_DYLIB_PATH`; once per process)
    /// and the model.
    pub fn load(
        onnx: &[u8],
        layout: ObsLayout,
        ort_lib: Option<&Path>,
    ) -> Result<Self, InferenceError> {
        let lib = library_path(ort_lib)?;
        let env = environment(&lib)?;
        let session = Session::builder(&env)
            .map_err(load_err)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(load_err)?
            // One decision at a time on a small MLP: threads only add hand-off latency.
            .with_intra_threads(1)
            .map_err(load_err)?
            .with_dimension_override("batch", 1)
            .map_err(load_err)?
            .commit_from_memory(onnx)
            .map_err(load_err)?;
        let d = layout.dim();
        let input = Tensor::from_array(([1usize, d], vec![0.0f32; d])).map_err(load_err)?;
        Ok(OrtBackend {
            session,
            input,
            _env: env,
            obs_dim: d,
            n_actions: layout.n_phases as usize,
        })
    }
}

impl PolicyBackend for OrtBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
        check_len(NAME, "observation", self.obs_dim, obs.len())?;
        check_len(NAME, "logits buffer", self.n_actions, logits.len())?;
        self.input.extract_tensor_mut().1.copy_from_slice(obs);
        let out = self
            .session
            .run(ort::inputs![&self.input])
            .map_err(run_err)?;
        // ort's `out["name"]` panics on a model without that output.
        let output = |name: &str| {
            out.get(name)
                .ok_or_else(|| run_err(format!("the model has no output named `{name}`")))
        };
        let (_, l) = output("logits")?
            .try_extract_tensor::<f32>()
            .map_err(run_err)?;
        let (_, v) = output("value")?
            .try_extract_tensor::<f32>()
            .map_err(run_err)?;
        check_len(NAME, "logits output", self.n_actions, l.len())?;
        check_len(NAME, "value output", 1, v.len())?;
        logits.copy_from_slice(l);
        Ok(v[0])
    }
}
