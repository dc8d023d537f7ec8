//! `aegis confine` as an attacker's program sees it: real Landlock and seccomp on this
//! kernel, a real Python and Node, real listeners the program tries to reach.
//!
//! Each escape is tried by tests/fixtures/confine/probe.py, which prints what every try
//! got; the assertions are exact, so a probe that starts succeeding fails the test.
#![cfg(target_os = "linux")]

use crate::common::text;
use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_aegis");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/confine")
        .join(name)
}

/// The interpreter itself, not a shim script in front of it (pyenv's would exec
/// another program outside the exec-support set).
fn python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is on PATH");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A directory with `in/a.txt` (granted read), `out/` (granted write) and
/// `secret.txt` beside them (granted nothing).
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    std::fs::write(dir.path().join("in/a.txt"), "granted").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    dir
}

/// Listeners the probes try to reach, and a check that nothing reached them.
struct Doors {
    tcp: TcpListener,
    udp: UdpSocket,
    unix: UnixListener,
    unix_path: PathBuf,
    abstract_listener: UnixListener,
    abstract_name: String,
}

impl Doors {
    fn open(d: &Path, tag: &str) -> Doors {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix_path = d.join("bus.sock");
        let unix = UnixListener::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        let abstract_name = format!("aegis-confine-test-{tag}-{}", std::process::id());
        let abstract_listener =
            UnixListener::bind_addr(&SocketAddr::from_abstract_name(&abstract_name).unwrap())
                .unwrap();
        abstract_listener.set_nonblocking(true).unwrap();
        Doors {
            tcp,
            udp,
            unix,
            unix_path,
            abstract_listener,
            abstract_name,
        }
    }

    fn args(&self, d: &Path) -> Vec<std::ffi::OsString> {
        vec![
            d.into(),
            self.tcp.local_addr().unwrap().port().to_string().into(),
            self.udp.local_addr().unwrap().port().to_string().into(),
            self.unix_path.clone().into(),
            self.abstract_name.clone().into(),
        ]
    }

    fn assert_untouched(&self) {
        let would_block = Some(ErrorKind::WouldBlock);
        assert_eq!(self.tcp.accept().err().map(|e| e.kind()), would_block);
        assert_eq!(
            self.udp.recv(&mut [0; 16]).err().map(|e| e.kind()),
            would_block
        );
        assert_eq!(self.unix.accept().err().map(|e| e.kind()), would_block);
        assert_eq!(
            self.abstract_listener.accept().err().map(|e| e.kind()),
            would_block
        );
    }
}

/// Runs `interpreter script` confined (read `in/`, write `out/`), with descriptor 7
/// left open by the launching shell, and returns what each probe got.
fn probe(
    dir: &Path,
    doors: &Doors,
    interpreter: &Path,
    script: &str,
) -> std::collections::BTreeMap<String, String> {
    // The script is read under the grant like any other file.
    let copy = dir.join("in").join(script);
    std::fs::copy(fixture(script), &copy).unwrap();
    // bash leaves descriptor 7 open (no close-on-exec) across its exec of aegis.
    let out: Output = Command::new("bash")
        .arg("-c")
        .arg("exec 7<\"$0\"; exec \"$@\"")
        .arg(dir.join("secret.txt"))
        .arg(BIN)
        .arg("confine")
        .arg("--allow-read")
        .arg(dir.join("in"))
        .arg("--allow-write")
        .arg(dir.join("out"))
        .arg("--")
        .arg(interpreter)
        .arg(&copy)
        .args(doors.args(dir))
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("full enforcement, ABI"), "{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn assert_probes(got: &std::collections::BTreeMap<String, String>, expected: &[(&str, &str)]) {
    for (probe, want) in expected {
        assert_eq!(
            got.get(*probe).map(String::as_str),
            Some(*want),
            "{probe}: {got:?}"
        );
    }
    assert_eq!(got.len(), expected.len(), "{got:?}");
}

