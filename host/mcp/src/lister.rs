//! Listing an MCP stdio server's tools outside a session: `aegis pins diff` and
//! `aegis pins accept` start the server, list it with [`list_tools`], and end it.
//!
//! [`list_tools`] is the client's side of the opening of an MCP session: it sends
//! `initialize` (protocol [`PROTOCOL_VERSION`]), waits for the answer, sends
//! `notifications/initialized`, then asks `tools/list` page after page, following every
//! `nextCursor`, and reads each page into a [`PinSet`] as the relay reads its own
//! listing.
//!
//! # Guarantees
//! - Every step waits at most [`ListerConfig::step_timeout`] for its answer; a server
//!   that never answers ends the listing with [`ListError::Timeout`]. The caller ends the
//!   server ([`crate::stdio::end_server`]).
//! - Requests carry ids of their own ([`REQUEST_ID_PREFIX`]`N`); answers to other ids,
//!   server notifications and server requests between them are passed over. A server
//!   request is answered (`ping` with an empty result, anything else with JSON-RPC
//!   error −32601), since a server may wait for its answer before it answers ours.
//! - A page is read exactly as the relay reads one of its own listing: a result whose
//!   keys collide, whose tools are unreadable, or whose cursor is ambiguous ends the
//!   listing with an error ([`ListError::Listing`]); a name listed twice or a pinned
//!   field named by another spelling is kept in the [`PinSet`]
//!   ([`PinSet::duplicates`], [`PinSet::ambiguous`]) for the caller to refuse.
//! - An answer to one of our requests that cannot be read one way only (not JSON,
//!   ambiguous members, over the line bound) ends the listing
//!   ([`ListError::Unreadable`]) instead of being waited past.
//!
//! # Non-guarantees
//! - The listing is what the server answered this client at this moment: a server may
//!   answer another client, or later, otherwise (the relay compares every listing of a
//!   session for that reason).
//! - The server's `initialize` result is not checked beyond being a result: the
//!   protocol version it names is not negotiated further.
//!
//! # Limits
//! - Lines of at most [`ListerConfig::max_frame`] bytes; at most
//!   [`crate::relay::MAX_LISTING_PAGES`] pages and
//!   [`crate::relay::MAX_LISTING_BYTES`] bytes of answers (the relay's own bounds),
//!   [`MAX_TOOLS`] tools and [`crate::pins::MAX_DEFINITIONS`] bytes of definitions.
//! - At most [`QUEUED_LINES`] lines wait between the reading thread and the lister.

use std::fmt;
use std::io::{BufReader, Read, Write};
use std::sync::mpsc::{Receiver, RecvTimeoutError, sync_channel};
use std::time::{Duration, Instant};

use crate::frame::{DEFAULT_MAX_FRAME, Frame, FrameReader};
use crate::json;
use crate::message::{IdKey, Message, classify, recoverable_ids};
use crate::pins::{ListingError, MAX_DEFINITIONS, MAX_TOOLS, PinSet};
use crate::relay::{MAX_LISTING_BYTES, MAX_LISTING_PAGES};

/// The MCP revision the lister asks for in `initialize` (the one the test clients and
/// the SDKs this host is tested against speak; a server may answer with another).
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The lister's request ids: this prefix and a count.
pub const REQUEST_ID_PREFIX: &str = "aegis-pins/";

/// The default wait for each answer.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The most lines the reading thread holds for the lister (each at most
/// [`ListerConfig::max_frame`] bytes), so a server writing faster than the lister reads
/// costs bounded memory.
pub const QUEUED_LINES: usize = 16;

/// JSON-RPC "Method not found", for a server's request the lister does not serve.
const METHOD_NOT_FOUND: i64 = -32601;

/// The lister's settings. By default: [`DEFAULT_STEP_TIMEOUT`] a step, lines of at most
/// [`DEFAULT_MAX_FRAME`] bytes, the relay's page and byte bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListerConfig {
    /// How long each step (the `initialize` answer, each page) may take.
    pub step_timeout: Duration,
    /// The longest line read from the server.
    pub max_frame: usize,
    /// The most pages followed (default [`MAX_LISTING_PAGES`]).
    pub max_pages: usize,
    /// The most bytes of `tools/list` answers read (default [`MAX_LISTING_BYTES`]).
    pub max_bytes: usize,
}

