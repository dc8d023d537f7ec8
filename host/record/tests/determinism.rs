//! Same bytes, same report — including when a signature failure is found by a worker
//! thread while the walk has already read further.

use aegis_record::json::Object;
use aegis_record::verify::{Options, Verdict, verify};
use aegis_record::{LineHash, SigningKey, seal};

/// Regression (found while fuzzing): a bad signature early in the file, then more than
/// a batch of signed lines and many sessions with new keys. The walk used to record
/// keys past the deciding line for a timing-dependent distance, so `keys()` and the
/// text report varied between runs of the same bytes.
#[test]
fn regression_report_is_cut_at_the_deciding_line() {
    let first = SigningKey::from_seed([1; 32]);
    let mut file = Vec::new();
    let push = |bytes: &[u8], file: &mut Vec<u8>| {
        file.extend_from_slice(bytes);
        file.push(b'\n');
        LineHash::of_line(bytes)
    };
    let mut open = Object::new();
    open.insert("public_key", first.public_key());
    let mut tail = push(
        &seal("open", open, 0, LineHash::GENESIS, Some(&first))
            .unwrap()
            .bytes,
        &mut file,
    );
    // seq 1: a signed unknown-type line whose signature is wrong.
    let mut bad = seal("attestation", Object::new(), 1, tail, Some(&first))
        .unwrap()
        .bytes;
    let at = bad
        .windows(13)
        .position(|w| w == b"\"signature\":\"")
        .unwrap()
        + 13;
    bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
    tail = push(&bad, &mut file);
    for seq in 2..400 {
        tail = push(
            &seal("attestation", Object::new(), seq, tail, Some(&first))
                .unwrap()
                .bytes,
            &mut file,
        );
    }
    for i in 0..150u8 {
        let key = SigningKey::from_seed([i.wrapping_add(2); 32]);
        let mut open = Object::new();
        open.insert("public_key", key.public_key());
        open.insert("prev_session_tail", tail);
        tail = push(
            &seal("open", open, 0, LineHash::GENESIS, Some(&key))
                .unwrap()
                .bytes,
            &mut file,
        );
    }

    let reference = verify(
        &file[..],
        &Options {
            trust: None,
            threads: 1,
            approvers: None,
        },
    )
    .unwrap();
    assert!(matches!(reference.verdict(), Verdict::Tampered(t) if t.line() == 2));
    assert_eq!(reference.keys(), &[first.key_id()]);
    assert!(reference.findings().is_empty());
    for threads in [1, 2, 4] {
        for _ in 0..10 {
            let again = verify(
                &file[..],
                &Options {
                    trust: None,
                    threads,
                    approvers: None,
                },
            )
            .unwrap();
            assert_eq!(again, reference);
            assert_eq!(again.to_text(), reference.to_text());
            assert_eq!(again.to_json(), reference.to_json());
        }
    }
}
