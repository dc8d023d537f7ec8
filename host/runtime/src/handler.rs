//! Model B: tools as host functions ("host handlers"), checked, not isolated.
//!
//! A handler is ordinary host code. It is handed a [`HostContext`] built from its
//! call's [`Grant`] alone, and the context is the door to every effect the host
//! audits: files through [`HostContext::open_read`] and
//! [`HostContext::open_write_append`], the network through [`HostContext::http_get`],
//! logs through [`HostContext::log_emit`]. Each method checks against the grant
//! before it acts.
//!
//! # Guarantees
//! - **Checked before the effect.** A path is placed under a granted root before
//!   anything is opened; a URL's host, port and method are matched against the grant's
//!   rules before any DNS lookup or connection.
//! - **Paths resolve inside their root, by cap-std.** Each granted root is the
//!   directory the capability station opened when the tool was registered
//!   ([`crate::capability::HeldRoot`]); this module uses no ambient authority over the
//!   file system. Every open is relative to that directory handle, so `..`, absolute symlinks and
//!   symlinks that lead out are refused by cap-std's resolution (`openat2` with
//!   `RESOLVE_BENEATH` where the kernel has it), not by string checks.
//! - **Reads only under `fs_read` roots; writes only under `fs_write` roots, and only
//!   by appending.** A write root is readable only when the grant lists it in
//!   `fs_read` as well (the capability station does so when a call asks for
//!   `fs.read`); the context never widens the grant.
//! - **One lookup.** The connection goes to an address from the single lookup of the
//!   name that was checked; nothing resolves it again. No proxy and no environment
//!   variable is consulted. Redirects are returned, not followed.
//! - **Ceilings.** A response body over `max_output_bytes` is an error and nothing of
//!   it is returned (never a silent truncation). Connecting, sending and receiving
//!   share the call's wall-clock budget, `max_wall_ms` counted from the context's
//!   construction. Response heads and logs are bounded (see Limits).
//! - **Labelled errors.** Every error names its axis ([`HandlerError::axis`]) and says
//!   whether the grant refused it or the world failed it ([`HandlerError::class`]).
//!
//! # Non-guarantees
//! - **This is not isolation.** A handler runs in the host process with the host's
//!   authority: it can call `std::fs` or `std::net` directly and nothing here stops
//!   it. Model B checks the effects that go through the context, so it is as
//!   trustworthy as the handler's own code. Untrusted tools belong in the sandbox
//!   ([`crate::sandbox`], Model A).
//! - **DNS is trusted.** A rule naming a host allows whatever that name resolves to:
//!   an allow-listed name whose DNS answer is an internal address (loopback, a private
//!   range, a metadata endpoint) is reached. Only a rule that names an IP literal pins
//!   the address.
//! - The DNS lookup itself is not bounded by the wall-clock budget: the system
//!   resolver blocks for as long as it takes.
//! - A hard link or a mount inside a root reaches what it points at: cap-std guards
//!   path resolution, not the inode graph.
//! - Opening a FIFO inside a read root can block until a writer appears.
//! - `https://` is not supported yet. It is refused, never downgraded to `http://`.
//! - The context only counts what passes through it; time and memory the handler
//!   spends on its own are the pipeline's to measure.
//!
//! # Limits
//! - [`MAX_HEAD_BYTES`] of response status line and headers.
//! - [`MAX_LOG_BYTES`] and [`MAX_LOG_LINES`] of logs per context; more are dropped
//!   and counted.

