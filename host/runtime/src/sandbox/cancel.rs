//! A handle another thread uses to stop a running call.
//!
//! # Guarantees
//! - [`CancelToken::cancel`] stops a call started with that token wherever it is: in
//!   guest code (at the next epoch tick, [`super::TICK`]) or waiting in a host call
//!   (at once). The call ends with [`super::Ending::Cancelled`] and returns no output.
//! - A token cancelled before the call starts stops it before any guest code runs.
//! - The first reason given is the one kept; later calls to `cancel` change nothing.
//!
//! # Non-guarantees
//! - A token is not reset: once cancelled, every call given it stops at once.
//! - What a stopped guest already did (files it wrote under a write root) stays done.

use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// Cheap to clone; every clone cancels the same calls.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    why: Mutex<Option<String>>,
    notify: Notify,
}

impl CancelToken {
    /// A token not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Stops every call running (or later started) with this token; `why` is
    /// recorded (`cancelled: <why>`).
    pub fn cancel(&self, why: impl Into<String>) {
        {
            let mut kept = self
                .inner
                .why
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if kept.is_none() {
                *kept = Some(why.into());
            }
        }
        self.inner.notify.notify_waiters();
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.reason().is_some()
    }

    /// The reason given to the first [`CancelToken::cancel`], if any.
    pub fn reason(&self) -> Option<String> {
        self.inner
            .why
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Resolves, with the reason, once the token is cancelled (at once if it already
    /// is). A front end holding a call that is not running yet (a park waiting for a
    /// person) waits on it too.
    pub async fn cancelled(&self) -> String {
        loop {
            // Registered before the check, so a cancel between the two still wakes it.
            let notified = self.inner.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(why) = self.reason() {
                return why;
            }
            notified.await;
        }
    }
}
