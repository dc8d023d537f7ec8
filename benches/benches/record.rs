//! Criterion benches for `aegis-record`: canonical JSON, sealing (sign + hash), strict
//! verification, the streaming verifier over a 100,000-line file, and the writer's
//! append path.
//!
//! Run all of them with `cargo bench -p aegis-benches --bench record`; pass a filter after
//! `--` to run some (`-- verify/file_100k`). What each one measures is in
//! `benches/README.md`; measured numbers live in `benches/results/record.md`.
//!
//! Every fixture is built before its timing loop starts, and checked there (the golden
//! outcome reseals byte for byte, signatures verify, the 100k file verifies), so a bench
//! cannot silently time a failing path.

use aegis_benches::{
    GOLDEN_FILE, GOLDEN_OUTCOME, bench_key, chain_file, outcome, parse_object, split_signed_line,
    vector_key,
};
use aegis_record::json;
use aegis_record::key::{VerifyingKey, verify_batch};
use aegis_record::{LineHash, Options, OutcomeLine, Session, Trust, VecSink, Verdict, seal};
use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Signatures in the batches of `verify/batch_N`; 2048 is the walk's batch size.
const BATCH_SIZES: [usize; 3] = [256, 1024, 2048];

/// Lines in the synthetic file of `verify/file_100k`.
const FILE_LINES: u64 = 100_000;

/// How many appends one writer session takes in `append/session_vecsink` before it is
/// replaced (untimed), so the in-memory sink stays small.
const APPENDS_PER_SESSION: u64 = 10_000;

fn unpinned(threads: usize) -> Options {
    Options {
        trust: None,
        threads,
        approvers: None,
    }
}

fn assert_verified(bytes: &[u8], threads: usize) {
    let report = aegis_record::verify(bytes, &unpinned(threads)).expect("read from memory");
    assert_eq!(
        report.verdict(),
        &Verdict::Verified(Trust::Unpinned),
        "fixture must verify: {}",
        report.headline()
    );
}

fn canonicalize(c: &mut Criterion) {
    let mut g = c.benchmark_group("canonicalize");
    g.throughput(Throughput::Bytes(GOLDEN_OUTCOME.len() as u64));
    // The golden line is canonical, so parse + write must give it back unchanged.
    assert_eq!(
        json::parse(GOLDEN_OUTCOME).unwrap().to_canonical(),
        GOLDEN_OUTCOME
    );
    g.bench_function("outcome_line", |b| {
        b.iter(|| {
            let value = json::parse(black_box(GOLDEN_OUTCOME)).expect("canonical line");
            value.to_canonical()
        });
    });
    let object = parse_object(GOLDEN_OUTCOME);
    g.bench_function("object_only", |b| {
        b.iter(|| black_box(&object).to_canonical());
    });
    g.finish();
}

