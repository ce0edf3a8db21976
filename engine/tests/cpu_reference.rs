//! CPU reference: speculative greedy output equals plain greedy output, token for token, for
//! chains and trees and every knob; safetensors round trips; bad input gets clear errors.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use specdec::config::{DraftKind, ModelConfig, RunConfig, VerifyAttn};
use specdec::cpu::CpuBackend;
use specdec::spec::{greedy, speculative};
use specdec::weights::HostWeights;

fn run_cfg() -> RunConfig {
    RunConfig {
        batch: 2,
        context: 0,
        prompt_len: 6,
        new_tokens: 20,
        max_context: 256,
        page_size: 16,
        depth: 3,
        width: 1,
        draft: DraftKind::SelfSpec,
        draft_layers: 1,
        verify_attn: VerifyAttn::SplitKv,
        graphs: false,
        seed: 7,
    }
}

fn check(model: &ModelConfig, run: &RunConfig) -> f64 {
    run.validate(model).unwrap();
    let w = HostWeights::seeded(model, run.seed);
    let mut a = CpuBackend::new(&w, None, run).unwrap();
    let want = greedy(&mut a, run, model.vocab).unwrap();
    let mut b = CpuBackend::new(&w, None, run).unwrap();
    let got = speculative(&mut b, run, model.vocab).unwrap();
    assert_eq!(got.tokens, want.tokens, "run {run:?}");
    assert_eq!(got.tokens[0].len(), run.new_tokens);
    let mean = got.stats.mean_committed();
    assert!(mean >= 1.0 && mean <= (run.depth + 1) as f64);
    mean
}

fn tiny() -> ModelConfig {
    ModelConfig::preset("tiny").unwrap()
}

#[test]
fn chain_self_speculation() {
    check(&tiny(), &run_cfg());
}

#[test]
fn tree_self_speculation() {
    check(
        &tiny(),
        &RunConfig {
            width: 3,
            ..run_cfg()
        },
    );
}

#[test]
fn every_page_size_with_background_context() {
    for ps in [1, 16, 64] {
        check(
            &tiny(),
            &RunConfig {
                page_size: ps,
                context: 40,
                ..run_cfg()
            },
        );
    }
}

#[test]
fn small_draft_model_tree_and_chain() {
    for width in [1, 2] {
        let run = RunConfig {
            draft: DraftKind::Small,
            draft_layers: 1,
            width,
            ..run_cfg()
        };
        check(&tiny(), &run);
    }
}

#[test]
fn moe_target() {
    let m = ModelConfig {
        experts: 4,
        top_k: 2,
        ..tiny()
    };
    check(
        &m,
        &RunConfig {
            width: 2,
            ..run_cfg()
        },
    );
}

#[test]
fn other_knobs_and_batch_one() {
    let runs = [
        RunConfig {
            batch: 1,
            depth: 5,
            prompt_len: 5,
            ..run_cfg()
        },
        RunConfig {
            verify_attn: VerifyAttn::Scattered,
            graphs: true,
            batch: 3,
            ..run_cfg()
        },
        RunConfig {
            depth: 1,
            width: 4,
            ..run_cfg()
        },
    ];
    for r in runs {
        check(&tiny(), &r);
    }
}

/// A draft identical to the target must have every candidate accepted.
#[test]
fn identical_draft_accepts_everything() {
    let m = tiny();
    let run = RunConfig {
        draft_layers: m.layers,
        new_tokens: 25,
        ..run_cfg()
    };
    let mean = check(&m, &run);
    // Every step commits depth + 1 tokens (the last step may be cut by new_tokens).
    assert!(mean > run.depth as f64, "mean committed {mean}");
}

#[test]
fn safetensors_round_trip_and_errors() {
    let m = tiny();
    let w = HostWeights::seeded(&m, 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    w.save(&path).unwrap();
    let back = HostWeights::load(&path, None).unwrap();
    assert_eq!(back.cfg, m);
    for (name, vals) in &w.tensors {
        assert_eq!(back.get(name).unwrap(), vals.as_slice(), "{name}");
    }
    // Loaded weights decode exactly as the seeded ones.
    let run = run_cfg();
    let a = greedy(&mut CpuBackend::new(&w, None, &run).unwrap(), &run, m.vocab).unwrap();
    let b = greedy(
        &mut CpuBackend::new(&back, None, &run).unwrap(),
        &run,
        m.vocab,
    )
    .unwrap();
    assert_eq!(a.tokens, b.tokens);

    let missing = HostWeights::load(&dir.path().join("nope.safetensors"), None).unwrap_err();
    assert!(
        missing.to_string().contains("cannot read weights file"),
        "{missing}"
    );
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}").unwrap();
    let err = HostWeights::load(&junk, None).unwrap_err();
    assert!(
        err.to_string().contains("not a valid safetensors file"),
        "{err}"
    );
    // A file of another model lacks tensors this one needs.
    let other = ModelConfig {
        layers: 1,
        ..m.clone()
    };
    let small = dir.path().join("small.safetensors");
    HostWeights::seeded(&other, 1).save(&small).unwrap();
    let mut loaded = HostWeights::load(&small, None).unwrap();
    assert_eq!(loaded.cfg.layers, 1);
    loaded.tensors.remove("lm_head");
    let cut = dir.path().join("cut.safetensors");
    let e = loaded.save(&cut).unwrap_err();
    assert!(e.to_string().contains("lm_head"), "{e}");
}

#[test]
fn bad_run_configs_are_refused() {
    let m = tiny();
    let too_long = RunConfig {
        context: 300,
        ..run_cfg()
    };
    let e = too_long.validate(&m).unwrap_err().to_string();
    assert!(e.contains("--max-context"), "{e}");
    let big_tree = RunConfig {
        width: 8,
        depth: 8,
        prompt_len: 8,
        ..run_cfg()
    };
    assert!(
        big_tree
            .validate(&m)
            .unwrap_err()
            .to_string()
            .contains("tree")
    );
    let ps = RunConfig {
        page_size: 8,
        ..run_cfg()
    };
    assert!(
        ps.validate(&m)
            .unwrap_err()
            .to_string()
            .contains("--page-size")
    );
    let gqa = ModelConfig { kv_heads: 3, ..m };
    assert!(gqa.validate().is_err());
}

mod laws {
    use proptest::prelude::*;
    use specdec::cpu::{page_table, top_k};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The page table maps logical pages one-to-one onto physical pages.
        #[test]
        fn page_table_is_a_permutation(batch in 1usize..4, ctx in 1usize..400, ps_i in 0usize..3, seed: u64) {
            let ps = [1, 16, 64][ps_i];
            let mut pt = page_table(batch, ctx, ps, seed);
            prop_assert_eq!(pt.len(), batch * ctx.div_ceil(ps));
            pt.sort_unstable();
            prop_assert!(pt.iter().enumerate().all(|(i, &p)| p as usize == i));
        }

        /// Top-k equals a stable sort by value (descending), ties to the lower index.
        #[test]
        fn top_k_is_a_stable_sort(vals in proptest::collection::vec(-20i32..20, 1..60), k in 1usize..6) {
            let f: Vec<f32> = vals.iter().map(|&v| v as f32).collect();
            let mut idx: Vec<u32> = (0..f.len() as u32).collect();
            idx.sort_by(|&a, &b| f[b as usize].total_cmp(&f[a as usize]).then(a.cmp(&b)));
            idx.truncate(k);
            prop_assert_eq!(top_k(&f, k), idx);
        }
    }
}
