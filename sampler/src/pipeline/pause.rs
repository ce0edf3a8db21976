//! Sharing the GPU counters: a pause releases every device's PM sampling (the decode loop
//! drains and ends, the CUPTI PM sampling session is disabled and its objects dropped) so that
//! another tool (`ncu`, Nsight Systems, DCGM) can take the counters; when the pause is over (its
//! time is up, or a resume) each device is armed again and sampling goes on by itself.
//!
//! ```text
//!  sampling ──pause(d)──▶ paused (until now + d) ──time up / resume──▶ arm every device
//!     ▲                                                                  │ ok      │ refused
//!     └──────────────────────────────────────────────────────────────────┘         ▼
//!                                              waiting (counters held elsewhere): retry, 1 s … 10 s
//! ```
//!
//! Only the device pipelines stop: NVML, the sink and the trace or live feed go on. Each device
//! gets one `paused` drop record from the release of its counters to the start of its next run,
//! so the hole is named and never read as idle time. A [`DeviceStarter`] arms a device: over
//! CUPTI in a session ([`super::device::Rearm`]), over a fake GPU in tests.

use super::error::{ArmError, PipelineError, error_chain, panic_message};
use crate::sink::SinkMsg;
use cufall_trace::model::{DeviceId, DropReason, DropRecord};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest pause: a longer one is refused (an exporter paused for days is an exporter off).
pub const MAX_PAUSE: Duration = Duration::from_secs(24 * 3600);
/// The pause when none is given.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(300);

/// A device's pipeline running: its thread, and the time it was let go.
pub struct Running {
    pub handle: JoinHandle<Result<(), PipelineError>>,
    /// When the device was told to start (trace clock): the end of its pause.
    pub started_ns: i64,
}

/// Arms one device and starts its pipeline, which runs until `stop` is set.
pub trait DeviceStarter: Send {
    /// Arms and starts the device; why not when the counters cannot be had.
    fn start(&mut self, stop: Arc<AtomicBool>) -> Result<Running, ArmError>;
    /// Clears the error a run that could not start left behind (it is retried).
    fn forget_error(&mut self) {}
}

/// What the counters are doing, for a state gauge and for `control`.
#[derive(Clone, Debug, PartialEq)]
pub enum CounterState {
    Sampling,
    /// Released; sampling comes back by itself at the end of `left`.
    Paused {
        left: Duration,
    },
    /// The pause is over but the counters could not be had again (`why`); retrying.
    Waiting {
        why: String,
    },
}

/// Why a pause or resume was refused: one line each.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PauseRefused {
    #[error(
        "a pause of {} is longer than a day: give --for 24h or less (`resume` ends a pause early)",
        crate::args::duration::flag_text(*asked)
    )]
    TooLong { asked: Duration },
    #[error("a pause of no time pauses nothing: give a duration such as 30s or 10m")]
    Zero,
    #[error("nothing to pause: {why}")]
    NothingSamples { why: String },
    #[error("not paused: the GPU counters are being sampled")]
    NotPaused,
    #[error("sampling is stopping")]
    Stopping,
}

/// What a pause or resume did.
#[derive(Clone, Debug, PartialEq)]
pub enum PauseDone {
    /// The counters were released (`devices` GPUs); sampling resumes in `for_`.
    Released { devices: usize, for_: Duration },
    /// Already paused (or waiting for the counters): the pause now ends in `for_`.
    Extended { for_: Duration },
    /// Sampling started again.
    Resumed,
    /// The counters could not be had again (`why`); retrying by itself.
    Waiting { why: String },
}

impl std::fmt::Display for PauseDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PauseDone::Released { devices, for_ } => write!(
                f,
                "paused: the GPU counters of {devices} GPU(s) are released for {}; sampling \
resumes by itself then (or on resume), NVML goes on",
                crate::args::duration::flag_text(*for_)
            ),
            PauseDone::Extended { for_ } => write!(
                f,
                "paused already: the pause now ends in {}",
                crate::args::duration::flag_text(*for_)
            ),
            PauseDone::Resumed => write!(f, "resumed: sampling the GPU counters again"),
            PauseDone::Waiting { why } => write!(
                f,
                "the pause is over, but the GPU counters cannot be had yet ({why}); trying again \
by itself"
            ),
        }
    }
}

struct Slot {
    device: DeviceId,
    starter: Box<dyn DeviceStarter>,
    run: Option<(Arc<AtomicBool>, Running)>,
    /// When this device's counters were released (trace clock), while they are.
    released_ns: Option<i64>,
    /// Started again after a pause (its first start was the session's).
    resumed: bool,
    /// Its pipeline ended by itself after a pause (an error, said in the session's errors).
    failed: bool,
}

