//! `greenwave._native`: greenwave's environments (the embedded simulator and the SUMO
//! backend) for Python. `python/greenwave/` wraps them as Gymnasium and PettingZoo
//! environments; this module only moves numbers across the boundary, with every rule
//! (phase plans, the sequencer, observations, rewards, metrics) staying in greenwave-sim.

mod args;
mod export;
mod spec;
mod vector;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadonlyArray2};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use args::spec_from_kwargs;
use greenwave_sim::PolicyMasks;
use spec::{BoxEnv, EnvSpec};
pub use vector::NativeVecEnv;

/// One environment: every signal of a scenario or SUMO net, stepped together.
#[pyclass(module = "greenwave._native", weakref)]
pub struct NativeEnv {
    /// Behind a mutex so the class is `Sync` (Python may touch it from any thread); the
    /// GIL already serialises calls, so it is never contended.
    env: Mutex<BoxEnv>,
    /// The policy's masks under the max-red rule, noted at every decision.
    masks: Mutex<PolicyMasks>,
    spec: EnvSpec,
}

impl NativeEnv {
    fn env(&self) -> PyResult<MutexGuard<'_, BoxEnv>> {
        self.env
            .lock()
            .map_err(|_| runtime_err("the environment failed in an earlier call (a panic)"))
    }

    fn masks(&self) -> PyResult<MutexGuard<'_, PolicyMasks>> {
        self.masks
            .lock()
            .map_err(|_| runtime_err("the environment failed in an earlier call (a panic)"))
    }
}

/// A `ValueError` for bad arguments.
fn value_err(e: impl ToString) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A `RuntimeError` for a failing simulator (SUMO died, a bad reading).
fn runtime_err(e: impl ToString) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// Checks one action per signal, each a phase of that signal's plan.
fn check_actions(env: &dyn greenwave_sim::Env, actions: &[i64]) -> Result<Vec<u8>, String> {
    let signals = env.signals();
    if actions.len() != signals.len() {
        return Err(format!(
            "expected {} actions (one per signal), got {}",
            signals.len(),
            actions.len()
        ));
    }
    signals
        .iter()
        .zip(actions)
        .map(|(s, &a)| {
            let n = s.plan.n_phases() as i64;
            if (0..n).contains(&a) {
                Ok(a as u8)
            } else {
                Err(format!(
                    "signal {}: action {a} is not a phase (0..{n})",
                    s.id
                ))
            }
        })
        .collect()
}

