//! The [`Gate`] over the Aegis runtime: each relayed `tools/call` goes through the
//! profile's pipeline (policy, capability, a durable intent) before the server sees it,
//! and its end becomes the call's outcome. Built with the `runtime` feature (default).
//!
//! A wrapped server's tools reach the capability station as relayed tools
//! ([`ToolKind::Relayed`](aegis_runtime::capability::ToolKind)): the registry from
//! [`tool_registry`] grants any tool the relay lets through (the relay refuses a tool the
//! server never listed) a grant with no roots or destinations, whose id starts
//! `relayed-`. The host never runs it; the policy still decides each call by the tool's
//! listed name.
//!
//! # Guarantees
//! - A call is forwarded only once its intent is durable and the policy and capability
//!   stations allowed it with no ceilings: a policy that sets limits on a relayed tool is
//!   refused (fail closed), since nothing here could hold the server to them. (`aegis
//!   wrap` refuses a YAML policy with such a rule at start, naming its line; other
//!   stations' ceilings are met here, call by call.)
//! - Every call the relay refused itself is recorded too (an intent, then an outcome
//!   naming the relay's reason).
//!
//! # Non-guarantees
//! - A record write that fails is said as a [`Notice::Error`] and remembered
//!   ([`RecordHealth`]); the relay goes on. The caller decides what that means for its
//!   exit (the CLI exits 17).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aegis_record::ToolChangeLine;
use aegis_record::approval::ClientMechanism;
use aegis_record::json::MAX_SAFE_INTEGER;
use aegis_runtime::approvals::{Desk, Ticket};
use aegis_runtime::capability::{Limits, ToolRegistry};
use aegis_runtime::pipeline::{Approval, CallRequest};
use aegis_runtime::{CallRecord, Ending, Executed, OwnedCall, Pipeline};

use crate::relay::{CallEnd, Cause, Gate, Opened, Refusal, RefusedCall, Settled, ToolCall, Waiter};
use crate::stdio::{Notice, Sink};

/// A relayed grant's ceilings: the relay enforces none on the server, so the grant
/// claims none (the largest the record can carry).
pub const UNBOUNDED: Limits = Limits {
    max_memory_bytes: MAX_SAFE_INTEGER,
    max_wall_ms: MAX_SAFE_INTEGER,
    max_output_bytes: MAX_SAFE_INTEGER,
};

/// A tool registry that grants relayed tools [`UNBOUNDED`], for the host behind a
/// [`HostGate`].
pub fn tool_registry() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.relay_unregistered(UNBOUNDED);
    tools
}

/// Whether every intent and outcome the gate wrote reached the record. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RecordHealth(Arc<AtomicBool>);

impl RecordHealth {
    /// True once an intent or outcome could not be written.
    pub fn failed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The runtime behind the relay's [`Gate`].
pub struct HostGate {
    pipeline: Arc<Pipeline>,
    role: Option<String>,
    health: RecordHealth,
    sink: Sink,
    desk: Option<Desk>,
}

/// A call a rule parked, held until its park is settled: its place in the queue.
pub struct Parked {
    ticket: Ticket,
}

/// Waits on the approvals queue for one park's decision.
pub struct DeskWaiter {
    desk: Desk,
    pipeline: Arc<Pipeline>,
    ticket: Ticket,
}

impl Waiter for DeskWaiter {
    type Approved = Approval;

    fn wait(self, every: Duration, keep_alive: &mut dyn FnMut()) -> Settled<Approval> {
        match self
            .desk
            .settle(&self.pipeline, &self.ticket, every, keep_alive)
        {
            Ok(approval) => Settled::Approved(approval),
            Err(refusal) => Settled::Refused(refusal),
        }
    }
}

/// A forwarded call: its open guard and when it was handed to the server.
pub struct Pending {
    call: OwnedCall,
    started: Instant,
}

impl HostGate {
    /// A gate deciding calls on `pipeline`, asserting `role` for every call, and saying
    /// record failures to `sink`.
    pub fn new(pipeline: Arc<Pipeline>, role: Option<String>, sink: Sink) -> Self {
        HostGate {
            pipeline,
            role,
            health: RecordHealth::default(),
            sink,
            desk: None,
        }
    }

