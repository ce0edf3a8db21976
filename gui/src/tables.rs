//! The tables beside the samples (NVTX ranges, kernels, drops, NVML readings), held whole but
//! compact, in the form the frames draw from: kernels as [`Spans`] per device with interned
//! names and launch shapes (36 bytes a kernel instead of a record with its own strings), each
//! NVTX lane as [`Spans`], NVML readings per device as a [`RawSeries`] with a pyramid of its own.
//! Kernels are read one segment at a time, so the whole table is never held twice.

use crate::host_threads::HostStacks;
use crate::lod::{DevicePyramid, RawSeries};
pub use crate::names::Names;
use crate::spans::Spans;
use cufall_analysis::phases::Phases;
use cufall_analysis::select::{PhaseSelect, domain_counts, library_of};
use cufall_trace::Trace;
use cufall_trace::model::DeviceId;
use cufall_trace::model::{ActivityKind, DropRecord, KernelRecord, NvmlRow, NvtxRange, RangeKind};
use std::collections::{BTreeMap, HashMap};

/// Readings per level-0 block of an NVML pyramid.
const NVML_BLOCK: usize = 16;

/// What kernels launched alike share: kind, stream, grid and block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub kind: ActivityKind,
    pub stream: u32,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
}

/// The kernels (and copies, graphs) of one device in start order.
#[derive(Debug, Default)]
pub struct DeviceKernels {
    pub spans: Spans,
    /// Per kernel, its name in [`Tables::names`].
    pub name: Vec<u32>,
    /// Per kernel, its shape in [`DeviceKernels::shapes`].
    pub shape: Vec<u32>,
    pub shapes: Vec<Shape>,
    /// Bytes moved by copies and sets: (kernel index, bytes), by index.
    pub bytes: Vec<(u32, u64)>,
}

/// One kernel as a frame's tooltip shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelView<'a> {
    pub name: &'a str,
    pub start_ns: i64,
    pub end_ns: i64,
    pub shape: Shape,
    pub bytes: Option<u64>,
}

impl DeviceKernels {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn get<'a>(&self, i: usize, names: &'a Names) -> KernelView<'a> {
        let bytes = self
            .bytes
            .binary_search_by_key(&(i as u32), |b| b.0)
            .ok()
            .map(|j| self.bytes[j].1);
        KernelView {
            name: names.get(self.name[i]),
            start_ns: self.spans.start(i),
            end_ns: self.spans.end(i),
            shape: self.shapes[self.shape[i] as usize],
            bytes,
        }
    }

    /// Bytes held.
    pub fn bytes_held(&self) -> usize {
        self.spans.bytes()
            + self.name.capacity() * 4
            + self.shape.capacity() * 4
            + self.bytes.capacity() * 16
    }
}

/// One kernel while the table loads: 32 bytes.
struct Pending {
    start: i64,
    end: i64,
    name: u32,
    shape: u32,
    bytes: u64,
}

/// Builds [`DeviceKernels`] from records arriving in any order.
#[derive(Default)]
struct KernelsBuilder {
    pending: BTreeMap<DeviceId, Vec<Pending>>,
    shapes: BTreeMap<DeviceId, (Vec<Shape>, HashMap<Shape, u32>)>,
}

impl KernelsBuilder {
    fn add(&mut self, records: Vec<KernelRecord>, names: &mut Names) {
        for k in records {
            let dev = k.device;
            let shape = Shape {
                kind: k.kind,
                stream: k.stream,
                grid: k.grid,
                block: k.block,
            };
            let (list, index) = self.shapes.entry(dev).or_default();
            let sid = *index.entry(shape).or_insert_with(|| {
                list.push(shape);
                (list.len() - 1) as u32
            });
            self.pending.entry(dev).or_default().push(Pending {
                start: k.start_ns,
                end: k.end_ns,
                name: names.id(&k.name),
                shape: sid,
                bytes: k.bytes.unwrap_or(u64::MAX),
            });
        }
    }

