//! `cufall serve`: an always-on Prometheus exporter with a flight recorder.
//!
//! ```text
//!  Backend::start ─▶ (session: decode, evaluate, sink) ─▶ live feed ─▶ supervisor thread
//!                                                                      │  folds every batch into
//!                                                                      ├▶ Aggregator (windows, totals)
//!                                                                      └▶ Ring (the last --keep)
//!  HTTP handler threads: GET /metrics ─▶ Aggregator::scrape ─▶ exposition
//!                        POST /dump / SIGUSR1 ─▶ Ring snapshot ─▶ trace (atomically)
//!                        POST /pause, /resume, `cufall control` ─▶ the run's CounterSharing
//! ```
//!
//! | module | part |
//! |---|---|
//! | [`aggregate`] | per-GPU totals and each scraper's window: mean, max, idle fraction, gaps |
//! | [`exposition`] | the Prometheus text |
//! | [`flight`] | the flight recorder's ring, its budget, and its dump to a trace |
//! | [`http`] | binding `--listen`, the routes |
//! | [`serving`] | a running exporter: its HTTP handler threads and its supervisor, started and stopped together |
//! | [`session_backend`] | the GPU [`Backend`]: the same `session::prepare`/`start` as `record` |
//! | [`control`] | how the exporter answers `cufall control pause|resume` |
//!
//! The command line (flags, binding before any GPU access, the first run, signals) is
//! [`crate::commands::serve`].
//!
//! The exporter samples through a [`Backend`], which starts a sampling run and hands over its
//! live feed: on a GPU the session `record` uses, in tests a scripted fake GPU driving the same
//! decode state machine and sink. The supervisor thread takes the feed; when the run fails
//! (a GPU gone, the counters taken by another profiler) it says so in its log and in
//! `cufall_sampling_state`, stops the run, waits (1 s, doubling up to 60 s) and starts again.

pub mod aggregate;
pub mod control;
pub mod exposition;
pub mod flight;
pub mod http;
pub mod serving;
pub mod session_backend;

use crate::pipeline::pause::{CounterSharing, CounterState, MAX_PAUSE, PauseDone, PauseRefused};
use crate::session::SessionError;
use aggregate::Aggregator;
use cufall_live::{FeedInfo, LiveEvent, LiveReceiver};
use cufall_trace::model::{DeviceId, DeviceInfo, HeatmapSpec};
use exposition::{Context, GpuLabels};
use flight::{Budget, DumpError, DumpFacts, Dumped, Ring};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The default port: beside dcgm-exporter's 9400, so that a firewall rule or a scrape job for
/// the GPU exporters of a node covers it, without taking dcgm-exporter's own port.
pub const DEFAULT_PORT: u16 = 9401;

/// Events the feed holds for the supervisor: it takes them every 50 ms, so this is seconds of
/// 8 GPUs' batches.
pub const FEED_CAPACITY: usize = 65_536;

/// One sampling run, as the supervisor holds it.
pub trait Run: Send {
    /// Why the run failed, if it did (a device's pipeline ended, the writer thread died).
    fn error(&self) -> Option<String>;
    /// Stops sampling and waits for the run's threads; the errors they ended with.
    fn stop(self: Box<Self>) -> Vec<String>;
    /// Pausing the run's GPU counters, when it has a way to.
    fn sharing(&self) -> Option<CounterSharing> {
        None
    }
}

/// A started run and its feed.
pub struct Started {
    pub feed: LiveReceiver,
    pub run: Box<dyn Run>,
}

/// What starts sampling runs: the GPU session, or a fake GPU in tests.
pub trait Backend: Send + 'static {
    fn start(&mut self) -> Result<Started, SessionError>;
}

/// How the exporter behaves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// How much the flight recorder keeps.
    pub keep: Duration,
    pub dump_dir: PathBuf,
    /// Accept `POST /dump` from any peer, not only loopback.
    pub allow_remote_dump: bool,
    /// The least time between the starts of two dumps (a request sooner is refused).
    pub dump_min_interval: Duration,
    /// This host's dumps kept in `dump_dir`; older ones are deleted after each dump.
    pub dump_keep: usize,
    /// The memory this machine had available at start (`MemAvailable`); a flight recorder is
    /// never given more than half of it, whatever metrics a later run brings. `None`: not
    /// limited (the machine did not say).
    pub memory_available_bytes: Option<u64>,
    pub heatmaps: Vec<HeatmapSpec>,
    pub hostname: String,
    /// The command line, for the dumps' manifests.
    pub command: Vec<String>,
    /// The Kubernetes variables of [`exposition::KUBE_ENV`] that are set, as `(VARIABLE,
    /// value)`: they become `pod`, `namespace`, `container` labels.
    pub env: Vec<(String, String)>,
    /// First and longest wait before sampling is started again. A run without counters
    /// (another profiler holds them) is stopped after the current wait to try them again.
    pub backoff: (Duration, Duration),
    /// What each log line starts with.
    pub log_prefix: &'static str,
}

