//! A profile's `[operator]` settings against the built binary (issue 32, item 5): a
//! client config of one flag (`aegis --profile FILE wrap -- SERVER`) gets the signing
//! key, the audit file, the role, the pins and the grants the operator would otherwise
//! type on every command; a flag replaces the profile's value; every check a flag's
//! path meets, the profile's path meets too, named by its file and line.
//!
//! The server is the stand-in MCP server tests/fixtures/mcp/echo_server.py, driven by
//! this test as the client.

use crate::common::at as member;
use crate::common::{object, text};
use aegis_record::json::{Object, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_aegis");

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/echo_server.py")
}

/// The binary, run from `cwd` (never the profile's directory, so a relative path that
/// resolved against the working directory would miss) with nothing on the search paths.
fn aegis(cwd: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(cwd)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("AEGIS_PROFILE_PATH")
        .env_remove("AEGIS_PLUGIN_PATH");
    c
}

/// A role rule: interns may not read the environment; everyone else may.
const POLICY: &str = "version: 1
default: allow
rules:
  - id: interns-no-env
    action: deny
    tool: get-env
    role: intern
    reason: interns may not read the environment
";

/// A profile file `fs.toml` in `dir`, with the YAML policy beside it, `sandbox` as its
/// `[sandbox]` table's body, and `operator` as its `[operator]` table's body.
fn profile(dir: &Path, sandbox: &str, operator: &str) -> PathBuf {
    std::fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    let path = dir.join("fs.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"fs\"\ndescription = \"d\"\n\n[policy]\nplugin = \"builtin:policy-yaml\"\nconfig = {{ path = \"policy.yaml\" }}\n\n[capability]\n\n[sandbox]\n{sandbox}\n[audit]\nplugin = \"builtin:memory-sink\"\n\n[operator]\n{operator}"
        ),
    )
    .unwrap();
    path
}

/// The line the `[operator]` body starts on in [`profile`]'s file (`sandbox` is one
/// line, or empty).
const FIRST: usize = 16;

fn keygen(path: &Path) -> String {
    let out = Command::new(BIN)
        .args(["keygen", "--out"])
        .arg(path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = Command::new(BIN)
        .args(["key", "show"])
        .arg(path)
        .output()
        .unwrap();
    text(&shown.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("public_key "))
        .expect("key show prints the public key")
        .to_owned()
}

/// Starts `cmd` as the client's server, sends `initialize`, the `initialized`
/// notification, `tools/list` and one `tools/call` per `(tool, arguments)`, closes its
/// stdin and returns the answers to the calls and the command's output.
fn session(mut cmd: Command, calls: &[(&str, &str)]) -> (Vec<Object>, Output) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |line: &str, answered: bool| -> Option<Object> {
        to.write_all(line.as_bytes()).unwrap();
        to.write_all(b"\n").unwrap();
        to.flush().unwrap();
        answered.then(|| {
            let mut answer = String::new();
            from.read_line(&mut answer).unwrap();
            assert!(
                !answer.is_empty(),
                "aegis wrap closed its stdout unanswered"
            );
            object(answer.as_bytes())
        })
    };
    ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        true,
    );
    ask(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        false,
    );
    ask(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        true,
    );
    let mut answers = Vec::new();
    for (i, (tool, arguments)) in calls.iter().enumerate() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#,
            i + 3
        );
        answers.push(ask(&line, true).unwrap());
    }
    drop(to);
    (answers, child.wait_with_output().unwrap())
}

fn is_error(answer: &Object) -> bool {
    answer
        .get("result")
        .and_then(Value::as_object)
        .and_then(|r| r.get("isError"))
        == Some(&Value::Bool(true))
}

fn lines(record: &Path) -> Vec<Object> {
    std::fs::read(record)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(object)
        .collect()
}

/// The open line's `provenance.overrides`, as canonical JSON text.
fn overrides(record: &Path) -> String {
    let open = &lines(record)[0];
    let provenance = open.get("provenance").and_then(Value::as_object).unwrap();
    let o = provenance.get("overrides").expect("an overrides member");
    text(&o.to_canonical())
}

