//! `aegis recheck`'s replay: what a policy station would have decided about every call
//! a record holds, compared with what the record says was decided. Nothing runs: no
//! sandbox, no grant, no audit session; the record is only read.
//!
//! The caller verifies the record first (`aegis recheck` refuses a Tampered one); this
//! module reads its lines, pairs each call's intent with its outcome, rebuilds the
//! policy ask from what the outcome states, and asks the station through
//! [`pipeline::replay_policy`], the code a live call's answer is read by.
//!
//! # What a recorded call states
//! - **Tool, role, session**: `tool_id`, `decision_axes.role` and `.session`. This host
//!   records the role and session whenever the caller asserted them, so a missing one
//!   was not asserted and is asked as the empty one, as it was live. A session whose
//!   open line does not name this host (`provenance.aegis_version`) gives no such
//!   promise: a call of it that states no role is undecidable.
//! - **Axes**: the live host asks about every axis the call's grant would carry (see
//!   [`crate::pipeline`]); the record does not list them, so they are read back:
//!   - the call named a capability (`decision_axes.capability`): that name alone, as
//!     the live host asks whether or not the tool declares it;
//!   - a grant was minted: the grant's axes (`fs.read` for any root, `fs.write` for a
//!     write root, `net.http` for a destination), which are exactly those asked;
//!   - otherwise the tool's axes, when another call of the same tool in the same
//!     session, naming no capability either, states them (a session is one host, whose
//!     tool registry never changes): its grant, or a refusal without an axis prefix (the
//!     tool carries no axis, asked once with the empty capability). A refusal prefixed
//!     with an axis (`fs.write: …`) names only the axis refused, not the others asked,
//!     so it states nothing on its own.
//! - **Arguments**: what the record states of them. With `decision_axes.call_arguments`
//!   (the operator opted in, and it was not cut) the replay asks with the whole
//!   arguments; else with `decision_axes.bound`, the arguments the tool's binding names
//!   (its path-like ones), every other argument unknown to the station
//!   (`evaluate_stated_call`); else with none known. (`decision_axes.arguments` holds
//!   only what the deciding rule compared, after normalisation, so it is not asked
//!   with.) A station whose rule reads an argument the record does not state decides
//!   the way that cannot widen and says the arguments were needed
//!   (`CallAnswer::arguments_needed`); such a call is undecidable
//!   ([`Undecidable::ArgumentsNotRecorded`]), never replayed on a guess.
//!
//! # Rate limits
//! The record holds no times, and whether a rate_limit rule's budget held depends on
//! them, so a rate-limited verdict is not replayed as a fact. The replay asks in record
//! order (sessions in file order, calls in intent order) with one station, so a budget
//! is spent as one burst with nothing refilled. A call whose new answer is a rate
//! limit, or an allow by a rule that rate-limited another call of the replay, is
//! governed by a rate rule: compared with a recorded allow or rate limit it is
//! undecidable ([`Undecidable::RateLimit`]), unless the record says the same policy set
//! decided it (same `policy_set_hash`: the same set, the same calls, the same times);
//! compared with a recorded refusal or park it is a change (allowed or rate-limited now,
//! either way not refused).
//!
//! # Guarantees
//! - A verdict is never guessed: a call whose inputs the record does not state is
//!   reported [`Replayed::Undecidable`] with the reason.
//! - The answer is read as a live call's is ([`pipeline::replay_policy`]): a station
//!   failure or an unknown verdict is a refusal, as live.
//!
//! # Non-guarantees
//! - An allow by a rate rule that never ran out in the burst is taken as an allow. For
//!   the YAML station (token buckets that start full and only refill) a burst spends a
//!   budget at least as fast as the live calls did, so that holds, except that a call
//!   the replay could not ask spends nothing; for another station it is its own rule.
//! # Approvals
//! A call that ran and that the new policy would park is a change to
//! [`Verdict::PendingApproval`] (newly parked), never a refusal: a person might approve
//! it. A call that ran under an approval (`decision_axes.approval_ref`) and that the
//! new policy would park is unchanged, allowed under that approval, when the record
//! holds a `decision` line approving that id (the approval answers the park, as it did
//! live); without one it is newly parked. An approval never answers a deny: a resumed
//! call the new policy denies is newly refused.
//!
//! - The replay compares verdicts (allowed, denied, rate-limited, parked), not reasons
//!   or limits: a call refused by a different rule is unchanged.

