//! Attacks on argument recording and recheck (spec/SPEC.md §6.3 `decision_axes.bound`,
//! the Binding paragraph, §9.6): a replay asks with the projection a binding records
//! (`Binding::project`) and must never decide a call otherwise than the live station
//! did with the whole arguments, unless it says it needed arguments it was not given.
//!
//! The property test draws argument objects over names that fold together, JSON
//! Pointers and keys for one argument, `__proto__`, nested objects and arrays, and
//! policies over a few of those names; the named tests pin the cases the brief lists.
//! (Written by an attack review; the one claim it found broken, `a/b` and `/a~1b` read
//! as two arguments, was fixed after it.)

use aegis_policy_arguments::binding::{Binding, BindingError};
use aegis_policy_arguments::unambiguous::{canonical_of, read_object};
use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::{IndexedDecision, Verdict};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const AXES: [&str; 2] = ["fs.read", "fs.write"];

/// One decision as compared: per axis answered, verdict, rule and reason.
type Answer = (Vec<(Verdict, u32, u32)>, bool);

fn answer(out: &[IndexedDecision], answered: u32, needed: bool) -> Answer {
    let decisions = out[..answered as usize]
        .iter()
        .map(|d| (d.verdict, d.rule, d.reason))
        .collect();
    (decisions, needed)
}

/// The live decision: the whole arguments, as canonical JSON. A fresh engine, so
/// rate-limit buckets are full in both decisions.
fn live(policy: &PolicySet, args: &str) -> Answer {
    let e = PolicyEngine::new(policy.clone());
    let mut out = [IndexedDecision::default(); 2];
    let a = e
        .decide_call("t", AXES.into_iter(), "", Some(args), &mut out)
        .unwrap();
    answer(&out, a.answer.answered, a.arguments_needed)
}

/// The replay: what `binding` records of `args`, as `aegis recheck` asks.
fn replay(policy: &PolicySet, binding: &Binding, args: &Map<String, Value>) -> Answer {
    let p = binding.project(args);
    let values = canonical_of(&p.values);
    let known: Vec<&str> = p.names.iter().map(String::as_str).collect();
    let e = PolicyEngine::new(policy.clone());
    let mut out = [IndexedDecision::default(); 2];
    let a = e
        .decide_stated_call("t", AXES.into_iter(), "", &values, &known, &mut out)
        .unwrap();
    answer(&out, a.answer.answered, a.arguments_needed)
}

/// Checks the claim on one case: whenever the replay decides (arguments not needed),
/// it decides as live did. `None` when the arguments read two ways (the pipeline
/// refuses such a call before the stations, and records nothing bound).
fn agree(policy: &PolicySet, binding: &Binding, args: &Value) -> Option<(Answer, Answer)> {
    let text = canonical_of(args.as_object()?);
    let map = read_object(text.as_bytes()).ok()?;
    Some((live(policy, &text), replay(policy, binding, &map)))
}

fn set(yaml: &str) -> PolicySet {
    PolicySet::parse(yaml, "p.yaml").unwrap()
}

fn assert_agree(policy: &PolicySet, binding: &Binding, args: Value) {
    let (l, r) = agree(policy, binding, &args).expect("arguments read one way");
    if !r.1 {
        assert_eq!(l.0, r.0, "replay decided otherwise than live for {args}");
    }
}

/// The replay decided (did not need arguments).
fn decided(policy: &PolicySet, binding: &Binding, args: Value) -> bool {
    !agree(policy, binding, &args).unwrap().1.1
}

const UNDER_DATA: &str = r#"version: 1
default: deny
rules:
  - id: deny-etc
    action: deny
    arguments:
      "NAME": { under: /etc }
  - id: allow-data
    action: allow
    arguments:
      "NAME": { under: /data }
"#;

fn under_data(name: &str) -> PolicySet {
    set(&UNDER_DATA.replace("NAME", name))
}

