//! The direct path against rmcp alone (issue 31, item 7): two gateways on the same
//! manifest and profile, one answering a session's `tools/call` itself (`direct.rs`)
//! and one handing every request to rmcp's session worker
//! (`HttpOptions::direct_calls` off), are sent the same raw HTTP requests, and must
//! answer each with the same status and the same JSON-RPC messages, and put the same
//! calls on their records.
//!
//! What is allowed to differ, and why:
//! - The session id's value (each server makes its own): only whether an answer names
//!   one is compared.
//! - The random part of a call id (`call-<16 hex>-<n>`, from each record's own
//!   nonce): masked; the ordinal `n` is compared.
//! - The framing of a `tools/call`'s answer: the direct path sends it as one
//!   `application/json` body, rmcp as an event stream (which also carries a priming
//!   event with no data). Streamable HTTP lets a server choose either for any request;
//!   the JSON-RPC messages inside are compared.

use crate::http_direct::{Served, close, of_type, serve_with_options, wait_for};
use aegis_gateway::http::{ENDPOINT, HttpOptions};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Which session a request names.
#[derive(Clone, Copy)]
enum Session {
    /// No `Mcp-Session-Id` field.
    None,
    /// The session the script opened under this name (each server's own id).
    Opened(&'static str),
    /// This exact value, on both servers.
    Given(&'static str),
    /// The opened session's id, in two fields.
    Twice(&'static str),
}

/// One request of the script, sent alike to both servers.
#[derive(Clone)]
struct Request {
    method: &'static str,
    session: Session,
    /// Every field but `Host`, `Content-Length`, `Connection` and the session's.
    fields: Vec<(&'static str, &'static str)>,
    body: String,
}

const VERSION: &str = "MCP-Protocol-Version";

impl Request {
    /// A POST with the fields a client in a 2025-06-18 session sends.
    fn post(session: Session, body: &str) -> Request {
        Request {
            method: "POST",
            session,
            fields: vec![
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                (VERSION, "2025-06-18"),
            ],
            body: body.to_owned(),
        }
    }

    fn delete(session: Session) -> Request {
        Request {
            method: "DELETE",
            session,
            fields: vec![(VERSION, "2025-06-18")],
            body: String::new(),
        }
    }

    /// The same, with `name` set to `value` (or removed, for `None`).
    fn with(mut self, name: &'static str, value: Option<&'static str>) -> Request {
        self.fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.fields.extend(value.map(|v| (name, v)));
        self
    }
}

/// What is compared of an answer (see the module's comment for what is not).
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    /// The answer's content type; None for a `tools/call` the direct path may take
    /// (its framing may differ, deliberately).
    content_type: Option<String>,
    names_session: bool,
    /// The JSON-RPC messages carried (as a JSON body or as an event stream's data), or
    /// for any other body its text.
    body: Body,
}

#[derive(Debug, PartialEq)]
enum Body {
    Messages(Vec<Value>),
    Text(String),
}

/// One side of the comparison: a served gateway and the sessions opened on it.
struct Side {
    served: Served,
    sessions: HashMap<&'static str, String>,
}

impl Side {
    async fn start(direct_calls: bool) -> Side {
        let options = HttpOptions {
            direct_calls,
            ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
        };
        Side {
            served: serve_with_options(options, true).await,
            sessions: HashMap::new(),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.served.addr
    }

    fn head(&self, request: &Request) -> String {
        let mut head = format!(
            "{} {ENDPOINT} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            request.method,
            self.addr(),
            request.body.len()
        );
        for (name, value) in &request.fields {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        let id = |name: &str| {
            self.sessions
                .get(name)
                .expect("a session the script opened")
        };
        match request.session {
            Session::None => {}
            Session::Opened(name) => head.push_str(&format!("Mcp-Session-Id: {}\r\n", id(name))),
            Session::Given(value) => head.push_str(&format!("Mcp-Session-Id: {value}\r\n")),
            Session::Twice(name) => {
                let id = id(name);
                head.push_str(&format!("Mcp-Session-Id: {id}\r\nMcp-Session-Id: {id}\r\n"));
            }
        }
        head.push_str("\r\n");
        head
    }

    /// Sends `request` on a connection of its own; the raw answer, read to its end.
    async fn raw(&self, request: &Request) -> Vec<u8> {
        let mut stream = tokio::net::TcpStream::connect(self.addr()).await.unwrap();
        let mut bytes = self.head(request).into_bytes();
        bytes.extend_from_slice(request.body.as_bytes());
        stream.write_all(&bytes).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        answer
    }

    /// The session id an answer gave, remembered as `name`.
    fn remember(&mut self, name: &'static str, answer: &[u8]) {
        let (head, _) = split(answer);
        let id = field(&head, "mcp-session-id").expect("the answer names a session");
        self.sessions.insert(name, id);
    }

    /// (line type, tool) of the intents, in their order, then of the outcomes.
    fn record(&self) -> Vec<(String, String)> {
        ["intent", "outcome"]
            .iter()
            .flat_map(|t| of_type(&self.served.record, t))
            .map(|l| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (text(&l["line_type"]), text(&l["tool_id"]))
            })
            .collect()
    }

    /// How many lines of `line_type` name `tool`.
    fn count(&self, line_type: &str, tool: &str) -> usize {
        of_type(&self.served.record, line_type)
            .iter()
            .filter(|l| l["tool_id"] == tool)
            .count()
    }
}

/// Head (lower case) and body (de-chunked) of a raw answer.
fn split(answer: &[u8]) -> (String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let body = &answer[end + 4..];
    if field(&head, "transfer-encoding").as_deref() == Some("chunked") {
        (head, dechunk(body))
    } else {
        (head, body.to_vec())
    }
}

fn field(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (n, v) = l.split_once(':')?;
        (n.trim() == name).then(|| v.trim().to_owned())
    })
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&body[..eol]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[eol + 2 + size + 2..];
    }
}

