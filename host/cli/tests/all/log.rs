//! `aegis log` on the committed vectors and on a record written with a hostile tool id:
//! the verdict first, one line a call, filters, escaping, and nothing from a Tampered
//! record.

use crate::common::text;
use aegis_record::chain::{Session, VecSink};
use aegis_record::json::Value;
use aegis_record::{IntentLine, RequestDigest, SigningKey};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors")
}

fn log(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
        .arg("log")
        .args(args)
        .output()
        .unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn a_record_reads_as_one_line_a_call_after_its_verdict() {
    let golden = vectors().join("golden/golden.aarl");
    let out = log(&[golden.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[0], "# Verified (unpinned)");
    // The golden session: nine calls, one per exit class; no times before 1.3.
    assert_eq!(lines.len(), 10, "{listing}");
    assert!(
        lines[1..].iter().all(|l| l.starts_with("-  s0  ")),
        "{listing}"
    );
    assert!(listing.contains("  ok  "), "{listing}");
    assert!(listing.contains("  denied  policy  "), "{listing}");
    // Filters: a tool, a verdict.
    let out = log(&[os("--tool"), os("deploy"), golden.as_os_str()]);
    let deploy = text(&out.stdout);
    assert!(
        deploy.lines().skip(1).all(|l| l.contains("  deploy  ")),
        "{deploy}"
    );
    let out = log(&[os("--verdict"), os("ok"), golden.as_os_str()]);
    assert!(
        text(&out.stdout)
            .lines()
            .skip(1)
            .all(|l| l.contains("  ok  "))
    );

    // A relay's session: the tool change is listed with the call it refused.
    let relayed = vectors().join("verified/tool_change.aarl");
    let out = log(&[relayed.as_os_str()]);
    let listing = text(&out.stdout);
    assert!(
        listing.contains("  read  tool_change  pins  -  -  changed (withheld): description"),
        "{listing}"
    );
    assert!(
        listing.contains("  read  refused  pins  -  call-rug-pull  refused by the relay (pins)"),
        "{listing}"
    );

    // Timed lines: the time is shown, and --since keeps what is at or after it.
    let timed = vectors().join("verified/timed.aarl");
    let out = log(&[timed.as_os_str()]);
    assert!(text(&out.stdout).contains("2026-12-04T00:00:00.001500Z  s0  echo  ok"));
    let out = log(&[
        os("--since"),
        os("2026-12-04T00:00:01.000000Z"),
        timed.as_os_str(),
    ]);
    assert_eq!(text(&out.stdout).lines().count(), 1, "only the header");
    let out = log(&[os("--since"), os("yesterday"), timed.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));

    // --json: the verify report, then one object a line.
    let out = log(&[os("--json"), relayed.as_os_str()]);
    let objects: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| aegis_record::json::parse(l.as_bytes()).unwrap())
        .collect();
    assert!(objects[0].as_object().unwrap().get("verify").is_some());
    let verdicts: Vec<&str> = objects[1..]
        .iter()
        .filter_map(|o| o.as_object()?.get("verdict")?.as_str())
        .collect();
    assert_eq!(verdicts, ["tool_change", "refused"]);
}

#[test]
fn a_tampered_record_lists_nothing() {
    let out = log(&[vectors().join("tampered/bad_signature.aarl").as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let listing = text(&out.stdout);
    assert!(
        listing.starts_with("# Tampered — bad signature"),
        "{listing}"
    );
    assert_eq!(listing.lines().count(), 1);
}

/// What a tool or server chose (here a tool id) reaches the terminal escaped.
#[test]
fn text_from_the_record_is_escaped() {
    let sink = VecSink::new();
    let session = Session::open(
        Arc::new(sink.clone()),
        SigningKey::generate().unwrap(),
        None,
        aegis_record::json::Object::new(),
    )
    .unwrap();
    session
        .append_unsigned(&IntentLine {
            call_id: "c1".into(),
            tool_id: "evil\u{1b}[2J\u{1b}]0;owned\u{7}".into(),
            request_digest: RequestDigest::of_request(b"{}"),
        })
        .unwrap();
    session.close().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    std::fs::write(&file, sink.contents()).unwrap();
    let out = log(&[file.as_os_str()]);
    let listing = text(&out.stdout);
    assert!(
        !listing.contains('\u{1b}') && !listing.contains('\u{7}'),
        "{listing:?}"
    );
    assert!(listing.contains("no_outcome"), "{listing}");
    assert!(listing.contains("evil\\u{1b}[2J"), "{listing}");
}
