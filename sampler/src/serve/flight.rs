//! The flight recorder: the last `--keep` of full-resolution samples, drop records and NVML
//! readings in memory, and their dump to a `.cufall` trace.
//!
//! Rows are kept as the batches they arrived in, behind `Arc`s, so a dump takes a snapshot
//! (a list of pointers) under the lock and writes it without holding the lock: scrapes and the
//! sample stream go on while a dump is written. A batch leaves the ring once its last sample is
//! older than `keep` behind the newest one. Sample times follow the host's wall clock: when it
//! is set back by more than `keep`, later rows are aged as if they went on from where the clock
//! was, so the rows from before the step leave `keep` after it (not only when the clock catches
//! up, which would have emptied the ring until then). A byte cap of twice the stated estimate
//! bounds the ring whatever the times do.
//!
//! A dump is written to a hidden folder beside its final name and renamed when the trace is
//! finished, so the final name is a complete trace or absent.

use cufall_live::FeedInfo;
use cufall_trace::model::{DeviceId, SamplingInfo};
use cufall_trace::model::{DeviceInfo, DropRecord, HeatmapSpec, Manifest, NvmlRow, SampleBatch};
use cufall_trace::{TraceWriter, WriterOptions};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes one kept sample takes: start and end (`i64`) and one `f64` per metric.
pub fn bytes_per_sample(metrics: usize) -> u64 {
    16 + 8 * metrics as u64
}

/// Bytes of one kept NVML reading (the row as held in memory).
const NVML_ROW_BYTES: u64 = std::mem::size_of::<NvmlRow>() as u64;
const DROP_ROW_BYTES: u64 = std::mem::size_of::<DropRecord>() as u64;

/// The memory the ring needs for `keep_ns` of `devices` GPUs sampled every `interval_ns`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    pub samples_per_s: f64,
    pub bytes_per_sample: u64,
    pub keep_s: f64,
    pub bytes: u64,
}

impl Budget {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "an estimate of bytes, far below u64::MAX; `as` saturates"
    )]
    pub fn new(devices: usize, metrics: usize, interval_ns: i64, keep_ns: i64) -> Budget {
        let samples_per_s = if metrics == 0 {
            0.0
        } else {
            devices as f64 * 1e9 / interval_ns.max(1) as f64
        };
        let keep_s = keep_ns as f64 / 1e9;
        let per = bytes_per_sample(metrics);
        Budget {
            samples_per_s,
            bytes_per_sample: per,
            keep_s,
            bytes: (samples_per_s * per as f64 * keep_s).ceil() as u64,
        }
    }

    /// Refuses a budget above half of `available_bytes` (what `/proc/meminfo` calls
    /// `MemAvailable`): a `--keep` that long would take the machine's memory from the programs
    /// it watches.
    pub fn check(&self, keep: &str, available_bytes: u64) -> Result<(), KeepTooLong> {
        if self.bytes <= available_bytes / 2 {
            return Ok(());
        }
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        Err(KeepTooLong {
            keep: keep.into(),
            need_gib: gib(self.bytes),
            product: self.describe_product(),
            available_gib: gib(available_bytes),
        })
    }

    fn describe_product(&self) -> String {
        format!(
            "{:.0} samples/s × {} bytes × {:.0} s",
            self.samples_per_s, self.bytes_per_sample, self.keep_s
        )
    }

    /// `N samples/s × B bytes × T s = M MiB`, the sentence said at start.
    pub fn describe(&self) -> String {
        format!(
            "{} = {:.1} MiB at most for samples (NVML readings and drop records add a little)",
            self.describe_product(),
            self.bytes as f64 / (1024.0 * 1024.0)
        )
    }
}

/// A `--keep` whose flight recorder would take more than half of the available memory.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "--keep {keep}: the flight recorder would need {need_gib:.1} GiB ({product}), more than half of the {available_gib:.1} GiB this machine has available; choose a shorter --keep"
)]
pub struct KeepTooLong {
    pub keep: String,
    pub need_gib: f64,
    /// `N samples/s × B bytes × T s`.
    pub product: String,
    pub available_gib: f64,
}

