//! The context a handler is handed: built from the grant alone, the door to every
//! checked effect.

use super::{Axis, ErrorClass, HandlerError, Logs};
use crate::capability::{Grant, HeldRoot, Limits, NetRule};
use crate::sandbox::Exceeded;
use cap_std::fs::Dir;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A granted root and the handle every path under it is resolved through.
#[derive(Debug)]
pub(super) struct Root {
    pub(super) path: PathBuf,
    /// The directory the capability station opened at registration, shared.
    held: Arc<HeldRoot>,
}

impl Root {
    pub(super) fn dir(&self) -> &Dir {
        self.held.dir()
    }
}

/// The checked door to effects for one call of a host handler.
///
/// Built from the grant alone: roots, net rules and ceilings are fixed at
/// construction and never grow.
#[derive(Debug)]
pub struct HostContext {
    pub(super) read: Vec<Root>,
    pub(super) write: Vec<Root>,
    pub(super) net: Vec<NetRule>,
    pub(super) limits: Limits,
    /// `None` when `max_wall_ms` is too far away for the clock to represent.
    pub(super) deadline: Option<Instant>,
    pub(super) logs: Mutex<Logs>,
    /// What the context stopped, for the pipeline's record.
    pub(super) stops: Mutex<Stops>,
}

/// An effect the context stopped: the grant refused it, or a ceiling ended it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// The grant does not allow it; nothing was done.
    Refused {
        /// The axis refused.
        axis: Axis,
        /// The context's error, led by the axis (`fs.read: …`).
        reason: String,
    },
    /// A ceiling of the grant ended it; nothing partial was returned.
    Exceeded(Exceeded),
}

/// The context's own account of what it stopped. Kept by the context, not taken from
/// the handler's error, so a handler can neither make up a refusal nor reword one away.
#[derive(Debug, Default)]
pub(super) struct Stops {
    /// The first effect stopped, of either kind.
    first: Option<Stop>,
    /// The first ceiling hit, even after a refusal.
    tripped: Option<Exceeded>,
}

fn open_roots(roots: &[Arc<HeldRoot>]) -> Vec<Root> {
    // The grant's roots were opened once, at registration; a call never resolves a
    // root's path again, so a root swapped for a symlink since is not followed.
    roots
        .iter()
        .map(|held| Root {
            path: held.path().to_owned(),
            held: held.clone(),
        })
        .collect()
}

impl HostContext {
    /// Builds the context for one call from `grant` alone, over the root directories
    /// the grant holds open (none is opened, or looked up by path, here). The
    /// wall-clock budget starts now.
    ///
    /// # Errors
    /// None at present: the roots were opened at registration, and a removed one was
    /// refused when the grant was minted. The `Result` stays for contexts that will
    /// acquire something per call.
    pub fn new(grant: &Grant) -> Result<HostContext, HandlerError> {
        let limits = grant.limits();
        Ok(HostContext {
            read: open_roots(grant.read_roots()),
            write: open_roots(grant.write_roots()),
            net: grant.net().to_vec(),
            limits,
            deadline: Instant::now().checked_add(Duration::from_millis(limits.max_wall_ms)),
            logs: Mutex::new(Logs::default()),
            stops: Mutex::new(Stops::default()),
        })
    }

    /// The grant's ceilings.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Time left of the call's budget: `Some(None)` when unbounded, `None` when spent.
    pub(super) fn remaining(&self) -> Option<Option<Duration>> {
        match self.deadline {
            None => Some(None),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                (!left.is_zero()).then_some(Some(left))
            }
        }
    }

    /// The first ceiling an effect through this context ran into, if any: the pipeline
    /// records a handler that failed after one as stopped by that ceiling.
    pub fn tripped(&self) -> Option<Exceeded> {
        self.stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tripped
    }

    /// The first effect this context stopped, refused by the grant or ended by a
    /// ceiling, if any: the pipeline records a handler that failed after one as
    /// stopped by it (see [`super::execute`]).
    pub fn stopped(&self) -> Option<Stop> {
        self.stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first
            .clone()
    }

    /// Passes an effect's result through, noting a refusal or a ceiling in the
    /// context's own account. Every public effect method ends here.
    pub(super) fn note<T>(&self, result: Result<T, HandlerError>) -> Result<T, HandlerError> {
        if let Err(e) = &result {
            let stop = match e.class() {
                ErrorClass::Denied => Some(Stop::Refused {
                    axis: e.axis_typed(),
                    reason: e.to_string(),
                }),
                ErrorClass::Exceeded(kind) => Some(Stop::Exceeded(kind)),
                ErrorClass::Invalid | ErrorClass::Failed => None,
            };
            if let Some(stop) = stop {
                let mut stops = self.stops.lock().unwrap_or_else(PoisonError::into_inner);
                if let Stop::Exceeded(kind) = stop {
                    stops.tripped.get_or_insert(kind);
                }
                stops.first.get_or_insert(stop);
            }
        }
        result
    }
}
