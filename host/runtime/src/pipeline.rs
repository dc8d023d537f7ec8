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
use crate::outcome::Ending;
use crate::profile::ProfileError;
use crate::sandbox::{CancelToken, Sandbox, SandboxError};
use aegis_policy_arguments::unambiguous::canonical_object;
use aegis_record::json::SafeInt;
use aegis_record::line::Stop;
use aegis_record::refusal::{Cause, Refusal, Station};
use aegis_record::{
    CapabilityOutcome, DecisionAxes, ExecutionOutcome, FsAxis, IntentLine, NetAxis, OutcomeLine,
    PolicyOutcome, PolicySetHash, RequestDigest, ResponseDigest, WriteError,
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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;

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

/// How a call ended, derived from its outcome line: one class per refusal path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallClass {
    /// It ran and its output was handed back.
    Success,
    /// A policy rule refused it.
    PolicyDenied,
    /// A rate limit refused it.
    RateLimited,
    /// It was parked for approval and refused for now.
    PendingApproval,
    /// No grant: the capability station refused it.
    CapabilityDenied,
    /// It trapped, failed, or the host panicked while running it.
    Trap,
    /// A ceiling stopped it.
    ResourceExceeded,
    /// The host did not run it (it could not start the tool, or the call was
    /// abandoned), or a host handler's context refused an effect outside the grant; or
    /// the call stopped before any station decided (see [`stopped_before_the_stations`]):
    /// the caller refused it itself, as the MCP relay does a call to an unknown tool.
    HostDenied,
}

impl CallClass {
    /// The class an outcome line states: by what stopped it
    /// ([`OutcomeLine::stopped`]: the line's `stop`, or on an older line what its
    /// reasons state), else by the tool's own ending. A call no station decided is
    /// [`CallClass::HostDenied`], never a policy denial: no policy was asked.
    pub fn of(outcome: &OutcomeLine) -> CallClass {
        let Some(stop) = outcome.stopped() else {
            return match &outcome.execution {
                ExecutionOutcome::Success => CallClass::Success,
                ExecutionOutcome::Trap { .. } => CallClass::Trap,
                ExecutionOutcome::ResourceExceeded { .. } => CallClass::ResourceExceeded,
                ExecutionOutcome::HostDenied { .. } => CallClass::HostDenied,
            };
        };
        match stop.cause {
            Cause::Denied | Cause::StationFailed => CallClass::PolicyDenied,
            Cause::RateLimited => CallClass::RateLimited,
            Cause::PendingApproval => CallClass::PendingApproval,
            cause if cause.station() == Station::Capability => CallClass::CapabilityDenied,
            _ => CallClass::HostDenied,
        }
    }
}

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
            (PolicyOutcome::PendingApproval { approval_id }, _) => {
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
}

/// A failure to keep the record. Each variant says whether anything ran.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The intent line could not be written: nothing ran.
    #[error("the intent line could not be written, so nothing ran: {0}")]
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

