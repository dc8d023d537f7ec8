//! The verifier is bounded (issue 8, item 5) and never hides a call without an outcome
//! (item 8): generated sources, no giant files.
//!
//! Every source here refuses to give out more than a budget of bytes, so a walk that
//! reads on where it should have stopped fails with an error instead of hanging.

mod support;

use aegis_record::chain::seal;
use aegis_record::json::Object;
use aegis_record::line::LineBody as _;
use aegis_record::verify::{
    InFlight, MAX_ID_BYTES, MAX_LINE_BYTES, MAX_LISTED_CALLS, Options, Tampered, Verdict, verify,
};
use aegis_record::{LineHash, Report, Session, SigningKey, VecSink};
use std::io::{self, Cursor, Read};
use std::sync::Arc;
use support::{intent_for, unrun_outcome};

/// Hands out `inner` but fails once more than `budget` bytes were asked for.
struct Budget<R> {
    inner: R,
    given: u64,
    budget: u64,
}

impl<R: Read> Read for Budget<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.given >= self.budget {
            return Err(io::Error::other("the walk read past its budget"));
        }
        let n = self.inner.read(buf)?;
        self.given += n as u64;
        Ok(n)
    }
}

/// The walk reads in 64 KiB blocks: one line at the limit, plus a block, plus `before`.
fn budget_after(before: usize) -> u64 {
    (before + MAX_LINE_BYTES + 1 + (1 << 16) + 1) as u64
}

fn run(input: impl Read, budget: u64) -> Report {
    let source = Budget {
        inner: input,
        given: 0,
        budget,
    };
    verify(
        source,
        &Options {
            trust: None,
            threads: 2,
            approvers: None,
        },
    )
    .expect("the walk stops within its budget")
}

fn key() -> SigningKey {
    SigningKey::from_seed([0x51; 32])
}

/// An open line, one finished call, and a close: a valid prefix for longer sources.
fn closed_session() -> Vec<u8> {
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    s.append_unsigned(&intent_for("c1", "echo")).unwrap();
    s.append(&unrun_outcome("c1", "echo")).unwrap();
    s.close().unwrap();
    sink.contents()
}

fn oversize_at(report: &Report, line: u64) {
    match report.verdict() {
        Verdict::Tampered(t @ Tampered::Malformed { .. }) => {
            assert_eq!(t.line(), line);
            assert!(t.to_string().contains("longer than 1048576 bytes"), "{t}");
        }
        other => panic!("expected an oversize line at {line}, got {other:?}"),
    }
}

/// `/dev/zero`: one line that never ends. The verdict is decided at the limit + 1.
#[test]
fn an_endless_line_without_newline_is_decided_at_the_limit() {
    oversize_at(&run(io::repeat(0), budget_after(0)), 1);
    oversize_at(&run(io::repeat(b' '), budget_after(0)), 1);
    oversize_at(&run(io::repeat(b'\r'), budget_after(0)), 1);
}

/// A valid session, then a source that never ends (a sparse hole, a stuck pipe).
#[test]
fn an_endless_tail_after_valid_lines_is_decided_at_the_limit() {
    let prefix = closed_session();
    let report = run(
        Cursor::new(prefix.clone()).chain(io::repeat(0)),
        budget_after(prefix.len()),
    );
    oversize_at(&report, 5);
    let c = report.coverage().expect("the session before was signed");
    assert_eq!((c.session, c.seq), (0, 3));
}

/// A huge line in the middle decides the verdict; the walk reads no further than it.
#[test]
fn a_huge_line_in_the_middle_stops_the_walk() {
    let lines = closed_session();
    let mut split = lines.split_inclusive(|&b| b == b'\n');
    let first: Vec<u8> = split.next().unwrap().to_vec();
    let rest: Vec<u8> = split.flatten().copied().collect();
    let huge = vec![b'{'; 3 * MAX_LINE_BYTES];
    let source = Cursor::new(first.clone())
        .chain(Cursor::new(huge))
        .chain(Cursor::new(b"\n".to_vec()))
        .chain(Cursor::new(rest));
    oversize_at(&run(source, budget_after(first.len())), 2);
}

/// The same bytes give the same report, whatever the thread count and however far the
/// walk got: an oversize line's report does not depend on what follows it.
#[test]
fn what_follows_an_oversize_line_does_not_change_the_report() {
    let prefix = closed_session();
    let reports: Vec<Report> = [b'x', b'\n', 0]
        .into_iter()
        .map(|fill| {
            let mut bytes = prefix.clone();
            bytes.extend(vec![b'y'; MAX_LINE_BYTES + 1]);
            run(
                Cursor::new(bytes).chain(io::repeat(fill)),
                budget_after(prefix.len()),
            )
        })
        .collect();
    assert_eq!(reports[0], reports[1]);
    assert_eq!(reports[0], reports[2]);
}

/// Generates an open line and `n` intents on the fly, each with a long call_id, then
/// optionally a close: a file of any length without a file.
struct Intents {
    key: SigningKey,
    n: u64,
    next: u64,
    prev: LineHash,
    close: bool,
    buf: Vec<u8>,
    at: usize,
}

