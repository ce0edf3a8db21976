//! `specdec`: run speculative decoding on the GPU (or the CPU reference) and report per-phase
//! times, tokens/s and mean committed length; `specdec check` compares the GPU with the CPU
//! reference; `specdec save-weights` writes seeded weights as safetensors.
//!
//! This file is the command line: options, the choices' spellings, the text and JSON reports,
//! and the one-line error message. The engine itself is the `specdec` library.
#![warn(clippy::too_many_lines, clippy::undocumented_unsafe_blocks)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde::Serialize;
use specdec::config::{DraftKind, ModelConfig, RunConfig, VerifyAttn, default_draft_layers};
use specdec::cpu::CpuBackend;
use specdec::gpu::{AttnBench, GemmBench, GpuBackend};
use specdec::spec::{Output, greedy, speculative, verify_masks};
use specdec::weights::HostWeights;
use specdec::{Backend, ConfigError, EngineError, Forward, Which};

const EXAMPLES: &str = "\
Examples:
  specdec                                            7B layout, 8 layers, 4k context, chain of 4
  specdec --context 65536 --verify-attn split-kv --bench
  specdec --context 65536 --page-size 1 --verify-attn scattered --new-tokens 4
  specdec --preset 0.5b --graphs off                 host launch gaps
  specdec --width 2 --depth 3 --json                 a tree of 2 chains of 3
  specdec --preset 8b-gqa-8l --experts 8 --top-k 2   mixture of experts
  specdec --backend cpu --preset tiny --context 100  the f32 CPU reference, no GPU needed
  specdec check                                      GPU vs CPU reference, spec == greedy";

#[derive(Parser, Debug)]
#[command(
    name = "specdec",
    version,
    about = "Speculative-decoding engine: a real GPU workload with NVTX phases",
    after_help = EXAMPLES
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
    #[command(after_help = "Example:\n  specdec check --json")]
    Check {
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write seeded weights of the chosen model as a safetensors file.
    #[command(
        after_help = "Example:\n  specdec save-weights --preset small --out w.safetensors\n  \
                      specdec --weights w.safetensors --backend cpu --preset small --context 100"
    )]
    SaveWeights {
        /// The safetensors file to write (the model's sizes go into its metadata).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        model: ModelArgs,
        /// Seed of the weights (the same seed gives the same weights as a seeded run).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct ModelArgs {
    /// Size preset: tiny, small, 0.5b, 7b-8l, 7b, 8b-gqa-8l.
    #[arg(long, default_value = "7b-8l")]
    preset: String,
    /// Model sizes as JSON (the ModelConfig fields; overrides --preset).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Layers of the target (overrides the preset's or the config's).
    #[arg(long)]
    layers: Option<usize>,
    /// Experts per MLP, 0 for a dense SwiGLU MLP (overrides the preset's or the config's).
    #[arg(long)]
    experts: Option<usize>,
    /// Experts each token goes to, with --experts.
    #[arg(long)]
    top_k: Option<usize>,
}

