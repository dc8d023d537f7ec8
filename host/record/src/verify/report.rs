//! The verifier's report and its two renderings: text for people, canonical JSON for
//! machines. Both are functions of the report alone (no timestamps, no paths), so the
//! same bytes in give the same bytes out.

use super::quote;
use super::verdict::{Indeterminate, Position, Trust, Verdict};
use crate::digest::KeyId;
use crate::json::{Object, Value};

/// A call with an intent and no outcome: in flight in the final session, or unfinished
/// in a session that was closed or superseded without its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlight {
    /// The intent line's position.
    pub at: Position,
    /// The call: the `call_id`, or its first [`MAX_ID_BYTES`](super::MAX_ID_BYTES) when longer.
    pub call_id: String,
    /// The tool: the `tool_id`, or its first [`MAX_ID_BYTES`](super::MAX_ID_BYTES) when longer.
    pub tool_id: String,
    /// Whether `call_id` was cut.
    pub call_id_truncated: bool,
    /// Whether `tool_id` was cut.
    pub tool_id_truncated: bool,
}

/// A line whose `time` is before the latest time of its session so far: the writing
/// host's clock went back. Informational, never part of the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClockStep {
    /// The line.
    pub at: Position,
    /// Its time.
    pub time: String,
    /// The latest time of the session before it.
    pub latest: String,
}

/// A change of the key that signs a chain: at a `key_handoff` line, or at an open line
/// whose key is not the one the previous session ended with. Informational, never part
/// of the verdict (a key change at an open was always allowed; the report says whether
/// the file announced it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyChange {
    /// The `key_handoff` line, or the open line of the session that changed key.
    pub at: Position,
    /// The key before.
    pub from: KeyId,
    /// The key after.
    pub to: KeyId,
    /// How the change came about.
    pub kind: KeyChangeKind,
}

/// How a key changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyChangeKind {
    /// A `key_handoff` line, signed by `from`, named `to`.
    Handoff,
    /// A session opened with a key a `key_handoff` earlier in the file handed to
    /// (`from` is the key that handed it).
    Continues {
        /// The `key_handoff` line that named the key.
        handoff_at: Position,
    },
    /// A session opened with a key no earlier `key_handoff` named, other than the key
    /// the previous session ended with. Allowed, as it always was; but nothing in the
    /// file says the old key's holder chose the new one.
    Unannounced,
}

impl KeyChangeKind {
    /// A stable snake_case name.
    pub fn code(&self) -> &'static str {
        match self {
            KeyChangeKind::Handoff => "handoff",
            KeyChangeKind::Continues { .. } => "continues",
            KeyChangeKind::Unannounced => "unannounced",
        }
    }
}

/// A key outside the trust slice that the walk accepted because a trusted key handed
/// the chain to it (a pinned walk only).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustedThroughHandoff {
    /// The key accepted.
    pub key_id: KeyId,
    /// The trusted key (in the slice, or itself trusted through a hand-off) that handed
    /// the chain to it.
    pub from: KeyId,
    /// The `key_handoff` line.
    pub at: Position,
}

/// Who decided the file's `decision` lines: the approver keys with how many decisions
/// each, and how many the client, the host, or no recorded approver settled.
/// Informational unless approvers were pinned (then a decision no pinned key made is
/// Indeterminate, `untrusted_approver`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproversSeen {
    /// Whether the caller pinned approvers.
    pub pinned: bool,
    /// Each approver key with its number of decisions, in order of first appearance
    /// (at most [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS) keys).
    pub keys: Vec<(KeyId, u64)>,
    /// Decisions by keys past that many, counted.
    pub unlisted_key_decisions: u64,
    /// Decisions the MCP client gave (`via: "client"`).
    pub client: u64,
    /// Decisions the host settled by denying (`via: "host"`).
    pub host: u64,
    /// Decisions without an `approver` member.
    pub unattributed: u64,
}

