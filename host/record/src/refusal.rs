//! A call that did not run, or ran and was stopped, as every front end states it:
//! which station stopped it, why, and where it is on the record. `aegis run`, `aegis
//! wrap` and `aegis gateway` render this one value, and an MCP client receives it in one
//! wire format ([`Refusal::tool_result`]: [`Refusal::text`] as a tool result with
//! `isError: true`, the same facts under [`META_KEY`] in its `_meta`), so a model reads
//! the same words whichever front end it talks to. spec/SPEC.md §9.7 documents it.
//!
//! It lives here, beside the record's lines, because the relay core (built without the
//! runtime, for fuzzing) renders it too; `aegis_runtime::refusal` adds what a recorded
//! call says about it.

use crate::json::{Object, Value};

/// The namespaced `_meta` key carrying a refusal's facts in an MCP tool result.
pub const META_KEY: &str = "dev.aegis/refusal";

/// Where a call was stopped: one of the four stations, or a front end's own check
/// before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Station {
    /// The policy station: a deny, a rate limit, a park for approval.
    Policy,
    /// The capability station: no manifest, or a grant policy could not narrow.
    Capability,
    /// The sandbox: a trap, a ceiling, a tool that ran and failed.
    Sandbox,
    /// The record: an intent or an outcome that could not be written.
    Audit,
    /// The MCP relay (`wrap`): a request it could not pass on as it came (ambiguous
    /// params, an unreadable id, a listing that never ends).
    Relay,
    /// Tool pins (`wrap`): a tool whose definition changed, or is not pinned yet.
    Pins,
    /// The gateway's own checks: arguments against the tool's schema, its capacity, a
    /// shutdown, output that is not what the manifest declares.
    Gateway,
    /// The host before any station: arguments that read two ways, a caller's refusal,
    /// an abandoned call, a ceiling it cannot hold a relayed server to, a call that is
    /// not what its approval approved.
    Host,
}

impl Station {
    /// The station's name on the wire and in messages (`policy`, `pins`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Station::Policy => "policy",
            Station::Capability => "capability",
            Station::Sandbox => "sandbox",
            Station::Audit => "audit",
            Station::Relay => "relay",
            Station::Pins => "pins",
            Station::Gateway => "gateway",
            Station::Host => "host",
        }
    }
}

impl std::fmt::Display for Station {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a call was stopped, as a token a reader matches on instead of the reason's
/// words. Each cause belongs to one [`Station`] ([`Cause::station`]). The record states
/// the causes of calls that did not run (an outcome's `stop`, spec/SPEC.md §6.3); the
/// sandbox's endings (`Trapped`, `Exceeded`, `NoOutput`) and `OutputWithheld` have
/// their own record (`execution`) and are causes only in what a client receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cause {
    /// Policy: a rule, or the default, refused.
    Denied,
    /// Policy: a rate limit refused.
    RateLimited,
    /// Policy: parked for a person's approval.
    PendingApproval,
    /// Policy: the park was settled by a denial (an approver's, or the host's own when
    /// it would not honour a decision). The record holds it as the park's `decision`
    /// line; a cause only in what a client receives.
    ApprovalDenied,
    /// Policy: nobody decided the park before it expired (the host's denial on the
    /// record); a cause only in what a client receives.
    ApprovalExpired,
    /// Policy: the station failed, or answered what the host cannot read; refused.
    StationFailed,
    /// Capability: no manifest for the tool.
    Unregistered,
    /// Capability: the manifest does not declare the capability named.
    Undeclared,
    /// Capability: the grant would carry an axis the policy was not asked about.
    Unasked,
    /// Sandbox: the host could not start the tool (a root or its manifest gone, a
    /// component unopenable or no longer the one registered).
    NotStarted,
    /// Sandbox: a running host handler gave up when its context refused an effect
    /// outside the grant.
    EffectRefused,
    /// Sandbox: the call was abandoned after the stations allowed it.
    Abandoned,
    /// Sandbox: the tool trapped, failed or was cancelled.
    Trapped,
    /// Sandbox: a ceiling stopped the tool.
    Exceeded,
    /// Sandbox: the tool ran and returned no output.
    NoOutput,
    /// Audit: the call's intent or outcome could not be written.
    NotRecorded,
    /// Relay: a request that does not read one way only, or names no tool it can read.
    UnreadableRequest,
    /// Relay: a request id already in use (reused, or cancelled and not yet answered).
    IdInUse,
    /// Pins: the tool's definition is not the pinned one, or the tool is not pinned.
    PinMismatch,
    /// Pins: the call waited for a listing of the server's tools that never completed.
    Unlisted,
    /// Gateway: arguments that do not match the tool's schema or delivery.
    InvalidArguments,
    /// Gateway: as many calls running as the sandbox pool holds.
    AtCapacity,
    /// Gateway: the tool succeeded but its output is not what its manifest declares.
    OutputWithheld,
    /// Host: the call's arguments do not read one way only; no station was asked.
    AmbiguousArguments,
    /// Host: the call was abandoned before any station decided.
    AbandonedBeforeStations,
    /// Host: the policy set ceilings the host cannot hold a relayed server to.
    UnenforceableLimits,
    /// Host: a call resumed under an approval is not what was approved (another tool,
    /// other arguments, an expired approval, or a grant outside the approved scope).
    ApprovalMismatch,
    /// A cause this reader does not know (a later version's token), read from a
    /// record; never written.
    Unknown,
}

