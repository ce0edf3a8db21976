//! Fuzzing every command that reads a recording with valid but hostile values: rows written
//! through the trace's own writer (so they pass every checksum and decode as Parquet) with
//! times that cannot be true (`i64::MIN`, `i64::MAX`, ends before starts, decades away), rows
//! written twice, names that break parsers or terminals (non-ASCII inside brackets, control and
//! bidirectional characters, 100 KB, a 1 MB name shared by 2,000 rows of a segment), absurd
//! counts and manifest values; on a 1.1 recording with kernels, and a 1.2 one with host tables.
//! Each case runs, in this process, what `report` (text and `--json`), `diff`, `export`
//! (Perfetto, CSV, Parquet), `info`, `view --print` and `replay --print` do (the views render
//! into ratatui's buffer as `--print` does): each must give its output or an error with a
//! message (never a panic), text output must hold no raw control or bidirectional character,
//! and the case must stay under [`CASE_MEMORY`] of heap (counted by this test's allocator) and
//! [`CASE_LIMIT`] of time.
//!
//! `crates/trace/tests/fuzz.rs` fuzzes the reader with damaged bytes; this fuzzes what is built
//! on it with values. CI runs [`DEFAULT_CASES`] cases from a fixed seed (about 20 s on 2 cores
//! in a debug build); `CUFALL_FUZZ_SEED=random CUFALL_FUZZ_CASES=500 cargo test -p cufall
//! --release --test fuzz_commands` runs a long one from a new seed (printed;
//! `CUFALL_FUZZ_SEED=<n>` repeats it).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use clap::Parser;
use cufall_sampler::commands::diff::{DiffArgs, diff_to};
use cufall_sampler::commands::export::{ExportArgs, export_to};
use cufall_sampler::commands::info::{Info, render as info_text};
use cufall_sampler::commands::report::{ReportArgs, report_to};
use cufall_sampler::commands::view::{ReplayArgs, ViewArgs, replay_text, view_text};
use cufall_testkit::examples::{copy_example, examples_dir, rewrite_text, splice_rows};
use cufall_trace::Trace;
use cufall_trace::model::{
    DeviceId, DropReason, DropRecord, HostSample, KernelRecord, NvmlRow, NvtxRange, SampleBatch,
    StackFrame,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The heap a case may reach above what was in use when it began.
const CASE_MEMORY: usize = 1 << 30;
const CASE_LIMIT: Duration = Duration::from_secs(60);
const DEFAULT_CASES: u32 = 5;
const DEFAULT_SEED: u64 = 0x00c0_ffa1_1f0a_2040;

#[global_allocator]
static HEAP: cufall_testkit::heap::Counting = cufall_testkit::heap::Counting;

/// A 1.1 recording with NVTX phases, kernels, drops and NVML (a short one: every command runs
/// on it in each case).
const PHASES: &str = "h200-specdec-ctx256-graphs-on.cufall";
/// A 1.2 recording with host tables (stacks, host samples).
const HOST: &str = "host-stacks/cpu-host-phases.cufall";

/// A time: one that cannot be true, or one inside the recording (an offset from its start).
#[derive(Clone, Copy, Debug)]
enum Time {
    Absurd(i64),
    Inside(i64),
}

fn time() -> impl Strategy<Value = Time> {
    prop_oneof![
        prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(0i64),
            Just(-1),
            Just(i64::MAX - 1),
            Just(1_000_000_000_000_000_000),
            Just(4_000_000_000_000_000_000),
        ]
        .prop_map(Time::Absurd),
        (-3_000_000_000i64..3_000_000_000).prop_map(Time::Inside),
    ]
}

fn at(t: Time, start: i64) -> i64 {
    match t {
        Time::Absurd(t) => t,
        Time::Inside(d) => start.saturating_add(d),
    }
}

/// Names that broke, or could break, a parser, a column or a terminal.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("k<é>".to_string()),
        Just("ns::f(ü, [é])::{λ(é)#1}".to_string()),
        Just("解码🚀<ü>::operator()(é) const".to_string()),
        Just("wipe\u{1b}[2J\u{1b}]0;title\u{7}\r".to_string()),
        Just("prefill\u{202e}lladerp\u{2066}".to_string()),
        Just("\u{0}\u{7f}\u{9b}".to_string()),
        Just("(((((((((((((((((((((<<<<<<<<<<<[[[[[[".to_string()),
        Just("x".repeat(100_000)),
        "\\PC{0,40}",
    ]
}

