//! The approvals queue: where a host files a call a policy parked, where a person
//! decides it from any process, and where the waiting host is woken to claim the
//! decision.
//!
//! One private directory (`$XDG_STATE_HOME/aegis/approvals` by default) holds, per
//! approval id, `<id>.request` (filed by the parking host), `<id>.decision` (the verdict,
//! with who gave it) and, once the host claimed it, `<id>.used`. Each is canonical JSON
//! written atomically through `aegis-files`.
//!
//! Or the queue lives in a store many hosts reach ([`Queue::in_store`], a [`Store`]: the
//! PostgreSQL audit store), which keeps the same bytes and the two exclusive steps and
//! wakes waiters itself; everything read from it is checked as a file is.
//!
//! # Guarantees
//! - **The directory is private.** [`Queue::open`] creates missing directories with mode
//!   0700 and refuses a queue directory that is a symbolic link, not a directory, owned
//!   by another user, or open to group or others ([`QueueError::Directory`]).
//! - **One decision per id.** [`Queue::decide`] writes the decision to a temporary file,
//!   flushes it, and links it onto `<id>.decision`, which fails rather than replace: of
//!   any number of deciders racing (approvers, the host's own expiry), exactly one wins
//!   and the others get [`DecideError::AlreadyDecided`]. A decision placed after the
//!   first was already claimed is taken back at once and refused the same way.
//! - **One use per decision.** [`Queue::claim`] renames `<id>.decision` to `<id>.used`
//!   with `RENAME_NOREPLACE`: of claimers racing, exactly one gets the decision, the
//!   others [`ClaimError::AlreadyUsed`].
//! - **No polling.** [`Queue::wait`] watches the directory with inotify, then looks for
//!   the decision once (so a decision placed before the watch is not missed), then
//!   sleeps in `poll` until an event names the decision or the deadline passes.
//! - **Reads are bounded and strict.** Every file is read through `aegis-files` (never
//!   through a link, never a FIFO or device, at most [`FILE_CAP`]), must be this user's
//!   and not writable by others, and is parsed as the record's JSON (a duplicate key, a
//!   float or `null` is refused), with every member known and well-formed.
//! - A listing reads at most [`MAX_ENTRIES`] entries; more is an error, never a cut list.
//!   Names that are not `<id>.request|decision|used` are ignored.
//!
//! # Non-guarantees
//! - Only the queue directory itself is checked: a directory above it that another
//!   user can replace can redirect the whole queue (as for every `aegis-files` path).
//! - A decision file is not authenticated by the queue: the approver's signature in it
//!   is checked by whoever claims it (`aegis_record::approval::check`). Anyone who can
//!   write the directory (this user) can write a decision; the record says whose key
//!   signed it.
//! - [`Queue::remove`] racing a late decider can leave an orphan `<id>.decision` with
//!   no request; it is never listed and never claimed (nobody waits on a settled id).
//! - Expiry compares the request's `expires_at` with this machine's clock.
//!
//! # Limits
//! - [`FILE_CAP`] per file; the arguments a request carries at most
//!   [`ARGUMENTS_CAP`] (beyond it they are left out, and the request says so).
//! - [`MAX_ENTRIES`] entries in a listing.

mod error;
mod files;
mod store;
mod wait;

pub use error::{ClaimError, DecideError, QueueError};
pub use files::{ARGUMENTS_CAP, DECISION_FORMAT, DecisionFile, Front, REQUEST_FORMAT, Request};
pub use store::{Store, Stored};

use aegis_files::{Cap, FileError};
use aegis_record::DecisionVerdict;
use aegis_record::json::{self, Object, Value};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The most the queue reads of one file. A request's arguments are at most 64 KiB;
/// escaped, with its scope and bound axes, a request stays well inside this.
pub const FILE_CAP: Cap = Cap::new(256 << 10, "an approvals queue file");

/// The most entries a listing reads from the directory.
pub const MAX_ENTRIES: usize = 10_000;

