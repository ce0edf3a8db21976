//! `cufall control start|stop`: opens and closes the capture window of a running
//! `cufall record --capture-range signal` from another terminal.
//!
//! Such a recording leaves a file named by its process id in a folder of the user's own
//! ([`folder`]), holding the trace's path; `control` finds it there and signals the recording:
//! SIGUSR1 opens a window, SIGUSR2 closes it (the signals work without `control` too:
//! `kill -USR1 PID`). The file goes away when the recording ends.

use crate::os;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// The per-user folder of running recordings' control files.
pub fn folder() -> PathBuf {
    std::env::temp_dir().join(format!("cufall-control-{}", os::uid()))
}

/// The control file of a running recording; removed when dropped.
pub struct ControlFile {
    path: PathBuf,
}

impl ControlFile {
    /// Announces this process as a recording that takes window signals.
    pub fn create(trace: &Path) -> anyhow::Result<ControlFile> {
        let dir = folder();
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the control folder {}", dir.display()))?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private", dir.display()))?;
        }
        let path = dir.join(std::process::id().to_string());
        std::fs::write(&path, trace.display().to_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(ControlFile { path })
    }
}

impl Drop for ControlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A running recording that takes window signals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    pub trace: String,
}

/// The recordings of this user that take window signals now (files of ended ones are removed
/// on the way).
pub fn running_in(dir: &Path) -> Vec<Running> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A file left by a recording that was killed names a pid that may now be another
        // program's: only a live cufall is signalled.
        if !os::process_exists(pid) || !is_cufall(pid) {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        // The file is ours and small; a damaged one still names its process.
        let trace = std::fs::read(e.path())
            .map(|b| String::from_utf8_lossy(&b[..b.len().min(4096)]).into_owned())
            .unwrap_or_default();
        out.push(Running { pid, trace });
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// Whether process `pid` runs a `cufall` binary (its executable's file name).
fn is_cufall(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        exe.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("cufall") || is_test_binary(n))
    })
}

/// Test binaries of this crate take the place of `cufall` in its own tests.
fn is_test_binary(name: &str) -> bool {
    cfg!(test) && name.starts_with("cufall_sampler")
}

/// What `control` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Open a capture window.
    Start,
    /// Close the open capture window.
    Stop,
}

/// `cufall control`.
#[derive(Clone, Debug, clap::Args)]
pub struct ControlArgs {
    /// start: open a window; stop: close it.
    #[arg(value_enum)]
    pub action: Action,
    /// The recording's process id, when several run.
    #[arg(long)]
    pub pid: Option<u32>,
}

/// Runs `cufall control`; prints what it signalled.
pub fn run(args: &ControlArgs) -> anyhow::Result<()> {
    let dir = folder();
    let target = pick(&running_in(&dir), args.pid, &dir)?;
    let sig = match args.action {
        Action::Start => os::SIGUSR1,
        Action::Stop => os::SIGUSR2,
    };
    os::send_signal(target.pid, sig);
    let what = match args.action {
        Action::Start => "open",
        Action::Stop => "close",
    };
    println!(
        "cufall: asked the recording {} (process {}) to {what} its capture window",
        target.trace, target.pid
    );
    Ok(())
}

fn pick(running: &[Running], pid: Option<u32>, dir: &Path) -> anyhow::Result<Running> {
    let list = || {
        running
            .iter()
            .map(|r| format!("{} ({})", r.pid, r.trace))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (pid, running) {
        (_, []) => bail!(
            "no recording that takes window signals is running (none announced in {}). Start one with `cufall record -o T.cufall --capture-range signal -- CMD`",
            dir.display()
        ),
        (Some(p), _) => match running.iter().find(|r| r.pid == p) {
            Some(r) => Ok(r.clone()),
            None => bail!(
                "process {p} is not a recording that takes window signals; running: {}",
                list()
            ),
        },
        (None, [one]) => Ok(one.clone()),
        (None, _) => bail!(
            "several recordings take window signals: {}; choose one with --pid",
            list()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_ended_recordings_are_ignored_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        std::fs::write(dir.path().join(me.to_string()), "run.cufall").unwrap();
        // No process has pid 4194304 + 1 (above Linux's largest pid).
        let gone = dir.path().join("4194305");
        std::fs::write(&gone, "old.cufall").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not ours").unwrap();
        let r = running_in(dir.path());
        assert_eq!(
            r,
            vec![Running {
                pid: me,
                trace: "run.cufall".into()
            }]
        );
        assert!(!gone.exists());
        // A pid reused by another program (a recording killed long ago) is never signalled.
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let reused = dir.path().join(other.id().to_string());
        std::fs::write(&reused, "killed.cufall").unwrap();
        assert_eq!(running_in(dir.path()).len(), 1);
        assert!(!reused.exists());
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn a_request_with_no_recording_running_says_how_to_start_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = pick(&[], None, dir.path()).unwrap_err().to_string();
        assert!(e.contains("--capture-range signal"), "{e}");
        let two = [
            Running {
                pid: 1,
                trace: "a".into(),
            },
            Running {
                pid: 2,
                trace: "b".into(),
            },
        ];
        let e = pick(&two, None, dir.path()).unwrap_err().to_string();
        assert!(e.contains("--pid"), "{e}");
        assert_eq!(pick(&two, Some(2), dir.path()).unwrap().trace, "b");
        assert!(pick(&two, Some(3), dir.path()).is_err());
    }
}
