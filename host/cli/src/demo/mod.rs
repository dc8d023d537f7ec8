//! `aegis demo`: a guided walk through a real pipeline and the evidence it leaves.
//!
//! On the embedded default profile (its volatile memory sink, read back before the
//! process ends) with a fresh key and a small policy of its own, the walk runs the
//! committed guest components (embedded in the binary) through all four stations: an
//! allowed call, refusals by policy and by capability, escape attempts, each resource
//! ceiling. Then it verifies the chain it wrote, pinned to the key, damages it three
//! ways to show each caught, and verifies the committed golden vector. Last, it puts an
//! MCP server (this binary, [`server`]) behind `aegis wrap` and plays a client whose
//! model was prompt-injected ([`mcp`]).

/// Prints a line; a closed stdout (`aegis demo | head`) is not an error.
macro_rules! say {
    ($($arg:tt)*) => {
        { let _ = crate::print(format!("{}\n", format_args!($($arg)*)).as_bytes()); }
    };
}

mod mcp;
pub mod server;

use crate::style::Painter;
use aegis_record::key::SigningKey;
use aegis_record::verify::{Options, Report, TrustAnchor, Verdict, verify};
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolKind, ToolManifest};
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_runtime::{Host, Profile};
use std::path::Path;

/// The golden session from `spec/vectors/golden/`, signed by the public vector key.
const GOLDEN: &[u8] = include_bytes!("../../../../spec/vectors/golden/golden.aarl");

/// The guests the walk runs, from `tests/fixtures/wasm` (their sources are beside them).
const GUESTS: &[(&str, &[u8])] = &[
    (
        "read-file",
        include_bytes!("../../../../tests/fixtures/wasm/read-file.wasm"),
    ),
    (
        "write-file",
        include_bytes!("../../../../tests/fixtures/wasm/write-file.wasm"),
    ),
    (
        "symlink-out",
        include_bytes!("../../../../tests/fixtures/wasm/symlink-out.wasm"),
    ),
    (
        "net",
        include_bytes!("../../../../tests/fixtures/wasm/net.wasm"),
    ),
    (
        "memory-bomb",
        include_bytes!("../../../../tests/fixtures/wasm/memory-bomb.wasm"),
    ),
    (
        "spin",
        include_bytes!("../../../../tests/fixtures/wasm/spin.wasm"),
    ),
    (
        "flood",
        include_bytes!("../../../../tests/fixtures/wasm/flood.wasm"),
    ),
];

/// The walk's policy. The default profile's own allows everything and lets capability
/// decide; this adds one rule, to show a policy refusal.
const POLICY: &str = "version: 1
default: allow
rules:
  - id: no-shell
    action: deny
    tool: shell
    reason: shell is never allowed
";

/// The widest line the walk prints, in characters: it fits a 100-column terminal.
const WIDTH: usize = 100;

/// The width of a step's `  what       tool         ` columns.
const STEP_PREFIX: usize = 26;

/// The width of a check's label column, with its indent.
const CHECK_PREFIX: usize = 2 + 30 + 1;

/// Why the walk stopped early.
enum Stop {
    /// A signal: its exit code (128 + its number).
    Signal(u8),
    /// A file of the walk could not be written, or the pipeline refused to open.
    Failed(Box<dyn std::error::Error>),
}

impl<E: Into<Box<dyn std::error::Error>>> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::Failed(e.into())
    }
}

pub fn run() -> Result<u8, crate::CliError> {
    // Ctrl-C (or SIGTERM, SIGHUP) stops the call in flight and ends the walk at the
    // next step; returning drops the temporary directory, and with it the key.
    let interrupts = crate::interrupt::Interrupts::install().map_err(|e| {
        crate::CliError::Unreadable(format!("signal handlers could not be installed: {e}"))
    })?;
    let ended = match walk(&interrupts) {
        Ok(true) => Ok(crate::exit::OK),
        Ok(false) => Ok(crate::exit::TAMPERED_OR_USAGE),
        Err(Stop::Signal(code)) => Ok(code),
        Err(Stop::Failed(e)) => Err(crate::CliError::Unreadable(e.to_string())),
    };
    // A signal after the last step still counts: the operator asked to stop.
    match (ended, interrupts.exit_code()) {
        (Ok(_), Some(signal)) => Ok(signal),
        (Err(e), signal) => Err(e.or_interrupted(signal)),
        (ended, None) => ended,
    }
}

