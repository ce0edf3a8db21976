//! What the timeline's parts share below them: where times fall on screen ([`Geom`]) and what is
//! under the pointer ([`Hit`]). Its own module so that the frame's layout (`timeline`'s root)
//! uses the parts that draw and read input, and they use only this, never the root.

use crate::axis::AxisTime;
use crate::loaded::TraceSlot;
use crate::view::TimeView;
use eframe::egui::Rect;

/// Geometry of the data area for converting between time and x.
#[derive(Clone, Copy, Debug)]
pub struct Geom {
    pub x0: f32,
    pub w: f32,
    pub view: TimeView,
}

impl Geom {
    pub fn x(&self, t: AxisTime) -> f32 {
        self.x0 + ((t - self.view.t0) / self.view.span() * f64::from(self.w)) as f32
    }
    pub fn t(&self, x: f32) -> AxisTime {
        self.view.at(f64::from((x - self.x0) / self.w.max(1.0)))
    }
    pub fn frac(&self, x: f32) -> f64 {
        f64::from((x - self.x0) / self.w.max(1.0))
    }
    pub fn px_ns(&self) -> f64 {
        self.view.span() / f64::from(self.w.max(1.0))
    }

    /// The pixel columns of `area` (one a point, from its left edge) on the clock of the
    /// recording in `slot`: how many, the nanoseconds of each, and where the first starts: what
    /// a lane walks.
    pub fn columns(&self, slot: &TraceSlot, area: Rect) -> (usize, f64, f64) {
        let ncols = area.width().max(1.0) as usize;
        let px = self.px_ns();
        let t0 = slot.local(self.view.t0) as f64 + f64::from(area.left() - self.x0) * px;
        (ncols, px, t0)
    }
}

/// Something under the pointer, for hover text, clicks and double-clicks.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub text: String,
    /// Its extent on the shared axis, if it has one (a range, a kernel, a gap).
    pub span: Option<(AxisTime, AxisTime)>,
}
