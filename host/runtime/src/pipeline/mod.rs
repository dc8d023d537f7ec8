//! The pipeline: every call walks POLICY → CAPABILITY → SANDBOX → AUDIT, in that order,
//! and leaves exactly one outcome line on the record.
//!
//! # Guarantees
//! - **Intent before effect.** A call's intent line is durable (appended and synced)
//!   before any station runs; if it cannot be written the call is refused and nothing
//!   runs.
//! - **One outcome on every exit.** [`Call`] is a guard: an outcome is written when it
//!   finishes, and its `Drop` writes one when it does not — a trap when the thread is
//!   panicking (`host panic during tool call`), otherwise `host_denied` (`call abandoned
//!   before completion`). What the outcome says about each station is what that station
//!   had decided by then, so an abandoned call never claims an allow it did not get.
//! - **Fail closed.** A policy plugin that errors or answers a verdict this host does not
//!   know denies the call. A panic in a handler or in the sandbox is caught and recorded
//!   as a trap.
//! - **Only bytes that left.** `response_digest` is set only when output is handed back,
//!   and output is handed back only after its outcome is durable. If the outcome cannot
//!   be written, the caller gets the error and not the output.
//! - **The request digest is the host's, and covers what the tool is given.** It is
//!   computed here, never taken from the caller: over the invocation — the call's
//!   arguments and input in the canonical form of `spec/SPEC.md` §3.2 — unless the
//!   caller hands over the frame the request arrived in (an MCP message), whose bytes
//!   are then digested verbatim. A caller that only sets `args` and `input` cannot
//!   leave either out.
//! - **Policy is asked about what the grant will carry.** A capability is an axis of the
//!   grant, not a claim of the caller: before minting, the pipeline takes the axes the
//!   grant would carry ([`ToolRegistry::axes`]: all the manifest declares when the call
//!   names none, what the name hands over when it names one) and asks the policy about
//!   each, in the order `fs.read`, `fs.write`, `net.http` (once, with the empty
//!   capability, when there are none). The call proceeds only if every axis is
//!   allowed; the first refusal is recorded, its reason prefixed with its axis; the
//!   limits are the narrowest of all the answers; on an allow the matched rule recorded
//!   is the first axis's. A minted grant that carried an axis not asked about would be
//!   refused (it cannot, as both come from one computation). So no way of stating or
//!   omitting a capability gets past a deny keyed on one.
//! - **One call is one ask.** The axes go to the station together
//!   (`evaluate_axes_indexed`), so a rate limit counts the call once, and the answer
//!   names its rule and reason by position in a table the station shares, checked
//!   here. A plugin whose author did not override it is answered through its
//!   `evaluate_axes` (and a per-call table); a library built before the method existed
//!   is refused at load by abi_stable's layout check (see `spec/PLUGINS.md`).
//!
//! # Non-guarantees
//! - The role and session are what the caller asserts; nothing here authenticates
//!   them, so a rule keyed on a role sorts cooperating callers only.
//! - A call naming a capability the tool does not declare (or a name that is not one)
//!   gets no grant, but the policy is still asked first, once, about the name as given.
//! - The policy set hash is read once, when the call opens, before its intent is
//!   written; the verdict is asked for after. A reload landing in between is recorded
//!   against the older set (in force when the intent was written), though the newer
//!   set answered.
//! - Model B handlers are checked, not isolated (see [`crate::handler`]): their effects
//!   through the context are checked, but the pipeline cannot stop host code, so a
//!   handler's time is measured, not bounded.
//! - A call whose outcome cannot be written (the sink failed) is refused to its caller,
//!   but what the tool did is not undone; the session is poisoned and `aegis verify`
//!   reports the call in flight.

use crate::audit::{AuditNotice, OpenedAudit, RetentionError};
use crate::capability::{
    Capability, CapabilityDenied, Grant, NarrowingLimits, RegistrationError, ToolKind, ToolRegistry,
};
use crate::handler::{self, Axis, HostHandler};
use crate::operator::DEFAULT_APPROVAL_TIMEOUT;
use crate::outcome::Ending;
use crate::profile::ProfileError;
use crate::sandbox::{CancelToken, Sandbox, SandboxError};
use aegis_policy_arguments::unambiguous::canonical_object;
use aegis_record::json::SafeInt;
use aegis_record::line::Stop;
use aegis_record::refusal::{Cause, Refusal, Station};
use aegis_record::{
    ApprovalScope, ArgumentsDigest, BoundArguments, CapabilityOutcome, DecisionAxes, DecisionLine,
    ExecutionOutcome, FsAxis, IntentLine, NetAxis, OutcomeLine, PolicyOutcome, PolicySetHash,
    RequestDigest, ResponseDigest, ToolChangeLine, WriteError,
};
use aegis_station_api::abi_stable::std_types::{RArc, ROption, RSlice, RSliceMut, RStr, RString};
use aegis_station_api::{
    CallAnswer, DecisionTable, IndexedDecision, PolicyEvaluatorBox, PolicyRequest, Verdict,
};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::{Future, poll_fn};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::Poll;
use std::time::Duration;

