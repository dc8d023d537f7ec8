//! What a policy station reads of a tool call's arguments.
//!
//! The host gives a station the call's arguments as canonical JSON text, or nothing when
//! it has none to give. This crate reads them the way a rule must, so that what a rule
//! compares is what the server will act on, and shares that reading between stations.
//!
//! # Guarantees
//! - [`unambiguous::read`] is the host's one rule for JSON that reads one way only (no
//!   two keys of an object that fold together, no `__proto__`, strict grammar). The
//!   pipeline refuses a call whose arguments fail it, and [`Arguments::parse`] reads
//!   such text as unknown.
//! - [`Arguments::get`] answers unknown (`None`) when the arguments were not given, or
//!   when another key of the same object folds to the name asked for (lowercase, `ſ`
//!   read as `s`): a server in Go fills a `path` field from `"PATH"`, so a rule reading
//!   `path` cannot tell which key the server reads. The relay of `aegis wrap` refuses
//!   such frames already; this keeps every caller safe.
//! - [`normalise`] resolves `.`, `..` (never above `/`) and repeated slashes lexically,
//!   and percent-decodes a `file://` URI first. What it cannot place has no normal form:
//!   a relative path, `~`, a NUL, a URI naming a host, an invalid escape.
//! - [`is_under`] compares whole components: `/database` is not under `/data`.
//!
//! # Non-guarantees
//! - Normalisation is lexical. It cannot see symlinks (`/data/link` may point at
//!   `/etc`), and the kernel resolves `link/..` through the link. Confine the server
//!   to hold a path boundary against one that follows links.

use serde_json::{Map, Value};

pub mod binding;
pub mod unambiguous;

/// A call's arguments as a station sees them.
#[derive(Clone, Debug)]
pub enum Arguments {
    /// The caller did not give them (or gave something that is not one JSON object).
    Unknown,
    /// The call's arguments object.
    Known(Map<String, Value>),
    /// Some of the call's arguments, as a record states them
    /// ([`binding::Projection`]): the names listed are known (present in the map, or
    /// absent from the call); any other name is unknown.
    Partial {
        /// The values of the known names the call gave, keyed by
        /// [`binding::canonical_name`].
        values: Map<String, Value>,
        /// The known names, in [`binding::canonical_name`] form.
        known: Vec<String>,
    },
}

impl Arguments {
    /// Parses the canonical JSON the host passes; `None` is unknown. Text that is not
    /// one JSON object, read one way only ([`unambiguous::read_object`]), is unknown
    /// too, so a rule over it cannot allow.
    pub fn parse(text: Option<&str>) -> Arguments {
        match text.map(|t| unambiguous::read_object(t.as_bytes())) {
            Some(Ok(map)) => Arguments::Known(map),
            _ => Arguments::Unknown,
        }
    }

    /// The value named `name` (a key, or a JSON Pointer): `None` when it cannot be
    /// known, `Some(None)` when the call has no such argument.
    pub fn get(&self, name: &str) -> Option<Option<&Value>> {
        match self {
            Arguments::Known(map) => lookup(map, name),
            Arguments::Partial { values, known } => {
                let name = binding::canonical_name(name)?;
                known.contains(&name).then(|| values.get(&name))
            }
            Arguments::Unknown => None,
        }
    }

    /// The arguments a record states: `values`, the canonical JSON text of the bound
    /// values, and `known`, the names it states. Text that is not one JSON object read
    /// one way only is unknown altogether.
    pub fn partial(values: &str, known: &[&str]) -> Arguments {
        match unambiguous::read_object(values.as_bytes()) {
            Ok(values) => Arguments::Partial {
                values,
                known: known
                    .iter()
                    .filter_map(|k| binding::canonical_name(k))
                    .collect(),
            },
            Err(_) => Arguments::Unknown,
        }
    }
}

/// [`Arguments::get`] on an arguments object held elsewhere: the value named `name` (a
/// key, or a JSON Pointer), `None` when it cannot be known, `Some(None)` when absent.
pub fn lookup<'m>(map: &'m Map<String, Value>, name: &str) -> Option<Option<&'m Value>> {
    if !name.starts_with('/') {
        return member(map, name);
    }
    let mut at: Option<&Value> = None;
    for (i, token) in name.split('/').skip(1).enumerate() {
        let token = token.replace("~1", "/").replace("~0", "~");
        at = match (i, at) {
            (0, _) => member(map, &token)?,
            (_, Some(Value::Object(o))) => member(o, &token)?,
            (_, Some(Value::Array(a))) => a.get(token.parse::<usize>().ok()?),
            // A step into null is a miss. A step into a string, number or bool is
            // not: servers parse a string that holds JSON (the Python SDK does for
            // parameters that are not strings), so what is inside cannot be known.
            (_, Some(Value::Null)) => None,
            (_, Some(_)) => return None,
            (_, None) => None,
        };
        if at.is_none() {
            break;
        }
    }
    Some(at)
}

