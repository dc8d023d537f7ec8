//! Files the host opens on the operator's behalf: pins, reports, exports, keys, policies,
//! profiles, manifests, trust stores, records read back, input files.
//!
//! The host often runs beside a program it does not trust (a wrapped MCP server, a
//! confined command) that can write into some of the same directories. A path the
//! operator typed is then only a name: by the time the host opens it, the untrusted
//! program may have put a symbolic link there (the host would write through it, a
//! confused deputy), a FIFO (the host would block forever in `open`), or an endless
//! file (the host would read until memory runs out). Every such file goes through this
//! crate.
//!
//! # Guarantees
//! - **Reading** ([`open`], [`read`], [`read_to_string`]): the final component of the
//!   path is never followed if it is a symbolic link (`O_NOFOLLOW`); the open never
//!   blocks (`O_NONBLOCK`, so a FIFO with no writer is opened and then refused) and never
//!   acquires a controlling terminal (`O_NOCTTY`); what was opened is checked through the
//!   descriptor (`fstat`) and refused unless it is a regular file. Whatever stands at the
//!   path is looked at first (`lstat`), so a device is refused before it is opened at all.
//! - [`read`] and [`read_to_string`] read at most the [`Cap`] they are given, plus one
//!   byte to tell "exactly the cap" from "over it": memory is bounded by the cap whatever
//!   the file's size (a sparse file, `/proc` files that grow while read).
//! - **Writing** ([`write()`], [`AtomicFile`]): the new content is written to a fresh
//!   temporary file created with `O_EXCL | O_NOFOLLOW` in the target's own directory
//!   (an unpredictable name: nobody can plant it first), flushed to disk (`fsync`), and
//!   renamed over the target; then the directory is flushed too. Renaming replaces the
//!   directory entry, never what a link at the target points to, so a link planted at
//!   the path at any moment is replaced, not written through; a reader sees the old
//!   content or the new, never a torn file. A target that is not a regular file (a link,
//!   a FIFO, a device, a directory) is refused when the write starts and again just
//!   before the rename.
//! - **Following** ([`Growing`]): a file opened by [`open`]'s rules and read as it
//!   grows; one that shrinks, or whose name comes to lead to another file, is said to
//!   be gone, never read on as if it were the same.
//! - Every error is one line that names the file ([`FileError`]).
//!
//! # Non-guarantees
//! - Only the **final** component is protected. A directory on the way that is a
//!   symbolic link is followed: a program that can replace a parent directory of the
//!   path with a link can redirect the whole path. This is why the CLI refuses to write a
//!   host file inside a directory it grants a confined program write access to
//!   ([`inside`]), rather than relying on this crate.
//! - A **hard link** is a regular file like any other and is read as one: a name can
//!   only be hard-linked to a file by someone who could already read it, and the host
//!   reading it reveals nothing to the linker unless the host echoes its content. A hard
//!   link at a path being *written* is harmless: the rename replaces the name, and the
//!   other names of the old file keep the old content.
//! - Between the final check and the rename, something may replace the target; the
//!   rename then replaces that instead (it is never followed or written into).
//! - The file's content is not authenticated: a program that can write the file can
//!   still change what it says. Pins, policies and profiles should live where only the
//!   operator writes ([`inside`] tells the CLI when they do not).
//! - A crash between the rename and the directory flush may lose the new name on some
//!   file systems; the old file or the new one is there, never a torn one.
//! - On systems other than Unix, the flags above do not exist: the path is checked
//!   before and after an ordinary open, and a link may be followed in between.
//!
//! # Limits
//! - [`Cap`]: each caller names the most it reads of a kind of file, and why. The shared
//!   one for hand-written configuration is [`CONFIG`].

use std::fmt;
use std::fs::{File, FileType};
use std::io::{self, Read as _, Write};
use std::path::{Path, PathBuf};

mod growing;
pub use growing::{Growing, Grown};

/// The most the host reads of one kind of file, with the kind's name for the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// The most bytes read.
    pub bytes: u64,
    /// What the file is, for the error: `a policy file`, `a pins file`.
    pub what: &'static str,
}

impl Cap {
    /// A cap of `bytes` for files described as `what`.
    pub const fn new(bytes: u64, what: &'static str) -> Cap {
        Cap { bytes, what }
    }
}

/// Configuration written by hand or generated for the operator: a policy, a profile, a
/// manifest. Real ones are kilobytes; 4 MiB is about 100 000 lines, far past any of
/// them, while the parsers (YAML, TOML, Cedar) hold several times the text in memory
/// and a file grown without end would take the host's memory with it.
pub const CONFIG: Cap = Cap::new(4 << 20, "a configuration file");

