//! The approvals queue in the audit store, when the store keeps one
//! ([`AuditSink::approval_file`](aegis_station_api::AuditSink) and the methods after it):
//! the sink across the plugin boundary as an [`aegis_approvals::Store`].

use aegis_approvals::{Queue, QueueError, Store, Stored};
use aegis_station_api::abi_stable::std_types::RResult;
use aegis_station_api::{AuditSinkBox, ErrorKind, PluginError, StoredApproval};
use std::sync::Arc;
use std::time::Duration;

/// The queue `sink` keeps; `None` when it keeps none (it answers UNSUPPORTED).
///
/// # Errors
/// [`QueueError::Store`] when the sink fails to say (a store unreachable): never read
/// as "no queue", which would send parks where no approver of the store looks.
pub fn store_queue(sink: &Arc<AuditSinkBox>) -> Result<Option<Queue>, QueueError> {
    let store = SinkQueue {
        sink: Arc::clone(sink),
        location: format!("{} approvals", sink.location()),
    };
    match store.sink.approval_list(0).into_result() {
        Ok(_) => Ok(Some(Queue::in_store(Arc::new(store)))),
        Err(e) if e.kind == ErrorKind::UNSUPPORTED => Ok(None),
        Err(e) => Err(QueueError::Store {
            location: store.location,
            message: e.message.to_string(),
        }),
    }
}

/// An audit sink's approvals queue.
struct SinkQueue {
    sink: Arc<AuditSinkBox>,
    location: String,
}

impl std::fmt::Debug for SinkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkQueue")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// The sink's answer, its error as its message.
fn answer<T>(r: RResult<T, PluginError>) -> Result<T, String> {
    r.into_result().map_err(|e| e.message.to_string())
}

fn stored(a: StoredApproval) -> Stored {
    Stored {
        id: a.id.into_string(),
        request: a.request.into_vec(),
        decision: a.decision.into_option().map(|d| d.into_vec()),
        used: a.used,
    }
}

impl Store for SinkQueue {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn file(&self, id: &str, request: &[u8]) -> Result<bool, String> {
        answer(self.sink.approval_file(id.into(), request.into()))
    }

    fn read(&self, id: &str) -> Result<Option<Stored>, String> {
        answer(self.sink.approval_read(id.into())).map(|a| a.into_option().map(stored))
    }

    fn list(&self, max: usize) -> Result<Vec<Stored>, String> {
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let rows = answer(self.sink.approval_list(max))?;
        // A store answering more than asked would make the cap meaningless.
        if rows.len() > max as usize {
            return Err(format!(
                "the store listed {} requests when asked for at most {max}",
                rows.len()
            ));
        }
        Ok(rows.into_iter().map(stored).collect())
    }

    fn decide(&self, id: &str, decision: &[u8]) -> Result<bool, String> {
        answer(self.sink.approval_decide(id.into(), decision.into()))
    }

    fn claim(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        answer(self.sink.approval_claim(id.into())).map(|d| d.into_option().map(|d| d.into_vec()))
    }

    fn wait(&self, id: &str, timeout: Duration) -> Result<bool, String> {
        // Rounded up: a wait of under a millisecond still waits, never spins.
        let ms = u64::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
        answer(self.sink.approval_wait(id.into(), ms))
    }

    fn remove(&self, id: &str) -> Result<(), String> {
        answer(self.sink.approval_remove(id.into()))
    }
}
