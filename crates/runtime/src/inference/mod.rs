//! Policy inference behind one trait, and the choice of action from the logits.
//!
//! Backends ([`PolicyBackend`]) run the policy ONNX (`obs [1, D]` → `logits [1, A]`,
//! `value [1, 1]`; normalisation is in the graph, so they take raw observations). Each is
//! built and optimised once, at load, for batch 1:
//!
//! * [`TractBackend`] (default): pure Rust, no system library.
//! * `OrtBackend` (feature `ort`): ONNX Runtime, loaded at run time from a library path
//!   (`--ort-lib` or `ORT_DYLIB_PATH`); a missing or incompatible library is an error.
//! * [`MatvecBackend`]: a plain-Rust matrix-vector pass over the same weights (read from
//!   the ONNX initialisers): the latency reference, and a third opinion in tests.
//! * [`PerSignalBackend`]: one of the above per signal, for a field whose junctions have
//!   different plans or layouts (each signal's own bundle); the controller asks each
//!   backend for a named signal ([`PolicyBackend::infer_signal`]).
//!
//! [`Explorer`] turns logits into a phase request by the policy's rule: greedy masked
//! argmax, or a draw from the tempered softmax where its manifest names a decision
//! temperature; with `epsilon > 0` (data collection only, capped at [`MAX_EPSILON`]),
//! uniform exploration among the phases the sequencer allows on top. The log-probability
//! logged with each decision is the probability under the rule that actually chose it.

mod matvec;
#[cfg(feature = "ort")]
mod ort_backend;
mod per_signal;
mod tract;

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use greenwave_core::mlp::masked_argmax;
use greenwave_core::{ObsLayout, PhaseId, PhaseMask};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

pub use matvec::MatvecBackend;
#[cfg(feature = "ort")]
pub use ort_backend::OrtBackend;
pub use per_signal::{NoSuchBackend, PerSignalBackend};
pub use tract::TractBackend;

/// Why a policy could not be loaded or run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferenceError {
    /// The model could not be read, checked or optimised.
    #[error("{backend}: cannot load the policy model: {message}")]
    Load {
        /// The backend.
        backend: &'static str,
        /// Why.
        message: String,
    },
    /// Running the model failed.
    #[error("{backend}: inference failed: {message}")]
    Run {
        /// The backend.
        backend: &'static str,
        /// Why.
        message: String,
    },
    /// An input or output of the wrong size.
    #[error("{backend}: {what} has {got} values, expected {expected}")]
    Shape {
        /// The backend.
        backend: &'static str,
        /// Which tensor.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        got: usize,
    },
    /// The ONNX Runtime library is missing or unusable.
    #[error("ONNX Runtime: {0}")]
    OrtLibrary(String),
    /// The backend was not compiled into this build.
    #[error("backend `{0}` is not built in (rebuild greenwave-runtime with `--features {0}`)")]
    NotBuilt(&'static str),
}

/// A loaded policy, optimised for batch 1.
pub trait PolicyBackend {
    /// Short name (`tract`, `ort`, `matvec`).
    fn name(&self) -> &'static str;

    /// Runs the policy on one raw observation: writes the logits (one per phase) and
    /// returns the value estimate. Output checks (finite values) are the caller's.
    fn infer(&mut self, obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError>;

    /// [`infer`](Self::infer) for signal `signal` of the controller: one network serves
    /// every signal unless the backend holds one per signal ([`PerSignalBackend`]).
    fn infer_signal(
        &mut self,
        signal: usize,
        obs: &[f32],
        logits: &mut [f32],
    ) -> Result<f32, InferenceError> {
        let _ = signal;
        self.infer(obs, logits)
    }
}

/// Which backend to load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// tract (pure Rust).
    #[default]
    Tract,
    /// ONNX Runtime (feature `ort`).
    Ort,
    /// The plain-Rust reference.
    Matvec,
}

impl BackendKind {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Tract => "tract",
            BackendKind::Ort => "ort",
            BackendKind::Matvec => "matvec",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tract" => Ok(BackendKind::Tract),
            "ort" => Ok(BackendKind::Ort),
            "matvec" => Ok(BackendKind::Matvec),
            _ => Err(format!("unknown backend `{s}` (known: tract, ort, matvec)")),
        }
    }
}

