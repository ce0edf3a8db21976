//! Column layouts of the tables, conversions between row types and polars frames, and the
//! Parquet encoding of a segment.

use crate::model::{
    ActivityKind, ApiCall, ApiDomain, CaptureEvent, DeviceId, DropReason, DropRecord, KernelRecord,
    NvmlRow, NvtxRange, RangeKind, SampleBatch,
};
use polars::prelude::*;
use polars_parquet::write::{
    CompressionOptions, Encoding, FileWriter, RowGroupIterator, StatisticsOptions, Version,
    WriteOptions, ZstdLevel,
};
use std::io::Write;

/// Column names shared by several tables.
pub mod col {
    pub const DEVICE: &str = "device";
    pub const START_NS: &str = "start_ns";
    pub const END_NS: &str = "end_ns";
    pub const T_NS: &str = "t_ns";
}

/// Columns of the NVML table after `device` and `t_ns`, with their types.
pub(crate) const NVML_COLUMNS: [(&str, DataType); 8] = [
    ("power_w", DataType::Float32),
    ("sm_clock_mhz", DataType::UInt32),
    ("mem_clock_mhz", DataType::UInt32),
    ("gpu_util_pct", DataType::UInt32),
    ("mem_util_pct", DataType::UInt32),
    ("mem_used_bytes", DataType::UInt64),
    ("temperature_c", DataType::UInt32),
    ("throttle_reasons", DataType::UInt64),
];

/// The empty frame of a table, with every column typed, for traces that have no rows of it.
pub(crate) fn empty_schema(table: crate::Table, metrics: &[&str]) -> Schema {
    use crate::Table;
    let mut fields: Vec<(&str, DataType)> = Vec::new();
    match table {
        Table::Samples => {
            fields.extend([
                (col::DEVICE, DataType::UInt16),
                (col::START_NS, DataType::Int64),
                (col::END_NS, DataType::Int64),
            ]);
            fields.extend(metrics.iter().map(|m| (*m, DataType::Float32)));
        }
        Table::Drops => fields.extend([
            (col::DEVICE, DataType::UInt16),
            (col::START_NS, DataType::Int64),
            (col::END_NS, DataType::Int64),
            ("reason", DataType::String),
            ("lost_samples", DataType::UInt64),
        ]),
        Table::Nvml => {
            fields.extend([
                (col::DEVICE, DataType::UInt16),
                (col::T_NS, DataType::Int64),
            ]);
            fields.extend(NVML_COLUMNS.iter().cloned());
        }
        Table::Nvtx => fields.extend([
            (col::START_NS, DataType::Int64),
            (col::END_NS, DataType::Int64),
            ("name", DataType::String),
            ("domain", DataType::String),
            ("kind", DataType::String),
            ("depth", DataType::UInt32),
            ("pid", DataType::UInt32),
            ("tid", DataType::UInt32),
            ("category", DataType::UInt32),
            ("color", DataType::UInt32),
            ("payload_int", DataType::Int64),
            ("payload_float", DataType::Float64),
        ]),
        Table::Kernels => fields.extend([
            (col::DEVICE, DataType::UInt16),
            (col::START_NS, DataType::Int64),
            (col::END_NS, DataType::Int64),
            ("kind", DataType::String),
            ("name", DataType::String),
            ("stream", DataType::UInt32),
            ("correlation_id", DataType::UInt32),
            ("bytes", DataType::UInt64),
            ("pid", DataType::UInt32),
            ("grid_x", DataType::UInt32),
            ("grid_y", DataType::UInt32),
            ("grid_z", DataType::UInt32),
            ("block_x", DataType::UInt32),
            ("block_y", DataType::UInt32),
            ("block_z", DataType::UInt32),
            ("context_id", DataType::UInt32),
            ("graph_id", DataType::UInt32),
        ]),
        Table::Api => fields.extend([
            (col::START_NS, DataType::Int64),
            (col::END_NS, DataType::Int64),
            ("domain", DataType::String),
            ("name", DataType::String),
            ("pid", DataType::UInt32),
            ("tid", DataType::UInt32),
            ("correlation_id", DataType::UInt32),
        ]),
        Table::Capture => fields.extend([
            (col::T_NS, DataType::Int64),
            ("pid", DataType::UInt32),
            ("event", DataType::String),
            ("count", DataType::UInt64),
            ("detail", DataType::String),
        ]),
    }
    Schema::from_iter(fields.into_iter().map(|(n, t)| Field::new(n.into(), t)))
}

