//! `cufall gui`: recordings in a desktop window (egui/eframe, OpenGL through glow).
//!
//! One shared time axis; per GPU a track per metric (heat strip or line over a min/max band),
//! NVML tracks, NVTX lanes, a kernel lane, drops drawn as missing data and idle gaps shaded;
//! a side panel with per-phase statistics and the largest gaps from `cufall_analysis`, the
//! statistics of a selected range, two recordings compared, aligned at a phase, and the nodes
//! of one run on the wall clock, each node's GPUs in groups of their own.
//!
//! How the pieces fit (each layer uses only those above it, never one below; `tests/imports.rs`
//! fails on a circle):
//!
//! - data structures: [`lod`], the level-of-detail pyramid (min, max, time-weighted sum and
//!   count per block of samples, blocks of blocks above), the only thing held for the whole
//!   samples table; [`spans`], what a frame draws of a lane of kernels or NVTX ranges at any
//!   zoom, in time proportional to the pixel columns; [`tables`], the tables beside the samples
//!   in compact form; [`tiles`], raw samples in time tiles; [`gaps`], every idle gap;
//!   [`host_threads`], the sampled host threads and what a frame draws of one; [`names`],
//!   interned strings; [`flame`], the icicle of a selection's host samples; [`axis`],
//!   [`axis::AxisTime`], a time on the shared axis; [`fmt`];
//! - [`loaded`]: the state the loader and the views share ([`loaded::Shared`] behind
//!   [`loaded::LoadedTrace`], [`loaded::TraceSlot`], [`loaded::Locked`], the report and the
//!   comparison as states);
//! - [`data`]: the loader, a worker thread per recording: the tables, then the samples in time
//!   tiles feeding the pyramid, then the analysis report; raw tiles on demand; [`stats`]: the
//!   statistics of a selection; [`memory`]: freed memory handed back to the system after
//!   loading (the one `unsafe` call, allowed in that module alone);
//! - [`view`]: the state apart from drawing (time window, selection, settings) and
//!   [`view::Input`], every change the views make to it, which [`view::ViewState::apply`]
//!   alone acts on;
//! - the views, drawing (`*_ui` functions, which read the state and never write it) and
//!   turning egui's input into [`view::Input`]s that they return to the window:
//!   [`timeline`] (rows, per GPU a group that folds; their heights, shared by
//!   [`timeline::layout`]; input; tracks), [`panel`] (with [`icicle`], the flame graph of the
//!   selection), [`browse`] (the Browse… window);
//! - [`app`]: the window, which holds the recordings, lays the views out and applies the
//!   inputs each returns (so a test drives the state with inputs, without drawing).
//!
//! The `cufall gui` subcommand (flags in the binary) calls [`run`]; tests drive
//! [`app::GuiApp::ui_root`] through egui_kittest without a window.
#![deny(unsafe_code)]

pub mod app;
pub mod axis;
pub mod browse;
pub mod data;
pub mod details;
pub mod flame;
pub mod fmt;
pub mod gaps;
pub mod host_threads;
pub mod icicle;
pub mod loaded;
pub mod lod;
pub mod memory;
pub mod names;
pub mod panel;
pub mod spans;
pub mod stats;
pub mod tables;
pub mod tiles;
pub mod timeline;
pub mod view;

use std::path::PathBuf;

/// What to open.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GuiOptions {
    /// Recordings: the first is A, the second B; more than two are the nodes of one run.
    pub traces: Vec<PathBuf>,
    /// Phase path to align B at (its first range starts where A's first does), or `wall`:
    /// every recording on the wall clock.
    pub align: Option<String>,
    /// Which NVTX ranges are phases (the report, the phase lane, alignment); every range is
    /// drawn on the NVTX lanes either way.
    pub phases: cufall_analysis::select::PhaseSelect,
}

/// Why the window could not run.
#[derive(Debug, thiserror::Error)]
pub enum GuiError {
    #[error(
        "cufall gui needs a graphical display, and neither DISPLAY nor WAYLAND_DISPLAY is set. \
         In a terminal, browse the recording with `cufall view TRACE`; from another machine, \
         use `ssh -X`, or start a virtual display (`xvfb-run cufall gui TRACE`)."
    )]
    NoDisplay,
    #[error(
        "cannot open a window (cufall gui needs OpenGL 2 or later; without a GPU, Mesa's \
         software renderer works: `LIBGL_ALWAYS_SOFTWARE=1 cufall gui TRACE`; in a terminal, \
         `cufall view TRACE` shows the recording without a window)"
    )]
    Window {
        #[source]
        source: BackendError,
    },
}

/// What eframe reported when the window failed, as text: eframe's error holds window handles
/// that cannot cross threads, and the binary's error chain must.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// Whether a display server is reachable by name (X11 or Wayland). Windows and macOS always
/// have one.
pub fn display_available(env: impl Fn(&str) -> Option<String>) -> bool {
    if cfg!(any(target_os = "windows", target_os = "macos")) {
        return true;
    }
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    set("DISPLAY") || set("WAYLAND_DISPLAY")
}

/// Opens the window and returns when it is closed.
pub fn run(opts: GuiOptions) -> Result<(), GuiError> {
    if !display_available(|k| std::env::var(k).ok()) {
        return Err(GuiError::NoDisplay);
    }
    let native = eframe::NativeOptions {
        renderer: eframe::Renderer::Glow,
        // Software GL (Mesa llvmpipe, X forwarding) has no multisampling or depth to spare.
        multisampling: 0,
        depth_buffer: 0,
        viewport: eframe::egui::ViewportBuilder::default()
            .with_title("cufall")
            .with_inner_size([1400.0, 900.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "cufall",
        native,
        Box::new(move |cc| {
            let settings: view::Settings = cc
                .storage
                .and_then(|s| eframe::get_value(s, app::SETTINGS_KEY))
                .unwrap_or_default();
            Ok(Box::new(app::GuiApp::new(
                &cc.egui_ctx,
                &opts.traces,
                opts.align.clone(),
                opts.phases.clone(),
                settings,
            )))
        }),
    )
    .map_err(|e| GuiError::Window {
        source: BackendError(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_display_is_detected_and_explained() {
        let none = |_: &str| None;
        if cfg!(target_os = "linux") {
            assert!(!display_available(none));
            assert!(!display_available(|_| Some(String::new())));
        }
        assert!(display_available(
            |k| (k == "WAYLAND_DISPLAY").then(|| "wayland-0".into())
        ));
        let msg = GuiError::NoDisplay.to_string();
        assert!(msg.contains("cufall view"), "{msg}");
    }
}
