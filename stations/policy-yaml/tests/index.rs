//! The tool index changes what `select` looks at, never what it answers; the indexed
//! answer the host asks for says what the owned answer says.

use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::{IndexedDecision, Limits, Verdict};
use proptest::prelude::*;

const TOOLS: [&str; 4] = ["", "a", "b", "c"];
const CAPABILITIES: [&str; 3] = ["", "fs.read", "net.http"];
const ROLES: [&str; 3] = ["", "ops", "dev"];
const ACTIONS: [&str; 4] = ["allow", "deny", "rate_limit", "pending_approval"];

/// One rule's YAML: each axis is absent, `"*"` or a value (never empty: the parser
/// refuses an empty axis).
fn rule_yaml(i: usize, action: usize, axes: [usize; 3], priority: i64) -> String {
    let mut r = format!("  - id: r{i}\n    action: {}\n", ACTIONS[action]);
    let values: [&[&str]; 3] = [&TOOLS, &CAPABILITIES, &ROLES];
    for ((key, pick), values) in ["tool", "capability", "role"].iter().zip(axes).zip(values) {
        match pick {
            0 => {}
            1 => r += &format!("    {key}: \"*\"\n"),
            n => {
                r += &format!(
                    "    {key}: {:?}\n",
                    values[1 + (n - 2) % (values.len() - 1)]
                )
            }
        }
    }
    if action == 2 {
        r += "    rate: { max: 5, per_seconds: 60 }\n";
    }
    r + &format!("    priority: {priority}\n")
}

fn set_of(rules: &[(usize, [usize; 3], i64)]) -> PolicySet {
    let mut y = String::from("version: 1\ndefault: deny\n");
    y += if rules.is_empty() {
        "rules: []\n"
    } else {
        "rules:\n"
    };
    for (i, (action, axes, priority)) in rules.iter().enumerate() {
        y += &rule_yaml(i, *action, *axes, *priority);
    }
    PolicySet::parse(&y, "prop.yaml").unwrap()
}

proptest! {
    /// For any set of up to 24 rules over a small alphabet (so that rules collide on
    /// every axis, priorities tie and wildcards mix with named tools), and every call
    /// over that alphabet and a tool no rule names, the indexed `select` picks the same
    /// rule as the scan of every rule in file order.
    #[test]
    fn the_index_selects_what_the_linear_scan_selects(
        rules in prop::collection::vec((0..4usize, [0..5usize, 0..5usize, 0..5usize], -1..2i64), 0..24)
    ) {
        let set = set_of(&rules);
        for tool in TOOLS.iter().chain(&["unnamed"]) {
            for capability in CAPABILITIES {
                for role in ROLES {
                    let indexed = set.select(tool, capability, role).map(|r| &r.id);
                    let linear = set.select_linear(tool, capability, role).map(|r| &r.id);
                    prop_assert_eq!(indexed, linear, "tool {:?} capability {:?} role {:?}", tool, capability, role);
                }
            }
        }
    }
}

