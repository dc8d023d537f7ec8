//! Property tests: a file written by the chain writer and then changed is never
//! reported Verified, and the verdict depends on the bytes alone.

mod support;

use aegis_record::json::Object;
use aegis_record::json::{self, Value};
use aegis_record::verify::{Follower, Options, Report, Step, Tampered, Verdict, verify};
use aegis_record::*;
use proptest::prelude::*;
use std::sync::Arc;
use support::vectors::key;

#[derive(Clone, Debug)]
struct Call {
    id: String,
    tool: String,
    class: u8,
}

fn outcome(call: &Call) -> OutcomeLine {
    let mut o = support::unrun_outcome(&call.id, &call.tool);
    match call.class % 4 {
        0 => {}
        1 => {
            o.policy = PolicyOutcome::Denied {
                reason: format!("deny {}", call.tool),
            }
        }
        2 => {
            o.policy = PolicyOutcome::PendingApproval {
                approval_id: format!("apr-{}", call.id),
                scope: None,
            }
        }
        _ => {
            o.execution = ExecutionOutcome::Trap {
                message: "unreachable".into(),
            }
        }
    }
    o
}

/// Writes `sessions` closed sessions, each with its calls, through the real writer.
fn write(sessions: &[Vec<Call>]) -> Vec<u8> {
    let sink = VecSink::new();
    let mut tail = None;
    for calls in sessions {
        let s = Session::open(Arc::new(sink.clone()), key(), tail, Object::new()).unwrap();
        for c in calls {
            s.append_unsigned(&support::intent_for(&c.id, &c.tool))
                .unwrap();
            s.append(&outcome(c)).unwrap();
        }
        tail = Some(s.close().unwrap());
    }
    sink.contents()
}

fn check(bytes: &[u8]) -> Report {
    verify(bytes, &Options::default()).unwrap()
}

fn is_verified(r: &Report) -> bool {
    matches!(r.verdict(), Verdict::Verified(_))
}

fn call() -> impl Strategy<Value = Call> {
    // Printable ASCII only, so that every byte change alters what the file says (an
    // escape such as \u001f could be respelled \u001F without changing content).
    ("[a-z0-9-]{1,10}", "[a-z-]{1,8}", any::<u8>()).prop_map(|(id, tool, class)| Call {
        id,
        tool,
        class,
    })
}

fn file() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::collection::vec(call(), 0..4), 1..3).prop_map(|s| write(&s))
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