impl ServeOptions {
    pub fn new(dump_dir: PathBuf) -> Self {
        ServeOptions {
            keep: Duration::from_secs(300),
            dump_dir,
            allow_remote_dump: false,
            dump_min_interval: Duration::from_secs(10),
            dump_keep: 10,
            memory_available_bytes: None,
            heatmaps: Vec::new(),
            hostname: crate::os::hostname(),
            command: std::env::args().collect(),
            env: exposition::KUBE_ENV
                .iter()
                .filter_map(|(var, _)| std::env::var(var).ok().map(|v| (var.to_string(), v)))
                .collect(),
            backoff: (Duration::from_secs(1), Duration::from_secs(60)),
            log_prefix: "cufall serve",
        }
    }
}

/// Why a dump was not written.
#[derive(Debug, thiserror::Error)]
pub enum DumpRefused {
    #[error("a flight-recorder dump is being written")]
    Busy,
    #[error(
        "a flight-recorder dump was asked for {:.1} s ago; one is written at most every {:.0} s",
        since.as_secs_f64(), every.as_secs_f64()
    )]
    TooSoon { since: Duration, every: Duration },
    #[error(transparent)]
    Failed(#[from] DumpError),
}

/// The state scrapes read and the supervisor writes.
struct Core {
    agg: Option<Aggregator>,
    info: Option<FeedInfo>,
    devices: BTreeMap<DeviceId, DeviceInfo>,
    last_sample: BTreeMap<DeviceId, Instant>,
    run_started: Instant,
    state: &'static str,
    restarts: u64,
    feed_discarded: u64,
    /// The current run's counters, to pause.
    sharing: Option<CounterSharing>,
}

/// The exporter: its state, its flight recorder, and the flags that end it.
pub struct Exporter {
    opts: ServeOptions,
    core: Mutex<Core>,
    ring: Mutex<Option<Ring>>,
    dumping: AtomicBool,
    /// When the last dump was started, for the least time between dumps.
    last_dump: Mutex<Option<Instant>>,
    dumps: AtomicU64,
    shutdown: AtomicBool,
    started: Instant,
    cpu0: f64,
    /// The last [`LOG_LINES`] log lines, for tests and for anyone holding the exporter.
    recent: Mutex<std::collections::VecDeque<String>>,
}

