//! Isolation across calls in `aegis gateway`'s one long-lived host: the guarantees a
//! fresh `aegis run` gives each call must hold for every call a gateway serves, however
//! many came before it and however many run beside it.
//!
//! The gateway is the library `aegis gateway` runs ([`aegis_gateway::Gateway`]) over
//! the suite harness's host (the default profile, a YAML policy file, a durable file
//! sink, a fresh key), serving a manifest of the committed guests written into a temp
//! dir; clients are the official Rust SDK's (rmcp), each on its own in-memory pipe, as
//! separate sessions of one server. Every test ends with the record closed, verified
//! pinned to the key, and one intent and one outcome per call
//! ([`aegis_suites::check_record`]).

use aegis_gateway::{Gateway, GatewayOptions, Manifest};
use aegis_record::ExecutionOutcome;
use aegis_record::key::SigningKey;
use aegis_suites::{SUITE, check_record, guest, suite_builder};
use rmcp::RoleClient;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::RunningService;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

type Client = RunningService<RoleClient, ()>;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// What `outside/secret.txt` holds: no answer may ever contain it.
const SECRET: &str = "classified-bytes";

/// A gateway over a manifest of the committed guests, and the directories it grants:
/// `data` (read), `shared` (written by `plant`, read by `read-shared`), `a` (written
/// by `write-a`) and `b` (read by `read-b` and `list-b`); `outside` is granted to none.
struct Served {
    /// Canonical, so paths compare with what the guests see.
    base: PathBuf,
    gateway: Option<Gateway>,
    key: SigningKey,
    record: PathBuf,
    _dir: tempfile::TempDir,
}

fn tool(id: &str, guest_name: &str, rest: &str) -> String {
    format!(
        "[[tool]]\nid = \"{id}\"\ndescription = \"{id}\"\ncomponent = {:?}\n{rest}\n",
        guest(guest_name).display().to_string()
    )
}

fn argv_tool(
    id: &str,
    guest_name: &str,
    argv: &[&str],
    stdin: Option<&str>,
    roots: &str,
) -> String {
    let names: Vec<String> = argv
        .iter()
        .chain(stdin.iter())
        .map(|n| format!("{n} = {{ type = \"string\" }}"))
        .collect();
    let stdin = stdin
        .map(|s| format!("stdin = \"{s}\"\n"))
        .unwrap_or_default();
    tool(
        id,
        guest_name,
        &format!(
            "shape = \"command\"\narguments = \"argv\"\nargv = {argv:?}\n{stdin}{roots}\n[tool.input_schema]\ntype = \"object\"\nproperties = {{ {} }}",
            names.join(", ")
        ),
    )
}

impl Served {
    fn new() -> Served {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["data", "shared", "a", "b", "outside"] {
            std::fs::create_dir(base.join(d)).unwrap();
        }
        std::fs::write(base.join("data/public.txt"), "public").unwrap();
        std::fs::write(base.join("outside/secret.txt"), SECRET).unwrap();
        let manifest = [
            argv_tool(
                "read-data",
                "read-file",
                &["path"],
                None,
                "read = [\"data\"]",
            ),
            argv_tool(
                "list-data",
                "list-dir",
                &["path"],
                None,
                "read = [\"data\"]",
            ),
            argv_tool(
                "plant",
                "symlink-out",
                &["link", "target"],
                None,
                "write = [\"shared\"]",
            ),
            argv_tool(
                "read-shared",
                "read-file",
                &["path"],
                None,
                "read = [\"shared\"]",
            ),
            argv_tool(
                "write-a",
                "write-file",
                &["path"],
                Some("text"),
                "write = [\"a\"]",
            ),
            argv_tool("read-b", "read-file", &["path"], None, "read = [\"b\"]"),
            argv_tool("list-b", "list-dir", &["path"], None, "read = [\"b\"]"),
            argv_tool(
                "sleep",
                "sleep",
                &["seconds"],
                None,
                "[tool.limits]\nwall_ms = 600000",
            ),
            tool(
                "echo",
                "echo",
                "shape = \"command\"\n[tool.input_schema]\ntype = \"object\"",
            ),
            tool(
                "remember",
                "world-remember",
                "shape = \"tool\"\n[tool.input_schema]\ntype = \"object\"",
            ),
        ]
        .concat();
        let path = base.join("tools.toml");
        std::fs::write(&path, manifest).unwrap();
        let manifest = Manifest::load(&path).unwrap();
        let policy = base.join("policy.yaml");
        std::fs::write(&policy, ALLOW_ALL).unwrap();
        let key = SigningKey::generate().unwrap();
        let (builder, record) = suite_builder(&base);
        let builder = builder.policy_file(SUITE, &policy).signing_key(key.clone());
        let options = GatewayOptions {
            capacity: 16,
            ..GatewayOptions::default()
        };
        let gateway = Gateway::open(builder, &manifest, &options, Arc::new(|_| {})).unwrap();
        Served {
            base,
            gateway: Some(gateway),
            key,
            record,
            _dir: dir,
        }
    }

