//! A durable audit sink: one JSON Lines file, fsynced before an append is reported durable.
//!
//! # Guarantees
//! - `sync` returns only after `fdatasync` covered every line appended before the call.
//!   Concurrent callers share one fsync (group commit): whoever finds no fsync running
//!   starts one that covers everything appended so far, and the others wait for it. Each
//!   caller is still durable before it returns; only the number of fsyncs shrinks.
//! - A failed fsync is sticky: every later `append` and `sync` fails, because Linux may
//!   report a lost writeback once and let the next fsync succeed.
//! - An append is all or nothing: after a short or failed write the file is cut back to
//!   its previous length; if that fails too, the sink refuses everything after.
//! - A file whose last line is torn (no final newline) is refused for appending: a new
//!   line would turn the torn one into a malformed line in the middle of the chain.
//! - One process at a time: the file is locked (advisory `flock`) while open. A second
//!   opener gets [`ErrorKind::BUSY`] at once, naming the holder's pid where the system
//!   says it (Linux `/proc/locks`); waiting is the host's choice, not the sink's.
//! - `existing_tail` reads the file from its end, never the whole file.
//! - A file the sink created and never wrote a line to is removed when the sink is
//!   dropped: a session the host refused to open leaves no empty record behind.
//!
//! # Non-guarantees
//! - What fsync promises is what the filesystem and disk promise.
//! - Relative paths are resolved against the working directory of the process.

use aegis_station_api::{ErrorKind, PluginError, Retention, Sink, Tail, TailKind};
use std::fs::File;
use std::io::{Read, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "file-sink",
        version: env!("CARGO_PKG_VERSION"),
        sink: FileSink::from_config,
    }
}

/// The file sink's config section.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The record file.
    path: PathBuf,
}

struct Writer {
    file: File,
    /// Bytes in the file that are whole lines.
    len: u64,
    /// Count of appends accepted so far.
    appended: u64,
    /// Set by a failed fsync or an unrepairable write; never cleared.
    failed: Option<String>,
    /// Set when the file ended mid-line at open.
    torn_at: Option<u64>,
    /// Whether this sink created the file (it did not exist at open).
    created: bool,
}

struct Commit {
    /// Appends covered by a finished fsync.
    durable: u64,
    /// Whether an fsync is running.
    running: bool,
    failed: Option<String>,
}

/// A JSON Lines file with group-committed fsync.
pub struct FileSink {
    path: PathBuf,
    writer: Mutex<Writer>,
    commit: Mutex<Commit>,
    done: Condvar,
    /// A second descriptor of the same open file, for `fdatasync` outside the writer's
    /// lock (made once: a `dup` and a `close` per sync cost two syscalls a line).
    syncer: File,
    /// Where the last `read_lines` page ended: (line index, byte offset).
    cursor: Mutex<(u64, u64)>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("path", &self.path)
            .finish()
    }
}

/// The refusal of a record path that names something other than a regular file.
fn not_a_file(path: &Path, kind: &std::fs::FileType) -> PluginError {
    #[cfg(unix)]
    use std::os::unix::fs::FileTypeExt as _;
    let what = if kind.is_symlink() {
        "a symbolic link (name the file itself)"
    } else if kind.is_dir() {
        "a directory"
    } else {
        #[cfg(unix)]
        {
            if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        "not a regular file"
    };
    PluginError::new(
        ErrorKind::REFUSED,
        format!(
            "{}: is {what}; a record must be a regular file of its own",
            path.display()
        ),
    )
}

fn io_err(path: &Path, what: &str, e: &std::io::Error) -> PluginError {
    PluginError::new(ErrorKind::IO, format!("{}: {what}: {e}", path.display()))
}

/// The pid of the process holding the `flock` on `file`, as Linux lists it in
/// `/proc/locks`: `N: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`, with
/// the device numbers in hex. Lines of processes waiting (`N: -> FLOCK …`) are skipped.
/// `None` where there is no such file, or the lock is gone by the time it is read.
#[cfg(unix)]
fn lock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    // glibc's split of a dev_t into the kernel's major and minor numbers.
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, id, ..] if *id == want => pid.parse().ok(),
            _ => None,
        }
    })
}