use crate::capability::{Grant, HeldRoot, Limits, NetRule};
use crate::sandbox::Exceeded;
use cap_std::fs::{Dir, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A tool implemented in the host: input bytes in, output bytes or an error message
/// out. Its effects are checked only when they go through the [`HostContext`].
pub type HostHandler = Arc<dyn Fn(&HostContext, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// Bytes of status line and headers read per request, interim (1xx) heads included.
/// Bounds a server that sends headers forever.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Bytes of log messages kept per context. Bounds a handler that logs in a loop.
pub const MAX_LOG_BYTES: usize = 64 << 10;

/// Log lines kept per context, so that empty messages are bounded too.
pub const MAX_LOG_LINES: usize = 4096;

/// Longest chunk-size line accepted in a chunked body (extensions included).
const MAX_CHUNK_LINE: usize = 1024;

/// The capability axis an operation uses, as the record names it: the grant's axes.
pub use crate::capability::Capability as Axis;

/// What kind of failure a [`HandlerError`] is, so the pipeline records it right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The grant does not allow it; nothing was done. Record [`HandlerError::axis`]
    /// as `denied_capability`.
    Denied,
    /// A ceiling of the grant was hit; nothing partial is returned.
    Exceeded(Exceeded),
    /// The handler asked for something malformed or not supported (an ambiguous
    /// path, a bad URL, `https://`). Nothing was done.
    Invalid,
    /// The check passed and the effect was attempted, but the file system, the
    /// network or the server failed it.
    Failed,
}

/// Why the context refused or failed an effect. Each variant names its axis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The path lies under none of the grant's roots for this axis (or it has none).
    #[error("{axis}: {path} is not under any {axis} root of the grant")]
    OutsideRoots {
        /// The axis.
        axis: Axis,
        /// The path as given.
        path: PathBuf,
    },
    /// cap-std refused to resolve the path inside its root: `..` past the root, an
    /// absolute symlink, or a symlink leading out.
    #[error("{axis}: {path} escapes root {root}")]
    Escapes {
        /// The axis.
        axis: Axis,
        /// The path as given.
        path: PathBuf,
        /// The root it was resolved in.
        root: PathBuf,
    },
    /// A relative path, with more than one root it could be relative to.
    #[error("{axis}: relative path {path} is ambiguous among {roots} roots; give an absolute path")]
    AmbiguousPath {
        /// The axis.
        axis: Axis,
        /// The path as given.
        path: PathBuf,
        /// How many roots the axis has.
        roots: usize,
    },
    /// The path names a directory or another non-regular file.
    #[error("{axis}: {path} is not a regular file")]
    NotAFile {
        /// The axis.
        axis: Axis,
        /// The path as given.
        path: PathBuf,
    },
    /// No rule of the grant allows this method, host and port.
    #[error("net.http: {method} {host} port {port} is not granted")]
    NetDenied {
        /// The method.
        method: &'static str,
        /// The host, lower case, without brackets.
        host: String,
        /// The port, explicit or default.
        port: u16,
    },
    /// The URL could not be parsed.
    #[error("net.http: url {url:?}: {what}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A scheme other than `http`.
    #[error(
        "net.http: scheme {scheme:?} is not supported: only http:// is \
         (https is not implemented yet, and is refused rather than downgraded)"
    )]
    UnsupportedScheme {
        /// The scheme as given.
        scheme: String,
    },
    /// The response body is larger than the grant's `max_output_bytes`.
    #[error(
        "net.http: response from {host} exceeds the output ceiling of {limit} bytes; \
         none of it is returned"
    )]
    OutputCeiling {
        /// The host.
        host: String,
        /// The ceiling.
        limit: u64,
    },
    /// The call's wall-clock budget ran out while connecting, sending or receiving.
    #[error("net.http: {host}: the wall-clock ceiling of {limit_ms} ms was hit")]
    WallTime {
        /// The host.
        host: String,
        /// The ceiling.
        limit_ms: u64,
    },
    /// The server's answer is not an HTTP/1.x response this client can read.
    #[error("net.http: malformed response from {host}: {what}")]
    BadResponse {
        /// The host.
        host: String,
        /// What is wrong.
        what: String,
    },
    /// The response uses a framing this client does not implement.
    #[error("net.http: response from {host} uses {what}, which is not supported")]
    UnsupportedResponse {
        /// The host.
        host: String,
        /// The feature.
        what: String,
    },
    /// An I/O failure after the check passed (or while opening a granted root).
    #[error("{axis}: {target}: {source}")]
    Io {
        /// The axis.
        axis: Axis,
        /// The path, root or address involved.
        target: String,
        /// The cause.
        source: io::Error,
    },
}

