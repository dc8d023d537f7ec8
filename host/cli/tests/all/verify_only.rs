//! The auditor's `aegis-verify` and the full `aegis verify` agree byte for byte: the
//! same stdout, the same stderr and the same exit code on every committed vector (text
//! and JSON, pinned as the manifest says and by key id), and on unreadable input. Usage
//! errors agree on the exit code (clap names each program in its message).

use aegis_record::json::{self, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn full(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
        .arg("verify")
        .args(args)
        .output()
        .unwrap()
}

fn verify_only(bin: &Path, args: &[String]) -> Output {
    Command::new(bin).args(args).output().unwrap()
}

fn same(bin: &Path, args: &[String]) {
    let (a, b) = (full(args), verify_only(bin, args));
    assert_eq!(a.status.code(), b.status.code(), "{args:?}");
    assert_eq!(
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&b.stdout),
        "{args:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr),
        "{args:?}"
    );
}

#[test]
fn aegis_verify_and_the_verify_only_build_print_the_same_bytes() {
    let bin = aegis_test_support::verify_only_binary();
    let manifest = std::fs::read_to_string(vectors().join("manifest.jsonl")).unwrap();
    let mut compared = 0;
    for line in manifest.lines() {
        let Value::Object(entry) = json::parse(line.as_bytes()).unwrap() else {
            panic!("manifest line is an object");
        };
        let file = vectors().join(entry.get("file").unwrap().as_str().unwrap());
        let mut args: Vec<String> = entry
            .get("args")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        args.push(file.to_str().unwrap().to_owned());
        same(&bin, &args);
        let mut json = vec!["--json".to_owned()];
        json.extend(args.iter().cloned());
        same(&bin, &json);
        compared += 1;
    }
    assert!(compared >= 30, "{compared} vectors");

    let golden = vectors().join("golden/golden.aarl");
    let golden = golden.to_str().unwrap();
    let vector_key_id = "5990c104283522fc80d1415329ab1edbd946db99db120e60eb530d4406a73ff3";
    let verified = vectors().join("verified");
    let verified = verified.to_str().unwrap();
    for args in [
        vec!["--key", vector_key_id, golden],
        vec!["/nonexistent/record.aarl"],
        vec!["--trust-store", "/nonexistent/store", golden],
        vec!["--trust-store", golden, golden],
        // Many files and directories: the same reports, summary and exit code.
        vec![golden, golden],
        vec![verified, "--json", golden],
    ] {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        same(&bin, &args);
    }
    for args in [vec![], vec!["--key", "ABC", golden], vec!["--nope", golden]] {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let (a, b) = (full(&args), verify_only(&bin, &args));
        assert_eq!(a.status.code(), Some(1), "{args:?}");
        assert_eq!(b.status.code(), Some(1), "{args:?}");
        assert!(a.stdout.is_empty() && b.stdout.is_empty());
    }
}

/// `verify -` reads the record from stdin: both binaries print, for every committed
/// vector, what they print for the file itself (the report names no path).
#[test]
fn verify_dash_reads_stdin_in_both_binaries_with_the_same_report() {
    let bin = aegis_test_support::verify_only_binary();
    let manifest = std::fs::read_to_string(vectors().join("manifest.jsonl")).unwrap();
    let piped = |program: &Path, first: Option<&str>, args: &[String], file: &Path| {
        Command::new(program)
            .args(first)
            .args(args)
            .arg("-")
            .stdin(std::fs::File::open(file).unwrap())
            .output()
            .unwrap()
    };
    let aegis = Path::new(env!("CARGO_BIN_EXE_aegis"));
    let mut compared = 0;
    for line in manifest.lines() {
        let Value::Object(entry) = json::parse(line.as_bytes()).unwrap() else {
            panic!("manifest line is an object");
        };
        let file = vectors().join(entry.get("file").unwrap().as_str().unwrap());
        let args: Vec<String> = entry
            .get("args")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        let mut by_path = args.clone();
        by_path.push(file.to_str().unwrap().to_owned());
        let expected = full(&by_path);
        for out in [
            piped(aegis, Some("verify"), &args, &file),
            piped(&bin, None, &args, &file),
        ] {
            assert_eq!(out.status.code(), expected.status.code(), "{file:?}");
            assert_eq!(out.stdout, expected.stdout, "{file:?}");
            assert_eq!(out.stderr, expected.stderr, "{file:?}");
        }
        compared += 1;
    }
    assert!(compared >= 30, "{compared} vectors");
}
