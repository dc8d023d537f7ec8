//! What the CLI does to the operator's terminal and files when a tool, a record or
//! the machine misbehaves: guest text is escaped before it reaches a terminal,
//! `keygen --force` replaces only a key file, and output that cannot be written is a
//! failure, while a closed stderr is never a panic. Every file the CLI reads or writes
//! for the operator is a regular file of its own: never a link followed, a FIFO waited
//! on, a device read without end, or a file grown without bound (issue 29).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::fifo;
use crate::common::{guest, text};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c
}

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors/golden/golden.aarl")
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

/// A command that reads the file at the path it is given.
type Reader = Box<dyn Fn(&Path) -> Command>;

/// The places the CLI reads a file the operator named, each as a command reading PATH.
fn read_sites(dir: &Path) -> Vec<(&'static str, Reader)> {
    let key = dir.join("k");
    if !key.exists() {
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        std::fs::write(
            dir.join("policy.yaml"),
            "version: 1\ndefault: allow\nrules: []\n",
        )
        .unwrap();
    }
    let policy = dir.join("policy.yaml");
    let audit = dir.join("r.aarl");
    let run = move |extra: &[&std::ffi::OsStr]| {
        let mut c = aegis();
        c.arg("run")
            .arg("--component")
            .arg(guest("echo"))
            .args(["--id", "echo"])
            .args(extra)
            .stdin(Stdio::null());
        c
    };
    let policy2 = policy.clone();
    vec![
        (
            "--policy",
            Box::new(move |p: &Path| {
                run(&[
                    "--input".as_ref(),
                    "x".as_ref(),
                    "--policy".as_ref(),
                    p.as_os_str(),
                ])
            }),
        ),
        (
            "--input-file",
            Box::new(move |p: &Path| run(&["--input-file".as_ref(), p.as_os_str()])),
        ),
        (
            "--signing-key",
            Box::new(move |p: &Path| {
                let mut c = aegis();
                c.args(["run", "--id", "echo", "--input", "x", "--component"])
                    .arg(guest("echo"))
                    .arg("--audit")
                    .arg(&audit)
                    .arg("--signing-key")
                    .arg(p);
                c
            }),
        ),
        (
            "key show",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.args(["key", "show"]).arg(p);
                c
            }),
        ),
        (
            "--profile",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.arg("--profile").arg(p).args(["profiles", "show"]);
                c
            }),
        ),
        (
            "--pins",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.args(["wrap", "--pins"]).arg(p).args(["--", "true"]);
                c.stdin(Stdio::null());
                c
            }),
        ),
        (
            "gateway --tools",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.args(["gateway", "--tools"]).arg(p).stdin(Stdio::null());
                c
            }),
        ),
        (
            "--trust-store",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.args(["verify", "--trust-store"]).arg(p).arg(golden());
                c
            }),
        ),
        (
            "verify",
            Box::new(|p: &Path| {
                let mut c = aegis();
                c.arg("verify").arg(p);
                c
            }),
        ),
        (
            "recheck",
            Box::new(move |p: &Path| {
                let mut c = aegis();
                c.args(["recheck", "--policy"]).arg(&policy2).arg(p);
                c
            }),
        ),
        (
            "recheck --policy",
            Box::new(move |p: &Path| {
                let mut c = aegis();
                c.args(["recheck", "--policy"]).arg(p).arg(golden());
                c
            }),
        ),
    ]
}

/// Runs `command` on `path`; says what is wrong unless it refused what stands there in
/// one line naming the file and saying what it is.
fn refused(site: &str, mut command: Command, path: &Path, what: &str) -> Result<(), String> {
    let out = command.output().unwrap();
    let stderr = text(&out.stderr);
    let name = path.display().to_string();
    if out.status.code() == Some(0) {
        return Err(format!("{site} {name}: succeeded: {stderr}"));
    }
    if !out.stdout.is_empty() && site != "verify" {
        return Err(format!("{site} {name}: printed {}", text(&out.stdout)));
    }
    match stderr.lines().find(|l| l.contains(&name)) {
        Some(line) if line.contains(what) && line.contains("not a regular file") => Ok(()),
        _ => Err(format!("{site} {name}: expected {what}: {stderr}")),
    }
}

