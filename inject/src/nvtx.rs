//! NVTX handlers of our own: every copy of NVTX in the process (each library built with the
//! NVTX v3 headers has one) reads `NVTX_INJECTION64_PATH` on its first call, loads this library
//! and calls [`initialize`], which fills that copy's function table with the handlers below.
//!
//! Push/pop ranges are matched on the thread that pushed them (per domain, so nesting depth is
//! exact) and sent whole when popped; start/end ranges may end on another thread and are kept in
//! a process-wide table until they end. Marks are sent at once. Names are copied when the range
//! begins: the program may free its string right after the call. In steady state a push/pop pair
//! allocates nothing: the stack keeps its entries' string buffers.
#![allow(unsafe_code)]

use crate::delivery::{hub, now_ns};
use cufall_capture::{CaptureEventKind, Frame, Kinds, Name, Payload, Range, WireRangeKind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// `nvtxEventAttributes_v2` (NVTX v3 headers, `nvToolsExt.h`).
#[repr(C)]
pub struct EventAttributes {
    pub version: u16,
    pub size: u16,
    pub category: u32,
    pub color_type: i32,
    pub color: u32,
    pub payload_type: i32,
    pub reserved0: i32,
    pub payload: u64,
    pub message_type: i32,
    pub message: *const c_void,
}

const COLOR_ARGB: i32 = 1;
const PAYLOAD_U64: i32 = 1;
const PAYLOAD_I64: i32 = 2;
const PAYLOAD_F64: i32 = 3;
const PAYLOAD_U32: i32 = 4;
const PAYLOAD_I32: i32 = 5;
const PAYLOAD_F32: i32 = 6;
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// What NVTX returns from push/pop when it does not track nesting.
const NO_TRACKING: i32 = -2;

#[derive(Clone, Debug, Default)]
struct Attrs {
    category: u32,
    color: Option<u32>,
    payload: Option<Payload>,
}

/// A range's name: its own copy of the bytes the program gave (checked as UTF-8 by the
/// recorder, not here), or a registered string's id.
#[derive(Debug, Default)]
struct Text {
    text: Vec<u8>,
    registered: Option<u32>,
}

#[derive(Debug)]
struct Open {
    start_ns: i64,
    domain: u32,
    attrs: Attrs,
    name: Text,
    /// This range opened a capture window (`--capture-range nvtx:NAME`); its end closes it.
    window: bool,
}

impl Open {
    fn name(&self) -> Name<'_> {
        match self.name.registered {
            Some(id) => Name::Registered(id),
            None => Name::Bytes(&self.name.text),
        }
    }
}

/// The message of an event: borrowed from the caller, copied only when kept.
enum Message<'a> {
    Ascii(&'a CStr),
    Wide(*const i32),
    Registered(u32),
    None,
}

impl Message<'_> {
    /// Copies the message into `out`, reusing its buffer.
    fn write_into(&self, out: &mut Text) {
        out.text.clear();
        out.registered = None;
        match self {
            Message::Ascii(s) => out.text.extend_from_slice(s.to_bytes()),
            Message::Wide(p) => out.text.extend_from_slice(wide_to_string(*p).as_bytes()),
            Message::Registered(id) => out.registered = Some(*id),
            Message::None => {}
        }
    }

    fn to_text(&self) -> Text {
        let mut t = Text::default();
        self.write_into(&mut t);
        t
    }
}

fn wide_to_string(p: *const i32) -> String {
    let mut out = String::new();
    if p.is_null() {
        return out;
    }
    for i in 0..65_536usize {
        // SAFETY: NVTX's wide-string functions take a NUL-terminated `wchar_t` string (32-bit
        // on Linux); we read up to and excluding its terminator, at most 64 Ki characters.
        let c = unsafe { p.add(i).read_unaligned() };
        if c == 0 {
            break;
        }
        out.push(char::from_u32(c as u32).unwrap_or('\u{fffd}'));
    }
    out
}

