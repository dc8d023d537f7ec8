//! Interruption leaves an outcome: a signal during `aegis run` stops the tool, writes
//! its outcome and the close line, then exits with the shell's code for the signal. The
//! record verifies and names no unfinished call.
//!
//! Variants: SIGINT (Ctrl-C), SIGTERM (a supervisor) and SIGHUP (a closed terminal);
//! a guest spinning in its own code and one blocked in a host call (sleep); and a
//! later run appending to the same file.

use crate::common::{guest, text};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c
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

/// Starts `aegis run` of `guest_name` with an hour's wall-clock ceiling, appending to
/// `record`, and waits until its intent is on disk (the tool is then running).
fn start(guest_name: &str, record: &Path, key: &Path) -> Child {
    let before = std::fs::read(record).map(|b| b.len()).unwrap_or(0);
    let mut child = aegis()
        .arg("run")
        .arg("--component")
        .arg(guest(guest_name))
        .args([
            "--id",
            guest_name,
            "--input",
            "",
            "--max-wall-ms",
            "3600000",
        ])
        .arg("--audit")
        .arg(record)
        .arg("--signing-key")
        .arg(key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        let written = std::fs::read(record).unwrap_or_default();
        if written.len() > before && text(&written[before..]).contains("\"line_type\":\"intent\"") {
            break;
        }
        // Waits for an event, not a time: exiting first is the sign the call never started.
        if let Some(status) = child.try_wait().unwrap() {
            panic!("aegis run exited ({status}) before its call started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The intent precedes the sandbox by a few microseconds; give the guest time to be
    // in its loop or its sleep, so the signal finds it there.
    std::thread::sleep(Duration::from_millis(300));
    child
}

fn signal(child: &Child, name: &str) {
    use rustix::process::{Pid, Signal, kill_process};
    let signal = match name {
        "INT" => Signal::INT,
        "TERM" => Signal::TERM,
        "HUP" => Signal::HUP,
        "KILL" => Signal::KILL,
        other => panic!("no signal {other} in these tests"),
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, signal).unwrap();
}

/// Waits for `child` to exit. No time limit is asserted: a regression that ignores the
/// signal shows as a test that does not end.
fn finish(child: Child) -> std::process::Output {
    child.wait_with_output().unwrap()
}

fn verify_text(record: &Path, key: &Path) -> (Option<i32>, String) {
    let public = {
        let k = aegis_record::SigningKey::load(key).unwrap();
        k.public_key().to_string()
    };
    let out = aegis()
        .args(["verify", "--key", &public])
        .arg(record)
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout))
}

#[test]
fn every_caught_signal_records_the_outcome_and_closes_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let record = dir.path().join("record.aarl");
    for (guest_name, name, code) in [
        ("spin", "INT", 130),
        ("sleep", "INT", 130),
        ("spin", "TERM", 143),
        ("sleep", "HUP", 129),
    ] {
        let child = start(guest_name, &record, &key);
        signal(&child, name);
        let out = finish(child);
        let err = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{guest_name} SIG{name}: {err}"
        );
        assert!(
            err.contains(&format!("cancelled: SIG{name}")),
            "{guest_name} SIG{name}: {err}"
        );
        assert!(out.stdout.is_empty(), "a stopped tool hands back nothing");
        let written = text(&std::fs::read(&record).unwrap());
        let last = written.lines().last().unwrap();
        assert!(
            last.contains("\"line_type\":\"close\""),
            "the session ends closed: {last}"
        );
        let (code, report) = verify_text(&record, &key);
        assert_eq!(code, Some(0), "{report}");
        assert!(!report.contains("unfinished"), "{report}");
        assert!(!report.contains("in_flight"), "{report}");
    }
    let outcomes = text(&std::fs::read(&record).unwrap())
        .lines()
        .filter(|l| l.contains("\"line_type\":\"outcome\""))
        .count();
    assert_eq!(outcomes, 4, "one outcome per interrupted call");
}

/// SIGKILL cannot be caught. The call it cut off stays an intent without an outcome;
/// after a later run anchors the file, `verify` still names it.
#[test]
fn a_killed_call_is_named_unfinished_after_a_later_run_anchors_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let record = dir.path().join("record.aarl");
    let child = start("spin", &record, &key);
    signal(&child, "KILL");
    let out = finish(child);
    assert_eq!(out.status.code(), None, "killed by the signal");
    let later = aegis()
        .arg("run")
        .arg("--component")
        .arg(guest("echo"))
        .args(["--id", "echo", "--input", "after"])
        .arg("--audit")
        .arg(&record)
        .arg("--signing-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(later.status.code(), Some(0), "{}", text(&later.stderr));
    let (code, report) = verify_text(&record, &key);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("unfinished session 0 ") && l.contains("\"spin\"")),
        "{report}"
    );
}
