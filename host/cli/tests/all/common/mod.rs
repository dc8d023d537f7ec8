//! Reading JSON lines in the wrap tests: what the client received and what the record
//! holds.

pub mod approvals;
pub mod browser;
pub mod fifo;
pub mod peers;

use aegis_record::json::{Object, Value, parse};

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn object(line: &[u8]) -> Object {
    match parse(line) {
        Ok(Value::Object(o)) => o,
        other => panic!("not an object: {other:?}: {}", text(line)),
    }
}

pub fn field(o: &Object, key: &str) -> String {
    o.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// `o[a][b]…` as a string, or "".
pub fn at(o: &Object, path: &[&str]) -> String {
    let (last, inner) = path.split_last().unwrap();
    let mut cur = o;
    for key in inner {
        match cur.get(key).and_then(Value::as_object) {
            Some(next) => cur = next,
            None => return String::new(),
        }
    }
    field(cur, last)
}

/// A committed guest component (tests/fixtures/wasm) by name.
pub fn guest(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../tests/fixtures/wasm/{name}.wasm"))
}

/// Whether the process whose id `file` holds is gone (exited and reaped, or a zombie
/// about to be), waiting up to 5 s for it.
pub fn process_gone(file: &std::path::Path) -> bool {
    let pid = std::fs::read_to_string(file).expect("the pid file");
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => return true,
            // The state follows the command's closing parenthesis.
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) if std::time::Instant::now() >= deadline => return false,
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}
