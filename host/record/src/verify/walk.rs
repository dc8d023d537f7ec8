//! The walk: a per-line state machine holding what the writer held (session index,
//! expected seq, running tail hash, the session's key). It reads the file once,
//! streaming, hands signature checks to the workers, and turns what it saw into a
//! [`Report`] once the workers are done.

use super::report::{
    ApproversSeen, ClockStep, InFlight, KeyChange, KeyChangeKind, Report, TrustedThroughHandoff,
};
use super::verdict::{
    BoundaryProblem, HandoffProblem, Indeterminate, Misuse, Position, SignatureProblem, Tampered,
    Trust, Unpinned, Verdict, Widening,
};
use super::workers::{BATCH, BATCH_BYTES, Batch, Failure, Job, Shared, check, sig_failure};
use super::{MAX_ID_BYTES, MAX_LINE_BYTES, MAX_LISTED_CALLS, Options};
use crate::approval::Approver;
use crate::digest::{KeyId, LineHash, sha256};
use crate::json::{self, Layout, Object, ParseError, Value};
use crate::key::{Signature, VerifyingKey};
use crate::line::{
    ApprovalScope, DecisionLine, DecisionVerdict, ExecutionOutcome, FieldError, Fields, FsScope,
    IntentLine, KeyHandoffLine, LineType, NetScope, OpenLine, OutcomeLine, PolicyOutcome,
    SCHEMA_VERSION, ToolChangeLine,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, PoisonError};

/// How many findings of the Indeterminate kind the report keeps.
const MAX_FINDINGS: usize = 64;

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

#[derive(Clone)]
struct SessionState {
    index: u64,
    expected_seq: u64,
    tail: LineHash,
    /// The key in force: the open line's, or the last `key_handoff`'s.
    key: Arc<VerifyingKey>,
    key_id: KeyId,
    /// The key the open line published.
    open_key_id: KeyId,
    /// Whether the session's last line so far is an anchor (close, or a checkpoint).
    anchored: bool,
    /// SHA-256 of call_id → the intent, for naming calls in flight. Keyed by digest and
    /// holding only id prefixes, so an entry has a fixed size whatever the ids' length.
    in_flight: HashMap<[u8; 32], Pending>,
    /// The latest `time` a line of the session carried so far.
    latest_time: Option<String>,
}

/// A call in flight as the walk holds it.
#[derive(Clone)]
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
#[derive(Clone, Default)]
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

