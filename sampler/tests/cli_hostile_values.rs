//! Valid but hostile recordings, made in each test from a copy of a bundled one with values
//! written through the trace's own writer: names that break a byte-slicing parser, rows that
//! cannot be true, rows read twice, names that a dictionary shares thousands of times, an index
//! of blank lines. The built `cufall` must not panic, must leave what cannot be true out of
//! every figure with one warning per kind, and must stay under 1 GiB of memory.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use cufall_testkit::examples::{copy_example, rewrite_text, splice_rows};
use cufall_trace::Trace;
use cufall_trace::model::{DeviceId, KernelRecord};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Rows in every table of a 1.1 recording (NVTX phases, kernels, API calls, drops, NVML).
const PHASES: &str = "h200-torch-phases-api.cufall";
/// A 1.5 s recording of several samples segments.
const SHORT: &str = "h200-specdec-0.5b-graphs-off.cufall";
/// A 1.2 recording with host stacks.
const HOST: &str = "h200-torch-phases-host.cufall";

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

/// The output of `cufall ARGS`, which must succeed without an internal error.
fn run(args: &[&OsStr]) -> (String, String) {
    let out = cufall()
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    assert!(!err.contains("internal error"), "{args:?}: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

fn report_json(trace: &Path) -> serde_json::Value {
    let (out, _) = run(&["report".as_ref(), trace.as_os_str(), "--json".as_ref()]);
    serde_json::from_str(&out).unwrap()
}

/// A report's figures: the JSON without its warnings and the trace's path.
fn figures(mut report: serde_json::Value) -> serde_json::Value {
    let o = report.as_object_mut().unwrap();
    o.remove("warnings");
    o.remove("trace");
    report
}

fn warnings(report: &serde_json::Value) -> Vec<String> {
    report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn non_ascii_text_inside_brackets_of_kernel_names_is_no_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    let bundled = cufall_testkit::examples::examples_dir().join(PHASES);
    let mut kernels = Trace::open(&trace).unwrap().kernels().unwrap();
    let names = [
        "k<é>",
        "k‹é>",
        "ns::f(ü, [é])::{λ(é)#1}",
        "解码<ü>::核(é)",
        "\u{1b}[2Jk<\u{202e}é>",
    ];
    for (k, name) in kernels.iter_mut().zip(names) {
        k.name = name.to_string();
    }
    splice_rows(&trace, true, |w| w.append_kernels(&kernels).unwrap());
    let t = trace.as_os_str();
    let (text, _) = run(&["report".as_ref(), t]);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text}"
    );
    run(&["report".as_ref(), t, "--json".as_ref()]);
    run(&["diff".as_ref(), bundled.as_os_str(), t]);
}

/// The samples of `trace`, with `extra` (start, end) rows of GPU 0 and the first `twice` rows
/// of each GPU again, all in one segment per table.
fn samples_with(trace: &Path, extra: &[(i64, i64)], twice: usize) {
    let batches = Trace::open(trace).unwrap().sample_batches().unwrap();
    splice_rows(trace, true, |w| {
        for b in &batches {
            let mut all = b.clone();
            let row = |i: usize| -> Vec<f64> { b.values.iter().map(|v| v[i]).collect() };
            for i in 0..twice.min(b.len()) {
                all.push(b.start_ns[i], b.end_ns[i], &row(i));
            }
            if b.device == DeviceId(0) {
                for (s, e) in extra {
                    all.push(*s, *e, &row(0));
                }
            }
            w.append_samples(&all).unwrap();
        }
    });
}

#[test]
fn samples_that_cannot_be_true_are_left_out_of_every_figure_and_warned_once_per_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = copy_example(&tmp.path().join("clean"), SHORT);
    samples_with(&clean, &[], 0);
    let hostile = copy_example(&tmp.path().join("hostile"), SHORT);
    let first = Trace::open(&hostile).unwrap().sample_batches().unwrap()[0].clone();
    let t = first.start_ns[10];
    samples_with(
        &hostile,
        &[
            (t + 5, t - 500_000_000),
            (t + 7, i64::MAX),
            (i64::MAX - 9, i64::MAX - 1),
        ],
        500,
    );
    let (want, got) = (report_json(&clean), report_json(&hostile));
    let w = warnings(&got);
    for line in [
        "1 row(s) end before they start (samples: 1): left out of every figure",
        "2 row(s) lie more than a minute outside the recording (manifest.json's created_unix_ns to end_unix_ns) (samples: 2): left out of every figure",
        "500 row(s) repeat a row already read (the same GPU or thread at the same time) (samples: 500): left out of every figure",
    ] {
        assert!(w.iter().any(|x| x == line), "{line:?} not in {w:#?}");
    }
    assert_eq!(w.len(), warnings(&want).len() + 3, "{w:#?}");
    assert_eq!(figures(got), figures(want));
    // The text report and the diff say the same.
    let (text, _) = run(&["report".as_ref(), hostile.as_os_str()]);
    assert!(text.contains("1 row(s) end before they start"), "{text}");
    let (diff, _) = run(&["diff".as_ref(), clean.as_os_str(), hostile.as_os_str()]);
    for (at, _) in diff.match_indices(" pp") {
        assert!(diff[..at].ends_with("0.0"), "a change in\n{diff}");
    }
    // So do the views, whose figures come from the same reader.
    let (_, err) = run(&["view".as_ref(), "--print".as_ref(), hostile.as_os_str()]);
    assert!(
        err.contains("2 row(s) lie more than a minute outside the recording"),
        "{err}"
    );
}