/// What stands at a path when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A symbolic link (never followed).
    Symlink,
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A character device (`/dev/zero`, a terminal).
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A Unix socket.
    Socket,
    /// Anything else that is not a regular file.
    Other,
}

impl Kind {
    /// The kind of `t`, or `None` for a regular file.
    pub fn of(t: FileType) -> Option<Kind> {
        #[cfg(unix)]
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_file() {
            return None;
        }
        Some(if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Directory
        } else {
            #[cfg(unix)]
            {
                if t.is_fifo() {
                    Kind::Fifo
                } else if t.is_char_device() {
                    Kind::CharDevice
                } else if t.is_block_device() {
                    Kind::BlockDevice
                } else if t.is_socket() {
                    Kind::Socket
                } else {
                    Kind::Other
                }
            }
            #[cfg(not(unix))]
            Kind::Other
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Symlink => "a symbolic link",
            Kind::Directory => "a directory",
            Kind::Fifo => "a FIFO",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Socket => "a socket",
            Kind::Other => "a special file",
        })
    }
}

/// Why a file was not read or written. Each message is one line naming the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The operating system refused (not found, permission denied, disk full, …).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Something other than a regular file stands at the path.
    #[error("{}: {found}, not a regular file; refused (aegis reads and writes only a regular file here, never through a link)", path.display())]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What is there.
        found: Kind,
    },
    /// The file holds more than the cap for its kind.
    #[error("{}: larger than {}, the most aegis reads of {}", path.display(), size(cap.bytes), cap.what)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap it went over.
        cap: Cap,
    },
    /// The file is not UTF-8 text.
    #[error("{}: not UTF-8 text", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The new content is in place, but the directory could not be flushed after it: a
    /// crash before the system flushes it may bring the old file back.
    #[error("{}: written and in place, but its directory could not be flushed ({source}); a crash now may undo the write", path.display())]
    NotFlushed {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The write was not to replace an existing file, and one exists.
    #[error("{}: already exists", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A directory tree goes on past a [`WalkBound`]: refused, never read as the part
    /// that fit.
    #[error("{}: {what}; refused rather than read in part", path.display())]
    Unbounded {
        /// The directory walked.
        path: PathBuf,
        /// Which bound, and its value.
        what: String,
    },
}

impl FileError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            FileError::Io { path, .. }
            | FileError::NotFlushed { path, .. }
            | FileError::NotAFile { path, .. }
            | FileError::TooLarge { path, .. }
            | FileError::NotUtf8 { path }
            | FileError::Exists { path }
            | FileError::Unbounded { path, .. } => path,
        }
    }

    /// The cause alone, without the path, as an [`io::Error`]: for a caller whose own
    /// error type already names the file (`PATH: CAUSE`).
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            FileError::Io { source, .. } | FileError::NotFlushed { source, .. } => source.kind(),
            FileError::NotAFile { .. } => io::ErrorKind::InvalidInput,
            FileError::TooLarge { .. } => io::ErrorKind::FileTooLarge,
            FileError::NotUtf8 { .. } => io::ErrorKind::InvalidData,
            FileError::Exists { .. } => io::ErrorKind::AlreadyExists,
            FileError::Unbounded { .. } => io::ErrorKind::FileTooLarge,
        };
        if let FileError::Io { source, .. } = self {
            return source;
        }
        let full = self.to_string();
        let prefix = format!("{}: ", self.path().display());
        io::Error::new(kind, full.strip_prefix(&prefix).unwrap_or(&full).to_owned())
    }
}

/// `4 MiB`, `64 KiB`, `130 bytes`.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
    |source| FileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Refuses whatever stands at `path` unless it is a regular file; `Ok(false)` when
