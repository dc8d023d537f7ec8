//! The session `tools/call` the HTTP side answers itself (`direct.rs`), from a raw
//! HTTP/1.1 client: it is answered as JSON and recorded, cancelled by
//! `notifications/cancelled` and by the session's end, refused for a foreign `Host` or
//! `Origin` like every other request (and for a repeated one, or a body over the
//! bound, however framed), and its session stays open while used and is closed when
//! idle.

use aegis_gateway::http::{self, DEFAULT_MAX_BODY, ENDPOINT, HttpOptions};
use aegis_gateway::{Gateway, GatewayOptions, Manifest, Notes};
use aegis_record::key::SigningKey;
use aegis_runtime::{Host, Profile};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// A gateway recording durably to `record`, or (`None`) on the volatile sink.
pub(crate) fn open(record: Option<&Path>) -> Gateway {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway/tools.toml");
    let mut builder = Host::builder(Profile::find("default").unwrap());
    if let Some(record) = record {
        builder = builder
            .audit_file("the test's record", record)
            .signing_key(SigningKey::generate().unwrap());
    }
    let quiet: Notes = Arc::new(|_| {});
    let options = GatewayOptions {
        capacity: 4,
        ..GatewayOptions::default()
    };
    Gateway::open(builder, &Manifest::load(&path).unwrap(), &options, quiet).unwrap()
}

pub(crate) fn of_type(record: &Path, t: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["line_type"] == t)
        .collect()
}

pub(crate) struct Served {
    pub(crate) gateway: Gateway,
    pub(crate) record: PathBuf,
    pub(crate) addr: SocketAddr,
    pub(crate) stop: CancellationToken,
    pub(crate) serving: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn serve(session_idle: Duration) -> Served {
    serve_with(session_idle, None).await
}

async fn serve_with(session_idle: Duration, token: Option<&str>) -> Served {
    serve_on(session_idle, token, true).await
}

/// Served with a durable record, or on the volatile sink (whose lines only
/// [`Gateway::close_and_export`] shows).
async fn serve_on(session_idle: Duration, token: Option<&str>, durable: bool) -> Served {
    let options = HttpOptions {
        session_idle,
        token: token.map(str::to_owned),
        ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
    };
    serve_with_options(options, durable).await
}

/// Served on `options` (whose address should be loopback port 0).
pub(crate) async fn serve_with_options(options: HttpOptions, durable: bool) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let gateway = open(durable.then_some(record.as_path()));
    let listener = aegis_gateway::http::bind(&options).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = gateway.server().clone();
    let stopping = stop.clone();
    let serving = tokio::spawn(async move {
        aegis_gateway::http::serve(server, listener, &options, stopping)
            .await
            .unwrap();
    });
    Served {
        gateway,
        record,
        addr,
        stop,
        serving,
        _dir: dir,
    }
}

/// An HTTP answer: status, head (lower case), body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// One POST (or other method) on its own connection, read to the end.
async fn send(addr: SocketAddr, method: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    send_to(addr, ENDPOINT, method, headers, body).await
}

