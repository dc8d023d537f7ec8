//! The side plugin authors write against: plain Rust traits, wrapped for the boundary.
//!
//! An author implements [`Policy`], [`Confinement`] or [`Sink`] and names the
//! constructors in [`plugin_module!`](crate::plugin_module). The macro wraps each value in
//! [`Guarded`], whose trait-object methods all run through [`guard`], so no
//! panic can reach abi_stable's wrappers.

use crate::{
    AuditSink, AuditSink_TO, AuditSinkBox, CallAnswer, ConfinementBackend, ConfinementBackend_TO,
    ConfinementBackendBox, ConfinementReport, ConfinementRequest, IndexedAnswer, IndexedDecision,
    PluginError, PolicyDecision, PolicyEvaluator, PolicyEvaluator_TO, PolicyEvaluatorBox,
    PolicyRequest, RateLedgerBox, Retention, StoredApproval, StoredSession, Tail, each_axis, guard,
    index_decisions,
};
use abi_stable::sabi_trait::TD_Opaque;
#[cfg(not(aegis_api_before_indexed))]
use abi_stable::std_types::RSliceMut;
use abi_stable::std_types::{ROption, RResult, RSlice, RStr, RString, RVec};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// A policy evaluator, in plain Rust.
pub trait Policy: Send + Sync + 'static {
    /// SHA-256 of the canonical JSON of the parsed policy set.
    fn policy_set_hash(&self) -> [u8; 32];
    /// Decides one call.
    ///
    /// # Errors
    /// When the call cannot be decided; the host then refuses it.
    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError>;
    /// Decides one call over every axis its grant would carry: see
    /// [`PolicyEvaluator::evaluate_axes`]. The default asks [`Policy::evaluate`] per axis
    /// ([`each_axis`]); an evaluator with per-call state (a rate limit) overrides it so
    /// that one call counts once.
    ///
    /// # Errors
    /// When the call cannot be decided; the host then refuses it.
    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        each_axis(request, axes, |r| self.evaluate(r))
    }

    /// [`Policy::evaluate_axes`] with the rule and reason named by position in a
    /// [`DecisionTable`](crate::DecisionTable) the evaluator shares across calls: see
    /// [`PolicyEvaluator::evaluate_axes_indexed`], which the host asks. The default
    /// answers [`Policy::evaluate_axes`] and moves its strings into a table made per call
    /// ([`index_decisions`]), which is correct but allocates as before. An evaluator
    /// overrides it to stop paying that: build the table once per policy generation,
    /// keep it with the rules it names, and hand out a clone of the `RArc` (one
    /// reference count) with each answer.
    ///
    /// # Errors
    /// When the call cannot be decided; the host then refuses it.
    fn evaluate_axes_indexed(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<IndexedAnswer, PluginError> {
        index_decisions(self.evaluate_axes(request, axes)?, out)
    }

    /// [`Policy::evaluate_axes_indexed`] with the call's arguments (RFC 8785 canonical
    /// JSON of its arguments object; `None` when unknown): see
    /// [`PolicyEvaluator::evaluate_call`], which the host asks. The default ignores the
    /// arguments, which is right for an evaluator without rules over them.
    ///
    /// # Errors
    /// When the call cannot be decided; the host then refuses it.
    fn evaluate_call(
        &self,
        request: &PolicyRequest<'_>,
        arguments: Option<&str>,
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        let _ = arguments;
        self.evaluate_axes_indexed(request, axes, out)
            .map(CallAnswer::from)
    }

    /// [`Policy::evaluate_call`] with part of the arguments known: see
    /// [`PolicyEvaluator::evaluate_stated_call`], which a replay asks. The default asks
    /// [`Policy::evaluate_call`] with the arguments unknown, which never widens.
    ///
    /// # Errors
    /// When the call cannot be decided; the host then refuses it.
    fn evaluate_stated_call(
        &self,
        request: &PolicyRequest<'_>,
        values: &str,
        known: &[RStr<'_>],
        axes: &[RStr<'_>],
        out: &mut [IndexedDecision],
    ) -> Result<CallAnswer, PluginError> {
        let _ = (values, known);
        self.evaluate_call(request, None, axes, out)
    }

    /// Takes the ledger the host shares for rate limits: see
    /// [`PolicyEvaluator::share_rate_limits`]. The default keeps no budget and answers
    /// `false`; an evaluator with rate limits hands the ledger to its [`RateLimits`]
    /// ([`RateLimits::share`]), takes with [`RateLimits::try_take`], and answers `true`.
    ///
    /// # Errors
    /// When the evaluator cannot take the ledger; the host then refuses to open.
    fn share_rate_limits(&self, ledger: RateLedgerBox) -> Result<bool, PluginError> {
        drop(ledger);
        Ok(false)
    }
}

/// A confinement backend, in plain Rust.
pub trait Confinement: Send + Sync + 'static {
    /// Applies `request` to the current process.
    ///
    /// # Errors
    /// When the request cannot be applied as asked.
    fn apply(&self, request: &ConfinementRequest<'_>) -> Result<ConfinementReport, PluginError>;
}

/// An audit sink, in plain Rust. See [`AuditSink`] for each method's contract.
pub trait Sink: Send + Sync + 'static {
    /// Whether stored lines survive the process.
    fn retention(&self) -> Retention;
    /// Where lines go; empty for volatile sinks.
    fn location(&self) -> String;
    /// The last line already stored.
    ///
    /// # Errors
    /// When the store cannot be read.
    fn existing_tail(&self) -> Result<Tail, PluginError>;
    /// Appends one whole line, all or nothing.
    ///
    /// # Errors
    /// When the line was not stored.
    fn append(&self, line: &[u8]) -> Result<(), PluginError>;
    /// Makes everything appended so far durable; stays failed after one failure.
    ///
    /// # Errors
    /// When durability could not be established.
    fn sync(&self) -> Result<(), PluginError>;
    /// Up to `max` stored lines from index `start`.
    ///
    /// # Errors
    /// When the store cannot be read.
    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError>;
    /// The sessions a store of many sessions holds; see [`AuditSink::sessions`].
    ///
    /// # Errors
    /// [`ErrorKind::UNSUPPORTED`](crate::ErrorKind::UNSUPPORTED) by default: a store of
    /// one chain.
    fn sessions(&self, host: &str, since: &str) -> Result<Vec<StoredSession>, PluginError> {
        let _ = (host, since);
        Err(PluginError::unsupported("store of many sessions"))
    }
    /// Lines of one session; see [`AuditSink::read_session`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn read_session(&self, id: &str, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        let _ = (id, start, max);
        Err(PluginError::unsupported("store of many sessions"))
    }
    /// One token from a bucket the store shares between processes; see
    /// [`AuditSink::take_rate`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn take_rate(&self, bucket: &str, max: u64, per_seconds: u64) -> Result<bool, PluginError> {
        let _ = (bucket, max, per_seconds);
        Err(PluginError::unsupported("shared rate limit"))
    }
    /// Files an approvals request; see [`AuditSink::approval_file`].
    ///
    /// # Errors
    /// UNSUPPORTED by default: a store without an approvals queue.
    fn approval_file(&self, id: &str, request: &[u8]) -> Result<bool, PluginError> {
        let _ = (id, request);
        Err(PluginError::unsupported("approvals queue"))
    }
    /// One approvals request; see [`AuditSink::approval_read`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_read(&self, id: &str) -> Result<Option<StoredApproval>, PluginError> {
        let _ = id;
        Err(PluginError::unsupported("approvals queue"))
    }
    /// The approvals queue; see [`AuditSink::approval_list`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_list(&self, max: u32) -> Result<Vec<StoredApproval>, PluginError> {
        let _ = max;
        Err(PluginError::unsupported("approvals queue"))
    }
    /// Places a decision; see [`AuditSink::approval_decide`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_decide(&self, id: &str, decision: &[u8]) -> Result<bool, PluginError> {
        let _ = (id, decision);
        Err(PluginError::unsupported("approvals queue"))
    }
    /// Claims a decision; see [`AuditSink::approval_claim`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_claim(&self, id: &str) -> Result<Option<Vec<u8>>, PluginError> {
        let _ = id;
        Err(PluginError::unsupported("approvals queue"))
    }
    /// Waits for a decision; see [`AuditSink::approval_wait`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_wait(&self, id: &str, timeout_ms: u64) -> Result<bool, PluginError> {
        let _ = (id, timeout_ms);
        Err(PluginError::unsupported("approvals queue"))
    }
    /// Removes a request; see [`AuditSink::approval_remove`].
    ///
    /// # Errors
    /// UNSUPPORTED by default.
    fn approval_remove(&self, id: &str) -> Result<(), PluginError> {
        let _ = id;
        Err(PluginError::unsupported("approvals queue"))
    }
}

