//! The operator's surface of `aegis`, against the built binary: the global options
//! (`--color`, `NO_COLOR`, `-q`, `-v`), `--json`, `profiles` and `plugins` agreeing with
//! themselves and with `run`, profile-relative paths, and degrading rather than refusing
//! where nothing is weakened (an unwritable compilation cache).

use crate::common::{guest, text};
use aegis_record::json::{self, Object, Value};
use aegis_test_support::cdylib;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary, run in `dir` with a HOME and config dirs that hold nothing.
fn aegis_in(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.current_dir(dir)
        .env("HOME", dir)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        )
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("AEGIS_PROFILE_PATH")
        .env_remove("AEGIS_PLUGIN_PATH")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null());
    c
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

fn object(line: &[u8]) -> Object {
    match json::parse(line) {
        Ok(Value::Object(o)) => o,
        other => panic!("not a JSON object: {other:?}: {}", text(line)),
    }
}

fn field(o: &Object, key: &str) -> String {
    o.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A profile file at `path` with the given policy and audit tables.
fn profile(path: &Path, name: &str, policy: &str, audit: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        format!(
            "name = \"{name}\"\ndescription = \"d\"\n[policy]\n{policy}\n[capability]\n[sandbox]\n[audit]\n{audit}\n"
        ),
    )
    .unwrap();
}

const ALLOW: &str = "plugin = \"builtin:policy-static\"\nconfig = { verdict = \"allow\" }";

fn keygen(dir: &Path) -> PathBuf {
    let key = dir.join("k");
    let o = aegis_in(dir)
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
    key
}

#[test]
fn colour_follows_color_and_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let demo = |extra: &[&str], no_color: bool| {
        let mut c = aegis_in(dir.path());
        if no_color {
            c.env("NO_COLOR", "1");
        }
        let o = c.args(extra).arg("demo").output().unwrap();
        assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
        o.stdout.contains(&0x1b)
    };
    // stdout is a pipe here: auto means none.
    assert!(!demo(&[], false), "auto coloured a pipe");
    assert!(demo(&["--color", "always"], false));
    assert!(
        demo(&["--color", "always"], true),
        "always wins over NO_COLOR"
    );
    assert!(!demo(&["--color", "never"], false));
    let o = aegis_in(dir.path())
        .args(["--color", "sometimes", "demo"])
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(1));
}

#[test]
fn quiet_and_verbose_change_what_run_says_not_what_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let run = |flag: Option<&str>| {
        let o = aegis_in(dir.path())
            .args(flag)
            .arg("run")
            .arg("--component")
            .arg(guest("echo"))
            .args(["--id", "echo", "--input", "hi"])
            .output()
            .unwrap();
        assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
        assert_eq!(o.stdout, b"hi");
        text(&o.stderr)
    };
    let normal = run(None);
    assert!(
        normal.starts_with("aegis: profile default (embedded)\n"),
        "{normal}"
    );
    let quiet = run(Some("-q"));
    let lines: Vec<&str> = quiet.lines().collect();
    assert_eq!(lines.len(), 1, "{quiet}");
    assert!(lines[0].starts_with("aegis: success: "), "{quiet}");
    let verbose = run(Some("-v"));
    assert!(verbose.contains("aegis: compilation cache "), "{verbose}");
    assert!(
        verbose.contains("aegis: echo may read nothing, and write nothing"),
        "{verbose}"
    );
    // A root given relative is shown as the path the tool sees it at.
    std::fs::create_dir(dir.path().join("spec")).unwrap();
    let o = aegis_in(dir.path())
        .args(["-v", "run", "--allow-read", "./spec", "--component"])
        .arg(guest("echo"))
        .args(["--id", "echo", "--input", "hi"])
        .output()
        .unwrap();
    let seen = dir.path().join("spec").canonicalize().unwrap();
    assert!(
        text(&o.stderr).contains(&format!(
            "echo may read ./spec (the tool sees {}), and write nothing",
            seen.display()
        )),
        "{}",
        text(&o.stderr)
    );
    let o = aegis_in(dir.path())
        .args(["-q", "-v", "profiles", "list"])
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(1), "-q and -v together are a usage error");
}

