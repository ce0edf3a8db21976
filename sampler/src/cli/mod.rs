//! The commands that read recordings (`report`, `diff`, `export`, `view`, `replay`, `info`) and
//! what every command's flags share: the number parsers and the hints
//! that turn the libraries' typed errors into "what to do" for the person at the terminal. The
//! commands that drive the GPU live beside the code they drive (`record`, `metrics_cmd`,
//! `control`; the live view in the binary). Library crates (trace, analysis, viewer, cupti) know
//! nothing of flags; this module maps their options and errors to and from the command line.
//!
//! | module | what it holds |
//! |---|---|
//! | [`number`] | the number flags' parsers (`--full-scale`, `--idle-below`) |
//! | [`view`] | `cufall view` and `cufall replay`, and the look flags the live view shares |
//! | [`analysis`] | `cufall report`, `cufall diff` and `cufall export` |
//! | [`info`] | `cufall info` |
//! | [`hint`] | the fix added to an error's message, naming flags and the command as it was run |

pub mod analysis;
pub mod hint;
pub mod info;
pub mod number;
pub mod view;

/// Writes `text` to stdout. A failure (a closed pipe, a full disk) stays an I/O error, with
/// context, so that `main` ends quietly when the reader of a pipe has gone (`| head`).
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(output_err)
}

/// An error writing the command's output, kept as the I/O error it is.
pub fn output_err(e: std::io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context("cannot write the output")
}
