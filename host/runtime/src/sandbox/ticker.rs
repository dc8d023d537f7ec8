//! The epoch ticker: advances the engine's epoch every [`super::TICK`] while at least
//! one call runs, and sleeps (parked, no timer) once none has run for a while.
//!
//! # Guarantees
//! - A call holds a [`Running`] for as long as it runs; while any is held the epoch
//!   advances every tick, exactly as a ticker that never stops would advance it. A
//!   call's epoch deadline is set when it starts, so ticks that did not happen while
//!   nothing ran change no deadline.
//! - A [`Ticker::enter`] that finds the thread parked wakes it before it returns: no
//!   call runs on a ticker that sleeps (a wake-up given before the thread parks makes
//!   that park return at once).
//!
//! # Why
//! A host that never runs a WASM tool (`aegis wrap`, `aegis confine`) or sits idle
//! between calls (`aegis gateway`) would otherwise wake a thread 200 times a second
//! for nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// Ticks with no call running before the thread parks: back-to-back calls find it
/// awake and wake nobody (a wake-up costs a call several microseconds), and an idle
/// host goes quiet within a quarter of a second.
const IDLE_TICKS: u32 = 50;

#[derive(Default)]
struct Shared {
    running: AtomicUsize,
    /// The thread is parked (or about to park) until a call starts.
    parked: AtomicBool,
    stop: AtomicBool,
}

/// The ticking thread of one engine; stopped and joined when dropped (woken to
/// notice, so a drop never waits out a tick).
pub(super) struct Ticker {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// One running call; the ticker may sleep again once none is held.
pub(super) struct Running<'a>(&'a Ticker);

impl Ticker {
    /// Starts the thread, parked until the first call; `tick` advances the epoch.
    pub(super) fn start(tick: impl Fn() + Send + 'static) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared::default());
        let seen = Arc::clone(&shared);
        let handle: JoinHandle<()> = std::thread::Builder::new()
            .name("aegis-epoch".into())
            .spawn(move || {
                // Parked from the start: no call has run yet.
                let mut idle = IDLE_TICKS;
                while !seen.stop.load(Ordering::SeqCst) {
                    if seen.running.load(Ordering::SeqCst) == 0 {
                        idle += 1;
                        if idle > IDLE_TICKS {
                            // Said before looking again, so a call that starts now
                            // either is seen here or sees `parked` and wakes us.
                            seen.parked.store(true, Ordering::SeqCst);
                            if seen.running.load(Ordering::SeqCst) == 0 {
                                std::thread::park();
                            }
                            seen.parked.store(false, Ordering::SeqCst);
                            idle = 0;
                            continue;
                        }
                    } else {
                        idle = 0;
                    }
                    // Not `sleep`: a drop must not wait out a tick. Woken early (by a
                    // call starting, or spuriously), it ticks early, which only makes
                    // running guests look at their deadline and cancel token sooner.
                    std::thread::park_timeout(super::TICK);
                    if seen.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    tick();
                }
            })?;
        Ok(Ticker {
            shared,
            thread: Some(handle),
        })
    }

    /// Marks a call as running, waking the thread if it slept.
    pub(super) fn enter(&self) -> Running<'_> {
        self.shared.running.fetch_add(1, Ordering::SeqCst);
        if self.shared.parked.load(Ordering::SeqCst)
            && let Some(thread) = &self.thread
        {
            thread.thread().unpark();
        }
        Running(self)
    }

    /// How many calls hold a [`Running`] now.
    #[cfg(test)]
    fn running(&self) -> usize {
        self.shared.running.load(Ordering::Acquire)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.shared.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Waits (up to 10 s, never asserting on a duration) for `ticks` to pass `than`.
    fn passes(ticks: &AtomicUsize, than: usize) -> bool {
        let give_up = Instant::now() + Duration::from_secs(10);
        while Instant::now() < give_up {
            if ticks.load(Ordering::Acquire) > than {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn ticks_only_while_a_call_runs() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ticks);
        let ticker = Ticker::start(move || {
            counted.fetch_add(1, Ordering::AcqRel);
        })
        .unwrap();

        // Idle: ten ticks' time passes and no tick happens.
        std::thread::sleep(super::super::TICK * 10);
        assert_eq!(
            ticks.load(Ordering::Acquire),
            0,
            "ticked with no call running"
        );

        // Running: it ticks; two calls overlapping keep it ticking.
        let first = ticker.enter();
        assert!(passes(&ticks, 0), "no tick while a call ran");
        let second = ticker.enter();
        drop(first);
        assert_eq!(ticker.running(), 1);
        let now = ticks.load(Ordering::Acquire);
        assert!(passes(&ticks, now), "no tick while the second call ran");
        drop(second);
        assert_eq!(ticker.running(), 0);

        // Idle again: it ticks a while longer, then parks and ticks no more.
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut before = ticks.load(Ordering::Acquire);
        loop {
            std::thread::sleep(super::super::TICK * 10);
            let now = ticks.load(Ordering::Acquire);
            if now == before && ticker.shared.parked.load(Ordering::SeqCst) {
                break;
            }
            assert!(
                Instant::now() < give_up,
                "still ticking with no call running"
            );
            before = now;
        }
        std::thread::sleep(super::super::TICK * 10);
        assert_eq!(ticks.load(Ordering::Acquire), before, "ticked while parked");

        // And a call wakes it again.
        let third = ticker.enter();
        assert!(passes(&ticks, before), "no tick after waking");
        drop(third);
    }

    #[test]
    fn dropping_it_ends_the_thread_whether_parked_or_ticking() {
        for busy in [false, true] {
            let held = Arc::new(());
            let owned = Arc::clone(&held);
            let ticker = Ticker::start(move || {
                let _ = &owned;
            })
            .unwrap();
            if busy {
                std::mem::forget(ticker.enter());
            }
            drop(ticker);
            // The thread owned the closure, and so one count of `held`, until it ended.
            assert_eq!(Arc::strong_count(&held), 1, "busy: {busy}");
        }
    }
}
