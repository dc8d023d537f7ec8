//! Test support shared by the integration tests of this crate.
#![allow(dead_code, reason = "each test binary uses a different part")]

pub mod vectors;

use std::path::PathBuf;

/// The repository's `spec/vectors` directory.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

/// An intent line for `call` on `tool`, its request digest taken over the call id.
pub fn intent_for(call: &str, tool: &str) -> aegis_record::IntentLine {
    aegis_record::IntentLine {
        call_id: call.into(),
        tool_id: tool.into(),
        request_digest: aegis_record::RequestDigest::of_request(call.as_bytes()),
    }
}

/// An outcome for a call that never ran: allowed by policy, refused by capability.
pub fn unrun_outcome(call: &str, tool: &str) -> aegis_record::OutcomeLine {
    use aegis_record::*;
    OutcomeLine {
        stop: None,
        call_id: call.into(),
        tool_id: tool.into(),
        request_digest: RequestDigest::of_request(call.as_bytes()),
        policy_set_hash: PolicySetHash::of_canonical_set(b"{}"),
        policy: PolicyOutcome::Allowed,
        capability: CapabilityOutcome::Denied {
            reason: "no manifest".into(),
            denied_capability: Some("tool.registry".into()),
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
