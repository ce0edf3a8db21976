//! What the host was doing in each host sample, for the verdict line of a host-bound place or
//! phase: computing, waiting for the GPU, copying, launching, or waiting on another thread, a
//! lock or a sleep ([`HostCause`]).
//!
//! A sample's cause comes, first, from the CUDA call its thread was in at that moment where the
//! API calls were captured (`--capture api`: synchronise, wait and query calls are waiting for
//! the GPU, copies and sets copying, launches launching); else from its stack, by function
//! names: the outermost frame of a CUDA kind (`cudaStreamSynchronize`, torch's `synchronize`,
//! `_local_scalar_dense` under `.item()`; `cudaMemcpy*`, `copy_`, `_to_copy` under `.to('cpu')`;
//! `cudaLaunchKernel`, `cuGraphLaunch`), so that a copy's own wait counts as copying; else the
//! innermost frame that blocks on another thread or the clock (`futex`, `pthread_cond_wait`,
//! `Event.wait`, `Condition.wait`, `Lock.acquire`, `sleep`, `clock_nanosleep`, `select`,
//! `poll`, `epoll_wait`, `wait4`; the C library's internal names of these count too:
//! `__futex_abstimed_wait_common`, `__GI___poll`, `___pthread_cond_timedwait64`,
//! `__lll_lock_wait`); else an idle sample is waiting on something its stack does not name
//! (a Python `time.sleep` shows only its caller's line), and a running one is computing. The
//! native frame a Python thread is in is part of its stack (appended by the sampler under the
//! innermost Python frame: `cudaStreamSynchronize`, `cuLaunchKernel`, `cudaMemcpyAsync`,
//! `futex`), so these name its cause without captured API calls.

use cufall_trace::model::ApiCall;
use serde::Serialize;
use std::collections::HashMap;

/// What the host was doing in a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostCause {
    /// Running, in none of the calls below: the top functions say what it computed.
    Computing,
    /// In a synchronisation with the GPU (a stream, event or device sync, `.item()`).
    WaitingForGpu,
    /// In a copy between host and GPU, its waits included.
    Copying,
    /// In a kernel or graph launch.
    Launching,
    /// Blocked on another thread, a lock, a sleep or I/O readiness.
    WaitingOnThread,
}

impl HostCause {
    /// Every cause, in the order the verdict line names them.
    pub const ALL: [HostCause; 5] = [
        HostCause::Computing,
        HostCause::WaitingForGpu,
        HostCause::Copying,
        HostCause::Launching,
        HostCause::WaitingOnThread,
    ];

    /// The verdict line's words.
    pub fn words(self) -> &'static str {
        match self {
            HostCause::Computing => "host computing",
            HostCause::WaitingForGpu => "waiting for the GPU",
            HostCause::Copying => "copying",
            HostCause::Launching => "launching",
            HostCause::WaitingOnThread => "waiting on a thread, a lock or a sleep",
        }
    }

    fn index(self) -> usize {
        match self {
            HostCause::Computing => 0,
            HostCause::WaitingForGpu => 1,
            HostCause::Copying => 2,
            HostCause::Launching => 3,
            HostCause::WaitingOnThread => 4,
        }
    }
}

/// The last part of a qualified name: `Event.wait` → `wait`, `at::native::copy_` → `copy_`.
fn tail(function: &str) -> &str {
    let after_colons = function.rsplit("::").next().unwrap_or(function);
    after_colons.rsplit('.').next().unwrap_or(after_colons)
}

/// The CUDA kind a frame's function names, if any.
pub fn cuda_cause(function: &str, file: &str) -> Option<HostCause> {
    let t = tail(function);
    let torch = file.contains("torch");
    if function.contains("Synchronize")
        || t.contains("_local_scalar_dense")
        || (t == "synchronize" && torch)
    {
        Some(HostCause::WaitingForGpu)
    } else if function.contains("Memcpy")
        || function.contains("Memset")
        || function.contains("_to_copy")
        || t.starts_with("copy_")
    {
        Some(HostCause::Copying)
    } else if function.contains("LaunchKernel") || function.contains("GraphLaunch") {
        Some(HostCause::Launching)
    } else {
        None
    }
}

