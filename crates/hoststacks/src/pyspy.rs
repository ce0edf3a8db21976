//! The real stack reader: py-spy's library (`PythonSpy`), which reads a Python process's
//! interpreter state from outside with `process_vm_readv`.
//!
//! Reads are non-blocking: the program is never paused (py-spy's `LockingStrategy::NonBlocking`),
//! so a read can race with the interpreter changing its frames; such a read fails or, rarely,
//! gives a stack mixed from two instants. A failed read is a missed sample, counted. py-spy's
//! own native frames are not used: it gets them only by pausing the process (its `--native`
//! refuses `--nonblocking`), which would cost the program far more than sampling is allowed to.
//! What a blocked thread waits in is read instead, without pausing it: the system call it is in
//! (`/proc/PID/task/TID/syscall`, read right after its Python stack) is appended under the
//! innermost Python frame as a native frame (`futex`, `poll`, `clock_nanosleep`, `ioctl`, ...),
//! so that `Event.wait` on a lock and a native call waiting in the kernel are told apart. The
//! native function a thread runs comes from perf events ([`super::composite`]).

use super::procs::{ProcFs, ProcessTable, may_read_memory};
use super::source::{AttachError, Frame, ReadError, StackReader, StackSource, ThreadStack};
use cufall_model::{FrameKind, Gil, HostFrames, HostState};
use py_spy::config::LockingStrategy;
use py_spy::{Config, PythonSpy};
use std::path::{Path, PathBuf};

/// Attaches py-spy to processes of a `/proc` folder.
pub struct PySpySource {
    proc_root: PathBuf,
    config: Config,
}

impl Default for PySpySource {
    fn default() -> Self {
        let config = Config {
            blocking: LockingStrategy::NonBlocking,
            native: false,
            // Every Python thread, idle ones too: their state is part of the sample.
            include_idle: true,
            gil_only: false,
            collect_thread_names: true,
            // py-spy's short names (`torch/nn/modules/module.py`) give the module; the file
            // column keeps the full path.
            full_filenames: false,
            subprocesses: false,
            dump_locals: 0,
            ..Config::default()
        };
        PySpySource {
            proc_root: PathBuf::from("/proc"),
            config,
        }
    }
}

impl StackSource for PySpySource {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        let dir = self.proc_root.join(pid.to_string());
        if !dir.exists() {
            return Err(AttachError::Gone { pid });
        }
        if let Err(source) = may_read_memory(&self.proc_root, pid) {
            return match source.kind() {
                std::io::ErrorKind::NotFound => Err(AttachError::Gone { pid }),
                _ => Err(AttachError::NoPermission { pid, source }),
            };
        }
        if !maps_python(&dir) {
            // Gone between the checks, or no interpreter loaded: both end sampling of it.
            return if dir.exists() {
                Err(AttachError::NotPython { pid })
            } else {
                Err(AttachError::Gone { pid })
            };
        }
        let spy_pid = py_spy::Pid::try_from(pid).map_err(|_| AttachError::Other {
            pid,
            detail: "pid out of range".into(),
        })?;
        let spy = PythonSpy::new(spy_pid, &self.config).map_err(|e| classify(pid, &dir, &e))?;
        Ok(Box::new(PySpyReader {
            spy,
            procs: ProcFs::at(&self.proc_root),
            proc_root: self.proc_root.clone(),
        }))
    }

    fn frames_kind(&self) -> &'static str {
        "python frames"
    }

    fn frames(&self) -> HostFrames {
        HostFrames::Python
    }
}

/// Whether a Python executable or library is mapped in the process: py-spy looks for the same
/// names, and a process without them (a shell, a compiler, a CUDA tool) is not worth the cost
/// of py-spy parsing its binary.
fn maps_python(dir: &Path) -> bool {
    let Ok(maps) = std::fs::read_to_string(dir.join("maps")) else {
        return false;
    };
    maps.lines().any(|l| {
        l.split_ascii_whitespace()
            .nth(5)
            .and_then(|path| path.rsplit('/').next())
            .is_some_and(|name| name.to_ascii_lowercase().contains("python"))
    })
}

