//! Keeping cufall off the cores the program is pinned to.
//!
//! A program pinned with `taskset` or `numactl` (as latency benchmarks and many serving stacks
//! are) gets a core to itself only if nothing else runs there; the scheduler is free to put
//! cufall's decode, evaluation and writer threads (about one core per GPU) on it, and every
//! slice they take is a slice the program waits for, so the program's host-bound loops lose
//! steps to the profiler, not to their own work. While the program's processes are allowed a
//! strict subset of the CPUs cufall may use, cufall keeps every thread of its own to the rest;
//! when that leaves nothing (the program may use every CPU cufall may), nothing changes.
//!
//! The sets come from `/proc/PID/status` (`Cpus_allowed_list`); the folder is a parameter so
//! tests can build a fake `/proc`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A set of CPU numbers.
pub type CpuSet = BTreeSet<usize>;

/// Parses a kernel CPU list (`0-2,4,7-15`); `None` when malformed.
pub fn parse_list(text: &str) -> Option<CpuSet> {
    let mut out = CpuSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                // A machine has at most a few thousand CPUs: a larger range is not a CPU list.
                if b < a || b >= 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.trim().parse().ok()?);
            }
        }
    }
    Some(out)
}

/// The set back as a kernel CPU list (`0-2,4,7-15`).
pub fn format_list(set: &CpuSet) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b += 1;
            it.next();
        }
        parts.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        });
    }
    parts.join(",")
}

/// The CPUs `status` (the text of `/proc/PID/status`) allows.
fn allowed_in(status: &str) -> Option<CpuSet> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_list)
}

/// Why cufall's own threads could not be kept to a set of CPUs.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("cannot list this process's threads: {0}")]
    Threads(#[source] std::io::Error),
    #[error("sched_setaffinity: {0}")]
    Affinity(#[source] std::io::Error),
}

/// What the fence does to cufall's own threads.
pub trait Pinner {
    /// Keeps every thread of this process to `cpus`; `Err` with the reason when refused.
    fn pin_all(&mut self, cpus: &CpuSet) -> Result<(), PinError>;
}

/// The real pinner: `sched_setaffinity` on every thread of this process.
pub struct ThisProcess;

impl Pinner for ThisProcess {
    fn pin_all(&mut self, cpus: &CpuSet) -> Result<(), PinError> {
        let tasks = std::fs::read_dir("/proc/self/task").map_err(PinError::Threads)?;
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            // A thread that ended since the listing is no error.
            if let Err(e) = crate::os::set_thread_affinity(tid, cpus)
                && e.raw_os_error() != Some(libc::ESRCH)
            {
                return Err(PinError::Affinity(e));
            }
        }
        Ok(())
    }
}

/// Watches the program's CPU sets and keeps cufall's threads off them.
pub struct CpuFence<P: Pinner> {
    proc_root: PathBuf,
    /// What cufall may use (its own set when it started).
    mine: CpuSet,
    /// The set cufall's threads were last kept to (`None`: untouched).
    applied: Option<CpuSet>,
    pinner: P,
    /// Said once when refused, then quiet.
    refused: bool,
}

impl CpuFence<ThisProcess> {
    /// A fence for this process, or `None` when its own CPU set cannot be read.
    pub fn for_this_process() -> Option<Self> {
        CpuFence::new(Path::new("/proc"), ThisProcess)
    }
}

impl<P: Pinner> CpuFence<P> {
    pub fn new(proc_root: &Path, pinner: P) -> Option<Self> {
        let status = std::fs::read_to_string(proc_root.join("self/status")).ok()?;
        Some(CpuFence {
            proc_root: proc_root.to_path_buf(),
            mine: allowed_in(&status)?,
            applied: None,
            pinner,
            refused: false,
        })
    }

