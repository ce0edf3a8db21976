//! A server's workers recorded by window, as `scripts/gpu/servers.sh` runs them on a GPU: several
//! processes, each with its own `cudaProfilerStart`/`Stop` windows at its own moments, each
//! sending NVTX phases all along, and one that opens a window and exits without closing it.
//! Their capture streams are scripted frames on the recorder's socket (as the capture library
//! sends them); the recorder's messages go through the gated sink into a real trace, which is
//! read back.

use super::tests::{socket_of, start_recorder};
use super::*;
use crate::sink::window::Gate;
use crate::sink::{SinkShared, sink_main};
use cufall_capture::Frame;
use cufall_capture::fixtures::{encoded, hello, push_pop};
use cufall_trace::model::{Manifest, MetricInfo, NvtxRange, SampleBatch, SamplingInfo};
use cufall_trace::{Trace, TraceWriter, WriterOptions};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::channel;

const MS: i64 = 1_000_000;
/// Workers that close every window they open, and the one that leaves its window open.
const WORKERS: [u32; 3] = [201, 202, 203];
const LEAKY: u32 = 204;
/// Each worker's windows: three of 400 ms, two seconds apart, worker k's 300 ms after worker
/// k-1's, so that each overlaps the next worker's.
const WINDOWS: usize = 3;
const WINDOW_MS: i64 = 400;
/// A phase (`decode`) every 10 ms, back to back, from 0 to 6 s.
const PHASE_MS: i64 = 10;
const RUN_MS: i64 = 6_000;
/// The leaky worker: phases from 7.0 s to 7.5 s, its window opens at 7.2 s, it exits at 7.6 s.
const LEAKY_OPEN_MS: i64 = 7_200;
const LEAKY_EXIT_MS: i64 = 7_600;

fn window_ms(worker: usize, j: usize) -> (i64, i64) {
    let start = 1_000 + 2_000 * j as i64 + 300 * worker as i64;
    (start, start + WINDOW_MS)
}

fn phase(base: i64, start_ms: i64) -> Frame<'static> {
    push_pop(
        "decode",
        base + start_ms * MS,
        base + (start_ms + PHASE_MS) * MS,
    )
}

fn edge(base: i64, ms: i64, open: bool) -> Frame<'static> {
    Frame::Window {
        t_ns: base + ms * MS,
        open,
    }
}

/// What worker `k` sends, in its own order: its edges at once, its phases as they end.
fn worker_stream(k: usize, base: i64) -> Vec<Frame<'static>> {
    let mut frames = vec![hello(WORKERS[k])];
    let mut t = 0;
    for j in 0..WINDOWS {
        let (open, close) = window_ms(k, j);
        while t + PHASE_MS <= open {
            frames.push(phase(base, t));
            t += PHASE_MS;
        }
        frames.push(edge(base, open, true));
        if j == 1 {
            // A second start while profiling: CUDA ignores it, one stop still ends the window.
            frames.push(edge(base, open + 100, true));
        }
        while t + PHASE_MS <= close {
            frames.push(phase(base, t));
            t += PHASE_MS;
        }
        frames.push(edge(base, close, false));
    }
    while t + PHASE_MS <= RUN_MS {
        frames.push(phase(base, t));
        t += PHASE_MS;
    }
    frames.push(Frame::Bye {
        t_ns: base + RUN_MS * MS,
    });
    frames
}

fn leaky_stream(base: i64) -> Vec<Frame<'static>> {
    let mut frames = vec![hello(LEAKY)];
    for t in (7_000..LEAKY_OPEN_MS).step_by(10) {
        frames.push(phase(base, t));
    }
    frames.push(edge(base, LEAKY_OPEN_MS, true));
    for t in (LEAKY_OPEN_MS..7_500).step_by(10) {
        frames.push(phase(base, t));
    }
    frames.push(Frame::Bye {
        t_ns: base + LEAKY_EXIT_MS * MS,
    });
    frames
}

/// The workers' streams sent at once, each on its own connection; the recorder's messages.
fn record_workers(base: i64) -> (Vec<SinkMsg>, CaptureSummary) {
    let (tx, rx) = channel();
    let rec = start_recorder(Some(RangeTrigger::ProfilerApi), tx);
    let socket = socket_of(&rec);
    let mut streams: Vec<Vec<Frame<'static>>> =
        (0..WORKERS.len()).map(|k| worker_stream(k, base)).collect();
    streams.push(leaky_stream(base));
    let senders: Vec<_> = streams
        .into_iter()
        .map(|frames| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = UnixStream::connect(socket).expect("connects");
                c.write_all(&encoded(frames)).expect("sends");
            })
        })
        .collect();
    for s in senders {
        s.join().expect("a sender thread");
    }
    rec.wait_for_processes(Duration::from_secs(5));
    let summary = rec.finish();
    (rx.try_iter().collect(), summary)
}

