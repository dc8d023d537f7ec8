//! Streamable HTTP: rmcp's server behind axum, held to loopback, a Host and Origin
//! check, an optional bearer token and a body cap.
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
pub use crate::connections::{
    ACCEPT_BACKOFF, MAX_READ_BUFFER, REFUSAL_TIMEOUT, REFUSING, WARN_EVERY,
};
use crate::connections::{Limits, accept_until};
use crate::direct::Direct;
pub use crate::direct::MAX_NEW_SESSION_BODY;
use crate::server::{GatewayServer, SHUTTING_DOWN};
use aegis_policy_arguments::unambiguous::{self, Ambiguity};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer as _;

/// The default cap on a request body: 1 MiB, well above any tools/call a manifest's
/// schemas describe, far below what would let a client make the host buffer much.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// How long an unused session stays open: 5 minutes, as rmcp's own default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);

/// The default cap on connections served at once: 512, far more than the clients of
/// one machine's agents open, well within a process's usual 1,024 file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The default cap on open sessions: 256 (each client holds one; an idle one closes
/// after [`DEFAULT_SESSION_IDLE`]).
pub const DEFAULT_MAX_SESSIONS: usize = 256;

/// The default time a client has to send a request head, and then its body: 30 s, as
/// hyper's own default for heads.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time a client may take no bytes of an answer before its connection is
/// closed: 30 s.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest read or write timeout taken: a day. A longer one is served as a day.
pub const MAX_CLIENT_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

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

/// The most of a token file read: a bearer token is tens of bytes; 4 KiB leaves room
/// for a comment line or two and stops a file grown without end.
pub const MAX_TOKEN_FILE: u64 = 4 << 10;

/// Reads a bearer token from `path`: the file's first line, which must not be empty;
/// the file must not be readable by group or others.
///
/// # Errors
/// [`GatewayError::Token`].
pub fn read_token(path: &Path) -> Result<String, GatewayError> {
    use std::os::unix::fs::MetadataExt as _;
    let refused = |message: String| GatewayError::Token {
        path: path.to_owned(),
        message,
    };
    // The mode is checked on the file that is read: never through a final link, never a
    // FIFO or a device (aegis_files).
    let file = aegis_files::open(path).map_err(|e| refused(e.into_io().to_string()))?;
    let meta = file.metadata().map_err(|e| refused(e.to_string()))?;
    if meta.mode() & 0o077 != 0 {
        return Err(refused(format!(
            "mode {:o} lets group or others read it; chmod 600 it",
            meta.mode() & 0o777
        )));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_TOKEN_FILE + 1),
        &mut text,
    )
    .map_err(|e| refused(e.to_string()))?;
    if text.len() as u64 > MAX_TOKEN_FILE {
        return Err(refused(format!(
            "larger than {} KiB, the most read of a token file",
            MAX_TOKEN_FILE >> 10
        )));
    }
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(refused("the first line is empty".into()));
    }
    Ok(token)
}

/// A listener on `options.addr`, refused when it is not loopback and the operator did
/// not allow that.
///
/// # Errors
/// [`GatewayError::Bind`].
pub async fn bind(options: &HttpOptions) -> Result<tokio::net::TcpListener, GatewayError> {
    if !options.addr.ip().is_loopback() && !options.allow_non_loopback {
        return Err(GatewayError::Bind {
            addr: options.addr,
            message: "not a loopback address; to serve beyond this machine, say so with --allow-non-loopback (and put TLS in front: the token crosses the network in clear)".into(),
        });
    }
    tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| GatewayError::Bind {
            addr: options.addr,
            message: e.to_string(),
        })
}

/// Equal bytes, compared without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// How long open connections may take to finish once every call has ended: long
/// enough to deliver the cancelled calls' answers, short enough that a client stalled
/// mid-request does not keep a stopping gateway alive.
pub const DRAIN: Duration = Duration::from_secs(5);

/// The names a request may give this server by, lower case: its `Host` values and, for
/// a browser's `Origin`, the same as `http://` origins.
pub(crate) struct ServerNames {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl ServerNames {
    /// `localhost`, `127.0.0.1` and `[::1]` with the bound port, and the bound address
    /// itself when it is not loopback.
    fn of(bound: SocketAddr) -> ServerNames {
        let port = bound.port();
        let mut hosts = vec![
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ];
        if !bound.ip().is_loopback() {
            hosts.push(bound.to_string());
        }
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        ServerNames { hosts, origins }
    }