impl Default for ListerConfig {
    fn default() -> Self {
        ListerConfig {
            step_timeout: DEFAULT_STEP_TIMEOUT,
            max_frame: DEFAULT_MAX_FRAME,
            max_pages: MAX_LISTING_PAGES,
            max_bytes: MAX_LISTING_BYTES,
        }
    }
}

/// A step of the listing, for errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The `initialize` request.
    Initialize,
    /// `notifications/initialized`.
    Initialized,
    /// The `tools/list` request for this page (1-based).
    ToolsList(usize),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Initialize => f.write_str("initialize"),
            Step::Initialized => f.write_str("notifications/initialized"),
            Step::ToolsList(page) => write!(f, "tools/list (page {page})"),
        }
    }
}

/// Why a listing did not complete. Messages quote the server's words unescaped: escape
/// them before showing them on a terminal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// The server did not answer a step in time.
    #[error("the server did not answer {step} within {} ms", timeout.as_millis())]
    Timeout {
        /// The step.
        step: Step,
        /// The wait.
        timeout: Duration,
    },
    /// The server closed its stdout (or exited) before answering.
    #[error("the server closed its output before answering {step}")]
    Closed {
        /// The step.
        step: Step,
    },
    /// A request could not be written to the server.
    #[error("{step} could not be sent to the server: {source}")]
    Write {
        /// The step.
        step: Step,
        /// Why.
        source: std::io::Error,
    },
    /// The server's output could not be read.
    #[error("the server's output could not be read during {step}: {why}")]
    Read {
        /// The step.
        step: Step,
        /// Why.
        why: String,
    },
    /// The server answered a step with a JSON-RPC error.
    #[error("the server answered {step} with an error: {message}")]
    Answered {
        /// The step.
        step: Step,
        /// The error's `message` (or the error object's text), as the server wrote it.
        message: String,
    },
    /// The server's answer to a step could not be read one way only.
    #[error("the server's answer to {step} could not be read: {why}")]
    Unreadable {
        /// The step.
        step: Step,
        /// Why.
        why: String,
    },
    /// A page could not be read into pins (see [`ListingError`]).
    #[error("{step}: {source}")]
    Listing {
        /// The step.
        step: Step,
        /// Why.
        source: ListingError,
    },
    /// The listing did not end within the page or byte bound.
    #[error("the listing did not end within {pages} pages and {bytes} bytes")]
    Endless {
        /// [`ListerConfig::max_pages`].
        pages: usize,
        /// [`ListerConfig::max_bytes`].
        bytes: usize,
    },
    /// The listing's pages hold more than [`MAX_TOOLS`] tools.
    #[error("the listing's pages hold more than {MAX_TOOLS} tools")]
    TooManyTools,
    /// The reading thread could not be started.
    #[error("a reader thread could not start: {0}")]
    Thread(std::io::Error),
}

/// A completed listing.
#[derive(Debug)]
#[non_exhaustive]
pub struct Listing {
    /// The tools, with their definitions (and any duplicates or ambiguous names).
    pub pins: PinSet,
    /// How many pages the listing took.
    pub pages: usize,
}

/// Lists the tools of the server whose input is `to_server` and output `from_server`
/// (see the module documentation). `from_server` is read on a thread of its own, which
/// ends when the server's output does (or the next line after the listing returns).
///
/// # Errors
/// [`ListError`] for the step that failed; nothing is listed then.
pub fn list_tools<R, W>(
    from_server: R,
    mut to_server: W,
    config: &ListerConfig,
) -> Result<Listing, ListError>
where
    R: Read + Send + 'static,
    W: Write,
{
    let lines = read_lines(from_server, config.max_frame)?;
    let mut lister = Lister {
        lines,
        to_server: &mut to_server,
        timeout: config.step_timeout,
        sent: 0,
        answered: 0,
    };
    lister.send(
        Step::Initialize,
        "initialize",
        Some(&format!(
            r#"{{"capabilities":{{}},"clientInfo":{{"name":"aegis","version":"{}"}},"protocolVersion":"{PROTOCOL_VERSION}"}}"#,
            env!("CARGO_PKG_VERSION")
        )),
    )
    .and_then(|id| lister.answer(Step::Initialize, &id, |_, _| Ok(())))?;
    lister.write(
        Step::Initialized,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}
"#,
    )?;
    let mut pins = PinSet::new();
    let mut cursor: Option<String> = None;
    let mut bytes = 0usize;
    let mut page = 0;
    loop {
        page += 1;
        if page > config.max_pages {
            return Err(ListError::Endless {
                pages: config.max_pages,
                bytes: config.max_bytes,
            });
        }
        let step = Step::ToolsList(page);
        let params = cursor.as_deref().map(|c| {
            let mut p = String::from(r#"{"cursor":"#);
            json::write_string(c, &mut p);
            p.push('}');
            p
        });
        let id = lister.send(step, "tools/list", params.as_deref())?;
        cursor = lister.answer(step, &id, |len, response| {
            bytes = bytes.saturating_add(len);
            if bytes > config.max_bytes {
                return Err(ListError::Endless {
                    pages: config.max_pages,
                    bytes: config.max_bytes,
                });
            }
            let Some(result) = response.result() else {
                return Err(ListError::Unreadable {
                    step,
                    why: "no result".into(),
                });
            };
            read_page(&mut pins, result, step)
        })?;
        if cursor.is_none() {
            return Ok(Listing { pins, pages: page });
        }
    }
}

