//! Several writers on one record file: each `aegis run` (and `aegis wrap`) waits its turn
//! for the file's lock, saying once which process holds it, and the record they leave verifies; with
//! `--no-wait` a busy record fails at once with its own exit code (5), not the one for a
//! refused configuration (4).

use crate::common::text;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    // Keep the compilation cache out of the user's home.
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c
}

/// A fresh key in `dir`, and its key id.
fn keygen(dir: &Path) -> (PathBuf, String) {
    let key = dir.join("k");
    let out = aegis()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("key_id ").map(str::to_owned))
        .unwrap();
    (key, id)
}

/// `aegis run` of the echo tool into `record`, started, with stderr piped.
fn start_run(record: &Path, key: &Path, input: &str, extra: &[&str]) -> Child {
    let echo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm/echo.wasm");
    aegis()
        .arg("run")
        .arg("--component")
        .arg(echo)
        .args(["--id", "echo", "--input", input, "--audit"])
        .arg(record)
        .arg("--signing-key")
        .arg(key)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn verify_pinned(record: &Path, key_id: &str) -> String {
    let out = aegis()
        .args(["verify", "--key", key_id])
        .arg(record)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    text(&out.stdout)
}

/// Twelve runs started together on one record all succeed (none is turned away because
/// another holds the file), and the record holds twelve sessions that verify.
#[test]
fn concurrent_runs_on_one_record_all_succeed_and_verify() {
    const RUNS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let (key, key_id) = keygen(dir.path());
    let record = dir.path().join("shared.aarl");
    let children: Vec<Child> = (0..RUNS)
        .map(|i| start_run(&record, &key, &format!("run {i}"), &[]))
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "run {i}: {}", text(&out.stderr));
        assert_eq!(out.stdout, format!("run {i}").as_bytes());
    }
    let report = verify_pinned(&record, &key_id);
    assert_eq!(
        report.lines().next(),
        Some(format!("Verified (pinned to {key_id})").as_str())
    );
    assert!(
        report.contains(&format!("coverage session {} ", RUNS - 1)),
        "{report}"
    );
}

/// While this test holds the record's lock, `run` says once that it waits and for whom
/// (this process), and finishes once the lock is let go; `--no-wait` exits 5 at once.
#[test]
fn a_held_record_makes_run_wait_with_a_notice_and_no_wait_exit_5() {
    let dir = tempfile::tempdir().unwrap();
    let (key, key_id) = keygen(dir.path());
    let record = dir.path().join("held.aarl");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();
    let held_by = format!("held by pid {}", std::process::id());

    let out = start_run(&record, &key, "fast", &["--no-wait"])
        .wait_with_output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("another process is writing this record"),
        "{err}"
    );
    if cfg!(target_os = "linux") {
        assert!(err.contains(&held_by), "{err}");
    }
    assert!(out.stdout.is_empty());

    let mut waiting = start_run(&record, &key, "patient", &[]);
    let mut stderr = BufReader::new(waiting.stderr.take().unwrap());
    // Read until the notice: it comes before the run can go on, whatever the timing.
    let mut seen = String::new();
    let notice = loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "run ended without waiting: {seen}"
        );
        if line.starts_with("aegis: waiting for the record: ") {
            break line;
        }
        seen.push_str(&line);
    };
    assert!(notice.contains(record.to_str().unwrap()), "{notice}");
    if cfg!(target_os = "linux") {
        assert!(notice.contains(&held_by), "{notice}");
    }
    drop(holder);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(!rest.contains("waiting"), "the notice is said once: {rest}");
    let mut stdout = String::new();
    waiting
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(stdout, "patient");
    assert!(verify_pinned(&record, &key_id).starts_with("Verified"));
}

/// `aegis wrap` of a server that leaves a mark when it starts, into `record`, with stdin
/// closed (the client has nothing to say) and stderr piped.
fn start_wrap(record: &Path, key: &Path, mark: &Path, extra: &[&str]) -> Child {
    aegis()
        .arg("wrap")
        .arg("--audit")
        .arg(record)
        .arg("--signing-key")
        .arg(key)
        .args(extra)
        .args(["--", "sh", "-c", "touch \"$0\""])
        .arg(mark)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `wrap` takes its turn the same way, and starts no server before it holds the record:
/// `--no-wait` exits 5 with the server never started; without it, the notice comes, the
/// server has still not started, and it starts once the lock is let go.
#[test]
fn a_held_record_makes_wrap_wait_before_starting_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let (key, key_id) = keygen(dir.path());
    let record = dir.path().join("held.aarl");
    let mark = dir.path().join("server-started");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();

    let out = start_wrap(&record, &key, &mark, &["--no-wait"])
        .wait_with_output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("another process is writing this record"),
        "{err}"
    );
    assert!(!mark.exists(), "the server started on a busy record");

    let mut waiting = start_wrap(&record, &key, &mark, &[]);
    let mut stderr = BufReader::new(waiting.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "wrap ended without waiting: {seen}"
        );
        if line.starts_with("aegis: waiting for the record: ") {
            break;
        }
        seen.push_str(&line);
    }
    // The notice is said while the record is busy, before any server may start.
    assert!(
        !mark.exists(),
        "the server started before wrap held the record"
    );
    drop(holder);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(mark.exists(), "the server never started: {rest}");
    assert!(verify_pinned(&record, &key_id).starts_with("Verified"));
}

/// `aegis gateway` over stdio on the fixture manifest into `record`, with stdin piped
/// (the client) and stderr piped.
fn start_gateway(record: &Path, key: &Path, extra: &[&str]) -> Child {
    let tools =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway/tools.toml");
    aegis()
        .arg("gateway")
        .arg("--tools")
        .arg(tools)
        .arg("--audit")
        .arg(record)
        .arg("--signing-key")
        .arg(key)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `gateway` takes its turn like run and wrap: `--no-wait` exits 5 and serves nothing;
/// without it, the notice comes, nothing is served while the record is held, and once
/// the lock is let go it serves, and ends cleanly when its client leaves.
#[test]
fn a_held_record_makes_gateway_wait_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (key, key_id) = keygen(dir.path());
    let record = dir.path().join("held.aarl");
    let holder = std::fs::File::create(&record).unwrap();
    holder.lock().unwrap();

    let out = start_gateway(&record, &key, &["--no-wait"])
        .wait_with_output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("another process is writing this record"),
        "{err}"
    );
    assert!(!err.contains("gateway serving"), "{err}");
    assert!(out.stdout.is_empty());

    let mut waiting = start_gateway(&record, &key, &[]);
    let mut stderr = BufReader::new(waiting.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "gateway ended without waiting: {seen}"
        );
        assert!(!line.contains("gateway serving"), "served on a held record");
        if line.starts_with("aegis: waiting for the record: ") {
            break;
        }
        seen.push_str(&line);
    }
    drop(holder);
    // It serves once it holds the record; then the client leaves (stdin closed).
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "gateway ended without serving"
        );
        assert!(!line.contains("waiting"), "the notice is said once: {line}");
        if line.contains("gateway serving") {
            break;
        }
    }
    // A client that initializes and leaves: the gateway closes its record and exits 0.
    let mut stdin = waiting.stdin.take().unwrap();
    stdin
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
        )
        .unwrap();
    let mut answer = String::new();
    BufReader::new(waiting.stdout.take().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.contains("\"id\":1"), "{answer}");
    drop(stdin);
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(verify_pinned(&record, &key_id).starts_with("Verified"));
}