/// Observation of signal `i` of `env`.
fn observe(env: &dyn greenwave_sim::Env, i: usize) -> Result<Vec<f32>, String> {
    let mut buf = vec![0.0; env.signals()[i].layout.dim()];
    env.observe(i, &mut buf).map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Which phases signal `i` may request now: the sequencer's action mask under the max-red
/// rule (`masks`, noted at this decision), as in `greenwave train`.
fn mask(env: &dyn greenwave_sim::Env, masks: &PolicyMasks, i: usize) -> Vec<bool> {
    let m = masks.mask(env, i);
    (0..env.signals()[i].plan.n_phases())
        .map(|p| m.allows(greenwave_core::PhaseId(p as u8)))
        .collect()
}

#[pymethods]
impl NativeEnv {
    /// Keyword arguments: see the Python package's README (`backend`, `scenario`,
    /// `demand`, `net`, `routes`, `begin_s`, `step_length_s`, `episode_s`,
    /// `decision_interval_s`, `reward`,
    /// `timing`, `yellow_s`, `all_red_s`, `min_green_s`, `max_green_s`, `program`,
    /// `program_clock`, `pedestrian_zones`, `program_intergreens`, `pedestrian_weight`, `seed`).
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn new(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let (spec, seed) = spec_from_kwargs(kwargs)?;
        // Built without the GIL: on SUMO it reads the net and starts a process.
        let env = py.detach(|| spec.build(seed)).map_err(value_err)?;
        let mut masks = PolicyMasks::default();
        masks.note(env.as_ref());
        Ok(NativeEnv {
            env: Mutex::new(env),
            masks: Mutex::new(masks),
            spec,
        })
    }

    /// Signal ids, in the order actions, observations and rewards use.
    fn signal_ids(&self) -> PyResult<Vec<String>> {
        Ok(self.env()?.signals().iter().map(|s| s.id.clone()).collect())
    }

    /// Observation size of each signal.
    fn obs_dims(&self) -> PyResult<Vec<usize>> {
        Ok(self
            .env()?
            .signals()
            .iter()
            .map(|s| s.layout.dim())
            .collect())
    }

    /// Phase (action) count of each signal.
    fn n_phases(&self) -> PyResult<Vec<usize>> {
        Ok(self
            .env()?
            .signals()
            .iter()
            .map(|s| s.plan.n_phases())
            .collect())
    }

    /// Seconds simulated per step.
    fn decision_interval_s(&self) -> PyResult<f64> {
        Ok(f64::from(self.env()?.decision_interval().0) / 1000.0)
    }

    /// Simulated seconds since reset.
    fn now_s(&self) -> PyResult<f64> {
        Ok(f64::from(self.env()?.now().0) / 1000.0)
    }

    /// The reward's name.
    fn reward_name(&self) -> PyResult<String> {
        Ok(self.env()?.reward_kind().name().to_string())
    }

    /// Starts an episode; returns each signal's observation.
    fn reset<'py>(&self, py: Python<'py>, seed: u64) -> PyResult<Vec<Bound<'py, PyArray1<f32>>>> {
        py.detach(|| self.env().map(|mut e| e.reset(seed)))?
            .map_err(runtime_err)?;
        self.masks()?.note(self.env()?.as_ref());
        self.observations(py)
    }

    /// One phase request per signal; simulates one decision interval. Returns each
    /// signal's observation, the rewards and whether the episode reached its end.
    #[allow(clippy::type_complexity)]
    fn step<'py>(
        &self,
        py: Python<'py>,
        actions: Vec<i64>,
    ) -> PyResult<(
        Vec<Bound<'py, PyArray1<f32>>>,
        Bound<'py, PyArray1<f32>>,
        bool,
    )> {
        let mut actions = check_actions(self.env()?.as_ref(), &actions).map_err(value_err)?;
        // A phase kept from green past max red with a call is served whatever was asked.
        self.masks()?.enforce(self.env()?.as_ref(), &mut actions);
        let out = py
            .detach(|| self.env().map(|mut e| e.step(&actions)))?
            .map_err(runtime_err)?;
        self.masks()?.note(self.env()?.as_ref());
        let obs = self.observations(py)?;
        Ok((obs, out.rewards.into_pyarray(py), out.done))
    }

    /// Each signal's current observation.
    fn observations<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyArray1<f32>>>> {
        let env = self.env()?;
        (0..env.signals().len())
            .map(|i| {
                observe(env.as_ref(), i)
                    .map(|o| o.into_pyarray(py))
                    .map_err(runtime_err)
            })
            .collect()
    }

    /// Each signal's action mask (which phases it may request now).
    fn action_masks<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyArray1<bool>>>> {
        let (env, masks) = (self.env()?, self.masks()?);
        Ok((0..env.signals().len())
            .map(|i| mask(env.as_ref(), &masks, i).into_pyarray(py))
            .collect())
    }

    /// The episode's metrics so far, as JSON (the fields of `greenwave eval`).
    fn metrics_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.env()?.metrics()).map_err(runtime_err)
    }

    /// Writes an MLP policy for signal `signal` in greenwave's contract: `path` (`.onnx`,
    /// manifest inside) with `.blob`, `.int8.blob` and `.manifest.json` beside it. `actor`
    /// and `critic` are lists of `(weight [out, in], bias [out])` float32 arrays, tanh
    /// between layers; `provenance_json` a JSON `Provenance`. Returns the paths written.
    #[pyo3(signature = (path, signal, actor, critic, obs_mean = None, obs_std = None, clip = 10.0, provenance_json = None))]
    #[allow(clippy::too_many_arguments)]
    fn export_policy(
        &self,
        path: PathBuf,
        signal: usize,
        actor: Vec<(PyReadonlyArray2<'_, f32>, PyReadonlyArray1<'_, f32>)>,
        critic: Vec<(PyReadonlyArray2<'_, f32>, PyReadonlyArray1<'_, f32>)>,
        obs_mean: Option<Vec<f32>>,
        obs_std: Option<Vec<f32>>,
        clip: f32,
        provenance_json: Option<String>,
    ) -> PyResult<Vec<PathBuf>> {
        let env = self.env()?;
        let spec = env.signals().get(signal).ok_or_else(|| {
            value_err(format!(
                "no signal {signal} ({} in this environment)",
                env.signals().len()
            ))
        })?;
        let provenance = match provenance_json {
            Some(text) => {
                serde_json::from_str(&text).map_err(|e| value_err(format!("provenance: {e}")))?
            }
            None => greenwave_policy::Provenance::default(),
        };
        let req = export::ExportRequest {
            actor: layers(actor),
            critic: layers(critic),
            obs_mean,
            obs_std,
            clip,
            provenance,
        };
        let clock = env.program_clock(signal).is_some();
        let files =
            export::export(spec, env.decision_interval(), clock, req, &path).map_err(value_err)?;
        Ok(vec![
            files.onnx,
            files.blob,
            files.blob_int8,
            files.manifest,
        ])
    }

    /// A description of what was built.
    fn __repr__(&self) -> PyResult<String> {
        Ok(format!(
            "NativeEnv({:?}, {} signals)",
            self.spec.backend,
            self.env()?.signals().len()
        ))
    }
}

/// `(weight, bias)` arrays as layers.
fn layers(
    given: Vec<(PyReadonlyArray2<'_, f32>, PyReadonlyArray1<'_, f32>)>,
) -> Vec<export::LayerIn> {
    given
        .into_iter()
        .map(|(w, b)| {
            let w = w.as_array();
            export::LayerIn {
                outputs: w.nrows(),
                inputs: w.ncols(),
                weight: w.iter().copied().collect(),
                bias: b.as_array().iter().copied().collect(),
            }
        })
        .collect()
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeEnv>()?;
    m.add_class::<NativeVecEnv>()?;
    Ok(())
}
