//! The decoding loops, independent of the backend: plain greedy decoding and speculative
//! decoding with a chain (`width` 1) or a tree (`width` branches of `depth` tokens).
//!
//! Per step: the draft model catches up on the tokens committed since its last step and
//! proposes the tree (`draft`), the target scores the root and every candidate in one pass with
//! a tree mask (`verify`), the longest path that matches the target's own greedy choice is
//! accepted and its K/V moved into place (`accept`). Each phase is an NVTX range whose payload
//! is the step number.

use std::time::Instant;

use serde::Serialize;

use crate::config::RunConfig;
use crate::weights::mix64;
use crate::{Backend, EngineError, Forward, Which};

/// Seeded prompt tokens of sequence `b`.
pub fn prompt(seed: u64, b: usize, len: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|i| {
            (mix64(seed ^ 0x7072_6f6d_7074 ^ ((b as u64) << 32) ^ i as u64) % vocab as u64) as u32
        })
        .collect()
}

fn phase(name: &'static std::ffi::CStr, step: u64) -> nvtx::LocalRange {
    nvtx::LocalRange::new(
        nvtx::EventAttributes::builder()
            .message(name)
            .payload(step)
            .build(),
    )
}

/// Timings and counts of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub prefill_s: f64,
    pub draft_s: f64,
    pub verify_s: f64,
    pub accept_s: f64,
    pub steps: usize,
    /// Tokens generated per sequence.
    pub new_tokens: usize,
    /// Wall time of each decode step (draft + verify + accept), seconds.
    pub step_s: Vec<f64>,
    /// Tokens committed per step and sequence (accepted candidates + the target's own token).
    pub committed: Vec<usize>,
}