#[derive(Clone, Debug)]
enum Rows {
    Samples(Arc<SampleBatch>),
    Drops(Arc<Vec<DropRecord>>),
    Nvml(Arc<Vec<NvmlRow>>),
}

#[derive(Clone, Debug)]
struct Entry {
    /// The latest time of the rows.
    end_ns: i64,
    /// `end_ns` on the ring's ageing clock (moved past any backward step of the wall clock).
    age_ns: i64,
    start_ns: i64,
    bytes: u64,
    rows: Rows,
}

/// The last `keep_ns` of rows.
#[derive(Debug)]
pub struct Ring {
    keep_ns: i64,
    cap_bytes: u64,
    bytes: u64,
    /// The newest time on the ageing clock.
    newest_ns: i64,
    /// Added to sample times to make the ageing clock: the sum of the backward clock steps.
    shift_ns: i64,
    entries: VecDeque<Entry>,
    /// Rows let go because of the byte cap (not the age), for the log.
    pub evicted_by_cap: u64,
}

/// What a dump writes: the rows at one moment, and the facts of the manifest.
#[derive(Clone, Debug)]
pub struct Snapshot {
    entries: Vec<Entry>,
}

impl Snapshot {
    /// Adds drop records the ring does not hold: a pause still on at the dump, whose record is
    /// made when it ends.
    pub fn with_drops(mut self, rows: Vec<DropRecord>) -> Snapshot {
        let (Some(s), Some(e)) = (
            rows.iter().map(|r| r.start_ns).min(),
            rows.iter().map(|r| r.end_ns).max(),
        ) else {
            return self;
        };
        self.entries.push(Entry {
            end_ns: e,
            age_ns: e,
            start_ns: s,
            bytes: rows.len() as u64 * DROP_ROW_BYTES,
            rows: Rows::Drops(Arc::new(rows)),
        });
        self
    }

