//! `aegis console`'s feed (issue 36): how long a record's backlog takes to reach the
//! page's event list against `aegis verify` of the same bytes, and how long one call
//! appended to a followed record takes to become an event.
//!
//! Run with `cargo bench -p aegis-benches --bench console`; results in
//! `benches/results/console.md`. Group `console`:
//!
//! - `verify_10k`: `aegis_record::verify` (one thread, as the feed judges) of a closed
//!   session of 10,000 calls in a file, read whole: the floor.
//! - `backlog_10k`: `aegis_console::feed::start` over the same file, until the file's
//!   event carries its verdict: every line read, judged (signatures checked), turned
//!   into rows and events, and published. The feed is stopped after each iteration.
//! - `append_to_event`: per iteration, untimed first: a feed following a record a
//!   session is still writing, caught up. Timed: from appending one call (its intent
//!   and signed outcome, written to the file) to its call event being in the feed.
//!   The feed looks at an idle file every 200 ms, so this is mostly that wait.
//!
//! Each id checks what it timed: the backlog's verdict is the verify verdict and every
//! call is an event; each appended call's event names its call id.

use aegis_benches::{bench_key, intent, outcome};
use aegis_console::feed::{self, Feed, Source};
use aegis_record::chain::Session;
use aegis_record::json::Object;
use aegis_record::verify::{Options, verify};
use aegis_test_support::lines::AppendFile;
use criterion::{Criterion, SamplingMode, criterion_main};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Calls in the backlog record.
const CALLS: u64 = 10_000;

fn session(path: &Path) -> Session {
    Session::open(AppendFile::at(path), bench_key(), None, Object::new()).unwrap()
}

/// How many events of `kind` the feed holds.
fn count(feed: &Feed, kind: &str) -> usize {
    let needle = format!("\"kind\":\"{kind}\"");
    feed.since(0, usize::MAX)
        .iter()
        .filter(|e| e.contains(&needle))
        .count()
}

/// Waits (on the feed's own signal) until `done` holds of it.
fn wait(runtime: &tokio::runtime::Runtime, feed: &Feed, done: impl Fn(&Feed) -> bool) {
    let mut changed = feed.subscribe();
    runtime.block_on(async {
        while !done(feed) {
            tokio::time::timeout(Duration::from_secs(60), changed.changed())
                .await
                .expect("the feed stalled")
                .expect("the feed ended");
        }
    });
}

/// The last file event's verdict, once it is not `reading`.
fn judged(feed: &Feed) -> Option<String> {
    let events = feed.since(0, usize::MAX);
    let last = events
        .iter()
        .rev()
        .find(|e| e.contains("\"kind\":\"file\""))?;
    ["unpinned", "verified", "indeterminate", "tampered"]
        .into_iter()
        .find(|v| last.contains(&format!("\"verdict\":\"{v}\"")))
        .map(str::to_owned)
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let backlog = dir.path().join("backlog.aarl");
    let writer = session(&backlog);
    for i in 0..CALLS {
        writer.append_unsigned(&intent(i)).unwrap();
        writer.append(&outcome(i)).unwrap();
    }
    writer.close().unwrap();
    let one_thread = Options {
        trust: None,
        threads: 1,
        approvers: None,
    };
    let bytes = std::fs::read(&backlog).unwrap();
    let report = verify(bytes.as_slice(), &one_thread).unwrap();
    let expected = feed::verdict_of(&report).0;
    assert_eq!(expected, "unpinned", "{}", report.headline());

    let mut g = c.benchmark_group("console");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("verify_10k", |b| {
        b.iter(|| {
            let bytes = std::fs::read(&backlog).unwrap();
            black_box(verify(bytes.as_slice(), &one_thread).unwrap())
        })
    });
    g.bench_function("backlog_10k", |b| {
        b.iter(|| {
            let stop = CancellationToken::new();
            let feed = feed::start(
                Source::File(backlog.clone()),
                None,
                None,
                false,
                stop.clone(),
            )
            .unwrap();
            wait(&runtime, &feed, |f| judged(f).is_some());
            stop.cancel();
            assert_eq!(judged(&feed).as_deref(), Some(expected));
            assert_eq!(count(&feed, "call"), CALLS as usize);
        })
    });

    let growing = dir.path().join("growing.aarl");
    let writer = session(&growing);
    writer.append_unsigned(&intent(0)).unwrap();
    writer.append(&outcome(0)).unwrap();
    let stop = CancellationToken::new();
    let followed = feed::start(
        Source::File(growing.clone()),
        None,
        None,
        false,
        stop.clone(),
    )
    .unwrap();
    wait(&runtime, &followed, |f| count(f, "call") == 1);
    let mut next = 1u64;
    g.sample_size(20);
    g.bench_function("append_to_event", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let i = next;
                next += 1;
                let started = Instant::now();
                writer.append_unsigned(&intent(i)).unwrap();
                writer.append(&outcome(i)).unwrap();
                wait(&runtime, &followed, |f| count(f, "call") == i as usize + 1);
                total += started.elapsed();
                let last = followed.since(0, usize::MAX);
                let call = outcome(i).call_id;
                assert!(
                    last.iter().rev().any(|e| e.contains(&call)),
                    "call {call} not in the feed"
                );
            }
            total
        })
    });
    g.finish();
    stop.cancel();
}

criterion_main!(benches);
