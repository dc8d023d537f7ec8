//! The server behind `aegis console`: one page and its API, served from the binary (no
//! CDN, no external fonts or scripts), behind the HTTP checks every Aegis server shares
//! ([`aegis_http::guard`]: exact `Host` and `Origin`, body caps, connection caps).
//!
//! It shows the calls of a record file, a directory of session files, or a store of many
//! sessions, as they are written ([`feed`]): each line verified before it is shown,
//! each file under the verdict of what was read of it (`verified` only when pinned to
//! the operator's keys). A call opens to its evidence (its raw lines and what
//! they say). With an approvals queue and an approver key, it lists parked calls and
//! places the operator's signed decision on one.
//!
//! # Guarantees
//! - The page and its assets carry no data and need no token; every `/api/` path needs
//!   `Authorization: Bearer <token>`. The page takes the token from its URL's fragment
//!   (`#token=…`, which a browser never sends to a server or in a `Referer`) and sends
//!   it as that header: a page of another site can neither read it nor make a browser
//!   send it, so a state-changing request cannot be forged from another origin.
//! - Every answer carries a Content-Security-Policy that allows scripts and styles from
//!   this server alone and no inline script (`script-src 'self'`), with
//!   `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and
//!   `frame-ancestors 'none'`. The page writes what the record says (tool ids, reasons
//!   tools and servers wrote) as text nodes, never as markup.
//! - Records are read through `aegis_files` (no final link followed, no FIFO or device
//!   opened), at most [`feed::MAX_FILE`] bytes of a file, and each line is verified
//!   before anything it says is shown ([`feed`] says how a Tampered file is shown).
//! - A decision is placed only by `POST /api/approvals/ID` with the token, a JSON body
//!   (`Content-Type: application/json`, which no cross-origin form can send without a
//!   preflight the guard refuses) and an exact `Origin` when one is sent; it is signed
//!   with the key the operator gave (`--approver-key`), and the first decision of a
//!   request stands, as with `aegis approvals approve`.
//!
//! # Non-guarantees
//! - No TLS (see `aegis-http`): serve loopback, or put a TLS proxy in front.
//! - Bytes already read are not read again: a file rewritten in place below what was
//!   read keeps its verdict here; `aegis verify` checks it as it is now.
//! - The queue's listing (arguments up to 64 KiB a request) is kept whole in memory
//!   while it stands, and sent whole to each page when it changes.

pub mod feed;
mod wake;

use aegis_approvals::{DecideError, DecisionFile, Queue};
use aegis_record::DecisionVerdict;
use aegis_record::json::{Object, Value};
use aegis_record::key::SigningKey;
use aegis_record::verify::TrustAnchor;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use feed::{Feed, Source};
use std::sync::Arc;
use std::time::Duration;

/// The Content-Security-Policy of every answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// What the console shows, and what it may decide.
#[derive(Clone)]
pub struct Console {
    /// The record file, or directory of session files.
    pub source: Source,
    /// The keys the records must be signed by (as `aegis verify --trust`); `None`
    /// verifies them unpinned.
    pub trust: Option<Vec<TrustAnchor>>,
    /// The approvals queue to list, when there is one.
    pub approvals: Option<Queue>,
    /// The key decisions are signed with; without one, the queue is shown read-only.
    pub approver: Option<Arc<SigningKey>>,
}

/// What the routes share: the console and the feed it follows.
struct Shared {
    console: Console,
    feed: Arc<Feed>,
    stop: tokio_util::sync::CancellationToken,
}

/// What starts the console's refusals.
pub const SERVER: &str = "aegis console";

/// The console's routes, before [`aegis_http::guard`] (with no token of its own) and
/// the security header fields [`serve`] adds to every answer: the page and its assets,
/// and the API behind the bearer token `token`; `feed` is what the event stream sends,
/// until `stop`.
pub fn router(
    console: Console,
    feed: Arc<Feed>,
    token: Arc<str>,
    stop: tokio_util::sync::CancellationToken,
) -> axum::Router {
    let token = aegis_http::Token {
        server: SERVER,
        token,
    };
    let api = axum::Router::new()
        .route("/api/events", get(events))
        .route("/api/calls/{n}", get(call))
        .route("/api/approvals/{id}", post(decide))
        .with_state(Arc::new(Shared {
            console,
            feed,
            stop,
        }))
        .layer(axum::middleware::from_fn_with_state(
            token,
            aegis_http::require_token,
        ));
    axum::Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/app.css",
            get(|| async { asset(APP_CSS, "text/css; charset=utf-8") }),
        )
        .merge(api)
}

/// The largest request body read: a decision and its reason.
pub const MAX_BODY: usize = 64 << 10;

