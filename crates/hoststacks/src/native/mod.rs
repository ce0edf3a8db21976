//! Native frames of a process that runs no Python, read without pausing it: the kernel's perf
//! events sample each thread's user-space call chain on its own CPU time, and a thread that was
//! off CPU is shown by the system call it waits in.
//!
//! ```text
//!  each thread (/proc/PID/task, listed every 10 ms):
//!    perf_event_open(task clock, period = the host interval, user space only,
//!                    IP | TID | TIME | CALLCHAIN, CLOCK_REALTIME) + a 1 + 8 page ring
//!  each round:
//!    a sample since the last round ─▶ running, the newest sample's call chain
//!                                     (frame pointers, walked by the kernel)
//!    none, and no CPU time since ─▶ idle where it waited at the last round
//!    none, some CPU time (less than one period) or new
//!         ─▶ /proc/PID/task/TID/syscall: in a system call ─▶ idle, one frame (`futex`)
//!                                        "running"          ─▶ running, not sampled yet
//! ```
//!
//! | module | part |
//! |---|---|
//! | [`perf`] | the perf event and its ring buffer (the only unsafe code) |
//! | [`records`] | the ring's records, parsed |
//! | [`symbols`] | `/proc/PID/maps` and ELF symbols: addresses → frames |
//!
//! The kernel walks the user stack by its frame pointers: code built without them gives the
//! innermost frame and then whatever the frame-pointer register held. The walk stops at the
//! first address outside every executable mapping, which ends most such garbage, but a frame
//! above a function without frame pointers can still be wrong.

pub mod chains;
mod events;
pub mod perf;
pub mod records;
pub mod symbols;

use super::procs::{ProcFs, ProcessTable};
use super::source::{
    AttachError, Frame, NativeChains, ReadError, StackReader, StackSource, ThreadStack,
};
use cufall_model::{FrameKind, Gil, HostFrames, HostState};
use events::{Budget, Sampling, Slot, chain_frames_until, open_ring, placeholder};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use symbols::{ProcessSymbols, SymbolCache};

/// What a natively read process is, in the summary and the capture table.
pub const DESCRIBE: &str = "native (perf task-clock)";
/// What this reader records, for the manifest.
pub const FRAMES_KIND: &str = "native frames (perf task-clock, frame-pointer call chains)";

/// How often `/proc/PID/task` is listed for threads that started or ended (a thread whose
/// `/proc` entry is found gone before is dropped then).
const THREAD_SCAN: Duration = Duration::from_millis(10);

/// The fix for a refusal of perf events.
pub const PERF_PERMISSION_FIX: &str = "allow perf events on the program's threads: run cufall \
as root or with CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8), or as the program's user with \
kernel.perf_event_paranoid at 2 or below (`sudo sysctl kernel.perf_event_paranoid=2`); in a \
container, the perf_event_open system call must be allowed too (Docker's default seccomp \
profile refuses it unless the container has CAP_PERFMON or CAP_SYS_ADMIN: `--cap-add PERFMON`, \
or a seccomp profile that allows it)";

/// Environment variable naming host-stack sampling settings to try, for measuring what each
/// costs the program (`scripts/gpu/overhead.sh`), comma-separated: `period-full` (perf samples
/// every host interval of a thread's CPU time instead of every half), `leaf-stack=N` (a Python
/// thread's call chain cut at N frames), `no-leaf-perf` (no perf events on Python processes:
/// their threads' native frame is the system call they wait in, as where perf is refused).
pub const ENV_TUNE: &str = "CUFALL_HOST_TUNE";

/// The settings of [`ENV_TUNE`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tune {
    pub period_full: bool,
    pub leaf_stack: Option<u16>,
    pub no_leaf_perf: bool,
}

impl Tune {
    /// From the variable's text; unknown words are ignored.
    pub fn parse(text: &str) -> Tune {
        let mut t = Tune::default();
        for w in text.split(',').map(str::trim) {
            match w.split_once('=') {
                Some(("leaf-stack", n)) => t.leaf_stack = n.trim().parse().ok(),
                _ if w == "period-full" => t.period_full = true,
                _ if w == "no-leaf-perf" => t.no_leaf_perf = true,
                _ => {}
            }
        }
        t
    }

    fn from_env() -> Tune {
        std::env::var(ENV_TUNE)
            .map(|v| Tune::parse(&v))
            .unwrap_or_default()
    }
}

