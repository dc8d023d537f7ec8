//! Signing keys, public keys and signatures.
//!
//! # Guarantees
//! - A seed file is 64 lowercase hex characters (one trailing newline tolerated). It is
//!   created with mode 0600 and, on Unix, refused when group or others have any access:
//!   read access leaks the key, write access lets someone substitute their own.
//! - A seed file is opened without following a final symbolic link, and only a regular
//!   file is read (`aegis_files`); one is written beside its path and linked or renamed
//!   into place, never through a link planted there.
//! - Verification is ed25519 *strict*: small-order keys and `R` points and non-canonical
//!   `S` are rejected, so one signature has one verdict in every conforming verifier.
//!   [`verify_batch`] passes a batch only when strict accepts all of it, except with
//!   probability at most 2^-127 over this process's randomness.
//!
//! # Non-guarantees
//! - The [development key](SigningKey::development) is public. Anything it signs proves
//!   only that some build of Aegis wrote it; a host must refuse it for durable sinks.
//! - The same holds for every key in [`PUBLISHED_TEST_KEYS`] (the specification prints
//!   their seeds so the vectors are reproducible): [`published_test_key`] names them, so
//!   a host can refuse them and a verifier can say that they prove nothing.
//! - On non-Unix systems file modes are neither set nor checked.

use crate::digest::{HexError, KeyId, decode_hex, encode_hex, sha256};
use ed25519_dalek::Signer as _;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Seed of the compiled-in development key. It is published here on purpose: it is for
/// volatile stores and tests, and is worthless as evidence.
const DEVELOPMENT_SEED: [u8; 32] = *b"aegis development key: worthless";

/// A key whose seed is published (in this crate or in the specification, §9.5). Anyone
/// can sign with it, so a record it signs proves nothing about who wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishedTestKey {
    /// The name the specification gives it, e.g. `"vector key"`.
    pub name: &'static str,
    /// Its 32-byte seed, as published.
    pub seed: [u8; 32],
}

/// Every key whose seed is published: the development key and the keys that sign the
/// committed vectors (spec §9.5). One list, so a host refusing test keys and a verifier
/// labelling them cannot disagree. Keys only grow here: removing one would turn a record
/// it signed back into apparent evidence.
pub const PUBLISHED_TEST_KEYS: [PublishedTestKey; 5] = [
    PublishedTestKey {
        name: "development key",
        seed: DEVELOPMENT_SEED,
    },
    PublishedTestKey {
        name: "vector key",
        seed: *b"aegis spec/vectors: public seed!",
    },
    PublishedTestKey {
        name: "rotated vector key",
        seed: *b"aegis spec/vectors: rotated key!",
    },
    PublishedTestKey {
        name: "outsider key",
        seed: [0x09; 32],
    },
    PublishedTestKey {
        name: "approver vector key",
        seed: *b"aegis spec/vectors: approver key",
    },
];

/// The key ids of [`PUBLISHED_TEST_KEYS`], in the same order, derived once.
fn published_key_ids() -> &'static [KeyId; 5] {
    static IDS: std::sync::OnceLock<[KeyId; 5]> = std::sync::OnceLock::new();
    IDS.get_or_init(|| PUBLISHED_TEST_KEYS.map(|k| SigningKey::from_seed(k.seed).key_id()))
}

/// Names the published test key `key` is, or `None` for a key whose seed was never
/// published. A host must not sign records anyone relies on (a durable sink) with a key
/// for which this is `Some`; `aegis verify` reports such records as proving nothing
/// about their author, pinned or not.
///
/// This recognises only the keys this crate knows were published. A key whose seed
/// leaked some other way is not, and cannot be, detected.
pub fn published_test_key(key: &PublicKey) -> Option<&'static str> {
    published_test_key_id(&key.key_id())
}

/// The published test key `key` is, up to a torsion point: a published key's point
/// plus a point of small order is not the published key, but anyone holding the
/// published seed signs under it too (a signature whose hash scalar is a multiple of
/// the torsion point's order verifies), so it proves no more about its author.
pub fn published_test_key_of(key: &VerifyingKey) -> Option<&'static str> {
    static CLEARED: std::sync::OnceLock<Vec<curve25519_dalek::edwards::EdwardsPoint>> =
        std::sync::OnceLock::new();
    let cleared = CLEARED.get_or_init(|| {
        PUBLISHED_TEST_KEYS
            .iter()
            .filter_map(|k| VerifyingKey::new(&SigningKey::from_seed(k.seed).public_key()).ok())
            .map(|k| k.point.mul_by_cofactor())
            .collect()
    });
    let point = key.point.mul_by_cofactor();
    cleared
        .iter()
        .zip(&PUBLISHED_TEST_KEYS)
        .find(|(p, _)| **p == point)
        .map(|(_, k)| k.name)
}

