//! The policy: an MLP from the postcard blob, accepted only for the plan and observation
//! layout this controller runs.

use greenwave_core::mlp::{masked_argmax, BlobError, MlpBlob};
use greenwave_core::plan::MAX_PHASES;
use greenwave_core::{ObsLayout, PhaseMask};

/// Widest layer (and observation) the firmware's scratch buffer holds.
pub const MAX_LAYER_WIDTH: usize = 64;
/// Floats of scratch the forward pass uses (two halves of [`MAX_LAYER_WIDTH`]).
pub const SCRATCH_FLOATS: usize = 2 * MAX_LAYER_WIDTH;

/// Why the controller runs its fixed-time program instead of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FallbackReason {
    /// No blob is flashed.
    #[error("no policy blob")]
    NoBlob,
    /// The blob does not parse or validate.
    #[error("policy blob refused: {0}")]
    Corrupt(BlobError),
    /// The blob was accepted, then found damaged while running (its CRC-32 checked again a
    /// piece at a time: a bit flipped in flash after the load).
    #[error("policy blob damaged since it was loaded: {0}")]
    DamagedWhileRunning(BlobError),
    /// The blob was trained for another phase plan.
    #[error("policy blob is for plan {blob_plan_hash:#018x}, this controller runs plan {plan_hash:#018x}")]
    PlanMismatch {
        /// The blob's plan hash.
        blob_plan_hash: u64,
        /// This controller's plan hash.
        plan_hash: u64,
    },
    /// The blob expects another observation layout.
    #[error("policy blob expects {blob_lanes} lanes and {blob_phases} phases, this controller has {lanes} lanes and {phases} phases")]
    LayoutMismatch {
        /// Lanes in the blob's layout.
        blob_lanes: u16,
        /// Phases in the blob's layout.
        blob_phases: u8,
        /// Lanes here.
        lanes: u16,
        /// Phases here.
        phases: u8,
    },
    /// A layer is wider than the firmware's scratch buffer.
    #[error("policy blob has a layer {width} wide; this firmware holds at most {max}")]
    TooWide {
        /// The blob's widest layer.
        width: usize,
        /// [`MAX_LAYER_WIDTH`].
        max: usize,
    },
}

/// Why one decision could not be taken by the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// The forward pass refused its buffers.
    #[error("forward pass failed: {0}")]
    Forward(BlobError),
    /// The mask allowed no phase.
    #[error("no allowed phase has a usable logit")]
    NoAllowedPhase,
    /// A logit is NaN or infinite (weights that overflow on this observation): the
    /// decision falls back, as the host runtime's does, rather than let +inf win.
    #[error("a logit is not finite")]
    NonFiniteLogit,
}

/// The policy's choice for one decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyChoice {
    /// The phase requested (masked argmax).
    pub phase: u8,
    /// `log π(phase | obs)` under the policy the cabinet acts by: the masked argmax, taken
    /// with probability 1, so 0. (The softmax's probability of the argmax was logged before
    /// 2026-12-07; the fine-tune gate reads this as the behaviour probability, and a
    /// softmax's would inflate its importance weights by up to the number of phases.)
    pub log_prob: f32,
}

/// A policy blob accepted for this controller.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy<'b> {
    blob: MlpBlob<'b>,
}

impl<'b> Policy<'b> {
    /// Accepts `bytes` if it is a valid blob for the plan with hash `plan_hash` and for
    /// `layout`, and fits the scratch buffer.
    pub fn load(
        bytes: Option<&'b [u8]>,
        plan_hash: u64,
        layout: ObsLayout,
    ) -> Result<Self, FallbackReason> {
        let bytes = bytes.ok_or(FallbackReason::NoBlob)?;
        let blob = MlpBlob::parse(bytes).map_err(FallbackReason::Corrupt)?;
        if blob.plan_hash != plan_hash {
            return Err(FallbackReason::PlanMismatch {
                blob_plan_hash: blob.plan_hash,
                plan_hash,
            });
        }
        if blob.obs_layout != layout {
            return Err(FallbackReason::LayoutMismatch {
                blob_lanes: blob.obs_layout.n_lanes,
                blob_phases: blob.obs_layout.n_phases,
                lanes: layout.n_lanes,
                phases: layout.n_phases,
            });
        }
        let width = blob.max_width();
        if width > MAX_LAYER_WIDTH {
            return Err(FallbackReason::TooWide {
                width,
                max: MAX_LAYER_WIDTH,
            });
        }
        Ok(Policy { blob })
    }

    /// The policy's version.
    pub fn version(&self) -> u32 {
        self.blob.policy_version
    }

    /// The parsed blob.
    pub fn blob(&self) -> &MlpBlob<'b> {
        &self.blob
    }

    /// Writes the logits for `obs` into `logits` (one per phase) and returns them.
    pub fn logits<'l>(
        &self,
        obs: &[f32],
        scratch: &mut [f32; SCRATCH_FLOATS],
        logits: &'l mut [f32; MAX_PHASES],
    ) -> Result<&'l [f32], DecideError> {
        let n = self.blob.obs_layout.n_phases as usize;
        let out = &mut logits[..n];
        self.blob
            .forward(obs, scratch, out)
            .map_err(DecideError::Forward)?;
        Ok(out)
    }

    /// One decision: forward pass and masked argmax (its log-probability is 0: see
    /// [`PolicyChoice::log_prob`]).
    pub fn decide(
        &self,
        obs: &[f32],
        mask: PhaseMask,
        scratch: &mut [f32; SCRATCH_FLOATS],
    ) -> Result<PolicyChoice, DecideError> {
        let mut logits = [0.0f32; MAX_PHASES];
        let logits = self.logits(obs, scratch, &mut logits)?;
        if !logits.iter().all(|l| l.is_finite()) {
            return Err(DecideError::NonFiniteLogit);
        }
        let phase = masked_argmax(logits, mask).ok_or(DecideError::NoAllowedPhase)?;
        Ok(PolicyChoice {
            phase,
            log_prob: 0.0,
        })
    }
}
