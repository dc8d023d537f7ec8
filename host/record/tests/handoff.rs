//! Key hand-off: the writer switches keys with the line that announces it, the walk
//! checks every later line under the next key (in batches as line by line), trust
//! passes only through a hand-off from a trusted key, and a change of key that no
//! hand-off announced is named as such.

mod support;

use aegis_record::json::Object;
use aegis_record::line::LineBody;
use aegis_record::verify::{
    KeyChangeKind, Options, Report, Tampered, TrustAnchor, Verdict, verify, verify_line_by_line,
};
use aegis_record::*;
use proptest::prelude::*;
use std::sync::Arc;
use support::vectors::{key, outsider, rotated};

fn outcome(id: &str) -> OutcomeLine {
    support::unrun_outcome(id, "echo")
}

fn check(bytes: &[u8], trust: Option<&[&SigningKey]>) -> Report {
    let trust = trust.map(|keys| keys.iter().map(|k| k.public_key().into()).collect());
    verify(
        bytes,
        &Options {
            trust,
            threads: 2,
            approvers: None,
        },
    )
    .unwrap()
}

fn anchors(keys: &[&SigningKey]) -> Vec<TrustAnchor> {
    keys.iter().map(|k| k.public_key().into()).collect()
}

/// One session: `before` calls under `from`, a hand-off to `to`, `after` calls, close.
fn handoff_session(
    sink: &VecSink,
    from: SigningKey,
    to: &SigningKey,
    prev: Option<LineHash>,
    before: usize,
    after: usize,
) -> LineHash {
    let s = Session::open(Arc::new(sink.clone()), from, prev, Object::new()).unwrap();
    for i in 0..before {
        let id = format!("b{i}");
        s.append_unsigned(&support::intent_for(&id, "echo"))
            .unwrap();
        s.append(&outcome(&id)).unwrap();
    }
    s.hand_off(to.clone()).unwrap();
    assert_eq!(s.key_id(), to.key_id());
    for i in 0..after {
        let id = format!("a{i}");
        s.append_unsigned(&support::intent_for(&id, "echo"))
            .unwrap();
        s.append(&outcome(&id)).unwrap();
    }
    s.close().unwrap()
}

fn plain_session(sink: &VecSink, k: SigningKey, prev: Option<LineHash>) -> LineHash {
    let s = Session::open(Arc::new(sink.clone()), k, prev, Object::new()).unwrap();
    s.append(&outcome("plain")).unwrap();
    s.close().unwrap()
}

#[test]
fn a_handoff_written_by_the_writer_verifies_and_is_named() {
    let (k, r) = (key(), rotated());
    let sink = VecSink::new();
    let tail = handoff_session(&sink, k.clone(), &r, None, 1, 1);
    plain_session(&sink, r.clone(), Some(tail));
    let report = check(&sink.contents(), None);
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert_eq!(report.keys(), &[k.key_id(), r.key_id()]);
    let kinds: Vec<_> = report.key_changes().iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        vec![
            KeyChangeKind::Handoff,
            KeyChangeKind::Continues {
                handoff_at: Position { session: 0, seq: 3 }
            }
        ]
    );
    for c in report.key_changes() {
        assert_eq!((c.from, c.to), (k.key_id(), r.key_id()));
    }
    assert!(report.trusted_through_handoff().is_empty(), "unpinned");
    assert!(report.to_text().contains(&format!(
        "key_handoff session 0 seq 3 from {} to {}\n",
        k.key_id(),
        r.key_id()
    )));
}

/// The writer refuses a hand-off to the key in force and writes nothing.
#[test]
fn the_writer_refuses_a_handoff_to_the_same_key() {
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    let before = sink.contents();
    assert!(matches!(s.hand_off(key()), Err(WriteError::SameKey)));
    assert_eq!(sink.contents(), before);
    s.close().unwrap();
    assert!(matches!(
        check(&sink.contents(), None).verdict(),
        Verdict::Verified(_)
    ));
}

/// A sink that refuses one append: a hand-off it refused never took effect, so the
/// session goes on under the old key and the file stays coherent (a seq gap).
struct RefuseOnce {
    inner: VecSink,
    refuse_at: std::sync::atomic::AtomicUsize,
}

