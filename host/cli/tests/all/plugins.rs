//! `aegis plugins`, `aegis profiles` and `aegis export` as a user runs them, including a
//! vendor sink (SQLite) loaded from its file path whose record `aegis verify` accepts.

use aegis_test_support as support;

use aegis_record::{IntentLine, RequestDigest, SigningKey};
use aegis_runtime::{Host, Profile};
use std::path::Path;
use std::process::{Command, Output};
use support::cdylib;

/// The binary, run in `dir` with a HOME and config dirs that hold nothing.
fn aegis_in(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.current_dir(dir)
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("AEGIS_PROFILE_PATH")
        .env_remove("AEGIS_PLUGIN_PATH");
    c
}

/// Writes `profiles/<name>.toml` under `dir`, which `--profile profiles/<name>.toml`
/// reads (a name alone never looks in the working directory).
fn write_profile(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join(format!("profiles/{name}.toml")), text).unwrap();
}

fn text(o: &[u8]) -> String {
    String::from_utf8(o.to_vec()).unwrap()
}

fn ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    text(&o.stdout)
}

#[test]
fn the_default_profile_works_from_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&aegis_in(dir.path())
        .args(["--profile", "default", "profiles", "show"])
        .output()
        .unwrap());
    assert!(out.contains("name         default"), "{out}");
    assert!(out.contains("source       embedded"), "{out}");
    assert!(out.contains("audit        memory-sink"), "{out}");
    let list = ok(&aegis_in(dir.path())
        .args(["profiles", "list"])
        .output()
        .unwrap());
    assert!(
        list.contains("default") && list.contains("durable-file"),
        "{list}"
    );
}

#[test]
fn a_local_profile_given_as_a_path_is_read_and_errors_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    write_profile(
        dir.path(),
        "bad",
        "name = \"bad\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\n[capability]\n[sandbox]\nreorder = true\n[audit]\nplugin = \"builtin:memory-sink\"\n",
    );
    let o = aegis_in(dir.path())
        .args(["--profile", "profiles/bad.toml", "profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: profiles/bad.toml:7: unknown field `reorder`"),
        "{err}"
    );

    let o = aegis_in(dir.path())
        .args(["--profile", "missing", "profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(text(&o.stderr).contains("no profile named \"missing\""));
}

#[test]
fn plugins_list_shows_builtins_loaded_and_refused_libraries() {
    let dir = tempfile::tempdir().unwrap();
    for p in ["aegis-sink-sqlite", "aegis-test-plugin-incompatible-major"] {
        let src = cdylib(p);
        std::fs::copy(&src, dir.path().join(src.file_name().unwrap())).unwrap();
    }
    let out = ok(&aegis_in(dir.path())
        .args(["plugins", "list", "--path", "."])
        .output()
        .unwrap());
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"));
    // Each row starts with the name a profile's `plugin =` takes.
    for builtin in ["policy-static", "memory-sink", "file-sink"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("builtin:{builtin} ")) && l.ends_with("builtin")),
            "{out}"
        );
    }
    // Not on the plugin path: a profile names it by its absolute path.
    let so = std::path::absolute(dir.path().join("libaegis_sink_sqlite.so")).unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("{} ", so.display()))
                && l.ends_with("(calls itself sqlite-sink)")),
        "{out}"
    );
    assert!(out.contains("refused: plugin ./libaegis_test_plugin_incompatible_major.so: built against station API 2.0.0"), "{out}");
}

