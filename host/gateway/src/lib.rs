//! `aegis gateway`: a directory of sandboxed WebAssembly tools, served as an MCP server
//! over stdio or Streamable HTTP, every call through the host's four stations.
//!
//! The pieces, in the order a gateway comes up:
//! - [`manifest`]: the tools manifest (TOML), parsed and checked, one-line errors.
//! - [`Gateway::open`]: every component loaded (compiled, linked, its shape checked
//!   against the manifest) and every tool registered before anything is served; then
//!   the host opens from the operator's [`HostBuilder`].
//! - [`server`]: the rmcp `ServerHandler`: `tools/list` from the manifest, `tools/call`
//!   through the pipeline.
//! - [`http`]: the Streamable HTTP side (loopback, Host/Origin, token, body cap).
//! - [`run`]: serve on a transport until the client leaves or a signal, then close the
//!   record.
//!
//! # Guarantees
//! - A tool whose component does not load, or whose shape is not the one declared, or
//!   whose roots do not resolve, is refused at start, naming the manifest line.
//! - The record is closed only after every running call has its outcome, and every
//!   parked call waiting for a person has its park withdrawn and recorded.
//! - With a desk ([`Gateway::with_desk`]), a call the policy parks waits for a
//!   person's decision and then runs under the approval or is answered with the
//!   refusal (see [`server`]); without one it is answered at once as not run.
//! - Asking clients too ([`Gateway::asking_clients`], `--approve-via client`), the
//!   client's user is asked about a parked call through MCP elicitation when the client
//!   declared it, on stdio and on HTTP alike (an HTTP session whose client declared it
//!   has its calls answered by rmcp's path, which can send the question; see
//!   `direct`); the first decision placed wins. A client on protocol 2026-07-28 (which
//!   has no server-initiated requests) that declares form elicitation in the request's
//!   client capabilities is answered `input_required` with the question instead, and
//!   its retry settles the park (see [`server`]). Otherwise the park waits for the queue.
//! - A parked call whose client gave a progress token hears that it waits, every
//!   [`server::KEEP_ALIVE`], whichever path answers it.
//!
//! # Non-guarantees
//! - The gateway serves tools only: no resources, prompts or sampling; its one use of
//!   elicitation is the approval question.
//! - The direct HTTP path (`direct`) cannot ask a client anything (it answers with one
//!   body or an event stream of its own, and the client's answer would reach rmcp): a
//!   session is sent to rmcp's path only when its `initialize` declared elicitation
//!   (read as the request passes); a client that declares it later, or in a way that
//!   reading misses, has its parks left to the queue.
//! - Role and session are not taken from clients: the operator's `role` (if any) is
//!   asserted for every call, as `aegis wrap` does.
//!
//! # Limits
//! - With a volatile sink, a call runs in an async task on one of the serving
//!   runtime's two workers (no thread hand-off per call): a guest computing holds
//!   that worker for up to one epoch tick (5 ms) before it yields, so with both workers
//!   in such guests a new request waits up to a tick. With a sink that syncs, each call
//!   runs on tokio's blocking pool instead, so the fsyncs hold no worker.

mod content;
mod direct;
pub mod http;
pub mod manifest;
pub mod server;

pub use manifest::{Manifest, ManifestError, OutputKind, ToolSpec};
pub use server::{GatewayServer, Note, Notes, request_frame};

use aegis_runtime::capability::{RegistrationError, ToolKind, ToolManifest, ToolRegistry};
use aegis_runtime::sandbox::{DEFAULT_CONCURRENT_CALLS, Options, Sandbox, Shape};
use aegis_runtime::{AuditNotice, Host, HostBuilder, OpenError};
use rmcp::ServiceExt as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why a gateway could not start, serve or close. Displayed as one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The manifest was refused.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A tool's component could not be loaded (read, compiled, linked).
    #[error("{path}:{line}: tool {tool:?}: component: {message}")]
    Component {
        /// The manifest.
        path: PathBuf,
        /// The `component` key's line.
        line: usize,
        /// The tool.
        tool: String,
        /// Why.
        message: String,
    },
    /// A component's shape is not the one the manifest declares.
    #[error(
        "{path}:{line}: tool {tool:?}: shape: declared {declared}, but the component is {found}"
    )]
    Shape {
        /// The manifest.
        path: PathBuf,
        /// The `shape` key's line.
        line: usize,
        /// The tool.
        tool: String,
        /// As declared.
        declared: &'static str,
        /// As found.
        found: &'static str,
    },
    /// The capability station refused a tool's manifest (a root, a limit).
    #[error("{path}:{line}: {source}")]
    Tool {
        /// The manifest.
        path: PathBuf,
        /// The line of the field at fault.
        line: usize,
        /// The refusal.
        source: RegistrationError,
    },
    /// The sandbox could not be built.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// The host could not open (a profile, plugin, key or sink).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The token file was refused.
    #[error("--token-file {path}: {message}")]
    Token {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The HTTP address could not be bound, or is refused.
    #[error("--http {addr}: {message}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
    /// The transport failed while serving.
    #[error("serving: {0}")]
    Serve(String),
    /// The record could not be closed (or a call was still open).
    #[error("the record could not be closed: {0}")]
    Close(String),
}

