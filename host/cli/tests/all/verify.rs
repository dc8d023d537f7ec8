//! `aegis verify` as a user runs it: the real binary on every committed vector, and the
//! documented exit codes for unreadable input and usage errors.

use aegis_record::json::{self, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn aegis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
}

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The manifest's `--key` arguments with each public key replaced by its key id.
fn pinned_by_key_id(args: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(&a) = args.next() {
        out.push(a.to_owned());
        if a == "--key" {
            let key = aegis_record::PublicKey::from_hex(args.next().unwrap()).unwrap();
            out.push(key.key_id().to_hex());
        }
    }
    out
}

/// Every manifest entry: first stdout line, in_flight and unfinished lines and exit code
/// as published, and the same again with every pinned key given by its key id, on
/// `--key` and in a trust store: a key id pins exactly as the key does.
#[test]
fn every_committed_vector_gets_its_published_verdict() {
    let manifest = std::fs::read_to_string(vectors().join("manifest.jsonl")).unwrap();
    let stores = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut by_key_id = 0;
    for (n, line) in manifest.lines().enumerate() {
        let Value::Object(entry) = json::parse(line.as_bytes()).unwrap() else {
            panic!("manifest line is an object");
        };
        let file = entry.get("file").unwrap().as_str().unwrap();
        let args: Vec<&str> = entry
            .get("args")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let mut variants = vec![args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()];
        if args.contains(&"--key") {
            let ids = pinned_by_key_id(&args);
            let store = stores.path().join(format!("{n}.trust"));
            let lines: Vec<&str> = ids
                .iter()
                .filter(|a| *a != "--key")
                .map(String::as_str)
                .collect();
            std::fs::write(&store, lines.join("\n") + "\n").unwrap();
            variants.push(ids);
            variants.push(vec![
                "--trust-store".to_owned(),
                store.to_str().unwrap().to_owned(),
            ]);
            by_key_id += 1;
        }
        for args in variants {
            let out = aegis()
                .arg("verify")
                .args(&args)
                .arg(vectors().join(file))
                .output()
                .unwrap();
            let text = stdout(&out);
            let headline = entry.get("headline").unwrap().as_str().unwrap();
            assert_eq!(text.lines().next(), Some(headline), "{file} {args:?}");
            let expected_exit = entry.get("exit").unwrap().as_int().unwrap();
            assert_eq!(out.status.code(), Some(expected_exit as i32), "{file}");
            let in_flight: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("in_flight"))
                .collect();
            let expected: Vec<&str> = entry
                .get("in_flight")
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert_eq!(in_flight, expected, "{file}");
            let unfinished: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("unfinished"))
                .collect();
            let expected: Vec<&str> = entry
                .get("unfinished")
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert_eq!(unfinished, expected, "{file}");
            assert!(stderr(&out).is_empty(), "{file}: {}", stderr(&out));
            checked += 1;
        }
    }
    assert!(checked >= 30);
    assert!(
        by_key_id >= 3,
        "the manifest pins keys in {by_key_id} entries"
    );
}

/// The report names each key, its coverage, and nothing that varies between runs.
#[test]
fn report_lines_are_deterministic_and_carry_no_path() {
    let path = vectors().join("golden/golden.aarl");
    let a = aegis().arg("verify").arg(&path).output().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let other = copy.path().join("renamed.jsonl");
    std::fs::copy(&path, &other).unwrap();
    let b = aegis().arg("verify").arg(&other).output().unwrap();
    assert_eq!(a.stdout, b.stdout, "any file name, same bytes, same report");
    let text = stdout(&a);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Verified (unpinned)");
    assert!(lines[1].starts_with("key_id "));
    assert!(lines[2].starts_with("published_test_key "));
    assert_eq!(lines[3], "coverage session 0 seq 20");
    assert_eq!(lines.len(), 4);
    assert!(!text.contains("golden"));
}