impl Cause {
    /// Every cause this version writes, for tests and documentation.
    pub const ALL: [Cause; 27] = [
        Cause::Denied,
        Cause::RateLimited,
        Cause::PendingApproval,
        Cause::ApprovalDenied,
        Cause::ApprovalExpired,
        Cause::StationFailed,
        Cause::Unregistered,
        Cause::Undeclared,
        Cause::Unasked,
        Cause::NotStarted,
        Cause::EffectRefused,
        Cause::Abandoned,
        Cause::Trapped,
        Cause::Exceeded,
        Cause::NoOutput,
        Cause::NotRecorded,
        Cause::UnreadableRequest,
        Cause::IdInUse,
        Cause::PinMismatch,
        Cause::Unlisted,
        Cause::InvalidArguments,
        Cause::AtCapacity,
        Cause::OutputWithheld,
        Cause::AmbiguousArguments,
        Cause::AbandonedBeforeStations,
        Cause::UnenforceableLimits,
        Cause::ApprovalMismatch,
    ];

    /// The station this cause belongs to.
    pub const fn station(self) -> Station {
        use Cause::*;
        match self {
            Denied | RateLimited | PendingApproval | ApprovalDenied | ApprovalExpired
            | StationFailed => Station::Policy,
            Unregistered | Undeclared | Unasked => Station::Capability,
            NotStarted | EffectRefused | Abandoned | Trapped | Exceeded | NoOutput => {
                Station::Sandbox
            }
            NotRecorded => Station::Audit,
            UnreadableRequest | IdInUse => Station::Relay,
            PinMismatch | Unlisted => Station::Pins,
            InvalidArguments | AtCapacity | OutputWithheld => Station::Gateway,
            AmbiguousArguments
            | AbandonedBeforeStations
            | UnenforceableLimits
            | ApprovalMismatch
            | Unknown => Station::Host,
        }
    }

    /// The token on the record and on the wire (`denied`, `pin_mismatch`, …).
    pub const fn token(self) -> &'static str {
        use Cause::*;
        match self {
            Denied => "denied",
            RateLimited => "rate_limited",
            PendingApproval => "pending_approval",
            ApprovalDenied => "approval_denied",
            ApprovalExpired => "approval_expired",
            StationFailed => "station_failed",
            Unregistered => "unregistered",
            Undeclared => "undeclared",
            Unasked => "unasked",
            NotStarted => "not_started",
            EffectRefused => "effect_refused",
            Abandoned => "abandoned",
            Trapped => "trapped",
            Exceeded => "resource_exceeded",
            NoOutput => "no_output",
            NotRecorded => "not_recorded",
            UnreadableRequest => "unreadable_request",
            IdInUse => "id_in_use",
            PinMismatch => "pin_mismatch",
            Unlisted => "unlisted",
            InvalidArguments => "invalid_arguments",
            AtCapacity => "at_capacity",
            OutputWithheld => "output_withheld",
            AmbiguousArguments => "ambiguous_arguments",
            AbandonedBeforeStations => "abandoned_before_stations",
            UnenforceableLimits => "unenforceable_limits",
            ApprovalMismatch => "approval_mismatch",
            Unknown => "unknown",
        }
    }

    /// The cause a record's `station` and `cause` tokens name; [`Cause::Unknown`] for a
    /// pair this version does not write (a later version's token, or a station that does
    /// not own the cause).
    pub fn of_tokens(station: &str, cause: &str) -> Cause {
        Cause::ALL
            .into_iter()
            .find(|c| c.token() == cause && c.station().name() == station)
            .unwrap_or(Cause::Unknown)
    }

    /// True when no station was asked: the call stopped at a front end's check or the
    /// host's, before the policy station decided anything.
    pub const fn before_the_stations(self) -> bool {
        matches!(
            self.station(),
            Station::Relay | Station::Pins | Station::Gateway
        ) && !matches!(self, Cause::OutputWithheld)
            || matches!(
                self,
                Cause::AmbiguousArguments
                    | Cause::AbandonedBeforeStations
                    | Cause::ApprovalMismatch
            )
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token())
    }
}

