//! Buffering and delivery: every thread of the program encodes its records into a buffer of its
//! own (an uncontended lock on the hot path), and one flusher thread per process moves the
//! buffers to the recorder's Unix socket every [`FLUSH_PERIOD`], at exit, and whenever a buffer
//! passes [`WAKE_BYTES`].
//!
//! Memory is bounded without losing records: a thread whose buffer reaches [`STALL_BYTES`] waits
//! for the flusher (which only waits for the socket). If the recorder goes away, capture stops
//! and nothing more is buffered.
//!
//! A forked child must not write into its parent's stream: it gets a fresh [`Hub`] of its own
//! (a new generation), opens its own connection, and leaves the parent's buffers untouched
//! (their locks may have been held by threads that do not exist in the child).

use cufall_capture::{CaptureEventKind, Frame, Kinds, PROTOCOL_VERSION, RangeTrigger, encode};
use std::cell::RefCell;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// How often buffered records are sent.
pub const FLUSH_PERIOD: Duration = Duration::from_millis(50);
/// A buffer this large wakes the flusher early.
pub const WAKE_BYTES: usize = 1 << 20;
/// A buffer this large makes its thread wait for the flusher.
pub const STALL_BYTES: usize = 32 << 20;

type Buffer = Arc<Mutex<Vec<u8>>>;

/// The per-process state of capture.
pub struct Hub {
    pub generation: u64,
    pub kinds: Kinds,
    /// What opens a capture window in this program (`--capture-range`), if anything.
    pub range: Option<RangeTrigger>,
    socket: Option<PathBuf>,
    /// cufall's own calibration process ([`cufall_capture::ENV_CALIBRATE`]): no connection;
    /// the flusher takes the buffers as usual and discards them.
    pub calibrating: bool,
    /// Set when capture cannot deliver (no recorder, or it went away): records are discarded
    /// before they are encoded.
    dead: AtomicBool,
    buffers: Mutex<Vec<Buffer>>,
    /// String definitions in id order, sent before any buffer in each round and all at once
    /// to a new connection.
    defs: Mutex<Vec<(u32, String)>>,
    next_id: AtomicU32,
    wake: Condvar,
    wake_lock: Mutex<WakeState>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    started: AtomicBool,
}

#[derive(Default)]
struct WakeState {
    poke: bool,
    closing: bool,
    rounds_done: u64,
}

static CURRENT: AtomicPtr<Hub> = AtomicPtr::new(std::ptr::null_mut());
static GENERATION: AtomicU64 = AtomicU64::new(0);
static INIT: Mutex<()> = Mutex::new(());

/// The hub of this process, made on first use from the environment.
pub fn hub() -> &'static Hub {
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        return deref(p);
    }
    let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        return deref(p);
    }
    install(Hub::from_env(GENERATION.load(Ordering::Relaxed), None))
}

fn install(hub: Hub) -> &'static Hub {
    let leaked: &'static mut Hub = Box::leak(Box::new(hub));
    CURRENT.store(leaked as *mut Hub, Ordering::Release);
    leaked
}

#[allow(unsafe_code)]
fn deref(p: *mut Hub) -> &'static Hub {
    // SAFETY: CURRENT only ever holds pointers from `Box::leak`, which are never freed, so they
    // are valid for the rest of the process.
    unsafe { &*p }
}

/// Called in the child right after `fork`: a new hub that inherits the kinds, the socket path
/// and the string definitions (when their lock is free), and none of the parent's records.
pub fn after_fork_in_child() {
    let old = CURRENT.load(Ordering::Acquire);
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed) + 1;
    let defs = if old.is_null() {
        None
    } else {
        deref(old).defs.try_lock().ok().map(|d| d.clone())
    };
    let next_id = if old.is_null() {
        1
    } else {
        deref(old).next_id.load(Ordering::Relaxed)
    };
    let hub = Hub::from_env(generation, defs);
    hub.next_id.store(next_id.max(1), Ordering::Relaxed);
    install(hub);
}

