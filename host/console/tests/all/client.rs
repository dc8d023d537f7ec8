//! What the tests ask the console with: plain HTTP/1.1 over a real connection, and a
//! reader of its event stream.

use aegis_console::{Console, serve};
use aegis_record::json::{Object, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "console-test-token-7d1f";

/// How long a test waits for an event it expects: generous, so a loaded machine does
/// not fail it; nothing asserts how long anything took.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// `console`, served until the returned token is cancelled.
pub async fn start(console: Console) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        listener,
        console,
        Arc::from(TOKEN),
        Arc::new(|w: &str| eprintln!("{w}")),
        stop.clone(),
    ));
    (addr, stop)
}

/// A console over one record file, verified unpinned, with no queue.
pub fn over(source: aegis_console::feed::Source) -> Console {
    Console {
        source,
        trust: None,
        approvals: None,
        approver: None,
    }
}

pub fn host(addr: SocketAddr) -> String {
    format!("127.0.0.1:{}", addr.port())
}

pub fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// One request with `headers` and `body`, on a connection of its own: the status and
/// the whole answer.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    (status, answer)
}

pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    request(addr, "GET", path, headers, b"").await
}

/// The JSON body of an answer.
pub fn body(answer: &str) -> Object {
    let json = answer.split("\r\n\r\n").nth(1).unwrap();
    match aegis_record::json::parse(json.as_bytes()).unwrap() {
        Value::Object(o) => o,
        other => panic!("{other:?}"),
    }
}

/// `/api/events` as the page reads it: each message's events, in order.
pub struct Events {
    reader: BufReader<tokio::net::TcpStream>,
    /// Every event read so far.
    pub seen: Vec<Object>,
}

impl Events {
    pub async fn open(addr: SocketAddr) -> Events {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET /api/events HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\r\n",
            host(addr),
            bearer()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut reader = BufReader::new(tcp);
        let mut status = String::new();
        reader.read_line(&mut status).await.unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("content-type:") {
                assert!(lower.contains("text/event-stream"), "{line}");
            }
            chunked |= lower.starts_with("transfer-encoding: chunked");
            if line == "\r\n" {
                break;
            }
        }
        assert!(chunked, "an open-ended stream is sent chunked");
        Events {
            reader,
            seen: Vec::new(),
        }
    }

    /// The next chunk of the body (one message, or a keep-alive comment).
    async fn chunk(&mut self) -> Option<String> {
        let mut size = String::new();
        if self.reader.read_line(&mut size).await.ok()? == 0 {
            return None;
        }
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return None;
        }
        let mut data = vec![0; size + 2];
        self.reader.read_exact(&mut data).await.unwrap();
        data.truncate(size);
        Some(String::from_utf8(data).unwrap())
    }

    /// Reads events until `done` holds of all seen so far; panics past [`PATIENCE`].
    pub async fn until(&mut self, done: impl Fn(&[Object]) -> bool) -> &[Object] {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !done(&self.seen) {
            let chunk = tokio::time::timeout_at(deadline, self.chunk())
                .await
                .unwrap_or_else(|_| panic!("waited in vain; seen {:#?}", self.seen));
            let Some(chunk) = chunk else {
                panic!("the stream ended; seen {:#?}", self.seen);
            };
            for message in chunk.split("\n\n").filter(|m| !m.is_empty()) {
                if message.starts_with(':') {
                    continue;
                }
                let data = message.strip_prefix("data: ").unwrap();
                let Value::Array(events) = aegis_record::json::parse(data.as_bytes()).unwrap()
                else {
                    panic!("{data}")
                };
                for e in events {
                    let Value::Object(o) = e else {
                        panic!("{data}")
                    };
                    self.seen.push(o);
                }
            }
        }
        &self.seen
    }
}

impl Events {
    /// Reads events until the last file event carries a verdict (the backlog read).
    pub async fn until_judged(&mut self) -> &[Object] {
        self.until(|e| verdict(e).is_some_and(|v| v != "reading"))
            .await
    }
}

/// `console` served, and a page's stream of it open.
pub async fn watch(console: Console) -> (SocketAddr, CancellationToken, Events) {
    let (addr, stop) = start(console).await;
    let events = Events::open(addr).await;
    (addr, stop, events)
}

/// A member of an event, as text.
pub fn text<'a>(o: &'a Object, path: &[&str]) -> Option<&'a str> {
    let (last, inner) = path.split_last()?;
    let mut at = o;
    for key in inner {
        at = at.get(key)?.as_object()?;
    }
    at.get(last)?.as_str()
}

/// The events of `kind`.
pub fn of_kind<'a>(events: &'a [Object], kind: &str) -> Vec<&'a Object> {
    events
        .iter()
        .filter(|e| text(e, &["kind"]) == Some(kind))
        .collect()
}

/// The last file event's verdict.
pub fn verdict(events: &[Object]) -> Option<&str> {
    of_kind(events, "file")
        .last()
        .and_then(|e| text(e, &["verdict"]))
}