/// One page into `listing`, as the relay reads a page of its own listing: the page
/// alone first, then the bounds over the whole listing, then joined (a name already
/// listed becomes a duplicate). The next page's cursor, if any.
fn read_page(
    listing: &mut PinSet,
    result: json::Node<'_>,
    step: Step,
) -> Result<Option<String>, ListError> {
    let mut page = PinSet::new();
    let cursor = page
        .add_result(result)
        .map_err(|source| ListError::Listing { step, source })?;
    if listing.tools().count() + page.tools().count() > MAX_TOOLS {
        return Err(ListError::TooManyTools);
    }
    if listing.definition_bytes() + page.definition_bytes() > MAX_DEFINITIONS {
        return Err(ListError::Listing {
            step,
            source: ListingError::TooLarge,
        });
    }
    listing.absorb(page);
    Ok(cursor)
}

/// What the reading thread hands over.
enum Line {
    Frame(Frame),
    Failed(String),
}

/// Starts the thread reading `input` line by line into a bounded queue.
fn read_lines<R: Read + Send + 'static>(
    input: R,
    max_frame: usize,
) -> Result<Receiver<Line>, ListError> {
    let (tx, rx) = sync_channel(QUEUED_LINES);
    std::thread::Builder::new()
        .name("aegis-pins-lister".into())
        .spawn(move || {
            let mut frames = FrameReader::new(BufReader::new(input), max_frame);
            loop {
                let line = match frames.next_frame() {
                    Ok(Some(frame)) => Line::Frame(frame),
                    Ok(None) => break,
                    Err(e) => Line::Failed(e.to_string()),
                };
                let failed = matches!(line, Line::Failed(_));
                // The lister is gone: nobody reads the rest.
                if tx.send(line).is_err() || failed {
                    break;
                }
            }
        })
        .map_err(ListError::Thread)?;
    Ok(rx)
}

struct Lister<'w, W: Write> {
    lines: Receiver<Line>,
    to_server: &'w mut W,
    timeout: Duration,
    sent: u64,
    /// Server requests answered so far (at most [`MAX_ANSWERED`]).
    answered: usize,
}

/// The most server requests a listing answers, and the longest id it echoes back.
/// Answers are written on the server's stdin, which a hostile server need never read:
/// with both bounds, everything the lister writes (its own few requests and at most
/// these answers, some 24 KiB) fits in a pipe's buffer (64 KiB on Linux), so a write
/// never blocks past the step timeout. Requests beyond them go unanswered (found by a
/// review: a server that sent pings and read nothing hung the lister).
pub const MAX_ANSWERED: usize = 64;
/// See [`MAX_ANSWERED`].
pub const MAX_ANSWERED_ID: usize = 256;

