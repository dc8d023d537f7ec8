//! The YAML policy station: rules over tool id, capability, role and call arguments.
//!
//! A policy file is parsed once into an immutable [`PolicySet`] held behind an
//! `ArcSwap`: evaluation never parses, and [`PolicyEngine::reload`] swaps the whole set
//! atomically — a file that fails to parse leaves the old set in force.
//!
//! # Guarantees
//! - See [`set`] for parsing, resolution, the hash, the size limits and the warnings.
//! - Rate limits are token buckets, one per rule, shared by every thread that evaluates.
//! - **One call counts once.** The host asks about every axis a call's grant would
//!   carry (`fs.read`, `fs.write`, `net.http`) in one
//!   [`evaluate_axes`](aegis_station_api::Policy::evaluate_axes) ask;
//!   [`PolicyEngine::decide_axes`] answers each axis against one set and takes at most
//!   one token from each rate_limit rule per call, however many axes that rule is
//!   selected for. (Taking a token per axis would make a two-axis call cost two.)
//! - `pending_approval` mints a fresh approval id and refuses the call; nothing is parked.
//! - [`PolicyEngine::from_config`] reads at most [`set::MAX_POLICY_BYTES`] and writes
//!   each [`set::PolicyWarning`] to stderr, one line each: the station ABI has no
//!   channel for load diagnostics.
//!
//! # Non-guarantees
//! - Rules over arguments compare what the client sent, lexically; see [`arguments`].
//! - The role is asserted by the caller and not authenticated here; see [`set`].
//! - Rate-limit state lives in the process — a restart refills every bucket — unless
//!   the host shares a ledger ([`Policy::share_rate_limits`]): then every bucket is
//!   the ledger's, held in the audit store when the store keeps buckets (see
//!   `spec/PROFILES.md`, "Rate limits across processes"). A ledger that fails fails
//!   the evaluation, so the host refuses the call.

pub mod arguments;
pub mod set;

use aegis_station_api::abi_stable::std_types::{ROption, RStr, RString};
use aegis_station_api::{
    CallAnswer, ErrorKind, IndexedAnswer, IndexedDecision, Limits, PluginError, Policy,
    PolicyDecision, PolicyRequest, RateLedgerBox, RateLimits, Verdict,
};
use arc_swap::ArcSwap;
use arguments::{CallArguments, Fit};
use set::{Action, Rate};
pub use set::{PolicyError, PolicySet, PolicyWarning, Rule};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "policy-yaml",
        version: env!("CARGO_PKG_VERSION"),
        policy: PolicyEngine::from_config,
    }
}

/// A policy set in force, with its rate-limit state.
#[derive(Debug)]
pub struct PolicyEngine {
    set: ArcSwap<PolicySet>,
    buckets: RateLimits,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    path: PathBuf,
}

impl PolicyEngine {
    /// An engine over `set`.
    pub fn new(set: PolicySet) -> PolicyEngine {
        PolicyEngine {
            set: ArcSwap::from_pointee(set),
            buckets: RateLimits::new(),
        }
    }

