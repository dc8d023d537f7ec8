//! The Cedar station as the host asks it: verdicts, rules and reasons, one count per
//! call, errors that refuse, arguments, load errors, the hash and reload.

use aegis_policy_cedar::{CedarEngine, CedarSet};
use aegis_station_api::abi_stable::std_types::RStr;
use aegis_station_api::{IndexedAnswer, IndexedDecision, Policy, PolicyRequest, Verdict};
use serde_json::json;

const EXAMPLE_POLICY: &str = include_str!("../../../examples/cedar/policy.cedar");
const EXAMPLE_SCHEMA: &str = include_str!("../../../examples/cedar/schema.cedarschema");

/// A schema with the station's model and a few declared arguments.
const SCHEMA: &str = r#"
entity Role;
entity Tool;
type Arguments = { path?: String, size?: Long };
action "call", "fs.read", "fs.write", "net.http" appliesTo {
  principal: [Role],
  resource: [Tool],
  context: { arguments?: Arguments },
};
"#;

/// The same, but `arguments` (and its `path`) required: policies may read them without
/// `has`, and a call whose arguments are unknown makes them fail to evaluate.
const SCHEMA_REQUIRED_ARGS: &str = r#"
entity Role;
entity Tool;
action "call", "fs.read", "fs.write", "net.http" appliesTo {
  principal: [Role],
  resource: [Tool],
  context: { arguments: { path: String, size: Long } },
};
"#;

