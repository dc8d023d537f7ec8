//! `aegis log --follow`: a record read as it grows, each line verified before anything
//! it says is shown.
//!
//! The lines go one chunk at a time through [`Judged`] (a `Follower` underneath), which applies `aegis verify`'s
//! per-line rules and checks each signature before saying a line holds; a call's row is
//! printed once its outcome line holds (or, with `no_outcome`, once a close or a new
//! session means it will get none). What is in the file when `log` starts is listed
//! under the verdict of those bytes, as `aegis log` lists it, except that rows come in
//! the order calls finished. A partial last line (no newline yet) is waited for.
//!
//! A record only grows: a file that shrinks below what was read, or whose name now
//! leads elsewhere (removed, replaced, rotated), stops the follow as Tampered. SIGINT
//! and SIGTERM stop it with exit 0 and the verdict of the lines read so far. Standard
//! input is read until it ends, and then judged as `aegis verify` judges it.

use super::{LogArgs, row_listed, session_listed};
use crate::interrupt::Interrupts;
use crate::{CliError, exit, print};
use aegis_calls::{Assembler, Entry, Filter, Judged, Row};
use aegis_files::Grown;
use aegis_record::json::Object;
use aegis_record::text::escape;
use aegis_record::verify::{Options, Position, Report, TrustAnchor, Verdict};
use std::io::Read as _;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// How long to wait before looking again at a file that has not grown.
const POLL: Duration = Duration::from_millis(200);

/// How much is read at once: enough lines that a backlog's signatures are checked in
/// batches.
const CHUNK: usize = 1 << 20;

/// Where the lines come from.
enum Source {
    File(aegis_files::Growing),
    /// Standard input, read on a thread (a read there blocks, and signals must still
    /// be noticed).
    Stdin(Receiver<std::io::Result<Vec<u8>>>),
}

enum Chunk {
    Data(Vec<u8>),
    /// Nothing new yet.
    Idle,
    /// Standard input ended.
    End,
    /// The file no longer is the record that was being read: why.
    Gone(String),
}

impl Source {
    fn open(path: &Path) -> Result<(String, Source), CliError> {
        if path.as_os_str() == "-" {
            let (tx, rx) = std::sync::mpsc::sync_channel(4);
            std::thread::Builder::new()
                .name("aegis-log-stdin".into())
                .spawn(move || {
                    let mut stdin = std::io::stdin().lock();
                    loop {
                        let mut buf = vec![0; CHUNK];
                        // An empty chunk is the end; after it, or an error, the thread ends.
                        let (chunk, last) = match stdin.read(&mut buf) {
                            Ok(n) => {
                                buf.truncate(n);
                                (Ok(buf), n == 0)
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                            Err(e) => (Err(e), true),
                        };
                        if tx.send(chunk).is_err() || last {
                            return;
                        }
                    }
                })
                .map_err(|e| CliError::Unreadable(format!("standard input: {e}")))?;
            return Ok(("standard input".into(), Source::Stdin(rx)));
        }
        let name = escape(&path.display().to_string()).into_owned();
        // The same open as `aegis verify`'s: never through a final link, only a regular
        // file.
        let file = aegis_files::Growing::open(path)
            .map_err(|e| CliError::Unreadable(escape(&e.to_string()).into_owned()))?;
        Ok((name, Source::File(file)))
    }

    fn next(&mut self) -> Result<Chunk, String> {
        match self {
            Source::Stdin(rx) => match rx.recv_timeout(POLL) {
                Ok(Ok(bytes)) if bytes.is_empty() => Ok(Chunk::End),
                Ok(Ok(bytes)) => Ok(Chunk::Data(bytes)),
                Ok(Err(e)) => Err(format!("standard input: {e}")),
                Err(RecvTimeoutError::Timeout) => Ok(Chunk::Idle),
                Err(RecvTimeoutError::Disconnected) => Ok(Chunk::End),
            },
            Source::File(file) => match file.next(CHUNK).map_err(|e| e.to_string())? {
                Grown::Data(bytes) => Ok(Chunk::Data(bytes)),
                Grown::Idle => Ok(Chunk::Idle),
                // A record only grows: for a follow, removed is as gone as replaced.
                Grown::Gone(why) | Grown::Replaced(why) | Grown::Removed(why) => {
                    Ok(Chunk::Gone(why))
                }
            },
        }
    }
}

/// The calls waiting for their outcome, and the rows ready to print.
struct Listing<'a> {
    args: &'a LogArgs,
    keep: Filter,
    calls: Assembler,
    out: Vec<u8>,
}

impl Listing<'_> {
    /// A line the follower accepted, at `at`.
    fn line(&mut self, at: Position, bytes: &[u8]) {
        for entry in self.calls.line(at.session, bytes) {
            match entry {
                Entry::Session(session, opened) => {
                    self.out
                        .extend(session_listed(&opened, session, self.args.record.json))
                }
                Entry::Call(row) => self.emit(&row),
            }
        }
    }

    fn emit(&mut self, row: &Row) {
        if self.keep.keeps(row) {
            self.out.extend(row_listed(row, self.args.record.json));
        }
    }
}

