//! The command line's one layer: every subcommand's flags (clap), the one duration syntax, and
//! the hints that turn the libraries' typed errors into "what to do" for the person at the
//! terminal. Library crates (trace, analysis, viewer, cupti) know nothing of flags; this module
//! maps their options and errors to and from the command line.
//!
//! | module | what it holds |
//! |---|---|
//! | [`duration`] | the one parser every duration flag uses (`10us`, `2.5ms`, `1m30s`, bare seconds) |
//! | [`view`] | `cufall view` and `cufall replay`, and the look flags the live view shares |
//! | [`analysis`] | `cufall report`, `cufall diff` and `cufall export` |
//! | [`hint`] | the fix added to an error's message, naming flags and the command as it was run |

pub mod analysis;
pub mod duration;
pub mod hint;
pub mod view;
