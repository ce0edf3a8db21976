//! cufall's terminal heatmap: one band per GPU, time running to the right, each cell the
//! time-weighted mean (or max) of its time bucket, coloured so that saturation reads as red.
//!
//! How the pieces fit:
//! - [`bucket`]: time bucketing and the pyramid of summaries ([`bucket::Pyramid`]) that makes a frame cost
//!   the same at any sample rate;
//! - [`store`]: everything received, fed by [`cufall_live::LiveEvent`]s;
//! - [`state`]: the view (window, zoom, options), changed only by [`input::Input`]s;
//! - [`draw`]: state → ratatui buffer, read-only; [`color`]: palettes and the colour map;
//! - [`replay`]: a recording as a live feed; [`live`], [`app`]: the terminal loops;
//!   [`print`]: one frame as text. The `view` and `replay` flags live in the `cufall` binary.
#![forbid(unsafe_code)]

pub mod app;
pub mod bucket;
pub mod color;
pub mod draw;
pub mod error;
pub mod input;
pub mod live;
pub mod print;
pub mod replay;
pub mod state;
pub mod store;

pub use error::ViewError;

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-viewer (lib.rs)", &src.join("lib.rs"));
    }
}
