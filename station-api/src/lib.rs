//! The station API: the contract between the Aegis host and its plugins.
//!
//! A plugin library provides one or more of three kinds — a [`PolicyEvaluator`], a
//! [`ConfinementBackend`], an [`AuditSink`] — through one root module
//! ([`PluginModule`]). The host loads it at run time with `abi_stable`, which checks the
//! API version and the layout of every type reachable from the root module before any
//! plugin code runs. Built-in plugins go through exactly the same types.
//!
//! # Why this crate allows `unsafe`
//! `#[derive(StableAbi)]` and `#[sabi_trait]` generate `unsafe` impls and blocks, and
//! `#[sabi_trait]` trips `non_local_definitions`. This crate contains no hand-written
//! `unsafe`; the workspace's `unsafe_code = "forbid"` is relaxed here only so that the
//! generated code compiles. Plugins and the host still forbid it.
//!
//! # Guarantees
//! - A panic in plugin code never crosses the boundary: every method reaches plugin code
//!   through [`guard`], which turns a panic into a [`PluginError`] of kind
//!   [`ErrorKind::PANIC`]. (A panic that reached abi_stable's wrappers would abort.)
//! - Enums crossing the boundary are integer newtypes with named constants, so a newer
//!   plugin can send a value an older host does not know; the host treats unknown values
//!   as errors, never as a default.
//! - Sinks store bytes. Numbering, linking and signing lines stay in the host, so a sink
//!   cannot forge a chain.
//!
//! # Versioning
//! Additions go after the last prefix field of [`PluginModule`] or after the last method
//! of a trait marked `last_prefix_field`; anything else is a new major (a new package
//! version 2.0.0), which the host accepts beside the old one through a renamed
//! dependency. See `spec/PLUGINS.md`.

use abi_stable::library::RootModule;
use abi_stable::sabi_types::VersionStrings;
#[cfg(not(aegis_api_before_indexed))]
use abi_stable::std_types::RSliceMut;
use abi_stable::std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec};
use abi_stable::{StableAbi, declare_root_module_statics, package_version_strings, sabi_trait};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use abi_stable;

/// The API major this crate defines (its package major version).
pub const API_MAJOR: u32 = 1;