impl Hub {
    fn from_env(generation: u64, defs: Option<Vec<(u32, String)>>) -> Hub {
        let socket = std::env::var_os(cufall_capture::ENV_SOCKET).map(PathBuf::from);
        let kinds = std::env::var(cufall_capture::ENV_KINDS)
            .ok()
            .and_then(|k| Kinds::parse(&k).ok())
            .unwrap_or(Kinds::DEFAULT);
        let range = std::env::var(cufall_capture::ENV_RANGE)
            .ok()
            .and_then(|r| RangeTrigger::parse(&r).ok());
        let calibrating = std::env::var_os(cufall_capture::ENV_CALIBRATE).is_some_and(|v| v == "1");
        Hub {
            generation,
            kinds,
            range,
            calibrating,
            dead: AtomicBool::new((socket.is_none() && !calibrating) || kinds.is_empty()),
            socket,
            buffers: Mutex::new(Vec::new()),
            defs: Mutex::new(defs.unwrap_or_default()),
            next_id: AtomicU32::new(1),
            wake: Condvar::new(),
            wake_lock: Mutex::new(WakeState::default()),
            flusher: Mutex::new(None),
            started: AtomicBool::new(false),
        }
    }

    /// Whether records should be made at all.
    pub fn live(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }

    /// Starts the flusher thread once (it opens the connection).
    pub fn start(&'static self) {
        if !self.live() {
            return;
        }
        let mut slot = self.flusher.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return;
        }
        self.started.store(true, Ordering::Relaxed);
        match std::thread::Builder::new()
            .name("cufall-capture".into())
            .spawn(move || self.flusher_main())
        {
            Ok(h) => *slot = Some(h),
            Err(_) => self.dead.store(true, Ordering::Relaxed),
        }
    }

    /// Defines a string and returns its id (never 0).
    pub fn define(&self, text: &str) -> u32 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut d) = self.defs.lock() {
            d.push((id, text.to_string()));
        }
        id
    }

    /// Appends one frame to the calling thread's buffer.
    pub fn send(&'static self, frame: &Frame<'_>) {
        if !self.live() {
            return;
        }
        if !self.started.load(Ordering::Relaxed) {
            self.start();
        }
        with_buffer(self, |buf| encode(frame, buf));
    }

    /// Appends a frame and wakes the sender at once (window edges: the recorder holds the
    /// counters until it knows whether they fall in a window).
    pub fn send_urgent(&'static self, frame: &Frame<'_>) {
        self.send(frame);
        self.poke();
    }

    /// Appends a status frame now.
    pub fn status(&'static self, event: CaptureEventKind, count: u64, detail: &str) {
        self.send(&Frame::Status {
            t_ns: now_ns(),
            event: event.as_str().into(),
            count,
            detail: detail.into(),
        });
    }

    fn register(&self) -> Buffer {
        let b: Buffer = Arc::new(Mutex::new(Vec::with_capacity(64 << 10)));
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&b));
        b
    }

    fn poke(&self) {
        if let Ok(mut w) = self.wake_lock.lock() {
            w.poke = true;
        }
        self.wake.notify_all();
    }

    /// Waits until the flusher has completed a round that started after this call.
    fn wait_for_round(&self, timeout: Duration) {
        let Ok(mut w) = self.wake_lock.lock() else {
            return;
        };
        let target = w.rounds_done + 2;
        w.poke = true;
        self.wake.notify_all();
        let deadline = std::time::Instant::now() + timeout;
        while w.rounds_done < target && self.live() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match self.wake.wait_timeout(w, left.min(FLUSH_PERIOD)) {
                Ok((g, _)) => w = g,
                Err(_) => return,
            }
        }
    }

    /// Sends a goodbye, runs a last round and stops the flusher (at process exit).
    pub fn close(&'static self, timeout: Duration) {
        if !self.live() {
            return;
        }
        self.send(&Frame::Bye { t_ns: now_ns() });
        if let Ok(mut w) = self.wake_lock.lock() {
            w.closing = true;
        }
        self.wait_for_round(timeout);
        // Nothing is sent after the goodbye: later records are not made.
        self.dead.store(true, Ordering::Relaxed);
    }

    fn flusher_main(&'static self) {
        // The calibration process keeps no connection: what it buffers is discarded.
        let mut conn = match (&self.socket, self.calibrating) {
            (_, true) => None,
            (Some(path), false) => match UnixStream::connect(path) {
                Ok(c) => Some(c),
                Err(_) => {
                    // No recorder: the program runs on without capture; nothing else can be
                    // told.
                    self.dead.store(true, Ordering::Relaxed);
                    return;
                }
            },
            (None, false) => return,
        };
        let mut out = Vec::with_capacity(1 << 20);
        encode(
            &Frame::Hello {
                version: PROTOCOL_VERSION,
                pid: std::process::id(),
                ppid: std::os::unix::process::parent_id(),
                kinds: self.kinds,
                exe: std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
                    .into(),
            },
            &mut out,
        );
        let mut defs_sent = 0usize;
        loop {
            let closing = {
                let Ok(w) = self.wake_lock.lock() else { break };
                let (mut w, _) = match self
                    .wake
                    .wait_timeout_while(w, FLUSH_PERIOD, |w| !w.poke && !w.closing)
                {
                    Ok(r) => r,
                    Err(_) => break,
                };
                w.poke = false;
                w.closing
            };
            if let Ok(defs) = self.defs.lock() {
                for (id, text) in &defs[defs_sent..] {
                    encode(
                        &Frame::String {
                            id: *id,
                            text: text.as_str().into(),
                        },
                        &mut out,
                    );
                }
                defs_sent = defs.len();
            }
            {
                let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
                buffers.retain(|b| {
                    if let Ok(mut v) = b.lock() {
                        out.extend_from_slice(&v);
                        v.clear();
                    }
                    // A buffer only the registry holds belongs to a thread that has ended.
                    Arc::strong_count(b) > 1
                });
            }
            if !out.is_empty() {
                if let Some(conn) = &conn
                    && crate::ffi::send_all(conn, &out).is_err()
                {
                    self.dead.store(true, Ordering::Relaxed);
                    break;
                }
                out.clear();
                if out.capacity() > (8 << 20) {
                    out.shrink_to(1 << 20);
                }
            }
            if let Ok(mut w) = self.wake_lock.lock() {
                w.rounds_done += 1;
            }
            self.wake.notify_all();
            if closing {
                if let Some(conn) = conn.as_mut() {
                    let _ = conn.flush();
                    let _ = conn.shutdown(std::net::Shutdown::Both);
                }
                break;
            }
        }
        if let Ok(mut w) = self.wake_lock.lock() {
            w.rounds_done = u64::MAX / 2;
        }
        self.wake.notify_all();
    }
}