fn device_u16(d: DeviceId) -> u16 {
    // Device ordinals are small; a machine with more than 65,535 GPUs is not a concern.
    u16::try_from(d.0).unwrap_or(u16::MAX)
}

/// Buffered samples of one or more devices, in the column layout of the samples table.
#[derive(Default)]
pub(crate) struct SampleColumns {
    pub device: Vec<u16>,
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    pub values: Vec<Vec<f32>>,
}

impl SampleColumns {
    pub fn new(metrics: usize) -> Self {
        SampleColumns {
            values: vec![Vec::new(); metrics],
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    pub fn extend(&mut self, batch: &SampleBatch) {
        let d = device_u16(batch.device);
        self.device.extend(std::iter::repeat_n(d, batch.len()));
        self.start_ns.extend_from_slice(&batch.start_ns);
        self.end_ns.extend_from_slice(&batch.end_ns);
        for (column, src) in self.values.iter_mut().zip(&batch.values) {
            // Values are stored as f32: 24 bits of mantissa, a relative precision of 6e-8,
            // far finer than any counter's own resolution over one sample.
            #[expect(clippy::cast_possible_truncation, reason = "f64 to f32 on purpose")]
            column.extend(src.iter().map(|v| *v as f32));
        }
    }

    pub fn take_frame(&mut self, metrics: &[String]) -> PolarsResult<DataFrame> {
        let n = self.len();
        let mut cols = vec![
            Column::new(col::DEVICE.into(), std::mem::take(&mut self.device)),
            Column::new(col::START_NS.into(), std::mem::take(&mut self.start_ns)),
            Column::new(col::END_NS.into(), std::mem::take(&mut self.end_ns)),
        ];
        for (name, values) in metrics.iter().zip(self.values.iter_mut()) {
            cols.push(Column::new(name.as_str().into(), std::mem::take(values)));
        }
        DataFrame::new(n, cols)
    }
}

pub(crate) fn drops_frame(rows: &[DropRecord]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::DEVICE.into(),
                rows.iter()
                    .map(|r| device_u16(r.device))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                col::START_NS.into(),
                rows.iter().map(|r| r.start_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                col::END_NS.into(),
                rows.iter().map(|r| r.end_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "reason".into(),
                rows.iter().map(|r| r.reason.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "lost_samples".into(),
                rows.iter().map(|r| r.lost_samples).collect::<Vec<_>>(),
            ),
        ],
    )
}

pub(crate) fn nvml_frame(rows: &[NvmlRow]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::DEVICE.into(),
                rows.iter()
                    .map(|r| device_u16(r.device))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                col::T_NS.into(),
                rows.iter().map(|r| r.t_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "power_w".into(),
                rows.iter().map(|r| r.power_w).collect::<Vec<_>>(),
            ),
            Column::new(
                "sm_clock_mhz".into(),
                rows.iter().map(|r| r.sm_clock_mhz).collect::<Vec<_>>(),
            ),
            Column::new(
                "mem_clock_mhz".into(),
                rows.iter().map(|r| r.mem_clock_mhz).collect::<Vec<_>>(),
            ),
            Column::new(
                "gpu_util_pct".into(),
                rows.iter().map(|r| r.gpu_util_pct).collect::<Vec<_>>(),
            ),
            Column::new(
                "mem_util_pct".into(),
                rows.iter().map(|r| r.mem_util_pct).collect::<Vec<_>>(),
            ),
            Column::new(
                "mem_used_bytes".into(),
                rows.iter().map(|r| r.mem_used_bytes).collect::<Vec<_>>(),
            ),
            Column::new(
                "temperature_c".into(),
                rows.iter().map(|r| r.temperature_c).collect::<Vec<_>>(),
            ),
            Column::new(
                "throttle_reasons".into(),
                rows.iter().map(|r| r.throttle_reasons).collect::<Vec<_>>(),
            ),
        ],
    )
}

