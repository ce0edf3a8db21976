//! Painting helpers of the timeline: colour maps, metric columns as one mesh (heat strip, or a
//! line over a min/max band), hatching, group titles and the `A`/`B` tags of labels.

use crate::loaded::Locked;
use crate::lod::Summary;
use eframe::egui::{self, Align2, Color32, FontId, Mesh, Pos2, Rect, Shape, Stroke, Vec2};

/// Idle gaps: the band under a GPU's first track, hatched orange.
pub(super) const GAP_FILL: Color32 = Color32::from_rgb(150, 80, 10);
pub(super) const GAP_HATCH: Color32 = Color32::from_rgb(255, 170, 60);
/// Missing data (drops): hatched red on dark grey, over the track.
pub(super) const DROP_FILL: Color32 = Color32::from_gray(40);
pub(super) const DROP_HATCH: Color32 = Color32::from_rgb(200, 80, 80);

/// The Turbo colour map (Google's polynomial fit) at `t` in `[0, 1]`.
pub fn turbo(t: f32) -> Color32 {
    let t = t.clamp(0.0, 1.0);
    let r = 0.135_721_4
        + t * (4.615_392_6
            + t * (-42.660_324 + t * (132.131_09 + t * (-152.942_4 + t * 59.286_38))));
    let g = 0.091_402_6
        + t * (2.194_188_4
            + t * (4.842_966_6 + t * (-14.185_034 + t * (4.277_298_6 + t * 2.829_566))));
    let b = 0.106_673_3
        + t * (12.641_946 + t * (-60.582_05 + t * (110.362_77 + t * (-89.903_11 + t * 27.348_25))));
    let c = |v: f32| (v.clamp(0.0, 1.0) * 255.0) as u8;
    Color32::from_rgb(c(r), c(g), c(b))
}

/// A stable colour for a name.
pub fn name_color(name: &str) -> Color32 {
    let mut h: u32 = 2_166_136_261;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(16_777_619);
    }
    let hue = (h % 360) as f32 / 360.0;
    egui::ecolor::Hsva::new(hue, 0.45, 0.78, 1.0).into()
}

/// Colours one point column per summary; neighbours of the same colour are one quad (the same
/// pixels, fewer vertices to copy each frame).
pub(super) fn heat_mesh(painter: &egui::Painter, area: Rect, cols: &[Summary], scale: f64) {
    let mut mesh = Mesh::default();
    let w = area.width() / cols.len().max(1) as f32;
    let x = |c: usize| area.left() + c as f32 * w;
    let mut open: Option<(usize, Color32)> = None;
    let close = |mesh: &mut Mesh, run: Option<(usize, Color32)>, end: usize| {
        if let Some((c0, color)) = run {
            let r = Rect::from_min_max(
                Pos2::new(x(c0), area.top()),
                Pos2::new(x(end), area.bottom()),
            );
            mesh.add_colored_rect(r, color);
        }
    };
    for (c, s) in cols.iter().enumerate() {
        let color = s
            .mean()
            .or((!s.is_empty()).then_some(s.max))
            .map(|mean| turbo((mean / scale) as f32));
        if open.map(|o| o.1) != color {
            close(&mut mesh, open.take(), c);
            open = color.map(|k| (c, k));
        }
    }
    close(&mut mesh, open, cols.len());
    painter.add(Shape::mesh(mesh));
}

/// An area chart: the min–max band of each column, and the mean as a step line (as counters are
/// drawn: a column's mean holds across it) with the area under it filled, a mesh each, the
/// fill and the band under the line. Neighbouring columns of the same band or the same mean are
/// one quad.
pub(super) fn line_mesh(
    painter: &egui::Painter,
    area: Rect,
    cols: &[Summary],
    scale: f64,
    color: Color32,
) {
    const LINE_W: f32 = 1.2;
    let mut mesh = Mesh::default();
    let w = area.width() / cols.len().max(1) as f32;
    let x = |c: usize| area.left() + c as f32 * w;
    let y = |v: f64| area.bottom() - ((v / scale).clamp(0.0, 1.05) as f32) * (area.height() - 2.0);
    let band = color.gamma_multiply(0.35);
    // Open runs: (first column, top, bottom) of the band and (first column, y) of the line.
    let mut band_run: Option<(usize, f32, f32)> = None;
    let mut line_run: Option<(usize, f32)> = None;
    let close_band = |mesh: &mut Mesh, run: Option<(usize, f32, f32)>, end: usize| {
        if let Some((c0, top, bottom)) = run {
            let r = Rect::from_min_max(Pos2::new(x(c0), top), Pos2::new(x(end), bottom));
            mesh.add_colored_rect(r, band);
        }
    };
    let fill_color = color.gamma_multiply(0.22);
    let mut fill = Mesh::default();
    let mut close_line = |mesh: &mut Mesh, run: Option<(usize, f32)>, end: usize| {
        if let Some((c0, ym)) = run {
            let r = Rect::from_min_max(
                Pos2::new(x(c0), ym - LINE_W / 2.0),
                Pos2::new(x(end), ym + LINE_W / 2.0),
            );
            mesh.add_colored_rect(r, color);
            let under = Rect::from_min_max(Pos2::new(x(c0), ym), Pos2::new(x(end), area.bottom()));
            fill.add_colored_rect(under, fill_color);
        }
    };
    let mut bands = Mesh::default();
    for (c, s) in cols.iter().enumerate() {
        let b = (!s.is_empty()).then(|| (y(s.max) - 0.5, y(s.min) + 0.5));
        if band_run.map(|r| (r.1, r.2)) != b {
            close_band(&mut bands, band_run.take(), c);
            band_run = b.map(|(top, bottom)| (c, top, bottom));
        }
        let m = s.mean().map(y);
        match (line_run, m) {
            (Some((_, prev)), Some(ym)) if prev == ym => {}
            // Samples of no duration have no mean: the line goes on across them.
            (Some(_), None) if !s.is_empty() => {}
            (prev, m) => {
                close_line(&mut mesh, prev, c);
                line_run = m.map(|ym| (c, ym));
                // The step between two means, where the line goes on.
                if let (Some((_, a)), Some(b)) = (prev, m) {
                    let r = Rect::from_min_max(
                        Pos2::new(x(c) - LINE_W / 2.0, a.min(b) - LINE_W / 2.0),
                        Pos2::new(x(c) + LINE_W / 2.0, a.max(b) + LINE_W / 2.0),
                    );
                    mesh.add_colored_rect(r, color);
                }
            }
        }
    }
    close_band(&mut bands, band_run, cols.len());
    close_line(&mut mesh, line_run, cols.len());
    // The fill and the band under the line.
    painter.add(Shape::mesh(fill));
    painter.add(Shape::mesh(bands));
    painter.add(Shape::mesh(mesh));
}

