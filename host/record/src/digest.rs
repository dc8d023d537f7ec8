//! SHA-256 digests as distinct types.
//!
//! Six fields of the format hold a SHA-256 digest, and each means something different.
//! Giving each its own type turns "hashed the policy set into prev_hash" from a line that
//! verifies while being wrong into a compile error.
//!
//! On the wire a digest is exactly 64 lowercase hex characters. Uppercase is refused, not
//! folded: one digest must have one spelling, or two canonical forms of one line differ.

use sha2::{Digest as _, Sha256};
use std::fmt;

/// Why a string is not a digest in wire form.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HexError {
    /// Wrong number of characters.
    #[error("expected {expected} lowercase hex characters, found {found}")]
    Length {
        /// Characters the field takes.
        expected: usize,
        /// Characters present.
        found: usize,
    },
    /// A character outside `0-9a-f` (uppercase included).
    #[error("expected lowercase hex, found {}", crate::json::quote(&.0.to_string()))]
    Character(char),
}

/// Decodes exactly `N` bytes from `2N` lowercase hex characters.
///
/// This and [`encode_hex`] are the workspace's one hex codec: every crate that shows or
/// reads bytes as hex uses them, so there is one spelling (lowercase) everywhere.
///
/// # Errors
/// The length is not `2N`, or a character is outside `0-9a-f` (uppercase is refused,
/// not folded).
pub fn decode_hex<const N: usize>(s: &str) -> Result<[u8; N], HexError> {
    let bytes = s.as_bytes();
    if bytes.len() != 2 * N {
        return Err(HexError::Length {
            expected: 2 * N,
            found: s.chars().count(),
        });
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(HexError::Character(char::from(c))),
    };
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Ok(out)
}

/// Lowercase hex of `bytes`, two characters per byte.
pub fn encode_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

macro_rules! digest_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; 32]);

        impl $name {
            /// Wraps raw digest bytes.
            pub const fn from_bytes(bytes: [u8; 32]) -> Self {
                $name(bytes)
            }

            /// The raw digest bytes.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// Parses the wire form: 64 lowercase hex characters.
            ///
            /// # Errors
            /// Any other length or character, uppercase included.
            pub fn from_hex(s: &str) -> Result<Self, HexError> {
                decode_hex::<32>(s).map($name)
            }

            /// The wire form: 64 lowercase hex characters.
            pub fn to_hex(&self) -> String {
                encode_hex(&self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.to_hex())
            }
        }

        impl From<$name> for crate::json::Value {
            fn from(d: $name) -> Self {
                crate::json::Value::String(d.to_hex())
            }
        }
    };
}

digest_type! {
    /// SHA-256 over the canonical bytes of a whole line, signature included. It is what
    /// the next line names as `prev_hash`, and what a later session's open line names as
    /// `prev_session_tail`.
    LineHash
}

digest_type! {
    /// SHA-256 over the canonical JSON of a parsed policy set (never its YAML text).
    PolicySetHash
}

digest_type! {
    /// SHA-256 over the verbatim request bytes of a call, as they arrived.
    RequestDigest
}

digest_type! {
    /// SHA-256 over the verbatim response bytes that actually left the sandbox.
    ResponseDigest
}

digest_type! {
    /// SHA-256 over the bytes of the WebAssembly component a grant runs: what ran, named
    /// by content rather than by path.
    ComponentDigest
}

digest_type! {
    /// SHA-256 over the 32 bytes of an ed25519 public key: the key's fingerprint.
    KeyId
}

digest_type! {
    /// SHA-256 over the canonical JSON of a tool's pinned definition (the members an MCP
    /// relay pins: `annotations`, `description`, `inputSchema`, `name`, `outputSchema`,
    /// `title`), as a pins file names it.
    DefinitionDigest
}

digest_type! {
    /// SHA-256 over a call's arguments as RFC 8785 canonical JSON (for a call that has
    /// no arguments object, a command's invocation, its [`RequestDigest`]'s bytes): what
    /// an approval names as the exact arguments it approved.
    ArgumentsDigest
}

impl ArgumentsDigest {
    /// Digest of a call's arguments given as their canonical JSON text.
    pub fn of_canonical_arguments(canonical: &[u8]) -> ArgumentsDigest {
        ArgumentsDigest(sha256(canonical))
    }

    /// The digest a call without an arguments object is approved by: its invocation's.
    pub fn of_invocation(request: RequestDigest) -> ArgumentsDigest {
        ArgumentsDigest(*request.as_bytes())
    }
}