/// `map[key]`, or `None` (unknown) when another key folds to the same name (a server
/// in Go matches JSON keys case-insensitively: `"PATH"` fills a `path` field, so a rule
/// reading `path` cannot tell which one the server will read), or when the object has
/// a `__proto__` key (JavaScript that merges an object member by member makes it the
/// copy's prototype, through which any name can then be read).
fn member<'m>(map: &'m Map<String, Value>, key: &str) -> Option<Option<&'m Value>> {
    if map.contains_key("__proto__") {
        return None;
    }
    let folded = fold(key);
    if map.keys().any(|k| k != key && fold(k) == folded) {
        return None;
    }
    Some(map.get(key))
}

/// `key` as Go's `encoding/json` compares field names: each character through
/// `unicode.ToUpper(unicode.ToLower(r))`, with simple (one-character) case mappings.
/// So `k`, `K` and the Kelvin sign are one, as are `s`, `S` and `ſ`, and `i`, `I`,
/// `ı` (dotless) and `İ` (dotted capital). The relay of `aegis wrap` counts two keys
/// that fold equal as colliding; a policy station treats such a key as unknown.
pub fn fold(key: &str) -> String {
    folded(key).collect()
}

/// [`fold`], one character at a time.
pub fn folded(key: &str) -> impl Iterator<Item = char> + '_ {
    key.chars().map(fold_char)
}

/// One character of [`fold`]. An ASCII character's simple lowercase and its uppercase
/// are ASCII, so it folds to its ASCII uppercase; that skips the Unicode tables, which
/// matters because keys are nearly all ASCII and the relay folds every key of a frame.
fn fold_char(c: char) -> char {
    if c.is_ascii() {
        c.to_ascii_uppercase()
    } else {
        simple_upper(simple_lower(c))
    }
}

/// The one-character lowercase of `c`. Only U+0130 (`İ`) lowercases to more than one
/// character (`i` and a combining dot); its simple mapping, Go's, is the first: `i`.
fn simple_lower(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

/// The one-character uppercase of `c`, or `c` when it has none (`ß` uppercases to
/// `SS`, which is not a simple mapping; Go leaves it).
fn simple_upper(c: char) -> char {
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) => u,
        _ => c,
    }
}

