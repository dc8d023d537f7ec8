//! A growing record's bytes cut into whole lines, each judged before anything it says
//! is used.

use aegis_record::verify::{Follower, MAX_LINE_BYTES, Options, Position, Report, Step};

/// A record read as it grows: bytes in, whole lines out once `aegis verify`'s per-line
/// rules accept them (each signature checked). A partial last line is kept until its
/// newline comes, unless it is already longer than any line may be.
pub struct Judged {
    follower: Follower,
    partial: Vec<u8>,
}

impl Judged {
    /// A reader judging under `options` (trust and approvers as `aegis verify` takes
    /// them).
    pub fn new(options: &Options) -> Judged {
        Judged {
            follower: Follower::new(options),
            partial: Vec::new(),
        }
    }

    /// Reads `bytes`, the next ones of the record, calling `accepted` with each whole
    /// line that holds and where it stands; whether the record turned out Tampered
    /// (nothing after that is read).
    pub fn push(&mut self, bytes: &[u8], mut accepted: impl FnMut(Position, &[u8])) -> bool {
        self.partial.extend_from_slice(bytes);
        let end = self
            .partial
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let whole: Vec<u8> = self.partial.drain(..end).collect();
        if judge(&mut self.follower, &whole, &mut accepted) {
            return true;
        }
        // A line this long is malformed whatever follows: no need to wait.
        if self.partial.len() > MAX_LINE_BYTES {
            let long = std::mem::take(&mut self.partial);
            return judge(&mut self.follower, &long, &mut accepted);
        }
        false
    }

    /// The verdict of the lines judged so far.
    pub fn report(&self) -> Report {
        self.follower.report()
    }

    /// The verdict once the record has ended, its partial last line (if any) judged as
    /// `aegis verify` judges a file's last line.
    pub fn finish(self) -> Report {
        let partial = (!self.partial.is_empty()).then_some(self.partial.as_slice());
        self.follower.finish(partial)
    }
}

/// Pushes `bytes` (whole lines, or one overlong piece) through the follower.
fn judge(
    follower: &mut Follower,
    bytes: &[u8],
    accepted: &mut impl FnMut(Position, &[u8]),
) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    let mut lines = lines.into_iter();
    for step in follower.push_lines(lines.as_slice()) {
        match step {
            Step::Accepted { at, .. } => {
                if let Some(line) = lines.next() {
                    accepted(at, line);
                }
            }
            Step::Tampered(_) => return true,
            _ => {
                lines.next();
            }
        }
    }
    false
}