    /// Builds the engine from its config section: `path = "policy.yaml"`.
    ///
    /// # Errors
    /// A bad config, an unreadable file, or a policy error naming file and line.
    pub fn from_config(config: &str) -> Result<PolicyEngine, PluginError> {
        let c: Config =
            toml::from_str(config).map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message()))?;
        let label = c.path.display().to_string();
        let io = |e: std::io::Error| PluginError::new(ErrorKind::IO, format!("{label}: {e}"));
        let mut text = String::new();
        // One byte past the limit is enough to refuse it; a larger file is not read. Never
        // through a final link, never a FIFO or a device (aegis_files).
        aegis_files::open(&c.path)
            .map_err(aegis_files::FileError::into_io)
            .and_then(|f| {
                f.take(set::MAX_POLICY_BYTES as u64 + 1)
                    .read_to_string(&mut text)
            })
            .map_err(io)?;
        let set = PolicySet::parse(&text, &label)
            .map_err(|e| PluginError::new(ErrorKind::CONFIG, e.to_string()))?;
        for warning in set.warnings() {
            eprintln!("aegis: {warning}");
        }
        Ok(PolicyEngine::new(set))
    }

    /// The set in force.
    pub fn current(&self) -> Arc<PolicySet> {
        self.set.load_full()
    }

    /// Parses `text` and, only if it is valid, puts it in force atomically.
    ///
    /// # Errors
    /// The parse error; the previous set stays in force.
    pub fn reload(&self, text: &str, file: &str) -> Result<(), PolicyError> {
        let set = PolicySet::parse(text, file)?;
        self.set.store(Arc::new(set));
        Ok(())
    }

    /// Decides one call that names `capability` (asked alone).
    ///
    /// # Errors
    /// A shared rate ledger failed ([`Policy::share_rate_limits`]).
    pub fn decide(
        &self,
        tool: &str,
        capability: &str,
        role: &str,
    ) -> Result<PolicyDecision, PluginError> {
        let set = self.set.load();
        let mut call = CallState::new(CallArguments::Unknown);
        let d = self.decide_in(&set, tool, capability, role, &mut call)?;
        Ok(owned(&set, d))
    }

    /// Decides one call over each of `axes` in order, stopping after the first answer
    /// that is not an allow: one decision per axis asked. All axes are decided by the
    /// same set, and a rate_limit rule takes at most one token for the whole call.
    ///
    /// # Errors
    /// A shared rate ledger failed ([`Policy::share_rate_limits`]).
    pub fn decide_axes(
        &self,
        tool: &str,
        axes: &[&str],
        role: &str,
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        self.decide_each(tool, axes.iter().copied(), role)
    }

    /// [`PolicyEngine::decide_axes`] over the axes as they come (the station's, without
    /// collecting them first).
    fn decide_each<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        let set = self.set.load();
        let mut call = CallState::new(CallArguments::Unknown);
        let mut answers = Vec::with_capacity(axes.len());
        for axis in axes {
            let d = self.decide_in(&set, tool, axis, role, &mut call)?;
            let allowed = d.verdict == Verdict::ALLOW;
            answers.push(owned(&set, d));
            if !allowed {
                break;
            }
        }
        Ok(answers)
    }

    /// [`PolicyEngine::decide_axes`] in the indexed form the host asks for
    /// ([`PolicyEvaluator::evaluate_axes_indexed`](aegis_station_api::PolicyEvaluator)):
    /// the same decisions, written to the front of `out`, naming rules and reasons by
    /// position in the deciding set's [`PolicySet::decision_table`], which the answer
    /// shares. The set is loaded once, so every decision written pairs with the table
    /// returned, whatever reload lands meanwhile. Builds no string unless a rule parks
    /// the call (the approval id is per call).
    ///
    /// # Errors
    /// More axes than `out` has slots.
    pub fn decide_axes_indexed<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
        out: &mut [IndexedDecision],
    ) -> Result<IndexedAnswer, PluginError> {
        self.decide_call(tool, axes, role, None, out)
            .map(|answer| answer.answer)
    }

    /// [`PolicyEngine::decide_axes_indexed`] with the call's arguments (canonical JSON
    /// of its arguments object; `None` when not given), for rules over them
    /// ([`arguments`]). The answer also names the argument values the deciding rule
    /// compared, and whether it needed arguments it was not given.
    ///
    /// # Errors
    /// More axes than `out` has slots.
    pub fn decide_call<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
        arguments: Option<&str>,
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        // Arguments are parsed once per call, and only for a set with rules over them.
        let args = |reads: bool| match reads {
            true => CallArguments::parse(arguments),
            false => CallArguments::Unknown,
        };
        self.decide_with(tool, axes, role, args, out)
    }

    /// [`PolicyEngine::decide_call`] with part of the arguments known, as a record
    /// states them (`values`, the canonical JSON of the known values given; `known`,
    /// every name whose value or absence is known): what a replay asks. A rule over
    /// any other argument is decided as over an unknown one, and says it was needed.
    ///
    /// # Errors
    /// More axes than `out` has slots.
    pub fn decide_stated_call<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
        values: &str,
        known: &[&str],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        let args = |reads: bool| match reads {
            true => CallArguments::partial(values, known),
            false => CallArguments::Unknown,
        };
        self.decide_with(tool, axes, role, args, out)
    }

    fn decide_with<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
        arguments: impl FnOnce(bool) -> CallArguments,
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        if axes.len() > out.len() {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                format!(
                    "{} axes asked with {} slots to answer in",
                    axes.len(),
                    out.len()
                ),
            ));
        }
        let set = self.set.load();
        let mut call = CallState::new(arguments(set.reads_arguments()));
        let mut answered = 0u32;
        let mut approval_id = ROption::RNone;
        // What the rule the host records compared: the first axis's while every axis
        // allows (the host records the first allow), else the refusing axis's.
        let mut recorded_read = None;
        for (axis, slot) in axes.zip(out.iter_mut()) {
            let d = self.decide_in(&set, tool, axis, role, &mut call)?;
            let read = call.read.take();
            if answered == 0 || d.verdict != Verdict::ALLOW {
                recorded_read = read;
            }
            answered += 1;
            *slot = IndexedDecision {
                verdict: d.verdict,
                rule: d.rule.unwrap_or(IndexedDecision::NO_RULE),
                reason: d.reason,
                limits: limits_of(&set, d.rule),
            };
            if d.verdict != Verdict::ALLOW {
                approval_id = d
                    .approval_id
                    .map_or(ROption::RNone, |a| ROption::RSome(a.into()));
                break;
            }
        }
        let answer = IndexedAnswer {
            table: set.decision_table().clone(),
            answered,
            approval_id,
        };
        let arguments_read = match recorded_read {
            Some(read) if !read.is_empty() => serde_json::Value::Object(read).to_string().into(),
            _ => RString::new(),
        };
        Ok(CallAnswer {
            answer,
            arguments_read,
            arguments_needed: call.needed,
        })
    }

    /// Decides one ask against `set`, keeping in `call` what spans the call's axes.
    ///
    /// # Errors
    /// A shared rate ledger failed: the whole call fails, so the host refuses it.
    fn decide_in(
        &self,
        set: &PolicySet,
        tool: &str,
        capability: &str,
        role: &str,
        call: &mut CallState,
    ) -> Result<Decided, PluginError> {
        let selected = set.select_call(tool, capability, role, &call.args);
        let would_allow = match &selected {
            None => set.default != Action::Deny,
            Some(s) => s.fit == Fit::Match && set.rules()[s.position as usize].can_allow(),
        };
        // What would allow cannot stand while any rule that applies to the call reads an
        // argument it cannot compare: that rule might have decided otherwise.
        if would_allow
            && set.reads_arguments()
            && let Some(unknown) = set.first_unknown(tool, capability, role, &call.args)
        {
            call.needed |= call.unstated(&set.rules()[unknown as usize]);
            return Ok(Decided::new(
                Verdict::DENY,
                Some(unknown),
                set::reason::ARGUMENTS_UNKNOWN,
            ));
        }
        let Some(selected) = selected else {
            let (verdict, reason) = match set.default {
                Action::Deny => (Verdict::DENY, set::reason::DEFAULT_DENY),
                _ => (Verdict::ALLOW, set::reason::DEFAULT_ALLOW),
            };
            return Ok(Decided::new(verdict, None, reason));
        };
        let at = selected.position;
        let rule = &set.rules()[at as usize];
        if selected.fit == Fit::Unknown && call.unstated(rule) {
            call.needed = true;
        }
        if !rule.arguments.is_empty() {
            call.read = Some(selected.read);
        }
        if selected.fit == Fit::Unknown && rule.can_allow() {
            // Allowing on what could not be compared would widen authority.
            return Ok(Decided::new(
                Verdict::DENY,
                Some(at),
                set::reason::ARGUMENTS_UNKNOWN,
            ));
        }
        // Every selected position is a rule's, so it has reasons.
        let reason = |over_limit| set.reason_position(at, over_limit).unwrap_or(u32::MAX);
        let counted = &mut call.counted;
        Ok(match rule.action {
            Action::Allow => Decided::new(Verdict::ALLOW, Some(at), reason(false)),
            Action::Deny => Decided::new(Verdict::DENY, Some(at), reason(false)),
            Action::PendingApproval => Decided {
                approval_id: Some(aegis_record::line::new_approval_id()),
                ..Decided::new(Verdict::PENDING_APPROVAL, Some(at), reason(false))
            },
            Action::RateLimit => {
                let rate = rule.rate.expect("a rate_limit rule always has a rate");
                let within = match counted.iter().find(|&&(p, _)| p == at) {
                    Some(&(_, within)) => within,
                    None => {
                        let within = self.take(&rule.id, rate)?;
                        counted.push((at, within));
                        within
                    }
                };
                if within {
                    Decided::new(Verdict::ALLOW, Some(at), reason(false))
                } else {
                    Decided::new(Verdict::RATE_LIMIT, Some(at), reason(true))
                }
            }
        })
    }

    /// Takes one token from rule `id`'s bucket (the shared ledger's, once the host
    /// gave one); whether there was one.
    ///
    /// # Errors
    /// The shared ledger failed; never read as a token.
    fn take(&self, id: &str, rate: Rate) -> Result<bool, PluginError> {
        self.buckets.try_take_at(id, rate)
    }
}