    pub fn samples(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match &e.rows {
                Rows::Samples(b) => b.len() as u64,
                _ => 0,
            })
            .sum()
    }

    fn span(&self) -> Option<(i64, i64)> {
        let start = self.entries.iter().map(|e| e.start_ns).min()?;
        let end = self.entries.iter().map(|e| e.end_ns).max()?;
        Some((start, end))
    }

    fn devices(&self) -> Vec<DeviceId> {
        let mut d: Vec<DeviceId> = self
            .entries
            .iter()
            .flat_map(|e| -> Vec<DeviceId> {
                match &e.rows {
                    Rows::Samples(b) => vec![b.device],
                    Rows::Drops(r) => r.iter().map(|x| x.device).collect(),
                    Rows::Nvml(r) => r.iter().map(|x| x.device).collect(),
                }
            })
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

impl Ring {
    /// A ring for `keep_ns` sized by `budget`, never holding more than `limit_bytes` when given
    /// (the memory `cufall serve` allows itself at start).
    pub fn new(keep_ns: i64, budget: &Budget, limit_bytes: Option<u64>) -> Ring {
        Ring {
            keep_ns,
            // Twice the estimate, and room for NVML when no counters are sampled; the limit
            // wins over both, so a run whose metrics were not known at start cannot exceed it.
            cap_bytes: budget
                .bytes
                .saturating_mul(2)
                .max(64 << 20)
                .min(limit_bytes.unwrap_or(u64::MAX)),
            bytes: 0,
            newest_ns: i64::MIN,
            shift_ns: 0,
            entries: VecDeque::new(),
            evicted_by_cap: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The most the ring holds before letting rows go early.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    fn push(&mut self, start_ns: i64, end_ns: i64, bytes: u64, rows: Rows) {
        let mut age_ns = end_ns.saturating_add(self.shift_ns);
        if age_ns < self.newest_ns.saturating_sub(self.keep_ns) {
            // The clock was set back by more than `keep`: age on from the newest time, so the
            // ring does not let every row go as too old until the clock catches up.
            self.shift_ns = self
                .shift_ns
                .saturating_add(self.newest_ns.saturating_sub(age_ns));
            age_ns = self.newest_ns;
        }
        self.newest_ns = self.newest_ns.max(age_ns);
        self.bytes += bytes;
        self.entries.push_back(Entry {
            end_ns,
            age_ns,
            start_ns,
            bytes,
            rows,
        });
        let horizon = self.newest_ns.saturating_sub(self.keep_ns);
        while let Some(front) = self.entries.front() {
            let old = front.age_ns < horizon;
            let over = self.bytes > self.cap_bytes;
            if !(old || over) {
                break;
            }
            if over && !old {
                self.evicted_by_cap += 1;
            }
            self.bytes -= front.bytes;
            self.entries.pop_front();
        }
    }

    pub fn samples(&mut self, batch: SampleBatch) {
        let (Some(&s), Some(&e)) = (batch.start_ns.first(), batch.end_ns.last()) else {
            return;
        };
        let bytes = batch.len() as u64 * bytes_per_sample(batch.values.len());
        self.push(s, e, bytes, Rows::Samples(Arc::new(batch)));
    }

    pub fn drops(&mut self, rows: Vec<DropRecord>) {
        let (Some(s), Some(e)) = (
            rows.iter().map(|r| r.start_ns).min(),
            rows.iter().map(|r| r.end_ns).max(),
        ) else {
            return;
        };
        let bytes = rows.len() as u64 * DROP_ROW_BYTES;
        self.push(s, e, bytes, Rows::Drops(Arc::new(rows)));
    }

    pub fn nvml(&mut self, rows: Vec<NvmlRow>) {
        let (Some(s), Some(e)) = (
            rows.iter().map(|r| r.t_ns).min(),
            rows.iter().map(|r| r.t_ns).max(),
        ) else {
            return;
        };
        let bytes = rows.len() as u64 * NVML_ROW_BYTES;
        self.push(s, e, bytes, Rows::Nvml(Arc::new(rows)));
    }

    /// The rows now (pointers only: cheap under the lock).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            entries: self.entries.iter().cloned().collect(),
        }
    }
}

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("the flight recorder holds nothing yet (no sample, drop or NVML reading arrived)")]
    Empty,
    #[error("cannot write the flight recorder's trace {}", path.display())]
    Trace {
        path: PathBuf,
        #[source]
        source: cufall_trace::TraceError,
    },
    #[error("cannot move the finished trace {} to {}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the manifest of a dump says besides the rows.
#[derive(Clone, Debug)]
pub struct DumpFacts {
    pub info: FeedInfo,
    /// Every device seen since the exporter started (a GPU that left is still described).
    pub devices: BTreeMap<DeviceId, DeviceInfo>,
    pub heatmaps: Vec<HeatmapSpec>,
    pub hostname: String,
    pub command: Vec<String>,
}

/// A finished dump.
#[derive(Clone, Debug)]
pub struct Dumped {
    pub path: PathBuf,
    pub samples: u64,
    pub span_ns: i64,
}

/// A free name for a dump made at `unix_ns` in `dir`: `flight-HOST-2026-12-02T20-15-00Z.cufall`
/// (with `-2`, `-3`, ... when taken).
pub fn dump_path(dir: &Path, hostname: &str, unix_ns: i64) -> PathBuf {
    let secs = u64::try_from(unix_ns.max(0) / 1_000_000_000).unwrap_or(0);
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let stamp = humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace(':', "-");
    let host: String = hostname
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = if host.is_empty() {
        format!("flight-{stamp}")
    } else {
        format!("flight-{host}-{stamp}")
    };
    let mut path = dir.join(format!("{base}.cufall"));
    let mut n = 2;
    while path.exists() {
        path = dir.join(format!("{base}-{n}.cufall"));
        n += 1;
    }
    path
}

