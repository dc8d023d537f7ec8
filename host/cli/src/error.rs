//! Why a command failed, and the exit code each kind of failure takes.
//!
//! A subcommand returns `Ok(code)` for what it came to (success, verify's and recheck's
//! verdicts, run's class, a server's status, a signal's 128+N) and `Err(CliError)` when
//! it could not do its work. `main` says the error, once, as `error: …` and exits with
//! [`CliError::exit_code`]; the codes are [`crate::exit`]'s, as each `--help` documents.

use crate::exit;
use aegis_record::text::escape;
use aegis_runtime::confine::{self, ConfineError};

/// A command's failure. The message is complete as it stands (anything a file, a peer
/// or a guest chose is already escaped); the variant is the kind, and so the code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line asks for something that cannot be done: a flag's value, a file
    /// in the way, a host file where a confined program may reach it (exit 1).
    #[error("{0}")]
    Usage(String),
    /// The input, a file or a root could not be read or written (exit 2).
    #[error("{0}")]
    Unreadable(String),
    /// Standard output refused the command's data (exit 2). Not said here: [`crate::print`]
    /// kept why, and `main` says it only of a command that otherwise succeeded.
    #[error("standard output could not be written")]
    Stdout,
    /// A profile, plugin, key or sink was refused, or the signal handlers could not be
    /// installed (exit 4).
    #[error("{0}")]
    Refused(String),
    /// Another process is writing the record (exit 5).
    #[error("{0}")]
    Busy(String),
    /// recheck: the record is Tampered, so nothing was replayed (exit 8).
    #[error("{0}")]
    Tampered(String),
    /// An intent, an outcome or the close line could not be written (exit 17).
    #[error("{0}")]
    RecordFailed(String),
    /// As [`CliError::RecordFailed`], said on stderr as it happened (by the relay's
    /// sink), so not again.
    #[error("the record could not be written")]
    RecordFailedSaid,
    /// approvals approve/deny: the request was already decided, or its decision used
    /// (exit 19).
    #[error("{0}")]
    Settled(String),
    /// approvals approve/deny: the request expired before it was decided (exit 20).
    #[error("{0}")]
    Expired(String),
    /// gateway: the address could not be bound, the transport failed or the sandbox was
    /// not built (exit 18).
    #[error("{0}")]
    ServeFailed(String),
    /// A native program could not be confined as required (exit 125) or executed (127).
    #[error("{}", escape(&.0.to_string()))]
    Confine(ConfineError),
    /// A signal ended the command as it failed: `error` is said, and the exit code is
    /// the signal's (128 + N), as for a command the signal stopped.
    #[error("{error}")]
    Interrupted {
        /// What failed.
        error: Box<CliError>,
        /// 128 + the signal.
        code: u8,
    },
}

impl CliError {
    /// The exit code this failure takes.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => exit::TAMPERED_OR_USAGE,
            CliError::Unreadable(_) | CliError::Stdout => exit::UNREADABLE,
            CliError::Refused(_) => exit::REFUSED,
            CliError::Busy(_) => exit::BUSY,
            CliError::Tampered(_) => exit::RECHECK_TAMPERED,
            CliError::RecordFailed(_) | CliError::RecordFailedSaid => exit::RECORD_FAILED,
            CliError::ServeFailed(_) => exit::SERVE_FAILED,
            CliError::Settled(_) => exit::APPROVAL_SETTLED,
            CliError::Expired(_) => exit::APPROVAL_EXPIRED,
            CliError::Confine(ConfineError::Exec(_)) => confine::EXIT_EXEC,
            CliError::Confine(_) => confine::EXIT_REFUSED,
            CliError::Interrupted { code, .. } => *code,
        }
    }

    /// Whether the failure was already said, or is not said at all (see the variants).
    pub fn said(&self) -> bool {
        match self {
            CliError::Stdout | CliError::RecordFailedSaid => true,
            CliError::Interrupted { error, .. } => error.said(),
            _ => false,
        }
    }

    /// This failure, or, when a signal came (`signal`: 128 + N), this failure ending
    /// with the signal's code.
    pub fn or_interrupted(self, signal: Option<u8>) -> CliError {
        match signal {
            Some(code) => CliError::Interrupted {
                error: Box::new(self),
                code,
            },
            None => self,
        }
    }
}
