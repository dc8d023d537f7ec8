//! A bounded queue of frames for one destination (the client or the server), drained by
//! that destination's writer thread.
//!
//! Pushing never blocks: the relay's lock is held while frames are pushed, in the order
//! the relay decided them, and nothing that waits on a peer may ever be waited for under
//! that lock. The bound is applied before a frame is read into the relay instead
//! ([`Outbox::wait_for_room`]), so a queue holds at most its bound plus one frame per
//! producer.
//!
//! One frame at a time is being written, by the writer thread or by a producer that
//! found the queue idle and claimed the frame to write it itself
//! ([`Outbox::push_or_claim`]) once it has let go of the relay: that saves waking the
//! writer thread for every frame, and the writer takes nothing from the queue until the
//! claimed frame is [`written`](Outbox::written), so the order holds either way.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One destination's pending bytes.
pub(crate) struct Outbox {
    state: Mutex<State>,
    /// The writer waits here for a frame it may take.
    work: Condvar,
    /// Readers wait here for room, and the exit path for the queue to drain. Separate, so
    /// a frame written wakes nobody who has nothing to do (an idle writer woken for every
    /// claimed frame costs a context switch per message).
    room: Condvar,
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
    /// A frame is out for writing (by the writer thread or a claimant) and not yet
    /// [`Outbox::written`].
    writing: bool,
    /// The writer waits on `work`, and how many wait on `room`: a condvar is signalled
    /// only when someone waits on it (each signal is a system call, per message).
    writer_waits: bool,
    room_waiters: usize,
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
            work: Condvar::new(),
            room: Condvar::new(),
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
        self.wake_writer(&state);
    }

    /// Like [`Outbox::push`], but when nothing is queued or being written the frame is
    /// handed back instead: the caller must write it (after letting go of any lock that
    /// must not wait on a peer) and then call [`Outbox::written`]. `None` when it was
    /// queued, or dropped because the queue is finished.
    pub(crate) fn push_or_claim(&self, frame: Vec<u8>) -> Option<Vec<u8>> {
        let mut state = self.lock();
        if state.finished {
            return None;
        }
        state.bytes += frame.len();
        if state.frames.is_empty() && !state.writing {
            state.writing = true;
            return Some(frame);
        }
        state.frames.push_back(frame);
        self.wake_writer(&state);
        None
    }

    /// Waits until the queue is under its bound, or finished.
    pub(crate) fn wait_for_room(&self) {
        let mut state = self.lock();
        while state.bytes >= self.bound && !state.finished {
            state.room_waiters += 1;
            state = self
                .room
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.room_waiters -= 1;
        }
    }

    fn wake_writer(&self, state: &State) {
        if state.writer_waits {
            self.work.notify_one();
        }
    }

    fn wake_room_waiters(&self, state: &State) {
        if state.room_waiters > 0 {
            self.room.notify_all();
        }
    }

    /// The next frame to write, waiting for one (and for a claimed frame to be written:
    /// frames leave one at a time, in order). [`Next::Done`] only once nothing is queued
    /// or being written.
    pub(crate) fn next(&self) -> Next {
        let mut state = self.lock();
        loop {
            if !state.writing {
                if let Some(frame) = state.frames.pop_front() {
                    state.writing = true;
                    return Next::Frame(frame);
                }
                if state.finished {
                    return Next::Done;
                }
            }
            state.writer_waits = true;
            state = self
                .work
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.writer_waits = false;
        }
    }

    /// The writer is done with a frame of `len` bytes (written, or given up on).
    pub(crate) fn written(&self, len: usize) {
        let mut state = self.lock();
        state.writing = false;
        state.bytes = state.bytes.saturating_sub(len);
        // The writer has something to take, or (finished) is waiting to end.
        if !state.frames.is_empty() || state.finished {
            self.wake_writer(&state);
        }
        self.wake_room_waiters(&state);
    }

    /// No more frames: the writer ends after what is queued, and readers stop waiting.
    pub(crate) fn finish(&self) {
        let mut state = self.lock();
        state.finished = true;
        self.wake_writer(&state);
        self.wake_room_waiters(&state);
    }

    /// Drops every queued frame (the destination is gone) and finishes the queue.
    pub(crate) fn discard(&self) {
        let mut state = self.lock();
        let dropped: usize = state.frames.drain(..).map(|f| f.len()).sum();
        state.bytes = state.bytes.saturating_sub(dropped);
        state.finished = true;
        self.wake_writer(&state);
        self.wake_room_waiters(&state);
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
            state.room_waiters += 1;
            state = self
                .room
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.room_waiters -= 1;
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
    fn an_idle_queue_hands_the_frame_back_and_holds_the_rest_behind_it() {
        let outbox = Outbox::new(100);
        let claimed = outbox.push_or_claim(b"first".to_vec());
        assert_eq!(claimed.as_deref(), Some(&b"first"[..]));
        // While it is out, later frames queue, whoever pushes them.
        assert_eq!(outbox.push_or_claim(b"second".to_vec()), None);
        outbox.push(b"third".to_vec());
        outbox.finish();
        let first_written = std::sync::atomic::AtomicBool::new(false);
        let writer = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut seen = Vec::new();
                while let Next::Frame(f) = outbox.next() {
                    // The writer takes nothing before the claimant is done.
                    assert!(first_written.load(std::sync::atomic::Ordering::SeqCst));
                    outbox.written(f.len());
                    seen.push(f);
                }
                seen
            });
            assert!(!outbox.wait_drained(Duration::ZERO));
            first_written.store(true, std::sync::atomic::Ordering::SeqCst);
            outbox.written(b"first".len());
            writer.join().unwrap()
        });
        assert_eq!(writer, vec![b"second".to_vec(), b"third".to_vec()]);
        assert!(outbox.wait_drained(Duration::ZERO));
        // Finished: nothing is claimed or queued any more.
        assert_eq!(outbox.push_or_claim(b"late".to_vec()), None);
        assert!(matches!(outbox.next(), Next::Done));
    }

    #[test]
    fn a_busy_writer_means_no_claim() {
        let outbox = Outbox::new(100);
        outbox.push(b"a".to_vec());
        let Next::Frame(a) = outbox.next() else {
            panic!("a frame was queued")
        };
        // The queue is empty but its writer is busy: a claim would overtake nothing, yet
        // two writers must never write at once.
        assert_eq!(outbox.push_or_claim(b"b".to_vec()), None);
        outbox.written(a.len());
        let Next::Frame(b) = outbox.next() else {
            panic!("b was queued")
        };
        assert_eq!(b, b"b");
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
