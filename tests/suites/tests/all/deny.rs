//! Every way a call can end short of success, each through the assembled pipeline and
//! each with the outcome line it must leave. Every test ends by verifying the record.

use aegis_record::{CapabilityOutcome, ExecutionOutcome, OutcomeLine, PolicyOutcome};
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolKind, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{
    ABANDONED, CallClass, CallRequest, HOST_PANIC, NOT_EXECUTED, PARKED, POLICY_BLOCKED,
};
use aegis_suites::{Harness, host_tool, plain_tool, wasm_tool};
use std::collections::BTreeMap;
use std::sync::Arc;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

fn no_handlers() -> BTreeMap<String, HostHandler> {
    BTreeMap::new()
}

/// A refusal before anything ran: no grant, no metrics, no response digest.
fn assert_not_run(o: &OutcomeLine, execution_reason: &str) {
    assert_eq!(
        o.execution,
        ExecutionOutcome::HostDenied {
            reason: execution_reason.into()
        }
    );
    assert_eq!(o.grant_id, None);
    assert_eq!(o.response_digest, None);
    assert_eq!(o.wall_ms, None);
    assert_eq!(o.peak_memory_bytes, None);
}

fn assert_policy_blocked(o: &OutcomeLine) {
    assert_eq!(
        o.capability,
        CapabilityOutcome::Denied {
            reason: POLICY_BLOCKED.into(),
            denied_capability: None
        }
    );
}

#[test]
fn an_allowed_call_records_its_grant_and_the_digest_of_what_it_returned() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], no_handlers());
    let r = h.call("echo", b"hello");
    assert_eq!(r.class(), CallClass::Success);
    assert_eq!(r.output.as_deref(), Some(&b"hello"[..]));
    let checked = h.finish();
    let o = checked.outcome(&r.outcome.call_id);
    assert_eq!(
        o, &r.outcome,
        "the record holds exactly what the caller was told"
    );
    assert_eq!(o.policy, PolicyOutcome::Allowed);
    assert!(matches!(o.capability, CapabilityOutcome::Granted { .. }));
    assert_eq!(o.execution, ExecutionOutcome::Success);
    assert_eq!(
        o.response_digest,
        Some(aegis_record::ResponseDigest::of_response(b"hello"))
    );
    assert_eq!(
        o.request_digest,
        aegis_record::RequestDigest::of_invocation(&[], b"hello"),
        "the digest covers the invocation: no arguments, this input"
    );
    assert!(o.wall_ms.is_some() && o.peak_memory_bytes.is_some());
}

#[test]
fn a_policy_deny_stops_before_capability_and_names_its_rule() {
    let policy = "version: 1\ndefault: allow\nrules:\n  - id: no-echo\n    action: deny\n    tool: echo\n    reason: echo is off today\n";
    let h = Harness::new(policy, vec![plain_tool("echo", "echo")], no_handlers());
    let r = h.call("echo", b"hello");
    assert_eq!(r.class(), CallClass::PolicyDenied);
    assert_eq!(r.output, None);
    let checked = h.finish();
    let o = checked.outcome(&r.outcome.call_id);
    assert_eq!(
        o.policy,
        PolicyOutcome::Denied {
            reason: "echo is off today".into()
        }
    );
    assert_eq!(o.decision_axes.matched_rule.as_deref(), Some("no-echo"));
    assert_policy_blocked(o);
    assert_not_run(o, NOT_EXECUTED);
}

#[test]
fn the_default_deny_refuses_a_tool_no_rule_allows() {
    let h = Harness::new(
        "version: 1\ndefault: deny\n",
        vec![plain_tool("echo", "echo")],
        no_handlers(),
    );
    let r = h.call("echo", b"x");
    assert_eq!(r.class(), CallClass::PolicyDenied);
    let checked = h.finish();
    assert_not_run(checked.outcome(&r.outcome.call_id), NOT_EXECUTED);
}

#[test]
fn a_rate_limit_refuses_the_call_over_the_budget() {
    let policy = "version: 1\ndefault: allow\nrules:\n  - id: echo-budget\n    action: rate_limit\n    tool: echo\n    rate: { max: 2, per_seconds: 3600 }\n";
    let h = Harness::new(policy, vec![plain_tool("echo", "echo")], no_handlers());
    let classes: Vec<CallClass> = (0..3).map(|_| h.call("echo", b"x").class()).collect();
    assert_eq!(
        classes,
        [
            CallClass::Success,
            CallClass::Success,
            CallClass::RateLimited
        ]
    );
    let checked = h.finish();
    let o = checked.outcomes.last().unwrap();
    assert!(matches!(o.policy, PolicyOutcome::RateLimited { .. }));
    assert_eq!(o.decision_axes.matched_rule.as_deref(), Some("echo-budget"));
    assert_policy_blocked(o);
    assert_not_run(o, NOT_EXECUTED);
}

