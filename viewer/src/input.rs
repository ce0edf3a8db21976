//! Everything that can change the view, as one enum: keys (already mapped to intents), terminal
//! resizes, and data from the feed. [`crate::state::HeatmapState::update`] is the only place that
//! acts on them.

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use cufall_live::LiveEvent;

#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    Quit,
    /// Esc: closes the help if it is open, else quits.
    Back,
    ToggleHelp,
    TogglePause,
    ZoomIn,
    ZoomOut,
    /// Pan by an eighth of the window (`PanLeft`/`PanRight`) or a whole window (`Page*`).
    PanLeft,
    PanRight,
    PageLeft,
    PageRight,
    /// The start of the recording / the newest data (following it live).
    Home,
    End,
    NextPhase,
    PrevPhase,
    NextDrop,
    PrevDrop,
    /// Select the next / previous idle gap (when the view was given the recording's gaps): the
    /// status line says where the host was during it.
    NextGap,
    PrevGap,
    /// Show the next metric alone; after the last, all metrics stacked.
    NextMetric,
    ToggleSpread,
    ToggleAgg,
    Resize(u16, u16),
    Feed(LiveEvent),
}

/// The keys, as the footer and the help show them.
pub const KEYS: &[(&str, &str)] = &[
    ("q", "quit"),
    ("Esc", "close help, gap, or quit"),
    ("?", "help"),
    ("space", "pause"),
    ("+/-", "zoom"),
    ("←/→", "pan"),
    ("PgUp/PgDn", "pan a window"),
    ("Home/End", "start / newest (follow)"),
    ("[ ]", "previous / next phase"),
    ("d D", "next / previous drop"),
    ("x X", "next / previous idle gap"),
    ("m", "next metric (then all)"),
    ("s", "SM spread rows on/off"),
    ("a", "mean / max per cell"),
];

/// Maps a terminal event to an input; `None` for events the view ignores.
pub fn from_terminal(ev: &Event) -> Option<Input> {
    match ev {
        Event::Resize(w, h) => Some(Input::Resize(*w, *h)),
        Event::Key(k) if k.kind != KeyEventKind::Release => from_key(k),
        _ => None,
    }
}

pub fn from_key(k: &KeyEvent) -> Option<Input> {
    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
    Some(match k.code {
        KeyCode::Char('c') | KeyCode::Char('d') if ctrl => Input::Quit,
        KeyCode::Char('q') => Input::Quit,
        KeyCode::Esc => Input::Back,
        KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::F(1) => Input::ToggleHelp,
        KeyCode::Char(' ') | KeyCode::Char('p') => Input::TogglePause,
        KeyCode::Char('+') | KeyCode::Char('=') | KeyCode::Char('i') | KeyCode::Up => Input::ZoomIn,
        KeyCode::Char('-') | KeyCode::Char('_') | KeyCode::Char('o') | KeyCode::Down => {
            Input::ZoomOut
        }
        KeyCode::Left => Input::PanLeft,
        KeyCode::Right => Input::PanRight,
        KeyCode::PageUp => Input::PageLeft,
        KeyCode::PageDown => Input::PageRight,
        KeyCode::Home | KeyCode::Char('g') => Input::Home,
        KeyCode::End | KeyCode::Char('G') => Input::End,
        KeyCode::Char(']') | KeyCode::Char('n') => Input::NextPhase,
        KeyCode::Char('[') | KeyCode::Char('N') => Input::PrevPhase,
        KeyCode::Char('d') => Input::NextDrop,
        KeyCode::Char('D') => Input::PrevDrop,
        KeyCode::Char('x') => Input::NextGap,
        KeyCode::Char('X') => Input::PrevGap,
        KeyCode::Char('m') | KeyCode::Tab => Input::NextMetric,
        KeyCode::Char('s') => Input::ToggleSpread,
        KeyCode::Char('a') => Input::ToggleAgg,
        _ => return None,
    })
}
