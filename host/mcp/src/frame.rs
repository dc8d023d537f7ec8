//! Cutting a stdio byte stream into frames (MCP stdio: one JSON-RPC message per line).
//!
//! # Guarantees
//! - A [`Frame::Line`] holds the line's exact bytes *including* its `\n` when it had one.
//!   Only the last line of a stream can lack it. Writing every `Line` in order reproduces
//!   the stream exactly, byte for byte, whenever no line was too long.
//! - A line whose content (not counting its `\n`) is longer than `max_frame` bytes is
//!   never held whole: the reader keeps at most `max_frame + 1` bytes of it, then
//!   discards the rest up to the next `\n` (or end of stream) and yields
//!   [`Frame::TooLong`] with the line's length.
//!
//! # Non-guarantees
//! - `\r` is not a separator; a `\r\n` ending stays in the line (JSON reads `\r` as
//!   whitespace).

use std::io::{self, BufRead, ErrorKind};

/// The default bound on one frame: 4 MiB, enough for large tool results while keeping a
/// hostile peer from making the relay buffer without end.
pub const DEFAULT_MAX_FRAME: usize = 4 * 1024 * 1024;

/// One unit read from a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A line: its exact bytes, with the trailing `\n` if there was one.
    Line(Vec<u8>),
    /// A line longer than the bound, already discarded.
    TooLong {
        /// The line's length in bytes, not counting its `\n`.
        seen: u64,
    },
}

/// Reads [`Frame`]s from a buffered reader.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    max_frame: usize,
}

impl<R: BufRead> FrameReader<R> {
    /// A reader that refuses lines longer than `max_frame` bytes (see [`DEFAULT_MAX_FRAME`]).
    pub fn new(inner: R, max_frame: usize) -> Self {
        FrameReader { inner, max_frame }
    }

    /// The next frame, or `None` at the end of the stream.
    ///
    /// # Errors
    /// Any I/O error of the underlying reader except `Interrupted`, which is retried. After
    /// an error the partial line read so far is lost.
    pub fn next_frame(&mut self) -> io::Result<Option<Frame>> {
        let mut line = Vec::new();
        // Some(n) once the line has overflowed: n bytes of it seen so far.
        let mut discarded: Option<u64> = None;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok(match discarded {
                    Some(seen) => Some(Frame::TooLong { seen }),
                    None if line.is_empty() => None,
                    None => Some(Frame::Line(line)),
                });
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let content = newline.unwrap_or(available.len());
            let take = newline.map_or(content, |at| at + 1);
            match discarded.as_mut() {
                Some(seen) => *seen += content as u64,
                None if line.len() + content > self.max_frame => {
                    discarded = Some((line.len() + content) as u64);
                    line = Vec::new();
                }
                None => line.extend_from_slice(&available[..take]),
            }
            self.inner.consume(take);
            if newline.is_some() {
                return Ok(Some(match discarded {
                    Some(seen) => Frame::TooLong { seen },
                    None => Frame::Line(line),
                }));
            }
        }
    }
}

impl<R: BufRead> Iterator for FrameReader<R> {
    type Item = io::Result<Frame>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::{BufReader, Read};

    fn frames(bytes: &[u8], max: usize, capacity: usize) -> Vec<Frame> {
        FrameReader::new(BufReader::with_capacity(capacity, bytes), max)
            .collect::<io::Result<_>>()
            .unwrap()
    }

    #[test]
    fn lines_keep_their_newline_and_the_last_may_lack_it() {
        assert_eq!(
            frames(b"a\n\nbc\r\nd", 10, 3),
            vec![
                Frame::Line(b"a\n".to_vec()),
                Frame::Line(b"\n".to_vec()),
                Frame::Line(b"bc\r\n".to_vec()),
                Frame::Line(b"d".to_vec()),
            ]
        );
        assert_eq!(frames(b"", 10, 3), vec![]);
    }

    #[test]
    fn long_lines_are_dropped_up_to_their_newline() {
        assert_eq!(
            frames(b"1234\n12345\nok\n123456789", 4, 2),
            vec![
                Frame::Line(b"1234\n".to_vec()),
                Frame::TooLong { seen: 5 },
                Frame::Line(b"ok\n".to_vec()),
                Frame::TooLong { seen: 9 },
            ]
        );
    }

    /// 64 MiB of `x`, then newlines forever.
    struct Endless {
        given: u64,
    }
    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.given >= 1 << 26 {
                buf[0] = b'\n';
                return Ok(1);
            }
            buf.fill(b'x');
            self.given += buf.len() as u64;
            Ok(buf.len())
        }
    }

    #[test]
    fn a_64_mib_line_is_counted_not_buffered() {
        let mut reader = FrameReader::new(BufReader::new(Endless { given: 0 }), 1024);
        assert_eq!(
            reader.next_frame().unwrap(),
            Some(Frame::TooLong { seen: 1 << 26 })
        );
        assert_eq!(
            reader.next_frame().unwrap(),
            Some(Frame::Line(b"\n".to_vec()))
        );
    }

    proptest! {
        /// Whatever the bytes, bound and buffer size: the frames' bytes concatenated are
        /// the input minus the discarded lines, every kept line is within the bound, and
        /// each discarded line's reported length is its true length.
        #[test]
        fn frames_reproduce_the_stream(
            bytes in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'x'), any::<u8>()], 0..300),
            max in 0usize..40,
            capacity in 1usize..50,
        ) {
            let got = frames(&bytes, max, capacity);
            let mut expected = Vec::new();
            let mut lines = bytes.split_inclusive(|&b| b == b'\n');
            for frame in &got {
                let line = lines.next().expect("more frames than lines");
                let content = line.strip_suffix(b"\n").unwrap_or(line);
                match frame {
                    Frame::Line(kept) => {
                        prop_assert_eq!(kept.as_slice(), line);
                        prop_assert!(content.len() <= max);
                        expected.extend_from_slice(line);
                    }
                    Frame::TooLong { seen } => {
                        prop_assert_eq!(*seen, content.len() as u64);
                        prop_assert!(content.len() > max);
                    }
                }
            }
            prop_assert!(lines.next().is_none(), "lines left unread");
            let joined: Vec<u8> = got.iter().flat_map(|f| match f {
                Frame::Line(b) => b.clone(),
                Frame::TooLong { .. } => Vec::new(),
            }).collect();
            prop_assert_eq!(joined, expected);
        }
    }
}