/// A call that did not run or was stopped: the cause (and so the station), the reason
/// for a person, and the call's id on the record when it was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What stopped it; [`Refusal::station`] is its station.
    pub cause: Cause,
    /// Why, in words a model can act on.
    pub reason: String,
    /// The record's call id, when the refusal was recorded.
    pub call_id: Option<String>,
    /// The tail of what the tool wrote on stderr before it failed, escaped: shown to
    /// the client after the host's words, as the tool's (untrusted) output.
    pub tool_stderr: Option<String>,
}

/// The most of a failed tool's stderr a client is shown: its last bytes, where the
/// reason usually is (`No such file or directory`).
pub const STDERR_TAIL: usize = 2048;

impl Refusal {
    /// A refusal not (yet) on the record.
    pub fn new(cause: Cause, reason: impl Into<String>) -> Refusal {
        Refusal {
            cause,
            reason: reason.into(),
            call_id: None,
            tool_stderr: None,
        }
    }

    /// Where it was stopped.
    pub const fn station(&self) -> Station {
        self.cause.station()
    }

    /// The same, placed on the record as `call_id`.
    #[must_use]
    pub fn recorded(mut self, call_id: impl Into<String>) -> Refusal {
        self.call_id = Some(call_id.into());
        self
    }

    /// The same, with the tail of the tool's stderr (at most [`STDERR_TAIL`] bytes, its
    /// control characters escaped but its lines kept). Nothing is added for a tool that
    /// wrote nothing, or for a call the host did not run.
    #[must_use]
    pub fn with_tool_stderr(mut self, stderr: &[u8]) -> Refusal {
        let from = stderr.len().saturating_sub(STDERR_TAIL);
        let tail = String::from_utf8_lossy(&stderr[from..]);
        // A cut mid-character leaves a replacement character at the start: drop it.
        let tail = tail.trim_start_matches('\u{fffd}').trim_end();
        if !tail.is_empty() && self.station() == Station::Sandbox {
            self.tool_stderr = Some(crate::text::escape_keeping_lines(tail).into_owned());
        }
        self
    }

    /// The second text block a client is shown when the tool said why it failed.
    pub fn tool_stderr_text(&self) -> Option<String> {
        self.tool_stderr.as_ref().map(|tail| {
            format!("What the tool wrote on stderr (its last lines; tool output, not Aegis's words):\n{tail}")
        })
    }

    /// The text a model reads: who stopped the call, why, and its id on the record.
    pub fn text(&self) -> String {
        let call_id = self.call_id.as_deref().unwrap_or("none recorded");
        match self.station() {
            Station::Sandbox => format!(
                "Aegis stopped this tool call in the sandbox: {} (call id: {call_id})",
                self.reason
            ),
            station => format!(
                "Aegis refused this tool call at the {station} station: {} (call id: {call_id})",
                self.reason
            ),
        }
    }

    /// The facts under [`META_KEY`]: `{"call_id": …, "cause": …, "reason": …,
    /// "station": …}`, `call_id` absent when the refusal is not on the record.
    pub fn meta(&self) -> Object {
        let mut o = Object::new();
        if let Some(id) = &self.call_id {
            o.insert("call_id", id.as_str());
        }
        o.insert("cause", self.cause.token());
        o.insert("reason", self.reason.as_str());
        o.insert("station", self.station().name());
        o
    }

