//! Classifying one frame as a JSON-RPC message.
//!
//! # Guarantees
//! - A request id is kept as its exact JSON text ([`RequestId::raw`]), so a reply built by
//!   the relay echoes it byte for byte. Ids are matched by [`IdKey`]: a string by its
//!   decoded text (`"\u0041"` matches `"A"`, as a server that re-serializes would echo
//!   it), a number by its source text (`1` and `1.0` are different ids, and neither
//!   matches `"1"`).
//! - A member the classification depends on (`id`, `method`, `params`, `result`,
//!   `error`) that appears twice, or next to a key colliding with it (see the `json`
//!   module: `"Method"`, `"paramſ"`), makes the message [`Message::Invalid`]: the relay
//!   never picks one reading of a frame a server may read differently.
//! - [`Message::duplicate_keys`] reports colliding keys anywhere else in the frame.
//!
//! # Non-guarantees
//! - No check of `"jsonrpc": "2.0"`: a lenient server would act on a message without it,
//!   so the relay classifies it the same way.

use crate::json::{self, Lookup, Node, Object, Value};

/// How a request id is compared: strings by decoded text, numbers by source text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdKey {
    /// A string id, decoded.
    String(String),
    /// A number id, as written.
    Number(String),
}

/// A JSON-RPC request id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId {
    /// The id's exact JSON text in the frame (with quotes for a string).
    pub raw: String,
    /// What responses are matched on.
    pub key: IdKey,
}

/// One classified frame.
#[derive(Debug)]
pub enum Message<'a> {
    /// A request: it has a `method` and an `id`.
    Request(Request<'a>),
    /// A notification: a `method` and no `id`.
    Notification(Notification<'a>),
    /// A response: an `id` and a `result` or an `error`.
    Response(Response<'a>),
    /// A JSON array (JSON-RPC batches exist only in MCP 2025-03-26); its elements are
    /// classified one at a time as they are read ([`Batch::messages`]).
    Batch(Batch<'a>),
    /// Not JSON at all (or not UTF-8).
    NotJson,
    /// JSON, but not a JSON-RPC message the relay can read unambiguously, or over one of
    /// the reader's bounds (nesting, number of values).
    Invalid(String),
}

/// A batch, not yet read element by element: a frame of a million elements costs no
/// memory per element until the relay reads them, and it reads only as many as it must.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    array: json::Array<'a>,
}

impl<'a> Batch<'a> {
    /// How many elements it has (one pass over the frame, no memory per element).
    pub fn len(&self) -> usize {
        self.array.items().count()
    }

    /// True when it has no element (never, for a batch [`classify`] returned).
    pub fn is_empty(&self) -> bool {
        self.array.items().next().is_none()
    }

    /// The elements, each classified alone as it is read.
    pub fn messages(&self) -> impl Iterator<Item = Message<'a>> + use<'a> {
        self.array.items().map(classify_node)
    }
}

/// A request.
#[derive(Debug)]
pub struct Request<'a> {
    /// Its id.
    pub id: RequestId,
    /// Its method (decoded).
    pub method: String,
    pub(crate) params: Option<Node<'a>>,
    /// True when keys collide anywhere in the message.
    pub duplicate_keys: bool,
    /// The message's exact bytes (for a batch element, the element's).
    pub raw: &'a [u8],
}

/// A notification.
#[derive(Debug)]
pub struct Notification<'a> {
    /// Its method (decoded).
    pub method: String,
    pub(crate) params: Option<Node<'a>>,
    /// True when keys collide anywhere in the message.
    pub duplicate_keys: bool,
}

/// A response.
#[derive(Debug)]
pub struct Response<'a> {
    /// The id it answers.
    pub id: RequestId,
    /// True for a JSON-RPC `error`, false for a `result`.
    pub is_error: bool,
    pub(crate) body: Node<'a>,
    /// True when keys collide anywhere in the message.
    pub duplicate_keys: bool,
}

