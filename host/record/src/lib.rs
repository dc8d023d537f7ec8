//! The Agent Action Record format: canonical JSON, digests, line types, the chain
//! writer and the verifier walk.
//!
//! This crate is the format alone. It runs no tools and loads no plugins, so `aegis
//! verify` and any third-party auditor's tooling need nothing else. The normative
//! description is `spec/SPEC.md` in the repository; this crate is checked against the
//! committed vectors in `spec/vectors/`.
//!
//! # Guarantees
//! - One canonical byte form per line ([`json`]), hashed and signed exactly as the
//!   specification states ([`chain::seal`]).
//! - A writer that cannot fork a chain and never signs an intent ([`chain::Session`]),
//!   and never emits a line the verifier would call malformed: every member is bounded
//!   after escaping ([`bound`]) and the writer refuses what would still exceed the
//!   verifier's own limits.
//! - Every session's open line carries a fresh random nonce, so no two sessions share
//!   an open line hash or the call ids derived from it.
//! - A verifier with exactly three verdicts that is deterministic in its input
//!   ([`verify::verify`]).
//! - A session can hand its chain to a new key in a `key_handoff` line the old key signs
//!   ([`chain::Session::hand_off`]); the verifier checks every later line under the new
//!   key and passes a pin only through such a hand-off from a trusted key.
//!
//! # Non-guarantees
//! - A verdict of Verified without a trust slice proves internal consistency, not who
//!   wrote the file.
//! - Content after the last valid signature cannot be authenticated.
//! - Records are not confidential: decision axes and reasons are host-written free text
//!   that may name paths. Read a chain before publishing it.

pub mod approval;
pub mod bound;
pub mod chain;
pub mod class;
pub mod digest;
pub mod json;
pub mod key;
pub mod legacy;
pub mod line;
pub mod refusal;
pub mod text;
pub mod time;
pub mod verify;

pub use approval::Approver;
pub use chain::{Appended, LineSink, SealedLine, Session, VecSink, WriteError, seal};
pub use class::CallClass;
pub use digest::{
    ArgumentsDigest, ComponentDigest, DefinitionDigest, KeyId, LineHash, PolicySetHash,
    RequestDigest, ResponseDigest,
};
pub use key::{PublicKey, Signature, SigningKey};
pub use line::{
    ApprovalScope, BoundArguments, CapabilityGrant, CapabilityOutcome, DecisionAxes, DecisionLine,
    DecisionVerdict, ExecutionOutcome, FsAxis, FsScope, HttpRule, IntentLine, KeyHandoffLine,
    NetAxis, NetScope, OutcomeLine, PolicyOutcome, ToolChangeAction, ToolChangeKind,
    ToolChangeLine,
};
pub use verify::{Indeterminate, Options, Position, Report, Tampered, Trust, Verdict, verify};
