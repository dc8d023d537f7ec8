//! A small JSON reader that keeps what a relay must not lose, and a canonical writer.
//!
//! serde_json keeps the last of two equal keys and forgets the text of a number; a relay
//! that decides on one reading of a frame while the server acts on another is bypassed.
//! So this reader keeps every member (duplicates included), the exact source bytes of
//! every value, and notes keys that collide.
//!
//! # Guarantees
//! - The grammar is RFC 8259, plus the tokens `NaN`, `Infinity` and `-Infinity`: Python's
//!   `json` accepts those by default, and a frame a server reads must never be one the
//!   relay cannot classify.
//! - Lone surrogate escapes (`"\ud800"`) are accepted, as JavaScript and Python accept
//!   them; the decoded text holds U+FFFD in their place and [`Str::exact`] is false.
//! - Two keys of one object *collide* when they are equal after Unicode lowercasing with
//!   `ſ` (U+017F) read as `s`. That is wider than equality on purpose: Go's
//!   `encoding/json` matches struct fields that way, so `"Name"` or `"nameſ"`-style keys
//!   can override `"name"` in a Go server.
//! - A `__proto__` key counts as a collision too: JavaScript code that copies a parsed
//!   object member by member turns it into the copy's prototype, and a field the relay did
//!   not see (`arguments`) can then be read through it.
//!
//! # Limits
//! - Nesting deeper than [`MAX_DEPTH`] is refused, so hostile frames cannot exhaust the
//!   stack.
//! - The whole frame becomes a tree of 56 bytes per value (measured with `size_of`), so a
//!   frame of small values (`[0,0,…]`, two bytes each) takes about 28 times its size while
//!   it is classified. The frame bound
//!   (`frame::DEFAULT_MAX_FRAME`) is what keeps that finite.

use std::fmt::Write as _;

/// How deeply arrays and objects may nest. MCP messages need a handful of levels; tool
/// schemas a few dozen at most.
pub(crate) const MAX_DEPTH: usize = 128;

/// A decoded string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Str {
    /// The decoded text (lone surrogates replaced by U+FFFD).
    pub text: String,
    /// False when a lone surrogate was replaced, so `text` is not what a peer decodes.
    pub exact: bool,
}

/// A parsed value with the exact bytes it came from.
#[derive(Clone, Debug)]
pub(crate) struct Node<'a> {
    pub value: Value<'a>,
    pub raw: &'a [u8],
}

/// A JSON value. Objects keep every member in source order, duplicates included.
#[derive(Clone, Debug)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    /// The number's source text (ASCII), e.g. `1`, `1.0`, `-2e5`, `NaN`.
    Number(&'a str),
    String(Str),
    Array(Vec<Node<'a>>),
    Object(Object<'a>),
}

/// An object's members in source order, and whether two of its own keys collide.
#[derive(Clone, Debug)]
pub(crate) struct Object<'a> {
    pub members: Vec<(Str, Node<'a>)>,
    pub colliding_keys: bool,
}

/// What a lookup by key found.
pub(crate) enum Lookup<'n, 'a> {
    Absent,
    One(&'n Node<'a>),
    /// The key, or a key colliding with it, appears more than once.
    Ambiguous,
}

impl<'a> Object<'a> {
    /// Finds `key`, refusing to choose when a colliding key also appears.
    pub fn lookup(&self, key: &str) -> Lookup<'_, 'a> {
        let folded = fold(key);
        let mut found = None;
        let mut count = 0;
        for (name, node) in &self.members {
            // ASCII keys (nearly all of them) compare without building a folded copy.
            let collides = if name.text.is_ascii() && key.is_ascii() {
                name.text.eq_ignore_ascii_case(key)
            } else {
                fold(&name.text) == folded
            };
            if collides {
                count += 1;
                if name.text == key && name.exact {
                    found = Some(node);
                }
            }
        }
        match (count, found) {
            (0, _) => Lookup::Absent,
            (1, Some(node)) => Lookup::One(node),
            // A single colliding key that is not exactly `key` ("Method") is ambiguous:
            // some servers read it as `key`.
            _ => Lookup::Ambiguous,
        }
    }
}

impl Node<'_> {
    /// True when any object in this value has colliding keys.
    pub fn has_colliding_keys(&self) -> bool {
        match &self.value {
            Value::Object(object) => {
                object.colliding_keys || object.members.iter().any(|(_, n)| n.has_colliding_keys())
            }
            Value::Array(items) => items.iter().any(Node::has_colliding_keys),
            _ => false,
        }
    }

    /// The exact source text (valid UTF-8: the whole input was checked).
    pub fn raw_text(&self) -> &str {
        std::str::from_utf8(self.raw).unwrap_or_default()
    }
}

/// The folding used to decide that two keys collide.
fn fold(key: &str) -> String {
    key.chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c == '\u{17f}' { 's' } else { c })
        .collect()
}

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
}

/// Parses one JSON text; surrounding JSON whitespace is allowed, anything else is not.
pub(crate) fn parse(bytes: &[u8]) -> Result<Node<'_>, ParseError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ParseError::NotUtf8)?;
    let mut parser = Parser {
        src: text.as_bytes(),
        text,
        pos: 0,
    };
    parser.skip_ws();
    let node = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != parser.src.len() {
        return Err(parser.err("data after the value"));
    }
    Ok(node)
}

