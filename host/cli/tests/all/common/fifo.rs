//! A FIFO with a reader waiting on it, to see whether a command opened it for writing.
//!
//! A FIFO with no reader makes a writer block forever in `open`: a test built on that
//! would hang, not fail, when the command under test does open it. With a reader
//! already waiting, such an open completes, the reader collects what was written, and
//! the test fails on the bytes instead. Nothing is timed.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// A reader blocked in `open` on a FIFO until someone opens it for writing.
pub struct Watch {
    path: PathBuf,
    reader: JoinHandle<Vec<u8>>,
}

impl Watch {
    /// Starts reading the FIFO at `path` (which must already be one).
    pub fn start(path: &Path) -> Watch {
        let owned = path.to_owned();
        let reader = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let mut f = std::fs::File::open(&owned).unwrap();
            f.read_to_end(&mut bytes).unwrap();
            bytes
        });
        Watch {
            path: path.to_owned(),
            reader,
        }
    }

    /// Everything written into the FIFO so far, once every writer has closed it. Lets a
    /// reader still waiting in `open` go by opening the FIFO for writing once itself,
    /// without blocking (`O_NONBLOCK` fails, and is retried, until the reader is there).
    pub fn written(self) -> Vec<u8> {
        while !self.reader.is_finished() {
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            if opened.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.reader.join().unwrap()
    }
}

/// A writer blocked in `open` on a FIFO until someone opens it for reading, then
/// writing `bytes`: a command that does read the FIFO gets them (and fails on them, not
/// on what the FIFO is), and a test never hangs on a command that waits for a writer.
pub struct Feed {
    path: PathBuf,
    writer: JoinHandle<()>,
}

impl Feed {
    /// Starts writing `bytes` into the FIFO at `path`.
    pub fn start(path: &Path, bytes: &'static [u8]) -> Feed {
        let owned = path.to_owned();
        let writer = std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&owned)
                .unwrap();
            let _ = std::io::Write::write_all(&mut f, bytes);
        });
        Feed {
            path: path.to_owned(),
            writer,
        }
    }

    /// Lets a writer still waiting in `open` go (a non-blocking open for reading always
    /// succeeds on a FIFO, and is held until the writer is done), and waits for it.
    /// `bytes` must fit the pipe's buffer (64 KiB), which nobody drains here.
    pub fn release(self) {
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path)
            .unwrap();
        self.writer.join().unwrap();
        drop(reader);
    }
}
