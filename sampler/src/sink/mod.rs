//! Writing the trace: the one sink thread that takes what the pipeline, the recorder and the
//! host-stack thread produce ([`SinkMsg`]), writes the trace and feeds the live view; the capture
//! windows that decide what of it the trace keeps ([`window`]); and the trace file's life around
//! that thread ([`trace`]: made with its manifest, notes added, closed). The pipeline produces;
//! only this module writes.
//!
//! Each device's batches arrive from several evaluator threads and are put back in sequence
//! order. The reorder buffer is bounded: when a device has more than [`MAX_PENDING_BATCHES`]
//! batches waiting for a late one, the sink stops waiting (says so), writes what it holds and
//! writes the late batch whenever it comes (the trace reader sorts samples by time). So a stuck
//! evaluator can neither freeze a GPU's live view nor make the sink's memory grow.

pub mod trace;
pub mod window;

use cufall_live::{LiveEvent, LiveSender};
use cufall_trace::TraceWriter;
use cufall_trace::model::{
    ApiCall, CaptureEvent, DeviceId, DropReason, DropRecord, HostSample, KernelRecord, NvmlRow,
    NvtxRange, SampleBatch, StackFrame,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use window::{Edge, Gate, Rows, WindowLog};

/// What flows into the sink.
pub enum SinkMsg {
    /// One chunk's samples (possibly none), in the device's sequence of chunks.
    Samples {
        device: DeviceId,
        seq: u64,
        batch: SampleBatch,
    },
    Drops(Vec<DropRecord>),
    Nvml(Vec<NvmlRow>),
    Message(String),
    /// Captured from the profiled program (see [`crate::recorder`]).
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    Api(Vec<ApiCall>),
    Capture(Vec<CaptureEvent>),
    /// Host stacks (see [`crate::hoststacks`]): the stacks first seen in this batch, then the
    /// samples, which may name them; the sink writes the stacks first.
    Host {
        stacks: Vec<StackFrame>,
        samples: Vec<HostSample>,
    },
    /// A capture window opened or closed (`--capture-range`, `--delay`, `cufall control`).
    Window(window::Edge),
}

/// Most batches one device may have waiting for an earlier one.
pub const MAX_PENDING_BATCHES: usize = 256;

/// Drop records (of one reason, or of several) and the samples they lost, as estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DropCount {
    pub records: u64,
    pub lost_samples: u64,
}

/// Drop counts by reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DropTally {
    pub by_reason: BTreeMap<&'static str, DropCount>,
}

impl DropTally {
    pub fn add(&mut self, r: &DropRecord) {
        let e = self.by_reason.entry(r.reason.as_str()).or_default();
        e.records += 1;
        e.lost_samples += r.lost_samples.unwrap_or(0);
    }

    /// Records other than warm-up and pauses (asked for): real losses.
    pub fn losses(&self) -> DropCount {
        self.by_reason
            .iter()
            .filter(|(k, _)| {
                ![DropReason::Warmup.as_str(), DropReason::Paused.as_str()].contains(k)
            })
            .fold(DropCount::default(), |a, (_, c)| DropCount {
                records: a.records + c.records,
                lost_samples: a.lost_samples + c.lost_samples,
            })
    }
}

/// State the sink shares with the session handle while running.
#[derive(Debug, Default)]
pub struct SinkShared {
    pub samples_written: AtomicU64,
    pub nvml_rows: AtomicU64,
    pub tally: Mutex<DropTally>,
    pub error: Mutex<Option<String>>,
    pub messages: Mutex<Vec<String>>,
    /// Capture windows so far (a recording limited to windows).
    pub windows: Mutex<WindowLog>,
}

pub struct SinkResult {
    pub writer: Option<TraceWriter>,
}

/// One device's batches, put back in sequence order.
#[derive(Default)]
struct Reorder {
    next: u64,
    waiting: BTreeMap<u64, SampleBatch>,
}

