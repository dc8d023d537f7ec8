//! The gateway's server in process, with the official SDK's client on the other end of
//! an in-memory pipe: cancellation reaches the sandbox and is recorded, and a call over
//! capacity is refused, recorded, and answered `isError`.

use aegis_gateway::{Gateway, GatewayOptions, Manifest, Notes};
use aegis_record::key::SigningKey;
use aegis_runtime::{Host, Profile};
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, JsonObject};
use rmcp::service::PeerRequestOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

fn manifest() -> Manifest {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway/tools.toml");
    Manifest::load(&path).unwrap()
}

fn quiet() -> Notes {
    Arc::new(|_| {})
}

/// A gateway over the fixture manifest, recording durably to `record`.
fn open(record: &Path, capacity: u32) -> Gateway {
    let profile = Profile::find("default").unwrap();
    let builder = Host::builder(profile)
        .audit_file("the test's record", record)
        .signing_key(SigningKey::generate().unwrap());
    let options = GatewayOptions {
        capacity,
        ..GatewayOptions::default()
    };
    Gateway::open(builder, &manifest(), &options, quiet()).unwrap()
}

fn lines(record: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of_type(record: &Path, t: &str) -> Vec<serde_json::Value> {
    lines(record)
        .into_iter()
        .filter(|l| l["line_type"] == t)
        .collect()
}

/// Waits until `ready` holds of the record. Fails when the gateway stops serving first:
/// an observable end, never a time limit.
async fn wait_for(
    record: &Path,
    serving: &tokio::task::JoinHandle<()>,
    what: &str,
    ready: impl Fn(&Path) -> bool,
) {
    while !ready(record) {
        assert!(!serving.is_finished(), "the gateway stopped before {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn args(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_the_tool_and_capacity_refuses_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let record: PathBuf = dir.path().join("record.jsonl");
    let gateway = open(&record, 1);
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = gateway.server().clone();
    let serving = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = ().serve(client_io).await.unwrap();

    // One call fills the gateway (capacity 1): it sleeps for an hour in a host call.
    let params = CallToolRequestParams::new("sleep")
        .with_arguments(args(serde_json::json!({"seconds": 3600})));
    let sleeping = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    wait_for(&record, &serving, "the sleep call's intent", |r| {
        of_type(r, "intent").len() == 1
    })
    .await;

    // The next is refused before the stations, on the record, as a result.
    let refused = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args(serde_json::json!({}))))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let said = refused.content[0].as_text().unwrap().text.clone();
    assert!(
        said.starts_with(
            "Aegis refused this tool call at the gateway station: at capacity: 1 calls"
        ),
        "{said}"
    );

    // notifications/cancelled stops the sleeping guest; its outcome says so.
    sleeping
        .cancel(Some("the test is done waiting".into()))
        .await
        .unwrap();
    wait_for(&record, &serving, "the sleep call's outcome", |r| {
        of_type(r, "outcome").len() == 2
    })
    .await;

    client.cancel().await.unwrap();
    serving.await.unwrap();
    gateway.close().unwrap();

    let intents = of_type(&record, "intent");
    let outcomes = of_type(&record, "outcome");
    assert_eq!(intents.len(), 2);
    assert_eq!(outcomes.len(), 2);
    let sleep = outcomes.iter().find(|o| o["tool_id"] == "sleep").unwrap();
    let message = sleep["execution"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cancelled: the client cancelled"),
        "{sleep}"
    );
    let echo = outcomes.iter().find(|o| o["tool_id"] == "echo").unwrap();
    assert_eq!(
        echo["policy"]["reason"],
        aegis_runtime::pipeline::NOT_REACHED,
        "{echo}"
    );
    assert_eq!(of_type(&record, "close").len(), 1);
}

#[test]
fn a_component_that_does_not_load_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("broken.wasm"), b"\0asm not really").unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(
        &path,
        "[[tool]]\nid = \"broken\"\ndescription = \"d\"\ncomponent = \"broken.wasm\"\nshape = \"command\"\n[tool.input_schema]\ntype = \"object\"\n",
    )
    .unwrap();
    let manifest = Manifest::load(&path).unwrap();
    let builder = Host::builder(Profile::find("default").unwrap());
    let e = Gateway::open(builder, &manifest, &GatewayOptions::default(), quiet())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("tools.toml:4: tool \"broken\": component: "),
        "{e}"
    );

    // A root that does not exist: refused at start, at the `read` line.
    std::fs::write(
        &path,
        format!(
            "[[tool]]\nid = \"echo\"\ndescription = \"d\"\ncomponent = {:?}\nshape = \"command\"\nread = [\"nowhere\"]\n[tool.input_schema]\ntype = \"object\"\n",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/wasm/echo.wasm")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let manifest = Manifest::load(&path).unwrap();
    let builder = Host::builder(Profile::find("default").unwrap());
    let e = Gateway::open(builder, &manifest, &GatewayOptions::default(), quiet())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tools.toml:6: tool \"echo\": root "), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_blocks_are_served_checked_and_refused_with_the_reason() {
    // echo declared `output = "content"`: its output is the call's own arguments, so
    // the test chooses the blocks the tool returns, good and bad.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tools.toml");
    std::fs::write(
        &path,
        format!(
            "[[tool]]\nid = \"blocks\"\ndescription = \"d\"\ncomponent = {:?}\nshape = \"command\"\noutput = \"content\"\n[tool.input_schema]\ntype = \"object\"\n",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures/wasm/echo.wasm")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let record = dir.path().join("record.jsonl");
    let builder = Host::builder(Profile::find("default").unwrap())
        .audit_file("the test's record", &record)
        .signing_key(SigningKey::generate().unwrap());
    let gateway = Gateway::open(
        builder,
        &Manifest::load(&path).unwrap(),
        &GatewayOptions::default(),
        quiet(),
    )
    .unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = gateway.server().clone();
    let serving = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = ().serve(client_io).await.unwrap();
    let call = |v: serde_json::Value| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(CallToolRequestParams::new("blocks").with_arguments(args(v)))
                .await
                .unwrap()
        }
    };

    let r = call(serde_json::json!({"content": [
        {"type": "text", "text": "a picture:"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "t"}}
    ]}))
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(r.content.len(), 4);
    let image = r.content[1].as_image().expect("an image block");
    assert_eq!(image.mime_type, "image/png");
    assert!(r.content[2].as_audio().is_some());
    assert!(r.content[3].as_resource().is_some());

    for (blocks, why) in [
        (
            serde_json::json!([{"type": "video", "data": "AAE="}]),
            "block 0: type \"video\" is not served",
        ),
        (
            serde_json::json!([{"type": "image", "data": "not base64", "mimeType": "image/png"}]),
            "block 0: \"data\" is not base64",
        ),
        (
            serde_json::json!([{"type": "text", "text": "ok"}, {"type": "image", "data": "AAE=", "mimeType": "text/html"}]),
            "block 1: mimeType \"text/html\" is not an image/",
        ),
        (
            serde_json::json!({"blocks": []}),
            "the output object's \"content\" is not an array",
        ),
    ] {
        let r = call(serde_json::json!({ "content": blocks })).await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let said = r.content[0].as_text().unwrap().text.clone();
        assert!(
            said.starts_with(
                "Aegis refused this tool call at the gateway station: the tool succeeded but its output is not MCP content blocks: "
            ),
            "{said}"
        );
        assert!(said.contains(why), "{why}: {said}");
        assert!(said.contains("(call id: call-"), "{said}");
    }

    client.cancel().await.unwrap();
    serving.await.unwrap();
    gateway.close().unwrap();
    // The record says what the tool did: five successful calls.
    let outcomes = of_type(&record, "outcome");
    assert_eq!(outcomes.len(), 5);
    assert!(
        outcomes
            .iter()
            .all(|o| o["execution"]["status"] == "success"),
        "{outcomes:?}"
    );
}

