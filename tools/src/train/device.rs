//! `--device cpu|cuda`: where the learner's networks and updates run. Rollouts always run on
//! the CPU (plain-Rust forward passes over the exported weights).

use anyhow::Result;
use candle_core::Device;
use serde::{Deserialize, Serialize};

/// The compute device of the learner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDevice {
    /// candle on the CPU (default; the only device CI builds).
    #[default]
    Cpu,
    /// candle on the first CUDA GPU; needs a build with `--features cuda`.
    Cuda,
}

/// What `--device cuda` answers in a build without the `cuda` feature.
pub const CUDA_NOT_BUILT: &str = "--device cuda: this greenwave was built without CUDA support; \
rebuild with `cargo build --release -p greenwave-tools --features cuda` (needs the CUDA toolkit \
and nvcc; CI never enables it), or train with --device cpu";

impl ComputeDevice {
    /// The candle device, or why this build cannot provide it.
    pub fn candle(self) -> Result<Device> {
        match self {
            ComputeDevice::Cpu => Ok(Device::Cpu),
            ComputeDevice::Cuda => cuda(),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    use anyhow::Context;
    Device::new_cuda(0).context("--device cuda: opening CUDA GPU 0")
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device> {
    anyhow::bail!(CUDA_NOT_BUILT)
}

#[cfg(test)]
mod tests {
    use super::super::{train, Algo, TrainConfig};
    use super::*;

    #[test]
    fn cpu_is_the_default_and_always_available() {
        assert_eq!(ComputeDevice::default(), ComputeDevice::Cpu);
        assert!(matches!(ComputeDevice::Cpu.candle(), Ok(Device::Cpu)));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_rebuild() {
        let e = ComputeDevice::Cuda.candle().unwrap_err().to_string();
        assert!(e.contains("--features cuda"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn training_on_cuda_without_the_feature_fails_before_any_work() {
        let mut cfg = TrainConfig::new("single-4way", Algo::Ppo, 10, 1);
        cfg.device = ComputeDevice::Cuda;
        let out = std::env::temp_dir().join(format!("gw-device-{}", std::process::id()));
        let Err(e) = train(&cfg, &out, false, false) else {
            panic!("cuda must be refused in a build without the feature");
        };
        assert!(e.to_string().contains("--features cuda"), "{e}");
        assert!(!out.exists(), "no run folder written");
    }

    #[test]
    fn run_json_records_the_device_and_older_runs_load_as_cpu() {
        let mut cfg = TrainConfig::new("single-4way", Algo::Ppo, 10, 1);
        cfg.device = ComputeDevice::Cuda;
        let mut v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v["device"], "cuda");
        let back: TrainConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.device, ComputeDevice::Cuda);
        v.as_object_mut().unwrap().remove("device");
        let older: TrainConfig = serde_json::from_value(v).unwrap();
        assert_eq!(older.device, ComputeDevice::Cpu);
    }

    #[test]
    fn serialises_lowercase() {
        assert_eq!(
            serde_json::to_string(&ComputeDevice::Cuda).unwrap(),
            "\"cuda\""
        );
    }
}