/// A third-party sink loaded from its file path keeps a record that chains across
/// sessions, exports byte-exact and verifies pinned with the real binary.
#[test]
fn a_vendor_sqlite_sink_records_exports_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let so = cdylib("aegis-sink-sqlite");
    let db = dir.path().join("audit.db");
    let profile_path = dir.path().join("vendor.toml");
    std::fs::write(
        &profile_path,
        format!(
            "name = \"vendor\"\ndescription = \"sqlite\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = {{ verdict = \"deny\" }}\n[capability]\n[sandbox]\n[audit]\nplugin = {:?}\nconfig = {{ path = {:?} }}\n",
            so.display().to_string(),
            db.display().to_string()
        ),
    )
    .unwrap();
    let profile = Profile::read(&profile_path).unwrap();
    let key = SigningKey::generate().unwrap();
    for session in 0..2 {
        // Assembled as `aegis run --profile` assembles it: the profile names the sink.
        let opened = Host::builder(profile.clone())
            .signing_key(key.clone())
            .open()
            .unwrap()
            .into_audit()
            .unwrap();
        assert_eq!(
            opened.notice.to_string(),
            format!("Audit: sqlite:{}", db.display())
        );
        opened
            .session
            .append_unsigned(&IntentLine {
                call_id: format!("call-{session}"),
                tool_id: "echo".into(),
                request_digest: RequestDigest::of_request(b"{}"),
            })
            .unwrap();
        opened.session.close().unwrap();
    }

    let exported = dir.path().join("exported.aarl");
    let o = aegis_in(dir.path())
        .arg("--profile")
        .arg(&profile_path)
        .args(["export", "--out"])
        .arg(&exported)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("exported 6 lines"),
        "{}",
        text(&o.stderr)
    );

    let o = aegis_in(dir.path())
        .args(["verify", "--key", &key.public_key().to_hex()])
        .arg(&exported)
        .output()
        .unwrap();
    let report = ok(&o);
    assert_eq!(
        report.lines().next(),
        Some(format!("Verified (pinned to {})", key.key_id()).as_str())
    );
    assert!(report.contains("coverage session 1 seq 2"), "{report}");

    // The output is not overwritten without --force.
    let o = aegis_in(dir.path())
        .arg("--profile")
        .arg(&profile_path)
        .args(["export", "--out"])
        .arg(&exported)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

/// A plugin named without a path is found on `$AEGIS_PLUGIN_PATH` as `lib<name>.so`.
#[test]
fn a_plugin_named_without_a_path_is_found_on_the_plugin_path() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let so = cdylib("aegis-sink-sqlite");
    std::fs::copy(&so, plugins.join("libaegis_sink_sqlite.so")).unwrap();
    write_profile(
        dir.path(),
        "named",
        "name = \"named\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = { verdict = \"deny\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"aegis-sink-sqlite\"\nconfig = { path = \"a.db\" }\n",
    );
    let o = aegis_in(dir.path())
        .env("AEGIS_PLUGIN_PATH", &plugins)
        .args(["--profile", "profiles/named.toml", "profiles", "show"])
        .output()
        .unwrap();
    let out = ok(&o);
    assert!(out.contains("audit        sqlite-sink 0.1.0 from"), "{out}");
    assert!(out.contains("plugins/libaegis_sink_sqlite.so"), "{out}");
    let o = aegis_in(dir.path())
        .args(["--profile", "profiles/named.toml", "profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "not found without the plugin path"
    );
    // A relative entry on the plugin path would search the working directory: skipped.
    let o = aegis_in(dir.path())
        .env("AEGIS_PLUGIN_PATH", "plugins")
        .args(["--profile", "profiles/named.toml", "profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stdout));
}

/// Regression: a plain command in a checkout holding `./profiles/default.toml` read it
/// and loaded the plugin it named. Now the embedded default is used, and stderr says so.
#[test]
fn a_profile_planted_in_the_working_directory_is_not_used_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let so = cdylib("aegis-test-plugin-misbehaving");
    std::fs::create_dir(dir.path().join("profiles")).unwrap();
    std::fs::copy(&so, dir.path().join("profiles/libevil.so")).unwrap();
    let planted = "name = \"default\"\ndescription = \"planted\"\n[policy]\nplugin = \"./libevil.so\"\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n";
    write_profile(dir.path(), "default", planted);
    for args in [
        vec!["profiles", "show"],
        vec!["--profile", "default", "profiles", "show"],
    ] {
        let o = aegis_in(dir.path()).args(&args).output().unwrap();
        let out = ok(&o);
        assert!(out.contains("source       embedded"), "{out}");
        assert!(!out.contains("misbehaving"), "{out}");
        assert_eq!(text(&o.stderr), "aegis: profile default (embedded)\n");
    }
    // Named as a path it is the operator's choice, and stderr names the file.
    let o = aegis_in(dir.path())
        .args(["--profile", "./profiles/default.toml", "profiles", "show"])
        .output()
        .unwrap();
    let out = ok(&o);
    assert!(out.contains("policy       misbehaving"), "{out}");
    let abs = std::path::absolute(dir.path().join("./profiles/default.toml")).unwrap();
    assert_eq!(
        text(&o.stderr),
        format!("aegis: profile default ({})\n", abs.display())
    );
}

/// The same profile file loads the same plugin from any working directory: its relative
/// plugin path is the profile file's neighbour, not a file under the working directory.
#[test]
fn a_relative_plugin_path_means_the_same_file_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir_all(conf.join("plugins")).unwrap();
    std::fs::copy(cdylib("aegis-sink-sqlite"), conf.join("plugins/libsink.so")).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("plugins")).unwrap();
    std::fs::copy(
        cdylib("aegis-test-plugin-misbehaving"),
        elsewhere.join("plugins/libsink.so"),
    )
    .unwrap();
    let profile = conf.join("p.toml");
    std::fs::write(
        &profile,
        "name = \"rel\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = { verdict = \"allow\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"plugins/libsink.so\"\nconfig = { path = \"a.db\" }\n",
    )
    .unwrap();
    for cwd in [&conf, &elsewhere] {
        let o = aegis_in(cwd)
            .arg("--profile")
            .arg(&profile)
            .args(["profiles", "show"])
            .output()
            .unwrap();
        let out = ok(&o);
        assert!(out.contains("audit        sqlite-sink"), "{out}");
        assert!(
            out.contains(&format!("{}", conf.join("plugins/libsink.so").display())),
            "{out}"
        );
    }
}