/// [`published_test_key`] by fingerprint, for reports that hold key ids.
pub fn published_test_key_id(key_id: &KeyId) -> Option<&'static str> {
    published_key_ids()
        .iter()
        .zip(&PUBLISHED_TEST_KEYS)
        .find(|(id, _)| *id == key_id)
        .map(|(_, k)| k.name)
}

/// The development key's fingerprint, derived once.
pub fn development_key_id() -> KeyId {
    static ID: std::sync::OnceLock<KeyId> = std::sync::OnceLock::new();
    *ID.get_or_init(|| SigningKey::development().key_id())
}

/// An ed25519 public key, 64 lowercase hex characters on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// Wraps 32 key bytes. Whether they name a usable point is decided at verification.
    pub const fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The key bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses the wire form.
    ///
    /// # Errors
    /// Anything but 64 lowercase hex characters.
    pub fn from_hex(s: &str) -> Result<PublicKey, HexError> {
        decode_hex::<32>(s).map(PublicKey)
    }

    /// The wire form.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }

    /// The key's fingerprint: SHA-256 of its 32 bytes.
    pub fn key_id(&self) -> KeyId {
        KeyId::from_bytes(sha256(&self.0))
    }

    /// Whether this is the public half of the compiled-in development key.
    pub fn is_development(&self) -> bool {
        self.key_id() == development_key_id()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

impl From<PublicKey> for crate::json::Value {
    fn from(k: PublicKey) -> Self {
        crate::json::Value::String(k.to_hex())
    }
}

/// An ed25519 signature, 128 lowercase hex characters on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature([u8; 64]);

impl Signature {
    /// Wraps 64 signature bytes.
    pub const fn from_bytes(bytes: [u8; 64]) -> Signature {
        Signature(bytes)
    }

    /// The signature bytes.
    pub const fn as_bytes(&self) -> &[u8; 64] {
        &self.0
    }

    /// Parses the wire form.
    ///
    /// # Errors
    /// Anything but 128 lowercase hex characters.
    pub fn from_hex(s: &str) -> Result<Signature, HexError> {
        decode_hex::<64>(s).map(Signature)
    }

    /// The wire form.
    pub fn to_hex(&self) -> String {
        encode_hex(&self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({})", self.to_hex())
    }
}

mod batch;
pub use batch::{Item as BatchItem, verify_batch};

/// A public key decoded once for repeated strict verification.
#[derive(Clone, Debug)]
pub struct VerifyingKey {
    inner: ed25519_dalek::VerifyingKey,
    /// The decoded point, for batch verification.
    point: curve25519_dalek::edwards::EdwardsPoint,
    /// Whether the point has no torsion component; batches need that, strict does not.
    torsion_free: bool,
}

impl VerifyingKey {
    /// Decodes `key`.
    ///
    /// # Errors
    /// When the bytes are not the encoding of a curve point, or the point has small
    /// order (such a key "verifies" forged signatures under lax rules).
    pub fn new(key: &PublicKey) -> Result<VerifyingKey, KeyError> {
        let vk = ed25519_dalek::VerifyingKey::from_bytes(key.as_bytes())
            .map_err(|_| KeyError::NotAPoint)?;
        if vk.is_weak() {
            return Err(KeyError::SmallOrder);
        }
        let point = vk.to_edwards();
        // RFC 8032 §5.1.3: an encoding whose y is not below p (or a "negative" zero x)
        // does not decode. The library reduces it instead, which would give one point
        // a second key id.
        if point.compress().as_bytes() != key.as_bytes() {
            return Err(KeyError::NotAPoint);
        }
        Ok(VerifyingKey {
            inner: vk,
            point,
            torsion_free: batch::torsion_free(&point),
        })
    }

    /// Strict ed25519 verification of `signature` over `message`.
    pub fn verify_strict(&self, message: &[u8], signature: &Signature) -> bool {
        let sig = ed25519_dalek::Signature::from_bytes(&signature.0);
        self.inner.verify_strict(message, &sig).is_ok()
    }

    /// Whether the key's point has no torsion component. Strict verification does not
    /// ask it; [`verify_batch`] leaves signatures under such a key to strict.
    pub fn is_torsion_free(&self) -> bool {
        self.torsion_free
    }
}

/// Why a key could not be used or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The public key bytes do not decode to a curve point.
    #[error("public key is not a valid ed25519 point")]
    NotAPoint,
    /// The public key is a small-order point.
    #[error("public key has small order")]
    SmallOrder,
    /// The seed file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The seed file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The seed file is not 64 lowercase hex characters.
    #[error("{path}: expected a seed of 64 lowercase hex characters: {source}")]
    Format {
        /// The seed file.
        path: PathBuf,
        /// The cause.
        source: HexError,
    },
    /// Group or others may access the seed file.
    #[error(
        "{path}: mode {mode:04o} lets group or others access the signing key; run `chmod 600 {path}`"
    )]
    Permissions {
        /// The seed file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Refused to replace an existing file without `force`.
    #[error("{path}: already exists (pass --force to replace it)")]
    Exists {
        /// The seed file.
        path: PathBuf,
    },
    /// Refused to replace something that is not a regular file (a device, a
    /// directory, a symlink, a FIFO), even with `force`.
    #[error("{path}: is a {found}, not a regular file; refusing to replace it with a key")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What is there.
        found: &'static str,
    },
    /// The operating system's random source failed.
    #[error("no randomness available: {0}")]
    Random(String),
}

