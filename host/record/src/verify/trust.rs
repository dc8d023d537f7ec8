//! The trust store: the keys an operator anchored out of band, one per line.

use crate::key::PublicKey;

/// Why a trust store could not be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: expected a public key of 64 lowercase hex characters: {source}")]
pub struct TrustStoreError {
    /// 1-based line number in the store.
    pub line: usize,
    /// The cause.
    pub source: crate::digest::HexError,
}

/// Reads a trust store: one public key per line; blank lines and lines starting with `#`
/// are skipped. A store with no keys yields an empty slice — a pin nothing satisfies,
/// never an unpinned walk, so a truncated store cannot quietly turn a gate off.
///
/// # Errors
/// The first line that is neither skipped nor a key.
pub fn parse_trust_store(text: &str) -> Result<Vec<PublicKey>, TrustStoreError> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = PublicKey::from_hex(line).map_err(|source| TrustStoreError {
            line: i + 1,
            source,
        })?;
        keys.push(key);
    }
    Ok(keys)
}
