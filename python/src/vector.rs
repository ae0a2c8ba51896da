//! `NativeVecEnv`: N copies of one environment stepped in one call, in Rust, with the GIL
//! released and the copies spread over the cores. Arrays are stacked per copy and signal;
//! signals with smaller observations or fewer phases are zero-padded to the largest.

use numpy::ndarray::{Array1, Array2, Array3};
use numpy::{IntoPyArray, PyArray1, PyArray2, PyArray3, PyReadonlyArray2};
use pyo3::prelude::*;
use rayon::prelude::*;

use crate::args::spec_from_kwargs;
use crate::spec::{BoxEnv, EnvSpec};
use crate::{check_actions, mask, observe, runtime_err, value_err};
use greenwave_sim::PolicyMasks;
use pyo3::types::PyDict;
use std::sync::{Mutex, MutexGuard};

/// One copy and its episode bookkeeping.
struct Slot {
    /// Behind a mutex only to make the class `Sync`; reached through `get_mut`.
    env: Mutex<BoxEnv>,
    /// Episodes finished so far (the next reset's seed offset).
    episodes: u64,
    /// Metrics of the last finished episode, as JSON.
    last_metrics: Option<String>,
    /// The policy's masks under the max-red rule, noted at every decision.
    masks: PolicyMasks,
}

impl Slot {
    /// The environment (a poisoned lock still holds it: its next call reports the fault).
    fn env(&self) -> MutexGuard<'_, BoxEnv> {
        self.env.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn env_mut(&mut self) -> &mut BoxEnv {
        self.env.get_mut().unwrap_or_else(|p| p.into_inner())
    }
}

/// N environments of one spec, stepped together; an environment whose episode ends is
/// reset at once (seed = base seed + N × episodes + its index), and the observation
/// returned for it is the new episode's first.
#[pyclass(module = "greenwave._native", weakref)]
pub struct NativeVecEnv {
    slots: Vec<Slot>,
    base_seed: u64,
    max_dim: usize,
    max_phases: usize,
}

/// Stacked observations, zero-padded: `[n_envs, n_signals, max_dim]`.
fn stack_obs(slots: &[Slot], max_dim: usize) -> Result<Array3<f32>, String> {
    let n_signals = slots.first().map_or(0, |s| s.env().signals().len());
    let mut out = Array3::zeros((slots.len(), n_signals, max_dim));
    for (k, s) in slots.iter().enumerate() {
        for i in 0..n_signals {
            for (d, v) in observe(s.env().as_ref(), i)?.into_iter().enumerate() {
                out[[k, i, d]] = v;
            }
        }
    }
    Ok(out)
}

impl NativeVecEnv {
    fn seed_of(&self, k: usize, episodes: u64) -> u64 {
        let n = self.slots.len() as u64;
        self.base_seed
            .wrapping_add(n.wrapping_mul(episodes))
            .wrapping_add(k as u64)
    }
}

/// Steps one copy; resets it when its episode ended. Returns (rewards, done).
fn step_slot(slot: &mut Slot, actions: &[u8], next_seed: u64) -> Result<(Vec<f32>, bool), String> {
    let mut actions = actions.to_vec();
    let env = slot.env.get_mut().unwrap_or_else(|p| p.into_inner());
    // A phase kept from green past max red with a call is served whatever was asked.
    slot.masks.enforce(env.as_ref(), &mut actions);
    let out = env.step(&actions).map_err(|e| e.to_string())?;
    if out.done {
        let metrics = serde_json::to_string(&env.metrics()).map_err(|e| e.to_string())?;
        env.reset(next_seed).map_err(|e| e.to_string())?;
        slot.last_metrics = Some(metrics);
        slot.episodes += 1;
    }
    slot.masks.note(env.as_ref());
    Ok((out.rewards, out.done))
}

/// Most copies a vector env holds (as `greenwave train --envs`): each holds a simulator,
/// on SUMO a process.
const MAX_ENVS: usize = 1024;

