//! MCP content blocks from a tool's output, for tools whose manifest says
//! `output = "content"`.
//!
//! The output is JSON: an array of blocks, or `{"content": [...]}`. Each block is
//! checked before anything is served:
//! - `text`: `text` (a string).
//! - `image`, `audio`: `data` (standard base64 that decodes) and `mimeType` (a
//!   non-empty `image/…` or `audio/…` type, matching the block's kind).
//! - `resource`: `resource`, an embedded resource: `uri` (non-empty), an optional
//!   `mimeType`, and exactly one of `text` (a string) or `blob` (base64 that decodes).
//!
//! `annotations` and `_meta` may go on any block (and `_meta` on a resource); any other
//! field, and any other block type (`resource_link` included: the gateway serves no
//! resources a link could point to), is refused.
//!
//! # Guarantees
//! - A refusal names the block (0-based) and what is wrong with it; the caller turns
//!   it into an `isError` result. Nothing here panics on any output.
//!
//! # Non-guarantees
//! - The bytes behind `data` and `blob` are not checked against their `mimeType`: a
//!   PNG that is not a PNG is the tool's business, as text that is not true would be.

use base64::Engine as _;
use rmcp::model::ContentBlock;
use serde_json::{Map, Value};

/// The blocks `output` spells, checked; or why it spells none.
pub(crate) fn blocks(output: &[u8]) -> Result<Vec<ContentBlock>, String> {
    let value: Value =
        serde_json::from_slice(output).map_err(|e| format!("the output is not JSON: {e}"))?;
    let list = match value {
        Value::Array(list) => list,
        Value::Object(mut o) => match (o.remove("content"), o.keys().next()) {
            (Some(Value::Array(list)), None) => list,
            (_, Some(extra)) => {
                return Err(format!(
                    "the output object has a field {extra:?}; expected only \"content\""
                ));
            }
            _ => return Err("the output object's \"content\" is not an array".into()),
        },
        _ => {
            return Err("the output is neither an array of blocks nor {\"content\": [...]}".into());
        }
    };
    list.into_iter()
        .enumerate()
        .map(|(i, block)| block_of(block).map_err(|e| format!("block {i}: {e}")))
        .collect()
}

fn block_of(block: Value) -> Result<ContentBlock, String> {
    let Value::Object(o) = &block else {
        return Err("not an object".into());
    };
    let kind = o
        .get("type")
        .and_then(Value::as_str)
        .ok_or("no \"type\" string")?
        .to_owned();
    match kind.as_str() {
        "text" => {
            only(o, &["type", "text", "annotations", "_meta"])?;
            string(o, "text")?;
        }
        "image" | "audio" => {
            only(o, &["type", "data", "mimeType", "annotations", "_meta"])?;
            base64_of(o, "data")?;
            let mime = string(o, "mimeType")?;
            let (top, sub) = mime.split_once('/').unwrap_or((mime, ""));
            if top != kind.as_str() || sub.is_empty() {
                return Err(format!(
                    "mimeType {mime:?} is not an {kind}/… type, as an {kind} block needs"
                ));
            }
        }
        "resource" => {
            only(o, &["type", "resource", "annotations", "_meta"])?;
            let Some(Value::Object(r)) = o.get("resource") else {
                return Err("\"resource\" must be an object".into());
            };
            only(r, &["uri", "mimeType", "text", "blob", "_meta"])
                .map_err(|e| format!("resource: {e}"))?;
            if string(r, "uri")?.is_empty() {
                return Err("resource: \"uri\" is empty".into());
            }
            if r.contains_key("mimeType") {
                string(r, "mimeType")?;
            }
            match (r.contains_key("text"), r.contains_key("blob")) {
                (true, false) => {
                    string(r, "text")?;
                }
                (false, true) => base64_of(r, "blob")?,
                _ => return Err("resource: needs exactly one of \"text\" and \"blob\"".into()),
            }
        }
        other => {
            return Err(format!(
                "type {other:?} is not served (text, image, audio and resource are)"
            ));
        }
    }
    serde_json::from_value(block).map_err(|e| format!("not an MCP {kind} block: {e}"))
}

