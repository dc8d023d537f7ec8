//! Guests that try to get out of their grant or exhaust it, run through the assembled
//! pipeline. Each attempt is refused or stopped, nothing it reached leaves, and the
//! call is on a record that verifies.

use aegis_record::ExecutionOutcome;
use aegis_runtime::capability::DEFAULT_LIMITS;
use aegis_runtime::pipeline::{CallClass, CallRecord};
use aegis_suites::{Harness, plain_tool, wasm_tool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";
const SECRET: &[u8] = b"OUTSIDE-SECRET";

/// A base dir (canonical) holding a secret, a read root and a write root.
struct Layout {
    _dir: tempfile::TempDir,
    base: PathBuf,
    ro: PathBuf,
    rw: PathBuf,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (ro, rw) = (base.join("ro"), base.join("rw"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&rw).unwrap();
    std::fs::write(base.join("secret"), SECRET).unwrap();
    std::fs::write(ro.join("notes.md"), b"meeting at 10").unwrap();
    Layout {
        _dir: dir,
        base,
        ro,
        rw,
    }
}

fn harness(l: &Layout) -> Harness {
    Harness::new(
        ALLOW_ALL,
        vec![
            wasm_tool("read-file", "read-file", &[&l.ro], &[], DEFAULT_LIMITS),
            wasm_tool(
                "write-file",
                "write-file",
                &[&l.ro],
                &[&l.rw],
                DEFAULT_LIMITS,
            ),
            wasm_tool("symlink-out", "symlink-out", &[], &[&l.rw], DEFAULT_LIMITS),
            wasm_tool("read-rw", "read-file", &[], &[&l.rw], DEFAULT_LIMITS),
            plain_tool("net", "net"),
        ],
        BTreeMap::new(),
    )
}

/// Nothing of the secret left the call, and the call's record says so.
fn assert_nothing_leaked(r: &CallRecord) {
    let out = r.output.as_deref().unwrap_or_default();
    assert!(
        !out.windows(SECRET.len()).any(|w| w == SECRET),
        "the secret left the sandbox: {}",
        String::from_utf8_lossy(out)
    );
    if r.output.is_none() {
        assert_eq!(r.outcome.response_digest, None);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn reads_by_traversal_or_absolute_path_outside_are_refused() {
    let l = layout();
    let h = harness(&l);
    let inside = h.call_args("read-file", b"", &[s(&l.ro.join("notes.md"))]);
    assert_eq!(inside.class(), CallClass::Success);
    assert_eq!(inside.output.as_deref(), Some(&b"meeting at 10"[..]));
    for escape in [
        l.ro.join("../secret"),
        l.base.join("secret"),
        PathBuf::from("/etc/passwd"),
    ] {
        let r = h.call_args("read-file", b"", &[s(&escape)]);
        assert_eq!(r.class(), CallClass::Trap, "{}", escape.display());
        assert_nothing_leaked(&r);
    }
    h.finish();
}

#[test]
fn a_symlink_planted_inside_a_root_does_not_lead_out() {
    let l = layout();
    std::os::unix::fs::symlink(l.base.join("secret"), l.ro.join("escape")).unwrap();
    std::os::unix::fs::symlink("../secret", l.ro.join("escape-relative")).unwrap();
    let h = harness(&l);
    for link in ["escape", "escape-relative"] {
        let r = h.call_args("read-file", b"", &[s(&l.ro.join(link))]);
        assert_eq!(r.class(), CallClass::Trap, "{link}");
        assert_nothing_leaked(&r);
    }
    h.finish();
}

#[test]
fn writing_under_a_read_only_root_is_refused_and_leaves_nothing() {
    let l = layout();
    let h = harness(&l);
    let planted = l.ro.join("planted.txt");
    let r = h.call_args("write-file", b"payload", &[s(&planted)]);
    assert_eq!(r.class(), CallClass::Trap);
    assert!(!planted.exists());
    let outside = l.base.join("planted.txt");
    let r = h.call_args("write-file", b"payload", &[s(&outside)]);
    assert_eq!(r.class(), CallClass::Trap);
    assert!(!outside.exists());
    let allowed = l.rw.join("out.txt");
    let r = h.call_args("write-file", b"payload", &[s(&allowed)]);
    assert_eq!(r.class(), CallClass::Success);
    assert_eq!(std::fs::read(&allowed).unwrap(), b"payload");
    h.finish();
}

#[test]
fn a_symlink_the_guest_makes_cannot_be_followed_out_now_or_later() {
    let l = layout();
    let h = harness(&l);
    let secret = l.base.join("secret");
    // An absolute target is refused when the link is made; a relative one is made
    // (the documented non-guarantee) but cannot be followed out.
    for (link, target, made) in [
        ("abs", s(&secret).to_owned(), false),
        ("rel", "../secret".to_owned(), true),
    ] {
        let link = l.rw.join(link);
        let r = h.call_args("symlink-out", b"", &[s(&link), &target]);
        assert_nothing_leaked(&r);
        let said = String::from_utf8_lossy(r.output.as_deref().unwrap_or_default()).into_owned();
        assert_eq!(said.contains("symlink: ok"), made, "{said}");
        assert_eq!(std::fs::symlink_metadata(&link).is_ok(), made);
        // A later call, granted the same root, cannot follow it either.
        let later = h.call_args("read-rw", b"", &[s(&link)]);
        assert_eq!(later.class(), CallClass::Trap, "{}", link.display());
        assert_nothing_leaked(&later);
    }
    h.finish();
}

#[test]
fn no_socket_reaches_the_network_without_a_grant() {
    let l = layout();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let h = harness(&l);
    let r = h.call_args("net", b"", &[&addr]);
    let said = String::from_utf8_lossy(r.output.as_deref().unwrap_or_default()).into_owned();
    assert!(said.contains("connect: error"), "{said}");
    assert!(
        listener.accept().is_err(),
        "nothing reached the loopback listener"
    );
    h.finish();
}

#[test]
fn exhaustion_is_stopped_by_the_grant_not_by_the_host_falling_over() {
    let h = aegis_suites::exhaustion_harness();
    for (tool, _, _) in aegis_suites::EXHAUSTERS {
        let r = h.call(tool, b"");
        assert_eq!(r.class(), CallClass::ResourceExceeded, "{tool}");
        assert_eq!(r.output, None, "{tool}: a stopped call returns nothing");
        let wall = r.outcome.wall_ms.unwrap().get();
        assert!(wall < 5_000, "{tool}: ran {wall} ms, far past its ceiling");
    }
    // The memory bomb never held more than its ceiling.
    let r = h.call("bomb", b"");
    let peak = r.outcome.peak_memory_bytes.unwrap().get();
    assert!(
        peak <= aegis_suites::TIGHT.max_memory_bytes,
        "peak {peak} over the ceiling"
    );
    h.finish();
}

#[test]
fn a_host_handler_cannot_reach_a_destination_its_grant_does_not_name() {
    use aegis_runtime::capability::{NetRule, ToolKind, ToolManifest};
    use aegis_runtime::handler::HostHandler;
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let exfil = format!("http://127.0.0.1:{port}/upload?d=secret");
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    let url = exfil.clone();
    handlers.insert(
        "fetch".into(),
        // Rewords the typed refusal into its own string.
        Arc::new(move |ctx, _| Ok(ctx.http_get(&url).map_err(|e| e.to_string())?.body)),
    );
    // Granted: another host on the same port, and the same host on another port.
    let rules = vec![
        NetRule {
            host: "api.example.test".into(),
            ports: vec![port],
            methods: vec!["GET".into()],
        },
        NetRule {
            host: "127.0.0.1".into(),
            ports: vec![port.wrapping_add(1).max(1)],
            methods: vec!["GET".into()],
        },
    ];
    let h = Harness::new(
        ALLOW_ALL,
        vec![ToolManifest {
            id: "fetch".into(),
            kind: ToolKind::Host,
            fs_read: vec![],
            fs_write: vec![],
            net: rules,
            limits: DEFAULT_LIMITS,
        }],
        handlers,
    );
    let r = h.call("fetch", b"");
    // The handler rewords the refusal into a plain string; the record still says the
    // grant refused net.http (before this, it was a generic `trap`).
    assert_refused_in_handler(&r, "net.http: GET 127.0.0.1 port");
    assert!(
        listener.accept().is_err(),
        "the refused request never connected"
    );
    let checked = h.finish();
    assert_eq!(checked.outcome(&r.outcome.call_id), &r.outcome);
}

/// A refusal inside a host handler is on the record as the grant's refusal of that
/// axis: the grant stands (it was minted), the execution is `host_denied` led by the
/// axis, `wall_ms` says the handler had started, and nothing is handed back.
fn assert_refused_in_handler(r: &CallRecord, reason_starts: &str) {
    assert_eq!(r.class(), CallClass::HostDenied);
    assert!(matches!(
        r.outcome.capability,
        aegis_record::CapabilityOutcome::Granted { .. }
    ));
    let ExecutionOutcome::HostDenied { reason } = &r.outcome.execution else {
        panic!("{:?}", r.outcome.execution)
    };
    assert!(reason.starts_with(reason_starts), "{reason}");
    assert!(r.outcome.wall_ms.is_some(), "the handler had started");
    assert_eq!(r.outcome.response_digest, None);
    assert_eq!(r.output, None);
}

fn host_reader(id: &str, read: &[&Path]) -> aegis_runtime::capability::ToolManifest {
    aegis_runtime::capability::ToolManifest {
        id: id.into(),
        kind: aegis_runtime::capability::ToolKind::Host,
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: vec![],
        net: vec![],
        limits: DEFAULT_LIMITS,
    }
}

#[test]
fn a_host_handler_refused_a_path_outside_its_roots_is_recorded_as_an_fs_read_refusal() {
    use aegis_runtime::handler::HostHandler;
    use std::sync::Arc;
    let l = layout();
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    // Reads the path it is given through its context, and passes the typed error up.
    handlers.insert(
        "cat".into(),
        Arc::new(|ctx, input| {
            let path = std::str::from_utf8(input).map_err(|e| e.to_string())?;
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut ctx.open_read(Path::new(path))?, &mut out)
                .map_err(|e| e.to_string())?;
            Ok(out)
        }),
    );
    let h = Harness::new(ALLOW_ALL, vec![host_reader("cat", &[&l.ro])], handlers);
    let inside = h.call("cat", l.ro.join("notes.md").to_str().unwrap().as_bytes());
    assert_eq!(inside.class(), CallClass::Success);
    let outside = l.base.join("secret");
    let escape = l.ro.join("../secret");
    for path in [&outside, &escape] {
        let r = h.call("cat", path.to_str().unwrap().as_bytes());
        assert_refused_in_handler(&r, "fs.read: ");
    }
    h.finish();
}

#[test]
fn a_handler_cannot_record_a_refusal_its_context_never_made() {
    use aegis_runtime::handler::{HandlerError, HandlerFailure, HostHandler};
    use std::sync::Arc;
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "liar".into(),
        Arc::new(|_, _| {
            Err(HandlerFailure::Effect(HandlerError::NetDenied {
                method: "GET",
                host: "made.up".into(),
                port: 80,
            }))
        }),
    );
    let h = Harness::new(ALLOW_ALL, vec![host_reader("liar", &[])], handlers);
    let r = h.call("liar", b"");
    assert_eq!(r.class(), CallClass::Trap, "the grant refused nothing");
    let ExecutionOutcome::Trap { message } = &r.outcome.execution else {
        panic!()
    };
    assert!(
        message.starts_with("handler error: net.http: "),
        "{message}"
    );
    h.finish();
}
