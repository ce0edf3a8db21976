//! One model on the device: its weights, paged KV cache and fixed input and activation buffers
//! (sized once per run, so that decode passes can be captured into CUDA graphs), the sizing of
//! those buffers, and the split-KV chunk rule that follows the device's SM count.

use super::device::{Buf, Dev};
use super::weights::GpuWeights;
use crate::config::{MAX_SCRATCH, ModelConfig, RunConfig};
use crate::cpu::page_table;
use crate::{EngineError, Forward, GpuError};

/// Split-KV blocks per SM the chunk rule aims for over the whole cache: on an H200 (132 SMs)
/// about 5 waves of 3 resident blocks, whatever the context length. Measured at 64k context:
/// 1152 keys per block (this target) beat 576 (31 per SM) by 8 % and 256 keys by more
/// (docs/engine.md).
pub const SPLIT_BLOCKS_PER_SM: usize = 14;
/// Most splits `attn_combine` merges (its shared-memory weight table).
const MAX_SPLITS: usize = 4096;

/// Keys per split-KV block for a cache of `max_context` positions on a device with `sm_count`
/// SMs: a multiple of 64 chosen so that batch x KV heads x splits is about
/// `sm_count * SPLIT_BLOCKS_PER_SM`. `SPECDEC_SPLIT_CHUNK` overrides it (a benchmark knob;
/// rounded up to a multiple of 64).
pub(super) fn split_chunk(
    max_context: usize,
    batch: usize,
    kv_heads: usize,
    sm_count: usize,
) -> usize {
    let chosen = std::env::var("SPECDEC_SPLIT_CHUNK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    chunk_rule(max_context, batch, kv_heads, sm_count, chosen)
}

/// [`split_chunk`] without the environment: `chosen` replaces the automatic length.
fn chunk_rule(
    max_context: usize,
    batch: usize,
    kv_heads: usize,
    sm_count: usize,
    chosen: Option<usize>,
) -> usize {
    let target_blocks = sm_count.max(1) * SPLIT_BLOCKS_PER_SM;
    let auto = (max_context * batch * kv_heads).div_ceil(target_blocks);
    chosen
        .unwrap_or(auto)
        .next_multiple_of(64)
        .clamp(64, 1 << 16)
        .max(max_context.div_ceil(MAX_SPLITS))
}

/// GPU memory one model needs for a run, weights excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelBytes {
    pub kv_cache: usize,
    /// Activations, scratch and inputs.
    pub activations: usize,
}

/// Bytes of GPU memory one model needs for a run (weights excluded) on a device with
/// `sm_count` SMs.
pub fn model_bytes(cfg: &ModelConfig, run: &RunConfig, sm_count: usize) -> ModelBytes {
    let pps = run.max_context.div_ceil(run.page_size);
    let kv = 2 * cfg.layers * run.batch * pps * run.page_size * cfg.kv_heads * cfg.head_dim * 2;
    let nmax = run.batch * run.prompt_len.max(MAX_SCRATCH);
    let e = cfg.experts.max(1);
    let per_row = cfg.d_model * 6
        + cfg.qkv_dim() * 2
        + cfg.heads * cfg.head_dim * 2
        + cfg.ffn * 6
        + e * 4
        + moe_slots(cfg) * (cfg.d_model * 6 + 12)
        + cfg.vocab * 4
        + 64;
    let g = cfg.heads / cfg.kv_heads;
    let chunk = split_chunk(run.max_context, run.batch, cfg.kv_heads, sm_count);
    let nsplit = run.max_context.div_ceil(chunk);
    let part = run.batch * cfg.kv_heads * MAX_SCRATCH * g * nsplit * (cfg.head_dim + 2) * 4;
    let levels = MAX_SCRATCH * level_stride(run.batch) + (MAX_SCRATCH + 1) * run.batch * 8 * 4;
    ModelBytes {
        kv_cache: kv,
        activations: nmax * per_row + part + pps * run.batch * 4 + levels,
    }
}

/// Staged inputs of one draft level (`draft_feed`): `batch * 8` positions (u32), then `batch`
/// bases (u32), then 8 masks (u64) at an 8-byte boundary.
pub(super) fn level_stride(batch: usize) -> usize {
    level_masks_at(batch) + 8 * 8
}

/// Byte offset of the bases in a level's staged inputs.
pub(super) fn level_base_at(batch: usize) -> usize {
    batch * 8 * 4
}

/// Byte offset of the masks in a level's staged inputs.
pub(super) fn level_masks_at(batch: usize) -> usize {
    (level_base_at(batch) + batch * 4).next_multiple_of(16)
}

/// Expert slots per row of the MoE dispatch buffers (0 for a dense MLP).
fn moe_slots(cfg: &ModelConfig) -> usize {
    if cfg.experts == 0 { 0 } else { cfg.top_k }
}

