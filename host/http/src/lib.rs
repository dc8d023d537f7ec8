//! The HTTP hardening every Aegis server shares (`aegis gateway`, `aegis console`):
//! loopback by default, exact `Host` and `Origin` checks, a bearer token, a body cap
//! with a deadline, and connections accepted up to a cap with deadlines of their own
//! ([`connections`]). A server builds its axum router and puts it behind [`guard`].
//!
//! # Guarantees
//! - [`bind`] refuses a non-loopback address unless the operator opted in.
//! - `Host` must name this server (`localhost`, `127.0.0.1` or `[::1]` with its port,
//!   or the bound address); `Origin`, when a browser sends one, must be one of those
//!   as `http://` origins ([`ServerNames`]). Both are compared as text, whole (ASCII
//!   case aside), so a spelling some other parser would still read as this server
//!   (`127.0.0.1:08765`, `u@localhost:8765`, an origin with a path) is refused too.
//!   Anything else is answered 403 before any other handling: a page on another site
//!   that rebinds its name to 127.0.0.1 cannot reach the server.
//! - A request with more than one `Host`, `Origin` or `Authorization` field line gets
//!   400 before any other check, and so does an absolute-form target whose authority
//!   is not the `Host` field: the checks read one value, and a proxy in front could act
//!   on another.
//! - With a token, a request without `Authorization: Bearer <token>` gets 401 and
//!   nothing else. A token of the right length is compared without stopping at the
//!   first differing byte; one of another length is refused at once.
//! - A request body over its cap gets 413, however it is framed; one that has not
//!   arrived within the read timeout of the head's end gets 408; a JSON body whose keys
//!   fold together (or that holds a `__proto__` key) gets 400 before any handler reads
//!   it (`aegis_policy_arguments::unambiguous`: serde keeps the last of two equal keys).
//! - [`read_token`] reads a token file never through a final link, never a FIFO or a
//!   device, and refuses one group or others may read.
//!
//! # Non-guarantees
//! - No TLS: the token crosses loopback in clear. Put a TLS proxy in front for
//!   anything else.
//! - A request with both `Content-Length` and `Transfer-Encoding: chunked` is read by
//!   the chunks, as hyper does; a proxy in front must not forward such a request.

pub mod connections;

pub use connections::{
    ACCEPT_BACKOFF, Limits, MAX_READ_BUFFER, REFUSAL_TIMEOUT, REFUSING, WARN_EVERY, Warn,
    accept_until,
};

use aegis_policy_arguments::unambiguous::{self, Ambiguity};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The default time a client has to send a request head, and then its body: 30 s, as
/// hyper's own default for heads.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time a client may take no bytes of an answer before its connection is
/// closed: 30 s.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest read or write timeout taken: a day. A longer one is served as a day.
pub const MAX_CLIENT_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The default cap on connections served at once: 512, far more than the clients of
/// one machine open, well within a process's usual 1,024 file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// How long open connections may take to finish once the server stops: long enough
/// to deliver the last answers, short enough that a client stalled mid-request does
/// not keep a stopping server alive.
pub const DRAIN: Duration = Duration::from_secs(5);

/// The most of a token file read: a bearer token is tens of bytes; 4 KiB leaves room
/// for a comment line or two and stops a file grown without end.
pub const MAX_TOKEN_FILE: u64 = 4 << 10;

/// Why a server could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The token file was refused.
    #[error("token file {}: {message}", path.display())]
    Token {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The address could not be listened on, or is not loopback and not allowed.
    #[error("cannot listen on {addr}: {message}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
}