fn engine(policies: &str, schema: &str) -> CedarEngine {
    CedarEngine::new(
        CedarSet::parse(policies, "p.cedar", schema, "s.cedarschema")
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

fn load_error(policies: &str, schema: &str) -> String {
    match CedarSet::parse(policies, "p.cedar", schema, "s.cedarschema") {
        Ok(_) => panic!("loaded: {policies}"),
        Err(e) => e.to_string(),
    }
}

/// One decided axis, read back through the answer's table.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    verdict: Verdict,
    rule: Option<String>,
    reason: String,
    max_output: Option<u64>,
    max_wall: Option<u64>,
}

fn ask_full(
    e: &CedarEngine,
    tool: &str,
    role: &str,
    axes: &[&str],
    arguments: Option<&serde_json::Value>,
) -> (Vec<Seen>, IndexedAnswer) {
    let request = PolicyRequest {
        tool_id: tool.into(),
        capability: "".into(),
        role: role.into(),
        session: "".into(),
    };
    let axes: Vec<RStr<'_>> = axes.iter().map(|&a| RStr::from(a)).collect();
    let mut out = vec![IndexedDecision::default(); axes.len()];
    let answer = e.decide(&request, &axes, arguments, &mut out).unwrap();
    let seen = out[..answer.answered as usize]
        .iter()
        .map(|d| Seen {
            verdict: d.verdict,
            rule: answer.table.rule(d.rule).map(str::to_owned),
            reason: answer
                .table
                .reason(d.reason)
                .expect("every decision's reason is in its table")
                .to_owned(),
            max_output: d.limits.max_output_bytes.into_option(),
            max_wall: d.limits.max_wall_ms.into_option(),
        })
        .collect();
    (seen, answer)
}

fn ask(e: &CedarEngine, tool: &str, axes: &[&str]) -> Vec<Seen> {
    ask_full(e, tool, "", axes, None).0
}

fn ask_args(e: &CedarEngine, tool: &str, arguments: serde_json::Value) -> Seen {
    ask_full(e, tool, "", &[""], Some(&arguments)).0.remove(0)
}

#[test]
fn the_example_decides_as_the_yaml_example_does() {
    let e = engine(EXAMPLE_POLICY, EXAMPLE_SCHEMA);
    let notes = &ask(&e, "read-notes", &["fs.read"])[0];
    assert_eq!(notes.verdict, Verdict::ALLOW);
    assert_eq!(notes.rule.as_deref(), Some("read-notes"));
    assert_eq!(notes.max_output, Some(65536));

    let shell = &ask(&e, "shell", &[""])[0];
    assert_eq!(shell.verdict, Verdict::DENY);
    assert_eq!(shell.rule.as_deref(), Some("no-shell"));
    assert_eq!(shell.reason, "shell is never allowed");

    let (deploy, answer) = ask_full(&e, "deploy", "", &[""], None);
    assert_eq!(deploy[0].verdict, Verdict::PENDING_APPROVAL);
    assert_eq!(deploy[0].rule.as_deref(), Some("deploy-needs-a-human"));
    let approval = answer
        .approval_id
        .into_option()
        .expect("a park names itself");
    assert!(
        approval.starts_with("apr-") && approval.len() == 36,
        "{approval}"
    );

    let other = &ask(&e, "unknown-tool", &[""])[0];
    assert_eq!(other.verdict, Verdict::DENY);
    assert_eq!(other.rule, None, "the default decides, no rule");
    assert!(
        other.reason.contains("no policy permits"),
        "{}",
        other.reason
    );

    let echo = &ask(&e, "echo", &[""])[0];
    assert_eq!(echo.verdict, Verdict::ALLOW);
    assert_eq!(echo.rule.as_deref(), Some("echo"));
    assert_eq!(echo.reason, "echo is fine, sixty times a minute");
}

#[test]
fn an_unnamed_role_is_the_empty_role_entity_and_nothing_else() {
    let e = engine(
        r#"
        @id("anonymous")
        permit (principal == Role::"", action, resource == Tool::"a");
        @id("admin")
        permit (principal == Role::"admin", action, resource == Tool::"b");
        "#,
        SCHEMA,
    );
    let verdict = |tool: &str, role: &str| ask_full(&e, tool, role, &[""], None).0[0].verdict;
    assert_eq!(verdict("a", ""), Verdict::ALLOW);
    assert_eq!(verdict("a", "admin"), Verdict::DENY);
    assert_eq!(verdict("b", ""), Verdict::DENY);
    assert_eq!(verdict("b", "admin"), Verdict::ALLOW);
}

#[test]
fn each_axis_is_its_own_action_and_the_first_refusal_stops_the_ask() {
    let e = engine(
        r#"
        @id("all")
        permit (principal, action, resource);
        @id("no-writes")
        forbid (principal, action == Action::"fs.write", resource);
        "#,
        SCHEMA,
    );
    let seen = ask(&e, "t", &["fs.read", "fs.write", "net.http"]);
    assert_eq!(seen.len(), 2, "stops after the refusal: {seen:?}");
    assert_eq!(seen[0].verdict, Verdict::ALLOW);
    assert_eq!(seen[1].verdict, Verdict::DENY);
    assert_eq!(seen[1].rule.as_deref(), Some("no-writes"));
    // An axis that names no capability is Action::"call".
    assert_eq!(ask(&e, "t", &[""])[0].verdict, Verdict::ALLOW);
}

#[test]
fn action_groups_from_the_schema_are_seen() {
    let schema = r#"
        entity Role;
        entity Tool;
        action "fs";
        action "call", "net.http" appliesTo { principal: [Role], resource: [Tool] };
        action "fs.read", "fs.write" in ["fs"] appliesTo { principal: [Role], resource: [Tool] };
    "#;
    let e = engine(
        r#"@id("files") permit (principal, action in Action::"fs", resource);"#,
        schema,
    );
    assert_eq!(ask(&e, "t", &["fs.write"])[0].verdict, Verdict::ALLOW);
    assert_eq!(ask(&e, "t", &["net.http"])[0].verdict, Verdict::DENY);
}

#[test]
fn a_rate_limit_counts_one_call_once_across_its_axes() {
    let e = engine(
        r#"@id("two") @rate_limit("2/minute") permit (principal, action, resource);"#,
        SCHEMA,
    );
    let three = ["fs.read", "fs.write", "net.http"];
    for _ in 0..2 {
        let seen = ask(&e, "t", &three);
        assert!(seen.iter().all(|s| s.verdict == Verdict::ALLOW), "{seen:?}");
        assert_eq!(seen[0].reason, "within its rate limit (policy two)");
    }
    let third = ask(&e, "t", &three);
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].verdict, Verdict::RATE_LIMIT);
    assert_eq!(third[0].rule.as_deref(), Some("two"));
    assert_eq!(third[0].reason, "rate limit: 2 calls per 60 s (two)");
}

#[test]
fn ceilings_of_every_satisfied_permit_apply_together() {
    let e = engine(
        r#"
        @id("a") @max_output_bytes("100") @max_wall_ms("9000")
        permit (principal, action, resource);
        @id("b") @max_output_bytes("5000") @max_wall_ms("50")
        permit (principal, action, resource == Tool::"t");
        "#,
        SCHEMA,
    );
    let s = &ask(&e, "t", &[""])[0];
    assert_eq!((s.max_output, s.max_wall), (Some(100), Some(50)));
    let s = &ask(&e, "u", &[""])[0];
    assert_eq!((s.max_output, s.max_wall), (Some(100), Some(9000)));
}

