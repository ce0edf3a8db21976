//! The module graph of a crate, for the test each crate has that its modules import one another
//! one way (no circle among its files), so that one cannot come back unnoticed.
//!
//! A module is a node: reached from the crate's root file through its `mod name;` lines (so a
//! library and a binary in one `src/` are two graphs), `timeline/mod.rs` is `timeline`,
//! `timeline/rows.rs` is `timeline::rows`. An edge is a path a module's code names: `use
//! crate::…`, `use super::…`, a child module's `use child::…`, and `crate::…` paths inside code.
//! A path names the deepest module that is a file (`crate::timeline::rows::Row` is
//! `timeline::rows`; `crate::view::Input` is `view`). Comments and what is compiled for tests
//! only (the item after a `#[cfg(test)]`) are left out: a doc link or a test's `use super::*` is
//! no import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// For each module (by its path, `crate` for the root), the modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Panics, naming the circle, when the modules reached from `root` (a crate's `lib.rs` or
/// `main.rs`) import one another in a circle; `what` names the crate in the message.
pub fn assert_one_way(what: &str, root: &Path) {
    let g = graph(root);
    if let Some(c) = find_circle(&g) {
        panic!(
            "{what} imports in a circle: {} (move what both sides need into a module of its own)",
            c.join(" -> ")
        );
    }
}

/// The graph of the crate whose root file is `root`.
pub fn graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    modules(root, true, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|f| f.path.clone()).collect();
    let mut g = Graph::new();
    for f in &files {
        let edges = g.entry(name(&f.path)).or_default();
        for p in named_paths(&f.code, &f.path, &f.children) {
            // The deepest module along the path that is a file (the root always is).
            let target = (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|q| known.contains(q));
            if let Some(t) = target
                && t != f.path
            {
                edges.insert(name(&t));
            }
        }
    }
    g
}

/// A circle in the graph, if there is one, as the modules along it (the first one again at the
/// end).
pub fn find_circle(g: &Graph) -> Option<Vec<String>> {
    // 0: not seen, 1: on the current path, 2: done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    let mut path: Vec<&str> = Vec::new();
    fn visit<'a>(
        n: &'a str,
        g: &'a Graph,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(n, 1);
        path.push(n);
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|p| *p == m).unwrap_or(0);
                    let mut c: Vec<String> = path[from..].iter().map(|s| s.to_string()).collect();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n, 2);
        None
    }
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, g, &mut state, &mut path)
        {
            return Some(c);
        }
    }
    None
}

/// One module's file: its path, the code that counts, and the child modules it declares.
struct Module {
    path: Vec<String>,
    code: String,
    children: BTreeSet<String>,
}

/// The module in `file` and, through its `mod name;` lines, every module below it.
/// `mod_rs`: the file is a `lib.rs`, `main.rs` or `mod.rs`, whose children lie beside it
/// (others' children lie in a folder of the file's name).
fn modules(file: &Path, mod_rs: bool, path: &[String], out: &mut Vec<Module>) {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
    let code = code(&text);
    let children = declared_modules(&code);
    let dir = match (mod_rs, file.parent()) {
        (true, Some(d)) => d.to_path_buf(),
        (false, Some(d)) => d.join(file.file_stem().unwrap_or_default()),
        (_, None) => PathBuf::new(),
    };
    out.push(Module {
        path: path.to_vec(),
        code,
        children: children.clone(),
    });
    for child in children {
        let mut p = path.to_vec();
        p.push(child.clone());
        let flat = dir.join(format!("{child}.rs"));
        if flat.is_file() {
            modules(&flat, false, &p, out);
        } else {
            modules(&dir.join(&child).join("mod.rs"), true, &p, out);
        }
    }
}

/// The names of `mod name;` lines (any visibility; inline `mod name { … }` is part of the file).
fn declared_modules(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = match l.split_once("mod ") {
                Some((vis, rest)) if vis.is_empty() || vis.starts_with("pub") => rest,
                _ => return None,
            };
            let name = rest.strip_suffix(';')?.trim();
            name.chars()
                .all(|c| c.is_alphanumeric() || c == '_')
                .then(|| name.strip_prefix("r#").unwrap_or(name).to_string())
        })
        .collect()
}