/// The reason recorded for a station that never decided because the call stopped first.
pub const NOT_REACHED: &str = "not reached: the call stopped before this station";
/// The capability station's reason when policy refused first.
pub const POLICY_BLOCKED: &str = "policy refused before capability";
/// The execution reason when a station refused the call.
pub const NOT_EXECUTED: &str = "not executed";
/// The execution reason for a call parked for approval.
pub const PARKED: &str = "parked for approval";
/// The execution reason written by the drop guard.
pub const ABANDONED: &str = "call abandoned before completion";
/// The execution reason, before the cause, for arguments that read more than one way:
/// no station is asked about a call whose tool may read other arguments than the policy.
pub const AMBIGUOUS_ARGUMENTS: &str =
    "the call's arguments cannot be read one way only, so no station was asked";
/// Why the host will not run a relayed tool itself (its caller relays the call).
pub const RELAYED_NOT_HERE: &str =
    "a relayed tool runs in the server it came from; this host does not run it";
/// The trap message written by the drop guard while unwinding.
pub const HOST_PANIC: &str = "host panic during tool call";

/// One call as the caller states it.
#[derive(Clone, Copy, Debug)]
pub struct CallRequest<'a> {
    /// The tool to run.
    pub tool_id: &'a str,
    /// The frame the request arrived in, exactly as received (an MCP `tools/call`
    /// message), for a caller that has one: `request_digest` is then SHA-256 of these
    /// bytes verbatim, and the frame must carry everything the tool is given. `None`
    /// (what [`CallRequest::new`] sets): the digest covers `args` and `input`
    /// ([`RequestDigest::of_invocation`]).
    pub frame: Option<&'a [u8]>,
    /// What the tool is given (stdin, or the world's `input`).
    pub input: &'a [u8],
    /// Arguments after the program name (command components only).
    pub args: &'a [&'a str],
    /// The capability the call names (`fs.read`, `fs.write`, `net.http`), if any.
    pub capability: Option<&'a str>,
    /// The role the caller asserts.
    pub role: Option<&'a str>,
    /// The policy session scope.
    pub session: Option<&'a str>,
    /// The call's arguments object as RFC 8785 canonical JSON, for policy rules over
    /// arguments; `None` when the caller has none to state (not the same as `{}`).
    /// Evaluators decide rules over unknown arguments the way that cannot widen
    /// authority.
    pub arguments: Option<&'a str>,
    /// Stops the tool from another thread (an operator's Ctrl-C, a client's
    /// `notifications/cancelled`). A cancelled wasm call ends recorded as a trap,
    /// `cancelled: <why>`; one cancelled before it starts runs no guest code. Host
    /// handlers are not interrupted by it (they answer to their ceilings only).
    pub cancel: Option<&'a CancelToken>,
    /// The approval this call resumes, when a person approved it after its park: the
    /// call must be what was approved (tool, arguments digest, before its expiry) and
    /// its grant within the approved scope, or it is refused (`approval_mismatch`). A
    /// policy that parks it again is answered by the approval; one that denies it still
    /// denies. `None` (what [`CallRequest::new`] sets): an ordinary call.
    pub approval: Option<&'a Approval>,
}

/// An approval a call resumes under: the park's id and the scope the approver
/// approved (as the `decision` line states it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// The park's approval id, recorded on the resumed call as
    /// `decision_axes.approval_ref`.
    pub approval_id: String,
    /// What the approval grants.
    pub scope: ApprovalScope,
}

/// What a parked call's outcome says of its park ([`CallRecord::park`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Park<'a> {
    /// The approval id a decision answers.
    pub approval_id: &'a str,
    /// What approving would grant; `None` only on a line written before scopes were
    /// recorded.
    pub scope: Option<&'a ApprovalScope>,
    /// The rule that parked it (`None`: the policy's default).
    pub matched_rule: Option<&'a str>,
    /// The execution's reason (`parked for approval`).
    pub reason: &'a str,
}

impl<'a> CallRequest<'a> {
    /// A call of `tool_id` with `input`, naming nothing else; its request digest is
    /// taken over the invocation.
    pub fn new(tool_id: &'a str, input: &'a [u8]) -> CallRequest<'a> {
        CallRequest {
            tool_id,
            frame: None,
            input,
            args: &[],
            capability: None,
            role: None,
            session: None,
            arguments: None,
            cancel: None,
            approval: None,
        }
    }

    /// The digest an approval binds the call's arguments by: of the arguments object
    /// (canonical JSON text) when the call states one, else of the invocation (its
    /// `args` and `input`, as `aegis run` calls a command).
    pub fn arguments_digest(&self) -> ArgumentsDigest {
        match self.arguments {
            Some(text) => ArgumentsDigest::of_canonical_arguments(text.as_bytes()),
            None => {
                ArgumentsDigest::of_invocation(RequestDigest::of_invocation(self.args, self.input))
            }
        }
    }

    /// The digest the record names the request by: the frame's, or the invocation's.
    pub fn request_digest(&self) -> RequestDigest {
        match self.frame {
            Some(frame) => RequestDigest::of_request(frame),
            None => RequestDigest::of_invocation(self.args, self.input),
        }
    }
}