impl HandlerError {
    /// The axis involved (`fs.read`, `fs.write`, `net.http`), for the record's
    /// `denied_capability` when [`HandlerError::is_denied`].
    pub fn axis(&self) -> &'static str {
        match self {
            HandlerError::OutsideRoots { axis, .. }
            | HandlerError::Escapes { axis, .. }
            | HandlerError::AmbiguousPath { axis, .. }
            | HandlerError::NotAFile { axis, .. }
            | HandlerError::Io { axis, .. } => axis.as_str(),
            HandlerError::NetDenied { .. }
            | HandlerError::BadUrl { .. }
            | HandlerError::UnsupportedScheme { .. }
            | HandlerError::OutputCeiling { .. }
            | HandlerError::WallTime { .. }
            | HandlerError::BadResponse { .. }
            | HandlerError::UnsupportedResponse { .. } => Axis::NetHttp.as_str(),
        }
    }

    /// Refusal, ceiling, misuse or failure.
    pub fn class(&self) -> ErrorClass {
        match self {
            HandlerError::OutsideRoots { .. }
            | HandlerError::Escapes { .. }
            | HandlerError::NetDenied { .. } => ErrorClass::Denied,
            HandlerError::AmbiguousPath { .. }
            | HandlerError::NotAFile { .. }
            | HandlerError::BadUrl { .. }
            | HandlerError::UnsupportedScheme { .. } => ErrorClass::Invalid,
            HandlerError::OutputCeiling { .. } => ErrorClass::Exceeded(Exceeded::Output),
            HandlerError::WallTime { .. } => ErrorClass::Exceeded(Exceeded::WallTime),
            HandlerError::BadResponse { .. }
            | HandlerError::UnsupportedResponse { .. }
            | HandlerError::Io { .. } => ErrorClass::Failed,
        }
    }

    /// Whether the grant refused it (a capability denial, not an I/O failure).
    pub fn is_denied(&self) -> bool {
        self.class() == ErrorClass::Denied
    }
}

/// How loud a log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something looks wrong.
    Warn,
    /// Progress.
    Info,
    /// Detail.
    Debug,
}

impl LogLevel {
    /// The level's lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }
}

/// One log line a handler emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: LogLevel,
    /// Its message, whole.
    pub message: String,
}

/// The log lines a context kept, and how many it dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Logs {
    /// Kept lines, in order.
    pub lines: Vec<LogLine>,
    /// Bytes of message kept (at most [`MAX_LOG_BYTES`]).
    pub bytes: usize,
    /// Lines dropped whole because a bound was reached.
    pub dropped: u64,
}

/// A response to [`HostContext::http_get`], as the server sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpResponse {
    /// Status code; a redirect is returned as is.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked, at most `max_output_bytes`.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A granted root and the handle every path under it is resolved through.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    /// The directory the capability station opened at registration, shared.
    held: Arc<HeldRoot>,
}

impl Root {
    fn dir(&self) -> &Dir {
        self.held.dir()
    }
}

/// The checked door to effects for one call of a host handler.
///
/// Built from the grant alone: roots, net rules and ceilings are fixed at
/// construction and never grow.
#[derive(Debug)]
pub struct HostContext {
    read: Vec<Root>,
    write: Vec<Root>,
    net: Vec<NetRule>,
    limits: Limits,
    /// `None` when `max_wall_ms` is too far away for the clock to represent.
    deadline: Option<Instant>,
    logs: Mutex<Logs>,
    /// The first ceiling an effect ran into, for the pipeline's record.
    tripped: Mutex<Option<Exceeded>>,
}