impl LineHash {
    /// The `prev_hash` of a session's open line: 64 zeros.
    pub const GENESIS: LineHash = LineHash([0; 32]);

    /// Hashes the canonical bytes of a line.
    pub fn of_line(canonical: &[u8]) -> LineHash {
        LineHash(sha256(canonical))
    }
}

impl RequestDigest {
    /// Digest of the request bytes exactly as received, before any parsing: the form
    /// for a caller whose request is a frame (an MCP message) that carries everything
    /// the tool is given.
    pub fn of_request(raw: &[u8]) -> RequestDigest {
        RequestDigest(sha256(raw))
    }

    /// Digest of an invocation: everything a tool is given, as the canonical JSON
    /// object `{"args":[<each argument>],"input":"<input as lowercase hex>"}`
    /// (`spec/SPEC.md` §3.2).
    ///
    /// The object is hashed as it is serialized, so the hex form of a large input is
    /// never held in memory.
    pub fn of_invocation(args: &[&str], input: &[u8]) -> RequestDigest {
        let mut h = Sha256::new();
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(b"{\"args\":[");
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            crate::json::write_string(a, &mut buf);
            h.update(&buf);
            buf.clear();
        }
        buf.extend_from_slice(b"],\"input\":\"");
        h.update(&buf);
        for chunk in input.chunks(4096) {
            h.update(encode_hex(chunk).as_bytes());
        }
        h.update(b"\"}");
        RequestDigest(h.finalize().into())
    }
}

impl ComponentDigest {
    /// Digest of a component's bytes, exactly as compiled.
    pub fn of_component(bytes: &[u8]) -> ComponentDigest {
        ComponentDigest(sha256(bytes))
    }
}

impl ResponseDigest {
    /// Digest of the response bytes exactly as produced.
    pub fn of_response(raw: &[u8]) -> ResponseDigest {
        ResponseDigest(sha256(raw))
    }
}

impl PolicySetHash {
    /// Digest of the canonical JSON projection of a parsed policy set.
    pub fn of_canonical_set(canonical: &[u8]) -> PolicySetHash {
        PolicySetHash(sha256(canonical))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_uppercase() {
        let d = LineHash::of_line(b"x");
        assert_eq!(LineHash::from_hex(&d.to_hex()).unwrap(), d);
        let upper = d.to_hex().to_uppercase();
        assert!(matches!(
            LineHash::from_hex(&upper),
            Err(HexError::Character(_))
        ));
        assert!(matches!(
            KeyId::from_hex("00"),
            Err(HexError::Length {
                expected: 64,
                found: 2
            })
        ));
        assert_eq!(LineHash::GENESIS.to_hex(), "0".repeat(64));
    }

    /// The streamed invocation digest is the digest of the canonical object it names,
    /// and every argument and input byte changes it.
    #[test]
    fn invocation_digest_is_the_canonical_object_and_covers_args_and_input() {
        use crate::json::{Object, Value};
        let args = ["--flag", "a \"quoted\"\n\u{1}arg", "ü"];
        let input: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let mut o = Object::new();
        o.insert(
            "args",
            Value::Array(args.iter().map(|a| Value::from(*a)).collect()),
        );
        o.insert("input", encode_hex(&input));
        assert_eq!(
            RequestDigest::of_invocation(&args, &input),
            RequestDigest::of_request(&o.to_canonical())
        );
        let base = RequestDigest::of_invocation(&["a"], b"x");
        assert_ne!(base, RequestDigest::of_invocation(&["b"], b"x"));
        assert_ne!(base, RequestDigest::of_invocation(&["a"], b"y"));
        assert_ne!(base, RequestDigest::of_invocation(&["a", ""], b"x"));
        assert_ne!(base, RequestDigest::of_invocation(&[], b"x"));
        // Argument boundaries count: ["ab"] is not ["a","b"].
        assert_ne!(
            RequestDigest::of_invocation(&["ab"], b""),
            RequestDigest::of_invocation(&["a", "b"], b"")
        );
        assert_eq!(
            RequestDigest::of_invocation(&[], b"").to_hex(),
            encode_hex(&sha256(br#"{"args":[],"input":""}"#))
        );
    }

    #[test]
    fn multibyte_input_is_an_error_not_a_panic() {
        let s = "é".repeat(32);
        assert!(KeyId::from_hex(&s).is_err());
    }
}