/// The policy sees each call's arguments: a rule over one argument allows the call
/// that matches and refuses the one that does not, before the sandbox, and the record
/// names the value the rule compared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_over_arguments_decides_each_call() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: deny\nrules:\n  - id: greet-only\n    action: allow\n    \
         tool: echo\n    arguments:\n      message: { equals: hello }\n",
    )
    .unwrap();
    let record = dir.path().join("record.jsonl");
    let builder = Host::builder(Profile::find("default").unwrap())
        .policy_file("the test's policy", &policy)
        .audit_file("the test's record", &record)
        .signing_key(SigningKey::generate().unwrap());
    // One slot: a parked call that held it would leave none for the next call.
    let options = GatewayOptions {
        capacity: 1,
        ..GatewayOptions::default()
    };
    let gateway = Gateway::open(builder, &manifest(), &options, quiet()).unwrap();
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = gateway.server().clone();
    let serving = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = ().serve(client_io).await.unwrap();
    let call = |v: serde_json::Value| {
        let peer = client.peer().clone();
        async move {
            peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args(v)))
                .await
                .unwrap()
        }
    };
    let ok = call(serde_json::json!({"message": "hello"})).await;
    assert_eq!(ok.is_error, Some(false), "{ok:?}");
    let refused = call(serde_json::json!({"message": "hello there"})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let text = refused.content[0].as_text().unwrap().text.clone();
    assert!(
        text.starts_with("Aegis refused this tool call at the policy station:"),
        "{text}"
    );
    wait_for(&record, &serving, "both outcomes", |r| {
        of_type(r, "outcome").len() == 2
    })
    .await;
    let outcomes = of_type(&record, "outcome");
    assert_eq!(outcomes[0]["policy"]["status"], "allowed");
    assert_eq!(outcomes[0]["decision_axes"]["matched_rule"], "greet-only");
    assert_eq!(
        outcomes[0]["decision_axes"]["arguments"],
        r#"{"message":"hello"}"#
    );
    assert_eq!(outcomes[1]["policy"]["status"], "denied");
    assert_eq!(outcomes[1]["execution"]["status"], "host_denied");
    drop(client);
    serving.abort();
}

