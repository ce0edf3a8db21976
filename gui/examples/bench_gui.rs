//! Benchmark of `cufall gui` on large synthetic traces: first frame, frame times while zooming
//! and panning, memory.
//!
//! ```text
//! cargo build --release -p cufall-gui --example bench_gui
//! target/release/examples/bench_gui generate /tmp/big.cufall --seconds 60 --gpus 8 --metrics 4 --interval-us 10 [--host-threads N]
//! target/release/examples/bench_gui open /tmp/big.cufall [--wait-s N]
//! ```
//!
//! `generate` writes the synthetic trace of `cufall_testkit::bench`, its `Gui` kind (10 ms
//! steps: draft 4 ms, idle 0.5 ms, verify 4.5 ms, idle 1 ms, with NVTX ranges and one kernel
//! per phase; NVML every 10 ms; with `--host-threads N`, host stacks of N threads sampled every
//! millisecond, the main thread's 16 frames deep). The values are made up; nothing here is a
//! measurement of a GPU.
//!
//! `open` runs the whole window (`GuiApp::ui_root`) headless at 1600×1000 points in a fresh
//! process, every GPU's group of tracks open, and prints: the time to the first frame (the manifest read, the tracks laid out,
//! the samples still loading), the time until the pyramid and the report are complete, the CPU
//! time of each frame (egui layout and tessellation; the GPU's rasterising is not included)
//! while zooming from the whole run down to 50 µs at the cursor and out again and while
//! panning, during loading and after, then of 100 frames of the whole run in view (the
//! costliest view), and the peak resident memory (VmHWM).