/// How a gateway's host and sandbox are set up.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// Calls at once: the sandbox pool's size, and the gateway's cap.
    /// [`DEFAULT_CONCURRENT_CALLS`] by default.
    pub capacity: u32,
    /// wasmtime's compilation cache directory; none by default.
    pub cache_dir: Option<PathBuf>,
    /// The role asserted for every call; none by default.
    pub role: Option<String>,
    /// How often a parked call's client hears that it waits, when it gave a progress
    /// token ([`server::KEEP_ALIVE`] by default). For tests, which cannot wait 15 s
    /// for the first one: a shorter interval only sends more notifications, so it is
    /// no operator's setting (the CLI's flag for it is hidden).
    #[doc(hidden)]
    pub keep_alive: std::time::Duration,
}

impl Default for GatewayOptions {
    fn default() -> GatewayOptions {
        GatewayOptions {
            capacity: DEFAULT_CONCURRENT_CALLS,
            cache_dir: None,
            role: None,
            keep_alive: server::KEEP_ALIVE,
        }
    }
}

/// An open gateway: the host, and the server over it.
pub struct Gateway {
    host: Host,
    server: GatewayServer,
}

fn shape_word(shape: Shape) -> &'static str {
    match shape {
        Shape::Command => "command",
        Shape::Tool => "tool",
    }
}

impl Gateway {
    /// Loads every component of `manifest` (refusing one that does not load or is not
    /// its declared shape), registers the tools, and opens the host from `builder` (the
    /// profile and the operator's overrides) with them.
    ///
    /// # Errors
    /// [`GatewayError`], naming the manifest line where one is at fault.
    pub fn open(
        builder: HostBuilder,
        manifest: &Manifest,
        options: &GatewayOptions,
        notes: Notes,
    ) -> Result<Gateway, GatewayError> {
        let sandbox = Sandbox::with_options(&Options {
            cache_dir: options.cache_dir.clone(),
            concurrent_calls: Some(options.capacity.max(1)),
        })
        .map_err(|e| GatewayError::Sandbox(e.to_string()))?;
        let path = &manifest.path;
        let mut tools = ToolRegistry::new();
        let mut served = Vec::with_capacity(manifest.tools.len());
        for spec in &manifest.tools {
            let found = sandbox
                .prepare(&spec.component)
                .map_err(|e| GatewayError::Component {
                    path: path.clone(),
                    line: spec.lines.component,
                    tool: spec.id.clone(),
                    message: e.to_string(),
                })?;
            if found != spec.shape {
                return Err(GatewayError::Shape {
                    path: path.clone(),
                    line: spec.lines.shape,
                    tool: spec.id.clone(),
                    declared: shape_word(spec.shape),
                    found: shape_word(found),
                });
            }
            tools
                .register(ToolManifest {
                    id: spec.id.clone(),
                    kind: ToolKind::Wasm {
                        component: spec.component.clone(),
                    },
                    fs_read: spec.read.clone(),
                    fs_write: spec.write.clone(),
                    net: Vec::new(),
                    limits: spec.limits,
                })
                .map_err(|source| {
                    let line = match &source {
                        RegistrationError::Root { .. }
                        | RegistrationError::NotADirectory { .. }
                        | RegistrationError::RootChanged { .. } => spec.lines.roots,
                        RegistrationError::Component { .. }
                        | RegistrationError::ComponentRead { .. } => spec.lines.component,
                        _ => spec.lines.id,
                    };
                    GatewayError::Tool {
                        path: path.clone(),
                        line,
                        source,
                    }
                })?;
            served.push(server::Served::new(spec.clone()).map_err(|message| {
                GatewayError::Component {
                    path: path.clone(),
                    line: spec.lines.id,
                    tool: spec.id.clone(),
                    message,
                }
            })?);
        }
        let host = builder
            .front(aegis_runtime::whereabouts::gateway_front(
                path,
                &manifest.sha256,
            ))
            .tool_registry(tools)
            .sandbox(Arc::new(sandbox))
            .open()?;
        // Each tool's path-like arguments, from its input schema (unless the operator's
        // profile names them), recorded on every call.
        for spec in &manifest.tools {
            let schema = serde_json::Value::Object(spec.input_schema.clone());
            host.pipeline().recording().bind_schema(&spec.id, &schema);
        }
        let server = GatewayServer::new(
            Arc::clone(host.pipeline()),
            served,
            usize::try_from(options.capacity).unwrap_or(usize::MAX),
            options.role.clone(),
            options.keep_alive,
            notes,
        );
        Ok(Gateway { host, server })
    }

    /// The same gateway, filing every call a policy rule parks with `desk` and holding
    /// its request open until a person decides it: approved, it runs as a new call
    /// under the approval; denied or expired, it is answered with that refusal.
    /// Without a desk, a parked call is answered at once as not run.
    #[must_use]
    pub fn with_desk(self, desk: aegis_runtime::approvals::Desk) -> Gateway {
        self.server.set_desk(desk);
        self
    }

