//! Fuzzing the reader with damaged copies of a real recording (a 1.1 one with rows in every table
//! of its version, or a 1.2 one with host stacks): bytes flipped or cut in any file
//! (manifest, index, segments), segments damaged behind a matching checksum so that the damage
//! reaches the Parquet decoder, manifest and index fields set to values of any JSON type, files
//! removed or replaced by folders. Opening and reading every table must give rows or a
//! `TraceError` with a message: never a panic, never a hang (each case has a time bound), and
//! never more than [`CASE_MEMORY`] of heap (counted by `cufall_testkit::heap`).
//!
//! CI runs a fixed number of cases (`DEFAULT_CASES`, about 15 s on 2 cores in a debug build)
//! from a fixed seed, so that CI gives the same answer on the same code;
//! `CUFALL_FUZZ_SEED=random CUFALL_FUZZ_CASES=100000 cargo test -p cufall-trace --release --test
//! fuzz` runs a long one from a new seed (it prints the seed; `CUFALL_FUZZ_SEED=<n>` repeats it).

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_testkit::examples::copy_dir;
use cufall_trace::{Table, Trace, TraceError};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Recordings with rows in every table of their versions, so that every table's decoder is
/// reached: 1.1 (API calls, capture) and 1.2 (stacks, host samples).
const EXAMPLES: [&str; 2] = [
    "h200-torch-phases-api.cufall",
    "host-stacks/cpu-host-phases.cufall",
];
/// Cases in CI; `CUFALL_FUZZ_CASES` sets another count.
const DEFAULT_CASES: u32 = 60;
/// The longest one case may take, open and every read, before it counts as a hang. A whole
/// read of the example takes well under a second in a debug build.
const CASE_LIMIT: Duration = Duration::from_secs(30);
/// The most heap one case may take above what was in use when it began.
const CASE_MEMORY: usize = 1 << 30;

#[global_allocator]
static HEAP: cufall_testkit::heap::Counting = cufall_testkit::heap::Counting;

fn example(which: usize) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(EXAMPLES[which % EXAMPLES.len()])
}

/// The example's files, relative to its folder, sorted.
fn files(which: usize) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().to_path_buf();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let root = example(which);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// Fields of the manifest a mutation may set, as JSON pointers.
const MANIFEST_FIELDS: [&str; 18] = [
    "/format",
    "/schema_version",
    "/cufall_version",
    "/clock",
    "/created_unix_ns",
    "/end_unix_ns",
    "/status",
    "/devices",
    "/devices/0/id",
    "/devices/0/sm_count",
    "/sampling",
    "/sampling/interval_ns",
    "/sampling/metrics",
    "/sampling/metrics/0/name",
    "/nvml_interval_ns",
    "/heatmaps",
    "/heatmaps/0/metric",
    "/extra",
];

/// Fields of an index line a mutation may set.
const INDEX_FIELDS: [&str; 8] = [
    "table",
    "file",
    "bytes",
    "crc32",
    "rows",
    "rows_per_device",
    "t_min_ns",
    "t_max_ns",
];

/// One change to the copy. Indexes into lists (files, fields, lines, offsets) are taken modulo
/// the list's length when applied.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR `mask` into `count` bytes from byte `at` of a file.
    Flip {
        file: usize,
        at: usize,
        mask: u8,
        count: usize,
    },
    /// Flip bytes of a segment and give its index entry the new checksum, so the damage reaches
    /// the Parquet decoder instead of stopping at the checksum.
    FlipBehindChecksum {
        segment: usize,
        at: usize,
        mask: u8,
        count: usize,
    },
    /// Keep the first `keep` bytes of a file.
    Truncate { file: usize, keep: usize },
    /// Set a manifest field (added where missing, when its parent exists).
    ManifestValue { field: usize, value: Value },
    /// Remove a manifest field.
    ManifestRemove { field: usize },
    /// Set a field of one index line.
    IndexValue {
        line: usize,
        field: usize,
        value: Value,
    },
    /// Put a line of text into the index.
    IndexLine { line: usize, text: String },
    /// Remove a file.
    Remove { file: usize },
    /// Put an empty folder where a file was.
    FolderInPlace { file: usize },
}

fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(0.5f64), Just(-1.5), Just(1e308), Just(-1e-300)].prop_map(Value::from),
        "[a-z0-9_.]{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("1.2"),
            Just("2.0"),
            Just("0.1"),
            Just("99999999999.0"),
            Just("cufall-trace"),
            Just("complete"),
            Just("recording"),
            Just("samples/000000.parquet"),
            Just("../manifest.json"),
            Just("\u{feff}1.1"),
        ]
        .prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{"name": "m", "id": 0}])),
        Just(json!({"0": 18446744073709551615u64})),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0usize..40_000;
    prop_oneof![
        3 => (any::<usize>(), at.clone(), 1u8..=255, 1usize..64)
            .prop_map(|(file, at, mask, count)| Mutation::Flip { file, at, mask, count }),
        8 => (any::<usize>(), at.clone(), 1u8..=255, 1usize..16).prop_map(
            |(segment, at, mask, count)| Mutation::FlipBehindChecksum { segment, at, mask, count }
        ),
        2 => (any::<usize>(), at).prop_map(|(file, keep)| Mutation::Truncate { file, keep }),
        2 => (any::<usize>(), json_value())
            .prop_map(|(field, value)| Mutation::ManifestValue { field, value }),
        1 => any::<usize>().prop_map(|field| Mutation::ManifestRemove { field }),
        2 => (any::<usize>(), any::<usize>(), json_value())
            .prop_map(|(line, field, value)| Mutation::IndexValue { line, field, value }),
        1 => (any::<usize>(), "[ -~]{0,40}")
            .prop_map(|(line, text)| Mutation::IndexLine { line, text }),
        1 => any::<usize>().prop_map(|file| Mutation::Remove { file }),
        1 => any::<usize>().prop_map(|file| Mutation::FolderInPlace { file }),
    ]
}

/// The index's lines as JSON values (a line that no longer parses is kept as a string).
fn read_index(dir: &Path) -> Option<Vec<Value>> {
    let text = fs::read(dir.join("index.jsonl")).ok()?;
    Some(
        String::from_utf8_lossy(&text)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::from(l)))
            .collect(),
    )
}