/// Refuses a field not in `allowed`.
fn only(o: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match o.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown field {k:?}")),
        None => Ok(()),
    }
}

fn string<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match o.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("{key:?} must be a string")),
        None => Err(format!("{key:?} is missing")),
    }
}

fn base64_of(o: &Map<String, Value>, key: &str) -> Result<(), String> {
    let s = string(o, key)?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map(|_| ())
        .map_err(|e| format!("{key:?} is not base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(json: &str) -> String {
        blocks(json.as_bytes()).expect_err("refused")
    }

    #[test]
    fn every_served_kind_is_taken() {
        let got = blocks(
            br#"[{"type":"text","text":"hi"},
                 {"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},
                 {"type":"audio","data":"UklGRg==","mimeType":"audio/wav"},
                 {"type":"resource","resource":{"uri":"test://r","mimeType":"text/plain","text":"t"}},
                 {"type":"resource","resource":{"uri":"test://b","blob":"AAE="},"annotations":{"priority":0.5}}]"#,
        )
        .unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(got[0].as_text().map(|t| t.text.as_str()), Some("hi"));
        assert!(got[1].as_image().is_some());
        let wrapped = blocks(br#"{"content":[{"type":"text","text":"x"}]}"#).unwrap();
        assert_eq!(wrapped.len(), 1);
        assert!(blocks(b"[]").unwrap().is_empty());
    }

    #[test]
    fn what_is_not_blocks_is_refused_with_the_reason() {
        assert!(refused("hello").contains("not JSON"));
        assert!(refused("7").contains("neither an array"));
        assert!(refused(r#"{"content":[],"x":1}"#).contains("field \"x\""));
        assert!(refused(r#"{"content":{}}"#).contains("not an array"));
        assert!(refused("[1]").starts_with("block 0: not an object"));
        assert!(refused(r#"[{"text":"x"}]"#).contains("no \"type\""));
        let e = refused(r#"[{"type":"text","text":"a"},{"type":"video","data":""}]"#);
        assert!(
            e.starts_with("block 1: type \"video\" is not served"),
            "{e}"
        );
        let e = refused(r#"[{"type":"resource_link","uri":"file:///etc/passwd","name":"p"}]"#);
        assert!(e.contains("\"resource_link\" is not served"), "{e}");
        assert!(refused(r#"[{"type":"text","text":1}]"#).contains("\"text\" must be a string"));
        assert!(refused(r#"[{"type":"text","text":"a","extra":1}]"#).contains("unknown field"));
    }

    #[test]
    fn binary_blocks_need_base64_and_a_matching_mime_type() {
        let e = refused(r#"[{"type":"image","data":"not base64!","mimeType":"image/png"}]"#);
        assert!(e.contains("\"data\" is not base64"), "{e}");
        let e = refused(r#"[{"type":"image","data":"AAE=","mimeType":"audio/wav"}]"#);
        assert!(e.contains("not an image/… type"), "{e}");
        let e = refused(r#"[{"type":"audio","data":"AAE=","mimeType":"audio"}]"#);
        assert!(e.contains("not an audio/… type"), "{e}");
        assert!(refused(r#"[{"type":"audio","data":"AAE="}]"#).contains("\"mimeType\" is missing"));
    }

    #[test]
    fn an_embedded_resource_needs_a_uri_and_one_body() {
        let e = refused(r#"[{"type":"resource","resource":{"uri":"","text":"t"}}]"#);
        assert!(e.contains("\"uri\" is empty"), "{e}");
        let e = refused(r#"[{"type":"resource","resource":{"uri":"u","text":"t","blob":"AA=="}}]"#);
        assert!(e.contains("exactly one"), "{e}");
        let e = refused(r#"[{"type":"resource","resource":{"uri":"u"}}]"#);
        assert!(e.contains("exactly one"), "{e}");
        let e = refused(r#"[{"type":"resource","resource":{"uri":"u","blob":"%%"}}]"#);
        assert!(e.contains("\"blob\" is not base64"), "{e}");
        let e = refused(r#"[{"type":"resource","resource":"u"}]"#);
        assert!(e.contains("must be an object"), "{e}");
    }
}