#[test]
fn several_forbids_are_all_named() {
    let e = engine(
        r#"
        permit (principal, action, resource);
        @id("z-last") forbid (principal, action, resource == Tool::"t");
        @id("a-first") forbid (principal, action, resource);
        "#,
        SCHEMA,
    );
    let (seen, answer) = ask_full(&e, "t", "", &[""], None);
    assert_eq!(seen[0].rule.as_deref(), Some("a-first"));
    assert_eq!(seen[0].reason, "forbidden by policies a-first, z-last");
    // That answer has its own table; the set's is untouched.
    assert!(!std::ptr::eq(
        &*answer.table,
        &**e.current().decision_table()
    ));
    assert_eq!(ask(&e, "u", &[""])[0].reason, "forbidden by policy a-first");
}

#[test]
fn a_path_rule_reads_the_arguments() {
    let e = engine(
        r#"
        @id("data-only")
        permit (principal, action, resource == Tool::"read")
        when { context has arguments && context.arguments has path
               && context.arguments.path like "/data/*" };
        "#,
        SCHEMA,
    );
    let allowed = ask_args(&e, "read", json!({"path": "/data/notes.txt"}));
    assert_eq!(allowed.verdict, Verdict::ALLOW);
    assert_eq!(allowed.rule.as_deref(), Some("data-only"));
    assert_eq!(
        ask_args(&e, "read", json!({"path": "/etc/passwd"})).verdict,
        Verdict::DENY
    );
    assert_eq!(ask_args(&e, "read", json!({})).verdict, Verdict::DENY);
    // Unknown arguments: no `arguments` in context; the guarded permit is not satisfied.
    assert_eq!(ask(&e, "read", &[""])[0].verdict, Verdict::DENY);
    // `like` is a raw string match: this is why the host normalises paths first.
    assert_eq!(
        ask_args(&e, "read", json!({"path": "/data/../etc/passwd"})).verdict,
        Verdict::ALLOW
    );
}

#[test]
fn a_policy_that_fails_to_evaluate_refuses_even_when_a_permit_is_satisfied() {
    // Cedar itself would allow each of these: the forbid errors and is skipped.
    let e = engine(
        r#"
        @id("all") permit (principal, action, resource);
        @id("no-etc") forbid (principal, action, resource)
        when { context.arguments.path like "/etc/*" };
        "#,
        SCHEMA_REQUIRED_ARGS,
    );
    let unknown = &ask(&e, "t", &[""])[0];
    assert_eq!(unknown.verdict, Verdict::DENY, "arguments unknown");
    assert_eq!(unknown.rule.as_deref(), Some("no-etc"));
    assert!(
        unknown.reason.contains("failed to evaluate"),
        "{}",
        unknown.reason
    );
    // Present but missing the attribute.
    assert_eq!(ask_args(&e, "t", json!({"size": 1})).verdict, Verdict::DENY);
    // Present with the wrong type (requests are not validated against the schema).
    assert_eq!(ask_args(&e, "t", json!({"path": 7})).verdict, Verdict::DENY);
    // And the rule does its job when it can.
    assert_eq!(
        ask_args(&e, "t", json!({"path": "/etc/x"})).verdict,
        Verdict::DENY
    );
    assert_eq!(
        ask_args(&e, "t", json!({"path": "/srv/x"})).verdict,
        Verdict::ALLOW
    );
}

#[test]
fn numbers_cedar_cannot_hold_refuse_rather_than_compare() {
    let e = engine(
        r#"
        @id("small") permit (principal, action, resource)
        when { context has arguments && context.arguments has size
               && context.arguments.size < 10 };
        "#,
        SCHEMA,
    );
    assert_eq!(
        ask_args(&e, "t", json!({"size": 9})).verdict,
        Verdict::ALLOW
    );
    assert_eq!(
        ask_args(&e, "t", json!({"size": 11})).verdict,
        Verdict::DENY
    );
    for odd in [json!(9.5), json!(u64::MAX), json!(-0.0)] {
        let s = ask_args(&e, "t", json!({ "size": odd }));
        assert_eq!(s.verdict, Verdict::DENY, "{odd}");
        assert!(
            s.reason.contains("failed to evaluate"),
            "{odd}: {}",
            s.reason
        );
    }
}

#[test]
fn arguments_that_are_not_an_object_or_too_deep_refuse() {
    let e = engine("permit (principal, action, resource);", SCHEMA);
    assert_eq!(ask_args(&e, "t", json!({"a": 1})).verdict, Verdict::ALLOW);
    for bad in [json!([1]), json!("x"), json!(null)] {
        let s = ask_args(&e, "t", bad.clone());
        assert_eq!(s.verdict, Verdict::DENY, "{bad}");
        assert_eq!(s.rule, None);
    }
    let mut deep = json!(1);
    for _ in 0..(aegis_policy_cedar::MAX_ARGUMENT_DEPTH + 2) {
        deep = json!({ "x": deep });
    }
    assert_eq!(ask_args(&e, "t", deep).verdict, Verdict::DENY);
}

