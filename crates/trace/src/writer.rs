//! The streaming, crash-tolerant trace writer.

use crate::error::{Result, TraceError};
use crate::frame::Frame;
use crate::index::SegmentEntry;
use crate::manifest::{INDEX_FILE, MANIFEST_FILE};
use crate::tables::{self, SampleColumns, Table};
use cufall_model::{
    ApiCall, CaptureEvent, DropRecord, HostSample, KernelRecord, Manifest, NvmlRow, NvtxRange,
    RecordingStatus, SampleBatch, StackFrame,
};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Settings of a [`TraceWriter`].
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Replace an existing trace at the path.
    pub overwrite: bool,
    /// Longest time buffered rows wait before they are written as a segment; this bounds what a
    /// crash can lose.
    pub flush_interval: Duration,
    /// Samples buffered before a segment is written regardless of time (bounds memory).
    pub max_buffered_samples: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            overwrite: false,
            flush_interval: Duration::from_secs(1),
            max_buffered_samples: 2_000_000,
        }
    }
}

/// What a finished recording contains.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WriteStats {
    pub samples: u64,
    pub drops: u64,
    pub nvml_rows: u64,
    pub nvtx_ranges: u64,
    pub kernels: u64,
    pub api_calls: u64,
    pub capture_events: u64,
    pub stack_frames: u64,
    pub host_samples: u64,
    pub segments: u64,
    pub bytes: u64,
}

/// Writes a trace folder while a recording runs. Rows are buffered and written as a new Parquet
/// segment per table at least every [`WriterOptions::flush_interval`]; call
/// [`TraceWriter::flush_if_due`] regularly. A process killed at any point leaves a trace that
/// reads back up to its last finished segment.
pub struct TraceWriter {
    dir: PathBuf,
    manifest: Manifest,
    metrics: Vec<String>,
    options: WriterOptions,
    index: File,
    next_segment: BTreeMap<Table, u64>,
    samples: SampleColumns,
    drops: Vec<DropRecord>,
    nvml: Vec<NvmlRow>,
    nvtx: Vec<NvtxRange>,
    kernels: Vec<KernelRecord>,
    api: Vec<ApiCall>,
    capture: Vec<CaptureEvent>,
    stacks: Vec<StackFrame>,
    host_samples: Vec<HostSample>,
    last_flush: Instant,
    stats: WriteStats,
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> TraceError + '_ {
    move |source| TraceError::Write {
        path: path.to_path_buf(),
        source,
    }
}

fn encode_err(path: &Path, source: crate::parquet::ParquetError) -> TraceError {
    TraceError::Encode {
        path: path.to_path_buf(),
        source,
    }
}

