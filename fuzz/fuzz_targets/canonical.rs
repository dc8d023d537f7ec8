//! Fuzz target `canonical`: arbitrary bytes through the strict JSON parser.
//!
//! Properties:
//! - `json::parse` never panics, whatever the bytes.
//! - When it accepts, the canonical form is UTF-8, parses again, and parses to a value
//!   equal to the first one (canonicalization loses nothing).
//! - Canonicalizing is idempotent: the re-parsed value's canonical bytes are identical.
#![no_main]
#![forbid(unsafe_code)]

use aegis_record::json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = json::parse(data) else {
        return;
    };
    let canonical = value.to_canonical();
    assert!(
        std::str::from_utf8(&canonical).is_ok(),
        "canonical form is not UTF-8: {canonical:?}"
    );
    let again = json::parse(&canonical).unwrap_or_else(|e| {
        panic!(
            "canonical form does not parse ({e}): {:?}",
            String::from_utf8_lossy(&canonical)
        )
    });
    assert_eq!(value, again, "canonical form parses to a different value");
    let twice = again.to_canonical();
    assert_eq!(canonical, twice, "canonicalizing is not idempotent");
});
