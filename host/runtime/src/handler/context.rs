//! The context a handler is handed: built from the grant alone, the door to every
//! checked effect.

use super::{Axis, HandlerError, Logs};
use crate::capability::{Grant, Limits, NetRule};
use crate::sandbox::Exceeded;
use cap_std::fs::Dir;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A granted root and the handle every path under it is resolved through.
#[derive(Debug)]
pub(super) struct Root {
    pub(super) path: PathBuf,
    pub(super) dir: Dir,
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
    /// The first ceiling an effect ran into, for the pipeline's record.
    pub(super) tripped: Mutex<Option<Exceeded>>,
}

fn open_roots(axis: Axis, roots: &[PathBuf]) -> Result<Vec<Root>, HandlerError> {
    roots
        .iter()
        .map(|path| {
            // The grant's roots are canonical; this is the module's one use of
            // ambient authority.
            let dir =
                Dir::open_ambient_dir(path, cap_std::ambient_authority()).map_err(|source| {
                    HandlerError::Io {
                        axis,
                        target: format!("root {}", path.display()),
                        source,
                    }
                })?;
            Ok(Root {
                path: path.clone(),
                dir,
            })
        })
        .collect()
}

impl HostContext {
    /// Builds the context for one call from `grant` alone, opening each granted root
    /// once. The wall-clock budget starts now.
    ///
    /// # Errors
    /// [`HandlerError::Io`] when a root of the grant cannot be opened.
    pub fn new(grant: &Grant) -> Result<HostContext, HandlerError> {
        let limits = grant.limits();
        Ok(HostContext {
            read: open_roots(Axis::FsRead, grant.fs_read())?,
            write: open_roots(Axis::FsWrite, grant.fs_write())?,
            net: grant.net().to_vec(),
            limits,
            deadline: Instant::now().checked_add(Duration::from_millis(limits.max_wall_ms)),
            logs: Mutex::new(Logs::default()),
            tripped: Mutex::new(None),
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
        *self.tripped.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