/// Whether `id` is an approval id: `apr-` and 32 lowercase hex digits
/// (`aegis_record::line::new_approval_id`).
pub fn is_approval_id(id: &str) -> bool {
    id.strip_prefix("apr-").is_some_and(|hex| {
        hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Waiting for a decision, not expired.
    Pending,
    /// Past its `expires_at`, with no decision.
    Expired,
    /// Decided, not yet claimed by its host.
    Decided(DecisionFile),
    /// Decided and claimed by its host.
    Used(DecisionFile),
}

impl State {
    /// `pending`, `expired`, `approved`, `denied`, `used`.
    pub fn name(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Expired => "expired",
            State::Decided(d) => match d.verdict {
                DecisionVerdict::Approved { .. } => "approved",
                DecisionVerdict::Denied { .. } => "denied",
            },
            State::Used(_) => "used",
        }
    }
}

/// One request in a listing, and where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The request.
    pub request: Request,
    /// Its state.
    pub state: State,
}

impl Listed {
    /// The request's members, its `state`, and the decision when there is one: what
    /// `aegis approvals list --json` prints a line of.
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("request", self.request.to_object());
        o.insert("state", self.state.name());
        if let State::Decided(d) | State::Used(d) = &self.state {
            o.insert("decision", d.to_object());
        }
        o
    }
}

/// The queue: a directory, checked, or a store.
#[derive(Clone, Debug)]
pub struct Queue {
    at: At,
    /// What rows or files are named under in errors: the directory, or the store's
    /// location.
    base: PathBuf,
}

#[derive(Clone, Debug)]
enum At {
    Dir,
    Store(Arc<dyn Store>),
}

/// The kinds of file, by suffix.
pub(crate) const REQUEST: &str = "request";
pub(crate) const DECISION: &str = "decision";
const USED: &str = "used";

