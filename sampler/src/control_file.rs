//! The control files and sockets by which `cufall control start|stop|pause|resume`
//! ([`crate::commands::control`]) reaches a running `cufall record` or `cufall serve` from another
//! terminal.
//!
//! Each such process leaves a control file named by its process id in the user's own folder
//! ([`folder`], `$TMPDIR/cufall-control-UID/`, mode 0700), holding what it is (record or serve),
//! its process start time (field 22 of `/proc/PID/stat`), the trace or address, its command, and
//! whether it takes window signals; beside it a Unix socket `PID.sock` takes pause and resume
//! requests. `start`/`stop` signal a `record --capture-range signal` (SIGUSR1 opens a window,
//! SIGUSR2 closes it); `pause`/`resume` ask over the socket, and print the one-line answer.
//!
//! What is trusted, and why: the folder only when it is a real folder (never a symbolic link),
//! owned by this user, mode 0700 — then nobody else can put a file in it or swap it, so what is
//! read or removed in it stays in it; a file only when it is a plain file of this user, opened
//! without following links; a process only when it is this user's and its start time is the
//! one its file records (a pid reused by another program, even another `cufall`, never is).
//! Everything a file holds is printed escaped.

use crate::os;
use crate::pipeline::pause::{CounterState, PauseDone, PauseRefused};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The per-user folder of running recordings' and exporters' control files.
pub fn folder() -> PathBuf {
    std::env::temp_dir().join(format!("cufall-control-{}", os::uid()))
}

/// The largest control file read (they hold a path and a command line).
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Why the control folder is not trusted: each says the fix.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error(
        "the control folder {path} is a symbolic link; cufall never reads or deletes through one \
there. Remove the link (`rm {path}`); cufall makes the folder again"
    )]
    Symlink { path: String },
    #[error("the control folder {path} is not a folder. Remove it (`rm {path}`)")]
    NotAFolder { path: String },
    #[error(
        "the control folder {path} belongs to user {owner}, not to you (user {me}): whoever made \
it could name any process for cufall to signal. Have it removed (`rm -r {path}` as its owner or \
root), or set TMPDIR to a folder of your own"
    )]
    NotYours { path: String, owner: u32, me: u32 },
    #[error(
        "the control folder {path} has mode {mode:o}: others could add control files to it. Make \
it private (`chmod 700 {path}`)"
    )]
    NotPrivate { path: String, mode: u32 },
    #[error("cannot read the control folder {path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn shown(p: &Path) -> String {
    cufall_text::escape(&p.display().to_string()).into_owned()
}

/// Checks that `dir` is a folder of this user's, mode 0700, and not a symbolic link.
pub fn check_folder(dir: &Path) -> Result<(), FolderError> {
    let path = shown(dir);
    let m = std::fs::symlink_metadata(dir).map_err(|source| FolderError::Io {
        path: path.clone(),
        source,
    })?;
    if m.file_type().is_symlink() {
        return Err(FolderError::Symlink { path });
    }
    if !m.is_dir() {
        return Err(FolderError::NotAFolder { path });
    }
    let me = os::uid();
    if m.uid() != me {
        return Err(FolderError::NotYours {
            path,
            owner: m.uid(),
            me,
        });
    }
    if m.mode() & 0o777 != 0o700 {
        return Err(FolderError::NotPrivate {
            path,
            mode: m.mode() & 0o7777,
        });
    }
    Ok(())
}

/// The start time of process `pid` (clock ticks after boot, field 22 of `/proc/PID/stat`):
/// with the pid, it names one process for as long as the machine runs.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// What kind of cufall a control file announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Record,
    Serve,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Record => "cufall record",
            Kind::Serve => "cufall serve",
        }
    }
}

/// A control file's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    pub pid: u32,
    /// [`start_time`] of the process.
    pub start_time: u64,
    pub kind: Kind,
    /// Takes SIGUSR1/SIGUSR2 for capture windows (`record --capture-range signal`).
    pub windows: bool,
    /// The trace (record) or the listen address (serve).
    pub what: String,
    pub command: Vec<String>,
}

/// A request over the control socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    Pause(Duration),
    Resume,
    /// What the counters are doing (for who-holds-the-counters hints).
    State,
}

impl Request {
    fn line(self) -> String {
        match self {
            Request::Pause(d) => format!("pause {}\n", d.as_nanos()),
            Request::Resume => "resume\n".into(),
            Request::State => "state\n".into(),
        }
    }

