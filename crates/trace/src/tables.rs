//! Column layouts of the tables and conversions between row types and [`Frame`]s.

use crate::Table;
use crate::frame::{Column, ColumnType, Element, Field, Frame};
use crate::model::{
    ActivityKind, ApiCall, ApiDomain, CaptureEvent, DeviceId, DropReason, DropRecord, KernelRecord,
    NvmlRow, NvtxRange, RangeKind, SampleBatch,
};

/// Column names shared by several tables.
pub mod col {
    pub const DEVICE: &str = "device";
    pub const START_NS: &str = "start_ns";
    pub const END_NS: &str = "end_ns";
    pub const T_NS: &str = "t_ns";
}

/// Why a frame does not hold a table's rows; the reader wraps it into a corruption error.
pub(crate) type Why = String;

/// Columns of the NVML table after `device` and `t_ns`, with their types (all may be null).
pub(crate) const NVML_COLUMNS: [(&str, ColumnType); 8] = [
    ("power_w", ColumnType::F32),
    ("sm_clock_mhz", ColumnType::U32),
    ("mem_clock_mhz", ColumnType::U32),
    ("gpu_util_pct", ColumnType::U32),
    ("mem_util_pct", ColumnType::U32),
    ("mem_used_bytes", ColumnType::U64),
    ("temperature_c", ColumnType::U32),
    ("throttle_reasons", ColumnType::U64),
];

/// The schema of `table` (the samples table with these metric columns).
pub fn schema(table: Table, metrics: &[&str]) -> Vec<Field> {
    use ColumnType::{F32, F64, I64, Str, U16, U32, U64};
    let req = |n: &str, t| Field::new(n, t, false);
    let opt = |n: &str, t| Field::new(n, t, true);
    match table {
        Table::Samples => [
            req(col::DEVICE, U16),
            req(col::START_NS, I64),
            req(col::END_NS, I64),
        ]
        .into_iter()
        .chain(metrics.iter().map(|m| req(m, F32)))
        .collect(),
        Table::Drops => vec![
            req(col::DEVICE, U16),
            req(col::START_NS, I64),
            req(col::END_NS, I64),
            req("reason", Str),
            opt("lost_samples", U64),
        ],
        Table::Nvml => [req(col::DEVICE, U16), req(col::T_NS, I64)]
            .into_iter()
            .chain(NVML_COLUMNS.iter().map(|(n, t)| opt(n, *t)))
            .collect(),
        Table::Nvtx => vec![
            req(col::START_NS, I64),
            req(col::END_NS, I64),
            req("name", Str),
            req("domain", Str),
            req("kind", Str),
            req("depth", U32),
            req("pid", U32),
            req("tid", U32),
            req("category", U32),
            opt("color", U32),
            opt("payload_int", I64),
            opt("payload_float", F64),
        ],
        Table::Kernels => [
            req(col::DEVICE, U16),
            req(col::START_NS, I64),
            req(col::END_NS, I64),
            req("kind", Str),
            req("name", Str),
            req("stream", U32),
            req("correlation_id", U32),
            opt("bytes", U64),
            req("pid", U32),
        ]
        .into_iter()
        .chain(
            [
                "grid_x",
                "grid_y",
                "grid_z",
                "block_x",
                "block_y",
                "block_z",
                "context_id",
                "graph_id",
            ]
            .map(|n| opt(n, U32)),
        )
        .collect(),
        Table::Api => vec![
            req(col::START_NS, I64),
            req(col::END_NS, I64),
            req("domain", Str),
            req("name", Str),
            req("pid", U32),
            req("tid", U32),
            req("correlation_id", U32),
        ],
        Table::Capture => vec![
            req(col::T_NS, I64),
            req("pid", U32),
            req("event", Str),
            req("count", U64),
            req("detail", Str),
        ],
    }
}

fn device_u16(d: DeviceId) -> u16 {
    // Device ordinals are small; a machine with more than 65,535 GPUs is not a concern.
    u16::try_from(d.0).unwrap_or(u16::MAX)
}

