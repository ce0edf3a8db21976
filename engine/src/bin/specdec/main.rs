//! `specdec`: run speculative decoding on the GPU (or the CPU reference) and report per-phase
//! times, tokens/s and mean committed length; `specdec check` compares the GPU with the CPU
//! reference; `specdec save-weights` writes seeded weights as safetensors.
//!
//! The binary is the command line: `args` (options and the spellings of choices), `report`
//! (text and JSON reports), and here the runs themselves and the one-line error message. The
//! engine is the `specdec` library.

mod args;
mod report;

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use specdec::config::{ModelConfig, RunConfig, VerifyAttn};
use specdec::cpu::CpuBackend;
use specdec::gpu::GpuBackend;
use specdec::spec::{Output, greedy, speculative, verify_masks};
use specdec::weights::HostWeights;
use specdec::{Backend, ConfigError, EngineError, Forward, Which};

use crate::args::{Args, BackendKind, Cli, Cmd, Mode, OnOff, cli_name, run_config};
use crate::report::{Bench, Report, print_checks, print_text};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("specdec: error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// One line: the error, each cause after a colon (a cause is left out when the message before
/// already ends with it), then the engine's hint when it has one.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut prev = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out.push_str(&text);
        } else if !prev.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        prev = text;
    }
    if let Some(hint) = e.downcast_ref::<EngineError>().and_then(EngineError::hint) {
        out.push_str("; ");
        out.push_str(&hint);
    }
    out.replace('\n', " ")
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Some(Cmd::Check { json }) => check(json),
        Some(Cmd::SaveWeights { out, model, seed }) => {
            let cfg = model.resolve().map_err(EngineError::from)?;
            HostWeights::seeded(&cfg, seed)
                .save(&out)
                .map_err(EngineError::from)?;
            println!("wrote {} ({} parameters)", out.display(), cfg.params());
            Ok(())
        }
        None => run(cli.args),
    }
}

/// The target's configuration and weights (from `--weights`, else seeded later), and the
/// draft's weights when `--draft-weights` is given.
type Loaded = (ModelConfig, Option<HostWeights>, Option<HostWeights>);

fn load(a: &Args) -> Result<Loaded, EngineError> {
    let target_w = match &a.weights {
        Some(p) => Some(HostWeights::load(p, Some(&a.model.resolve()?))?),
        None => None,
    };
    let cfg = match &target_w {
        Some(w) => w.cfg.clone(),
        None => a.model.resolve()?,
    };
    let draft_w = match &a.draft_weights {
        Some(p) => Some(HostWeights::load(p, None)?),
        None => None,
    };
    if let Some(dw) = &draft_w
        && dw.cfg.vocab != cfg.vocab
    {
        return Err(ConfigError::DraftVocab {
            draft: dw.cfg.vocab,
            target: cfg.vocab,
        }
        .into());
    }
    Ok((cfg, target_w, draft_w))
}

/// What a decoding run produced, whichever backend ran it.
struct Ran {
    out: Output,
    device: String,
    bench: Option<Bench>,
    sized_gib: Option<f64>,
}

fn run(a: Args) -> anyhow::Result<()> {
    if a.bench && a.backend == BackendKind::Cpu {
        bail!(
            "--bench times GPU kernels with CUDA events and does not apply to --backend cpu: \
             drop --bench, or run on the GPU (--backend gpu)"
        );
    }
    let (cfg, target_w, draft_w) = load(&a)?;
    let draft_file_layers = draft_w.as_ref().map(|w| w.cfg.layers);
    let run = run_config(&a, &cfg, draft_file_layers).map_err(EngineError::from)?;
    let ran = match a.backend {
        BackendKind::Cpu => {
            let tw = target_w.unwrap_or_else(|| HostWeights::seeded(&cfg, run.seed));
            let mut be = CpuBackend::new(&tw, draft_w.as_ref(), &run)?;
            Ran {
                out: decode(&mut be, &run, &cfg, a.mode)?,
                device: "CPU (f32 reference)".to_string(),
                bench: None,
                sized_gib: None,
            }
        }
        BackendKind::Gpu => run_gpu(&a, &cfg, target_w.as_ref(), draft_w.as_ref(), &run)?,
    };
    let s = &ran.out.stats;
    let report = Report {
        device: ran.device,
        backend: cli_name(a.backend),
        mode: match a.mode {
            Mode::Spec => "speculative",
            Mode::Greedy => "greedy",
        },
        model: cfg,
        run,
        prefill_ms: s.prefill_s * 1e3,
        draft_ms: s.draft_s * 1e3,
        verify_ms: s.verify_s * 1e3,
        accept_ms: s.accept_s * 1e3,
        steps: s.steps,
        median_step_ms: s.median_step_s() * 1e3,
        tokens_per_s: (ran.out.tokens.len() * s.new_tokens) as f64 / s.decode_s().max(1e-12),
        mean_committed_per_step: s.mean_committed(),
        bench: ran.bench,
        gpu_mem_sized_gib: ran.sized_gib,
    };
    if a.json {
        let text =
            serde_json::to_string_pretty(&report).context("cannot encode the report as JSON")?;
        println!("{text}");
    } else {
        print_text(&report, a.mode);
    }
    Ok(())
}

