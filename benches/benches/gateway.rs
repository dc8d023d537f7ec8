//! `aegis gateway`'s `tools/call`, end to end in one process: the gateway library the
//! CLI runs (`aegis_gateway::Gateway`, the default profile, the wasmtime sandbox)
//! serving the fixture guest `echo`, and the official Rust SDK's client (rmcp) calling
//! it, against the bare pipeline call the gateway wraps. Every call is audited and
//! sandboxed; the client is the same process, so its cost is in every number.
//!
//! - `round_trip/bare_pipeline`: `Pipeline::call` of `echo` with the input a gateway
//!   call gives it (the arguments' canonical JSON), on the volatile memory sink.
//! - `round_trip/server_call`: the gateway's own call (`GatewayServer::call`, what both
//!   transports reach), awaited on the bench's thread: the gateway without transport.
//! - `round_trip/stdio`: one `tools/call` → result through the gateway, JSON lines
//!   over an in-memory pipe (the stdio transport's framing, no process boundary).
//! - `round_trip/http`: the same over Streamable HTTP on a loopback socket (one
//!   session, rmcp's reqwest client) [≤ 0.25 ms].
//! - `round_trip/http_raw`: the same call over HTTP from a minimal client (one
//!   keep-alive connection, the request's bytes built once, the response read whole
//!   and checked): what the gateway costs without an SDK client's. rmcp's client opens
//!   a new connection for most calls (it drops the event stream before its end).
//! - `calls/{volatile,durable}/{1,16}`: calls per second with 1 and 16 concurrent
//!   clients, each its own HTTP session, on the memory sink and on the durable file
//!   sink (fdatasync, group commit) [volatile/16 ≥ 8,000 calls/s].
//! - `calls/volatile_raw/{1,16}`: the volatile case with the minimal client.
//! - `round_trip/http_pooled`, `calls/volatile_pooled/16`: rmcp's client given a
//!   reqwest client that keeps connections. rmcp's own default turns reqwest's pool off
//!   (`pool_max_idle_per_host(0)`, against delayed-ACK stalls from servers without
//!   `TCP_NODELAY`), so every call of `…/http` opens a connection.
//! - `control/http`, `control/http_raw`: the control. rmcp's own Streamable HTTP server
//!   with an `echo` tool answered in its handler (no policy, no sandbox, no record, no
//!   direct path), called by rmcp's client and by the minimal one: what a bare SDK tool
//!   call costs on this machine, to read the published SDK figures against.
//!   `control/calls/{rmcp,raw}/16`: its calls per second with 16 such clients.
//! - `control/http_floor`: axum answering each POST with a fixed body, called by the
//!   minimal client: a loopback HTTP exchange between two threads, with nothing else.
//! - `direct/…`: the same gateway with a session's `tools/call` answered by the
//!   direct path (`host/gateway/src/direct.rs`) and by rmcp's session worker alone,
//!   side by side in one run (see [`direct`]).
//!
//! The servers run on a runtime of their own with two workers, as `aegis gateway`
//! does (`GATEWAY_BENCH_RUNTIME=workers=N` changes that, for experiments). The
//! clients run on the bench's own thread (a single-threaded runtime), as a client in
//! a process of its own would: never on a server's thread.

use aegis_gateway::http::HttpOptions;
use aegis_gateway::{Gateway, GatewayOptions, Manifest};
use aegis_record::key::SigningKey;
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_runtime::{Host, Profile};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use rmcp::RoleClient;
use rmcp::ServiceExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// The allocator the `aegis` binary ships with (`host/cli/src/main.rs`), so the gateway
/// served here allocates as `aegis gateway` does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Client = RunningService<RoleClient, ()>;

const MANIFEST: &str = r#"[[tool]]
id = "echo"
description = "echo"
component = "../tests/fixtures/wasm/echo.wasm"
shape = "command"
[tool.input_schema]
type = "object"
properties = { message = { type = "string" } }
"#;

fn manifest() -> Manifest {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("gateway-bench.toml");
    Manifest::parse(MANIFEST, &path).unwrap()
}

/// A gateway on the default profile: its memory sink, or a durable record in `dir`.
fn gateway(durable: Option<&Path>) -> Gateway {
    let mut builder = Host::builder(Profile::embedded("default").unwrap());
    if let Some(dir) = durable {
        builder = builder
            .audit_file("the bench", &dir.join("record.aarl"))
            .signing_key(SigningKey::generate().unwrap());
    }
    let options = GatewayOptions {
        capacity: 32,
        ..GatewayOptions::default()
    };
    Gateway::open(builder, &manifest(), &options, Arc::new(|_| {})).unwrap()
}

