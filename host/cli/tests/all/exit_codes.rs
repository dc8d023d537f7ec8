//! Every exit code a command's `--help` documents (its EXIT STATUS section) is produced
//! by the real binary in the situation the help names, and every code this test
//! produces is documented: the help, the README and the program cannot drift apart.
//!
//! The few codes no test can provoke from outside are listed in `NOT_PROVOKED` with the
//! reason; a code documented and neither provoked nor listed fails the test.

use crate::common::text;
use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Documented codes this test does not provoke, and why (where another test does).
const NOT_PROVOKED: &[(&str, u32, &str)] = &[
    (
        "run",
        11,
        "a rate budget is per process and at least 1, so one run is never limited (help says so)",
    ),
    (
        "run",
        16,
        "the sandbox failing to start a registered component needs a host fault",
    ),
    (
        "run",
        17,
        "a record failing after its open line needs a failing disk",
    ),
    (
        "rotate",
        17,
        "the hand-off or close failing after the open line needs a failing disk",
    ),
    (
        "wrap",
        17,
        "a record failing after its open line needs a failing disk",
    ),
    (
        "gateway",
        17,
        "a record failing after its open line needs a failing disk",
    ),
];

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c.stdin(Stdio::null());
    c
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn guest(name: &str) -> PathBuf {
    root().join(format!("tests/fixtures/wasm/{name}.wasm"))
}

/// The codes `aegis <command> --help` lists under EXIT STATUS (`N` and `128+N`, which
/// stand for a server's own status, are not codes).
fn documented(command: &str) -> BTreeSet<u32> {
    let out = aegis()
        .args(command.split(' '))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{command} --help");
    let help = text(&out.stdout);
    let section = help
        .split_once("EXIT STATUS:\n")
        .unwrap_or_else(|| panic!("{command} --help has no EXIT STATUS:\n{help}"))
        .1;
    let mut codes = BTreeSet::new();
    for line in section.lines() {
        let Some(rest) = line.strip_prefix("  ") else {
            break;
        };
        let first = rest.split_whitespace().next().unwrap_or("");
        for code in first.split('/') {
            if let Ok(n) = code.parse() {
                codes.insert(n);
            }
        }
    }
    assert!(!codes.is_empty(), "{command}: no codes in\n{help}");
    codes
}

/// One command's provoked codes, checked against its help.
struct Table {
    command: &'static str,
    seen: BTreeSet<u32>,
}

impl Table {
    fn new(command: &'static str) -> Table {
        Table {
            command,
            seen: BTreeSet::new(),
        }
    }

    /// `out` ended with `code`, as the situation `what` should.
    fn expect(&mut self, code: u32, what: &str, out: &Output) {
        assert_eq!(
            out.status.code(),
            Some(code as i32),
            "{} ({what}): stdout {} stderr {}",
            self.command,
            text(&out.stdout),
            text(&out.stderr)
        );
        self.seen.insert(code);
    }

    fn run(&mut self, code: u32, what: &str, command: &mut Command) {
        let out = command.output().unwrap();
        self.expect(code, what, &out);
    }

    /// Every documented code was provoked or is listed as not provokable, and every
    /// provoked code is documented.
    fn done(self) {
        let documented = documented(self.command);
        let skipped: BTreeSet<u32> = NOT_PROVOKED
            .iter()
            .filter(|(c, _, _)| *c == self.command)
            .map(|(_, code, _)| *code)
            .collect();
        let missing: Vec<_> = documented
            .iter()
            .filter(|c| !self.seen.contains(c) && !skipped.contains(c))
            .collect();
        assert!(
            missing.is_empty(),
            "{}: documented but not provoked: {missing:?}",
            self.command
        );
        let undocumented: Vec<_> = self.seen.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "{}: provoked but not documented: {undocumented:?}",
            self.command
        );
    }
}

fn keygen(dir: &Path) -> PathBuf {
    let key = dir.join("k");
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    key
}

