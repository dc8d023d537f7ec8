//! The approvals desk: how a front end hands a parked call to the approvals queue and
//! waits for a person's decision on it, and how that decision reaches the record.
//!
//! `wrap`, `gateway` and `run` share it. The front end calls the pipeline; when the
//! policy parked the call ([`CallRecord::park`]), [`Desk::file`] files the request, and
//! [`Desk::settle`] waits (woken by the queue, never polling) until a decision is placed
//! or the park expires, then claims the decision once, judges it, records it as the
//! park's one `decision` line and says what the front end does: resume the call under
//! the [`Approval`], or answer the client with a [`Refusal`]. [`Desk::take`] settles a
//! park decided while nobody waited (`aegis run --approval`), and [`Desk::withdraw`]
//! gives one up (the client cancelled); [`Desk::call_off`] does so for a park whose
//! settle is still waiting, leaving the claim to it.
//!
//! # Guarantees
//! - **Only a decision the host honours resumes the call.** An approval is honoured when
//!   its approver's signature verifies over the approval id and verdict, its key is one
//!   the operator trusts (when the operator named approvers), and the scope it approves
//!   is within the one the park stated ([`scope_within`]). Anything else settles the
//!   park as the host's own denial, which is what the record then says; the call is not
//!   run.
//! - **One decision on the record per park.** Of all deciders (approvers, this host's
//!   expiry, a withdrawal) the queue lets exactly one decision stand, and only the claim
//!   of it is recorded.
//! - **Expiry is the host's.** At the park's expiry the host places its own denial
//!   (`via: host`, `expired`); a person's decision placed first still wins.
//!
//! # Non-guarantees
//! - Settled requests stay in the queue, so a second `approve` is told it came too late;
//!   they are removed once their expiry has passed, when a later park is filed.
//! - A decision that failed to be recorded still settles the park (refused, said to the
//!   front end): nothing runs that the record does not show approved.

mod store;

pub use store::store_queue;

