//! `aegis keygen` and `aegis key show`: make a signing key, and say which key a seed
//! file holds, in the two lines every other command prints (`public_key`, `key_id`).

use crate::{error, exit, print};
use aegis_record::key::{KeyError, SigningKey, create_key_dirs};
use std::path::Path;

/// `aegis key …`.
#[derive(clap::Subcommand)]
pub enum KeyCommand {
    /// Print the public key and key id of a seed file (as keygen printed them).
    ///
    /// The file is loaded as `run --signing-key` loads it, so a seed file that group or
    /// others can access is refused here too. Either printed value pins the key for
    /// `verify --key` and in a trust store.
    #[command(after_help = crate::help::KEY_SHOW)]
    Show {
        /// The seed file (`aegis keygen --out`).
        keyfile: std::path::PathBuf,
    },
}

/// The two lines that name a key, in the order keygen prints them.
fn describe(key: &SigningKey) -> String {
    format!("public_key {}\nkey_id {}\n", key.public_key(), key.key_id())
}

/// `aegis key show KEYFILE`.
pub fn show(path: &Path) -> u8 {
    match SigningKey::load(path) {
        Ok(key) => match print(describe(&key).as_bytes()) {
            Ok(()) => exit::OK,
            Err(_) => exit::UNREADABLE,
        },
        Err(e @ KeyError::Io { .. }) => {
            error(e);
            exit::UNREADABLE
        }
        Err(e) => {
            error(e);
            exit::REFUSED
        }
    }
}

/// `aegis keygen --out PATH [--force]`: creates the missing directories (0700), writes
/// the seed (0600) and prints its public half.
pub fn keygen(out: &Path, force: bool) -> u8 {
    let key = match SigningKey::generate() {
        Ok(k) => k,
        Err(e) => {
            error(e);
            return exit::UNREADABLE;
        }
    };
    let written = create_key_dirs(out).and_then(|()| key.write_seed_file(out, force));
    match written {
        Ok(()) => {
            if let Err(e) = print(describe(&key).as_bytes()) {
                // The seed is safe on disk; make sure its public half is not lost.
                error(format_args!(
                    "the public key could not be printed ({e}); the key was written to {}: public_key {} key_id {}",
                    out.display(),
                    key.public_key(),
                    key.key_id()
                ));
                return exit::UNREADABLE;
            }
            exit::OK
        }
        Err(e @ (KeyError::Exists { .. } | KeyError::NotAFile { .. })) => {
            error(e);
            exit::TAMPERED_OR_USAGE
        }
        Err(e) => {
            error(e);
            exit::UNREADABLE
        }
    }
}