/// `Err(Stop::Signal)` once a signal came.
fn stopped(interrupts: &crate::interrupt::Interrupts) -> Result<(), Stop> {
    match interrupts.exit_code() {
        Some(code) => Err(Stop::Signal(code)),
        None => Ok(()),
    }
}

/// `text` with each run of 64 hex digits (a key id) cut to its first 12, then `…`.
fn short_key_ids(text: &str) -> String {
    let mut out = String::new();
    let mut hex = String::new();
    let flush = |hex: &mut String, out: &mut String| {
        if hex.len() == 64 {
            out.push_str(&hex[..12]);
            out.push('…');
        } else {
            out.push_str(hex);
        }
        hex.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            hex.push(c);
        } else {
            flush(&mut hex, &mut out);
            out.push(c);
        }
    }
    flush(&mut hex, &mut out);
    out
}

/// `text` in lines of at most `width` characters, broken at spaces; a word longer than
/// `width` (a record line has few spaces) is broken across lines, never cut.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let chars: Vec<char> = word.chars().collect();
        for piece in chars.chunks(width.max(1)) {
            let last = lines.last_mut().expect("never empty");
            let used = last.chars().count();
            if used > 0 && used + 1 + piece.len() > width {
                lines.push(String::new());
            }
            let last = lines.last_mut().expect("never empty");
            if !last.is_empty() {
                last.push(' ');
            }
            last.extend(piece);
        }
    }
    lines
}

/// Prints `text` after `prefix` (whose width is `indent`), painted, continuing on
/// lines indented as far: nothing goes past [`WIDTH`].
fn say_wrapped(prefix: &str, indent: usize, text: &str, paint: impl Fn(&str) -> String) {
    for (i, line) in wrap(text, WIDTH - indent).iter().enumerate() {
        if i == 0 {
            say!("{prefix}{}", paint(line));
        } else {
            say!("{:indent$}{}", "", paint(line));
        }
    }
}

fn check(p: Painter, label: &str, bytes: &[u8], trust: Option<Vec<TrustAnchor>>) -> Report {
    let report = verify(
        bytes,
        &Options {
            trust,
            threads: 0,
            approvers: None,
        },
    )
    .expect("reading memory cannot fail");
    // Step 1 printed the key id in full; here its first 12 characters say which.
    let headline = short_key_ids(&report.headline());
    let paint = |t: &str| match report.verdict() {
        Verdict::Verified(_) => p.good(t),
        Verdict::Indeterminate(_) => p.warn(t),
        Verdict::Tampered(_) => p.bad(t),
    };
    say_wrapped(&format!("  {label:<30} "), CHECK_PREFIX, &headline, paint);
    report
}

/// One call of the walk: what it shows, the tool, its arguments and input, and how it
/// must end.
struct Step {
    shows: &'static str,
    tool: &'static str,
    args: Vec<String>,
    input: &'static [u8],
    expected: CallClass,
}

fn step(shows: &'static str, tool: &'static str, args: &[&Path], expected: CallClass) -> Step {
    Step {
        shows,
        tool,
        args: args.iter().map(|a| a.display().to_string()).collect(),
        input: b"",
        expected,
    }
}

fn walk(interrupts: &crate::interrupt::Interrupts) -> Result<bool, Stop> {
    let p = Painter::detect();
    let dir = tempfile::tempdir()?;
    let base = std::fs::canonicalize(dir.path())?;
    say!(
        "{}",
        p.bold("Aegis demo — tool calls you can prove afterwards")
    );
    say!(
        "{}",
        p.dim("Each call walks policy → capability → sandbox → audit and leaves a signed, hash-chained record.")
    );

    let key_path = base.join("signing.key");
    SigningKey::generate()?.write_seed_file(&key_path, false)?;
    let key = SigningKey::load(&key_path)?;
    say!(
        "\n{}",
        p.bold("1. A fresh signing key (mode 0600, in a temp dir)")
    );
    say!("  key_id {}", key.key_id());

    say!(
        "\n{}",
        p.bold("2. Tool calls through the embedded default profile")
    );
    let (file, mut as_expected) = calls(p, &base, &key, interrupts)?;

    say!(
        "\n{}",
        p.bold("3. Verify it, pinned to the key printed above")
    );
    let pinned = Some(vec![key.public_key().into()]);
    let ok = check(p, "as written", &file, pinned.clone());
    as_expected &= matches!(ok.verdict(), Verdict::Verified(_));

    say!("\n{}", p.bold("4. Damage it and verify again"));
    as_expected &= damage(p, &file, pinned)?;

    say!(
        "\n{}",
        p.bold("5. The committed golden vector (spec/vectors/golden)")
    );
    let r = check(p, "unpinned", GOLDEN, None);
    as_expected &= matches!(r.verdict(), Verdict::Verified(_));

    say!(
        "\n{}",
        p.bold("6. The same stations in front of an MCP server (aegis wrap)")
    );
    as_expected &= mcp::walk(p, &base, &key_path, &key, interrupts)?;

    say!(
        "\n{} aegis run --component tests/fixtures/wasm/echo.wasm --id echo --input hello",
        p.bold("Try it:")
    );
    say!(
        "\n{}",
        if as_expected {
            p.good("Every call and every verdict came out as Aegis promises.")
        } else {
            p.bad("Something differed from what Aegis promises: this is a bug.")
        }
    );
    Ok(as_expected)
}