#[test]
fn pending_approval_parks_nothing_and_records_its_approval_id() {
    let policy = "version: 1\ndefault: allow\nrules:\n  - id: ask-first\n    action: pending_approval\n    tool: echo\n";
    let h = Harness::new(policy, vec![plain_tool("echo", "echo")], no_handlers());
    let r = h.call("echo", b"x");
    assert_eq!(r.class(), CallClass::PendingApproval);
    assert_eq!(r.output, None);
    let checked = h.finish();
    let o = checked.outcome(&r.outcome.call_id);
    let PolicyOutcome::PendingApproval { approval_id, .. } = &o.policy else {
        panic!("{:?}", o.policy)
    };
    assert!(!approval_id.is_empty());
    assert_policy_blocked(o);
    assert_not_run(o, PARKED);
}

#[test]
fn an_unregistered_tool_is_refused_by_capability_even_when_policy_allows() {
    let h = Harness::new(ALLOW_ALL, vec![], no_handlers());
    let r = h.call("ghost", b"x");
    assert_eq!(r.class(), CallClass::CapabilityDenied);
    let checked = h.finish();
    let o = checked.outcome(&r.outcome.call_id);
    assert_eq!(o.policy, PolicyOutcome::Allowed);
    let CapabilityOutcome::Denied {
        denied_capability, ..
    } = &o.capability
    else {
        panic!("{:?}", o.capability)
    };
    assert_eq!(denied_capability.as_deref(), Some("tool.registry"));
    assert_not_run(o, NOT_EXECUTED);
}

#[test]
fn a_capability_the_manifest_does_not_declare_is_refused_and_named() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], no_handlers());
    let r = h
        .pipeline
        .call(&CallRequest {
            capability: Some("net.http"),
            ..CallRequest::new("echo", b"x")
        })
        .unwrap();
    assert_eq!(r.class(), CallClass::CapabilityDenied);
    let checked = h.finish();
    let o = checked.outcome(&r.outcome.call_id);
    assert_eq!(o.decision_axes.capability.as_deref(), Some("net.http"));
    let CapabilityOutcome::Denied {
        denied_capability, ..
    } = &o.capability
    else {
        panic!("{:?}", o.capability)
    };
    assert_eq!(denied_capability.as_deref(), Some("net.http"));
}

#[test]
fn a_root_that_vanished_after_registration_is_refused() {
    let roots = tempfile::tempdir().unwrap();
    let notes = roots.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    let h = Harness::new(
        ALLOW_ALL,
        vec![wasm_tool(
            "lister",
            "list-dir",
            &[&notes],
            &[],
            DEFAULT_LIMITS,
        )],
        no_handlers(),
    );
    std::fs::remove_dir(&notes).unwrap();
    let r = h.call("lister", b"");
    // Refused when execution starts, naming the root, before the tool was handed
    // anything (minting makes no system call; see `Grant::check_roots`).
    assert_eq!(r.class(), CallClass::HostDenied);
    assert_eq!(r.output, None);
    let checked = h.finish();
    let ExecutionOutcome::HostDenied { reason } = &checked.outcome(&r.outcome.call_id).execution
    else {
        panic!()
    };
    assert!(
        reason.contains(&notes.display().to_string()) && reason.contains("removed"),
        "{reason}"
    );
}

#[test]
fn policy_limits_narrow_the_grant_the_record_shows() {
    let policy = "version: 1\ndefault: allow\nrules:\n  - id: small\n    action: allow\n    tool: echo\n    limits: { max_output_bytes: 4 }\n";
    let h = Harness::new(policy, vec![plain_tool("echo", "echo")], no_handlers());
    let fits = h.call("echo", b"1234");
    let over = h.call("echo", b"12345");
    assert_eq!(fits.class(), CallClass::Success);
    assert_eq!(over.class(), CallClass::ResourceExceeded);
    assert_eq!(over.output, None);
    let checked = h.finish();
    let o = checked.outcome(&over.outcome.call_id);
    let CapabilityOutcome::Granted { grant } = &o.capability else {
        panic!()
    };
    assert_eq!(grant.max_output_bytes.get(), 4);
    assert_eq!(o.response_digest, None, "nothing left the sandbox");
}

#[test]
fn a_trap_and_a_nonzero_exit_are_recorded_as_traps_without_output() {
    let h = Harness::new(
        ALLOW_ALL,
        vec![
            plain_tool("panic", "panic"),
            plain_tool("exit-code", "exit-code"),
        ],
        no_handlers(),
    );
    let trapped = h.call("panic", b"");
    let exited = h.call_args("exit-code", b"", &["3"]);
    for r in [&trapped, &exited] {
        assert_eq!(r.class(), CallClass::Trap);
        assert_eq!(r.output, None);
        assert_eq!(r.outcome.response_digest, None);
        assert!(r.outcome.wall_ms.is_some());
    }
    let ExecutionOutcome::Trap { message } = &exited.outcome.execution else {
        panic!()
    };
    assert!(message.contains("exited with status"), "{message}");
    h.finish();
}

