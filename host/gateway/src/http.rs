//! Streamable HTTP: rmcp's server behind axum, held to loopback, a Host and Origin
//! check, an optional bearer token and a body cap. Those checks and the connections'
//! caps and deadlines are `aegis-http`'s ([`aegis_http::guard`],
//! [`aegis_http::connections`]), shared with every Aegis server; this module adds the
//! MCP endpoint, its sessions and the direct path.
//!
//! # Guarantees
//! - A request body with two keys of one object that fold together (exact duplicates,
//!   `message`/`MESSAGE`, `ſ` for `s`) or a `__proto__` key anywhere is refused (400)
//!   before rmcp or the direct path reads it: serde keeps the last of two equal keys, so
//!   the call decided and run would be one reading of a body another reader reads
//!   otherwise (`aegis_policy_arguments::unambiguous`).
//! - Binds loopback unless the operator opted out ([`HttpOptions::allow_non_loopback`]).
//! - `Host` must name this server (`localhost`, `127.0.0.1` or `[::1]` with its port,
//!   or the bound address); `Origin`, when a browser sends one, must be one of those
//!   as `http://` origins. Both are compared as text, whole (ASCII case aside), so a
//!   spelling some other parser would still read as this server (`127.0.0.1:08765`,
//!   `u@localhost:8765`, an origin with a path) is refused too. Anything else is
//!   answered 403 before any other handling: a page on another site that rebinds its
//!   name to 127.0.0.1 cannot reach the tools, and every check after this one (the
//!   direct path's, rmcp's) sees one of the server's own names.
//! - With a token, a request without `Authorization: Bearer <token>` gets 401 and
//!   nothing else. A token of the right length is compared without stopping at the
//!   first differing byte; one of another length is refused at once (its length is
//!   all that timing could tell).
//! - A request body over [`HttpOptions::max_body`] gets 413, however it is framed.
//! - A request with more than one `Host`, `Origin` or `Authorization` field line gets
//!   400 before any other check: the checks above read one value, and a proxy in front,
//!   or rmcp, could act on another (HTTP/1.1 itself demands 400 for a second `Host`).
//!   So does an absolute-form target (`POST http://other/mcp`) whose authority is not
//!   the `Host` field: HTTP/1.1 gives the target precedence, and the checks read `Host`.
//! - A body framed two ways hyper refuses (400): two different `Content-Length`s, or a
//!   `Transfer-Encoding` whose last coding is not `chunked`.
//! - Slow or many clients cannot hold the server: a request's head must arrive within
//!   [`HttpOptions::read_timeout`] (from the connection's accept or its last answer;
//!   else the connection is closed) and its body within as long again (else 408); at
//!   most [`HttpOptions::max_connections`] connections are served (past the cap, 503,
//!   or past [`REFUSING`] refusals under way, closed unanswered; the operator is
//!   warned). A request for a new session while [`HttpOptions::max_sessions`] are open
//!   gets 503.
//! - A client that stops taking an answer's bytes for [`HttpOptions::write_timeout`]
//!   loses its connection (an event stream with nothing to send is not affected).
//! - So what clients can make the server hold is bounded, per connection: a read
//!   buffer of [`MAX_READ_BUFFER`], one body of [`HttpOptions::max_body`], and the
//!   answer being written (a tool's output, within its grant's output cap, as JSON:
//!   escaping and `structuredContent` can make it several times the output).
//! - Stopping ends in bounded time whatever clients do: running calls are stopped and
//!   recorded first, then open connections get [`DRAIN`] to finish. A client holding
//!   an event stream, or stalled halfway through a request's head or body, cannot hold
//!   the exit up (no call is on such a connection).
//!
//! # Non-guarantees
//! - The caps protect the process, not every client: a client that keeps them filled
//!   keeps others out. It need not even reconnect: an event stream with nothing to
//!   send, a long call, or an answer read slowly but steadily holds its connection.
//! - The session cap is checked when a session is asked for: requests asking at the
//!   same moment may pass it together (by at most the connections open).
//! - No TLS: the token crosses loopback in clear. Put a TLS proxy in front for
//!   anything else.
//! - A request with both `Content-Length` and `Transfer-Encoding: chunked` is read by
//!   the chunks, as hyper does (RFC 9112 allows it), not refused: hyper drops the
//!   length before this code sees the request. A proxy in front must not forward
//!   such a request (any that reads the length instead would be open to smuggling).

