//! The column layout of every table, declared once per row type, and the conversions between
//! row types and [`Frame`]s that the declarations generate.
//!
//! Each row type of `cufall-model` is declared by `rows!`: per field, the column (or columns)
//! it is stored in and the schema minor version that added it; the column's type and whether it
//! may hold nulls follow from the field's type ([`Cell`]). From that one declaration come the
//! table's schema ([`schema`], [`columns`]), the writer's frame ([`frame_of`]) and the reader's
//! rows ([`rows`]); a test keeps `docs/trace-format.md`'s tables equal to it. Reading checks each
//! column: a column that the file lacks is an error naming the table and the column
//! ([`ColumnError::Missing`]) unless the column may hold nulls (then every row reads `None`) or
//! the trace's version predates it (then every row reads `None`, or 0 for a count such as
//! NVTX's `category`); a null where a value is required, a column of another type, or a name
//! that is no known kind is an error too. The samples table, whose metric columns a manifest
//! names, is [`SampleColumns`], its fixed columns declared in [`SAMPLE_COLUMNS`].

use crate::frame::{Column, ColumnType, Element, Field, Frame};
use cufall_model::{
    ActivityKind, ApiCall, ApiDomain, CaptureEvent, DeviceId, DropReason, DropRecord, FrameKind,
    Gil, HostSample, HostState, KernelRecord, NvmlRow, NvtxRange, RangeKind, SampleBatch,
    StackFrame,
};

/// The tables of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    Samples,
    Drops,
    Nvml,
    Nvtx,
    Kernels,
    /// CUDA API calls (`--capture api`). Since schema 1.1.
    Api,
    /// Facts about capture per process. Since schema 1.1.
    Capture,
    /// Interned host stacks, frame by frame (`--host-stacks`). Since schema 1.2.
    Stacks,
    /// Samples of the program's host threads, naming their stacks. Since schema 1.2.
    HostSamples,
}

impl Table {
    /// Every table, in the order the writer flushes them: a stack's frames reach the disk no
    /// later than the first host sample naming it.
    pub const ALL: [Table; 9] = [
        Table::Samples,
        Table::Drops,
        Table::Nvml,
        Table::Nvtx,
        Table::Kernels,
        Table::Api,
        Table::Capture,
        Table::Stacks,
        Table::HostSamples,
    ];

    /// Folder of the table's segments inside the trace.
    pub fn dir_name(self) -> &'static str {
        match self {
            Table::Samples => "samples",
            Table::Drops => "drops",
            Table::Nvml => "nvml",
            Table::Nvtx => "nvtx",
            Table::Kernels => "kernels",
            Table::Api => "api",
            Table::Capture => "capture",
            Table::Stacks => "stacks",
            Table::HostSamples => "host_samples",
        }
    }
}

/// Column names shared by several tables.
pub mod col {
    pub const DEVICE: &str = "device";
    pub const START_NS: &str = "start_ns";
    pub const END_NS: &str = "end_ns";
    pub const T_NS: &str = "t_ns";
}

/// One column of a table as cufall declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnSpec {
    pub name: &'static str,
    pub ty: ColumnType,
    /// Whether the column may hold nulls (Parquet `OPTIONAL`).
    pub nullable: bool,
    /// The schema minor version (of major 1) that added the column.
    pub since_minor: u32,
}

impl ColumnSpec {
    pub fn field(&self) -> Field {
        Field::new(self.name, self.ty, self.nullable)
    }
}

/// Why a frame does not hold a table's rows; the reader names the file and reports it as a
/// corrupted trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ColumnError {
    #[error("the {table} table has no column `{column}`")]
    Missing { table: &'static str, column: String },
    #[error("column `{column}` of the {table} table holds {found:?} values, not {expected:?}")]
    WrongType {
        table: &'static str,
        column: String,
        expected: ColumnType,
        found: ColumnType,
    },
    #[error(
        "column `{column}` of the {table} table is null in row {row}, where a value is required"
    )]
    Null {
        table: &'static str,
        column: String,
        row: usize,
    },
    #[error(
        "column `{column}` of the {table} table holds `{value}` in row {row}, which is none of the values cufall writes there"
    )]
    Unknown {
        table: &'static str,
        column: String,
        row: usize,
        value: String,
    },
    #[error("the columns of the {table} table differ in length")]
    Lengths { table: &'static str },
}