    fn parse(line: &str) -> Option<Request> {
        let mut w = line.split_whitespace();
        let r = match (w.next()?, w.next()) {
            ("pause", Some(n)) => Request::Pause(Duration::from_nanos(n.parse().ok()?)),
            ("resume", None) => Request::Resume,
            ("state", None) => Request::State,
            _ => return None,
        };
        w.next().is_none().then_some(r)
    }
}

/// A control request refused, and why, in the words the socket carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl From<&str> for Refused {
    fn from(why: &str) -> Refused {
        Refused(why.into())
    }
}

/// How a process answers control requests: `Ok` done (what), `Err` refused (why).
pub type Handler = Arc<dyn Fn(Request) -> Result<String, Refused> + Send + Sync>;

/// The answer to a pause or resume, as the control socket and HTTP say it.
pub fn answer(r: Result<PauseDone, PauseRefused>) -> Result<String, Refused> {
    r.map(|d| d.to_string()).map_err(|e| Refused(e.to_string()))
}

/// The state line of a process's counters (`state` requests).
pub fn state_line(s: Option<CounterState>) -> String {
    match s {
        None => "no-counters".into(),
        Some(CounterState::Sampling) => "sampling".into(),
        Some(CounterState::Paused { left }) => format!("paused {}", left.as_secs()),
        Some(CounterState::Waiting { .. }) => "waiting".into(),
    }
}

/// The control file (and socket) of a running recording or exporter; removed when dropped.
pub struct ControlFile {
    path: PathBuf,
    socket: Option<(PathBuf, Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl ControlFile {
    /// Announces this process in [`folder`]; with a handler, listens for pause and resume.
    pub fn create(
        kind: Kind,
        windows: bool,
        what: &str,
        handler: Option<Handler>,
    ) -> anyhow::Result<ControlFile> {
        Self::create_in(&folder(), kind, windows, what, handler)
    }

    pub fn create_in(
        dir: &Path,
        kind: Kind,
        windows: bool,
        what: &str,
        handler: Option<Handler>,
    ) -> anyhow::Result<ControlFile> {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("cannot create the control folder {}", shown(dir)));
            }
        }
        check_folder(dir)?;
        let pid = std::process::id();
        let announce = Announce {
            pid,
            start_time: start_time(pid).context("cannot read this process's start time")?,
            kind,
            windows,
            what: what.to_string(),
            command: std::env::args().collect(),
        };
        let path = dir.join(pid.to_string());
        // A file of an earlier process with this pid; the folder is ours, so this is in it.
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .with_context(|| format!("cannot write {}", shown(&path)))?;
        f.write_all(&serde_json::to_vec(&announce)?)
            .with_context(|| format!("cannot write {}", shown(&path)))?;
        let mut file = ControlFile { path, socket: None };
        if let Some(h) = handler {
            let sock = dir.join(format!("{pid}.sock"));
            let _ = std::fs::remove_file(&sock);
            let listener = UnixListener::bind(&sock)
                .with_context(|| format!("cannot listen on {}", shown(&sock)))?;
            listener.set_nonblocking(true)?;
            let stop = Arc::new(AtomicBool::new(false));
            let s = Arc::clone(&stop);
            let t = std::thread::Builder::new()
                .name("cufall-control".into())
                .spawn(move || serve_socket(&listener, &s, &h))?;
            file.socket = Some((sock, stop, t));
        }
        Ok(file)
    }
}