/// A rate limit as a policy states it: at most `max` calls per `per_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Calls allowed per window.
    pub max: u64,
    /// The window, in seconds.
    pub per_seconds: u64,
}

/// Token buckets for rate-limited rules, one per rule id, shared by every thread that
/// evaluates: what a policy station keeps to answer a rate limit. A bucket starts full
/// (`max` tokens) and refills at `max` per `per_seconds`; a rule whose rate changes (a
/// reload) starts a fresh bucket.
///
/// Once given a ledger ([`RateLimits::share`]), every take goes to it instead, keyed by
/// the rule id, and the buckets in the process are no longer used: the budget is the
/// ledger's (the host's, held in the audit store when the store keeps buckets).
#[derive(Default)]
pub struct RateLimits {
    buckets: Mutex<HashMap<String, Bucket>>,
    ledger: OnceLock<RateLedgerBox>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("buckets", &self.buckets)
            .field("shared", &self.ledger.get().is_some())
            .finish()
    }
}

#[derive(Debug)]
struct Bucket {
    rate: (u64, u64),
    tokens: f64,
    last: Instant,
}

impl RateLimits {
    /// No bucket yet.
    pub fn new() -> RateLimits {
        RateLimits::default()
    }

    /// Takes every later token from `ledger` instead of the buckets in this process.
    /// The buckets already spent are not carried over: the ledger's budget is its own.
    ///
    /// # Errors
    /// A ledger was shared already: one budget, never two in turn.
    pub fn share(&self, ledger: RateLedgerBox) -> Result<(), PluginError> {
        self.ledger.set(ledger).map_err(|_| {
            PluginError::new(
                crate::ErrorKind::OTHER,
                "rate limits are already shared with a ledger",
            )
        })
    }

