//! How long a parked call waits after a person's decision (issue 35, item 8): from the
//! decision written to the held call starting, with the local queue [≤ 50 ms].
//!
//! One host, one durable record (`builtin:file-sink`, a temporary directory on the
//! build's disk), two host tools that hand their input back: `echo`, which the policy
//! allows, and `guarded`, which a `pending_approval` rule parks. Group `approvals`:
//!
//! - `bare_call`: one allowed call of `echo` through the pipeline (`Pipeline::call`:
//!   intent line, policy, capability, the handler, signed outcome line; both lines
//!   synced). The floor a resumed call is read against, in the same run.
//! - `decision_to_resume`: per iteration, untimed first: `guarded` is called and
//!   parked, the park is filed in a real queue directory (`Desk::file`), and a thread
//!   runs `Desk::settle` on it; once that thread is asleep in `poll` on the queue's
//!   inotify watch, the main thread signs an approval as `aegis approvals approve`
//!   does and places it (`Queue::decide`). Timed: from just before `decide` to the
//!   moment the resumed call (the same request, `approval: Some(..)`) has its intent
//!   on the record and its grant in hand, right before the tool runs. That span holds
//!   the decision file's write and flush, the inotify wake-up, the claim (rename and
//!   directory flush), the signature check, the `decision` line (signed, synced), the
//!   resumed call's intent line (synced) and both stations.
//! - `decision_to_resume_and_done`: the same, until the resumed call's outcome is on
//!   the record and its output handed back.
//!
//! After each resume id the bench prints the median, 95th percentile and maximum of
//! every iteration it ran (warm-up included), split at the decision placed, at
//! `settle` returning and at the tool starting: a ≤ 50 ms target is about the slow
//! iterations as much as the mean. Every iteration checks that the resumed call
//! succeeded under the approval it was given; a refusal fails the bench.

use aegis_approvals::{DecisionFile, Front, Queue};
use aegis_record::DecisionVerdict;
use aegis_record::key::SigningKey;
use aegis_runtime::Host;
use aegis_runtime::approvals::{Desk, Ticket};
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::handler::{HostContext, HostHandler};
use aegis_runtime::pipeline::{CallClass, CallRequest};
use criterion::{Criterion, SamplingMode, criterion_main};
use std::cell::RefCell;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `guarded` waits for a person; everything else is allowed.
const POLICY: &str = "version: 1\ndefault: allow\nrules:\n  - id: ask-first\n    action: pending_approval\n    tool: guarded\n";

/// The call's arguments, as the gateway states them (canonical JSON), and its input.
const ARGUMENTS: &str = r#"{"message":"hello"}"#;

/// Seed of the approver's key (public and worthless, like the bench's own).
const APPROVER_SEED: [u8; 32] = *b"aegis benches: an approver seed!";

/// How long `settle` may keep its wake-up interval: longer than any iteration, so it
/// is woken by the decision alone, never by its keep-alive.
const KEEP_ALIVE: Duration = Duration::from_secs(600);

fn request(tool: &str) -> CallRequest<'_> {
    CallRequest {
        arguments: Some(ARGUMENTS),
        ..CallRequest::new(tool, ARGUMENTS.as_bytes())
    }
}

fn host_tool(id: &str) -> ToolManifest {
    ToolManifest {
        id: id.into(),
        kind: ToolKind::Host,
        fs_read: vec![],
        fs_write: vec![],
        net: vec![],
        limits: DEFAULT_LIMITS,
    }
}

/// The host, its desk and queue, and the approver's key.
struct Rig {
    host: Host,
    desk: Desk,
    queue: Queue,
    approver: SigningKey,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("record.aarl");
        let echo: HostHandler = Arc::new(|_: &HostContext, input: &[u8]| Ok(input.to_vec()));
        let host = aegis_benches::host_builder(dir.path(), POLICY, Some(&record))
            .tool(host_tool("echo"))
            .tool(host_tool("guarded"))
            .handler("echo", echo.clone())
            .handler("guarded", echo)
            .open()
            .unwrap();
        let queue_dir: PathBuf = dir.path().join("approvals");
        let queue = Queue::open(&queue_dir).unwrap();
        let desk = Desk::new(
            Some(queue_dir),
            Front::Run,
            record.display().to_string(),
            None,
        );
        Rig {
            host,
            desk,
            queue,
            approver: SigningKey::from_seed(APPROVER_SEED),
            _dir: dir,
        }
    }

    /// Calls `guarded`, which the policy parks, and files the park.
    fn park(&self) -> Ticket {
        let parked = self.host.call(&request("guarded")).unwrap();
        assert_eq!(parked.class(), CallClass::PendingApproval);
        self.desk
            .file(&self.host, &parked, Some(ARGUMENTS))
            .unwrap()
    }

    /// What `aegis approvals approve` places: the park's scope, signed.
    fn approval(&self, ticket: &Ticket) -> DecisionFile {
        let verdict = DecisionVerdict::Approved {
            scope: ticket.scope.clone(),
        };
        DecisionFile {
            approver: aegis_record::approval::sign(&self.approver, &ticket.approval_id, &verdict),
            approval_id: ticket.approval_id.clone(),
            verdict,
            decided_at: aegis_record::time::now(),
        }
    }

    /// One park, approved and resumed; the spans from just before the decision.
    fn resume_once(&self) -> Spans {
        let ticket = self.park();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let spans = std::thread::scope(|s| {
            s.spawn(|| {
                ready_tx.send(this_thread()).unwrap();
                let approval = self
                    .desk
                    .settle(&self.host, &ticket, KEEP_ALIVE, &mut || {})
                    .expect("the approval is honoured");
                let settled = Instant::now();
                let resumed = CallRequest {
                    approval: Some(&approval),
                    ..request("guarded")
                };
                let mut call = self.host.pipeline().begin(&resumed).unwrap();
                let grant = call.authorize().expect("the approval lets it through");
                let started = Instant::now();
                let executed = self.host.run_tool(&resumed, &grant);
                let record = call.finish(executed).unwrap();
                let done = Instant::now();
                assert_eq!(record.class(), CallClass::Success);
                assert_eq!(record.output.as_deref(), Some(ARGUMENTS.as_bytes()));
                assert_eq!(
                    record.outcome.decision_axes.approval_ref.as_deref(),
                    Some(ticket.approval_id.as_str())
                );
                done_tx.send((settled, started, done)).unwrap();
            });
            until_polling(&ready_rx.recv().unwrap());
            let decision = self.approval(&ticket);
            let before = Instant::now();
            self.queue.decide(&decision).unwrap();
            let decided = Instant::now();
            let (settled, started, done) = done_rx.recv().unwrap();
            Spans {
                decided: decided - before,
                settled: settled - before,
                started: started - before,
                done: done - before,
            }
        });
        // Settled and used: removed, so later filings do not list a growing queue.
        self.queue.remove(&ticket.approval_id).unwrap();
        spans
    }
}