/// nothing does.
fn regular_or_absent(path: &Path) -> Result<bool, FileError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => match Kind::of(meta.file_type()) {
            None => Ok(true),
            Some(found) => Err(FileError::NotAFile {
                path: path.to_owned(),
                found,
            }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Opens `path` for reading: never through a final symbolic link, never blocking, and
/// only a regular file (checked on the opened descriptor).
///
/// # Errors
/// [`FileError::NotAFile`] for a link, FIFO, device, socket or directory;
/// [`FileError::Io`] when it cannot be opened.
pub fn open(path: &Path) -> Result<File, FileError> {
    // Look first, so a device is refused without being opened (opening one can have
    // effects of its own); then check what was opened, since the path may change between.
    regular_or_absent(path)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = match options.open(path) {
        Ok(f) => f,
        // ELOOP (a link swapped in after the look) or ENXIO (a socket): say what is there.
        Err(e) => {
            regular_or_absent(path)?;
            return Err(io_error(path)(e));
        }
    };
    let meta = file.metadata().map_err(io_error(path))?;
    if let Some(found) = Kind::of(meta.file_type()) {
        return Err(FileError::NotAFile {
            path: path.to_owned(),
            found,
        });
    }
    Ok(file)
}

/// Reads all of `path` ([`open`]'s checks), refusing a file over `cap`.
///
/// # Errors
/// [`open`]'s, [`FileError::TooLarge`], or [`FileError::Io`] when reading fails.
pub fn read(path: &Path, cap: Cap) -> Result<Vec<u8>, FileError> {
    let file = open(path)?;
    let hint = file.metadata().map_or(0, |m| m.len()).min(cap.bytes);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.take(cap.bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io_error(path))?;
    if bytes.len() as u64 > cap.bytes {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            cap,
        });
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
///
/// # Errors
/// [`read`]'s, or [`FileError::NotUtf8`].
pub fn read_to_string(path: &Path, cap: Cap) -> Result<String, FileError> {
    String::from_utf8(read(path, cap)?).map_err(|_| FileError::NotUtf8 {
        path: path.to_owned(),
    })
}

/// Whether an [`AtomicFile`] may replace a file already at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replace {
    /// Never: an existing file is [`FileError::Exists`], even one that appears while
    /// the new content is written (the new file is linked in with `link`, which fails
    /// rather than replace).
    Never,
    /// A regular file is replaced; anything else is refused.
    RegularFile,
}

/// A file being written to a temporary name beside its path, which takes the path's
/// place only on [`AtomicFile::commit`]. Dropped without a commit, it removes the
/// temporary file and leaves the path as it was.
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    replace: Replace,
}

impl AtomicFile {
    /// Starts writing `path`: checks what stands there now, and creates the temporary
    /// file (`O_EXCL | O_NOFOLLOW`, `mode` before the umask; ignored off Unix).
    ///
    /// # Errors
    /// [`FileError::NotAFile`] when something other than a regular file is at `path`;
    /// [`FileError::Exists`] under [`Replace::Never`] when anything is; [`FileError::Io`].
    pub fn create(path: &Path, replace: Replace, mode: u32) -> Result<AtomicFile, FileError> {
        if regular_or_absent(path)? && replace == Replace::Never {
            return Err(FileError::Exists {
                path: path.to_owned(),
            });
        }
        let dir = parent(path);
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix)
            .map_err(|e| io_error(path)(io::Error::other(format!("no randomness: {e}"))))?;
        let hex: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = dir.join(format!(".aegis-{hex}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY);
        }
        #[cfg(not(unix))]
        let _ = mode;
        let file = options.open(&tmp).map_err(io_error(path))?;
        #[cfg(unix)]
        if let Ok(old) = std::fs::symlink_metadata(path)
            && old.is_file()
        {
            // A file replaced keeps no more access than it had: an operator's `chmod 600`
            // on a pins file survives the rewrite (the new one is never wider than
            // either the old file or `mode`).
            use std::os::unix::fs::PermissionsExt as _;
            let created = file
                .metadata()
                .map_err(io_error(path))?
                .permissions()
                .mode();
            let kept = created & old.permissions().mode() & 0o777;
            if kept != created & 0o777 {
                let tidy = |e| {
                    let _ = std::fs::remove_file(&tmp);
                    io_error(path)(e)
                };
                file.set_permissions(std::fs::Permissions::from_mode(kept))
                    .map_err(tidy)?;
            }
        }
        Ok(AtomicFile {
            path: path.to_owned(),
            tmp,
            file: Some(file),
            replace,
        })
    }

    /// The path this file will take.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the content to disk, puts it at the path, and flushes the directory.
    ///
    /// # Errors
    /// As [`AtomicFile::create`] (the path is checked again), or [`FileError::Io`]; the
    /// path is then as it was, and the temporary file is removed.
    pub fn commit(mut self) -> Result<(), FileError> {
        let path = self.path.clone();
        let file = self.file.take().expect("a file until committed");
        file.sync_all().map_err(io_error(&path))?;
        drop(file);
        match self.replace {
            Replace::RegularFile => {
                regular_or_absent(&path)?;
                std::fs::rename(&self.tmp, &path).map_err(io_error(&path))?;
            }
            Replace::Never => place_new(&self.tmp, &path, |a, b| std::fs::hard_link(a, b))?,
        }
        // The temporary name is gone (renamed, or unlinked after the link).
        self.tmp = PathBuf::new();
        sync_dir(parent(&path)).map_err(|source| FileError::NotFlushed {
            path: path.clone(),
            source,
        })
    }
}

