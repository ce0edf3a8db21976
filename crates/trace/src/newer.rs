//! What a newer minor version of the format may add, and how this reader ignores it, as
//! `docs/trace-format.md` (Versioning) says older readers do: tables it does not know, a
//! recording status it does not know, and values of the kind columns (drop `reason`, NVTX
//! `kind`, kernels `kind`, API `domain`) it does not know. In a trace of this cufall's version
//! or older, the same values are damage, and the callers call them so.

use crate::error::cut;
use crate::frame::{Frame, Values};
use crate::index::SegmentEntry;
use crate::tables::Table;
use cufall_model::{
    ActivityKind, ApiDomain, DropReason, FrameKind, HostState, RangeKind, RecordingStatus,
};
use cufall_model::{SCHEMA_MAJOR, SCHEMA_MINOR};
use std::collections::BTreeMap;

/// A `status` that a newer minor version added reads as `recording`: this cufall cannot tell
/// whether the trace was closed, and says so.
pub(crate) fn status(manifest: &mut serde_json::Value, warnings: &mut Vec<String>) {
    let Some(status) = manifest.get_mut("status") else {
        return;
    };
    let Some(text) = status.as_str() else { return };
    if text.is_empty() || serde_json::from_value::<RecordingStatus>(status.clone()).is_ok() {
        return;
    }
    warnings.push(format!(
        "status `{}` was added after trace format {SCHEMA_MAJOR}.{SCHEMA_MINOR}: the trace reads \
         as not closed; upgrade cufall to see what it means",
        cut(text, 80)
    ));
    *status = serde_json::to_value(RecordingStatus::Recording).unwrap_or_default();
}

/// Leaves out index entries of tables this cufall does not know: a newer minor version added
/// them. Said once, listing them.
pub(crate) fn drop_unknown_tables(entries: &mut Vec<SegmentEntry>, warnings: &mut Vec<String>) {
    let known = |e: &SegmentEntry| Table::ALL.iter().any(|t| t.dir_name() == e.table);
    let mut newer: Vec<String> = entries
        .iter()
        .filter(|e| !known(e))
        .map(|e| e.table.clone())
        .collect();
    newer.sort();
    newer.dedup();
    if !newer.is_empty() {
        warnings.push(format!(
            "tables added after trace format {}.{} are ignored: {}",
            SCHEMA_MAJOR,
            SCHEMA_MINOR,
            newer
                .iter()
                .map(|t| cut(t, 80))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    entries.retain(known);
}

/// Whether this cufall knows a value of a kind column.
type Known = fn(&str) -> bool;

/// The column of `table` that names a kind, and which of its values this cufall knows.
fn kind_column(table: Table) -> Option<(&'static str, Known)> {
    Some(match table {
        Table::Drops => ("reason", |s| DropReason::parse(s).is_some()),
        Table::Nvtx => ("kind", |s| RangeKind::parse(s).is_some()),
        Table::Kernels => ("kind", |s| ActivityKind::parse(s).is_some()),
        Table::Api => ("domain", |s| ApiDomain::parse(s).is_some()),
        Table::Stacks => ("kind", |s| FrameKind::parse(s).is_some()),
        Table::HostSamples => ("state", |s| HostState::parse(s).is_some()),
        Table::Samples | Table::Nvml | Table::Capture => return None,
    })
}

/// The first value of `table`'s kind column that this cufall does not know, with its row: in a
/// trace of this version or older, damage.
pub(crate) fn unknown_value(table: Table, frame: &Frame) -> Option<(String, usize)> {
    let (column, known) = kind_column(table)?;
    let col = frame.columns.iter().find(|c| c.name == column)?;
    let Values::Str(values) = &col.values else {
        return None;
    };
    values.iter().enumerate().find_map(|(i, v)| {
        let present = col
            .valid
            .as_ref()
            .is_none_or(|m| m.get(i).copied().unwrap_or(false));
        (present && !known(v)).then(|| (cut(v, 80), i))
    })
}

/// Drop reasons, NVTX kinds, activity kinds and API domains that a newer minor version of
/// the format added: older readers ignore what they do not know (`docs/trace-format.md`,
/// Versioning). A drop of an unknown reason is still a hole in the samples, so it reads as
/// a `gap` (missing samples of unknown cause), never as idle time; a range, activity or call
/// of an unknown kind is left out. Returns the warning that says what was done. In a trace of
/// this cufall's version or older, an unknown value stays an error: it is damage.
pub(crate) fn ignore_values(table: Table, frame: &mut Frame) -> Option<String> {
    let (column, known) = kind_column(table)?;
    let col = frame.columns.iter_mut().find(|c| c.name == column)?;
    let valid = col.valid.clone();
    let Values::Str(values) = &mut col.values else {
        return None;
    };
    // Null slots and empty strings name nothing a version could add: they are left to the
    // row conversion, which calls them damage.
    let is_newer = |i: usize, v: &str| {
        valid
            .as_ref()
            .is_none_or(|m| m.get(i).copied().unwrap_or(false))
            && !v.is_empty()
            && !known(v)
    };
    let mut newer: BTreeMap<String, usize> = BTreeMap::new();
    for (i, v) in values.iter().enumerate() {
        if is_newer(i, v) {
            *newer.entry(cut(v, 80)).or_default() += 1;
        }
    }
    if newer.is_empty() {
        return None;
    }
    let listed = newer
        .iter()
        .map(|(v, n)| format!("`{v}` ({n})"))
        .collect::<Vec<_>>()
        .join(", ");
    let n: usize = newer.values().sum();
    let warning = if table == Table::Drops {
        for (i, v) in values.iter_mut().enumerate() {
            if is_newer(i, v) {
                *v = DropReason::Gap.as_str().to_string();
            }
        }
        format!(
            "{} a reason added after trace format {SCHEMA_MAJOR}.{SCHEMA_MINOR} ({listed}): \
             {} as `gap`, samples missing for a reason this cufall does not know; upgrade \
             cufall to see it",
            if n == 1 {
                "1 drop has".to_string()
            } else {
                format!("{n} drops have")
            },
            if n == 1 { "it reads" } else { "they read" },
        )
    } else {
        let keep: Vec<bool> = values
            .iter()
            .enumerate()
            .map(|(i, v)| !is_newer(i, v))
            .collect();
        frame.retain_rows(&keep);
        format!(
            "{} of the {} table {} a {column} added after trace format \
             {SCHEMA_MAJOR}.{SCHEMA_MINOR} ({listed}): {} left out; upgrade cufall to see {}",
            if n == 1 {
                "1 row".to_string()
            } else {
                format!("{n} rows")
            },
            table.dir_name(),
            if n == 1 { "has" } else { "have" },
            if n == 1 { "it is" } else { "they are" },
            if n == 1 { "it" } else { "them" },
        )
    };
    Some(warning)
}