/// How a call ended, derived from its outcome line (defined with the record, which
/// `aegis log` and the console read without the runtime).
pub use aegis_record::CallClass;

/// A finished call: its outcome as recorded and, on success only, its output.
#[derive(Clone, Debug)]
pub struct CallRecord {
    /// The outcome line as appended. Its text members are whole here; the line on the
    /// record holds them bounded (`aegis_record::bound`), so a very long trap message
    /// is cut there, with its length and digest.
    pub outcome: OutcomeLine,
    /// The outcome line's `seq`.
    pub seq: u64,
    /// The tool's output; `Some` only when the call succeeded.
    pub output: Option<Vec<u8>>,
    /// What a sandboxed tool wrote to stderr (at most 64 KiB): for the operator's
    /// diagnostics, never part of the response and not digested.
    pub stderr: Vec<u8>,
}

impl CallRecord {
    /// Why a station refused the call, in the words every front end uses (`aegis run`,
    /// the relay's refusal text); `None` when policy and capability both let it through.
    pub fn station_refusal(&self) -> Option<String> {
        let o = &self.outcome;
        if o.stopped_before_the_stations()
            && let ExecutionOutcome::HostDenied { reason } = &o.execution
        {
            // No station was asked (the arguments read two ways, the caller refused it,
            // or it was abandoned): the reason is the host's.
            return Some(format!("not run: {reason}"));
        }
        let rule = o
            .decision_axes
            .matched_rule
            .as_deref()
            .map(|r| format!(" (rule {r})"))
            .unwrap_or_default();
        match (&o.policy, &o.capability) {
            (PolicyOutcome::Denied { reason }, _) => {
                Some(format!("refused by policy{rule}: {reason}"))
            }
            (PolicyOutcome::RateLimited { reason }, _) => {
                Some(format!("rate limited{rule}: {reason}"))
            }
            (PolicyOutcome::PendingApproval { approval_id, .. }, _) => {
                Some(format!("parked for approval {approval_id}{rule}; not run"))
            }
            (_, CapabilityOutcome::Denied { reason, .. }) => {
                Some(format!("refused by the capability station: {reason}"))
            }
            _ => None,
        }
    }

    /// How the call ended.
    pub fn class(&self) -> CallClass {
        CallClass::of(&self.outcome)
    }

    /// The park, when the policy parked the call: its approval id, the scope
    /// approving it would grant, the rule that parked it and the reason recorded.
    pub fn park(&self) -> Option<Park<'_>> {
        let o = &self.outcome;
        let PolicyOutcome::PendingApproval { approval_id, scope } = &o.policy else {
            return None;
        };
        let reason = match &o.execution {
            ExecutionOutcome::HostDenied { reason } => reason.as_str(),
            _ => "",
        };
        Some(Park {
            approval_id,
            scope: scope.as_ref(),
            matched_rule: o.decision_axes.matched_rule.as_deref(),
            reason,
        })
    }
}

/// A failure to keep the record. Each variant says whether anything ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The intent line could not be written, or its write not confirmed durable (a
    /// database's commit whose answer was lost may still have stored it): nothing ran.
    #[error("the intent line could not be written or confirmed stored, so nothing ran: {0}")]
    Intent(#[source] WriteError),
    /// The outcome line could not be written: any output was withheld.
    #[error(
        "call {call_id}: the outcome line could not be written, so its output was withheld: {source}"
    )]
    Outcome {
        /// The call.
        call_id: String,
        /// The write failure.
        source: WriteError,
    },
    /// The session had stopped and a new one could not be opened: nothing ran.
    #[error("the record stopped and a new session could not be opened, so nothing ran: {0}")]
    Resume(String),
    /// A decision was not written: its approver does not stand behind it (a signature
    /// that does not verify, a host that approves), or it names no approver.
    #[error("the decision on {approval_id} was not recorded: {why}")]
    Unattributed {
        /// The park decided.
        approval_id: String,
        /// What is wrong with its approver.
        why: String,
    },
    /// A decision line could not be written.
    #[error("the decision on {approval_id} could not be recorded: {source}")]
    Decision {
        /// The park decided.
        approval_id: String,
        /// The write failure.
        source: WriteError,
    },
    /// A tool change line could not be written.
    #[error("the change to tool {tool_id:?} could not be recorded: {source}")]
    ToolChange {
        /// The tool.
        tool_id: String,
        /// The write failure.
        source: WriteError,
    },
}