/// Puts `tmp` at `path` only if nothing is there: a hard link (which fails rather
/// than replace), then the temporary name removed. Where the file system has no hard
/// links (FAT, some FUSE and network mounts), a rename that refuses to replace
/// (`RENAME_NOREPLACE`) instead. `link` is `std::fs::hard_link`, taken as a parameter
/// so the fallback can be tested on any file system.
fn place_new(
    tmp: &Path,
    path: &Path,
    link: impl Fn(&Path, &Path) -> io::Result<()>,
) -> Result<(), FileError> {
    let exists_or_io = |e: io::Error| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            FileError::Exists {
                path: path.to_owned(),
            }
        } else {
            io_error(path)(e)
        }
    };
    match link(tmp, path) {
        Ok(()) => {
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        Err(e) if no_hard_links(&e) => rename_noreplace(tmp, path).map_err(exists_or_io),
        Err(e) => Err(exists_or_io(e)),
    }
}

/// Whether `link(2)` failed because the file system has no hard links.
fn no_hard_links(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(_from: &Path, _to: &Path) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "this file system has no hard links, and this system no rename that refuses to replace",
    ))
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file
            .as_mut()
            .expect("a file until committed")
            .write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("a file until committed").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Replaces (or creates) the regular file `path` with `bytes`, atomically (mode 0666
/// before the umask, as `std::fs::write`).
///
/// # Errors
/// As [`AtomicFile::create`] and [`AtomicFile::commit`].
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let mut file = AtomicFile::create(path, Replace::RegularFile, 0o666)?;
    file.write_all(bytes).map_err(io_error(path))?;
    file.commit()
}

/// The directory a file at `path` lives in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Flushes the directory entry of a rename. The directory is opened never blocking and
/// only as a directory (`O_DIRECTORY`: a FIFO or a device there is refused). A link to
/// it is followed, as the rename just followed it: a parent directory named through a
/// link (`/var/run`) is the same directory either way.
///
/// # Errors
/// The directory could not be opened as one, or flushed.
#[cfg(unix)]
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(dir)?
        .sync_all()
}

/// Flushes the directory entry of a rename (nothing to do off Unix).
///
/// # Errors
/// None off Unix.
#[cfg(not(unix))]
pub fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// The first of `dirs` a program granted them could use to change what `path` names,
/// if any: where it could replace the file, plant a link or a FIFO in its place, or
/// redirect a directory on the way.
///
/// Two tests, either enough:
/// - **By name.** The entry of the file, or of any directory on the way to it as the
///   path names them (a link included), lives beneath one of `dirs`: the program could
///   replace that entry. Each entry's own name is not resolved (a link planted there is
///   still inside, and a link inside a grant that points out is inside too, since the
///   program can swap it); the directories above it are, as are `dirs`. A directory
///   that does not exist yet counts by where it would be.
/// - **By identity.** A directory the path resolves through is one of `dirs` by device
///   and inode: a bind mount, a link to a grant, or another spelling of it (a
///   case-insensitive file system) is the same directory whatever its name.
///
/// `dirs` that do not exist hold nothing. A path whose directory cannot be placed (a
/// `..` after a directory that does not exist yet, which a granted program could
/// create as a link) counts as inside the first of `dirs`: fail closed.
pub fn inside<'d>(path: &Path, dirs: &'d [PathBuf]) -> Option<&'d Path> {
    if dirs.is_empty() {
        return None;
    }
    let Some(file) = resolve_parent(path) else {
        return dirs.first().map(PathBuf::as_path);
    };
    // Each grant as written (made absolute) and as it resolves, placed once.
    let placed: Vec<(&'d Path, [Option<PathBuf>; 2])> = dirs
        .iter()
        .map(|d| {
            let forms = [std::path::absolute(d).ok(), std::fs::canonicalize(d).ok()];
            (d.as_path(), forms)
        })
        .collect();
    let by_name = |entry: &Path| {
        placed
            .iter()
            .find(|(_, forms)| forms.iter().flatten().any(|d| entry.starts_with(d)))
            .map(|(d, _)| *d)
    };
    // Every prefix of the path as given, each placed as the file is: its directory
    // resolved, its own name kept.
    let Ok(absolute) = std::path::absolute(path) else {
        return dirs.first().map(PathBuf::as_path);
    };
    let mut prefix = PathBuf::new();
    for part in absolute.components() {
        prefix.push(part);
        if !matches!(part, std::path::Component::Normal(_)) {
            continue;
        }
        match resolve_parent(&prefix) {
            Some(entry) => {
                if let Some(d) = by_name(&entry) {
                    return Some(d);
                }
            }
            None => return dirs.first().map(PathBuf::as_path),
        }
    }
    by_identity(&file, dirs)
}

