//! `aegis run` and approvals: a parked call is filed and exits 12; a person approves it
//! from another process; the same command with `--approval ID` runs it once. Other
//! arguments, a second use, a denial and a call not yet decided are each refused with
//! their documented exit code, and the record verifies with the approver pinned.

use crate::common::approvals::{approver, record_lines};
use crate::common::{field, object, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const PARKS_DEPLOY: &str = "version: 1\ndefault: allow\nrules:\n  - id: deploy-needs-a-person\n    action: pending_approval\n    tool: deploy\n";

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.stdin(Stdio::null());
    c
}

fn echo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm/echo.wasm")
}

/// A record, a host key, a policy that parks `deploy`, a queue and a person's key.
struct Desk {
    dir: tempfile::TempDir,
}

impl Desk {
    fn new() -> Desk {
        let dir = tempfile::tempdir().unwrap();
        // The host's key and a person's, each with its public lines beside it.
        for name in ["host.key", "alice.key"] {
            approver(dir.path(), name);
        }
        std::fs::write(dir.path().join("policy.yaml"), PARKS_DEPLOY).unwrap();
        Desk { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `aegis run --json` of `deploy` with `input`, then `extra`.
    fn run(&self, input: &str, extra: &[&str]) -> Output {
        aegis()
            .arg("run")
            .arg("--json")
            .arg("--component")
            .arg(echo())
            .args(["--id", "deploy", "--input", input, "--policy"])
            .arg(self.path("policy.yaml"))
            .arg("--audit")
            .arg(self.path("record.jsonl"))
            .arg("--signing-key")
            .arg(self.path("host.key"))
            .arg("--approvals")
            .arg(self.path("queue"))
            .args(extra)
            .output()
            .unwrap()
    }

    /// Runs `deploy` with `input`: parked, filed; returns its approval id.
    fn park(&self, input: &str) -> String {
        let out = self.run(input, &[]);
        assert_eq!(out.status.code(), Some(12), "{}", text(&out.stderr));
        let json = object(&out.stdout);
        assert_eq!(field(&json, "class"), "pending_approval");
        let id = field(&json, "approval_id").to_owned();
        assert!(
            field(&json, "next").contains(&format!("--approval {id}")),
            "{json:?}"
        );
        assert!(self.path("queue").join(format!("{id}.request")).is_file());
        id
    }

    fn decide(&self, verb: &[&str], id: &str) -> Output {
        aegis()
            .arg("approvals")
            .args(verb)
            .arg(id)
            .arg("--approver-key")
            .arg(self.path("alice.key"))
            .arg("--approvals")
            .arg(self.path("queue"))
            .output()
            .unwrap()
    }
}

#[test]
fn an_approved_park_runs_once_with_the_same_arguments() {
    let desk = Desk::new();
    let id = desk.park(r#"{"env":"staging"}"#);

    // Not decided yet: nothing runs, and the approval stays usable.
    let early = desk.run(r#"{"env":"staging"}"#, &["--approval", &id]);
    assert_eq!(early.status.code(), Some(12), "{}", text(&early.stderr));
    assert!(
        text(&early.stderr).contains("not decided yet"),
        "{}",
        text(&early.stderr)
    );

    let out = desk.decide(&["approve"], &id);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let ran = desk.run(r#"{"env":"staging"}"#, &["--approval", &id]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let json = object(&ran.stdout);
    assert_eq!(field(&json, "output"), r#"{"env":"staging"}"#);

    let twice = desk.run(r#"{"env":"staging"}"#, &["--approval", &id]);
    assert_eq!(twice.status.code(), Some(19), "{}", text(&twice.stderr));

    let verified = aegis()
        .arg("verify")
        .arg(desk.path("record.jsonl"))
        .arg("--approver-key")
        .arg(desk.path("alice.key.pub"))
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
    let lines = record_lines(&desk.path("record.jsonl"));
    let resumed = lines
        .iter()
        .filter(|l| field(l, "line_type") == "outcome")
        .filter(|l| text(&l.to_canonical()).contains(&format!("\"approval_ref\":\"{id}\"")))
        .count();
    assert_eq!(resumed, 1);
}

/// The approval binds the arguments: the same tool with other input is refused before
/// the stations (the approval is spent: one use), and nothing runs.
#[test]
fn other_arguments_under_an_approval_are_refused() {
    let desk = Desk::new();
    let id = desk.park(r#"{"env":"staging"}"#);
    assert_eq!(desk.decide(&["approve"], &id).status.code(), Some(0));
    let other = desk.run(r#"{"env":"production"}"#, &["--approval", &id]);
    assert_eq!(other.status.code(), Some(16), "{}", text(&other.stderr));
    let json = object(&other.stdout);
    assert!(!json.contains_key("output"), "{json:?}");
    assert!(
        field(&json, "verdict").contains("arguments differ"),
        "{json:?}"
    );
}

/// A denial is answered with the person's reason, exit 10; nothing runs.
#[test]
fn a_denied_park_does_not_run() {
    let desk = Desk::new();
    let id = desk.park(r#"{"env":"staging"}"#);
    let out = desk.decide(&["deny", "--reason", "freeze until Monday"], &id);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let denied = desk.run(r#"{"env":"staging"}"#, &["--approval", &id]);
    assert_eq!(denied.status.code(), Some(10), "{}", text(&denied.stderr));
    assert!(text(&denied.stderr).contains("freeze until Monday"));
    assert!(denied.stdout.is_empty());
}

/// An id that is not one is a usage error, before anything is opened.
#[test]
fn a_malformed_approval_id_is_a_usage_error() {
    let desk = Desk::new();
    let out = desk.run("x", &["--approval", "apr-nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!desk.path("record.jsonl").exists());
}

/// A tool granted writes over the approvals queue could place its own approvals: run
/// refuses before opening anything, naming the queue.
#[test]
fn a_tool_that_could_write_the_queue_is_refused() {
    let desk = Desk::new();
    std::fs::create_dir(desk.path("queue")).unwrap();
    let queue = desk.path("queue");
    let out = desk.run("x", &["--allow-write", queue.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("approvals queue"),
        "{}",
        text(&out.stderr)
    );
    assert!(!desk.path("record.jsonl").exists());
}

/// `approve --expires-in` narrows the approval to end sooner than its park: the
/// decision's scope says so, a later end than the park's is a usage error that places
/// nothing, and an approval past its own end runs nothing.
#[test]
fn an_approval_can_end_sooner_than_its_park_never_later() {
    let desk = Desk::new();
    let id = desk.park(r#"{"env":"staging"}"#);
    let later = desk.decide(&["approve", "--expires-in", "2h"], &id);
    assert_eq!(later.status.code(), Some(1), "{}", text(&later.stderr));
    assert!(
        text(&later.stderr).contains("after the park's own expiry"),
        "{}",
        text(&later.stderr)
    );
    let sooner = desk.decide(&["approve", "--expires-in", "5m"], &id);
    assert_eq!(sooner.status.code(), Some(0), "{}", text(&sooner.stderr));
    let ran = desk.run(r#"{"env":"staging"}"#, &["--approval", &id]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let lines = record_lines(&desk.path("record.jsonl"));
    let park = lines
        .iter()
        .find(|l| text(&l.to_canonical()).contains("\"status\":\"pending_approval\""))
        .unwrap();
    let parked_until =
        crate::common::approvals::str_at(park, &["policy", "scope", "expires_at"]).unwrap();
    let decision = crate::common::approvals::of_type(&lines, "decision").remove(0);
    let approved_until =
        crate::common::approvals::str_at(&decision, &["verdict", "scope", "expires_at"])
            .unwrap()
            .to_owned();
    assert!(
        approved_until.as_str() < parked_until,
        "{approved_until} vs {parked_until}"
    );

    // Narrowed to one second: once that has passed, the approval runs nothing.
    let id = desk.park(r#"{"env":"qa"}"#);
    let brief = desk.decide(&["approve", "--expires-in", "1s"], &id);
    assert_eq!(brief.status.code(), Some(0), "{}", text(&brief.stderr));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let late = desk.run(r#"{"env":"qa"}"#, &["--approval", &id]);
    assert_ne!(late.status.code(), Some(0), "{}", text(&late.stderr));
    assert!(!object(&late.stdout).contains_key("output"));
    assert!(
        text(&late.stdout).contains("expired") || text(&late.stderr).contains("expired"),
        "{}{}",
        text(&late.stdout),
        text(&late.stderr)
    );
}