/// Hatches `r` with diagonal lines: used for missing data (drops), loading placeholders and
/// runs of kernels too narrow to draw one by one. The lines are one mesh of thin quads cut at
/// `r`'s sides (one shape, not a stroked segment per line).
pub(super) fn hatch(painter: &egui::Painter, r: Rect, color: Color32) {
    let mut mesh = Mesh::default();
    hatch_into(&mut mesh, r, color);
    if !mesh.is_empty() {
        painter.add(Shape::mesh(mesh));
    }
}

/// [`hatch`] into a mesh of the caller's, so that many hatched boxes are one shape.
pub(super) fn hatch_into(mesh: &mut Mesh, r: Rect, color: Color32) {
    const STEP: f32 = 6.0;
    // Half the horizontal width of a 1-point line at 45°.
    const HALF: f32 = 0.7;
    let h = r.height();
    if h <= 0.0 || r.width() <= 0.0 {
        return;
    }
    // Line k runs from (x, bottom) to (x + h, top): the point u along it is (x + u, bottom - u).
    // Its part inside `r` is cut at the sides (so a rectangle a pixel wide still shows dashes).
    let side = |v: f32| v.clamp(r.left(), r.right());
    let mut x = r.left() - h;
    while x < r.right() {
        let u0 = (r.left() - x).max(0.0);
        let u1 = (r.right() - x).min(h);
        if u0 < u1 {
            let base = mesh.vertices.len() as u32;
            for (px, py) in [
                (side(x + u0 - HALF), r.bottom() - u0),
                (side(x + u0 + HALF), r.bottom() - u0),
                (side(x + u1 + HALF), r.bottom() - u1),
                (side(x + u1 - HALF), r.bottom() - u1),
            ] {
                mesh.colored_vertex(Pos2::new(px, py), color);
            }
            mesh.add_triangle(base, base + 1, base + 2);
            mesh.add_triangle(base, base + 2, base + 3);
        }
        x += STEP;
    }
}

/// A group's title with a triangle that says whether it is folded (pointing right) or open
/// (pointing down), painted rather than a glyph, which the default fonts may lack.
pub(super) fn group_title(
    painter: &egui::Painter,
    label: Rect,
    title: &str,
    folded: bool,
    color: Color32,
) {
    let p = painter.with_clip_rect(label);
    let tall = label.height() >= 34.0;
    let y = if folded && tall {
        label.center().y - 7.0
    } else {
        label.center().y
    };
    let c = Pos2::new(label.left() + 10.0, y);
    let points = if folded {
        vec![
            c + Vec2::new(-3.0, -4.5),
            c + Vec2::new(4.0, 0.0),
            c + Vec2::new(-3.0, 4.5),
        ]
    } else {
        vec![
            c + Vec2::new(-4.5, -3.0),
            c + Vec2::new(4.5, -3.0),
            c + Vec2::new(0.0, 4.0),
        ]
    };
    p.add(Shape::convex_polygon(points, color, Stroke::NONE));
    p.text(
        Pos2::new(label.left() + 18.0, y),
        Align2::LEFT_CENTER,
        title,
        FontId::proportional(12.0),
        color,
    );
}

/// `A `, `B `, ... with several recordings, else nothing.
pub(super) fn ab_tag(traces: &[Locked<'_>], ti: usize) -> String {
    crate::loaded::trace_tag(traces.len(), ti)
}