/// Loads `onnx` (a greenwave policy for `layout`) into a backend of kind `kind`, and runs
/// it once on a zero observation, so shape problems surface at load, not at the first
/// decision. `ort_lib` is the ONNX Runtime library for `Ort` (default: `ORT_DYLIB_PATH`).
pub fn load_backend(
    kind: BackendKind,
    onnx: &[u8],
    layout: ObsLayout,
    ort_lib: Option<&Path>,
) -> Result<Box<dyn PolicyBackend>, InferenceError> {
    // A NaN or infinite weight is a corrupt policy on every backend, also where one hides it;
    // and every backend must run the graph greenwave exports for those weights (`import`
    // checks it), the function the firmware blobs compute.
    let refused = |e: greenwave_policy::onnx::OnnxError| InferenceError::Load {
        backend: kind.name(),
        message: e.to_string(),
    };
    greenwave_policy::onnx::check_finite(onnx).map_err(refused)?;
    greenwave_policy::onnx::import(onnx).map_err(refused)?;
    let mut backend: Box<dyn PolicyBackend> = match kind {
        BackendKind::Tract => Box::new(TractBackend::load(onnx, layout)?),
        BackendKind::Matvec => Box::new(MatvecBackend::load(onnx, layout)?),
        #[cfg(feature = "ort")]
        BackendKind::Ort => Box::new(OrtBackend::load(onnx, layout, ort_lib)?),
        #[cfg(not(feature = "ort"))]
        BackendKind::Ort => {
            let _ = ort_lib;
            return Err(InferenceError::NotBuilt("ort"));
        }
    };
    let mut logits = vec![0.0; layout.n_phases as usize];
    let trial = backend.infer(&vec![0.0; layout.dim()], &mut logits);
    let message = match trial {
        Err(e) => format!("trial run: {e}"),
        Ok(v) if !(v.is_finite() && logits.iter().all(|l| l.is_finite())) => format!(
            "trial run on the all-zero observation gives non-finite outputs (logits \
             {logits:?}, value {v}): every decision would fall back"
        ),
        Ok(_) => return Ok(backend),
    };
    Err(InferenceError::Load {
        backend: backend.name(),
        message,
    })
}

pub(crate) fn check_len(
    backend: &'static str,
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), InferenceError> {
    if expected == got {
        Ok(())
    } else {
        Err(InferenceError::Shape {
            backend,
            what,
            expected,
            got,
        })
    }
}

/// Largest exploration rate accepted: a controller in the field serves the policy's own
/// rule at least 80 % of the time, and every exploratory choice still passes the sequencer.
pub const MAX_EPSILON: f32 = 0.2;

/// An exploration rate outside `0..=MAX_EPSILON`.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("exploration epsilon {0} is outside 0..={MAX_EPSILON}")]
pub struct EpsilonOutOfRange(pub f32);

/// A decision temperature outside the range a manifest holds
/// (`greenwave_policy::manifest::decision_temperature_ok`).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "decision temperature {0} is outside {min}..={max}",
    min = greenwave_policy::manifest::MIN_DECISION_TEMPERATURE,
    max = greenwave_policy::manifest::MAX_DECISION_TEMPERATURE
)]
pub struct TemperatureOutOfRange(pub f32);

/// A phase chosen from the logits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    /// The phase to request.
    pub phase: u8,
    /// Log-probability of `phase` under the rule that chose it:
    /// `ln((1 − ε)·p(phase) + ε / n_allowed)`, where `p` is the policy's own rule (1 for
    /// the greedy phase and 0 for the others, or `softmax(logits / T)` for a policy that
    /// acts at temperature `T`); 0 for a greedy choice without exploration.
    pub log_prob: f32,
    /// Whether the exploratory branch picked it (it may still equal the policy's phase).
    pub explored: bool,
}

/// Chooses phases by the policy's rule (greedy masked argmax, or a draw at the manifest's
/// decision temperature), with ε of exploration among the allowed phases on top.
#[derive(Clone, Debug)]
pub struct Explorer {
    epsilon: f32,
    temperature: Option<f32>,
    rng: Pcg64Mcg,
}

impl Explorer {
    /// Greedy: always the allowed phase with the largest logit.
    pub fn greedy() -> Self {
        Explorer {
            epsilon: 0.0,
            temperature: None,
            rng: Pcg64Mcg::seed_from_u64(0),
        }
    }

    /// ε-greedy with `epsilon` in `0..=MAX_EPSILON`, random stream from `seed`.
    pub fn epsilon_greedy(epsilon: f32, seed: u64) -> Result<Self, EpsilonOutOfRange> {
        if !(0.0..=MAX_EPSILON).contains(&epsilon) {
            return Err(EpsilonOutOfRange(epsilon));
        }
        Ok(Explorer {
            epsilon,
            temperature: None,
            rng: Pcg64Mcg::seed_from_u64(seed),
        })
    }

    /// The same explorer acting by a policy's decision rule: `None`, greedily; `Some(T)`,
    /// drawing from `softmax(logits / T)` (a manifest's `decision_temperature`), from the
    /// explorer's random stream.
    pub fn acting_at(mut self, temperature: Option<f32>) -> Result<Self, TemperatureOutOfRange> {
        if let Some(t) =
            temperature.filter(|&t| !greenwave_policy::manifest::decision_temperature_ok(t))
        {
            return Err(TemperatureOutOfRange(t));
        }
        self.temperature = temperature;
        Ok(self)
    }

    /// The exploration rate.
    pub fn epsilon(&self) -> f32 {
        self.epsilon
    }

