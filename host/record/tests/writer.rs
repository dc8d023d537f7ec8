//! The chain writer under concurrency and failure: never a fork, a gap instead of a
//! lost link, a close on drop, and a stop after a failed sync.

mod support;

use aegis_record::json::Object;
use aegis_record::verify::{Indeterminate, Options, Verdict, verify};
use aegis_record::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use support::vectors::key;

fn intent(id: &str) -> IntentLine {
    support::intent_for(id, "echo")
}

fn outcome(id: &str) -> OutcomeLine {
    support::unrun_outcome(id, "echo")
}

fn verdict(bytes: &[u8]) -> Verdict {
    verify(bytes, &Options::default())
        .unwrap()
        .verdict()
        .clone()
}

/// Eight threads appending to one session produce one unforked chain that verifies,
/// with every intent and outcome present exactly once.
#[test]
fn concurrent_appends_never_fork_the_chain() {
    const THREADS: usize = 8;
    const CALLS: usize = 100;
    let sink = VecSink::new();
    let session = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let session = &session;
            scope.spawn(move || {
                for c in 0..CALLS {
                    let id = format!("t{t}-c{c}");
                    session.append_unsigned(&intent(&id)).unwrap();
                    session.append(&outcome(&id)).unwrap();
                }
            });
        }
    });
    session.close().unwrap();
    let bytes = sink.contents();
    assert_eq!(verdict(&bytes), Verdict::Verified(Trust::Unpinned));
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.lines().count(), 2 + 2 * THREADS * CALLS);
    for t in 0..THREADS {
        for c in 0..CALLS {
            let needle = format!("\"call_id\":\"t{t}-c{c}\"");
            assert_eq!(text.matches(&needle).count(), 2, "{needle}");
        }
    }
}

/// A session dropped during a panic still writes its close line.
#[test]
fn a_panicking_caller_still_closes_the_session() {
    let sink = VecSink::new();
    let writer_sink = sink.clone();
    let result = std::thread::spawn(move || {
        let session = Session::open(Arc::new(writer_sink), key(), None, Object::new()).unwrap();
        session.append_unsigned(&intent("c")).unwrap();
        session.append(&outcome("c")).unwrap();
        panic!("tool handler blew up");
    })
    .join();
    assert!(result.is_err());
    let bytes = sink.contents();
    assert!(String::from_utf8_lossy(&bytes).contains("\"line_type\":\"close\""));
    assert_eq!(verdict(&bytes), Verdict::Verified(Trust::Unpinned));
}

/// A sink whose n-th sync fails.
struct FailingSync {
    inner: VecSink,
    fail_at: usize,
    syncs: AtomicUsize,
}

impl LineSink for FailingSync {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        self.inner.append(line)
    }
    fn sync(&self) -> std::io::Result<()> {
        if self.syncs.fetch_add(1, Ordering::SeqCst) + 1 == self.fail_at {
            Err(std::io::Error::other("EIO"))
        } else {
            Ok(())
        }
    }
}

/// After a failed sync the session refuses every later line (and writes no close), so
/// nothing can chain onto a line whose durability is unknown.
#[test]
fn a_failed_sync_stops_the_session() {
    let inner = VecSink::new();
    let sink = Arc::new(FailingSync {
        inner: inner.clone(),
        fail_at: 3,
        syncs: AtomicUsize::new(0),
    });
    let session = Session::open(sink, key(), None, Object::new()).unwrap();
    session.append_unsigned(&intent("c")).unwrap();
    assert!(matches!(
        session.append(&outcome("c")),
        Err(WriteError::Sync { seq: 2, .. })
    ));
    assert!(matches!(
        session.append_unsigned(&intent("d")),
        Err(WriteError::Poisoned)
    ));
    drop(session);
    let bytes = inner.contents();
    assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 3);
    assert!(matches!(
        verdict(&bytes),
        Verdict::Indeterminate(Indeterminate::UnanchoredTail { .. })
    ));
}

/// The open line carries extension members (provenance), signed like the rest, and may
/// not override a member the chain rule or the open line owns.
#[test]
fn open_line_extensions_are_signed_and_cannot_shadow() {
    let sink = VecSink::new();
    let mut ext = Object::new();
    ext.insert("provenance", {
        let mut p = Object::new();
        p.insert("aegis_version", "0.1.0");
        p
    });
    let s = Session::open(Arc::new(sink.clone()), key(), None, ext).unwrap();
    s.close().unwrap();
    let bytes = sink.contents();
    assert!(
        String::from_utf8_lossy(&bytes).contains("\"provenance\":{\"aegis_version\":\"0.1.0\"}")
    );
    assert_eq!(verdict(&bytes), Verdict::Verified(Trust::Unpinned));
    for reserved in [
        "seq",
        "public_key",
        "signature",
        "prev_session_tail",
        "nonce",
    ] {
        let mut ext = Object::new();
        ext.insert(reserved, "x");
        let err = Session::open(Arc::new(VecSink::new()), key(), None, ext).unwrap_err();
        assert!(matches!(err, WriteError::ReservedMember(m) if m == reserved));
    }
}

