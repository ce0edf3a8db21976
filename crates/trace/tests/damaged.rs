//! Damaged and unusual copies of a real recording: each says what it is. A value of a newer
//! minor version is ignored with a warning (not called damage); a read the file system refuses
//! is not called corruption; a bad manifest or index line says what is wrong with it.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_testkit::examples::{copy_dir, edit_manifest};
use cufall_trace::model::DropReason;
use cufall_trace::{Column, Frame, Table, Trace, TraceError, Values};
use std::fs;
use std::path::{Path, PathBuf};

/// A recording with rows in every table.
const EXAMPLE: &str = "h200-torch-phases-api.cufall";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(EXAMPLE)
}

/// A copy of the example in a fresh temporary folder.
fn copy(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = tmp.path().join(EXAMPLE);
    copy_dir(&example(), &dir);
    dir
}

fn open_err(dir: &Path) -> TraceError {
    match Trace::open(dir) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e,
    }
}

/// Rewrites one segment through `f` and updates its index entry (size and checksum), as a
/// writer of that content would have written it.
fn rewrite_segment(dir: &Path, rel: &str, f: impl FnOnce(&mut Frame)) {
    let path = dir.join(rel);
    let mut frame =
        cufall_trace::parquet::read_frame(fs::read(&path).unwrap().into(), None).unwrap();
    f(&mut frame);
    let bytes = cufall_trace::parquet::write_frame(&frame, Vec::new()).unwrap();
    fs::write(&path, &bytes).unwrap();
    let index = dir.join("index.jsonl");
    let lines: Vec<String> = fs::read_to_string(&index)
        .unwrap()
        .lines()
        .map(|line| {
            let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
            if e["file"] == rel {
                e["bytes"] = (bytes.len() as u64).into();
                e["crc32"] = crc32fast::hash(&bytes).into();
            }
            e.to_string()
        })
        .collect();
    fs::write(&index, lines.join("\n") + "\n").unwrap();
}

/// Sets row 0 of string column `name` to `value`.
fn set_first(frame: &mut Frame, name: &str, value: &str) {
    let col: &mut Column = frame.columns.iter_mut().find(|c| c.name == name).unwrap();
    let Values::Str(v) = &mut col.values else {
        panic!("{name} is not a string column")
    };
    v[0] = value.to_string();
}

/// A 1.5 trace whose drops, NVTX ranges, kernels and API calls each hold one value this cufall
/// does not know. The versioning rule: older readers warn and ignore minor additions.
#[test]
fn values_of_a_newer_minor_version_are_ignored_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    let original = Trace::open(&dir).unwrap();
    let (drops, nvtx, kernels, api) = (
        original.drops().unwrap(),
        original.nvtx().unwrap(),
        original.kernels().unwrap(),
        original.api_calls().unwrap(),
    );
    assert!(!drops.is_empty() && !nvtx.is_empty() && !kernels.is_empty() && !api.is_empty());
    drop(original);
    rewrite_segment(&dir, "drops/000000.parquet", |f| {
        set_first(f, "reason", "thermal_pause")
    });
    rewrite_segment(&dir, "nvtx/000000.parquet", |f| {
        set_first(f, "kind", "scope")
    });
    rewrite_segment(&dir, "kernels/000000.parquet", |f| {
        set_first(f, "kind", "tensor_map_copy");
        let kind = f.columns.iter_mut().find(|c| c.name == "kind").unwrap();
        let Values::Str(v) = &mut kind.values else {
            panic!("kind is not a string column")
        };
        v[1] = "tensor_map_copy".into();
    });
    rewrite_segment(&dir, "api/000000.parquet", |f| {
        set_first(f, "domain", "nvrtc")
    });

    // Marked 1.1, the same values are damage: this cufall wrote that version and knows them all.
    let trace = Trace::open(&dir).unwrap();
    let err = trace.nvtx().unwrap_err();
    assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("column `kind` of the nvtx table holds `scope`"),
        "{err}"
    );
    assert!(trace.drops().is_err() && trace.kernels().is_err() && trace.api_calls().is_err());
    // Frames (what export writes) follow the same rule.
    let err = trace.frame(Table::Nvtx).unwrap_err();
    assert!(
        err.to_string()
            .contains("row 0 of the nvtx table holds `scope`"),
        "{err}"
    );
    assert!(trace.frame(Table::Kernels).is_err() && trace.frame(Table::Api).is_err());
    drop(trace);

    edit_manifest(&dir, |m| m["schema_version"] = "1.5".into());
    let trace = Trace::open(&dir).unwrap();
    // A drop of a newer reason is still a hole in the samples: it reads as a gap.
    let read = trace.drops().unwrap();
    assert_eq!(read.len(), drops.len());
    assert_eq!(read[0].reason, DropReason::Gap);
    assert_eq!(
        (read[0].start_ns, read[0].end_ns),
        (drops[0].start_ns, drops[0].end_ns)
    );
    assert_eq!(read[1..], drops[1..]);
    // Ranges, activities and calls of a newer kind are left out; the others read as before.
    assert_eq!(trace.nvtx().unwrap(), nvtx[1..]);
    assert_eq!(trace.kernels().unwrap(), kernels[2..]);
    assert_eq!(trace.api_calls().unwrap(), api[1..]);
    // A frame (what export writes) keeps them as recorded.
    assert_eq!(trace.frame(Table::Nvtx).unwrap().height(), nvtx.len());
    let summary = trace.summary().unwrap();
    assert_eq!(
        summary.kernels as usize,
        kernels.len(),
        "the index counts rows"
    );
    let warnings = trace.warnings().join("\n");
    for said in [
        "trace format 1.5 is newer than this cufall's 1.4",
        "1 drop has a reason added after trace format 1.4 (`thermal_pause` (1)): it reads as \
         `gap`",
        "1 row of the nvtx table has a kind added after trace format 1.4 (`scope` (1)): it is \
         left out; upgrade cufall to see it",
        "2 rows of the kernels table have a kind added after trace format 1.4 \
         (`tensor_map_copy` (2)): they are left out; upgrade cufall to see them",
        "1 row of the api table has a domain added after trace format 1.4 (`nvrtc` (1))",
    ] {
        assert!(warnings.contains(said), "missing {said:?} in:\n{warnings}");
    }
    // Each is said once, however often the table is read.
    trace.nvtx().unwrap();
    assert_eq!(trace.warnings().join("\n").matches("`scope`").count(), 1);
    // The whole frame (what export writes) keeps the values as recorded.
    let frame = trace.frame(Table::Nvtx).unwrap();
    assert_eq!(frame.column("kind").unwrap().str(0), Some("scope"));
}

