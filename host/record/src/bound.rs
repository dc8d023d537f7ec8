//! Bounds on what one member of a line may carry, measured after canonical escaping.
//!
//! Much of a line's text is not the host's own: a trap message or a tool's error is the
//! guest's words, a tool id, role or session is the caller's, a reason may quote a
//! policy file. Escaping can grow text sixfold (a U+0001 is written `\u0001`), so a
//! message that fits a tool's output ceiling can still make a line longer than a
//! verifier reads, and an honest session would then verify as Tampered. Every line
//! body in [`crate::line`] therefore passes its free text and its lists through this
//! module when it is serialized, and the chain writer refuses any line that would still
//! be outside what the verifier reads ([`crate::chain::Session`]).
//!
//! # Guarantees
//! - A string member is at most [`MAX_TEXT_BYTES`] bytes between its quotes, in
//!   canonical form. Longer text is cut at a character boundary (never inside a
//!   multi-byte character or an escape) and ends with a visible marker that names the
//!   full text's length in UTF-8 bytes and its SHA-256: `...[truncated: N bytes,
//!   sha256 <64 hex>]`. Anyone holding the full text can check it against the marker.
//! - Bounding is idempotent: text already within the bound is written unchanged, so an
//!   intent and its outcome (or a line read back and written again) carry the same
//!   `call_id`.
//! - A list member is at most [`MAX_LIST_BYTES`] bytes in canonical form. A longer list
//!   keeps its longest prefix that fits, and the enclosing object gains a sibling
//!   `<member>_elided` object: `{"dropped": <entries cut>, "sha256": <digest of the
//!   canonical JSON of the whole list as it would have been written>}`.
//! - With these bounds no line body this crate defines exceeds [`MAX_BODY_BYTES`]
//!   (checked by a test that fills every member to its bound at once), comfortably
//!   under the verifier's [`crate::verify::MAX_LINE_BYTES`].
//!
//! # Non-guarantees
//! - The marker is ordinary text: a guest can write one into its own message. Only the
//!   digest, checked against text held elsewhere, says what was cut.
//! - The typed line in memory keeps the full text; only its serialized form is bounded.
//!
//! # Limits
//! - [`MAX_TEXT_BYTES`] (4 KiB) per string, [`MAX_LIST_BYTES`] (32 KiB) per list.

use crate::digest::{encode_hex, sha256};
use crate::json::{Object, SafeInt, Value};
use std::borrow::Cow;

/// The most bytes a string member occupies between its quotes, after escaping.
pub const MAX_TEXT_BYTES: usize = 4096;

/// The most bytes a list member occupies in canonical form, brackets included.
pub const MAX_LIST_BYTES: usize = 32 * 1024;

/// An upper bound on any bounded line body plus the chain members, in canonical form:
/// a quarter of the verifier's line limit, so the bound holds with a wide margin.
pub const MAX_BODY_BYTES: usize = crate::verify::MAX_LINE_BYTES / 4;

/// Bytes `b` takes in a canonical JSON string (RFC 8785 escapes, `json::write_string`).
fn escaped_byte_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

/// Bytes `s` takes between its quotes in canonical form.
pub fn escaped_len(s: &str) -> usize {
    s.bytes().map(escaped_byte_len).sum()
}

/// `s` bounded to [`MAX_TEXT_BYTES`] escaped bytes: unchanged when it fits, otherwise a
/// prefix cut at a character boundary followed by the truncation marker.
pub fn text(s: &str) -> Cow<'_, str> {
    if escaped_len(s) <= MAX_TEXT_BYTES {
        return Cow::Borrowed(s);
    }
    // ASCII without characters that escape, so its length is its escaped length.
    let marker = format!(
        "...[truncated: {} bytes, sha256 {}]",
        s.len(),
        encode_hex(&sha256(s.as_bytes()))
    );
    let budget = MAX_TEXT_BYTES - marker.len();
    let mut used = 0;
    let mut cut = 0;
    for (i, c) in s.char_indices() {
        let mut utf8 = [0u8; 4];
        let w: usize = c.encode_utf8(&mut utf8).bytes().map(escaped_byte_len).sum();
        if used + w > budget {
            break;
        }
        used += w;
        cut = i + c.len_utf8();
    }
    let mut out = String::with_capacity(cut + marker.len());
    out.push_str(&s[..cut]);
    out.push_str(&marker);
    Cow::Owned(out)
}

/// A bounded string as a value.
pub(crate) fn text_value(s: &str) -> Value {
    Value::String(text(s).into_owned())
}

