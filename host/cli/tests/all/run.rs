//! `aegis run` end to end: a real wasip2 tool with exactly the authority its flags
//! grant, each refusal class on its documented exit code, and a durable record that
//! verifies.

use crate::common::{guest, text};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    // Keep the compilation cache out of the user's home.
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c
}

fn run(args: &[&str]) -> Output {
    aegis().arg("run").args(args).output().unwrap()
}

/// `aegis run --component <committed guest> --id <id>`, then `extra`.
fn tool(guest_name: &str, id: &str, extra: &[&str]) -> Output {
    let component = guest(guest_name);
    let mut args = vec!["--component", component.to_str().unwrap(), "--id", id];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn output_goes_to_stdout_and_the_verdict_to_stderr() {
    let out = tool("echo", "echo", &["--input", "hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"hello");
    let err = text(&out.stderr);
    assert!(err.contains("aegis: success: 5 bytes out"), "{err}");
    assert!(
        err.contains("volatile"),
        "the operator is told nothing is kept: {err}"
    );
}

#[test]
fn input_comes_from_a_file_or_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.txt");
    std::fs::write(&file, b"from a file").unwrap();
    let out = tool("echo", "echo", &["--input-file", file.to_str().unwrap()]);
    assert_eq!(out.stdout, b"from a file");
    let echo = guest("echo");
    let mut child = aegis()
        .args(["run", "--component", echo.to_str().unwrap(), "--id", "echo"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.stdout, b"from stdin", "{}", text(&out.stderr));
}

#[test]
fn the_tool_reaches_exactly_the_roots_it_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    let granted = dir.path().join("granted");
    std::fs::create_dir(&granted).unwrap();
    std::fs::write(granted.join("a.txt"), b"inside").unwrap();
    std::fs::write(dir.path().join("b.txt"), b"outside").unwrap();
    let rf = guest("read-file");
    let base = [
        "--component",
        rf.to_str().unwrap(),
        "--id",
        "read",
        "--allow-read",
    ];
    let inside = granted.join("a.txt");
    let out = run(&[
        &base[..],
        &[granted.to_str().unwrap(), "--", inside.to_str().unwrap()],
    ]
    .concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"inside");
    let outside = dir.path().join("b.txt");
    let out = run(&[
        &base[..],
        &[granted.to_str().unwrap(), "--", outside.to_str().unwrap()],
    ]
    .concat());
    assert_eq!(out.status.code(), Some(14), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    // The tool's own complaint reaches the operator, labelled with its id.
    assert!(
        text(&out.stderr).contains("read: read-file:"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn each_refusal_class_has_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: no-shell\n    action: deny\n    tool: shell\n  - id: later\n    action: pending_approval\n    tool: deploy\n  - id: once\n    action: rate_limit\n    tool: search\n    rate: { max: 1, per_seconds: 3600 }\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let echo = guest("echo");
    let e = echo.to_str().unwrap();
    let code = |extra: &[&str]| run(extra).status.code();
    assert_eq!(
        code(&["--component", e, "--id", "shell", "--policy", p]),
        Some(10)
    );
    assert_eq!(
        code(&["--component", e, "--id", "deploy", "--policy", p]),
        Some(12)
    );
    // Each run is a new process, so a budget of one is never spent here: the limit
    // itself is covered by the pipeline suites.
    assert_eq!(
        code(&["--component", e, "--id", "search", "--policy", p]),
        Some(0)
    );
    assert_eq!(
        code(&["--component", e, "--id", "echo", "--capability", "net.http"]),
        Some(13)
    );
    let panic = guest("panic");
    assert_eq!(
        code(&["--component", panic.to_str().unwrap(), "--id", "p"]),
        Some(14)
    );
    let spin = guest("spin");
    assert_eq!(
        code(&[
            "--component",
            spin.to_str().unwrap(),
            "--id",
            "s",
            "--max-wall-ms",
            "50"
        ]),
        Some(15)
    );
    let flood = guest("flood");
    assert_eq!(
        code(&[
            "--component",
            flood.to_str().unwrap(),
            "--id",
            "f",
            "--max-output",
            "10"
        ]),
        Some(15)
    );
}

/// A ceiling that stopped a call is named with its value and the flag that raises it.
#[test]
fn a_ceiling_says_its_value_and_how_to_raise_it() {
    let spin = guest("spin");
    let out = run(&[
        "--component",
        spin.to_str().unwrap(),
        "--id",
        "s",
        "--max-wall-ms",
        "50",
    ]);
    assert_eq!(out.status.code(), Some(15));
    let said = text(&out.stderr);
    assert!(
        said.contains("stopped by the wall_time ceiling of 50 ms")
            && said.contains("raise it with --max-wall-ms"),
        "{said}"
    );
}

#[test]
fn bad_input_is_one_line_with_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.wasm");
    let out = run(&["--component", missing.to_str().unwrap(), "--id", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("missing.wasm"),
        "{err}"
    );

    let policy = dir.path().join("bad.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: a\n    action: maybe\n",
    )
    .unwrap();
    let out = tool("echo", "x", &["--policy", policy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    // The profile in use, then the one-line error.
    let err = err
        .strip_prefix("aegis: profile default (embedded)\n")
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--policy") && err.contains("bad.yaml:5"),
        "{err}"
    );

    // A durable record with the development key is refused before anything runs.
    let record = dir.path().join("record.aarl");
    let echo = guest("echo");
    let out = aegis()
        .args([
            "--profile",
            "durable-file",
            "run",
            "--component",
            echo.to_str().unwrap(),
            "--id",
            "x",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("aegis keygen"));
    assert!(!record.exists());
}

#[test]
fn a_durable_record_keeps_every_run_and_verifies_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = aegis()
        .args(["keygen", "--out", key.to_str().unwrap()])
        .output()
        .unwrap();
    let public = text(&out.stdout)
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("public_key ")
        .to_owned();
    let record = dir.path().join("record.aarl");
    let echo = guest("echo");
    for input in ["one", "two"] {
        let out = run(&[
            "--component",
            echo.to_str().unwrap(),
            "--id",
            "echo",
            "--input",
            input,
            "--audit",
            record.to_str().unwrap(),
            "--signing-key",
            key.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(record.to_str().unwrap()));
    }
    let out = aegis()
        .args(["verify", "--key", &public, record.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let lines = std::fs::read_to_string(&record).unwrap();
    assert_eq!(lines.matches("\"line_type\":\"outcome\"").count(), 2);
    assert_eq!(
        lines.matches("\"line_type\":\"open\"").count(),
        2,
        "two sessions, chained"
    );
}

#[test]
fn a_world_component_runs_the_same_way() {
    let out = tool("world-reverse", "rev", &["--input", "abc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"cba");
    let out = tool("world-refuse", "no", &["--input", "abc"]);
    assert_eq!(out.status.code(), Some(14), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    assert!(
        text(&out.stderr).contains("the tool returned an error"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_example_policy_parses_and_decides() {
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policy.yaml");
    let p = policy.to_str().unwrap();
    for (id, code) in [
        ("echo", 0),
        ("shell", 10),
        ("deploy", 12),
        ("anything-else", 10),
    ] {
        let out = tool("echo", id, &["--input", "x", "--policy", p]);
        assert_eq!(out.status.code(), Some(code), "{id}: {}", text(&out.stderr));
    }
}

/// Two runs with the same key, each on a fresh record file, write different open lines
/// (each session draws a nonce) and so name their calls differently; the record names
/// the component by the SHA-256 `sha256sum` prints, and the request digest covers the
/// arguments after `--` as well as the input.
#[test]
fn fresh_records_never_share_call_ids_and_bind_what_ran() {
    use aegis_record::json::{self, Value};
    use aegis_record::{CapabilityOutcome, OutcomeLine, RequestDigest};
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = aegis()
        .args(["keygen", "--out", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let echo = guest("echo");
    let record_of = |name: &str, args: &[&str]| {
        let record = dir.path().join(name);
        let mut all = vec![
            "--component",
            echo.to_str().unwrap(),
            "--id",
            "echo",
            "--input",
            "same",
            "--audit",
            record.to_str().unwrap(),
            "--signing-key",
            key.to_str().unwrap(),
            "--",
        ];
        all.extend_from_slice(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let bytes = std::fs::read(&record).unwrap();
        let lines: Vec<Vec<u8>> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let Ok(Value::Object(o)) = json::parse(&lines[2]) else {
            panic!("an outcome object");
        };
        (lines[0].clone(), OutcomeLine::from_object(&o).unwrap())
    };
    let (open_a, a) = record_of("a.aarl", &["x"]);
    let (open_b, b) = record_of("b.aarl", &["y"]);
    assert_ne!(open_a, open_b);
    assert_ne!(a.call_id, b.call_id);
    assert_eq!(
        a.request_digest,
        RequestDigest::of_invocation(&["x"], b"same")
    );
    assert_ne!(a.request_digest, b.request_digest);
    let CapabilityOutcome::Granted { grant } = &a.capability else {
        panic!("granted");
    };
    let recorded = grant
        .component_digest
        .expect("the component is named")
        .to_hex();
    let sums = std::fs::read_to_string(echo.with_file_name("SHA256SUMS")).unwrap();
    assert!(
        sums.lines()
            .any(|l| l.starts_with(&recorded) && l.ends_with("echo.wasm")),
        "{recorded} is not echo.wasm's sha256sum"
    );
}

/// A deny keyed on a role loads, with a warning on stderr: the role is asserted by the
/// caller, so leaving it out escapes the rule, as the second run shows.
#[test]
fn a_policy_denying_by_role_warns_that_roles_are_self_asserted() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\nrules:\n  - { id: no-guests, action: deny, role: guest }\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let out = tool(
        "echo",
        "echo",
        &["--input", "x", "--policy", p, "--role", "guest"],
    );
    assert_eq!(out.status.code(), Some(10), "{}", text(&out.stderr));
    let warning =
        format!("aegis: {p}:3: warning: rule \"no-guests\" is a deny keyed only on role \"guest\"");
    assert!(
        text(&out.stderr).contains(&warning),
        "{}",
        text(&out.stderr)
    );
    let out = tool("echo", "echo", &["--input", "x", "--policy", p]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A policy file of two YAML documents is refused, naming the file and line.
#[test]
fn a_policy_of_two_documents_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "version: 1\ndefault: allow\n---\ndefault: deny\n").unwrap();
    let p = policy.to_str().unwrap();
    let out = tool("echo", "echo", &["--input", "x", "--policy", p]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains(&format!("{p}:3: policy: a second YAML document")),
        "{}",
        text(&out.stderr)
    );
}

/// Regression (second outside attack): `--input '{"path":"/etc/shadow","path":"/data/x"}'`
/// merged last-wins before the policy, which compared `/data/x` and allowed, while the
/// tool was handed the raw bytes (a first-wins reader finds `/etc/shadow`). Input that
/// opens as a JSON object and does not read one way only is now refused before any
/// station, on the record, and the tool never runs.
#[test]
fn input_that_reads_two_ways_is_refused_before_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: no-etc\n    action: deny\n    tool: echo\n    arguments:\n      path: { under: /etc }\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let with = |input: &str| tool("echo", "echo", &["--policy", p, "--input", input]);
    assert_eq!(with(r#"{"path":"/etc/shadow"}"#).status.code(), Some(10));
    let allowed = with(r#"{"path":"/data/x"}"#);
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed.stderr));
    for input in [
        r#"{"path":"/etc/shadow","path":"/data/x"}"#,
        r#"{"path":"/data/x","path":"/etc/shadow"}"#,
        r#"{"path":"/data/x","PATH":"/etc/shadow"}"#,
        r#"{"path":"/data/x","pAth":"/etc/shadow"}"#,
        r#"{"o":{"mode":"r","MODE":"w"},"path":"/data/x"}"#,
        r#"{"path":"/data/x","paſh":1,"pash":2}"#,
        r#"{"path":"/data/x","__proto__":{"path":"/etc/shadow"}}"#,
        r#"{"path":"/data/x","n":NaN}"#,
        r#"  {"path":"/data/x",}"#,
    ] {
        let out = with(input);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(16), "{input}: {err}");
        assert!(out.stdout.is_empty(), "{input}: the tool ran");
        assert!(
            err.contains("cannot be read one way only"),
            "{input}: {err}"
        );
    }
    // Input that is not a JSON object states no arguments, which are unknown to the
    // rule: a deny rule applies on an unknown, so nothing is widened.
    let plain = with("just text {\"path\":\"/etc/shadow\"}");
    assert_eq!(plain.status.code(), Some(10));
}

/// From a review (helper): the tool's roots were not checked against the host's own
/// files, so a tool granted write over the policy's directory could append an allow
/// rule for the next run, and one granted read over the key could sign as this host.
#[test]
fn host_files_beneath_the_tools_roots_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("work");
    std::fs::create_dir(&root).unwrap();
    let policy = root.join("policy.yaml");
    std::fs::write(&policy, "version: 1\ndefault: allow\n").unwrap();
    let r = root.to_str().unwrap();
    let p = policy.to_str().unwrap();
    let out = tool(
        "echo",
        "echo",
        &["--allow-write", r, "--policy", p, "--input", "x"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--policy"),
        "{}",
        text(&out.stderr)
    );
    let key = root.join("k");
    let out = tool(
        "echo",
        "echo",
        &[
            "--allow-read",
            r,
            "--signing-key",
            key.to_str().unwrap(),
            "--input",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    // Outside the roots, the same policy is used.
    let outside = dir.path().join("policy.yaml");
    std::fs::write(&outside, "version: 1\ndefault: allow\n").unwrap();
    let out = tool(
        "echo",
        "echo",
        &[
            "--allow-write",
            r,
            "--policy",
            outside.to_str().unwrap(),
            "--input",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// The tool's write roots against what a later `aegis` loads: the profile file (and
/// its station files) beneath them is refused, and so is the compilation cache (cached
/// code runs natively in the host, so a tool that planted it would leave the sandbox
/// at the next load of any later run).
#[test]
fn the_profile_and_the_compilation_cache_beneath_the_tools_roots() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("home");
    std::fs::create_dir(&root).unwrap();
    let profile = root.join("mine.toml");
    std::fs::write(&profile, include_str!("../../../../profiles/default.toml")).unwrap();
    let r = root.to_str().unwrap();
    let out = aegis()
        .arg("--profile")
        .arg(&profile)
        .arg("run")
        .args([
            "--component",
            guest("echo").to_str().unwrap(),
            "--id",
            "echo",
        ])
        .args(["--allow-write", r, "--input", "x"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("profile ") && err.contains("--allow-write"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "the tool ran: {err}");

    // From a review (helper): running uncached was not enough, since the tool could
    // still plant an entry that every later run loads as native code. The cache
    // beneath a write root is refused, named by its own path or through a link.
    let linked = dir.path().join("linked-cache");
    std::os::unix::fs::symlink(&root, &linked).unwrap();
    for (cache, inside) in [(root.join(".cache"), ".cache"), (linked.clone(), "linked")] {
        let out = aegis()
            .env("XDG_CACHE_HOME", &cache)
            .args(["-v", "run", "--component", guest("echo").to_str().unwrap()])
            .args(["--id", "echo", "--allow-write", r, "--input", "x"])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{inside}: {err}");
        assert!(out.stdout.is_empty(), "{inside}: the tool ran: {err}");
        assert!(
            err.contains("error: the compilation cache") && err.contains("XDG_CACHE_HOME"),
            "{inside}: {err}"
        );
    }
    assert!(
        !root.join(".cache/aegis").exists() && !root.join("aegis").exists(),
        "the cache was made beneath the tool's root"
    );
}

/// From a review (helper), each a way around the check of the host's files against a
/// tool's roots: the aegis binary (and the confinement helper beside it, which `confine`
/// runs unconfined) beneath a write root; a host file named through a link that lives
/// in a root (the tool swaps the link afterwards); a signing key with a second name.
/// And what must not be refused: a profile's record that `--audit` replaces.
#[test]
fn the_binary_links_on_the_way_and_second_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (root, safe) = (dir.path().join("root"), dir.path().join("safe"));
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&safe).unwrap();
    let echo = guest("echo");
    let run_in = |bin: &Path, extra: &[&std::ffi::OsStr]| {
        let out = Command::new(bin)
            .env(
                "XDG_CACHE_HOME",
                std::env::temp_dir().join("aegis-run-tests-cache"),
            )
            .arg("run")
            .arg("--component")
            .arg(&echo)
            .args(["--id", "echo", "--input", "x"])
            .args(extra)
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    // The binary beneath the root: a copy of it in a granted bin/.
    let bin = root.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let copy = bin.join("aegis");
    // Copied by another process: a write descriptor held here while another test
    // forks would make the copy busy to execute (ETXTBSY).
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_aegis"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let (code, err) = run_in(&copy, &["--allow-write".as_ref(), root.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the aegis binary"), "{err}");
    std::fs::remove_dir_all(&bin).unwrap();

    let me = Path::new(env!("CARGO_BIN_EXE_aegis"));
    // The helper alone granted (a file grant): the next confine would start what the
    // program wrote there, unconfined.
    let helper = me.with_file_name("aegis-confine-helper");
    let out = Command::new(me)
        .arg("confine")
        .arg("--allow-write")
        .arg(&helper)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the confinement helper"), "{err}");
    // A plugin directory a later command loads from by name, beneath the root: a WASM
    // tool that planted a library there would run as native code in that command.
    let out = Command::new(me)
        .env("AEGIS_PLUGIN_PATH", root.join("plugins"))
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        )
        .arg("run")
        .arg("--component")
        .arg(&echo)
        .args(["--id", "echo", "--input", "x", "--allow-write"])
        .arg(&root)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the plugin directory"), "{err}");
    assert!(out.stdout.is_empty(), "the tool ran: {err}");
    // A policy reached through a link that lives in the root.
    std::fs::write(safe.join("policy.yaml"), "version: 1\ndefault: allow\n").unwrap();
    std::os::unix::fs::symlink("../safe", root.join("cfg")).unwrap();
    let through = root.join("cfg/policy.yaml");
    let (code, err) = run_in(
        me,
        &[
            "--allow-write".as_ref(),
            root.as_os_str(),
            "--policy".as_ref(),
            through.as_os_str(),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--policy"), "{err}");
    // The same policy by its own path is used.
    let own = safe.join("policy.yaml");
    let (code, err) = run_in(
        me,
        &[
            "--allow-write".as_ref(),
            root.as_os_str(),
            "--policy".as_ref(),
            own.as_os_str(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");

    // A key with a second name, and a tool granted anything.
    let key = safe.join("k");
    let made = Command::new(me)
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    std::fs::hard_link(&key, dir.path().join("k2")).unwrap();
    let (code, err) = run_in(
        me,
        &[
            "--allow-read".as_ref(),
            root.as_os_str(),
            "--signing-key".as_ref(),
            key.as_os_str(),
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("another name"), "{err}");

    std::fs::remove_file(dir.path().join("k2")).unwrap();
    // durable-file's record is ./aegis-audit.aarl; --audit replaces it, so a root of
    // "." is no reason to refuse.
    let out = Command::new(me)
        .current_dir(&root)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        )
        .args(["--profile", "durable-file", "run", "--component"])
        .arg(&echo)
        .args(["--id", "echo", "--input", "x", "--allow-write", "."])
        .arg("--audit")
        .arg(safe.join("r.aarl"))
        .arg("--signing-key")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
