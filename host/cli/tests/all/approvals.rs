//! `aegis approvals list|show|approve|deny` against a real queue directory, with a
//! request filed by the library as a parking host files it, and keys from `aegis keygen`.

use crate::common::{at, field, object, text};
use aegis_approvals::{Front, Queue, Request, State};
use aegis_record::json::SafeInt;
use aegis_record::{
    ApprovalScope, Approver, DecisionVerdict, FsScope, HttpRule, NetScope, digest::ArgumentsDigest,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.stdin(Stdio::null());
    c
}

/// `aegis approvals ARGS --approvals DIR`.
fn approvals(dir: &Path, args: &[&str]) -> Output {
    aegis()
        .arg("approvals")
        .args(args)
        .arg("--approvals")
        .arg(dir)
        .output()
        .unwrap()
}

fn time_in(secs: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    aegis_record::time::format_micros((now + secs * 1_000_000) as u64)
}

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    key
}

/// A queue in a fresh directory, with one request filed (`expires_in` seconds left).
fn filed(expires_in: i64) -> (tempfile::TempDir, Queue, Request) {
    let tmp = tempfile::tempdir().unwrap();
    let queue = Queue::open(&tmp.path().join("approvals")).unwrap();
    let arguments = r#"{"path":"/srv/notes/plan.txt"}"#;
    let mut r = Request {
        approval_id: aegis_record::line::new_approval_id(),
        parked_at: time_in(0),
        expires_at: time_in(expires_in),
        host: "build-7".into(),
        pid: SafeInt::from(4242u32),
        front: Front::Gateway,
        record: "/var/lib/aegis/audit.aarl".into(),
        tool_id: "read_file".into(),
        rule: Some("reads-need-a-person".into()),
        reason: Some("reading outside the workspace".into()),
        arguments: None,
        arguments_cut: false,
        bound: None,
        scope: ApprovalScope {
            tool_id: "read_file".into(),
            arguments_digest: Some(ArgumentsDigest::of_canonical_arguments(
                arguments.as_bytes(),
            )),
            fs: Some(FsScope {
                read_paths: vec!["/srv/notes".into()],
                write_paths: vec![],
            }),
            net: Some(NetScope {
                http: vec![HttpRule {
                    host: "api.example.org".into(),
                    ports: vec![443],
                    methods: vec!["GET".into()],
                }],
            }),
            expires_at: Some(time_in(expires_in)),
        },
    };
    r.set_arguments(arguments.into());
    queue.file(&r).unwrap();
    (tmp, queue, r)
}

