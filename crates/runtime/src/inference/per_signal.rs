//! One network per signal: a controller whose junctions have different plans or layouts
//! runs each signal's own export (one bundle each) behind one [`PolicyBackend`].

use super::{InferenceError, PolicyBackend};

/// The backends of several bundles, and which one each signal runs.
pub struct PerSignalBackend {
    backends: Vec<Box<dyn PolicyBackend>>,
    of_signal: Vec<usize>,
}

/// `of_signal` names a backend that is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signal {signal} runs network {backend}, but only {n} are loaded")]
pub struct NoSuchBackend {
    /// The signal.
    pub signal: usize,
    /// The backend it names.
    pub backend: usize,
    /// How many are loaded.
    pub n: usize,
}

impl PerSignalBackend {
    /// `backends[of_signal[i]]` runs signal `i`.
    pub fn new(
        backends: Vec<Box<dyn PolicyBackend>>,
        of_signal: Vec<usize>,
    ) -> Result<Self, NoSuchBackend> {
        let n = backends.len();
        if let Some((signal, &backend)) = of_signal.iter().enumerate().find(|(_, &b)| b >= n) {
            return Err(NoSuchBackend { signal, backend, n });
        }
        Ok(Self {
            backends,
            of_signal,
        })
    }

    /// How many signals it serves.
    pub fn n_signals(&self) -> usize {
        self.of_signal.len()
    }
}

impl PolicyBackend for PerSignalBackend {
    fn name(&self) -> &'static str {
        self.backends.first().map_or("none", |b| b.name())
    }

    /// Without a signal there is no network to run: an error, never another signal's.
    fn infer(&mut self, _obs: &[f32], _logits: &mut [f32]) -> Result<f32, InferenceError> {
        Err(InferenceError::Run {
            backend: self.name(),
            message: "a per-signal policy runs only for a named signal".into(),
        })
    }

    fn infer_signal(
        &mut self,
        signal: usize,
        obs: &[f32],
        logits: &mut [f32],
    ) -> Result<f32, InferenceError> {
        let name = self.name();
        let Some(&k) = self.of_signal.get(signal) else {
            return Err(InferenceError::Run {
                backend: name,
                message: format!(
                    "signal {signal}: this policy serves {} signals",
                    self.of_signal.len()
                ),
            });
        };
        self.backends[k].infer(obs, logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes its constant into every logit and returns it as the value.
    struct Constant(f32);

    impl PolicyBackend for Constant {
        fn name(&self) -> &'static str {
            "constant"
        }
        fn infer(&mut self, _obs: &[f32], logits: &mut [f32]) -> Result<f32, InferenceError> {
            logits.fill(self.0);
            Ok(self.0)
        }
    }

    fn two() -> PerSignalBackend {
        let b: Vec<Box<dyn PolicyBackend>> = vec![Box::new(Constant(0.0)), Box::new(Constant(1.0))];
        PerSignalBackend::new(b, vec![1, 0, 1]).unwrap()
    }

    #[test]
    fn each_signal_runs_its_own_network() {
        let mut p = two();
        let mut logits = [9.0; 3];
        for (signal, want) in [(0, 1.0), (1, 0.0), (2, 1.0)] {
            assert_eq!(p.infer_signal(signal, &[0.0], &mut logits), Ok(want));
            assert_eq!(logits, [want; 3]);
        }
        assert_eq!(p.n_signals(), 3);
    }

    #[test]
    fn an_unknown_signal_or_none_is_an_error_not_another_signals_network() {
        let mut p = two();
        let mut logits = [9.0; 3];
        let e = p.infer_signal(3, &[0.0], &mut logits).unwrap_err();
        assert!(e.to_string().contains("signal 3"), "{e}");
        assert!(p.infer(&[0.0], &mut logits).is_err());
        assert_eq!(logits, [9.0; 3], "nothing written");
    }

    #[test]
    fn a_signal_naming_a_missing_network_is_refused() {
        let b: Vec<Box<dyn PolicyBackend>> = vec![Box::new(Constant(0.0))];
        let e = PerSignalBackend::new(b, vec![0, 1]).err().unwrap();
        assert_eq!(
            e,
            NoSuchBackend {
                signal: 1,
                backend: 1,
                n: 1
            }
        );
    }
}