impl Stats {
    pub fn decode_s(&self) -> f64 {
        self.draft_s + self.verify_s + self.accept_s
    }
    pub fn mean_committed(&self) -> f64 {
        if self.committed.is_empty() {
            0.0
        } else {
            self.committed.iter().sum::<usize>() as f64 / self.committed.len() as f64
        }
    }
    pub fn median_step_s(&self) -> f64 {
        let mut v = self.step_s.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Output of a run: the generated tokens of every sequence and the statistics.
#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub tokens: Vec<Vec<u32>>,
    pub stats: Stats,
}

fn causal(t: usize, off: usize, base: Vec<u32>, tokens: Vec<u32>, pos: Vec<u32>) -> Forward {
    Forward {
        t,
        off,
        causal: true,
        base,
        tokens,
        pos,
        masks: Vec::new(),
    }
}

/// Background fill and prompt prefill of the target (and the draft when `draft`); returns the
/// first generated token of each sequence.
fn prefill<B: Backend>(
    be: &mut B,
    run: &RunConfig,
    vocab: usize,
    draft: bool,
    stats: &mut Stats,
) -> Result<(Vec<Vec<u32>>, Vec<u32>), EngineError> {
    let start = Instant::now();
    let _r = phase(c"prefill", 0);
    let (bsz, p, c) = (run.batch, run.prompt_len, run.context);
    let prompts: Vec<Vec<u32>> = (0..bsz).map(|b| prompt(run.seed, b, p, vocab)).collect();
    let tokens: Vec<u32> = prompts.iter().flatten().copied().collect();
    let pos: Vec<u32> = (0..bsz)
        .flat_map(|_| (0..p).map(|i| (c + i) as u32))
        .collect();
    let base = vec![c as u32; bsz];
    let mut models = vec![Which::Target];
    if draft {
        models.push(Which::Draft);
    }
    let mut first = Vec::new();
    for m in models {
        if c > 0 {
            be.fill_background(m, c)?;
        }
        let top = be.forward(
            m,
            &causal(p, 0, base.clone(), tokens.clone(), pos.clone()),
            1,
        )?;
        if m == Which::Target {
            first = (0..bsz).map(|b| top[b * p + p - 1]).collect();
        }
    }
    be.sync()?;
    stats.prefill_s = start.elapsed().as_secs_f64();
    Ok((prompts, first))
}

/// Plain greedy decoding with the target alone: the reference output.
pub fn greedy<B: Backend>(
    be: &mut B,
    run: &RunConfig,
    vocab: usize,
) -> Result<Output, EngineError> {
    let mut stats = Stats::default();
    let (prompts, first) = prefill(be, run, vocab, false, &mut stats)?;
    let bsz = run.batch;
    let mut out: Vec<Vec<u32>> = first.iter().map(|&t| vec![t]).collect();
    // Tokens in the target cache: background + prompt; the last generated token is pending.
    let mut len = vec![(run.context + prompts[0].len()) as u32; bsz];
    let mut step = 0u64;
    while out.iter().any(|s| s.len() < run.new_tokens) {
        let start = Instant::now();
        let top = {
            let _r = phase(c"verify", step);
            let f = Forward {
                t: 1,
                off: 0,
                causal: false,
                base: len.clone(),
                tokens: out.iter().map(|s| s[s.len() - 1]).collect(),
                pos: len.clone(),
                masks: vec![1],
            };
            let top = be.forward(Which::Target, &f, 1)?;
            be.sync()?;
            top
        };
        for b in 0..bsz {
            out[b].push(top[b]);
            len[b] += 1;
        }
        let dt = start.elapsed().as_secs_f64();
        stats.verify_s += dt;
        stats.step_s.push(dt);
        stats.committed.extend(std::iter::repeat_n(1, bsz));
        stats.steps += 1;
        step += 1;
    }
    for s in &mut out {
        s.truncate(run.new_tokens);
    }
    stats.new_tokens = run.new_tokens;
    Ok(Output { tokens: out, stats })
}

/// Scratch slot of tree node (depth `d` >= 1, branch `j`) in the verify pass (root is slot 0).
fn verify_slot(width: usize, d: usize, j: usize) -> usize {
    1 + (d - 1) * width + j
}

/// Tree masks of the verify pass: the root, and each node sees the root and its own chain.
pub fn verify_masks(width: usize, depth: usize) -> Vec<u64> {
    let mut masks = vec![0u64; 1 + width * depth];
    masks[0] = 1;
    for d in 1..=depth {
        for j in 0..width {
            let mut m = 1u64;
            for dd in 1..=d {
                m |= 1u64 << verify_slot(width, dd, j);
            }
            masks[verify_slot(width, d, j)] = m;
        }
    }
    masks
}

/// Speculative decoding: output identical to [`greedy`], fewer target passes.
pub fn speculative<B: Backend>(
    be: &mut B,
    run: &RunConfig,
    vocab: usize,
) -> Result<Output, EngineError> {
    let mut stats = Stats::default();
    let (prompts, first) = prefill(be, run, vocab, true, &mut stats)?;
    let committed = (run.context + prompts[0].len()) as u32;
    let mut st = SpecState {
        run,
        // Committed tokens of each sequence after the prompt (the last one is pending in both
        // caches).
        out: first.iter().map(|&t| vec![t]).collect(),
        prompts,
        tlen: vec![committed; run.batch],
        dlen: vec![committed; run.batch],
    };
    let mut step = 0u64;
    while st.out.iter().any(|s| s.len() < run.new_tokens) {
        let t0 = Instant::now();
        let tree = st.draft(be, step)?;
        let t1 = Instant::now();
        let top = st.verify(be, &tree, step)?;
        let t2 = Instant::now();
        st.accept(be, &tree, &top, &mut stats.committed, step)?;
        let t3 = Instant::now();
        stats.draft_s += (t1 - t0).as_secs_f64();
        stats.verify_s += (t2 - t1).as_secs_f64();
        stats.accept_s += (t3 - t2).as_secs_f64();
        stats.step_s.push((t3 - t0).as_secs_f64());
        stats.steps += 1;
        step += 1;
    }
    let mut out = st.out;
    for s in &mut out {
        s.truncate(run.new_tokens);
    }
    stats.new_tokens = run.new_tokens;
    Ok(Output { tokens: out, stats })
}

/// The state of a speculative run between steps.
struct SpecState<'a> {
    run: &'a RunConfig,
    prompts: Vec<Vec<u32>>,
    out: Vec<Vec<u32>>,
    /// Tokens in the target's cache, per sequence.
    tlen: Vec<u32>,
    /// Tokens in the draft's cache, per sequence.
    dlen: Vec<u32>,
}

/// `tree[b][d-1][j]`: the token of node (depth `d`, branch `j`) of sequence `b`.
type Tree = Vec<Vec<Vec<u32>>>;