/// What is wrong with one cell; [`Lookup`] adds the table, column and row.
pub(crate) enum Bad {
    Null,
    Unknown(String),
}

/// A field type and how it is stored: the type of its column(s), whether they may hold nulls,
/// and the conversions. Most fields fill one column; a launch dimension fills three.
pub(crate) trait Cell: Sized {
    const TYPE: ColumnType;
    const NULLABLE: bool;
    /// The columns `names` holding `values`, one per name.
    fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column>
    where
        Self: 'a;
    /// Row `i` of `cols` (one per name; each of type `TYPE` and long enough).
    fn read(cols: &[&Column], i: usize) -> Result<Self, Bad>;
    /// The value of every row of a file that predates the column; `None`: the column is
    /// required whatever the version.
    fn absent() -> Option<Self>;
}

/// The first of `cols` (single-column cells get exactly one).
fn first<'a>(cols: &[&'a Column]) -> Result<&'a Column, Bad> {
    cols.first().copied().ok_or(Bad::Null)
}

macro_rules! number_cell {
    ($($t:ty),*) => {$(
        impl Cell for $t {
            const TYPE: ColumnType = <$t as Element>::TYPE;
            const NULLABLE: bool = false;
            fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
                names.iter().take(1).map(|n| Column::new(n, values.clone().copied().collect())).collect()
            }
            fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
                first(cols)?.get::<$t>(i).ok_or(Bad::Null)
            }
            fn absent() -> Option<Self> {
                Some(<$t>::default())
            }
        }

        impl Cell for Option<$t> {
            const TYPE: ColumnType = <$t as Element>::TYPE;
            const NULLABLE: bool = true;
            fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
                names.iter().take(1).map(|n| Column::optional(n, values.clone().copied())).collect()
            }
            fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
                Ok(first(cols)?.get::<$t>(i))
            }
            fn absent() -> Option<Self> {
                Some(None)
            }
        }
    )*};
}

number_cell!(u32, u64, i64, f32, f64);

impl Cell for String {
    const TYPE: ColumnType = ColumnType::Str;
    const NULLABLE: bool = false;
    fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
        names
            .iter()
            .take(1)
            .map(|n| Column::strings(n, values.clone().map(String::as_str)))
            .collect()
    }
    fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
        first(cols)?.str(i).map(str::to_string).ok_or(Bad::Null)
    }
    fn absent() -> Option<Self> {
        None
    }
}

impl Cell for DeviceId {
    const TYPE: ColumnType = ColumnType::U16;
    const NULLABLE: bool = false;
    fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
        names
            .iter()
            .take(1)
            .map(|n| Column::new(n, values.clone().map(|d| device_u16(*d)).collect()))
            .collect()
    }
    fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
        let d = first(cols)?.get::<u16>(i).ok_or(Bad::Null)?;
        Ok(DeviceId(u32::from(d)))
    }
    fn absent() -> Option<Self> {
        None
    }
}

/// Kinds stored as their names (`as_str`, `parse`).
macro_rules! name_cell {
    ($($t:ty),*) => {$(
        impl Cell for $t {
            const TYPE: ColumnType = ColumnType::Str;
            const NULLABLE: bool = false;
            fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
                names.iter().take(1).map(|n| Column::strings(n, values.clone().map(|v| v.as_str()))).collect()
            }
            fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
                let s = first(cols)?.str(i).ok_or(Bad::Null)?;
                <$t>::parse(s).ok_or_else(|| Bad::Unknown(s.to_string()))
            }
            fn absent() -> Option<Self> {
                None
            }
        }
    )*};
}

