//! Text that came from a recording, made safe for a terminal.
//!
//! A profiled program names its NVTX ranges and its command line; capture keeps every byte, so a
//! name may hold `ESC[2J`, an OSC title sequence, a BEL or a carriage return, a right-to-left
//! override (U+202E, which makes a terminal show the rest of the line backwards), and be megabytes
//! long. Every text output of cufall (`info`, `report`, `diff`, `export`'s lines, the terminal
//! view) passes such text through [`escape`] (control characters and bidirectional formatting
//! characters become visible escapes such as `\e`, `\r`, `\u{7}`, `\u{202e}`) and, where it sits in a column, [`fit`] (cut to a number of terminal columns, wide
//! characters counted as two). `--json` and exports keep the text as recorded.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use unicode_width::UnicodeWidthChar;

/// The widest a name from a recording is shown in a text table or list, in columns. Longer
/// names end in `…` there; `--json` has them whole.
pub const NAME_WIDTH: usize = 80;

/// Whether `c` is written as an escape: a control character (C0, DEL, C1), or a bidirectional
/// formatting character (the embeddings, overrides and isolates U+202A–U+202E, U+2066–U+2069, and
/// the marks U+200E, U+200F, U+061C), which reorders what a terminal shows after it ("Trojan
/// Source", CVE-2021-42574).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}'
        )
}

/// How control character `c` is written instead.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x1b' => out.push_str("\\e"),
        c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
    }
}

/// `s` with every control character (C0, DEL, C1) and bidirectional formatting character written
/// as a visible escape, so that printing it cannot move the cursor, clear the screen, set the
/// title, ring the bell or show what follows in another order. A backslash is
/// left alone: the escapes are for reading, not for parsing back.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A text of several lines with every control and bidirectional formatting character but the
/// line ends escaped: the last
/// step of a text output, after whatever was built into it.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| hidden(c) && c != '\n') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if hidden(c) && c != '\n' {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Columns `c` takes on a terminal once escaped: 2 for wide characters (CJK, most emoji), 0 for
/// combining marks, the length of its escape for a control character.
fn char_width(c: char) -> usize {
    if hidden(c) {
        let mut s = String::new();
        push_escaped(&mut s, c);
        s.len()
    } else {
        c.width().unwrap_or(0)
    }
}

/// Columns `s` takes on a terminal once [`escape`]d (the same for `s` and `escape(s)`).
pub fn width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// `s` escaped and cut to at most `max` columns; a cut string ends in `…` (which counts in
/// `max`). A wide character that would straddle the limit is left out whole.
pub fn fit(s: &str, max: usize) -> Cow<'_, str> {
    if width(s) <= max {
        return escape(s);
    }
    let room = max.saturating_sub(1);
    let mut out = String::new();
    let mut used = 0;
    // Cut on the recorded characters, so that an escape is never cut in half.
    for c in s.chars() {
        let w = char_width(c);
        if used + w > room {
            break;
        }
        used += w;
        if hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    if max > 0 {
        out.push('…');
    }
    Cow::Owned(out)
}

/// A name from a recording as text output shows it: escaped, at most [`NAME_WIDTH`] columns.
pub fn name(s: &str) -> Cow<'_, str> {
    fit(s, NAME_WIDTH)
}

/// `s` followed by spaces up to `w` columns (nothing added when it is as wide already).
pub fn pad_right(s: &str, w: usize) -> String {
    let mut out = s.to_string();
    out.push_str(&" ".repeat(w.saturating_sub(width(s))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn control_characters_become_visible() {
        assert_eq!(escape("plain name"), "plain name");
        assert_eq!(escape("\x1b[2Jwipe"), "\\e[2Jwipe");
        assert_eq!(escape("\x1b]0;title\x07x"), "\\e]0;title\\u{7}x");
        assert_eq!(
            escape("a\rb\nc\td\u{9b}e\x7f"),
            "a\\rb\\nc\\td\\u{9b}e\\u{7f}"
        );
        assert_eq!(escape_lines("one\x07\ntwo\r\n"), "one\\u{7}\ntwo\\r\n");
    }

    #[test]
    fn bidirectional_overrides_and_isolates_become_visible() {
        assert_eq!(escape("prefill\u{202e}lladerp"), "prefill\\u{202e}lladerp");
        for c in [
            '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}', '\u{2066}', '\u{2069}',
        ] {
            assert_eq!(escape(&c.to_string()), format!("\\u{{{:x}}}", u32::from(c)));
        }
        assert_eq!(
            escape("\u{200f}\u{200e}\u{61c}"),
            "\\u{200f}\\u{200e}\\u{61c}"
        );
        assert_eq!(escape_lines("a\u{2067}b\n"), "a\\u{2067}b\n");
        assert_eq!(fit("ab\u{202e}cd", 20), "ab\\u{202e}cd");
        assert_eq!(width("\u{202e}"), 8);
        // Arabic and Hebrew text itself is left as it is.
        assert_eq!(escape("שלום مرحبا"), "שלום مرحبا");
    }

    #[test]
    fn width_counts_columns_not_characters() {
        assert_eq!(width("abc"), 3);
        assert_eq!(width("解码"), 4);
        assert_eq!(width("🚀"), 2);
        assert_eq!(width("e\u{301}"), 1);
        assert_eq!(width("\x1b"), 2);
    }

    #[test]
    fn long_and_wide_names_are_cut_to_the_width() {
        assert_eq!(fit("prefill", 10), "prefill");
        assert_eq!(fit("abcdefghijk", 5), "abcd…");
        // A wide character never straddles the edge.
        assert_eq!(fit("解码解码", 6), "解码…");
        assert_eq!(width(&fit("解码解码", 6)), 5);
        assert_eq!(fit("\x1b\x1b\x1b", 4), "\\e…");
        assert_eq!(pad_right("解码", 6), "解码  ");
    }

    proptest! {
        #[test]
        fn fitted_text_has_no_control_characters_and_fits(s in any::<String>(), max in 1usize..40) {
            let f = fit(&s, max);
            prop_assert!(!f.chars().any(hidden));
            prop_assert!(width(&f) <= max);
            if width(&escape(&s)) <= max {
                prop_assert_eq!(f, escape(&s));
            }
        }
    }
}

#[cfg(test)]
mod imports {
    /// No circle among the crate's modules (docs/ARCHITECTURE.md).
    #[test]
    fn modules_import_one_another_one_way() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        cufall_testkit::imports::assert_one_way("cufall-text (lib.rs)", &src.join("lib.rs"));
    }
}
