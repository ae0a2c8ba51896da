//! The learner's tanh: on the CPU, a vectorisable rational approximation with a fused
//! backward, because the update of the shared lane–phase network spends most of its time
//! in candle's element-by-element `tanh` (libm's `tanhf`, then `1 − y²` in three more
//! passes over the data).
//!
//! The approximation is Eigen's `generic_fast_tanh_float`: an odd degree-13 over an even
//! degree-6 polynomial on `x` clamped to ±7.905, within 5e-7 of the exact tanh for every
//! f32 input (test `fast_tanh_is_within_5e7_of_tanh`), below the f32 rounding of values
//! near 1. Only training uses it: rollouts, export, the runtime and the firmware keep the
//! exact tanh, so a trained network means the same function everywhere; training sees
//! the same network up to float rounding. Other devices and dtypes use candle's `tanh`.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Result, Shape, Tensor};

const CLAMP: f32 = 7.905_311;
const ALPHA: [f32; 7] = [
    4.893_524_6e-3,
    6.372_619_3e-4,
    1.485_722_4e-5,
    5.122_297e-8,
    -8.604_672e-11,
    2.000_188e-13,
    -2.760_768_5e-16,
];
const BETA: [f32; 4] = [4.893_525e-3, 2.268_434_6e-3, 1.185_347e-4, 1.198_258_4e-6];

/// tanh of one value by the rational approximation, clamped to `[-1, 1]`. Plain
/// multiply-adds: `mul_add` is a library call on a build without the FMA target feature.
#[inline]
pub fn fast_tanh(x: f32) -> f32 {
    let x = x.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    let mut p = ALPHA[6];
    for &a in ALPHA[..6].iter().rev() {
        p = p * x2 + a;
    }
    let mut q = BETA[3];
    for &b in BETA[..3].iter().rev() {
        q = q * x2 + b;
    }
    (x * p / q).clamp(-1.0, 1.0)
}

/// `tanh(x)`, differentiable: [`fast_tanh`] for f32 on the CPU, else candle's own.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    if matches!(x.device(), Device::Cpu) && x.dtype() == DType::F32 {
        // The op reads its input's data in order: a strided view is copied first (a no-op
        // for the contiguous outputs of the layers).
        x.contiguous()?.apply_op1(FastTanh)
    } else {
        x.tanh()
    }
}

/// [`tanh`] as a layer (`tensor.apply(&Tanh)`).
#[derive(Clone, Copy, Debug)]
pub struct Tanh;

impl candle_core::Module for Tanh {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        tanh(xs)
    }
}

/// The contiguous f32 data of `storage` under `layout`.
pub(crate) fn f32_slice<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    op: &str,
) -> Result<&'a [f32]> {
    let CpuStorage::F32(v) = storage else {
        candle_core::bail!("{op}: f32 only")
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&v[start..end]),
        None => candle_core::bail!("{op}: contiguous input only"),
    }
}

struct FastTanh;

impl CustomOp1 for FastTanh {
    fn name(&self) -> &'static str {
        "fast-tanh"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, self.name())?;
        let y: Vec<f32> = x.iter().map(|&v| fast_tanh(v)).collect();
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }

    fn bwd(&self, _arg: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let (g, y) = (grad_res.contiguous()?, res.contiguous()?);
        Ok(Some(g.apply_op2_no_bwd(&y, &TanhGrad)?))
    }
}

/// `g · (1 − y²)` in one pass: the gradient through `y = tanh(x)`.
struct TanhGrad;

impl CustomOp2 for TanhGrad {
    fn name(&self) -> &'static str {
        "fast-tanh-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = f32_slice(s1, l1, self.name())?;
        let y = f32_slice(s2, l2, self.name())?;
        if g.len() != y.len() {
            candle_core::bail!(
                "{}: {} gradients for {} outputs",
                self.name(),
                g.len(),
                y.len()
            )
        }
        let out: Vec<f32> = g.iter().zip(y).map(|(g, y)| g * (1.0 - y * y)).collect();
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_tanh_is_within_5e7_of_tanh() {
        let mut worst = 0.0f64;
        // Every 2^-12 from −20 to 20, and a dense sweep near 0.
        let wide = (-(20 << 12)..=(20 << 12)).map(|i| i as f32 / 4096.0);
        let near0 = (-10_000..=10_000).map(|i| i as f32 * 1e-7);
        for x in wide.chain(near0) {
            let e = (f64::from(fast_tanh(x)) - f64::from(x).tanh()).abs();
            worst = worst.max(e);
        }
        assert!(worst <= 5e-7, "largest error {worst:e}");
        assert!((fast_tanh(f32::MAX) - 1.0).abs() <= 5e-7);
        assert!((fast_tanh(f32::MIN) + 1.0).abs() <= 5e-7);
        assert_eq!(fast_tanh(0.0), 0.0);
    }

    #[test]
    fn forward_and_gradient_match_candles_tanh() {
        let dev = Device::Cpu;
        let data: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) / 25.0).collect();
        let grad = |fast: bool| -> (Vec<f32>, Vec<f32>) {
            let x = candle_core::Var::from_vec(data.clone(), (3, 100), &dev).unwrap();
            let w = Tensor::from_vec(
                (0..300).map(|i| (i % 7) as f32 - 3.0).collect(),
                (3, 100),
                &dev,
            )
            .unwrap();
            let y = if fast {
                tanh(x.as_tensor())
            } else {
                x.as_tensor().tanh()
            }
            .unwrap();
            let loss = (&y * &w).unwrap().sum_all().unwrap();
            let g = loss.backward().unwrap();
            let gx = g
                .get(x.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            (y.flatten_all().unwrap().to_vec1().unwrap(), gx)
        };
        let (yf, gf) = grad(true);
        let (ye, ge) = grad(false);
        for (a, b) in yf.iter().zip(&ye).chain(gf.iter().zip(&ge)) {
            assert!((a - b).abs() <= 3e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn a_strided_input_is_read_in_its_own_order() {
        let dev = Device::Cpu;
        let x = Tensor::from_vec((0..6).map(|i| i as f32 / 3.0).collect(), (2, 3), &dev).unwrap();
        let t = x.t().unwrap();
        let fast: Vec<Vec<f32>> = tanh(&t).unwrap().to_vec2().unwrap();
        let exact: Vec<Vec<f32>> = t.tanh().unwrap().to_vec2().unwrap();
        for (a, b) in fast.iter().flatten().zip(exact.iter().flatten()) {
            assert!((a - b).abs() < 1e-6, "{fast:?} vs {exact:?}");
        }
    }
}