/// The four stations, assembled. Share it between threads: every method takes `&self`.
pub struct Pipeline {
    policy: PolicyEvaluatorBox,
    tools: ToolRegistry,
    handlers: BTreeMap<String, HostHandler>,
    sandbox: Arc<Sandbox>,
    audit: OpenedAudit,
    /// Names this session's calls: the first 64 bits of its open line's hash. The open
    /// line carries a random nonce, so call ids stay distinct across the sessions of one
    /// record and across records, even with the same key.
    call_prefix: String,
    calls: AtomicU64,
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
            audit,
            call_prefix,
            calls: AtomicU64::new(0),
        }
    }

    /// Where the record goes, for the operator.
    pub fn notice(&self) -> &AuditNotice {
        &self.audit.notice
    }

    /// The audit session.
    pub fn audit(&self) -> &OpenedAudit {
        &self.audit
    }

    /// Ends the pipeline, handing back its audit session (to close or export it).
    pub fn into_audit(self) -> OpenedAudit {
        self.audit
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
        self.audit
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
        self.open_call(request)?.finish(
            self,
            Executed::NotStarted {
                cause: refusal.cause,
                reason,
            },
        )
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
                d.capability = Some(CapabilityOutcome::Granted {
                    grant: grant.to_record(),
                });
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

/// The call as its caller stated it, owned by the call: what the stations are asked
/// about and what the outcome names it by. Fixed once the intent is written.
#[derive(Clone, Debug)]
struct Stated {
    call_id: String,
    tool_id: String,
    request_digest: RequestDigest,
    /// Read when the call opened, just before the policy is asked.
    policy_set_hash: PolicySetHash,
    capability: Option<String>,
    role: Option<String>,
    session: Option<String>,
    arguments: Option<String>,
}

impl Stated {
    /// What the policy station is asked about this call.
    fn ask(&self) -> PolicyAsk<'_> {
        PolicyAsk {
            tool_id: &self.tool_id,
            role: self.role.as_deref(),
            session: self.session.as_deref(),
            arguments: self.arguments.as_deref(),
        }
    }

    fn of(call_id: String, request: &CallRequest<'_>, pipeline: &Pipeline) -> Stated {
        Stated {
            call_id,
            tool_id: request.tool_id.to_owned(),
            request_digest: request.request_digest(),
            policy_set_hash: pipeline.policy_set_hash(),
            capability: request.capability.map(str::to_owned),
            role: request.role.map(str::to_owned),
            session: request.session.map(str::to_owned),
            arguments: request.arguments.map(str::to_owned),
        }
    }
}

/// What stations 1 and 2 decided, collected as they answer. A station that has not
/// answered is `None`, and is recorded as not reached, so an outcome written early
/// claims nothing that did not happen.
#[derive(Clone, Debug, Default)]
struct Decisions {
    policy: Option<PolicyOutcome>,
    matched_rule: Option<String>,
    /// The argument values the deciding rule compared (canonical JSON text).
    arguments_read: Option<String>,
    capability: Option<CapabilityOutcome>,
    grant_id: Option<String>,
    fs: Option<FsAxis>,
    net: Option<NetAxis>,
    /// Why nothing runs, once a station refused: the stop, and the execution's words
    /// (`not executed`, `parked for approval`).
    refused: Option<(Stop, Cow<'static, str>)>,
}

impl Decisions {
    fn refuse_before_capability(&mut self, policy: PolicyOutcome, stop: Stop, why: &'static str) {
        self.policy = Some(policy);
        self.capability = Some(CapabilityOutcome::Denied {
            reason: POLICY_BLOCKED.to_owned(),
            denied_capability: None,
        });
        self.refused = Some((stop, why.into()));
    }

    /// The ending of a call that ran nothing: the refusal, or (no station refused)
    /// an abandonment.
    fn not_run(&self) -> Ended {
        match &self.refused {
            Some((stop, why)) => Ended::stopped(stop.clone(), why.clone().into_owned()),
            None => Ended::stopped(Stop::new(self.abandoned()), ABANDONED.to_owned()),
        }
    }

    /// The cause of abandoning the call now: before the stations, or after they allowed.
    fn abandoned(&self) -> Cause {
        if self.policy.is_none() {
            Cause::AbandonedBeforeStations
        } else {
            Cause::Abandoned
        }
    }
}

/// What the execution step leaves on the outcome line.
struct Ended {
    execution: ExecutionOutcome,
    response_digest: Option<ResponseDigest>,
    wall_ms: Option<u64>,
    peak_memory_bytes: Option<u64>,
    /// Set exactly when `execution` is `host_denied`: what stopped the call.
    stop: Option<Stop>,
}

impl Ended {
    /// The host did not run the tool (`host_denied`), for `stop`.
    fn stopped(stop: Stop, reason: String) -> Ended {
        Ended {
            stop: Some(stop),
            ..Ended::unmeasured(ExecutionOutcome::HostDenied { reason })
        }
    }

