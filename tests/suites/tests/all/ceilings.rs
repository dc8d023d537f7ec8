//! Ceilings that hold whatever the guest does, through the assembled pipeline with a
//! durable file sink: a call blocked in a host call (a sleep, a panic hook that sleeps,
//! a read of a FIFO nobody writes) still ends at the wall-clock ceiling; tables and
//! instances count toward, or are bounded beside, the memory ceiling; and stderr is
//! held to the grant's output ceiling. Every record verifies.
//!
//! A guest that blocks sleeps for an hour. The test waits for the call on a channel
//! with a generous timeout (far above the ceiling, far below the hour) and fails if the
//! call has not returned: "stopped at the ceiling" is checked by who returned first,
//! not by timing the call.

use aegis_record::ExecutionOutcome;
use aegis_runtime::capability::{Limits, ToolManifest};
use aegis_runtime::pipeline::{CallClass, CallRecord};
use aegis_runtime::sandbox::{Options, Sandbox};
use aegis_suites::{Checked, Harness, wasm_tool};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// Far above every ceiling below, far below the guests' hour-long sleeps.
const PATIENCE: Duration = Duration::from_secs(60);

const QUICK: Limits = Limits {
    max_memory_bytes: 64 << 20,
    max_wall_ms: 300,
    max_output_bytes: 1 << 20,
};

/// `aegis run` builds its sandbox without an instance pool; the suites' shared one has it.
fn unpooled() -> Arc<Sandbox> {
    Arc::new(
        Sandbox::with_options(&Options {
            concurrent_calls: None,
            ..Options::default()
        })
        .expect("engine"),
    )
}

/// Runs one call of `tool` (with `args`) on a fresh harness in another thread, and
/// returns its record and the checked record file, or `None` if it did not return
/// within [`PATIENCE`].
fn call_within_patience(
    tools: Vec<ToolManifest>,
    sandbox: Arc<Sandbox>,
    tool: &'static str,
    args: Vec<String>,
) -> Option<(CallRecord, Checked)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let h = Harness::with_sandbox(ALLOW_ALL, tools, sandbox);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = h.call_args(tool, b"", &args);
        let checked = h.finish();
        let _ = tx.send((r, checked));
    });
    rx.recv_timeout(PATIENCE).ok()
}

fn assert_stopped_by(r: &CallRecord, kind: &str) {
    assert_eq!(
        r.outcome.execution,
        ExecutionOutcome::ResourceExceeded { kind: kind.into() },
        "stderr: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(r.output, None, "a stopped call returns nothing");
    assert_eq!(r.outcome.response_digest, None);
}

#[test]
fn a_guest_asleep_in_a_host_call_is_stopped_at_the_wall_clock_ceiling() {
    for sandbox in [aegis_suites::sandbox(), unpooled()] {
        let tools = vec![wasm_tool("sleep", "sleep", &[], &[], QUICK)];
        let (r, checked) = call_within_patience(tools, sandbox, "sleep", vec![])
            .expect("the sleeping call was not stopped at its 300 ms ceiling");
        assert_stopped_by(&r, "wall_time");
        assert_eq!(checked.outcome(&r.outcome.call_id), &r.outcome);
    }
}

#[test]
fn a_panic_hook_that_sleeps_is_stopped_at_the_wall_clock_ceiling() {
    let tools = vec![wasm_tool("panic-sleep", "panic-sleep", &[], &[], QUICK)];
    let (r, _) = call_within_patience(tools, aegis_suites::sandbox(), "panic-sleep", vec![])
        .expect("the sleeping panic hook was not stopped at its 300 ms ceiling");
    assert_stopped_by(&r, "wall_time");
    // The hook ran (it wrote before sleeping), so the stop came while it slept.
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("in the hook"), "{stderr}");
}

#[test]
fn a_read_blocked_on_a_fifo_in_a_root_is_stopped_at_the_wall_clock_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let fifo = root.join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let tools = vec![wasm_tool("read-file", "read-file", &[&root], &[], QUICK)];
    let args = vec![fifo.to_str().unwrap().to_owned()];
    let result = call_within_patience(tools, aegis_suites::sandbox(), "read-file", args);
    // Release the host thread still blocked opening the FIFO (the documented
    // non-guarantee: a thread blocked in the kernel is abandoned, not stopped).
    release_fifo(&fifo);
    let (r, _) = result.expect("the read blocked on a FIFO was not stopped at its ceiling");
    assert_stopped_by(&r, "wall_time");
}

/// Opens `fifo` for writing, which lets a reader blocked in `open` go on, without
/// waiting if no reader is left.
fn release_fifo(fifo: &Path) {
    let fifo = fifo.to_owned();
    std::thread::spawn(move || {
        let _ = std::fs::OpenOptions::new().write(true).open(fifo);
    });
}

