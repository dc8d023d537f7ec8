//! A small JSON reader that keeps what a relay must not lose, and a canonical writer.
//!
//! serde_json keeps the last of two equal keys and forgets the text of a number; a relay
//! that decides on one reading of a frame while the server acts on another is bypassed.
//! So this reader keeps every member (duplicates included), the exact source bytes of
//! every value, and notes keys that collide.
//!
//! It builds no tree. [`parse`] checks the whole text once and hands back a [`Node`]: the
//! value's exact source text, known to be well formed. A node is read on demand
//! ([`Node::value`], [`Object::lookup`], [`Array::items`]) by scanning its text again, so
//! reading one member costs a pass over its object and no memory per value, and the parts
//! of a frame the relay never looks at (a call's `arguments`, a result's `content`) are
//! checked and never held.
//!
//! # Guarantees
//! - The grammar is RFC 8259, plus the tokens `NaN`, `Infinity` and `-Infinity`: Python's
//!   `json` accepts those by default, and a frame a server reads must never be one the
//!   relay cannot classify.
//! - Lone surrogate escapes (`"\ud800"`) are accepted, as JavaScript and Python accept
//!   them; the decoded text holds U+FFFD in their place and [`Str::exact`] is false.
//! - Two keys of one object *collide* when they are equal after Go's folding (each
//!   character through simple lowercase, then simple uppercase): so `K`, `k` and the
//!   Kelvin sign are one, as are `s` and `ſ`, and `i`, `ı` and `İ`. That is wider than
//!   equality on purpose: Go's `encoding/json` matches struct fields that way, so
//!   `"Name"`, `"nameſ"` or `"fıle"`-style keys can override another in a Go server.
//! - A `__proto__` key counts as a collision too: JavaScript code that copies a parsed
//!   object member by member turns it into the copy's prototype, and a field the relay did
//!   not see (`arguments`) can then be read through it.
//!
//! # Limits
//! - Nesting deeper than [`MAX_DEPTH`] is refused, so hostile frames cannot exhaust the
//!   stack.
//! - A text of more than [`MAX_VALUES`] values is refused, whatever the frame bound: the
//!   work and memory one frame can cost stay bounded even if an operator raises it.
//! - [`Node::has_colliding_keys`] remembers a 64-bit keyed hash per key of each object
//!   still open (8 bytes a key, 24 while its list grows), not the keys. Two different
//!   keys with equal hashes count as a collision: the frame is refused, never let through.
//!   With a random key per pass, that happens about once in 2^64 / n² frames of n keys.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher, RandomState};

/// How deeply arrays and objects may nest. MCP messages need a handful of levels; tool
/// schemas a few dozen at most.
pub(crate) const MAX_DEPTH: usize = 128;

/// How many values (each scalar, array and object counts one) a text may hold.
///
/// 2^20. Real JSON spends well over four bytes a value (a key, quotes, a separator), so
/// the default 4 MiB frame holds fewer than a million values of any real message, even a
/// result that is one long array of small numbers; only padding such as `[0,0,…]` (two
/// bytes a value) goes past it.
pub(crate) const MAX_VALUES: usize = 1 << 20;

/// A decoded string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Str<'a> {
    /// The decoded text (lone surrogates replaced by U+FFFD); borrowed when the source
    /// has no escapes.
    pub text: Cow<'a, str>,
    /// False when a lone surrogate was replaced, so `text` is not what a peer decodes.
    pub exact: bool,
}

/// A well-formed JSON value: its exact source text, without surrounding whitespace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node<'a> {
    text: &'a str,
}

/// What a node holds, read from its first byte (strings decoded).
#[derive(Debug)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    /// The number's source text (ASCII), e.g. `1`, `1.0`, `-2e5`, `NaN`.
    Number(&'a str),
    String(Str<'a>),
    Array(Array<'a>),
    Object(Object<'a>),
}

/// An array, read element by element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Array<'a> {
    text: &'a str,
}

/// An object, read member by member in source order, duplicates included.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Object<'a> {
    text: &'a str,
}

/// What a lookup by key found.
pub(crate) enum Lookup<'a> {
    Absent,
    One(Node<'a>),
    /// The key, or a key colliding with it, appears more than once.
    Ambiguous,
}

impl<'a> Node<'a> {
    /// The exact source bytes.
    pub fn raw(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The exact source text.
    pub fn raw_text(&self) -> &'a str {
        self.text
    }

    /// What the node holds.
    pub fn value(&self) -> Value<'a> {
        match self.text.as_bytes().first() {
            Some(b'{') => Value::Object(Object { text: self.text }),
            Some(b'[') => Value::Array(Array { text: self.text }),
            Some(b'"') => Value::String(decode(self.text)),
            Some(b't') => Value::Bool(true),
            Some(b'f') => Value::Bool(false),
            Some(b'n') | None => Value::Null,
            Some(_) => Value::Number(self.text),
        }
    }

    /// The node as an object, if it is one.
    pub fn object(&self) -> Option<Object<'a>> {
        match self.value() {
            Value::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The node's text if it is a string that decodes exactly.
    pub fn exact_str(&self) -> Option<Cow<'a, str>> {
        match self.value() {
            Value::String(s) if s.exact => Some(s.text),
            _ => None,
        }
    }

    /// True when any object in this value has colliding keys.
    pub fn has_colliding_keys(&self) -> bool {
        let mut scan = Scanner::new(self.text, usize::MAX);
        scan.keys = Some(RandomState::new());
        // The text was checked when it was parsed; a failure here cannot happen, and
        // would count as a collision (refused, never let through).
        scan.value(0).is_err() || scan.colliding
    }
}

