//! The Cedar policy station: Cedar policies, validated against a Cedar schema, decide
//! each call by the caller's role, the capability axis and the tool — and, where the
//! host gives them, the call's arguments.
//!
//! # The request
//! Each axis the host asks about becomes one Cedar request:
//! - principal `Role::"<role>"`; a call that states no role is `Role::""`, an entity
//!   like any other (a policy can name it; `principal == Role::"admin"` never matches it);
//! - action `Action::"<capability>"` (`fs.read`, `fs.write`, `net.http`), or
//!   `Action::"call"` for an axis that names none;
//! - resource `Tool::"<tool id>"`;
//! - context: `{ arguments: { … } }` when the call's arguments are known, `{}` when not.
//!
//! # Guarantees
//! - **Errors refuse.** Cedar skips a policy whose evaluation fails (a missing attribute,
//!   a type error) and may then allow; this station refuses any axis on which a policy
//!   failed, naming it. A policy that reads `context.arguments` without testing
//!   `context has arguments` therefore refuses every call whose arguments are unknown.
//! - Verdicts: a satisfied `forbid` refuses (the rule is the first forbid by id); no
//!   satisfied permit refuses by default (rule none); otherwise the call is allowed,
//!   unless a satisfied permit carries `@pending_approval` (parked) or a
//!   `@rate_limit` whose bucket is empty (rate-limited). The ceilings of every satisfied
//!   permit's `@max_*` apply together (the smallest of each).
//! - **One call counts once.** All axes of one call are decided by one set, and a
//!   rate-limited permit takes at most one token per call, however many axes it permits.
//! - Parsed once into an immutable [`CedarSet`] behind an `ArcSwap`;
//!   [`CedarEngine::reload`] swaps the whole set atomically, and a reload that fails
//!   keeps the old set in force.
//! - Deciding names rules and reasons by position in a [`DecisionTable`] built per set
//!   (the shared-table form the host asks for); only a park (its approval id) and a
//!   call refused by several forbids at once (its reason names them all) add strings
//!   to the answer. The Cedar request itself (its uids and context) is built per axis.
//!
//! # Non-guarantees
//! - Roles are self-asserted, as for every policy station: a forbid keyed on a role is
//!   escaped by a caller who states another.
//! - Cedar's `like` matches raw strings. `/data/../etc/passwd` is `like "/data/*"`:
//!   normalising a path argument before it reaches any evaluator is the host's job.
//! - Rate-limit state lives in the process — a restart refills every bucket — unless
//!   the host shares a ledger ([`Policy::share_rate_limits`]): then every bucket is
//!   the ledger's, held in the audit store when the store keeps buckets (see
//!   `spec/PROFILES.md`, "Rate limits across processes"). A ledger that fails fails
//!   the evaluation, so the host refuses the call.
//!
//! [`DecisionTable`]: aegis_station_api::DecisionTable

pub mod set;

use aegis_station_api::abi_stable::std_types::{RArc, ROption, RStr, RString};
use aegis_station_api::{
    CallAnswer, DecisionTable, ErrorKind, IndexedAnswer, IndexedDecision, NarrowingLimits,
    PluginError, Policy, PolicyDecision, PolicyRequest, RateLedgerBox, RateLimits, Verdict,
};
use arc_swap::ArcSwap;
use cedar_policy::{
    AuthorizationError, Authorizer, Context, Decision, Request, RestrictedExpression,
};
pub use set::{CedarSet, LoadError, LoadWarning, PolicyMeta};
use set::{Rate, reason};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "policy-cedar",
        version: env!("CARGO_PKG_VERSION"),
        policy: CedarEngine::from_config,
    }
}

/// The deepest nesting of arguments given to Cedar; deeper arguments refuse the call.
/// Bounds the recursion that converts them.
pub const MAX_ARGUMENT_DEPTH: usize = 32;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    policies: PathBuf,
    schema: PathBuf,
    /// Argument names (or JSON Pointers) holding paths, normalised before Cedar sees
    /// them (Cedar's `like` is a raw string match).
    #[serde(default)]
    path_arguments: Vec<String>,
}