name_cell!(
    DropReason,
    RangeKind,
    ActivityKind,
    ApiDomain,
    HostState,
    Gil,
    FrameKind
);

/// A launch dimension: three columns (x, y, z), null together.
impl Cell for Option<[u32; 3]> {
    const TYPE: ColumnType = ColumnType::U32;
    const NULLABLE: bool = true;
    fn write<'a>(names: &[&str], values: impl Iterator<Item = &'a Self> + Clone) -> Vec<Column> {
        names
            .iter()
            .take(3)
            .enumerate()
            .map(|(k, n)| Column::optional(n, values.clone().map(move |v| v.map(|d| d[k]))))
            .collect()
    }
    fn read(cols: &[&Column], i: usize) -> Result<Self, Bad> {
        let at = |k: usize| cols.get(k).and_then(|c| c.get::<u32>(i));
        Ok((|| Some([at(0)?, at(1)?, at(2)?]))())
    }
    fn absent() -> Option<Self> {
        Some(None)
    }
}

/// The columns of one field in a frame being read: checked once, then read row by row.
pub(crate) struct Lookup<'a> {
    table: &'static str,
    names: &'static [&'static str],
    /// `None`: the file predates the column(s), or lacks a column that may hold nulls.
    cols: Option<Vec<&'a Column>>,
}

impl<'a> Lookup<'a> {
    /// Finds the columns `names` of a field of type `T`, added in schema minor `since`, in a
    /// frame of `table` from a trace of schema minor `minor`.
    pub(crate) fn new<T: Cell>(
        df: &'a Frame,
        table: Table,
        names: &'static [&'static str],
        since: u32,
        minor: u32,
    ) -> Result<Self, ColumnError> {
        let table = table.dir_name();
        let mut cols = Vec::with_capacity(names.len());
        for name in names {
            let Some(c) = df.column(name) else {
                if T::NULLABLE || (minor < since && T::absent().is_some()) {
                    return Ok(Lookup {
                        table,
                        names,
                        cols: None,
                    });
                }
                return Err(ColumnError::Missing {
                    table,
                    column: (*name).to_string(),
                });
            };
            if c.values.ty() != T::TYPE {
                return Err(ColumnError::WrongType {
                    table,
                    column: (*name).to_string(),
                    expected: T::TYPE,
                    found: c.values.ty(),
                });
            }
            if c.len() != df.height() || c.valid.as_ref().is_some_and(|v| v.len() != c.len()) {
                return Err(ColumnError::Lengths { table });
            }
            cols.push(c);
        }
        Ok(Lookup {
            table,
            names,
            cols: Some(cols),
        })
    }

    /// Row `i` of the field.
    pub(crate) fn get<T: Cell>(&self, i: usize) -> Result<T, ColumnError> {
        let Some(cols) = &self.cols else {
            return T::absent().ok_or_else(|| ColumnError::Missing {
                table: self.table,
                column: self.names.first().copied().unwrap_or("").to_string(),
            });
        };
        T::read(cols, i).map_err(|bad| {
            let column = self.names.first().copied().unwrap_or("").to_string();
            match bad {
                Bad::Null => ColumnError::Null {
                    table: self.table,
                    column,
                    row: i,
                },
                Bad::Unknown(value) => ColumnError::Unknown {
                    table: self.table,
                    column,
                    row: i,
                    value,
                },
            }
        })
    }
}

/// A row type of one table, declared with `rows!`.
pub trait TableRow: Sized {
    const TABLE: Table;
    /// The table's columns, in file order.
    const COLUMNS: &'static [ColumnSpec];
    /// The rows as a frame of the table.
    fn to_frame(rows: &[Self]) -> Frame;
    /// The rows of a frame of the table, from a trace of schema minor `minor`.
    fn from_frame(df: &Frame, minor: u32) -> Result<Vec<Self>, ColumnError>;
}

