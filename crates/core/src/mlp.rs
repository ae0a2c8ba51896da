//! The postcard MLP blob: a policy network small enough for a microcontroller, with a
//! forward pass that needs no allocator.
//!
//! A blob is `postcard(MlpBlob) ‖ crc32_le(postcard(MlpBlob))` (format 2; the CRC is the
//! IEEE CRC-32 of the serial frames, [`crate::frames::crc32`]). The checksum is there for
//! the target, which runs the blob straight from flash with nothing else vouching for it: a
//! bit flipped in flash (or in a copy on its way there) makes the blob refused, and the
//! controller runs its fixed-time program, instead of running slightly wrong weights. Its
//! header says which plan and observation layout the
//! policy was trained for (the firmware refuses a blob for another plan), the observation
//! normalisation, and each layer's shape and weight format. `params` holds, little-endian:
//!
//! 1. `obs_mean[obs_dim]` and `obs_inv_std[obs_dim]` (f32);
//! 2. for each layer, its weights, row-major `[outputs][inputs]` (f32, or i8 with one f32
//!    scale per layer), then its bias (`[outputs]` f32).
//!
//! The forward pass computes `x = clip((obs − mean) · inv_std, ±clip)`, then every hidden
//! layer `act(W x + b)`, then the last layer `W x + b` = the logits, one per phase. The
//! value head is not in the blob: a controller needs only the action.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::observation::ObsLayout;
use crate::sequencer::PhaseMask;

/// First bytes of every blob.
pub const BLOB_MAGIC: [u8; 4] = *b"GWML";
/// Current format version: 2, the blob followed by its CRC-32.
pub const BLOB_VERSION: u16 = 2;
/// The format before the checksum (2026-12-07): the same fields, no CRC-32 after them. Only
/// [`MlpBlob::parse_any_version`] reads it, for blobs something else vouches for.
pub const BLOB_VERSION_UNCHECKED: u16 = 1;
/// Bytes of the CRC-32 after the postcard body.
pub const BLOB_CRC_BYTES: usize = 4;
/// Most layers a blob may hold.
pub const MAX_LAYERS: usize = 8;

/// Hidden-layer activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activation {
    /// Hyperbolic tangent.
    Tanh,
    /// Rectified linear unit.
    Relu,
}

/// How a layer's weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum WeightFormat {
    /// f32, little-endian.
    F32,
    /// i8, symmetric: weight = `q · scale`.
    Int8 {
        /// The layer's scale.
        scale: f32,
    },
}

/// One dense layer's shape and weight format.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerDesc {
    /// Input width.
    pub inputs: u16,
    /// Output width.
    pub outputs: u16,
    /// How its weights are stored.
    pub weights: WeightFormat,
}

impl LayerDesc {
    /// Bytes this layer takes in `params` (saturating: on a 32-bit MCU a crafted header's
    /// 65535 × 65535 layer must not wrap to a small size that a short blob would match).
    pub const fn param_bytes(&self) -> usize {
        let n = (self.inputs as usize).saturating_mul(self.outputs as usize);
        let w = match self.weights {
            WeightFormat::F32 => n.saturating_mul(4),
            WeightFormat::Int8 { .. } => n,
        };
        w.saturating_add(4 * self.outputs as usize)
    }
}

/// A parsed blob, borrowing its parameters from the bytes it was read from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MlpBlob<'a> {
    /// [`BLOB_MAGIC`].
    pub magic: [u8; 4],
    /// [`BLOB_VERSION`].
    pub version: u16,
    /// [`PhasePlan::hash`](crate::plan::PhasePlan::hash) of the plan it was trained for.
    pub plan_hash: u64,
    /// The observation layout it expects.
    pub obs_layout: ObsLayout,
    /// Version of the policy (bumped by every fine-tune).
    pub policy_version: u32,
    /// Hidden-layer activation.
    pub activation: Activation,
    /// Normalised observations are clipped to ±this.
    pub obs_clip: f32,
    /// The layers, input to output.
    pub layers: Vec<LayerDesc, MAX_LAYERS>,
    /// Parameters (see the module docs).
    #[serde(borrow)]
    pub params: &'a [u8],
}