    /// The same gate, filing the calls a rule parks with `desk` and holding them until
    /// a person decides (without one, a parked call is answered at once as not run).
    #[must_use]
    pub fn with_desk(mut self, desk: Desk) -> Self {
        self.desk = Some(desk);
        self
    }

    /// Whether the record took every line this gate wrote.
    pub fn health(&self) -> RecordHealth {
        self.health.clone()
    }

    fn request<'a>(
        &'a self,
        frame: &'a [u8],
        tool: &'a str,
        arguments: Option<&'a str>,
    ) -> CallRequest<'a> {
        CallRequest {
            // The digest is over the tools/call message exactly as the client sent it.
            frame: Some(frame),
            role: self.role.as_deref(),
            arguments,
            ..CallRequest::new(tool, b"")
        }
    }

    /// Asks the stations about a call (under `approval` when it resumes a park): a
    /// pending call to forward, or the record of one that does not run.
    fn decide(&self, request: &CallRequest<'_>) -> Result<Result<Pending, CallRecord>, Refusal> {
        let mut owned = match self.pipeline.begin_owned(request) {
            Ok(c) => c,
            Err(e) => {
                self.failed(&e);
                return Err(Refusal::new(
                    Cause::NotRecorded,
                    format!("the call's intent could not be recorded: {e}"),
                ));
            }
        };
        if let Some(grant) = owned.authorize() {
            if grant.limits() == UNBOUNDED {
                return Ok(Ok(Pending {
                    call: owned,
                    started: Instant::now(),
                }));
            }
            // Fail closed: a ceiling the policy set would be recorded but not enforced.
            let reason = "the policy sets ceilings (limits) on this tool, and aegis wrap cannot hold a relayed server to them";
            let call_id = owned.call_id().to_owned();
            if let Err(e) = owned.finish(Executed::NotStarted {
                cause: Cause::UnenforceableLimits,
                reason: reason.into(),
            }) {
                self.failed(&e);
            }
            return Err(Refusal::new(Cause::UnenforceableLimits, reason).recorded(call_id));
        }
        let call_id = owned.call_id().to_owned();
        match owned.finish(Executed::NotRun) {
            Ok(record) => Ok(Err(record)),
            Err(e) => {
                self.failed(&e);
                Err(Refusal::new(
                    Cause::NotRecorded,
                    format!("refused, and the refusal could not be recorded: {e}"),
                )
                .recorded(call_id))
            }
        }
    }

    fn failed(&self, what: impl std::fmt::Display) {
        self.health.0.store(true, Ordering::SeqCst);
        (self.sink)(Notice::Error(&what.to_string()));
    }
}

impl Gate for HostGate {
    type Pending = Pending;
    type Parked = Parked;
    type Waiter = DeskWaiter;

    fn open(&self, call: &ToolCall<'_>) -> Result<Opened<Self>, Refusal> {
        // The pinned schema says which arguments are path-like, for the record.
        if let Some(schema) = call.input_schema {
            self.pipeline
                .recording()
                .bind_schema_text(call.name, schema);
        }
        let arguments = canonical_arguments(call.arguments);
        let request = self.request(call.frame, call.name, Some(&arguments));
        let record = match self.decide(&request)? {
            Ok(pending) => return Ok(Opened::Forward(pending)),
            Err(record) => record,
        };
        // The station the record names, in its words (aegis_runtime::refusal).
        let refusal = aegis_runtime::refusal::refusal_of(&record);
        let (Some(desk), Some(_)) = (&self.desk, record.park()) else {
            return Err(refusal);
        };
        match desk.file(&self.pipeline, &record, Some(&arguments)) {
            Ok(ticket) => Ok(Opened::Park {
                approval_id: ticket.approval_id.clone(),
                parked: Parked {
                    ticket: ticket.clone(),
                },
                waiter: DeskWaiter {
                    desk: desk.clone(),
                    pipeline: Arc::clone(&self.pipeline),
                    ticket,
                },
            }),
            Err(e) => {
                self.failed(format_args!("a parked call could not be filed: {e}"));
                Err(Refusal {
                    reason: format!(
                        "{}; it could not be filed in the approvals queue ({e})",
                        refusal.reason
                    ),
                    ..refusal
                })
            }
        }
    }