/// Declares a row type's table: `field: Type => ["column", ...] since MINOR`, in column order.
/// The schema, [`TableRow::to_frame`] and [`TableRow::from_frame`] all come from this list.
macro_rules! rows {
    ($row:ident in $table:ident {
        $($field:ident: $ty:ty => [$($col:literal),+] since $since:literal,)+
    }) => {
        impl TableRow for $row {
            const TABLE: Table = Table::$table;
            const COLUMNS: &'static [ColumnSpec] = &[$($(
                ColumnSpec {
                    name: $col,
                    ty: <$ty as Cell>::TYPE,
                    nullable: <$ty as Cell>::NULLABLE,
                    since_minor: $since,
                },
            )+)+];

            fn to_frame(rows: &[Self]) -> Frame {
                let mut cols = Vec::with_capacity(Self::COLUMNS.len());
                $(cols.extend(<$ty as Cell>::write(&[$($col),+], rows.iter().map(|r| &r.$field)));)+
                Frame::new(cols)
            }

            fn from_frame(df: &Frame, minor: u32) -> Result<Vec<Self>, ColumnError> {
                $(let $field = Lookup::new::<$ty>(df, Table::$table, &[$($col),+], $since, minor)?;)+
                (0..df.height())
                    .map(|row| Ok($row { $($field: $field.get::<$ty>(row)?,)+ }))
                    .collect()
            }
        }
    };
}

rows!(DropRecord in Drops {
    device: DeviceId => ["device"] since 0,
    start_ns: i64 => ["start_ns"] since 0,
    end_ns: i64 => ["end_ns"] since 0,
    reason: DropReason => ["reason"] since 0,
    lost_samples: Option<u64> => ["lost_samples"] since 0,
});

rows!(NvmlRow in Nvml {
    device: DeviceId => ["device"] since 0,
    t_ns: i64 => ["t_ns"] since 0,
    power_w: Option<f32> => ["power_w"] since 0,
    sm_clock_mhz: Option<u32> => ["sm_clock_mhz"] since 0,
    mem_clock_mhz: Option<u32> => ["mem_clock_mhz"] since 0,
    gpu_util_pct: Option<u32> => ["gpu_util_pct"] since 0,
    mem_util_pct: Option<u32> => ["mem_util_pct"] since 0,
    mem_used_bytes: Option<u64> => ["mem_used_bytes"] since 0,
    temperature_c: Option<u32> => ["temperature_c"] since 0,
    throttle_reasons: Option<u64> => ["throttle_reasons"] since 0,
});

rows!(NvtxRange in Nvtx {
    start_ns: i64 => ["start_ns"] since 0,
    end_ns: i64 => ["end_ns"] since 0,
    name: String => ["name"] since 0,
    domain: String => ["domain"] since 0,
    kind: RangeKind => ["kind"] since 0,
    depth: u32 => ["depth"] since 0,
    pid: u32 => ["pid"] since 0,
    tid: u32 => ["tid"] since 0,
    category: u32 => ["category"] since 1,
    color: Option<u32> => ["color"] since 1,
    payload_int: Option<i64> => ["payload_int"] since 1,
    payload_float: Option<f64> => ["payload_float"] since 1,
});

rows!(KernelRecord in Kernels {
    device: DeviceId => ["device"] since 0,
    start_ns: i64 => ["start_ns"] since 0,
    end_ns: i64 => ["end_ns"] since 0,
    kind: ActivityKind => ["kind"] since 0,
    name: String => ["name"] since 0,
    stream: u32 => ["stream"] since 0,
    correlation_id: u32 => ["correlation_id"] since 0,
    bytes: Option<u64> => ["bytes"] since 0,
    pid: u32 => ["pid"] since 0,
    grid: Option<[u32; 3]> => ["grid_x", "grid_y", "grid_z"] since 1,
    block: Option<[u32; 3]> => ["block_x", "block_y", "block_z"] since 1,
    context_id: Option<u32> => ["context_id"] since 1,
    graph_id: Option<u32> => ["graph_id"] since 1,
});