#[test]
fn each_ceiling_trips_and_is_recorded_by_kind() {
    let h = aegis_suites::exhaustion_harness();
    for (tool, _, kind) in aegis_suites::EXHAUSTERS {
        let r = h.call(tool, b"");
        assert_eq!(r.class(), CallClass::ResourceExceeded, "{tool}");
        assert_eq!(
            r.outcome.execution,
            ExecutionOutcome::ResourceExceeded { kind: kind.into() },
            "{tool}"
        );
        assert_eq!(r.output, None);
        assert_eq!(r.outcome.response_digest, None);
        assert!(matches!(
            r.outcome.capability,
            CapabilityOutcome::Granted { .. }
        ));
    }
    h.finish();
}

#[test]
fn a_panicking_host_handler_is_caught_and_recorded_as_a_trap() {
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "boom".into(),
        Arc::new(|_, _| panic!("the handler fell over")),
    );
    let h = Harness::new(ALLOW_ALL, vec![host_tool("boom")], handlers);
    let r = h.call("boom", b"x");
    assert_eq!(r.class(), CallClass::Trap);
    let ExecutionOutcome::Trap { message } = &r.outcome.execution else {
        panic!()
    };
    assert_eq!(message, "host panic: the handler fell over");
    assert_eq!(r.output, None);
    h.finish();
}

#[test]
fn a_host_tool_without_a_handler_is_not_run() {
    let h = Harness::new(ALLOW_ALL, vec![host_tool("orphan")], no_handlers());
    let r = h.call("orphan", b"x");
    assert_eq!(r.class(), CallClass::HostDenied);
    h.finish();
}

#[test]
fn an_abandoned_call_still_gets_exactly_one_outcome() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], no_handlers());
    let id = {
        let mut call = h.pipeline.begin(&CallRequest::new("echo", b"x")).unwrap();
        assert!(call.authorize().is_some());
        call.call_id().to_owned()
        // Dropped here without finishing: the guard must write the outcome.
    };
    let checked = h.finish();
    let o = checked.outcome(&id);
    assert_eq!(
        o.policy,
        PolicyOutcome::Allowed,
        "what had been decided stays"
    );
    assert!(matches!(o.capability, CapabilityOutcome::Granted { .. }));
    assert_eq!(
        o.execution,
        ExecutionOutcome::HostDenied {
            reason: ABANDONED.into()
        }
    );
    assert_eq!(o.response_digest, None);
}

#[test]
fn a_call_abandoned_before_policy_claims_no_allow() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], no_handlers());
    let id = h
        .pipeline
        .begin(&CallRequest::new("echo", b"x"))
        .unwrap()
        .call_id()
        .to_owned();
    let checked = h.finish();
    let o = checked.outcome(&id);
    assert!(
        matches!(o.policy, PolicyOutcome::Denied { .. }),
        "{:?}",
        o.policy
    );
    assert!(matches!(o.capability, CapabilityOutcome::Denied { .. }));
}

#[test]
fn a_panic_while_a_call_is_open_is_recorded_as_a_host_panic() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], no_handlers());
    let id = std::sync::Mutex::new(String::new());
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut call = h.pipeline.begin(&CallRequest::new("echo", b"x")).unwrap();
        *id.lock().unwrap() = call.call_id().to_owned();
        call.authorize();
        panic!("a bug in the caller between stations");
    }));
    assert!(unwound.is_err());
    let id = id.into_inner().unwrap();
    let checked = h.finish();
    assert_eq!(
        checked.outcome(&id).execution,
        ExecutionOutcome::Trap {
            message: HOST_PANIC.into()
        }
    );
}

#[test]
fn the_intent_is_on_disk_before_the_tool_runs() {
    // The handler reads the record file while it runs: its own intent must be there.
    let record: Arc<std::sync::OnceLock<std::path::PathBuf>> = Arc::default();
    let seen = record.clone();
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "look".into(),
        Arc::new(move |_, _| {
            let text = std::fs::read_to_string(seen.get().unwrap()).unwrap();
            let last = text.lines().last().unwrap_or_default().to_owned();
            Ok(last.into_bytes())
        }),
    );
    let h = Harness::new(ALLOW_ALL, vec![host_tool("look")], handlers);
    record.set(h.record.clone()).unwrap();
    let r = h.call("look", b"x");
    let last = String::from_utf8(r.output.clone().unwrap()).unwrap();
    assert!(last.contains("\"line_type\":\"intent\""), "{last}");
    assert!(last.contains(&r.outcome.call_id), "{last}");
    h.finish();
}