impl Drop for ControlFile {
    fn drop(&mut self) {
        if let Some((sock, stop, t)) = self.socket.take() {
            stop.store(true, Ordering::SeqCst);
            let _ = t.join();
            let _ = std::fs::remove_file(sock);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers control requests until `stop`: one line in, one line out, per connection.
fn serve_socket(listener: &UnixListener, stop: &AtomicBool, handler: &Handler) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((conn, _)) => {
                let _ = answer_one(conn, handler);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn answer_one(conn: UnixStream, handler: &Handler) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new((&conn).take(256)).read_line(&mut line)?;
    let reply = match Request::parse(&line) {
        Some(r) => match handler(r) {
            Ok(t) => format!("ok {t}"),
            Err(t) => format!("refused {t}"),
        },
        None => "refused not a control request".into(),
    };
    (&conn).write_all(format!("{}\n", reply.replace('\n', " ")).as_bytes())
}

/// A running recording or exporter whose control file is trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    pub kind: Kind,
    pub windows: bool,
    pub what: String,
    pub command: Vec<String>,
    socket: PathBuf,
}

impl Running {
    /// `cufall serve (process 12, `cufall serve --listen …`)`, escaped for the terminal.
    pub fn describe(&self) -> String {
        format!(
            "{} {} (process {}: `{}`)",
            self.kind.as_str(),
            cufall_text::escape(&self.what),
            self.pid,
            cufall_text::escape(&self.command.join(" "))
        )
    }

    /// Still the process the file announced (checked again just before a signal).
    pub(crate) fn still_there(&self, start: u64) -> bool {
        start_time(self.pid) == Some(start)
    }
}

/// Reads a control file without following a link: a plain file of this user, not too big.
fn read_file(path: &Path) -> Option<Announce> {
    let m = std::fs::symlink_metadata(path).ok()?;
    if !m.file_type().is_file() || m.uid() != os::uid() || m.len() > MAX_FILE_BYTES {
        return None;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Whether process `pid` is this user's.
fn owned_by_me(pid: u32) -> bool {
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == os::uid())
}

/// The recordings and exporters of this user running now, each with its start time. Files of
/// ended processes (or of a pid now another program's) are removed on the way; files that are
/// not plain files of this user are left alone and never trusted.
pub(crate) fn running_with_start(dir: &Path) -> Result<Vec<(Running, u64)>, FolderError> {
    check_folder(dir)?;
    let entries = std::fs::read_dir(dir).map_err(|source| FolderError::Io {
        path: shown(dir),
        source,
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let path = e.path();
        let Some(a) = read_file(&path) else {
            // A plain file of ours that does not parse (an older cufall wrote the trace's path
            // alone) names a process that ended: removed. Anything else is left alone.
            let ours = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| m.file_type().is_file() && m.uid() == os::uid());
            if ours && start_time(pid).is_none() {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        };
        let alive = a.pid == pid && owned_by_me(pid) && start_time(pid) == Some(a.start_time);
        if !alive {
            // The folder is checked: these names are in it, and removing a name never follows
            // a link.
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(dir.join(format!("{pid}.sock")));
            continue;
        }
        out.push((
            Running {
                pid,
                kind: a.kind,
                windows: a.windows,
                what: a.what,
                command: a.command,
                socket: dir.join(format!("{pid}.sock")),
            },
            a.start_time,
        ));
    }
    out.sort_by_key(|(r, _)| r.pid);
    Ok(out)
}

/// The recordings and exporters of this user running now (see [`running_with_start`]).
pub fn running_in(dir: &Path) -> Result<Vec<Running>, FolderError> {
    Ok(running_with_start(dir)?
        .into_iter()
        .map(|(r, _)| r)
        .collect())
}

/// Sends `req` to `to`'s control socket; its answer (`Ok` done, `Err` refused).
pub fn ask(
    to: &Running,
    req: Request,
    timeout: Duration,
) -> anyhow::Result<Result<String, Refused>> {
    let m = std::fs::symlink_metadata(&to.socket)
        .with_context(|| format!("process {} takes no control requests", to.pid))?;
    if !m.file_type().is_socket() || m.uid() != os::uid() {
        bail!(
            "{} is not a control socket of yours; not used",
            shown(&to.socket)
        );
    }
    let conn = UnixStream::connect(&to.socket)
        .with_context(|| format!("cannot reach process {} ({})", to.pid, shown(&to.socket)))?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    (&conn).write_all(req.line().as_bytes())?;
    let mut line = String::new();
    BufReader::new((&conn).take(4096))
        .read_line(&mut line)
        .with_context(|| format!("process {} did not answer", to.pid))?;
    let line = line.trim_end();
    Ok(match line.split_once(' ') {
        Some(("ok", t)) => Ok(t.to_string()),
        Some(("refused", t)) => Err(Refused(t.to_string())),
        _ => Err(Refused(format!("an answer cufall does not know: {line}"))),
    })
}

/// The cufall processes of this user that hold the GPU counters now (they answer `sampling`),
/// but this one.
pub fn holders() -> Vec<Running> {
    let me = std::process::id();
    running_in(&folder())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.pid != me)
        .filter(|r| {
            matches!(ask(r, Request::State, Duration::from_millis(500)), Ok(Ok(s)) if s == "sampling")
        })
        .collect()
}

/// Who holds the counters, when it is a cufall of this user, and how to pause it: for the
/// message of whoever finds them held.
pub fn held_by(cmd: &str) -> Option<String> {
    let h = holders();
    let first = h.first()?;
    let also = if h.len() > 1 {
        format!(
            " (also {})",
            h[1..]
                .iter()
                .map(Running::describe)
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    };
    Some(format!(
        "They are held by {}{also}: pause it with `{cmd} control pause --pid {} --for 10m` (it \
samples again by itself after that, or on `{cmd} control resume --pid {}`).",
        first.describe(),
        first.pid,
        first.pid
    ))
}

#[cfg(test)]
mod tests;