impl ModelArgs {
    fn resolve(&self) -> Result<ModelConfig, ConfigError> {
        let mut cfg = match &self.config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|source| ConfigError::ReadConfig {
                        path: p.clone(),
                        source,
                    })?;
                serde_json::from_str(&text).map_err(|source| ConfigError::ParseConfig {
                    path: p.clone(),
                    source,
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
    /// The bf16 CUDA engine.
    Gpu,
    /// The f32 CPU reference (same model and cache; slow: for small models).
    Cpu,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Speculative decoding (draft, verify, accept).
    #[value(alias = "speculative")]
    Spec,
    /// The target alone, one token per step: the reference output.
    Greedy,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum DraftArg {
    /// The target's first --draft-layers layers with its final norm and head (shared weights).
    SelfSpec,
    /// A separate model of --draft-layers layers, a quarter of the target's width.
    Small,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum AttnArg {
    /// One warp per query and head, one key at a time through the page table: a gather.
    Scattered,
    /// Flash-decode: the keys in chunks over many blocks, then a combine.
    SplitKv,
}

impl From<DraftArg> for DraftKind {
    fn from(a: DraftArg) -> Self {
        match a {
            DraftArg::SelfSpec => DraftKind::SelfSpec,
            DraftArg::Small => DraftKind::Small,
        }
    }
}

impl From<DraftKind> for DraftArg {
    fn from(k: DraftKind) -> Self {
        match k {
            DraftKind::SelfSpec => DraftArg::SelfSpec,
            DraftKind::Small => DraftArg::Small,
        }
    }
}

impl From<AttnArg> for VerifyAttn {
    fn from(a: AttnArg) -> Self {
        match a {
            AttnArg::Scattered => VerifyAttn::Scattered,
            AttnArg::SplitKv => VerifyAttn::SplitKv,
        }
    }
}

impl From<VerifyAttn> for AttnArg {
    fn from(k: VerifyAttn) -> Self {
        match k {
            VerifyAttn::Scattered => AttnArg::Scattered,
            VerifyAttn::SplitKv => AttnArg::SplitKv,
        }
    }
}

/// A choice as the user spells it on the command line (`split-kv`, not `SplitKv`).
fn cli_name<T: ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
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
    /// Seeded prompt tokens per sequence, prefilled on top of the context.
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Tokens per KV-cache page: 1, 16 or 64 (pages are scattered in memory).
    #[arg(long, default_value_t = 16)]
    page_size: usize,
    /// Draft tokens per chain.
    #[arg(long, default_value_t = 4)]
    depth: usize,
    /// Chains in the tree (1 = a chain).
    #[arg(long, default_value_t = 1)]
    width: usize,
    /// How the draft model is made.
    #[arg(long, value_enum, default_value = "self-spec")]
    draft: DraftArg,
    /// Layers of the draft model [default: 2, but always fewer than the target's].
    #[arg(long)]
    draft_layers: Option<usize>,
    /// Attention kernel of the decode passes, draft and verify (GPU only).
    #[arg(long, value_enum, default_value = "split-kv")]
    verify_attn: AttnArg,
    /// Capture each decode pass shape into a CUDA graph and replay it (GPU only; MoE passes are
    /// never captured).
    #[arg(long, value_enum, default_value = "on")]
    graphs: OnOff,
    /// Where the model runs.
    #[arg(long, value_enum, default_value = "gpu")]
    backend: BackendKind,
    /// Decode once untimed first (compiles graphs, warms cuBLAS), then the timed run (GPU only).
    #[arg(long, value_enum, default_value = "on")]
    warmup: OnOff,
    /// How to decode.
    #[arg(long, value_enum, default_value = "spec")]
    mode: Mode,
    /// Seed of the weights, prompts, page table and background context.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also time the prefill matrix products and the decode attention kernels (GPU events;
    /// GPU only).
    #[arg(long)]
    bench: bool,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    device: String,
    backend: String,
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
    prefill_gemm: GemmBench,
    attention: Vec<AttnBench>,
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

/// The run's configuration from the options, validated against the target.
fn run_config(a: &Args, cfg: &ModelConfig) -> Result<RunConfig, ConfigError> {
    let draft = DraftKind::from(a.draft);
    let draft_layers = match a.draft_layers {
        Some(n) => n,
        None => default_draft_layers(cfg, draft)?,
    };
    let mut run = RunConfig {
        batch: a.batch,
        context: a.context,
        prompt_len: a.prompt_len,
        new_tokens: a.new_tokens,
        max_context: 0,
        page_size: a.page_size,
        depth: a.depth,
        width: a.width,
        draft,
        draft_layers,
        verify_attn: a.verify_attn.into(),
        graphs: a.graphs == OnOff::On,
        seed: a.seed,
    };
    run.max_context = a.max_context.unwrap_or(run.needed_context());
    run.validate(cfg)?;
    Ok(run)
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
    let run = run_config(&a, &cfg).map_err(EngineError::from)?;
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

/// The two header lines: device, mode and model sizes; the run's knobs as the options spell
/// them.
fn header(r: &Report, mode: Mode) -> String {
    let m = &r.model;
    let run = &r.run;
    let experts = if m.experts > 0 {
        format!(", {} experts top-{}", m.experts, m.top_k)
    } else {
        String::new()
    };
    format!(
        "specdec on {}, mode {}: {} layers, d_model {}, {} heads / {} kv, head_dim {}, ffn {}, \
         vocab {}{experts}\n  batch {}, context {}, prompt {}, new tokens {}, page size {}, \
         draft {} ({} layers), tree {}x{}, verify attention {}, graphs {}",
        r.device,
        cli_name(mode),
        m.layers,
        m.d_model,
        m.heads,
        m.kv_heads,
        m.head_dim,
        m.ffn,
        m.vocab,
        run.batch,
        run.context,
        run.prompt_len,
        run.new_tokens,
        run.page_size,
        cli_name(DraftArg::from(run.draft)),
        run.draft_layers,
        run.width,
        run.depth,
        cli_name(AttnArg::from(run.verify_attn)),
        cli_name(if run.graphs { OnOff::On } else { OnOff::Off }),
    )
}

fn print_text(r: &Report, mode: Mode) {
    println!("{}", header(r, mode));
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
        print!("{}", bench_text(b));
    }
}

/// The `--bench` figures as text lines.
fn bench_text(b: &Bench) -> String {
    let g = &b.prefill_gemm;
    let shapes: Vec<String> = g
        .per_shape
        .iter()
        .map(|(n, t)| format!("{n} {t:.0}"))
        .collect();
    let mut s = format!(
        "  prefill matmuls ({} rows): {:.0} TFLOP/s bf16 [{}]\n",
        g.rows,
        g.tflops,
        shapes.join(", ")
    );
    for a in &b.attention {
        let variant = if a.kind == VerifyAttn::SplitKv {
            let v = if a.variant.is_empty() {
                "default"
            } else {
                &a.variant
            };
            format!(" {v} chunk {}", a.chunk)
        } else {
            String::new()
        };
        s.push_str(&format!(
            "  attention {}{variant} (page size {}, {} KV tokens, 1 layer): {:.3} ms, {:.0} GB/s\n",
            cli_name(AttnArg::from(a.kind)),
            a.page_size,
            a.kv_tokens,
            a.ms,
            a.gb_per_s
        ));
    }
    s.push_str(&format!(
        "  event time of one verify pass {:.3} ms, one draft pass {:.3} ms (enqueued without a \
         graph)\n",
        b.verify_pass_gpu_ms, b.draft_pass_gpu_ms
    ));
    s
}

/// `specdec check`: print the results; an error when any case fails.
fn check(json: bool) -> anyhow::Result<()> {
    let results = specdec::check::run_cases()?;
    if json {
        let text =
            serde_json::to_string_pretty(&results).context("cannot encode the results as JSON")?;
        println!("{text}");
    } else {
        println!(
            "{:<44} {:>12} {:>12} {:>12} {:>14} {:>10} {:>5}",
            "case",
            "prefill err",
            "verify err",
            "spec==greedy",
            "gpu=cpu lead",
            "committed",
            "pass"
        );
        for r in &results {
            println!(
                "{:<44} {:>12.2e} {:>12.2e} {:>12} {:>10}/{:<3} {:>10.2} {:>5}",
                r.name,
                r.prefill_rel_err,
                r.verify_rel_err,
                r.spec_equals_greedy,
                r.gpu_cpu_greedy_agree,
                r.new_tokens,
                r.mean_committed,
                if r.pass { "ok" } else { "FAIL" }
            );
        }
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
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use clap::CommandFactory;
    use specdec::config::DEFAULT_DRAFT_LAYERS;

    use super::*;

    /// Every option and subcommand of every command says what it does.
    #[test]
    fn every_option_has_help() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut missing = Vec::new();
        let mut stack = vec![cmd];
        while let Some(c) = stack.pop() {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if id != "help" && id != "version" && a.get_help().is_none() {
                    missing.push(format!("{} --{id}", c.get_name()));
                }
            }
            for sub in c.get_subcommands() {
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(sub.get_name().to_string());
                }
                stack.push(sub.clone());
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn help_has_examples() {
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("Examples:") && help.contains("specdec check"),
            "{help}"
        );
        for sub in ["check", "save-weights"] {
            let mut cmd = Cli::command();
            let sub = cmd.find_subcommand_mut(sub).unwrap();
            assert!(sub.render_help().to_string().contains("Example:"));
        }
    }

    /// The text report spells choices as the options do, and as the JSON report does.
    #[test]
    fn choices_print_as_the_options_spell_them() {
        assert_eq!(cli_name(AttnArg::from(VerifyAttn::SplitKv)), "split-kv");
        assert_eq!(cli_name(DraftArg::from(DraftKind::SelfSpec)), "self-spec");
        for k in [DraftKind::SelfSpec, DraftKind::Small] {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json.as_str().unwrap(), cli_name(DraftArg::from(k)));
            assert_eq!(DraftKind::from(DraftArg::from(k)), k);
        }
        for k in [VerifyAttn::Scattered, VerifyAttn::SplitKv] {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json.as_str().unwrap(), cli_name(AttnArg::from(k)));
            assert_eq!(VerifyAttn::from(AttnArg::from(k)), k);
        }
        let cli = Cli::parse_from(["specdec", "--preset", "tiny", "--draft", "small"]);
        let cfg = cli.args.model.resolve().unwrap();
        let run = run_config(&cli.args, &cfg).unwrap();
        let report = Report {
            device: "test".into(),
            backend: cli_name(BackendKind::Cpu),
            mode: "speculative",
            model: cfg,
            run,
            prefill_ms: 0.0,
            draft_ms: 0.0,
            verify_ms: 0.0,
            accept_ms: 0.0,
            steps: 0,
            median_step_ms: 0.0,
            tokens_per_s: 0.0,
            mean_committed_per_step: 0.0,
            bench: None,
            gpu_mem_sized_gib: None,
        };
        let text = header(&report, Mode::Spec);
        assert!(text.contains(", mode spec:"), "{text}");
        assert!(text.contains("draft small (1 layers)"), "{text}");
        assert!(text.contains("verify attention split-kv"), "{text}");
        assert!(text.contains("graphs on"), "{text}");
        assert!(
            !text.contains("SplitKv") && !text.contains("Small"),
            "{text}"
        );
    }

    /// The default draft is smaller than the target for every preset; explicit values stay.
    #[test]
    fn default_draft_layers_follow_the_target() {
        for preset in ["tiny", "small", "0.5b", "7b-8l", "7b", "8b-gqa-8l"] {
            let cli = Cli::parse_from(["specdec", "--preset", preset]);
            let cfg = cli.args.model.resolve().unwrap();
            let run = run_config(&cli.args, &cfg).unwrap();
            assert!(run.draft_layers < cfg.layers, "{preset}");
            let want = if cfg.layers > DEFAULT_DRAFT_LAYERS {
                DEFAULT_DRAFT_LAYERS
            } else {
                1
            };
            assert_eq!(run.draft_layers, want, "{preset}");
        }
        let cli = Cli::parse_from(["specdec", "--preset", "tiny", "--draft-layers", "2"]);
        let cfg = cli.args.model.resolve().unwrap();
        assert_eq!(run_config(&cli.args, &cfg).unwrap().draft_layers, 2);
    }

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
