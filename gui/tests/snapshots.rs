//! Image snapshots of the window on real H200 recordings (`examples/`), rendered by wgpu's GL
//! backend without a window. `UPDATE_SNAPSHOTS=1 cargo test -p cufall-gui --test snapshots`
//! rewrites them after an intended change; look at the new PNGs before committing them.

mod common;

use common::{example, harness, open};
use cufall_gui::view::{Settings, SideTab, TrackStyle};
use eframe::egui::Vec2;
use egui_kittest::kittest::Queryable;

const SIZE: Vec2 = Vec2::new(1400.0, 820.0);

#[test]
fn main_view_specdec() {
    let mut h = open(&["h200-specdec-0.5b-graphs-off.cufall"], None, SIZE, true);
    h.snapshot("main_view_specdec");
}

#[test]
fn main_view_line_style_two_gpus() {
    let settings = Settings {
        style: TrackStyle::Line,
        side_panel: false,
        ..Settings::default()
    };
    let mut h = harness(
        &[example("h200x2-two-gpu-bursts.cufall")],
        None,
        settings,
        SIZE,
        true,
    );
    h.snapshot("main_view_line_two_gpus");
}

#[test]
fn selection_statistics() {
    let mut h = open(&["h200-torch-phases.cufall"], None, SIZE, true);
    {
        let app = h.state_mut().app();
        let (a, b) = (app.st.view.t0, app.st.view.t1);
        // The middle fifth of the run.
        let len = b - a;
        app.st.selection = Some((a + len * 0.4, a + len * 0.6));
    }
    common::settle(&mut h);
    assert!(h.query_all_by_label_contains("selection ").next().is_some());
    h.snapshot("selection_statistics");
}

#[test]
fn two_recordings_aligned_at_verify() {
    let mut h = harness(
        &[
            example("h200-specdec-0.5b-graphs-off.cufall"),
            example("h200-specdec-0.5b-graphs-on.cufall"),
        ],
        Some("verify"),
        Settings::default(),
        SIZE,
        true,
    );
    h.state_mut().app().st.side_tab = SideTab::Compare;
    common::settle(&mut h);
    h.snapshot("two_recordings_aligned");
}

#[test]
fn side_panel_gaps() {
    let mut h = open(&["h200-specdec-0.5b-graphs-off.cufall"], None, SIZE, true);
    h.state_mut().app().st.side_tab = SideTab::Gaps;
    common::settle(&mut h);
    h.snapshot("side_panel_gaps");
}

#[test]
fn zoomed_into_one_verify_step() {
    let mut h = open(&["h200-specdec-0.5b-graphs-off.cufall"], None, SIZE, true);
    {
        // The 10th verify range with the draft before it: single samples, kernels and NVTX
        // names are drawn one by one at this zoom.
        let app = h.state_mut().app();
        let (start_ns, end_ns) = common::nth_verify(app, 9);
        let slot = &app.slots[0];
        let (a, b) = (slot.disp(start_ns - 1_500_000), slot.disp(end_ns + 300_000));
        app.st.view.fit(a, b, 0.0);
    }
    common::settle(&mut h);
    h.snapshot("zoomed_verify_step");
}

#[test]
fn a_flight_recorder_dump() {
    // `cufall serve`'s flight recorder on an H200 (`scripts/gpu/serve.sh small`): 16.5 s of the
    // engine run three times with pauses, dumped by `POST /dump`.
    let mut h = open(&["h200-flight-recorder.cufall"], None, SIZE, true);
    h.snapshot("flight_recorder_dump");
}

/// The views, at the two window sizes people use: each recording opened as a user
/// would, the details pane and side panel in their default places.
fn view_at(traces: &[&str], align: Option<&str>, size: Vec2, name: &str) {
    let _turn = common::render_turn();
    let mut h = common::open(traces, align, size, true);
    h.snapshot(name);
}

const LAPTOP: Vec2 = Vec2::new(1400.0, 900.0);
const DESKTOP: Vec2 = Vec2::new(1920.0, 1080.0);

const HF: &[&str] = &["h200-hf-generate-host.cufall"];
const TORCH: &[&str] = &["h200-torch-phases-host.cufall"];
const NATIVE: &[&str] = &["h200-specdec-graphs-on-native-host.cufall"];
const TWO: &[&str] = &[
    "h200-specdec-0.5b-graphs-off.cufall",
    "h200-specdec-0.5b-graphs-on.cufall",
];

#[test]
fn hf_generate_1400x900() {
    view_at(HF, None, LAPTOP, "hf_generate_1400x900");
}

#[test]
fn hf_generate_1920x1080() {
    view_at(HF, None, DESKTOP, "hf_generate_1920x1080");
}

#[test]
fn torch_phases_1400x900() {
    view_at(TORCH, None, LAPTOP, "torch_phases_1400x900");
}

#[test]
fn torch_phases_1920x1080() {
    view_at(TORCH, None, DESKTOP, "torch_phases_1920x1080");
}

#[test]
fn engine_native_1400x900() {
    view_at(NATIVE, None, LAPTOP, "engine_native_1400x900");
}

#[test]
fn engine_native_1920x1080() {
    view_at(NATIVE, None, DESKTOP, "engine_native_1920x1080");
}

#[test]
fn two_recordings_1400x900() {
    view_at(TWO, Some("verify"), LAPTOP, "two_recordings_1400x900");
}

#[test]
fn two_recordings_1920x1080() {
    view_at(TWO, Some("verify"), DESKTOP, "two_recordings_1920x1080");
}
