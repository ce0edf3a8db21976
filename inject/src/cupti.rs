//! GPU activity through CUPTI's Activity API: kernels, copies, memsets, whole-graph launches and
//! (on request) CUDA runtime/driver calls.
//!
//! CUPTI is bound by soname, never by path: a process that already has a CUPTI (PyTorch links
//! its own wheel's copy) must be traced through that copy; a second copy captures nothing
//! (measured on an H200). The record layouts are CUPTI 13.0's (cudarc's bindings); only fields
//! of the stable prefix every 13.x version shares are read. CUPTI's timestamps are CLOCK_REALTIME
//! nanoseconds on Linux, the clock of the counter samples, so they are sent unchanged.
//!
//! <https://docs.nvidia.com/cupti/api/group__CUPTI__ACTIVITY__API.html>
#![allow(unsafe_code)]

use crate::delivery::{Hub, hub};
use cudarc::cupti::sys::{
    CUpti_Activity, CUpti_ActivityAPI, CUpti_ActivityContext, CUpti_ActivityDevice5,
    CUpti_ActivityGraphTrace2, CUpti_ActivityKernel10, CUpti_ActivityKind, CUpti_ActivityMemcpy6,
    CUpti_ActivityMemset4,
};
use cufall_capture::{
    Activity, CaptureEventKind, Frame, Kinds, WireActivityKind, WireApiCall, WireApiDomain,
};
use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::ptr::addr_of;
use std::sync::{Mutex, OnceLock};

type Res = u32;
const SUCCESS: Res = 0;

type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
/// `CUpti_CallbackFunc`: userdata, domain, callback id, `CUpti_CallbackData*`.
pub type CallbackFn = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// The CUPTI entry points capture uses, from the process's own CUPTI.
struct Api {
    _lib: Library,
    soname: &'static str,
    get_version: unsafe extern "C" fn(*mut u32) -> Res,
    register_callbacks: unsafe extern "C" fn(Option<RequestFn>, Option<CompleteFn>) -> Res,
    enable: unsafe extern "C" fn(u32) -> Res,
    disable: unsafe extern "C" fn(u32) -> Res,
    next_record: unsafe extern "C" fn(*mut u8, usize, *mut *mut CUpti_Activity) -> Res,
    dropped: unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> Res,
    flush_all: unsafe extern "C" fn(u32) -> Res,
    flush_period: Option<unsafe extern "C" fn(u32) -> Res>,
    set_thread_id_type: Option<unsafe extern "C" fn(u32) -> Res>,
    result_string: unsafe extern "C" fn(Res, *mut *const c_char) -> Res,
    callback_name: Option<unsafe extern "C" fn(u32, u32, *mut *const c_char) -> Res>,
    subscribe: Option<unsafe extern "C" fn(*mut *mut c_void, CallbackFn, *mut c_void) -> Res>,
    enable_callback: Option<unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> Res>,
    graph_id: Option<unsafe extern "C" fn(*mut c_void, *mut u32) -> Res>,
    graph_exec_id: Option<unsafe extern "C" fn(*mut c_void, *mut u32) -> Res>,
    set_attribute: Option<unsafe extern "C" fn(u32, *mut usize, *mut c_void) -> Res>,
    enable_hw_trace: Option<unsafe extern "C" fn(u8) -> Res>,
}

static API: OnceLock<Api> = OnceLock::new();

