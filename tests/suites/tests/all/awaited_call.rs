//! A call awaited in the caller's own tokio runtime ([`Pipeline::call_async`], which
//! `aegis gateway` uses on a volatile sink) keeps every promise of the blocking one:
//! one intent and one outcome, the tool's ceilings and cancellation, a caught panic,
//! and, when the future is dropped mid-run, an abandonment on the record and the
//! sandbox's slot given back.
//!
//! [`Pipeline::call_async`]: aegis_runtime::Pipeline::call_async

use aegis_record::ExecutionOutcome;
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{ABANDONED, CallRequest};
use aegis_runtime::sandbox::{Options, Sandbox};
use aegis_runtime::{CallClass, CallRecord, CancelToken};
use aegis_suites::{Harness, host_tool, plain_tool, wasm_tool};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// `tool` called with `input` through the awaited API, expecting the record kept.
async fn awaited(h: &Harness, tool: &str, input: &[u8]) -> CallRecord {
    h.pipeline
        .call_async(&CallRequest::new(tool, input))
        .await
        .expect("the record is kept")
}

/// `guest` as tool `id`, with the default ceilings but a deadline of `wall_ms`.
fn timed(id: &str, guest: &str, wall_ms: u64) -> ToolManifest {
    wasm_tool(
        id,
        guest,
        &[],
        &[],
        Limits {
            max_wall_ms: wall_ms,
            ..DEFAULT_LIMITS
        },
    )
}

/// A deadline far beyond any test's length.
const FAR: u64 = 600_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_call_is_recorded_as_a_blocking_one_is() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], BTreeMap::new());
    let r = awaited(&h, "echo", b"awaited").await;
    assert_eq!(r.class(), CallClass::Success);
    assert_eq!(r.output.as_deref(), Some(&b"awaited"[..]));
    let blocking = h.call("echo", b"awaited");
    assert_eq!(
        r.outcome.request_digest, blocking.outcome.request_digest,
        "the same request, the same digest, whichever API"
    );
    let checked = h.finish();
    assert_eq!(checked.outcomes.len(), 2);
}

/// The wall-clock ceiling holds in the caller's runtime, and while the guest spins the
/// runtime's one thread still serves other tasks: the guest yields at every tick.
#[test]
fn a_spinning_guest_hits_its_deadline_and_yields_the_thread_meanwhile() {
    let h = Harness::new(
        ALLOW_ALL,
        vec![
            timed("spin", "spin", 400),
            timed("world-spin", "world-spin", 400),
        ],
        BTreeMap::new(),
    );
    // One thread: if the guest never handed it back, nothing else could run.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for tool in ["spin", "world-spin"] {
        let (ending, ticks) = runtime.block_on(async {
            let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let counting = Arc::clone(&ticks);
            let counter = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
            let r = awaited(&h, tool, b"").await;
            counter.abort();
            (
                r.outcome.execution,
                ticks.load(std::sync::atomic::Ordering::Relaxed),
            )
        });
        assert_eq!(
            ending,
            ExecutionOutcome::ResourceExceeded {
                kind: "wall_time".into()
            },
            "{tool}"
        );
        // 400 ms of spinning, handed back every 5 ms tick: dozens of turns. A guest
        // that held the thread would leave none.
        assert!(
            ticks >= 10,
            "{tool}: the other task ran {ticks} times while the guest spun"
        );
    }
    h.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_awaited_call_stops_and_says_so() {
    let h = Harness::new(
        ALLOW_ALL,
        vec![timed("spin", "spin", FAR), timed("sleep", "sleep", FAR)],
        BTreeMap::new(),
    );
    for tool in ["spin", "sleep"] {
        let token = CancelToken::new();
        let cancelling = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancelling.cancel("the client went away");
        });
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            h.pipeline.call_async(&CallRequest {
                cancel: Some(&token),
                ..CallRequest::new(tool, b"")
            }),
        )
        .await
        .unwrap_or_else(|_| panic!("{tool}: the cancelled call did not stop"))
        .expect("recorded");
        assert_eq!(
            r.outcome.execution,
            ExecutionOutcome::Trap {
                message: "cancelled: the client went away".into()
            },
            "{tool}"
        );
        assert_eq!(r.output, None);
    }
    h.finish();
}

