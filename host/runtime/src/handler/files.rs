//! Files: paths placed under a granted root, then resolved inside it by cap-std.

use super::{Axis, HandlerError, HostContext, Root};
use cap_std::fs::OpenOptions;
use std::io;
use std::path::Path;

impl HostContext {
    /// Opens a file for reading, under one of the grant's `fs_read` roots.
    ///
    /// `path` is either absolute and under a read root (matched against the canonical
    /// roots component by component, without resolving `path` first), or relative to
    /// the single read root. Everything after the root is resolved by cap-std inside
    /// that root. Write roots are not readable unless the grant lists them in
    /// `fs_read` too.
    ///
    /// # Errors
    /// [`HandlerError::OutsideRoots`] or [`HandlerError::Escapes`] (denied),
    /// [`HandlerError::AmbiguousPath`] for a relative path with several read roots,
    /// [`HandlerError::NotAFile`], or [`HandlerError::Io`].
    pub fn open_read(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        self.note(self.read_file(path))
    }

    fn read_file(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        let axis = Axis::FsRead;
        let (root, rel) = place(axis, &self.read, path)?;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let file = root
            .dir()
            .open(rel)
            .map_err(|e| fs_error(axis, path, root, e))?;
        regular(axis, path, file)
    }

    /// Opens a file for appending, creating it if absent, under one of the grant's
    /// `fs_write` roots. Paths are placed as in [`HostContext::open_read`], against
    /// the write roots. The file is opened write-only, in append mode: existing bytes
    /// cannot be overwritten or read through it.
    ///
    /// # Errors
    /// As [`HostContext::open_read`], on the `fs.write` axis.
    pub fn open_write_append(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        self.note(self.append_file(path))
    }

    fn append_file(&self, path: &Path) -> Result<std::fs::File, HandlerError> {
        let axis = Axis::FsWrite;
        let (root, rel) = place(axis, &self.write, path)?;
        let file = root
            .dir()
            .open_with(rel, OpenOptions::new().append(true).create(true))
            .map_err(|e| fs_error(axis, path, root, e))?;
        regular(axis, path, file)
    }
}

/// Picks the root a path belongs to and the path relative to it.
fn place<'r, 'p>(
    axis: Axis,
    roots: &'r [Root],
    path: &'p Path,
) -> Result<(&'r Root, &'p Path), HandlerError> {
    if path.is_absolute() {
        // Component-wise prefix, longest root first: nested roots resolve in the
        // most specific one. `..` stays in the remainder for cap-std to judge.
        roots
            .iter()
            .filter_map(|r| path.strip_prefix(&r.path).ok().map(|rel| (r, rel)))
            .max_by_key(|(r, _)| r.path.components().count())
            .ok_or_else(|| HandlerError::OutsideRoots {
                axis,
                path: path.to_owned(),
            })
    } else {
        match roots {
            [] => Err(HandlerError::OutsideRoots {
                axis,
                path: path.to_owned(),
            }),
            [only] => Ok((only, path)),
            _ => Err(HandlerError::AmbiguousPath {
                axis,
                path: path.to_owned(),
                roots: roots.len(),
            }),
        }
    }
}

/// Classifies a cap-std open failure.
fn fs_error(axis: Axis, path: &Path, root: &Root, source: io::Error) -> HandlerError {
    // cap-std reports an escape as PermissionDenied with no OS error code; a real
    // EACCES carries one, so the two are told apart without reading the message.
    if source.kind() == io::ErrorKind::PermissionDenied && source.raw_os_error().is_none() {
        HandlerError::Escapes {
            axis,
            path: path.to_owned(),
            root: root.path.clone(),
        }
    } else {
        HandlerError::Io {
            axis,
            target: path.display().to_string(),
            source,
        }
    }
}

fn regular(
    axis: Axis,
    path: &Path,
    file: cap_std::fs::File,
) -> Result<std::fs::File, HandlerError> {
    let file = file.into_std();
    let meta = file.metadata().map_err(|source| HandlerError::Io {
        axis,
        target: path.display().to_string(),
        source,
    })?;
    if meta.is_file() {
        Ok(file)
    } else {
        Err(HandlerError::NotAFile {
            axis,
            path: path.to_owned(),
        })
    }
}