struct Parser<'a> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError::Syntax { what, at: self.pos }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.src.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.src[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, ParseError> {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        let start = self.pos;
        let value = match self.src.get(self.pos) {
            None => return Err(self.err("unexpected end")),
            Some(b'{') => Value::Object(self.object(depth)?),
            Some(b'[') => Value::Array(self.array(depth)?),
            Some(b'"') => Value::String(self.string()?),
            Some(b't') if self.eat("true") => Value::Bool(true),
            Some(b'f') if self.eat("false") => Value::Bool(false),
            Some(b'n') if self.eat("null") => Value::Null,
            Some(b'N') if self.eat("NaN") => Value::Number(&self.text[start..self.pos]),
            Some(b'I') if self.eat("Infinity") => Value::Number(&self.text[start..self.pos]),
            Some(b'-') if self.eat("-Infinity") => Value::Number(&self.text[start..self.pos]),
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(_) => return Err(self.err("unexpected character")),
        };
        Ok(Node {
            value,
            raw: &self.src[start..self.pos],
        })
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.src.get(self.pos) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value<'a>, ParseError> {
        let start = self.pos;
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
        Ok(Value::Number(&self.text[start..self.pos]))
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

    fn string(&mut self) -> Result<Str, ParseError> {
        self.pos += 1; // the opening quote
        let mut text = String::new();
        let mut exact = true;
        loop {
            let run_start = self.pos;
            while let Some(&b) = self.src.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            text.push_str(&self.text[run_start..self.pos]);
            match self.src.get(self.pos) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Str { text, exact });
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escape = *self
                        .src
                        .get(self.pos)
                        .ok_or_else(|| self.err("bad escape"))?;
                    self.pos += 1;
                    match escape {
                        b'"' => text.push('"'),
                        b'\\' => text.push('\\'),
                        b'/' => text.push('/'),
                        b'b' => text.push('\u{8}'),
                        b'f' => text.push('\u{c}'),
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let c = if (0xd800..0xdc00).contains(&unit)
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
                            };
                            text.push(c.unwrap_or_else(|| {
                                exact = false;
                                '\u{fffd}'
                            }));
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Vec<Node<'a>>, ParseError> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat("]") {
            return Ok(items);
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            if self.eat("]") {
                return Ok(items);
            }
            if !self.eat(",") {
                return Err(self.err("expected , or ]"));
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Object<'a>, ParseError> {
        self.pos += 1;
        let mut members: Vec<(Str, Node<'a>)> = Vec::new();
        // A set, not a list: an object of n keys must not cost n² comparisons.
        let mut folded_keys = std::collections::HashSet::new();
        let mut colliding_keys = false;
        self.skip_ws();
        if self.eat("}") {
            return Ok(Object {
                members,
                colliding_keys,
            });
        }
        loop {
            self.skip_ws();
            if self.src.get(self.pos) != Some(&b'"') {
                return Err(self.err("expected a key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if !self.eat(":") {
                return Err(self.err("expected :"));
            }
            self.skip_ws();
            let node = self.value(depth + 1)?;
            let folded = fold(&key.text);
            // A replaced surrogate makes two distinct keys look equal; count it as a
            // collision too, since we cannot tell what the peer reads.
            if !folded_keys.insert(folded) || !key.exact || key.text == "__proto__" {
                colliding_keys = true;
            }
            members.push((key, node));
            self.skip_ws();
            if self.eat("}") {
                return Ok(Object {
                    members,
                    colliding_keys,
                });
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
pub(crate) fn write_canonical(node: &Node<'_>, out: &mut String) {
    match &node.value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(text) => match text.parse::<f64>() {
            Ok(x) if x.is_finite() => write_es_number(x, out),
            _ => out.push_str(text),
        },
        Value::String(s) => write_string(&s.text, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut members: Vec<&(Str, Node<'_>)> = object.members.iter().collect();
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

/// ECMAScript `Number::toString` for a finite double.
fn write_es_number(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0'); // -0 too
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // `{:e}` gives the shortest digits that round-trip, as ECMAScript requires.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    let n = exponent.parse::<i64>().unwrap_or(0) + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        let mut out = String::new();
        write_canonical(&parse(text.as_bytes()).unwrap(), &mut out);
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
            a in "[aAsSkK\u{17f}\u{212a}\u{e9}\u{c9}]{0,3}",
            b in "[aAsSkK\u{17f}\u{212a}\u{e9}\u{c9}]{0,3}",
        ) {
            let mut text = String::from("{");
            write_string(&a, &mut text);
            text.push_str(":1,");
            write_string(&b, &mut text);
            text.push_str(":2}");
            let node = parse(text.as_bytes()).unwrap();
            let same = fold(&a) == fold(&b);
            proptest::prop_assert_eq!(node.has_colliding_keys(), same);
            let Value::Object(object) = &node.value else { unreachable!() };
            proptest::prop_assert_eq!(matches!(object.lookup(&a), Lookup::Ambiguous), same);
            proptest::prop_assert_eq!(matches!(object.lookup(&b), Lookup::One(_)), !same);
        }
    }

    #[test]
    fn lookup_refuses_to_choose() {
        let node = parse(br#"{"name":"a","Name":"b","id":1}"#).unwrap();
        let Value::Object(object) = &node.value else {
            panic!()
        };
        assert!(matches!(object.lookup("name"), Lookup::Ambiguous));
        assert!(matches!(object.lookup("id"), Lookup::One(n) if n.raw == b"1"));
        assert!(matches!(object.lookup("x"), Lookup::Absent));
        let node = parse(br#"{"Method":"tools/call"}"#).unwrap();
        let Value::Object(object) = &node.value else {
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
        let Value::Array(items) = &node.value else {
            panic!()
        };
        assert_eq!(items[0].raw, b"1.0");
        assert!(matches!(&items[1].value, Value::String(s) if s.text == "A\u{1f600}" && s.exact));
        assert!(matches!(&items[2].value, Value::String(s) if s.text == "\u{fffd}" && !s.exact));
    }
}
