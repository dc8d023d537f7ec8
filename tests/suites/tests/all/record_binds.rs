//! The record binds what ran, and an honest record always verifies — through the
//! assembled pipeline, a durable file sink and the real verifier.
//!
//! - Text a tool or a caller controls (a handler's error, a tool id, a role, a session)
//!   can be of any size and any characters; the record still verifies (SPEC §6.5).
//! - `request_digest` covers a call's arguments as well as its input (SPEC §3.2).
//! - A wasm grant names its component by SHA-256, taken at registration, and the sandbox
//!   refuses bytes that no longer match it.

use aegis_record::digest::sha256;
use aegis_record::{CapabilityOutcome, ExecutionOutcome, RequestDigest};
use aegis_runtime::capability::{ToolKind, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_suites::{Harness, guest, host_tool, plain_tool};
use std::collections::BTreeMap;
use std::sync::Arc;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// The reported failure, end to end: a tool's error of 200,000 U+0001 characters fits
/// the output ceiling but escaped to a 1.2 MB outcome line, and `aegis verify` called
/// the honest record Tampered. Now the message is cut, with its length and digest, and
/// the record verifies. Caller-chosen text of a megabyte (tool id, role, session) too.
#[test]
fn regression_a_huge_control_character_error_still_verifies() {
    let message = "\u{1}".repeat(200_000);
    let long_id = "t".repeat(300_000);
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    let said = message.clone();
    handlers.insert(
        "refuse".into(),
        Arc::new(move |_, _| Err(said.clone().into())),
    );
    handlers.insert(
        long_id.clone(),
        Arc::new(|_, _| Err("\"\\".repeat(300_000).into())),
    );
    let h = Harness::new(
        ALLOW_ALL,
        vec![host_tool("refuse"), host_tool(&long_id)],
        handlers,
    );
    let r = h.call("refuse", b"x");
    assert_eq!(r.class(), CallClass::Trap);
    let role = "\n".repeat(1 << 20);
    let long = h
        .pipeline
        .call(&CallRequest {
            role: Some(&role),
            session: Some(&role),
            ..CallRequest::new(&long_id, b"x")
        })
        .unwrap();
    assert_eq!(long.class(), CallClass::Trap);
    let checked = h.finish();
    let ExecutionOutcome::Trap { message: recorded } =
        &checked.outcome(&r.outcome.call_id).execution
    else {
        panic!("a trap");
    };
    let full = format!("handler error: {message}");
    let digest = aegis_record::digest::encode_hex(&sha256(full.as_bytes()));
    assert!(
        recorded.ends_with(&format!(
            "...[truncated: {} bytes, sha256 {digest}]",
            full.len()
        )),
        "{}",
        &recorded[recorded.len() - 120..]
    );
    assert!(recorded.starts_with("handler error: \u{1}"));
}

/// A call's arguments are part of its request digest: the same input with different
/// arguments records different digests, each the canonical invocation of SPEC §3.2.
#[test]
fn the_request_digest_changes_when_the_args_change() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], BTreeMap::new());
    let a = h.call_args("echo", b"same input", &["--one"]);
    let b = h.call_args("echo", b"same input", &["--two"]);
    let none = h.call("echo", b"same input");
    let checked = h.finish();
    let digest = |id: &str| checked.outcome(id).request_digest;
    assert_ne!(digest(&a.outcome.call_id), digest(&b.outcome.call_id));
    assert_ne!(digest(&a.outcome.call_id), digest(&none.outcome.call_id));
    assert_eq!(
        digest(&a.outcome.call_id),
        RequestDigest::of_invocation(&["--one"], b"same input")
    );
    assert_eq!(
        digest(&none.outcome.call_id),
        RequestDigest::of_invocation(&[], b"same input")
    );
}

/// The grant record names the component by the SHA-256 of its file, the value
/// `sha256sum` prints (the fixtures' committed `SHA256SUMS` lists it).
#[test]
fn the_grant_names_the_component_by_its_sha256() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], BTreeMap::new());
    let r = h.call("echo", b"hi");
    assert_eq!(r.class(), CallClass::Success);
    let checked = h.finish();
    let CapabilityOutcome::Granted { grant } = &checked.outcome(&r.outcome.call_id).capability
    else {
        panic!("granted");
    };
    let recorded = grant
        .component_digest
        .expect("a wasm grant names its component");
    let file = guest("echo");
    assert_eq!(recorded.as_bytes(), &sha256(&std::fs::read(&file).unwrap()));
    let sums = std::fs::read_to_string(file.with_file_name("SHA256SUMS")).unwrap();
    assert!(
        sums.lines()
            .any(|l| l.starts_with(&recorded.to_hex()) && l.ends_with("echo.wasm")),
        "{recorded} is not echo.wasm's line in SHA256SUMS"
    );
}

/// A component replaced after registration is not run under a grant that names the
/// registered bytes: the call is recorded `host_denied`, and the record verifies.
#[test]
fn a_component_changed_after_registration_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let component = dir.path().join("tool.wasm");
    std::fs::copy(guest("echo"), &component).unwrap();
    let manifest = ToolManifest {
        kind: ToolKind::Wasm {
            component: component.clone(),
        },
        ..plain_tool("swapped", "echo")
    };
    // A sandbox of its own, so no other test has prepared this path.
    let sandbox = Arc::new(aegis_runtime::sandbox::Sandbox::new().unwrap());
    let h = Harness::with_sandbox(ALLOW_ALL, vec![manifest], sandbox);
    std::fs::copy(guest("world-reverse"), &component).unwrap();
    let r = h.call("swapped", b"abc");
    assert_eq!(r.class(), CallClass::HostDenied);
    assert_eq!(r.output, None);
    let ExecutionOutcome::HostDenied { reason } = &r.outcome.execution else {
        panic!("host_denied");
    };
    assert!(reason.contains("changed after registration"), "{reason}");
    h.finish();
}