/// A recording status a newer minor version added: the trace opens as not closed, and says why.
#[test]
fn a_status_of_a_newer_minor_version_reads_as_not_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    edit_manifest(&dir, |m| m["status"] = "archived".into());
    let err = open_err(&dir);
    assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("archived"), "{err}");
    edit_manifest(&dir, |m| {
        m["status"] = "archived".into();
        m["schema_version"] = "1.5".into();
    });
    let trace = Trace::open(&dir).unwrap();
    assert_eq!(
        trace.manifest().status,
        cufall_trace::model::RecordingStatus::Recording
    );
    let warnings = trace.warnings().join("\n");
    assert!(
        warnings.contains(
            "status `archived` was added after trace format 1.4: the trace reads as not closed"
        ),
        "{warnings}"
    );
    assert!(!trace.kernels().unwrap().is_empty());
}

/// An empty value in the manifest is named as empty, never quoted as "``".
#[test]
fn empty_manifest_values_are_named_not_quoted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    edit_manifest(&dir, |m| m["sampling"]["metrics"][1]["name"] = "".into());
    let err = open_err(&dir).to_string();
    assert!(
        err.contains("metric 2 of manifest.json's `sampling.metrics` has an empty name"),
        "{err}"
    );
    fs::copy(example().join("manifest.json"), dir.join("manifest.json")).unwrap();
    edit_manifest(&dir, |m| m["status"] = "".into());
    let err = open_err(&dir).to_string();
    assert!(
        err.contains("`status` is empty, where cufall writes `complete` or `recording`"),
        "{err}"
    );
    assert!(!err.contains("``"), "{err}");
}

/// A table a newer minor version added is ignored, and not called missing.
#[test]
fn a_table_of_a_newer_minor_version_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    edit_manifest(&dir, |m| m["schema_version"] = "1.5".into());
    fs::create_dir(dir.join("memory")).unwrap();
    fs::copy(
        dir.join("capture/000000.parquet"),
        dir.join("memory/000000.parquet"),
    )
    .unwrap();
    let mut index = fs::read_to_string(dir.join("index.jsonl")).unwrap();
    index.push_str(
        "{\"table\":\"memory\",\"file\":\"memory/000000.parquet\",\"bytes\":1,\"crc32\":1,\"rows\":1}\n",
    );
    fs::write(dir.join("index.jsonl"), index).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let warnings = trace.warnings().join("\n");
    assert!(
        warnings.contains("tables added after trace format 1.4 are ignored: memory"),
        "{warnings}"
    );
    assert!(!warnings.contains("missing"), "{warnings}");
    trace.summary().unwrap();
}

