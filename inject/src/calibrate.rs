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
//! CUDA activity (kernels, copies, graph launches): not measured in the program, which would
//! mean launching work of our own inside its contexts. `cufall record` measures it after the
//! program, in a calibration process of its own that loads this library with the program's
//! capture kinds ([`cufall_capture::ENV_CALIBRATE`]) and times the same launches with CUPTI's
//! tracing on and off through [`set_tracing`] and [`take_records`] (the two entry points
//! below, which only that process may use).

use crate::delivery::{Hub, Scratch, hub};
use cufall_capture::{CaptureEventKind, CostKind};
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

/// The calibration process's switch: CUPTI's tracing of the capture kinds off (`on` false) or
/// on again. Errors outside a calibration process: a program cannot turn its capture off.
pub fn set_tracing(on: bool) -> Result<(), CalibrationError> {
    if !hub().calibrating {
        return Err(CalibrationError::NotCalibrating);
    }
    crate::cupti::set_tracing(on).map_err(CalibrationError::Cupti)
}

/// In the calibration process: hands every buffered CUPTI record to the library now (the
/// caller has waited for its GPU work) and returns how many kernel, copy, memset and graph
/// records that was since the last call.
pub fn take_records() -> Result<u64, CalibrationError> {
    if !hub().calibrating {
        return Err(CalibrationError::NotCalibrating);
    }
    Ok(crate::cupti::take_traced_records())
}

/// Why the calibration process's switch did nothing.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(
        "not cufall's calibration process ({} is not 1)",
        cufall_capture::ENV_CALIBRATE
    )]
    NotCalibrating,
    #[error(transparent)]
    Cupti(crate::cupti::CuptiError),
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

    /// The switch that turns CUPTI's tracing off is cufall's calibration process's alone: in
    /// any other process (a program) it changes nothing and says why.
    #[test]
    fn only_the_calibration_process_may_switch_tracing() {
        assert!(std::env::var_os(cufall_capture::ENV_CALIBRATE).is_none());
        assert!(matches!(
            set_tracing(false),
            Err(CalibrationError::NotCalibrating)
        ));
        assert!(matches!(
            take_records(),
            Err(CalibrationError::NotCalibrating)
        ));
        assert_eq!(crate::cufall_calibration_set_tracing(0), -1);
        assert_eq!(crate::cufall_calibration_take_records(), -1);
    }
}
