//! A parked call held open between real peers while a person decides it from another
//! process: the official MCP Python SDK (`mcp==2.3.0`) calls `echo` on the reference
//! `server-everything` through `aegis wrap`, whose policy parks `echo`; the test, as the
//! person, finds the request in the queue and runs `aegis approvals approve|deny` with
//! its own key. What the client got, what the queue refuses afterwards and what the
//! record proves are checked.

use crate::common::approvals::{
    approver, assert_exit, of_type, one_call, one_request, record_lines, str_at,
};
use crate::common::peers::{peers_dir, repo};
use crate::common::{field, object, text};
use aegis_record::json::{Object, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

const PARKS_ECHO: &str = "version: 1\ndefault: allow\nrules:\n  - id: echo-needs-a-person\n    action: pending_approval\n    tool: echo\n";

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.stdin(Stdio::null());
    c
}

/// Which client and server the session is between.
#[derive(Clone, Copy)]
enum Peers {
    /// client.py in `legacy` mode (`initialize`) and server-everything.
    Legacy,
    /// client.py in `auto` mode and tests/mcp-peers/server.py: MCP 2026-07-28.
    Modern,
}

/// A client session through `aegis wrap`, still running, and its files.
struct Held {
    dir: tempfile::TempDir,
    client: Child,
}

impl Held {
    /// Starts client.py calling `echo` once through `aegis wrap` (policy [`PARKS_ECHO`],
    /// a durable record, the queue in `queue/`, and `extra` wrap flags).
    fn start(extra: &[&str]) -> Held {
        Held::start_answering(extra, None)
    }

    /// [`Held::start`] with client.py answering the relay's elicitation questions
    /// `answer` (`accept` or `decline`; `None`: it declares no elicitation).
    fn start_answering(extra: &[&str], answer: Option<&str>) -> Held {
        Held::start_on(Peers::Legacy, extra, answer)
    }

    /// [`Held::start_answering`] between `peers`.
    fn start_on(peers: Peers, extra: &[&str], answer: Option<&str>) -> Held {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("host.key");
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        std::fs::write(dir.path().join("policy.yaml"), PARKS_ECHO).unwrap();
        let everything = peers_dir()
            .join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let (mode, server): (&str, Vec<std::ffi::OsString>) = match peers {
            Peers::Legacy => ("legacy", vec!["node".into(), everything.into()]),
            // The SDK's own server, its stdin and stdout logged by the tap.
            Peers::Modern => (
                "auto",
                vec![
                    "python3".into(),
                    repo().join("tests/mcp-peers/tee.py").into(),
                    dir.path().join("server").into(),
                    "--".into(),
                    "python3".into(),
                    repo().join("tests/mcp-peers/server.py").into(),
                ],
            ),
        };
        let mut cmd = Command::new("python3");
        if let Some(answer) = answer {
            cmd.env("AEGIS_TEST_ELICIT", answer);
        }
        cmd.env("PYTHONPATH", peers_dir().join("py"))
            .arg(repo().join("tests/mcp-peers/client.py"))
            .arg(mode)
            .arg(dir.path().join("got.json"))
            .arg(r#"[{"tool":"echo","arguments":{"message":"approved by a person"}}]"#)
            // For the SDK's server, which wrap starts with the client's environment.
            .arg(format!("PYTHONPATH={}", peers_dir().join("py").display()))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_aegis"))
            .arg("wrap")
            .arg("--policy")
            .arg(dir.path().join("policy.yaml"))
            .arg("--audit")
            .arg(dir.path().join("record.jsonl"))
            .arg("--signing-key")
            .arg(&key)
            .arg("--approvals")
            .arg(dir.path().join("queue"))
            .args(extra)
            .arg("--")
            .args(server)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        let client = cmd.spawn().unwrap();
        Held { dir, client }
    }

    fn queue(&self) -> PathBuf {
        self.dir.path().join("queue")
    }

    /// The id of the one request filed in the queue, once it is there.
    fn filed(&mut self) -> String {
        let (client, stderr) = (&mut self.client, self.dir.path().join("stderr"));
        one_request(&self.dir.path().join("queue"), || {
            let status = client.try_wait().unwrap()?;
            Some(format!(
                "the client ended ({status}): {}",
                text(&std::fs::read(&stderr).unwrap_or_default())
            ))
        })
    }

    fn stderr(&self) -> String {
        text(&std::fs::read(self.dir.path().join("stderr")).unwrap_or_default())
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

    /// Waits for the client to end and returns its one call's report.
    fn finish(&mut self) -> Object {
        let status = self.client.wait().unwrap();
        assert!(status.success(), "client.py failed: {}", self.stderr());
        one_call(&self.dir.path().join("got.json"))
    }

    /// The record's lines.
    fn lines(&self) -> Vec<Object> {
        record_lines(&self.dir.path().join("record.jsonl"))
    }

    /// Waits for the client, whose one call the client's user approved (asked by
    /// `mechanism`): it ran and the client got its real result; the question named the
    /// approval id; the record's one decision is the client's, by `mechanism`, and it
    /// verifies. The record's lines and the approval id.
    fn approved_by_the_clients_user(&mut self, mechanism: &str) -> (Vec<Object>, String) {
        let call = self.finish();
        assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
        assert_eq!(field(&call, "text"), "Echo: approved by a person");
        let got = object(&std::fs::read(self.dir.path().join("got.json")).unwrap());
        let lines = self.lines();
        let decisions = of_type(&lines, "decision");
        assert_eq!(decisions.len(), 1, "{decisions:?}");
        let id = field(&decisions[0], "approval_id");
        match got.get("elicited") {
            Some(Value::Array(asked)) if asked.len() == 1 => {
                assert!(format!("{:?}", asked[0]).contains(&id), "{asked:?}");
            }
            other => panic!("elicited: {other:?}"),
        }
        assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("client"));
        assert_eq!(
            str_at(&decisions[0], &["approver", "mechanism"]),
            Some(mechanism)
        );
        assert_exit(&self.verify(&[]), 0);
        (lines, id)
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

/// The whole walk: the call waits, `show` states what approving authorises, a person
/// approves with their own key, the server runs it and the client gets its real result;
/// a second approval is refused (exit 19); the record holds the park, the signed
/// decision and the resumed call referring to it, verifies with the approver pinned, is
/// Indeterminate under another approver, and `recheck` reads it.
#[test]
fn an_approved_call_runs_and_the_record_proves_who_approved_it() {
    let mut held = Held::start(&[]);
    let id = held.filed();
    let (key, public) = approver(held.dir.path(), "alice");

    let shown = held.approvals(&["show", &id]);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let shown = text(&shown.stdout);
    assert!(
        shown.contains("echo") && shown.contains("approved by a person"),
        "{shown}"
    );

    let listed = held.approvals(&["list", "--json"]);
    assert!(
        text(&listed.stdout).contains("\"pending\""),
        "{}",
        text(&listed.stdout)
    );

    let out = held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let call = held.finish();
    assert_eq!(
        field(&call, "text"),
        "Echo: approved by a person",
        "{call:?}"
    );
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)));

