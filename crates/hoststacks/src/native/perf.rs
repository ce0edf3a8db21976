//! The kernel's perf events for one thread: `perf_event_open` of the software task clock, and
//! the ring buffer the kernel writes its samples into. This is the only unsafe part of native
//! frames; the records it hands out are parsed in [`super::records`].
//!
//! Layouts follow `include/uapi/linux/perf_event.h`
//! (<https://man7.org/linux/man-pages/man2/perf_event_open.2.html>): `struct perf_event_attr` at
//! `PERF_ATTR_SIZE_VER5` (112 bytes), and the first page of the mapping (`struct
//! perf_event_mmap_page`) with `data_head` at byte 1024, `data_tail` at 1032, `data_offset` at
//! 1040 and `data_size` at 1048.
#![allow(unsafe_code)]

use super::records::ring_segments;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// `sizeof(struct perf_event_attr)` up to `aux_watermark`, `sample_max_stack`.
const PERF_ATTR_SIZE_VER5: u32 = 112;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

/// `perf_event_sample_format` bits.
pub const SAMPLE_IP: u64 = 1 << 0;
pub const SAMPLE_TID: u64 = 1 << 1;
pub const SAMPLE_TIME: u64 = 1 << 2;
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// What every sample carries, in this order (see [`super::records`]).
pub const SAMPLE_TYPE: u64 = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CALLCHAIN;

/// Bits of the attribute's flag word (their order in the header's bitfield).
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const USE_CLOCKID: u64 = 1 << 25;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const DATA_OFFSET: usize = 1040;
const DATA_SIZE: usize = 1048;

/// `struct perf_event_attr`, `PERF_ATTR_SIZE_VER5`.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER5 as usize);

/// One thread's task-clock sampling event and its mapped ring buffer; closed and unmapped on
/// drop.
pub struct Ring {
    /// The event: it samples while open, and its count is the thread's CPU time.
    file: File,
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value alone (never shared or aliased), so moving it to
// another thread moves its only user.
unsafe impl Send for Ring {}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

/// The soft limit on this process's open files (RLIMIT_NOFILE); None when unlimited or
/// unknown.
pub fn open_files_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own, alive for the call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// `perf_event_open(attr, tid, any CPU, no group, close-on-exec)`.
fn perf_event_open(attr: &PerfEventAttr, tid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the size it states,
    // alive for the call; the other arguments are plain integers.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            tid,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A shared read-write mapping of `len` bytes of `fd` from offset 0.
fn map_shared(fd: &OwnedFd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh shared mapping of the perf event's descriptor, of the length the kernel
    // asks for (one header page and a power of two of data pages); no existing memory is
    // touched.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(base.cast::<u8>())
}

impl Ring {
    /// Samples thread `tid` (of any process) every `period_ns` of its CPU time, user space
    /// only, stamped with CLOCK_REALTIME, call chains of at most `max_stack` frames (0: the
    /// kernel's limit, `kernel.perf_event_max_stack`); a ring of `data_pages` pages (a power of
    /// two).
    pub fn open(tid: u32, period_ns: u64, max_stack: u16, data_pages: usize) -> io::Result<Ring> {
        let tid =
            libc::pid_t::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: PERF_ATTR_SIZE_VER5,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns.max(1),
            sample_type: SAMPLE_TYPE,
            flags: EXCLUDE_KERNEL | EXCLUDE_HV | EXCLUDE_CALLCHAIN_KERNEL | USE_CLOCKID,
            clockid: libc::CLOCK_REALTIME,
            sample_max_stack: max_stack,
            ..PerfEventAttr::default()
        };
        let fd = perf_event_open(&attr, tid)?;
        let page = page_size();
        let len = page * (1 + data_pages);
        let base = map_shared(&fd, len)?;
        let mut ring = Ring {
            file: File::from(fd),
            base,
            len,
            data_offset: page,
            data_size: page * data_pages,
        };
        // Kernels since 4.1 say where the data lies; older ones leave these 0.
        let (offset, size) = (ring.header_u64(DATA_OFFSET), ring.header_u64(DATA_SIZE));
        if let (Ok(offset), Ok(size)) = (usize::try_from(offset), usize::try_from(size))
            && size > 0
            && offset.checked_add(size).is_some_and(|end| end <= len)
        {
            ring.data_offset = offset;
            ring.data_size = size;
        }
        Ok(ring)
    }

    fn header_word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is one of the header's 8-byte aligned u64 fields, inside the first page
        // of a live mapping that `self` owns; the kernel updates it concurrently, which is why
        // it is read as an atomic.
        unsafe { &*self.base.add(at).cast::<AtomicU64>() }
    }

    fn header_u64(&self, at: usize) -> u64 {
        self.header_word(at).load(Ordering::Relaxed)
    }

    /// The thread's CPU time since the event was opened, in nanoseconds: the task clock's count
    /// (kernel time included: `exclude_kernel` filters samples, not the count), read with
    /// read(2) (`read_format` 0: one u64).
    pub fn cpu_ns(&self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        (&self.file).read_exact(&mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Appends the bytes the kernel wrote since the last drain to `out` (whole records, in
    /// order) and hands the space back to the kernel.
    pub fn drain(&mut self, out: &mut Vec<u8>) {
        // Acquire: the records up to `head` are visible once `head` is.
        let head = self.header_word(DATA_HEAD).load(Ordering::Acquire);
        let tail = self.header_word(DATA_TAIL).load(Ordering::Relaxed);
        for seg in ring_segments(self.data_size, tail, head) {
            if seg.is_empty() {
                continue;
            }
            // SAFETY: `seg` lies within the data area (ring_segments keeps it below
            // data_size), which lies within the mapping; the kernel does not write between
            // `tail` and `head` until data_tail moves past them.
            let bytes = unsafe {
                std::slice::from_raw_parts(self.base.add(self.data_offset + seg.start), seg.len())
            };
            out.extend_from_slice(bytes);
        }
        // Release: the copy above is done before the kernel may reuse the space.
        self.header_word(DATA_TAIL).store(head, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are the mapping made in `open`, unmapped once, here; the
        // descriptor closes after (the File's drop).
        unsafe {
            libc::munmap(self.base.cast::<libc::c_void>(), self.len);
        }
    }
}
