//! Model and run configuration: sizes, knobs, and their validation.
//!
//! Every check that can be made before touching a GPU lives here, so that bad input gets a
//! one-line error naming the fix instead of a CUDA failure half-way through a run.

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// Sizes of a decoder-only transformer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub layers: usize,
    pub d_model: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Number of experts in the MLP; 0 means a dense SwiGLU MLP.
    #[serde(default)]
    pub experts: usize,
    /// Experts chosen per token when `experts > 0`.
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    #[serde(default = "default_theta")]
    pub rope_theta: f32,
    #[serde(default = "default_eps")]
    pub norm_eps: f32,
}

fn default_top_k() -> usize {
    2
}
fn default_theta() -> f32 {
    10_000.0
}
fn default_eps() -> f32 {
    1e-5
}

impl ModelConfig {
    /// Named size presets.
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let base = |layers, d_model, heads, kv_heads, head_dim, ffn, vocab| ModelConfig {
            layers,
            d_model,
            heads,
            kv_heads,
            head_dim,
            ffn,
            vocab,
            experts: 0,
            top_k: 2,
            rope_theta: default_theta(),
            norm_eps: default_eps(),
        };
        Ok(match name {
            // CPU-test size.
            "tiny" => base(2, 64, 4, 2, 16, 128, 256),
            // GPU correctness size (head_dim 64 is the smallest the GPU kernels take).
            "small" => base(2, 256, 4, 2, 64, 512, 1024),
            // A Llama-2-7B layer layout (MHA, head_dim 128) with 8 layers: real layer shapes,
            // less weight memory and setup time than 32 layers.
            "7b-8l" => base(8, 4096, 32, 32, 128, 11008, 32000),
            // Many small layers: kernels shorter than their launch cost (the CUDA-graphs
            // diagnosis).
            "0.5b" => base(24, 1024, 16, 16, 64, 2816, 32000),
            // Full Llama-2-7B layout.
            "7b" => base(32, 4096, 32, 32, 128, 11008, 32000),
            // Grouped-query layout (Llama-3-8B-like) with 8 layers.
            "8b-gqa-8l" => base(8, 4096, 32, 8, 128, 14336, 32000),
            other => {
                return Err(ConfigError::UnknownPreset { name: other.into() });
            }
        })
    }

    pub fn qkv_dim(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.layers == 0 || self.d_model == 0 || self.heads == 0 || self.ffn == 0 {
            return Err(ConfigError::ZeroSize);
        }
        if self.vocab < 2 {
            return Err(ConfigError::VocabTooSmall);
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return Err(ConfigError::KvHeads {
                heads: self.heads,
                kv_heads: self.kv_heads,
            });
        }
        if self.head_dim < 2 || !self.head_dim.is_multiple_of(2) {
            return Err(ConfigError::OddHeadDim {
                head_dim: self.head_dim,
            });
        }
        if self.experts > 0 && (self.top_k == 0 || self.top_k > self.experts) {
            return Err(ConfigError::TopK {
                top_k: self.top_k,
                experts: self.experts,
            });
        }
        Ok(())
    }
}

/// How the draft model is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DraftKind {
    /// The target's first `draft_layers` layers plus its final norm and head (shared weights).
    SelfSpec,
    /// A separate small model of `draft_layers` layers with a quarter of the width.
    Small,
}

/// Which attention kernel the decode phases (draft and verify) use on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyAttn {
    /// One warp per query and head, one key at a time, a page-table lookup per key.
    Scattered,
    /// Flash-decode: the keys split into chunks over many blocks, 16-byte loads, then a combine.
    SplitKv,
}

/// Everything one run needs besides the weights.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunConfig {
    pub batch: usize,
    /// Tokens of seeded background context already in the KV cache before the prompt.
    pub context: usize,
    pub prompt_len: usize,
    pub new_tokens: usize,
    pub max_context: usize,
    pub page_size: usize,
    pub depth: usize,
    pub width: usize,
    pub draft: DraftKind,
    pub draft_layers: usize,
    pub verify_attn: VerifyAttn,
    pub graphs: bool,
    pub seed: u64,
}

/// Scratch slots a forward pass may use beyond the committed length (tree masks are 64 bits).
pub const MAX_SCRATCH: usize = 64;
/// Page sizes the KV cache accepts.
pub const PAGE_SIZES: [usize; 3] = [1, 16, 64];

