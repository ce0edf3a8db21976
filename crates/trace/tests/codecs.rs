//! Segments another tool wrote again: pyarrow writes snappy by default, polars zstd, and both
//! write gzip and lz4 on request. The reader decodes those; a codec it does not decode (brotli)
//! is named as such, and the file called valid, not damaged.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_trace::parquet::{Compression, ParquetWriter, read_frame};
use cufall_trace::{Table, Trace, TraceError};
use std::fs;
use std::path::Path;

const EXAMPLE: &str = "h200-torch-phases-api.cufall";

/// Writes every segment of `table` in the copy at `dir` again with `compression` (and
/// `then` applied to the file's bytes), its index line given the new size and checksum.
fn rewrite(dir: &Path, table: Table, compression: Compression, then: fn(Vec<u8>) -> Vec<u8>) {
    let index = fs::read_to_string(dir.join("index.jsonl")).unwrap();
    let mut out = String::new();
    for line in index.lines() {
        let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
        if e["table"] == table.dir_name() {
            let path = dir.join(e["file"].as_str().unwrap());
            let frame = read_frame(fs::read(&path).unwrap().into(), None).unwrap();
            let mut w =
                ParquetWriter::with_compression(Vec::new(), &frame.schema(), compression).unwrap();
            w.write(&frame).unwrap();
            let bytes = then(w.finish().unwrap());
            e["bytes"] = bytes.len().into();
            e["crc32"] = crc32fast::hash(&bytes).into();
            fs::write(&path, bytes).unwrap();
        }
        out.push_str(&format!("{e}\n"));
    }
    fs::write(dir.join("index.jsonl"), out).unwrap();
}

#[test]
fn segments_in_the_codecs_pyarrow_and_polars_write_read_as_cufall_wrote_them() {
    let tmp = tempfile::tempdir().unwrap();
    let bundled = cufall_testkit::examples::examples_dir().join(EXAMPLE);
    let want = Trace::open(&bundled).unwrap();
    let (nvtx, kernels) = (want.nvtx().unwrap(), want.kernels().unwrap());
    let samples = want.sample_batches().unwrap();
    for (i, codec) in [
        Compression::SNAPPY,
        Compression::GZIP(Default::default()),
        Compression::LZ4,
        Compression::LZ4_RAW,
        Compression::UNCOMPRESSED,
    ]
    .into_iter()
    .enumerate()
    {
        let dir = cufall_testkit::examples::copy_example(&tmp.path().join(i.to_string()), EXAMPLE);
        for table in [Table::Nvtx, Table::Kernels, Table::Samples] {
            rewrite(&dir, table, codec, |b| b);
        }
        let trace = Trace::open(&dir).unwrap();
        trace.check().unwrap();
        assert_eq!(trace.nvtx().unwrap(), nvtx, "{codec:?}");
        assert_eq!(trace.kernels().unwrap(), kernels, "{codec:?}");
        assert_eq!(trace.sample_batches().unwrap(), samples, "{codec:?}");
    }
}

/// `bytes` (a whole Parquet file) with every column chunk's codec said to be brotli in its
/// footer: what a brotli file's footer says, which the reader checks before any page.
fn footer_says_brotli(bytes: Vec<u8>) -> Vec<u8> {
    use parquet::file::metadata::ParquetMetaDataWriter;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let meta = SerializedFileReader::new(bytes::Bytes::from(bytes.clone()))
        .unwrap()
        .metadata()
        .clone();
    let groups = meta
        .row_groups()
        .iter()
        .map(|g| {
            let cols = g
                .columns()
                .iter()
                .map(|c| {
                    c.clone()
                        .into_builder()
                        .set_compression(Compression::BROTLI(Default::default()))
                        .build()
                        .unwrap()
                })
                .collect();
            g.clone()
                .into_builder()
                .set_column_metadata(cols)
                .build()
                .unwrap()
        })
        .collect();
    let meta = meta.into_builder().set_row_groups(groups).build();
    let n = bytes.len();
    let footer = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
    let mut out = bytes[..n - 8 - footer].to_vec();
    ParquetMetaDataWriter::new(&mut out, &meta)
        .finish()
        .unwrap();
    out
}

#[test]
fn a_codec_the_reader_lacks_is_named_and_the_file_called_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = cufall_testkit::examples::copy_example(tmp.path(), EXAMPLE);
    rewrite(
        &dir,
        Table::Nvtx,
        Compression::UNCOMPRESSED,
        footer_says_brotli,
    );
    let trace = Trace::open(&dir).unwrap();
    let err = trace.nvtx().unwrap_err();
    assert!(matches!(err, TraceError::Unsupported { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("nvtx/000000.parquet cannot be read by this cufall: column `start_ns` is compressed with BROTLI, which this cufall does not decode (it reads zstd, snappy, gzip, lz4 or none); the file is valid Parquet"),
        "{text}"
    );
    assert!(!text.contains("damaged"), "{text}");
    // Every command checks every table first: the same message, not "damaged".
    let err = trace.check().unwrap_err().to_string();
    assert!(err.contains("compressed with BROTLI"), "{err}");
}