/// A Cedar set in force, with its rate-limit state.
#[derive(Debug)]
pub struct CedarEngine {
    set: ArcSwap<CedarSet>,
    buckets: RateLimits,
    /// Where [`CedarEngine::reload_files`] reads from, when built from a config.
    files: Option<(PathBuf, PathBuf)>,
    /// Arguments holding paths, normalised before Cedar sees them.
    path_arguments: Vec<String>,
    authorizer: Authorizer,
}

/// Reads at most [`set::MAX_TEXT_BYTES`] and one byte of `path`.
fn read_text(path: &Path) -> Result<String, PluginError> {
    let mut text = String::new();
    // One byte past the limit is enough to refuse it; a larger file is not read. Never
    // through a final link, never a FIFO or a device (aegis_files).
    aegis_files::open(path)
        .map_err(aegis_files::FileError::into_io)
        .and_then(|f| {
            f.take(set::MAX_TEXT_BYTES as u64 + 1)
                .read_to_string(&mut text)
        })
        .map_err(|e| PluginError::new(ErrorKind::IO, format!("{}: {e}", path.display())))?;
    Ok(text)
}

impl CedarEngine {
    /// An engine over `set`.
    pub fn new(set: CedarSet) -> CedarEngine {
        CedarEngine {
            set: ArcSwap::from_pointee(set),
            buckets: RateLimits::new(),
            files: None,
            path_arguments: Vec::new(),
            authorizer: Authorizer::new(),
        }
    }

    /// The engine with `names` (argument names or JSON Pointers) read as paths: each
    /// value there (a string, or a list of strings) is normalised lexically before
    /// Cedar sees it, so `like "/data/*"` compares where the path leads. A value with
    /// no normal form makes the arguments uncomparable (see [`Policy::evaluate_call`]).
    #[must_use]
    pub fn with_path_arguments(mut self, names: Vec<String>) -> CedarEngine {
        self.path_arguments = names;
        self
    }