/// Dropping the future is the caller walking away: the guard records the abandonment
/// with what the stations had decided, the guest stops where it is (no thread goes on
/// running it), and its pool slot is free for the next call at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_awaited_call_records_its_abandonment_and_frees_its_slot() {
    let one_slot = Arc::new(
        Sandbox::with_options(&Options {
            concurrent_calls: Some(1),
            ..Options::default()
        })
        .unwrap(),
    );
    let h = Harness::with_sandbox(
        ALLOW_ALL,
        vec![timed("spin", "spin", FAR), plain_tool("echo", "echo")],
        one_slot,
    );
    for _ in 0..3 {
        let walked_away = tokio::time::timeout(
            Duration::from_millis(150),
            h.pipeline.call_async(&CallRequest::new("spin", b"")),
        )
        .await;
        assert!(walked_away.is_err(), "a ten-minute spin ended on its own");
        // The only slot is free again: with it still held, this would be refused as
        // the sandbox at capacity.
        let next = awaited(&h, "echo", b"next").await;
        assert_eq!(next.class(), CallClass::Success, "{:?}", next.outcome);
    }
    let checked = h.finish();
    let spins: Vec<_> = checked
        .outcomes
        .iter()
        .filter(|o| o.tool_id == "spin")
        .collect();
    assert_eq!(spins.len(), 3);
    for o in spins {
        assert_eq!(
            o.execution,
            ExecutionOutcome::HostDenied {
                reason: ABANDONED.into()
            }
        );
        assert!(matches!(
            o.capability,
            aegis_record::CapabilityOutcome::Granted { .. }
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_an_awaited_call_runs_is_a_recorded_trap() {
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "boom".into(),
        Arc::new(|_, _| panic!("the handler fell over")),
    );
    let h = Harness::new(ALLOW_ALL, vec![host_tool("boom")], handlers);
    let r = awaited(&h, "boom", b"x").await;
    assert_eq!(
        r.outcome.execution,
        ExecutionOutcome::Trap {
            message: "host panic: the handler fell over".into()
        }
    );
    // The runtime and the host go on.
    let h2 = awaited(&h, "boom", b"again").await;
    assert_eq!(h2.class(), CallClass::Trap);
    h.finish();
}

/// The blocking API still works from a plain thread next to the awaited one, on the
/// same host: the two share the sandbox and the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_and_awaited_calls_share_one_host() {
    let h = Arc::new(Harness::new(
        ALLOW_ALL,
        vec![plain_tool("echo", "echo")],
        BTreeMap::new(),
    ));
    let blocking = {
        let h = Arc::clone(&h);
        std::thread::spawn(move || {
            (0..8)
                .map(|_| h.call("echo", b"blocking").class())
                .collect::<Vec<_>>()
        })
    };
    for _ in 0..8 {
        let r = awaited(&h, "echo", b"awaited").await;
        assert_eq!(r.class(), CallClass::Success);
    }
    assert!(
        blocking
            .join()
            .unwrap()
            .iter()
            .all(|c| *c == CallClass::Success)
    );
    let h = Arc::into_inner(h).expect("the thread is done");
    assert_eq!(h.finish().outcomes.len(), 16);
}

/// The blocking API called from inside an async task cannot block there; it fails
/// closed, on the record, instead of taking the process down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocking_call_inside_a_task_is_a_recorded_failure_not_a_crash() {
    let h = Harness::new(ALLOW_ALL, vec![plain_tool("echo", "echo")], BTreeMap::new());
    let r = h.call("echo", b"from inside a task");
    assert_eq!(r.class(), CallClass::Trap);
    assert_eq!(r.output, None);
    let ExecutionOutcome::Trap { message } = &r.outcome.execution else {
        panic!("{:?}", r.outcome.execution)
    };
    assert!(
        message.starts_with("host panic: Cannot start a runtime from within a runtime"),
        "{message}"
    );
    // The awaited call works on the same host right after.
    assert_eq!(awaited(&h, "echo", b"x").await.class(), CallClass::Success);
    h.finish();
}