/// Samples of one or more devices in the column layout of the samples table: what the writer
/// buffers and what a scan of the samples table hands out, a segment at a time. Metric values
/// are `f32`; a value missing in the file reads as NaN.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleColumns {
    pub device: Vec<u16>,
    pub start_ns: Vec<i64>,
    pub end_ns: Vec<i64>,
    /// One column per metric, in the order they were asked for.
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

    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
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

    /// Keeps the rows whose start lies in `[lo, hi)`.
    pub fn retain_between(&mut self, lo: i64, hi: i64) {
        if self.start_ns.iter().all(|t| (lo..hi).contains(t)) {
            return;
        }
        let keep: Vec<bool> = self.start_ns.iter().map(|t| (lo..hi).contains(t)).collect();
        fn filter<T: Copy>(v: &mut Vec<T>, keep: &[bool]) {
            let mut k = keep.iter();
            v.retain(|_| k.next().copied().unwrap_or(false));
        }
        filter(&mut self.device, &keep);
        filter(&mut self.start_ns, &keep);
        filter(&mut self.end_ns, &keep);
        for v in &mut self.values {
            filter(v, &keep);
        }
    }

    /// The rows as a frame of the samples table, the metric columns named `metrics`.
    pub fn into_frame(mut self, metrics: &[&str]) -> Frame {
        let names: Vec<String> = metrics.iter().map(|m| (*m).to_string()).collect();
        self.take_frame(&names)
    }

    /// The buffered rows as a frame of the samples table (the buffers are left empty).
    pub(crate) fn take_frame(&mut self, metrics: &[String]) -> Frame {
        let mut cols = vec![
            Column::new(col::DEVICE, std::mem::take(&mut self.device)),
            Column::new(col::START_NS, std::mem::take(&mut self.start_ns)),
            Column::new(col::END_NS, std::mem::take(&mut self.end_ns)),
        ];
        for (name, values) in metrics.iter().zip(self.values.iter_mut()) {
            cols.push(Column::new(name, std::mem::take(values)));
        }
        Frame::new(cols)
    }

    /// The rows of a samples frame with the named metric columns.
    pub(crate) fn from_frame(mut df: Frame, metrics: &[&str]) -> Result<Self, Why> {
        let mut take = |name: &str| -> Result<Column, Why> {
            let i = df
                .columns
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| format!("the samples table has no column `{name}`"))?;
            Ok(df.columns.swap_remove(i))
        };
        let device = into_vec::<u16>(take(col::DEVICE)?)?;
        let start_ns = into_vec::<i64>(take(col::START_NS)?)?;
        let end_ns = into_vec::<i64>(take(col::END_NS)?)?;
        let mut values: Vec<Vec<f32>> = Vec::with_capacity(metrics.len());
        for (i, m) in metrics.iter().enumerate() {
            // A metric asked for twice is read once.
            if let Some(j) = metrics[..i].iter().position(|x| x == m) {
                values.push(values[j].clone());
                continue;
            }
            let mut c = take(m)?;
            let valid = c.valid.take();
            let mut v = into_vec::<f32>(c)?;
            if let Some(valid) = valid {
                for (x, ok) in v.iter_mut().zip(valid) {
                    if !ok {
                        *x = f32::NAN;
                    }
                }
            }
            values.push(v);
        }
        let n = start_ns.len();
        if device.len() != n || end_ns.len() != n || values.iter().any(|v| v.len() != n) {
            return Err("the samples table's columns differ in length".into());
        }
        Ok(SampleColumns {
            device,
            start_ns,
            end_ns,
            values,
        })
    }

    /// The rows split by device, in the order they come.
    pub fn into_batches(self) -> Vec<SampleBatch> {
        let mut by_device: std::collections::BTreeMap<u16, SampleBatch> = Default::default();
        let metrics = self.values.len();
        let mut row = vec![0f64; metrics];
        for i in 0..self.len() {
            let d = self.device[i];
            let batch = by_device
                .entry(d)
                .or_insert_with(|| SampleBatch::new(DeviceId(u32::from(d)), metrics));
            for (slot, column) in row.iter_mut().zip(&self.values) {
                *slot = f64::from(column[i]);
            }
            batch.push(self.start_ns[i], self.end_ns[i], &row);
        }
        by_device.into_values().collect()
    }
}

/// The values of a column (a null slot reads as 0, as the sampler never writes one there).
fn into_vec<T: Element>(c: Column) -> Result<Vec<T>, Why> {
    let name = c.name;
    T::take(c.values).ok_or_else(|| format!("column `{name}` has the wrong type"))
}

pub(crate) fn drops_frame(rows: &[DropRecord]) -> Frame {
    Frame::new(vec![
        Column::new(
            col::DEVICE,
            rows.iter().map(|r| device_u16(r.device)).collect(),
        ),
        Column::new(col::START_NS, rows.iter().map(|r| r.start_ns).collect()),
        Column::new(col::END_NS, rows.iter().map(|r| r.end_ns).collect()),
        Column::strings("reason", rows.iter().map(|r| r.reason.as_str())),
        Column::optional("lost_samples", rows.iter().map(|r| r.lost_samples)),
    ])
}

