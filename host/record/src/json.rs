//! JSON restricted to the record's value space, with RFC 8785 canonical output.
//!
//! Every hash and signature in the format covers the canonical form of a line, so this
//! module is the one place where bytes are decided. It deliberately understands less
//! than general JSON:
//!
//! # Guarantees
//! - The value space is closed: objects, arrays, strings, booleans and integers in
//!   `[0, 2^53)`. There is no `null` and no float, so [`Value`] cannot hold one and the
//!   parser refuses one (`1.0`, `1e0`, `-0` included) instead of guessing.
//! - Object members are kept unique and ordered by the UTF-16 code units of their keys
//!   (RFC 8785 §3.2.3), which differs from UTF-8 byte order above the BMP.
//! - Strings are written with the minimal escapes JCS prescribes: `\"`, `\\`, the short
//!   forms `\b \t \n \f \r`, lowercase `\u00xx` for other controls, everything else raw.
//!
//! # Non-guarantees
//! - This is not a general JSON library: documents outside the value space are errors.
//!
//! # Limits
//! - Nesting deeper than [`MAX_DEPTH`] is refused, so hostile input cannot exhaust the
//!   stack of a verifier.

use std::cmp::Ordering;
use std::fmt;

/// The largest integer the value space admits: 2^53 − 1, the last integer a JavaScript
/// verifier can read without losing precision.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// How deeply arrays and objects may nest. Record lines need four levels; the margin is
/// for emitter extensions.
pub const MAX_DEPTH: usize = 32;

/// An integer inside the value space: non-negative and at most [`MAX_SAFE_INTEGER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SafeInt(u64);

impl SafeInt {
    /// Zero.
    pub const ZERO: SafeInt = SafeInt(0);

    /// Returns the integer if it lies in the value space.
    pub const fn new(value: u64) -> Option<SafeInt> {
        if value <= MAX_SAFE_INTEGER {
            Some(SafeInt(value))
        } else {
            None
        }
    }

    /// The integer.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u32> for SafeInt {
    fn from(value: u32) -> Self {
        SafeInt(u64::from(value))
    }
}

impl From<u16> for SafeInt {
    fn from(value: u16) -> Self {
        SafeInt(u64::from(value))
    }
}

impl TryFrom<u64> for SafeInt {
    type Error = ValueSpaceError;
    fn try_from(value: u64) -> Result<Self, Self::Error> {
        SafeInt::new(value).ok_or(ValueSpaceError::IntegerOutOfRange)
    }
}

impl fmt::Display for SafeInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A value of the record's JSON value space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `true` or `false`.
    Bool(bool),
    /// A non-negative integer below 2^53.
    Int(SafeInt),
    /// A string of Unicode scalar values.
    String(String),
    /// An array; order is meaningful and preserved.
    Array(Vec<Value>),
    /// An object with unique keys.
    Object(Object),
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<u64> {
        match self {
            Value::Int(i) => Some(i.get()),
            _ => None,
        }
    }

    /// The object, if this is one.
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Appends the canonical (RFC 8785) form of this value to `out`.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        match self {
            Value::Bool(true) => out.extend_from_slice(b"true"),
            Value::Bool(false) => out.extend_from_slice(b"false"),
            Value::Int(i) => write_u64(i.get(), out),
            Value::String(s) => write_string(s, out),
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write_canonical(out);
                }
                out.push(b']');
            }
            Value::Object(obj) => obj.write_canonical_skipping(None, out),
        }
    }

    /// The canonical form of this value as bytes.
    pub fn to_canonical(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        self.write_canonical(&mut out);
        out
    }

    /// How deeply arrays and objects nest in this value, counted as the parser counts
    /// against [`MAX_DEPTH`]: a scalar is 0, `[]` and `{}` are 1.
    pub fn depth(&self) -> usize {
        match self {
            Value::Array(items) => 1 + items.iter().map(Value::depth).max().unwrap_or(0),
            Value::Object(obj) => obj.depth(),
            _ => 0,
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<SafeInt> for Value {
    fn from(v: SafeInt) -> Self {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(v.into())
    }
}
impl From<u16> for Value {
    fn from(v: u16) -> Self {
        Value::Int(v.into())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_owned())
    }
}
impl From<Object> for Value {
    fn from(v: Object) -> Self {
        Value::Object(v)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::Array(v.into_iter().map(Into::into).collect())
    }
}

/// Orders two keys by their UTF-16 code units, as RFC 8785 §3.2.3 requires.
///
/// UTF-8 byte order equals code point order, which agrees with UTF-16 order except when
/// a supplementary character (encoded with surrogates, 0xD800..) meets a BMP character
/// at or above U+E000: UTF-16 puts the supplementary character first.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        // One is a prefix of the other, and so also in UTF-16.
        None => x.len().cmp(&y.len()),
        // Two ASCII bytes: the shared prefix ends on a character boundary and both
        // characters are single UTF-16 units, so byte order is UTF-16 order. Every key
        // this format defines takes this path.
        Some(i) if x[i] < 0x80 && y[i] < 0x80 => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// A JSON object whose members are unique and kept in canonical order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    members: Vec<(String, Value)>,
}