pub(crate) fn nvtx_frame(rows: &[NvtxRange]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::START_NS.into(),
                rows.iter().map(|r| r.start_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                col::END_NS.into(),
                rows.iter().map(|r| r.end_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "name".into(),
                rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "domain".into(),
                rows.iter().map(|r| r.domain.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "kind".into(),
                rows.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "depth".into(),
                rows.iter().map(|r| r.depth).collect::<Vec<_>>(),
            ),
            Column::new("pid".into(), rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
            Column::new("tid".into(), rows.iter().map(|r| r.tid).collect::<Vec<_>>()),
            Column::new(
                "category".into(),
                rows.iter().map(|r| r.category).collect::<Vec<_>>(),
            ),
            Column::new(
                "color".into(),
                rows.iter().map(|r| r.color).collect::<Vec<_>>(),
            ),
            Column::new(
                "payload_int".into(),
                rows.iter().map(|r| r.payload_int).collect::<Vec<_>>(),
            ),
            Column::new(
                "payload_float".into(),
                rows.iter().map(|r| r.payload_float).collect::<Vec<_>>(),
            ),
        ],
    )
}

pub(crate) fn kernels_frame(rows: &[KernelRecord]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::DEVICE.into(),
                rows.iter()
                    .map(|r| device_u16(r.device))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                col::START_NS.into(),
                rows.iter().map(|r| r.start_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                col::END_NS.into(),
                rows.iter().map(|r| r.end_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "kind".into(),
                rows.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "name".into(),
                rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "stream".into(),
                rows.iter().map(|r| r.stream).collect::<Vec<_>>(),
            ),
            Column::new(
                "correlation_id".into(),
                rows.iter().map(|r| r.correlation_id).collect::<Vec<_>>(),
            ),
            Column::new(
                "bytes".into(),
                rows.iter().map(|r| r.bytes).collect::<Vec<_>>(),
            ),
            Column::new("pid".into(), rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
            dim_column("grid_x", rows, |r| r.grid.map(|g| g[0])),
            dim_column("grid_y", rows, |r| r.grid.map(|g| g[1])),
            dim_column("grid_z", rows, |r| r.grid.map(|g| g[2])),
            dim_column("block_x", rows, |r| r.block.map(|b| b[0])),
            dim_column("block_y", rows, |r| r.block.map(|b| b[1])),
            dim_column("block_z", rows, |r| r.block.map(|b| b[2])),
            dim_column("context_id", rows, |r| r.context_id),
            dim_column("graph_id", rows, |r| r.graph_id),
        ],
    )
}

fn dim_column(
    name: &str,
    rows: &[KernelRecord],
    f: impl Fn(&KernelRecord) -> Option<u32>,
) -> Column {
    Column::new(name.into(), rows.iter().map(f).collect::<Vec<_>>())
}

pub(crate) fn api_frame(rows: &[ApiCall]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::START_NS.into(),
                rows.iter().map(|r| r.start_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                col::END_NS.into(),
                rows.iter().map(|r| r.end_ns).collect::<Vec<_>>(),
            ),
            Column::new(
                "domain".into(),
                rows.iter().map(|r| r.domain.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "name".into(),
                rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ),
            Column::new("pid".into(), rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
            Column::new("tid".into(), rows.iter().map(|r| r.tid).collect::<Vec<_>>()),
            Column::new(
                "correlation_id".into(),
                rows.iter().map(|r| r.correlation_id).collect::<Vec<_>>(),
            ),
        ],
    )
}

pub(crate) fn capture_frame(rows: &[CaptureEvent]) -> PolarsResult<DataFrame> {
    DataFrame::new(
        rows.len(),
        vec![
            Column::new(
                col::T_NS.into(),
                rows.iter().map(|r| r.t_ns).collect::<Vec<_>>(),
            ),
            Column::new("pid".into(), rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
            Column::new(
                "event".into(),
                rows.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(),
            ),
            Column::new(
                "count".into(),
                rows.iter().map(|r| r.count).collect::<Vec<_>>(),
            ),
            Column::new(
                "detail".into(),
                rows.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>(),
            ),
        ],
    )
}

/// zstd level 1: on delta-packed timestamps and Float32 counter values it compresses within a few
/// percent of the default level 3 at a higher write rate (measured with `trace_bench`).
fn zstd_level() -> Option<ZstdLevel> {
    ZstdLevel::try_new(1).ok()
}

/// Writes `df` as one Parquet file. Timestamp columns (`Int64`) are delta-encoded: at a regular
/// sampling interval their deltas pack into a few bits each. Pages are zstd-compressed.
pub(crate) fn write_parquet<W: Write>(df: &mut DataFrame, out: W) -> PolarsResult<u64> {
    df.rechunk_mut_par();
    let compat = CompatLevel::oldest();
    let schema = df.schema().to_arrow(compat);
    let encodings: Vec<Vec<Encoding>> = schema
        .iter_values()
        .map(|f| match f.dtype {
            ArrowDataType::Int64 => vec![Encoding::DeltaBinaryPacked],
            // Counter values are nearly all distinct: trying a dictionary first only costs time.
            // Small integers (device, clocks) compress to almost nothing under zstd as they are.
            ArrowDataType::Float32
            | ArrowDataType::Float64
            | ArrowDataType::UInt16
            | ArrowDataType::UInt32
            | ArrowDataType::UInt64 => vec![Encoding::Plain],
            ref other => polars_parquet::write::get_dtype_encoding(other),
        })
        .collect();
    let options = WriteOptions {
        statistics: StatisticsOptions::default(),
        version: Version::V2,
        compression: CompressionOptions::Zstd(zstd_level()),
        data_page_size: None,
    };
    let batches = df.iter_chunks(compat, false).map(Ok);
    let row_groups =
        RowGroupIterator::try_new(batches, &schema, options, encodings.into_iter().collect())?;
    let mut writer = FileWriter::try_new(out, schema, options)?;
    for group in row_groups {
        writer.write(u64::MAX, group?)?;
    }
    writer.end(None)
}

/// Typed rows back from frames (used by tests, `info` and small tables).
pub(crate) fn drops_from(df: &DataFrame) -> PolarsResult<Vec<DropRecord>> {
    let device = df.column(col::DEVICE)?.u16()?;
    let start = df.column(col::START_NS)?.i64()?;
    let end = df.column(col::END_NS)?.i64()?;
    let reason = df.column("reason")?.str()?;
    let lost = df.column("lost_samples")?.u64()?;
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        let r = reason.get(i).unwrap_or("");
        out.push(DropRecord {
            device: DeviceId(u32::from(device.get(i).unwrap_or(0))),
            start_ns: start.get(i).unwrap_or(0),
            end_ns: end.get(i).unwrap_or(0),
            reason: DropReason::parse(r)
                .ok_or_else(|| polars_err!(ComputeError: "unknown drop reason `{r}`"))?,
            lost_samples: lost.get(i),
        });
    }
    Ok(out)
}

pub(crate) fn nvml_from(df: &DataFrame) -> PolarsResult<Vec<NvmlRow>> {
    let device = df.column(col::DEVICE)?.u16()?;
    let t = df.column(col::T_NS)?.i64()?;
    let power = df.column("power_w")?.f32()?;
    let sm = df.column("sm_clock_mhz")?.u32()?;
    let mem = df.column("mem_clock_mhz")?.u32()?;
    let gpu_util = df.column("gpu_util_pct")?.u32()?;
    let mem_util = df.column("mem_util_pct")?.u32()?;
    let used = df.column("mem_used_bytes")?.u64()?;
    let temp = df.column("temperature_c")?.u32()?;
    let throttle = df.column("throttle_reasons")?.u64()?;
    Ok((0..df.height())
        .map(|i| NvmlRow {
            device: DeviceId(u32::from(device.get(i).unwrap_or(0))),
            t_ns: t.get(i).unwrap_or(0),
            power_w: power.get(i),
            sm_clock_mhz: sm.get(i),
            mem_clock_mhz: mem.get(i),
            gpu_util_pct: gpu_util.get(i),
            mem_util_pct: mem_util.get(i),
            mem_used_bytes: used.get(i),
            temperature_c: temp.get(i),
            throttle_reasons: throttle.get(i),
        })
        .collect())
}

/// A column that traces of schema 1.0 lack: `None` when absent.
fn optional<'a, T>(
    df: &'a DataFrame,
    name: &str,
    get: impl FnOnce(&'a Column) -> PolarsResult<&'a T>,
) -> PolarsResult<Option<&'a T>> {
    match df.column(name) {
        Ok(c) => get(c).map(Some),
        Err(_) => Ok(None),
    }
}