/// Bounded strings as a list of values (each bounded; the list is bounded on insert).
pub(crate) fn text_values(items: &[String]) -> Vec<Value> {
    items.iter().map(|s| text_value(s)).collect()
}

/// Inserts `items` under `key`, bounded to [`MAX_LIST_BYTES`]; when entries are cut,
/// also inserts `<key>_elided` naming how many and the digest of the whole list.
pub(crate) fn insert_list(obj: &mut Object, key: &str, items: Vec<Value>) {
    let sizes: Vec<usize> = items.iter().map(|v| v.to_canonical().len()).collect();
    // Brackets, plus a comma between entries.
    let total = 2 + sizes.iter().sum::<usize>() + sizes.len().saturating_sub(1);
    if total <= MAX_LIST_BYTES {
        obj.insert(key, Value::Array(items));
        return;
    }
    let digest = encode_hex(&sha256(&Value::Array(items.clone()).to_canonical()));
    let mut used = 2;
    let mut keep = 0;
    for (i, size) in sizes.iter().enumerate() {
        let add = size + usize::from(i > 0);
        if used + add > MAX_LIST_BYTES {
            break;
        }
        used += add;
        keep = i + 1;
    }
    let dropped = items.len() - keep;
    let mut kept = items;
    kept.truncate(keep);
    obj.insert(key, Value::Array(kept));
    let mut elided = Object::new();
    // A list longer than 2^53 entries cannot be held in memory.
    elided.insert(
        "dropped",
        SafeInt::new(dropped as u64).unwrap_or(SafeInt::ZERO),
    );
    elided.insert("sha256", digest);
    obj.insert(format!("{key}_elided"), elided);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json;

    fn canonical_inner_len(s: &str) -> usize {
        let mut out = Vec::new();
        json::write_string(s, &mut out);
        out.len() - 2
    }

    #[test]
    fn escaped_len_matches_the_writer() {
        let all: String = (0u8..=0x7f).map(char::from).collect::<String>() + "é😀\u{2028}";
        assert_eq!(escaped_len(&all), canonical_inner_len(&all));
    }

    /// The reported failure: 200,000 U+0001 characters fit a 1 MiB output ceiling but
    /// escape to 1.2 MB.
    #[test]
    fn regression_control_characters_are_bounded_after_escaping() {
        let s = "\u{1}".repeat(200_000);
        let b = text(&s);
        assert!(canonical_inner_len(&b) <= MAX_TEXT_BYTES);
        assert!(b.ends_with(&format!(
            "...[truncated: 200000 bytes, sha256 {}]",
            encode_hex(&sha256(s.as_bytes()))
        )));
        assert!(b.starts_with("\u{1}\u{1}"));
    }

    #[test]
    fn text_within_the_bound_is_unchanged_and_bounding_is_idempotent() {
        let fits = "x".repeat(MAX_TEXT_BYTES);
        assert!(matches!(text(&fits), Cow::Borrowed(_)));
        let over = "\"".repeat(MAX_TEXT_BYTES);
        let once = text(&over).into_owned();
        assert_eq!(text(&once), once.as_str());
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        for pad in 0..4 {
            let s = "a".repeat(pad) + &"😀".repeat(MAX_TEXT_BYTES);
            let b = text(&s);
            let (kept, _) = b.split_once("...[truncated").unwrap();
            assert!(kept[pad..].chars().all(|c| c == '😀'));
            assert!(canonical_inner_len(&b) <= MAX_TEXT_BYTES);
        }
    }

    #[test]
    fn long_lists_keep_a_prefix_and_name_what_was_cut() {
        let items: Vec<String> = (0..100_000).map(|i| format!("/p/{i}")).collect();
        let mut o = Object::new();
        insert_list(&mut o, "read_paths", text_values(&items));
        let kept = o.get("read_paths").unwrap().to_canonical();
        assert!(kept.len() <= MAX_LIST_BYTES);
        let elided = o.get("read_paths_elided").unwrap().as_object().unwrap();
        let n = o.get("read_paths").unwrap().as_array().unwrap().len();
        assert_eq!(
            elided.get("dropped").unwrap().as_int(),
            Some(100_000 - n as u64)
        );
        let full = Value::Array(text_values(&items)).to_canonical();
        assert_eq!(
            elided.get("sha256").unwrap().as_str(),
            Some(encode_hex(&sha256(&full)).as_str())
        );
        let mut small = Object::new();
        insert_list(&mut small, "read_paths", text_values(&items[..3]));
        assert!(small.get("read_paths_elided").is_none());
    }
}