fn write_index(dir: &Path, lines: &[Value]) {
    let text: Vec<String> = lines
        .iter()
        .map(|l| match l {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    fs::write(dir.join("index.jsonl"), text.join("\n") + "\n").unwrap();
}

fn flip(bytes: &mut [u8], at: usize, mask: u8, count: usize) {
    if bytes.is_empty() {
        return;
    }
    let start = at % bytes.len();
    for b in bytes.iter_mut().skip(start).take(count) {
        *b ^= mask;
    }
}

/// Applies `m` to the copy at `dir`; a change whose file is gone already does nothing.
fn apply(dir: &Path, files: &[String], m: &Mutation) {
    let pick = |i: usize| dir.join(&files[i % files.len()]);
    match m {
        Mutation::Flip {
            file,
            at,
            mask,
            count,
        } => {
            let path = pick(*file);
            if let Ok(mut bytes) = fs::read(&path) {
                flip(&mut bytes, *at, *mask, *count);
                fs::write(&path, bytes).unwrap();
            }
        }
        Mutation::FlipBehindChecksum {
            segment,
            at,
            mask,
            count,
        } => {
            let segments: Vec<&String> = files.iter().filter(|f| f.ends_with(".parquet")).collect();
            let rel = segments[segment % segments.len()];
            let path = dir.join(rel);
            let Ok(mut bytes) = fs::read(&path) else {
                return;
            };
            flip(&mut bytes, *at, *mask, *count);
            fs::write(&path, &bytes).unwrap();
            if let Some(mut lines) = read_index(dir) {
                for line in &mut lines {
                    if line.get("file").and_then(Value::as_str) == Some(rel.as_str()) {
                        line["bytes"] = (bytes.len() as u64).into();
                        line["crc32"] = crc32fast::hash(&bytes).into();
                    }
                }
                write_index(dir, &lines);
            }
        }
        Mutation::Truncate { file, keep } => {
            let path = pick(*file);
            if let Ok(bytes) = fs::read(&path) {
                let keep = keep % (bytes.len() + 1);
                fs::write(&path, &bytes[..keep]).unwrap();
            }
        }
        Mutation::ManifestValue { field, value } => {
            edit_manifest(dir, |m| {
                let pointer = MANIFEST_FIELDS[field % MANIFEST_FIELDS.len()];
                let (parent, name) = pointer.rsplit_once('/').unwrap();
                if let Some(slot) = m.pointer_mut(pointer) {
                    *slot = value.clone();
                } else if let Some(Value::Object(o)) = m.pointer_mut(parent) {
                    o.insert(name.to_string(), value.clone());
                }
            });
        }
        Mutation::ManifestRemove { field } => {
            edit_manifest(dir, |m| {
                let pointer = MANIFEST_FIELDS[field % MANIFEST_FIELDS.len()];
                let (parent, name) = pointer.rsplit_once('/').unwrap();
                if let Some(Value::Object(o)) = m.pointer_mut(parent) {
                    o.remove(name);
                }
            });
        }
        Mutation::IndexValue { line, field, value } => {
            if let Some(mut lines) = read_index(dir).filter(|l| !l.is_empty()) {
                let n = lines.len();
                if let Value::Object(o) = &mut lines[line % n] {
                    o.insert(
                        INDEX_FIELDS[field % INDEX_FIELDS.len()].to_string(),
                        value.clone(),
                    );
                }
                write_index(dir, &lines);
            }
        }
        Mutation::IndexLine { line, text } => {
            if let Some(mut lines) = read_index(dir) {
                let at = line % (lines.len() + 1);
                lines.insert(at, Value::from(text.as_str()));
                write_index(dir, &lines);
            }
        }
        Mutation::Remove { file } => {
            let _ = fs::remove_file(pick(*file));
        }
        Mutation::FolderInPlace { file } => {
            let path = pick(*file);
            if fs::remove_file(&path).is_ok() {
                fs::create_dir(&path).unwrap();
            }
        }
    }
}

/// Edits the manifest as JSON, if it still is JSON.
fn edit_manifest(dir: &Path, f: impl FnOnce(&mut Value)) {
    let path = dir.join("manifest.json");
    let Ok(bytes) = fs::read(&path) else { return };
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return;
    };
    f(&mut v);
    fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// What the cases came to, printed at the end so that a run shows it reached the decoders:
/// copies refused on opening, copies opened, and reads of opened copies that gave an error.
static REFUSED: AtomicU32 = AtomicU32::new(0);
static OPENED: AtomicU32 = AtomicU32::new(0);
static READ_ERRORS: AtomicU32 = AtomicU32::new(0);

/// An error a user would see: it must say something, and never an empty quotation.
fn check(e: &TraceError) {
    let m = e.to_string();
    assert!(!m.trim().is_empty(), "an empty message: {e:?}");
    assert!(!m.contains("``"), "an empty quotation: {m}");
}

/// Opens the trace and reads all of it the ways the commands do.
fn read_everything(dir: &Path) {
    let trace = match Trace::open(dir) {
        Ok(t) => t,
        Err(e) => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return check(&e);
        }
    };
    OPENED.fetch_add(1, Ordering::Relaxed);
    let results: Vec<Result<(), TraceError>> = vec![
        trace.summary().map(drop),
        trace.drops().map(drop),
        trace.drops_frame().map(drop),
        trace.nvml().map(drop),
        trace.nvtx().map(drop),
        trace.kernels().map(drop),
        trace.api_calls().map(drop),
        trace.capture_events().map(drop),
        trace.stacks().map(drop),
        trace.host_samples().map(drop),
        trace.sample_batches().map(drop),
    ];
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        READ_ERRORS.fetch_add(1, Ordering::Relaxed);
        check(e);
    }
    for table in Table::ALL {
        for read in [trace.frame(table).map(drop), trace.check_rows(table)] {
            if let Err(e) = read {
                READ_ERRORS.fetch_add(1, Ordering::Relaxed);
                check(&e);
            }
        }
    }
    let metrics = trace.metric_names();
    let start = trace.manifest().created_unix_ns;
    let window =
        trace.samples_between(start, start.saturating_add(2_000_000_000), &metrics, |_| {
            Ok::<(), TraceError>(())
        });
    if let Err(e) = window {
        READ_ERRORS.fetch_add(1, Ordering::Relaxed);
        check(&e);
    }
    let _ = trace.warnings();
}