/// `bytes` fed to a follower `chunk` complete lines at a time, the unfinished last line
/// (if any) given to finish; with every step it took.
fn follow(bytes: &[u8], chunk: usize) -> (Report, Vec<Step>) {
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A follower fed the same bytes, however they are cut into pushes, reports what
    /// the whole-file walk reports; it never accepts a line at or after the line that
    /// decides Tampered, and it says Tampered exactly when the report does (a finding on
    /// the unfinished last line shows only in the report).
    #[test]
    fn a_follower_reports_what_verify_reports(bytes in file(), at in any::<prop::sample::Index>(), to in any::<u8>(), cut in any::<prop::sample::Index>(), chunk in 1usize..5) {
        let mut changed = bytes.clone();
        let i = at.index(changed.len());
        changed[i] = to;
        changed.truncate(cut.index(changed.len() + 1).max(i));
        let whole = check(&changed);
        for chunk in [chunk, usize::MAX] {
            let (report, steps) = follow(&changed, chunk);
            prop_assert_eq!(&report, &whole);
            let said = steps.iter().find_map(|s| match s {
                Step::Tampered(t) => Some(t.clone()),
                _ => None,
            });
            if let Some(t) = &said {
                prop_assert_eq!(whole.verdict(), &Verdict::Tampered(t.clone()));
                prop_assert!(matches!(steps.last(), Some(Step::Tampered(_))));
                let accepted_late = steps.iter().any(|s| matches!(s, Step::Accepted { line, .. } if *line >= t.line()));
                prop_assert!(!accepted_late);
            } else if let Verdict::Tampered(t) = whole.verdict() {
                // Only the unfinished last line, judged at finish, can decide it then:
                // by itself, or by following a line that was held.
                let complete = changed.iter().filter(|&&b| b == b'\n').count() as u64;
                let held = steps.contains(&Step::Held { line: t.line() });
                prop_assert!(t.line() > complete || held, "{}", whole.headline());
            }
        }
    }

    /// The unchanged file verifies: the properties below are not vacuous.
    #[test]
    fn written_files_verify(bytes in file()) {
        prop_assert!(is_verified(&check(&bytes)));
    }

    /// Changing any one byte to any other value is never Verified — except turning the
    /// final newline into other JSON whitespace, which changes no line.
    #[test]
    fn a_single_byte_change_is_never_verified(bytes in file(), at in any::<prop::sample::Index>(), to in any::<u8>()) {
        let i = at.index(bytes.len());
        prop_assume!(bytes[i] != to);
        let final_newline_to_space = i == bytes.len() - 1 && matches!(to, b' ' | b'\t' | b'\r');
        prop_assume!(!final_newline_to_space);
        let mut changed = bytes.clone();
        changed[i] = to;
        prop_assert!(!is_verified(&check(&changed)), "byte {} -> {:#04x}", i, to);
    }

    /// Deleting, duplicating or swapping whole lines is never Verified.
    #[test]
    fn line_edits_are_never_verified(bytes in file(), a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>(), op in 0u8..3) {
        let mut l = lines(&bytes);
        let (i, j) = (a.index(l.len()), b.index(l.len()));
        match op {
            0 => { l.remove(i); }
            1 => { let dup = l[i].clone(); l.insert(j, dup); }
            _ => { prop_assume!(i != j); l.swap(i, j); }
        }
        prop_assert!(!is_verified(&check(&l.concat())));
    }

    /// Cutting a closed file anywhere that removes more than its final newline is never
    /// Verified — except a cut that ends on an earlier session's close line (with or
    /// without its newline), which leaves a shorter file of whole sessions (SPEC §10:
    /// whole trailing sessions can be removed undetected). That cut verifies; no other
    /// does.
    #[test]
    fn truncation_is_never_verified(bytes in file(), at in any::<prop::sample::Index>()) {
        let cut = at.index(bytes.len() - 1);
        let kept = &bytes[..cut];
        // Whole sessions are left when the cut ends on a close line, with or without
        // its newline (a final line needs none).
        let at_session_boundary = kept
            .strip_suffix(b"\n")
            .unwrap_or(kept)
            .rsplit(|&b| b == b'\n')
            .next()
            .is_some_and(|last| {
                let close = b"\"line_type\":\"close\"";
                last.ends_with(b"}") && last.windows(close.len()).any(|w| w == close)
            });
        prop_assert_eq!(is_verified(&check(kept)), at_session_boundary);
    }

    /// Same bytes, same report — whatever the thread count, including for damaged files.
    #[test]
    fn verdicts_are_deterministic(bytes in file(), at in any::<prop::sample::Index>(), to in any::<u8>()) {
        let mut changed = bytes.clone();
        let i = at.index(changed.len());
        changed[i] = to;
        let one = verify(&changed[..], &Options { trust: None, threads: 1, approvers: None }).unwrap();
        let four = verify(&changed[..], &Options { trust: None, threads: 4, approvers: None }).unwrap();
        prop_assert_eq!(&one, &four);
        prop_assert_eq!(one, check(&changed));
    }

    /// A forger without the key edits a signed line and repairs every later link, so
    /// the chain itself holds: the signature, and only it, must catch the edit. Each
    /// edit is either a changed value or one changed signature digit.
    #[test]
    fn relinked_forgeries_are_caught_by_the_signature(bytes in file(), pick in any::<prop::sample::Index>(), digit in 0usize..128, edit_signature in any::<bool>()) {
        let mut objs: Vec<Object> = lines(&bytes)
            .iter()
            .map(|l| match json::parse(l.strip_suffix(b"\n").unwrap()).unwrap() {
                Value::Object(o) => o,
                _ => unreachable!(),
            })
            .collect();
        let signed: Vec<usize> = (0..objs.len()).filter(|&i| objs[i].contains_key("signature")).collect();
        let i = signed[pick.index(signed.len())];
        if edit_signature {
            let mut sig = objs[i].get("signature").unwrap().as_str().unwrap().to_owned().into_bytes();
            sig[digit] = if sig[digit] == b'0' { b'1' } else { b'0' };
            objs[i].insert("signature", String::from_utf8(sig).unwrap());
        } else {
            objs[i].insert("forged_note", "added after signing");
        }
        let mut out = Vec::new();
        let mut prev: Option<LineHash> = None;
        for (j, o) in objs.iter_mut().enumerate() {
            if j > i && let Some(p) = prev {
                if o.get("line_type").unwrap().as_str() == Some("open") {
                    if o.contains_key("prev_session_tail") {
                        o.insert("prev_session_tail", p);
                    }
                } else {
                    o.insert("prev_hash", p);
                }
            }
            let bytes = o.to_canonical();
            prev = Some(LineHash::of_line(&bytes));
            out.extend_from_slice(&bytes);
            out.push(b'\n');
        }
        let report = check(&out);
        let caught = matches!(report.verdict(), Verdict::Tampered(Tampered::BadSignature { line, .. }) if *line == i as u64 + 1);
        prop_assert!(caught, "line {}: {}", i + 1, report.headline());
    }
}
