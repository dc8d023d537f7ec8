//! `aegis recheck` against real records: each is written by a host opened through the
//! runtime API (host tools, a durable file sink, a generated key) under one YAML
//! policy, then replayed by the built binary under a stricter one, a looser one, the
//! same one, and the same stricter one loaded from the YAML plugin's cdylib. The diffs
//! are asserted line for line; so are the exit codes, the refusal of a tampered record,
//! the warnings, and that rechecking writes nothing.

use crate::common::text;
use aegis_record::key::SigningKey;
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::handler::{HandlerFailure, HostContext, HostHandler};
use aegis_runtime::{CallRequest, Host, Profile};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

/// The policy the record is written under.
const RECORDED: &str = "\
version: 1
default: deny
rules:
  - id: read-notes
    action: allow
    tool: read-notes
  - id: echo
    action: rate_limit
    tool: echo
    rate: { max: 2, per_seconds: 3600 }
  - id: no-shell
    action: deny
    tool: shell
  - id: deploy-needs-a-human
    action: pending_approval
    tool: deploy
  - id: deploy-by-ops
    action: allow
    tool: deploy
    role: ops
  - id: fetch-admin
    action: allow
    tool: fetch
    role: admin
  - id: notes
    action: allow
    tool: notes
  - id: notes-no-guest
    action: deny
    tool: notes
    role: guest
";

/// Stricter: read-notes for admins only, every deploy parked, an admin's fetch parked.
const STRICTER: &str = "\
version: 1
default: deny
rules:
  - id: read-notes-admin
    action: allow
    tool: read-notes
    role: admin
  - id: echo
    action: rate_limit
    tool: echo
    rate: { max: 2, per_seconds: 3600 }
  - id: no-shell
    action: deny
    tool: shell
  - id: deploy-needs-a-human
    action: pending_approval
    tool: deploy
  - id: fetch-admin-approval
    action: pending_approval
    tool: fetch
    role: admin
  - id: notes
    action: allow
    tool: notes
  - id: notes-no-guest
    action: deny
    tool: notes
    role: guest
";

/// Looser: everything allowed but a guest's notes; deploy under a rate limit of one.
const LOOSER: &str = "\
version: 1
default: allow
rules:
  - id: echo
    action: rate_limit
    tool: echo
    rate: { max: 2, per_seconds: 3600 }
  - id: deploy-metered
    action: rate_limit
    tool: deploy
    rate: { max: 1, per_seconds: 3600 }
  - id: notes-no-guest
    action: deny
    tool: notes
    role: guest
";

const BIN: &str = env!("CARGO_BIN_EXE_aegis");

/// Every tool of these records: it hands its input back.
fn echo(_: &HostContext, input: &[u8]) -> Result<Vec<u8>, HandlerFailure> {
    Ok(input.to_vec())
}

/// A host writing `record` under the policy file `policy`, with host tools that echo
/// their input; `notes` may read `root`.
fn host(record: &Path, policy: &Path, key: &SigningKey, root: &Path) -> Host {
    let echo: HostHandler = Arc::new(echo);
    let tool = |id: &str, fs_read: Vec<PathBuf>| ToolManifest {
        id: id.into(),
        kind: ToolKind::Host,
        fs_read,
        fs_write: Vec::new(),
        net: Vec::new(),
        limits: DEFAULT_LIMITS,
    };
    let ids = ["read-notes", "echo", "shell", "deploy", "fetch"];
    let mut handlers = BTreeMap::new();
    for id in ids.iter().chain(&["notes"]) {
        handlers.insert((*id).to_owned(), echo.clone());
    }
    Host::builder(Profile::embedded("default").unwrap())
        .policy_file("--policy", policy)
        .audit_file("--audit", record)
        .signing_key(key.clone())
        .tools(ids.iter().map(|id| tool(id, Vec::new())))
        .tool(tool("notes", vec![root.to_owned()]))
        .handlers(handlers)
        .open()
        .unwrap()
}

/// One call; its id.
fn call(host: &Host, tool: &str, role: Option<&str>) -> String {
    let request = CallRequest {
        role,
        ..CallRequest::new(tool, b"x")
    };
    host.call(&request).unwrap().outcome.call_id
}

