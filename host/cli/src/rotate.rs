//! `aegis rotate`: hand a record from one signing key to the next, on the record itself.
//!
//! It appends one short session to the record: an open line under the current key, a
//! `key_handoff` line that key signs naming the next key, and a close line signed by
//! the next key (spec/SPEC.md §6.3, §9.8). Later sessions opened with the next key then
//! verify as continuing the rotation, and a verifier pinned to the old key accepts them
//! through the hand-off.
//!
//! The record is opened as `run` opens `--audit` (the file sink, with its lock: a record
//! another process writes is waited for, or refused with `--no-wait`), under the
//! embedded default profile, whose only part this session uses is its provenance.

use crate::{CliError, exit, print};
use aegis_record::key::{KeyError, SigningKey};
use aegis_record::text::escape;
use aegis_runtime::Host;
use std::path::{Path, PathBuf};

/// `aegis rotate`'s arguments.
#[derive(clap::Args)]
pub struct RotateArgs {
    /// The record to rotate (a durable file sink, as `run --audit`).
    #[arg(long, value_name = "PATH")]
    pub audit: PathBuf,
    /// The key that signs the record now (`aegis keygen`); it signs the hand-off.
    #[arg(long, value_name = "PATH")]
    pub signing_key: PathBuf,
    /// The key that signs the record from now on; it signs the close of this session
    /// and every later one.
    #[arg(long, value_name = "PATH")]
    pub next_key: PathBuf,
    /// Fail at once (exit 5) when another process is writing the record, instead of
    /// waiting for it to finish.
    #[arg(long)]
    pub no_wait: bool,
}

/// Loads a seed file, naming the flag it came from.
fn load(flag: &str, path: &Path) -> Result<SigningKey, CliError> {
    SigningKey::load(path).map_err(|e| {
        let message = format!("{flag}: {e}");
        match e {
            KeyError::Io { .. } => CliError::Unreadable(message),
            _ => CliError::Refused(message),
        }
    })
}

/// `aegis rotate --audit PATH --signing-key OLD --next-key NEW`.
pub fn rotate(a: &RotateArgs) -> Result<u8, CliError> {
    let old = load("--signing-key", &a.signing_key)?;
    let next = load("--next-key", &a.next_key)?;
    if next.public_key() == old.public_key() {
        return Err(CliError::Refused(format!(
            "--next-key is the key --signing-key names (key_id {}): a rotation needs a different key",
            old.key_id()
        )));
    }
    // The open refuses a published key for the current key; the next one would sign
    // every later line of a durable record, so it is held to the same rule.
    if let Some(name) = aegis_record::key::published_test_key(&next.public_key()) {
        return Err(CliError::Refused(format!(
            "--next-key is the published {name} (key_id {}), whose seed anyone can read; create a key of your own with `aegis keygen --out PATH`",
            next.key_id()
        )));
    }
    let profile = aegis_runtime::Profile::embedded("default")
        .map_err(|e| CliError::Refused(e.to_string()))?;
    let builder = Host::builder(profile)
        .audit_file("--audit", &a.audit)
        .signing_key(old.clone())
        .front(aegis_runtime::whereabouts::front("rotate"));
    let interrupts = crate::interrupt::Interrupts::install()
        .map_err(|e| CliError::Refused(format!("signal handlers could not be installed: {e}")))?;
    let host = crate::open_host(builder, a.no_wait, &interrupts)?;
    let audit = host
        .into_audit()
        .map_err(|_| CliError::RecordFailed("the record's session is in use".into()))?;
    let record = escape(&a.audit.display().to_string()).into_owned();
    audit.session.hand_off(next.clone()).map_err(|e| {
        CliError::RecordFailed(format!("{record}: the hand-off could not be written: {e}"))
    })?;
    audit.session.close().map_err(|e| {
        CliError::RecordFailed(format!(
            "{record}: the hand-off was written but the close line was not ({e}); the next session under --next-key anchors it"
        ))
    })?;
    crate::note(format_args!(
        "aegis: {record} now continues under key_id {}; sign later sessions with --next-key's key",
        next.key_id()
    ));
    print(format!("key_handoff from {} to {}\n", old.key_id(), next.key_id()).as_bytes())
        .map_err(|_| CliError::Stdout)?;
    Ok(exit::OK)
}
