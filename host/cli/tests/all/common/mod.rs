//! Reading JSON lines in the wrap tests: what the client received and what the record
//! holds.

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