/// Fails listing every site that did not refuse, so a regression names all of them.
fn assert_none(failures: &[String]) {
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

/// Issue 29: a link (to a regular file), a FIFO or a directory where the operator named
/// a file is refused at every place the CLI reads one, in one line naming it: never
/// followed, never waited on. Each FIFO has a writer waiting on it, so a command that
/// does open it reads its bytes and fails this test on them rather than hanging it.
#[test]
fn files_the_cli_reads_are_never_links_fifos_or_directories() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (site, command) in read_sites(dir.path()) {
        let link = dir.path().join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(dir.path().join("policy.yaml"), &link).unwrap();
        failures.extend(refused(site, command(&link), &link, "a symbolic link").err());

        let subdir = dir.path().join("subdir");
        let _ = std::fs::create_dir(&subdir);
        // To verify, a directory is a set of records (verify::many_files_…); a link to
        // one is still refused above.
        if site != "verify" {
            failures.extend(refused(site, command(&subdir), &subdir, "a directory").err());
        }

        let fifo = dir.path().join("fifo");
        let _ = std::fs::remove_file(&fifo);
        mkfifo(&fifo);
        let feed = fifo::Feed::start(&fifo, b"garbage\n");
        failures.extend(refused(site, command(&fifo), &fifo, "a FIFO").err());
        feed.release();
    }
    assert_none(&failures);
}

/// Issue 29: a device, or a link to one, is refused at every place the CLI reads a
/// file: `/dev/zero` read to its end would take all memory.
#[test]
fn files_the_cli_reads_are_never_devices() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let mut failures = Vec::new();
    for (site, command) in read_sites(dir.path()) {
        failures.extend(refused(site, command(&zero), &zero, "a symbolic link").err());
        let dev = Path::new("/dev/zero");
        failures.extend(refused(site, command(dev), dev, "a character device").err());
    }
    assert_none(&failures);
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// Issue 29: recheck reads the record once and keeps it to replay; a source without
/// end (a pipe from `/dev/zero`, or one of endless blank lines, which the verifier reads
/// to the end) stops with one line saying why, instead of taking all memory.
#[test]
fn recheck_of_an_endless_stream_stops_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.yaml"),
        "version: 1\ndefault: allow\nrules: []\n",
    )
    .unwrap();
    for (source, expected) in [
        // No newline: the verifier stops at its line limit, a Tampered record.
        ("cat /dev/zero", "Tampered"),
        // Blank lines: nothing decides the verdict before the end; the cap does.
        ("yes ''", "larger than 256 MiB"),
    ] {
        let script = format!("{source} | \"$0\" recheck --policy \"$1\" -; echo \"exit $?\" >&2");
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_aegis"))
            .arg(dir.path().join("policy.yaml"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{source}: {stderr}");
        assert!(!stderr.contains("exit 0"), "{source}: {stderr}");
        assert!(out.stdout.is_empty(), "{source}: nothing was replayed");
    }
}

/// Issue 29, the confused deputy: `confine --report W/report.json` with W granted. One
/// run's command plants a link at the report's path; the next run must not write the
/// report through it. Beneath the grant it is refused before anything runs; outside
/// any grant, a link or a FIFO there is refused, never followed or waited on.
#[cfg(target_os = "linux")]
#[test]
fn confine_never_writes_its_report_through_a_planted_link_or_into_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let granted = dir.path().join("w");
    std::fs::create_dir(&granted).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    let report = granted.join("report.json");
    let confine = |report: &Path, command: &[&std::ffi::OsStr]| {
        aegis()
            .arg("confine")
            .arg("--allow-write")
            .arg(&granted)
            .arg("--report")
            .arg(report)
            .arg("--")
            .args(command)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // The first run's command (confined, but granted W) plants the link.
    let out = confine(
        &dir.path().join("first.json"),
        &[
            "ln".as_ref(),
            "-s".as_ref(),
            victim.as_os_str(),
            report.as_os_str(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        std::fs::symlink_metadata(&report)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The next run is refused before it starts anything.
    let marker = granted.join("ran");
    let out = confine(&report, &["touch".as_ref(), marker.as_os_str()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors = stderr.lines().filter(|l| l.starts_with("error:"));
    assert_eq!(errors.count(), 1, "{stderr}");
    assert!(stderr.contains("--allow-write"), "{stderr}");
    assert!(!marker.exists(), "the command ran");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");

    // Outside the grant, a link planted by anyone else is refused, not followed.
    let outside = dir.path().join("report.json");
    std::os::unix::fs::symlink(&victim, &outside).unwrap();
    let out = confine(&outside, &["true".as_ref()]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("a symbolic link, not a regular file"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");

    // A FIFO there: the report is neither waited on nor written into it.
    let fifo = dir.path().join("fifo.json");
    mkfifo(&fifo);
    let watch = fifo::Watch::start(&fifo);
    let out = confine(&fifo, &["true".as_ref()]);
    let stderr = text(&out.stderr);
    assert!(
        watch.written().is_empty(),
        "the report went into the FIFO: {stderr}"
    );
    assert!(stderr.contains("a FIFO, not a regular file"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