/// What is compared of `answer`; `call` says the request was a `tools/call`.
fn seen(answer: &[u8], call: bool) -> Seen {
    let (head, body) = split(answer);
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = field(&head, "content-type").unwrap_or_default();
    let text = mask_call_ids(&String::from_utf8_lossy(&body));
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let body = match essence {
        "application/json" => Body::Messages(vec![serde_json::from_str(&text).unwrap()]),
        "text/event-stream" => Body::Messages(events(&text)),
        _ => Body::Text(text),
    };
    Seen {
        status,
        content_type: (!call).then_some(content_type),
        names_session: field(&head, "mcp-session-id").is_some(),
        body,
    }
}

/// The JSON of each event's data in an event stream (events with no data, such as
/// rmcp's priming event, carry none).
fn events(stream: &str) -> Vec<Value> {
    stream
        .replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            (!data.trim().is_empty()).then(|| serde_json::from_str(&data).unwrap())
        })
        .collect()
}

/// `call-<16 hex>-<n>` as `call-*-<n>`: the hex is each record's own nonce.
fn mask_call_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("call-") {
        let after = &rest[at + 5..];
        let hex = after.len() >= 17
            && after.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit)
            && after.as_bytes()[16] == b'-';
        out.push_str(&rest[..at + 5]);
        if hex {
            out.push('*');
            rest = &after[16..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn call(id: &str, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

fn initialize(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"diff","version":"1"}}}}}}"#
    )
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn cancelled(id: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"done waiting"}}}}"#
    )
}

/// Both servers, and the script's steps against them.
struct Pair {
    direct: Side,
    rmcp: Side,
}

impl Pair {
    /// Sends `request` to both; asserts both answers are the same; returns them.
    async fn same(&self, what: &str, request: &Request) -> Seen {
        let call = request.body.contains(r#""method":"tools/call""#);
        let direct = seen(&self.direct.raw(request).await, call);
        let rmcp = seen(&self.rmcp.raw(request).await, call);
        assert_eq!(
            direct, rmcp,
            "{what}: the direct path (left) against rmcp (right)"
        );
        direct
    }

    /// Opens a session named `name` on both (initialize, then initialized), comparing
    /// both answers.
    async fn open(&mut self, name: &'static str, initialize: Request) {
        let direct = self.direct.raw(&initialize).await;
        let rmcp = self.rmcp.raw(&initialize).await;
        assert_eq!(
            seen(&direct, false),
            seen(&rmcp, false),
            "initialize {name}: the direct path (left) against rmcp (right)"
        );
        self.direct.remember(name, &direct);
        self.rmcp.remember(name, &rmcp);
        let done = self
            .same(
                "initialized",
                &Request::post(Session::Opened(name), INITIALIZED),
            )
            .await;
        assert_eq!(done.status, 202);
    }

    /// Starts `request` (a long call) on both, each on a task of its own; returns once
    /// both records hold one more intent of `tool`.
    async fn start(&self, request: &Request, tool: &str) -> [tokio::task::JoinHandle<Vec<u8>>; 2] {
        let before = [
            self.direct.count("intent", tool),
            self.rmcp.count("intent", tool),
        ];
        let running = [&self.direct, &self.rmcp].map(|side| {
            let (addr, head, body) = (side.addr(), side.head(request), request.body.clone());
            tokio::spawn(async move {
                let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream
                    .write_all(format!("{head}{body}").as_bytes())
                    .await
                    .unwrap();
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).await.unwrap();
                answer
            })
        });
        for (side, n) in [(&self.direct, before[0]), (&self.rmcp, before[1])] {
            wait_for(&side.served, "the long call's intent", |_| {
                side.count("intent", tool) > n
            })
            .await;
        }
        running
    }

