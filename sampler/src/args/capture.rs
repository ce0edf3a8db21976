//! `--capture` and `--capture-wait`, which `record` and the live view share.

use anyhow::anyhow;
use cufall_capture::Kinds;
use std::path::PathBuf;
use std::time::Duration;

/// `--capture` and `--capture-wait`, checked before anything starts.
pub struct CaptureRequest {
    pub kinds: Kinds,
    /// The capture library, when there is a program to capture from.
    pub library: Option<PathBuf>,
    pub wait: Duration,
}

impl CaptureRequest {
    pub fn from_flags(kinds: &str, wait: Duration, command: &[String]) -> anyhow::Result<Self> {
        let kinds = Kinds::parse(kinds).map_err(|e| anyhow!("--capture: {e}"))?;
        let library = if command.is_empty() || kinds.is_empty() {
            None
        } else {
            Some(crate::recorder::find_library()?)
        };
        Ok(CaptureRequest {
            kinds,
            library,
            wait,
        })
    }
}