#[cfg(not(unix))]
fn lock_holder(_: &File) -> Option<u32> {
    None
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FileSink {
    /// Builds the sink from its config section: `path = "…"`.
    ///
    /// # Errors
    /// A missing or unknown key, or the file cannot be opened or locked.
    pub fn from_config(config: &str) -> Result<FileSink, PluginError> {
        let config: Config = toml::from_str(config)
            // The message alone: the rendered error quotes the config over several lines,
            // and a refusal is one line.
            .map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message().trim().to_owned()))?;
        FileSink::open(&config.path)
    }

    /// Opens (creating with mode 0600) the record file at `path` and locks it.
    ///
    /// # Errors
    /// The file cannot be opened, read or locked.
    pub fn open(path: &Path) -> Result<FileSink, PluginError> {
        let mut options = std::fs::OpenOptions::new();
        options.read(true).append(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            // A record is a file of its own: never a link someone planted (appending to
            // what it points at), and a FIFO must not block the open before the check.
            options
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        }
        if let Ok(meta) = std::fs::symlink_metadata(path)
            && !meta.file_type().is_file()
        {
            return Err(not_a_file(path, &meta.file_type()));
        }
        // Create only if absent, and remember it: a file this sink made but never wrote
        // to is removed again when it is dropped (a refused session leaves nothing).
        let (mut file, created) = match options.clone().create_new(true).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (
                options.open(path).map_err(|e| io_err(path, "open", &e))?,
                false,
            ),
            Err(e) => return Err(io_err(path, "open", &e)),
        };
        // The path may have changed between the look and the open: check what was opened.
        let kind = file
            .metadata()
            .map_err(|e| io_err(path, "stat", &e))?
            .file_type();
        if !kind.is_file() {
            return Err(not_a_file(path, &kind));
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder =
                    lock_holder(&file).map_or(String::new(), |pid| format!(" (held by pid {pid})"));
                return Err(PluginError::new(
                    ErrorKind::BUSY,
                    format!(
                        "{}: another process is writing this record{holder}",
                        path.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(path, "lock", &e)),
        }
        let len = file
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err(path, "seek", &e))?;
        let torn_at = if len > 0
            && last_byte(&mut file, len).map_err(|e| io_err(path, "read", &e))? != b'\n'
        {
            Some(len)
        } else {
            None
        };
        let syncer = file.try_clone().map_err(|e| io_err(path, "dup", &e))?;
        Ok(FileSink {
            path: path.to_owned(),
            syncer,
            writer: Mutex::new(Writer {
                file,
                len,
                appended: 0,
                failed: None,
                torn_at,
                created,
            }),
            commit: Mutex::new(Commit {
                durable: 0,
                running: false,
                failed: None,
            }),
            done: Condvar::new(),
            cursor: Mutex::new((0, 0)),
        })
    }

    fn fail(&self, why: String) -> PluginError {
        lock(&self.writer).failed.get_or_insert_with(|| why.clone());
        let mut c = lock(&self.commit);
        c.failed.get_or_insert_with(|| why.clone());
        self.done.notify_all();
        PluginError::new(ErrorKind::IO, why)
    }
}

