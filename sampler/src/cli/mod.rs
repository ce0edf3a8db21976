//! What every command's flags share: the number parsers and the hints that turn the libraries'
//! typed errors into "what to do" for the person at the terminal. Library crates (trace,
//! analysis, viewer, cupti) know nothing of flags; this module maps their errors to the command
//! line.
//!
//! | module | what it holds |
//! |---|---|
//! | [`number`] | the number flags' parsers (`--full-scale`, `--idle-below`) |
//! | [`hint`] | the fix added to an error's message, naming flags and the command as it was run |

pub mod hint;
pub mod number;
