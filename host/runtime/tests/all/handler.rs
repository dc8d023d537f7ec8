//! Model B's checks: every effect through the host context is placed under the grant
//! before it happens. Paths resolve inside granted roots by cap-std (so `..` and
//! symlinks leading out are refused); URLs are matched on host, port and method before
//! any connection, which the test listeners prove by seeing none; ceilings fail
//! closed.

use aegis_runtime::capability::*;
use aegis_runtime::handler::*;
use aegis_runtime::sandbox::Exceeded;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Mints a grant the only way there is: register a host tool, then resolve.
fn grant(
    read: &[&Path],
    write: &[&Path],
    net: Vec<NetRule>,
    limits: Limits,
    capability: Option<&str>,
) -> Grant {
    let mut reg = ToolRegistry::new();
    reg.register(ToolManifest {
        id: "tool".into(),
        kind: ToolKind::Host,
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: write.iter().map(|p| p.to_path_buf()).collect(),
        net,
        limits,
    })
    .unwrap();
    reg.resolve("tool", capability, &NarrowingLimits::default())
        .unwrap()
}

fn fs_context(read: &[&Path], write: &[&Path]) -> HostContext {
    HostContext::new(&grant(read, write, Vec::new(), DEFAULT_LIMITS, None)).unwrap()
}

fn read_all(mut f: std::fs::File) -> String {
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    s
}

/// A tree with a read root, a write root, a sibling whose name shares the read root's
/// prefix, and a secret outside every root.
struct Tree {
    _dir: tempfile::TempDir,
    read: PathBuf,
    write: PathBuf,
    secret: PathBuf,
    sibling: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (read, write) = (base.join("read"), base.join("write"));
    for d in [&read, &write, &read.join("sub"), &base.join("readme")] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(read.join("a.txt"), "alpha").unwrap();
    std::fs::write(read.join("sub/b.txt"), "beta").unwrap();
    std::fs::write(write.join("log.txt"), "old\n").unwrap();
    let secret = base.join("secret.txt");
    std::fs::write(&secret, "secret").unwrap();
    let sibling = base.join("readme/c.txt");
    std::fs::write(&sibling, "sibling").unwrap();
    Tree {
        _dir: dir,
        read,
        write,
        secret,
        sibling,
    }
}

fn assert_denied(err: HandlerError, axis: &str) {
    assert!(err.is_denied(), "{err}");
    assert_eq!(err.class(), ErrorClass::Denied);
    assert_eq!(err.axis(), axis, "{err}");
}

#[test]
fn reads_inside_a_read_root_succeed() {
    let t = tree();
    let ctx = fs_context(&[&t.read], &[]);
    std::os::unix::fs::symlink("sub/b.txt", t.read.join("inner-link")).unwrap();
    assert_eq!(
        read_all(ctx.open_read(&t.read.join("a.txt")).unwrap()),
        "alpha"
    );
    assert_eq!(
        read_all(ctx.open_read(Path::new("sub/b.txt")).unwrap()),
        "beta"
    );
    // `..` that stays inside the root, and a symlink that stays inside, are fine.
    assert_eq!(
        read_all(ctx.open_read(Path::new("sub/../a.txt")).unwrap()),
        "alpha"
    );
    assert_eq!(
        read_all(ctx.open_read(Path::new("inner-link")).unwrap()),
        "beta"
    );
}