/// The first of `dirs` that is, by device and inode, the directory `file` resolves
/// into or one above it (the file itself too, when it is a directory).
#[cfg(unix)]
fn by_identity<'d>(file: &Path, dirs: &'d [PathBuf]) -> Option<&'d Path> {
    use std::os::unix::fs::MetadataExt as _;
    let ids: Vec<(u64, u64, &Path)> = dirs
        .iter()
        .filter_map(|d| {
            std::fs::metadata(d)
                .ok()
                .map(|m| (m.dev(), m.ino(), d.as_path()))
        })
        .collect();
    // The deepest existing place, links followed (a directory named by the path is
    // the one it resolves to), then each directory above it up to `/`.
    let mut at = file.to_path_buf();
    let start = loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            break real;
        }
        if !at.pop() {
            return None;
        }
    };
    start.ancestors().find_map(|a| {
        let m = std::fs::metadata(a).ok()?;
        ids.iter()
            .find(|(dev, ino, _)| (*dev, *ino) == (m.dev(), m.ino()))
            .map(|(_, _, d)| *d)
    })
}

#[cfg(not(unix))]
fn by_identity<'d>(_file: &Path, _dirs: &'d [PathBuf]) -> Option<&'d Path> {
    None
}

/// `path` made absolute with every directory on the way resolved (the nearest existing
/// ancestor canonicalized, the rest joined as written), its final name left as it is.
fn resolve_parent(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let name = absolute.file_name()?.to_owned();
    let mut dir = absolute.parent()?.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&dir) {
            let mut out = real;
            out.extend(rest.iter().rev());
            out.push(name);
            return Some(out);
        }
        rest.push(dir.file_name()?.to_owned());
        dir = dir.parent()?.to_path_buf();
    }
}

/// How far [`walk`] goes. A tree that goes on past either bound (one an untrusted
/// program keeps growing, a loop of bind mounts) is refused whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkBound {
    /// The most entries listed, directories included.
    pub entries: usize,
    /// The most directories deep beneath the one walked.
    pub depth: usize,
}

/// An entry [`walk`] found beneath a directory, other than a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A regular file when listed; [`open`] checks it again when it is read.
    File(PathBuf),
    /// Something else: a symbolic link (never followed, whatever it points to), a FIFO,
    /// a socket, a device. Named so the caller reports it rather than skip it.
    NotAFile {
        /// The entry.
        path: PathBuf,
        /// What it is.
        found: Kind,
    },
}