#[test]
fn list_show_and_approve_round_trip_and_a_second_decision_is_refused() {
    let (tmp, queue, r) = filed(600);
    let dir = queue.dir().unwrap();
    let id = r.approval_id.as_str();

    let out = approvals(dir, &["list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    assert!(listing.starts_with(id), "{listing}");
    assert!(
        listing.contains("pending") && listing.contains("read_file"),
        "{listing}"
    );

    let out = approvals(dir, &["list", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<_> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 1);
    let o = object(lines[0]);
    assert_eq!(field(&o, "state"), "pending");
    assert_eq!(at(&o, &["request", "approval_id"]), id);

    // show names everything approving authorises.
    let out = approvals(dir, &["show", id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let digest = r.scope.arguments_digest.unwrap().to_string();
    for want in [
        "read_file",
        r#"{"path":"/srv/notes/plan.txt"}"#,
        digest.as_str(),
        "fs read           /srv/notes",
        "fs write          (none)",
        "api.example.org ports 443 methods GET",
        r.scope.expires_at.as_deref().unwrap(),
        "gateway on build-7 (pid 4242)",
        "/var/lib/aegis/audit.aarl",
        "reads-need-a-person",
        "reading outside the workspace",
        "pending",
    ] {
        assert!(shown.contains(want), "show lacks {want:?}:\n{shown}");
    }

    let key = keygen(tmp.path(), "approver.key");
    let out = approvals(
        dir,
        &["approve", id, "--approver-key", key.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let State::Decided(d) = queue.state(id).unwrap() else {
        panic!("not decided: {:?}", queue.state(id));
    };
    assert_eq!(
        d.verdict,
        DecisionVerdict::Approved {
            scope: r.scope.clone()
        }
    );
    // The approver's own signature over the id and verdict, by the key given.
    aegis_record::approval::check(id, &d.verdict, &d.approver).unwrap();
    let key_id = aegis_record::SigningKey::load(&key).unwrap().key_id();
    assert!(matches!(&d.approver, Approver::Key { key_id: k, .. } if *k == key_id));
    assert!(text(&approvals(dir, &["list"]).stdout).contains("approved"));

    // The first decision stands: approving or denying again is refused, and changes nothing.
    let other = keygen(tmp.path(), "other.key");
    let out = approvals(
        dir,
        &["approve", id, "--approver-key", other.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("already decided"),
        "{}",
        text(&out.stderr)
    );
    let out = approvals(
        dir,
        &[
            "deny",
            id,
            "--reason",
            "no",
            "--approver-key",
            other.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
    assert_eq!(queue.state(id).unwrap(), State::Decided(d.clone()));

    // Once the host claimed it, it is used, and still cannot be decided again.
    queue.claim(id).unwrap();
    assert!(text(&approvals(dir, &["show", id]).stdout).contains("used"));
    let out = approvals(
        dir,
        &["approve", id, "--approver-key", other.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(19), "{}", text(&out.stderr));
}

#[test]
fn deny_records_the_reason_signed() {
    let (tmp, queue, r) = filed(600);
    let key = keygen(tmp.path(), "approver.key");
    let out = approvals(
        queue.dir().unwrap(),
        &[
            "deny",
            &r.approval_id,
            "--reason",
            "not on production",
            "--approver-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let d = queue.claim(&r.approval_id).unwrap();
    assert_eq!(
        d.verdict,
        DecisionVerdict::Denied {
            reason: "not on production".into()
        }
    );
    aegis_record::approval::check(&r.approval_id, &d.verdict, &d.approver).unwrap();
}

#[test]
fn an_expired_request_cannot_be_decided() {
    let (tmp, queue, r) = filed(-1);
    let key = keygen(tmp.path(), "approver.key");
    let out = approvals(queue.dir().unwrap(), &["list"]);
    assert!(
        text(&out.stdout).contains("expired"),
        "{}",
        text(&out.stdout)
    );
    let out = approvals(
        queue.dir().unwrap(),
        &[
            "approve",
            &r.approval_id,
            "--approver-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(20), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("expired"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(queue.state(&r.approval_id).unwrap(), State::Expired);
}

#[test]
fn usage_errors_a_missing_request_and_an_unsafe_queue() {
    let (tmp, queue, r) = filed(600);
    let key = keygen(tmp.path(), "approver.key");
    let key = key.to_str().unwrap();
    let dir = queue.dir().unwrap();
    // deny without --reason, or with an empty one.
    let out = approvals(dir, &["deny", &r.approval_id, "--approver-key", key]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = approvals(
        dir,
        &[
            "deny",
            &r.approval_id,
            "--reason",
            " ",
            "--approver-key",
            key,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // Ids not of the form, a path among them.
    for id in [
        "apr-1",
        "../../etc/passwd",
        "APR-0123456789abcdef0123456789abcdef",
    ] {
        for args in [
            vec!["show", id],
            vec!["approve", id, "--approver-key", key],
            vec!["deny", id, "--reason", "x", "--approver-key", key],
        ] {
            let out = approvals(dir, &args);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{args:?}: {}",
                text(&out.stderr)
            );
            assert!(
                text(&out.stderr).contains("not an approval id"),
                "{}",
                text(&out.stderr)
            );
        }
    }
    // An id of the form that names nothing.
    let nothing = aegis_record::line::new_approval_id();
    let out = approvals(dir, &["show", &nothing]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no such request"),
        "{}",
        text(&out.stderr)
    );
    // A queue others can reach is refused, not read.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = approvals(dir, &["list"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("0755"), "{}", text(&out.stderr));
}

#[test]
fn the_default_queue_is_made_private_under_xdg_state_home() {
    let tmp = tempfile::tempdir().unwrap();
    let out = aegis()
        .args(["approvals", "list"])
        .env("XDG_STATE_HOME", tmp.path().join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tmp.path().join("state/aegis/approvals");
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn approvers_racing_from_separate_processes_have_one_winner() {
    let (tmp, queue, r) = filed(600);
    let keys: Vec<PathBuf> = (0..6)
        .map(|i| keygen(tmp.path(), &format!("k{i}")))
        .collect();
    let children: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut c = aegis();
            c.args(["approvals", if i % 2 == 0 { "approve" } else { "deny" }])
                .arg(&r.approval_id)
                .arg("--approver-key")
                .arg(key)
                .arg("--approvals")
                .arg(queue.dir().unwrap());
            if i % 2 == 1 {
                c.args(["--reason", "no"]);
            }
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code())
        .collect();
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(19)).count(),
        5,
        "{codes:?}"
    );
    let d = queue.claim(&r.approval_id).unwrap();
    aegis_record::approval::check(&r.approval_id, &d.verdict, &d.approver).unwrap();
}