rows!(ApiCall in Api {
    start_ns: i64 => ["start_ns"] since 1,
    end_ns: i64 => ["end_ns"] since 1,
    domain: ApiDomain => ["domain"] since 1,
    name: String => ["name"] since 1,
    pid: u32 => ["pid"] since 1,
    tid: u32 => ["tid"] since 1,
    correlation_id: u32 => ["correlation_id"] since 1,
});

rows!(CaptureEvent in Capture {
    t_ns: i64 => ["t_ns"] since 1,
    pid: u32 => ["pid"] since 1,
    event: String => ["event"] since 1,
    count: u64 => ["count"] since 1,
    detail: String => ["detail"] since 1,
});

rows!(StackFrame in Stacks {
    stack_id: u64 => ["stack_id"] since 2,
    depth: u32 => ["depth"] since 2,
    function: String => ["function"] since 2,
    file: String => ["file"] since 2,
    line: Option<u32> => ["line"] since 2,
    module: String => ["module"] since 2,
    kind: FrameKind => ["kind"] since 2,
});

rows!(HostSample in HostSamples {
    t_ns: i64 => ["t_ns"] since 2,
    pid: u32 => ["pid"] since 2,
    tid: u32 => ["tid"] since 2,
    thread_name: String => ["thread_name"] since 2,
    state: HostState => ["state"] since 2,
    gil: Gil => ["gil"] since 2,
    stack_id: u64 => ["stack_id"] since 2,
});

/// The fixed columns of the samples table; one `Float32` column per metric follows them.
pub const SAMPLE_COLUMNS: [ColumnSpec; 3] = [
    ColumnSpec {
        name: col::DEVICE,
        ty: ColumnType::U16,
        nullable: false,
        since_minor: 0,
    },
    ColumnSpec {
        name: col::START_NS,
        ty: ColumnType::I64,
        nullable: false,
        since_minor: 0,
    },
    ColumnSpec {
        name: col::END_NS,
        ty: ColumnType::I64,
        nullable: false,
        since_minor: 0,
    },
];

/// The declared columns of `table` (for the samples table, those before the metric columns).
pub fn columns(table: Table) -> &'static [ColumnSpec] {
    match table {
        Table::Samples => &SAMPLE_COLUMNS,
        Table::Drops => DropRecord::COLUMNS,
        Table::Nvml => NvmlRow::COLUMNS,
        Table::Nvtx => NvtxRange::COLUMNS,
        Table::Kernels => KernelRecord::COLUMNS,
        Table::Api => ApiCall::COLUMNS,
        Table::Capture => CaptureEvent::COLUMNS,
        Table::Stacks => StackFrame::COLUMNS,
        Table::HostSamples => HostSample::COLUMNS,
    }
}

/// The schema of `table` (the samples table with these metric columns).
pub fn schema(table: Table, metrics: &[&str]) -> Vec<Field> {
    let fixed = columns(table).iter().map(ColumnSpec::field);
    match table {
        Table::Samples => fixed
            .chain(
                metrics
                    .iter()
                    .map(|m| Field::new(*m, ColumnType::F32, false)),
            )
            .collect(),
        _ => fixed.collect(),
    }
}

/// `rows` as a frame of their table.
pub fn frame_of<R: TableRow>(rows: &[R]) -> Frame {
    R::to_frame(rows)
}