pub(crate) fn nvtx_from(df: &DataFrame) -> PolarsResult<Vec<NvtxRange>> {
    let start = df.column(col::START_NS)?.i64()?;
    let end = df.column(col::END_NS)?.i64()?;
    let name = df.column("name")?.str()?;
    let domain = df.column("domain")?.str()?;
    let kind = df.column("kind")?.str()?;
    let depth = df.column("depth")?.u32()?;
    let pid = df.column("pid")?.u32()?;
    let tid = df.column("tid")?.u32()?;
    let category = optional(df, "category", |c| c.u32())?;
    let color = optional(df, "color", |c| c.u32())?;
    let payload_int = optional(df, "payload_int", |c| c.i64())?;
    let payload_float = optional(df, "payload_float", |c| c.f64())?;
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        let k = kind.get(i).unwrap_or("");
        out.push(NvtxRange {
            category: category.and_then(|c| c.get(i)).unwrap_or(0),
            color: color.and_then(|c| c.get(i)),
            payload_int: payload_int.and_then(|c| c.get(i)),
            payload_float: payload_float.and_then(|c| c.get(i)),
            start_ns: start.get(i).unwrap_or(0),
            end_ns: end.get(i).unwrap_or(0),
            name: name.get(i).unwrap_or("").to_string(),
            domain: domain.get(i).unwrap_or("").to_string(),
            kind: RangeKind::parse(k)
                .ok_or_else(|| polars_err!(ComputeError: "unknown range kind `{k}`"))?,
            depth: depth.get(i).unwrap_or(0),
            pid: pid.get(i).unwrap_or(0),
            tid: tid.get(i).unwrap_or(0),
        });
    }
    Ok(out)
}