impl RunConfig {
    /// Candidates verified per step: the root plus `width` chains of `depth` tokens.
    pub fn verify_tokens(&self) -> usize {
        1 + self.width * self.depth
    }

    /// Logical KV positions one sequence needs: background, prompt, generated, scratch.
    pub fn needed_context(&self) -> usize {
        self.context + self.prompt_len + self.new_tokens + MAX_SCRATCH
    }

    pub fn validate(&self, model: &ModelConfig) -> Result<(), ConfigError> {
        if self.batch == 0 {
            return Err(ConfigError::Zero { flag: "--batch" });
        }
        if self.prompt_len == 0 {
            return Err(ConfigError::Zero {
                flag: "--prompt-len",
            });
        }
        if !PAGE_SIZES.contains(&self.page_size) {
            return Err(ConfigError::PageSize {
                page_size: self.page_size,
            });
        }
        self.validate_tree()?;
        if self.draft_layers == 0 {
            return Err(ConfigError::Zero {
                flag: "--draft-layers",
            });
        }
        if self.draft == DraftKind::SelfSpec && self.draft_layers > model.layers {
            return Err(ConfigError::DraftLayers {
                draft_layers: self.draft_layers,
                layers: model.layers,
            });
        }
        if self.needed_context() > self.max_context {
            return Err(ConfigError::ContextTooLong {
                needed: self.needed_context(),
                max: self.max_context,
            });
        }
        Ok(())
    }

    fn validate_tree(&self) -> Result<(), ConfigError> {
        if self.depth == 0 || self.width == 0 || self.width > 8 {
            return Err(ConfigError::TreeShape);
        }
        // Draft scratch: up to depth+1 catch-up tokens, then width*(depth-1) tree nodes.
        let draft_scratch = self.depth + 1 + self.width * (self.depth - 1);
        if self.verify_tokens() > MAX_SCRATCH || draft_scratch > MAX_SCRATCH {
            return Err(ConfigError::TreeTooBig {
                width: self.width,
                depth: self.depth,
                nodes: self.verify_tokens().max(draft_scratch),
                max: MAX_SCRATCH,
            });
        }
        if self.prompt_len < self.depth {
            return Err(ConfigError::PromptShorterThanDepth {
                prompt_len: self.prompt_len,
                depth: self.depth,
            });
        }
        Ok(())
    }
}

/// Draft layers when `--draft-layers` is not given: [`DEFAULT_DRAFT_LAYERS`], but always fewer
/// than the target's layers, so that the draft is smaller than the target for every model
/// (`tiny` and `small` have 2 layers: their draft gets 1). A self-speculative draft of a
/// 1-layer target would be the target itself, which is refused.
pub fn default_draft_layers(target: &ModelConfig, draft: DraftKind) -> Result<usize, ConfigError> {
    let below_target = target.layers.saturating_sub(1);
    match draft {
        DraftKind::SelfSpec if below_target == 0 => Err(ConfigError::DraftIsTarget),
        // A small draft is a quarter of the width already; fewer layers keep it smaller still.
        _ => Ok(DEFAULT_DRAFT_LAYERS.min(below_target).max(1)),
    }
}

/// The draft depth of the measured runs (docs/engine.md) for models with more than 2 layers.
pub const DEFAULT_DRAFT_LAYERS: usize = 2;

/// The draft model's sizes for a run.
pub fn draft_config(target: &ModelConfig, run: &RunConfig) -> ModelConfig {
    match run.draft {
        DraftKind::SelfSpec => ModelConfig {
            layers: run.draft_layers,
            ..target.clone()
        },
        DraftKind::Small => {
            let heads = (target.heads / 4).max(1);
            let kv_heads = (target.kv_heads / 4).max(1).min(heads);
            let kv_heads = if heads.is_multiple_of(kv_heads) {
                kv_heads
            } else {
                1
            };
            ModelConfig {
                layers: run.draft_layers,
                d_model: (target.d_model / 4).max(8),
                heads,
                kv_heads,
                head_dim: target.head_dim,
                ffn: (target.ffn / 4).max(8),
                experts: 0,
                ..target.clone()
            }
        }
    }
}