/// A word for a file type, for errors.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// An ed25519 signing key.
#[derive(Clone)]
pub struct SigningKey {
    inner: ed25519_dalek::SigningKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the seed.
        write!(f, "SigningKey(key_id {})", self.key_id())
    }
}

impl SigningKey {
    /// The key with this 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey {
            inner: ed25519_dalek::SigningKey::from_bytes(&seed),
        }
    }

    /// The compiled-in development key. Its seed is public: use it only where records
    /// are not retained.
    pub fn development() -> SigningKey {
        SigningKey::from_seed(DEVELOPMENT_SEED)
    }

    /// Whether this is the development key.
    pub fn is_development(&self) -> bool {
        self.inner.to_bytes() == DEVELOPMENT_SEED
    }

    /// A fresh key from the operating system's random source.
    ///
    /// # Errors
    /// When no randomness is available.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(SigningKey::from_seed(seed))
    }

    /// The public half.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.inner.verifying_key().to_bytes())
    }

    /// The public key's fingerprint.
    pub fn key_id(&self) -> KeyId {
        self.public_key().key_id()
    }

    /// Signs `message` (deterministic, per RFC 8032).
    pub fn sign(&self, message: &[u8]) -> Signature {
        Signature(self.inner.sign(message).to_bytes())
    }

    /// Loads a seed file, refusing one that group or others can access.
    ///
    /// # Errors
    /// [`KeyError::Io`], [`KeyError::Permissions`] or [`KeyError::Format`].
    pub fn load(path: &Path) -> Result<SigningKey, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        // Never through a final link, never a FIFO or a device (aegis_files): a key
        // swapped for a link would sign with whatever key the link names.
        let file = aegis_files::open(path).map_err(|e| io(e.into_io()))?;
        check_private(path, &file)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(&file, 130), &mut text)
            .map_err(io)?;
        let hex = text.strip_suffix('\n').unwrap_or(&text);
        let seed = decode_hex::<32>(hex).map_err(|source| KeyError::Format {
            path: path.to_owned(),
            source,
        })?;
        Ok(SigningKey::from_seed(seed))
    }

    /// Writes this key's seed to `path` with mode 0600, as 64 hex characters and a
    /// newline. Without `force` an existing file is left alone; with it, the file is
    /// replaced atomically (a fresh 0600 file renamed over the old one, so a wider mode
    /// on the old file is not inherited).
    ///
    /// # Errors
    /// [`KeyError::Exists`] or [`KeyError::Io`].
    pub fn write_seed_file(&self, path: &Path, force: bool) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        // `force` replaces a key, never anything else: renaming over `/dev/null` or a
        // symlink would replace the device or the link with a secret.
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_file() {
                return Err(KeyError::NotAFile {
                    path: path.to_owned(),
                    found: kind_of(meta.file_type()),
                });
            }
            if !force {
                return Err(KeyError::Exists {
                    path: path.to_owned(),
                });
            }
        }
        // A fresh 0600 file beside the key, renamed over it (`force`) or linked in
        // (otherwise: `link` fails if `path` appeared meanwhile, so a race cannot
        // clobber it). Neither follows a link planted at `path`.
        let replace = if force {
            aegis_files::Replace::RegularFile
        } else {
            aegis_files::Replace::Never
        };
        let from_files = |e: aegis_files::FileError| match e {
            aegis_files::FileError::Exists { path } => KeyError::Exists { path },
            e => KeyError::Io {
                path: path.to_owned(),
                source: e.into_io(),
            },
        };
        let mut file = aegis_files::AtomicFile::create(path, replace, 0o600).map_err(from_files)?;
        file.write_all(format!("{}\n", encode_hex(&self.inner.to_bytes())).as_bytes())
            .map_err(io)?;
        file.commit().map_err(from_files)
    }
}

