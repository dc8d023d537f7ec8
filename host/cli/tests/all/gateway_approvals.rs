//! A call `aegis gateway` parks, held open until a person decides it, between real
//! peers: the official MCP Python SDK (`mcp==2.3.0`, tests/mcp-peers/client.py) calls
//! the fixture manifest's `echo` over Streamable HTTP; the policy parks `echo`; the test,
//! as the person, finds the request in the queue and runs `aegis approvals approve|deny`
//! with its own key. What the client got and what the record proves are checked.
//!
//! No time is asserted: the waits are bounded only so a hung test fails.

use crate::common::approvals::{
    a_line_with, approver, assert_exit, of_type, one_call, one_decision, one_request, record_lines,
    str_at,
};
use crate::common::peers::{peers_dir, repo};
use crate::common::{field, object, text};
use aegis_record::json::{Object, Value};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PARKS_ECHO: &str = "version: 1\ndefault: allow\nrules:\n  - id: echo-needs-a-person\n    action: pending_approval\n    tool: echo\n";

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.stdin(Stdio::null());
    c
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway")
}

/// A gateway serving HTTP, a client holding a call to `echo` through it, and their files.
struct Held {
    dir: tempfile::TempDir,
    gateway: Child,
    said: Arc<Mutex<String>>,
    client: Child,
}

impl Held {
    /// Starts `aegis gateway --http` (policy [`PARKS_ECHO`], a durable signed record, the
    /// queue in `queue/`, and `extra` flags), then client.py in `mode` calling `echo` once
    /// at the URL the gateway prints.
    fn start(mode: &str, extra: &[&str]) -> Held {
        Held::start_with(mode, extra, None, false)
    }

    /// [`Held::start`], with client.py answering elicitation questions `answer`
    /// (`accept` or `decline`; `None`: it declares no elicitation), and, with
    /// `progress`, appending each progress notification's message to `progress`.
    fn start_with(mode: &str, extra: &[&str], answer: Option<&str>, progress: bool) -> Held {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("host.key");
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::write(dir.path().join("policy.yaml"), PARKS_ECHO).unwrap();
        let mut gateway = aegis()
            .arg("gateway")
            .arg("--tools")
            .arg(fixtures().join("tools.toml"))
            .args(["--http", "127.0.0.1:0"])
            .arg("--policy")
            .arg(dir.path().join("policy.yaml"))
            .arg("--audit")
            .arg(dir.path().join("record.jsonl"))
            .arg("--signing-key")
            .arg(&key)
            .arg("--approvals")
            .arg(dir.path().join("queue"))
            .args(extra)
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = gateway.stderr.take().unwrap();
        let said = Arc::new(Mutex::new(String::new()));
        let saying = Arc::clone(&said);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                saying.lock().unwrap().push_str(&line);
                if let Some(at) = line
                    .split(" on ")
                    .nth(1)
                    .filter(|a| a.starts_with("http://"))
                {
                    let _ = tx.send(at.trim().to_owned());
                }
                line.clear();
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("the gateway never served: {}", said.lock().unwrap()));
        let mut client = Command::new("python3");
        if let Some(answer) = answer {
            client.env("AEGIS_TEST_ELICIT", answer);
        }
        if progress {
            client.env("AEGIS_TEST_PROGRESS", dir.path().join("progress"));
        }
        let client = client
            .env("PYTHONPATH", peers_dir().join("py"))
            .arg(repo().join("tests/mcp-peers/client.py"))
            .arg(mode)
            .arg(dir.path().join("got.json"))
            .arg(r#"[{"tool":"echo","arguments":{"message":"approved by a person"}}]"#)
            .arg("--")
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("client.stderr")).unwrap())
            .spawn()
            .unwrap();
        Held {
            dir,
            gateway,
            said,
            client,
        }
    }

    fn queue(&self) -> PathBuf {
        self.dir.path().join("queue")
    }

    fn said(&self) -> String {
        format!(
            "gateway: {}\nclient: {}",
            self.said.lock().unwrap(),
            text(&std::fs::read(self.dir.path().join("client.stderr")).unwrap_or_default())
        )
    }

    /// The id of the one request filed in the queue, once it is there.
    fn filed(&mut self) -> String {
        let queue = self.queue();
        let ended = |held: &mut Held| {
            let status = held.client.try_wait().unwrap()?;
            Some(format!("the client ended ({status}): {}", held.said()))
        };
        one_request(&queue, || ended(self))
    }

    /// [`Held::start_with`] in a session (`legacy`), with `--approve-via client`, the
    /// client answering `answer`.
    fn asking(answer: Option<&str>) -> Held {
        Held::start_with("legacy", &["--approve-via", "client"], answer, false)
    }

    /// The first progress message client.py heard about `id`, once it has heard one.
    fn heard_about(&mut self, id: &str) -> String {
        let progress = self.dir.path().join("progress");
        let ended = |held: &mut Held| {
            let status = held.client.try_wait().unwrap()?;
            Some(format!("the client ended ({status}): {}", held.said()))
        };
        a_line_with(&progress, id, || ended(self))
    }

    /// `aegis approvals ARGS --approvals QUEUE`.
    fn approvals(&self, args: &[&str]) -> Output {
        aegis()
            .arg("approvals")
            .args(args)
            .arg("--approvals")
            .arg(self.queue())
            .output()
            .unwrap()
    }

    /// Waits for the client to end, stops the gateway (SIGTERM, exit 0), and returns
    /// the client's one call's report.
    fn finish(&mut self) -> Object {
        let status = self.client.wait().unwrap();
        assert!(status.success(), "client.py failed: {}", self.said());
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(self.gateway.id()).unwrap()).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let ended = self.gateway.wait().unwrap();
        assert_eq!(ended.code(), Some(0), "{}", self.said());
        one_call(&self.dir.path().join("got.json"))
    }

    fn lines(&self) -> Vec<Object> {
        record_lines(&self.dir.path().join("record.jsonl"))
    }

    /// `aegis verify RECORD ARGS`.
    fn verify(&self, args: &[&std::ffi::OsStr]) -> Output {
        aegis()
            .arg("verify")
            .arg(self.dir.path().join("record.jsonl"))
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A failed test leaves no process behind (both were started by this test).
        let _ = self.client.kill();
        let _ = self.gateway.kill();
        let _ = self.client.wait();
        let _ = self.gateway.wait();
    }
}

