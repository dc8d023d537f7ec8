//! Model A, adversarially: real components (committed under tests/fixtures/wasm),
//! both wasip2 commands and aegis:tool/tool world components, try to escape their
//! grant and exhaust its ceilings, and the sandbox refuses each.

use aegis_runtime::capability::{
    DEFAULT_LIMITS, Grant, Limits, NarrowingLimits, ToolKind, ToolManifest, ToolRegistry,
};
use aegis_runtime::sandbox::{
    CacheStats, CancelToken, Ending, Exceeded, Sandbox, SandboxError, Shape,
};
use sha2::{Digest, Sha256};
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
    // WASI 0.2's exit carries only ok or error: every non-zero status arrives as 1.
    assert_eq!(out.ending, Ending::Exit(1));
    assert!(out.output.is_none());
}

fn limits_with_output(max_output_bytes: u64) -> Limits {
    Limits {
        max_output_bytes,
        ..DEFAULT_LIMITS
    }
}

#[test]
fn each_guest_is_prepared_as_its_shape() {
    assert_eq!(sandbox().prepare(&guest("echo")).unwrap(), Shape::Command);
    assert_eq!(
        sandbox().prepare(&guest("world-reverse")).unwrap(),
        Shape::Tool
    );
}

#[test]
fn a_world_tool_gets_its_input_as_an_argument_and_returns_ok() {
    let g = grant("world-reverse", &[], &[], DEFAULT_LIMITS);
    let out = run("world-reverse", &g, b"hello, world", &[]);
    assert_eq!(out.ending, Ending::Success);
    assert_eq!(out.output.as_deref(), Some(&b"dlrow ,olleh"[..]));
    let out = run("world-reverse", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Success);
    assert_eq!(out.output.as_deref(), Some(&b""[..]));
}

#[test]
fn a_world_tools_err_is_a_tool_error_with_its_message() {
    let g = grant("world-refuse", &[], &[], DEFAULT_LIMITS);
    let out = run("world-refuse", &g, b"anything", &[]);
    assert_eq!(
        out.ending,
        Ending::ToolError("refused: this tool says no".into())
    );
    assert!(out.output.is_none(), "an err carries no output");
}

#[test]
fn a_world_tools_output_is_held_to_the_ceiling_at_the_byte() {
    let g = grant("world-reverse", &[], &[], limits_with_output(16));
    let out = run("world-reverse", &g, &[b'a'; 16], &[]);
    assert_eq!(out.ending, Ending::Success, "exactly at the cap is allowed");
    assert_eq!(out.output.as_deref(), Some(&[b'a'; 16][..]));
    let out = run("world-reverse", &g, &[b'a'; 17], &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::Output));
    assert!(out.output.is_none());
}

#[test]
fn a_world_output_flood_fails_closed() {
    let g = grant("world-flood", &[], &[], limits_with_output(4096));
    let out = run("world-flood", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::Output));
    assert!(
        out.output.is_none(),
        "output past the cap is never returned, not even truncated"
    );
}

#[test]
fn a_world_error_message_is_held_to_the_output_ceiling() {
    let g = grant("world-refuse", &[], &[], limits_with_output(8));
    let out = run("world-refuse", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::Output));
    assert!(out.output.is_none());
}

#[test]
fn a_world_tools_input_counts_against_its_memory_ceiling() {
    let limits = Limits {
        max_memory_bytes: 1 << 20,
        ..DEFAULT_LIMITS
    };
    let g = grant("world-reverse", &[], &[], limits);
    let out = run("world-reverse", &g, &vec![b'a'; 2 << 20], &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::Memory));
    assert!(out.peak_memory_bytes <= 1 << 20);
}

#[test]
fn a_world_tool_that_never_returns_hits_the_wall_clock_ceiling() {
    let limits = Limits {
        max_wall_ms: 100,
        ..DEFAULT_LIMITS
    };
    let g = grant("world-spin", &[], &[], limits);
    let out = run("world-spin", &g, b"", &[]);
    assert_eq!(out.ending, Ending::Exceeded(Exceeded::WallTime));
}

#[test]
fn a_component_of_neither_shape_is_refused_before_it_runs() {
    let g = grant("not-a-tool", &[], &[], DEFAULT_LIMITS);
    let err = sandbox()
        .run(&guest("not-a-tool"), &g, b"", &[])
        .unwrap_err();
    assert!(
        matches!(&err, SandboxError::Component { message, .. }
            if message.contains("exports neither wasi:cli/run nor the aegis tool world's run")),
        "{err}"
    );
}