/// Part 2: the guests and their files in `base`, each step through the pipeline, one
/// line per call. The record as written, and whether every call ended as promised.
fn calls(
    p: Painter,
    base: &Path,
    key: &SigningKey,
    interrupts: &crate::interrupt::Interrupts,
) -> Result<(Vec<u8>, bool), Stop> {
    let tools = base.join("tools");
    std::fs::create_dir(&tools)?;
    for (name, bytes) in GUESTS {
        aegis_files::write(&tools.join(format!("{name}.wasm")), bytes)?;
    }
    let (notes, out, secret) = (
        base.join("notes"),
        base.join("out"),
        base.join("secret.txt"),
    );
    std::fs::create_dir(&notes)?;
    std::fs::create_dir(&out)?;
    aegis_files::write(&notes.join("today.md"), b"standup at 10\n")?;
    aegis_files::write(&secret, b"the keys to the kingdom\n")?;
    std::os::unix::fs::symlink(&secret, notes.join("shortcut"))?;
    let policy_path = base.join("policy.yaml");
    aegis_files::write(&policy_path, POLICY.as_bytes())?;
    let pipeline = demo_pipeline(&tools, &notes, &out, &policy_path, key.clone())?;
    say!("  {}", p.dim(&pipeline.notice().to_string()));
    say!(
        "  {}",
        p.dim("Granted: read-notes reads notes/; write-notes reads notes/ and writes out/; the rest get nothing.")
    );
    let mut as_expected = true;
    for s in &steps(&notes, &out, &secret) {
        let args: Vec<&str> = s.args.iter().map(String::as_str).collect();
        stopped(interrupts)?;
        let r = pipeline.call(&CallRequest {
            args: &args,
            cancel: Some(interrupts.token()),
            ..CallRequest::new(s.tool, s.input)
        })?;
        stopped(interrupts)?;
        let leaked = r
            .output
            .as_deref()
            .is_some_and(|o| String::from_utf8_lossy(o).contains("kingdom"));
        let ok = r.class() == s.expected && !leaked && !planted(&notes);
        as_expected &= ok;
        show(p, s, &r, &args, base, ok);
    }
    let file = pipeline.close_and_export()?;
    say!(
        "  {} lines, {} bytes: an open line, an intent and an outcome per call, a close line",
        file.iter().filter(|&&b| b == b'\n').count(),
        file.len()
    );
    Ok((file, as_expected))
}

/// The walk's calls, in order: one allowed, one refusal per station, the escapes, the
/// ceilings.
fn steps(notes: &Path, out: &Path, secret: &Path) -> Vec<Step> {
    vec![
        step(
            "allowed",
            "read-notes",
            &[&notes.join("today.md")],
            CallClass::Success,
        ),
        Step {
            input: b"rm -rf ~",
            ..step("policy", "shell", &[], CallClass::PolicyDenied)
        },
        step("capability", "send-mail", &[], CallClass::CapabilityDenied),
        step(
            "escape",
            "read-notes",
            &[&notes.join("../secret.txt")],
            CallClass::Trap,
        ),
        step(
            "escape",
            "read-notes",
            &[Path::new("/etc/passwd")],
            CallClass::Trap,
        ),
        step(
            "escape",
            "read-notes",
            &[&notes.join("shortcut")],
            CallClass::Trap,
        ),
        Step {
            input: b"planted",
            ..step(
                "escape",
                "write-notes",
                &[&notes.join("planted.md")],
                CallClass::Trap,
            )
        },
        step(
            "escape",
            "make-link",
            &[&out.join("link"), secret],
            CallClass::Success,
        ),
        step(
            "escape",
            "connect",
            &[Path::new("127.0.0.1:9")],
            CallClass::Success,
        ),
        step("ceiling", "memory-bomb", &[], CallClass::ResourceExceeded),
        step("ceiling", "spin", &[], CallClass::ResourceExceeded),
        step("ceiling", "flood", &[], CallClass::ResourceExceeded),
    ]
}

