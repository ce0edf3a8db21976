//! A running session ([`SessionHandle`]): started from a [`Prepared`] one, its status while it
//! runs, its pause and capture windows, and what it did when stopped ([`SessionOutcome`]).

use super::arm::Prepared;
use super::error::SessionError;
use crate::pipeline::{self, DeviceCounters, pause};
use crate::sink::{DropCount, DropTally, SinkMsg, SinkShared};
use cufall_live::LiveSender;
use cufall_trace::TraceWriter;
use cufall_trace::model::DeviceId;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Instant;

impl Prepared {
    /// Starts sampling. Data goes to `writer` (a trace) and/or `live` (a view).
    pub fn start(
        self,
        live: Option<LiveSender>,
        writer: Option<TraceWriter>,
    ) -> Result<SessionHandle, SessionError> {
        let shared = Arc::new(SinkShared::default());
        let cpu0 = crate::os::cpu_seconds();
        let started = Instant::now();
        let first_only = self.first_window_only;
        let gate = self
            .windowed
            .then(|| crate::sink::window::Gate::new().first_only(first_only));
        let window_tx = self.windowed.then(|| self.tx.clone());
        let sink = {
            let shared = Arc::clone(&shared);
            let rx = self.rx;
            std::thread::Builder::new()
                .name("cufall-sink".into())
                .spawn(move || crate::sink::sink_main(rx, writer, live, shared, gate))
                .map_err(|source| SessionError::WriterThread { source })?
        };
        let mut devices = Vec::new();
        let mut counters = Vec::new();
        for d in self.threads {
            let started_ns = crate::now_unix_ns();
            let _ = d.thread.go.send(true);
            devices.push(pause::Device {
                id: d.id,
                stop: d.stop,
                running: pause::Running {
                    handle: d.thread.handle,
                    started_ns,
                },
                starter: Box::new(d.rearm),
            });
            counters.push((d.id, d.counters));
        }
        let sharing = if devices.is_empty() {
            pause::CounterSharing::none(
                self.counters_unavailable
                    .clone()
                    .unwrap_or_else(|| "this session samples no GPU counters".into()),
            )
        } else {
            let p = pause::Pausable::new(devices, self.tx.clone())
                .map_err(|source| SessionError::WriterThread { source })?;
            pause::CounterSharing::new(p)
        };
        let nvml_stop = Arc::new(AtomicBool::new(false));
        let nvml_thread = match (self.nvml, self.nvml_interval) {
            (Some(src), Some(interval)) => {
                let tx = self.tx.clone();
                let stop = Arc::clone(&nvml_stop);
                std::thread::Builder::new()
                    .name("cufall-nvml".into())
                    .spawn(move || {
                        src.poll(interval, stop, |rows| {
                            let _ = tx.send(SinkMsg::Nvml(rows));
                        })
                    })
                    .ok()
            }
            _ => None,
        };
        if let Some(reason) = &self.counters_unavailable {
            let _ = self
                .tx
                .send(SinkMsg::Message(format!("no GPU counters: {reason}")));
        }
        drop(self.tx);
        Ok(SessionHandle {
            nvml_stop,
            sharing,
            counters,
            nvml_thread,
            sink: Some(sink),
            shared,
            started,
            cpu0,
            window_tx,
        })
    }
}

/// A running session.
pub struct SessionHandle {
    nvml_stop: Arc<AtomicBool>,
    /// The devices' pipelines, pausable ([`SessionHandle::sharing`]).
    sharing: pause::CounterSharing,
    counters: Vec<(DeviceId, Arc<DeviceCounters>)>,
    nvml_thread: Option<JoinHandle<()>>,
    sink: Option<JoinHandle<crate::sink::SinkResult>>,
    shared: Arc<SinkShared>,
    started: Instant,
    cpu0: f64,
    /// Where cufall's own window edges go (delay, signal); dropped at stop so the sink ends.
    window_tx: Option<Sender<SinkMsg>>,
}

