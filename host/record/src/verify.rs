//! The verifier walk: three verdicts, every class, same bytes → same report.
//!
//! The walk holds what the writer held — session index, expected seq, running tail hash,
//! the session's key — and reads the file once, streaming. Hashing is sequential by
//! nature; strict signature checks are independent, so they run on worker threads while
//! the walk goes on. When several problems exist, the one earliest in the file decides,
//! so the report does not depend on thread timing.
//!
//! # Guarantees
//! - **Tampered** means the file contradicts itself or the caller's trust slice: a chain
//!   break, seq repeated or backwards, a signed line without a valid signature, a key_id
//!   that is not the session's key, a broken session boundary, a line outside the format
//!   (other than a torn final line), an untrusted key, a second decision for one
//!   approval_id, or an intent line that carries a signature.
//! - **Indeterminate** means nothing contradicts the file but something cannot be
//!   decided: an unknown line type without a signature, a reserved checkpoint, a torn
//!   final line, an unanchored final session, a seq gap over an intact chain, an empty file.
//! - **Verified** means every line parsed, chained and verified, and the file ends with a
//!   verified close. Without a trust slice it proves internal consistency only.
//! - The report never hides a call that has an intent and no outcome: calls in the
//!   final session are listed as in flight, calls whose session was later closed or
//!   superseded by a new open as unfinished — both whenever the verdict is not Tampered,
//!   and even when it is Verified.
//! - The walk is bounded: it reads at most [`MAX_LINE_BYTES`] + 1 bytes of any line, and
//!   stops reading as soon as a Tampered finding decides the verdict, so an endless
//!   source without a newline (`/dev/zero`, a sparse hole) ends in a verdict.
//! - A record signed by a key in [`crate::key::PUBLISHED_TEST_KEYS`] is labelled as
//!   proving nothing about its author, pinned or not.
//!
//! # Non-guarantees
//! - Unpinned, a whole rewritten session signed by an attacker's own key verifies: the
//!   label says "unpinned" for that reason.
//! - Nothing after the last signature can be authenticated; coverage says where that is.
//!   Intents are unsigned, so the call lists are information, not evidence: an intent
//!   after the coverage position can be removed, and its listing with it.
//! - Only keys whose seeds this crate knows were published are named as test keys.
//!
//! # Limits
//! - A line longer than [`MAX_LINE_BYTES`] is malformed. Memory is otherwise flat in the
//!   file's length, except for one fixed-size entry per decided approval_id (a digest)
//!   and per call in flight in the current session (a digest of its call_id, its seq and
//!   the first [`MAX_ID_BYTES`] of its call_id and tool_id).
//! - Each call list names at most [`MAX_LISTED_CALLS`] calls, then counts the rest; an id
//!   longer than [`MAX_ID_BYTES`] is shown cut, and marked so.
//! - A source that keeps producing well-formed lines, or blank lines after an unparsable
//!   one (which might yet be a torn final line), is read until it ends: nothing before
//!   the end decides such a verdict.

use crate::digest::{KeyId, LineHash, sha256};
use crate::json::{self, Object, ParseError, Value};
use crate::key::{PublicKey, Signature, VerifyingKey};
use crate::line::{
    DecisionLine, FieldError, Fields, IntentLine, LineType, OpenLine, OutcomeLine, SCHEMA_VERSION,
};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};

/// The longest line the verifier reads. The format's own lines are well under 64 KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How many signature checks travel to a worker together.
const BATCH: usize = 256;

/// The most signature threads a walk starts, whatever the caller asks for.
const MAX_THREADS: usize = 64;

/// How many findings of the Indeterminate kind the report keeps.
const MAX_FINDINGS: usize = 64;

/// How many calls each call list of a report names (`in_flight`, `unfinished`); the
/// rest are counted.
pub const MAX_LISTED_CALLS: usize = 64;

/// How many bytes of a `call_id` or `tool_id` the walk keeps for the report (cut at a
/// character boundary). Calls are matched by a digest of the whole `call_id`.
pub const MAX_ID_BYTES: usize = 64;

/// A position in a chain file: the session's ordinal in the file and the line's seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The session's index in the file, counted from the first open line.
    pub session: u64,
    /// The line's seq within its session.
    pub seq: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(session {}, seq {})", self.session, self.seq)
    }
}

/// What the verified labels say about the keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// A trust slice was supplied and the file's one key is in it.
    PinnedTo(KeyId),
    /// A trust slice was supplied and the file rotates across several keys, all in it.
    Pinned,
    /// No trust slice: internal consistency only.
    Unpinned,
}

/// What is wrong with a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignatureProblem {
    /// The signature does not verify (strict ed25519).
    DoesNotVerify,
    /// The `signature` member is not 128 lowercase hex characters.
    NotHex,
    /// A signature is present but no `key_id` says which key made it.
    NoKeyId,
    /// The published public key is not a curve point.
    KeyNotAPoint,
    /// The published public key has small order.
    KeySmallOrder,
}