impl<W: Write> Lister<'_, W> {
    fn write(&mut self, step: Step, bytes: &[u8]) -> Result<(), ListError> {
        self.to_server
            .write_all(bytes)
            .and_then(|()| self.to_server.flush())
            .map_err(|source| ListError::Write { step, source })
    }

    /// Sends a request; its id.
    fn send(&mut self, step: Step, method: &str, params: Option<&str>) -> Result<IdKey, ListError> {
        let id = format!("{REQUEST_ID_PREFIX}{}", self.sent);
        self.sent += 1;
        let mut request = String::from(r#"{"jsonrpc":"2.0","id":"#);
        json::write_string(&id, &mut request);
        request.push_str(r#","method":"#);
        json::write_string(method, &mut request);
        if let Some(params) = params {
            request.push_str(r#","params":"#);
            request.push_str(params);
        }
        request.push_str("}\n");
        self.write(step, request.as_bytes())?;
        Ok(IdKey::String(id))
    }

    /// Waits for the answer to `id` and hands it to `read` (with the line's length);
    /// everything else the server writes meanwhile is passed over, its requests
    /// answered.
    fn answer<T>(
        &mut self,
        step: Step,
        id: &IdKey,
        read: impl FnOnce(usize, &crate::message::Response<'_>) -> Result<T, ListError>,
    ) -> Result<T, ListError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(Line::Frame(Frame::Line(line))) => line,
                Ok(Line::Frame(Frame::TooLong { seen })) => {
                    return Err(ListError::Unreadable {
                        step,
                        why: format!("a line of {seen} bytes, over the bound"),
                    });
                }
                Ok(Line::Failed(why)) => return Err(ListError::Read { step, why }),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ListError::Timeout {
                        step,
                        timeout: self.timeout,
                    });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(ListError::Closed { step }),
            };
            match classify(&line) {
                Message::Response(response) if response.id.key == *id => {
                    if response.duplicate_keys {
                        return Err(ListError::Unreadable {
                            step,
                            why: "duplicate keys".into(),
                        });
                    }
                    if response.is_error {
                        return Err(ListError::Answered {
                            step,
                            message: error_message(&response),
                        });
                    }
                    return read(line.len(), &response);
                }
                Message::Request(request)
                    if self.answered >= MAX_ANSWERED || request.id.raw.len() > MAX_ANSWERED_ID => {}
                Message::Request(request) => {
                    self.answered += 1;
                    let answer = if request.method == "ping" {
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
                            request.id.raw
                        )
                    } else {
                        format!(
                            r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":{METHOD_NOT_FOUND},"message":"aegis pins lists tools only"}}}}"#,
                            request.id.raw
                        )
                    };
                    self.write(step, format!("{answer}\n").as_bytes())?;
                }
                Message::Invalid(why) if !recoverable_ids(&line, |k| k == id).is_empty() => {
                    return Err(ListError::Unreadable { step, why });
                }
                Message::NotJson | Message::Batch(_)
                    if !recoverable_ids(&line, |k| k == id).is_empty() =>
                {
                    return Err(ListError::Unreadable {
                        step,
                        why: "not one JSON-RPC message".into(),
                    });
                }
                // Notifications, answers to other ids, lines that answer nothing of ours.
                _ => {}
            }
        }
    }
}

/// A JSON-RPC error's `message`, or the error object's text.
fn error_message(response: &crate::message::Response<'_>) -> String {
    let body = response.body;
    if let Some(object) = body.object()
        && let json::Lookup::One(message) = object.lookup("message")
        && let Some(text) = message.exact_str()
    {
        return text.into_owned();
    }
    String::from_utf8_lossy(body.raw()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A server written in `sh`: `script` reads requests on stdin and answers on stdout.
    fn listed(script: &str, config: &ListerConfig) -> Result<Listing, ListError> {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let result = list_tools(out, child.stdin.take().unwrap(), config);
        let _ = child.kill();
        let _ = child.wait();
        result
    }

    fn quick() -> ListerConfig {
        ListerConfig {
            step_timeout: Duration::from_millis(2000),
            ..ListerConfig::default()
        }
    }

    /// Answers each request line with the reply `reply(n)` names, by line count, echoing
    /// the id the lister chose (`aegis-pins/N`).
    const ECHO_IDS: &str = r#"n=0; while IFS= read -r line; do
  case "$line" in *'"id":"aegis-pins/'*) ;; *) continue;; esac
  id=$(printf '%s' "$line" | sed 's/.*"id":\("[^"]*"\).*/\1/')
  n=$((n+1))
  reply "$n" "$id"
