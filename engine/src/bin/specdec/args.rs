//! The command line's options, the spellings of its choices, and the run configuration they
//! make.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use specdec::ConfigError;
use specdec::config::{DraftKind, ModelConfig, RunConfig, VerifyAttn, default_draft_layers};

pub(crate) const EXAMPLES: &str = "\
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
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Option<Cmd>,
    #[command(flatten)]
    pub(crate) args: Args,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
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
pub(crate) struct ModelArgs {
    /// Size preset: tiny, small, 0.5b, 7b-8l, 7b, 8b-gqa-8l.
    #[arg(long, default_value = "7b-8l")]
    pub(crate) preset: String,
    /// Model sizes as JSON (the ModelConfig fields; overrides --preset).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Layers of the target (overrides the preset's or the config's).
    #[arg(long)]
    pub(crate) layers: Option<usize>,
    /// Experts per MLP, 0 for a dense SwiGLU MLP (overrides the preset's or the config's).
    #[arg(long)]
    pub(crate) experts: Option<usize>,
    /// Experts each token goes to, with --experts.
    #[arg(long)]
    pub(crate) top_k: Option<usize>,
}

impl ModelArgs {
    pub(crate) fn resolve(&self) -> Result<ModelConfig, ConfigError> {
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
pub(crate) enum OnOff {
    On,
    Off,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackendKind {
    /// The bf16 CUDA engine.
    Gpu,
    /// The f32 CPU reference (same model and cache; slow: for small models).
    Cpu,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Speculative decoding (draft, verify, accept).
    #[value(alias = "speculative")]
    Spec,
    /// The target alone, one token per step: the reference output.
    Greedy,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DraftArg {
    /// The target's first --draft-layers layers with its final norm and head (shared weights).
    SelfSpec,
    /// A separate model of --draft-layers layers, a quarter of the target's width.
    Small,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttnArg {
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
pub(crate) fn cli_name<T: ValueEnum>(v: T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Target weights (safetensors); seeded weights when absent.
    #[arg(long)]
    pub(crate) weights: Option<PathBuf>,
    /// Draft weights (safetensors) for --draft small.
    #[arg(long)]
    pub(crate) draft_weights: Option<PathBuf>,
    /// Tokens of seeded background context in the KV cache before the prompt.
    #[arg(long, default_value_t = 4096)]
    pub(crate) context: usize,
    /// Largest KV length per sequence (default: what the run needs).
    #[arg(long)]
    pub(crate) max_context: Option<usize>,
    /// Seeded prompt tokens per sequence, prefilled on top of the context.
    #[arg(long, default_value_t = 128)]
    pub(crate) prompt_len: usize,
    /// Tokens to generate per sequence.
    #[arg(long, default_value_t = 64)]
    pub(crate) new_tokens: usize,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 1)]
    pub(crate) batch: usize,
    /// Tokens per KV-cache page: 1, 16 or 64 (pages are scattered in memory).
    #[arg(long, default_value_t = 16)]
    pub(crate) page_size: usize,
    /// Draft tokens per chain.
    #[arg(long, default_value_t = 4)]
    pub(crate) depth: usize,
    /// Chains in the tree (1 = a chain).
    #[arg(long, default_value_t = 1)]
    pub(crate) width: usize,
    /// How the draft model is made.
    #[arg(long, value_enum, default_value = "self-spec")]
    pub(crate) draft: DraftArg,
    /// Layers of the draft model [default: 2, but always fewer than the target's; with
    /// --draft-weights, the file's].
    #[arg(long)]
    pub(crate) draft_layers: Option<usize>,
    /// Attention kernel of the decode passes, draft and verify (GPU only).
    #[arg(long, value_enum, default_value = "split-kv")]
    pub(crate) verify_attn: AttnArg,
    /// Capture each decode pass shape into a CUDA graph and replay it (GPU only; MoE passes are
    /// never captured).
    #[arg(long, value_enum, default_value = "on")]
    pub(crate) graphs: OnOff,
    /// Where the model runs.
    #[arg(long, value_enum, default_value = "gpu")]
    pub(crate) backend: BackendKind,
    /// Decode once untimed first (compiles graphs, warms cuBLAS), then the timed run (GPU only).
    #[arg(long, value_enum, default_value = "on")]
    pub(crate) warmup: OnOff,
    /// How to decode.
    #[arg(long, value_enum, default_value = "spec")]
    pub(crate) mode: Mode,
    /// Seed of the weights, prompts, page table and background context.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Also time the prefill matrix products and the decode attention kernels (GPU events;
    /// GPU only).
    #[arg(long)]
    pub(crate) bench: bool,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The run's configuration from the options, validated against the target.
/// `draft_file_layers`: the layers of the `--draft-weights` model, when given (the draft then
/// has those, whatever the default).
pub(crate) fn run_config(
    a: &Args,
    cfg: &ModelConfig,
    draft_file_layers: Option<usize>,
) -> Result<RunConfig, ConfigError> {
    let draft = DraftKind::from(a.draft);
    let draft_layers = match (a.draft_layers, draft_file_layers) {
        (Some(n), _) => n,
        (None, Some(n)) => n,
        (None, None) => default_draft_layers(cfg, draft)?,
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

    /// The default draft is smaller than the target for every preset; explicit values stay.
    #[test]
    fn default_draft_layers_follow_the_target() {
        for preset in ["tiny", "small", "0.5b", "7b-8l", "7b", "8b-gqa-8l"] {
            let cli = Cli::parse_from(["specdec", "--preset", preset]);
            let cfg = cli.args.model.resolve().unwrap();
            let run = run_config(&cli.args, &cfg, None).unwrap();
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
        assert_eq!(run_config(&cli.args, &cfg, None).unwrap().draft_layers, 2);
        // A 1-layer target: refused for self-speculation, unless draft weights bring their own.
        let cli = Cli::parse_from(["specdec", "--preset", "tiny", "--layers", "1"]);
        let cfg = cli.args.model.resolve().unwrap();
        let e = run_config(&cli.args, &cfg, None).unwrap_err();
        assert!(matches!(e, ConfigError::DraftIsTarget), "{e}");
        assert_eq!(
            run_config(&cli.args, &cfg, Some(1)).unwrap().draft_layers,
            1
        );
    }
}
