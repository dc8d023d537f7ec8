//! The sink conformance kit: the checks every audit sink runs, built-in or a vendor's,
//! to show that it keeps the promises of [`AuditSink`](aegis_station_api::AuditSink).
//!
//! A sink's author describes how to make and break its store by implementing
//! [`Subject`]; [`run`] then drives the sink through the author-side [`Sink`] trait and
//! returns a [`Report`] naming each check as passed or, with the author's reason, not
//! applicable. A sink loaded as a plugin can be checked through the boundary by wrapping
//! its [`AuditSinkBox`] in [`Boundary`].
//!
//! # Checks
//! - [`Check::Paging`] — byte-exact paging: what `read_lines` returns, page by page at
//!   several page sizes and starts, equals what was appended (newline removed), for
//!   lines from 1 byte to 256 KiB, non-ASCII included; `existing_tail` names the last
//!   line; a durable sink returns the same after it is reopened, and a volatile one
//!   names no location.
//! - [`Check::AllOrNothing`] — an append is stored whole or not at all: a "batch" that
//!   is not exactly one line ending in a newline (none, two, an empty one) is refused and
//!   leaves the store as it was.
//! - [`Check::StickyFailure`] — once a sync has failed, every later append and sync
//!   fails too (Linux may report a lost writeback to one fsync and let the next one
//!   succeed, so a sink that carried on could claim lines it lost); and what the store
//!   holds is whole lines only, a prefix of what was accepted that covers every line a
//!   successful sync promised.
//! - [`Check::TornTail`] — a store whose last line was cut short (a crash mid-write)
//!   reports [`TailKind::TORN`], refuses appends, and never returns a line appended
//!   after the torn one.
//!
//! # Non-guarantees
//! - The kit checks behaviour it can observe through the trait. It cannot see whether
//!   `sync` reached the disk: that is the medium's promise and the author's code review.
//! - A check the subject declares not applicable is not run; the report carries the
//!   reason so a reader can judge it. A durable sink that cannot reopen its store, or
//!   cannot be made to fail, has not shown the corresponding property.
//! - Failures are only as real as the subject makes them. Prefer a real failure of the
//!   medium (a device that refuses `fsync`, a database that refuses the insert) to a
//!   wrapper that returns errors: a wrapper tests the wrapper.

use aegis_station_api::{AuditSinkBox, PluginError, Retention, Sink, Tail, TailKind};
use std::fmt;

/// How a sink's store is made, reopened, torn and broken, for the checks.
///
/// Each method that makes a store makes a new one; [`Subject::reopen`] and
/// [`Subject::tear`] act on the store made last by [`Subject::fresh`]. The kit drops every
/// sink it opened on that store before calling either.
pub trait Subject {
    /// The sink under test.
    type Sink: Sink;

    /// Opens a sink on a new, empty store.
    ///
    /// # Errors
    /// The store cannot be made; the kit reports it as a failure of the check it was in.
    fn fresh(&mut self) -> Result<Self::Sink, PluginError>;

    /// Opens a sink again on the store [`Subject::fresh`] made last, as the next process
    /// would. `None` for a volatile sink, whose store dies with it.
    fn reopen(&mut self) -> Option<Result<Self::Sink, PluginError>>;

    /// Leaves half a line at the end of the store [`Subject::fresh`] made last, as a
    /// crash in the middle of a write would, and returns the bytes it left. With no sink
    /// open on the store.
    ///
    /// # Errors
    /// [`NotApplicable`] when the store cannot hold half a line, with the reason.
    fn tear(&mut self) -> Result<Vec<u8>, NotApplicable>;

    /// Opens a sink on a new store whose medium fails within the next few appends or
    /// syncs ([`MAX_TRIES_BEFORE_FAILURE`]).
    ///
    /// # Errors
    /// [`NotApplicable`] when nothing in the store can fail, with the reason.
    fn failing(&mut self) -> Result<Result<Self::Sink, PluginError>, NotApplicable>;
}

/// How many append-and-sync rounds [`Check::StickyFailure`] waits for the medium of
/// [`Subject::failing`] to fail.
pub const MAX_TRIES_BEFORE_FAILURE: usize = 16;

/// How many appends and syncs after the first failure must fail too.
const TRIES_AFTER_FAILURE: usize = 8;

/// Why a subject cannot run a check. Shown in the [`Report`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotApplicable(pub String);

