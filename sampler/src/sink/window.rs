//! Capture windows: a recording limited to the windows the program or the user opens
//! (`--capture-range`, `--delay`, a signal from `cufall control`) keeps only what falls inside
//! them.
//!
//! Window edges arrive late and out of order against the data: a program's `cudaProfilerStart`
//! reaches the recorder a few milliseconds after it happened, while counter samples of that
//! instant may already be at the sink. So the [`Gate`] holds every row it is given for
//! [`HOLD`] (far longer than an edge takes to arrive), then keeps what overlaps a window and
//! forgets the rest. Memory is bounded by what arrives in [`HOLD`].
//!
//! Several sources may hold a window open at once (two processes of a server both between
//! `cudaProfilerStart` and `Stop`): the window is open while any of them holds it, so the
//! windows are the union of the sources' intervals. The counters are device-wide, so every
//! process's records inside that union are kept, whichever process opened it (a sample is
//! never kept without the kernels that ran in it); each process's own windows are written
//! too, as `process_window` rows.
//!
//! Edges of different processes reach the gate in any order (each process's own edges come
//! in order): a process's open may arrive after another's close of a later instant. So the
//! gate keeps each source's intervals and makes their union when it is asked, and a union
//! window's row is written only once the last of its intervals has been closed for [`HOLD`]
//! (no late edge can change it then), or at the end of the recording.

use cufall_capture::CaptureEventKind;
use cufall_trace::model::{
    ApiCall, CaptureEvent, DropRecord, HostSample, KernelRecord, NvmlRow, NvtxRange, SampleBatch,
};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long rows wait at the gate for the edges of their time to arrive.
pub const HOLD: Duration = Duration::from_secs(1);

/// Rows on their way to the trace.
#[derive(Clone, Debug)]
pub enum Rows {
    Samples(SampleBatch),
    Drops(Vec<DropRecord>),
    Nvml(Vec<NvmlRow>),
    Nvtx(Vec<NvtxRange>),
    Kernels(Vec<KernelRecord>),
    Api(Vec<ApiCall>),
    HostSamples(Vec<HostSample>),
}

/// One edge of a window, from one source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub t_ns: i64,
    pub open: bool,
    /// Who moved it: a process id of the program, or 0 for cufall itself (delay, signal).
    pub source: u32,
    /// What moved it, for the trace (`cudaProfilerStart in process 42`).
    pub why: String,
}

/// One source's window: from its first open to its last close.
#[derive(Clone, Debug)]
struct Span {
    id: u64,
    source: u32,
    start_ns: i64,
    end_ns: Option<i64>,
    opened_by: String,
    closed_by: Option<String>,
    /// When its close reached the gate.
    closed_at: Option<Instant>,
}

impl Span {
    fn overlaps(&self, start_ns: i64, end_ns: i64) -> bool {
        overlaps(self.start_ns, self.end_ns, start_ns, end_ns)
    }
}

fn overlaps(w_start: i64, w_end: Option<i64>, start_ns: i64, end_ns: i64) -> bool {
    end_ns >= w_start && w_end.is_none_or(|e| start_ns < e)
}

/// A window of the union: spans that overlap, merged.
#[derive(Clone, Debug)]
struct Union {
    start_ns: i64,
    end_ns: Option<i64>,
    opened_by: String,
    closed_by: Option<String>,
    /// The latest close among its spans reached the gate then (None while one is open).
    settled_from: Option<Instant>,
    spans: Vec<u64>,
}

impl Union {
    fn event(&self) -> CaptureEvent {
        window_row(
            0,
            CaptureEventKind::Window,
            self.start_ns,
            self.end_ns.unwrap_or(self.start_ns),
            &self.opened_by,
            self.closed_by.as_deref(),
        )
    }
}

fn window_row(
    pid: u32,
    kind: CaptureEventKind,
    start_ns: i64,
    end_ns: i64,
    opened_by: &str,
    closed_by: Option<&str>,
) -> CaptureEvent {
    CaptureEvent {
        t_ns: start_ns,
        pid,
        event: kind.into(),
        count: u64::try_from(end_ns.saturating_sub(start_ns)).unwrap_or(0),
        detail: format!(
            "opened by {opened_by}, closed by {}",
            closed_by.unwrap_or("the end of the recording")
        ),
    }
}