done"#;

    #[test]
    fn a_paged_listing_is_followed_and_noise_is_passed_over() {
        let script = format!(
            r#"reply() {{
  case $1 in
    1) printf '%s\n' '{{"jsonrpc":"2.0","method":"notifications/message","params":{{}}}}'
       printf '%s\n' '{{"jsonrpc":"2.0","id":7,"method":"roots/list"}}'
       printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{\"protocolVersion\":\"2025-06-18\"}}}}";;
    2) printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{\"tools\":[{{\"name\":\"a\"}}],\"nextCursor\":\"p2\"}}}}";;
    3) case "$line" in *'"cursor":"p2"'*) ;; *) exit 9;; esac
       printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{\"tools\":[{{\"name\":\"b\",\"description\":\"B\"}}]}}}}";;
    *) printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{}}}}";;
  esac
}}
{ECHO_IDS}"#
        );
        let listing = listed(&script, &quick()).unwrap();
        assert_eq!(listing.pages, 2);
        let names: Vec<&str> = listing.pins.tools().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            listing.pins.get("b").unwrap().definition(),
            Some(r#"{"description":"B","name":"b"}"#)
        );
    }

    /// From a review: a server that sends requests and never reads its stdin filled the
    /// pipe with the lister's answers and hung it past every timeout. It now answers at
    /// most MAX_ANSWERED requests with short ids, so it times out as any silent server.
    #[test]
    fn a_server_that_floods_requests_and_reads_nothing_still_times_out() {
        let config = ListerConfig {
            step_timeout: Duration::from_millis(500),
            ..ListerConfig::default()
        };
        let started = Instant::now();
        let long_id = "9".repeat(2000);
        let script = format!(
            r#"i=0; while [ $i -lt 20000 ]; do printf '%s\n' '{{"jsonrpc":"2.0","id":{long_id},"method":"ping"}}' '{{"jsonrpc":"2.0","id":1,"method":"ping"}}'; i=$((i+1)); done; sleep 30"#
        );
        let error = listed(&script, &config).unwrap_err();
        assert!(matches!(error, ListError::Timeout { .. }), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_server_that_never_answers_times_out() {
        let config = ListerConfig {
            step_timeout: Duration::from_millis(200),
            ..ListerConfig::default()
        };
        let started = Instant::now();
        let error = listed("cat > /dev/null", &config).unwrap_err();
        assert!(
            matches!(
                error,
                ListError::Timeout {
                    step: Step::Initialize,
                    ..
                }
            ),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            error.to_string(),
            "the server did not answer initialize within 200 ms"
        );
    }

    #[test]
    fn endless_pages_stop_at_the_bound() {
        let script = format!(
            r#"reply() {{
  if [ "$1" = 1 ]; then printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{}}}}"
  else printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{\"tools\":[],\"nextCursor\":\"more\"}}}}"; fi
}}
{ECHO_IDS}"#
        );
        let config = ListerConfig {
            max_pages: 5,
            ..quick()
        };
        let error = listed(&script, &config).unwrap_err();
        assert!(
            matches!(error, ListError::Endless { pages: 5, .. }),
            "{error}"
        );
    }

    #[test]
    fn an_ambiguous_page_and_an_error_answer_end_the_listing() {
        for (page, expected) in [
            (
                r#"{"tools":[{"name":"a","description":"x","description":"y"}]}"#,
                "duplicate keys",
            ),
            (r#"{"tools":"none"}"#, "no unambiguous tools array"),
        ] {
            let script = format!(
                r#"reply() {{
  if [ "$1" = 1 ]; then printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{}}}}"
  else printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":"'{page}'"}}"; fi
}}
{ECHO_IDS}"#
            );
            let error = listed(&script, &quick()).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains('\n'));
        }
        let script = format!(
            r#"reply() {{ printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"error\":{{\"code\":-1,\"message\":\"no\"}}}}"; }}
{ECHO_IDS}"#
        );
        let error = listed(&script, &quick()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the server answered initialize with an error: no"
        );
    }

    #[test]
    fn duplicates_are_listed_for_the_caller_to_refuse() {
        let script = format!(
            r#"reply() {{
  if [ "$1" = 1 ]; then printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{}}}}"
  else printf '%s\n' "{{\"jsonrpc\":\"2.0\",\"id\":$2,\"result\":{{\"tools\":[{{\"name\":\"a\"}},{{\"name\":\"a\",\"Description\":\"x\"}}]}}}}"; fi
}}
{ECHO_IDS}"#
        );
        let listing = listed(&script, &quick()).unwrap();
        assert_eq!(listing.pins.duplicates().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            listing.pins.ambiguous().collect::<Vec<_>>(),
            [("a", "Description")]
        );
    }
}