/// Whether `name` is one [`dump_path`] gives for `hostname`: `flight-HOST-YYYY-MM-DDTHH-MM-SSZ`,
/// maybe `-N`, then `.cufall`. Only such names are ever deleted by [`prune_dumps`].
pub fn is_dump_name(name: &str, hostname: &str) -> bool {
    let base = dump_path(Path::new(""), hostname, 0);
    // `flight-HOST-` (or `flight-`): the part of the name before the stamp.
    let Some(prefix) = base
        .to_str()
        .and_then(|b| b.strip_suffix("1970-01-01T00-00-00Z.cufall"))
    else {
        return false;
    };
    let Some(rest) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(".cufall"))
    else {
        return false;
    };
    let (stamp, n) = rest.split_at(rest.len().min(20));
    let stamp_ok = stamp.len() == 20
        && stamp.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 | 13 | 16 => b == b'-',
            10 => b == b'T',
            19 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    let n_ok = n.is_empty()
        || n.strip_prefix('-')
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    stamp_ok && n_ok
}

/// Deletes the oldest of this host's dumps in `dir` beyond the newest `keep` (by modification
/// time, then name); only names [`is_dump_name`] accepts are touched. The paths deleted.
pub fn prune_dumps(dir: &Path, hostname: &str, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let mut dumps: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| is_dump_name(&e.file_name().to_string_lossy(), hostname))
        .filter_map(|e| {
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, e.path()))
        })
        .collect();
    dumps.sort();
    let excess = dumps.len().saturating_sub(keep);
    let mut deleted = Vec::new();
    for (_, path) in dumps.into_iter().take(excess) {
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
        deleted.push(path);
    }
    Ok(deleted)
}

/// Writes `snap` as a trace at `path`, atomically: a hidden folder beside it is written,
/// finished, then renamed.
pub fn write_dump(snap: &Snapshot, facts: &DumpFacts, path: &Path) -> Result<Dumped, DumpError> {
    let (start, end) = snap.span().ok_or(DumpError::Empty)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "flight.cufall".into());
    let tmp = path.with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let trace_err = |source| DumpError::Trace {
        path: path.to_path_buf(),
        source,
    };
    let mut manifest = Manifest::new(env!("CARGO_PKG_VERSION"), start);
    manifest.hostname = facts.hostname.clone();
    manifest.command = facts.command.clone();
    manifest.devices = snap
        .devices()
        .iter()
        .chain(facts.devices.keys())
        .filter_map(|d| facts.devices.get(d).cloned())
        .fold(Vec::new(), |mut v: Vec<DeviceInfo>, d| {
            if !v.iter().any(|x| x.id == d.id) {
                v.push(d);
            }
            v
        });
    manifest.devices.sort_by_key(|d| d.id);
    manifest.sampling = (!facts.info.metrics.is_empty()).then(|| SamplingInfo {
        interval_ns: facts.info.interval_ns.0,
        metrics: facts.info.metrics.clone(),
        source: "cupti_pm_sampling".into(),
    });
    manifest.counters_unavailable = facts.info.counters_unavailable.clone();
    manifest.nvml_interval_ns =
        (facts.info.nvml_interval_ns.0 > 0).then_some(facts.info.nvml_interval_ns.0);
    manifest.heatmaps = facts.heatmaps.clone();
    manifest
        .extra
        .insert("flight_recorder".into(), "cufall serve".into());
    let result = (|| {
        let mut w = TraceWriter::create(&tmp, manifest, WriterOptions::default())?;
        for e in &snap.entries {
            match &e.rows {
                Rows::Samples(b) => w.append_samples(b)?,
                Rows::Drops(r) => w.append_drops(r)?,
                Rows::Nvml(r) => w.append_nvml(r)?,
            }
        }
        w.finish(end).map(|_| ())
    })();
    if let Err(e) = result {
        // Nothing partial is left looking like a trace.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(trace_err(e));
    }
    if let Err(source) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(DumpError::Rename {
            from: tmp,
            to: path.to_path_buf(),
            source,
        });
    }
    Ok(Dumped {
        path: path.to_path_buf(),
        samples: snap.samples(),
        span_ns: end - start,
    })
}

