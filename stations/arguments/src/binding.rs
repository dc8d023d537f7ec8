//! A tool's binding: which of its arguments name a place (a path, a file, a URI), so the
//! host records what a call gave for them on every call, allowed or not, and a replay
//! can decide rules over them later without the raw argument tree on the record.
//!
//! A binding is found from the tool's input schema ([`Binding::from_input_schema`]) or
//! named by the operator ([`Binding::named`]), which replaces what the schema suggests.
//!
//! # Guarantees
//! - [`Binding::project`] states a name only when its value, or its absence, is known
//!   the way a policy station reads it ([`crate::lookup`]): a name that folds together
//!   with another key, or sits inside a string, is left out, so a reader reads it as
//!   unknown, never as absent.
//! - [`Arguments::Partial`](crate::Arguments::Partial) answers only for the names
//!   stated; any other name is unknown (`None`), so a rule over an argument the binding
//!   did not cover cannot allow on a replay.
//! - Names are compared in one form ([`canonical_name`]): `path` and `/path` are one
//!   argument.
//!
//! # Non-guarantees
//! - Schema inference reads names and formats; a tool whose path argument is called
//!   `q` is not found. Name it in the operator's binding.
//! - Values are recorded as the call gave them, not normalised: normalising is a pure
//!   function of the value ([`crate::normalise`]), so a replay normalises as the live
//!   call did, and a later, stricter normaliser reads the original.

use serde_json::{Map, Value};
use std::collections::BTreeSet;

use crate::lookup;

/// The most names one binding holds.
pub const MAX_BOUND_NAMES: usize = 32;
/// The longest name a binding holds, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// How deep schema inference looks into nested object properties.
const MAX_SCHEMA_DEPTH: usize = 4;

/// Why an operator's binding was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindingError {
    /// A name that is not a key or a JSON Pointer, or is too long.
    #[error("argument name {name:?}: {why}")]
    BadName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// More names than [`MAX_BOUND_NAMES`].
    #[error("a binding names at most {MAX_BOUND_NAMES} arguments")]
    TooMany,
    /// The same argument named twice (perhaps once as a key, once as a pointer).
    #[error("argument {0:?} is named twice")]
    Duplicate(String),
}

/// Where a binding came from, for the operator and the record's readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingSource {
    /// Inferred from the tool's input schema.
    Schema,
    /// Named by the operator.
    Operator,
}

/// The path-like arguments of one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    names: Vec<String>,
    source: BindingSource,
}

/// What one call gave for a binding's names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Projection {
    /// The names whose value or absence is known, sorted.
    pub names: Vec<String>,
    /// The values of those names the call gave, exactly as given.
    pub values: Map<String, Value>,
}

/// `name` in the form a binding compares: a JSON Pointer of one token is the key it
/// names (`/path` is `path`, `/a~1b` is `a/b`), unless that key starts with `/` (it
/// would read as a pointer again); any other pointer stays a pointer, and a key stays a
/// key. So each argument has one name. `None` for an empty name.
pub fn canonical_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    match name.strip_prefix('/') {
        Some(token) if !token.contains('/') && !token.is_empty() => {
            let key = token.replace("~1", "/").replace("~0", "~");
            Some(if key.starts_with('/') {
                name.to_owned()
            } else {
                key
            })
        }
        _ => Some(name.to_owned()),
    }
}