    /// Whether takes go to a shared ledger.
    pub fn is_shared(&self) -> bool {
        self.ledger.get().is_some()
    }

    /// [`RateLimits::try_take`] at `rate`.
    ///
    /// # Errors
    /// As [`RateLimits::try_take`].
    pub fn try_take_at(&self, id: &str, rate: Rate) -> Result<bool, PluginError> {
        self.try_take(id, rate.max, rate.per_seconds)
    }

    /// Takes one token from rule `id`'s bucket (at most `max` calls per `per_seconds`):
    /// the shared ledger's when one was given, else this process's; whether there was
    /// one.
    ///
    /// # Errors
    /// The ledger's error. The caller fails its evaluation with it, so the call is
    /// refused: an unreachable store is never "within budget", and there is no falling
    /// back to this process's buckets.
    pub fn try_take(&self, id: &str, max: u64, per_seconds: u64) -> Result<bool, PluginError> {
        match self.ledger.get() {
            Some(ledger) => ledger.take(RStr::from(id), max, per_seconds).into_result(),
            None => Ok(self.take_local(id, max, per_seconds)),
        }
    }

    /// Takes one token from rule `id`'s bucket at `rate`; whether there was one. See
    /// [`RateLimits::take`].
    pub fn take_at(&self, id: &str, rate: Rate) -> bool {
        self.take(id, rate.max, rate.per_seconds)
    }

    /// Takes one token from rule `id`'s bucket (at most `max` calls per `per_seconds`);
    /// whether there was one. Without a ledger this never fails. With one, a ledger
    /// error answers `false` (no token: fails closed); use [`RateLimits::try_take`] to
    /// tell an error from an empty bucket.
    pub fn take(&self, id: &str, max: u64, per_seconds: u64) -> bool {
        self.try_take(id, max, per_seconds).unwrap_or(false)
    }

