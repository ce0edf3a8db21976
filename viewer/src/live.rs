//! The live view: what the bare `cufall` command runs on top of the sampler's feed.
//!
//! The sampler (or a replay) owns the [`cufall_live::LiveSender`]; the view owns the
//! [`LiveReceiver`] and calls [`run`] (interactive) or [`print_after`] (one frame to stdout).

use crate::app::{self, ViewSetup};
use crate::error::Result;
use crate::input::Input;
use crate::print;
use crate::state::Mode;
use cufall_live::{LiveEvent, LiveReceiver};
use std::time::{Duration, Instant};

/// Options of the live view.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub setup: ViewSetup,
    /// Frames per second (30 unless asked otherwise).
    pub fps: u32,
}

impl Default for LiveOptions {
    fn default() -> Self {
        LiveOptions {
            setup: ViewSetup {
                source: String::new(),
                ..ViewSetup::default()
            },
            fps: 30,
        }
    }
}

/// Runs the interactive live view until the user quits (q, Esc or Ctrl-C). Closing the view
/// tells the producer through the feed ([`cufall_live::LiveSender::is_closed`]).
pub fn run(receiver: LiveReceiver, options: LiveOptions) -> Result<()> {
    let state = app::live_state(&receiver, &options.setup, Mode::Live)?;
    app::interactive(state, Some(&receiver), options.fps)
}

/// Like [`run`], but the view also ends when the producer does (a program run under cufall
/// exited and the session stopped).
pub fn run_until_end(receiver: LiveReceiver, options: LiveOptions) -> Result<()> {
    let state = app::live_state(&receiver, &options.setup, Mode::Live)?;
    app::interactive_until(state, Some(&receiver), options.fps, true)
}

/// Collects the feed for `duration` (or until the producer ends), then returns one frame as
/// text (`width` × `height`; `height` 0 picks the height that shows every GPU band).
pub fn print_after(
    receiver: &LiveReceiver,
    setup: &ViewSetup,
    mode: Mode,
    duration: Duration,
    width: u16,
    height: u16,
) -> Result<String> {
    let mut state = app::live_state(receiver, setup, mode)?;
    state.update(Input::Resize(width, height.max(8)));
    let t0 = Instant::now();
    loop {
        let left = duration.saturating_sub(t0.elapsed());
        let events = receiver.drain(left.min(Duration::from_millis(50)));
        let ended = events.contains(&LiveEvent::End);
        for ev in events {
            state.update(Input::Feed(ev));
        }
        if ended || t0.elapsed() >= duration {
            break;
        }
    }
    state.store.discarded = receiver.discarded();
    receiver.close();
    let h = if height == 0 {
        print::natural_height(&state)
    } else {
        height
    };
    let min = crate::draw::min_height(&state);
    if h < min {
        return Err(crate::ViewError::FrameTooLow { height: h, min });
    }
    state.update(Input::Resize(width, h));
    let buf = print::render(&state, width, h);
    Ok(if state.options.palette.is_color() {
        print::to_ansi(&buf)
    } else {
        print::to_text(&buf)
    })
}
