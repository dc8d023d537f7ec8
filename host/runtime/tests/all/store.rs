//! A host whose sink keeps a chain per session (the PostgreSQL sink, loaded from its
//! cdylib, against a real server): when the server is lost mid-session nothing runs,
//! and once it is back the host opens a new session that names the stopped one, and
//! takes rate-limit tokens from the new sink.

use aegis_record::{Options, SigningKey, Verdict, verify};
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::{CallRequest, PipelineError, Plugin, Profile};
use aegis_test_support::cdylib;
use aegis_test_support::postgres::{self, Shutdown};

fn echo() -> ToolManifest {
    ToolManifest {
        id: "echo".into(),
        kind: ToolKind::Wasm {
            component: std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/wasm/echo.wasm"),
        },
        fs_read: vec![],
        fs_write: vec![],
        net: vec![],
        limits: DEFAULT_LIMITS,
    }
}

#[test]
fn a_stopped_session_is_followed_by_a_new_one_once_the_store_is_back() {
    let mut cluster = postgres::private();
    let db = cluster.fresh_database();
    let writer = format!("{db}_w");
    cluster
        .sql(cluster.superuser(), &format!("CREATE ROLE {writer} LOGIN"))
        .unwrap();
    let config = format!(
        "connection = {:?}\nretention_days = 1\n",
        cluster.conninfo_in(&db, &writer)
    );
    let plugin = Plugin::load(&cdylib("aegis-sink-postgres"), None).unwrap();
    let init = format!(
        "{config}init = {{ connection = {:?} }}\n",
        cluster.conninfo_in(&db, cluster.superuser())
    );
    drop(plugin.audit_sink(&init).unwrap());

    // Rate limits are held in the store, so they must follow it to the new session.
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: deny\nrules:\n  - id: echo-budget\n    action: rate_limit\n    \
         tool: echo\n    rate: { max: 100, per_seconds: 3600 }\n",
    )
    .unwrap();
    let key = SigningKey::generate().unwrap();
    let host = aegis_runtime::Host::builder(Profile::find("default").unwrap())
        .audit_plugin("the test", plugin.clone(), config.clone())
        .policy_file("the test", &policy)
        .signing_key(key.clone())
        .tool(echo())
        .open()
        .unwrap();
    let call = |input: &str| host.call(&CallRequest::new("echo", input.as_bytes()));
    assert_eq!(call("one").unwrap().output.as_deref(), Some(&b"one"[..]));

    cluster.stop(Shutdown::Immediate);
    // The intent cannot be committed: the call does not run.
    assert!(matches!(call("two"), Err(PipelineError::Intent(_))));
    // The session has stopped and no new one can be opened: still nothing runs.
    match call("three") {
        Err(PipelineError::Resume(why)) => assert!(why.contains("cannot reach"), "{why}"),
        other => panic!("expected a refusal to resume, got {other:?}"),
    }
    cluster.start();
    assert_eq!(call("four").unwrap().output.as_deref(), Some(&b"four"[..]));
    assert_eq!(
        host.rate_limits(),
        Some(aegis_runtime::rate::RateHeld::Store)
    );
    assert_eq!(call("five").unwrap().output.as_deref(), Some(&b"five"[..]));
    host.close().unwrap();

    // Two sessions: the stopped one, cut after call one, and its successor.
    let sink = plugin.audit_sink(&config).unwrap();
    let sessions = aegis_runtime::stored_sessions(&sink, "", "")
        .unwrap()
        .unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let read = |id: &str| {
        let mut out = Vec::new();
        aegis_runtime::export_session(&sink, id, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let (first, second) = (read(&sessions[0].id), read(&sessions[1].id));
    let types = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["line_type"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    assert_eq!(types(&first), ["open", "intent", "outcome"]);
    assert_eq!(
        types(&second),
        ["open", "intent", "outcome", "intent", "outcome", "close"]
    );
    let first_open = aegis_record::LineHash::of_line(first.lines().next().unwrap().as_bytes());
    let opened: serde_json::Value = serde_json::from_str(second.lines().next().unwrap()).unwrap();
    assert_eq!(
        opened["provenance"]["resumes"]["open_line_hash"],
        first_open.to_hex()
    );
    let pinned = Options {
        trust: Some(vec![key.public_key().into()]),
        threads: 0,
        approvers: None,
    };
    let report = verify(second.as_bytes(), &pinned).unwrap();
    assert!(
        matches!(report.verdict(), Verdict::Verified(_)),
        "{report:?}"
    );
    let report = verify(first.as_bytes(), &pinned).unwrap();
    assert!(
        !matches!(report.verdict(), Verdict::Tampered(_)),
        "{report:?}"
    );
}
