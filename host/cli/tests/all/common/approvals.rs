//! What the approvals tests share: a person's key, the record's lines by type, a member
//! by path, the one request a parked call filed, a line a peer wrote, and the one call a
//! client reported.

use super::{field, object, text};
use aegis_record::json::{Object, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A person's key: its seed file and a file of its `public_key`/`key_id` lines (what
/// `aegis verify --approver-key` reads).
pub fn approver(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(name);
    let out = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&public, &out.stdout).unwrap();
    (key, public)
}

/// Every line of the record at `path`.
pub fn record_lines(path: &Path) -> Vec<Object> {
    std::fs::read(path)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(object)
        .collect()
}

/// The lines of `line_type` `t`.
pub fn of_type(lines: &[Object], t: &str) -> Vec<Object> {
    lines
        .iter()
        .filter(|l| field(l, "line_type") == t)
        .cloned()
        .collect()
}

/// `o[a][b]…`, if every step is there.
pub fn member<'a>(o: &'a Object, path: &[&str]) -> Option<&'a Value> {
    let mut v = o.get(path[0])?;
    for key in &path[1..] {
        v = v.as_object()?.get(key)?;
    }
    Some(v)
}

/// `o[a][b]…` as a string, if it is one.
pub fn str_at<'a>(o: &'a Object, path: &[&str]) -> Option<&'a str> {
    member(o, path).and_then(Value::as_str)
}

/// The id of the one request filed in `queue`, once it is there. Waits as a person would
/// (no time is asserted; a park never filed fails after two minutes). `ended` says why
/// waiting is over (a peer that exited first) and what it said.
pub fn one_request(queue: &Path, mut ended: impl FnMut() -> Option<String>) -> String {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(entries) = std::fs::read_dir(queue) {
            let ids: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".request").map(str::to_owned))
                .collect();
            if let [id] = ids.as_slice() {
                return id.clone();
            }
            assert!(ids.len() < 2, "more than one request: {ids:?}");
        }
        if let Some(why) = ended() {
            panic!("no request was filed: {why}");
        }
        assert!(Instant::now() < until, "no request filed in two minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first line of `file` that holds `wanted`, once one is there (a peer appending
/// what it hears, as client.py does with `AEGIS_TEST_PROGRESS`). Waits on the file, not
/// on a time: a line never written fails after two minutes. `ended` as for
/// [`one_request`].
pub fn a_line_with(file: &Path, wanted: &str, mut ended: impl FnMut() -> Option<String>) -> String {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(read) = std::fs::read_to_string(file)
            && let Some(line) = read.lines().find(|l| l.contains(wanted))
        {
            return line.to_owned();
        }
        if let Some(why) = ended() {
            panic!("no line with {wanted:?} in {}: {why}", file.display());
        }
        assert!(
            Instant::now() < until,
            "no line with {wanted:?} in {} in two minutes",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The one call client.py reported in its `got.json`.
pub fn one_call(got_json: &Path) -> Object {
    let got = object(&std::fs::read(got_json).unwrap());
    match got.get("calls") {
        Some(Value::Array(calls)) if calls.len() == 1 => calls[0].as_object().unwrap().clone(),
        other => panic!("calls: {other:?}"),
    }
}

/// Asserts that a command (`aegis verify`, `aegis approvals …`) exited `code`, showing
/// what it said otherwise.
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The record's one `decision` line, asserted to be `via` the approver kind given.
pub fn one_decision(lines: &[Object], via: &str) -> Object {
    let decisions = of_type(lines, "decision");
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(
        str_at(&decisions[0], &["approver", "via"]),
        Some(via),
        "{decisions:?}"
    );
    decisions[0].clone()
}