/// One hostile change, written through the trace's own writer (or, for the manifest and a name
/// shared by a whole segment, as another tool would write it).
#[derive(Clone, Debug)]
enum Hostile {
    Sample {
        start: Time,
        end: Time,
        copies: usize,
    },
    Kernel {
        name: String,
        start: Time,
        end: Time,
    },
    Nvtx {
        name: String,
        start: Time,
        end: Time,
        depth: u32,
    },
    Drop {
        start: Time,
        end: Time,
        lost: Option<u64>,
    },
    Nvml {
        t: Time,
        power_w: f32,
    },
    HostSample {
        t: Time,
        thread: String,
        copies: usize,
    },
    Frame {
        function: String,
        depth: u32,
    },
    Manifest {
        field: &'static str,
        value: i64,
    },
    SharedMegabyteName,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        3 => (time(), time(), 1usize..4)
            .prop_map(|(start, end, copies)| Hostile::Sample { start, end, copies }),
        3 => (name(), time(), time())
            .prop_map(|(name, start, end)| Hostile::Kernel { name, start, end }),
        3 => (name(), time(), time(), prop_oneof![Just(0u32), Just(1), Just(u32::MAX)])
            .prop_map(|(name, start, end, depth)| Hostile::Nvtx { name, start, end, depth }),
        2 => (time(), time(), prop_oneof![Just(None), Just(Some(u64::MAX)), Just(Some(3))])
            .prop_map(|(start, end, lost)| Hostile::Drop { start, end, lost }),
        1 => (time(), prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(-1e30f32), Just(300.0)])
            .prop_map(|(t, power_w)| Hostile::Nvml { t, power_w }),
        3 => (time(), name(), 1usize..4)
            .prop_map(|(t, thread, copies)| Hostile::HostSample { t, thread, copies }),
        2 => (name(), prop_oneof![Just(0u32), Just(u32::MAX)])
            .prop_map(|(function, depth)| Hostile::Frame { function, depth }),
        2 => (
            prop_oneof![
                Just("/sampling/interval_ns"),
                Just("/created_unix_ns"),
                Just("/end_unix_ns"),
                Just("/nvml_interval_ns"),
            ],
            prop_oneof![Just(0i64), Just(-1), Just(1), Just(i64::MAX), Just(i64::MIN)],
        )
            .prop_map(|(field, value)| Hostile::Manifest { field, value }),
        1 => Just(Hostile::SharedMegabyteName),
    ]
}

/// What stands for the shared megabyte-long name in rows written through the writer.
const PLACEHOLDER: &str = "@shared@";

/// The recording's first rows, which hostile rows are made from, and its facts.
struct Templates {
    start: i64,
    metrics: usize,
    kernel: KernelRecord,
    range: NvtxRange,
    frame: StackFrame,
    host: HostSample,
}

/// Writes the rows of one hostile change.
fn write_rows(w: &mut cufall_trace::TraceWriter, c: &Hostile, t: &Templates) {
    let start = t.start;
    match c {
        Hostile::Sample {
            start: s,
            end: e,
            copies,
        } => {
            let mut b = SampleBatch::new(DeviceId(0), t.metrics);
            for _ in 0..*copies {
                b.push(at(*s, start), at(*e, start), &vec![1.0; t.metrics]);
            }
            w.append_samples(&b).unwrap();
        }
        Hostile::Kernel {
            name,
            start: s,
            end: e,
        } => {
            let k = KernelRecord {
                name: name.clone(),
                start_ns: at(*s, start),
                end_ns: at(*e, start),
                ..t.kernel.clone()
            };
            w.append_kernels(&[k]).unwrap();
        }
        Hostile::Nvtx {
            name,
            start: s,
            end: e,
            depth,
        } => {
            let r = NvtxRange {
                name: name.clone(),
                start_ns: at(*s, start),
                end_ns: at(*e, start),
                depth: *depth,
                ..t.range.clone()
            };
            w.append_nvtx(&[r]).unwrap();
        }
        Hostile::Drop {
            start: s,
            end: e,
            lost,
        } => {
            let d = DropRecord {
                device: DeviceId(0),
                start_ns: at(*s, start),
                end_ns: at(*e, start),
                reason: DropReason::Gap,
                lost_samples: *lost,
            };
            w.append_drops(&[d]).unwrap();
        }
        Hostile::Nvml { t: when, power_w } => {
            let r = NvmlRow {
                t_ns: at(*when, start),
                power_w: Some(*power_w),
                ..NvmlRow::default()
            };
            w.append_nvml(&[r]).unwrap();
        }
        Hostile::HostSample {
            t: when,
            thread,
            copies,
        } => {
            let h = HostSample {
                t_ns: at(*when, start),
                thread_name: thread.clone(),
                ..t.host.clone()
            };
            w.append_host_samples(&vec![h; *copies]).unwrap();
        }
        Hostile::Frame { function, depth } => {
            let f = StackFrame {
                function: function.clone(),
                depth: *depth,
                ..t.frame.clone()
            };
            w.append_stacks(&[f]).unwrap();
        }
        Hostile::SharedMegabyteName => {
            let rows: Vec<KernelRecord> = (0..2_000)
                .map(|_| KernelRecord {
                    name: PLACEHOLDER.into(),
                    ..t.kernel.clone()
                })
                .collect();
            w.append_kernels(&rows).unwrap();
        }
        Hostile::Manifest { .. } => {}
    }
}