impl Queue {
    /// The default directory: `$XDG_STATE_HOME/aegis/approvals` when that is absolute,
    /// else `$HOME/.local/state/aegis/approvals`.
    ///
    /// # Errors
    /// [`QueueError::NoDefaultDir`] when neither is set.
    pub fn default_dir() -> Result<PathBuf, QueueError> {
        if let Some(state) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from)
            && state.is_absolute()
        {
            return Ok(state.join("aegis/approvals"));
        }
        match std::env::var_os("HOME").map(PathBuf::from) {
            Some(home) if home.is_absolute() => Ok(home.join(".local/state/aegis/approvals")),
            _ => Err(QueueError::NoDefaultDir),
        }
    }

    /// Opens the queue at `dir`, creating it and missing parents with mode 0700.
    ///
    /// # Errors
    /// [`QueueError::Directory`] for a link, not a directory, another user's directory,
    /// or one group or others can reach; [`QueueError::Io`] when it cannot be made.
    pub fn open(dir: &Path) -> Result<Queue, QueueError> {
        let meta = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                make_dirs(dir)?;
                std::fs::symlink_metadata(dir).map_err(QueueError::io(dir))?
            }
            Err(e) => return Err(QueueError::io(dir)(e)),
        };
        let refuse = |problem: String| QueueError::Directory {
            path: dir.to_owned(),
            problem,
        };
        if meta.file_type().is_symlink() {
            return Err(refuse("a symbolic link".into()));
        }
        if !meta.is_dir() {
            return Err(refuse("not a directory".into()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt as _;
            let euid = euid();
            if meta.uid() != euid {
                return Err(refuse(format!(
                    "owned by uid {}, not this user (uid {euid})",
                    meta.uid()
                )));
            }
            if meta.mode() & 0o077 != 0 {
                return Err(refuse(format!(
                    "mode {:04o}: group or others may reach it",
                    meta.mode() & 0o7777
                )));
            }
        }
        Ok(Queue {
            at: At::Dir,
            base: dir.to_owned(),
        })
    }

    /// The queue a store holds: the audit store many hosts write, so that whoever
    /// reaches the store can decide a park any of them made.
    pub fn in_store(store: Arc<dyn Store>) -> Queue {
        Queue {
            base: PathBuf::from(store.location()),
            at: At::Store(store),
        }
    }

    /// The directory; `None` for a queue in a store.
    pub fn dir(&self) -> Option<&Path> {
        match self.at {
            At::Dir => Some(&self.base),
            At::Store(_) => None,
        }
    }

    /// Where the queue is, for an operator: the directory, or the store.
    pub fn location(&self) -> String {
        self.base.display().to_string()
    }

    /// The store's operations, for a queue in a store.
    fn in_store_ops(&self) -> Option<store::InStore<'_>> {
        match &self.at {
            At::Dir => None,
            At::Store(s) => Some(store::InStore {
                store: s.as_ref(),
                base: &self.base,
            }),
        }
    }

    /// The path of `<id>.<kind>`.
    fn path(&self, id: &str, kind: &str) -> PathBuf {
        self.base.join(format!("{id}.{kind}"))
    }

    /// The request file of `id` (whether or not it exists).
    pub fn request_path(&self, id: &str) -> PathBuf {
        self.path(id, REQUEST)
    }

    /// Files a request (mode 0600). A request of the same id is never replaced.
    ///
    /// # Errors
    /// An ill-formed id, a request of that id already there, or the write failed.
    pub fn file(&self, request: &Request) -> Result<(), QueueError> {
        checked_id(&request.approval_id)?;
        if let Some(s) = self.in_store_ops() {
            return s.file(request);
        }
        let path = self.path(&request.approval_id, REQUEST);
        place(&path, &request.to_object())
    }

    /// The request of `id`.
    ///
    /// # Errors
    /// [`QueueError::BadId`], [`QueueError::NoSuchRequest`], or the file refused.
    pub fn request(&self, id: &str) -> Result<Request, QueueError> {
        checked_id(id)?;
        if let Some(s) = self.in_store_ops() {
            return s.request(id);
        }
        let path = self.path(id, REQUEST);
        let obj = read_object(&path)?.ok_or(QueueError::NoSuchRequest { path: path.clone() })?;
        let r = Request::from_object(&obj, &path)?;
        same_id(&path, id, &r.approval_id)?;
        Ok(r)
    }

    /// Where the request of `id` stands.
    ///
    /// # Errors
    /// As [`Queue::request`], or a decision file refused.
    pub fn state(&self, id: &str) -> Result<State, QueueError> {
        if let Some(s) = self.in_store_ops() {
            checked_id(id)?;
            return s.state(id);
        }
        let request = self.request(id)?;
        self.state_of(&request)
    }

    fn state_of(&self, request: &Request) -> Result<State, QueueError> {
        let id = &request.approval_id;
        if let Some(d) = self.decision_at(&self.path(id, USED), id)? {
            return Ok(State::Used(d));
        }
        if let Some(d) = self.decision_at(&self.path(id, DECISION), id)? {
            return Ok(State::Decided(d));
        }
        if expired(request) {
            return Ok(State::Expired);
        }
        Ok(State::Pending)
    }

    /// The decision file at `path`, if there is one.
    fn decision_at(&self, path: &Path, id: &str) -> Result<Option<DecisionFile>, QueueError> {
        let Some(obj) = read_object(path)? else {
            return Ok(None);
        };
        let d = DecisionFile::from_object(&obj, path)?;
        same_id(path, id, &d.approval_id)?;
        Ok(Some(d))
    }

    /// Every request in the queue with its state, oldest park first (then by id).
    ///
    /// # Errors
    /// [`QueueError::TooMany`], the directory unreadable, or a file refused.
    pub fn list(&self) -> Result<Vec<Listed>, QueueError> {
        let mut listed = match self.in_store_ops() {
            Some(s) => s.list()?,
            None => self.list_dir()?,
        };
        listed.sort_by(|a, b| {
            (&a.request.parked_at, &a.request.approval_id)
                .cmp(&(&b.request.parked_at, &b.request.approval_id))
        });
        Ok(listed)
    }

    fn list_dir(&self) -> Result<Vec<Listed>, QueueError> {
        let dir = &self.base;
        let entries = std::fs::read_dir(dir).map_err(QueueError::io(dir))?;
        let mut ids = Vec::new();
        for (n, entry) in entries.enumerate() {
            if n >= MAX_ENTRIES {
                return Err(QueueError::TooMany { path: dir.clone() });
            }
            let entry = entry.map_err(QueueError::io(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(id) = name.strip_suffix(".request")
                && is_approval_id(id)
            {
                ids.push(id.to_owned());
            }
        }
        let mut listed = Vec::with_capacity(ids.len());
        for id in ids {
            let request = match self.request(&id) {
                Ok(r) => r,
                // Settled and removed between the listing and the read.
                Err(QueueError::NoSuchRequest { .. }) => continue,
                Err(e) => return Err(e),
            };
            let state = self.state_of(&request)?;
            listed.push(Listed { request, state });
        }
        Ok(listed)
    }

    /// Places `decision` as the one decision of its id.
    ///
    /// A person's decision is refused once the request has expired; the host's own
    /// ([`aegis_record::Approver::Host`]: expiry, withdrawal) is not, since it is how expiry is
    /// settled.
    ///
    /// # Errors
    /// [`DecideError::NoSuchRequest`], [`DecideError::Expired`],
    /// [`DecideError::AlreadyDecided`] when a decision exists or was claimed, or the
    /// queue refused.
    pub fn decide(&self, decision: &DecisionFile) -> Result<(), DecideError> {
        let id = decision.approval_id.as_str();
        if let Some(s) = self.in_store_ops() {
            checked_id(id)?;
            return s.decide(decision);
        }
        let request = match self.request(id) {
            Ok(r) => r,
            Err(QueueError::NoSuchRequest { path }) => {
                return Err(DecideError::NoSuchRequest { path });
            }
            Err(e) => return Err(e.into()),
        };
        let used = self.path(id, USED);
        let path = self.path(id, DECISION);
        if exists(&used)? {
            return Err(DecideError::AlreadyDecided { path: used });
        }
        if exists(&path)? {
            return Err(DecideError::AlreadyDecided { path });
        }
        if !decision.by_host() && expired(&request) {
            return Err(DecideError::Expired {
                path: self.path(id, REQUEST),
                expires_at: request.expires_at,
            });
        }
        let placed = decision.to_object();
        match place(&path, &placed) {
            Ok(()) => {}
            Err(QueueError::File(FileError::Exists { .. })) => {
                return Err(DecideError::AlreadyDecided { path });
            }
            Err(e) => return Err(e.into()),
        }
        if exists(&used)? {
            // A host waiting on the request may have claimed this very decision the
            // moment it appeared: it stands, and was used.
            let ours = placed.to_canonical();
            let is_ours =
                |p: &Path| matches!(read_object(p), Ok(Some(o)) if o.to_canonical() == ours);
            if is_ours(&used) {
                return Ok(());
            }
            // Else the first decision was claimed (renamed away) between the look above
            // and the link: this one came second, so it is taken back. A claim of it in
            // between would have failed, `<id>.used` being there.
            if is_ours(&path) {
                let _ = std::fs::remove_file(&path);
            }
            return Err(DecideError::AlreadyDecided { path: used });
        }
        Ok(())
    }

    /// Claims the decision of `id` for use: it becomes `<id>.used`, once.
    ///
    /// # Errors
    /// [`ClaimError::AlreadyUsed`], [`ClaimError::NotDecided`], or the queue refused
    /// (the claimed file unreadable: the claim then stands, unused).
    pub fn claim(&self, id: &str) -> Result<DecisionFile, ClaimError> {
        checked_id(id)?;
        if let Some(s) = self.in_store_ops() {
            return s.claim(id);
        }
        let from = self.path(id, DECISION);
        let to = self.path(id, USED);
        match rename_noreplace(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(ClaimError::AlreadyUsed { path: to });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(if exists(&to)? {
                    ClaimError::AlreadyUsed { path: to }
                } else {
                    ClaimError::NotDecided { path: from }
                });
            }
            Err(e) => return Err(QueueError::io(&from)(e).into()),
        }
        sync_dir(&self.base)?;
        let d = self
            .decision_at(&to, id)?
            .ok_or_else(|| QueueError::io(&to)(std::io::ErrorKind::NotFound.into()))?;
        Ok(d)
    }

    /// Waits until `id` has a decision (or a used one) or `deadline` passes (`None`).
    /// Does not claim it.
    ///
    /// # Errors
    /// The watch could not be set up, or the decision file was refused.
    pub fn wait(
        &self,
        id: &str,
        deadline: std::time::Instant,
    ) -> Result<Option<DecisionFile>, QueueError> {
        checked_id(id)?;
        if let Some(s) = self.in_store_ops() {
            return s.wait(id, deadline);
        }
        let name = format!("{id}.{DECISION}");
        let watch = wait::Watch::new(&self.base)?;
        loop {
            // Looked at after the watch is set, and after each event naming it: a
            // decision placed at any moment is seen.
            if let Some(d) = self.decision_at(&self.path(id, DECISION), id)? {
                return Ok(Some(d));
            }
            if let Some(d) = self.decision_at(&self.path(id, USED), id)? {
                return Ok(Some(d));
            }
            if !watch.until(&name, deadline)? {
                return Ok(None);
            }
        }
    }

    /// Removes a settled request: its request, used and decision files.
    ///
    /// # Errors
    /// A file that is there could not be removed.
    pub fn remove(&self, id: &str) -> Result<(), QueueError> {
        checked_id(id)?;
        if let Some(s) = self.in_store_ops() {
            return s.remove(id);
        }
        for kind in [REQUEST, USED, DECISION] {
            let path = self.path(id, kind);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(QueueError::io(&path)(e)),
            }
        }
        sync_dir(&self.base)
    }
}