/// The record of eleven calls, closed; the call ids in order.
struct Recorded {
    dir: tempfile::TempDir,
    record: PathBuf,
    key_id: String,
    ids: Vec<String>,
}

impl Recorded {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn policy(&self, name: &str, yaml: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, yaml).unwrap();
        p
    }
}

fn recorded() -> Recorded {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("notes-root");
    std::fs::create_dir(&root).unwrap();
    let policy = dir.path().join("recorded.yaml");
    std::fs::write(&policy, RECORDED).unwrap();
    let record = dir.path().join("record.aarl");
    let key = SigningKey::generate().unwrap();
    let h = host(&record, &policy, &key, &root);
    let ids = vec![
        call(&h, "read-notes", None),     // 0 allowed
        call(&h, "shell", None),          // 1 denied
        call(&h, "deploy", None),         // 2 parked
        call(&h, "deploy", Some("ops")),  // 3 allowed
        call(&h, "echo", None),           // 4 allowed (rate)
        call(&h, "echo", None),           // 5 allowed (rate)
        call(&h, "echo", None),           // 6 rate limited
        call(&h, "fetch", Some("admin")), // 7 allowed
        call(&h, "fetch", Some("guest")), // 8 denied (default)
        call(&h, "notes", Some("admin")), // 9 allowed, granted fs.read
        call(&h, "notes", Some("guest")), // 10 denied on fs.read
    ];
    h.into_audit().unwrap().session.close().unwrap();
    Recorded {
        key_id: key.key_id().to_string(),
        dir,
        record,
        ids,
    }
}

