//! A call that owns itself: an [`OwnedCall`] begun on one thread can be kept in a map
//! keyed by request id and finished, or dropped, on another, and the record still
//! holds exactly one outcome per intent and verifies. A caller that ran the tool
//! somewhere else (a relayed server) finishes it in the host's own vocabulary.
//!
//! These exercise API that did not exist before (`Host::begin`, `OwnedCall`,
//! `Executed::Relayed`): on the old code they do not compile.

use aegis_record::json::{Object, Value};
use aegis_record::line::Stop;
use aegis_record::refusal::{Cause, Refusal};
use aegis_record::{CapabilityOutcome, ExecutionOutcome, PolicyOutcome, ResponseDigest};
use aegis_runtime::capability::DEFAULT_LIMITS;
use aegis_runtime::capability::Grant;
use aegis_runtime::pipeline::{ABANDONED, CallRequest, HOST_PANIC};
use aegis_runtime::{CallClass, Ending, Executed, Host, OwnedCall, Profile};
use aegis_suites::{Harness, plain_tool, wasm_tool};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

fn harness() -> Harness {
    Harness::new(
        ALLOW_ALL,
        vec![plain_tool("echo", "echo"), plain_tool("relayed", "echo")],
        Default::default(),
    )
}

/// The guard can cross threads and outlive the scope that began it.
#[test]
fn an_owned_call_is_send_and_static() {
    fn movable<T: Send + 'static>() {}
    movable::<OwnedCall>();
    movable::<Host>();
}

#[test]
fn begun_on_one_thread_kept_in_a_map_and_finished_on_another() {
    let h = harness();
    let calls: Arc<Mutex<HashMap<u64, (OwnedCall, Grant)>>> = Arc::default();
    let mut ids = Vec::new();
    for request_id in 0..4u64 {
        let input = format!("request {request_id}");
        let mut call = h
            .pipeline
            .begin(&CallRequest::new("echo", input.as_bytes()))
            .unwrap();
        let grant = call.authorize().expect("allowed");
        ids.push(call.call_id().to_owned());
        calls.lock().unwrap().insert(request_id, (call, grant));
    }
    let finisher = {
        let calls = calls.clone();
        std::thread::spawn(move || {
            // Finished in the reverse order, by whichever thread holds the map.
            (0..4u64)
                .rev()
                .map(|request_id| {
                    let (call, grant) = calls.lock().unwrap().remove(&request_id).unwrap();
                    let input = format!("request {request_id}");
                    let request = CallRequest::new("echo", input.as_bytes());
                    let executed = call.pipeline().run_tool(&request, &grant);
                    call.finish(executed).expect("recorded")
                })
                .collect::<Vec<_>>()
        })
    };
    let records = finisher.join().unwrap();
    assert!(calls.lock().unwrap().is_empty());
    for r in &records {
        assert_eq!(r.class(), CallClass::Success);
        assert!(r.output.as_deref().unwrap().starts_with(b"request "));
    }
    let checked = h.finish();
    for id in &ids {
        assert_eq!(checked.outcome(id).execution, ExecutionOutcome::Success);
    }
}