/// The rows of a frame of `R`'s table, from a trace of schema minor `minor`.
pub(crate) fn rows<R: TableRow>(df: &Frame, minor: u32) -> Result<Vec<R>, ColumnError> {
    R::from_frame(df, minor)
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
        self.retain_rows(|i| keep[i]);
    }

    /// Keeps the rows `keep` is true of, by row number.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        fn filter<T: Copy>(v: &mut Vec<T>, keep: &impl Fn(usize) -> bool) {
            let mut i = 0;
            v.retain(|_| {
                i += 1;
                keep(i - 1)
            });
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
        let [device, start_ns, end_ns] = SAMPLE_COLUMNS.map(|c| c.name);
        let mut cols = vec![
            Column::new(device, std::mem::take(&mut self.device)),
            Column::new(start_ns, std::mem::take(&mut self.start_ns)),
            Column::new(end_ns, std::mem::take(&mut self.end_ns)),
        ];
        for (name, values) in metrics.iter().zip(self.values.iter_mut()) {
            cols.push(Column::new(name, std::mem::take(values)));
        }
        Frame::new(cols)
    }

    /// The rows of a samples frame with the named metric columns. A null metric value reads as
    /// NaN; a null in a fixed column is an error.
    pub(crate) fn from_frame(mut df: Frame, metrics: &[&str]) -> Result<Self, ColumnError> {
        let table = Table::Samples.dir_name();
        let height = df.height();
        let mut take = |name: &str| -> Result<Column, ColumnError> {
            let i = df
                .columns
                .iter()
                .position(|c| c.name == name)
                .ok_or_else(|| ColumnError::Missing {
                    table,
                    column: name.to_string(),
                })?;
            Ok(df.columns.swap_remove(i))
        };
        let [device, start_ns, end_ns] = SAMPLE_COLUMNS.map(|c| take(c.name));
        let device = required::<u16>(device?)?;
        let start_ns = required::<i64>(start_ns?)?;
        let end_ns = required::<i64>(end_ns?)?;
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
        if n != height
            || device.len() != n
            || end_ns.len() != n
            || values.iter().any(|v| v.len() != n)
        {
            return Err(ColumnError::Lengths { table });
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

/// The values of a column of the samples table, of type `T` (a null slot reads as the type's
/// default, which [`SampleColumns::from_frame`] turns into NaN for metric values).
fn into_vec<T: Element>(c: Column) -> Result<Vec<T>, ColumnError> {
    let found = c.values.ty();
    T::take(c.values).ok_or_else(|| ColumnError::WrongType {
        table: Table::Samples.dir_name(),
        column: c.name,
        expected: T::TYPE,
        found,
    })
}

/// The values of a fixed column of the samples table, which holds no null.
fn required<T: Element>(mut c: Column) -> Result<Vec<T>, ColumnError> {
    if let Some(row) = c.valid.take().and_then(|v| v.iter().position(|ok| !ok)) {
        return Err(ColumnError::Null {
            table: Table::Samples.dir_name(),
            column: c.name,
            row,
        });
    }
    into_vec(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name `docs/trace-format.md` gives a column type.
    fn doc_type(ty: ColumnType) -> &'static str {
        match ty {
            ColumnType::U16 => "UInt16",
            ColumnType::U32 => "UInt32",
            ColumnType::U64 => "UInt64",
            ColumnType::I64 => "Int64",
            ColumnType::F32 => "Float32",
            ColumnType::F64 => "Float64",
            ColumnType::Str => "String",
        }
    }

    /// One column as the docs list it: name, type, nullable, since (minor).
    type DocColumn = (String, String, bool, u32);

    /// The column tables of the docs' "Tables" section, by table name. A cell naming several
    /// columns (`` `start_ns`, `end_ns` ``) gives one entry per name; the samples table's
    /// *metric name* row is kept as the name `*`.
    fn documented() -> Vec<(String, Vec<DocColumn>)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/trace-format.md");
        let text = std::fs::read_to_string(path).expect("docs/trace-format.md");
        let tables = text
            .split("\n## Tables\n")
            .nth(1)
            .and_then(|t| t.split("\n## ").next())
            .expect("a Tables section");
        let mut out: Vec<(String, Vec<DocColumn>)> = Vec::new();
        for line in tables.lines() {
            if let Some(h) = line.strip_prefix("### ") {
                let name = h.split_whitespace().next().expect("a table name");
                out.push((name.to_string(), Vec::new()));
                continue;
            }
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // `| a | b | c | d |` splits into six, empty at both ends.
            if cells.len() != 6 || cells[1] == "column" || cells[1].starts_with("---") {
                continue;
            }
            let (col, ty, since) = (cells[1], cells[2], cells[3]);
            let (ty, nullable) = match ty.strip_suffix(", nullable") {
                Some(t) => (t, true),
                None => (ty, false),
            };
            let since = match since {
                "1.0" => 0,
                "1.1" => 1,
                "1.2" => 2,
                "1.3" => 3,
                other => panic!("`since` {other} in row `{line}`"),
            };
            let names: Vec<String> = if col == "*metric name*" {
                vec!["*".into()]
            } else {
                col.split(',')
                    .map(|n| n.trim().trim_matches('`').to_string())
                    .collect()
            };
            let table = &mut out.last_mut().expect("a row under a table heading").1;
            for n in names {
                table.push((n, ty.to_string(), nullable, since));
            }
        }
        out
    }

    #[test]
    fn the_docs_list_every_table_and_column_as_declared() {
        let docs = documented();
        let names: Vec<&str> = docs.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<&str> = Table::ALL.iter().map(|t| t.dir_name()).collect();
        assert_eq!(names, want, "the tables of docs/trace-format.md");
        for (table, (name, doc)) in Table::ALL.iter().zip(&docs) {
            let mut declared: Vec<DocColumn> = columns(*table)
                .iter()
                .map(|c| {
                    let ty = doc_type(c.ty).to_string();
                    (c.name.to_string(), ty, c.nullable, c.since_minor)
                })
                .collect();
            if *table == Table::Samples {
                declared.push(("*".into(), "Float32".into(), false, 0));
            }
            assert_eq!(doc, &declared, "columns of the {name} table");
        }
    }

    #[test]
    fn the_schema_is_the_declared_columns() {
        let nvtx = schema(Table::Nvtx, &[]);
        assert_eq!(nvtx.len(), NvtxRange::COLUMNS.len());
        assert_eq!(nvtx[8], Field::new("category", ColumnType::U32, false));
        let kernels = schema(Table::Kernels, &[]);
        let names: Vec<&str> = kernels.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names[9..12], ["grid_x", "grid_y", "grid_z"]);
        let samples = schema(Table::Samples, &["m"]);
        assert_eq!(samples[3], Field::new("m", ColumnType::F32, false));
        assert_eq!(samples.len(), 4);
    }

    fn range(name: &str) -> NvtxRange {
        NvtxRange {
            start_ns: 10,
            end_ns: 20,
            name: name.into(),
            domain: String::new(),
            kind: RangeKind::PushPop,
            depth: 0,
            pid: 1,
            tid: 2,
            category: 7,
            color: Some(0xff00_00ff),
            payload_int: None,
            payload_float: Some(0.5),
        }
    }

    fn kernel() -> KernelRecord {
        KernelRecord {
            device: DeviceId(1),
            start_ns: 5,
            end_ns: 9,
            kind: ActivityKind::Kernel,
            name: "k".into(),
            stream: 7,
            correlation_id: 3,
            bytes: None,
            pid: 11,
            grid: Some([4, 2, 1]),
            block: None,
            context_id: Some(1),
            graph_id: None,
        }
    }

    fn without(mut f: Frame, name: &str) -> Frame {
        f.columns.retain(|c| c.name != name);
        f
    }

    #[test]
    fn rows_come_back_as_written() {
        let nvtx = vec![range("a"), range("b")];
        let frame = frame_of(&nvtx);
        assert_eq!(frame.schema(), schema(Table::Nvtx, &[]));
        assert_eq!(rows::<NvtxRange>(&frame, 1), Ok(nvtx));
        let kernels = vec![kernel()];
        let frame = frame_of(&kernels);
        assert_eq!(frame.schema(), schema(Table::Kernels, &[]));
        assert_eq!(rows::<KernelRecord>(&frame, 1), Ok(kernels));
    }

    #[test]
    fn a_missing_required_column_is_an_error_naming_table_and_column() {
        let frame = without(frame_of(&[range("a")]), "tid");
        assert_eq!(
            rows::<NvtxRange>(&frame, 1),
            Err(ColumnError::Missing {
                table: "nvtx",
                column: "tid".into()
            })
        );
        let text = rows::<NvtxRange>(&frame, 1).unwrap_err().to_string();
        assert_eq!(text, "the nvtx table has no column `tid`");
        // `category` came with 1.1: a 1.1 trace must have it, a 1.0 trace reads it as 0.
        let frame = without(frame_of(&[range("a")]), "category");
        assert!(matches!(
            rows::<NvtxRange>(&frame, 1),
            Err(ColumnError::Missing { column, .. }) if column == "category"
        ));
        assert_eq!(rows::<NvtxRange>(&frame, 0).unwrap()[0].category, 0);
    }

    #[test]
    fn a_missing_nullable_column_reads_as_none() {
        let frame = without(frame_of(&[range("a")]), "color");
        let back = rows::<NvtxRange>(&frame, 1).unwrap();
        assert_eq!(back[0].color, None);
        assert_eq!(back[0].payload_float, Some(0.5));
        let frame = without(frame_of(&[kernel()]), "grid_y");
        assert_eq!(rows::<KernelRecord>(&frame, 1).unwrap()[0].grid, None);
    }

    #[test]
    fn nulls_types_and_unknown_names_are_errors_naming_the_column() {
        let mut frame = frame_of(&[range("a"), range("b")]);
        for c in &mut frame.columns {
            if c.name == "depth" {
                c.valid = Some(vec![true, false]);
            }
        }
        assert_eq!(
            rows::<NvtxRange>(&frame, 1),
            Err(ColumnError::Null {
                table: "nvtx",
                column: "depth".into(),
                row: 1
            })
        );
        let mut frame = frame_of(&[range("a")]);
        for c in &mut frame.columns {
            if c.name == "pid" {
                c.values = crate::frame::Values::U64(vec![1]);
            }
        }
        assert!(matches!(
            rows::<NvtxRange>(&frame, 1),
            Err(ColumnError::WrongType { column, found: ColumnType::U64, .. }) if column == "pid"
        ));
        let mut frame = frame_of(&[range("a")]);
        for c in &mut frame.columns {
            if c.name == "kind" {
                c.values = crate::frame::Values::Str(vec!["sideways".into()]);
            }
        }
        assert_eq!(
            rows::<NvtxRange>(&frame, 1),
            Err(ColumnError::Unknown {
                table: "nvtx",
                column: "kind".into(),
                row: 0,
                value: "sideways".into()
            })
        );
    }

    #[test]
    fn samples_keep_nan_for_null_values_and_refuse_null_times() {
        let mut rows = SampleColumns::new(1);
        let mut batch = SampleBatch::new(DeviceId(0), 1);
        batch.push(0, 10, &[1.0]);
        batch.push(10, 20, &[2.0]);
        rows.extend(&batch);
        let mut frame = rows.into_frame(&["m"]);
        frame.columns[3].valid = Some(vec![true, false]);
        let back = SampleColumns::from_frame(frame.clone(), &["m"]).unwrap();
        assert_eq!(back.values[0][0], 1.0);
        assert!(back.values[0][1].is_nan());
        assert!(matches!(
            SampleColumns::from_frame(frame.clone(), &["other"]),
            Err(ColumnError::Missing { column, .. }) if column == "other"
        ));
        frame.columns[1].valid = Some(vec![false, true]);
        assert_eq!(
            SampleColumns::from_frame(frame, &["m"]),
            Err(ColumnError::Null {
                table: "samples",
                column: "start_ns".into(),
                row: 0
            })
        );
    }
}
