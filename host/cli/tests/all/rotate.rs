//! `aegis rotate` against the real binary: the hand-off it writes lets later sessions
//! under the new key verify as continuing the rotation, and pinned to the old key alone,
//! through the hand-off; a key change without one is named; what it refuses, it does not
//! write.

use crate::common::{guest, object, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn aegis() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aegis"));
    c.env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("aegis-run-tests-cache"),
    );
    c.stdin(Stdio::null());
    c
}

fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let path = dir.join(name);
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let key_id = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("key_id ").map(str::to_owned))
        .unwrap();
    (path, key_id)
}

/// One echo call recorded in `record` under `key`.
fn run(record: &Path, key: &Path) {
    let out = aegis()
        .arg("run")
        .arg("--component")
        .arg(guest("echo"))
        .args(["--id", "echo", "--input", "hi", "--audit"])
        .arg(record)
        .arg("--signing-key")
        .arg(key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

fn rotate(record: &Path, old: &Path, next: &Path) -> Output {
    aegis()
        .args(["rotate", "--no-wait", "--audit"])
        .arg(record)
        .arg("--signing-key")
        .arg(old)
        .arg("--next-key")
        .arg(next)
        .output()
        .unwrap()
}

fn verify(record: &Path, args: &[&str]) -> Output {
    aegis()
        .arg("verify")
        .args(args)
        .arg(record)
        .output()
        .unwrap()
}

#[test]
fn rotate_then_run_under_the_new_key_verifies_naming_the_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (old, old_id) = keygen(dir.path(), "old.key");
    let (new, new_id) = keygen(dir.path(), "new.key");
    let record = dir.path().join("r.aarl");
    run(&record, &old);
    let out = rotate(&record, &old, &new);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("key_handoff from {old_id} to {new_id}\n")
    );
    run(&record, &new);

    let out = verify(&record, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(report.starts_with("Verified (unpinned)\n"), "{report}");
    assert!(
        report.contains(&format!(
            "key_handoff session 1 seq 1 from {old_id} to {new_id}\n"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "key_continues session 2 from {old_id} to {new_id} handed off at session 1 seq 1\n"
        )),
        "{report}"
    );

    // Pinned to the old key only: the new one is trusted through the hand-off.
    let out = verify(&record, &["--key", &old_id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(report.starts_with("Verified (pinned)\n"), "{report}");
    assert!(
        report.contains(&format!(
            "trusted_through_handoff {new_id} from {old_id} at session 1 seq 1\n"
        )),
        "{report}"
    );
    let out = verify(&record, &["--json", "--key", &old_id]);
    let json = object(text(&out.stdout).trim_end().as_bytes());
    assert!(json.get("key_changes").is_some() && json.get("trusted_through_handoff").is_some());

    // Pinned to the new key only: nothing vouches for the sessions before it.
    let out = verify(&record, &["--key", &new_id]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).starts_with("Tampered — untrusted key at (session 0, seq 0), line 1:"),
        "{}",
        text(&out.stdout)
    );
}

/// Two runs under different keys with no hand-off between them: Verified, as before,
/// and the change named as unannounced; a key change inside a session is Tampered.
#[test]
fn a_key_change_without_a_handoff_is_named_unannounced() {
    let dir = tempfile::tempdir().unwrap();
    let (old, old_id) = keygen(dir.path(), "old.key");
    let (new, new_id) = keygen(dir.path(), "new.key");
    let record = dir.path().join("r.aarl");
    run(&record, &old);
    run(&record, &new);
    let out = verify(&record, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(
        report.contains(&format!(
            "key_unannounced session 1 from {old_id} to {new_id} (not the key the latest key_handoff names)\n"
        )),
        "{report}"
    );
    assert!(!report.contains("trusted_through_handoff"), "{report}");
    // Pinned to the old key, the unannounced key is not trusted.
    let out = verify(&record, &["--key", &old_id]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));

    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors");
    let out = verify(&vectors.join("tampered/key_rotated_mid_session.aarl"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with("Tampered — key mismatch"));
}

/// A rotation to the same key, or to a key whose seed is published, is refused before
/// anything is written.
#[test]
fn rotate_refuses_the_same_key_and_published_keys_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (old, _) = keygen(dir.path(), "old.key");
    let record = dir.path().join("r.aarl");
    run(&record, &old);
    let before = std::fs::read(&record).unwrap();

    let out = rotate(&record, &old, &old);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("a rotation needs a different key"));

    let published = dir.path().join("published.key");
    let seed = aegis_record::key::PUBLISHED_TEST_KEYS[1].seed;
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&published, hex).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&published, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = rotate(&record, &old, &published);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("published"),
        "{}",
        text(&out.stderr)
    );

    assert_eq!(std::fs::read(&record).unwrap(), before);
}