impl Binding {
    /// The binding an operator names: each name a key or a JSON Pointer (RFC 6901).
    ///
    /// # Errors
    /// A name that is empty, longer than [`MAX_NAME_BYTES`], a pointer with a bad
    /// escape, more than [`MAX_BOUND_NAMES`] names, or one argument named twice.
    pub fn named<I, S>(names: I) -> Result<Binding, BindingError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut seen = BTreeSet::new();
        for name in names {
            let name = name.as_ref();
            let bad = |why| BindingError::BadName {
                name: name.to_owned(),
                why,
            };
            if name.len() > MAX_NAME_BYTES {
                return Err(bad("longer than 256 bytes"));
            }
            if name.starts_with('/') && !valid_escapes(name) {
                return Err(bad("a JSON Pointer's `~` must be `~0` or `~1`"));
            }
            let canonical = canonical_name(name).ok_or_else(|| bad("empty"))?;
            if !seen.insert(canonical.clone()) {
                return Err(BindingError::Duplicate(canonical));
            }
            if seen.len() > MAX_BOUND_NAMES {
                return Err(BindingError::TooMany);
            }
        }
        Ok(Binding {
            names: seen.into_iter().collect(),
            source: BindingSource::Operator,
        })
    }

    /// The path-like arguments an input schema (a JSON Schema object) describes: each
    /// property, down to four levels of nested objects, whose name says
    /// it names a place (`path`, `file_path`, `dir`, `source`, `uri`, …) or whose schema
    /// has `format: uri` (or `uri-reference`, `iri`, `iri-reference`), and whose type
    /// admits a string or an array. At most [`MAX_BOUND_NAMES`], in name order.
    pub fn from_input_schema(schema: &Value) -> Binding {
        let mut names = BTreeSet::new();
        collect(schema, "", 0, &mut names);
        Binding {
            names: names.into_iter().take(MAX_BOUND_NAMES).collect(),
            source: BindingSource::Schema,
        }
    }

    /// The names, sorted, each in [`canonical_name`] form.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Where the binding came from.
    pub fn source(&self) -> BindingSource {
        self.source
    }

    /// Whether it names no argument.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// What the call whose arguments object is `arguments` gave for each name: its
    /// value when given, its absence when known absent; a name whose value cannot be
    /// known ([`crate::lookup`] answers unknown) is left out.
    pub fn project(&self, arguments: &Map<String, Value>) -> Projection {
        let mut projection = Projection::default();
        for name in &self.names {
            match lookup(arguments, name) {
                Some(Some(value)) => {
                    projection.names.push(name.clone());
                    projection.values.insert(name.clone(), value.clone());
                }
                Some(None) => projection.names.push(name.clone()),
                None => {}
            }
        }
        projection
    }
}

fn valid_escapes(pointer: &str) -> bool {
    let bytes = pointer.as_bytes();
    bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'~' || matches!(bytes.get(i + 1), Some(b'0' | b'1')))
}

/// RFC 6901 escaping of one reference token.
fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Adds the path-like properties of the object schema `schema`, found under `prefix`
/// (a JSON Pointer, empty at the top).
fn collect(schema: &Value, prefix: &str, depth: usize, names: &mut BTreeSet<String>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, property) in properties {
        let pointer = format!("{prefix}/{}", escape_token(key));
        if is_object_schema(property) {
            if depth + 1 < MAX_SCHEMA_DEPTH {
                collect(property, &pointer, depth + 1, names);
            }
            continue;
        }
        if admits_text(property)
            && (place_name(key) || uri_format(property))
            && let Some(name) = canonical_name(&pointer)
            && name.len() <= MAX_NAME_BYTES
        {
            names.insert(name);
        }
    }
}

/// A schema whose type is `object` alone and that lists properties.
fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
        && schema.get("properties").is_some_and(Value::is_object)
}

/// A schema whose `type` (when it says) admits a string or an array.
fn admits_text(schema: &Value) -> bool {
    let admits = |t: &str| matches!(t, "string" | "array");
    match schema.get("type") {
        None => true,
        Some(Value::String(t)) => admits(t),
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).any(admits),
        Some(_) => false,
    }
}

/// A `format` (of the schema, or of its array items) that names a URI.
fn uri_format(schema: &Value) -> bool {
    let is_uri = |s: &Value| {
        matches!(
            s.get("format").and_then(Value::as_str),
            Some("uri" | "uri-reference" | "iri" | "iri-reference")
        )
    };
    is_uri(schema) || schema.get("items").is_some_and(is_uri)
}