use cufall_gui::app::GuiApp;
use cufall_gui::view::Settings;
use cufall_testkit::bench::{BenchKind, BenchTrace, write_bench_trace};
use cufall_trace::WriterOptions;
use eframe::egui;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn arg(args: &[String], name: &str, default: i64) -> i64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Writes the trace (`cufall_testkit::bench`, the window's kind) and says what it wrote.
fn generate(path: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let seconds = arg(args, "--seconds", 60);
    let gpus = arg(args, "--gpus", 8) as u32;
    let metrics = arg(args, "--metrics", 4).clamp(1, 4) as usize;
    let interval = arg(args, "--interval-us", 10) * 1000;
    let host_threads = arg(args, "--host-threads", 0).clamp(0, 64) as u32;
    let started = Instant::now();
    let spec = BenchTrace {
        seconds,
        gpus,
        kind: BenchKind::Gui {
            interval_ns: interval,
            metrics,
            host_threads,
        },
    };
    write_bench_trace(Path::new(path), &spec, WriterOptions::default())?;
    let per_second = 1_000_000_000 / interval;
    let bytes: u64 = walk_size(&PathBuf::from(path));
    println!(
        "generated {path}: {seconds} s × {gpus} GPUs × {metrics} metrics at {} µs = {} values, {} host threads sampled every ms, {:.0} MB, in {:.1} s",
        interval / 1000,
        seconds as u64 * per_second as u64 * u64::from(gpus) * metrics as u64,
        host_threads,
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn walk_size(p: &PathBuf) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            n += if path.is_dir() {
                walk_size(&path)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    n
}

struct Frames {
    ctx: egui::Context,
    app: GuiApp,
    size: egui::Vec2,
}

impl Frames {
    /// One frame with `events`; returns its CPU time (layout and tessellation).
    fn frame(&mut self, events: Vec<egui::Event>) -> Duration {
        let input = egui::RawInput {
            screen_rect: Some(egui::Rect::from_min_size(egui::Pos2::ZERO, self.size)),
            events,
            ..Default::default()
        };
        let t = Instant::now();
        let app = &mut self.app;
        let out = self.ctx.run_ui(input, |ui| app.ui_root(ui));
        let layout = t.elapsed();
        let shapes = out.shapes.len();
        let prims = self.ctx.tessellate(out.shapes, out.pixels_per_point);
        let vertices: usize = prims
            .iter()
            .map(|p| match &p.primitive {
                egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
                egui::epaint::Primitive::Callback(_) => 0,
            })
            .sum();
        std::hint::black_box(prims);
        let all = t.elapsed();
        if std::env::var("BENCH_GUI_TRACE")
            .is_ok_and(|ms| all.as_secs_f64() * 1e3 > ms.parse().unwrap_or(16.0))
        {
            eprintln!(
                "frame {:.1} ms: layout {:.1} ms, tessellate {:.1} ms, {shapes} shapes, {vertices} vertices",
                all.as_secs_f64() * 1e3,
                layout.as_secs_f64() * 1e3,
                (all - layout).as_secs_f64() * 1e3
            );
        }
        all
    }
}

fn pct(v: &mut [Duration], q: f64) -> f64 {
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

/// Zooms in 10 % per frame at a point a third across until the window is 50 µs, pans, and
/// zooms out again; returns every frame's time.
fn navigate(f: &mut Frames, frames: usize) -> Vec<Duration> {
    navigate_spans(f, frames)
        .into_iter()
        .map(|(d, _)| d)
        .collect()
}

/// [`navigate`], with the window's span (ns) at each frame.
fn navigate_spans(f: &mut Frames, frames: usize) -> Vec<(Duration, f64)> {
    let mut times = Vec::new();
    let Some(area) = f.app.st.last_data_rect else {
        return times;
    };
    let p = egui::Pos2::new(area.left() + area.width() / 3.0, area.top() + 30.0);
    let mut zoom_in = true;
    for i in 0..frames {
        let mut ev = vec![egui::Event::PointerMoved(p)];
        let span = f.app.st.view.span();
        if i % 40 >= 30 {
            // Pan with the horizontal wheel for 10 frames out of 40.
            ev.push(egui::Event::MouseWheel {
                unit: egui::MouseWheelUnit::Point,
                delta: egui::Vec2::new(-40.0, 0.0),
                modifiers: egui::Modifiers::NONE,
                phase: egui::TouchPhase::Move,
                source: egui::MouseWheelSource::Wheel,
            });
        } else {
            if span < 50_000.0 {
                zoom_in = false;
            } else if span > 1.5e12 || f.app.st.view.span() >= 0.99 * full_span(f) {
                zoom_in = true;
            }
            ev.push(egui::Event::Zoom(if zoom_in { 1.1 } else { 1.0 / 1.1 }));
        }
        times.push((f.frame(ev), span));
    }
    times
}

fn full_span(f: &Frames) -> f64 {
    let s = f.app.slots.first().map(|s| s.data.lock().extent);
    s.map_or(1e9, |e| (e.end_ns - e.start_ns) as f64)
}

/// The costliest view: the whole run, moved by half a pixel each frame so that nothing can be
/// reused from the frame before; prints the frame times.
fn whole_run(f: &mut Frames) -> Result<(), Box<dyn std::error::Error>> {
    let Some((fit, _)) = f.app.st.fitted else {
        return Err("the view was never fitted to the run".into());
    };
    let (a, b) = (fit.t0, fit.t1);
    let half_px = (b - a) / 1600.0 / 2.0;
    let mut whole = Vec::new();
    for i in 0..100 {
        let shift = if i % 2 == 0 { 0.0 } else { half_px };
        f.app.st.view.t0 = a + shift;
        f.app.st.view.t1 = b + shift;
        let at = f
            .app
            .st
            .last_data_rect
            .map_or(egui::Pos2::new(800.0, 300.0), |r| {
                egui::Pos2::new(r.left() + r.width() / 3.0, r.top() + 30.0)
            });
        whole.push(f.frame(vec![egui::Event::PointerMoved(at)]));
    }
    println!(
        "whole run in view: 100 frames, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&mut whole, 0.5),
        pct(&mut whole, 0.99),
        pct(&mut whole, 1.0)
    );
    Ok(())
}

fn open(path: &str, wait_s: u64) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let ctx = egui::Context::default();
    let mut app = GuiApp::new(
        &ctx,
        &[PathBuf::from(path)],
        None,
        Default::default(),
        Settings::default(),
    );
    // Every GPU's group open, as it would not start with 8 GPUs: the costliest layout, with as
    // many tracks at their smallest height as fit the window.
    app.st.folded = Some(Default::default());
    let mut f = Frames {
        ctx,
        app,
        size: egui::Vec2::new(1600.0, 1000.0),
    };
    let first = f.frame(Vec::new());
    let first_frame = started.elapsed();
    println!(
        "first frame {:.0} ms after start (that frame {:.1} ms; the tracks laid out, samples loading)",
        first_frame.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
    let (mut loading, pyramid_at, report_at) = wait_loaded(&mut f, started, wait_s);
    let samples: u64 = f.app.slots[0]
        .data
        .lock()
        .pyramids
        .values()
        .map(|p| p.samples())
        .sum();
    let pyramid_bytes: usize = f.app.slots[0]
        .data
        .lock()
        .pyramids
        .values()
        .map(|p| p.bytes())
        .sum();
    println!(
        "samples in the pyramid: {samples} ({:.0} MB of summaries); pyramid complete after {:.1} s, report after {:.1} s",
        pyramid_bytes as f64 / 1e6,
        pyramid_at.map_or(f64::NAN, |d| d.as_secs_f64()),
        report_at.map_or(f64::NAN, |d| d.as_secs_f64()),
    );
    if !loading.is_empty() {
        let n = loading.len();
        println!(
            "while loading: {n} frames zooming/panning, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            pct(&mut loading, 0.5),
            pct(&mut loading, 0.99),
            pct(&mut loading, 1.0)
        );
    }
    navigate_loaded(&mut f)?;
    whole_run(&mut f)?;
    let tiles = f.app.slots[0].data.lock().tiles.bytes();
    println!(
        "memory: peak RSS {} MiB, now {} MiB (raw-sample tiles held {:.0} MB)",
        status_kb("VmHWM:") / 1024,
        status_kb("VmRSS:") / 1024,
        tiles as f64 / 1e6
    );
    Ok(())
}

/// Frames while the recording loads (zooming and panning), until the pyramid and the report
/// are done or `wait_s` passes; prints when each part was ready. Returns the frame times and
/// when the pyramid and the report were done.
fn wait_loaded(
    f: &mut Frames,
    started: Instant,
    wait_s: u64,
) -> (Vec<Duration>, Option<Duration>, Option<Duration>) {
    // Frames while loading.
    let mut loading = Vec::new();
    let mut pyramid_at = None;
    let mut report_at = None;
    let mut tables_at = None;
    let deadline = Instant::now() + Duration::from_secs(wait_s);
    while Instant::now() < deadline {
        let (done, report, tables) = {
            let s = f.app.slots[0].data.lock();
            let tables = s.tables.as_ref().map(|t| t.bytes());
            (s.samples_done, s.report.is_done(), tables)
        };
        if let (Some(bytes), None) = (tables, tables_at) {
            tables_at = Some(started.elapsed());
            println!(
                "tables loaded after {:.1} s: kernel and NVML tables hold {:.0} MB; RSS then {} MiB, peak {} MiB",
                started.elapsed().as_secs_f64(),
                bytes as f64 / 1e6,
                status_kb("VmRSS:") / 1024,
                status_kb("VmHWM:") / 1024
            );
        }
        if done && pyramid_at.is_none() {
            pyramid_at = Some(started.elapsed());
            println!(
                "pyramid complete after {:.1} s: RSS then {} MiB, peak {} MiB",
                started.elapsed().as_secs_f64(),
                status_kb("VmRSS:") / 1024,
                status_kb("VmHWM:") / 1024
            );
        }
        if report && report_at.is_none() {
            report_at = Some(started.elapsed());
            println!(
                "report done after {:.1} s: RSS then {} MiB, peak {} MiB",
                started.elapsed().as_secs_f64(),
                status_kb("VmRSS:") / 1024,
                status_kb("VmHWM:") / 1024
            );
        }
        if done && report {
            break;
        }
        if loading.len() < 400 {
            loading.extend(navigate(f, 10));
        } else {
            std::thread::sleep(Duration::from_millis(50));
            f.frame(Vec::new());
        }
    }
    (loading, pyramid_at, report_at)
}

/// Fits the loaded recording, then times 600 frames zooming and panning it (raw tiles load on
/// demand as the view zooms in).
fn navigate_loaded(f: &mut Frames) -> Result<(), Box<dyn std::error::Error>> {
    // Fit, then navigate the loaded trace; raw tiles load on demand as the view zooms in.
    f.frame(vec![egui::Event::Key {
        key: egui::Key::F,
        physical_key: None,
        pressed: true,
        repeat: false,
        modifiers: egui::Modifiers::NONE,
    }]);
    let spans = navigate_spans(f, 600);
    if let Some(path) = std::env::var_os("BENCH_GUI_FRAMES") {
        // Every loaded frame: its window (ms) and its time (ms), for a closer look.
        let lines: String = spans
            .iter()
            .map(|(d, span)| format!("{:.6} {:.3}\n", span / 1e6, d.as_secs_f64() * 1e3))
            .collect();
        std::fs::write(path, lines)?;
    }
    let mut slow = spans.clone();
    slow.sort_by_key(|s| std::cmp::Reverse(s.0));
    for (d, span) in slow.iter().take(6) {
        println!(
            "  slow frame {:.1} ms with a {:.3} ms window",
            d.as_secs_f64() * 1e3,
            span / 1e6
        );
    }
    let mut times: Vec<Duration> = spans.into_iter().map(|(d, _)| d).collect();
    let n = times.len();
    println!(
        "loaded: {n} frames zooming (whole run ↔ 50 µs) and panning, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(&mut times, 0.5),
        pct(&mut times, 0.99),
        pct(&mut times, 1.0)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("generate"), Some(p)) => generate(p, &args),
        (Some("open"), Some(p)) => open(p, arg(&args, "--wait-s", 1800).max(1) as u64),
        _ => {
            eprintln!(
                "usage: bench_gui generate PATH [--seconds N --gpus N --metrics N --interval-us N] | open PATH [--wait-s N]"
            );
            std::process::exit(2)
        }
    }
}