    let again = held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(19), "{}", text(&again.stderr));

    let lines = held.lines();
    let outcomes = of_type(&lines, "outcome");
    let parked: Vec<_> = outcomes
        .iter()
        .filter(|o| str_at(o, &["policy", "status"]) == Some("pending_approval"))
        .collect();
    assert_eq!(parked.len(), 1, "{outcomes:?}");
    assert_eq!(
        str_at(parked[0], &["policy", "approval_id"]),
        Some(id.as_str())
    );
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1);
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("key"));
    let resumed: Vec<_> = outcomes
        .iter()
        .filter(|o| {
            o.get("decision_axes")
                .and_then(Value::as_object)
                .and_then(|a| a.get("approval_ref"))
                .and_then(Value::as_str)
                == Some(id.as_str())
        })
        .collect();
    assert_eq!(resumed.len(), 1, "{outcomes:?}");
    assert_eq!(str_at(resumed[0], &["policy", "status"]), Some("allowed"));

    let pinned = held.verify(&["--approver-key".as_ref(), public.as_os_str()]);
    assert_eq!(pinned.status.code(), Some(0), "{}", text(&pinned.stdout));
    let (_, other) = approver(held.dir.path(), "mallory");
    let unpinned = held.verify(&["--approver-key".as_ref(), other.as_os_str()]);
    assert_ne!(
        unpinned.status.code(),
        Some(0),
        "{}",
        text(&unpinned.stdout)
    );
    assert!(
        text(&unpinned.stdout).contains("untrusted approver"),
        "{}",
        text(&unpinned.stdout)
    );

    let recheck = aegis()
        .arg("recheck")
        .arg("--policy")
        .arg(held.dir.path().join("policy.yaml"))
        .arg(held.dir.path().join("record.jsonl"))
        .output()
        .unwrap();
    assert_eq!(
        recheck.status.code(),
        Some(0),
        "{}{}",
        text(&recheck.stdout),
        text(&recheck.stderr)
    );
}

/// A denial answers the client with the approver's reason, and nothing reaches the
/// server: the record holds the park and the signed denial, no resumed call.
#[test]
fn a_denied_call_is_answered_with_the_approvers_reason() {
    let mut held = Held::start(&[]);
    let id = held.filed();
    let (key, _) = approver(held.dir.path(), "bob");
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
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)));
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
    assert_eq!(of_type(&lines, "decision").len(), 1);
    assert_eq!(of_type(&lines, "outcome").len(), 1, "only the park");
    let verified = held.verify(&[]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

/// Nobody decides: at the timeout the host denies the park as expired, the client is
/// told so, and a person's approval after it is refused (exit 20 or 19: expired, or
/// settled by the host's own denial first).
#[test]
fn an_undecided_call_expires_and_the_client_is_told() {
    let mut held = Held::start(&["--approval-timeout", "1s"]);
    let id = held.filed();
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)));
    assert!(
        field(&call, "result").contains("approval_expired"),
        "{call:?}"
    );
    let (key, _) = approver(held.dir.path(), "carol");
    let late = held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]);
    assert!(
        matches!(late.status.code(), Some(19 | 20)),
        "{:?} {}",
        late.status,
        text(&late.stderr)
    );
    let lines = held.lines();
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