enum Phase {
    Sampling,
    Paused {
        until: Instant,
    },
    Waiting {
        next: Instant,
        wait: Duration,
        why: String,
    },
}

struct Inner {
    slots: Vec<Slot>,
    phase: Phase,
    /// Why device pipelines ended with an error on the way (joined at a pause).
    errors: Vec<String>,
    out: Option<Sender<SinkMsg>>,
    ended: bool,
}

/// Retry waits while the counters are held elsewhere after a pause.
const RETRY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(10));

/// The devices of one session, pausable. Shared by the session (stop, errors), its control
/// channel (pause, resume) and its own thread (the end of a pause, retries).
pub struct PauseControl {
    inner: Mutex<Inner>,
    wake: Condvar,
    /// The last state, readable while the devices are being armed (which takes seconds), and
    /// when a pause ends, so that the time left reads true between changes.
    state: Mutex<(CounterState, Option<Instant>)>,
    now_ns: fn() -> i64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A device pipeline already running, to be managed by a [`PauseControl`].
pub struct Device {
    pub id: DeviceId,
    pub stop: Arc<AtomicBool>,
    pub running: Running,
    pub starter: Box<dyn DeviceStarter>,
}

/// A [`PauseControl`] and its thread (the end of a pause, retries).
pub struct Pausable {
    pub control: Arc<PauseControl>,
    thread: Option<JoinHandle<()>>,
}

impl Pausable {
    /// Takes over `devices`, already running; drop records and messages go to `out`.
    pub fn new(devices: Vec<Device>, out: Sender<SinkMsg>) -> std::io::Result<Pausable> {
        Self::with_clock(devices, out, crate::now_unix_ns)
    }

    /// [`Pausable::new`] with the clock of the devices' timestamps.
    pub fn with_clock(
        devices: Vec<Device>,
        out: Sender<SinkMsg>,
        now_ns: fn() -> i64,
    ) -> std::io::Result<Pausable> {
        let control = Arc::new(PauseControl {
            inner: Mutex::new(Inner {
                slots: devices
                    .into_iter()
                    .map(|d| Slot {
                        device: d.id,
                        starter: d.starter,
                        run: Some((d.stop, d.running)),
                        released_ns: None,
                        resumed: false,
                        failed: false,
                    })
                    .collect(),
                phase: Phase::Sampling,
                errors: Vec::new(),
                out: Some(out),
                ended: false,
            }),
            wake: Condvar::new(),
            state: Mutex::new((CounterState::Sampling, None)),
            now_ns,
        });
        let c = Arc::clone(&control);
        let thread = std::thread::Builder::new()
            .name("cufall-pause".into())
            .spawn(move || c.watch())?;
        Ok(Pausable {
            control,
            thread: Some(thread),
        })
    }

    /// Stops every device (drained as at any stop), ends an open pause with its drop record,
    /// and lets go of the sink; the errors the devices ended with.
    pub fn stop(mut self) -> Vec<String> {
        let errors = self.control.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        errors
    }
}

impl PauseControl {
    /// The counters' state now.
    pub fn state(&self) -> CounterState {
        match &*lock(&self.state) {
            (CounterState::Paused { .. }, Some(until)) => CounterState::Paused {
                left: until.saturating_duration_since(Instant::now()),
            },
            (s, _) => s.clone(),
        }
    }

    /// Devices managed.
    pub fn devices(&self) -> usize {
        lock(&self.inner).slots.len()
    }

    fn publish(&self, inner: &Inner) {
        let s = match &inner.phase {
            Phase::Sampling => (CounterState::Sampling, None),
            Phase::Paused { until } => (
                CounterState::Paused {
                    left: until.saturating_duration_since(Instant::now()),
                },
                Some(*until),
            ),
            Phase::Waiting { why, .. } => (CounterState::Waiting { why: why.clone() }, None),
        };
        *lock(&self.state) = s;
    }

    fn say(inner: &Inner, msg: String) {
        if let Some(out) = &inner.out {
            let _ = out.send(SinkMsg::Message(msg));
        }
    }