    /// An ending of the tool's own that left no measurements.
    fn unmeasured(execution: ExecutionOutcome) -> Ended {
        Ended {
            execution,
            response_digest: None,
            wall_ms: None,
            peak_memory_bytes: None,
            stop: None,
        }
    }
}

/// The record's execution object for an ending other than success.
fn execution_of(ending: Ending) -> ExecutionOutcome {
    match ending {
        Ending::Success => ExecutionOutcome::Success,
        Ending::Exit(code) => ExecutionOutcome::Trap {
            message: format!("the tool exited with status {code}"),
        },
        Ending::Trap(message) => ExecutionOutcome::Trap { message },
        Ending::ToolError(message) => ExecutionOutcome::Trap {
            message: format!("the tool returned an error: {message}"),
        },
        // The tool was stopped mid-run, like a trap; not `host_denied`, which says the
        // tool never ran.
        Ending::Cancelled(why) => ExecutionOutcome::Trap {
            message: format!("cancelled: {why}"),
        },
        Ending::ServerDied(why) => ExecutionOutcome::Trap {
            message: format!("the server died: {why}"),
        },
        Ending::Exceeded(kind) => ExecutionOutcome::ResourceExceeded {
            kind: kind.kind().to_owned(),
        },
    }
}

/// The outcome line, built once from the call as stated, what the stations decided
/// and how it ended.
fn outcome_line(stated: Stated, d: Decisions, ended: Ended) -> OutcomeLine {
    let not_reached = || NOT_REACHED.to_owned();
    OutcomeLine {
        call_id: stated.call_id,
        tool_id: stated.tool_id,
        request_digest: stated.request_digest,
        policy_set_hash: stated.policy_set_hash,
        policy: d.policy.unwrap_or_else(|| PolicyOutcome::Denied {
            reason: not_reached(),
        }),
        capability: d.capability.unwrap_or_else(|| CapabilityOutcome::Denied {
            reason: not_reached(),
            denied_capability: None,
        }),
        execution: ended.execution,
        grant_id: d.grant_id,
        response_digest: ended.response_digest,
        wall_ms: ended.wall_ms.map(safe),
        peak_memory_bytes: ended.peak_memory_bytes.map(safe),
        decision_axes: DecisionAxes {
            capability: stated.capability,
            role: stated.role,
            session: stated.session,
            matched_rule: d.matched_rule,
            fs: d.fs,
            net: d.net,
            arguments: d.arguments_read,
            ..DecisionAxes::default()
        },
        stop: ended.stop,
    }
}

fn safe(n: u64) -> SafeInt {
    SafeInt::new(n.min(aegis_record::json::MAX_SAFE_INTEGER)).unwrap_or_default()
}

/// A call between its intent and its outcome: what both guards hold.
#[derive(Debug)]
struct Open {
    stated: Stated,
    decided: Decisions,
}

impl Open {
    fn authorize(&mut self, pipeline: &Pipeline) -> Option<Grant> {
        let (decided, grant) = pipeline.stations_1_2(&self.stated);
        self.decided = decided;
        grant
    }

    fn finish(self, pipeline: &Pipeline, executed: Executed) -> Result<CallRecord, PipelineError> {
        let mut output = None;
        let mut stderr = Vec::new();
        let ended = match executed {
            Executed::NotRun => self.decided.not_run(),
            Executed::NotStarted { cause, reason } => Ended::stopped(Stop::new(cause), reason),
            Executed::Failed { message } => Ended::unmeasured(ExecutionOutcome::Trap { message }),
            // A handler's context refused an effect: the tool started, so its time is
            // recorded; it used no linear memory.
            Executed::Refused {
                axis,
                reason,
                wall_ms,
            } => Ended {
                wall_ms: Some(wall_ms),
                peak_memory_bytes: Some(0),
                ..Ended::stopped(Stop::about(Cause::EffectRefused, axis.as_str()), reason)
            },
            Executed::Ran {
                ending,
                output: produced,
                wall_ms,
                peak_memory_bytes,
                stderr: said,
            } => {
                stderr = said;
                // The sandbox hands output back on success only.
                if ending == Ending::Success {
                    output = Some(produced.unwrap_or_default());
                }
                Ended {
                    response_digest: output.as_deref().map(ResponseDigest::of_response),
                    execution: execution_of(ending),
                    wall_ms: Some(wall_ms),
                    peak_memory_bytes: Some(peak_memory_bytes),
                    stop: None,
                }
            }
            Executed::Relayed {
                ending,
                response,
                wall_ms,
            } => {
                if matches!(ending, Ending::Success | Ending::ToolError(_)) {
                    output = Some(response.unwrap_or_default());
                }
                Ended {
                    response_digest: output.as_deref().map(ResponseDigest::of_response),
                    execution: execution_of(ending),
                    wall_ms: Some(wall_ms),
                    peak_memory_bytes: None,
                    stop: None,
                }
            }
        };
        let outcome = outcome_line(self.stated, self.decided, ended);
        match pipeline.audit.session.append(&outcome) {
            Ok(appended) => Ok(CallRecord {
                outcome,
                seq: appended.seq,
                output,
                stderr,
            }),
            Err(source) => Err(PipelineError::Outcome {
                call_id: outcome.call_id,
                source,
            }),
        }
    }

