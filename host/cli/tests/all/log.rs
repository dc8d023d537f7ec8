//! `aegis log` on the committed vectors and on a record written with a hostile tool id:
//! the verdict first, one line a call, filters, escaping, and nothing from a Tampered
//! record.

use crate::common::text;
use aegis_record::chain::{Session, VecSink};
use aegis_record::json::Object;
use aegis_record::json::Value;
use aegis_record::{IntentLine, RequestDigest, SigningKey};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn log(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
        .arg("log")
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn a_record_reads_as_one_line_a_call_after_its_verdict() {
    let golden = vectors().join("golden/golden.aarl");
    let out = log(&[golden.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[0], "# Verified (unpinned)");
    // Its one session's opening (no time, host or front before 1.3), then its nine
    // calls, one per exit class.
    assert_eq!(
        lines[1],
        "# session 0 opened - on - by -, key 5990c104283522fc"
    );
    assert_eq!(lines.len(), 11, "{listing}");
    assert!(
        lines[2..].iter().all(|l| l.starts_with("-  s0  ")),
        "{listing}"
    );
    assert!(listing.contains("  ok  "), "{listing}");
    assert!(listing.contains("  denied  policy  "), "{listing}");
    // Filters: a tool, a verdict.
    let out = log(&[os("--tool"), os("deploy"), golden.as_os_str()]);
    let deploy = text(&out.stdout);
    assert!(
        deploy.lines().skip(2).all(|l| l.contains("  deploy  ")),
        "{deploy}"
    );
    let out = log(&[os("--verdict"), os("ok"), golden.as_os_str()]);
    assert!(
        text(&out.stdout)
            .lines()
            .skip(2)
            .all(|l| l.contains("  ok  "))
    );

    // A relay's session: the tool change is listed with the call it refused.
    let relayed = vectors().join("verified/tool_change.aarl");
    let out = log(&[relayed.as_os_str()]);
    let listing = text(&out.stdout);
    assert!(
        listing.contains(
            "  read  tool_change  pins  -  -  key 5990c104283522fc  tried -  changed (withheld): description"
        ),
        "{listing}"
    );
    assert!(
        listing.contains(
            "  read  refused  pins  -  call-rug-pull  key 5990c104283522fc  tried -  refused by the relay (pins)"
        ),
        "{listing}"
    );

    // What a call tried, and under which key: the bound path, as the record holds it.
    let tried = vectors().join("verified/arguments.aarl");
    let out = log(&[tried.as_os_str()]);
    let listing = text(&out.stdout);
    assert!(
        listing
            .contains("  call-arguments  key 5990c104283522fc  tried {\"path\":\"../secret.txt\"}"),
        "{listing}"
    );
    let out = log(&[os("--json"), tried.as_os_str()]);
    let row = text(&out.stdout).lines().nth(2).unwrap().to_owned();
    let row = aegis_record::json::parse(row.as_bytes()).unwrap();
    let row = row.as_object().unwrap();
    assert_eq!(
        row.get("tried").and_then(Value::as_str),
        Some(r#"{"path":"../secret.txt"}"#)
    );
    assert_eq!(
        row.get("key_id").and_then(Value::as_str).map(str::len),
        Some(64)
    );
    // A key handed off mid-session: each call names the key that signed it.
    let handoff = vectors().join("verified/key_handoff.aarl");
    let out = log(&[handoff.as_os_str()]);
    let listing = text(&out.stdout);
    let keys: Vec<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split("  key ").nth(1)?.get(..16))
        .collect();
    assert_eq!(keys.len(), 3, "{listing}");
    assert_ne!(keys[0], keys[1], "{listing}");
    assert_eq!(keys[1], keys[2], "{listing}");

    // Timed lines: the time is shown, and --since keeps what is at or after it.
    let timed = vectors().join("verified/timed.aarl");
    let out = log(&[timed.as_os_str()]);
    assert!(text(&out.stdout).contains("2026-12-04T00:00:00.001500Z  s0  echo  ok"));
    let out = log(&[
        os("--since"),
        os("2026-12-04T00:00:01.000000Z"),
        timed.as_os_str(),
    ]);
    assert_eq!(
        text(&out.stdout).lines().count(),
        2,
        "only the header and the session's opening"
    );
    let out = log(&[os("--since"), os("yesterday"), timed.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));

    // --json: the verify report, then one object a line.
    let out = log(&[os("--json"), relayed.as_os_str()]);
    let objects: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| aegis_record::json::parse(l.as_bytes()).unwrap())
        .collect();
    assert!(objects[0].as_object().unwrap().get("verify").is_some());
    let verdicts: Vec<&str> = objects[1..]
        .iter()
        .filter_map(|o| o.as_object()?.get("verdict")?.as_str())
        .collect();
    assert_eq!(verdicts, ["tool_change", "refused"]);
}

#[test]
fn a_tampered_record_lists_nothing() {
    let out = log(&[vectors().join("tampered/bad_signature.aarl").as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let listing = text(&out.stdout);
    assert!(
        listing.starts_with("# Tampered — bad signature"),
        "{listing}"
    );
    assert_eq!(listing.lines().count(), 1);
}

/// What a tool or server chose (here a tool id) reaches the terminal escaped.
#[test]
fn text_from_the_record_is_escaped() {
    let sink = VecSink::new();
    let session = Session::open(
        Arc::new(sink.clone()),
        SigningKey::generate().unwrap(),
        None,
        aegis_record::json::Object::new(),
    )
    .unwrap();
    session
        .append_unsigned(&IntentLine {
            call_id: "c1".into(),
            tool_id: "evil\u{1b}[2J\u{1b}]0;owned\u{7}".into(),
            request_digest: RequestDigest::of_request(b"{}"),
        })
        .unwrap();
    session.close().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    std::fs::write(&file, sink.contents()).unwrap();
    let out = log(&[file.as_os_str()]);
    let listing = text(&out.stdout);
    assert!(
        !listing.contains('\u{1b}') && !listing.contains('\u{7}'),
        "{listing:?}"
    );
    assert!(listing.contains("no_outcome"), "{listing}");
    assert!(listing.contains("evil\\u{1b}[2J"), "{listing}");
}

// ---- aegis log --follow -------------------------------------------------------------

mod follow {
    use super::*;
    use aegis_record::line::LineBody as _;
    use aegis_record::{LineHash, seal};
    use std::io::{BufRead, BufReader, Write};
    use std::path::Path;
    use std::process::{Child, ChildStdin, Stdio};
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::time::{Duration, Instant};

    /// How long a test waits for a line it expects: generous, so a loaded machine does
    /// not fail it; nothing asserts how long anything took.
    const PATIENCE: Duration = Duration::from_secs(20);

    fn appending(path: &Path) -> Arc<AppendFile> {
        AppendFile::at(path)
    }

    fn key() -> SigningKey {
        SigningKey::from_seed([42; 32])
    }

    use aegis_test_support::lines::{AppendFile, intent, policy_denied as denied};

    /// A running `aegis log --follow`, its stdout read line by line on a thread.
    struct Following {
        child: Child,
        lines: Receiver<String>,
        seen: Vec<String>,
    }

    impl Following {
        fn start(args: &[&std::ffi::OsStr], stdin: Stdio) -> Following {
            let mut child = Command::new(env!("CARGO_BIN_EXE_aegis"))
                .arg("log")
                .arg("--follow")
                .args(args)
                .stdin(stdin)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (tx, lines) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
            Following {
                child,
                lines,
                seen: Vec::new(),
            }
        }

        /// Waits for the next line that `want` accepts, returning every line read on the
        /// way (it included).
        fn until(&mut self, want: impl Fn(&str) -> bool) -> Vec<String> {
            let deadline = Instant::now() + PATIENCE;
            let mut got = Vec::new();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.lines.recv_timeout(left) {
                    Ok(line) => {
                        self.seen.push(line.clone());
                        got.push(line.clone());
                        if want(&line) {
                            return got;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        panic!("no such line within {PATIENCE:?}; saw {:#?}", self.seen)
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        panic!("aegis log ended; saw {:#?}", self.seen)
                    }
                }
            }
        }

        fn signal(&self, signal: rustix::process::Signal) {
            let pid =
                rustix::process::Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
            rustix::process::kill_process(pid, signal).unwrap();
        }

        /// Waits for the exit (no time limit is asserted: a regression that never stops
        /// shows as a test that does not end), then reads what is left.
        fn exit(mut self) -> (Option<i32>, Vec<String>, String) {
            let status = self.child.wait().unwrap();
            let mut stderr = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
            }
            let mut rest = Vec::new();
            while let Ok(line) = self.lines.recv_timeout(PATIENCE) {
                rest.push(line);
            }
            (status.code(), rest, stderr)
        }
    }

    impl Drop for Following {
        /// A test that failed waiting leaves no follower behind.
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Rows appear as their outcome lines are appended and verified; a call whose
    /// outcome has not come is not a row yet; SIGTERM or SIGINT stops it with exit 0 and the
    /// verdict of what was read.
    #[test]
    fn rows_appear_as_the_record_grows_and_a_signal_stops_it() {
        use rustix::process::Signal;
        for (signal, name) in [(Signal::TERM, "SIGTERM"), (Signal::INT, "SIGINT")] {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("r.aarl");
            let session = Session::open(appending(&file), key(), None, Object::new()).unwrap();
            session.append_unsigned(&intent("c0", "read")).unwrap();
            session
                .append(&denied("c0", "read", "before follow"))
                .unwrap();
            let mut log = Following::start(&[file.as_os_str()], Stdio::null());
            // What was there: the verdict of those bytes, then its row.
            let first = log.until(|l| l.contains("  c0  "));
            assert!(first[0].starts_with("# Indeterminate — "), "{first:?}");
            // Two calls start; the second finishes first: only it is a row.
            session.append_unsigned(&intent("c1", "slow")).unwrap();
            session.append_unsigned(&intent("c2", "fast")).unwrap();
            session.append(&denied("c2", "fast", "second")).unwrap();
            let got = log.until(|l| l.contains("  c2  "));
            assert!(!got.iter().any(|l| l.contains("c1")), "{got:?}");
            assert!(
                got.last().unwrap().contains("  fast  denied  policy  "),
                "{got:?}"
            );
            session.append(&denied("c1", "slow", "first")).unwrap();
            log.until(|l| l.contains("  c1  ") && l.contains("  slow  denied  "));
            // Everything written has been read (c1's row is the last line's): the verdict
            // so far is the one `aegis verify` gives those bytes.
            log.signal(signal);
            let (code, rest, stderr) = log.exit();
            assert_eq!(code, Some(0), "{stderr}");
            let verify = Command::new(env!("CARGO_BIN_EXE_aegis"))
                .arg("verify")
                .arg(&file)
                .output()
                .unwrap();
            let headline = text(&verify.stdout).lines().next().unwrap().to_owned();
            assert!(headline.starts_with("Indeterminate — "), "{headline}");
            assert_eq!(
                rest,
                [format!(
                    "# stopped following {} ({name}): {headline}",
                    file.display()
                )]
            );
            session.close().unwrap();
        }
    }

    /// A line with a bad signature appended after rows were listed stops the follow
    /// with `aegis verify`'s verdict and its exit code, and lists nothing of that line
    /// or after it.
    #[test]
    fn a_tampered_append_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.aarl");
        let session = Session::open(appending(&file), key(), None, Object::new()).unwrap();
        session.append_unsigned(&intent("c0", "read")).unwrap();
        session.append(&denied("c0", "read", "fine")).unwrap();
        let mut log = Following::start(&[file.as_os_str()], Stdio::null());
        log.until(|l| l.contains("  c0  "));
        // A call starts; its outcome comes chained correctly but with one signature
        // digit changed, and a well-signed outcome of another call is chained after it.
        // Neither may be listed: a row waits for its line's signature.
        session.append_unsigned(&intent("c5", "read")).unwrap();
        let mut bad = seal(
            "outcome",
            denied("c5", "read", "forged").to_object(),
            4,
            session.tail(),
            Some(&key()),
        )
        .unwrap()
        .bytes;
        let at = bad
            .windows(13)
            .position(|w| w == b"\"signature\":\"")
            .unwrap()
            + 13;
        bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
        let after = seal(
            "outcome",
            denied("c6", "read", "after").to_object(),
            5,
            LineHash::of_line(&bad),
            Some(&key()),
        )
        .unwrap()
        .bytes;
        let tail_lines = [bad, b"\n".to_vec(), after, b"\n".to_vec()].concat();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(&tail_lines).unwrap();
        let verify = Command::new(env!("CARGO_BIN_EXE_aegis"))
            .arg("verify")
            .arg(&file)
            .output()
            .unwrap();
        let headline = text(&verify.stdout).lines().next().unwrap().to_owned();
        assert!(
            headline.starts_with("Tampered — bad signature"),
            "{headline}"
        );
        // The next thing printed is the verdict: no row on the way.
        assert_eq!(
            log.until(|l| l.starts_with("# ")),
            [format!("# {headline}")]
        );
        let (code, rest, stderr) = log.exit();
        assert_eq!(code, Some(1), "{stderr}");
        assert!(rest.is_empty(), "{rest:?}");
    }

    /// A record only grows: shrinking the file, or putting another file at its name,
    /// stops the follow with the Tampered exit code.
    #[test]
    fn a_shrunk_or_replaced_record_stops_it() {
        for replace in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("r.aarl");
            let session = Session::open(appending(&file), key(), None, Object::new()).unwrap();
            session.append_unsigned(&intent("c0", "read")).unwrap();
            session.append(&denied("c0", "read", "fine")).unwrap();
            let mut log = Following::start(&[file.as_os_str()], Stdio::null());
            log.until(|l| l.contains("  c0  "));
            if replace {
                let other = dir.path().join("other.aarl");
                std::fs::copy(&file, &other).unwrap();
                std::fs::rename(&other, &file).unwrap();
            } else {
                let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
                f.set_len(10).unwrap();
            }
            let (code, rest, stderr) = log.exit();
            assert_eq!(code, Some(1), "{stderr}");
            let last = rest.last().unwrap();
            let why = if replace {
                "was replaced by another file"
            } else {
                "shrank to 10 bytes"
            };
            assert!(
                last.starts_with("# Tampered — ")
                    && last.contains(why)
                    && last.contains("a record only grows"),
                "{rest:?}"
            );
        }
    }

    /// Standard input is read as it comes and judged when it ends; --json gives one
    /// object a row and a last object with the verdict; text a tool or server chose
    /// reaches the terminal escaped.
    #[test]
    fn standard_input_json_and_escaping() {
        let sink = VecSink::new();
        let session = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
        let hostile = "evil\u{1b}[2J\u{7}";
        session.append_unsigned(&intent("c1", hostile)).unwrap();
        session
            .append(&denied("c1", hostile, "reason\u{1b}]0;owned\u{7}"))
            .unwrap();
        let first = sink.contents();
        session.append_unsigned(&intent("c2", "read")).unwrap();
        session.append(&denied("c2", "read", "two")).unwrap();
        session.close().unwrap();
        let all = sink.contents();

        // Text: rows as they come, escaped.
        let mut log = Following::start(&[os("-")], Stdio::piped());
        let mut stdin: ChildStdin = log.child.stdin.take().unwrap();
        stdin.write_all(&first).unwrap();
        stdin.flush().unwrap();
        let got = log.until(|l| l.contains("  c1  "));
        let row = got.last().unwrap();
        assert!(!row.contains('\u{1b}') && !row.contains('\u{7}'), "{row:?}");
        assert!(row.contains("evil\\u{1b}[2J\\u{7}"), "{row}");
        stdin.write_all(&all[first.len()..]).unwrap();
        drop(stdin);
        let (code, rest, stderr) = log.exit();
        assert_eq!(code, Some(0), "{stderr}");
        assert!(rest.iter().any(|l| l.contains("  c2  ")), "{rest:?}");
        assert_eq!(
            rest.last().map(String::as_str),
            Some("# standard input ended: Verified (unpinned)")
        );

        // --json: the header object, one object a row, the verdict last.
        let mut log = Following::start(&[os("--json"), os("-")], Stdio::piped());
        let mut stdin = log.child.stdin.take().unwrap();
        stdin.write_all(&all).unwrap();
        drop(stdin);
        let (code, rest, stderr) = log.exit();
        assert_eq!(code, Some(0), "{stderr}");
        let objects: Vec<aegis_record::json::Object> = rest
            .iter()
            .map(|l| crate::common::object(l.as_bytes()))
            .collect();
        assert!(objects[0].get("verify").is_some(), "{rest:?}");
        let calls: Vec<&str> = objects
            .iter()
            .filter_map(|o| o.get("call_id")?.as_str())
            .collect();
        assert_eq!(calls, ["c1", "c2"]);
        let last = objects.last().unwrap();
        assert_eq!(last.get("stopped").and_then(Value::as_str), Some("end"));
        let verdict = last
            .get("verify")
            .and_then(Value::as_object)
            .and_then(|v| v.get("verdict"))
            .and_then(Value::as_str);
        assert_eq!(verdict, Some("verified"));
    }
}