/// Why a blob was refused or a forward pass could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// postcard could not decode the bytes (truncated or not a blob).
    #[error("blob is not valid postcard (truncated or corrupt)")]
    Decode,
    /// Wrong magic.
    #[error("blob magic is not GWML")]
    Magic,
    /// A version this build cannot read (format 1 carries no checksum: export it again).
    #[error("blob format version {0} is not supported (expected {BLOB_VERSION}): export it again")]
    Version(u16),
    /// Bytes between the blob's fields and its CRC-32 (or after a format-1 blob's fields).
    #[error("blob has {0} bytes after its fields that are not its CRC-32")]
    Trailer(usize),
    /// The CRC-32 does not match the bytes (a flipped bit, a damaged copy).
    #[error("blob CRC-32 is {stored:#010x}, its bytes give {computed:#010x} (damaged)")]
    Checksum {
        /// The CRC-32 stored after the fields.
        stored: u32,
        /// The CRC-32 of the fields as read.
        computed: u32,
    },
    /// No layers.
    #[error("blob has no layers")]
    NoLayers,
    /// Layer widths do not chain.
    #[error("layer {layer}: takes {inputs} inputs but receives {expected}")]
    LayerChain {
        /// The layer.
        layer: usize,
        /// Its input width.
        inputs: usize,
        /// What the previous layer (or the observation) provides.
        expected: usize,
    },
    /// The last layer's outputs are not one per phase.
    #[error("last layer has {outputs} outputs, the layout has {n_phases} phases")]
    OutputWidth {
        /// Outputs of the last layer.
        outputs: usize,
        /// Phases in the layout.
        n_phases: usize,
    },
    /// `params` has the wrong length for the layers.
    #[error("parameter block is {got} bytes, layers need {expected}")]
    ParamsLength {
        /// Bytes the header implies.
        expected: usize,
        /// Bytes present.
        got: usize,
    },
    /// A parameter or scale is NaN or infinite.
    #[error("parameter at byte {offset} is not finite")]
    NonFinite {
        /// Byte offset in `params`.
        offset: usize,
    },
    /// Input, scratch or output buffer of the wrong size.
    #[error("{buffer} buffer holds {got} floats, needs {expected}")]
    Buffer {
        /// Which buffer.
        buffer: &'static str,
        /// Needed.
        expected: usize,
        /// Given.
        got: usize,
    },
    /// The encode buffer is too small.
    #[error("encode buffer too small")]
    EncodeBuffer,
    /// A network the blob format cannot hold (encoding only).
    #[error(
        "a network of {layers} layers, the widest {widest} wide: a blob holds at most \
         {MAX_LAYERS} layers of at most 65535 inputs or outputs"
    )]
    TooLarge {
        /// Its layers.
        layers: usize,
        /// Its widest layer's inputs or outputs.
        widest: usize,
    },
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// A format-2 blob's body and the CRC-32 stored after it.
fn split_checksum(bytes: &[u8]) -> Result<(&[u8], u32), BlobError> {
    let n = bytes
        .len()
        .checked_sub(BLOB_CRC_BYTES)
        .ok_or(BlobError::Decode)?;
    let (body, crc) = bytes.split_at(n);
    Ok((body, u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]])))
}

/// Checks a blob's CRC-32 again while it is in use, a piece at a time: a target runs its
/// blob straight from flash, where a bit can flip after [`MlpBlob::parse`] checked it.
/// Each [`step`](Self::step) reads at most a given number of bytes (a bounded cost per
/// control-loop pass); the step that reads the last byte of the body compares the CRC-32
/// with the stored one and starts the next pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlobScrub {
    /// Bytes of the body read in this pass.
    read: usize,
    /// Their CRC-32 so far.
    crc: crate::frames::Crc32,
}

impl BlobScrub {
    /// Reads up to `max_bytes` (at least one) more of `bytes`, the blob as it is now.
    /// `Ok(false)`: the pass goes on; `Ok(true)`: a pass ended and the blob is as
    /// checksummed; [`BlobError::Checksum`] (or [`BlobError::Decode`] for bytes too short to
    /// hold a CRC-32): it is not, and should no longer be run. Either end starts a new pass.
    pub fn step(&mut self, bytes: &[u8], max_bytes: usize) -> Result<bool, BlobError> {
        let (body, stored) = split_checksum(bytes)?;
        if self.read > body.len() {
            // A shorter blob than the last step's (not possible from flash): start over.
            *self = Self::default();
        }
        let end = body.len().min(self.read.saturating_add(max_bytes.max(1)));
        let piece = &body[self.read..end];
        // Opaque to the optimiser: the bytes are read from memory each pass, never
        // assumed unchanged because they are borrowed immutably.
        self.crc.update(core::hint::black_box(piece));
        self.read = end;
        if end < body.len() {
            return Ok(false);
        }
        let computed = self.crc.finish();
        *self = Self::default();
        match computed == stored {
            true => Ok(true),
            false => Err(BlobError::Checksum { stored, computed }),
        }
    }
}

