//! The plugin boundary and group commit.
//!
//! - `policy/*`: one evaluation of the same fixed-verdict policy as a plain Rust call, as
//!   a built-in through the station trait object, and from its loaded cdylib. The
//!   differences are the cost of the boundary (target: ≤ 15 ns).
//! - `durable_append/*`: lines appended and made durable through the file sink by 1, 8
//!   and 64 concurrent writers (group commit), against one `fdatasync` per line on a
//!   plain file. Target: ≥ 10× the per-line baseline at 64 writers.

use aegis_test_support as support;

use aegis_policy_static::StaticPolicy;
use aegis_runtime::{Plugin, PluginSpec, Registry};
use aegis_station_api::{Policy as _, Sink as _};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use std::hint::black_box;
use std::io::Write as _;
use std::time::{Duration, Instant};

const CONFIG: &str = "verdict = \"allow\"";

fn policy(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy");
    let req = aegis_benches::policy_request();

    let plain = StaticPolicy::from_config(CONFIG).unwrap();
    g.bench_function("plain_call", |b| {
        b.iter(|| black_box(plain.evaluate(black_box(&req))))
    });

    let builtin = Registry::new()
        .resolve(&PluginSpec::parse("builtin:policy-static"), None)
        .unwrap()
        .policy_evaluator(CONFIG)
        .unwrap();
    g.bench_function("builtin", |b| {
        b.iter(|| black_box(builtin.evaluate(black_box(&req))))
    });

    let loaded = Plugin::load(&support::cdylib("aegis-policy-static-plugin"), None)
        .unwrap()
        .policy_evaluator(CONFIG)
        .unwrap();
    g.bench_function("loaded", |b| {
        b.iter(|| black_box(loaded.evaluate(black_box(&req))))
    });
    g.finish();
}

/// `threads` writers share `iters` durable appends; returns the wall time.
fn group_commit(threads: u64, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let sink = aegis_sink_file::FileSink::open(&dir.path().join("bench.aarl")).unwrap();
    let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(600));
    let per_thread = iters.div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let sink = &sink;
            let line = line.as_bytes();
            s.spawn(move || {
                for _ in 0..per_thread {
                    sink.append(line).unwrap();
                    sink.sync().unwrap();
                }
            });
        }
    });
    start.elapsed()
}

fn fsync_per_line(iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("baseline.aarl"))
        .unwrap();
    let line = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(600));
    let start = Instant::now();
    for _ in 0..iters {
        file.write_all(line.as_bytes()).unwrap();
        file.sync_data().unwrap();
    }
    start.elapsed()
}

fn durable_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("durable_append");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1));
    g.bench_function("fsync_per_line", |b| b.iter_custom(fsync_per_line));
    for writers in [1u64, 8, 64] {
        g.bench_with_input(
            BenchmarkId::new("file_sink_writers", writers),
            &writers,
            |b, &w| b.iter_custom(|iters| group_commit(w, iters.max(w))),
        );
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    policy(&mut c);
    durable_append(&mut c);
}

criterion_main!(benches);