/// Why the process's CUPTI cannot capture; the message goes to the recorder as the status
/// line's detail.
#[derive(Debug, thiserror::Error)]
pub enum CuptiError {
    #[error(
        "CUPTI 13 could not be loaded ({tried}); kernel capture needs the CUDA 13 toolkit's libcupti on the library path (e.g. LD_LIBRARY_PATH=/usr/local/cuda/lib64)"
    )]
    Load {
        /// Each soname tried, with why it did not load.
        tried: String,
    },
    #[error("{soname} lacks {symbol}: {source}")]
    Symbol {
        soname: &'static str,
        symbol: &'static str,
        #[source]
        source: libloading::Error,
    },
    #[error("{soname} lacks cuptiSubscribe/cuptiEnableCallback")]
    NoCallbacks { soname: &'static str },
    #[error(
        "cuptiSubscribe failed ({why}): another CUPTI tool in the program holds the one subscriber CUPTI allows"
    )]
    Subscribe { why: String },
    #[error("cuptiEnableCallback for domain {domain} callback {cbid} failed: {why}")]
    EnableCallback { domain: u32, cbid: u32, why: String },
    #[error("cuptiActivityRegisterCallbacks failed: {why}")]
    RegisterCallbacks { why: String },
    #[error("enabling {kind:?} failed: {why}")]
    EnableKind {
        kind: CUpti_ActivityKind,
        why: String,
    },
    #[error("disabling activity kind {kind} failed: {why}")]
    DisableKind { kind: u32, why: String },
    #[error("CUPTI activity tracing was never set up in this process")]
    NotAttached,
    /// No activity kind asked for could be enabled: each one's failure.
    #[error("{}", joined(.0))]
    NoKind(Vec<CuptiError>),
}

