//! `aegis demo`: a guided walk through a real pipeline and the evidence it leaves.
//!
//! On the embedded default profile (its volatile memory sink, read back before the
//! process ends) with a fresh key and a small policy of its own, the walk runs the
//! committed guest components (embedded in the binary) through all four stations: an
//! allowed call, refusals by policy and by capability, escape attempts, each resource
//! ceiling. Then it verifies the chain it wrote, pinned to the key, damages it three
//! ways to show each caught, and verifies the committed golden vector.

/// Prints a line; a closed stdout (`aegis demo | head`) is not an error.
macro_rules! say {
    ($($arg:tt)*) => {
        { let _ = crate::print(format!("{}\n", format_args!($($arg)*)).as_bytes()); }
    };
}

use crate::style::Painter;
use aegis_record::key::SigningKey;
use aegis_record::verify::{Options, Report, TrustAnchor, Verdict, verify};
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolKind, ToolManifest};
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_runtime::{Host, Profile};
use std::path::Path;

/// The golden session from `spec/vectors/golden/`, signed by the public vector key.
const GOLDEN: &[u8] = include_bytes!("../../../spec/vectors/golden/golden.aarl");

/// The guests the walk runs, from `tests/fixtures/wasm` (their sources are beside them).
const GUESTS: &[(&str, &[u8])] = &[
    (
        "read-file",
        include_bytes!("../../../tests/fixtures/wasm/read-file.wasm"),
    ),
    (
        "write-file",
        include_bytes!("../../../tests/fixtures/wasm/write-file.wasm"),
    ),
    (
        "symlink-out",
        include_bytes!("../../../tests/fixtures/wasm/symlink-out.wasm"),
    ),
    (
        "net",
        include_bytes!("../../../tests/fixtures/wasm/net.wasm"),
    ),
    (
        "memory-bomb",
        include_bytes!("../../../tests/fixtures/wasm/memory-bomb.wasm"),
    ),
    (
        "spin",
        include_bytes!("../../../tests/fixtures/wasm/spin.wasm"),
    ),
    (
        "flood",
        include_bytes!("../../../tests/fixtures/wasm/flood.wasm"),
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

pub fn run() -> u8 {
    match walk() {
        Ok(true) => crate::exit::OK,
        Ok(false) => crate::exit::TAMPERED_OR_USAGE,
        Err(e) => {
            crate::error(e);
            crate::exit::UNREADABLE
        }
    }
}

fn check(p: Painter, label: &str, bytes: &[u8], trust: Option<Vec<TrustAnchor>>) -> Report {
    let report = verify(bytes, &Options { trust, threads: 0 }).expect("reading memory cannot fail");
    let headline = report.headline();
    let shown = match report.verdict() {
        Verdict::Verified(_) => p.good(&headline),
        Verdict::Indeterminate(_) => p.warn(&headline),
        Verdict::Tampered(_) => p.bad(&headline),
    };
    say!("  {label:<34} {shown}");
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

fn walk() -> Result<bool, Box<dyn std::error::Error>> {
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
    let tools = base.join("tools");
    std::fs::create_dir(&tools)?;
    for (name, bytes) in GUESTS {
        std::fs::write(tools.join(format!("{name}.wasm")), bytes)?;
    }
    let (notes, out, secret) = (
        base.join("notes"),
        base.join("out"),
        base.join("secret.txt"),
    );
    std::fs::create_dir(&notes)?;
    std::fs::create_dir(&out)?;
    std::fs::write(notes.join("today.md"), "standup at 10\n")?;
    std::fs::write(&secret, "the keys to the kingdom\n")?;
    std::os::unix::fs::symlink(&secret, notes.join("shortcut"))?;
    let policy_path = base.join("policy.yaml");
    std::fs::write(&policy_path, POLICY)?;
    let pipeline = demo_pipeline(&tools, &notes, &out, &policy_path, key.clone())?;
    say!("  {}", p.dim(&pipeline.notice().to_string()));
    say!(
        "  {}",
        p.dim("Granted: read-notes reads notes/; write-notes reads notes/ and writes out/; the rest get nothing.")
    );

    let steps = [
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
            &[&out.join("link"), &secret],
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
    ];
    let mut as_expected = true;
    for s in &steps {
        let args: Vec<&str> = s.args.iter().map(String::as_str).collect();
        let r = pipeline.call(&CallRequest {
            args: &args,
            ..CallRequest::new(s.tool, s.input)
        })?;
        let leaked = r
            .output
            .as_deref()
            .is_some_and(|o| String::from_utf8_lossy(o).contains("kingdom"));
        let ok = r.class() == s.expected && !leaked && !planted(&notes);
        as_expected &= ok;
        let verdict = crate::run::verdict(&r);
        let verdict = &aegis_record::text::escape(&verdict);
        let painted = match r.class() {
            CallClass::Success => p.good(verdict),
            _ => p.bad(verdict),
        };
        say!("  {:<10} {:<12} {painted}", s.shows, s.tool);
        let detail = aegis_record::text::escape(&detail(&r, &args, &base)).into_owned();
        if !detail.is_empty() {
            say!("  {:<10} {:<12} {}", "", "", p.dim(&detail));
        }
        if !ok {
            say!("  {}", p.bad("^ not what the walk expected: this is a bug"));
        }
    }
    let file = pipeline
        .into_audit()
        .map_err(|_| "a demo call is still open")?
        .close_and_export()?;
    say!(
        "  {} lines, {} bytes: an open line (with provenance), an intent and an outcome per call, a close line",
        file.iter().filter(|&&b| b == b'\n').count(),
        file.len()
    );

    say!(
        "\n{}",
        p.bold("3. Verify it, pinned to the key printed above")
    );
    let pinned = Some(vec![key.public_key().into()]);
    let ok = check(p, "as written", &file, pinned.clone());
    as_expected &= matches!(ok.verdict(), Verdict::Verified(_));

    say!("\n{}", p.bold("4. Damage it and verify again"));
    let lines: Vec<&[u8]> = file.split_inclusive(|&b| b == b'\n').collect();
    let reworded = String::from_utf8_lossy(&file).replacen("never allowed", "always allowed", 1);
    let r = check(p, "a denial reworded", reworded.as_bytes(), pinned.clone());
    as_expected &= matches!(r.verdict(), Verdict::Tampered(_));
    let no_close: Vec<u8> = lines[..lines.len() - 1].concat();
    let r = check(p, "close line cut off (a crash?)", &no_close, pinned);
    as_expected &= matches!(r.verdict(), Verdict::Indeterminate(_));
    let outsider = SigningKey::generate()?.public_key();
    let r = check(
        p,
        "checked against another key",
        &file,
        Some(vec![outsider.into()]),
    );
    as_expected &= matches!(r.verdict(), Verdict::Tampered(_));

    say!(
        "\n{}",
        p.bold("5. The committed golden vector (spec/vectors/golden)")
    );
    let r = check(p, "unpinned", GOLDEN, None);
    as_expected &= matches!(r.verdict(), Verdict::Verified(_));

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

/// Whether the refused write left a file behind.
fn planted(notes: &Path) -> bool {
    notes.join("planted.md").exists()
}

/// What the call touched and what came back, with the temp dir shortened to `…`.
fn detail(r: &CallRecord, args: &[&str], base: &Path) -> String {
    let base = base.display().to_string();
    let target = args
        .first()
        .map(|a| a.replacen(&base, "…", 1))
        .unwrap_or_default();
    // Its output when it succeeded; otherwise what it told the operator on stderr.
    let said = String::from_utf8_lossy(r.output.as_deref().unwrap_or(&r.stderr))
        .lines()
        .map(|l| l.replacen(&base, "…", 1))
        .collect::<Vec<_>>()
        .join("; ");
    match (target.is_empty(), said.is_empty()) {
        (true, true) => String::new(),
        (false, true) => target,
        (true, false) => format!("→ {said}"),
        (false, false) => format!("{target} → {said}"),
    }
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