#[test]
fn an_index_span_past_the_recording_is_no_hole_in_it() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), SHORT);
    let index = fs::read_to_string(trace.join("index.jsonl")).unwrap();
    let mut lines: Vec<serde_json::Value> = index
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seg = lines
        .iter_mut()
        .filter(|e| e["table"] == "samples")
        .nth(1)
        .unwrap();
    seg["t_max_ns"] = i64::MAX.into();
    fs::remove_file(trace.join(seg["file"].as_str().unwrap())).unwrap();
    let text: String = lines.iter().map(|e| format!("{e}\n")).collect();
    fs::write(trace.join("index.jsonl"), text).unwrap();

    let report = report_json(&trace);
    let lost_ns: i64 = report["drops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["dropped_ns"].as_i64().unwrap())
        .sum();
    assert!(
        lost_ns < 10_000_000_000,
        "{lost_ns} ns lost in a 1.5 s recording"
    );
    assert!(
        warnings(&report).iter().any(|w| w.contains(
            "1 row(s) lie more than a minute outside the recording (manifest.json's created_unix_ns to end_unix_ns) (index.jsonl: 1)"
        )),
        "{:#?}",
        warnings(&report)
    );
    let (info, _) = run(&["info".as_ref(), trace.as_os_str(), "--json".as_ref()]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    let text = info.to_string();
    assert!(!text.contains(&i64::MAX.to_string()), "{text}");
}

#[test]
fn host_samples_read_twice_count_once() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = copy_example(&tmp.path().join("clean"), HOST);
    let hostile = copy_example(&tmp.path().join("hostile"), HOST);
    let rows = Trace::open(&clean).unwrap().host_samples().unwrap();
    splice_rows(&clean, true, |w| w.append_host_samples(&rows).unwrap());
    let twice: Vec<_> = rows.iter().chain(&rows).cloned().collect();
    splice_rows(&hostile, true, |w| w.append_host_samples(&twice).unwrap());
    let (want, got) = (report_json(&clean), report_json(&hostile));
    let line = format!(
        "{} row(s) repeat a row already read (the same GPU or thread at the same time) (host_samples: {}): left out of every figure",
        rows.len(),
        rows.len()
    );
    assert!(warnings(&got).contains(&line), "{:#?}", warnings(&got));
    assert!(want["host"].is_object(), "{want}");
    assert_eq!(figures(got), figures(want));
}

/// The most address space a command may take (`prlimit --as`): 1 GiB.
const MEMORY_LIMIT: u64 = 1 << 30;

/// `cufall ARGS` under [`MEMORY_LIMIT`] of address space (with glibc's arenas held to two, so
/// that the limit bounds what is used rather than what threads reserve); its peak resident
/// memory in MiB, read from /proc while it ran.
fn run_bounded(args: &[&OsStr]) -> u64 {
    let mut child = std::process::Command::new("prlimit")
        .arg(format!("--as={MEMORY_LIMIT}"))
        .arg(assert_cmd::cargo::cargo_bin("cufall"))
        .args(args)
        .env("MALLOC_ARENA_MAX", "2")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if let Ok(text) = fs::read_to_string(&status_file) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak_kib = peak_kib.max(hwm.unwrap_or(0));
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{args:?} hangs"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        status.success(),
        "{args:?} under {MEMORY_LIMIT} bytes: {err}"
    );
    peak_kib >> 10
}

/// Every command that reads a recording, on `trace`, each under [`MEMORY_LIMIT`]; the largest
/// peak seen (MiB).
fn every_command_bounded(trace: &Path, out: &Path) -> u64 {
    let t = trace.as_os_str();
    let bundled = cufall_testkit::examples::examples_dir().join(PHASES);
    let export = |format: &str| -> Vec<PathBuf> {
        let o = out.join(format!("out-{format}"));
        vec![
            "export".into(),
            t.into(),
            "--format".into(),
            format.into(),
            "-o".into(),
            o,
        ]
    };
    let runs: Vec<Vec<PathBuf>> = vec![
        vec!["info".into(), t.into()],
        vec!["report".into(), t.into()],
        vec!["report".into(), t.into(), "--json".into()],
        vec!["diff".into(), bundled, t.into()],
        vec!["view".into(), "--print".into(), t.into()],
        vec!["replay".into(), "--print".into(), t.into()],
        export("perfetto"),
        export("csv"),
        export("parquet"),
    ];
    let mut peak = 0;
    for args in &runs {
        let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let mib = run_bounded(&args);
        eprintln!("{:?}: peak {mib} MiB", &args[..args.len().min(4)]);
        peak = peak.max(mib);
    }
    let perfetto = fs::metadata(out.join("out-perfetto")).map_or(0, |m| m.len());
    assert!(
        perfetto < 100 << 20,
        "the Perfetto export is {perfetto} bytes"
    );
    peak
}