#[derive(Default)]
struct Stack {
    entries: Vec<Open>,
    len: usize,
    tid: u32,
    generation: u64,
    /// `len`, published for the exit report with a plain store (no shared read-modify-write on
    /// the hot path); registered in [`OPEN`] on first use.
    open: Option<Arc<AtomicUsize>>,
}

impl Stack {
    fn publish(&mut self) {
        let len = self.len;
        self.open
            .get_or_insert_with(|| {
                let a = Arc::new(AtomicUsize::new(0));
                if let Ok(mut all) = OPEN.lock() {
                    all.push(Arc::clone(&a));
                }
                a
            })
            .store(len, Ordering::Relaxed);
    }
}

/// Every thread's count of open push/pop ranges.
static OPEN: Mutex<Vec<Arc<AtomicUsize>>> = Mutex::new(Vec::new());

thread_local! {
    static STACK: RefCell<Stack> = RefCell::new(Stack::default());
}

static UNMATCHED_POPS: AtomicU64 = AtomicU64::new(0);
static NEXT_RANGE_ID: AtomicU64 = AtomicU64::new(1);
static STARTED: Mutex<Option<HashMap<u64, (Open, u32)>>> = Mutex::new(None);

fn thread_id(stack: &mut Stack) -> u32 {
    let generation = hub().generation;
    if stack.tid == 0 || stack.generation != generation {
        stack.tid = crate::ffi::gettid();
        stack.generation = generation;
    }
    stack.tid
}

/// The low 32 bits of a 64-bit payload union, where a 32-bit payload lives.
fn low_half(bits: u64) -> u32 {
    u32::try_from(bits & 0xffff_ffff).unwrap_or(0)
}

fn attrs_of(a: *const EventAttributes) -> (Attrs, Message<'static>) {
    if a.is_null() {
        return (Attrs::default(), Message::None);
    }
    // SAFETY: NVTX passes a pointer to an `nvtxEventAttributes_t` the caller filled; its
    // `size` says how much of it exists, and we read only fields inside that size.
    let a = unsafe { &*a };
    let size = usize::from(a.size);
    let has = |end: usize| size >= end;
    let mut out = Attrs::default();
    if has(8) {
        out.category = a.category;
    }
    if has(16) && a.color_type == COLOR_ARGB {
        out.color = Some(a.color);
    }
    if has(32) {
        let bits = a.payload;
        out.payload = match a.payload_type {
            PAYLOAD_U64 => Some(Payload::UInt(bits)),
            PAYLOAD_I64 => Some(Payload::Int(bits as i64)),
            PAYLOAD_F64 => Some(Payload::Float(f64::from_bits(bits))),
            // A 32-bit payload is the low half of the 64-bit union.
            PAYLOAD_U32 => Some(Payload::UInt(bits & 0xffff_ffff)),
            PAYLOAD_I32 => Some(Payload::Int(i64::from(low_half(bits).cast_signed()))),
            PAYLOAD_F32 => Some(Payload::Float(f64::from(f32::from_bits(low_half(bits))))),
            _ => None,
        };
    }
    let message = if has(48) && !a.message.is_null() {
        match a.message_type {
            // SAFETY: an ASCII message is a NUL-terminated C string owned by the caller for the
            // duration of the call; it is copied before the call returns.
            MESSAGE_ASCII => Message::Ascii(unsafe { CStr::from_ptr(a.message.cast()) }),
            MESSAGE_UNICODE => Message::Wide(a.message.cast()),
            MESSAGE_REGISTERED => Message::Registered(handle_id(a.message)),
            _ => Message::None,
        }
    } else {
        Message::None
    };
    (out, message)
}

/// Our string and domain handles are their string ids, as pointers (never null).
fn handle_id(h: *const c_void) -> u32 {
    u32::try_from(h as usize).unwrap_or(0)
}

fn id_handle(id: u32) -> *mut c_void {
    id as usize as *mut c_void
}