/// Why a `tools/call` does not name one tool.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameProblem {
    /// `params` or `params.name` is missing.
    #[error("params.name is missing")]
    Missing,
    /// `params.name` is not a string.
    #[error("params.name is not a string")]
    NotString,
    /// `params` is not an object, or `name` appears twice or beside a colliding key.
    #[error("params.name is ambiguous")]
    Ambiguous,
    /// `params.name` holds an escaped lone surrogate, which peers decode differently.
    #[error("params.name holds a lone surrogate escape")]
    LoneSurrogate,
    /// `params.name` is longer than [`MAX_TOOL_NAME`] bytes: no listed tool has such a
    /// name, and it is not echoed back in refusals and logs.
    #[error("params.name is longer than {MAX_TOOL_NAME} bytes")]
    TooLong,
}

/// A `tools/call` whose arguments cannot be read one way only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "params.arguments is ambiguous (named twice, or by a key that folds to it, as a Go server reads keys)"
)]
pub struct AmbiguousArguments;

/// The longest tool name, in bytes, the relay reads (in a call or a listing). MCP asks
/// for names of 1 to 128 characters; 1024 bytes leaves room for every script, and keeps
/// a name from making each refusal, log line and pin a frame long.
pub const MAX_TOOL_NAME: usize = 1024;

/// Classifies one frame (a trailing `\n` is JSON whitespace and may stay).
///
/// A carriage return anywhere but just before the final `\n` makes the frame
/// [`Message::Invalid`]: JSON counts it as whitespace, but readers that split lines at
/// `\r` (Python's universal newlines, Node's `readline`) would read the pieces as other
/// messages the relay never decided.
///
/// Classifying holds no tree: its memory does not grow with the frame's values (see the
/// `json` module), except for the key hashes of the objects open while duplicate keys
/// are looked for.
pub fn classify(frame: &[u8]) -> Message<'_> {
    let body = frame.strip_suffix(b"\n").unwrap_or(frame);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    if body.contains(&b'\r') {
        return Message::Invalid(
            "a carriage return inside the line, where some readers split it".into(),
        );
    }
    // One pass checks the text and notes colliding keys anywhere in it.
    match json::parse_noting_collisions(frame) {
        // Over a bound is not "not JSON": such a line must never be forwarded as one.
        Err(e) if e.is_bound() => Message::Invalid(e.to_string()),
        Err(_) => Message::NotJson,
        Ok((node, duplicate_keys)) => match node.value() {
            Value::Array(array) => {
                let batch = Batch { array };
                if batch.is_empty() {
                    Message::Invalid("empty batch".into())
                } else {
                    Message::Batch(batch)
                }
            }
            _ => read_node(node, || duplicate_keys).unwrap_or_else(Message::Invalid),
        },
    }
}

/// The id a frame the relay cannot classify seems to answer, when it can be read without
/// choosing: the frame starts as an object whose members, as far as they are well formed,
/// name one `id` (and no key colliding with it), a string or a number, and no `method`
/// (a request's id answers nothing). For a batch, the ids of its elements that are such
/// objects.
///
/// Only ids `wanted` accepts are kept, so a batch of a million ids costs no more than
/// the ids the caller waits for. Used only to answer a request the relay will not let
/// its answer through for; an id read here never decides what is forwarded.
pub fn recoverable_ids(frame: &[u8], mut wanted: impl FnMut(&IdKey) -> bool) -> Vec<RequestId> {
    let mut keep = |id: Option<RequestId>| id.filter(|id| wanted(&id.key));
    // A frame that is JSON but unusable (a bare `\r`, duplicate members) reads strictly.
    match json::parse(frame) {
        Ok(node) => match node.value() {
            Value::Array(array) => array
                .items()
                .filter_map(|item| keep(unambiguous_id(item.object()?)))
                .collect(),
            Value::Object(object) => keep(unambiguous_id(object)).into_iter().collect(),
            _ => Vec::new(),
        },
        Err(_) => {
            let id = match (
                json::leading_lookup(frame, "id"),
                json::leading_lookup(frame, "method"),
            ) {
                (Some(Lookup::One(node)), Some(Lookup::Absent)) => request_id(node).ok(),
                _ => None,
            };
            keep(id).into_iter().collect()
        }
    }
}