/// What stands for the long name in rows written through the writer.
const PLACEHOLDER: &str = "@long@";

/// A name of about 1 MB (ESC and `é`s): under the writer's dictionary page limit (1 MiB), so
/// that every row of a segment shares one copy, as in a file pyarrow writes.
fn megabyte_name() -> Vec<u8> {
    format!("\u{1b}{}", "é".repeat(499_999)).into_bytes()
}

#[test]
fn kernels_sharing_a_megabyte_name_stay_under_a_gibibyte_in_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    let kernels = Trace::open(&trace).unwrap().kernels().unwrap();
    let rows: Vec<KernelRecord> = (0..2_000)
        .map(|i| KernelRecord {
            name: PLACEHOLDER.into(),
            ..kernels[i % kernels.len()].clone()
        })
        .collect();
    splice_rows(&trace, true, |w| w.append_kernels(&rows).unwrap());
    rewrite_text(&trace, "kernels", PLACEHOLDER, megabyte_name());
    let seg = fs::read_dir(trace.join("kernels")).unwrap().next().unwrap();
    let bytes = seg.unwrap().metadata().unwrap().len();
    assert!(
        bytes < 1 << 20,
        "one segment of {bytes} bytes, the name in it once"
    );
    let peak = every_command_bounded(&trace, tmp.path());
    eprintln!("2,000 kernels sharing a 1 MB name in one segment: peak {peak} MiB");
    // --json has the name cut, and says so.
    let (json, _) = run(&["report".as_ref(), trace.as_os_str(), "--json".as_ref()]);
    assert!(
        json.contains("…[999999 bytes, cut on reading]"),
        "the cut is marked"
    );
}

#[test]
fn stack_frames_sharing_a_megabyte_name_stay_under_a_gibibyte_in_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), HOST);
    let mut frames = Trace::open(&trace).unwrap().stacks().unwrap();
    // The first 2,000 frames of the recording's some 50,000, in one segment.
    for f in frames.iter_mut().take(2_000) {
        f.function = PLACEHOLDER.into();
        f.file = PLACEHOLDER.into();
    }
    splice_rows(&trace, true, |w| w.append_stacks(&frames).unwrap());
    rewrite_text(&trace, "stacks", PLACEHOLDER, megabyte_name());
    let peak = every_command_bounded(&trace, tmp.path());
    eprintln!("2,000 stack frames sharing a 1 MB name: peak {peak} MiB");
}

#[test]
fn an_index_of_a_quarter_gigabyte_of_blank_lines_reads_in_little_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), SHORT);
    let mut index = fs::read(trace.join("index.jsonl")).unwrap();
    index.extend(std::iter::repeat_n(b'\n', 250_000_000));
    fs::write(trace.join("index.jsonl"), index).unwrap();
    let started = std::time::Instant::now();
    let peak = run_bounded(&["info".as_ref(), trace.as_os_str()]);
    eprintln!(
        "info, 250 MB of blank lines: peak {peak} MiB, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(peak < 200, "{peak} MiB");
}

#[test]
fn an_unknown_kind_in_the_host_tables_is_refused_by_every_command_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), HOST);
    rewrite_text(&trace, "host_samples", "released", b"maybe".to_vec());
    let t = trace.as_os_str();
    let out_dir = tmp.path().join("csv");
    let runs: [Vec<&OsStr>; 5] = [
        vec!["report".as_ref(), t],
        vec!["view".as_ref(), "--print".as_ref(), t],
        vec!["replay".as_ref(), "--print".as_ref(), t],
        vec![
            "export".as_ref(),
            t,
            "--format".as_ref(),
            "csv".as_ref(),
            "-o".as_ref(),
            out_dir.as_os_str(),
        ],
        vec!["diff".as_ref(), t, t],
    ];
    for args in &runs {
        let out = cufall()
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted it");
        assert!(
            err.contains("holds `maybe`") || err.contains("`maybe`"),
            "{args:?}: {err}"
        );
        assert!(err.contains("host_samples"), "{args:?}: {err}");
    }
}

#[test]
fn exports_name_the_files_they_wrote_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = copy_example(tmp.path(), SHORT);
    let hostile = tmp.path().join("run\u{1b}[2J\u{202e}.cufall");
    fs::rename(&plain, &hostile).unwrap();
    for format in ["perfetto", "csv", "parquet"] {
        let out = cufall()
            .current_dir(tmp.path())
            .args([
                "export".as_ref(),
                hostile.as_os_str(),
                "--format".as_ref(),
                format.as_ref(),
            ])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("wrote "), "{text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{format}: {text:?}"
        );
        assert!(text.contains("run\\e[2J\\u{202e}"), "{format}: {text}");
    }
}
