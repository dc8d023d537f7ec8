//! The follower on every committed record vector: fed one line at a time, all at once,
//! or a few lines at a time, it reports what `verify` reports for the same bytes.

mod support;

use aegis_record::verify::{Follower, Options, Step, Tampered, Verdict, verify};
use aegis_record::{LineHash, SigningKey, seal};

fn follow(bytes: &[u8], chunk: usize) -> (aegis_record::Report, Vec<Step>) {
    let all: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    let (complete, partial) = match all.last() {
        Some(last) if !last.ends_with(b"\n") => (&all[..all.len() - 1], Some(*last)),
        _ => (&all[..], None),
    };
    let mut follower = Follower::new(&Options::default());
    let mut steps = Vec::new();
    for lines in complete.chunks(chunk) {
        steps.extend(follower.push_lines(lines));
    }
    (follower.finish(partial), steps)
}

#[test]
fn every_vector_follows_to_the_report_verify_gives() {
    let mut seen = 0;
    for dir in ["golden", "verified", "indeterminate", "tampered"] {
        let dir = support::vectors_dir().join(dir);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "aarl") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let whole = verify(&bytes[..], &Options::default()).unwrap();
            for chunk in [1, 3, usize::MAX] {
                let (report, _) = follow(&bytes, chunk);
                assert_eq!(report, whole, "{} in chunks of {chunk}", path.display());
            }
            // Midway, the report is the one the bytes pushed so far get.
            let mut follower = Follower::new(&Options::default());
            let mut end = 0;
            for line in bytes.split_inclusive(|&b| b == b'\n') {
                if !line.ends_with(b"\n") {
                    break;
                }
                follower.push_line(line);
                end += line.len();
                let prefix = verify(&bytes[..end], &Options::default()).unwrap();
                assert_eq!(
                    follower.report(),
                    prefix,
                    "{} to byte {end}",
                    path.display()
                );
            }
            seen += 1;
        }
    }
    assert!(seen > 20, "only {seen} vectors found");
}

/// A line that is not JSON is held, not judged: nothing after it means a torn final
/// line (Indeterminate), a line after it makes it malformed (Tampered) — as the
/// whole-file walk judges the same bytes.
#[test]
fn an_unparsable_line_waits_for_what_follows() {
    let key = SigningKey::from_seed([7; 32]);
    let mut open = aegis_record::json::Object::new();
    open.insert("public_key", key.public_key());
    let first = seal("open", open, 0, LineHash::GENESIS, Some(&key))
        .unwrap()
        .bytes;
    let mut follower = Follower::new(&Options::default());
    assert!(matches!(
        follower.push_line(&first)[..],
        [Step::Accepted { line: 1, .. }]
    ));
    assert_eq!(follower.push_line(b"{\"torn"), [Step::Held { line: 2 }]);
    assert_eq!(follower.push_line(b"  \n"), [Step::Blank { line: 3 }]);
    let steps = follower.push_line(b"{}\n");
    assert!(
        matches!(
            &steps[..],
            [Step::Tampered(Tampered::Malformed { line: 2, .. })]
        ),
        "{steps:?}"
    );
    // Stopped: it reads nothing more.
    assert_eq!(follower.push_line(&first), steps);

    let mut follower = Follower::new(&Options::default());
    follower.push_line(&first);
    follower.push_line(b"{\"torn\n");
    let report = follower.finish(None);
    assert!(
        matches!(report.verdict(), Verdict::Indeterminate(_)),
        "{}",
        report.headline()
    );
}

/// A signed line whose signature does not verify is never accepted, pushed alone.
#[test]
fn a_bad_signature_stops_the_follower_at_its_line() {
    let key = SigningKey::from_seed([7; 32]);
    let mut open = aegis_record::json::Object::new();
    open.insert("public_key", key.public_key());
    let first = seal("open", open, 0, LineHash::GENESIS, Some(&key))
        .unwrap()
        .bytes;
    let mut bad = seal(
        "attestation",
        aegis_record::json::Object::new(),
        1,
        LineHash::of_line(&first),
        Some(&key),
    )
    .unwrap()
    .bytes;
    let at = bad
        .windows(13)
        .position(|w| w == b"\"signature\":\"")
        .unwrap()
        + 13;
    bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
    let mut follower = Follower::new(&Options::default());
    follower.push_line(&first);
    let steps = follower.push_line(&bad);
    assert!(
        matches!(
            &steps[..],
            [Step::Tampered(Tampered::BadSignature { line: 2, .. })]
        ),
        "{steps:?}"
    );
    assert!(follower.tampered().is_some());
}

/// A line longer than the verifier reads is malformed as soon as it is pushed, as the
/// whole-file walk finds it, whether or not its newline has come.
#[test]
fn an_oversize_line_is_malformed() {
    let long = vec![b'x'; aegis_record::verify::MAX_LINE_BYTES + 1];
    for line in [long.clone(), [long.clone(), b"\n".to_vec()].concat()] {
        let mut follower = Follower::new(&Options::default());
        let steps = follower.push_line(&line);
        assert!(
            matches!(
                &steps[..],
                [Step::Tampered(Tampered::Malformed { line: 1, .. })]
            ),
            "{steps:?}"
        );
        let whole = verify(&line[..], &Options::default()).unwrap();
        assert_eq!(follower.finish(None), whole);
    }
}
