//! The viewer's performance figures (issue 4), printed as text:
//!
//! 1. drawing one frame of 8 GPUs × 300 columns from 1 s of 100 kHz data (target < 2 ms);
//! 2. the live view fed by a synthetic producer of 8 GPUs at 100 kHz, drawing 30 frames/s
//!    into a `TestBackend` terminal: CPU time of the view thread (target < 10 % of a core),
//!    memory, discarded batches.
//!
//! `cargo run --release -p cufall-viewer --example bench_viewer [-- SECONDS]`
//! The data is synthetic (`cufall_testkit::synth`); no GPU is involved.

use cufall_live::{LiveEvent, feed};
use cufall_testkit::synth;
use cufall_viewer::app::{self, ViewSetup};
use cufall_viewer::color::Palette;
use cufall_viewer::input::Input;
use cufall_viewer::state::{HeatmapState, Mode, ViewOptions, layout};
use cufall_viewer::store::HeatmapOverrides;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use std::time::{Duration, Instant};

const T0: i64 = 1_764_460_800_000_000_000;
const IV: i64 = 10_000; // 100 kHz
const GPUS: u32 = 8;
const COLS: u16 = 300;

/// CPU time of the calling thread, from the kernel's scheduler statistics (ns).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn setup(metrics: &[&str], palette: Palette, spread: bool) -> ViewSetup {
    ViewSetup {
        view: ViewOptions {
            palette,
            spread,
            ..ViewOptions::default()
        },
        overrides: HeatmapOverrides {
            metrics: metrics.iter().map(|s| s.to_string()).collect(),
            ..HeatmapOverrides::default()
        },
        phases: None,
        source: "bench".into(),
    }
}

fn width() -> u16 {
    COLS + layout::LABEL_W + layout::PANEL_W
}

fn one_second(level: impl Fn(u32, i64) -> f64) -> Vec<LiveEvent> {
    (0..GPUS)
        .map(|g| LiveEvent::Samples(synth::batch(g, T0, 100_000, IV, |t| level(g, t - T0))))
        .collect()
}

fn bench_draw(label: &str, s: &ViewSetup, height: u16) {
    let (_tx, rx) = feed(synth::info(GPUS, IV), 16);
    let mut st = app::live_state(&rx, s, Mode::Live).unwrap_or_else(|e| panic!("{e}"));
    st.update(Input::Resize(width(), height));
    let events = one_second(synth::demo_level);
    let t = Instant::now();
    for ev in events {
        st.update(Input::Feed(ev));
    }
    let ingest = t.elapsed();
    st.set_window(T0, T0 + 1_000_000_000);
    let area = Rect::new(0, 0, width(), height);
    let mut buf = Buffer::empty(area);
    let mut times = Vec::new();
    for _ in 0..2000 {
        buf.reset();
        let t = Instant::now();
        cufall_viewer::draw::draw_into(&mut buf, area, &st);
        times.push(t.elapsed());
    }
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let p99 = times[times.len() * 99 / 100];
    let (a, b) = st.window();
    println!(
        "draw  {label:<34} {} cols × {GPUS} GPUs, window {:.2} s: mean {:>7.3} ms  p50 {:>7.3} ms  p99 {:>7.3} ms  (ingest of 800k samples: {:.1} ms)",
        st.cols(),
        (b - a) as f64 / 1e9,
        mean.as_secs_f64() * 1e3,
        times[times.len() / 2].as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        ingest.as_secs_f64() * 1e3,
    );
}