/// Whether the request is past its expiry by this machine's clock.
pub fn expired(request: &Request) -> bool {
    // One fixed-width form: times compare as their text does.
    request.expires_at.as_str() < aegis_record::time::now().as_str()
}

pub(crate) fn checked_id(id: &str) -> Result<(), QueueError> {
    if is_approval_id(id) {
        Ok(())
    } else {
        Err(QueueError::BadId { id: id.to_owned() })
    }
}

pub(crate) fn same_id(path: &Path, want: &str, got: &str) -> Result<(), QueueError> {
    if want == got {
        Ok(())
    } else {
        Err(QueueError::field(
            path,
            "approval_id",
            format!("{got:?}, but the file is named for {want}"),
        ))
    }
}

/// Whether anything stands at `path` (a link included, never followed).
fn exists(path: &Path) -> Result<bool, QueueError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(QueueError::io(path)(e)),
    }
}

/// Writes `obj` as canonical JSON at `path`, never replacing anything (mode 0600).
fn place(path: &Path, obj: &Object) -> Result<(), QueueError> {
    let mut file = aegis_files::AtomicFile::create(path, aegis_files::Replace::Never, 0o600)?;
    file.write_all(&obj.to_canonical())
        .map_err(QueueError::io(path))?;
    match file.commit() {
        // In place; only the directory flush failed. The decision stands either way.
        Ok(()) | Err(FileError::NotFlushed { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The object in the file at `path`; `None` when nothing is there.
fn read_object(path: &Path) -> Result<Option<Object>, QueueError> {
    let file = match aegis_files::open(path) {
        Ok(f) => f,
        Err(FileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let meta = file.metadata().map_err(QueueError::io(path))?;
        let euid = euid();
        if meta.uid() != euid {
            return Err(QueueError::Foreign {
                path: path.to_owned(),
                problem: format!("owned by uid {}, not this user (uid {euid})", meta.uid()),
            });
        }
        if meta.mode() & 0o022 != 0 {
            return Err(QueueError::Foreign {
                path: path.to_owned(),
                problem: format!(
                    "mode {:04o}: group or others may write it",
                    meta.mode() & 0o7777
                ),
            });
        }
    }
    let mut bytes = Vec::new();
    file.take(FILE_CAP.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(QueueError::io(path))?;
    parse_object(&bytes, path).map(Some)
}

/// The object `bytes` hold (a file's, or a store's row named `path`): at most
/// [`FILE_CAP`], the record's JSON, one object.
pub(crate) fn parse_object(bytes: &[u8], path: &Path) -> Result<Object, QueueError> {
    if bytes.len() as u64 > FILE_CAP.bytes {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            cap: FILE_CAP,
        }
        .into());
    }
    match json::parse(bytes) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(QueueError::field(path, "", "not a JSON object")),
        Err(source) => Err(QueueError::Json {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Creates `dir` and its missing parents, each mode 0700.
fn make_dirs(dir: &Path) -> Result<(), QueueError> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        b.mode(0o700);
    }
    b.create(dir).map_err(QueueError::io(dir))
}

#[cfg(unix)]
fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // A file system without RENAME_NOREPLACE: a link (which refuses to replace),
        // then the old name removed.
        Err(rustix::io::Errno::INVAL) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

/// Flushes a rename's directory entry: opened as a directory only, never blocking
/// (`aegis_files::sync_dir`), so a FIFO or device put in the queue's place is refused.
fn sync_dir(dir: &Path) -> Result<(), QueueError> {
    aegis_files::sync_dir(dir).map_err(QueueError::io(dir))
}