/// A regular file that cannot be written to at all: writes to it fail (ENOSPC).
fn full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// Reads `child`'s stderr until a line starting `prefix`; panics if it ends first.
fn await_line(child: &mut Child, prefix: &str) -> BufReader<std::process::ChildStderr> {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "ended before {prefix:?}: {seen}"
        );
        if line.starts_with(prefix) {
            return stderr;
        }
        seen.push_str(&line);
    }
}

fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, signal).unwrap();
}

#[test]
fn verify_codes_are_documented_and_produced() {
    let vectors = root().join("spec/vectors");
    let mut t = Table::new("verify");
    t.run(
        0,
        "verified",
        aegis()
            .arg("verify")
            .arg(vectors.join("golden/golden.aarl")),
    );
    t.run(
        1,
        "tampered",
        aegis()
            .arg("verify")
            .arg(vectors.join("tampered/chain_break.aarl")),
    );
    t.run(1, "usage", aegis().arg("verify"));
    t.run(
        2,
        "unreadable",
        aegis().args(["verify", "/nonexistent/r.aarl"]),
    );
    t.run(
        3,
        "indeterminate",
        aegis()
            .arg("verify")
            .arg(vectors.join("indeterminate/missing_line.aarl")),
    );
    t.done();
}

#[test]
fn recheck_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let vectors = root().join("spec/vectors");
    let key = keygen(dir.path());
    let allow = dir.path().join("allow.yaml");
    std::fs::write(&allow, "version: 1\ndefault: allow\nrules: []\n").unwrap();
    let deny = dir.path().join("deny.yaml");
    std::fs::write(&deny, "version: 1\ndefault: deny\nrules: []\n").unwrap();
    // One call, allowed and recorded.
    let record = dir.path().join("r.aarl");
    let out = run(
        "echo",
        "echo",
        &["--policy", allow.to_str().unwrap(), "--audit"],
    )
    .arg(&record)
    .arg("--signing-key")
    .arg(&key)
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let recheck = |policy: &Path, record: &Path| {
        let mut c = aegis();
        c.args(["recheck", "--policy"]).arg(policy).arg(record);
        c
    };
    let mut t = Table::new("recheck");
    t.run(0, "unchanged", &mut recheck(&allow, &record));
    t.run(1, "usage", aegis().arg("recheck"));
    t.run(
        2,
        "unreadable",
        &mut recheck(&allow, Path::new("/nonexistent/r.aarl")),
    );
    t.run(
        4,
        "policy refused",
        &mut recheck(Path::new("/nonexistent/p.yaml"), &record),
    );
    t.run(6, "changed", &mut recheck(&deny, &record));
    t.run(
        7,
        "undecidable (a call in flight)",
        &mut recheck(&allow, &vectors.join("indeterminate/unanchored_tail.aarl")),
    );
    t.run(
        8,
        "tampered",
        &mut recheck(&allow, &vectors.join("tampered/chain_break.aarl")),
    );
    t.done();
}

#[test]
fn keygen_and_key_show_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Table::new("keygen");
    let key = dir.path().join("k");
    t.run(0, "written", aegis().args(["keygen", "--out"]).arg(&key));
    t.run(1, "exists", aegis().args(["keygen", "--out"]).arg(&key));
    t.run(1, "usage", aegis().arg("keygen"));
    t.run(
        2,
        "a directory cannot be made",
        aegis().args(["keygen", "--out"]).arg(key.join("below")),
    );
    t.done();

    let mut t = Table::new("key show");
    t.run(0, "printed", aegis().args(["key", "show"]).arg(&key));
    t.run(1, "usage", aegis().args(["key", "show"]));
    t.run(
        2,
        "unreadable",
        aegis().args(["key", "show"]).arg(dir.path().join("none")),
    );
    let junk = dir.path().join("junk");
    std::fs::write(&junk, "not a seed\n").unwrap();
    std::fs::set_permissions(&junk, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    t.run(
        4,
        "not a seed file",
        aegis().args(["key", "show"]).arg(&junk),
    );
    t.done();
}