impl Object {
    /// An empty object.
    pub fn new() -> Object {
        Object::default()
    }

    fn search(&self, key: &str) -> Result<usize, usize> {
        self.members.binary_search_by(|(k, _)| cmp_utf16(k, key))
    }

    /// Sets `key` to `value`, returning the value it replaces.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Option<Value> {
        let key = key.into();
        let value = value.into();
        match self.search(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.members[i].1, value)),
            Err(i) => {
                self.members.insert(i, (key, value));
                None
            }
        }
    }

    /// Sets `key` to `value` when `value` is present; absent fields are omitted, never null.
    pub fn insert_opt<V: Into<Value>>(&mut self, key: &str, value: Option<V>) {
        if let Some(v) = value {
            self.insert(key, v);
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.search(key).ok().map(|i| &self.members[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.search(key).is_ok()
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.search(key).ok().map(|i| self.members.remove(i).1)
    }

    /// Members in canonical order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.members.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the object has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Appends the canonical form of this object to `out`, leaving out the member named
    /// `skip` if given. The signing input of a line is its canonical form without
    /// `signature`, so this avoids cloning the line to compute it.
    pub fn write_canonical_skipping(&self, skip: Option<&str>, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        for (k, v) in &self.members {
            if Some(k.as_str()) == skip {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_string(k, out);
            out.push(b':');
            v.write_canonical(out);
        }
        out.push(b'}');
    }

    /// How deeply arrays and objects nest in this object, itself included (see
    /// [`Value::depth`]).
    pub fn depth(&self) -> usize {
        1 + self
            .members
            .iter()
            .map(|(_, v)| v.depth())
            .max()
            .unwrap_or(0)
    }

    /// The canonical form of this object as bytes.
    pub fn to_canonical(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        self.write_canonical_skipping(None, &mut out);
        out
    }

    /// Builds an object from members in any order, refusing duplicate keys.
    pub fn from_members(mut members: Vec<(String, Value)>) -> Result<Object, ValueSpaceError> {
        members.sort_by(|a, b| cmp_utf16(&a.0, &b.0));
        if let Some(w) = members.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(ValueSpaceError::DuplicateKey(w[0].0.clone()));
        }
        Ok(Object { members })
    }
}

fn write_u64(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Writes `s` as a JSON string with exactly the escapes RFC 8785 prescribes.
pub fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Quotes text taken from a file for a one-line report: printable ASCII stays, anything
/// else (controls, terminal escapes, bidi overrides, non-ASCII) becomes a `\u` escape,
/// and long strings are cut.
pub fn quote(s: &str) -> String {
    const MAX_CHARS: usize = 64;
    let mut out = String::from("\"");
    for (i, c) in s.chars().enumerate() {
        if i == MAX_CHARS {
            out.push('…');
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

/// Why a syntactically valid JSON document lies outside the value space.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueSpaceError {
    /// `null` appeared; absent fields are omitted instead.
    #[error("null is outside the value space (absent fields are omitted)")]
    Null,
    /// A number with a sign, fraction or exponent.
    #[error("number {0} is not a non-negative integer (floats are outside the value space)")]
    NotAnInteger(String),
    /// An integer at or above 2^53.
    #[error("integer is 2^53 or more")]
    IntegerOutOfRange,
    /// The same key twice in one object.
    #[error("duplicate key {}", quote(.0))]
    DuplicateKey(String),
    /// A `\u` escape naming half of a surrogate pair without the other half.
    #[error("lone surrogate escape \\u{0:04x}")]
    LoneSurrogate(u16),
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// Why bytes could not be read as a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The bytes are not JSON at all (a torn write looks like this).
    #[error("not JSON at byte {offset}: {what}")]
    Syntax {
        /// Byte offset of the problem.
        offset: usize,
        /// What was expected.
        what: &'static str,
    },
    /// The bytes are JSON, but outside the value space.
    #[error("at byte {offset}: {error}")]
    ValueSpace {
        /// Byte offset of the offending value.
        offset: usize,
        /// The violation.
        error: ValueSpaceError,
    },
}

/// Parses one JSON document that must lie wholly inside the value space.
///
/// # Errors
/// [`ParseError::Syntax`] when the bytes are not JSON (including invalid UTF-8), and
/// [`ParseError::ValueSpace`] when they are JSON the format does not admit.
pub fn parse(input: &[u8]) -> Result<Value, ParseError> {
    parse_line(input).map(|(v, _)| v)
}

/// What the parser learned about the bytes themselves, beside the value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The bytes are exactly the canonical form of the value: no whitespace, members
    /// already in order, only the escapes RFC 8785 writes.
    pub canonical: bool,
    /// With `canonical`: the byte range to cut out to leave the canonical form without
    /// the top-level `signature` member (that member and one comma beside it).
    pub signature: Option<std::ops::Range<usize>>,
}

impl Layout {
    /// The canonical form without the top-level `signature` member, cut from `bytes`
    /// (which must be the canonical bytes this layout describes).
    pub fn without_signature(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let cut = self.signature.as_ref().filter(|_| self.canonical)?;
        let mut out = Vec::with_capacity(bytes.len() - cut.len());
        out.extend_from_slice(&bytes[..cut.start]);
        out.extend_from_slice(&bytes[cut.end..]);
        Some(out)
    }
}

/// Parses like [`parse`] and reports whether the bytes were already canonical, so a
/// verifier can hash them as they are instead of serializing the value again.
///
/// # Errors
/// As [`parse`].
pub fn parse_line(input: &[u8]) -> Result<(Value, Layout), ParseError> {
    let mut p = Parser {
        s: input,
        i: 0,
        canonical: true,
        signature: None,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != input.len() {
        return Err(p.syntax("end of input"));
    }
    let layout = Layout {
        canonical: p.canonical,
        signature: p.signature.filter(|_| p.canonical),
    };
    Ok((v, layout))
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    /// Nothing seen so far departs from the canonical form.
    canonical: bool,
    /// The top-level `signature` member's span, with one adjacent comma.
    signature: Option<std::ops::Range<usize>>,
}

impl Parser<'_> {
    fn syntax(&self, what: &'static str) -> ParseError {
        ParseError::Syntax {
            offset: self.i,
            what,
        }
    }

    fn space(&self, offset: usize, error: ValueSpaceError) -> ParseError {
        ParseError::ValueSpace { offset, error }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
            self.canonical = false;
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), ParseError> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.syntax("a JSON value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, ParseError> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal(b"true").map(|()| Value::Bool(true)),
            Some(b'f') => self.literal(b"false").map(|()| Value::Bool(false)),
            Some(b'n') => {
                let at = self.i;
                self.literal(b"null")?;
                Err(self.space(at, ValueSpaceError::Null))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax("a JSON value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, ParseError> {
        let at = self.i;
        if depth > MAX_DEPTH {
            return Err(self.space(at, ValueSpaceError::TooDeep));
        }
        self.i += 1;
        let mut members: Vec<(String, Value)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(Object::new()));
        }
        let mut comma_before: Option<usize> = None;
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("an object key"));
            }
            let key_start = self.i;
            let key = self.string()?;
            if let Some((previous, _)) = members.last()
                && cmp_utf16(previous.as_str(), &key) != Ordering::Less
            {
                self.canonical = false;
            }
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("':'"));
            }
            self.i += 1;
            self.ws();
            let value = self.value(depth)?;
            let is_signature = depth == 1 && key == "signature";
            members.push((key, value));
            let value_end = self.i;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    if is_signature {
                        // Cut the comma before it, or, when it comes first, the one after.
                        self.signature = Some(match comma_before {
                            Some(c) => c..value_end,
                            None => key_start..value_end + 1,
                        });
                    }
                    comma_before = Some(self.i);
                    self.i += 1;
                }
                Some(b'}') => {
                    if is_signature {
                        self.signature = Some(comma_before.unwrap_or(key_start)..value_end);
                    }
                    self.i += 1;
                    break;
                }
                _ => return Err(self.syntax("',' or '}'")),
            }
        }
        Object::from_members(members)
            .map(Value::Object)
            .map_err(|e| self.space(at, e))
    }

    fn array(&mut self, depth: usize) -> Result<Value, ParseError> {
        if depth > MAX_DEPTH {
            return Err(self.space(self.i, ValueSpaceError::TooDeep));
        }
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("',' or ']'")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// Reads a number by the full JSON grammar first, so that `1.5` is reported as a
    /// float outside the value space rather than as a syntax error at the dot.
    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        match self.digits() {
            0 => return Err(self.syntax("a digit")),
            n if n > 1 && self.s[int_start] == b'0' => {
                self.i = int_start + 1;
                return Err(self.syntax("no leading zero"));
            }
            _ => {}
        }
        let int_end = self.i;
        let mut fractional = false;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.syntax("a digit after '.'"));
            }
            fractional = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("a digit in the exponent"));
            }
            fractional = true;
        }
        let text = &self.s[start..self.i];
        if negative || fractional {
            let shown = String::from_utf8_lossy(text).into_owned();
            return Err(self.space(start, ValueSpaceError::NotAnInteger(shown)));
        }
        let mut n: u64 = 0;
        for &d in &self.s[int_start..int_end] {
            n = match n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d - b'0')))
            {
                Some(n) if n <= MAX_SAFE_INTEGER => n,
                _ => return Err(self.space(start, ValueSpaceError::IntegerOutOfRange)),
            };
        }
        Ok(Value::Int(SafeInt(n)))
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let Some(h) = self.s.get(self.i..self.i + 4) else {
            return Err(self.syntax("four hex digits"));
        };
        let mut v: u16 = 0;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(self.syntax("four hex digits")),
            };
            v = (v << 4) | u16::from(d);
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.i += 1; // opening quote
        let mut out = String::new();
        loop {
            let start = self.i;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.i += 1;
            }
            let chunk =
                std::str::from_utf8(&self.s[start..self.i]).map_err(|e| ParseError::Syntax {
                    offset: start + e.valid_up_to(),
                    what: "UTF-8",
                })?;
            out.push_str(chunk);
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let at = self.i;
                    self.i += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.syntax("an escape"));
                    };
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => {
                            self.canonical = false; // canonical form writes '/' raw
                            '/'
                        }
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let c = self.unicode_escape(at)?;
                            // Canonical form uses \u only as lowercase \u00xx, for a
                            // control character without a short escape.
                            let text = &self.s[at..self.i];
                            let short = matches!(c, '\u{8}' | '\t' | '\n' | '\u{c}' | '\r');
                            if text.len() != 6
                                || !text.starts_with(b"\\u00")
                                || text[4..].iter().any(u8::is_ascii_uppercase)
                                || u32::from(c) >= 0x20
                                || short
                            {
                                self.canonical = false;
                            }
                            c
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.syntax("a valid escape"));
                        }
                    };
                    out.push(c);
                }
                Some(_) => return Err(self.syntax("no raw control character in a string")),
                None => return Err(self.syntax("closing '\"'")),
            }
        }
    }

    fn unicode_escape(&mut self, at: usize) -> Result<char, ParseError> {
        let hi = self.hex4()?;
        if !(0xD800..0xE000).contains(&hi) {
            return Ok(char::from_u32(u32::from(hi)).expect("non-surrogate BMP code point"));
        }
        if hi >= 0xDC00 || !self.s[self.i..].starts_with(b"\\u") {
            return Err(self.space(at, ValueSpaceError::LoneSurrogate(hi)));
        }
        self.i += 2;
        let lo = self.hex4()?;
        if !(0xDC00..0xE000).contains(&lo) {
            return Err(self.space(at, ValueSpaceError::LoneSurrogate(hi)));
        }
        let c = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
        Ok(char::from_u32(c).expect("surrogate pair decodes to a scalar value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        String::from_utf8(parse(s.as_bytes()).unwrap().to_canonical()).unwrap()
    }

    fn space_err(s: &str) -> ValueSpaceError {
        match parse(s.as_bytes()) {
            Err(ParseError::ValueSpace { error, .. }) => error,
            other => panic!("{s}: expected a value-space error, got {other:?}"),
        }
    }

    #[test]
    fn members_sort_by_utf16_not_utf8() {
        // U+1F600 is 0xD83D 0xDE00 in UTF-16 and sorts before U+E000; UTF-8 says the opposite.
        let c = canon(r#"{"\ue000":1,"😀":2,"a":3}"#);
        assert_eq!(c, "{\"a\":3,\"😀\":2,\"\u{e000}\":1}");
    }

    #[test]
    fn strings_use_minimal_escapes() {
        let c = canon(r#"["\u0008\t\n\u000c\r\u0001\u001f\"\\\/é\u007f"]"#);
        assert_eq!(c, "[\"\\b\\t\\n\\f\\r\\u0001\\u001f\\\"\\\\/é\u{7f}\"]");
    }

    #[test]
    fn whitespace_is_dropped_and_arrays_keep_order() {
        assert_eq!(
            canon(" { \"b\" : [3, 1, 2] ,\n\"a\":true } "),
            r#"{"a":true,"b":[3,1,2]}"#
        );
    }

    #[test]
    fn floats_nulls_and_negatives_are_outside_the_space() {
        for s in ["1.0", "1e0", "1E+2", "-0", "-1", "0.5"] {
            assert!(
                matches!(space_err(s), ValueSpaceError::NotAnInteger(_)),
                "{s}"
            );
        }
        assert_eq!(space_err(r#"{"a":null}"#), ValueSpaceError::Null);
        assert_eq!(
            space_err("9007199254740992"),
            ValueSpaceError::IntegerOutOfRange
        );
        assert_eq!(
            parse(b"9007199254740991").unwrap(),
            Value::Int(SafeInt::new(MAX_SAFE_INTEGER).unwrap())
        );
        assert_eq!(
            space_err("99999999999999999999999"),
            ValueSpaceError::IntegerOutOfRange
        );
    }

    #[test]
    fn duplicate_keys_and_lone_surrogates_are_refused() {
        assert_eq!(
            space_err(r#"{"a":1,"a":1}"#),
            ValueSpaceError::DuplicateKey("a".into())
        );
        assert_eq!(
            space_err(r#""\ud800""#),
            ValueSpaceError::LoneSurrogate(0xd800)
        );
        assert_eq!(
            space_err(r#""\udc00\ud800""#),
            ValueSpaceError::LoneSurrogate(0xdc00)
        );
        assert_eq!(canon(r#""\ud83d\ude00""#), "\"😀\"");
    }

    #[test]
    fn syntax_errors_are_not_value_space_errors() {
        for s in [
            "",
            "{",
            "{\"a\":1",
            "01",
            "[1,]",
            "{\"a\" 1}",
            "\"\u{1}\"",
            "tru",
            "1 2",
            "\"\\x\"",
        ] {
            assert!(
                matches!(parse(s.as_bytes()), Err(ParseError::Syntax { .. })),
                "{s:?}"
            );
        }
        assert!(matches!(
            parse(b"\"\xff\""),
            Err(ParseError::Syntax { what: "UTF-8", .. })
        ));
    }

    fn layout(s: &str) -> Layout {
        parse_line(s.as_bytes()).unwrap().1
    }

    #[test]
    fn canonical_bytes_are_recognised_and_anything_else_is_not() {
        for c in [
            r#"{"a":1,"b":[true,{"c":"x"}]}"#,
            "{\"s\":\"\\u0001\\b\\\"\\\\/é\u{7f}\"}",
            "{}",
            "[]",
            "7",
        ] {
            assert!(layout(c).canonical, "{c}");
            assert_eq!(canon(c), c);
        }
        for n in [
            r#"{"b":1,"a":2}"#,
            r#"{"a": 1}"#,
            " {}",
            r#"["\/"]"#,
            r#"["\u00e9"]"#,
            r#"["\u000A"]"#,
            r#"["\u000a"]"#,
            r#"["\u001F"]"#,
            r#"["\ud83d\ude00"]"#,
            "{\"a\":{\"d\":1,\"c\":2}}",
        ] {
            assert!(!layout(n).canonical, "{n}");
            assert_ne!(canon(n), n);
        }
    }

    #[test]
    fn the_signature_member_is_cut_exactly() {
        for (line, without) in [
            (r#"{"a":1,"signature":"s","z":2}"#, r#"{"a":1,"z":2}"#),
            (r#"{"a":1,"signature":"s"}"#, r#"{"a":1}"#),
            (r#"{"signature":"s","z":2}"#, r#"{"z":2}"#),
            (r#"{"signature":"s"}"#, r#"{}"#),
            (
                r#"{"a":{"signature":"inner"}}"#,
                r#"{"a":{"signature":"inner"}}"#,
            ),
        ] {
            let (v, l) = parse_line(line.as_bytes()).unwrap();
            let cut = l
                .without_signature(line.as_bytes())
                .unwrap_or_else(|| line.as_bytes().to_vec());
            let mut expected = Vec::new();
            v.as_object()
                .unwrap()
                .write_canonical_skipping(Some("signature"), &mut expected);
            assert_eq!(cut, expected, "{line}");
            assert_eq!(String::from_utf8(cut).unwrap(), without);
        }
    }

    #[test]
    fn utf16_order_fast_path_agrees_with_the_definition() {
        let keys = [
            "",
            "a",
            "ab",
            "b",
            "é",
            "\u{e000}",
            "\u{ffff}",
            "😀",
            "a😀",
            "a\u{e000}",
            "Z",
            "~",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(
                    cmp_utf16(a, b),
                    a.encode_utf16().cmp(b.encode_utf16()),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(space_err(&deep), ValueSpaceError::TooDeep);
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn canonical_output_reparses_to_itself() {
        let src = r#"{"z":{"y":[{"b":1,"a":"\u0000"}]},"a":"x"}"#;
        let once = canon(src);
        assert_eq!(canon(&once), once);
    }
}