fn run_gpu(
    a: &Args,
    cfg: &ModelConfig,
    target_w: Option<&HostWeights>,
    draft_w: Option<&HostWeights>,
    run: &RunConfig,
) -> Result<Ran, EngineError> {
    let mut be = GpuBackend::new(cfg, target_w, draft_w, run)?;
    if a.warmup == OnOff::On {
        // Same shapes as the timed run: every graph is captured here, not in the timing.
        decode(&mut be, run, cfg, a.mode)?;
    }
    let out = decode(&mut be, run, cfg, a.mode)?;
    let bench = if a.bench {
        Some(bench(&mut be, run)?)
    } else {
        None
    };
    let sized = be.needed_bytes as f64 / (1u64 << 30) as f64;
    Ok(Ran {
        out,
        device: be.dev.name.clone(),
        bench,
        sized_gib: Some(sized),
    })
}

fn decode<B: Backend>(
    be: &mut B,
    run: &RunConfig,
    cfg: &ModelConfig,
    mode: Mode,
) -> Result<Output, EngineError> {
    match mode {
        Mode::Spec => speculative(be, run, cfg.vocab),
        Mode::Greedy => greedy(be, run, cfg.vocab),
    }
}

/// A verify-shaped pass at the end of the run's context (for the kernel timings).
fn verify_pass(run: &RunConfig) -> Forward {
    let n = run.verify_tokens();
    let base = (run.context + run.prompt_len) as u32;
    Forward {
        t: n,
        off: 0,
        causal: false,
        base: vec![base; run.batch],
        tokens: vec![0; run.batch * n],
        pos: vec![base; run.batch * n],
        masks: verify_masks(run.width, run.depth),
    }
}

fn bench(be: &mut GpuBackend, run: &RunConfig) -> Result<Bench, EngineError> {
    let prefill_gemm = be.bench_gemm(run.batch * run.prompt_len, 20)?;
    let f = verify_pass(run);
    let mut attention = vec![be.bench_attention(&f, VerifyAttn::SplitKv, 20)?];
    attention.push(be.bench_attention(&f, VerifyAttn::Scattered, 3)?);
    // Benchmark knob: `SPECDEC_BENCH_SPLIT_VARIANTS=s3` also times those split-KV variants.
    if let Ok(list) = std::env::var("SPECDEC_BENCH_SPLIT_VARIANTS") {
        for v in list.split(',').filter(|v| !v.is_empty()) {
            let prev = be.set_split_variant(v);
            let r = be.bench_attention(&f, VerifyAttn::SplitKv, 20);
            be.set_split_variant(&prev);
            attention.push(r?);
        }
    }
    let verify_pass_gpu_ms = be.time_forward(Which::Target, &f, 10)?;
    let one = Forward {
        t: 1,
        off: 0,
        causal: false,
        base: f.base.clone(),
        tokens: vec![0; run.batch],
        pos: f.base.clone(),
        masks: vec![1],
    };
    let draft_pass_gpu_ms = be.time_forward(Which::Draft, &one, 10)?;
    Ok(Bench {
        prefill_gemm,
        attention,
        verify_pass_gpu_ms,
        draft_pass_gpu_ms,
    })
}

/// `specdec check`: print the results; an error when any case fails.
fn check(json: bool) -> anyhow::Result<()> {
    let results = specdec::check::run_cases()?;
    if json {
        let text =
            serde_json::to_string_pretty(&results).context("cannot encode the results as JSON")?;
        println!("{text}");
    } else {
        print_checks(&results);
    }
    let failed = results.iter().filter(|r| !r.pass).count();
    if failed > 0 {
        bail!(
            "{failed} of {} GPU checks failed (tolerance {:e} on logits, exact token equality)",
            results.len(),
            specdec::check::TOLERANCE
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cause the message already ends with is not repeated; the hint comes last.
    #[test]
    fn one_line_message_with_cause_and_hint() {
        let e = EngineError::from(specdec::WeightsError::Read {
            path: "/x.safetensors".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        });
        let m = message(&anyhow::Error::from(e));
        assert_eq!(
            m,
            "cannot read weights file /x.safetensors: gone; write one with `specdec save-weights \
             --out /x.safetensors` or drop --weights for seeded weights"
        );
        let inner = std::io::Error::other("inner");
        let outer = anyhow::Error::from(inner).context("outer: inner");
        assert_eq!(message(&outer), "outer: inner");
    }
}