/// `run` and `export` say which profile they use, before anything else on stderr.
#[test]
fn commands_that_use_a_profile_name_it_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let o = aegis_in(dir.path())
        .args(["export", "--out", "x.aarl"])
        .output()
        .unwrap();
    // The default's sink is volatile, so there is nothing to export (code 2); the
    // profile is named first all the same.
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).starts_with("aegis: profile default (embedded)\n"),
        "{}",
        text(&o.stderr)
    );
    let echo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/wasm/echo.wasm");
    let o = aegis_in(dir.path())
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args([
            "--profile",
            "durable-file",
            "run",
            "--id",
            "echo",
            "--input",
            "hi",
        ])
        .arg("--component")
        .arg(&echo)
        .output()
        .unwrap();
    assert_eq!(
        text(&o.stderr).lines().next(),
        Some("aegis: profile durable-file (embedded)"),
        "{}",
        text(&o.stderr)
    );
}

/// Before, a `[sandbox] confinement` table was accepted, `profiles show` listed it as
/// the sandbox, and `run` ran unconfined; and a plugin named for a station it does not
/// fill was shown as that station. Both are refused now, naming file, line and key.
#[test]
fn unwired_or_wrong_kind_stations_are_refused_by_show_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let echo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm/echo.wasm");
    let base = "name = \"p\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = { verdict = \"allow\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n";
    write_profile(
        dir.path(),
        "confined",
        &base.replace(
            "[sandbox]\n",
            "[sandbox]\nconfinement = { plugin = \"builtin:policy-static\" }\n",
        ),
    );
    write_profile(
        dir.path(),
        "swapped",
        &base.replace(
            "[policy]\nplugin = \"builtin:policy-static\"",
            "[policy]\nplugin = \"builtin:memory-sink\"",
        ),
    );
    let run = |profile: &str, command: &[&str]| {
        aegis_in(dir.path())
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .args(["--profile", profile])
            .args(command)
            .output()
            .unwrap()
    };
    let run_echo = [
        "run",
        "--component",
        echo.to_str().unwrap(),
        "--id",
        "echo",
        "--input",
        "hi",
    ];

    // A confinement backend that is not one is refused by every command, and never
    // shown as the backend.
    let o = run("profiles/confined.toml", &["profiles", "show"]);
    assert_eq!(o.status.code(), Some(4));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: profiles/confined.toml:8: [sandbox.confinement] ")
            && last.contains("provides policy, not confinement"),
        "{err}"
    );
    let o = run("profiles/confined.toml", &run_echo);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "nothing ran");
    assert!(
        text(&o.stderr).contains("provides policy, not confinement"),
        "{}",
        text(&o.stderr)
    );

    // Refused by show as run refuses it: one line on stderr, nothing on stdout.
    let o = run("profiles/swapped.toml", &["profiles", "show"]);
    assert_eq!(o.status.code(), Some(4));
    let err = text(&o.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: profiles/swapped.toml:4: [policy] ")
            && last.contains("provides sink, not policy"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    let o = run("profiles/swapped.toml", &run_echo);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    assert!(
        text(&o.stderr).contains("provides sink, not policy"),
        "{}",
        text(&o.stderr)
    );
}

/// `export` on a profile whose sink is volatile (the default) has nothing to export in a
/// new process: it says so with code 2 and writes no file, rather than an empty one
/// that reads as a record of nothing.
#[test]
fn export_of_a_volatile_sink_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("record.aarl");
    let o = aegis_in(dir.path())
        .arg("export")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let said = text(&o.stderr);
    assert!(
        said.contains("volatile") && said.contains("builtin:memory-sink"),
        "{said}"
    );
    assert_eq!(
        said.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{said}"
    );
    assert!(!out.exists(), "no file is written");
}
