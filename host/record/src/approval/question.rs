//! The question a front end asks an MCP client's user about a parked call, and how the
//! answer is read: one shape for `aegis wrap` (the relay writes it itself) and `aegis
//! gateway` (sent through rmcp), so a client sees the same form from either.
//!
//! The question is an `elicitation/create` in form mode with one boolean field,
//! [`APPROVE_FIELD`]; its message names the approval id, the tool and the arguments
//! (escaped, each cut to [`MAX_SHOWN`] bytes), and says the answer is recorded as the
//! client's (`via: client`), not as a signed approval.
//!
//! # Guarantees
//! - What the user is shown is escaped ([`crate::text::escape`]): a tool name or an
//!   argument cannot draw lines of its own in the question.
//! - Only `accept` with a boolean [`APPROVE_FIELD`] approves or denies by that value;
//!   `decline` and `cancel` deny; any other answer decides nothing ([`answer`]).
//!
//! # Non-guarantees
//! - An answer says what the client sent, not that a person read the question.

use crate::json::write_string;

/// The most bytes of a parked call's tool name, and of its arguments, the client's user
/// is shown; longer ones are cut, marked with `…`.
pub const MAX_SHOWN: usize = 1000;

/// The most bytes of a client's `clientInfo` name and version kept for the record.
pub const MAX_CLIENT_NAME: usize = 200;

/// The question's one field: `true` runs the parked call, `false` refuses it.
pub const APPROVE_FIELD: &str = "approve";

/// The first protocol revision that names form mode (`"mode": "form"`); before it,
/// form is the only mode and is not named.
pub const FORM_MODE_NAMED_FROM: &str = "2025-11-25";

/// The first protocol revision with multi round-trip requests: a server answers a
/// request `input_required` with the question, and the client retries it with the
/// answer (no server-initiated requests, no `initialize`).
pub const INPUT_REQUIRED_FROM: &str = "2026-07-28";

/// The key of the one input request (the question) in an `input_required` answer, and
/// of the client's answer to it in the retry's `inputResponses`.
pub const INPUT_KEY: &str = "approval";

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The message the client's user reads about the call parked as `approval_id`.
pub fn message(approval_id: &str, tool: &str, arguments: &str) -> String {
    format!(
        "Aegis parked a tool call for approval ({approval_id}).\nTool: {}\nArguments: {}\n\
         Run this call? Your answer is recorded as the client's, not as a signed approval.",
        bounded(&crate::text::escape(tool), MAX_SHOWN),
        bounded(&crate::text::escape(arguments), MAX_SHOWN),
    )
}

/// The `params` of the `elicitation/create` asking about the call parked as
/// `approval_id` (`tool`, its `arguments` as JSON text), as JSON text. `protocol` is the
/// revision the client asked for: from [`FORM_MODE_NAMED_FROM`] on, the mode is named.
pub fn elicitation_params(
    approval_id: &str,
    tool: &str,
    arguments: &str,
    protocol: Option<&str>,
) -> Vec<u8> {
    let mut out = b"{".to_vec();
    if protocol.is_some_and(|v| v >= FORM_MODE_NAMED_FROM) {
        out.extend_from_slice(br#""mode":"form","#);
    }
    out.extend_from_slice(br#""message":"#);
    write_string(&message(approval_id, tool, arguments), &mut out);
    out.extend_from_slice(br#","requestedSchema":{"type":"object","properties":{"#);
    write_string(APPROVE_FIELD, &mut out);
    out.extend_from_slice(
        br#":{"type":"boolean","title":"Run this call?","description":"Yes runs the parked tool call; no refuses it.","default":false}},"required":["#,
    );
    write_string(APPROVE_FIELD, &mut out);
    out.extend_from_slice(b"]}}");
    out
}

/// What a client's answer decides: `Some(true)` approves, `Some(false)` denies, `None`
/// decides nothing (the approvals queue still can). `action` is the answer's `action`;
/// `approve` its content's [`APPROVE_FIELD`] when that is a boolean.
pub fn answer(action: &str, approve: Option<bool>) -> Option<bool> {
    match action {
        "accept" => approve,
        "decline" | "cancel" => Some(false),
        _ => None,
    }
}

/// The client as the record names it: `clientInfo`'s name and version, escaped and cut
/// to [`MAX_CLIENT_NAME`].
pub fn client_name(name: &str, version: Option<&str>) -> String {
    let full = match version {
        Some(version) => format!("{name} {version}"),
        None => name.to_owned(),
    };
    bounded(&crate::text::escape(&full), MAX_CLIENT_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_named_from_2025_11_25_on() {
        let new = elicitation_params("apr-1", "echo", "{}", Some("2025-11-25"));
        let old = elicitation_params("apr-1", "echo", "{}", Some("2025-06-18"));
        let unknown = elicitation_params("apr-1", "echo", "{}", None);
        assert!(new.starts_with(br#"{"mode":"form","message":"#));
        assert!(old.starts_with(br#"{"message":"#));
        assert_eq!(old, unknown);
        for params in [new, old] {
            let v = crate::json::parse(&params).unwrap();
            let o = v.as_object().unwrap();
            let schema = o.get("requestedSchema").unwrap().as_object().unwrap();
            assert!(
                schema
                    .get("properties")
                    .unwrap()
                    .as_object()
                    .unwrap()
                    .get(APPROVE_FIELD)
                    .is_some()
            );
        }
    }

    #[test]
    fn what_the_user_reads_is_escaped_and_bounded() {
        let long = "x".repeat(MAX_SHOWN + 10);
        let m = message("apr-1", "ec\nho", &long);
        assert!(m.contains("Tool: ec\\u{a}ho"), "{m}");
        assert!(m.contains(&format!("{}…", "x".repeat(MAX_SHOWN))), "{m}");
        assert_eq!(bounded("é", 1), "…");
        let named = client_name("c\u{1b}", Some("1"));
        assert!(
            !named.contains('\u{1b}') && named.ends_with(" 1"),
            "{named}"
        );
    }

    #[test]
    fn only_a_boolean_accept_or_a_refusal_decides() {
        assert_eq!(answer("accept", Some(true)), Some(true));
        assert_eq!(answer("accept", Some(false)), Some(false));
        assert_eq!(answer("accept", None), None);
        assert_eq!(answer("decline", None), Some(false));
        assert_eq!(answer("cancel", Some(true)), Some(false));
        assert_eq!(answer("Accept", Some(true)), None);
    }
}
