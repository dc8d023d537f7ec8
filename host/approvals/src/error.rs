//! Why the queue refused: each message one line naming the file (and the member).

use std::io;
use std::path::PathBuf;

/// Why the queue, or a file in it, could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue directory itself is refused: a link, not a directory, another user's,
    /// or open to group or others.
    #[error("{}: {problem}; refused (the approvals queue must be a directory of this user's that only it can reach, mode 0700)", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A file could not be read or written (link, FIFO, too large, not there, …).
    #[error(transparent)]
    File(#[from] aegis_files::FileError),
    /// A file in the queue belongs to another user, or others may write it.
    #[error("{}: {problem}; refused (files in the approvals queue are this user's, mode 0600)", path.display())]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Whose it is, or what access it grants.
        problem: String,
    },
    /// A file is not JSON the queue reads (a duplicate key, a float, torn).
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Why.
        source: aegis_record::json::ParseError,
    },
    /// A member of a file is missing, of the wrong type or not allowed.
    #[error("{}: {field}: {problem}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The member (`scope.tool_id`).
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A record member (scope, verdict, approver) is not as the record writes it.
    #[error("{}: {source}", path.display())]
    Member {
        /// The file.
        path: PathBuf,
        /// Which member, and why.
        source: aegis_record::line::FieldError,
    },
    /// The directory holds more entries than a listing reads.
    #[error("{}: more than {} entries; refused rather than listed in part (remove settled requests)", path.display(), crate::MAX_ENTRIES)]
    TooMany {
        /// The directory.
        path: PathBuf,
    },
    /// The operating system refused (reading the directory, a rename, the watch).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// An id that is not `apr-` and 32 lowercase hex digits.
    #[error("{id:?}: not an approval id (apr- and 32 lowercase hex digits)")]
    BadId {
        /// What was given.
        id: String,
    },
    /// No request of that id is in the queue.
    #[error("{}: no such request in the approvals queue", path.display())]
    NoSuchRequest {
        /// The request file that is not there.
        path: PathBuf,
    },
    /// The store holding the queue failed (unreachable, refused).
    #[error("approvals queue in {location}: {message}")]
    Store {
        /// The store.
        location: String,
        /// Its message.
        message: String,
    },
    /// No default directory: neither an absolute `$XDG_STATE_HOME` nor `$HOME`.
    #[error(
        "no approvals directory: set XDG_STATE_HOME (absolute) or HOME, or name one (--approvals DIR)"
    )]
    NoDefaultDir,
}

impl QueueError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> QueueError {
        let path = path.into();
        move |source| QueueError::Io { path, source }
    }

    pub(crate) fn field(path: &std::path::Path, field: &str, problem: impl Into<String>) -> Self {
        QueueError::Field {
            path: path.to_owned(),
            field: field.to_owned(),
            problem: problem.into(),
        }
    }
}

/// Why a decision was not placed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// A decision for this id exists already (or was already claimed): the first wins.
    #[error("{}: already decided; the first decision stands", path.display())]
    AlreadyDecided {
        /// The decision (or used) file that stands.
        path: PathBuf,
    },
    /// The request expired before it was decided.
    #[error("{}: expired at {expires_at}; it can no longer be approved or denied", path.display())]
    Expired {
        /// The request file.
        path: PathBuf,
        /// When it expired.
        expires_at: String,
    },
    /// No request of that id is in the queue.
    #[error("{}: no such request in the approvals queue", path.display())]
    NoSuchRequest {
        /// The request file that is not there.
        path: PathBuf,
    },
    /// The queue or a file in it was refused.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// Why a decision was not claimed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The decision was claimed before: one use per approval.
    #[error("{}: already used; an approval is used once", path.display())]
    AlreadyUsed {
        /// The used file.
        path: PathBuf,
    },
    /// No decision of that id is in the queue.
    #[error("{}: not decided", path.display())]
    NotDecided {
        /// The decision file that is not there.
        path: PathBuf,
    },
    /// The queue or a file in it was refused.
    #[error(transparent)]
    Queue(#[from] QueueError),
}