/// Attaches native readers: one perf event per thread, with sampling period `period_ns` of the
/// thread's CPU time.
pub struct NativeSource {
    proc_root: PathBuf,
    period_ns: u64,
    tune: Tune,
    cache: Arc<Mutex<SymbolCache>>,
    budget: Budget,
}

impl NativeSource {
    /// Samples every half host interval of a thread's CPU time: a thread on CPU all the time
    /// gives about two samples a round, so that a round whose CPU time fell a little short of
    /// one period (CPU time and rounds drift apart) still has one.
    pub fn new(interval: Duration) -> NativeSource {
        let tune = Tune::from_env();
        let divisor = if tune.period_full { 1 } else { 2 };
        NativeSource {
            proc_root: PathBuf::from("/proc"),
            period_ns: u64::try_from(interval.as_nanos() / divisor)
                .unwrap_or(u64::MAX)
                .max(1),
            tune,
            cache: Arc::default(),
            budget: Budget::of_open_files(),
        }
    }
}

impl StackSource for NativeSource {
    fn attach(&mut self, pid: u32) -> Result<Box<dyn StackReader>, AttachError> {
        let dir = self.proc_root.join(pid.to_string());
        let mut reader = NativeReader {
            pid,
            dir: dir.clone(),
            sampling: Sampling {
                period_ns: self.period_ns,
                max_stack: 0,
            },
            budget: self.budget.clone(),
            threads: BTreeMap::new(),
            symbols: ProcessSymbols::new(dir, Arc::clone(&self.cache)),
            procs: ProcFs::at(&self.proc_root),
            buf: Vec::new(),
            scanned: None,
        };
        // The first thread tells whether perf events may be had at all.
        // (Threads past the budget of perf events are read from /proc only.)
        match reader.find_threads() {
            Ok(n) if n > 0 => Ok(Box::new(reader)),
            Ok(_) if !reader.procs.alive(pid) => Err(AttachError::Gone { pid }),
            // Every thread it listed ended before its event was opened.
            Ok(_) => Err(AttachError::NativeUnavailable {
                pid,
                detail: "its threads ended as they were found".into(),
            }),
            Err(e) => Err(attach_error(pid, &e, reader.procs.alive(pid))),
        }
    }

    fn frames_kind(&self) -> &'static str {
        FRAMES_KIND
    }

    fn frames(&self) -> HostFrames {
        HostFrames::Native
    }

    fn chains(&mut self, pid: u32) -> Option<Result<Box<dyn NativeChains>, AttachError>> {
        if self.tune.no_leaf_perf {
            return None;
        }
        let dir = self.proc_root.join(pid.to_string());
        let mut c = chains::ThreadChains::new(
            Sampling {
                period_ns: self.period_ns,
                max_stack: self.tune.leaf_stack.unwrap_or(0),
            },
            self.budget.clone(),
            ProcessSymbols::new(dir, Arc::clone(&self.cache)),
        );
        // The main thread's event tells whether perf events may be had at all.
        Some(match c.open(pid) {
            Ok(()) => Ok(Box::new(c)),
            // The main thread ended; the others are opened as they are asked for.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) && self.alive(pid) => Ok(Box::new(c)),
            Err(e) => Err(attach_error(pid, &e, self.alive(pid))),
        })
    }
}

impl NativeSource {
    fn alive(&self, pid: u32) -> bool {
        ProcFs::at(&self.proc_root).alive(pid)
    }
}

