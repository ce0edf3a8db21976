//! The modules of `gui/src` import one another one way (ARCHITECTURE.md's `cufall-gui` row):
//! data structures ← `model` ← the loader ← `view` ← the views ← `app`, with no circle among
//! the files. This test reads the paths each file names (`use crate::…`, `use super::…`, a
//! child module's `use child::…`, and `crate::…` paths inside code) and fails on a circle,
//! naming it, so that one cannot come back unnoticed.
//!
//! A file is a node: `timeline/mod.rs` is `timeline`, `timeline/rows.rs` is `timeline::rows`.
//! A path names the deepest module that is a file (`crate::timeline::rows::Row` is
//! `timeline::rows`; `crate::view::Input` is `view`). Comments and the tests inside a file (from
//! its `#[cfg(test)]` on) are left out: a doc link or a test's `use super::*` is no import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`, as (module path, file).
fn modules(dir: &Path, prefix: &[String], out: &mut Vec<(Vec<String>, PathBuf)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read gui/src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 name")
            .to_string();
        if p.is_dir() {
            let mut next = prefix.to_vec();
            next.push(stem);
            modules(&p, &next, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let mut m = prefix.to_vec();
            if stem != "mod" && stem != "lib" {
                m.push(stem);
            }
            out.push((m, p));
        }
    }
}

/// The code of a file that counts: before its tests, without comments.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        out.push_str(line.split(" //").next().unwrap_or(line));
        out.push('\n');
    }
    out
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

/// The code cut into path-like words (letters, digits, `_`, `::`, braces and commas), with the
/// spaces and line breaks inside a `use` tree's braces removed so that a tree is one word.
fn words(code: &str) -> Vec<String> {
    let mut joined = String::new();
    let mut depth = 0usize;
    for c in code.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > 0 && c.is_whitespace() {
            continue;
        }
        joined.push(c);
    }
    joined
        .split(|c: char| !(c.is_alphanumeric() || "_:{},".contains(c)))
        .filter(|w| w.contains("::"))
        .map(str::to_string)
        .collect()
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

/// The graph of `gui/src`: for each module, the modules it names.
fn graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    modules(root, &[], &mut files);
    let known: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g = Graph::new();
    for (m, path) in &files {
        let text = std::fs::read_to_string(path).expect("read a source file");
        let children: BTreeSet<String> = known
            .iter()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .filter_map(|k| k.last().cloned())
            .collect();
        let edges = g.entry(name(m)).or_default();
        for p in named_paths(&code(&text), m, &children) {
            // The deepest module along the path that is a file (the root always is).
            let target = (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|q| known.contains(q));
            if let Some(t) = target
                && &t != m
            {
                edges.insert(name(&t));
            }
        }
    }
    g
}

/// A circle in the graph, if there is one, as the modules along it.
fn find_circle(g: &Graph) -> Option<Vec<String>> {
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

fn gui_src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn gui_modules_import_one_another_one_way() {
    let g = graph(&gui_src());
    if let Some(c) = find_circle(&g) {
        panic!("gui/src imports in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_graph_sees_the_imports_it_should() {
    // The reading is checked on edges known to exist, so the test above cannot pass by
    // reading nothing.
    let g = graph(&gui_src());
    let has = |a: &str, b: &str| g.get(a).is_some_and(|s| s.contains(b));
    assert!(has("app", "timeline"), "{g:#?}");
    assert!(has("app", "panel"));
    assert!(has("panel", "view"));
    assert!(has("timeline", "timeline::tracks"));
    assert!(has("timeline::tracks", "timeline::geom"));
    assert!(has("timeline::rows", "timeline::layout"));
    assert!(has("data", "model"));
    assert!(!has("panel", "app") && !has("timeline", "app"));
}

#[test]
fn a_circle_is_found_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n");
    write(
        "a.rs",
        "use crate::b::Thing;\n// crate::c::Doc is a comment\n",
    );
    write("b.rs", "pub struct Thing;\nfn f() { crate::c::go(); }\n");
    write("c/mod.rs", "mod inner;\nuse inner::X;\n");
    write(
        "c/inner.rs",
        "use super::super::{\n    a::Y,\n    d::{E, F},\n};\n#[cfg(test)]\nmod tests { use crate::b::*; }\n",
    );
    write("d.rs", "pub struct E;\n");
    let g = graph(dir.path());
    assert!(g["a"].contains("b") && !g["a"].contains("c"), "{g:#?}");
    assert!(g["c"].contains("c::inner"));
    assert!(
        g["c::inner"] == ["a".to_string(), "d".to_string()].into(),
        "{g:#?}"
    );
    let c = find_circle(&g).expect("a -> b -> c -> c::inner -> a");
    assert_eq!(c, ["a", "b", "c", "c::inner", "a"]);
    // Without the import back to `a`, no circle.
    write("c/inner.rs", "use super::super::d::E;\n");
    assert_eq!(find_circle(&graph(dir.path())), None);
}
