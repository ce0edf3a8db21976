//! Shared test helpers: a harness around the whole app on real recordings, rendered with wgpu's
//! GL backend (Mesa's llvmpipe on machines without a GPU), one backend everywhere so that
//! snapshots compare across machines.
#![allow(dead_code)]

use cufall_gui::app::GuiApp;
use cufall_gui::view::Settings;
use eframe::egui;
use egui_kittest::Harness;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static RENDER: Mutex<()> = Mutex::new(());

/// Tests that render take turns: software rendering of several large windows at once on a
/// loaded machine can pass the time wgpu waits for a frame.
pub fn render_turn() -> MutexGuard<'static, ()> {
    RENDER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The app on the bundled recordings named `traces` (`examples/`), default settings.
pub fn open(
    traces: &[&str],
    align: Option<&str>,
    size: egui::Vec2,
    render: bool,
) -> Harness<'static, TestApp> {
    let paths: Vec<_> = traces.iter().map(|t| example(t)).collect();
    harness(&paths, align, Settings::default(), size, render)
}

/// The start and end (on its own clock) of the `n`-th `verify` range, from 0, of the app's
/// first recording.
pub fn nth_verify(app: &GuiApp, n: usize) -> (i64, i64) {
    let s = app.slots[0].data.lock();
    let tables = s.tables.as_ref().expect("tables");
    let verify = tables
        .phases
        .phases
        .iter()
        .position(|p| p.path == "verify")
        .expect("a verify phase");
    let mut r: Vec<_> = tables
        .phases
        .ranges
        .iter()
        .filter(|r| r.phase == verify)
        .collect();
    r.sort_by_key(|r| r.start_ns);
    (r[n].start_ns, r[n].end_ns)
}

pub fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

/// The app, created on the harness's first frame with the harness's context.
pub struct TestApp {
    pub traces: Vec<PathBuf>,
    pub align: Option<String>,
    pub settings: Settings,
    pub app: Option<GuiApp>,
}

impl TestApp {
    pub fn app(&mut self) -> &mut GuiApp {
        self.app.as_mut().expect("created on the first frame")
    }
}

fn gl_setup() -> egui_wgpu::WgpuSetup {
    let mut setup = egui_kittest::wgpu::default_wgpu_setup();
    if let egui_wgpu::WgpuSetup::CreateNew(s) = &mut setup {
        s.instance_descriptor.backends = egui_wgpu::wgpu::Backends::GL;
    }
    setup
}

pub fn harness(
    traces: &[PathBuf],
    align: Option<&str>,
    settings: Settings,
    size: egui::Vec2,
    render: bool,
) -> Harness<'static, TestApp> {
    let state = TestApp {
        traces: traces.to_vec(),
        align: align.map(str::to_string),
        settings,
        app: None,
    };
    let mut b = Harness::builder().with_size(size);
    if render {
        b = b.wgpu_setup(gl_setup());
    }
    let mut h = b.build_ui_state(
        |ui, s: &mut TestApp| {
            if s.app.is_none() {
                s.app = Some(GuiApp::new(
                    ui.ctx(),
                    &s.traces,
                    s.align.clone(),
                    Default::default(),
                    s.settings.clone(),
                ));
            }
            if let Some(app) = s.app.as_mut() {
                app.ui_root(ui);
            }
        },
        state,
    );
    settle(&mut h);
    h
}

/// Steps the harness until every recording is loaded, tiles asked for by the view included.
/// The last frames drawn may ask for tiles of their own (a slow machine reaches them later):
/// it waits again until a few frames pass with nothing loading, so a snapshot never catches a
/// tile half-way.
pub fn settle(h: &mut Harness<'static, TestApp>) {
    for _ in 0..5 {
        wait_idle(h);
        h.run_steps(4);
        if is_idle(h) {
            return;
        }
    }
}

fn is_idle(h: &mut Harness<'static, TestApp>) -> bool {
    h.state_mut().app.as_ref().is_none_or(|a| a.is_idle())
}

fn wait_idle(h: &mut Harness<'static, TestApp>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut quiet = 0;
    while Instant::now() < deadline {
        h.step();
        quiet = if is_idle(h) { quiet + 1 } else { 0 };
        if quiet >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