    /// Both answers to what [`Pair::start`] started, compared.
    async fn finish(&self, what: &str, running: [tokio::task::JoinHandle<Vec<u8>>; 2]) -> Seen {
        let [direct, rmcp] = running;
        let direct = seen(&direct.await.unwrap(), true);
        let rmcp = seen(&rmcp.await.unwrap(), true);
        assert_eq!(
            direct, rmcp,
            "{what}: the direct path (left) against rmcp (right)"
        );
        direct
    }
}

fn messages(seen: &Seen) -> &[Value] {
    match &seen.body {
        Body::Messages(m) => m,
        Body::Text(t) => panic!("JSON-RPC messages, not {t:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_path_and_rmcp_alone_answer_alike() {
    let mut pair = Pair {
        direct: Side::start(true).await,
        rmcp: Side::start(false).await,
    };
    let main = Session::Opened("main");
    let post = |body: &str| Request::post(main, body);

    // Sessions: opened with and without a protocol version field, and with one the
    // server does not support.
    pair.open(
        "unversioned",
        Request::post(Session::None, &initialize(1)).with(VERSION, None),
    )
    .await;
    pair.open("main", Request::post(Session::None, &initialize(1)))
        .await;
    pair.same(
        "initialize with an unsupported version field",
        &Request::post(Session::None, &initialize(1)).with(VERSION, Some("1999-01-01")),
    )
    .await;

    pair.same(
        "tools/list",
        &post(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#),
    )
    .await;
    // Calls: numeric and string ids, in each session, with each version field.
    let echo = call("3", "echo", r#"{"message":"hi"}"#);
    let answer = pair.same("a call, numeric id", &post(&echo)).await;
    assert_eq!(
        messages(&answer)[0]["result"]["isError"],
        false,
        "{answer:?}"
    );
    // Each server took it on its own path (else this compares rmcp with itself).
    let framing = |answer: Vec<u8>| field(&split(&answer).0, "content-type");
    assert_eq!(
        framing(pair.direct.raw(&post(&echo)).await).as_deref(),
        Some("application/json")
    );
    assert_eq!(
        framing(pair.rmcp.raw(&post(&echo)).await).as_deref(),
        Some("text/event-stream")
    );
    pair.same(
        "a call, string id",
        &post(&call(r#""three""#, "echo", r#"{"message":"hi"}"#)),
    )
    .await;
    pair.same(
        "a call in the session opened without a version",
        &Request::post(Session::Opened("unversioned"), &call("3", "echo", "{}"))
            .with(VERSION, None),
    )
    .await;
    for version in [
        None,
        Some("2025-03-26"),
        Some("2024-11-05"),
        Some("2025-11-25"),
        Some("2026-07-28"),
        Some("1999-01-01"),
        Some(""),
    ] {
        pair.same(
            &format!("a call with version field {version:?}"),
            &post(&call("4", "echo", "{}")).with(VERSION, version),
        )
        .await;
    }
    pair.same(
        "a call with a progress token",
        &post(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"_meta":{"progressToken":"p"},"name":"echo","arguments":{"message":"m"}}}"#),
    )
    .await;
    pair.same(
        "a call with no arguments",
        &post(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}}"#),
    )
    .await;
    // Refusals: by the tool, by the gateway (schema), by the capability station.
    let refused = pair
        .same("a tool that refuses", &post(&call("6", "refuse", "{}")))
        .await;
    assert_eq!(
        messages(&refused)[0]["result"]["isError"],
        true,
        "{refused:?}"
    );
    pair.same(
        "arguments against the schema",
        &post(&call("7", "echo-structured", "{}")),
    )
    .await;
    let unknown = pair
        .same("an unknown tool", &post(&call("8", "nope", "{}")))
        .await;
    assert!(messages(&unknown)[0]["error"].is_object(), "{unknown:?}");
    pair.same("a trap", &post(&call("9", "panic", "{}"))).await;

    // Sessions named wrongly.
    for (what, session) in [
        ("an unknown session", Session::Given("not-a-session")),
        ("no session", Session::None),
        ("an empty session field", Session::Given("")),
        ("the session field twice", Session::Twice("main")),
    ] {
        pair.same(what, &Request::post(session, &call("10", "echo", "{}")))
            .await;
    }

    // Header fields.
    for (what, name, value) in [
        (
            "Content-Type text/plain",
            "Content-Type",
            Some("text/plain"),
        ),
        ("no Content-Type", "Content-Type", None),
        (
            "Content-Type with a charset",
            "Content-Type",
            Some("application/json; charset=utf-8"),
        ),
        ("Accept JSON only", "Accept", Some("application/json")),
        (
            "Accept the event stream only",
            "Accept",
            Some("text/event-stream"),
        ),
        ("no Accept", "Accept", None),
        ("Accept */*", "Accept", Some("*/*")),
        (
            "Accept with weights",
            "Accept",
            Some("application/json;q=0.9, text/event-stream;q=0.5"),
        ),
        (
            "Accept in capitals",
            "Accept",
            Some("Application/JSON, Text/Event-Stream"),
        ),
    ] {
        pair.same(what, &post(&call("11", "echo", "{}")).with(name, value))
            .await;
    }

    // Bodies that are no plain call.
    for (what, body) in [
        ("a body that is not JSON", "{not json".to_owned()),
        ("JSON that is not JSON-RPC", r#"{"hello":1}"#.to_owned()),
        (
            "the wrong JSON-RPC version",
            r#"{"jsonrpc":"1.0","id":12,"method":"tools/call","params":{"name":"echo"}}"#
                .to_owned(),
        ),
        (
            "a null id",
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"echo"}}"#
                .to_owned(),
        ),
        (
            "a call naming no tool",
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{}}"#.to_owned(),
        ),
        (
            "an unknown member",
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"echo"},"x":1}"#
                .to_owned(),
        ),
        (
            "an unknown method",
            r#"{"jsonrpc":"2.0","id":12,"method":"nope"}"#.to_owned(),
        ),
        (
            "a batch",
            format!(
                "[{},{}]",
                call("13", "echo", "{}"),
                call("14", "echo", "{}")
            ),
        ),
        ("an empty batch", "[]".to_owned()),
        ("an empty body", String::new()),
    ] {
        pair.same(what, &post(&body)).await;
    }

    // Cancellation: a long call, its id reused while it runs, then cancelled.
    let sleep = post(&call("40", "sleep", r#"{"seconds":3600}"#));
    let sleeping = pair.start(&sleep, "sleep").await;
    pair.same("an id in use", &post(&call("40", "echo", "{}")))
        .await;
    pair.same(
        "a cancellation from no session",
        &Request::post(Session::None, &cancelled(40)),
    )
    .await;
    pair.same(
        "a cancellation from another session",
        &Request::post(Session::Opened("unversioned"), &cancelled(40)),
    )
    .await;
    pair.same("a cancellation", &post(&cancelled(40))).await;
    let answer = pair.finish("the cancelled call's answer", sleeping).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        messages(&answer),
        [] as [Value; 0],
        "no answer to a cancelled call"
    );
    for side in [&pair.direct, &pair.rmcp] {
        wait_for(&side.served, "the cancelled call's outcome", |_| {
            side.count("outcome", "sleep") == 1
        })
        .await;
    }
    pair.same("the id free again", &post(&call("40", "echo", "{}")))
        .await;
    pair.same("a cancellation of no request", &post(&cancelled(99)))
        .await;

    // A session's end: its running call stopped, then the session gone.
    pair.open("doomed", Request::post(Session::None, &initialize(1)))
        .await;
    let doomed = Session::Opened("doomed");
    let sleep = Request::post(doomed, &call("60", "sleep", r#"{"seconds":3600}"#));
    let sleeping = pair.start(&sleep, "sleep").await;
    pair.same("DELETE with no session", &Request::delete(Session::None))
        .await;
    pair.same(
        "DELETE of an unknown session",
        &Request::delete(Session::Given("not-a-session")),
    )
    .await;
    // 204: what the SDKs read as a session ended (rmcp's own 202 made the Python SDK
    // log "Session termination failed: 202" for every session).
    let ended = pair.same("DELETE", &Request::delete(doomed)).await;
    assert_eq!(ended.status, 204);
    let answer = pair.finish("the ended session's call", sleeping).await;
    assert_eq!(
        messages(&answer),
        [] as [Value; 0],
        "no answer once the session ended"
    );
    pair.same(
        "a call after DELETE",
        &Request::post(doomed, &call("61", "echo", "{}")),
    )
    .await;
    pair.same("DELETE again", &Request::delete(doomed)).await;
    pair.same(
        "a method rmcp does not serve",
        &Request {
            method: "PUT",
            ..post(&call("62", "echo", "{}"))
        },
    )
    .await;

    // The same calls on both records (intents in order, then outcomes in order).
    for side in [&pair.direct, &pair.rmcp] {
        wait_for(&side.served, "the ended session's call's outcome", |_| {
            side.count("outcome", "sleep") == 2
        })
        .await;
    }
    assert_eq!(pair.direct.record(), pair.rmcp.record());
    close(pair.direct.served).await;
    close(pair.rmcp.served).await;
}