#[test]
fn a_second_sandbox_loads_compiled_code_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("wasmtime");
    let g = grant("echo", &[], &[], DEFAULT_LIMITS);

    let first = Sandbox::with_cache_dir(&cache).unwrap();
    assert_eq!(first.prepare(&guest("echo")).unwrap(), Shape::Command);
    assert_eq!(first.cache_stats(), Some(CacheStats { hits: 0, misses: 1 }));
    let cached = walk(&cache);
    assert!(!cached.is_empty(), "the compiled component was written");
    let before = first.run(&guest("echo"), &g, b"cached?", &[]).unwrap();
    drop(first);

    let second = Sandbox::with_cache_dir(&cache).unwrap();
    let after = second.run(&guest("echo"), &g, b"cached?", &[]).unwrap();
    assert_eq!(
        second.cache_stats(),
        Some(CacheStats { hits: 1, misses: 0 }),
        "the second sandbox compiled nothing"
    );
    assert_eq!(after.ending, Ending::Success);
    assert_eq!(after.output, before.output);
    assert_eq!(walk(&cache), cached, "nothing new was written");
}

#[test]
fn no_cache_unless_asked() {
    assert_eq!(sandbox().cache_stats(), None);
}

#[test]
fn a_cache_directory_others_can_reach_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = Sandbox::with_cache_dir(&open).unwrap_err();
    assert!(matches!(err, SandboxError::Cache { .. }), "{err}");

    let fresh = dir.path().join("a/b/fresh");
    Sandbox::with_cache_dir(&fresh).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "a directory it creates is private");
}

/// Every file under `dir`, sorted.
/// The compiled entries under `dir`: wasmtime's cache worker also keeps usage
/// counters (`*.stats`) and cleanup markers (`.cleanup.wip-<pid>`), written from its
/// own thread whenever it gets to them, which are bookkeeping, not compiled code.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                todo.push(path);
            } else if !name.ends_with(".stats")
                // wasmtime's cache worker writes a hit's usage stats in the background,
                // through a temporary file of this name: bookkeeping, not compiled code.
                && !name.ends_with(".wip-atomic-write-stats")
                && !name.starts_with(".cleanup")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The committed guests are the ones SHA256SUMS names, byte for byte: a rebuilt
/// guest committed without its checksum (or the reverse) fails here.
#[test]
fn committed_guests_match_sha256sums() {
    let wasm = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm");
    let sums = std::fs::read_to_string(wasm.join("SHA256SUMS")).unwrap();
    let mut listed = Vec::new();
    for line in sums.lines() {
        let (hex, name) = line.split_once("  ").unwrap();
        let bytes = std::fs::read(wasm.join(name)).unwrap();
        let actual = aegis_record::digest::encode_hex(&Sha256::digest(&bytes));
        assert_eq!(actual, hex, "{name}");
        listed.push(name.to_owned());
    }
    let mut present: Vec<String> = std::fs::read_dir(&wasm)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wasm"))
        .collect();
    present.sort();
    listed.sort();
    assert_eq!(present, listed, "every .wasm is listed, and only those");
}

/// A world component that imports WASI gets the same grant-shaped context as a
/// command: its file reads stay inside the read roots.
#[test]
fn a_world_tool_using_wasi_sees_only_its_grant() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let root = base.join("granted");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("notes.md"), b"meeting at 10").unwrap();
    std::fs::write(base.join("secret"), b"do not read").unwrap();
    let g = grant("world-read-file", &[&root], &[], DEFAULT_LIMITS);
    assert_eq!(
        sandbox().prepare(&guest("world-read-file")).unwrap(),
        Shape::Tool
    );

    let inside = root.join("notes.md");
    let out = run(
        "world-read-file",
        &g,
        inside.to_str().unwrap().as_bytes(),
        &[],
    );
    assert_eq!(out.ending, Ending::Success);
    assert_eq!(out.output.as_deref(), Some(&b"meeting at 10"[..]));

    for escape in [root.join("../secret"), base.join("secret")] {
        let escape = escape.to_str().unwrap();
        let out = run("world-read-file", &g, escape.as_bytes(), &[]);
        assert!(
            matches!(&out.ending, Ending::ToolError(m) if m.starts_with(escape)),
            "{escape}: {:?}",
            out.ending
        );
        assert!(out.output.is_none());
    }
}

#[test]
fn no_call_sees_memory_an_earlier_call_left_behind() {
    // world-remember returns what sits at three fixed addresses, then writes its input
    // there. Pooled slots are reused between calls; each must start as the module's
    // image: zeros, and its data segment as written.
    let g = grant("world-remember", &[], &[], DEFAULT_LIMITS);
    for i in 0..8 {
        let secret = format!("secret number {i} from an earlier call");
        let out = run("world-remember", &g, secret.as_bytes(), &[]);
        assert_eq!(out.ending, Ending::Success);
        let seen = out.output.unwrap();
        assert_eq!(
            seen,
            aegis_test_support::remember_fresh(),
            "call {i} saw {:?}",
            String::from_utf8_lossy(&seen)
        );
    }
}