    /// The whole MCP tool result, as canonical JSON: one text block ([`Refusal::text`]),
    /// `isError: true`, and [`Refusal::meta`] under [`META_KEY`].
    pub fn tool_result(&self) -> Object {
        let block = |text: String| {
            let mut block = Object::new();
            block.insert("text", text);
            block.insert("type", "text");
            Value::Object(block)
        };
        let mut content = vec![block(self.text())];
        content.extend(self.tool_stderr_text().map(block));
        let mut meta = Object::new();
        meta.insert(META_KEY, Value::Object(self.meta()));
        let mut result = Object::new();
        result.insert("_meta", Value::Object(meta));
        result.insert("content", Value::Array(content));
        result.insert("isError", true);
        result
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire format is one canonical object; its text and its `_meta` say the same.
    #[test]
    fn a_refusal_renders_one_result() {
        let r = Refusal::new(Cause::PinMismatch, "tool \"x\" changed").recorded("call-1-2");
        let text = String::from_utf8(Value::Object(r.tool_result()).to_canonical()).unwrap();
        assert_eq!(
            text,
            r#"{"_meta":{"dev.aegis/refusal":{"call_id":"call-1-2","cause":"pin_mismatch","reason":"tool \"x\" changed","station":"pins"}},"content":[{"text":"Aegis refused this tool call at the pins station: tool \"x\" changed (call id: call-1-2)","type":"text"}],"isError":true}"#
        );
        let unrecorded = Refusal::new(Cause::IdInUse, "why");
        assert_eq!(unrecorded.meta().get("call_id"), None);
        assert!(unrecorded.text().ends_with("(call id: none recorded)"));
        let stopped = Refusal::new(Cause::Trapped, "trapped: unreachable");
        assert!(
            stopped
                .text()
                .starts_with("Aegis stopped this tool call in the sandbox: ")
        );
    }

    /// A failed tool's stderr comes after the host's words, its tail only, escaped; a
    /// refusal before the tool ran carries none.
    #[test]
    fn a_failed_tools_stderr_tail_is_shown_escaped() {
        let mut stderr = "x".repeat(5000).into_bytes();
        stderr.extend_from_slice("\u{e9}read-file: /nope: No such file\x1b[31m\n".as_bytes());
        let r = Refusal::new(Cause::Trapped, "trapped: the tool exited with status 1")
            .with_tool_stderr(&stderr);
        let tail = r.tool_stderr.as_deref().unwrap();
        assert!(tail.len() <= STDERR_TAIL + 8, "{}", tail.len());
        assert!(tail.ends_with("No such file\\u{1b}[31m"), "{tail}");
        let Value::Array(content) = r.tool_result().get("content").unwrap().clone() else {
            panic!("content is an array")
        };
        assert_eq!(content.len(), 2);
        let refused = Refusal::new(Cause::Denied, "no").with_tool_stderr(b"anything");
        assert_eq!(refused.tool_stderr, None);
        assert_eq!(
            Refusal::new(Cause::Trapped, "t")
                .with_tool_stderr(b" \n")
                .tool_stderr,
            None
        );
    }

    /// Every cause reads back from its tokens; a pair no cause owns reads as unknown.
    #[test]
    fn causes_read_back_from_their_tokens() {
        let mut tokens = std::collections::HashSet::new();
        for cause in Cause::ALL {
            assert_eq!(
                Cause::of_tokens(cause.station().name(), cause.token()),
                cause
            );
            assert!(tokens.insert(cause.token()), "{cause} twice");
        }
        assert_eq!(Cause::of_tokens("pins", "denied"), Cause::Unknown);
        assert_eq!(Cause::of_tokens("policy", "vetoed"), Cause::Unknown);
        assert_eq!(Cause::of_tokens("host", "unknown"), Cause::Unknown);
        let before: Vec<_> = Cause::ALL
            .into_iter()
            .filter(|c| c.before_the_stations())
            .collect();
        assert_eq!(
            before,
            [
                Cause::UnreadableRequest,
                Cause::IdInUse,
                Cause::PinMismatch,
                Cause::Unlisted,
                Cause::InvalidArguments,
                Cause::AtCapacity,
                Cause::AmbiguousArguments,
                Cause::AbandonedBeforeStations,
                Cause::ApprovalMismatch,
            ]
        );
    }
}
