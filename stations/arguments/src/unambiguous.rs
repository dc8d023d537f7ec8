//! The one rule for "this JSON reads one way only", shared by every reader in the host.
//!
//! Readers disagree about JSON that is not strictly one value: two equal keys (Python and
//! serde_json keep the last, Go's `encoding/json` and many hand-written readers the
//! first), keys that Go folds together (`path`, `PATH`, `paţh` is not one but `paſh`
//! reading as `pash` is), a `__proto__` key (JavaScript that copies an object member by
//! member makes it the copy's prototype), text that only some parsers accept (`NaN`, a
//! lone surrogate escape, a trailing comma). A host that decides on one reading while
//! the tool or server acts on another is bypassed, so anything that can be read two ways
//! is refused, never resolved.
//!
//! # Guarantees
//! - [`read`] accepts exactly RFC 8259 text (serde_json's grammar, which refuses `NaN`,
//!   lone surrogates, trailing commas and comments) in which no object holds two keys that
//!   [`crate::fold`] maps to one string and no object holds a `__proto__` key, at any
//!   depth. Whatever it accepts, every conforming reader reads as the same tree.
//! - [`keys_collide`] is the key rule alone, for readers that scan instead of building a
//!   tree (the relay of `aegis wrap` streams frames and applies it per object).
//!
//! # Non-guarantees
//! - Numbers: an integer beyond 64 bits, or a decimal with more digits than a double
//!   holds, is read as the nearest double. A reader with arbitrary precision may see
//!   another value. Rules compare strings and paths; a numeric rule near such a value
//!   should not be relied on.
//!
//! # Limits
//! - Nesting deeper than 128 levels is refused (serde_json's recursion limit).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::fold;

/// Why a text cannot be read one way only.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Ambiguity {
    /// Not strict JSON (or deeper than the limit): some readers refuse it, others
    /// guess.
    #[error("not strict JSON: {0}")]
    NotJson(String),
    /// One object holds a key twice, or two keys that fold to one name.
    #[error("keys {first:?} and {second:?} of one object collide (readers keep either one)")]
    CollidingKeys {
        /// The earlier key.
        first: String,
        /// The later key.
        second: String,
    },
    /// An object holds a `__proto__` key.
    #[error("a \"__proto__\" key, which JavaScript reads as the object's prototype")]
    ProtoKey,
    /// The text is one JSON value but not the object it must be.
    #[error("expected one JSON object, found {0}")]
    NotAnObject(&'static str),
}

/// Whether two keys of one object collide: equal once folded as Go folds field names.
/// `__proto__` is refused on its own (see [`read`]).
pub fn keys_collide(a: &str, b: &str) -> bool {
    a == b || crate::folded(a).eq(crate::folded(b))
}

/// Reads `text` as one JSON value that every reader reads the same way.
///
/// # Errors
/// [`Ambiguity`]: the text is not strict JSON, or some object in it has colliding keys
/// or a `__proto__` key.
pub fn read(text: &[u8]) -> Result<Value, Ambiguity> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = Strict { found: &found }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match (value, found.into_inner()) {
        (_, Some(ambiguity)) => Err(ambiguity),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(Ambiguity::NotJson(e.to_string())),
    }
}

/// [`read`], and the value must be an object: a tool call's arguments.
///
/// # Errors
/// [`Ambiguity`], including [`Ambiguity::NotAnObject`].
pub fn read_object(text: &[u8]) -> Result<Map<String, Value>, Ambiguity> {
    match read(text)? {
        Value::Object(map) => Ok(map),
        Value::Null => Err(Ambiguity::NotAnObject("null")),
        Value::Bool(_) => Err(Ambiguity::NotAnObject("a boolean")),
        Value::Number(_) => Err(Ambiguity::NotAnObject("a number")),
        Value::String(_) => Err(Ambiguity::NotAnObject("a string")),
        Value::Array(_) => Err(Ambiguity::NotAnObject("an array")),
    }
}

/// A call's arguments as every front end gives them to the policy: [`read_object`],
/// then written as RFC 8785 canonical JSON ([`canonical_of`]). `aegis run`, the relay
/// of `aegis wrap`, the gateway and the pipeline (for what a station reports it read)
/// all use this one function, so one call's arguments have one text whichever front
/// end carried it.
///
/// # Errors
/// [`Ambiguity`]: the text does not read one way only, or is not one object.
pub fn canonical_object(text: &[u8]) -> Result<String, Ambiguity> {
    read_object(text).map(|map| canonical_of(&map))
}

