//! `aegis recheck`'s throughput over a 100,000-call record: the replay alone
//! (`aegis_runtime::recheck::recheck`: read every line, pair intents with outcomes,
//! ask the built-in YAML station about each call), and the verify that the command runs
//! first plus the replay, in calls per second.
//!
//! Run with `cargo bench -p aegis-benches --bench recheck`; results in
//! `benches/results/pipeline.md` ("recheck").
//!
//! The record is written before timing by the record crate's writer (signed, closed),
//! not by running 100,000 tools; its calls rotate over the classes of
//! `aegis_benches::outcome` (allowed, refused, rate-limited, refused a capability,
//! trapped). The fixture is checked before the loop: it verifies, and the replay
//! decides every call (none undecidable), so a bench cannot time a short cut.

use aegis_benches::{bench_key, intent, outcome};
use aegis_record::json::Object;
use aegis_record::{Options, Session, VecSink};
use aegis_runtime::recheck::{Counts, recheck};
use aegis_runtime::{PluginSpec, Registry};
use criterion::{Criterion, SamplingMode, Throughput, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// Calls in the record.
const CALLS: u64 = 100_000;

/// The policy replayed: a rule for every tool the fixture calls, one of them a rate
/// limit wide enough never to run out, so every call is decided.
const POLICY: &str = "\
version: 1
default: deny
rules:
  - id: allow-notes
    action: allow
    tool: read-notes
  - id: no-shell
    action: deny
    tool: shell
  - id: search-metered
    action: rate_limit
    tool: search
    rate: { max: 1000000, per_seconds: 60 }
  - id: fetch
    action: allow
    tool: fetch
";

/// A closed session of `calls` intent + outcome pairs, from the real writer, whose open
/// line names this host (as `aegis` writes it) so a call's unstated role means none.
fn record(calls: u64) -> Vec<u8> {
    let sink = VecSink::new();
    let mut provenance = Object::new();
    provenance.insert("aegis_version", env!("CARGO_PKG_VERSION"));
    let mut open = Object::new();
    open.insert("provenance", provenance);
    let session = Session::open(Arc::new(sink.clone()), bench_key(), None, open).expect("open");
    for i in 0..calls {
        session.append_unsigned(&intent(i)).expect("intent");
        session.append(&outcome(i)).expect("outcome");
    }
    session.close().expect("close");
    sink.contents()
}

fn benches() {
    let mut c = Criterion::default().configure_from_args();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    let station = Registry::new()
        .resolve(&PluginSpec::parse("builtin:policy-yaml"), None)
        .unwrap()
        .policy_evaluator(&format!("path = {:?}", path.display().to_string()))
        .unwrap();
    let bytes = record(CALLS);
    let options = Options {
        trust: None,
        threads: 0,
        approvers: None,
    };
    let report = aegis_record::verify(bytes.as_slice(), &options).unwrap();
    assert!(
        matches!(report.verdict(), aegis_record::Verdict::Verified(_)),
        "{}",
        report.headline()
    );
    let counts = recheck(&bytes, &station).unwrap().counts();
    assert_eq!(counts.undecidable, 0, "every call is decided: {counts:?}");
    assert_eq!(counts.unchanged + counts.changed, CALLS);
    let Counts { changed, .. } = counts;
    assert!(changed > 0, "the policy changes some calls");

    let mut g = c.benchmark_group("recheck");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(CALLS));
    g.bench_function("replay_100k", |b| {
        b.iter(|| black_box(recheck(black_box(&bytes), &station).unwrap()))
    });
    g.bench_function("verify_and_replay_100k", |b| {
        b.iter(|| {
            let report = aegis_record::verify(black_box(bytes.as_slice()), &options).unwrap();
            black_box(report);
            black_box(recheck(black_box(&bytes), &station).unwrap())
        })
    });
    g.finish();
}

criterion_main!(benches);