    /// Builds the engine from its config section:
    /// `policies = "policy.cedar"`, `schema = "policy.cedarschema"`. The host takes
    /// relative paths against the profile's directory.
    ///
    /// # Errors
    /// A bad config, an unreadable file, or a load error naming file and line.
    pub fn from_config(config: &str) -> Result<CedarEngine, PluginError> {
        let c: Config =
            toml::from_str(config).map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message()))?;
        let set = load_files(&c.policies, &c.schema)?;
        Ok(CedarEngine {
            files: Some((c.policies, c.schema)),
            ..CedarEngine::new(set).with_path_arguments(c.path_arguments)
        })
    }

    /// The set in force.
    pub fn current(&self) -> Arc<CedarSet> {
        self.set.load_full()
    }

    /// Parses and validates the texts and, only if both are good, puts the set in
    /// force atomically.
    ///
    /// # Errors
    /// The load error; the previous set stays in force.
    pub fn reload(
        &self,
        policies: &str,
        policies_file: &str,
        schema: &str,
        schema_file: &str,
    ) -> Result<(), LoadError> {
        let set = CedarSet::parse(policies, policies_file, schema, schema_file)?;
        self.set.store(Arc::new(set));
        Ok(())
    }

    /// Reads the configured files again and reloads from them ([`CedarEngine::reload`]).
    ///
    /// # Errors
    /// An engine not built from a config, an unreadable file or a load error; the
    /// previous set stays in force.
    pub fn reload_files(&self) -> Result<(), PluginError> {
        let Some((policies, schema)) = &self.files else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "this engine was not built from files",
            ));
        };
        let set = load_files(policies, schema)?;
        self.set.store(Arc::new(set));
        Ok(())
    }

    /// Decides one call over each of `axes` in order (each standing in for the
    /// request's capability), stopping after the first answer that is not an allow,
    /// and writes the decisions to the front of `out`, naming rules and reasons by
    /// position in the answer's table. All axes are decided by one set, and a
    /// rate-limited permit takes at most one token for the call.
    ///
    /// `arguments` is the call's arguments as a JSON object, or `None` when unknown
    /// (then `context` has no `arguments` attribute). Arguments that are not an object,
    /// or nest deeper than [`MAX_ARGUMENT_DEPTH`], refuse the call.
    ///
    /// # Errors
    /// More axes than `out` has slots, or a shared rate ledger failed
    /// ([`Policy::share_rate_limits`]).
    pub fn decide(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        arguments: Option<&serde_json::Value>,
        out: &mut [IndexedDecision],
    ) -> Result<IndexedAnswer, PluginError> {
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
        let context = context_of(arguments);
        let principal = set::entity_uid(&set::ROLE, request.role.as_str());
        let resource = set::entity_uid(&set::TOOL, request.tool_id.as_str());
        let mut counted: Vec<(u32, bool)> = Vec::new();
        let mut answered = 0u32;
        let mut approval_id = ROption::RNone;
        let mut extra: Option<String> = None;
        for (axis, slot) in axes.iter().zip(out.iter_mut()) {
            let d = match &context {
                Some(context) => {
                    let action = set::action_uid(match axis.as_str() {
                        "" => set::CALL_ACTION,
                        named => named,
                    });
                    match Request::new(
                        principal.clone(),
                        action,
                        resource.clone(),
                        context.clone(),
                        None,
                    ) {
                        Ok(r) => self.decide_one(&set, &r, &mut counted)?,
                        Err(_) => Decided::refused(reason::BAD_REQUEST),
                    }
                }
                None => Decided::refused(reason::BAD_ARGUMENTS),
            };
            answered += 1;
            *slot = IndexedDecision {
                verdict: d.verdict,
                rule: d.rule.unwrap_or(IndexedDecision::NO_RULE),
                reason: d.reason,
                limits: d.limits.into(),
            };
            if d.verdict != Verdict::ALLOW {
                if d.verdict == Verdict::PENDING_APPROVAL {
                    approval_id =
                        ROption::RSome(RString::from(aegis_record::line::new_approval_id()));
                }
                extra = d.extra;
                break;
            }
        }
        let mut table = set.decision_table().clone();
        if let (Some(text), Some(last)) = (extra, answered.checked_sub(1)) {
            // Rare (several forbids at once): this answer gets its own table with
            // the one reason that names them all.
            let mut own: DecisionTable = (*table).clone();
            own.reasons.push(RString::from(text));
            if let Some(slot) = out.get_mut(last as usize) {
                slot.reason = u32::try_from(own.reasons.len() - 1).unwrap_or(u32::MAX);
            }
            table = RArc::new(own);
        }
        Ok(IndexedAnswer {
            table,
            answered,
            approval_id,
        })
    }

    /// Decides one axis. `counted` holds each rate-limited permit already charged for
    /// this call (by position), with whether it had a token.
    ///
    /// # Errors
    /// A shared rate ledger failed: the whole call fails, so the host refuses it.
    fn decide_one(
        &self,
        set: &CedarSet,
        request: &Request,
        counted: &mut Vec<(u32, bool)>,
    ) -> Result<Decided, PluginError> {
        let response = self
            .authorizer
            .is_authorized(request, set.cedar(), set.entities());
        let diagnostics = response.diagnostics();
        let mut deciding: Vec<u32> = diagnostics
            .reason()
            .filter_map(|id| set.position(id))
            .collect();
        deciding.sort_unstable();
        let reasons_of = |at: u32| set.reasons(at);
        if response.decision() == Decision::Deny && !deciding.is_empty() {
            // Satisfied forbids decided; the first (by id) is the rule.
            let first = deciding[0];
            let mut d = Decided::at(Verdict::DENY, first, reasons_of(first).map(|r| r.decided));
            if deciding.len() > 1 {
                let ids: Vec<&str> = deciding
                    .iter()
                    .filter_map(|&at| set.policies().get(at as usize))
                    .map(|m| m.id.as_str())
                    .collect();
                d.extra = Some(format!("forbidden by policies {}", ids.join(", ")));
            }
            return Ok(d);
        }
        // Cedar leaves a failing policy out of its decision; here it refuses.
        let mut failed: Vec<u32> = diagnostics
            .errors()
            .filter_map(|e| match e {
                AuthorizationError::PolicyEvaluationError(e) => set.position(e.policy_id()),
            })
            .collect();
        if diagnostics.errors().next().is_some() {
            failed.sort_unstable();
            return Ok(match failed.first() {
                Some(&at) => Decided::at(Verdict::DENY, at, reasons_of(at).map(|r| r.error)),
                None => Decided::refused(reason::BAD_REQUEST),
            });
        }
        if response.decision() == Decision::Deny {
            return Ok(Decided::refused(reason::NO_PERMIT));
        }
        let metas = set.policies();
        let meta = |at: u32| metas.get(at as usize);
        if let Some(&at) = deciding
            .iter()
            .find(|&&at| meta(at).is_some_and(|m| m.pending_approval))
        {
            return Ok(Decided::at(
                Verdict::PENDING_APPROVAL,
                at,
                reasons_of(at).map(|r| r.decided),
            ));
        }
        let limits = deciding
            .iter()
            .filter_map(|&at| meta(at))
            .fold(NarrowingLimits::default(), |l, m| l.meet(m.limits));
        let mut rule = deciding[0];
        let mut first_limited = None;
        for &at in &deciding {
            let Some(m) = meta(at) else { continue };
            let Some(rate) = m.rate else { continue };
            first_limited.get_or_insert(at);
            let within = match counted.iter().find(|&&(p, _)| p == at) {
                Some(&(_, within)) => within,
                None => {
                    let within = self.take(&m.id, rate)?;
                    counted.push((at, within));
                    within
                }
            };
            if !within {
                return Ok(Decided::at(
                    Verdict::RATE_LIMIT,
                    at,
                    reasons_of(at).map(|r| r.over_limit),
                ));
            }
        }
        if let Some(at) = first_limited {
            rule = at;
        }
        Ok(Decided {
            limits,
            ..Decided::at(Verdict::ALLOW, rule, reasons_of(rule).map(|r| r.decided))
        })
    }

    /// Takes one token from policy `id`'s bucket (the shared ledger's, once the host
    /// gave one); whether there was one.
    ///
    /// # Errors
    /// The shared ledger failed; never read as a token.
    fn take(&self, id: &str, rate: Rate) -> Result<bool, PluginError> {
        self.buckets.try_take_at(id, rate)
    }

    /// [`CedarEngine::decide`] in the owned form: one [`PolicyDecision`] per axis asked.
    fn decide_owned(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        arguments: Option<&serde_json::Value>,
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        let mut out = vec![IndexedDecision::default(); axes.len()];
        let answer = match arguments {
            Some(value) => self.decide(request, axes, Some(value), &mut out)?,
            // Asked without arguments: as the host's ask with them unknown.
            None => self.evaluate_call(request, None, axes, &mut out)?.answer,
        };
        let table = &answer.table;
        let answered = usize::try_from(answer.answered).unwrap_or(usize::MAX);
        let last = answered.saturating_sub(1);
        Ok(out
            .iter()
            .take(answered)
            .enumerate()
            .map(|(i, d)| PolicyDecision {
                verdict: d.verdict,
                matched_rule: table.rule(d.rule).map(RString::from).into(),
                reason: RString::from(table.reason(d.reason).unwrap_or_default()),
                limits: d.limits,
                approval_id: if i == last {
                    answer.approval_id.clone()
                } else {
                    ROption::RNone
                },
            })
            .collect())
    }
}

