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
use std::path::{Path, PathBuf};

/// `verify`'s exit codes (spec/SPEC.md §9.1).
pub mod exit {
    /// Verified.
    pub const VERIFIED: u8 = 0;
    /// Tampered, or a usage error.
    pub const TAMPERED_OR_USAGE: u8 = 1;
    /// The record, the trust store or an approver key file could not be read, or the
    /// report not written.
    pub const UNREADABLE: u8 = 2;
    /// Indeterminate.
    pub const INDETERMINATE: u8 = 3;
}

/// The EXIT STATUS section of `verify`'s help, in both binaries.
pub const EXIT_STATUS: &str = "  0  Verified
  1  Tampered, or a usage error
  2  the record, the trust store or an approver key file could not be read, or the
     report not written
  3  Indeterminate";

/// The EXAMPLES and EXIT STATUS sections of `verify`'s help, for the command
/// `binary` (`aegis verify` or `aegis-verify`).
pub fn after_help(binary: &str) -> String {
    format!(
        "EXAMPLES:
  {binary} aegis-audit.aarl
  {binary} --key KEY_ID aegis-audit.aarl
  {binary} --trust-store keys.txt --json aegis-audit.aarl
  {binary} --key KEY_ID records/ old.aarl
  {binary} --approver-key APPROVER_KEY_ID aegis-audit.aarl
  cat aegis-audit.aarl | {binary} -

Several files or a directory: a report each, then a summary; the exit code is the
worst (Tampered, then unreadable, then Indeterminate).

Key changes are listed, never a verdict by themselves: key_handoff (a line the old key
signed naming the next, as `aegis rotate` writes), key_continues (a later session under
the key handed to) and key_unannounced (a session that opened with a new key no hand-off
named). Pinned, a key that a trusted key handed the record to earlier in the file is
accepted and listed as trusted_through_handoff; a line the old key signs after its
hand-off is Tampered.

Decisions on parked calls are checked: an approver's signature that does not verify
(bad_approver), a call run under a denied, used or other tool's approval
(approval_misused), or an approval wider than its park (approval_widened) is Tampered.
Without --approver-key the report lists who decided (approver lines, unpinned); with it,
a decision no pinned approver's key signed is Indeterminate (untrusted_approver).

EXIT STATUS:
{EXIT_STATUS}"
    )
}

/// `verify`'s arguments.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// A key you accept, as its public key or its key id (64 lowercase hex
    /// characters, as keygen, `key show` and verify print them); repeatable. Any
    /// --key or --trust-store makes the walk pinned. A key a pinned key handed the
    /// record to (key_handoff) is accepted too.
    #[arg(long = "key", value_name = "HEX", value_parser = parse_trust_anchor)]
    pub keys: Vec<TrustAnchor>,
    /// A file of accepted keys, one public key or key id per line; blank and `#`
    /// lines skipped.
    #[arg(long, value_name = "PATH")]
    pub trust_store: Option<PathBuf>,
    /// An approver you accept: their public key or key id (64 lowercase hex), or a
    /// file holding them (what `aegis key show` prints, or one key a line as in a
    /// trust store); repeatable. Pinned, a decision no pinned approver's key signed
    /// is Indeterminate (untrusted_approver); unpinned, the report lists who decided.
    #[arg(long = "approver-key", value_name = "KEY")]
    pub approver_keys: Vec<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// The record file (any name), or `-` for standard input. Several files, or a
    /// directory (every file beneath it, in name order, links named but never
    /// followed), get one report each and a summary; the exit code is the worst.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// How far a directory given to `verify` is walked: an archive of a fleet's records over
/// years is tens of thousands of files; a tree past these is refused, not checked in part.
pub const DIRECTORY_BOUND: aegis_files::WalkBound = aegis_files::WalkBound {
    entries: 1 << 20,
    depth: 32,
};

/// The most of a trust store read: one key a line, 65 bytes with its newline, so 1 MiB is
/// some 16 000 keys (an organisation pins a handful), with room for comments.
pub const MAX_TRUST_STORE: aegis_files::Cap = aegis_files::Cap::new(1 << 20, "a trust store");

fn parse_trust_anchor(s: &str) -> Result<TrustAnchor, String> {
    TrustAnchor::from_hex(s).map_err(|e| e.to_string())
}