/// One of the kit's checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Check {
    /// What is read back equals what was appended, across page boundaries.
    Paging,
    /// An append is stored whole or not at all.
    AllOrNothing,
    /// After a failed sync, every later append and sync fails.
    StickyFailure,
    /// A torn last line is reported and never appended to.
    TornTail,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Check::Paging => "byte-exact paging",
            Check::AllOrNothing => "all-or-nothing appends",
            Check::StickyFailure => "sticky failure",
            Check::TornTail => "refusal of a torn tail",
        })
    }
}

/// What became of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The sink kept the promise.
    Passed,
    /// The subject could not run it, for this reason.
    NotApplicable(String),
}

/// The result of [`run`]: every check, in order, with its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Each check and what became of it.
    pub checks: Vec<(Check, Status)>,
}

impl Report {
    /// Whether `check` ran and passed.
    pub fn passed(&self, check: Check) -> bool {
        self.checks
            .iter()
            .any(|(c, s)| *c == check && *s == Status::Passed)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (check, status) in &self.checks {
            match status {
                Status::Passed => writeln!(f, "{check}: passed")?,
                Status::NotApplicable(why) => writeln!(f, "{check}: not applicable: {why}")?,
            }
        }
        Ok(())
    }
}

/// A broken promise: which check, and what the sink did.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{check}: {detail}")]
pub struct Failure {
    /// The check that failed.
    pub check: Check,
    /// What was expected and what the sink did.
    pub detail: String,
}

/// Runs every check against `subject`, stopping at the first broken promise.
///
/// # Errors
/// The first check the sink fails, with what it did.
pub fn run<S: Subject>(subject: &mut S) -> Result<Report, Failure> {
    let mut checks = Vec::new();
    for (check, f) in [
        (
            Check::Paging,
            paging::<S> as fn(&mut S) -> Result<Status, String>,
        ),
        (Check::AllOrNothing, all_or_nothing::<S>),
        (Check::StickyFailure, sticky_failure::<S>),
        (Check::TornTail, torn_tail::<S>),
    ] {
        let status = f(subject).map_err(|detail| Failure { check, detail })?;
        checks.push((check, status));
    }
    Ok(Report { checks })
}

/// The lines the paging check appends: short and long, ASCII and not, each ending in a
/// newline. Deterministic, so a failure names the same line every run.
fn lines() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..300u32 {
        let body = match i % 5 {
            0 => format!("{{\"n\":{i}}}"),
            1 => format!("{{\"n\":{i},\"s\":\"é\u{1f600}\\\"\\\\\"}}"),
            2 => "x".repeat(usize::try_from(i).unwrap_or(0) * 37),
            3 => "y".to_owned(),
            _ => format!("{{\"n\":{i},\"pad\":\"{}\"}}", "z".repeat(4096)),
        };
        out.push(format!("{body}\n").into_bytes());
    }
    // One line longer than any buffer a reader is likely to use.
    out.insert(150, format!("{}\n", "L".repeat(256 * 1024)).into_bytes());
    out
}

fn strip(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

fn open<T>(what: &str, r: Result<T, PluginError>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Everything in the store, read in pages of `page` lines.
fn read_all(sink: &impl Sink, page: u32) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let got = sink
            .read_lines(out.len() as u64, page)
            .map_err(|e| format!("read_lines({}, {page}): {e}", out.len()))?;
        if got.len() > page as usize {
            return Err(format!(
                "read_lines({}, {page}) returned {} lines, more than asked for",
                out.len(),
                got.len()
            ));
        }
        let short = got.len() < page as usize;
        out.extend(got);
        if short || page == 0 {
            return Ok(out);
        }
    }
}

/// Compares what was read with what was expected, naming the first difference.
fn same(context: &str, read: &[Vec<u8>], expected: &[&[u8]]) -> Result<(), String> {
    for (i, (r, e)) in read.iter().zip(expected).enumerate() {
        if r.as_slice() != *e {
            return Err(format!(
                "{context}: line {i} differs ({} bytes read, {} appended)",
                r.len(),
                e.len()
            ));
        }
    }
    if read.len() != expected.len() {
        return Err(format!(
            "{context}: {} lines read, {} appended",
            read.len(),
            expected.len()
        ));
    }
    Ok(())
}

fn tail_is(
    context: &str,
    tail: Result<Tail, PluginError>,
    last: Option<&[u8]>,
) -> Result<(), String> {
    let tail = tail.map_err(|e| format!("{context}: existing_tail: {e}"))?;
    match last {
        None if tail.kind == TailKind::EMPTY => Ok(()),
        Some(l) if tail.kind == TailKind::LINE && tail.line.as_slice() == l => Ok(()),
        _ => Err(format!(
            "{context}: existing_tail is {:?} with {} bytes, expected {}",
            tail.kind,
            tail.line.len(),
            match last {
                None => "EMPTY".to_owned(),
                Some(l) => format!("LINE with the last line's {} bytes", l.len()),
            }
        )),
    }
}