fn load_files(policies: &Path, schema: &Path) -> Result<CedarSet, PluginError> {
    let policies_text = read_text(policies)?;
    let schema_text = read_text(schema)?;
    let set = CedarSet::parse(
        &policies_text,
        &policies.display().to_string(),
        &schema_text,
        &schema.display().to_string(),
    )
    .map_err(|e| PluginError::new(ErrorKind::CONFIG, e.to_string()))?;
    // The station ABI has no channel for load diagnostics.
    for warning in set.warnings() {
        eprintln!("aegis: {warning}");
    }
    Ok(set)
}

/// One axis decided, by positions in the deciding set.
struct Decided {
    verdict: Verdict,
    rule: Option<u32>,
    reason: u32,
    limits: NarrowingLimits,
    /// A reason built for this call only, replacing `reason`.
    extra: Option<String>,
}

impl Decided {
    fn at(verdict: Verdict, rule: u32, reason: Option<u32>) -> Decided {
        Decided {
            verdict,
            rule: Some(rule),
            // Every position has reasons; a missing one names nothing the table holds,
            // which the host refuses.
            reason: reason.unwrap_or(u32::MAX),
            limits: NarrowingLimits::default(),
            extra: None,
        }
    }

    fn refused(reason: u32) -> Decided {
        Decided {
            verdict: Verdict::DENY,
            rule: None,
            reason,
            limits: NarrowingLimits::default(),
            extra: None,
        }
    }
}

