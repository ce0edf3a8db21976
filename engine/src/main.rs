//! `specdec`: run speculative decoding on the GPU (or the CPU reference) and report per-phase
//! times, tokens/s and mean committed length; `specdec check` compares the GPU with the CPU
//! reference; `specdec save-weights` writes seeded weights as safetensors.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use specdec::config::{DraftKind, ModelConfig, RunConfig, VerifyAttn};
use specdec::cpu::CpuBackend;
use specdec::spec::{Output, greedy, speculative, verify_masks};
use specdec::weights::HostWeights;
use specdec::{Backend, EngineError, Forward};

#[derive(Parser, Debug)]
#[command(
    name = "specdec",
    version,
    about = "Speculative-decoding engine: a real GPU workload with NVTX phases"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    args: Args,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Compare GPU logits with the f32 CPU reference and check speculative == greedy on the GPU.
    Check {
        #[arg(long)]
        json: bool,
    },
    /// Write seeded weights of the chosen model as a safetensors file.
    SaveWeights {
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct ModelArgs {
    /// Size preset: tiny, small, 0.5b, 7b-8l, 7b, 8b-gqa-8l.
    #[arg(long, default_value = "7b-8l")]
    preset: String,
    /// Model sizes as JSON (overrides --preset).
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    layers: Option<usize>,
    #[arg(long)]
    experts: Option<usize>,
    #[arg(long)]
    top_k: Option<usize>,
}

impl ModelArgs {
    fn resolve(&self) -> Result<ModelConfig, EngineError> {
        let mut cfg = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    EngineError::Config(format!("cannot read --config {}: {e}", p.display()))
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    EngineError::Config(format!(
                        "--config {} is not a valid model configuration: {e}",
                        p.display()
                    ))
                })?
            }
            None => ModelConfig::preset(&self.preset)?,
        };
        if let Some(l) = self.layers {
            cfg.layers = l;
        }
        if let Some(e) = self.experts {
            cfg.experts = e;
        }
        if let Some(k) = self.top_k {
            cfg.top_k = k;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum OnOff {
    On,
    Off,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum BackendKind {
    Gpu,
    Cpu,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Spec,
    Greedy,
}

#[derive(clap::Args, Debug)]
struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Target weights (safetensors); seeded weights when absent.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Draft weights (safetensors) for --draft small.
    #[arg(long)]
    draft_weights: Option<PathBuf>,
    /// Tokens of seeded background context in the KV cache before the prompt.
    #[arg(long, default_value_t = 4096)]
    context: usize,
    /// Largest KV length per sequence (default: what the run needs).
    #[arg(long)]
    max_context: Option<usize>,
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    #[arg(long, default_value_t = 1)]
    batch: usize,
    #[arg(long, default_value_t = 16)]
    page_size: usize,
    /// Draft tokens per chain.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Chains in the tree (1 = a chain).
    #[arg(long, default_value_t = 1)]
    width: usize,
    #[arg(long, value_enum, default_value = "self-spec")]
    draft: DraftArg,
    #[arg(long, default_value_t = 2)]
    draft_layers: usize,
    #[arg(long, value_enum, default_value = "split-kv")]
    verify_attn: AttnArg,
    #[arg(long, value_enum, default_value = "on")]
    graphs: OnOff,
    #[arg(long, value_enum, default_value = "gpu")]
    backend: BackendKind,
    /// Decode once untimed first (compiles graphs, warms cuBLAS), then the timed run (GPU only).
    #[arg(long, value_enum, default_value = "on")]
    warmup: OnOff,
    #[arg(long, value_enum, default_value = "spec")]
    mode: Mode,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also time the prefill matrix products and the decode attention kernels (GPU events).
    #[arg(long)]
    bench: bool,
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum DraftArg {
    SelfSpec,
    Small,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum AttnArg {
    Scattered,
    SplitKv,
}

#[derive(Serialize)]
struct Report {
    device: String,
    backend: &'static str,
    mode: &'static str,
    model: ModelConfig,
    run: RunConfig,
    prefill_ms: f64,
    draft_ms: f64,
    verify_ms: f64,
    accept_ms: f64,
    steps: usize,
    median_step_ms: f64,
    tokens_per_s: f64,
    mean_committed_per_step: f64,
    bench: Option<Bench>,
    gpu_mem_sized_gib: Option<f64>,
}

#[derive(Serialize)]
struct Bench {
    prefill_gemm: specdec::gpu::GemmBench,
    attention: Vec<specdec::gpu::AttnBench>,
    /// Event-to-event time of one verify pass enqueued without a graph: the GPU's work plus any
    /// gaps where it waited for the host to launch the next kernel.
    verify_pass_gpu_ms: f64,
    /// The same for one single-token draft pass.
    draft_pass_gpu_ms: f64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("specdec: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> Result<(), EngineError> {
    match cli.cmd {
        Some(Cmd::Check { json }) => specdec::check::run(json),
        Some(Cmd::SaveWeights { out, model, seed }) => {
            let cfg = model.resolve()?;
            HostWeights::seeded(&cfg, seed).save(&out)?;
            println!("wrote {} ({} parameters)", out.display(), cfg.params());
            Ok(())
        }
        None => run(cli.args),
    }
}

fn run(a: Args) -> Result<(), EngineError> {
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
        return Err(EngineError::Weights(format!(
            "the draft's vocabulary ({}) differs from the target's ({})",
            dw.cfg.vocab, cfg.vocab
        )));
    }
    let mut run = RunConfig {
        batch: a.batch,
        context: a.context,
        prompt_len: a.prompt_len,
        new_tokens: a.new_tokens,
        max_context: 0,
        page_size: a.page_size,
        depth: a.depth,
        width: a.width,
        draft: match a.draft {
            DraftArg::SelfSpec => DraftKind::SelfSpec,
            DraftArg::Small => DraftKind::Small,
        },
        draft_layers: a.draft_layers,
        verify_attn: match a.verify_attn {
            AttnArg::Scattered => VerifyAttn::Scattered,
            AttnArg::SplitKv => VerifyAttn::SplitKv,
        },
        graphs: a.graphs == OnOff::On,
        seed: a.seed,
    };
    run.max_context = a.max_context.unwrap_or(run.needed_context());
    run.validate(&cfg)?;

    let (out, device, bench, sized) = match a.backend {
        BackendKind::Cpu => {
            let tw = match target_w {
                Some(w) => w,
                None => HostWeights::seeded(&cfg, run.seed),
            };
            let mut be = CpuBackend::new(&tw, draft_w.as_ref(), &run)?;
            (
                decode(&mut be, &run, &cfg, a.mode)?,
                "CPU (f32 reference)".to_string(),
                None,
                None,
            )
        }
        BackendKind::Gpu => {
            let mut be =
                specdec::gpu::GpuBackend::new(&cfg, target_w.as_ref(), draft_w.as_ref(), &run)?;
            if a.warmup == OnOff::On {
                // Same shapes as the timed run: every graph is captured here, not in the timing.
                decode(&mut be, &run, &cfg, a.mode)?;
            }
            let out = decode(&mut be, &run, &cfg, a.mode)?;
            let bench = if a.bench {
                Some(bench(&mut be, &run)?)
            } else {
                None
            };
            let sized = be.needed_bytes as f64 / (1u64 << 30) as f64;
            (out, be.dev.name.clone(), bench, Some(sized))
        }
    };
    let s = &out.stats;
    let report = Report {
        device,
        backend: if a.backend == BackendKind::Gpu {
            "gpu"
        } else {
            "cpu"
        },
        mode: if a.mode == Mode::Spec {
            "speculative"
        } else {
            "greedy"
        },
        model: cfg,
        run,
        prefill_ms: s.prefill_s * 1e3,
        draft_ms: s.draft_s * 1e3,
        verify_ms: s.verify_s * 1e3,
        accept_ms: s.accept_s * 1e3,
        steps: s.steps,
        median_step_ms: s.median_step_s() * 1e3,
        tokens_per_s: (out.tokens.len() * s.new_tokens) as f64 / s.decode_s().max(1e-12),
        mean_committed_per_step: s.mean_committed(),
        bench,
        gpu_mem_sized_gib: sized,
    };
    if a.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| EngineError::Config(format!("cannot encode the report: {e}")))?;
        println!("{text}");
    } else {
        print_text(&report);
    }
    Ok(())
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

fn bench(be: &mut specdec::gpu::GpuBackend, run: &RunConfig) -> Result<Bench, EngineError> {
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
    let verify_pass_gpu_ms = be.time_forward(specdec::Which::Target, &f, 10)?;
    let one = Forward {
        t: 1,
        off: 0,
        causal: false,
        base: f.base.clone(),
        tokens: vec![0; run.batch],
        pos: f.base.clone(),
        masks: vec![1],
    };
    let draft_pass_gpu_ms = be.time_forward(specdec::Which::Draft, &one, 10)?;
    Ok(Bench {
        prefill_gemm,
        attention,
        verify_pass_gpu_ms,
        draft_pass_gpu_ms,
    })
}

fn print_text(r: &Report) {
    let m = &r.model;
    let run = &r.run;
    println!(
        "specdec on {} ({} mode): {} layers, d_model {}, {} heads / {} kv, head_dim {}, ffn {}, vocab {}{}",
        r.device,
        r.mode,
        m.layers,
        m.d_model,
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.ffn,
        m.vocab,
        if m.experts > 0 {
            format!(", {} experts top-{}", m.experts, m.top_k)
        } else {
            String::new()
        }
    );
    println!(
        "  batch {}, context {}, prompt {}, new tokens {}, page size {}, draft {:?} ({} layers), tree {}x{}, verify attention {:?}, graphs {}",
        run.batch,
        run.context,
        run.prompt_len,
        run.new_tokens,
        run.page_size,
        run.draft,
        run.draft_layers,
        run.width,
        run.depth,
        run.verify_attn,
        if run.graphs { "on" } else { "off" }
    );
    let per = |ms: f64| {
        if r.steps > 0 {
            ms / r.steps as f64
        } else {
            0.0
        }
    };
    println!("  phase      total ms   per step ms");
    println!("  prefill  {:>10.2}", r.prefill_ms);
    println!("  draft    {:>10.2} {:>13.3}", r.draft_ms, per(r.draft_ms));
    println!(
        "  verify   {:>10.2} {:>13.3}",
        r.verify_ms,
        per(r.verify_ms)
    );
    println!(
        "  accept   {:>10.2} {:>13.3}",
        r.accept_ms,
        per(r.accept_ms)
    );
    println!(
        "  steps {}, median step {:.3} ms, {:.1} tokens/s, mean committed per step {:.2}",
        r.steps, r.median_step_ms, r.tokens_per_s, r.mean_committed_per_step
    );
    if let Some(b) = &r.bench {
        println!(
            "  prefill matmuls ({} rows): {:.0} TFLOP/s bf16 [{}]",
            b.prefill_gemm.rows,
            b.prefill_gemm.tflops,
            b.prefill_gemm
                .per_shape
                .iter()
                .map(|(n, t)| format!("{n} {t:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for a in &b.attention {
            println!(
                "  attention {:?}{} (page size {}, {} KV tokens, 1 layer): {:.3} ms, {:.0} GB/s",
                a.kind,
                if a.kind == VerifyAttn::SplitKv {
                    format!(" {} chunk {}", a.variant, a.chunk)
                } else {
                    String::new()
                },
                a.page_size,
                a.kv_tokens,
                a.ms,
                a.gb_per_s
            );
        }
        println!(
            "  event time of one verify pass {:.3} ms, one draft pass {:.3} ms (enqueued without a graph)",
            b.verify_pass_gpu_ms, b.draft_pass_gpu_ms
        );
    }
}