impl fmt::Display for SignatureProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignatureProblem::DoesNotVerify => "signature does not verify",
            SignatureProblem::NotHex => "signature is not 128 lowercase hex characters",
            SignatureProblem::NoKeyId => "signature present without key_id",
            SignatureProblem::KeyNotAPoint => "public key is not a valid ed25519 point",
            SignatureProblem::KeySmallOrder => "public key has small order",
        })
    }
}

/// Why a file is Tampered. `line` is the 1-based line number in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tampered {
    /// `prev_hash` is not the hash of the line before.
    ChainBreak {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// What the line names as its predecessor.
        claimed: LineHash,
        /// What the predecessor hashes to.
        actual: LineHash,
    },
    /// seq repeated or went backwards.
    SeqOutOfOrder {
        /// The session.
        session: u64,
        /// File line.
        line: u64,
        /// The seq the walk expected.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// A line of the signed set has no signature.
    MissingSignature {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
    },
    /// A signature is present and fails.
    BadSignature {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// What failed.
        problem: SignatureProblem,
    },
    /// `key_id` is not the session's key (rotation happens only at an open line).
    KeyMismatch {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The key_id on the line.
        found: KeyId,
        /// The session's key.
        expected: KeyId,
    },
    /// A session does not join the one before it.
    SessionBoundary {
        /// The session.
        session: u64,
        /// File line.
        line: u64,
        /// What is wrong.
        detail: BoundaryProblem,
    },
    /// A line outside the format.
    Malformed {
        /// File line.
        line: u64,
        /// What is wrong.
        detail: String,
    },
    /// An open line publishes a key outside the supplied trust slice.
    UntrustedKey {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The key's fingerprint.
        key_id: KeyId,
    },
    /// A second decision for an approval_id already decided.
    DuplicateDecision {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The approval.
        approval_id: String,
    },
}

/// How a session boundary is broken.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BoundaryProblem {
    /// `prev_session_tail` is not the previous session's final line hash.
    TailMismatch {
        /// What the open line names.
        claimed: Option<LineHash>,
        /// The previous session's final line hash.
        actual: LineHash,
    },
    /// The first session names a predecessor the file does not hold.
    MissingPredecessor,
    /// A line comes before any open line.
    BeforeOpen,
}

impl Tampered {
    /// A stable snake_case name for the class.
    pub fn code(&self) -> &'static str {
        match self {
            Tampered::ChainBreak { .. } => "chain_break",
            Tampered::SeqOutOfOrder { .. } => "seq_out_of_order",
            Tampered::MissingSignature { .. } => "missing_signature",
            Tampered::BadSignature { .. } => "bad_signature",
            Tampered::KeyMismatch { .. } => "key_mismatch",
            Tampered::SessionBoundary { .. } => "session_boundary",
            Tampered::Malformed { .. } => "malformed",
            Tampered::UntrustedKey { .. } => "untrusted_key",
            Tampered::DuplicateDecision { .. } => "duplicate_decision",
        }
    }

    /// The file line the finding is on.
    pub fn line(&self) -> u64 {
        match self {
            Tampered::ChainBreak { line, .. }
            | Tampered::SeqOutOfOrder { line, .. }
            | Tampered::MissingSignature { line, .. }
            | Tampered::BadSignature { line, .. }
            | Tampered::KeyMismatch { line, .. }
            | Tampered::SessionBoundary { line, .. }
            | Tampered::Malformed { line, .. }
            | Tampered::UntrustedKey { line, .. }
            | Tampered::DuplicateDecision { line, .. } => *line,
        }
    }
}

fn short(h: &impl fmt::Display) -> String {
    let s = h.to_string();
    format!("{}…", &s[..16])
}

impl fmt::Display for Tampered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tampered::ChainBreak {
                at,
                line,
                claimed,
                actual,
            } => write!(
                f,
                "chain broken at {at}, line {line}: prev_hash is {}, the line before hashes to {}",
                short(claimed),
                short(actual)
            ),
            Tampered::SeqOutOfOrder {
                session,
                line,
                expected,
                found,
            } => write!(
                f,
                "seq out of order in session {session} at line {line}: expected {expected}, found {found}"
            ),
            Tampered::MissingSignature { at, line } => write!(
                f,
                "missing signature at {at}, line {line}: this line type must be signed"
            ),
            Tampered::BadSignature { at, line, problem } => {
                write!(f, "bad signature at {at}, line {line}: {problem}")
            }
            Tampered::KeyMismatch {
                at,
                line,
                found,
                expected,
            } => write!(
                f,
                "key mismatch at {at}, line {line}: signed as key_id {}, the session's key is {}",
                short(found),
                short(expected)
            ),
            Tampered::SessionBoundary {
                session,
                line,
                detail,
            } => {
                write!(
                    f,
                    "session boundary broken at session {session}, line {line}: "
                )?;
                match detail {
                    BoundaryProblem::TailMismatch {
                        claimed: Some(c),
                        actual,
                    } => write!(
                        f,
                        "prev_session_tail is {}, the previous session ends at {}",
                        short(c),
                        short(actual)
                    ),
                    BoundaryProblem::TailMismatch {
                        claimed: None,
                        actual,
                    } => write!(
                        f,
                        "no prev_session_tail, the previous session ends at {}",
                        short(actual)
                    ),
                    BoundaryProblem::MissingPredecessor => {
                        f.write_str("prev_session_tail names a session this file does not hold")
                    }
                    BoundaryProblem::BeforeOpen => f.write_str("a line comes before any open line"),
                }
            }
            Tampered::Malformed { line, detail } => write!(f, "malformed line {line}: {detail}"),
            Tampered::UntrustedKey { at, line, key_id } => write!(
                f,
                "untrusted key at {at}, line {line}: key_id {key_id} is not in the trust slice"
            ),
            Tampered::DuplicateDecision {
                at,
                line,
                approval_id,
            } => write!(
                f,
                "duplicate decision at {at}, line {line} for approval_id {}",
                quote(approval_id)
            ),
        }
    }
}