#[test]
fn schema_versions_say_what_is_wrong_with_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    let cases: [(serde_json::Value, &str); 6] = [
        (
            "0.1".into(),
            "`0.1` is older than any cufall trace (the first was 1.0)",
        ),
        (
            serde_json::json!(1.1),
            "schema_version is the number 1.1, where cufall writes a string of MAJOR.MINOR (`\"1.4\"`)",
        ),
        (
            "1.1.0".into(),
            "schema_version `1.1.0` is not MAJOR.MINOR (e.g. `1.4`)",
        ),
        (
            "".into(),
            "schema_version is empty, where cufall writes MAJOR.MINOR (`1.4`)",
        ),
        (
            serde_json::Value::Null,
            "schema_version is null, where cufall writes",
        ),
        (serde_json::json!(["1.1"]), "schema_version is a list"),
    ];
    for (value, said) in cases {
        edit_manifest(&dir, |m| m["schema_version"] = value.clone());
        let err = open_err(&dir);
        assert!(matches!(err, TraceError::Corrupt { .. }), "{value}: {err}");
        assert!(err.to_string().contains(said), "{value}: {err}");
    }
    // A version too large for any integer type is still newer: upgrade, not "bad".
    for newer in ["99999999999.0", "2.0", "100000000000000000000000000.1"] {
        edit_manifest(&dir, |m| m["schema_version"] = newer.into());
        let err = open_err(&dir);
        assert!(
            matches!(err, TraceError::NewerVersion { .. }),
            "{newer}: {err}"
        );
        assert!(err.to_string().contains("Upgrade cufall"), "{err}");
    }
    edit_manifest(&dir, |m| {
        m.as_object_mut().unwrap().remove("schema_version");
    });
    assert!(open_err(&dir).to_string().contains("has no schema_version"));
}

#[test]
fn a_manifest_without_its_format_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    edit_manifest(&dir, |m| {
        m.as_object_mut().unwrap().remove("format");
    });
    let err = open_err(&dir);
    assert!(matches!(err, TraceError::NotATrace { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("its manifest.json has no `format` field (a trace's says `cufall-trace`)"),
        "{err}"
    );
    assert!(!err.to_string().contains("format ``"), "{err}");
    edit_manifest(&dir, |m| m["format"] = "".into());
    assert!(
        open_err(&dir)
            .to_string()
            .contains("its manifest.json's `format` is empty, not `cufall-trace`")
    );
    edit_manifest(&dir, |m| m["format"] = 7.into());
    assert!(
        open_err(&dir)
            .to_string()
            .contains("`format` is a number, not the string `cufall-trace`")
    );
    fs::write(dir.join("manifest.json"), "[1, 2]").unwrap();
    assert!(
        open_err(&dir)
            .to_string()
            .contains("holds a list, not the JSON object")
    );
}

/// An editor saving the manifest may put a UTF-8 byte-order mark in front; nothing else changes.
#[test]
fn a_byte_order_mark_before_the_manifest_or_index_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    for name in ["manifest.json", "index.jsonl"] {
        let path = dir.join(name);
        let mut bytes = b"\xef\xbb\xbf".to_vec();
        bytes.extend(fs::read(&path).unwrap());
        fs::write(&path, bytes).unwrap();
    }
    let trace = Trace::open(&dir).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    assert!(!trace.kernels().unwrap().is_empty());
}

/// One bad line names its field, and says that deleting the index opens the trace, as it does.
#[test]
fn a_bad_index_line_names_the_field_and_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    let index = dir.join("index.jsonl");
    let text = fs::read_to_string(&index).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let with_line_3 = |new: &str| {
        let mut l = lines.clone();
        l[2] = new;
        l.join("\n") + "\n"
    };
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry["rows"] = "many".into();
    let rows_bad = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry.as_object_mut().unwrap().remove("crc32");
    let crc_missing = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry["t_min_ns"] = (-1.5).into();
    let t_bad = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry["rows_per_device"] = serde_json::json!({"0": u64::MAX, "1": 1});
    let counts_overflow = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    let rows = entry["rows"].as_u64().unwrap();
    entry["rows_per_device"] = serde_json::json!({"0": rows + 1});
    let counts_wrong = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry["rows_per_device"] = serde_json::json!({"gpu0": rows});
    let key_wrong = entry.to_string();
    let mut entry: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    entry["t_min_ns"] = i64::MAX.into();
    entry["t_max_ns"] = 0.into();
    let span_wrong = entry.to_string();
    let counts_said = format!(
        "adds up to {} rows, not the {rows} of field `rows`",
        rows + 1
    );
    let cases = [
        (
            counts_overflow.as_str(),
            "field `rows_per_device` adds up to more than 2^64 rows",
        ),
        (counts_wrong.as_str(), counts_said.as_str()),
        (
            key_wrong.as_str(),
            "field `rows_per_device` has key \"gpu0\", not a device number",
        ),
        (
            span_wrong.as_str(),
            "field `t_min_ns` (9223372036854775807) is after field `t_max_ns` (0)",
        ),
        (
            rows_bad.as_str(),
            "field `rows` is \"many\", not a whole number of rows",
        ),
        (crc_missing.as_str(), "field `crc32` is missing"),
        (
            t_bad.as_str(),
            "field `t_min_ns` is -1.5, not a timestamp in nanoseconds or null",
        ),
        ("[1]", "not a JSON object"),
        ("{\"table\":", "not valid JSON"),
    ];
    for (line, said) in cases {
        fs::write(&index, with_line_3(line)).unwrap();
        let err = open_err(&dir);
        assert!(matches!(err, TraceError::BadIndex { line: 3, .. }), "{err}");
        let m = err.to_string();
        assert!(m.contains("line 3 is not a segment entry"), "{m}");
        assert!(m.contains(said), "{said}: {m}");
        assert!(m.contains("delete it: the trace then opens"), "{m}");
    }
    fs::remove_file(&index).unwrap();
    let trace = Trace::open(&dir).unwrap();
    assert!(!trace.kernels().unwrap().is_empty());
    assert!(
        trace
            .warnings()
            .iter()
            .any(|w| w.contains("index.jsonl is missing"))
    );
}

