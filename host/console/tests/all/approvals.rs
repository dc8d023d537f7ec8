//! The approvals queue from the page's side: parked requests listed with what
//! approving authorises, a decision placed only with the token, a JSON body and this
//! server's origin, signed with the console's key; the first decision stands.

use crate::client::{Events, bearer, body, host, of_kind, over, request, start, text};
use aegis_approvals::{Front, Queue, Request, State};
use aegis_console::feed::Source;
use aegis_record::json::{Object, SafeInt, Value};
use aegis_record::{ApprovalScope, DecisionVerdict, SigningKey};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

fn golden() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors/golden/golden.aarl")
}

/// The record's time `secs` from now.
fn time_in(secs: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    aegis_record::time::format_micros(now + secs * 1_000_000)
}

/// A parked call to `tool`, as a host files it.
fn parked(tool: &str) -> Request {
    let mut r = Request {
        approval_id: aegis_record::line::new_approval_id(),
        parked_at: time_in(0),
        expires_at: time_in(600),
        host: "build-07".into(),
        pid: SafeInt::from(std::process::id()),
        front: Front::Wrap,
        record: "/tmp/record.aarl".into(),
        tool_id: tool.into(),
        rule: Some("ask-first".into()),
        reason: Some("<b>a person decides</b>".into()),
        arguments: None,
        arguments_cut: false,
        bound: None,
        scope: ApprovalScope {
            tool_id: tool.into(),
            arguments_digest: None,
            fs: None,
            net: None,
            expires_at: Some(time_in(600)),
        },
    };
    r.set_arguments(r#"{"path":"/notes/a.txt"}"#.into());
    r
}

fn queue(dir: &Path) -> Queue {
    let q = dir.join("queue");
    std::fs::create_dir(&q).unwrap();
    std::fs::set_permissions(&q, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    Queue::open(&q).unwrap()
}

/// The requests of the last approvals event.
fn requests(events: &[Object]) -> Vec<Object> {
    let last = of_kind(events, "approvals").last().copied().cloned();
    match last.and_then(|a| a.get("requests").cloned()) {
        Some(Value::Array(r)) => r
            .into_iter()
            .map(|r| r.as_object().unwrap().clone())
            .collect(),
        _ => Vec::new(),
    }
}

fn state_of(events: &[Object], id: &str) -> Option<String> {
    requests(events)
        .iter()
        .find(|r| text(r, &["request", "approval_id"]) == Some(id))
        .and_then(|r| text(r, &["state"]).map(str::to_owned))
}

async fn post(addr: SocketAddr, id: &str, headers: &[(&str, &str)], json: &str) -> (u16, String) {
    request(
        addr,
        "POST",
        &format!("/api/approvals/{id}"),
        headers,
        json.as_bytes(),
    )
    .await
}

#[tokio::test]
async fn a_parked_call_is_listed_and_approved_once_with_the_consoles_key() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue(dir.path());
    let first = parked("read_file");
    let second = parked("delete_file");
    queue.file(&first).unwrap();
    queue.file(&second).unwrap();
    let key = SigningKey::generate().unwrap();
    let key_id = key.key_id().to_string();
    let mut console = over(Source::File(golden()));
    console.approvals = Some(queue.clone());
    console.approver = Some(Arc::new(key));
    let (addr, stop) = start(console).await;
    let mut events = Events::open(addr).await;
    let seen = events.until(|e| requests(e).len() == 2).await;
    let listed = requests(seen);
    let one = listed
        .iter()
        .find(|r| text(r, &["request", "approval_id"]) == Some(first.approval_id.as_str()))
        .unwrap();
    assert_eq!(text(one, &["state"]), Some("pending"));
    assert_eq!(
        text(one, &["request", "scope", "tool_id"]),
        Some("read_file")
    );
    assert_eq!(
        text(one, &["request", "arguments"]),
        Some(r#"{"path":"/notes/a.txt"}"#)
    );
    let approvals = of_kind(seen, "approvals");
    assert_eq!(
        approvals.last().unwrap().get("decides"),
        Some(&Value::Bool(true))
    );

    let host = host(addr);
    let origin = format!("http://{host}");
    let bearer = bearer();
    let json = ("Content-Type", "application/json");
    let approve = r#"{"verdict":"approve"}"#;
    let id = first.approval_id.as_str();
    // No token; another site's origin; a form's content types, or one that only
    // mentions JSON; a body that is not one decision: each refused, and nothing is
    // placed.
    let refusals = [
        (vec![("Host", host.as_str()), json], approve, 401),
        (
            vec![
                ("Host", host.as_str()),
                ("Origin", "http://evil.example"),
                ("Authorization", bearer.as_str()),
                json,
            ],
            approve,
            403,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            approve,
            415,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                ("Content-Type", "text/plain; application/json"),
            ],
            approve,
            415,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/json-patch+json"),
            ],
            approve,
            415,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                ("Content-Type", "multipart/form-data; boundary=x"),
            ],
            approve,
            415,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                json,
            ],
            r#"{"verdict":"approve","verdict":"deny","reason":"x"}"#,
            400,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                json,
            ],
            r#"{"verdict":"deny"}"#,
            400,
        ),
        (
            vec![
                ("Host", host.as_str()),
                ("Authorization", bearer.as_str()),
                json,
            ],
            r#"{"verdict":"approve","scope":{"tool_id":"other"}}"#,
            400,
        ),
    ];
    for (headers, said, status) in refusals {
        let (got, answer) = post(addr, id, &headers, said).await;
        assert_eq!(got, status, "{headers:?} {said}: {answer}");
    }
    assert_eq!(queue.state(id).unwrap(), State::Pending);

    let with = [
        ("Host", host.as_str()),
        ("Origin", origin.as_str()),
        ("Authorization", bearer.as_str()),
        json,
    ];
    let (status, answer) = post(addr, id, &with, approve).await;
    assert_eq!(status, 200, "{answer}");
    let placed = body(&answer);
    assert_eq!(
        text(&placed, &["decision", "approver", "key_id"]),
        Some(key_id.as_str())
    );
    match queue.state(id).unwrap() {
        State::Decided(d) => {
            assert_eq!(
                d.verdict,
                DecisionVerdict::Approved {
                    scope: first.scope.clone()
                }
            );
            assert_eq!(
                d.approver.to_object().get("key_id").and_then(Value::as_str),
                Some(key_id.as_str())
            );
        }
        other => panic!("{other:?}"),
    }
    // The first decision stands.
    let (status, answer) = post(
        addr,
        id,
        &with,
        r#"{"verdict":"deny","reason":"changed my mind"}"#,
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    // The page is told without asking again.
    events
        .until(|e| state_of(e, id).as_deref() == Some("approved"))
        .await;

    let other = second.approval_id.as_str();
    let (status, answer) = post(
        addr,
        other,
        &with,
        r#"{"verdict":"deny","reason":"not today"}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    events
        .until(|e| state_of(e, other).as_deref() == Some("denied"))
        .await;
    let (status, _) = post(addr, "apr-00000000000000000000000000000000", &with, approve).await;
    assert_eq!(status, 404);
    // The queue is state, not history: a page that connects now is sent it once, as
    // it stands, however often it changed.
    let mut late = Events::open(addr).await;
    let seen = late
        .until(|e| state_of(e, other).as_deref() == Some("denied"))
        .await;
    assert_eq!(of_kind(seen, "approvals").len(), 1, "{seen:#?}");
    stop.cancel();
}

#[tokio::test]
async fn without_an_approver_key_the_queue_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let queue = queue(dir.path());
    let request = parked("read_file");
    queue.file(&request).unwrap();
    let mut console = over(Source::File(golden()));
    console.approvals = Some(queue.clone());
    let (addr, stop) = start(console).await;
    let mut events = Events::open(addr).await;
    let seen = events.until(|e| requests(e).len() == 1).await;
    assert_eq!(
        of_kind(seen, "approvals").last().unwrap().get("decides"),
        Some(&Value::Bool(false))
    );
    let host = host(addr);
    let bearer = bearer();
    let (status, answer) = post(
        addr,
        &request.approval_id,
        &[
            ("Host", host.as_str()),
            ("Authorization", bearer.as_str()),
            ("Content-Type", "application/json"),
        ],
        r#"{"verdict":"approve"}"#,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(queue.state(&request.approval_id).unwrap(), State::Pending);
    stop.cancel();
}
