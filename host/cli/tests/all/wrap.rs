//! `aegis wrap` end to end: the built binary relays a real MCP stdio server (a Python
//! standard-library script, tests/fixtures/mcp/echo_server.py), driven by this test as
//! the client writing JSON-RPC lines.
//!
//! Each test checks the record too: it verifies, and every `tools/call` the client sent
//! has exactly one intent and one outcome.

use crate::common;
use crate::common::fifo;

use aegis_mcp::stdio::DEFAULT_QUEUE_BYTES;
use aegis_record::json::{Object, Value};
use common::{at, field, object, text};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// How long a client thread that neither reads nor leaves keeps its pipe open.
const HOLD_OPEN: Duration = Duration::from_secs(30);

fn aegis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/echo_server.py")
}

/// Allows everything but `get-env` and reads under /etc.
const POLICY: &str = "version: 1
default: allow
rules:
  - id: no-env
    action: deny
    tool: get-env
    reason: environment variables stay private
  - id: no-etc
    action: deny
    tool: read
    arguments:
      path: { under: /etc }
    reason: /etc stays private
";

/// A running `aegis wrap` over the echo server, with its files.
struct Wrap {
    dir: tempfile::TempDir,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    /// Every byte the client received, in order.
    received: Vec<u8>,
    /// How many tools/call messages the client sent.
    calls_sent: usize,
    /// Every byte the client sent, in order.
    sent: Vec<u8>,
    /// Set to stop reading wrap's stdout, as a client that hangs would.
    stall: Arc<AtomicBool>,
}

impl Wrap {
    fn start(wrap_flags: &[&str], server_flags: &[&str]) -> Wrap {
        Wrap::start_in(&[], wrap_flags, server_flags)
    }