/// Why a pipeline could not be assembled from a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A station's plugin could not be resolved, loaded or constructed.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The audit sink was refused by the retention rule.
    #[error(transparent)]
    Retention(#[from] RetentionError),
    /// A tool's manifest was refused at registration.
    #[error(transparent)]
    Tool(RegistrationError),
    /// The sandbox could not be built.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The audit sink is held by someone else for now (another process writes the
    /// record file), and the builder was not asked to wait
    /// ([`crate::HostBuilder::wait_when_busy`]) or the wait was cancelled.
    #[error(transparent)]
    Busy(ProfileError),
}

/// How a pipeline follows a stopped session with a new one: `open` is given the
/// stopped session and opens the next on a new sink.
pub(crate) struct Resume {
    open: Box<OpenNext>,
    turn: Mutex<()>,
}

/// Opens the session that follows a stopped one, or says why it cannot.
type OpenNext = dyn Fn(&OpenedAudit) -> Result<OpenedAudit, String> + Send + Sync;

impl Resume {
    pub(crate) fn new(
        open: impl Fn(&OpenedAudit) -> Result<OpenedAudit, String> + Send + Sync + 'static,
    ) -> Resume {
        Resume {
            open: Box::new(open),
            turn: Mutex::new(()),
        }
    }
}

