//! The Model A sandbox: what one tool call costs.
//!
//! - `warm/{pooled,on_demand}/*`: one call to an already prepared component (a fresh
//!   store, WASI context and instance per call, as in production), with instances from
//!   the pool (the default) or mapped per call. `echo` (command shape) with 0, 1 and 4
//!   read roots shows what each preopen adds; `world_reverse` is the WIT-world shape.
//! - `cold/*`: a new `Sandbox`, then prepare and one call: compiling the component in
//!   process (`no_cache`) against loading it from a primed cache directory
//!   (`primed_cache`, pooled; `primed_cache_on_demand` without the pool, to price
//!   reserving it).

use aegis_runtime::capability::{
    DEFAULT_LIMITS, Grant, NarrowingLimits, ToolKind, ToolManifest, ToolRegistry,
};
use aegis_runtime::sandbox::{Ending, Options, Sandbox};
use criterion::{Criterion, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

const INPUT: &[u8] = b"a tool call's input, some tens of bytes long";

fn guest(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/wasm/{name}.wasm"))
}

fn grant(name: &str, read: &[PathBuf]) -> Grant {
    let mut reg = ToolRegistry::new();
    reg.register(ToolManifest {
        id: name.into(),
        kind: ToolKind::Wasm {
            component: guest(name),
        },
        fs_read: read.to_vec(),
        fs_write: vec![],
        net: vec![],
        limits: DEFAULT_LIMITS,
    })
    .unwrap();
    reg.resolve(name, None, &NarrowingLimits::default())
        .unwrap()
}

fn call(sandbox: &Sandbox, name: &str, g: &Grant) {
    let out = sandbox.run(&guest(name), g, black_box(INPUT), &[]).unwrap();
    assert_eq!(out.ending, Ending::Success);
    black_box(out);
}

fn warm(c: &mut Criterion) {
    let roots = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(roots.path()).unwrap();
    let dirs: Vec<PathBuf> = (0..4)
        .map(|i| {
            let d = base.join(format!("root{i}"));
            std::fs::create_dir(&d).unwrap();
            d
        })
        .collect();
    let mut g = c.benchmark_group("warm");
    for (allocation, concurrent_calls) in [
        ("pooled", Options::default().concurrent_calls),
        ("on_demand", None),
    ] {
        let sandbox = Sandbox::with_options(&Options {
            cache_dir: None,
            concurrent_calls,
        })
        .unwrap();
        sandbox.prepare(&guest("echo")).unwrap();
        sandbox.prepare(&guest("world-reverse")).unwrap();
        for n in [0, 1, 4] {
            let echo = grant("echo", &dirs[..n]);
            g.bench_function(format!("{allocation}/echo/roots={n}"), |b| {
                b.iter(|| call(&sandbox, "echo", &echo))
            });
        }
        let reverse = grant("world-reverse", &[]);
        g.bench_function(format!("{allocation}/world_reverse"), |b| {
            b.iter(|| call(&sandbox, "world-reverse", &reverse))
        });
    }
    g.finish();
}

fn cold_call(sandbox: Sandbox, g: &Grant) {
    call(&sandbox, "echo", g);
}

fn cold(c: &mut Criterion) {
    let echo = grant("echo", &[]);
    let mut g = c.benchmark_group("cold");
    g.sample_size(10);
    g.bench_function("echo/no_cache", |b| {
        b.iter(|| cold_call(Sandbox::new().unwrap(), &echo))
    });

    let dir = tempfile::tempdir().unwrap();
    let cache: &Path = &dir.path().join("wasmtime");
    Sandbox::with_cache_dir(cache)
        .unwrap()
        .prepare(&guest("echo"))
        .unwrap();
    g.bench_function("echo/primed_cache", |b| {
        b.iter(|| {
            let sandbox = Sandbox::with_cache_dir(cache).unwrap();
            cold_call(sandbox, &echo)
        })
    });
    g.bench_function("echo/primed_cache_on_demand", |b| {
        b.iter(|| {
            let sandbox = Sandbox::with_options(&Options {
                cache_dir: Some(cache.to_owned()),
                concurrent_calls: None,
            })
            .unwrap();
            cold_call(sandbox, &echo)
        })
    });
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    warm(&mut c);
    cold(&mut c);
}
criterion_main!(benches);