#[test]
fn tables_count_toward_the_memory_ceiling() {
    // The guest grows 16 tables by 65536 slots: 8 MiB of host memory, one page of
    // linear memory.
    let tight = Limits {
        max_memory_bytes: 1 << 20,
        ..QUICK
    };
    let roomy = Limits {
        max_memory_bytes: 16 << 20,
        ..QUICK
    };
    let tools = vec![
        wasm_tool("bomb", "world-table-bomb", &[], &[], tight),
        wasm_tool("tables", "world-table-bomb", &[], &[], roomy),
    ];
    let h = Harness::with_sandbox(ALLOW_ALL, tools, unpooled());
    let r = h.call("bomb", b"");
    assert_stopped_by(&r, "memory");
    let peak = r.outcome.peak_memory_bytes.unwrap().get();
    assert!(
        peak <= tight.max_memory_bytes,
        "peak {peak} over the ceiling"
    );
    // Under a ceiling it fits, the record's peak is the true one: the tables are in it.
    let r = h.call("tables", b"");
    assert_eq!(r.class(), CallClass::Success);
    let peak = r.outcome.peak_memory_bytes.unwrap().get();
    assert!(peak >= 16 * 65536 * 8, "peak {peak} leaves the tables out");
    h.finish();

    // The pool refuses a module with more than one table before any guest code runs.
    let tools = vec![wasm_tool("bomb", "world-table-bomb", &[], &[], tight)];
    let h = Harness::with_sandbox(ALLOW_ALL, tools, aegis_suites::sandbox());
    let r = h.call("bomb", b"");
    assert_eq!(r.class(), CallClass::HostDenied);
    assert_eq!(r.outcome.wall_ms, None);
    h.finish();
}

#[test]
fn a_component_that_instantiates_a_module_many_times_is_bounded() {
    let tight = Limits {
        max_memory_bytes: 1 << 20,
        ..QUICK
    };
    // Without a pool: the store's instance bound stops it while it instantiates.
    let tools = vec![wasm_tool("many", "world-instance-bomb", &[], &[], tight)];
    let h = Harness::with_sandbox(ALLOW_ALL, tools, unpooled());
    let r = h.call("many", b"");
    assert_eq!(r.output, None, "the bomb must not run to completion");
    let ExecutionOutcome::Trap { message } = &r.outcome.execution else {
        panic!("{:?}", r.outcome.execution)
    };
    assert!(message.contains("instance count"), "{message}");
    h.finish();

    // With the pool: refused when prepared, before any guest code runs.
    let tools = vec![wasm_tool("many", "world-instance-bomb", &[], &[], tight)];
    let h = Harness::with_sandbox(ALLOW_ALL, tools, aegis_suites::sandbox());
    let r = h.call("many", b"");
    assert_eq!(r.class(), CallClass::HostDenied);
    let ExecutionOutcome::HostDenied { reason } = &r.outcome.execution else {
        panic!()
    };
    assert!(reason.contains("core module instances"), "{reason}");
    h.finish();
}

#[test]
fn stderr_is_held_to_the_output_ceiling_when_the_output_ceiling_stops_the_call() {
    let limits = Limits {
        max_output_bytes: 1 << 10,
        ..QUICK
    };
    let tools = vec![wasm_tool("flood", "stderr-flood", &[], &[], limits)];
    let h = Harness::with_sandbox(ALLOW_ALL, tools, aegis_suites::sandbox());
    let r = h.call("flood", b"");
    assert_stopped_by(&r, "output");
    assert!(
        r.stderr.len() as u64 <= limits.max_output_bytes,
        "{} bytes of stderr reached the operator past a {}-byte output ceiling",
        r.stderr.len(),
        limits.max_output_bytes
    );
    assert!(r.stderr.starts_with(b"eee"), "the bounded stderr is kept");
    h.finish();
}

#[test]
fn a_cancelled_call_is_recorded_as_a_trap_saying_why() {
    use aegis_runtime::pipeline::{CallRequest, Executed};
    use aegis_runtime::sandbox::CancelToken;
    let hour = Limits {
        max_wall_ms: 3_600_000,
        ..QUICK
    };
    let (tx, rx) = mpsc::channel();
    let token = CancelToken::new();
    let running = token.clone();
    std::thread::spawn(move || {
        let sandbox = aegis_suites::sandbox();
        let tools = vec![wasm_tool("sleep", "sleep", &[], &[], hour)];
        let h = Harness::with_sandbox(ALLOW_ALL, tools, sandbox.clone());
        // A caller that holds a token runs the stations itself.
        let mut call = h.pipeline.begin(&CallRequest::new("sleep", b"")).unwrap();
        let grant = call.authorize().expect("allowed");
        let run = sandbox
            .run_cancellable(&aegis_suites::guest("sleep"), &grant, b"", &[], &running)
            .expect("started");
        let r = call
            .finish(Executed::Ran {
                ending: run.ending,
                output: run.output,
                wall_ms: run.wall_ms,
                peak_memory_bytes: run.peak_memory_bytes,
                stderr: run.stderr,
            })
            .expect("recorded");
        let checked = h.finish();
        let _ = tx.send((r, checked));
    });
    token.cancel("the client sent notifications/cancelled");
    let (r, checked) = rx
        .recv_timeout(PATIENCE)
        .expect("the cancelled call did not stop");
    assert_eq!(
        r.outcome.execution,
        ExecutionOutcome::Trap {
            message: "cancelled: the client sent notifications/cancelled".into()
        }
    );
    assert_eq!(r.output, None);
    assert_eq!(r.outcome.response_digest, None);
    assert!(r.outcome.wall_ms.is_some(), "the tool was started");
    assert_eq!(checked.outcome(&r.outcome.call_id), &r.outcome);
}
