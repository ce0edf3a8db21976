//! Host stacks and nodes on a synthetic recording with known phases, gaps and host samples
//! (`cufall_testkit::fixture` with [`Extras`]): the host lanes under the phases, the hover of a
//! sample, the flame graph of a gap selected in the side panel, and two hosts' recordings on
//! the wall clock with their GPUs named `host:GPU n`; then three nodes, a real recording
//! written again as three hosts ([`as_node`]), each node's GPU a group of its own. Image
//! snapshots in `tests/snapshots/`, rewritten with
//! `UPDATE_SNAPSHOTS=1 cargo test -p cufall-gui --test host`.

mod common;

use common::{TestApp, harness, settle};
use cufall_gui::axis::AxisTime;
use cufall_gui::loaded::Locked;
use cufall_gui::view::{DetailsTab, GpuGroup, Settings, SideTab};
use cufall_testkit::examples::as_node;
use cufall_testkit::fixture::{Extras, Fixture, T0, US};
use cufall_trace::model::DeviceId;
use eframe::egui::{Event, Pos2, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

const SIZE: Vec2 = Vec2::new(1400.0, 820.0);

/// The tests that render take turns: on a loaded machine, software rendering of several windows
/// at once can pass the 10 s a frame may take in egui_kittest.
static RENDER: Mutex<()> = Mutex::new(());

fn render_turn() -> MutexGuard<'static, ()> {
    RENDER.lock().unwrap_or_else(|e| e.into_inner())
}
/// NVTX lanes (2), then the host threads' title and lanes, each 18 points and 2 between.
const ROW: f32 = 20.0;

fn write(dir: &tempfile::TempDir, name: &str, extras: &Extras, fx: &Fixture) -> PathBuf {
    fx.write_with(dir.path(), name, extras)
}

fn with_host() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let extras = Extras {
        phase_threads: true,
        ..Extras::default()
    };
    let path = write(&dir, "host.cufall", &extras, &Fixture::default());
    (dir, path)
}

/// The x of a time (µs after the fixture's start) in the data area as last drawn.
fn x_at(h: &mut Harness<'static, TestApp>, us: i64) -> f32 {
    let app = h.state_mut().app();
    let r = app.st.last_data_rect.expect("drawn");
    let t = app.slots[0].disp(T0 + us * US);
    let v = app.st.view;
    r.left() + ((t - v.t0) / v.span()) as f32 * r.width()
}

#[test]
fn host_lanes_under_the_phases() {
    let _turn = render_turn();
    let (_dir, path) = with_host();
    let mut h = harness(&[path], None, Settings::default(), SIZE, true);
    {
        let app = h.state_mut().app();
        let s = app.slots[0].data.lock();
        let host = &s.tables.as_ref().expect("tables").host;
        let names: Vec<String> = host
            .threads
            .iter()
            .map(|t| format!("{}/{} {}", t.pid, t.tid, t.name))
            .collect();
        assert_eq!(names, ["1234/1234 MainThread", "1234/1240 loader"]);
    }
    h.snapshot("host_lanes");
}

#[test]
fn hovering_a_host_lane_shows_the_whole_stack() {
    let (_dir, path) = with_host();
    let settings = Settings {
        side_panel: false,
        ..Settings::default()
    };
    let mut h = harness(&[path], None, settings, SIZE, false);
    let top = h.state_mut().app().st.last_data_rect.expect("drawn").top();
    // MainThread's lane, in the draft → verify gap of step 1: waiting on the GPU.
    let pos = Pos2::new(x_at(&mut h, 1450), top + 3.0 * ROW + 9.0);
    h.event(Event::PointerMoved(pos));
    h.run_steps(4);
    let tip = h
        .query_all_by_label_contains("cudaStreamSynchronize")
        .next()
        .expect("the tooltip names the innermost frame")
        .accesskit_node()
        .label()
        .unwrap_or_default();
    for part in [
        "1234/1234 MainThread",
        "waiting (idle), GIL released",
        "cudaStreamSynchronize  libcudart.so.13  (native)",
        "synchronize  torch/cuda/__init__.py:985  (python)",
        "main  serve.py:140  (python)",
    ] {
        assert!(tip.contains(part), "{part:?} not in {tip:?}");
    }
}

#[test]
fn a_gap_clicked_in_the_side_panel_shows_where_the_host_was() {
    let _turn = render_turn();
    let (_dir, path) = with_host();
    let mut h = harness(&[path], None, Settings::default(), SIZE, true);
    h.state_mut().app().st.side_tab = SideTab::Gaps;
    settle(&mut h);
    // The first gap listed (the longest), as the list spells its length.
    let (len, start, dur) = {
        let app = h.state_mut().app();
        let s = app.slots[0].data.lock();
        let g = &s.report.ready().expect("report").gaps[0];
        let len = g.duration_ns.to_string();
        (len, g.start_ns, g.duration_ns.as_f64())
    };
    let first = h.query_all_by_label(&len).next().expect("the gap listed");
    first.click();
    h.run_steps(2);
    settle(&mut h);
    {
        let app = h.state_mut().app();
        assert_eq!(app.st.details_tab, DetailsTab::Flame);
        let (a, b) = app.st.selection().expect("the gap is selected");
        assert!(((b - a) - dur).abs() < 1.0, "{} for {dur}", b - a);
        assert_eq!(a, app.slots[0].disp(start));
    }
    // The flame graph of the gap's host samples is drawn.
    assert!(
        h.query_all_by_label_contains("samples; width")
            .next()
            .is_some()
    );
    h.event(Event::PointerGone);
    settle(&mut h);
    h.snapshot("host_icicle_of_a_gap");
}