/// Per-device pipeline figures at the end of a run.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub samples_decoded: u64,
    pub samples_evaluated: u64,
    pub images_sealed: u64,
    pub images_allocated: u64,
    pub image_bytes: u64,
    pub counter_data_full: u64,
    pub hw_overflows: u64,
    pub restarts: u64,
    pub decode_errors: u64,
    pub eval_errors: u64,
    pub partial_at_seal: u64,
    pub max_seam_ns: u64,
    pub decode_calls: u64,
    pub decode_cpu_s: f64,
    pub eval_cpu_s: f64,
    pub eval_us_per_sample: f64,
    pub reset_cpu_s: f64,
    /// Average bytes restored per used image.
    pub reset_bytes_per_image: u64,
    /// Used images were restored by their written prefix (false: whole images).
    pub reset_by_prefix: bool,
    pub max_decode_call_ms: f64,
    pub max_decode_gap_ms: f64,
    pub max_samples_per_decode: u64,
    pub late_decodes: u64,
    pub bytes_per_sample: u64,
    pub samples_per_image: u64,
    /// Evaluator threads started.
    pub evaluators: u64,
    /// Chunks whose evaluation panicked, and the samples recorded as `evaluation_failed`.
    pub eval_panics: u64,
    pub eval_failed_samples: u64,
    /// Decode-thread CPU spent reading timestamps and finding holes.
    pub seal_cpu_s: f64,
    /// Decode cost by how many samples a call moved.
    pub decode_by_call_size: Vec<CallSizeReport>,
}

/// Decode calls that moved up to `up_to_samples` samples (and more than the bin before).
#[derive(Clone, Debug, Serialize)]
pub struct CallSizeReport {
    pub up_to_samples: u64,
    pub calls: u64,
    pub samples: u64,
    pub us_per_sample: f64,
    pub ms_per_call: f64,
}

impl DeviceReport {
    /// The figures of one device's pipeline counters.
    pub fn from_counters(id: DeviceId, c: &DeviceCounters) -> DeviceReport {
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let evaluated = g(&c.samples_evaluated);
        let eval_ns = g(&c.eval_ns);
        let decode_by_call_size = pipeline::CALL_SIZE_BINS
            .iter()
            .enumerate()
            .filter(|(i, _)| g(&c.calls_by_size[*i]) > 0)
            .map(|(i, &up_to)| {
                let (calls, samples, ns) = (
                    g(&c.calls_by_size[i]),
                    g(&c.samples_by_size[i]),
                    g(&c.decode_ns_by_size[i]),
                );
                CallSizeReport {
                    up_to_samples: up_to,
                    calls,
                    samples,
                    us_per_sample: ns as f64 / samples.max(1) as f64 / 1e3,
                    ms_per_call: ns as f64 / calls.max(1) as f64 / 1e6,
                }
            })
            .collect();
        DeviceReport {
            device: id.0,
            samples_decoded: g(&c.samples_decoded),
            samples_evaluated: evaluated,
            images_sealed: g(&c.images_sealed),
            images_allocated: g(&c.images_allocated),
            image_bytes: g(&c.image_bytes),
            counter_data_full: g(&c.counter_data_full),
            hw_overflows: g(&c.hw_overflows),
            restarts: g(&c.restarts),
            decode_errors: g(&c.decode_errors),
            eval_errors: g(&c.eval_errors),
            partial_at_seal: g(&c.partial_at_seal),
            max_seam_ns: g(&c.max_seam_ns),
            decode_calls: g(&c.decode_calls),
            decode_cpu_s: g(&c.decode_ns) as f64 * 1e-9,
            eval_cpu_s: eval_ns as f64 * 1e-9,
            reset_cpu_s: g(&c.reset_ns) as f64 * 1e-9,
            reset_bytes_per_image: g(&c.reset_bytes) / g(&c.images_restored).max(1),
            reset_by_prefix: g(&c.reset_by_prefix) == 1,
            max_decode_call_ms: g(&c.max_decode_call_ns) as f64 * 1e-6,
            max_decode_gap_ms: g(&c.max_decode_gap_ns) as f64 * 1e-6,
            max_samples_per_decode: g(&c.max_samples_per_decode),
            late_decodes: g(&c.late_decodes),
            bytes_per_sample: g(&c.bytes_per_sample),
            samples_per_image: g(&c.samples_per_image),
            eval_us_per_sample: if evaluated > 0 {
                eval_ns as f64 / evaluated as f64 / 1e3
            } else {
                0.0
            },
            evaluators: g(&c.evaluators),
            eval_panics: g(&c.eval_panics),
            eval_failed_samples: g(&c.eval_failed_samples),
            seal_cpu_s: g(&c.seal_ns) as f64 * 1e-9,
            decode_by_call_size,
        }
    }
}

