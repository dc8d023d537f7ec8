//! How long building a `Sandbox` takes for a few pool sizes (and without a pool):
//! the part of a cold start that the pool adds. `cargo run --release -p aegis-benches
//! --example pool_startup`.

use aegis_runtime::sandbox::{Options, Sandbox};
use std::time::Instant;

fn main() {
    for calls in [None, Some(1), Some(8), Some(64), Some(256)] {
        let mut best = f64::MAX;
        for _ in 0..20 {
            let t = Instant::now();
            let s = Sandbox::with_options(&Options {
                cache_dir: None,
                concurrent_calls: calls,
            })
            .unwrap();
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            drop(s);
        }
        println!("concurrent_calls {calls:?}: best of 20 {best:.3} ms");
    }
}