#[test]
fn reads_that_leave_the_root_are_refused() {
    let t = tree();
    let ctx = fs_context(&[&t.read], &[]);
    // Each target exists: a refusal here is the check, not a missing file.
    assert!(t.secret.is_file() && t.sibling.is_file());

    let escapes = [
        PathBuf::from("../secret.txt"),
        PathBuf::from("sub/../../secret.txt"),
        t.read.join("../secret.txt"),
    ];
    for path in &escapes {
        let err = ctx.open_read(path).unwrap_err();
        assert!(matches!(err, HandlerError::Escapes { .. }), "{err}");
        assert_denied(err, "fs.read");
    }

    // Symlinks inside the root that lead out: absolute, relative, and a directory.
    std::os::unix::fs::symlink(&t.secret, t.read.join("abs-link")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", t.read.join("rel-link")).unwrap();
    std::os::unix::fs::symlink(t.secret.parent().unwrap(), t.read.join("dir-link")).unwrap();
    for path in ["abs-link", "rel-link", "dir-link/secret.txt"] {
        let err = ctx.open_read(Path::new(path)).unwrap_err();
        assert!(matches!(err, HandlerError::Escapes { .. }), "{path}: {err}");
        assert_denied(err, "fs.read");
    }
    let err = ctx.open_read(&t.read.join("abs-link")).unwrap_err();
    assert_denied(err, "fs.read");

    // Absolute paths under no root, including a sibling that shares the root's
    // prefix as a string but not as a path.
    for path in [&t.secret, &t.sibling, &t.write.join("log.txt")] {
        let err = ctx.open_read(path).unwrap_err();
        assert!(matches!(err, HandlerError::OutsideRoots { .. }), "{err}");
        assert_denied(err, "fs.read");
    }
}

#[test]
fn reading_needs_an_fs_read_root() {
    let t = tree();
    // A grant for everything the manifest declares keeps write roots write-only.
    let ctx = fs_context(&[], &[&t.write]);
    for path in [t.write.join("log.txt"), PathBuf::from("log.txt")] {
        assert_denied(ctx.open_read(&path).unwrap_err(), "fs.read");
    }
    // A call that asks for fs.read gets the write roots to read, by the station's rule.
    let g = grant(
        &[],
        &[&t.write],
        Vec::new(),
        DEFAULT_LIMITS,
        Some("fs.read"),
    );
    let ctx = HostContext::new(&g).unwrap();
    assert_eq!(
        read_all(ctx.open_read(&t.write.join("log.txt")).unwrap()),
        "old\n"
    );
    assert_denied(
        ctx.open_write_append(&t.write.join("log.txt")).unwrap_err(),
        "fs.write",
    );
}

#[test]
fn misuse_is_not_a_denial() {
    let t = tree();
    let ctx = fs_context(&[&t.read, &t.write], &[]);
    let err = ctx.open_read(Path::new("a.txt")).unwrap_err();
    assert!(
        matches!(err, HandlerError::AmbiguousPath { roots: 2, .. }),
        "{err}"
    );
    assert_eq!(err.class(), ErrorClass::Invalid);
    assert!(!err.is_denied());
    // Absolute paths still work with several roots.
    assert_eq!(
        read_all(ctx.open_read(&t.read.join("a.txt")).unwrap()),
        "alpha"
    );
    let err = ctx.open_read(&t.read.join("sub")).unwrap_err();
    assert!(matches!(err, HandlerError::NotAFile { .. }), "{err}");
    let err = ctx.open_read(&t.read.join("missing.txt")).unwrap_err();
    assert_eq!(err.class(), ErrorClass::Failed);
    assert_eq!(err.axis(), "fs.read");
}

#[test]
fn appends_only_under_a_write_root() {
    let t = tree();
    let ctx = fs_context(&[&t.read], &[&t.write]);
    let log = t.write.join("log.txt");
    ctx.open_write_append(&log)
        .unwrap()
        .write_all(b"one\n")
        .unwrap();
    ctx.open_write_append(Path::new("log.txt"))
        .unwrap()
        .write_all(b"two\n")
        .unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "old\none\ntwo\n");
    // Created when absent.
    ctx.open_write_append(&t.write.join("new.txt"))
        .unwrap()
        .write_all(b"fresh")
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.write.join("new.txt")).unwrap(),
        "fresh"
    );
    // The handle appends; it cannot read back what was there.
    let mut handle = ctx.open_write_append(&log).unwrap();
    assert!(handle.read(&mut [0; 4]).is_err());

    // A read-only root, a path under no root, `..` and a symlink out: all refused,
    // and nothing outside changes.
    std::os::unix::fs::symlink(&t.secret, t.write.join("out-link")).unwrap();
    for path in [
        t.read.join("a.txt"),
        t.read.join("created.txt"),
        t.secret.clone(),
        PathBuf::from("../secret.txt"),
        PathBuf::from("out-link"),
    ] {
        assert_denied(ctx.open_write_append(&path).unwrap_err(), "fs.write");
    }
    assert_eq!(std::fs::read_to_string(&t.secret).unwrap(), "secret");
    assert_eq!(
        std::fs::read_to_string(t.read.join("a.txt")).unwrap(),
        "alpha"
    );
    assert!(!t.read.join("created.txt").exists());

    // A grant for fs.read alone carries no write root.
    let g = grant(
        &[&t.read],
        &[&t.write],
        Vec::new(),
        DEFAULT_LIMITS,
        Some("fs.read"),
    );
    let ctx = HostContext::new(&g).unwrap();
    assert_denied(ctx.open_write_append(&log).unwrap_err(), "fs.write");
}

