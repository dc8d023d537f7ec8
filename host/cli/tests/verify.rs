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

/// Every manifest entry: first stdout line, in_flight lines and exit code as published.
#[test]
fn every_committed_vector_gets_its_published_verdict() {
    let manifest = std::fs::read_to_string(vectors().join("manifest.jsonl")).unwrap();
    let mut checked = 0;
    for line in manifest.lines() {
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
        assert!(stderr(&out).is_empty(), "{file}: {}", stderr(&out));
        checked += 1;
    }
    assert!(checked >= 30);
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
    assert_eq!(lines[2], "coverage session 0 seq 20");
    assert_eq!(lines.len(), 3);
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
    let dir = tempfile::tempdir().unwrap();
    let out = aegis().arg("verify").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a directory is not a record");
    assert!(out.stdout.is_empty());
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

    let out = aegis()
        .args(["keygen", "--out"])
        .arg(Path::new("/nonexistent/dir/k"))
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
    assert!(!text.contains("kingdom"), "the secret never shows");
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
