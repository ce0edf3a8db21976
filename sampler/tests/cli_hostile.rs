//! Damaged or hostile input, made in each test from a copy of a bundled recording: frame sizes
//! the trace cannot fill, traces that span years, non-regular files, control characters and
//! endless names. None may panic, hang, abort, overdraw the frame or reach the terminal raw.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use assert_cmd::Command;
use cufall_sampler::args::look::{DisplayArgs, LookArgs, MAX_HEIGHT, MAX_WIDTH};
use cufall_sampler::commands::view::{ReplayArgs, ViewArgs, replay_text, view_text};
use cufall_testkit::examples::edit_manifest;
use cufall_trace::model::{DeviceId, DropReason, DropRecord, NvmlRow, NvtxRange, SampleBatch};
use cufall_trace::{Trace, TraceWriter};
use proptest::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};

/// The bundled recording with rows in every table (NVTX phases, kernels, drops, NVML).
const PHASES: &str = "h200-torch-phases-api.cufall";
/// A two-GPU recording without NVTX.
const TWO_GPUS: &str = "h200x2-two-gpu-bursts.cufall";
/// A recording with SM spread rows (max/avg/min) and no NVTX.
const SM_SPREAD: &str = "h200-sm-spread.cufall";

fn cufall() -> Command {
    Command::cargo_bin("cufall").expect("binary")
}

/// A copy of `examples/NAME` in `dir`, to damage.
fn copy_example(dir: &Path, name: &str) -> PathBuf {
    cufall_testkit::examples::copy_example(dir, name)
}

/// The manifest lists `n` GPUs (the first one's data, the others with none).
fn with_devices(trace: &Path, n: u32) {
    edit_manifest(trace, |v| {
        let first = v["devices"][0].clone();
        let devs: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let mut d = first.clone();
                d["id"] = i.into();
                d["uuid"] = format!("GPU-{i:08}").into();
                d
            })
            .collect();
        v["devices"] = devs.into();
    });
}

/// Rows written by `add` appended to the copy `trace` as new segments beside its own.
fn append_rows(trace: &Path, add: impl FnOnce(&mut TraceWriter)) {
    cufall_testkit::examples::splice_rows(trace, false, add);
}

fn look(width: u16, height: Option<u16>) -> DisplayArgs {
    DisplayArgs {
        look: LookArgs {
            width,
            height,
            print: true,
            ..LookArgs::default()
        },
        ..DisplayArgs::default()
    }
}

/// Every line of `text` fits in `width` columns, there are exactly `height` lines, and the
/// time axis and the keys are the last rows but one (nothing drew over them).
fn check_frame(text: &str, width: u16, height: usize) {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), height, "{text}");
    for l in &lines {
        assert!(l.chars().count() <= usize::from(width), "{l:?} in\n{text}");
    }
    assert!(
        lines[height - 3].starts_with('t'),
        "axis overdrawn:\n{text}"
    );
    assert!(lines[height - 2].starts_with("drops in view"), "{text}");
}

#[test]
fn the_smallest_height_refuses_with_the_minimum_for_the_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    for cmd in ["view", "replay"] {
        let out = cufall()
            .args([cmd, "--print", "--height", "4"])
            .arg(&trace)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd}: {err}");
        assert!(
            err.contains("--height 4 is too low for this trace: its frame needs at least 7 rows"),
            "{cmd}: {err}"
        );
        assert!(!err.contains("bug in cufall"), "{err}");
    }
    // The minimum itself draws every row once.
    let text = view_text(&ViewArgs {
        trace,
        display: look(80, Some(7)),
    })
    .unwrap();
    check_frame(&text, 80, 7);
    assert!(text.lines().any(|l| l.starts_with("phase")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("GPU0")), "{text}");
}