/// A symbolic link that loops, or a folder, where a segment belongs: said as what it is, with
/// the fix, not as damaged bytes.
#[cfg(unix)]
#[test]
fn a_link_loop_or_a_folder_in_place_of_a_segment_says_what_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    let seg = dir.join("kernels/000000.parquet");
    fs::remove_file(&seg).unwrap();
    std::os::unix::fs::symlink("000000.parquet", &seg).unwrap();
    let trace = Trace::open(&dir).unwrap();
    let err = trace.kernels().unwrap_err();
    assert!(matches!(err, TraceError::Read { .. }), "{err}");
    let m = err.to_string();
    assert!(m.contains("kernels/000000.parquet"), "{m}");
    assert!(m.contains("symbolic link that leads back to itself"), "{m}");
    assert!(!m.contains("damaged"), "{m}");
    // Said again on the next read of the table.
    assert!(matches!(trace.kernels(), Err(TraceError::Read { .. })));

    fs::remove_file(&seg).unwrap();
    fs::create_dir(&seg).unwrap();
    let err = Trace::open(&dir).unwrap().kernels().unwrap_err();
    assert!(matches!(err, TraceError::NotAFile { .. }), "{err}");
    let m = err.to_string();
    assert!(m.contains("is a folder, not a plain file"), "{m}");
    assert!(m.contains("Put back the file the recording wrote"), "{m}");
    assert!(!m.contains("damaged"), "{m}");

    // A file where a table's folder belongs.
    fs::remove_dir_all(dir.join("nvtx")).unwrap();
    fs::write(dir.join("nvtx"), "x").unwrap();
    let err = open_err(&dir);
    assert!(matches!(err, TraceError::Read { .. }), "{err}");
    assert!(err.to_string().contains("put back the folder"), "{err}");
}

/// A table folder that may not be listed is an error that says so, never an empty table. As
/// root, permissions do not stop a read: the test then says why it checks nothing
/// (`error::tests` checks the wording of the error itself).
#[cfg(unix)]
#[test]
fn a_table_folder_that_may_not_be_read_is_not_an_empty_table() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    let nvtx = dir.join("nvtx");
    fs::set_permissions(&nvtx, fs::Permissions::from_mode(0o000)).unwrap();
    let listable = fs::read_dir(&nvtx).is_ok();
    let result = Trace::open(&dir).map(|_| ());
    fs::set_permissions(&nvtx, fs::Permissions::from_mode(0o755)).unwrap();
    if listable {
        eprintln!(
            "skipped: a folder of mode 000 can still be listed here (running as root), so \
             there is no refused read to test"
        );
        return;
    }
    let err = result.unwrap_err();
    assert!(matches!(err, TraceError::Read { .. }), "{err}");
    let m = err.to_string();
    assert!(m.contains("nvtx"), "{m}");
    assert!(m.contains("You may not read it"), "{m}");
    assert!(!m.contains("damaged"), "{m}");
}

/// Segments of one table with different columns: the message names the file, the table and the
/// columns that differ.
#[test]
fn a_segment_with_other_columns_names_itself_its_table_and_the_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy(&tmp);
    rewrite_segment(&dir, "nvml/000001.parquet", |f| {
        let n = f.height();
        f.columns.push(Column::new("fan_pct", vec![0u32; n]));
    });
    let trace = Trace::open(&dir).unwrap();
    // Rows are read by column name: the extra column is not in the way.
    assert!(!trace.nvml().unwrap().is_empty());
    let err = trace.frame(Table::Nvml).unwrap_err();
    assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
    let m = err.to_string();
    assert!(
        m.contains(
            "nvml/000001.parquet does not fit the nvml table's other files: it has columns they \
             lack: `fan_pct`"
        ),
        "{m}"
    );
}