    /// A token from this process's bucket for rule `id`.
    fn take_local(&self, id: &str, max: u64, per_seconds: u64) -> bool {
        let now = Instant::now();
        let fresh = || Bucket {
            rate: (max, per_seconds),
            tokens: max as f64,
            last: now,
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(id.to_owned()).or_insert_with(fresh);
        if bucket.rate != (max, per_seconds) {
            *bucket = fresh();
        }
        let per_second = max as f64 / per_seconds.max(1) as f64;
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(max as f64);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Wraps an author's value so that every boundary method is guarded against panics.
#[derive(Debug)]
pub struct Guarded<T>(pub T);

impl<T: Policy> PolicyEvaluator for Guarded<T> {
    fn policy_set_hash(&self) -> RResult<[u8; 32], PluginError> {
        guard(|| Ok(self.0.policy_set_hash()))
    }

    fn evaluate(&self, request: &PolicyRequest<'_>) -> RResult<PolicyDecision, PluginError> {
        guard(|| self.0.evaluate(request))
    }

    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: RSlice<'_, RStr<'_>>,
    ) -> RResult<RVec<PolicyDecision>, PluginError> {
        guard(|| {
            self.0
                .evaluate_axes(request, axes.as_slice())
                .map(RVec::from)
        })
    }

    #[cfg(not(aegis_api_before_indexed))]
    fn evaluate_axes_indexed(
        &self,
        request: &PolicyRequest<'_>,
        axes: RSlice<'_, RStr<'_>>,
        mut out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<IndexedAnswer, PluginError> {
        guard(|| {
            self.0
                .evaluate_axes_indexed(request, axes.as_slice(), out.as_mut_slice())
        })
    }

    #[cfg(not(aegis_api_before_indexed))]
    fn evaluate_call(
        &self,
        request: &PolicyRequest<'_>,
        arguments: RStr<'_>,
        axes: RSlice<'_, RStr<'_>>,
        mut out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<CallAnswer, PluginError> {
        guard(|| {
            let arguments = Some(arguments.as_str()).filter(|a| !a.is_empty());
            self.0
                .evaluate_call(request, arguments, axes.as_slice(), out.as_mut_slice())
        })
    }

    #[cfg(not(aegis_api_before_indexed))]
    fn share_rate_limits(&self, ledger: RateLedgerBox) -> RResult<bool, PluginError> {
        guard(|| self.0.share_rate_limits(ledger))
    }

    #[cfg(not(aegis_api_before_indexed))]
    fn evaluate_stated_call(
        &self,
        request: &PolicyRequest<'_>,
        values: RStr<'_>,
        known: RSlice<'_, RStr<'_>>,
        axes: RSlice<'_, RStr<'_>>,
        mut out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<CallAnswer, PluginError> {
        guard(|| {
            self.0.evaluate_stated_call(
                request,
                values.as_str(),
                known.as_slice(),
                axes.as_slice(),
                out.as_mut_slice(),
            )
        })
    }
}

impl<T: Confinement> ConfinementBackend for Guarded<T> {
    fn apply(&self, request: &ConfinementRequest<'_>) -> RResult<ConfinementReport, PluginError> {
        guard(|| self.0.apply(request))
    }
}

impl<T: Sink> AuditSink for Guarded<T> {
    fn retention(&self) -> Retention {
        // A panic here yields a value no host accepts, so the sink is refused.
        guard(|| Ok(self.0.retention())).unwrap_or(Retention(0))
    }

    fn location(&self) -> RString {
        guard(|| Ok(self.0.location()))
            .map(RString::from)
            .unwrap_or_else(|e| RString::from(format!("<{e}>")))
    }

    fn existing_tail(&self) -> RResult<Tail, PluginError> {
        guard(|| self.0.existing_tail())
    }

    fn append(&self, line: RSlice<'_, u8>) -> RResult<(), PluginError> {
        guard(|| self.0.append(line.as_slice()))
    }

    fn sync(&self) -> RResult<(), PluginError> {
        guard(|| self.0.sync())
    }

    fn read_lines(&self, start: u64, max: u32) -> RResult<RVec<RVec<u8>>, PluginError> {
        guard(|| {
            self.0
                .read_lines(start, max)
                .map(|lines| lines.into_iter().map(RVec::from).collect())
        })
    }

    fn sessions(
        &self,
        host: RStr<'_>,
        since: RStr<'_>,
    ) -> RResult<RVec<StoredSession>, PluginError> {
        guard(|| {
            self.0
                .sessions(host.as_str(), since.as_str())
                .map(RVec::from)
        })
    }

    fn read_session(
        &self,
        id: RStr<'_>,
        start: u64,
        max: u32,
    ) -> RResult<RVec<RVec<u8>>, PluginError> {
        guard(|| {
            self.0
                .read_session(id.as_str(), start, max)
                .map(|lines| lines.into_iter().map(RVec::from).collect())
        })
    }

    fn take_rate(
        &self,
        bucket: RStr<'_>,
        max: u64,
        per_seconds: u64,
    ) -> RResult<bool, PluginError> {
        guard(|| self.0.take_rate(bucket.as_str(), max, per_seconds))
    }

    fn approval_file(&self, id: RStr<'_>, request: RSlice<'_, u8>) -> RResult<bool, PluginError> {
        guard(|| self.0.approval_file(id.as_str(), request.as_slice()))
    }

    fn approval_read(&self, id: RStr<'_>) -> RResult<ROption<StoredApproval>, PluginError> {
        guard(|| self.0.approval_read(id.as_str()).map(ROption::from))
    }

    fn approval_list(&self, max: u32) -> RResult<RVec<StoredApproval>, PluginError> {
        guard(|| self.0.approval_list(max).map(RVec::from))
    }

    fn approval_decide(
        &self,
        id: RStr<'_>,
        decision: RSlice<'_, u8>,
    ) -> RResult<bool, PluginError> {
        guard(|| self.0.approval_decide(id.as_str(), decision.as_slice()))
    }

    fn approval_claim(&self, id: RStr<'_>) -> RResult<ROption<RVec<u8>>, PluginError> {
        guard(|| {
            self.0
                .approval_claim(id.as_str())
                .map(|d| ROption::from(d.map(RVec::from)))
        })
    }

    fn approval_wait(&self, id: RStr<'_>, timeout_ms: u64) -> RResult<bool, PluginError> {
        guard(|| self.0.approval_wait(id.as_str(), timeout_ms))
    }

    fn approval_remove(&self, id: RStr<'_>) -> RResult<(), PluginError> {
        guard(|| self.0.approval_remove(id.as_str()))
    }
}

/// Boxes a policy for the boundary.
pub fn policy_box<T: Policy>(
    made: Result<T, PluginError>,
) -> Result<PolicyEvaluatorBox, PluginError> {
    made.map(|t| PolicyEvaluator_TO::from_value(Guarded(t), TD_Opaque))
}

/// Boxes a confinement backend for the boundary.
pub fn confinement_box<T: Confinement>(
    made: Result<T, PluginError>,
) -> Result<ConfinementBackendBox, PluginError> {
    made.map(|t| ConfinementBackend_TO::from_value(Guarded(t), TD_Opaque))
}

/// Boxes a sink for the boundary.
pub fn sink_box<T: Sink>(made: Result<T, PluginError>) -> Result<AuditSinkBox, PluginError> {
    made.map(|t| AuditSink_TO::from_value(Guarded(t), TD_Opaque))
}

/// Defines `fn NAME() -> PluginModuleRef` for a plugin crate: its metadata and one
/// guarded constructor per kind it provides (the others answer `unsupported`).
///
/// ```
/// use aegis_station_api::{PluginError, Retention, Sink, Tail, TailKind};
///
/// struct NullSink;
/// impl NullSink {
///     fn from_config(_config: &str) -> Result<NullSink, PluginError> {
///         Ok(NullSink)
///     }
/// }
/// impl Sink for NullSink {
///     fn retention(&self) -> Retention { Retention::VOLATILE }
///     fn location(&self) -> String { String::new() }
///     fn existing_tail(&self) -> Result<Tail, PluginError> {
///         Ok(Tail { kind: TailKind::EMPTY, line: Default::default() })
///     }
///     fn append(&self, _line: &[u8]) -> Result<(), PluginError> { Ok(()) }
///     fn sync(&self) -> Result<(), PluginError> { Ok(()) }
///     fn read_lines(&self, _: u64, _: u32) -> Result<Vec<Vec<u8>>, PluginError> { Ok(vec![]) }
/// }
///
/// aegis_station_api::plugin_module! {
///     pub fn plugin_module {
///         name: "null-sink",
///         version: "0.1.0",
///         sink: NullSink::from_config,
///     }
/// }
///
/// let module = plugin_module();
/// assert_eq!((module.metadata())().name.as_str(), "null-sink");
/// let sink = (module.new_audit_sink())("".into()).into_result().unwrap();
/// assert_eq!(sink.retention(), Retention::VOLATILE);
/// // A kind the plugin does not provide answers `unsupported`.
/// assert!((module.new_policy_evaluator())("".into()).into_result().is_err());
/// ```
///
/// Built-in use calls `plugin_module()` directly. The loadable library is a separate
/// `cdylib` crate holding only [`export_root!`](crate::export_root), because the root
/// module symbol has one fixed name: two plugin rlibs carrying it cannot link into one
/// host.
#[macro_export]
macro_rules! plugin_module {
    (
        $vis:vis fn $fname:ident {
            name: $name:expr,
            version: $version:expr
            $(, policy: $policy:expr)?
            $(, confinement: $confinement:expr)?
            $(, sink: $sink:expr)?
            $(,)?
        }
    ) => {
        /// This plugin's root module: its metadata and one constructor per kind.
        $vis fn $fname() -> $crate::PluginModuleRef {
            use $crate::abi_stable::prefix_type::PrefixTypeTrait as _;
            use $crate::abi_stable::std_types::{RResult, RStr};

            extern "C" fn metadata() -> $crate::PluginMetadata {
                #[allow(unused_mut, reason = "mutated only for the kinds this plugin provides")]
                let mut kinds = $crate::Kinds::NONE;
                $( let _ = $policy; kinds = kinds.with($crate::Kinds::POLICY); )?
                $( let _ = $confinement; kinds = kinds.with($crate::Kinds::CONFINEMENT); )?
                $( let _ = $sink; kinds = kinds.with($crate::Kinds::SINK); )?
                $crate::PluginMetadata {
                    name: ($name).into(),
                    version: ($version).into(),
                    kinds,
                    api_major: $crate::API_MAJOR,
                }
            }

            #[allow(unreachable_code, unused_variables, reason = "the fallback runs only for kinds the plugin lacks")]
            extern "C" fn new_policy_evaluator(
                config: RStr<'_>,
            ) -> RResult<$crate::PolicyEvaluatorBox, $crate::PluginError> {
                $crate::guard(|| {
                    $( return $crate::__private::policy_box(($policy)(config.as_str())); )?
                    Err($crate::PluginError::unsupported("policy evaluator"))
                })
            }

            #[allow(unreachable_code, unused_variables, reason = "the fallback runs only for kinds the plugin lacks")]
            extern "C" fn new_confinement_backend(
                config: RStr<'_>,
            ) -> RResult<$crate::ConfinementBackendBox, $crate::PluginError> {
                $crate::guard(|| {
                    $( return $crate::__private::confinement_box(($confinement)(config.as_str())); )?
                    Err($crate::PluginError::unsupported("confinement backend"))
                })
            }

            #[allow(unreachable_code, unused_variables, reason = "the fallback runs only for kinds the plugin lacks")]
            extern "C" fn new_audit_sink(
                config: RStr<'_>,
            ) -> RResult<$crate::AuditSinkBox, $crate::PluginError> {
                $crate::guard(|| {
                    $( return $crate::__private::sink_box(($sink)(config.as_str())); )?
                    Err($crate::PluginError::unsupported("audit sink"))
                })
            }

            static MODULE: ::std::sync::OnceLock<$crate::PluginModuleRef> =
                ::std::sync::OnceLock::new();
            *MODULE.get_or_init(|| {
                $crate::PluginModule {
                    metadata,
                    new_policy_evaluator,
                    new_confinement_backend,
                    new_audit_sink,
                }
                .leak_into_prefix()
            })
        }
    };
}

/// Exports a plugin's root module from a `cdylib` crate: `export_root!(my_plugin::plugin_module);`.
#[macro_export]
macro_rules! export_root {
    ($module:path) => {
        /// The root module the Aegis host loads.
        #[allow(
            missing_docs,
            reason = "abi_stable generates an undocumented static here"
        )]
        pub mod aegis_plugin_export {
            /// Returns the plugin's root module.
            #[$crate::abi_stable::export_root_module]
            pub fn aegis_plugin_root() -> $crate::PluginModuleRef {
                $module()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{Rate, RateLimits};
    use crate::{ErrorKind, PluginError, RateLedger, RateLedger_TO, RateLedgerBox};
    use abi_stable::sabi_trait::TD_Opaque;
    use abi_stable::std_types::{RResult, RStr};
    use std::sync::{Arc, Mutex};

    /// A ledger that records every take and answers from a budget of `left` tokens
    /// shared by all its clones, or fails every take.
    #[derive(Clone)]
    struct Counting {
        takes: Arc<Mutex<Vec<(String, u64, u64)>>>,
        left: Arc<Mutex<u64>>,
        fails: bool,
    }

    impl Counting {
        fn new(left: u64, fails: bool) -> Counting {
            Counting {
                takes: Arc::default(),
                left: Arc::new(Mutex::new(left)),
                fails,
            }
        }

        fn boxed(&self) -> RateLedgerBox {
            RateLedger_TO::from_value(self.clone(), TD_Opaque)
        }

        fn takes(&self) -> Vec<(String, u64, u64)> {
            self.takes.lock().unwrap().clone()
        }
    }

    impl RateLedger for Counting {
        fn take(&self, bucket: RStr<'_>, max: u64, per_seconds: u64) -> RResult<bool, PluginError> {
            self.takes
                .lock()
                .unwrap()
                .push((bucket.to_string(), max, per_seconds));
            if self.fails {
                return RResult::RErr(PluginError::new(ErrorKind::IO, "store unreachable"));
            }
            let mut left = self.left.lock().unwrap();
            let had = *left > 0;
            *left = left.saturating_sub(1);
            RResult::ROk(had)
        }
    }

    const RATE: Rate = Rate {
        max: 2,
        per_seconds: 3600,
    };

    /// Without a ledger a bucket is the process's: `max` tokens, then none.
    #[test]
    fn without_a_ledger_the_budget_is_the_processs() {
        let limits = RateLimits::new();
        assert!(!limits.is_shared());
        let taken: Vec<bool> = (0..3).map(|_| limits.take_at("r", RATE)).collect();
        assert_eq!(taken, [true, true, false]);
        assert_eq!(limits.try_take_at("r", RATE), Ok(false));
        assert_eq!(limits.try_take_at("other", RATE), Ok(true));
    }

    /// Once shared, every take goes to the ledger under the rule id and rate, and the
    /// ledger's answer is the answer: two evaluators' `RateLimits` sharing one ledger
    /// spend one budget (the local buckets, which would allow 2 each, are not asked).
    #[test]
    fn a_shared_ledger_holds_the_budget_keyed_by_rule_id() {
        let ledger = Counting::new(3, false);
        let (a, b) = (RateLimits::new(), RateLimits::new());
        a.share(ledger.boxed()).unwrap();
        b.share(ledger.boxed()).unwrap();
        assert!(a.is_shared() && b.is_shared());
        let taken: Vec<bool> = (0..3)
            .flat_map(|_| [a.try_take_at("r", RATE), b.try_take_at("r", RATE)])
            .map(Result::unwrap)
            .collect();
        assert_eq!(taken, [true, true, true, false, false, false]);
        assert_eq!(ledger.takes(), vec![("r".to_owned(), 2, 3600); 6]);
    }

    /// A ledger that fails makes the take fail: never within budget, and never the
    /// process's buckets instead. `take` (which cannot say why) answers no token.
    #[test]
    fn a_failing_ledger_fails_the_take_and_never_falls_back() {
        let ledger = Counting::new(0, true);
        let limits = RateLimits::new();
        limits.share(ledger.boxed()).unwrap();
        let e = limits.try_take_at("r", RATE).unwrap_err();
        assert_eq!(e.kind, ErrorKind::IO);
        assert_eq!(e.message.as_str(), "store unreachable");
        assert!(!limits.take_at("r", RATE));
        assert_eq!(ledger.takes().len(), 2);
    }

    /// One budget, never two in turn: a second ledger is refused and the first stays.
    #[test]
    fn a_second_ledger_is_refused() {
        let (first, second) = (Counting::new(5, false), Counting::new(5, false));
        let limits = RateLimits::new();
        limits.share(first.boxed()).unwrap();
        assert!(limits.share(second.boxed()).is_err());
        assert_eq!(limits.try_take_at("r", RATE), Ok(true));
        assert_eq!((first.takes().len(), second.takes().len()), (1, 0));
    }
}
