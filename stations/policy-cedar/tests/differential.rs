//! The YAML and Cedar stations, given policies written to mean the same thing, decide
//! every request of a generated corpus alike: tool, capability axis and role rules,
//! allow and deny, and rules over arguments (a string, a path under a root, a number
//! bound), with arguments present, missing, mistyped for a bound, escaping by `..`,
//! spelled as `file://` URIs, or unknown altogether. Plus the argument cases the Cedar
//! station must refuse on its own.
//!
//! Where the engines differ on purpose, the corpus leaves the case out and the test
//! below pins Cedar's side: a path argument with no normal form, a key another key
//! folds to, or a path of another type makes the Cedar station refuse wherever a policy
//! that reads arguments applies, while the YAML station refuses only where a rule reads
//! that argument (Cedar's policies are not split by the argument they read); and a
//! string compared with `==` to a value of another type is a plain mismatch in Cedar,
//! an unknown in YAML.

use aegis_policy_cedar::{CedarEngine, CedarSet};
use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::abi_stable::std_types::RStr;
use aegis_station_api::{IndexedDecision, Policy, PolicyRequest, Verdict};
use proptest::prelude::*;

const TOOLS: [&str; 2] = ["read", "write"];
const AXES: [&str; 3] = ["", "fs.read", "fs.write"];
const ROLES: [&str; 3] = ["", "ops", "dev"];