fn arguments() -> JsonObject {
    match serde_json::json!({"message": "hello"}) {
        serde_json::Value::Object(o) => o,
        _ => unreachable!(),
    }
}

async fn call(client: &Client) {
    let r = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments()))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    black_box(r);
}

/// A server of this bench, serving on its runtime until dropped.
struct Served {
    runtime: Option<tokio::runtime::Runtime>,
    stop: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
        drop(self.runtime.take());
    }
}

/// Serves `gateway` over HTTP on a loopback port, on a runtime of its own as `aegis
/// gateway` does; returns its URL.
fn serve_http(gateway: &Gateway) -> (String, Served) {
    serve_http_with(gateway, true)
}

/// [`serve_http`], with a session's `tools/call` answered by the direct path
/// (`direct_calls`) or by rmcp's session worker.
fn serve_http_with(gateway: &Gateway, direct_calls: bool) -> (String, Served) {
    let runtime = server_runtime();
    let options = HttpOptions {
        direct_calls,
        ..HttpOptions::new("127.0.0.1:0".parse().unwrap())
    };
    let listener = runtime
        .block_on(aegis_gateway::http::bind(&options))
        .unwrap();
    let url = format!(
        "http://{}{}",
        listener.local_addr().unwrap(),
        aegis_gateway::http::ENDPOINT
    );
    let stop = CancellationToken::new();
    let (server, stopping) = (gateway.server().clone(), stop.clone());
    runtime.spawn(async move {
        aegis_gateway::http::serve(server, listener, &options, stopping)
            .await
            .unwrap();
    });
    (
        url,
        Served {
            runtime: Some(runtime),
            stop,
        },
    )
}

/// The control's server: an `echo` tool answered by rmcp's handler itself.
#[derive(Clone)]
struct BareEcho;

impl rmcp::ServerHandler for BareEcho {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, rmcp::ErrorData> {
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let text = ContentBlock::text(arguments.to_string());
        Ok(CallToolResult::success(vec![text]).into())
    }
}

/// Serves [`BareEcho`] with rmcp's defaults (sessions, event streams) on a loopback
/// port, with the gateway's Host and Origin checks; returns its URL.
fn serve_bare() -> (String, Served) {
    serve_router(|authority, stop| {
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(vec![authority.to_owned()])
            .with_allowed_origins(vec![format!("http://{authority}")])
            .with_cancellation_token(stop.child_token());
        let service: StreamableHttpService<BareEcho, LocalSessionManager> =
            StreamableHttpService::new(|| Ok(BareEcho), Default::default(), config);
        axum::Router::new().nest_service(aegis_gateway::http::ENDPOINT, service)
    })
}

/// The floor under any MCP server over HTTP here: axum answering every POST with one
/// fixed JSON-RPC result (and a session id), no MCP parsing, no call.
fn serve_floor() -> (String, Served) {
    serve_router(|_, _| {
        let answer = || async {
            (
                [
                    ("content-type", "application/json"),
                    ("mcp-session-id", "floor"),
                ],
                r#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":false}}"#,
            )
        };
        axum::Router::new().route(aegis_gateway::http::ENDPOINT, axum::routing::post(answer))
    })
}

/// Serves the router `make` builds (given its authority and stop token) on a loopback
/// port with `TCP_NODELAY`, on a runtime of its own as the gateway's; returns its URL.
fn serve_router(make: impl FnOnce(&str, &CancellationToken) -> axum::Router) -> (String, Served) {
    let runtime = server_runtime();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let authority = listener.local_addr().unwrap().to_string();
    let stop = CancellationToken::new();
    let router = make(&authority, &stop);
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let stopping = stop.clone();
    runtime.spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(stopping.cancelled_owned())
            .await
            .unwrap();
    });
    let url = format!("http://{authority}{}", aegis_gateway::http::ENDPOINT);
    (
        url,
        Served {
            runtime: Some(runtime),
            stop,
        },
    )
}