use crate::GatewayError;
use crate::direct::Direct;
pub use crate::direct::MAX_NEW_SESSION_BODY;
use crate::server::{GatewayServer, Note, SHUTTING_DOWN};
pub(crate) use aegis_http::refusal;
pub use aegis_http::{
    ACCEPT_BACKOFF, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT, DEFAULT_WRITE_TIMEOUT, DRAIN,
    MAX_CLIENT_TIMEOUT, MAX_READ_BUFFER, MAX_TOKEN_FILE, REFUSAL_TIMEOUT, REFUSING, WARN_EVERY,
};
use aegis_http::{Guard, HttpError, Limits, ServerNames, accept_until};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer as _;

/// What every refusal of the gateway's HTTP side starts with.
const SERVER: &str = "aegis gateway";

/// The default cap on a request body: 1 MiB, well above any tools/call a manifest's
/// schemas describe, far below what would let a client make the host buffer much.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// How long an unused session stays open: 5 minutes, as rmcp's own default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// The default cap on open sessions: 256 (each client holds one; an idle one closes
/// after [`DEFAULT_SESSION_IDLE`]).
pub const DEFAULT_MAX_SESSIONS: usize = 256;

/// The MCP endpoint's path.
pub const ENDPOINT: &str = "/mcp";

/// How the HTTP side is served.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Where to listen. Loopback unless `allow_non_loopback`.
    pub addr: SocketAddr,
    /// Accept a non-loopback `addr`. Off by default.
    pub allow_non_loopback: bool,
    /// Require `Authorization: Bearer <token>`. None by default.
    pub token: Option<String>,
    /// The largest request body accepted ([`DEFAULT_MAX_BODY`] by default).
    pub max_body: usize,
    /// A session with no request and no call running for this long is closed
    /// ([`DEFAULT_SESSION_IDLE`] by default).
    pub session_idle: Duration,
    /// Connections served at once; one more is answered 503
    /// ([`DEFAULT_MAX_CONNECTIONS`] by default).
    pub max_connections: usize,
    /// Sessions open at once; asking for one more is answered 503
    /// ([`DEFAULT_MAX_SESSIONS`] by default).
    pub max_sessions: usize,
    /// How long a client has to send a request's head (from its connection's accept,
    /// or its last answer), and then its body (from the head's end)
    /// ([`DEFAULT_READ_TIMEOUT`] by default; at most [`MAX_CLIENT_TIMEOUT`]).
    pub read_timeout: Duration,
    /// How long a client may take no bytes of an answer (its socket's buffers full)
    /// before its connection is closed ([`DEFAULT_WRITE_TIMEOUT`] by default; at most
    /// [`MAX_CLIENT_TIMEOUT`]).
    pub write_timeout: Duration,
    /// Whether a session's `tools/call` may be answered by the direct path
    /// (`direct.rs`); true by default. Off, every request goes to rmcp's session
    /// worker, with the same checks and caps around it. For the differential test and
    /// the bench only, which compare the two paths: neither is less safe, so it is no
    /// operator's setting and the CLI does not expose it.
    #[doc(hidden)]
    pub direct_calls: bool,
}

impl HttpOptions {
    /// Loopback `addr`, no token, the default body cap.
    pub fn new(addr: SocketAddr) -> HttpOptions {
        HttpOptions {
            addr,
            allow_non_loopback: false,
            token: None,
            max_body: DEFAULT_MAX_BODY,
            session_idle: DEFAULT_SESSION_IDLE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_sessions: DEFAULT_MAX_SESSIONS,
            read_timeout: DEFAULT_READ_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            direct_calls: true,
        }
    }
}

/// Reads a bearer token from `path` ([`aegis_http::read_token`]).
///
/// # Errors
/// [`GatewayError::Token`].
pub fn read_token(path: &Path) -> Result<String, GatewayError> {
    aegis_http::read_token(path).map_err(GatewayError::from)
}

