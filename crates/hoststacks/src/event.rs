//! The words host stacks leave in a trace besides their capture-table events (those are
//! `cufall_model::CaptureEventKind`'s `HostStacks*`, listed in `docs/trace-format.md`).

/// What the `host_stacks_not_python` row's detail says when their native frames were tried
/// and refused (followed by why).
pub const NATIVE_REFUSED: &str = "native frames could not be read";

/// The manifest's `extra` key that says in words how host stacks were sampled, or why not.
pub const MANIFEST_KEY: &str = cufall_model::HostStacksMeta::EXTRA_KEY;