impl TraceWriter {
    /// Creates the trace folder at `path` and writes its manifest. Refuses to replace anything
    /// unless `options.overwrite` is set, and then only a cufall trace or an empty folder.
    pub fn create(
        path: impl AsRef<Path>,
        manifest: Manifest,
        options: WriterOptions,
    ) -> Result<Self> {
        let dir = path.as_ref().to_path_buf();
        if dir.exists() {
            let is_trace = dir.join(MANIFEST_FILE).is_file();
            let is_empty_dir = dir.is_dir()
                && fs::read_dir(&dir)
                    .map(|mut it| it.next().is_none())
                    .unwrap_or(false);
            if !is_empty_dir {
                if !options.overwrite {
                    return Err(TraceError::AlreadyExists(dir));
                }
                if !is_trace {
                    return Err(TraceError::Invalid(format!(
                        "refusing to replace {}: it exists and is not a cufall trace. Choose another name.",
                        dir.display()
                    )));
                }
                fs::remove_dir_all(&dir).map_err(write_err(&dir))?;
            }
        }
        fs::create_dir_all(&dir).map_err(write_err(&dir))?;
        let index_path = dir.join(INDEX_FILE);
        let index = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&index_path)
            .map_err(write_err(&index_path))?;
        let metrics = manifest
            .metric_names()
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>();
        let writer = TraceWriter {
            samples: SampleColumns::new(metrics.len()),
            dir,
            manifest,
            metrics,
            options,
            index,
            next_segment: BTreeMap::new(),
            drops: Vec::new(),
            nvml: Vec::new(),
            nvtx: Vec::new(),
            kernels: Vec::new(),
            api: Vec::new(),
            capture: Vec::new(),
            stacks: Vec::new(),
            host_samples: Vec::new(),
            last_flush: Instant::now(),
            stats: WriteStats::default(),
        };
        writer.write_manifest()?;
        Ok(writer)
    }

    /// The folder being written.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Changes the manifest and rewrites `manifest.json` atomically. The metric list cannot
    /// change once samples are written.
    pub fn update_manifest(&mut self, f: impl FnOnce(&mut Manifest)) -> Result<()> {
        f(&mut self.manifest);
        let metrics: Vec<String> = self
            .manifest
            .metric_names()
            .into_iter()
            .map(str::to_string)
            .collect();
        if metrics != self.metrics {
            if self.stats.samples > 0 || !self.samples.is_empty() {
                return Err(TraceError::Invalid(
                    "the metric list of a trace cannot change after samples were written".into(),
                ));
            }
            self.samples = SampleColumns::new(metrics.len());
            self.metrics = metrics;
        }
        self.write_manifest()
    }

    fn write_manifest(&self) -> Result<()> {
        let path = self.dir.join(MANIFEST_FILE);
        let tmp = self.dir.join(".manifest.json.tmp");
        let text = serde_json::to_string_pretty(&self.manifest)
            .map_err(|e| TraceError::Invalid(format!("cannot encode the manifest: {e}")))?;
        fs::write(&tmp, text).map_err(write_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(write_err(&path))
    }

    /// Buffers a batch of samples. Its values must follow the manifest's metric order.
    pub fn append_samples(&mut self, batch: &SampleBatch) -> Result<()> {
        if batch.values.len() != self.metrics.len() {
            return Err(TraceError::Invalid(format!(
                "a sample batch has {} metric columns but the trace records {}",
                batch.values.len(),
                self.metrics.len()
            )));
        }
        if let Some(bad) = batch.values.iter().find(|v| v.len() != batch.len()) {
            return Err(TraceError::Invalid(format!(
                "a sample batch has {} timestamps but a metric column of {} values",
                batch.len(),
                bad.len()
            )));
        }
        self.samples.extend(batch);
        if self.samples.len() >= self.options.max_buffered_samples {
            self.flush_table(Table::Samples)?;
        }
        Ok(())
    }

    pub fn append_drops(&mut self, rows: &[DropRecord]) -> Result<()> {
        self.drops.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_nvml(&mut self, rows: &[NvmlRow]) -> Result<()> {
        self.nvml.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_nvtx(&mut self, rows: &[NvtxRange]) -> Result<()> {
        self.nvtx.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_kernels(&mut self, rows: &[KernelRecord]) -> Result<()> {
        self.kernels.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_api(&mut self, rows: &[ApiCall]) -> Result<()> {
        self.api.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_capture(&mut self, rows: &[CaptureEvent]) -> Result<()> {
        self.capture.extend_from_slice(rows);
        Ok(())
    }

    /// Buffers frames of newly interned host stacks. Append a stack's frames no later than
    /// the first sample naming it: a flush writes the stacks before the samples.
    pub fn append_stacks(&mut self, rows: &[StackFrame]) -> Result<()> {
        self.stacks.extend_from_slice(rows);
        Ok(())
    }

    pub fn append_host_samples(&mut self, rows: &[HostSample]) -> Result<()> {
        self.host_samples.extend_from_slice(rows);
        Ok(())
    }

    /// Writes buffered rows if the flush interval has passed since the last write.
    pub fn flush_if_due(&mut self) -> Result<()> {
        if self.last_flush.elapsed() >= self.options.flush_interval {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every buffered row now, one segment per table that has rows.
    pub fn flush(&mut self) -> Result<()> {
        for table in Table::ALL {
            self.flush_table(table)?;
        }
        self.last_flush = Instant::now();
        Ok(())
    }

    fn flush_table(&mut self, table: Table) -> Result<()> {
        let built = match table {
            Table::Samples if !self.samples.is_empty() => {
                self.stats.samples += self.samples.len() as u64;
                Some(self.samples.take_frame(&self.metrics))
            }
            Table::Drops if !self.drops.is_empty() => {
                self.stats.drops += self.drops.len() as u64;
                let f = tables::frame_of(&self.drops);
                self.drops.clear();
                Some(f)
            }
            Table::Nvml if !self.nvml.is_empty() => {
                self.stats.nvml_rows += self.nvml.len() as u64;
                let f = tables::frame_of(&self.nvml);
                self.nvml.clear();
                Some(f)
            }
            Table::Nvtx if !self.nvtx.is_empty() => {
                self.stats.nvtx_ranges += self.nvtx.len() as u64;
                let f = tables::frame_of(&self.nvtx);
                self.nvtx.clear();
                Some(f)
            }
            Table::Kernels if !self.kernels.is_empty() => {
                self.stats.kernels += self.kernels.len() as u64;
                let f = tables::frame_of(&self.kernels);
                self.kernels.clear();
                Some(f)
            }
            Table::Api if !self.api.is_empty() => {
                self.stats.api_calls += self.api.len() as u64;
                let f = tables::frame_of(&self.api);
                self.api.clear();
                Some(f)
            }
            Table::Capture if !self.capture.is_empty() => {
                self.stats.capture_events += self.capture.len() as u64;
                let f = tables::frame_of(&self.capture);
                self.capture.clear();
                Some(f)
            }
            Table::Stacks if !self.stacks.is_empty() => {
                self.stats.stack_frames += self.stacks.len() as u64;
                let f = tables::frame_of(&self.stacks);
                self.stacks.clear();
                Some(f)
            }
            Table::HostSamples if !self.host_samples.is_empty() => {
                self.stats.host_samples += self.host_samples.len() as u64;
                let f = tables::frame_of(&self.host_samples);
                self.host_samples.clear();
                Some(f)
            }
            _ => None,
        };
        let Some(frame) = built else {
            return Ok(());
        };
        self.write_segment(table, &frame)
    }

    fn write_segment(&mut self, table: Table, frame: &Frame) -> Result<()> {
        let dir = self.dir.join(table.dir_name());
        fs::create_dir_all(&dir).map_err(write_err(&dir))?;
        let seq = self.next_segment.entry(table).or_insert(0);
        let name = format!("{:06}.parquet", *seq);
        *seq += 1;
        let tmp = dir.join(format!(".{name}.tmp"));
        let path = dir.join(&name);

        // Written under this cufall's schema for the table, so every segment of a table has
        // the same columns and types whatever rows it holds.
        let metrics: Vec<&str> = self.metrics.iter().map(String::as_str).collect();
        let schema = tables::schema(table, &metrics);
        let mut writer =
            crate::parquet::ParquetWriter::new(Vec::with_capacity(frame.height() * 8), &schema)
                .map_err(|e| encode_err(&path, e))?;
        writer.write(frame).map_err(|e| encode_err(&path, e))?;
        let bytes = writer.finish().map_err(|e| encode_err(&path, e))?;
        fs::write(&tmp, &bytes).map_err(write_err(&tmp))?;
        fs::rename(&tmp, &path).map_err(write_err(&path))?;

        let entry = segment_entry(table, &name, &bytes, frame);
        let mut line = serde_json::to_string(&entry)
            .map_err(|e| TraceError::Invalid(format!("cannot encode the index: {e}")))?;
        line.push('\n');
        let index_path = self.dir.join(INDEX_FILE);
        self.index
            .write_all(line.as_bytes())
            .map_err(write_err(&index_path))?;
        self.stats.segments += 1;
        self.stats.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Writes what is buffered, marks the trace complete and closes it. A table that never had
    /// a row gets one empty segment carrying its schema, so every table of every trace can be
    /// scanned by name (`pl.scan_parquet("T.cufall/nvtx/*.parquet")`).
    pub fn finish(mut self, end_unix_ns: i64) -> Result<WriteStats> {
        self.flush()?;
        let metrics: Vec<&str> = self.metrics.iter().map(String::as_str).collect();
        let empty: Vec<(Table, Frame)> = Table::ALL
            .into_iter()
            .filter(|t| !self.next_segment.contains_key(t))
            .map(|t| (t, Frame::empty(&tables::schema(t, &metrics))))
            .collect();
        for (table, frame) in empty {
            self.write_segment(table, &frame)?;
        }
        self.manifest.status = RecordingStatus::Complete;
        self.manifest.end_unix_ns = Some(end_unix_ns);
        self.write_manifest()?;
        Ok(self.stats.clone())
    }

    /// Removes the trace folder: for recordings that failed before they started, so nothing
    /// partial is left looking valid.
    pub fn abandon(self) {
        // Nothing useful can be done if removal fails; the folder's manifest still says
        // "recording", so no reader mistakes it for a finished trace.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn segment_entry(table: Table, name: &str, bytes: &[u8], frame: &Frame) -> SegmentEntry {
    let mut per_device: BTreeMap<u16, u64> = BTreeMap::new();
    if let Some(device) = frame
        .column(tables::col::DEVICE)
        .and_then(|c| c.slice::<u16>())
    {
        // Rows of one device come in runs: count a run at a time.
        for run in device.chunk_by(|a, b| a == b) {
            *per_device.entry(run[0]).or_insert(0) += run.len() as u64;
        }
    }
    let rows_per_device = per_device
        .into_iter()
        .map(|(d, n)| (d.to_string(), n))
        .collect();
    let time = frame
        .column(tables::col::START_NS)
        .or_else(|| frame.column(tables::col::T_NS))
        .and_then(|c| c.slice::<i64>());
    let end = frame
        .column(tables::col::END_NS)
        .and_then(|c| c.slice::<i64>());
    let t_min_ns = time.and_then(|t| t.iter().copied().min());
    // The latest of every start and end, so that a row ending before it starts (a malformed
    // interval) still lies inside the segment's range.
    let t_max_ns = time
        .into_iter()
        .chain(end)
        .flat_map(|c| c.iter().copied())
        .max();
    SegmentEntry {
        table: table.dir_name().to_string(),
        file: format!("{}/{}", table.dir_name(), name),
        bytes: bytes.len() as u64,
        crc32: crc32fast::hash(bytes),
        rows: frame.height() as u64,
        rows_per_device,
        t_min_ns,
        t_max_ns,
    }
}