fn open_roots(roots: &[Arc<HeldRoot>]) -> Vec<Root> {
    // The grant's roots were opened once, at registration; a call never resolves a
    // root's path again, so a root swapped for a symlink since is not followed.
    roots
        .iter()
        .map(|held| Root {
            path: held.path().to_owned(),
            held: held.clone(),
        })
        .collect()
}

/// Picks the root a path belongs to and the path relative to it.
fn place<'r, 'p>(
    axis: Axis,
    roots: &'r [Root],
    path: &'p Path,
) -> Result<(&'r Root, &'p Path), HandlerError> {
    if path.is_absolute() {
        // Component-wise prefix, longest root first: nested roots resolve in the
        // most specific one. `..` stays in the remainder for cap-std to judge.
        roots
            .iter()
            .filter_map(|r| path.strip_prefix(&r.path).ok().map(|rel| (r, rel)))
            .max_by_key(|(r, _)| r.path.components().count())
            .ok_or_else(|| HandlerError::OutsideRoots {
                axis,
                path: path.to_owned(),
            })
    } else {
        match roots {
            [] => Err(HandlerError::OutsideRoots {
                axis,
                path: path.to_owned(),
            }),
            [only] => Ok((only, path)),
            _ => Err(HandlerError::AmbiguousPath {
                axis,
                path: path.to_owned(),
                roots: roots.len(),
            }),
        }
    }
}

/// Classifies a cap-std open failure.
fn fs_error(axis: Axis, path: &Path, root: &Root, source: io::Error) -> HandlerError {
    // cap-std reports an escape as PermissionDenied with no OS error code; a real
    // EACCES carries one, so the two are told apart without reading the message.
    if source.kind() == io::ErrorKind::PermissionDenied && source.raw_os_error().is_none() {
        HandlerError::Escapes {
            axis,
            path: path.to_owned(),
            root: root.path.clone(),
        }
    } else {
        HandlerError::Io {
            axis,
            target: path.display().to_string(),
            source,
        }
    }
}

fn regular(
    axis: Axis,
    path: &Path,
    file: cap_std::fs::File,
) -> Result<std::fs::File, HandlerError> {
    let file = file.into_std();
    let meta = file.metadata().map_err(|source| HandlerError::Io {
        axis,
        target: path.display().to_string(),
        source,
    })?;
    if meta.is_file() {
        Ok(file)
    } else {
        Err(HandlerError::NotAFile {
            axis,
            path: path.to_owned(),
        })
    }
}

/// The parts of an `http://` URL that are checked and used.
struct Url {
    /// Lower case, brackets removed: what the rules are matched against.
    host: String,
    port: u16,
    /// The `Host` header value.
    authority: String,
    /// The request target: path and query, never empty.
    target: String,
}