/// Every entry beneath `dir` that is not a directory, in order: the tree walked depth
/// first, each directory's entries sorted by name (bytewise), so two walks of the same
/// tree list the same paths in the same order. Links are listed, never followed, so a
/// walk cannot leave `dir` or loop; `dir` itself must be a directory, not a link to one.
///
/// # Errors
/// [`FileError::NotAFile`] when `dir` is not a directory; [`FileError::Io`] when a
/// directory cannot be listed; [`FileError::Unbounded`] past `bound`.
pub fn walk(dir: &Path, bound: WalkBound) -> Result<Vec<Found>, FileError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io_error(dir))?;
    if !meta.is_dir() {
        return Err(FileError::NotAFile {
            path: dir.to_owned(),
            found: Kind::of(meta.file_type()).unwrap_or(Kind::Other),
        });
    }
    let mut found = Vec::new();
    let mut listed = 0usize;
    // Directories still to list, deepest-first order kept by pushing in reverse.
    let mut pending: Vec<(PathBuf, usize)> = vec![(dir.to_owned(), 0)];
    while let Some((at, depth)) = pending.pop() {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&at).map_err(io_error(&at))? {
            let entry = entry.map_err(io_error(&at))?;
            listed += 1;
            if listed > bound.entries {
                return Err(FileError::Unbounded {
                    path: dir.to_owned(),
                    what: format!("holds more than {} entries", bound.entries),
                });
            }
            // The entry's own type: a link is a link, not what it points to.
            let kind = entry.file_type().map_err(io_error(&entry.path()))?;
            entries.push((entry.file_name(), kind));
        }
        entries.sort_by(|a, b| a.0.as_encoded_bytes().cmp(b.0.as_encoded_bytes()));
        let mut deeper = Vec::new();
        for (name, kind) in entries {
            let path = at.join(&name);
            match Kind::of(kind) {
                None => found.push(Found::File(path)),
                Some(Kind::Directory) => {
                    if depth + 1 > bound.depth {
                        return Err(FileError::Unbounded {
                            path: dir.to_owned(),
                            what: format!("goes deeper than {} directories", bound.depth),
                        });
                    }
                    deeper.push(path);
                }
                Some(kind) => found.push(Found::NotAFile { path, found: kind }),
            }
        }
        // Files of a directory before its subdirectories, subdirectories in order.
        pending.extend(deeper.into_iter().rev().map(|d| (d, depth + 1)));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walk lists every file in one order, names links and FIFOs instead of following
    /// or opening them, and refuses a tree past its bounds rather than list part of it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_walk_lists_in_order_follows_no_link_and_keeps_its_bounds() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("b/deep")).unwrap();
        std::fs::create_dir(d.join("a")).unwrap();
        for f in ["z.aarl", "a/1.aarl", "b/2.aarl", "b/deep/3.aarl"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), d.join("link-to-dir")).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, d.join("fifo"), rustix::fs::Mode::RUSR).unwrap();
        let wide = WalkBound {
            entries: 100,
            depth: 8,
        };
        let got = walk(d, wide).unwrap();
        assert_eq!(
            got,
            vec![
                Found::NotAFile {
                    path: d.join("fifo"),
                    found: Kind::Fifo
                },
                Found::NotAFile {
                    path: d.join("link-to-dir"),
                    found: Kind::Symlink
                },
                Found::File(d.join("z.aarl")),
                Found::File(d.join("a/1.aarl")),
                Found::File(d.join("b/2.aarl")),
                Found::File(d.join("b/deep/3.aarl")),
            ]
        );
        let shallow = WalkBound { depth: 1, ..wide };
        let error = walk(d, shallow).unwrap_err().to_string();
        assert!(
            error.ends_with("goes deeper than 1 directories; refused rather than read in part"),
            "{error}"
        );
        let few = WalkBound { entries: 8, ..wide };
        assert!(matches!(walk(d, few), Err(FileError::Unbounded { .. })));
        // The directory walked may not be a link either.
        assert!(matches!(
            walk(&d.join("link-to-dir"), wide),
            Err(FileError::NotAFile {
                found: Kind::Symlink,
                ..
            })
        ));
    }

    /// From a review (helper): `GRANT/new/../x` with `GRANT/new` absent could not be
    /// resolved and was read as outside, though the program could create `new` as a
    /// link and send the write anywhere. It counts as inside now.
    #[test]
    fn a_path_that_cannot_be_placed_counts_as_inside() {
        let grant = tempfile::tempdir().unwrap();
        let dirs = [grant.path().to_path_buf()];
        let odd = grant.path().join("new").join("..").join(".pins");
        assert!(inside(&odd, &dirs).is_some());
        let outside = tempfile::tempdir().unwrap();
        assert!(inside(&outside.path().join("x"), &dirs).is_none());
        assert!(inside(&outside.path().join("no/../x"), &[]).is_none());
    }

    /// From a review (helper): `G/cfg -> ../safe` resolved outside the grant, so a host
    /// file named `G/cfg/x` passed the check, and the program could swap `G/cfg` for a
    /// directory of its own afterwards. A link (or a directory) on the way that lives in
    /// a grant counts as inside, wherever it points.
    #[cfg(unix)]
    #[test]
    fn a_link_on_the_way_that_lives_in_a_grant_is_inside() {
        let root = tempfile::tempdir().unwrap();
        let (grant, safe) = (root.path().join("g"), root.path().join("safe"));
        std::fs::create_dir(&grant).unwrap();
        std::fs::create_dir(&safe).unwrap();
        std::os::unix::fs::symlink("../safe", grant.join("cfg")).unwrap();
        let dirs = [grant.clone()];
        assert!(inside(&grant.join("cfg/pins"), &dirs).is_some());
        assert!(inside(&grant.join("cfg/../../safe/pins"), &dirs).is_some());
        // The same file named without passing through the grant is outside it.
        assert!(inside(&safe.join("pins"), &dirs).is_none());
    }

    /// From a review (helper): a bind mount, or a link to a grant, names the granted
    /// directory by another path; string prefixes missed it. Compared by device and
    /// inode, it is the grant. (A link stands in for the bind mount, which needs root.)
    #[cfg(unix)]
    #[test]
    fn a_grant_reached_by_another_name_is_the_grant() {
        let root = tempfile::tempdir().unwrap();
        let grant = root.path().join("g");
        std::fs::create_dir(&grant).unwrap();
        let alias = root.path().join("alias");
        std::os::unix::fs::symlink(&grant, &alias).unwrap();
        // A grant given through the alias, a file named through the real path.
        assert!(inside(&grant.join("policy.yaml"), std::slice::from_ref(&alias)).is_some());
        // A directory that is a link into the grant (a cache, a plugin directory).
        let cache = root.path().join("cache");
        std::os::unix::fs::symlink(&grant, &cache).unwrap();
        let grants = std::slice::from_ref(&grant);
        assert!(inside(&cache, grants).is_some());
        assert!(inside(&cache.join("modules/x"), grants).is_some());
        assert!(inside(&root.path().join("other"), &[grant]).is_none());
    }

    /// From a review (helper): the flush after the rename opened the directory with
    /// `O_NOFOLLOW`, so a file written through a linked directory (`/var/run`) was
    /// renamed into place and then reported as failed.
    #[cfg(unix)]
    #[test]
    fn a_file_written_through_a_linked_directory_is_not_an_error() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.path().join("link")).unwrap();
        let p = root.path().join("link/report.json");
        write(&p, b"{}").unwrap();
        assert_eq!(
            std::fs::read(root.path().join("real/report.json")).unwrap(),
            b"{}"
        );
    }

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn reads_a_regular_file_within_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("policy.yaml");
        std::fs::write(&p, "rules: []\n").unwrap();
        assert_eq!(read_to_string(&p, CONFIG).unwrap(), "rules: []\n");
        let exact = Cap::new(10, "a test file");
        assert_eq!(read(&p, exact).unwrap().len(), 10);
    }

    #[test]
    fn refuses_a_file_over_its_cap_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.yaml");
        std::fs::write(&p, [b'a'; 2049]).unwrap();
        let e = read(&p, Cap::new(2048, "a policy file")).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: larger than 2 KiB, the most aegis reads of a policy file",
                p.display()
            )
        );
    }

    /// A sparse file claims gigabytes while holding none: memory stays at the cap.
    #[test]
    fn a_sparse_file_is_read_only_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sparse");
        File::create(&p).unwrap().set_len(1 << 40).unwrap();
        let e = read(&p, Cap::new(1 << 20, "a test file")).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn refuses_a_symlink_even_to_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read(&link, CONFIG).unwrap_err();
        assert!(
            matches!(
                e,
                FileError::NotAFile {
                    found: Kind::Symlink,
                    ..
                }
            ),
            "{e}"
        );
        assert!(!e.to_string().contains('\n'));
        assert!(e.to_string().starts_with(&link.display().to_string()));
    }

    #[cfg(unix)]
    #[test]
    fn refuses_a_symlink_to_dev_zero_a_device_a_directory_and_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        for (path, kind) in [
            (link.as_path(), Kind::Symlink),
            (Path::new("/dev/zero"), Kind::CharDevice),
            (Path::new("/dev/null"), Kind::CharDevice),
            (dir.path(), Kind::Directory),
            // Opened without a writer, a FIFO would block here forever.
            (fifo.as_path(), Kind::Fifo),
        ] {
            match read(path, CONFIG) {
                Err(FileError::NotAFile { found, .. }) => assert_eq!(found, kind, "{path:?}"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope");
        let e = read(&p, CONFIG).unwrap_err();
        assert!(matches!(e, FileError::Io { .. }));
        assert!(e.to_string().starts_with(&p.display().to_string()));
        let io = e.into_io();
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn into_io_drops_the_path_but_keeps_the_cause() {
        let e = FileError::NotAFile {
            path: PathBuf::from("/x/.pins"),
            found: Kind::Fifo,
        };
        let io = e.into_io();
        assert!(
            io.to_string().starts_with("a FIFO, not a regular file"),
            "{io}"
        );
    }

    #[test]
    fn write_creates_and_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        write(&p, b"one\n").unwrap();
        write(&p, b"two\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    /// The confused deputy: a link planted at the path must not be written through.
    #[cfg(unix)]
    #[test]
    fn write_refuses_a_planted_link_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let p = dir.path().join(".pins");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let e = write(&p, b"pins\n").unwrap_err();
        assert!(
            matches!(
                e,
                FileError::NotAFile {
                    found: Kind::Symlink,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        assert!(p.symlink_metadata().unwrap().file_type().is_symlink());
    }

    /// A link planted after the check, while the content is being written, is replaced by
    /// the rename, never followed.
    #[cfg(unix)]
    #[test]
    fn a_link_planted_during_the_write_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let p = dir.path().join("report.json");
        let mut f = AtomicFile::create(&p, Replace::RegularFile, 0o666).unwrap();
        f.write_all(b"{}\n").unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        // The second check refuses the link; the target is untouched either way.
        assert!(f.commit().is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        let names = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names, 2, "the temporary file is removed");
    }

    #[cfg(unix)]
    #[test]
    fn write_to_a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("report.json");
        mkfifo(&p);
        let e = write(&p, b"{}\n").unwrap_err();
        assert!(
            matches!(
                e,
                FileError::NotAFile {
                    found: Kind::Fifo,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[cfg(unix)]
    /// From a review (helper): a rewritten file took the default mode, so an operator's
    /// `chmod 600` on a pins file or a report was undone by the next write.
    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_no_more_access_than_it_had() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pins");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        write(&p, b"one").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        write(&p, b"two").unwrap();
        assert_eq!(mode(&p), 0o600);
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        // Nor more than the writer asks for: a secret stays private over a wide file.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut f = AtomicFile::create(&p, Replace::RegularFile, 0o600).unwrap();
        f.write_all(b"three").unwrap();
        f.commit().unwrap();
        assert_eq!(mode(&p), 0o600);
    }

    /// Where the file system has no hard links (`link` fails EPERM on FAT), a file that
    /// must not replace another is placed by a rename that refuses to replace: placed
    /// where the path is free, refused where anything is.
    #[cfg(target_os = "linux")]
    #[test]
    fn without_hard_links_a_new_file_is_placed_by_a_rename_that_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let no_links = |_: &Path, _: &Path| Err(io::Error::from_raw_os_error(libc::EPERM));
        let (tmp, p) = (dir.path().join(".t"), dir.path().join("key"));
        std::fs::write(&tmp, b"new").unwrap();
        place_new(&tmp, &p, no_links).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(!tmp.exists());
        std::fs::write(&tmp, b"newer").unwrap();
        let e = place_new(&tmp, &p, no_links).unwrap_err();
        assert!(matches!(e, FileError::Exists { .. }), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        // Another failure of `link` is that failure, not a rename.
        let broken = |_: &Path, _: &Path| Err(io::Error::from_raw_os_error(libc::EIO));
        let q = dir.path().join("other");
        assert!(matches!(
            place_new(&tmp, &q, broken),
            Err(FileError::Io { .. })
        ));
        assert!(!q.exists());
    }

    #[test]
    fn a_hard_link_being_replaced_keeps_its_other_name_intact() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let p = dir.path().join(".pins");
        std::fs::hard_link(&victim, &p).unwrap();
        write(&p, b"pins\n").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        assert_eq!(std::fs::read(&p).unwrap(), b"pins\n");
    }

    #[test]
    fn never_replace_refuses_an_existing_file_and_one_that_appears() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, b"old").unwrap();
        assert!(matches!(
            AtomicFile::create(&p, Replace::Never, 0o600),
            Err(FileError::Exists { .. })
        ));
        let q = dir.path().join("key2");
        let mut f = AtomicFile::create(&q, Replace::Never, 0o600).unwrap();
        f.write_all(b"new").unwrap();
        std::fs::write(&q, b"raced").unwrap();
        assert!(matches!(f.commit(), Err(FileError::Exists { .. })));
        assert_eq!(std::fs::read(&q).unwrap(), b"raced");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[cfg(unix)]
    #[test]
    fn inside_resolves_the_directory_but_not_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let alias = dir.path().join("alias");
        std::os::unix::fs::symlink(&project, &alias).unwrap();
        let grants = vec![project.clone()];
        assert!(inside(&project.join(".pins"), &grants).is_some());
        assert!(
            inside(&alias.join(".pins"), &grants).is_some(),
            "through a link"
        );
        assert!(inside(&project.join("new/sub/.pins"), &grants).is_some());
        assert!(inside(&dir.path().join(".pins"), &grants).is_none());
        assert!(inside(&dir.path().join("projectx/.pins"), &grants).is_none());
        // A grant given through a link counts where it resolves.
        assert!(inside(&project.join("r.json"), &[alias]).is_some());
        // A file granted by name.
        let file = project.join("report.json");
        assert!(inside(&file, std::slice::from_ref(&file)).is_some());
    }
}