    fn finish(mut self) -> BTreeMap<DeviceId, DeviceKernels> {
        let mut out = BTreeMap::new();
        for (dev, mut list) in std::mem::take(&mut self.pending) {
            list.sort_by_key(|k| (k.start, k.end));
            let mut dk = DeviceKernels {
                spans: Spans::from_sorted(list.iter().map(|k| (k.start, k.end))),
                name: list.iter().map(|k| k.name).collect(),
                shape: list.iter().map(|k| k.shape).collect(),
                shapes: self.shapes.remove(&dev).map(|s| s.0).unwrap_or_default(),
                bytes: list
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| k.bytes != u64::MAX)
                    .map(|(i, k)| (i as u32, k.bytes))
                    .collect(),
            };
            dk.bytes.shrink_to_fit();
            out.insert(dev, dk);
        }
        out
    }
}

/// NVTX ranges arranged in lanes: a thread's push/pop ranges one lane per depth, start/end
/// ranges packed into lanes where they do not overlap, marks in a lane of their own. Ranges of a
/// library's domain ([`cufall_analysis::select::LIBRARY_DOMAINS`]: CUB's `CCCL`, XLA's `TSL`,
/// ...) get lanes of their own, titled with the domain, below the program's.
#[derive(Debug, Default)]
pub struct NvtxLanes {
    pub lanes: Vec<NvtxLane>,
}

#[derive(Debug, Default)]
pub struct NvtxLane {
    pub title: String,
    /// Indices into [`Tables::nvtx`], by start; ranges of one lane never overlap.
    pub ranges: Vec<u32>,
    /// Their times, for drawing.
    pub spans: Spans,
}

impl NvtxLanes {
    pub fn build(nvtx: &[NvtxRange]) -> NvtxLanes {
        let mut order: Vec<usize> = (0..nvtx.len()).collect();
        order.sort_by_key(|i| (nvtx[*i].start_ns, std::cmp::Reverse(nvtx[*i].end_ns)));
        let threads: std::collections::BTreeSet<(u32, u32)> = nvtx
            .iter()
            .filter(|r| r.kind == RangeKind::PushPop)
            .map(|r| (r.pid, r.tid))
            .collect();
        let many = threads.len() > 1;
        // Keyed by the library's domain ("" for the program's ranges, which come first), kind,
        // pid, tid and depth or packing slot.
        let mut lanes: BTreeMap<(&str, u8, u32, u32, u32), NvtxLane> = BTreeMap::new();
        let mut packed_ends: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for i in order {
            let r = &nvtx[i];
            let library = library_of(&r.domain).map_or("", |l| l.domain);
            let key = match r.kind {
                RangeKind::PushPop => (library, 0, r.pid, r.tid, r.depth),
                RangeKind::StartEnd => {
                    let ends = packed_ends.entry(library).or_default();
                    let slot = ends.iter().position(|e| *e <= r.start_ns);
                    let slot = match slot {
                        Some(s) => s,
                        None => {
                            ends.push(i64::MIN);
                            ends.len() - 1
                        }
                    };
                    ends[slot] = r.end_ns;
                    (library, 1, 0, 0, slot as u32)
                }
                RangeKind::Mark => (library, 2, r.pid, 0, 0),
            };
            let lane = lanes.entry(key).or_insert_with(|| NvtxLane {
                title: lane_title(key, many),
                ranges: Vec::new(),
                spans: Spans::default(),
            });
            lane.ranges.push(i as u32);
        }
        let mut lanes: Vec<NvtxLane> = lanes.into_values().collect();
        for l in &mut lanes {
            l.ranges.shrink_to_fit();
            l.spans = Spans::from_sorted(l.ranges.iter().map(|i| {
                let r = &nvtx[*i as usize];
                (r.start_ns, r.end_ns)
            }));
        }
        NvtxLanes { lanes }
    }
}