/// A source's open window: how deep (nested NVTX ranges of the trigger's name) and its span.
#[derive(Clone, Copy, Debug)]
struct Holder {
    depth: u32,
    span: u64,
}

/// Windows so far, for the record loop and the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowLog {
    /// Windows of the union opened so far.
    pub opened: u64,
    pub closed: u64,
    /// Length of the closed windows.
    pub closed_ns: i64,
    /// Windows of single processes (`process_window` rows), closed so far.
    pub process_windows: u64,
}

/// Holds rows until their windows are known; see the module docs.
#[derive(Debug, Default)]
pub struct Gate {
    queue: VecDeque<(Instant, Rows)>,
    /// Sources holding a window open (none with depth 0).
    holders: HashMap<u32, Holder>,
    /// Spans of union windows not written yet.
    spans: Vec<Span>,
    next_span: u64,
    /// Union windows written to the trace (start, end): no edge changes them any more.
    written: Vec<(i64, i64)>,
    written_ns: i64,
    log: WindowLog,
    /// Keep the first window only (the trace closes when it ends).
    first_only: bool,
}

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// With `yes`, opens after the end of the first window are not kept: the recording ends
    /// with it (`--capture-range-end stop`), and a window that opens while its last records
    /// arrive is no part of it.
    pub fn first_only(mut self, yes: bool) -> Gate {
        self.first_only = yes;
        self
    }

    pub fn log(&self) -> WindowLog {
        self.log
    }

    /// The end of the first window, once it has closed.
    fn first_end(&self) -> Option<i64> {
        match self.written.first() {
            Some((_, end)) => Some(*end),
            None => self.unions().first().and_then(|u| u.end_ns),
        }
    }

    /// Applies an edge that reached the gate at `now`; returns the row it finished: the
    /// source's own window when this edge closed it (a process's, not cufall's).
    pub fn edge(&mut self, now: Instant, e: Edge) -> Vec<CaptureEvent> {
        let mut rows = Vec::new();
        if e.open
            && !self.holders.contains_key(&e.source)
            && self.first_only
            && self.first_end().is_some_and(|end| e.t_ns > end)
        {
            // After the first window: not kept, nor is its close (it has no holder).
            return rows;
        }
        if e.open {
            if let Some(h) = self.holders.get_mut(&e.source) {
                h.depth += 1;
                let id = h.span;
                if let Some(s) = self.spans.iter_mut().find(|s| s.id == id) {
                    s.start_ns = s.start_ns.min(e.t_ns);
                }
            } else {
                let id = self.next_span;
                self.next_span += 1;
                self.spans.push(Span {
                    id,
                    source: e.source,
                    start_ns: e.t_ns,
                    end_ns: None,
                    opened_by: e.why,
                    closed_by: None,
                    closed_at: None,
                });
                self.holders.insert(e.source, Holder { depth: 1, span: id });
            }
        } else {
            // A stop without a start (or a second stop): nothing to close.
            let Some(h) = self.holders.get_mut(&e.source) else {
                return rows;
            };
            h.depth = h.depth.saturating_sub(1);
            if h.depth == 0 {
                let id = h.span;
                self.holders.remove(&e.source);
                if let Some(row) = self.close_span(id, now, e.t_ns, e.why) {
                    rows.push(row);
                }
            }
        }
        self.update_log();
        rows
    }

    /// Closes a span; its process's row (none for cufall's own windows).
    fn close_span(
        &mut self,
        id: u64,
        now: Instant,
        t_ns: i64,
        why: String,
    ) -> Option<CaptureEvent> {
        let s = self.spans.iter_mut().find(|s| s.id == id)?;
        // Edges may disagree by a few microseconds: never end before the start.
        let end = t_ns.max(s.start_ns);
        s.end_ns = Some(end);
        s.closed_at = Some(now);
        let row = (s.source != 0).then(|| {
            window_row(
                s.source,
                CaptureEventKind::ProcessWindow,
                s.start_ns,
                end,
                &s.opened_by,
                Some(&why),
            )
        });
        s.closed_by = Some(why);
        if row.is_some() {
            self.log.process_windows += 1;
        }
        row
    }

    /// The union of the spans not written yet, in time order.
    fn unions(&self) -> Vec<Union> {
        let mut spans: Vec<&Span> = self.spans.iter().collect();
        spans.sort_by_key(|s| s.start_ns);
        let mut out: Vec<Union> = Vec::new();
        let mut latest_end: Option<i64> = None;
        for s in spans {
            match out.last_mut() {
                Some(u) if u.end_ns.is_none_or(|e| s.start_ns <= e) => {
                    u.end_ns = match (u.end_ns, s.end_ns) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                    if s.end_ns.is_some() && s.end_ns >= latest_end {
                        latest_end = s.end_ns;
                        u.closed_by.clone_from(&s.closed_by);
                    }
                    u.settled_from = match (u.settled_from, s.closed_at) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                    u.spans.push(s.id);
                }
                _ => {
                    latest_end = s.end_ns;
                    out.push(Union {
                        start_ns: s.start_ns,
                        end_ns: s.end_ns,
                        opened_by: s.opened_by.clone(),
                        closed_by: s.closed_by.clone(),
                        settled_from: s.closed_at,
                        spans: vec![s.id],
                    });
                }
            }
        }
        out
    }

    fn update_log(&mut self) {
        let unions = self.unions();
        let closed: Vec<&Union> = unions.iter().filter(|u| u.end_ns.is_some()).collect();
        let n_written = self.written.len() as u64;
        self.log.opened = n_written + unions.len() as u64;
        self.log.closed = n_written + closed.len() as u64;
        self.log.closed_ns = self.written_ns
            + closed
                .iter()
                .map(|u| u.end_ns.unwrap_or(u.start_ns) - u.start_ns)
                .sum::<i64>();
    }

    /// Rows of the union windows whose last span closed [`HOLD`] before `now`: no late edge
    /// can change them.
    pub fn settled(&mut self, now: Instant) -> Vec<CaptureEvent> {
        let done: Vec<Union> = self
            .unions()
            .into_iter()
            .filter(|u| {
                u.end_ns.is_some()
                    && u.settled_from
                        .is_some_and(|t| now.saturating_duration_since(t) >= HOLD)
            })
            .collect();
        self.write(done)
    }

    fn write(&mut self, unions: Vec<Union>) -> Vec<CaptureEvent> {
        let mut rows = Vec::new();
        for u in unions {
            let end = u.end_ns.unwrap_or(u.start_ns);
            self.spans.retain(|s| !u.spans.contains(&s.id));
            self.written.push((u.start_ns, end));
            self.written_ns += end - u.start_ns;
            rows.push(u.event());
        }
        if !rows.is_empty() {
            self.update_log();
        }
        rows
    }

    /// Closes every window still open at the end of the recording (each process's too);
    /// forgets every holder; returns every row not yet written.
    pub fn close_all(&mut self, t_ns: i64, why: &str) -> Vec<CaptureEvent> {
        let now = Instant::now();
        let mut open: Vec<(u32, Holder)> = self.holders.drain().collect();
        open.sort_by_key(|(source, _)| *source);
        let mut rows: Vec<CaptureEvent> = open
            .into_iter()
            .filter_map(|(_, h)| self.close_span(h.span, now, t_ns, why.to_string()))
            .collect();
        let unions = self.unions();
        rows.extend(self.write(unions));
        self.update_log();
        rows
    }

    /// The union's windows, written or not (the open one without an end).
    fn windows(&self) -> Vec<(i64, Option<i64>)> {
        let mut w: Vec<(i64, Option<i64>)> =
            self.written.iter().map(|(s, e)| (*s, Some(*e))).collect();
        w.extend(self.unions().iter().map(|u| (u.start_ns, u.end_ns)));
        w
    }

    pub fn hold(&mut self, now: Instant, rows: Rows) {
        self.queue.push_back((now, rows));
    }

    /// The rows that have waited [`HOLD`] by `now`, cut to the windows.
    pub fn release(&mut self, now: Instant) -> Vec<Rows> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.queue.front() {
            if now.saturating_duration_since(*t) < HOLD {
                break;
            }
            if let Some((_, rows)) = self.queue.pop_front()
                && let Some(kept) = self.cut(rows)
            {
                out.push(kept);
            }
        }
        out
    }

    /// Every row still held, cut to the windows (at the end of the recording).
    pub fn drain(&mut self) -> Vec<Rows> {
        let queue = std::mem::take(&mut self.queue);
        queue
            .into_iter()
            .filter_map(|(_, rows)| self.cut(rows))
            .collect()
    }

    fn inside(&self, start_ns: i64, end_ns: i64) -> bool {
        self.spans.iter().any(|s| s.overlaps(start_ns, end_ns))
            || self
                .written
                .iter()
                .any(|(s, e)| overlaps(*s, Some(*e), start_ns, end_ns))
    }

    /// What of `rows` falls in a window: samples, NVML readings, ranges, kernels and calls that
    /// overlap one, whole; drops cut at the window's edges.
    fn cut(&self, rows: Rows) -> Option<Rows> {
        match rows {
            Rows::Samples(b) => {
                let mut out = SampleBatch::new(b.device, b.values.len());
                let mut values = vec![0.0; b.values.len()];
                for i in 0..b.len() {
                    if self.inside(b.start_ns[i], b.end_ns[i]) {
                        for (v, column) in values.iter_mut().zip(&b.values) {
                            *v = column[i];
                        }
                        out.push(b.start_ns[i], b.end_ns[i], &values);
                    }
                }
                (!out.is_empty()).then_some(Rows::Samples(out))
            }
            Rows::Drops(d) => {
                let cut: Vec<DropRecord> = d.iter().flat_map(|r| self.cut_drop(r)).collect();
                (!cut.is_empty()).then_some(Rows::Drops(cut))
            }
            Rows::Nvml(r) => keep(r, |x| self.inside(x.t_ns, x.t_ns)).map(Rows::Nvml),
            Rows::Nvtx(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Nvtx),
            Rows::Kernels(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Kernels),
            Rows::Api(r) => keep(r, |x| self.inside(x.start_ns, x.end_ns)).map(Rows::Api),
            Rows::HostSamples(r) => keep(r, |x| self.inside(x.t_ns, x.t_ns)).map(Rows::HostSamples),
        }
    }

    fn cut_drop(&self, r: &DropRecord) -> Vec<DropRecord> {
        let len = u128::from(u64::try_from(r.end_ns - r.start_ns).unwrap_or(0).max(1));
        self.windows()
            .into_iter()
            .filter(|(s, e)| overlaps(*s, *e, r.start_ns, r.end_ns))
            .map(|(w_start, w_end)| {
                let start = r.start_ns.max(w_start);
                let end = w_end.map_or(r.end_ns, |e| r.end_ns.min(e));
                let part = u128::from(u64::try_from(end - start).unwrap_or(0));
                DropRecord {
                    start_ns: start,
                    end_ns: end,
                    // The estimate shared out by time: never more than the whole.
                    lost_samples: r
                        .lost_samples
                        .map(|n| u64::try_from(u128::from(n) * part / len).unwrap_or(n)),
                    ..r.clone()
                }
            })
            .collect()
    }
}

