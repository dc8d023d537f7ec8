//! Times `verify()` over the synthetic 100,000-line file of `verify/file_100k` without
//! criterion: wall time, process CPU time, lines/s and signed lines/s per walk. It is the
//! easy target for `perf record`, and a quick check between criterion runs.
//!
//! ```sh
//! cargo run --release -p aegis-benches --example verify_file -- [THREADS...] [--reps N] [--file PATH]
//! target/release/examples/verify_file --file /tmp/100k.aarl 0      # builds and saves the file
//! perf record -g target/release/examples/verify_file --file /tmp/100k.aarl 1 --reps 3
//! perf report --no-children --sort pid,symbol   # the walk thread vs the signature workers
//! ```
//!
//! THREADS are `Options::threads` values to try (default `0 1`); each runs `--reps` walks
//! (default 3). With `--file`, the file is read from PATH when it exists and built and
//! saved there otherwise, so a profile of a second run holds no signing from the build.
//! CPU time is read from `/proc/self/stat` and is omitted where that is absent.

use aegis_benches::{ChainFile, chain_file};
use aegis_record::{Options, Trust, Verdict, verify};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Lines in the file, as in `verify/file_100k`.
const FILE_LINES: u64 = 100_000;

/// User + system CPU time of this process so far, from `/proc/self/stat` (Linux).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // Fields 14 and 15 of stat(5) (utime, stime), counted after the name: 11 and 12.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux target Rust supports.
    Some(Duration::from_millis(ticks * 10))
}

fn main() {
    let mut threads = Vec::new();
    let mut reps = 3u32;
    let mut path: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--reps" {
            reps = args
                .next()
                .and_then(|n| n.parse().ok())
                .expect("--reps takes a number");
        } else if arg == "--file" {
            path = Some(PathBuf::from(args.next().expect("--file takes a path")));
        } else {
            threads.push(arg.parse::<usize>().expect("THREADS are numbers"));
        }
    }
    if threads.is_empty() {
        threads = vec![0, 1];
    }

    let started = Instant::now();
    let (file, source) = match &path {
        Some(p) if p.exists() => (
            ChainFile::from_bytes(std::fs::read(p).expect("read --file")),
            format!("read from {}", p.display()),
        ),
        _ => {
            let file = chain_file(FILE_LINES);
            if let Some(p) = &path {
                std::fs::write(p, &file.bytes).expect("write --file");
            }
            (file, "built".to_owned())
        }
    };
    println!(
        "file: {} lines, {} signed, {} bytes, {source} in {:.2?}",
        file.lines,
        file.signed_lines,
        file.bytes.len(),
        started.elapsed()
    );
    for &t in &threads {
        for _ in 0..reps {
            let cpu_before = process_cpu();
            let start = Instant::now();
            let report = verify(
                &file.bytes[..],
                &Options {
                    trust: None,
                    threads: t,
                    approvers: None,
                },
            )
            .expect("read from memory");
            let wall = start.elapsed();
            let cpu = match (cpu_before, process_cpu()) {
                (Some(a), Some(b)) => format!("cpu {:.2?}", b.saturating_sub(a)),
                _ => "cpu n/a".to_owned(),
            };
            assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
            let secs = wall.as_secs_f64();
            println!(
                "threads={t}: wall {wall:.3?}, {cpu}, {:.0} lines/s, {:.0} signed lines/s",
                file.lines as f64 / secs,
                file.signed_lines as f64 / secs
            );
        }
    }
}
