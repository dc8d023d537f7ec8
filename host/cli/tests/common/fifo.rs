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