/// The id of what reads as a response: one `id`, and no `method` (a request's id is
/// not an answer to anything).
fn unambiguous_id(object: Object<'_>) -> Option<RequestId> {
    match object.lookup_each(["id", "method"]) {
        [Lookup::One(node), Lookup::Absent] => request_id(node).ok(),
        _ => None,
    }
}

fn one<'a>(found: Lookup<'a>, key: &str) -> Result<Option<Node<'a>>, String> {
    match found {
        Lookup::Absent => Ok(None),
        Lookup::One(node) => Ok(Some(node)),
        Lookup::Ambiguous => Err(format!("member {key:?} is ambiguous")),
    }
}

/// Classifies a batch element: its own colliding keys are looked for in a second pass
/// over it, once it reads as a message.
fn classify_node(node: Node<'_>) -> Message<'_> {
    read_node(node, || node.has_colliding_keys()).unwrap_or_else(Message::Invalid)
}

/// Reads `node` as a message; `duplicate_keys` says whether keys collide anywhere in it.
fn read_node(node: Node<'_>, duplicate_keys: impl FnOnce() -> bool) -> Result<Message<'_>, String> {
    let raw = node.raw();
    let Some(object) = node.object() else {
        return Err("not an object".into());
    };
    const MEMBERS: [&str; 5] = ["id", "method", "params", "result", "error"];
    let [id, method, params, result, error] = object.lookup_each(MEMBERS);
    let id = one(id, "id")?.map(request_id).transpose()?;
    let method = match one(method, "method")? {
        None => None,
        Some(node) => match node.value() {
            Value::String(s) => Some(s.text.into_owned()),
            _ => return Err("method is not a string".into()),
        },
    };
    let params = one(params, "params")?;
    let result = one(result, "result")?;
    let error = one(error, "error")?;
    let duplicate_keys = duplicate_keys();
    Ok(match (method, id) {
        (Some(method), Some(id)) => Message::Request(Request {
            id,
            method,
            params,
            duplicate_keys,
            raw,
        }),
        (Some(method), None) => Message::Notification(Notification {
            method,
            params,
            duplicate_keys,
        }),
        (None, Some(id)) => match (result, error) {
            (Some(body), None) => Message::Response(Response {
                id,
                is_error: false,
                body,
                duplicate_keys,
            }),
            (None, Some(body)) => Message::Response(Response {
                id,
                is_error: true,
                body,
                duplicate_keys,
            }),
            _ => return Err("a response needs exactly one of result and error".into()),
        },
        (None, None) => return Err("neither method nor id".into()),
    })
}

fn request_id(node: Node<'_>) -> Result<RequestId, String> {
    let key = match node.value() {
        Value::String(s) if s.exact => IdKey::String(s.text.into_owned()),
        Value::Number(text) => IdKey::Number(text.to_owned()),
        _ => return Err("id is not a string or a number".into()),
    };
    Ok(RequestId {
        raw: node.raw_text().to_owned(),
        key,
    })
}

fn params_object(params: Option<Node<'_>>) -> Option<Object<'_>> {
    params?.object()
}

/// True when `params` is there but is neither an object nor null, or names one of
/// `members` twice or by another spelling (`Cursor`, `requestſd`): a peer that folds keys
/// reads another value than the relay.
fn params_ambiguous(params: Option<Node<'_>>, members: &[&str]) -> bool {
    let Some(params) = params else {
        return false;
    };
    match params.value() {
        Value::Null => false,
        Value::Object(object) => members
            .iter()
            .any(|m| matches!(object.lookup(m), Lookup::Ambiguous)),
        _ => true,
    }
}

impl Request<'_> {
    /// For a `tools/call`: the tool's name, which must be one exact string.
    pub fn tool_name(&self) -> Result<String, NameProblem> {
        let object = match self.params {
            None => return Err(NameProblem::Missing),
            Some(node) => node.object().ok_or(NameProblem::Ambiguous)?,
        };
        match object.lookup("name") {
            Lookup::Absent => Err(NameProblem::Missing),
            Lookup::Ambiguous => Err(NameProblem::Ambiguous),
            // Checked on the source text first, so an over-long name is never decoded.
            Lookup::One(node) if node.raw().len() > 6 * MAX_TOOL_NAME + 2 => {
                Err(NameProblem::TooLong)
            }
            Lookup::One(node) => match node.value() {
                Value::String(s) if !s.exact => Err(NameProblem::LoneSurrogate),
                Value::String(s) if s.text.len() > MAX_TOOL_NAME => Err(NameProblem::TooLong),
                Value::String(s) => Ok(s.text.into_owned()),
                _ => Err(NameProblem::NotString),
            },
        }
    }

    /// For a `tools/call`: the exact text of `params.arguments`, or `None` when the call
    /// has none.
    ///
    /// # Errors
    /// [`AmbiguousArguments`] when `params` is not an object, or `arguments` appears
    /// twice or beside (or only as) a key that folds to it (`Arguments`, `argumentſ`):
    /// a server that folds keys reads arguments the relay would not have decided on.
    pub fn arguments(&self) -> Result<Option<&str>, AmbiguousArguments> {
        let Some(params) = self.params else {
            return Ok(None);
        };
        let params = params.object().ok_or(AmbiguousArguments)?;
        match params.lookup("arguments") {
            Lookup::Absent => Ok(None),
            Lookup::One(node) => Ok(Some(node.raw_text())),
            Lookup::Ambiguous => Err(AmbiguousArguments),
        }
    }

    /// True when `params` cannot be read one way only for `members` (see
    /// [`Notification::ambiguous_params`]).
    pub fn ambiguous_params(&self, members: &[&str]) -> bool {
        params_ambiguous(self.params, members)
    }

    /// The exact text of `params._meta.progressToken` when it is one string or integer
    /// read one way only: the token a client asks progress notifications under.
    pub fn progress_token(&self) -> Option<&str> {
        let Lookup::One(meta) = params_object(self.params)?.lookup("_meta") else {
            return None;
        };
        match meta.object()?.lookup("progressToken") {
            Lookup::One(token) => match token.value() {
                Value::String(s) if s.exact => Some(token.raw_text()),
                Value::Number(_) => Some(token.raw_text()),
                _ => None,
            },
            _ => None,
        }
    }

    /// For a `tools/list`: whether `params.cursor` is present (a later page).
    pub fn has_cursor(&self) -> bool {
        // A `null` cursor is no cursor: clients send it for the first page.
        params_object(self.params).is_some_and(|object| match object.lookup("cursor") {
            Lookup::Absent => false,
            Lookup::One(node) => !matches!(node.value(), Value::Null),
            Lookup::Ambiguous => true,
        })
    }
}

impl Notification<'_> {
    /// True when `params` is neither absent, null nor an object, or names one of
    /// `members` twice or by a key that folds to it: the relay would act on another
    /// reading than a peer that folds keys.
    pub fn ambiguous_params(&self, members: &[&str]) -> bool {
        params_ambiguous(self.params, members)
    }

    /// For `notifications/cancelled`: the id of the request it cancels.
    pub fn cancelled_request(&self) -> Option<IdKey> {
        match params_object(self.params)?.lookup("requestId") {
            Lookup::One(node) => request_id(node).ok().map(|id| id.key),
            _ => None,
        }
    }

    /// For `notifications/cancelled`: the reason given, if it is a string.
    pub fn cancel_reason(&self) -> Option<String> {
        match params_object(self.params)?.lookup("reason") {
            Lookup::One(node) => match node.value() {
                Value::String(s) => Some(s.text.into_owned()),
                _ => None,
            },
            _ => None,
        }
    }
}

impl<'a> Response<'a> {
    /// True when the response is a `result` whose `isError` is `true` (a tool-reported error).
    pub fn tool_error(&self) -> bool {
        !self.is_error
            && matches!(
                self.body.object().map(|o| o.lookup("isError")),
                Some(Lookup::One(node)) if matches!(node.value(), Value::Bool(true))
            )
    }

    /// True for a `result` whose `isError` is named twice or by another spelling
    /// (`IsError`): a client that folds keys may read an error the record does not.
    pub fn tool_error_ambiguous(&self) -> bool {
        !self.is_error
            && self
                .body
                .object()
                .is_some_and(|o| matches!(o.lookup("isError"), Lookup::Ambiguous))
    }

    pub(crate) fn result(&self) -> Option<Node<'a>> {
        (!self.is_error).then_some(self.body)
    }
}

