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
//!   (`evaluate_axes`), so a rate limit counts the call once. A plugin built before
//!   that method existed is asked per axis by abi_stable's fallback (see
//!   `spec/PLUGINS.md`).
//!
//! # Non-guarantees
//! - The role and session are what the caller asserts; nothing here authenticates
//!   them, so a rule keyed on a role sorts cooperating callers only.
//! - A call naming a capability the tool does not declare (or a name that is not one)
//!   gets no grant, but the policy is still asked first, once, about the name as given.
//! - The policy set hash is read just before the verdict; a reload landing between the
//!   two reads is attributed to the newer set.
//! - Model B handlers are checked, not isolated (see [`crate::handler`]): their effects
//!   through the context are checked, but the pipeline cannot stop host code, so a
//!   handler's time is measured, not bounded.
//! - A call whose outcome cannot be written (the sink failed) is refused to its caller,
//!   but what the tool did is not undone; the session is poisoned and `aegis verify`
//!   reports the call in flight.

use crate::audit::{AuditNotice, OpenedAudit, RetentionError, open_audit};
use crate::capability::{CapabilityDenied, Grant, NarrowingLimits, ToolKind, ToolRegistry};
use crate::handler::{self, Axis, HostHandler};
use crate::profile::{Profile, ProfileError};
use crate::registry::Registry;
use crate::sandbox::{CancelToken, Ending, Sandbox};
use aegis_record::json::SafeInt;
use aegis_record::key::SigningKey;
use aegis_record::{
    CapabilityOutcome, DecisionAxes, ExecutionOutcome, FsAxis, IntentLine, NetAxis, OutcomeLine,
    PolicyOutcome, PolicySetHash, RequestDigest, ResponseDigest, WriteError,
};
use aegis_station_api::abi_stable::std_types::{RSlice, RStr};
use aegis_station_api::{PolicyDecision, PolicyEvaluatorBox, PolicyRequest, Verdict};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The reason recorded for a station that never decided because the call stopped first.
const NOT_REACHED: &str = "not reached: the call stopped before this station";
/// The capability station's reason when policy refused first.
pub const POLICY_BLOCKED: &str = "policy refused before capability";
/// The execution reason when a station refused the call.
pub const NOT_EXECUTED: &str = "not executed";
/// The execution reason for a call parked for approval.
pub const PARKED: &str = "parked for approval";
/// The execution reason written by the drop guard.
pub const ABANDONED: &str = "call abandoned before completion";
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
    /// abandoned), or a host handler's context refused an effect outside the grant.
    HostDenied,
}