/// py-spy's errors are `anyhow` chains: the kinds the loop treats differently are told apart
/// by the process being gone, an I/O permission error in the chain, or py-spy's own wording.
fn classify(pid: u32, dir: &Path, e: &anyhow::Error) -> AttachError {
    if !dir.exists() {
        return AttachError::Gone { pid };
    }
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::PermissionDenied
        {
            return AttachError::NoPermission {
                pid,
                source: std::io::Error::new(io.kind(), io.to_string()),
            };
        }
    }
    let text = format!("{e:#}");
    if text.contains("Unsupported version of Python") {
        return AttachError::UnsupportedPython { pid, detail: text };
    }
    AttachError::Other { pid, detail: text }
}

struct PySpyReader {
    spy: PythonSpy,
    procs: ProcFs,
    proc_root: PathBuf,
}

impl StackReader for PySpyReader {
    fn describe(&self) -> String {
        format!("python {}", self.spy.version)
    }

    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        let traces = self.spy.get_stack_traces().map_err(|e| {
            // An exiting process fails its reads while its /proc entry (a zombie) remains.
            let Ok(pid) = u32::try_from(self.spy.pid) else {
                return ReadError::Gone;
            };
            if !self.procs.alive(pid) {
                ReadError::Gone
            } else if may_read_memory(&self.proc_root, pid)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
            {
                ReadError::Denied
            } else {
                ReadError::Failed(format!("{e:#}"))
            }
        })?;
        let pid = u32::try_from(self.spy.pid).unwrap_or(0);
        Ok(traces
            .into_iter()
            .map(|t| {
                let mut stack = thread(t);
                if let Some(leaf) = syscall_leaf(&self.proc_root, pid, stack.tid) {
                    stack.frames.insert(0, leaf);
                }
                stack
            })
            .collect())
    }
}

/// The system call thread `tid` of `pid` is blocked in, as a native frame; `None` while it runs,
/// or where the file cannot be read (a thread gone, no permission, not Linux).
fn syscall_leaf(proc_root: &Path, pid: u32, tid: u32) -> Option<Frame> {
    if pid == 0 || tid == 0 {
        return None;
    }
    let path = proc_root
        .join(pid.to_string())
        .join("task")
        .join(tid.to_string())
        .join("syscall");
    let text = std::fs::read_to_string(path).ok()?;
    // `running`, `-1 ...` (blocked, not in a system call), or the call's number and arguments.
    let nr: u32 = text.split_ascii_whitespace().next()?.parse().ok()?;
    Some(Frame {
        function: syscall_name(nr).map_or_else(|| format!("syscall {nr}"), str::to_string),
        file: String::new(),
        line: None,
        module: "kernel".into(),
        kind: FrameKind::Native,
    })
}

/// The names of the system calls a blocked thread is usually in (x86-64 numbers).
#[cfg(target_arch = "x86_64")]
fn syscall_name(nr: u32) -> Option<&'static str> {
    Some(match nr {
        0 => "read",
        1 => "write",
        7 => "poll",
        16 => "ioctl",
        23 => "select",
        24 => "sched_yield",
        35 => "nanosleep",
        43 => "accept",
        45 => "recvfrom",
        47 => "recvmsg",
        61 => "wait4",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        441 => "epoll_pwait2",
        _ => return None,
    })
}

/// The names of the system calls a blocked thread is usually in (aarch64 numbers).
#[cfg(target_arch = "aarch64")]
fn syscall_name(nr: u32) -> Option<&'static str> {
    Some(match nr {
        22 => "epoll_pwait",
        29 => "ioctl",
        63 => "read",
        64 => "write",
        72 => "pselect6",
        73 => "ppoll",
        98 => "futex",
        101 => "nanosleep",
        115 => "clock_nanosleep",
        124 => "sched_yield",
        202 => "accept",
        207 => "recvfrom",
        212 => "recvmsg",
        242 => "accept4",
        260 => "wait4",
        441 => "epoll_pwait2",
        _ => return None,
    })
}

/// Elsewhere the number is all there is.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn syscall_name(_nr: u32) -> Option<&'static str> {
    None
}

fn thread(t: py_spy::StackTrace) -> ThreadStack {
    ThreadStack {
        // 0: the interpreter did not give the OS thread id (older Pythons off x86-64).
        tid: t
            .os_thread_id
            .and_then(|id| u32::try_from(id).ok())
            .unwrap_or(0),
        name: t.thread_name.unwrap_or_default(),
        state: if t.active {
            HostState::Running
        } else {
            HostState::Idle
        },
        gil: if t.owns_gil { Gil::Held } else { Gil::Released },
        frames: t.frames.into_iter().map(frame).collect(),
    }
}