impl LineSink for RefuseOnce {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.refuse_at.fetch_sub(1, Ordering::SeqCst) == 1 {
            return Err(std::io::Error::other("refused"));
        }
        self.inner.append(line)
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_refused_handoff_leaves_the_old_key_in_force() {
    let inner = VecSink::new();
    let sink = Arc::new(RefuseOnce {
        inner: inner.clone(),
        refuse_at: 2.into(),
    });
    let s = Session::open(sink, key(), None, Object::new()).unwrap();
    assert!(matches!(
        s.hand_off(rotated()),
        Err(WriteError::Append { .. })
    ));
    assert_eq!(s.key_id(), key().key_id());
    s.append(&outcome("after")).unwrap();
    s.close().unwrap();
    let report = check(&inner.contents(), None);
    // The refused seq is a gap; no line is signed by a key the file never named.
    assert!(
        matches!(report.verdict(), Verdict::Indeterminate(_)),
        "{}",
        report.headline()
    );
    assert!(report.key_changes().is_empty());
}

/// Threads appending while another hands off: every line lands signed by the key in
/// force when it landed, so the file verifies whatever the interleaving.
#[test]
fn concurrent_appends_around_a_handoff_verify() {
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for c in 0..50 {
                    s.append(&outcome(&format!("t{t}-{c}"))).unwrap();
                }
            });
        }
        let s = &s;
        scope.spawn(move || {
            s.hand_off(rotated()).unwrap();
            s.hand_off(outsider()).unwrap();
        });
    });
    s.close().unwrap();
    let report = check(&sink.contents(), None);
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert_eq!(report.key_changes().len(), 2);
}

#[test]
fn trust_passes_through_handoffs_from_a_trusted_key_only() {
    let (k, r, o) = (key(), rotated(), outsider());
    let sink = VecSink::new();
    let t0 = handoff_session(&sink, k.clone(), &r, None, 1, 0);
    let t1 = handoff_session(&sink, r.clone(), &o, Some(t0), 0, 1);
    plain_session(&sink, o.clone(), Some(t1));
    let file = sink.contents();
    // Pinned to the first key: the others are trusted through the hand-offs, in turn.
    let report = check(&file, Some(&[&k]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
    let via: Vec<_> = report
        .trusted_through_handoff()
        .iter()
        .map(|t| (t.key_id, t.from))
        .collect();
    assert_eq!(
        via,
        vec![(r.key_id(), k.key_id()), (o.key_id(), r.key_id())]
    );
    // Pinned to a later key only: nothing vouches for the first.
    for pin in [&r, &o] {
        let report = check(&file, Some(&[pin]));
        assert!(
            matches!(
                report.verdict(),
                Verdict::Tampered(Tampered::UntrustedKey { line: 1, .. })
            ),
            "{}",
            report.headline()
        );
    }
    // A key the slice holds itself is not listed as trusted through a hand-off.
    let report = check(&file, Some(&[&k, &r]));
    assert_eq!(report.trusted_through_handoff().len(), 1);
    assert_eq!(report.trusted_through_handoff()[0].key_id, o.key_id());
}

/// A hand-off later in the file does not vouch for a session opened before it.
#[test]
fn a_later_handoff_does_not_vouch_for_an_earlier_session() {
    let (k, r) = (key(), rotated());
    let sink = VecSink::new();
    let t0 = plain_session(&sink, r.clone(), None);
    let t1 = plain_session(&sink, k.clone(), Some(t0));
    handoff_session(&sink, k.clone(), &r, Some(t1), 0, 0);
    let report = check(&sink.contents(), Some(&[&k]));
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::UntrustedKey { line: 1, .. })
        ),
        "{}",
        report.headline()
    );
}

