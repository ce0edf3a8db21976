//! GPU correctness checks against the CPU reference (run by `specdec check`, which prints them,
//! and the ignored GPU tests): logits of a prefill pass and of a tree-verify pass within bf16
//! tolerance, and speculative output equal to plain greedy output on the GPU, for several knob
//! settings.

use std::rc::Rc;

use serde::Serialize;

use crate::config::{DraftKind, ModelConfig, RunConfig, VerifyAttn};
use crate::cpu::CpuBackend;
use crate::gpu::{Dev, GpuBackend};
use crate::spec::{greedy, prompt, speculative, verify_masks};
use crate::weights::HostWeights;
use crate::{Backend, EngineError, Forward, Which};

/// Largest accepted `|gpu - cpu| / |cpu|` over all logits of a pass.
pub const TOLERANCE: f64 = 1e-2;

#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub prefill_rel_err: f64,
    pub verify_rel_err: f64,
    pub spec_equals_greedy: bool,
    /// Leading tokens where the GPU greedy output equals the CPU greedy output (bf16 vs f32
    /// may part ways at a near tie; informational).
    pub gpu_cpu_greedy_agree: usize,
    pub new_tokens: usize,
    pub mean_committed: f64,
    pub pass: bool,
}

struct Case {
    name: &'static str,
    model: ModelConfig,
    run: RunConfig,
}

fn cases() -> Result<Vec<Case>, EngineError> {
    let small = ModelConfig::preset("small")?;
    let moe = ModelConfig {
        experts: 4,
        top_k: 2,
        ..small.clone()
    };
    let base = RunConfig {
        batch: 2,
        context: 100,
        prompt_len: 12,
        new_tokens: 24,
        max_context: 0,
        page_size: 16,
        depth: 3,
        width: 1,
        draft: DraftKind::SelfSpec,
        draft_layers: 1,
        verify_attn: VerifyAttn::SplitKv,
        graphs: true,
        seed: 11,
    };
    let mk = |name, model: &ModelConfig, run: RunConfig| {
        let mut run = run;
        run.max_context = run.needed_context();
        Case {
            name,
            model: model.clone(),
            run,
        }
    };
    Ok(vec![
        mk("chain, page 16, split-kv, graphs on", &small, base.clone()),
        mk(
            "tree 2x3, page 1, scattered, graphs off",
            &small,
            RunConfig {
                page_size: 1,
                width: 2,
                verify_attn: VerifyAttn::Scattered,
                graphs: false,
                ..base.clone()
            },
        ),
        mk(
            "tree 3x2, page 64, split-kv, graphs on",
            &small,
            RunConfig {
                page_size: 64,
                width: 3,
                depth: 2,
                ..base.clone()
            },
        ),
        mk(
            "MoE 4 experts top-2, tree 2x2, graphs on",
            &moe,
            RunConfig {
                width: 2,
                depth: 2,
                ..base.clone()
            },
        ),
        mk(
            "head-dim 128 MHA, chain of 4, 1k context",
            &ModelConfig {
                heads: 2,
                kv_heads: 2,
                head_dim: 128,
                ..small.clone()
            },
            RunConfig {
                depth: 4,
                context: 1000,
                ..base.clone()
            },
        ),
        mk(
            "small draft model, chain of 4, batch 3",
            &small,
            RunConfig {
                draft: DraftKind::Small,
                depth: 4,
                batch: 3,
                ..base.clone()
            },
        ),
    ])
}

fn rel_err(gpu: &[f32], cpu: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, c) in gpu.iter().zip(cpu) {
        let d = f64::from(*g) - f64::from(*c);
        num += d * d;
        den += f64::from(*c) * f64::from(*c);
    }
    if gpu.len() != cpu.len() || gpu.iter().any(|v| !v.is_finite()) {
        return f64::INFINITY;
    }
    (num / den.max(1e-30)).sqrt()
}

fn run_case(dev: &Rc<Dev>, case: &Case) -> Result<CaseResult, EngineError> {
    let (m, r) = (&case.model, &case.run);
    r.validate(m)?;
    let host = HostWeights::seeded(m, r.seed);
    // Logits of a prefill pass, then of a tree-verify pass on top of it.
    let mut cpu = CpuBackend::new(&host, None, r)?;
    let mut gpu = GpuBackend::with_dev(Rc::clone(dev), m, None, None, r)?;
    cpu.fill_background(Which::Target, r.context)?;
    gpu.fill_background(Which::Target, r.context)?;
    let p = r.prompt_len;
    let tokens: Vec<u32> = (0..r.batch)
        .flat_map(|b| prompt(r.seed, b, p, m.vocab))
        .collect();
    let prefill = Forward {
        t: p,
        off: 0,
        causal: true,
        base: vec![r.context as u32; r.batch],
        tokens: tokens.clone(),
        pos: (0..r.batch)
            .flat_map(|_| (0..p).map(|i| (r.context + i) as u32))
            .collect(),
        masks: Vec::new(),
    };
    let prefill_rel_err = rel_err(
        &gpu.logits(Which::Target, &prefill)?,
        &cpu.target.logits(&prefill),
    );
    let n = r.verify_tokens();
    let base = (r.context + p) as u32;
    let verify = Forward {
        t: n,
        off: 0,
        causal: false,
        base: vec![base; r.batch],
        tokens: (0..r.batch * n).map(|i| tokens[i % tokens.len()]).collect(),
        pos: (0..r.batch)
            .flat_map(|_| {
                (0..n).map(move |s| {
                    base + if s == 0 {
                        0
                    } else {
                        ((s - 1) / r.width + 1) as u32
                    }
                })
            })
            .collect(),
        masks: verify_masks(r.width, r.depth),
    };
    let verify_rel_err = rel_err(
        &gpu.logits(Which::Target, &verify)?,
        &cpu.target.logits(&verify),
    );
    drop(gpu);
    // Decoding: speculative == greedy on the GPU.
    let want = greedy(
        &mut GpuBackend::with_dev(Rc::clone(dev), m, None, None, r)?,
        r,
        m.vocab,
    )?;
    let got = speculative(
        &mut GpuBackend::with_dev(Rc::clone(dev), m, None, None, r)?,
        r,
        m.vocab,
    )?;
    let cpu_greedy = greedy(&mut CpuBackend::new(&host, None, r)?, r, m.vocab)?;
    let agree = want.tokens[0]
        .iter()
        .zip(&cpu_greedy.tokens[0])
        .take_while(|(a, b)| a == b)
        .count();
    let equal = got.tokens == want.tokens;
    Ok(CaseResult {
        name: case.name.to_string(),
        prefill_rel_err,
        verify_rel_err,
        spec_equals_greedy: equal,
        gpu_cpu_greedy_agree: agree,
        new_tokens: r.new_tokens,
        mean_committed: got.stats.mean_committed(),
        pass: equal && prefill_rel_err < TOLERANCE && verify_rel_err < TOLERANCE,
    })
}

/// Run every case on the GPU.
pub fn run_cases() -> Result<Vec<CaseResult>, EngineError> {
    let dev = Rc::new(Dev::new()?);
    cases()?.iter().map(|c| run_case(&dev, c)).collect()
}