#[test]
fn gpus_that_do_not_fit_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    with_devices(&trace, 8);
    let text = view_text(&ViewArgs {
        trace: trace.clone(),
        display: look(100, Some(10)),
    })
    .unwrap();
    check_frame(&text, 100, 10);
    assert!(text.contains("5 of 8 GPUs not shown"), "{text}");
    assert!(text.contains("GPU2") && !text.contains("GPU3"), "{text}");
    // More GPUs than the tallest frame: the automatic height stops at the maximum.
    with_devices(&trace, 13_000);
    let text = view_text(&ViewArgs {
        trace,
        display: look(80, None),
    })
    .unwrap();
    check_frame(&text, 80, usize::from(MAX_HEIGHT));
    assert!(text.contains("of 13000 GPUs not shown"), "{text}");
}

#[test]
fn a_frame_past_the_maximum_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    cufall()
        .args(["view", "--print", "--width", "65535", "--height", "65535"])
        .arg(&trace)
        .assert()
        .failure()
        .stderr(format!(
            "cufall: --width 65535 is too wide: a printed frame has at most {MAX_WIDTH} columns\n"
        ));
    cufall()
        .args(["view", "--print", "--height", "1001"])
        .arg(&trace)
        .assert()
        .failure()
        .stderr(format!(
            "cufall: --height 1001 is too tall: a printed frame has at most {MAX_HEIGHT} rows\n"
        ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any frame size and GPU count over the bundled recordings, over their whole length or a
    /// window of it: a frame within its size with the axis in place, or the refusal that names
    /// the minimum.
    #[test]
    fn print_frames_never_overdraw(
        which in 0usize..3,
        gpus in 1u32..40,
        width in 20u16..300,
        height in 4u16..60,
        window in proptest::option::of((0i64..6_000_000_000, 1i64..3_000_000_000)),
    ) {
        // (recording, whether it has NVTX phases, GPUs in its samples); the SM-spread one draws
        // several rows per band.
        let (name, has_phases, sampled) =
            [(PHASES, true, 1), (TWO_GPUS, false, 2), (SM_SPREAD, false, 1)][which];
        let tmp = tempfile::tempdir().unwrap();
        let trace = copy_example(tmp.path(), name);
        with_devices(&trace, gpus);
        let mut display = look(width, Some(height));
        if let Some((from, len)) = window {
            display.look.from = Some(from);
            display.look.to = Some(from + len);
        }
        let phases = u16::from(has_phases);
        // A GPU whose samples are there is shown even when the manifest leaves it out.
        let gpus = gpus.max(sampled);
        let min = 6 + phases + u16::from(gpus > 1);
        match view_text(&ViewArgs { trace, display }) {
            Ok(text) => {
                prop_assert!(height >= min, "{height} < {min} drawn:\n{text}");
                check_frame(&text, width, usize::from(height));
                let rows = text.lines().filter(|l| l.starts_with("GPU")).count();
                if rows < gpus as usize {
                    // The wording shortens with the width: `N of M GPUs not shown`, `+N GPUs`.
                    let hidden = gpus as usize - rows;
                    let said = text.lines().any(|l| {
                        l.starts_with(&format!("{hidden} of {gpus} GPUs not shown"))
                            || l.starts_with(&format!("+{hidden} GPUs"))
                    });
                    prop_assert!(said, "{hidden} not counted:\n{text}");
                }
            }
            Err(e) => {
                let e = e.to_string();
                if height < min {
                    let want = format!("its frame needs at least {min} rows");
                    prop_assert!(e.contains(&want), "{e}");
                } else {
                    prop_assert!(e.contains("past the end"), "{e}");
                }
            }
        }
    }
}

#[test]
fn replay_print_at_small_heights_counts_hidden_gpus() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), TWO_GPUS);
    let text = replay_text(&ReplayArgs {
        trace,
        speed: 1.0,
        display: look(90, Some(7)),
    })
    .unwrap();
    check_frame(&text, 90, 7);
    assert!(text.contains("GPU0") && text.contains("GPU1"), "{text}");
}