fn keep<T>(rows: Vec<T>, inside: impl Fn(&T) -> bool) -> Option<Vec<T>> {
    let kept: Vec<T> = rows.into_iter().filter(|r| inside(r)).collect();
    (!kept.is_empty()).then_some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_trace::model::{DeviceId, DropReason};

    fn edge(t_ns: i64, open: bool, source: u32) -> Edge {
        Edge {
            t_ns,
            open,
            source,
            why: format!("test {source}"),
        }
    }

    fn batch(starts: &[i64]) -> SampleBatch {
        let mut b = SampleBatch::new(DeviceId(0), 1);
        for s in starts {
            b.push(*s, s + 10, &[*s as f64]);
        }
        b
    }

    fn starts(rows: &[Rows]) -> Vec<i64> {
        rows.iter()
            .flat_map(|r| match r {
                Rows::Samples(b) => b.start_ns.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// The union rows (`capture_window`) among `rows`, as (start, length).
    fn unions(rows: &[CaptureEvent]) -> Vec<(i64, u64)> {
        rows.iter()
            .filter(|r| r.is(CaptureEventKind::Window))
            .map(|r| (r.t_ns, r.count))
            .collect()
    }

    /// The per-process rows (`process_window`) among `rows`, as (pid, start, length).
    fn per_process(rows: &[CaptureEvent]) -> Vec<(u32, i64, u64)> {
        rows.iter()
            .filter(|r| r.is(CaptureEventKind::ProcessWindow))
            .map(|r| (r.pid, r.t_ns, r.count))
            .collect()
    }

    #[test]
    fn only_samples_inside_a_window_are_kept_and_only_after_the_hold() {
        let mut g = Gate::new();
        let t0 = Instant::now();
        g.hold(t0, Rows::Samples(batch(&[0, 100, 200, 300, 400])));
        // The edges arrive after the samples they cut.
        assert!(g.edge(t0, edge(95, true, 7)).is_empty());
        let closed = g.edge(t0, edge(305, false, 7));
        assert_eq!(per_process(&closed), [(7, 95, 210)]);
        assert!(unions(&closed).is_empty(), "the union's row waits");
        assert!(g.release(t0 + HOLD / 2).is_empty(), "still held");
        assert!(g.settled(t0 + HOLD / 2).is_empty(), "not settled yet");
        let out = g.release(t0 + HOLD);
        // 0..10 ends before the window; 90..100 would overlap only if it reached 95.
        assert_eq!(starts(&out), vec![100, 200, 300]);
        let settled = g.settled(t0 + HOLD);
        assert_eq!(unions(&settled), [(95, 210)]);
        assert_eq!(settled[0].detail, "opened by test 7, closed by test 7");
        assert!(g.settled(t0 + HOLD * 2).is_empty(), "written once");
        assert_eq!(
            g.log(),
            WindowLog {
                opened: 1,
                closed: 1,
                closed_ns: 210,
                process_windows: 1,
            }
        );
    }

    #[test]
    fn host_samples_are_kept_inside_windows_only() {
        let mut g = Gate::new();
        let t0 = Instant::now();
        let sample = |t_ns| HostSample {
            t_ns,
            pid: 1,
            tid: 1,
            ..HostSample::default()
        };
        g.hold(
            t0,
            Rows::HostSamples(vec![sample(10), sample(150), sample(400)]),
        );
        g.edge(t0, edge(100, true, 0));
        // cufall's own windows (signal, delay) have no process row.
        assert!(g.edge(t0, edge(300, false, 0)).is_empty());
        let out = g.release(t0 + HOLD);
        let kept: Vec<i64> = out
            .iter()
            .flat_map(|r| match r {
                Rows::HostSamples(s) => s.iter().map(|x| x.t_ns).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(kept, vec![150]);
    }

    #[test]
    fn edges_of_several_processes_arriving_out_of_order_still_make_their_union() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.edge(now, edge(100, true, 1));
        // Process 2 opened at 50, but its edge arrives after process 1's.
        g.edge(now, edge(50, true, 2));
        // Process 1 closes at 300 and its edge arrives first; process 2 closed at 280.
        g.edge(now, edge(300, false, 1));
        g.edge(now, edge(280, false, 2));
        assert_eq!(unions(&g.settled(now + HOLD)), [(50, 250)]);
    }

    /// Process 2's whole window arrives after process 1's, though it opened first and closed
    /// inside process 1's: still one window, not two that overlap.
    #[test]
    fn an_open_arriving_after_the_close_it_precedes_reopens_the_window() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.edge(now, edge(100, true, 1));
        g.edge(now, edge(200, false, 1));
        assert_eq!(g.log().closed, 1);
        g.edge(now, edge(90, true, 2));
        assert_eq!((g.log().opened, g.log().closed), (1, 0), "open again");
        let rows = g.edge(now, edge(150, false, 2));
        assert_eq!(per_process(&rows), [(2, 90, 60)]);
        assert_eq!(
            unions(&g.settled(now + HOLD)),
            [(90, 110)],
            "to the later close"
        );
        assert_eq!(
            g.log(),
            WindowLog {
                opened: 1,
                closed: 1,
                closed_ns: 110,
                process_windows: 2,
            }
        );
        // Once settled, a window is never opened again: a later open makes a new one.
        g.edge(now + HOLD, edge(120, true, 3));
        assert_eq!(g.log().opened, 2);
    }

    #[test]
    fn windows_of_several_processes_are_their_union() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.edge(now, edge(100, true, 1));
        g.edge(now, edge(150, true, 2));
        let rows = g.edge(now, edge(200, false, 1));
        assert_eq!(per_process(&rows), [(1, 100, 100)]);
        assert_eq!(g.log().closed, 0, "process 2 holds it");
        g.edge(now, edge(300, false, 2));
        assert_eq!(unions(&g.settled(now + HOLD)), [(100, 200)]);
        // A stop with no start and a second stop change nothing.
        assert!(g.edge(now, edge(400, false, 3)).is_empty());
        assert!(g.edge(now, edge(410, false, 2)).is_empty());
        assert_eq!(g.log().opened, 1);
    }

    /// Nested opens of one process (NVTX ranges of the trigger's name inside each other) make
    /// one window of that process, from the first open to the last close.
    #[test]
    fn a_process_window_runs_from_its_first_open_to_its_last_close() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.edge(now, edge(100, true, 4));
        g.edge(now, edge(110, true, 4));
        assert!(g.edge(now, edge(120, false, 4)).is_empty());
        let rows = g.edge(now, edge(130, false, 4));
        assert_eq!(per_process(&rows), [(4, 100, 30)]);
    }

    /// `--capture-range-end stop`: a window that opens after the first one closed (while
    /// cufall waits for its last records) is not kept; a late edge of the first one still is.
    #[test]
    fn with_the_first_window_only_later_windows_are_not_kept() {
        let mut g = Gate::new().first_only(true);
        let now = Instant::now();
        g.edge(now, edge(100, true, 1));
        g.edge(now, edge(200, false, 1));
        assert!(g.edge(now, edge(300, true, 1)).is_empty());
        assert!(
            g.edge(now, edge(400, false, 1)).is_empty(),
            "no window to close"
        );
        // Process 2's window began inside the first one; its edges come late.
        g.edge(now, edge(150, true, 2));
        let rows = g.edge(now, edge(250, false, 2));
        assert_eq!(per_process(&rows), [(2, 150, 100)]);
        g.hold(now, Rows::Samples(batch(&[120, 260, 350])));
        assert_eq!(starts(&g.drain()), [120]);
        let end = g.close_all(1_000, "the end");
        assert_eq!(unions(&end), [(100, 150)]);
        assert_eq!(g.log().opened, 1);
    }

    #[test]
    fn nothing_is_kept_without_a_window_and_an_open_window_keeps_everything_after_it() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.hold(now, Rows::Samples(batch(&[0, 100])));
        assert!(g.drain().is_empty());
        g.edge(now, edge(150, true, 0));
        g.edge(now, edge(160, true, 8));
        g.hold(now, Rows::Samples(batch(&[100, 200, 1_000_000])));
        assert_eq!(starts(&g.drain()), vec![200, 1_000_000]);
        let end = g.close_all(2_000_000, "the end");
        assert_eq!(per_process(&end), [(8, 160, 2_000_000 - 160)]);
        assert_eq!(unions(&end), [(150, 2_000_000 - 150)]);
        assert!(end.iter().all(|r| r.detail.contains("closed by the end")));
        assert!(g.close_all(3_000_000, "again").is_empty());
    }

    proptest::proptest! {
        /// Whatever order the sources' edges arrive in (each source's own in order), the
        /// windows are the union of the sources' intervals and each source's rows its own.
        #[test]
        fn the_union_does_not_depend_on_the_order_edges_arrive_in(
            shapes in proptest::collection::vec(
                proptest::collection::vec((0i64..1_000, 0i64..300), 1..4),
                1..5,
            ),
            seed in proptest::prelude::any::<u64>(),
        ) {
            // Each source's intervals, one after another.
            let intervals: Vec<Vec<(i64, i64)>> = shapes
                .iter()
                .map(|s| {
                    let mut t = 0;
                    s.iter()
                        .map(|(gap, len)| {
                            let start = t + gap;
                            t = start + len + 1;
                            (start, start + len)
                        })
                        .collect()
                })
                .collect();
            let mut queues: Vec<VecDeque<Edge>> = intervals
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let source = u32::try_from(i).unwrap() + 1;
                    v.iter()
                        .flat_map(|(s, e)| [edge(*s, true, source), edge(*e, false, source)])
                        .collect()
                })
                .collect();
            let mut g = Gate::new();
            let now = Instant::now();
            let mut rows = Vec::new();
            let mut x = seed;
            while queues.iter().any(|q| !q.is_empty()) {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let ready: Vec<usize> = (0..queues.len()).filter(|i| !queues[*i].is_empty()).collect();
                let pick = ready[usize::try_from(x >> 33).unwrap() % ready.len()];
                let e = queues[pick].pop_front().unwrap();
                rows.extend(g.edge(now, e));
            }
            rows.extend(g.close_all(1_000_000, "the end"));

            let mut all: Vec<(i64, i64)> = intervals.iter().flatten().copied().collect();
            all.sort_unstable();
            let mut union: Vec<(i64, i64)> = Vec::new();
            for (s, e) in all {
                match union.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => union.push((s, e)),
                }
            }
            let want: Vec<(i64, u64)> =
                union.iter().map(|(s, e)| (*s, u64::try_from(e - s).unwrap())).collect();
            proptest::prop_assert_eq!(unions(&rows), want);
            let mut own = per_process(&rows);
            own.sort_unstable();
            let mut own_want: Vec<(u32, i64, u64)> = intervals
                .iter()
                .enumerate()
                .flat_map(|(i, v)| {
                    v.iter().map(move |(s, e)| {
                        (u32::try_from(i).unwrap() + 1, *s, u64::try_from(e - s).unwrap())
                    })
                })
                .collect();
            own_want.sort_unstable();
            proptest::prop_assert_eq!(own, own_want);
            let log = g.log();
            proptest::prop_assert_eq!((log.opened, log.closed), (union.len() as u64, union.len() as u64));
            proptest::prop_assert_eq!(log.closed_ns, union.iter().map(|(s, e)| e - s).sum::<i64>());
        }
    }

    #[test]
    fn drops_are_cut_at_window_edges_and_rows_kept_whole_when_they_overlap() {
        let mut g = Gate::new();
        let now = Instant::now();
        g.edge(now, edge(100, true, 0));
        g.edge(now, edge(200, false, 0));
        g.edge(now, edge(300, true, 0));
        g.edge(now, edge(400, false, 0));
        let drop = DropRecord {
            device: DeviceId(0),
            start_ns: 50,
            end_ns: 350,
            reason: DropReason::CounterDataFull,
            lost_samples: Some(300),
        };
        g.hold(Instant::now(), Rows::Drops(vec![drop]));
        g.hold(
            Instant::now(),
            Rows::Nvtx(vec![
                NvtxRange {
                    start_ns: 0,
                    end_ns: 120,
                    name: "serve".into(),
                    ..NvtxRange::default()
                },
                NvtxRange {
                    start_ns: 210,
                    end_ns: 290,
                    name: "between".into(),
                    ..NvtxRange::default()
                },
            ]),
        );
        let out = g.drain();
        let Rows::Drops(d) = &out[0] else {
            panic!("{out:?}")
        };
        let spans: Vec<(i64, i64, Option<u64>)> = d
            .iter()
            .map(|r| (r.start_ns, r.end_ns, r.lost_samples))
            .collect();
        assert_eq!(spans, vec![(100, 200, Some(100)), (300, 350, Some(50))]);
        let Rows::Nvtx(n) = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].name, "serve");
    }
}