#[test]
fn a_call_beyond_the_pool_is_refused_before_it_starts_and_the_slot_comes_back() {
    use aegis_runtime::sandbox::Options;
    let small = Sandbox::with_options(&Options {
        concurrent_calls: Some(1),
        ..Options::default()
    })
    .unwrap();
    let slow = grant(
        "spin",
        &[],
        &[],
        Limits {
            max_wall_ms: 1_500,
            ..DEFAULT_LIMITS
        },
    );
    let quick = grant("world-reverse", &[], &[], DEFAULT_LIMITS);
    small.prepare(&guest("spin")).unwrap();
    small.prepare(&guest("world-reverse")).unwrap();
    std::thread::scope(|s| {
        // The spinning call retries until it holds the slot (the probe below may hold
        // it for a moment first).
        let busy = s.spawn(|| {
            loop {
                match small.run(&guest("spin"), &slow, b"", &[]) {
                    Err(SandboxError::AtCapacity(_)) => std::thread::yield_now(),
                    other => return other.unwrap(),
                }
            }
        });
        // While the spinning call holds the only slot, another call is refused.
        let mut refused = false;
        let give_up = std::time::Instant::now() + std::time::Duration::from_millis(1_400);
        while !refused && std::time::Instant::now() < give_up && !busy.is_finished() {
            match small.run(&guest("world-reverse"), &quick, b"ab", &[]) {
                Err(SandboxError::AtCapacity(why)) => {
                    assert!(why.contains("concurrent"), "{why}");
                    refused = true;
                }
                Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(
            refused,
            "a second call while the pool was full was not refused"
        );
        assert_eq!(
            busy.join().unwrap().ending,
            Ending::Exceeded(Exceeded::WallTime)
        );
    });
    // The slot is back.
    let out = small
        .run(&guest("world-reverse"), &quick, b"ab", &[])
        .unwrap();
    assert_eq!(out.output.as_deref(), Some(&b"ba"[..]));
}

/// Runs `name` with `token` in another thread, cancelling it from this one; `None` if
/// the call did not return within a minute (its own ceiling is an hour).
fn cancelled_run(
    name: &'static str,
    token: CancelToken,
    why: &str,
) -> Option<aegis_runtime::sandbox::Execution> {
    let limits = Limits {
        max_wall_ms: 3_600_000,
        ..DEFAULT_LIMITS
    };
    let g = grant(name, &[], &[], limits);
    let (tx, rx) = std::sync::mpsc::channel();
    let running = token.clone();
    std::thread::spawn(move || {
        let out = sandbox().run_cancellable(&guest(name), &g, b"", &[], &running);
        let _ = tx.send(out);
    });
    // Whether the call is already running or not yet started, it must stop.
    std::thread::sleep(std::time::Duration::from_millis(200));
    token.cancel(why);
    let out = rx.recv_timeout(std::time::Duration::from_secs(60)).ok()?;
    Some(out.unwrap())
}

#[test]
fn a_cancelled_call_stops_whether_it_waits_in_a_host_call_or_spins() {
    for name in ["sleep", "spin", "world-spin"] {
        let out = cancelled_run(name, CancelToken::new(), "operator pressed ctrl-c")
            .unwrap_or_else(|| panic!("{name}: the cancelled call did not stop"));
        assert_eq!(
            out.ending,
            Ending::Cancelled("operator pressed ctrl-c".into()),
            "{name}"
        );
        assert_eq!(out.output, None, "{name}");
    }
    // The sandbox is still usable.
    let g = grant("echo", &[], &[], DEFAULT_LIMITS);
    assert_eq!(run("echo", &g, b"still here", &[]).ending, Ending::Success);
}

#[test]
fn a_token_cancelled_before_the_call_stops_it_before_it_runs() {
    let token = CancelToken::new();
    token.cancel("first");
    token.cancel("second");
    assert_eq!(
        token.reason().as_deref(),
        Some("first"),
        "the first reason is kept"
    );
    let g = grant("world-reverse", &[], &[], DEFAULT_LIMITS);
    let out = sandbox()
        .run_cancellable(&guest("world-reverse"), &g, b"abc", &[], &token)
        .unwrap();
    assert_eq!(out.ending, Ending::Cancelled("first".into()));
    assert_eq!(out.output, None);
    // Nothing was instantiated: not even the memory the input would have needed.
    assert_eq!(out.peak_memory_bytes, 0);
}

#[test]
fn stderr_is_held_to_the_output_ceiling_whatever_the_ending() {
    let limits = Limits {
        max_output_bytes: 100,
        ..DEFAULT_LIMITS
    };
    // The panic message and the flood's stderr are both over 100 bytes.
    for name in ["panic", "stderr-flood"] {
        let g = grant(name, &[], &[], limits);
        let out = run(name, &g, b"", &[]);
        assert!(
            out.stderr.len() <= 100,
            "{name}: {} bytes",
            out.stderr.len()
        );
        assert!(!out.stderr.is_empty(), "{name}: the first bytes are kept");
    }
}