/// Makes the copy at `trace` hostile.
fn apply(trace: &Path, changes: &[Hostile]) {
    let tr = Trace::open(trace).unwrap();
    let m = tr.manifest();
    let t = Templates {
        start: m.created_unix_ns,
        metrics: m.metric_names().len(),
        kernel: tr.kernels().unwrap().first().cloned().unwrap_or_default(),
        range: tr.nvtx().unwrap().first().cloned().unwrap_or_default(),
        frame: tr.stacks().unwrap().first().cloned().unwrap_or_default(),
        host: tr
            .host_samples()
            .unwrap()
            .first()
            .cloned()
            .unwrap_or_default(),
    };
    splice_rows(trace, false, |w| {
        for c in changes {
            write_rows(w, c, &t);
        }
    });
    if changes
        .iter()
        .any(|c| matches!(c, Hostile::SharedMegabyteName))
    {
        let long = format!("\u{1b}{}", "é".repeat(499_999)).into_bytes();
        rewrite_text(trace, "kernels", PLACEHOLDER, long);
    }
    for c in changes {
        if let Hostile::Manifest { field, value } = c {
            cufall_testkit::examples::edit_manifest(trace, |v| {
                if let Some(slot) = v.pointer_mut(field) {
                    *slot = (*value).into();
                }
            });
        }
    }
}