/// One model on the device: weights, paged KV cache, inputs and activations.
pub(super) struct GpuModel {
    pub(super) cfg: ModelConfig,
    pub(super) w: GpuWeights,
    pub(super) seed: u64,
    pub(super) batch: usize,
    pub(super) nmax: usize,
    /// Pages per sequence and tokens per page.
    pub(super) pps: usize,
    pub(super) ps: usize,
    /// Keys per split-KV block and splits over the cache.
    pub(super) chunk: usize,
    pub(super) nsplit: usize,
    /// Kernel-name suffix of the split-KV variant in use (`SPECDEC_SPLIT_VARIANT`), or empty.
    pub(super) split_variant: String,
    /// K (or V) elements of one layer's cache.
    pub(super) layer_elems: usize,
    pub(super) k: Buf,
    pub(super) v: Buf,
    /// Page table (u32 physical page per logical page, sequence-major).
    pub(super) pt: Buf,
    pub(super) tokens: Buf,
    pub(super) pos: Buf,
    pub(super) base: Buf,
    pub(super) masks: Buf,
    pub(super) paths: Buf,
    pub(super) counts: Buf,
    /// f32 residual stream.
    pub(super) x: Buf,
    pub(super) h: Buf,
    pub(super) qkv: Buf,
    pub(super) attn: Buf,
    pub(super) gu: Buf,
    pub(super) act: Buf,
    pub(super) router: Buf,
    /// MoE dispatch: slot -> row, then row * top_k + j -> slot (u32).
    pub(super) route: Buf,
    /// MoE dispatch: the gate of each slot (f32).
    pub(super) route_gate: Buf,
    /// MoE dispatch: the rows of `h` gathered per slot (bf16) and the experts' outputs (f32).
    pub(super) hx: Buf,
    pub(super) ybuf: Buf,
    pub(super) logits: Buf,
    pub(super) top: Buf,
    /// Draft levels fed on the device: each level's positions, bases and masks, staged by one
    /// upload per step ([`level_stride`] bytes per level).
    pub(super) stage: Buf,
    /// Draft levels fed on the device: the tokens kept from each pass (`batch * 8` per pass).
    pub(super) keep: Buf,
    /// Split-KV partials: running max and sum per (row, head, split), and the accumulators.
    pub(super) part_ml: Buf,
    pub(super) part_acc: Buf,
}

impl GpuModel {
    /// The first `layers` layers of `w` with a cache and buffers for `run`.
    pub(super) fn new(
        dev: &Dev,
        w: GpuWeights,
        layers: usize,
        seed: u64,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        let cfg = ModelConfig {
            layers,
            ..w.cfg.clone()
        };
        if cfg.head_dim != 64 && cfg.head_dim != 128 {
            return Err(GpuError::HeadDim {
                head_dim: cfg.head_dim,
            }
            .into());
        }
        if cfg.experts > 64 {
            return Err(GpuError::TooManyExperts {
                experts: cfg.experts,
            }
            .into());
        }
        let b = run.batch;
        let pps = run.max_context.div_ceil(run.page_size);
        let layer_elems = b * pps * run.page_size * cfg.kv_heads * cfg.head_dim;
        let nmax = b * run.prompt_len.max(MAX_SCRATCH);
        let e = cfg.experts.max(1);
        let g = cfg.heads / cfg.kv_heads;
        let chunk = split_chunk(run.max_context, b, cfg.kv_heads, dev.sm_count);
        let nsplit = run.max_context.div_ceil(chunk);
        let split_variant = std::env::var("SPECDEC_SPLIT_VARIANT")
            .map(|v| format!("_{v}"))
            .unwrap_or_default();
        let slots = nmax * moe_slots(&cfg);
        let nparts = b * cfg.kv_heads * MAX_SCRATCH * g * nsplit;
        let pt_host = page_table(b, run.max_context, run.page_size, seed);
        let mut pt = dev.alloc(pt_host.len() * 4)?;
        let bytes: Vec<u8> = pt_host.iter().flat_map(|p| p.to_le_bytes()).collect();
        dev.stream
            .memcpy_htod(&bytes, &mut pt.mem.slice_mut(0..bytes.len()))
            .map_err(GpuError::driver("uploading the page table"))?;
        Ok(GpuModel {
            k: dev.alloc(cfg.layers * layer_elems * 2)?,
            v: dev.alloc(cfg.layers * layer_elems * 2)?,
            pt,
            tokens: dev.alloc(nmax * 4)?,
            pos: dev.alloc(nmax * 4)?,
            base: dev.alloc(b * 4)?,
            masks: dev.alloc(MAX_SCRATCH * 8)?,
            paths: dev.alloc(b * MAX_SCRATCH * 4)?,
            counts: dev.alloc(b * 4)?,
            x: dev.alloc(nmax * cfg.d_model * 4)?,
            h: dev.alloc(nmax * cfg.d_model * 2)?,
            qkv: dev.alloc(nmax * cfg.qkv_dim() * 2)?,
            attn: dev.alloc(nmax * cfg.heads * cfg.head_dim * 2)?,
            gu: dev.alloc(nmax * cfg.ffn * 4)?,
            act: dev.alloc(nmax * cfg.ffn * 2)?,
            router: dev.alloc(nmax * e * 4)?,
            route: dev.alloc(slots * 8)?,
            route_gate: dev.alloc(slots * 4)?,
            hx: dev.alloc(slots * cfg.d_model * 2)?,
            ybuf: dev.alloc(slots * cfg.d_model * 4)?,
            logits: dev.alloc(nmax * cfg.vocab * 4)?,
            top: dev.alloc(nmax * 8 * 4)?,
            stage: dev.alloc(MAX_SCRATCH * level_stride(b))?,
            keep: dev.alloc((MAX_SCRATCH + 1) * b * 8 * 4)?,
            part_ml: dev.alloc(nparts * 8)?,
            part_acc: dev.alloc(nparts * cfg.head_dim * 4)?,
            cfg,
            w,
            seed,
            batch: b,
            nmax,
            pps,
            ps: run.page_size,
            chunk,
            nsplit,
            split_variant,
            layer_elems,
        })
    }