/// Why a file is Indeterminate.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Indeterminate {
    /// A line type this version does not define, without a signature.
    UnknownLineType {
        /// The token, as written.
        token: String,
        /// Where.
        at: Position,
        /// File line.
        line: u64,
    },
    /// A reserved checkpoint line; its signature verified, its meaning is undefined.
    ReservedCheckpoint {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
    },
    /// The final line does not parse: a torn write.
    TornFinalLine {
        /// File line.
        line: u64,
    },
    /// The final session has no close and nothing after it anchors its tail.
    UnanchoredTail {
        /// The session.
        session: u64,
        /// How many calls have an intent and no outcome.
        in_flight: usize,
    },
    /// seq skipped forward while the chain stayed intact: lines the writer never stored.
    MissingLines {
        /// The session.
        session: u64,
        /// First missing seq.
        from: u64,
        /// Last missing seq.
        to: u64,
    },
    /// No lines at all.
    Empty,
}

impl Indeterminate {
    /// A stable snake_case name for the class.
    pub fn code(&self) -> &'static str {
        match self {
            Indeterminate::UnknownLineType { .. } => "unknown_line_type",
            Indeterminate::ReservedCheckpoint { .. } => "reserved_checkpoint",
            Indeterminate::TornFinalLine { .. } => "torn_final_line",
            Indeterminate::UnanchoredTail { .. } => "unanchored_tail",
            Indeterminate::MissingLines { .. } => "missing_lines",
            Indeterminate::Empty => "empty",
        }
    }
}

impl fmt::Display for Indeterminate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Indeterminate::UnknownLineType { token, at, line } => write!(
                f,
                "unknown line type {} at {at}, line {line} (a newer emitter?)",
                quote(token)
            ),
            Indeterminate::ReservedCheckpoint { at, line } => {
                write!(f, "reserved checkpoint at {at}, line {line}")
            }
            Indeterminate::TornFinalLine { line } => {
                write!(f, "final line {line} does not parse (a torn write)")
            }
            Indeterminate::UnanchoredTail { session, in_flight } => write!(
                f,
                "session {session} does not end with a close record; {in_flight} call{} in flight",
                if *in_flight == 1 { "" } else { "s" }
            ),
            Indeterminate::MissingLines { session, from, to } if from == to => write!(
                f,
                "session {session} skips seq {from} with the chain intact"
            ),
            Indeterminate::MissingLines { session, from, to } => write!(
                f,
                "session {session} skips seq {from} to {to} with the chain intact"
            ),
            Indeterminate::Empty => f.write_str("no lines to verify"),
        }
    }
}

/// One of exactly three verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every line parsed, chained and verified, ending with a verified close.
    Verified(Trust),
    /// Nothing contradicts the file, but something cannot be decided.
    Indeterminate(Indeterminate),
    /// The file contradicts itself or the trust slice.
    Tampered(Tampered),
}

/// A call with an intent and no outcome: in flight in the final session, or unfinished
/// in a session that was closed or superseded without its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlight {
    /// The intent line's position.
    pub at: Position,
    /// The call: the `call_id`, or its first [`MAX_ID_BYTES`] when longer.
    pub call_id: String,
    /// The tool: the `tool_id`, or its first [`MAX_ID_BYTES`] when longer.
    pub tool_id: String,
    /// Whether `call_id` was cut.
    pub call_id_truncated: bool,
    /// Whether `tool_id` was cut.
    pub tool_id_truncated: bool,
}

/// The verifier's answer. Only [`verify`] constructs one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    verdict: Verdict,
    keys: Vec<KeyId>,
    coverage: Option<Position>,
    in_flight: Vec<InFlight>,
    in_flight_unlisted: u64,
    unfinished: Vec<InFlight>,
    unfinished_unlisted: u64,
    findings: Vec<Indeterminate>,
}