#[test]
fn json_report_is_one_parseable_object() {
    let out = aegis()
        .args(["verify", "--json"])
        .arg(vectors().join("indeterminate/unanchored_tail.aarl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1);
    let Value::Object(o) = json::parse(text.trim_end().as_bytes()).unwrap() else {
        panic!("an object");
    };
    assert_eq!(o.get("verdict").unwrap().as_str(), Some("indeterminate"));
    assert_eq!(o.get("class").unwrap().as_str(), Some("unanchored_tail"));
    assert_eq!(o.get("in_flight").unwrap().as_array().unwrap().len(), 1);
}

#[test]
fn unreadable_record_is_exit_2_with_empty_stdout() {
    let out = aegis()
        .args(["verify", "/nonexistent/record.aarl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).starts_with("error: /nonexistent/record.aarl: "));
    // A directory is a set of records; one that holds none has nothing verified, which
    // is never Verified (as an empty file is Indeterminate).
    let dir = tempfile::tempdir().unwrap();
    let out = aegis().arg("verify").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("summary: 0 files"));
    assert!(stderr(&out).contains("no files to verify"));
}

fn golden_key() -> String {
    let key = std::fs::read_to_string(vectors().join("golden/KEY")).unwrap();
    key.lines()
        .find_map(|l| l.strip_prefix("public_key "))
        .unwrap()
        .to_owned()
}

fn verify_with_store(store: &Path, record: &Path) -> Output {
    aegis()
        .args(["verify", "--trust-store"])
        .arg(store)
        .arg(record)
        .output()
        .unwrap()
}

#[test]
fn trust_store_pins_skips_comments_and_an_empty_store_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let golden = vectors().join("golden/golden.aarl");
    let store = dir.path().join("trust");
    std::fs::write(&store, format!("# auditors' keys\n\n{}\n", golden_key())).unwrap();
    let out = verify_with_store(&store, &golden);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("Verified (pinned to "));

    // A store that yields no keys is a pin nothing satisfies, never "unpinned".
    std::fs::write(&store, "# truncated\n\n").unwrap();
    let out = verify_with_store(&store, &golden);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("Tampered — untrusted key at (session 0, seq 0)"));

    std::fs::write(&store, "not-a-key\n").unwrap();
    let out = verify_with_store(&store, &golden);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("line 1: expected a public key"),
        "{}",
        stderr(&out)
    );

    let out = aegis()
        .args(["verify", "--trust-store", "/nonexistent/store"])
        .arg(&golden)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn usage_errors_are_exit_1() {
    let golden = vectors().join("golden/golden.aarl");
    for args in [
        vec!["verify"],
        vec!["verify", "--no-such-flag", "x"],
        vec!["verify", "--key", "ABC", "x"],
        vec!["verify", "--key", &"A".repeat(64), "x"],
    ] {
        let out = aegis().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let out = aegis().args(["verify", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(golden.exists());
}

#[test]
fn keygen_writes_a_private_key_that_verify_pins() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    let public = lines[0].strip_prefix("public_key ").unwrap();
    let key_id = lines[1].strip_prefix("key_id ").unwrap();
    let pk = aegis_record::PublicKey::from_hex(public).unwrap();
    assert_eq!(pk.key_id().to_hex(), key_id);
    let loaded = aegis_record::SigningKey::load(&key).unwrap();
    assert_eq!(loaded.public_key(), pk);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    // No silent overwrite; --force replaces.
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already exists"));
    assert_eq!(
        aegis_record::SigningKey::load(&key).unwrap().public_key(),
        pk
    );
    let out = aegis()
        .args(["keygen", "--force", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_ne!(
        aegis_record::SigningKey::load(&key).unwrap().public_key(),
        pk
    );

    // A directory that cannot be made (a file is in the way).
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(key.join("dir/k"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn demo_runs_and_ends_on_a_verdict() {
    let out = aegis().arg("demo").env("NO_COLOR", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        !text.contains('\x1b'),
        "no colour when NO_COLOR is set or stdout is a pipe"
    );
    for shown in [
        "success: 14 bytes out",
        "refused by policy (rule no-shell): shell is never allowed",
        "refused by the capability station",
        "stopped by the memory ceiling",
        "stopped by the wall_time ceiling",
        "stopped by the output ceiling",
        "Every call and every verdict came out as Aegis promises.",
    ] {
        assert!(text.contains(shown), "missing {shown:?} in:\n{text}");
    }
    // The MCP part: a real stdio server behind `wrap`, a client's two injected tries;
    // its long lines are wrapped, so they are read with the breaks joined.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for shown in [
        "the client lists 2 tools: read_file, http_post",
        "client receives standup at 10",
        "Aegis refused this tool call at the policy station: refused by policy (rule no-exfiltration): nothing leaves this machine from a notes session",
        "the record's line for the refused post:",
    ] {
        assert!(flat.contains(shown), "missing {shown:?} in:\n{text}");
    }
    assert!(!text.contains("kingdom"), "the secret never shows");
    assert!(
        !text.contains("would have sent"),
        "the post never reaches the server"
    );
    let mcp = text
        .split("6. The same stations")
        .nth(1)
        .unwrap_or_default();
    assert_eq!(
        mcp.matches("Aegis refused this tool call at the policy station")
            .count(),
        2,
        "both injected calls are refused by policy:\n{mcp}"
    );
    assert!(
        mcp.contains("wrap's record") && mcp.contains("Verified (pinned to "),
        "{mcp}"
    );
    assert!(text.contains("Verified (pinned to "));
    assert!(text.contains("Tampered — bad signature"));
    assert!(text.contains("Indeterminate — session 0 does not end with a close record"));
    assert!(text.contains("Tampered — untrusted key"));
}

/// `aegis demo | head -1` and `aegis verify … | head -1`: a closed pipe is not an error.
#[cfg(unix)]
#[test]
fn a_closed_stdout_is_not_an_error() {
    use std::process::Stdio;
    for args in [vec!["demo"], vec!["verify", "--json"]] {
        let mut cmd = aegis();
        cmd.args(&args);
        if args[0] == "verify" {
            cmd.arg(vectors().join("golden/golden.aarl"));
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before anything is read
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

/// Runs `aegis verify` on `path` and kills it if it has not ended after a generous grace:
/// a hang fails the test (the timeout is a watchdog, not a measured duration).
fn verify_or_kill(
    path: &Path,
    stdin: Option<Box<dyn FnOnce(std::process::ChildStdin) + Send>>,
) -> Output {
    use std::process::Stdio;
    let mut child = aegis()
        .arg("verify")
        .arg(path)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = stdin.map(|feed| {
        let pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || feed(pipe))
    });
    let mut waited = 0;
    while child.try_wait().unwrap().is_none() {
        if waited > 600 {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("aegis verify {} never ended", path.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        waited += 1;
    }
    let out = child.wait_with_output().unwrap();
    if let Some(f) = feeder {
        f.join().unwrap();
    }
    out
}

fn assert_oversize(out: &Output, line: u64, what: &str) {
    assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(out));
    assert_eq!(
        stdout(out).lines().next(),
        Some(format!("Tampered — malformed line {line}: longer than 1048576 bytes").as_str()),
        "{what}"
    );
}

/// Sources that never end, or whose first over-long line is far from its end, get a
/// verdict once the line limit is passed: `/dev/zero`, an endless pipe on stdin, and a
/// sparse file whose hole follows a valid session.
#[cfg(unix)]
#[test]
fn verify_ends_on_endless_and_sparse_sources() {
    // A device named as the record is refused before it is read (issue 29); its bytes
    // on standard input are read, and end in a verdict.
    let out = verify_or_kill(Path::new("/dev/zero"), None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "error: /dev/zero: a character device, not a regular file; refused (aegis reads and writes only a regular file here, never through a link)\n"
    );

    let endless = |mut pipe: std::process::ChildStdin| {
        use std::io::Write as _;
        let block = vec![b'x'; 1 << 16];
        // Stops when the verifier closes the pipe: it has decided.
        while pipe.write_all(&block).is_ok() {}
    };
    assert_oversize(
        &verify_or_kill(Path::new("-"), Some(Box::new(endless))),
        1,
        "an endless pipe",
    );

    let dir = tempfile::tempdir().unwrap();
    let sparse = dir.path().join("sparse.aarl");
    let golden = std::fs::read(vectors().join("golden/golden.aarl")).unwrap();
    std::fs::write(&sparse, &golden).unwrap();
    // 64 GiB of hole after 21 valid lines; no block of it is ever written.
    std::fs::File::options()
        .write(true)
        .open(&sparse)
        .unwrap()
        .set_len(64 << 30)
        .unwrap();
    assert_oversize(&verify_or_kill(&sparse, None), 22, "a sparse file");
}

/// Ctrl-C left an intent with no outcome, and the next run anchored that session: the
/// verdict stays Verified, and the report, text and JSON, still names the call.
#[test]
fn an_interrupted_call_is_named_after_a_later_session_anchors_it() {
    let path = vectors().join("verified/crash_then_restart.aarl");
    let out = aegis().arg("verify").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out)
            .contains("\nunfinished session 0 seq 1 call_id \"call-crashed\" tool_id \"echo\"\n"),
        "{}",
        stdout(&out)
    );
    let out = aegis()
        .args(["verify", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let Value::Object(o) = json::parse(stdout(&out).trim_end().as_bytes()).unwrap() else {
        panic!("an object");
    };
    assert_eq!(o.get("verdict").unwrap().as_str(), Some("verified"));
    let unfinished = o.get("unfinished").unwrap().as_array().unwrap();
    assert_eq!(unfinished.len(), 1);
    let call = unfinished[0].as_object().unwrap();
    assert_eq!(call.get("call_id").unwrap().as_str(), Some("call-crashed"));
    assert_eq!(o.get("unfinished_unlisted").unwrap().as_int(), Some(0));
    assert!(o.get("in_flight").unwrap().as_array().unwrap().is_empty());
}

/// The golden vector is signed by a published seed: pinned or not, the report says the
/// record proves nothing about its author. A record under a fresh key says nothing so.
#[test]
fn a_published_test_key_is_named_pinned_or_not() {
    let golden = vectors().join("golden/golden.aarl");
    let line = "published_test_key 5990c104283522fc80d1415329ab1edbd946db99db120e60eb530d4406a73ff3 (the vector key, whose seed is public: this record proves nothing about its author)";
    for pin in [vec![], vec!["--key".to_owned(), golden_key()]] {
        let out = aegis()
            .arg("verify")
            .args(&pin)
            .arg(&golden)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{pin:?}");
        assert!(
            stdout(&out).lines().any(|l| l == line),
            "{pin:?}: {}",
            stdout(&out)
        );
        let out = aegis()
            .args(["verify", "--json"])
            .args(&pin)
            .arg(&golden)
            .output()
            .unwrap();
        let Value::Object(o) = json::parse(stdout(&out).trim_end().as_bytes()).unwrap() else {
            panic!("an object");
        };
        assert_eq!(
            o.get("signed_by_published_test_key"),
            Some(&Value::Bool(true))
        );
        let key = o.get("keys").unwrap().as_array().unwrap()[0]
            .as_object()
            .unwrap();
        assert_eq!(
            key.get("published_test_key").unwrap().as_str(),
            Some("vector key")
        );
    }

    let fresh = aegis_record::SigningKey::generate().unwrap();
    let sink = aegis_record::VecSink::new();
    let session = aegis_record::Session::open(
        std::sync::Arc::new(sink.clone()),
        fresh,
        None,
        aegis_record::json::Object::new(),
    )
    .unwrap();
    session.close().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("fresh.aarl");
    std::fs::write(&record, sink.contents()).unwrap();
    let out = aegis().arg("verify").arg(&record).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(!stdout(&out).contains("published_test_key"));
    let out = aegis()
        .args(["verify", "--json"])
        .arg(&record)
        .output()
        .unwrap();
    assert!(stdout(&out).contains("\"signed_by_published_test_key\":false"));
}

/// `key show` prints what keygen printed; a seed file others can read, or one that is not
/// a seed, is refused (4) as `run --signing-key` refuses it; a missing one is exit 2.
#[test]
fn key_show_prints_the_keygen_lines_and_refuses_what_run_refuses() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let made = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    let shown = aegis().args(["key", "show"]).arg(&key).output().unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert_eq!(stdout(&shown), stdout(&made));

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = aegis().args(["key", "show"]).arg(&key).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));

    let not_a_seed = dir.path().join("KEY");
    std::fs::copy(vectors().join("golden/KEY"), &not_a_seed).unwrap();
    std::fs::set_permissions(&not_a_seed, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = aegis()
        .args(["key", "show"])
        .arg(&not_a_seed)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    let out = aegis()
        .args(["key", "show"])
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = aegis().args(["key", "show"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a missing KEYFILE is a usage error"
    );
}

/// A key id pins on the full 64 characters: another key's id, or the right id cut short
/// (as a human might paste a fingerprint), never passes for the key.
#[test]
fn a_key_id_pins_only_its_own_key_and_only_in_full() {
    let golden = vectors().join("golden/golden.aarl");
    let id = aegis_record::PublicKey::from_hex(&golden_key())
        .unwrap()
        .key_id()
        .to_hex();
    let out = aegis()
        .args(["verify", "--key", &id])
        .arg(&golden)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out).lines().next(),
        Some(format!("Verified (pinned to {id})").as_str())
    );
    // The outsider key of spec §9.5, by its key id.
    let outsider = "dbc298251c51321b7266e78d1c151c2b62aff8cb95b293096d3463018544face";
    let out = aegis()
        .args(["verify", "--key", outsider])
        .arg(&golden)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("Tampered — untrusted key"));
    let out = aegis()
        .args(["verify", "--key", &id[..16]])
        .arg(&golden)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "a short id is a usage error");
    assert!(out.stdout.is_empty());
}

/// Many files at once, and directories: each file's own report after a line naming it,
/// in order (a directory's files by name, depth first), then a summary; the exit code is
/// the worst verdict's (Tampered, unreadable, Indeterminate, Verified). A link or FIFO
/// in a directory is named unreadable, never followed or opened; `--json` is one object
/// a line ending with the summary.
#[test]
fn many_files_and_directories_get_a_report_each_and_the_worst_exit() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    std::fs::create_dir_all(archive.join("host-b")).unwrap();
    let copy = |from: &str, to: &str| {
        std::fs::copy(vectors().join(from), archive.join(to)).unwrap();
    };
    copy("golden/golden.aarl", "a.aarl");
    copy("indeterminate/empty.aarl", "host-b/c.aarl");
    copy("verified/rotation.aarl", "host-b/b.aarl");
    std::os::unix::fs::symlink("/etc/passwd", archive.join("b-link")).unwrap();
    let golden = vectors().join("golden/golden.aarl");

    // One file is reported as it always was: the report alone.
    let alone = aegis().arg("verify").arg(&golden).output().unwrap();
    assert!(stdout(&alone).starts_with("Verified (unpinned)\n"));

    let out = aegis().arg("verify").arg(&archive).output().unwrap();
    let text = stdout(&out);
    let named: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    let a = archive.display();
    assert_eq!(
        named,
        [
            format!("== {a}/a.aarl"),
            format!("== {a}/b-link"),
            format!("== {a}/host-b/b.aarl"),
            format!("== {a}/host-b/c.aarl"),
        ]
    );
    assert!(
        text.contains("unreadable: a symbolic link, not a regular file"),
        "{text}"
    );
    assert!(
        text.ends_with("summary: 4 files: 2 Verified, 1 Indeterminate, 0 Tampered, 1 unreadable\n")
    );
    // Unreadable is worse than Indeterminate: nothing in it was checked.
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("b-link: a symbolic link"));

    // A Tampered file among them decides the exit code; --json is one object a line.
    let tampered = vectors().join("tampered/bad_signature.aarl");
    let out = aegis()
        .args(["verify", "--json"])
        .arg(&golden)
        .arg(&tampered)
        .arg(archive.join("host-b"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let objects: Vec<json::Object> = stdout(&out)
        .lines()
        .map(|l| match json::parse(l.as_bytes()).unwrap() {
            Value::Object(o) => o,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(objects.len(), 5);
    let verdict = |o: &json::Object| {
        o.get("report")
            .and_then(Value::as_object)
            .and_then(|r| r.get("verdict"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    assert_eq!(
        objects[..4].iter().map(verdict).collect::<Vec<_>>(),
        ["verified", "tampered", "verified", "indeterminate"].map(|v| Some(v.to_owned()))
    );
    let summary = objects[4]
        .get("summary")
        .and_then(Value::as_object)
        .unwrap();
    assert_eq!(summary.get("tampered").and_then(Value::as_int), Some(1));
    assert_eq!(summary.get("files").and_then(Value::as_int), Some(4));
    assert_eq!(summary.get("exit").and_then(Value::as_int), Some(1));

    // Standard input is a record on its own.
    let out = aegis().args(["verify", "-"]).arg(&golden).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
}

/// A session whose clock went back is still Verified: the step is reported, by line, in
/// text and JSON, and never decides the verdict (the chain orders lines by seq).
#[test]
fn a_time_that_goes_back_is_reported_not_judged() {
    let file = vectors().join("verified/time_backwards.aarl");
    let out = aegis().arg("verify").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains(
        "time_backwards session 0 seq 3 time 2026-12-03T23:59:59.999999Z after 2026-12-04T00:00:00.003000Z\n"
    ));
    let timed = aegis()
        .arg("verify")
        .arg(vectors().join("verified/timed.aarl"))
        .output()
        .unwrap();
    assert!(!stdout(&timed).contains("time_backwards"));
}

/// From a review of the many-file mode: a file's name is anyone's choice. On stderr it
/// is escaped as reports are; in `--json` a name that is not UTF-8 carries its bytes
/// too, so two names that read the same lossily stay apart.
#[test]
fn file_names_in_many_file_reports_are_escaped_and_told_apart() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tempfile::tempdir().unwrap();
    let golden = std::fs::read(vectors().join("golden/golden.aarl")).unwrap();
    for raw in [&b"r\xff.aarl"[..], &b"r\xfe.aarl"[..]] {
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(raw)), &golden).unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("x\u{1b}[2Kall good")).unwrap();
    let out = aegis()
        .args(["verify", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains('\u{1b}') && err.contains("x\\u{1b}[2Kall good"),
        "{err}"
    );
    let hexes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| match json::parse(l.as_bytes()).ok()? {
            Value::Object(o) => o.get("file_hex")?.as_str().map(str::to_owned),
            _ => None,
        })
        .collect();
    assert_eq!(hexes.len(), 2, "{}", String::from_utf8_lossy(&out.stdout));
    assert_ne!(hexes[0], hexes[1]);
}

/// Regression (caught by the store tests, issue 34): `--json` cut each file's name at 64
/// characters, as a quote for display does, so the files of an export
/// (`<host>-<opened>-<nonce>.aarl`, told apart by their last characters) could not be
/// matched to their reports.
#[test]
fn json_names_each_file_of_many_whole() {
    let dir = tempfile::tempdir().unwrap();
    let golden = std::fs::read(vectors().join("golden/golden.aarl")).unwrap();
    let long = "h".repeat(80);
    let files: Vec<PathBuf> = ["1", "2"]
        .iter()
        .map(|n| dir.path().join(format!("{long}-{n}.aarl")))
        .collect();
    for file in &files {
        std::fs::write(file, &golden).unwrap();
    }
    let out = aegis()
        .args(["verify", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let named: Vec<PathBuf> = stdout(&out)
        .lines()
        .filter_map(|l| match json::parse(l.as_bytes()).ok()? {
            Value::Object(o) => o.get("file")?.as_str().map(PathBuf::from),
            _ => None,
        })
        .collect();
    assert_eq!(named, files, "{}", stdout(&out));
}

/// `--approver-key` takes what `aegis key show` prints for the approver's key, or the
/// key or key id in hex: each pins the approver; a file that cannot be read or names no
/// key is exit 2, never an unpinned walk.
#[test]
fn approver_key_pins_by_key_show_output_or_hex() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let record = vectors().join("verified/approval.aarl");
    let published = aegis_record::key::PUBLISHED_TEST_KEYS
        .iter()
        .find(|k| k.name == "approver vector key")
        .unwrap();
    let approver = aegis_record::SigningKey::from_seed(published.seed);
    let seed = dir.path().join("approver.seed");
    std::fs::write(&seed, aegis_record::digest::encode_hex(&published.seed)).unwrap();
    std::fs::set_permissions(&seed, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shown = aegis().args(["key", "show"]).arg(&seed).output().unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    let public = dir.path().join("approver.pub");
    std::fs::write(&public, &shown.stdout).unwrap();
    let pinned_line = format!("approver key_id {} decisions 1 (pinned)", approver.key_id());
    for pin in [
        public.to_str().unwrap().to_owned(),
        approver.public_key().to_hex(),
        approver.key_id().to_hex(),
    ] {
        let out = aegis()
            .args(["verify", "--approver-key", &pin])
            .arg(&record)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{pin}: {}", stdout(&out));
        assert!(
            stdout(&out).lines().any(|l| l.starts_with(&pinned_line)),
            "{}",
            stdout(&out)
        );
    }
    let unpinned = aegis().arg("verify").arg(&record).output().unwrap();
    assert!(stdout(&unpinned).contains("decisions 1 (unpinned)"));

    // Another approver's key file: the decision is not Verified.
    let other = dir.path().join("other.pub");
    std::fs::write(
        &other,
        format!(
            "# someone else\npublic_key {}\n",
            "fd1724385aa0c75b64fb78cd602fa1d991fdebf76b13c58ed702eac835e9f618"
        ),
    )
    .unwrap();
    let out = aegis()
        .args(["verify", "--approver-key"])
        .arg(&other)
        .arg(&record)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stdout(&out)
            .starts_with("Indeterminate — untrusted approver at (session 0, seq 3), line 4")
    );

    let empty = dir.path().join("empty.pub");
    std::fs::write(&empty, "# nothing\n").unwrap();
    for pin in [empty.as_path(), Path::new("/nonexistent/approver.pub")] {
        let out = aegis()
            .args(["verify", "--approver-key"])
            .arg(pin)
            .arg(&record)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{pin:?}");
        assert!(out.stdout.is_empty());
        assert!(stderr(&out).contains("--approver-key"), "{}", stderr(&out));
    }
}