/// The park's outcome, and the outcomes of calls resumed under `id`.
fn park_and_resumed(lines: &[Object], id: &str) -> (Vec<Object>, Vec<Object>) {
    let outcomes = of_type(lines, "outcome");
    let parked = outcomes
        .iter()
        .filter(|o| str_at(o, &["policy", "status"]) == Some("pending_approval"))
        .cloned()
        .collect::<Vec<_>>();
    for p in &parked {
        assert_eq!(str_at(p, &["policy", "approval_id"]), Some(id), "{p:?}");
    }
    let resumed = outcomes
        .iter()
        .filter(|o| str_at(o, &["decision_axes", "approval_ref"]) == Some(id))
        .cloned()
        .collect();
    (parked, resumed)
}

/// Approved in a session (the direct HTTP path): the client's one request is answered
/// with the tool's real result, and the record holds the park, the approver's signed
/// decision and the resumed call referring to it, and verifies with the approver pinned.
#[test]
fn an_approved_call_runs_and_the_client_gets_the_tools_result() {
    let mut held = Held::start("legacy", &[]);
    let id = held.filed();
    let (key, public) = approver(held.dir.path(), "alice");
    let shown = held.approvals(&["show", &id]);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    assert!(
        text(&shown.stdout).contains("approved by a person"),
        "{}",
        text(&shown.stdout)
    );
    let out = held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}\n{:?}",
        text(&out.stderr),
        held.said(),
        held.lines()
    );

    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    assert_eq!(
        field(&call, "text"),
        r#"{"message":"approved by a person"}"#,
        "{call:?}"
    );

    let lines = held.lines();
    let (parked, resumed) = park_and_resumed(&lines, &id);
    assert_eq!(parked.len(), 1, "{lines:?}");
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("key"));
    assert_eq!(resumed.len(), 1, "{lines:?}");
    assert_eq!(str_at(&resumed[0], &["policy", "status"]), Some("allowed"));
    assert_eq!(
        of_type(&lines, "intent").len(),
        2,
        "the park and the resumed call"
    );
    assert_eq!(of_type(&lines, "close").len(), 1);

    let verified = held.verify(&["--approver-key".as_ref(), public.as_os_str()]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}{}",
        text(&verified.stdout),
        text(&verified.stderr)
    );
}

