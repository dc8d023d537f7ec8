//! Attacks on rules over call arguments, found by a review that attacked them; each
//! failed when written and now guards the fix. Each names the claim it broke:
//! (1) `under` compares paths after lexical normalisation, so no spelling of a path
//!     outside the root is under it;
//! (2) an unknown never widens;
//! (3) the index selects what a linear scan selects;
//! (4) what the policy compares is what the MCP server will act on.

use aegis_policy_yaml::PolicyEngine;
use aegis_policy_yaml::PolicySet;
use aegis_policy_yaml::arguments::CallArguments;
use aegis_station_api::{IndexedDecision, Verdict};

/// Verdict and deciding rule id for one call asked over `axes`, plus `arguments_read`.
fn ask(policy: &str, tool: &str, axes: &[&str], args: &str) -> (Vec<Verdict>, Vec<String>, String) {
    let e = PolicyEngine::new(PolicySet::parse(policy, "attack.yaml").unwrap());
    let mut out = [IndexedDecision::default(); 4];
    let a = e
        .decide_call(tool, axes.iter().copied(), "", Some(args), &mut out)
        .unwrap();
    let n = a.answer.answered as usize;
    let verdicts = out[..n].iter().map(|d| d.verdict).collect();
    let rules = out[..n]
        .iter()
        .map(|d| {
            a.answer
                .table
                .rule(d.rule)
                .unwrap_or("<default>")
                .to_owned()
        })
        .collect();
    (verdicts, rules, a.arguments_read.to_string())
}

fn verdict(policy: &str, tool: &str, args: &str) -> Verdict {
    ask(policy, tool, &[""], args).0[0]
}

const ALLOW_UNDER_DATA: &str = r#"version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      path: { under: /data }
"#;

const DENY_UNDER_ETC: &str = r#"version: 1
default: deny
rules:
  - id: read-anything
    action: allow
    tool: read_file
  - id: never-etc
    action: deny
    arguments:
      path: { under: /etc }
"#;