    fn path(&self, rel: &str) -> String {
        self.base.join(rel).display().to_string()
    }

    /// A new client session on its own pipe.
    async fn connect(&self) -> Client {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = self.gateway.as_ref().unwrap().server().clone();
        tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        ().serve(client_io).await.expect("initialize")
    }

    /// The record's lines of `line_type`, as written so far.
    fn lines(&self, line_type: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|l| l["line_type"] == line_type)
            .collect()
    }

    /// Closes the gateway (its record) and checks the record; returns the outcomes.
    fn finish(mut self, calls: usize) -> Vec<aegis_record::OutcomeLine> {
        self.gateway
            .take()
            .unwrap()
            .close()
            .expect("the record closes");
        let checked = check_record(&self.record, &self.key);
        assert_eq!(checked.outcomes.len(), calls, "one outcome per call sent");
        checked.outcomes
    }
}

fn args(v: serde_json::Value) -> JsonObject {
    match v {
        serde_json::Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

async fn call(client: &Client, name: &str, arguments: serde_json::Value) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn text_of(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_reaching_outside_its_roots_gets_nothing_however_it_asks() {
    let s = Served::new();
    let client = s.connect().await;
    let r = call(
        &client,
        "read-data",
        serde_json::json!({"path": s.path("data/public.txt")}),
    )
    .await;
    assert_eq!(text_of(&r), "public", "{r:?}");
    let mut calls = 1;
    for path in [
        s.path("outside/secret.txt"),
        format!("{}/../outside/secret.txt", s.path("data")),
        "../outside/secret.txt".into(),
        "/etc/passwd".into(),
    ] {
        let r = call(&client, "read-data", serde_json::json!({ "path": path })).await;
        calls += 1;
        assert_eq!(r.is_error, Some(true), "{path}: {r:?}");
        let said = text_of(&r);
        assert!(
            said.starts_with("Aegis stopped this tool call in the sandbox: "),
            "{path}: {said}"
        );
        assert!(!said.contains(SECRET), "{said}");
    }
    for path in [s.path("outside"), s.path(""), "/".into()] {
        let r = call(&client, "list-data", serde_json::json!({ "path": path })).await;
        calls += 1;
        assert_eq!(r.is_error, Some(true), "{path}: {r:?}");
        assert!(!text_of(&r).contains("secret.txt"), "{path}: {r:?}");
    }
    client.cancel().await.unwrap();
    let outcomes = s.finish(calls);
    assert!(
        outcomes
            .iter()
            .all(|o| o.tool_id.starts_with("read-data") || o.tool_id == "list-data")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_planted_by_one_call_leads_the_next_nowhere() {
    let s = Served::new();
    let client = s.connect().await;
    let link = s.path("shared/link");
    // Call 1 plants a relative link out of the shared write root (which the sandbox
    // lets a guest create) and cannot read through it itself.
    let r = call(
        &client,
        "plant",
        serde_json::json!({"link": link, "target": "../outside/secret.txt"}),
    )
    .await;
    let said = text_of(&r);
    assert!(said.contains("symlink: ok"), "the link is planted: {said}");
    assert!(!said.contains("read: ok"), "{said}");
    assert!(
        std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
        "the link outlives the call"
    );
    // An absolute target is refused when the link is made.
    let r = call(
        &client,
        "plant",
        serde_json::json!({"link": s.path("shared/abs"), "target": s.path("outside/secret.txt")}),
    )
    .await;
    assert!(!text_of(&r).contains("read: ok"), "{r:?}");
    // Call 2, another tool granted the same directory, follows the link: refused.
    let r = call(&client, "read-shared", serde_json::json!({ "path": link })).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(!text_of(&r).contains(SECRET), "{r:?}");
    client.cancel().await.unwrap();
    s.finish(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_replaced_between_calls_is_never_followed() {
    let s = Served::new();
    let client = s.connect().await;
    std::fs::write(s.base.join("b/data.txt"), "original").unwrap();
    std::fs::write(s.base.join("outside/data.txt"), SECRET).unwrap();
    let file = s.path("b/data.txt");
    let r = call(&client, "read-b", serde_json::json!({ "path": file })).await;
    assert_eq!(text_of(&r), "original");

    // Between calls, the root is renamed away and a symlink out takes its name.
    std::fs::rename(s.base.join("b"), s.base.join("b-old")).unwrap();
    std::os::unix::fs::symlink("outside", s.base.join("b")).unwrap();
    let r = call(&client, "read-b", serde_json::json!({ "path": file })).await;
    assert_eq!(
        text_of(&r),
        "original",
        "the held directory, not the link: {r:?}"
    );

    // Then the original goes too: refused, naming the root, never the link's target.
    std::fs::remove_dir_all(s.base.join("b-old")).unwrap();
    let r = call(&client, "read-b", serde_json::json!({ "path": file })).await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let said = text_of(&r);
    assert!(!said.contains(SECRET), "{said}");
    assert!(said.contains("removed"), "{said}");
    client.cancel().await.unwrap();
    s.finish(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_calls_memory_and_files_are_not_the_next_ones() {
    let s = Served::new();
    let client = s.connect().await;
    // Memory: world-remember returns what it finds where the previous call left its
    // input; each call must start from a fresh instance and find the module's image.
    for i in 0..4 {
        let r = call(
            &client,
            "remember",
            serde_json::json!({"mark": format!("left by call {i}")}),
        )
        .await;
        assert_eq!(r.is_error, Some(false), "{r:?}");
        let said = text_of(&r);
        assert_eq!(
            said.as_bytes(),
            aegis_test_support::remember_fresh(),
            "call {i} saw an earlier call's memory: {said:?}"
        );
    }
    // Files: a call writes under its own write root; a tool granted another root
    // cannot see it, by path or by listing.
    let written = s.path("a/note.txt");
    let r = call(
        &client,
        "write-a",
        serde_json::json!({"path": written, "text": "private"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "private");
    let r = call(&client, "read-b", serde_json::json!({ "path": written })).await;
    assert_eq!(r.is_error, Some(true));
    assert!(!text_of(&r).contains("private"));
    let r = call(
        &client,
        "list-b",
        serde_json::json!({ "path": s.path("a") }),
    )
    .await;
    assert!(!text_of(&r).contains("note.txt"), "{r:?}");
    let r = call(
        &client,
        "list-b",
        serde_json::json!({ "path": s.path("b") }),
    )
    .await;
    assert!(!text_of(&r).contains("note.txt"), "{r:?}");
    client.cancel().await.unwrap();
    s.finish(8);
}

/// Waits until `ready` holds of the gateway's record. No time limit: a gateway that
/// never writes shows as a test that does not end.
async fn wait_for(s: &Served, ready: impl Fn(&Served) -> bool) {
    while !ready(s) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_call_still_gets_its_call_an_outcome() {
    let s = Served::new();
    let leaving = s.connect().await;
    let staying = s.connect().await;
    let peer = leaving.peer().clone();
    let params = CallToolRequestParams::new("sleep")
        .with_arguments(args(serde_json::json!({"seconds": "3600"})));
    let sleeping = tokio::spawn(async move { peer.call_tool(params).await });
    wait_for(&s, |s| {
        s.lines("intent").iter().any(|l| l["tool_id"] == "sleep")
    })
    .await;
    // The session ends with the call running; the other session goes on.
    leaving.cancel().await.unwrap();
    assert!(
        sleeping.await.unwrap().is_err(),
        "the client left: no answer"
    );
    wait_for(&s, |s| {
        s.lines("outcome").iter().any(|l| l["tool_id"] == "sleep")
    })
    .await;
    let r = call(&staying, "echo", serde_json::json!({"still": "here"})).await;
    assert_eq!(text_of(&r), r#"{"still":"here"}"#);
    staying.cancel().await.unwrap();
    let outcomes = s.finish(2);
    let sleep = outcomes.iter().find(|o| o.tool_id == "sleep").unwrap();
    let ExecutionOutcome::Trap { message } = &sleep.execution else {
        panic!("{:?}", sleep.execution)
    };
    assert!(message.starts_with("cancelled: "), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_at_once_get_their_own_answers_on_one_chain() {
    const CLIENTS: usize = 12;
    const EACH: usize = 6;
    let s = Served::new();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Arc::new(s.connect().await));
    }
    let secret = s.path("outside/secret.txt");
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(c, client)| {
            let client = Arc::clone(client);
            let secret = secret.clone();
            tokio::spawn(async move {
                for k in 0..EACH {
                    let mark = format!("client {c} call {k}");
                    match k % 3 {
                        0 => {
                            let r = call(&client, "echo", serde_json::json!({ "m": mark })).await;
                            assert_eq!(text_of(&r), format!(r#"{{"m":"{mark}"}}"#));
                        }
                        1 => {
                            let r =
                                call(&client, "read-data", serde_json::json!({ "path": secret }))
                                    .await;
                            assert_eq!(r.is_error, Some(true), "{mark}");
                        }
                        _ => {
                            let r =
                                call(&client, "remember", serde_json::json!({ "m": mark })).await;
                            assert_eq!(
                                text_of(&r).as_bytes(),
                                aegis_test_support::remember_fresh(),
                                "{mark}: {r:?}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for client in clients {
        Arc::into_inner(client).unwrap().cancel().await.unwrap();
    }
    let outcomes = s.finish(CLIENTS * EACH);
    let echoes = outcomes.iter().filter(|o| o.tool_id == "echo").count();
    assert_eq!(echoes, CLIENTS * EACH / 3);
}