/// What one call's asks share across its axes.
struct CallState {
    /// The call's arguments, parsed once.
    args: CallArguments,
    /// Each rate_limit rule already charged for this call (by position in the set),
    /// with whether it had a token: such a rule is not charged again.
    counted: Vec<(u32, bool)>,
    /// The argument values the rule deciding the current axis compared, if it has
    /// matchers; taken after each axis.
    read: Option<serde_json::Map<String, serde_json::Value>>,
    /// A decision turned on arguments that were not given.
    needed: bool,
}

impl CallState {
    fn new(args: CallArguments) -> CallState {
        CallState {
            args,
            counted: Vec::new(),
            read: None,
            needed: false,
        }
    }

    /// Whether `rule` reads an argument this call's arguments do not state (all of
    /// them when unknown; those outside the record's binding when partial). An unknown
    /// found then is the record's gap, not the call's: the decision needed arguments.
    fn unstated(&self, rule: &set::Rule) -> bool {
        match &self.args {
            CallArguments::Unknown => true,
            CallArguments::Known(_) => false,
            partial @ CallArguments::Partial { .. } => rule
                .arguments
                .iter()
                .any(|m| partial.get(&m.name).is_none()),
        }
    }
}

/// One ask decided, by positions in the deciding set: its rule (`None` for the
/// default) and the reason in its [`PolicySet::decision_table`].
struct Decided {
    verdict: Verdict,
    rule: Option<u32>,
    reason: u32,
    approval_id: Option<String>,
}