/// Reads a bearer token from `path`: the file's first line, which must not be empty;
/// the file must not be readable by group or others.
///
/// # Errors
/// [`HttpError::Token`].
pub fn read_token(path: &Path) -> Result<String, HttpError> {
    use std::os::unix::fs::MetadataExt as _;
    let refused = |message: String| HttpError::Token {
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

/// A listener on `addr`, refused when it is not loopback and `allow_non_loopback` is
/// not set.
///
/// # Errors
/// [`HttpError::Bind`].
pub async fn bind(
    addr: SocketAddr,
    allow_non_loopback: bool,
) -> Result<tokio::net::TcpListener, HttpError> {
    if !addr.ip().is_loopback() && !allow_non_loopback {
        return Err(HttpError::Bind {
            addr,
            message: "not a loopback address; to serve beyond this machine, say so with --allow-non-loopback (and put TLS in front: the token crosses the network in clear)".into(),
        });
    }
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| HttpError::Bind {
            addr,
            message: e.to_string(),
        })
}

/// Watches SIGINT and SIGTERM from this call on, and resolves at the first of them (or
/// never, if they cannot be watched): when a server stops serving. Call it before the
/// server says it is ready, so a signal sent as soon as it has is caught, not left to
/// its default action (the process killed mid-write).
///
/// # Panics
/// Outside a Tokio runtime.
pub fn stop_on_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let watched = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let (Ok(mut int), Ok(mut term)) = watched else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// Equal bytes, compared without stopping at the first difference.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The names a request may give this server by, lower case: its `Host` values and, for
/// a browser's `Origin`, the same as `http://` origins.
#[derive(Clone, Debug)]
pub struct ServerNames {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl ServerNames {
    /// `localhost`, `127.0.0.1` and `[::1]` with the bound port, and the bound address
    /// itself (another loopback address such as `127.0.0.2`, or a non-loopback one).
    pub fn of(bound: SocketAddr) -> ServerNames {
        let port = bound.port();
        let mut hosts = vec![
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ];
        if !hosts.contains(&bound.to_string()) {
            hosts.push(bound.to_string());
        }
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        ServerNames { hosts, origins }
    }

    /// The `Host` values taken.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The `Origin` values taken.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// Why the request's `Host` or `Origin` does not name this server, if it does not.
    /// Compared as text, whole (ASCII case aside): a spelling another parser might
    /// still read as this server (`127.0.0.1:08765`, `u@localhost:8765`) is not one.
    pub fn refusal(&self, headers: &axum::http::HeaderMap) -> Option<String> {
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

/// What [`guard`] holds every request to.
#[derive(Clone, Debug)]
pub struct Guard {
    /// The server's name, which starts its refusals (`aegis gateway`).
    pub server: &'static str,
    /// The names it answers to.
    pub names: Arc<ServerNames>,
    /// The bearer token required, if any.
    pub token: Option<Arc<str>>,
    /// The largest request body read.
    pub max_body: usize,
    /// How long a body may take to arrive after its head (at most
    /// [`MAX_CLIENT_TIMEOUT`]).
    pub read_timeout: Duration,
}

/// `router` behind the checks of `guard`, outermost first: the fields decided once and
/// the server's names ([`ServerNames`]), then the token, then the body read whole
/// within its cap and deadline, read one way only.
pub fn guard(router: axum::Router, guard: &Guard) -> axum::Router {
    let mut router = router.layer(axum::middleware::from_fn_with_state(
        guard.clone(),
        read_body_in_time,
    ));
    if let Some(token) = &guard.token {
        router = router.layer(axum::middleware::from_fn_with_state(
            Token {
                server: guard.server,
                token: Arc::clone(token),
            },
            require_token,
        ));
    }
    // Outermost, so no check reads a field that has another value beside it, and
    // nothing reads a Host or Origin that is not this server's.
    router.layer(axum::middleware::from_fn_with_state(
        guard.clone(),
        check_host,
    ))
}

/// The header fields a check here decides on; each may appear once.
const DECIDED_ONCE: [header::HeaderName; 3] = [header::HOST, header::ORIGIN, header::AUTHORIZATION];

/// The first check every request meets. 400 for a request that names its host twice
/// in ways that can differ: a field of [`DECIDED_ONCE`] given twice, or an
/// absolute-form target (`POST http://a/mcp`) whose authority is not its `Host`
/// (HTTP/1.1 says the target's authority wins; the checks read `Host`). Then 403 for a
/// `Host` or `Origin` that is not one of [`ServerNames`], spelt exactly: so everything
/// after this sees one of those names.
async fn check_host(State(guard): State<Guard>, request: Request, next: Next) -> Response {
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
    } else if let Some(why) = guard.names.refusal(headers) {
        return refusal(
            StatusCode::FORBIDDEN,
            format!("{}: {why}\n", guard.server),
            &[],
        );
    } else {
        return next.run(request).await;
    };
    refusal(
        StatusCode::BAD_REQUEST,
        format!("{}: {why}\n", guard.server),
        &[],
    )
}

/// A bearer token some routes require ([`require_token`]), with the server's name
/// for the refusal.
#[derive(Clone, Debug)]
pub struct Token {
    /// The server's name, which starts its refusal.
    pub server: &'static str,
    /// The token.
    pub token: Arc<str>,
}

/// Middleware: 401 for a request without `Authorization: Bearer <token>`, compared
/// whole ([`same`]); [`guard`] puts it around every route when its token is set, a
/// server may put it around some.
pub async fn require_token(State(token): State<Token>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| same(g.as_bytes(), token.token.as_bytes())) {
        return next.run(request).await;
    }
    refusal(
        StatusCode::UNAUTHORIZED,
        format!(
            "{}: a bearer token is required (Authorization: Bearer <token>)\n",
            token.server
        ),
        &[(header::WWW_AUTHENTICATE, "Bearer")],
    )
}

/// A refusal: `status`, a plain-text `message` and the header fields given.
pub fn refusal(
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

/// Reads a request's body whole, within the cap and within the read timeout of the
/// head's end, before anything that reads it: a client sending its body slowly, or a
/// byte at a time, is answered 408 at the deadline instead of holding a task (and a
/// connection) for as long as it likes.
async fn read_body_in_time(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let server = guard.server;
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, guard.max_body);
    let read_timeout = guard.read_timeout.min(MAX_CLIENT_TIMEOUT);
    match tokio::time::timeout(read_timeout, read).await {
        Ok(Ok(bytes)) => {
            // What a handler reads with serde (the last of two equal keys) must be what
            // every reader reads: a body with colliding keys is refused before any sees
            // it (aegis_policy_arguments::unambiguous, the host's one rule). Text that
            // is not JSON at all is left to the handlers to refuse.
            if let Err(why @ (Ambiguity::CollidingKeys { .. } | Ambiguity::ProtoKey)) =
                unambiguous::read(&bytes)
            {
                return refusal(
                    StatusCode::BAD_REQUEST,
                    format!("{server}: the request body does not read one way only: {why}\n"),
                    &[],
                );
            }
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) if is_over_length(&e) => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{server}: the request body is over {} bytes\n",
                guard.max_body
            ),
            &[],
        ),
        Ok(Err(e)) => refusal(
            StatusCode::BAD_REQUEST,
            format!("{server}: the request body could not be read: {e}\n"),
            &[],
        ),
        // The rest of the body is not read: the connection cannot carry another.
        Err(_) => refusal(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "{server}: the request body did not arrive within {} s\n",
                read_timeout.as_secs_f64()
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
        let e = bind("0.0.0.0:0".parse().unwrap(), false)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a loopback address"), "{e}");
    }

    #[test]
    fn the_bound_address_is_always_one_of_the_servers_names() {
        let names = ServerNames::of("127.0.0.2:8767".parse().unwrap());
        assert!(names.hosts().contains(&"127.0.0.2:8767".to_owned()));
        assert!(
            names
                .origins()
                .contains(&"http://127.0.0.2:8767".to_owned())
        );
        // Named once, however it is spelled among the defaults.
        let names = ServerNames::of("[::1]:8767".parse().unwrap());
        assert_eq!(names.hosts().len(), 3, "{:?}", names.hosts());
        assert!(!names.hosts().contains(&"127.0.0.2:8767".to_owned()));
    }
}
