//! A refused or stopped call as the front ends state it: the type and its wire format
//! are [`aegis_record::refusal`] (the relay core renders them without the runtime);
//! here, what a recorded call says about it.

pub use aegis_record::refusal::{META_KEY, Refusal, Station};

use crate::pipeline::{CallClass, CallRecord, stopped_before_the_stations};
use aegis_record::line::ExecutionOutcome;

/// The station that ended a recorded call: the host when no station was asked, else
/// the station whose verdict the outcome states.
pub fn station_of(record: &CallRecord) -> Station {
    if stopped_before_the_stations(&record.outcome) {
        return Station::Host;
    }
    match record.class() {
        CallClass::PolicyDenied | CallClass::RateLimited | CallClass::PendingApproval => {
            Station::Policy
        }
        CallClass::CapabilityDenied => Station::Capability,
        CallClass::Success
        | CallClass::Trap
        | CallClass::ResourceExceeded
        | CallClass::HostDenied => Station::Sandbox,
    }
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
    Refusal::new(station_of(record), reason).recorded(record.outcome.call_id.clone())
}