async fn http_client(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

/// rmcp's client over a reqwest client with its default pool (connections kept).
async fn pooled_client(url: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ().serve(transport).await.unwrap()
}

/// A minimal MCP client over one keep-alive HTTP/1.1 connection, in a 2025-06-18
/// session: it sends a `tools/call` whose bytes were built once and reads the
/// response whole, chunked or not.
struct RawClient {
    stream: tokio::net::TcpStream,
    authority: String,
    session: String,
    call: Vec<u8>,
    buf: Vec<u8>,
}

impl RawClient {
    async fn connect(url: &str) -> RawClient {
        let authority = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut client = RawClient {
            stream,
            authority,
            session: String::new(),
            call: Vec::new(),
            buf: Vec::with_capacity(8192),
        };
        let init = client.request(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#,
        );
        let head = client.send(&init).await;
        client.session = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_owned())
            })
            .expect("a session id");
        let initialized =
            client.request(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        client.send(&initialized).await;
        client.call = client.request(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello"}}}"#,
        );
        client
    }

    fn request(&self, body: &str) -> Vec<u8> {
        let session = if self.session.is_empty() {
            String::new()
        } else {
            format!("Mcp-Session-Id: {}\r\n", self.session)
        };
        format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n\
             {session}Content-Length: {}\r\n\r\n{body}",
            aegis_gateway::http::ENDPOINT,
            self.authority,
            body.len()
        )
        .into_bytes()
    }

    /// Sends `request`, reads one whole response; returns its text.
    async fn send(&mut self, request: &[u8]) -> String {
        self.stream.write_all(request).await.unwrap();
        self.buf.clear();
        loop {
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the gateway closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
            let body = &self.buf[end + 4..];
            let complete = match head.lines().find_map(|l| l.strip_prefix("content-length:")) {
                Some(len) => body.len() >= len.trim().parse::<usize>().unwrap(),
                None => body.ends_with(b"\r\n0\r\n\r\n") || body == b"0\r\n\r\n",
            };
            if complete {
                return String::from_utf8_lossy(&self.buf).into_owned();
            }
        }
    }

    async fn call(&mut self) {
        let call = std::mem::take(&mut self.call);
        let response = self.send(&call).await;
        self.call = call;
        assert!(response.contains(r#""isError":false"#), "{response}");
        black_box(response);
    }

    /// A `tools/list` (rmcp answers it on either path), its answer checked.
    async fn list(&mut self) {
        let list = self.request(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
        let response = self.send(&list).await;
        assert!(response.contains(r#""name":"echo""#), "{response}");
        black_box(response);
    }
}

/// `n` rmcp clients from `connect`, each after one checked call.
fn rmcp_clients<F: Future<Output = Client>>(
    rt: &tokio::runtime::Runtime,
    n: u64,
    connect: impl Fn() -> F,
) -> Vec<Client> {
    rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..n {
            let client = connect().await;
            call(&client).await;
            clients.push(client);
        }
        clients
    })
}

/// `n` minimal clients, each in a session of its own and after one checked call.
fn raw_clients(rt: &tokio::runtime::Runtime, url: &str, n: u64) -> Vec<RawClient> {
    rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..n {
            let mut client = RawClient::connect(url).await;
            client.call().await;
            clients.push(client);
        }
        clients
    })
}

/// The only client of `clients`.
fn one<C>(mut clients: Vec<C>) -> C {
    clients.pop().expect("one client")
}

/// Ends each client's session.
fn end_sessions(rt: &tokio::runtime::Runtime, clients: Vec<Client>) {
    rt.block_on(async {
        for client in clients {
            let _ = client.cancel().await;
        }
    });
}

/// A client the throughput bench can drive: one checked `tools/call` of `echo`.
trait Caller: Send + 'static {
    fn call_echo(&mut self) -> impl Future<Output = ()> + Send;
}

impl Caller for Client {
    fn call_echo(&mut self) -> impl Future<Output = ()> + Send {
        call(self)
    }
}

impl Caller for RawClient {
    fn call_echo(&mut self) -> impl Future<Output = ()> + Send {
        self.call()
    }
}

/// At least `iters` calls, spread evenly over `clients` running at once (each its own
/// task); returns the time per call actually made, scaled to `iters`.
fn all_at_once<C: Caller>(
    rt: &tokio::runtime::Runtime,
    clients: &mut Vec<C>,
    iters: u64,
) -> Duration {
    let n = clients.len() as u64;
    let per = iters.div_ceil(n).max(1);
    let taken = std::mem::take(clients);
    let start = Instant::now();
    *clients = rt.block_on(async move {
        let tasks: Vec<_> = taken
            .into_iter()
            .map(|mut client| {
                tokio::spawn(async move {
                    for _ in 0..per {
                        client.call_echo().await;
                    }
                    client
                })
            })
            .collect();
        let mut back = Vec::with_capacity(tasks.len());
        for t in tasks {
            back.push(t.await.unwrap());
        }
        back
    });
    start.elapsed().mul_f64(iters as f64 / (per * n) as f64)
}

