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
    /// an abandoned call, a ceiling it cannot hold a relayed server to.
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

/// A call that did not run or was stopped: the station, the reason for a person, and
/// the call's id on the record when it was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Where it was stopped.
    pub station: Station,
    /// Why, in words a model can act on.
    pub reason: String,
    /// The record's call id, when the refusal was recorded.
    pub call_id: Option<String>,
}

impl Refusal {
    /// A refusal not (yet) on the record.
    pub fn new(station: Station, reason: impl Into<String>) -> Refusal {
        Refusal {
            station,
            reason: reason.into(),
            call_id: None,
        }
    }

    /// The same, placed on the record as `call_id`.
    #[must_use]
    pub fn recorded(mut self, call_id: impl Into<String>) -> Refusal {
        self.call_id = Some(call_id.into());
        self
    }

    /// The text a model reads: who stopped the call, why, and its id on the record.
    pub fn text(&self) -> String {
        let call_id = self.call_id.as_deref().unwrap_or("none recorded");
        match self.station {
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

    /// The facts under [`META_KEY`]: `{"call_id": …, "reason": …, "station": …}`,
    /// `call_id` absent when the refusal is not on the record.
    pub fn meta(&self) -> Object {
        let mut o = Object::new();
        if let Some(id) = &self.call_id {
            o.insert("call_id", id.as_str());
        }
        o.insert("reason", self.reason.as_str());
        o.insert("station", self.station.name());
        o
    }

    /// The whole MCP tool result, as canonical JSON: one text block ([`Refusal::text`]),
    /// `isError: true`, and [`Refusal::meta`] under [`META_KEY`].
    pub fn tool_result(&self) -> Object {
        let mut block = Object::new();
        block.insert("text", self.text());
        block.insert("type", "text");
        let mut meta = Object::new();
        meta.insert(META_KEY, Value::Object(self.meta()));
        let mut result = Object::new();
        result.insert("_meta", Value::Object(meta));
        result.insert("content", Value::Array(vec![Value::Object(block)]));
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
        let r = Refusal::new(Station::Pins, "tool \"x\" changed").recorded("call-1-2");
        let text = String::from_utf8(Value::Object(r.tool_result()).to_canonical()).unwrap();
        assert_eq!(
            text,
            r#"{"_meta":{"dev.aegis/refusal":{"call_id":"call-1-2","reason":"tool \"x\" changed","station":"pins"}},"content":[{"text":"Aegis refused this tool call at the pins station: tool \"x\" changed (call id: call-1-2)","type":"text"}],"isError":true}"#
        );
        let unrecorded = Refusal::new(Station::Relay, "why");
        assert_eq!(unrecorded.meta().get("call_id"), None);
        assert!(unrecorded.text().ends_with("(call id: none recorded)"));
        let stopped = Refusal::new(Station::Sandbox, "trapped: unreachable");
        assert!(
            stopped
                .text()
                .starts_with("Aegis stopped this tool call in the sandbox: ")
        );
    }
}
