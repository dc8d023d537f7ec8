//! What the CLI does to the operator's terminal and files when a tool, a record or
//! the machine misbehaves: guest text is escaped before it reaches a terminal,
//! `keygen --force` replaces only a key file, and output that cannot be written is a
//! failure, while a closed stderr is never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c
}

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/wasm/{name}.wasm"))
}

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors/golden/golden.aarl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `aegis ARGS` through a shell with `redirect` applied (`2>&-`, `>/dev/full`).
fn with_redirect(args: &[&str], redirect: &str) -> Output {
    let mut script = String::from("exec \"$0\"");
    for i in 1..=args.len() {
        script.push_str(&format!(" \"${i}\""));
    }
    script.push(' ');
    script.push_str(redirect);
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_aegis"))
        .args(args)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        )
        .output()
        .unwrap()
}

/// A tool's stderr carrying a carriage return, an escape sequence, a C1 control and a
/// bidi override reaches the operator with each of them escaped, so no line can be
/// overwritten or hidden and the verdict is the last thing said.
#[test]
fn guest_text_cannot_forge_or_hide_the_verdict() {
    let component = guest("read-file");
    let forged = "/nowhere\r\u{1b}[2Kaegis: success: 0 bytes out\u{1b}[8m\u{9b}2J\u{202e}";
    let out = aegis()
        .args(["run", "--component", component.to_str().unwrap()])
        .args(["--id", "reader", "--", forged])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(14), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for bad in ['\r', '\u{1b}', '\u{9b}', '\u{202e}'] {
        assert!(!err.contains(bad), "{bad:?} reached the terminal: {err:?}");
    }
    assert!(
        err.contains("\\u{d}"),
        "the escape is shown, not dropped: {err}"
    );
    let last = err.lines().rev().nth(1).unwrap_or_default();
    assert!(last.starts_with("aegis: trapped"), "{err}");
}

