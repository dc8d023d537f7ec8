//! A refused or stopped call as the front ends state it: the type and its wire format
//! are [`aegis_record::refusal`] (the relay core renders them without the runtime);
//! here, what a recorded call says about it.

pub use aegis_record::refusal::{Cause, META_KEY, Refusal, Station};

use crate::pipeline::CallRecord;
use aegis_record::line::ExecutionOutcome;

/// What ended a recorded call: the cause its outcome states
/// ([`aegis_record::line::OutcomeLine::stopped`]), or for a tool that ran, its ending.
pub fn cause_of(record: &CallRecord) -> Cause {
    if let Some(stop) = record.outcome.stopped() {
        return stop.cause;
    }
    match &record.outcome.execution {
        ExecutionOutcome::Success => Cause::NoOutput,
        ExecutionOutcome::ResourceExceeded { .. } => Cause::Exceeded,
        ExecutionOutcome::Trap { .. } | ExecutionOutcome::HostDenied { .. } => Cause::Trapped,
    }
}

/// The station that ended a recorded call: the host when no station was asked, else
/// the station whose verdict the outcome states.
pub fn station_of(record: &CallRecord) -> Station {
    cause_of(record).station()
}

/// What stopped a recorded call that returned no output, in the station's words
/// ([`CallRecord::station_refusal`]), or what happened when it ran; placed on the
/// record by its call id.
pub fn refusal_of(record: &CallRecord) -> Refusal {
    let reason = record
        .station_refusal()
        .unwrap_or_else(|| match &record.outcome.execution {
            ExecutionOutcome::Success => "it ran, and returned no output".into(),
            ExecutionOutcome::Trap { message } => format!("trapped: {message}"),
            ExecutionOutcome::ResourceExceeded { kind } => {
                format!("stopped by the {kind} ceiling; no output returned")
            }
            ExecutionOutcome::HostDenied { reason } => format!("not run: {reason}"),
        });
    Refusal::new(cause_of(record), reason).recorded(record.outcome.call_id.clone())
}
