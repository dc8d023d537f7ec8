//! A file read as it grows, as `tail -f` reads it: the record a host is appending to.

use crate::{FileError, open};
use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

/// What one look at a growing file found.
#[derive(Debug)]
pub enum Grown {
    /// Bytes appended since the last look.
    Data(Vec<u8>),
    /// Nothing new yet.
    Idle,
    /// The file shrank below what was read: why, naming the file. A record only grows,
    /// so what was read is no longer the file's.
    Gone(String),
    /// The name now leads to another file (replaced, or rotated with a new file in its
    /// place): why, naming the file. What was read was the file's; nothing more will be.
    Replaced(String),
    /// The name leads nowhere now (the file was removed, or moved away): why, naming the
    /// file. What was read was the file's; nothing more will be.
    Removed(String),
}

/// A regular file opened by [`open`]'s rules and read from where the last read ended.
///
/// A file that shrinks below what was read is [`Grown::Gone`]: the bytes read are no
/// longer the file's. A name that now leads to another file is [`Grown::Replaced`], and
/// one that leads nowhere (removed, or moved away with nothing in its place yet) is
/// [`Grown::Removed`]: what was read was the file's, and nothing more will be.
#[derive(Debug)]
pub struct Growing {
    file: File,
    path: PathBuf,
    read: u64,
    /// How long it was when opened.
    opened_len: u64,
    buf: Vec<u8>,
    /// The opened file's device and inode, to notice the name leading elsewhere.
    #[cfg(unix)]
    id: (u64, u64),
}

impl Growing {
    /// Opens `path` ([`open`]'s checks: no final link, only a regular file).
    ///
    /// # Errors
    /// [`open`]'s.
    pub fn open(path: &Path) -> Result<Growing, FileError> {
        let file = open(path)?;
        let meta = file.metadata().map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })?;
        #[cfg(unix)]
        let id = {
            use std::os::unix::fs::MetadataExt as _;
            (meta.dev(), meta.ino())
        };
        Ok(Growing {
            file,
            path: path.to_owned(),
            read: 0,
            opened_len: meta.len(),
            buf: Vec::new(),
            #[cfg(unix)]
            id,
        })
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How long the file was when opened: what it held before it was followed.
    pub fn opened_len(&self) -> u64 {
        self.opened_len
    }

    /// How many bytes were read so far.
    pub fn read_so_far(&self) -> u64 {
        self.read
    }

    /// Reads at most `chunk` bytes appended since the last call.
    ///
    /// # Errors
    /// [`FileError::Io`] when reading or looking at the file fails.
    pub fn next(&mut self, chunk: usize) -> Result<Grown, FileError> {
        let failed = |source: io::Error| FileError::Io {
            path: self.path.clone(),
            source,
        };
        // One buffer for every read: a file looked at often and found unchanged costs
        // no allocation.
        if self.buf.len() != chunk {
            self.buf = vec![0; chunk];
        }
        let n = loop {
            match self.file.read(&mut self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(failed(e)),
            }
        };
        if n > 0 {
            self.read += n as u64;
            return Ok(Grown::Data(self.buf[..n].to_vec()));
        }
        let name = self.path.display();
        let len = self.file.metadata().map_err(failed)?.len();
        if len < self.read {
            return Ok(Grown::Gone(format!(
                "{name} shrank to {len} bytes after {} were read",
                self.read
            )));
        }
        // Looked at without following a link: the name must still lead to the file
        // being read.
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if self.same_file(&m) => Ok(Grown::Idle),
            Ok(_) => Ok(Grown::Replaced(format!(
                "{name} was replaced by another file"
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Ok(Grown::Removed(format!("{name} was removed")))
            }
            Err(e) => Err(failed(e)),
        }
    }

    #[cfg(unix)]
    fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        (meta.dev(), meta.ino()) == self.id
    }

    #[cfg(not(unix))]
    fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        meta.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn reads_what_was_appended_and_notices_a_shrink_or_a_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        std::fs::write(&path, b"one\n").unwrap();
        let mut growing = Growing::open(&path).unwrap();
        assert!(matches!(growing.next(64).unwrap(), Grown::Data(d) if d == b"one\n"));
        assert!(matches!(growing.next(64).unwrap(), Grown::Idle));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"two\n").unwrap();
        assert!(matches!(growing.next(64).unwrap(), Grown::Data(d) if d == b"two\n"));
        assert_eq!(growing.read_so_far(), 8);
        f.set_len(2).unwrap();
        assert!(matches!(growing.next(64).unwrap(), Grown::Gone(why) if why.contains("shrank")));

        let mut growing = Growing::open(&path).unwrap();
        std::fs::rename(&path, dir.path().join("old")).unwrap();
        std::fs::write(&path, b"new").unwrap();
        growing.next(64).unwrap();
        assert!(
            matches!(growing.next(64).unwrap(), Grown::Replaced(why) if why.contains("replaced"))
        );
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(growing.next(64).unwrap(), Grown::Removed(why) if why.contains("removed"))
        );
    }

    #[test]
    fn a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("real"), b"x").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        assert!(matches!(
            Growing::open(&dir.path().join("link")),
            Err(FileError::NotAFile { .. })
        ));
    }
}