    /// The same gateway, also asking the client's user about each parked call through
    /// MCP elicitation (`--approve-via client`), when the client declared form
    /// elicitation in its `initialize`: the question `aegis wrap` asks
    /// ([`aegis_record::approval::question`]). The answer is placed with the desk as the
    /// client's decision (`via: client`); a person's decision placed first still wins,
    /// and a client that cannot be asked leaves the park to the queue. Needs a desk
    /// ([`Gateway::with_desk`]); without one nothing is parked to ask about.
    #[must_use]
    pub fn asking_clients(self) -> Gateway {
        self.server.set_ask_clients();
        self
    }

    /// The server, to serve on any rmcp transport.
    pub fn server(&self) -> &GatewayServer {
        &self.server
    }

    /// Where the record goes, for the operator.
    pub fn notice(&self) -> &AuditNotice {
        self.host.notice()
    }

    /// Stops taking calls, cancels running ones (each gets its outcome), and closes
    /// the record.
    ///
    /// It blocks until every running call has ended. On a volatile sink those calls
    /// are tasks of the runtime that served them, so call this outside that runtime's
    /// tasks (as [`run`] does, after its `block_on`): a task of a one-thread runtime
    /// blocked here would wait for calls that thread can no longer drive.
    ///
    /// # Errors
    /// [`GatewayError::Close`]: a call still holds the host, or the close line could
    /// not be written.
    pub fn close(self) -> Result<(), GatewayError> {
        let (host, record_failed) = self.stop();
        host.close()
            .map_err(|e| GatewayError::Close(e.to_string()))?;
        Gateway::closed(record_failed)
    }

    /// [`Gateway::close`], then the sink's whole record: the only way to see a volatile
    /// sink's lines, which end with the process.
    ///
    /// # Errors
    /// As [`Gateway::close`], or the sink could not be read.
    pub fn close_and_export(self) -> Result<Vec<u8>, GatewayError> {
        let (host, record_failed) = self.stop();
        let record = host
            .close_and_export()
            .map_err(|e| GatewayError::Close(e.to_string()))?;
        Gateway::closed(record_failed).map(|()| record)
    }

    /// Every call ended and no share of the host left but ours: the host, and whether
    /// a line failed while serving.
    fn stop(self) -> (Host, bool) {
        self.server.shut_down(server::SHUTTING_DOWN);
        let record_failed = self.server.record_failed();
        drop(self.server);
        (self.host, record_failed)
    }

    fn closed(record_failed: bool) -> Result<(), GatewayError> {
        if record_failed {
            return Err(GatewayError::Close(
                "an intent or outcome could not be written while serving".into(),
            ));
        }
        Ok(())
    }
}

/// Which transport [`run`] serves on.
#[derive(Clone, Debug)]
pub enum Transport {
    /// This process's stdin and stdout (one JSON-RPC message per line).
    Stdio,
    /// Streamable HTTP.
    Http(http::HttpOptions),
}

/// Said once the transport is ready (for HTTP, with the address actually bound).
pub type Ready = Box<dyn FnOnce(&str) + Send>;

/// Serves `gateway` on `transport` until the client leaves (stdio) or SIGINT/SIGTERM
/// arrives, then closes the record (every running call first gets its outcome).
///
/// # Errors
/// [`GatewayError`]: the transport could not start or failed, or the record could not
/// be closed.
pub fn run(gateway: Gateway, transport: Transport, ready: Ready) -> Result<(), GatewayError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("aegis-gateway")
        .enable_all()
        .build()
        .map_err(|e| GatewayError::Serve(format!("tokio runtime: {e}")))?;
    let server = gateway.server.clone();
    let served = runtime.block_on(async move {
        let stop = CancellationToken::new();
        let signalled = stop.clone();
        // Watched from here, before anyone is told the server is ready.
        let signal = aegis_http::stop_on_signal();
        tokio::spawn(async move {
            signal.await;
            signalled.cancel();
        });
        match transport {
            Transport::Stdio => serve_stdio(server, ready, stop).await,
            Transport::Http(options) => {
                let listener = http::bind(&options).await?;
                let bound = listener
                    .local_addr()
                    .map_err(|e| GatewayError::Serve(e.to_string()))?;
                ready(&format!("http://{bound}{}", http::ENDPOINT));
                http::serve(server, listener, &options, stop).await
            }
        }
    });
    // The calls still running finish (cancelled) on the runtime's threads, which go on
    // after `block_on`; the runtime is only dropped after the record is closed.
    let closed = gateway.close();
    drop(runtime);
    served.and(closed)
}

async fn serve_stdio(
    server: GatewayServer,
    ready: Ready,
    stop: CancellationToken,
) -> Result<(), GatewayError> {
    ready("stdio");
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| GatewayError::Serve(e.to_string()))?;
    let ct = running.cancellation_token();
    tokio::select! {
        ended = running.waiting() => ended.map(|_| ()).map_err(|e| GatewayError::Serve(e.to_string())),
        () = stop.cancelled() => {
            ct.cancel();
            Ok(())
        }
    }
}
