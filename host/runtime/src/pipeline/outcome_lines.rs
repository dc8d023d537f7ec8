//! The call as stated, what stations 1 and 2 decided, how it ended, and the outcome
//! line built once from the three.

use super::*;

/// The call as its caller stated it, owned by the call: what the stations are asked
/// about and what the outcome names it by. Fixed once the intent is written.
#[derive(Clone, Debug)]
pub(super) struct Stated {
    pub(super) call_id: String,
    pub(super) tool_id: String,
    pub(super) request_digest: RequestDigest,
    /// Read when the call opened, just before the policy is asked.
    pub(super) policy_set_hash: PolicySetHash,
    pub(super) capability: Option<String>,
    pub(super) role: Option<String>,
    pub(super) session: Option<String>,
    pub(super) arguments: Option<String>,
    /// What the record keeps of the arguments: the bound ones, and the whole object
    /// when the operator opted in.
    pub(super) bound: Option<BoundArguments>,
    pub(super) call_arguments: Option<String>,
    /// The approval the call resumes under, if any.
    pub(super) approval: Option<Approval>,
    /// What an approval binds the call's arguments by ([`CallRequest::arguments_digest`]).
    pub(super) arguments_digest: ArgumentsDigest,
}

impl Stated {
    /// What the policy station is asked about this call.
    pub(super) fn ask(&self) -> PolicyAsk<'_> {
        PolicyAsk {
            tool_id: &self.tool_id,
            role: self.role.as_deref(),
            session: self.session.as_deref(),
            arguments: self.arguments.as_deref(),
            known: None,
        }
    }

    pub(super) fn of(call_id: String, request: &CallRequest<'_>, pipeline: &Pipeline) -> Stated {
        let (bound, call_arguments) = pipeline
            .recording()
            .of_call(request.tool_id, request.arguments);
        Stated {
            bound,
            call_arguments,
            call_id,
            tool_id: request.tool_id.to_owned(),
            request_digest: request.request_digest(),
            policy_set_hash: pipeline.policy_set_hash(),
            capability: request.capability.map(str::to_owned),
            role: request.role.map(str::to_owned),
            session: request.session.map(str::to_owned),
            arguments: request.arguments.map(str::to_owned),
            approval: request.approval.cloned(),
            arguments_digest: request.arguments_digest(),
        }
    }
}

/// What stations 1 and 2 decided, collected as they answer. A station that has not
/// answered is `None`, and is recorded as not reached, so an outcome written early
/// claims nothing that did not happen.
#[derive(Clone, Debug, Default)]
pub(super) struct Decisions {
    pub(super) policy: Option<PolicyOutcome>,
    pub(super) matched_rule: Option<String>,
    /// The argument values the deciding rule compared (canonical JSON text).
    pub(super) arguments_read: Option<String>,
    pub(super) capability: Option<CapabilityOutcome>,
    pub(super) grant_id: Option<String>,
    pub(super) fs: Option<FsAxis>,
    pub(super) net: Option<NetAxis>,
    /// Why nothing runs, once a station refused: the stop, and the execution's words
    /// (`not executed`, `parked for approval`).
    pub(super) refused: Option<(Stop, Cow<'static, str>)>,
}

impl Decisions {
    pub(super) fn refuse_before_capability(
        &mut self,
        policy: PolicyOutcome,
        stop: Stop,
        why: &'static str,
    ) {
        self.policy = Some(policy);
        self.capability = Some(CapabilityOutcome::Denied {
            reason: POLICY_BLOCKED.to_owned(),
            denied_capability: None,
        });
        self.refused = Some((stop, why.into()));
    }

    /// The ending of a call that ran nothing: the refusal, or (no station refused)
    /// an abandonment.
    pub(super) fn not_run(&self) -> Ended {
        match &self.refused {
            Some((stop, why)) => Ended::stopped(stop.clone(), why.clone().into_owned()),
            None => Ended::stopped(Stop::new(self.abandoned()), ABANDONED.to_owned()),
        }
    }

    /// The cause of abandoning the call now: before the stations, or after they allowed.
    pub(super) fn abandoned(&self) -> Cause {
        if self.policy.is_none() {
            Cause::AbandonedBeforeStations
        } else {
            Cause::Abandoned
        }
    }
}

/// What the execution step leaves on the outcome line.
pub(super) struct Ended {
    pub(super) execution: ExecutionOutcome,
    pub(super) response_digest: Option<ResponseDigest>,
    pub(super) wall_ms: Option<u64>,
    pub(super) peak_memory_bytes: Option<u64>,
    /// Set exactly when `execution` is `host_denied`: what stopped the call.
    pub(super) stop: Option<Stop>,
}

impl Ended {
    /// The host did not run the tool (`host_denied`), for `stop`.
    pub(super) fn stopped(stop: Stop, reason: String) -> Ended {
        Ended {
            stop: Some(stop),
            ..Ended::unmeasured(ExecutionOutcome::HostDenied { reason })
        }
    }

    /// An ending of the tool's own that left no measurements.
    pub(super) fn unmeasured(execution: ExecutionOutcome) -> Ended {
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
pub(super) fn execution_of(ending: Ending) -> ExecutionOutcome {
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
pub(super) fn outcome_line(stated: Stated, d: Decisions, ended: Ended) -> OutcomeLine {
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
            bound: stated.bound,
            call_arguments: stated.call_arguments,
            approval_ref: stated.approval.map(|a| a.approval_id),
        },
        stop: ended.stop,
    }
}

pub(super) fn safe(n: u64) -> SafeInt {
    SafeInt::new(n.min(aegis_record::json::MAX_SAFE_INTEGER)).unwrap_or_default()
}