/// The most connections served at once: one operator's browser opens a handful.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves the console on `listener` until `stop` is cancelled, following its source
/// ([`feed::start`]): [`router`] behind
/// [`aegis_http::guard`] (this server's names only, a body cap), on connections capped
/// at [`MAX_CONNECTIONS`] with `aegis-http`'s deadlines. Trouble serving goes to
/// `warn`.
///
/// # Errors
/// When the listener has no address, or the feed's thread cannot start.
pub async fn serve(
    listener: tokio::net::TcpListener,
    console: Console,
    token: Arc<str>,
    warn: aegis_http::Warn,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    let bound = listener.local_addr()?;
    let guard = aegis_http::Guard {
        server: SERVER,
        names: Arc::new(aegis_http::ServerNames::of(bound)),
        // The page is open; the API has its own token check (`router`).
        token: None,
        max_body: MAX_BODY,
        read_timeout: aegis_http::DEFAULT_READ_TIMEOUT,
    };
    let feed = feed::start(
        console.source.clone(),
        console.trust.clone(),
        console.approvals.clone(),
        console.approver.is_some(),
        stop.clone(),
    )?;
    // The security header fields go on every answer, the guard's refusals too.
    let router = aegis_http::guard(router(console, feed, token, stop.clone()), &guard)
        .layer(axum::middleware::map_response(secured));
    let limits = aegis_http::Limits {
        max_connections: MAX_CONNECTIONS,
        read_timeout: aegis_http::DEFAULT_READ_TIMEOUT,
        write_timeout: aegis_http::DEFAULT_WRITE_TIMEOUT,
        server: SERVER,
    };
    aegis_http::accept_until(listener, router, limits, warn, stop).await;
    Ok(())
}

/// Why the console could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The address was refused or could not be listened on.
    #[error(transparent)]
    Http(#[from] aegis_http::HttpError),
    /// The async runtime could not start, or the listener has no address.
    #[error("serving: {0}")]
    Serve(String),
}

/// Serves `console` on `addr` (loopback unless `allow_non_loopback`) until SIGINT or
/// SIGTERM, its API behind `token`; `ready` is told the address once it listens.
///
/// # Errors
/// [`ConsoleError`].
pub fn run(
    console: Console,
    (addr, allow_non_loopback): (std::net::SocketAddr, bool),
    token: Arc<str>,
    warn: aegis_http::Warn,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), ConsoleError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("aegis-console")
        .enable_all()
        .build()
        .map_err(|e| ConsoleError::Serve(format!("tokio runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = aegis_http::bind(addr, allow_non_loopback).await?;
        let bound = listener
            .local_addr()
            .map_err(|e| ConsoleError::Serve(e.to_string()))?;
        let stop = tokio_util::sync::CancellationToken::new();
        let signalled = stop.clone();
        // Watched from here, before anyone is told the server is ready.
        let signal = aegis_http::stop_on_signal();
        tokio::spawn(async move {
            signal.await;
            signalled.cancel();
        });
        ready(bound);
        let serving = serve(listener, console, token, warn, stop.clone());
        tokio::select! {
            served = serving => served.map_err(|e| ConsoleError::Serve(e.to_string())),
            // Connections still open get DRAIN to finish.
            () = async {
                stop.cancelled().await;
                tokio::time::sleep(aegis_http::DRAIN).await;
            } => Ok(()),
        }
    })
}

/// Every answer's security header fields.
async fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// How long the event stream waits, with nothing new, before sending a comment that
/// keeps proxies and the page's reader from taking it for dead.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The most events sent in one message: a long backlog goes in several.
const EVENTS_PER_MESSAGE: usize = 512;

/// `GET /api/events`: server-sent events, each message's data one JSON array of
/// events (`file`, `session`, `call`, `approvals`): the record's from the first on, and
/// the approvals queue as it stands whenever it changes. It ends when the console
/// stops.
async fn events(State(shared): State<Arc<Shared>>) -> Response {
    let changed = shared.feed.subscribe();
    let stream = futures_util::stream::unfold(
        (shared, changed, 0usize, 0u64),
        |(shared, mut changed, from, approvals_sent)| async move {
            loop {
                // The queue's state first: it is one snapshot, never a backlog.
                let (approvals, version) = shared.feed.approvals();
                if version != approvals_sent
                    && let Some(listing) = approvals
                {
                    let message = format!("data: [{listing}]\n\n");
                    return Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from(message)),
                        (shared, changed, from, version),
                    ));
                }
                let batch = shared.feed.since(from, EVENTS_PER_MESSAGE);
                if !batch.is_empty() {
                    let next = from + batch.len();
                    let message = format!("data: [{}]\n\n", batch.join(","));
                    return Some((Ok(Bytes::from(message)), (shared, changed, next, version)));
                }
                tokio::select! {
                    seen = changed.changed() => {
                        if seen.is_err() {
                            return None;
                        }
                    }
                    () = shared.stop.cancelled() => return None,
                    () = tokio::time::sleep(KEEP_ALIVE) => {
                        return Some((
                            Ok(Bytes::from_static(b": still here\n\n")),
                            (shared, changed, from, approvals_sent),
                        ));
                    }
                }
            }
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