impl Decided {
    fn new(verdict: Verdict, rule: Option<u32>, reason: u32) -> Decided {
        Decided {
            verdict,
            rule,
            reason,
            approval_id: None,
        }
    }
}

/// The ceilings of the rule at `rule` in `set`; none for the default.
fn limits_of(set: &PolicySet, rule: Option<u32>) -> Limits {
    rule.and_then(|at| set.rules().get(at as usize))
        .map(|r| r.limits)
        .unwrap_or_default()
        .into()
}

/// `d` with its rule id and reason copied out of `set`'s table: the owned form
/// [`Policy::evaluate`] answers with.
fn owned(set: &PolicySet, d: Decided) -> PolicyDecision {
    let table = set.decision_table();
    let rule = d.rule.and_then(|at| table.rule(at));
    PolicyDecision {
        verdict: d.verdict,
        matched_rule: rule.map(RString::from).into(),
        reason: RString::from(table.reason(d.reason).unwrap_or_default()),
        limits: limits_of(set, d.rule),
        approval_id: d
            .approval_id
            .map(RString::from)
            .map_or(ROption::RNone, ROption::RSome),
    }
}

impl Policy for PolicyEngine {
    fn policy_set_hash(&self) -> [u8; 32] {
        *self.set.load().hash().as_bytes()
    }

    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
        self.decide(
            request.tool_id.as_str(),
            request.capability.as_str(),
            request.role.as_str(),
        )
    }

    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        self.decide_each(
            request.tool_id.as_str(),
            axes.iter().map(RStr::as_str),
            request.role.as_str(),
        )
    }

    fn evaluate_axes_indexed(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<IndexedAnswer, PluginError> {
        self.decide_axes_indexed(
            request.tool_id.as_str(),
            axes.iter().map(RStr::as_str),
            request.role.as_str(),
            out,
        )
    }

    fn evaluate_call(
        &self,
        request: &PolicyRequest<'_>,
        arguments: Option<&str>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        self.decide_call(
            request.tool_id.as_str(),
            axes.iter().map(RStr::as_str),
            request.role.as_str(),
            arguments,
            out,
        )
    }

    fn evaluate_stated_call(
        &self,
        request: &PolicyRequest<'_>,
        values: &str,
        known: &[RStr<'_>],
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        let known: Vec<&str> = known.iter().map(RStr::as_str).collect();
        self.decide_stated_call(
            request.tool_id.as_str(),
            axes.iter().map(RStr::as_str),
            request.role.as_str(),
            values,
            &known,
            out,
        )
    }

    /// Every rate_limit rule takes from `ledger` from now on, keyed by its id.
    fn share_rate_limits(&self, ledger: RateLedgerBox) -> Result<bool, PluginError> {
        self.buckets.share(ledger).map(|()| true)
    }
}
