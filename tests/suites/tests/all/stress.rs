//! Many threads, one pipeline: success, deny, trap, ceiling and host-panic calls
//! interleaved. Every call gets exactly one intent and one outcome, and the whole
//! session is one unforked chain that verifies.

use aegis_runtime::capability::{DEFAULT_LIMITS, Limits};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_suites::{Harness, host_tool, plain_tool, wasm_tool};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const THREADS: usize = 8;
const ROUNDS: usize = 6;

#[test]
fn every_call_from_every_thread_is_recorded_once_on_one_chain() {
    let policy =
        "version: 1\ndefault: allow\nrules:\n  - id: no-shell\n    action: deny\n    tool: shell\n";
    let tight = Limits {
        max_wall_ms: 100,
        ..DEFAULT_LIMITS
    };
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert("boom".into(), Arc::new(|_, _| panic!("handler panic")));
    let h = Harness::new(
        policy,
        vec![
            plain_tool("echo", "echo"),
            plain_tool("shell", "echo"),
            plain_tool("panic", "panic"),
            wasm_tool("spin", "spin", &[], &[], tight),
            host_tool("boom"),
        ],
        handlers,
    );
    let plan = [
        ("echo", CallClass::Success),
        ("shell", CallClass::PolicyDenied),
        ("ghost", CallClass::CapabilityDenied),
        ("panic", CallClass::Trap),
        ("spin", CallClass::ResourceExceeded),
        ("boom", CallClass::Trap),
    ];
    let seen: Vec<Vec<(String, CallClass)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let h = &h;
                scope.spawn(move || {
                    let mut mine = Vec::new();
                    for round in 0..ROUNDS {
                        // Each thread walks the plan from a different place.
                        let (tool, expected) = plan[(t + round) % plan.len()];
                        let input = format!("thread {t} round {round}");
                        let r = h
                            .pipeline
                            .call(&CallRequest::new(tool, input.as_bytes()))
                            .expect("recorded");
                        assert_eq!(r.class(), expected, "{tool}");
                        if expected == CallClass::Success {
                            assert_eq!(r.output.as_deref(), Some(input.as_bytes()));
                        }
                        mine.push((r.outcome.call_id.clone(), expected));
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let told: HashMap<String, CallClass> = seen.into_iter().flatten().collect();
    assert_eq!(told.len(), THREADS * ROUNDS, "call ids are unique");

    let checked = h.finish();
    assert_eq!(checked.outcomes.len(), THREADS * ROUNDS);
    for o in &checked.outcomes {
        assert_eq!(
            CallClass::of(o),
            told[&o.call_id],
            "the record agrees with what the caller was told: {}",
            o.call_id
        );
    }
}

#[test]
fn calls_beyond_the_sandbox_pool_are_recorded_as_not_started() {
    use aegis_record::ExecutionOutcome;
    use aegis_runtime::sandbox::{Options, Sandbox};
    let one_slot = Sandbox::with_options(&Options {
        cache_dir: None,
        concurrent_calls: Some(1),
    })
    .unwrap();
    let slow = Limits {
        max_wall_ms: 1_000,
        ..DEFAULT_LIMITS
    };
    let h = Harness::with_sandbox(
        "version: 1\ndefault: allow\n",
        vec![wasm_tool("spin", "spin", &[], &[], slow)],
        Arc::new(one_slot),
    );
    let classes: Vec<CallClass> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4)
            .map(|_| s.spawn(|| h.call("spin", b"").class()))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let stopped = classes
        .iter()
        .filter(|c| **c == CallClass::ResourceExceeded)
        .count();
    let refused = classes
        .iter()
        .filter(|c| **c == CallClass::HostDenied)
        .count();
    assert!(stopped >= 1, "{classes:?}");
    assert!(
        refused >= 1,
        "four one-second calls started together cannot share one slot: {classes:?}"
    );
    assert_eq!(stopped + refused, 4, "{classes:?}");
    let checked = h.finish();
    let at_capacity = checked
        .outcomes
        .iter()
        .filter(|o| {
            matches!(&o.execution, ExecutionOutcome::HostDenied { reason } if reason.contains("at capacity"))
        })
        .count();
    assert_eq!(at_capacity, refused, "each refusal says why on the record");
}