/// A listener on `options.addr`, refused when it is not loopback and the operator did
/// not allow that ([`aegis_http::bind`]).
///
/// # Errors
/// [`GatewayError::Bind`].
pub async fn bind(options: &HttpOptions) -> Result<tokio::net::TcpListener, GatewayError> {
    aegis_http::bind(options.addr, options.allow_non_loopback)
        .await
        .map_err(GatewayError::from)
}

impl From<HttpError> for GatewayError {
    fn from(e: HttpError) -> GatewayError {
        match e {
            HttpError::Token { path, message } => GatewayError::Token { path, message },
            HttpError::Bind { addr, message } => GatewayError::Bind { addr, message },
            other => GatewayError::Serve(other.to_string()),
        }
    }
}

/// Serves `server` on `listener` until `stop` is cancelled. Then every running call is
/// stopped and its outcome awaited ([`GatewayServer::shut_down`]) before the open
/// connections are let finish: one waiting on a call would otherwise hold the end up
/// until the call's own deadline. Connections still open [`DRAIN`] later are left to
/// the runtime's end: no call runs on them. The server takes no call afterwards.
///
/// # Errors
/// [`GatewayError::Serve`] when the listener has no address. A failed accept is not
/// an error: serving goes on (the operator is told).
pub async fn serve(
    server: GatewayServer,
    listener: tokio::net::TcpListener,
    options: &HttpOptions,
    stop: CancellationToken,
) -> Result<(), GatewayError> {
    let bound = listener
        .local_addr()
        .map_err(|e| GatewayError::Serve(e.to_string()))?;
    let names = Arc::new(ServerNames::of(bound));
    let read_timeout = options.read_timeout.min(MAX_CLIENT_TIMEOUT);
    let stopped = server.clone();
    let notes = server.notes();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(names.hosts().to_vec())
        .with_allowed_origins(names.origins().to_vec())
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_body)
        .with_cancellation_token(stop.child_token());
    // rmcp's idle timer sees only the requests that reach it; `direct` takes most
    // tools/calls, so it keeps the time itself and closes idle sessions.
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = None;
    let sessions = Arc::new(sessions);
    let direct = Arc::new(Direct::new(
        server.clone(),
        Arc::clone(&sessions),
        options.max_body,
        options.session_idle,
        options.max_sessions,
        options.direct_calls,
    ));
    tokio::spawn(Arc::clone(&direct).close_idle_sessions(stop.child_token()));
    let service: StreamableHttpService<GatewayServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), sessions, config);
    // Around rmcp's service itself, so it sees every path rmcp serves (`/mcp`, `/mcp/`,
    // `/mcp/…`) and none that rmcp does not.
    let direct = axum::middleware::from_fn_with_state(direct, crate::direct::route);
    let guard = Guard {
        server: SERVER,
        names: Arc::clone(&names),
        token: options.token.as_deref().map(Arc::from),
        max_body: options.max_body,
        read_timeout,
    };
    let router = aegis_http::guard(
        axum::Router::new().nest_service(ENDPOINT, direct.layer(service)),
        &guard,
    );
    let limits = Limits {
        max_connections: options.max_connections,
        read_timeout,
        write_timeout: options.write_timeout.min(MAX_CLIENT_TIMEOUT),
        server: SERVER,
    };
    let warn: aegis_http::Warn = Arc::new(move |warning: &str| notes(Note::Serving(warning)));
    let calls_ended = CancellationToken::new();
    let serving = accept_until(listener, router, limits, warn, calls_ended.clone());
    let stopping = async move {
        stop.cancelled_owned().await;
        // Blocking until the calls' outcomes are written, off the runtime's workers,
        // which go on driving the calls meanwhile.
        let _ = tokio::task::spawn_blocking(move || stopped.shut_down(SHUTTING_DOWN)).await;
        calls_ended.cancel();
        // A client stalled mid-request ends its connection only at the read timeout:
        // the wait for connections is given up after DRAIN (their tasks end with the
        // runtime; no call runs on them).
        tokio::time::sleep(DRAIN).await;
    };
    tokio::select! {
        () = serving => Ok(()),
        () = stopping => Ok(()),
    }
}