impl Message<'_> {
    /// True when keys collide anywhere in the message (for a batch: in any element).
    pub fn duplicate_keys(&self) -> bool {
        match self {
            Message::Request(r) => r.duplicate_keys,
            Message::Notification(n) => n.duplicate_keys,
            Message::Response(r) => r.duplicate_keys,
            Message::Batch(batch) => batch.messages().any(|m| m.duplicate_keys()),
            Message::NotJson | Message::Invalid(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(text: &str) -> Request<'_> {
        match classify(text.as_bytes()) {
            Message::Request(r) => r,
            other => panic!("not a request: {other:?}"),
        }
    }

    #[test]
    fn ids_keep_their_text_and_compare_by_kind() {
        let a = request(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        let b = request(r#"{"jsonrpc":"2.0","id":1.0,"method":"ping"}"#);
        let c = request(r#"{"jsonrpc":"2.0","id":"1","method":"ping"}"#);
        let d = request(r#"{"jsonrpc":"2.0","id":"\u0031","method":"ping"}"#);
        assert_eq!((a.id.raw.as_str(), b.id.raw.as_str()), ("1", "1.0"));
        assert_ne!(a.id.key, b.id.key);
        assert_ne!(a.id.key, c.id.key);
        assert_eq!(c.id.key, d.id.key);
        assert_eq!(d.id.raw, r#""\u0031""#);
    }

    #[test]
    fn shapes() {
        assert!(matches!(classify(b"hello\n"), Message::NotJson));
        // Regression (an outside attack): a call hidden between carriage returns in a
        // ping's params reached a server that splits lines at `\r`.
        let smuggled = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\r{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"get-env\"}}\r}}\n";
        assert!(matches!(classify(smuggled), Message::Invalid(_)));
        assert!(matches!(
            classify(b"{\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":1}\r\n"),
            Message::Request(_)
        ));
        assert!(matches!(classify(b"[]"), Message::Invalid(_)));
        assert!(matches!(classify(b"42"), Message::Invalid(_)));
        assert!(matches!(
            classify(br#"{"id":null,"method":"x"}"#),
            Message::Invalid(_)
        ));
        assert!(matches!(
            classify(br#"{"id":1,"result":1,"error":{}}"#),
            Message::Invalid(_)
        ));
        assert!(matches!(
            classify(br#"{"method":"notifications/initialized"}"#),
            Message::Notification(_)
        ));
        let Message::Response(r) = classify(br#"{"id":"a","result":{"isError":true}}"#) else {
            panic!()
        };
        assert!(r.tool_error() && !r.is_error);
        let Message::Response(r) = classify(br#"{"id":"a","error":{"code":1}}"#) else {
            panic!()
        };
        assert!(r.is_error && !r.tool_error());
        let Message::Batch(batch) = classify(br#"[{"id":1,"method":"a"},{"method":"b"},3]"#) else {
            panic!()
        };
        let items: Vec<Message<'_>> = batch.messages().collect();
        assert!(matches!(
            items.as_slice(),
            [
                Message::Request(_),
                Message::Notification(_),
                Message::Invalid(_)
            ]
        ));
    }

    #[test]
    fn ambiguous_top_level_members_are_invalid() {
        for text in [
            r#"{"id":1,"method":"ping","method":"tools/call"}"#,
            r#"{"id":1,"Method":"tools/call"}"#,
            r#"{"id":1,"id":2,"method":"ping"}"#,
            r#"{"id":1,"method":"tools/call","params":{},"paramſ":{}}"#,
        ] {
            assert!(
                matches!(classify(text.as_bytes()), Message::Invalid(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn tool_names_must_be_one_exact_string() {
        let call = |params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
        };
        let ok = call(r#"{"name":"read_file","arguments":{"path":"/x"}}"#);
        let r = request(&ok);
        assert_eq!(r.tool_name().as_deref(), Ok("read_file"));
        assert_eq!(r.arguments(), Ok(Some(r#"{"path":"/x"}"#)));
        assert!(!r.duplicate_keys);
        for (params, problem) in [
            ("{}", NameProblem::Missing),
            (r#"{"name":5}"#, NameProblem::NotString),
            (r#"{"name":"a","name":"b"}"#, NameProblem::Ambiguous),
            (r#"{"name":"a","NAME":"b"}"#, NameProblem::Ambiguous),
            (r#"["a"]"#, NameProblem::Ambiguous),
            (r#"{"name":"\ud800"}"#, NameProblem::LoneSurrogate),
        ] {
            assert_eq!(request(&call(params)).tool_name(), Err(problem), "{params}");
        }
        let long = |n: usize, c: &str| call(&format!(r#"{{"name":"{}"}}"#, c.repeat(n)));
        assert_eq!(
            request(&long(MAX_TOOL_NAME, "a"))
                .tool_name()
                .map(|n| n.len()),
            Ok(MAX_TOOL_NAME)
        );
        assert_eq!(
            request(&long(MAX_TOOL_NAME + 1, "a")).tool_name(),
            Err(NameProblem::TooLong)
        );
        assert_eq!(
            request(&long(700, "\\u00e9")).tool_name(),
            Err(NameProblem::TooLong)
        );
        assert_eq!(
            request(&long(1 << 20, "\\u00e9")).tool_name(),
            Err(NameProblem::TooLong)
        );
        let deep = call(r#"{"name":"a","arguments":{"x":{"y":1,"y":2}}}"#);
        assert!(request(&deep).duplicate_keys);
    }

    /// Regression (second outside attack): `Arguments` instead of `arguments` was read
    /// as no arguments, so a deny rule on the path was skipped while a server that folds
    /// keys (Go's `encoding/json`) read the path.
    #[test]
    fn arguments_spelt_another_way_are_ambiguous_never_absent() {
        let call = |params: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{params}}}"#)
        };
        assert_eq!(request(&call(r#"{"name":"r"}"#)).arguments(), Ok(None));
        for params in [
            r#"{"name":"r","Arguments":{"path":"/etc/shadow"}}"#,
            r#"{"name":"r","ARGUMENTS":{"path":"/etc/shadow"}}"#,
            r#"{"name":"r","argumentſ":{"path":"/etc/shadow"}}"#,
            r#"{"name":"r","arguments":{},"Arguments":{"path":"/etc/shadow"}}"#,
            r#"{"name":"r","arguments":{},"arguments":{"path":"/etc/shadow"}}"#,
        ] {
            assert_eq!(
                request(&call(params)).arguments(),
                Err(AmbiguousArguments),
                "{params}"
            );
        }
    }

    #[test]
    fn cancellation_names_the_request() {
        let Message::Notification(n) = classify(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r1","reason":"user"}}"#,
        ) else {
            panic!()
        };
        assert_eq!(n.cancelled_request(), Some(IdKey::String("r1".into())));
        assert_eq!(n.cancel_reason().as_deref(), Some("user"));
    }
}
