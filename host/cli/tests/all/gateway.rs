//! `aegis gateway` end to end: the built binary serving tests/fixtures/gateway/tools.toml,
//! driven by the official Rust SDK's client (rmcp) over stdio and over Streamable HTTP,
//! and by raw HTTP requests for what a client library would never send (a rebound Host,
//! a foreign Origin, no token, an oversized body).
//!
//! The official peers (tests/mcp-peers/install.sh) drive it too: the MCP conformance
//! suite over Streamable HTTP against tests/fixtures/gateway/conformance.toml, failing
//! on any scenario not listed with its reason in conformance-expected-failures.yaml;
//! and the Python SDK's client (`mcp` 2.3.0) over stdio and over HTTP.
//!
//! Each test checks the record too: `aegis verify` says Verified, and every `tools/call`
//! the client sent has exactly one intent and one outcome.

use crate::common;
use crate::common::peers;

use aegis_record::json::{Object, Value};
use common::{at, field, object, text};
use rmcp::RoleClient;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Allows everything but `reverse`.
const POLICY: &str = "version: 1
default: allow
rules:
  - id: no-reverse
    action: deny
    tool: reverse
    reason: reversing is not allowed here
";

fn aegis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway")
}

/// A key, a policy and a record path in a fresh directory.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(dir.path().join("k"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
        Setup { dir }
    }

    fn record(&self) -> PathBuf {
        self.dir.path().join("record.jsonl")
    }

    /// `aegis gateway` with the fixture manifest, the policy and the durable record.
    fn gateway(&self, extra: &[&str]) -> tokio::process::Command {
        self.gateway_of("tools.toml", extra)
    }

    /// The same with another manifest in tests/fixtures/gateway.
    fn gateway_of(&self, manifest: &str, extra: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_aegis"));
        c.arg("gateway")
            .arg("--tools")
            .arg(fixtures().join(manifest))
            .arg("--policy")
            .arg(self.dir.path().join("policy.yaml"))
            .arg("--audit")
            .arg(self.record())
            .arg("--signing-key")
            .arg(self.dir.path().join("k"))
            .args(extra)
            .env("XDG_CACHE_HOME", self.dir.path().join("cache"))
            .kill_on_drop(true);
        c
    }

    /// The record verifies, and holds exactly one intent and one outcome for each of
    /// `calls` calls, matched by call id.
    fn check_record(&self, calls: usize) -> Vec<Object> {
        let out = aegis().arg("verify").arg(self.record()).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("Verified"),
            "{}",
            text(&out.stdout)
        );
        let lines: Vec<Object> = std::fs::read(self.record())
            .unwrap()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(object)
            .collect();
        let of_type = |t: &str| -> Vec<Object> {
            lines
                .iter()
                .filter(|l| field(l, "line_type") == t)
                .cloned()
                .collect()
        };
        // The open line says how the calls came in.
        let open = of_type("open");
        assert_eq!(
            at(&open[0], &["provenance", "serving", "command"]),
            "gateway"
        );
        let transport = at(&open[0], &["provenance", "serving", "transport"]);
        assert!(transport == "stdio" || transport == "http", "{transport}");
        let serving = open[0]
            .get("provenance")
            .and_then(Value::as_object)
            .and_then(|p| p.get("serving"))
            .and_then(Value::as_object)
            .expect("provenance.serving");
        assert!(serving.get("max_calls").and_then(Value::as_int).is_some());
        if transport == "http" {
            assert_eq!(serving.get("allow_non_loopback"), Some(&Value::Bool(false)));
        }
        let (intents, outcomes) = (of_type("intent"), of_type("outcome"));
        assert_eq!(intents.len(), calls, "one intent per tools/call");
        assert_eq!(outcomes.len(), calls, "one outcome per tools/call");
        for intent in &intents {
            let id = field(intent, "call_id");
            let matching = outcomes
                .iter()
                .filter(|o| field(o, "call_id") == id)
                .count();
            assert_eq!(matching, 1, "call {id}: one outcome");
        }
        assert_eq!(of_type("close").len(), 1, "the record is closed");
        outcomes
    }

    /// [`Setup::check_record`] for however many calls a client made: as many
    /// outcomes as intents, matched one to one. Returns the outcomes.
    fn check_record_pairs(&self) -> Vec<Object> {
        let intents = text(&std::fs::read(self.record()).unwrap())
            .matches(r#""line_type":"intent""#)
            .count();
        self.check_record(intents)
    }
}