#[derive(Clone)]
pub(super) struct Walked {
    tampered: Option<Tampered>,
    /// Each key with the file line it was first seen on.
    keys: Vec<(KeyId, u64)>,
    /// Keys that are a published test key plus a torsion point, by the name of that key.
    published: Vec<(KeyId, &'static str)>,
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
    /// Lines whose time is before an earlier line's of their session, with their file
    /// line (at most [`MAX_LISTED_CALLS`]), and how many more.
    time_backwards: Vec<(ClockStep, u64)>,
    time_backwards_unlisted: u64,
    /// Key changes (at most [`MAX_LISTED_CALLS`]), and how many more.
    key_changes: Vec<KeyChange>,
    key_changes_unlisted: u64,
    /// Keys accepted through a hand-off in a pinned walk (at most [`MAX_LISTED_CALLS`]).
    trusted_through_handoff: Vec<TrustedThroughHandoff>,
    trusted_through_handoff_unlisted: u64,
    /// Who decided the decisions read so far.
    approvers: ApproversSeen,
    /// Whether any decision line was read.
    saw_decision: bool,
}

/// What the walk keeps of a decided approval: fixed-size, whatever the ids' length.
#[derive(Clone, Copy)]
enum Decided {
    Denied,
    Approved {
        /// SHA-256 of the approved scope's `tool_id`.
        tool: [u8; 32],
        /// Whether an outcome that ran named it already.
        used: bool,
    },
}

/// The most canonical bytes of one park's filesystem and network scope the walk holds;
/// a larger one is not held, and an approval's filesystem and network scope is then not
/// judged against it.
const MAX_HELD_AUTHORITY: usize = 4096;

/// The most canonical bytes of park scopes the walk holds at once; past it, a park's
/// filesystem and network scope is not held. With [`MAX_HELD_AUTHORITY`] this bounds what undecided parks cost.
const MAX_HELD_AUTHORITY_TOTAL: usize = 16 << 20;

/// What the walk keeps of a park not yet decided: fixed-size but for its filesystem and
/// network scope, which is held whole only while small.
#[derive(Clone)]
struct Park {
    /// SHA-256 of the park's `tool_id`.
    tool: [u8; 32],
    arguments_digest: Option<crate::digest::ArgumentsDigest>,
    /// In the one time form ([`crate::time`]): 27 bytes.
    expires_at: Option<String>,
    authority: Authority,
}

#[derive(Clone)]
enum Authority {
    /// The park's `fs` and `net`, and their canonical size.
    Held(Option<FsScope>, Option<NetScope>, usize),
    /// A scope too large to hold, or past the total: not judged.
    Unheld,
}

/// The canonical bytes of a scope's filesystem and network members, as one object.
fn authority_bytes(scope: &ApprovalScope) -> Vec<u8> {
    let mut whole = scope.to_object();
    whole.remove("tool_id");
    whole.remove("arguments_digest");
    whole.remove("expires_at");
    whole.to_canonical()
}

/// The first member of `approved` wider than the park's stated scope `park`, if any.
/// Paths compare lexically, as written: a path is within a root when it is the root or
/// continues it after a `/`, and has no `..` component. A park held by digest bounds
/// the filesystem and network scope only to itself: other authority is not judged.
fn widening(park: &Park, approved: &ApprovalScope) -> Option<Widening> {
    if sha256(approved.tool_id.as_bytes()) != park.tool {
        return Some(Widening::Tool);
    }
    if park.arguments_digest.is_some() && approved.arguments_digest != park.arguments_digest {
        return Some(Widening::ArgumentsDigest);
    }
    if let Authority::Held(fs, net, _) = &park.authority {
        if !fs_within(approved.fs.as_ref(), fs.as_ref()) {
            return Some(Widening::Fs);
        }
        if !net_within(approved.net.as_ref(), net.as_ref()) {
            return Some(Widening::Net);
        }
    }
    match (&park.expires_at, &approved.expires_at) {
        // One fixed-width form (crate::time), so text order is time order.
        (Some(p), Some(a)) if a > p => Some(Widening::ExpiresAt),
        (Some(_), None) => Some(Widening::ExpiresAt),
        _ => None,
    }
}

fn path_within(path: &str, root: &str) -> bool {
    if path.split('/').any(|c| c == "..") {
        return path == root;
    }
    path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| root.ends_with('/') || rest.starts_with('/'))
}

fn paths_within(paths: &[String], roots: &[String]) -> bool {
    paths
        .iter()
        .all(|p| roots.iter().any(|r| path_within(p, r)))
}

fn fs_within(approved: Option<&FsScope>, park: Option<&FsScope>) -> bool {
    let none: &[String] = &[];
    let (read, write) = park.map_or((none, none), |p| (&p.read_paths[..], &p.write_paths[..]));
    approved
        .is_none_or(|a| paths_within(&a.read_paths, read) && paths_within(&a.write_paths, write))
}

fn net_within(approved: Option<&NetScope>, park: Option<&NetScope>) -> bool {
    let rules = park.map_or(&[][..], |p| &p.http[..]);
    approved.is_none_or(|a| {
        a.http.iter().all(|want| {
            rules.iter().any(|have| {
                have.host == want.host
                    && want.ports.iter().all(|p| have.ports.contains(p))
                    && want.methods.iter().all(|m| have.methods.contains(m))
            })
        })
    })
}

/// Whether an outcome's tool ran: anything but the host refusing to run it.
fn ran(outcome: &OutcomeLine) -> bool {
    !matches!(outcome.execution, ExecutionOutcome::HostDenied { .. })
}

