//! What recording and replaying a call's bound arguments costs (issue 33, item 3), as
//! ratios within one run:
//! - `arguments/read_canonical`: the one-way read and canonical form every call's
//!   arguments already pass (the relay, the pipeline);
//! - `arguments/project_bound`: what recording adds per call: read the same text, take
//!   the binding's names, write their values canonically;
//! - `arguments/decide_live` and `arguments/decide_stated`: one ask under a rule over a
//!   path, with the whole arguments (a live call) and with the recorded projection (a
//!   replay by `aegis recheck`).
//!
//! Results: `benches/results/policy.md`.

use aegis_policy_arguments::binding::Binding;
use aegis_policy_arguments::unambiguous::{canonical_object, canonical_of, read_object};
use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_station_api::IndexedDecision;
use criterion::{Criterion, criterion_main};
use std::hint::black_box;

const POLICY: &str = "version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      path: { under: /data }
  - id: never-secrets
    action: deny
    arguments:
      path: { under: /data/secrets }
";

/// A file tool's call as an MCP client sends it: a path and some content.
const ARGUMENTS: &str = r#"{"content":"a line of text the tool would write, kept off the record","mode":"append","path":"/data/notes/today.md"}"#;

fn arguments(c: &mut Criterion) {
    let mut g = c.benchmark_group("arguments");
    let binding = Binding::from_input_schema(&serde_json::json!({"properties": {
        "path": {"type": "string"}, "mode": {"type": "string"}, "content": {"type": "string"},
    }}));
    assert_eq!(binding.names(), ["path"]);
    g.bench_function("read_canonical", |b| {
        b.iter(|| canonical_object(black_box(ARGUMENTS.as_bytes())).unwrap())
    });
    g.bench_function("project_bound", |b| {
        b.iter(|| {
            let map = read_object(black_box(ARGUMENTS.as_bytes())).unwrap();
            let p = binding.project(&map);
            black_box((p.names, canonical_of(&p.values)))
        })
    });
    let engine = PolicyEngine::new(PolicySet::parse(POLICY, "bench.yaml").unwrap());
    let map = read_object(ARGUMENTS.as_bytes()).unwrap();
    let projection = binding.project(&map);
    let values = canonical_of(&projection.values);
    let known: Vec<&str> = projection.names.iter().map(String::as_str).collect();
    let mut out = [IndexedDecision::default(); 1];
    g.bench_function("decide_live", |b| {
        b.iter(|| {
            let a = engine
                .decide_call(
                    "read_file",
                    [""].into_iter(),
                    "",
                    Some(black_box(ARGUMENTS)),
                    &mut out,
                )
                .unwrap();
            assert!(!a.arguments_needed);
            black_box(a)
        })
    });
    g.bench_function("decide_stated", |b| {
        b.iter(|| {
            let a = engine
                .decide_stated_call(
                    "read_file",
                    [""].into_iter(),
                    "",
                    black_box(&values),
                    &known,
                    &mut out,
                )
                .unwrap();
            assert!(!a.arguments_needed);
            black_box(a)
        })
    });
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    arguments(&mut c);
}

criterion_main!(benches);
