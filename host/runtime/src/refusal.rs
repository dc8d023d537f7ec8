//! A refused or stopped call as the front ends state it: the type and its wire format
//! are [`aegis_record::refusal`] (the relay core renders them without the runtime);
//! here, what a recorded call says about it.

pub use aegis_record::refusal::{Cause, META_KEY, Refusal, Station};

use crate::pipeline::CallRecord;
use aegis_record::line::{CapabilityOutcome, ExecutionOutcome};

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
            ExecutionOutcome::ResourceExceeded { kind } => match ceiling_of(record) {
                Some(value) => {
                    format!("stopped by the {kind} ceiling of {value}; no output returned")
                }
                None => format!("stopped by the {kind} ceiling; no output returned"),
            },
            ExecutionOutcome::HostDenied { reason } => format!("not run: {reason}"),
        });
    Refusal::new(cause_of(record), reason).recorded(record.outcome.call_id.clone())
}

/// The ceiling that stopped a call, with its unit (`2000 ms`), from the grant it ran
/// under; `None` when the call was not stopped by one.
pub fn ceiling_of(record: &CallRecord) -> Option<String> {
    let ExecutionOutcome::ResourceExceeded { kind } = &record.outcome.execution else {
        return None;
    };
    let CapabilityOutcome::Granted { grant } = &record.outcome.capability else {
        return None;
    };
    match kind.as_str() {
        "memory" => Some(format!("{} bytes", grant.max_memory_bytes.get())),
        "wall_time" => Some(format!("{} ms", grant.max_wall_ms.get())),
        "output" => Some(format!("{} bytes", grant.max_output_bytes.get())),
        _ => None,
    }
}
