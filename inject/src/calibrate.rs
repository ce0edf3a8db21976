//! What capture costs the program, measured once in each process at capture start and sent as
//! `capture_cost_*` status rows (`CaptureEventKind::Cost`), so that `cufall report`
//! can say how much of a phase's host time cufall itself added.
//!
//! NVTX: a thread of our own calls the NVTX handlers the program calls (push, then pop: the
//! range is encoded and buffered exactly as the program's are) against a scratch buffer that
//! the flusher never sends ([`Scratch`]), and times them. The program's NVTX call without
//! cufall is a call through an empty function pointer, so the handlers' time is what capture
//! adds. The flusher's copy of the buffers to the recorder runs on its own thread and is not in
//! the figure.
//!
//! CUDA activity (kernels, copies, graph launches): not measured here. Launching work of our own
//! inside the program's first context, from inside CUDA's initialisation, is not done without a
//! GPU to prove it safe on; each enabled kind is sent as unknown ([`cuda_kinds_unknown`]), never
//! as 0.

use crate::delivery::{Hub, Scratch, hub};
use cufall_capture::{CaptureEventKind, CostKind, Kinds};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Push/pop pairs per timed round.
pub const PAIRS_PER_ROUND: u32 = 2000;
/// Timed rounds (after one untimed warm-up round); the median is kept.
pub const ROUNDS: usize = 5;
/// The calibration stops after this long, keeping the rounds done (a slow debug build).
const BUDGET: Duration = Duration::from_millis(20);
/// The calibration's range name (never delivered: it goes to the scratch buffer).
const NAME: &std::ffi::CStr = c"cufall:calibration";

static NVTX_ONCE: Once = Once::new();

/// Measures the NVTX handlers once per process and sends the `capture_cost_nvtx` row (or
/// `capture_cost_nvtx_unknown`, with why). Blocks the caller (the program's first NVTX call)
/// for the few milliseconds it takes.
pub fn nvtx_once() {
    NVTX_ONCE.call_once(|| {
        let h = hub();
        if !h.live() {
            return;
        }
        let timed = std::thread::Builder::new()
            .name("cufall-calibrate".into())
            .spawn(move || {
                let scratch = Scratch::install(h);
                let r = time_nvtx_pairs(&scratch);
                drop(scratch);
                r
            })
            .map_err(CostError::Thread)
            .and_then(|t| t.join().map_err(|_| CostError::Panicked));
        send_nvtx_cost(h, timed.and_then(|rounds| nvtx_cost(&rounds)));
    });
}

/// Nanoseconds per push/pop pair of each timed round done within [`BUDGET`].
fn time_nvtx_pairs(scratch: &Scratch) -> Vec<f64> {
    let began = Instant::now();
    let mut rounds = Vec::with_capacity(ROUNDS);
    // The first round warms the caches and grows the range stack and buffer: not kept.
    for round in 0..=ROUNDS {
        let pairs = if round == 0 { 200 } else { PAIRS_PER_ROUND };
        let t0 = Instant::now();
        for _ in 0..pairs {
            crate::nvtx::push_pop_a(NAME);
        }
        let elapsed = t0.elapsed();
        // Each pair must have been buffered, or the figure times a shortcut (capture off).
        let bytes = scratch.clear();
        if bytes < pairs as usize {
            return Vec::new();
        }
        if round > 0 {
            rounds.push(elapsed.as_nanos() as f64 / f64::from(pairs));
        }
        if began.elapsed() > BUDGET && !rounds.is_empty() {
            break;
        }
    }
    rounds
}

/// Why the NVTX path's cost could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum CostError {
    #[error("no NVTX range reached the buffer while timing (capture stopped)")]
    NoRange,
    #[error("the calibration thread could not start: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the calibration thread panicked")]
    Panicked,
}

/// The median of the rounds, in whole nanoseconds (at least 1: a pair that was timed took
/// time), or why there is none.
pub fn nvtx_cost(rounds: &[f64]) -> Result<(u64, usize), CostError> {
    let mut r: Vec<f64> = rounds.iter().copied().filter(|v| v.is_finite()).collect();
    if r.is_empty() {
        return Err(CostError::NoRange);
    }
    r.sort_by(f64::total_cmp);
    let median = r[r.len() / 2];
    #[allow(
        clippy::cast_possible_truncation,
        reason = "rounded, finite and positive"
    )]
    let ns = median.round().max(1.0) as u64;
    Ok((ns, r.len()))
}

fn send_nvtx_cost(h: &'static Hub, cost: Result<(u64, usize), CostError>) {
    match cost {
        Ok((ns, rounds)) => h.status(
            cost_row(CostKind::Nvtx, true),
            ns,
            &format!(
                "{ns} ns per NVTX range: cufall's push and pop handlers, encoding and buffering, \
                 timed in the process (median of {rounds} rounds of {PAIRS_PER_ROUND} pairs)"
            ),
        ),
        Err(why) => h.status(cost_row(CostKind::Nvtx, false), 0, &why.to_string()),
    }
}

fn cost_row(kind: CostKind, measured: bool) -> CaptureEventKind {
    CaptureEventKind::Cost { kind, measured }
}

/// Sends an unknown cost for each CUDA activity kind `kinds` captures (see the module docs).
pub fn cuda_kinds_unknown(h: &'static Hub, kinds: Kinds) {
    let why = "not measured: the capture library calibrates only its NVTX path; CUPTI activity \
               tracing costs microseconds per launch (docs/benchmarks.md)";
    let graphs = kinds.contains(Kinds::GRAPHS) || kinds.contains(Kinds::GRAPH_NODES);
    for (kind, on) in [
        (CostKind::Kernel, kinds.contains(Kinds::KERNELS)),
        (CostKind::Memcpy, kinds.contains(Kinds::MEMCPY)),
        (CostKind::Graph, graphs),
    ] {
        if on {
            h.status(cost_row(kind, false), 0, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_the_median_round_and_never_zero() {
        assert_eq!(
            nvtx_cost(&[300.0, 120.4, 150.0, 900.0, 140.0]).ok(),
            Some((150, 5))
        );
        assert_eq!(nvtx_cost(&[0.2]).ok(), Some((1, 1)));
        assert_eq!(nvtx_cost(&[f64::NAN, 99.6]).ok(), Some((100, 1)));
        assert!(nvtx_cost(&[]).is_err());
        assert!(nvtx_cost(&[f64::INFINITY]).is_err());
    }
}
