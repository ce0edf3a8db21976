//! Text that came from a recording, made safe for a terminal.
//!
//! A profiled program names its NVTX ranges and its command line; capture keeps every byte, so a
//! name may hold `ESC[2J`, an OSC title sequence, a BEL or a carriage return, and be megabytes
//! long. Every text output of cufall (`info`, `report`, `diff`, the terminal view) passes such
//! text through [`escape`] (control characters become visible escapes such as `\e`, `\r`,
//! `\u{7}`) and, where it sits in a column, [`fit`] (cut to a number of terminal columns, wide
//! characters counted as two). `--json` and exports keep the text as recorded.
#![forbid(unsafe_code)]

use std::borrow::Cow;
use unicode_width::UnicodeWidthChar;

/// The widest a name from a recording is shown in a text table or list, in columns. Longer
/// names end in `…` there; `--json` has them whole.
pub const NAME_WIDTH: usize = 80;

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

/// `s` with every control character (C0, DEL, C1) written as a visible escape, so that printing
/// it cannot move the cursor, clear the screen, set the title or ring the bell. A backslash is
/// left alone: the escapes are for reading, not for parsing back.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A text of several lines with every control character but the line ends escaped: the last
/// step of a text output, after whatever was built into it.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() && c != '\n' {
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
    if c.is_control() {
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
        if c.is_control() {
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
            prop_assert!(!f.chars().any(char::is_control));
            prop_assert!(width(&f) <= max);
            if width(&escape(&s)) <= max {
                prop_assert_eq!(f, escape(&s));
            }
        }
    }
}