    /// Releases the counters of every device for `d` (at once: returns once every device's
    /// PM sampling is disabled), or moves the end of a pause already on.
    pub fn pause(&self, d: Duration) -> Result<PauseDone, PauseRefused> {
        if d > MAX_PAUSE {
            return Err(PauseRefused::TooLong { asked: d });
        }
        if d.is_zero() {
            return Err(PauseRefused::Zero);
        }
        let mut inner = lock(&self.inner);
        if inner.ended {
            return Err(PauseRefused::Stopping);
        }
        if inner.slots.is_empty() {
            return Err(PauseRefused::NothingSamples {
                why: "no GPU counters are being sampled".into(),
            });
        }
        // Waiting for the counters after a pause, some devices may sample again: they are
        // released too.
        let errors = self.release(&mut inner);
        inner.errors.extend(errors);
        // The time asked for is counted from the release.
        let until = Instant::now() + d;
        let done = match inner.phase {
            Phase::Sampling => PauseDone::Released {
                devices: inner.slots.len(),
                for_: d,
            },
            Phase::Paused { .. } | Phase::Waiting { .. } => PauseDone::Extended { for_: d },
        };
        inner.phase = Phase::Paused { until };
        Self::say(
            &inner,
            format!(
                "GPU counters released for {} (a pause); NVML goes on",
                crate::args::duration::flag_text(d)
            ),
        );
        self.publish(&inner);
        self.wake.notify_all();
        Ok(done)
    }

    /// Stops every device's pipeline and waits for it: its counters are released.
    fn release(&self, inner: &mut Inner) -> Vec<String> {
        for s in &inner.slots {
            if let Some((stop, _)) = &s.run {
                stop.store(true, Ordering::SeqCst);
            }
        }
        let mut errors = Vec::new();
        for s in &mut inner.slots {
            if let Some((_, run)) = s.run.take() {
                match run.handle.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => errors.push(error_chain(&e)),
                    Err(p) => errors.push(format!(
                        "{}: the sampling thread panicked: {}",
                        s.device,
                        panic_message(p.as_ref())
                    )),
                }
                s.released_ns = Some((self.now_ns)());
            }
        }
        errors
    }

    /// Ends a pause now: arms every device again; says whether sampling resumed.
    pub fn resume(&self) -> Result<PauseDone, PauseRefused> {
        let mut inner = lock(&self.inner);
        if inner.ended {
            return Err(PauseRefused::Stopping);
        }
        match inner.phase {
            Phase::Sampling => return Err(PauseRefused::NotPaused),
            Phase::Paused { .. } | Phase::Waiting { .. } => {}
        }
        self.try_resume(&mut inner, RETRY.0);
        let done = match &inner.phase {
            Phase::Waiting { why, .. } => PauseDone::Waiting { why: why.clone() },
            _ => PauseDone::Resumed,
        };
        self.wake.notify_all();
        Ok(done)
    }

    /// Arms each released device; a device whose counters cannot be had is tried again after
    /// `wait`.
    fn try_resume(&self, inner: &mut Inner, wait: Duration) {
        let mut refused = None;
        let mut resumed = 0;
        let mut drops = Vec::new();
        for s in &mut inner.slots {
            if s.run.is_some() || s.failed {
                continue;
            }
            let stop = Arc::new(AtomicBool::new(false));
            match s.starter.start(Arc::clone(&stop)) {
                Ok(run) => {
                    if let Some(from) = s.released_ns.take() {
                        drops.push(DropRecord {
                            device: s.device,
                            start_ns: from,
                            end_ns: run.started_ns.max(from),
                            reason: DropReason::Paused,
                            lost_samples: None,
                        });
                    }
                    s.run = Some((stop, run));
                    s.resumed = true;
                    resumed += 1;
                }
                Err(e) => {
                    refused.get_or_insert_with(|| format!("{}: {}", s.device, error_chain(&e)));
                }
            }
        }
        if let Some(out) = &inner.out
            && !drops.is_empty()
        {
            let _ = out.send(SinkMsg::Drops(drops));
        }
        match refused {
            None => {
                inner.phase = Phase::Sampling;
                Self::say(
                    inner,
                    "the pause is over: sampling the GPU counters again".into(),
                );
            }
            Some(why) => {
                let first = !matches!(inner.phase, Phase::Waiting { .. });
                if first {
                    Self::say(
                        inner,
                        format!(
                            "the pause is over, but the GPU counters cannot be had ({why}); \
{resumed} GPU(s) sample again, trying the others every {} to {}",
                            crate::args::duration::flag_text(RETRY.0),
                            crate::args::duration::flag_text(RETRY.1)
                        ),
                    );
                }
                inner.phase = Phase::Waiting {
                    next: Instant::now() + wait,
                    wait,
                    why,
                };
            }
        }
        self.publish(inner);
    }