#[test]
fn entity_escapes_in_arguments_stay_plain_records() {
    // Cedar's JSON reader would turn {"__entity": …} into the entity Role::"admin".
    let schema = r#"
        entity Role;
        entity Tool;
        action "call" appliesTo {
          principal: [Role], resource: [Tool],
          context: { arguments?: { who?: Role } },
        };
    "#;
    let e = engine(
        r#"
        permit (principal, action, resource)
        when { context has arguments && context.arguments has who
               && context.arguments.who == Role::"admin" };
        "#,
        schema,
    );
    let forged = json!({"who": {"__entity": {"type": "Role", "id": "admin"}}});
    let s = ask_args(&e, "t", forged);
    assert_eq!(s.verdict, Verdict::DENY, "a record is not an entity: {s:?}");
}

#[test]
fn load_errors_name_file_line_and_problem() {
    let cases: &[(&str, &str, &str)] = &[
        // Syntax.
        (
            "permit (principal, action, resource);\npermit (principal, action);\n",
            "p.cedar:2:",
            "",
        ),
        // Strict validation: an attribute the schema does not declare.
        (
            "permit (principal, action, resource);\n\npermit (principal, action, resource)\n  when { context.nope == 1 };\n",
            "p.cedar:4:",
            "does not validate",
        ),
        // Strict validation: an optional attribute read without `has`.
        (
            "permit (principal, action, resource)\n  when { context.arguments.path == \"/x\" };\n",
            "p.cedar:2:",
            "does not validate",
        ),
        // An entity type the schema does not declare.
        (
            "\n\nforbid (principal == User::\"x\", action, resource);\n",
            "p.cedar:3:",
            "does not validate",
        ),
        // The station's annotations.
        (
            "\n@rate_limt(\"1/second\")\npermit (principal, action, resource);\n",
            "p.cedar:2:",
            "@rate_limt: unknown annotation",
        ),
        (
            "@rate_limit(\"0/second\")\npermit (principal, action, resource);\n",
            "p.cedar:1:",
            "@rate_limit: expected",
        ),
        (
            "@rate_limit(\"5/fortnight\")\npermit (principal, action, resource);\n",
            "p.cedar:1:",
            "@rate_limit: expected",
        ),
        (
            "@rate_limit(\"5/minute\")\nforbid (principal, action, resource);\n",
            "p.cedar:1:",
            "only a permit takes it",
        ),
        (
            "@max_wall_ms(\"soon\")\npermit (principal, action, resource);\n",
            "p.cedar:1:",
            "@max_wall_ms: expected a whole number",
        ),
        (
            "@id(\"a\") permit (principal, action, resource);\n@id(\"a\")\nforbid (principal, action, resource);\n",
            "p.cedar:2:",
            "duplicate policy id \"a\" (first at line 1)",
        ),
        (
            "@pending_approval @rate_limit(\"1/second\")\npermit (principal, action, resource);\n",
            "p.cedar:1:",
            "together",
        ),
        (
            "permit (principal == ?principal, action, resource);\n",
            "p.cedar:1:",
            "template",
        ),
    ];
    for (policies, at, what) in cases {
        let e = load_error(policies, SCHEMA);
        assert!(e.starts_with(at), "{policies:?}: {e}");
        assert!(e.contains(what), "{policies:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn a_schema_that_does_not_model_the_station_is_refused() {
    let e = load_error(
        "permit (principal, action, resource);",
        "entity User; entity Doc; action \"view\" appliesTo { principal: [User], resource: [Doc] };",
    );
    assert!(
        e.starts_with("s.cedarschema:0: schema: no action \"call\""),
        "{e}"
    );
    let e = load_error(
        "permit (principal, action, resource);",
        "entity Role; entity Doc; action \"call\" appliesTo { principal: [Role], resource: [Doc] };",
    );
    assert!(
        e.contains("must apply to principal Role and resource Tool"),
        "{e}"
    );
    let e = load_error(
        "permit (principal, action, resource);",
        "entity Role;\nentity ;\n",
    );
    assert!(e.starts_with("s.cedarschema:2: schema:"), "{e}");
}

fn hash(policies: &str, schema: &str) -> [u8; 32] {
    *CedarSet::parse(policies, "p", schema, "s")
        .unwrap_or_else(|e| panic!("{e}"))
        .hash()
        .as_bytes()
}

#[test]
fn the_hash_covers_the_parsed_set_not_its_text() {
    let base = hash(EXAMPLE_POLICY, EXAMPLE_SCHEMA);
    // Whitespace, comments and line breaks: the same set.
    let respaced: String = EXAMPLE_POLICY
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("  {}   // note\n\n", l.replace("(", " ( ")))
        .collect();
    assert_eq!(hash(&respaced, EXAMPLE_SCHEMA), base);
    let schema_respaced: String = EXAMPLE_SCHEMA
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(hash(EXAMPLE_POLICY, &schema_respaced), base);
    // Policies named by @id hash by id, not by their place in the file.
    let mut blocks: Vec<&str> = EXAMPLE_POLICY.split("\n\n").skip(1).collect();
    blocks.reverse();
    assert_eq!(hash(&blocks.join("\n\n"), EXAMPLE_SCHEMA), base);

    // Any change the evaluator reads moves it.
    for changed in [
        EXAMPLE_POLICY.replace("60/minute", "61/minute"),
        EXAMPLE_POLICY.replace("65536", "65535"),
        EXAMPLE_POLICY.replace("Tool::\"shell\"", "Tool::\"shell2\""),
        EXAMPLE_POLICY.replace("@id(\"no-shell\")", "@id(\"no-shells\")"),
        EXAMPLE_POLICY.replace("never allowed", "never allowed."),
        EXAMPLE_POLICY.replace("forbid (principal", "permit (principal"),
    ] {
        assert_ne!(hash(&changed, EXAMPLE_SCHEMA), base, "{changed}");
    }
    assert_ne!(
        hash(
            EXAMPLE_POLICY,
            &EXAMPLE_SCHEMA.replace("path?: String", "path?: String, mode?: Long")
        ),
        base
    );
}

#[test]
fn a_bad_reload_keeps_the_old_set_and_a_good_one_replaces_it() {
    let e = engine(EXAMPLE_POLICY, EXAMPLE_SCHEMA);
    let before = e.policy_set_hash();
    let bad = e.reload(
        "permit (principal, action, resource) when { context.nope };",
        "p.cedar",
        EXAMPLE_SCHEMA,
        "s.cedarschema",
    );
    assert!(bad.is_err());
    assert_eq!(e.policy_set_hash(), before);
    assert_eq!(ask(&e, "shell", &[""])[0].rule.as_deref(), Some("no-shell"));

    e.reload(
        "@id(\"everything\") permit (principal, action, resource);",
        "p.cedar",
        EXAMPLE_SCHEMA,
        "s.cedarschema",
    )
    .unwrap();
    assert_ne!(e.policy_set_hash(), before);
    let s = &ask(&e, "shell", &[""])[0];
    assert_eq!(
        (s.verdict, s.rule.as_deref()),
        (Verdict::ALLOW, Some("everything"))
    );
}

#[test]
fn config_reads_files_and_reload_files_keeps_the_old_set_on_a_bad_edit() {
    let dir = tempfile::tempdir().unwrap();
    let (p, s) = (dir.path().join("p.cedar"), dir.path().join("s.cedarschema"));
    std::fs::write(&p, EXAMPLE_POLICY).unwrap();
    std::fs::write(&s, EXAMPLE_SCHEMA).unwrap();
    let config = format!(
        "policies = {:?}\nschema = {:?}\n",
        p.display().to_string(),
        s.display().to_string()
    );
    let e = CedarEngine::from_config(&config).unwrap();
    let before = e.policy_set_hash();
    std::fs::write(&p, "permit (principal, action, resource) when { 1 };").unwrap();
    let err = e.reload_files().unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}:1:", p.display())), "{err}");
    assert_eq!(e.policy_set_hash(), before);

    let err = CedarEngine::from_config(&format!("{config}extra = 1\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("extra"), "{err}");
    let err = CedarEngine::from_config("policies = \"/nonexistent.cedar\"\nschema = \"/x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("/nonexistent.cedar:"), "{err}");
}

#[test]
fn the_owned_answers_agree_with_the_indexed_ones() {
    let e = engine(EXAMPLE_POLICY, EXAMPLE_SCHEMA);
    let request = PolicyRequest {
        tool_id: "shell".into(),
        capability: "fs.read".into(),
        role: "".into(),
        session: "".into(),
    };
    let d = e.evaluate(&request).unwrap();
    assert_eq!(d.verdict, Verdict::DENY);
    assert_eq!(d.matched_rule.into_option().unwrap().as_str(), "no-shell");
    let axes = [RStr::from("fs.read"), RStr::from("fs.write")];
    let all = e.evaluate_axes(&request, &axes).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].reason.as_str(), "shell is never allowed");
}
