//! The policy ask across the plugin ABI: one call, every axis, the answer checked
//! against the station's table. Live calls and `aegis recheck`'s replay
//! ([`replay_policy`]) read answers through this one code.

use super::*;

/// The policy's answer for a whole call.
pub(super) struct PolicyAnswer<'a> {
    /// The first refusal, or (when every axis is allowed) the first axis's allow. Its
    /// rule and reason are positions in `table`, checked to be there.
    pub(super) decision: IndexedDecision,
    /// The names `decision` points into: the table of the policy generation that
    /// decided, shared with the evaluator.
    pub(super) table: RArc<DecisionTable>,
    /// Set with a pending approval: names the park.
    pub(super) approval_id: ROption<RString>,
    /// The axis `decision` answered (`""` when the grant carries none).
    pub(super) axis: &'a str,
    /// The narrowest of every answer's limits.
    pub(super) narrowing: NarrowingLimits,
    /// The argument values the deciding rule compared, as canonical JSON text; `None`
    /// when it compared none.
    pub(super) arguments_read: Option<String>,
    /// The decision turned on arguments that were not given.
    pub(super) arguments_needed: bool,
}

impl PolicyAnswer<'_> {
    /// The rule that decided, or `None` for the policy's default.
    pub(super) fn matched_rule(&self) -> Option<&str> {
        self.table.rule(self.decision.rule)
    }

    /// Why, for the record.
    pub(super) fn reason(&self) -> &str {
        self.table.reason(self.decision.reason).unwrap_or_default()
    }
}

/// The most axes a call is asked about: one slot each, on the stack.
pub(super) const MAX_AXES: usize = Capability::ALL.len();

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
pub(super) fn ask_policy<'a>(
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
    let asked = match call.known {
        None => policy.evaluate_call(
            &ask,
            arguments.into(),
            RSlice::from(axes),
            RSliceMut::from(out),
        ),
        Some(known) => {
            let known: Vec<RStr<'_>> = known.iter().map(|k| RStr::from(k.as_str())).collect();
            policy.evaluate_stated_call(
                &ask,
                arguments.into(),
                RSlice::from(&known[..]),
                RSlice::from(axes),
                RSliceMut::from(out),
            )
        }
    };
    let CallAnswer {
        answer,
        arguments_read,
        arguments_needed,
    } = asked.into_result().map_err(|e| e.to_string())?;
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
    /// The call's arguments as RFC 8785 canonical JSON, or `None` when unknown. With
    /// `known`, only part of them: the values a record states.
    pub arguments: Option<&'a str>,
    /// Set when `arguments` holds only some arguments, as a record states them
    /// (`decision_axes.bound`): every name whose value or absence is known. Any other
    /// argument is unknown to the station.
    pub known: Option<&'a [String]>,
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
    pub(super) narrowing: NarrowingLimits,
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
pub(super) fn decide_policy(
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
                    // The pipeline states the scope once the capability station has
                    // said what a grant would hold.
                    scope: None,
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
pub(super) fn axis_names(axes: &[Capability]) -> &'static [RStr<'static>] {
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

#[cfg(test)]
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
            bound: None,
            call_arguments: None,
            approval: None,
            arguments_digest: CallRequest::new("t", b"{}").arguments_digest(),
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
