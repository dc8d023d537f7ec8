//! Opening a plugin file so that no other user can choose which file it is.
//!
//! The path is resolved here, not by the kernel in one `open`: from `/`, one component
//! at a time, each directory opened (`O_PATH | O_NOFOLLOW`) relative to the descriptor
//! of the one before and checked through its own descriptor. A symlink met on the way
//! is read through its descriptor and its target walked the same way, so the directory
//! holding the link is checked too. The file is then opened relative to the last
//! directory's descriptor with `O_NOFOLLOW` and checked through the descriptor that is
//! returned — the one the caller hashes and loads.
//!
//! Nothing is looked up by path twice, so nothing can be swapped between a check and a
//! use: a rename after a directory was opened does not change the directory the walk
//! continues from.
//!
//! # Guarantees
//! - Every directory the walk enters is owned by root or the current user and is not
//!   writable by group or others, unless sticky; the file is a regular file, owned by
//!   root or the current user, and not writable by group or others.
//!
//! # Limits
//! - [`MAX_SYMLINKS`](super::MAX_SYMLINKS) symlinks per path.

use super::LoadError;
use std::fs::File;
use std::path::Path;

/// Opens `path` for loading after checking it and every directory on the way.
#[cfg(target_os = "linux")]
pub(super) fn open_checked(path: &Path) -> Result<File, LoadError> {
    use rustix::fs::{FileType, Mode, OFlags, fstat, openat, readlinkat};
    use std::collections::VecDeque;
    use std::ffi::{OsStr, OsString};
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt as _;
    use std::path::{Component, PathBuf};

    let io = |source: std::io::Error| LoadError::Io {
        path: path.to_owned(),
        source,
    };
    let not_regular = || LoadError::NotRegularFile {
        path: path.to_owned(),
    };
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().map_err(io)?.join(path)
    };
    let (Some(parent), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(not_regular());
    };
    let me = rustix::process::getuid().as_raw();
    let check_dir = |fd: &OwnedFd, shown: &Path| -> Result<(), LoadError> {
        let st = fstat(fd).map_err(|e| io(e.into()))?;
        let mode = st.st_mode & 0o7777;
        if st.st_uid != 0 && st.st_uid != me {
            return Err(LoadError::DirectoryOwner {
                path: path.to_owned(),
                dir: shown.to_owned(),
                owner: st.st_uid,
            });
        }
        // Sticky (like /tmp): others may add entries but only an entry's owner (checked
        // as the next step of the walk) or the directory's may rename or remove it.
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(LoadError::DirectoryWritable {
                path: path.to_owned(),
                dir: shown.to_owned(),
                mode,
            });
        }
        Ok(())
    };
    let dir_flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;

    let root = openat(
        rustix::fs::CWD,
        "/",
        dir_flags | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    check_dir(&root, Path::new("/"))?;
    // The directory the walk is in, and those it passed through (root first), each with
    // how it was reached; `..` steps back to the one before.
    let mut here: (OwnedFd, PathBuf) = (root, PathBuf::from("/"));
    let mut above: Vec<(OwnedFd, PathBuf)> = Vec::new();
    let mut todo: VecDeque<OsString> = VecDeque::new();
    let push_front = |todo: &mut VecDeque<OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(s) => todo.push_front(s.to_owned()),
                Component::ParentDir => todo.push_front(OsString::from("..")),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push_front(&mut todo, parent);
    let mut links = 0;
    while let Some(component) = todo.pop_front() {
        if component == ".." {
            // `..` of the root is the root, as in the kernel.
            if let Some(parent) = above.pop() {
                here = parent;
            }
            continue;
        }
        let shown = here.1.join(&component);
        let fd = openat(&here.0, component.as_os_str(), dir_flags, Mode::empty())
            .map_err(|e| io(e.into()))?;
        let st = fstat(&fd).map_err(|e| io(e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                check_dir(&fd, &shown)?;
                above.push(std::mem::replace(&mut here, (fd, shown)));
            }
            FileType::Symlink => {
                links += 1;
                if links > super::MAX_SYMLINKS {
                    return Err(io(rustix::io::Errno::LOOP.into()));
                }
                // The link lives in the directory the walk is in, checked when it
                // was entered; read it through its own descriptor, not by name again.
                let target = readlinkat(&fd, "", Vec::new()).map_err(|e| io(e.into()))?;
                let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    above.truncate(1);
                    if let Some(root) = above.pop() {
                        here = root;
                    }
                }
                push_front(&mut todo, target);
            }
            _ => return Err(io(rustix::io::Errno::NOTDIR.into())),
        }
    }
    let fd = openat(
        &here.0,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => not_regular(),
        e => io(e.into()),
    })?;
    let st = fstat(&fd).map_err(|e| io(e.into()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(not_regular());
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(LoadError::Writable {
            path: path.to_owned(),
            mode,
        });
    }
    if st.st_uid != 0 && st.st_uid != me {
        return Err(LoadError::Owner {
            path: path.to_owned(),
            owner: st.st_uid,
        });
    }
    Ok(File::from(fd))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn open_checked(path: &Path) -> Result<File, LoadError> {
    Err(LoadError::Unsupported {
        path: path.to_owned(),
    })
}
