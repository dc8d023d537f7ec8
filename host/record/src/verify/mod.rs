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
//!   approval_id, an intent line that carries a signature, or a `key_handoff` whose next
//!   key cannot take over (its key id does not match, it is not a valid point of large
//!   order, or it is the key already in force).
//! - **Who decided.** A decision whose `approver` does not stand behind its verdict
//!   ([`crate::approval::check`]: a key id that is not its key's, a signature that does
//!   not verify over the approval statement, the host approving) is Tampered
//!   (`bad_approver`). An approval wider than the scope its park stated earlier in the
//!   file is Tampered (`approval_widened`), and so is an outcome of a call that ran
//!   under an approval decided earlier in the file that was denied, names another tool,
//!   or was already used (`approval_misused`). With [`Options::approvers`], a decision
//!   not made by a pinned key (another key, a client's approval, no approver recorded)
//!   is Indeterminate (`untrusted_approver`), but for a denial the client or host
//!   settled; without, the report lists who decided.
//! - **Key hand-off.** After a `key_handoff` line, every signed line of its session must
//!   be signed by the key it names: a line signed by the old key is `key_mismatch`. Each
//!   signature job carries the key in force at its line. Key changes are reported —
//!   a hand-off, a later session continuing it, or a session opening with a new key no
//!   hand-off named (unannounced: allowed, as before, but reported) — and never change
//!   the verdict by themselves.
//! - **Trust through a hand-off.** In a pinned walk a key outside the slice is accepted
//!   only when a key already trusted handed the chain to it, earlier in the same file;
//!   the report names each such key and the key that handed to it.
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
//! - Signatures are checked in batches ([`crate::key::verify_batch`]) that pass only
//!   when strict verification accepts every signature in them, except with probability
//!   at most 2^-127 per batch over the verifier's own randomness; a batch that does not
//!   pass is checked line by line with strict, so the first finding is strict's.
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
//! - Approvals are cross-checked within one file and in file order only: a decision
//!   before its park, or a park, decision or resumed call in another file, is not
//!   judged; paths in scopes are compared as written, never resolved. An approver's
//!   signature proves a key, not a person, and names no record.
//! - A hand-off proves that the holder of the old key named the new one, not that the
//!   old key was still uncompromised when it did: whoever holds a trusted key can hand
//!   the chain to a key of their own. A key suspected of compromise has to leave the
//!   trust slice, and every file that opens under it fails the pin with it.
//!
//! # Limits
//! - A line longer than [`MAX_LINE_BYTES`] is malformed. Memory is otherwise flat in the
//!   file's length, except for one fixed-size entry per decided approval_id (a digest,
//!   the approved tool's digest and whether a call used it), one per park not yet decided
//!   (digests and its expiry, and its fs and net scope while at most 4096 bytes and all
//!   held at most 16 MiB), and per call in flight in the current session (a digest of its call_id, its seq and
//!   the first [`MAX_ID_BYTES`] of its call_id and tool_id), and one per key a
//!   `key_handoff` named (two key ids and a position).
//! - Each call list names at most [`MAX_LISTED_CALLS`] calls, then counts the rest; an id
//!   longer than [`MAX_ID_BYTES`] is shown cut, and marked so.
//! - A source that keeps producing well-formed lines, or blank lines after an unparsable
//!   one (which might yet be a torn final line), is read until it ends: nothing before
//!   the end decides such a verdict.
//!
//! # Layout
//! - `verdict`: the three verdicts and the classes of finding behind them.
//! - `report`: the report a walk produces, and its text and JSON renderings.
//! - `walk`: the per-line state machine that reads the file once.
//! - `follow`: the same walk fed one line at a time, as a growing file is read.
//! - `workers`: the threads that check signatures while the walk goes on.
//! - `trust`: the trust store an operator pins keys with.

mod follow;
mod report;
mod trust;
mod verdict;
mod walk;
mod workers;

pub use crate::json::quote;
pub use follow::{Follower, Step};
pub use report::{
    ApproversSeen, ClockStep, InFlight, KeyChange, KeyChangeKind, Report, TrustedThroughHandoff,
};
pub use trust::{TrustAnchor, TrustStoreError, parse_trust_store};
pub use verdict::{
    BoundaryProblem, HandoffProblem, Indeterminate, Misuse, Position, SignatureProblem, Tampered,
    Trust, Unpinned, Verdict, Widening,
};

use std::io::Read;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use walk::Walk;
use workers::{Batch, MAX_THREADS, Shared, worker};

/// The longest line the verifier reads. The format's own lines are well under 64 KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How many calls each call list of a report names (`in_flight`, `unfinished`); the
/// rest are counted.
pub const MAX_LISTED_CALLS: usize = 64;

/// How many bytes of a `call_id` or `tool_id` the walk keeps for the report (cut at a
/// character boundary). Calls are matched by a digest of the whole `call_id`.
pub const MAX_ID_BYTES: usize = 64;

/// What the caller supplies.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Keys the caller anchored out of band, each as its public key or its key id
    /// ([`TrustAnchor`]). `None` is an unpinned walk; `Some` of an empty slice is a pin
    /// nothing satisfies.
    pub trust: Option<Vec<TrustAnchor>>,
    /// The approvers the caller trusts, as [`TrustAnchor`]s like `trust`. `None` judges
    /// no decision by its approver (the report lists the approvers seen, unpinned);
    /// `Some` makes every decision not made by one of these keys Indeterminate
    /// (`untrusted_approver`), except a denial the client or the host settled.
    pub approvers: Option<Vec<TrustAnchor>>,
    /// Signature-checking threads; 0 means one per available core (at most 64).
    pub threads: usize,
}

/// Verifies the chain file read from `input`.
///
/// # Errors
/// Only when reading fails; everything about the content is in the [`Report`].
pub fn verify(input: impl Read, options: &Options) -> std::io::Result<Report> {
    walk_with(input, options, true)
}

/// [`verify`] with every signature checked by strict verification alone, line by line,
/// never as a batch: the reference the batch path is tested and measured against. Its
/// report is the same as [`verify`]'s for the same bytes.
///
/// # Errors
/// Only when reading fails.
pub fn verify_line_by_line(input: impl Read, options: &Options) -> std::io::Result<Report> {
    walk_with(input, options, false)
}

fn walk_with(input: impl Read, options: &Options, batches: bool) -> std::io::Result<Report> {
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
    .min(MAX_THREADS);
    let shared = Arc::new(Shared {
        first_failure: Mutex::new(None),
        earliest_line: AtomicU64::new(u64::MAX),
        batches,
    });
    let (tx, rx) = sync_channel::<Batch>(threads * 2);
    let rx = Mutex::new(rx);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| worker(&rx, &shared));
        }
        let mut walk = Walk::new(options, Some(tx), Arc::clone(&shared));
        let result = walk.run(input);
        let walked = walk.finish();
        // The sender is dropped inside finish(), so workers drain and stop.
        result.map(|()| walked)
    })
    .map(|walked| walked.into_report(&shared))
}