/// `aegis run` of `guest` as `id` with `extra` flags.
#[test]
fn rotate_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let old = keygen(dir.path());
    let next = dir.path().join("next");
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&next)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let record = dir.path().join("r.aarl");
    let rotate = |extra: &[&str], from: &Path, to: &Path| {
        let mut c = aegis();
        c.args(["rotate", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(from)
            .arg("--next-key")
            .arg(to)
            .args(extra);
        c
    };
    let mut t = Table::new("rotate");
    t.run(0, "rotated", &mut rotate(&[], &old, &next));
    t.run(1, "usage", aegis().args(["rotate", "--audit", "r.aarl"]));
    t.run(
        2,
        "key unreadable",
        &mut rotate(&[], &next, &dir.path().join("missing")),
    );
    t.run(4, "the same key", &mut rotate(&[], &next, &next));
    let holder = std::fs::File::open(&record).unwrap();
    holder.lock().unwrap();
    t.run(5, "busy", &mut rotate(&["--no-wait"], &next, &old));
    // A signal ends the wait for the busy record; nothing is written.
    for (sig, code) in [
        (rustix::process::Signal::HUP, 129),
        (rustix::process::Signal::INT, 130),
        (rustix::process::Signal::TERM, 143),
    ] {
        let mut child = rotate(&[], &next, &old)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _stderr = await_line(&mut child, "aegis: waiting for the record: ");
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "rotate after {sig:?}");
        t.seen.insert(code as u32);
    }
    drop(holder);
    t.done();
}

fn run(guest_name: &str, id: &str, extra: &[&str]) -> Command {
    let mut c = aegis();
    c.arg("run")
        .arg("--component")
        .arg(guest(guest_name))
        .args(["--id", id, "--input", "x"])
        .args(extra);
    c
}

