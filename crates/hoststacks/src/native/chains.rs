//! The native call chains of a Python process's Python threads: the same task-clock events as
//! a process read natively, but opened only for the threads py-spy reads (the CUDA driver's,
//! OpenMP's and PyTorch's pool threads get none), as each is first asked for.
//!
//! A thread's newest sample is always within one period (half the host interval) of its CPU
//! time: while it uses CPU, the kernel samples it again. So the chain of a thread with no
//! sample since the last look is still where it was when it last used CPU; what the caller
//! makes of that is [`crate::leaf`]'s.

use super::events::{Budget, Sampling, Slot, chain_frames_until, open_ring};
use super::symbols::ProcessSymbols;
use super::{perf, records};
use crate::leaf::is_interpreter;
use crate::source::{Frame, NativeChains};
use std::collections::HashMap;

/// Rounds a thread may go unasked before its event is closed (it ended, or py-spy no longer
/// lists it).
const UNASKED_ROUNDS: u64 = 100;

struct Watched {
    /// None where its event could not be opened: it is not tried again.
    ring: Option<perf::Ring>,
    /// The ring's place in the budget (after `ring`: given back once it is closed).
    _slot: Option<Slot>,
    asked: u64,
}

/// The events of one process's chosen threads.
pub struct ThreadChains {
    sampling: Sampling,
    budget: Budget,
    symbols: ProcessSymbols,
    threads: HashMap<u32, Watched>,
    round: u64,
    buf: Vec<u8>,
}

impl ThreadChains {
    pub(super) fn new(sampling: Sampling, budget: Budget, symbols: ProcessSymbols) -> ThreadChains {
        ThreadChains {
            sampling,
            budget,
            symbols,
            threads: HashMap::new(),
            round: 0,
            buf: Vec::new(),
        }
    }

    /// Opens `tid`'s event, if the budget has room (past it the thread gets no event until a
    /// place is free; that is no error). The error is the kernel's refusal.
    pub(super) fn open(&mut self, tid: u32) -> std::io::Result<()> {
        let Some(slot) = self.budget.take() else {
            return Ok(());
        };
        let (ring, slot, result) = match open_ring(tid, self.sampling) {
            Ok(r) => (Some(r), Some(slot), Ok(())),
            // Ended: nothing to watch.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(e),
            // Refused: not asked of the kernel again (the slot is given back).
            Err(e) => (None, None, Err(e)),
        };
        self.threads.insert(
            tid,
            Watched {
                ring,
                _slot: slot,
                asked: self.round,
            },
        );
        result
    }
}

impl NativeChains for ThreadChains {
    fn chain(&mut self, tid: u32) -> Option<Vec<Frame>> {
        if tid == 0 {
            return None;
        }
        if !self.threads.contains_key(&tid) {
            // A refusal here (after the main thread's event was allowed) leaves this thread
            // with its system call only.
            let _ = self.open(tid);
        }
        let w = self.threads.get_mut(&tid)?;
        w.asked = self.round;
        let ring = w.ring.as_mut()?;
        self.buf.clear();
        ring.drain(&mut self.buf);
        let newest = records::parse(&self.buf).newest?;
        let chain = if newest.callchain.is_empty() {
            vec![newest.ip]
        } else {
            newest.callchain
        };
        // Only the frames below the interpreter are used: the rest are not looked up.
        Some(chain_frames_until(&mut self.symbols, &chain, |f| {
            is_interpreter(&f.module)
        }))
    }

    fn end_round(&mut self) {
        self.round += 1;
        let round = self.round;
        self.threads
            .retain(|_, w| w.asked + UNASKED_ROUNDS >= round);
    }
}
