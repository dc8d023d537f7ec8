//! The chain rule: numbering, linking, signing and hashing lines under one lock.
//!
//! # Guarantees
//! - `seq` and `prev_hash` are assigned, the line signed and hashed, and its bytes handed
//!   to the sink inside one critical section, so two concurrent appends can never receive
//!   the same predecessor: the chain cannot fork.
//! - The tail advances only after the sink accepted the bytes. A refused append consumes
//!   its `seq` and leaves the tail where it was: a seq gap over an intact chain, which a
//!   verifier reports as Indeterminate, never a fork.
//! - An append returns only after the sink reports the line durable. If making it durable
//!   fails, the session is poisoned and refuses every later line, because a later line
//!   chained onto a lost one would read as tampering.
//! - Intent lines go through [`Session::append_unsigned`], which only accepts
//!   [`UnsignedBody`]; signed bodies go through [`Session::append`]. No path signs an
//!   intent, and no path leaves an outcome unsigned.
//! - A session writes its close line when closed or dropped (clean exit, panic unwinding).
//! - **Key hand-off.** [`Session::hand_off`] writes the `key_handoff` line under the key
//!   in force and switches to the next key inside the same critical section, after the
//!   sink accepted the line: every line before it is signed by the old key, every line
//!   after it (close included) by the new one, whatever other threads append.
//! - **No line the verifier would call malformed.** The line bodies bound every member
//!   after escaping ([`crate::bound`]), and the writer checks each sealed line against
//!   the verifier's own limits — [`MAX_LINE_BYTES`] and [`MAX_DEPTH`], the same
//!   constants — before it consumes a `seq`. A line over either (only possible through
//!   caller-supplied open-line extensions) is refused with [`WriteError::Unverifiable`]
//!   and nothing is written, so the chain stays intact. The other ways a line can be
//!   malformed (a float, `null`, a lone surrogate, a duplicate key, a missing or
//!   ill-typed member) cannot be expressed by the typed bodies and [`Object`].
//! - **Distinct sessions.** [`Session::open`] writes a fresh 128-bit random `nonce` into
//!   the open line, so two sessions never share an open line (nor its hash, from which a
//!   host may derive call ids) even with the same key, file state and extensions.
//!
//! That an intent cannot be signed is checked by the compiler:
//!
//! ```compile_fail
//! # use aegis_record::*;
//! fn sign_an_intent(session: &Session, intent: &IntentLine) {
//!     session.append(intent); // IntentLine is not a SignedBody
//! }
//! ```
//!
//! while the same call with an outcome compiles:
//!
//! ```
//! # use aegis_record::*;
//! fn sign_an_outcome(session: &Session, outcome: &OutcomeLine) {
//!     let _ = session.append(outcome);
//! }
//! ```
//!
//! # Non-guarantees
//! - Drop does not run on SIGKILL or power loss: such a session ends without a close and
//!   verifies as Indeterminate (unanchored tail), which is the honest answer.
//! - The sink decides what "durable" means; the writer trusts its `sync`.

use crate::digest::{LineHash, encode_hex};
use crate::json::{MAX_DEPTH, Object, SafeInt, Value};
use crate::key::SigningKey;
use crate::line::{KeyHandoffLine, LineBody, SCHEMA_VERSION, SignedBody, UnsignedBody};
use crate::verify::MAX_LINE_BYTES;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Where the writer puts bytes. A sink stores lines; it cannot number, link or sign them.
pub trait LineSink: Send + Sync {
    /// Appends one whole line (canonical bytes and a trailing `\n`). Must be all or
    /// nothing: a sink that may have written part of a line must fail every later append.
    ///
    /// # Errors
    /// When the bytes were not accepted.
    fn append(&self, line: &[u8]) -> std::io::Result<()>;

    /// Returns once everything appended before the call is durable.
    ///
    /// Once a sync has failed, every later `append` and `sync` must fail too. Another
    /// writer thread may already have chained a line onto one whose durability is now
    /// unknown; only a sink that stays failed keeps that line from being reported
    /// durable (Linux reports a failed writeback to one fsync and may let the next one
    /// succeed).
    ///
    /// # Errors
    /// When durability could not be established.
    fn sync(&self) -> std::io::Result<()>;
}

