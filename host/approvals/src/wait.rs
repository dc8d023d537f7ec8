//! The wait: one inotify watch on the queue directory, slept on in `poll`.
//!
//! Closing an inotify instance waits for the kernel's SRCU grace period: measured here,
//! 7–12 ms for most instances that delivered an event (`benches/results/approvals.md`).
//! A waiter that closed its watch before claiming the decision would hold the resumed
//! call that long, so a watch is closed on a thread of its own ([`Watch`]'s `Drop`).

use crate::QueueError;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// An inotify watch on the queue directory for files appearing in it.
#[cfg(target_os = "linux")]
pub(crate) struct Watch {
    fd: Option<rustix::fd::OwnedFd>,
    dir: PathBuf,
}

/// Hands the watch's descriptor to the closer thread; closes it here only if that
/// thread cannot be had.
#[cfg(target_os = "linux")]
impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            close_elsewhere(fd);
        }
    }
}

/// Closes descriptors on one long-lived thread, so no waiter pays for the close.
#[cfg(target_os = "linux")]
fn close_elsewhere(fd: rustix::fd::OwnedFd) {
    use std::sync::OnceLock;
    use std::sync::mpsc::{Sender, channel};
    static CLOSER: OnceLock<Option<Sender<rustix::fd::OwnedFd>>> = OnceLock::new();
    let closer = CLOSER.get_or_init(|| {
        let (send, receive) = channel::<rustix::fd::OwnedFd>();
        std::thread::Builder::new()
            .name("aegis-approvals-close".into())
            .spawn(move || receive.into_iter().for_each(drop))
            .ok()
            .map(|_| send)
    });
    match closer {
        // The thread is gone: close here after all.
        Some(closer) => {
            if let Err(unsent) = closer.send(fd) {
                drop(unsent.0);
            }
        }
        None => drop(fd),
    }
}

#[cfg(target_os = "linux")]
impl Watch {
    /// Watches `dir` for names created, moved in or closed after writing.
    pub(crate) fn new(dir: &Path) -> Result<Watch, QueueError> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        let fail = |e: rustix::io::Errno| QueueError::Io {
            path: dir.to_owned(),
            source: std::io::Error::from(e),
        };
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).map_err(fail)?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::CLOSE_WRITE
                | WatchFlags::ONLYDIR
                | WatchFlags::DONT_FOLLOW,
        )
        .map_err(fail)?;
        Ok(Watch {
            fd: Some(fd),
            dir: dir.to_owned(),
        })
    }

    /// Sleeps until an event names `name` (or the kernel's queue overflowed, so an
    /// event may have been lost): `true`; or until `deadline`: `false`.
    pub(crate) fn until(&self, name: &str, deadline: Instant) -> Result<bool, QueueError> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        use rustix::fs::inotify::{ReadFlags, Reader};
        use rustix::io::Errno;
        let fail = |e: Errno| QueueError::Io {
            path: self.dir.clone(),
            source: std::io::Error::from(e),
        };
        let Some(fd) = &self.fd else {
            return Ok(false);
        };
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let timeout = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => return Err(fail(e)),
            }
            let mut reader = Reader::new(fd, &mut buf);
            let mut named = false;
            loop {
                match reader.next() {
                    Ok(event) => {
                        if event.events().contains(ReadFlags::QUEUE_OVERFLOW)
                            || event
                                .file_name()
                                .is_some_and(|n| n.to_bytes() == name.as_bytes())
                        {
                            named = true;
                        }
                    }
                    Err(Errno::AGAIN | Errno::INTR) => break,
                    Err(e) => return Err(fail(e)),
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
            if named {
                return Ok(true);
            }
        }
    }
}

/// Elsewhere there is no inotify: waiting is refused rather than done by polling.
#[cfg(not(target_os = "linux"))]
pub(crate) struct Watch;

#[cfg(not(target_os = "linux"))]
impl Watch {
    pub(crate) fn new(dir: &Path) -> Result<Watch, QueueError> {
        Err(QueueError::Io {
            path: dir.to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "waiting on the approvals queue needs inotify (Linux)",
            ),
        })
    }

    pub(crate) fn until(&self, _name: &str, _deadline: Instant) -> Result<bool, QueueError> {
        Ok(false)
    }
}
