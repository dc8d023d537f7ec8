//! `aegis verify`, the command, in a crate of its own: its arguments, its report on
//! stdout, its diagnostics on stderr and its exit code. The full `aegis` binary and the
//! auditor's `aegis-verify` both run this code, so the two print the same bytes and exit
//! with the same code for the same record and keys.
//!
//! It depends on `aegis-record`, `aegis-files` and `clap` only: an auditor handed a
//! record builds it without wasmtime, the plugin host or the MCP relay.
//!
//! # Guarantees
//! - stdout carries the report and nothing else; a closed stdout pipe is not an error,
//!   any other failure to write it turns a Verified exit into 2.
//! - The exit codes are API ([`exit`]): scripts and CI gates depend on them.
//! - The record file and the trust store are opened with `aegis_files`: never through a
//!   final symbolic link, never a FIFO or a device (use `-` for a pipe); the trust store
//!   is read up to [`MAX_TRUST_STORE`], the record streamed.

use aegis_record::verify::{Options, TrustAnchor, Verdict, parse_trust_store, verify};
use std::io::Write as _;
use std::path::PathBuf;

/// `verify`'s exit codes (spec/SPEC.md §9.1).
pub mod exit {
    /// Verified.
    pub const VERIFIED: u8 = 0;
    /// Tampered, or a usage error.
    pub const TAMPERED_OR_USAGE: u8 = 1;
    /// The record or the trust store could not be read, or the report not written.
    pub const UNREADABLE: u8 = 2;
    /// Indeterminate.
    pub const INDETERMINATE: u8 = 3;
}

/// The EXIT STATUS section of `verify`'s help, in both binaries.
pub const EXIT_STATUS: &str = "  0  Verified
  1  Tampered, or a usage error
  2  the record or the trust store could not be read, or the report not written
  3  Indeterminate";

/// The EXAMPLES and EXIT STATUS sections of `verify`'s help, for the command
/// `binary` (`aegis verify` or `aegis-verify`).
pub fn after_help(binary: &str) -> String {
    format!(
        "EXAMPLES:
  {binary} aegis-audit.aarl
  {binary} --key KEY_ID aegis-audit.aarl
  {binary} --trust-store keys.txt --json aegis-audit.aarl
  cat aegis-audit.aarl | {binary} -

EXIT STATUS:
{EXIT_STATUS}"
    )
}

/// `verify`'s arguments.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// A key you accept, as its public key or its key id (64 lowercase hex
    /// characters, as keygen, `key show` and verify print them); repeatable. Any
    /// --key or --trust-store makes the walk pinned.
    #[arg(long = "key", value_name = "HEX", value_parser = parse_trust_anchor)]
    pub keys: Vec<TrustAnchor>,
    /// A file of accepted keys, one public key or key id per line; blank and `#`
    /// lines skipped.
    #[arg(long, value_name = "PATH")]
    pub trust_store: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The record file (any name), or `-` for standard input.
    pub path: PathBuf,
}

/// The most of a trust store read: one key a line, 65 bytes with its newline, so 1 MiB is
/// some 16 000 keys (an organisation pins a handful), with room for comments.
pub const MAX_TRUST_STORE: aegis_files::Cap = aegis_files::Cap::new(1 << 20, "a trust store");

fn parse_trust_anchor(s: &str) -> Result<TrustAnchor, String> {
    TrustAnchor::from_hex(s).map_err(|e| e.to_string())
}

/// One `error: …` line on stderr; a closed or failing stderr is ignored, never a panic.
fn error(message: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "error: {message}");
}

/// The trust slice `args` name: `None` (an unpinned walk) when they give neither
/// `--key` nor `--trust-store`; `Some`, possibly empty, otherwise.
///
/// # Errors
/// `<trust store>: <cause>`, one line: the trust store could not be read or parsed.
pub fn trust_slice(args: &VerifyArgs) -> Result<Option<Vec<TrustAnchor>>, String> {
    let mut trust = (!args.keys.is_empty()).then(|| args.keys.clone());
    if let Some(store) = &args.trust_store {
        let text =
            aegis_files::read_to_string(store, MAX_TRUST_STORE).map_err(|e| e.to_string())?;
        let found = parse_trust_store(&text).map_err(|e| format!("{}: {e}", store.display()))?;
        trust.get_or_insert_with(Vec::new).extend(found);
    }
    Ok(trust)
}

/// Checks the record `args` names and prints the report; returns the exit code.
pub fn run(args: &VerifyArgs) -> u8 {
    let trust = match trust_slice(args) {
        Ok(trust) => trust,
        Err(e) => {
            error(e);
            return exit::UNREADABLE;
        }
    };
    let path = &args.path;
    let options = Options { trust, threads: 0 };
    // `-` is standard input (a file named `-` is `./-`), read as a stream like a file.
    let report = if path.as_os_str() == "-" {
        verify(std::io::stdin().lock(), &options)
    } else {
        // Never through a final link, never blocking on a FIFO, never a device: the
        // walk itself is bounded in memory whatever the file's length.
        match aegis_files::open(path) {
            Ok(file) => verify(file, &options),
            Err(e) => {
                error(e);
                return exit::UNREADABLE;
            }
        }
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            let name = if path.as_os_str() == "-" {
                "standard input".into()
            } else {
                path.display().to_string()
            };
            error(format_args!("{name}: {e}"));
            return exit::UNREADABLE;
        }
    };
    let bytes = if args.json {
        let mut bytes = report.to_json();
        bytes.push(b'\n');
        bytes
    } else {
        report.to_text().into_bytes()
    };
    let code = match report.verdict() {
        Verdict::Verified(_) => exit::VERIFIED,
        Verdict::Tampered(_) => exit::TAMPERED_OR_USAGE,
        Verdict::Indeterminate(_) => exit::INDETERMINATE,
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(&bytes).and_then(|()| out.flush()) {
        // `aegis verify f | head -1` is not a failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe && code == exit::VERIFIED => {
            error(format_args!("standard output could not be written: {e}"));
            exit::UNREADABLE
        }
        _ => code,
    }
}