use crate::capability::Capability;
use crate::pipeline::{self, PolicyAsk};
use aegis_record::json::{Value, parse_line};
use aegis_record::line::Stop;
use aegis_record::refusal::Cause;
use aegis_record::{
    CapabilityOutcome, DecisionLine, DecisionVerdict, IntentLine, OutcomeLine, PolicyOutcome,
    PolicySetHash,
};
use aegis_station_api::PolicyEvaluatorBox;
use std::collections::{BTreeSet, HashMap, HashSet};

/// A policy verdict, without its wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// The call may proceed.
    Allowed,
    /// A rule (or the default, or a failing station) refused it.
    Denied,
    /// A rate limit refused it.
    RateLimited,
    /// It was parked for approval.
    PendingApproval,
}

impl Verdict {
    /// The verdict a policy object states.
    pub fn of(policy: &PolicyOutcome) -> Verdict {
        match policy {
            PolicyOutcome::Allowed => Verdict::Allowed,
            PolicyOutcome::Denied { .. } => Verdict::Denied,
            PolicyOutcome::RateLimited { .. } => Verdict::RateLimited,
            PolicyOutcome::PendingApproval { .. } => Verdict::PendingApproval,
        }
    }

    /// The record's `status` token: `allowed`, `denied`, `rate_limited`,
    /// `pending_approval`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::RateLimited => "rate_limited",
            Verdict::PendingApproval => "pending_approval",
        }
    }
}

/// Why a recorded call cannot be replayed: an input the new policy needs is not on the
/// record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undecidable {
    /// The call has an intent and no outcome: it was in flight when the record ends, or
    /// left unfinished.
    InFlight,
    /// It stopped before the policy station (refused by the MCP relay, or abandoned
    /// first): no policy was asked, so there is nothing to compare.
    NotAsked,
    /// The axes the policy was asked about are not recorded.
    AxesNotRecorded {
        /// The axis the record names as refused, if it names one.
        refused_axis: Option<String>,
    },
    /// A member the ask needs was cut on the record (longer than the record's bound).
    Cut {
        /// The member: `tool_id`, `decision_axes.role`, …
        member: &'static str,
    },
    /// The session's emitter does not say it records every role asserted, and this
    /// call states none.
    RoleNotRecorded,
    /// The station needed an argument the record does not state (outside the tool's
    /// binding, with the whole arguments not recorded) to decide.
    ArgumentsNotRecorded,
    /// The new policy governs the call by a rate limit, whose verdict depends on call
    /// times the record does not hold.
    RateLimit {
        /// The rate rule.
        rule: Option<String>,
    },
}

impl Undecidable {
    /// A stable token for machines: `in_flight`, `not_asked`, `axes_not_recorded`,
    /// `cut`, `role_not_recorded`, `arguments_not_recorded`, `rate_limit`.
    pub fn code(&self) -> &'static str {
        match self {
            Undecidable::InFlight => "in_flight",
            Undecidable::NotAsked => "not_asked",
            Undecidable::AxesNotRecorded { .. } => "axes_not_recorded",
            Undecidable::Cut { .. } => "cut",
            Undecidable::RoleNotRecorded => "role_not_recorded",
            Undecidable::ArgumentsNotRecorded => "arguments_not_recorded",
            Undecidable::RateLimit { .. } => "rate_limit",
        }
    }
}

impl std::fmt::Display for Undecidable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undecidable::InFlight => f.write_str("no outcome recorded (in flight or unfinished)"),
            Undecidable::NotAsked => f.write_str(
                "stopped before the policy station (refused by the relay, or abandoned): no policy was asked",
            ),
            Undecidable::AxesNotRecorded {
                refused_axis: Some(axis),
            } => write!(
                f,
                "axes not recorded: the record names only the refused axis {axis}, not every axis the grant would carry"
            ),
            Undecidable::AxesNotRecorded { refused_axis: None } => f.write_str(
                "axes not recorded: nothing in the session states which axes the grant would carry",
            ),
            Undecidable::Cut { member } => {
                write!(f, "{member} was cut on the record, so its full text is not known")
            }
            Undecidable::RoleNotRecorded => f.write_str(
                "role not recorded: the session's emitter does not say it records every role asserted",
            ),
            Undecidable::ArgumentsNotRecorded => f.write_str("arguments not recorded"),
            Undecidable::RateLimit { rule } => {
                f.write_str("rate limit")?;
                if let Some(rule) = rule {
                    write!(f, " (rule {rule})")?;
                }
                f.write_str(": whether its budget held depends on call times the record does not hold")
            }
        }
    }
}

