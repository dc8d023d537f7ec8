//! Model A, adversarially: real wasip2 command components (committed under
//! tests/fixtures/wasm) try to escape their grant and exhaust its ceilings, and the
//! sandbox refuses each.

use aegis_runtime::capability::{
    DEFAULT_LIMITS, Grant, Limits, NarrowingLimits, ToolKind, ToolManifest, ToolRegistry,
};
use aegis_runtime::sandbox::{Ending, Exceeded, Sandbox};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn guest(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/wasm/{name}.wasm"))
}

fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| Sandbox::new().unwrap())
}

/// A grant for `name` with these roots and limits, minted the only way there is.
fn grant(name: &str, read: &[&Path], write: &[&Path], limits: Limits) -> Grant {
    let mut reg = ToolRegistry::new();
    reg.register(ToolManifest {
        id: name.into(),
        kind: ToolKind::Wasm {
            component: guest(name),
        },
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: write.iter().map(|p| p.to_path_buf()).collect(),
        net: vec![],
        limits,
    })
    .unwrap();
    reg.resolve(name, None, &NarrowingLimits::default())
        .unwrap()
}

fn run(name: &str, g: &Grant, input: &[u8], args: &[&str]) -> aegis_runtime::sandbox::Execution {
    sandbox().run(&guest(name), g, input, args).unwrap()
}

#[test]
fn a_tool_runs_and_its_output_comes_back() {
    let g = grant("echo", &[], &[], DEFAULT_LIMITS);
    let out = run("echo", &g, b"hello, sandbox", &[]);
    assert_eq!(
        out.ending,
        Ending::Success,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.output.as_deref(), Some(&b"hello, sandbox"[..]));
    assert!(out.peak_memory_bytes > 0);
}

#[test]
fn reads_stay_inside_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("granted");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("notes.md"), b"meeting at 10").unwrap();
    std::fs::write(dir.path().join("secret"), b"do not read").unwrap();
    let g = grant("read-file", &[&root], &[], DEFAULT_LIMITS);

    let inside = root.join("notes.md");
    let out = run("read-file", &g, b"", &[inside.to_str().unwrap()]);
    assert_eq!(
        out.ending,
        Ending::Success,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.output.as_deref(), Some(&b"meeting at 10"[..]));

    for escape in [
        root.join("../secret").to_string_lossy().into_owned(),
        std::fs::canonicalize(dir.path())
            .unwrap()
            .join("secret")
            .to_string_lossy()
            .into_owned(),
        "/etc/passwd".to_owned(),
    ] {
        let out = run("read-file", &g, b"", &[&escape]);
        assert!(
            matches!(out.ending, Ending::Exit(_)),
            "{escape}: {:?}",
            out.ending
        );
        assert!(
            out.output.is_none(),
            "{escape}: nothing leaves a failed call"
        );
    }
}

#[test]
fn writes_need_a_write_root() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (ro, rw) = (base.join("ro"), base.join("rw"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&rw).unwrap();
    let g = grant("write-file", &[&ro], &[&rw], DEFAULT_LIMITS);

    let refused = ro.join("planted.txt");
    let out = run("write-file", &g, b"payload", &[refused.to_str().unwrap()]);
    assert!(matches!(out.ending, Ending::Exit(_)), "{:?}", out.ending);
    assert!(!refused.exists(), "a read-only root stays unwritten");

    let allowed = rw.join("out.txt");
    let out = run("write-file", &g, b"payload", &[allowed.to_str().unwrap()]);
    assert_eq!(
        out.ending,
        Ending::Success,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&allowed).unwrap(), b"payload");
}

#[test]
fn a_guest_made_symlink_cannot_point_out() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let rw = base.join("rw");
    std::fs::create_dir(&rw).unwrap();
    std::fs::write(base.join("outside.txt"), b"OUTSIDE-SECRET").unwrap();
    let g = grant("symlink-out", &[], &[&rw], DEFAULT_LIMITS);
    let link = rw.join("link");
    let target = base.join("outside.txt");
    let out = run(
        "symlink-out",
        &g,
        b"",
        &[link.to_str().unwrap(), target.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(out.output.as_deref().unwrap_or_default()).into_owned();
    assert!(!said.contains("OUTSIDE-SECRET"), "{said}");
}

#[test]
fn a_memory_bomb_hits_the_memory_ceiling() {
    let limits = Limits {
        max_memory_bytes: 16 << 20,
        ..DEFAULT_LIMITS
    };
    let g = grant("memory-bomb", &[], &[], limits);
    let out = run("memory-bomb", &g, b"", &[]);
    assert_eq!(
        out.ending,
        Ending::Exceeded(Exceeded::Memory),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.peak_memory_bytes <= 16 << 20);
}

#[test]
fn an_infinite_loop_hits_the_wall_clock_ceiling() {
    let limits = Limits {
        max_wall_ms: 100,
        ..DEFAULT_LIMITS
    };
    let g = grant("spin", &[], &[], limits);
    let out = run("spin", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::WallTime));
}

#[test]
fn an_output_flood_fails_closed() {
    let limits = Limits {
        max_output_bytes: 4096,
        ..DEFAULT_LIMITS
    };
    let g = grant("flood", &[], &[], limits);
    let out = run("flood", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::Output));
    assert!(
        out.output.is_none(),
        "output past the cap is never returned, not even truncated"
    );
}

#[test]
fn no_network_without_a_grant() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    let g = grant("net", &[], &[], DEFAULT_LIMITS);
    let out = run("net", &g, b"", &[&addr]);
    let said = String::from_utf8_lossy(out.output.as_deref().unwrap_or_default()).into_owned();
    assert!(said.contains("connect: error"), "{said} {:?}", out.ending);
    assert!(
        listener.accept().is_err(),
        "nothing reached the loopback listener"
    );
}

#[test]
fn a_panic_is_a_trap_and_an_exit_code_is_reported() {
    let g = grant("panic", &[], &[], DEFAULT_LIMITS);
    let out = run("panic", &g, b"", &[]);
    assert!(matches!(out.ending, Ending::Trap(_)), "{:?}", out.ending);
    let g = grant("exit-code", &[], &[], DEFAULT_LIMITS);
    let out = run("exit-code", &g, b"", &["7"]);
    assert!(
        matches!(out.ending, Ending::Exit(c) if c != 0),
        "{:?}",
        out.ending
    );
    assert!(out.output.is_none());
}
