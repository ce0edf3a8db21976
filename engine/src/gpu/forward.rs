//! The kernels of one forward pass, in the order they run: embedding; per layer RMSNorm, QKV
//! product, RoPE into the paged cache, attention, output product into the residual, RMSNorm,
//! MLP (dense here, sparse MoE in [`super::moe`]); final RMSNorm, LM head and top-k.
#![allow(unsafe_code)] // reason: kernel launches are FFI.

use super::device::{Dev, SPLIT_QUERIES};
use super::model::GpuModel;
use super::weights::{LayerW, MlpW};
use crate::config::{MAX_SCRATCH, VerifyAttn};
use crate::{EngineError, GpuError};

/// The shape of one pass: `t` new tokens per sequence at scratch offset `off`, causal or
/// masked, top-`k` per row, decode attention kernel `kind`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pass {
    pub(super) t: usize,
    pub(super) off: usize,
    pub(super) causal: bool,
    pub(super) k: usize,
    pub(super) kind: VerifyAttn,
}

impl GpuModel {
    /// Enqueue a whole forward pass (inputs already on the device) and the top-k of its rows.
    pub(super) fn enqueue(&self, dev: &Dev, p: Pass) -> Result<(), EngineError> {
        let n = self.batch * p.t;
        launch!(
            dev,
            "embed",
            (n as u32, 1, 1),
            (256, 1, 1),
            self.tokens.ptr,
            self.w.get("embed")?.ptr,
            self.x.ptr,
            self.cfg.d_model as i32
        );
        for l in 0..self.cfg.layers {
            let lw = self.w.layer(l)?;
            self.attention_block(dev, l, &lw, p)?;
            self.mlp_block(dev, &lw, n)?;
        }
        self.head(dev, n, p.k)
    }

    /// RMSNorm, QKV product, RoPE (K and V into the cache), attention and the output product
    /// added to the residual, for layer `l`.
    fn attention_block(&self, dev: &Dev, l: usize, lw: &LayerW, p: Pass) -> Result<(), GpuError> {
        let c = &self.cfg;
        let n = self.batch * p.t;
        let d = c.d_model;
        let rows = (n as u32, 1, 1);
        launch!(
            dev,
            "rmsnorm",
            rows,
            (256, 1, 1),
            self.x.ptr,
            lw.attn_norm.ptr,
            self.h.ptr,
            d as i32,
            c.norm_eps
        );
        dev.gemm(
            lw.wqkv.ptr,
            self.h.ptr,
            self.qkv.ptr,
            c.qkv_dim(),
            d,
            n,
            false,
            0.0,
        )?;
        let (kp, vp) = self.layer_kv(l);
        launch!(
            dev,
            "rope_cache",
            rows,
            (128, 1, 1),
            self.qkv.ptr,
            self.pos.ptr,
            self.base.ptr,
            self.pt.ptr,
            kp,
            vp,
            p.t as i32,
            p.off as i32,
            c.heads as i32,
            c.kv_heads as i32,
            c.head_dim as i32,
            self.pps as i32,
            self.ps as i32,
            c.rope_theta
        );
        self.attention(dev, l, p.t, p.off, p.causal, p.kind)?;
        dev.gemm(
            lw.wo.ptr,
            self.attn.ptr,
            self.x.ptr,
            d,
            c.heads * c.head_dim,
            n,
            true,
            1.0,
        )
    }

    /// RMSNorm and the MLP of one layer over `n` rows, added to the residual.
    fn mlp_block(&self, dev: &Dev, lw: &LayerW, n: usize) -> Result<(), EngineError> {
        let c = &self.cfg;
        let d = c.d_model;
        launch!(
            dev,
            "rmsnorm",
            (n as u32, 1, 1),
            (256, 1, 1),
            self.x.ptr,
            lw.mlp_norm.ptr,
            self.h.ptr,
            d as i32,
            c.norm_eps
        );
        let ew = ((n * c.ffn).div_ceil(256).min(4096) as u32, 1, 1);
        match &lw.mlp {
            MlpW::Dense { gate_up, down } => {
                dev.gemm(
                    gate_up.ptr,
                    self.h.ptr,
                    self.gu.ptr,
                    2 * c.ffn,
                    d,
                    n,
                    false,
                    0.0,
                )?;
                launch!(
                    dev,
                    "swiglu",
                    ew,
                    (256, 1, 1),
                    self.gu.ptr,
                    self.act.ptr,
                    0u64,
                    0i32,
                    c.ffn as i32,
                    n as u64
                );
                dev.gemm(down.ptr, self.act.ptr, self.x.ptr, d, c.ffn, n, true, 1.0)?;
            }
            MlpW::Moe { router, experts } => {
                dev.gemm(
                    router.ptr,
                    self.h.ptr,
                    self.router.ptr,
                    c.experts,
                    d,
                    n,
                    true,
                    0.0,
                )?;
                self.moe_dispatch(dev, n, experts)?;
            }
        }
        Ok(())
    }

