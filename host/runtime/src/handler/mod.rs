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
//! - **Recorded as what stopped it.** The context keeps its own account of the first
//!   effect it refused or cut off ([`HostContext::stopped`]); a handler that then
//!   fails is recorded by [`execute`] as refused on that axis (`host_denied`, reason
//!   `fs.read: …`) or as `resource_exceeded`, whatever error it returned, so a
//!   handler can neither invent a refusal nor reword one into a plain failure. Output
//!   and the handler's own error words meet the output ceiling by the sandbox's rule,
//!   in the same function.
//!
//! The module holds one file per job: `context` (the grant's roots, rules, ceilings
//! and the account of stops), `files`, `http`, `log`, and `error`.
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

mod context;
mod error;
mod files;
mod http;
mod log;

use aegis_record::refusal::Cause;
use context::Root;
pub use context::{HostContext, Stop};
pub use error::{ErrorClass, HandlerError, HandlerFailure};
pub use http::HttpResponse;
pub use log::{LogLevel, LogLine, Logs};

use crate::capability::Grant;
use crate::pipeline::Executed;
use crate::sandbox::{Ending, ceiling_hit};
use std::sync::Arc;
use std::time::Instant;

/// The capability axis an operation uses, as the record names it: the grant's axes.
pub use crate::capability::Capability as Axis;

/// A tool implemented in the host: input bytes in, output bytes or a typed failure
/// out. Its effects are checked only when they go through the [`HostContext`].
pub type HostHandler =
    Arc<dyn Fn(&HostContext, &[u8]) -> Result<Vec<u8>, HandlerFailure> + Send + Sync>;

/// Bytes of status line and headers read per request, interim (1xx) heads included.
/// Bounds a server that sends headers forever.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Bytes of log messages kept per context. Bounds a handler that logs in a loop.
pub const MAX_LOG_BYTES: usize = 64 << 10;

/// Log lines kept per context, so that empty messages are bounded too.
pub const MAX_LOG_LINES: usize = 4096;

/// Longest chunk-size line accepted in a chunked body (extensions included).
const MAX_CHUNK_LINE: usize = 1024;

/// Runs a host tool's `handler` (or finds none) for one granted call, and says how it
/// ended in the pipeline's terms.
///
/// - Output passes the grant's output ceiling by the sandbox's rule
///   (`sandbox::ceiling_hit`): over it, or after a ceiling tripped in the context, the call
///   is `resource_exceeded` and nothing is handed back.
/// - A handler that fails after its context stopped an effect is recorded as stopped
///   by that effect, whatever it returned: the first refusal is
///   [`Executed::Refused`] (its reason led by the axis), the first ceiling
///   `resource_exceeded`. A refusal the handler recovers from is not recorded: the
///   refused effect did not happen.
/// - Any other failure is a trap, `handler error: …`, its message held to the output
///   ceiling when it is the handler's own words.
///
/// A panic is not caught here; the pipeline catches it around every execution.
pub fn execute(handler: Option<&HostHandler>, grant: &Grant, input: &[u8]) -> Executed {
    let Some(handler) = handler else {
        return Executed::NotStarted {
            cause: Cause::NotStarted,
            reason: format!(
                "no handler is registered for host tool {:?}",
                grant.tool_id()
            ),
        };
    };
    let context = match HostContext::new(grant) {
        Ok(c) => c,
        Err(e) => {
            return Executed::NotStarted {
                cause: Cause::NotStarted,
                reason: format!("the handler context could not be built: {e}"),
            };
        }
    };
    let limits = context.limits();
    let started = Instant::now();
    let result = handler(&context, input);
    let wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let ran = |ending, output| Executed::Ran {
        ending,
        output,
        wall_ms,
        peak_memory_bytes: 0,
        stderr: Vec::new(),
    };
    match result {
        Ok(output) => match ceiling_hit(&limits, output.len(), context.tripped()) {
            Some(kind) => ran(Ending::Exceeded(kind), None),
            None => ran(Ending::Success, Some(output)),
        },
        Err(failure) => match context.stopped() {
            Some(Stop::Refused { axis, reason }) => Executed::Refused {
                axis,
                reason,
                wall_ms,
            },
            Some(Stop::Exceeded(kind)) => ran(Ending::Exceeded(kind), None),
            None => {
                let own = match &failure {
                    HandlerFailure::Failed(message) => message.len(),
                    // The context's words, not the tool's.
                    HandlerFailure::Effect(_) => 0,
                };
                match ceiling_hit(&limits, own, None) {
                    Some(kind) => ran(Ending::Exceeded(kind), None),
                    None => Executed::Failed {
                        message: format!("handler error: {failure}"),
                    },
                }
            }
        },
    }
}