/// [`send`] to `path`.
async fn send_to(
    addr: SocketAddr,
    path: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Answer {
        status: head.split(' ').nth(1).unwrap().parse().unwrap(),
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

const V: (&str, &str) = ("MCP-Protocol-Version", "2025-06-18");

/// A raw POST to `target` in `session`, with the fields a session call takes (Host,
/// JSON in, JSON or an event stream out, a protocol version), then `rest`: further
/// fields, the blank line and what follows, as the caller frames them.
fn session_post(target: &str, addr: SocketAddr, session: &str, rest: &str) -> String {
    format!(
        "POST {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Mcp-Session-Id: {session}\r\n{rest}"
    )
}

/// Opens a session (initialize, initialized); returns its id.
async fn session(addr: SocketAddr) -> String {
    session_with(addr, &[]).await
}

async fn session_with(addr: SocketAddr, extra: &[(&str, &str)]) -> String {
    let init = send(
        addr,
        "POST",
        &[&[V], extra].concat(),
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    )
    .await;
    assert_eq!(init.status, 200, "{}", init.body);
    let id = init
        .head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id:"))
        .expect("a session id")
        .trim()
        .to_owned();
    let done = send(
        addr,
        "POST",
        &[&[V, ("Mcp-Session-Id", &id)], extra].concat(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(done.status, 202);
    id
}

fn call(id: u32, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

/// A `tools/call` of `sleep` for an hour, as call `n` of `session`, on its own task.
fn start_sleep(addr: SocketAddr, session: &str, n: u32) -> tokio::task::JoinHandle<Answer> {
    let session = session.to_owned();
    tokio::spawn(
        async move { post_in(addr, &session, &call(n, "sleep", r#"{"seconds":3600}"#)).await },
    )
}

/// A POST of `body` in `session`.
async fn post_in(addr: SocketAddr, session: &str, body: &str) -> Answer {
    send(addr, "POST", &[V, ("Mcp-Session-Id", session)], body).await
}

/// `notifications/cancelled` for request `n`, sent in `session`; the HTTP status.
async fn cancel(addr: SocketAddr, session: &str, n: u32) -> u16 {
    let body = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{n}}}}}"#
    );
    post_in(addr, session, &body).await.status
}

pub(crate) async fn wait_for(s: &Served, what: &str, ready: impl Fn(&Path) -> bool) {
    while !ready(&s.record) {
        assert!(
            !s.serving.is_finished(),
            "the gateway stopped before {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn close(s: Served) {
    s.stop.cancel();
    s.serving.await.unwrap();
    s.gateway.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_is_answered_as_json_on_the_record() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let answer = post_in(s.addr, &id, &call(7, "echo", r#"{"message":"hi"}"#)).await;
    assert_eq!(answer.status, 200);
    assert!(
        answer.head.contains("content-type: application/json"),
        "{}",
        answer.head
    );
    let message: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(message["id"], 7);
    assert_eq!(message["result"]["isError"], false, "{message}");
    assert_eq!(
        message["result"]["content"][0]["text"],
        r#"{"message":"hi"}"#
    );

    // With request metadata (here a progress token), the same answer.
    let with_meta = post_in(s.addr, &id, r#"{"jsonrpc":"2.0","id":"m","method":"tools/call","params":{"_meta":{"progressToken":"p1"},"name":"echo","arguments":{"message":"hi"}}}"#).await;
    assert!(with_meta.head.contains("content-type: application/json"));
    let message: serde_json::Value = serde_json::from_str(&with_meta.body).unwrap();
    assert_eq!(message["id"], "m");
    assert_eq!(message["result"]["isError"], false, "{message}");

    // An unknown tool is a JSON-RPC error naming the call, and on the record too.
    let unknown = post_in(s.addr, &id, &call(8, "nope", "{}")).await;
    let message: serde_json::Value = serde_json::from_str(&unknown.body).unwrap();
    assert_eq!(message["id"], 8);
    let said = message["error"]["message"].as_str().unwrap();
    assert!(said.starts_with("unknown tool \"nope\""), "{said}");

    // A session the server does not hold is not taken here: rmcp says 404.
    let stranger = post_in(s.addr, "not-a-session", &call(9, "echo", "{}")).await;
    assert_eq!(stranger.status, 404);
    close(s).await;
}

/// Spellings of this server's name that a lenient parser reads as this server (rmcp's
/// own check accepts them all): each must be refused like a foreign name, or the checks
/// after the Host check (the session cap among them) could be walked around.
fn non_canonical_names(addr: SocketAddr) -> Vec<(String, Option<String>, &'static str)> {
    let port = addr.port();
    vec![
        (
            format!("127.0.0.1:0{port}"),
            None,
            "a Host port with a leading zero",
        ),
        (format!("x@127.0.0.1:{port}"), None, "a Host with userinfo"),
        (
            format!("localhost:{port}."),
            None,
            "a Host with a trailing dot",
        ),
        (
            addr.to_string(),
            Some(format!("http://127.0.0.1:{port}/x")),
            "an Origin with a path",
        ),
        (
            addr.to_string(),
            Some(format!("http://localhost:0{port}")),
            "an Origin port with a leading zero",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_or_origin_is_refused_before_any_call() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let body = call(2, "echo", "{}");
    let session = ("Mcp-Session-Id", id.as_str());
    for (headers, why) in [
        (vec![V, session, ("Host", "evil.example")], "a rebound Host"),
        (
            vec![
                V,
                session,
                ("Host", &format!("evil.example:{}", s.addr.port())),
            ],
            "a rebound Host with the port",
        ),
        (
            vec![V, session, ("Origin", "http://evil.example")],
            "a foreign Origin",
        ),
        (vec![V, session, ("Origin", "null")], "an opaque Origin"),
    ] {
        let answer = send(s.addr, "POST", &headers, &body).await;
        assert_eq!(answer.status, 403, "{why}: {}", answer.body);
    }
    for (host, origin, why) in non_canonical_names(s.addr) {
        let mut headers = vec![V, session, ("Host", host.as_str())];
        headers.extend(origin.as_deref().map(|o| ("Origin", o)));
        let answer = send(s.addr, "POST", &headers, &body).await;
        assert_eq!(answer.status, 403, "{why}: {}", answer.body);
    }
    // Every check passed, the same call is taken: only that one is on the record.
    let answer = send(s.addr, "POST", &[V, session], &body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(of_type(&s.record, "intent").len(), 1);
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_cancelled_and_the_session_ending_stop_the_call() {
    let s = serve(Duration::from_secs(300)).await;
    let addr = s.addr;
    let slash = format!("{ENDPOINT}/");
    for (n, how) in [
        (1, "notifications/cancelled"),
        (2, "DELETE"),
        (3, "DELETE at /mcp/"),
    ] {
        let id = session(addr).await;
        let sleeping = start_sleep(addr, &id, 41);
        wait_for(&s, "the sleep call's intent", |r| {
            of_type(r, "intent")
                .iter()
                .filter(|l| l["tool_id"] == "sleep")
                .count()
                == n
        })
        .await;
        if n == 1 {
            // The same id from another session cancels nothing here, and the same id
            // again in this session, while the first runs, is refused unrecorded.
            let other = session(addr).await;
            assert_eq!(cancel(addr, &other, 41).await, 202);
            let again = post_in(addr, &id, &call(41, "echo", "{}")).await;
            let message: serde_json::Value = serde_json::from_str(&again.body).unwrap();
            let said = message["error"]["message"].as_str().unwrap_or_default();
            assert!(said.contains("already in use"), "{message}");
            // A whole call later, the sleeping one is still running.
            let echo = post_in(addr, &other, &call(41, "echo", "{}")).await;
            assert_eq!(echo.status, 200);
            let sleeps = |t| {
                of_type(&s.record, t)
                    .into_iter()
                    .filter(|l| l["tool_id"] == "sleep")
                    .count()
            };
            assert_eq!((sleeps("intent"), sleeps("outcome")), (1, 0));
        }
        let said = match how {
            "DELETE" => send(addr, "DELETE", &[V, ("Mcp-Session-Id", &id)], "").await,
            // rmcp serves the endpoint's subpaths too; the session ends there as well.
            "DELETE at /mcp/" => {
                send_to(addr, &slash, "DELETE", &[V, ("Mcp-Session-Id", &id)], "").await
            }
            _ => {
                // Headers this module would not take a call with (a quoted Accept
                // parameter), which rmcp accepts: the cancellation still reaches it.
                send(
                    addr,
                    "POST",
                    &[
                        V,
                        ("Mcp-Session-Id", &id),
                        ("Accept", r#"text/plain;p="x""#),
                    ],
                    r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41,"reason":"done waiting"}}"#,
                )
                .await
            }
        };
        assert!(said.status < 300, "{how}: {}", said.status);
        // No answer to a cancelled call, as rmcp sends none: its stream ends empty.
        let answer = sleeping.await.unwrap();
        assert_eq!(answer.status, 200, "{how}");
        assert!(
            answer.head.contains("content-type: text/event-stream"),
            "{how}: {}",
            answer.head
        );
        assert!(!answer.body.contains("jsonrpc"), "{how}: {}", answer.body);
        let outcomes: Vec<_> = of_type(&s.record, "outcome")
            .into_iter()
            .filter(|l| l["tool_id"] == "sleep")
            .collect();
        assert_eq!(outcomes.len(), n);
        let said = outcomes[n - 1]["execution"]["message"].as_str().unwrap();
        assert!(
            said.starts_with("cancelled: the client cancelled"),
            "{how}: {said}"
        );
    }
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_left_can_still_be_cancelled() {
    let s = serve(Duration::from_secs(300)).await;
    let addr = s.addr;
    let id = session(addr).await;
    let leaving = start_sleep(addr, &id, 51);
    wait_for(&s, "the sleep call's intent", |r| {
        of_type(r, "intent").len() == 1
    })
    .await;
    // The client goes away: its connection closes with the task.
    leaving.abort();
    let _ = leaving.await;
    // The same id is still in use, and a cancellation still reaches the call.
    let again = post_in(addr, &id, &call(51, "echo", "{}")).await;
    assert!(again.body.contains("already in use"), "{}", again.body);
    assert_eq!(cancel(addr, &id, 51).await, 202);
    wait_for(&s, "the sleep call's outcome", |r| {
        of_type(r, "outcome").len() == 1
    })
    .await;
    let outcome = &of_type(&s.record, "outcome")[0];
    let message = outcome["execution"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cancelled: the client cancelled"),
        "{outcome}"
    );
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_in_use_stays_open_and_an_idle_one_is_closed() {
    let idle = Duration::from_secs(1);
    let s = serve(idle).await;
    let used = session(s.addr).await;
    let left = session(s.addr).await;
    // Calls only (the path rmcp's own timer never sees), for three idle periods.
    for n in 0..30 {
        let answer = post_in(s.addr, &used, &call(100 + n, "echo", "{}")).await;
        assert_eq!(answer.status, 200, "call {n}: {}", answer.body);
        tokio::time::sleep(idle / 10).await;
    }
    let answer = post_in(s.addr, &left, &call(200, "echo", "{}")).await;
    assert_eq!(answer.status, 404, "the idle session was closed");
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_token_guards_a_session_call_too() {
    let s = serve_with(Duration::from_secs(300), Some("tok-2718")).await;
    let bearer = ("Authorization", "Bearer tok-2718");
    let id = session_with(s.addr, &[bearer]).await;
    let body = call(3, "echo", "{}");
    let session = ("Mcp-Session-Id", id.as_str());
    let without = send(s.addr, "POST", &[V, session], &body).await;
    assert_eq!(without.status, 401);
    let wrong = send(
        s.addr,
        "POST",
        &[V, session, ("Authorization", "Bearer tok-2719")],
        &body,
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(of_type(&s.record, "intent").is_empty());
    let with = send(s.addr, "POST", &[V, session, bearer], &body).await;
    assert_eq!(with.status, 200, "{}", with.body);
    assert_eq!(of_type(&s.record, "intent").len(), 1);
    close(s).await;
}

/// One raw POST of `body` to the endpoint, framed by `Content-Length` or chunked (in
/// 64 KiB chunks); returns the status.
async fn post_framed(addr: SocketAddr, session: &str, body: &[u8], chunked: bool) -> u16 {
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {}", body.len())
    };
    let head = session_post(
        ENDPOINT,
        addr,
        session,
        &format!("{framing}\r\nConnection: close\r\n\r\n"),
    );
    let mut wire = head.into_bytes();
    if chunked {
        for chunk in body.chunks(64 << 10) {
            wire.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
    } else {
        wire.extend_from_slice(body);
    }
    status_of(addr, &wire).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_call_over_the_body_bound_is_refused_and_not_recorded() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let just_over = DEFAULT_MAX_BODY + 1;
    let padding = "x".repeat(just_over);
    let big = call(2, "echo", &format!(r#"{{"message":"{padding}"}}"#));
    for chunked in [false, true] {
        let status = post_framed(s.addr, &id, big.as_bytes(), chunked).await;
        assert_eq!(status, 413, "chunked: {chunked}");
    }
    assert!(
        of_type(&s.record, "intent").is_empty(),
        "nothing was called"
    );
    // The bound is on the body, not the session: a call within it is taken.
    let fits = call(3, "echo", r#"{"message":"hi"}"#);
    for chunked in [false, true] {
        assert_eq!(
            post_framed(s.addr, &id, fits.as_bytes(), chunked).await,
            200
        );
    }
    assert_eq!(of_type(&s.record, "intent").len(), 2);
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_host_origin_or_authorization_field_is_refused() {
    let s = serve_with(Duration::from_secs(300), Some("tok-2718")).await;
    let bearer = ("Authorization", "Bearer tok-2718");
    let id = session_with(s.addr, &[bearer]).await;
    let own = s.addr.to_string();
    let own_origin = format!("http://{own}");
    let (own, own_origin) = (own.as_str(), own_origin.as_str());
    let session = ("Mcp-Session-Id", id.as_str());
    let body = call(2, "echo", "{}");
    for (extra, why) in [
        (
            vec![("Host", own), ("Host", "evil.example")],
            "our Host, then another",
        ),
        (
            vec![("Host", "evil.example"), ("Host", own)],
            "another Host, then ours",
        ),
        (vec![("Host", own), ("Host", own)], "our Host twice"),
        (
            vec![("Origin", own_origin), ("Origin", "http://evil.example")],
            "our Origin, then another",
        ),
        (vec![("Authorization", "Bearer x")], "a second token"),
    ] {
        let headers = [&[V, session, bearer][..], &extra].concat();
        let answer = send(s.addr, "POST", &headers, &body).await;
        assert_eq!(answer.status, 400, "{why}: {}", answer.body);
    }
    assert!(
        of_type(&s.record, "intent").is_empty(),
        "nothing was called"
    );
    let answer = send(s.addr, "POST", &[V, session, bearer], &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(of_type(&s.record, "intent").len(), 1);
    close(s).await;
}

/// The raw bytes of one request on its own connection; returns the status line's code.
/// Writing may fail once the server has answered and closed: what it answered is what
/// counts.
async fn status_of(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_framed_two_ways_or_badly_is_refused_and_not_recorded() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let body = call(2, "echo", "{}");
    let head = session_post(ENDPOINT, s.addr, &id, "Connection: close\r\n");
    let len = body.len();
    let chunked = format!("{len:x}\r\n{body}\r\n0\r\n\r\n");
    for (framing, payload, why) in [
        (
            format!("Content-Length: {len}\r\nContent-Length: {}\r\n", len + 1),
            body.clone(),
            "two lengths",
        ),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n".to_owned(),
            chunked,
            "chunked, not last",
        ),
        // Framed one way, but badly: unreadable, not too large (400, not 413).
        (
            "Transfer-Encoding: chunked\r\n".to_owned(),
            format!("zz\r\n{body}\r\n0\r\n\r\n"),
            "a chunk size that is not hex",
        ),
    ] {
        let request = format!("{head}{framing}\r\n{payload}");
        let status = status_of(s.addr, request.as_bytes()).await;
        assert_eq!(status, 400, "{why}");
    }
    assert!(
        of_type(&s.record, "intent").is_empty(),
        "nothing was called"
    );
    close(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_target_naming_another_host_is_refused() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let body = call(2, "echo", "{}");
    let request = |target: &str| {
        session_post(
            target,
            s.addr,
            &id,
            &format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    for target in [
        "http://evil.example/mcp".to_owned(),
        format!("http://evil.example:{}/mcp", s.addr.port()),
        format!("http://localhost:{}/mcp", s.addr.port()),
    ] {
        let status = status_of(s.addr, request(&target).as_bytes()).await;
        assert_eq!(status, 400, "{target}");
    }
    assert!(
        of_type(&s.record, "intent").is_empty(),
        "nothing was called"
    );
    // The same authority as Host is no ambiguity.
    let own = format!("http://{}/mcp", s.addr);
    assert_eq!(status_of(s.addr, request(&own).as_bytes()).await, 200);
    assert_eq!(of_type(&s.record, "intent").len(), 1);
    close(s).await;
}

/// On the volatile sink a session call runs in a task of its own (no blocking pool):
/// answered, still running and cancellable after its client left, and every call on
/// the exported record with its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_volatile_sink_a_session_call_outlives_its_client_and_is_recorded() {
    let s = serve_on(Duration::from_secs(300), None, false).await;
    let addr = s.addr;
    let id = session(addr).await;
    let in_use = || async {
        let probe = post_in(addr, &id, &call(61, "echo", "{}")).await;
        probe.body.contains("already in use")
    };
    let answer = post_in(addr, &id, &call(60, "echo", r#"{"message":"volatile"}"#)).await;
    let message: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(
        message["result"]["content"][0]["text"], r#"{"message":"volatile"}"#,
        "{message}"
    );
    let leaving = start_sleep(addr, &id, 61);
    // Time for the server to take the call (no probe before: a probe with the same id
    // would take it first); the record cannot be read mid-run on this sink.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !leaving.is_finished(),
        "the sleep call was answered at once"
    );
    leaving.abort();
    let _ = leaving.await;
    assert!(in_use().await, "the call ended with its client");
    assert_eq!(cancel(addr, &id, 61).await, 202);
    while in_use().await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop.cancel();
    s.serving.await.unwrap();
    let record = s.gateway.close_and_export().unwrap();
    let outcomes: Vec<serde_json::Value> = record
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter(|l| l["line_type"] == "outcome")
        .collect();
    // The first echo, the sleep, and the probe that finally found the id free.
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    let sleep = outcomes.iter().find(|o| o["tool_id"] == "sleep").unwrap();
    let message = sleep["execution"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cancelled: the client cancelled"),
        "{sleep}"
    );
}

/// Stopping the server with a call running stops the call and waits for its outcome
/// before the connections finish: the call's own deadline (two minutes) does not hold
/// the end up, and nothing is dropped unrecorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_stops_a_running_call_and_records_it() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let sleeping = start_sleep(s.addr, &id, 5);
    wait_for(&s, "the sleep call's intent", |r| {
        !of_type(r, "intent").is_empty()
    })
    .await;
    s.stop.cancel();
    tokio::time::timeout(Duration::from_secs(60), s.serving)
        .await
        .expect("the server ends without waiting for the call's deadline")
        .unwrap();
    let answer = sleeping.await.unwrap();
    assert!(answer.body.contains("shutting down"), "{}", answer.body);
    s.gateway.close().unwrap();
    let outcomes = of_type(&s.record, "outcome");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let message = outcomes[0]["execution"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with("cancelled: the gateway is shutting down"),
        "{}",
        outcomes[0]
    );
}

/// A client holding the session's GET event stream open does not hold the stop up:
/// the stream ends (the client reads its end) and the server finishes. A stream never
/// ends by itself, so a stop that waited for it would wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_ends_an_open_event_stream() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let mut stream = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let request = format!(
        "GET {ENDPOINT} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
         MCP-Protocol-Version: 2025-06-18\r\nMcp-Session-Id: {id}\r\n\r\n",
        s.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // The stream is open once its head has arrived.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte))
            .await
            .expect("the event stream's head arrives")
            .unwrap();
        assert_eq!(n, 1, "the connection closed before the head: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");

    s.stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), s.serving)
        .await
        .expect("the server ends with an event stream open")
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut rest))
        .await
        .expect("the event stream ends")
        .unwrap();
    s.gateway.close().unwrap();
}

/// Clients stalled halfway through a request, one in its head and one in its body,
/// do not hold the stop up: no call runs on their connections, so after
/// [`http::DRAIN`] the server finishes without them and the record closes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_does_not_wait_on_a_client_stalled_mid_request() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    let mut stalled_in_body = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = session_post(ENDPOINT, s.addr, &id, "Content-Length: 100\r\n\r\n");
    stalled_in_body
        .write_all(format!("{head}{{\"jsonrpc\"").as_bytes())
        .await
        .unwrap();
    let mut stalled_in_head = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    stalled_in_head
        .write_all(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: {}\r\n", s.addr).as_bytes())
        .await
        .unwrap();
    // Both requests are being read when the stop comes, and a call is running.
    let sleeping = start_sleep(s.addr, &id, 7);
    wait_for(&s, "the sleep call's intent", |r| {
        !of_type(r, "intent").is_empty()
    })
    .await;

    s.stop.cancel();
    tokio::time::timeout(http::DRAIN * 6, s.serving)
        .await
        .expect("the server ends with clients stalled mid-request")
        .unwrap();
    let answer = sleeping.await.unwrap();
    assert!(answer.body.contains("shutting down"), "{}", answer.body);
    s.gateway.close().unwrap();
    assert_eq!(of_type(&s.record, "outcome").len(), 1);
    drop((stalled_in_body, stalled_in_head));
}

/// Served with a durable record, reading requests under `read_timeout`, with the
/// connection and session caps given.
async fn serve_limited(
    read_timeout: Duration,
    max_connections: usize,
    max_sessions: usize,
) -> Served {
    let options = HttpOptions {
        read_timeout,
        max_connections,
        max_sessions,
        ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
    };
    serve_with_options(options, true).await
}

/// Reads `stream` until the server closes it (or resets it): what it read, and when
/// (from `since`). Panics past `bound`.
async fn closed_within(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    since: std::time::Instant,
    bound: Duration,
) -> (String, Duration) {
    let mut read = Vec::new();
    let mut chunk = [0u8; 4096];
    let reading = async {
        // A reset after the answer ends the read as a close does; what came is kept.
        while let Ok(n @ 1..) = stream.read(&mut chunk).await {
            read.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(bound, reading)
        .await
        .unwrap_or_else(|_| panic!("the server kept the connection open past {bound:?}"));
    (String::from_utf8_lossy(&read).into_owned(), since.elapsed())
}

/// Writes `bytes` one at a time, one every 100 ms, until done or the server closes.
fn drip(
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    bytes: Vec<u8>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for b in bytes {
            if writer.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A client that never finishes a request head cannot keep its connection: one that
/// sends nothing, one that stops halfway, one that drips the head a byte every 100 ms
/// (which must not restart the clock), and one idle after an answered request are all
/// closed at the read timeout. The server goes on serving others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_not_sent_in_time_loses_its_connection() {
    let timeout = Duration::from_secs(1);
    let s = serve_limited(timeout, 16, 16).await;
    let started = std::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut halfway = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    halfway
        .write_all(format!("POST {ENDPOINT} HTTP/1.1\r\nHost: {}\r\n", s.addr).as_bytes())
        .await
        .unwrap();
    let (mut dripped, writer) = tokio::net::TcpStream::connect(s.addr)
        .await
        .unwrap()
        .into_split();
    // 100 bytes at 10 a second: a head still arriving well past the timeout.
    let head = format!(
        "GET {ENDPOINT} HTTP/1.1\r\nHost: {}\r\nX-Drip: {}",
        s.addr,
        "a".repeat(60)
    );
    let dripping = drip(writer, head.into_bytes());
    let mut kept_alive = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    kept_alive
        .write_all(format!("GET /elsewhere HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr).as_bytes())
        .await
        .unwrap();

    let bound = timeout * 5;
    for (what, stream) in [("silent", &mut silent), ("halfway", &mut halfway)] {
        let (read, took) = closed_within(stream, started, bound).await;
        assert!(
            read.is_empty(),
            "{what}: no answer to a head never finished: {read}"
        );
        // Closed at the timeout, not at once.
        assert!(took >= timeout, "{what}: closed after {took:?}");
    }
    let (read, took) = closed_within(&mut kept_alive, started, bound).await;
    assert!(
        read.starts_with("HTTP/1.1 404"),
        "answered, then kept: {read}"
    );
    assert!(took >= timeout, "kept alive: closed after {took:?}");
    // Closed while still dripping (10 s of head): the clock ran from the accept.
    let (read, _) = closed_within(&mut dripped, started, bound).await;
    assert!(
        read.is_empty(),
        "no answer to a head never finished: {read}"
    );
    tokio::time::timeout(bound, dripping)
        .await
        .unwrap()
        .unwrap();
    // Others are served all the while.
    session(s.addr).await;
    close(s).await;
}

/// A body that does not arrive within the read timeout of its head gets 408 and is
/// not a call: whether it stops halfway or drips a byte every 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_not_sent_in_time_is_answered_408_and_not_a_call() {
    let timeout = Duration::from_secs(1);
    let s = serve_limited(timeout, 16, 16).await;
    let id = session(s.addr).await;
    let body = call(5, "echo", r#"{"message":"late"}"#);
    for dripped in [false, true] {
        let (mut reader, mut writer) = tokio::net::TcpStream::connect(s.addr)
            .await
            .unwrap()
            .into_split();
        let head = session_post(
            ENDPOINT,
            s.addr,
            &id,
            &format!("Content-Length: {}\r\n\r\n", body.len()),
        );
        writer.write_all(head.as_bytes()).await.unwrap();
        // The halfway client keeps its write side open (a shut one would end the body).
        let (dripping, _halfway) = if dripped {
            (Some(drip(writer, body.clone().into_bytes())), None)
        } else {
            writer.write_all(&body.as_bytes()[..10]).await.unwrap();
            (None, Some(writer))
        };
        let (answer, _) = closed_within(&mut reader, std::time::Instant::now(), timeout * 5).await;
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "dripped {dripped}: {answer}"
        );
        if let Some(d) = dripping {
            tokio::time::timeout(timeout * 5, d).await.unwrap().unwrap();
        }
    }
    // The session still works, and only its own call is on the record.
    let answer = post_in(s.addr, &id, &call(6, "echo", r#"{"message":"on time"}"#)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    s.stop.cancel();
    s.serving.await.unwrap();
    s.gateway.close().unwrap();
    assert_eq!(of_type(&s.record, "intent").len(), 1);
}

/// The read timeout bounds sending a request, not answering one: a call that runs
/// longer, and an event stream held open longer, are not cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_and_an_open_event_stream_outlast_the_read_timeout() {
    let timeout = Duration::from_secs(1);
    let s = serve_limited(timeout, 16, 16).await;
    let id = session(s.addr).await;
    let mut stream = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET {ENDPOINT} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
                 MCP-Protocol-Version: 2025-06-18\r\nMcp-Session-Id: {id}\r\n\r\n",
                s.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = post_in(s.addr, &id, &call(3, "sleep", r#"{"seconds":3}"#)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.body.contains("awake"), "{}", answer.body);
    // Three read timeouts later, the stream is still open: reading it waits.
    let mut head = [0u8; 512];
    let n = stream.read(&mut head).await.unwrap();
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let mut more = [0u8; 64];
    let waiting = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut more)).await;
    assert!(waiting.is_err(), "the event stream ended: {waiting:?}");
    close(s).await;
}

/// Past the connection cap a client is answered 503 (with Retry-After), not left
/// hanging; once a connection closes, the next is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_cap_is_answered_503() {
    let s = serve_limited(Duration::from_secs(30), 3, 16).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(s.addr).await.unwrap());
    }
    // The three are accepted in order; a request after them finds the cap reached.
    let refused = send(s.addr, "GET", &[], "").await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.head.contains("retry-after: 1"), "{}", refused.head);
    assert!(refused.body.contains("connections"), "{}", refused.body);
    drop(held.pop());
    // The server sees the close a moment later.
    let mut tries = 0;
    loop {
        let answer = send(s.addr, "GET", &[("Accept", "text/event-stream")], "").await;
        if answer.status != 503 {
            break;
        }
        tries += 1;
        assert!(tries < 100, "still refused after a connection closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(held);
    session(s.addr).await;
    close(s).await;
}

/// Past the session cap, asking for a session is answered 503 (a foreign `Host` is
/// still answered 403); ending one makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_the_cap_is_answered_503() {
    let s = serve_limited(Duration::from_secs(30), 16, 2).await;
    let first = session(s.addr).await;
    session(s.addr).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let refused = send(s.addr, "POST", &[V], init).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("2 sessions"), "{}", refused.body);
    // The Host check still comes first: a rebinding page learns nothing of the cap,
    // and no spelling of this server's name walks around it.
    let foreign = send(s.addr, "POST", &[V, ("Host", "evil.example")], init).await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    for (host, origin, why) in non_canonical_names(s.addr) {
        let mut headers = vec![V, ("Host", host.as_str())];
        headers.extend(origin.as_deref().map(|o| ("Origin", o)));
        let answer = send(s.addr, "POST", &headers, init).await;
        assert_eq!(answer.status, 403, "{why}: {}", answer.body);
    }
    let ended = send(s.addr, "DELETE", &[V, ("Mcp-Session-Id", &first)], "").await;
    assert!(ended.status < 300, "{}", ended.body);
    // Room for one again, and only one: nothing above made a session.
    session(s.addr).await;
    let refused = send(s.addr, "POST", &[V], init).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    close(s).await;
}

/// rmcp keeps a session's initialize parameters as long as the session, so a request
/// for a new session, and an initialize inside one, is held to a smaller body than a
/// call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_new_session_is_held_to_a_smaller_body() {
    use aegis_gateway::http::MAX_NEW_SESSION_BODY;
    let s = serve(Duration::from_secs(300)).await;
    let padding = "x".repeat(MAX_NEW_SESSION_BODY);
    let fat = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{"experimental":{{"pad":{{"x":"{padding}"}}}}}},"clientInfo":{{"name":"raw","version":"1"}}}}}}"#
    );
    assert!(fat.len() < DEFAULT_MAX_BODY);
    let refused = send(s.addr, "POST", &[V], &fat).await;
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert!(
        refused
            .head
            .lines()
            .all(|l| !l.starts_with("mcp-session-id")),
        "{}",
        refused.head
    );
    // Inside a session too: rmcp would keep a re-initialize's parameters as long.
    let id = session(s.addr).await;
    let inside = post_in(s.addr, &id, &fat).await;
    assert_eq!(inside.status, 413, "{}", inside.body);
    let batch = format!("[{fat}]");
    assert_eq!(post_in(s.addr, &id, &batch).await.status, 413);
    // A call as large is not an initialize: served.
    let call = call(3, "echo", &format!(r#"{{"message":"{padding}"}}"#));
    let answer = post_in(s.addr, &id, &call).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    close(s).await;
}

/// Refusing is bounded too: connections past the cap that send nothing are closed at
/// the refusal's own timeout, and past [`REFUSING`] of them at once a connection is
/// closed unanswered, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_past_the_cap_holds_nothing_for_long() {
    use aegis_gateway::http::{REFUSAL_TIMEOUT, REFUSING};
    let s = serve_limited(Duration::from_secs(30), 1, 16).await;
    let _held = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut refused = Vec::new();
    for _ in 0..REFUSING {
        refused.push(tokio::net::TcpStream::connect(s.addr).await.unwrap());
    }
    // Accepted after the others: no refusal left for it.
    let mut unanswered = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(REFUSAL_TIMEOUT / 2, unanswered.read_to_end(&mut got))
        .await
        .expect("closed at once")
        .ok();
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    for stream in &mut refused {
        let (read, _) = closed_within(stream, std::time::Instant::now(), REFUSAL_TIMEOUT * 5).await;
        assert!(read.is_empty(), "no head, no answer: {read}");
    }
    let again = send(s.addr, "GET", &[], "").await;
    assert_eq!(again.status, 503, "{}", again.body);
    close(s).await;
}

/// A client that pipelines calls with large answers and never reads them cannot hold
/// its connection: once the socket's buffers are full and no byte is taken for the
/// write timeout, the connection is closed mid-answer. (Without the timeout the
/// answers all arrive once it reads, and the connection stays open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_takes_no_answer_bytes_loses_its_connection() {
    let write_timeout = Duration::from_secs(1);
    let options = HttpOptions {
        write_timeout,
        ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
    };
    let s = serve_with_options(options, true).await;
    let id = session(s.addr).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(s.addr).await.unwrap();
    // Eight answers of ~900 KB each: more than the socket buffers on both sides hold.
    let message = "a".repeat(900 * 1024);
    let mut pipelined = Vec::new();
    for n in 0..8 {
        let body = call(10 + n, "echo", &format!(r#"{{"message":"{message}"}}"#));
        pipelined.extend_from_slice(
            session_post(
                ENDPOINT,
                s.addr,
                &id,
                &format!("Content-Length: {}\r\n\r\n{body}", body.len()),
            )
            .as_bytes(),
        );
    }
    let (mut reader, mut writer) = stream.split();
    // Written while not reading: the server may stop reading requests once its
    // answers back up, so the writing is not waited for.
    let writing = async {
        let _ = writer.write_all(&pipelined).await;
        std::future::pending::<()>().await;
    };
    let idle = tokio::time::sleep(write_timeout * 4);
    tokio::select! {
        () = writing => unreachable!(),
        () = idle => {}
    }
    let (read, _) = closed_within(
        &mut reader,
        std::time::Instant::now(),
        Duration::from_secs(10),
    )
    .await;
    let answers = read.matches("HTTP/1.1 200").count();
    assert!(
        answers < 8,
        "all {answers} answers came: the connection was not cut"
    );
    drop(stream);
    close(s).await;
}

/// A request reusing the id of one rmcp is still answering in the session is refused
/// (rmcp, given both, would answer one and leave the other's stream open for the
/// session's life); once that answer has ended, the id is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_in_use_on_rmcps_path_is_refused_until_its_answer_ends() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    // An Accept field with a quoted parameter is one the direct path leaves to rmcp.
    let to_rmcp = [
        V,
        ("Mcp-Session-Id", id.as_str()),
        ("Accept", "text/plain;x=\"y\""),
    ];
    let sleep = call(7, "sleep", r#"{"seconds":3600}"#);
    let headers: Vec<(String, String)> = to_rmcp
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let addr = s.addr;
    let sleeping = tokio::spawn(async move {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        send(addr, "POST", &headers, &sleep).await
    });
    wait_for(&s, "the sleep call's intent", |r| {
        !of_type(r, "intent").is_empty()
    })
    .await;
    let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
    for headers in [&to_rmcp[..], &[V, ("Mcp-Session-Id", id.as_str())][..]] {
        let again = send(s.addr, "POST", headers, ping).await;
        assert!(again.body.contains("already in use"), "{}", again.body);
    }
    assert_eq!(cancel(s.addr, &id, 7).await, 202);
    let ended = sleeping.await.unwrap();
    assert_eq!(ended.status, 200, "{}", ended.body);
    assert!(
        ended.head.contains("text/event-stream"),
        "rmcp answered: {}",
        ended.head
    );
    let free = send(s.addr, "POST", &to_rmcp, ping).await;
    assert!(!free.body.contains("already in use"), "{}", free.body);
    close(s).await;
}

/// A request head past the 64 KiB read buffer is refused (431) rather than buffered,
/// and HTTP/2 (a prior-knowledge preface) is not served: HTTP/1 only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_past_the_read_buffer_is_431_and_http2_is_not_served() {
    use aegis_gateway::http::MAX_READ_BUFFER;
    let s = serve(Duration::from_secs(300)).await;
    let big = format!(
        "GET {ENDPOINT} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
        s.addr,
        "a".repeat(MAX_READ_BUFFER)
    );
    assert_eq!(status_of(s.addr, big.as_bytes()).await, 431);
    let mut h2 = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) =
        closed_within(&mut h2, std::time::Instant::now(), Duration::from_secs(10)).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 "),
        "answered as HTTP/2: {answer:?}"
    );
    close(s).await;
}

/// The ambiguity class (second hardening round): serde reads the last of two equal keys
/// (and skips `Arguments` as unknown), so rmcp and the direct path would decide and run a
/// call another reader reads otherwise. Every POST body with colliding keys anywhere is
/// refused (400) before either reads it, and nothing is recorded; the same call spelt
/// one way runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_reads_two_ways_is_refused_before_any_call() {
    let s = serve(Duration::from_secs(300)).await;
    let id = session(s.addr).await;
    for body in [
        call(2, "echo", r#"{"message":"a","message":"b"}"#),
        call(3, "echo", r#"{"message":"a","MESSAGE":"b"}"#),
        call(4, "echo", r#"{"message":"a","meſſage":"b"}"#),
        call(5, "echo", r#"{"message":"a","__proto__":{"message":"b"}}"#),
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"echo","arguments":{},"Arguments":{"message":"b"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","name":"sleep","arguments":{}}}"#.to_owned(),
    ] {
        let answer = post_in(s.addr, &id, &body).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert!(answer.body.contains("does not read one way only"), "{}", answer.body);
    }
    assert!(
        of_type(&s.record, "intent").is_empty(),
        "nothing was called"
    );
    let fine = post_in(s.addr, &id, &call(8, "echo", r#"{"message":"a"}"#)).await;
    assert_eq!(fine.status, 200);
    assert_eq!(of_type(&s.record, "intent").len(), 1);
    close(s).await;
}
