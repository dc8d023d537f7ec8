//! Fuzz target `policy_yaml`: arbitrary UTF-8 text as a version-1 policy file.
//!
//! Inputs that are not UTF-8 or are longer than 16 KiB are skipped (the cap keeps YAML
//! alias bombs and very long documents from taking over the campaign).
//!
//! Properties:
//! - `PolicySet::parse` never panics, whatever the text.
//! - An error's `Display` is one line (no '\n') and starts with the file name,
//!   `f.yaml:`. Parsing the same text again gives an equal error.
//! - On success, parsing the same text again gives an equal set with an equal `hash()`
//!   (determinism).
//! - `PolicyEngine::new(set).decide(..)` does not panic for a few fixed
//!   tool/capability/role triples (including empty strings) and for the first rule's own
//!   axes, so that at least one rule matches when the set has any.
#![no_main]
#![forbid(unsafe_code)]

use aegis_policy_yaml::{PolicyEngine, PolicySet};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "f.yaml";
const MAX_LEN: usize = 16 * 1024;

const TRIPLES: &[(&str, &str, &str)] = &[
    ("t", "c", "r"),
    ("", "", ""),
    ("t", "", ""),
    ("", "c", ""),
    ("", "", "r"),
    ("*", "*", "*"),
];

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_LEN {
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = PolicySet::parse(text, FILE);
    let second = PolicySet::parse(text, FILE);
    match (first, second) {
        (Err(e), again) => {
            let shown = e.to_string();
            assert!(
                !shown.contains('\n'),
                "error message spans more than one line: {shown:?}"
            );
            assert!(
                shown.starts_with("f.yaml:"),
                "error message does not start with the file name: {shown:?}"
            );
            assert_eq!(Err(e), again, "same text, different parse results");
        }
        (Ok(set), again) => {
            let again = again.unwrap_or_else(|e| panic!("parsed once, then failed: {e}"));
            assert_eq!(set.hash(), again.hash(), "same text, different hashes");
            assert_eq!(set, again, "same text, different sets");

            let own = set.rules().first().map(|r| {
                (
                    r.tool.clone().unwrap_or_default(),
                    r.capability.clone().unwrap_or_default(),
                    r.role.clone().unwrap_or_default(),
                )
            });
            let engine = PolicyEngine::new(set);
            for &(tool, capability, role) in TRIPLES {
                let _ = engine.decide(tool, capability, role);
            }
            if let Some((tool, capability, role)) = own {
                // Twice, so a rate_limit rule also takes the bucket path a second time.
                let _ = engine.decide(&tool, &capability, &role);
                let _ = engine.decide(&tool, &capability, &role);
            }
        }
    }
});