/// The four stations, assembled. Share it between threads: every method takes `&self`.
pub struct Pipeline {
    policy: PolicyEvaluatorBox,
    tools: ToolRegistry,
    handlers: BTreeMap<String, HostHandler>,
    sandbox: Arc<Sandbox>,
    /// The session calls are recorded in now: replaced only when it has stopped and a
    /// new one is opened in its place (see `session_for_call`).
    audit: RwLock<Arc<OpenedAudit>>,
    /// Where records go; the same for every session of the pipeline.
    notice: AuditNotice,
    /// How to open a new session when the current one has stopped; `None` for a sink
    /// that keeps one chain (its stopped session stays stopped).
    resume: Option<Resume>,
    /// Names this session's calls: the first 64 bits of its open line's hash. The open
    /// line carries a random nonce, so call ids stay distinct across the sessions of one
    /// record and across records, even with the same key.
    call_prefix: String,
    calls: AtomicU64,
    /// What of each call's arguments the record keeps.
    recording: ArgumentRecording,
    /// How long an approval of a call parked now may be used (a park's
    /// `scope.expires_at` is its time plus this).
    approval_timeout: Duration,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("audit", &self.audit)
            .field("call_prefix", &self.call_prefix)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Assembles a pipeline from stations already built. Only [`crate::host`] calls it,
    /// after recording the provenance of those stations: the one way in.
    pub(crate) fn from_parts(
        policy: PolicyEvaluatorBox,
        audit: OpenedAudit,
        tools: ToolRegistry,
        handlers: BTreeMap<String, HostHandler>,
        sandbox: Arc<Sandbox>,
    ) -> Pipeline {
        let call_prefix = audit.session.tail().to_hex()[..16].to_owned();
        Pipeline {
            policy,
            tools,
            handlers,
            sandbox,
            notice: audit.notice.clone(),
            audit: RwLock::new(Arc::new(audit)),
            resume: None,
            call_prefix,
            calls: AtomicU64::new(0),
            recording: ArgumentRecording::default(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
        }
    }

    /// Sets how long an approval of a call parked from now on may be used.
    pub(crate) fn set_approval_timeout(&mut self, timeout: Duration) {
        self.approval_timeout = timeout;
    }

    /// How long an approval of a parked call may be used: its park's
    /// `scope.expires_at` is the park's time plus this.
    pub fn approval_timeout(&self) -> Duration {
        self.approval_timeout
    }

    /// Sets what of each call's arguments the record keeps (before any call).
    pub(crate) fn set_recording(&mut self, recording: ArgumentRecording) {
        self.recording = recording;
    }

    /// What of each call's arguments the record keeps: a front end that learns a
    /// tool's input schema hands it here ([`ArgumentRecording::bind_schema`]).
    pub fn recording(&self) -> &ArgumentRecording {
        &self.recording
    }

    /// Sets how a stopped session is followed by a new one (before any call).
    pub(crate) fn set_resume(&mut self, resume: Resume) {
        self.resume = Some(resume);
    }

    /// Where the record goes, for the operator.
    pub fn notice(&self) -> &AuditNotice {
        &self.notice
    }

    /// The audit session calls are recorded in now.
    pub fn audit(&self) -> Arc<OpenedAudit> {
        Arc::clone(&self.audit.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Ends the pipeline, handing back its audit session (to close or export it).
    ///
    /// # Errors
    /// The pipeline itself, unchanged, while a call still holds the session (a call
    /// keeps the session its intent went to, for its outcome).
    pub fn into_audit(self) -> Result<OpenedAudit, Box<Pipeline>> {
        let Pipeline {
            policy,
            tools,
            handlers,
            sandbox,
            audit,
            notice,
            resume,
            call_prefix,
            calls,
            recording,
            approval_timeout,
        } = self;
        let current = audit.into_inner().unwrap_or_else(PoisonError::into_inner);
        Arc::try_unwrap(current).map_err(|current| {
            Box::new(Pipeline {
                policy,
                tools,
                handlers,
                sandbox,
                audit: RwLock::new(current),
                notice,
                resume,
                call_prefix,
                calls,
                recording,
                approval_timeout,
            })
        })
    }

    /// The session a new call's intent goes to: the current one, or, when it has
    /// stopped (a write failed) and the sink keeps a chain per session, a new session
    /// opened in its place, whose open line names the one it follows. Nothing runs in
    /// between: while the new one cannot be opened, every call is refused.
    ///
    /// # Errors
    /// [`PipelineError::Resume`]: the current session has stopped and no new one could
    /// be opened.
    fn session_for_call(&self) -> Result<Arc<OpenedAudit>, PipelineError> {
        let current = self.audit();
        let Some(resume) = &self.resume else {
            return Ok(current);
        };
        if !current.session.is_stopped() {
            return Ok(current);
        }
        // One attempt at a time; whoever waited finds the session another has opened.
        let _turn = resume.turn.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.audit();
        if !current.session.is_stopped() {
            return Ok(current);
        }
        let next = (resume.open)(&current).map_err(PipelineError::Resume)?;
        let next = Arc::new(next);
        *self.audit.write().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&next);
        Ok(next)
    }

    /// Runs one call through all four stations.
    ///
    /// Every refusal is an `Ok` [`CallRecord`] whose outcome says which station refused.
    /// The tool runs on the sandbox's own runtime, which this thread blocks on: call it
    /// from a plain thread, never from inside an async task (tokio refuses a runtime
    /// inside another, and the refusal is recorded as a host panic); there, await
    /// [`Pipeline::call_async`].
    ///
    /// # Errors
    /// Only a failure to keep the record: see [`PipelineError`].
    pub fn call(&self, request: &CallRequest<'_>) -> Result<CallRecord, PipelineError> {
        let mut call = self.begin(request)?;
        let Some(grant) = call.authorize() else {
            return call.finish(Executed::NotRun);
        };
        let executed = self.run_tool(request, &grant);
        call.finish(executed)
    }

    /// Runs the granted tool for `request` (stage 3 alone: nothing is recorded), with a
    /// panic in the sandbox or a handler caught and reported as
    /// [`Executed::Failed`]. For a caller that drives a guard itself: hand the result
    /// to [`Call::finish`] or [`OwnedCall::finish`]. Blocks as [`Pipeline::call`]
    /// does; inside an async task, await [`Pipeline::run_tool_async`].
    pub fn run_tool(&self, request: &CallRequest<'_>, grant: &Grant) -> Executed {
        let ran = catch_unwind(AssertUnwindSafe(|| {
            self.sandbox.block_on(self.execute(request, grant))
        }));
        match ran {
            Ok(Ok(executed)) => executed,
            Ok(Err(e)) => could_not_start(&e),
            Err(panic) => host_panic(panic.as_ref()),
        }
    }

    /// [`Pipeline::call`] as a future, for a caller inside a tokio runtime (with its
    /// timer on): the tool runs in the awaiting task ([`Sandbox::run_async`]) rather
    /// than on a thread of the sandbox's own. The record's lines are written as in
    /// [`Pipeline::call`], synchronously: on a sink that syncs, the task waits for the
    /// disk, so such a caller should await this on a blocking thread
    /// (`Handle::block_on` inside `spawn_blocking`). A Model B handler is plain
    /// blocking code and runs inline, holding the task while it runs. Dropped before it
    /// ends, the call is abandoned: its guard records that, and the tool is stopped
    /// where it is.
    ///
    /// # Errors
    /// As [`Pipeline::call`].
    pub async fn call_async(&self, request: &CallRequest<'_>) -> Result<CallRecord, PipelineError> {
        let mut call = self.begin(request)?;
        let Some(grant) = call.authorize() else {
            return call.finish(Executed::NotRun);
        };
        let executed = self.run_tool_async(request, &grant).await;
        call.finish(executed)
    }

    /// [`Pipeline::run_tool`] as a future (see [`Pipeline::call_async`]): a panic
    /// while it is polled is caught and reported as [`Executed::Failed`].
    pub async fn run_tool_async(&self, request: &CallRequest<'_>, grant: &Grant) -> Executed {
        let mut executing = pin!(self.execute(request, grant));
        poll_fn(
            |cx| match catch_unwind(AssertUnwindSafe(|| executing.as_mut().poll(cx))) {
                Ok(polled) => polled,
                Err(panic) => Poll::Ready(host_panic(panic.as_ref())),
            },
        )
        .await
    }

    /// Opens a call: writes its intent line and returns the guard that owes its outcome.
    ///
    /// # Errors
    /// [`PipelineError::Intent`]: nothing ran and no outcome is owed.
    pub fn begin<'p>(&'p self, request: &CallRequest<'_>) -> Result<Call<'p>, PipelineError> {
        Ok(Call {
            pipeline: self,
            open: Some(self.open_call(request)?),
        })
    }

    /// Opens a call whose guard owns a share of the pipeline: it can be moved to
    /// another thread, kept in a map by request id and finished there. The same
    /// promise as [`Pipeline::begin`]: exactly one outcome, written by
    /// [`OwnedCall::finish`] or, failing that, by its `Drop`.
    ///
    /// # Errors
    /// [`PipelineError::Intent`]: nothing ran and no outcome is owed.
    pub fn begin_owned(
        self: &Arc<Pipeline>,
        request: &CallRequest<'_>,
    ) -> Result<OwnedCall, PipelineError> {
        Ok(OwnedCall {
            open: Some(self.open_call(request)?),
            pipeline: Arc::clone(self),
        })
    }

    fn open_call(&self, request: &CallRequest<'_>) -> Result<Open, PipelineError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let stated = Stated::of(format!("call-{}-{n}", self.call_prefix), request, self);
        let audit = self.session_for_call()?;
        audit
            .session
            .append_unsigned(&IntentLine {
                call_id: stated.call_id.clone(),
                tool_id: stated.tool_id.clone(),
                request_digest: stated.request_digest,
            })
            .map_err(PipelineError::Intent)?;
        Ok(Open {
            stated,
            decided: Decisions::default(),
            audit,
        })
    }

    /// Records a tool definition a relay saw change against its pins: one signed
    /// `tool_change` line, written when the change is first seen (spec/SPEC.md §6.3), so
    /// the record holds a rug pull even when the model never calls the tool. Returns the
    /// line's `seq`.
    ///
    /// # Errors
    /// [`PipelineError::ToolChange`] when the line could not be written.
    pub fn record_tool_change(&self, change: &ToolChangeLine) -> Result<u64, PipelineError> {
        self.session_for_call()?
            .session
            .append(change)
            .map(|appended| appended.seq)
            .map_err(|source| PipelineError::ToolChange {
                tool_id: change.tool_id.clone(),
                source,
            })
    }

    /// Records a person's (or the host's) decision on a park: one signed `decision`
    /// line in the current session, written only when its approver stands behind it
    /// ([`aegis_record::approval::check`]: an approver key's signature verifies over
    /// the approval id and verdict, the host only denies). Returns the line's `seq`.
    ///
    /// # Errors
    /// [`PipelineError::Unattributed`] when the approver does not stand behind it or
    /// none is named (nothing is written); [`PipelineError::Decision`] when the line
    /// could not be written.
    pub fn record_decision(&self, decision: &DecisionLine) -> Result<u64, PipelineError> {
        let unattributed = |why: String| PipelineError::Unattributed {
            approval_id: decision.approval_id.clone(),
            why,
        };
        let Some(approver) = &decision.approver else {
            return Err(unattributed("it names no approver".to_owned()));
        };
        aegis_record::approval::check(&decision.approval_id, &decision.verdict, approver)
            .map_err(|problem| unattributed(problem.to_string()))?;
        self.session_for_call()?
            .session
            .append(decision)
            .map(|appended| appended.seq)
            .map_err(|source| PipelineError::Decision {
                approval_id: decision.approval_id.clone(),
                source,
            })
    }

    /// Records a call refused before any station was asked, by a front end's own check
    /// (the relay's, the pins', the gateway's) or the host's: an intent, then an outcome
    /// whose stations say not reached, whose execution gives the refusal's reason and
    /// whose `stop` its cause. The one recorder for such calls; `refusal`'s cause is one
    /// of those [`Cause::before_the_stations`] names.
    ///
    /// # Errors
    /// A failure to keep the record, as [`Pipeline::call`].
    pub fn refuse_before_stations(
        &self,
        request: &CallRequest<'_>,
        refusal: &Refusal,
    ) -> Result<CallRecord, PipelineError> {
        let reason = match refusal.station() {
            Station::Relay | Station::Pins => {
                format!(
                    "refused by the relay ({}): {}",
                    refusal.station(),
                    refusal.reason
                )
            }
            station => format!("refused by the {station}: {}", refusal.reason),
        };
        self.open_call(request)?.finish(Executed::NotStarted {
            cause: refusal.cause,
            reason,
        })
    }

    /// Runs the policy and capability stations over `request` without recording or
    /// executing anything: the outcome they would lead to (unsigned, with a placeholder
    /// call id) and the grant, if one was minted. For benches, and for re-evaluating a
    /// recorded call.
    pub fn decide(&self, request: &CallRequest<'_>) -> (OutcomeLine, Option<Grant>) {
        let stated = Stated::of(String::from("call-undecided"), request, self);
        let (decided, grant) = self.stations_1_2(&stated);
        let ended = decided.not_run();
        (outcome_line(stated, decided, ended), grant)
    }

    /// Stations 1 and 2 over the call as stated: each station's decision is collected,
    /// and the grant returned when both allowed.
    ///
    /// The policy is asked about every axis the grant would carry
    /// ([`ToolRegistry::axes`]), not only the one the call names: see [`ask_policy`].
    fn stations_1_2(&self, call: &Stated) -> (Decisions, Option<Grant>) {
        let mut d = Decisions::default();
        // The one rule for "reads one way only" (aegis_policy_arguments::unambiguous):
        // a rule must never compare a value the tool or server reads differently.
        if let Some(text) = call.arguments.as_deref()
            && let Err(why) = aegis_policy_arguments::unambiguous::read_object(text.as_bytes())
        {
            d.refused = Some((
                Stop::new(Cause::AmbiguousArguments),
                format!("{AMBIGUOUS_ARGUMENTS}: {why}").into(),
            ));
            return (d, None);
        }
        // A resumed call must be the one approved before any station hears of it.
        if let Some(approval) = &call.approval
            && let Err(why) = approval::matches(
                approval,
                &call.tool_id,
                call.arguments_digest,
                &aegis_record::time::now(),
            )
        {
            d.refused = Some((
                Stop::new(Cause::ApprovalMismatch),
                format!("{APPROVAL_MISMATCH}: {why}").into(),
            ));
            return (d, None);
        }
        let named = call.capability.as_deref();
        let planned = self.tools.axes(&call.tool_id, named);
        let as_named: [RStr<'_>; 1];
        let axes: &[RStr<'_>] = match planned {
            Ok(axes) => axis_names(axes),
            // No grant will be minted; the policy still answers first, about what the
            // call named, so its refusal takes precedence on the record.
            Err(_) => {
                as_named = [RStr::from(named.unwrap_or(""))];
                &as_named
            }
        };
        let decided = decide_policy(&self.policy, &call.ask(), axes, planned.is_ok());
        d.matched_rule = decided.matched_rule;
        d.arguments_read = decided.arguments_read;
        match (decided.policy, decided.stop) {
            (PolicyOutcome::Allowed, _) => d.policy = Some(PolicyOutcome::Allowed),
            // The park is answered by the approval this call resumes under; a deny or a
            // rate limit is not, whatever was approved.
            (PolicyOutcome::PendingApproval { .. }, _) if call.approval.is_some() => {
                d.policy = Some(PolicyOutcome::Allowed);
            }
            (PolicyOutcome::PendingApproval { approval_id, .. }, stop) => {
                let (fs, net) = self.tools.would_grant(&call.tool_id, named);
                let scope = ApprovalScope {
                    tool_id: call.tool_id.clone(),
                    arguments_digest: Some(call.arguments_digest),
                    fs,
                    net,
                    expires_at: Some(approval::time_after(self.approval_timeout)),
                };
                let parked = PolicyOutcome::PendingApproval {
                    approval_id,
                    scope: Some(scope),
                };
                let stop = stop.unwrap_or(Stop::new(Cause::StationFailed));
                d.refuse_before_capability(parked, stop, PARKED);
                return (d, None);
            }
            (refused, stop) => {
                let why = match refused {
                    PolicyOutcome::PendingApproval { .. } => PARKED,
                    _ => NOT_EXECUTED,
                };
                // Never `None` for a refusal; should it be, the refusal is still one.
                let stop = stop.unwrap_or(Stop::new(Cause::StationFailed));
                d.refuse_before_capability(refused, stop, why);
                return (d, None);
            }
        }
        let resolved = planned.and_then(|asked| {
            let grant = self
                .tools
                .resolve(&call.tool_id, named, &decided.narrowing)?;
            // Fail closed should the grant ever carry an axis the policy was not asked
            // about: the two come from one computation over an immutable registry.
            match grant.axes().iter().find(|c| !asked.contains(c)) {
                None => Ok(grant),
                Some(&unasked) => Err(CapabilityDenied::Unasked {
                    tool: call.tool_id.clone(),
                    capability: unasked,
                }),
            }
        });
        match resolved {
            Ok(grant) => {
                let record = grant.to_record();
                // A resumed call holds no authority its approval did not grant.
                if let Some(approval) = &call.approval
                    && let Err((axis, why)) = approval::within_scope(&record, &approval.scope)
                {
                    d.capability = Some(CapabilityOutcome::Denied {
                        reason: why.clone(),
                        denied_capability: Some(axis.to_owned()),
                    });
                    d.refused = Some((Stop::about(Cause::ApprovalMismatch, axis), why.into()));
                    return (d, None);
                }
                d.capability = Some(CapabilityOutcome::Granted { grant: record });
                d.grant_id = Some(grant.id().to_owned());
                d.fs = grant.fs_axis().cloned();
                d.net = grant.net_axis().cloned();
                // From here an abandonment is of a call that was allowed and granted.
                (d, Some(grant))
            }
            Err(denied) => {
                d.capability = Some(CapabilityOutcome::Denied {
                    reason: denied.to_string(),
                    denied_capability: Some(denied.axis().to_owned()),
                });
                d.refused = Some((denied.stop(), NOT_EXECUTED.into()));
                (d, None)
            }
        }
    }

    /// The policy set in force; a station that cannot say fails to the hash of nothing,
    /// and its verdict (asked next) fails closed too.
    fn policy_set_hash(&self) -> PolicySetHash {
        match self.policy.policy_set_hash().into_result() {
            Ok(bytes) => PolicySetHash::from_bytes(bytes),
            Err(_) => PolicySetHash::of_canonical_set(b""),
        }
    }

    /// Runs the granted tool. A future so that one body serves both callers: the sync
    /// API drives it on the sandbox's runtime, the async one in its own task.
    async fn execute(&self, request: &CallRequest<'_>, grant: &Grant) -> Executed {
        // Never into the sandbox or a handler: the tool lives in the relayed server.
        if grant.is_relayed() {
            return Executed::NotStarted {
                cause: Cause::NotStarted,
                reason: RELAYED_NOT_HERE.into(),
            };
        }
        let Some(manifest) = self.tools.manifest(grant.tool_id()) else {
            return Executed::NotStarted {
                cause: Cause::NotStarted,
                reason: "the tool's manifest is gone".into(),
            };
        };
        // Next to the use: a root removed since registration is refused before the tool
        // is handed anything.
        if let Err(gone) = grant.check_roots() {
            return Executed::NotStarted {
                cause: Cause::NotStarted,
                reason: gone.to_string(),
            };
        }
        match &manifest.kind {
            ToolKind::Wasm { component } => {
                let never = CancelToken::new();
                let cancel = request.cancel.unwrap_or(&never);
                let run = self
                    .sandbox
                    .run_async(component, grant, request.input, request.args, cancel)
                    .await;
                match run {
                    Ok(run) => Executed::Ran {
                        // The sandbox returns output on success only.
                        ending: run.ending,
                        output: run.output,
                        wall_ms: run.wall_ms,
                        peak_memory_bytes: run.peak_memory_bytes,
                        stderr: run.stderr,
                    },
                    Err(e) => could_not_start(&e),
                }
            }
            ToolKind::Host => {
                handler::execute(self.handlers.get(grant.tool_id()), grant, request.input)
            }
            ToolKind::Relayed => Executed::NotStarted {
                cause: Cause::NotStarted,
                reason: RELAYED_NOT_HERE.into(),
            },
        }
    }
}

/// What the execution step produced: what a caller driving a guard itself hands to
/// [`Call::finish`] or [`OwnedCall::finish`].
#[derive(Debug)]
pub enum Executed {
    /// Nothing ran: a station refused.
    NotRun,
    /// The host did not start the tool: it could not, or (before the stations, or
    /// with a front end's own refusal) it would not.
    NotStarted {
        /// What stopped it, for the record's `stop`.
        cause: Cause,
        /// Why.
        reason: String,
    },
    /// The tool ran in the sandbox or as a handler.
    Ran {
        /// How it ended.
        ending: Ending,
        /// Its output, on success only.
        output: Option<Vec<u8>>,
        /// Time it ran.
        wall_ms: u64,
        /// Peak linear memory (0 for host handlers).
        peak_memory_bytes: u64,
        /// Its stderr, for diagnostics.
        stderr: Vec<u8>,
    },
    /// A host handler gave up after its context refused an effect outside the grant
    /// (see [`handler::execute`]): recorded as `host_denied`, the reason led by the
    /// axis, with `wall_ms` since the tool had started.
    Refused {
        /// The axis refused.
        axis: Axis,
        /// The refusal, led by the axis (`fs.read: …`).
        reason: String,
        /// Time the handler ran.
        wall_ms: u64,
    },
    /// The tool ran in a server this host relays to (an MCP server), not in its
    /// sandbox. The record leaves `peak_memory_bytes` out: the host did not measure it.
    Relayed {
        /// How it ended, as the relay read it.
        ending: Ending,
        /// The response bytes as they will be handed back. They are handed back (and
        /// digested) only when `ending` is [`Ending::Success`] or [`Ending::ToolError`]
        /// (the server answered, with an error result); on any other ending they are
        /// withheld.
        response: Option<Vec<u8>>,
        /// Time from handing the call over to its answer.
        wall_ms: u64,
    },
    /// A handler failed or the host panicked while running the tool.
    Failed {
        /// What happened.
        message: String,
    },
}

mod approval;
mod guard;
mod outcome_lines;
mod policy;
mod recording;

pub use approval::{APPROVAL_MISMATCH, OUTSIDE_SCOPE, scope_within};
use guard::Open;
pub use guard::{Call, OwnedCall};
use outcome_lines::{Decisions, Ended, Stated, execution_of, outcome_line};
pub use policy::{PolicyAsk, PolicyDecided, replay_policy};
use policy::{axis_names, decide_policy};
pub use recording::ArgumentRecording;

/// What a sandbox that could not start the tool becomes.
fn could_not_start(e: &SandboxError) -> Executed {
    Executed::NotStarted {
        cause: Cause::NotStarted,
        reason: format!("the sandbox could not start the tool: {e}"),
    }
}

/// What a panic caught while running a tool becomes.
fn host_panic(panic: &(dyn std::any::Any + Send)) -> Executed {
    Executed::Failed {
        message: format!("host panic: {}", panic_message(panic)),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