#[test]
fn run_json_is_one_object_with_the_same_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: later\n    action: pending_approval\n    tool: deploy\n",
    )
    .unwrap();
    let run = |id: &str, input: &[u8]| {
        let file = dir.path().join("input");
        std::fs::write(&file, input).unwrap();
        aegis_in(dir.path())
            .arg("run")
            .arg("--json")
            .arg("--component")
            .arg(guest("echo"))
            .args(["--id", id, "--policy"])
            .arg(&policy)
            .arg("--input-file")
            .arg(&file)
            .arg("--approvals")
            .arg(dir.path().join("queue"))
            .output()
            .unwrap()
    };
    let o = run("echo", b"hello");
    assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout.ends_with(b"\n") && o.stdout.iter().filter(|&&b| b == b'\n').count() == 1);
    let v = object(o.stdout.trim_ascii_end());
    assert_eq!(field(&v, "output"), "hello");
    assert_eq!(field(&v, "class"), "success");
    assert_eq!(field(&v, "tool"), "echo");
    assert!(field(&v, "verdict").starts_with("success: "));
    assert_eq!(v.get("exit_code").and_then(Value::as_int), Some(0));
    assert!(field(&v, "call_id").starts_with("call-"));
    // Bytes that are not UTF-8 are given exactly, in hex.
    let o = run("echo", b"\xff\x00a");
    let v = object(o.stdout.trim_ascii_end());
    assert_eq!(field(&v, "output_hex"), "ff0061");
    assert!(v.get("output").is_none());
    // A parked call: exit 12, and what to do next, in the object and on stderr.
    let o = run("deploy", b"x");
    assert_eq!(code(&o), Some(12), "{}", text(&o.stderr));
    let v = object(o.stdout.trim_ascii_end());
    assert_eq!(field(&v, "class"), "pending_approval");
    assert_eq!(v.get("exit_code").and_then(Value::as_int), Some(12));
    assert!(
        field(&v, "next").contains("aegis approvals approve apr-"),
        "{v:?}"
    );
    assert!(field(&v, "approval_id").starts_with("apr-"), "{v:?}");
}

/// A parked call is filed, and says how a person approves it and how it then runs.
#[test]
fn a_parked_call_says_how_to_approve_and_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: allow\nrules:\n  - id: later\n    action: pending_approval\n    tool: deploy\n",
    )
    .unwrap();
    let o = aegis_in(dir.path())
        .arg("run")
        .arg("--component")
        .arg(guest("echo"))
        .args(["--id", "deploy", "--input", "x", "--policy"])
        .arg(&policy)
        .arg("--approvals")
        .arg(dir.path().join("queue"))
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(12));
    assert!(o.stdout.is_empty());
    let err = text(&o.stderr);
    let verdict = err
        .lines()
        .position(|l| l.starts_with("aegis: parked for approval"))
        .unwrap_or_else(|| panic!("{err}"));
    let next = err.lines().nth(verdict + 1).unwrap_or_default();
    let id = next
        .strip_prefix("aegis: filed for approval as ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(next.contains(&format!("--approval {id}")), "{err}");
    assert!(
        dir.path()
            .join("queue")
            .join(format!("{id}.request"))
            .is_file()
    );
}