/// How a case failed.
#[derive(Debug, thiserror::Error)]
enum CaseFailure {
    #[error("panicked")]
    Panicked,
    /// The panic's message, empty when it was not text.
    #[error("panicked: {0}")]
    PanickedWith(String),
    #[error("took longer than {0:?}")]
    Hung(std::time::Duration),
}

/// Runs `read_everything` on its own thread: a panic fails the case, and so does a run past
/// [`CASE_LIMIT`].
fn bounded(dir: PathBuf) -> Result<(), CaseFailure> {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        read_everything(&dir);
        let _ = tx.send(());
    });
    match rx.recv_timeout(CASE_LIMIT) {
        Ok(()) => worker.join().map_err(|_| CaseFailure::Panicked),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let why = worker.join().err().and_then(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            });
            Err(CaseFailure::PanickedWith(why.unwrap_or_default()))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(CaseFailure::Hung(CASE_LIMIT)),
    }
}

/// The seed CI runs from.
const DEFAULT_SEED: u64 = 0x00c0_ffa1_1f0a_2026;

fn cases() -> u32 {
    std::env::var("CUFALL_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[test]
fn damaged_copies_give_rows_or_an_error_never_a_panic_or_a_hang() {
    // The reader turns decoder panics on damaged bytes into errors itself: keep them quiet.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !cufall_trace::in_guarded_decode() {
            default_hook(info);
        }
    }));
    let files = [files(0), files(1)];
    let tmp = tempfile::tempdir().unwrap();
    let case = AtomicU32::new(0);
    let seed = cufall_testkit::fuzz_seed(DEFAULT_SEED);
    eprintln!("fuzz: seed {seed} (CUFALL_FUZZ_SEED={seed} repeats this run)");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: cases(),
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let started = std::time::Instant::now();
    let cases = (0..EXAMPLES.len(), prop::collection::vec(mutation(), 1..4));
    let most = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&cases, |(which, mutations)| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let dir = tmp.path().join(format!("case-{n}.cufall"));
        copy_dir(&example(which), &dir);
        for m in &mutations {
            apply(&dir, &files[which], m);
        }
        let base = cufall_testkit::heap::reset_peak();
        let outcome = bounded(dir.clone());
        let used = cufall_testkit::heap::peak().saturating_sub(base);
        most.fetch_max(used, Ordering::Relaxed);
        prop_assert!(
            used < CASE_MEMORY,
            "{} {mutations:?}: {} MiB of heap",
            EXAMPLES[which],
            used >> 20
        );
        // A hung worker still holds the folder: leave it then.
        if outcome.is_ok() {
            fs::remove_dir_all(&dir).unwrap();
        }
        prop_assert!(
            outcome.is_ok(),
            "{} {mutations:?}: {}",
            EXAMPLES[which],
            outcome.unwrap_err()
        );
        Ok(())
    });
    eprintln!(
        "fuzz: {} cases (with shrinking) in {:.1} s: {} refused on opening, {} opened, {} reads \
         of those gave an error; at most {} MiB of heap in a case",
        case.into_inner(),
        started.elapsed().as_secs_f64(),
        REFUSED.load(Ordering::Relaxed),
        OPENED.load(Ordering::Relaxed),
        READ_ERRORS.load(Ordering::Relaxed),
        most.into_inner() >> 20,
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