impl Drop for FileSink {
    /// Removes the file if this sink created it and nothing was ever written to it,
    /// so a session the host refused (a published key, say) leaves no empty record
    /// behind. Only the very file it created goes: if the path now names another file,
    /// it is left alone.
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt as _;
        let w = lock(&self.writer);
        if !w.created || w.appended != 0 || w.len != 0 {
            return;
        }
        let (Ok(ours), Ok(there)) = (w.file.metadata(), std::fs::symlink_metadata(&self.path))
        else {
            return;
        };
        if ours.dev() == there.dev() && ours.ino() == there.ino() && there.len() == 0 {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn last_byte(file: &mut File, len: u64) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    file.seek(SeekFrom::Start(len - 1))?;
    file.read_exact(&mut b)?;
    Ok(b[0])
}

/// The longest record line read back: the verifier's bound (aegis_record's
/// `MAX_LINE_BYTES`, which this plugin does not link). A longer line is no line this
/// host wrote.
const MAX_LINE: u64 = 1 << 20;

/// Reads the last line of `file` (of length `len`, ending in `\n`) from the end, in
/// blocks, skipping trailing blank lines.
fn read_last_line(file: &mut File, len: u64) -> std::io::Result<Vec<u8>> {
    // The most of the file's end read to find its last line: the verifier's line bound
    // (aegis_record's MAX_LINE_BYTES), plus room for trailing newlines. A longer last
    // line is no line this host wrote: the tail is refused, not read without end. The
    // blocks double, so the bytes copied stay linear in what is read.
    const MAX_TAIL: u64 = MAX_LINE + 4096;
    let mut block_size: u64 = 4096;
    let mut tail: Vec<u8> = Vec::new();
    let mut pos = len;
    loop {
        let content = {
            let trimmed = tail.iter().rposition(|&b| b != b'\n').map_or(0, |i| i + 1);
            &tail[..trimmed]
        };
        if let Some(i) = content.iter().rposition(|&b| b == b'\n') {
            return Ok(content[i + 1..].to_vec());
        }
        if pos == 0 {
            return Ok(content.to_vec());
        }
        if tail.len() as u64 >= MAX_TAIL {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("its last line is longer than {MAX_TAIL} bytes, more than any record line"),
            ));
        }
        let step = block_size.min(pos).min(MAX_TAIL - tail.len() as u64);
        block_size = block_size.saturating_mul(2);
        pos -= step;
        let mut block = vec![0u8; usize::try_from(step).unwrap_or(0)];
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut block)?;
        block.extend_from_slice(&tail);
        tail = block;
    }
}