fn cstr<'a>(p: *const c_char) -> Message<'a> {
    if p.is_null() {
        Message::None
    } else {
        // SAFETY: the A-variants of NVTX take a NUL-terminated string valid during the call.
        Message::Ascii(unsafe { CStr::from_ptr(p) })
    }
}

/// The range name that opens a capture window (`--capture-range nvtx:NAME`), read once.
fn trigger() -> Option<&'static [u8]> {
    static NAME: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    NAME.get_or_init(|| match &hub().range {
        Some(cufall_capture::RangeTrigger::Nvtx(n)) => Some(n.as_bytes().to_vec()),
        _ => None,
    })
    .as_deref()
}

/// Registered strings whose text is the trigger's name (registration is rare; a push with a
/// registered name looks its id up here only when a trigger is set).
static TRIGGER_IDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn note_registered(id: u32, text: &[u8]) {
    if trigger() == Some(text)
        && let Ok(mut ids) = TRIGGER_IDS.lock()
    {
        ids.push(id);
    }
}

/// Whether a range with this name opens a window; cheap when no trigger is set.
fn opens_window(name: &Text) -> bool {
    let Some(t) = trigger() else { return false };
    match name.registered {
        Some(id) => TRIGGER_IDS.lock().is_ok_and(|ids| ids.contains(&id)),
        None => name.text == t,
    }
}

fn window_edge(t_ns: i64, open: bool) {
    let h = hub();
    if h.live() {
        h.send_urgent(&Frame::Window { t_ns, open });
    }
}

fn range_frame<'a>(
    open: &'a Open,
    end_ns: i64,
    tid: u32,
    depth: u32,
    kind: WireRangeKind,
) -> Frame<'a> {
    Frame::Range(Range {
        start_ns: open.start_ns,
        end_ns,
        tid,
        depth,
        kind,
        domain: open.domain,
        category: open.attrs.category,
        color: open.attrs.color,
        payload: open.attrs.payload.unwrap_or(Payload::None),
        name: open.name(),
    })
}

fn push(domain: u32, attrs: Attrs, message: Message<'_>) -> i32 {
    let start_ns = now_ns();
    let depth = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        let depth = s.entries[..s.len]
            .iter()
            .filter(|o| o.domain == domain)
            .count();
        let len = s.len;
        if len < s.entries.len() {
            let e = &mut s.entries[len];
            e.start_ns = start_ns;
            e.domain = domain;
            e.attrs = attrs;
            message.write_into(&mut e.name);
        } else {
            s.entries.push(Open {
                start_ns,
                domain,
                attrs,
                name: message.to_text(),
                window: false,
            });
        }
        let window = opens_window(&s.entries[len].name);
        s.entries[len].window = window;
        if window {
            window_edge(start_ns, true);
        }
        s.len += 1;
        s.publish();
        depth
    });
    depth.map_or(NO_TRACKING, |d| i32::try_from(d).unwrap_or(i32::MAX))
}

fn pop(domain: u32) -> i32 {
    let end_ns = now_ns();
    let h = hub();
    let level = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        let len = s.len;
        let at = s.entries[..len].iter().rposition(|o| o.domain == domain)?;
        let depth = s.entries[..at]
            .iter()
            .filter(|o| o.domain == domain)
            .count();
        let depth = u32::try_from(depth).unwrap_or(u32::MAX);
        let tid = thread_id(&mut s);
        if h.live() {
            h.send(&range_frame(
                &s.entries[at],
                end_ns,
                tid,
                depth,
                WireRangeKind::PushPop,
            ));
        }
        if s.entries[at].window {
            s.entries[at].window = false;
            window_edge(end_ns, false);
        }
        // Keep the popped entry's buffers for reuse: move it past the live part.
        s.entries[at..len].rotate_left(1);
        s.len -= 1;
        s.publish();
        Some(depth)
    });
    match level {
        Ok(Some(d)) => i32::try_from(d).unwrap_or(i32::MAX),
        _ => {
            UNMATCHED_POPS.fetch_add(1, Ordering::Relaxed);
            -1
        }
    }
}

