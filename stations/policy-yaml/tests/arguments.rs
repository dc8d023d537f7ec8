//! Rules over call arguments: paths compared after normalisation, with every way of
//! dressing up a path outside the root tried; unknown arguments never widen a
//! decision; the deciding rule's compared values are reported; errors name the line.

use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::{IndexedDecision, Verdict};

const POLICY: &str = r#"version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      path: { under: /data }
  - id: never-secrets
    action: deny
    arguments:
      path: { under: /data/secrets }
  - id: read-many
    action: allow
    tool: read_multiple_files
    arguments:
      paths: { under: /data }
  - id: head-small
    action: allow
    tool: head
    arguments:
      lines: { min: 1, max: 100 }
      mode: { equals: text }
  - id: search-slowly
    action: rate_limit
    tool: search
    rate: { max: 1000, per_seconds: 60 }
    arguments:
      /query/scope: { equals: public }
  - id: list-anything
    action: allow
    tool: list
"#;

fn engine() -> PolicyEngine {
    PolicyEngine::new(PolicySet::parse(POLICY, "p.yaml").unwrap())
}

/// The verdict, rule, compared values and `arguments_needed` for one call.
fn decide(tool: &str, arguments: Option<&str>) -> (Verdict, Option<String>, String, bool) {
    let e = engine();
    let mut out = [IndexedDecision::default(); 1];
    let a = e
        .decide_call(tool, [""].into_iter(), "", arguments, &mut out)
        .unwrap();
    assert_eq!(a.answer.answered, 1);
    let rule = a.answer.table.rule(out[0].rule).map(str::to_owned);
    (
        out[0].verdict,
        rule,
        a.arguments_read.to_string(),
        a.arguments_needed,
    )
}

fn verdict(tool: &str, arguments: &str) -> Verdict {
    decide(tool, Some(arguments)).0
}

#[test]
fn a_path_is_allowed_only_when_it_normalises_to_under_the_root() {
    for inside in [
        r#"{"path":"/data/notes.txt"}"#,
        r#"{"path":"/data/./a/../notes.txt"}"#,
        r#"{"path":"//data//notes.txt"}"#,
        r#"{"path":"file:///data/notes.txt"}"#,
        r#"{"path":"/data"}"#,
    ] {
        assert_eq!(verdict("read_file", inside), Verdict::ALLOW, "{inside}");
    }
    for outside in [
        r#"{"path":"/data/../etc/passwd"}"#,
        r#"{"path":"/data/./../etc/passwd"}"#,
        r#"{"path":"/data/a/../../etc/passwd"}"#,
        r#"{"path":"/database/x"}"#,
        r#"{"path":"/dat"}"#,
        r#"{"path":"file:///data/%2e%2e/etc/passwd"}"#,
        r#"{"path":"file:///data/..%2fetc/passwd"}"#,
        r#"{"path":"data/notes.txt"}"#,
        r#"{"path":"../data/notes.txt"}"#,
        r#"{"path":"~/notes.txt"}"#,
        r#"{"path":"/data/\u0000/x"}"#,
        r#"{"path":["/data/notes.txt","/etc/passwd"]}"#,
        r#"{"path":7}"#,
        r#"{"path":null}"#,
        r#"{"other":"/data/notes.txt"}"#,
        r#"{"path":"/data/notes.txt","PATH":"/etc/passwd"}"#,
        r#"{"path":"/data/notes.txt","Path":"/etc/passwd"}"#,
        r#"{}"#,
    ] {
        assert_ne!(verdict("read_file", outside), Verdict::ALLOW, "{outside}");
    }
}

