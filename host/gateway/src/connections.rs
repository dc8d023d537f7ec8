//! The HTTP side's connections: accepted up to a cap, each given a deadline for every
//! request head, stopped gracefully. What axum's own `serve` does, plus the limits it
//! has no place for.
//!
//! # Guarantees
//! - At most `max_connections` connections are served at once. Past the cap, a
//!   connection is answered `503` with `Connection: close` and `Retry-After`, while at
//!   most [`REFUSING`] such answers are under way (each given [`REFUSAL_TIMEOUT`] to
//!   send the request head it answers, and as long again to be written); past that
//!   too, it is closed unanswered. The operator is warned when the cap is reached, at
//!   most once per [`WARN_EVERY`], with the count refused since the last warning.
//! - A connection that has not sent a whole request head within `read_timeout` of the
//!   server waiting for one is closed: a new connection from its accept, a kept-alive
//!   one from its last answer. A head sent a byte at a time does not restart the clock.
//!   A request being answered (a running call, an event stream) is not waiting for a
//!   head, so it is not cut short.
//! - A connection's read buffer, and so a request head, is at most [`MAX_READ_BUFFER`].
//! - A failed accept (the process out of file descriptors) does not end serving:
//!   accepting resumes after [`ACCEPT_BACKOFF`], and the operator is warned (at most
//!   once per [`WARN_EVERY`]).
//! - HTTP/1.0 and 1.1 only: no HTTP/2, no upgrades.

use crate::server::{Note, Notes};
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How many connections past the cap may be in the middle of their `503` at once.
pub const REFUSING: usize = 64;

/// How long a connection past the cap has to send the request head its `503` answers.
pub const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// How long accepting pauses after the listener failed (out of file descriptors).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The most often the operator is warned of one kind of trouble.
pub const WARN_EVERY: Duration = Duration::from_secs(60);

/// The largest read buffer a connection keeps: 64 KiB, far above any MCP request's head
/// (hyper's own default is about 400 KiB).
pub const MAX_READ_BUFFER: usize = 64 * 1024;

/// One kind of trouble the operator is warned of: the first time, then at most once
/// per [`WARN_EVERY`], with how often it happened meanwhile.
#[derive(Default)]
struct Warning {
    last: Option<Instant>,
    since: u64,
}

impl Warning {
    /// Counts one more; the count since the last warning when one is due now.
    fn due(&mut self) -> Option<u64> {
        self.since += 1;
        if self.last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return None;
        }
        self.last = Some(Instant::now());
        Some(std::mem::take(&mut self.since))
    }
}

/// The limits [`accept_until`] serves under.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) read_timeout: Duration,
}

/// Accepts connections on `listener` and serves `router` on them until `until` is
/// cancelled; then asks every open connection to finish (an idle one closes at once, one
/// with a request in hand closes once it is answered) and waits for them all. The
/// caller bounds that wait: a client stalled mid-request ends only at `read_timeout`.
pub(crate) async fn accept_until(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    notes: Notes,
    until: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSING));
    let connections = TaskTracker::new();
    let mut full = Warning::default();
    let mut accept_failed = Warning::default();
    loop {
        let accepted = tokio::select! {
            () = until.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // The peer gave up before the accept: nothing is wrong with the listener.
            Err(e) if is_the_peers(&e) => continue,
            Err(e) => {
                if let Some(times) = accept_failed.due() {
                    notes(Note::Serving(&format!(
                        "accepting a connection failed ({e}; {times} time(s) since the last \
                         such warning); trying again every {} ms",
                        ACCEPT_BACKOFF.as_millis()
                    )));
                }
                tokio::select! {
                    () = until.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        // Without TCP_NODELAY a streamed answer's second small write waits for the
        // client's delayed ACK: ~40 ms per call (measured on a debug build, sequential
        // echo calls from a Python client: 49.6 ms/call without it, 19.1 with it).
        let _ = tcp.set_nodelay(true);
        if let Ok(permit) = Arc::clone(&open).try_acquire_owned() {
            connections.spawn(serve_one(
                tcp,
                router.clone(),
                limits.read_timeout,
                until.clone(),
                permit,
            ));
            continue;
        }
        if let Some(refused) = full.due() {
            notes(Note::Serving(&format!(
                "{} connections are open, the most served at once; refusing more (503) \
                 until one closes ({refused} refused since the last such warning)",
                limits.max_connections
            )));
        }
        if let Ok(permit) = Arc::clone(&refusing).try_acquire_owned() {
            connections.spawn(refuse_one(tcp, permit));
        }
        // Otherwise `tcp` is dropped here: closed unanswered.
    }
    connections.close();
    connections.wait().await;
}

/// Accept errors that concern one connection, not the listener (as axum and hyper
/// class them).
fn is_the_peers(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

async fn serve_one(
    tcp: TcpStream,
    router: axum::Router,
    read_timeout: Duration,
    until: CancellationToken,
    _open: OwnedSemaphorePermit,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(MAX_READ_BUFFER);
    let connection = http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(router));
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = until.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    // An error here is the client's (it left, or sent what is not HTTP): nothing to do.
    let _ = connection.await;
}

/// Answers a connection past the cap with `503` and closes it.
async fn refuse_one(tcp: TcpStream, _refusing: OwnedSemaphorePermit) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_TIMEOUT)
        .max_buf_size(MAX_READ_BUFFER)
        .keep_alive(false);
    let refuse =
        hyper::service::service_fn(|_request| async { Ok::<_, Infallible>(connections_full()) });
    // The head has REFUSAL_TIMEOUT; the answer, written to a client that may not read
    // it, as long again.
    let refusing = http.serve_connection(TokioIo::new(tcp), refuse);
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT * 2, refusing).await;
}

fn connections_full() -> Response<Body> {
    crate::http::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "aegis gateway: as many connections are open as it serves at once; try again\n",
        &[(header::CONNECTION, "close"), (header::RETRY_AFTER, "1")],
    )
}