/// A line with its chain members assigned, ready to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedLine {
    /// The canonical bytes, without the trailing newline.
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`.
    pub hash: LineHash,
}

/// Why a line could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The body used a member the chain rule owns.
    #[error("member {0:?} is reserved for the chain rule")]
    ReservedMember(String),
    /// `seq` would leave the value space.
    #[error("seq exhausted the value space")]
    SeqExhausted,
    /// The sink refused the bytes; this `seq` is now a gap.
    #[error("the sink refused line seq {seq}: {source}")]
    Append {
        /// The seq that was consumed.
        seq: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// The sink could not make the line durable; the session refuses further lines.
    #[error("the sink could not make line seq {seq} durable: {source}")]
    Sync {
        /// The seq whose durability is unknown.
        seq: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// An earlier durability failure poisoned the session.
    #[error("the session stopped after an earlier durability failure")]
    Poisoned,
    /// The session was already closed.
    #[error("the session is closed")]
    Closed,
    /// The line would be outside what the verifier reads; nothing was written and no
    /// `seq` was consumed.
    #[error("a {line_type} line would be malformed to a verifier, so it was not written: {detail}")]
    Unverifiable {
        /// The line type refused.
        line_type: String,
        /// Which limit it exceeds.
        detail: String,
    },
    /// A key hand-off named the key already in force; nothing was written.
    #[error("a key hand-off must name a key other than the one in force")]
    SameKey,
    /// The operating system's random source failed, so no session nonce could be drawn.
    #[error("no session nonce: the system random source failed: {0}")]
    Random(String),
}

/// The bytes of a session nonce (written as 32 lowercase hex characters).
pub const NONCE_BYTES: usize = 16;

/// The members the chain rule assigns: a line body may not set them.
pub const CHAIN_MEMBERS: [&str; 6] = [
    "schema_version",
    "line_type",
    "seq",
    "prev_hash",
    "key_id",
    "signature",
];

/// Assigns the chain members to `body` and, with a signer, signs it.
///
/// The signing input is the canonical form with `key_id` present and `signature`
/// absent; the line hash covers the whole line, signature included, so stripping a
/// signature breaks the next line's `prev_hash`.
///
/// This is the low-level step the [`Session`] writer uses. It is public so that tools
/// can build lines no emitter produces (reserved types, test vectors); it enforces
/// nothing about which types must be signed.
///
/// # Errors
/// [`WriteError::ReservedMember`] when `body` already holds a chain member, and
/// [`WriteError::SeqExhausted`] when `seq` is outside the value space.
pub fn seal(
    line_type: &str,
    mut body: Object,
    seq: u64,
    prev_hash: LineHash,
    signer: Option<&SigningKey>,
) -> Result<SealedLine, WriteError> {
    if let Some(m) = CHAIN_MEMBERS.iter().find(|m| body.contains_key(m)) {
        return Err(WriteError::ReservedMember((*m).to_owned()));
    }
    let seq = SafeInt::new(seq).ok_or(WriteError::SeqExhausted)?;
    body.insert("schema_version", SCHEMA_VERSION);
    body.insert("line_type", line_type);
    body.insert("seq", seq);
    body.insert("prev_hash", prev_hash);
    if let Some(key) = signer {
        body.insert("key_id", key.key_id());
        let signature = key.sign(&body.to_canonical());
        body.insert("signature", Value::String(signature.to_hex()));
    }
    let bytes = body.to_canonical();
    Ok(SealedLine {
        hash: LineHash::of_line(&bytes),
        bytes,
    })
}

/// Where the last append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Its position in the session.
    pub seq: u64,
    /// Its line hash: the next line's `prev_hash`.
    pub line_hash: LineHash,
}

struct State {
    next_seq: u64,
    tail: LineHash,
    /// The key in force: the open line's, until a hand-off lands.
    key: SigningKey,
    closed: bool,
    poisoned: bool,
}

/// What a session writes as each line's `time` (spec/SPEC.md §6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The system clock ([`crate::time::now`]): what a host writes.
    System,
    /// No `time` member, as records before document version 1.3.
    Untimed,
    /// `start` microseconds after the Unix epoch, then `step` more each line: for
    /// reproducible vectors only.
    Stepping {
        /// The first line's time.
        start: u64,
        /// Added for each later line.
        step: u64,
    },
}

/// One writer's session: an open line, then lines appended under the chain rule, then a
/// close line.
pub struct Session {
    sink: Arc<dyn LineSink>,
    clock: Clock,
    state: Mutex<State>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("key_id", &self.key_id())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Writes an open line and starts a session.
    ///
    /// `prev_session_tail` must be the final line hash already in the sink, or `None`
    /// when the sink is empty. `extensions` are extra members for the open line (the
    /// host records provenance there); they are signed and hashed like the rest. The
    /// open line also carries a fresh random `nonce`, and every line the system clock's
    /// `time`.
    ///
    /// # Errors
    /// A reserved member in `extensions`, no randomness, an open line outside the
    /// verifier's limits, or the sink refusing or failing to sync.
    pub fn open(
        sink: Arc<dyn LineSink>,
        key: SigningKey,
        prev_session_tail: Option<LineHash>,
        extensions: Object,
    ) -> Result<Session, WriteError> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|e| WriteError::Random(e.to_string()))?;
        Session::open_with(
            sink,
            key,
            prev_session_tail,
            extensions,
            nonce,
            Clock::System,
        )
    }

    /// [`Session::open`] with a nonce the caller chose. For reproducible test vectors
    /// only: two sessions given the same nonce, key, tail and extensions write the same
    /// open line, and a host deriving call ids from it would repeat them.
    ///
    /// # Errors
    /// As [`Session::open`].
    pub fn open_with_nonce(
        sink: Arc<dyn LineSink>,
        key: SigningKey,
        prev_session_tail: Option<LineHash>,
        extensions: Object,
        nonce: [u8; NONCE_BYTES],
    ) -> Result<Session, WriteError> {
        Session::open_with(
            sink,
            key,
            prev_session_tail,
            extensions,
            nonce,
            Clock::Untimed,
        )
    }

    /// [`Session::open_with_nonce`] with the `time` of every line from `clock`. For
    /// reproducible test vectors only.
    ///
    /// # Errors
    /// As [`Session::open`].
    pub fn open_with(
        sink: Arc<dyn LineSink>,
        key: SigningKey,
        prev_session_tail: Option<LineHash>,
        extensions: Object,
        nonce: [u8; NONCE_BYTES],
        clock: Clock,
    ) -> Result<Session, WriteError> {
        let mut body = extensions;
        for own in ["public_key", "prev_session_tail", "nonce"] {
            if body.contains_key(own) {
                return Err(WriteError::ReservedMember(own.to_owned()));
            }
        }
        body.insert("public_key", key.public_key());
        body.insert_opt("prev_session_tail", prev_session_tail);
        body.insert("nonce", encode_hex(&nonce));
        let session = Session {
            sink,
            clock,
            state: Mutex::new(State {
                next_seq: 0,
                tail: LineHash::GENESIS,
                key,
                closed: false,
                poisoned: false,
            }),
        };
        if let Err(e) = session.write("open", body, true, None) {
            // No open line landed: there is no session to close.
            session.lock().closed = true;
            return Err(e);
        }
        Ok(session)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only updated after each step succeeds, so it is consistent even
        // if a panic interrupted a holder.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends one line; with `next_key`, the key in force becomes it once the line
    /// landed, under the same lock, so no line is signed by a key the chain has not yet
    /// handed to (nor by the old key after the hand-off landed).
    fn write(
        &self,
        line_type: &str,
        mut body: Object,
        signed: bool,
        next_key: Option<SigningKey>,
    ) -> Result<Appended, WriteError> {
        if body.contains_key("time") {
            return Err(WriteError::ReservedMember("time".to_owned()));
        }
        let appended = {
            let mut state = self.lock();
            if state.poisoned {
                return Err(WriteError::Poisoned);
            }
            if state.closed {
                return Err(WriteError::Closed);
            }
            // Checked under the lock: another thread's hand-off may have just landed.
            if next_key
                .as_ref()
                .is_some_and(|next| next.public_key() == state.key.public_key())
            {
                return Err(WriteError::SameKey);
            }
            let seq = state.next_seq;
            // Read under the lock, so times follow seq as far as the clock does.
            let time = match self.clock {
                Clock::System => Some(crate::time::now()),
                Clock::Untimed => None,
                Clock::Stepping { start, step } => Some(crate::time::format_micros(
                    start.saturating_add(step.saturating_mul(seq)),
                )),
            };
            body.insert_opt("time", time);
            let unverifiable = |detail: String| WriteError::Unverifiable {
                line_type: line_type.to_owned(),
                detail,
            };
            // The chain members add no nesting, so the body's depth is the line's.
            let depth = body.depth();
            if depth > MAX_DEPTH {
                return Err(unverifiable(format!(
                    "nesting depth {depth}, the verifier reads at most {MAX_DEPTH}"
                )));
            }
            let sealed = seal(
                line_type,
                body,
                seq,
                state.tail,
                signed.then_some(&state.key),
            )?;
            if sealed.bytes.len() > MAX_LINE_BYTES {
                return Err(unverifiable(format!(
                    "{} bytes, the verifier reads at most {MAX_LINE_BYTES}",
                    sealed.bytes.len()
                )));
            }
            state.next_seq += 1;
            let mut bytes = sealed.bytes;
            bytes.push(b'\n');
            self.sink
                .append(&bytes)
                .map_err(|source| WriteError::Append { seq, source })?;
            state.tail = sealed.hash;
            if let Some(next) = next_key {
                state.key = next;
            }
            Appended {
                seq,
                line_hash: sealed.hash,
            }
        };
        // Outside the lock, so a sink can make many writers' lines durable with one sync.
        if let Err(source) = self.sink.sync() {
            self.lock().poisoned = true;
            return Err(WriteError::Sync {
                seq: appended.seq,
                source,
            });
        }
        Ok(appended)
    }

    /// Appends a signed line (outcome, decision).
    ///
    /// # Errors
    /// See [`WriteError`].
    pub fn append<L: SignedBody>(&self, line: &L) -> Result<Appended, WriteError> {
        self.write(L::LINE_TYPE, line.to_object(), true, None)
    }

    /// Appends an unsigned line (intent). Returns once it is durable.
    ///
    /// # Errors
    /// See [`WriteError`].
    pub fn append_unsigned<L: UnsignedBody>(&self, line: &L) -> Result<Appended, WriteError> {
        self.write(L::LINE_TYPE, line.to_object(), false, None)
    }

    /// Hands the session to `next` (spec/SPEC.md §6.3 `key_handoff`): writes a
    /// `key_handoff` line signed by the key in force, naming `next`, and from the moment
    /// it lands signs every later line of the session, close included, with `next`.
    ///
    /// If the sink refuses the line, the session keeps its key (the verifier never saw
    /// the hand-off); if the line landed but could not be made durable, the session is
    /// stopped as after any failed sync.
    ///
    /// # Errors
    /// [`WriteError::SameKey`] when `next` is the key in force (nothing is written), and
    /// the errors of any append.
    pub fn hand_off(&self, next: SigningKey) -> Result<Appended, WriteError> {
        let body = KeyHandoffLine::to(next.public_key()).to_object();
        self.write(KeyHandoffLine::LINE_TYPE, body, true, Some(next))
    }

    /// Whether a failed sync stopped the session: it then refuses every later line (a
    /// host that can opens a new session in its place).
    pub fn is_stopped(&self) -> bool {
        self.lock().poisoned
    }

    /// The hash of the last line that landed.
    pub fn tail(&self) -> LineHash {
        self.lock().tail
    }

    /// The fingerprint of the key in force: the open line's, or the last hand-off's.
    pub fn key_id(&self) -> crate::digest::KeyId {
        self.lock().key.key_id()
    }

    /// Writes the close line and ends the session, returning the session's final hash.
    ///
    /// # Errors
    /// See [`WriteError`]; the session is over either way.
    pub fn close(self) -> Result<LineHash, WriteError> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<LineHash, WriteError> {
        let appended = self.write("close", Object::new(), true, None);
        self.lock().closed = true;
        appended.map(|a| a.line_hash)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let open = {
            let state = self.lock();
            !state.closed && !state.poisoned
        };
        if open {
            // Nothing to report to: a failure here leaves the session unanchored, which
            // the verifier reports as Indeterminate.
            let _ = self.close_inner();
        }
    }
}

/// A sink over a shared byte vector, for tests, vectors and volatile use. Its `sync` is a
/// no-op: nothing it holds survives the process.
#[derive(Clone, Debug, Default)]
pub struct VecSink {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl VecSink {
    /// An empty sink.
    pub fn new() -> VecSink {
        VecSink::default()
    }

    /// A copy of everything appended so far.
    pub fn contents(&self) -> Vec<u8> {
        self.bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl LineSink for VecSink {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        self.bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(line);
        Ok(())
    }

    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}
