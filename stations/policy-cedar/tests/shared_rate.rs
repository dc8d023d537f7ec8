//! Rate limits held in a ledger the host shares (`share_rate_limits`): two engines built
//! apart, as two processes have them, spend one budget through one ledger, keyed by the
//! policy id; a ledger that fails fails the evaluation (never a token, never the
//! process's own buckets instead). Asked through the boundary, as the host asks.

use aegis_policy_cedar::{CedarEngine, CedarSet};
use aegis_station_api::abi_stable::sabi_trait::TD_Opaque;
use aegis_station_api::abi_stable::std_types::{RResult, RSlice, RStr};
use aegis_station_api::{
    ErrorKind, Guarded, IndexedDecision, PluginError, PolicyEvaluator_TO, PolicyEvaluatorBox,
    PolicyRequest, RateLedger, RateLedger_TO, RateLedgerBox, RateLimits, Verdict,
};
use std::sync::{Arc, Mutex};

const SCHEMA: &str = r#"
entity Role;
entity Tool;
action "call", "fs.read", "fs.write", "net.http" appliesTo {
  principal: [Role],
  resource: [Tool],
  context: {},
};
"#;

const POLICIES: &str = r#"
@id("search-rate") @rate_limit("3/hour")
permit (principal, action, resource == Tool::"search");
@id("notes")
permit (principal, action, resource == Tool::"read-notes");
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
    let set = CedarSet::parse(POLICIES, "p.cedar", SCHEMA, "s.cedarschema")
        .unwrap_or_else(|e| panic!("{e}"));
    PolicyEvaluator_TO::from_value(Guarded(CedarEngine::new(set)), TD_Opaque)
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
fn two_engines_sharing_a_ledger_spend_one_budget() {
    let store = Store::default();
    let (a, b) = (evaluator(), evaluator());
    assert_eq!(a.share_rate_limits(store.ledger()).into_result(), Ok(true));
    assert_eq!(b.share_rate_limits(store.ledger()).into_result(), Ok(true));
    assert!(b.share_rate_limits(store.ledger()).into_result().is_err());
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
    assert_eq!(allowed, 3, "3 per hour across both engines");
    let takes = store.takes.lock().unwrap().clone();
    assert_eq!(takes, vec![("search-rate".to_owned(), 3, 3600); 6]);
    assert_eq!(call(&a, "read-notes", &[""]).unwrap(), [Verdict::ALLOW]);
    assert_eq!(store.takes.lock().unwrap().len(), 6);
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
    assert_eq!(call(&e, "read-notes", &[""]).unwrap(), [Verdict::ALLOW]);
}