/// Rows to append to a copy.
type AddRows = dyn Fn(&mut TraceWriter);

/// Replays and views a trace as `replay --print` and `view --print` do and says how long it
/// took.
fn replay_secs(trace: &Path) -> f64 {
    let t0 = std::time::Instant::now();
    let text = replay_text(&ReplayArgs {
        trace: trace.to_path_buf(),
        speed: 1.0,
        display: look(100, None),
    })
    .unwrap();
    check_frame(&text, 100, text.lines().count());
    assert!(text.contains("GPU0"), "{text}");
    let text = view_text(&ViewArgs {
        trace: trace.to_path_buf(),
        display: look(100, None),
    })
    .unwrap();
    check_frame(&text, 100, text.lines().count());
    t0.elapsed().as_secs_f64()
}

#[test]
fn replay_print_of_a_trace_spanning_centuries_is_quick() {
    let tmp = tempfile::tempdir().unwrap();
    let metrics = {
        let t = copy_example(tmp.path(), PHASES);
        Trace::open(&t).unwrap().manifest().metric_names().len()
    };
    let cases: [(&str, Box<AddRows>); 3] = [
        (
            "sample",
            Box::new(move |w| {
                let mut b = SampleBatch::new(DeviceId(0), metrics);
                b.start_ns.push(0);
                b.end_ns.push(30_000);
                b.values.iter_mut().for_each(|v| v.push(1.0));
                w.append_samples(&b).unwrap();
            }),
        ),
        (
            "nvml",
            Box::new(|w| {
                let row = NvmlRow {
                    t_ns: 0,
                    ..NvmlRow::default()
                };
                w.append_nvml(&[row]).unwrap();
            }),
        ),
        (
            "drop",
            Box::new(|w| {
                let d = DropRecord {
                    device: DeviceId(0),
                    start_ns: 0,
                    end_ns: i64::MAX,
                    reason: DropReason::Gap,
                    lost_samples: None,
                };
                w.append_drops(&[d]).unwrap();
            }),
        ),
    ];
    for (i, (what, add)) in cases.iter().enumerate() {
        for interval in [30_000i64, 1, 0] {
            let dir = tmp.path().join(format!("{what}-{interval}"));
            let trace = copy_example(&dir, PHASES);
            append_rows(&trace, |w| add(w));
            edit_manifest(&trace, |v| v["sampling"]["interval_ns"] = interval.into());
            let secs = replay_secs(&trace);
            assert!(
                secs < 10.0,
                "case {i} ({what}, interval {interval}): {secs:.1} s"
            );
        }
    }
}

/// `cufall ARGS TRACE` fails within 20 s with one line containing `needle`.
fn refused_quickly(args: &[&str], trace: &Path, needle: &str) {
    let out = cufall()
        .args(args)
        .arg(trace)
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
}

