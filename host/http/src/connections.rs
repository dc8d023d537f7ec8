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
//! - A connection whose client takes no bytes of an answer for `write_timeout` (it
//!   stopped reading, with the socket's buffers full) is closed: a client cannot hold
//!   a connection, and the answer buffered for it, by not reading. A slow reader that
//!   keeps taking bytes is not cut (the clock restarts at each write that goes
//!   through), nor is an event stream with nothing to send.
//! - A request head, and a connection's read buffer, is at most [`MAX_READ_BUFFER`];
//!   a longer head gets 431.
//! - A failed accept (the process out of file descriptors) does not end serving:
//!   accepting resumes after [`ACCEPT_BACKOFF`], and the operator is warned (at most
//!   once per [`WARN_EVERY`]).
//! - HTTP/1.0 and 1.1 only: no HTTP/2, no upgrades.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
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

/// The largest request head, and read buffer, a connection has: 64 KiB, far above any
/// MCP request's head (hyper's own default is about 400 KiB). A longer head gets 431.
/// (The buffer's bound alone is not one on the head: a head that arrives in one read
/// is parsed whole.)
pub const MAX_READ_BUFFER: usize = 64 * 1024;

/// One kind of trouble the operator is warned of: the first time, then at most once
/// per `every` ([`WARN_EVERY`]), with how often it happened meanwhile.
struct Warning {
    every: Duration,
    last: Option<Instant>,
    since: u64,
}

impl Warning {
    fn every(every: Duration) -> Warning {
        Warning {
            every,
            last: None,
            since: 0,
        }
    }

    /// Counts one more; the count since the last warning when one is due now.
    fn due(&mut self) -> Option<u64> {
        self.since += 1;
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return None;
        }
        self.last = Some(Instant::now());
        Some(std::mem::take(&mut self.since))
    }
}

/// The limits [`accept_until`] serves under.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a connection has to send a request head.
    pub read_timeout: Duration,
    /// How long a client may take no bytes of an answer.
    pub write_timeout: Duration,
    /// The server's name, which starts its refusals (`aegis gateway`).
    pub server: &'static str,
}

/// Where the operator is warned of trouble serving (connections full, accepts
/// failing): one line a warning.
pub type Warn = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// Accepts connections on `listener` and serves `router` on them until `until` is
/// cancelled; then asks every open connection to finish (an idle one closes at once, one
/// with a request in hand closes once it is answered) and waits for them all. The
/// caller bounds that wait: a client stalled mid-request ends only at `read_timeout`.
pub async fn accept_until(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    warn: Warn,
    until: CancellationToken,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(REFUSING));
    let connections = TaskTracker::new();
    let mut full = Warning::every(WARN_EVERY);
    let mut accept_failed = Warning::every(WARN_EVERY);
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
                    warn(&format!(
                        "accepting a connection failed ({e}; {times} time(s) since the last \
                         such warning); trying again every {} ms",
                        ACCEPT_BACKOFF.as_millis()
                    ));
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
                WriteDeadline::new(tcp, limits.write_timeout),
                router.clone(),
                limits.read_timeout,
                until.clone(),
                permit,
            ));
            continue;
        }
        if let Some(refused) = full.due() {
            warn(&format!(
                "{} connections are open, the most served at once; refusing more (503) \
                 until one closes ({refused} refused since the last such warning)",
                limits.max_connections
            ));
        }
        if let Ok(permit) = Arc::clone(&refusing).try_acquire_owned() {
            connections.spawn(refuse_one(tcp, limits.server, permit));
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
    tcp: WriteDeadline,
    router: axum::Router,
    read_timeout: Duration,
    until: CancellationToken,
    _open: OwnedSemaphorePermit,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .max_buf_size(MAX_READ_BUFFER)
        .max_header_size(MAX_READ_BUFFER);
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
async fn refuse_one(tcp: TcpStream, server: &'static str, _refusing: OwnedSemaphorePermit) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_TIMEOUT)
        .max_buf_size(MAX_READ_BUFFER)
        .max_header_size(MAX_READ_BUFFER)
        .keep_alive(false);
    let refuse = hyper::service::service_fn(move |_request| async move {
        Ok::<_, Infallible>(connections_full(server))
    });
    // The head has REFUSAL_TIMEOUT; the answer, written to a client that may not read
    // it, as long again.
    let refusing = http.serve_connection(TokioIo::new(tcp), refuse);
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT * 2, refusing).await;
}

fn connections_full(server: &str) -> Response<Body> {
    crate::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{server}: as many connections are open as it serves at once; try again\n"),
        &[(header::CONNECTION, "close"), (header::RETRY_AFTER, "1")],
    )
}

/// A connection's socket whose writes fail once one has made no progress for
/// `timeout`: hyper then drops the connection (and the answer it was writing).
struct WriteDeadline {
    tcp: TcpStream,
    timeout: Duration,
    /// Armed when a write is first refused for want of room; disarmed by any write
    /// that goes through.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(tcp: TcpStream, timeout: Duration) -> WriteDeadline {
        WriteDeadline {
            tcp,
            timeout,
            stalled: None,
        }
    }

    /// Passes a write's result on, timing how long the socket has had no room.
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no bytes of its answer within the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.timed(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.timed(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.tcp).poll_flush(cx);
        this.timed(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_said_once_per_period_with_the_count_since() {
        let mut w = Warning::every(Duration::from_millis(200));
        assert_eq!(w.due(), Some(1), "the first time");
        assert_eq!(w.due(), None);
        assert_eq!(w.due(), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(w.due(), Some(3), "the two held back, and this one");
        assert_eq!(w.due(), None);
    }
}