/// Denied, without a session (rmcp's own path): the client gets `isError` with the
/// approver's reason, and nothing runs: the record holds the park and the signed
/// denial, no resumed call.
#[test]
fn a_denied_call_is_answered_with_the_approvers_reason() {
    let mut held = Held::start("auto", &[]);
    let id = held.filed();
    let (key, public) = approver(held.dir.path(), "bob");
    let out = held.approvals(&[
        "deny",
        &id,
        "--reason",
        "not during the freeze",
        "--approver-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    let said = field(&call, "text");
    assert!(
        said.contains("denied by key") && said.contains("not during the freeze"),
        "{said}"
    );
    assert!(
        field(&call, "result").contains("approval_denied"),
        "{call:?}"
    );
    let lines = held.lines();
    let (parked, resumed) = park_and_resumed(&lines, &id);
    assert_eq!(parked.len(), 1);
    assert!(resumed.is_empty(), "{resumed:?}");
    assert_eq!(of_type(&lines, "outcome").len(), 1, "only the park");
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1);
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("key"));
    let verified = held.verify(&["--approver-key".as_ref(), public.as_os_str()]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

/// Nobody decides: at `--approval-timeout` the host denies the park as expired, and
/// the client is told so; the record holds the host's decision.
#[test]
fn an_undecided_call_expires_and_the_client_is_told() {
    let mut held = Held::start("legacy", &["--approval-timeout", "1s"]);
    let id = held.filed();
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    assert!(
        field(&call, "result").contains("approval_expired"),
        "{call:?}"
    );
    let lines = held.lines();
    let (parked, resumed) = park_and_resumed(&lines, &id);
    assert_eq!(parked.len(), 1);
    assert!(resumed.is_empty(), "{resumed:?}");
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1);
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("host"));
    let verified = held.verify(&[]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

/// A tool whose write root holds the approvals queue could approve its own parked
/// calls: refused at start, naming the queue, before anything is served.
#[test]
fn a_tool_that_could_write_in_the_approvals_queue_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let wasm = fixtures().join("../wasm/echo.wasm").canonicalize().unwrap();
    let tools = dir.path().join("tools.toml");
    std::fs::write(
        &tools,
        format!(
            "[[tool]]\nid = \"echo\"\ndescription = \"d\"\ncomponent = {:?}\nshape = \"command\"\nwrite = [\"data\"]\n[tool.input_schema]\ntype = \"object\"\n",
            wasm.display().to_string()
        ),
    )
    .unwrap();
    let out = aegis()
        .arg("gateway")
        .arg("--tools")
        .arg(&tools)
        .arg("--approvals")
        .arg(data.join("queue"))
        .output()
        .unwrap();
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the approvals queue") && said.contains("write root"),
        "{said}"
    );
    assert!(!data.join("queue").exists(), "the queue was made");
}

/// What an approval by the client's user leaves: the question was asked once naming the
/// approval id and the tool, and the record holds the park, one decision `via: client`,
/// `mechanism` as asked (`elicitation` or `input_required`), and the resumed call; it
/// verifies, and is Indeterminate (exit 3) with an approver pinned.
fn assert_approved_by_the_clients_user(held: &Held, mechanism: &str) {
    let lines = held.lines();
    let decision = one_decision(&lines, "client");
    let id = field(&decision, "approval_id");
    assert_eq!(
        str_at(&decision, &["approver", "mechanism"]),
        Some(mechanism)
    );
    let got = object(&std::fs::read(held.dir.path().join("got.json")).unwrap());
    match got.get("elicited") {
        Some(Value::Array(asked)) if asked.len() == 1 => {
            let asked = format!("{:?}", asked[0]);
            assert!(asked.contains(&id) && asked.contains("echo"), "{asked}");
        }
        other => panic!("elicited: {other:?}"),
    }
    let (parked, resumed) = park_and_resumed(&lines, &id);
    assert_eq!(parked.len(), 1, "{lines:?}");
    assert_eq!(resumed.len(), 1, "{lines:?}");
    assert_eq!(str_at(&resumed[0], &["policy", "status"]), Some("allowed"));
    assert_exit(&held.verify(&[]), 0);
    let (_, someone) = approver(held.dir.path(), "mallory");
    assert_exit(
        &held.verify(&["--approver-key".as_ref(), someone.as_os_str()]),
        3,
    );
}

/// The client's user approves through MCP elicitation (`--approve-via client`), in a
/// session (so the call goes to rmcp's path, which can ask): the Python SDK's
/// elicitation callback is asked once (the question names the approval id and the
/// tool), the tool runs and the client gets its real result, and the record's one
/// decision says `via: client`, `mechanism: elicitation`; it verifies, and is
/// Indeterminate (exit 3) with an approver key pinned (a client's word is not a
/// person's signature).
#[test]
fn the_clients_user_approves_through_elicitation_and_the_record_says_so() {
    let mut held = Held::asking(Some("accept"));
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    assert_eq!(
        field(&call, "text"),
        r#"{"message":"approved by a person"}"#,
        "{call:?}"
    );
    assert_approved_by_the_clients_user(&held, "elicitation");
}

/// The client's user declines: the client gets the refusal (`approval_denied`),
/// nothing runs (the park is the only outcome), and the one decision is the client's.
#[test]
fn the_clients_user_declines_through_elicitation_and_nothing_runs() {
    let mut held = Held::asking(Some("decline"));
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    assert!(
        field(&call, "result").contains("approval_denied"),
        "{call:?}"
    );
    let lines = held.lines();
    one_decision(&lines, "client");
    assert_eq!(
        of_type(&lines, "outcome").len(),
        1,
        "only the park: {lines:?}"
    );
    assert_exit(&held.verify(&[]), 0);
}