/// Whether normalised `path` is `root` or beneath it, component by component.
pub fn is_under(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// `raw` as an absolute path with `.`, `..` and repeated slashes resolved lexically;
/// a `file://` URI is percent-decoded first. `None` when that cannot be done honestly:
/// a relative path, `~`, a NUL, a URI with a host or an invalid escape, and a URI that
/// URL parsers read differently from its characters: one with a query or fragment
/// (`?`, `#`, which they drop, so `file:///etc/x#/../../data` opens `/etc/x`), a
/// backslash (a separator to the WHATWG parser Node uses), a control character (which
/// it deletes), or a space at either end (which it trims).
pub fn normalise(raw: &str) -> Option<String> {
    let decoded;
    let path = match raw.strip_prefix("file://") {
        Some(rest) => {
            let read_otherwise = |c: char| matches!(c, '?' | '#' | '\\') || c.is_control();
            if rest.chars().any(read_otherwise) || rest.ends_with(' ') {
                return None;
            }
            let rest = rest.strip_prefix("localhost").unwrap_or(rest);
            decoded = percent_decode(rest)?;
            decoded.as_str()
        }
        None => raw,
    };
    if !path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = String::with_capacity(path.len());
    for p in &parts {
        out.push('/');
        out.push_str(p);
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_resolves_dots_lexically_and_refuses_what_it_cannot_place() {
        for (raw, want) in [
            ("/data/x", Some("/data/x")),
            ("/data/../etc/passwd", Some("/etc/passwd")),
            ("/data/./../etc", Some("/etc")),
            ("//data//x/", Some("/data/x")),
            ("/../../etc", Some("/etc")),
            ("/", Some("/")),
            ("/data/..", Some("/")),
            ("file:///data/%2e%2e/etc", Some("/etc")),
            ("file://localhost/data/a%20b", Some("/data/a b")),
            ("data/x", None),
            ("../etc", None),
            ("~/secrets", None),
            ("", None),
            ("/data/\0x", None),
            ("file://host.example/data", None),
            ("file:///data/%zz", None),
            ("file:///data/%ff", None),
            ("file:///etc/shadow#/../../data/x", None),
            ("file:///etc/shadow?/../../data/x", None),
            ("file://localhost/etc/x#/../../data", None),
            ("file:///data/..\\..\\etc\\passwd", None),
            ("file:///data/.\t./etc/passwd", None),
            ("file:///data/..\n/etc", None),
            ("file:///data/.. ", None),
            ("/data/#/../x", Some("/data/x")),
        ] {
            assert_eq!(normalise(raw).as_deref(), want, "{raw:?}");
        }
    }

    #[test]
    fn under_compares_whole_components() {
        assert!(is_under("/data", "/data"));
        assert!(is_under("/data/x", "/data"));
        assert!(!is_under("/database", "/data"));
        assert!(!is_under("/dat", "/data"));
        assert!(is_under("/anything", "/"));
    }

    #[test]
    fn ascii_folds_as_the_unicode_tables_say() {
        for c in (0..=0x7f_u8).map(char::from) {
            assert_eq!(fold_char(c), simple_upper(simple_lower(c)), "{c:?}");
        }
        assert_eq!(fold("\u{212a}ey-\u{17f}"), "KEY-S");
    }

    #[test]
    fn a_key_that_folds_to_the_name_makes_it_unknown() {
        let a = Arguments::parse(Some(r#"{"path":"/a","opts":{"Depth":1}}"#));
        assert_eq!(a.get("/opts/Depth"), Some(Some(&Value::from(1))));
        assert_eq!(a.get("/opts/depth"), None);
        assert_eq!(a.get("missing"), Some(None));
        let k = Arguments::parse(Some("{\"\u{212a}ey\":1}"));
        assert_eq!(k.get("key"), None, "the Kelvin sign lowercases to k");
        for spoof in ["f\u{131}le", "f\u{130}le", "FILE", "fil\u{c9}"] {
            let a = Arguments::Known(Map::from_iter([(spoof.to_owned(), Value::from(1))]));
            let same = spoof != "fil\u{c9}";
            assert_eq!(a.get("file").is_none(), same, "{spoof:?}");
        }
        let proto = Arguments::parse(Some(r#"{"__proto__":{"path":"/etc"},"mode":"r"}"#));
        assert_eq!(proto.get("path"), None);
        assert_eq!(proto.get("mode"), None);
        let typed = Arguments::parse(Some(
            r#"{"s":"{\"path\":\"/etc\"}","n":null,"a":[{"path":"/etc"}],"b":true}"#,
        ));
        assert_eq!(typed.get("/s/path"), None, "inside a string: unknown");
        assert_eq!(typed.get("/b/path"), None);
        assert_eq!(typed.get("/a/path"), None, "a name into a list: unknown");
        assert_eq!(typed.get("/a/0/path"), Some(Some(&Value::from("/etc"))));
        assert_eq!(typed.get("/a/1/path"), Some(None));
        assert_eq!(typed.get("/n/path"), Some(None), "inside null: a miss");
        // Text that reads two ways is unknown as a whole, whichever key is asked for.
        assert!(matches!(
            Arguments::parse(Some(r#"{"a":{"a":1},"b":[{"a":2}]}"#)),
            Arguments::Known(_)
        ));
        for t in [
            r#"{"path":"/etc/shadow","path":"/data/x"}"#,
            r#"{"x":[{"k":1,"\u212a":2}]}"#,
            r#"{"o":{"__proto__":{}}}"#,
            "{\"file\":1,\"f\u{131}le\":2}",
            r#"{"path":"/data/x","n":NaN}"#,
        ] {
            let a = Arguments::parse(Some(t));
            assert!(matches!(a, Arguments::Unknown), "{t}");
            assert_eq!(a.get("path"), None, "{t}");
        }
        assert_eq!(Arguments::parse(None).get("path"), None);
        assert_eq!(Arguments::parse(Some("[1]")).get("path"), None);
        let p = Arguments::parse(Some(r#"{"a/b":{"~c":[10,20]}}"#));
        assert_eq!(p.get("/a~1b/~0c/1"), Some(Some(&Value::from(20))));
        assert_eq!(p.get("/a~1b/~0c/2"), Some(None));
    }
}