/// The first [`MAX_ID_BYTES`] of `s`, cut at a character boundary, and whether it was cut.
fn id_prefix(s: &str) -> (String, bool) {
    if s.len() <= MAX_ID_BYTES {
        return (s.to_owned(), false);
    }
    let mut end = MAX_ID_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_owned(), true)
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
    /// in intent order (at most [`MAX_LISTED_CALLS`]). Empty when the verdict is Tampered.
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight
    }

    /// How many calls in flight [`Report::in_flight`] does not list.
    pub fn in_flight_unlisted(&self) -> u64 {
        self.in_flight_unlisted
    }

    /// Calls with an intent and no outcome whose session was closed, or superseded by a
    /// later open, without their outcome: an interrupted run that a later run anchored.
    /// In file order (at most [`MAX_LISTED_CALLS`]), whatever the verdict except Tampered.
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
            .filter_map(|k| crate::key::published_test_key_id(k).map(|name| (*k, name)))
            .collect()
    }

    /// Every Indeterminate finding, in file order (at most 64), whatever the verdict.
    pub fn findings(&self) -> &[Indeterminate] {
        &self.findings
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
    /// `in_flight`, `in_flight_unlisted`, `unfinished` and `unfinished_unlisted` lines.
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
        o.to_canonical()
    }
}

pub use crate::json::quote;

/// What the caller supplies.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keys the caller anchored out of band. `None` is an unpinned walk; `Some` of an
    /// empty slice is a pin nothing satisfies.
    pub trust: Option<Vec<PublicKey>>,
    /// Signature-checking threads; 0 means one per available core (at most 64).
    pub threads: usize,
}

/// Verifies the chain file read from `input`.
///
/// # Errors
/// Only when reading fails; everything about the content is in the [`Report`].
pub fn verify(input: impl Read, options: &Options) -> std::io::Result<Report> {
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
    .min(MAX_THREADS);
    let shared = Shared {
        first_failure: Mutex::new(None),
        earliest_line: AtomicU64::new(u64::MAX),
    };
    let (tx, rx) = sync_channel::<Batch>(threads * 2);
    let rx = Mutex::new(rx);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| worker(&rx, &shared));
        }
        let mut walk = Walk::new(options, tx, &shared);
        let result = walk.run(input);
        let walked = walk.finish();
        // The sender is dropped inside finish(), so workers drain and stop.
        result.map(|()| walked)
    })
    .map(|walked| walked.into_report(&shared))
}

struct Job {
    line: u64,
    at: Position,
    key: Arc<VerifyingKey>,
    message: Vec<u8>,
    signature: Signature,
}

struct Batch {
    jobs: Vec<Job>,
    /// The last signed position before this batch, for coverage on failure.
    covered_before: Option<Position>,
}

struct Failure {
    line: u64,
    at: Position,
    covered_before: Option<Position>,
}

struct Shared {
    first_failure: Mutex<Option<Failure>>,
    earliest_line: AtomicU64,
}

fn worker(rx: &Mutex<Receiver<Batch>>, shared: &Shared) {
    loop {
        let batch = match rx.lock().unwrap_or_else(PoisonError::into_inner).recv() {
            Ok(b) => b,
            Err(_) => return,
        };
        let mut covered = batch.covered_before;
        for job in batch.jobs {
            if job.line > shared.earliest_line.load(Ordering::Relaxed) {
                break;
            }
            if job.key.verify_strict(&job.message, &job.signature) {
                covered = Some(job.at);
                continue;
            }
            let mut first = shared
                .first_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if first.as_ref().is_none_or(|f| job.line < f.line) {
                *first = Some(Failure {
                    line: job.line,
                    at: job.at,
                    covered_before: covered,
                });
                shared.earliest_line.fetch_min(job.line, Ordering::Relaxed);
            }
            break;
        }
    }
}

struct SessionState {
    index: u64,
    expected_seq: u64,
    tail: LineHash,
    key: Arc<VerifyingKey>,
    key_id: KeyId,
    /// Whether the session's last line so far is an anchor (close, or a checkpoint).
    anchored: bool,
    /// SHA-256 of call_id → the intent, for naming calls in flight. Keyed by digest and
    /// holding only id prefixes, so an entry has a fixed size whatever the ids' length.
    in_flight: HashMap<[u8; 32], Pending>,
}

/// A call in flight as the walk holds it.
struct Pending {
    /// Intent order in the file, for listing.
    order: u64,
    seq: u64,
    call_id: Box<str>,
    call_id_truncated: bool,
    tool_id: Box<str>,
    tool_id_truncated: bool,
}

impl Pending {
    fn new(order: u64, seq: u64, call_id: &str, tool_id: &str) -> Pending {
        let (call_id, call_id_truncated) = id_prefix(call_id);
        let (tool_id, tool_id_truncated) = id_prefix(tool_id);
        Pending {
            order,
            seq,
            call_id: call_id.into_boxed_str(),
            call_id_truncated,
            tool_id: tool_id.into_boxed_str(),
            tool_id_truncated,
        }
    }
}

/// A bounded list of calls: the first [`MAX_LISTED_CALLS`] named, the rest counted.
#[derive(Default)]
struct CallList {
    listed: Vec<InFlight>,
    unlisted: u64,
}