/// The failures of several kinds, in one line.
fn joined(errors: &[CuptiError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The process's CUPTI, loaded on first use.
fn api() -> Result<&'static Api, CuptiError> {
    match API.get() {
        Some(a) => Ok(a),
        None => {
            let a = load()?;
            Ok(API.get_or_init(|| a))
        }
    }
}

/// Subscribes `callback` as CUPTI's one callback subscriber of the process and enables it for
/// `(domain, callback id)` pairs. Fails when another tool holds the subscriber.
pub fn subscribe(callback: CallbackFn, wanted: &[(u32, u32)]) -> Result<(), CuptiError> {
    let api = api()?;
    let (Some(subscribe), Some(enable)) = (api.subscribe, api.enable_callback) else {
        return Err(CuptiError::NoCallbacks { soname: api.soname });
    };
    let mut subscriber: *mut c_void = std::ptr::null_mut();
    // SAFETY: `callback` has CUPTI's callback signature and never unwinds.
    let r = unsafe { subscribe(&mut subscriber, callback, std::ptr::null_mut()) };
    if r != SUCCESS {
        return Err(CuptiError::Subscribe {
            why: api.describe(r),
        });
    }
    for (domain, cbid) in wanted {
        // SAFETY: plain call with the subscriber CUPTI just returned.
        let r = unsafe { enable(1, subscriber, *domain, *cbid) };
        if r != SUCCESS {
            return Err(CuptiError::EnableCallback {
                domain: *domain,
                cbid: *cbid,
                why: api.describe(r),
            });
        }
    }
    Ok(())
}

/// CUPTI's id of a CUDA graph (`exec` false) or of an instantiated graph (`exec` true).
///
/// # Safety
/// `handle` must be a live `CUgraph` (or `CUgraphExec` when `exec`).
pub unsafe fn graph_id(handle: *mut c_void, exec: bool) -> Option<u32> {
    let api = api().ok()?;
    let f = if exec {
        api.graph_exec_id?
    } else {
        api.graph_id?
    };
    let mut id = 0u32;
    // SAFETY: `handle` is live (the caller's promise); CUPTI writes the id.
    (unsafe { f(handle, &mut id) } == SUCCESS).then_some(id)
}
/// The activity kinds [`attach`] enabled for the program's records (not the device and context
/// records), which [`set_tracing`] turns off and on again.
static TRACED: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Kernel, copy, memset and graph records handed to the hub since the last
/// [`take_traced_records`].
static TRACED_RECORDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Turns the traced activity kinds off (`on` false) or on again: the capture calibration's
/// switch (`crate::calibrate`), timing the same launches with tracing and without.
pub fn set_tracing(on: bool) -> Result<(), CuptiError> {
    let api = API.get().ok_or(CuptiError::NotAttached)?;
    let kinds = TRACED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if kinds.is_empty() {
        return Err(CuptiError::NotAttached);
    }
    for k in kinds {
        // SAFETY: plain calls with an activity kind `attach` enabled.
        let r = unsafe {
            if on {
                (api.enable)(k)
            } else {
                (api.disable)(k)
            }
        };
        if r != SUCCESS {
            return Err(CuptiError::DisableKind {
                kind: k,
                why: api.describe(r),
            });
        }
    }
    Ok(())
}

/// Hands over every buffered record now (the caller has waited for its GPU work) without
/// stopping the periodic flushes; returns the kernel, copy, memset and graph records handed to
/// the hub since the last call.
pub fn take_traced_records() -> u64 {
    flush_with(FLUSH_FORCED);
    TRACED_RECORDS.swap(0, std::sync::atomic::Ordering::Relaxed)
}

/// Serialises flushes: concurrent `cuptiActivityFlushAll` calls can deadlock.
static FLUSH: Mutex<()> = Mutex::new(());
/// The process that set CUPTI up. A forked child inherits the library's state (and possibly a
/// lock held by a thread that does not exist in it) but not a usable CUPTI: it never flushes.
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Set at exit: the periodic flush thread stops before CUPTI and CUDA are torn down.
static STOP_FLUSHES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Names already sent: kernel-name pointers (CUPTI owns them for the process's life) and API
/// callback ids, each to its string id (`None`: an API call capture leaves out).
static NAMES: Mutex<Option<Names>> = Mutex::new(None);

#[derive(Default)]
struct Names {
    kernels: HashMap<usize, u32>,
    api: HashMap<(u8, u32), Option<u32>>,
}

const SONAMES: [&str; 1] = ["libcupti.so.13"];
const BUFFER_BYTES: usize = 8 << 20;
const FLUSH_PERIOD_MS: u32 = 100;
/// How often capture asks CUPTI to hand over its partly filled buffers of complete records, so
/// records reach the recorder while the program runs (CUPTI's own flush period hands over full
/// buffers only: a program killed after 10 s of matmuls had delivered no kernel record). Overridden by
/// [`ENV_FORCED_FLUSH_MS`] (0 turns it off), for measuring its cost.
const FORCED_FLUSH_MS: u64 = 100;
/// Environment variable overriding [`FORCED_FLUSH_MS`].
pub const ENV_FORCED_FLUSH_MS: &str = "CUFALL_CAPTURE_FLUSH_MS";
/// Environment variable naming CUPTI settings to try, for measuring what each costs
/// (`scripts/gpu/overhead.sh`): `per-thread-buffers` (CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER),
/// `hw-trace` (cuptiActivityEnableHWTrace), `process-thread-ids` (CUPTI's own thread ids instead
/// of the system's), comma-separated.
pub const ENV_TUNE: &str = "CUFALL_CAPTURE_TUNE";
/// `CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER` (CUPTI 12.3 and later).
const ATTR_PER_THREAD_ACTIVITY_BUFFER: u32 = 9;

const THREAD_ID_SYSTEM: u32 = 1;
const FLUSH_FORCED: u32 = 1;
const DOMAIN_DRIVER: u32 = 1;
const DOMAIN_RUNTIME: u32 = 2;

fn kind(k: CUpti_ActivityKind) -> u32 {
    k as u32
}

fn load() -> Result<Api, CuptiError> {
    let mut tried = Vec::new();
    for soname in SONAMES {
        // SAFETY: dlopen of CUPTI; RTLD_NOLOAD only finds a copy the process already has, the
        // second call loads the one the dynamic linker finds for the soname. CUPTI's
        // initialisers are written to run inside a CUDA process.
        let lib = unsafe { Library::open(Some(soname), RTLD_LAZY | libc::RTLD_NOLOAD) }
            .or_else(|_| unsafe { Library::open(Some(soname), RTLD_LAZY | RTLD_LOCAL) });
        match lib {
            Ok(lib) => return bind(lib, soname),
            Err(e) => tried.push(format!("{soname}: {e}")),
        }
    }
    Err(CuptiError::Load {
        tried: tried.join("; "),
    })
}

fn bind(lib: Library, soname: &'static str) -> Result<Api, CuptiError> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol's type is its documented C signature in cupti_activity.h /
            // cupti_result.h / cupti_callbacks.h, written out in `Api`.
            match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                Ok(s) => *s,
                Err(source) => {
                    return Err(CuptiError::Symbol {
                        soname,
                        symbol: $name,
                        source,
                    });
                }
            }
        };
    }
    macro_rules! opt {
        ($name:literal) => {
            // SAFETY: as above; optional entry points absent from older CUPTIs.
            unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .ok()
                .map(|s| *s)
        };
    }
    let api = Api {
        get_version: sym!("cuptiGetVersion"),
        register_callbacks: sym!("cuptiActivityRegisterCallbacks"),
        enable: sym!("cuptiActivityEnable"),
        disable: sym!("cuptiActivityDisable"),
        next_record: sym!("cuptiActivityGetNextRecord"),
        dropped: sym!("cuptiActivityGetNumDroppedRecords"),
        flush_all: sym!("cuptiActivityFlushAll"),
        flush_period: opt!("cuptiActivityFlushPeriod"),
        set_thread_id_type: opt!("cuptiSetThreadIdType"),
        result_string: sym!("cuptiGetResultString"),
        callback_name: opt!("cuptiGetCallbackName"),
        subscribe: opt!("cuptiSubscribe"),
        enable_callback: opt!("cuptiEnableCallback"),
        graph_id: opt!("cuptiGetGraphId"),
        graph_exec_id: opt!("cuptiGetGraphExecId"),
        set_attribute: opt!("cuptiActivitySetAttribute"),
        enable_hw_trace: opt!("cuptiActivityEnableHWTrace"),
        soname,
        _lib: lib,
    };
    Ok(api)
}