/// Reads back in several page sizes and starts, and compares byte for byte.
fn pages_match(context: &str, sink: &impl Sink, expected: &[&[u8]]) -> Result<(), String> {
    for page in [1, 2, 3, 7, 64, 1000] {
        same(
            &format!("{context}, pages of {page}"),
            &read_all(sink, page)?,
            expected,
        )?;
    }
    // Out of order: forwards, then backwards, then past the end.
    let n = expected.len() as u64;
    for (start, max) in [
        (n / 2, 5),
        (3, 4),
        (n.saturating_sub(2), 10),
        (n, 5),
        (u64::MAX, 5),
        (0, 0),
    ] {
        let got = sink
            .read_lines(start, max)
            .map_err(|e| format!("{context}: read_lines({start}, {max}): {e}"))?;
        let from = usize::try_from(start)
            .unwrap_or(usize::MAX)
            .min(expected.len());
        let to = from.saturating_add(max as usize).min(expected.len());
        same(
            &format!("{context}, read_lines({start}, {max})"),
            &got,
            &expected[from..to],
        )?;
    }
    Ok(())
}

fn paging<S: Subject>(subject: &mut S) -> Result<Status, String> {
    let lines = lines();
    let expected: Vec<&[u8]> = lines.iter().map(|l| strip(l)).collect();
    let sink = open("fresh", subject.fresh())?;
    let durable = sink.retention() == Retention::DURABLE;
    if durable == sink.location().is_empty() {
        return Err(format!(
            "retention {:?} with location {:?}: a durable sink names where its lines go, a volatile one names nothing",
            sink.retention(),
            sink.location()
        ));
    }
    tail_is("empty store", sink.existing_tail(), None)?;
    if !read_all(&sink, 10)?.is_empty() {
        return Err("an empty store returned lines".into());
    }
    for (i, l) in lines.iter().enumerate() {
        sink.append(l)
            .map_err(|e| format!("append of line {i}: {e}"))?;
    }
    sink.sync().map_err(|e| format!("sync: {e}"))?;
    pages_match("after append", &sink, &expected)?;
    tail_is(
        "after append",
        sink.existing_tail(),
        expected.last().copied(),
    )?;
    drop(sink);
    match subject.reopen() {
        None if durable => Err("a durable sink's subject cannot reopen its store".into()),
        None => Ok(Status::Passed),
        Some(again) => {
            let sink = open("reopen", again)?;
            pages_match("after reopen", &sink, &expected)?;
            tail_is(
                "after reopen",
                sink.existing_tail(),
                expected.last().copied(),
            )?;
            // Appending after reopening continues the same store.
            sink.append(b"{\"after\":\"reopen\"}\n")
                .and_then(|()| sink.sync())
                .map_err(|e| format!("append after reopen: {e}"))?;
            let mut more = expected.clone();
            more.push(b"{\"after\":\"reopen\"}");
            pages_match("after reopen and append", &sink, &more)?;
            Ok(Status::Passed)
        }
    }
}

fn all_or_nothing<S: Subject>(subject: &mut S) -> Result<Status, String> {
    let sink = open("fresh", subject.fresh())?;
    sink.append(b"{\"a\":1}\n")
        .map_err(|e| format!("append: {e}"))?;
    let bad: [(&str, &[u8]); 5] = [
        ("no line", b""),
        ("a line without its newline", b"{\"b\":2}"),
        ("two lines in one append", b"{\"b\":2}\n{\"c\":3}\n"),
        ("a line then a blank line", b"{\"b\":2}\n\n"),
        ("a newline then a line", b"\n{\"b\":2}"),
    ];
    for (what, bytes) in bad {
        if sink.append(bytes).is_ok() {
            return Err(format!(
                "{what} was accepted; an append takes exactly one line"
            ));
        }
        same(
            &format!("after refusing {what}"),
            &read_all(&sink, 100)?,
            &[b"{\"a\":1}"],
        )?;
    }
    sink.append(b"{\"b\":2}\n")
        .and_then(|()| sink.sync())
        .map_err(|e| format!("a good append after refused ones: {e}"))?;
    let both: [&[u8]; 2] = [b"{\"a\":1}", b"{\"b\":2}"];
    same("after refusals", &read_all(&sink, 100)?, &both)?;
    tail_is("after refusals", sink.existing_tail(), Some(b"{\"b\":2}"))?;
    drop(sink);
    if let Some(again) = subject.reopen() {
        let sink = open("reopen", again)?;
        same("after reopen", &read_all(&sink, 100)?, &both)?;
    }
    Ok(Status::Passed)
}