/// A lane's title: `NVTX depth 1` for the program's ranges, `CCCL depth 0` for a library's.
fn lane_title((library, kind, pid, tid, slot): (&str, u8, u32, u32, u32), many: bool) -> String {
    let who = if library.is_empty() { "NVTX" } else { library };
    match kind {
        0 if many => format!("{who} {pid}:{tid} d{slot}"),
        0 => format!("{who} depth {slot}"),
        1 => format!("{who} start/end {slot}"),
        _ => format!("{who} marks"),
    }
}

/// The NVML values the window shows, in [`DeviceNvml::series`]' column order.
pub const NVML_POWER: usize = 0;
pub const NVML_SM_CLOCK: usize = 1;
pub const NVML_MEM_CLOCK: usize = 2;
pub const NVML_UTIL: usize = 3;
pub const NVML_TEMPERATURE: usize = 4;
const NVML_COLUMNS: usize = 5;

/// One device's NVML readings: each holds until the next (the last for one interval), as a
/// series of five values (NaN where NVML gave none) with its own pyramid, so that a frame reads
/// about one summary per pixel column at any zoom.
#[derive(Debug, Default)]
pub struct DeviceNvml {
    pub series: RawSeries,
    /// Largest power (W) and SM clock (MHz) read: the tracks' scales.
    pub peak_power_w: f64,
    pub peak_sm_clock_mhz: f64,
    /// Per value, whether any reading has it.
    present: [bool; NVML_COLUMNS],
}

/// One NVML reading as the window keeps it while loading: its time and the five values drawn.
#[derive(Clone, Copy, Debug)]
struct Reading {
    t_ns: i64,
    values: [f32; NVML_COLUMNS],
}

impl Reading {
    fn of(r: &NvmlRow) -> Reading {
        let f = |v: Option<u32>| v.map_or(f32::NAN, |v| v as f32);
        let mut values = [f32::NAN; NVML_COLUMNS];
        values[NVML_POWER] = r.power_w.unwrap_or(f32::NAN);
        values[NVML_SM_CLOCK] = f(r.sm_clock_mhz);
        values[NVML_MEM_CLOCK] = f(r.mem_clock_mhz);
        values[NVML_UTIL] = f(r.gpu_util_pct);
        values[NVML_TEMPERATURE] = f(r.temperature_c);
        Reading {
            t_ns: r.t_ns,
            values,
        }
    }
}

impl DeviceNvml {
    fn build(mut rows: Vec<Reading>, interval_ns: i64) -> DeviceNvml {
        rows.sort_by_key(|r| r.t_ns);
        let mut series = RawSeries::new(NVML_COLUMNS);
        series.start_ns.reserve_exact(rows.len());
        series.end_ns.reserve_exact(rows.len());
        for v in &mut series.values {
            v.reserve_exact(rows.len());
        }
        for (i, r) in rows.iter().enumerate() {
            let end = rows
                .get(i + 1)
                .map_or(r.t_ns + interval_ns.max(1), |n| n.t_ns);
            series.start_ns.push(r.t_ns);
            series.end_ns.push(end.max(r.t_ns));
            for (col, v) in series.values.iter_mut().zip(r.values) {
                col.push(v);
            }
        }
        drop(rows);
        let peak = |m: usize| {
            series.values[m]
                .iter()
                .filter(|v| !v.is_nan())
                .fold(0f64, |a, v| a.max(f64::from(*v)))
        };
        let (peak_power_w, peak_sm_clock_mhz) = (peak(NVML_POWER), peak(NVML_SM_CLOCK));
        let present = std::array::from_fn(|m| series.values[m].iter().any(|v| !v.is_nan()));
        // Readings hold until the next one: no holes between them.
        let mut p = DevicePyramid::with_base(NVML_COLUMNS, i64::MAX / 4, NVML_BLOCK);
        let mut row = [0f32; NVML_COLUMNS];
        for i in 0..series.len() {
            for (m, v) in row.iter_mut().enumerate() {
                *v = series.values[m][i];
            }
            p.push(series.start_ns[i], series.end_ns[i], &row);
        }
        p.flush();
        series.fine = Some(Box::new(p));
        DeviceNvml {
            series,
            peak_power_w,
            peak_sm_clock_mhz,
            present,
        }
    }