impl Walked {
    pub(super) fn into_report(self, shared: &Shared) -> Report {
        let failure = shared
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (tampered, coverage) = decide(self.tampered, failure.as_ref(), self.last_signed);
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
        // As calls in flight: a Tampered file is not evidence of when anything happened.
        let (time_backwards, time_backwards_unlisted) = if tampered.is_some() {
            (Vec::new(), 0)
        } else {
            let steps = self.time_backwards.into_iter().map(|(step, _)| step);
            (steps.collect(), self.time_backwards_unlisted)
        };
        // As clock steps: a Tampered file is not evidence of who signed what.
        let (key_changes, key_changes_unlisted, trusted_through_handoff, trusted_unlisted) =
            if tampered.is_some() {
                (Vec::new(), 0, Vec::new(), 0)
            } else {
                (
                    self.key_changes,
                    self.key_changes_unlisted,
                    self.trusted_through_handoff,
                    self.trusted_through_handoff_unlisted,
                )
            };
        // As key changes: a Tampered file is not evidence of who decided.
        let approvers = (tampered.is_none()
            && (self.approvers.any() || (self.approvers.pinned && self.saw_decision)))
            .then_some(self.approvers);
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
        let published = self
            .published
            .into_iter()
            .filter(|(k, _)| keys.contains(k))
            .collect();
        Report {
            verdict,
            published,
            keys,
            coverage,
            in_flight: in_flight.listed,
            in_flight_unlisted: in_flight.unlisted,
            unfinished: unfinished.listed,
            unfinished_unlisted: unfinished.unlisted,
            findings,
            time_backwards,
            time_backwards_unlisted,
            key_changes,
            key_changes_unlisted,
            trusted_through_handoff,
            trusted_through_handoff_unlisted: trusted_unlisted,
            approvers,
        }
    }
}

/// The finding that decides between the walk's own and the workers' first failure: the
/// earliest in the file, a walk finding winning a tie; with the coverage before it.
pub(super) fn decide(
    walk: Option<Tampered>,
    failure: Option<&Failure>,
    last_signed: Option<Position>,
) -> (Option<Tampered>, Option<Position>) {
    match (walk, failure) {
        (Some(t), Some(f)) if f.line < t.line() => (Some(sig_failure(f)), f.covered_before),
        (None, Some(f)) => (Some(sig_failure(f)), f.covered_before),
        (Some(t), _) => (Some(t), last_signed),
        (None, None) => (None, last_signed),
    }
}

pub(super) struct Walk {
    options: Options,
    /// Where batches go: worker threads, or (`None`) checked on this thread as they are
    /// flushed, for a follower that must know a line's signature holds before going on.
    tx: Option<SyncSender<Batch>>,
    shared: Arc<Shared>,
    batch: Vec<Job>,
    batch_covered_before: Option<Position>,
    /// The bytes of the messages in `batch`.
    batch_bytes: usize,
    sessions: u64,
    session: Option<SessionState>,
    /// SHA-256 of each decided approval_id → what was decided: fixed size whatever the
    /// ids' length.
    decided: HashMap<[u8; 32], Decided>,
    /// SHA-256 of each parked approval_id not yet decided → the scope its park stated;
    /// an entry leaves when its decision is read.
    parked: HashMap<[u8; 32], Park>,
    /// The canonical bytes of park scopes held whole in `parked`.
    parked_bytes: usize,
    /// Each key a `key_handoff` named → the latest hand-off to it: the key that handed
    /// and where. In a pinned walk every entry is trusted (its giver was in force).
    handed_to: HashMap<KeyId, (KeyId, Position)>,
    /// The file's latest hand-off: to, from, where. Only a session opened with its
    /// `to` key continues the rotation; a key handed on since (a retired key coming
    /// back) is an unannounced change.
    latest_handoff: Option<(KeyId, KeyId, Position)>,
    /// The current line's signing input, when it could be cut from canonical bytes.
    signing_input: Option<Vec<u8>>,
    out: Walked,
    next_order: u64,
}

/// A finding that ends the walk.
type Stop = Tampered;

fn malformed(line: u64, detail: String) -> Tampered {
    Tampered::Malformed { line, detail }
}

/// A line's `time`, when it has one: exactly the form of [`crate::time`], or the line is
/// malformed (a time two readers could read differently is not a time).
fn read_time(no: u64, obj: &Object) -> Result<Option<String>, Stop> {
    match obj.get("time") {
        None => Ok(None),
        Some(Value::String(t)) if crate::time::is_valid(t) => Ok(Some(t.clone())),
        Some(_) => Err(malformed(
            no,
            "time: expected RFC 3339 UTC with six fractional digits, as 2026-01-02T03:04:05.000006Z"
                .into(),
        )),
    }
}