macro_rules! int_enum {
    ($(#[$doc:meta])* $name:ident($repr:ty) { $($(#[$cdoc:meta])* $konst:ident = $val:expr),* $(,)? }) => {
        $(#[$doc])*
        #[repr(transparent)]
        #[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub $repr);

        impl $name {
            $($(#[$cdoc])* pub const $konst: $name = $name($val);)*

            /// The constant's name, or `None` for a value this version does not define.
            pub fn name(self) -> Option<&'static str> {
                match self {
                    $($name::$konst => Some(stringify!($konst)),)*
                    _ => None,
                }
            }
        }
    };
}

int_enum! {
    /// What kind of failure a plugin reports.
    ErrorKind(u32) {
        /// The plugin does not provide the requested kind.
        UNSUPPORTED = 1,
        /// The plugin's config section was refused.
        CONFIG = 2,
        /// Plugin code panicked; the guard caught it.
        PANIC = 3,
        /// An I/O operation failed.
        IO = 4,
        /// The request cannot be honoured as asked (e.g. confinement not enforceable).
        REFUSED = 5,
        /// Anything else.
        OTHER = 6,
        /// Held by someone else for now; the same request may succeed later (e.g. a
        /// record file another process is writing). A host may wait and ask again.
        BUSY = 7,
    }
}

int_enum! {
    /// The kinds a plugin provides, as a bit set.
    Kinds(u32) {
        /// Provides nothing.
        NONE = 0,
        /// Provides a policy evaluator.
        POLICY = 1,
        /// Provides a confinement backend.
        CONFINEMENT = 2,
        /// Provides an audit sink.
        SINK = 4,
    }
}

impl Kinds {
    /// Whether every kind in `other` is in `self`.
    pub fn contains(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets.
    #[must_use]
    pub fn with(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }
}

int_enum! {
    /// A policy evaluator's verdict.
    Verdict(u32) {
        /// The call may proceed to the capability station.
        ALLOW = 1,
        /// A rule refuses the call.
        DENY = 2,
        /// A rate limit refuses the call.
        RATE_LIMIT = 3,
        /// The call is parked for a human and refused for now.
        PENDING_APPROVAL = 4,
    }
}

int_enum! {
    /// Whether a sink keeps what it is given.
    Retention(u32) {
        /// Lines survive the process (a file, a database).
        DURABLE = 1,
        /// Lines die with the process (memory).
        VOLATILE = 2,
    }
}

int_enum! {
    /// What a sink holds at its end.
    TailKind(u32) {
        /// Nothing: the store is empty.
        EMPTY = 1,
        /// A complete last line, given in [`Tail::line`].
        LINE = 2,
        /// A partial last line (a torn write): the store must not be appended to.
        TORN = 3,
    }
}

int_enum! {
    /// How much of a confinement request the kernel enforces.
    Enforcement(u32) {
        /// Everything requested.
        FULL = 1,
        /// Some of it; [`ConfinementReport::gaps`] says what not.
        PARTIAL = 2,
        /// None of it.
        NONE = 3,
    }
}

int_enum! {
    /// What a host asks of a confinement backend when the kernel cannot enforce all of a
    /// request. A newer host may add levels; a backend refuses one it does not know.
    ConfinementLevel(u32) {
        /// All of it, or refuse: the host then does not start the program.
        REQUIRED = 1,
        /// Whatever the kernel enforces; the report's gaps say what is not.
        BEST_EFFORT = 2,
    }
}

/// A failure reported across the boundary.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// One line for an operator.
    pub message: RString,
}

impl PluginError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> PluginError {
        PluginError {
            kind,
            message: RString::from(message.into()),
        }
    }

    /// The plugin does not provide `kind_name`.
    pub fn unsupported(kind_name: &str) -> PluginError {
        PluginError::new(
            ErrorKind::UNSUPPORTED,
            format!("this plugin does not provide a {kind_name}"),
        )
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PluginError {}

/// Runs plugin code, turning a panic into an [`ErrorKind::PANIC`] error.
///
/// Every method of the trait objects built by [`plugin_module!`] goes through this; a
/// plugin that builds its own trait objects must do the same.
pub fn guard<T>(f: impl FnOnce() -> Result<T, PluginError>) -> RResult<T, PluginError> {
    // The result is written into a slot rather than returned through `catch_unwind`:
    // returning a ~150-byte decision through it cost ~20 ns per call (measured with
    // benches/benches/plugins.rs), more than the rest of the boundary together.
    let mut slot = None;
    match catch_unwind(AssertUnwindSafe(|| slot = Some(f()))) {
        Ok(()) => match slot {
            Some(Ok(v)) => RResult::ROk(v),
            Some(Err(e)) => RResult::RErr(e),
            None => RResult::RErr(PluginError::new(
                ErrorKind::OTHER,
                "plugin returned nothing",
            )),
        },
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".to_owned());
            RResult::RErr(PluginError::new(
                ErrorKind::PANIC,
                format!("plugin panicked: {what}"),
            ))
        }
    }
}

/// Describes a plugin library.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PluginMetadata {
    /// The plugin's name, e.g. `memory-sink`.
    pub name: RString,
    /// The plugin's own version.
    pub version: RString,
    /// What it provides.
    pub kinds: Kinds,
    /// The station API major it was built against.
    pub api_major: u32,
}

/// What a policy evaluator is asked. Borrowed: the hot path allocates nothing to ask.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct PolicyRequest<'a> {
    /// The tool called.
    pub tool_id: RStr<'a>,
    /// The capability requested, e.g. `fs.read`; empty if none.
    pub capability: RStr<'a>,
    /// The caller's role; empty if none.
    pub role: RStr<'a>,
    /// The policy session scope; empty if none.
    pub session: RStr<'a>,
    /// Present only in the deliberately incompatible build the plugin-ABI test makes
    /// (`tests/plugin-abi/altered-api`), to show how a layout mismatch is reported.
    #[cfg(aegis_altered_abi)]
    pub tenant: RStr<'a>,
}

/// Ceilings a policy places on a call. They can only narrow a grant.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory ceiling.
    pub max_memory_bytes: ROption<u64>,
    /// Wall-clock ceiling.
    pub max_wall_ms: ROption<u64>,
    /// Output ceiling.
    pub max_output_bytes: ROption<u64>,
}

/// Ceilings a policy asks for, as plain Rust: the one type the host and the policy
/// stations use for them. [`Limits`] is its form at the plugin boundary (its layout is
/// part of the ABI and does not change); the two convert both ways without loss.
/// Not `StableAbi`: it never crosses the boundary itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NarrowingLimits {
    /// Memory ceiling, if any.
    pub max_memory_bytes: Option<u64>,
    /// Wall-clock ceiling, if any.
    pub max_wall_ms: Option<u64>,
    /// Output ceiling, if any.
    pub max_output_bytes: Option<u64>,
}

impl NarrowingLimits {
    /// Both sets of ceilings at once: each the smaller of the two, and a ceiling either
    /// sets is kept. Never wider than either side.
    #[must_use]
    pub fn meet(self, other: NarrowingLimits) -> NarrowingLimits {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        NarrowingLimits {
            max_memory_bytes: min(self.max_memory_bytes, other.max_memory_bytes),
            max_wall_ms: min(self.max_wall_ms, other.max_wall_ms),
            max_output_bytes: min(self.max_output_bytes, other.max_output_bytes),
        }
    }
}

