//! What wakes the feed's thread: on Linux, an inotify watch on each file it follows
//! (and on a followed directory, for names created in it), so a line appended is read
//! at once and only its file is looked at; elsewhere, or when inotify is refused, a
//! look at every file each poll interval.

use std::path::Path;
use std::time::Duration;

/// What ended a sleep.
pub(crate) enum Woken {
    /// The interval passed: every file is looked at.
    Timeout,
    /// These watches fired (and nothing else is known to have changed).
    Watches(Vec<i32>),
    /// Events were lost (the kernel's queue overflowed) or cannot be told apart:
    /// every file is looked at.
    All,
}

/// The most event buffers read after one wake-up: a writer that never stops cannot
/// keep the thread reading events instead of the files they name.
#[cfg(target_os = "linux")]
const MOST_READS: usize = 16;

/// An inotify instance the feed thread sleeps on, or nothing to sleep on but time.
pub(crate) struct Wake {
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
}

#[cfg(target_os = "linux")]
impl Wake {
    /// An instance with no watch yet; none at all when the kernel refuses one (the
    /// feed then looks at every file each poll interval).
    pub(crate) fn new() -> Wake {
        use rustix::fs::inotify::{self, CreateFlags};
        Wake {
            fd: inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok(),
        }
    }

    /// Watches the file at `path` for writes and for its own move or removal, never
    /// through a link: the watch's id, or `None` when refused (the user's limit
    /// reached), which leaves the file to the poll interval.
    pub(crate) fn watch_file(&self, path: &Path) -> Option<i32> {
        use rustix::fs::inotify::WatchFlags;
        self.add(
            path,
            WatchFlags::MODIFY
                | WatchFlags::ATTRIB
                | WatchFlags::MOVE_SELF
                | WatchFlags::DELETE_SELF
                | WatchFlags::DONT_FOLLOW,
        )
    }

    /// Watches the directory at `path` for names created or moved into it (not for
    /// writes to files in it, which their own watches report).
    pub(crate) fn watch_dir(&self, path: &Path) -> Option<i32> {
        use rustix::fs::inotify::WatchFlags;
        self.add(
            path,
            WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::ONLYDIR
                | WatchFlags::DONT_FOLLOW,
        )
    }

    fn add(&self, path: &Path, flags: rustix::fs::inotify::WatchFlags) -> Option<i32> {
        rustix::fs::inotify::add_watch(self.fd.as_ref()?, path, flags).ok()
    }

    /// Stops watch `wd` (a file no longer read).
    pub(crate) fn unwatch(&self, wd: i32) {
        if let Some(fd) = &self.fd {
            let _ = rustix::fs::inotify::remove_watch(fd, wd);
        }
    }

    /// Sleeps until a watch fires or `timeout` passes, then takes the events waiting
    /// (at most [`MOST_READS`] buffers of them).
    pub(crate) fn sleep(&self, timeout: Duration) -> Woken {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        use rustix::fs::inotify::{ReadFlags, Reader};
        let Some(fd) = &self.fd else {
            std::thread::sleep(timeout);
            return Woken::Timeout;
        };
        let wait = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) => return Woken::Timeout,
            Ok(_) => {}
            // Interrupted or failing: look at everything rather than miss a write.
            Err(_) => return Woken::All,
        }
        let mut fired = Vec::new();
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        for _ in 0..MOST_READS {
            let mut reader = Reader::new(fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                            return Woken::All;
                        }
                        if !fired.contains(&event.wd()) {
                            fired.push(event.wd());
                        }
                    }
                    // Nothing more waiting (EAGAIN), or a read failed: done.
                    Err(_) => return Woken::Watches(fired),
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
        }
        // More kept coming: what is left waits for the next sleep, and every file is
        // looked at now.
        Woken::All
    }
}

#[cfg(not(target_os = "linux"))]
impl Wake {
    pub(crate) fn new() -> Wake {
        Wake {}
    }

    pub(crate) fn watch_file(&self, _path: &Path) -> Option<i32> {
        None
    }

    pub(crate) fn watch_dir(&self, _path: &Path) -> Option<i32> {
        None
    }

    pub(crate) fn unwatch(&self, _wd: i32) {}

    pub(crate) fn sleep(&self, timeout: Duration) -> Woken {
        std::thread::sleep(timeout);
        Woken::Timeout
    }
}