/// Log lines an [`Exporter`] remembers.
pub const LOG_LINES: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; scraping it is still sound.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Exporter {
    pub fn new(opts: ServeOptions) -> Arc<Exporter> {
        let now = Instant::now();
        Arc::new(Exporter {
            opts,
            core: Mutex::new(Core {
                agg: None,
                info: None,
                devices: BTreeMap::new(),
                last_sample: BTreeMap::new(),
                run_started: now,
                state: "starting",
                restarts: 0,
                feed_discarded: 0,
                sharing: None,
            }),
            ring: Mutex::new(None),
            dumping: AtomicBool::new(false),
            last_dump: Mutex::new(None),
            dumps: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            started: now,
            cpu0: crate::os::cpu_seconds(),
            recent: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    pub fn options(&self) -> &ServeOptions {
        &self.opts
    }

    pub fn log(&self, msg: &str) {
        let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        eprintln!("{at} {}: {msg}", self.opts.log_prefix);
        let mut recent = lock(&self.recent);
        if recent.len() == LOG_LINES {
            recent.pop_front();
        }
        recent.push_back(msg.to_string());
    }

    /// The last log lines, oldest first.
    pub fn recent_log(&self) -> Vec<String> {
        lock(&self.recent).iter().cloned().collect()
    }

    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }

    pub fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// The exposition for scraper `who`.
    pub fn scrape(&self, who: &str) -> String {
        let now = Instant::now();
        let mut core = lock(&self.core);
        let scrape = core
            .agg
            .as_mut()
            .map(|a| a.scrape(who, now))
            .unwrap_or_default();
        let env = |var: &str| {
            self.opts
                .env
                .iter()
                .find(|(k, _)| k == var)
                .map(|(_, v)| v.clone())
        };
        let gpus = core
            .devices
            .values()
            .map(|d| (d.id, GpuLabels::new(d, &self.opts.hostname, &env)))
            .collect();
        let age_s = core
            .devices
            .keys()
            .map(|d| {
                let since = core.last_sample.get(d).copied().unwrap_or(core.run_started);
                (*d, now.duration_since(since).as_secs_f64())
            })
            .collect();
        let (state, pause_left_s) = shown_state(core.state, core.sharing.as_ref());
        let ctx = Context {
            gpus,
            metrics: core
                .info
                .as_ref()
                .map(|i| i.metrics.clone())
                .unwrap_or_default(),
            age_s,
            state,
            pause_left_s,
            restarts: core.restarts,
            measures_idle: core.agg.as_ref().is_some_and(Aggregator::measures_idle),
            cpu_s: crate::os::cpu_seconds() - self.cpu0,
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            resident_bytes: resident_bytes(),
            flight_bytes: lock(&self.ring).as_ref().map_or(0, Ring::bytes),
            feed_discarded: core.feed_discarded,
            scrapers: core.agg.as_ref().map_or(0, Aggregator::scrapers),
            dumps: self.dumps.load(Ordering::Relaxed),
        };
        drop(core);
        exposition::render(&scrape, &ctx)
    }

    /// Releases the GPU counters for `d` (`POST /pause`, `cufall control pause`).
    pub fn pause(&self, d: Duration) -> Result<PauseDone, PauseRefused> {
        if d > MAX_PAUSE {
            return Err(PauseRefused::TooLong { asked: d });
        }
        let (sharing, state) = {
            let core = lock(&self.core);
            (core.sharing.clone(), core.state)
        };
        let r = match sharing {
            Some(s) => s.pause(d),
            None => Err(PauseRefused::NothingSamples {
                why: format!("this exporter is not sampling now (state {state})"),
            }),
        };
        if let Ok(done) = &r {
            self.log(&done.to_string());
        }
        r
    }

    /// Ends a pause now (`POST /resume`, `cufall control resume`).
    pub fn resume(&self) -> Result<PauseDone, PauseRefused> {
        let (sharing, state) = {
            let core = lock(&self.core);
            (core.sharing.clone(), core.state)
        };
        match sharing {
            Some(s) => s.resume(),
            None => Err(PauseRefused::NothingSamples {
                why: format!("this exporter is not sampling now (state {state})"),
            }),
        }
    }

    /// The sampling state as the gauge shows it, and the seconds a pause has left.
    pub fn sampling_state(&self) -> (&'static str, f64) {
        let core = lock(&self.core);
        shown_state(core.state, core.sharing.as_ref())
    }

    /// Writes the flight recorder to a new trace in the dump folder; one dump at a time.
    pub fn dump(&self) -> Result<Dumped, DumpRefused> {
        let Some(claim) = Claim::take(&self.dumping) else {
            return Err(DumpRefused::Busy);
        };
        {
            let mut last = lock(&self.last_dump);
            let now = Instant::now();
            let every = self.opts.dump_min_interval;
            if let Some(since) = last.map(|l| now.duration_since(l))
                && since < every
            {
                return Err(DumpRefused::TooSoon { since, every });
            }
            *last = Some(now);
        }
        let result = self.dump_now();
        drop(claim);
        match &result {
            Ok(d) => {
                self.dumps.fetch_add(1, Ordering::Relaxed);
                self.log(&format!(
                    "flight recorder: wrote {} ({} samples, {:.1} s)",
                    d.path.display(),
                    d.samples,
                    d.span_ns as f64 / 1e9
                ));
                self.prune_dumps();
            }
            Err(e) => self.log(&format!(
                "flight recorder: dump failed: {}",
                crate::pipeline::error_chain(e)
            )),
        }
        result.map_err(DumpRefused::Failed)
    }

    /// Deletes this host's oldest dumps beyond `dump_keep`, saying which.
    fn prune_dumps(&self) {
        let o = &self.opts;
        match flight::prune_dumps(&o.dump_dir, &o.hostname, o.dump_keep) {
            Ok(deleted) => {
                for p in deleted {
                    self.log(&format!(
                        "flight recorder: deleted {} (--dump-keep {})",
                        p.display(),
                        o.dump_keep
                    ));
                }
            }
            Err(e) => self.log(&format!(
                "flight recorder: cannot delete old dumps in {}: {e}",
                o.dump_dir.display()
            )),
        }
    }

    fn dump_now(&self) -> Result<Dumped, DumpError> {
        let snap = lock(&self.ring)
            .as_ref()
            .map(Ring::snapshot)
            .ok_or(DumpError::Empty)?;
        // A pause still on: its hole so far, as the record its end will make.
        let sharing = lock(&self.core).sharing.clone();
        let open = sharing
            .as_ref()
            .map(CounterSharing::open_pauses)
            .unwrap_or_default();
        let snap = snap.with_drops(open);
        let facts = {
            let core = lock(&self.core);
            DumpFacts {
                heatmaps: core
                    .info
                    .as_ref()
                    .map(|i| self.heatmaps_of(i))
                    .unwrap_or_else(|| self.opts.heatmaps.clone()),
                info: core.info.clone().ok_or(DumpError::Empty)?,
                devices: core.devices.clone(),
                hostname: self.opts.hostname.clone(),
                command: self.opts.command.clone(),
            }
        };
        let path = flight::dump_path(
            &self.opts.dump_dir,
            &self.opts.hostname,
            crate::now_unix_ns(),
        );
        flight::write_dump(&snap, &facts, &path)
    }

    /// The heatmaps of a run: as armed (a metric the GPU recorded by its stand-in, a peak it
    /// could not give), else as asked.
    fn heatmaps_of(&self, info: &FeedInfo) -> Vec<HeatmapSpec> {
        if info.heatmaps.is_empty() {
            self.opts.heatmaps.clone()
        } else {
            info.heatmaps.clone()
        }
    }

    /// Takes a new run's facts: its devices, its counters to pause, and (the first time) the
    /// aggregator and the ring.
    fn begin_run(&self, info: &FeedInfo, sharing: Option<CounterSharing>) {
        let mut core = lock(&self.core);
        core.run_started = Instant::now();
        core.sharing = sharing;
        core.state = if info.counters_unavailable.is_some() {
            "counters_busy"
        } else {
            "sampling"
        };
        for d in &info.devices {
            core.devices.insert(d.id, d.clone());
        }
        let same = core
            .info
            .as_ref()
            .is_some_and(|i| i.metrics == info.metrics);
        if core.agg.is_none() || (!same && !info.metrics.is_empty()) {
            let activity = aggregate::live_activity(&info.metrics, &self.heatmaps_of(info));
            if activity.is_none() && !info.metrics.is_empty() {
                self.log("idle fraction and gaps are not measured: the first metric has no known full scale (give --full-scale, or use a percentage or a ratio metric)");
            }
            core.agg = Some(Aggregator::new(
                &info.metrics,
                activity.as_ref(),
                info.interval_ns.0,
            ));
            *lock(&self.ring) = Some(self.new_ring(info));
        }
        if !info.metrics.is_empty() || core.info.is_none() {
            core.info = Some(info.clone());
        }
        let ids: Vec<DeviceId> = info.devices.iter().map(|d| d.id).collect();
        if let Some(a) = core.agg.as_mut() {
            for d in ids {
                a.add_device(d);
            }
        }
    }

    /// A flight recorder for `info`'s metrics and devices, checked again against the memory
    /// allowed at start: the first run may have had no counters (another profiler held them),
    /// so its budget said nothing of the metrics this run samples.
    fn new_ring(&self, info: &FeedInfo) -> Ring {
        let keep_ns = cufall_trace::model::nanos(self.opts.keep);
        let budget = Budget::new(
            info.devices.len(),
            info.metrics.len(),
            info.interval_ns.0,
            keep_ns,
        );
        let available = self.opts.memory_available_bytes;
        if let Some(Err(why)) =
            available.map(|a| budget.check(&crate::args::duration::flag_text(self.opts.keep), a))
        {
            self.log(&format!(
                "flight recorder: {why}; until then it keeps only what fits in half of the \
memory available at start, less than --keep"
            ));
        }
        Ring::new(keep_ns, &budget, available.map(|a| a / 2))
    }

    fn ingest(&self, events: Vec<LiveEvent>) -> bool {
        let mut ended = false;
        let now = Instant::now();
        let mut core = lock(&self.core);
        let mut ring = lock(&self.ring);
        for e in events {
            match e {
                LiveEvent::Samples(b) => {
                    if b.is_empty() {
                        continue;
                    }
                    core.last_sample.insert(b.device, now);
                    if let Some(a) = core.agg.as_mut() {
                        a.samples(&b);
                    }
                    if let Some(r) = ring.as_mut() {
                        r.samples(b);
                    }
                }
                LiveEvent::Drop(d) => {
                    if let Some(a) = core.agg.as_mut() {
                        a.drops(std::slice::from_ref(&d));
                    }
                    if let Some(r) = ring.as_mut() {
                        r.drops(vec![d]);
                    }
                }
                LiveEvent::Nvml(rows) => {
                    if let Some(a) = core.agg.as_mut() {
                        a.nvml(&rows);
                    }
                    if let Some(r) = ring.as_mut() {
                        r.nvml(rows);
                    }
                }
                LiveEvent::Message(m) => self.log(&m),
                LiveEvent::End => ended = true,
                LiveEvent::Nvtx(_) | LiveEvent::Kernels(_) => {}
            }
        }
        if let Some(a) = core.agg.as_mut() {
            a.tick(now);
        }
        ended
    }

    fn set_state(&self, state: &'static str) {
        lock(&self.core).state = state;
    }
}

/// The state the gauge shows: a run that samples may be paused (with the seconds left) or
/// waiting for counters another tool took during its pause.
fn shown_state(state: &'static str, sharing: Option<&CounterSharing>) -> (&'static str, f64) {
    if state != "sampling" {
        return (state, 0.0);
    }
    match sharing.and_then(CounterSharing::state) {
        Some(CounterState::Paused { left }) => ("paused", left.as_secs_f64()),
        Some(CounterState::Waiting { .. }) => ("counters_busy", 0.0),
        _ => (state, 0.0),
    }
}

/// Holds a flag set while it lives: cleared when dropped, also by a panic's unwinding, so a
/// dump that panicked does not leave every later dump refused as busy.
struct Claim<'a>(&'a AtomicBool);

impl<'a> Claim<'a> {
    /// Sets `flag` if it was clear; `None` when it was already set.
    fn take(flag: &'a AtomicBool) -> Option<Claim<'a>> {
        flag.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| Claim(flag))
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Resident memory of this process (Linux `/proc/self/statm`), in bytes.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Why a run ended.
struct Ended {
    why: String,
    /// The run sampled without counters and ended to ask for them again: the wait is over.
    retry_counters: bool,
}

/// Takes one run's feed until the run fails, ends, or the exporter shuts down (a run without
/// counters, after `degraded_for`, to ask for them again).
fn take_run(exporter: &Exporter, started: Started, degraded_for: Duration) -> Ended {
    let Started { feed, run } = started;
    exporter.begin_run(&feed.info, run.sharing());
    let degraded = feed.info.counters_unavailable.clone();
    match &degraded {
        Some(why) => exporter.log(&format!("sampling without GPU counters (NVML only): {why}")),
        None => exporter.log(&format!(
            "sampling {} GPU(s), {} metric(s) every {}",
            feed.info.devices.len(),
            feed.info.metrics.len(),
            crate::args::duration::interval_text(feed.info.interval_ns.0)
        )),
    }
    let since = Instant::now();
    let mut retry_counters = false;
    let why = loop {
        let events = feed.drain(Duration::from_millis(50));
        let ended = exporter.ingest(events);
        lock(&exporter.core).feed_discarded = feed.discarded();
        if exporter.is_shut_down() {
            break "the exporter is shutting down".to_string();
        }
        if let Some(e) = run.error() {
            break e;
        }
        if ended {
            break "the sampling session ended".to_string();
        }
        if degraded.is_some() && since.elapsed() >= degraded_for {
            retry_counters = true;
            break "trying the GPU counters again".to_string();
        }
    };
    lock(&exporter.core).sharing = None;
    let errors = run.stop();
    // What the run's sink handed over while stopping.
    exporter.ingest(feed.drain(Duration::ZERO));
    if let Some(a) = lock(&exporter.core).agg.as_mut() {
        a.pause();
    }
    let why = if errors.is_empty() || errors.iter().any(|e| why.contains(e.as_str())) {
        why
    } else {
        format!("{why} ({})", errors.join("; "))
    };
    Ended {
        why,
        retry_counters,
    }
}

/// The supervisor: runs `backend` until the exporter shuts down, starting again (after a
/// growing wait) whenever a run fails or cannot start. `first` is a run already started.
pub fn supervise(exporter: &Arc<Exporter>, mut backend: impl Backend, first: Option<Started>) {
    let (min, max) = exporter.opts.backoff;
    let mut wait = min;
    let mut next = first;
    let mut retrying = false;
    while !exporter.is_shut_down() {
        let started = match next.take() {
            Some(s) => Ok(s),
            None => {
                // Asking for the counters again is not a new start: the state stays
                // counters_busy until they are had.
                if !retrying {
                    exporter.set_state("starting");
                }
                backend.start()
            }
        };
        let began = Instant::now();
        retrying = false;
        match started {
            Ok(s) => {
                let ended = take_run(exporter, s, wait);
                if exporter.is_shut_down() {
                    break;
                }
                if ended.retry_counters {
                    // NVML went on for the whole wait; ask for the counters at once.
                    exporter.log("asking for the GPU counters again");
                    lock(&exporter.core).restarts += 1;
                    wait = (wait * 2).min(max);
                    retrying = true;
                    continue;
                }
                exporter.set_state("stopped");
                exporter.log(&format!(
                    "sampling stopped: {}; starting again in {}",
                    ended.why,
                    crate::args::duration::flag_text(wait)
                ));
            }
            Err(e) => {
                let busy = matches!(
                    &e,
                    SessionError::Cupti(cufall_cupti::CuptiError::CountersBusy { .. })
                );
                exporter.set_state(if busy { "counters_busy" } else { "stopped" });
                exporter.log(&format!(
                    "cannot start sampling: {}; trying again in {}",
                    crate::pipeline::error_chain(&e),
                    crate::args::duration::flag_text(wait)
                ));
            }
        }
        lock(&exporter.core).restarts += 1;
        let ran = began.elapsed();
        sleep_unless_shut_down(exporter, wait);
        // A run that went well for a while starts the waits over.
        wait = if ran > max { min } else { (wait * 2).min(max) };
    }
}

fn sleep_unless_shut_down(exporter: &Exporter, d: Duration) {
    let until = Instant::now() + d;
    while !exporter.is_shut_down() && Instant::now() < until {
        std::thread::sleep(
            Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cufall_trace::model::MetricInfo;

    pub(crate) fn feed_info(metrics: usize, interval_ns: i64) -> FeedInfo {
        FeedInfo {
            devices: (0..8).map(cufall_testkit::synth::fake_h200).collect(),
            metrics: (0..metrics)
                .map(|i| MetricInfo {
                    name: format!("m{i}"),
                    unit: "%".into(),
                    description: String::new(),
                })
                .collect(),
            heatmaps: Vec::new(),
            interval_ns: cufall_trace::model::Nanos(interval_ns),
            nvml_interval_ns: cufall_trace::model::Nanos(10_000_000),
            counters_unavailable: (metrics == 0).then(|| "another profiler".to_string()),
        }
    }

    fn ring_cap(e: &Exporter) -> u64 {
        lock(&e.ring).as_ref().map_or(0, |r| r.cap_bytes())
    }

    #[test]
    fn a_panic_while_dumping_leaves_dumps_possible() {
        let flag = AtomicBool::new(false);
        let held = Claim::take(&flag);
        assert!(held.is_some());
        assert!(Claim::take(&flag).is_none(), "one dump at a time");
        drop(held);
        let panicked = std::panic::catch_unwind(|| {
            let _claim = Claim::take(&flag);
            panic!("a dump panicked");
        });
        assert!(panicked.is_err());
        assert!(!flag.load(Ordering::SeqCst));
        assert!(Claim::take(&flag).is_some());
    }

    #[test]
    fn counters_had_after_a_start_without_them_are_checked_against_the_memory() {
        let mut opts = ServeOptions::new(PathBuf::from("."));
        opts.keep = Duration::from_secs(3600);
        opts.memory_available_bytes = Some(1 << 30);
        let e = Exporter::new(opts);
        // Another profiler held the counters: no metric, nothing to check yet.
        e.begin_run(&feed_info(0, 50_000), None);
        assert!(ring_cap(&e) <= 1 << 29);
        assert!(!e.recent_log().iter().any(|l| l.contains("--keep")));
        // The counters come: 8 GPUs, 2 metrics, 1 µs, an hour is far above 512 MiB.
        e.begin_run(&feed_info(2, 1_000), None);
        assert!(ring_cap(&e) <= 1 << 29, "{}", ring_cap(&e));
        let log = e.recent_log();
        assert!(
            log.iter().any(|l| l
                .starts_with("flight recorder: --keep 1h: the flight recorder would need")
                && l.ends_with("less than --keep")),
            "{log:?}"
        );
    }
}
