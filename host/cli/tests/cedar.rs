//! `aegis run --profile cedar-example`: the Cedar station loaded from its cdylib decides
//! real calls as examples/policy.yaml would, and the record it writes verifies.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `aegis` with the checkout's profiles and a plugin directory holding only the Cedar
/// station, run from `cwd` (not the checkout: the profile's relative paths must not
/// depend on it).
fn aegis(cwd: &Path, plugins: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.current_dir(cwd)
        .env("AEGIS_PROFILE_PATH", repo().join("profiles"))
        .env("AEGIS_PLUGIN_PATH", plugins)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        );
    c
}

#[test]
fn the_cedar_example_profile_decides_calls_and_its_record_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        aegis_test_support::cdylib("aegis-policy-cedar-plugin"),
        plugins.join("libaegis_policy_cedar_plugin.so"),
    )
    .unwrap();
    let key = dir.path().join("k");
    let o = aegis(dir.path(), &plugins)
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let echo = repo().join("tests/fixtures/wasm/echo.wasm");

    let record = dir.path().join("r.aarl");
    let call = |id: &str| -> Output {
        aegis(dir.path(), &plugins)
            .args(["run", "--profile", "cedar-example", "--component"])
            .arg(&echo)
            .args(["--id", id, "--input", "hi", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(&key)
            .output()
            .unwrap()
    };
    // (tool, exit code, what stderr says): run's documented codes, 10 policy, 12 parked.
    for (id, code, says) in [
        ("echo", 0, "success"),
        ("read-notes", 0, "success"),
        ("shell", 10, "shell is never allowed"),
        ("deploy", 12, "approval"),
        ("anything-else", 10, "no policy permits the call"),
    ] {
        let o = call(id);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{id}: {err}");
        assert!(err.contains(says), "{id}: {err}");
        if code == 0 {
            assert_eq!(o.stdout, b"hi", "{id}");
        }
    }

    let lines = std::fs::read_to_string(&record).unwrap();
    for rule in [
        "\"matched_rule\":\"echo\"",
        "\"matched_rule\":\"read-notes\"",
        "\"matched_rule\":\"no-shell\"",
        "\"matched_rule\":\"deploy-needs-a-human\"",
    ] {
        assert!(lines.contains(rule), "{rule} not in the record:\n{lines}");
    }
    // The plugin was loaded from the file, and the record says so.
    assert!(lines.contains("libaegis_policy_cedar_plugin.so"), "{lines}");

    let o = aegis(dir.path(), &plugins)
        .arg("verify")
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

#[test]
fn a_cedar_profile_whose_policy_does_not_validate_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(
        aegis_test_support::cdylib("aegis-policy-cedar-plugin"),
        plugins.join("libaegis_policy_cedar_plugin.so"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("p.cedar"),
        "permit (principal, action, resource);\n\nforbid (principal, action, resource)\n  when { context.nope };\n",
    )
    .unwrap();
    std::fs::copy(
        repo().join("examples/cedar/schema.cedarschema"),
        dir.path().join("s.cedarschema"),
    )
    .unwrap();
    let profile = dir.path().join("c.toml");
    std::fs::write(
        &profile,
        "name = \"c\"\ndescription = \"d\"\n[policy]\nplugin = \"aegis-policy-cedar-plugin\"\nconfig = { policies = \"p.cedar\", schema = \"s.cedarschema\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n",
    )
    .unwrap();
    let o = aegis(Path::new("/"), &plugins)
        .arg("run")
        .arg("--profile")
        .arg(&profile)
        .arg("--component")
        .arg(repo().join("tests/fixtures/wasm/echo.wasm"))
        .args(["--id", "echo", "--input", "x"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    let at = format!("{}:4:", dir.path().join("p.cedar").display());
    assert!(err.contains(&at), "{err}");
    assert!(err.contains("does not validate"), "{err}");
}