fn start(domain: u32, attrs: Attrs, message: Message<'_>) -> u64 {
    let start_ns = now_ns();
    let id = NEXT_RANGE_ID.fetch_add(1, Ordering::Relaxed);
    let tid = STACK
        .try_with(|s| thread_id(&mut s.borrow_mut()))
        .unwrap_or(0);
    let name = message.to_text();
    let window = opens_window(&name);
    if window {
        window_edge(start_ns, true);
    }
    let open = Open {
        start_ns,
        domain,
        attrs,
        name,
        window,
    };
    if let Ok(mut m) = STARTED.lock() {
        m.get_or_insert_with(HashMap::new).insert(id, (open, tid));
    }
    id
}

fn end(id: u64) {
    let end_ns = now_ns();
    let open = STARTED
        .lock()
        .ok()
        .and_then(|mut m| m.as_mut().and_then(|m| m.remove(&id)));
    let h = hub();
    if let Some((open, tid)) = open
        && h.live()
    {
        h.send(&range_frame(&open, end_ns, tid, 0, WireRangeKind::StartEnd));
        if open.window {
            window_edge(end_ns, false);
        }
    }
}

fn mark(domain: u32, attrs: Attrs, message: Message<'_>) {
    let h = hub();
    if !h.live() {
        return;
    }
    let t = now_ns();
    let tid = STACK
        .try_with(|s| thread_id(&mut s.borrow_mut()))
        .unwrap_or(0);
    let open = Open {
        start_ns: t,
        domain,
        attrs,
        name: message.to_text(),
        window: false,
    };
    h.send(&range_frame(&open, t, tid, 0, WireRangeKind::Mark));
}

/// Reports ranges still open as the process exits (ranges on other threads' stacks cannot be
/// closed from here, so they are counted, not invented).
pub fn report_open_ranges() {
    let h = hub();
    let pushes = OPEN.lock().map_or(0, |all| {
        all.iter()
            .map(|a| a.load(Ordering::Relaxed) as u64)
            .sum::<u64>()
    });
    let started = STARTED
        .lock()
        .ok()
        .map_or(0, |m| m.as_ref().map_or(0, HashMap::len)) as u64;
    if pushes + started > 0 {
        h.status(
            CaptureEventKind::OpenRanges,
            pushes + started,
            &format!("{pushes} push/pop and {started} start/end range(s) never ended"),
        );
    }
    let unmatched = UNMATCHED_POPS.load(Ordering::Relaxed);
    if unmatched > 0 {
        h.status(
            CaptureEventKind::UnmatchedPops,
            unmatched,
            "pops without a matching push",
        );
    }
}

/// Runs a handler body; a panic (a bug of ours) must never unwind into the program.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

// ---- The handlers, with NVTX's C signatures ----