use crate::pipeline::{Approval, CallRecord, Pipeline, PipelineError, scope_within};
use aegis_approvals::{ClaimError, DecideError, DecisionFile, Front, Queue, QueueError, Request};
use aegis_record::approval::HostSettled;
use aegis_record::json::{Object, SafeInt, Value};
use aegis_record::refusal::{Cause, Refusal};
use aegis_record::verify::TrustAnchor;
use aegis_record::{Approver, DecisionLine, DecisionVerdict};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A failure to file or find a park in the queue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeskError {
    /// The call was not parked: there is nothing to file.
    #[error("the call was not parked for approval")]
    NotParked,
    /// The park states no scope (a record from before scopes were written).
    #[error("park {0} states no scope an approval could grant")]
    NoScope(String),
    /// The queue refused.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// No decision yet (`take`).
    #[error("approval {0} is not decided yet (aegis approvals show {0})")]
    NotDecided(String),
    /// The decision was claimed already (`take`).
    #[error("approval {0} was already used")]
    AlreadyUsed(String),
    /// The host's own decision was not placed.
    #[error(transparent)]
    Decide(#[from] DecideError),
    /// The decision could not be claimed.
    #[error(transparent)]
    Claim(ClaimError),
}

/// A park filed in the queue, to settle.
#[derive(Clone, Debug)]
pub struct Ticket {
    /// The park's approval id.
    pub approval_id: String,
    /// What approving it grants, as the park states it.
    pub scope: aegis_record::ApprovalScope,
    /// When the host settles it itself, as expired.
    deadline: Instant,
    /// The queue it was filed in.
    queue: Queue,
}

impl Ticket {
    /// Whether the park's approval timeout has passed: the host settles it as expired,
    /// so a front end places no decision of its own on it any more.
    pub fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Files parks and settles them, for one front end.
#[derive(Clone, Debug)]
pub struct Desk {
    dir: Option<PathBuf>,
    front: Front,
    record: String,
    approvers: Option<Vec<TrustAnchor>>,
    /// This host's name, read at the first park (never for a session that parks nothing).
    hostname: std::sync::OnceLock<String>,
}

/// The host's own denial of a park, with why.
fn host_denial(approval_id: &str, why: HostSettled, reason: String) -> DecisionFile {
    DecisionFile {
        approval_id: approval_id.to_owned(),
        verdict: DecisionVerdict::Denied { reason },
        approver: Approver::Host { why },
        decided_at: aegis_record::time::now(),
    }
}

/// Places the host's denial of an expired park, unless a decision stands already (a
/// person's placed just in time wins).
fn deny_expired(queue: &Queue, approval_id: &str) -> Result<(), DecideError> {
    let denial = host_denial(
        approval_id,
        HostSettled::Expired,
        "no decision before the approval timeout".to_owned(),
    );
    match queue.decide(&denial) {
        Ok(()) | Err(DecideError::AlreadyDecided { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A refusal of a parked call, answering the client.
fn refused(cause: Cause, reason: String) -> Refusal {
    Refusal::new(cause, reason)
}

impl Desk {
    /// A desk over the queue in `dir` (`None`: the audit store's when it keeps one, else
    /// [`Queue::default_dir`]) for `front`, whose
    /// park outcomes are on `record` (a path, or `postgres:<table>`), honouring
    /// approvals by the keys in `approvers` (`None`: any key whose signature verifies).
    /// The queue is opened (and made) when a park is first filed, not before: a
    /// session that parks nothing touches nothing.
    pub fn new(
        dir: Option<PathBuf>,
        front: Front,
        record: impl Into<String>,
        approvers: Option<Vec<TrustAnchor>>,
    ) -> Desk {
        Desk {
            dir,
            front,
            record: record.into(),
            approvers,
            hostname: std::sync::OnceLock::new(),
        }
    }

    /// The queue, opened: the directory named; else the one `pipeline`'s audit store
    /// keeps, so every host writing the store files parks where one approver sees them
    /// all; else the default directory (checked, made when missing).
    ///
    /// # Errors
    /// As [`Queue::open`] and [`Queue::default_dir`]; the store failed to say whether
    /// it keeps a queue.
    pub fn queue(&self, pipeline: &Pipeline) -> Result<Queue, QueueError> {
        if let Some(dir) = &self.dir {
            return Queue::open(dir);
        }
        if let Some(queue) = pipeline.audit().approvals_queue()? {
            return Ok(queue);
        }
        Queue::open(&Queue::default_dir()?)
    }

    /// Files the park `record` states, with the call's canonical `arguments` for the
    /// approver to read. The pipeline's approval timeout bounds the wait.
    ///
    /// # Errors
    /// [`DeskError::NotParked`], [`DeskError::NoScope`], or the queue refused.
    pub fn file(
        &self,
        pipeline: &Pipeline,
        record: &CallRecord,
        arguments: Option<&str>,
    ) -> Result<Ticket, DeskError> {
        let park = record.park().ok_or(DeskError::NotParked)?;
        let scope = park
            .scope
            .cloned()
            .ok_or_else(|| DeskError::NoScope(park.approval_id.to_owned()))?;
        let deadline = Instant::now() + pipeline.approval_timeout();
        let queue = self.queue(pipeline)?;
        prune(&queue);
        let outcome = &record.outcome;
        let bound = outcome.decision_axes.bound.as_ref().map(|b| {
            let mut o = Object::new();
            o.insert(
                "names",
                Value::Array(b.names.iter().cloned().map(Value::String).collect()),
            );
            o.insert("values", b.values.clone());
            o
        });
        let host = self
            .hostname
            .get_or_init(|| match crate::whereabouts::this_host().get("hostname") {
                Some(Value::String(name)) => name.clone(),
                _ => "(unknown)".to_owned(),
            })
            .clone();
        let mut request = Request {
            approval_id: park.approval_id.to_owned(),
            parked_at: aegis_record::time::now(),
            expires_at: scope.expires_at.clone().unwrap_or_default(),
            host,
            pid: SafeInt::new(u64::from(std::process::id())).unwrap_or_default(),
            front: self.front,
            record: self.record.clone(),
            tool_id: scope.tool_id.clone(),
            rule: park.matched_rule.map(str::to_owned),
            reason: Some(park.reason.to_owned()).filter(|r| !r.is_empty()),
            arguments: None,
            arguments_cut: false,
            bound,
            scope: scope.clone(),
        };
        if let Some(arguments) = arguments {
            request.set_arguments(arguments.to_owned());
        }
        queue.file(&request)?;
        Ok(Ticket {
            approval_id: request.approval_id,
            scope,
            deadline,
            queue,
        })
    }

    /// Waits until `ticket`'s park is decided, calling `keep_alive` about every `every`
    /// meanwhile; at its deadline the host denies it as expired. The decision is claimed,
    /// judged and recorded on `pipeline`.
    ///
    /// # Errors
    /// The [`Refusal`] to answer the client with: denied (with the approver's reason),
    /// expired, not honoured, or a queue or record failure. Nothing was run.
    pub fn settle(
        &self,
        pipeline: &Pipeline,
        ticket: &Ticket,
        every: Duration,
        keep_alive: &mut dyn FnMut(),
    ) -> Result<Approval, Refusal> {
        let id = ticket.approval_id.as_str();
        let failed = |e: &dyn std::fmt::Display| {
            refused(
                Cause::PendingApproval,
                format!("parked for approval {id}, and the approvals queue failed: {e}; not run"),
            )
        };
        let queue = &ticket.queue;
        loop {
            let now = Instant::now();
            if now >= ticket.deadline {
                match deny_expired(queue, id) {
                    Ok(()) => break,
                    Err(e) => return Err(failed(&e)),
                }
            }
            let wake = ticket.deadline.min(now + every);
            match queue.wait(id, wake) {
                Ok(Some(_)) => break,
                Ok(None) if wake < ticket.deadline => keep_alive(),
                Ok(None) => {}
                Err(e) => return Err(failed(&e)),
            }
        }
        let decision = match queue.claim(id) {
            Ok(d) => d,
            Err(e) => return Err(failed(&e)),
        };
        self.honour(pipeline, &ticket.scope, decision)
    }

    /// Settles a park that was decided while nobody waited on it (`aegis run
    /// --approval ID`): its decision is claimed, judged and recorded on `pipeline`. A
    /// park past its expiry with no decision is denied by the host as expired.
    ///
    /// # Errors
    /// [`DeskError`] when there is nothing to settle yet (no decision) or it was used;
    /// `Ok(Err(refusal))` when it settled as anything but an approval the host honours.
    pub fn take(
        &self,
        pipeline: &Pipeline,
        approval_id: &str,
    ) -> Result<Result<Approval, Refusal>, DeskError> {
        let queue = self.queue(pipeline)?;
        let request = queue.request(approval_id)?;
        let decision = match queue.claim(approval_id) {
            Ok(d) => d,
            Err(ClaimError::NotDecided { .. }) if aegis_approvals::expired(&request) => {
                deny_expired(&queue, approval_id)?;
                queue
                    .claim(approval_id)
                    .map_err(|e| claim_error(approval_id, e))?
            }
            Err(e) => return Err(claim_error(approval_id, e)),
        };
        Ok(self.honour(pipeline, &request.scope, decision))
    }

    /// Gives up the park of `approval_id` (its request ended): the host places its own
    /// denial, `withdrawn` (or `expired`, once its timeout has passed), and records it,
    /// unless a decision came first, which is then claimed and recorded as it is
    /// (nothing runs either way).
    pub fn withdraw(&self, pipeline: &Pipeline, ticket: &Ticket, why: &str) {
        let queue = &ticket.queue;
        let placed = if ticket.expired() {
            deny_expired(queue, &ticket.approval_id)
        } else {
            let denial = host_denial(
                &ticket.approval_id,
                HostSettled::Withdrawn,
                format!("withdrawn: {why}"),
            );
            queue.decide(&denial)
        };
        match placed {
            Ok(()) | Err(DecideError::AlreadyDecided { .. }) => {}
            Err(_) => return,
        }
        if let Ok(decision) = queue.claim(&ticket.approval_id) {
            let _ = record(pipeline, &decision);
        }
    }

    /// Places the host's own denial of `ticket`'s park, `withdrawn` (its request
    /// ended), and nothing more: the [`Desk::settle`] waiting on the park wakes, claims
    /// whichever decision stands (this one, or a person's placed first) and records it.
    /// For a front end whose settle is still waiting, so one claimant owns the claim;
    /// [`Desk::withdraw`] is for a park nobody waits on.
    ///
    /// # Errors
    /// The queue could not be opened or the decision placed; the settle then waits on
    /// to the park's expiry.
    pub fn call_off(&self, ticket: &Ticket, why: &str) -> Result<(), DeskError> {
        let queue = &ticket.queue;
        let denial = host_denial(
            &ticket.approval_id,
            HostSettled::Withdrawn,
            format!("withdrawn: {why}"),
        );
        match queue.decide(&denial) {
            Ok(()) | Err(DecideError::AlreadyDecided { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Places the answer of the MCP client's user (asked by `mechanism`) as the
    /// decision on `ticket`'s park, `via: client`: approved with the scope the park
    /// states, or denied. Nothing more: the [`Desk::settle`] waiting on the park wakes,
    /// claims whichever decision stands (a person's placed first wins) and records it.
    /// The client's word is not a signature; the record says where it came from. Past
    /// the park's expiry nothing is placed: the settle places the host's expiry denial.
    ///
    /// # Errors
    /// The queue could not be opened or the decision placed (a decision already
    /// standing is not an error).
    pub fn client_decided(
        &self,
        ticket: &Ticket,
        approved: bool,
        client: &str,
        mechanism: aegis_record::approval::ClientMechanism,
    ) -> Result<(), DeskError> {
        if ticket.expired() {
            return Ok(());
        }
        let queue = &ticket.queue;
        let verdict = if approved {
            DecisionVerdict::Approved {
                scope: ticket.scope.clone(),
            }
        } else {
            DecisionVerdict::Denied {
                reason: "the client's user declined".to_owned(),
            }
        };
        let decision = DecisionFile {
            approval_id: ticket.approval_id.clone(),
            verdict,
            approver: Approver::Client {
                client: client.to_owned(),
                mechanism,
            },
            decided_at: aegis_record::time::now(),
        };
        match queue.decide(&decision) {
            Ok(()) | Err(DecideError::AlreadyDecided { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Judges a claimed decision and records what the host makes of it: the approver's
    /// own decision when honoured (or a denial), else the host's denial saying why not.
    fn honour(
        &self,
        pipeline: &Pipeline,
        parked: &aegis_record::ApprovalScope,
        decision: DecisionFile,
    ) -> Result<Approval, Refusal> {
        let id = decision.approval_id.clone();
        match self.judge(parked, &decision) {
            Ok(()) => {}
            Err(why) => {
                // Not honoured: the record holds the host's denial, never the decision
                // it would not act on.
                let denial = host_denial(&id, HostSettled::Withdrawn, why.clone());
                let reason = format!("approval {id}: {why}; not run");
                return Err(match record(pipeline, &denial) {
                    Ok(()) => refused(Cause::ApprovalDenied, reason),
                    Err(e) => refused(Cause::NotRecorded, format!("{reason} ({e})")),
                });
            }
        }
        if let Err(e) = record(pipeline, &decision) {
            return Err(refused(
                Cause::NotRecorded,
                format!(
                    "approval {id}: the decision could not be recorded, so the call was not run: {e}"
                ),
            ));
        }
        match decision.verdict {
            DecisionVerdict::Approved { scope } => Ok(Approval {
                approval_id: id,
                scope,
            }),
            DecisionVerdict::Denied { reason } => Err(match &decision.approver {
                Approver::Host {
                    why: HostSettled::Expired,
                } => refused(
                    Cause::ApprovalExpired,
                    format!("approval {id} expired: nobody decided in time; not run"),
                ),
                approver => refused(
                    Cause::ApprovalDenied,
                    format!(
                        "approval {id} denied by {}: {}; not run",
                        who(approver),
                        aegis_record::text::escape(&reason)
                    ),
                ),
            }),
        }
    }

    /// Why the host does not honour `decision` on a park of `parked`; `Ok` when it does.
    fn judge(
        &self,
        parked: &aegis_record::ApprovalScope,
        decision: &DecisionFile,
    ) -> Result<(), String> {
        aegis_record::approval::check(&decision.approval_id, &decision.verdict, &decision.approver)
            .map_err(|p| format!("its decision was refused: {p}"))?;
        let DecisionVerdict::Approved { scope } = &decision.verdict else {
            return Ok(());
        };
        match &decision.approver {
            Approver::Key { public_key, .. } => {
                if let Some(trusted) = &self.approvers
                    && !trusted.iter().any(|a| a.matches(public_key))
                {
                    return Err(format!(
                        "approved by key {}, which is not one of the approvers this host trusts",
                        public_key.key_id()
                    ));
                }
            }
            Approver::Client { .. } => {}
            Approver::Host { .. } => return Err("the host cannot approve".to_owned()),
        }
        scope_within(scope, parked)
            .map_err(|why| format!("its approval is wider than the park: {why}"))
    }
}

/// Removes settled requests whose expiry has passed: nothing can be decided or claimed
/// of them any more. A queue that cannot be listed is left as it is (the filing that
/// follows says what is wrong).
fn prune(queue: &Queue) {
    let Ok(listed) = queue.list() else {
        return;
    };
    for l in listed {
        if matches!(l.state, aegis_approvals::State::Used(_))
            && aegis_approvals::expired(&l.request)
        {
            let _ = queue.remove(&l.request.approval_id);
        }
    }
}

/// The approver as a person reads it.
fn who(approver: &Approver) -> String {
    match approver {
        Approver::Key { key_id, .. } => format!("key {key_id}"),
        Approver::Client { client, .. } => format!("the client's user ({client})"),
        Approver::Host { why } => format!("the host ({})", why.as_str()),
    }
}

/// Records `decision` as its park's decision line.
fn record(pipeline: &Pipeline, decision: &DecisionFile) -> Result<(), PipelineError> {
    pipeline
        .record_decision(&DecisionLine {
            approval_id: decision.approval_id.clone(),
            verdict: decision.verdict.clone(),
            approver: Some(decision.approver.clone()),
        })
        .map(|_| ())
}

fn claim_error(approval_id: &str, e: ClaimError) -> DeskError {
    match e {
        ClaimError::NotDecided { .. } => DeskError::NotDecided(approval_id.to_owned()),
        ClaimError::AlreadyUsed { .. } => DeskError::AlreadyUsed(approval_id.to_owned()),
        e => DeskError::Claim(e),
    }
}