/// Why perf events could not be had, told the way the loop needs.
fn attach_error(pid: u32, e: &std::io::Error, alive: bool) -> AttachError {
    let refused = |what: &str| AttachError::NativeUnavailable {
        pid,
        detail: format!("perf_event_open {what} ({e})"),
    };
    match e.raw_os_error() {
        _ if !alive => AttachError::Gone { pid },
        Some(libc::ESRCH) => AttachError::Gone { pid },
        Some(libc::EACCES | libc::EPERM) => {
            refused(&format!("was refused; to allow it: {PERF_PERMISSION_FIX}"))
        }
        Some(libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => {
            refused(
                "is not available here: this kernel (or virtual machine) offers no software task-clock sampling event",
            )
        }
        _ => refused("failed"),
    }
}

struct Thread {
    /// None when its event could not be opened (it is then read from /proc only).
    ring: Option<perf::Ring>,
    /// The ring's place in the budget (after `ring`: given back once it is closed).
    _slot: Option<Slot>,
    name: String,
    /// Times its name was read.
    name_reads: u8,
    /// Its CPU time at the last round, and what it was waiting in then: a thread that has not
    /// run since is still there, and `/proc` is not read again.
    cpu_ns: Option<u64>,
    waiting: Option<Vec<Frame>>,
    /// The frames of its newest sample, and the rounds since: a thread on CPU without a sample
    /// this round is still there, within [`RUNNING_KEPT_ROUNDS`].
    running: Option<(Vec<Frame>, u8)>,
}

/// Rounds a thread on CPU without a new sample keeps its newest sample's frames.
const RUNNING_KEPT_ROUNDS: u8 = 3;

/// An attached native process.
pub struct NativeReader {
    pid: u32,
    dir: PathBuf,
    sampling: Sampling,
    budget: Budget,
    threads: BTreeMap<u32, Thread>,
    symbols: ProcessSymbols,
    procs: ProcFs,
    buf: Vec<u8>,
    /// When `/proc/PID/task` was last listed.
    scanned: Option<Instant>,
}

impl NativeReader {
    /// Opens an event for every thread not seen before, and forgets those that ended. The
    /// error is the first refusal, when no thread could be opened.
    fn find_threads(&mut self) -> std::io::Result<usize> {
        let dir = std::fs::read_dir(self.dir.join("task"))?;
        self.scanned = Some(Instant::now());
        let tids: HashSet<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect();
        self.threads.retain(|tid, _| tids.contains(tid));
        let mut first_error = None;
        for tid in tids {
            if let Some(t) = self.threads.get_mut(&tid) {
                // A thread is often named just after it starts (pthread_setname_np): its name
                // is read again at its first few listings.
                if t.name_reads < NAME_READS {
                    t.name_reads += 1;
                    t.name = thread_name(&self.dir, tid);
                }
                continue;
            }
            let slot = self.budget.take();
            let ring = match slot.as_ref().map(|_| open_ring(tid, self.sampling)) {
                Some(Ok(r)) => Some(r),
                // Ended since the listing.
                Some(Err(e)) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                Some(Err(e)) => {
                    first_error.get_or_insert(e);
                    None
                }
                None => None,
            };
            let slot = slot.filter(|_| ring.is_some());
            self.threads.insert(
                tid,
                Thread {
                    ring,
                    _slot: slot,
                    name: thread_name(&self.dir, tid),
                    name_reads: 1,
                    cpu_ns: None,
                    waiting: None,
                    running: None,
                },
            );
        }
        match first_error {
            Some(e) if self.threads.values().all(|t| t.ring.is_none()) => Err(e),
            _ => Ok(self.threads.len()),
        }
    }

    /// A thread with no sample since the last round: where `/proc` says it is.
    fn off_cpu(&mut self, tid: u32) -> Option<(HostState, Vec<Frame>)> {
        let text = match std::fs::read_to_string(self.dir.join(format!("task/{tid}/syscall"))) {
            Ok(text) => text,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                return None;
            }
            // Reading it needs ptrace permission over the thread, which perf events do not.
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    || e.raw_os_error() == Some(libc::EPERM) =>
            {
                return Some((
                    HostState::Idle,
                    vec![placeholder(
                        "(off CPU; its system call is not readable without ptrace permission)"
                            .into(),
                    )],
                ));
            }
            Err(_) => String::new(),
        };
        Some(match parse_syscall(&text) {
            Some(Syscall::Running) => (
                HostState::Running,
                vec![placeholder(
                    "(on CPU, no sample since the last round)".into(),
                )],
            ),
            // Blocked outside a system call with no user address (an exiting thread).
            Some(Syscall::In { nr: None, pc: 0 }) | None => {
                (HostState::Idle, vec![placeholder("(off CPU)".into())])
            }
            Some(Syscall::In { nr, pc }) => {
                let (file, module) = self.symbols.file_of(pc).unwrap_or_default();
                let function = match nr {
                    Some(nr) => syscall_name(nr)
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("syscall {nr}")),
                    // Blocked outside a system call (stopped, traced): where it stopped.
                    None => self
                        .symbols
                        .frame(pc, false)
                        .map(|f| f.function)
                        .unwrap_or_else(|| format!("0x{pc:x}")),
                };
                (
                    HostState::Idle,
                    vec![Frame {
                        function,
                        file,
                        line: None,
                        module,
                        kind: FrameKind::Native,
                    }],
                )
            }
        })
    }
}