#[test]
fn a_confined_python_cannot_leave_its_grant_by_any_door_it_tries() {
    let dir = tree();
    let d = dir.path();
    let doors = Doors::open(d, "py");
    let got = probe(d, &doors, &python(), "probe.py");
    assert_probes(
        &got,
        &[
            ("read_granted", "ok"),
            ("read_outside", "PermissionError"),
            ("list_outside", "PermissionError"),
            ("write_granted", "ok"),
            ("write_read_only", "PermissionError"),
            ("write_outside", "PermissionError"),
            ("tcp_loopback", "PermissionError"),
            ("udp", "PermissionError"),
            ("unix_pathname", "PermissionError"),
            ("unix_abstract", "PermissionError"),
            ("signal_parent", "PermissionError"),
            ("inherited_fd", "none"),
        ],
    );
    doors.assert_untouched();
    assert!(!d.join("escape.txt").exists());
    assert_eq!(std::fs::read_to_string(d.join("out/b.txt")).unwrap(), "x");
}

#[test]
fn a_confined_node_cannot_leave_its_grant_by_any_door_it_tries() {
    let dir = tree();
    let d = dir.path();
    let doors = Doors::open(d, "node");
    let got = probe(d, &doors, Path::new("node"), "probe.js");
    // Landlock refuses paths with EACCES; seccomp and Landlock's scopes with EPERM.
    assert_probes(
        &got,
        &[
            ("read_granted", "ok"),
            ("read_outside", "EACCES"),
            ("list_outside", "EACCES"),
            ("write_granted", "ok"),
            ("write_read_only", "EACCES"),
            ("write_outside", "EACCES"),
            ("tcp_loopback", "EPERM"),
            ("udp", "EPERM"),
            ("unix_pathname", "EPERM"),
            ("unix_abstract", "EPERM"),
            ("signal_parent", "EPERM"),
            ("inherited_fd", "none"),
        ],
    );
    doors.assert_untouched();
    assert!(!d.join("escape.txt").exists());
}

/// A rule path that cannot be opened makes the required confinement impossible: the
/// command is not started, exit 125, one line naming the path. With --best-effort it
/// runs, and the gap is printed.
#[test]
fn an_unenforceable_confinement_starts_nothing_unless_best_effort() {
    let dir = tree();
    let marker = dir.path().join("out/ran");
    let missing = dir.path().join("no/such/dir");
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .arg("confine")
            .arg("--allow-read")
            .arg(&missing)
            .arg("--allow-write")
            .arg(dir.path().join("out"))
            .args(extra)
            .args(["--", "touch"])
            .arg(&marker)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    // The profile line, then the one line saying why.
    assert!(
        stderr.starts_with("aegis: profile default (embedded)\n"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(!marker.exists(), "the command ran");

    let out = run(&["--best-effort"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("partial enforcement"), "{stderr}");
    assert!(stderr.contains("not enforced: rule path"), "{stderr}");
    assert!(marker.exists());
}

/// x32 syscall numbers reach the same kernel functions under other numbers; the filter
/// kills the process, and the kill is named.
#[test]
#[cfg(target_arch = "x86_64")]
fn an_x32_syscall_is_killed_and_said_to_be_seccomp() {
    let out = Command::new(BIN)
        .args(["confine", "--"])
        .arg(python())
        .args([
            "-c",
            "import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39); print('survived')",
        ])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 31), "{stderr}");
    assert!(
        stderr.contains("killed by SIGSYS (the seccomp filter kills"),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains("survived"));
}

#[test]
fn a_missing_command_exits_127_and_a_report_can_be_written() {
    let out = Command::new(BIN)
        .args(["confine", "--", "no-such-command-aegis"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));

    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = Command::new(BIN)
        .arg("confine")
        .arg("--report")
        .arg(&report)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["enforcement"], "full");
    assert_eq!(r["details"]["no_new_privs"], true);
    assert_eq!(r["details"]["landlock"]["kernel_abi"], r["abi"]);
    assert_eq!(
        r["details"]["seccomp"]["sha256"].as_str().unwrap().len(),
        64
    );
    assert!(
        r["details"]["rules"]["read"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p != "/etc" && p != "/")
    );
}