    /// Final RMSNorm, LM head (f32 logits) and the top-`k` of each of `n` rows.
    fn head(&self, dev: &Dev, n: usize, k: usize) -> Result<(), EngineError> {
        let c = &self.cfg;
        let rows = (n as u32, 1, 1);
        launch!(
            dev,
            "rmsnorm",
            rows,
            (256, 1, 1),
            self.x.ptr,
            self.w.get("final_norm")?.ptr,
            self.h.ptr,
            c.d_model as i32,
            c.norm_eps
        );
        dev.gemm(
            self.w.get("lm_head")?.ptr,
            self.h.ptr,
            self.logits.ptr,
            c.vocab,
            c.d_model,
            n,
            true,
            0.0,
        )?;
        launch!(
            dev,
            "topk",
            rows,
            (256, 1, 1),
            self.logits.ptr,
            self.top.ptr,
            c.vocab as i32,
            k as i32
        );
        Ok(())
    }

    /// Enqueue the attention of one layer for the rows of a pass: split-KV for decode passes
    /// when `kind` says so, else the one-warp-per-row gather kernel.
    pub(super) fn attention(
        &self,
        dev: &Dev,
        layer: usize,
        t: usize,
        off: usize,
        causal: bool,
        kind: VerifyAttn,
    ) -> Result<(), GpuError> {
        if kind == VerifyAttn::SplitKv && t <= MAX_SCRATCH {
            self.attention_split(dev, layer, t, off, causal)
        } else {
            self.attention_warp(dev, layer, t, off, causal)
        }
    }

    /// Flash-decode: the keys in chunks over many blocks, then `attn_combine` merges the chunks.
    fn attention_split(
        &self,
        dev: &Dev,
        layer: usize,
        t: usize,
        off: usize,
        causal: bool,
    ) -> Result<(), GpuError> {
        let c = &self.cfg;
        let hd = c.head_dim;
        let n = self.batch * t;
        let (kp, vp) = self.layer_kv(layer);
        let scale = 1.0f32 / (hd as f32).sqrt();
        let q = t * (c.heads / c.kv_heads);
        let qm = SPLIT_QUERIES.into_iter().find(|&p| p >= q).unwrap_or(8);
        let qgroups = q.div_ceil(qm);
        // KV heads fastest: the blocks of one split run together and read whole cache rows.
        let grid = (
            (c.kv_heads * qgroups) as u32,
            self.nsplit as u32,
            self.batch as u32,
        );
        let mut name = format!("attn_split_{hd}_{qm}");
        let alt = format!("{name}{}", self.split_variant);
        if dev.funcs.contains_key(&alt) {
            name = alt;
        }
        launch!(
            dev,
            &name,
            grid,
            (128, 1, 1),
            self.qkv.ptr,
            kp,
            vp,
            self.base.ptr,
            self.pt.ptr,
            self.masks.ptr,
            self.part_ml.ptr,
            self.part_acc.ptr,
            t as i32,
            off as i32,
            i32::from(causal),
            c.heads as i32,
            c.kv_heads as i32,
            self.pps as i32,
            self.ps.trailing_zeros() as i32,
            scale,
            self.chunk as i32,
            self.nsplit as i32
        );
        launch!(
            dev,
            "attn_combine",
            ((n * c.heads) as u32, 1, 1),
            (128, 1, 1),
            self.part_ml.ptr,
            self.part_acc.ptr,
            self.attn.ptr,
            t as i32,
            c.heads as i32,
            c.kv_heads as i32,
            hd as i32,
            self.nsplit as i32
        );
        Ok(())
    }

    /// One warp per (row, head), one key at a time through the page table: a gather.
    fn attention_warp(
        &self,
        dev: &Dev,
        layer: usize,
        t: usize,
        off: usize,
        causal: bool,
    ) -> Result<(), GpuError> {
        let c = &self.cfg;
        let hd = c.head_dim;
        let n = self.batch * t;
        let (kp, vp) = self.layer_kv(layer);
        let scale = 1.0f32 / (hd as f32).sqrt();
        let warps = n * c.heads;
        launch!(
            dev,
            &format!("attn_warp_{hd}"),
            (warps.div_ceil(4) as u32, 1, 1),
            (128, 1, 1),
            self.qkv.ptr,
            kp,
            vp,
            self.base.ptr,
            self.pt.ptr,
            self.masks.ptr,
            self.attn.ptr,
            n as i32,
            t as i32,
            off as i32,
            i32::from(causal),
            c.heads as i32,
            c.kv_heads as i32,
            self.pps as i32,
            self.ps as i32,
            scale
        );
        Ok(())
    }
}