/// A later session chains to the earlier one's tail; the pair verifies.
#[test]
fn a_later_session_chains_to_the_stored_tail() {
    let sink = VecSink::new();
    let first = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    let tail = first.close().unwrap();
    let second = Session::open(Arc::new(sink.clone()), key(), Some(tail), Object::new()).unwrap();
    second.close().unwrap();
    let report = verify(&sink.contents()[..], &Options::default()).unwrap();
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert_eq!(report.coverage(), Some(Position { session: 1, seq: 1 }));
    // Starting the second session from the wrong tail is caught.
    let sink = VecSink::new();
    let first = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    first.close().unwrap();
    let wrong = Session::open(
        Arc::new(sink.clone()),
        key(),
        Some(LineHash::GENESIS),
        Object::new(),
    )
    .unwrap();
    wrong.close().unwrap();
    assert!(matches!(verdict(&sink.contents()), Verdict::Tampered(_)));
}

/// Two sessions opened on fresh sinks with the same key and the same extensions still
/// write different open lines: each carries its own random nonce, so a host that names
/// calls by the open line's hash never repeats a call id across records.
#[test]
fn two_fresh_sessions_have_different_open_lines() {
    let open_line = || {
        let sink = VecSink::new();
        let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
        let tail = s.tail();
        s.close().unwrap();
        let bytes = sink.contents();
        assert_eq!(verdict(&bytes), Verdict::Verified(Trust::Unpinned));
        let first = bytes.split(|&b| b == b'\n').next().unwrap().to_vec();
        (first, tail)
    };
    let (a, tail_a) = open_line();
    let (b, tail_b) = open_line();
    assert_ne!(a, b);
    assert_ne!(tail_a, tail_b);
    let nonce = |line: &[u8]| {
        let obj = aegis_record::json::parse(line).unwrap();
        obj.as_object()
            .unwrap()
            .get("nonce")
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(nonce(&a).len(), 32);
    assert_ne!(nonce(&a), nonce(&b));
    // A fixed nonce reproduces the line exactly (what the committed vectors rely on).
    let fixed = || {
        let sink = VecSink::new();
        let s =
            Session::open_with_nonce(Arc::new(sink.clone()), key(), None, Object::new(), [7; 16])
                .unwrap();
        drop(s);
        sink.contents()
    };
    assert_eq!(fixed(), fixed());
}

/// The writer shares the verifier's limits: an open line that would be longer than
/// `MAX_LINE_BYTES` or nest deeper than `MAX_DEPTH` (only caller-supplied extensions can
/// make one) is refused before a seq is consumed, nothing reaches the sink, and a later
/// session on the same sink verifies.
#[test]
fn the_writer_refuses_lines_the_verifier_would_call_malformed() {
    use aegis_record::json::{MAX_DEPTH, Value};
    use aegis_record::verify::MAX_LINE_BYTES;
    let sink = VecSink::new();
    let mut ext = Object::new();
    ext.insert("provenance", "x".repeat(MAX_LINE_BYTES));
    let err = Session::open(Arc::new(sink.clone()), key(), None, ext).unwrap_err();
    assert!(
        matches!(&err, WriteError::Unverifiable { line_type, .. } if line_type == "open"),
        "{err}"
    );
    let mut deep = Value::Array(Vec::new());
    for _ in 0..MAX_DEPTH {
        deep = Value::Array(vec![deep]);
    }
    let mut ext = Object::new();
    ext.insert("provenance", deep);
    let err = Session::open(Arc::new(sink.clone()), key(), None, ext).unwrap_err();
    assert!(matches!(err, WriteError::Unverifiable { .. }), "{err}");
    assert!(sink.contents().is_empty());
    // Exactly at the depth limit is written, and verifies.
    let mut deep = Value::Array(Vec::new());
    for _ in 0..MAX_DEPTH - 2 {
        deep = Value::Array(vec![deep]);
    }
    let mut ext = Object::new();
    ext.insert("provenance", deep);
    Session::open(Arc::new(sink.clone()), key(), None, ext)
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(
        verdict(&sink.contents()),
        Verdict::Verified(Trust::Unpinned)
    );
}
