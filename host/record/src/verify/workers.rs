//! Signature workers: strict ed25519 checks are independent of each other, so they run
//! on worker threads while the walk goes on hashing. Each batch is first checked as one
//! ([`verify_batch`], which passes only batches strict would accept in full, except with
//! probability 2^-127); a batch that fails is checked line by line with strict, in file
//! order. The earliest failure in the file wins, whatever thread found it first, so the
//! report does not depend on timing.

use super::verdict::{Position, SignatureProblem, Tampered};
use crate::key::{BatchItem, Signature, VerifyingKey, verify_batch};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};

/// How many signature checks travel to a worker together. Large, because a batch's
/// torsion test costs 128 scalar multiplications whatever its size (key::verify_batch).
pub(super) const BATCH: usize = 2048;

/// Smaller batches (the file's last, or one cut by [`BATCH_BYTES`]) are checked line by
/// line: the batch's fixed torsion test would cost more than it saves.
const MIN_BATCH: usize = 192;

/// A batch is also sent once its messages reach this many bytes, so that queued batches
/// stay small in memory whatever the lines' length.
pub(super) const BATCH_BYTES: usize = 2 << 20;

/// The most signature threads a walk starts, whatever the caller asks for.
pub(super) const MAX_THREADS: usize = 64;

pub(super) struct Job {
    pub(super) line: u64,
    pub(super) at: Position,
    pub(super) key: Arc<VerifyingKey>,
    pub(super) message: Vec<u8>,
    pub(super) signature: Signature,
}

pub(super) struct Batch {
    pub(super) jobs: Vec<Job>,
    /// The last signed position before this batch, for coverage on failure.
    pub(super) covered_before: Option<Position>,
}

#[derive(Clone)]
pub(super) struct Failure {
    pub(super) line: u64,
    pub(super) at: Position,
    pub(super) covered_before: Option<Position>,
}

pub(super) struct Shared {
    pub(super) first_failure: Mutex<Option<Failure>>,
    pub(super) earliest_line: AtomicU64,
    /// Whether a batch is first checked as one; if not, strict alone, line by line.
    pub(super) batches: bool,
}

pub(super) fn worker(rx: &Mutex<Receiver<Batch>>, shared: &Shared) {
    loop {
        match rx.lock().unwrap_or_else(PoisonError::into_inner).recv() {
            Ok(batch) => check(batch, shared),
            Err(_) => return,
        }
    }
}

/// Checks one batch, noting its first failure in `shared` if it is the earliest yet.
pub(super) fn check(batch: Batch, shared: &Shared) {
    let mut covered = batch.covered_before;
    if shared.batches && batch.jobs.len() >= MIN_BATCH {
        // Only lines before a failure already found can still matter.
        let earliest = shared.earliest_line.load(Ordering::Relaxed);
        let live = batch.jobs.partition_point(|job| job.line <= earliest);
        let items: Vec<BatchItem<'_>> = batch.jobs[..live]
            .iter()
            .map(|job| (&*job.key, &job.message[..], &job.signature))
            .collect();
        if verify_batch(&items) {
            return;
        }
    }
    // Some line fails (or the batch could not be checked as one): strict, line by
    // line in file order, finds the first failure and the coverage before it.
    for job in batch.jobs {
        if job.line > shared.earliest_line.load(Ordering::Relaxed) {
            break;
        }
        if job.key.verify_strict(&job.message, &job.signature) {
            covered = Some(job.at);
            continue;
        }
        let mut first = shared
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if first.as_ref().is_none_or(|f| job.line < f.line) {
            *first = Some(Failure {
                line: job.line,
                at: job.at,
                covered_before: covered,
            });
            shared.earliest_line.fetch_min(job.line, Ordering::Relaxed);
        }
        break;
    }
}

pub(super) fn sig_failure(f: &Failure) -> Tampered {
    Tampered::BadSignature {
        at: f.at,
        line: f.line,
        problem: SignatureProblem::DoesNotVerify,
    }
}