/// The issue's client config: `aegis --profile FILE wrap -- SERVER`, nothing else. The
/// profile's key signs a record at the profile's audit path (which `aegis verify`
/// verifies pinned to that key, and not to another), the open line says the
/// destination came from the profile, the profile's role reaches the policy (the
/// intern's `get-env` is refused, `echo` is not), the pins file is written, and `-v`
/// names each setting's line. The paths are relative, resolved against the profile's
/// directory although the command runs elsewhere.
#[test]
fn a_one_flag_wrap_takes_key_audit_role_and_pins_from_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let public = keygen(&dir.path().join("k"));
    let file = profile(
        dir.path(),
        "",
        "signing_key = \"k\"\naudit = \"record.aarl\"\nrole = \"intern\"\nwrite_pins = \"pins.json\"\n",
    );
    let mut cmd = aegis(elsewhere.path());
    cmd.arg("--profile")
        .arg(&file)
        .args(["-v", "wrap", "--", "python3"])
        .arg(server_script());
    let (answers, out) = session(
        cmd,
        &[
            ("get-env", r#"{"name":"HOME"}"#),
            ("echo", r#"{"text":"hi"}"#),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        is_error(&answers[0]),
        "the intern's get-env went through: {stderr}"
    );
    assert!(!is_error(&answers[1]), "{stderr}");

    // -v: each setting, with the profile line it came from.
    let at = |n: usize| format!("(profile {}:{})", file.display(), FIRST + n);
    for (n, setting) in [
        (
            0,
            format!("signing_key = \"{}\"", dir.path().join("k").display()),
        ),
        (
            1,
            format!("audit = \"{}\"", dir.path().join("record.aarl").display()),
        ),
        (2, "role = \"intern\"".to_owned()),
        (
            3,
            format!(
                "write_pins = \"{}\"",
                dir.path().join("pins.json").display()
            ),
        ),
    ] {
        let line = format!("aegis: setting {setting} {}", at(n));
        assert!(stderr.contains(&line), "no {line:?} in {stderr}");
    }

    let record = dir.path().join("record.aarl");
    let verify = |key: &str| {
        Command::new(BIN)
            .args(["verify", "--key", key])
            .arg(&record)
            .output()
            .unwrap()
    };
    let verified = verify(&public);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
    assert!(text(&verified.stdout).starts_with("Verified"));
    let other = keygen(&dir.path().join("other"));
    assert_ne!(
        verify(&other).status.code(),
        Some(0),
        "verified under another key"
    );
    let by = overrides(&record);
    assert!(
        by.contains(r#""by":"profile operator.audit""#) && by.contains("record.aarl"),
        "{by}"
    );
    let roles: Vec<String> = lines(&record)
        .iter()
        .filter(|l| l.get("line_type").and_then(Value::as_str) == Some("outcome"))
        .map(|l| member(l, &["decision_axes", "role"]))
        .collect();
    assert_eq!(roles, ["intern", "intern"]);
    let pins = std::fs::read_to_string(dir.path().join("pins.json")).unwrap();
    assert!(pins.contains("get-env") && pins.contains("echo"), "{pins}");
    assert!(!elsewhere.path().join("record.aarl").exists());
}

/// A flag replaces the profile's value for its key only: `--role` and `--audit` win,
/// `-v` says so, the record is where the flag says and its open line names the flag,
/// and the profile's signing key still signs it (`--audit` needs no `--signing-key`
/// when the profile gives one).
#[test]
fn a_flag_replaces_the_profiles_value_for_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let public = keygen(&dir.path().join("k"));
    let file = profile(
        dir.path(),
        "",
        "signing_key = \"k\"\naudit = \"record.aarl\"\nrole = \"intern\"\n",
    );
    let flagged = dir.path().join("flagged.aarl");
    let mut cmd = aegis(dir.path());
    cmd.arg("--profile")
        .arg(&file)
        .args(["-v", "wrap", "--role", "admin", "--audit"])
        .arg(&flagged)
        .args(["--", "python3"])
        .arg(server_script());
    let (answers, out) = session(cmd, &[("get-env", r#"{"name":"HOME"}"#)]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !is_error(&answers[0]),
        "admin's get-env was refused: {stderr}"
    );
    assert!(
        stderr.contains("aegis: setting role = \"admin\" (flag --role)"),
        "{stderr}"
    );
    assert!(stderr.contains("(flag --audit)"), "{stderr}");
    assert!(
        !dir.path().join("record.aarl").exists(),
        "the profile's audit was used"
    );
    let by = overrides(&flagged);
    assert!(by.contains(r#""by":"--audit""#), "{by}");
    let verified = Command::new(BIN)
        .args(["verify", "--key", &public])
        .arg(&flagged)
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
}

/// A key file others may read is refused as `--signing-key`'s is (exit 4), the error
/// naming the profile file and the line of `signing_key`; nothing is started or
/// written. An audit file with no key from flag or profile is a usage error naming the
/// profile line.
#[test]
fn a_profile_key_with_the_wrong_mode_is_refused_at_its_line() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    keygen(&key);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = profile(
        dir.path(),
        "",
        "role = \"r\"\nsigning_key = \"k\"\naudit = \"record.aarl\"\n",
    );
    let marker = dir.path().join("ran");
    let out = aegis(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["wrap", "--", "touch"])
        .arg(&marker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let at = format!(
        "error: {}:{}: operator.signing_key: ",
        file.display(),
        FIRST + 1
    );
    assert!(stderr.contains(&at), "no {at:?} in {stderr}");
    assert!(!marker.exists() && !dir.path().join("record.aarl").exists());

    let file = profile(dir.path(), "", "audit = \"record.aarl\"\n");
    let out = aegis(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["wrap", "--", "touch"])
        .arg(&marker)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:{}: operator.audit: a durable audit file needs a signing key",
            file.display(),
            FIRST
        )),
        "{stderr}"
    );
    assert!(!marker.exists());
}

/// A key `[operator]` does not know (`escalation`, which no issue defines) is refused
/// with its line by every command that reads the profile, `profiles show` too.
#[test]
fn an_unknown_operator_key_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = profile(dir.path(), "", "role = \"r\"\nescalation = \"ops\"\n");
    let line = FIRST + 1;
    for args in [&["wrap", "--", "true"][..], &["profiles", "show"][..]] {
        let out = aegis(dir.path())
            .arg("--profile")
            .arg(&file)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {stderr}");
        let at = format!(
            "error: {}:{line}: operator.escalation: unknown field `escalation`",
            file.display()
        );
        assert!(stderr.contains(&at), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// `profiles show` lists the effective settings, each with the profile line it came
/// from, in text and in JSON.
#[test]
fn profiles_show_lists_the_settings_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = "confinement = { plugin = \"builtin:confine-landlock\" }";
    let file = profile(
        dir.path(),
        sandbox,
        "role = \"intern\"\npins_record_only = true\nallow_read = [\"in\", \"/srv\"]\nallow_net = [\"example.org:443\"]\n",
    );
    let out = aegis(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["profiles", "show"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let from = |n: usize| format!("(profile {}:{})", file.display(), FIRST + n);
    for (n, setting) in [
        (0, "operator     role = \"intern\"".to_owned()),
        (1, "pins_record_only = true".to_owned()),
        (
            2,
            format!(
                "allow_read = [\"{}\", \"/srv\"]",
                dir.path().join("in").display()
            ),
        ),
        (3, "allow_net = [\"example.org:443\"]".to_owned()),
    ] {
        let line = format!("{setting}  {}", from(n));
        assert!(stdout.contains(&line), "no {line:?} in {stdout}");
    }
    let out = aegis(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["profiles", "show", "--json"])
        .output()
        .unwrap();
    let doc = object(&out.stdout);
    let operator = doc.get("operator").and_then(Value::as_object).unwrap();
    let role = operator.get("role").and_then(Value::as_object).unwrap();
    assert_eq!(role.get("value").and_then(Value::as_str), Some("intern"));
    assert_eq!(
        role.get("source").and_then(Value::as_str),
        Some(from(0).trim_matches(['(', ')']))
    );
    let flag = operator
        .get("pins_record_only")
        .and_then(Value::as_object)
        .unwrap();
    assert_eq!(flag.get("value"), Some(&Value::Bool(true)));

    // A profile without the table says so.
    let plain = aegis(dir.path())
        .args(["--profile", "default", "profiles", "show"])
        .output()
        .unwrap();
    assert!(
        text(&plain.stdout).contains("operator     none"),
        "{}",
        text(&plain.stdout)
    );
}

/// The host-files refusal holds for the profile's own paths: its `write_pins` beneath
/// its own `allow_write` is refused before anything starts (exit 1), named by both
/// profile lines; so is its signing key beneath its `allow_read`.
#[test]
fn a_profiles_write_pins_beneath_its_own_allow_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("out")).unwrap();
    keygen(&dir.path().join("out/k"));
    let sandbox = "confinement = { plugin = \"builtin:confine-landlock\" }";
    let marker = dir.path().join("ran");
    let run = |file: &Path| {
        aegis(dir.path())
            .arg("--profile")
            .arg(file)
            .args(["wrap", "--", "touch"])
            .arg(&marker)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let file = profile(
        dir.path(),
        sandbox,
        "allow_write = [\"out\"]\nwrite_pins = \"out/pins.json\"\n",
    );
    let out = run(&file);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said = format!(
        "error: {f}:{}: operator.write_pins {} is beneath operator.allow_write {} ({f}:{FIRST})",
        FIRST + 1,
        dir.path().join("out/pins.json").display(),
        dir.path().join("out").display(),
        f = file.display(),
    );
    assert!(stderr.contains(&said), "no {said:?} in {stderr}");
    assert!(!marker.exists(), "the server ran");

    let file = profile(
        dir.path(),
        sandbox,
        "allow_read = [\"out\"]\nsigning_key = \"out/k\"\n",
    );
    let out = run(&file);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("operator.signing_key")
            && stderr.contains("where the program could read it"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the server ran");
}

/// The interpreter itself, not a shim script in front of it (as confine.rs).
#[cfg(target_os = "linux")]
fn python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is on PATH");
    PathBuf::from(text(&out.stdout).trim())
}

/// A profile's grants confine a wrapped server under real Landlock: the server's own
/// script is readable only through the profile's `allow_read`, so the server answers
/// only because the grant reached it; without the grant it cannot start; `confine`
/// under the same profile reads inside the grant and is refused outside it. (As the
/// other confinement tests, this needs a kernel with Landlock ABI 3 or later: a
/// required level on a kernel without it fails here rather than passing unconfined.)
#[test]
#[cfg(target_os = "linux")]
fn a_profile_grant_confines_a_wrapped_server_to_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("in")).unwrap();
    let server = dir.path().join("in/echo_server.py");
    std::fs::copy(server_script(), &server).unwrap();
    std::fs::write(dir.path().join("in/a.txt"), "granted").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
    let sandbox = "confinement = { plugin = \"builtin:confine-landlock\" }";
    let file = profile(dir.path(), sandbox, "allow_read = [\"in\"]\n");

    let mut cmd = aegis(dir.path());
    cmd.arg("--profile")
        .arg(&file)
        .args(["-v", "wrap", "--"])
        .arg(python())
        .arg(&server);
    let (answers, out) = session(cmd, &[("echo", r#"{"text":"confined"}"#)]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!is_error(&answers[0]), "{stderr}");
    assert!(stderr.contains("full enforcement"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "aegis: setting allow_read = [\"{}\"] (profile {}:{})",
            dir.path().join("in").display(),
            file.display(),
            FIRST
        )),
        "{stderr}"
    );

    let cat = |path: &Path| {
        aegis(dir.path())
            .arg("--profile")
            .arg(&file)
            .args(["confine", "--", "/bin/cat"])
            .arg(path)
            .output()
            .unwrap()
    };
    let inside = cat(&dir.path().join("in/a.txt"));
    assert_eq!(inside.status.code(), Some(0), "{}", text(&inside.stderr));
    assert_eq!(text(&inside.stdout), "granted");
    let outside = cat(&dir.path().join("secret.txt"));
    assert_eq!(outside.status.code(), Some(1), "{}", text(&outside.stderr));
    assert!(outside.stdout.is_empty());
    assert!(text(&outside.stderr).contains("Permission denied"));

    // The same server without the grant: its script cannot be read.
    let bare = profile(dir.path(), sandbox, "allow_read = []\n");
    let out = aegis(dir.path())
        .arg("--profile")
        .arg(&bare)
        .args(["wrap", "--"])
        .arg(python())
        .arg(&server)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
}

/// The README's one-flag profile and the `[operator]` block of spec/PROFILES.md are
/// profiles this build accepts (a copied example that does not parse would fail the
/// client's config at its first start).
#[test]
fn the_documented_operator_examples_parse() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let at = readme
        .find("**One flag in the client's config.**")
        .expect("the README's one-flag section");
    let block = |text: &str, from: usize| -> String {
        let start = text[from..].find("```toml\n").unwrap() + from + "```toml\n".len();
        let end = text[start..].find("```").unwrap() + start;
        text[start..end].to_owned()
    };
    let example = block(&readme, at);
    let p = aegis_runtime::Profile::parse(
        &example,
        "fs.toml",
        aegis_runtime::ProfileSource::File("/etc/aegis/profiles/fs.toml".into()),
    )
    .unwrap();
    assert_eq!(p.operator.entries().len(), 6);

    let spec = std::fs::read_to_string(root.join("spec/PROFILES.md")).unwrap();
    let at = spec.find("## Operator settings").unwrap();
    let operator = block(&spec, at);
    let text = example[..example.find("\n[operator]").unwrap()].to_owned() + "\n" + &operator;
    let p = aegis_runtime::Profile::parse(
        &text,
        "fs.toml",
        aegis_runtime::ProfileSource::File("/etc/aegis/profiles/fs.toml".into()),
    )
    .unwrap();
    // The spec's example holds every setting, the three approval settings among
    // them.
    assert_eq!(p.operator.entries().len(), 15);
}

/// `run` reads the same three settings as `wrap`: the profile's key signs the record
/// at the profile's audit path, and the role reaches the record. A WASM tool's root
/// over the profile's signing key is refused as over `--signing-key`, named by the
/// profile line (exit 1, nothing run, nothing written).
#[test]
fn run_takes_key_audit_and_role_from_the_profile_and_keeps_the_key_from_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    let public = keygen(&dir.path().join("keys/k"));
    let file = profile(
        dir.path(),
        "",
        "signing_key = \"keys/k\"\naudit = \"run.aarl\"\nrole = \"analyst\"\n",
    );
    let echo = crate::common::guest("echo");
    let run = |extra: &[&str]| {
        aegis(dir.path())
            .env(
                "XDG_CACHE_HOME",
                std::env::temp_dir().join("aegis-run-tests-cache"),
            )
            .arg("--profile")
            .arg(&file)
            .args(["run", "--component"])
            .arg(&echo)
            .args(["--id", "echo", "--input", "hi"])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"hi");
    let record = dir.path().join("run.aarl");
    let verified = Command::new(BIN)
        .args(["verify", "--key", &public])
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
    let outcome = lines(&record)
        .into_iter()
        .find(|l| l.get("line_type").and_then(Value::as_str) == Some("outcome"))
        .unwrap();
    assert_eq!(member(&outcome, &["decision_axes", "role"]), "analyst");

    let keys = dir.path().join("keys");
    let out = run(&["--allow-read", keys.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said = format!(
        "error: {}:{FIRST}: operator.signing_key {} is beneath --allow-read {}",
        file.display(),
        keys.join("k").display(),
        keys.display()
    );
    assert!(stderr.contains(&said), "no {said:?} in {stderr}");
    assert!(out.stdout.is_empty());
}

/// `gateway` reads the same three settings: a one-flag stdio gateway signs its record
/// with the profile's key at the profile's audit path, the profile's role is on each
/// outcome, and `-v` names the profile lines.
#[test]
fn gateway_takes_key_audit_and_role_from_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let public = keygen(&dir.path().join("k"));
    let file = profile(
        dir.path(),
        "",
        "signing_key = \"k\"\naudit = \"gateway.aarl\"\nrole = \"analyst\"\n",
    );
    let tools =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gateway/tools.toml");
    let mut cmd = aegis(dir.path());
    cmd.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    )
    .arg("--profile")
    .arg(&file)
    .args(["-v", "gateway", "--tools"])
    .arg(&tools);
    let (answers, out) = session(cmd, &[("echo", r#"{"message":"hi"}"#)]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!is_error(&answers[0]), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "aegis: setting role = \"analyst\" (profile {}:{})",
            file.display(),
            FIRST + 2
        )),
        "{stderr}"
    );
    let record = dir.path().join("gateway.aarl");
    let verified = Command::new(BIN)
        .args(["verify", "--key", &public])
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stdout)
    );
    assert!(overrides(&record).contains(r#""by":"profile operator.audit""#));
    let outcome = lines(&record)
        .into_iter()
        .find(|l| l.get("line_type").and_then(Value::as_str) == Some("outcome"))
        .unwrap();
    assert_eq!(member(&outcome, &["decision_axes", "role"]), "analyst");
}
