//! `aegis gateway`'s `tools/call`, end to end in one process: the gateway library the
//! CLI runs (`aegis_gateway::Gateway`, the default profile, the wasmtime sandbox)
//! serving the fixture guest `echo`, and the official Rust SDK's client (rmcp) calling
//! it, against the bare pipeline call the gateway wraps. Every call is audited and
//! sandboxed; the client is the same process, so its cost is in every number.
//!
//! - `round_trip/bare_pipeline`: `Pipeline::call` of `echo` with the input a gateway
//!   call gives it (the arguments' canonical JSON), on the volatile memory sink.
//! - `round_trip/stdio`: one `tools/call` → result through the gateway, JSON lines
//!   over an in-memory pipe (the stdio transport's framing, no process boundary).
//! - `round_trip/http`: the same over Streamable HTTP on a loopback socket (one
//!   session, rmcp's reqwest client) [≤ 0.25 ms].
//! - `calls/{volatile,durable}/{1,16}`: calls per second with 1 and 16 concurrent
//!   clients, each its own HTTP session, on the memory sink and on the durable file
//!   sink (fdatasync, group commit) [volatile/16 ≥ 8,000 calls/s].

use aegis_gateway::http::HttpOptions;
use aegis_gateway::{Gateway, GatewayOptions, Manifest};
use aegis_record::key::SigningKey;
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_runtime::{Host, Profile};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use rmcp::RoleClient;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

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

/// Serves `gateway` over HTTP on a loopback port; returns its URL and the stop token.
async fn serve_http(gateway: &Gateway) -> (String, CancellationToken) {
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    let listener = aegis_gateway::http::bind(&options).await.unwrap();
    let url = format!(
        "http://{}{}",
        listener.local_addr().unwrap(),
        aegis_gateway::http::ENDPOINT
    );
    let stop = CancellationToken::new();
    let server = gateway.server().clone();
    let stopping = stop.clone();
    tokio::spawn(async move {
        aegis_gateway::http::serve(server, listener, &options, stopping)
            .await
            .unwrap();
    });
    (url, stop)
}

async fn http_client(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn round_trip(c: &mut Criterion) {
    let rt = runtime();
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
    let stdio = rt.block_on(async {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = gw.server().clone();
        tokio::spawn(async move {
            let running = server.serve(server_io).await.unwrap();
            let _ = running.waiting().await;
        });
        let client: Client = ().serve(client_io).await.unwrap();
        call(&client).await;
        client
    });
    g.bench_function("stdio", |b| b.iter(|| rt.block_on(call(&stdio))));

    let (url, stop) = rt.block_on(serve_http(&gw));
    let http = rt.block_on(async {
        let client = http_client(&url).await;
        call(&client).await;
        client
    });
    g.bench_function("http", |b| b.iter(|| rt.block_on(call(&http))));
    g.finish();
    rt.block_on(async {
        let _ = stdio.cancel().await;
        let _ = http.cancel().await;
    });
    stop.cancel();
    drop(rt);
    gw.close().unwrap();
}

fn calls(c: &mut Criterion) {
    let mut g = c.benchmark_group("calls");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1));
    for sink in ["volatile", "durable"] {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway((sink == "durable").then_some(dir.path()));
        let rt = runtime();
        let (url, stop) = rt.block_on(serve_http(&gw));
        for clients in [1u64, 16] {
            let sessions: Vec<Arc<Client>> = rt.block_on(async {
                let mut v = Vec::new();
                for _ in 0..clients {
                    let client = http_client(&url).await;
                    call(&client).await;
                    v.push(Arc::new(client));
                }
                v
            });
            g.bench_with_input(BenchmarkId::new(sink, clients), &clients, |b, &n| {
                b.iter_custom(|iters| {
                    let per = iters.div_ceil(n).max(1);
                    let start = Instant::now();
                    rt.block_on(async {
                        let tasks: Vec<_> = sessions
                            .iter()
                            .map(|client| {
                                let client = Arc::clone(client);
                                tokio::spawn(async move {
                                    for _ in 0..per {
                                        call(&client).await;
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                    });
                    // The time per call actually made.
                    start.elapsed().mul_f64(iters as f64 / (per * n) as f64)
                })
            });
            rt.block_on(async {
                for client in sessions {
                    if let Some(client) = Arc::into_inner(client) {
                        let _ = client.cancel().await;
                    }
                }
            });
        }
        stop.cancel();
        drop(rt);
        gw.close().unwrap();
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    round_trip(&mut c);
    calls(&mut c);
}

criterion_main!(benches);
