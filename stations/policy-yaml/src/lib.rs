//! The YAML policy station: rules over tool id, capability and role.
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
//! - Rules never look at call arguments; they match tool identity, capability and role.
//! - The role is asserted by the caller and not authenticated here; see [`set`].
//! - Rate-limit state lives in the process: a restart refills every bucket.

pub mod set;

use aegis_station_api::abi_stable::std_types::{ROption, RStr, RString};
use aegis_station_api::{ErrorKind, PluginError, Policy, PolicyDecision, PolicyRequest, Verdict};
use arc_swap::ArcSwap;
use set::{Action, Rate};
pub use set::{PolicyError, PolicySet, PolicyWarning, Rule};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "policy-yaml",
        version: env!("CARGO_PKG_VERSION"),
        policy: PolicyEngine::from_config,
    }
}

/// One rule's token bucket.
#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            rate,
            tokens: rate.max as f64,
            last: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let per_second = self.rate.max as f64 / self.rate.per_seconds as f64;
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * per_second).min(self.rate.max as f64);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A policy set in force, with its rate-limit state.
#[derive(Debug)]
pub struct PolicyEngine {
    set: ArcSwap<PolicySet>,
    buckets: Mutex<HashMap<String, Bucket>>,
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
            buckets: Mutex::new(HashMap::new()),
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
        // One byte past the limit is enough to refuse it; a larger file is not read.
        std::fs::File::open(&c.path)
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
    pub fn decide(&self, tool: &str, capability: &str, role: &str) -> PolicyDecision {
        let set = self.set.load();
        self.decide_in(&set, tool, capability, role, &mut Vec::new())
    }

    /// Decides one call over each of `axes` in order, stopping after the first answer
    /// that is not an allow: one decision per axis asked. All axes are decided by the
    /// same set, and a rate_limit rule takes at most one token for the whole call.
    pub fn decide_axes(&self, tool: &str, axes: &[&str], role: &str) -> Vec<PolicyDecision> {
        self.decide_each(tool, axes.iter().copied(), role)
    }

    /// [`PolicyEngine::decide_axes`] over the axes as they come (the station's, without
    /// collecting them first).
    fn decide_each<'a>(
        &self,
        tool: &str,
        axes: impl ExactSizeIterator<Item = &'a str>,
        role: &str,
    ) -> Vec<PolicyDecision> {
        let set = self.set.load();
        let mut counted = Vec::new();
        let mut answers = Vec::with_capacity(axes.len());
        for axis in axes {
            let d = self.decide_in(&set, tool, axis, role, &mut counted);
            let allowed = d.verdict == Verdict::ALLOW;
            answers.push(d);
            if !allowed {
                break;
            }
        }
        answers
    }

    /// Decides one ask against `set`. `counted` holds each rate_limit rule already
    /// charged for this call, with whether it had a token: such a rule is not charged
    /// again.
    fn decide_in(
        &self,
        set: &PolicySet,
        tool: &str,
        capability: &str,
        role: &str,
        counted: &mut Vec<(String, bool)>,
    ) -> PolicyDecision {
        let Some(rule) = set.select(tool, capability, role) else {
            let (verdict, reason) = match set.default {
                Action::Deny => (
                    Verdict::DENY,
                    "no rule matched; the policy's default is deny",
                ),
                _ => (
                    Verdict::ALLOW,
                    "no rule matched; the policy's default is allow",
                ),
            };
            return decision(verdict, None, reason.to_owned(), None);
        };
        let reason = |fallback: &str| rule.reason.clone().unwrap_or_else(|| fallback.to_owned());
        match rule.action {
            Action::Allow => decision(Verdict::ALLOW, Some(rule), reason("allowed by rule"), None),
            Action::Deny => decision(Verdict::DENY, Some(rule), reason("denied by rule"), None),
            Action::PendingApproval => decision(
                Verdict::PENDING_APPROVAL,
                Some(rule),
                reason("needs a human's approval"),
                Some(approval_id()),
            ),
            Action::RateLimit => {
                let rate = rule.rate.expect("a rate_limit rule always has a rate");
                let within = match counted.iter().find(|(id, _)| *id == rule.id) {
                    Some(&(_, within)) => within,
                    None => {
                        let within = self.take(&rule.id, rate);
                        counted.push((rule.id.clone(), within));
                        within
                    }
                };
                if within {
                    decision(
                        Verdict::ALLOW,
                        Some(rule),
                        reason("within its rate limit"),
                        None,
                    )
                } else {
                    let why = format!(
                        "rate limit: {} calls per {} s ({})",
                        rate.max, rate.per_seconds, rule.id
                    );
                    decision(
                        Verdict::RATE_LIMIT,
                        Some(rule),
                        rule.reason.clone().unwrap_or(why),
                        None,
                    )
                }
            }
        }
    }

    /// Takes one token from rule `id`'s bucket; whether there was one.
    fn take(&self, id: &str, rate: Rate) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets
            .entry(id.to_owned())
            .or_insert_with(|| Bucket::new(rate, now));
        if bucket.rate != rate {
            *bucket = Bucket::new(rate, now); // the rule changed on reload
        }
        bucket.take(now)
    }
}

fn decision(
    verdict: Verdict,
    rule: Option<&Rule>,
    reason: String,
    approval: Option<String>,
) -> PolicyDecision {
    PolicyDecision {
        verdict,
        matched_rule: rule.map(|r| RString::from(r.id.as_str())).into(),
        reason: RString::from(reason),
        limits: rule.map(|r| r.limits).unwrap_or_default().into(),
        approval_id: approval
            .map(RString::from)
            .map_or(ROption::RNone, ROption::RSome),
    }
}

/// A fresh approval id: `apr-` and 128 random bits in hex.
fn approval_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: fall back to time, still unique within this process.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = t.to_le_bytes();
    }
    format!("apr-{}", aegis_record::digest::encode_hex(&bytes))
}

impl Policy for PolicyEngine {
    fn policy_set_hash(&self) -> [u8; 32] {
        *self.set.load().hash().as_bytes()
    }

    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
        Ok(self.decide(
            request.tool_id.as_str(),
            request.capability.as_str(),
            request.role.as_str(),
        ))
    }

    fn evaluate_axes(
        &self,
        request: &PolicyRequest<'_>,
        axes: &[RStr<'_>],
    ) -> Result<Vec<PolicyDecision>, PluginError> {
        Ok(self.decide_each(
            request.tool_id.as_str(),
            axes.iter().map(RStr::as_str),
            request.role.as_str(),
        ))
    }
}