    /// The phase to request given `logits` and the sequencer's `mask`; `None` if no
    /// allowed phase has a comparable logit (all NaN, or an empty mask), or, for a policy
    /// acting at a temperature, if any logit is NaN (it has no probability).
    pub fn choose(&mut self, logits: &[f32], mask: PhaseMask) -> Option<Choice> {
        let greedy = masked_argmax(logits, mask)?;
        if self.epsilon == 0.0 && self.temperature.is_none() {
            return Some(Choice {
                phase: greedy,
                log_prob: 0.0,
                explored: false,
            });
        }
        if self.temperature.is_some() && logits.iter().any(|z| z.is_nan()) {
            return None;
        }
        let allowed: Vec<u8> = (0..logits.len().min(greenwave_core::plan::MAX_PHASES) as u8)
            .filter(|&p| mask.allows(PhaseId(p)))
            .collect();
        let n = allowed.len() as f32;
        let explored = self.epsilon > 0.0 && self.rng.random::<f32>() < self.epsilon;
        let phase = match self.temperature {
            _ if explored => allowed[self.rng.random_range(0..allowed.len())],
            None => greedy,
            Some(t) => {
                let u = self.rng.random::<f32>();
                greenwave_core::mlp::masked_sample(logits, mask, t, u, f32::exp)?
            }
        };
        let own = match self.temperature {
            None => f32::from(u8::from(phase == greedy)),
            Some(t) => greenwave_core::mlp::masked_log_prob_at(logits, mask, phase, t)?.exp(),
        };
        let p = (1.0 - self.epsilon) * own + self.epsilon / n;
        Some(Choice {
            phase,
            log_prob: p.ln(),
            explored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_best_allowed_phase_with_probability_one() {
        let mut e = Explorer::greedy();
        let c = e.choose(&[0.1, 3.0, 2.0, -1.0], PhaseMask(0b1101)).unwrap();
        assert_eq!(
            c,
            Choice {
                phase: 2,
                log_prob: 0.0,
                explored: false
            }
        );
        assert_eq!(e.choose(&[f32::NAN; 4], PhaseMask(0b1111)), None);
        assert_eq!(e.choose(&[1.0; 4], PhaseMask(0)), None);
    }

    #[test]
    fn epsilon_is_capped_and_exploration_stays_inside_the_mask() {
        assert!(Explorer::epsilon_greedy(0.25, 1).is_err());
        assert!(Explorer::epsilon_greedy(-0.1, 1).is_err());
        assert!(Explorer::epsilon_greedy(f32::NAN, 1).is_err());
        let mut e = Explorer::epsilon_greedy(0.2, 7).unwrap();
        let mask = PhaseMask(0b0111);
        let logits = [0.0, 5.0, 1.0, 9.0];
        let mut counts = [0u32; 4];
        for _ in 0..20_000 {
            let c = e.choose(&logits, mask).unwrap();
            counts[c.phase as usize] += 1;
            let p = if c.phase == 1 {
                0.8 + 0.2 / 3.0
            } else {
                0.2 / 3.0
            };
            assert!((c.log_prob - (p as f32).ln()).abs() < 1e-6);
        }
        assert_eq!(counts[3], 0, "masked phase never requested");
        let greedy_share = counts[1] as f64 / 20_000.0;
        assert!(
            (greedy_share - (0.8 + 0.2 / 3.0)).abs() < 0.02,
            "{greedy_share}"
        );
    }

    #[test]
    fn a_tempered_policy_draws_as_its_softmax_says_and_logs_that_probability() {
        let bad = |t| Explorer::greedy().acting_at(Some(t)).unwrap_err();
        assert_eq!(bad(0.0), TemperatureOutOfRange(0.0));
        assert_eq!(bad(1e-3), TemperatureOutOfRange(1e-3));
        assert_eq!(bad(1e3), TemperatureOutOfRange(1e3));
        assert!(bad(f32::NAN).0.is_nan());
        assert_eq!(bad(f32::INFINITY), TemperatureOutOfRange(f32::INFINITY));
        let logits = [0.0f32, 1.0, 0.5, 9.0];
        let mask = PhaseMask(0b0111);
        for epsilon in [0.0, 0.1] {
            let mut e = Explorer::epsilon_greedy(epsilon, 3)
                .unwrap()
                .acting_at(Some(0.5))
                .unwrap();
            let want: Vec<f32> = (0..3u8)
                .map(|a| {
                    let own = greenwave_core::mlp::masked_log_prob_at(&logits, mask, a, 0.5);
                    (1.0 - epsilon) * own.unwrap().exp() + epsilon / 3.0
                })
                .collect();
            let mut counts = [0u32; 4];
            for _ in 0..40_000 {
                let c = e.choose(&logits, mask).unwrap();
                counts[c.phase as usize] += 1;
                let logged = c.log_prob.exp();
                assert!((logged - want[c.phase as usize]).abs() < 1e-5, "{c:?}");
            }
            assert_eq!(counts[3], 0, "a masked phase is never requested");
            for a in 0..3 {
                let share = counts[a] as f32 / 40_000.0;
                assert!(
                    (share - want[a]).abs() < 0.01,
                    "ε {epsilon} phase {a}: {share}"
                );
            }
            assert!(counts[0] > 0, "the lowest phase is still drawn");
        }
        let mut e = Explorer::greedy().acting_at(Some(0.5)).unwrap();
        assert_eq!(e.choose(&[0.0, f32::NAN], PhaseMask(0b11)), None);
        assert_eq!(e.choose(&[1.0; 4], PhaseMask(0)), None);
    }
}