impl From<Limits> for NarrowingLimits {
    fn from(l: Limits) -> NarrowingLimits {
        NarrowingLimits {
            max_memory_bytes: l.max_memory_bytes.into_option(),
            max_wall_ms: l.max_wall_ms.into_option(),
            max_output_bytes: l.max_output_bytes.into_option(),
        }
    }
}

impl From<NarrowingLimits> for Limits {
    fn from(l: NarrowingLimits) -> Limits {
        Limits {
            max_memory_bytes: l.max_memory_bytes.into(),
            max_wall_ms: l.max_wall_ms.into(),
            max_output_bytes: l.max_output_bytes.into(),
        }
    }
}

/// A policy evaluator's answer.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct PolicyDecision {
    /// The verdict.
    pub verdict: Verdict,
    /// The rule that decided, if any (none means the set's default).
    pub matched_rule: ROption<RString>,
    /// Why, for the record.
    pub reason: RString,
    /// Ceilings the rule imposes.
    pub limits: Limits,
    /// Set with [`Verdict::PENDING_APPROVAL`]: names the park.
    pub approval_id: ROption<RString>,
}

/// The rule ids and reasons an [`IndexedDecision`] points into.
///
/// An evaluator builds one per policy generation (when it loads a policy) and hands out
/// a shared reference to it with every [`IndexedAnswer`], so naming the matched rule and
/// the reason costs an index per call rather than a fresh string. A decision is only
/// meaningful against the table it came with: a reload publishes a new table and the
/// answers decided by the new policy carry that one.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, Default, PartialEq, Eq)]
pub struct DecisionTable {
    /// Rule ids; [`IndexedDecision::rule`] is a position in it.
    pub rules: RVec<RString>,
    /// Reasons for the record; [`IndexedDecision::reason`] is a position in it.
    pub reasons: RVec<RString>,
}

impl DecisionTable {
    /// The rule id at `index`, or `None` when the table has no such entry (including
    /// [`IndexedDecision::NO_RULE`]).
    pub fn rule(&self, index: u32) -> Option<&str> {
        self.rules
            .get(usize::try_from(index).ok()?)
            .map(RString::as_str)
    }

    /// The reason at `index`, or `None` when the table has no such entry.
    pub fn reason(&self, index: u32) -> Option<&str> {
        self.reasons
            .get(usize::try_from(index).ok()?)
            .map(RString::as_str)
    }
}

/// One axis's answer, naming its rule and reason by position in a [`DecisionTable`]:
/// the allocation-free form of a [`PolicyDecision`] (see
/// [`PolicyEvaluator::evaluate_axes_indexed`]).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexedDecision {
    /// The verdict.
    pub verdict: Verdict,
    /// The rule that decided, as a position in [`DecisionTable::rules`], or
    /// [`IndexedDecision::NO_RULE`] for the set's default.
    pub rule: u32,
    /// Why, as a position in [`DecisionTable::reasons`].
    pub reason: u32,
    /// Ceilings the rule imposes.
    pub limits: Limits,
}

impl IndexedDecision {
    /// No rule decided: the policy's default did.
    pub const NO_RULE: u32 = u32::MAX;
}

impl Default for IndexedDecision {
    /// A slot nothing was written to: verdict 0, which no host accepts, so a slot read
    /// by mistake refuses the call rather than allowing it.
    fn default() -> IndexedDecision {
        IndexedDecision {
            verdict: Verdict(0),
            rule: IndexedDecision::NO_RULE,
            reason: u32::MAX,
            limits: Limits::default(),
        }
    }
}

/// What [`PolicyEvaluator::evaluate_axes_indexed`] returns beside the decisions it wrote.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct IndexedAnswer {
    /// The table every decision written refers to: the one of the policy generation
    /// that decided them all.
    pub table: RArc<DecisionTable>,
    /// How many decisions were written, at the front of the slots given.
    pub answered: u32,
    /// Set when the last decision written is [`Verdict::PENDING_APPROVAL`]: names the
    /// park. (It is per call, so it cannot come from the table.)
    pub approval_id: ROption<RString>,
}

/// Evaluates a call against a policy set.
#[sabi_trait]
pub trait PolicyEvaluator: Send + Sync {
    /// SHA-256 of the canonical JSON of the parsed policy set (never of its source text).
    fn policy_set_hash(&self) -> RResult<[u8; 32], PluginError>;