#[test]
fn a_handler_reaches_files_through_its_context() {
    let t = tree();
    let handler: HostHandler = Arc::new(|ctx: &HostContext, input: &[u8]| {
        let name = std::str::from_utf8(input).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        // `?` keeps the context's typed error.
        ctx.open_read(Path::new(name))?
            .read_to_end(&mut out)
            .map_err(|e| e.to_string())?;
        ctx.log_emit(LogLevel::Info, "read it");
        Ok(out)
    });
    let ctx = fs_context(&[&t.read], &[]);
    assert_eq!(handler(&ctx, b"a.txt").unwrap(), b"alpha");
    assert_eq!(ctx.stopped(), None);
    let refused = handler(&ctx, b"../secret.txt").unwrap_err();
    let HandlerFailure::Effect(err) = refused else {
        panic!("a typed effect failure: {refused}")
    };
    assert_denied(err, "fs.read");
    assert_eq!(ctx.logs().lines.len(), 1);
}

#[test]
fn the_context_keeps_its_own_account_of_refusals_and_ceilings() {
    let t = tree();
    let ctx = fs_context(&[&t.read], &[]);
    // Refused, then refused again on another axis: the first is what it keeps.
    let _ = ctx.open_read(&t.secret).unwrap_err();
    let _ = ctx.open_write_append(&t.read.join("x")).unwrap_err();
    let Some(Stop::Refused { axis, reason }) = ctx.stopped() else {
        panic!("{:?}", ctx.stopped())
    };
    assert_eq!(axis, Axis::FsRead);
    assert!(reason.starts_with("fs.read: "), "{reason}");
    assert_eq!(ctx.tripped(), None, "a refusal is not a ceiling");
    // A failure that is neither is not kept.
    let ctx = fs_context(&[&t.read], &[]);
    let _ = ctx.open_read(Path::new("missing.txt")).unwrap_err();
    assert_eq!(ctx.stopped(), None);
}

// ---- net.http ------------------------------------------------------------------

fn rule(host: &str, ports: &[u16], methods: &[&str]) -> NetRule {
    NetRule {
        host: host.into(),
        ports: ports.to_vec(),
        methods: methods.iter().map(|m| (*m).to_owned()).collect(),
    }
}

fn net_context(rules: Vec<NetRule>, limits: Limits) -> HostContext {
    HostContext::new(&grant(&[], &[], rules, limits, None)).unwrap()
}

fn limits(max_output_bytes: u64, max_wall_ms: u64) -> Limits {
    Limits {
        max_output_bytes,
        max_wall_ms,
        ..DEFAULT_LIMITS
    }
}

/// A loopback server for one connection: it reads the request head, answers with
/// `response`, closes, and returns the request it saw.
fn serve(response: &[u8]) -> (TcpListener, u16, JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = listener.try_clone().unwrap();
    let response = response.to_vec();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = accepting.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = Vec::new();
        let mut byte = [0; 1];
        while !request.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap() == 1 {
            request.push(byte[0]);
        }
        // The client may hang up early (a ceiling); that is its right.
        let _ = conn.write_all(&response);
        String::from_utf8(request).unwrap()
    });
    (listener, port, server)
}