fn sign(c: &mut Criterion) {
    let mut g = c.benchmark_group("sign");
    let key = vector_key();
    let split = split_signed_line(GOLDEN_OUTCOME);
    // seal() of the golden body reproduces the golden line: same bytes, same signature.
    let resealed = seal(
        &split.line_type,
        split.body.clone(),
        split.seq,
        split.prev_hash,
        Some(&key),
    )
    .unwrap();
    assert_eq!(resealed.bytes, GOLDEN_OUTCOME);
    assert_eq!(key.sign(&split.signing_input), split.signature);

    g.bench_function("outcome_line", |b| {
        b.iter_batched(
            || split.body.clone(),
            |body| {
                seal(
                    "outcome",
                    body,
                    black_box(split.seq),
                    split.prev_hash,
                    Some(&key),
                )
                .expect("seal")
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("ed25519_floor", |b| {
        b.iter(|| key.sign(black_box(&split.signing_input)));
    });
    g.finish();
}

fn verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("verify");

    let split = split_signed_line(GOLDEN_OUTCOME);
    let vk = VerifyingKey::new(&vector_key().public_key()).expect("a valid key");
    assert!(vk.verify_strict(&split.signing_input, &split.signature));
    g.bench_function("line_strict", |b| {
        b.iter(|| vk.verify_strict(black_box(&split.signing_input), &split.signature));
    });

    // The same signature n times as one batch: per signature, what the workers pay when
    // a batch passes (compare with line_strict). The walk sends batches of 2048.
    let sig = split.signature;
    for n in BATCH_SIZES {
        let items: Vec<_> = (0..n)
            .map(|_| (&vk, &split.signing_input[..], &sig))
            .collect();
        assert!(verify_batch(&items));
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("batch_{n}"), |b| {
            b.iter(|| verify_batch(black_box(&items)))
        });
    }

    let golden_lines = GOLDEN_FILE.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_verified(GOLDEN_FILE, 1);
    g.throughput(Throughput::Elements(golden_lines));
    // About a millisecond per walk: 100 samples need more than the default 5 s.
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("golden_file_per_line", |b| {
        b.iter(|| aegis_record::verify(black_box(GOLDEN_FILE), &unpinned(1)).expect("read"));
    });

    let built = Instant::now();
    let file = chain_file(FILE_LINES);
    eprintln!(
        "verify/file_100k fixture: {} lines, {} signed, {} bytes, built in {:.2?}",
        file.lines,
        file.signed_lines,
        file.bytes.len(),
        built.elapsed()
    );
    assert_verified(&file.bytes, 0);
    g.throughput(Throughput::Elements(file.lines));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(3));
    // Ten samples of one walk each; a walk takes 1.5 to 3.5 s on a 2-core machine.
    for (threads, seconds) in [(0, 25), (1, 35)] {
        g.measurement_time(Duration::from_secs(seconds));
        g.bench_with_input(
            BenchmarkId::new("file_100k", format!("threads={threads}")),
            &threads,
            |b, &threads| {
                b.iter(|| {
                    aegis_record::verify(black_box(&file.bytes[..]), &unpinned(threads))
                        .expect("read")
                });
            },
        );
    }
    // The reference: the same walk with strict checks line by line, no batches (the
    // verifier before batches), for the ratio within one run.
    g.measurement_time(Duration::from_secs(35));
    g.bench_function("file_100k_line_by_line/threads=0", |b| {
        b.iter(|| {
            aegis_record::verify::verify_line_by_line(black_box(&file.bytes[..]), &unpinned(0))
                .expect("read")
        });
    });
    g.finish();
}

/// What the verifier's main thread does per line, piece by piece, on the golden outcome
/// line. Not a target of its own: it explains where `verify/file_100k` spends its time.
fn walk_parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("walk_parts");
    let object = parse_object(GOLDEN_OUTCOME);
    g.bench_function("parse", |b| {
        b.iter(|| json::parse(black_box(GOLDEN_OUTCOME)).expect("canonical line"));
    });
    g.bench_function("line_hash", |b| {
        b.iter(|| LineHash::of_line(&black_box(&object).to_canonical()));
    });
    g.bench_function("sha256_only", |b| {
        b.iter(|| LineHash::of_line(black_box(GOLDEN_OUTCOME)));
    });
    g.bench_function("signing_input", |b| {
        b.iter(|| {
            let mut message = Vec::with_capacity(512);
            black_box(&object).write_canonical_skipping(Some("signature"), &mut message);
            message
        });
    });
    g.bench_function("outcome_from_object", |b| {
        b.iter(|| OutcomeLine::from_object(black_box(&object)).expect("an outcome"));
    });
    g.finish();
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append");
    let outcomes: Vec<OutcomeLine> = (0..64).map(outcome).collect();
    g.bench_function("session_vecsink", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            let mut done = 0u64;
            while done < iters {
                let n = (iters - done).min(APPENDS_PER_SESSION);
                let sink = VecSink::new();
                let session = Session::open(
                    Arc::new(sink.clone()),
                    bench_key(),
                    None,
                    aegis_record::json::Object::new(),
                )
                .expect("open");
                let start = Instant::now();
                for i in 0..n {
                    let line = &outcomes[((done + i) % 64) as usize];
                    black_box(session.append(black_box(line)).expect("append"));
                }
                timed += start.elapsed();
                done += n;
                // Close and free the sink outside the timed region.
                drop(session);
                drop(sink);
            }
            timed
        });
    });
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    canonicalize(&mut c);
    sign(&mut c);
    verify(&mut c);
    walk_parts(&mut c);
    append(&mut c);
}

criterion_main!(benches);