/// The Cedar context for a call: `{arguments: …}` for known arguments, `{}` for
/// unknown ones; `None` when the arguments cannot be given to Cedar.
fn context_of(arguments: Option<&serde_json::Value>) -> Option<Context> {
    match arguments {
        None => Some(Context::empty()),
        Some(v @ serde_json::Value::Object(_)) => {
            let record = to_cedar(v, 0)?;
            Context::from_pairs([("arguments".to_owned(), record)]).ok()
        }
        Some(_) => None,
    }
}

/// A JSON value as a Cedar value, built directly (never through Cedar's JSON reader,
/// which would read `{"__entity": …}` in an argument as an entity reference).
///
/// Strings, booleans, arrays (as sets) and objects (as records) map across; an integer
/// that fits i64 is a Long. Any other number becomes the string of its JSON text, so
/// comparing it as a number is a type error, which refuses the call. `null` (in an
/// object or an array) is left out: `has` sees it as absent.
fn to_cedar(v: &serde_json::Value, depth: usize) -> Option<RestrictedExpression> {
    use serde_json::Value;
    if depth > MAX_ARGUMENT_DEPTH {
        return None;
    }
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RestrictedExpression::new_long(i),
            None => RestrictedExpression::new_string(n.to_string()),
        },
        Value::Array(items) => {
            let mut set = Vec::with_capacity(items.len());
            for item in items.iter().filter(|i| !i.is_null()) {
                set.push(to_cedar(item, depth + 1)?);
            }
            RestrictedExpression::new_set(set)
        }
        Value::Object(fields) => {
            let mut record = Vec::with_capacity(fields.len());
            for (k, item) in fields.iter().filter(|(_, i)| !i.is_null()) {
                record.push((k.clone(), to_cedar(item, depth + 1)?));
            }
            RestrictedExpression::new_record(record).ok()?
        }
    })
}

impl Policy for CedarEngine {
    fn policy_set_hash(&self) -> [u8; 32] {
        *self.set.load().hash().as_bytes()
    }

    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
        self.decide_owned(request, &[request.capability], None)?
            .pop()
            .ok_or_else(|| PluginError::new(ErrorKind::OTHER, "no decision"))
    }

    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        self.decide_owned(request, axes, None)
    }

    fn evaluate_axes_indexed(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<IndexedAnswer, PluginError> {
        self.evaluate_call(request, None, axes, out)
            .map(|a| a.answer)
    }

    /// The arguments are read through `aegis-policy-arguments`: configured path
    /// arguments are normalised, and a key another key folds to, a `__proto__` key, or
    /// a path with no normal form makes them uncomparable. Arguments unknown or
    /// uncomparable refuse the call on the first axis where a policy that reads them
    /// applies (by principal, action and resource): Cedar would otherwise skip a
    /// `forbid` guarded by `context has arguments`. No policy reading them applies:
    /// decided as usual, with no `arguments` in the context.
    fn evaluate_call(
        &self,
        request: &PolicyRequest<'_>,
        arguments: Option<&str>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        let given = arguments.is_some();
        let readable = match aegis_policy_arguments::Arguments::parse(arguments) {
            aegis_policy_arguments::Arguments::Known(map) => self.comparable(map),
            aegis_policy_arguments::Arguments::Partial { .. }
            | aegis_policy_arguments::Arguments::Unknown => None,
        };
        match readable {
            Some(value) => Ok(CallAnswer::from(self.decide(
                request,
                axes,
                Some(&value),
                out,
            )?)),
            None => {
                if let Some(answer) = self.refuse_if_read(request, axes, out)? {
                    return Ok(CallAnswer {
                        answer,
                        arguments_read: RString::new(),
                        arguments_needed: !given,
                    });
                }
                Ok(CallAnswer::from(self.decide(request, axes, None, out)?))
            }
        }
    }

    /// Every `@rate_limit` permit takes from `ledger` from now on, keyed by its id.
    fn share_rate_limits(&self, ledger: RateLedgerBox) -> Result<bool, PluginError> {
        self.buckets.share(ledger).map(|()| true)
    }
}