    fn resume(
        &self,
        _: Parked,
        approval: Approval,
        call: &ToolCall<'_>,
    ) -> Result<Pending, Refusal> {
        // Decided afresh on what is forwarded: the approval covers the call only if its
        // tool and arguments digest are the park's (checked by the pipeline).
        let arguments = canonical_arguments(call.arguments);
        let request = CallRequest {
            approval: Some(&approval),
            ..self.request(call.frame, call.name, Some(&arguments))
        };
        match self.decide(&request)? {
            Ok(pending) => Ok(pending),
            Err(record) => Err(aegis_runtime::refusal::refusal_of(&record)),
        }
    }

    fn withdraw(&self, parked: Parked, why: &str) {
        if let Some(desk) = &self.desk {
            desk.withdraw(&self.pipeline, &parked.ticket, why);
        }
    }

    fn client_answered(
        &self,
        parked: &Parked,
        approved: bool,
        client: &str,
        asked: ClientMechanism,
    ) {
        if let Some(desk) = &self.desk
            && let Err(e) = desk.client_decided(&parked.ticket, approved, client, asked)
        {
            // The park still waits for the queue (or expires): nothing runs on it.
            (self.sink)(Notice::Warning(&format!(
                "the client's answer on {} could not be placed in the approvals queue: {e}",
                parked.ticket.approval_id
            )));
        }
    }

    fn finish(&self, pending: Pending, end: CallEnd<'_>) {
        let wall_ms = u64::try_from(pending.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (ending, response) = ending_of(end);
        let executed = Executed::Relayed {
            ending,
            response,
            wall_ms,
        };
        if let Err(e) = pending.call.finish(executed) {
            self.failed(&e);
        }
    }

    fn tool_changed(&self, change: &ToolChangeLine) {
        if let Err(e) = self.pipeline.record_tool_change(change) {
            self.failed(&e);
        }
    }

    fn refused(&self, call: &RefusedCall<'_>) -> Option<String> {
        // The relay refused before the stations: recorded as every such call is.
        let request = self.request(call.frame, call.name.unwrap_or("(unreadable)"), None);
        match self.pipeline.refuse_before_stations(&request, call.refusal) {
            Ok(record) => Some(record.outcome.call_id),
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }
}

/// How a relayed call's end is recorded (spec/SPEC.md, "Relayed calls"): the server's
/// answer is kept (and digested) when it answered, with a result or a JSON-RPC error.
fn ending_of(end: CallEnd<'_>) -> (Ending, Option<Vec<u8>>) {
    match end {
        CallEnd::Response {
            frame,
            tool_error: false,
        } => (Ending::Success, Some(frame.to_vec())),
        CallEnd::Response {
            frame,
            tool_error: true,
        } => (
            Ending::ToolError("the server's result has isError: true".into()),
            Some(frame.to_vec()),
        ),
        CallEnd::Error { frame } => (
            Ending::ToolError("the server answered with a JSON-RPC error".into()),
            Some(frame.to_vec()),
        ),
        CallEnd::Unrelayable { frame, reason } => (
            Ending::ToolError(format!(
                "the server's answer could not be relayed ({reason}); the client got a JSON-RPC error"
            )),
            Some(frame.to_vec()),
        ),
        CallEnd::Cancelled { reason } => (
            Ending::Cancelled(format!(
                "the client cancelled: {}",
                reason.unwrap_or("no reason given")
            )),
            None,
        ),
        CallEnd::ServerExited { how } => (
            Ending::ServerDied(format!("the server {how} before answering")),
            None,
        ),
        CallEnd::Shutdown => (Ending::Cancelled("relay shut down".into()), None),
        CallEnd::NotSent => (
            Ending::Cancelled("not sent: another call in its batch was refused".into()),
            None,
        ),
    }
}

/// A call's `params.arguments` as the policy is given them: RFC 8785 canonical JSON,
/// `{}` when absent or `null` (every SDK reads both as no arguments). Text the relay
/// accepted but no canonical form exists for (`NaN`) stays as sent, and the pipeline
/// refuses it: it does not read one way only.
fn canonical_arguments(text: Option<&str>) -> String {
    let Some(text) = text.filter(|t| *t != "null") else {
        return "{}".to_owned();
    };
    aegis_policy_arguments::unambiguous::canonical_object(text.as_bytes())
        .unwrap_or_else(|_| text.to_owned())
}