    /// The drop guard's outcome: what had been decided, and an execution that says
    /// the call was abandoned (or, while unwinding, that the host panicked).
    fn abandon(self, pipeline: &Pipeline) {
        let ended = if std::thread::panicking() {
            Ended::unmeasured(ExecutionOutcome::Trap {
                message: HOST_PANIC.to_owned(),
            })
        } else {
            Ended::stopped(Stop::new(self.decided.abandoned()), ABANDONED.to_owned())
        };
        let outcome = outcome_line(self.stated, self.decided, ended);
        // Nothing to report to: a failure here has already poisoned the session, and
        // the missing outcome leaves the call in flight for `aegis verify` to flag.
        let _ = pipeline.audit.session.append(&outcome);
    }
}

/// An open call: its intent is on the record and it owes exactly one outcome.
///
/// Finish it with [`Call::finish`]; dropping it unfinished records the abandonment.
/// It borrows its pipeline; [`OwnedCall`] is the same guard owning a share of it.
pub struct Call<'p> {
    pipeline: &'p Pipeline,
    /// `None` once its outcome is written.
    open: Option<Open>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl Call<'_> {
    /// The call's id (as on its intent and outcome lines).
    pub fn call_id(&self) -> &str {
        self.open.as_ref().map_or("", |o| o.stated.call_id.as_str())
    }

    /// Asks the policy station, then the capability station. Returns the grant, or
    /// `None` when a station refused (the refusal is now what the outcome will say).
    pub fn authorize(&mut self) -> Option<Grant> {
        let pipeline = self.pipeline;
        self.open.as_mut()?.authorize(pipeline)
    }

    /// Records how the call ended and, only once that is durable, hands back its output.
    ///
    /// # Errors
    /// [`PipelineError::Outcome`]: the output is withheld.
    pub fn finish(mut self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let open = self.open.take().expect("a call is finished once, by value");
        open.finish(self.pipeline, executed)
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            open.abandon(self.pipeline);
        }
    }
}

/// An open call that owns a share of its pipeline: `Send` and `'static`, so it can be
/// moved to another thread, kept in a map keyed by request id, and finished there.
///
/// The promise is [`Call`]'s: [`OwnedCall::finish`] writes the outcome; dropped
/// unfinished, on whatever thread, it writes one saying the call was abandoned (a
/// host panic when that thread is unwinding), with what the stations had decided by
/// then. The pipeline (and its audit session) lives at least as long as the guard.
pub struct OwnedCall {
    pipeline: Arc<Pipeline>,
    /// `None` once its outcome is written.
    open: Option<Open>,
}

impl std::fmt::Debug for OwnedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedCall")
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl OwnedCall {
    /// The call's id (as on its intent and outcome lines).
    pub fn call_id(&self) -> &str {
        self.open.as_ref().map_or("", |o| o.stated.call_id.as_str())
    }

    /// The pipeline the call belongs to (to run its tool: [`Pipeline::run_tool`]).
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Asks the policy station, then the capability station. Returns the grant, or
    /// `None` when a station refused (the refusal is now what the outcome will say).
    pub fn authorize(&mut self) -> Option<Grant> {
        let open = self.open.as_mut()?;
        open.authorize(&self.pipeline)
    }

    /// Records how the call ended and, only once that is durable, hands back its output.
    ///
    /// # Errors
    /// [`PipelineError::Outcome`]: the output is withheld.
    pub fn finish(mut self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let open = self.open.take().expect("a call is finished once, by value");
        open.finish(&self.pipeline, executed)
    }
}

impl Drop for OwnedCall {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            open.abandon(&self.pipeline);
        }
    }
}

