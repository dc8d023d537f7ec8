//! Fuzz target `verify`: arbitrary bytes as a chain file through the verifier walk.
//!
//! Properties checked on every input, once unpinned (`trust: None`) and once with a pin
//! nothing satisfies (`trust: Some(vec![])`), each with `threads: 1`:
//! - `verify` never panics and never returns an I/O error (the input is a byte slice).
//! - Determinism: two runs on the same bytes give equal `Report`s.
//! - `to_json()` parses with `aegis_record::json::parse`, is already canonical, and its
//!   `verdict`/`headline` members agree with the `Report`.
//! - `to_text()` is one line per entry (headline, keys, coverage, calls in flight), ends
//!   with '\n', and contains no control character other than those newlines and no
//!   Unicode bidi control: text taken from the file must come out escaped.
//! - Verdict labels match the options: unpinned never says "pinned", and the empty pin
//!   never yields Verified.
#![no_main]
#![forbid(unsafe_code)]

use aegis_record::json::{self, Value};
use aegis_record::verify::{Options, Report, Trust, TrustAnchor, Verdict, verify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let unpinned = run(data, None);
    if let Verdict::Verified(t) = unpinned.verdict() {
        assert_eq!(*t, Trust::Unpinned, "unpinned walk labelled {t:?}");
    }

    let pinned_to_nothing = run(data, Some(Vec::new()));
    assert!(
        !matches!(pinned_to_nothing.verdict(), Verdict::Verified(_)),
        "an empty trust slice was satisfied: {:?}",
        pinned_to_nothing.verdict()
    );
});

fn run(data: &[u8], trust: Option<Vec<TrustAnchor>>) -> Report {
    let options = Options {
        trust,
        threads: 1,
        approvers: None,
    };
    let first = verify(data, &options).expect("reading a byte slice cannot fail");
    let second = verify(data, &options).expect("reading a byte slice cannot fail");
    assert_eq!(first, second, "same bytes, different reports");
    check_text(&first);
    check_json(&first);
    first
}

/// Unicode bidi controls (the "Trojan Source" set). They are format characters, not
/// `char::is_control`, but a report that echoes them can be made to read differently
/// from what it says.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

fn check_text(report: &Report) {
    let text = report.to_text();
    for c in text.chars() {
        assert!(
            c == '\n' || !(c.is_control() || is_bidi_control(c)),
            "to_text() contains raw U+{:04X}: {text:?}",
            u32::from(c)
        );
    }
    assert!(
        text.ends_with('\n'),
        "to_text() does not end with a newline: {text:?}"
    );
    let expected = 1
        + report.keys().len()
        + report.published_test_keys().len()
        + usize::from(report.coverage().is_some())
        + report.in_flight().len()
        + usize::from(report.in_flight_unlisted() > 0)
        + report.unfinished().len()
        + usize::from(report.unfinished_unlisted() > 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        expected,
        "to_text() has {} lines for {expected} entries: {text:?}",
        lines.len()
    );
    assert_eq!(
        lines[0],
        report.headline(),
        "first line is not the headline"
    );
}

fn check_json(report: &Report) {
    let bytes = report.to_json();
    let value = json::parse(&bytes).unwrap_or_else(|e| {
        panic!(
            "to_json() does not parse ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    assert_eq!(value.to_canonical(), bytes, "to_json() is not canonical");
    let Value::Object(obj) = &value else {
        panic!("to_json() is not an object");
    };
    let verdict = obj.get("verdict").and_then(Value::as_str);
    let expected = match report.verdict() {
        Verdict::Verified(_) => "verified",
        Verdict::Indeterminate(_) => "indeterminate",
        Verdict::Tampered(_) => "tampered",
    };
    assert_eq!(verdict, Some(expected), "to_json() verdict disagrees");
    assert_eq!(
        obj.get("headline").and_then(Value::as_str),
        Some(report.headline().as_str()),
        "to_json() headline disagrees"
    );
}