/// Decodes a string node's text; a text that is not a string decodes to nothing inexact.
fn decode(text: &str) -> Str<'_> {
    let inner = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or("");
    if !inner.contains('\\') {
        return Str {
            text: Cow::Borrowed(inner),
            exact: true,
        };
    }
    let mut out = String::new();
    let mut scan = Scanner::new(text, usize::MAX);
    match scan.string(Some(&mut out)) {
        Ok(exact) => Str {
            text: Cow::Owned(out),
            exact,
        },
        Err(_) => Str {
            text: Cow::Borrowed(""),
            exact: false,
        },
    }
}

impl<'a> Array<'a> {
    /// The elements, in order.
    pub fn items(&self) -> Items<'a> {
        let mut scan = Scanner::new(self.text, usize::MAX);
        scan.pos = 1;
        Items { scan, done: false }
    }
}

impl<'a> Object<'a> {
    /// The members, in source order.
    pub fn members(&self) -> Members<'a> {
        let mut scan = Scanner::new(self.text, usize::MAX);
        scan.pos = 1;
        Members { scan, done: false }
    }

    /// Finds `key`, refusing to choose when a colliding key also appears.
    pub fn lookup(&self, key: &str) -> Lookup<'a> {
        let [found] = self.lookup_each([key]);
        found
    }

    /// [`Object::lookup`] of each of `keys`, in one pass over the members.
    pub fn lookup_each<const N: usize>(&self, keys: [&str; N]) -> [Lookup<'a>; N] {
        // Folded copies are built only when a key or a name is not ASCII (nearly never).
        let mut folded_keys: [Option<String>; N] = std::array::from_fn(|_| None);
        let mut found = [None; N];
        let mut count = [0usize; N];
        for (name, node) in self.members() {
            let mut folded_name = None;
            for (i, key) in keys.iter().enumerate() {
                let collides = if name.text.is_ascii() && key.is_ascii() {
                    name.text.eq_ignore_ascii_case(key)
                } else {
                    let folded_name = folded_name.get_or_insert_with(|| fold(&name.text));
                    *folded_name == *folded_keys[i].get_or_insert_with(|| fold(key))
                };
                if collides {
                    count[i] += 1;
                    if name.text == *key && name.exact {
                        found[i] = Some(node);
                    }
                }
            }
        }
        std::array::from_fn(|i| match (count[i], found[i]) {
            (0, _) => Lookup::Absent,
            (1, Some(node)) => Lookup::One(node),
            // A single colliding key that is not exactly `key` ("Method") is ambiguous:
            // some servers read it as `key`.
            _ => Lookup::Ambiguous,
        })
    }
}

impl<'a> Object<'a> {
    /// Each member with where it lies in the object's text: the member from its key's
    /// quote to its value's end, and the value alone.
    fn spans(&self) -> impl Iterator<Item = MemberSpan<'a>> + use<'a> {
        let mut scan = Scanner::new(self.text, usize::MAX);
        scan.pos = 1;
        std::iter::from_fn(move || {
            scan.skip_ws();
            scan.eat(",");
            scan.skip_ws();
            let start = scan.pos;
            let (name, value) = scan.member()?;
            Some(MemberSpan {
                name,
                member: start..scan.pos,
                value: scan.pos - value.raw_text().len()..scan.pos,
            })
        })
    }