/// The policy's answer for a whole call.
struct PolicyAnswer<'a> {
    /// The first refusal, or (when every axis is allowed) the first axis's allow. Its
    /// rule and reason are positions in `table`, checked to be there.
    decision: IndexedDecision,
    /// The names `decision` points into: the table of the policy generation that
    /// decided, shared with the evaluator.
    table: RArc<DecisionTable>,
    /// Set with a pending approval: names the park.
    approval_id: ROption<RString>,
    /// The axis `decision` answered (`""` when the grant carries none).
    axis: &'a str,
    /// The narrowest of every answer's limits.
    narrowing: NarrowingLimits,
    /// The argument values the deciding rule compared, as canonical JSON text; `None`
    /// when it compared none.
    arguments_read: Option<String>,
    /// The decision turned on arguments that were not given.
    arguments_needed: bool,
}

impl PolicyAnswer<'_> {
    /// The rule that decided, or `None` for the policy's default.
    fn matched_rule(&self) -> Option<&str> {
        self.table.rule(self.decision.rule)
    }

    /// Why, for the record.
    fn reason(&self) -> &str {
        self.table.reason(self.decision.reason).unwrap_or_default()
    }
}

/// The most axes a call is asked about: one slot each, on the stack.
const MAX_AXES: usize = Capability::ALL.len();

/// Asks `policy` about each of `axes` (in order) for the call as stated, with its
/// arguments, as one call through
/// [`PolicyEvaluator::evaluate_call`](aegis_station_api::PolicyEvaluator):
/// the plugin counts the call once and names its rule and reason by position in a table
/// it shares, so the ask allocates nothing here.
///
/// The call is allowed only if every axis is. The answer must hold one decision per
/// axis up to and including the first that is not an allow; anything else (none, too
/// many, an allow after a refusal, a stop without one) is a station failure, and so is
/// a decision naming a rule or reason its table does not hold: the call is refused.
///
/// # Errors
/// A one-line reason the station failed.
fn ask_policy<'a>(
    policy: &PolicyEvaluatorBox,
    call: &PolicyAsk<'_>,
    axes: &[RStr<'a>],
) -> Result<PolicyAnswer<'a>, String> {
    let ask = PolicyRequest {
        tool_id: call.tool_id.into(),
        capability: "".into(),
        role: call.role.unwrap_or("").into(),
        session: call.session.unwrap_or("").into(),
    };
    let mut slots = [IndexedDecision::default(); MAX_AXES];
    let Some(out) = slots.get_mut(..axes.len()) else {
        // Never built: the axes are a subset of `Capability::ALL` or one name.
        return Err(format!(
            "{} axes to ask about, more than {MAX_AXES}",
            axes.len()
        ));
    };
    let arguments = call.arguments.unwrap_or("");
    let CallAnswer {
        answer,
        arguments_read,
        arguments_needed,
    } = policy
        .evaluate_call(
            &ask,
            arguments.into(),
            RSlice::from(axes),
            RSliceMut::from(out),
        )
        .into_result()
        .map_err(|e| e.to_string())?;
    // What the record holds must be one JSON object: anything else is a station fault.
    let arguments_read = match arguments_read.as_str() {
        "" => None,
        text => Some(canonical_object(text.as_bytes()).map_err(|_| {
            "it reported the arguments it read as something other than one JSON object".to_owned()
        })?),
    };
    let shape = || {
        format!(
            "it answered {} decisions for {} axes asked",
            answer.answered,
            axes.len()
        )
    };
    let answers = usize::try_from(answer.answered)
        .ok()
        .filter(|&n| n <= axes.len())
        .and_then(|n| slots.get(..n))
        .ok_or_else(shape)?;
    let refusal = answers.iter().position(|d| d.verdict != Verdict::ALLOW);
    let decided = match refusal {
        Some(i) if i + 1 == answers.len() && answers.len() <= axes.len() => i,
        None if answers.len() == axes.len() && !answers.is_empty() => 0,
        _ => return Err(shape()),
    };
    let decision = answers[decided];
    let table = answer.table;
    if decision.rule != IndexedDecision::NO_RULE && table.rule(decision.rule).is_none() {
        return Err(format!(
            "its decision names rule {}, which its table does not hold",
            decision.rule
        ));
    }
    if table.reason(decision.reason).is_none() {
        return Err(format!(
            "its decision names reason {}, which its table does not hold",
            decision.reason
        ));
    }
    // Every axis's ceilings hold at once.
    let narrowing = answers
        .iter()
        .fold(NarrowingLimits::default(), |n, d| n.meet(d.limits.into()));
    Ok(PolicyAnswer {
        decision,
        table,
        approval_id: answer.approval_id,
        axis: axes[decided].as_str(),
        narrowing,
        arguments_read,
        arguments_needed,
    })
}