/// A client that declared no elicitation is not asked: the park waits in the queue
/// and a person's approval there runs it (the fallback), on the direct path.
#[test]
fn a_client_that_cannot_be_asked_falls_back_to_the_queue() {
    let mut held = Held::asking(None);
    let id = held.filed();
    let (key, _) = approver(held.dir.path(), "alice");
    assert_exit(
        &held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]),
        0,
    );
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    one_decision(&held.lines(), "key");
}

/// First decider wins: the client's user is asked but never answers, and a person
/// approves in the queue meanwhile. The call runs, the one decision is the person's
/// (`via: key`), and the client's call ends normally: its open question does not hold
/// it. (Whether the client hears the withdrawal is not checked: over HTTP rmcp sends
/// it on the standalone stream.)
#[test]
fn a_person_may_decide_while_the_clients_user_is_asked() {
    let mut held = Held::asking(Some("never"));
    let id = held.filed();
    let (key, _) = approver(held.dir.path(), "alice");
    assert_exit(
        &held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]),
        0,
    );
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    one_decision(&held.lines(), "key");
}

/// A parked call whose client gave a progress token hears that it waits, on rmcp's
/// path (no session) and on the direct one (a session, answered as an event stream
/// once it has waited): the person approves only after the client heard a progress
/// notification naming the approval, and the client still gets the tool's result.
#[test]
fn a_parked_call_hears_progress_while_it_waits_on_either_path() {
    for mode in ["auto", "legacy"] {
        let mut held = Held::start_with(mode, &["--keep-alive-ms", "200"], None, true);
        let id = held.filed();
        let heard = held.heard_about(&id);
        assert!(heard.contains("waiting for approval"), "{mode}: {heard}");
        let (key, _) = approver(held.dir.path(), "alice");
        assert_exit(
            &held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]),
            0,
        );
        let call = held.finish();
        assert_eq!(
            call.get("isError"),
            Some(&Value::Bool(false)),
            "{mode}: {call:?}"
        );
        assert_eq!(
            field(&call, "text"),
            r#"{"message":"approved by a person"}"#,
            "{mode}: {call:?}"
        );
        one_decision(&held.lines(), "key");
    }
}

/// MCP 2026-07-28 (client.py "auto", no session): the parked call is answered
/// `input_required` with the approval question, the Python SDK asks its user (the
/// elicitation callback, once, naming the approval id and the tool) and retries with
/// the answer and the echoed `requestState`; approved, the tool runs and the client
/// gets its real result. The record holds the park, the client's decision (`via:
/// client`, `mechanism: input_required`) and the resumed call; it verifies, Indeterminate
/// (exit 3) with an approver key pinned.
#[test]
fn a_2026_client_is_asked_through_input_required_and_approves() {
    let mut held = Held::start_with("auto", &["--approve-via", "client"], Some("accept"), false);
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    assert_eq!(
        field(&call, "text"),
        r#"{"message":"approved by a person"}"#,
        "{call:?}"
    );
    let got = object(&std::fs::read(held.dir.path().join("got.json")).unwrap());
    assert_eq!(
        got.get("protocol"),
        Some(&Value::String("2026-07-28".into()))
    );
    assert_approved_by_the_clients_user(&held, "input_required");
}

/// MCP 2026-07-28, the client's user declines the `input_required` question: the
/// retry is answered with the refusal (`approval_denied`), nothing runs (the park is
/// the only outcome), and the one decision is the client's.
#[test]
fn a_2026_client_declines_through_input_required_and_nothing_runs() {
    let mut held = Held::start_with("auto", &["--approve-via", "client"], Some("decline"), false);
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    assert!(
        field(&call, "result").contains("approval_denied"),
        "{call:?}"
    );
    let lines = held.lines();
    one_decision(&lines, "client");
    assert_eq!(
        of_type(&lines, "outcome").len(),
        1,
        "only the park: {lines:?}"
    );
    assert_exit(&held.verify(&[]), 0);
}

/// MCP 2026-07-28 with `--approve-via client`, but the client declared no
/// elicitation: not asked; the park waits in the queue and a person's approval runs it.
#[test]
fn a_2026_client_without_elicitation_waits_for_the_queue() {
    let mut held = Held::start_with("auto", &["--approve-via", "client"], None, false);
    let id = held.filed();
    let (key, _) = approver(held.dir.path(), "alice");
    assert_exit(
        &held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]),
        0,
    );
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    one_decision(&held.lines(), "key");
}
