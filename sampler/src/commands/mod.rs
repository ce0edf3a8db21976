//! One module per subcommand of the library, named after the command: its flags, its checks and
//! its entry point (`run`, with `*_to` writing to any output where tests read it). The machinery
//! a command drives lives in a module named after its job (`recording`, `control_file`,
//! `serve`, `pipeline`, ...). The binary's own commands (the live view, `gui`) are in
//! `src/bin/cufall/commands/`, because the library never uses the viewer's live loop nor the
//! GUI.
//!
//! | module | command |
//! |---|---|
//! | [`record`] | `cufall record` (and the capture flags the live view shares) |
//! | [`metrics`] | `cufall metrics` |
//! | [`control`] | `cufall control start|stop|pause|resume` |
//! | [`serve`] | `cufall serve` |
//! | [`probe`] | the hidden `cufall probe-sampler` |
//! | [`report`], [`diff`], [`export`] | `cufall report`, `cufall diff`, `cufall export` |
//! | [`view`] | `cufall view` and `cufall replay` (a recording browsed, or played through the live view) |
//! | [`info`] | `cufall info` |

pub mod control;
pub mod diff;
pub mod export;
pub mod info;
pub mod metrics;
pub mod probe;
pub mod record;
pub mod report;
pub mod serve;
pub mod view;

/// Writes `text` to stdout. A failure (a closed pipe, a full disk) stays an I/O error, with
/// context, so that `main` ends quietly when the reader of a pipe has gone (`| head`).
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(io_err)
}

/// An error writing the command's output, kept as the I/O error it is.
pub fn io_err(e: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context("cannot write the output")
}

/// JSON goes straight to the output; serde_json's failures there are the writer's.
fn json_err(e: serde_json::Error) -> anyhow::Error {
    io_err(std::io::Error::from(e))
}