    /// Whether any reading has value `m`.
    pub fn has(&self, m: usize) -> bool {
        self.present.get(m).copied().unwrap_or(false)
    }

    /// The reading in force at `t`.
    pub fn at(&self, t: i64) -> Option<usize> {
        self.series
            .start_ns
            .partition_point(|s| *s <= t)
            .checked_sub(1)
    }

    /// Value `m` of reading `i` (`None` where NVML gave none).
    pub fn value(&self, m: usize, i: usize) -> Option<f64> {
        let v = *self.series.values.get(m)?.get(i)?;
        (!v.is_nan()).then_some(f64::from(v))
    }
}

/// The tables beside the samples, read whole.
#[derive(Debug, Default)]
pub struct Tables {
    pub nvtx: Vec<NvtxRange>,
    pub lanes: NvtxLanes,
    pub phases: Phases,
    /// Kernel names, shared by the devices.
    pub names: Names,
    pub kernels: BTreeMap<DeviceId, DeviceKernels>,
    pub drops: BTreeMap<DeviceId, Vec<DropRecord>>,
    pub nvml: BTreeMap<DeviceId, DeviceNvml>,
    /// The program's host threads as sampled (`--host-stacks`); empty without them.
    pub host: HostStacks,
}

impl Tables {
    /// Reads every table of `trace`; a table that cannot be read is left empty and `problem`
    /// is told what is not shown and why.
    pub fn load(
        trace: &Trace,
        nvml_interval_ns: i64,
        select: &PhaseSelect,
        problem: &dyn Fn(&str, String),
    ) -> Tables {
        let nvtx = trace.nvtx().unwrap_or_else(|e| {
            problem("NVTX ranges not shown", e.to_string());
            Vec::new()
        });
        if let Err(e) = select.check_domains(&domain_counts(&nvtx)) {
            problem("phases", e.to_string());
        }
        let phases = Phases::build(&select.apply(&nvtx));
        let mut names = Names::default();
        let mut kb = KernelsBuilder::default();
        if let Err(e) = trace.kernels_by_segment(|k| kb.add(k, &mut names)) {
            problem("kernels not shown", e.to_string());
            kb = KernelsBuilder::default();
        }
        let drops = trace.drops().unwrap_or_else(|e| {
            problem("drops not shown", e.to_string());
            Vec::new()
        });
        // NVML readings a segment at a time, kept per device in the form drawn (32 bytes each).
        let mut nvml_by: BTreeMap<DeviceId, Vec<Reading>> = BTreeMap::new();
        if let Err(e) = trace.nvml_by_segment(|rows| {
            for r in &rows {
                nvml_by.entry(r.device).or_default().push(Reading::of(r));
            }
        }) {
            problem("NVML readings not shown", e.to_string());
            nvml_by.clear();
        }
        let host = load_host(trace, problem);
        let mut drops_by: BTreeMap<DeviceId, Vec<DropRecord>> = BTreeMap::new();
        for d in drops {
            drops_by.entry(d.device).or_default().push(d);
        }
        for v in drops_by.values_mut() {
            v.sort_by_key(|d| d.start_ns);
        }
        Tables {
            lanes: NvtxLanes::build(&nvtx),
            phases,
            nvtx,
            names,
            kernels: kb.finish(),
            drops: drops_by,
            nvml: nvml_by
                .into_iter()
                .map(|(d, rows)| (d, DeviceNvml::build(rows, nvml_interval_ns)))
                .collect(),
            host,
        }
    }

    /// Bytes held by the kernel and NVML tables (the large ones).
    pub fn bytes(&self) -> usize {
        self.kernels
            .values()
            .map(DeviceKernels::bytes_held)
            .sum::<usize>()
            + self.nvml.values().map(|n| n.series.bytes()).sum::<usize>()
    }
}