    /// The object's text without its members whose keys collide with one of `keys`
    /// (every spelling, as [`Object::lookup`] counts them): the text before the first
    /// member and after the last as it was, each kept member byte for byte, one `,`
    /// between two. The object's own text when no member is named.
    pub(crate) fn without(&self, keys: &[&str]) -> Cow<'a, str> {
        let spans: Vec<MemberSpan<'a>> = self.spans().collect();
        let named = |span: &MemberSpan<'_>| keys.iter().any(|key| collide(&span.name.text, key));
        if !spans.iter().any(named) {
            return Cow::Borrowed(self.text);
        }
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            return Cow::Borrowed(self.text);
        };
        let mut out = String::with_capacity(self.text.len());
        out.push_str(&self.text[..first.member.start]);
        let kept: Vec<&str> = spans
            .iter()
            .filter(|span| !named(span))
            .map(|span| &self.text[span.member.clone()])
            .collect();
        out.push_str(&kept.join(","));
        out.push_str(&self.text[last.member.end..]);
        Cow::Owned(out)
    }

    /// The object's text with the value of its member `key` replaced by `value`,
    /// everything else byte for byte; `None` unless exactly one member is named by a key
    /// colliding with `key`, and it is `key` itself.
    pub(crate) fn replacing(&self, key: &str, value: &str) -> Option<String> {
        if !matches!(self.lookup(key), Lookup::One(_)) {
            return None;
        }
        let span = self
            .spans()
            .find(|span| span.name.text == key && span.name.exact)?;
        let mut out = String::with_capacity(self.text.len() + value.len());
        out.push_str(&self.text[..span.value.start]);
        out.push_str(value);
        out.push_str(&self.text[span.value.end..]);
        Some(out)
    }
}

/// One member of an object, by place (see [`Object::spans`]).
struct MemberSpan<'a> {
    name: Str<'a>,
    member: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
}

/// Whether a member named `name` collides with `key` (Go's folding, as
/// [`Object::lookup_each`] decides it).
fn collide(name: &str, key: &str) -> bool {
    if name.is_ascii() && key.is_ascii() {
        name.eq_ignore_ascii_case(key)
    } else {
        fold(name) == fold(key)
    }
}

/// An array's elements (see [`Array::items`]).
pub(crate) struct Items<'a> {
    scan: Scanner<'a>,
    done: bool,
}

impl<'a> Iterator for Items<'a> {
    type Item = Node<'a>;

    fn next(&mut self) -> Option<Node<'a>> {
        if self.done {
            return None;
        }
        let s = &mut self.scan;
        s.skip_ws();
        s.eat(",");
        s.skip_ws();
        if s.eat("]") {
            self.done = true;
            return None;
        }
        match s.node(1) {
            Ok(node) => Some(node),
            Err(_) => {
                self.done = true;
                None
            }
        }
    }
}

/// An object's members (see [`Object::members`]).
pub(crate) struct Members<'a> {
    scan: Scanner<'a>,
    done: bool,
}

impl<'a> Iterator for Members<'a> {
    type Item = (Str<'a>, Node<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let member = self.scan.member();
        if member.is_none() {
            self.done = true;
        }
        member
    }
}

// The folding used to decide that two keys collide: Go's, shared with the policy
// stations so that a key the relay lets through is one they read the same way.
use aegis_policy_arguments::{fold, folded};

/// Why a document was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ParseError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("{what} at byte {at}")]
    Syntax { what: &'static str, at: usize },
    #[error("nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("more than {MAX_VALUES} values")]
    TooManyValues,
}

impl ParseError {
    /// True when the text may be JSON the reader refused only for its size or depth.
    pub fn is_bound(&self) -> bool {
        matches!(self, ParseError::TooDeep | ParseError::TooManyValues)
    }
}

/// Parses one JSON text; surrounding JSON whitespace is allowed, anything else is not.
pub(crate) fn parse(bytes: &[u8]) -> Result<Node<'_>, ParseError> {
    parse_with(bytes, None).map(|(node, _)| node)
}

/// [`parse`], and in the same pass whether any object in the text has colliding keys
/// (as [`Node::has_colliding_keys`] would say after it).
pub(crate) fn parse_noting_collisions(bytes: &[u8]) -> Result<(Node<'_>, bool), ParseError> {
    parse_with(bytes, Some(RandomState::new()))
}

fn parse_with(bytes: &[u8], keys: Option<RandomState>) -> Result<(Node<'_>, bool), ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::NotUtf8)?;
    let mut scan = Scanner::new(text, MAX_VALUES);
    scan.keys = keys;
    scan.skip_ws();
    let node = scan.node(0)?;
    scan.skip_ws();
    if scan.pos != text.len() {
        return Err(scan.err("data after the value"));
    }
    Ok((node, scan.colliding))
}