#[cfg(unix)]
#[test]
fn files_that_are_not_plain_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.json");
    let out = out.to_str().unwrap();
    let export: &[&str] = &["export", "--format", "perfetto", "-o", out];
    let commands: [&[&str]; 4] = [&["info"], &["report"], &["view", "--print"], export];
    // The index, then a segment, as a never-ending device.
    let trace = copy_example(&tmp.path().join("index"), PHASES);
    fs::remove_file(trace.join("index.jsonl")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", trace.join("index.jsonl")).unwrap();
    for args in commands {
        refused_quickly(
            args,
            &trace,
            "index.jsonl is a character device, not a plain file",
        );
    }
    let trace = copy_example(&tmp.path().join("segment"), PHASES);
    fs::remove_file(trace.join("nvtx/000000.parquet")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", trace.join("nvtx/000000.parquet")).unwrap();
    for args in commands {
        refused_quickly(
            args,
            &trace,
            "nvtx/000000.parquet is a character device, not a plain file",
        );
    }
    // The manifest as a FIFO nobody writes to: opening it would wait forever.
    let trace = copy_example(&tmp.path().join("fifo"), PHASES);
    fs::remove_file(trace.join("manifest.json")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(trace.join("manifest.json"))
        .status()
        .unwrap();
    assert!(made.success());
    for args in commands {
        refused_quickly(
            args,
            &trace,
            "manifest.json is a FIFO (named pipe), not a plain file",
        );
    }
}

#[test]
fn a_segment_longer_than_its_index_says_is_read_no_further() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    let seg = trace.join("nvtx/000000.parquet");
    let written = fs::metadata(&seg).unwrap().len();
    let mut bytes = fs::read(&seg).unwrap();
    bytes.resize(bytes.len() + (8 << 20), 0);
    fs::write(&seg, bytes).unwrap();
    let now = written + (8 << 20);
    refused_quickly(
        &["info"],
        &trace,
        &format!("nvtx/000000.parquet has {now} bytes where {written} were written"),
    );
}

/// Control sequences a profiled program could name a range with: clear the screen, set the
/// window title, ring the bell, return to the start of the line.
const HOSTILE: &str = "wipe\x1b[2J\x1b]0;owned\x07\rbell\x07";
/// What text output shows for it.
const HOSTILE_SHOWN: &str = "wipe\\e[2J\\e]0;owned\\u{7}\\rbell\\u{7}";

/// A copy of the phases recording with NVTX ranges named `names` inside its first range, and a
/// hostile host name and command line.
fn hostile_copy(dir: &Path, names: &[String]) -> PathBuf {
    let trace = copy_example(dir, PHASES);
    let first = Trace::open(&trace).unwrap().nvtx().unwrap()[0].clone();
    let ranges: Vec<NvtxRange> = names
        .iter()
        .map(|n| NvtxRange {
            name: n.clone(),
            depth: first.depth + 1,
            ..first.clone()
        })
        .collect();
    append_rows(&trace, |w| w.append_nvtx(&ranges).unwrap());
    edit_manifest(&trace, |v| {
        v["hostname"] = HOSTILE.into();
        v["command"][0] = format!("cufall{HOSTILE}").into();
    });
    trace
}

fn stdout_of(args: &[&std::ffi::OsStr]) -> String {
    let out = cufall()
        .args(args)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// No control character but line ends reaches the terminal.
fn assert_no_control(what: &str, text: &str) {
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n') {
        panic!("{what}: raw {c:?} in\n{text}");
    }
}

#[test]
fn control_characters_in_names_are_escaped_on_text_and_kept_in_json() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = hostile_copy(tmp.path(), &[HOSTILE.to_string()]);
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(PHASES);
    let t = trace.as_os_str();
    let runs: [(&str, Vec<&std::ffi::OsStr>); 4] = [
        ("info", vec!["info".as_ref(), t]),
        ("report", vec!["report".as_ref(), t]),
        ("diff", vec!["diff".as_ref(), bundled.as_os_str(), t]),
        (
            "view",
            vec![
                "view".as_ref(),
                "--print".as_ref(),
                "--width".as_ref(),
                "300".as_ref(),
                t,
            ],
        ),
    ];
    for (what, args) in &runs {
        let text = stdout_of(args);
        assert_no_control(what, &text);
        if *what != "view" {
            assert!(text.contains(HOSTILE_SHOWN), "{what}: {text}");
        }
    }
    let info = stdout_of(&["info".as_ref(), t]);
    assert!(
        info.contains(&format!("host          {HOSTILE_SHOWN}\n")),
        "{info}"
    );
    assert!(info.contains(&format!("cufall{HOSTILE_SHOWN}")), "{info}");
    // --json keeps the names as recorded (JSON escapes them itself).
    let json: serde_json::Value =
        serde_json::from_str(&stdout_of(&["info".as_ref(), t, "--json".as_ref()])).unwrap();
    assert_eq!(json["hostname"], HOSTILE);
    let report: serde_json::Value =
        serde_json::from_str(&stdout_of(&["report".as_ref(), t, "--json".as_ref()])).unwrap();
    assert!(
        report
            .to_string()
            .contains(&serde_json::to_string(HOSTILE).unwrap())
    );
    // So does an export.
    let csv = tmp.path().join("csv");
    stdout_of(&[
        "export".as_ref(),
        t,
        "--format".as_ref(),
        "csv".as_ref(),
        "-o".as_ref(),
        csv.as_os_str(),
    ]);
    let nvtx = fs::read_to_string(csv.join("nvtx.csv")).unwrap();
    assert!(nvtx.contains(HOSTILE), "{nvtx:?}");
}

