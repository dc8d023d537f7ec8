//! What of a call's arguments the record keeps: the arguments its tool's binding names
//! (`decision_axes.bound`), on every call, and the whole arguments object only when the
//! operator opts in (`decision_axes.call_arguments`). See `spec/SPEC.md` §6.3.
//!
//! # Guarantees
//! - A binding the operator named for a tool replaces what its schema suggests; a
//!   schema seen later never changes it.
//! - The bound arguments are taken from the same canonical arguments the policy is
//!   given, read one way only: arguments that read two ways record nothing bound (the
//!   call is refused before the stations anyway).
//!
//! # Non-guarantees
//! - A tool whose schema was never seen and that the operator did not name has no
//!   binding: its calls record no bound arguments, and a replay reads every argument
//!   of them as unknown.

use aegis_policy_arguments::binding::Binding;
use aegis_policy_arguments::unambiguous::{self, canonical_of, read_object};
use aegis_record::BoundArguments;
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

/// The most tools whose schema binding is held: a listing holds at most this many.
const MAX_INFERRED: usize = 4096;

/// A binding found from a tool's schema.
#[derive(Debug)]
struct Inferred {
    binding: Arc<Binding>,
    /// SHA-256 of the schema text, when it came as text.
    text: Option<[u8; 32]>,
}

/// The bindings and the opt-in, for one pipeline.
#[derive(Debug, Default)]
pub struct ArgumentRecording {
    operator: BTreeMap<String, Arc<Binding>>,
    /// Each tool's binding from its schema, with the SHA-256 of the schema text it was
    /// read from when it came as text ([`ArgumentRecording::bind_schema_text`]).
    inferred: RwLock<HashMap<String, Inferred>>,
    whole: bool,
}

impl ArgumentRecording {
    /// The operator's bindings (by tool id), and whether whole arguments are recorded.
    pub fn new(operator: BTreeMap<String, Binding>, whole: bool) -> ArgumentRecording {
        ArgumentRecording {
            operator: operator
                .into_iter()
                .map(|(tool, b)| (tool, Arc::new(b)))
                .collect(),
            inferred: RwLock::default(),
            whole,
        }
    }

    /// Takes `tool`'s binding from its input schema, unless the operator named one.
    /// A later schema for the same tool replaces the earlier (a relisted tool).
    pub fn bind_schema(&self, tool: &str, schema: &serde_json::Value) {
        self.infer(tool, schema, None);
    }

    fn infer(&self, tool: &str, schema: &serde_json::Value, text: Option<[u8; 32]>) {
        if self.operator.contains_key(tool) {
            return;
        }
        let binding = Arc::new(Binding::from_input_schema(schema));
        let mut inferred = self
            .inferred
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if inferred.len() >= MAX_INFERRED && !inferred.contains_key(tool) {
            return;
        }
        inferred.insert(tool.to_owned(), Inferred { binding, text });
    }

    /// [`ArgumentRecording::bind_schema`] of a schema's JSON text; text that is not
    /// JSON read one way only (`aegis_policy_arguments::unambiguous`: no keys that
    /// fold together, no duplicates) binds nothing, and the binding read before stays.
    /// A relay hands the pinned schema over with every call, so the digest of the
    /// text last bound is kept and the same text is not read again.
    pub fn bind_schema_text(&self, tool: &str, schema: &str) {
        let digest: [u8; 32] = Sha256::digest(schema.as_bytes()).into();
        let seen = self
            .inferred
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool)
            .is_some_and(|i| i.text == Some(digest));
        if seen || self.operator.contains_key(tool) {
            return;
        }
        if let Ok(value) = unambiguous::read(schema.as_bytes()) {
            self.infer(tool, &value, Some(digest));
        }
    }

    /// `tool`'s binding: the operator's, else its schema's.
    pub fn binding(&self, tool: &str) -> Option<Arc<Binding>> {
        if let Some(b) = self.operator.get(tool) {
            return Some(Arc::clone(b));
        }
        self.inferred
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tool)
            .map(|i| Arc::clone(&i.binding))
    }

    /// What a call of `tool` with `arguments` (canonical JSON; `None` when it states
    /// none) records: its bound arguments, and its whole arguments when opted in.
    pub fn of_call(
        &self,
        tool: &str,
        arguments: Option<&str>,
    ) -> (Option<BoundArguments>, Option<String>) {
        let Some(text) = arguments else {
            return (None, None);
        };
        let whole = self.whole.then(|| text.to_owned());
        let bound = self.binding(tool).filter(|b| !b.is_empty()).and_then(|b| {
            let map = read_object(text.as_bytes()).ok()?;
            let p = b.project(&map);
            Some(BoundArguments {
                names: p.names,
                values: canonical_of(&p.values),
            })
        });
        (bound, whole)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_operator_binding_wins_over_the_schema() {
        let mut named = BTreeMap::new();
        named.insert("read".to_owned(), Binding::named(["target"]).unwrap());
        let r = ArgumentRecording::new(named, false);
        let schema = json!({"properties": {"path": {"type": "string"}}});
        r.bind_schema("read", &schema);
        r.bind_schema("write", &schema);
        assert_eq!(r.binding("read").unwrap().names(), ["target"]);
        assert_eq!(r.binding("write").unwrap().names(), ["path"]);
        assert!(r.binding("other").is_none());
    }

    #[test]
    fn a_schema_text_is_read_once_and_a_changed_one_rebinds() {
        let r = ArgumentRecording::new(BTreeMap::new(), false);
        r.bind_schema_text("t", r#"{"properties":{"path":{}}}"#);
        r.bind_schema_text("t", r#"{"properties":{"path":{}}}"#);
        assert_eq!(r.binding("t").unwrap().names(), ["path"]);
        r.bind_schema_text("t", r#"{"properties":{"dir":{}}}"#);
        assert_eq!(r.binding("t").unwrap().names(), ["dir"]);
        // Not JSON, or JSON that reads two ways: the binding read before stays.
        r.bind_schema_text("t", "{");
        assert_eq!(r.binding("t").unwrap().names(), ["dir"]);
        r.bind_schema_text("t", r#"{"properties":{"path":{}},"properties":{}}"#);
        assert_eq!(r.binding("t").unwrap().names(), ["dir"]);
    }

    #[test]
    fn a_call_records_its_bound_arguments_and_whole_ones_only_when_asked() {
        let r = ArgumentRecording::new(BTreeMap::new(), false);
        r.bind_schema(
            "read",
            &json!({"properties": {"path": {"type": "string"}, "dest": {}}}),
        );
        let args = r#"{"content":"x","path":"../secret.txt"}"#;
        let (bound, whole) = r.of_call("read", Some(args));
        let bound = bound.unwrap();
        assert_eq!(bound.names, ["dest", "path"]);
        assert_eq!(bound.values, r#"{"path":"../secret.txt"}"#);
        assert_eq!(whole, None);
        let all = ArgumentRecording::new(BTreeMap::new(), true);
        assert_eq!(all.of_call("read", Some(args)), (None, Some(args.into())));
        assert_eq!(r.of_call("read", None), (None, None));
    }
}