impl ApproversSeen {
    pub(super) fn count_key(&mut self, key_id: KeyId) {
        if let Some((_, n)) = self.keys.iter_mut().find(|(k, _)| *k == key_id) {
            *n += 1;
        } else if self.keys.len() < super::MAX_LISTED_CALLS {
            self.keys.push((key_id, 1));
        } else {
            self.unlisted_key_decisions += 1;
        }
    }

    /// Whether any decision named an approver.
    pub(super) fn any(&self) -> bool {
        !self.keys.is_empty() || self.unlisted_key_decisions > 0 || self.client > 0 || self.host > 0
    }
}

/// The verifier's answer. Only [`verify`](super::verify()) constructs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub(super) verdict: Verdict,
    /// Keys whose point is a published test key's plus a torsion point, by its name.
    pub(super) published: Vec<(KeyId, &'static str)>,
    pub(super) keys: Vec<KeyId>,
    pub(super) coverage: Option<Position>,
    pub(super) in_flight: Vec<InFlight>,
    pub(super) in_flight_unlisted: u64,
    pub(super) unfinished: Vec<InFlight>,
    pub(super) unfinished_unlisted: u64,
    pub(super) findings: Vec<Indeterminate>,
    pub(super) time_backwards: Vec<ClockStep>,
    pub(super) time_backwards_unlisted: u64,
    pub(super) key_changes: Vec<KeyChange>,
    pub(super) key_changes_unlisted: u64,
    pub(super) trusted_through_handoff: Vec<TrustedThroughHandoff>,
    pub(super) trusted_through_handoff_unlisted: u64,
    pub(super) approvers: Option<ApproversSeen>,
}

/// An id quoted for the text report; a cut id ends in `…` inside the quotes.
fn show_id(id: &str, truncated: bool) -> String {
    let mut q = quote(id);
    if truncated && !q.ends_with("…\"") {
        q.insert(q.len() - 1, '…');
    }
    q
}

impl Report {
    /// The verdict.
    pub fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// Each key published by an open line the walk reached (including one it then
    /// rejected, such as an untrusted key), in order of first appearance.
    pub fn keys(&self) -> &[KeyId] {
        &self.keys
    }

    /// The highest position a valid signature reached before any contradiction.
    pub fn coverage(&self) -> Option<Position> {
        self.coverage
    }