#[test]
fn long_and_wide_names_are_cut_and_aligned_on_text_and_whole_in_json_to_the_read_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let long = "x".repeat(10_000);
    let huge = "y".repeat(1 << 20);
    let wide = "解码🚀".repeat(3);
    let trace = hostile_copy(tmp.path(), &[long.clone(), huge.clone(), wide.clone()]);
    let t = trace.as_os_str();
    let report = stdout_of(&["report".as_ref(), t]);
    assert!(report.len() < 200_000, "report of {} bytes", report.len());
    let widest = report.lines().map(cufall_text::width).max().unwrap();
    assert!(widest < 600, "a line {widest} columns wide");
    assert!(report.contains(&format!("{}…", "x".repeat(cufall_text::NAME_WIDTH - 5))));
    assert!(report.contains(&wide), "{report}");
    // The PHASES table: every row as wide as its header (right-aligned columns line up).
    let table: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.starts_with("PHASES"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(table.len() > 3, "{report}");
    let w = cufall_text::width(table[0]);
    for row in &table {
        assert_eq!(
            cufall_text::width(row),
            w,
            "{row:?} in\n{}",
            table.join("\n")
        );
    }
    let info = stdout_of(&["info".as_ref(), t]);
    assert!(info.len() < 20_000, "info of {} bytes", info.len());
    // --json has names whole up to the length the reader keeps; past it, cut and marked.
    let json = stdout_of(&["report".as_ref(), t, "--json".as_ref()]);
    assert!(json.contains(&long) && json.contains(&wide));
    let limit = cufall_trace::parquet::TEXT_LIMIT;
    let cut = format!(
        "{}{}",
        &huge[..limit],
        cufall_trace::parquet::cut_marker(huge.len())
    );
    assert!(json.contains(&cut) && !json.contains(&huge));
}

#[test]
fn names_from_the_trace_in_warnings_and_errors_are_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = copy_example(tmp.path(), PHASES);
    // An index line naming a segment that is not there: its name is quoted in a warning.
    let mut index = fs::read_to_string(trace.join("index.jsonl")).unwrap();
    let line = index.lines().next().unwrap().to_string();
    let mut e: serde_json::Value = serde_json::from_str(&line).unwrap();
    e["file"] = format!("samples/{HOSTILE}.parquet").into();
    index.push_str(&format!("{e}\n"));
    fs::write(trace.join("index.jsonl"), index).unwrap();
    for args in [
        &["view", "--print"][..],
        &["report"],
        &["export", "--format", "perfetto", "-o"],
    ] {
        let mut cmd = cufall();
        cmd.args(args);
        if args[0] == "export" {
            cmd.arg(tmp.path().join("out.json"));
        }
        let out = cmd.arg(&trace).output().unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{args:?}: {all}");
        assert_no_control(args[0], &all);
        assert!(all.contains(HOSTILE_SHOWN), "{args:?}: {all}");
    }
    // A manifest naming another format: the refusal quotes the name.
    edit_manifest(&trace, |v| v["format"] = HOSTILE.into());
    let out = cufall().arg("info").arg(&trace).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_no_control("info", &err);
    assert!(err.contains(HOSTILE_SHOWN), "{err}");
}
