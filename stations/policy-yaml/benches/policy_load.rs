//! Loading a policy file: parse, validate, hash. Loading was quadratic in the number of
//! rules (a linear duplicate-id scan per rule; 200,000 rules did not load in 30 s); it
//! is one pass now, so the time per rule should stay flat from 1k to 200k rules.
//! Results: `benches/results/policy.md`.

use aegis_policy_yaml::PolicySet;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use std::hint::black_box;

/// `n` rules, one a line, about 65 bytes each (200,000 make 14 MB).
fn policy(n: usize) -> String {
    let mut text = String::with_capacity(n * 64 + 32);
    text.push_str("version: 1\ndefault: deny\nrules:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - {{ id: r{i}, action: allow, tool: t{i}, capability: fs.read }}\n"
        ));
    }
    text
}

fn load(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy_load");
    g.sample_size(10);
    for n in [1_000usize, 10_000, 100_000, 200_000] {
        let text = policy(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, text| {
            b.iter(|| PolicySet::parse(black_box(text), "bench.yaml").expect("parses"));
        });
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    load(&mut c);
}

criterion_main!(benches);