/// Claim: `path` and `/path` are one argument (a rule over either is decided from a
/// binding of either), and a pointer into a nested object is one name.
#[test]
fn a_key_and_its_one_token_pointer_are_one_argument() {
    for rule in ["path", "/path"] {
        for bound in ["path", "/path"] {
            let b = Binding::named([bound]).unwrap();
            let policy = under_data(rule);
            for v in ["/data/x", "/etc/passwd", "/data/../etc/x"] {
                assert_agree(&policy, &b, json!({ "path": v }));
                assert!(decided(&policy, &b, json!({ "path": v })), "{rule} {bound}");
            }
            // Known absent: the binding covered it, the call did not give it.
            assert!(decided(&policy, &b, json!({"other": 1})));
        }
    }
    let b = Binding::named(["/opts/path"]).unwrap();
    let policy = under_data("/opts/path");
    for args in [
        json!({"opts": {"path": "/etc/x"}}),
        json!({"opts": {"path": "/data/x"}}),
        json!({"opts": {}}),
        json!({"opts": null}),
    ] {
        assert_agree(&policy, &b, args.clone());
        assert!(decided(&policy, &b, args));
    }
}

/// Claim: an argument outside `bound.names` is unknown, never absent. A rule over a
/// name the binding does not hold — another key, the parent object of a bound child,
/// an entry of a bound list, a trailing-slash pointer, a key that folds with a bound
/// one — needs arguments on the replay whatever the call gave.
#[test]
fn a_name_outside_the_binding_is_never_read_as_absent() {
    let cases: [(&str, &str, Value); 8] = [
        ("path", "mode", json!({"path": "/data/x"})),
        ("/opts/path", "/opts", json!({"opts": {"path": "/data/x"}})),
        ("paths", "/paths/0", json!({"paths": ["/data/x"]})),
        ("path", "/path/", json!({"path": "/data/x"})),
        ("path", "/path/0", json!({"path": ["/data/x"]})),
        ("path", "PATH", json!({"path": "/data/x"})),
        ("path", "Path", json!({})),
        ("s", "\u{17f}", json!({})),
    ];
    for (bound, rule, args) in cases {
        let b = Binding::named([bound]).unwrap();
        for yaml in [
            format!(
                "version: 1\ndefault: allow\nrules:\n  - id: r\n    action: deny\n    arguments:\n      \"{rule}\": {{ under: /etc }}\n"
            ),
            format!(
                "version: 1\ndefault: deny\nrules:\n  - id: r\n    action: allow\n    arguments:\n      \"{rule}\": {{ under: /data }}\n"
            ),
        ] {
            let policy = set(&yaml);
            let (l, r) = agree(&policy, &b, &args).unwrap();
            assert!(
                r.1,
                "bound {bound}, rule {rule}: replay decided {r:?}, live {l:?}"
            );
        }
    }
}

/// Claim (Binding): a bound name the call's keys make ambiguous (`Path` sent where the
/// schema says `path`, `ſ` for `s`) is recorded as unknown, so the replay needs
/// arguments; live reads it as unknown too.
#[test]
fn a_folding_key_makes_the_bound_name_unknown_on_both_sides() {
    let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    let b = Binding::from_input_schema(&schema);
    assert_eq!(b.names(), ["path"]);
    let policy = under_data("path");
    for args in [json!({"Path": "/data/x"}), json!({"PATH": "/etc/x"})] {
        let p = b.project(args.as_object().unwrap());
        assert!(p.names.is_empty(), "{args}");
        let (l, r) = agree(&policy, &b, &args).unwrap();
        assert!(r.1, "{args}");
        assert_eq!(
            l.0[0].0,
            Verdict::DENY,
            "live refuses what it cannot compare"
        );
    }
    let b = Binding::named(["src"]).unwrap();
    let p = b.project(json!({"\u{17f}rc": "/data/x"}).as_object().unwrap());
    assert!(p.names.is_empty());
}

/// Claim (Binding): a list of paths is recorded whole and compared as live compares it:
/// every entry under the root, or the rule does not allow.
#[test]
fn a_list_of_paths_is_replayed_as_live() {
    let b = Binding::named(["paths"]).unwrap();
    let policy = under_data("paths");
    for args in [
        json!({"paths": ["/data/a", "/data/b"]}),
        json!({"paths": ["/data/a", "/etc/b"]}),
        json!({"paths": ["/etc/a", "/etc/b"]}),
        json!({"paths": ["/data/a", 1]}),
        json!({"paths": []}),
    ] {
        assert_agree(&policy, &b, args);
    }
}

