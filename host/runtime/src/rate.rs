//! The rate ledger the host hands its policy station
//! ([`PolicyEvaluator::share_rate_limits`](aegis_station_api::PolicyEvaluator)): rate-limit
//! buckets held in the audit store when the store keeps them
//! ([`AuditSink::take_rate`](aegis_station_api::AuditSink)), so that a policy's
//! `rate_limit` holds across `run`s, `wrap`s and hosts writing to one store.
//!
//! # Guarantees
//! - A store that keeps buckets holds every take: one bucket per rule id, refilled by
//!   the store's clock, shared by every process that writes to it.
//! - A store that answers UNSUPPORTED (every sink but a database's) leaves the buckets
//!   to this ledger, in this process: the budget is per process, as without a ledger.
//!   The answer is remembered, so the boundary is not crossed again for it.
//! - Any other error of the store is returned, and the station fails the evaluation,
//!   so the host refuses the call at the policy station. So is a store that held
//!   buckets and later answers UNSUPPORTED: never a silent switch to a budget of the
//!   process's own.
//! - [`crate::recheck`] is never handed one: a replay spends the station's own budget,
//!   never a live one.
//!
//! # Non-guarantees
//! - Where buckets are held is learnt from the store's first answer, at the first
//!   rate-limited call ([`StoreLedger::held`]).
//! - The bucket is named by the rule id alone: two policies with a `rate_limit` rule
//!   of the same id share a budget in one store, whatever else differs. A changed rate
//!   restarts the bucket (the store's rule).

use aegis_station_api::abi_stable::sabi_trait::TD_Opaque;
use aegis_station_api::abi_stable::std_types::{RResult, RStr};
use aegis_station_api::{
    AuditSinkBox, ErrorKind, PluginError, RateLedger, RateLedger_TO, RateLedgerBox, RateLimits,
};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// Where a host's rate-limit buckets are held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateHeld {
    /// Not known yet: nothing has been taken.
    NotYet,
    /// In the audit store, shared by every process writing to it.
    Store,
    /// In this process: the store keeps no buckets.
    Process,
}

const NOT_YET: u8 = 0;
const STORE: u8 = 1;
const PROCESS: u8 = 2;

/// A ledger over an audit sink: the sink's buckets when it keeps them, else buckets in
/// this process. Clones share one state.
#[derive(Clone)]
pub struct StoreLedger(Arc<Inner>);

struct Inner {
    /// The session's sink; replaced when a stopped session is followed by a new one.
    sink: RwLock<Arc<AuditSinkBox>>,
    held: AtomicU8,
    local: RateLimits,
}

impl std::fmt::Debug for StoreLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLedger")
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl StoreLedger {
    /// A ledger over `sink`; nothing is asked of the sink until the first take.
    pub fn new(sink: Arc<AuditSinkBox>) -> StoreLedger {
        StoreLedger(Arc::new(Inner {
            sink: RwLock::new(sink),
            held: AtomicU8::new(NOT_YET),
            local: RateLimits::new(),
        }))
    }

    /// Takes from `sink` from now on: the sink of the session that follows a stopped
    /// one (the stopped sink's connection is gone).
    pub(crate) fn follow(&self, sink: Arc<AuditSinkBox>) {
        *self.0.sink.write().unwrap_or_else(PoisonError::into_inner) = sink;
    }

    /// Where the buckets are held, as far as the store's answers have said.
    pub fn held(&self) -> RateHeld {
        match self.0.held.load(Ordering::Acquire) {
            STORE => RateHeld::Store,
            PROCESS => RateHeld::Process,
            _ => RateHeld::NotYet,
        }
    }

    /// This ledger (sharing its state) for the boundary.
    pub fn boxed(&self) -> RateLedgerBox {
        RateLedger_TO::from_value(self.clone(), TD_Opaque)
    }

    /// Marks the buckets as held at `to`; false when an earlier answer said otherwise.
    fn settle(&self, to: u8) -> bool {
        match self
            .0
            .held
            .compare_exchange(NOT_YET, to, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(now) => now == to,
        }
    }

    fn take_now(&self, bucket: &str, max: u64, per_seconds: u64) -> Result<bool, PluginError> {
        if self.0.held.load(Ordering::Acquire) == PROCESS {
            return Ok(self.0.local.take(bucket, max, per_seconds));
        }
        let failed = |kind, why: &str| {
            PluginError::new(
                kind,
                format!("the audit store could not take from rate-limit bucket {bucket:?}: {why}"),
            )
        };
        let sink = Arc::clone(&self.0.sink.read().unwrap_or_else(PoisonError::into_inner));
        match sink
            .take_rate(RStr::from(bucket), max, per_seconds)
            .into_result()
        {
            Ok(within) if self.settle(STORE) => Ok(within),
            Err(e) if e.kind == ErrorKind::UNSUPPORTED && self.settle(PROCESS) => {
                Ok(self.0.local.take(bucket, max, per_seconds))
            }
            Ok(_) => Err(failed(
                ErrorKind::OTHER,
                "it answered, after saying it keeps no buckets",
            )),
            Err(e) if e.kind == ErrorKind::UNSUPPORTED => Err(failed(
                ErrorKind::OTHER,
                "it says it keeps no buckets, after holding them",
            )),
            Err(e) => Err(failed(e.kind, &e.message)),
        }
    }
}