/// The host stacks and samples; either table failing leaves the host lanes out.
fn load_host(trace: &Trace, problem: &dyn Fn(&str, String)) -> HostStacks {
    let read = trace
        .stacks()
        .and_then(|frames| Ok((frames, trace.host_samples()?)));
    match read {
        Ok((frames, samples)) => HostStacks::build(frames, samples),
        Err(e) => {
            problem("host stacks not shown", e.to_string());
            HostStacks::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;
    use cufall_trace::model::DeviceId;

    fn range(s: i64, e: i64, depth: u32, kind: RangeKind) -> NvtxRange {
        NvtxRange {
            start_ns: s,
            end_ns: e,
            name: format!("r{depth}"),
            kind,
            depth,
            pid: 1,
            tid: 1,
            ..Default::default()
        }
    }

    #[test]
    fn lanes_by_depth_packed_start_end_and_marks() {
        let nvtx = vec![
            range(0, 100, 0, RangeKind::PushPop),
            range(10, 20, 1, RangeKind::PushPop),
            range(30, 40, 1, RangeKind::PushPop),
            range(0, 50, 0, RangeKind::StartEnd),
            range(20, 60, 0, RangeKind::StartEnd),
            range(60, 70, 0, RangeKind::StartEnd),
            range(5, 5, 0, RangeKind::Mark),
        ];
        let lanes = NvtxLanes::build(&nvtx);
        let sizes: Vec<(String, usize)> = lanes
            .lanes
            .iter()
            .map(|l| (l.title.clone(), l.ranges.len()))
            .collect();
        assert_eq!(
            sizes,
            vec![
                ("NVTX depth 0".to_string(), 1),
                ("NVTX depth 1".to_string(), 2),
                ("NVTX start/end 0".to_string(), 2),
                ("NVTX start/end 1".to_string(), 1),
                ("NVTX marks".to_string(), 1),
            ]
        );
        for l in &lanes.lanes {
            assert_eq!(l.spans.len(), l.ranges.len());
            for (j, i) in l.ranges.iter().enumerate() {
                let r = &nvtx[*i as usize];
                assert_eq!((l.spans.start(j), l.spans.end(j)), (r.start_ns, r.end_ns));
            }
        }
    }

    #[test]
    fn library_domains_get_lanes_of_their_own() {
        let in_domain = |s: i64, e: i64, depth: u32, domain: &str| NvtxRange {
            domain: domain.into(),
            ..range(s, e, depth, RangeKind::PushPop)
        };
        let nvtx = vec![
            in_domain(0, 100, 0, ""),
            in_domain(10, 20, 1, "CCCL"),
            in_domain(30, 40, 1, "CCCL"),
            in_domain(50, 60, 1, "mine"),
            in_domain(0, 90, 0, "TSL"),
        ];
        let titles: Vec<(String, usize)> = NvtxLanes::build(&nvtx)
            .lanes
            .iter()
            .map(|l| (l.title.clone(), l.ranges.len()))
            .collect();
        assert_eq!(
            titles,
            vec![
                ("NVTX depth 0".to_string(), 1),
                ("NVTX depth 1".to_string(), 1),
                ("CCCL depth 1".to_string(), 2),
                ("TSL depth 0".to_string(), 1),
            ]
        );
    }

    #[test]
    fn phases_follow_the_selection_and_every_range_keeps_a_lane() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.cufall");
        let m = cufall_trace::model::Manifest::new("test", 0);
        let mut w =
            cufall_trace::TraceWriter::create(&path, m, cufall_trace::WriterOptions::default())
                .unwrap();
        // Depths as recorded: nesting on the thread.
        let in_domain = |s: i64, e: i64, depth: u32, name: &str, domain: &str| NvtxRange {
            name: name.into(),
            domain: domain.into(),
            ..range(s, e, depth, RangeKind::PushPop)
        };
        w.append_nvtx(&[
            in_domain(0, 100, 0, "step", ""),
            in_domain(10, 20, 1, "cub::DeviceScan::InclusiveScan", "CCCL"),
            in_domain(30, 60, 1, "verify", ""),
        ])
        .unwrap();
        w.finish(100).unwrap();
        let trace = Trace::open(&path).unwrap();
        let paths = |t: &Tables| -> Vec<String> {
            t.phases.phases.iter().map(|p| p.path.clone()).collect()
        };
        let problems = std::cell::RefCell::new(Vec::new());
        let say = |what: &str, e: String| problems.borrow_mut().push(format!("{what}: {e}"));
        let t = Tables::load(&trace, 1, &PhaseSelect::default(), &say);
        assert_eq!(paths(&t), ["step", "step/verify"]);
        let titles: Vec<&str> = t.lanes.lanes.iter().map(|l| l.title.as_str()).collect();
        assert_eq!(titles, ["NVTX depth 0", "NVTX depth 1", "CCCL depth 1"]);
        let t = Tables::load(&trace, 1, &"program,domain:CCCL".parse().unwrap(), &say);
        assert_eq!(
            paths(&t),
            ["step", "step/cub::DeviceScan::InclusiveScan", "step/verify"]
        );
        assert!(problems.borrow().is_empty(), "{:?}", problems.borrow());
        Tables::load(&trace, 1, &"domain:NCCL".parse().unwrap(), &say);
        assert!(
            problems.borrow()[0].contains("no NVTX range of domain NCCL"),
            "{:?}",
            problems.borrow()
        );
    }

    #[test]
    fn kernels_from_segments_in_any_order_are_sorted_with_names_and_shapes_shared() {
        let k =
            |dev: u32, s: i64, e: i64, name: &str, stream: u32, bytes: Option<u64>| KernelRecord {
                device: DeviceId(dev),
                start_ns: s,
                end_ns: e,
                name: name.into(),
                stream,
                bytes,
                kind: if bytes.is_some() {
                    ActivityKind::Memcpy
                } else {
                    ActivityKind::Kernel
                },
                ..Default::default()
            };
        let mut names = Names::default();
        let mut b = KernelsBuilder::default();
        b.add(
            vec![k(0, 30, 40, "gemm", 7, None), k(1, 5, 9, "gemm", 7, None)],
            &mut names,
        );
        b.add(
            vec![
                k(0, 10, 20, "copy", 8, Some(4096)),
                k(0, 0, 1000, "long", 7, None),
            ],
            &mut names,
        );
        let by = b.finish();
        assert_eq!(names.len(), 3, "names stored once for both devices");
        let d0 = &by[&DeviceId(0)];
        let got: Vec<(&str, i64, i64, u32, Option<u64>)> = (0..d0.len())
            .map(|i| {
                let v = d0.get(i, &names);
                (v.name, v.start_ns, v.end_ns, v.shape.stream, v.bytes)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("long", 0, 1000, 7, None),
                ("copy", 10, 20, 8, Some(4096)),
                ("gemm", 30, 40, 7, None),
            ]
        );
        assert_eq!(d0.shapes.len(), 2, "gemm and long launch alike");
        assert_eq!(by[&DeviceId(1)].len(), 1);
        // The long kernel on one stream is found under the short ones.
        assert!(d0.spans.overlapping(500, 600).contains(&0));
    }

    #[test]
    fn nvml_readings_hold_until_the_next_and_keep_their_peaks() {
        let row = |t: i64, w: f32| NvmlRow {
            device: DeviceId(0),
            t_ns: t,
            power_w: Some(w),
            sm_clock_mhz: Some(1980),
            ..Default::default()
        };
        let rows = [row(200, 300.0), row(100, 150.0), row(300, 90.0)];
        let n = DeviceNvml::build(rows.iter().map(Reading::of).collect(), 50);
        assert_eq!(n.series.start_ns, vec![100, 200, 300]);
        assert_eq!(n.series.end_ns, vec![200, 300, 350]);
        assert_eq!((n.peak_power_w, n.peak_sm_clock_mhz), (300.0, 1980.0));
        assert_eq!(n.at(250), Some(1));
        assert_eq!(n.value(NVML_POWER, 1), Some(300.0));
        assert_eq!(n.value(NVML_UTIL, 1), None, "NaN where NVML gave none");
        let p = n.series.fine.as_ref().unwrap();
        assert_eq!(p.samples(), 3);
    }
}
