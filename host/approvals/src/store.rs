//! The queue in a store many hosts reach (the PostgreSQL audit store), instead of a
//! directory: what lets a person on one machine decide a park another host made.
//!
//! The store keeps the bytes and the two exclusive steps (one decision per id, one
//! claim per decision) and wakes waiters; everything else is the queue's, as for a
//! directory: the same request and decision files, read as strictly, the same expiry
//! rule, the same errors.

use crate::files::{DecisionFile, Request};
use crate::{ClaimError, DecideError, Listed, MAX_ENTRIES, QueueError, State, expired};
use aegis_files::FileError;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One request as a store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its approval id.
    pub id: String,
    /// The request file's bytes, as filed.
    pub request: Vec<u8>,
    /// The decision file's bytes, once decided.
    pub decision: Option<Vec<u8>>,
    /// Whether the decision was claimed.
    pub used: bool,
}

/// A store that holds an approvals queue. Each method fails with the store's own
/// message, which the queue reports as [`QueueError::Store`].
pub trait Store: Send + Sync + std::fmt::Debug {
    /// A short name for messages (`postgres:"aegis"."record_approvals"`); rows are named
    /// `<location>/<id>.request` and `<location>/<id>.decision` in errors.
    fn location(&self) -> String;
    /// Files `request` under `id`: `false` when `id` has a request already.
    ///
    /// # Errors
    /// The store failed.
    fn file(&self, id: &str, request: &[u8]) -> Result<bool, String>;
    /// The request of `id`, if there is one.
    ///
    /// # Errors
    /// The store failed.
    fn read(&self, id: &str) -> Result<Option<Stored>, String>;
    /// Up to `max` requests, oldest filed first.
    ///
    /// # Errors
    /// The store failed.
    fn list(&self, max: usize) -> Result<Vec<Stored>, String>;
    /// Places `decision` as the one decision of `id` and wakes its waiters: `false` when
    /// there is no such request or it is decided already.
    ///
    /// # Errors
    /// The store failed.
    fn decide(&self, id: &str, decision: &[u8]) -> Result<bool, String>;
    /// Claims the decision of `id`, once; `None` when undecided or claimed already.
    ///
    /// # Errors
    /// The store failed.
    fn claim(&self, id: &str) -> Result<Option<Vec<u8>>, String>;
    /// `true` once `id` has a decision, `false` after `timeout` without one.
    ///
    /// # Errors
    /// The store failed.
    fn wait(&self, id: &str, timeout: Duration) -> Result<bool, String>;
    /// Removes `id` and its decision.
    ///
    /// # Errors
    /// The store failed.
    fn remove(&self, id: &str) -> Result<(), String>;
}

/// The queue's operations on a store; `base` names its rows in errors.
pub(crate) struct InStore<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) base: &'a Path,
}