/// The frames of a sampled call chain, innermost first, up to the first address outside every
/// executable mapping.
fn chain_frames(symbols: &mut ProcessSymbols, chain: &[u64]) -> Vec<Frame> {
    chain_frames_until(symbols, chain, |_| false)
}

/// Listings at which a thread's name is read (10: its first 100 ms).
const NAME_READS: u8 = 10;

fn thread_name(dir: &std::path::Path, tid: u32) -> String {
    std::fs::read_to_string(dir.join(format!("task/{tid}/comm")))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

impl StackReader for NativeReader {
    fn describe(&self) -> String {
        DESCRIBE.into()
    }

    fn sample(&mut self) -> Result<Vec<ThreadStack>, ReadError> {
        if self.scanned.is_none_or(|t| t.elapsed() >= THREAD_SCAN)
            && let Err(e) = self.find_threads()
        {
            return Err(if self.procs.alive(self.pid) {
                ReadError::Failed(format!("cannot list or sample its threads: {e}"))
            } else {
                ReadError::Gone
            });
        }
        let tids: Vec<u32> = self.threads.keys().copied().collect();
        let mut out = Vec::with_capacity(tids.len());
        for tid in tids {
            if let Some(th) = self.thread(tid) {
                out.push(th);
            } else {
                // Ended since the last listing.
                self.threads.remove(&tid);
            }
        }
        if out.is_empty() {
            return Err(ReadError::Gone);
        }
        Ok(out)
    }
}

impl NativeReader {
    /// One thread now; None when it has ended.
    fn thread(&mut self, tid: u32) -> Option<ThreadStack> {
        self.buf.clear();
        let t = self.threads.get_mut(&tid)?;
        if let Some(ring) = &mut t.ring {
            ring.drain(&mut self.buf);
        }
        // Only the newest sample counts: a full ring (a round far late) drops the newer ones,
        // so that one is the last the kernel kept.
        let newest = records::parse(&self.buf).newest;
        // Without a sample: not run since the last round, when it was waiting, it waits there
        // still (the count is read only then: reading it interrupts the CPU the thread runs on).
        let cpu_ns = match (&newest, &t.ring) {
            (None, Some(ring)) => ring.cpu_ns().ok(),
            _ => None,
        };
        let still = cpu_ns.is_some() && cpu_ns == t.cpu_ns;
        t.cpu_ns = cpu_ns;
        let cached = t.waiting.clone().filter(|_| still);
        let name = t.name.clone();
        let sampled = newest.is_some();
        let (state, mut frames) = match (newest, cached) {
            (Some(s), _) if !s.callchain.is_empty() => (
                HostState::Running,
                chain_frames(&mut self.symbols, &s.callchain),
            ),
            (Some(s), _) => (HostState::Running, chain_frames(&mut self.symbols, &[s.ip])),
            (None, Some(frames)) => (HostState::Idle, frames),
            (None, None) => self.off_cpu(tid)?,
        };
        let t = self.threads.get_mut(&tid)?;
        if sampled {
            t.running = Some((frames.clone(), 0));
        } else if state == HostState::Running {
            // On CPU, its sample not yet taken: where its newest sample was, if recent.
            match &mut t.running {
                Some((last, rounds)) if *rounds < RUNNING_KEPT_ROUNDS => {
                    *rounds += 1;
                    frames.clone_from(last);
                }
                _ => t.running = None,
            }
        } else {
            t.running = None;
        }
        t.waiting = (state == HostState::Idle).then(|| frames.clone());
        Some(ThreadStack {
            tid,
            name,
            state,
            gil: Gil::Unknown,
            frames,
        })
    }
}

/// What `/proc/PID/task/TID/syscall` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscall {
    /// On a CPU now.
    Running,
    /// Blocked: in system call `nr` (None: blocked outside one), at user address `pc`.
    In { nr: Option<u64>, pc: u64 },
}

/// Reads `NR arg1 .. arg6 SP PC`, `-1 SP PC` or `running`.
pub fn parse_syscall(text: &str) -> Option<Syscall> {
    let text = text.trim();
    if text == "running" {
        return Some(Syscall::Running);
    }
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let pc = hex(fields.last()?)?;
    let nr = match fields.first()? {
        &"-1" => None,
        n => Some(n.parse().ok()?),
    };
    (fields.len() == 9 || (nr.is_none() && fields.len() == 3)).then_some(Syscall::In { nr, pc })
}

