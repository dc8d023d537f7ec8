//! The trust store: the keys an operator anchored out of band, one per line.
//!
//! A key is anchored by either of the two forms every tool prints for it: the public key
//! (`public_key <hex>`) or its key id (`key_id <hex>`, the SHA-256 of the key's 32 bytes,
//! not truncated). Both are 64 lowercase hex characters, so a [`TrustAnchor`] is matched
//! against both: a session key is accepted when it *is* the anchor or when its key id
//! is. Neither reading widens the pin: passing as someone else's key id needs a key whose
//! SHA-256 is a given digest (a second preimage), and passing as a public key needs that
//! key's secret (an ed25519 discrete logarithm).

use crate::digest::{HexError, KeyId, decode_hex, encode_hex, sha256};
use crate::key::PublicKey;

/// One anchored key: 32 bytes that are either the public key or its key id.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrustAnchor([u8; 32]);

impl TrustAnchor {
    /// Parses 64 lowercase hex characters: a public key or a key id.
    ///
    /// # Errors
    /// Anything but 64 lowercase hex characters.
    pub fn from_hex(s: &str) -> Result<TrustAnchor, HexError> {
        decode_hex::<32>(s).map(TrustAnchor)
    }

    /// The anchor as 64 lowercase hex characters, as [`TrustAnchor::from_hex`] reads it.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// Whether `key` is the anchored key: equal to the anchor, or with the anchor as its
    /// key id. Both comparisons are over all 32 bytes.
    pub fn matches(&self, key: &PublicKey) -> bool {
        *key.as_bytes() == self.0 || sha256(key.as_bytes()) == self.0
    }
}

impl From<PublicKey> for TrustAnchor {
    fn from(key: PublicKey) -> TrustAnchor {
        TrustAnchor(*key.as_bytes())
    }
}

impl From<KeyId> for TrustAnchor {
    fn from(id: KeyId) -> TrustAnchor {
        TrustAnchor(*id.as_bytes())
    }
}

impl std::fmt::Debug for TrustAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TrustAnchor({})", encode_hex(&self.0))
    }
}

/// Why a trust store could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: expected a public key or key id of 64 lowercase hex characters: {source}")]
pub struct TrustStoreError {
    /// 1-based line number in the store.
    pub line: usize,
    /// The cause.
    pub source: HexError,
}

/// Reads a trust store: one public key or key id per line; blank lines and lines starting
/// with `#` are skipped. A store with no keys yields an empty slice — a pin nothing
/// satisfies, never an unpinned walk, so a truncated store cannot quietly turn a gate off.
///
/// # Errors
/// The first line that is neither skipped nor a key.
pub fn parse_trust_store(text: &str) -> Result<Vec<TrustAnchor>, TrustStoreError> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = TrustAnchor::from_hex(line).map_err(|source| TrustStoreError {
            line: i + 1,
            source,
        })?;
        keys.push(key);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::SigningKey;

    /// A key is matched by itself and by its key id, and by nothing that merely shares a
    /// prefix with either: the comparison is over the full 32 bytes.
    #[test]
    fn an_anchor_matches_the_key_or_its_full_key_id_only() {
        let key = SigningKey::from_seed([7; 32]).public_key();
        let other = SigningKey::from_seed([8; 32]).public_key();
        assert!(TrustAnchor::from(key).matches(&key));
        assert!(TrustAnchor::from(key.key_id()).matches(&key));
        assert!(!TrustAnchor::from(other).matches(&key));
        assert!(!TrustAnchor::from(other.key_id()).matches(&key));
        for bytes in [*key.as_bytes(), *key.key_id().as_bytes()] {
            let mut near = bytes;
            near[31] ^= 1;
            assert!(!TrustAnchor(near).matches(&key));
        }
        // The key id of the key id is not the key.
        let id_of_id = sha256(key.key_id().as_bytes());
        assert!(!TrustAnchor(id_of_id).matches(&key));
    }

    #[test]
    fn a_store_takes_keys_and_key_ids_and_names_a_bad_line() {
        let key = SigningKey::from_seed([7; 32]).public_key();
        let text = format!("# ops\n{}\n\n  {}  \n", key.to_hex(), key.key_id().to_hex());
        let store = parse_trust_store(&text).unwrap();
        assert_eq!(store, vec![key.into(), key.key_id().into()]);
        let short = &key.key_id().to_hex()[..16];
        let err = parse_trust_store(&format!("{}\n{short}\n", key.to_hex())).unwrap_err();
        assert_eq!(err.line, 2);
    }
}