/// Why the follow ended, for its last line.
enum Stopped {
    Signal(String),
    End,
    Tampered,
    Gone(String),
}

pub(super) fn follow(
    args: &LogArgs,
    path: &Path,
    trust: Option<Vec<TrustAnchor>>,
    approvers: Option<Vec<TrustAnchor>>,
) -> Result<u8, CliError> {
    let (name, mut source) = Source::open(path)?;
    let interrupts = Interrupts::install_stop_signals()
        .map_err(|e| CliError::Refused(format!("the signal handlers: {e}")))?;
    let mut judged = Judged::new(&Options {
        trust,
        threads: 0,
        approvers,
    });
    let mut listing = Listing {
        args,
        keep: super::filter(args),
        calls: Assembler::new(),
        out: Vec::new(),
    };
    // What the file held at the start is listed under its verdict, once it is read.
    let mut caught_up = false;
    let stopped = loop {
        if interrupts.token().is_cancelled() {
            let signal = interrupts.token().reason().unwrap_or_default();
            break Stopped::Signal(signal);
        }
        let chunk = source
            .next()
            .map_err(|e| CliError::Unreadable(escape(&e).into_owned()))?;
        match chunk {
            Chunk::Data(bytes) => {
                if judged.push(&bytes, |at, line| listing.line(at, line)) {
                    break Stopped::Tampered;
                }
            }
            Chunk::Idle => {
                if !caught_up {
                    caught_up = true;
                    let rows = std::mem::take(&mut listing.out);
                    header(args, &judged.report(), &mut listing.out);
                    listing.out.extend(rows);
                }
                // Standard input's receive already waited.
                if matches!(source, Source::File { .. }) {
                    std::thread::sleep(POLL);
                }
            }
            Chunk::End => break Stopped::End,
            Chunk::Gone(why) => break Stopped::Gone(why),
        }
        if caught_up && !listing.out.is_empty() {
            print(&listing.out).map_err(|_| CliError::Stdout)?;
            listing.out.clear();
        }
    };
    let report = match stopped {
        Stopped::End => judged.finish(),
        _ => judged.report(),
    };
    if !caught_up {
        // Stopped before the backlog was listed. A Tampered record lists nothing, as
        // `aegis log` lists nothing of one: its last line says why.
        let rows = std::mem::take(&mut listing.out);
        if !matches!(report.verdict(), Verdict::Tampered(_)) {
            header(args, &report, &mut listing.out);
            listing.out.extend(rows);
        }
    }
    let code = match (&stopped, report.verdict()) {
        (Stopped::Signal(_), _) => exit::OK,
        (Stopped::Gone(_), _) | (_, Verdict::Tampered(_)) => aegis_verify::exit::TAMPERED_OR_USAGE,
        (_, Verdict::Verified(_)) => exit::OK,
        (_, Verdict::Indeterminate(_)) => aegis_verify::exit::INDETERMINATE,
    };
    last_line(args, &name, &stopped, &report, &mut listing.out);
    print(&listing.out).map_err(|_| CliError::Stdout)?;
    Ok(code)
}

/// The verdict of what the file held at the start, as `aegis log` prints it.
fn header(args: &LogArgs, report: &Report, out: &mut Vec<u8>) {
    if args.record.json {
        out.extend_from_slice(b"{\"verify\":");
        out.extend(report.to_json());
        out.extend_from_slice(b"}\n");
    } else {
        out.extend(format!("# {}\n", report.headline()).into_bytes());
    }
}

/// Why the follow stopped and the verdict of what was read.
fn last_line(args: &LogArgs, name: &str, stopped: &Stopped, report: &Report, out: &mut Vec<u8>) {
    let (token, text) = match stopped {
        Stopped::Signal(signal) => (
            "signal",
            format!("stopped following {name} ({signal}): {}", report.headline()),
        ),
        Stopped::End => ("end", format!("{name} ended: {}", report.headline())),
        Stopped::Tampered => ("tampered", report.headline()),
        Stopped::Gone(why) => (
            "gone",
            format!("Tampered — {why}: a record only grows; stopped following"),
        ),
    };
    if args.record.json {
        let mut o = Object::new();
        o.insert("stopped", token);
        o.insert("message", text);
        let mut bytes = o.to_canonical();
        // {"message":…,"stopped":…,"verify":<the report>}
        bytes.pop();
        bytes.extend_from_slice(b",\"verify\":");
        bytes.extend(report.to_json());
        bytes.push(b'}');
        out.extend(bytes);
        out.push(b'\n');
    } else {
        out.extend(format!("# {text}\n").into_bytes());
    }
}