struct Local {
    generation: u64,
    buf: Buffer,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// A buffer of the calling thread that the flusher never sees: while it lives, what the thread
/// sends is encoded and buffered exactly as usual, and then discarded. The calibration times
/// the real handlers against it without putting its records in the trace.
pub struct Scratch {
    buf: Buffer,
}

impl Scratch {
    /// Gives the calling thread a scratch buffer in place of its own (which it must not have
    /// used: a thread made for the calibration).
    pub fn install(hub: &Hub) -> Scratch {
        let buf: Buffer = Arc::new(Mutex::new(Vec::with_capacity(256 << 10)));
        let local = Local {
            generation: hub.generation,
            buf: Arc::clone(&buf),
        };
        let _ = LOCAL.try_with(|cell| *cell.borrow_mut() = Some(local));
        Scratch { buf }
    }

    /// Discards what was buffered; returns how many bytes that was.
    pub fn clear(&self) -> usize {
        self.buf.lock().map_or(0, |mut b| {
            let n = b.len();
            b.clear();
            n
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The thread's next record registers an ordinary buffer.
        let _ = LOCAL.try_with(|cell| *cell.borrow_mut() = None);
    }
}

/// Runs `f` on the calling thread's buffer, then applies the size rules.
fn with_buffer(hub: &'static Hub, f: impl FnOnce(&mut Vec<u8>)) {
    let mut f = Some(f);
    let done = LOCAL.try_with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|l| l.generation != hub.generation) {
            *slot = Some(Local {
                generation: hub.generation,
                buf: hub.register(),
            });
        }
        let local = slot.as_ref()?;
        let mut b = local.buf.lock().ok()?;
        (f.take()?)(&mut b);
        let len = b.len();
        // The buffer itself is needed only to wait on it (rare): no reference count otherwise.
        Some((len, (len >= STALL_BYTES).then(|| Arc::clone(&local.buf))))
    });
    let (len, buf) = match (done, f.take()) {
        (Ok(Some(r)), _) => r,
        (_, Some(f)) => {
            // Thread-local storage is being torn down (the thread is exiting): a fresh buffer
            // that the flusher sends once and then forgets.
            let b = hub.register();
            if let Ok(mut v) = b.lock() {
                f(&mut v);
            }
            hub.poke();
            return;
        }
        _ => return,
    };
    if len >= WAKE_BYTES {
        hub.poke();
    }
    if let Some(buf) = buf {
        // Wait for the flusher rather than grow without bound or drop records.
        while hub.live() && buf.lock().map(|b| b.len() >= WAKE_BYTES).unwrap_or(false) {
            hub.poke();
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME): the clock of CUPTI's records and of the
/// counter samples.
pub fn now_ns() -> i64 {
    crate::ffi::realtime_ns()
}