/// One call's line, and its detail beneath. A refusal the walk set up is Aegis keeping
/// its promise: green, and for an escape the word is "refused", whatever the tool made
/// of it. Red is only for a call that ended otherwise than promised.
fn show(p: Painter, s: &Step, r: &CallRecord, args: &[&str], base: &Path, ok: bool) {
    let verdict = if ok && s.shows == "escape" {
        format!("refused: {}", refusal(r, base))
    } else {
        crate::run::verdict(r)
    };
    let verdict = aegis_record::text::escape(&verdict);
    say_wrapped(
        &format!("  {:<10} {:<12} ", s.shows, s.tool),
        STEP_PREFIX,
        &verdict,
        |t| if ok { p.good(t) } else { p.bad(t) },
    );
    let detail = aegis_record::text::escape(&detail(r, args, base, s.shows)).into_owned();
    if !detail.is_empty() {
        say_wrapped(&" ".repeat(STEP_PREFIX), STEP_PREFIX, &detail, |t| p.dim(t));
    }
    if !ok {
        say!("  {}", p.bad("^ not what the walk expected: this is a bug"));
    }
}

/// Part 4: the record damaged three ways, each caught: a denial reworded (Tampered), the
/// close line cut off (Indeterminate), the right file against another key (Tampered).
fn damage(p: Painter, file: &[u8], pinned: Option<Vec<TrustAnchor>>) -> Result<bool, Stop> {
    let mut as_expected = true;
    let lines: Vec<&[u8]> = file.split_inclusive(|&b| b == b'\n').collect();
    let reworded = String::from_utf8_lossy(file).replacen("never allowed", "always allowed", 1);
    let r = check(p, "a denial reworded", reworded.as_bytes(), pinned.clone());
    as_expected &= matches!(r.verdict(), Verdict::Tampered(_));
    let no_close: Vec<u8> = lines[..lines.len() - 1].concat();
    let r = check(p, "close line cut off (a crash?)", &no_close, pinned);
    as_expected &= matches!(r.verdict(), Verdict::Indeterminate(_));
    let outsider = SigningKey::generate()?.public_key();
    let r = check(
        p,
        "checked against another key",
        file,
        Some(vec![outsider.into()]),
    );
    as_expected &= matches!(r.verdict(), Verdict::Tampered(_));
    Ok(as_expected)
}

/// Whether the refused write left a file behind.
fn planted(notes: &Path) -> bool {
    notes.join("planted.md").exists()
}

/// What the call touched and, unless the verdict already says it (an escape's
/// refusal), what came back; with the temp dir shortened to `…`.
fn detail(r: &CallRecord, args: &[&str], base: &Path, shows: &str) -> String {
    let base = base.display().to_string();
    let target = args
        .first()
        .map(|a| a.replacen(&base, "…", 1))
        .unwrap_or_default();
    let said = if shows == "escape" {
        String::new()
    } else {
        said(r, &base)
    };
    match (target.is_empty(), said.is_empty()) {
        (true, true) => String::new(),
        (false, true) => target,
        (true, false) => format!("→ {said}"),
        (false, false) => format!("{target} → {said}"),
    }
}

