//! `aegis keygen` and `aegis key show`: make a signing key, and say which key a seed
//! file holds, in the two lines every other command prints (`public_key`, `key_id`).

use crate::{CliError, exit, print};
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
pub fn show(path: &Path) -> Result<u8, CliError> {
    let key = SigningKey::load(path).map_err(|e| match e {
        KeyError::Io { .. } => CliError::Unreadable(e.to_string()),
        _ => CliError::Refused(e.to_string()),
    })?;
    print(describe(&key).as_bytes()).map_err(|_| CliError::Stdout)?;
    Ok(exit::OK)
}

/// `aegis keygen --out PATH [--force]`: creates the missing directories (0700), writes
/// the seed (0600) and prints its public half.
pub fn keygen(out: &Path, force: bool) -> Result<u8, CliError> {
    let key = SigningKey::generate().map_err(|e| CliError::Unreadable(e.to_string()))?;
    create_key_dirs(out)
        .and_then(|()| key.write_seed_file(out, force))
        .map_err(|e| match e {
            KeyError::Exists { .. } | KeyError::NotAFile { .. } => CliError::Usage(e.to_string()),
            _ => CliError::Unreadable(e.to_string()),
        })?;
    // The seed is safe on disk; make sure its public half is not lost.
    print(describe(&key).as_bytes()).map_err(|e| {
        CliError::Unreadable(format!(
            "the public key could not be printed ({e}); the key was written to {}: public_key {} key_id {}",
            out.display(),
            key.public_key(),
            key.key_id()
        ))
    })?;
    Ok(exit::OK)
}