/// Reads as many members of the object at the start of `bytes` as are well formed, and
/// looks `key` up among them as [`Object::lookup`] does. For a frame that is not JSON, or
/// over a bound: its id may still be readable. `None` when `bytes` does not start as an
/// object.
pub(crate) fn leading_lookup<'a>(bytes: &'a [u8], key: &str) -> Option<Lookup<'a>> {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?,
    };
    let mut scan = Scanner::new(text, MAX_VALUES);
    scan.skip_ws();
    if !scan.eat("{") {
        return None;
    }
    let folded_key = fold(key);
    let mut found = None;
    let mut count = 0;
    while let Some((name, node)) = scan.member() {
        if fold(&name.text) == folded_key {
            count += 1;
            if name.text == key && name.exact {
                found = Some(node);
            }
        }
    }
    Some(match (count, found) {
        (0, _) => Lookup::Absent,
        (1, Some(node)) => Lookup::One(node),
        _ => Lookup::Ambiguous,
    })
}

/// A pass over JSON text: checks it, or skips a value already checked.
struct Scanner<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
    /// Values read so far, and how many may be.
    values: usize,
    max_values: usize,
    /// Set when collisions are looked for: the key of this pass's hashes.
    keys: Option<RandomState>,
    colliding: bool,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str, max_values: usize) -> Self {
        Scanner {
            src: text.as_bytes(),
            text,
            pos: 0,
            values: 0,
            max_values,
            keys: None,
            colliding: false,
        }
    }

    fn err(&self, what: &'static str) -> ParseError {
        ParseError::Syntax { what, at: self.pos }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.src[self.pos.min(self.src.len())..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    /// Reads one value and hands back its text.
    fn node(&mut self, depth: usize) -> Result<Node<'a>, ParseError> {
        let start = self.pos;
        self.value(depth)?;
        let text = self
            .text
            .get(start..self.pos)
            .ok_or(self.err("bad slice"))?;
        Ok(Node { text })
    }

    /// Reads the next `"key": value` of an object whose `{` (and any members before)
    /// were read, with the `,` before it; `None` at the `}` or at anything malformed.
    fn member(&mut self) -> Option<(Str<'a>, Node<'a>)> {
        self.skip_ws();
        self.eat(",");
        self.skip_ws();
        if self.src.get(self.pos) != Some(&b'"') {
            return None;
        }
        let key = self.node(1).ok()?;
        self.skip_ws();
        if !self.eat(":") {
            return None;
        }
        self.skip_ws();
        let node = self.node(1).ok()?;
        Some((decode(key.text), node))
    }

    fn value(&mut self, depth: usize) -> Result<(), ParseError> {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        self.values += 1;
        if self.values > self.max_values {
            return Err(ParseError::TooManyValues);
        }
        match self.src.get(self.pos) {
            None => Err(self.err("unexpected end")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string(None).map(drop),
            Some(b't') if self.eat("true") => Ok(()),
            Some(b'f') if self.eat("false") => Ok(()),
            Some(b'n') if self.eat("null") => Ok(()),
            Some(b'N') if self.eat("NaN") => Ok(()),
            Some(b'I') if self.eat("Infinity") => Ok(()),
            Some(b'-') if self.eat("-Infinity") => Ok(()),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.src.get(self.pos) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), ParseError> {
        self.eat("-");
        match self.src.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("bad number")),
        }
        if self.eat(".") && self.digits() == 0 {
            return Err(self.err("bad fraction"));
        }
        if let Some(b'e' | b'E') = self.src.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.src.get(self.pos) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("bad exponent"));
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let hex = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.err("bad \\u escape"));
        }
        self.pos += 4;
        u16::from_str_radix(hex, 16).map_err(|_| self.err("bad \\u escape"))
    }

    /// Reads a string, decoding it into `out` when given; returns whether it decoded
    /// exactly (no lone surrogate).
    fn string(&mut self, mut out: Option<&mut String>) -> Result<bool, ParseError> {
        self.pos += 1; // the opening quote
        let mut exact = true;
        loop {
            let run_start = self.pos;
            while let Some(&b) = self.src.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            if let Some(out) = out.as_deref_mut() {
                out.push_str(self.text.get(run_start..self.pos).unwrap_or_default());
            }
            match self.src.get(self.pos) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(exact);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escape = *self
                        .src
                        .get(self.pos)
                        .ok_or_else(|| self.err("bad escape"))?;
                    self.pos += 1;
                    let c = match escape {
                        b'"' => Some('"'),
                        b'\\' => Some('\\'),
                        b'/' => Some('/'),
                        b'b' => Some('\u{8}'),
                        b'f' => Some('\u{c}'),
                        b'n' => Some('\n'),
                        b'r' => Some('\r'),
                        b't' => Some('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            if (0xd800..0xdc00).contains(&unit)
                                && self.src[self.pos..].starts_with(b"\\u")
                            {
                                let save = self.pos;
                                self.pos += 2;
                                let low = self.hex4()?;
                                if (0xdc00..0xe000).contains(&low) {
                                    let code = 0x10000
                                        + ((u32::from(unit) - 0xd800) << 10)
                                        + (u32::from(low) - 0xdc00);
                                    char::from_u32(code)
                                } else {
                                    self.pos = save;
                                    None
                                }
                            } else {
                                char::from_u32(u32::from(unit))
                            }
                        }
                        _ => return Err(self.err("bad escape")),
                    };
                    if c.is_none() {
                        exact = false;
                    }
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c.unwrap_or('\u{fffd}'));
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), ParseError> {
        self.pos += 1;
        self.skip_ws();
        if self.eat("]") {
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.value(depth + 1)?;
            self.skip_ws();
            if self.eat("]") {
                return Ok(());
            }
            if !self.eat(",") {
                return Err(self.err("expected , or ]"));
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), ParseError> {
        self.pos += 1;
        // Hashes of this object's folded keys, when collisions are looked for: sorted at
        // the end, so an object of n keys costs n log n, not n² comparisons, and 8 bytes
        // a key while it is open.
        let mut seen: Vec<u64> = Vec::new();
        self.skip_ws();
        if self.eat("}") {
            return Ok(());
        }
        loop {
            self.skip_ws();
            if self.src.get(self.pos) != Some(&b'"') {
                return Err(self.err("expected a key"));
            }
            let start = self.pos;
            self.string(None)?;
            if let Some(state) = &self.keys {
                let key = decode(self.text.get(start..self.pos).unwrap_or_default());
                let mut hasher = state.build_hasher();
                for c in folded(&key.text) {
                    hasher.write_u32(u32::from(c));
                }
                // A replaced surrogate makes two distinct keys look equal; count it as a
                // collision too, since we cannot tell what the peer reads.
                seen.push(hasher.finish());
                if !key.exact || key.text == "__proto__" {
                    self.colliding = true;
                }
            }
            self.skip_ws();
            if !self.eat(":") {
                return Err(self.err("expected :"));
            }
            self.skip_ws();
            self.value(depth + 1)?;
            self.skip_ws();
            if self.eat("}") {
                seen.sort_unstable();
                if seen.windows(2).any(|pair| pair[0] == pair[1]) {
                    self.colliding = true;
                }
                return Ok(());
            }
            if !self.eat(",") {
                return Err(self.err("expected , or }"));
            }
        }
    }
}

/// Appends `text` as a JSON string with the minimal escapes of RFC 8785.
pub(crate) fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends the canonical form (RFC 8785) of `node`.
///
/// Numbers are read as IEEE doubles and written as ECMAScript's `Number::toString` does,
/// as RFC 8785 prescribes; so `1.0`, `1` and `1e0` are one number, and integers beyond
/// 2^53 lose precision exactly as in every JCS implementation. `NaN`, `Infinity`,
/// `-Infinity` and numbers that overflow a double have no JCS form; they are written as
/// their source text, which keeps them distinct from every finite number.
pub(crate) fn write_canonical(node: Node<'_>, out: &mut String) {
    match node.value() {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        Value::Number(text) => match text.parse::<f64>() {
            Ok(x) if x.is_finite() => write_es_number(x, out),
            _ => out.push_str(text),
        },
        Value::String(s) => write_string(&s.text, out),
        Value::Array(array) => {
            out.push('[');
            for (i, item) in array.items().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut members: Vec<(Str<'_>, Node<'_>)> = object.members().collect();
            // Stable sort: duplicates keep source order (pins treat them as a change anyway).
            members.sort_by(|(a, _), (b, _)| a.text.encode_utf16().cmp(b.text.encode_utf16()));
            out.push('{');
            for (i, (key, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(&key.text, out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
    }
}

/// ECMAScript `Number::toString` for a finite double. ryu-js, as the arguments' writer
/// uses (`aegis_policy_arguments`): a hand-made formatter over Rust's shortest digits
/// broke ECMAScript's ties the other way (`600000000000000.2` came out `.3`).
fn write_es_number(x: f64, out: &mut String) {
    out.push_str(ryu_js::Buffer::new().format_finite(x));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        let mut out = String::new();
        write_canonical(parse(text.as_bytes()).unwrap(), &mut out);
        out
    }

    #[test]
    fn numbers_follow_ecmascript() {
        // From RFC 8785 appendix B and ECMAScript's rules.
        for (input, want) in [
            ("0", "0"),
            ("-0", "0"),
            ("1.0", "1"),
            ("1e0", "1"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345680000", "123456789012345680000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1.5e-7", "1.5e-7"),
            ("-1.25", "-1.25"),
            ("333333333.33333329", "333333333.3333333"),
            ("4.50", "4.5"),
            ("9007199254740993", "9007199254740992"),
            // Two shortest spellings, .2 and .3, lie equally near the double (…0.25):
            // ECMAScript takes the even digit.
            ("600000000000000.2", "600000000000000.2"),
            ("1e400", "1e400"),
            ("NaN", "NaN"),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
    }

    #[test]
    fn keys_sort_by_utf16_and_strings_escape_minimally() {
        assert_eq!(
            canonical(
                "{\"\u{e000}\":1, \"\u{1f600}\":2, \"b\":[true,null], \"a\":\"\\u000f\\/\u{7f}\"}"
            ),
            "{\"a\":\"\\u000f/\u{7f}\",\"b\":[true,null],\"\u{1f600}\":2,\"\u{e000}\":1}"
        );
    }

    #[test]
    fn duplicate_and_folded_keys_collide() {
        for text in [
            r#"{"a":1,"a":2}"#,
            r#"{"name":1,"NAME":2}"#,
            r#"{"params":1,"paramſ":2}"#,
            "{\"file\":1,\"f\u{131}le\":2}",
            "{\"file\":1,\"f\u{130}le\":2}",
            r#"{"x":[{"k":1,"\u212a":2}]}"#,
            r#"{"\ud800":1}"#,
            r#"{"name":"a","__proto__":{"arguments":{}}}"#,
        ] {
            assert!(
                parse(text.as_bytes()).unwrap().has_colliding_keys(),
                "{text}"
            );
        }
        assert!(
            !parse(br#"{"a":{"a":1},"b":[{"a":2}]}"#)
                .unwrap()
                .has_colliding_keys()
        );
    }

    proptest::proptest! {
        /// Lookup's ASCII shortcut and the parser's folded set agree with `fold`: two keys
        /// collide exactly when they fold equal, and then neither can be looked up.
        #[test]
        fn collisions_agree_with_folding(
            a in "[aAsSkKiI\u{17f}\u{212a}\u{e9}\u{c9}\u{131}\u{130}]{0,3}",
            b in "[aAsSkKiI\u{17f}\u{212a}\u{e9}\u{c9}\u{131}\u{130}]{0,3}",
        ) {
            let mut text = String::from("{");
            write_string(&a, &mut text);
            text.push_str(":1,");
            write_string(&b, &mut text);
            text.push_str(":2}");
            let node = parse(text.as_bytes()).unwrap();
            let same = fold(&a) == fold(&b);
            proptest::prop_assert_eq!(node.has_colliding_keys(), same);
            let Value::Object(object) = node.value() else { unreachable!() };
            proptest::prop_assert_eq!(matches!(object.lookup(&a), Lookup::Ambiguous), same);
            proptest::prop_assert_eq!(matches!(object.lookup(&b), Lookup::One(_)), !same);
        }
    }

    /// JSON text for the differential test below: numbers in many spellings (exponents,
    /// trailing zeros, `-0`, integers past 2^53, long fractions), strings with escapes
    /// and characters outside the BMP, and nesting.
    fn any_json() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let number = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| format!("{x:e}")),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(|x| format!("{x}")),
            "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?",
        ];
        // Raw characters a string may hold, and escapes (a quote, a backslash, a
        // control character, a surrogate pair).
        let string = proptest::collection::vec(
            prop_oneof![
                "[a-z\u{e9}\u{1f600}\u{e000}\u{7f}/ ]",
                Just(r#"\""#.to_owned()),
                Just(r"\\".to_owned()),
                Just(r"\/".to_owned()),
                Just(r"\n".to_owned()),
                "\\\\u00[01][0-9a-f]",
                Just(r"\ud83d\ude00".to_owned()),
            ],
            0..8,
        )
        .prop_map(|parts| format!("\"{}\"", parts.concat()));
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            number,
            string,
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(" , "))),
                proptest::collection::btree_map("[a-z\u{e9}\u{1f600}\u{e000}]{1,3}", inner, 0..4)
                    .prop_map(|members| {
                        let body: Vec<String> = members
                            .into_iter()
                            .map(|(k, v)| format!("\"{k}\" : {v}"))
                            .collect();
                        format!("{{{}}}", body.join(","))
                    }),
            ]
        })
    }

    proptest::proptest! {
        /// The host has two RFC 8785 writers: this one, which the pins hash tool
        /// definitions with, and the arguments' one (`aegis_policy_arguments`, serde_json
        /// and ryu-js), which every front end gives the policy. On every object both
        /// read one way only they write the same text.
        #[test]
        fn both_canonical_writers_agree(value in any_json(), key in "[a-z]{1,4}") {
            let text = format!("{{\"{key}\": {value}}}");
            let node = parse(text.as_bytes());
            proptest::prop_assert!(node.is_ok(), "{}", text);
            let node = node.unwrap();
            let theirs = aegis_policy_arguments::unambiguous::canonical_object(text.as_bytes());
            if let (false, Ok(theirs)) = (node.has_colliding_keys(), theirs) {
                let mut ours = String::new();
                write_canonical(node, &mut ours);
                proptest::prop_assert_eq!(ours, theirs, "{}", text);
            }
        }
    }

    /// What [`Object::lookup`] must say, read the slow way: every member's key decoded
    /// and folded, no shortcut.
    fn lookup_by_folding<'a>(object: &Object<'a>, key: &str) -> Lookup<'a> {
        let colliding: Vec<_> = object
            .members()
            .filter(|(name, _)| fold(&name.text) == fold(key))
            .collect();
        match colliding.as_slice() {
            [] => Lookup::Absent,
            [(name, node)] if name.text == key && name.exact => Lookup::One(*node),
            _ => Lookup::Ambiguous,
        }
    }

    fn same_lookup(a: &Lookup<'_>, b: &Lookup<'_>) -> bool {
        match (a, b) {
            (Lookup::Absent, Lookup::Absent) | (Lookup::Ambiguous, Lookup::Ambiguous) => true,
            (Lookup::One(x), Lookup::One(y)) => x.raw() == y.raw(),
            _ => false,
        }
    }

    proptest::proptest! {
        /// One pass for several keys finds what one lookup per key, done by folding every
        /// key, finds; and the collisions noted while parsing are the ones a second pass
        /// finds. Keys are written plain or with their first character escaped.
        #[test]
        fn lookup_each_and_parse_noting_collisions_agree_with_slow_reads(
            members in proptest::collection::vec(
                ("[aAsSkKiI\u{17f}\u{212a}\u{e9}\u{131}\u{130}]{0,2}", proptest::bool::ANY),
                0..6,
            ),
            keys in proptest::array::uniform3("[aAsSkKiI\u{17f}\u{212a}\u{e9}\u{131}\u{130}]{0,2}"),
        ) {
            let mut text = String::from("{");
            for (i, (key, escaped)) in members.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                match key.chars().next() {
                    Some(first) if *escaped => {
                        let mut units = [0u16; 2];
                        text.push('"');
                        for unit in first.encode_utf16(&mut units) {
                            write!(text, "\\u{unit:04x}").unwrap();
                        }
                        let mut rest = String::new();
                        write_string(&key[first.len_utf8()..], &mut rest);
                        text.push_str(&rest[1..]);
                    }
                    _ => write_string(key, &mut text),
                }
                write!(text, ":{i}").unwrap();
            }
            text.push('}');
            let node = parse(text.as_bytes()).unwrap();
            let Value::Object(object) = node.value() else { unreachable!() };
            let keys = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
            let found = object.lookup_each(keys);
            for (key, found) in keys.iter().zip(&found) {
                let slow = lookup_by_folding(&object, key);
                proptest::prop_assert!(same_lookup(found, &slow), "{text} {key:?}");
            }
            let (_, noted) = parse_noting_collisions(text.as_bytes()).unwrap();
            proptest::prop_assert_eq!(noted, node.has_colliding_keys(), "{}", text);
        }
    }

    #[test]
    fn bounds_and_collisions_in_large_objects() {
        // The array counts one value too.
        let flat = format!("[{}0]", "0,".repeat(MAX_VALUES - 2));
        assert!(parse(flat.as_bytes()).is_ok());
        let over = format!("[{}0]", "0,".repeat(MAX_VALUES - 1));
        assert_eq!(
            parse(over.as_bytes()).unwrap_err(),
            ParseError::TooManyValues
        );
        assert!(ParseError::TooManyValues.is_bound() && ParseError::TooDeep.is_bound());
        // Many distinct keys, then one colliding with the first, far from it.
        let keys: String = (0..50_000).map(|i| format!("\"k{i}\":0,")).collect();
        let clean = format!("{{{keys}\"z\":0}}");
        assert!(!parse(clean.as_bytes()).unwrap().has_colliding_keys());
        let dirty = format!("{{{keys}\"K0\":0}}");
        assert!(parse(dirty.as_bytes()).unwrap().has_colliding_keys());
        // Sibling objects do not collide with each other.
        assert!(!parse(br#"[{"a":1},{"a":1}]"#).unwrap().has_colliding_keys());
    }

    #[test]
    fn a_leading_member_is_looked_up_to_the_first_fault() {
        let id = |text: &[u8]| match leading_lookup(text, "id") {
            Some(Lookup::One(n)) => Some(n.raw_text().to_owned()),
            _ => None,
        };
        assert_eq!(
            id(br#"{"id":"a","result":{"x":["#).as_deref(),
            Some(r#""a""#)
        );
        assert_eq!(id(b"{\"id\":7,\"r\":\"\xff\"}").as_deref(), Some("7"));
        assert_eq!(id(br#" {"id":1,"ID":1"#), None);
        assert_eq!(id(br#"{"id":1,"id":1}"#), None);
        assert_eq!(id(br#"{"Id":1}"#), None);
        assert_eq!(id(br#"{"result":{"#), None);
        assert_eq!(id(br#"[{"id":1}]"#), None);
        assert_eq!(id(b""), None);
    }

    #[test]
    fn lookup_refuses_to_choose() {
        let node = parse(br#"{"name":"a","Name":"b","id":1}"#).unwrap();
        let Value::Object(object) = node.value() else {
            panic!()
        };
        assert!(matches!(object.lookup("name"), Lookup::Ambiguous));
        assert!(matches!(object.lookup("id"), Lookup::One(n) if n.raw() == b"1"));
        assert!(matches!(object.lookup("x"), Lookup::Absent));
        let node = parse(br#"{"Method":"tools/call"}"#).unwrap();
        let Value::Object(object) = node.value() else {
            panic!()
        };
        assert!(matches!(object.lookup("method"), Lookup::Ambiguous));
    }

    #[test]
    fn strict_grammar_with_python_tokens() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "+1",
            "1e",
            "\"a\nb\"",
            "'a'",
            "{\"a\" 1}",
            "[1] x",
            "\u{feff}{}",
            "tru",
            "\"\\x\"",
            "\"\\u12\"",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        for good in [
            " {} \r\n",
            "NaN",
            "-Infinity",
            "[Infinity]",
            "\"\\ud800x\"",
            "-0.5e+3",
        ] {
            assert!(parse(good.as_bytes()).is_ok(), "{good:?}");
        }
        assert_eq!(parse(b"\xff").unwrap_err(), ParseError::NotUtf8);
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(parse(deep.as_bytes()).unwrap_err(), ParseError::TooDeep);
    }

    #[test]
    fn raw_text_is_kept_and_surrogates_decode() {
        let node = parse(br#"[1.0, "\u0041\ud83d\ude00", "\udc00"]"#).unwrap();
        let Value::Array(array) = node.value() else {
            panic!()
        };
        let items: Vec<Node<'_>> = array.items().collect();
        assert_eq!(items[0].raw(), b"1.0");
        assert!(matches!(items[1].value(), Value::String(s) if s.text == "A\u{1f600}" && s.exact));
        assert!(matches!(items[2].value(), Value::String(s) if s.text == "\u{fffd}" && !s.exact));
    }

    fn object_of(text: &str) -> Object<'_> {
        parse(text.as_bytes()).unwrap().object().unwrap()
    }

    #[test]
    fn members_are_left_out_every_spelling_the_rest_byte_for_byte() {
        let without = |text: &str| {
            object_of(text)
                .without(&["requestState", "inputResponses"])
                .into_owned()
        };
        assert_eq!(
            without(r#"{ "name":"e" , "requestState":"s","arguments": {"a" : 1} }"#),
            r#"{ "name":"e","arguments": {"a" : 1} }"#
        );
        assert_eq!(
            without(r#"{"requestState":"s","name":"e","InputResponses":{},"requeſtState":1}"#),
            r#"{"name":"e"}"#
        );
        assert_eq!(without(r#"{"requestState":"s"}"#), "{}");
        // Nothing named: the same text, spacing and all.
        assert_eq!(without(r#"{ "a" :1 ,"b":[2] }"#), r#"{ "a" :1 ,"b":[2] }"#);
        assert_eq!(without("{ }"), "{ }");
        // A nested member of that name is not the object's own.
        assert_eq!(
            without(r#"{"a":{"requestState":1},"requestState":2}"#),
            r#"{"a":{"requestState":1}}"#
        );
    }

    #[test]
    fn a_member_value_is_replaced_only_when_read_one_way() {
        let object = object_of(r#"{"id":1, "params" : {"x":1},"z":null}"#);
        assert_eq!(
            object.replacing("params", r#"{"y":2}"#).as_deref(),
            Some(r#"{"id":1, "params" : {"y":2},"z":null}"#)
        );
        assert_eq!(object.replacing("absent", "1"), None);
        let folded = object_of(r#"{"params":{},"Params":{}}"#);
        assert_eq!(folded.replacing("params", "{}"), None);
        let other_spelling = object_of(r#"{"Params":{}}"#);
        assert_eq!(other_spelling.replacing("params", "{}"), None);
    }
}