impl InStore<'_> {
    fn fail(&self) -> impl FnOnce(String) -> QueueError + '_ {
        move |message| QueueError::Store {
            location: self.store.location(),
            message,
        }
    }

    fn path(&self, id: &str, kind: &str) -> PathBuf {
        self.base.join(format!("{id}.{kind}"))
    }

    pub(crate) fn file(&self, request: &Request) -> Result<(), QueueError> {
        let id = &request.approval_id;
        let bytes = request.to_object().to_canonical();
        if self.store.file(id, &bytes).map_err(self.fail())? {
            Ok(())
        } else {
            Err(FileError::Exists {
                path: self.path(id, crate::REQUEST),
            }
            .into())
        }
    }

    fn read(&self, id: &str) -> Result<Option<Stored>, QueueError> {
        let row = self.store.read(id).map_err(self.fail())?;
        match row {
            Some(r) if r.id != id => Err(QueueError::field(
                &self.path(id, crate::REQUEST),
                "approval_id",
                format!("the store answered for {:?}", r.id),
            )),
            row => Ok(row),
        }
    }

    /// The request a row holds.
    fn request_of(&self, row: &Stored) -> Result<Request, QueueError> {
        let path = self.path(&row.id, crate::REQUEST);
        let obj = crate::parse_object(&row.request, &path)?;
        let r = Request::from_object(&obj, &path)?;
        crate::same_id(&path, &row.id, &r.approval_id)?;
        Ok(r)
    }

    /// The decision a row holds, if any.
    fn decision_of(&self, row: &Stored) -> Result<Option<DecisionFile>, QueueError> {
        let Some(bytes) = &row.decision else {
            return Ok(None);
        };
        let path = self.path(&row.id, crate::DECISION);
        let obj = crate::parse_object(bytes, &path)?;
        let d = DecisionFile::from_object(&obj, &path)?;
        crate::same_id(&path, &row.id, &d.approval_id)?;
        Ok(Some(d))
    }

    fn state_of(&self, row: &Stored, request: &Request) -> Result<State, QueueError> {
        Ok(match self.decision_of(row)? {
            Some(d) if row.used => State::Used(d),
            Some(d) => State::Decided(d),
            None if expired(request) => State::Expired,
            None => State::Pending,
        })
    }

    fn row(&self, id: &str) -> Result<Stored, QueueError> {
        self.read(id)?.ok_or_else(|| QueueError::NoSuchRequest {
            path: self.path(id, crate::REQUEST),
        })
    }

    pub(crate) fn request(&self, id: &str) -> Result<Request, QueueError> {
        self.request_of(&self.row(id)?)
    }

    pub(crate) fn state(&self, id: &str) -> Result<State, QueueError> {
        let row = self.row(id)?;
        let request = self.request_of(&row)?;
        self.state_of(&row, &request)
    }

    pub(crate) fn list(&self) -> Result<Vec<Listed>, QueueError> {
        let rows = self.store.list(MAX_ENTRIES + 1).map_err(self.fail())?;
        if rows.len() > MAX_ENTRIES {
            return Err(QueueError::TooMany {
                path: self.base.to_owned(),
            });
        }
        let mut listed = Vec::with_capacity(rows.len());
        let mut seen = std::collections::BTreeSet::new();
        for row in &rows {
            crate::checked_id(&row.id)?;
            // One request per id: a listing naming one twice is not read as either.
            if !seen.insert(row.id.as_str()) {
                return Err(QueueError::field(
                    &self.path(&row.id, crate::REQUEST),
                    "approval_id",
                    "listed twice by the store",
                ));
            }
            let request = self.request_of(row)?;
            let state = self.state_of(row, &request)?;
            listed.push(Listed { request, state });
        }
        Ok(listed)
    }

    pub(crate) fn decide(&self, decision: &DecisionFile) -> Result<(), DecideError> {
        let id = decision.approval_id.as_str();
        let no_such = || DecideError::NoSuchRequest {
            path: self.path(id, crate::REQUEST),
        };
        let decided = || DecideError::AlreadyDecided {
            path: self.path(id, crate::DECISION),
        };
        let row = self.read(id)?.ok_or_else(no_such)?;
        let request = self.request_of(&row)?;
        if row.decision.is_some() {
            return Err(decided());
        }
        if !decision.by_host() && expired(&request) {
            return Err(DecideError::Expired {
                path: self.path(id, crate::REQUEST),
                expires_at: request.expires_at,
            });
        }
        let bytes = decision.to_object().to_canonical();
        if self.store.decide(id, &bytes).map_err(self.fail())? {
            return Ok(());
        }
        // Lost a race: to another decider, or to a removal.
        match self.read(id)? {
            None => Err(no_such()),
            Some(_) => Err(decided()),
        }
    }

    pub(crate) fn claim(&self, id: &str) -> Result<DecisionFile, ClaimError> {
        let path = self.path(id, crate::DECISION);
        match self.store.claim(id).map_err(self.fail())? {
            Some(bytes) => {
                let obj = crate::parse_object(&bytes, &path)?;
                let d = DecisionFile::from_object(&obj, &path)?;
                crate::same_id(&path, id, &d.approval_id)?;
                Ok(d)
            }
            None => match self.read(id)? {
                Some(row) if row.used => Err(ClaimError::AlreadyUsed { path }),
                _ => Err(ClaimError::NotDecided { path }),
            },
        }
    }

    pub(crate) fn wait(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Option<DecisionFile>, QueueError> {
        loop {
            if let Some(row) = self.read(id)?
                && let Some(d) = self.decision_of(&row)?
            {
                return Ok(Some(d));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.store.wait(id, left).map_err(self.fail())? {
                return Ok(None);
            }
        }
    }

    pub(crate) fn remove(&self, id: &str) -> Result<(), QueueError> {
        self.store.remove(id).map_err(self.fail())
    }
}