fn frame(f: py_spy::Frame) -> Frame {
    let module = f
        .module
        .clone()
        .or_else(|| f.short_filename.as_deref().and_then(module_of))
        .unwrap_or_default();
    Frame {
        function: f.name,
        file: f.filename,
        line: u32::try_from(f.line).ok().filter(|l| *l > 0),
        module,
        kind: FrameKind::Python,
    }
}

/// `torch/nn/modules/module.py` → `torch.nn.modules.module` (a package's `__init__.py` is the
/// package); a file outside any package (`app.py`) is its stem.
pub fn module_of(short: &str) -> Option<String> {
    let stem = short.strip_suffix(".py")?;
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    (!stem.is_empty() && !stem.starts_with('<')).then(|| stem.replace('/', "."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_file_names_become_module_names() {
        assert_eq!(
            module_of("torch/nn/modules/module.py").as_deref(),
            Some("torch.nn.modules.module")
        );
        assert_eq!(module_of("torch/__init__.py").as_deref(), Some("torch"));
        assert_eq!(module_of("app.py").as_deref(), Some("app"));
        assert_eq!(module_of("<frozen importlib._bootstrap>"), None);
        assert_eq!(module_of("lib.so"), None);
    }

    /// A blocked thread's system call becomes a native leaf; a running thread, a thread not in
    /// a system call, an unreadable or missing file give none.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_system_call_a_thread_waits_in_is_its_leaf() {
        let root = tempfile::tempdir().expect("tempdir");
        let write = |tid: u32, text: &str| {
            let dir = root.path().join("7/task").join(tid.to_string());
            std::fs::create_dir_all(&dir).expect("dir");
            std::fs::write(dir.join("syscall"), text).expect("write");
        };
        write(1, "202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12\n");
        write(2, "running\n");
        write(3, "-1 0x7ffd 0x7f12\n");
        write(4, "999 0x1\n");
        write(5, "");
        let leaf = syscall_leaf(root.path(), 7, 1).expect("futex");
        assert_eq!(
            (leaf.function.as_str(), leaf.kind, leaf.module.as_str()),
            ("futex", FrameKind::Native, "kernel")
        );
        for tid in [2, 3, 5, 6] {
            assert_eq!(syscall_leaf(root.path(), 7, tid), None, "tid {tid}");
        }
        assert_eq!(
            syscall_leaf(root.path(), 7, 4).map(|f| f.function),
            Some("syscall 999".to_string())
        );
        assert_eq!(syscall_leaf(root.path(), 7, 0), None);
    }

    /// This test's own sleeping thread, read through the real `/proc`.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_sleeping_thread_is_read_in_its_sleep() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            tx.send(nix_gettid()).expect("send");
            std::thread::sleep(std::time::Duration::from_millis(500));
        });
        let tid = rx.recv().expect("tid");
        std::thread::sleep(std::time::Duration::from_millis(100));
        let leaf = syscall_leaf(Path::new("/proc"), std::process::id(), tid);
        t.join().expect("join");
        match leaf {
            Some(f) => assert!(
                ["clock_nanosleep", "nanosleep"].contains(&f.function.as_str()),
                "{f:?}"
            ),
            None => println!("skipped: /proc/self/task/TID/syscall not readable here"),
        }
    }

    /// The calling thread's id, from `/proc/thread-self` (no libc call needed).
    fn nix_gettid() -> u32 {
        std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn a_process_without_python_is_refused_before_py_spy_parses_it() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let got = PySpySource::default().attach(child.id());
        let _ = child.kill();
        let _ = child.wait();
        match got {
            Err(AttachError::NotPython { .. }) => {}
            Err(AttachError::NoPermission { .. }) => {
                println!("skipped: no permission to read a child's memory here");
            }
            Err(e) => panic!("sleep is not Python, got {e}"),
            Ok(_) => panic!("sleep is not Python"),
        }
    }

    #[test]
    fn a_process_that_is_gone_is_told_apart() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        let _ = child.wait();
        assert!(matches!(
            PySpySource::default().attach(pid),
            Err(AttachError::Gone { .. })
        ));
    }
}