/// A session opening with a key no hand-off named: the verdict is what it always was
/// (Verified unpinned; pinned, only if the slice holds the key), and the change is
/// named as unannounced.
#[test]
fn an_unannounced_key_change_keeps_its_verdict_and_is_named() {
    let (k, r, o) = (key(), rotated(), outsider());
    let sink = VecSink::new();
    let t0 = handoff_session(&sink, k.clone(), &r, None, 0, 0);
    plain_session(&sink, o.clone(), Some(t0));
    let file = sink.contents();
    let report = check(&file, None);
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    let last = report.key_changes().last().unwrap();
    assert_eq!(last.kind, KeyChangeKind::Unannounced);
    assert_eq!((last.from, last.to), (r.key_id(), o.key_id()));
    assert!(report.to_text().contains(&format!(
        "key_unannounced session 1 from {} to {} (not the key the latest key_handoff names)\n",
        r.key_id(),
        o.key_id()
    )));
    let report = check(&file, Some(&[&k]));
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::UntrustedKey { .. })
        ),
        "{}",
        report.headline()
    );
    // Tampered: no key changes are listed (a Tampered file is evidence of nothing).
    assert!(report.key_changes().is_empty());
    let report = check(&file, Some(&[&k, &o]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
}

/// Lines sealed by hand: open under `k`, then `n` outcomes, a hand-off from `k` to `r`
/// after `h` of them, then a close under `r`; the signed line at index `wrong` (0 is
/// the open) is signed by the key that is *not* in force there.
fn sealed_file(n: usize, h: usize, wrong: Option<usize>) -> (Vec<u8>, Option<u64>) {
    sealed_file_typed("key_handoff", n, h, wrong)
}

fn sealed_file_typed(
    handoff_type: &str,
    n: usize,
    h: usize,
    wrong: Option<usize>,
) -> (Vec<u8>, Option<u64>) {
    let (k, r) = (key(), rotated());
    let mut out = Vec::new();
    let mut tail = LineHash::GENESIS;
    let mut seq = 0u64;
    let mut push = |ty: &str, body: Object, signer: &SigningKey, out: &mut Vec<u8>| {
        let sealed = seal(ty, body, seq, tail, Some(signer)).unwrap();
        seq += 1;
        tail = sealed.hash;
        out.extend_from_slice(&sealed.bytes);
        out.push(b'\n');
    };
    let signer = |index: usize, in_force: &SigningKey| -> SigningKey {
        let other = if in_force.key_id() == k.key_id() {
            r.clone()
        } else {
            k.clone()
        };
        if wrong == Some(index) {
            other
        } else {
            in_force.clone()
        }
    };
    let mut open = Object::new();
    open.insert("public_key", k.public_key());
    push("open", open, &signer(0, &k), &mut out);
    let mut index = 1;
    for i in 0..n {
        if i == h {
            let body = KeyHandoffLine::to(r.public_key()).to_object();
            push(handoff_type, body, &signer(index, &k), &mut out);
            index += 1;
        }
        let in_force = if i < h { &k } else { &r };
        push(
            "outcome",
            outcome(&format!("c{i}")).to_object(),
            &signer(index, in_force),
            &mut out,
        );
        index += 1;
    }
    let in_force = if h < n { &r } else { &k };
    push("close", Object::new(), &signer(index, in_force), &mut out);
    // The open is line 1; line numbers are index + 1.
    (out, wrong.map(|w| w as u64 + 1))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every signed line must be signed by the key in force at it: the old key after the
    /// hand-off, or the next key before it (the hand-off line included), is
    /// key_mismatch on exactly that line; untouched, the file verifies.
    #[test]
    fn each_line_must_be_signed_by_the_key_in_force(
        n in 1usize..12,
        h_seed in any::<usize>(),
        wrong_seed in any::<usize>(),
        attack in any::<bool>(),
    ) {
        let h = h_seed % n;
        // Signed lines: open, n outcomes, the hand-off, the close.
        let wrong = attack.then_some(wrong_seed % (n + 3));
        let (file, line) = sealed_file(n, h, wrong);
        let report = check(&file, None);
        match line {
            None => prop_assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned)),
            Some(line) => {
                let caught = matches!(
                    report.verdict(),
                    Verdict::Tampered(Tampered::KeyMismatch { line: l, .. }) if *l == line
                );
                prop_assert!(caught, "line {}: {}", line, report.headline());
            }
        }
    }
}

/// What a verifier that does not know the hand-off does with one (spec §12): the same
/// file with the line type spelt as a token this verifier does not define reads as an
/// unknown type, whose signature (the old key's) is checked, and which switches no
/// key, so the first line the next key signed is key_mismatch: never Verified, and no
/// line of the next key accepted as the old key's. Also, an unknown type cannot be
/// used to smuggle in a key change.
#[test]
fn a_verifier_that_does_not_know_the_handoff_never_accepts_the_next_key() {
    let (file, _) = sealed_file_typed("key_handoff_unknown", 3, 1, None);
    let report = check(&file, None);
    // Open (1), outcome (2), hand-off (3), then the first outcome under the next key.
    assert!(
        matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::KeyMismatch { line: 4, .. })
        ),
        "{}",
        report.headline()
    );
    let (file, _) = sealed_file(3, 1, None);
    assert_eq!(
        check(&file, None).verdict(),
        &Verdict::Verified(Trust::Unpinned)
    );
}