/// `aegis recheck ARGS`, in an empty working directory, with a cache directory of its
/// own: both are checked to stay empty.
fn recheck(cwd: &Path, args: &[&std::ffi::OsStr]) -> Output {
    let out = Command::new(BIN)
        .arg("recheck")
        .args(args)
        .current_dir(cwd)
        .env("XDG_CACHE_HOME", cwd.join("cache"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        std::fs::read_dir(cwd).unwrap().count(),
        0,
        "recheck wrote into its working directory"
    );
    out
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                all.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    all
}

#[test]
fn a_record_rechecked_under_stricter_looser_and_the_same_policy() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let id = |n: usize| r.ids[n].as_str();
    let stricter = r.policy("stricter.yaml", STRICTER);
    let looser = r.policy("looser.yaml", LOOSER);
    let same = r.path("recorded.yaml");
    let before = snapshot(r.dir.path());

    let out = recheck(
        cwd.path(),
        &[
            os("--policy"),
            os(&stricter),
            os("--key"),
            os(&r.key_id),
            os(&r.record),
        ],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    let held = "whether its budget held depends on call times the record does not hold";
    let rate = format!("rate limit (rule echo): {held}");
    let metered = format!("rate limit (rule deploy-metered): {held}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "newly refused:\n  {}  read-notes  allowed → denied  the default\n\
             newly parked:\n  {}  deploy  allowed → pending_approval  rule deploy-needs-a-human\n  \
             {}  fetch  allowed → pending_approval  rule fetch-admin-approval\n\
             undecidable:\n  {}  echo  {rate}\n  {}  echo  {rate}\n  {}  echo  {rate}\n\
             11 calls: 5 unchanged, 3 changed, 3 undecidable\n",
            id(0),
            id(3),
            id(7),
            id(4),
            id(5),
            id(6)
        )
    );
    // Pinned: no warning.
    assert!(
        !text(&out.stderr).contains("warning: the record"),
        "{}",
        text(&out.stderr)
    );

    let out = recheck(cwd.path(), &[os("--policy"), os(&looser), os(&r.record)]);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "newly allowed:\n  {}  shell  denied → allowed  the default\n  \
             {}  fetch  denied → allowed  the default\n\
             newly rate-limited (allowed or limited by the rule's budget; not refused):\n  \
             {}  deploy  pending_approval → rate_limited  rule deploy-metered\n\
             undecidable:\n  {}  deploy  {metered}\n  \
             {}  echo  {rate}\n  {}  echo  {rate}\n  {}  echo  {rate}\n\
             11 calls: 4 unchanged, 3 changed, 4 undecidable\n",
            id(1),
            id(8),
            id(2),
            id(3),
            id(4),
            id(5),
            id(6)
        )
    );
    // Not pinned: said once, and the recheck goes on.
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr
            .matches("warning: the record is Verified (unpinned)")
            .count(),
        1,
        "{stderr}"
    );

    // The same policy set: every call as recorded, the rate-limited ones included.
    let out = recheck(cwd.path(), &[os("--policy"), os(&same), os(&r.record)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "11 calls: 11 unchanged, 0 changed, 0 undecidable\n"
    );

    // Standard input, as verify reads it.
    let out = Command::new(BIN)
        .args(["recheck", "--policy"])
        .arg(&same)
        .arg("-")
        .current_dir(cwd.path())
        .stdin(std::fs::File::open(&r.record).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Nothing the recheck read was changed, and nothing was added.
    assert_eq!(snapshot(r.dir.path()), before);
}

#[test]
fn json_is_one_object_naming_every_change() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let stricter = r.policy("stricter.yaml", STRICTER);
    let out = recheck(
        cwd.path(),
        &[os("--json"), os("--policy"), os(&stricter), os(&r.record)],
    );
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["calls"], 11);
    assert_eq!(v["unchanged"], 5);
    assert_eq!(v["changed"], 3);
    assert_eq!(v["undecidable"], 3);
    assert_eq!(v["record"], "Verified (unpinned)");
    assert_eq!(v["policy_set_hash"].as_str().map(str::len), Some(64));
    let changed = v["changed_calls"].as_array().unwrap();
    let groups: Vec<(&str, &str, &str, &str)> = changed
        .iter()
        .map(|c| {
            (
                c["call_id"].as_str().unwrap(),
                c["group"].as_str().unwrap(),
                c["old"].as_str().unwrap(),
                c["new"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [
            (r.ids[0].as_str(), "newly_refused", "allowed", "denied"),
            (
                r.ids[3].as_str(),
                "newly_parked",
                "allowed",
                "pending_approval"
            ),
            (
                r.ids[7].as_str(),
                "newly_parked",
                "allowed",
                "pending_approval"
            ),
        ]
    );
    assert!(
        changed[0].get("rule").is_none(),
        "the default names no rule"
    );
    assert_eq!(changed[1]["rule"], "deploy-needs-a-human");
    assert!(changed[0]["reason"].as_str().is_some());
    let undecidable = v["undecidable_calls"].as_array().unwrap();
    assert_eq!(undecidable.len(), 3);
    assert!(undecidable.iter().all(|u| u["code"] == "rate_limit"));
    assert_eq!(undecidable[2]["old"], "rate_limited");
}

/// The stricter policy loaded from the YAML plugin's cdylib, named by path in a
/// profile, decides as the built-in one does.
#[test]
fn a_loaded_policy_plugin_rechecks_like_the_builtin() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let stricter = r.policy("stricter.yaml", STRICTER);
    let library = aegis_test_support::cdylib("aegis-policy-yaml-plugin");
    let profile = r.path("yaml-cdylib.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"yaml-cdylib\"\ndescription = \"d\"\n[policy]\nplugin = {:?}\n\
             config = {{ path = {:?} }}\n[capability]\n[sandbox]\n[audit]\n\
             plugin = \"builtin:memory-sink\"\n",
            library.display().to_string(),
            stricter.display().to_string()
        ),
    )
    .unwrap();
    let builtin = recheck(cwd.path(), &[os("--policy"), os(&stricter), os(&r.record)]);
    let loaded = recheck(cwd.path(), &[os("--profile"), os(&profile), os(&r.record)]);
    assert_eq!(loaded.status.code(), Some(6), "{}", text(&loaded.stderr));
    assert_eq!(text(&loaded.stdout), text(&builtin.stdout));
    assert!(text(&builtin.stdout).contains("3 changed"));
}

