//! The server behind `aegis console`: one page and its API, served from the binary (no
//! CDN, no external fonts or scripts), behind the HTTP checks every Aegis server shares
//! ([`aegis_http::guard`]: exact `Host` and `Origin`, body caps, connection caps).
//!
//! This is the first slice of the console: the page, and the calls of one record file
//! with the verdict `aegis verify` gives its bytes. Live updates, directories of
//! sessions, the PostgreSQL store, a call's evidence and approvals come next.
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
//! - The record is read through `aegis_files` (no final link followed, no FIFO or
//!   device opened), at most [`MAX_RECORD`] bytes, and verified before any of its calls
//!   is listed: a Tampered record lists none (`"calls": []`, the verdict says why).
//!
//! # Non-guarantees
//! - No TLS (see `aegis-http`): serve loopback, or put a TLS proxy in front.

use aegis_calls::Entry;
use aegis_record::json::{Object, Value};
use aegis_record::verify::{Options, TrustAnchor, Verdict, verify};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::path::PathBuf;
use std::sync::Arc;

/// The most of a record file the console reads: 256 MiB.
pub const MAX_RECORD: u64 = 256 << 20;

/// The Content-Security-Policy of every answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// What the console shows.
#[derive(Clone, Debug)]
pub struct Console {
    /// The record file.
    pub record: PathBuf,
    /// The keys the record must be signed by (as `aegis verify --trust`); `None`
    /// verifies it unpinned.
    pub trust: Option<Vec<TrustAnchor>>,
}

/// What starts the console's refusals.
pub const SERVER: &str = "aegis console";

/// The console's routes, before [`aegis_http::guard`] (with no token of its own): the
/// page and its assets, and the API behind the bearer token `token`.
pub fn router(console: Console, token: Arc<str>) -> axum::Router {
    let token = aegis_http::Token {
        server: SERVER,
        token,
    };
    let api = axum::Router::new()
        .route("/api/calls", get(calls))
        .with_state(Arc::new(console))
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
        .layer(axum::middleware::map_response(secured))
}

/// The largest request body read: the API takes no body yet.
pub const MAX_BODY: usize = 64 << 10;

/// The most connections served at once: one operator's browser opens a handful.
pub const MAX_CONNECTIONS: usize = 64;

/// Serves the console on `listener` until `stop` is cancelled: [`router`] behind
/// [`aegis_http::guard`] (this server's names only, a body cap), on connections capped
/// at [`MAX_CONNECTIONS`] with `aegis-http`'s deadlines. Trouble serving goes to
/// `warn`.
///
/// # Errors
/// When the listener has no address.
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
    let router = aegis_http::guard(router(console, token), &guard);
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
        tokio::spawn(async move {
            aegis_http::stop_on_signal().await;
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

/// `GET /api/calls`: `{"record", "verdict", "headline", "sessions", "calls"}`, the
/// calls of the record in the order their intents came, under the verdict of its bytes
/// (none when Tampered).
async fn calls(State(console): State<Arc<Console>>) -> Response {
    let read = tokio::task::spawn_blocking(move || listing(&console)).await;
    match read {
        Ok(Ok(body)) => (
            [(header::CONTENT_TYPE, "application/json")],
            body.to_canonical(),
        )
            .into_response(),
        Ok(Err(why)) => aegis_http::refusal(StatusCode::SERVICE_UNAVAILABLE, why, &[]),
        Err(e) => aegis_http::refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), &[]),
    }
}

/// The listing `GET /api/calls` answers with, or why the record could not be read.
pub fn listing(console: &Console) -> Result<Object, String> {
    let cap = aegis_files::Cap::new(MAX_RECORD, "a record");
    let bytes = aegis_files::read(&console.record, cap).map_err(|e| e.to_string())?;
    let report = verify(
        bytes.as_slice(),
        &Options {
            trust: console.trust.clone(),
            approvers: None,
            threads: 0,
        },
    )
    .map_err(|e| e.to_string())?;
    let verdict = match report.verdict() {
        Verdict::Verified(_) => "verified",
        Verdict::Indeterminate(_) => "indeterminate",
        Verdict::Tampered(_) => "tampered",
    };
    let mut sessions = Vec::new();
    let mut calls = Vec::new();
    if verdict != "tampered" {
        for entry in aegis_calls::entries(&bytes) {
            match entry {
                Entry::Session(index, opened) => {
                    sessions.push(Value::Object(opened.to_json(index)))
                }
                Entry::Call(row) => calls.push(Value::Object(row.to_json())),
            }
        }
    }
    let mut o = Object::new();
    o.insert("record", console.record.display().to_string());
    o.insert("verdict", verdict);
    o.insert("headline", report.headline());
    o.insert("sessions", Value::Array(sessions));
    o.insert("calls", Value::Array(calls));
    Ok(o)
}
