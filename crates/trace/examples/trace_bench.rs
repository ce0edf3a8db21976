//! Prints the trace writer's and reader's figures for `docs/benchmarks.md`:
//! write throughput on one core, bytes per metric value, and the time to read one metric
//! column of a 100-million-value trace. The writer encodes on the calling thread (one core).
//!
//! Run: `cargo run --release -p cufall-trace --example trace_bench [-- DIR]`
//! (DIR defaults to a temporary folder; it needs about 1 GB of free space).

use cufall_trace::model::*;
use cufall_trace::{Trace, TraceWriter, WriterOptions};
use std::time::{Duration, Instant};

const INTERVAL_NS: i64 = 10_000;
const BATCH: usize = 10_000;

fn manifest(metrics: usize) -> Manifest {
    let mut m = Manifest::new(env!("CARGO_PKG_VERSION"), 0);
    m.devices = vec![DeviceInfo {
        id: DeviceId(0),
        name: "synthetic".into(),
        chip: String::new(),
        uuid: String::new(),
        pci_bus_id: String::new(),
        sm_count: None,
        memory_total_bytes: None,
    }];
    m.sampling = Some(SamplingInfo {
        interval_ns: INTERVAL_NS,
        metrics: (0..metrics)
            .map(|i| MetricInfo {
                name: format!("metric_{i}"),
                unit: "%".into(),
                description: String::new(),
            })
            .collect(),
        source: "synthetic".into(),
    });
    m
}

/// Regular sampling: smoothly changing values (slow sines) at a fixed interval; the "noisy"
/// variant adds measurement noise to the values and up to 32 ns of jitter to the timestamps.
fn batch(first: usize, metrics: usize, noise: bool, rng: &mut u64) -> SampleBatch {
    // Noisy runs also jitter the timestamps by up to 32 ns; smooth runs keep the exact interval.
    let mut b = SampleBatch::new(DeviceId(0), metrics);
    let t0 = 1_764_460_000_000_000_000i64;
    let mut row = vec![0f64; metrics];
    for i in first..first + BATCH {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let jitter = if noise { (*rng % 32) as i64 } else { 0 };
        let s = t0 + i as i64 * INTERVAL_NS + jitter;
        for (m, v) in row.iter_mut().enumerate() {
            let x = i as f64 * 2e-5 + m as f64;
            let n = if noise {
                ((*rng >> 20) % 1000) as f64 * 1e-3
            } else {
                0.0
            };
            *v = 50.0 + 45.0 * x.sin() + n;
        }
        b.push(s, s + INTERVAL_NS - 48 + jitter / 4, &row);
    }
    b
}

struct WriteResult {
    values: usize,
    busy: Duration,
    bytes: u64,
}

fn write_trace(dir: &std::path::Path, metrics: usize, samples: usize, noise: bool) -> WriteResult {
    let opts = WriterOptions {
        overwrite: true,
        flush_interval: Duration::from_secs(3600),
        max_buffered_samples: 100_000, // one segment per second of 100 kHz sampling
    };
    let mut w = TraceWriter::create(dir, manifest(metrics), opts).expect("create");
    let mut rng = 0x9e3779b97f4a7c15u64;
    let batches: Vec<SampleBatch> = (0..10)
        .map(|k| batch(k * BATCH, metrics, noise, &mut rng))
        .collect();
    let mut busy = Duration::ZERO;
    let mut done = 0;
    while done < samples {
        // Shift a pre-built batch in time so generation stays out of the measurement.
        let mut b = batches[(done / BATCH) % batches.len()].clone();
        let shift = (done - (done / BATCH) % batches.len() * BATCH) as i64 * INTERVAL_NS;
        b.start_ns.iter_mut().for_each(|t| *t += shift);
        b.end_ns.iter_mut().for_each(|t| *t += shift);
        let t = Instant::now();
        w.append_samples(&b).expect("append");
        busy += t.elapsed();
        done += BATCH;
    }
    let t = Instant::now();
    let stats = w.finish(0).expect("finish");
    busy += t.elapsed();
    WriteResult {
        values: done * metrics,
        busy,
        bytes: stats.bytes,
    }
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("cufall-trace-bench"));
    std::fs::create_dir_all(&base).expect("bench dir");

    // Each case is written RUNS times; the median rate is shown (this machine is shared and
    // noisy: single runs of one binary differed by a third), with the slowest and fastest.
    const RUNS: usize = 5;
    println!("trace writer: 100 kHz regular sampling, 1,000,000 samples per run, {RUNS} runs");
    println!(
        "{:<9} {:<8} {:>16} {:>16} {:>12}",
        "metrics", "data", "Mvalues/s (med)", "min - max", "bytes/value"
    );
    for metrics in [1, 2, 4, 8] {
        for noise in [false, true] {
            let mut rates = Vec::new();
            let mut bytes = 0.0;
            for _ in 0..RUNS {
                let r = write_trace(&base.join("w.cufall"), metrics, 1_000_000, noise);
                rates.push(r.values as f64 / r.busy.as_secs_f64() / 1e6);
                bytes = r.bytes as f64 / r.values as f64;
            }
            rates.sort_by(f64::total_cmp);
            println!(
                "{:<9} {:<8} {:>16.1} {:>16} {:>12.2}",
                metrics,
                if noise { "noisy" } else { "smooth" },
                rates[RUNS / 2],
                format!("{:.1} - {:.1}", rates[0], rates[RUNS - 1]),
                bytes
            );
        }
    }

    // 100 million values: 25 million samples of 4 metrics.
    let dir = base.join("big.cufall");
    let r = write_trace(&dir, 4, 25_000_000, true);
    println!(
        "\n100M-value trace: {} values, {:.1} MB, written at {:.1} Mvalues/s",
        r.values,
        r.bytes as f64 / 1e6,
        r.values as f64 / r.busy.as_secs_f64() / 1e6
    );
    for round in 0..3 {
        let t = Instant::now();
        let trace = Trace::open(&dir).expect("open");
        let rows = trace.samples(&["metric_2"]).expect("read");
        println!(
            "read one metric column ({} values, with device and times): {:.3} s{}",
            rows.len(),
            t.elapsed().as_secs_f64(),
            if round == 0 {
                " (first read, includes checksum pass)"
            } else {
                ""
            }
        );
    }
    // 100 million values of a single metric: the worst case for a one-column read.
    let dir1 = base.join("big1.cufall");
    let r = write_trace(&dir1, 1, 100_000_000, true);
    println!(
        "\n100M-sample, 1-metric trace: {:.1} MB, written at {:.1} Mvalues/s",
        r.bytes as f64 / 1e6,
        r.values as f64 / r.busy.as_secs_f64() / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
    for _ in 0..2 {
        let t = Instant::now();
        let trace = Trace::open(&dir1).expect("open");
        let rows = trace.samples(&["metric_0"]).expect("read");
        println!(
            "read its metric column ({} values, with device and times): {:.3} s",
            rows.len(),
            t.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