/// One `error: …` line on stderr; a closed or failing stderr is ignored, never a panic.
fn error(message: impl std::fmt::Display) {
    // Messages name files, and a file's name is anyone's choice: escaped, as reports are.
    let message = aegis_record::text::escape(&message.to_string()).into_owned();
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

/// The most of an approver key file read: a few keys, with room for comments.
pub const MAX_APPROVER_FILE: aegis_files::Cap =
    aegis_files::Cap::new(1 << 20, "an approver key file");

/// Reads an approver key file: each line blank, a `#` comment, `public_key <hex>` or
/// `key_id <hex>` (as `aegis key show` and keygen print them), or a bare key or key id
/// (as in a trust store). A file with no key pins nothing, never everything.
fn parse_approver_file(text: &str) -> Result<Vec<TrustAnchor>, String> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let hex = match line.split_once(' ') {
            Some(("public_key" | "key_id", rest)) => rest.trim(),
            Some(_) => line,
            None => line,
        };
        let key = TrustAnchor::from_hex(hex).map_err(|e| {
            format!(
                "line {}: expected a public key or key id of 64 lowercase hex characters: {e}",
                i + 1
            )
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("holds no public key or key id".into());
    }
    Ok(keys)
}

/// The approvers `args` pin: `None` (decisions not judged by approver) without
/// `--approver-key`; otherwise each value read as 64 lowercase hex (a public key or key
/// id), or else as a file of them.
///
/// # Errors
/// `<file>: <cause>`, one line: a file could not be read or holds no key.
pub fn approver_slice(args: &VerifyArgs) -> Result<Option<Vec<TrustAnchor>>, String> {
    if args.approver_keys.is_empty() {
        return Ok(None);
    }
    approver_anchors(&args.approver_keys)
        .map(Some)
        .map_err(|e| format!("--approver-key {e}"))
}

/// The approver keys `given` names: each read as 64 lowercase hex (a public key or key
/// id), or else as a file of them (`public_key <hex>` lines, as keygen prints them).
///
/// # Errors
/// `<file>: <cause>`, one line: a file could not be read or holds no key.
pub fn approver_anchors(given: &[PathBuf]) -> Result<Vec<TrustAnchor>, String> {
    let mut approvers = Vec::new();
    for given in given {
        if let Some(key) = given.to_str().and_then(|s| TrustAnchor::from_hex(s).ok()) {
            approvers.push(key);
            continue;
        }
        let text =
            aegis_files::read_to_string(given, MAX_APPROVER_FILE).map_err(|e| e.to_string())?;
        let found = parse_approver_file(&text).map_err(|e| format!("{}: {e}", given.display()))?;
        approvers.extend(found);
    }
    Ok(approvers)
}

/// The walk's options `args` name: the trust slice and the approvers.
///
/// # Errors
/// As [`trust_slice`] and [`approver_slice`].
pub fn options(args: &VerifyArgs) -> Result<Options, String> {
    Ok(Options {
        trust: trust_slice(args)?,
        approvers: approver_slice(args)?,
        threads: 0,
    })
}

/// Checks the records `args` names and prints the reports; returns the exit code.
pub fn run(args: &VerifyArgs) -> u8 {
    let options = match options(args) {
        Ok(options) => options,
        Err(e) => {
            error(e);
            return exit::UNREADABLE;
        }
    };
    match args.paths.as_slice() {
        [path] if path.as_os_str() == "-" || !is_directory(path) => one(path, args, &options),
        paths => many(paths, args, &options),
    }
}

/// Whether `path` is a directory itself (a link to one is not: it is named, not followed).
fn is_directory(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// One record, reported as `verify` always has: the report alone on stdout.
fn one(path: &Path, args: &VerifyArgs, options: &Options) -> u8 {
    // `-` is standard input (a file named `-` is `./-`), read as a stream like a file.
    let report = if path.as_os_str() == "-" {
        verify(std::io::stdin().lock(), options)
    } else {
        // Never through a final link, never blocking on a FIFO, never a device: the
        // walk itself is bounded in memory whatever the file's length.
        match aegis_files::open(path) {
            Ok(file) => verify(file, options),
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
    finish(&bytes, code_of(report.verdict()))
}

fn code_of(verdict: &Verdict) -> u8 {
    match verdict {
        Verdict::Verified(_) => exit::VERIFIED,
        Verdict::Tampered(_) => exit::TAMPERED_OR_USAGE,
        Verdict::Indeterminate(_) => exit::INDETERMINATE,
    }
}

/// Writes the report; a stdout that fails (but for a closed pipe: `aegis verify f |
/// head -1`) turns a Verified exit into [`exit::UNREADABLE`].
fn finish(bytes: &[u8], code: u8) -> u8 {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe && code == exit::VERIFIED => {
            error(format_args!("standard output could not be written: {e}"));
            exit::UNREADABLE
        }
        _ => code,
    }
}

/// Writes part of a many-file report: `Err(code)` to stop with when stdout failed (a
/// closed pipe is not a failure, as for [`finish`]).
fn emit(bytes: &[u8], worst: u8) -> Result<(), u8> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(worst),
        Err(e) => {
            error(format_args!("standard output could not be written: {e}"));
            Err(if worst == exit::VERIFIED {
                exit::UNREADABLE
            } else {
                worst
            })
        }
        Ok(()) => Ok(()),
    }
}

/// How bad an exit code is, for the worst of many: Tampered, then a file that could
/// not be read (nothing was checked), then Indeterminate, then Verified.
fn severity(code: u8) -> u8 {
    match code {
        exit::TAMPERED_OR_USAGE => 3,
        exit::UNREADABLE => 2,
        exit::INDETERMINATE => 1,
        _ => 0,
    }
}

/// What one of many paths came to.
enum Checked {
    Report(Box<aegis_record::verify::Report>),
    /// Not read: why, in one line without the path.
    Unreadable(String),
}

/// Several records, or the files beneath directories: each file's report after a line
/// naming it, then a summary; with `--json`, one object a line (`file` and `report`, or
/// `file` and `unreadable`) and a last `summary` object. Files are checked and reported
/// one at a time, in order, so memory stays flat in their number and size.
fn many(paths: &[PathBuf], args: &VerifyArgs, options: &Options) -> u8 {
    if paths.iter().any(|p| p.as_os_str() == "-") {
        error("- (standard input) is a record on its own: give it as the only path");
        return exit::TAMPERED_OR_USAGE;
    }
    // Verified, Indeterminate, Tampered, unreadable.
    let mut counts = [0usize; 4];
    let mut worst = exit::VERIFIED;
    for given in paths {
        let items: Vec<Item> = if is_directory(given) {
            match aegis_files::walk(given, DIRECTORY_BOUND) {
                Ok(found) => found.into_iter().map(Item::from).collect(),
                // A tree that could not be listed whole is reported, not checked in part.
                Err(e) => vec![Item::Refused(given.clone(), e.into_io().to_string())],
            }
        } else {
            vec![Item::File(given.clone())]
        };
        for item in items {
            let (path, checked) = check(item, options);
            let code = match &checked {
                Checked::Report(r) => code_of(r.verdict()),
                Checked::Unreadable(why) => {
                    error(format_args!("{}: {why}", path.display()));
                    exit::UNREADABLE
                }
            };
            let slot = match code {
                exit::VERIFIED => 0,
                exit::INDETERMINATE => 1,
                exit::TAMPERED_OR_USAGE => 2,
                _ => 3,
            };
            counts[slot] += 1;
            if severity(code) > severity(worst) {
                worst = code;
            }
            if let Err(code) = emit(&entry(&path, &checked, args.json), worst) {
                return code;
            }
        }
    }
    let [verified, indeterminate, tampered, unreadable] = counts;
    let files: usize = counts.iter().sum();
    if files == 0 {
        // Nothing was checked: never Verified, as an empty record is not.
        error("no files to verify beneath the directories given");
        worst = exit::INDETERMINATE;
    }
    let summary = if args.json {
        format!(
            "{{\"summary\":{{\"exit\":{worst},\"files\":{files},\"indeterminate\":{indeterminate},\"tampered\":{tampered},\"unreadable\":{unreadable},\"verified\":{verified}}}}}\n"
        )
    } else {
        format!(
            "summary: {files} files: {verified} Verified, {indeterminate} Indeterminate, {tampered} Tampered, {unreadable} unreadable\n"
        )
    };
    emit(summary.as_bytes(), worst).map_or_else(|code| code, |()| worst)
}

/// One path of many: a file to read, or an entry refused (with why, without the path).
enum Item {
    File(PathBuf),
    Refused(PathBuf, String),
}

impl From<aegis_files::Found> for Item {
    fn from(found: aegis_files::Found) -> Item {
        match found {
            aegis_files::Found::File(path) => Item::File(path),
            aegis_files::Found::NotAFile { path, found } => Item::Refused(
                path,
                format!("{found}, not a regular file; not followed or opened"),
            ),
        }
    }
}

/// Reads and verifies one file of many.
fn check(item: Item, options: &Options) -> (PathBuf, Checked) {
    match item {
        Item::Refused(path, why) => (path, Checked::Unreadable(why)),
        Item::File(path) => {
            let checked = match aegis_files::open(&path) {
                Ok(file) => match verify(file, options) {
                    Ok(report) => Checked::Report(Box::new(report)),
                    Err(e) => Checked::Unreadable(e.to_string()),
                },
                Err(e) => Checked::Unreadable(e.into_io().to_string()),
            };
            (path, checked)
        }
    }
}

/// One file's part of a many-file report.
fn entry(path: &Path, checked: &Checked, json: bool) -> Vec<u8> {
    if json {
        // The path whole, never cut as a display quote is: it is what a reader matches
        // the report to (an export's names differ only in their last characters).
        let mut out = b"{\"file\":".to_vec();
        aegis_record::json::write_string(&path.to_string_lossy(), &mut out);
        // A name that is not UTF-8 is shown lossily above; its bytes, in hex, tell two
        // such files apart.
        if path.to_str().is_none() {
            out.extend_from_slice(b",\"file_hex\":");
            let hex = aegis_record::digest::encode_hex(path.as_os_str().as_encoded_bytes());
            aegis_record::json::write_string(&hex, &mut out);
        }
        match checked {
            Checked::Report(r) => {
                out.extend_from_slice(b",\"report\":");
                out.extend(r.to_json());
            }
            Checked::Unreadable(why) => {
                out.extend_from_slice(b",\"unreadable\":");
                out.extend(aegis_record::json::quote(why).into_bytes());
            }
        }
        out.extend_from_slice(b"}\n");
        out
    } else {
        let name = aegis_record::text::escape(&path.to_string_lossy()).to_string();
        let body = match checked {
            Checked::Report(r) => r.to_text(),
            Checked::Unreadable(why) => {
                format!("unreadable: {}\n", aegis_record::text::escape(why))
            }
        };
        format!("== {name}\n{body}\n").into_bytes()
    }
}