/// The servers' runtime: two workers, as `aegis gateway` runs, unless
/// `GATEWAY_BENCH_RUNTIME` says `workers=N` (an experiment's knob; results say when
/// they used it). Any other value stops the bench, so a typo never measures the
/// default under another name.
fn server_runtime() -> tokio::runtime::Runtime {
    let chosen = std::env::var("GATEWAY_BENCH_RUNTIME").unwrap_or_default();
    let workers = match chosen.as_str() {
        "" => 2,
        other => other
            .strip_prefix("workers=")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("GATEWAY_BENCH_RUNTIME={other}: want workers=N")),
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// The clients' runtime, on the bench's own thread: like a client in a process of its
/// own, it waits on its sockets itself, and no server thread runs it.
fn single_threaded() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn round_trip(c: &mut Criterion) {
    let rt = single_threaded();
    let mut g = c.benchmark_group("round_trip");

    // The bare call: the same tool and input, the same profile, no MCP.
    let host = Host::builder(Profile::embedded("default").unwrap())
        .tools(vec![aegis_runtime::capability::ToolManifest {
            id: "echo".into(),
            kind: aegis_runtime::capability::ToolKind::Wasm {
                component: manifest().tools[0].component.clone(),
            },
            fs_read: Vec::new(),
            fs_write: Vec::new(),
            net: Vec::new(),
            limits: aegis_runtime::capability::DEFAULT_LIMITS,
        }])
        .open()
        .unwrap();
    let input = br#"{"message":"hello"}"#;
    let request = CallRequest::new("echo", input);
    assert_eq!(host.call(&request).unwrap().class(), CallClass::Success);
    g.bench_function("bare_pipeline", |b| {
        b.iter(|| black_box(host.call(black_box(&request)).unwrap()))
    });
    drop(host);

    let gw = gateway(None);
    // The gateway's own call (what both transports reach), with no transport.
    let server = gw.server().clone();
    let params = CallToolRequestParams::new("echo").with_arguments(arguments());
    g.bench_function("server_call", |b| {
        b.iter(|| {
            let r = rt.block_on(server.call(params.clone(), CancellationToken::new()));
            assert_eq!(r.unwrap().is_error, Some(false));
        })
    });
    let stdio_server = server_runtime();
    let stdio = rt.block_on(async {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = gw.server().clone();
        stdio_server.spawn(async move {
            let running = server.serve(server_io).await.unwrap();
            let _ = running.waiting().await;
        });
        let client: Client = ().serve(client_io).await.unwrap();
        call(&client).await;
        client
    });
    g.bench_function("stdio", |b| b.iter(|| rt.block_on(call(&stdio))));

    let (url, served) = serve_http(&gw);
    let http = one(rmcp_clients(&rt, 1, || http_client(&url)));
    g.bench_function("http", |b| b.iter(|| rt.block_on(call(&http))));
    let pooled = one(rmcp_clients(&rt, 1, || pooled_client(&url)));
    g.bench_function("http_pooled", |b| b.iter(|| rt.block_on(call(&pooled))));
    let mut raw = one(raw_clients(&rt, &url, 1));
    g.bench_function("http_raw", |b| b.iter(|| rt.block_on(raw.call())));
    drop(raw);
    g.finish();
    rt.block_on(async {
        let _ = stdio.cancel().await;
        let _ = http.cancel().await;
        let _ = pooled.cancel().await;
    });
    drop(served);
    drop(stdio_server);
    drop(rt);
    gw.close().unwrap();
}

fn control(c: &mut Criterion) {
    let rt = single_threaded();
    let mut g = c.benchmark_group("control");
    let (url, served) = serve_bare();
    let http = one(rmcp_clients(&rt, 1, || http_client(&url)));
    g.bench_function("http", |b| b.iter(|| rt.block_on(call(&http))));
    let mut raw = one(raw_clients(&rt, &url, 1));
    g.bench_function("http_raw", |b| b.iter(|| rt.block_on(raw.call())));
    drop(raw);
    rt.block_on(async {
        let _ = http.cancel().await;
    });
    let (floor_url, floor) = serve_floor();
    let mut raw = one(raw_clients(&rt, &floor_url, 1));
    g.bench_function("http_floor", |b| b.iter(|| rt.block_on(raw.call())));
    drop(raw);
    drop(floor);

    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1));
    let mut sessions = rmcp_clients(&rt, 16, || http_client(&url));
    g.bench_function("calls/rmcp/16", |b| {
        b.iter_custom(|iters| all_at_once(&rt, &mut sessions, iters))
    });
    end_sessions(&rt, sessions);
    let mut raws = raw_clients(&rt, &url, 16);
    g.bench_function("calls/raw/16", |b| {
        b.iter_custom(|iters| all_at_once(&rt, &mut raws, iters))
    });
    g.finish();
    drop(raws);
    drop(served);
}