/// Whether a frame's function blocks on another thread, a lock, the clock or I/O readiness.
pub fn blocks(function: &str, file: &str) -> bool {
    const BLOCKING: [&str; 26] = [
        "wait",
        "acquire",
        "join",
        "sleep",
        "nanosleep",
        "clock_nanosleep",
        "usleep",
        "select",
        "pselect",
        "pselect6",
        "poll",
        "ppoll",
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_cond_clockwait",
        "pthread_mutex_lock",
        "pthread_join",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "lll_lock_wait",
        "wait4",
        "waitpid",
    ];
    // A symbol version's dots are not a qualified name's.
    let t = libc_plain(tail(function.split('@').next().unwrap_or(function)));
    function.contains("futex")
        || BLOCKING.contains(&t)
        || (t == "get" && (file.ends_with("queue.py") || file.ends_with("queues.py")))
}

/// A C library name without its internal dressing: `__GI___poll` → `poll`,
/// `___pthread_cond_timedwait64` → `pthread_cond_timedwait`, `__libc_recv` → `recv`.
fn libc_plain(name: &str) -> &str {
    let name = name.strip_prefix("__GI_").unwrap_or(name);
    let name = name.trim_start_matches('_');
    let name = name.strip_prefix("libc_").unwrap_or(name);
    let name = name.strip_suffix("_time64").unwrap_or(name);
    name.strip_suffix("64").unwrap_or(name)
}

/// The cause a captured CUDA call gives the time inside it, if it is one of the verdict's.
pub fn api_cause(name: &str) -> Option<HostCause> {
    if ["Synchronize", "Wait", "Query"]
        .iter()
        .any(|w| name.contains(w))
    {
        Some(HostCause::WaitingForGpu)
    } else if name.contains("Memcpy") || name.contains("Memset") {
        Some(HostCause::Copying)
    } else if name.contains("Launch") {
        Some(HostCause::Launching)
    } else {
        None
    }
}

/// What names a sample's cause in the verdict line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameKey {
    /// A function (an index into the host index's functions).
    Function(u32),
    /// A blocking function inside another: `Event.wait in schedule`.
    FunctionIn(u32, u32),
    /// A captured CUDA call (an index into [`ApiCauses`]' names).
    Api(u32),
    /// A sample without frames.
    Unnamed,
}

/// Each thread's captured CUDA calls of the verdict's kinds, as disjoint intervals: a call
/// nested in another (a driver call under a runtime call) takes the outer one's cause.
#[derive(Debug, Default)]
pub struct ApiCauses {
    by_thread: Vec<Vec<(i64, i64, HostCause, u32)>>,
    names: Vec<String>,
}

impl ApiCauses {
    /// `thread_of` maps `(pid, tid)` to a thread index below `threads`; calls of threads
    /// without one are left out.
    pub fn build(
        calls: &[ApiCall],
        threads: usize,
        thread_of: impl Fn(u32, u32) -> Option<u32>,
    ) -> ApiCauses {
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: HashMap<&str, u32> = HashMap::new();
        let mut by_thread: Vec<Vec<(i64, i64, HostCause, u32)>> = vec![Vec::new(); threads];
        for c in calls {
            let (Some(cause), Some(t)) = (api_cause(&c.name), thread_of(c.pid, c.tid)) else {
                continue;
            };
            let Some(list) = by_thread.get_mut(t as usize) else {
                continue;
            };
            let next = u32::try_from(names.len()).unwrap_or(u32::MAX);
            let id = *name_ids.entry(c.name.as_str()).or_insert_with(|| {
                names.push(c.name.clone());
                next
            });
            list.push((c.start_ns, c.end_ns.max(c.start_ns), cause, id));
        }
        for list in &mut by_thread {
            // Earliest start first, the longest among equals: an outer call before its inner.
            list.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let mut kept: Vec<(i64, i64, HostCause, u32)> = Vec::with_capacity(list.len());
            for c in list.drain(..) {
                match kept.last_mut() {
                    Some(last) if c.0 < last.1 => last.1 = last.1.max(c.1),
                    _ => kept.push(c),
                }
            }
            *list = kept;
        }
        ApiCauses { by_thread, names }
    }

