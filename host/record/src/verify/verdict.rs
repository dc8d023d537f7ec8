//! The verdict model: three verdicts, and the classes of finding behind each.

use super::quote;
use crate::approval::ApproverProblem;
use crate::digest::{KeyId, LineHash};
use std::fmt;

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

/// What is wrong with a `key_handoff` line's own members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandoffProblem {
    /// `next_key_id` is not the key id of `next_public_key`.
    KeyIdMismatch,
    /// `next_public_key` is not a curve point.
    NotAPoint,
    /// `next_public_key` has small order.
    SmallOrder,
    /// `next_public_key` is the key already in force: a hand-off that hands nothing.
    SameKey,
}

impl fmt::Display for HandoffProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandoffProblem::KeyIdMismatch => "next_key_id is not the key id of next_public_key",
            HandoffProblem::NotAPoint => "next_public_key is not a valid ed25519 point",
            HandoffProblem::SmallOrder => "next_public_key has small order",
            HandoffProblem::SameKey => "next_public_key is the key already in force",
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
    /// `key_id` is not the key in force in the session: the open line's, or the one the
    /// session's last `key_handoff` named.
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
    /// A `key_handoff` line names a next key that cannot take over the session.
    BadKeyHandoff {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// What is wrong.
        problem: HandoffProblem,
    },
    /// A decision's `approver` does not stand behind its verdict
    /// ([`crate::approval::check`]).
    BadApprover {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The approval.
        approval_id: String,
        /// What is wrong.
        problem: ApproverProblem,
    },
    /// An outcome ran under an approval that does not allow it.
    ApprovalMisused {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The outcome's `decision_axes.approval_ref`.
        approval_id: String,
        /// How.
        misuse: Misuse,
    },
    /// An approval grants more than its park stated an approval would.
    ApprovalWidened {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The approval.
        approval_id: String,
        /// The first member found wider.
        widening: Widening,
    },
}

/// How an outcome that ran misused the approval it names.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misuse {
    /// The approval was denied earlier in the file.
    Denied,
    /// The approved scope is for another tool.
    OtherTool {
        /// The outcome's `tool_id`.
        tool_id: String,
    },
    /// An earlier outcome already ran under the approval: one use per approval.
    SecondUse,
}

impl fmt::Display for Misuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misuse::Denied => f.write_str("the approval was denied earlier in the file"),
            Misuse::OtherTool { tool_id } => write!(
                f,
                "the call ran tool_id {}, not the tool the approval names",
                quote(tool_id)
            ),
            Misuse::SecondUse => f.write_str("an earlier call already ran under the approval"),
        }
    }
}

/// Which member of an approved scope is wider than the park's stated scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Widening {
    /// Another tool.
    Tool,
    /// Other arguments, or any arguments where the park named a digest.
    ArgumentsDigest,
    /// Filesystem paths outside the park's.
    Fs,
    /// Network destinations, ports or methods outside the park's.
    Net,
    /// A later expiry, or none where the park named one.
    ExpiresAt,
}

impl fmt::Display for Widening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Widening::Tool => "it approves another tool than the park's",
            Widening::ArgumentsDigest => "its arguments_digest is not the park's arguments_digest",
            Widening::Fs => "it grants filesystem paths outside the park's scope",
            Widening::Net => "it grants network destinations outside the park's scope",
            Widening::ExpiresAt => "it expires later than the park's scope",
        })
    }
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
            Tampered::BadKeyHandoff { .. } => "bad_key_handoff",
            Tampered::BadApprover { .. } => "bad_approver",
            Tampered::ApprovalMisused { .. } => "approval_misused",
            Tampered::ApprovalWidened { .. } => "approval_widened",
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
            | Tampered::DuplicateDecision { line, .. }
            | Tampered::BadKeyHandoff { line, .. }
            | Tampered::BadApprover { line, .. }
            | Tampered::ApprovalMisused { line, .. }
            | Tampered::ApprovalWidened { line, .. } => *line,
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
            Tampered::BadKeyHandoff { at, line, problem } => {
                write!(f, "bad key hand-off at {at}, line {line}: {problem}")
            }
            Tampered::BadApprover {
                at,
                line,
                approval_id,
                problem,
            } => write!(
                f,
                "bad approver at {at}, line {line} for approval_id {}: {problem}",
                quote(approval_id)
            ),
            Tampered::ApprovalMisused {
                at,
                line,
                approval_id,
                misuse,
            } => write!(
                f,
                "approval misused at {at}, line {line} under approval_ref {}: {misuse}",
                quote(approval_id)
            ),
            Tampered::ApprovalWidened {
                at,
                line,
                approval_id,
                widening,
            } => write!(
                f,
                "approval widened at {at}, line {line} for approval_id {}: {widening}",
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
    /// Approvers were pinned, and a decision was not made by a pinned approver's key.
    UntrustedApprover {
        /// Where.
        at: Position,
        /// File line.
        line: u64,
        /// The approval.
        approval_id: String,
        /// Who decided instead.
        approver: Unpinned,
    },
}

/// Who decided a decision that pinned approvers do not cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unpinned {
    /// A key outside the pinned approvers.
    Key(KeyId),
    /// The MCP client's user, through the client (an approval; not a signature).
    Client,
    /// No approver is recorded (a line written before approvers were).
    Unattributed,
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
            Indeterminate::UntrustedApprover { .. } => "untrusted_approver",
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
            Indeterminate::UntrustedApprover {
                at,
                line,
                approval_id,
                approver,
            } => {
                write!(
                    f,
                    "untrusted approver at {at}, line {line} for approval_id {}: ",
                    quote(approval_id)
                )?;
                match approver {
                    Unpinned::Key(k) => {
                        write!(f, "approver key_id {k} is not among the pinned approvers")
                    }
                    Unpinned::Client => {
                        f.write_str("approved through the client, not by a pinned approver's key")
                    }
                    Unpinned::Unattributed => {
                        f.write_str("no approver is recorded, so no pinned approver decided")
                    }
                }
            }
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

#[cfg(test)]
mod tests {
    use super::quote;

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