impl Reorder {
    /// Takes batch `seq`; returns the batches now ready to write, and whether the buffer
    /// overflowed (it stopped waiting for batch `next`).
    fn push(&mut self, seq: u64, batch: SampleBatch) -> (Vec<SampleBatch>, Option<u64>) {
        if seq < self.next {
            // A batch given up on earlier: write it now.
            return (vec![batch], None);
        }
        self.waiting.insert(seq, batch);
        let mut skipped = None;
        if self.waiting.len() > MAX_PENDING_BATCHES
            && let Some((&first, _)) = self.waiting.first_key_value()
        {
            skipped = Some(self.next);
            self.next = first;
        }
        let mut ready = Vec::new();
        while let Some(b) = self.waiting.remove(&self.next) {
            self.next += 1;
            ready.push(b);
        }
        (ready, skipped)
    }
}

/// The one thread that writes the trace and feeds the live view, in per-device sequence order.
/// With `gate`, the trace keeps only what falls in capture windows (the live view gets
/// everything).
pub fn sink_main(
    rx: Receiver<SinkMsg>,
    writer: Option<TraceWriter>,
    live: Option<LiveSender>,
    shared: Arc<SinkShared>,
    gate: Option<Gate>,
) -> SinkResult {
    let mut sink = Sink {
        gate,
        pending: HashMap::new(),
        trace: TraceSink {
            writer,
            failed: false,
            shared: &shared,
        },
        live,
        shared: &shared,
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(m) => sink.handle(m),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        sink.release_held();
        sink.trace.write(|w| w.flush_if_due());
    }
    sink.finish()
}

struct Sink<'a> {
    /// Present when the trace keeps capture windows only.
    gate: Option<Gate>,
    pending: HashMap<DeviceId, Reorder>,
    trace: TraceSink<'a>,
    live: Option<LiveSender>,
    shared: &'a SinkShared,
}