/// The client's user approves through MCP elicitation (`--approve-via client`): the
/// Python SDK's elicitation callback is asked (the question names the approval id), the
/// call runs, and the record's one decision says `via: client`, `mechanism:
/// elicitation`; it verifies, and is Indeterminate (exit 3) under a pinned approver key.
#[test]
fn the_clients_user_approves_through_elicitation_and_the_record_says_so() {
    let mut held = Held::start_answering(&["--approve-via", "client"], Some("accept"));
    held.approved_by_the_clients_user("elicitation");
    let (_, other) = approver(held.dir.path(), "mallory");
    let pinned = held.verify(&["--approver-key".as_ref(), other.as_os_str()]);
    assert_eq!(pinned.status.code(), Some(3), "{}", text(&pinned.stdout));
}

/// The client's user declines: the client gets the refusal (`approval_denied`), the
/// server never sees the call, and the decision is the client's denial.
#[test]
fn the_clients_user_declines_through_elicitation_and_nothing_runs() {
    let mut held = Held::start_answering(&["--approve-via", "client"], Some("decline"));
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    assert!(
        field(&call, "result").contains("approval_denied"),
        "{call:?}"
    );
    let lines = held.lines();
    let decisions = of_type(&lines, "decision");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("client"));
}

/// A client that declared no elicitation is not asked: the park is filed in the queue
/// and a person's approval there still runs it (the fallback).
#[test]
fn a_client_that_cannot_be_asked_falls_back_to_the_queue() {
    let mut held = Held::start_answering(&["--approve-via", "client"], None);
    let id = held.filed();
    let (key, _) = approver(held.dir.path(), "alice");
    let approved = held.approvals(&["approve", &id, "--approver-key", key.to_str().unwrap()]);
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{}",
        text(&approved.stderr)
    );
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(false)), "{call:?}");
    let decisions = of_type(&held.lines(), "decision");
    assert_eq!(str_at(&decisions[0], &["approver", "via"]), Some("key"));
}

/// MCP 2026-07-28 between the SDK's client and the SDK's server: the parked call is
/// answered `input_required` with the question, the client's callback answers, and its
/// retry runs the call once approved. The server is sent the call without the retry's
/// `requestState` and `inputResponses` (it would refuse a `requestState` it did not
/// seal), and the record's one decision says the client approved through
/// `input_required`.
#[test]
fn a_2026_07_28_client_is_asked_through_input_required_and_its_retry_runs() {
    let mut held = Held::start_on(Peers::Modern, &["--approve-via", "client"], Some("accept"));
    let (lines, id) = held.approved_by_the_clients_user("input_required");
    let got = object(&std::fs::read(held.dir.path().join("got.json")).unwrap());
    assert_eq!(field(&got, "protocol"), "2026-07-28", "{got:?}");
    let server_in = text(&std::fs::read(held.dir.path().join("server.in")).unwrap());
    let calls: Vec<&str> = server_in
        .lines()
        .filter(|l| l.contains(r#""method":"tools/call""#))
        .collect();
    assert_eq!(calls.len(), 1, "the server ran the call once: {server_in}");
    assert!(
        !calls[0].contains("requestState") && !calls[0].contains("inputResponses"),
        "{}",
        calls[0]
    );
    // One park, one resumed call under it; nothing was queued for a person.
    let outcomes = of_type(&lines, "outcome");
    assert!(
        outcomes
            .iter()
            .any(|o| str_at(o, &["decision_axes", "approval_ref"]) == Some(id.as_str())),
        "{outcomes:?}"
    );
}

/// MCP 2026-07-28, the client's user declines: the retry is answered with the
/// refusal, and the server never sees the call.
#[test]
fn a_2026_07_28_client_that_declines_runs_nothing() {
    let mut held = Held::start_on(Peers::Modern, &["--approve-via", "client"], Some("decline"));
    let call = held.finish();
    assert_eq!(call.get("isError"), Some(&Value::Bool(true)), "{call:?}");
    assert!(
        field(&call, "result").contains("approval_denied"),
        "{call:?}"
    );
    let server_in = text(&std::fs::read(held.dir.path().join("server.in")).unwrap());
    assert!(
        !server_in.contains(r#""method":"tools/call""#),
        "{server_in}"
    );
    let decisions = of_type(&held.lines(), "decision");
    assert_eq!(
        str_at(&decisions[0], &["approver", "mechanism"]),
        Some("input_required")
    );
}