fn calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("calls");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1));
    for sink in ["volatile", "durable"] {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway((sink == "durable").then_some(dir.path()));
        let rt = single_threaded();
        let (url, served) = serve_http(&gw);
        for clients in [1u64, 16] {
            let mut sessions = rmcp_clients(&rt, clients, || http_client(&url));
            g.bench_with_input(BenchmarkId::new(sink, clients), &clients, |b, _| {
                b.iter_custom(|iters| all_at_once(&rt, &mut sessions, iters))
            });
            end_sessions(&rt, sessions);
        }
        if sink == "volatile" {
            let mut pooled = rmcp_clients(&rt, 16, || pooled_client(&url));
            g.bench_function("volatile_pooled/16", |b| {
                b.iter_custom(|iters| all_at_once(&rt, &mut pooled, iters))
            });
            end_sessions(&rt, pooled);
            for clients in [1u64, 16] {
                let mut raws = raw_clients(&rt, &url, clients);
                let id = BenchmarkId::new("volatile_raw", clients);
                g.bench_with_input(id, &clients, |b, _| {
                    b.iter_custom(|iters| all_at_once(&rt, &mut raws, iters))
                });
            }
        }
        drop(served);
        drop(rt);
        gw.close().unwrap();
    }
    g.finish();
}

/// The direct path against rmcp alone (issue 31, item 7): one gateway served twice,
/// once with a session's `tools/call` answered by `direct.rs` and once by rmcp's
/// session worker (`HttpOptions::direct_calls`), the same clients against each. Each
/// pair is measured direct, rmcp, rmcp, direct (rounds `a` and `b`), so a drift of the
/// host over the run falls on both.
/// - `direct/call_{a,b}/{direct,rmcp}`: the minimal client's round trip.
/// - `direct/pooled_{a,b}/{direct,rmcp}`: rmcp's own client (connections kept), whose
///   calls carry `_meta` and so take the direct path after rmcp's full parse.
/// - `direct/list_{a,b}/{direct,rmcp}`: a `tools/list`, which rmcp answers on both
///   servers: the control, which should differ only by the host's noise.
/// - `direct/calls_raw_16_{a,b}/{direct,rmcp}`: calls/s with 16 minimal clients.
fn direct(c: &mut Criterion) {
    const ABBA: [(&str, &str); 4] = [
        ("a", "direct"),
        ("a", "rmcp"),
        ("b", "rmcp"),
        ("b", "direct"),
    ];
    let rt = single_threaded();
    let mut g = c.benchmark_group("direct");
    let gw = gateway(None);
    let (direct_url, direct_served) = serve_http_with(&gw, true);
    let (rmcp_url, rmcp_served) = serve_http_with(&gw, false);
    let url = |path: &str| {
        if path == "direct" {
            &direct_url
        } else {
            &rmcp_url
        }
    };
    for (round, path) in ABBA {
        let mut raw = one(raw_clients(&rt, url(path), 1));
        g.bench_function(format!("call_{round}/{path}"), |b| {
            b.iter(|| rt.block_on(raw.call()))
        });
    }
    for (round, path) in ABBA {
        let pooled = one(rmcp_clients(&rt, 1, || pooled_client(url(path))));
        g.bench_function(format!("pooled_{round}/{path}"), |b| {
            b.iter(|| rt.block_on(call(&pooled)))
        });
        end_sessions(&rt, vec![pooled]);
    }
    for (round, path) in ABBA {
        let mut raw = one(raw_clients(&rt, url(path), 1));
        g.bench_function(format!("list_{round}/{path}"), |b| {
            b.iter(|| rt.block_on(raw.list()))
        });
    }
    g.sample_size(10);
    g.throughput(Throughput::Elements(1));
    for (round, path) in ABBA {
        let mut raws = raw_clients(&rt, url(path), 16);
        g.bench_function(format!("calls_raw_16_{round}/{path}"), |b| {
            b.iter_custom(|iters| all_at_once(&rt, &mut raws, iters))
        });
    }
    g.finish();
    drop(direct_served);
    drop(rmcp_served);
    drop(rt);
    gw.close().unwrap();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    direct(&mut c);
    round_trip(&mut c);
    control(&mut c);
    calls(&mut c);
}

criterion_main!(benches);