impl Sink<'_> {
    fn live(&self, e: LiveEvent) {
        if let Some(l) = &self.live {
            l.send(e);
        }
    }

    fn handle(&mut self, msg: SinkMsg) {
        match msg {
            SinkMsg::Samples { device, seq, batch } => self.samples(device, seq, batch),
            SinkMsg::Drops(rows) => self.route(Rows::Drops(rows)),
            SinkMsg::Nvml(rows) => self.route(Rows::Nvml(rows)),
            SinkMsg::Nvtx(rows) => self.route(Rows::Nvtx(rows)),
            SinkMsg::Kernels(rows) => self.route(Rows::Kernels(rows)),
            SinkMsg::Api(rows) => self.route(Rows::Api(rows)),
            SinkMsg::Capture(rows) => self.trace.write(|w| w.append_capture(&rows)),
            SinkMsg::Host { stacks, samples } => {
                // Stacks are kept whole, windows or not: a sample kept later may name them.
                if !stacks.is_empty() {
                    self.trace.write(|w| w.append_stacks(&stacks));
                }
                if !samples.is_empty() {
                    self.route(Rows::HostSamples(samples));
                }
            }
            SinkMsg::Message(m) => self.message(m),
            SinkMsg::Window(edge) => self.window_edge(edge),
        }
    }

    /// Rows to the trace and the live view. Without a gate they are written at once; with one
    /// the live view gets them now and the trace once their windows are known.
    fn route(&mut self, rows: Rows) {
        if self.gate.is_none() {
            self.write_rows(&rows);
            self.send_live(rows);
            return;
        }
        if self.live.is_some() {
            self.send_live(rows.clone());
        }
        if let Some(g) = self.gate.as_mut() {
            g.hold(std::time::Instant::now(), rows);
        }
    }

    fn send_live(&mut self, rows: Rows) {
        if self.live.is_none() {
            return;
        }
        match rows {
            Rows::Samples(b) => self.live(LiveEvent::Samples(b)),
            Rows::Drops(d) => {
                for r in d {
                    self.live(LiveEvent::Drop(r));
                }
            }
            Rows::Nvml(r) => self.live(LiveEvent::Nvml(r)),
            Rows::Nvtx(r) => self.live(LiveEvent::Nvtx(r)),
            Rows::Kernels(r) => self.live(LiveEvent::Kernels(r)),
            // The live view has no lane for CUDA calls nor host stacks.
            Rows::Api(_) | Rows::HostSamples(_) => {}
        }
    }

    fn window_edge(&mut self, edge: Edge) {
        let Some(gate) = self.gate.as_mut() else {
            return;
        };
        let rows = gate.edge(std::time::Instant::now(), edge);
        let log = gate.log();
        if let Ok(mut l) = self.shared.windows.lock() {
            *l = log;
        }
        if !rows.is_empty() {
            self.trace.write(|w| w.append_capture(&rows));
        }
    }

    fn release_held(&mut self) {
        if let Some(g) = self.gate.as_mut() {
            let now = std::time::Instant::now();
            let out = g.release(now);
            let settled = g.settled(now);
            for rows in out {
                self.write_rows(&rows);
            }
            if !settled.is_empty() {
                self.trace.write(|w| w.append_capture(&settled));
            }
        }
    }

    fn write_rows(&mut self, rows: &Rows) {
        match rows {
            Rows::Samples(b) => {
                self.shared
                    .samples_written
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                self.trace.write(|w| w.append_samples(b));
            }
            Rows::Drops(rows) => {
                if let Ok(mut t) = self.shared.tally.lock() {
                    rows.iter().for_each(|r| t.add(r));
                }
                self.trace.write(|w| w.append_drops(rows));
            }
            Rows::Nvml(rows) => {
                self.shared
                    .nvml_rows
                    .fetch_add(rows.len() as u64, Ordering::Relaxed);
                self.trace.write(|w| w.append_nvml(rows));
            }
            Rows::Nvtx(rows) => self.trace.write(|w| w.append_nvtx(rows)),
            Rows::Kernels(rows) => self.trace.write(|w| w.append_kernels(rows)),
            Rows::Api(rows) => self.trace.write(|w| w.append_api(rows)),
            Rows::HostSamples(rows) => self.trace.write(|w| w.append_host_samples(rows)),
        }
    }

    fn message(&mut self, m: String) {
        if let Ok(mut v) = self.shared.messages.lock() {
            v.push(m.clone());
        }
        self.live(LiveEvent::Message(m));
    }

    fn samples(&mut self, device: DeviceId, seq: u64, batch: SampleBatch) {
        let (ready, skipped) = self.pending.entry(device).or_default().push(seq, batch);
        if let Some(late) = skipped {
            self.message(format!(
                "{device}: sample batch {late} is late (more than {MAX_PENDING_BATCHES} later \
batches wait for it); writing the later ones without it"
            ));
        }
        for b in ready {
            self.write_batch(b);
        }
    }

    fn write_batch(&mut self, b: SampleBatch) {
        if !b.is_empty() {
            self.route(Rows::Samples(b));
        }
    }

    /// Anything still out of order (a batch that never came) is written rather than kept back;
    /// a window still open is closed at the last moment anything was recorded.
    fn finish(mut self) -> SinkResult {
        let rest: Vec<SampleBatch> = self
            .pending
            .drain()
            .flat_map(|(_, r)| r.waiting.into_values())
            .collect();
        for b in rest {
            if b.is_empty() {
                continue;
            }
            let rows = Rows::Samples(b);
            match self.gate.as_mut() {
                Some(g) => g.hold(std::time::Instant::now(), rows),
                None => self.write_rows(&rows),
            }
        }
        if let Some(mut g) = self.gate.take() {
            let closed = g.close_all(crate::now_unix_ns(), "the end of the recording");
            if let Ok(mut l) = self.shared.windows.lock() {
                *l = g.log();
            }
            if !closed.is_empty() {
                self.trace.write(|w| w.append_capture(&closed));
            }
            for rows in g.drain() {
                self.write_rows(&rows);
            }
        }
        self.live(LiveEvent::End);
        SinkResult {
            writer: self.trace.writer.take(),
        }
    }
}