impl<'a> MlpBlob<'a> {
    /// Decodes and validates a blob of the current format, checksum first (so that damage
    /// anywhere, the magic and version included, is reported as damage). All shape and
    /// finiteness checks happen here, once, so the forward pass cannot fail on a blob that
    /// parsed.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, BlobError> {
        let (body, stored) = split_checksum(bytes)?;
        let computed = crate::frames::crc32(body);
        if stored != computed {
            // A format-1 blob has no CRC at all: say so, rather than "damaged" (the magic
            // and the version, a one-byte varint, are its first five bytes).
            if bytes[..4] == BLOB_MAGIC && bytes.get(4) == Some(&(BLOB_VERSION_UNCHECKED as u8)) {
                return Err(BlobError::Version(BLOB_VERSION_UNCHECKED));
            }
            return Err(BlobError::Checksum { stored, computed });
        }
        let (blob, rest) = Self::decode(body)?;
        if blob.version != BLOB_VERSION {
            return Err(BlobError::Version(blob.version));
        }
        if !rest.is_empty() {
            return Err(BlobError::Trailer(rest.len()));
        }
        blob.validate()?;
        Ok(blob)
    }

    /// As [`parse`](Self::parse), and also reads format 1 (no checksum). Only for a blob
    /// whose integrity something else vouches for: a file of a signed bundle, whose SHA-256
    /// digest was checked. A controller that runs a blob from flash uses `parse`.
    pub fn parse_any_version(bytes: &'a [u8]) -> Result<Self, BlobError> {
        match Self::decode(bytes) {
            Ok((blob, [])) if blob.version == BLOB_VERSION_UNCHECKED => {
                blob.validate()?;
                Ok(blob)
            }
            _ => Self::parse(bytes),
        }
    }

    /// The fields, magic and version checked, and the bytes after them.
    fn decode(bytes: &'a [u8]) -> Result<(Self, &'a [u8]), BlobError> {
        let (blob, rest): (MlpBlob<'a>, &[u8]) =
            postcard::take_from_bytes(bytes).map_err(|_| BlobError::Decode)?;
        if blob.magic != BLOB_MAGIC {
            return Err(BlobError::Magic);
        }
        if blob.version != BLOB_VERSION && blob.version != BLOB_VERSION_UNCHECKED {
            return Err(BlobError::Version(blob.version));
        }
        Ok((blob, rest))
    }

    /// Checks magic, version (either format: the checksum is the bytes', checked by
    /// [`parse`](Self::parse)), layer chain, output width, parameter length and finiteness.
    pub fn validate(&self) -> Result<(), BlobError> {
        if self.magic != BLOB_MAGIC {
            return Err(BlobError::Magic);
        }
        if self.version != BLOB_VERSION && self.version != BLOB_VERSION_UNCHECKED {
            return Err(BlobError::Version(self.version));
        }
        if self.layers.is_empty() {
            return Err(BlobError::NoLayers);
        }
        let mut width = self.obs_layout.dim();
        for (i, l) in self.layers.iter().enumerate() {
            if l.inputs as usize != width {
                return Err(BlobError::LayerChain {
                    layer: i,
                    inputs: l.inputs as usize,
                    expected: width,
                });
            }
            width = l.outputs as usize;
        }
        let n_phases = self.obs_layout.n_phases as usize;
        if width != n_phases {
            return Err(BlobError::OutputWidth {
                outputs: width,
                n_phases,
            });
        }
        let expected = self.params_len();
        if self.params.len() != expected {
            return Err(BlobError::ParamsLength {
                expected,
                got: self.params.len(),
            });
        }
        // Every f32 must be finite; i8 weights always are.
        let dim = self.obs_layout.dim();
        let check = |start: usize, count: usize| -> Result<(), BlobError> {
            for k in 0..count {
                if !f32_at(&self.params[start..], k).is_finite() {
                    return Err(BlobError::NonFinite {
                        offset: start + 4 * k,
                    });
                }
            }
            Ok(())
        };
        check(0, 2 * dim)?;
        let mut off = 8 * dim;
        for l in &self.layers {
            let n = l.inputs as usize * l.outputs as usize;
            match l.weights {
                WeightFormat::F32 => {
                    check(off, n)?;
                    off += 4 * n;
                }
                WeightFormat::Int8 { scale } => {
                    if !scale.is_finite() {
                        return Err(BlobError::NonFinite { offset: off });
                    }
                    off += n;
                }
            }
            check(off, l.outputs as usize)?;
            off += 4 * l.outputs as usize;
        }
        if !self.obs_clip.is_finite() || self.obs_clip <= 0.0 {
            return Err(BlobError::NonFinite { offset: 0 });
        }
        Ok(())
    }

    /// Bytes the header's layers imply for `params`.
    pub fn params_len(&self) -> usize {
        self.layers
            .iter()
            .map(LayerDesc::param_bytes)
            .fold(8 * self.obs_layout.dim(), usize::saturating_add)
    }

    /// Widest layer output: each of the two scratch halves must hold this many floats.
    pub fn max_width(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.outputs as usize)
            .chain(core::iter::once(self.obs_layout.dim()))
            .max()
            .unwrap_or(0)
    }

    /// Encodes into `buf` with its CRC-32 after the fields, returning the used prefix. Only
    /// the current format is written (a format-1 blob read back is refused).
    pub fn encode_into<'b>(&self, buf: &'b mut [u8]) -> Result<&'b mut [u8], BlobError> {
        if self.version != BLOB_VERSION {
            return Err(BlobError::Version(self.version));
        }
        let used = postcard::to_slice(self, buf)
            .map_err(|_| BlobError::EncodeBuffer)?
            .len();
        let end = used + BLOB_CRC_BYTES;
        if buf.len() < end {
            return Err(BlobError::EncodeBuffer);
        }
        let crc = crate::frames::crc32(&buf[..used]);
        buf[used..end].copy_from_slice(&crc.to_le_bytes());
        Ok(&mut buf[..end])
    }

    /// Runs the network: `obs` (`obs_dim`) → `logits` (`n_phases`). `scratch` must hold
    /// `2 · max_width()` floats.
    pub fn forward(
        &self,
        obs: &[f32],
        scratch: &mut [f32],
        logits: &mut [f32],
    ) -> Result<(), BlobError> {
        let dim = self.obs_layout.dim();
        let width = self.max_width();
        let n_out = self.obs_layout.n_phases as usize;
        if obs.len() != dim {
            return Err(BlobError::Buffer {
                buffer: "observation",
                expected: dim,
                got: obs.len(),
            });
        }
        if scratch.len() < 2 * width {
            return Err(BlobError::Buffer {
                buffer: "scratch",
                expected: 2 * width,
                got: scratch.len(),
            });
        }
        if logits.len() != n_out {
            return Err(BlobError::Buffer {
                buffer: "logits",
                expected: n_out,
                got: logits.len(),
            });
        }
        let (a, b) = scratch.split_at_mut(width);
        let p = self.params;
        for (i, &o) in obs.iter().enumerate() {
            let x = (o - f32_at(p, i)) * f32_at(p, dim + i);
            // `f32::clamp` without its panic path (it panics when min > max, formatting both
            // floats: that pulled `core::fmt`'s float printing, ~10 kB, into MCU flash). Same
            // result for every clip `validate` accepts; NaN passes through as with `clamp`.
            let clip = self.obs_clip;
            a[i] = if x < -clip {
                -clip
            } else if x > clip {
                clip
            } else {
                x
            };
        }
        let mut off = 8 * dim;
        let (mut cur, mut next) = (a, b);
        let last = self.layers.len() - 1;
        for (li, l) in self.layers.iter().enumerate() {
            let (n_in, n_o) = (l.inputs as usize, l.outputs as usize);
            let wbytes = match l.weights {
                WeightFormat::F32 => 4 * n_in * n_o,
                WeightFormat::Int8 { .. } => n_in * n_o,
            };
            let (w, rest) = p[off..].split_at(wbytes);
            let bias = &rest[..4 * n_o];
            let x = &cur[..n_in];
            for (j, y) in next[..n_o].iter_mut().enumerate() {
                let acc = match l.weights {
                    WeightFormat::F32 => dot_f32(&w[4 * j * n_in..4 * (j + 1) * n_in], x),
                    WeightFormat::Int8 { scale } => dot_i8(&w[j * n_in..(j + 1) * n_in], x) * scale,
                };
                let z = acc + f32_at(bias, j);
                *y = if li == last {
                    z
                } else {
                    match self.activation {
                        Activation::Tanh => libm::tanhf(z),
                        Activation::Relu => z.max(0.0),
                    }
                };
            }
            off += wbytes + 4 * n_o;
            core::mem::swap(&mut cur, &mut next);
        }
        logits.copy_from_slice(&cur[..n_out]);
        Ok(())
    }
}

