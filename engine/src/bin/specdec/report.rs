//! The reports: the run's text and JSON report, the `--bench` figures and the `specdec check`
//! table. Choices are printed as the options spell them.

use serde::Serialize;
use specdec::check::CaseResult;
use specdec::config::{ModelConfig, RunConfig, VerifyAttn};
use specdec::gpu::{AttnBench, GemmBench};

use crate::args::{AttnArg, DraftArg, Mode, OnOff, cli_name};

#[derive(Serialize)]
pub(crate) struct Report {
    pub(crate) device: String,
    pub(crate) backend: String,
    pub(crate) mode: &'static str,
    pub(crate) model: ModelConfig,
    pub(crate) run: RunConfig,
    pub(crate) prefill_ms: f64,
    pub(crate) draft_ms: f64,
    pub(crate) verify_ms: f64,
    pub(crate) accept_ms: f64,
    pub(crate) steps: usize,
    pub(crate) median_step_ms: f64,
    pub(crate) tokens_per_s: f64,
    pub(crate) mean_committed_per_step: f64,
    pub(crate) bench: Option<Bench>,
    pub(crate) gpu_mem_sized_gib: Option<f64>,
}

#[derive(Serialize)]
pub(crate) struct Bench {
    pub(crate) prefill_gemm: GemmBench,
    pub(crate) attention: Vec<AttnBench>,
    /// Event-to-event time of one verify pass enqueued without a graph: the GPU's work plus any
    /// gaps where it waited for the host to launch the next kernel.
    pub(crate) verify_pass_gpu_ms: f64,
    /// The same for one single-token draft pass.
    pub(crate) draft_pass_gpu_ms: f64,
}

/// The two header lines: device, mode and model sizes; the run's knobs as the options spell
/// them.
pub(crate) fn header(r: &Report, mode: Mode) -> String {
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

pub(crate) fn print_text(r: &Report, mode: Mode) {
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
pub(crate) fn bench_text(b: &Bench) -> String {
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

/// The `specdec check` results as a table.
pub(crate) fn print_checks(results: &[CaseResult]) {
    println!(
        "{:<44} {:>12} {:>12} {:>12} {:>14} {:>10} {:>5}",
        "case", "prefill err", "verify err", "spec==greedy", "gpu=cpu lead", "committed", "pass"
    );
    for r in results {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use clap::Parser;
    use specdec::config::DraftKind;

    use super::*;
    use crate::args::{BackendKind, Cli, run_config};

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
        let run = run_config(&cli.args, &cfg, None).unwrap();
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
}