/// One call replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replayed {
    /// The new policy decides as the record says.
    Unchanged {
        /// The verdict, then and now.
        verdict: Verdict,
        /// The rule that decides now (`None`: the default, or a failing station).
        rule: Option<String>,
        /// Set for a call resumed under an approval (`decision_axes.approval_ref`) that
        /// the new policy would park: the record holds the decision approving it, so
        /// it stays allowed, under that approval.
        approval: Option<String>,
    },
    /// The new policy decides otherwise.
    Changed {
        /// The recorded verdict.
        old: Verdict,
        /// The new one. [`Verdict::RateLimited`] here means governed by a rate rule:
        /// allowed or rate-limited depending on times, not refused or parked.
        new: Verdict,
        /// The rule that decides now.
        rule: Option<String>,
        /// The new refusal's reason, as the record would state it (`None` for an allow).
        reason: Option<String>,
    },
    /// It cannot be replayed.
    Undecidable(Undecidable),
}

/// A recorded call and what the new policy makes of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecheckedCall {
    /// The call's id.
    pub call_id: String,
    /// The tool called.
    pub tool_id: String,
    /// The session it belongs to, counted from 0 in file order.
    pub session: u64,
    /// The verdict the record states (`None` when there is no outcome).
    pub recorded: Option<Verdict>,
    /// The replay.
    pub replayed: Replayed,
}

/// The replay of a whole record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recheck {
    /// Every call, sessions in file order, calls in intent order.
    pub calls: Vec<RecheckedCall>,
    /// The new station's policy set, if it says.
    pub policy_set_hash: Option<PolicySetHash>,
}

/// How many calls came out each way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Decided as recorded.
    pub unchanged: u64,
    /// Decided otherwise.
    pub changed: u64,
    /// Not replayable.
    pub undecidable: u64,
}

impl Recheck {
    /// How many calls came out each way.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for call in &self.calls {
            match call.replayed {
                Replayed::Unchanged { .. } => c.unchanged += 1,
                Replayed::Changed { .. } => c.changed += 1,
                Replayed::Undecidable(_) => c.undecidable += 1,
            }
        }
        c
    }
}