impl CallList {
    /// Appends a session's calls without outcome, in intent order.
    fn take_session(&mut self, session: u64, calls: HashMap<[u8; 32], Pending>) {
        let mut calls: Vec<Pending> = calls.into_values().collect();
        calls.sort_unstable_by_key(|c| c.order);
        let room = MAX_LISTED_CALLS.saturating_sub(self.listed.len());
        let extra = calls.len().saturating_sub(room);
        self.unlisted = self.unlisted.saturating_add(extra as u64);
        calls.truncate(room);
        self.listed.extend(calls.into_iter().map(|c| InFlight {
            at: Position {
                session,
                seq: c.seq,
            },
            call_id: c.call_id.into(),
            tool_id: c.tool_id.into(),
            call_id_truncated: c.call_id_truncated,
            tool_id_truncated: c.tool_id_truncated,
        }));
    }

    fn total(&self) -> u64 {
        (self.listed.len() as u64).saturating_add(self.unlisted)
    }
}

struct Walked {
    tampered: Option<Tampered>,
    /// Each key with the file line it was first seen on.
    keys: Vec<(KeyId, u64)>,
    trust_used: bool,
    last_signed: Option<Position>,
    /// Each finding with its file line.
    findings: Vec<(Indeterminate, u64)>,
    torn: Option<u64>,
    saw_line: bool,
    /// The final session's index, if it is not anchored.
    unanchored: Option<u64>,
    /// Calls without outcome in the final session.
    in_flight: CallList,
    /// Calls without outcome in sessions that were closed or superseded.
    unfinished: CallList,
}

impl Walked {
    fn into_report(self, shared: &Shared) -> Report {
        let failure = shared
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // The earliest finding in the file decides; a walk finding wins a tie.
        let (tampered, coverage) = match (self.tampered, failure) {
            (Some(t), Some(f)) if f.line < t.line() => (Some(sig_failure(&f)), f.covered_before),
            (None, Some(f)) => (Some(sig_failure(&f)), f.covered_before),
            (Some(t), _) => (Some(t), self.last_signed),
            (None, None) => (None, self.last_signed),
        };
        // The walk may have read past the deciding line before a worker's failure reached
        // it, by a distance that depends on timing: report only what precedes the
        // deciding line, so the same bytes always give the same report.
        let cut = tampered.as_ref().map_or(u64::MAX, Tampered::line);
        let keys: Vec<KeyId> = self
            .keys
            .iter()
            .filter(|(_, line)| *line <= cut)
            .map(|(k, _)| *k)
            .collect();
        let findings: Vec<Indeterminate> = self
            .findings
            .into_iter()
            .filter(|(_, line)| *line < cut)
            .map(|(f, _)| f)
            .collect();
        // A Tampered file is not evidence of anything, calls included; and the walk may
        // have read a timing-dependent distance past the deciding line.
        let (in_flight, unfinished) = if tampered.is_some() {
            (CallList::default(), CallList::default())
        } else {
            (self.in_flight, self.unfinished)
        };
        let verdict = if let Some(t) = tampered {
            Verdict::Tampered(t)
        } else {
            let mut reasons = findings.clone();
            if let Some(session) = self.unanchored {
                reasons.push(Indeterminate::UnanchoredTail {
                    session,
                    in_flight: usize::try_from(in_flight.total()).unwrap_or(usize::MAX),
                });
            }
            if let Some(line) = self.torn {
                reasons.push(Indeterminate::TornFinalLine { line });
            }
            if !self.saw_line {
                reasons.push(Indeterminate::Empty);
            }
            match reasons.into_iter().next() {
                Some(r) => Verdict::Indeterminate(r),
                None if !self.trust_used => Verdict::Verified(Trust::Unpinned),
                None if keys.len() == 1 => Verdict::Verified(Trust::PinnedTo(keys[0])),
                None => Verdict::Verified(Trust::Pinned),
            }
        };
        Report {
            verdict,
            keys,
            coverage,
            in_flight: in_flight.listed,
            in_flight_unlisted: in_flight.unlisted,
            unfinished: unfinished.listed,
            unfinished_unlisted: unfinished.unlisted,
            findings,
        }
    }
}

fn sig_failure(f: &Failure) -> Tampered {
    Tampered::BadSignature {
        at: f.at,
        line: f.line,
        problem: SignatureProblem::DoesNotVerify,
    }
}

struct Walk<'a> {
    options: &'a Options,
    tx: Option<SyncSender<Batch>>,
    shared: &'a Shared,
    batch: Vec<Job>,
    batch_covered_before: Option<Position>,
    sessions: u64,
    session: Option<SessionState>,
    /// SHA-256 of each decided approval_id: fixed size whatever the ids' length.
    decided: HashSet<[u8; 32]>,
    /// The current line's signing input, when it could be cut from canonical bytes.
    signing_input: Option<Vec<u8>>,
    out: Walked,
    next_order: u64,
}

/// A finding that ends the walk.
type Stop = Tampered;