/// A gateway over the fixture manifest on the default profile's volatile sink, where
/// each call runs in a task of its own on the serving runtime (no blocking pool).
fn open_volatile(capacity: u32) -> Gateway {
    let builder = Host::builder(Profile::find("default").unwrap());
    let options = GatewayOptions {
        capacity,
        ..GatewayOptions::default()
    };
    let gateway = Gateway::open(builder, &manifest(), &options, quiet()).unwrap();
    assert_eq!(*gateway.notice(), aegis_runtime::AuditNotice::Volatile);
    gateway
}

/// The volatile sink's path keeps the durable path's promises: many clients at once
/// each get their own answers, cancellation stops the guest and says so, the gateway
/// at capacity refuses, a client that leaves mid-call leaves a call that still gets its
/// outcome, and the exported record verifies with one outcome per intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_volatile_sink_calls_run_in_their_own_tasks_and_each_is_recorded() {
    const CLIENTS: usize = 8;
    const EACH: usize = 5;
    let gateway = open_volatile(2);
    let connect = || {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = gateway.server().clone();
        let serving = tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        (client_io, serving)
    };

    // Clients at once; capacity 2, so some calls are refused, never mixed up.
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let (io, serving) = connect();
        clients.push(tokio::spawn(async move {
            let client = ().serve(io).await.unwrap();
            let mut answered = (0, 0);
            for i in 0..EACH {
                let text = format!("client {c} call {i}");
                let r = client
                    .call_tool(
                        CallToolRequestParams::new("echo")
                            .with_arguments(args(serde_json::json!({ "text": text }))),
                    )
                    .await
                    .unwrap();
                let said = r.content[0].as_text().unwrap().text.clone();
                if r.is_error == Some(true) {
                    assert!(said.contains("at capacity"), "{said}");
                    answered.1 += 1;
                } else {
                    assert!(said.contains(&text), "{c}/{i} got {said}");
                    answered.0 += 1;
                }
            }
            client.cancel().await.unwrap();
            serving.await.unwrap();
            answered
        }));
    }
    let mut served = 0;
    for c in clients {
        let (ok, refused) = c.await.unwrap();
        served += ok + refused;
    }
    assert_eq!(served, CLIENTS * EACH);

    // A call cancelled while it sleeps in a host call.
    let (io, serving) = connect();
    let client = ().serve(io).await.unwrap();
    let sleeping = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(
                CallToolRequestParams::new("sleep")
                    .with_arguments(args(serde_json::json!({"seconds": 3600}))),
            )),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    // A client that leaves while its call runs (for a second).
    let (io2, serving2) = connect();
    let leaver = ().serve(io2).await.unwrap();
    let peer = leaver.peer().clone();
    let left = tokio::spawn(async move {
        peer.call_tool(
            CallToolRequestParams::new("sleep")
                .with_arguments(args(serde_json::json!({"seconds": 1}))),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    leaver.cancel().await.unwrap();
    assert!(
        left.await.unwrap().is_err(),
        "the client left before its answer"
    );
    sleeping
        .cancel(Some("the test is done waiting".into()))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    serving.await.unwrap();
    serving2.await.unwrap();

    let record = gateway.close_and_export().unwrap();
    let report = aegis_record::verify::verify(
        &record[..],
        &aegis_record::verify::Options {
            trust: None,
            threads: 0,
            approvers: None,
        },
    )
    .unwrap();
    assert!(
        matches!(report.verdict(), aegis_record::verify::Verdict::Verified(_)),
        "{}",
        report.to_text()
    );
    let lines: Vec<serde_json::Value> = record
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let ids = |t: &str| -> Vec<String> {
        let mut ids: Vec<String> = lines
            .iter()
            .filter(|l| l["line_type"] == t)
            .map(|l| l["call_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let intents = ids("intent");
    assert_eq!(intents.len(), CLIENTS * EACH + 2);
    assert_eq!(intents, ids("outcome"), "one outcome for each intent");
    let sleeps: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["line_type"] == "outcome" && l["tool_id"] == "sleep")
        .collect();
    assert_eq!(sleeps.len(), 2);
    let status = |l: &serde_json::Value| l["execution"]["status"].as_str().map(str::to_owned);
    let cancelled = |l: &serde_json::Value| {
        l["execution"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("cancelled: the client cancelled"))
    };
    // The hour-long call can only have been cancelled. The one whose client left ran
    // on in its task: to its end, or until the session's end cancelled it; never
    // dropped with its request (which would record it as abandoned).
    assert!(sleeps.iter().any(|l| cancelled(l)), "{sleeps:?}");
    for l in &sleeps {
        assert!(
            cancelled(l) || status(l).as_deref() == Some("success"),
            "{l}"
        );
    }
}

/// Parks every `echo` call.
const PARKS_ECHO: &str = "version: 1\ndefault: allow\nrules:\n  - id: echo-needs-a-person\n    action: pending_approval\n    tool: echo\n";

/// A gateway over the fixture manifest (capacity 1) whose policy parks `echo`, with a
/// desk over the queue in `dir/queue`.
fn open_parking(dir: &Path) -> Gateway {
    open_parking_for(dir, None)
}

/// [`open_parking`], parks expiring after `timeout` (`None`: the default).
fn open_parking_for(dir: &Path, timeout: Option<Duration>) -> Gateway {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, PARKS_ECHO).unwrap();
    let record = dir.join("record.jsonl");
    let mut builder = Host::builder(Profile::find("default").unwrap())
        .policy_file("the test's policy", &policy)
        .audit_file("the test's record", &record)
        .signing_key(SigningKey::generate().unwrap());
    if let Some(timeout) = timeout {
        builder = builder.approval_timeout(timeout);
    }
    // One slot: a parked call that held it would leave none for the next call.
    let options = GatewayOptions {
        capacity: 1,
        ..GatewayOptions::default()
    };
    let gateway = Gateway::open(builder, &manifest(), &options, quiet()).unwrap();
    let desk = aegis_runtime::approvals::Desk::new(
        Some(dir.join("queue")),
        aegis_approvals::Front::Gateway,
        gateway.notice().location(),
        None,
    );
    gateway.with_desk(desk)
}

/// The ids of the requests filed in `queue`.
fn filed(queue: &Path) -> Vec<String> {
    std::fs::read_dir(queue)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".request").map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A parked call waits without a sandbox slot; the client's `notifications/cancelled`
/// withdraws it (the host's decision, recorded once), and one still waiting when the
/// gateway closes is withdrawn too, before the record closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_park_is_withdrawn_and_closing_withdraws_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let queue = dir.path().join("queue");
    let gateway = open_parking(dir.path());
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = gateway.server().clone();
    let serving = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = ().serve(client_io).await.unwrap();
    let echo = || {
        ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"message": "hold me"}))),
        ))
    };

    let first = client
        .send_cancellable_request(echo(), PeerRequestOptions::no_options())
        .await
        .unwrap();
    while filed(&queue).is_empty() {
        assert!(!serving.is_finished(), "the gateway stopped before filing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A parked call holds no slot: with capacity 1, an ordinary call still runs while
    // it waits.
    let ran = client
        .call_tool(
            CallToolRequestParams::new("echo-structured")
                .with_arguments(args(serde_json::json!({"message": "meanwhile"}))),
        )
        .await
        .unwrap();
    assert_eq!(ran.is_error, Some(false), "{ran:?}");

    first
        .cancel(Some("the test is done waiting".into()))
        .await
        .unwrap();
    wait_for(&record, &serving, "the withdrawal", |r| {
        of_type(r, "decision").len() == 1
    })
    .await;

    // A second park, still waiting when the gateway closes.
    let second = client
        .send_cancellable_request(echo(), PeerRequestOptions::no_options())
        .await
        .unwrap();
    while filed(&queue).len() < 2 {
        assert!(!serving.is_finished(), "the gateway stopped before filing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let closing = tokio::task::spawn_blocking(move || gateway.close());
    closing.await.unwrap().unwrap();
    drop(second);
    client.cancel().await.unwrap();
    serving.await.unwrap();

    let decisions = of_type(&record, "decision");
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    for d in &decisions {
        assert_eq!(d["approver"]["via"], "host", "{d}");
        assert_eq!(d["approver"]["why"], "withdrawn", "{d}");
    }
    let reasons: Vec<&str> = decisions
        .iter()
        .filter_map(|d| d["verdict"]["reason"].as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("the client cancelled")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("shutting down")),
        "{reasons:?}"
    );
    let outcomes = of_type(&record, "outcome");
    let parked = outcomes
        .iter()
        .filter(|o| o["policy"]["status"] == "pending_approval")
        .count();
    assert_eq!(parked, 2, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o["decision_axes"].get("approval_ref").is_none()),
        "nothing resumed: {outcomes:?}"
    );
    assert_eq!(of_type(&record, "close").len(), 1);
}

/// A client on protocol 2026-07-28 (`server/discover`) that declares form elicitation.
struct Mrtr;

impl rmcp::ClientHandler for Mrtr {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap();
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("mrtr-test", "1"),
        )
    }
}