pub(crate) fn nvml_frame(rows: &[NvmlRow]) -> Frame {
    Frame::new(vec![
        Column::new(
            col::DEVICE,
            rows.iter().map(|r| device_u16(r.device)).collect(),
        ),
        Column::new(col::T_NS, rows.iter().map(|r| r.t_ns).collect()),
        Column::optional("power_w", rows.iter().map(|r| r.power_w)),
        Column::optional("sm_clock_mhz", rows.iter().map(|r| r.sm_clock_mhz)),
        Column::optional("mem_clock_mhz", rows.iter().map(|r| r.mem_clock_mhz)),
        Column::optional("gpu_util_pct", rows.iter().map(|r| r.gpu_util_pct)),
        Column::optional("mem_util_pct", rows.iter().map(|r| r.mem_util_pct)),
        Column::optional("mem_used_bytes", rows.iter().map(|r| r.mem_used_bytes)),
        Column::optional("temperature_c", rows.iter().map(|r| r.temperature_c)),
        Column::optional("throttle_reasons", rows.iter().map(|r| r.throttle_reasons)),
    ])
}

pub(crate) fn nvtx_frame(rows: &[NvtxRange]) -> Frame {
    Frame::new(vec![
        Column::new(col::START_NS, rows.iter().map(|r| r.start_ns).collect()),
        Column::new(col::END_NS, rows.iter().map(|r| r.end_ns).collect()),
        Column::strings("name", rows.iter().map(|r| r.name.as_str())),
        Column::strings("domain", rows.iter().map(|r| r.domain.as_str())),
        Column::strings("kind", rows.iter().map(|r| r.kind.as_str())),
        Column::new("depth", rows.iter().map(|r| r.depth).collect()),
        Column::new("pid", rows.iter().map(|r| r.pid).collect()),
        Column::new("tid", rows.iter().map(|r| r.tid).collect()),
        Column::new("category", rows.iter().map(|r| r.category).collect()),
        Column::optional("color", rows.iter().map(|r| r.color)),
        Column::optional("payload_int", rows.iter().map(|r| r.payload_int)),
        Column::optional("payload_float", rows.iter().map(|r| r.payload_float)),
    ])
}

pub(crate) fn kernels_frame(rows: &[KernelRecord]) -> Frame {
    let dim = |name: &str, f: &dyn Fn(&KernelRecord) -> Option<u32>| {
        Column::optional(name, rows.iter().map(f))
    };
    Frame::new(vec![
        Column::new(
            col::DEVICE,
            rows.iter().map(|r| device_u16(r.device)).collect(),
        ),
        Column::new(col::START_NS, rows.iter().map(|r| r.start_ns).collect()),
        Column::new(col::END_NS, rows.iter().map(|r| r.end_ns).collect()),
        Column::strings("kind", rows.iter().map(|r| r.kind.as_str())),
        Column::strings("name", rows.iter().map(|r| r.name.as_str())),
        Column::new("stream", rows.iter().map(|r| r.stream).collect()),
        Column::new(
            "correlation_id",
            rows.iter().map(|r| r.correlation_id).collect(),
        ),
        Column::optional("bytes", rows.iter().map(|r| r.bytes)),
        Column::new("pid", rows.iter().map(|r| r.pid).collect()),
        dim("grid_x", &|r| r.grid.map(|g| g[0])),
        dim("grid_y", &|r| r.grid.map(|g| g[1])),
        dim("grid_z", &|r| r.grid.map(|g| g[2])),
        dim("block_x", &|r| r.block.map(|b| b[0])),
        dim("block_y", &|r| r.block.map(|b| b[1])),
        dim("block_z", &|r| r.block.map(|b| b[2])),
        dim("context_id", &|r| r.context_id),
        dim("graph_id", &|r| r.graph_id),
    ])
}

pub(crate) fn api_frame(rows: &[ApiCall]) -> Frame {
    Frame::new(vec![
        Column::new(col::START_NS, rows.iter().map(|r| r.start_ns).collect()),
        Column::new(col::END_NS, rows.iter().map(|r| r.end_ns).collect()),
        Column::strings("domain", rows.iter().map(|r| r.domain.as_str())),
        Column::strings("name", rows.iter().map(|r| r.name.as_str())),
        Column::new("pid", rows.iter().map(|r| r.pid).collect()),
        Column::new("tid", rows.iter().map(|r| r.tid).collect()),
        Column::new(
            "correlation_id",
            rows.iter().map(|r| r.correlation_id).collect(),
        ),
    ])
}