    /// The thread: ends pauses when their time is up, retries the counters while they are
    /// held elsewhere.
    fn watch(&self) {
        let mut inner = lock(&self.inner);
        while !inner.ended {
            let now = Instant::now();
            let (due, wait) = match &inner.phase {
                Phase::Sampling => (None, Duration::from_millis(500)),
                Phase::Paused { until } => (
                    (now >= *until).then_some(RETRY.0),
                    until.saturating_duration_since(now),
                ),
                Phase::Waiting { next, wait, .. } => (
                    (now >= *next).then_some((*wait * 2).min(RETRY.1)),
                    next.saturating_duration_since(now),
                ),
            };
            if let Some(next_wait) = due {
                self.try_resume(&mut inner, next_wait);
                continue;
            }
            self.take_back_refused_starts(&mut inner);
            inner = self
                .wake
                .wait_timeout(inner, wait.min(Duration::from_millis(500)))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Whether a device's pipeline ended by itself (not by a pause): its thread is finished.
    pub fn ended_early(&self) -> bool {
        lock(&self.inner).slots.iter().any(|s| {
            s.failed || (!s.resumed && s.run.as_ref().is_some_and(|(_, r)| r.handle.is_finished()))
        })
    }

    /// The first error a device's pipeline ended with after a pause, if any.
    pub fn error(&self) -> Option<String> {
        lock(&self.inner).errors.first().cloned()
    }

    fn stop(&self) -> Vec<String> {
        let mut inner = lock(&self.inner);
        inner.ended = true;
        // A pause still on at the end: its hole ends with the recording.
        let now = (self.now_ns)();
        let drops: Vec<DropRecord> = inner
            .slots
            .iter_mut()
            .filter(|s| s.run.is_none())
            .filter_map(|s| {
                let from = s.released_ns.take()?;
                Some(paused_drop(s.device, from, now))
            })
            .collect();
        if let Some(out) = &inner.out
            && !drops.is_empty()
        {
            let _ = out.send(SinkMsg::Drops(drops));
        }
        let mut errors = std::mem::take(&mut inner.errors);
        errors.extend(self.release(&mut inner));
        inner.phase = Phase::Sampling;
        // The sink ends when every sender is gone: this one and the starters'.
        inner.out = None;
        inner.slots.clear();
        self.publish(&inner);
        self.wake.notify_all();
        errors
    }

    /// A device started again after a pause whose pipeline could not start sampling because
    /// the counters were taken in the instant between arming and starting: the pause goes on
    /// for it, and it is tried again.
    fn take_back_refused_starts(&self, inner: &mut Inner) {
        let mut why = None;
        let mut inner_errors = Vec::new();
        for s in &mut inner.slots {
            let refused = s.resumed && s.run.as_ref().is_some_and(|(_, r)| r.handle.is_finished());
            if !refused {
                continue;
            }
            let Some((_, run)) = s.run.take() else {
                continue;
            };
            match run.handle.join() {
                Ok(Err(PipelineError::Start { source, .. })) if source.counters_out_of_reach() => {
                    s.starter.forget_error();
                    s.released_ns = Some(run.started_ns);
                    why.get_or_insert_with(|| format!("{}: {source}", s.device));
                }
                // Anything else ends the device as it would without a pause.
                Ok(Err(e)) => {
                    inner_errors.push(error_chain(&e));
                    s.failed = true;
                }
                Ok(Ok(())) => s.failed = true,
                Err(p) => {
                    inner_errors.push(format!(
                        "{}: the sampling thread panicked: {}",
                        s.device,
                        panic_message(p.as_ref())
                    ));
                    s.failed = true;
                }
            }
        }
        inner.errors.extend(inner_errors);
        if let Some(why) = why {
            inner.phase = Phase::Waiting {
                next: Instant::now() + RETRY.0,
                wait: RETRY.0,
                why,
            };
            self.publish(inner);
        }
    }
}

/// A session's handle on its counters: pause, resume, state; or, where nothing samples the
/// counters, why (a pause is then refused with it). Clones share one set of devices.
#[derive(Clone)]
pub struct CounterSharing {
    control: Option<Arc<PauseControl>>,
    pausable: Arc<Mutex<Option<Pausable>>>,
    why_none: Arc<str>,
}

impl CounterSharing {
    pub fn new(p: Pausable) -> Self {
        CounterSharing {
            control: Some(Arc::clone(&p.control)),
            pausable: Arc::new(Mutex::new(Some(p))),
            why_none: Arc::from(""),
        }
    }

    /// Nothing samples the counters (`why`).
    pub fn none(why: String) -> Self {
        CounterSharing {
            control: None,
            pausable: Arc::new(Mutex::new(None)),
            why_none: Arc::from(why),
        }
    }

    /// See [`PauseControl::pause`]; refused when nothing samples the counters.
    pub fn pause(&self, d: Duration) -> Result<PauseDone, PauseRefused> {
        if d > MAX_PAUSE {
            return Err(PauseRefused::TooLong { asked: d });
        }
        match &self.control {
            Some(c) => c.pause(d),
            None => Err(PauseRefused::NothingSamples {
                why: self.why_none.to_string(),
            }),
        }
    }

    /// See [`PauseControl::resume`].
    pub fn resume(&self) -> Result<PauseDone, PauseRefused> {
        match &self.control {
            Some(c) => c.resume(),
            None => Err(PauseRefused::NothingSamples {
                why: self.why_none.to_string(),
            }),
        }
    }

    /// The counters' state; `None` when nothing samples them.
    pub fn state(&self) -> Option<CounterState> {
        self.control.as_ref().map(|c| c.state())
    }

    /// Whether device `id` was started again after a pause (its failures are the pause
    /// control's to judge).
    pub fn resumed(&self, id: DeviceId) -> bool {
        self.control.as_ref().is_some_and(|c| {
            lock(&c.inner)
                .slots
                .iter()
                .any(|s| s.device == id && s.resumed)
        })
    }

    /// The `paused` drop records of a pause still on, up to now (what a dump during a pause
    /// shows; the pause's own record comes when it ends).
    pub fn open_pauses(&self) -> Vec<DropRecord> {
        let Some(c) = &self.control else {
            return Vec::new();
        };
        let now = (c.now_ns)();
        lock(&c.inner)
            .slots
            .iter()
            .filter(|s| s.run.is_none())
            .filter_map(|s| {
                let from = s.released_ns?;
                Some(paused_drop(s.device, from, now))
            })
            .collect()
    }

    /// See [`PauseControl::error`].
    pub fn error(&self) -> Option<String> {
        self.control.as_ref().and_then(|c| c.error())
    }

    /// See [`PauseControl::ended_early`].
    pub fn ended_early(&self) -> bool {
        self.control.as_ref().is_some_and(|c| c.ended_early())
    }

    /// See [`Pausable::stop`]; the first call stops, later ones find nothing.
    pub fn stop(&self) -> Vec<String> {
        let p = lock(&self.pausable).take();
        p.map(Pausable::stop).unwrap_or_default()
    }
}

/// The drop of a device whose counters were released at `from` and are had again (or the
/// recording ends) at `now`.
fn paused_drop(device: DeviceId, from: i64, now: i64) -> DropRecord {
    DropRecord {
        device,
        start_ns: from,
        end_ns: now.max(from),
        reason: DropReason::Paused,
        lost_samples: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cufall_cupti::{CuptiError, Status};
    use std::sync::atomic::AtomicU32;
    use std::sync::mpsc::{self, Receiver};

    fn busy() -> CuptiError {
        CuptiError::CountersBusy {
            during: "cuptiPmSamplingStart",
            status: Status {
                name: "CUPTI_ERROR_HARDWARE_BUSY".into(),
                code: 27,
                message: String::new(),
            },
        }
    }

    /// A device whose pipeline runs until stopped; `refuse_arm` arms are refused as busy, and
    /// `refuse_start` runs end at once as a start refused as busy.
    #[derive(Clone, Default)]
    struct Fake {
        refuse_arm: Arc<AtomicU32>,
        refuse_start: Arc<AtomicU32>,
        alive: Arc<AtomicU32>,
        starts: Arc<AtomicU32>,
    }

    fn take(n: &AtomicU32) -> bool {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
            .is_ok()
    }

    impl DeviceStarter for Fake {
        fn start(&mut self, stop: Arc<AtomicBool>) -> Result<Running, ArmError> {
            if take(&self.refuse_arm) {
                return Err(ArmError::Cupti(busy()));
            }
            self.starts.fetch_add(1, Ordering::SeqCst);
            Ok(run(self, stop))
        }
    }

    fn run(f: &Fake, stop: Arc<AtomicBool>) -> Running {
        let refused = take(&f.refuse_start);
        let alive = Arc::clone(&f.alive);
        alive.fetch_add(1, Ordering::SeqCst);
        let handle = std::thread::spawn(move || {
            while !refused && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
            }
            alive.fetch_sub(1, Ordering::SeqCst);
            if refused {
                return Err(PipelineError::Start {
                    device: DeviceId(0),
                    source: busy(),
                });
            }
            Ok(())
        });
        Running {
            handle,
            started_ns: crate::now_unix_ns(),
        }
    }

    fn started(f: &Fake) -> (Pausable, Receiver<SinkMsg>) {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let dev = Device {
            id: DeviceId(0),
            stop: Arc::clone(&stop),
            running: run(f, stop),
            starter: Box::new(f.clone()),
        };
        (Pausable::new(vec![dev], tx).unwrap(), rx)
    }

    fn paused_drops(rx: &Receiver<SinkMsg>) -> Vec<DropRecord> {
        rx.try_iter()
            .filter_map(|m| match m {
                SinkMsg::Drops(d) => Some(d),
                _ => None,
            })
            .flatten()
            .filter(|d| d.reason == DropReason::Paused)
            .collect()
    }

    fn wait_for(what: &str, ok: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !ok() {
            assert!(t0.elapsed() < Duration::from_secs(20), "timed out: {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_recording_that_ends_during_a_pause_records_the_pause_up_to_its_end() {
        let f = Fake::default();
        let (p, rx) = started(&f);
        let c = Arc::clone(&p.control);
        assert_eq!(
            c.pause(Duration::from_secs(60)),
            Ok(PauseDone::Released {
                devices: 1,
                for_: Duration::from_secs(60)
            })
        );
        assert_eq!(f.alive.load(Ordering::SeqCst), 0);
        assert!(
            matches!(c.state(), CounterState::Paused { left } if left > Duration::from_secs(50))
        );
        assert!(!c.ended_early());
        std::thread::sleep(Duration::from_millis(50));
        let t_stop = crate::now_unix_ns();
        assert!(p.stop().is_empty());
        let d = paused_drops(&rx);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].end_ns >= t_stop && d[0].end_ns - d[0].start_ns >= 50_000_000);
        assert_eq!(f.starts.load(Ordering::SeqCst), 0);
        // The sink's sender is let go: the channel ends.
        assert!(rx.recv().is_err());
    }

    #[test]
    fn counters_taken_again_between_arming_and_starting_are_waited_for() {
        let f = Fake::default();
        let (p, rx) = started(&f);
        let c = Arc::clone(&p.control);
        // The first arm after the pause is refused, the next start too; then the counters are
        // had. Set before the pause: a 10 ms pause can end before the next line runs.
        f.refuse_arm.store(1, Ordering::SeqCst);
        f.refuse_start.store(1, Ordering::SeqCst);
        c.pause(Duration::from_millis(10)).unwrap();
        wait_for("the counters had again", || {
            f.alive.load(Ordering::SeqCst) == 1 && c.state() == CounterState::Sampling
        });
        assert_eq!(f.starts.load(Ordering::SeqCst), 2);
        assert!(
            !c.ended_early(),
            "a refused start is retried, not a failure"
        );
        assert_eq!(c.error(), None);
        let d = paused_drops(&rx);
        // One hole: the pause up to the refused start, then up to the start that held.
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0].end_ns, d[1].start_ns);
        assert_eq!(c.resume(), Err(PauseRefused::NotPaused));
        assert!(p.stop().is_empty());
        assert_eq!(f.alive.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn nothing_to_pause_and_too_long_are_refused() {
        let none = CounterSharing::none("NVML-only recording was asked for (--nvml-only)".into());
        assert_eq!(
            none.pause(Duration::from_secs(10)).unwrap_err().to_string(),
            "nothing to pause: NVML-only recording was asked for (--nvml-only)"
        );
        assert_eq!(
            none.pause(Duration::from_secs(2 * 86_400))
                .unwrap_err()
                .to_string(),
            "a pause of 2days is longer than a day: give --for 24h or less (`resume` ends a \
pause early)"
        );
        assert!(none.state().is_none() && none.stop().is_empty());
        let f = Fake::default();
        let (p, _rx) = started(&f);
        let s = CounterSharing::new(p);
        assert_eq!(s.pause(Duration::ZERO), Err(PauseRefused::Zero));
        assert_eq!(s.resume(), Err(PauseRefused::NotPaused));
        assert_eq!(f.alive.load(Ordering::SeqCst), 1);
        assert!(s.stop().is_empty());
        assert_eq!(s.pause(Duration::from_secs(1)), Err(PauseRefused::Stopping));
    }
}