impl Api {
    fn describe(&self, r: Res) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: cuptiGetResultString writes a pointer to a static string.
        if unsafe { (self.result_string)(r, &mut s) } == SUCCESS && !s.is_null() {
            // SAFETY: CUPTI's result strings are static NUL-terminated strings.
            return unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        }
        format!("CUPTI error {r}")
    }

    fn enable_kind(&self, k: CUpti_ActivityKind) -> Result<(), CuptiError> {
        // SAFETY: plain call with an activity kind of this CUPTI's enum.
        match unsafe { (self.enable)(kind(k)) } {
            SUCCESS => Ok(()),
            r => Err(CuptiError::EnableKind {
                kind: k,
                why: self.describe(r),
            }),
        }
    }
}

/// What [`attach`] turned on.
pub struct Attached {
    /// The CUPTI used and the activity kinds captured, for the status line.
    pub detail: String,
    /// How many activity kinds are captured (at least 1).
    pub activity_kinds: u64,
}

/// Sets up activity tracing for `kinds`; returns what is captured, or why nothing is.
pub fn attach(kinds: Kinds) -> Result<Attached, CuptiError> {
    let api = api()?;
    OWNER.store(std::process::id(), std::sync::atomic::Ordering::Relaxed);
    let mut version = 0u32;
    // SAFETY: writes the CUPTI API version into `version`.
    unsafe { (api.get_version)(&mut version) };
    let tune = std::env::var(ENV_TUNE).unwrap_or_default();
    let tuned = |what: &str| tune.split(',').any(|t| t.trim() == what);
    let mut tried = Vec::new();
    if tuned("per-thread-buffers")
        && let Some(f) = api.set_attribute
    {
        let mut one: u8 = 1;
        let mut size = std::mem::size_of::<u8>();
        // SAFETY: the attribute takes a uint8_t flag, passed with its size.
        let r = unsafe {
            f(
                ATTR_PER_THREAD_ACTIVITY_BUFFER,
                &mut size,
                (&raw mut one).cast(),
            )
        };
        tried.push(format!("per-thread-buffers: {}", api.describe(r)));
    }
    if tuned("hw-trace")
        && let Some(f) = api.enable_hw_trace
    {
        // SAFETY: plain call with a flag.
        let r = unsafe { f(1) };
        tried.push(format!("hw-trace: {}", api.describe(r)));
    }
    if let Some(f) = api.set_thread_id_type
        && !tuned("process-thread-ids")
    {
        // SAFETY: plain call; SYSTEM thread ids match the gettid() NVTX ranges carry.
        unsafe { f(THREAD_ID_SYSTEM) };
    }
    // SAFETY: registers our two callbacks, which follow CUPTI's documented signatures.
    let r = unsafe { (api.register_callbacks)(Some(buffer_requested), Some(buffer_completed)) };
    if r != SUCCESS {
        return Err(CuptiError::RegisterCallbacks {
            why: api.describe(r),
        });
    }
    use CUpti_ActivityKind as K;
    let mut on = Vec::new();
    let mut problems = Vec::new();
    let mut enabled = Vec::new();
    let mut want = |k: K, label: &'static str| match api.enable_kind(k) {
        Ok(()) => {
            on.push(label);
            enabled.push(kind(k));
        }
        Err(e) => problems.push(e),
    };
    if kinds.needs_cupti() {
        // One record per GPU, with its UUID: the recorder maps this process's device numbers
        // (which CUDA_VISIBLE_DEVICES may change) to its own by UUID.
        let _ = api.enable_kind(K::CUPTI_ACTIVITY_KIND_DEVICE);
        // One record per context: tells a process that did GPU work from one that only
        // initialised CUDA (compile workers, data loaders), which gets no warnings.
        let _ = api.enable_kind(K::CUPTI_ACTIVITY_KIND_CONTEXT);
    }
    if kinds.contains(Kinds::GRAPHS) {
        want(K::CUPTI_ACTIVITY_KIND_GRAPH_TRACE, "graphs");
    }
    if kinds.contains(Kinds::KERNELS) || kinds.contains(Kinds::GRAPH_NODES) {
        // With graph trace off (graph-nodes), this also records every kernel node of a graph.
        want(K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "kernels");
    }
    if kinds.contains(Kinds::MEMCPY) {
        want(K::CUPTI_ACTIVITY_KIND_MEMCPY, "memcpy");
        want(K::CUPTI_ACTIVITY_KIND_MEMSET, "memset");
    }
    if kinds.contains(Kinds::API) {
        want(K::CUPTI_ACTIVITY_KIND_RUNTIME, "runtime API");
        want(K::CUPTI_ACTIVITY_KIND_DRIVER, "driver API");
    }
    if on.is_empty() {
        return Err(CuptiError::NoKind(problems));
    }
    *TRACED.lock().unwrap_or_else(|e| e.into_inner()) = enabled;
    if let Some(f) = api.flush_period {
        // SAFETY: plain call; CUPTI's worker then hands over buffers at least this often.
        unsafe { f(FLUSH_PERIOD_MS) };
    }
    let forced = forced_flush_period();
    if let Some(period) = forced {
        start_forced_flushes(period);
    }
    let mut text = format!("{} (CUPTI API {version}): {}", api.soname, on.join(", "));
    if !tried.is_empty() {
        text.push_str(&format!("; tuned ({})", tried.join(", ")));
    }
    match forced {
        Some(p) => text.push_str(&format!("; buffers flushed every {} ms", p.as_millis())),
        None => text.push_str("; periodic flushes off"),
    }
    if !problems.is_empty() {
        text.push_str(&format!("; not captured: {}", joined(&problems)));
    }
    Ok(Attached {
        detail: text,
        activity_kinds: on.len() as u64,
    })
}

