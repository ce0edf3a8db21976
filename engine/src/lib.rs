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
    /// The draft's levels: `first` (top-`k_first`), then each pass of `levels` (top-1), whose
    /// tokens are the last `levels[i].t` top tokens of each sequence of the pass before it (their
    /// `tokens` fields are ignored). Returns, for `first` and each level, the last `w` top tokens
    /// of each sequence (`batch * w`, sequence-major; `w` is the next level's `t`, the last
    /// level's own). A backend that can feed the levels on the device overrides this, so that
    /// the host does not wait between levels.
    fn draft_levels(
        &mut self,
        which: Which,
        first: &Forward,
        k_first: usize,
        levels: &[Forward],
    ) -> Result<Vec<Vec<u32>>, EngineError> {
        levels_on_host(self, which, first, k_first, levels)
    }
    /// Whether a draft model exists.
    fn has_draft(&self) -> bool;
    /// Called at phase boundaries so that host timers measure finished GPU work.
    fn sync(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// [`Backend::draft_levels`] pass by pass, each level's tokens read back and fed from the host.
pub fn levels_on_host<B: Backend + ?Sized>(
    be: &mut B,
    which: Which,
    first: &Forward,
    k_first: usize,
    levels: &[Forward],
) -> Result<Vec<Vec<u32>>, EngineError> {
    let batch = first.base.len().max(1);
    let mut out = Vec::with_capacity(levels.len() + 1);
    let top = be.forward(which, first, k_first)?;
    let mut width = levels.first().map_or(k_first, |l| l.t);
    let mut prev = last_per_sequence(&top, batch, width)?;
    for (i, level) in levels.iter().enumerate() {
        let mut f = level.clone();
        f.tokens = prev.clone();
        let top = be.forward(which, &f, 1)?;
        width = levels.get(i + 1).map_or(level.t, |l| l.t);
        out.push(std::mem::replace(
            &mut prev,
            last_per_sequence(&top, batch, width)?,
        ));
    }
    out.push(prev);
    Ok(out)
}

/// The last `w` values of each of `batch` equal blocks of `top`, block by block.
fn last_per_sequence(top: &[u32], batch: usize, w: usize) -> Result<Vec<u32>, EngineError> {
    let block = top.len() / batch;
    if w > block {
        return Err(EngineError::LevelShape {
            needed: w,
            have: block,
        });
    }
    Ok((0..batch)
        .flat_map(|b| top[(b + 1) * block - w..(b + 1) * block].iter().copied())
        .collect())
}

#[cfg(test)]
mod imports {
    /// No circle among the modules of the library, nor of the binary (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("specdec (lib.rs)", &src.join("lib.rs"));
        cufall_testkit::imports::assert_one_way(
            "specdec (bin/specdec/main.rs)",
            &src.join("bin/specdec/main.rs"),
        );
    }
}
