//! `specdec`: a speculative-decoding engine that is a real GPU workload for cufall.
//!
//! - [`config`]: sizes and knobs, validated before any GPU work.
//! - [`weights`]: tensor list, seeded values, safetensors files.
//! - [`cpu`]: the f32 CPU reference of the model (tests, and the GPU logits check).
//! - [`gpu`]: the bf16 CUDA implementation (cuBLAS, NVRTC kernels, CUDA graphs), loaded at run
//!   time.
//! - [`spec`]: the backend-independent decoding loops (plain greedy, speculative chain/tree).
//! - [`check`]: the GPU-vs-CPU correctness cases (`specdec check`).
//! - [`error`]: typed errors, gathered in [`EngineError`].
#![warn(clippy::too_many_lines, clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod config;
pub mod cpu;
pub mod error;
pub mod gpu;
pub mod spec;
pub mod weights;

pub use error::{ConfigError, EngineError, GpuError, WeightsError};

/// Which of the two models a call is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Which {
    Target,
    Draft,
}

/// One forward pass over `t` new tokens per sequence.
///
/// The new tokens of sequence `b` go to logical KV positions `base[b] + off + i` (its scratch
/// slots `off..off+t`); each attends to every position below `base[b]` and to the scratch slots
/// its mask allows: `causal` (slot `<= off + i`) or `masks[i]` (bit `s` = scratch slot `s`).
#[derive(Debug, Clone)]
pub struct Forward {
    pub t: usize,
    pub off: usize,
    pub causal: bool,
    pub base: Vec<u32>,
    /// `batch * t` tokens, sequence-major.
    pub tokens: Vec<u32>,
    /// `batch * t` RoPE positions.
    pub pos: Vec<u32>,
    /// `t` masks when not causal (shared by all sequences).
    pub masks: Vec<u64>,
}

/// What a decoding loop needs from an implementation of the model.
pub trait Backend {
    /// Run a forward pass and return the top-`k` token ids of every row (`batch * t * k`).
    fn forward(&mut self, which: Which, fwd: &Forward, k: usize) -> Result<Vec<u32>, EngineError>;
    /// Move the K/V of scratch slots `paths[b][j]` to scratch slot `j`, for each sequence.
    fn commit(&mut self, which: Which, base: &[u32], paths: &[Vec<u32>])
    -> Result<(), EngineError>;
    /// Fill logical positions `0..context` of every sequence with seeded background K/V.
    fn fill_background(&mut self, which: Which, context: usize) -> Result<(), EngineError>;
    /// Whether a draft model exists.
    fn has_draft(&self) -> bool;
    /// Called at phase boundaries so that host timers measure finished GPU work.
    fn sync(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}