/// What the policy station is asked about a call besides its axes: the call as its
/// caller stated it, or as a record states it ([`replay_policy`]).
#[derive(Clone, Copy, Debug)]
pub struct PolicyAsk<'a> {
    /// The tool called.
    pub tool_id: &'a str,
    /// The role the caller asserted (asked as the empty role when `None`).
    pub role: Option<&'a str>,
    /// The policy session scope (asked as the empty scope when `None`).
    pub session: Option<&'a str>,
    /// The call's arguments as RFC 8785 canonical JSON, or `None` when unknown (a
    /// replay has none: records keep what a rule compared, not the arguments).
    pub arguments: Option<&'a str>,
}

/// The policy station's decision on one call, as the record states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyDecided {
    /// `Allowed`, or the refusal the outcome records (a station failure or an
    /// unknown verdict is a `Denied` that says so).
    pub policy: PolicyOutcome,
    /// The rule that decided: `None` for the policy's default, or when the station
    /// failed.
    pub matched_rule: Option<String>,
    /// The narrowest of every axis's limits (what an allow narrows the grant by).
    narrowing: NarrowingLimits,
    /// The argument values the deciding rule compared (canonical JSON text), for
    /// `decision_axes.arguments`.
    pub arguments_read: Option<String>,
    /// The station said the decision turned on arguments it was not given (it decided
    /// the way that cannot widen): a replay cannot know what the call would get.
    pub arguments_needed: bool,
    /// For a refusal, its cause and the grant axis it was about; `None` for an allow.
    pub stop: Option<Stop>,
}