pub(crate) fn kernels_from(df: &DataFrame) -> PolarsResult<Vec<KernelRecord>> {
    let device = df.column(col::DEVICE)?.u16()?;
    let start = df.column(col::START_NS)?.i64()?;
    let end = df.column(col::END_NS)?.i64()?;
    let kind = df.column("kind")?.str()?;
    let name = df.column("name")?.str()?;
    let stream = df.column("stream")?.u32()?;
    let corr = df.column("correlation_id")?.u32()?;
    let bytes = df.column("bytes")?.u64()?;
    let pid = df.column("pid")?.u32()?;
    let dims = [
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    ]
    .map(|n| optional(df, n, |c| c.u32()));
    let [gx, gy, gz, bx, by, bz] = dims;
    let (gx, gy, gz, bx, by, bz) = (gx?, gy?, gz?, bx?, by?, bz?);
    let context = optional(df, "context_id", |c| c.u32())?;
    let graph = optional(df, "graph_id", |c| c.u32())?;
    let triple = |a: Option<&UInt32Chunked>,
                  b: Option<&UInt32Chunked>,
                  c: Option<&UInt32Chunked>,
                  i| { Some([a?.get(i)?, b?.get(i)?, c?.get(i)?]) };
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        let k = kind.get(i).unwrap_or("");
        out.push(KernelRecord {
            grid: triple(gx, gy, gz, i),
            block: triple(bx, by, bz, i),
            context_id: context.and_then(|c| c.get(i)),
            graph_id: graph.and_then(|c| c.get(i)),
            device: DeviceId(u32::from(device.get(i).unwrap_or(0))),
            start_ns: start.get(i).unwrap_or(0),
            end_ns: end.get(i).unwrap_or(0),
            kind: ActivityKind::parse(k)
                .ok_or_else(|| polars_err!(ComputeError: "unknown activity kind `{k}`"))?,
            name: name.get(i).unwrap_or("").to_string(),
            stream: stream.get(i).unwrap_or(0),
            correlation_id: corr.get(i).unwrap_or(0),
            bytes: bytes.get(i),
            pid: pid.get(i).unwrap_or(0),
        });
    }
    Ok(out)
}