pub(crate) fn capture_frame(rows: &[CaptureEvent]) -> Frame {
    Frame::new(vec![
        Column::new(col::T_NS, rows.iter().map(|r| r.t_ns).collect()),
        Column::new("pid", rows.iter().map(|r| r.pid).collect()),
        Column::strings("event", rows.iter().map(|r| r.event.as_str())),
        Column::new("count", rows.iter().map(|r| r.count).collect()),
        Column::strings("detail", rows.iter().map(|r| r.detail.as_str())),
    ])
}

/// A column the table must have, of element type `T`.
fn need<'a, T: Element>(df: &'a Frame, name: &str) -> Result<&'a Column, Why> {
    let c = df
        .column(name)
        .ok_or_else(|| format!("the table has no column `{name}`"))?;
    if c.slice::<T>().is_none() {
        return Err(format!("column `{name}` has the wrong type"));
    }
    Ok(c)
}

/// A string column the table must have.
fn need_str<'a>(df: &'a Frame, name: &str) -> Result<&'a Column, Why> {
    let c = df
        .column(name)
        .ok_or_else(|| format!("the table has no column `{name}`"))?;
    if c.values.ty() != ColumnType::Str {
        return Err(format!("column `{name}` has the wrong type"));
    }
    Ok(c)
}

/// A column that traces of schema 1.0 lack: `None` when absent.
fn optional<'a, T: Element>(df: &'a Frame, name: &str) -> Result<Option<&'a Column>, Why> {
    match df.column(name) {
        Some(_) => need::<T>(df, name).map(Some),
        None => Ok(None),
    }
}

fn device_at(c: &Column, i: usize) -> DeviceId {
    DeviceId(u32::from(c.get::<u16>(i).unwrap_or(0)))
}

/// Typed rows back from frames.
pub(crate) fn drops_from(df: &Frame) -> Result<Vec<DropRecord>, Why> {
    let device = need::<u16>(df, col::DEVICE)?;
    let start = need::<i64>(df, col::START_NS)?;
    let end = need::<i64>(df, col::END_NS)?;
    let reason = need_str(df, "reason")?;
    let lost = need::<u64>(df, "lost_samples")?;
    (0..df.height())
        .map(|i| {
            let r = reason.str(i).unwrap_or("");
            Ok(DropRecord {
                device: device_at(device, i),
                start_ns: start.get(i).unwrap_or(0),
                end_ns: end.get(i).unwrap_or(0),
                reason: DropReason::parse(r).ok_or_else(|| format!("unknown drop reason `{r}`"))?,
                lost_samples: lost.get(i),
            })
        })
        .collect()
}

