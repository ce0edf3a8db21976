//! Building a view's state from a feed or a recording, and the interactive terminal loop.

use crate::draw;
use crate::error::{Result, ViewError};
use crate::input::{self, Input};
use crate::replay::Recording;
use crate::state::{HeatmapState, Mode, ViewOptions};
use crate::store::{self, Heatmap, HeatmapOverrides, NvmlField, Retention, Store};
use cufall_live::{FeedInfo, LiveReceiver};
use cufall_trace::model::Nanos;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a view is set up.
#[derive(Clone, Debug, Default)]
pub struct ViewSetup {
    pub view: ViewOptions,
    pub overrides: HeatmapOverrides,
    /// Shown in the title bar.
    pub source: String,
    /// The NVTX ranges the phase lane shows; `None`: every range the feed or recording holds.
    pub phases: Option<store::NvtxFilter>,
}

/// An empty store for `info`, with the heatmaps the user asked for. Unknown metrics are an
/// error that lists the recorded ones.
pub fn store_for(
    info: &FeedInfo,
    overrides: &HeatmapOverrides,
    retention: Retention,
    base_ns: i64,
) -> Result<Store> {
    let unknown = overrides.unknown(&info.metrics);
    let specs = overrides.apply(&info.heatmaps, &info.metrics);
    let resolved = store::resolve(&specs, &info.metrics);
    let heatmaps = match resolved {
        Ok(h) if unknown.is_empty() => h,
        other => {
            let have: Vec<&str> = info.metrics.iter().map(|m| m.name.as_str()).collect();
            let available = if have.is_empty() {
                "no metrics".to_string()
            } else {
                have.join(", ")
            };
            // Every name the flags give is known here, so a missing one is the recording's own.
            return Err(match other {
                Err(store::MissingMetric(missing)) if unknown.is_empty() => {
                    ViewError::HeatmapNotRecorded { missing, available }
                }
                _ => ViewError::UnknownMetric {
                    missing: unknown.join(", "),
                    available,
                },
            });
        }
    };
    if heatmaps.is_empty() && info.metrics.is_empty() {
        // No GPU counters (NVML-only recording, or counters out of reach): show what NVML saw,
        // binned no finer than NVML's interval so that every bin holds a reading.
        let nvml_ns = if info.nvml_interval_ns.0 > 0 {
            info.nvml_interval_ns.0
        } else {
            NVML_DEFAULT_INTERVAL_NS
        };
        let heatmaps = NvmlField::ALL.map(Heatmap::of_nvml).to_vec();
        return Ok(Store::new(
            info,
            heatmaps,
            retention,
            base_ns.max(store::base_bin_ns(Nanos(nvml_ns))),
        ));
    }
    Ok(Store::new(info, heatmaps, retention, base_ns))
}

/// NVML's polling interval when a feed does not say (cufall's default).
const NVML_DEFAULT_INTERVAL_NS: i64 = 10_000_000;

/// A live or replay view over `receiver` (nothing ingested yet).
pub fn live_state(receiver: &LiveReceiver, setup: &ViewSetup, mode: Mode) -> Result<HeatmapState> {
    let info = &receiver.info;
    let mut store = store_for(
        info,
        &setup.overrides,
        Retention::Ring {
            bins_per_level: store::LIVE_BINS_PER_LEVEL,
        },
        store::base_bin_ns(info.interval_ns),
    )?;
    store.nvtx_filter = setup.phases.clone();
    Ok(HeatmapState::new(
        store,
        mode,
        setup.source.clone(),
        setup.view.clone(),
    ))
}

/// A browsing view of a whole recording. The base bin grows with the recording's length so that
/// memory stays near 2^21 bins per series (zooming in stops at that resolution).
pub fn browse_state(rec: Recording, setup: &ViewSetup) -> Result<HeatmapState> {
    let mut base = store::base_bin_ns(rec.info.interval_ns);
    if let Some((a, b)) = rec.extent() {
        while b.saturating_sub(a) / base > 1 << 21 {
            base *= 2;
        }
    }
    let mut store = store_for(&rec.info, &setup.overrides, Retention::All, base)?;
    store.nvtx_filter = setup.phases.clone();
    for ev in rec.into_events() {
        store.ingest(ev);
    }
    store.finish_loading();
    Ok(HeatmapState::new(
        store,
        Mode::Browse,
        setup.source.clone(),
        setup.view.clone(),
    ))
}

/// Restores the terminal when dropped (normal exit, error or panic unwinding).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs the interactive view until the user quits. `receiver` (if any) is drained every frame;
/// `fps` frames per second are drawn.
/// The terminal's size in cells, if standard output is a terminal.
pub fn terminal_size() -> Option<(u16, u16)> {
    crossterm::terminal::size().ok()
}

pub fn interactive(state: HeatmapState, receiver: Option<&LiveReceiver>, fps: u32) -> Result<()> {
    interactive_until(state, receiver, fps, false)
}

/// [`interactive`]; with `end_with_feed`, the view also ends when the feed ends.
pub fn interactive_until(
    mut state: HeatmapState,
    receiver: Option<&LiveReceiver>,
    fps: u32,
    end_with_feed: bool,
) -> Result<()> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(ViewError::NoTerminal);
    }
    // ratatui installs a panic hook that restores the terminal before the message is printed;
    // raw mode turns Ctrl-C into a key that quits.
    let mut terminal = ratatui::try_init()?;
    let _guard = TerminalGuard;
    // SIGTERM and SIGHUP (a closed SSH session, `kill`) end the view like `q` does, so the
    // terminal is restored instead of being left in raw mode on the alternate screen.
    let terminated = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&terminated))?;
    }
    let size = terminal.size()?;
    state.update(Input::Resize(size.width, size.height));
    // A recording being browsed changes only on input: wait for keys instead of redrawing.
    let period = if receiver.is_some() {
        Duration::from_secs_f64(1.0 / f64::from(fps.clamp(1, 120)))
    } else {
        Duration::from_secs(60)
    };
    loop {
        let frame_start = Instant::now();
        if let Some(rx) = receiver {
            for ev in rx.drain(Duration::ZERO) {
                state.update(Input::Feed(ev));
            }
            state.store.discarded = rx.discarded();
        }
        state.take_ready_gaps();
        terminal.draw(|f| draw::draw(f, &state))?;
        // Wait for keys until the next frame is due.
        loop {
            // Wake at least every 200 ms to notice a termination signal.
            let left = period
                .saturating_sub(frame_start.elapsed())
                .min(Duration::from_millis(200));
            if !crossterm::event::poll(left)? {
                break;
            }
            if let Some(i) = input::from_terminal(&crossterm::event::read()?) {
                state.update(i);
                // Show the effect of a key at once rather than at the next frame.
                break;
            }
        }
        if state.quit || terminated.load(Ordering::Relaxed) || (end_with_feed && state.store.ended)
        {
            break;
        }
    }
    if let Some(rx) = receiver {
        rx.close();
    }
    Ok(())
}