/// Connections waiting on the listener, accepted and dropped. A connection completes
/// in the kernel before `http_get` returns, so one made would be counted here.
fn pending(listener: &TcpListener) -> usize {
    listener.set_nonblocking(true).unwrap();
    let mut n = 0;
    loop {
        match listener.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("accept: {e}"),
        }
    }
    listener.set_nonblocking(false).unwrap();
    n
}

fn assert_no_connection(listener: &TcpListener) {
    assert_eq!(pending(listener), 0, "a connection reached the listener");
}

/// The probe behind every "no connection" claim does see a connection.
#[test]
fn the_probe_counts_connections() {
    let (listener, port) = idle_listener();
    assert_eq!(pending(&listener), 0);
    let _client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert_eq!(pending(&listener), 1);
}

fn idle_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[test]
fn a_granted_get_reaches_the_server() {
    let (listener, port, server) =
        serve(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Test: yes\r\n\r\nhello");
    let ctx = net_context(vec![rule("127.0.0.1", &[port], &["GET"])], DEFAULT_LIMITS);
    let resp = ctx
        .http_get(&format!("http://127.0.0.1:{port}/path?q=1#fragment"))
        .unwrap();
    assert_eq!((resp.status, resp.reason.as_str()), (200, "OK"));
    assert_eq!(resp.body, b"hello");
    assert_eq!(resp.header("x-test"), Some("yes"));
    let request = server.join().unwrap();
    assert!(
        request.starts_with("GET /path?q=1 HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request.contains(&format!("\r\nHost: 127.0.0.1:{port}\r\n")),
        "{request}"
    );
    assert!(request.contains("\r\nConnection: close\r\n"), "{request}");
    assert_no_connection(&listener);
}

#[test]
fn chunked_and_close_framed_bodies_are_read() {
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                    4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\n";
    let close = b"HTTP/1.0 200 OK\r\n\r\nuntil the end";
    for (response, body) in [(&chunked[..], &b"wikipedia"[..]), (close, b"until the end")] {
        let (_listener, port, server) = serve(response);
        let ctx = net_context(vec![rule("127.0.0.1", &[port], &["GET"])], DEFAULT_LIMITS);
        let resp = ctx.http_get(&format!("http://127.0.0.1:{port}/")).unwrap();
        assert_eq!(resp.body, body);
        server.join().unwrap();
    }
}

#[test]
fn a_redirect_is_returned_not_followed() {
    let (listener, port, server) =
        serve(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n");
    let ctx = net_context(
        vec![rule("127.0.0.1", &[port, 1], &["GET"])],
        DEFAULT_LIMITS,
    );
    let resp = ctx.http_get(&format!("http://127.0.0.1:{port}/")).unwrap();
    assert_eq!(resp.status, 302);
    assert_eq!(resp.header("location"), Some("http://127.0.0.1:1/"));
    server.join().unwrap();
    assert_no_connection(&listener);
}

#[test]
fn ungranted_destinations_are_refused_before_connecting() {
    let (listener, port) = idle_listener();
    let other = if port == u16::MAX { port - 1 } else { port + 1 };
    let url = format!("http://127.0.0.1:{port}/");
    let cases: [(&str, Vec<NetRule>, &str); 6] = [
        ("port", vec![rule("127.0.0.1", &[other], &["GET"])], &url),
        ("host", vec![rule("127.0.0.2", &[port], &["GET"])], &url),
        ("method", vec![rule("127.0.0.1", &[port], &["POST"])], &url),
        ("no rules", Vec::new(), &url),
        // Exact host match: a name is not its address, nor the address its name.
        (
            "name for address",
            vec![rule("localhost", &[port], &["GET"])],
            &url,
        ),
        (
            "address for name",
            vec![rule("127.0.0.1", &[port], &["GET"])],
            &format!("http://localhost:{port}/"),
        ),
    ];
    for (why, rules, url) in cases {
        let ctx = net_context(rules, DEFAULT_LIMITS);
        let err = ctx.http_get(url).unwrap_err();
        assert!(
            matches!(err, HandlerError::NetDenied { .. }),
            "{why}: {err}"
        );
        assert_denied(err, "net.http");
        assert_no_connection(&listener);
    }
    // A grant minted for another axis carries no net rules.
    let g = grant(
        &[std::env::temp_dir().as_path()],
        &[],
        vec![rule("127.0.0.1", &[port], &["GET"])],
        DEFAULT_LIMITS,
        Some("fs.read"),
    );
    let err = HostContext::new(&g).unwrap().http_get(&url).unwrap_err();
    assert_denied(err, "net.http");
    assert_no_connection(&listener);
}

#[test]
fn https_is_refused_not_downgraded() {
    let (listener, port) = idle_listener();
    let ctx = net_context(vec![rule("127.0.0.1", &[port], &["GET"])], DEFAULT_LIMITS);
    let err = ctx
        .http_get(&format!("https://127.0.0.1:{port}/"))
        .unwrap_err();
    assert!(
        matches!(err, HandlerError::UnsupportedScheme { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("https is not implemented"),
        "{err}"
    );
    assert_eq!((err.axis(), err.class()), ("net.http", ErrorClass::Invalid));
    assert_no_connection(&listener);
}

#[test]
fn a_body_over_the_output_ceiling_is_an_error() {
    let cap = 8;
    let at_cap = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n12345678";
    let over: [&[u8]; 3] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789",
        b"HTTP/1.1 200 OK\r\n\r\n123456789",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n4\r\n6789\r\n0\r\n\r\n",
    ];
    let (_l, port, server) = serve(at_cap);
    let ctx = net_context(
        vec![rule("127.0.0.1", &[port], &["GET"])],
        limits(cap, 5_000),
    );
    let resp = ctx.http_get(&format!("http://127.0.0.1:{port}/")).unwrap();
    assert_eq!(resp.body, b"12345678");
    server.join().unwrap();
    for response in over {
        let (_l, port, server) = serve(response);
        let ctx = net_context(
            vec![rule("127.0.0.1", &[port], &["GET"])],
            limits(cap, 5_000),
        );
        let err = ctx
            .http_get(&format!("http://127.0.0.1:{port}/"))
            .unwrap_err();
        assert!(
            matches!(err, HandlerError::OutputCeiling { limit: 8, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("output ceiling"), "{err}");
        assert_eq!(err.class(), ErrorClass::Exceeded(Exceeded::Output));
        server.join().unwrap();
    }
}

#[test]
fn a_silent_server_hits_the_wall_clock_ceiling() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts, then says nothing until the client hangs up (or 10 s pass).
    let server = std::thread::spawn(move || {
        let (mut conn, _): (TcpStream, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut sink = Vec::new();
        // Ok means the client hung up first (EOF), not that 10 s went by.
        conn.read_to_end(&mut sink).is_ok()
    });
    let ctx = net_context(
        vec![rule("127.0.0.1", &[port], &["GET"])],
        limits(1 << 20, 300),
    );
    let err = ctx
        .http_get(&format!("http://127.0.0.1:{port}/"))
        .unwrap_err();
    assert!(
        matches!(err, HandlerError::WallTime { limit_ms: 300, .. }),
        "{err}"
    );
    assert_eq!(err.class(), ErrorClass::Exceeded(Exceeded::WallTime));
    drop(ctx);
    assert!(
        server.join().unwrap(),
        "the client gave up on its own ceiling, before the server's 10 s"
    );
}

/// The documented non-guarantee: a rule naming a host allows whatever its lookup
/// answers, loopback included.
#[test]
fn an_allowed_name_reaches_the_address_dns_gives() {
    let (_listener, port, server) = serve(b"HTTP/1.1 204 No Content\r\n\r\n");
    let ctx = net_context(vec![rule("LocalHost", &[port], &["get"])], DEFAULT_LIMITS);
    let resp = ctx.http_get(&format!("http://localhost:{port}/")).unwrap();
    assert_eq!(resp.status, 204);
    let request = server.join().unwrap();
    assert!(
        request.contains(&format!("\r\nHost: localhost:{port}\r\n")),
        "{request}"
    );
}

// ---- logs ----------------------------------------------------------------------

#[test]
fn logs_are_bounded_and_count_what_they_drop() {
    let ctx = net_context(Vec::new(), DEFAULT_LIMITS);
    let kib = "x".repeat(1024);
    for _ in 0..100 {
        ctx.log_emit(LogLevel::Info, &kib);
    }
    ctx.log_emit(LogLevel::Error, "late");
    let logs = ctx.logs();
    assert_eq!(logs.lines.len(), MAX_LOG_BYTES / 1024);
    assert_eq!(logs.bytes, MAX_LOG_BYTES);
    assert_eq!(logs.dropped, 100 - (MAX_LOG_BYTES / 1024) as u64 + 1);
    assert!(logs.lines.iter().all(|l| l.message == kib));

    // Empty lines are bounded by count; an oversized line is dropped whole, not cut.
    let ctx = net_context(Vec::new(), DEFAULT_LIMITS);
    ctx.log_emit(LogLevel::Warn, &"y".repeat(MAX_LOG_BYTES + 1));
    for _ in 0..MAX_LOG_LINES + 10 {
        ctx.log_emit(LogLevel::Debug, "");
    }
    let logs = ctx.logs();
    assert_eq!(logs.lines.len(), MAX_LOG_LINES);
    assert_eq!(logs.dropped, 11);
    assert_eq!(logs.bytes, 0);
}

// ---- execute: how a handler's end is classified ----------------------------------

fn small_grant() -> Grant {
    let limits = Limits {
        max_output_bytes: 4,
        ..DEFAULT_LIMITS
    };
    grant(&[], &[], Vec::new(), limits, None)
}

fn exceeded(executed: &aegis_runtime::pipeline::Executed) -> Option<Exceeded> {
    match executed {
        aegis_runtime::pipeline::Executed::Ran {
            ending: aegis_runtime::sandbox::Ending::Exceeded(kind),
            output: None,
            ..
        } => Some(*kind),
        _ => None,
    }
}

#[test]
fn output_and_a_handlers_own_words_meet_the_output_ceiling() {
    let g = small_grant();
    let at: HostHandler = Arc::new(|_, _| Ok(b"1234".to_vec()));
    let over: HostHandler = Arc::new(|_, _| Ok(b"12345".to_vec()));
    let wordy: HostHandler = Arc::new(|_, _| Err("12345".into()));
    let terse: HostHandler = Arc::new(|_, _| Err("1234".into()));
    assert_eq!(exceeded(&execute(Some(&at), &g, b"")), None);
    assert_eq!(
        exceeded(&execute(Some(&over), &g, b"")),
        Some(Exceeded::Output)
    );
    assert_eq!(
        exceeded(&execute(Some(&wordy), &g, b"")),
        Some(Exceeded::Output)
    );
    assert!(matches!(
        execute(Some(&terse), &g, b""),
        aegis_runtime::pipeline::Executed::Failed { message } if message == "handler error: 1234"
    ));
    assert!(matches!(
        execute(None, &g, b""),
        aegis_runtime::pipeline::Executed::NotStarted { .. }
    ));
}

/// The sandbox's rule, now the handlers' too: a ceiling that tripped is what the call
/// ended by, even when the handler swallowed the error and returned something else
/// (before, this handler's fallback was handed back as a success).
#[test]
fn a_handler_that_swallows_a_tripped_ceiling_is_still_stopped_by_it() {
    let (_l, port, server) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n123456789");
    let g = grant(
        &[],
        &[],
        vec![rule("127.0.0.1", &[port], &["GET"])],
        limits(8, 5_000),
        None,
    );
    let url = format!("http://127.0.0.1:{port}/");
    let fallback: HostHandler = Arc::new(move |ctx, _| {
        Ok(ctx
            .http_get(&url)
            .map(|r| r.body)
            .unwrap_or_else(|_| b"cached".to_vec()))
    });
    assert_eq!(
        exceeded(&execute(Some(&fallback), &g, b"")),
        Some(Exceeded::Output)
    );
    server.join().unwrap();
}