pub(crate) fn nvml_from(df: &Frame) -> Result<Vec<NvmlRow>, Why> {
    let device = need::<u16>(df, col::DEVICE)?;
    let t = need::<i64>(df, col::T_NS)?;
    let power = need::<f32>(df, "power_w")?;
    let sm = need::<u32>(df, "sm_clock_mhz")?;
    let mem = need::<u32>(df, "mem_clock_mhz")?;
    let gpu_util = need::<u32>(df, "gpu_util_pct")?;
    let mem_util = need::<u32>(df, "mem_util_pct")?;
    let used = need::<u64>(df, "mem_used_bytes")?;
    let temp = need::<u32>(df, "temperature_c")?;
    let throttle = need::<u64>(df, "throttle_reasons")?;
    Ok((0..df.height())
        .map(|i| NvmlRow {
            device: device_at(device, i),
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

pub(crate) fn nvtx_from(df: &Frame) -> Result<Vec<NvtxRange>, Why> {
    let start = need::<i64>(df, col::START_NS)?;
    let end = need::<i64>(df, col::END_NS)?;
    let name = need_str(df, "name")?;
    let domain = need_str(df, "domain")?;
    let kind = need_str(df, "kind")?;
    let depth = need::<u32>(df, "depth")?;
    let pid = need::<u32>(df, "pid")?;
    let tid = need::<u32>(df, "tid")?;
    let category = optional::<u32>(df, "category")?;
    let color = optional::<u32>(df, "color")?;
    let payload_int = optional::<i64>(df, "payload_int")?;
    let payload_float = optional::<f64>(df, "payload_float")?;
    (0..df.height())
        .map(|i| {
            let k = kind.str(i).unwrap_or("");
            Ok(NvtxRange {
                category: category.and_then(|c| c.get(i)).unwrap_or(0),
                color: color.and_then(|c| c.get(i)),
                payload_int: payload_int.and_then(|c| c.get(i)),
                payload_float: payload_float.and_then(|c| c.get(i)),
                start_ns: start.get(i).unwrap_or(0),
                end_ns: end.get(i).unwrap_or(0),
                name: name.str(i).unwrap_or("").to_string(),
                domain: domain.str(i).unwrap_or("").to_string(),
                kind: RangeKind::parse(k).ok_or_else(|| format!("unknown range kind `{k}`"))?,
                depth: depth.get(i).unwrap_or(0),
                pid: pid.get(i).unwrap_or(0),
                tid: tid.get(i).unwrap_or(0),
            })
        })
        .collect()
}

pub(crate) fn kernels_from(df: &Frame) -> Result<Vec<KernelRecord>, Why> {
    let device = need::<u16>(df, col::DEVICE)?;
    let start = need::<i64>(df, col::START_NS)?;
    let end = need::<i64>(df, col::END_NS)?;
    let kind = need_str(df, "kind")?;
    let name = need_str(df, "name")?;
    let stream = need::<u32>(df, "stream")?;
    let corr = need::<u32>(df, "correlation_id")?;
    let bytes = need::<u64>(df, "bytes")?;
    let pid = need::<u32>(df, "pid")?;
    let [gx, gy, gz, bx, by, bz, context, graph] = [
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "context_id",
        "graph_id",
    ]
    .map(|n| optional::<u32>(df, n));
    let (gx, gy, gz, bx, by, bz) = (gx?, gy?, gz?, bx?, by?, bz?);
    let (context, graph) = (context?, graph?);
    let triple = |a: Option<&Column>, b: Option<&Column>, c: Option<&Column>, i| {
        Some([a?.get(i)?, b?.get(i)?, c?.get(i)?])
    };
    (0..df.height())
        .map(|i| {
            let k = kind.str(i).unwrap_or("");
            Ok(KernelRecord {
                grid: triple(gx, gy, gz, i),
                block: triple(bx, by, bz, i),
                context_id: context.and_then(|c| c.get(i)),
                graph_id: graph.and_then(|c| c.get(i)),
                device: device_at(device, i),
                start_ns: start.get(i).unwrap_or(0),
                end_ns: end.get(i).unwrap_or(0),
                kind: ActivityKind::parse(k)
                    .ok_or_else(|| format!("unknown activity kind `{k}`"))?,
                name: name.str(i).unwrap_or("").to_string(),
                stream: stream.get(i).unwrap_or(0),
                correlation_id: corr.get(i).unwrap_or(0),
                bytes: bytes.get(i),
                pid: pid.get(i).unwrap_or(0),
            })
        })
        .collect()
}

pub(crate) fn api_from(df: &Frame) -> Result<Vec<ApiCall>, Why> {
    let start = need::<i64>(df, col::START_NS)?;
    let end = need::<i64>(df, col::END_NS)?;
    let domain = need_str(df, "domain")?;
    let name = need_str(df, "name")?;
    let pid = need::<u32>(df, "pid")?;
    let tid = need::<u32>(df, "tid")?;
    let corr = need::<u32>(df, "correlation_id")?;
    (0..df.height())
        .map(|i| {
            let d = domain.str(i).unwrap_or("");
            Ok(ApiCall {
                start_ns: start.get(i).unwrap_or(0),
                end_ns: end.get(i).unwrap_or(0),
                domain: ApiDomain::parse(d).ok_or_else(|| format!("unknown API domain `{d}`"))?,
                name: name.str(i).unwrap_or("").to_string(),
                pid: pid.get(i).unwrap_or(0),
                tid: tid.get(i).unwrap_or(0),
                correlation_id: corr.get(i).unwrap_or(0),
            })
        })
        .collect()
}

pub(crate) fn capture_from(df: &Frame) -> Result<Vec<CaptureEvent>, Why> {
    let t = need::<i64>(df, col::T_NS)?;
    let pid = need::<u32>(df, "pid")?;
    let event = need_str(df, "event")?;
    let count = need::<u64>(df, "count")?;
    let detail = need_str(df, "detail")?;
    Ok((0..df.height())
        .map(|i| CaptureEvent {
            t_ns: t.get(i).unwrap_or(0),
            pid: pid.get(i).unwrap_or(0),
            event: event.str(i).unwrap_or("").to_string(),
            count: count.get(i).unwrap_or(0),
            detail: detail.str(i).unwrap_or("").to_string(),
        })
        .collect())
}