    /// Decides one call.
    #[sabi(last_prefix_field)]
    fn evaluate(&self, request: &PolicyRequest<'_>) -> RResult<PolicyDecision, PluginError>;

    /// Decides one call over every axis its grant would carry.
    ///
    /// `axes` are asked in order, each standing in for `request.capability` (which is
    /// not read); the answer holds one decision per axis asked, stopping after the first
    /// that is not an allow. The host refuses the call unless every axis is allowed.
    /// What this method adds over asking [`PolicyEvaluator::evaluate`] per axis is that
    /// the evaluator knows the asks are one call: a rate limit must count it once.
    ///
    /// Added after the last prefix field, with a default body that asks `evaluate` once
    /// per axis ([`each_axis`]). It was meant to serve a library built before the
    /// method; abi_stable 0.11 refuses such a library at load instead (see
    /// [`PolicyEvaluator::evaluate_axes_indexed`] and `spec/PLUGINS.md`).
    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: RSlice<'_, RStr<'_>>,
    ) -> RResult<RVec<PolicyDecision>, PluginError> {
        each_axis(request, axes.as_slice(), |r| self.evaluate(r).into_result())
            .map(RVec::from)
            .into()
    }

    // previous-api: cut from here. tests/plugin-abi/previous-api builds this crate
    // without the method below, as an older plugin has it; #[sabi_trait] does not
    // honour a cfg on a method, so its build script cuts these lines instead.
    /// [`PolicyEvaluator::evaluate_axes`] without building strings per call: the same
    /// decisions, in the same order and with the same stop, are written to the front of
    /// `out` (one slot per axis asked) naming their rule and reason by position in the
    /// answer's [`DecisionTable`], which the evaluator shares across calls. This is what
    /// the host asks.
    ///
    /// Writing more decisions than there are slots is impossible; an answer claiming
    /// more than `out.len()` is refused by the host. The table must be the one of the
    /// policy generation that made every decision written.
    ///
    /// Added after `evaluate_axes`. The default body asks `evaluate_axes` and moves the
    /// owned strings into a table made for this one call ([`index_decisions`]). A
    /// library built before the method existed does not reach it: abi_stable 0.11's
    /// layout check refuses a vtable shorter than the host's at load (measured in
    /// `host/runtime/tests/all/plugin_abi.rs`; see `spec/PLUGINS.md`).
    fn evaluate_axes_indexed(
        &self,
        request: &PolicyRequest<'_>,
        axes: RSlice<'_, RStr<'_>>,
        out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<IndexedAnswer, PluginError> {
        match self.evaluate_axes(request, axes).into_result() {
            Ok(decisions) => index_decisions(decisions.into_vec(), out.into_mut_slice()).into(),
            Err(e) => RResult::RErr(e),
        }
    }

    /// [`PolicyEvaluator::evaluate_axes_indexed`] with the call's arguments: what the
    /// host asks when it has them to give. `arguments` is the RFC 8785 canonical JSON of
    /// the call's arguments object, or empty when the caller's arguments are unknown
    /// (not the same as `{}`, a call with none).
    ///
    /// An evaluator with rules over arguments must decide an unknown argument the way
    /// that cannot widen authority: a rule that restricts applies, a rule that allows
    /// does not. It then sets [`CallAnswer::arguments_needed`], so a replay can say the
    /// decision was not really made. It reports the argument values its deciding rule
    /// compared in [`CallAnswer::arguments_read`], which the host records.
    ///
    /// Added after `evaluate_axes_indexed`, with a default body that ignores the
    /// arguments: an evaluator without argument rules answers exactly as before. Like
    /// the methods before it, it makes the vtable longer, so a library built before it
    /// is refused at load (`spec/PLUGINS.md`).
    fn evaluate_call(
        &self,
        request: &PolicyRequest<'_>,
        arguments: RStr<'_>,
        axes: RSlice<'_, RStr<'_>>,
        out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<CallAnswer, PluginError> {
        let _ = arguments;
        match self.evaluate_axes_indexed(request, axes, out) {
            RResult::ROk(answer) => RResult::ROk(CallAnswer::from(answer)),
            RResult::RErr(e) => RResult::RErr(e),
        }
    }

    /// [`PolicyEvaluator::evaluate_call`] with part of the arguments known: what a
    /// replay (`aegis recheck`) asks about a recorded call whose record states some
    /// arguments and not others. `values` is the canonical JSON of one object holding
    /// the known arguments the call gave, keyed by name (a key, or a JSON Pointer for a
    /// nested one); `known` lists every name whose value is known: present in
    /// `values`, or absent from the call. Every other argument is unknown and must be
    /// decided as [`PolicyEvaluator::evaluate_call`] decides an unknown one (the way
    /// that cannot widen, setting [`CallAnswer::arguments_needed`]).
    ///
    /// Added after `evaluate_call`, with a default body that asks `evaluate_call` with
    /// the arguments unknown: an evaluator that does not read partial arguments is
    /// asked as before and, with rules over arguments, says they were needed.
    fn evaluate_stated_call(
        &self,
        request: &PolicyRequest<'_>,
        values: RStr<'_>,
        known: RSlice<'_, RStr<'_>>,
        axes: RSlice<'_, RStr<'_>>,
        out: RSliceMut<'_, IndexedDecision>,
    ) -> RResult<CallAnswer, PluginError> {
        let _ = (values, known);
        self.evaluate_call(request, RStr::from(""), axes, out)
    }

    /// Hands the evaluator the ledger its rate limits are to be taken from from now on:
    /// a bucket per rule id that every process sharing the ledger's store shares. The
    /// host asks once, after the audit sink is built and before the first call, and
    /// never for a replay (`aegis recheck` spends the evaluator's own budget). The
    /// answer is whether the evaluator took it: `false` for one that keeps no budget,
    /// or keeps its own and cannot share it.
    ///
    /// A ledger that fails ([`RateLedger::take`] answers an error) must fail the
    /// evaluation that asked: the host then refuses the call. Never read an unreachable
    /// store as "within budget", and never fall back to a budget of the process's own.
    ///
    /// Added after `evaluate_stated_call`, with a default body that answers `false`.
    fn share_rate_limits(&self, ledger: RateLedgerBox) -> RResult<bool, PluginError> {
        drop(ledger);
        RResult::ROk(false)
    }
    // previous-api: end of cut.
}

/// Rate-limit buckets held where many processes can share them: what the host hands
/// a policy evaluator ([`PolicyEvaluator::share_rate_limits`]) so that a policy's
/// `rate_limit` holds across processes and hosts. The host's ledger takes from the
/// audit store ([`AuditSink::take_rate`]) when the store keeps buckets, and from
/// buckets in its own process when it does not.
#[sabi_trait]
pub trait RateLedger: Send + Sync {
    /// Takes one token from bucket `bucket` (at most `max` calls per `per_seconds`,
    /// refilled continuously; a bucket whose rate changes starts again full); whether
    /// there was one.
    ///
    /// # Errors
    /// The ledger could not answer (its store is unreachable, say): the evaluation
    /// that asked must fail, so that the call is refused.
    #[sabi(last_prefix_field)]
    fn take(&self, bucket: RStr<'_>, max: u64, per_seconds: u64) -> RResult<bool, PluginError>;
}

/// What [`PolicyEvaluator::evaluate_call`] returns: the answer of
/// [`PolicyEvaluator::evaluate_axes_indexed`] and what the decision made of the call's
/// arguments.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct CallAnswer {
    /// The decisions, as `evaluate_axes_indexed` answers them.
    pub answer: IndexedAnswer,
    /// The argument values the deciding rule compared, as the text of one JSON object
    /// (values as compared, e.g. a path after normalisation); empty when the decision
    /// read no argument. The host records it under `decision_axes.arguments`.
    pub arguments_read: RString,
    /// The decision would have turned on arguments that were not given, and was made
    /// the way that cannot widen authority instead.
    pub arguments_needed: bool,
}

impl From<IndexedAnswer> for CallAnswer {
    /// An answer that read no argument.
    fn from(answer: IndexedAnswer) -> CallAnswer {
        CallAnswer {
            answer,
            arguments_read: RString::new(),
            arguments_needed: false,
        }
    }
}

/// Moves owned decisions into a [`DecisionTable`] made for them alone and writes their
/// indexed form to the front of `out`: how an evaluator that answers with
/// [`PolicyDecision`]s answers [`PolicyEvaluator::evaluate_axes_indexed`]. Each rule id
/// and reason is moved, not copied; the table is one allocation.
///
/// # Errors
/// More decisions than `out` has slots (an evaluator answering more decisions than
/// axes asked), as [`ErrorKind::OTHER`].
pub fn index_decisions(
    decisions: Vec<PolicyDecision>,
    out: &mut [IndexedDecision],
) -> Result<IndexedAnswer, PluginError> {
    let shape = || {
        PluginError::new(
            ErrorKind::OTHER,
            format!(
                "it answered {} decisions for {} axes asked",
                decisions.len(),
                out.len()
            ),
        )
    };
    if decisions.len() > out.len() {
        return Err(shape());
    }
    let answered = u32::try_from(decisions.len()).map_err(|_| shape())?;
    let mut table = DecisionTable {
        rules: RVec::with_capacity(decisions.len()),
        reasons: RVec::with_capacity(decisions.len()),
    };
    let mut approval_id = ROption::RNone;
    // Positions fit in u32: there are no more entries than `answered`.
    let position = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
    for (slot, d) in out.iter_mut().zip(decisions) {
        let rule = match d.matched_rule {
            ROption::RSome(id) => {
                table.rules.push(id);
                position(table.rules.len() - 1)
            }
            ROption::RNone => IndexedDecision::NO_RULE,
        };
        table.reasons.push(d.reason);
        *slot = IndexedDecision {
            verdict: d.verdict,
            rule,
            reason: position(table.reasons.len() - 1),
            limits: d.limits,
        };
        // Only the last decision can be a refusal; its approval id, if any, is kept.
        approval_id = d.approval_id;
    }
    Ok(IndexedAnswer {
        table: RArc::new(table),
        answered,
        approval_id,
    })
}

/// Asks `evaluate` once per axis of `axes`, in order, with the axis as the request's
/// capability, stopping after the first answer that is not an allow (or the first
/// error). The per-axis meaning of [`PolicyEvaluator::evaluate_axes`], for evaluators
/// whose answers carry no per-call state.
///
/// # Errors
/// The first error `evaluate` returns.
pub fn each_axis(
    request: &PolicyRequest<'_>,
    axes: &[RStr<'_>],
    mut evaluate: impl FnMut(&PolicyRequest<'_>) -> Result<PolicyDecision, PluginError>,
) -> Result<Vec<PolicyDecision>, PluginError> {
    let mut answers = Vec::with_capacity(axes.len());
    for axis in axes {
        let decision = evaluate(&PolicyRequest {
            capability: *axis,
            ..*request
        })?;
        let allowed = decision.verdict == Verdict::ALLOW;
        answers.push(decision);
        if !allowed {
            break;
        }
    }
    Ok(answers)
}

/// What a confinement backend is asked to apply to the current process. Paths are
/// absolute; each names a directory or file whose whole subtree the right covers.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct ConfinementRequest<'a> {
    /// Read files and list directories beneath.
    pub read_paths: RSlice<'a, RStr<'a>>,
    /// Read and execute beneath: what starting a program needs (the host derives this
    /// exec-support set from its profile: `/usr`, the interpreter's prefix, …).
    pub exec_paths: RSlice<'a, RStr<'a>>,
    /// Read, write, create and remove beneath.
    pub write_paths: RSlice<'a, RStr<'a>>,
    /// `host:port` destinations the program may connect to over TCP; empty denies the
    /// network. A backend that can only tell ports apart says so in its report.
    pub net_connect: RSlice<'a, RStr<'a>>,
    /// What to do when the kernel cannot enforce all of it.
    pub level: ConfinementLevel,
}

/// What a confinement backend actually got the kernel to enforce.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct ConfinementReport {
    /// Overall.
    pub enforcement: Enforcement,
    /// The negotiated kernel ABI (e.g. the Landlock ABI version), 0 if not applicable.
    pub abi: u32,
    /// One line per requested restriction that is not enforced.
    pub gaps: RVec<RString>,
    /// Everything the backend enforced, as the text of one JSON object, for the record
    /// (the host parses and checks it, and stores it canonically). Free in shape, so a
    /// backend can report what its kernel interface grows without a new API major.
    pub details: RString,
}

/// Confines the current process; called in a helper before it execs a native tool.
#[sabi_trait]
pub trait ConfinementBackend: Send + Sync {
    /// Applies `request` to the current process and reports what is enforced.
    #[sabi(last_prefix_field)]
    fn apply(&self, request: &ConfinementRequest<'_>) -> RResult<ConfinementReport, PluginError>;
}

/// The end of a sink's store.
#[repr(C)]
#[derive(StableAbi, Clone, Debug)]
pub struct Tail {
    /// What is there.
    pub kind: TailKind,
    /// With [`TailKind::LINE`]: the last line's bytes, without its newline.
    pub line: RVec<u8>,
}

/// Stores record lines. It cannot number, link or sign them: the host does.
#[sabi_trait]
pub trait AuditSink: Send + Sync {
    /// Whether stored lines survive the process.
    fn retention(&self) -> Retention;

    /// Where lines go, for an operator (a path, a database); empty for volatile sinks.
    fn location(&self) -> RString;

    /// The last line already stored, so a new session can chain to it.
    fn existing_tail(&self) -> RResult<Tail, PluginError>;

    /// Appends one whole line (canonical bytes and `\n`). All or nothing.
    fn append(&self, line: RSlice<'_, u8>) -> RResult<(), PluginError>;

    /// Returns once everything appended before the call is durable. After one failure,
    /// every later `append` and `sync` must fail too.
    fn sync(&self) -> RResult<(), PluginError>;

    /// Up to `max` stored lines from line index `start` (0-based), each without its
    /// newline, byte-exact; fewer at the end. Lets `aegis export` write any sink out as
    /// a file that `aegis verify` reads.
    #[sabi(last_prefix_field)]
    fn read_lines(&self, start: u64, max: u32) -> RResult<RVec<RVec<u8>>, PluginError>;

    /// The sessions a store that keeps one chain per session holds (a database many
    /// hosts write into), oldest first: those opened on `host` (any host when empty)
    /// at or after `since` (an RFC 3339 UTC time; any time when empty). A store that
    /// keeps one chain answers [`ErrorKind::UNSUPPORTED`], and its lines are read with
    /// [`AuditSink::read_lines`].
    ///
    /// Added after `read_lines`, with a default body that answers UNSUPPORTED.
    fn sessions(
        &self,
        host: RStr<'_>,
        since: RStr<'_>,
    ) -> RResult<RVec<StoredSession>, PluginError> {
        let _ = (host, since);
        RResult::RErr(PluginError::unsupported("store of many sessions"))
    }

    /// Up to `max` lines of session `id` (as [`AuditSink::sessions`] named it) from its
    /// line index `start` (0-based), byte-exact, without newlines; fewer at its end.
    ///
    /// Added after `read_lines`, with a default body that answers UNSUPPORTED.
    fn read_session(
        &self,
        id: RStr<'_>,
        start: u64,
        max: u32,
    ) -> RResult<RVec<RVec<u8>>, PluginError> {
        let _ = (id, start, max);
        RResult::RErr(PluginError::unsupported("store of many sessions"))
    }

    /// Takes one token from the store's bucket `bucket` (at most `max` calls per
    /// `per_seconds`, refilled continuously by the store's own clock), shared by every
    /// process writing to the store; whether there was one. What lets a policy's rate
    /// limit hold across processes and hosts.
    ///
    /// Added after `read_lines`, with a default body that answers UNSUPPORTED: the
    /// host then keeps rate limits in the policy station's process.
    fn take_rate(
        &self,
        bucket: RStr<'_>,
        max: u64,
        per_seconds: u64,
    ) -> RResult<bool, PluginError> {
        let _ = (bucket, max, per_seconds);
        RResult::RErr(PluginError::unsupported("shared rate limit"))
    }

    /// Files the approvals request `request` (canonical JSON, as the host's queue writes
    /// it) under approval id `id` in the store's approvals queue: `false`, with nothing
    /// changed, when `id` has a request already. The approvals methods let a store many
    /// hosts write hold the queue a person decides parked calls from, so that any
    /// process reaching the store can approve a park any host made; the host keeps the
    /// rules (who may decide, expiry, checking the approver's signature). A store
    /// without a queue answers [`ErrorKind::UNSUPPORTED`] to all of them.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_file(&self, id: RStr<'_>, request: RSlice<'_, u8>) -> RResult<bool, PluginError> {
        let _ = (id, request);
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// The request of `id` with its decision and whether it was claimed; `RNone` when
    /// the queue has no request of that id.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_read(&self, id: RStr<'_>) -> RResult<ROption<StoredApproval>, PluginError> {
        let _ = id;
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// Up to `max` requests of the queue, oldest filed first. The host asks one more
    /// than it lists, so a queue longer than that is refused rather than cut.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_list(&self, max: u32) -> RResult<RVec<StoredApproval>, PluginError> {
        let _ = max;
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// Places `decision` as the one decision of request `id`, and wakes every
    /// [`AuditSink::approval_wait`] on it: `false`, with nothing changed, when there is
    /// no such request or it has a decision already. Of deciders racing, exactly one
    /// gets `true`.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_decide(
        &self,
        id: RStr<'_>,
        decision: RSlice<'_, u8>,
    ) -> RResult<bool, PluginError> {
        let _ = (id, decision);
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// Marks the decision of `id` claimed and returns it, once: `RNone` when it has no
    /// decision or was claimed already. Of claimers racing, exactly one gets it.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_claim(&self, id: RStr<'_>) -> RResult<ROption<RVec<u8>>, PluginError> {
        let _ = id;
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// Returns `true` once request `id` has a decision (at the call, or when a decision
    /// is placed from any process), `false` when `timeout_ms` milliseconds pass first.
    /// The store wakes the waiter itself: no polling loop.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_wait(&self, id: RStr<'_>, timeout_ms: u64) -> RResult<bool, PluginError> {
        let _ = (id, timeout_ms);
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }

    /// Removes request `id` and its decision; nothing when there is none.
    ///
    /// Added after `take_rate`, with a default body that answers UNSUPPORTED.
    fn approval_remove(&self, id: RStr<'_>) -> RResult<(), PluginError> {
        let _ = id;
        RResult::RErr(PluginError::unsupported("approvals queue"))
    }
}

/// One request of a store's approvals queue, as [`AuditSink::approval_read`] returns it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct StoredApproval {
    /// Its approval id.
    pub id: RString,
    /// The request as filed, byte-exact.
    pub request: RVec<u8>,
    /// The decision placed on it, byte-exact; `RNone` while undecided.
    pub decision: ROption<RVec<u8>>,
    /// Whether its decision has been claimed.
    pub used: bool,
}

/// One session a store holds, as [`AuditSink::sessions`] lists it.
#[repr(C)]
#[derive(StableAbi, Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// The store's name for it, given back to [`AuditSink::read_session`]: the session
    /// nonce (lowercase hex) in the stores this crate's authors ship.
    pub id: RString,
    /// The host its open line names.
    pub host: RString,
    /// Its open line's time (RFC 3339 UTC).
    pub opened: RString,
    /// How many lines it holds.
    pub lines: u64,
}

/// A rate ledger across the boundary.
pub type RateLedgerBox = RateLedger_TO<'static, RBox<()>>;
/// A policy evaluator across the boundary.
pub type PolicyEvaluatorBox = PolicyEvaluator_TO<'static, RBox<()>>;
/// A confinement backend across the boundary.
pub type ConfinementBackendBox = ConfinementBackend_TO<'static, RBox<()>>;
/// An audit sink across the boundary.
pub type AuditSinkBox = AuditSink_TO<'static, RBox<()>>;

/// The root module every plugin library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    /// Describes the plugin.
    pub metadata: extern "C" fn() -> PluginMetadata,
    /// Builds a policy evaluator from the plugin's config section (TOML text).
    pub new_policy_evaluator:
        extern "C" fn(config: RStr<'_>) -> RResult<PolicyEvaluatorBox, PluginError>,
    /// Builds a confinement backend from the plugin's config section (TOML text).
    pub new_confinement_backend:
        extern "C" fn(config: RStr<'_>) -> RResult<ConfinementBackendBox, PluginError>,
    /// Builds an audit sink from the plugin's config section (TOML text).
    #[sabi(last_prefix_field)]
    pub new_audit_sink: extern "C" fn(config: RStr<'_>) -> RResult<AuditSinkBox, PluginError>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "aegis_plugin";
    const NAME: &'static str = "aegis plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

mod author;
pub use author::{Confinement, Guarded, Policy, Rate, RateLimits, Sink};

#[doc(hidden)]
pub mod __private {
    pub use crate::author::{confinement_box, policy_box, sink_box};
}

#[cfg(test)]
mod tests {
    use super::{Limits, NarrowingLimits};

    /// Every combination of unset and a few values, on each of the three ceilings.
    fn all() -> Vec<NarrowingLimits> {
        let values = [None, Some(0), Some(7), Some(u64::MAX)];
        let mut out = Vec::new();
        for m in values {
            for w in values {
                for o in values {
                    out.push(NarrowingLimits {
                        max_memory_bytes: m,
                        max_wall_ms: w,
                        max_output_bytes: o,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn the_abi_form_round_trips_field_by_field() {
        for n in all() {
            let abi = Limits::from(n);
            assert_eq!(abi.max_memory_bytes.into_option(), n.max_memory_bytes);
            assert_eq!(abi.max_wall_ms.into_option(), n.max_wall_ms);
            assert_eq!(abi.max_output_bytes.into_option(), n.max_output_bytes);
            assert_eq!(NarrowingLimits::from(abi), n);
        }
    }

    #[test]
    fn meet_is_never_wider_than_either_side_and_keeps_every_ceiling() {
        let narrower = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a <= b,
        };
        for a in all() {
            for b in all() {
                let m = a.meet(b);
                assert_eq!(m, b.meet(a));
                for side in [a, b] {
                    assert!(narrower(m.max_memory_bytes, side.max_memory_bytes));
                    assert!(narrower(m.max_wall_ms, side.max_wall_ms));
                    assert!(narrower(m.max_output_bytes, side.max_output_bytes));
                }
                // Nothing tighter than a side asked for: the value is one of theirs.
                let theirs = |x: Option<u64>, p: Option<u64>, q: Option<u64>| {
                    x.is_some() == (p.is_some() || q.is_some()) && (x == p || x == q)
                };
                assert!(theirs(
                    m.max_memory_bytes,
                    a.max_memory_bytes,
                    b.max_memory_bytes
                ));
                assert!(theirs(m.max_wall_ms, a.max_wall_ms, b.max_wall_ms));
                assert!(theirs(
                    m.max_output_bytes,
                    a.max_output_bytes,
                    b.max_output_bytes
                ));
            }
        }
    }
}