/// Enough signed lines to be checked as batches, with hand-offs back and forth among
/// them: the batch path and strict line by line agree, because each queued check
/// carries the key in force at its line. A line signed by the old key after a hand-off,
/// deep in a batch, is caught by both at the same line.
#[test]
fn batches_check_each_line_under_the_key_in_force() {
    let keys = [key(), rotated(), outsider()];
    let build = |corrupt_at: Option<usize>| {
        let sink = VecSink::new();
        let s =
            Session::open(Arc::new(sink.clone()), keys[0].clone(), None, Object::new()).unwrap();
        let mut in_force = 0;
        for i in 0..1500 {
            if i % 400 == 399 {
                in_force = (in_force + 1) % keys.len();
                s.hand_off(keys[in_force].clone()).unwrap();
            }
            s.append(&outcome(&format!("c{i}"))).unwrap();
        }
        s.close().unwrap();
        let mut file = sink.contents();
        if let Some(at) = corrupt_at {
            // Re-sign line `at` (an outcome after the first hand-off) with the key in
            // force before it, keeping the chain: re-seal it and everything after.
            let lines: Vec<&[u8]> = file
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            let mut out = Vec::new();
            let mut tail = LineHash::GENESIS;
            for (i, line) in lines.iter().enumerate() {
                let Ok(aegis_record::json::Value::Object(mut o)) = aegis_record::json::parse(line)
                else {
                    unreachable!()
                };
                if i < at {
                    out.extend_from_slice(line);
                    out.push(b'\n');
                    tail = LineHash::of_line(line);
                    continue;
                }
                let ty = o.get("line_type").unwrap().as_str().unwrap().to_owned();
                let seq = o.get("seq").unwrap().as_int().unwrap();
                let kid = o.get("key_id").map(|v| v.as_str().unwrap().to_owned());
                for m in aegis_record::chain::CHAIN_MEMBERS {
                    o.remove(m);
                }
                let signer = kid.map(|kid| {
                    let written = keys.iter().find(|k| k.key_id().to_hex() == kid).unwrap();
                    if i == at {
                        keys[0].clone()
                    } else {
                        written.clone()
                    }
                });
                let sealed = seal(&ty, o, seq, tail, signer.as_ref()).unwrap();
                tail = sealed.hash;
                out.extend_from_slice(&sealed.bytes);
                out.push(b'\n');
            }
            file = out;
        }
        file
    };
    let options = Options {
        trust: None,
        threads: 3,
        approvers: None,
    };
    let clean = build(None);
    let batched = verify(&clean[..], &options).unwrap();
    assert_eq!(batched.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert_eq!(batched, verify_line_by_line(&clean[..], &options).unwrap());
    // Line 1000 (0-based index 999) is an outcome in force under the second key.
    let bad = build(Some(999));
    let batched = verify(&bad[..], &options).unwrap();
    assert!(
        matches!(
            batched.verdict(),
            Verdict::Tampered(Tampered::KeyMismatch { line: 1000, .. })
        ),
        "{}",
        batched.headline()
    );
    assert_eq!(batched, verify_line_by_line(&bad[..], &options).unwrap());
}

/// The same bytes and slice give the same report, whatever the thread count.
#[test]
fn reports_with_handoffs_do_not_depend_on_threads() {
    let (k, r) = (key(), rotated());
    let sink = VecSink::new();
    let tail = handoff_session(&sink, k.clone(), &r, None, 3, 3);
    plain_session(&sink, r.clone(), Some(tail));
    let file = sink.contents();
    let one = verify(
        &file[..],
        &Options {
            trust: Some(anchors(&[&k])),
            threads: 1,
            approvers: None,
        },
    )
    .unwrap();
    let many = verify(
        &file[..],
        &Options {
            trust: Some(anchors(&[&k])),
            threads: 4,
            approvers: None,
        },
    )
    .unwrap();
    assert_eq!(one, many);
    assert_eq!(one.to_json(), many.to_json());
}

/// The lists are bounded and count what they leave out: 70 hand-offs, each to a fresh
/// key, pinned to the first key alone.
#[test]
fn key_change_lists_are_bounded_and_count_the_rest() {
    let sink = VecSink::new();
    let first = SigningKey::from_seed([1; 32]);
    let s = Session::open(Arc::new(sink.clone()), first.clone(), None, Object::new()).unwrap();
    for i in 0..70u8 {
        let mut seed = [2; 32];
        seed[0] = i;
        s.hand_off(SigningKey::from_seed(seed)).unwrap();
    }
    s.close().unwrap();
    let report = check(&sink.contents(), Some(&[&first]));
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Pinned));
    assert_eq!(report.key_changes().len(), 64);
    assert_eq!(report.key_changes_unlisted(), 6);
    assert_eq!(report.trusted_through_handoff().len(), 64);
    assert_eq!(report.trusted_through_handoff_unlisted(), 6);
    let text = report.to_text();
    assert!(text.contains("key_changes_unlisted 6\n"), "{text}");
    assert!(
        text.contains("trusted_through_handoff_unlisted 6\n"),
        "{text}"
    );
}