impl CedarEngine {
    /// `map` with its path arguments normalised, or `None` when it cannot be compared.
    fn comparable(
        &self,
        map: serde_json::Map<String, serde_json::Value>,
    ) -> Option<serde_json::Value> {
        use serde_json::Value;
        // `map` reads one way only: `Arguments::parse` refuses text with colliding keys
        // (aegis_policy_arguments::unambiguous).
        let mut value = Value::Object(map);
        for name in &self.path_arguments {
            let normal = match aegis_policy_arguments::lookup(value.as_object()?, name)? {
                None => continue,
                Some(Value::String(s)) => Value::String(aegis_policy_arguments::normalise(s)?),
                Some(Value::Array(items)) => Value::Array(
                    items
                        .iter()
                        .map(|i| i.as_str().and_then(aegis_policy_arguments::normalise))
                        .map(|p| p.map(Value::String))
                        .collect::<Option<Vec<_>>>()?,
                ),
                Some(_) => return None,
            };
            let slot = if name.starts_with('/') {
                value.pointer_mut(name)?
            } else {
                value.as_object_mut()?.get_mut(name)?
            };
            *slot = normal;
        }
        Some(value)
    }

    /// When a policy that reads arguments applies to the call on one of `axes` (asked
    /// in order), refuses the call there: the answer, with one decision per axis up to
    /// that one. `None` when none applies.
    fn refuse_if_read(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<Option<IndexedAnswer>, PluginError> {
        let set = self.set.load();
        let Some(scopes) = set.argument_scopes() else {
            return Ok(None);
        };
        let principal = set::entity_uid(&set::ROLE, request.role.as_str());
        let resource = set::entity_uid(&set::TOOL, request.tool_id.as_str());
        for (i, axis) in axes.iter().enumerate() {
            let action = set::action_uid(match axis.as_str() {
                "" => set::CALL_ACTION,
                named => named,
            });
            let Ok(asked) = Request::new(
                principal.clone(),
                action,
                resource.clone(),
                Context::empty(),
                None,
            ) else {
                continue;
            };
            let response = self
                .authorizer
                .is_authorized(&asked, scopes, set.entities());
            let Some(at) = response
                .diagnostics()
                .reason()
                .filter_map(|id| set.position(id))
                .min()
            else {
                continue;
            };
            // The axes before were asked the same way and no reader applied: the
            // answer is this axis's refusal after theirs, so decide them normally.
            let before = self.decide(request, &axes[..i], None, out)?;
            let refused_before = out[..i].iter().any(|d| d.verdict != Verdict::ALLOW);
            if before.answered as usize != i || refused_before {
                return Ok(Some(before));
            }
            let Some(slot) = out.get_mut(i) else {
                return Ok(None);
            };
            *slot = IndexedDecision {
                verdict: Verdict::DENY,
                rule: at,
                reason: reason::ARGUMENTS_UNKNOWN,
                limits: Default::default(),
            };
            return Ok(Some(IndexedAnswer {
                table: set.decision_table().clone(),
                answered: u32::try_from(i + 1).unwrap_or(u32::MAX),
                approval_id: ROption::RNone,
            }));
        }
        Ok(None)
    }
}
