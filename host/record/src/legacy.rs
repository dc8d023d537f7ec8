//! What an outcome line written before the `stop` member (document version 1.2) says
//! stopped its call, read from the reasons this host wrote then. This is the one place
//! that reads a reason's words; every reader asks [`OutcomeLine::stopped`], which
//! prefers the line's own tokens. spec/SPEC.md §6.3 ("Reading lines without `stop`")
//! lists the same mapping.
//!
//! The station comes back exactly; the cause is the nearest this version has where the
//! old words did not tell two apart (a relay refusal is `unreadable_request` whether it
//! was an ambiguous frame or a reused id).

use crate::line::{CapabilityOutcome, ExecutionOutcome, OutcomeLine, PolicyOutcome, Stop};
use crate::refusal::Cause;

/// What the pipeline wrote for a station the call never reached.
const NOT_REACHED: &str = "not reached: the call stopped before this station";
/// What it wrote for a call dropped unfinished.
const ABANDONED: &str = "call abandoned before completion";
/// The grant axes a policy refusal named as its reason's prefix (`fs.write: …`).
const AXES: [&str; 3] = ["fs.read", "fs.write", "net.http"];

/// The stop a line without the member states; `None` unless its execution is
/// `host_denied` (the only ending that says the host did not run the tool).
pub fn stop_of(outcome: &OutcomeLine) -> Option<Stop> {
    let ExecutionOutcome::HostDenied { reason: why } = &outcome.execution else {
        return None;
    };
    let not_reached = matches!(&outcome.policy, PolicyOutcome::Denied { reason } if reason == NOT_REACHED)
        && matches!(&outcome.capability, CapabilityOutcome::Denied { reason, .. } if reason == NOT_REACHED);
    if not_reached {
        return Some(Stop::new(before_the_stations(why)));
    }
    match (&outcome.policy, &outcome.capability) {
        (PolicyOutcome::Denied { reason }, _) if station_failed(reason) => {
            Some(Stop::new(Cause::StationFailed))
        }
        (PolicyOutcome::Denied { reason }, _) => Some(about(Cause::Denied, reason)),
        (PolicyOutcome::RateLimited { reason }, _) => Some(about(Cause::RateLimited, reason)),
        (PolicyOutcome::PendingApproval { .. }, _) => Some(Stop::new(Cause::PendingApproval)),
        (
            _,
            CapabilityOutcome::Denied {
                denied_capability, ..
            },
        ) => Some(match denied_capability.as_deref() {
            Some("tool.registry") => Stop::new(Cause::Unregistered),
            Some(axis) => Stop::about(Cause::Undeclared, axis),
            None => Stop::new(Cause::Undeclared),
        }),
        // Allowed and granted, and still not run.
        _ if why == ABANDONED => Some(Stop::new(Cause::Abandoned)),
        _ if why.starts_with("the policy sets ceilings") => {
            Some(Stop::new(Cause::UnenforceableLimits))
        }
        // A handler that started and was refused an effect: its time is recorded.
        _ if outcome.wall_ms.is_some() => Some(about(Cause::EffectRefused, why)),
        _ => Some(Stop::new(Cause::NotStarted)),
    }
}

/// The cause of a call no station decided, by the execution's reason.
fn before_the_stations(why: &str) -> Cause {
    if why.starts_with("the call's arguments cannot be read one way only") {
        Cause::AmbiguousArguments
    } else if why.starts_with("refused by the relay (pins)") {
        Cause::PinMismatch
    } else if why.starts_with("refused by the relay") {
        Cause::UnreadableRequest
    } else if why.starts_with("refused by the gateway: at capacity") {
        Cause::AtCapacity
    } else if why.starts_with("refused by the gateway") {
        Cause::InvalidArguments
    } else {
        Cause::AbandonedBeforeStations
    }
}

/// Whether a policy refusal is one the host wrote when the station did not answer a
/// verdict it could read.
fn station_failed(reason: &str) -> bool {
    reason.starts_with("the policy station ")
        || reason.starts_with("pending_approval without an approval id")
}

/// `cause`, about the grant axis `reason` opens with, if it opens with one.
fn about(cause: Cause, reason: &str) -> Stop {
    let axis = AXES.into_iter().find(|axis| {
        reason
            .strip_prefix(axis)
            .is_some_and(|rest| rest.starts_with(": "))
    });
    Stop {
        cause,
        axis: axis.map(str::to_owned),
    }
}