/// The name of a system call a thread commonly waits in; None for the rest.
pub fn syscall_name(nr: u64) -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    const TABLE: &[(u64, &str)] = &[
        (0, "read"),
        (1, "write"),
        (7, "poll"),
        (16, "ioctl"),
        (23, "select"),
        (24, "sched_yield"),
        (35, "nanosleep"),
        (43, "accept"),
        (45, "recvfrom"),
        (47, "recvmsg"),
        (61, "wait4"),
        (202, "futex"),
        (230, "clock_nanosleep"),
        (232, "epoll_wait"),
        (270, "pselect6"),
        (271, "ppoll"),
        (281, "epoll_pwait"),
        (426, "io_uring_enter"),
        (441, "epoll_pwait2"),
    ];
    #[cfg(target_arch = "aarch64")]
    const TABLE: &[(u64, &str)] = &[
        (22, "epoll_pwait"),
        (29, "ioctl"),
        (63, "read"),
        (64, "write"),
        (72, "pselect6"),
        (73, "ppoll"),
        (98, "futex"),
        (101, "nanosleep"),
        (115, "clock_nanosleep"),
        (124, "sched_yield"),
        (207, "recvfrom"),
        (212, "recvmsg"),
        (242, "accept4"),
        (260, "wait4"),
        (426, "io_uring_enter"),
        (441, "epoll_pwait2"),
    ];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const TABLE: &[(u64, &str)] = &[];
    TABLE.iter().find(|(n, _)| *n == nr).map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_events_past_the_budget_are_not_opened_and_closed_ones_give_their_place_back() {
        let b = Budget {
            open: Arc::default(),
            max: 2,
        };
        let (x, y) = (b.take(), b.take());
        assert!(x.is_some() && y.is_some());
        assert!(b.take().is_none(), "past the budget");
        drop(x);
        assert!(b.take().is_some(), "a closed event's place is free again");
        assert!(Budget::of_open_files().max >= 1);
    }

    #[test]
    fn syscall_files_are_read() {
        assert_eq!(parse_syscall("running\n"), Some(Syscall::Running));
        assert_eq!(
            parse_syscall("202 0x7f0 0x80 0x0 0x0 0x0 0x0 0x7ffd0 0x7f1234\n"),
            Some(Syscall::In {
                nr: Some(202),
                pc: 0x7f1234
            })
        );
        assert_eq!(
            parse_syscall("-1 0x7ffd0 0x401000\n"),
            Some(Syscall::In {
                nr: None,
                pc: 0x401000
            })
        );
        assert_eq!(parse_syscall(""), None);
        assert_eq!(parse_syscall("202 0x1"), None);
        assert_eq!(parse_syscall("x 1 2 3 4 5 6 7 8"), None);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn common_waits_have_names() {
        assert_eq!(syscall_name(202), Some("futex"));
        assert_eq!(syscall_name(230), Some("clock_nanosleep"));
        assert_eq!(syscall_name(9999), None);
    }

    #[test]
    fn refusals_say_what_to_allow_and_absence_says_so() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        match attach_error(5, &e(libc::EACCES), true) {
            AttachError::NativeUnavailable { detail, .. } => {
                assert!(detail.contains("perf_event_paranoid"), "{detail}");
                assert!(detail.contains("CAP_PERFMON"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        match attach_error(5, &e(libc::ENODEV), true) {
            AttachError::NativeUnavailable { detail, .. } => {
                assert!(detail.contains("not available"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            attach_error(5, &e(libc::ESRCH), true),
            AttachError::Gone { .. }
        ));
        assert!(matches!(
            attach_error(5, &e(libc::EACCES), false),
            AttachError::Gone { .. }
        ));
    }
}

#[cfg(test)]
mod tune_tests {
    use super::Tune;

    #[test]
    fn the_tune_variable_reads_each_setting_and_ignores_the_rest() {
        assert_eq!(Tune::parse(""), Tune::default());
        assert_eq!(
            Tune::parse("period-full, leaf-stack=32,no-leaf-perf,bogus,leaf-stack=x"),
            Tune {
                period_full: true,
                leaf_stack: None,
                no_leaf_perf: true,
            }
        );
        assert_eq!(Tune::parse("leaf-stack=48").leaf_stack, Some(48));
    }
}