/// What the tool said: its output when it succeeded, else its stderr; one line, the
/// temp dir shortened, WASI error numbers in words, and the Rust runtime's panic
/// boilerplate (the guest's, not Aegis's) left out.
fn said(r: &CallRecord, base: &str) -> String {
    String::from_utf8_lossy(r.output.as_deref().unwrap_or(&r.stderr))
        .lines()
        .filter(|l| !l.starts_with("note: run with `RUST_BACKTRACE") && !l.starts_with("thread '"))
        .map(|l| worded(&l.replacen(base, "…", 1)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the sandbox refused an escape, as the tool saw it: each error it reported,
/// without the tool's name and the path (shown below it).
fn refusal(r: &CallRecord, base: &Path) -> String {
    let base = base.display().to_string();
    let text = said(r, &base);
    let reasons: Vec<&str> = text
        .split("; ")
        .filter_map(|part| {
            // `read-file: PATH: why`, `symlink: error why`, `connect: error why`.
            let (what, why) = part.split_once(": ")?;
            let why = why.strip_prefix("error ").unwrap_or(why);
            let why = why.rsplit_once(": ").map_or(why, |(_, w)| w);
            Some(if what.contains('-') { why } else { part })
        })
        .collect();
    if reasons.is_empty() {
        "the sandbox stopped it".to_owned()
    } else {
        reasons.join("; ").replace(": error ", ": ")
    }
}

/// `message (os error N)`, as Rust's std prints a WASI error, in words: a short
/// phrase and the WASI name, which say more than the number.
fn worded(line: &str) -> String {
    let Some(start) = line.find(" (os error ") else {
        return line.to_owned();
    };
    let rest = &line[start + " (os error ".len()..];
    let Some((number, after)) = rest.split_once(')') else {
        return line.to_owned();
    };
    let Some((phrase, name)) = number.parse().ok().and_then(wasi_errno) else {
        return line.to_owned();
    };
    // The message std printed is the same number in libc's words: drop it.
    let before = line[..start].rsplit_once(": ").map_or("", |(b, _)| b);
    let sep = if before.is_empty() { "" } else { ": " };
    format!("{before}{sep}{phrase} ({name}){after}")
}

/// WASI's name, and a short phrase, for the error numbers a sandboxed tool meets
/// (wasi-libc's numbering).
fn wasi_errno(n: u16) -> Option<(&'static str, &'static str)> {
    Some(match n {
        2 => ("permission denied", "EACCES"),
        8 => ("bad file descriptor", "EBADF"),
        20 => ("already exists", "EEXIST"),
        28 => ("invalid argument", "EINVAL"),
        31 => ("is a directory", "EISDIR"),
        32 => ("too many symlinks", "ELOOP"),
        44 => ("no such file", "ENOENT"),
        52 => ("not implemented", "ENOSYS"),
        54 => ("not a directory", "ENOTDIR"),
        58 => ("not supported", "ENOTSUP"),
        63 => ("not permitted", "EPERM"),
        69 => ("read-only file system", "EROFS"),
        76 => ("outside the granted roots", "ENOTCAPABLE"),
        _ => return None,
    })
}

/// The default profile, with the walk's policy, the key, and its tools registered.
fn demo_pipeline(
    tools: &Path,
    notes: &Path,
    out: &Path,
    policy: &Path,
    key: SigningKey,
) -> Result<Host, Box<dyn std::error::Error>> {
    let profile = Profile::embedded("default")?;
    let tight = Limits {
        max_memory_bytes: 32 << 20,
        max_wall_ms: 250,
        max_output_bytes: 64 << 10,
    };
    let tool = |id: &str, guest: &str, read: &[&Path], write: &[&Path], limits| ToolManifest {
        id: id.into(),
        kind: ToolKind::Wasm {
            component: tools.join(format!("{guest}.wasm")),
        },
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: write.iter().map(|p| p.to_path_buf()).collect(),
        net: Vec::new(),
        limits,
    };
    Ok(Host::builder(profile)
        .policy_file("the demo's policy", policy)
        .signing_key(key)
        .tools([
            tool("read-notes", "read-file", &[notes], &[], DEFAULT_LIMITS),
            tool(
                "write-notes",
                "write-file",
                &[notes],
                &[out],
                DEFAULT_LIMITS,
            ),
            tool("make-link", "symlink-out", &[], &[out], DEFAULT_LIMITS),
            tool("connect", "net", &[], &[], DEFAULT_LIMITS),
            tool("shell", "read-file", &[], &[], DEFAULT_LIMITS),
            tool("memory-bomb", "memory-bomb", &[], &[], tight),
            tool("spin", "spin", &[], &[], tight),
            tool("flood", "flood", &[], &[], tight),
        ])
        .open()?)
}

#[cfg(test)]
mod tests {
    /// A record line has few spaces: its long "words" go on across lines, none cut.
    #[test]
    fn wrap_breaks_long_words_and_loses_nothing() {
        let text = format!("short {} tail", "x".repeat(25));
        let lines = super::wrap(&text, 10);
        assert!(lines.iter().all(|l| l.chars().count() <= 10), "{lines:?}");
        assert_eq!(lines.concat().replace(' ', ""), text.replace(' ', ""));
        assert_eq!(lines, ["short", "xxxxxxxxxx", "xxxxxxxxxx", "xxxxx tail"]);
    }
}
