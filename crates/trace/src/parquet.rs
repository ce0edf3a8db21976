//! Parquet files to and from [`Frame`]s, over the `parquet` crate's column readers and writers
//! (no Arrow layer: the trace's tables are flat and have seven column types).
//!
//! Written files follow what every trace segment has used since schema 1.0: version-2 data
//! pages, zstd level 1, `Int64` columns (timestamps) delta-encoded, other numbers plain, strings
//! dictionary-encoded. Unsigned integers carry their logical type (`UINT_16`, `UINT_32`,
//! `UINT_64`), so polars, pyarrow and DuckDB read them as unsigned.
//!
//! The reader reads any flat Parquet file of those physical types, whatever its encodings,
//! including the segments earlier cufall versions wrote with polars.

use crate::frame::{Column, ColumnType, Field, Frame, Values};
use parquet::basic::{
    ConvertedType, Encoding, LogicalType, Repetition, Type as Physical, ZstdLevel,
};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArrayType, DataType, DoubleType, FloatType};
use parquet::data_type::{Int32Type, Int64Type};
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnDescriptor, ColumnPath, Type};
use std::io::Write;
use std::sync::Arc;

pub use parquet::basic::Compression;
pub use parquet::data_type::ByteArray;
pub use parquet::errors::ParquetError;

type PResult<T> = Result<T, ParquetError>;

fn bad(why: String) -> ParquetError {
    ParquetError::General(why)
}

fn parquet_type(field: &Field) -> PResult<Type> {
    let (physical, logical) = match field.ty {
        ColumnType::U16 => (Physical::INT32, Some(LogicalType::integer(16, false))),
        ColumnType::U32 => (Physical::INT32, Some(LogicalType::integer(32, false))),
        ColumnType::U64 => (Physical::INT64, Some(LogicalType::integer(64, false))),
        ColumnType::I64 => (Physical::INT64, None),
        ColumnType::F32 => (Physical::FLOAT, None),
        ColumnType::F64 => (Physical::DOUBLE, None),
        ColumnType::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
    };
    let repetition = if field.nullable {
        Repetition::OPTIONAL
    } else {
        Repetition::REQUIRED
    };
    Type::primitive_type_builder(&field.name, physical)
        .with_logical_type(logical)
        .with_repetition(repetition)
        .build()
}

fn properties(schema: &[Field], compression: Compression) -> PResult<WriterProperties> {
    let mut props = WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_compression(compression)
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_created_by(format!("cufall {}", env!("CARGO_PKG_VERSION")));
    for f in schema {
        let path = ColumnPath::from(f.name.as_str());
        props = match f.ty {
            // At a regular interval the deltas of timestamps pack into a few bits each.
            ColumnType::I64 => props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
            // Names repeat: a dictionary stores each once.
            ColumnType::Str => props.set_column_dictionary_enabled(path, true),
            // Counter values are nearly all distinct: trying a dictionary first only costs time.
            // Small integers (device, clocks) compress to almost nothing under zstd as they are.
            _ => props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::PLAIN),
        };
    }
    Ok(props.build())
}

/// Writes frames of one schema as the row groups of one Parquet file.
pub struct ParquetWriter<W: Write + Send> {
    inner: SerializedFileWriter<W>,
    schema: Vec<Field>,
}

impl<W: Write + Send> ParquetWriter<W> {
    pub fn new(out: W, schema: &[Field]) -> PResult<Self> {
        // zstd level 1: on delta-packed timestamps and Float32 counter values it compresses
        // within a few percent of the default level 3 at a higher write rate (`trace_bench`).
        Self::with_compression(out, schema, Compression::ZSTD(ZstdLevel::try_new(1)?))
    }

    /// A writer of another codec than cufall's own, as other tools write Parquet (a trace
    /// rewritten by pyarrow is snappy-compressed): for tests of the reader.
    pub fn with_compression(out: W, schema: &[Field], compression: Compression) -> PResult<Self> {
        let fields = schema
            .iter()
            .map(|f| parquet_type(f).map(Arc::new))
            .collect::<PResult<Vec<_>>>()?;
        let root = Type::group_type_builder("schema")
            .with_fields(fields)
            .build()?;
        let inner = SerializedFileWriter::new(
            out,
            Arc::new(root),
            Arc::new(properties(schema, compression)?),
        )?;
        Ok(ParquetWriter {
            inner,
            schema: schema.to_vec(),
        })
    }