/// One resume, each span from just before `Queue::decide`.
#[derive(Clone, Copy, Debug)]
struct Spans {
    /// `decide` returned (main thread).
    decided: Duration,
    /// `settle` returned the approval (the waiting thread).
    settled: Duration,
    /// The resumed call's intent is recorded and its grant minted; the tool is next.
    started: Duration,
    /// The resumed call's outcome is recorded and its output back.
    done: Duration,
}

/// Which of the [`Spans`] an id reports to criterion.
type Span = fn(&Spans) -> Duration;

/// The calling thread's id, as `/proc/self/task` names it.
fn this_thread() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(link.file_name()?.to_str()?.to_owned())
}

/// The system call numbers `Queue::wait` can sleep in (`poll`, `ppoll`).
#[cfg(target_arch = "x86_64")]
const POLL_CALLS: &[&str] = &["7", "271"];
#[cfg(target_arch = "aarch64")]
const POLL_CALLS: &[&str] = &["73"];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const POLL_CALLS: &[&str] = &[];

/// The most read of a thread's `/proc/…/syscall` line (a few dozen bytes).
const PROC_FILE: aegis_files::Cap = aegis_files::Cap::new(4096, "a thread's /proc syscall file");

/// Waits until thread `tid` sleeps in `poll` (so `settle` is waiting on its inotify
/// watch and the decision wakes it, rather than being found on its first look). Where
/// `/proc` cannot say, waits 20 ms instead.
fn until_polling(tid: &Option<String>) {
    let Some(tid) = tid.as_deref().filter(|_| !POLL_CALLS.is_empty()) else {
        std::thread::sleep(Duration::from_millis(20));
        return;
    };
    let path = format!("/proc/self/task/{tid}/syscall");
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        // Bounded and never through a link, as every read in this tree.
        let now =
            aegis_files::read_to_string(std::path::Path::new(&path), PROC_FILE).unwrap_or_default();
        if now
            .split(' ')
            .next()
            .is_some_and(|nr| POLL_CALLS.contains(&nr))
        {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "settle never slept in poll: {now}"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Prints the median, 95th percentile and maximum of each span.
fn report(id: &str, all: &[Spans]) {
    if all.is_empty() {
        // Filtered out, or a mode that runs nothing timed.
        return;
    }
    let at = |f: fn(&Spans) -> Duration| {
        let mut v: Vec<Duration> = all.iter().map(f).collect();
        v.sort();
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        format!("{:.2?} / {:.2?} / {:.2?}", q(0.5), q(0.95), v[v.len() - 1])
    };
    eprintln!(
        "{id}: {} iterations; median / p95 / max from just before decide to:\n  \
         decide returned   {}\n  settle returned   {}\n  tool starting     {}\n  \
         outcome recorded  {}",
        all.len(),
        at(|s| s.decided),
        at(|s| s.settled),
        at(|s| s.started),
        at(|s| s.done),
    );
}

fn approvals(c: &mut Criterion) {
    let rig = Rig::new();
    // Both paths must do what they claim before anything is timed.
    assert_eq!(
        rig.host.call(&request("echo")).unwrap().class(),
        CallClass::Success
    );
    rig.resume_once();

    let mut g = c.benchmark_group("approvals");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("bare_call", |b| {
        b.iter(|| black_box(rig.host.call(&request("echo")).unwrap()))
    });
    let resumes: [(&str, Span); 2] = [
        ("decision_to_resume", |s| s.started),
        ("decision_to_resume_and_done", |s| s.done),
    ];
    for (id, span) in resumes {
        let seen = RefCell::new(Vec::new());
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let spans = rig.resume_once();
                    total += span(&spans);
                    seen.borrow_mut().push(spans);
                }
                total
            })
        });
        report(id, &seen.borrow());
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    approvals(&mut c);
}

criterion_main!(benches);