/// Asks `policy` about `axes` for the call `ask` and reads the answer exactly as a live
/// call's is read: one ask for the whole call ([`ask_policy`]), the first refusal
/// recorded with its axis when `grant_axes` (the axes are the grant's, not a name the
/// caller made up), a station failure or an unknown verdict refused.
fn decide_policy(
    policy: &PolicyEvaluatorBox,
    ask: &PolicyAsk<'_>,
    axes: &[RStr<'_>],
    grant_axes: bool,
) -> PolicyDecided {
    let failed = |reason| PolicyDecided {
        policy: PolicyOutcome::Denied { reason },
        matched_rule: None,
        narrowing: NarrowingLimits::default(),
        arguments_read: None,
        arguments_needed: false,
        stop: Some(Stop::new(Cause::StationFailed)),
    };
    let mut answer = match ask_policy(policy, ask, axes) {
        Ok(answer) => answer,
        Err(why) => {
            return failed(format!(
                "the policy station failed, so the call is refused: {why}"
            ));
        }
    };
    // A refusal names the grant axis it was about; a name the caller made up is
    // already on the record as decision_axes.capability and is not repeated. An allow
    // records no reason, so none is built for it.
    let axis = Some(answer.axis).filter(|axis| grant_axes && !axis.is_empty());
    let refusal = || match axis {
        Some(axis) => format!("{axis}: {}", answer.reason()),
        None => answer.reason().to_owned(),
    };
    let about = |cause| Stop {
        cause,
        axis: axis.map(str::to_owned),
    };
    let (policy, stop) = match answer.decision.verdict {
        Verdict::ALLOW => (PolicyOutcome::Allowed, None),
        Verdict::DENY => (
            PolicyOutcome::Denied { reason: refusal() },
            Some(about(Cause::Denied)),
        ),
        Verdict::RATE_LIMIT => (
            PolicyOutcome::RateLimited { reason: refusal() },
            Some(about(Cause::RateLimited)),
        ),
        Verdict::PENDING_APPROVAL => match answer.approval_id.clone().into_option() {
            Some(approval_id) => (
                PolicyOutcome::PendingApproval {
                    approval_id: approval_id.into_string(),
                },
                Some(about(Cause::PendingApproval)),
            ),
            None => (
                PolicyOutcome::Denied {
                    reason: "pending_approval without an approval id".to_owned(),
                },
                Some(Stop::new(Cause::StationFailed)),
            ),
        },
        Verdict(other) => (
            PolicyOutcome::Denied {
                reason: format!(
                    "the policy station answered verdict {other}, unknown to this host"
                ),
            },
            Some(Stop::new(Cause::StationFailed)),
        ),
    };
    PolicyDecided {
        policy,
        stop,
        // The one string an allow builds: the record owns its matched rule.
        matched_rule: answer.matched_rule().map(str::to_owned),
        narrowing: answer.narrowing,
        arguments_read: answer.arguments_read.take(),
        arguments_needed: answer.arguments_needed,
    }
}

/// What `policy` decides about a call a record states, read exactly as the pipeline
/// reads a live answer ([`Pipeline`] asks through the same code): `aegis recheck`'s
/// replay. Nothing is recorded, granted or run.
///
/// `axes` are the names the live call was asked about, in order (one empty name for a
/// grant that carries none); `grant_axes` says they were the grant's axes, so a refusal
/// is prefixed with its axis as the live record would be. More than three axes is a
/// station failure, as it would be live.
///
/// A rate_limit rule's budget is the station's state: each replayed ask spends it as a
/// live call would.
pub fn replay_policy(
    policy: &PolicyEvaluatorBox,
    ask: &PolicyAsk<'_>,
    axes: &[&str],
    grant_axes: bool,
) -> PolicyDecided {
    let mut names = [RStr::from(""); MAX_AXES];
    match names.get_mut(..axes.len()) {
        Some(slots) => {
            for (slot, axis) in slots.iter_mut().zip(axes) {
                *slot = RStr::from(*axis);
            }
            decide_policy(policy, ask, slots, grant_axes)
        }
        // More than a call is ever asked about: `ask_policy` refuses them, as live.
        None => {
            let all: Vec<RStr<'_>> = axes.iter().map(|a| RStr::from(*a)).collect();
            decide_policy(policy, ask, &all, grant_axes)
        }
    }
}

/// The names the policy is asked about for a grant carrying `axes` (a subset of
/// [`Capability::ALL`], in that order): one empty name when it carries none. Static, so
/// no call builds them.
fn axis_names(axes: &[Capability]) -> &'static [RStr<'static>] {
    const fn n(c: Capability) -> RStr<'static> {
        RStr::from_str(c.as_str())
    }
    use Capability::{FsRead as R, FsWrite as W, NetHttp as N};
    const NONE: &[RStr<'static>] = &[RStr::from_str("")];
    const R_: &[RStr<'static>] = &[n(R)];
    const W_: &[RStr<'static>] = &[n(W)];
    const N_: &[RStr<'static>] = &[n(N)];
    const RW: &[RStr<'static>] = &[n(R), n(W)];
    const RN: &[RStr<'static>] = &[n(R), n(N)];
    const WN: &[RStr<'static>] = &[n(W), n(N)];
    const RWN: &[RStr<'static>] = &[n(R), n(W), n(N)];
    match axes {
        [] => NONE,
        [R] => R_,
        [W] => W_,
        [N] => N_,
        [R, W] => RW,
        [R, N] => RN,
        [W, N] => WN,
        [R, W, N] => RWN,
        // Not in `Capability::ALL` order: never built by the registry. Asking about
        // every axis keeps a mismatch failing closed (`CapabilityDenied::Unasked`).
        _ => RWN,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use aegis_station_api::{ErrorKind, PluginError, PolicyDecision};

    /// Every subset of the axes, in order, is asked about by exactly its names.
    #[test]
    fn axis_names_are_the_axes_names() {
        for mask in 0..8u8 {
            let axes: Vec<Capability> = Capability::ALL
                .into_iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, c)| c)
                .collect();
            let names: Vec<&str> = axis_names(&axes).iter().map(RStr::as_str).collect();
            let want: Vec<&str> = if axes.is_empty() {
                vec![""]
            } else {
                axes.iter().map(|c| c.as_str()).collect()
            };
            assert_eq!(names, want, "{axes:?}");
        }
    }

    /// A station that answers `answered` decisions of `verdicts`, naming `rule` and
    /// `reason` in a table of one rule and one reason.
    struct Answers {
        verdicts: Vec<Verdict>,
        answered: u32,
        rule: u32,
        reason: u32,
    }

    impl aegis_station_api::Policy for Answers {
        fn policy_set_hash(&self) -> [u8; 32] {
            [0; 32]
        }

        fn evaluate(&self, _: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
            Err(PluginError::new(ErrorKind::OTHER, "not asked"))
        }

        fn evaluate_axes_indexed(
            &self,
            _: &PolicyRequest<'_>,
            _: &[RStr<'_>],
            out: &mut [IndexedDecision],
        ) -> Result<aegis_station_api::IndexedAnswer, PluginError> {
            for (slot, &verdict) in out.iter_mut().zip(&self.verdicts) {
                *slot = IndexedDecision {
                    verdict,
                    rule: self.rule,
                    reason: self.reason,
                    limits: Default::default(),
                };
            }
            Ok(aegis_station_api::IndexedAnswer {
                table: RArc::new(DecisionTable {
                    rules: vec![RString::from("the-rule")].into(),
                    reasons: vec![RString::from("the reason")].into(),
                }),
                answered: self.answered,
                approval_id: ROption::RNone,
            })
        }
    }

    fn ask(answers: Answers, axes: &[&'static str]) -> Result<(Option<String>, String), String> {
        use aegis_station_api::abi_stable::sabi_trait::TD_Opaque;
        let policy = aegis_station_api::PolicyEvaluator_TO::from_value(
            aegis_station_api::Guarded(answers),
            TD_Opaque,
        );
        let call = Stated {
            call_id: "c".into(),
            tool_id: "t".into(),
            request_digest: CallRequest::new("t", b"{}").request_digest(),
            policy_set_hash: PolicySetHash::of_canonical_set(b""),
            capability: None,
            role: None,
            session: None,
            arguments: None,
        };
        let axes: Vec<RStr<'static>> = axes.iter().map(|a| RStr::from(*a)).collect();
        let a = ask_policy(&policy, &call.ask(), &axes)?;
        Ok((a.matched_rule().map(str::to_owned), a.reason().to_owned()))
    }

    /// An indexed answer is read through its table, and one the table cannot back (a
    /// rule or reason it does not hold, more decisions than axes, an allow after a
    /// refusal) is a station failure: the call is refused, never recorded with a guess.
    #[test]
    fn an_indexed_answer_is_checked_against_its_table() {
        let (allow, deny) = (Verdict::ALLOW, Verdict::DENY);
        let answers = |verdicts: Vec<Verdict>, answered, rule, reason| Answers {
            verdicts,
            answered,
            rule,
            reason,
        };
        let good = ask(
            answers(vec![allow, allow], 2, 0, 0),
            &["fs.read", "fs.write"],
        );
        assert_eq!(good, Ok((Some("the-rule".into()), "the reason".into())));
        let default = ask(
            answers(vec![deny], 1, IndexedDecision::NO_RULE, 0),
            &["fs.read"],
        );
        assert_eq!(default, Ok((None, "the reason".into())));
        for (bad, axes, why) in [
            (
                answers(vec![allow], 1, 1, 0),
                &["fs.read"][..],
                "names rule 1",
            ),
            (
                answers(vec![allow], 1, 0, 1),
                &["fs.read"][..],
                "names reason 1",
            ),
            (
                answers(vec![allow], 2, 0, 0),
                &["fs.read"][..],
                "2 decisions for 1",
            ),
            (
                answers(vec![allow], 0, 0, 0),
                &["fs.read"][..],
                "0 decisions for 1",
            ),
            (
                answers(vec![deny, allow], 2, 0, 0),
                &["fs.read", "fs.write"][..],
                "2 decisions for 2",
            ),
            (
                answers(vec![allow, allow, allow, allow], 4, 0, 0),
                &["fs.read", "fs.write", "net.http", "x"][..],
                "4 axes to ask about",
            ),
        ] {
            let e = ask(bad, axes).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }
}