/// Before, a cache directory that could not be made refused the call (exit 4).
#[test]
fn an_unwritable_compilation_cache_runs_uncached_with_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the cache's parent should be: no one can make the directory.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let o = aegis_in(dir.path())
        .env("XDG_CACHE_HOME", &blocker)
        .arg("run")
        .arg("--component")
        .arg(guest("echo"))
        .args(["--id", "echo", "--input", "hi"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(code(&o), Some(0), "{err}");
    assert_eq!(o.stdout, b"hi");
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("compilation cache") && warnings[0].ends_with("running uncached"),
        "{err}"
    );
    // A cache others could write to is refused by the sandbox: uncached instead.
    let open = dir.path().join("open");
    std::fs::create_dir_all(open.join("aegis/wasmtime")).unwrap();
    std::fs::set_permissions(
        open.join("aegis/wasmtime"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let o = aegis_in(dir.path())
        .env("XDG_CACHE_HOME", &open)
        .arg("run")
        .arg("--component")
        .arg(guest("echo"))
        .args(["--id", "echo", "--input", "hi"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(code(&o), Some(0), "{err}");
    assert!(
        err.contains("lets others in") && err.contains("running uncached"),
        "{err}"
    );
}

/// Before, `profiles show` resolved plugins but never built them, so it showed a profile
/// `run` refused (a sink in a missing directory, a policy file with a YAML error).
#[test]
fn profiles_show_refuses_what_run_refuses_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    std::fs::write(
        dir.path().join("bad.yaml"),
        "version: 1\ndefault: allow\nrules:\n  - id: a\n    action: deny\n   tool: x\n",
    )
    .unwrap();
    let cases = [
        (
            "missing-dir",
            ALLOW.to_owned(),
            "plugin = \"builtin:file-sink\"\nconfig = { path = \"no/such/dir/r.aarl\" }".to_owned(),
            "no/such/dir/r.aarl",
        ),
        (
            "bad-yaml",
            format!(
                "plugin = \"builtin:policy-yaml\"\nconfig = {{ path = {:?} }}",
                dir.path().join("bad.yaml").display().to_string()
            ),
            "plugin = \"builtin:memory-sink\"".to_owned(),
            // The YAML error's real line, not `:0:`.
            "bad.yaml:6: ",
        ),
        (
            "unknown-key",
            ALLOW.to_owned(),
            "plugin = \"builtin:file-sink\"\nconfig = { path = \"r.aarl\", fsync = false }"
                .to_owned(),
            "fsync",
        ),
    ];
    for (name, policy, audit, says) in cases {
        let file = dir.path().join(format!("profiles/{name}.toml"));
        profile(&file, name, &policy, &audit);
        let show = aegis_in(dir.path())
            .arg("--profile")
            .arg(&file)
            .args(["profiles", "show"])
            .output()
            .unwrap();
        let err = text(&show.stderr);
        assert_eq!(code(&show), Some(4), "{name}: {err}");
        assert!(show.stdout.is_empty(), "{name}: {}", text(&show.stdout));
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{name}: {err}");
        assert!(errors[0].contains(says), "{name}: {err}");
        // `run` refuses it with the same line.
        let run = aegis_in(dir.path())
            .arg("--profile")
            .arg(&file)
            .arg("run")
            .arg("--component")
            .arg(guest("echo"))
            .args(["--id", "echo", "--input", "hi", "--signing-key"])
            .arg(&key)
            .output()
            .unwrap();
        assert_eq!(code(&run), Some(4), "{name}: {}", text(&run.stderr));
        let run_error = text(&run.stderr)
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_default()
            .to_owned();
        assert!(run_error.contains(says), "{name}: run said {run_error}");
    }
    // A good durable profile shows, and leaves no record behind.
    let file = dir.path().join("profiles/good.toml");
    profile(
        &file,
        "good",
        ALLOW,
        "plugin = \"builtin:file-sink\"\nconfig = { path = \"r.aarl\" }",
    );
    let show = aegis_in(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(code(&show), Some(0), "{}", text(&show.stderr));
    assert!(
        !dir.path().join("profiles/r.aarl").exists(),
        "show left a record"
    );
}

/// Every NAME `profiles list` prints is a name `--profile` takes, even when the file's
/// own `name =` says something else.
#[test]
fn names_profiles_list_prints_are_names_profile_takes() {
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("conf");
    profile(
        &profiles.join("ops.toml"),
        "operations",
        ALLOW,
        "plugin = \"builtin:memory-sink\"",
    );
    let list = aegis_in(dir.path())
        .env("AEGIS_PROFILE_PATH", &profiles)
        .args(["profiles", "list"])
        .output()
        .unwrap();
    assert_eq!(code(&list), Some(0));
    let out = text(&list.stdout);
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains(&"ops"), "{out}");
    assert!(out.contains("(name = \"operations\" inside)"), "{out}");
    for name in ["ops", "default", "durable-file"] {
        assert!(names.contains(&name), "{name}: {out}");
    }
    for name in names {
        let o = aegis_in(dir.path())
            .env("AEGIS_PROFILE_PATH", &profiles)
            .args(["--profile", name, "profiles", "show", "--json"])
            .output()
            .unwrap();
        assert_eq!(code(&o), Some(0), "{name}: {}", text(&o.stderr));
    }
}

/// Every NAME `plugins list` prints is what a profile's `plugin =` takes, for the
/// built-ins and for a library on the plugin path.
#[test]
fn names_plugins_list_prints_are_names_a_profile_takes() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        cdylib("aegis-sink-sqlite"),
        plugins.join("libaegis_sink_sqlite.so"),
    )
    .unwrap();
    let list = aegis_in(dir.path())
        .env("AEGIS_PLUGIN_PATH", &plugins)
        .args(["plugins", "list", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&list), Some(0), "{}", text(&list.stderr));
    let rows: Vec<Object> = list
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(object)
        .collect();
    assert!(
        rows.iter().any(|r| field(r, "name") == "aegis_sink_sqlite"
            && field(r, "plugin") == "sqlite-sink"),
        "{}",
        text(&list.stdout)
    );
    let mut tried = 0;
    for row in &rows {
        let name = field(row, "name");
        let kinds: Vec<&str> = row
            .get("kinds")
            .and_then(Value::as_array)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let file = dir.path().join(format!("p{tried}.toml"));
        if kinds.contains(&"sink") {
            profile(
                &file,
                "p",
                ALLOW,
                &format!("plugin = {name:?}\nconfig = {{ path = \"r{tried}\" }}"),
            );
        } else if kinds.contains(&"policy") && name == "builtin:policy-static" {
            profile(
                &file,
                "p",
                &format!("plugin = {name:?}\nconfig = {{ verdict = \"allow\" }}"),
                "plugin = \"builtin:memory-sink\"",
            );
        } else {
            continue;
        }
        // The memory sink takes no config: give it none.
        if name == "builtin:memory-sink" {
            profile(&file, "p", ALLOW, "plugin = \"builtin:memory-sink\"");
        }
        let o = aegis_in(dir.path())
            .env("AEGIS_PLUGIN_PATH", &plugins)
            .arg("--profile")
            .arg(&file)
            .args(["profiles", "show", "--json"])
            .output()
            .unwrap();
        assert_eq!(code(&o), Some(0), "{name}: {}", text(&o.stderr));
        tried += 1;
    }
    assert!(tried >= 4, "{tried} plugins tried");
}

#[test]
fn plugins_list_says_when_a_path_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let o = aegis_in(dir.path())
        .args(["plugins", "list", "--path", "no-such-dir"])
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(2));
    let err = text(&o.stderr);
    assert!(err.starts_with("error: --path no-such-dir: "), "{err}");
    // The rest is still listed.
    assert!(text(&o.stdout).contains("builtin:file-sink"));
}

