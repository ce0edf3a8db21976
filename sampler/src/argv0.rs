//! The command as the user typed it, for the messages and hints that tell them what to run next.

/// The command as the user typed it: the `./cufall` wrapper of a clone passes its own name in
/// `CUFALL_ARGV0`; a path typed to reach the binary is kept; from PATH it is `cufall`.
pub fn command_name() -> String {
    if let Some(v) = std::env::var_os("CUFALL_ARGV0").filter(|v| !v.is_empty()) {
        return v.to_string_lossy().into_owned();
    }
    match std::env::args_os().next() {
        Some(a) if a.to_string_lossy().contains('/') => a.to_string_lossy().into_owned(),
        _ => "cufall".into(),
    }
}
