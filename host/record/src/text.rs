//! Text from a record, or from a tool, made safe to show on a terminal.
//!
//! Records carry strings that a tool, a caller or a wrapped server chose: tool ids,
//! trap messages, reasons. Printed raw, a carriage return could overwrite a verdict
//! line, an escape sequence could hide what follows or drive the terminal, and a
//! bidirectional override could make one text read as another. Everything that prints
//! such text goes through [`escape`] (or [`escape_keeping_lines`] for multi-line
//! output shown to a person).
//!
//! # Guarantees
//! - The result contains no C0 control (U+0000–U+001F), DEL, C1 control
//!   (U+0080–U+009F), bidirectional formatting character (U+061C, U+200E, U+200F,
//!   U+202A–U+202E, U+2066–U+2069) or line/paragraph separator (U+2028, U+2029),
//!   except `\n` and `\t` in [`escape_keeping_lines`].
//! - Each such character becomes `\u{XX}` (its code point in hex), so nothing is lost
//!   and the escaped form is unambiguous about what was there.
//!
//! # Non-guarantees
//! - A backslash is not escaped: a text that already reads `\u{1b}` prints the same as
//!   an escaped ESC. The escaped form is for reading, not for parsing back.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as itself.
fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

fn escape_where(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) && !keep(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` on one line, with every control and formatting character escaped
/// (newlines and tabs included).
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_where(text, |_| false)
}

/// `text` with every control and formatting character escaped except `\n` and `\t`:
/// for multi-line output meant for a person.
pub fn escape_keeping_lines(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c == '\n' || c == '\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        assert!(matches!(escape("call-1 ok: ünïcödé"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_carriage_return_cannot_overwrite_a_line() {
        assert_eq!(escape("bad\raegis: success"), "bad\\u{d}aegis: success");
    }

    #[test]
    fn escape_sequences_and_c1_controls_are_escaped() {
        assert_eq!(escape("\u{1b}[8mhidden"), "\\u{1b}[8mhidden");
        assert_eq!(escape("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(escape("\u{7f}"), "\\u{7f}");
    }

    #[test]
    fn bidi_overrides_and_separators_are_escaped() {
        assert_eq!(
            escape("a\u{202e}b\u{2066}c\u{2028}"),
            "a\\u{202e}b\\u{2066}c\\u{2028}"
        );
    }

    #[test]
    fn newlines_are_kept_only_when_asked() {
        assert_eq!(escape("a\nb\tc"), "a\\u{a}b\\u{9}c");
        assert_eq!(escape_keeping_lines("a\nb\tc\r"), "a\nb\tc\\u{d}");
    }

    #[test]
    fn every_unsafe_char_is_gone_from_the_result() {
        let all: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let escaped = escape(&all);
        assert!(!escaped.chars().any(is_unsafe));
        let kept = escape_keeping_lines(&all);
        assert!(!kept.chars().any(|c| is_unsafe(c) && c != '\n' && c != '\t'));
    }
}