#[test]
fn two_nodes_on_the_wall_clock_name_their_gpus_by_host() {
    let _turn = render_turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let a = write(
        &dir,
        "node-a.cufall",
        &Extras {
            hostname: Some("node-a".into()),
            phase_threads: true,
        },
        &Fixture::default(),
    );
    // Node B's verify ends 80 µs early: the two nodes' GPUs differ where it idles.
    let b = write(
        &dir,
        "node-b.cufall",
        &Extras {
            hostname: Some("node-b".into()),
            phase_threads: false,
        },
        &Fixture {
            extra_verify_gap_us: 80,
            drops: false,
            ..Fixture::default()
        },
    );
    let mut h = harness(&[a, b], Some("wall"), Settings::default(), SIZE, true);
    h.state_mut().app().st.side_tab = SideTab::Gaps;
    settle(&mut h);
    {
        let app = h.state_mut().app();
        assert!(app.st.align_wall);
        assert_eq!(app.slots[0].offset_ns, app.slots[1].offset_ns, "no shift");
    }
    for gpu in ["node-a:GPU 0", "node-b:GPU 1"] {
        assert!(
            h.query_all_by_label(gpu).next().is_some(),
            "{gpu} in the gaps table"
        );
    }
    h.snapshot("two_nodes_wall_clock");
}

/// `h200-torch-phases.cufall` as three hosts in `dir`: node-b's every time 3 ms later, node-c's
/// 1 ms.
fn three_nodes(dir: &tempfile::TempDir) -> Vec<PathBuf> {
    let src = common::example("h200-torch-phases.cufall");
    [("node-a", 0), ("node-b", 3_000_000), ("node-c", 1_000_000)]
        .into_iter()
        .map(|(host, offset_ns)| {
            let path = dir.path().join(format!("{host}.cufall"));
            as_node(&src, &path, host, offset_ns, 200);
            path
        })
        .collect()
}

#[test]
fn three_nodes_on_the_wall_clock_fold_each_nodes_gpu_apart() {
    let _turn = render_turn();
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = three_nodes(&dir);
    let mut h = harness(&paths, Some("wall"), Settings::default(), SIZE, true);
    {
        let app = h.state_mut().app();
        assert_eq!(app.slots.len(), 3);
        assert!(app.st.nodes_apart(3));
        let offsets: Vec<i64> = app.slots.iter().map(|s| s.offset_ns).collect();
        assert_eq!(offsets, vec![offsets[0]; 3], "no shift");
        // Every group open (the window is too low for all of them to start so).
        app.st.folded = Some(Default::default());
    }
    h.run_steps(2);
    for gpu in ["node-a:GPU 0", "node-b:GPU 0", "node-c:GPU 0"] {
        assert!(
            h.query_all_by_label(&format!("fold {gpu}"))
                .next()
                .is_some(),
            "{gpu} is a group of its own"
        );
    }
    h.get_by_label("fold node-b:GPU 0").click();
    h.run_steps(2);
    settle(&mut h);
    // 12 ms from node-a's first decode step: node-c's steps 1 ms later, node-b's 3 ms.
    {
        let app = h.state_mut().app();
        let first_decode = {
            let t = Locked::new(&app.slots[0]);
            let phases = &t.s.tables.as_ref().expect("read").phases;
            let idx = phases.phases.iter().position(|p| p.path == "decode");
            let start = phases
                .ranges
                .iter()
                .filter(|r| Some(r.phase) == idx)
                .map(|r| r.start_ns)
                .min()
                .expect("a decode step");
            app.slots[0].disp(start)
        };
        let end = AxisTime::new(first_decode.ns + 12e6);
        app.st.view.fit(first_decode, end, 0.02);
    }
    settle(&mut h);
    let node_b = GpuGroup {
        ti: Some(1),
        dev: DeviceId(0),
    };
    assert_eq!(
        h.state_mut().app().st.folded,
        Some([node_b].into_iter().collect())
    );
    h.event(Event::PointerGone);
    settle(&mut h);
    h.snapshot("three_nodes_wall_clock");
}

/// More than two recordings are the nodes of one run whatever `--align` says: the window puts
/// them on the wall clock and says so.
#[test]
fn three_recordings_open_on_the_wall_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = three_nodes(&dir);
    let mut h = harness(&paths, Some("decode"), Settings::default(), SIZE, false);
    let app = h.state_mut().app();
    assert_eq!(app.slots.len(), 3);
    assert!(app.st.align_wall);
    assert_eq!(app.st.align_phase, None);
    let said: Vec<&str> = app.st.messages.iter().map(|m| m.text.as_str()).collect();
    assert!(
        said.iter().any(|m| m.starts_with(
            "3 recordings given: shown as the nodes of one run, on the wall clock (--align decode aligns two)"
        )),
        "{said:?}"
    );
}

#[test]
fn a_click_on_the_host_title_folds_the_threads() {
    let (_dir, path) = with_host();
    let settings = Settings {
        side_panel: false,
        ..Settings::default()
    };
    let mut h = harness(&[path], None, settings, SIZE, false);
    // Two threads: they start open.
    assert_eq!(h.state_mut().app().st.host_folded, Some(Default::default()));
    h.get_by_label("fold host threads 0").click();
    h.run_steps(2);
    let folded = h.state_mut().app().st.host_folded.clone();
    assert_eq!(folded, Some([0].into_iter().collect()));
    h.get_by_label("unfold host threads 0").click();
    h.run_steps(2);
    assert_eq!(h.state_mut().app().st.host_folded, Some(Default::default()));
}
