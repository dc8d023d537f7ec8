//! `aegis run --profile cedar-example`: the Cedar station loaded from its cdylib decides
//! real calls as examples/policy.yaml would, and the record it writes verifies.

use crate::common::text;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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
            .arg("--approvals")
            .arg(dir.path().join("queue"))
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

/// `aegis recheck` under either engine: one record, written under a policy that allows
/// everything, rechecked under examples/policy.yaml and under the Cedar example that
/// means the same thing. Both name the same calls as changed, with the same verdicts,
/// and the same as undecidable.
#[test]
fn recheck_under_yaml_and_under_cedar_names_the_same_changes() {
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
    let open = dir.path().join("open.yaml");
    std::fs::write(&open, "version: 1\ndefault: allow\n").unwrap();
    let record = dir.path().join("r.aarl");
    let echo = repo().join("tests/fixtures/wasm/echo.wasm");
    for id in ["echo", "read-notes", "shell", "deploy", "other"] {
        let o = aegis(dir.path(), &plugins)
            .args(["run", "--policy"])
            .arg(&open)
            .arg("--component")
            .arg(&echo)
            .args(["--id", id, "--input", "hi", "--audit"])
            .arg(&record)
            .arg("--signing-key")
            .arg(&key)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{id}: {}", text(&o.stderr));
    }
    let recheck = |how: &[&std::ffi::OsStr]| -> serde_json::Value {
        let o = aegis(dir.path(), &plugins)
            .args(["recheck", "--json"])
            .args(how)
            .arg(&record)
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&o.stdout), text(&o.stderr)))
    };
    let yaml_policy = repo().join("examples/policy.yaml");
    let by_yaml = recheck(&["--policy".as_ref(), yaml_policy.as_os_str()]);
    let by_cedar = recheck(&["--profile".as_ref(), "cedar-example".as_ref()]);
    let summary = |v: &serde_json::Value, key: &str| -> Vec<(String, String)> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} in {v}"))
            .iter()
            .map(|c| {
                (
                    c["call_id"].as_str().unwrap_or_default().to_owned(),
                    c["new"]
                        .as_str()
                        .or(c["code"].as_str())
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(
        by_yaml["changed"], by_cedar["changed"],
        "{by_yaml}\n{by_cedar}"
    );
    assert_eq!(
        summary(&by_yaml, "changed_calls"),
        summary(&by_cedar, "changed_calls")
    );
    assert_eq!(
        summary(&by_yaml, "undecidable_calls"),
        summary(&by_cedar, "undecidable_calls")
    );
    // shell is refused now, deploy parked, other refused by default: three changes.
    let changed: Vec<String> = summary(&by_cedar, "changed_calls")
        .into_iter()
        .map(|(_, new)| new)
        .collect();
    assert_eq!(changed.len(), 3, "{by_cedar}");
}
