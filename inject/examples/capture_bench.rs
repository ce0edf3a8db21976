//! The capture hot path's cost per event, without a GPU: how long an NVTX push/pop pair takes
//! the program (run under `cufall record`, the capture library's handlers, encoding and
//! buffering; run bare, NVTX's empty call), and how long encoding one range record takes.
//!
//! Prints one JSON line: `{"pairs":…,"ns_per_range":…,"ns_per_record":…}` (medians of
//! [`ROUNDS`] rounds). `sampler`'s capture tests run it under the capture library and hold the
//! figures to a bound; `docs/benchmarks.md` gives the command and the figures.
use cufall_capture::{Frame, Name, Payload, Range, WireRangeKind, encode};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Nanoseconds per call of `f`: the median of [`ROUNDS`] rounds of `n` calls, after a warm-up.
fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..n / 10 {
        f();
    }
    let rounds = (0..ROUNDS)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            t0.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    median(rounds)
}

fn main() {
    let pairs: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let ns_per_range = per_call(pairs, || drop(nvtx::LocalRange::new(c"bench_step")));
    let mut buf = Vec::with_capacity(64 << 20);
    let range = Range {
        start_ns: 1_764_000_000_000_000_000,
        end_ns: 1_764_000_000_000_012_345,
        tid: 4242,
        depth: 1,
        kind: WireRangeKind::PushPop,
        domain: 0,
        category: 0,
        color: None,
        payload: Payload::None,
        name: Name::Bytes(b"decode_step"),
    };
    let frame = Frame::Range(range);
    let ns_per_record = per_call(pairs, || {
        if buf.len() > (32 << 20) {
            buf.clear();
        }
        encode(black_box(&frame), &mut buf);
    });
    println!(
        "{{\"pairs\":{pairs},\"ns_per_range\":{ns_per_range:.1},\"ns_per_record\":{ns_per_record:.1}}}"
    );
}