fn forced_flush_period() -> Option<std::time::Duration> {
    let ms = std::env::var(ENV_FORCED_FLUSH_MS)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(FORCED_FLUSH_MS);
    (ms > 0).then(|| std::time::Duration::from_millis(ms))
}

/// A thread that flushes every `period` while capture delivers. It never sends itself
/// (CUPTI calls `buffer_completed` on it, which only appends to this thread's buffer), so it
/// cannot wait on the sender that waits on it.
fn start_forced_flushes(period: std::time::Duration) {
    let _ = std::thread::Builder::new()
        .name("cufall-cupti-flush".into())
        .spawn(move || {
            while hub().live() && !STOP_FLUSHES.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(period);
                if STOP_FLUSHES.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                flush_completed();
            }
        });
}

/// Hands every buffered record to the hub, incomplete ones too (at exit, when nothing runs
/// any more); the periodic flushes stop first.
pub fn flush() {
    STOP_FLUSHES.store(true, std::sync::atomic::Ordering::Relaxed);
    flush_with(FLUSH_FORCED);
}

/// Hands over every buffer whose records are all complete (CUPTI's default flush: a forced
/// one would also hand over kernels still running, with no timestamps, and they would be lost;
/// seen on the H200: 2,007 of a matmul loop's records).
fn flush_completed() {
    flush_with(0);
}