impl Intents {
    fn new(n: u64, close: bool) -> Intents {
        let key = key();
        let mut body = Object::new();
        body.insert("public_key", key.public_key());
        let open = seal("open", body, 0, LineHash::GENESIS, Some(&key)).unwrap();
        let mut buf = open.bytes;
        buf.push(b'\n');
        Intents {
            key,
            n,
            next: 0,
            prev: open.hash,
            close,
            buf,
            at: 0,
        }
    }

    fn call_id(i: u64) -> String {
        // Long, and non-ASCII, so that a cut could land inside a character.
        format!("é{i:08}-{}", "ü".repeat(2000))
    }
}

impl Read for Intents {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
            let seq = self.next + 1;
            let sealed = if self.next < self.n {
                let body = intent_for(&Intents::call_id(self.next), "tool").to_object();
                seal("intent", body, seq, self.prev, None)
            } else if self.next == self.n && self.close {
                seal("close", Object::new(), seq, self.prev, Some(&self.key))
            } else {
                return Ok(0);
            }
            .map_err(io::Error::other)?;
            self.next += 1;
            self.prev = sealed.hash;
            self.buf = sealed.bytes;
            self.buf.push(b'\n');
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn check_cut(calls: &[InFlight]) {
    assert_eq!(calls.len(), MAX_LISTED_CALLS);
    for (i, c) in calls.iter().enumerate() {
        assert_eq!(c.at.seq, i as u64 + 1, "listed in intent order");
        assert!(c.call_id.len() <= MAX_ID_BYTES && c.call_id_truncated);
        assert!(Intents::call_id(i as u64).starts_with(&c.call_id));
        assert!(!c.tool_id_truncated);
    }
}

/// Many calls in flight with long ids: each list names at most MAX_LISTED_CALLS, cut to
/// MAX_ID_BYTES, and counts the rest; the headline counts them all.
#[test]
fn calls_in_flight_are_listed_bounded_and_counted() {
    let n = 3000;
    let report = run(Intents::new(n, false), u64::MAX);
    assert_eq!(
        report.headline(),
        format!("Indeterminate — session 0 does not end with a close record; {n} calls in flight")
    );
    check_cut(report.in_flight());
    assert_eq!(report.in_flight_unlisted(), n - MAX_LISTED_CALLS as u64);
    let text = report.to_text();
    assert!(text.contains(&format!("in_flight_unlisted {}\n", n - 64)));
    assert!(text.contains("call_id \"\\u00e900000000-\\u00fc"));
    assert!(text.contains("\\u00fc…\" tool_id \"tool\"\n"), "{text}");
    let json = String::from_utf8(report.to_json()).unwrap();
    assert!(json.contains(&format!("\"in_flight_unlisted\":{}", n - 64)));

    // The same calls left open at a close are unfinished, and the file verifies.
    let report = run(Intents::new(n, true), u64::MAX);
    assert!(matches!(report.verdict(), Verdict::Verified(_)));
    assert!(report.in_flight().is_empty());
    check_cut(report.unfinished());
    assert_eq!(report.unfinished_unlisted(), n - MAX_LISTED_CALLS as u64);
    assert!(
        report
            .to_text()
            .contains(&format!("unfinished_unlisted {}\n", n - 64))
    );
}

/// An interrupted call in a session that a later session anchored is still named, and
/// so is one left open at a close; the verdict stays Verified. Calls that finished, and
/// a call whose intent was repeated and then finished, are not named.
#[test]
fn calls_without_outcome_in_anchored_sessions_are_named() {
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    s.append_unsigned(&intent_for("done", "echo")).unwrap();
    s.append(&unrun_outcome("done", "echo")).unwrap();
    s.append_unsigned(&intent_for("interrupted", "echo"))
        .unwrap();
    let tail = s.tail();
    std::mem::forget(s); // Ctrl-C: no close
    let s = Session::open(Arc::new(sink.clone()), key(), Some(tail), Object::new()).unwrap();
    s.append_unsigned(&intent_for("again", "echo")).unwrap();
    s.append_unsigned(&intent_for("again", "echo")).unwrap();
    s.append(&unrun_outcome("again", "echo")).unwrap();
    s.append_unsigned(&intent_for("left-at-close", "fetch"))
        .unwrap();
    s.close().unwrap();
    let bytes = sink.contents();
    for threads in [1, 3] {
        let report = verify(
            &bytes[..],
            &Options {
                trust: None,
                threads,
                approvers: None,
            },
        )
        .unwrap();
        assert_eq!(report.headline(), "Verified (unpinned)");
        let named: Vec<(u64, u64, &str)> = report
            .unfinished()
            .iter()
            .map(|c| (c.at.session, c.at.seq, c.call_id.as_str()))
            .collect();
        assert_eq!(
            named,
            [(0, 3, "interrupted"), (1, 4, "left-at-close")],
            "{threads} threads"
        );
        assert!(
            report
                .to_text()
                .contains("unfinished session 0 seq 3 call_id \"interrupted\" tool_id \"echo\"\n")
        );
    }
}
