//! Every `cufall` command line shown in the README and `docs/` is one the command line accepts:
//! each is run (in a scratch folder holding a copy of `examples/`, with no program on PATH and no
//! display), and none may end with a usage error (exit code 2), unless the docs show that error
//! right below it. Commands that need a GPU fail here for that reason (exit code 1), which is
//! fine: this test is about the docs naming flags and values that exist.

use cufall_testkit::examples::copy_dir;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files whose commands a user copies.
fn doc_files() -> Vec<PathBuf> {
    let r = root();
    let mut out = vec![r.join("README.md"), r.join("examples/README.md")];
    for dir in ["docs", "crates", "."] {
        let Ok(entries) = std::fs::read_dir(r.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if dir == "docs" && p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            } else if dir != "docs" && p.join("README.md").is_file() {
                out.push(p.join("README.md"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A documented command: the file and line it is on, its arguments, and whether the lines shown
/// below it (in the same code block) are an error message.
struct DocCommand {
    at: String,
    args: Vec<String>,
    shows_error: bool,
}

/// The part of a shell line that is one `cufall` invocation: up to a pipe, `&&`, `;` or a
/// comment.
fn invocation(line: &str) -> &str {
    let mut end = line.len();
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '|' | ';' | '&' | '>') => {
                end = i;
                break;
            }
            (None, '#') if i > 0 && bytes[i - 1] == b' ' => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    line[..end].trim()
}

fn commands_in(path: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(path).expect("read doc");
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut in_block = false;
    // In a block of output (```text), only lines after a `$ ` prompt are commands.
    let mut prompts_only = false;
    let mut i = 0;
    while i < lines.len() {
        let raw = lines[i];
        if let Some(fence) = raw.trim_start().strip_prefix("```") {
            in_block = !in_block;
            prompts_only = in_block && matches!(fence.trim(), "text" | "console" | "output");
            i += 1;
            continue;
        }
        let prompted = raw.trim_start().starts_with("$ ");
        let line = raw.trim().trim_start_matches("$ ");
        let start = i;
        i += 1;
        let is_cufall = line.starts_with("cufall ")
            || line.starts_with("./cufall ")
            || line == "cufall"
            || line == "./cufall";
        if !in_block || !is_cufall || (prompts_only && !prompted) {
            continue;
        }
        // Output that starts with the program's name: a view's title bar (`cufall view X │ …`)
        // or a report's heading (`cufall report: X`).
        let second = line.split_whitespace().nth(1).unwrap_or("");
        if line.contains('│') || second.ends_with(':') {
            continue;
        }
        // Lines continued with a backslash.
        let mut full = line.to_string();
        while full.ends_with('\\') && i < lines.len() {
            full.pop();
            full.push(' ');
            full.push_str(lines[i].trim());
            i += 1;
        }
        let cmd = invocation(&full);
        // Placeholders a user replaces (`[flags]`, `<trace>`, `...`) are not arguments.
        if cmd.contains('[') || cmd.contains('<') || cmd.contains("...") || cmd.contains('…') {
            continue;
        }
        let Some(mut args) = shlex::split(cmd) else {
            continue;
        };
        args.remove(0);
        let below: Vec<&str> = lines[i..]
            .iter()
            .take_while(|l| !l.trim_start().starts_with("```") && !l.trim_start().starts_with("$ "))
            .copied()
            .collect();
        let shows_error = below.iter().any(|l| {
            l.contains("error:")
                || l.contains("Usage:")
                || l.contains("cannot be")
                || l.contains("is not")
        });
        out.push(DocCommand {
            at: format!("{}:{}", path.display(), start + 1),
            args,
            shows_error,
        });
    }
    out
}

/// Runs `cufall ARGS` in `cwd`; returns its exit code (None: killed after the time limit, which
/// means it was accepted and kept running) and stderr.
fn run(cwd: &Path, empty_path: &Path, args: &[String]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cufall"))
        .args(args)
        .current_dir(cwd)
        .env("PATH", empty_path)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("CUFALL_ARGV0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cufall");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return (None, String::new());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_documented_command_line_is_accepted() {
    let scratch = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join("examples"), &scratch.path().join("examples"));
    let empty_path = scratch.path().join("no-programs");
    std::fs::create_dir_all(&empty_path).expect("mkdir");
    let mut checked = 0;
    let mut refused = Vec::new();
    for doc in doc_files() {
        for c in commands_in(&doc) {
            let (code, err) = run(scratch.path(), &empty_path, &c.args);
            checked += 1;
            if code == Some(2) && !c.shows_error {
                refused.push(format!(
                    "{}: cufall {}\n    {}",
                    c.at,
                    c.args.join(" "),
                    err.trim()
                ));
            }
        }
    }
    assert!(checked > 50, "only {checked} commands found in the docs");
    assert!(
        refused.is_empty(),
        "{} of {checked} documented commands are refused by the command line:\n{}",
        refused.len(),
        refused.join("\n")
    );
}