/// The facts of a refusal, from its `_meta`.
fn cause_of(result: &rmcp::model::CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    serde_json::to_string(&result.meta).unwrap()
}

/// `gateway` serving one in-process client that negotiated 2026-07-28 (`server/discover`),
/// and the task serving it.
async fn connect_2026(
    gateway: &Gateway,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Mrtr>,
    tokio::task::JoinHandle<()>,
) {
    use rmcp::model::ProtocolVersion;
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let server = gateway.server().clone();
    let serving = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = Mrtr
        .serve_with_lifecycle(client_io, lifecycle)
        .await
        .unwrap();
    (client, serving)
}

/// The `input_required` round (MCP 2026-07-28) against forged retries: a retry echoing
/// a `requestState` this gateway never gave, the right one with other arguments or
/// another tool, or with no answer, is refused (`approval_mismatch`, recorded before
/// the stations) and nothing runs, the park left as it was; the real retry then
/// settles it (declined here: nothing runs), and a second retry of the settled park is
/// refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_changed_retry_of_an_input_required_park_runs_nothing() {
    use rmcp::model::CallToolResponse;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let gateway = open_parking(dir.path()).asking_clients();
    let (client, serving) = connect_2026(&gateway).await;
    let call = |tool: &'static str, message: &str| {
        CallToolRequestParams::new(tool)
            .with_arguments(args(serde_json::json!({"message": message})))
    };
    let answer = |action: &str| {
        let mut responses = rmcp::model::InputResponses::new();
        responses.insert(
            "approval".to_owned(),
            serde_json::json!({"action": action, "content": {"approve": true}}),
        );
        responses
    };

    let first = client
        .call_tool_once(call("echo", "hold me"))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("not input_required: {first:?}");
    };
    let id = asked.request_state.clone().unwrap();
    assert!(id.starts_with("apr-"), "{id}");
    let question = serde_json::to_string(&asked.input_requests).unwrap();
    assert!(
        question.contains("elicitation/create") && question.contains(&id),
        "{question}"
    );
    assert!(of_type(&record, "decision").is_empty());

    let retries = [
        call("echo", "hold me")
            .with_input_responses(answer("accept"))
            .with_request_state("apr-forged"),
        call("echo", "something else")
            .with_input_responses(answer("accept"))
            .with_request_state(id.clone()),
        call("echo-structured", "hold me")
            .with_input_responses(answer("accept"))
            .with_request_state(id.clone()),
        call("echo", "hold me")
            .with_input_responses(rmcp::model::InputResponses::new())
            .with_request_state(id.clone()),
    ];
    for retry in retries {
        let got = client.call_tool_once(retry).await.unwrap();
        let CallToolResponse::Complete(result) = got else {
            panic!("not a result: {got:?}");
        };
        assert!(
            cause_of(&result).contains("approval_mismatch"),
            "{result:?}"
        );
    }
    assert!(of_type(&record, "decision").is_empty(), "nothing decided");

    let declined = call("echo", "hold me")
        .with_input_responses(answer("decline"))
        .with_request_state(id.clone());
    let got = client.call_tool_once(declined).await.unwrap();
    let CallToolResponse::Complete(result) = got else {
        panic!("not a result: {got:?}");
    };
    assert!(cause_of(&result).contains("approval_denied"), "{result:?}");
    let again = call("echo", "hold me")
        .with_input_responses(answer("accept"))
        .with_request_state(id.clone());
    let got = client.call_tool_once(again).await.unwrap();
    let CallToolResponse::Complete(result) = got else {
        panic!("not a result: {got:?}");
    };
    assert!(
        cause_of(&result).contains("approval_mismatch"),
        "{result:?}"
    );

    // A park whose retry never comes: the gateway's close withdraws it, on the record.
    let left = client.call_tool_once(call("echo", "left")).await.unwrap();
    assert!(
        matches!(left, CallToolResponse::InputRequired(_)),
        "{left:?}"
    );

    let closing = tokio::task::spawn_blocking(move || gateway.close());
    closing.await.unwrap().unwrap();
    client.cancel().await.unwrap();
    serving.await.unwrap();
    let decisions = of_type(&record, "decision");
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["approver"]["via"], "client");
    assert_eq!(decisions[1]["approver"]["via"], "host");
    assert_eq!(decisions[1]["approver"]["why"], "withdrawn");
    let outcomes = of_type(&record, "outcome");
    assert!(
        outcomes
            .iter()
            .all(|o| o["decision_axes"].get("approval_ref").is_none()
                && o["execution"]["status"] != "succeeded"),
        "nothing ran: {outcomes:?}"
    );
    // The two parks and the five refused retries, each on the record.
    assert_eq!(outcomes.len(), 7, "{outcomes:?}");
}