#[test]
fn run_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: no-shell\n    action: deny\n    tool: shell\n  - id: later\n    action: pending_approval\n    tool: deploy\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let mut t = Table::new("run");
    t.run(0, "success", &mut run("echo", "echo", &[]));
    t.run(1, "usage", aegis().args(["run", "--component", "x.wasm"]));
    t.run(
        2,
        "input unreadable",
        aegis()
            .arg("run")
            .arg("--component")
            .arg(guest("echo"))
            .args(["--id", "echo", "--input-file", "/nonexistent/in"]),
    );
    t.run(
        4,
        "profile refused",
        run("echo", "echo", &["--profile", "no-such-profile"]).arg("--no-wait"),
    );
    // A record this test holds is busy.
    let record = dir.path().join("held.aarl");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();
    t.run(
        5,
        "busy",
        run("echo", "echo", &["--no-wait", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(&key),
    );
    drop(holder);
    t.run(10, "policy", &mut run("echo", "shell", &["--policy", p]));
    let queue = dir.path().join("queue");
    let q = queue.to_str().unwrap();
    t.run(
        12,
        "pending approval",
        &mut run("echo", "deploy", &["--policy", p, "--approvals", q]),
    );
    // 19: an approval used twice; 20: a park nobody decided before it expired.
    let park = |timeout: &str| {
        let out = run(
            "echo",
            "deploy",
            &[
                "--policy",
                p,
                "--approvals",
                q,
                "--json",
                "--approval-timeout",
                timeout,
            ],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(12), "{}", text(&out.stderr));
        let json = String::from_utf8(out.stdout).unwrap();
        let at = json.find("\"approval_id\":\"").unwrap() + 15;
        json[at..at + 36].to_owned()
    };
    let used = park("10m");
    let approve = aegis()
        .args([
            "approvals",
            "approve",
            &used,
            "--approvals",
            q,
            "--approver-key",
        ])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(approve.status.code(), Some(0), "{}", text(&approve.stderr));
    let resume = || {
        run(
            "echo",
            "deploy",
            &["--policy", p, "--approvals", q, "--approval", &used],
        )
    };
    assert_eq!(resume().output().unwrap().status.code(), Some(0));
    t.run(19, "approval used", &mut resume());
    let expired = park("1s");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    t.run(
        20,
        "approval expired",
        &mut run(
            "echo",
            "deploy",
            &["--policy", p, "--approvals", q, "--approval", &expired],
        ),
    );
    t.run(
        13,
        "capability",
        &mut run("echo", "echo", &["--capability", "net.http"]),
    );
    t.run(14, "trap", &mut run("panic", "p", &[]));
    t.run(
        15,
        "ceiling",
        &mut run("spin", "s", &["--max-wall-ms", "50"]),
    );
    // Signals: the sleeping guest is stopped, its outcome written, then the code.
    for (sig, code) in [
        (rustix::process::Signal::HUP, 129),
        (rustix::process::Signal::INT, 130),
        (rustix::process::Signal::TERM, 143),
    ] {
        let record = dir.path().join(format!("signal-{code}.aarl"));
        let mut child = run("sleep", "sleep", &["--max-wall-ms", "3600000", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(&key)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The intent on disk means the call has started.
        while !text(&std::fs::read(&record).unwrap_or_default())
            .contains("\"line_type\":\"intent\"")
        {
            assert!(child.try_wait().unwrap().is_none(), "run ended early");
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&child, sig);
        let out = child.wait_with_output().unwrap();
        t.expect(code, "signal", &out);
    }
    t.done();
}

#[test]
fn wrap_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let mut t = Table::new("wrap");
    // The server's own status passes through (documented as N).
    let out = aegis()
        .args(["wrap", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    t.run(1, "usage", aegis().arg("wrap"));
    t.run(
        2,
        "server not started",
        aegis().args(["wrap", "--", "/nonexistent/server"]),
    );
    t.run(
        4,
        "profile refused",
        aegis().args(["--profile", "no-such-profile", "wrap", "--", "true"]),
    );
    let record = dir.path().join("held.aarl");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();
    t.run(
        5,
        "busy",
        aegis()
            .args(["wrap", "--no-wait", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(&key)
            .args(["--", "true"]),
    );
    t.run(
        125,
        "not confinable (a grant that cannot be opened)",
        aegis()
            .args(["--profile", "linux-confined", "wrap", "--allow-read"])
            .arg(dir.path().join("no/such/dir"))
            .args(["--", "true"]),
    );
    // An executable file whose exec fails once confined (its interpreter is missing).
    let outside = dir.path().join("server.sh");
    std::fs::write(&outside, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(
        &outside,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    t.run(
        127,
        "the confined server cannot be executed",
        aegis()
            .args(["--profile", "linux-confined", "wrap", "--"])
            .arg(&outside),
    );
    t.done();
}

#[test]
fn pins_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let server = root().join("tests/fixtures/mcp/echo_server.py");
    let pins = |sub: &str, file: &Path, extra: &[&str], server_flags: &[&str]| {
        let mut c = aegis();
        c.args(["pins", sub])
            .arg(file)
            .args(extra)
            .arg("--")
            .arg("python3")
            .arg(&server)
            .args(server_flags);
        c
    };
    let confined = |sub: &str, file: &Path| {
        let mut c = aegis();
        c.args(["--profile", "linux-confined", "pins", sub])
            .arg(file);
        c
    };
    // An executable file whose exec fails once confined (its interpreter is missing).
    let outside = dir.path().join("server.sh");
    std::fs::write(&outside, "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(
        &outside,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let no_dir = dir.path().join("no/such/dir");
    let file = dir.path().join("pins.jsonl");
    // A signal while the server is listed: forwarded, the server ended, the signal's code.
    let interrupted = |t: &mut Table, sub: &str| {
        for (sig, code) in [
            (rustix::process::Signal::HUP, 129),
            (rustix::process::Signal::INT, 130),
            (rustix::process::Signal::TERM, 143),
        ] {
            let pid_file = dir.path().join(format!("{sub}-{code}.pid"));
            let mut child = pins(
                sub,
                &file,
                &["--timeout-ms", "60000"],
                &["--silent", "--pid-file", pid_file.to_str().unwrap()],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
            let server: i32 = loop {
                if let Ok(pid) = std::fs::read_to_string(&pid_file)
                    .unwrap_or_default()
                    .parse()
                {
                    break pid;
                }
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "pins {sub} ended early"
                );
                std::thread::sleep(Duration::from_millis(20));
            };
            signal(&child, sig);
            let status = child.wait().unwrap();
            assert_eq!(status.code(), Some(code), "pins {sub} after {sig:?}");
            t.seen.insert(code as u32);
            let gone =
                rustix::process::test_kill_process(rustix::process::Pid::from_raw(server).unwrap())
                    .is_err();
            assert!(
                gone,
                "pins {sub} left its server {server} running after {sig:?}"
            );
        }
    };

    let mut t = Table::new("pins accept");
    t.run(0, "written (created)", &mut pins("accept", &file, &[], &[]));
    t.run(
        1,
        "a --tool neither pinned nor listed",
        &mut pins("accept", &file, &["--tool", "nope"], &[]),
    );
    t.run(
        2,
        "server not started",
        aegis()
            .args(["pins", "accept"])
            .arg(&file)
            .args(["--", "/nonexistent/server"]),
    );
    t.run(
        4,
        "profile refused",
        aegis()
            .args(["--profile", "no-such-profile", "pins", "accept"])
            .arg(&file)
            .args(["--", "true"]),
    );
    t.run(
        4,
        "a tool listed twice",
        &mut pins(
            "accept",
            &dir.path().join("dup.jsonl"),
            &[],
            &["--tool", "echo"],
        ),
    );
    t.run(
        125,
        "not confinable",
        confined("accept", &file)
            .arg("--allow-read")
            .arg(&no_dir)
            .args(["--", "true"]),
    );
    t.run(
        127,
        "the confined server cannot be executed",
        confined("accept", &file).arg("--").arg(&outside),
    );
    interrupted(&mut t, "accept");
    t.done();

    let mut t = Table::new("pins diff");
    t.run(0, "no difference", &mut pins("diff", &file, &[], &[]));
    t.run(1, "usage", aegis().args(["pins", "diff"]));
    t.run(
        2,
        "pins file unreadable",
        &mut pins("diff", &dir.path().join("none.jsonl"), &[], &[]),
    );
    t.run(
        4,
        "profile refused",
        aegis()
            .args(["--profile", "no-such-profile", "pins", "diff"])
            .arg(&file)
            .args(["--", "true"]),
    );
    t.run(
        9,
        "a changed description",
        &mut pins("diff", &file, &[], &["--description", "changed"]),
    );
    t.run(
        125,
        "not confinable",
        confined("diff", &file)
            .arg("--allow-read")
            .arg(&no_dir)
            .args(["--", "true"]),
    );
    t.run(
        127,
        "the confined server cannot be executed",
        confined("diff", &file).arg("--").arg(&outside),
    );
    interrupted(&mut t, "diff");
    t.done();
}

#[test]
fn console_codes_are_documented_and_produced() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let record = root().join("spec/vectors/golden/golden.aarl");
    let mut t = Table::new("console");
    t.run(1, "no record and no profile", aegis().arg("console"));
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token-for-the-test\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    t.run(
        2,
        "token file open to others",
        aegis()
            .args(["console", "--http", "127.0.0.1:0", "--token-file"])
            .arg(&token)
            .arg(&record),
    );
    // A key others can read is no key to sign decisions with.
    let key = keygen(dir.path());
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    t.run(
        4,
        "approver key refused",
        aegis()
            .args(["console", "--http", "127.0.0.1:0", "--approvals"])
            .arg(dir.path().join("queue"))
            .arg("--approver-key")
            .arg(&key)
            .arg(&record),
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    t.run(
        18,
        "address in use",
        aegis().args(["console", "--http", &addr]).arg(&record),
    );
    let mut serving = aegis()
        .args(["console", "--http", "127.0.0.1:0"])
        .arg(&record)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stderr = await_line(&mut serving, "aegis: console at ");
    signal(&serving, rustix::process::Signal::TERM);
    let out = serving.wait_with_output().unwrap();
    t.expect(0, "SIGTERM", &out);
    t.done();
}

#[test]
fn confine_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Table::new("confine");
    // The command's own status passes through (documented as N).
    let out = aegis()
        .args(["confine", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    t.run(1, "usage", aegis().arg("confine"));
    t.run(
        4,
        "profile refused",
        aegis().args(["--profile", "no-such-profile", "confine", "--", "true"]),
    );
    t.run(
        125,
        "not confinable",
        aegis()
            .args(["confine", "--allow-read"])
            .arg(dir.path().join("no/such/dir"))
            .args(["--", "true"]),
    );
    t.run(
        127,
        "not found",
        aegis().args(["confine", "--", "/nonexistent/command"]),
    );
    t.done();
}

#[test]
fn gateway_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let tools = root().join("tests/fixtures/gateway/tools.toml");
    let gateway = |extra: &[&str]| {
        let mut c = aegis();
        c.arg("gateway").arg("--tools").arg(&tools).args(extra);
        c
    };
    let mut t = Table::new("gateway");
    // A client that initializes, then leaves (closes stdin): served, record closed.
    {
        use std::io::Write as _;
        let mut child = gateway(&[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            )
            .unwrap();
        let mut answer = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut answer)
            .unwrap();
        assert!(answer.contains("\"id\":1"), "{answer}");
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        t.expect(0, "served", &out);
    }
    t.run(1, "usage", &mut gateway(&["--max-calls", "0"]));
    t.run(
        2,
        "manifest unreadable",
        aegis().args(["gateway", "--tools", "/nonexistent/tools.toml"]),
    );
    t.run(
        4,
        "profile refused",
        &mut gateway(&["--profile", "no-such-profile"]),
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    t.run(18, "address in use", &mut gateway(&["--http", &addr]));
    let record = dir.path().join("held.aarl");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();
    let held = |extra: &[&str]| {
        let mut c = gateway(&["--audit", record.to_str().unwrap()]);
        c.arg("--signing-key").arg(&key).args(extra);
        c
    };
    t.run(5, "busy", &mut held(&["--no-wait"]));
    // A signal ends the wait for the busy record.
    for (sig, code) in [
        (rustix::process::Signal::INT, 130),
        (rustix::process::Signal::TERM, 143),
    ] {
        let mut child = held(&[]).stderr(Stdio::piped()).spawn().unwrap();
        let _stderr = await_line(&mut child, "aegis: waiting for the record: ");
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "gateway after {sig:?}");
        t.seen.insert(code as u32);
    }
    drop(holder);
    t.done();
}

#[test]
fn demo_codes_are_documented_and_produced() {
    let mut t = Table::new("demo");
    t.run(0, "as promised", aegis().arg("demo"));
    t.run(1, "usage", aegis().args(["demo", "extra"]));
    // No temporary directory can be made.
    t.run(
        2,
        "files not written",
        aegis().arg("demo").env("TMPDIR", "/nonexistent/tmp"),
    );
    for (sig, code) in [
        (rustix::process::Signal::INT, 130),
        (rustix::process::Signal::TERM, 143),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = aegis()
            .arg("demo")
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("key_id") {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "demo ended early");
        }
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "demo after {sig:?}");
        t.seen.insert(code as u32);
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "the demo left {left:?}");
    }
    t.done();
}

#[test]
fn plugins_and_profiles_codes_are_documented_and_produced() {
    let mut t = Table::new("plugins list");
    t.run(0, "listed", aegis().args(["plugins", "list"]));
    t.run(1, "usage", aegis().args(["plugins", "list", "--bogus"]));
    t.run(
        2,
        "no such --path",
        aegis().args(["plugins", "list", "--path", "/nonexistent/plugins"]),
    );
    t.done();

    let mut t = Table::new("profiles list");
    t.run(0, "listed", aegis().args(["profiles", "list"]));
    t.run(1, "usage", aegis().args(["profiles", "list", "extra"]));
    t.done();

    let mut t = Table::new("profiles show");
    t.run(0, "shown", aegis().args(["profiles", "show", "default"]));
    t.run(1, "usage", aegis().args(["profiles", "show", "a", "b"]));
    t.run(4, "refused", aegis().args(["profiles", "show", "no-such"]));
    t.done();
}

#[test]
fn export_codes_are_documented_and_produced() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let record = dir.path().join("r.aarl");
    let out = run("echo", "echo", &["--audit"])
        .arg(&record)
        .arg("--signing-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let profile = |name: &str, path: &Path| {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!(
                "name = \"{name}\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = {{ verdict = \"allow\" }}\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:file-sink\"\nconfig = {{ path = {:?} }}\n",
                path.display().to_string()
            ),
        )
        .unwrap();
        file
    };
    let good = profile("good", &record);
    let empty = profile("empty", &dir.path().join("never.aarl"));
    let export = |p: &Path, out: &Path| {
        let mut c = aegis();
        c.arg("--profile")
            .arg(p)
            .arg("export")
            .arg("--out")
            .arg(out);
        c
    };
    let mut t = Table::new("export");
    let out = dir.path().join("out.aarl");
    t.run(0, "written", &mut export(&good, &out));
    t.run(1, "output exists", &mut export(&good, &out));
    t.run(1, "usage", aegis().arg("export"));
    t.run(
        2,
        "no record there",
        &mut export(&empty, &dir.path().join("out2.aarl")),
    );
    assert!(
        !dir.path().join("never.aarl").exists(),
        "export created the record it reads"
    );
    t.run(
        4,
        "profile refused",
        aegis().args(["--profile", "no-such", "export", "--out", "x"]),
    );
    let holder = std::fs::File::open(&record).unwrap();
    holder.lock().unwrap();
    t.run(5, "busy", &mut export(&good, &dir.path().join("out3.aarl")));
    drop(holder);
    t.done();
}

#[test]
fn completions_and_man_codes_are_documented_and_produced() {
    let mut t = Table::new("completions");
    t.run(0, "written", aegis().args(["completions", "bash"]));
    t.run(1, "unknown shell", aegis().args(["completions", "nosh"]));
    t.run(
        2,
        "output not written",
        aegis().args(["completions", "bash"]).stdout(full()),
    );
    t.done();

    let mut t = Table::new("man");
    t.run(0, "written", aegis().arg("man"));
    t.run(1, "no such command", aegis().args(["man", "nope"]));
    t.run(2, "output not written", aegis().arg("man").stdout(full()));
    t.done();

    // A subcommand's page names the version, as the top page does.
    let page = aegis().args(["man", "verify"]).output().unwrap();
    let title = String::from_utf8_lossy(&page.stdout)
        .lines()
        .find(|l| l.starts_with(".TH"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        title.contains(env!("CARGO_PKG_VERSION")),
        "no version in {title:?}"
    );
}

/// `aegis approvals …` against a real queue, with a request filed as a host files one.
#[test]
fn approvals_codes_are_documented_and_produced() {
    use aegis_approvals::{Front, Queue, Request};
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let key = keygen(tmp.path());
    let key = key.to_str().unwrap();
    let open_key = tmp.path().join("open.key");
    std::fs::copy(key, &open_key).unwrap();
    std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open_key = open_key.to_str().unwrap();
    let queue = Queue::open(&tmp.path().join("q")).unwrap();
    let q = queue.dir().unwrap().to_str().unwrap().to_owned();
    let file = |expires_at: String| {
        let id = aegis_record::line::new_approval_id();
        queue
            .file(&Request {
                approval_id: id.clone(),
                parked_at: aegis_record::time::now(),
                expires_at,
                host: "h".into(),
                pid: aegis_record::json::SafeInt::from(1u32),
                front: Front::Wrap,
                record: "r.aarl".into(),
                tool_id: "deploy".into(),
                rule: None,
                reason: None,
                arguments: None,
                arguments_cut: false,
                bound: None,
                scope: aegis_record::ApprovalScope {
                    tool_id: "deploy".into(),
                    arguments_digest: None,
                    fs: None,
                    net: None,
                    expires_at: None,
                },
            })
            .unwrap();
        id
    };
    let later = aegis_record::time::format_micros(u64::MAX / 2);
    let past = "2000-01-01T00:00:00.000000Z".to_owned();
    let nothing = aegis_record::line::new_approval_id();
    let unsafe_dir = tmp.path().join("open");
    std::fs::create_dir(&unsafe_dir).unwrap();
    std::fs::set_permissions(&unsafe_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let unsafe_dir = unsafe_dir.to_str().unwrap();
    let unmakeable = "/proc/aegis-no-such/approvals";
    let a = |args: &[&str]| {
        let mut c = aegis();
        c.arg("approvals").args(args);
        c
    };

    let mut t = Table::new("approvals list");
    t.run(0, "listed", &mut a(&["list", "--approvals", &q]));
    t.run(1, "usage", &mut a(&["list", "--bogus"]));
    t.run(
        2,
        "queue not made",
        &mut a(&["list", "--approvals", unmakeable]),
    );
    t.run(
        4,
        "queue open to others",
        &mut a(&["list", "--approvals", unsafe_dir]),
    );
    t.done();

    let id = file(later.clone());
    let mut t = Table::new("approvals show");
    t.run(0, "shown", &mut a(&["show", &id, "--approvals", &q]));
    t.run(
        1,
        "not an id",
        &mut a(&["show", "apr-x", "--approvals", &q]),
    );
    t.run(
        2,
        "no such request",
        &mut a(&["show", &nothing, "--approvals", &q]),
    );
    t.run(
        4,
        "queue open to others",
        &mut a(&["show", &id, "--approvals", unsafe_dir]),
    );
    t.done();

    for verb in ["approve", "deny"] {
        let command = if verb == "approve" {
            "approvals approve"
        } else {
            "approvals deny"
        };
        let decide = |id: &str, key: &str, dir: &str| {
            let mut c = a(&[verb, id, "--approver-key", key, "--approvals", dir]);
            if verb == "deny" {
                c.args(["--reason", "no"]);
            }
            c
        };
        let id = file(later.clone());
        let mut t = Table::new(command);
        t.run(1, "not an id", &mut decide("apr-x", key, &q));
        t.run(2, "no such request", &mut decide(&nothing, key, &q));
        t.run(2, "no key", &mut decide(&id, "/nonexistent/k", &q));
        t.run(4, "a key others can read", &mut decide(&id, open_key, &q));
        t.run(4, "queue open to others", &mut decide(&id, key, unsafe_dir));
        t.run(0, "decided", &mut decide(&id, key, &q));
        t.run(19, "decided again", &mut decide(&id, key, &q));
        t.run(20, "expired", &mut decide(&file(past.clone()), key, &q));
        t.done();
    }
}

/// The commands that only group others document and give their usage error.
#[test]
fn group_commands_document_their_usage_error() {
    for group in ["key", "pins", "plugins", "profiles", "approvals"] {
        let mut t = Table::new(group);
        t.run(1, "no subcommand", aegis().arg(group));
        t.run(1, "no such subcommand", aegis().args([group, "nope"]));
        t.done();
    }
}

/// The top-level help lists every code any command's help lists.
#[test]
fn the_top_level_help_lists_every_code() {
    let top = {
        let out = aegis().arg("--help").output().unwrap();
        let help = text(&out.stdout);
        help.split_once("EXIT STATUS:\n").unwrap().1.to_owned()
    };
    let listed: BTreeSet<u32> = top
        .lines()
        .take_while(|l| l.starts_with("  "))
        .flat_map(|l| {
            l.split_whitespace()
                .next()
                .unwrap_or("")
                .split('/')
                .filter_map(|c| c.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    for command in [
        "verify",
        "recheck",
        "keygen",
        "key show",
        "rotate",
        "run",
        "wrap",
        "pins diff",
        "pins accept",
        "gateway",
        "confine",
        "demo",
        "plugins list",
        "profiles list",
        "profiles show",
        "export",
        "completions",
        "man",
        "approvals list",
        "approvals show",
        "approvals approve",
        "approvals deny",
    ] {
        let missing: Vec<_> = documented(command).difference(&listed).copied().collect();
        assert!(
            missing.is_empty(),
            "aegis --help does not list {missing:?} ({command} uses them)"
        );
    }
}

/// A global option a command does not use is refused there, not ignored.
#[test]
fn profile_on_a_command_that_uses_none_is_a_usage_error() {
    for args in [
        &["--profile", "x", "verify", "r.aarl"][..],
        &["keygen", "--out", "/nonexistent/k", "--profile", "x"],
        &["--profile", "x", "demo"],
        &["--profile", "x", "plugins", "list"],
        &["--profile", "x", "profiles", "list"],
    ] {
        let out = aegis().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains("--profile has no effect"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}