fn bench_live(seconds: u64) {
    let info = synth::info(GPUS, IV);
    let (tx, rx) = feed(info, 4096);
    // Producer: 8 GPUs × 100 kHz in 10 ms batches, paced to real time (its CPU is not the view's).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_p = stop.clone();
    let producer = std::thread::spawn(move || {
        let wall0 = Instant::now();
        let mut chunk: i64 = 0;
        let mut sent = 0u64;
        while !stop_p.load(std::sync::atomic::Ordering::Relaxed) {
            let t = T0 + chunk * 10_000_000;
            for g in 0..GPUS {
                tx.send(LiveEvent::Samples(synth::batch(g, t, 1000, IV, |tt| {
                    synth::demo_level(g, tt - T0)
                })));
                sent += 1000;
            }
            if chunk % 10 == 0 {
                let rows = (0..GPUS)
                    .map(|g| synth::nvml(g, t, 100, 500.0, 1980))
                    .collect();
                tx.send(LiveEvent::Nvml(rows));
            }
            chunk += 1;
            let due = Duration::from_millis(10 * chunk as u64);
            if let Some(wait) = due.checked_sub(wall0.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        tx.send(LiveEvent::End);
        sent
    });
    let s = setup(&[synth::TENSOR_AVG], Palette::Truecolor, true);
    let view = std::thread::spawn(move || {
        let mut st = app::live_state(&rx, &s, Mode::Live).unwrap_or_else(|e| panic!("{e}"));
        let (w, h) = (width(), 40);
        st.update(Input::Resize(w, h));
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap_or_else(|e| panic!("{e}"));
        let period = Duration::from_secs_f64(1.0 / 30.0);
        let cpu0 = thread_cpu_ns();
        let wall0 = Instant::now();
        let mut frames = 0u64;
        let mut bins = Vec::new();
        while wall0.elapsed() < Duration::from_secs(seconds) {
            let f0 = Instant::now();
            for ev in rx.drain(Duration::ZERO) {
                st.update(Input::Feed(ev));
            }
            st.store.discarded = rx.discarded();
            term.draw(|f| cufall_viewer::draw::draw(f, &st))
                .unwrap_or_else(|e| panic!("{e}"));
            frames += 1;
            if frames.is_multiple_of(30) {
                bins.push(st.store.bins_held());
            }
            if let Some(wait) = period.checked_sub(f0.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let cpu = thread_cpu_ns() - cpu0;
        let wall = wall0.elapsed();
        let samples: u64 = st.store.devices.iter().map(|d| d.samples).sum();
        (cpu, wall, frames, samples, rx.discarded(), bins, st)
    });
    let (cpu, wall, frames, samples, discarded, bins, st) =
        view.join().unwrap_or_else(|_| panic!("view thread"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = producer.join().unwrap_or(0);
    let keep: &HeatmapState = &st;
    let mib = |b: usize| {
        b as f64 * std::mem::size_of::<cufall_viewer::bucket::Summary>() as f64 / (1 << 20) as f64
    };
    println!(
        "live  8 GPUs × 100 kHz, 30 fps, {} cols, {:.1} s: view thread CPU {:.1} ms = {:.2} % of a core; {} frames ({:.1}/s); {} samples shown of {} sent; {} batches discarded",
        keep.cols(),
        wall.as_secs_f64(),
        cpu as f64 / 1e6,
        cpu as f64 / 1e9 / wall.as_secs_f64() * 100.0,
        frames,
        frames as f64 / wall.as_secs_f64(),
        samples,
        sent,
        discarded,
    );
    let first = bins.first().copied().unwrap_or(0);
    let last = bins.last().copied().unwrap_or(0);
    println!(
        "live  memory: pyramid bins held after 1 s {first} ({:.1} MiB), at the end {last} ({:.1} MiB); process RSS {:.0} MiB",
        mib(first),
        mib(last),
        rss_mib()
    );
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    println!("cufall-viewer benchmark (synthetic data, {GPUS} GPUs, 100 kHz)");
    bench_draw(
        "1 metric, mono",
        &setup(&[synth::TENSOR_AVG], Palette::Mono, false),
        24,
    );
    bench_draw(
        "1 metric, truecolor",
        &setup(&[synth::TENSOR_AVG], Palette::Truecolor, false),
        24,
    );
    bench_draw(
        "1 metric + SM spread, truecolor",
        &setup(&[synth::TENSOR_AVG], Palette::Truecolor, true),
        24,
    );
    bench_draw(
        "2 metrics stacked + spread, 256",
        &setup(&[], Palette::Ansi256, true),
        50,
    );
    bench_live(seconds);
}