    /// The call thread `thread` was in at `t_ns`, if one of the verdict's kinds.
    pub fn at(&self, thread: u32, t_ns: i64) -> Option<(HostCause, u32)> {
        let list = self.by_thread.get(thread as usize)?;
        let i = list.partition_point(|c| c.0 <= t_ns);
        let c = list.get(i.checked_sub(1)?)?;
        (t_ns < c.1).then_some((c.2, c.3))
    }

    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
}

/// One cause's share of a class's time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CauseShare {
    pub cause: HostCause,
    pub samples: u64,
    /// Of the samples expected in the time (as the frames' shares): the causes and `unsampled`
    /// add up to 1.
    pub share: f64,
    /// What says so, largest first: the innermost functions (computing), the call (waiting for
    /// the GPU, copying, launching), the blocking call and the function it is in (waiting on a
    /// thread); the first three.
    pub top: Vec<NamedShare>,
}

/// A name with its share of a class's time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedShare {
    pub name: String,
    pub share: f64,
}

/// The verdict line's split of a class's time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostCauses {
    /// Every cause in [`HostCause::ALL`]'s order.
    pub causes: Vec<CauseShare>,
    /// The time no sample stands for.
    pub unsampled: f64,
    /// Whether captured CUDA calls named any sample's cause (else the stacks alone did).
    pub from_api_calls: bool,
}

/// How many names each cause keeps.
pub const CAUSE_NAMES_KEPT: usize = 3;

/// The samples of one view by cause, as they are folded in.
#[derive(Debug, Default)]
pub struct CauseAcc {
    counts: [u64; 5],
    names: [HashMap<NameKey, u64>; 5],
    from_api: bool,
}

impl CauseAcc {
    pub fn add(&mut self, cause: HostCause, key: NameKey) {
        let i = cause.index();
        self.counts[i] += 1;
        *self.names[i].entry(key).or_default() += 1;
        self.from_api |= matches!(key, NameKey::Api(_));
    }