const ROOTS: [&str; 3] = ["", "/a", "/a/b"];
const ARGUMENTS: [Option<&str>; 7] = [
    None,
    Some("{}"),
    Some(r#"{"path":"/a/x"}"#),
    Some(r#"{"path":"/a/b/x"}"#),
    Some(r#"{"path":"/a/b/../../c"}"#),
    Some(r#"{"path":"rel"}"#),
    Some(r#"{"path":["/a/b","/c"]}"#),
];

proptest! {
    /// With rules over a `path` argument mixed in (none, or `under` one of two nested
    /// roots), the index still selects what the scan selects, for calls whose
    /// arguments are unknown, absent, inside either root, escaping by `..`, relative,
    /// or a list half inside.
    #[test]
    fn the_index_selects_what_the_linear_scan_selects_with_argument_rules(
        rules in prop::collection::vec((0..4usize, [0..5usize, 0..5usize, 0..5usize], -1..2i64, 0..3usize), 0..16)
    ) {
        let mut y = String::from("version: 1\ndefault: deny\n");
        y += if rules.is_empty() { "rules: []\n" } else { "rules:\n" };
        for (i, (action, axes, priority, root)) in rules.iter().enumerate() {
            y += &rule_yaml(i, *action, *axes, *priority);
            if *root > 0 {
                y += &format!("    arguments:\n      path: {{ under: {} }}\n", ROOTS[*root]);
            }
        }
        let set = PolicySet::parse(&y, "prop.yaml").unwrap();
        for tool in TOOLS.iter().chain(&["unnamed"]) {
            for role in ROLES {
                for arguments in ARGUMENTS {
                    let args = aegis_policy_yaml::arguments::CallArguments::parse(arguments);
                    let indexed = set
                        .select_call(tool, "fs.read", role, &args)
                        .map(|s| set.rules()[s.position as usize].id.clone());
                    let linear = set.select_linear_call(tool, "fs.read", role, &args).map(|r| r.id.clone());
                    prop_assert_eq!(indexed, linear, "tool {:?} role {:?} arguments {:?}", tool, role, arguments);
                }
            }
        }
    }
}

/// The axis lists the host asks about (a subset of `fs.read`, `fs.write`, `net.http` in
/// that order, or one name), including ones past a refusal.
const AXES: [&[&str]; 5] = [
    &[""],
    &["fs.read"],
    &["fs.read", "net.http"],
    &["net.http", "fs.read", "fs.write"],
    &["fs.write", "fs.read"],
];

/// An answer with its rule and reason as the record would hold them.
type Resolved = (Verdict, Option<String>, String, Limits, bool);

proptest! {
    /// For any set as above and every call and axis list, `decide_axes_indexed` read
    /// through the table it returns says what `decide_axes` says: the same number of
    /// decisions, each with the same verdict, rule id, reason and limits, and an
    /// approval id exactly when the last one parks. Two engines over the same set are
    /// asked the same calls in the same order, so their rate limits run out together.
    #[test]
    fn the_indexed_answer_says_what_the_owned_answer_says(
        rules in prop::collection::vec((0..4usize, [0..5usize, 0..5usize, 0..5usize], -1..2i64), 0..24)
    ) {
        let set = set_of(&rules);
        let (owned, indexed) = (PolicyEngine::new(set.clone()), PolicyEngine::new(set));
        for tool in TOOLS.iter().chain(&["unnamed"]) {
            for axes in AXES {
                for role in ROLES {
                    let expected: Vec<Resolved> = owned
                        .decide_axes(tool, axes, role)
                        .unwrap()
                        .into_iter()
                        .map(|d| (
                            d.verdict,
                            d.matched_rule.into_option().map(|r| r.into_string()),
                            d.reason.into_string(),
                            d.limits,
                            d.approval_id.is_some(),
                        ))
                        .collect();
                    let mut slots = [IndexedDecision::default(); 3];
                    let answer = indexed
                        .decide_axes_indexed(tool, axes.iter().copied(), role, &mut slots)
                        .unwrap();
                    let n = answer.answered as usize;
                    let got: Vec<Resolved> = slots[..n]
                        .iter()
                        .enumerate()
                        .map(|(i, d)| (
                            d.verdict,
                            answer.table.rule(d.rule).map(str::to_owned),
                            answer.table.reason(d.reason).expect("a reason in the table").to_owned(),
                            d.limits,
                            i + 1 == n && answer.approval_id.is_some(),
                        ))
                        .collect();
                    prop_assert_eq!(&got, &expected, "tool {:?} axes {:?} role {:?}", tool, axes, role);
                    // A rule the table names is a rule of the set, at the same position.
                    for d in &slots[..n] {
                        prop_assert!(d.rule == IndexedDecision::NO_RULE || (d.rule as usize) < rules.len());
                    }
                }
            }
        }
    }
}

/// A table of the cases an index could get wrong: a tool-less rule after a tool's own
/// rule, the earliest of equals, a deny among wildcards, a call naming no tool.
#[test]
fn the_index_keeps_file_order_and_deny_wins() {
    let set = PolicySet::parse(
        "version: 1\ndefault: allow\nrules:\n\
         - { id: any-1, action: allow, capability: fs.read }\n\
         - { id: a-1, action: allow, tool: a }\n\
         - { id: any-2, action: allow, role: ops }\n\
         - { id: a-2, action: allow, tool: a, priority: 0 }\n\
         - { id: any-deny, action: deny, role: bad }\n",
        "table.yaml",
    )
    .unwrap();
    for (tool, capability, role, want) in [
        // Equally specific, equal priority: the earliest, a tool-less one.
        ("a", "fs.read", "", Some("any-1")),
        ("a", "", "", Some("a-1")),
        ("a", "", "ops", Some("a-1")),
        ("b", "", "ops", Some("any-2")),
        // A deny without a tool still reaches a tool that has rules of its own.
        ("a", "", "bad", Some("any-deny")),
        ("", "", "bad", Some("any-deny")),
        // A call naming no tool is matched by tool-less rules only.
        ("", "fs.read", "", Some("any-1")),
        ("", "", "", None),
        ("zzz", "", "", None),
    ] {
        let got = set.select(tool, capability, role).map(|r| r.id.as_str());
        assert_eq!(got, want, "{tool:?} {capability:?} {role:?}");
        let linear = set
            .select_linear(tool, capability, role)
            .map(|r| r.id.as_str());
        assert_eq!(got, linear, "{tool:?} {capability:?} {role:?}");
    }
}