/// Why a record could not be replayed at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecheckError {
    /// A line the replay must read is not a line it can read. A record the verifier
    /// did not call Tampered never gives this; it means the caller skipped verifying.
    #[error("line {line}: {message}")]
    Unreadable {
        /// The physical line number, from 1.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// One call as read from the record.
struct Read {
    call_id: String,
    tool_id: String,
    session: u64,
    outcome: Option<Box<Recorded>>,
}

/// A call's outcome.
struct Recorded {
    outcome: OutcomeLine,
}

/// What one session states about its tools and its emitter.
#[derive(Default)]
struct SessionFacts {
    /// The open line names this host, which records every role and session asserted.
    this_host: bool,
    /// Per tool, the axes a call naming no capability is asked about; `None` when two
    /// calls disagree (then nothing is inferred).
    tool_axes: HashMap<String, Option<Vec<String>>>,
}

/// Replays every call of `record` (the bytes of a verified record file) through
/// `policy`, in record order.
///
/// # Errors
/// [`RecheckError::Unreadable`]: a line that is not a record line (never, for a record
/// the verifier did not call Tampered; a torn final line is skipped).
pub fn recheck(record: &[u8], policy: &PolicyEvaluatorBox) -> Result<Recheck, RecheckError> {
    let (calls, sessions, approved) = read_calls(record)?;
    let new_hash = policy
        .policy_set_hash()
        .into_result()
        .ok()
        .map(PolicySetHash::from_bytes);
    // First pass: ask, in record order; rate rules are known only once every call has
    // been asked.
    let mut asked: Vec<Result<pipeline::PolicyDecided, Undecidable>> =
        Vec::with_capacity(calls.len());
    let mut rate_rules: BTreeSet<Option<String>> = BTreeSet::new();
    for call in &calls {
        let answer = ask(call, &sessions[call.session as usize], policy);
        if let Ok(d) = &answer
            && Verdict::of(&d.policy) == Verdict::RateLimited
        {
            rate_rules.insert(d.matched_rule.clone());
        }
        asked.push(answer);
    }
    let calls = calls
        .into_iter()
        .zip(asked)
        .map(|(call, answer)| {
            let recorded = call.outcome.as_ref().map(|r| &r.outcome);
            let replayed = match (recorded, answer) {
                (_, Err(why)) => Replayed::Undecidable(why),
                (None, Ok(_)) => Replayed::Undecidable(Undecidable::InFlight),
                (Some(o), Ok(d)) => compare(o, d, &rate_rules, new_hash, &approved),
            };
            RecheckedCall {
                recorded: recorded.map(|o| Verdict::of(&o.policy)),
                call_id: call.call_id,
                tool_id: call.tool_id,
                session: call.session,
                replayed,
            }
        })
        .collect();
    Ok(Recheck {
        calls,
        policy_set_hash: new_hash,
    })
}

/// The recorded verdict against the new answer.
fn compare(
    recorded: &OutcomeLine,
    d: pipeline::PolicyDecided,
    rate_rules: &BTreeSet<Option<String>>,
    new_hash: Option<PolicySetHash>,
    approved: &HashSet<String>,
) -> Replayed {
    let old = Verdict::of(&recorded.policy);
    let new = Verdict::of(&d.policy);
    let rate_governed = new == Verdict::RateLimited
        || (new == Verdict::Allowed && rate_rules.contains(&d.matched_rule));
    if rate_governed {
        // The same set over the same calls at the same times decides the same.
        if new_hash == Some(recorded.policy_set_hash)
            && matches!(old, Verdict::Allowed | Verdict::RateLimited)
        {
            return Replayed::Unchanged {
                verdict: old,
                rule: d.matched_rule,
                approval: None,
            };
        }
        return match old {
            Verdict::Allowed | Verdict::RateLimited => {
                Replayed::Undecidable(Undecidable::RateLimit {
                    rule: d.matched_rule,
                })
            }
            Verdict::Denied | Verdict::PendingApproval => Replayed::Changed {
                old,
                new: Verdict::RateLimited,
                rule: d.matched_rule,
                reason: reason_of(&d.policy),
            },
        };
    }
    if old == new {
        return Replayed::Unchanged {
            verdict: new,
            rule: d.matched_rule,
            approval: None,
        };
    }
    // A call that ran under an approval, which the new policy parks: the approval
    // answers the park, as it did live, when the record holds the decision approving
    // it; without one a person would have to approve it again (newly parked). A deny
    // is never answered by an approval, so it falls through as a change.
    if let (Verdict::Allowed, Verdict::PendingApproval, Some(id)) =
        (old, new, recorded.decision_axes.approval_ref.as_deref())
        && approved.contains(id)
    {
        return Replayed::Unchanged {
            verdict: Verdict::Allowed,
            rule: d.matched_rule,
            approval: Some(id.to_owned()),
        };
    }
    Replayed::Changed {
        old,
        new,
        reason: reason_of(&d.policy),
        rule: d.matched_rule,
    }
}

fn reason_of(policy: &PolicyOutcome) -> Option<String> {
    match policy {
        PolicyOutcome::Allowed => None,
        PolicyOutcome::Denied { reason } | PolicyOutcome::RateLimited { reason } => {
            Some(reason.clone())
        }
        PolicyOutcome::PendingApproval { approval_id, .. } => {
            Some(format!("parked as {approval_id}"))
        }
    }
}

/// Asks the station about one call, or says why it cannot be asked.
fn ask(
    call: &Read,
    facts: &SessionFacts,
    policy: &PolicyEvaluatorBox,
) -> Result<pipeline::PolicyDecided, Undecidable> {
    let Some(recorded) = &call.outcome else {
        return Err(Undecidable::InFlight);
    };
    let o = &recorded.outcome;
    if o.stopped_before_the_stations() {
        return Err(Undecidable::NotAsked);
    }
    let axes = &o.decision_axes;
    for (member, text) in [
        ("tool_id", Some(o.tool_id.as_str())),
        ("decision_axes.role", axes.role.as_deref()),
        ("decision_axes.session", axes.session.as_deref()),
        ("decision_axes.capability", axes.capability.as_deref()),
    ] {
        if text.is_some_and(cut) {
            return Err(Undecidable::Cut { member });
        }
    }
    if axes.role.is_none() && !facts.this_host {
        return Err(Undecidable::RoleNotRecorded);
    }
    let (names, grant_axes) = asked_axes(o, facts)?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // The whole arguments when the operator had them recorded; else the bound ones,
    // which leave every other argument unknown; else none known.
    let whole = axes.call_arguments.as_deref().filter(|t| !cut(t));
    let bound = axes.bound.as_ref().filter(|b| !cut(&b.values));
    let (arguments, known) = match (whole, bound) {
        (Some(text), _) => (Some(text), None),
        (None, Some(b)) => (Some(b.values.as_str()), Some(b.names.as_slice())),
        (None, None) => (None, None),
    };
    let ask = PolicyAsk {
        tool_id: &o.tool_id,
        role: axes.role.as_deref(),
        session: axes.session.as_deref(),
        arguments,
        known,
    };
    let decided = pipeline::replay_policy(policy, &ask, &names, grant_axes);
    if decided.arguments_needed {
        return Err(Undecidable::ArgumentsNotRecorded);
    }
    Ok(decided)
}

/// The names the live call was asked about, and whether they were a grant's axes (so
/// a refusal is prefixed with its axis).
fn asked_axes(o: &OutcomeLine, facts: &SessionFacts) -> Result<(Vec<String>, bool), Undecidable> {
    // A named capability is asked alone, declared by the tool or not.
    if let Some(named) = &o.decision_axes.capability {
        let declared = named.parse::<Capability>().is_ok();
        return Ok((vec![named.clone()], declared));
    }
    if let Some(axes) = stated_axes(o) {
        return Ok((axes, true));
    }
    match facts.tool_axes.get(&o.tool_id) {
        Some(Some(axes)) => Ok((axes.clone(), true)),
        _ => Err(Undecidable::AxesNotRecorded {
            refused_axis: policy_refusal(o).and_then(|stop| stop.axis),
        }),
    }
}

/// The axes one outcome of a call naming no capability states by itself: its grant's,
/// or the empty capability when it shows the tool carries none. `None` when it does
/// not say.
fn stated_axes(o: &OutcomeLine) -> Option<Vec<String>> {
    if let CapabilityOutcome::Granted { grant } = &o.capability {
        let fs = grant.fs.as_ref();
        let read = fs.is_some_and(|f| !f.read_paths.is_empty() || !f.write_paths.is_empty());
        let write = fs.is_some_and(|f| !f.write_paths.is_empty());
        let net = grant.net.as_ref().is_some_and(|n| !n.http.is_empty());
        let axes: Vec<String> = [
            (read, Capability::FsRead),
            (write, Capability::FsWrite),
            (net, Capability::NetHttp),
        ]
        .into_iter()
        .filter(|(carried, _)| *carried)
        .map(|(_, c)| c.as_str().to_owned())
        .collect();
        return Some(if axes.is_empty() {
            vec![String::new()]
        } else {
            axes
        });
    }
    match (&o.policy, &o.capability) {
        // Allowed, then refused as unregistered: asked once, with the empty capability.
        (
            PolicyOutcome::Allowed,
            CapabilityOutcome::Denied {
                denied_capability: Some(axis),
                ..
            },
        ) if axis == "tool.registry" => Some(vec![String::new()]),
        // A refusal of a grant axis is prefixed with it; a failing station's words say
        // nothing about the axes. Anything else was about the empty capability.
        (PolicyOutcome::Denied { .. } | PolicyOutcome::RateLimited { .. }, _)
            if policy_refusal(o).is_some_and(|stop| stop.axis.is_none()) =>
        {
            Some(vec![String::new()])
        }
        _ => None,
    }
}

/// A refusal by a rule or a rate limit (not a failing station, whose refusal names no
/// axis whatever was asked), with the grant axis it was about, if any: typed, from the
/// outcome's `stop` ([`OutcomeLine::stopped`]).
fn policy_refusal(o: &OutcomeLine) -> Option<Stop> {
    o.stopped()
        .filter(|stop| matches!(stop.cause, Cause::Denied | Cause::RateLimited))
}

/// Whether a record string ends with the record's truncation marker
/// (`...[truncated: N bytes, sha256 H]`, [`aegis_record::bound`]).
fn cut(text: &str) -> bool {
    let Some(at) = text.rfind("...[truncated: ") else {
        return false;
    };
    let rest = &text[at + "...[truncated: ".len()..];
    let Some((n, rest)) = rest.split_once(" bytes, sha256 ") else {
        return false;
    };
    let Some(hex) = rest.strip_suffix(']') else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && hex.len() == 64
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The calls, what each session states, and the approval ids a decision approved.
type ReadRecord = (Vec<Read>, Vec<SessionFacts>, HashSet<String>);

/// Reads the calls (in intent order within each session), what each session states,
/// and which approvals a `decision` line approved.
fn read_calls(record: &[u8]) -> Result<ReadRecord, RecheckError> {
    let lines: Vec<(u64, &[u8])> = record
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')))
        .map(|(i, l)| (i as u64 + 1, l))
        .collect();
    let mut calls: Vec<Read> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut sessions: Vec<SessionFacts> = Vec::new();
    let mut approved: HashSet<String> = HashSet::new();
    let last = lines.len();
    for (i, &(line, bytes)) in lines.iter().enumerate() {
        let unreadable = |message: String| RecheckError::Unreadable { line, message };
        let obj = match parse_line(bytes) {
            Ok((Value::Object(obj), _)) => obj,
            Ok(_) => return Err(unreadable("not a JSON object".into())),
            // A torn final line (Indeterminate) holds nothing to replay.
            Err(_) if i + 1 == last => break,
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let line_type = obj.get("line_type").and_then(Value::as_str).unwrap_or("");
        match line_type {
            "open" => sessions.push(SessionFacts {
                this_host: obj
                    .get("provenance")
                    .and_then(Value::as_object)
                    .and_then(|p| p.get("aegis_version"))
                    .and_then(Value::as_str)
                    .is_some(),
                tool_axes: HashMap::new(),
            }),
            "intent" | "outcome" if sessions.is_empty() => {
                return Err(unreadable("a call before any open line".into()));
            }
            "intent" => {
                let intent =
                    IntentLine::from_object(&obj).map_err(|e| unreadable(e.to_string()))?;
                by_id.insert(intent.call_id.clone(), calls.len());
                calls.push(Read {
                    call_id: intent.call_id,
                    tool_id: intent.tool_id,
                    session: sessions.len() as u64 - 1,
                    outcome: None,
                });
            }
            "outcome" => {
                let outcome =
                    OutcomeLine::from_object(&obj).map_err(|e| unreadable(e.to_string()))?;
                let session = sessions.len() - 1;
                learn(&mut sessions[session], &outcome);
                let recorded = Box::new(Recorded { outcome });
                match by_id.get(&recorded.outcome.call_id) {
                    Some(&at) if calls[at].outcome.is_none() => {
                        calls[at].tool_id.clone_from(&recorded.outcome.tool_id);
                        calls[at].outcome = Some(recorded);
                    }
                    // An outcome without an intent of its own is replayed where it is.
                    _ => {
                        by_id.insert(recorded.outcome.call_id.clone(), calls.len());
                        calls.push(Read {
                            call_id: recorded.outcome.call_id.clone(),
                            tool_id: recorded.outcome.tool_id.clone(),
                            session: session as u64,
                            outcome: Some(recorded),
                        });
                    }
                }
            }
            "decision" => {
                let decision =
                    DecisionLine::from_object(&obj).map_err(|e| unreadable(e.to_string()))?;
                if matches!(decision.verdict, DecisionVerdict::Approved { .. }) {
                    approved.insert(decision.approval_id);
                }
            }
            // Closes and types this version does not know decide no call.
            _ => {}
        }
    }
    Ok((calls, sessions, approved))
}

/// Records what an outcome states about its tool's axes in its session.
fn learn(facts: &mut SessionFacts, o: &OutcomeLine) {
    if o.decision_axes.capability.is_some() || o.stopped_before_the_stations() {
        return;
    }
    let Some(axes) = stated_axes(o) else {
        return;
    };
    facts
        .tool_axes
        .entry(o.tool_id.clone())
        .and_modify(|known| {
            if known.as_ref() != Some(&axes) {
                *known = None;
            }
        })
        .or_insert_with(|| Some(axes.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_string_is_recognised_by_its_whole_marker() {
        let long = "r".repeat(5000);
        let bounded = aegis_record::bound::text(&long);
        assert!(cut(&bounded));
        assert!(!cut("admin"));
        assert!(!cut("x...[truncated: 12 bytes, sha256 abc]"));
    }
}
