//! How a context effect, or a handler, fails: typed, with its axis and its class.

use super::Axis;
use crate::sandbox::Exceeded;
use std::io;
use std::path::PathBuf;

/// What kind of failure a [`HandlerError`] is, so the pipeline records it right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The grant does not allow it; nothing was done. A handler that fails after
    /// one is recorded as `host_denied`, its reason led by [`HandlerError::axis`].
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
        self.axis_typed().as_str()
    }

    /// The axis involved, typed.
    pub(crate) fn axis_typed(&self) -> Axis {
        match self {
            HandlerError::OutsideRoots { axis, .. }
            | HandlerError::Escapes { axis, .. }
            | HandlerError::AmbiguousPath { axis, .. }
            | HandlerError::NotAFile { axis, .. }
            | HandlerError::Io { axis, .. } => *axis,
            HandlerError::NetDenied { .. }
            | HandlerError::BadUrl { .. }
            | HandlerError::UnsupportedScheme { .. }
            | HandlerError::OutputCeiling { .. }
            | HandlerError::WallTime { .. }
            | HandlerError::BadResponse { .. }
            | HandlerError::UnsupportedResponse { .. } => Axis::NetHttp,
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

/// How a host handler failed: what it returns instead of output.
///
/// `?` on any [`HostContext`](super::HostContext) method gives [`HandlerFailure::Effect`];
/// a `String` or `&str` converts to [`HandlerFailure::Failed`]. Which one the handler
/// returns does not decide how the call is recorded as refused or exceeded: that is
/// the context's own account ([`HostContext::stopped`](super::HostContext::stopped)),
/// so a handler cannot claim a refusal it was not given, nor hide one by rewording it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerFailure {
    /// An effect through the context was refused or failed.
    #[error(transparent)]
    Effect(#[from] HandlerError),
    /// The handler's own failure, in its own words. Those words come from the tool,
    /// so the grant's output ceiling holds them as it holds output.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for HandlerFailure {
    fn from(message: String) -> HandlerFailure {
        HandlerFailure::Failed(message)
    }
}

impl From<&str> for HandlerFailure {
    fn from(message: &str) -> HandlerFailure {
        HandlerFailure::Failed(message.to_owned())
    }
}