impl CallClass {
    /// The class an outcome line states.
    pub fn of(outcome: &OutcomeLine) -> CallClass {
        match (&outcome.policy, &outcome.capability, &outcome.execution) {
            (PolicyOutcome::Denied { .. }, _, _) => CallClass::PolicyDenied,
            (PolicyOutcome::RateLimited { .. }, _, _) => CallClass::RateLimited,
            (PolicyOutcome::PendingApproval { .. }, _, _) => CallClass::PendingApproval,
            (_, CapabilityOutcome::Denied { .. }, _) => CallClass::CapabilityDenied,
            (_, _, ExecutionOutcome::Success) => CallClass::Success,
            (_, _, ExecutionOutcome::Trap { .. }) => CallClass::Trap,
            (_, _, ExecutionOutcome::ResourceExceeded { .. }) => CallClass::ResourceExceeded,
            (_, _, ExecutionOutcome::HostDenied { .. }) => CallClass::HostDenied,
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
}

/// What the host brings to a pipeline besides the profile's plugins.
pub struct Setup {
    /// The operator's signing key; `None` is the development key (volatile sinks only).
    pub key: Option<SigningKey>,
    /// The registered tools.
    pub tools: ToolRegistry,
    /// Handlers for `host` tools, by tool id.
    pub handlers: BTreeMap<String, HostHandler>,
    /// The sandbox for `wasm` tools (shareable between pipelines).
    pub sandbox: Arc<Sandbox>,
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
    /// Assembles the profile's policy and audit stations with the host's tools and
    /// sandbox, and opens the audit session (its open line records the provenance).
    ///
    /// # Errors
    /// See [`OpenError`]; nothing is recorded unless the session opened.
    pub fn open(
        profile: &Profile,
        registry: &Registry,
        setup: Setup,
    ) -> Result<Pipeline, OpenError> {
        let policy_plugin = profile.resolve(registry, "policy", &profile.policy)?;
        let policy = policy_plugin
            .policy_evaluator(&profile.policy.config)
            .map_err(|e| profile.plugin_error("policy", &profile.policy, e.to_string()))?;
        let sink_plugin = profile.resolve(registry, "audit", &profile.audit)?;
        let sink = sink_plugin
            .audit_sink(&profile.audit.config)
            .map_err(|e| profile.plugin_error("audit", &profile.audit, e.to_string()))?;
        let audit = open_audit(
            sink,
            &sink_plugin,
            setup.key,
            profile,
            &[("policy", &policy_plugin), ("audit", &sink_plugin)],
        )?;
        Ok(Pipeline::from_parts(
            policy,
            audit,
            setup.tools,
            setup.handlers,
            setup.sandbox,
        ))
    }

    /// Assembles a pipeline from stations already built.
    pub fn from_parts(
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
    ///
    /// # Errors
    /// Only a failure to keep the record: see [`PipelineError`].
    pub fn call(&self, request: &CallRequest<'_>) -> Result<CallRecord, PipelineError> {
        let mut call = self.begin(request)?;
        let Some(grant) = call.authorize() else {
            return call.finish(Executed::NotRun);
        };
        let executed = match catch_unwind(AssertUnwindSafe(|| self.execute(request, &grant))) {
            Ok(executed) => executed,
            Err(panic) => Executed::Failed {
                message: format!("host panic: {}", panic_message(panic.as_ref())),
            },
        };
        call.finish(executed)
    }

    /// Opens a call: writes its intent line and returns the guard that owes its outcome.
    ///
    /// # Errors
    /// [`PipelineError::Intent`]: nothing ran and no outcome is owed.
    pub fn begin<'p>(&'p self, request: &CallRequest<'_>) -> Result<Call<'p>, PipelineError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("call-{}-{n}", self.call_prefix);
        let request_digest = request.request_digest();
        let policy_set_hash = self.policy_set_hash();
        self.audit
            .session
            .append_unsigned(&IntentLine {
                call_id: call_id.clone(),
                tool_id: request.tool_id.to_owned(),
                request_digest,
            })
            .map_err(PipelineError::Intent)?;
        Ok(Call {
            pipeline: self,
            outcome: Some(draft(call_id, request, request_digest, policy_set_hash)),
        })
    }

    /// Runs the policy and capability stations over `request` without recording or
    /// executing anything: the outcome they would lead to (unsigned, with a placeholder
    /// call id) and the grant, if one was minted. For benches, and for re-evaluating a
    /// recorded call.
    pub fn decide(&self, request: &CallRequest<'_>) -> (OutcomeLine, Option<Grant>) {
        let mut o = draft(
            String::from("call-undecided"),
            request,
            request.request_digest(),
            self.policy_set_hash(),
        );
        let grant = self.stations_1_2(&mut o);
        (o, grant)
    }

    /// Stations 1 and 2 over a draft outcome: the request's tool and axes are read
    /// from it, and each station's decision is written into it.
    ///
    /// The policy is asked about every axis the grant would carry
    /// ([`ToolRegistry::axes`]), not only the one the call names: see [`ask_policy`].
    fn stations_1_2(&self, o: &mut OutcomeLine) -> Option<Grant> {
        let named = o.decision_axes.capability.clone();
        let planned = self.tools.axes(&o.tool_id, named.as_deref());
        let axes: Vec<&str> = match &planned {
            Ok(axes) if !axes.is_empty() => axes.iter().map(|c| c.as_str()).collect(),
            Ok(_) => vec![""],
            // No grant will be minted; the policy still answers first, about what the
            // call named, so its refusal takes precedence on the record.
            Err(_) => vec![named.as_deref().unwrap_or("")],
        };
        let refused_before_capability = |o: &mut OutcomeLine, policy: PolicyOutcome, why: &str| {
            o.policy = policy;
            o.capability = CapabilityOutcome::Denied {
                reason: POLICY_BLOCKED.to_owned(),
                denied_capability: None,
            };
            o.execution = ExecutionOutcome::HostDenied {
                reason: why.to_owned(),
            };
        };
        let answer = match ask_policy(&self.policy, o, &axes) {
            Ok(answer) => answer,
            Err(why) => {
                let reason = format!("the policy station failed, so the call is refused: {why}");
                refused_before_capability(o, PolicyOutcome::Denied { reason }, NOT_EXECUTED);
                return None;
            }
        };
        let decision = answer.decision;
        o.decision_axes.matched_rule = decision.matched_rule.clone().into_option().map(Into::into);
        // A refusal names the grant axis it was about; a name the caller made up is
        // already on the record as decision_axes.capability and is not repeated.
        let reason = match (&planned, answer.axis) {
            (Ok(_), axis) if !axis.is_empty() => format!("{axis}: {}", decision.reason),
            _ => decision.reason.to_string(),
        };
        match decision.verdict {
            Verdict::ALLOW => o.policy = PolicyOutcome::Allowed,
            Verdict::DENY => {
                refused_before_capability(o, PolicyOutcome::Denied { reason }, NOT_EXECUTED);
                return None;
            }
            Verdict::RATE_LIMIT => {
                refused_before_capability(o, PolicyOutcome::RateLimited { reason }, NOT_EXECUTED);
                return None;
            }
            Verdict::PENDING_APPROVAL => {
                let Some(approval_id) = decision.approval_id.clone().into_option() else {
                    let reason = "pending_approval without an approval id".to_owned();
                    refused_before_capability(o, PolicyOutcome::Denied { reason }, NOT_EXECUTED);
                    return None;
                };
                let approval_id = approval_id.into();
                refused_before_capability(
                    o,
                    PolicyOutcome::PendingApproval { approval_id },
                    PARKED,
                );
                return None;
            }
            Verdict(other) => {
                let reason =
                    format!("the policy station answered verdict {other}, unknown to this host");
                refused_before_capability(o, PolicyOutcome::Denied { reason }, NOT_EXECUTED);
                return None;
            }
        }
        let resolved = planned.and_then(|asked| {
            let grant = self
                .tools
                .resolve(&o.tool_id, named.as_deref(), &answer.narrowing)?;
            // Fail closed should the grant ever carry an axis the policy was not asked
            // about: the two come from one computation over an immutable registry.
            match grant.axes().into_iter().find(|c| !asked.contains(c)) {
                None => Ok(grant),
                Some(unasked) => Err(CapabilityDenied::Unasked {
                    tool: o.tool_id.clone(),
                    capability: unasked,
                }),
            }
        });
        match resolved {
            Ok(grant) => {
                o.capability = CapabilityOutcome::Granted {
                    grant: grant.to_record(),
                };
                o.grant_id = Some(grant.id().to_owned());
                if let Some((raw, canonical)) = grant.single_root() {
                    o.decision_axes.fs = Some(FsAxis {
                        path_raw: raw.display().to_string(),
                        path_canonical: canonical.display().to_string(),
                    });
                }
                if let Some((host, port)) = grant.single_destination() {
                    o.decision_axes.net = Some(NetAxis {
                        host: host.to_owned(),
                        port,
                    });
                }
                // From here an abandonment is of a call that was allowed and granted.
                Some(grant)
            }
            Err(denied) => {
                o.capability = CapabilityOutcome::Denied {
                    reason: denied.to_string(),
                    denied_capability: Some(denied.axis().to_owned()),
                };
                o.execution = ExecutionOutcome::HostDenied {
                    reason: NOT_EXECUTED.to_owned(),
                };
                None
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

    fn execute(&self, request: &CallRequest<'_>, grant: &Grant) -> Executed {
        let Some(manifest) = self.tools.manifest(grant.tool_id()) else {
            return Executed::NotStarted {
                reason: "the tool's manifest is gone".into(),
            };
        };
        match &manifest.kind {
            ToolKind::Wasm { component } => {
                let run = match request.cancel {
                    Some(token) => self.sandbox.run_cancellable(
                        component,
                        grant,
                        request.input,
                        request.args,
                        token,
                    ),
                    None => self
                        .sandbox
                        .run(component, grant, request.input, request.args),
                };
                match run {
                    Ok(run) => Executed::Ran {
                        // The sandbox returns output on success only.
                        ending: run.ending,
                        output: run.output,
                        wall_ms: run.wall_ms,
                        peak_memory_bytes: run.peak_memory_bytes,
                        stderr: run.stderr,
                    },
                    Err(e) => Executed::NotStarted {
                        reason: format!("the sandbox could not start the tool: {e}"),
                    },
                }
            }
            ToolKind::Host => {
                handler::execute(self.handlers.get(grant.tool_id()), grant, request.input)
            }
        }
    }
}

/// What the execution step produced.
#[derive(Debug)]
pub enum Executed {
    /// Nothing ran: a station refused.
    NotRun,
    /// The host could not start the tool.
    NotStarted {
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
    /// A handler failed or the host panicked while running the tool.
    Failed {
        /// What happened.
        message: String,
    },
}

/// An open call: its intent is on the record and it owes exactly one outcome.
///
/// Finish it with [`Call::finish`]; dropping it unfinished records the abandonment.
pub struct Call<'p> {
    pipeline: &'p Pipeline,
    /// The outcome as decided so far; `None` once written.
    outcome: Option<OutcomeLine>,
}

impl std::fmt::Debug for Call<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

/// A call's outcome before any station has decided: every station says it was not
/// reached and the execution says abandoned, so a guard that writes it early claims
/// nothing that did not happen.
fn draft(
    call_id: String,
    request: &CallRequest<'_>,
    request_digest: RequestDigest,
    policy_set_hash: PolicySetHash,
) -> OutcomeLine {
    OutcomeLine {
        call_id,
        tool_id: request.tool_id.to_owned(),
        request_digest,
        policy_set_hash,
        policy: PolicyOutcome::Denied {
            reason: NOT_REACHED.to_owned(),
        },
        capability: CapabilityOutcome::Denied {
            reason: NOT_REACHED.to_owned(),
            denied_capability: None,
        },
        execution: ExecutionOutcome::HostDenied {
            reason: ABANDONED.to_owned(),
        },
        grant_id: None,
        response_digest: None,
        wall_ms: None,
        peak_memory_bytes: None,
        decision_axes: DecisionAxes {
            capability: request.capability.map(str::to_owned),
            role: request.role.map(str::to_owned),
            session: request.session.map(str::to_owned),
            ..DecisionAxes::default()
        },
    }
}

fn safe(n: u64) -> SafeInt {
    SafeInt::new(n.min(aegis_record::json::MAX_SAFE_INTEGER)).unwrap_or_default()
}

impl Call<'_> {
    /// The call's id (as on its intent and outcome lines).
    pub fn call_id(&self) -> &str {
        self.outcome.as_ref().map_or("", |o| o.call_id.as_str())
    }

    fn draft(&mut self) -> &mut OutcomeLine {
        self.outcome
            .as_mut()
            .expect("a call's outcome is only taken when it is written")
    }

    /// Asks the policy station, then the capability station. Returns the grant, or
    /// `None` when a station refused (the refusal is now what the outcome says).
    pub fn authorize(&mut self) -> Option<Grant> {
        let pipeline = self.pipeline;
        pipeline.stations_1_2(self.draft())
    }

    /// Records how the call ended and, only once that is durable, hands back its output.
    ///
    /// # Errors
    /// [`PipelineError::Outcome`]: the output is withheld.
    pub fn finish(mut self, executed: Executed) -> Result<CallRecord, PipelineError> {
        let mut output = None;
        let mut diagnostics = Vec::new();
        {
            let o = self.draft();
            match executed {
                Executed::NotRun => {}
                Executed::NotStarted { reason } => {
                    o.execution = ExecutionOutcome::HostDenied { reason };
                }
                Executed::Failed { message } => {
                    o.execution = ExecutionOutcome::Trap { message };
                }
                Executed::Refused {
                    reason, wall_ms, ..
                } => {
                    o.wall_ms = Some(safe(wall_ms));
                    o.peak_memory_bytes = Some(safe(0));
                    o.execution = ExecutionOutcome::HostDenied { reason };
                }
                Executed::Ran {
                    ending,
                    output: produced,
                    wall_ms,
                    peak_memory_bytes,
                    stderr,
                } => {
                    diagnostics = stderr;
                    o.wall_ms = Some(safe(wall_ms));
                    o.peak_memory_bytes = Some(safe(peak_memory_bytes));
                    o.execution = match ending {
                        Ending::Success => {
                            let bytes = produced.unwrap_or_default();
                            o.response_digest = Some(ResponseDigest::of_response(&bytes));
                            output = Some(bytes);
                            ExecutionOutcome::Success
                        }
                        Ending::Exit(code) => ExecutionOutcome::Trap {
                            message: format!("the tool exited with status {code}"),
                        },
                        Ending::Trap(message) => ExecutionOutcome::Trap { message },
                        Ending::ToolError(message) => ExecutionOutcome::Trap {
                            message: format!("the tool returned an error: {message}"),
                        },
                        // The guest was stopped mid-run, like a trap; not `host_denied`,
                        // which says the tool never ran.
                        Ending::Cancelled(why) => ExecutionOutcome::Trap {
                            message: format!("cancelled: {why}"),
                        },
                        Ending::Exceeded(kind) => ExecutionOutcome::ResourceExceeded {
                            kind: kind.kind().to_owned(),
                        },
                    };
                }
            }
        }
        let outcome = self.outcome.take().expect("finish runs once");
        match self.pipeline.audit.session.append(&outcome) {
            Ok(appended) => Ok(CallRecord {
                outcome,
                seq: appended.seq,
                output,
                stderr: diagnostics,
            }),
            Err(source) => Err(PipelineError::Outcome {
                call_id: outcome.call_id,
                source,
            }),
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let Some(mut outcome) = self.outcome.take() else {
            return;
        };
        outcome.response_digest = None;
        outcome.execution = if std::thread::panicking() {
            ExecutionOutcome::Trap {
                message: HOST_PANIC.to_owned(),
            }
        } else {
            ExecutionOutcome::HostDenied {
                reason: ABANDONED.to_owned(),
            }
        };
        // Nothing to report to: a failure here has already poisoned the session, and
        // the missing outcome leaves the call in flight for `aegis verify` to flag.
        let _ = self.pipeline.audit.session.append(&outcome);
    }
}

/// The policy's answer for a whole call.
struct PolicyAnswer<'a> {
    /// The first refusal, or (when every axis is allowed) the first axis's allow.
    decision: PolicyDecision,
    /// The axis `decision` answered (`""` when the grant carries none).
    axis: &'a str,
    /// The narrowest of every answer's limits.
    narrowing: NarrowingLimits,
}

/// Asks `policy` about each of `axes` (in order) for the call `o` states, as one call
/// through [`PolicyEvaluator::evaluate_axes`](aegis_station_api::PolicyEvaluator):
/// a plugin that has it counts the call once; one built before it is asked per axis
/// by abi_stable's fallback.
///
/// The call is allowed only if every axis is. The answer must hold one decision per
/// axis up to and including the first that is not an allow; anything else (none, too
/// many, an allow after a refusal, a stop without one) is a station failure, and the
/// call is refused.
///
/// # Errors
/// A one-line reason the station failed.
fn ask_policy<'a>(
    policy: &PolicyEvaluatorBox,
    o: &OutcomeLine,
    axes: &[&'a str],
) -> Result<PolicyAnswer<'a>, String> {
    let axes_r: Vec<RStr<'_>> = axes.iter().map(|a| RStr::from(*a)).collect();
    let ask = PolicyRequest {
        tool_id: o.tool_id.as_str().into(),
        capability: "".into(),
        role: o.decision_axes.role.as_deref().unwrap_or("").into(),
        session: o.decision_axes.session.as_deref().unwrap_or("").into(),
    };
    let answers = policy
        .evaluate_axes(&ask, RSlice::from(axes_r.as_slice()))
        .into_result()
        .map_err(|e| e.to_string())?;
    let shape = || {
        format!(
            "it answered {} decisions for {} axes asked",
            answers.len(),
            axes.len()
        )
    };
    let refusal = answers.iter().position(|d| d.verdict != Verdict::ALLOW);
    let decided = match refusal {
        Some(i) if i + 1 == answers.len() && answers.len() <= axes.len() => i,
        None if answers.len() == axes.len() && !answers.is_empty() => 0,
        _ => return Err(shape()),
    };
    let mut narrowing = NarrowingLimits::default();
    for d in answers.iter() {
        let l = &d.limits;
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        narrowing = NarrowingLimits {
            max_memory_bytes: min(narrowing.max_memory_bytes, l.max_memory_bytes.into_option()),
            max_wall_ms: min(narrowing.max_wall_ms, l.max_wall_ms.into_option()),
            max_output_bytes: min(narrowing.max_output_bytes, l.max_output_bytes.into_option()),
        };
    }
    let mut answers = answers;
    Ok(PolicyAnswer {
        decision: answers.swap_remove(decided),
        axis: axes[decided],
        narrowing,
    })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
