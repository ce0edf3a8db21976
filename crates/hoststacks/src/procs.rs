//! The processes of the program: the launched one and every descendant, found by reading each
//! process's parent from `/proc/PID/stat`. A process is known by its pid and start time (a pid
//! the kernel hands out again is another process) and by the program it runs (`/proc/PID/exe`,
//! which changes when the process execs).
//!
//! The folder is a parameter so that tests can build a fake `/proc`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// One process of the program as the scan saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    /// Clock ticks after boot when it started (`stat` field 22): with the pid, its identity.
    pub start_ticks: u64,
    /// What it runs (the target of `exe`); empty when unreadable (an exited process, no
    /// permission).
    pub image: String,
}

/// Where to look for the program's processes.
pub trait ProcessTable: Send {
    /// `root` (while it lives) and every process descending from it.
    fn tree(&mut self, root: u32) -> Vec<Proc>;
    /// Whether `pid` still runs (a zombie does not).
    fn alive(&self, pid: u32) -> bool;
}

/// The real table: a `/proc` folder.
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs::at("/proc")
    }
}

impl ProcFs {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        ProcFs { root: root.into() }
    }

    fn stat(&self, pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("stat")).ok()?;
        parse_stat(&text)
    }

    fn image(&self, pid: u32) -> String {
        std::fs::read_link(self.root.join(pid.to_string()).join("exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }
}

/// The fields of `/proc/PID/stat` the scan needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub ppid: u32,
    pub start_ticks: u64,
}

/// Reads `pid (comm) state ppid ... starttime ...`. The command name may hold spaces and
/// parentheses, so the fields are counted from its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    // After state and ppid, starttime is the 20th of the remaining fields (field 22 overall).
    let start_ticks = fields.nth(17)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        start_ticks,
    })
}

impl ProcessTable for ProcFs {
    fn tree(&mut self, root: u32) -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut children: HashMap<u32, Vec<(u32, Stat)>> = HashMap::new();
        let mut root_stat = None;
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(stat) = self.stat(pid) else {
                continue;
            };
            if pid == root {
                root_stat = Some(stat);
            }
            children.entry(stat.ppid).or_default().push((pid, stat));
        }
        let mut out = Vec::new();
        let mut queue = VecDeque::new();
        if let Some(s) = root_stat {
            queue.push_back((root, s));
        }
        while let Some((pid, stat)) = queue.pop_front() {
            // A zombie has exited: nothing to read, but its children may still run.
            if stat.state != 'Z' && stat.state != 'X' {
                out.push(Proc {
                    pid,
                    start_ticks: stat.start_ticks,
                    image: self.image(pid),
                });
            }
            if let Some(kids) = children.remove(&pid) {
                queue.extend(kids);
            }
        }
        out
    }

    fn alive(&self, pid: u32) -> bool {
        self.stat(pid)
            .is_some_and(|s| s.state != 'Z' && s.state != 'X')
    }
}

/// Whether this process may read `pid`'s memory: opening `/proc/PID/mem` asks the kernel the
/// same question (ptrace access mode attach) that reading it with `process_vm_readv` does, so
/// a refusal here is the permission problem, told apart from everything else.
pub fn may_read_memory(proc_root: &Path, pid: u32) -> Result<(), std::io::Error> {
    std::fs::File::open(proc_root.join(pid.to_string()).join("mem")).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::process::Command;

    /// A fake `/proc` with processes `(pid, ppid, state, start, exe)`.
    fn fake(procs: &[(u32, u32, char, u64, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for &(pid, ppid, state, start, exe) in procs {
            let p = dir.path().join(pid.to_string());
            std::fs::create_dir(&p).expect("mkdir");
            // 19 fields between ppid and starttime, as the kernel writes them.
            let middle = vec!["0"; 17].join(" ");
            std::fs::write(
                p.join("stat"),
                format!("{pid} (a (tricky) name) {state} {ppid} {middle} {start} 0 0\n"),
            )
            .expect("stat");
            std::os::unix::fs::symlink(exe, p.join("exe")).expect("exe");
        }
        // Entries that are not processes are passed over.
        std::fs::create_dir(dir.path().join("sys")).expect("sys");
        std::fs::write(dir.path().join("uptime"), "1 1\n").expect("uptime");
        dir
    }

    #[test]
    fn the_tree_is_the_root_and_every_descendant_and_nothing_else() {
        let d = fake(&[
            (1, 0, 'S', 1, "/sbin/init"),
            (10, 1, 'S', 5, "/usr/bin/python3"),
            (11, 10, 'R', 6, "/usr/bin/python3"),
            (12, 11, 'S', 7, "/bin/sh"),
            (13, 12, 'Z', 8, "/bin/true"),
            (14, 13, 'S', 9, "/usr/bin/python3"),
            (20, 1, 'S', 5, "/usr/bin/other"),
        ]);
        let mut t = ProcFs::at(d.path());
        let mut got: Vec<(u32, u64, String)> = t
            .tree(10)
            .into_iter()
            .map(|p| (p.pid, p.start_ticks, p.image))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (10, 5, "/usr/bin/python3".to_string()),
                (11, 6, "/usr/bin/python3".to_string()),
                (12, 7, "/bin/sh".to_string()),
                // 13 is a zombie: left out, but its child is still found.
                (14, 9, "/usr/bin/python3".to_string()),
            ]
        );
        assert!(t.alive(11));
        assert!(!t.alive(13), "a zombie is not alive");
        assert!(!t.alive(99));
        assert!(t.tree(99).is_empty(), "a root that is gone has no tree");
    }

    #[test]
    fn stat_lines_are_read_after_the_last_parenthesis() {
        let s = parse_stat("7 (a) b (c)) S 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 4242 1")
            .expect("parsed");
        assert_eq!(
            s,
            Stat {
                state: 'S',
                ppid: 3,
                start_ticks: 4242
            }
        );
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S notanumber").is_none());
        assert!(parse_stat("1 (x) S 0 1 2").is_none(), "cut short");
    }

    #[test]
    fn real_child_processes_are_found_with_their_children() {
        // sh starts a sleep of its own: both are in the tree of sh.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5 & sleep 5; wait"])
            .spawn()
            .expect("sh");
        let root = child.id();
        let mut t = ProcFs::default();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let sleeps = |tree: &[Proc]| tree.iter().filter(|p| p.image.ends_with("sleep")).count();
        let mut tree = t.tree(root);
        // Until both forks of sh have exec'd sleep (a fork runs sh's image until then).
        while sleeps(&tree) < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tree = t.tree(root);
        }
        let readable = may_read_memory(Path::new("/proc"), root);
        for p in tree.iter().rev() {
            let _ = Command::new("kill")
                .args(["-KILL", &p.pid.to_string()])
                .status();
        }
        let _ = child.wait();
        assert!(tree.len() >= 3, "sh and its two sleeps: {tree:?}");
        assert_eq!(tree[0].pid, root);
        assert!(sleeps(&tree) >= 2, "{tree:?}");
        // Root may read its own child's memory (the integration test needs it too).
        // `/proc/self` belongs to the process's user: root reads its child.
        let root_user = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        assert!(readable.is_ok() || !root_user, "{readable:?}");
        assert!(!t.alive(root), "reaped");
    }
}