fn sticky_failure<S: Subject>(subject: &mut S) -> Result<Status, String> {
    let sink = match subject.failing() {
        Err(NotApplicable(why)) => return Ok(Status::NotApplicable(why)),
        Ok(made) => open("failing", made)?,
    };
    let line = |i: usize| format!("{{\"try\":{i}}}\n").into_bytes();
    let mut attempted = Vec::new();
    // Lines whose append and the sync after it both returned Ok: promised durable.
    let mut synced = 0;
    let mut failed_at = None;
    for i in 0..MAX_TRIES_BEFORE_FAILURE {
        let l = line(i);
        // A failed append alone promises nothing about later ones (the trait lets a
        // sink that cut the partial line back carry on); a failed sync does.
        if sink.append(&l).is_ok() {
            attempted.push(l);
        }
        if sink.sync().is_err() {
            failed_at = Some(i);
            break;
        }
        synced = attempted.len();
    }
    let Some(first) = failed_at else {
        return Err(format!(
            "no sync failed within {MAX_TRIES_BEFORE_FAILURE} appends and syncs on the subject's failing medium"
        ));
    };
    for i in first + 1..first + 1 + TRIES_AFTER_FAILURE {
        if sink.append(&line(i)).is_ok() {
            return Err(format!(
                "an append succeeded after the failure at try {first}"
            ));
        }
        if sink.sync().is_ok() {
            return Err(format!("a sync succeeded after the failure at try {first}"));
        }
    }
    // What is stored, if the store can still be read, is whole lines only: a prefix of
    // what was accepted, covering every line a sync promised.
    if let Ok(stored) = read_all(&sink, 100) {
        let accepted: Vec<&[u8]> = attempted.iter().map(|l| strip(l)).collect();
        if stored.len() > accepted.len() || stored.len() < synced {
            return Err(format!(
                "{} lines stored; expected between {synced} (synced) and {} (accepted)",
                stored.len(),
                accepted.len()
            ));
        }
        same("after the failure", &stored, &accepted[..stored.len()])?;
    }
    Ok(Status::Passed)
}

fn torn_tail<S: Subject>(subject: &mut S) -> Result<Status, String> {
    let sink = open("fresh", subject.fresh())?;
    for l in [&b"{\"a\":1}\n"[..], b"{\"b\":2}\n"] {
        sink.append(l).map_err(|e| format!("append: {e}"))?;
    }
    sink.sync().map_err(|e| format!("sync: {e}"))?;
    drop(sink);
    let half = match subject.tear() {
        Err(NotApplicable(why)) => return Ok(Status::NotApplicable(why)),
        Ok(half) => half,
    };
    let Some(again) = subject.reopen() else {
        return Err("the subject tore a store it cannot reopen".into());
    };
    let sink = open("reopen after tear", again)?;
    let tail = sink
        .existing_tail()
        .map_err(|e| format!("existing_tail of a torn store: {e}"))?;
    if tail.kind != TailKind::TORN {
        return Err(format!(
            "existing_tail of a torn store is {:?}, expected TORN",
            tail.kind
        ));
    }
    if sink.append(b"{\"c\":3}\n").is_ok() {
        return Err("an append to a torn store was accepted".into());
    }
    let stored = read_all(&sink, 100)?;
    let whole: [&[u8]; 2] = [b"{\"a\":1}", b"{\"b\":2}"];
    let with_half: [&[u8]; 3] = [b"{\"a\":1}", b"{\"b\":2}", half.as_slice()];
    if same("", &stored, &whole).is_err() && same("", &stored, &with_half).is_err() {
        return Err(format!(
            "a torn store read back as {} lines; expected the two whole lines, and at most the torn fragment after them",
            stored.len()
        ));
    }
    Ok(Status::Passed)
}

/// A sink across the plugin boundary, seen as an author-side [`Sink`], so the kit can
/// check a loaded plugin (or a module's trait object) exactly as the host calls it.
pub struct Boundary(pub AuditSinkBox);

impl Sink for Boundary {
    fn retention(&self) -> Retention {
        self.0.retention()
    }
    fn location(&self) -> String {
        self.0.location().into()
    }
    fn existing_tail(&self) -> Result<Tail, PluginError> {
        self.0.existing_tail().into_result()
    }
    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        self.0.append(line.into()).into_result()
    }
    fn sync(&self) -> Result<(), PluginError> {
        self.0.sync().into_result()
    }
    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0
            .read_lines(start, max)
            .into_result()
            .map(|pages| pages.into_iter().map(Into::into).collect())
    }
}