    /// Copy the inputs of pass `f` into the model's fixed input buffers.
    pub(super) fn set_inputs(&mut self, dev: &Dev, f: &Forward) -> Result<(), GpuError> {
        let n = self.batch * f.t;
        if n > self.nmax || f.tokens.len() != n || f.pos.len() != n || f.base.len() != self.batch {
            return Err(GpuError::PassTooLarge {
                rows: n,
                capacity: self.nmax,
            });
        }
        if let Some(&bad) = f.tokens.iter().find(|&&t| t as usize >= self.cfg.vocab) {
            return Err(GpuError::TokenOutOfVocab { token: bad });
        }
        dev.upload(&mut self.tokens, &le_bytes(&f.tokens))?;
        dev.upload(&mut self.pos, &le_bytes(&f.pos))?;
        dev.upload(&mut self.base, &le_bytes(&f.base))?;
        let masks: Vec<u8> = f.masks.iter().flat_map(|x| x.to_le_bytes()).collect();
        dev.upload(&mut self.masks, &masks)
    }

    /// Device addresses of layer `layer`'s K and V cache.
    pub(super) fn layer_kv(&self, layer: usize) -> (u64, u64) {
        let off = (layer * self.layer_elems * 2) as u64;
        (self.k.ptr + off, self.v.ptr + off)
    }
}

/// Little-endian bytes of `v`, as the kernels read u32 inputs.
pub(super) fn le_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 7B layout (32 KV heads), batch 1, 64k context with a 64-token prompt and 32 new tokens,
    /// as measured on the H200 (132 SMs): 1152 keys per block (docs/engine.md).
    #[test]
    fn h200_chunk_is_unchanged() {
        let max_context = 65536 + 64 + 32 + MAX_SCRATCH;
        assert_eq!(chunk_rule(max_context, 1, 32, 132, None), 1152);
        // The H200 constant of before (`132 * 14` blocks) for other shapes too.
        for (ctx, batch, kvh) in [
            (4096usize + 256, 1usize, 32usize),
            (131_072 + 144, 1, 32),
            (1164, 2, 2),
        ] {
            let old = (ctx * batch * kvh)
                .div_ceil(132 * 14)
                .next_multiple_of(64)
                .clamp(64, 1 << 16)
                .max(ctx.div_ceil(MAX_SPLITS));
            assert_eq!(chunk_rule(ctx, batch, kvh, 132, None), old);
        }
    }

    /// Fewer SMs get longer chunks (fewer blocks), more SMs shorter ones; the override wins.
    #[test]
    fn chunk_follows_the_sm_count() {
        let ctx = 65_696;
        let (small, h200, big) = (
            chunk_rule(ctx, 1, 32, 66, None),
            chunk_rule(ctx, 1, 32, 132, None),
            chunk_rule(ctx, 1, 32, 264, None),
        );
        assert!(small > h200 && h200 > big, "{small} {h200} {big}");
        assert_eq!(chunk_rule(ctx, 1, 32, 132, Some(500)), 512);
        // No SM count from the driver is treated as one SM, not a division by zero.
        assert!(chunk_rule(ctx, 1, 32, 0, None) <= 1 << 16);
        for sms in [1, 16, 132, 1000] {
            let c = chunk_rule(ctx, 1, 32, sms, None);
            assert!(
                c.is_multiple_of(64) && ctx.div_ceil(c) <= MAX_SPLITS,
                "{sms}: {c}"
            );
        }
    }
}