/// An arguments object already read (by a reader that refused ambiguity) as RFC 8785
/// canonical JSON: members in UTF-16 key order, numbers as ECMAScript writes doubles.
pub fn canonical_of(map: &Map<String, Value>) -> String {
    // Writing a tree of strings, finite numbers, booleans and nulls cannot fail; an
    // empty string would be refused by every reader, never taken as `{}`.
    serde_json_canonicalizer::to_string(map).unwrap_or_default()
}

/// A value whose objects are checked as they are read. The first ambiguity found is kept
/// in `found`; the deserializer is then stopped with an error that carries no meaning.
#[derive(Clone, Copy)]
struct Strict<'f> {
    found: &'f RefCell<Option<Ambiguity>>,
}

impl Strict<'_> {
    fn fail<E: de::Error>(&self, ambiguity: Ambiguity) -> E {
        self.found.borrow_mut().get_or_insert(ambiguity);
        E::custom("ambiguous")
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        // Folded keys, each with the key as written, so an error names both spellings.
        let mut seen: HashSet<String> = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "__proto__" {
                return Err(self.fail(Ambiguity::ProtoKey));
            }
            if !seen.insert(fold(&key)) {
                let first = out
                    .keys()
                    .find(|k| keys_collide(k, &key))
                    .cloned()
                    .unwrap_or_else(|| key.clone());
                return Err(self.fail(Ambiguity::CollidingKeys { first, second: key }));
            }
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reading_only() {
        for text in [
            r#"{"path":"/data/x"}"#,
            r#"{"a":{"b":[{"c":1},{"c":2}]},"A1":null}"#,
            r#"[1,"x",{"k":true}]"#,
            r#"{"\u00e9":1,"e":2}"#,
            r#"{"proto":1,"__proto":2}"#,
            "  {\"x\":1}\n",
        ] {
            assert!(read(text.as_bytes()).is_ok(), "{text}");
        }
    }

    #[test]
    fn duplicates_and_folded_keys_collide_at_any_depth() {
        for (text, first, second) in [
            (r#"{"path":"/etc/shadow","path":"/data/x"}"#, "path", "path"),
            (r#"{"path":"/etc/shadow","PATH":"/data/x"}"#, "path", "PATH"),
            (r#"{"x":[{"k":1,"\u212a":2}]}"#, "k", "\u{212a}"),
            (
                r#"{"o":{"argumentſ":1,"arguments":2}}"#,
                "argumentſ",
                "arguments",
            ),
            ("{\"file\":1,\"f\u{131}le\":2}", "file", "f\u{131}le"),
            (r#"{"a":1,"b":{"c":1,"C":2}}"#, "c", "C"),
        ] {
            assert_eq!(
                read(text.as_bytes()),
                Err(Ambiguity::CollidingKeys {
                    first: first.into(),
                    second: second.into()
                }),
                "{text}"
            );
        }
        assert_eq!(
            read(br#"{"a":[{"__proto__":{"path":"/etc"}}]}"#),
            Err(Ambiguity::ProtoKey)
        );
    }

    #[test]
    fn text_only_some_readers_accept_is_not_json() {
        for text in [
            r#"{"n":NaN}"#,
            r#"{"n":Infinity}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"a":1,}"#,
            r#"{"a":1} {"a":2}"#,
            "{\"a\":1}\u{0}",
            r#"{'a':1}"#,
            "",
        ] {
            assert!(
                matches!(read(text.as_bytes()), Err(Ambiguity::NotJson(_))),
                "{text:?}"
            );
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(read(deep.as_bytes()), Err(Ambiguity::NotJson(_))));
    }

    #[test]
    fn arguments_are_one_object() {
        assert!(read_object(br#"{"a":1}"#).is_ok());
        assert_eq!(read_object(b"null"), Err(Ambiguity::NotAnObject("null")));
        assert_eq!(read_object(b"[]"), Err(Ambiguity::NotAnObject("an array")));
        assert_eq!(
            read_object(br#""{\"a\":1}""#),
            Err(Ambiguity::NotAnObject("a string"))
        );
    }
}