impl<'a> Walk<'a> {
    fn new(options: &'a Options, tx: SyncSender<Batch>, shared: &'a Shared) -> Walk<'a> {
        Walk {
            options,
            tx: Some(tx),
            shared,
            batch: Vec::with_capacity(BATCH),
            batch_covered_before: None,
            sessions: 0,
            session: None,
            decided: HashSet::new(),
            signing_input: None,
            out: Walked {
                tampered: None,
                keys: Vec::new(),
                trust_used: options.trust.is_some(),
                last_signed: None,
                findings: Vec::new(),
                torn: None,
                saw_line: false,
                unanchored: None,
                in_flight: CallList::default(),
                unfinished: CallList::default(),
            },
            next_order: 0,
        }
    }

    fn run(&mut self, input: impl Read) -> std::io::Result<()> {
        let mut reader = BufReader::with_capacity(1 << 16, input);
        let mut pending: Option<(u64, Vec<u8>, bool)> = None;
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            let (n, oversize) = read_line(&mut reader, &mut buf)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if buf
                .iter()
                .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
                && !oversize
            {
                continue;
            }
            if let Some((no, bytes, over)) = pending.take()
                && let Err(stop) = self.line(no, &bytes, over, false)
            {
                self.out.tampered = Some(stop);
                return Ok(());
            }
            if self.shared.earliest_line.load(Ordering::Relaxed) != u64::MAX {
                // A signature already failed earlier in the file; nothing later matters.
                return Ok(());
            }
            if oversize {
                // Malformed wherever it stands: the verdict is decided, so stop reading.
                if let Err(stop) = self.line(line_no, &[], true, false) {
                    self.out.tampered = Some(stop);
                }
                return Ok(());
            }
            let trimmed = buf.strip_suffix(b"\n").unwrap_or(&buf).to_vec();
            pending = Some((line_no, trimmed, oversize));
        }
        if let Some((no, bytes, over)) = pending
            && let Err(stop) = self.line(no, &bytes, over, true)
        {
            self.out.tampered = Some(stop);
        }
        Ok(())
    }

    fn finish(mut self) -> Walked {
        self.flush();
        self.tx = None;
        if self.out.tampered.is_none()
            && let Some(s) = self.session.take()
        {
            if !s.anchored {
                self.out.unanchored = Some(s.index);
            }
            self.out.in_flight.take_session(s.index, s.in_flight);
        }
        self.out
    }

    fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let jobs = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        let batch = Batch {
            jobs,
            covered_before: self.batch_covered_before,
        };
        if let Some(tx) = &self.tx {
            // Workers only stop when the sender is gone, so this cannot fail while we hold it.
            let _ = tx.send(batch);
        }
    }

    fn note(&mut self, finding: Indeterminate, line: u64) {
        if self.out.findings.len() < MAX_FINDINGS {
            self.out.findings.push((finding, line));
        }
    }

    fn line(&mut self, no: u64, bytes: &[u8], oversize: bool, last: bool) -> Result<(), Stop> {
        self.out.saw_line = true;
        let malformed = |detail: String| Tampered::Malformed { line: no, detail };
        if oversize {
            return Err(malformed(format!("longer than {MAX_LINE_BYTES} bytes")));
        }
        let (obj, layout) = match json::parse_line(bytes) {
            Ok((Value::Object(o), layout)) => (o, layout),
            Ok(_) => return Err(malformed("not a JSON object".into())),
            Err(e @ ParseError::Syntax { .. }) => {
                if last {
                    self.out.torn = Some(no);
                    return Ok(());
                }
                return Err(malformed(e.to_string()));
            }
            Err(e) => return Err(malformed(format!("outside the value space: {e}"))),
        };
        let field = |e: FieldError| malformed(e.to_string());
        let f = Fields::new(&obj, "");
        let version = f.int("schema_version").map_err(field)?;
        if version.get() != u64::from(SCHEMA_VERSION) {
            return Err(malformed(format!(
                "schema_version: expected {SCHEMA_VERSION}, found {version}"
            )));
        }
        let line_type = LineType::from_token(f.str("line_type").map_err(field)?);
        let seq = f.int("seq").map_err(field)?.get();
        let prev_hash = f.hex("prev_hash", LineHash::from_hex).map_err(field)?;
        // Lines as written by a conforming emitter are already canonical: hash them as
        // they are and cut the signature out, instead of serializing twice more.
        debug_assert!(!layout.canonical || obj.to_canonical() == bytes);
        let hash = if layout.canonical {
            LineHash::of_line(bytes)
        } else {
            LineHash::of_line(&obj.to_canonical())
        };
        self.signing_input = layout.without_signature(bytes);

        if line_type == LineType::Open {
            return self.open(no, &obj, seq, prev_hash, hash);
        }

        let Some(session) = self.session.as_mut() else {
            return Err(Tampered::SessionBoundary {
                session: 0,
                line: no,
                detail: BoundaryProblem::BeforeOpen,
            });
        };
        // Any line after an anchor leaves the tail unanchored again until the next one.
        session.anchored = false;
        if seq < session.expected_seq {
            return Err(Tampered::SeqOutOfOrder {
                session: session.index,
                line: no,
                expected: session.expected_seq,
                found: seq,
            });
        }
        let at = Position {
            session: session.index,
            seq,
        };
        if prev_hash != session.tail {
            return Err(Tampered::ChainBreak {
                at,
                line: no,
                claimed: prev_hash,
                actual: session.tail,
            });
        }
        let gap = (seq > session.expected_seq).then(|| Indeterminate::MissingLines {
            session: session.index,
            from: session.expected_seq,
            to: seq - 1,
        });
        session.expected_seq = seq + 1;
        session.tail = hash;
        if let Some(g) = gap {
            self.note(g, no);
        }

        match &line_type {
            LineType::Intent => {
                if obj.contains_key("signature") || obj.contains_key("key_id") {
                    return Err(malformed(
                        "an intent line carries a signature or key_id; intents are never signed"
                            .into(),
                    ));
                }
                let intent = IntentLine::from_object(&obj).map_err(field)?;
                let order = self.next_order;
                self.next_order += 1;
                if let Some(s) = self.session.as_mut() {
                    s.in_flight.insert(
                        sha256(intent.call_id.as_bytes()),
                        Pending::new(order, seq, &intent.call_id, &intent.tool_id),
                    );
                }
            }
            LineType::Outcome => {
                let outcome = OutcomeLine::from_object(&obj).map_err(field)?;
                self.signed(no, at, &obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.in_flight.remove(&sha256(outcome.call_id.as_bytes()));
                }
            }
            LineType::Decision => {
                let decision = DecisionLine::from_object(&obj).map_err(field)?;
                if !self.decided.insert(sha256(decision.approval_id.as_bytes())) {
                    return Err(Tampered::DuplicateDecision {
                        at,
                        line: no,
                        approval_id: decision.approval_id,
                    });
                }
                self.signed(no, at, &obj)?;
            }
            LineType::Close => {
                self.signed(no, at, &obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.anchored = true;
                    // Calls left without outcome at a close will never get one.
                    let calls = std::mem::take(&mut s.in_flight);
                    self.out.unfinished.take_session(s.index, calls);
                }
            }
            LineType::Checkpoint => {
                self.signed(no, at, &obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.anchored = true;
                }
                self.note(Indeterminate::ReservedCheckpoint { at, line: no }, no);
            }
            LineType::Unknown(token) => {
                if obj.contains_key("signature") {
                    self.signed(no, at, &obj)?;
                }
                self.note(
                    Indeterminate::UnknownLineType {
                        token: token.clone(),
                        at,
                        line: no,
                    },
                    no,
                );
            }
            LineType::Open => unreachable!("handled above"),
        }
        Ok(())
    }

    fn open(
        &mut self,
        no: u64,
        obj: &Object,
        seq: u64,
        prev_hash: LineHash,
        hash: LineHash,
    ) -> Result<(), Stop> {
        let malformed = |detail: String| Tampered::Malformed { line: no, detail };
        let index = self.sessions;
        let open = OpenLine::from_object(obj).map_err(|e| malformed(e.to_string()))?;
        if seq != 0 {
            return Err(malformed(format!(
                "open line with seq {seq}; sessions start at 0"
            )));
        }
        if prev_hash != LineHash::GENESIS {
            return Err(malformed(
                "open line's prev_hash is not the genesis digest".into(),
            ));
        }
        match (&self.session, open.prev_session_tail) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(Tampered::SessionBoundary {
                    session: index,
                    line: no,
                    detail: BoundaryProblem::MissingPredecessor,
                });
            }
            (Some(prev), claimed) if claimed != Some(prev.tail) => {
                return Err(Tampered::SessionBoundary {
                    session: index,
                    line: no,
                    detail: BoundaryProblem::TailMismatch {
                        claimed,
                        actual: prev.tail,
                    },
                });
            }
            (Some(_), _) => {}
        }
        let at = Position {
            session: index,
            seq: 0,
        };
        let key_id = open.public_key.key_id();
        if !self.out.keys.iter().any(|(k, _)| *k == key_id) {
            self.out.keys.push((key_id, no));
        }
        let key = match VerifyingKey::new(&open.public_key) {
            Ok(k) => Arc::new(k),
            Err(e) => {
                let problem = match e {
                    crate::key::KeyError::SmallOrder => SignatureProblem::KeySmallOrder,
                    _ => SignatureProblem::KeyNotAPoint,
                };
                return Err(Tampered::BadSignature {
                    at,
                    line: no,
                    problem,
                });
            }
        };
        if let Some(trust) = &self.options.trust
            && !trust.contains(&open.public_key)
        {
            return Err(Tampered::UntrustedKey {
                at,
                line: no,
                key_id,
            });
        }
        // The previous session's calls in flight are anchored by this open line: they
        // will never get an outcome, and the report keeps naming them.
        if let Some(prev) = self.session.take() {
            self.out.unfinished.take_session(prev.index, prev.in_flight);
        }
        self.session = Some(SessionState {
            index,
            expected_seq: 1,
            tail: hash,
            key,
            key_id,
            anchored: false,
            in_flight: HashMap::new(),
        });
        self.sessions += 1;
        self.signed(no, at, obj)
    }

    /// Checks the signature members and queues the strict check.
    fn signed(&mut self, no: u64, at: Position, obj: &Object) -> Result<(), Stop> {
        let session = self
            .session
            .as_ref()
            .expect("signed lines follow an open line");
        let Some(sig) = obj.get("signature") else {
            return Err(Tampered::MissingSignature { at, line: no });
        };
        let bad = |problem| Tampered::BadSignature {
            at,
            line: no,
            problem,
        };
        let signature = sig
            .as_str()
            .and_then(|s| Signature::from_hex(s).ok())
            .ok_or_else(|| bad(SignatureProblem::NotHex))?;
        let Some(key_id) = obj.get("key_id") else {
            return Err(bad(SignatureProblem::NoKeyId));
        };
        let key_id = key_id
            .as_str()
            .and_then(|s| KeyId::from_hex(s).ok())
            .ok_or_else(|| Tampered::Malformed {
                line: no,
                detail: "key_id: expected 64 lowercase hex characters".into(),
            })?;
        if key_id != session.key_id {
            return Err(Tampered::KeyMismatch {
                at,
                line: no,
                found: key_id,
                expected: session.key_id,
            });
        }
        let message = self.signing_input.take().unwrap_or_else(|| {
            let mut m = Vec::with_capacity(1024);
            obj.write_canonical_skipping(Some("signature"), &mut m);
            m
        });
        if self.batch.is_empty() {
            self.batch_covered_before = self.out.last_signed;
        }
        self.batch.push(Job {
            line: no,
            at,
            key: Arc::clone(&session.key),
            message,
            signature,
        });
        self.out.last_signed = Some(at);
        if self.batch.len() == BATCH {
            self.flush();
        }
        Ok(())
    }
}

