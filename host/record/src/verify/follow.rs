//! The verifier fed one line at a time: for a reader that follows a record as it grows
//! (`aegis log --follow`) and must know each line holds before it shows it.
//!
//! It is the walk [`verify`](super::verify()) runs, with the same per-line rules; only
//! the reading differs. The whole-file walk knows which line is the last and calls a
//! final line that is not JSON torn; a follower cannot know, so it holds such a line
//! until the next line that is not blank comes (the held line is then malformed, as the
//! whole-file walk would find) or the input ends (it is a torn final line). Signatures
//! are checked before [`Follower::push_lines`] returns, on the caller's thread.
//!
//! # Guarantees
//! - For the same bytes, [`Follower::finish`] gives the report [`verify`](super::verify())
//!   gives, however the bytes were cut into pushes.
//! - A [`Step::Accepted`] line parsed, chained onto its session and, when it carries a
//!   signature, that signature verified: nothing before it in the file decides Tampered.
//! - Once a push returns [`Step::Tampered`], the follower reads nothing more.

use super::verdict::{Position, Tampered};
use super::walk::{Walk, decide};
use super::workers::Shared;
use super::{MAX_LINE_BYTES, Options, Report};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

/// What a follower made of one line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// The line chained and, if signed, its signature verified.
    Accepted {
        /// The line's number in the file (1-based, blank lines counted).
        line: u64,
        /// Its session and seq.
        at: Position,
    },
    /// Only whitespace: skipped, as the whole-file walk skips it.
    Blank {
        /// The line's number in the file.
        line: u64,
    },
    /// Not JSON: a torn final line if nothing but blank lines follows, malformed (and
    /// the record Tampered) as soon as another line comes.
    Held {
        /// The line's number in the file.
        line: u64,
    },
    /// The record contradicts itself here (or at an earlier held line); the follower
    /// reads nothing more, and [`Follower::finish`] reports it.
    Tampered(Tampered),
}

/// A verifier fed one complete line at a time.
pub struct Follower {
    walk: Walk,
    shared: Arc<Shared>,
    line_no: u64,
    /// An unparsable line, judged by what comes after it.
    held: Option<(u64, Vec<u8>)>,
    stopped: Option<Tampered>,
}

impl Follower {
    /// A follower with `options` (its `threads` is not used: signatures are checked on
    /// the caller's thread).
    pub fn new(options: &Options) -> Follower {
        let shared = Arc::new(Shared {
            first_failure: Mutex::new(None),
            earliest_line: AtomicU64::new(u64::MAX),
            batches: true,
        });
        Follower {
            walk: Walk::new(options, None, Arc::clone(&shared)),
            shared,
            line_no: 0,
            held: None,
            stopped: None,
        }
    }

    /// The finding that stopped the follower, if one did.
    pub fn tampered(&self) -> Option<&Tampered> {
        self.stopped.as_ref()
    }

    /// [`Follower::push_lines`] for one line.
    pub fn push_line(&mut self, line: &[u8]) -> Vec<Step> {
        self.push_lines(&[line])
    }

    /// Judges complete lines, each with or without its `\n`, in file order; a line
    /// whose content is longer than [`MAX_LINE_BYTES`] is malformed. Returns a step for
    /// each line up to the first Tampered one, which ends the list; after that, every
    /// push returns that finding alone. Pushing many lines at once lets their
    /// signatures be checked as a batch.
    pub fn push_lines(&mut self, lines: &[&[u8]]) -> Vec<Step> {
        if let Some(t) = &self.stopped {
            return vec![Step::Tampered(t.clone())];
        }
        let mut steps = Vec::with_capacity(lines.len());
        let mut stop = None;
        for bytes in lines {
            self.line_no += 1;
            let no = self.line_no;
            let content = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            let oversize = content.len() > MAX_LINE_BYTES;
            if !oversize
                && content
                    .iter()
                    .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            {
                steps.push(Step::Blank { line: no });
                continue;
            }
            if let Some((held_no, held)) = self.held.take() {
                // A line follows, so the held one was not the last: judged as such.
                if let Err(t) = self.walk.line(held_no, &held, false, false) {
                    stop = Some(t);
                    break;
                }
            }
            match self.walk.line(no, content, oversize, true) {
                Ok(Some(at)) => steps.push(Step::Accepted { line: no, at }),
                Ok(None) => {
                    self.held = Some((no, content.to_vec()));
                    steps.push(Step::Held { line: no });
                }
                Err(t) => {
                    stop = Some(t);
                    break;
                }
            }
        }
        // Every queued signature is checked before anything is called accepted.
        self.walk.flush();
        let failure = self
            .shared
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (decided, _) = decide(stop.clone(), failure.as_ref(), None);
        drop(failure);
        if let Some(t) = stop {
            self.walk.stop(t);
        }
        if let Some(t) = decided {
            let cut = t.line();
            steps.retain(|s| match s {
                Step::Accepted { line, .. } | Step::Blank { line } | Step::Held { line } => {
                    *line < cut
                }
                Step::Tampered(_) => false,
            });
            steps.push(Step::Tampered(t.clone()));
            self.stopped = Some(t);
        }
        steps
    }

    /// The report [`verify`](super::verify()) gives the lines pushed so far, as if the
    /// input ended after them; the follower goes on.
    pub fn report(&self) -> Report {
        self.walk.snapshot().into_report(&self.shared)
    }

    /// The report for the lines pushed, and `partial` as the final line when the input
    /// ended without a newline: the report [`verify`](super::verify()) gives the same
    /// bytes.
    pub fn finish(mut self, partial: Option<&[u8]>) -> Report {
        if let Some(p) = partial
            && self.stopped.is_none()
        {
            self.push_lines(&[p]);
        }
        self.walk.finish().into_report(&self.shared)
    }
}