/// What a rule may say about arguments.
#[derive(Clone, Copy, Debug)]
enum Cond {
    None,
    ModeIs(&'static str),
    PathUnder(&'static str),
    LinesAtMost(i64),
}

const CONDS: [Cond; 6] = [
    Cond::None,
    Cond::None,
    Cond::ModeIs("r"),
    Cond::PathUnder("/data"),
    Cond::PathUnder("/data/pub"),
    Cond::LinesAtMost(10),
];

#[derive(Clone, Debug)]
struct Rule {
    deny: bool,
    tool: Option<&'static str>,
    axis: Option<&'static str>,
    role: Option<&'static str>,
    cond: Cond,
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        any::<bool>(),
        prop::option::of(prop::sample::select(&TOOLS[..])),
        prop::option::of(prop::sample::select(&AXES[1..])),
        prop::option::of(prop::sample::select(&ROLES[1..])),
        prop::sample::select(&CONDS[..]),
    )
        .prop_map(|(deny, tool, axis, role, cond)| Rule {
            deny,
            tool,
            axis,
            role,
            cond,
        })
}

fn yaml(rules: &[Rule]) -> String {
    let mut y = String::from("version: 1\ndefault: deny\n");
    y += if rules.is_empty() {
        "rules: []\n"
    } else {
        "rules:\n"
    };
    for (i, r) in rules.iter().enumerate() {
        y += &format!(
            "  - id: r{i}\n    action: {}\n",
            if r.deny { "deny" } else { "allow" }
        );
        for (key, v) in [("tool", r.tool), ("capability", r.axis), ("role", r.role)] {
            if let Some(v) = v {
                y += &format!("    {key}: {v:?}\n");
            }
        }
        match r.cond {
            Cond::None => {}
            Cond::ModeIs(m) => y += &format!("    arguments:\n      mode: {{ equals: {m} }}\n"),
            Cond::PathUnder(p) => y += &format!("    arguments:\n      path: {{ under: {p} }}\n"),
            Cond::LinesAtMost(n) => y += &format!("    arguments:\n      lines: {{ max: {n} }}\n"),
        }
    }
    y
}

const SCHEMA: &str = r#"
entity Role;
entity Tool;
type Arguments = { path?: String, mode?: String, lines?: Long };
action "call", "fs.read", "fs.write", "net.http" appliesTo {
  principal: [Role],
  resource: [Tool],
  context: { arguments?: Arguments },
};
"#;

fn cedar(rules: &[Rule]) -> String {
    let mut c = String::new();
    for (i, r) in rules.iter().enumerate() {
        let principal = r.role.map_or("principal".to_owned(), |v| {
            format!("principal == Role::{v:?}")
        });
        let action = r
            .axis
            .map_or("action".to_owned(), |v| format!("action == Action::{v:?}"));
        let resource = r.tool.map_or("resource".to_owned(), |v| {
            format!("resource == Tool::{v:?}")
        });
        let a = "context has arguments && context.arguments";
        let when = match r.cond {
            Cond::None => String::new(),
            Cond::ModeIs(m) => {
                format!(" when {{ {a} has mode && context.arguments.mode == {m:?} }}")
            }
            Cond::PathUnder(p) => format!(
                " when {{ {a} has path && (context.arguments.path == {p:?} || context.arguments.path like \"{p}/*\") }}"
            ),
            Cond::LinesAtMost(n) => {
                format!(" when {{ {a} has lines && context.arguments.lines <= {n} }}")
            }
        };
        c += &format!(
            "@id(\"r{i}\")\n{}({principal}, {action}, {resource}){when};\n",
            if r.deny { "forbid" } else { "permit" }
        );
    }
    c
}

/// Arguments a call may carry (None: unknown).
const ARGUMENTS: [Option<&str>; 15] = [
    None,
    Some("{}"),
    Some(r#"{"mode":"r"}"#),
    Some(r#"{"mode":"w","path":"/data/pub/a"}"#),
    Some(r#"{"path":"/data/a","lines":5}"#),
    Some(r#"{"path":"/data/pub/../a","lines":50}"#),
    Some(r#"{"path":"/data/../etc/passwd"}"#),
    Some(r#"{"path":"/database/x"}"#),
    Some(r#"{"path":"file:///data/pub/x"}"#),
    Some(r#"{"path":"file://localhost/data/./pub"}"#),
    Some(r#"{"path":"//data//pub/"}"#),
    Some(r#"{"lines":"5"}"#),
    Some(r#"{"lines":10,"mode":"r"}"#),
    Some(r#"{"lines":-3,"path":"/data/pub","mode":"r"}"#),
    Some(r#"{"path":"/data/pub/x","mode":"rw","extra":[1,{"a":null}]}"#),
];

fn verdicts(
    p: &dyn Policy,
    tool: &str,
    role: &str,
    axes: &[&str],
    args: Option<&str>,
) -> Vec<Verdict> {
    let request = PolicyRequest {
        tool_id: RStr::from(tool),
        capability: RStr::from(""),
        role: RStr::from(role),
        session: RStr::from(""),
    };
    let axes: Vec<RStr<'_>> = axes.iter().map(|a| RStr::from(*a)).collect();
    let mut out = vec![IndexedDecision::default(); axes.len()];
    let a = p.evaluate_call(&request, args, &axes, &mut out).unwrap();
    out[..a.answer.answered as usize]
        .iter()
        .map(|d| d.verdict)
        .collect()
}

fn cedar_engine(rules: &[Rule]) -> CedarEngine {
    let set = CedarSet::parse(&cedar(rules), "p.cedar", SCHEMA, "s.cedarschema")
        .unwrap_or_else(|e| panic!("{e}\n{}", cedar(rules)));
    CedarEngine::new(set).with_path_arguments(vec!["path".into()])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Every call of the corpus (each tool, role and axis list, with every argument
    /// shape) gets the same verdicts from both engines.
    #[test]
    fn yaml_and_cedar_agree(rules in prop::collection::vec(rule(), 0..8)) {
        let y = PolicyEngine::new(PolicySet::parse(&yaml(&rules), "p.yaml").unwrap());
        let c = cedar_engine(&rules);
        for tool in TOOLS.iter().chain(&["other"]) {
            for role in ROLES {
                for axes in [&[""][..], &["fs.read"], &["fs.read", "fs.write"]] {
                    for args in ARGUMENTS {
                        let (a, b) = (
                            verdicts(&y, tool, role, axes, args),
                            verdicts(&c, tool, role, axes, args),
                        );
                        prop_assert_eq!(
                            &a, &b,
                            "tool {} role {:?} axes {:?} args {:?}\nyaml:\n{}\ncedar:\n{}",
                            tool, role, axes, args, yaml(&rules), cedar(&rules)
                        );
                    }
                }
            }
        }
    }
}

/// The Cedar station alone: a forbid guarded by `context has arguments` still refuses
/// when the arguments are unknown (it reads them, so it might apply), and says they
/// were needed; a path is normalised before `like` sees it.
#[test]
fn cedar_refuses_what_it_cannot_compare() {
    let rules = [
        Rule {
            deny: false,
            tool: Some("read"),
            axis: None,
            role: None,
            cond: Cond::None,
        },
        Rule {
            deny: true,
            tool: Some("read"),
            axis: None,
            role: None,
            cond: Cond::PathUnder("/data/pub"),
        },
    ];
    let c = cedar_engine(&rules);
    let request = PolicyRequest {
        tool_id: RStr::from("read"),
        capability: RStr::from(""),
        role: RStr::from(""),
        session: RStr::from(""),
    };
    let ask = |args: Option<&str>| {
        let mut out = [IndexedDecision::default(); 1];
        let a = c
            .evaluate_call(&request, args, &[RStr::from("")], &mut out)
            .unwrap();
        (
            out[0].verdict,
            a.answer.table.rule(out[0].rule).map(str::to_owned),
            a.arguments_needed,
        )
    };
    assert_eq!(ask(None), (Verdict::DENY, Some("r1".into()), true));
    assert_eq!(
        ask(Some(r#"{"path":"/data/x"}"#)),
        (Verdict::ALLOW, Some("r0".into()), false)
    );
    assert_eq!(ask(Some(r#"{"path":"/data/x/../pub/k"}"#)).0, Verdict::DENY);
    assert_eq!(
        ask(Some(r#"{"path":"/data/x","Path":"/data/pub/k"}"#)).0,
        Verdict::DENY
    );
    assert_eq!(
        ask(Some(r#"{"path":"file:///x#/../data/pub"}"#)).0,
        Verdict::DENY
    );
    assert_eq!(
        ask(Some(r#"{"__proto__":{},"path":"/data/x"}"#)).0,
        Verdict::DENY
    );
    // A tool no argument-reading policy applies to is decided without them.
    let other = PolicyRequest {
        tool_id: RStr::from("write"),
        ..request
    };
    let mut out = [IndexedDecision::default(); 1];
    let a = c
        .evaluate_call(&other, None, &[RStr::from("")], &mut out)
        .unwrap();
    assert_eq!((out[0].verdict, a.arguments_needed), (Verdict::DENY, false));
}
