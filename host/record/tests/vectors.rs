//! The committed vectors under `spec/vectors/` are rebuilt from fixed seeds and must match
//! byte for byte; the verifier must give each the verdict written down for it.
//!
//! To regenerate after a deliberate format change: `AEGIS_BLESS=1 cargo test -p
//! aegis-record --test vectors`, then review the diff.

mod support;

use aegis_record::LineHash;
use aegis_record::json::{self, ParseError};
use aegis_record::verify::{Options, TrustAnchor, Verdict, verify};
use support::vectors::{Expect, build};
use support::vectors_dir;

/// Every file the builder makes is committed unchanged, and nothing else is committed
/// beside them (a hand-edited or stale vector fails here).
#[test]
fn committed_vectors_are_byte_reproducible() {
    let built = build();
    let dir = vectors_dir();
    if std::env::var_os("AEGIS_BLESS").is_some() {
        for (rel, bytes) in &built.files {
            let path = dir.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
    }
    for (rel, bytes) in &built.files {
        let committed = std::fs::read(dir.join(rel))
            .unwrap_or_else(|e| panic!("spec/vectors/{rel}: {e} (run with AEGIS_BLESS=1)"));
        if &committed != bytes {
            let at = committed
                .iter()
                .zip(bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(committed.len().min(bytes.len()));
            panic!("spec/vectors/{rel} differs from the rebuilt vector at byte {at}");
        }
    }
    let mut stray = Vec::new();
    collect(&dir, &dir, &mut stray);
    stray.retain(|rel| rel != "README.md" && !built.files.contains_key(rel));
    assert!(
        stray.is_empty(),
        "files the builder does not make: {stray:?}"
    );
}

fn collect(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            out.push(
                path.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
}

fn run(e: &Expect, threads: usize) -> aegis_record::Report {
    let mut trust = None;
    let mut approvers = None;
    let mut args = e.args.iter();
    while let Some(a) = args.next() {
        let slice = match a.as_str() {
            "--key" => &mut trust,
            "--approver-key" => &mut approvers,
            other => panic!("unexpected argument {other}"),
        };
        slice
            .get_or_insert_with(Vec::new)
            .push(TrustAnchor::from_hex(args.next().unwrap()).unwrap());
    }
    let bytes = &build().files[&e.file];
    verify(
        &bytes[..],
        &Options {
            trust,
            threads,
            approvers,
        },
    )
    .unwrap()
}

/// The verifier's headline, in-flight and unfinished lines and exit class match the
/// hand-written table, with one signature thread and with several.
#[test]
fn verifier_agrees_with_every_expected_verdict() {
    let built = build();
    assert!(built.expects.len() >= 30, "the table covers every class");
    for e in &built.expects {
        for threads in [1, 3] {
            let report = run(e, threads);
            assert_eq!(report.headline(), e.headline, "{} {:?}", e.file, e.args);
            let exit = match report.verdict() {
                Verdict::Verified(_) => 0,
                Verdict::Tampered(_) => 1,
                Verdict::Indeterminate(_) => 3,
            };
            assert_eq!(exit, e.exit, "{}", e.file);
            let text = report.to_text();
            let in_flight: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("in_flight"))
                .collect();
            assert_eq!(in_flight, e.in_flight, "{}", e.file);
            let unfinished: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("unfinished"))
                .collect();
            assert_eq!(unfinished, e.unfinished, "{}", e.file);
        }
    }
}

/// Each golden line file hashes to the next line's prev_hash, and the whole-session file
/// is exactly the line files joined with newlines.
#[test]
fn golden_line_files_chain_and_make_up_the_session() {
    let built = build();
    let mut joined = Vec::new();
    let mut prev = LineHash::GENESIS;
    for name in support::vectors::golden_names() {
        let line = &built.files[&format!("golden/{name}.json")];
        let obj = json::parse(line).unwrap();
        let claimed = obj
            .as_object()
            .unwrap()
            .get("prev_hash")
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(claimed, prev.to_hex(), "{name}");
        prev = LineHash::of_line(line);
        if name == "00-open" {
            prev = LineHash::of_line(line);
        }
        joined.extend_from_slice(line);
        joined.push(b'\n');
    }
    assert_eq!(joined, built.files["golden/golden.aarl"]);
}

/// The canonical vectors are fixed points, and every reject is outside the value space.
#[test]
fn canonical_vectors_hold() {
    let built = build();
    for (rel, bytes) in &built.files {
        if rel.starts_with("canonical/reject/") {
            assert!(
                matches!(json::parse(bytes), Err(ParseError::ValueSpace { .. })),
                "{rel} must be refused as a value-space violation"
            );
        } else if rel.ends_with(".canonical.json") {
            assert_eq!(&json::parse(bytes).unwrap().to_canonical(), bytes, "{rel}");
        }
    }
}