/// A sink's relative `path` is the profile file's neighbour, from any working
/// directory, for run and export alike (before, each directory got its own record).
#[test]
fn a_relative_sink_path_is_taken_from_the_profile_files_directory() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let file = dir.path().join("conf/rel.toml");
    profile(
        &file,
        "rel",
        ALLOW,
        "plugin = \"builtin:file-sink\"\nconfig = { path = \"records/r.aarl\" }",
    );
    std::fs::create_dir_all(dir.path().join("conf/records")).unwrap();
    for (i, cwd) in ["a", "b"].iter().enumerate() {
        let cwd = dir.path().join(cwd);
        std::fs::create_dir_all(&cwd).unwrap();
        let o = aegis_in(&cwd)
            .arg("--profile")
            .arg(&file)
            .arg("run")
            .arg("--component")
            .arg(guest("echo"))
            .args([
                "--id",
                "echo",
                "--input",
                &format!("run {i}"),
                "--signing-key",
            ])
            .arg(&key)
            .output()
            .unwrap();
        assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
        assert!(!cwd.join("records").exists());
    }
    let record = dir.path().join("conf/records/r.aarl");
    assert!(record.is_file());
    let out = dir.path().join("out.aarl");
    let o = aegis_in(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["export", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&record).unwrap()
    );
    let o = aegis_in(dir.path())
        .arg("--profile")
        .arg(&file)
        .args(["profiles", "show", "--json"])
        .output()
        .unwrap();
    let shown = object(o.stdout.trim_ascii_end());
    let audit = shown.get("audit").and_then(Value::as_object).unwrap();
    assert!(
        field(audit, "config").contains(&record.display().to_string()),
        "{audit:?}"
    );
}