extern "C" fn mark_ex(a: *const EventAttributes) {
    guard((), || {
        let (attrs, m) = attrs_of(a);
        mark(0, attrs, m)
    })
}
extern "C" fn mark_a(s: *const c_char) {
    guard((), || mark(0, Attrs::default(), cstr(s)))
}
extern "C" fn mark_w(s: *const i32) {
    guard((), || mark(0, Attrs::default(), Message::Wide(s)))
}
extern "C" fn range_start_ex(a: *const EventAttributes) -> u64 {
    guard(0, || {
        let (attrs, m) = attrs_of(a);
        start(0, attrs, m)
    })
}
extern "C" fn range_start_a(s: *const c_char) -> u64 {
    guard(0, || start(0, Attrs::default(), cstr(s)))
}
extern "C" fn range_start_w(s: *const i32) -> u64 {
    guard(0, || start(0, Attrs::default(), Message::Wide(s)))
}
extern "C" fn range_end(id: u64) {
    guard((), || end(id))
}
extern "C" fn range_push_ex(a: *const EventAttributes) -> i32 {
    guard(NO_TRACKING, || {
        let (attrs, m) = attrs_of(a);
        push(0, attrs, m)
    })
}
extern "C" fn range_push_a(s: *const c_char) -> i32 {
    guard(NO_TRACKING, || push(0, Attrs::default(), cstr(s)))
}
extern "C" fn range_push_w(s: *const i32) -> i32 {
    guard(NO_TRACKING, || push(0, Attrs::default(), Message::Wide(s)))
}
extern "C" fn range_pop() -> i32 {
    guard(-1, || pop(0))
}
extern "C" fn domain_mark_ex(d: *mut c_void, a: *const EventAttributes) {
    guard((), || {
        let (attrs, m) = attrs_of(a);
        mark(handle_id(d), attrs, m)
    })
}
extern "C" fn domain_range_start_ex(d: *mut c_void, a: *const EventAttributes) -> u64 {
    guard(0, || {
        let (attrs, m) = attrs_of(a);
        start(handle_id(d), attrs, m)
    })
}
extern "C" fn domain_range_end(_d: *mut c_void, id: u64) {
    guard((), || end(id))
}
extern "C" fn domain_range_push_ex(d: *mut c_void, a: *const EventAttributes) -> i32 {
    guard(NO_TRACKING, || {
        let (attrs, m) = attrs_of(a);
        push(handle_id(d), attrs, m)
    })
}
extern "C" fn domain_range_pop(d: *mut c_void) -> i32 {
    guard(-1, || pop(handle_id(d)))
}
extern "C" fn domain_register_string_a(_d: *mut c_void, s: *const c_char) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let Message::Ascii(text) = cstr(s) else {
            return std::ptr::null_mut();
        };
        let id = hub().define(&text.to_string_lossy());
        note_registered(id, text.to_bytes());
        id_handle(id)
    })
}
extern "C" fn domain_register_string_w(_d: *mut c_void, s: *const i32) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let text = wide_to_string(s);
        let id = hub().define(&text);
        note_registered(id, text.as_bytes());
        id_handle(id)
    })
}
extern "C" fn domain_create_a(s: *const c_char) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        let name = match cstr(s) {
            Message::Ascii(t) => t.to_string_lossy().into_owned(),
            _ => String::new(),
        };
        id_handle(hub().define(&name))
    })
}
extern "C" fn domain_create_w(s: *const i32) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        id_handle(hub().define(&wide_to_string(s)))
    })
}
extern "C" fn domain_destroy(_d: *mut c_void) {}
extern "C" fn initialize(_reserved: *const c_void) {}

/// One push/pop pair through the handlers the program's `nvtxRangePushA`/`nvtxRangePop` reach
/// (for the calibration, [`crate::calibrate`]).
pub(crate) fn push_pop_a(name: &CStr) {
    range_push_a(name.as_ptr());
    range_pop();
}

// ---- Filling NVTX's function tables ----

type FnPtr = Option<unsafe extern "C" fn()>;
type GetModuleTable =
    unsafe extern "C" fn(module: i32, table: *mut *mut *mut FnPtr, size: *mut u32) -> i32;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleTable>,
}

/// `NvtxGetExportTableFunc_t`.
pub type GetExportTable = unsafe extern "C" fn(id: u32) -> *const c_void;

const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: i32 = 1;
const MODULE_CORE2: i32 = 5;

macro_rules! slot {
    ($f:expr) => {
        // SAFETY: NVTX casts each slot back to the handler's own signature before calling it;
        // the generic type here is only how the table stores pointers.
        Some(unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>($f as *const ()) })
    };
}

fn core_handlers() -> [(usize, FnPtr); 11] {
    [
        (1, slot!(mark_ex as extern "C" fn(*const EventAttributes))),
        (2, slot!(mark_a as extern "C" fn(*const c_char))),
        (3, slot!(mark_w as extern "C" fn(*const i32))),
        (
            4,
            slot!(range_start_ex as extern "C" fn(*const EventAttributes) -> u64),
        ),
        (
            5,
            slot!(range_start_a as extern "C" fn(*const c_char) -> u64),
        ),
        (6, slot!(range_start_w as extern "C" fn(*const i32) -> u64)),
        (7, slot!(range_end as extern "C" fn(u64))),
        (
            8,
            slot!(range_push_ex as extern "C" fn(*const EventAttributes) -> i32),
        ),
        (
            9,
            slot!(range_push_a as extern "C" fn(*const c_char) -> i32),
        ),
        (10, slot!(range_push_w as extern "C" fn(*const i32) -> i32)),
        (11, slot!(range_pop as extern "C" fn() -> i32)),
    ]
}

