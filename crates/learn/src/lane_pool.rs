//! The shared network's lane encoder and pooling fused into one differentiable CPU op:
//! `out[to_j] += weight_j · tanh(W x[from_j] + b)` over a list of entries `j`.
//!
//! Written as candle ops (matmul, bias, tanh, gather, scale, scatter-add) every lane's
//! `[L, H]` activations are materialised five times forward and again backward, and
//! candle's backward allocates and zero-fills a gradient buffer for each before adding
//! into it; on a 15-signal net that was most of a PPO update (BENCHMARKS.md, "The fused
//! lane encoder"). Fused, the lane activations live in one scratch buffer per call and the
//! backward writes only the weight and bias gradients (the lane features are data, not
//! parameters: no gradient flows to them). The same function as the unfused path up to
//! float rounding: property test
//! `fused_lane_pooling_equals_the_candle_ops` (crates/learn/src/shared/tests.rs).

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, DType, Device, Layout, Result, Shape, Tensor};

use crate::activation::{f32_slice, fast_tanh};

/// A weighted sum of encoded lane rows into output rows: output row `to[j]` gains
/// `weight[j] · tanh(W · lane[from[j]] + b)`.
#[derive(Debug, Default)]
pub(crate) struct LanePool {
    pub from: Vec<u32>,
    pub to: Vec<u32>,
    pub weight: Vec<f32>,
    /// Output rows.
    pub rows: usize,
    /// The lane activations of the forward pass, kept for the backward one (which
    /// recomputes them if they are gone, as after a second backward through one graph).
    pub enc: Mutex<Vec<f32>>,
}

/// Whether [`LanePool::encode`] runs fused on `x` (f32 on the CPU); elsewhere the caller
/// composes candle's ops.
pub(crate) fn fusable(x: &Tensor) -> bool {
    matches!(x.device(), Device::Cpu) && x.dtype() == DType::F32
}

/// `tanh(W x_l + b)` of every lane row of `x [n, d]`, with `w [h, d]`: `[n, h]`. The
/// loops run along `h` (contiguous) so that they vectorise.
fn encode_rows(x: &[f32], w: &[f32], b: &[f32], d: usize) -> Vec<f32> {
    let h = b.len();
    let wt = transpose(w, h, d);
    let mut enc = Vec::with_capacity(x.len() / d * h);
    for lane in x.chunks_exact(d) {
        let start = enc.len();
        enc.extend_from_slice(b);
        let row = &mut enc[start..];
        for (&v, wk) in lane.iter().zip(wt.chunks_exact(h)) {
            row.iter_mut().zip(wk).for_each(|(r, a)| *r += v * a);
        }
    }
    enc.iter_mut().for_each(|e| *e = fast_tanh(*e));
    enc
}

/// `[cols, rows]` of a row-major `[rows, cols]`.
fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| m[r * cols + c]))
        .collect()
}

impl LanePool {
    /// Checks the entries against `n` lanes and returns the hidden width of `w [h, d]`
    /// for lanes `x [n, d]` and bias `b [h]`.
    fn shapes(&self, x: &Shape, w: &Shape, b: &Shape) -> Result<(usize, usize, usize)> {
        let (n, d) = x.dims2()?;
        let (h, dw) = w.dims2()?;
        if dw != d || b.dims1()? != h || d == 0 || h == 0 {
            candle_core::bail!("lane-pool: lanes {x:?}, weights {w:?}, bias {b:?}")
        }
        let entries = self.from.len();
        if self.to.len() != entries || self.weight.len() != entries {
            candle_core::bail!(
                "lane-pool: entry lists of different lengths (from {entries}, to {}, weight {})",
                self.to.len(),
                self.weight.len()
            )
        }
        let bad_from = self.from.iter().any(|&f| f as usize >= n);
        let bad_to = self.to.iter().any(|&t| t as usize >= self.rows);
        if bad_from || bad_to {
            candle_core::bail!(
                "lane-pool: an entry outside {n} lanes or {} rows",
                self.rows
            )
        }
        Ok((n, d, h))
    }

    /// `[rows, H]`: the fused encode-and-pool of lanes `x [n, d]` by layer `(w, b)`.
    pub fn encode(self, x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
        x.contiguous()?
            .apply_op3(&w.contiguous()?, &b.contiguous()?, self)
    }
}

impl CustomOp3 for LanePool {
    fn name(&self) -> &'static str {
        "lane-pool"
    }

    fn cpu_fwd(
        &self,
        sx: &CpuStorage,
        lx: &Layout,
        sw: &CpuStorage,
        lw: &Layout,
        sb: &CpuStorage,
        lb: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (_, d, h) = self.shapes(lx.shape(), lw.shape(), lb.shape())?;
        let enc = encode_rows(
            f32_slice(sx, lx, self.name())?,
            f32_slice(sw, lw, self.name())?,
            f32_slice(sb, lb, self.name())?,
            d,
        );
        let mut out = vec![0.0f32; self.rows * h];
        for ((&f, &t), &wt) in self.from.iter().zip(&self.to).zip(&self.weight) {
            let src = &enc[f as usize * h..][..h];
            let dst = &mut out[t as usize * h..][..h];
            dst.iter_mut().zip(src).for_each(|(o, e)| *o += wt * e);
        }
        if let Ok(mut kept) = self.enc.lock() {
            *kept = enc;
        }
        Ok((CpuStorage::F32(out), Shape::from((self.rows, h))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (_, d, h) = self.shapes(x.shape(), w.shape(), b.shape())?;
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        let g: Vec<f32> = grad_res.flatten_all()?.to_vec1()?;
        let kept = self.enc.lock().map(|mut e| std::mem::take(&mut *e));
        let enc = match kept {
            Ok(enc) if enc.len() == xs.len() / d * h => enc,
            _ => encode_rows(&xs, &w.flatten_all()?.to_vec1()?, &b.to_vec1::<f32>()?, d),
        };
        // Gradient at each lane's pre-activation: pooled gradient back through the
        // weights, then through tanh.
        let mut pre = vec![0.0f32; enc.len()];
        for ((&f, &t), &wt) in self.from.iter().zip(&self.to).zip(&self.weight) {
            let src = &g[t as usize * h..][..h];
            let dst = &mut pre[f as usize * h..][..h];
            dst.iter_mut().zip(src).for_each(|(p, gr)| *p += wt * gr);
        }
        pre.iter_mut()
            .zip(&enc)
            .for_each(|(p, y)| *p *= 1.0 - y * y);
        // ∂W accumulated transposed, `[d, h]`, so the inner loops run along `h`.
        let (mut gwt, mut gb) = (vec![0.0f32; d * h], vec![0.0f32; h]);
        for (lane, gl) in xs.chunks_exact(d).zip(pre.chunks_exact(h)) {
            gb.iter_mut().zip(gl).for_each(|(a, g)| *a += g);
            for (&v, row) in lane.iter().zip(gwt.chunks_exact_mut(h)) {
                row.iter_mut().zip(gl).for_each(|(a, g)| *a += v * g);
            }
        }
        let dev = x.device();
        Ok((
            None,
            Some(Tensor::from_vec(transpose(&gwt, d, h), (h, d), dev)?),
            Some(Tensor::from_vec(gb, h, dev)?),
        ))
    }
}
