//! Rate limits held in a ledger the host shares (`share_rate_limits`): two evaluators
//! built apart, as two processes have them, spend one budget through one ledger; a
//! ledger that fails fails the evaluation, never reads as a token, and is never
//! replaced by the process's own buckets. Asked through the boundary, as the host asks.

use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::abi_stable::sabi_trait::TD_Opaque;
use aegis_station_api::abi_stable::std_types::{RResult, RSlice, RStr};
use aegis_station_api::{
    ErrorKind, Guarded, IndexedDecision, PluginError, PolicyEvaluator_TO, PolicyEvaluatorBox,
    PolicyRequest, RateLedger, RateLedger_TO, RateLedgerBox, RateLimits, Verdict,
};
use std::sync::{Arc, Mutex};

const POLICY: &str = r#"version: 1
default: deny
rules:
  - id: search-rate
    action: rate_limit
    tool: search
    rate: { max: 3, per_seconds: 3600 }
  - id: notes
    action: allow
    tool: read-notes
"#;

/// A store stand-in: one set of buckets behind every clone, and the takes it saw.
#[derive(Clone, Default)]
struct Store {
    buckets: Arc<RateLimits>,
    takes: Arc<Mutex<Vec<(String, u64, u64)>>>,
    down: bool,
}

impl RateLedger for Store {
    fn take(&self, bucket: RStr<'_>, max: u64, per_seconds: u64) -> RResult<bool, PluginError> {
        self.takes
            .lock()
            .unwrap()
            .push((bucket.to_string(), max, per_seconds));
        if self.down {
            return RResult::RErr(PluginError::new(ErrorKind::IO, "connection refused"));
        }
        RResult::ROk(self.buckets.take(bucket.as_str(), max, per_seconds))
    }
}

impl Store {
    fn ledger(&self) -> RateLedgerBox {
        RateLedger_TO::from_value(self.clone(), TD_Opaque)
    }
}

fn evaluator() -> PolicyEvaluatorBox {
    let set = PolicySet::parse(POLICY, "p.yaml").unwrap();
    PolicyEvaluator_TO::from_value(Guarded(PolicyEngine::new(set)), TD_Opaque)
}

/// The verdicts of one call of `tool` over `axes`, or the station's error.
fn call(e: &PolicyEvaluatorBox, tool: &str, axes: &[&str]) -> Result<Vec<Verdict>, PluginError> {
    let request = PolicyRequest {
        tool_id: tool.into(),
        capability: "".into(),
        role: "".into(),
        session: "".into(),
    };
    let axes: Vec<RStr<'_>> = axes.iter().map(|a| RStr::from(*a)).collect();
    let mut out = vec![IndexedDecision::default(); axes.len()];
    let answer = e
        .evaluate_call(
            &request,
            RStr::from("{}"),
            RSlice::from(&axes[..]),
            (&mut out[..]).into(),
        )
        .into_result()?;
    Ok(out[..answer.answer.answered as usize]
        .iter()
        .map(|d| d.verdict)
        .collect())
}

#[test]
fn two_evaluators_sharing_a_ledger_spend_one_budget() {
    let store = Store::default();
    let (a, b) = (evaluator(), evaluator());
    assert_eq!(a.share_rate_limits(store.ledger()).into_result(), Ok(true));
    assert_eq!(b.share_rate_limits(store.ledger()).into_result(), Ok(true));
    // A second ledger is refused: one budget, never two in turn.
    assert!(a.share_rate_limits(store.ledger()).into_result().is_err());
    let mut allowed = 0;
    for i in 0..6 {
        let e = if i % 2 == 0 { &a } else { &b };
        // Two axes, one call: one token.
        let v = call(e, "search", &["fs.read", "fs.write"]).unwrap();
        if v == [Verdict::ALLOW, Verdict::ALLOW] {
            allowed += 1;
        } else {
            assert_eq!(v, [Verdict::RATE_LIMIT]);
        }
    }
    assert_eq!(allowed, 3, "max 3 per hour across both evaluators");
    let takes = store.takes.lock().unwrap().clone();
    assert_eq!(takes, vec![("search-rate".to_owned(), 3, 3600); 6]);
    // A rule without a rate does not touch the ledger.
    assert_eq!(call(&a, "read-notes", &[""]).unwrap(), [Verdict::ALLOW]);
    assert_eq!(store.takes.lock().unwrap().len(), 6);
}

#[test]
fn without_a_ledger_each_evaluator_has_its_own_budget() {
    let (a, b) = (evaluator(), evaluator());
    for e in [&a, &b] {
        for _ in 0..3 {
            assert_eq!(call(e, "search", &[""]).unwrap(), [Verdict::ALLOW]);
        }
        assert_eq!(call(e, "search", &[""]).unwrap(), [Verdict::RATE_LIMIT]);
    }
}

#[test]
fn a_ledger_that_fails_fails_the_evaluation() {
    let store = Store {
        down: true,
        ..Store::default()
    };
    let e = evaluator();
    assert_eq!(e.share_rate_limits(store.ledger()).into_result(), Ok(true));
    for _ in 0..5 {
        let err = call(&e, "search", &[""]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::IO);
        assert_eq!(err.message.as_str(), "connection refused");
    }
    // The owned form fails the same way.
    let request = PolicyRequest {
        tool_id: "search".into(),
        capability: "".into(),
        role: "".into(),
        session: "".into(),
    };
    assert!(e.evaluate(&request).into_result().is_err());
    // A call no rate rule governs is decided as before.
    assert_eq!(call(&e, "read-notes", &[""]).unwrap(), [Verdict::ALLOW]);
}