/// Reads one line including its `\n` into `buf`. A line whose content goes over
/// [`MAX_LINE_BYTES`] is reported as oversize as soon as its first byte over the limit is
/// read, and nothing more is read: the line is malformed whatever follows, and the rest
/// of it may never end (`/dev/zero`, a sparse hole).
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    let mut total = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok((total, false));
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        // The limit counts the line's content, not its newline.
        let content = chunk.len() - usize::from(done);
        if buf.len() + content > MAX_LINE_BYTES {
            let take = MAX_LINE_BYTES + 1 - buf.len();
            reader.consume(take);
            return Ok((total + take, true));
        }
        let take = chunk.len();
        buf.extend_from_slice(chunk);
        total += take;
        reader.consume(take);
        if done {
            return Ok((total, false));
        }
    }
}

/// Why a trust store could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: expected a public key of 64 lowercase hex characters: {source}")]
pub struct TrustStoreError {
    /// 1-based line number in the store.
    pub line: usize,
    /// The cause.
    pub source: crate::digest::HexError,
}

/// Reads a trust store: one public key per line; blank lines and lines starting with `#`
/// are skipped. A store with no keys yields an empty slice — a pin nothing satisfies,
/// never an unpinned walk, so a truncated store cannot quietly turn a gate off.
///
/// # Errors
/// The first line that is neither skipped nor a key.
pub fn parse_trust_store(text: &str) -> Result<Vec<PublicKey>, TrustStoreError> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = PublicKey::from_hex(line).map_err(|source| TrustStoreError {
            line: i + 1,
            source,
        })?;
        keys.push(key);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oversize(bytes: &[u8]) -> Vec<bool> {
        let mut reader = BufReader::with_capacity(4096, bytes);
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            let (n, over) = read_line(&mut reader, &mut buf).unwrap();
            if n == 0 {
                return out;
            }
            out.push(over);
            if over {
                // The walk stops at an oversize line.
                return out;
            }
        }
    }

    /// The limit counts content only: the same line is accepted or refused whether or
    /// not a newline follows it.
    #[test]
    fn line_limit_ignores_the_newline() {
        let at_limit = vec![b'x'; MAX_LINE_BYTES];
        let over = vec![b'x'; MAX_LINE_BYTES + 1];
        for (line, expected) in [(&at_limit, false), (&over, true)] {
            let mut with_newline = line.clone();
            with_newline.push(b'\n');
            assert_eq!(oversize(&with_newline), vec![expected]);
            assert_eq!(oversize(line), vec![expected]);
        }
    }

    #[test]
    fn file_text_in_reasons_is_quoted_and_cut() {
        let hostile = format!("\u{202e}\u{1b}[31m{}", "a".repeat(100));
        let shown = quote(&hostile);
        assert!(shown.starts_with("\"\\u202e\\u001b[31m"));
        assert!(shown.ends_with("…\""));
        assert!(shown.chars().all(|c| c == '…' || (' '..='~').contains(&c)));
        let err = crate::json::parse(format!("{{\"{hostile}\":1,\"{hostile}\":1}}").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains('\u{1b}') && !err.contains('\u{202e}'),
            "{err}"
        );
    }
}