#[pymethods]
impl NativeVecEnv {
    /// `n_envs` copies; the other keyword arguments as `NativeEnv`'s.
    #[new]
    #[pyo3(signature = (n_envs, **kwargs))]
    fn new(py: Python<'_>, n_envs: usize, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        if !(1..=MAX_ENVS).contains(&n_envs) {
            return Err(value_err(format!(
                "n_envs must be 1 to {MAX_ENVS} (each holds a simulator; on SUMO a process), got {n_envs}"
            )));
        }
        let (spec, seed): (EnvSpec, u64) = spec_from_kwargs(kwargs)?;
        // Built without the GIL: on SUMO each copy reads the net and starts a process.
        let slots = py
            .detach(|| {
                (0..n_envs)
                    .map(|k| {
                        let env = spec.build(seed.wrapping_add(k as u64))?;
                        let mut masks = PolicyMasks::default();
                        masks.note(env.as_ref());
                        Ok(Slot {
                            env: Mutex::new(env),
                            episodes: 0,
                            last_metrics: None,
                            masks,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()
            })
            .map_err(value_err)?;
        let first = slots[0].env();
        let signals = first.signals();
        let max_dim = signals.iter().map(|s| s.layout.dim()).max().unwrap_or(0);
        let max_phases = signals.iter().map(|s| s.plan.n_phases()).max().unwrap_or(0);
        drop(first);
        Ok(NativeVecEnv {
            slots,
            base_seed: seed,
            max_dim,
            max_phases,
        })
    }

    /// Number of copies.
    fn n_envs(&self) -> usize {
        self.slots.len()
    }

    /// Observation size of each signal (before padding).
    fn obs_dims(&self) -> Vec<usize> {
        self.slots[0]
            .env()
            .signals()
            .iter()
            .map(|s| s.layout.dim())
            .collect()
    }

    /// Phase count of each signal.
    fn n_phases(&self) -> Vec<usize> {
        self.slots[0]
            .env()
            .signals()
            .iter()
            .map(|s| s.plan.n_phases())
            .collect()
    }

    /// Resets every copy (copy k with `seed + k`); returns `[n_envs, n_signals, max_dim]`.
    fn reset<'py>(&mut self, py: Python<'py>, seed: u64) -> PyResult<Bound<'py, PyArray3<f32>>> {
        self.base_seed = seed;
        let slots = &mut self.slots;
        py.detach(|| {
            slots.par_iter_mut().enumerate().try_for_each(|(k, s)| {
                s.episodes = 0;
                s.env_mut().reset(seed.wrapping_add(k as u64))?;
                let env = s.env.get_mut().unwrap_or_else(|p| p.into_inner());
                s.masks.note(env.as_ref());
                Ok::<(), greenwave_sim::EnvError>(())
            })
        })
        .map_err(runtime_err)?;
        Ok(stack_obs(&self.slots, self.max_dim)
            .map_err(runtime_err)?
            .into_pyarray(py))
    }

    /// Steps every copy with `actions[k][i]` for copy k, signal i. Returns observations
    /// `[n_envs, n_signals, max_dim]`, rewards `[n_envs, n_signals]` and `dones[n_envs]`.
    #[allow(clippy::type_complexity)]
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        actions: PyReadonlyArray2<'py, i64>,
    ) -> PyResult<(
        Bound<'py, PyArray3<f32>>,
        Bound<'py, PyArray2<f32>>,
        Bound<'py, PyArray1<bool>>,
    )> {
        let actions = actions.as_array();
        if actions.nrows() != self.slots.len() {
            return Err(value_err(format!(
                "expected actions for {} environments, got {}",
                self.slots.len(),
                actions.nrows()
            )));
        }
        let checked: Vec<Vec<u8>> = self
            .slots
            .iter()
            .zip(actions.rows())
            .map(|(s, row)| check_actions(s.env().as_ref(), &row.to_vec()))
            .collect::<Result<_, _>>()
            .map_err(value_err)?;
        let seeds: Vec<u64> = (0..self.slots.len())
            .map(|k| self.seed_of(k, self.slots[k].episodes + 1))
            .collect();
        let slots = &mut self.slots;
        let results: Vec<(Vec<f32>, bool)> = py
            .detach(|| {
                slots
                    .par_iter_mut()
                    .zip(checked.par_iter())
                    .zip(seeds.par_iter())
                    .map(|((s, a), &seed)| step_slot(s, a, seed))
                    .collect::<Result<Vec<_>, String>>()
            })
            .map_err(runtime_err)?;
        let n_signals = results.first().map_or(0, |r| r.0.len());
        let mut rewards = Array2::zeros((results.len(), n_signals));
        let mut dones = Array1::from_elem(results.len(), false);
        for (k, (r, done)) in results.into_iter().enumerate() {
            for (i, v) in r.into_iter().enumerate() {
                rewards[[k, i]] = v;
            }
            dones[k] = done;
        }
        let obs = stack_obs(&self.slots, self.max_dim).map_err(runtime_err)?;
        Ok((
            obs.into_pyarray(py),
            rewards.into_pyarray(py),
            dones.into_pyarray(py),
        ))
    }

    /// Action masks `[n_envs, n_signals, max_phases]` (padding: false).
    fn action_masks<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray3<bool>> {
        let n_signals = self.slots[0].env().signals().len();
        let mut out = Array3::from_elem((self.slots.len(), n_signals, self.max_phases), false);
        for (k, s) in self.slots.iter().enumerate() {
            for i in 0..n_signals {
                let env = s.env();
                for (p, allowed) in mask(env.as_ref(), &s.masks, i).into_iter().enumerate() {
                    out[[k, i, p]] = allowed;
                }
            }
        }
        out.into_pyarray(py)
    }

    /// Metrics of copy `k`'s last finished episode, as JSON (`None` before one ends).
    fn last_metrics_json(&self, k: usize) -> PyResult<Option<String>> {
        self.slots
            .get(k)
            .map(|s| s.last_metrics.clone())
            .ok_or_else(|| value_err(format!("no environment {k} ({} in all)", self.slots.len())))
    }
}