#[test]
fn a_tampered_record_is_refused_and_nothing_replayed() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let bytes = text(&std::fs::read(&r.record).unwrap());
    let tampered = r.path("tampered.aarl");
    // The refusal's rule renamed: its outcome's signature no longer holds.
    std::fs::write(&tampered, bytes.replacen("\"no-shell\"", "\"no-shelf\"", 1)).unwrap();
    let out = recheck(
        cwd.path(),
        &[os("--policy"), os(&r.path("recorded.yaml")), os(&tampered)],
    );
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Tampered"), "{stderr}");
    assert!(stderr.contains("nothing was replayed"), "{stderr}");

    // Pinned to a key that did not sign it: refused the same way.
    let other = SigningKey::generate().unwrap().key_id().to_string();
    let out = recheck(
        cwd.path(),
        &[
            os("--key"),
            os(&other),
            os("--policy"),
            os(&r.path("recorded.yaml")),
            os(&r.record),
        ],
    );
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("untrusted key"),
        "{}",
        text(&out.stderr)
    );
}

/// A record cut short (a call in flight, no close): Indeterminate, rechecked after a
/// warning; the call in flight and a refusal whose axes no other call states are
/// undecidable, with why.
#[test]
fn an_indeterminate_record_warns_and_reports_what_it_cannot_decide() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let root = dir.path().join("notes-root");
    std::fs::create_dir(&root).unwrap();
    let policy = dir.path().join("recorded.yaml");
    std::fs::write(&policy, RECORDED).unwrap();
    let record = dir.path().join("record.aarl");
    let h = host(&record, &policy, &SigningKey::generate().unwrap(), &root);
    let refused = call(&h, "notes", Some("guest"));
    let shell = call(&h, "shell", None);
    let open = h.begin(&CallRequest::new("read-notes", b"x")).unwrap();
    let in_flight = open.call_id().to_owned();
    // Never finished, never dropped: the record ends with its intent.
    std::mem::forget(open);
    let out = recheck(cwd.path(), &[os("--policy"), os(&policy), os(&record)]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "undecidable:\n  {refused}  notes  axes not recorded: the record names only the \
             refused axis fs.read, not every axis the grant would carry\n  \
             {in_flight}  read-notes  no outcome recorded (in flight or unfinished)\n\
             3 calls: 1 unchanged, 0 changed, 2 undecidable\n"
        )
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "warning: the record is Indeterminate — session 0 does not end with a close record"
        ),
        "{stderr}"
    );
    let _ = shell;
}

#[test]
fn a_policy_that_does_not_load_is_one_line_and_the_config_code() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let broken = r.policy("broken.yaml", "version: 1\ndefault: maybe\n");
    for policy in [broken, r.path("missing.yaml")] {
        let out = recheck(cwd.path(), &[os("--policy"), os(&policy), os(&r.record)]);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "");
        let stderr = text(&out.stderr);
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("aegis: "))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].starts_with("error: --policy"), "{stderr}");
    }
}

/// A policy with rules over arguments: the record keeps only what a deciding rule
/// compared, so a call such a rule would decide is undecidable, never replayed with
/// the arguments guessed; calls no argument rule applies to are replayed as usual.
#[test]
fn a_policy_over_arguments_makes_the_calls_it_reads_undecidable() {
    let r = recorded();
    let cwd = tempfile::tempdir().unwrap();
    let by_arguments = r.policy(
        "arguments.yaml",
        "version: 1
default: deny
rules:
  - id: shell-safe-only
    action: allow
    tool: shell
    arguments:
      command: { equals: ls }
  - id: read-notes
    action: allow
    tool: read-notes
",
    );
    let out = recheck(
        cwd.path(),
        &[
            os("--json"),
            os("--policy"),
            os(&by_arguments),
            os(&r.record),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    let undecidable = v["undecidable_calls"].as_array().unwrap();
    let shell: Vec<&serde_json::Value> = undecidable
        .iter()
        .filter(|u| u["call_id"] == r.ids[1].as_str())
        .collect();
    assert_eq!(shell.len(), 1, "{v}");
    assert_eq!(shell[0]["code"], "arguments_not_recorded");
    assert!(
        undecidable
            .iter()
            .all(|u| u["call_id"] != r.ids[0].as_str()),
        "read-notes reads no argument: {v}"
    );
}