#[test]
fn dropped_on_another_thread_it_records_the_abandonment() {
    let h = harness();
    let mut call = h.pipeline.begin(&CallRequest::new("echo", b"x")).unwrap();
    assert!(call.authorize().is_some());
    let id = call.call_id().to_owned();
    std::thread::spawn(move || drop(call)).join().unwrap();
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
fn a_thread_that_panics_holding_one_records_a_host_panic() {
    let h = harness();
    let call = h.pipeline.begin(&CallRequest::new("echo", b"x")).unwrap();
    let id = call.call_id().to_owned();
    let worker = std::thread::spawn(move || {
        let _held = call;
        panic!("a bug in the worker that held the call");
    });
    assert!(worker.join().is_err());
    let checked = h.finish();
    let o = checked.outcome(&id);
    assert_eq!(
        o.execution,
        ExecutionOutcome::Trap {
            message: HOST_PANIC.into()
        }
    );
    assert!(
        matches!(o.policy, PolicyOutcome::Denied { .. }),
        "never asked, never allowed"
    );
}

#[test]
fn the_host_is_not_closed_under_an_open_call() {
    let h = harness();
    let call = h.pipeline.begin(&CallRequest::new("echo", b"x")).unwrap();
    let Harness {
        dir,
        pipeline,
        key,
        record,
    } = h;
    let Err(host) = pipeline.into_audit() else {
        panic!("the session was handed back while a call was open");
    };
    drop(call);
    let h = Harness {
        dir,
        pipeline: host,
        key,
        record,
    };
    h.finish();
}

/// A relayed call ends in the host's vocabulary: no sandbox type is named, and the
/// record says what the relay saw.
#[test]
fn a_relayed_call_is_finished_with_the_hosts_own_endings() {
    let h = harness();
    let finish = |ending: Ending, response: Option<&[u8]>| {
        let mut call = h
            .pipeline
            .begin(&CallRequest::new("relayed", b"{}"))
            .unwrap();
        assert!(call.authorize().is_some());
        call.finish(Executed::Relayed {
            ending,
            response: response.map(<[u8]>::to_vec),
            wall_ms: 7,
        })
        .unwrap()
    };
    let answer = br#"{"result":{"content":[]}}"#;
    let ok = finish(Ending::Success, Some(answer));
    assert_eq!(ok.class(), CallClass::Success);
    assert_eq!(ok.output.as_deref(), Some(&answer[..]));
    assert_eq!(
        ok.outcome.response_digest,
        Some(ResponseDigest::of_response(answer))
    );
    assert_eq!(
        ok.outcome.peak_memory_bytes, None,
        "not measured, not claimed"
    );
    assert_eq!(ok.outcome.wall_ms.map(|w| w.get()), Some(7));

    let refusal = br#"{"result":{"isError":true}}"#;
    let declined = finish(Ending::ToolError("isError".into()), Some(refusal));
    assert_eq!(declined.class(), CallClass::Trap);
    assert_eq!(
        declined.output.as_deref(),
        Some(&refusal[..]),
        "the error result is the answer handed back"
    );
    assert_eq!(
        declined.outcome.response_digest,
        Some(ResponseDigest::of_response(refusal))
    );

    let died = finish(
        Ending::ServerDied("exit status 137".into()),
        Some(b"partial"),
    );
    assert_eq!(
        died.outcome.execution,
        ExecutionOutcome::Trap {
            message: "the server died: exit status 137".into()
        }
    );
    assert_eq!(
        died.output, None,
        "nothing is handed back from a dead server"
    );
    assert_eq!(died.outcome.response_digest, None);

    let cancelled = finish(Ending::Cancelled("the client cancelled".into()), None);
    assert_eq!(
        cancelled.outcome.execution,
        ExecutionOutcome::Trap {
            message: "cancelled: the client cancelled".into()
        }
    );
    assert_eq!(cancelled.output, None);
    h.finish();
}

fn open_line(bytes: &[u8]) -> Object {
    let first = bytes.split(|&b| b == b'\n').next().unwrap();
    let Ok(Value::Object(o)) = aegis_record::json::parse(first) else {
        panic!("the first line is an object");
    };
    o
}

fn member<'a>(o: &'a Object, key: &str) -> &'a Value {
    o.get(key).unwrap_or_else(|| panic!("no {key}"))
}

