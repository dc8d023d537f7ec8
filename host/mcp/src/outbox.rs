//! A bounded queue of frames for one destination (the client or the server), drained by
//! that destination's writer thread.
//!
//! Pushing never blocks: the relay's lock is held while frames are pushed, in the order
//! the relay decided them, and nothing that waits on a peer may ever be waited for under
//! that lock. The bound is applied before a frame is read into the relay instead
//! ([`Outbox::wait_for_room`]), so a queue holds at most its bound plus one frame per
//! producer.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One destination's pending bytes.
pub(crate) struct Outbox {
    state: Mutex<State>,
    changed: Condvar,
    bound: usize,
}

#[derive(Default)]
struct State {
    frames: VecDeque<Vec<u8>>,
    /// Bytes queued or being written.
    bytes: usize,
    /// No more frames will come: the writer stops once the queue is empty, and nobody
    /// waits for room any more.
    finished: bool,
}

/// What the writer is handed next.
pub(crate) enum Next {
    /// Write this, then call [`Outbox::written`].
    Frame(Vec<u8>),
    /// The queue is finished and empty.
    Done,
}

impl Outbox {
    /// An empty queue that readers stop filling at `bound` bytes.
    pub(crate) fn new(bound: usize) -> Self {
        Outbox {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            bound,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a queue and two counters, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a frame. Never blocks on the destination; dropped once finished.
    pub(crate) fn push(&self, frame: Vec<u8>) {
        let mut state = self.lock();
        if state.finished {
            return;
        }
        state.bytes += frame.len();
        state.frames.push_back(frame);
        self.changed.notify_all();
    }

    /// Waits until the queue is under its bound, or finished.
    pub(crate) fn wait_for_room(&self) {
        let mut state = self.lock();
        while state.bytes >= self.bound && !state.finished {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The next frame to write, waiting for one.
    pub(crate) fn next(&self) -> Next {
        let mut state = self.lock();
        loop {
            if let Some(frame) = state.frames.pop_front() {
                return Next::Frame(frame);
            }
            if state.finished {
                return Next::Done;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The writer is done with a frame of `len` bytes (written, or given up on).
    pub(crate) fn written(&self, len: usize) {
        let mut state = self.lock();
        state.bytes = state.bytes.saturating_sub(len);
        self.changed.notify_all();
    }

    /// No more frames: the writer ends after what is queued, and readers stop waiting.
    pub(crate) fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }

    /// Drops every queued frame (the destination is gone) and finishes the queue.
    pub(crate) fn discard(&self) {
        let mut state = self.lock();
        let dropped: usize = state.frames.drain(..).map(|f| f.len()).sum();
        state.bytes = state.bytes.saturating_sub(dropped);
        state.finished = true;
        self.changed.notify_all();
    }

    /// Waits until everything queued was written, for at most `patience`; true if it was.
    pub(crate) fn wait_drained(&self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let mut state = self.lock();
        while state.bytes > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn frames_come_out_in_the_order_pushed_and_the_writer_ends_when_finished() {
        let outbox = Outbox::new(10);
        outbox.push(b"a".to_vec());
        outbox.push(b"bc".to_vec());
        outbox.finish();
        outbox.push(b"late".to_vec());
        let mut seen = Vec::new();
        while let Next::Frame(f) = outbox.next() {
            outbox.written(f.len());
            seen.push(f);
        }
        assert_eq!(seen, vec![b"a".to_vec(), b"bc".to_vec()]);
        assert!(outbox.wait_drained(Duration::ZERO));
    }

    #[test]
    fn a_full_queue_holds_readers_until_its_writer_catches_up() {
        let outbox = Arc::new(Outbox::new(4));
        outbox.push(vec![0; 8]);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = outbox.clone();
        let reader = std::thread::spawn(move || {
            waiting.wait_for_room();
            tx.send(()).unwrap();
        });
        // The reader cannot pass while the frame is neither written nor given up on.
        assert!(rx.try_recv().is_err());
        assert!(!outbox.wait_drained(Duration::ZERO));
        let Next::Frame(f) = outbox.next() else {
            panic!("a frame was queued")
        };
        outbox.written(f.len());
        reader.join().unwrap();
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn discarding_releases_waiting_readers() {
        let outbox = Arc::new(Outbox::new(1));
        outbox.push(vec![0; 3]);
        let waiting = outbox.clone();
        let reader = std::thread::spawn(move || waiting.wait_for_room());
        outbox.discard();
        reader.join().unwrap();
        assert!(matches!(outbox.next(), Next::Done));
    }
}
