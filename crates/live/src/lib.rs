//! The feed between a producer of GPU data (the sampler, or a trace being replayed) and a live
//! view.
//!
//! The producer must never wait for the view: a recording is lossless, the view is best effort.
//! [`LiveSender::send`] therefore never blocks; when the view falls more than `capacity` events
//! behind, further events are discarded *for the view only* and counted, and the view shows that
//! count. The trace on disk is written by the sampler independently and loses nothing.
//!
//! Memory is bounded by `capacity` events; each event is one batch (typically a few milliseconds
//! of samples of one device), so the bound is a few seconds of data.
#![forbid(unsafe_code)]
// Truncating casts on the data path (tests aside) are errors in CI: convert with `try_from`, or
// say why not.
#![cfg_attr(not(test), warn(clippy::cast_possible_truncation))]

use cufall_model::{
    DeviceInfo, DropRecord, HeatmapSpec, KernelRecord, MetricInfo, Nanos, NvmlRow, NvtxRange,
    SampleBatch,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What a live view needs to know before the first sample arrives.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedInfo {
    pub devices: Vec<DeviceInfo>,
    /// Metrics of every [`SampleBatch`], in column order; empty when counters are unavailable.
    pub metrics: Vec<MetricInfo>,
    pub heatmaps: Vec<HeatmapSpec>,
    /// The sampling interval.
    pub interval_ns: Nanos,
    /// How often NVML is read (0 when unknown or not read).
    pub nvml_interval_ns: Nanos,
    /// Why GPU counters are missing, if they are (the view shows this as a banner).
    pub counters_unavailable: Option<String>,
}

/// One unit of data for the view.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveEvent {
    Samples(SampleBatch),
    Drop(DropRecord),
    Nvml(Vec<NvmlRow>),
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    /// A line of status for the user (e.g. "target exited with code 0").
    Message(String),
    /// The producer is done; no more events follow.
    End,
}

struct Shared {
    queue: Mutex<VecDeque<LiveEvent>>,
    ready: Condvar,
    capacity: usize,
    discarded: AtomicU64,
    closed: AtomicBool,
}

/// Producer side; cheap to clone, one per producing thread.
#[derive(Clone)]
pub struct LiveSender {
    shared: Arc<Shared>,
}

/// Consumer side, owned by the view.
pub struct LiveReceiver {
    shared: Arc<Shared>,
    pub info: FeedInfo,
}

/// A feed holding at most `capacity` undelivered events.
pub fn feed(info: FeedInfo, capacity: usize) -> (LiveSender, LiveReceiver) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        capacity: capacity.max(1),
        discarded: AtomicU64::new(0),
        closed: AtomicBool::new(false),
    });
    (
        LiveSender {
            shared: Arc::clone(&shared),
        },
        LiveReceiver { shared, info },
    )
}

impl LiveSender {
    /// Queues `event` for the view without ever blocking. Returns `false` when the view is
    /// too far behind (or gone) and the event was discarded.
    pub fn send(&self, event: LiveEvent) -> bool {
        if self.shared.closed.load(Ordering::Relaxed) {
            return false;
        }
        let Ok(mut queue) = self.shared.queue.lock() else {
            return false;
        };
        // `End` always gets through so the view learns that the producer finished.
        if queue.len() >= self.shared.capacity && event != LiveEvent::End {
            self.shared.discarded.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        queue.push_back(event);
        drop(queue);
        self.shared.ready.notify_one();
        true
    }

    /// Whether the view has hung up (it was closed by the user).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Relaxed)
    }
}

impl LiveReceiver {
    /// Takes every queued event, waiting at most `timeout` for the first one.
    pub fn drain(&self, timeout: Duration) -> Vec<LiveEvent> {
        let Ok(mut queue) = self.shared.queue.lock() else {
            return Vec::new();
        };
        if queue.is_empty() && !timeout.is_zero() {
            match self.shared.ready.wait_timeout(queue, timeout) {
                Ok((q, _)) => queue = q,
                Err(_) => return Vec::new(),
            }
        }
        queue.drain(..).collect()
    }

    /// Events discarded so far because the view fell behind.
    pub fn discarded(&self) -> u64 {
        self.shared.discarded.load(Ordering::Relaxed)
    }

    /// Tells producers that nobody is watching any more.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Relaxed);
    }
}

impl Drop for LiveReceiver {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_model::DeviceId;

    fn info() -> FeedInfo {
        FeedInfo {
            devices: Vec::new(),
            metrics: Vec::new(),
            heatmaps: Vec::new(),
            interval_ns: Nanos(10_000),
            nvml_interval_ns: Nanos(10_000_000),
            counters_unavailable: None,
        }
    }

    #[test]
    fn delivers_in_order_and_counts_discards() {
        let (tx, rx) = feed(info(), 2);
        assert!(tx.send(LiveEvent::Message("a".into())));
        assert!(tx.send(LiveEvent::Samples(SampleBatch::new(DeviceId(1), 1))));
        assert!(!tx.send(LiveEvent::Message("lost".into())));
        assert!(tx.send(LiveEvent::End), "End is never discarded");
        let got = rx.drain(Duration::ZERO);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], LiveEvent::Message("a".into()));
        assert_eq!(got[2], LiveEvent::End);
        assert_eq!(rx.discarded(), 1);
    }

    #[test]
    fn closing_the_view_stops_producers() {
        let (tx, rx) = feed(info(), 8);
        drop(rx);
        assert!(tx.is_closed());
        assert!(!tx.send(LiveEvent::Message("nobody".into())));
    }

    #[test]
    fn drain_waits_for_a_producer_on_another_thread() {
        let (tx, rx) = feed(info(), 8);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(LiveEvent::End)
        });
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(rx.drain(Duration::from_millis(50)));
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got, vec![LiveEvent::End]);
        assert!(t.join().unwrap_or(false));
    }
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-live (lib.rs)", &src.join("lib.rs"));
    }
}