/// `GET /api/calls/N`: call N's evidence: `{"file", "row", "lines": [{"kind",
/// "line"}], "verify"}`, each line as the record holds it (text) and `verify` the
/// command that checks the file offline.
async fn call(State(shared): State<Arc<Shared>>, Path(n): Path<String>) -> Response {
    let found = n.parse::<usize>().ok().and_then(|n| shared.feed.call(n));
    let Some(evidence) = found else {
        return aegis_http::refusal(StatusCode::NOT_FOUND, format!("no call {n}"), &[]);
    };
    let mut o = Object::new();
    o.insert("file", evidence.file.as_str());
    o.insert("row", evidence.row.clone());
    o.insert(
        "lines",
        Value::Array(
            evidence
                .lines
                .iter()
                .map(|(kind, line)| {
                    let mut l = Object::new();
                    l.insert("kind", *kind);
                    l.insert(
                        "line",
                        String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(line))
                            .into_owned(),
                    );
                    Value::Object(l)
                })
                .collect(),
        ),
    );
    o.insert("verify", evidence.verify.as_ref());
    json(StatusCode::OK, &o)
}

fn json(status: StatusCode, o: &Object) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        o.to_canonical(),
    )
        .into_response()
}

/// `POST /api/approvals/ID` with `{"verdict": "approve"}` or `{"verdict": "deny",
/// "reason": TEXT}`: the operator's decision, signed with the console's approver key.
async fn decide(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let refuse = |status, why: &str| aegis_http::refusal(status, why.to_owned(), &[]);
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a decision is sent as Content-Type: application/json",
        );
    }
    let (Some(queue), Some(key)) = (
        shared.console.approvals.clone(),
        shared.console.approver.clone(),
    ) else {
        return refuse(
            StatusCode::FORBIDDEN,
            "this console decides nothing: it was started without --approver-key",
        );
    };
    if !aegis_approvals::is_approval_id(&id) {
        return refuse(StatusCode::NOT_FOUND, "not an approval id");
    }
    let said = match said(&body) {
        Ok(said) => said,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, &why),
    };
    let placed = tokio::task::spawn_blocking(move || place(&queue, &key, &id, said)).await;
    match placed {
        Ok(Ok(o)) => json(StatusCode::OK, &o),
        Ok(Err((status, why))) => refuse(status, &why),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// What the operator said: approve, or deny with a reason.
enum Said {
    Approve,
    Deny(String),
}

/// Reads a decision's body: one JSON object, `verdict` and (to deny) `reason`, nothing
/// else.
fn said(body: &[u8]) -> Result<Said, String> {
    let Ok(Value::Object(o)) = aegis_record::json::parse(body) else {
        return Err("the body is not one JSON object".into());
    };
    if let Some(other) = o
        .iter()
        .map(|(k, _)| k)
        .find(|k| !matches!(*k, "verdict" | "reason"))
    {
        return Err(format!("unknown member {other:?}"));
    }
    let reason = o.get("reason").map(|r| r.as_str().map(str::trim));
    match (o.get("verdict").and_then(Value::as_str), reason) {
        (Some("approve"), None) => Ok(Said::Approve),
        (Some("deny"), Some(Some(reason))) if !reason.is_empty() => {
            Ok(Said::Deny(reason.to_owned()))
        }
        (Some("deny"), _) => Err("a denial needs a reason (the client is told)".into()),
        (Some("approve"), Some(_)) => Err("an approval takes no reason".into()),
        _ => Err(r#"verdict must be "approve" or "deny""#.into()),
    }
}

/// Signs and places the decision on request `id`: the request's state after it.
fn place(
    queue: &Queue,
    key: &SigningKey,
    id: &str,
    said: Said,
) -> Result<Object, (StatusCode, String)> {
    let request = queue
        .request(id)
        .map_err(|e| (StatusCode::NOT_FOUND, e.to_string()))?;
    let verdict = match said {
        Said::Approve => DecisionVerdict::Approved {
            scope: request.scope.clone(),
        },
        Said::Deny(reason) => DecisionVerdict::Denied { reason },
    };
    let decision = DecisionFile::signed(key, id, verdict);
    queue.decide(&decision).map_err(|e| {
        let status = match &e {
            DecideError::AlreadyDecided { .. } => StatusCode::CONFLICT,
            DecideError::Expired { .. } => StatusCode::GONE,
            DecideError::NoSuchRequest { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, e.to_string())
    })?;
    let mut o = Object::new();
    o.insert("approval_id", id);
    o.insert("decision", decision.to_object());
    Ok(o)
}