    /// Writes `frame` as one row group. Its columns are found by name and must have the
    /// schema's types; a nullable column may lack a validity mask and a frame with no rows
    /// writes nothing.
    pub fn write(&mut self, frame: &Frame) -> PResult<()> {
        self.write_with(frame, &|s| ByteArray::from(s))
    }

    /// [`ParquetWriter::write`] with text turned into bytes by `text`: tests write what another
    /// program could with it (bytes that are not UTF-8, one long name that every row shares
    /// through the dictionary, a clone of one [`ByteArray`] sharing its buffer).
    pub fn write_with(&mut self, frame: &Frame, text: &dyn Fn(&str) -> ByteArray) -> PResult<()> {
        if frame.height() == 0 {
            return Ok(());
        }
        let columns = self
            .schema
            .iter()
            .map(|f| {
                let c = frame
                    .column(&f.name)
                    .ok_or_else(|| bad(format!("the frame has no column `{}`", f.name)))?;
                if c.values.ty() != f.ty || c.len() != frame.height() {
                    return Err(bad(format!(
                        "column `{}` has the wrong type or length",
                        f.name
                    )));
                }
                if !f.nullable && c.has_nulls() {
                    return Err(bad(format!("column `{}` may not hold nulls", f.name)));
                }
                Ok(c)
            })
            .collect::<PResult<Vec<_>>>()?;
        let mut group = self.inner.next_row_group()?;
        for (field, column) in self.schema.iter().zip(columns) {
            let Some(mut w) = group.next_column()? else {
                return Err(bad("the file has fewer columns than its schema".into()));
            };
            let levels: Option<Vec<i16>> = field.nullable.then(|| {
                (0..column.len())
                    .map(|i| i16::from(column.is_valid(i)))
                    .collect()
            });
            let def = levels.as_deref();
            let keep = |i: &usize| column.is_valid(*i);
            match &column.values {
                Values::U16(v) => {
                    let v: Vec<i32> = dense(v, &keep, |x| i32::from(*x));
                    w.typed::<Int32Type>().write_batch(&v, def, None)?;
                }
                Values::U32(v) => {
                    // UINT_32 is stored in INT32's bits.
                    let v: Vec<i32> = dense(v, &keep, |x| i32::from_ne_bytes(x.to_ne_bytes()));
                    w.typed::<Int32Type>().write_batch(&v, def, None)?;
                }
                Values::U64(v) => {
                    let v: Vec<i64> = dense(v, &keep, |x| i64::from_ne_bytes(x.to_ne_bytes()));
                    w.typed::<Int64Type>().write_batch(&v, def, None)?;
                }
                Values::I64(v) => {
                    write_values::<Int64Type>(&mut w, v, column, def)?;
                }
                Values::F32(v) => {
                    write_values::<FloatType>(&mut w, v, column, def)?;
                }
                Values::F64(v) => {
                    write_values::<DoubleType>(&mut w, v, column, def)?;
                }
                Values::Str(v) => {
                    let v: Vec<ByteArray> = dense(v, &keep, |s| text(s));
                    w.typed::<ByteArrayType>().write_batch(&v, def, None)?;
                }
            }
            w.close()?;
        }
        group.close()?;
        Ok(())
    }

    /// Writes the footer; returns the destination.
    pub fn finish(self) -> PResult<W> {
        self.inner.into_inner()
    }
}

/// The non-null values of `v`, converted.
fn dense<T, U>(v: &[T], keep: &impl Fn(&usize) -> bool, f: impl Fn(&T) -> U) -> Vec<U> {
    v.iter()
        .enumerate()
        .filter(|(i, _)| keep(i))
        .map(|(_, x)| f(x))
        .collect()
}

/// Writes a column whose Rust type is the Parquet physical type, without a copy when it has no
/// nulls.
fn write_values<T: DataType>(
    w: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    v: &[T::T],
    column: &Column,
    def: Option<&[i16]>,
) -> PResult<()>
where
    T::T: Clone,
{
    if column.has_nulls() {
        let v: Vec<T::T> = dense(v, &|i| column.is_valid(*i), Clone::clone);
        w.typed::<T>().write_batch(&v, def, None)?;
    } else {
        w.typed::<T>().write_batch(v, def, None)?;
    }
    Ok(())
}

