//! `--print`: one frame as text, for logs, scripts and tests. Without colour it is plain text
//! (trailing spaces trimmed); with colour, ANSI SGR sequences.

use crate::draw::{MAX_HEIGHT, draw_into, min_height};
use crate::state::HeatmapState;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use std::fmt::Write;

/// Rows the frame needs to show every GPU band at its natural height, at most
/// [`MAX_HEIGHT`](crate::draw::MAX_HEIGHT) (a taller trace shows the GPUs that fit).
pub fn natural_height(state: &HeatmapState) -> u16 {
    let g = state.store.devices.len().max(1) as u64;
    let mut h = 4 + u64::from(!state.store.nvtx.is_empty());
    for i in state.visible_heatmaps() {
        let hm = &state.store.heatmaps[i];
        let l = if state.options.spread && !hm.spread.is_empty() {
            hm.spread.len() as u64
        } else {
            1
        };
        let min_h = if state.options.palette.is_color() {
            l.div_ceil(2)
        } else {
            l
        };
        h = h.saturating_add(1 + g.saturating_mul(min_h.max(2)));
    }
    let h = u16::try_from(h).unwrap_or(u16::MAX);
    h.clamp(8.max(min_height(state)), MAX_HEIGHT)
}

/// Draws `state` into a buffer of `width` × `height`.
pub fn render(state: &HeatmapState, width: u16, height: u16) -> Buffer {
    let area = Rect::new(0, 0, width, height);
    let mut buf = Buffer::empty(area);
    draw_into(&mut buf, area, state);
    buf
}

/// The symbols of a buffer, one line per row, trailing spaces trimmed.
pub fn to_text(buf: &Buffer) -> String {
    let a = buf.area;
    let mut out = String::new();
    for y in a.top()..a.bottom() {
        let mut line = String::new();
        for x in a.left()..a.right() {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn sgr_color(c: Color, fg: bool, out: &mut String) {
    let base = if fg { 30 } else { 40 };
    let _ = match c {
        Color::Reset => write!(out, ";{}", base + 9),
        Color::Rgb(r, g, b) => write!(out, ";{};2;{r};{g};{b}", base + 8),
        Color::Indexed(i) => write!(out, ";{};5;{i}", base + 8),
        named => {
            let (n, bright) = match named {
                Color::Black => (0, false),
                Color::Red => (1, false),
                Color::Green => (2, false),
                Color::Yellow => (3, false),
                Color::Blue => (4, false),
                Color::Magenta => (5, false),
                Color::Cyan => (6, false),
                Color::Gray => (7, false),
                Color::DarkGray => (0, true),
                Color::LightRed => (1, true),
                Color::LightGreen => (2, true),
                Color::LightYellow => (3, true),
                Color::LightBlue => (4, true),
                Color::LightMagenta => (5, true),
                Color::LightCyan => (6, true),
                _ => (7, true),
            };
            write!(out, ";{}", if bright { base + 60 + n } else { base + n })
        }
    };
}

/// The buffer with ANSI colours (for `--print --color`).
pub fn to_ansi(buf: &Buffer) -> String {
    let a = buf.area;
    let mut out = String::new();
    for y in a.top()..a.bottom() {
        let mut prev = None;
        for x in a.left()..a.right() {
            let c = &buf[(x, y)];
            let key = (c.fg, c.bg, c.modifier);
            if prev != Some(key) {
                let mut s = String::from("\x1b[0");
                if c.modifier.contains(Modifier::BOLD) {
                    s.push_str(";1");
                }
                if c.modifier.contains(Modifier::REVERSED) {
                    s.push_str(";7");
                }
                if c.modifier.contains(Modifier::UNDERLINED) {
                    s.push_str(";4");
                }
                sgr_color(c.fg, true, &mut s);
                sgr_color(c.bg, false, &mut s);
                s.push('m');
                out.push_str(&s);
                prev = Some(key);
            }
            out.push_str(c.symbol());
        }
        out.push_str("\x1b[0m\n");
    }
    out
}