#[test]
fn a_policy_plugin_that_panics_denies_the_call_and_the_host_carries_on() {
    let plugin = aegis_test_support::cdylib("aegis-test-plugin-misbehaving");
    let h = Harness::with_policy_plugin(
        tempfile::tempdir().unwrap(),
        plugin.to_str().unwrap(),
        "",
        vec![plain_tool("panic", "echo"), plain_tool("echo", "echo")],
        no_handlers(),
    );
    // The plugin panics when asked about a tool named "panic".
    let r = h.call("panic", b"x");
    assert_eq!(r.class(), CallClass::PolicyDenied);
    let PolicyOutcome::Denied { reason } = &r.outcome.policy else {
        panic!()
    };
    assert!(
        reason.contains("policy station failed") && reason.contains("panicked on purpose"),
        "{reason}"
    );
    assert_not_run(&r.outcome, NOT_EXECUTED);
    // The same plugin still answers the next call.
    assert_eq!(h.call("echo", b"x").class(), CallClass::PolicyDenied);
    h.finish();
}

#[test]
fn a_handler_stopped_by_the_output_ceiling_is_recorded_as_exceeded() {
    use aegis_runtime::capability::NetRule;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let body = "x".repeat(100);
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let url = format!("http://127.0.0.1:{port}/");
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "fetch".into(),
        Arc::new(move |ctx, _| Ok(ctx.http_get(&url)?.body)),
    );
    let h = Harness::new(
        ALLOW_ALL,
        vec![ToolManifest {
            net: vec![NetRule {
                host: "127.0.0.1".into(),
                ports: vec![port],
                methods: vec!["GET".into()],
            }],
            limits: Limits {
                max_output_bytes: 10,
                ..DEFAULT_LIMITS
            },
            ..host_tool("fetch")
        }],
        handlers,
    );
    let r = h.call("fetch", b"");
    server.join().unwrap();
    assert_eq!(
        r.outcome.execution,
        ExecutionOutcome::ResourceExceeded {
            kind: "output".into()
        }
    );
    assert_eq!(r.output, None);
    let o = h.finish().outcomes.pop().unwrap();
    assert_eq!(o.decision_axes.net.map(|n| n.port), Some(port));
}

#[test]
fn the_record_names_a_single_root_as_given_and_as_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(dir.path()).unwrap().join("notes");
    std::fs::create_dir(&real).unwrap();
    // The manifest names the root through a symlink and a `..`.
    let alias = dir.path().join("alias");
    std::os::unix::fs::symlink(&real, &alias).unwrap();
    let given = alias.join("../notes");
    let h = Harness::new(
        ALLOW_ALL,
        vec![
            wasm_tool("one-root", "list-dir", &[&given], &[], DEFAULT_LIMITS),
            wasm_tool(
                "two-roots",
                "list-dir",
                &[&given, dir.path()],
                &[],
                DEFAULT_LIMITS,
            ),
        ],
        no_handlers(),
    );
    let one = h.call_args("one-root", b"", &[real.to_str().unwrap()]);
    let two = h.call_args("two-roots", b"", &[real.to_str().unwrap()]);
    let checked = h.finish();
    let fs = checked
        .outcome(&one.outcome.call_id)
        .decision_axes
        .fs
        .clone()
        .expect("one root: the axis is recorded");
    assert_eq!(fs.path_raw, given.display().to_string());
    assert_eq!(fs.path_canonical, real.display().to_string());
    assert_eq!(
        checked.outcome(&two.outcome.call_id).decision_axes.fs,
        None,
        "two roots: none is picked"
    );
}

/// A relayed tool (an MCP server's, behind `aegis wrap`) is granted but never run by
/// the host: `Host::call` gives it neither the sandbox nor a handler, even one named
/// like it.
#[test]
fn a_relayed_tool_is_never_run_by_the_host() {
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert("remote".into(), Arc::new(|_, _| panic!("must not run")));
    let relayed = ToolManifest {
        kind: ToolKind::Relayed,
        ..host_tool("remote")
    };
    let h = Harness::new(ALLOW_ALL, vec![relayed], handlers);
    let r = h.call("remote", b"x");
    assert_eq!(r.class(), CallClass::HostDenied);
    assert_eq!(
        r.outcome.execution,
        ExecutionOutcome::HostDenied {
            reason: aegis_runtime::pipeline::RELAYED_NOT_HERE.into()
        }
    );
    assert!(
        r.outcome
            .grant_id
            .as_deref()
            .unwrap()
            .starts_with("relayed-remote-")
    );
    h.finish();
}
