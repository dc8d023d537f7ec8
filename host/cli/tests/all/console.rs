//! `aegis console` as an operator starts it: the address with its token on stderr, the
//! page and the API over a real connection, SIGTERM ending it with exit 0. (The page
//! in a browser is tested in the console's browser tests.)

use crate::common::text;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

fn golden() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors/golden/golden.aarl")
}

/// One GET on a connection of its own, with `authorization` when given.
fn get(host: &str, path: &str, authorization: Option<&str>) -> String {
    let mut tcp = TcpStream::connect(host).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(a) = authorization {
        request.push_str(&format!("Authorization: {a}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_console_serves_a_records_calls_to_the_token_it_printed_and_stops_on_sigterm() {
    let mut console = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .args(["console", "--http", "127.0.0.1:0"])
        .arg(golden())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stderr, host, token) = address(&mut console);
    let (host, token) = (host.as_str(), token.as_str());
    assert_eq!(token.len(), 64, "{token}");

    let page = get(host, "/", None);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("Aegis console"));
    let refused = get(host, "/api/calls/0", None);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    // The feed reads the record on a thread of its own: the first call is there once
    // its backlog is read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let call = loop {
        let call = get(host, "/api/calls/0", Some(&format!("Bearer {token}")));
        if call.starts_with("HTTP/1.1 200") || std::time::Instant::now() > deadline {
            break call;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(call.starts_with("HTTP/1.1 200"), "{call}");
    assert!(call.contains(r#""kind":"outcome""#), "{call}");

    let pid = console.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = console.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{}", text(rest.as_bytes()));
}

#[test]
fn the_console_takes_one_record_and_a_private_token_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .args(["console", "--http", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .args(["console", "--http", "127.0.0.1:0", "--token-file"])
        .arg(&token)
        .arg(golden())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("group or others"),
        "{}",
        text(&out.stderr)
    );
}

/// `aegis --profile P console` with no path shows the profile's PostgreSQL store:
/// each session as wrap writes it, under its verdict, live.
#[test]
fn the_console_follows_a_postgresql_store_of_many_sessions() {
    use crate::store::{Store, Writer, echo_frame, keygen};
    let store = Store::new(aegis_test_support::postgres::shared());
    let dir = store.path("");
    let (key, _) = keygen(&dir, "host.key");
    let mut first = Writer::start_with(&store, &key, &dir, "a", None, &[]);
    first.initialize();
    first.send(&echo_frame(3, "before the console"));
    first.answer(3);

    let mut console = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .arg("--profile")
        .arg(&store.profile)
        .args(["console", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_stderr, host, token) = address(&mut console);

    let mut events = TcpStream::connect(&host).unwrap();
    events
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        events,
        "GET /api/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut seen = String::new();
    read_until(&mut events, &mut seen, |s| {
        s.contains(r#""tool_id":"echo""#)
    });
    // A second session, opened after the console started, is picked up.
    let mut second = Writer::start_with(&store, &key, &dir, "b", None, &[]);
    second.initialize();
    second.send(&echo_frame(3, "after"));
    second.answer(3);
    // A busy session: lines committed after the store last listed it are read once a
    // listing names them, never taken for a session that shrank.
    for id in 4..40 {
        second.send(&echo_frame(id, "busy"));
        second.answer(id);
    }
    read_until(&mut events, &mut seen, |s| {
        s.matches(r#""kind":"call""#).count() >= 38
    });
    assert!(seen.contains(" session "), "{seen}");
    assert!(!seen.contains(r#""verdict":"tampered""#), "{seen}");
    assert!(first.close().success(), "{}", first.stderr());
    assert!(second.close().success(), "{}", second.stderr());
    // Closed sessions verify.
    read_until(&mut events, &mut seen, |s| {
        s.contains(r#""verdict":"unpinned""#) || s.contains(r#""verdict":"indeterminate""#)
    });
    let _ = console.kill();
    let _ = console.wait();
}

/// The address a started console printed on stderr (`aegis: console at
/// http://127.0.0.1:PORT/#token=TOKEN (…)`, after any line naming the profile): its
/// stderr, read on, with the `host:port` and the token.
pub(crate) fn address(
    console: &mut std::process::Child,
) -> (BufReader<std::process::ChildStderr>, String, String) {
    let mut stderr = BufReader::new(console.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("http://") {
        said.clear();
        assert!(stderr.read_line(&mut said).unwrap() > 0, "no address");
    }
    let url = said
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap();
    let (origin, token) = url.split_once("/#token=").unwrap();
    let host = origin.trim_start_matches("http://").to_owned();
    (stderr, host, token.to_owned())
}

/// Reads the event stream into `seen` until `want` holds of it.
fn read_until(events: &mut TcpStream, seen: &mut String, want: impl Fn(&str) -> bool) {
    let mut buf = [0u8; 65536];
    while !want(seen) {
        let n = events
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("{e}; seen {seen}"));
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}