/// `..%2f` inside a `file://` URI decodes to `../`: the decoded path is the one compared.
#[test]
fn an_encoded_traversal_is_decoded_before_it_is_compared() {
    let (v, rule, read, _) = decide(
        "read_file",
        Some(r#"{"path":"file:///data/..%2fetc/passwd"}"#),
    );
    assert_eq!(v, Verdict::DENY);
    assert_eq!(
        rule, None,
        "no rule matches /etc/passwd: the default decides"
    );
    assert_eq!(read, "");
}

#[test]
fn a_deny_on_a_narrower_root_wins_and_catches_one_bad_entry_in_a_list() {
    let (v, rule, read, _) = decide("read_file", Some(r#"{"path":"/data/x/../secrets/k"}"#));
    assert_eq!(v, Verdict::DENY);
    assert_eq!(rule.as_deref(), Some("never-secrets"));
    assert_eq!(read, r#"{"path":"/data/secrets/k"}"#);
    assert_eq!(
        verdict("read_multiple_files", r#"{"paths":["/data/a","/data/b"]}"#),
        Verdict::ALLOW
    );
    // One entry outside the root: the allow cannot hold for the whole list.
    let (v, rule, _, _) = decide(
        "read_multiple_files",
        Some(r#"{"paths":["/data/a","/data/../etc/shadow"]}"#),
    );
    assert_eq!(v, Verdict::DENY);
    assert_eq!(rule.as_deref(), Some("read-many"));
    assert_eq!(
        verdict("read_multiple_files", r#"{"paths":["/data/a","rel/b"]}"#),
        Verdict::DENY
    );
}

#[test]
fn numbers_and_strings_are_compared_by_type() {
    assert_eq!(
        verdict("head", r#"{"lines":100,"mode":"text"}"#),
        Verdict::ALLOW
    );
    assert_eq!(
        verdict("head", r#"{"lines":1.0,"mode":"text"}"#),
        Verdict::ALLOW
    );
    assert_eq!(
        verdict("head", r#"{"lines":101,"mode":"text"}"#),
        Verdict::DENY
    );
    assert_eq!(
        verdict("head", r#"{"lines":0,"mode":"text"}"#),
        Verdict::DENY
    );
    assert_eq!(
        verdict("head", r#"{"lines":-5,"mode":"text"}"#),
        Verdict::DENY
    );
    assert_eq!(
        verdict("head", r#"{"lines":"50","mode":"text"}"#),
        Verdict::DENY
    );
    assert_eq!(
        verdict("head", r#"{"lines":50,"mode":"TEXT"}"#),
        Verdict::DENY
    );
    assert_eq!(verdict("head", r#"{"lines":50}"#), Verdict::DENY);
    let (_, rule, read, _) = decide("head", Some(r#"{"lines":50,"mode":"text","x":1}"#));
    assert_eq!(rule.as_deref(), Some("head-small"));
    assert_eq!(
        read, r#"{"lines":50,"mode":"text"}"#,
        "only what the rule compared"
    );
}

/// Unknown arguments: a rule that could allow refuses instead and says it needed them;
/// a rule that only refuses applies; a tool without argument rules is unaffected.
#[test]
fn unknown_arguments_never_widen_and_are_reported_as_needed() {
    let (v, rule, _, needed) = decide("read_file", None);
    // never-secrets (a deny, more specific by precedence) is asked first and applies.
    assert_eq!(
        (v, rule.as_deref(), needed),
        (Verdict::DENY, Some("never-secrets"), true)
    );
    let (v, rule, _, needed) = decide("head", None);
    assert_eq!((v, needed), (Verdict::DENY, true));
    assert_eq!(rule.as_deref(), Some("never-secrets"));
    let (v, rule, _, needed) = decide("list", Some(r#"{"path":"/data/x"}"#));
    assert_eq!(
        (v, rule.as_deref(), needed),
        (Verdict::ALLOW, Some("list-anything"), false)
    );
    // A rate_limit over arguments can allow, so an uncomparable value refuses.
    let (v, rule, _, needed) = decide("search", Some(r#"{"query":"x"}"#));
    assert_eq!((v, needed), (Verdict::DENY, false));
    assert_eq!(
        rule.as_deref(),
        Some("search-slowly"),
        "a string may hold JSON a server parses: the scope inside is unknown"
    );
    let (v, rule, _, _) = decide("search", Some(r#"{"query":{}}"#));
    assert_eq!(
        (v, rule),
        (Verdict::DENY, None),
        "no scope: a miss, default deny"
    );
    let (v, rule, _, _) = decide("search", Some(r#"{"query":{"scope":1}}"#));
    assert_eq!((v, rule.as_deref()), (Verdict::DENY, Some("search-slowly")));
    assert_eq!(
        verdict("search", r#"{"query":{"scope":"public"}}"#),
        Verdict::ALLOW
    );
}

#[test]
fn a_set_without_argument_rules_ignores_arguments_entirely() {
    let set = PolicySet::parse(
        "version: 1\ndefault: deny\nrules:\n  - id: a\n    action: allow\n    tool: t\n",
        "p.yaml",
    )
    .unwrap();
    assert!(!set.reads_arguments());
    let e = PolicyEngine::new(set);
    let mut out = [IndexedDecision::default(); 1];
    for args in [None, Some("{}"), Some("not json")] {
        let a = e
            .decide_call("t", [""].into_iter(), "", args, &mut out)
            .unwrap();
        assert_eq!(out[0].verdict, Verdict::ALLOW);
        assert!(!a.arguments_needed && a.arguments_read.is_empty());
    }
}

#[test]
fn argument_rules_are_part_of_the_hash_and_their_errors_name_the_line() {
    let base = "version: 1\nrules:\n  - id: a\n    action: allow\n    arguments:\n";
    let h = |m: &str| {
        PolicySet::parse(&format!("{base}{m}"), "p.yaml")
            .unwrap()
            .hash()
    };
    assert_eq!(
        h("      path: { under: /data }\n"),
        h("      path: { under: '/data/./' }\n"),
        "the normalised root is what is hashed"
    );
    assert_ne!(
        h("      path: { under: /data }\n"),
        h("      path: { under: /etc }\n")
    );
    assert_eq!(h("      n: { max: 1 }\n"), h("      n: { max: 1.0 }\n"));
    assert_ne!(h("      n: { max: 1 }\n"), h("      n: { min: 1 }\n"));
    let err = |m: &str| {
        PolicySet::parse(&format!("{base}{m}"), "p.yaml")
            .unwrap_err()
            .to_string()
    };
    for (m, want) in [
        (
            "      path: { under: data }\n",
            "p.yaml:6: arguments.path.under: expected an absolute path",
        ),
        (
            "      path: { under: /a, equals: b }\n",
            "p.yaml:6: arguments.path: expected exactly one of",
        ),
        (
            "      n: { min: 5, max: 1 }\n",
            "p.yaml:6: arguments.n: min is above max",
        ),
        (
            "      n: { max: lots }\n",
            "p.yaml:6: arguments.n.max: expected a number",
        ),
        (
            "      n: { max: .nan }\n",
            "p.yaml:6: arguments.n.max: expected a number",
        ),
        (
            "      n: { prefix: x }\n",
            "p.yaml:6: arguments.n: unknown field \"prefix\"",
        ),
        ("      n: x\n", "p.yaml:6: arguments.n: expected"),
    ] {
        let e = err(m);
        assert!(e.starts_with(want), "{m:?}: {e}");
    }
}

/// An argument rule is more specific than the same rule without it.
#[test]
fn argument_matchers_count_toward_specificity() {
    let set = PolicySet::parse(
        r#"version: 1
rules:
  - id: plain
    action: allow
    tool: t
    priority: 9
  - id: narrow
    action: pending_approval
    tool: t
    arguments:
      target: { equals: prod }
"#,
        "p.yaml",
    )
    .unwrap();
    let e = PolicyEngine::new(set);
    let mut out = [IndexedDecision::default(); 1];
    let ask = |args: &str, out: &mut [IndexedDecision]| {
        let a = e
            .decide_call("t", [""].into_iter(), "", Some(args), out)
            .unwrap();
        a.answer.table.rule(out[0].rule).map(str::to_owned)
    };
    assert_eq!(
        ask(r#"{"target":"prod"}"#, &mut out).as_deref(),
        Some("narrow")
    );
    assert_eq!(out[0].verdict, Verdict::PENDING_APPROVAL);
    assert_eq!(
        ask(r#"{"target":"dev"}"#, &mut out).as_deref(),
        Some("plain")
    );
    assert_eq!(out[0].verdict, Verdict::ALLOW);
}

/// An allow that decides without reading arguments still cannot stand while another
/// rule that applies to the call reads one it cannot compare: that rule might have
/// refused. A deny stands regardless.
#[test]
fn no_allow_while_an_applicable_rule_cannot_compare() {
    let set = PolicySet::parse(
        r#"version: 1
default: deny
rules:
  - id: writer-ok
    action: allow
    tool: write
    role: ops
  - id: small-writes
    action: allow
    tool: write
    arguments:
      size: { max: 10 }
  - id: never-etc
    action: deny
    tool: write
    arguments:
      path: { under: /etc }
"#,
        "p.yaml",
    )
    .unwrap();
    let e = PolicyEngine::new(set);
    let ask = |role: &str, args: Option<&str>| {
        let mut out = [IndexedDecision::default(); 1];
        let a = e
            .decide_call("write", [""].into_iter(), role, args, &mut out)
            .unwrap();
        (
            out[0].verdict,
            a.answer.table.rule(out[0].rule).map(str::to_owned),
            a.arguments_needed,
        )
    };
    // Known, comparable: the most specific allow decides.
    assert_eq!(
        ask("ops", Some(r#"{"size":50,"path":"/tmp/x"}"#)),
        (Verdict::ALLOW, Some("writer-ok".into()), false)
    );
    // A size of another type: small-writes cannot compare, so writer-ok cannot allow.
    assert_eq!(
        ask("ops", Some(r#"{"size":"50","path":"/tmp/x"}"#)),
        (Verdict::DENY, Some("small-writes".into()), false)
    );
    // Unknown arguments: never-etc applies first (a deny), and says they were needed.
    assert_eq!(
        ask("ops", None),
        (Verdict::DENY, Some("never-etc".into()), true)
    );
    assert_eq!(
        ask("ops", Some(r#"{"path":"/etc/x"}"#)),
        (Verdict::DENY, Some("never-etc".into()), false)
    );
}

/// A recorded call's stated arguments, decided as a replay asks: (verdict, rule,
/// arguments needed).
fn stated(policy: &str, tool: &str, values: &str, known: &[&str]) -> (Verdict, String, bool) {
    let e = PolicyEngine::new(PolicySet::parse(policy, "stated.yaml").unwrap());
    let mut out = [IndexedDecision::default(); 1];
    let a = e
        .decide_stated_call(tool, [""].into_iter(), "", values, known, &mut out)
        .unwrap();
    let d = out[0];
    let rule = a.answer.table.rule(d.rule).unwrap_or("default").to_owned();
    (d.verdict, rule, a.arguments_needed)
}

#[test]
fn stated_arguments_decide_rules_over_the_names_they_state() {
    // The binding stated `path`: rules over it decide, as the live call would have.
    let inside = stated(POLICY, "read_file", r#"{"path":"/data/a"}"#, &["path"]);
    assert_eq!(inside, (Verdict::ALLOW, "read-data".into(), false));
    let outside = stated(POLICY, "read_file", r#"{"path":"/etc/passwd"}"#, &["path"]);
    assert_eq!(outside, (Verdict::DENY, "default".into(), false));
    let secret = stated(
        POLICY,
        "read_file",
        r#"{"path":"/data/secrets/k"}"#,
        &["/path"],
    );
    assert_eq!(secret, (Verdict::DENY, "never-secrets".into(), false));
    // A relative path has no normal form: refused, and that is the call's own doing.
    let relative = stated(
        POLICY,
        "read_file",
        r#"{"path":"../secret.txt"}"#,
        &["path"],
    );
    assert_eq!((relative.0, relative.2), (Verdict::DENY, false));
    // Known absent: a rule about `path` does not apply, and nothing was needed.
    let absent = stated(POLICY, "read_file", "{}", &["path"]);
    assert_eq!(absent, (Verdict::DENY, "default".into(), false));
}

#[test]
fn an_argument_the_record_does_not_state_is_unknown_never_absent() {
    // `head` compares `lines` and `mode`; the record states `mode` only. Read as
    // absent, `lines` would not match and the default decide; read as unknown, the
    // allow cannot stand and the replay says the arguments were needed.
    let r = stated(POLICY, "head", r#"{"mode":"text"}"#, &["mode"]);
    assert_eq!((r.0, r.2), (Verdict::DENY, true));
    // A deny over an unstated argument cannot be passed over either.
    let deny_first = r#"version: 1
default: allow
rules:
  - id: no-write-mode
    action: deny
    arguments:
      mode: { equals: w }
"#;
    let r = stated(deny_first, "open", r#"{"path":"/data/a"}"#, &["path"]);
    assert_eq!((r.0, r.2), (Verdict::DENY, true));
    // Once stated, it decides.
    let r = stated(deny_first, "open", r#"{"mode":"r"}"#, &["mode"]);
    assert_eq!(r, (Verdict::ALLOW, "default".into(), false));
}