/// Writes `frame` as a whole Parquet file to `out`; returns the bytes written.
pub fn write_frame<W: Write + Send>(frame: &Frame, out: W) -> PResult<W> {
    let mut w = ParquetWriter::new(out, &frame.schema())?;
    w.write(frame)?;
    w.finish()
}

/// The compression codecs the reader decodes: zstd (what cufall writes) and those pyarrow and
/// polars write by default or on request (snappy is pyarrow's default, zstd polars'), so that a
/// trace rewritten by another tool still reads.
pub const CODECS: &str = "zstd, snappy, gzip, lz4 or none";

/// Refuses a file any of whose column chunks uses a codec this build does not decode (brotli,
/// LZO), naming it: the file is valid, only unreadable here. Read from the footer, so that a
/// trace's check before reading finds it.
fn check_codecs(meta: &parquet::file::metadata::ParquetMetaData) -> PResult<()> {
    use parquet::basic::Compression as C;
    for group in meta.row_groups() {
        for column in group.columns() {
            match column.compression() {
                C::UNCOMPRESSED | C::SNAPPY | C::GZIP(_) | C::LZ4 | C::LZ4_RAW | C::ZSTD(_) => {}
                other => {
                    let name = format!("{other:?}");
                    let name = name.split('(').next().unwrap_or("unknown");
                    return Err(ParquetError::NYI(format!(
                        "column `{}` is compressed with {name}, which this cufall does not \
                         decode (it reads {CODECS}); the file is valid Parquet: write it again \
                         with one of those (pyarrow: `compression=\"zstd\"`)",
                        column.column_descr().name()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Whether `e` says a valid file was refused for what it holds (a codec this build lacks, more
/// text than a trace holds), not that its bytes are damaged.
pub fn is_refusal(e: &ParquetError) -> bool {
    matches!(e, ParquetError::NYI(_))
}

/// The column type a Parquet column reads as.
fn column_type(d: &ColumnDescriptor) -> Option<ColumnType> {
    let unsigned = match d.logical_type_ref() {
        Some(LogicalType::Integer(i)) => Some((i.bit_width, i.is_signed)),
        _ => match d.converted_type() {
            ConvertedType::UINT_8 => Some((8, false)),
            ConvertedType::UINT_16 => Some((16, false)),
            ConvertedType::UINT_32 => Some((32, false)),
            ConvertedType::UINT_64 => Some((64, false)),
            _ => None,
        },
    };
    Some(match d.physical_type() {
        Physical::INT32 => match unsigned {
            Some((8 | 16, false)) => ColumnType::U16,
            Some((32, false)) => ColumnType::U32,
            _ => ColumnType::I64,
        },
        Physical::INT64 => match unsigned {
            Some((_, false)) => ColumnType::U64,
            _ => ColumnType::I64,
        },
        Physical::FLOAT => ColumnType::F32,
        Physical::DOUBLE => ColumnType::F64,
        Physical::BYTE_ARRAY => ColumnType::Str,
        _ => return None,
    })
}

/// Reads the columns named in `only` (all, with `None`) of a whole Parquet file in memory.
/// A name the file lacks is left out of the frame; the caller decides whether that matters.
pub fn read_frame(bytes: bytes::Bytes, only: Option<&[&str]>) -> PResult<Frame> {
    read_frame_within(bytes, only, TEXT_LIMIT, TEXT_BUDGET)
}

/// [`read_frame`] with text values cut at `text_limit` bytes and at most `text_budget` bytes of
/// text per column.
fn read_frame_within(
    bytes: bytes::Bytes,
    only: Option<&[&str]>,
    text_limit: usize,
    text_budget: usize,
) -> PResult<Frame> {
    let reader = SerializedFileReader::new(bytes)?;
    let meta = reader.metadata();
    let schema = meta.file_metadata().schema_descr();
    let mut picked = Vec::new();
    for (i, d) in schema.columns().iter().enumerate() {
        if d.max_rep_level() > 0 {
            return Err(bad(format!("column `{}` is nested", d.name())));
        }
        if only.is_some_and(|names| !names.contains(&d.name())) {
            continue;
        }
        let ty = column_type(d)
            .ok_or_else(|| bad(format!("column `{}` has an unsupported type", d.name())))?;
        picked.push((i, d.name().to_string(), ty, d.max_def_level() > 0));
    }
    check_codecs(meta)?;
    let rows = usize::try_from(meta.file_metadata().num_rows())
        .map_err(|_| bad("the file's row count is negative".into()))?;
    // Counts in the footer are not trusted for reservations (an unchecked file may be damaged):
    // vectors reserve at most this many rows up front and grow past it.
    let reserve = rows.min(RESERVE_ROWS);
    let mut columns = Vec::with_capacity(picked.len());
    for (i, name, ty, nullable) in picked {
        let mut col = Column {
            name,
            values: Values::empty(ty),
            valid: nullable.then(|| Vec::with_capacity(reserve)),
        };
        let mut text = Text {
            limit: text_limit,
            budget: text_budget,
            left: text_budget,
        };
        for g in 0..reader.num_row_groups() {
            let group = reader.get_row_group(g)?;
            let n = usize::try_from(group.metadata().num_rows())
                .map_err(|_| bad("a row group's row count is negative".into()))?;
            read_chunk(group.get_column_reader(i)?, n, &mut col, &mut text)?;
        }
        if col.len() != rows {
            return Err(bad(format!(
                "column `{}` has {} of {rows} rows",
                col.name,
                col.len()
            )));
        }
        columns.push(col);
    }
    Ok(Frame::new(columns))
}

/// The longest text value kept on reading, in bytes. A dictionary stores a repeated name once
/// however many rows use it, so a small file can hold thousands of rows naming one 1 MB string;
/// each row's `String` is its own copy, so such a name is cut here, at a character boundary,
/// and ends in [`cut_marker`]. Real names are far shorter: the longest demangled PyTorch kernel
/// name in the bundled recordings is 3,585 bytes.
pub const TEXT_LIMIT: usize = 16 << 10;

/// The most text one column of one file may hold once decoded (after [`TEXT_LIMIT`]): a
/// kernels segment of a busy second is a few MB of names. A file past it is refused, as rows
/// sharing long names through a dictionary could otherwise take any amount of memory.
pub const TEXT_BUDGET: usize = 128 << 20;

/// What ends a text value cut on reading, naming its length as written.
pub fn cut_marker(written_bytes: usize) -> String {
    format!("…[{written_bytes} bytes, cut on reading]")
}

/// How text is read from one column: cut at `limit` bytes per value, `left` of `budget` bytes.
struct Text {
    limit: usize,
    budget: usize,
    left: usize,
}

/// `bytes` as text: lossy (bytes that are not UTF-8 become U+FFFD: a program may name a range
/// anything, and the trace is read rather than refused), cut at `limit` bytes.
fn text_of(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut cut = limit;
    // Back to the start of a character, so that the cut adds no U+FFFD of its own.
    while cut > 0 && (bytes[cut] & 0xc0) == 0x80 {
        cut -= 1;
    }
    let mut s = String::from_utf8_lossy(&bytes[..cut]).into_owned();
    s.push_str(&cut_marker(bytes.len()));
    s
}

/// Reads `n` rows of one column chunk into `col`, converting to its type; text is cut and
/// counted by `text` (see [`TEXT_LIMIT`] and [`TEXT_BUDGET`]).
fn read_chunk(reader: ColumnReader, n: usize, col: &mut Column, text: &mut Text) -> PResult<()> {
    match (reader, &mut col.values) {
        (ColumnReader::Int32ColumnReader(r), Values::U16(out)) => {
            // Values outside u16 cannot come from a UINT_16 column; saturate rather than wrap.
            read_into(r, n, &mut col.valid, out, |x| {
                u16::try_from(x).unwrap_or(u16::MAX)
            })
        }
        (ColumnReader::Int32ColumnReader(r), Values::U32(out)) => {
            read_into(r, n, &mut col.valid, out, |x| {
                u32::from_ne_bytes(x.to_ne_bytes())
            })
        }
        (ColumnReader::Int32ColumnReader(r), Values::I64(out)) => {
            read_into(r, n, &mut col.valid, out, i64::from)
        }
        (ColumnReader::Int64ColumnReader(r), Values::U64(out)) => {
            read_into(r, n, &mut col.valid, out, |x| {
                u64::from_ne_bytes(x.to_ne_bytes())
            })
        }
        (ColumnReader::Int64ColumnReader(r), Values::I64(out)) => {
            read_into(r, n, &mut col.valid, out, |x| x)
        }
        (ColumnReader::FloatColumnReader(r), Values::F32(out)) => {
            read_into(r, n, &mut col.valid, out, |x| x)
        }
        (ColumnReader::DoubleColumnReader(r), Values::F64(out)) => {
            read_into(r, n, &mut col.valid, out, |x| x)
        }
        (ColumnReader::ByteArrayColumnReader(r), Values::Str(out)) => {
            let mut over = false;
            read_into(r, n, &mut col.valid, out, |x: ByteArray| {
                if over {
                    return String::new();
                }
                let s = text_of(x.data(), text.limit);
                match text.left.checked_sub(s.len()) {
                    Some(left) => {
                        text.left = left;
                        s
                    }
                    // Nothing more is kept once past the budget: the file is refused below.
                    None => {
                        over = true;
                        String::new()
                    }
                }
            })?;
            if over {
                return Err(ParquetError::NYI(format!(
                    "column `{}` holds more than {} MiB of text once decoded (rows sharing long \
                     names through the file's dictionary), more than cufall ever writes in one \
                     file",
                    col.name,
                    text.budget >> 20
                )));
            }
            Ok(())
        }
        _ => Err(bad(format!(
            "column `{}` does not decode as its type",
            col.name
        ))),
    }
}

/// Most rows a reader reserves room for before it has read them.
const RESERVE_ROWS: usize = 1 << 20;

/// Reads `n` rows, spreading the non-null values over their rows (a null slot gets the default).
fn read_into<T, U: Default>(
    mut r: ColumnReaderImpl<T>,
    n: usize,
    valid: &mut Option<Vec<bool>>,
    out: &mut Vec<U>,
    mut convert: impl FnMut(T::T) -> U,
) -> PResult<()>
where
    T: DataType,
{
    let mut values: Vec<T::T> = Vec::with_capacity(n.min(RESERVE_ROWS));
    let mut def: Vec<i16> = Vec::new();
    let mut read = 0;
    while read < n {
        let want = n - read;
        let (records, _, _) = match valid {
            Some(_) => r.read_records(want, Some(&mut def), None, &mut values)?,
            None => r.read_records(want, None, None, &mut values)?,
        };
        if records == 0 {
            return Err(bad(format!("a column chunk ends after {read} of {n} rows")));
        }
        read += records;
    }
    out.reserve(n.min(RESERVE_ROWS));
    match valid {
        None => out.extend(values.into_iter().map(convert)),
        Some(mask) => {
            if def.len() != n {
                return Err(bad("a column chunk has the wrong number of levels".into()));
            }
            let mut it = values.into_iter();
            for level in def {
                let ok = level > 0;
                mask.push(ok);
                let v = if ok {
                    it.next()
                        .ok_or_else(|| bad("a column chunk has too few values".into()))?
                } else {
                    out.push(U::default());
                    continue;
                };
                out.push(convert(v));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_with_and_without_nulls() {
        let frame = Frame::new(vec![
            Column::new("device", vec![0u16, 1, 65_535]),
            Column::new("start_ns", vec![i64::MIN, 0, i64::MAX]),
            Column::optional("u32", [Some(u32::MAX), None, Some(7)]),
            Column::optional("u64", [None, Some(u64::MAX), Some(1)]),
            Column::new("f32", vec![1.5f32, f32::INFINITY, -0.0]),
            Column::optional("f64", [Some(2.25f64), None, None]),
            Column::strings("name", ["a", "ä€", ""]),
            Column::optional("i64", [Some(-5i64), Some(5), None]),
        ]);
        let bytes = write_frame(&frame, Vec::new()).unwrap();
        assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
        let back = read_frame(bytes.into(), None).unwrap();
        assert_eq!(back, frame);
    }

    #[test]
    fn text_that_is_not_utf8_reads_lossily() {
        // The NVTX segment of a bundled recording, written again with one name's bytes not
        // UTF-8 (a program may name a range with any bytes; capture keeps them as they come).
        let seg = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/h200-torch-phases-api.cufall/nvtx/000000.parquet");
        let frame = read_frame(std::fs::read(seg).unwrap().into(), None).unwrap();
        let Some(Values::Str(names)) = frame.column("name").map(|c| &c.values) else {
            panic!("no name column");
        };
        let first = names[0].clone();
        let mut w = ParquetWriter::new(Vec::new(), &frame.schema()).unwrap();
        w.write_with(&frame, &|s| {
            let mut b = s.as_bytes().to_vec();
            if s == first {
                b.push(0xff);
            }
            ByteArray::from(b)
        })
        .unwrap();
        let back = read_frame(w.finish().unwrap().into(), None).unwrap();
        let Some(Values::Str(back_names)) = back.column("name").map(|c| &c.values) else {
            panic!("no name column");
        };
        for (a, b) in names.iter().zip(back_names) {
            let want = if *a == first {
                format!("{a}\u{fffd}")
            } else {
                a.clone()
            };
            assert_eq!(*b, want);
        }
        assert_eq!(back.height(), frame.height());
    }

    #[test]
    fn long_text_is_cut_on_reading_and_a_file_of_too_much_text_is_refused() {
        let long = format!("k{}", "é".repeat(TEXT_LIMIT));
        let frame = Frame::new(vec![Column::strings(
            "name",
            [long.as_str(), "short", long.as_str()],
        )]);
        let back = read_frame(write_frame(&frame, Vec::new()).unwrap().into(), None).unwrap();
        let Some(Values::Str(names)) = back.column("name").map(|c| &c.values) else {
            panic!("no name column");
        };
        let marker = cut_marker(long.len());
        assert!(
            names[0].ends_with(&marker),
            "{}",
            &names[0][names[0].len() - 60..]
        );
        assert!(names[0].len() <= TEXT_LIMIT + marker.len());
        assert!(long.starts_with(names[0].strip_suffix(&marker).unwrap()));
        assert_eq!(names[1], "short");
        assert_eq!(names[2], names[0]);

        // Rows sharing one long name through the dictionary: a small file, refused once its
        // names would take more than the budget (small limits here, the same code).
        let name = "n".repeat(100);
        let frame = Frame::new(vec![Column::strings(
            "name",
            std::iter::repeat_n(name.as_str(), 100_000),
        )]);
        let bytes = bytes::Bytes::from(write_frame(&frame, Vec::new()).unwrap());
        assert!(bytes.len() < 10_000, "{} bytes", bytes.len());
        let err = read_frame_within(bytes.clone(), None, 64, 4 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("column `name` holds more than 4 MiB of text"),
            "{err}"
        );
        let cut = read_frame_within(bytes, None, 64, 16 << 20).unwrap();
        assert_eq!(cut.height(), 100_000);
    }

    #[test]
    fn a_projection_reads_only_the_named_columns_in_file_order() {
        let frame = Frame::new(vec![
            Column::new("a", vec![1i64, 2]),
            Column::new("b", vec![1.0f32, 2.0]),
            Column::new("c", vec![3u32, 4]),
        ]);
        let bytes = write_frame(&frame, Vec::new()).unwrap();
        let back = read_frame(bytes.into(), Some(&["c", "a", "missing"])).unwrap();
        assert_eq!(back.names(), ["a", "c"]);
        assert_eq!(back.column("c").unwrap().get::<u32>(1), Some(4));
    }

    #[test]
    fn several_row_groups_read_as_one_table_and_empty_files_keep_their_schema() {
        let schema = [Field::new("t", ColumnType::I64, false)];
        let mut w = ParquetWriter::new(Vec::new(), &schema).unwrap();
        w.write(&Frame::new(vec![Column::new("t", vec![1i64, 2])]))
            .unwrap();
        w.write(&Frame::new(vec![Column::new("t", vec![3i64])]))
            .unwrap();
        let back = read_frame(w.finish().unwrap().into(), None).unwrap();
        assert_eq!(
            back.column("t").unwrap().slice::<i64>(),
            Some(&[1, 2, 3][..])
        );

        let empty = Frame::empty(&schema);
        let bytes = write_frame(&empty, Vec::new()).unwrap();
        let back = read_frame(bytes.into(), None).unwrap();
        assert_eq!(back.schema(), schema);
        assert_eq!(back.height(), 0);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let frame = Frame::new(vec![Column::new("t", (0..1000i64).collect())]);
        let bytes = write_frame(&frame, Vec::new()).unwrap();
        for at in (4..bytes.len() - 8).step_by(97) {
            let mut b = bytes.clone();
            b[at] ^= 0xff;
            let _ = read_frame(b.into(), None);
        }
        assert!(read_frame(bytes[..bytes.len() / 2].to_vec().into(), None).is_err());
    }
}