/// An override is recorded next to what the profile said: the policy file's path and
/// the hash of the set it loaded (the one every outcome then names), and the record
/// file that replaced the profile's sink.
#[test]
fn overrides_are_recorded_next_to_what_the_profile_said() {
    let h = harness();
    let r = h.call("echo", b"x");
    let policy_file = h.dir.path().join("policy.yaml");
    let record = h.record.clone();
    let (dir, host) = (h.dir, h.pipeline);
    host.into_audit().unwrap().session.close().unwrap();
    let bytes = std::fs::read(&record).unwrap();
    drop(dir);
    let open = open_line(&bytes);
    let Value::Object(provenance) = member(&open, "provenance") else {
        panic!("provenance is an object")
    };
    let Value::Array(overrides) = member(provenance, "overrides") else {
        panic!("overrides is an array")
    };
    let entry = |station: &str| -> &Object {
        overrides
            .iter()
            .find_map(|v| match v {
                Value::Object(o) if *member(o, "station") == Value::from(station) => Some(o),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no override of {station}"))
    };
    let policy = entry("policy");
    assert_eq!(*member(policy, "by"), Value::from(aegis_suites::SUITE));
    assert_eq!(
        *member(policy, "profile_plugin"),
        Value::from(
            Profile::embedded("default")
                .unwrap()
                .policy
                .spec
                .to_string()
        )
    );
    assert_eq!(*member(policy, "plugin"), Value::from("policy-yaml"));
    assert_eq!(
        *member(policy, "path"),
        Value::from(policy_file.display().to_string())
    );
    assert_eq!(
        *member(policy, "policy_set_hash"),
        Value::from(r.outcome.policy_set_hash),
        "the set the override loaded is the one the call was decided under"
    );
    let audit = entry("audit");
    assert_eq!(*member(audit, "by"), Value::from(aegis_suites::SUITE));
    assert_eq!(
        *member(audit, "profile_plugin"),
        Value::from(Profile::embedded("default").unwrap().audit.spec.to_string()),
        "the sink the profile named, next to the one that replaced it"
    );
    assert_eq!(*member(audit, "plugin"), Value::from("file-sink"));
    assert_eq!(
        *member(audit, "path"),
        Value::from(record.display().to_string())
    );
}

/// With no override the open line has no `overrides` member: the shape the record had
/// before the member existed.
#[test]
fn without_overrides_the_open_line_is_unchanged() {
    let host = Host::builder(Profile::embedded("default").unwrap())
        .sandbox(aegis_suites::sandbox())
        .open()
        .unwrap();
    let bytes = host.into_audit().unwrap().close_and_export().unwrap();
    let open = open_line(&bytes);
    let Value::Object(provenance) = member(&open, "provenance") else {
        panic!("provenance is an object")
    };
    assert!(provenance.get("overrides").is_none());
}

/// A call its caller refused before any station (the MCP relay refuses a call to a tool
/// the server never listed this way): the record says neither policy nor capability was
/// reached, and every consumer classes it as the host's refusal, never as a policy
/// denial, since no policy was asked. Variants: refused by the caller, abandoned before
/// the stations; and a real policy denial stays one.
#[test]
fn a_call_stopped_before_the_stations_is_not_a_policy_denial() {
    let h = harness();
    let refused = h
        .pipeline
        .refuse_before_stations(
            &CallRequest::new("relayed", b""),
            &Refusal::new(Cause::PinMismatch, "tool \"x\" was never listed"),
        )
        .unwrap();
    assert!(refused.outcome.stopped_before_the_stations());
    assert_eq!(refused.outcome.stop, Some(Stop::new(Cause::PinMismatch)));
    assert_eq!(refused.class(), CallClass::HostDenied);
    assert_eq!(CallClass::of(&refused.outcome), CallClass::HostDenied);
    assert!(
        matches!(&refused.outcome.execution, ExecutionOutcome::HostDenied { reason } if reason.contains("never listed"))
    );
    // Dropped before the stations: abandoned, and the host's too.
    let call = h.pipeline.begin(&CallRequest::new("echo", b"")).unwrap();
    let abandoned_id = call.call_id().to_owned();
    drop(call);
    // A policy that denies is still a policy denial, with capability blocked by it.
    let deny = Harness::new(
        "version: 1\ndefault: deny\n",
        vec![plain_tool("echo", "echo")],
        Default::default(),
    );
    let mut call = deny.pipeline.begin(&CallRequest::new("echo", b"")).unwrap();
    assert!(call.authorize().is_none());
    let denied = call.finish(Executed::NotRun).unwrap();
    assert!(!denied.outcome.stopped_before_the_stations());
    assert_eq!(denied.class(), CallClass::PolicyDenied);
    // Read back from the verified file, the lines class the same.
    let refused_id = refused.outcome.call_id.clone();
    let checked = h.finish();
    assert_eq!(
        CallClass::of(checked.outcome(&refused_id)),
        CallClass::HostDenied
    );
    let abandoned = checked.outcome(&abandoned_id);
    assert_eq!(CallClass::of(abandoned), CallClass::HostDenied);
    assert!(
        matches!(&abandoned.execution, ExecutionOutcome::HostDenied { reason } if reason == ABANDONED)
    );
}

/// Every exit path writes `stop`, and a reader of a file written before the member
/// existed (`aegis_record::legacy`, the same line without it) comes to the same station
/// and, where the old words told causes apart, the same cause and axis: old and new
/// records class and recheck alike.
#[test]
fn every_stop_written_is_what_an_older_line_states() {
    let dir = tempfile::tempdir().unwrap();
    let policy = "version: 1\ndefault: allow\nrules:\n  \
        - id: no-write\n    action: deny\n    tool: writer\n    capability: fs.write\n  \
        - id: budget\n    action: rate_limit\n    tool: limited\n    rate: { max: 1, per_seconds: 3600 }\n  \
        - id: ask\n    action: pending_approval\n    tool: parked\n  \
        - id: no-shell\n    action: deny\n    tool: shell\n";
    let h = Harness::new(
        policy,
        vec![
            plain_tool("echo", "echo"),
            wasm_tool("writer", "write-file", &[], &[dir.path()], DEFAULT_LIMITS),
            plain_tool("limited", "echo"),
            plain_tool("parked", "echo"),
            plain_tool("shell", "echo"),
        ],
        Default::default(),
    );
    let call = |tool: &str, arguments: Option<&str>| {
        h.pipeline
            .call(&CallRequest {
                arguments,
                ..CallRequest::new(tool, b"")
            })
            .unwrap()
            .outcome
    };
    // The budget's one call runs; the next is limited.
    assert!(call("limited", None).stop.is_none());
    let mut outcomes = vec![
        call("writer", None),
        call("limited", None),
        call("parked", None),
        call("shell", None),
        call("unknown", None),
        call("echo", Some(r#"{"path":1,"PATH":2}"#)),
    ];
    for refusal in [
        Refusal::new(Cause::PinMismatch, "tool changed"),
        Refusal::new(Cause::UnreadableRequest, "duplicate keys"),
        Refusal::new(Cause::InvalidArguments, "not the schema"),
        Refusal::new(Cause::AtCapacity, "at capacity: 4 calls are running"),
    ] {
        let request = CallRequest::new("echo", b"");
        outcomes.push(
            h.pipeline
                .refuse_before_stations(&request, &refusal)
                .unwrap()
                .outcome,
        );
    }
    let before = h.pipeline.begin(&CallRequest::new("echo", b"")).unwrap();
    let before_id = before.call_id().to_owned();
    drop(before);
    let mut after = h.pipeline.begin(&CallRequest::new("echo", b"")).unwrap();
    assert!(after.authorize().is_some());
    let after_id = after.call_id().to_owned();
    drop(after);
    let checked = h.finish();
    outcomes.push(checked.outcome(&before_id).clone());
    outcomes.push(checked.outcome(&after_id).clone());
    let causes: Vec<(Cause, Option<&str>)> = outcomes
        .iter()
        .map(|o| {
            let stop = o
                .stop
                .as_ref()
                .expect("every host_denied outcome has a stop");
            (stop.cause, stop.axis.as_deref())
        })
        .collect();
    assert_eq!(
        causes,
        [
            (Cause::Denied, Some("fs.write")),
            (Cause::RateLimited, None),
            (Cause::PendingApproval, None),
            (Cause::Denied, None),
            (Cause::Unregistered, None),
            (Cause::AmbiguousArguments, None),
            (Cause::PinMismatch, None),
            (Cause::UnreadableRequest, None),
            (Cause::InvalidArguments, None),
            (Cause::AtCapacity, None),
            (Cause::AbandonedBeforeStations, None),
            (Cause::Abandoned, None),
        ]
    );
    for outcome in &outcomes {
        let older = aegis_record::OutcomeLine {
            stop: None,
            ..outcome.clone()
        };
        assert_eq!(older.stopped(), outcome.stop, "{}", outcome.call_id);
        assert_eq!(CallClass::of(&older), CallClass::of(outcome));
    }
}
