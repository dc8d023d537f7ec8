//! Record lines a test writes to make a record of its own, as a host would, and the
//! file they go to as they are written.

use aegis_record::chain::LineSink;
use aegis_record::{
    CapabilityOutcome, DecisionAxes, ExecutionOutcome, IntentLine, OutcomeLine, PolicyOutcome,
    PolicySetHash, RequestDigest,
};

/// The chain writer's lines appended to a file as they are written, as a host's audit
/// sink appends them (with no flush: the tests read the same machine's page cache).
pub struct AppendFile(std::fs::File);

impl AppendFile {
    /// Appends to `path`, creating it if need be.
    ///
    /// # Panics
    /// When the file cannot be opened.
    pub fn at(path: &std::path::Path) -> std::sync::Arc<AppendFile> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::sync::Arc::new(AppendFile(file))
    }
}

impl LineSink for AppendFile {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        (&self.0).write_all(line)
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}

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