    /// The shares over `over` samples (the view's expected samples, or its samples where those
    /// are more); `name` words a key.
    pub fn finish(self, over: f64, name: &dyn Fn(NameKey) -> String) -> HostCauses {
        // Never a share above 1, whatever the caller expected.
        let over = over.max(self.counts.iter().sum::<u64>() as f64);
        let of = |n: u64| if over > 0.0 { n as f64 / over } else { 0.0 };
        let mut sampled = 0.0;
        let causes = HostCause::ALL
            .iter()
            .zip(self.names)
            .map(|(cause, names)| {
                let samples = self.counts[cause.index()];
                sampled += of(samples);
                let mut named: Vec<(NameKey, u64)> = names.into_iter().collect();
                // Largest first; among equals by key, for a stable answer without wording every
                // name (only the kept ones are worded).
                named.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                CauseShare {
                    cause: *cause,
                    samples,
                    share: of(samples),
                    top: named
                        .into_iter()
                        .filter(|(k, _)| *k != NameKey::Unnamed)
                        .take(CAUSE_NAMES_KEPT)
                        .map(|(k, n)| NamedShare {
                            name: name(k),
                            share: of(n),
                        })
                        .collect(),
                }
            })
            .collect();
        HostCauses {
            causes,
            unsampled: (1.0 - sampled).clamp(0.0, 1.0),
            from_api_calls: self.from_api,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_give_the_causes_the_issue_lists() {
        let cuda = |f: &str, file: &str| cuda_cause(f, file);
        for f in [
            "cudaStreamSynchronize",
            "cuStreamSynchronize",
            "cudaDeviceSynchronize",
            "cuEventSynchronize",
            "at::native::_local_scalar_dense_cuda",
        ] {
            assert_eq!(
                cuda(f, "libcudart.so"),
                Some(HostCause::WaitingForGpu),
                "{f}"
            );
        }
        assert_eq!(
            cuda(
                "synchronize",
                "/usr/lib/python3/site-packages/torch/cuda/__init__.py"
            ),
            Some(HostCause::WaitingForGpu)
        );
        assert_eq!(cuda("synchronize", "/app/mine.py"), None);
        for f in [
            "cudaMemcpyAsync",
            "cuMemcpyDtoH_v2",
            "at::native::copy_",
            "at::_ops::_to_copy::call",
        ] {
            assert_eq!(cuda(f, ""), Some(HostCause::Copying), "{f}");
        }
        for f in ["cudaLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch"] {
            assert_eq!(cuda(f, ""), Some(HostCause::Launching), "{f}");
        }
        for (f, file) in [
            ("futex_wait", "libc.so.6"),
            ("pthread_cond_wait", "libc.so.6"),
            ("Event.wait", "/usr/lib/python3.12/threading.py"),
            ("Condition.wait", "threading.py"),
            ("Lock.acquire", "x.py"),
            ("clock_nanosleep", "libc.so.6"),
            ("epoll_wait", "libc.so.6"),
            ("Queue.get", "/usr/lib/python3.12/queue.py"),
        ] {
            assert!(blocks(f, file), "{f}");
        }
        // The C library's own names, as a native leaf of a Python thread reads them.
        for f in [
            "__GI___poll",
            "___pthread_cond_timedwait64",
            "__pthread_cond_wait",
            "__lll_lock_wait",
            "__futex_abstimed_wait_common64",
            "__clock_nanosleep_time64",
            "pthread_cond_wait@@GLIBC_2.3.2",
            "__libc_wait4",
            "epoll_pwait2",
        ] {
            assert!(blocks(f, "libc.so.6"), "{f}");
        }
        assert!(!blocks("__memmove_avx_unaligned_erms", "libc.so.6"));
        assert!(!blocks("__libc_malloc", "libc.so.6"));
        assert_eq!(
            cuda("cudaMemsetAsync", "libcudart.so.12"),
            Some(HostCause::Copying)
        );
        assert!(!blocks("build_tree", "tree.py"));
        assert!(!blocks("dict.get", "app.py"));
        assert!(!blocks("cudaStreamWaitEvent", "libcudart.so"));
    }

    #[test]
    fn nested_calls_take_the_outer_ones_cause_and_other_calls_none() {
        let call = |name: &str, s, e, tid| ApiCall {
            name: name.into(),
            start_ns: s,
            end_ns: e,
            pid: 1,
            tid,
            ..Default::default()
        };
        let calls = [
            call("cudaMemcpyAsync", 10, 50, 1),
            call("cuStreamSynchronize", 20, 40, 1),
            call("cudaMalloc", 60, 70, 1),
            call("cudaLaunchKernel", 80, 90, 1),
            call("cudaLaunchKernel", 0, 100, 2),
        ];
        let a = ApiCauses::build(&calls, 1, |pid, tid| (pid == 1 && tid == 1).then_some(0));
        assert_eq!(a.at(0, 30).map(|(c, _)| c), Some(HostCause::Copying));
        assert_eq!(a.at(0, 30).map(|(_, n)| a.name(n)), Some("cudaMemcpyAsync"));
        assert_eq!(a.at(0, 50), None);
        assert_eq!(a.at(0, 65), None);
        assert_eq!(a.at(0, 85).map(|(c, _)| c), Some(HostCause::Launching));
        assert_eq!(a.at(0, 5), None);
        assert_eq!(a.at(3, 85), None);
    }

    #[test]
    fn shares_and_unsampled_add_up_to_one() {
        let mut acc = CauseAcc::default();
        for _ in 0..6 {
            acc.add(HostCause::Computing, NameKey::Function(0));
        }
        acc.add(HostCause::Computing, NameKey::Unnamed);
        acc.add(HostCause::WaitingOnThread, NameKey::FunctionIn(1, 0));
        let c = acc.finish(10.0, &|k| format!("{k:?}"));
        let sum: f64 = c.causes.iter().map(|c| c.share).sum::<f64>() + c.unsampled;
        assert!((sum - 1.0).abs() < 1e-9);
        assert!((c.causes[0].share - 0.7).abs() < 1e-9);
        assert_eq!(
            c.causes[0].top.len(),
            1,
            "unnamed samples count but are not named"
        );
        assert!((c.unsampled - 0.2).abs() < 1e-9);
        // More samples than expected: never a negative unsampled share.
        let mut acc = CauseAcc::default();
        acc.add(HostCause::Launching, NameKey::Api(0));
        let c = acc.finish(0.5, &|_| String::new());
        assert_eq!(c.unsampled, 0.0);
        assert_eq!(c.causes[3].share, 1.0);
        assert!(c.from_api_calls);
    }
}
