//! `cufall control start|stop|pause|resume`: reaches a running `cufall record` or `cufall serve`
//! from another terminal, through its control file ([`crate::control_file`]).

use crate::control_file::{FolderError, Request, Running, ask, folder, running_with_start, shown};
use crate::os;
use crate::pipeline::pause::{MAX_PAUSE, PauseRefused};
use anyhow::bail;
use std::path::Path;
use std::time::Duration;

/// What `control` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Open a capture window (`record --capture-range signal`).
    Start,
    /// Close the open capture window.
    Stop,
    /// Release the GPU counters of a running record or serve for a while (--for).
    Pause,
    /// Sample the GPU counters again now.
    Resume,
}

/// `cufall control`.
#[derive(Clone, Debug, clap::Args)]
pub struct ControlArgs {
    /// start/stop: open/close a capture window; pause/resume: release/take back the counters.
    #[arg(value_enum)]
    pub action: Action,
    /// The process id of the recording or exporter, when several run.
    #[arg(long)]
    pub pid: Option<u32>,
    /// How long a pause lasts (at most 24h); sampling resumes by itself after it.
    #[arg(long = "for", value_name = "DURATION", default_value = "5m",
          value_parser = crate::args::duration::parse_positive_duration)]
    pub for_: Duration,
}

/// Runs `cufall control`; prints what it did.
pub fn run(args: &ControlArgs) -> anyhow::Result<()> {
    if args.action == Action::Pause && args.for_ > MAX_PAUSE {
        bail!("{}", PauseRefused::TooLong { asked: args.for_ });
    }
    let dir = folder();
    let all = match running_with_start(&dir) {
        Ok(a) => a,
        // No folder yet: nothing has announced itself.
        Err(FolderError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Vec::new()
        }
        Err(e) => bail!("{e}"),
    };
    match args.action {
        Action::Start | Action::Stop => signal_window(args, &dir, &all),
        Action::Pause | Action::Resume => pause_or_resume(args, &dir, &all),
    }
}

fn signal_window(args: &ControlArgs, dir: &Path, all: &[(Running, u64)]) -> anyhow::Result<()> {
    let takers: Vec<(Running, u64)> = all.iter().filter(|(r, _)| r.windows).cloned().collect();
    let (target, start) = pick(&takers, args.pid, dir, Takes::Windows)?;
    // The pid is signalled only while it is still the process the file announced.
    if !target.still_there(start) {
        bail!(
            "process {} ended just now; nothing was signalled",
            target.pid
        );
    }
    let (sig, what) = match args.action {
        Action::Start => (os::SIGUSR1, "open"),
        _ => (os::SIGUSR2, "close"),
    };
    os::send_signal(target.pid, sig);
    println!(
        "cufall: asked the recording {} (process {}) to {what} its capture window",
        cufall_text::escape(&target.what),
        target.pid
    );
    Ok(())
}

fn pause_or_resume(args: &ControlArgs, dir: &Path, all: &[(Running, u64)]) -> anyhow::Result<()> {
    let (target, _) = pick(all, args.pid, dir, Takes::Pause)?;
    let req = match args.action {
        Action::Pause => Request::Pause(args.for_),
        _ => Request::Resume,
    };
    // Arming the GPUs again on resume takes seconds.
    match ask(&target, req, Duration::from_secs(150))? {
        Ok(done) => {
            println!(
                "cufall: {} (process {}): {}",
                target.kind.as_str(),
                target.pid,
                cufall_text::escape(&done)
            );
            Ok(())
        }
        Err(why) => bail!(
            "{} (process {}) refused: {}",
            target.kind.as_str(),
            target.pid,
            cufall_text::escape(&why.0)
        ),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Takes {
    Windows,
    Pause,
}

pub(crate) fn pick(
    running: &[(Running, u64)],
    pid: Option<u32>,
    dir: &Path,
    takes: Takes,
) -> anyhow::Result<(Running, u64)> {
    let list = || {
        running
            .iter()
            .map(|(r, _)| format!("{} ({})", r.pid, cufall_text::escape(&r.what)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (none, what) = match takes {
        Takes::Windows => (
            "no recording that takes window signals is running (none announced in {DIR}). Start one with `cufall record -o T.cufall --capture-range signal -- CMD`",
            "a recording that takes window signals",
        ),
        Takes::Pause => (
            "nothing to pause: no cufall record or cufall serve of yours is running (none announced in {DIR})",
            "a cufall record or serve of yours",
        ),
    };
    match (pid, running) {
        (_, []) => bail!("{}", none.replace("{DIR}", &shown(dir))),
        (Some(p), _) => match running.iter().find(|(r, _)| r.pid == p) {
            Some(r) => Ok(r.clone()),
            None => bail!("process {p} is not {what}; running: {}", list()),
        },
        (None, [one]) => Ok(one.clone()),
        (None, _) => bail!("several are running: {}; choose one with --pid", list()),
    }
}