fn bad_field(line: u64) -> impl Fn(FieldError) -> Tampered {
    move |e| malformed(line, e.to_string())
}

/// The members every line carries, read before its type is known.
struct Head {
    line_type: LineType,
    seq: u64,
    prev_hash: LineHash,
}

impl Head {
    fn read(no: u64, obj: &Object) -> Result<Head, Stop> {
        let f = Fields::new(obj, "");
        let version = f.int("schema_version").map_err(bad_field(no))?;
        if version.get() != u64::from(SCHEMA_VERSION) {
            return Err(malformed(
                no,
                format!("schema_version: expected {SCHEMA_VERSION}, found {version}"),
            ));
        }
        Ok(Head {
            line_type: LineType::from_token(f.str("line_type").map_err(bad_field(no))?),
            seq: f.int("seq").map_err(bad_field(no))?.get(),
            prev_hash: f
                .hex("prev_hash", LineHash::from_hex)
                .map_err(bad_field(no))?,
        })
    }
}

impl Walk {
    /// A walk whose batches go to `tx`'s workers, or are checked as they are flushed
    /// when `tx` is `None`.
    pub(super) fn new(
        options: &Options,
        tx: Option<SyncSender<Batch>>,
        shared: Arc<Shared>,
    ) -> Walk {
        Walk {
            options: options.clone(),
            tx,
            shared,
            batch: Vec::with_capacity(BATCH),
            batch_covered_before: None,
            batch_bytes: 0,
            sessions: 0,
            session: None,
            decided: HashMap::new(),
            parked: HashMap::new(),
            parked_bytes: 0,
            handed_to: HashMap::new(),
            latest_handoff: None,
            signing_input: None,
            out: Walked {
                tampered: None,
                keys: Vec::new(),
                published: Vec::new(),
                trust_used: options.trust.is_some(),
                last_signed: None,
                findings: Vec::new(),
                torn: None,
                saw_line: false,
                unanchored: None,
                in_flight: CallList::default(),
                unfinished: CallList::default(),
                time_backwards: Vec::new(),
                time_backwards_unlisted: 0,
                key_changes: Vec::new(),
                key_changes_unlisted: 0,
                trusted_through_handoff: Vec::new(),
                trusted_through_handoff_unlisted: 0,
                approvers: ApproversSeen {
                    pinned: options.approvers.is_some(),
                    ..ApproversSeen::default()
                },
                saw_decision: false,
            },
            next_order: 0,
        }
    }

    pub(super) fn run(&mut self, input: impl Read) -> std::io::Result<()> {
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

    pub(super) fn finish(mut self) -> Walked {
        self.flush();
        // Dropping the sender lets the workers drain and stop.
        self.tx = None;
        end(&mut self.out, self.session.take());
        self.out
    }

    /// What [`Walk::finish`] would give if the input ended here, the walk going on.
    /// Signatures queued and not yet flushed are not in it.
    pub(super) fn snapshot(&self) -> Walked {
        let mut out = self.out.clone();
        end(&mut out, self.session.clone());
        out
    }

    /// Sends the queued signature checks on (or, without workers, checks them now).
    pub(super) fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let jobs = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.batch_bytes = 0;
        let batch = Batch {
            jobs,
            covered_before: self.batch_covered_before,
        };
        match &self.tx {
            // Workers only stop when the sender is gone, so this cannot fail while we hold it.
            Some(tx) => {
                let _ = tx.send(batch);
            }
            None => check(batch, &self.shared),
        }
    }

    /// Records the finding that stopped the walk, for the report.
    pub(super) fn stop(&mut self, stop: Tampered) {
        self.out.tampered = Some(stop);
    }

    fn note(&mut self, finding: Indeterminate, line: u64) {
        if self.out.findings.len() < MAX_FINDINGS {
            self.out.findings.push((finding, line));
        }
    }

