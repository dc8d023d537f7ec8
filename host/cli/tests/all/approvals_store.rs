//! Approvals through the PostgreSQL store (issue 35, item 2): a call parked by a host
//! writing the store is filed in the store's queue, listed and approved by a person
//! from another process that reaches the same store (`aegis --profile P approvals`),
//! and the waiting host is woken by the database's notification, not by polling. The
//! record, exported from the store, proves who approved what.

use crate::common::approvals::{approver, of_type, str_at};
use crate::common::{field, object, text};
use crate::store::{Store, Writer, aegis, echo_frame, echoed, keygen};
use aegis_record::json::Object;
use aegis_test_support::postgres;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const PARKS_ECHO: &str = "version: 1\ndefault: allow\nrules:\n  - id: echo-needs-a-person\n    action: pending_approval\n    tool: echo\n";

/// `aegis --profile P approvals ARGS`, with a queue directory of the test's own (which
/// must stay empty: the queue is the store's).
fn approvals(store: &Store, args: &[&OsStr]) -> Output {
    aegis()
        .env("XDG_STATE_HOME", store.path("state"))
        .arg("--profile")
        .arg(&store.profile)
        .arg("approvals")
        .args(args)
        .output()
        .unwrap()
}

/// The requests `approvals list --json` prints.
fn listed(store: &Store) -> Vec<Object> {
    let out = approvals(store, &["list".as_ref(), "--json".as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out.stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(object)
        .collect()
}

/// The id of the one request in the store's queue, once it is there (waits as a person
/// would; a park never filed fails after two minutes).
fn one_request(store: &Store) -> String {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        match listed(store).as_slice() {
            [] => {}
            [one] => return str_at(one, &["request", "approval_id"]).unwrap().to_owned(),
            many => panic!("more than one request: {many:?}"),
        }
        assert!(Instant::now() < until, "no request filed in two minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes the policy that parks `echo` in the store's directory; its path.
fn parks_echo(store: &Store) -> PathBuf {
    let policy = store.path("policy.yaml");
    std::fs::write(&policy, PARKS_ECHO).unwrap();
    policy
}

/// `aegis --profile P run --json` of the echo guest under `policy`, signed with
/// `host_key`, then `extra`.
fn run_echo(store: &Store, policy: &Path, host_key: &Path, extra: &[&str]) -> Output {
    aegis()
        .env("XDG_STATE_HOME", store.path("state"))
        .arg("--profile")
        .arg(&store.profile)
        .args(["run", "--json", "--policy"])
        .arg(policy)
        .arg("--component")
        .arg(crate::common::guest("echo"))
        .args(["--id", "echo", "--input", "hi", "--signing-key"])
        .arg(host_key)
        .args(extra)
        .output()
        .unwrap()
}

fn approve(store: &Store, id: &str, key: &Path) -> Output {
    approvals(
        store,
        &[
            "approve".as_ref(),
            id.as_ref(),
            "--approver-key".as_ref(),
            key.as_os_str(),
        ],
    )
}

#[test]
fn a_call_parked_by_a_wrap_is_approved_from_another_process_through_the_store() {
    let store = Store::new(postgres::shared());
    let dir = store.path("");
    let (host_key, _) = keygen(&dir, "host.key");
    let (alice, alice_public) = approver(&dir, "alice.key");
    let policy = parks_echo(&store);
    let mut wrap = Writer::start_with(
        &store,
        &host_key,
        &dir,
        "a",
        None,
        &["--policy".as_ref(), policy.as_os_str()],
    );
    wrap.initialize();
    wrap.send(&echo_frame(3, "ship it"));

    let id = one_request(&store);
    let shown = approvals(&store, &["show".as_ref(), id.as_ref()]);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    assert!(
        text(&shown.stdout).contains("echo"),
        "{}",
        text(&shown.stdout)
    );
    let approved = approve(&store, &id, &alice);
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        text(&approved.stderr)
    );

    // The wrap was woken by the store, ran the call, and the client got its result.
    let answer = wrap.answer(3);
    assert_eq!(echoed(&answer).as_deref(), Some("ship it"), "{answer:?}");
    assert!(wrap.close().success(), "{}", wrap.stderr());
    let again = approve(&store, &id, &alice);
    assert_eq!(again.status.code(), Some(19), "{}", text(&again.stderr));
    assert!(
        !store.path("state/aegis/approvals").exists(),
        "a park went to a directory, not the store"
    );

    // The record, read back from the store, says who approved, and verifies with the
    // approver pinned.
    let out = store.path("out");
    let sessions = store.export(&out, &[]);
    assert_eq!(sessions.len(), 1);
    let lines: Vec<Object> = sessions[0].lines.clone();
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("key"));
    let resumed = of_type(&lines, "outcome")
        .into_iter()
        .filter(|o| text(&o.to_canonical()).contains(&format!("\"approval_ref\":\"{id}\"")))
        .count();
    assert_eq!(resumed, 1);
    let verified = aegis()
        .arg("verify")
        .arg(&out)
        .arg("--approver-key")
        .arg(&alice_public)
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

#[test]
fn a_park_filed_by_run_is_taken_from_the_store_once() {
    let store = Store::new(postgres::shared());
    let dir = store.path("");
    let (host_key, _) = keygen(&dir, "host.key");
    let (alice, _) = approver(&dir, "alice.key");
    let policy = parks_echo(&store);
    let run = |extra: &[&str]| run_echo(&store, &policy, &host_key, extra);
    let parked = run(&[]);
    assert_eq!(parked.status.code(), Some(12), "{}", text(&parked.stderr));
    let id = field(&object(&parked.stdout), "approval_id");
    assert_eq!(one_request(&store), id);
    let approved = approve(&store, &id, &alice);
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        text(&approved.stderr)
    );
    let ran = run(&["--approval", &id]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(field(&object(&ran.stdout), "output"), "hi");
    let twice = run(&["--approval", &id]);
    assert_eq!(twice.status.code(), Some(19), "{}", text(&twice.stderr));
    let state = listed(&store);
    assert_eq!(field(&state[0], "state"), "used");
    assert!(!store.path("state/aegis/approvals").exists());
}

/// What the store holds is read as strictly as a queue file: anyone with the writer's
/// connection can put bytes in a row, and each hostile row is refused in one line
/// naming it (exit 4), never listed as something a person could approve.
#[test]
fn a_hostile_row_in_the_stores_queue_is_refused_naming_it() {
    let pg = postgres::shared();
    let store = Store::new(pg);
    let dir = store.path("");
    let (host_key, _) = keygen(&dir, "host.key");
    let policy = parks_echo(&store);
    let parked = run_echo(&store, &policy, &host_key, &[]);
    assert_eq!(parked.status.code(), Some(12), "{}", text(&parked.stderr));
    let real = field(&object(&parked.stdout), "approval_id");
    let table = "public.aegis_lines_approvals";
    let forged = format!("apr-{}", "f".repeat(32));
    for (what, request, expect) in [
        (
            "torn JSON",
            "convert_to('{\"format\":', 'UTF8')".to_owned(),
            "JSON",
        ),
        (
            "a duplicate key",
            "convert_to('{\"format\":\"a\",\"format\":\"b\"}', 'UTF8')".to_owned(),
            "duplicate",
        ),
        (
            "another id's request",
            format!("(SELECT request FROM {table} WHERE approval_id = '{real}')"),
            "approval_id",
        ),
        (
            "a request past the cap",
            "convert_to(repeat(' ', 300000), 'UTF8')".to_owned(),
            "larger than",
        ),
    ] {
        store
            .as_writer(
                pg,
                &format!(
                    "INSERT INTO {table} (approval_id, request) VALUES ('{forged}', {request})"
                ),
            )
            .unwrap();
        let out = approvals(&store, &["list".as_ref()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{what}: {err}");
        let line = err
            .lines()
            .find(|l| l.contains(&forged))
            .unwrap_or_else(|| panic!("{what}: the row is not named: {err}"));
        assert!(line.contains(expect), "{what}: {line}");
        assert!(text(&out.stdout).is_empty(), "{what}: listed anyway");
        store
            .as_writer(
                pg,
                &format!("DELETE FROM {table} WHERE approval_id = '{forged}'"),
            )
            .unwrap();
    }
    // The real park is listed again once the hostile row is gone.
    assert_eq!(one_request(&store), real);
}
