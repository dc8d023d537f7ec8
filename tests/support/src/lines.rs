//! Record lines a test writes to make a record of its own, as a host would.

use aegis_record::{
    CapabilityOutcome, DecisionAxes, ExecutionOutcome, IntentLine, OutcomeLine, PolicyOutcome,
    PolicySetHash, RequestDigest,
};

/// The intent of call `call` to `tool`, its request digest over the call id.
pub fn intent(call: &str, tool: &str) -> IntentLine {
    IntentLine {
        call_id: call.into(),
        tool_id: tool.into(),
        request_digest: RequestDigest::of_request(call.as_bytes()),
    }
}

/// The outcome of call `call` to `tool`, refused by the policy with `reason`.
pub fn policy_denied(call: &str, tool: &str, reason: &str) -> OutcomeLine {
    OutcomeLine {
        stop: None,
        call_id: call.into(),
        tool_id: tool.into(),
        request_digest: RequestDigest::of_request(call.as_bytes()),
        policy_set_hash: PolicySetHash::of_canonical_set(b"{}"),
        policy: PolicyOutcome::Denied {
            reason: reason.into(),
        },
        capability: CapabilityOutcome::Denied {
            reason: "policy refused before capability".into(),
            denied_capability: None,
        },
        execution: ExecutionOutcome::HostDenied {
            reason: "not executed".into(),
        },
        grant_id: None,
        response_digest: None,
        wall_ms: None,
        peak_memory_bytes: None,
        decision_axes: DecisionAxes::default(),
    }
}