    /// Judges one line: its position once it chains, `None` for a torn final line
    /// (`last`, and not JSON), the finding that stops the walk otherwise. Its signature
    /// is only queued: it holds once [`Walk::flush`] and the workers say so.
    pub(super) fn line(
        &mut self,
        no: u64,
        bytes: &[u8],
        oversize: bool,
        last: bool,
    ) -> Result<Option<Position>, Stop> {
        self.out.saw_line = true;
        if oversize {
            return Err(malformed(no, format!("longer than {MAX_LINE_BYTES} bytes")));
        }
        let Some((obj, layout)) = self.parse(no, bytes, last)? else {
            return Ok(None);
        };
        let head = Head::read(no, &obj)?;
        // Lines as written by a conforming emitter are already canonical: hash them as
        // they are and cut the signature out, instead of serializing twice more.
        debug_assert!(!layout.canonical || obj.to_canonical() == bytes);
        let hash = if layout.canonical {
            LineHash::of_line(bytes)
        } else {
            LineHash::of_line(&obj.to_canonical())
        };
        self.signing_input = layout.without_signature(bytes);

        let time = read_time(no, &obj)?;
        if head.line_type == LineType::Open {
            self.open(no, &obj, head.seq, head.prev_hash, hash)?;
            let at = Position {
                session: self.sessions - 1,
                seq: 0,
            };
            self.timed(no, at, time);
            return Ok(Some(at));
        }
        let at = self.chain(no, head.seq, head.prev_hash, hash)?;
        self.timed(no, at, time);
        self.by_type(no, at, &head.line_type, &obj)?;
        Ok(Some(at))
    }

    /// Parses a line as a JSON object; `None` for a final line torn mid-write, which is
    /// noted.
    fn parse(
        &mut self,
        no: u64,
        bytes: &[u8],
        last: bool,
    ) -> Result<Option<(Object, Layout)>, Stop> {
        match json::parse_line(bytes) {
            Ok((Value::Object(o), layout)) => Ok(Some((o, layout))),
            Ok(_) => Err(malformed(no, "not a JSON object".into())),
            Err(e @ ParseError::Syntax { .. }) => {
                if last {
                    self.out.torn = Some(no);
                    return Ok(None);
                }
                Err(malformed(no, e.to_string()))
            }
            Err(e) => Err(malformed(no, format!("outside the value space: {e}"))),
        }
    }

    /// Chains a line other than an open onto its session: after an open, seq not going
    /// back, prev_hash the session's tail. Skipped seqs are a finding, not a stop.
    fn chain(
        &mut self,
        no: u64,
        seq: u64,
        prev_hash: LineHash,
        hash: LineHash,
    ) -> Result<Position, Stop> {
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
        Ok(at)
    }

