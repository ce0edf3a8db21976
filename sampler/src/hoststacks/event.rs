//! The capture-table events host stacks write (listed in `docs/trace-format.md`).

/// One per process whose stacks were read: count = samples written; detail = the
/// interpreter (or `native (perf task-clock)`), threads, samples and missed.
pub const PROCESS: &str = "host_stacks";
/// One per process that missed samples: count = samples missed.
pub const MISSED: &str = "host_samples_missed";
/// One per process that runs Python but could not be read: detail = why and the fix.
pub const UNAVAILABLE: &str = "host_stacks_unavailable";
/// One per recording (pid 0): count = processes of the program that run no Python and
/// whose native frames could not be read either (they got no stacks at all).
pub const NOT_PYTHON: &str = "host_stacks_not_python";

/// What [`NOT_PYTHON`]'s detail says when their native frames were tried and refused
/// (followed by why).
pub const NATIVE_REFUSED: &str = "native frames could not be read";

/// The manifest's `extra` key that says how host stacks were sampled, or why not.
pub const MANIFEST_KEY: &str = "host_stacks";

/// Whether a capture-table event is one of these.
pub fn is_host_event(name: &str) -> bool {
    [PROCESS, MISSED, UNAVAILABLE, NOT_PYTHON].contains(&name)
}
