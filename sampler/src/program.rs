//! The program run under cufall (`record -- CMD`, `cufall -- CMD`): finding it, starting it with
//! the capture environment, stopping it politely, and its exit code.

use crate::os;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The program's path: as given when it contains a `/`, else the first match on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|c| c.is_file())
    })
}

/// The exit code cufall passes through: the program's own, or 128 + the signal that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Stops the child politely, then firmly: SIGINT, SIGTERM after 5 s, SIGKILL after 10 s.
pub fn stop_child(child: &mut Child) -> Option<ExitStatus> {
    let pid = child.id();
    for (sig, wait) in [(os::SIGINT, 5), (os::SIGTERM, 5)] {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        os::send_signal(pid, sig);
        let until = Instant::now() + Duration::from_secs(wait);
        while Instant::now() < until {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = child.kill();
    child.wait().ok()
}