fn parse_url(url: &str) -> Result<Url, HandlerError> {
    let bad = |what| HandlerError::BadUrl {
        url: url.to_owned(),
        what,
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or(bad("expected http://host[:port][/path]"))?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HandlerError::UnsupportedScheme {
            scheme: scheme.to_owned(),
        });
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // `allowed@evil` reads as one host to a person and another to a parser.
    if authority.contains('@') {
        return Err(bad("user information before the host is not supported"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (ip, after) = inner.split_once(']').ok_or(bad("unclosed '['"))?;
        ip.parse::<Ipv6Addr>()
            .map_err(|_| bad("bad IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(bad("junk after ']'"))?),
        };
        (ip, port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        if !host.bytes().all(name_byte) {
            return Err(bad("host may hold only letters, digits, '-', '.' and '_'"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&n| n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(bad("port must be a number from 1 to 65535"))?,
    };
    // The fragment is the client's business; it is never sent.
    let tail = tail.split_once('#').map_or(tail, |(t, _)| t);
    let target = match tail.as_bytes().first() {
        None => "/".to_owned(),
        Some(b'?') => format!("/{tail}"),
        Some(_) => tail.to_owned(),
    };
    // Spaces and control bytes would let the path rewrite the request line.
    if !target.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(bad(
            "path must be printable ASCII without spaces; percent-encode the rest",
        ));
    }
    let host = host.to_ascii_lowercase();
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let authority = if port == 80 {
        bracketed
    } else {
        format!("{bracketed}:{port}")
    };
    Ok(Url {
        host,
        port,
        authority,
        target,
    })
}

/// Exact host match, ignoring case; two IP literals match when they are the same
/// address however written.
fn host_matches(rule: &str, host: &str) -> bool {
    let rule = rule
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(rule);
    match (rule.parse::<IpAddr>(), host.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => rule.eq_ignore_ascii_case(host),
    }
}

/// Reads from the socket within the call's remaining wall-clock budget.
struct Timed<'c> {
    stream: TcpStream,
    ctx: &'c HostContext,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.ctx.remaining().ok_or(io::ErrorKind::TimedOut)?;
        self.stream.set_read_timeout(left)?;
        self.stream.read(buf)
    }
}

/// A response's status line and headers.
struct Head {
    status: u16,
    reason: String,
    headers: Vec<(String, String)>,
}

/// One request's response reader, with the host for error messages.
struct Exchange<'c> {
    reader: BufReader<Timed<'c>>,
    host: String,
    head_left: usize,
}

impl Exchange<'_> {
    fn bad(&self, what: impl Into<String>) -> HandlerError {
        HandlerError::BadResponse {
            host: self.host.clone(),
            what: what.into(),
        }
    }

    fn io(&self, source: io::Error) -> HandlerError {
        net_io(self.reader.get_ref().ctx, &self.host, source)
    }

    /// One line without its CRLF, charged to `budget`.
    fn line(&mut self, budget: &mut usize, what: &str) -> Result<Vec<u8>, HandlerError> {
        let mut line = Vec::new();
        let read = (&mut self.reader)
            .take(*budget as u64)
            .read_until(b'\n', &mut line);
        let n = read.map_err(|e| self.io(e))?;
        *budget -= n;
        if line.pop() != Some(b'\n') {
            return Err(if *budget == 0 {
                self.bad(format!("{what} is too long"))
            } else {
                self.bad(format!("connection closed in the {what}"))
            });
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(line)
    }

    fn head(&mut self) -> Result<Head, HandlerError> {
        let mut budget = self.head_left;
        let status_line = self.line(&mut budget, "response head")?;
        let status_line = String::from_utf8_lossy(&status_line).into_owned();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let code = parts.next().unwrap_or_default();
        let reason = parts.next().unwrap_or_default().to_owned();
        if !version.starts_with("HTTP/1.") {
            return Err(self.bad(format!("status line {status_line:?} is not HTTP/1.x")));
        }
        let status = Some(code)
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| self.bad(format!("status code {code:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.line(&mut budget, "response head")?;
            if line.is_empty() {
                break;
            }
            let line = String::from_utf8_lossy(&line);
            let (name, value) = line
                .split_once(':')
                .filter(|(n, _)| !n.is_empty() && !n.contains(char::is_whitespace))
                .ok_or_else(|| self.bad(format!("header line {line:?}")))?;
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        self.head_left = budget;
        Ok(Head {
            status,
            reason,
            headers,
        })
    }

    /// Exactly `n` bytes, appended to `body`.
    fn exact(&mut self, n: u64, body: &mut Vec<u8>) -> Result<(), HandlerError> {
        let before = body.len();
        let read = (&mut self.reader).take(n).read_to_end(body);
        read.map_err(|e| self.io(e))?;
        let got = (body.len() - before) as u64;
        if got < n {
            return Err(self.bad(format!("body ended after {got} of {n} bytes")));
        }
        Ok(())
    }

    fn chunked(&mut self, cap: u64) -> Result<Vec<u8>, HandlerError> {
        let mut body = Vec::new();
        loop {
            let mut budget = MAX_CHUNK_LINE;
            let line = self.line(&mut budget, "chunk size line")?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size).unwrap_or_default().trim();
            let size = Some(size)
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(|| self.bad(format!("chunk size {size:?}")))?;
            if size == 0 {
                // Trailers are read and dropped, within what is left of the head budget.
                let mut budget = self.head_left;
                while !self.line(&mut budget, "trailers")?.is_empty() {}
                return Ok(body);
            }
            if body.len() as u64 + size > cap {
                return Err(self.ceiling(cap));
            }
            self.exact(size, &mut body)?;
            if !self.line(&mut 2, "chunk end")?.is_empty() {
                return Err(self.bad("chunk data is longer than its size"));
            }
        }
    }

    fn ceiling(&self, limit: u64) -> HandlerError {
        HandlerError::OutputCeiling {
            host: self.host.clone(),
            limit,
        }
    }
}

/// Maps a socket error: a timeout can only be the call's budget running out, since
/// every timeout set here is what is left of it.
fn net_io(ctx: &HostContext, host: &str, source: io::Error) -> HandlerError {
    if matches!(
        source.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    ) {
        HandlerError::WallTime {
            host: host.to_owned(),
            limit_ms: ctx.limits.max_wall_ms,
        }
    } else {
        HandlerError::Io {
            axis: Axis::NetHttp,
            target: host.to_owned(),
            source,
        }
    }
}

impl HostContext {
    /// Builds the context for one call from `grant` alone, over the root directories
    /// the grant holds open (none is opened, or looked up by path, here). The
    /// wall-clock budget starts now.
    ///
    /// # Errors
    /// None at present: the roots were opened at registration, and a removed one was
    /// refused when the grant was minted. The `Result` stays for contexts that will
    /// acquire something per call.
    pub fn new(grant: &Grant) -> Result<HostContext, HandlerError> {
        let limits = grant.limits();
        Ok(HostContext {
            read: open_roots(grant.read_roots()),
            write: open_roots(grant.write_roots()),
            net: grant.net().to_vec(),
            limits,
            deadline: Instant::now().checked_add(Duration::from_millis(limits.max_wall_ms)),
            logs: Mutex::new(Logs::default()),
            tripped: Mutex::new(None),
        })
    }

    /// The grant's ceilings.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Time left of the call's budget: `Some(None)` when unbounded, `None` when spent.
    fn remaining(&self) -> Option<Option<Duration>> {
        match self.deadline {
            None => Some(None),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                (!left.is_zero()).then_some(Some(left))
            }
        }
    }

    /// Opens a file for reading, under one of the grant's `fs_read` roots.
    ///
    /// `path` is either absolute and under a read root (matched against the canonical
    /// roots component by component, without resolving `path` first), or relative to
    /// the single read root. Everything after the root is resolved by cap-std inside
    /// that root. Write roots are not readable unless the grant lists them in
    /// `fs_read` too.
    ///
    /// # Errors
    /// [`HandlerError::OutsideRoots`] or [`HandlerError::Escapes`] (denied),
    /// [`HandlerError::AmbiguousPath`] for a relative path with several read roots,
    /// [`HandlerError::NotAFile`], or [`HandlerError::Io`].
    pub fn open_read(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        let axis = Axis::FsRead;
        let (root, rel) = place(axis, &self.read, path)?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let file = root
            .dir()
            .open(rel)
            .map_err(|e| fs_error(axis, path, root, e))?;
        regular(axis, path, file)
    }

    /// Opens a file for appending, creating it if absent, under one of the grant's
    /// `fs_write` roots. Paths are placed as in [`HostContext::open_read`], against
    /// the write roots. The file is opened write-only, in append mode: existing bytes
    /// cannot be overwritten or read through it.
    ///
    /// # Errors
    /// As [`HostContext::open_read`], on the `fs.write` axis.
    pub fn open_write_append(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        let axis = Axis::FsWrite;
        let (root, rel) = place(axis, &self.write, path)?;
        let file = root
            .dir()
            .open_with(rel, OpenOptions::new().append(true).create(true))
            .map_err(|e| fs_error(axis, path, root, e))?;
        regular(axis, path, file)
    }

    /// Fetches an `http://` URL with one GET, if a rule of the grant allows the host
    /// (exact, any case), the port (explicit or 80) and `GET`.
    ///
    /// The check runs before any DNS lookup or connection. The name is then resolved
    /// once and the connection goes to one of those addresses. The request is
    /// HTTP/1.1 with `Host` and `Connection: close`; the response body is read up to
    /// `max_output_bytes`, framed by `Content-Length`, chunked encoding, or the close
    /// of the connection. Redirects are returned, not followed.
    ///
    /// # Errors
    /// [`HandlerError::NetDenied`] (denied); [`HandlerError::UnsupportedScheme`] for
    /// `https://` and anything else not `http://`; [`HandlerError::BadUrl`];
    /// [`HandlerError::OutputCeiling`] for a body over the ceiling;
    /// [`HandlerError::WallTime`] when the budget runs out;
    /// [`HandlerError::BadResponse`], [`HandlerError::UnsupportedResponse`] or
    /// [`HandlerError::Io`] when the server or the network fails.
    pub fn http_get(&self, url: &str) -> Result<HttpResponse, HandlerError> {
        let result = self.get(url);
        if let Err(e) = &result
            && let ErrorClass::Exceeded(kind) = e.class()
        {
            self.tripped
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(kind);
        }
        result
    }

    /// The first ceiling an effect through this context ran into, if any: the pipeline
    /// records a handler that failed after one as stopped by that ceiling.
    pub fn tripped(&self) -> Option<Exceeded> {
        *self.tripped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, url: &str) -> Result<HttpResponse, HandlerError> {
        const METHOD: &str = "GET";
        let url = parse_url(url)?;
        let allowed = self.net.iter().any(|rule| {
            host_matches(&rule.host, &url.host)
                && rule.ports.contains(&url.port)
                && rule.methods.iter().any(|m| m == METHOD)
        });
        if !allowed {
            return Err(HandlerError::NetDenied {
                method: METHOD,
                host: url.host,
                port: url.port,
            });
        }
        let mut stream = self.connect(&url)?;
        let fail = |e| net_io(self, &url.host, e);
        let request = format!(
            "{METHOD} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Accept-Encoding: identity\r\nUser-Agent: aegis\r\n\r\n",
            url.target, url.authority
        );
        let left = self
            .remaining()
            .ok_or_else(|| fail(io::ErrorKind::TimedOut.into()))?;
        stream.set_write_timeout(left).map_err(fail)?;
        stream.write_all(request.as_bytes()).map_err(fail)?;
        self.response(stream, url.host)
    }

    /// Resolves the checked host once and connects to one of its addresses.
    fn connect(&self, url: &Url) -> Result<TcpStream, HandlerError> {
        let fail = |e| net_io(self, &url.host, e);
        // An IP literal is used as is: no lookup at all.
        let addrs: Vec<SocketAddr> = match url.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, url.port)],
            Err(_) => (url.host.as_str(), url.port)
                .to_socket_addrs()
                .map_err(fail)?
                .collect(),
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for addr in addrs {
            let left = self
                .remaining()
                .ok_or_else(|| fail(io::ErrorKind::TimedOut.into()))?;
            let attempt = match left {
                Some(t) => TcpStream::connect_timeout(&addr, t),
                None => TcpStream::connect(addr),
            };
            match attempt {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(fail(last))
    }

    fn response(&self, stream: TcpStream, host: String) -> Result<HttpResponse, HandlerError> {
        let cap = self.limits.max_output_bytes;
        let mut ex = Exchange {
            reader: BufReader::new(Timed { stream, ctx: self }),
            host,
            head_left: MAX_HEAD_BYTES,
        };
        let Head {
            status,
            reason,
            headers,
        } = loop {
            let head = ex.head()?;
            match head.status {
                101 => return Err(ex.bad("101 switching protocols was not asked for")),
                // Interim responses precede the real one.
                100..=199 => continue,
                _ => break head,
            }
        };
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else if let Some(te) = header(&headers, "transfer-encoding") {
            if !te.eq_ignore_ascii_case("chunked") {
                return Err(HandlerError::UnsupportedResponse {
                    host: ex.host,
                    what: format!("transfer-encoding {te:?}"),
                });
            }
            ex.chunked(cap)?
        } else if let Some(length) = content_length(&headers).map_err(|w| ex.bad(w))? {
            if length > cap {
                return Err(ex.ceiling(cap));
            }
            let mut body = Vec::new();
            ex.exact(length, &mut body)?;
            body
        } else {
            // Framed by the close; one byte past the ceiling tells "at" from "over".
            let mut body = Vec::new();
            let read = (&mut ex.reader)
                .take(cap.saturating_add(1))
                .read_to_end(&mut body);
            read.map_err(|e| ex.io(e))?;
            if body.len() as u64 > cap {
                return Err(ex.ceiling(cap));
            }
            body
        };
        Ok(HttpResponse {
            status,
            reason,
            headers,
            body,
        })
    }

    /// Keeps a log line for the pipeline to report. A line that would pass
    /// [`MAX_LOG_BYTES`] or [`MAX_LOG_LINES`] is dropped whole and counted, never cut.
    pub fn log_emit(&self, level: LogLevel, message: &str) {
        let mut logs = self.logs.lock().unwrap_or_else(PoisonError::into_inner);
        if logs.lines.len() >= MAX_LOG_LINES || logs.bytes + message.len() > MAX_LOG_BYTES {
            logs.dropped += 1;
            return;
        }
        logs.bytes += message.len();
        logs.lines.push(LogLine {
            level,
            message: message.to_owned(),
        });
    }

    /// The log lines kept so far, and how many were dropped.
    pub fn logs(&self) -> Logs {
        self.logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The body length a response declares, if any; copies that disagree are an error.
fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, String> {
    let mut found = None;
    for (_, v) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        let n = Some(v.as_str())
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("content-length {v:?}"))?;
        if found.is_some_and(|f| f != n) {
            return Err("content-length headers disagree".to_owned());
        }
        found = Some(n);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_strictly() {
        let u = parse_url("http://Example.TEST:8080/a/b?q=1#frag").unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.authority.as_str(),
                u.target.as_str()
            ),
            ("example.test", 8080, "example.test:8080", "/a/b?q=1")
        );
        let u = parse_url("http://[::1]?x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("::1", 80, "/?x")
        );
        assert_eq!(u.authority, "[::1]");
        for bad in [
            "http://allowed.test@evil.test/",
            "http://host:0/",
            "http://host:65536/",
            "http://host:+80/",
            "http:///path",
            "http://host/a b",
            "http://host/a\r\nX: y",
            "http://ho%73t/",
            "host/path",
        ] {
            assert!(
                matches!(parse_url(bad), Err(HandlerError::BadUrl { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_url("HTTPS://host/"),
            Err(HandlerError::UnsupportedScheme { .. })
        ));
    }

    #[test]
    fn hosts_match_exactly() {
        assert!(host_matches("api.example.test", "API.example.test"));
        assert!(host_matches("[::1]", "::1"));
        assert!(host_matches("0:0:0:0:0:0:0:1", "::1"));
        assert!(!host_matches("example.test", "sub.example.test"));
        assert!(!host_matches("example.test", "example.test."));
        assert!(!host_matches("127.0.0.1", "localhost"));
    }

    #[test]
    fn content_length_must_agree() {
        let h = |v: &[&str]| -> Vec<(String, String)> {
            v.iter()
                .map(|v| ("Content-Length".to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(content_length(&h(&[])), Ok(None));
        assert_eq!(content_length(&h(&["5", "5"])), Ok(Some(5)));
        assert!(content_length(&h(&["5", "6"])).is_err());
        assert!(content_length(&h(&["-1"])).is_err());
        assert!(content_length(&h(&["+5"])).is_err());
    }
}