fn core2_handlers() -> [(usize, FnPtr); 12] {
    type Dom = *mut c_void;
    [
        (
            1,
            slot!(domain_mark_ex as extern "C" fn(Dom, *const EventAttributes)),
        ),
        (
            2,
            slot!(domain_range_start_ex as extern "C" fn(Dom, *const EventAttributes) -> u64),
        ),
        (3, slot!(domain_range_end as extern "C" fn(Dom, u64))),
        (
            4,
            slot!(domain_range_push_ex as extern "C" fn(Dom, *const EventAttributes) -> i32),
        ),
        (5, slot!(domain_range_pop as extern "C" fn(Dom) -> i32)),
        (
            10,
            slot!(domain_register_string_a as extern "C" fn(Dom, *const c_char) -> Dom),
        ),
        (
            11,
            slot!(domain_register_string_w as extern "C" fn(Dom, *const i32) -> Dom),
        ),
        (
            12,
            slot!(domain_create_a as extern "C" fn(*const c_char) -> Dom),
        ),
        (
            13,
            slot!(domain_create_w as extern "C" fn(*const i32) -> Dom),
        ),
        (14, slot!(domain_destroy as extern "C" fn(Dom))),
        (15, slot!(initialize as extern "C" fn(*const c_void))),
        // Category names (8, 9) and resources (6, 7) stay NVTX's no-ops.
        (0, None),
    ]
}

/// Fills the function tables of the NVTX copy that called us. Returns NVTX's success value
/// (1; the caller then registers the exit hooks, which close the ranges left open), or 0 to
/// leave that copy's calls as no-ops.
pub fn install(get_export_table: Option<GetExportTable>) -> i32 {
    let h = hub();
    if !h.live() || !h.kinds.contains(Kinds::NVTX) {
        return 0;
    }
    let Some(get) = get_export_table else {
        return 0;
    };
    // SAFETY: NVTX hands us its own export-table getter; ETID_CALLBACKS selects the callbacks
    // table, whose first field is its size.
    let table = unsafe { get(ETID_CALLBACKS) }.cast::<ExportTableCallbacks>();
    if table.is_null() {
        return 0;
    }
    // SAFETY: non-null, and NVTX keeps the table alive for the life of the process.
    let Some(get_module) = (unsafe { &*table }).get_module_function_table else {
        return 0;
    };
    let mut filled = 0;
    for (module, handlers) in [
        (MODULE_CORE, core_handlers().to_vec()),
        (MODULE_CORE2, core2_handlers().to_vec()),
    ] {
        let mut slots: *mut *mut FnPtr = std::ptr::null_mut();
        let mut size = 0u32;
        // SAFETY: the documented call: NVTX writes a pointer to its array of slot pointers and
        // the number of entries.
        if unsafe { get_module(module, &mut slots, &mut size) } == 0 || slots.is_null() {
            continue;
        }
        for (index, f) in handlers {
            if index == 0 || index >= size as usize {
                continue;
            }
            // SAFETY: `index` is below the size NVTX gave for this module's array, whose
            // entries point at the function-pointer variables the NVTX copy calls through.
            unsafe {
                let slot = *slots.add(index);
                if !slot.is_null() {
                    *slot = f;
                    filled += 1;
                }
            }
        }
    }
    if filled == 0 {
        return 0;
    }
    h.status(
        CaptureEventKind::NvtxAttached,
        1,
        &format!("{filled} NVTX entry points"),
    );
    1
}