/// A retry that comes after the park expired: the client's answer is not placed; the
/// host's expiry denial is, and recorded, and the retry is answered `approval_expired`;
/// nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_park_expired_is_told_so_and_runs_nothing() {
    use rmcp::model::CallToolResponse;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.jsonl");
    let gateway = open_parking_for(dir.path(), Some(Duration::from_millis(300))).asking_clients();
    let (client, serving) = connect_2026(&gateway).await;
    let call = CallToolRequestParams::new("echo")
        .with_arguments(args(serde_json::json!({"message": "too late"})));
    let first = client.call_tool_once(call.clone()).await.unwrap();
    let CallToolResponse::InputRequired(asked) = first else {
        panic!("not input_required: {first:?}");
    };
    let id = asked.request_state.unwrap();
    // Past the park's expiry (not a timing assertion: only ordering matters).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut responses = rmcp::model::InputResponses::new();
    responses.insert(
        "approval".to_owned(),
        serde_json::json!({"action": "accept", "content": {"approve": true}}),
    );
    let retry = call
        .with_input_responses(responses)
        .with_request_state(id.clone());
    let got = client.call_tool_once(retry).await.unwrap();
    let CallToolResponse::Complete(result) = got else {
        panic!("not a result: {got:?}");
    };
    assert!(cause_of(&result).contains("approval_expired"), "{result:?}");

    let closing = tokio::task::spawn_blocking(move || gateway.close());
    closing.await.unwrap().unwrap();
    client.cancel().await.unwrap();
    serving.await.unwrap();
    let decisions = of_type(&record, "decision");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["approver"]["via"], "host", "{decisions:?}");
    assert_eq!(decisions[0]["approver"]["why"], "expired", "{decisions:?}");
    assert_eq!(of_type(&record, "outcome").len(), 1, "only the park");
}