/// What a run did, for the user and for benchmarks.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSummary {
    pub wall_s: f64,
    pub cpu_s: f64,
    /// Peak resident memory of the process, MiB.
    pub peak_rss_mib: f64,
    pub samples_written: u64,
    pub nvml_rows: u64,
    /// Drop records and estimated lost samples, by reason.
    pub drops: BTreeMap<String, DropCount>,
    pub loss_records: u64,
    pub lost_samples: u64,
    pub devices: Vec<DeviceReport>,
    pub messages: Vec<String>,
    pub errors: Vec<String>,
}

pub struct SessionOutcome {
    /// The trace writer handed to `start`, still open: the caller finishes it.
    pub writer: Option<TraceWriter>,
    pub summary: RunSummary,
    /// Capture windows, once the sink has taken every edge.
    pub windows: crate::sink::window::WindowLog,
}

/// A snapshot while running.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub samples_written: u64,
    pub loss_records: u64,
    pub lost_samples: u64,
    pub error: Option<String>,
}

impl SessionHandle {
    pub fn status(&self) -> Status {
        let DropCount {
            records: loss_records,
            lost_samples,
        } = self
            .shared
            .tally
            .lock()
            .map(|t| t.losses())
            .unwrap_or_default();
        Status {
            samples_written: self.shared.samples_written.load(Ordering::Relaxed),
            loss_records,
            lost_samples,
            error: self.error(),
        }
    }

    /// A failure that ended sampling early (a device thread or the writer), if any.
    pub fn error(&self) -> Option<String> {
        if let Ok(e) = self.shared.error.lock()
            && let Some(e) = e.as_ref()
        {
            return Some(e.clone());
        }
        for (id, c) in &self.counters {
            // After a pause the pause control says which failures end a device: a start
            // refused because the counters were taken again is retried.
            if self.sharing.resumed(*id) {
                continue;
            }
            if let Ok(e) = c.error.lock()
                && let Some(e) = e.as_ref()
            {
                return Some(format!("{id}: {e}"));
            }
        }
        if let Some(e) = self.sharing.error() {
            return Some(e);
        }
        self.sharing
            .ended_early()
            .then(|| "a device's sampling thread ended early".to_string())
    }

    /// Pausing and resuming this session's GPU counters (`cufall control pause`).
    pub fn sharing(&self) -> pause::CounterSharing {
        self.sharing.clone()
    }

    /// Opens or closes a capture window (a recording limited to windows).
    pub fn window_edge(&self, edge: crate::sink::window::Edge) {
        if let Some(tx) = &self.window_tx {
            let _ = tx.send(SinkMsg::Window(edge));
        }
    }

    /// Capture windows opened and closed so far.
    pub fn windows(&self) -> crate::sink::window::WindowLog {
        self.shared.windows.lock().map(|l| *l).unwrap_or_default()
    }

    /// Stops sampling, drains every image, waits for the writer; returns the writer unfinished.
    pub fn stop(mut self) -> SessionOutcome {
        self.window_tx = None;
        let mut errors = self.sharing.stop();
        self.nvml_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.nvml_thread.take() {
            let _ = h.join();
        }
        let writer = match self.sink.take().map(|h| h.join()) {
            Some(Ok(r)) => r.writer,
            Some(Err(_)) => {
                errors.push("the writer thread panicked".into());
                None
            }
            None => None,
        };
        if let Ok(e) = self.shared.error.lock()
            && let Some(e) = e.as_ref()
        {
            errors.push(e.clone());
        }
        let tally: DropTally = self
            .shared
            .tally
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        let DropCount {
            records: loss_records,
            lost_samples,
        } = tally.losses();
        let devices = self
            .counters
            .iter()
            .map(|(id, c)| DeviceReport::from_counters(*id, c))
            .collect();
        let summary = RunSummary {
            wall_s: self.started.elapsed().as_secs_f64(),
            cpu_s: crate::os::cpu_seconds() - self.cpu0,
            peak_rss_mib: crate::os::peak_rss_bytes() as f64 / (1 << 20) as f64,
            samples_written: self.shared.samples_written.load(Ordering::Relaxed),
            nvml_rows: self.shared.nvml_rows.load(Ordering::Relaxed),
            drops: tally
                .by_reason
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            loss_records,
            lost_samples,
            devices,
            messages: self
                .shared
                .messages
                .lock()
                .map(|m| m.clone())
                .unwrap_or_default(),
            errors,
        };
        let windows = self.shared.windows.lock().map(|l| *l).unwrap_or_default();
        SessionOutcome {
            writer,
            summary,
            windows,
        }
    }
}
