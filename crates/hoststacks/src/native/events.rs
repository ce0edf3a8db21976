//! What both native readers share: the budget of perf events open at once, opening a thread's
//! ring, and a sampled call chain's frames.

use super::perf;
use super::symbols::ProcessSymbols;
use crate::source::Frame;
use cufall_model::FrameKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Data pages of each thread's ring (a power of two), and the fallback where locked memory is
/// short (`kernel.perf_event_mlock_kb` for a user without CAP_IPC_LOCK).
const RING_PAGES: [usize; 2] = [8, 1];

/// The perf events this cufall may hold open at once, over every process: each is a file
/// descriptor, and the trace's writer needs its own. Threads past it are read from `/proc` only.
#[derive(Clone, Debug)]
pub(super) struct Budget {
    pub(super) open: Arc<AtomicUsize>,
    pub(super) max: usize,
}

impl Budget {
    /// Half of the soft limit on open files (RLIMIT_NOFILE), at most 4096.
    pub(super) fn of_open_files() -> Budget {
        let limit = perf::open_files_limit().unwrap_or(1024);
        Budget {
            open: Arc::default(),
            max: usize::try_from(limit / 2).unwrap_or(usize::MAX).min(4096),
        }
    }

    /// A slot, if one is free.
    pub(super) fn take(&self) -> Option<Slot> {
        self.open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(&self.open)))
    }
}

/// One perf event counted against the [`Budget`]; given back on drop.
#[derive(Debug)]
pub(super) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The frames of a sampled call chain, innermost first, up to the first address outside every
/// executable mapping, ending after the first frame `last` says is the last wanted.
pub(super) fn chain_frames_until(
    symbols: &mut ProcessSymbols,
    chain: &[u64],
    last: impl Fn(&Frame) -> bool,
) -> Vec<Frame> {
    let mut frames = Vec::with_capacity(chain.len());
    for (i, addr) in chain.iter().enumerate() {
        match symbols.frame(*addr, i > 0) {
            Some(f) => {
                let done = last(&f);
                frames.push(f);
                if done {
                    break;
                }
            }
            None => break,
        }
    }
    if frames.is_empty()
        && let Some(ip) = chain.first()
    {
        // The sampled instruction itself lies in no mapped file (generated code).
        frames.push(placeholder(format!("0x{ip:x} (in no mapped file)")));
    }
    frames
}

/// How a thread's perf event samples: every `period_ns` of its CPU time, call chains of at
/// most `max_stack` frames (0: the kernel's limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampling {
    pub period_ns: u64,
    pub max_stack: u16,
}

/// A perf event and its ring for thread `tid`, with fewer pages where locked memory is short.
pub(super) fn open_ring(tid: u32, s: Sampling) -> std::io::Result<perf::Ring> {
    match perf::Ring::open(tid, s.period_ns, s.max_stack, RING_PAGES[0]) {
        Err(e)
            if e.raw_os_error() == Some(libc::EPERM) || e.raw_os_error() == Some(libc::ENOMEM) =>
        {
            perf::Ring::open(tid, s.period_ns, s.max_stack, RING_PAGES[1])
        }
        r => r,
    }
}

/// A frame that stands for what no symbol names.
pub(super) fn placeholder(function: String) -> Frame {
    Frame {
        function,
        file: String::new(),
        line: None,
        module: String::new(),
        kind: FrameKind::Native,
    }
}
