//! What wakes the feed's thread: on Linux, an inotify watch on each file it follows
//! (and on a followed directory), so a line appended is read at once; elsewhere, or
//! when inotify is refused, a look every [`POLL`](super::feed) interval.

use std::path::Path;
use std::time::Duration;

/// An inotify instance the feed thread sleeps on, or nothing to sleep on but time.
pub(crate) struct Wake {
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
}

#[cfg(target_os = "linux")]
impl Wake {
    /// An instance with no watch yet; `None` inside when the kernel refuses one (the
    /// feed then looks at its files every poll interval).
    pub(crate) fn new() -> Wake {
        use rustix::fs::inotify::{self, CreateFlags};
        Wake {
            fd: inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok(),
        }
    }

    /// Watches `path` for writes, for names created or moved in (a directory), and
    /// for its own move or removal; never through a link. A watch refused (the user's
    /// limit reached) leaves that file to the poll interval.
    pub(crate) fn watch(&self, path: &Path) {
        use rustix::fs::inotify::{self, WatchFlags};
        if let Some(fd) = &self.fd {
            let _ = inotify::add_watch(
                fd,
                path,
                WatchFlags::MODIFY
                    | WatchFlags::ATTRIB
                    | WatchFlags::CREATE
                    | WatchFlags::MOVED_TO
                    | WatchFlags::MOVE_SELF
                    | WatchFlags::DELETE_SELF
                    | WatchFlags::DONT_FOLLOW,
            );
        }
    }

    /// Sleeps until a watched path changes or `timeout` passes, then takes every
    /// event waiting (what changed is found by reading, not from the events).
    pub(crate) fn sleep(&self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        use rustix::fs::inotify::Reader;
        let Some(fd) = &self.fd else {
            std::thread::sleep(timeout);
            return;
        };
        let wait = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        if !matches!(poll(&mut fds, Some(&wait)), Ok(n) if n > 0) {
            return;
        }
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        let mut reader = Reader::new(fd, &mut buf);
        // Drained until the kernel has nothing more (EAGAIN) or fails.
        while reader.next().is_ok() {}
    }
}

#[cfg(not(target_os = "linux"))]
impl Wake {
    pub(crate) fn new() -> Wake {
        Wake {}
    }

    pub(crate) fn watch(&self, _path: &Path) {}

    pub(crate) fn sleep(&self, timeout: Duration) {
        std::thread::sleep(timeout);
    }
}