impl Sink for FileSink {
    fn retention(&self) -> Retention {
        Retention::DURABLE
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn existing_tail(&self) -> Result<Tail, PluginError> {
        let mut w = lock(&self.writer);
        if let Some(at) = w.torn_at {
            let _ = at;
            return Ok(Tail {
                kind: TailKind::TORN,
                line: Default::default(),
            });
        }
        let len = w.len;
        if len == 0 {
            return Ok(Tail {
                kind: TailKind::EMPTY,
                line: Default::default(),
            });
        }
        let line = read_last_line(&mut w.file, len).map_err(|e| io_err(&self.path, "read", &e))?;
        Ok(if line.is_empty() {
            Tail {
                kind: TailKind::EMPTY,
                line: Default::default(),
            }
        } else {
            Tail {
                kind: TailKind::LINE,
                line: line.into(),
            }
        })
    }

    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        let mut w = lock(&self.writer);
        if let Some(why) = &w.failed {
            return Err(PluginError::new(
                ErrorKind::IO,
                format!("sink stopped: {why}"),
            ));
        }
        if let Some(at) = w.torn_at {
            return Err(PluginError::new(
                ErrorKind::REFUSED,
                format!(
                    "{}: the last line is torn (no newline at byte {at}); refusing to append",
                    self.path.display()
                ),
            ));
        }
        if line.last() != Some(&b'\n') || line[..line.len() - 1].contains(&b'\n') {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "append takes exactly one line ending in a newline",
            ));
        }
        let before = w.len;
        if let Err(e) = w.file.write_all(line) {
            // Cut back to the last whole line so the file stays appendable.
            return match w.file.set_len(before) {
                Ok(()) => Err(io_err(&self.path, "write", &e)),
                Err(cut) => {
                    drop(w);
                    Err(self.fail(format!(
                        "{}: write failed ({e}) and the partial line could not be removed ({cut})",
                        self.path.display()
                    )))
                }
            };
        }
        w.len = before + line.len() as u64;
        w.appended += 1;
        Ok(())
    }

    fn sync(&self) -> Result<(), PluginError> {
        let target = lock(&self.writer).appended;
        let mut c = lock(&self.commit);
        loop {
            if let Some(why) = &c.failed {
                return Err(PluginError::new(
                    ErrorKind::IO,
                    format!("sink stopped: {why}"),
                ));
            }
            if c.durable >= target {
                return Ok(());
            }
            if !c.running {
                break;
            }
            c = self.done.wait(c).unwrap_or_else(PoisonError::into_inner);
        }
        // Lead one fsync for everything appended so far, including other waiters' lines.
        c.running = true;
        drop(c);
        let covers = lock(&self.writer).appended;
        let result = self.syncer.sync_data();
        let mut c = lock(&self.commit);
        c.running = false;
        match result {
            Ok(()) => {
                c.durable = c.durable.max(covers);
                self.done.notify_all();
                Ok(())
            }
            Err(e) => {
                drop(c);
                Err(self.fail(format!("{}: fsync: {e}", self.path.display())))
            }
        }
    }

    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        // Opened again by name for its own offset: never through a link put there since,
        // never a FIFO (aegis_files).
        let mut file =
            aegis_files::open(&self.path).map_err(|e| io_err(&self.path, "open", &e.into_io()))?;
        let mut cursor = lock(&self.cursor);
        let (mut index, offset) = if cursor.0 <= start { *cursor } else { (0, 0) };
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_err(&self.path, "seek", &e))?;
        let mut reader = std::io::BufReader::new(file);
        let mut offset = offset;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while out.len() < max as usize {
            buf.clear();
            // A line and its newline, at most: a longer one is refused, never read
            // without end into memory (export streams a record of any size this way).
            let n = std::io::BufRead::read_until(
                &mut Read::take(&mut reader, MAX_LINE + 1),
                b'\n',
                &mut buf,
            )
            .map_err(|e| io_err(&self.path, "read", &e))?;
            if n as u64 > MAX_LINE && buf.last() != Some(&b'\n') {
                *cursor = (0, 0);
                return Err(PluginError::new(
                    ErrorKind::REFUSED,
                    format!(
                        "{}: line {}: longer than {} bytes, the most a record line may be",
                        self.path.display(),
                        index + 1,
                        MAX_LINE
                    ),
                ));
            }
            if n == 0 || buf.last() != Some(&b'\n') {
                break; // end of file, or a torn last line: not a stored line
            }
            offset += n as u64;
            if index >= start {
                buf.pop();
                out.push(std::mem::take(&mut buf));
            }
            index += 1;
        }
        *cursor = (index, offset);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From a review (helper): the last line was read backwards without a bound, copying
    /// the whole tail at every 4 KiB step, so a huge last line held the open for ever.
    #[test]
    fn a_last_line_longer_than_any_record_line_is_refused_not_read_without_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.aarl");
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'a', 3 << 20));
        text.push(b'\n');
        std::fs::write(&path, &text).unwrap();
        let mut file = File::open(&path).unwrap();
        let e = read_last_line(&mut file, text.len() as u64).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        // A last line within the bound is found, however it ends.
        let ok = b"{\"a\":1}\n{\"b\":2}\n\n".to_vec();
        std::fs::write(&path, &ok).unwrap();
        let mut file = File::open(&path).unwrap();
        assert_eq!(
            read_last_line(&mut file, ok.len() as u64).unwrap(),
            b"{\"b\":2}"
        );
    }

    fn sink(dir: &tempfile::TempDir) -> FileSink {
        FileSink::open(&dir.path().join("r.aarl")).unwrap()
    }

    /// Regression: a session the host refused (a published key on a durable sink)
    /// used to leave an empty record file behind.
    #[test]
    fn a_file_created_and_never_written_is_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.aarl");
        drop(sink(&dir));
        assert!(!path.exists(), "the unused file it created is gone");
        // A file that was there before stays, even empty.
        std::fs::write(&path, b"").unwrap();
        drop(sink(&dir));
        assert!(path.exists(), "a file it did not create is never removed");
        // A file it created and wrote to stays.
        std::fs::remove_file(&path).unwrap();
        let s = sink(&dir);
        s.append(b"{\"a\":1}\n").unwrap();
        drop(s);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
        // If the path now names another file, that file is left alone.
        std::fs::remove_file(&path).unwrap();
        let s = sink(&dir);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        drop(s);
        assert!(path.exists());
    }

    /// A record path that names a link, a device, a FIFO, a socket or a directory is
    /// refused before anything is written: `--audit /dev/null` would keep nothing, a FIFO
    /// would block the writer, and a planted link would append to what it points at.
    #[cfg(unix)]
    #[test]
    fn only_a_regular_file_is_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        let link = dir.path().join("link.aarl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let dangling = dir.path().join("dangling.aarl");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let fifo = dir.path().join("fifo.aarl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let socket = dir.path().join("socket.aarl");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, said) in [
            (link.as_path(), "symbolic link"),
            (dangling.as_path(), "symbolic link"),
            (fifo.as_path(), "FIFO"),
            (socket.as_path(), "socket"),
            (Path::new("/dev/null"), "device"),
            (dir.path(), "directory"),
        ] {
            let Err(e) = FileSink::open(path) else {
                panic!("{} was taken as a record", path.display());
            };
            assert!(
                e.message.contains(said),
                "{}: {}",
                path.display(),
                e.message
            );
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        assert!(
            !dir.path().join("nowhere").exists(),
            "a dangling link is not followed"
        );
    }

    /// The sticky rule, from the first failure on. (The failure is injected through the
    /// sink's own failure path: no regular file can be made to refuse `fsync` here.)
    #[test]
    fn a_failed_fsync_stops_every_later_append_and_sync() {
        let dir = tempfile::tempdir().unwrap();
        let s = sink(&dir);
        s.append(b"{\"a\":1}\n").unwrap();
        s.sync().unwrap();
        s.append(b"{\"b\":2}\n").unwrap();
        let _ = s.fail("fsync: EIO (lost writeback)".into());
        for _ in 0..3 {
            let e = s.sync().unwrap_err();
            assert!(e.message.contains("lost writeback"), "{}", e.message);
            assert!(s.append(b"{\"c\":3}\n").is_err());
        }
        drop(s);
        let stored = std::fs::read(dir.path().join("r.aarl")).unwrap();
        assert!(stored.starts_with(b"{\"a\":1}\n"), "the synced line stays");
        assert!(
            !stored.windows(5).any(|w| w == b"\"c\":3"),
            "nothing after the failure"
        );
    }

    /// A second writer is told the record is busy (not refused), with the holder's pid
    /// on Linux, and gets the record once the first lets go.
    #[test]
    fn a_second_writer_is_busy_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.aarl");
        let first = FileSink::open(&path).unwrap();
        first.append(b"{\"a\":1}\n").unwrap();
        let e = FileSink::open(&path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BUSY, "{}", e.message);
        assert!(
            e.message.contains("another process is writing"),
            "{}",
            e.message
        );
        if cfg!(target_os = "linux") {
            let pid = format!("(held by pid {})", std::process::id());
            assert!(e.message.ends_with(&pid), "{}", e.message);
        }
        drop(first);
        let second = FileSink::open(&path).unwrap();
        assert_eq!(second.existing_tail().unwrap().kind, TailKind::LINE);
    }

    /// Export reads the record through `read_lines`: a line past the verifier's bound
    /// in the middle of a file is refused with its number (before, it was read whole
    /// into memory, however long); a line at the bound is read.
    #[test]
    fn read_lines_refuses_a_line_past_the_bound_and_reads_one_at_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.aarl");
        let at_bound = vec![b'x'; usize::try_from(MAX_LINE).unwrap()];
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(&at_bound);
        text.extend(b"\n{\"b\":2}\n");
        std::fs::write(&path, &text).unwrap();
        let s = FileSink::open(&path).unwrap();
        let lines = s.read_lines(0, 10).unwrap();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], at_bound);
        drop(s);
        let mut text = b"{\"a\":1}\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 << 20));
        text.extend(b"\n{\"b\":2}\n");
        std::fs::write(&path, &text).unwrap();
        let s = FileSink::open(&path).unwrap();
        let e = s.read_lines(0, 10).unwrap_err();
        assert!(e.message.contains("line 2: longer than"), "{}", e.message);
        // Asked again, the same refusal: the cursor did not move past it.
        let e = s.read_lines(1, 10).unwrap_err();
        assert!(e.message.contains("line 2: longer than"), "{}", e.message);
    }

    #[test]
    fn appends_sync_and_reports_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let s = sink(&dir);
        assert_eq!(s.existing_tail().unwrap().kind, TailKind::EMPTY);
        s.append(b"{\"a\":1}\n").unwrap();
        s.append(b"{\"b\":2}\n").unwrap();
        s.sync().unwrap();
        let tail = s.existing_tail().unwrap();
        assert_eq!(tail.kind, TailKind::LINE);
        assert_eq!(tail.line.as_slice(), b"{\"b\":2}");
        assert_eq!(s.read_lines(0, 10).unwrap().len(), 2);
        assert_eq!(s.read_lines(1, 10).unwrap(), vec![b"{\"b\":2}".to_vec()]);
        drop(s);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.path().join("r.aarl"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn tail_of_a_long_file_is_read_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let s = sink(&dir);
        let long = format!("{}\n", "x".repeat(10_000));
        for _ in 0..3 {
            s.append(long.as_bytes()).unwrap();
        }
        s.append(b"last\n").unwrap();
        assert_eq!(s.existing_tail().unwrap().line.as_slice(), b"last");
        s.append(long.as_bytes()).unwrap();
        assert_eq!(s.existing_tail().unwrap().line.len(), 10_000);
    }

    #[test]
    fn a_torn_tail_is_reported_and_never_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.aarl");
        std::fs::write(&path, b"{\"a\":1}\n{\"b\":").unwrap();
        let s = FileSink::open(&path).unwrap();
        assert_eq!(s.existing_tail().unwrap().kind, TailKind::TORN);
        let e = s.append(b"{\"c\":3}\n").unwrap_err();
        assert!(e.message.contains("torn"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n{\"b\":");
    }

    #[test]
    fn config_names_unknown_keys() {
        let e = FileSink::from_config("path = \"x\"\nmode = 1\n").unwrap_err();
        assert_eq!(e.kind, ErrorKind::CONFIG);
        assert!(e.message.contains("mode"), "{e}");
        assert!(
            FileSink::from_config("")
                .unwrap_err()
                .message
                .contains("path")
        );
    }

    /// Many threads append and sync at once; every line lands whole and every sync
    /// returns only after its line is covered.
    #[test]
    fn concurrent_appenders_share_fsyncs_and_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = sink(&dir);
        std::thread::scope(|scope| {
            for t in 0..8 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..50 {
                        s.append(format!("{{\"t\":{t},\"i\":{i}}}\n").as_bytes())
                            .unwrap();
                        s.sync().unwrap();
                        assert!(lock(&s.commit).durable >= 1);
                    }
                });
            }
        });
        let text = std::fs::read_to_string(dir.path().join("r.aarl")).unwrap();
        assert_eq!(text.lines().count(), 400);
        assert_eq!(lock(&s.commit).durable, 400);
    }
}