pub(crate) fn api_from(df: &DataFrame) -> PolarsResult<Vec<ApiCall>> {
    let start = df.column(col::START_NS)?.i64()?;
    let end = df.column(col::END_NS)?.i64()?;
    let domain = df.column("domain")?.str()?;
    let name = df.column("name")?.str()?;
    let pid = df.column("pid")?.u32()?;
    let tid = df.column("tid")?.u32()?;
    let corr = df.column("correlation_id")?.u32()?;
    let mut out = Vec::with_capacity(df.height());
    for i in 0..df.height() {
        let d = domain.get(i).unwrap_or("");
        out.push(ApiCall {
            start_ns: start.get(i).unwrap_or(0),
            end_ns: end.get(i).unwrap_or(0),
            domain: ApiDomain::parse(d)
                .ok_or_else(|| polars_err!(ComputeError: "unknown API domain `{d}`"))?,
            name: name.get(i).unwrap_or("").to_string(),
            pid: pid.get(i).unwrap_or(0),
            tid: tid.get(i).unwrap_or(0),
            correlation_id: corr.get(i).unwrap_or(0),
        });
    }
    Ok(out)
}

pub(crate) fn capture_from(df: &DataFrame) -> PolarsResult<Vec<CaptureEvent>> {
    let t = df.column(col::T_NS)?.i64()?;
    let pid = df.column("pid")?.u32()?;
    let event = df.column("event")?.str()?;
    let count = df.column("count")?.u64()?;
    let detail = df.column("detail")?.str()?;
    Ok((0..df.height())
        .map(|i| CaptureEvent {
            t_ns: t.get(i).unwrap_or(0),
            pid: pid.get(i).unwrap_or(0),
            event: event.get(i).unwrap_or("").to_string(),
            count: count.get(i).unwrap_or(0),
            detail: detail.get(i).unwrap_or("").to_string(),
        })
        .collect())
}

/// Per-device samples back from a frame of the samples table.
pub(crate) fn samples_from(df: &DataFrame, metrics: &[&str]) -> PolarsResult<Vec<SampleBatch>> {
    let device = df.column(col::DEVICE)?.u16()?;
    let start = df.column(col::START_NS)?.i64()?;
    let end = df.column(col::END_NS)?.i64()?;
    let values = metrics
        .iter()
        .map(|m| df.column(m).and_then(|c| c.f32().cloned()))
        .collect::<PolarsResult<Vec<_>>>()?;
    let mut by_device: std::collections::BTreeMap<u16, SampleBatch> = Default::default();
    let mut row = vec![0f64; metrics.len()];
    for i in 0..df.height() {
        let d = device.get(i).unwrap_or(0);
        let batch = by_device
            .entry(d)
            .or_insert_with(|| SampleBatch::new(DeviceId(u32::from(d)), metrics.len()));
        for (slot, column) in row.iter_mut().zip(&values) {
            *slot = column.get(i).map_or(f64::NAN, f64::from);
        }
        batch.push(start.get(i).unwrap_or(0), end.get(i).unwrap_or(0), &row);
    }
    Ok(by_device.into_values().collect())
}