// Claim (1) and (4). `normalise` percent-decodes a `file://` URI and treats everything
// after the scheme as the path, so a `?query` or `#fragment` takes part in `..`
// resolution. Every URI parser a server uses (WHATWG URL / Node `fileURLToPath`,
// Python `urllib.parse.urlparse`, Go `net/url`) drops the query and fragment, so the
// server opens /etc/shadow while the policy compared /data/x.
#[test]
fn attack_file_uri_fragment_or_query_climbs_back_under_the_root() {
    let mut allowed = Vec::new();
    for spoof in [
        r#"{"path":"file:///etc/shadow#/../../data/x"}"#,
        r#"{"path":"file:///etc/shadow?/../../data/x"}"#,
        r#"{"path":"file://localhost/etc/shadow#/../../data/x"}"#,
    ] {
        if verdict(ALLOW_UNDER_DATA, "read_file", spoof) == Verdict::ALLOW {
            allowed.push(spoof);
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed, yet a URI parser reads /etc/shadow: {allowed:#?}"
    );
}

// Claim (1) and (4), the restricting side: the same spelling walks out of a deny's root.
#[test]
fn attack_file_uri_fragment_escapes_a_deny() {
    let spoof = r#"{"path":"file:///etc/shadow#/../../tmp"}"#;
    assert_ne!(
        verdict(DENY_UNDER_ETC, "read_file", spoof),
        Verdict::ALLOW,
        "{spoof}: the server opens /etc/shadow, the deny compared /tmp"
    );
}

// Claim (1) and (4). `file:` is a special scheme for the WHATWG URL parser (Node's
// `new URL` / `url.fileURLToPath`): `\` is a path separator and ASCII tab/newline are
// removed anywhere in the input. So `file:///data/..\..\etc\passwd` and
// `file:///data/.<TAB>./etc/passwd` are /etc/passwd to a Node server, while the policy
// keeps `..\..\etc\passwd` and `.\t.` as single components under /data.
#[test]
fn attack_file_uri_backslash_and_tab_are_separators_to_whatwg() {
    let mut allowed = Vec::new();
    for spoof in [
        r#"{"path":"file:///data/..\\..\\etc\\passwd"}"#,
        r#"{"path":"file:///data/.\t./etc/passwd"}"#,
        r#"{"path":"file:///data/.\n./etc/passwd"}"#,
    ] {
        if verdict(ALLOW_UNDER_DATA, "read_file", spoof) == Verdict::ALLOW {
            allowed.push(spoof);
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed, yet WHATWG URL reads /etc/passwd: {allowed:#?}"
    );
}

// Claim (2) and (4). Go's encoding/json (1.21+) matches a key to a struct field by
// `unicode.ToUpper(unicode.ToLower(r))`, which maps U+0131 `ı` and U+0130 `İ` onto
// ASCII `I`. `fold` here (Rust `to_lowercase`, plus `ſ`) keeps `ı` as `ı` and turns `İ`
// into `i̇` (two chars), so `fıle` is not seen as colliding with `file`. A Go server
// decoding into `struct { File string }` takes the last one: /etc/shadow. (The relay's
// collision check in host/mcp/src/json.rs uses the same fold, so wrap lets it through.)
#[test]
fn attack_go_folds_dotless_i_onto_the_rule_name() {
    let policy = r#"version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      file: { under: /data }
"#;
    let mut allowed = Vec::new();
    for spoof in [
        "{\"file\":\"/data/a\",\"f\u{131}le\":\"/etc/shadow\"}",
        "{\"file\":\"/data/a\",\"f\u{130}le\":\"/etc/shadow\"}",
        "{\"file\":\"/data/a\",\"F\u{130}LE\":\"/etc/shadow\"}",
    ] {
        if verdict(policy, "read_file", spoof) == Verdict::ALLOW {
            allowed.push(spoof);
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed, yet a Go server reads the second key as `file`: {allowed:#?}"
    );
}

// Claim (2) and (4), the restricting side: with only the folded key, the deny sees the
// argument as absent (NoMatch) and the broader allow decides.
#[test]
fn attack_go_folded_key_alone_skips_a_deny() {
    let policy = r#"version: 1
default: deny
rules:
  - id: read-anything
    action: allow
    tool: read_file
  - id: never-etc
    action: deny
    arguments:
      file: { under: /etc }
"#;
    let spoof = "{\"f\u{131}le\":\"/etc/shadow\"}";
    assert_ne!(
        verdict(policy, "read_file", spoof),
        Verdict::ALLOW,
        "{spoof}: a Go server reads it as `file`"
    );
}

// Claim (2). A JSON Pointer through an intermediate value of another type (here the
// object sent as a JSON string, which many MCP servers accept by parsing it) is a
// NoMatch, not an Unknown, so a deny over `/opts/path` does not apply. The module's own
// rule — "another type than the matcher reads: a server may coerce it, so it is not a
// clean miss" — is not applied to the pointer's intermediate steps.
#[test]
fn attack_pointer_through_a_string_is_a_clean_miss() {
    let policy = r#"version: 1
default: deny
rules:
  - id: search-anything
    action: allow
    tool: search
  - id: never-etc
    action: deny
    arguments:
      /opts/path: { under: /etc }
"#;
    let mut allowed = Vec::new();
    for spoof in [
        r#"{"opts":"{\"path\":\"/etc/shadow\"}"}"#,
        r#"{"opts":[{"path":"/etc/shadow"}]}"#,
    ] {
        if verdict(policy, "search", spoof) == Verdict::ALLOW {
            allowed.push(spoof);
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed, yet the pointer's step has another type; unknown should let the deny apply: {allowed:#?}"
    );
}

// Claim (4), gateway path. The station is the last line here: the gateway now refuses a
// body with colliding keys or `__proto__` before it reads it (issue 29), but a station
// must hold on its own for any host that hands it such arguments. A Node
// tool that merges its input into defaults with `Object.assign({}, defaults, input)`
// gets `input.__proto__` as the merged object's prototype, so `opts.path` is
// /etc/shadow, while the policy sees `path` absent and the deny does not apply.
#[test]
fn attack_proto_key_hides_the_argument_from_a_deny() {
    let spoof = r#"{"__proto__":{"path":"/etc/shadow"}}"#;
    assert_ne!(
        verdict(DENY_UNDER_ETC, "read_file", spoof),
        Verdict::ALLOW,
        "{spoof}: a JS server can read `path` through the prototype"
    );
}

// The record (decision_axes.arguments): `CallAnswer::arguments_read` is documented as
// "the argument values the deciding rule compared", but `CallState::read` keeps what an
// earlier axis's rule compared when a later axis is decided by a rule without matchers.
// Here fs.write is refused by `no-writes` (which compares nothing) and the record
// names the path `read-data` compared.
#[test]
fn attack_record_names_arguments_another_rule_compared() {
    let policy = r#"version: 1
default: deny
rules:
  - id: read-data
    action: allow
    capability: fs.read
    arguments:
      path: { under: /data }
  - id: no-writes
    action: deny
    capability: fs.write
"#;
    let (verdicts, rules, read) = ask(
        policy,
        "edit_file",
        &["fs.read", "fs.write"],
        r#"{"path":"/data/x"}"#,
    );
    assert_eq!(verdicts, vec![Verdict::ALLOW, Verdict::DENY]);
    assert_eq!(rules[1], "no-writes");
    assert_eq!(read, "", "the deciding rule (no-writes) compared nothing");
}

// Claim (3), held: the index against the scan over random sets with argument rules.
#[test]
fn held_index_selects_what_the_scan_selects_with_arguments() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let calls = [
        r#"{"path":"/data/x"}"#,
        r#"{"path":"/etc/x"}"#,
        r#"{"path":"rel"}"#,
        r#"{"path":"/data/x","Path":"/etc"}"#,
        r#"{"mode":"read"}"#,
        r#"{"path":"/data/s/x","mode":"write"}"#,
        "{}",
        "not json",
    ];
    for _ in 0..300 {
        let mut text = String::from("version: 1\ndefault: deny\nrules:\n");
        for i in 0..(1 + next(12)) {
            let action = ["allow", "deny", "pending_approval", "rate_limit"][next(4) as usize];
            text += &format!("  - id: r{i}\n    action: {action}\n");
            if action == "rate_limit" {
                text += "    rate: { max: 1000, per_seconds: 1 }\n";
            }
            if let Some(t) = [Some("a"), Some("b"), None][next(3) as usize] {
                text += &format!("    tool: {t}\n");
            }
            if let Some(c) = [Some("fs.read"), None][next(2) as usize] {
                text += &format!("    capability: {c}\n");
            }
            text += &format!("    priority: {}\n", next(3));
            let args = [
                "",
                "    arguments:\n      path: { under: /data }\n",
                "    arguments:\n      path: { under: /data/s }\n      mode: { equals: write }\n",
                "    arguments:\n      mode: { equals: read }\n",
            ][next(4) as usize];
            text += args;
        }
        let set = PolicySet::parse(&text, "r.yaml").unwrap();
        for tool in ["a", "b", "c", ""] {
            for cap in ["fs.read", "fs.write", ""] {
                for call in calls {
                    let args = CallArguments::parse(Some(call));
                    let fast = set
                        .select_call(tool, cap, "", &args)
                        .map(|s| set.rules()[s.position as usize].id.clone());
                    let slow = set
                        .select_linear_call(tool, cap, "", &args)
                        .map(|r| r.id.clone());
                    assert_eq!(fast, slow, "{text}\n{tool} {cap} {call}");
                }
            }
        }
    }
}

// Held: spellings and JSON tricks that did not widen (recorded so the attempt is kept).
#[test]
fn held_spellings_and_json_tricks_do_not_widen() {
    let kelvin = r#"version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      pk: { under: /data }
      lines: { max: 100 }
"#;
    for (args, why) in [
        (
            "{\"pk\":\"/data/a\",\"p\u{212a}\":\"/etc\",\"lines\":1}",
            "Kelvin sign folds to k",
        ),
        (
            "{\"pk\":\"/data/a\",\"PK\":\"/etc\",\"lines\":1}",
            "ASCII case",
        ),
        (
            r#"{"pk":"FILE:///data/../etc","lines":1}"#,
            "uppercase scheme is unknown",
        ),
        (
            r#"{"pk":"file:/data/../etc","lines":1}"#,
            "file:/x is unknown",
        ),
        (r#"{"pk":"file://host/data","lines":1}"#, "host is unknown"),
        (
            r#"{"pk":"file:///data%2F..%2F..%2Fetc","lines":1}"#,
            "%2F decoded",
        ),
        (r#"{"pk":"/data/a\u0000/../../etc","lines":1}"#, "NUL"),
        (
            r#"{"pk":"/data/a","lines":NaN}"#,
            "NaN: serde_json refuses, all unknown",
        ),
        (r#"{"pk":"/data/a","lines":1e400}"#, "overflow: unknown"),
        (
            r#"{"pk":"/data/\ud800","lines":1}"#,
            "lone surrogate: unknown",
        ),
        (r#"{"pk":"/data/a","lines":1e3}"#, "1e3 is 1000"),
        (
            r#"{"pk":"/data/a","lines":"1"}"#,
            "string number is unknown",
        ),
        (r#"{"pk":["/data/a","/etc/x"],"lines":1}"#, "one bad entry"),
    ] {
        assert_ne!(
            verdict(kelvin, "read_file", args),
            Verdict::ALLOW,
            "{why}: {args}"
        );
    }
    assert_eq!(
        verdict(
            kelvin,
            "read_file",
            r#"{"pk":"file:///data/%252e%252e/x","lines":-0}"#
        ),
        Verdict::ALLOW,
        "double encoding decodes once, as URI parsers do"
    );
}