/// Claim (`Binding::named`): one argument named twice is refused, "perhaps once as a
/// key, once as a pointer". A key holding `/` or `~` and its escaped pointer (`a/b` and
/// `/a~1b`, `a~b` and `/a~0b`) are one argument, but both are accepted, and a rule over
/// one form is not decided from a binding of the other: the replay needs arguments it
/// holds (fails closed; recheck cannot decide such calls). The fault is
/// `canonical_name` (stations/arguments/src/binding.rs), which leaves any pointer with
/// an escape as a pointer.
#[test]
fn an_escaped_pointer_and_its_key_are_one_argument() {
    assert!(matches!(
        Binding::named(["a/b", "/a~1b"]),
        Err(BindingError::Duplicate(_))
    ));
    assert!(matches!(
        Binding::named(["a~b", "/a~0b"]),
        Err(BindingError::Duplicate(_))
    ));
    let b = Binding::named(["a/b"]).unwrap();
    let policy = under_data("/a~1b");
    assert!(decided(&policy, &b, json!({"a/b": "/data/x"})));
}

/// What happens today with the two forms: never a wrong decision, only an undecided one.
#[test]
fn an_escaped_pointer_and_its_key_never_decide_otherwise() {
    for (bound, rule) in [("a/b", "/a~1b"), ("/a~1b", "a/b"), ("a~b", "/a~0b")] {
        let b = Binding::named([bound]).unwrap();
        let key = if bound.starts_with('/') { rule } else { bound };
        let policy = under_data(rule);
        for v in ["/data/x", "/etc/x"] {
            let mut args = Map::new();
            args.insert(key.to_owned(), json!(v));
            assert_agree(&policy, &b, Value::Object(args));
        }
    }
}

/// Claim (Binding): a schema seen later replaces the binding for later calls only; a
/// call records the names its binding held, so a replay of a call bound under the old
/// schema reads only those (the relisted schema cannot make a stated name unknown or
/// an unstated one known).
#[test]
fn a_relisted_schema_changes_what_later_calls_state_only() {
    let old = Binding::from_input_schema(
        &json!({"properties": {"path": {"type": "string"}, "mode": {"type": "string"}}}),
    );
    let new = Binding::from_input_schema(
        &json!({"properties": {"target": {"type": "string"}, "path": {"type": "integer"}}}),
    );
    assert_eq!(old.names(), ["path"]);
    assert_eq!(new.names(), ["target"]);
    let policy = under_data("path");
    let args = json!({"path": "/etc/x", "target": "/data/x"});
    assert_agree(&policy, &old, args.clone());
    assert!(decided(&policy, &old, args.clone()));
    let (_, r) = agree(&policy, &new, &args).unwrap();
    assert!(r.1, "path is not stated under the new binding");
}

/// Claim: a `__proto__` key makes the call's arguments read two ways (refused before
/// the stations, nothing bound), and a bound name below it is never stated.
#[test]
fn proto_keys_state_nothing() {
    let b = Binding::named(["path", "/__proto__/path"]).unwrap();
    for args in [
        json!({"__proto__": {"path": "/data/x"}}),
        json!({"o": {"__proto__": {}}, "path": "/data/x"}),
    ] {
        let text = canonical_of(args.as_object().unwrap());
        assert!(read_object(text.as_bytes()).is_err(), "{args}");
    }
    // Even projected directly, a top-level `__proto__` leaves every name unknown.
    let args = json!({"__proto__": {"path": "/data/x"}, "path": "/data/y"});
    assert!(b.project(args.as_object().unwrap()).names.is_empty());
}

// --- The property: random arguments, random bindings, random policies. ---

/// Keys the arguments draw from: some fold together, one is `__proto__`, one holds a
/// `/`, one a `~`.
const KEYS: [&str; 10] = [
    "path", "Path", "paths", "opts", "mode", "a/b", "a~b", "s", "\u{17f}", "lines",
];