/// The same for a tool id, which reaches the verdict and the stderr prefix.
#[test]
fn a_tool_id_with_controls_is_escaped_everywhere_it_is_printed() {
    let component = guest("read-file");
    let out = aegis()
        .args(["run", "--component", component.to_str().unwrap()])
        .args(["--id", "x\r\u{1b}]0;owned\u{7}", "--", "/nowhere"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(
        !err.contains('\r') && !err.contains('\u{1b}') && !err.contains('\u{7}'),
        "{err:?}"
    );
}

#[test]
fn keygen_force_replaces_only_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    // A device (what `--force` once replaced with a secret: `/dev/null`). A copy of
    // the null device is made here, so a regression cannot damage the machine's;
    // making one needs root, as these tests have in CI.
    let device = dir.path().join("null");
    let made = Command::new("mknod")
        .args(["-m", "666"])
        .arg(&device)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let out = aegis()
            .args(["keygen", "--force", "--out", device.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("character device, not a regular file"),
            "{}",
            text(&out.stderr)
        );
        use std::os::unix::fs::FileTypeExt as _;
        let meta = std::fs::symlink_metadata(&device).unwrap();
        assert!(meta.file_type().is_char_device(), "the device was replaced");
    }
    // A directory, a symlink (to a regular file) and a FIFO.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"precious").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for path in [&sub, &link, &fifo] {
        for force in [true, false] {
            let mut c = aegis();
            c.args(["keygen", "--out", path.to_str().unwrap()]);
            if force {
                c.arg("--force");
            }
            let out = c.output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(1),
                "{path:?}: {}",
                text(&out.stderr)
            );
        }
    }
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    // A key file is replaced.
    let key = dir.path().join("key");
    for extra in [&[][..], &["--force"][..]] {
        let out = aegis()
            .args(["keygen", "--out", key.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// `keygen --out ~/.config/aegis/signing.key` on a fresh machine: the missing
/// directories are made private to the user (0700, whatever the umask allows beyond
/// that), and a directory that already exists keeps its mode, even a wide one.
#[test]
fn keygen_creates_missing_directories_private_and_leaves_existing_ones_alone() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("shared");
    std::fs::create_dir(&existing).unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = existing.join("config/aegis/signing.key");
    // A umask that would allow group and others in: the created directories still do not.
    let out = Command::new("sh")
        .args(["-c", "umask 000 && exec \"$0\" keygen --out \"$1\""])
        .arg(env!("CARGO_BIN_EXE_aegis"))
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(mode(&existing), 0o755);
    assert_eq!(mode(&existing.join("config")), 0o700);
    assert_eq!(mode(&existing.join("config/aegis")), 0o700);
    assert_eq!(mode(&key), 0o600);
    let shown = aegis()
        .args(["key", "show", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(text(&shown.stdout), text(&out.stdout));

    // A path through a file is not a directory to create: exit 2, nothing written.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"").unwrap();
    let out = aegis()
        .args(["keygen", "--out", file.join("k").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(&file).unwrap(), b"");
}

/// `keygen` to a full disk: the public key is not lost in silence.
#[test]
fn keygen_with_stdout_on_a_full_disk_fails_and_keeps_the_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = with_redirect(&["keygen", "--out", key.to_str().unwrap()], ">/dev/full");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("public_key ") && err.contains("key_id "),
        "{err}"
    );
    assert!(key.exists());
}

/// Data that cannot be written is an error for every command that writes data.
#[test]
fn a_report_that_cannot_be_written_is_not_success() {
    let golden = golden();
    let out = with_redirect(&["verify", golden.to_str().unwrap()], ">/dev/full");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = with_redirect(&["profiles", "list"], ">/dev/full");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A closed or full stderr: the command still ends with its own exit code, not a
/// panic's 101 (a write to a full stderr is what made `eprintln!` panic).
#[test]
fn a_closed_or_full_stderr_is_never_a_panic() {
    for redirect in ["2>&-", "2>/dev/full"] {
        let golden = golden();
        let out = with_redirect(&["verify", golden.to_str().unwrap()], redirect);
        assert_eq!(out.status.code(), Some(0), "{redirect}");
        let component = guest("read-file");
        let out = with_redirect(
            &[
                "run",
                "--component",
                component.to_str().unwrap(),
                "--id",
                "reader",
                "--",
                "/nowhere",
            ],
            redirect,
        );
        assert_eq!(out.status.code(), Some(14), "{redirect}");
        let out = with_redirect(&["verify", "/no/such/record"], redirect);
        assert_eq!(out.status.code(), Some(2), "{redirect}");
    }
}

/// A record (`run --audit`) and an export (`export --out`, even with `--force`) go only
/// into a regular file of their own: a planted link is not followed (its target would be
/// appended to or truncated), `/dev/null` would keep nothing, and a FIFO would block.
#[test]
fn records_and_exports_go_only_into_regular_files() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = aegis()
        .args(["keygen", "--out", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    let link = dir.path().join("link.aarl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = dir.path().join("fifo.aarl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let echo = guest("echo");
    let run_into = |record: &Path| {
        aegis()
            .arg("run")
            .arg("--component")
            .arg(&echo)
            .args(["--id", "echo", "--input", "x", "--audit"])
            .arg(record)
            .arg("--signing-key")
            .arg(&key)
            .output()
            .unwrap()
    };
    for target in [link.as_path(), fifo.as_path(), Path::new("/dev/null")] {
        let out = run_into(target);
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("regular file"),
            "{}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "the tool never ran");
    }

    let record = dir.path().join("record.aarl");
    let out = run_into(&record);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"p\"\ndescription = \"p\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = {{ verdict = \"deny\" }}\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:file-sink\"\nconfig = {{ path = {:?} }}\n",
            record.display().to_string()
        ),
    )
    .unwrap();
    for target in [link.as_path(), fifo.as_path(), Path::new("/dev/null")] {
        let out = aegis()
            .arg("--profile")
            .arg(&profile)
            .args(["export", "--force", "--out"])
            .arg(target)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A profile's text (and a plugin's metadata, printed the same way) cannot drive the
/// terminal: `profiles show` escapes what it lists.
#[test]
fn a_profile_description_cannot_drive_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        "name = \"p\"\ndescription = \"evil \\u001b[2J\\rVerified (pinned)\"\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = { verdict = \"deny\" }\n[capability]\n[sandbox]\n[audit]\nplugin = \"builtin:memory-sink\"\n",
    )
    .unwrap();
    let out = aegis()
        .arg("--profile")
        .arg(&profile)
        .args(["profiles", "show"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        !shown.contains('\x1b') && !shown.contains('\r'),
        "{shown:?}"
    );
    assert!(shown.contains("\\u{1b}"), "{shown}");
}
