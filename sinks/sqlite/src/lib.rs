//! A durable audit sink in SQLite, the way a vendor would ship one: a separate library,
//! loaded by path, never built into the host.
//!
//! # Guarantees
//! - Each line is one row, inserted in its own transaction: all or nothing.
//! - WAL journal with `synchronous = FULL`: a committed insert is durable, so `append`
//!   returning means the line is on disk and `sync` only reports a sticky failure.
//! - After any failed insert the sink refuses everything, like the file sink.
//! - `read_lines` returns the stored bytes unchanged, so `aegis export` writes a file
//!   `aegis verify` checks byte for byte.
//!
//! # Non-guarantees
//! - No group commit: every append pays one WAL fsync.
//! - The database is not locked against a second Aegis process; SQLite serializes
//!   writes, but two sessions interleaving lines would be reported as a broken chain.

use aegis_station_api::{ErrorKind, PluginError, Retention, Sink, Tail, TailKind};
use rusqlite::{Connection, OpenFlags, OptionalExtension as _, params};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "sqlite-sink",
        version: env!("CARGO_PKG_VERSION"),
        sink: SqliteSink::from_config,
    }
}
aegis_station_api::export_root!(crate::plugin_module);

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    path: PathBuf,
}

struct State {
    db: Connection,
    failed: Option<String>,
}

/// Record lines as rows of one table.
pub struct SqliteSink {
    path: PathBuf,
    state: Mutex<State>,
}

/// `path` with its directory resolved (links followed) and its final name as written;
/// `path` itself when the directory cannot be resolved (SQLite then says why).
fn real_directory(path: &std::path::Path) -> PathBuf {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(real), Some(name)) => real.join(name),
        _ => path.to_owned(),
    }
}

fn db_err(path: &std::path::Path, e: &rusqlite::Error) -> PluginError {
    PluginError::new(ErrorKind::IO, format!("{}: {e}", path.display()))
}