/// The trace writer of the sink: after the first failed write it writes nothing more (the live
/// view keeps going) and the failure is reported once, through [`SinkShared::error`].
struct TraceSink<'a> {
    writer: Option<TraceWriter>,
    failed: bool,
    shared: &'a SinkShared,
}

impl TraceSink<'_> {
    fn write(&mut self, f: impl FnOnce(&mut TraceWriter) -> cufall_trace::Result<()>) {
        let Some(w) = self.writer.as_mut().filter(|_| !self.failed) else {
            return;
        };
        if let Err(e) = f(w) {
            self.failed = true;
            if let Ok(mut slot) = self.shared.error.lock()
                && slot.is_none()
            {
                *slot = Some(format!("writing the trace failed: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::window::Gate;
    use cufall_live::FeedInfo;
    use cufall_trace::model::NvmlRow;
    use cufall_trace::model::{DeviceInfo, Manifest, MetricInfo, SamplingInfo};
    use cufall_trace::{Trace, WriterOptions};
    use std::sync::mpsc;

    const T0: i64 = 1_764_460_800_000_000_000;

    fn manifest() -> Manifest {
        let mut m = Manifest::new("test", T0);
        m.devices = (0..2)
            .map(|i| DeviceInfo {
                id: DeviceId(i),
                name: "GPU".into(),
                chip: "GH100".into(),
                uuid: format!("GPU-{i}"),
                pci_bus_id: String::new(),
                sm_count: None,
                memory_total_bytes: None,
            })
            .collect();
        m.sampling = Some(SamplingInfo {
            interval_ns: 10_000,
            metrics: vec![MetricInfo {
                name: "m.avg".into(),
                unit: "%".into(),
                description: String::new(),
            }],
            source: "test".into(),
        });
        m
    }

    fn batch(device: u32, t0: i64, n: usize, columns: usize) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(device), columns);
        for i in 0..n {
            let s = t0 + i as i64 * 10_000;
            b.push(s, s + 10_000, &vec![i as f64; columns]);
        }
        b
    }

    fn live() -> (LiveSender, cufall_live::LiveReceiver) {
        let m = manifest();
        cufall_live::feed(
            FeedInfo {
                devices: m.devices.clone(),
                metrics: m.sampling.map(|s| s.metrics).unwrap_or_default(),
                heatmaps: Vec::new(),
                interval_ns: cufall_trace::model::Nanos(10_000),
                nvml_interval_ns: cufall_trace::model::Nanos(10_000_000),
                counters_unavailable: None,
            },
            64,
        )
    }

    fn sample_starts(events: &[LiveEvent]) -> Vec<(u32, i64)> {
        events
            .iter()
            .filter_map(|e| match e {
                LiveEvent::Samples(b) => Some((b.device.0, b.start_ns[0])),
                _ => None,
            })
            .collect()
    }

    /// A recording limited to windows: samples and NVML readings outside the window never
    /// reach the trace, the live view sees everything, and the window is a capture row.
    #[test]
    fn a_gated_sink_writes_only_what_falls_in_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("window.cufall");
        let writer = TraceWriter::create(&path, manifest(), WriterOptions::default()).unwrap();
        let (live_tx, live_rx) = live();
        let (tx, rx) = mpsc::channel();
        let send = |m| tx.send(m).unwrap();
        // Ten samples of 10 µs from T0; the window covers samples 3..=5.
        send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 0,
            batch: batch(0, T0, 10, 1),
        });
        send(SinkMsg::Nvml(vec![
            NvmlRow {
                device: DeviceId(0),
                t_ns: T0 + 5_000,
                ..NvmlRow::default()
            },
            NvmlRow {
                device: DeviceId(0),
                t_ns: T0 + 45_000,
                ..NvmlRow::default()
            },
        ]));
        let edge = |t_ns, open| {
            SinkMsg::Window(Edge {
                t_ns,
                open,
                source: 42,
                why: "cudaProfilerStart/Stop in process 42".into(),
            })
        };
        send(edge(T0 + 35_000, true));
        send(edge(T0 + 55_000, false));
        drop(tx);
        let shared = Arc::new(SinkShared::default());
        let out = sink_main(
            rx,
            Some(writer),
            Some(live_tx),
            Arc::clone(&shared),
            Some(Gate::new()),
        );
        out.writer.unwrap().finish(T0 + 1_000_000).unwrap();

        assert_eq!(shared.samples_written.load(Ordering::Relaxed), 3);
        assert_eq!(
            *shared.windows.lock().unwrap(),
            WindowLog {
                opened: 1,
                closed: 1,
                closed_ns: 20_000,
                process_windows: 1,
            }
        );
        let events = live_rx.drain(Duration::from_millis(50));
        assert_eq!(sample_starts(&events), vec![(0, T0)], "live sees all ten");

        let t = Trace::open(&path).unwrap();
        let starts: Vec<i64> = t
            .sample_batches()
            .unwrap()
            .iter()
            .flat_map(|b| b.start_ns.clone())
            .collect();
        assert_eq!(starts, vec![T0 + 30_000, T0 + 40_000, T0 + 50_000]);
        let nvml = t.nvml().unwrap();
        assert_eq!(nvml.len(), 1);
        assert_eq!(nvml[0].t_ns, T0 + 45_000);
        let capture = t.capture_events().unwrap();
        let w = capture
            .iter()
            .find(|e| e.is(cufall_capture::CaptureEventKind::Window))
            .expect("the window is in the trace");
        assert_eq!((w.t_ns, w.count), (T0 + 35_000, 20_000));
        assert!(w.detail.contains("process 42"), "{}", w.detail);
    }

    #[test]
    fn the_sink_writes_batches_in_sequence_order_and_tallies_drops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sink.cufall");
        let writer = TraceWriter::create(&path, manifest(), WriterOptions::default()).unwrap();
        let (live_tx, live_rx) = live();
        let (tx, rx) = mpsc::channel();
        // Device 0's second image is evaluated first; device 1 is in order; seq 2 of device 1
        // never comes (its batch is written at the end rather than kept back).
        let send = |m| tx.send(m).unwrap();
        send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 1,
            batch: batch(0, T0 + 50_000, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(1),
            seq: 0,
            batch: batch(1, T0, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 0,
            batch: batch(0, T0, 5, 1),
        });
        send(SinkMsg::Samples {
            device: DeviceId(1),
            seq: 3,
            batch: batch(1, T0 + 150_000, 5, 1),
        });
        send(SinkMsg::Drops(vec![
            DropRecord {
                device: DeviceId(1),
                start_ns: T0 + 50_000,
                end_ns: T0 + 150_000,
                reason: DropReason::CounterDataFull,
                lost_samples: Some(10),
            },
            DropRecord {
                device: DeviceId(0),
                start_ns: T0 - 10_000,
                end_ns: T0,
                reason: DropReason::Warmup,
                lost_samples: Some(1),
            },
        ]));
        send(SinkMsg::Nvml(vec![NvmlRow {
            device: DeviceId(0),
            t_ns: T0,
            gpu_util_pct: Some(50),
            ..NvmlRow::default()
        }]));
        send(SinkMsg::Message("hello".into()));
        drop(tx);
        let shared = Arc::new(SinkShared::default());
        let out = sink_main(rx, Some(writer), Some(live_tx), Arc::clone(&shared), None);
        out.writer.unwrap().finish(T0 + 1_000_000).unwrap();

        assert_eq!(shared.samples_written.load(Ordering::Relaxed), 20);
        assert_eq!(shared.nvml_rows.load(Ordering::Relaxed), 1);
        assert_eq!(
            shared.tally.lock().unwrap().losses(),
            DropCount {
                records: 1,
                lost_samples: 10
            }
        );
        assert_eq!(*shared.messages.lock().unwrap(), vec!["hello".to_string()]);
        assert_eq!(*shared.error.lock().unwrap(), None);

        let events = live_rx.drain(Duration::from_millis(50));
        assert_eq!(
            sample_starts(&events),
            vec![(1, T0), (0, T0), (0, T0 + 50_000)],
            "each device in sequence order; the orphan is not sent live"
        );
        assert!(matches!(events.last(), Some(LiveEvent::End)));

        let t = Trace::open(&path).unwrap();
        let mut starts: Vec<(u32, i64)> = t
            .sample_batches()
            .unwrap()
            .iter()
            .flat_map(|b| b.start_ns.iter().map(move |s| (b.device.0, *s)))
            .collect();
        assert_eq!(
            starts.len(),
            20,
            "the batch after the missing sequence number is kept"
        );
        starts.sort();
        assert_eq!(starts[0], (0, T0));
        assert_eq!(t.drops().unwrap().len(), 2);
        assert_eq!(t.nvml().unwrap().len(), 1);
    }

    #[test]
    fn a_failed_write_is_reported_once_and_the_live_view_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fail.cufall");
        let writer = TraceWriter::create(&path, manifest(), WriterOptions::default()).unwrap();
        let (live_tx, live_rx) = live();
        let (tx, rx) = mpsc::channel();
        // Two columns where the trace has one: the writer refuses the first batch.
        for seq in 0..3 {
            tx.send(SinkMsg::Samples {
                device: DeviceId(0),
                seq,
                batch: batch(0, T0 + seq as i64 * 50_000, 5, 2),
            })
            .unwrap();
        }
        drop(tx);
        let shared = Arc::new(SinkShared::default());
        let out = sink_main(rx, Some(writer), Some(live_tx), Arc::clone(&shared), None);
        assert!(out.writer.is_some());
        let err = shared
            .error
            .lock()
            .unwrap()
            .clone()
            .expect("the failure is reported");
        assert!(err.starts_with("writing the trace failed"), "{err}");
        let events = live_rx.drain(Duration::from_millis(50));
        assert_eq!(
            sample_starts(&events).len(),
            3,
            "the live view got every batch"
        );
    }

    #[test]
    fn a_missing_batch_holds_back_at_most_the_bound_and_is_written_when_it_comes() {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(SinkShared::default());
        let sink = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || sink_main(rx, None, None, shared, None))
        };
        let extra = 10u64;
        for seq in 1..=(MAX_PENDING_BATCHES as u64 + extra) {
            tx.send(SinkMsg::Samples {
                device: DeviceId(0),
                seq,
                batch: batch(0, T0 + seq as i64 * 50_000, 5, 1),
            })
            .unwrap();
        }
        // Device 1 is unaffected by device 0's missing batch.
        tx.send(SinkMsg::Samples {
            device: DeviceId(1),
            seq: 0,
            batch: batch(1, T0, 5, 1),
        })
        .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let want = (MAX_PENDING_BATCHES as u64 + extra) * 5 + 5;
        while shared.samples_written.load(Ordering::Relaxed) < want {
            assert!(
                std::time::Instant::now() < deadline,
                "the sink kept batches back"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let msgs = shared.messages.lock().unwrap().clone();
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert!(
            msgs[0].contains("GPU 0: sample batch 0 is late"),
            "{msgs:?}"
        );
        // The late batch still counts when it comes.
        tx.send(SinkMsg::Samples {
            device: DeviceId(0),
            seq: 0,
            batch: batch(0, T0, 5, 1),
        })
        .unwrap();
        drop(tx);
        sink.join().unwrap();
        assert_eq!(shared.samples_written.load(Ordering::Relaxed), want + 5);
    }
}