/// Dot product of little-endian f32 weights with `x`. Weights are decoded four bytes at a
/// time from exact chunks (no per-byte bounds checks; unaligned loads are fine on the
/// Cortex-M4 and on hosts), with four accumulators so the add chains overlap and a fixed
/// summation order so results are reproducible.
fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let mut wc = w.chunks_exact(16);
    let mut xc = x.chunks_exact(4);
    for (wq, xq) in (&mut wc).zip(&mut xc) {
        for k in 0..4 {
            let b = &wq[4 * k..4 * k + 4];
            acc[k] += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * xq[k];
        }
    }
    for (b, &xv) in wc.remainder().chunks_exact(4).zip(xc.remainder()) {
        acc[0] += f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * xv;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Dot product of i8 weights with `x` (the caller applies the layer's scale).
fn dot_i8(w: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let mut wc = w.chunks_exact(4);
    let mut xc = x.chunks_exact(4);
    for (wq, xq) in (&mut wc).zip(&mut xc) {
        for k in 0..4 {
            acc[k] += (wq[k] as i8) as f32 * xq[k];
        }
    }
    for (&q, &xv) in wc.remainder().iter().zip(xc.remainder()) {
        acc[0] += (q as i8) as f32 * xv;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// The allowed phase with the largest logit (lowest index on ties); `None` if the mask
/// allows no phase among the logits.
pub fn masked_argmax(logits: &[f32], mask: PhaseMask) -> Option<u8> {
    let mut best: Option<(u8, f32)> = None;
    for (i, &z) in logits.iter().enumerate().take(crate::plan::MAX_PHASES) {
        if !mask.allows(crate::plan::PhaseId(i as u8)) {
            continue;
        }
        // A NaN logit never wins; the runtime's watchdog treats NaN outputs as a fault anyway.
        match best {
            _ if z.is_nan() => {}
            Some((_, b)) if z <= b => {}
            _ => best = Some((i as u8, z)),
        }
    }
    best.map(|(i, _)| i)
}

/// `log softmax(logits)[action]` over the allowed phases only (masked logits count as
/// −∞); `None` if the action is not allowed.
pub fn masked_log_prob(logits: &[f32], mask: PhaseMask, action: u8) -> Option<f32> {
    let allowed = |i: usize| mask.allows(crate::plan::PhaseId(i as u8));
    if !allowed(action as usize) || action as usize >= logits.len() {
        return None;
    }
    let max = logits
        .iter()
        .enumerate()
        .filter(|(i, _)| allowed(*i))
        .map(|(_, &z)| z)
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits
        .iter()
        .enumerate()
        .filter(|(i, _)| allowed(*i))
        .map(|(_, &z)| libm::expf(z - max))
        .sum();
    Some(logits[action as usize] - max - libm::logf(sum))
}

/// Draws an allowed phase from `softmax(logits / temperature)` over the allowed phases
/// (masked logits count as −∞), by inverting its cumulative distribution at `u`, uniform
/// in [0, 1). `None` if the mask allows no phase among the logits. `temperature` must be
/// positive and finite (the caller checks it); at 1 this is the policy's own distribution
/// (training's rollouts act by it), towards 0 its argmax. NaN logits make every weight NaN
/// and draw the last allowed phase (callers that can meet them check first).
///
/// `exp` is the platform's exponential: `f32::exp` on a host, whose draws training's
/// rollouts and `greenwave eval` have made since the rule was written; `libm::expf`
/// without std (the two differ in the last bit for about 1 % of inputs, which moves a
/// draw only where `u` falls within a rounding error of a boundary).
pub fn masked_sample(
    logits: &[f32],
    mask: PhaseMask,
    temperature: f32,
    u: f32,
    exp: fn(f32) -> f32,
) -> Option<u8> {
    let n = logits.len().min(crate::plan::MAX_PHASES);
    let allowed = |i: &usize| mask.allows(crate::plan::PhaseId(*i as u8));
    let last = (0..n).rfind(allowed)?;
    let max = (0..n)
        .filter(allowed)
        .map(|i| logits[i])
        .fold(f32::NEG_INFINITY, f32::max);
    let mut weights = [0.0f32; crate::plan::MAX_PHASES];
    let mut total = 0.0f32;
    for i in (0..n).filter(allowed) {
        weights[i] = exp((logits[i] - max) / temperature);
        total += weights[i];
    }
    let mut u = u * total;
    for i in (0..n).filter(allowed) {
        if u < weights[i] {
            return Some(i as u8);
        }
        u -= weights[i];
    }
    Some(last as u8)
}

/// `log softmax(logits / temperature)[action]` over the allowed phases only: the
/// probability [`masked_sample`] draws `action` with, as a logarithm (at temperature 1,
/// [`masked_log_prob`]); `None` if the action is not allowed.
pub fn masked_log_prob_at(
    logits: &[f32],
    mask: PhaseMask,
    action: u8,
    temperature: f32,
) -> Option<f32> {
    let n = logits.len().min(crate::plan::MAX_PHASES);
    let max = (0..n)
        .filter(|&i| mask.allows(crate::plan::PhaseId(i as u8)))
        .map(|i| logits[i])
        .fold(f32::NEG_INFINITY, f32::max);
    // Shifted by the largest allowed logit before dividing, as `masked_sample` does: a
    // cold temperature then sends the others towards −∞, never the largest to +∞.
    let mut scaled = [0.0f32; crate::plan::MAX_PHASES];
    for (s, z) in scaled.iter_mut().zip(&logits[..n]) {
        *s = (z - max) / temperature;
    }
    masked_log_prob(&scaled[..n], mask, action)
}

#[cfg(feature = "alloc")]
pub use owned::{DenseLayer, OwnedMlp};

#[cfg(feature = "alloc")]
mod owned {
    //! Host-side construction of blobs (training and export), behind the `alloc` feature.
    extern crate alloc;
    use alloc::vec::Vec as AVec;

    use super::*;

    /// One dense layer with f32 weights, row-major `[outputs][inputs]`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct DenseLayer {
        /// Input width.
        pub inputs: usize,
        /// Output width.
        pub outputs: usize,
        /// `outputs · inputs` weights, row-major.
        pub weights: AVec<f32>,
        /// `outputs` biases.
        pub bias: AVec<f32>,
    }

    /// A policy network held in f32, from which blobs are written.
    #[derive(Clone, Debug, PartialEq)]
    pub struct OwnedMlp {
        /// Plan fingerprint.
        pub plan_hash: u64,
        /// Observation layout.
        pub obs_layout: ObsLayout,
        /// Policy version.
        pub policy_version: u32,
        /// Hidden activation.
        pub activation: Activation,
        /// Clip of normalised observations.
        pub obs_clip: f32,
        /// Per-feature mean.
        pub obs_mean: AVec<f32>,
        /// Per-feature 1/std.
        pub obs_inv_std: AVec<f32>,
        /// Layers, input to output.
        pub layers: AVec<DenseLayer>,
    }

    impl OwnedMlp {
        /// Encodes as a blob; `int8` quantises every layer's weights symmetrically with one
        /// scale per layer (`max |w| / 127`), biases stay f32.
        pub fn to_blob(&self, int8: bool) -> Result<AVec<u8>, BlobError> {
            let widest = self
                .layers
                .iter()
                .map(|l| l.inputs.max(l.outputs))
                .max()
                .unwrap_or(0);
            if self.layers.len() > MAX_LAYERS || widest > usize::from(u16::MAX) {
                return Err(BlobError::TooLarge {
                    layers: self.layers.len(),
                    widest,
                });
            }
            let mut params = AVec::new();
            for v in self.obs_mean.iter().chain(&self.obs_inv_std) {
                params.extend_from_slice(&v.to_le_bytes());
            }
            let mut descs: Vec<LayerDesc, MAX_LAYERS> = Vec::new();
            for l in &self.layers {
                let weights = if int8 {
                    let max = l.weights.iter().fold(0.0f32, |m, w| m.max(w.abs()));
                    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
                    for w in &l.weights {
                        let q = libm::roundf(w / scale).clamp(-127.0, 127.0) as i8;
                        params.push(q as u8);
                    }
                    WeightFormat::Int8 { scale }
                } else {
                    for w in &l.weights {
                        params.extend_from_slice(&w.to_le_bytes());
                    }
                    WeightFormat::F32
                };
                for b in &l.bias {
                    params.extend_from_slice(&b.to_le_bytes());
                }
                descs
                    .push(LayerDesc {
                        inputs: l.inputs as u16,
                        outputs: l.outputs as u16,
                        weights,
                    })
                    .map_err(|_| BlobError::EncodeBuffer)?;
            }
            let blob = MlpBlob {
                magic: BLOB_MAGIC,
                version: BLOB_VERSION,
                plan_hash: self.plan_hash,
                obs_layout: self.obs_layout,
                policy_version: self.policy_version,
                activation: self.activation,
                obs_clip: self.obs_clip,
                layers: descs,
                params: &params,
            };
            blob.validate()?;
            let mut out = alloc::vec![0u8; params.len() + 256];
            let used = blob.encode_into(&mut out)?.len();
            out.truncate(used);
            Ok(out)
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    extern crate alloc;
    use alloc::vec;
    use alloc::vec::Vec as AVec;

    use super::*;

    fn toy() -> OwnedMlp {
        let layout = ObsLayout {
            n_lanes: 1,
            n_phases: 2,
        }; // dim 7
        let dim = layout.dim();
        let hidden = 3;
        let w1: AVec<f32> = (0..hidden * dim)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 10.0)
            .collect();
        let w2: AVec<f32> = (0..2 * hidden).map(|i| (i as f32 - 2.5) / 4.0).collect();
        OwnedMlp {
            plan_hash: 42,
            obs_layout: layout,
            policy_version: 1,
            activation: Activation::Tanh,
            obs_clip: 5.0,
            obs_mean: vec![0.1; dim],
            obs_inv_std: vec![2.0; dim],
            layers: vec![
                DenseLayer {
                    inputs: dim,
                    outputs: hidden,
                    weights: w1,
                    bias: vec![0.1, -0.2, 0.0],
                },
                DenseLayer {
                    inputs: hidden,
                    outputs: 2,
                    weights: w2,
                    bias: vec![0.05, -0.05],
                },
            ],
        }
    }

    /// Straightforward reference forward pass in f64.
    fn reference(m: &OwnedMlp, obs: &[f32]) -> AVec<f64> {
        let mut x: AVec<f64> = obs
            .iter()
            .zip(&m.obs_mean)
            .zip(&m.obs_inv_std)
            .map(|((&o, &mu), &s)| (((o - mu) * s) as f64).clamp(-5.0, 5.0))
            .collect();
        for (i, l) in m.layers.iter().enumerate() {
            let hidden = i + 1 < m.layers.len();
            let y: AVec<f64> = (0..l.outputs)
                .map(|j| {
                    let row = &l.weights[j * l.inputs..(j + 1) * l.inputs];
                    let acc = l.bias[j] as f64
                        + row
                            .iter()
                            .zip(&x)
                            .map(|(&w, &xv)| w as f64 * xv)
                            .sum::<f64>();
                    if hidden {
                        acc.tanh()
                    } else {
                        acc
                    }
                })
                .collect();
            x = y;
        }
        x
    }

    #[test]
    fn forward_matches_reference_and_round_trips() {
        let m = toy();
        let bytes = m.to_blob(false).unwrap();
        let blob = MlpBlob::parse(&bytes).unwrap();
        assert_eq!(blob.plan_hash, 42);
        let obs = [0.3, 0.9, 1.0, 0.0, 0.0, 1.0, 0.25];
        let mut scratch = [0.0; 14];
        let mut logits = [0.0; 2];
        blob.forward(&obs, &mut scratch, &mut logits).unwrap();
        let r = reference(&m, &obs);
        for (a, b) in logits.iter().zip(&r) {
            assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
        }
        let q = m.to_blob(true).unwrap();
        assert!(q.len() < bytes.len());
        let qb = MlpBlob::parse(&q).unwrap();
        let mut ql = [0.0; 2];
        qb.forward(&obs, &mut scratch, &mut ql).unwrap();
        for (a, b) in ql.iter().zip(&logits) {
            assert!((a - b).abs() < 0.05, "int8 {a} vs f32 {b}");
        }
    }

    /// `bytes` with its CRC-32 recomputed over the fields.
    fn reseal(bytes: &[u8]) -> AVec<u8> {
        let body = &bytes[..bytes.len() - BLOB_CRC_BYTES];
        let mut out = body.to_vec();
        out.extend_from_slice(&crate::frames::crc32(body).to_le_bytes());
        out
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        for int8 in [false, true] {
            let bytes = toy().to_blob(int8).unwrap();
            for bit in 0..8 * bytes.len() {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    matches!(MlpBlob::parse(&b), Err(BlobError::Checksum { .. })),
                    "bit {bit} (int8 {int8}): not reported as damage"
                );
            }
        }
    }

    /// A sound blob scrubs clean pass after pass, a pass every ⌈body / piece⌉ steps.
    #[test]
    fn a_sound_blob_scrubs_clean() {
        for int8 in [false, true] {
            let bytes = toy().to_blob(int8).unwrap();
            let body = bytes.len() - BLOB_CRC_BYTES;
            for piece in [1, 7, 64, body - 1, body, body + 1, usize::MAX] {
                let mut scrub = BlobScrub::default();
                let per_pass = body.div_ceil(piece);
                for step in 1..=3 * per_pass {
                    let done = scrub.step(&bytes, piece).unwrap();
                    assert_eq!(done, step % per_pass == 0, "piece {piece}, step {step}");
                }
            }
        }
        assert_eq!(
            BlobScrub::default().step(&[1, 2, 3], 8),
            Err(BlobError::Decode)
        );
    }

    proptest::proptest! {
        /// A bit that flips while the blob runs is found by the end of the pass after the
        /// one it flipped in, and nothing is reported before it flips.
        #[test]
        fn a_bit_flipped_while_running_is_found_within_two_passes(
            int8 in proptest::bool::ANY,
            bit_seed in 0usize..100_000,
            piece in 1usize..200,
            flip_at in 0usize..200,
        ) {
            let bytes = toy().to_blob(int8).unwrap();
            let bit = bit_seed % (8 * bytes.len());
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let per_pass = (bytes.len() - BLOB_CRC_BYTES).div_ceil(piece);
            let mut scrub = BlobScrub::default();
            for step in 0..flip_at {
                proptest::prop_assert!(scrub.step(&bytes, piece).is_ok(), "step {}", step);
            }
            let mut found = false;
            for _ in 0..2 * per_pass {
                match scrub.step(&flipped, piece) {
                    Ok(_) => {}
                    Err(e) => {
                        proptest::prop_assert!(matches!(e, BlobError::Checksum { .. }), "{:?}", e);
                        found = true;
                        break;
                    }
                }
            }
            proptest::prop_assert!(found, "bit {} not found in two passes", bit);
        }
    }

    #[test]
    fn format_1_is_read_only_where_something_else_vouches_for_it() {
        let v2 = toy().to_blob(false).unwrap();
        // Format 1: the same fields, version 1 (postcard's varint, byte 4), no CRC-32.
        let mut v1 = v2[..v2.len() - BLOB_CRC_BYTES].to_vec();
        assert_eq!(v1[4], BLOB_VERSION as u8);
        v1[4] = BLOB_VERSION_UNCHECKED as u8;
        assert_eq!(
            MlpBlob::parse(&v1),
            Err(BlobError::Version(BLOB_VERSION_UNCHECKED))
        );
        let old = MlpBlob::parse_any_version(&v1).unwrap();
        let new = MlpBlob::parse(&v2).unwrap();
        assert_eq!(old.params, new.params);
        assert_eq!(old.version, BLOB_VERSION_UNCHECKED);
        assert_eq!(MlpBlob::parse_any_version(&v2), Ok(new));
        // A format-1 blob with bytes after it, and a damaged format-2 one, are refused.
        let mut v1_tail = v1.clone();
        v1_tail.push(0);
        assert_eq!(
            MlpBlob::parse_any_version(&v1_tail),
            Err(BlobError::Version(BLOB_VERSION_UNCHECKED))
        );
        let mut flipped = v2.clone();
        flipped[10] ^= 1;
        assert!(matches!(
            MlpBlob::parse_any_version(&flipped),
            Err(BlobError::Checksum { .. })
        ));
        // A format-1 blob is never written again.
        let mut buf = vec![0u8; v2.len() + 16];
        assert_eq!(
            old.encode_into(&mut buf).map(|b| b.len()),
            Err(BlobError::Version(BLOB_VERSION_UNCHECKED))
        );
    }

    #[test]
    fn corrupt_blobs_are_refused() {
        let bytes = toy().to_blob(false).unwrap();
        for cut in [1, 5] {
            assert!(matches!(
                MlpBlob::parse(&bytes[..bytes.len() - cut]),
                Err(BlobError::Checksum { .. })
            ));
        }
        assert_eq!(MlpBlob::parse(&bytes[..3]), Err(BlobError::Decode));
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            MlpBlob::parse(&bad),
            Err(BlobError::Checksum { .. })
        ));
        assert_eq!(MlpBlob::parse(&reseal(&bad)), Err(BlobError::Magic));
        // Bytes between the fields and the CRC-32.
        let mut long = bytes[..bytes.len() - BLOB_CRC_BYTES].to_vec();
        long.extend_from_slice(&[0, 0, 0, 0, 0]);
        assert_eq!(MlpBlob::parse(&reseal(&long)), Err(BlobError::Trailer(1)));
        // A NaN weight, the CRC made to match: overwrite the last bias with NaN.
        let mut nan = bytes.clone();
        let n = nan.len();
        nan[n - 8..n - 4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(matches!(
            MlpBlob::parse(&reseal(&nan)),
            Err(BlobError::NonFinite { .. })
        ));
        // Header sizes whose product overflows never wrap to a size a short blob matches.
        let huge = LayerDesc {
            inputs: u16::MAX,
            outputs: u16::MAX,
            weights: WeightFormat::F32,
        };
        let want = 4 * (u16::MAX as usize).pow(2) + 4 * u16::MAX as usize;
        assert_eq!(huge.param_bytes(), want);
        let max = LayerDesc {
            inputs: u16::MAX,
            outputs: u16::MAX,
            weights: WeightFormat::Int8 { scale: 1.0 },
        };
        assert!(max.param_bytes() < want);
        let mut m = toy();
        m.layers[1].outputs = 3;
        m.layers[1].weights.extend([0.0; 3]);
        m.layers[1].bias.push(0.0);
        assert_eq!(
            m.to_blob(false),
            Err(BlobError::OutputWidth {
                outputs: 3,
                n_phases: 2
            })
        );
        // Nine layers, or a layer wider than a u16: refused by name, not truncated.
        let mut deep = toy();
        let square = deep.layers[0].clone();
        let (hidden, mut last) = (square.outputs, deep.layers.pop().unwrap());
        let mut id = square.clone();
        id.inputs = hidden;
        id.weights = alloc::vec![0.0; hidden * hidden];
        deep.layers.extend(core::iter::repeat_n(id, 7));
        last.inputs = hidden;
        deep.layers.push(last);
        assert_eq!(
            deep.to_blob(false),
            Err(BlobError::TooLarge {
                layers: 9,
                widest: 7
            })
        );
        let mut wide = toy();
        wide.layers[0].outputs = 70_000;
        assert!(matches!(
            wide.to_blob(true),
            Err(BlobError::TooLarge { widest: 70_000, .. })
        ));
        let blob_bytes = toy().to_blob(false).unwrap();
        let blob = MlpBlob::parse(&blob_bytes).unwrap();
        let mut scratch = [0.0; 14];
        let mut logits = [0.0; 2];
        assert!(matches!(
            blob.forward(&[0.0; 3], &mut scratch, &mut logits),
            Err(BlobError::Buffer {
                buffer: "observation",
                expected: 7,
                got: 3
            })
        ));
    }

    #[test]
    fn masked_helpers() {
        let z = [1.0, 3.0, 2.0, f32::NAN];
        assert_eq!(masked_argmax(&z, PhaseMask(0b1111)), Some(1));
        assert_eq!(masked_argmax(&z, PhaseMask(0b0101)), Some(2));
        assert_eq!(masked_argmax(&z, PhaseMask(0b1000)), None);
        assert_eq!(masked_argmax(&z, PhaseMask(0)), None);
        let lp = masked_log_prob(&z[..3], PhaseMask(0b011), 1).unwrap();
        let expect = 3.0 - (1.0f32.exp() + 3.0f32.exp()).ln();
        assert!((lp - expect).abs() < 1e-6);
        assert_eq!(masked_log_prob(&z[..3], PhaseMask(0b011), 2), None);
    }

    /// How often `masked_sample` draws each phase over `n` evenly spaced `u`.
    fn draw_shares(z: &[f32], mask: PhaseMask, t: f32, exp: fn(f32) -> f32) -> [f32; 4] {
        let n = 20_000;
        let mut count = [0.0f32; 4];
        for k in 0..n {
            let u = (k as f32 + 0.5) / n as f32;
            count[masked_sample(z, mask, t, u, exp).unwrap() as usize] += 1.0 / n as f32;
        }
        count
    }

    #[test]
    fn a_tempered_draw_follows_its_logged_probability_with_either_exp() {
        let z = [0.3f32, -1.0, 1.2, 0.0];
        let mask = PhaseMask(0b1101);
        for t in [1.0f32, 0.5, 0.25] {
            let host = draw_shares(&z, mask, t, f32::exp);
            let bare = draw_shares(&z, mask, t, libm::expf);
            for a in 0..4u8 {
                let p = masked_log_prob_at(&z, mask, a, t).map_or(0.0, f32::exp);
                let (h, b) = (host[a as usize], bare[a as usize]);
                assert!(
                    (h - p).abs() < 1e-3,
                    "T {t} phase {a}: drawn {h}, logged {p}"
                );
                assert!((h - b).abs() < 1e-3, "T {t} phase {a}: std {h}, libm {b}");
            }
            assert_eq!(host[1], 0.0, "a masked phase is never drawn");
        }
        assert_eq!(masked_log_prob_at(&z, mask, 1, 0.5), None);
        // Cold: the largest logit keeps probability 1, the others 0, never NaN.
        let big = [40.0f32, 3.5, 39.0];
        assert_eq!(
            masked_log_prob_at(&big, PhaseMask(0b111), 0, 1e-38),
            Some(0.0)
        );
        let other = masked_log_prob_at(&big, PhaseMask(0b111), 2, 1e-38).unwrap();
        assert!(other < -1e30, "{other}");
        assert_eq!(masked_sample(&z, PhaseMask(0), 0.5, 0.3, libm::expf), None);
    }
}