fn flush_with(flag: u32) {
    let Some(api) = API.get() else { return };
    if OWNER.load(std::sync::atomic::Ordering::Relaxed) != std::process::id() {
        return;
    }
    let _one = FLUSH.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: plain call; serialised by FLUSH.
    unsafe { (api.flush_all)(flag) };
}

fn buffer_layout() -> std::alloc::Layout {
    // 8 bytes is the alignment CUPTI requires of activity buffers.
    std::alloc::Layout::from_size_align(BUFFER_BYTES, 8).unwrap_or(std::alloc::Layout::new::<u64>())
}

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        let layout = buffer_layout();
        // SAFETY: a non-zero-sized layout.
        let p = unsafe { std::alloc::alloc(layout) };
        // SAFETY: CUPTI passes valid out-pointers; a null buffer tells it none is available.
        unsafe {
            *buf = p;
            *size = if p.is_null() { 0 } else { layout.size() };
            *max = 0;
        }
    });
}

unsafe extern "C" fn buffer_completed(
    ctx: *mut c_void,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        let Some(api) = API.get() else { return };
        let h = hub();
        if h.live() && !buf.is_null() {
            let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
            let names = names.get_or_insert_with(Names::default);
            let mut rec: *mut CUpti_Activity = std::ptr::null_mut();
            let mut traced = 0u64;
            // SAFETY: `buf` holds `valid` bytes of records CUPTI wrote; it walks them.
            while unsafe { (api.next_record)(buf, valid, &mut rec) } == SUCCESS {
                if rec.is_null() {
                    break;
                }
                // SAFETY: every record starts with its kind, a 32-bit enum.
                let k = unsafe { rec.cast::<u32>().read_unaligned() };
                if is_work_record(k) {
                    traced += 1;
                }
                // SAFETY: `rec` points at one record inside `buf`, of the layout its kind says.
                unsafe { forward(api, h, names, rec) };
            }
            TRACED_RECORDS.fetch_add(traced, std::sync::atomic::Ordering::Relaxed);
            let mut lost = 0usize;
            // SAFETY: writes the count of records CUPTI dropped for this context and stream.
            if unsafe { (api.dropped)(ctx, stream, &mut lost) } == SUCCESS && lost > 0 {
                h.status(
                    CaptureEventKind::CuptiDropped,
                    lost as u64,
                    &format!("stream {stream}: CUPTI ran out of buffer space"),
                );
            }
        }
        if !buf.is_null() {
            // SAFETY: every buffer CUPTI returns is one `buffer_requested` allocated.
            unsafe { std::alloc::dealloc(buf, buffer_layout()) };
        }
    });
}

