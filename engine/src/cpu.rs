//! The f32 CPU reference of the model, computing exactly what the GPU computes, row by row.
//!
//! Every row's arithmetic is independent of how many rows a call holds (same summation order),
//! so a speculative run and a plain greedy run produce bit-identical logits here: the property
//! the CI tests rely on. The KV cache uses the same paged layout and page table as the GPU.

use std::sync::Arc;

use crate::config::{ModelConfig, RunConfig, draft_config};
use crate::weights::{HostWeights, background_index, background_key, bf16_round, mix64, uniform};
use crate::{Backend, EngineError, Forward, Which};

/// Physical page of each logical page, sequence-major: a seeded shuffle, so that logical
/// neighbours are scattered in memory (the `--page-size 1` diagnosis needs real scatter).
pub fn page_table(batch: usize, max_context: usize, page_size: usize, seed: u64) -> Vec<u32> {
    let pages = batch * max_context.div_ceil(page_size);
    let mut perm: Vec<u32> = (0..pages as u32).collect();
    let key = mix64(seed ^ 0x7061_6765_7461_626c);
    for i in (1..pages).rev() {
        let j = (mix64(key ^ i as u64) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    perm
}

struct Layer {
    attn_norm: Vec<f32>,
    wqkv: Vec<f32>,
    wo: Vec<f32>,
    mlp_norm: Vec<f32>,
    mlp: Mlp,
}

enum Mlp {
    Dense {
        gate_up: Vec<f32>,
        down: Vec<f32>,
    },
    Moe {
        router: Vec<f32>,
        experts: Vec<(Vec<f32>, Vec<f32>)>,
    },
}

/// Weights arranged for the CPU forward pass.
pub struct CpuWeights {
    cfg: ModelConfig,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    final_norm: Vec<f32>,
    lm_head: Vec<f32>,
}

impl CpuWeights {
    pub fn new(w: &HostWeights) -> Result<Self, EngineError> {
        let cfg = w.cfg.clone();
        let get = |n: &str| w.get(n).map(<[f32]>::to_vec);
        let mut layers = Vec::new();
        for l in 0..cfg.layers {
            let mlp = if cfg.experts == 0 {
                Mlp::Dense {
                    gate_up: get(&format!("layers.{l}.w_gate_up"))?,
                    down: get(&format!("layers.{l}.w_down"))?,
                }
            } else {
                let mut experts = Vec::new();
                for e in 0..cfg.experts {
                    experts.push((
                        get(&format!("layers.{l}.experts.{e}.w_gate_up"))?,
                        get(&format!("layers.{l}.experts.{e}.w_down"))?,
                    ));
                }
                Mlp::Moe {
                    router: get(&format!("layers.{l}.router"))?,
                    experts,
                }
            };
            layers.push(Layer {
                attn_norm: get(&format!("layers.{l}.attn_norm"))?,
                wqkv: get(&format!("layers.{l}.wqkv"))?,
                wo: get(&format!("layers.{l}.wo"))?,
                mlp_norm: get(&format!("layers.{l}.mlp_norm"))?,
                mlp,
            });
        }
        Ok(CpuWeights {
            embed: get("embed")?,
            final_norm: get("final_norm")?,
            lm_head: get("lm_head")?,
            layers,
            cfg,
        })
    }
}

/// One model (its weights, layer count and KV cache).
pub struct CpuModel {
    w: Arc<CpuWeights>,
    cfg: ModelConfig,
    seed: u64,
    batch: usize,
    page_size: usize,
    pages_per_seq: usize,
    page_table: Vec<u32>,
    /// `[layer][slot][kv_head][head_dim]`.
    k: Vec<f32>,
    v: Vec<f32>,
}

/// `y[o] = sum_i x[i] * w[o][i]` in ascending `i`, for every output.
fn matvec(w: &[f32], x: &[f32], out: &mut [f32]) {
    let n = x.len();
    for (o, y) in out.iter_mut().enumerate() {
        let row = &w[o * n..(o + 1) * n];
        let mut acc = 0.0f32;
        for i in 0..n {
            acc += row[i] * x[i];
        }
        *y = acc;
    }
}

fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ss: f32 = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / (ss + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| v * r * g).collect()
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Top-`k` indices by value, ties to the lower index, NaN lowest.
pub fn top_k(vals: &[f32], k: usize) -> Vec<u32> {
    let mut chosen: Vec<u32> = Vec::with_capacity(k);
    for _ in 0..k.min(vals.len()) {
        let mut best: Option<(usize, f32)> = None;
        for (i, &v) in vals.iter().enumerate() {
            if chosen.contains(&(i as u32)) {
                continue;
            }
            let v = if v.is_nan() { f32::NEG_INFINITY } else { v };
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((i, v));
            }
        }
        if let Some((i, _)) = best {
            chosen.push(i as u32);
        }
    }
    chosen
}

/// Rotate pairs `(i, i + d/2)` by `pos * theta^(-2i/d)` (the GPU uses the same formula).
pub fn rope(x: &mut [f32], pos: u32, theta: f32) {
    let d = x.len();
    let half = d / 2;
    for i in 0..half {
        let freq = theta.powf(-2.0 * i as f32 / d as f32);
        let ang = pos as f32 * freq;
        let (s, c) = ang.sin_cos();
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = a * s + b * c;
    }
}

impl CpuModel {
    pub fn new(
        w: Arc<CpuWeights>,
        layers: usize,
        seed: u64,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        let cfg = ModelConfig {
            layers,
            ..w.cfg.clone()
        };
        let pages_per_seq = run.max_context.div_ceil(run.page_size);
        let slots = run.batch * pages_per_seq * run.page_size;
        let n = layers * slots * cfg.kv_heads * cfg.head_dim;
        Ok(CpuModel {
            page_table: page_table(run.batch, run.max_context, run.page_size, seed),
            w,
            cfg,
            seed,
            batch: run.batch,
            page_size: run.page_size,
            pages_per_seq,
            k: vec![0.0; n],
            v: vec![0.0; n],
        })
    }

    fn slot(&self, b: usize, logical: usize) -> usize {
        let page = self.page_table[b * self.pages_per_seq + logical / self.page_size] as usize;
        page * self.page_size + logical % self.page_size
    }

    fn kv_index(&self, layer: usize, slot: usize, h: usize) -> usize {
        let slots = self.batch * self.pages_per_seq * self.page_size;
        ((layer * slots + slot) * self.cfg.kv_heads + h) * self.cfg.head_dim
    }

    /// Logits of every row (`batch * t * vocab`).
    pub fn logits(&mut self, f: &Forward) -> Vec<f32> {
        let c = self.cfg.clone();
        let w = Arc::clone(&self.w);
        let rows = self.batch * f.t;
        let mut xs: Vec<Vec<f32>> = f
            .tokens
            .iter()
            .map(|&tok| w.embed[tok as usize * c.d_model..(tok as usize + 1) * c.d_model].to_vec())
            .collect();
        for (l, lw) in w.layers.iter().take(c.layers).enumerate() {
            // Q/K/V of every row first: rows of one call attend to each other's K/V.
            let qs = self.qkv_rows(l, lw, f, &xs);
            for (r, (x, q)) in xs.iter_mut().zip(&qs).enumerate() {
                let attn = self.attend(l, f, r, q);
                let mut o = vec![0.0; c.d_model];
                matvec(&lw.wo, &attn, &mut o);
                for (x, y) in x.iter_mut().zip(&o) {
                    *x += y;
                }
                let h = rmsnorm(x, &lw.mlp_norm, c.norm_eps);
                let mlp = mlp(&lw.mlp, &h, &c);
                for (x, y) in x.iter_mut().zip(&mlp) {
                    *x += y;
                }
            }
        }
        let mut out = vec![0.0; rows * c.vocab];
        for (x, logits) in xs.iter().zip(out.chunks_exact_mut(c.vocab)) {
            let h = rmsnorm(x, &w.final_norm, c.norm_eps);
            matvec(&w.lm_head, &h, logits);
        }
        out
    }

    /// Layer `l`'s projections of every row: RoPE'd K and V go into the cache, the RoPE'd
    /// queries (`heads * head_dim` per row) are returned.
    fn qkv_rows(&mut self, l: usize, lw: &Layer, f: &Forward, xs: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let c = &self.cfg;
        let hd = c.head_dim;
        let mut qs = Vec::with_capacity(xs.len());
        for (r, x) in xs.iter().enumerate() {
            let (b, i) = (r / f.t, r % f.t);
            let h = rmsnorm(x, &lw.attn_norm, c.norm_eps);
            let mut qkv = vec![0.0; c.qkv_dim()];
            matvec(&lw.wqkv, &h, &mut qkv);
            let pos = f.pos[r];
            for head in qkv.chunks_exact_mut(hd).take(c.heads + c.kv_heads) {
                rope(head, pos, c.rope_theta);
            }
            let slot = self.slot(b, f.base[b] as usize + f.off + i);
            for kh in 0..c.kv_heads {
                let at = self.kv_index(l, slot, kh);
                let ko = (c.heads + kh) * hd;
                let vo = (c.heads + c.kv_heads + kh) * hd;
                self.k[at..at + hd].copy_from_slice(&qkv[ko..ko + hd]);
                self.v[at..at + hd].copy_from_slice(&qkv[vo..vo + hd]);
            }
            qkv.truncate(c.heads * hd);
            qs.push(qkv);
        }
        qs
    }

    /// Attention output of row `r` (`heads * head_dim`) over the committed context and the
    /// scratch slots its mask allows, from the cache of layer `l`.
    fn attend(&self, l: usize, f: &Forward, r: usize, q_row: &[f32]) -> Vec<f32> {
        let c = &self.cfg;
        let (hd, g) = (c.head_dim, c.heads / c.kv_heads);
        let scale = 1.0 / (hd as f32).sqrt();
        let (b, i) = (r / f.t, r % f.t);
        let base = f.base[b] as usize;
        let allowed = |s: usize| {
            if f.causal {
                s <= f.off + i
            } else {
                (f.masks[i] >> s) & 1 == 1
            }
        };
        let keys: Vec<usize> = (0..base)
            .chain((0..f.off + f.t).filter(|&s| allowed(s)).map(|s| base + s))
            .map(|j| self.slot(b, j))
            .collect();
        let mut attn = vec![0.0f32; c.heads * hd];
        for h in 0..c.heads {
            let q = &q_row[h * hd..(h + 1) * hd];
            let kh = h / g;
            let scores: Vec<f32> = keys
                .iter()
                .map(|&s| {
                    let k = &self.k[self.kv_index(l, s, kh)..][..hd];
                    q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
                })
                .collect();
            let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f32 = p.iter().sum();
            let out = &mut attn[h * hd..(h + 1) * hd];
            for (&s, &pj) in keys.iter().zip(&p) {
                let v = &self.v[self.kv_index(l, s, kh)..][..hd];
                for (o, vd) in out.iter_mut().zip(v) {
                    *o += pj * vd;
                }
            }
            for o in out.iter_mut() {
                *o /= sum;
            }
        }
        attn
    }

    pub fn commit(&mut self, base: &[u32], paths: &[Vec<u32>]) {
        let (hd, kvh) = (self.cfg.head_dim, self.cfg.kv_heads);
        for (b, path) in paths.iter().enumerate() {
            for (j, &src) in path.iter().enumerate() {
                if src as usize == j {
                    continue;
                }
                let s = self.slot(b, base[b] as usize + src as usize);
                let d = self.slot(b, base[b] as usize + j);
                for l in 0..self.cfg.layers {
                    let (si, di) = (self.kv_index(l, s, 0), self.kv_index(l, d, 0));
                    self.k.copy_within(si..si + kvh * hd, di);
                    self.v.copy_within(si..si + kvh * hd, di);
                }
            }
        }
    }

    pub fn fill_background(&mut self, context: usize) {
        let (hd, kvh) = (self.cfg.head_dim, self.cfg.kv_heads);
        for l in 0..self.cfg.layers {
            let (kk, vk) = (
                background_key(self.seed, l, false),
                background_key(self.seed, l, true),
            );
            for b in 0..self.batch {
                for pos in 0..context {
                    let slot = self.slot(b, pos);
                    for h in 0..kvh {
                        let at = self.kv_index(l, slot, h);
                        for d in 0..hd {
                            let idx = background_index(b, pos, h, kvh, d, hd);
                            self.k[at + d] = bf16_round(uniform(kk, idx));
                            self.v[at + d] = bf16_round(uniform(vk, idx));
                        }
                    }
                }
            }
        }
    }
}

/// The MLP of one row: dense SwiGLU, or the row's top-k experts weighted by their gates.
fn mlp(w: &Mlp, h: &[f32], c: &ModelConfig) -> Vec<f32> {
    match w {
        Mlp::Dense { gate_up, down } => swiglu(gate_up, down, h, c.ffn, c.d_model),
        Mlp::Moe { router, experts } => {
            let mut logits = vec![0.0; c.experts];
            matvec(router, h, &mut logits);
            let (chosen, gates) = moe_gates(&logits, c.top_k);
            let mut acc = vec![0.0; c.d_model];
            for (e, gate) in chosen.iter().zip(gates) {
                let (gu, dn) = &experts[*e as usize];
                let y = swiglu(gu, dn, h, c.ffn, c.d_model);
                for (a, v) in acc.iter_mut().zip(y) {
                    *a += gate * v;
                }
            }
            acc
        }
    }
}

fn swiglu(gate_up: &[f32], down: &[f32], h: &[f32], ffn: usize, d_model: usize) -> Vec<f32> {
    let mut gu = vec![0.0; 2 * ffn];
    matvec(gate_up, h, &mut gu);
    let a: Vec<f32> = (0..ffn).map(|i| silu(gu[i]) * gu[ffn + i]).collect();
    let mut y = vec![0.0; d_model];
    matvec(down, &a, &mut y);
    y
}

/// The experts a token goes to and their weights (softmax over the chosen router logits).
pub fn moe_gates(router_logits: &[f32], k: usize) -> (Vec<u32>, Vec<f32>) {
    let chosen = top_k(router_logits, k);
    let m = chosen
        .iter()
        .map(|&e| router_logits[e as usize])
        .fold(f32::NEG_INFINITY, f32::max);
    let ex: Vec<f32> = chosen
        .iter()
        .map(|&e| (router_logits[e as usize] - m).exp())
        .collect();
    let s: f32 = ex.iter().sum();
    (chosen, ex.into_iter().map(|e| e / s).collect())
}

/// The CPU implementation of [`Backend`]: a target and an optional draft model.
pub struct CpuBackend {
    pub target: CpuModel,
    pub draft: Option<CpuModel>,
}

impl CpuBackend {
    /// Target from `target`; the draft per `run.draft` (self-speculation shares the target's
    /// weights, a small draft gets its own seeded weights, or `draft_weights` when given).
    pub fn new(
        target: &HostWeights,
        draft_weights: Option<&HostWeights>,
        run: &RunConfig,
    ) -> Result<Self, EngineError> {
        let tw = Arc::new(CpuWeights::new(target)?);
        let t = CpuModel::new(Arc::clone(&tw), target.cfg.layers, run.seed, run)?;
        let d = match (run.draft, draft_weights) {
            (_, Some(dw)) => CpuModel::new(
                Arc::new(CpuWeights::new(dw)?),
                dw.cfg.layers,
                run.seed ^ 0xd4a7,
                run,
            )?,
            (crate::config::DraftKind::SelfSpec, None) => {
                CpuModel::new(Arc::clone(&tw), run.draft_layers, run.seed, run)?
            }
            (crate::config::DraftKind::Small, None) => {
                let dcfg = draft_config(&target.cfg, run);
                let dw = HostWeights::seeded(&dcfg, run.seed ^ 0xd4a7);
                CpuModel::new(
                    Arc::new(CpuWeights::new(&dw)?),
                    dcfg.layers,
                    run.seed ^ 0xd4a7,
                    run,
                )?
            }
        };
        Ok(CpuBackend {
            target: t,
            draft: Some(d),
        })
    }

    fn model(&mut self, which: Which) -> Result<&mut CpuModel, EngineError> {
        match which {
            Which::Target => Ok(&mut self.target),
            Which::Draft => self.draft.as_mut().ok_or(EngineError::NoDraft),
        }
    }
}

impl Backend for CpuBackend {
    fn forward(&mut self, which: Which, fwd: &Forward, k: usize) -> Result<Vec<u32>, EngineError> {
        let m = self.model(which)?;
        let vocab = m.cfg.vocab;
        let logits = m.logits(fwd);
        Ok(logits
            .chunks_exact(vocab)
            .flat_map(|row| top_k(row, k))
            .collect())
    }

    fn commit(
        &mut self,
        which: Which,
        base: &[u32],
        paths: &[Vec<u32>],
    ) -> Result<(), EngineError> {
        self.model(which)?.commit(base, paths);
        Ok(())
    }

    fn fill_background(&mut self, which: Which, context: usize) -> Result<(), EngineError> {
        self.model(which)?.fill_background(context);
        Ok(())
    }

    fn has_draft(&self) -> bool {
        self.draft.is_some()
    }
}