    /// [`Wrap::start`] with `global` flags before `wrap` (a `--profile`); the test's
    /// policy is given with `--policy` unless `global` names a profile.
    fn start_in(global: &[&std::ffi::OsStr], wrap_flags: &[&str], server_flags: &[&str]) -> Wrap {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k");
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
        let mut command = aegis();
        command.args(global).arg("wrap");
        if global.is_empty() {
            command.arg("--policy").arg(dir.path().join("policy.yaml"));
        }
        let mut child = command
            .arg("--audit")
            .arg(dir.path().join("record.jsonl"))
            .arg("--signing-key")
            .arg(&key)
            .args(wrap_flags)
            .arg("--")
            .arg("python3")
            .arg(server_script())
            .arg("--log")
            .arg(dir.path().join("server-in.log"))
            .arg("--out-log")
            .arg(dir.path().join("server-out.log"))
            .arg("--pid-file")
            .arg(dir.path().join("server.pid"))
            .args(server_flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        let stall = Arc::new(AtomicBool::new(false));
        let stalled = stall.clone();
        std::thread::spawn(move || {
            loop {
                if stalled.load(Ordering::SeqCst) {
                    // Holds the pipe open without reading, until wrap is gone.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                let mut line = Vec::new();
                match stdout.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Wrap {
            dir,
            child,
            stdin,
            lines,
            received: Vec::new(),
            calls_sent: 0,
            sent: Vec::new(),
            stall,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn send(&mut self, line: &str) {
        if line.contains("\"tools/call\"") {
            self.calls_sent += 1;
        }
        self.sent.extend_from_slice(line.as_bytes());
        self.sent.push(b'\n');
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the client receives.
    fn recv(&mut self) -> Vec<u8> {
        // Ends with an error only when wrap closed its stdout: an observable end, not a
        // time limit.
        let line = self
            .lines
            .recv()
            .expect("aegis wrap closed its stdout unanswered");
        self.received.extend_from_slice(&line);
        line
    }

    /// Sends a request and returns its answer, parsed.
    fn request(&mut self, id: u64, method: &str, params: &str) -> Object {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ));
        let line = self.recv();
        let answer = object(&line);
        assert_eq!(
            answer.get("id").and_then(Value::as_int),
            Some(id),
            "{}",
            text(&line)
        );
        answer
    }

    fn initialize(&mut self) {
        self.request(
            1,
            "initialize",
            r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}"#,
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        self.request(2, "tools/list", "{}");
    }

    /// Sends a `tools/call` to echo with `text`, without waiting for its answer.
    fn send_echo(&mut self, id: u64, text: &str) {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{text}"}}}}}}"#
        ));
    }

    fn call(&mut self, id: u64, tool: &str, arguments: &str) -> Object {
        self.request(
            id,
            "tools/call",
            &format!(r#"{{"name":"{tool}","arguments":{arguments}}}"#),
        )
    }

    /// Closes the client's side and waits for `aegis wrap` to exit.
    fn close(&mut self) -> ExitStatus {
        self.stdin = None;
        self.wait()
    }

    fn wait(&mut self) -> ExitStatus {
        let status = self.child.wait().unwrap();
        // Whatever was still on its way to the client, up to the end of wrap's stdout
        // (closed now that wrap has exited; its server never held it). A stalled reader
        // resumes, or it would never see that end.
        self.stall.store(false, Ordering::SeqCst);
        while let Ok(line) = self.lines.recv() {
            self.received.extend_from_slice(&line);
        }
        status
    }

    /// Sends SIGTERM to `aegis wrap` (not to its server).
    fn terminate(&self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
    }

    /// Polls until `holds` is true, failing if wrap exits first. Nothing here is timed:
    /// the test waits for an event, and wrap's exit is the observable sign it never comes.
    fn until(&mut self, what: &str, mut holds: impl FnMut(&Self) -> bool) {
        while !holds(self) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("aegis wrap exited ({status}) before {what}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&mut self) -> String {
        let mut s = String::new();
        use std::io::Read as _;
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut s).unwrap();
        }
        s
    }

    fn server_saw(&self) -> String {
        text(&std::fs::read(self.path("server-in.log")).unwrap_or_default())
    }

    /// Waits until the server has logged a line containing `needle`.
    fn await_server(&mut self, needle: &str) {
        self.until(&format!("the server saw {needle}"), |w| {
            w.server_saw().contains(needle)
        });
    }

    fn server_pid(&self) -> i32 {
        std::fs::read_to_string(self.path("server.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Verifies the record and checks that every call sent has one intent and one
    /// outcome; returns the outcome lines.
    fn record(&self) -> Vec<Object> {
        self.check_record(true)
    }

    /// [`Wrap::record`] for a session that ended before it read everything the client
    /// sent: every call it decided has one intent and one outcome.
    fn record_of_decided(&self) -> Vec<Object> {
        self.check_record(false)
    }

    /// Lets the client's pipe into wrap hold `bytes`, so the client can write that much
    /// and close it while wrap reads nothing.
    fn widen_stdin(&self, bytes: usize) {
        let stdin = self.stdin.as_ref().unwrap();
        let got = rustix::pipe::fcntl_setpipe_size(stdin, bytes).unwrap();
        assert!(got >= bytes, "the pipe holds {got} bytes, not {bytes}");
    }

    /// The record's lines of one type, in order (read after [`Wrap::record`] verified it).
    fn lines_of_type(&self, line_type: &str) -> Vec<Object> {
        std::fs::read(self.path("record.jsonl"))
            .unwrap()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(object)
            .filter(|l| field(l, "line_type") == line_type)
            .collect()
    }

    fn check_record(&self, every_call_decided: bool) -> Vec<Object> {
        let record = self.path("record.jsonl");
        let out = aegis().arg("verify").arg(&record).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(text(&out.stdout).starts_with("Verified"));
        let lines: Vec<Object> = std::fs::read(&record)
            .unwrap()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(object)
            .collect();
        let of_type = |t: &str| -> Vec<Object> {
            lines
                .iter()
                .filter(|l| field(l, "line_type") == t)
                .cloned()
                .collect()
        };
        let (intents, outcomes) = (of_type("intent"), of_type("outcome"));
        if every_call_decided {
            assert_eq!(intents.len(), self.calls_sent, "one intent per tools/call");
        } else {
            assert!(!intents.is_empty() && intents.len() <= self.calls_sent);
        }
        assert_eq!(outcomes.len(), intents.len(), "one outcome per tools/call");
        for intent in &intents {
            let id = field(intent, "call_id");
            assert_eq!(
                outcomes
                    .iter()
                    .filter(|o| field(o, "call_id") == id)
                    .count(),
                1,
                "call {id} has one outcome"
            );
        }
        assert_eq!(of_type("close").len(), 1, "the session was closed");
        outcomes
    }
}

impl Drop for Wrap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_error(answer: &Object) -> bool {
    answer
        .get("result")
        .and_then(Value::as_object)
        .and_then(|r| r.get("isError"))
        == Some(&Value::Bool(true))
}

fn outcome_of<'a>(outcomes: &'a [Object], tool: &str) -> Vec<&'a Object> {
    outcomes
        .iter()
        .filter(|o| field(o, "tool_id") == tool)
        .collect()
}

#[test]
fn unrefused_traffic_reaches_the_client_byte_for_byte() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    let ok = w.call(3, "echo", r#"{"text":"hi \u00e9 ü"}"#);
    assert!(!is_error(&ok));
    let failed = w.call(4, "echo", r#"{"text":"fail"}"#);
    assert!(is_error(&failed), "the tool's own error result is relayed");
    w.request(5, "ping", "{}");
    let status = w.close();
    assert_eq!(status.code(), Some(0), "{}", w.stderr());
    // The relay's own tools/list (after initialized, to pin the tools) and its answer
    // are the only lines between the two that the other side did not write or see.
    let own = |t: &str| {
        let (own, rest): (Vec<&str>, Vec<&str>) = t
            .split_inclusive('\n')
            .partition(|l| l.contains(r#""id":"aegis-relay/tools-list/"#));
        (own.len(), rest.concat())
    };
    let server_wrote = std::fs::read(w.path("server-out.log")).unwrap();
    let (answers, to_client) = own(&text(&server_wrote));
    assert_eq!(answers, 1);
    assert_eq!(text(&w.received), to_client);
    // And the other way: the server read exactly what the client wrote.
    let (asked, from_client) = own(&w.server_saw());
    assert_eq!(asked, 1);
    assert_eq!(from_client, text(&w.sent));

    let outcomes = w.record();
    let echo = outcome_of(&outcomes, "echo");
    assert_eq!(echo.len(), 2);
    assert_eq!(at(echo[0], &["execution", "status"]), "success");
    assert!(field(echo[0], "grant_id").starts_with("relayed-echo-"));
    assert!(!field(echo[0], "response_digest").is_empty());
    // The relayed grant hands nothing over and claims no ceiling it cannot enforce.
    let grant = echo[0]
        .get("capability")
        .and_then(Value::as_object)
        .and_then(|c| c.get("grant"))
        .and_then(Value::as_object)
        .unwrap();
    assert!(grant.get("fs").is_none() && grant.get("net").is_none());
    assert!(grant.get("component_digest").is_none());
    assert_eq!(
        grant.get("max_wall_ms").and_then(Value::as_int),
        Some((1 << 53) - 1)
    );
    assert_eq!(at(echo[1], &["execution", "status"]), "trap");
    assert!(at(echo[1], &["execution", "message"]).contains("isError"));
    assert!(
        !field(echo[1], "response_digest").is_empty(),
        "an error result was handed back, so it is digested"
    );
}

#[test]
fn a_call_the_policy_denies_never_reaches_the_server() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    let denied = w.call(3, "get-env", r#"{"name":"HOME"}"#);
    assert!(is_error(&denied));
    let meta = denied
        .get("result")
        .and_then(Value::as_object)
        .and_then(|r| r.get("_meta"))
        .and_then(Value::as_object)
        .and_then(|m| m.get("dev.aegis/refusal"))
        .and_then(Value::as_object)
        .cloned()
        .expect("refusal facts under _meta");
    assert_eq!(field(&meta, "station"), "policy");
    let call_id = field(&meta, "call_id");
    assert!(call_id.starts_with("call-"));
    let shown = text(&w.received);
    assert!(shown.contains("policy station") && shown.contains(&call_id));
    // A call the policy allows still goes through after the refusal.
    assert!(!is_error(&w.call(4, "echo", r#"{"text":"after"}"#)));
    assert_eq!(w.close().code(), Some(0));
    let saw = w.server_saw();
    assert!(!saw.contains("get-env") || !saw.contains("\"id\":3"));
    assert!(
        saw.lines()
            .all(|l| !(l.contains("tools/call") && l.contains("get-env"))),
        "{saw}"
    );

    let outcomes = w.record();
    let env = outcome_of(&outcomes, "get-env");
    assert_eq!(env.len(), 1);
    assert_eq!(field(env[0], "call_id"), call_id);
    assert_eq!(at(env[0], &["policy", "status"]), "denied");
    assert!(at(env[0], &["policy", "reason"]).contains("environment variables stay private"));
    assert!(env[0].get("grant_id").is_none());
}

#[test]
fn a_changed_tool_description_refuses_the_next_call() {
    let mut w = Wrap::start(&["-q"], &["--rug-pull"]);
    w.initialize();
    assert!(!is_error(&w.call(3, "echo", r#"{"text":"before"}"#)));
    // The listing the client is shown leaves the changed tool out: its new
    // description never reaches the model. The operator is warned once, even with -q.
    let listing = w.request(4, "tools/list", "{}");
    let shown = String::from_utf8(Value::Object(listing).to_canonical()).unwrap();
    assert!(
        shown.contains(r#""name":"get-env""#)
            && !shown.contains(r#""name":"echo""#)
            && !shown.contains("~/.ssh"),
        "{shown}"
    );
    let refused = w.call(5, "echo", r#"{"text":"after"}"#);
    assert!(is_error(&refused));
    assert!(text(&w.received).contains("pins station"));
    assert_eq!(w.close().code(), Some(0));
    assert!(
        !w.server_saw().contains("after"),
        "the refused call was not forwarded"
    );

    let outcomes = w.record();
    let echo = outcome_of(&outcomes, "echo");
    assert_eq!(echo.len(), 2);
    assert_eq!(at(echo[0], &["execution", "status"]), "success");
    assert_eq!(at(echo[1], &["execution", "status"]), "host_denied");
    assert!(at(echo[1], &["execution", "reason"]).contains("pins"));
    // The change itself is on the record once, signed, before the call it refused: the
    // fields that changed and the digests of both definitions.
    let changes = w.lines_of_type("tool_change");
    assert_eq!(changes.len(), 1, "{changes:?}");
    let change = &changes[0];
    assert_eq!(field(change, "tool_id"), "echo");
    assert_eq!(field(change, "change"), "changed");
    assert_eq!(field(change, "action"), "withheld");
    assert_eq!(
        change.get("fields"),
        Some(&Value::Array(vec![Value::String("description".into())]))
    );
    let (pinned, listed) = (
        field(change, "pinned_digest"),
        field(change, "listed_digest"),
    );
    assert!(pinned.len() == 64 && listed.len() == 64 && pinned != listed);
    let seq = |o: &Object| o.get("seq").and_then(Value::as_int).unwrap();
    assert!(seq(change) < seq(echo[1]), "recorded before the refusal");
    // The open line says where the session ran and what it fronted.
    let open = &w.lines_of_type("open")[0];
    let provenance = open.get("provenance").and_then(Value::as_object).unwrap();
    let front = provenance.get("front").and_then(Value::as_object).unwrap();
    assert_eq!(field(front, "command"), "wrap");
    let server = front.get("server").and_then(Value::as_object).unwrap();
    let argv = server.get("argv").and_then(Value::as_array).unwrap();
    assert_eq!(argv[0].as_str(), Some("python3"));
    assert_eq!(argv.last().and_then(Value::as_str), Some("--rug-pull"));
    let python = std::fs::canonicalize(field(server, "executable")).unwrap();
    assert_eq!(
        field(server, "executable_sha256"),
        aegis_record::digest::encode_hex(&aegis_record::digest::sha256(
            &std::fs::read(python).unwrap()
        ))
    );
    let host = provenance.get("host").and_then(Value::as_object).unwrap();
    assert!(!field(host, "hostname").is_empty());
    // Every line says when the host wrote it (document version 1.3).
    for line_type in ["open", "intent", "outcome", "tool_change", "close"] {
        for line in w.lines_of_type(line_type) {
            assert!(
                aegis_record::time::is_valid(&field(&line, "time")),
                "{line:?}"
            );
        }
    }
    let warned = w.stderr();
    assert_eq!(
        warned
            .lines()
            .filter(|l| l.starts_with("warning: tools/list: tool \"echo\" changed"))
            .count(),
        1,
        "{warned}"
    );
}

#[test]
fn a_server_killed_mid_call_ends_the_call_and_the_session() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hang"}}}"#);
    w.await_server("hang");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(w.server_pid()).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    // (The record's JSON reader takes no negative numbers, so this is read as text.)
    let answer = text(&w.recv());
    assert!(
        answer.contains(r#""id":3,"error":{"code":-32002"#),
        "the pending call is answered: {answer}"
    );
    let status = w.wait();
    assert_eq!(status.code(), Some(128 + 9), "{}", w.stderr());

    let outcomes = w.record();
    let echo = outcome_of(&outcomes, "echo");
    assert_eq!(echo.len(), 1);
    assert!(at(echo[0], &["execution", "message"]).contains("the server died"));
    assert!(
        at(echo[0], &["execution", "message"]).contains("was killed by signal 9"),
        "{}",
        at(echo[0], &["execution", "message"])
    );
}

#[test]
fn a_server_exiting_mid_call_passes_its_status_on() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"die"}}}"#);
    assert_eq!(w.wait().code(), Some(3));
    let outcomes = w.record();
    let message = at(outcome_of(&outcomes, "echo")[0], &["execution", "message"]);
    assert!(message.contains("the server died"), "{message}");
    assert!(message.contains("exited with status 3"), "{message}");
}

#[test]
fn a_client_leaving_mid_call_stops_the_server_and_records_the_call() {
    let mut w = Wrap::start(&["--grace-ms", "300"], &[]);
    w.initialize();
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hang"}}}"#);
    w.await_server("hang");
    // The server is busy and never reads its EOF: SIGTERM after the grace ends it. The
    // order is shown by what wrap says, not timed (timing belongs in benches).
    let status = w.close();
    let said = w.stderr();
    assert_eq!(status.code(), Some(128 + 15), "{said}");
    assert!(
        said.contains("after the client closed its stdin; sending SIGTERM"),
        "{said}"
    );
    let outcomes = w.record();
    assert_eq!(
        at(outcome_of(&outcomes, "echo")[0], &["execution", "status"]),
        "trap"
    );
}

#[test]
fn a_signal_to_wrap_is_forwarded_to_the_server() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    w.terminate();
    assert_eq!(w.wait().code(), Some(128 + 15), "{}", w.stderr());
    w.record();
}

#[test]
fn pins_written_by_one_session_refuse_a_changed_tool_in_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("pins.jsonl");
    let pins_flag = pins.to_str().unwrap();
    let mut first = Wrap::start(&["--write-pins", pins_flag], &[]);
    first.initialize();
    assert_eq!(first.close().code(), Some(0));
    assert!(std::fs::read_to_string(&pins).unwrap().contains("\"echo\""));
    // The next server lists echo changed from its first listing on.
    let mut second = Wrap::start(&["--pins", pins_flag], &["--rug-pull"]);
    second.initialize();
    assert!(!is_error(&second.call(3, "echo", r#"{"text":"same"}"#)));
    second.request(4, "tools/list", "{}");
    assert!(is_error(&second.call(5, "echo", r#"{"text":"changed"}"#)));
    assert_eq!(second.close().code(), Some(0));
    second.record();
}

/// The review step (issue 32): a tool one session's `--write-pins` held is shown by
/// `aegis pins diff`, taken by `aegis pins accept`, and called in the next session.
#[test]
fn pins_accept_after_a_held_change_lets_the_next_session_call_it() {
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join("pins.jsonl");
    let pins_flag = pins.to_str().unwrap();
    let mut first = Wrap::start(&["--write-pins", pins_flag], &["--rug-pull"]);
    first.initialize();
    assert!(!is_error(&first.call(3, "echo", r#"{"text":"before"}"#)));
    // After a call, the server lists echo rewritten: held for this session and the file.
    first.request(4, "tools/list", "{}");
    assert!(is_error(&first.call(5, "echo", r#"{"text":"after"}"#)));
    assert_eq!(first.close().code(), Some(0));
    let held = r#""held":"changed since it was pinned: description""#;
    assert!(std::fs::read_to_string(&pins).unwrap().contains(held));

    // The server as it now starts: echo rewritten from its first listing on.
    let now = ["--description", crate::pins::CHANGED];
    let review = |sub: &str| {
        aegis()
            .args(["pins", sub])
            .arg(&pins)
            .arg("--")
            .arg("python3")
            .arg(server_script())
            .args(now)
            .output()
            .unwrap()
    };
    let diff = review("diff");
    assert_eq!(diff.status.code(), Some(9), "{}", text(&diff.stderr));
    let shown = text(&diff.stdout);
    assert!(
        shown.starts_with(
            "echo: changed since it was pinned: description [held: changed since it was pinned: description]\n"
        ),
        "{shown}"
    );
    assert!(
        shown.contains("    pinned:  \"Echoes its text back.\"\n"),
        "{shown}"
    );
    // Still held: a session before the review refuses the call.
    let mut before = Wrap::start(&["--pins", pins_flag], &now);
    before.initialize();
    assert!(is_error(&before.call(
        3,
        "echo",
        r#"{"text":"unreviewed"}"#
    )));
    assert_eq!(before.close().code(), Some(0));

    let accept = review("accept");
    assert_eq!(accept.status.code(), Some(0), "{}", text(&accept.stderr));
    assert!(!std::fs::read_to_string(&pins).unwrap().contains("\"held\""));
    let mut after = Wrap::start(&["--pins", pins_flag], &now);
    after.initialize();
    let answer = after.call(3, "echo", r#"{"text":"accepted"}"#);
    assert!(!is_error(&answer), "{answer:?}");
    assert_eq!(after.close().code(), Some(0));
    after.record();
}

/// Issue 29, the confused deputy: a server that can write where `--write-pins` points
/// replaces the pins file with a link to a file outside its reach. The unconfined wrap,
/// writing the pins at the session's end, must not write through it; the session still
/// closes its record.
#[test]
fn a_link_the_server_plants_at_write_pins_is_not_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    let pins = dir.path().join(".pins");
    let (pins_flag, victim_flag) = (pins.to_str().unwrap(), victim.to_str().unwrap());
    let mut w = Wrap::start(
        &["--write-pins", pins_flag],
        &["--plant-link", pins_flag, "--link-to", victim_flag],
    );
    w.initialize();
    assert_eq!(w.close().code(), Some(0));
    let stderr = w.stderr();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n", "{stderr}");
    assert!(
        std::fs::symlink_metadata(&pins)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let refusal = stderr
        .lines()
        .find(|l| l.contains(pins_flag))
        .unwrap_or_else(|| panic!("no line names the pins file: {stderr}"));
    assert!(refusal.contains("symbolic link"), "{refusal}");
    w.record();
}

/// A FIFO where the pins go: wrap must neither wait on it (no reader: forever, before
/// its close line) nor write into it. A reader is kept waiting on the FIFO so that a
/// wrap that does open it fails this test on the bytes, rather than hanging it.
#[test]
fn a_fifo_the_server_plants_at_write_pins_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let pins = dir.path().join(".pins");
    let pins_flag = pins.to_str().unwrap();
    let mut w = Wrap::start(&["--write-pins", pins_flag], &["--plant-fifo", pins_flag]);
    w.initialize();
    let watch = fifo::Watch::start(&pins);
    assert_eq!(w.close().code(), Some(0));
    let stderr = w.stderr();
    assert!(
        watch.written().is_empty(),
        "wrap wrote its pins into the FIFO: {stderr}"
    );
    assert!(stderr.contains("a FIFO, not a regular file"), "{stderr}");
    w.record();
}

/// Under a confining profile, pins inside the server's write grant are refused before
/// anything starts: the server could put a link or a FIFO there, or pins of its own.
#[cfg(target_os = "linux")]
#[test]
fn write_pins_inside_the_servers_write_grant_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    for (flag, file) in [("--write-pins", ".pins"), ("--pins", "pins.jsonl")] {
        let out = aegis()
            .args(["--profile", "linux-confined", "wrap", "--allow-write"])
            .arg(&project)
            .arg(flag)
            .arg(project.join(file))
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let errors = stderr.lines().filter(|l| l.starts_with("error:"));
        assert_eq!(errors.count(), 1, "{stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("--allow-write"),
            "{stderr}"
        );
    }
    // A signing key the server could read is refused under a read grant too.
    let out = aegis()
        .args(["--profile", "linux-confined", "wrap", "--allow-read"])
        .arg(&project)
        .arg("--signing-key")
        .arg(project.join("k"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--signing-key") && stderr.contains("--allow-read"),
        "{stderr}"
    );
}

/// The files a profile makes the host load (the profile itself, a station's config
/// file, a plugin library) are the next session's host: beneath the server's write
/// grant they are refused, as pins are. The key is refused wherever the confined server
/// may read it, its exec-support set included (an interpreter laid out as `P/bin/x`
/// reads `P/lib`), not only beneath --allow-read. A plugin directory the server may
/// write gets a warning: a later command loads what is planted there by name.
#[cfg(target_os = "linux")]
#[test]
fn the_profiles_files_and_the_key_beneath_what_the_server_reaches_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let profile = project.join("confined.toml");
    let policy = project.join("policy.yaml");
    std::fs::write(&policy, "version: 1\ndefault: allow\n").unwrap();
    let confined = include_str!("../../../../profiles/linux-confined.toml");
    // The profile itself, and a profile whose policy file is in the grant.
    let outside = dir.path().join("outside.toml");
    let with_policy = confined.replacen(
        "plugin = \"builtin:policy-static\"",
        "plugin = \"builtin:policy-yaml\"",
        1,
    );
    let with_policy = with_policy.replacen(
        &with_policy
            .lines()
            .find(|l| l.starts_with("config = { verdict"))
            .unwrap()
            .to_owned(),
        "config = { path = \"project/policy.yaml\" }",
        1,
    );
    std::fs::write(&profile, confined).unwrap();
    std::fs::write(&outside, with_policy).unwrap();
    for (profile, what) in [(&profile, "profile "), (&outside, "policy.config.path ")] {
        let out = aegis()
            .arg("--profile")
            .arg(profile)
            .args(["wrap", "--allow-write"])
            .arg(&project)
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(what) && stderr.contains("--allow-write"),
            "{stderr}"
        );
    }
    // A key in the lib directory of the program's own prefix.
    let prefix = dir.path().join("venv");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    let program = prefix.join("bin/server");
    std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let key = prefix.join("lib/aegis.key");
    let made = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let out = aegis()
        .args(["--profile", "linux-confined", "wrap", "--signing-key"])
        .arg(&key)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--signing-key") && stderr.contains("exec-support"),
        "{stderr}"
    );
    // A plugin directory beneath the grant: said, and the session goes on.
    let plugins = project.join("plugins");
    let out = aegis()
        .env("AEGIS_PLUGIN_PATH", &plugins)
        .args([
            "--profile",
            "linux-confined",
            "wrap",
            "--best-effort",
            "--allow-write",
        ])
        .arg(&project)
        .args(["--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("warning: the plugin directory") && stderr.contains("--allow-write"),
        "{stderr}"
    );
}

/// Large calls and large answers at once: the client's reader must not hold the relay
/// while it blocks writing to a server that is itself blocked writing its answers.
#[test]
fn large_frames_both_ways_do_not_deadlock() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    let calls = 12u64;
    let big = "x".repeat(200 * 1024);
    let mut stdin = w.stdin.take().unwrap();
    w.calls_sent += calls as usize;
    let writer = std::thread::spawn(move || {
        for id in 0..calls {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{big}"}}}}}}"#,
                100 + id
            );
            stdin.write_all(line.as_bytes()).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
        stdin
    });
    for _ in 0..calls {
        let line = w.recv();
        assert!(line.len() > 200 * 1024, "{}", text(&line[..200]));
    }
    w.stdin = Some(writer.join().unwrap());
    assert_eq!(w.close().code(), Some(0));
    let outcomes = w.record();
    assert!(
        outcomes
            .iter()
            .all(|o| at(o, &["execution", "status"]) == "success")
    );
}

/// A server that ignores the SIGTERM forwarded to it is killed after the grace, and the
/// client that left mid-call still finds its call recorded.
#[test]
fn a_server_ignoring_sigterm_is_killed_after_the_grace() {
    let mut w = Wrap::start(&["--grace-ms", "200"], &["--ignore-term"]);
    w.initialize();
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hang"}}}"#);
    w.await_server("hang");
    w.terminate();
    assert_eq!(w.wait().code(), Some(128 + 9), "{}", w.stderr());
    let outcomes = w.record();
    assert!(
        at(outcome_of(&outcomes, "echo")[0], &["execution", "message"]).contains("the server died")
    );
}

#[test]
fn a_server_that_cannot_start_is_an_error_and_the_session_still_closes() {
    let dir = tempfile::tempdir().unwrap();
    let out = aegis()
        .args(["wrap", "--", "/nonexistent/mcp-server"])
        .stdin(Stdio::null())
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("/nonexistent/mcp-server"));
}

/// A ceiling a policy station sets cannot be enforced on a relayed server, so the call is
/// refused rather than recorded under it. The built-in YAML station's ceilings are
/// refused at start (`a_policy_rule_with_ceilings_is_refused_before_the_server_starts`);
/// any other station's are met here, call by call: the same YAML station loaded from its
/// cdylib stands in for one.
#[test]
fn a_policy_ceiling_on_a_relayed_tool_refuses_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("limited.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: limited\n    action: allow\n    tool: limited\n    limits: { max_wall_ms: 1000 }\n",
    )
    .unwrap();
    let profile = dir.path().join("yaml-cdylib.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"yaml-cdylib\"\ndescription = \"d\"\n[policy]\nplugin = {:?}\n\
             config = {{ path = {:?} }}\n[capability]\n[sandbox]\n[audit]\n\
             plugin = \"builtin:memory-sink\"\n",
            aegis_test_support::cdylib("aegis-policy-yaml-plugin")
                .display()
                .to_string(),
            policy.display().to_string()
        ),
    )
    .unwrap();
    let mut w = Wrap::start_in(
        &["--profile".as_ref(), profile.as_os_str()],
        &[],
        &["--tool", "limited"],
    );
    w.initialize();
    let refused = w.call(3, "limited", "{}");
    assert!(is_error(&refused));
    assert!(text(&w.received).contains("host station"));
    assert_eq!(w.close().code(), Some(0));
    assert!(!w.server_saw().contains("tools/call"));
    let outcomes = w.record();
    let limited = outcome_of(&outcomes, "limited");
    assert_eq!(at(limited[0], &["execution", "status"]), "host_denied");
    assert!(at(limited[0], &["execution", "reason"]).contains("limits"));
}

#[test]
fn a_call_the_client_cancels_is_recorded_as_cancelled() {
    let mut w = Wrap::start(&["--grace-ms", "200"], &[]);
    w.initialize();
    w.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hang"}}}"#);
    w.await_server("hang");
    w.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"took too long"}}"#);
    // The relay ends the call on the cancellation itself (the server is asleep).
    w.until("the cancelled call's outcome", |w| {
        text(&std::fs::read(w.path("record.jsonl")).unwrap()).contains("took too long")
    });
    assert_eq!(w.close().code(), Some(128 + 15));
    let outcomes = w.record();
    assert_eq!(
        at(outcome_of(&outcomes, "echo")[0], &["execution", "message"]),
        "cancelled: the client cancelled: took too long"
    );
}

#[test]
fn in_record_only_mode_a_changed_tool_still_runs() {
    let mut w = Wrap::start(&["--pins-record-only"], &["--rug-pull"]);
    w.initialize();
    assert!(!is_error(&w.call(3, "echo", r#"{"text":"before"}"#)));
    w.request(4, "tools/list", "{}");
    assert!(!is_error(&w.call(5, "echo", r#"{"text":"anyway"}"#)));
    assert_eq!(w.close().code(), Some(0));
    assert!(w.stderr().contains("calling anyway"));
    w.record();
}

/// Regression (an outside attack): a client that stops reading its input used to keep
/// wrap from ever writing its close line, even after SIGTERM, since the answers owed at
/// exit waited on a writer blocked on the client's full pipe.
#[test]
fn a_client_that_stops_reading_does_not_keep_the_session_open() {
    let mut w = Wrap::start(&["--grace-ms", "300"], &[]);
    w.initialize();
    w.stall.store(true, Ordering::SeqCst);
    // An answer far larger than a pipe holds: wrap blocks writing it to us.
    let calls = 1u64;
    let big = "x".repeat(1024 * 1024);
    let mut stdin = w.stdin.take().unwrap();
    w.calls_sent += calls as usize;
    std::thread::spawn(move || {
        for id in 0..calls {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{big}"}}}}}}"#,
                100 + id
            );
            if stdin.write_all(line.as_bytes()).is_err() || stdin.write_all(b"\n").is_err() {
                break;
            }
        }
        // Kept open: the client neither reads nor leaves.
        std::thread::sleep(HOLD_OPEN);
    });
    w.await_server("\"id\":100");
    std::thread::sleep(Duration::from_millis(500));
    w.terminate();
    assert_eq!(w.wait().code(), Some(128 + 15), "{}", w.stderr());
    w.record();
}

/// Regression (D6, an outside attack): wrap's reader of the client used to block writing
/// to a server that does not read its stdin, so it never read the client's EOF and the
/// stop sequence never started. The client here writes more than wrap can hold between
/// it and that server (the server's pipe, wrap's queue, its readers' buffers), then
/// hangs up: wrap must see the hang-up without reading up to it.
#[test]
fn a_client_hanging_up_behind_a_server_that_does_not_read_still_stops_it() {
    let mut w = Wrap::start(&["--grace-ms", "300"], &[]);
    w.initialize();
    w.send_echo(3, "hang");
    w.await_server("hang");
    // From here on the server reads nothing.
    let frame = 16 * 1024;
    let wrap_holds = 64 * 1024 + DEFAULT_QUEUE_BYTES + 3 * frame + 32 * 1024;
    let total = wrap_holds + 256 * 1024;
    w.widen_stdin(total.next_power_of_two());
    let text = "y".repeat(frame - 120);
    let (mut id, mut written) = (100, 0);
    while written < total {
        w.send_echo(id, &text);
        written += text.len() + 120;
        id += 1;
    }
    let status = w.close();
    let said = w.stderr();
    assert_eq!(status.code(), Some(128 + 15), "{said}");
    assert!(
        said.contains("after the client closed its stdin; sending SIGTERM"),
        "{said}"
    );
    let outcomes = w.record_of_decided();
    for outcome in &outcomes {
        assert!(
            at(outcome, &["execution", "message"]).contains("the server died"),
            "{outcome:?}"
        );
    }
}

/// A client that never reads its stdout while the server answers a lot: the server
/// blocks writing, stops reading, and wrap's queues fill both ways. Closing the client's
/// stdin still ends the session, and every call the relay decided has its outcome.
#[test]
fn a_client_that_never_reads_still_ends_the_session_by_closing_stdin() {
    let mut w = Wrap::start(&["--grace-ms", "300"], &[]);
    w.initialize();
    w.stall.store(true, Ordering::SeqCst);
    let text = "z".repeat(32 * 1024);
    // 960 KiB of answers, far past what wrap and the pipes hold toward us; what the
    // server does not read of the calls fits in the widened pipe.
    let calls = 30;
    w.widen_stdin(1024 * 1024);
    for id in 0..calls {
        w.send_echo(100 + id, &text);
    }
    let status = w.close();
    let said = w.stderr();
    assert_eq!(status.code(), Some(128 + 15), "{said}");
    assert!(said.contains("sending SIGTERM"), "{said}");
    assert!(said.contains("the client is not reading"), "{said}");
    let outcomes = w.record_of_decided();
    let statuses: Vec<String> = outcomes
        .iter()
        .map(|o| at(o, &["execution", "status"]))
        .collect();
    assert!(statuses.iter().any(|s| s == "success"), "{statuses:?}");
    assert!(statuses.iter().any(|s| s == "trap"), "{statuses:?}");
}

/// Regression (an outside attack): a refusal owed to a client that stopped reading used
/// to be decided under the relay's lock, then wait there for the client's writer, which
/// was blocked on the client; the exit path then waited for the relay forever and the
/// session never got its close line.
#[test]
fn a_refusal_owed_to_a_client_that_stopped_reading_does_not_hold_up_the_exit() {
    let mut w = Wrap::start(&["--grace-ms", "300"], &[]);
    w.initialize();
    w.stall.store(true, Ordering::SeqCst);
    // An answer far larger than a pipe holds: wrap blocks writing it to us.
    w.send_echo(100, &"x".repeat(1024 * 1024));
    w.until("the server answered", |w| {
        text(&std::fs::read(w.path("server-out.log")).unwrap_or_default()).contains("\"id\":100")
    });
    // Gives wrap's reader of the server time to reach its blocked write (this makes the
    // old failure likely; nothing is asserted about time).
    std::thread::sleep(Duration::from_millis(300));
    w.send(r#"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"get-env","arguments":{"name":"HOME"}}}"#);
    std::thread::sleep(Duration::from_millis(300));
    w.terminate();
    assert_eq!(w.wait().code(), Some(128 + 15), "{}", w.stderr());
    let outcomes = w.record_of_decided();
    assert_eq!(
        at(outcome_of(&outcomes, "echo")[0], &["execution", "status"]),
        "success"
    );
}

/// Known limit (spec/SPEC.md, "Relayed calls"): SIGKILL cannot be caught, so wrap writes
/// nothing more. The call in flight keeps its intent without an outcome, the session has
/// no close line, and verify says Indeterminate and lists the call as in flight.
#[test]
fn sigkill_of_wrap_leaves_its_call_in_flight_and_the_session_unanchored() {
    let mut w = Wrap::start(&[], &[]);
    w.initialize();
    w.send_echo(3, "hang");
    w.await_server("hang");
    let server = w.server_pid();
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    // Nothing stops the server either: it is ended here.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(server).unwrap(),
        rustix::process::Signal::KILL,
    );
    let out = aegis()
        .arg("verify")
        .arg(w.path("record.jsonl"))
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{report}{}", text(&out.stderr));
    assert!(report.starts_with("Indeterminate"), "{report}");
    let in_flight: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("in_flight "))
        .collect();
    assert_eq!(in_flight.len(), 1, "{report}");
    assert!(in_flight[0].ends_with(r#"tool_id "echo""#), "{report}");
    let record = text(&std::fs::read(w.path("record.jsonl")).unwrap());
    assert!(!record.contains(r#""line_type":"close""#));
}

/// Regression (second outside attack): a `tools/call` naming its arguments `Arguments`
/// (or `ARGUMENTS`, `argumentſ`) reached the policy as no arguments, so the deny rule on
/// `path under /etc` was skipped, while a server that folds keys as Go's
/// `encoding/json` does read `/etc/shadow`. Now the relay refuses it, on the record, and
/// the server never sees it.
#[test]
fn arguments_under_another_spelling_never_reach_a_server_that_folds_keys() {
    let mut w = Wrap::start(&[], &["--fold-keys", "--tool", "read"]);
    w.initialize();
    // The rule holds for the exact spelling, and an allowed path runs.
    assert!(is_error(&w.call(3, "read", r#"{"path":"/etc/shadow"}"#)));
    let allowed = w.call(4, "read", r#"{"path":"/data/x"}"#);
    assert!(!is_error(&allowed), "{allowed:?}");
    for (id, spelling) in [(5, "Arguments"), (6, "ARGUMENTS"), (7, "argumentſ")] {
        let answer = w.request(
            id,
            "tools/call",
            &format!(r#"{{"name":"read","{spelling}":{{"path":"/etc/shadow"}}}}"#),
        );
        assert!(is_error(&answer), "{spelling}: {answer:?}");
    }
    // Duplicates inside the arguments: a first-wins reader would find /etc/shadow.
    let twice = w.call(8, "read", r#"{"path":"/etc/shadow","path":"/data/x"}"#);
    assert!(is_error(&twice));
    assert_eq!(w.close().code(), Some(0), "{}", w.stderr());
    let saw = w.server_saw();
    assert!(
        saw.lines()
            .all(|l| !(l.contains("tools/call") && l.contains("shadow"))),
        "{saw}"
    );
    let outcomes = w.record();
    let read = outcome_of(&outcomes, "read");
    assert_eq!(read.len(), 6);
    assert_eq!(at(read[0], &["policy", "status"]), "denied");
    for refused in &read[2..] {
        assert_eq!(at(refused, &["execution", "status"]), "host_denied");
    }
}

/// Regression (second outside attack): a server whose every listing names a next page
/// on page 1 was never pinned (the Python SDK's client reads only page 1), so its rug
/// pull reached the model and calls ran. The relay lists all pages itself and pins.
#[test]
fn a_listing_the_client_never_finishes_is_pinned_by_the_relay() {
    let mut w = Wrap::start(&[], &["--paged", "--rug-pull"]);
    w.initialize();
    let listed = w.received.clone();
    assert!(
        text(&listed).contains(r#""nextCursor":"2""#),
        "the client saw page 1 only"
    );
    assert!(!is_error(&w.call(3, "echo", r#"{"text":"before"}"#)));
    w.request(4, "tools/list", "{}");
    let refused = w.call(5, "echo", r#"{"text":"after"}"#);
    assert!(is_error(&refused), "{refused:?}");
    assert!(text(&w.received).contains("changed since it was pinned"));
    assert_eq!(w.close().code(), Some(0), "{}", w.stderr());
    assert!(!w.server_saw().contains("after"));
    let own_pages = w
        .server_saw()
        .lines()
        .filter(|l| l.contains("aegis-relay/tools-list/") && l.contains(r#""cursor":"2""#))
        .count();
    assert_eq!(own_pages, 1, "the relay followed page 2 itself");
    w.record();
}

/// A YAML rule with ceilings could only refuse in wrap (a relayed server cannot be held
/// to them): wrap refuses the policy at start, naming its line, whether the policy comes
/// from `--policy` or from the profile, and never starts the server.
#[test]
fn a_policy_rule_with_ceilings_is_refused_before_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: plain\n    action: deny\n    tool: get-env\n  - id: capped\n    action: allow\n    tool: echo\n    limits:\n      max_wall_ms: 100\n",
    )
    .unwrap();
    let profile = dir.path().join("yaml.toml");
    std::fs::write(
        &profile,
        "name = \"yaml\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-yaml\"\nconfig = { path = \"policy.yaml\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n",
    )
    .unwrap();
    let pid = dir.path().join("server.pid");
    let by_flag = ["wrap".as_ref(), "--policy".as_ref(), policy.as_os_str()];
    let by_profile = ["--profile".as_ref(), profile.as_os_str(), "wrap".as_ref()];
    for args in [&by_flag[..], &by_profile[..]] {
        let out = aegis()
            .args(args)
            .arg("--")
            .arg("python3")
            .arg(server_script())
            .arg("--pid-file")
            .arg(&pid)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{stderr}");
        let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap();
        assert!(
            error.contains("policy.yaml:7: rule \"capped\": limits: aegis wrap cannot hold"),
            "{error}"
        );
        assert!(!pid.exists(), "the server was never started");
    }
}

/// From a review: the server's own process was signalled, not what it started, so a
/// child that ignores SIGTERM outlived wrap. The server now leads a process group of its
/// own, and what is left of the group is killed once the server has exited.
#[test]
fn what_the_server_started_does_not_outlive_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child.pid");
    let mut w = Wrap::start(&[], &["--leave-child", child.to_str().unwrap()]);
    w.initialize();
    assert_eq!(w.close().code(), Some(0));
    assert!(
        common::process_gone(&child),
        "the server's child outlived wrap"
    );
}

/// Issue 33, item 3: the path a model tried is on the record for every call, allowed
/// or refused (found from the tool's input schema, kept as given), the rest of the
/// arguments are not; and `aegis recheck` decides a stricter rule over the path,
/// while a rule over an argument the record does not state stays undecidable.
#[test]
fn the_path_a_call_tried_is_recorded_and_a_stricter_rule_over_it_is_rechecked() {
    let mut w = Wrap::start(&[], &["--path-tool", "read_file", "--path-tool", "read"]);
    w.initialize();
    let tried = w.call(
        3,
        "read_file",
        r#"{"content":"kept-off","path":"../secret.txt"}"#,
    );
    assert!(!is_error(&tried), "{tried:?}");
    let inside = w.call(4, "read_file", r#"{"path":"/data/a.txt"}"#);
    assert!(!is_error(&inside), "{inside:?}");
    // Refused by the policy (`read` under /etc): still recorded.
    assert!(is_error(&w.call(5, "read", r#"{"path":"/etc/shadow"}"#)));
    assert_eq!(w.close().code(), Some(0), "{}", w.stderr());

    let outcomes = w.record();
    let read_file = outcome_of(&outcomes, "read_file");
    let bound = |o: &Object, member: &str| at(o, &["decision_axes", "bound", member]);
    assert_eq!(bound(read_file[0], "values"), r#"{"path":"../secret.txt"}"#);
    let names = read_file[0]
        .get("decision_axes")
        .and_then(Value::as_object)
        .and_then(|a| a.get("bound"))
        .and_then(Value::as_object)
        .and_then(|b| b.get("names"))
        .map(|n| text(&n.to_canonical()));
    // `mode` is in the schema but names no place: not bound.
    assert_eq!(names.as_deref(), Some(r#"["path"]"#));
    assert_eq!(bound(read_file[1], "values"), r#"{"path":"/data/a.txt"}"#);
    let read = outcome_of(&outcomes, "read");
    assert_eq!(at(read[0], &["policy", "status"]), "denied");
    assert_eq!(bound(read[0], "values"), r#"{"path":"/etc/shadow"}"#);
    let record = text(&std::fs::read(w.path("record.jsonl")).unwrap());
    assert!(
        !record.contains("kept-off"),
        "an unbound argument reached the record"
    );
    assert!(!record.contains("call_arguments"));

    // `aegis log` answers when, where, what and under which key, line by line.
    let out = aegis()
        .arg("log")
        .arg(w.path("record.jsonl"))
        .output()
        .unwrap();
    let listing = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{listing}");
    let session = listing.lines().nth(1).unwrap();
    assert!(
        session.starts_with("# session 0 opened 20") && session.contains(" by wrap -- python3 "),
        "{listing}"
    );
    let tried_line = listing
        .lines()
        .find(|l| l.contains("  read_file  ok  "))
        .unwrap();
    assert!(
        tried_line.contains(r#"tried {"path":"../secret.txt"}"#),
        "{listing}"
    );
    assert!(tried_line.starts_with("20"), "timed: {listing}");

    let recheck = |policy: &str| {
        let file = w.path("recheck.yaml");
        std::fs::write(&file, policy).unwrap();
        let out = aegis()
            .args(["recheck", "--policy"])
            .arg(&file)
            .arg(w.path("record.jsonl"))
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout))
    };
    let ids: Vec<String> = read_file.iter().map(|o| field(o, "call_id")).collect();
    // Reads under /data only (and nothing else: `read` is refused by the default, as
    // it was): the relative path has no normal form, so it is refused.
    let (code, out) = recheck(
        "version: 1
default: deny
rules:
  - id: read-data
    action: allow
    tool: read_file
    arguments:
      path: { under: /data }
",
    );
    assert_eq!(code, Some(6), "{out}");
    assert!(
        out.starts_with(&format!(
            "newly refused:\n  {}  read_file  allowed → denied  rule read-data\n",
            ids[0]
        )),
        "{out}"
    );
    assert!(
        out.contains("3 calls: 2 unchanged, 1 changed, 0 undecidable"),
        "{out}"
    );
    // A rule over `content`, which the binding does not name: never guessed.
    let (code, out) = recheck(
        "version: 1
default: allow
rules:
  - id: no-kept-off
    action: deny
    tool: read_file
    arguments:
      content: { equals: kept-off }
",
    );
    assert_eq!(code, Some(6), "{out}");
    assert!(
        out.contains(&format!("{}  read_file  arguments not recorded", ids[0])),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}  read_file  arguments not recorded", ids[1])),
        "{out}"
    );
}

/// `--record-arguments` keeps each call's whole arguments, and a recheck then decides
/// a rule over any of them.
#[test]
fn with_record_arguments_every_argument_is_rechecked() {
    let mut w = Wrap::start(&["--record-arguments"], &["--path-tool", "read_file"]);
    w.initialize();
    let tried = w.call(3, "read_file", r#"{"content":"kept","path":"/data/a"}"#);
    assert!(!is_error(&tried), "{tried:?}");
    assert_eq!(w.close().code(), Some(0), "{}", w.stderr());
    let outcomes = w.record();
    let read_file = outcome_of(&outcomes, "read_file");
    assert_eq!(
        at(read_file[0], &["decision_axes", "call_arguments"]),
        r#"{"content":"kept","path":"/data/a"}"#
    );
    let file = w.path("recheck.yaml");
    std::fs::write(
        &file,
        "version: 1
default: allow
rules:
  - id: no-kept
    action: deny
    arguments:
      content: { equals: kept }
",
    )
    .unwrap();
    let out = aegis()
        .args(["recheck", "--policy"])
        .arg(&file)
        .arg(w.path("record.jsonl"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("allowed → denied  rule no-kept"),
        "{stdout}"
    );
}

/// Issue 34, item 1: an audit directory gives each session a file of its own, so a
/// second session never waits on one still open (with --no-wait a shared file would
/// exit 5 at once), and `aegis verify DIR` checks both files.
#[test]
fn sessions_writing_into_one_audit_directory_never_wait_on_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records = dir.path().join("records");
    std::fs::create_dir(&records).unwrap();
    let audit = format!("{}/", records.display());
    let mut wrap = aegis()
        .args(["wrap", "--audit", &audit, "--signing-key"])
        .arg(&key)
        .arg("--")
        .arg("python3")
        .arg(server_script())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = wrap.stdin.take().unwrap();
    let mut stdout = BufReader::new(wrap.stdout.take().unwrap());
    stdin
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
        )
        .unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"result\""), "{line}");
    // The wrap session is open and holds its file; a run into the same directory
    // starts at once.
    let run = aegis()
        .args(["run", "--no-wait", "--audit", &audit, "--signing-key"])
        .arg(&key)
        .args(["--component"])
        .arg(common::guest("echo"))
        .args(["--id", "echo", "--input", "hi"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    drop(stdin);
    assert_eq!(wrap.wait().unwrap().code(), Some(0));
    let files: Vec<PathBuf> = std::fs::read_dir(&records)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with(".aarl") && name.matches('-').count() >= 2,
            "{name}"
        );
    }
    let out = aegis().arg("verify").arg(&records).output().unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report.matches("Verified (unpinned)").count(), 2, "{report}");
}