/// Names bindings and rules draw from: keys, one-token pointers, escaped pointers,
/// nested pointers, list entries, a trailing slash, a parent object.
const NAMES: [&str; 16] = [
    "path",
    "/path",
    "PATH",
    "paths",
    "/paths/0",
    "/paths/1",
    "opts",
    "/opts",
    "/opts/path",
    "/opts/0/path",
    "/path/",
    "a/b",
    "/a~1b",
    "/a~0b",
    "mode",
    "s",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "/data/x",
            "/etc/passwd",
            "/data/../etc/x",
            "/data",
            "rel/x",
            "file:///data/y",
            "read",
            "",
        ])
        .prop_map(|s| json!(s)),
        (0i64..700).prop_map(|n| json!(n)),
        Just(Value::Null),
        Just(json!(true)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), inner, 0..3).prop_map(
                |m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            ),
        ]
    })
}

fn arguments() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(KEYS.to_vec()), value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
}

fn matcher() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{ under: /data }".to_owned()),
        Just("{ under: /etc }".to_owned()),
        Just("{ equals: read }".to_owned()),
        Just("{ equals: /data/x }".to_owned()),
        Just("{ min: 1, max: 500 }".to_owned()),
    ]
}

fn rule(i: usize) -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["allow", "deny", "pending_approval", "rate_limit"]),
        prop::option::of(prop::sample::select(vec!["fs.read", "fs.write"])),
        prop::collection::btree_map(prop::sample::select(NAMES.to_vec()), matcher(), 0..3),
    )
        .prop_map(move |(action, capability, args)| {
            let mut r = format!("  - id: r{i}\n    action: {action}\n");
            if action == "rate_limit" {
                r.push_str("    rate: { max: 1000, per_seconds: 60 }\n");
            }
            if let Some(c) = capability {
                r.push_str(&format!("    capability: {c}\n"));
            }
            if !args.is_empty() {
                r.push_str("    arguments:\n");
                for (name, m) in args {
                    r.push_str(&format!("      \"{name}\": {m}\n"));
                }
            }
            r
        })
}

fn policy() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["allow", "deny"]),
        prop::collection::vec(0usize..1, 1..5),
    )
        .prop_flat_map(|(default, n)| {
            let rules: Vec<_> = (0..n.len()).map(rule).collect();
            rules.prop_map(move |rules| {
                format!("version: 1\ndefault: {default}\nrules:\n{}", rules.concat())
            })
        })
}

fn binding() -> impl Strategy<Value = Option<Binding>> {
    prop::collection::btree_set(prop::sample::select(NAMES.to_vec()), 0..5)
        .prop_map(|names| Binding::named(names).ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whenever the replay decides (arguments not needed), it decides exactly as live:
    /// the same verdict, rule and reason on every axis answered.
    #[test]
    fn a_replay_that_decides_decides_as_live(
        yaml in policy(),
        b in binding(),
        args in arguments(),
    ) {
        let Some(b) = b else { return Ok(()) };
        let Ok(policy) = PolicySet::parse(&yaml, "p.yaml") else { return Ok(()) };
        let Some((l, r)) = agree(&policy, &b, &args) else { return Ok(()) };
        if !r.1 {
            prop_assert_eq!(&l.0, &r.0, "policy:\n{}\nbinding {:?}\nargs {}", yaml, b.names(), args);
        }
    }

    /// A binding of every name the policy reads, when the projection states every one
    /// of them, decides every call as live did: the replay loses nothing it was given.
    #[test]
    fn a_binding_of_every_read_name_always_decides(
        yaml in policy(),
        args in arguments(),
    ) {
        let Ok(policy) = PolicySet::parse(&yaml, "p.yaml") else { return Ok(()) };
        let mut names: Vec<String> = policy
            .rules()
            .iter()
            .flat_map(|r| r.arguments.iter().map(|m| m.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        // Names that are one argument in two forms cannot both be bound.
        let Ok(b) = Binding::named(&names) else { return Ok(()) };
        let Some((l, r)) = agree(&policy, &b, &args) else { return Ok(()) };
        let stated = b.project(args.as_object().unwrap()).names.len() == b.names().len();
        if !l.1 && stated {
            prop_assert!(!r.1, "policy:\n{}\nargs {}", yaml, args);
            prop_assert_eq!(&l.0, &r.0);
        }
    }
}