impl SpecState<'_> {
    /// The `draft` phase: catch up on committed tokens, then grow `width` greedy chains.
    fn draft<B: Backend>(&mut self, be: &mut B, step: u64) -> Result<Tree, EngineError> {
        let _r = phase(c"draft", step);
        let (bsz, w, c) = (self.run.batch, self.run.width, self.run.context);
        let p = self.prompts[0].len();
        let total: Vec<u32> = self.out.iter().map(|s| (c + p + s.len()) as u32).collect();
        let pend = (0..bsz)
            .map(|b| (total[b] - self.dlen[b]) as usize)
            .max()
            .unwrap_or(1);
        let base: Vec<u32> = total.iter().map(|&t| t - pend as u32).collect();
        let mut tokens = Vec::with_capacity(bsz * pend);
        let mut pos = Vec::with_capacity(bsz * pend);
        for (b, &start) in base.iter().enumerate() {
            for i in 0..pend {
                // Absolute position `abs`; re-processed tokens may reach into the prompt.
                let abs = start as usize + i;
                let idx = abs - c;
                tokens.push(if idx < p {
                    self.prompts[b][idx]
                } else {
                    self.out[b][idx - p]
                });
                pos.push(abs as u32);
            }
        }
        let first = causal(pend, 0, base.clone(), tokens, pos);
        // Depth-d nodes, fed the depth-(d-1) ones: each gets its greedy successor.
        let levels: Vec<Forward> = (1..self.run.depth)
            .map(|d| draft_level(&base, pend, w, d))
            .collect();
        let outs = be.draft_levels(Which::Draft, &first, w, &levels)?;
        self.dlen.clone_from(&total);
        let tree: Tree = (0..bsz)
            .map(|b| {
                outs.iter()
                    .map(|o| o[b * w..(b + 1) * w].to_vec())
                    .collect()
            })
            .collect();
        be.sync()?;
        Ok(tree)
    }

    /// The `verify` phase: the root (pending token) and every node in one target pass.
    fn verify<B: Backend>(
        &self,
        be: &mut B,
        tree: &Tree,
        step: u64,
    ) -> Result<Vec<u32>, EngineError> {
        let _r = phase(c"verify", step);
        let (bsz, w, depth) = (self.run.batch, self.run.width, self.run.depth);
        let n = self.run.verify_tokens();
        let masks = verify_masks(w, depth);
        let mut tokens = Vec::with_capacity(bsz * n);
        let mut pos = Vec::with_capacity(bsz * n);
        for ((out, &len), nodes) in self.out.iter().zip(&self.tlen).zip(tree) {
            tokens.push(out[out.len() - 1]);
            pos.push(len);
            for (d, level) in (1..=depth).zip(nodes) {
                for &tok in level {
                    tokens.push(tok);
                    pos.push(len + d as u32);
                }
            }
        }
        let f = Forward {
            t: n,
            off: 0,
            causal: false,
            base: self.tlen.clone(),
            tokens,
            pos,
            masks,
        };
        let top = be.forward(Which::Target, &f, 1)?;
        be.sync()?;
        Ok(top)
    }

    /// The `accept` phase: the longest path agreeing with the target's greedy choices, plus
    /// the target's own token; the accepted K/V move into place.
    fn accept<B: Backend>(
        &mut self,
        be: &mut B,
        tree: &Tree,
        top: &[u32],
        committed: &mut Vec<usize>,
        step: u64,
    ) -> Result<(), EngineError> {
        let _r = phase(c"accept", step);
        let (w, depth) = (self.run.width, self.run.depth);
        let n = self.run.verify_tokens();
        let mut paths = Vec::with_capacity(self.run.batch);
        for (b, out) in self.out.iter_mut().enumerate() {
            let g = |slot: usize| top[b * n + slot];
            let mut path = vec![0u32];
            let mut branch: Option<usize> = None;
            let mut d = 0;
            let mut next = g(0);
            while d < depth {
                let hit = match branch {
                    None => (0..w).find(|&j| tree[b][0][j] == next),
                    Some(j) => (tree[b][d][j] == next).then_some(j),
                };
                let Some(j) = hit else { break };
                out.push(next);
                d += 1;
                branch = Some(j);
                let slot = verify_slot(w, d, j);
                path.push(slot as u32);
                next = g(slot);
            }
            out.push(next);
            committed.push(path.len());
            paths.push(path);
        }
        be.commit(Which::Target, &self.tlen, &paths)?;
        for (len, path) in self.tlen.iter_mut().zip(&paths) {
            *len += path.len() as u32;
        }
        be.sync()
    }
}

/// The draft pass that feeds the depth-`d` nodes of every chain (after `pend` catch-up tokens),
/// each attending to the catch-up tokens and its own chain. Its tokens (the depth-`d` nodes) are
/// left to [`Backend::draft_levels`], which takes them from the pass before.
fn draft_level(base: &[u32], pend: usize, w: usize, d: usize) -> Forward {
    let off = pend + (d - 1) * w;
    let masks: Vec<u64> = (0..w)
        .map(|j| {
            let mut m = (1u64 << pend) - 1;
            for dd in 1..=d {
                m |= 1u64 << (pend + (dd - 1) * w + j);
            }
            m
        })
        .collect();
    Forward {
        t: w,
        off,
        causal: false,
        base: base.to_vec(),
        tokens: vec![0; base.len() * w],
        pos: base
            .iter()
            .flat_map(|&bb| (0..w).map(move |_| bb + (pend - 1 + d) as u32))
            .collect(),
        masks,
    }
}
