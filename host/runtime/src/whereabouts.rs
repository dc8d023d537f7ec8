//! Where a session ran and what it fronted, for the open line's provenance: the host
//! (`host`) and the front end (`front`) — `run`, `wrap` with the server it started,
//! `gateway` with its manifest (spec/SPEC.md, "Provenance").
//!
//! # Guarantees
//! - The machine id is recorded as its SHA-256, never as itself: it tells two hosts
//!   apart in an auditor's hands without publishing an identifier other software keys on.
//! - Every string is bounded as the record bounds text ([`aegis_record::bound::text`]),
//!   and argv to [`MAX_ARGS`] entries, so no front makes the open line too long to write.
//!
//! # Non-guarantees
//! - These are the host's own statements. The hostname is whatever the host was told;
//!   the executable's digest is of the file the command resolved to when the session
//!   opened, and a file replaced between that read and the `exec` (or a script the
//!   interpreter then reads) is not covered.

use aegis_record::json::{Object, Value};
use sha2::{Digest as _, Sha256};
use std::ffi::OsString;
use std::io::Read as _;
use std::path::Path;

/// The most argv entries recorded; the rest are counted (`argv_elided`).
pub const MAX_ARGS: usize = 64;

/// A short file the host reads about itself (`/etc/machine-id`, the hostname).
const SMALL: aegis_files::Cap = aegis_files::Cap::new(4096, "a host identity file");

/// `{"hostname": …, "machine_id_sha256": …}`, each member left out when it cannot be
/// read (a container without a machine id).
pub fn this_host() -> Object {
    let mut host = Object::new();
    let read = |path: &str| {
        aegis_files::read_to_string(Path::new(path), SMALL)
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty())
    };
    let hostname = read("/proc/sys/kernel/hostname").or_else(|| read("/etc/hostname"));
    host.insert_opt("hostname", hostname.as_deref().map(text));
    let machine_id = read("/etc/machine-id").or_else(|| read("/var/lib/dbus/machine-id"));
    host.insert_opt(
        "machine_id_sha256",
        machine_id.map(|id| aegis_record::digest::encode_hex(&Sha256::digest(id.as_bytes()))),
    );
    host
}

/// `{"command": command}`: a front end with nothing more to say (`run`).
pub fn front(command: &str) -> Object {
    let mut front = Object::new();
    front.insert("command", command);
    front
}

/// `aegis wrap`'s front: the server's argv as given, and the executable it resolved to
/// (`PATH` searched as `exec` does) with its SHA-256, or why it could not be read.
pub fn wrap_front(argv: &[OsString]) -> Object {
    let mut server = Object::new();
    let shown: Vec<Value> = argv
        .iter()
        .take(MAX_ARGS)
        .map(|a| Value::String(text(&a.to_string_lossy())))
        .collect();
    server.insert("argv", Value::Array(shown));
    if argv.len() > MAX_ARGS {
        server.insert(
            "argv_elided",
            aegis_record::json::SafeInt::new((argv.len() - MAX_ARGS) as u64).unwrap_or_default(),
        );
    }
    if let Some(program) = argv.first() {
        match crate::confine::resolve_program(program) {
            Ok(path) => {
                server.insert("executable", text(&path.to_string_lossy()));
                match file_sha256(&path) {
                    Ok(digest) => server.insert("executable_sha256", digest),
                    Err(e) => server.insert("executable_unread", text(&e)),
                };
            }
            Err(e) => {
                server.insert("executable_unread", text(&e.to_string()));
            }
        }
    }
    let mut front = front("wrap");
    front.insert("server", server);
    front
}

/// `aegis gateway`'s front: the manifest's path and the SHA-256 of the text its tools
/// were read from.
pub fn gateway_front(manifest: &Path, sha256: &[u8; 32]) -> Object {
    let mut front = front("gateway");
    front.insert("manifest", text(&manifest.to_string_lossy()));
    front.insert("manifest_sha256", aegis_record::digest::encode_hex(sha256));
    front
}

fn text(s: &str) -> String {
    aegis_record::bound::text(s).into_owned()
}

/// SHA-256 of a file read as a stream (executables are large), never through a final
/// link's target being a FIFO or a device.
fn file_sha256(path: &Path) -> Result<String, String> {
    // The program's own path may be a link (`/usr/bin/python3`): resolved first, then
    // opened as a regular file.
    let real = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    let mut file = aegis_files::open(&real).map_err(|e| e.to_string())?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(aegis_record::digest::encode_hex(&hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_servers_executable_is_named_and_digested() {
        let front = wrap_front(&["sh".into(), "-c".into(), "true".into()]);
        let server = front.get("server").and_then(Value::as_object).unwrap();
        let executable = server.get("executable").and_then(Value::as_str).unwrap();
        assert!(executable.ends_with("/sh"), "{executable}");
        let real = std::fs::canonicalize(executable).unwrap();
        let expected =
            aegis_record::digest::encode_hex(&Sha256::digest(std::fs::read(real).unwrap()));
        assert_eq!(
            server.get("executable_sha256").and_then(Value::as_str),
            Some(expected.as_str())
        );
        let missing = wrap_front(&["no-such-program-aegis".into()]);
        let server = missing.get("server").and_then(Value::as_object).unwrap();
        assert!(server.get("executable_unread").is_some());
        let many: Vec<OsString> = (0..MAX_ARGS + 3).map(|i| i.to_string().into()).collect();
        let server = wrap_front(&many);
        let server = server.get("server").and_then(Value::as_object).unwrap();
        assert_eq!(
            server.get("argv").and_then(Value::as_array).unwrap().len(),
            MAX_ARGS
        );
        assert_eq!(server.get("argv_elided").and_then(Value::as_int), Some(3));
    }

    #[test]
    fn the_machine_id_is_recorded_only_as_a_digest() {
        let host = this_host();
        if let Ok(id) = std::fs::read_to_string("/etc/machine-id") {
            let digest = host
                .get("machine_id_sha256")
                .and_then(Value::as_str)
                .unwrap();
            assert_eq!(digest.len(), 64);
            assert!(!digest.contains(id.trim()));
        }
    }
}