/// Whether a property's name says it names a place. Compared lowercase with `_`, `-`
/// and other separators removed, so `file_path`, `filePath` and `file-path` are one.
fn place_name(key: &str) -> bool {
    let squeezed: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const ENDINGS: [&str; 10] = [
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "dir",
        "dirs",
        "directory",
        "folder",
        "uri",
    ];
    const WHOLE: [&str; 9] = [
        "source",
        "destination",
        "target",
        "src",
        "dest",
        "dst",
        "cwd",
        "root",
        "workdir",
    ];
    ENDINGS.iter().any(|e| squeezed.ends_with(e)) || WHOLE.contains(&squeezed.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(schema: Value) -> Vec<String> {
        Binding::from_input_schema(&schema).names().to_vec()
    }

    #[test]
    fn schema_names_that_say_place_are_bound() {
        let schema = json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "file_path": {"type": "string"},
            "sourceDir": {"type": "string"},
            "destination": {},
            "paths": {"type": "array", "items": {"type": "string"}},
            "link": {"type": "string", "format": "uri"},
            "content": {"type": "string"},
            "count": {"type": "integer"},
            "target_path": {"type": "integer"},
            "opts": {"type": "object", "properties": {"root": {"type": "string"}, "a/b~path": {}}},
        }});
        assert_eq!(
            names(schema),
            [
                "/opts/a~1b~0path",
                "/opts/root",
                "destination",
                "file_path",
                "link",
                "path",
                "paths",
                "sourceDir"
            ]
        );
    }

    #[test]
    fn a_schema_without_properties_binds_nothing() {
        assert!(names(json!({"type": "object"})).is_empty());
        assert!(names(json!(true)).is_empty());
        assert!(names(json!({"properties": []})).is_empty());
    }

    #[test]
    fn inference_stops_at_its_depth_and_count() {
        let mut deep = json!({"type": "string"});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"o": deep, "path": {}}});
        }
        let bound = names(deep);
        assert_eq!(bound.len(), MAX_SCHEMA_DEPTH);
        let many: Map<String, Value> = (0..100)
            .map(|i| (format!("p{i:03}_path"), json!({"type": "string"})))
            .collect();
        let bound = names(json!({"properties": many}));
        assert_eq!(bound.len(), MAX_BOUND_NAMES);
    }

    #[test]
    fn operator_names_are_checked() {
        let b = Binding::named(["/path", "/opts/dest"]).unwrap();
        assert_eq!(b.names(), ["/opts/dest", "path"]);
        assert_eq!(b.source(), BindingSource::Operator);
        assert_eq!(
            Binding::named(["path", "/path"]),
            Err(BindingError::Duplicate("path".into()))
        );
        assert!(matches!(
            Binding::named([""]),
            Err(BindingError::BadName { .. })
        ));
        assert!(matches!(
            Binding::named(["/a~2"]),
            Err(BindingError::BadName { .. })
        ));
        let too_many: Vec<String> = (0..=MAX_BOUND_NAMES).map(|i| format!("a{i}")).collect();
        assert_eq!(Binding::named(too_many), Err(BindingError::TooMany));
    }

    #[test]
    fn projection_states_known_values_and_absences_only() {
        let b = Binding::named(["path", "dest", "/opts/root", "/blob/path", "mode"]).unwrap();
        let args = json!({
            "path": "../secret.txt",
            "Mode": "a", "MODE": "b",
            "opts": {"root": "/data"},
            "blob": "{\"path\": 1}",
        });
        let p = b.project(args.as_object().unwrap());
        // `mode` folds with two keys and `/blob/path` steps into a string: unknown.
        assert_eq!(p.names, ["/opts/root", "dest", "path"]);
        assert_eq!(
            Value::Object(p.values),
            json!({"path": "../secret.txt", "/opts/root": "/data"})
        );
    }

    #[test]
    fn partial_arguments_answer_for_the_known_names_only() {
        let args = crate::Arguments::partial(r#"{"path":"/etc/passwd"}"#, &["/path", "dest"]);
        assert_eq!(args.get("path"), Some(Some(&json!("/etc/passwd"))));
        assert_eq!(args.get("/path"), Some(Some(&json!("/etc/passwd"))));
        // Known absent: the binding covered it and the call did not give it.
        assert_eq!(args.get("dest"), Some(None));
        // Not covered: unknown, never absent.
        assert_eq!(args.get("mode"), None);
        assert_eq!(args.get("/path/0"), None);
        // A cut value (not JSON) is unknown altogether.
        let cut = crate::Arguments::partial(r#"{"path":"/et...[truncated"#, &["path"]);
        assert_eq!(cut.get("path"), None);
    }
}