/// Whether a record of kind `k` is the program's GPU work (a kernel, copy, memset or graph).
fn is_work_record(k: u32) -> bool {
    use CUpti_ActivityKind as K;
    [
        K::CUPTI_ACTIVITY_KIND_KERNEL,
        K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        K::CUPTI_ACTIVITY_KIND_MEMCPY,
        K::CUPTI_ACTIVITY_KIND_MEMSET,
        K::CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
    ]
    .iter()
    .any(|w| kind(*w) == k)
}

fn ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// Reads field `$f` of the record at `$p` as type `$t` (records are packed: never reference).
macro_rules! field {
    ($p:expr, $t:ty, $f:ident) => {
        addr_of!((*$p.cast::<$t>()).$f).read_unaligned()
    };
}

/// The fields every GPU-work record shares (device, context, stream, correlation, times, graph),
/// read from the record at `$p` of layout `$t`; the kind-specific ones are zero.
macro_rules! work {
    ($p:expr, $t:ty, $kind:expr) => {
        Activity {
            kind: $kind,
            device: field!($p, $t, deviceId),
            context: field!($p, $t, contextId),
            stream: field!($p, $t, streamId),
            correlation: field!($p, $t, correlationId),
            start_ns: ns(field!($p, $t, start)),
            end_ns: ns(field!($p, $t, end)),
            grid: [0; 3],
            block: [0; 3],
            graph_id: field!($p, $t, graphId),
            bytes: 0,
            copy_kind: 0,
            name: 0,
        }
    };
}

/// Whether an API call is one of those that launch, copy or synchronise (the rest, such as
/// `cudaGetDevice`, are frequent and say nothing about gaps).
fn api_kept(name: &str) -> bool {
    [
        "Launch",
        "Memcpy",
        "Memset",
        "Synchronize",
        "StreamWait",
        "EventRecord",
        "Graph",
    ]
    .iter()
    .any(|k| name.contains(k))
}

