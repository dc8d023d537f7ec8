//! How a call ended, read from its outcome line alone: one class per refusal path, the
//! words every reader of a record (`aegis run`, `aegis log`, the console) sorts calls by.

use crate::line::{ExecutionOutcome, OutcomeLine};
use crate::refusal::{Cause, Station};

/// How a call ended, derived from its outcome line: one class per refusal path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallClass {
    /// It ran and its output was handed back.
    Success,
    /// A policy rule refused it.
    PolicyDenied,
    /// A rate limit refused it.
    RateLimited,
    /// It was parked for approval and refused for now.
    PendingApproval,
    /// No grant: the capability station refused it.
    CapabilityDenied,
    /// It trapped, failed, or the host panicked while running it.
    Trap,
    /// A ceiling stopped it.
    ResourceExceeded,
    /// The host did not run it (it could not start the tool, or the call was
    /// abandoned), or a host handler's context refused an effect outside the grant; or
    /// the call stopped before any station decided (see [`OutcomeLine::stopped_before_the_stations`]):
    /// the caller refused it itself, as the MCP relay does a call to an unknown tool.
    HostDenied,
}

impl CallClass {
    /// The class an outcome line states: by what stopped it
    /// ([`OutcomeLine::stopped`]: the line's `stop`, or on an older line what its
    /// reasons state), else by the tool's own ending. A call no station decided is
    /// [`CallClass::HostDenied`], never a policy denial: no policy was asked.
    pub fn of(outcome: &OutcomeLine) -> CallClass {
        let Some(stop) = outcome.stopped() else {
            return match &outcome.execution {
                ExecutionOutcome::Success => CallClass::Success,
                ExecutionOutcome::Trap { .. } => CallClass::Trap,
                ExecutionOutcome::ResourceExceeded { .. } => CallClass::ResourceExceeded,
                ExecutionOutcome::HostDenied { .. } => CallClass::HostDenied,
            };
        };
        match stop.cause {
            Cause::Denied | Cause::StationFailed => CallClass::PolicyDenied,
            Cause::RateLimited => CallClass::RateLimited,
            Cause::PendingApproval => CallClass::PendingApproval,
            cause if cause.station() == Station::Capability => CallClass::CapabilityDenied,
            _ => CallClass::HostDenied,
        }
    }
}