/// Counter samples of 1 ms from 0 to 9 s, then the recorder's messages, through the gated
/// sink into a trace at `path`.
fn write_trace(path: &Path, base: i64, msgs: Vec<SinkMsg>) {
    let mut m = Manifest::new("test", base);
    m.sampling = Some(SamplingInfo {
        interval_ns: MS,
        metrics: vec![MetricInfo {
            name: "m.avg".into(),
            unit: "%".into(),
            description: String::new(),
        }],
        source: "test".into(),
    });
    let writer = TraceWriter::create(path, m, WriterOptions::default()).expect("a trace");
    let mut batch = SampleBatch::new(DeviceId(0), 1);
    for i in 0..9_000 {
        batch.push(base + i * MS, base + (i + 1) * MS, &[1.0]);
    }
    let (tx, rx) = channel();
    tx.send(SinkMsg::Samples {
        device: DeviceId(0),
        seq: 0,
        batch,
    })
    .expect("sends");
    for m in msgs {
        tx.send(m).expect("sends");
    }
    drop(tx);
    let out = sink_main(
        rx,
        Some(writer),
        None,
        Arc::new(SinkShared::default()),
        Some(Gate::new()),
    );
    out.writer
        .expect("the writer")
        .finish(base + 10_000 * MS)
        .expect("the trace closes");
}

/// (pid, start, end) of the rows of `event`, in ms from `base`, sorted.
fn rows_ms(events: &[CaptureEvent], kind: CaptureEventKind, base: i64) -> Vec<(u32, i64, i64)> {
    let mut v: Vec<(u32, i64, i64)> = events
        .iter()
        .filter(|e| e.is(kind))
        .map(|e| {
            let start = (e.t_ns - base) / MS;
            (e.pid, start, start + i64::try_from(e.count).unwrap() / MS)
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn every_workers_windows_and_phases_reach_one_trace() {
    // The leaky worker's window is closed at its goodbye; times are real so that nothing the
    // recorder stamps with its own clock (rows at the exit) falls before them.
    let base = crate::now_unix_ns() - 20_000 * MS;
    let (msgs, summary) = record_workers(base);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.cufall");
    write_trace(&path, base, msgs);
    let t = Trace::open(&path).unwrap();
    let events = t.capture_events().unwrap();

    // Each process's own windows, with the one a second start did not lengthen.
    let mut expected: Vec<(u32, i64, i64)> = (0..WORKERS.len())
        .flat_map(|k| (0..WINDOWS).map(move |j| (WORKERS[k], window_ms(k, j).0, window_ms(k, j).1)))
        .collect();
    expected.push((LEAKY, LEAKY_OPEN_MS, LEAKY_EXIT_MS));
    expected.sort_unstable();
    assert_eq!(
        rows_ms(&events, CaptureEventKind::ProcessWindow, base),
        expected
    );
    // The trace keeps their union: one window per round of the three workers, and the leaky
    // worker's until its exit.
    let unions = rows_ms(&events, CaptureEventKind::Window, base);
    assert_eq!(
        unions,
        [
            (0, 1_000, 2_000),
            (0, 3_000, 4_000),
            (0, 5_000, 6_000),
            (0, 7_200, 7_600)
        ]
    );
    let leaky_row = events
        .iter()
        .find(|e| e.is(CaptureEventKind::ProcessWindow) && e.pid == LEAKY)
        .unwrap();
    assert!(
        leaky_row
            .detail
            .ends_with("closed by the exit of process 204"),
        "{}",
        leaky_row.detail
    );

    // The window left open is a problem naming its process, in the trace and the summary.
    let open_at_exit: Vec<&CaptureEvent> = events
        .iter()
        .filter(|e| e.is(CaptureEventKind::WindowOpenAtExit))
        .collect();
    assert_eq!(open_at_exit.len(), 1, "{events:?}");
    assert_eq!(open_at_exit[0].pid, LEAKY);
    assert!(
        open_at_exit[0]
            .detail
            .starts_with("process 204 exited with its capture window open")
    );
    assert!(
        summary
            .problems
            .iter()
            .any(|p| p.contains("process 204") && p.contains("window_open_at_exit")),
        "{:?}",
        summary.problems
    );
    phases_are_those_inside_the_union(&t.nvtx().unwrap(), base, &unions);
    let samples: usize = t
        .sample_batches()
        .unwrap()
        .iter()
        .map(SampleBatch::len)
        .sum();
    // Samples overlapping each union window, its edge samples included (1 ms each).
    assert_eq!(samples, 3 * 1_001 + 401);
}

/// Every phase of every process that overlaps a union window is in the trace, and no other:
/// a worker's phases inside another worker's window are kept too (the counters of that time
/// are, and they are device-wide).
fn phases_are_those_inside_the_union(nvtx: &[NvtxRange], base: i64, unions: &[(u32, i64, i64)]) {
    let inside = |s: i64, e: i64| unions.iter().any(|(_, ws, we)| e >= *ws && s < *we);
    let mut want: Vec<(u32, i64)> = Vec::new();
    for pid in WORKERS {
        for t in (0..RUN_MS).step_by(10) {
            if inside(t, t + PHASE_MS) {
                want.push((pid, t));
            }
        }
    }
    for t in (7_000..7_500).step_by(10) {
        if inside(t, t + PHASE_MS) {
            want.push((LEAKY, t));
        }
    }
    let mut got: Vec<(u32, i64)> = nvtx
        .iter()
        .map(|r| {
            assert_eq!(r.name, "decode");
            (r.pid, (r.start_ns - base) / MS)
        })
        .collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    // Each worker has phases inside each of its own windows.
    for (k, pid) in WORKERS.iter().enumerate() {
        for j in 0..WINDOWS {
            let (ws, we) = window_ms(k, j);
            let n = got
                .iter()
                .filter(|(p, t)| p == pid && *t >= ws && *t < we)
                .count();
            assert_eq!(n, 40, "worker {pid}, window {j}");
        }
    }
}