/// The flight recorder's budget for the metrics asked for, not only those the first run got: a
/// first run without counters (another profiler holds them) samples no metric, and a budget
/// of its metrics would let any `--keep` pass. Without counters the interval is the one asked
/// for, or the run's (the default pair's); a later run whose cost model picks a finer one is
/// checked again when its flight recorder is made.
pub fn start_budget(
    info: &cufall_live::FeedInfo,
    asked_metrics: usize,
    asked_interval_ns: Option<i64>,
    keep: std::time::Duration,
) -> Budget {
    let interval_ns = if info.metrics.is_empty() {
        asked_interval_ns.unwrap_or(info.interval_ns.0)
    } else {
        info.interval_ns.0
    };
    Budget::new(
        info.devices.len(),
        asked_metrics.max(info.metrics.len()),
        interval_ns,
        cufall_trace::model::nanos(keep),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(device: u32, from: i64, to: i64) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(device), 1);
        for t in (from..to).step_by(1_000) {
            b.push(t, t + 1_000, &[1.0]);
        }
        b
    }

    #[test]
    fn the_ring_keeps_the_last_keep_ns() {
        let budget = Budget::new(1, 1, 1_000, 10_000_000);
        let mut r = Ring::new(10_000_000, &budget, None);
        for k in 0..100 {
            r.samples(batch(0, k * 1_000_000, (k + 1) * 1_000_000));
        }
        let snap = r.snapshot();
        // Batches ending within 10 ms of the newest end: the last 11 of 1 ms each.
        assert_eq!(snap.samples(), 11 * 1_000);
        assert_eq!(r.bytes(), 11 * 1_000 * 24);
        assert_eq!(r.evicted_by_cap, 0);
    }

    #[test]
    fn a_clock_set_back_does_not_empty_the_ring() {
        let budget = Budget::new(1, 1, 1_000, 10_000_000);
        let mut r = Ring::new(10_000_000, &budget, None);
        let hour = 3_600_000_000_000;
        for k in 0..20 {
            r.samples(batch(0, hour + k * 1_000_000, hour + (k + 1) * 1_000_000));
        }
        // The clock goes back an hour: the new rows are kept, beside the last 10 ms before.
        r.samples(batch(0, 0, 1_000_000));
        assert_eq!(r.snapshot().samples(), 12 * 1_000);
        for k in 1..5 {
            r.samples(batch(0, k * 1_000_000, (k + 1) * 1_000_000));
        }
        // Time goes on from the step: each new millisecond lets the oldest before it go.
        assert_eq!(r.snapshot().samples(), 12 * 1_000);
        // 10 ms after the step, the rows from before it have left.
        for k in 5..30 {
            r.samples(batch(0, k * 1_000_000, (k + 1) * 1_000_000));
        }
        let snap = r.snapshot();
        assert_eq!(snap.samples(), 11 * 1_000);
        assert_eq!(snap.span(), Some((19_000_000, 30_000_000)));
        assert_eq!(r.evicted_by_cap, 0);
    }

    #[test]
    fn a_limit_caps_the_ring_below_its_estimate() {
        // 8 GPUs, 1 µs, 4 metrics, 5 minutes: far above the 1 MiB allowed.
        let budget = Budget::new(8, 4, 1_000, 300_000_000_000);
        let mut r = Ring::new(300_000_000_000, &budget, Some(1 << 20));
        for k in 0..2_000 {
            r.samples(batch(0, k * 1_000_000, (k + 1) * 1_000_000));
        }
        assert!(r.bytes() <= 1 << 20, "{} bytes", r.bytes());
        assert!(r.evicted_by_cap > 0);
    }

    #[test]
    fn the_budget_says_its_product() {
        let b = Budget::new(8, 2, 50_000, 300_000_000_000);
        assert_eq!(b.samples_per_s, 160_000.0);
        assert_eq!(b.bytes_per_sample, 32);
        assert_eq!(b.bytes, 160_000 * 32 * 300);
        assert!(
            b.describe()
                .starts_with("160000 samples/s × 32 bytes × 300 s")
        );
    }

    #[test]
    fn a_keep_beyond_half_the_available_memory_is_refused() {
        // 8 GPUs, 50 µs, two metrics, 10 hours: 172.8 GB.
        let b = Budget::new(8, 2, 50_000, 36_000_000_000_000);
        let e = b.check("10h", 64 << 30).unwrap_err().to_string();
        assert!(e.starts_with("--keep 10h: the flight recorder would need 171.7 GiB (160000 samples/s × 32 bytes × 36000 s), more than half of the 64.0 GiB"), "{e}");
        assert!(e.ends_with("choose a shorter --keep"), "{e}");
        let five_min = Budget::new(8, 2, 50_000, 300_000_000_000);
        assert!(five_min.check("5m", 64 << 30).is_ok());
    }

    #[test]
    fn only_this_hosts_dumps_beyond_keep_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut made = Vec::new();
        for k in 0..4 {
            let p = dump_path(
                dir.path(),
                "node/1",
                1_764_460_800_000_000_000 + k * 1_000_000_000,
            );
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("manifest.json"), "{}").unwrap();
            made.push(p);
            // Modification times a step apart on any file system.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let others = [
            "flight-other-2025-11-30T00-00-00Z.cufall",
            "flight-node_1-notes.cufall",
            "flight-node_1-2025-11-30T00-00-00Z.cufall.bak",
            "run.cufall",
        ];
        for o in others {
            std::fs::create_dir(dir.path().join(o)).unwrap();
        }
        assert!(is_dump_name(
            "flight-node_1-2025-11-30T00-00-00Z-12.cufall",
            "node/1"
        ));
        assert!(!is_dump_name(
            "flight-node_1-2025-11-30T00-00-00Z-.cufall",
            "node/1"
        ));
        let deleted = prune_dumps(dir.path(), "node/1", 2).unwrap();
        assert_eq!(deleted, made[..2].to_vec());
        assert!(made[2].exists() && made[3].exists());
        for o in others {
            assert!(dir.path().join(o).exists(), "{o}");
        }
    }

    #[test]
    fn dump_names_do_not_collide() {
        let dir = tempfile::tempdir().unwrap();
        let a = dump_path(dir.path(), "node/1", 1_764_460_800_000_000_000);
        assert!(
            a.ends_with("flight-node_1-2025-11-30T00-00-00Z.cufall"),
            "{a:?}"
        );
        std::fs::create_dir(&a).unwrap();
        let b = dump_path(dir.path(), "node/1", 1_764_460_800_000_000_000);
        assert!(b.to_string_lossy().ends_with("-2.cufall"), "{b:?}");
    }

    #[test]
    fn the_start_budget_counts_the_metrics_asked_for_when_the_first_run_has_none() {
        let info = crate::serve::tests::feed_info(0, 50_000);
        // Without counters the run has no metric; the budget is still that of the two asked.
        let b = start_budget(
            &info,
            2,
            Some(1_000),
            std::time::Duration::from_secs(36_000),
        );
        assert_eq!(b.bytes_per_sample, 32);
        assert_eq!(b.samples_per_s, 8e6);
        assert!(b.check("10h", 64 << 30).is_err());
        let had = crate::serve::tests::feed_info(2, 50_000);
        let b = start_budget(&had, 2, None, std::time::Duration::from_secs(300));
        assert_eq!(b.samples_per_s, 160_000.0);
    }
}