    /// Why the request's `Host` or `Origin` does not name this server, if it does not.
    /// Compared as text, whole (ASCII case aside): a spelling another parser might
    /// still read as this server (`127.0.0.1:08765`, `u@localhost:8765`) is not one.
    fn refusal(&self, headers: &axum::http::HeaderMap) -> Option<String> {
        let ours = |value: &HeaderValue, names: &[String]| {
            value
                .to_str()
                .is_ok_and(|v| names.iter().any(|n| n.eq_ignore_ascii_case(v)))
        };
        match headers.get(header::HOST) {
            Some(host) if ours(host, &self.hosts) => {}
            Some(host) => return Some(format!("Host {host:?} does not name this server")),
            None => return Some("the request has no Host header field".to_owned()),
        }
        match headers.get(header::ORIGIN) {
            Some(origin) if !ours(origin, &self.origins) => {
                Some(format!("Origin {origin:?} is not this server"))
            }
            _ => None,
        }
    }
}

/// The header fields a check here decides on; each may appear once.
const DECIDED_ONCE: [header::HeaderName; 3] = [header::HOST, header::ORIGIN, header::AUTHORIZATION];

/// The first check every request meets. 400 for a request that names its host twice
/// in ways that can differ: a field of [`DECIDED_ONCE`] given twice, or an
/// absolute-form target (`POST http://a/mcp`) whose authority is not its `Host`
/// (HTTP/1.1 says the target's authority wins; the checks read `Host`). Then 403 for a
/// `Host` or `Origin` that is not one of [`ServerNames`], spelt exactly: so everything
/// after this, rmcp's own checks and the direct path alike, sees one of those names.
async fn check_host(
    State(names): State<Arc<ServerNames>>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let why = if let Some(name) = DECIDED_ONCE
        .iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())
    {
        format!("more than one {name} header field")
    } else if let Some(authority) = request.uri().authority()
        && !headers.get(header::HOST).is_some_and(|host| {
            host.as_bytes()
                .eq_ignore_ascii_case(authority.as_str().as_bytes())
        })
    {
        "the request target names another host than the Host field".to_owned()
    } else if let Some(why) = names.refusal(headers) {
        return refusal(
            StatusCode::FORBIDDEN,
            format!("aegis gateway: {why}\n"),
            &[],
        );
    } else {
        return next.run(request).await;
    };
    refusal(
        StatusCode::BAD_REQUEST,
        format!("aegis gateway: {why}\n"),
        &[],
    )
}

async fn require_token(State(token): State<Arc<str>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
        return next.run(request).await;
    }
    refusal(
        StatusCode::UNAUTHORIZED,
        "aegis gateway: a bearer token is required (Authorization: Bearer <token>)\n",
        &[(header::WWW_AUTHENTICATE, "Bearer")],
    )
}

/// A refusal: `status`, a plain-text `message` and the header fields given.
pub(crate) fn refusal(
    status: StatusCode,
    message: impl Into<String>,
    fields: &[(HeaderName, &'static str)],
) -> Response {
    let mut refused = (status, message.into()).into_response();
    for (name, value) in fields {
        refused
            .headers_mut()
            .insert(name.clone(), HeaderValue::from_static(value));
    }
    refused
}

/// What [`read_body_in_time`] holds a body to.
#[derive(Clone, Copy)]
struct BodyLimits {
    max_body: usize,
    read_timeout: Duration,
}

/// Reads a request's body whole, within the cap and within the read timeout of the
/// head's end, before anything that reads it: a client sending its body slowly, or a
/// byte at a time, is answered 408 at the deadline instead of holding a task (and a
/// connection) for as long as it likes.
async fn read_body_in_time(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, limits.max_body);
    match tokio::time::timeout(limits.read_timeout, read).await {
        Ok(Ok(bytes)) => {
            // What rmcp and the direct path read with serde (the last of two equal keys)
            // must be what every reader reads: a body with colliding keys is refused
            // before either sees it (aegis_policy_arguments::unambiguous, the host's one
            // rule). Text that is not JSON at all is left to them to refuse.
            if let Err(why @ (Ambiguity::CollidingKeys { .. } | Ambiguity::ProtoKey)) =
                unambiguous::read(&bytes)
            {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    format!("aegis gateway: the request body does not read one way only: {why}\n"),
                    &[],
                );
            }
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) if is_over_length(&e) => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "aegis gateway: the request body is over {} bytes\n",
                limits.max_body
            ),
            &[],
        ),
        Ok(Err(e)) => refusal(
            StatusCode::BAD_REQUEST,
            format!("aegis gateway: the request body could not be read: {e}\n"),
            &[],
        ),
        // The rest of the body is not read: the connection cannot carry another.
        Err(_) => refusal(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "aegis gateway: the request body did not arrive within {} s\n",
                limits.read_timeout.as_secs_f64()
            ),
            &[(header::CONNECTION, "close")],
        ),
    }
}

/// Whether reading a body failed on the cap (and not on the client or its framing).
fn is_over_length(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
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
        .with_allowed_hosts(names.hosts.clone())
        .with_allowed_origins(names.origins.clone())
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
    let mut router = axum::Router::new()
        .nest_service(ENDPOINT, direct.layer(service))
        .layer(axum::middleware::from_fn_with_state(
            BodyLimits {
                max_body: options.max_body,
                read_timeout,
            },
            read_body_in_time,
        ));
    if let Some(token) = &options.token {
        router = router.layer(axum::middleware::from_fn_with_state(
            Arc::<str>::from(token.as_str()),
            require_token,
        ));
    }
    // Outermost, so no check reads a field that has another value beside it, and
    // nothing reads a Host or Origin that is not this server's.
    let router = router.layer(axum::middleware::from_fn_with_state(names, check_host));
    let limits = Limits {
        max_connections: options.max_connections,
        read_timeout,
        write_timeout: options.write_timeout.min(MAX_CLIENT_TIMEOUT),
    };
    let calls_ended = CancellationToken::new();
    let serving = accept_until(listener, router, limits, notes, calls_ended.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_token(&path).unwrap_err().to_string();
        assert!(e.contains("group or others"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&path).unwrap(), "s3cret");
        std::fs::write(&path, "\n").unwrap();
        assert!(read_token(&path).unwrap_err().to_string().contains("empty"));
    }

    #[tokio::test]
    async fn a_non_loopback_address_needs_the_opt_in() {
        let options = HttpOptions::new("0.0.0.0:0".parse().unwrap());
        let e = bind(&options).await.unwrap_err().to_string();
        assert!(e.contains("not a loopback address"), "{e}");
    }
}