impl SqliteSink {
    /// Opens (creating) the database at `path = "…"`.
    ///
    /// # Errors
    /// A bad config, or the database cannot be opened or set up.
    pub fn from_config(config: &str) -> Result<SqliteSink, PluginError> {
        let c: Config =
            toml::from_str(config).map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message()))?;
        // Never through a link (SQLite's own O_NOFOLLOW), never a FIFO, a device or a
        // directory: the record is a regular file of its own, as the file sink's is.
        if let Ok(m) = std::fs::symlink_metadata(&c.path)
            && !m.is_file()
        {
            let found = if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            return Err(PluginError::new(
                ErrorKind::REFUSED,
                format!(
                    "{}: {found}; refused (the record must be a regular file of its own, never reached through a link)",
                    c.path.display()
                ),
            ));
        }
        // SQLite's NOFOLLOW refuses a link anywhere in the name, where the file sink
        // refuses one only at the final name: the directories are resolved first, so a
        // profile reached through a linked ~/.config works with either sink.
        let opened = real_directory(&c.path);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let db = Connection::open_with_flags(&opened, flags).map_err(|e| db_err(&c.path, &e))?;
        db.pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| db.pragma_update(None, "synchronous", "FULL"))
            .and_then(|()| {
                db.execute_batch(
                    "CREATE TABLE IF NOT EXISTS aegis_lines (
                         idx   INTEGER PRIMARY KEY AUTOINCREMENT,
                         bytes BLOB NOT NULL
                     );",
                )
            })
            .map_err(|e| db_err(&c.path, &e))?;
        Ok(SqliteSink {
            path: c.path,
            state: Mutex::new(State { db, failed: None }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Sink for SqliteSink {
    fn retention(&self) -> Retention {
        Retention::DURABLE
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn existing_tail(&self) -> Result<Tail, PluginError> {
        let s = self.state();
        let last: Option<Vec<u8>> =
            s.db.query_row(
                "SELECT bytes FROM aegis_lines ORDER BY idx DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| db_err(&self.path, &e))?;
        Ok(match last {
            None => Tail {
                kind: TailKind::EMPTY,
                line: Default::default(),
            },
            Some(line) => Tail {
                kind: TailKind::LINE,
                line: line.into(),
            },
        })
    }

    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        let mut s = self.state();
        if let Some(why) = &s.failed {
            return Err(PluginError::new(
                ErrorKind::IO,
                format!("sink stopped: {why}"),
            ));
        }
        let Some(line) = line.strip_suffix(b"\n").filter(|l| !l.contains(&b'\n')) else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "append takes exactly one line ending in a newline",
            ));
        };
        if let Err(e) =
            s.db.execute("INSERT INTO aegis_lines (bytes) VALUES (?1)", params![line])
        {
            let why = format!("{}: {e}", self.path.display());
            s.failed = Some(why.clone());
            return Err(PluginError::new(ErrorKind::IO, why));
        }
        Ok(())
    }

    fn sync(&self) -> Result<(), PluginError> {
        // Every insert committed with synchronous=FULL: nothing is left to flush.
        match &self.state().failed {
            Some(why) => Err(PluginError::new(
                ErrorKind::IO,
                format!("sink stopped: {why}"),
            )),
            None => Ok(()),
        }
    }

    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        let s = self.state();
        let mut stmt =
            s.db.prepare("SELECT bytes FROM aegis_lines ORDER BY idx LIMIT ?1 OFFSET ?2")
                .map_err(|e| db_err(&self.path, &e))?;
        let offset = i64::try_from(start).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![i64::from(max), offset], |r| r.get::<_, Vec<u8>>(0))
            .map_err(|e| db_err(&self.path, &e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| db_err(&self.path, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record is never reached through a link (a dangling one would create the
    /// database where it points), nor opened as a FIFO or a directory: each is refused
    /// with its kind named, and nothing is created.
    #[cfg(unix)]
    #[test]
    fn a_link_a_fifo_or_a_directory_at_the_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.db");
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let fifo = dir.path().join("fifo.db");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let sub = dir.path().join("sub.db");
        std::fs::create_dir(&sub).unwrap();
        for (path, says) in [
            (&link, "a symbolic link"),
            (&fifo, "not a regular file"),
            (&sub, "a directory"),
        ] {
            let e = SqliteSink::from_config(&format!("path = {path:?}"))
                .err()
                .unwrap();
            assert_eq!(e.kind, ErrorKind::REFUSED, "{}", e.message);
            assert!(e.message.contains(says), "{}", e.message);
        }
        assert!(
            !elsewhere.exists(),
            "the database was made through the link"
        );
        // A link on the way (a dotfiles-managed ~/.config) is followed, as the file
        // sink follows it: only the final name must not be a link.
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("via")).unwrap();
        let via = dir.path().join("via/r.db");
        SqliteSink::from_config(&format!("path = {via:?}")).unwrap();
        assert!(dir.path().join("real/r.db").is_file());
    }

    #[test]
    fn rows_round_trip_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = format!("path = {:?}", dir.path().join("a.db"));
        let s = SqliteSink::from_config(&cfg).unwrap();
        assert_eq!(s.existing_tail().unwrap().kind, TailKind::EMPTY);
        s.append("{\"é\":\"\u{1f600}\"}\n".as_bytes()).unwrap();
        s.append(b"{\"b\":2}\n").unwrap();
        s.sync().unwrap();
        assert_eq!(s.existing_tail().unwrap().line.as_slice(), b"{\"b\":2}");
        let all = s.read_lines(0, 10).unwrap();
        assert_eq!(all[0], "{\"é\":\"\u{1f600}\"}".as_bytes());
        assert_eq!(s.read_lines(1, 10).unwrap().len(), 1);
        drop(s);
        let reopened = SqliteSink::from_config(&cfg).unwrap();
        assert_eq!(reopened.read_lines(0, 10).unwrap().len(), 2);
        assert!(reopened.append(b"two\nlines\n").is_err());
        assert!(SqliteSink::from_config("path = 1").is_err());
    }
}