/// # Safety
/// `rec` must point at a CUPTI 13 activity record.
unsafe fn forward(api: &Api, h: &'static Hub, names: &mut Names, rec: *const CUpti_Activity) {
    use CUpti_ActivityKind as K;
    // SAFETY: for the whole body: `rec`'s first field is its kind, and the layout read for
    // each kind is CUPTI 13.0's record of that kind.
    unsafe {
        let k = rec.cast::<u32>().read_unaligned();
        if k == kind(K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            || k == kind(K::CUPTI_ACTIVITY_KIND_KERNEL)
        {
            type R = CUpti_ActivityKernel10;
            let name_ptr = field!(rec, R, name) as usize;
            let name = match names.kernels.get(&name_ptr) {
                Some(id) => *id,
                None => {
                    let text = if name_ptr == 0 {
                        String::new()
                    } else {
                        CStr::from_ptr(name_ptr as *const c_char)
                            .to_string_lossy()
                            .into_owned()
                    };
                    let id = h.define(&text);
                    names.kernels.insert(name_ptr, id);
                    id
                }
            };
            h.send(&Frame::Activity(Activity {
                grid: [
                    field!(rec, R, gridX),
                    field!(rec, R, gridY),
                    field!(rec, R, gridZ),
                ],
                block: [
                    field!(rec, R, blockX),
                    field!(rec, R, blockY),
                    field!(rec, R, blockZ),
                ],
                name,
                ..work!(rec, R, WireActivityKind::Kernel)
            }));
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_MEMCPY) {
            type R = CUpti_ActivityMemcpy6;
            h.send(&Frame::Activity(Activity {
                bytes: field!(rec, R, bytes),
                copy_kind: field!(rec, R, copyKind),
                ..work!(rec, R, WireActivityKind::Memcpy)
            }));
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_MEMSET) {
            type R = CUpti_ActivityMemset4;
            h.send(&Frame::Activity(Activity {
                bytes: field!(rec, R, bytes),
                ..work!(rec, R, WireActivityKind::Memset)
            }));
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
            type R = CUpti_ActivityGraphTrace2;
            h.send(&Frame::Activity(work!(rec, R, WireActivityKind::Graph)));
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_CONTEXT) {
            type R = CUpti_ActivityContext;
            h.send(&Frame::Context {
                device: field!(rec, R, deviceId),
                context: field!(rec, R, contextId),
            });
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_DEVICE) {
            type R = CUpti_ActivityDevice5;
            let uuid = field!(rec, R, uuid);
            let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
            h.send(&Frame::Device {
                id: field!(rec, R, id),
                uuid: bytes,
            });
        } else if k == kind(K::CUPTI_ACTIVITY_KIND_RUNTIME)
            || k == kind(K::CUPTI_ACTIVITY_KIND_DRIVER)
        {
            type R = CUpti_ActivityAPI;
            let runtime = k == kind(K::CUPTI_ACTIVITY_KIND_RUNTIME);
            let cbid: u32 = field!(rec, R, cbid);
            let key = (u8::from(runtime), cbid);
            let name = match names.api.get(&key) {
                Some(n) => *n,
                None => {
                    let text = api_name(api, runtime, cbid);
                    let id = api_kept(&text).then(|| h.define(&text));
                    names.api.insert(key, id);
                    id
                }
            };
            if let Some(name) = name {
                h.send(&Frame::Api(WireApiCall {
                    domain: if runtime {
                        WireApiDomain::Runtime
                    } else {
                        WireApiDomain::Driver
                    },
                    start_ns: ns(field!(rec, R, start)),
                    end_ns: ns(field!(rec, R, end)),
                    tid: field!(rec, R, threadId),
                    correlation: field!(rec, R, correlationId),
                    name,
                }));
            }
        }
    }
}

fn api_name(api: &Api, runtime: bool, cbid: u32) -> String {
    let domain = if runtime {
        DOMAIN_RUNTIME
    } else {
        DOMAIN_DRIVER
    };
    let mut s: *const c_char = std::ptr::null();
    if let Some(f) = api.callback_name
        // SAFETY: writes a pointer to CUPTI's static name of this callback id.
        && unsafe { f(domain, cbid, &mut s) } == SUCCESS
        && !s.is_null()
    {
        // SAFETY: CUPTI's callback names are static NUL-terminated strings.
        let name = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        // CUPTI names versions with a suffix (`cudaLaunchKernel_v7000`): keep the function name.
        return match name.split_once("_v") {
            Some((base, v)) if v.chars().all(|c| c.is_ascii_digit()) => base.to_string(),
            _ => name,
        };
    }
    format!("{}#{cbid}", if runtime { "runtime" } else { "driver" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_filter_keeps_launches_copies_and_syncs() {
        for n in [
            "cudaLaunchKernel",
            "cuLaunchKernel",
            "cudaMemcpyAsync",
            "cudaStreamSynchronize",
            "cudaGraphLaunch",
            "cudaStreamWaitEvent",
            "cuMemsetD8Async",
        ] {
            assert!(api_kept(n), "{n}");
        }
        for n in ["cudaGetDevice", "cudaGetLastError", "cuCtxGetCurrent"] {
            assert!(!api_kept(n), "{n}");
        }
    }

    #[test]
    fn kernel_record_prefix_is_where_cupti_13_puts_it() {
        // The fields read from kernel records must sit where every CUPTI 13 kernel record has
        // them (Kernel10 in 13.0, Kernel11 in 13.1 extend the same prefix).
        assert_eq!(std::mem::offset_of!(CUpti_ActivityKernel10, start), 16);
        assert_eq!(std::mem::offset_of!(CUpti_ActivityKernel10, deviceId), 40);
        assert_eq!(
            std::mem::offset_of!(CUpti_ActivityKernel10, correlationId),
            92
        );
        assert_eq!(std::mem::offset_of!(CUpti_ActivityKernel10, name), 104);
    }
}