    /// What each line type asks beyond the chain: its own members, a signature, and
    /// the calls in flight, decisions and anchors it changes.
    fn by_type(
        &mut self,
        no: u64,
        at: Position,
        line_type: &LineType,
        obj: &Object,
    ) -> Result<(), Stop> {
        match line_type {
            LineType::Intent => self.intent(no, at.seq, obj)?,
            LineType::Outcome => {
                let outcome = OutcomeLine::from_object(obj).map_err(bad_field(no))?;
                self.approval_used(no, at, &outcome)?;
                self.signed(no, at, obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.in_flight.remove(&sha256(outcome.call_id.as_bytes()));
                }
                if let PolicyOutcome::PendingApproval {
                    approval_id,
                    scope: Some(scope),
                } = outcome.policy
                {
                    let id = sha256(approval_id.as_bytes());
                    // A decision already read answers nothing parked later; a second
                    // park of one id keeps the first's scope.
                    if !self.decided.contains_key(&id) && !self.parked.contains_key(&id) {
                        self.park(id, &scope);
                    }
                }
            }
            LineType::Decision => {
                let decision = DecisionLine::from_object(obj).map_err(bad_field(no))?;
                self.decision(no, at, decision)?;
                self.signed(no, at, obj)?;
            }
            LineType::ToolChange => {
                ToolChangeLine::from_object(obj).map_err(bad_field(no))?;
                self.signed(no, at, obj)?;
            }
            LineType::KeyHandoff => {
                let handoff = KeyHandoffLine::from_object(obj).map_err(bad_field(no))?;
                // Signed by the key in force before the hand-off: the check is queued
                // with that key before the session's key changes below.
                self.signed(no, at, obj)?;
                self.key_handoff(no, at, &handoff)?;
            }
            LineType::Close => {
                self.signed(no, at, obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.anchored = true;
                    // Calls left without outcome at a close will never get one.
                    let calls = std::mem::take(&mut s.in_flight);
                    self.out.unfinished.take_session(s.index, calls);
                }
            }
            LineType::Checkpoint => {
                self.signed(no, at, obj)?;
                if let Some(s) = self.session.as_mut() {
                    s.anchored = true;
                }
                self.note(Indeterminate::ReservedCheckpoint { at, line: no }, no);
            }
            LineType::Unknown(token) => {
                if obj.contains_key("signature") {
                    self.signed(no, at, obj)?;
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

    /// Holds a park's scope until its decision: fixed-size members, and the filesystem
    /// and network scope whole while it and the total held stay in bounds.
    fn park(&mut self, id: [u8; 32], scope: &ApprovalScope) {
        let size = authority_bytes(scope).len();
        let authority =
            if size <= MAX_HELD_AUTHORITY && self.parked_bytes + size <= MAX_HELD_AUTHORITY_TOTAL {
                self.parked_bytes += size;
                Authority::Held(scope.fs.clone(), scope.net.clone(), size)
            } else {
                Authority::Unheld
            };
        self.parked.insert(
            id,
            Park {
                tool: sha256(scope.tool_id.as_bytes()),
                arguments_digest: scope.arguments_digest,
                expires_at: scope.expires_at.clone(),
                authority,
            },
        );
    }

    /// A decision: one per approval_id, its approver standing behind its verdict, an
    /// approval no wider than its park stated (when the park came first), and, with
    /// approvers pinned, made by one of them.
    fn decision(&mut self, no: u64, at: Position, decision: DecisionLine) -> Result<(), Stop> {
        let id = sha256(decision.approval_id.as_bytes());
        if self.decided.contains_key(&id) {
            return Err(Tampered::DuplicateDecision {
                at,
                line: no,
                approval_id: decision.approval_id,
            });
        }
        if let Some(approver) = &decision.approver
            && let Err(problem) =
                crate::approval::check(&decision.approval_id, &decision.verdict, approver)
        {
            return Err(Tampered::BadApprover {
                at,
                line: no,
                approval_id: decision.approval_id,
                problem,
            });
        }
        let park = self.parked.remove(&id);
        if let Some(Park {
            authority: Authority::Held(_, _, size),
            ..
        }) = &park
        {
            self.parked_bytes -= size;
        }
        let decided = match &decision.verdict {
            DecisionVerdict::Approved { scope } => {
                if let Some(widening) = park.and_then(|park| widening(&park, scope)) {
                    return Err(Tampered::ApprovalWidened {
                        at,
                        line: no,
                        approval_id: decision.approval_id,
                        widening,
                    });
                }
                Decided::Approved {
                    tool: sha256(scope.tool_id.as_bytes()),
                    used: false,
                }
            }
            DecisionVerdict::Denied { .. } => Decided::Denied,
        };
        self.decided.insert(id, decided);
        self.out.saw_decision = true;
        let approved = matches!(decision.verdict, DecisionVerdict::Approved { .. });
        let unpinned = match &decision.approver {
            Some(Approver::Key {
                public_key, key_id, ..
            }) => {
                self.out.approvers.count_key(*key_id);
                let pins = self.options.approvers.as_deref().unwrap_or(&[]);
                (!pins.iter().any(|a| a.matches(public_key))).then_some(Unpinned::Key(*key_id))
            }
            Some(Approver::Client { .. }) => {
                self.out.approvers.client += 1;
                // A client's denial ran nothing; its approval is no pinned person's.
                approved.then_some(Unpinned::Client)
            }
            Some(Approver::Host { .. }) => {
                self.out.approvers.host += 1;
                None
            }
            None => {
                self.out.approvers.unattributed += 1;
                Some(Unpinned::Unattributed)
            }
        };
        if self.options.approvers.is_some()
            && let Some(approver) = unpinned
        {
            self.note(
                Indeterminate::UntrustedApprover {
                    at,
                    line: no,
                    approval_id: decision.approval_id,
                    approver,
                },
                no,
            );
        }
        Ok(())
    }

    /// An outcome that ran under an approval decided earlier in the file: not a denied
    /// one, not for another tool, and not one an earlier outcome already ran under.
    fn approval_used(&mut self, no: u64, at: Position, outcome: &OutcomeLine) -> Result<(), Stop> {
        let Some(reference) = &outcome.decision_axes.approval_ref else {
            return Ok(());
        };
        if !ran(outcome) {
            return Ok(());
        }
        let misuse = match self.decided.get_mut(&sha256(reference.as_bytes())) {
            // Decided in another file, or never: nothing here to hold it against.
            None => return Ok(()),
            Some(Decided::Denied) => Misuse::Denied,
            Some(Decided::Approved { tool, .. }) if *tool != sha256(outcome.tool_id.as_bytes()) => {
                Misuse::OtherTool {
                    tool_id: outcome.tool_id.clone(),
                }
            }
            Some(Decided::Approved { used: true, .. }) => Misuse::SecondUse,
            Some(Decided::Approved { used, .. }) => {
                *used = true;
                return Ok(());
            }
        };
        Err(Tampered::ApprovalMisused {
            at,
            line: no,
            approval_id: reference.clone(),
            misuse,
        })
    }

    /// An intent is never signed; it puts its call in flight until an outcome names it.
    fn intent(&mut self, no: u64, seq: u64, obj: &Object) -> Result<(), Stop> {
        if obj.contains_key("signature") || obj.contains_key("key_id") {
            return Err(malformed(
                no,
                "an intent line carries a signature or key_id; intents are never signed".into(),
            ));
        }
        let intent = IntentLine::from_object(obj).map_err(bad_field(no))?;
        let order = self.next_order;
        self.next_order += 1;
        if let Some(s) = self.session.as_mut() {
            s.in_flight.insert(
                sha256(intent.call_id.as_bytes()),
                Pending::new(order, seq, &intent.call_id, &intent.tool_id),
            );
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
        let index = self.sessions;
        let open = OpenLine::from_object(obj).map_err(bad_field(no))?;
        if seq != 0 {
            return Err(malformed(
                no,
                format!("open line with seq {seq}; sessions start at 0"),
            ));
        }
        if prev_hash != LineHash::GENESIS {
            return Err(malformed(
                no,
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
            Ok(k) => {
                self.note_published(key_id, &k);
                Arc::new(k)
            }
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
        // A key outside the slice is trusted when a trusted key handed the chain to it
        // earlier in this file: in a pinned walk every key in force so far was trusted,
        // or the walk would have stopped.
        if let Some(trust) = &self.options.trust
            && !trust.iter().any(|anchor| anchor.matches(&open.public_key))
            && !self.handed_to.contains_key(&key_id)
        {
            return Err(Tampered::UntrustedKey {
                at,
                line: no,
                key_id,
            });
        }
        if let Some(prev) = &self.session {
            let continued = self.latest_handoff.filter(|(to, _, _)| *to == key_id);
            let change = match continued {
                // The same key as the whole previous session: nothing changed.
                _ if key_id == prev.key_id && key_id == prev.open_key_id => None,
                Some((_, from, handoff_at)) => Some(KeyChange {
                    at,
                    from,
                    to: key_id,
                    kind: KeyChangeKind::Continues { handoff_at },
                }),
                None if key_id != prev.key_id => Some(KeyChange {
                    at,
                    from: prev.key_id,
                    to: key_id,
                    kind: KeyChangeKind::Unannounced,
                }),
                None => None,
            };
            if let Some(change) = change {
                self.key_change(change);
            }
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
            open_key_id: key_id,
            anchored: false,
            in_flight: HashMap::new(),
            latest_time: None,
        });
        self.sessions += 1;
        self.signed(no, at, obj)
    }

    /// Keeps `key_id` as a published test key when its point is one plus a torsion
    /// point (its id is not the published key's, so the report's id match misses it).
    fn note_published(&mut self, key_id: KeyId, key: &VerifyingKey) {
        if crate::key::published_test_key_id(&key_id).is_none()
            && let Some(name) = crate::key::published_test_key_of(key)
            && !self.out.published.iter().any(|(k, _)| *k == key_id)
        {
            self.out.published.push((key_id, name));
        }
    }

    fn key_change(&mut self, change: KeyChange) {
        if self.out.key_changes.len() < MAX_LISTED_CALLS {
            self.out.key_changes.push(change);
        } else {
            self.out.key_changes_unlisted += 1;
        }
    }

    /// A `key_handoff` line whose signature is already queued under the key in force:
    /// checks the next key as an open line's key is checked, then makes it the key in
    /// force, so every later line of the session is checked under it (and a line the
    /// old key signs is `key_mismatch`).
    fn key_handoff(&mut self, no: u64, at: Position, handoff: &KeyHandoffLine) -> Result<(), Stop> {
        let bad = |problem| Tampered::BadKeyHandoff {
            at,
            line: no,
            problem,
        };
        let to = handoff.next_public_key.key_id();
        if handoff.next_key_id != to {
            return Err(bad(HandoffProblem::KeyIdMismatch));
        }
        let key = VerifyingKey::new(&handoff.next_public_key).map_err(|e| {
            bad(match e {
                crate::key::KeyError::SmallOrder => HandoffProblem::SmallOrder,
                _ => HandoffProblem::NotAPoint,
            })
        })?;
        let from = self
            .session
            .as_ref()
            .expect("a key_handoff line follows an open line")
            .key_id;
        if to == from {
            return Err(bad(HandoffProblem::SameKey));
        }
        self.note_published(to, &key);
        let session = self
            .session
            .as_mut()
            .expect("a key_handoff line follows an open line");
        session.key = Arc::new(key);
        session.key_id = to;
        if !self.out.keys.iter().any(|(k, _)| *k == to) {
            self.out.keys.push((to, no));
        }
        let listed_before = self.handed_to.insert(to, (from, at)).is_some();
        self.latest_handoff = Some((to, from, at));
        // Listed once per key: the first hand-off that made it trusted.
        if let Some(trust) = &self.options.trust
            && !listed_before
            && !trust
                .iter()
                .any(|anchor| anchor.matches(&handoff.next_public_key))
        {
            if self.out.trusted_through_handoff.len() < MAX_LISTED_CALLS {
                self.out
                    .trusted_through_handoff
                    .push(TrustedThroughHandoff {
                        key_id: to,
                        from,
                        at,
                    });
            } else {
                self.out.trusted_through_handoff_unlisted += 1;
            }
        }
        self.key_change(KeyChange {
            at,
            from,
            to,
            kind: KeyChangeKind::Handoff,
        });
        Ok(())
    }

    /// Notes a line whose `time` is before the latest of its session so far: the host's
    /// clock went back (a step, a resumed machine). Reported, never a verdict: the chain
    /// orders lines by `seq`, and the time is the host's claim (spec/SPEC.md §6.1).
    fn timed(&mut self, no: u64, at: Position, time: Option<String>) {
        let (Some(time), Some(session)) = (time, self.session.as_mut()) else {
            return;
        };
        match &session.latest_time {
            Some(latest) if time < *latest => {
                if self.out.time_backwards.len() < MAX_LISTED_CALLS {
                    let step = ClockStep {
                        at,
                        time,
                        latest: latest.clone(),
                    };
                    self.out.time_backwards.push((step, no));
                } else {
                    self.out.time_backwards_unlisted += 1;
                }
            }
            _ => session.latest_time = Some(time),
        }
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
        self.batch_bytes += message.len();
        self.batch.push(Job {
            line: no,
            at,
            key: Arc::clone(&session.key),
            message,
            signature,
        });
        self.out.last_signed = Some(at);
        if self.batch.len() == BATCH || self.batch_bytes >= BATCH_BYTES {
            self.flush();
        }
        Ok(())
    }
}

/// The input ends: the final session's calls are in flight, and it is unanchored
/// unless its last line is an anchor.
fn end(out: &mut Walked, session: Option<SessionState>) {
    if out.tampered.is_none()
        && let Some(s) = session
    {
        if !s.anchored {
            out.unanchored = Some(s.index);
        }
        out.in_flight.take_session(s.index, s.in_flight);
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
}