/// What a command did on a case that a user must never see.
#[derive(Debug, thiserror::Error)]
enum Defect {
    #[error("{what}: raw {c:?} in its output")]
    RawCharacter { what: String, c: char },
    #[error("{what}: an error without a message")]
    EmptyError { what: String },
    #[error("{what} panicked: {message}")]
    Panicked { what: String, message: String },
    #[error("{what}: not JSON: {source}")]
    NotJson {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the Perfetto export is {bytes} bytes")]
    HugePerfetto { bytes: u64 },
}

/// Text a terminal gets: no control character but line ends, no bidirectional override.
fn check_text(what: &str, text: &str) -> Result<(), Defect> {
    let bad = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    match text.chars().find(|c| bad(*c)) {
        Some(c) => Err(Defect::RawCharacter {
            what: what.into(),
            c,
        }),
        None => Ok(()),
    }
}

/// An error a user would see must say something.
fn check_error(what: &str, e: &anyhow::Error) -> Result<(), Defect> {
    let m = format!("{e:#}");
    if m.trim().is_empty() {
        return Err(Defect::EmptyError { what: what.into() });
    }
    ERRORS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

static ERRORS: AtomicU32 = AtomicU32::new(0);
static OUTPUTS: AtomicU32 = AtomicU32::new(0);

/// `cufall ARGS` as parsed by the command line, without the program name.
fn parse<T: Parser>(args: &[&str]) -> T {
    T::try_parse_from(std::iter::once("cufall").chain(args.iter().copied())).unwrap()
}

#[derive(Parser)]
struct R {
    #[command(flatten)]
    a: ReportArgs,
}
#[derive(Parser)]
struct D {
    #[command(flatten)]
    a: DiffArgs,
}
#[derive(Parser)]
struct E {
    #[command(flatten)]
    a: ExportArgs,
}
#[derive(Parser)]
struct V {
    #[command(flatten)]
    a: ViewArgs,
}
#[derive(Parser)]
struct P {
    #[command(flatten)]
    a: ReplayArgs,
}

/// Every command that reads a recording, on `trace` (`base` the bundled recording it came from).
fn every_command(trace: &Path, base: &Path, out: &Path) -> Result<(), Defect> {
    let t = trace.to_str().unwrap();
    let b = base.to_str().unwrap();
    let o = |f: &str| out.join(f).to_str().unwrap().to_string();
    let written = |f: &dyn Fn(&mut Vec<u8>) -> anyhow::Result<std::process::ExitCode>| {
        let mut buf = Vec::new();
        f(&mut buf).map(|_| String::from_utf8_lossy(&buf).into_owned())
    };
    type Run<'a> = (&'a str, Box<dyn Fn() -> anyhow::Result<String> + 'a>);
    let runs: Vec<Run> = vec![
        (
            "report",
            Box::new(|| written(&|w| report_to(&parse::<R>(&[t]).a, w))),
        ),
        (
            "report --json",
            Box::new(|| written(&|w| report_to(&parse::<R>(&[t, "--json"]).a, w))),
        ),
        (
            "diff",
            Box::new(|| written(&|w| diff_to(&parse::<D>(&[b, t]).a, w))),
        ),
        (
            "export perfetto",
            Box::new(|| {
                let args = parse::<E>(&[t, "--format", "perfetto", "-o", &o("p.json")]).a;
                written(&|w| export_to(&args, w))
            }),
        ),
        (
            "export csv",
            Box::new(|| {
                let args = parse::<E>(&[t, "--format", "csv", "-o", &o("csv")]).a;
                written(&|w| export_to(&args, w))
            }),
        ),
        (
            "export parquet",
            Box::new(|| {
                let args = parse::<E>(&[t, "--format", "parquet", "-o", &o("pq")]).a;
                written(&|w| export_to(&args, w))
            }),
        ),
        ("info", Box::new(|| Ok(info_text(&Info::gather(trace)?)))),
        (
            "view --print",
            Box::new(|| view_text(&parse::<V>(&[t, "--print", "--width", "120"]).a)),
        ),
        (
            "replay --print",
            Box::new(|| replay_text(&parse::<P>(&[t, "--print", "--width", "120"]).a)),
        ),
    ];
    for (what, run) in runs {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).map_err(|p| {
            Defect::Panicked {
                what: what.into(),
                message: panic_text(&p),
            }
        })?;
        match result {
            Ok(text) => {
                OUTPUTS.fetch_add(1, Ordering::Relaxed);
                if what == "report --json" {
                    serde_json::from_str::<serde_json::Value>(&text).map_err(|source| {
                        Defect::NotJson {
                            what: what.into(),
                            source,
                        }
                    })?;
                } else {
                    // What the binary prints: the command's text, escaped where it came from
                    // the recording. `info` is escaped as the binary prints it.
                    let shown = if what == "info" {
                        cufall_text::escape_lines(&text).into_owned()
                    } else {
                        text
                    };
                    check_text(what, &shown)?;
                }
            }
            Err(e) => check_error(what, &e)?,
        }
    }
    let perfetto = std::fs::metadata(out.join("p.json")).map_or(0, |m| m.len());
    if perfetto > 200 << 20 {
        return Err(Defect::HugePerfetto { bytes: perfetto });
    }
    Ok(())
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_default()
}

#[test]
fn hostile_values_give_output_or_an_error_in_every_command_within_memory_and_time() {
    let cases = std::env::var("CUFALL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let seed = cufall_testkit::fuzz_seed(DEFAULT_SEED);
    eprintln!("fuzz_commands: seed {seed} (CUFALL_FUZZ_SEED={seed} repeats this run)");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        // A shrink step reruns every command: a few say enough.
        max_shrink_iters: 20,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let tmp = tempfile::tempdir().unwrap();
    let case = AtomicU32::new(0);
    let most = AtomicUsize::new(0);
    let started = Instant::now();
    let strategy = (any::<bool>(), prop::collection::vec(hostile(), 1..6));
    let result = runner.run(&strategy, |(host, changes)| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let dir = tmp.path().join(format!("case-{n}"));
        let name = if host { HOST } else { PHASES };
        let trace = copy_example(&dir, name);
        apply(&trace, &changes);
        let base = cufall_testkit::heap::reset_peak();
        let t0 = Instant::now();
        let outcome = every_command(&trace, &examples_dir().join(name), &dir);
        let took = t0.elapsed();
        let used = cufall_testkit::heap::peak().saturating_sub(base);
        most.fetch_max(used, Ordering::Relaxed);
        std::fs::remove_dir_all(&dir).unwrap();
        prop_assert!(
            outcome.is_ok(),
            "{name} {changes:?}: {}",
            outcome.unwrap_err()
        );
        prop_assert!(
            used < CASE_MEMORY,
            "{name} {changes:?}: {} MiB of heap",
            used >> 20
        );
        prop_assert!(took < CASE_LIMIT, "{name} {changes:?}: {took:?}");
        Ok(())
    });
    eprintln!(
        "fuzz_commands: {} cases in {:.1} s, {} outputs, {} errors, at most {} MiB of heap in a case",
        case.into_inner(),
        started.elapsed().as_secs_f64(),
        OUTPUTS.load(Ordering::Relaxed),
        ERRORS.load(Ordering::Relaxed),
        most.into_inner() >> 20
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