/// The code of a file that counts: without comments, and without each item after a
/// `#[cfg(test)]` (a `mod tests;` line, or everything to the brace that closes the item).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skipping: Option<(usize, bool)> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        let line = line.split(" //").next().unwrap_or(line);
        if skipping.is_some() {
            skipping = skip(skipping, line);
            continue;
        }
        if let Some(item) = t.strip_prefix("#[cfg(test)]") {
            // The item may follow on the same line.
            skipping = skip(Some((0, false)), item);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The state of skipping a test-only item (the brace depth reached, and whether its body has
/// opened) after `line`; `None` once the item has ended.
fn skip(state: Option<(usize, bool)>, line: &str) -> Option<(usize, bool)> {
    let (mut depth, mut opened) = state?;
    for c in line.chars() {
        match c {
            '{' => {
                depth += 1;
                opened = true;
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let done = (opened && depth == 0) || (!opened && line.trim_end().ends_with(';'));
    (!done).then_some((depth, opened))
}

/// The module paths a piece of code names, relative to `here` (a `use` tree's braces are
/// opened: `use super::{geom::Geom, rows::Row}` names `geom` and `rows` under the parent).
fn named_paths(code: &str, here: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for word in words(code) {
        for path in expand(&word) {
            let mut parts = path.split("::").filter(|s| !s.is_empty()).peekable();
            let mut base = match parts.peek().copied() {
                Some("crate") => {
                    parts.next();
                    Vec::new()
                }
                Some("super" | "self") => here.to_vec(),
                Some(first) if children.contains(first) => here.to_vec(),
                _ => continue,
            };
            while let Some(&p) = parts.peek() {
                match p {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                parts.next();
            }
            base.extend(parts.map(str::to_string));
            out.push(base);
        }
    }
    out
}

/// The paths in a piece of code: identifiers joined by `::`, a `use` tree's braces kept as
/// one word without spaces (`a::{b, c::{d, e}}` is `a::{b,c::{d,e}}`).
fn words(code: &str) -> Vec<String> {
    let cs: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let skip_space = |mut i: usize| {
        while i < cs.len() && cs[i].is_whitespace() {
            i += 1;
        }
        i
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < cs.len() {
        if !ident(cs[i]) || (i > 0 && ident(cs[i - 1])) {
            i += 1;
            continue;
        }
        let mut word = String::new();
        loop {
            while i < cs.len() && ident(cs[i]) {
                word.push(cs[i]);
                i += 1;
            }
            let j = skip_space(i);
            if cs.get(j) != Some(&':') || cs.get(j + 1) != Some(&':') {
                break;
            }
            word.push_str("::");
            i = skip_space(j + 2);
            if cs.get(i) == Some(&'{') {
                let mut depth = 0usize;
                while i < cs.len() {
                    let c = cs[i];
                    i += 1;
                    match c {
                        '{' => depth += 1,
                        '}' => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    if !c.is_whitespace() {
                        word.push(c);
                    }
                    if depth == 0 {
                        break;
                    }
                }
                break;
            }
            if !cs.get(i).is_some_and(|&c| ident(c)) {
                break;
            }
        }
        if word.contains("::") {
            out.push(word);
        }
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d` and `a::c::e`; commas outside braces separate
/// words.
fn expand(w: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in split_top(w) {
        match part.split_once('{') {
            Some((head, tail)) => {
                let inner = tail.strip_suffix('}').unwrap_or(tail);
                out.extend(expand(inner).into_iter().map(|t| format!("{head}{t}")));
            }
            None if !part.is_empty() => out.push(part.to_string()),
            None => {}
        }
    }
    out
}

/// `w` cut at the commas outside braces.
fn split_top(w: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (Vec::new(), 0usize, 0);
    for (i, c) in w.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&w[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&w[from..]);
    out
}

/// A module's name in the graph: its path, `crate` for the root.
fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_circle_is_found_and_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        write(
            "lib.rs",
            "pub mod a;\npub(crate) mod b;\nmod c;\n#[cfg(test)]\nmod tests;\nmod d;\n#[cfg(test)] mod t;\nmod f;\n",
        );
        write(
            "a.rs",
            "use crate::b::Thing;\n// crate::c::Doc is a comment\n",
        );
        write(
            "b.rs",
            "pub struct Thing;\nfn f() { return crate::c::go(); }\n",
        );
        write(
            "f.rs",
            "impl X {\n    fn g(&self, r: crate::d::E) -> u8 {\n        0\n    }\n}\n",
        );
        write("c/mod.rs", "mod inner;\nuse inner::X;\n");
        write(
            "c/inner.rs",
            "use super::super::{\n    a::Y,\n    d::{E, F},\n};\n#[cfg(test)]\nmod tests {\n    use crate::b::*;\n}\nfn g() {}\n",
        );
        write("d.rs", "pub struct E;\nmod e;\n");
        write("d/e.rs", "use crate::a::Y;\n");
        // Not declared: not read (a binary's module beside the library, a test module).
        write("tests.rs", "use crate::a::*;\n");
        write("other.rs", "use crate::a::*;\n");
        let lib = dir.path().join("lib.rs");
        let g = graph(&lib);
        assert_eq!(
            g.keys().map(String::as_str).collect::<Vec<_>>(),
            ["a", "b", "c", "c::inner", "crate", "d", "d::e", "f"]
        );
        assert!(g["a"].contains("b") && !g["a"].contains("c"), "{g:#?}");
        assert!(g["c"].contains("c::inner"));
        assert!(
            g["c::inner"] == ["a".to_string(), "d".to_string()].into(),
            "{g:#?}"
        );
        assert!(g["d::e"].contains("a"));
        assert!(g["f"] == ["d".to_string()].into(), "{g:#?}");
        let c = find_circle(&g).expect("a -> b -> c -> c::inner -> a");
        assert_eq!(c, ["a", "b", "c", "c::inner", "a"]);
        let named = std::panic::catch_unwind(|| assert_one_way("the crate", &lib))
            .expect_err("a circle panics");
        let msg = named.downcast_ref::<String>().expect("a message");
        assert!(msg.contains("a -> b -> c -> c::inner -> a"), "{msg}");
        // Without the import back to `a`, no circle.
        write("c/inner.rs", "use super::super::d::E;\n");
        assert_eq!(find_circle(&graph(&lib)), None);
        assert_one_way("the crate", &lib);
    }
}