fn args(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

fn first_text(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    name: &str,
    arguments: serde_json::Value,
) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The calls both transports make, and what each must answer; returns how many
/// `tools/call` requests were sent.
async fn exercise(client: &RunningService<RoleClient, ()>) -> usize {
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "echo",
        "echo-structured",
        "reverse",
        "read-file",
        "refuse",
        "panic",
        "spin",
        "sleep",
    ] {
        assert!(names.contains(&expected), "{expected} listed: {names:?}");
    }
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    let hints = echo.annotations.as_ref().expect("echo's annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert!(
        tools
            .iter()
            .find(|t| t.name == "echo-structured")
            .unwrap()
            .output_schema
            .is_some()
    );

    // Success: the arguments reach the tool as canonical JSON and come back as text.
    let r = call(client, "echo", serde_json::json!({"message": "hi"})).await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(first_text(&r), r#"{"message":"hi"}"#);

    // A declared output schema: structuredContent, checked.
    let r = call(
        client,
        "echo-structured",
        serde_json::json!({"message": "hi"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(
        r.structured_content,
        Some(serde_json::json!({"message": "hi"}))
    );

    // Arguments on argv, a read root.
    let hello = fixtures().join("data/hello.txt").canonicalize().unwrap();
    let r = call(client, "read-file", serde_json::json!({"path": hello})).await;
    assert_eq!(first_text(&r), "hello from a read root\n", "{r:?}");

    // A tool that fails says why: its stderr's tail follows the host's words, escaped.
    let missing = fixtures().join("data/no-such-file\u{1b}[2J.txt");
    let r = call(client, "read-file", serde_json::json!({"path": missing})).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let said = first_text(&r);
    assert!(said.contains("exited with status 1"), "{said}");
    let told = r
        .content
        .get(1)
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone());
    let told = told.expect("a second block with the tool's stderr");
    assert!(told.contains("No such file or directory"), "{told}");
    assert!(
        told.contains("\\u{1b}[2J") && !told.contains('\u{1b}'),
        "{told}"
    );

    // A policy refusal names the station and the call id.
    let r = call(client, "reverse", serde_json::json!({})).await;
    assert_eq!(r.is_error, Some(true));
    let said = first_text(&r);
    assert!(
        said.starts_with("Aegis refused this tool call at the policy station: refused by policy (rule no-reverse)"),
        "{said}"
    );
    assert!(said.contains("(call id: call-"), "{said}");

    // A trap, a tool's own error, a ceiling: the sandbox.
    let said = first_text(&call(client, "panic", serde_json::json!({})).await);
    assert!(
        said.starts_with("Aegis stopped this tool call in the sandbox: trapped"),
        "{said}"
    );
    let said = first_text(&call(client, "refuse", serde_json::json!({})).await);
    assert!(said.contains("refused: this tool says no"), "{said}");
    let said = first_text(&call(client, "spin", serde_json::json!({})).await);
    assert!(
        said.contains("wall_time ceiling of ") && said.contains("limits.wall_ms"),
        "{said}"
    );

    // Arguments that do not match the schema: refused by the gateway, recorded.
    let r = call(client, "echo-structured", serde_json::json!({"message": 7})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(first_text(&r).starts_with(
        "Aegis refused this tool call at the gateway station: the arguments do not match"
    ));

    // An unknown tool: a JSON-RPC error naming the recorded call.
    let e = client
        .call_tool(CallToolRequestParams::new("no-such-tool"))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown tool") && e.contains("call-"), "{e}");

    // Sixteen at once: each answered with its own arguments, each recorded once.
    let burst: Vec<_> = (0..16)
        .map(|i| {
            let peer = client.peer().clone();
            tokio::spawn(async move {
                let params = CallToolRequestParams::new("echo")
                    .with_arguments(args(serde_json::json!({"message": format!("m{i}")})));
                (i, peer.call_tool(params).await)
            })
        })
        .collect();
    for task in burst {
        let (i, r) = task.await.unwrap();
        let r = r.unwrap();
        assert_eq!(first_text(&r), format!(r#"{{"message":"m{i}"}}"#));
    }
    10 + 16
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_lists_calls_refuses_and_records_every_call() {
    let setup = Setup::new();
    let mut child = setup
        .gateway(&[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve(transport).await.expect("initialize over stdio");
    let calls = exercise(&client).await;
    // Closing stdin ends the session; the gateway closes its record and exits 0.
    client.cancel().await.unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    let outcomes = setup.check_record(calls);
    let policy_refused = outcomes
        .iter()
        .filter(|o| common::at(o, &["policy", "status"]) == "denied")
        .count();
    assert!(policy_refused >= 1);
    // read-file's schema names `path`: each of its calls records the path it tried
    // (issue 33, item 3); echo's `message` names no place and is not recorded.
    let read_file: Vec<_> = outcomes
        .iter()
        .filter(|o| common::field(o, "tool_id") == "read-file")
        .collect();
    assert!(!read_file.is_empty());
    for o in read_file {
        let values = common::at(o, &["decision_axes", "bound", "values"]);
        assert!(values.starts_with(r#"{"path":"/"#), "{values}");
    }
    for o in outcomes
        .iter()
        .filter(|o| common::field(o, "tool_id") == "echo")
    {
        assert_eq!(common::at(o, &["decision_axes", "bound", "values"]), "");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_call_still_gets_its_call_recorded() {
    let setup = Setup::new();
    let mut child = setup
        .gateway(&[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve(transport).await.expect("initialize over stdio");
    let peer = client.peer().clone();
    let params = CallToolRequestParams::new("sleep")
        .with_arguments(args(serde_json::json!({"seconds": 3600})));
    let sleeping = tokio::spawn(async move { peer.call_tool(params).await });
    // Leave once the call is on the record (its intent is durable before it runs). The
    // gateway exiting first fails the test: an observable end, never a time limit.
    while !text(&std::fs::read(setup.record()).unwrap_or_default())
        .contains(r#""line_type":"intent""#)
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the gateway exited before the call's intent"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    client.cancel().await.unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        sleeping.await.unwrap().is_err(),
        "the client left: no answer"
    );
    let outcomes = setup.check_record(1);
    let said = common::at(&outcomes[0], &["execution", "message"]);
    assert!(said.starts_with("cancelled: "), "{said}");
}

/// What the gateway has written on stderr so far.
type Said = std::sync::Arc<std::sync::Mutex<String>>;

/// Starts `aegis gateway --http 127.0.0.1:0 …` and reads the URL it serves at from its
/// stderr, which it goes on gathering.
async fn http_gateway(setup: &Setup, extra: &[&str]) -> (tokio::process::Child, String, Said) {
    http_gateway_of(setup, "tools.toml", extra).await
}

/// The same with another manifest in tests/fixtures/gateway.
async fn http_gateway_of(
    setup: &Setup,
    manifest: &str,
    extra: &[&str],
) -> (tokio::process::Child, String, Said) {
    let mut flags = vec!["--http", "127.0.0.1:0"];
    flags.extend_from_slice(extra);
    let mut child = setup
        .gateway_of(manifest, &flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap().into_owned_fd().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let said = Said::default();
    let saying = said.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(std::fs::File::from(stderr));
        let mut line = String::new();
        let mut sent = false;
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            eprint!("gateway: {line}");
            saying.lock().unwrap().push_str(&line);
            if !sent
                && let Some(at) = line
                    .split(" on ")
                    .nth(1)
                    .filter(|a| a.starts_with("http://"))
            {
                let _ = tx.send(at.trim().to_owned());
                sent = true;
            }
            line.clear();
        }
    });
    let url = rx.recv().expect("the gateway says where it serves");
    (child, url, said)
}

/// The `host:port` and the path of an `http://` URL the gateway printed.
fn authority_and_path(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap();
    rest.split_at(rest.find('/').unwrap())
}

/// One raw HTTP/1.1 POST; returns the status code.
fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    let (authority, path) = authority_and_path(url);
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {authority}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    // The server may answer before reading an oversized body; a reset is fine.
    let _ = stream.write_all(body);
    // The status line is all this needs; a stream answer may stay open after it.
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
        answer.push(byte[0]);
    }
    let head = text(&answer);
    head.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"))
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_with_token_host_origin_and_body_checks() {
    use std::os::unix::fs::PermissionsExt as _;
    let setup = Setup::new();
    let token_file = setup.dir.path().join("token");
    std::fs::write(&token_file, "tok-3141\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_path = token_file.to_str().unwrap().to_owned();
    let (mut child, url, _) =
        http_gateway(&setup, &["--token-file", &token_path, "--max-body", "4096"]).await;
    let bearer = ("Authorization", "Bearer tok-3141");

    // The raw checks run on a plain thread: they block.
    let raw_url = url.clone();
    let statuses = tokio::task::spawn_blocking(move || {
        let url = raw_url.as_str();
        let init = INITIALIZE.as_bytes();
        [
            post(url, &[], init),
            post(url, &[("Authorization", "Bearer wrong")], init),
            post(url, &[bearer, ("Host", "evil.example")], init),
            post(url, &[bearer, ("Host", "evil.example:80")], init),
            post(url, &[bearer, ("Origin", "http://evil.example")], init),
            post(url, &[bearer], &vec![b' '; 8192]),
            post(url, &[bearer], init),
        ]
    })
    .await
    .unwrap();
    assert_eq!(statuses[0], 401, "no token");
    assert_eq!(statuses[1], 401, "a wrong token");
    assert_eq!(statuses[2], 403, "a rebound Host");
    assert_eq!(statuses[3], 403, "a rebound Host with a port");
    assert_eq!(statuses[4], 403, "a foreign Origin");
    assert_eq!(statuses[5], 413, "a body over --max-body");
    assert_eq!(statuses[6], 200, "the same initialize, done right");

    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header("tok-3141"),
    );
    let client = ().serve(transport).await.expect("initialize over HTTP");
    let calls = exercise(&client).await;
    client.cancel().await.unwrap();

    // SIGTERM stops the server; it closes its record and exits 0.
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0));
    setup.check_record(calls);
}

/// The caps on connections and sessions answer 503 past them, the operator is told
/// when the connection cap is reached, and the read timeout frees held connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_caps_answer_503_and_the_operator_is_told() {
    let setup = Setup::new();
    let (child, url, said) = http_gateway(
        &setup,
        &[
            "--max-connections",
            "2",
            "--max-sessions",
            "1",
            // Long enough that a loaded machine still sends the crowded request while
            // the two held connections are open (1 s flaked under parallel builds).
            "--read-timeout",
            "3",
        ],
    )
    .await;
    let raw_url = url.clone();
    let statuses = tokio::task::spawn_blocking(move || {
        let url = raw_url.as_str();
        let init = INITIALIZE.as_bytes();
        let (authority, _) = authority_and_path(url);
        let first = post(url, &[], init);
        let second = post(url, &[], init);
        let held: Vec<_> = (0..2)
            .map(|_| std::net::TcpStream::connect(authority).unwrap())
            .collect();
        let crowded = post(url, &[("Host", "evil.example")], init);
        // The read timeout (3 s) closes the two held connections.
        std::thread::sleep(std::time::Duration::from_secs(5));
        let freed = post(url, &[("Host", "evil.example")], init);
        drop(held);
        [first, second, crowded, freed]
    })
    .await
    .unwrap();
    assert_eq!(statuses[0], 200, "the first session");
    assert_eq!(statuses[1], 503, "a session past --max-sessions");
    assert_eq!(statuses[2], 503, "a connection past --max-connections");
    assert_eq!(statuses[3], 403, "served again (and refused for its Host)");
    let said = said.lock().unwrap().clone();
    assert!(said.contains("2 connections are open"), "{said}");
    stop(child).await;
}

/// SIGTERM while a call runs (an hour's sleep, a two-minute deadline): the call is
/// stopped at once and recorded as cancelled, the gateway exits 0, and the record
/// verifies. Waiting for the call to end by itself would hold the exit for minutes, and
/// waiting for a client stalled mid-request, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_over_http_stops_a_running_call_and_records_it() {
    use rmcp::transport::StreamableHttpClientTransport;
    let setup = Setup::new();
    let (child, url, _) = http_gateway(&setup, &[]).await;
    let client = ().serve(StreamableHttpClientTransport::from_uri(url.clone())).await.unwrap();
    let mut arguments = JsonObject::new();
    arguments.insert("seconds".into(), 3600.into());
    let sleeping = tokio::spawn(async move {
        let answer = client
            .call_tool(CallToolRequestParams::new("sleep").with_arguments(arguments))
            .await;
        (client, answer)
    });
    let record = setup.record();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&record)
        .unwrap_or_default()
        .contains(r#""tool_id":"sleep""#)
    {
        assert!(
            std::time::Instant::now() < give_up,
            "the sleep call's intent never reached the record"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // A client stalled halfway through a request's head holds nothing up either.
    let (authority, _) = authority_and_path(&url);
    let mut stalled = std::net::TcpStream::connect(authority).unwrap();
    write!(stalled, "POST /mcp HTTP/1.1\r\nHost: {authority}\r\n").unwrap();
    // Well under the call's own deadline: only a stopped call lets the exit come first.
    tokio::time::timeout(std::time::Duration::from_secs(60), stop(child))
        .await
        .expect("the gateway exits without waiting for the call's deadline");
    drop(stalled);
    let (_client, answer) = sleeping.await.unwrap();
    if let Ok(result) = answer {
        assert_eq!(result.is_error, Some(true), "{result:?}");
    }
    let lines = setup.check_record(1);
    let outcome = lines
        .iter()
        .find(|l| field(l, "line_type") == "outcome")
        .unwrap();
    let message = at(outcome, &["execution", "message"]);
    assert!(
        message.starts_with("cancelled: the gateway is shutting down"),
        "{message}"
    );
}

/// Limits out of range are usage errors (exit 1), named, before anything is served.
#[test]
fn http_limits_out_of_range_are_usage_errors() {
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--max-sessions", "0"),
        ("--read-timeout", "0"),
        // Past a day: a deadline that far off overflows the clock.
        ("--read-timeout", "86401"),
        ("--write-timeout", "0"),
    ] {
        let out = aegis()
            .args(["gateway", "--tools"])
            .arg(fixtures().join("tools.toml"))
            .args(["--http", "127.0.0.1:0", flag, value])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag} {value}");
        assert!(text(&out.stderr).contains(flag), "{}", text(&out.stderr));
    }
}

#[test]
fn a_bad_manifest_is_refused_before_serving_with_its_line() {
    let setup = Setup::new();
    let manifest = setup.dir.path().join("tools.toml");
    let wasm = fixtures().join("../wasm/echo.wasm").canonicalize().unwrap();
    std::fs::write(
        &manifest,
        format!(
            "[[tool]]\nid = \"echo\"\ndescription = \"d\"\ncomponent = {:?}\nshape = \"tool\"\n[tool.input_schema]\ntype = \"object\"\n",
            wasm.display().to_string()
        ),
    )
    .unwrap();
    let out = aegis()
        .arg("gateway")
        .arg("--tools")
        .arg(&manifest)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = text(&out.stderr);
    assert!(
        said.contains(
            "tools.toml:5: tool \"echo\": shape: declared tool, but the component is command"
        ),
        "{said}"
    );
    std::fs::write(&manifest, "[[tool]]\nid = \"x\"\ncolour = 1\n").unwrap();
    let out = aegis()
        .arg("gateway")
        .arg("--tools")
        .arg(&manifest)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("tools.toml:3:"),
        "{}",
        text(&out.stderr)
    );
}

/// SIGTERM to a served gateway: it closes its record and exits 0.
async fn stop(mut child: tokio::process::Child) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(child.wait().await.unwrap().code(), Some(0));
}

/// The scenario names under `server:` in the expected-failures file (one `- name`
/// per line, each with its reason in a comment).
fn expected_failures() -> Vec<String> {
    let yaml =
        std::fs::read_to_string(fixtures().join("conformance-expected-failures.yaml")).unwrap();
    yaml.lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_passes_but_for_the_scenarios_listed_with_reasons() {
    let setup = Setup::new();
    let peers = tokio::task::spawn_blocking(|| peers::peers_dir().to_path_buf())
        .await
        .unwrap();
    let npm = peers.join("npm/node_modules");
    let (child, url, _) = http_gateway_of(&setup, "conformance.toml", &[]).await;
    // Node 22 from npm's `node` package: the suite needs it, the machine may have older.
    let out = tokio::process::Command::new(npm.join("node/bin/node"))
        .arg(npm.join("@modelcontextprotocol/conformance/dist/index.js"))
        .args([
            "server",
            "--suite",
            "all",
            "--url",
            &url,
            "--expected-failures",
        ])
        .arg(fixtures().join("conformance-expected-failures.yaml"))
        .current_dir(setup.dir.path())
        .output()
        .await
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "unexpected failures, or a listed scenario now passes (the list is stale):\n{said}"
    );
    stop(child).await;
    setup.check_record_pairs();

    // Every scenario ran (the suite's summary has a line for each: `✓ name: …` or
    // `✗ name: …`, where ✓ only says no check failed); the listed ones, and only
    // they, failed or warned (the suite's `~ name` lines); the rest passed, DNS
    // rebinding protection above all.
    let stdout = text(&out.stdout);
    let summary: Vec<(bool, String)> = stdout
        .lines()
        .filter_map(|l| {
            let (passed, rest) = match l.trim_start() {
                l if l.starts_with("✓ ") => (true, &l["✓ ".len()..]),
                l if l.starts_with("✗ ") => (false, &l["✗ ".len()..]),
                _ => return None,
            };
            let (name, counts) = rest.split_once(": ")?;
            counts
                .contains(" passed, ")
                .then(|| (passed, name.to_owned()))
        })
        .collect();
    assert_eq!(
        summary.len(),
        32,
        "the 32 server scenarios of 0.1.16: {said}"
    );
    let mut failed: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("~ "))
        .map(|n| n.trim().to_owned())
        .collect();
    let mut listed = expected_failures();
    failed.sort();
    listed.sort();
    assert_eq!(failed, listed, "{said}");
    for served in [
        "dns-rebinding-protection",
        "server-initialize",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "json-schema-2020-12",
    ] {
        assert!(
            summary.contains(&(true, served.to_owned())) && !failed.iter().any(|f| f == served),
            "{served} passes: {said}"
        );
    }
}

/// What tests/mcp-peers/client.py (the Python SDK's `mcp.Client`) got from `target`:
/// a server command (stdio) or one http:// URL.
fn python_client(dir: &Path, plan: &str, target: &[&std::ffi::OsStr]) -> Object {
    python_client_in("auto", dir, plan, target)
}

/// [`python_client`] in the SDK's `mode` (`legacy`: an initialize handshake and a
/// session, ended by a DELETE over HTTP).
fn python_client_in(mode: &str, dir: &Path, plan: &str, target: &[&std::ffi::OsStr]) -> Object {
    let peers = peers::peers_dir();
    let got = dir.join("got.json");
    let out = Command::new("python3")
        .env("PYTHONPATH", peers.join("py"))
        .arg(peers::repo().join("tests/mcp-peers/client.py"))
        .arg(mode)
        .arg(&got)
        .arg(plan)
        // For a server it starts: wasmtime's compilation cache in the test's directory.
        .arg(format!("XDG_CACHE_HOME={}", dir.join("cache").display()))
        .arg("--")
        .args(target)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "client.py: {}", text(&out.stderr));
    // In a session (legacy mode) over HTTP the SDK ends it with a DELETE and warns
    // unless it gets 200 or 204 (rmcp's 202 made it warn for every session).
    assert!(
        !text(&out.stderr).contains("Session termination failed"),
        "{}",
        text(&out.stderr)
    );
    object(&std::fs::read(&got).unwrap())
}

/// The calls every Python SDK session makes; the last reads a file that is not there,
/// inside the tool's read root, so the tool fails and says why on stderr.
fn python_plan() -> String {
    let missing = fixtures().join("data/no-such-file.txt");
    format!(
        r#"[
  {{"tool": "echo", "arguments": {{"message": "from python"}}}},
  {{"tool": "echo-structured", "arguments": {{"message": "shaped"}}}},
  {{"tool": "reverse", "arguments": {{}}}},
  {{"tool": "refuse", "arguments": {{}}}},
  {{"tool": "echo-structured", "arguments": {{"message": 7}}}},
  {{"tool": "read-file", "arguments": {{"path": {}}}}}
]"#,
        serde_json::Value::from(missing.to_str().unwrap())
    )
}

/// What the plan's calls must have got, whatever the transport.
fn check_python(got: &Object) {
    let tools: Vec<&str> = match got.get("tools") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    assert!(
        tools.contains(&"echo") && tools.contains(&"sleep"),
        "{tools:?}"
    );
    let calls: Vec<&Object> = match got.get("calls") {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    };
    assert_eq!(calls.len(), 6);
    let error = |c: &Object| c.get("isError") == Some(&Value::Bool(true));
    assert!(!error(calls[0]));
    assert_eq!(field(calls[0], "text"), r#"{"message":"from python"}"#);
    assert!(!error(calls[1]));
    assert!(
        field(calls[1], "result").contains(r#""structuredContent": {"message": "shaped"}"#),
        "{}",
        field(calls[1], "result")
    );
    assert!(error(calls[2]));
    assert!(
        field(calls[2], "text").starts_with("Aegis refused this tool call at the policy station: refused by policy (rule no-reverse)"),
        "{}",
        field(calls[2], "text")
    );
    // The facts in `_meta`, as `wrap` sends them: one refusal format for both.
    assert!(
        field(calls[2], "result").contains("dev.aegis/refusal"),
        "{}",
        field(calls[2], "result")
    );
    assert!(error(calls[3]));
    assert!(field(calls[3], "text").starts_with("Aegis stopped this tool call in the sandbox: "));
    assert!(error(calls[4]));
    assert!(
        field(calls[4], "text")
            .starts_with("Aegis refused this tool call at the gateway station: the arguments")
    );
    // A tool that fails: the client is told why (its stderr's tail), not only that it
    // exited with status 1.
    assert!(error(calls[5]));
    let said = field(calls[5], "text");
    assert!(
        said.contains("exited with status 1") && said.contains("No such file or directory"),
        "{said}"
    );
}

#[test]
fn the_python_sdk_lists_calls_and_is_refused_over_stdio() {
    let setup = Setup::new();
    let aegis = std::ffi::OsString::from(env!("CARGO_BIN_EXE_aegis"));
    let tools = fixtures().join("tools.toml").into_os_string();
    let policy = setup.dir.path().join("policy.yaml").into_os_string();
    let record = setup.record().into_os_string();
    let key = setup.dir.path().join("k").into_os_string();
    let command: Vec<&std::ffi::OsStr> = [
        aegis.as_os_str(),
        "gateway".as_ref(),
        "--tools".as_ref(),
        &tools,
        "--policy".as_ref(),
        &policy,
        "--audit".as_ref(),
        &record,
        "--signing-key".as_ref(),
        &key,
    ]
    .to_vec();
    let got = python_client(setup.dir.path(), &python_plan(), &command);
    check_python(&got);
    setup.check_record(6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lists_calls_and_is_refused_over_http() {
    let setup = Setup::new();
    let (child, url, _) = http_gateway(&setup, &[]).await;
    let dir = setup.dir.path().to_path_buf();
    let stateless_url = url.clone();
    let got = tokio::task::spawn_blocking(move || {
        python_client(
            &dir,
            &python_plan(),
            &[std::ffi::OsStr::new(&stateless_url)],
        )
    })
    .await
    .unwrap();
    check_python(&got);
    // In a session, ended cleanly by the SDK's DELETE (see python_client_in).
    let dir = setup.dir.path().to_path_buf();
    let got = tokio::task::spawn_blocking(move || {
        python_client_in(
            "legacy",
            &dir,
            &python_plan(),
            &[std::ffi::OsStr::new(&url)],
        )
    })
    .await
    .unwrap();
    check_python(&got);
    stop(child).await;
    setup.check_record(12);
}

/// A tool's roots against the gateway's own files: the manifest (a tool that rewrites
/// it widens its own grants at the next start), the record, the policy and the profile
/// beneath a write root are refused; the signing key and the bearer token beneath a
/// read root too. Nothing is served and nothing recorded.
#[test]
fn the_gateways_own_files_beneath_a_tools_roots_are_refused() {
    let setup = Setup::new();
    let dir = setup.dir.path();
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let wasm = fixtures().join("../wasm/echo.wasm").canonicalize().unwrap();
    let manifest = |root: &str, key: &str| {
        format!(
            "[[tool]]\nid = \"echo\"\ndescription = \"d\"\ncomponent = {:?}\nshape = \"command\"\n{key} = [{root:?}]\n[tool.input_schema]\ntype = \"object\"\n",
            wasm.display().to_string()
        )
    };
    let run = |tools: &Path, extra: &[&std::ffi::OsStr]| {
        let out = aegis()
            .arg("gateway")
            .arg("--tools")
            .arg(tools)
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    let outside = dir.join("tools.toml");
    std::fs::write(&outside, manifest("data", "write")).unwrap();
    let inside = data.join("tools.toml");
    std::fs::write(&inside, manifest(".", "write")).unwrap();
    let (code, err) = run(&inside, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--tools ") && err.contains("tool echo's write root"),
        "{err}"
    );

    let key = dir.join("k");
    let record = data.join("record.jsonl");
    let policy = data.join("policy.yaml");
    std::fs::copy(dir.join("policy.yaml"), &policy).unwrap();
    for (flag, file) in [("--audit", &record), ("--policy", &policy)] {
        let (code, err) = run(
            &outside,
            &[
                flag.as_ref(),
                file.as_os_str(),
                "--signing-key".as_ref(),
                key.as_os_str(),
            ],
        );
        assert_eq!(code, Some(1), "{flag}: {err}");
        assert!(err.contains(flag), "{err}");
    }
    assert!(!record.exists(), "a record was begun beneath the root");

    // Beneath a read root: the secrets only.
    std::fs::write(&outside, manifest("data", "read")).unwrap();
    let data_key = data.join("k");
    std::fs::copy(&key, &data_key).unwrap();
    let token = data.join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let (code, err) = run(&outside, &["--signing-key".as_ref(), data_key.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--signing-key") && err.contains("read root"),
        "{err}"
    );
    let (code, err) = run(
        &outside,
        &[
            "--http".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--token-file".as_ref(),
            token.as_os_str(),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--token-file"), "{err}");
}

/// A non-loopback address is refused, and the refusal names the flag that allows it.
#[tokio::test]
async fn a_non_loopback_address_is_refused_naming_the_flag() {
    let setup = Setup::new();
    let out = setup
        .gateway(&["--http", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--allow-non-loopback"), "{said}");
}