    /// Looks at the program's processes (`pids`) again; returns a line for the user when what
    /// cufall keeps to changes.
    pub fn check(&mut self, pids: &[u32]) -> Option<String> {
        if self.refused {
            return None;
        }
        let mut program = CpuSet::new();
        for pid in pids {
            let status =
                std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("status")).ok();
            if let Some(set) = status.as_deref().and_then(allowed_in) {
                program.extend(set);
            }
        }
        if program.is_empty() {
            return None;
        }
        let rest: CpuSet = self.mine.difference(&program).copied().collect();
        let want = if program.is_subset(&self.mine) && !rest.is_empty() {
            Some(rest)
        } else {
            None
        };
        if want == self.applied {
            return None;
        }
        let target = want.clone().unwrap_or_else(|| self.mine.clone());
        if let Err(why) = self.pinner.pin_all(&target) {
            self.refused = true;
            return Some(format!(
                "the program is kept to CPU(s) {}, and cufall's own threads could not be kept \
                 off them ({why}): they may take time from it",
                format_list(&program)
            ));
        }
        self.applied = want;
        Some(match &self.applied {
            Some(rest) => format!(
                "the program is kept to CPU(s) {}: cufall's own threads keep to CPU(s) {} so \
                 as not to take its time",
                format_list(&program),
                format_list(rest)
            ),
            None => format!(
                "the program may now use every CPU cufall may ({}): cufall's threads use them \
                 all again",
                format_list(&self.mine)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Spy(Vec<CpuSet>, bool);

    impl Pinner for &mut Spy {
        fn pin_all(&mut self, cpus: &CpuSet) -> Result<(), PinError> {
            if self.1 {
                return Err(PinError::Affinity(std::io::Error::from_raw_os_error(
                    libc::EPERM,
                )));
            }
            self.0.push(cpus.clone());
            Ok(())
        }
    }

    fn proc_with(dir: &Path, pid: &str, list: &str) {
        let d = dir.join(pid);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("status"),
            format!("Name:\tx\nCpus_allowed:\tffff\nCpus_allowed_list:\t{list}\n"),
        )
        .unwrap();
    }

    #[test]
    fn lists_parse_and_print() {
        let s = parse_list("0-2,4,7-9\n").unwrap();
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 4, 7, 8, 9]);
        assert_eq!(format_list(&s), "0-2,4,7-9");
        assert_eq!(parse_list("3").unwrap().len(), 1);
        assert!(parse_list("5-2").is_none());
        assert!(parse_list("x").is_none());
        assert!(parse_list("0-99999999").is_none());
        assert_eq!(format_list(&CpuSet::new()), "");
    }

    #[test]
    fn keeps_off_a_pinned_program_and_back_when_it_is_not() {
        let dir = tempfile::tempdir().unwrap();
        proc_with(dir.path(), "self", "0-15");
        proc_with(dir.path(), "100", "3");
        proc_with(dir.path(), "101", "0-15");
        let mut spy = Spy::default();
        let mut f = CpuFence::new(dir.path(), &mut spy).unwrap();
        let line = f.check(&[100]).unwrap();
        assert!(
            line.contains("CPU(s) 3") && line.contains("0-2,4-15"),
            "{line}"
        );
        // Nothing new: nothing done, nothing said.
        assert_eq!(f.check(&[100]), None);
        // A process of the program may use everything: cufall may too.
        let back = f.check(&[100, 101]).unwrap();
        assert!(back.contains("use them all again"), "{back}");
        // Unreadable processes (exited) change nothing.
        assert_eq!(f.check(&[999]), None);
        drop(f);
        assert_eq!(format_list(&spy.0[0]), "0-2,4-15");
        assert_eq!(format_list(&spy.0[1]), "0-15");
        assert_eq!(spy.0.len(), 2);
    }

    #[test]
    fn a_program_on_every_cpu_or_outside_cufalls_set_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        proc_with(dir.path(), "self", "0-3");
        proc_with(dir.path(), "7", "0-3");
        proc_with(dir.path(), "8", "2-9");
        let mut spy = Spy::default();
        let mut f = CpuFence::new(dir.path(), &mut spy).unwrap();
        assert_eq!(f.check(&[7]), None);
        assert_eq!(f.check(&[8]), None);
        drop(f);
        assert!(spy.0.is_empty());
    }

    #[test]
    fn a_refusal_is_said_once() {
        let dir = tempfile::tempdir().unwrap();
        proc_with(dir.path(), "self", "0-7");
        proc_with(dir.path(), "5", "1");
        let mut spy = Spy(Vec::new(), true);
        let mut f = CpuFence::new(dir.path(), &mut spy).unwrap();
        assert!(f.check(&[5]).unwrap().contains("could not be kept off"));
        assert_eq!(f.check(&[5]), None);
    }
}