/// Creates the missing directories on the way to the key file `path`, each with mode
/// 0700: a directory that holds a signing key is nobody else's to list or write into.
/// Directories that already exist are left exactly as they are (never loosened, never
/// tightened behind the operator's back).
///
/// # Errors
/// [`KeyError::Io`] naming the directory that could not be created.
pub fn create_key_dirs(path: &Path) -> Result<(), KeyError> {
    let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|source| KeyError::Io {
        path: dir.to_owned(),
        source,
    })
}

#[cfg(unix)]
fn check_private(path: &Path, file: &std::fs::File) -> Result<(), KeyError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = file
        .metadata()
        .map_err(|source| KeyError::Io {
            path: path.to_owned(),
            source,
        })?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_: &Path, _: &std::fs::File) -> Result<(), KeyError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_key_is_recognised() {
        assert!(SigningKey::development().is_development());
        assert!(SigningKey::development().public_key().is_development());
        assert!(!SigningKey::from_seed([7; 32]).is_development());
    }

    /// The list names each published key by its public half and by its id, and knows
    /// nothing of a fresh key. The ids are those printed in the specification (§9.5).
    #[test]
    fn published_test_keys_are_named_and_nothing_else_is() {
        let printed = [
            "ed286e39a89ae610041a0e09f01a9fc83e9801dbd032882bd7df25c317d27154",
            "5990c104283522fc80d1415329ab1edbd946db99db120e60eb530d4406a73ff3",
            "f74abda5f71bf644dff29a7167228e5b4a9a46c06204a2325ed187eb20a7df69",
            "dbc298251c51321b7266e78d1c151c2b62aff8cb95b293096d3463018544face",
        ];
        for (published, id) in PUBLISHED_TEST_KEYS.iter().zip(printed) {
            let key = SigningKey::from_seed(published.seed).public_key();
            assert_eq!(key.key_id().to_hex(), id, "{}", published.name);
            assert_eq!(published_test_key(&key), Some(published.name));
            assert_eq!(
                published_test_key_id(&KeyId::from_hex(id).unwrap()),
                Some(published.name)
            );
        }
        assert_eq!(
            published_test_key(&SigningKey::development().public_key()),
            Some("development key")
        );
        assert_eq!(
            published_test_key(&SigningKey::from_seed([7; 32]).public_key()),
            None
        );
        let fresh = SigningKey::generate().unwrap();
        assert_eq!(published_test_key(&fresh.public_key()), None);
    }

    #[test]
    fn small_order_public_key_is_refused() {
        // The identity point: every "signature" with R = identity and S = 0 satisfies
        // the lax equation under it.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(matches!(
            VerifyingKey::new(&PublicKey::from_bytes(identity)),
            Err(KeyError::SmallOrder)
        ));
    }

    #[test]
    fn seed_file_round_trip_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let key = SigningKey::from_seed([3; 32]);
        key.write_seed_file(&path, false).unwrap();
        assert_eq!(SigningKey::load(&path).unwrap().key_id(), key.key_id());
        assert!(matches!(
            key.write_seed_file(&path, false),
            Err(KeyError::Exists { .. })
        ));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
            assert!(matches!(
                SigningKey::load(&path),
                Err(KeyError::Permissions { mode: 0o640, .. })
            ));
            // --force replaces the file and does not inherit the wide mode.
            SigningKey::from_seed([4; 32])
                .write_seed_file(&path, true)
                .unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    /// Issue 29: a key swapped for a link (to another key, or to `/dev/zero`) or a FIFO
    /// is refused in one line naming the file, without following or blocking.
    #[cfg(unix)]
    #[test]
    fn a_key_that_is_a_link_a_fifo_or_a_device_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        SigningKey::from_seed([5; 32])
            .write_seed_file(&real, false)
            .unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for (path, what) in [
            (&link, "a symbolic link"),
            (&zero, "a symbolic link"),
            (&fifo, "a FIFO"),
            (&dir.path().to_path_buf(), "a directory"),
        ] {
            let e = SigningKey::load(path).unwrap_err().to_string();
            assert!(e.starts_with(&path.display().to_string()), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn malformed_seed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let mut file =
            aegis_files::AtomicFile::create(&path, aegis_files::Replace::Never, 0o600).unwrap();
        file.write_all(&[b'A'; 64]).unwrap();
        file.commit().unwrap();
        assert!(matches!(
            SigningKey::load(&path),
            Err(KeyError::Format { .. })
        ));
    }
}