impl RateLedger for StoreLedger {
    fn take(&self, bucket: RStr<'_>, max: u64, per_seconds: u64) -> RResult<bool, PluginError> {
        self.take_now(bucket.as_str(), max, per_seconds).into()
    }
}

#[cfg(test)]
mod tests {
    use super::{RateHeld, StoreLedger};
    use aegis_station_api::abi_stable::sabi_trait::TD_Opaque;
    use aegis_station_api::abi_stable::std_types::RStr;
    use aegis_station_api::{
        AuditSink_TO, ErrorKind, Guarded, PluginError, RateLedger, Retention, Sink, Tail, TailKind,
    };
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A sink whose `take_rate` answers from a script: `Ok(true)`, UNSUPPORTED, or an
    /// I/O error, and counts how often it was asked.
    struct Scripted {
        answer: fn(u64) -> Result<bool, PluginError>,
        asked: Arc<AtomicU64>,
    }

    impl Sink for Scripted {
        fn retention(&self) -> Retention {
            Retention::VOLATILE
        }
        fn location(&self) -> String {
            String::new()
        }
        fn existing_tail(&self) -> Result<Tail, PluginError> {
            Ok(Tail {
                kind: TailKind::EMPTY,
                line: Default::default(),
            })
        }
        fn append(&self, _: &[u8]) -> Result<(), PluginError> {
            Ok(())
        }
        fn sync(&self) -> Result<(), PluginError> {
            Ok(())
        }
        fn read_lines(&self, _: u64, _: u32) -> Result<Vec<Vec<u8>>, PluginError> {
            Ok(Vec::new())
        }
        fn take_rate(&self, _: &str, _: u64, _: u64) -> Result<bool, PluginError> {
            let n = self.asked.fetch_add(1, Ordering::SeqCst);
            (self.answer)(n)
        }
    }

    fn ledger(answer: fn(u64) -> Result<bool, PluginError>) -> (StoreLedger, Arc<AtomicU64>) {
        let asked = Arc::new(AtomicU64::new(0));
        let sink = AuditSink_TO::from_value(
            Guarded(Scripted {
                answer,
                asked: asked.clone(),
            }),
            TD_Opaque,
        );
        (StoreLedger::new(Arc::new(sink)), asked)
    }

    fn take(l: &StoreLedger) -> Result<bool, PluginError> {
        l.take(RStr::from("r"), 2, 3600).into_result()
    }

    /// A store that keeps no buckets is asked once; the buckets are then the
    /// process's, with the same budget as a station's own.
    #[test]
    fn unsupported_is_asked_once_and_the_budget_is_the_processs() {
        let (l, asked) = ledger(|_| Err(PluginError::unsupported("shared rate limit")));
        assert_eq!(l.held(), RateHeld::NotYet);
        let taken: Vec<bool> = (0..3).map(|_| take(&l).unwrap()).collect();
        assert_eq!(taken, [true, true, false]);
        assert_eq!(l.held(), RateHeld::Process);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    /// A store that keeps buckets answers every take.
    #[test]
    fn a_store_that_keeps_buckets_answers_every_take() {
        let (l, asked) = ledger(|n| Ok(n % 2 == 0));
        let taken: Vec<bool> = (0..4).map(|_| take(&l).unwrap()).collect();
        assert_eq!(taken, [true, false, true, false]);
        assert_eq!(l.held(), RateHeld::Store);
        assert_eq!(asked.load(Ordering::SeqCst), 4);
    }

    /// Any other error is returned, every time, naming the bucket; and a store that
    /// changes its answer about keeping buckets fails rather than switching budgets.
    #[test]
    fn errors_fail_closed_and_never_switch_budgets() {
        let (l, asked) = ledger(|_| Err(PluginError::new(ErrorKind::IO, "connection refused")));
        for _ in 0..3 {
            let e = take(&l).unwrap_err();
            assert_eq!(e.kind, ErrorKind::IO);
            assert!(e.message.contains("bucket \"r\""), "{e}");
            assert!(e.message.ends_with("connection refused"), "{e}");
        }
        assert_eq!(
            (l.held(), asked.load(Ordering::SeqCst)),
            (RateHeld::NotYet, 3)
        );
        let (l, _) = ledger(|n| match n {
            0 => Ok(true),
            _ => Err(PluginError::unsupported("shared rate limit")),
        });
        assert_eq!(take(&l), Ok(true));
        let e = take(&l).unwrap_err();
        assert!(e.message.contains("after holding them"), "{e}");
        assert_eq!(l.held(), RateHeld::Store);
    }
}
