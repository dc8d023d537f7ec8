//! HTTP: one checked `GET` over plain `http://`, bounded by the grant's ceilings.

use super::{Axis, HandlerError, HostContext, MAX_CHUNK_LINE, MAX_HEAD_BYTES};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};

/// A response to [`HostContext::http_get`], as the server sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpResponse {
    /// Status code; a redirect is returned as is.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Headers in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked, at most `max_output_bytes`.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The parts of an `http://` URL that are checked and used.
struct Url {
    /// Lower case, brackets removed: what the rules are matched against.
    host: String,
    port: u16,
    /// The `Host` header value.
    authority: String,
    /// The request target: path and query, never empty.
    target: String,
}

fn parse_url(url: &str) -> Result<Url, HandlerError> {
    let bad = |what| HandlerError::BadUrl {
        url: url.to_owned(),
        what,
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or(bad("expected http://host[:port][/path]"))?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HandlerError::UnsupportedScheme {
            scheme: scheme.to_owned(),
        });
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // `allowed@evil` reads as one host to a person and another to a parser.
    if authority.contains('@') {
        return Err(bad("user information before the host is not supported"));
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (ip, after) = inner.split_once(']').ok_or(bad("unclosed '['"))?;
        ip.parse::<Ipv6Addr>()
            .map_err(|_| bad("bad IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(bad("junk after ']'"))?),
        };
        (ip, port)
    } else {
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        if !host.bytes().all(name_byte) {
            return Err(bad("host may hold only letters, digits, '-', '.' and '_'"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let port = match port {
        None => 80,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&n| n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(bad("port must be a number from 1 to 65535"))?,
    };
    // The fragment is the client's business; it is never sent.
    let tail = tail.split_once('#').map_or(tail, |(t, _)| t);
    let target = match tail.as_bytes().first() {
        None => "/".to_owned(),
        Some(b'?') => format!("/{tail}"),
        Some(_) => tail.to_owned(),
    };
    // Spaces and control bytes would let the path rewrite the request line.
    if !target.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(bad(
            "path must be printable ASCII without spaces; percent-encode the rest",
        ));
    }
    let host = host.to_ascii_lowercase();
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let authority = if port == 80 {
        bracketed
    } else {
        format!("{bracketed}:{port}")
    };
    Ok(Url {
        host,
        port,
        authority,
        target,
    })
}

/// Exact host match, ignoring case; two IP literals match when they are the same
/// address however written.
fn host_matches(rule: &str, host: &str) -> bool {
    let rule = rule
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(rule);
    match (rule.parse::<IpAddr>(), host.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => rule.eq_ignore_ascii_case(host),
    }
}

/// Reads from the socket within the call's remaining wall-clock budget.
struct Timed<'c> {
    stream: TcpStream,
    ctx: &'c HostContext,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.ctx.remaining().ok_or(io::ErrorKind::TimedOut)?;
        self.stream.set_read_timeout(left)?;
        self.stream.read(buf)
    }
}

/// A response's status line and headers.
struct Head {
    status: u16,
    reason: String,
    headers: Vec<(String, String)>,
}

/// One request's response reader, with the host for error messages.
struct Exchange<'c> {
    reader: BufReader<Timed<'c>>,
    host: String,
    head_left: usize,
}

impl Exchange<'_> {
    fn bad(&self, what: impl Into<String>) -> HandlerError {
        HandlerError::BadResponse {
            host: self.host.clone(),
            what: what.into(),
        }
    }

    fn io(&self, source: io::Error) -> HandlerError {
        net_io(self.reader.get_ref().ctx, &self.host, source)
    }

    /// One line without its CRLF, charged to `budget`.
    fn line(&mut self, budget: &mut usize, what: &str) -> Result<Vec<u8>, HandlerError> {
        let mut line = Vec::new();
        let read = (&mut self.reader)
            .take(*budget as u64)
            .read_until(b'\n', &mut line);
        let n = read.map_err(|e| self.io(e))?;
        *budget -= n;
        if line.pop() != Some(b'\n') {
            return Err(if *budget == 0 {
                self.bad(format!("{what} is too long"))
            } else {
                self.bad(format!("connection closed in the {what}"))
            });
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Ok(line)
    }

    fn head(&mut self) -> Result<Head, HandlerError> {
        let mut budget = self.head_left;
        let status_line = self.line(&mut budget, "response head")?;
        let status_line = String::from_utf8_lossy(&status_line).into_owned();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        let code = parts.next().unwrap_or_default();
        let reason = parts.next().unwrap_or_default().to_owned();
        if !version.starts_with("HTTP/1.") {
            return Err(self.bad(format!("status line {status_line:?} is not HTTP/1.x")));
        }
        let status = Some(code)
            .filter(|c| c.len() == 3 && c.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| self.bad(format!("status code {code:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.line(&mut budget, "response head")?;
            if line.is_empty() {
                break;
            }
            let line = String::from_utf8_lossy(&line);
            let (name, value) = line
                .split_once(':')
                .filter(|(n, _)| !n.is_empty() && !n.contains(char::is_whitespace))
                .ok_or_else(|| self.bad(format!("header line {line:?}")))?;
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        self.head_left = budget;
        Ok(Head {
            status,
            reason,
            headers,
        })
    }

    /// Exactly `n` bytes, appended to `body`.
    fn exact(&mut self, n: u64, body: &mut Vec<u8>) -> Result<(), HandlerError> {
        let before = body.len();
        let read = (&mut self.reader).take(n).read_to_end(body);
        read.map_err(|e| self.io(e))?;
        let got = (body.len() - before) as u64;
        if got < n {
            return Err(self.bad(format!("body ended after {got} of {n} bytes")));
        }
        Ok(())
    }

    fn chunked(&mut self, cap: u64) -> Result<Vec<u8>, HandlerError> {
        let mut body = Vec::new();
        loop {
            let mut budget = MAX_CHUNK_LINE;
            let line = self.line(&mut budget, "chunk size line")?;
            let size = line.split(|&b| b == b';').next().unwrap_or_default();
            let size = std::str::from_utf8(size).unwrap_or_default().trim();
            let size = Some(size)
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(|| self.bad(format!("chunk size {size:?}")))?;
            if size == 0 {
                // Trailers are read and dropped, within what is left of the head budget.
                let mut budget = self.head_left;
                while !self.line(&mut budget, "trailers")?.is_empty() {}
                return Ok(body);
            }
            if body.len() as u64 + size > cap {
                return Err(self.ceiling(cap));
            }
            self.exact(size, &mut body)?;
            if !self.line(&mut 2, "chunk end")?.is_empty() {
                return Err(self.bad("chunk data is longer than its size"));
            }
        }
    }

    fn ceiling(&self, limit: u64) -> HandlerError {
        HandlerError::OutputCeiling {
            host: self.host.clone(),
            limit,
        }
    }
}

/// Maps a socket error: a timeout can only be the call's budget running out, since
/// every timeout set here is what is left of it.
fn net_io(ctx: &HostContext, host: &str, source: io::Error) -> HandlerError {
    if matches!(
        source.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    ) {
        HandlerError::WallTime {
            host: host.to_owned(),
            limit_ms: ctx.limits.max_wall_ms,
        }
    } else {
        HandlerError::Io {
            axis: Axis::NetHttp,
            target: host.to_owned(),
            source,
        }
    }
}

impl HostContext {
    /// Fetches an `http://` URL with one GET, if a rule of the grant allows the host
    /// (exact, any case), the port (explicit or 80) and `GET`.
    ///
    /// The check runs before any DNS lookup or connection. The name is then resolved
    /// once and the connection goes to one of those addresses. The request is
    /// HTTP/1.1 with `Host` and `Connection: close`; the response body is read up to
    /// `max_output_bytes`, framed by `Content-Length`, chunked encoding, or the close
    /// of the connection. Redirects are returned, not followed.
    ///
    /// # Errors
    /// [`HandlerError::NetDenied`] (denied); [`HandlerError::UnsupportedScheme`] for
    /// `https://` and anything else not `http://`; [`HandlerError::BadUrl`];
    /// [`HandlerError::OutputCeiling`] for a body over the ceiling;
    /// [`HandlerError::WallTime`] when the budget runs out;
    /// [`HandlerError::BadResponse`], [`HandlerError::UnsupportedResponse`] or
    /// [`HandlerError::Io`] when the server or the network fails.
    pub fn http_get(&self, url: &str) -> Result<HttpResponse, HandlerError> {
        self.note(self.get(url))
    }

    fn get(&self, url: &str) -> Result<HttpResponse, HandlerError> {
        const METHOD: &str = "GET";
        let url = parse_url(url)?;
        let allowed = self.net.iter().any(|rule| {
            host_matches(&rule.host, &url.host)
                && rule.ports.contains(&url.port)
                && rule.methods.iter().any(|m| m == METHOD)
        });
        if !allowed {
            return Err(HandlerError::NetDenied {
                method: METHOD,
                host: url.host,
                port: url.port,
            });
        }
        let mut stream = self.connect(&url)?;
        let fail = |e| net_io(self, &url.host, e);
        let request = format!(
            "{METHOD} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Accept-Encoding: identity\r\nUser-Agent: aegis\r\n\r\n",
            url.target, url.authority
        );
        let left = self
            .remaining()
            .ok_or_else(|| fail(io::ErrorKind::TimedOut.into()))?;
        stream.set_write_timeout(left).map_err(fail)?;
        stream.write_all(request.as_bytes()).map_err(fail)?;
        self.response(stream, url.host)
    }

    /// Resolves the checked host once and connects to one of its addresses.
    fn connect(&self, url: &Url) -> Result<TcpStream, HandlerError> {
        let fail = |e| net_io(self, &url.host, e);
        // An IP literal is used as is: no lookup at all.
        let addrs: Vec<SocketAddr> = match url.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, url.port)],
            Err(_) => (url.host.as_str(), url.port)
                .to_socket_addrs()
                .map_err(fail)?
                .collect(),
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for addr in addrs {
            let left = self
                .remaining()
                .ok_or_else(|| fail(io::ErrorKind::TimedOut.into()))?;
            let attempt = match left {
                Some(t) => TcpStream::connect_timeout(&addr, t),
                None => TcpStream::connect(addr),
            };
            match attempt {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(fail(last))
    }

    fn response(&self, stream: TcpStream, host: String) -> Result<HttpResponse, HandlerError> {
        let cap = self.limits.max_output_bytes;
        let mut ex = Exchange {
            reader: BufReader::new(Timed { stream, ctx: self }),
            host,
            head_left: MAX_HEAD_BYTES,
        };
        let Head {
            status,
            reason,
            headers,
        } = loop {
            let head = ex.head()?;
            match head.status {
                101 => return Err(ex.bad("101 switching protocols was not asked for")),
                // Interim responses precede the real one.
                100..=199 => continue,
                _ => break head,
            }
        };
        let body = if status == 204 || status == 304 {
            Vec::new()
        } else if let Some(te) = header(&headers, "transfer-encoding") {
            if !te.eq_ignore_ascii_case("chunked") {
                return Err(HandlerError::UnsupportedResponse {
                    host: ex.host,
                    what: format!("transfer-encoding {te:?}"),
                });
            }
            ex.chunked(cap)?
        } else if let Some(length) = content_length(&headers).map_err(|w| ex.bad(w))? {
            if length > cap {
                return Err(ex.ceiling(cap));
            }
            let mut body = Vec::new();
            ex.exact(length, &mut body)?;
            body
        } else {
            // Framed by the close; one byte past the ceiling tells "at" from "over".
            let mut body = Vec::new();
            let read = (&mut ex.reader)
                .take(cap.saturating_add(1))
                .read_to_end(&mut body);
            read.map_err(|e| ex.io(e))?;
            if body.len() as u64 > cap {
                return Err(ex.ceiling(cap));
            }
            body
        };
        Ok(HttpResponse {
            status,
            reason,
            headers,
            body,
        })
    }
}

/// The body length a response declares, if any; copies that disagree are an error.
fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, String> {
    let mut found = None;
    for (_, v) in headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        let n = Some(v.as_str())
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("content-length {v:?}"))?;
        if found.is_some_and(|f| f != n) {
            return Err("content-length headers disagree".to_owned());
        }
        found = Some(n);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_strictly() {
        let u = parse_url("http://Example.TEST:8080/a/b?q=1#frag").unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.authority.as_str(),
                u.target.as_str()
            ),
            ("example.test", 8080, "example.test:8080", "/a/b?q=1")
        );
        let u = parse_url("http://[::1]?x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.target.as_str()),
            ("::1", 80, "/?x")
        );
        assert_eq!(u.authority, "[::1]");
        for bad in [
            "http://allowed.test@evil.test/",
            "http://host:0/",
            "http://host:65536/",
            "http://host:+80/",
            "http:///path",
            "http://host/a b",
            "http://host/a\r\nX: y",
            "http://ho%73t/",
            "host/path",
        ] {
            assert!(
                matches!(parse_url(bad), Err(HandlerError::BadUrl { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_url("HTTPS://host/"),
            Err(HandlerError::UnsupportedScheme { .. })
        ));
    }

    #[test]
    fn hosts_match_exactly() {
        assert!(host_matches("api.example.test", "API.example.test"));
        assert!(host_matches("[::1]", "::1"));
        assert!(host_matches("0:0:0:0:0:0:0:1", "::1"));
        assert!(!host_matches("example.test", "sub.example.test"));
        assert!(!host_matches("example.test", "example.test."));
        assert!(!host_matches("127.0.0.1", "localhost"));
    }

    #[test]
    fn content_length_must_agree() {
        let h = |v: &[&str]| -> Vec<(String, String)> {
            v.iter()
                .map(|v| ("Content-Length".to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(content_length(&h(&[])), Ok(None));
        assert_eq!(content_length(&h(&["5", "5"])), Ok(Some(5)));
        assert!(content_length(&h(&["5", "6"])).is_err());
        assert!(content_length(&h(&["-1"])).is_err());
        assert!(content_length(&h(&["+5"])).is_err());
    }
}