    /// Calls with an intent and no outcome in the final session, after its last close,
    /// in intent order (at most [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS)). Empty when the verdict is Tampered.
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight
    }

    /// How many calls in flight [`Report::in_flight`] does not list.
    pub fn in_flight_unlisted(&self) -> u64 {
        self.in_flight_unlisted
    }

    /// Calls with an intent and no outcome whose session was closed, or superseded by a
    /// later open, without their outcome: an interrupted run that a later run anchored.
    /// In file order (at most [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS)), whatever the verdict except Tampered.
    pub fn unfinished(&self) -> &[InFlight] {
        &self.unfinished
    }

    /// How many unfinished calls [`Report::unfinished`] does not list.
    pub fn unfinished_unlisted(&self) -> u64 {
        self.unfinished_unlisted
    }

    /// The names of the published test keys (spec §9.5) among [`Report::keys`], in the
    /// same order. A record signed by one proves nothing about who wrote it.
    pub fn published_test_keys(&self) -> Vec<(KeyId, &'static str)> {
        self.keys
            .iter()
            .filter_map(|k| {
                let name = crate::key::published_test_key_id(k).or_else(|| {
                    let found = self.published.iter().find(|(id, _)| id == k);
                    found.map(|(_, name)| *name)
                });
                name.map(|name| (*k, name))
            })
            .collect()
    }

    /// Every Indeterminate finding, in file order (at most 64), whatever the verdict.
    pub fn findings(&self) -> &[Indeterminate] {
        &self.findings
    }

    /// Lines whose time went back within their session (at most
    /// [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS)), in file order; empty when the
    /// verdict is Tampered.
    pub fn time_backwards(&self) -> &[ClockStep] {
        &self.time_backwards
    }

    /// How many lines whose time went back [`Report::time_backwards`] does not list.
    pub fn time_backwards_unlisted(&self) -> u64 {
        self.time_backwards_unlisted
    }

    /// Each change of signing key, in file order (at most
    /// [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS)); empty when the verdict is Tampered.
    pub fn key_changes(&self) -> &[KeyChange] {
        &self.key_changes
    }

    /// How many key changes [`Report::key_changes`] does not list.
    pub fn key_changes_unlisted(&self) -> u64 {
        self.key_changes_unlisted
    }

    /// The keys a pinned walk accepted through a hand-off from a trusted key, in file
    /// order (at most [`MAX_LISTED_CALLS`](super::MAX_LISTED_CALLS)); empty when the
    /// verdict is Tampered or the walk was unpinned.
    pub fn trusted_through_handoff(&self) -> &[TrustedThroughHandoff] {
        &self.trusted_through_handoff
    }

    /// How many keys accepted through a hand-off [`Report::trusted_through_handoff`]
    /// does not list.
    pub fn trusted_through_handoff_unlisted(&self) -> u64 {
        self.trusted_through_handoff_unlisted
    }

    /// Who decided the file's decisions; `None` when the verdict is Tampered, or no
    /// decision names an approver and approvers were not pinned (records written before
    /// approvers were, whose reports keep their bytes).
    pub fn approvers(&self) -> Option<&ApproversSeen> {
        self.approvers.as_ref()
    }

    /// The first line of the human report.
    pub fn headline(&self) -> String {
        match &self.verdict {
            Verdict::Verified(Trust::PinnedTo(k)) => format!("Verified (pinned to {k})"),
            Verdict::Verified(Trust::Pinned) => "Verified (pinned)".to_owned(),
            Verdict::Verified(Trust::Unpinned) => "Verified (unpinned)".to_owned(),
            Verdict::Indeterminate(r) => format!("Indeterminate — {r}"),
            Verdict::Tampered(r) => format!("Tampered — {r}"),
        }
    }

    /// The human report: headline, then `key_id`, `published_test_key`, `coverage`,
    /// `in_flight`, `in_flight_unlisted`, `unfinished`, `unfinished_unlisted`,
    /// `time_backwards`, key change and `trusted_through_handoff` lines.
    /// No timestamps and no paths: same bytes in, same text out.
    pub fn to_text(&self) -> String {
        let dev = crate::key::development_key_id();
        let mut s = self.headline();
        s.push('\n');
        for k in &self.keys {
            s.push_str(&format!("key_id {k}"));
            if *k == dev {
                s.push_str(" (the public development key: proves nothing)");
            }
            s.push('\n');
        }
        for (k, name) in self.published_test_keys() {
            s.push_str(&format!(
                "published_test_key {k} (the {name}, whose seed is public: this record proves nothing about its author)\n"
            ));
        }
        if let Some(c) = self.coverage {
            s.push_str(&format!("coverage session {} seq {}\n", c.session, c.seq));
        }
        let calls = |s: &mut String, label: &str, list: &[InFlight], unlisted: u64| {
            for call in list {
                s.push_str(&format!(
                    "{label} session {} seq {} call_id {} tool_id {}\n",
                    call.at.session,
                    call.at.seq,
                    show_id(&call.call_id, call.call_id_truncated),
                    show_id(&call.tool_id, call.tool_id_truncated)
                ));
            }
            if unlisted > 0 {
                s.push_str(&format!("{label}_unlisted {unlisted}\n"));
            }
        };
        calls(
            &mut s,
            "in_flight",
            &self.in_flight,
            self.in_flight_unlisted,
        );
        calls(
            &mut s,
            "unfinished",
            &self.unfinished,
            self.unfinished_unlisted,
        );
        for step in &self.time_backwards {
            s.push_str(&format!(
                "time_backwards session {} seq {} time {} after {}\n",
                step.at.session, step.at.seq, step.time, step.latest
            ));
        }
        if self.time_backwards_unlisted > 0 {
            s.push_str(&format!(
                "time_backwards_unlisted {}\n",
                self.time_backwards_unlisted
            ));
        }
        for change in &self.key_changes {
            let (session, seq) = (change.at.session, change.at.seq);
            let (from, to) = (change.from, change.to);
            s.push_str(&match change.kind {
                KeyChangeKind::Handoff => {
                    format!("key_handoff session {session} seq {seq} from {from} to {to}\n")
                }
                KeyChangeKind::Continues { handoff_at } => format!(
                    "key_continues session {session} from {from} to {to} handed off at session {} seq {}\n",
                    handoff_at.session, handoff_at.seq
                ),
                KeyChangeKind::Unannounced => format!(
                    "key_unannounced session {session} from {from} to {to} (not the key the latest key_handoff names)\n"
                ),
            });
        }
        if self.key_changes_unlisted > 0 {
            s.push_str(&format!(
                "key_changes_unlisted {}\n",
                self.key_changes_unlisted
            ));
        }
        for t in &self.trusted_through_handoff {
            s.push_str(&format!(
                "trusted_through_handoff {} from {} at session {} seq {}\n",
                t.key_id, t.from, t.at.session, t.at.seq
            ));
        }
        if self.trusted_through_handoff_unlisted > 0 {
            s.push_str(&format!(
                "trusted_through_handoff_unlisted {}\n",
                self.trusted_through_handoff_unlisted
            ));
        }
        if let Some(a) = &self.approvers {
            let label = if a.pinned { "pinned" } else { "unpinned" };
            for (k, n) in &a.keys {
                s.push_str(&format!("approver key_id {k} decisions {n} ({label})"));
                if let Some(name) = crate::key::published_test_key_id(k) {
                    s.push_str(&format!(
                        " (the {name}, whose seed is public: proves nothing)"
                    ));
                }
                s.push('\n');
            }
            for (name, n) in [
                ("approver_key_unlisted", a.unlisted_key_decisions),
                ("approver_client", a.client),
                ("approver_host", a.host),
                ("approver_none", a.unattributed),
            ] {
                if n > 0 {
                    s.push_str(&format!("{name} decisions {n}\n"));
                }
            }
        }
        s
    }

    /// The report as one canonical JSON object (a documented, only-growing shape).
    pub fn to_json(&self) -> Vec<u8> {
        let pos = |p: Position| {
            let mut o = Object::new();
            o.insert(
                "session",
                crate::json::SafeInt::new(p.session).unwrap_or_default(),
            );
            o.insert("seq", crate::json::SafeInt::new(p.seq).unwrap_or_default());
            Value::Object(o)
        };
        let mut o = Object::new();
        o.insert("headline", self.headline());
        match &self.verdict {
            Verdict::Verified(t) => {
                o.insert("verdict", "verified");
                o.insert(
                    "trust",
                    match t {
                        Trust::PinnedTo(_) => "pinned_to",
                        Trust::Pinned => "pinned",
                        Trust::Unpinned => "unpinned",
                    },
                );
            }
            Verdict::Indeterminate(r) => {
                o.insert("verdict", "indeterminate");
                o.insert("class", r.code());
                o.insert("reason", r.to_string());
            }
            Verdict::Tampered(r) => {
                o.insert("verdict", "tampered");
                o.insert("class", r.code());
                o.insert("reason", r.to_string());
                o.insert(
                    "line",
                    crate::json::SafeInt::new(r.line()).unwrap_or_default(),
                );
            }
        }
        let dev = crate::key::development_key_id();
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|k| {
                let mut ko = Object::new();
                ko.insert("key_id", *k);
                ko.insert("development", *k == dev);
                if let Some(name) = crate::key::published_test_key_id(k) {
                    ko.insert("published_test_key", name);
                }
                Value::Object(ko)
            })
            .collect();
        o.insert("keys", Value::Array(keys));
        o.insert(
            "signed_by_published_test_key",
            !self.published_test_keys().is_empty(),
        );
        if let Some(c) = self.coverage {
            o.insert("coverage", pos(c));
        }
        let calls = |list: &[InFlight]| {
            let calls: Vec<Value> = list
                .iter()
                .map(|c| {
                    let mut co = Object::new();
                    co.insert("at", pos(c.at));
                    co.insert("call_id", c.call_id.as_str());
                    co.insert("call_id_truncated", c.call_id_truncated);
                    co.insert("tool_id", c.tool_id.as_str());
                    co.insert("tool_id_truncated", c.tool_id_truncated);
                    Value::Object(co)
                })
                .collect();
            Value::Array(calls)
        };
        let count = |n: u64| crate::json::SafeInt::new(n).unwrap_or_default();
        o.insert("in_flight", calls(&self.in_flight));
        o.insert("in_flight_unlisted", count(self.in_flight_unlisted));
        o.insert("unfinished", calls(&self.unfinished));
        o.insert("unfinished_unlisted", count(self.unfinished_unlisted));
        let findings: Vec<Value> = self
            .findings
            .iter()
            .map(|r| {
                let mut fo = Object::new();
                fo.insert("class", r.code());
                fo.insert("reason", r.to_string());
                Value::Object(fo)
            })
            .collect();
        o.insert("findings", Value::Array(findings));
        // Only when a clock went back: reports of records without it keep their bytes.
        if !self.time_backwards.is_empty() {
            let steps: Vec<Value> = self
                .time_backwards
                .iter()
                .map(|step| {
                    let mut so = Object::new();
                    so.insert("at", pos(step.at));
                    so.insert("time", step.time.as_str());
                    so.insert("after", step.latest.as_str());
                    Value::Object(so)
                })
                .collect();
            o.insert("time_backwards", Value::Array(steps));
            o.insert(
                "time_backwards_unlisted",
                count(self.time_backwards_unlisted),
            );
        }
        // Only when a key changed: reports of single-key records keep their bytes.
        if !self.key_changes.is_empty() {
            let changes: Vec<Value> = self
                .key_changes
                .iter()
                .map(|c| {
                    let mut co = Object::new();
                    co.insert("at", pos(c.at));
                    co.insert("from", c.from);
                    co.insert("to", c.to);
                    co.insert("kind", c.kind.code());
                    if let KeyChangeKind::Continues { handoff_at } = c.kind {
                        co.insert("handoff_at", pos(handoff_at));
                    }
                    Value::Object(co)
                })
                .collect();
            o.insert("key_changes", Value::Array(changes));
            o.insert("key_changes_unlisted", count(self.key_changes_unlisted));
        }
        if !self.trusted_through_handoff.is_empty() {
            let trusted: Vec<Value> = self
                .trusted_through_handoff
                .iter()
                .map(|t| {
                    let mut to = Object::new();
                    to.insert("key_id", t.key_id);
                    to.insert("from", t.from);
                    to.insert("at", pos(t.at));
                    Value::Object(to)
                })
                .collect();
            o.insert("trusted_through_handoff", Value::Array(trusted));
            o.insert(
                "trusted_through_handoff_unlisted",
                count(self.trusted_through_handoff_unlisted),
            );
        }
        // Only when a decision names an approver: older reports keep their bytes.
        if let Some(a) = &self.approvers {
            let mut ao = Object::new();
            ao.insert("pinned", a.pinned);
            let keys: Vec<Value> = a
                .keys
                .iter()
                .map(|(k, n)| {
                    let mut ko = Object::new();
                    ko.insert("key_id", *k);
                    ko.insert("decisions", count(*n));
                    if let Some(name) = crate::key::published_test_key_id(k) {
                        ko.insert("published_test_key", name);
                    }
                    Value::Object(ko)
                })
                .collect();
            ao.insert("keys", Value::Array(keys));
            ao.insert("unlisted_key_decisions", count(a.unlisted_key_decisions));
            ao.insert("client", count(a.client));
            ao.insert("host", count(a.host));
            ao.insert("unattributed", count(a.unattributed));
            o.insert("approvers", ao);
        }
        o.to_canonical()
    }
}