/// `wrap` under a confining profile refuses to start a server it cannot confine (exit
/// 125, nothing started, nothing recorded); grants without a confining profile are a
/// usage error rather than silently unconfined.
#[test]
fn wrap_fails_closed_and_grants_need_a_confining_profile() {
    let dir = tree();
    let marker = dir.path().join("out/ran");
    let out = Command::new(BIN)
        .args(["--profile", "linux-confined", "wrap", "--allow-read"])
        .arg(dir.path().join("no/such"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("no/such"), "{stderr}");
    assert!(!marker.exists(), "the server ran");

    let out = Command::new(BIN)
        .args(["wrap", "--allow-read"])
        .arg(dir.path())
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("names no confinement backend"), "{stderr}");
    assert!(!marker.exists(), "the server ran");
}

/// A wrapped server that seccomp kills mid-call: the client gets an error, and the
/// call's outcome in the record says it was SIGSYS.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_wrapped_server_killed_by_seccomp_is_recorded_as_such() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tree();
    let server = dir.path().join("in/echo_server.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/echo_server.py"),
        &server,
    )
    .unwrap();
    let key = dir.path().join("k");
    assert!(
        Command::new(BIN)
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap()
            .status
            .success()
    );
    let record = dir.path().join("out/record.jsonl");
    let mut child = Command::new(BIN)
        .args(["--profile", "linux-confined", "wrap", "--allow-read"])
        .arg(dir.path().join("in"))
        .arg("--audit")
        .arg(&record)
        .arg("--signing-key")
        .arg(&key)
        .arg("--")
        .arg(python())
        .arg(&server)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |line: &str| {
        to.write_all(line.as_bytes()).unwrap();
        to.write_all(b"\n").unwrap();
        let mut answer = String::new();
        from.read_line(&mut answer).unwrap();
        answer
    };
    ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    ask(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#);
    let answer = ask(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x32"}}}"#,
    );
    assert!(answer.contains(r#""id":3,"error""#), "{answer}");
    drop(to);
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 31), "{stderr}");
    let lines = std::fs::read_to_string(&record).unwrap();
    let outcome = lines
        .lines()
        .find(|l| l.contains(r#""line_type":"outcome""#))
        .expect("an outcome");
    assert!(
        outcome.contains("was killed by SIGSYS (a confining seccomp filter kills"),
        "{outcome}"
    );
    let verified = Command::new(BIN)
        .arg("verify")
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

/// `--allow-net HOST:PORT` opens that TCP port and no other: Landlock's port rule
/// (the seccomp filter now lets inet sockets be made).
#[test]
fn a_granted_port_is_reachable_and_the_next_one_is_not() {
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let (g, o) = (
        granted.local_addr().unwrap().port(),
        other.local_addr().unwrap().port(),
    );
    let script = format!(
        "import socket\n\
         for port in ({g}, {o}):\n\
         \x20   try:\n\
         \x20       socket.create_connection(('127.0.0.1', port), timeout=5).close()\n\
         \x20       print(port, 'ok')\n\
         \x20   except Exception as e:\n\
         \x20       print(port, type(e).__name__)\n"
    );
    let out = Command::new(BIN)
        .args(["confine", "--allow-net"])
        .arg(format!("127.0.0.1:{g}"))
        .arg("--")
        .arg(python())
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{g} ok\n{o} PermissionError\n"));
    assert!(granted.accept().is_ok());
    assert_eq!(
        other.accept().err().map(|e| e.kind()),
        Some(ErrorKind::WouldBlock)
    );
}

/// The backend loaded from its cdylib (named by path in a profile) confines as the
/// built-in does, and the report names the library.
#[test]
fn the_loadable_backend_confines_like_the_builtin() {
    let dir = tree();
    let library = aegis_test_support::cdylib("aegis-confine-landlock-plugin");
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"p\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\n\
             config = {{ verdict = \"allow\" }}\n[capability]\n[sandbox]\n\
             confinement = {{ plugin = {:?} }}\n[audit]\nplugin = \"builtin:memory-sink\"\n",
            library.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--profile")
        .arg(&profile)
        .args(["confine", "--report", "-", "--", "cat"])
        .arg(dir.path().join("secret.txt"))
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    assert!(
        stderr.contains(&format!("\"plugin\":\"{}\"", library.display())),
        "{stderr}"
    );
}

/// Calls that reach the kernel past Landlock's checks: unconfined, each succeeds here
/// (checked first, so the test shows the filter is what refuses them); confined, each
/// fails with EPERM.
#[test]
#[cfg(target_arch = "x86_64")]
fn io_uring_ptrace_and_namespaces_are_refused() {
    let script = "import ctypes\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        params = ctypes.create_string_buffer(120)\n\
        calls = [('io_uring_setup', 425, (1, params)), ('ptrace_traceme', 101, (0, 0, 0, 0)),\n\
        \x20        ('unshare_user', 272, (0x10000000,))]\n\
        for name, nr, args in calls:\n\
        \x20   ctypes.set_errno(0)\n\
        \x20   r = libc.syscall(nr, *args)\n\
        \x20   print(name, 'ok' if r >= 0 else ctypes.get_errno())\n";
    let bare = Command::new(python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert_eq!(
        text(&bare.stdout),
        "io_uring_setup ok\nptrace_traceme ok\nunshare_user ok\n",
        "unconfined, each call works on this machine: {}",
        text(&bare.stderr)
    );
    let out = Command::new(BIN)
        .args(["confine", "--"])
        .arg(python())
        .args(["-c", script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "io_uring_setup 1\nptrace_traceme 1\nunshare_user 1\n"
    );
}

/// What Landlock does not cover, refused by the filter whoever owns the file or process:
/// mode, owner and xattr changes outside the grant (the program runs as root here),
/// acting on the parent by pid, System V IPC, new namespaces through `clone` and
/// `clone3`, and — with a port granted — the ways around Landlock's TCP connect rule
/// (MPTCP, TCP Fast Open) and netlink beyond routes.
#[test]
fn what_landlock_does_not_cover_is_refused_by_the_filter() {
    let dir = tree();
    let outside = dir.path().join("secret.txt");
    let script = dir.path().join("in/surface.py");
    std::fs::copy(fixture("surface.py"), &script).unwrap();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let granted = TcpListener::bind("127.0.0.1:0").unwrap();
    let mode_before = std::fs::metadata(&outside).unwrap().permissions();
    let out = Command::new(BIN)
        .args(["confine", "--allow-read"])
        .arg(dir.path().join("in"))
        .arg("--allow-net")
        .arg(format!(
            "127.0.0.1:{}",
            granted.local_addr().unwrap().port()
        ))
        .arg("--")
        .arg(python())
        .arg(&script)
        .arg(&outside)
        .arg(other.local_addr().unwrap().port().to_string())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let got: std::collections::BTreeMap<String, String> =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_probes(
        &got,
        &[
            ("chmod_outside", "EPERM"),
            ("chown_outside", "EPERM"),
            ("setxattr_outside", "EPERM"),
            ("prlimit_parent", "EPERM"),
            ("setpriority_parent", "EPERM"),
            ("setpriority_group", "EPERM"),
            ("setpriority_user", "EPERM"),
            ("affinity_parent", "EPERM"),
            ("prlimit_self", "ok"),
            ("shmget", "EPERM"),
            ("msgget", "EPERM"),
            ("clone_newuser", "EPERM"),
            ("clone3", "ENOSYS"),
            ("mptcp_socket", "EPERM"),
            ("netlink_netfilter", "EPERM"),
            ("netlink_route", "ok"),
            ("msg_fastopen", "EPERM"),
            ("tcp_fastopen_connect", "EPERM"),
        ],
    );
    assert_eq!(
        std::fs::metadata(&outside).unwrap().permissions(),
        mode_before
    );
    assert_eq!(
        other.accept().err().map(|e| e.kind()),
        Some(ErrorKind::WouldBlock)
    );
}

/// A grant path that is a symlink grants its target; the report says so.
#[test]
fn a_symlinked_grant_is_reported_with_what_it_opened() {
    let dir = tree();
    let link = dir.path().join("out/docs");
    std::os::unix::fs::symlink(dir.path().join("in"), &link).unwrap();
    let out = Command::new(BIN)
        .args(["confine", "--report", "-", "--allow-read"])
        .arg(&link)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    let followed = report["details"]["rules"]["followed"].as_array().unwrap();
    let entry = serde_json::json!({
        "asked": link.to_str().unwrap(),
        "opened": dir.path().join("in").to_str().unwrap(),
    });
    assert!(followed.contains(&entry), "{stderr}");
}

/// A directory for the inode tests, on the filesystem the build is on (a real disk
/// here, where `/tmp` may be a tmpfs without inode flags).
fn disk_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    dir
}

/// The flags `lsattr` shows for `path` (e2fsprogs' letters, `-` for each unset one).
fn lsattr(path: &Path) -> String {
    let out = Command::new("lsattr")
        .arg("-d")
        .arg(path)
        .output()
        .expect("lsattr (e2fsprogs) is on PATH");
    assert!(out.status.success(), "lsattr: {}", text(&out.stderr));
    text(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Regression for issue 29's finding: `chattr +d` / `chattr +S` on a file granted only
/// read succeeded, as Landlock does not govern `FS_IOC_SETFLAGS` on a regular file.
/// The same calls work on this filesystem unconfined (checked first, so the filter is
/// what refuses them), and they are refused on a file granted write as well: the
/// filter cannot tell the two apart.
#[test]
fn chattr_on_a_file_granted_read_is_refused() {
    let dir = disk_tree();
    let d = dir.path();
    let read_only = d.join("in/a.txt");
    let writable = d.join("out/b.txt");
    let scratch = d.join("scratch.txt");
    for f in [&read_only, &writable, &scratch] {
        std::fs::write(f, "x").unwrap();
    }
    let bare = Command::new("chattr")
        .args(["+d", "+S"])
        .arg(&scratch)
        .output()
        .expect("chattr (e2fsprogs) is on PATH");
    assert!(bare.status.success(), "{}", text(&bare.stderr));
    let set = lsattr(&scratch);
    assert!(set.contains('d') && set.contains('S'), "unconfined: {set}");

    for flag in ["+d", "+S"] {
        for file in [&read_only, &writable] {
            let before = lsattr(file);
            let out = Command::new(BIN)
                .args(["confine", "--allow-read"])
                .arg(d.join("in"))
                .arg("--allow-write")
                .arg(d.join("out"))
                .args(["--", "chattr", flag])
                .arg(file)
                .output()
                .unwrap();
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "chattr {flag}: {stderr}");
            assert!(stderr.contains("Operation not permitted"), "{stderr}");
            assert_eq!(lsattr(file), before, "chattr {flag} {}", file.display());
        }
    }
}

/// The other ways to change a file Landlock does not see: inode flags by
/// `FS_IOC_FSSETXATTR` and by path (`file_setattr`), the inode generation, an
/// encryption policy, fs-verity, and timestamps. Unconfined, the ones this filesystem
/// supports succeed; confined with read alone, every one fails with EPERM and nothing
/// changed. With a file granted write, the ioctls are still refused and timestamps
/// are allowed everywhere — the gap the non-guarantees name.
#[test]
fn inode_changes_past_landlock_are_refused_and_timestamps_follow_the_write_grant() {
    const PROBES: [&str; 7] = [
        "setflags",
        "setflags32",
        "fssetxattr",
        "setversion",
        "setversion_ext4",
        "utime",
        "futimens",
    ];
    let dir = disk_tree();
    let d = dir.path();
    let script = d.join("in/inode.py");
    std::fs::copy(fixture("inode.py"), &script).unwrap();
    let fill = |ro: &Path| {
        std::fs::create_dir_all(ro.join("crypt")).unwrap();
        for name in PROBES.iter().chain(&["verity"]) {
            std::fs::write(ro.join(name), "x").unwrap();
        }
    };
    let run = |confine: &[&str], ro: &Path, outside: &Path| {
        let mut c = if confine.is_empty() {
            Command::new(python())
        } else {
            let mut c = Command::new(BIN);
            c.arg("confine").args(confine).arg("--").arg(python());
            c
        };
        let out = c.arg(&script).arg(ro).arg(outside).output().unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}\n{}",
            text(&out.stderr)
        );
        serde_json::from_str::<std::collections::BTreeMap<String, String>>(stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };

    // Unconfined, on a copy: what this kernel and filesystem let an owner do.
    let bare_ro = d.join("bare");
    fill(&bare_ro);
    let bare_outside = d.join("bare-outside.txt");
    std::fs::write(&bare_outside, "x").unwrap();
    let bare = run(&[], &bare_ro, &bare_outside);
    for probe in [
        "setflags",
        "fssetxattr",
        "setversion",
        "setversion_ext4",
        "file_setattr_outside",
        "utime",
        "utime_outside",
        "futimens",
    ] {
        assert_eq!(
            bare.get(probe).map(String::as_str),
            Some("ok"),
            "unconfined, {probe} works on this machine: {bare:?}"
        );
    }

    let ro = d.join("in/ro");
    fill(&ro);
    let outside = d.join("secret.txt");
    let in_dir = d.join("in");
    let out_dir = d.join("out");
    let read = ["--allow-read", in_dir.to_str().unwrap()];
    let meta = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (lsattr(p), m.modified().unwrap())
    };
    let before: Vec<_> = PROBES
        .iter()
        .map(|p| meta(&ro.join(p)))
        .chain([meta(&outside)])
        .collect();
    let refused = run(&read, &ro, &outside);
    let mut expected: Vec<(&str, &str)> = PROBES.iter().map(|p| (*p, "EPERM")).collect();
    expected.extend([
        ("crypt", "EPERM"),
        ("verity", "EPERM"),
        ("file_setattr_outside", "EPERM"),
        ("utime_outside", "EPERM"),
    ]);
    assert_probes(&refused, &expected);
    let after: Vec<_> = PROBES
        .iter()
        .map(|p| meta(&ro.join(p)))
        .chain([meta(&outside)])
        .collect();
    assert_eq!(after, before);

    let read_write = [
        "--allow-read",
        in_dir.to_str().unwrap(),
        "--allow-write",
        out_dir.to_str().unwrap(),
    ];
    let with_write = run(&read_write, &ro, &outside);
    for (probe, want) in &mut expected {
        if ["utime", "futimens", "utime_outside"].contains(probe) {
            *want = "ok";
        }
    }
    assert_probes(&with_write, &expected);
}

/// `dir` with `bin/` (to be granted exec) holding a copy of `true` and a script, and
/// `other/` (granted read only) holding the same two; `bin/link` points to
/// `other/true`.
fn exec_tree() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    // A binary of its own, not a shell builtin.
    let truth = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("a true binary");
    for sub in ["bin", "other"] {
        let d = dir.path().join(sub);
        std::fs::create_dir(&d).unwrap();
        std::fs::copy(&truth, d.join("true")).unwrap();
        std::fs::write(d.join("tool.sh"), "#!/bin/sh\necho ran\n").unwrap();
        std::fs::set_permissions(d.join("tool.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    std::os::unix::fs::symlink(dir.path().join("other/true"), dir.path().join("bin/link")).unwrap();
    dir
}

/// `aegis confine GRANTS -- sh -c 'exec PROGRAM'`: the shell is in the exec-support
/// set; PROGRAM is what the grant must (or must not) let it run.
fn run_from_sh(grants: &[&str], dir: &Path, program: &str) -> Output {
    Command::new(BIN)
        .arg("confine")
        .args(
            grants
                .iter()
                .map(|g| g.replace("DIR", dir.to_str().unwrap())),
        )
        .args(["--", "sh", "-c"])
        .arg(format!("exec {}/{program}", dir.display()))
        .output()
        .unwrap()
}

/// `--allow-exec DIR` lets the program run a binary and a script beneath DIR; the same
/// files outside any exec grant, readable or not, are refused by the kernel (126 from
/// the shell), and a symlink in the granted directory to a binary outside it grants
/// nothing: Landlock checks the file the link resolves to.
#[test]
fn an_exec_grant_runs_what_is_beneath_it_and_nothing_else() {
    let dir = exec_tree();
    let d = dir.path();
    let granted = ["--allow-exec", "DIR/bin", "--allow-read", "DIR/other"];
    for program in ["bin/true", "bin/tool.sh"] {
        let out = run_from_sh(&granted, d, program);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{program}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        text(&run_from_sh(&granted, d, "bin/tool.sh").stdout),
        "ran\n"
    );
    for program in ["other/true", "other/tool.sh", "bin/link"] {
        let out = run_from_sh(&granted, d, program);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{program} ran: {stderr}");
        assert!(stderr.contains("Permission denied"), "{program}: {stderr}");
    }
    // Read alone does not let it run (the issue's `npx` failure, on purpose here).
    let out = run_from_sh(&["--allow-read", "DIR/bin"], d, "bin/true");
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    // Execute implies read: the granted script can be read as well as run.
    let out = run_from_sh(&["--allow-exec", "DIR/bin"], d, "bin/tool.sh");
    assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
    // A single file can be granted; its neighbour is not.
    let out = run_from_sh(&["--allow-exec", "DIR/bin/true"], d, "bin/true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run_from_sh(&["--allow-exec", "DIR/bin/true"], d, "bin/tool.sh");
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));

    // The report (and so wrap's open line) names the exec grant.
    let report = d.join("report.json");
    let out = Command::new(BIN)
        .arg("confine")
        .arg("--allow-exec")
        .arg(d.join("bin"))
        .arg("--report")
        .arg(&report)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let exec = r["details"]["rules"]["exec"].as_array().unwrap();
    assert!(
        exec.iter().any(|p| p == d.join("bin").to_str().unwrap()),
        "{exec:?}"
    );
}

/// An exec grant over the aegis binary or the signing key is refused before anything
/// starts, in one line naming the flag; reading the binary's directory is not (only a
/// secret is refused where it can be read).
#[test]
fn an_exec_grant_over_the_host_is_refused() {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let out = Command::new(BIN)
        .arg("confine")
        .arg("--allow-exec")
        .arg(bin_dir)
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("the aegis binary"), "{stderr}");
    assert!(
        stderr.contains(&format!("--allow-exec {}", bin_dir.display())),
        "{stderr}"
    );
    let out = Command::new(BIN)
        .arg("confine")
        .arg("--allow-read")
        .arg(bin_dir)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = Command::new(BIN)
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let marker = dir.path().join("ran");
    let out = Command::new(BIN)
        .args(["--profile", "linux-confined", "wrap", "--allow-exec"])
        .arg(dir.path())
        .arg("--audit")
        .arg(dir.path().join("record.jsonl"))
        .arg("--signing-key")
        .arg(&key)
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--signing-key"), "{stderr}");
    assert!(stderr.contains("--allow-exec"), "{stderr}");
    assert!(!marker.exists(), "the server ran");
}

/// Write and exec over one directory is allowed (npx and uvx run what they fetch into
/// their cache) with a one-line warning: the program can run what it writes there.
#[test]
fn write_and_exec_over_one_directory_warns_and_runs() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A rule path must exist when the program starts. The program cannot chmod, so it
    // rewrites an executable file already there (creating one with mode 0755 works too).
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::write(d.join("sub/w"), "").unwrap();
    std::fs::set_permissions(d.join("sub/w"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(BIN)
        .arg("confine")
        .arg("--allow-write")
        .arg(d)
        .arg("--allow-exec")
        .arg(d.join("sub"))
        .args(["--", "sh", "-c"])
        .arg(format!(
            "printf '#!/bin/sh\\necho written\\n' > {d}/sub/w && {d}/sub/w",
            d = d.display()
        ))
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "written\n");
    assert!(
        stderr.contains("warning: --allow-exec") && stderr.contains("can run anything it writes"),
        "{stderr}"
    );
}
