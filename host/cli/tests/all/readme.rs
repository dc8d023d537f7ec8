//! The top-level README, run as written on a fresh machine: every command of its fenced
//! `sh` blocks, in order, in one `sh`, against the binary under test.
//!
//! The fresh machine: an empty temporary `HOME` (so `~/.config/aegis/signing.key` does
//! not exist yet), `TMPDIR` inside the test's directory, no `XDG_*` or `AEGIS_*`
//! variables, and a working directory holding a copy of what the README's commands read
//! (`spec/`, `examples/`, `tests/fixtures/wasm/`, `tests/fixtures/gateway/`), never the
//! checkout itself, so nothing a command writes lands in the source tree.
//!
//! What each command must do:
//! - exit 0, unless its trailing comment announces another code (`# … exit 3`);
//! - if its trailing comment starts with a verdict (`# Verified …`, `# Tampered …`,
//!   `# Indeterminate …`), print a first line that starts with that word.
//!
//! Lines not run, and why (the whole skip list; keep it this short):
//! - `cargo …`: the test runs on what cargo already built. `$B` is the binary under
//!   test, and `target/release/` in the copy holds what the README's
//!   `cargo build --release -p …` lines would have built: the SQLite sink plugin
//!   (`aegis_test_support::cdylib`) and `aegis-verify`.
//! - `B=…`: the test sets `B` to the binary under test.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// The README's prefixes of lines the test does not run; see the module docs for why.
const SKIPPED: &[&str] = &["cargo ", "B="];

/// One command of the README: its lines as written (continuations included), where it
/// starts, and what its trailing comment announces.
#[derive(Debug)]
struct Step {
    line: usize,
    text: String,
    exit: i32,
    verdict: Option<&'static str>,
}

/// The runnable commands of every fenced `sh` block, in order.
fn steps(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<Step> = None;
    for (i, line) in readme.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let step = match pending.take() {
            Some(mut s) => {
                s.text.push('\n');
                s.text.push_str(line);
                s
            }
            None if trimmed.is_empty() || trimmed.starts_with('#') => continue,
            None => Step {
                line: i + 1,
                text: line.to_owned(),
                exit: 0,
                verdict: None,
            },
        };
        if line.trim_end().ends_with('\\') {
            pending = Some(step);
            continue;
        }
        let mut step = step;
        if let Some((_, comment)) = line.split_once(" # ") {
            let comment = comment.trim();
            if let Some(code) = comment
                .rsplit_once("exit ")
                .and_then(|(_, n)| n.trim().parse().ok())
            {
                step.exit = code;
            }
            step.verdict = ["Verified", "Tampered", "Indeterminate"]
                .into_iter()
                .find(|v| comment.starts_with(v));
        }
        if !SKIPPED
            .iter()
            .any(|p| step.text.trim_start().starts_with(p))
        {
            steps.push(step);
        }
    }
    assert!(!in_sh, "README.md: an `sh` block is never closed");
    steps
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The parser reads what the README means: continuations join, announced codes and
/// verdicts are taken from the trailing comment, and the skip list holds.
#[test]
fn the_readme_parser_reads_codes_verdicts_and_continuations() {
    let text = "```sh\ncargo build --release\nB=target/release/aegis\n\n# a comment\n$B verify a \\\n   b   # Tampered — …, exit 1\n$B x\n```\n```json\n{}\n```\n";
    let s = steps(text);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!(s[0].line, 6);
    assert_eq!(s[0].exit, 1);
    assert_eq!(s[0].verdict, Some("Tampered"));
    assert!(s[0].text.ends_with("exit 1"));
    assert_eq!((s[1].exit, s[1].verdict), (0, None));
}

#[test]
fn every_readme_command_runs_on_a_fresh_machine() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let steps = steps(&readme);
    assert!(steps.len() >= 10, "too few commands found: {steps:?}");

    let dir = tempfile::tempdir().unwrap();
    let (home, tmp, work, out) = (
        dir.path().join("home"),
        dir.path().join("tmp"),
        dir.path().join("clone"),
        dir.path().join("out"),
    );
    for d in [&home, &tmp, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    for part in [
        "spec",
        "examples",
        "tests/fixtures/wasm",
        "tests/fixtures/gateway",
    ] {
        copy_tree(&root.join(part), &work.join(part));
    }
    let release = work.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    for built in [
        aegis_test_support::cdylib("aegis-sink-sqlite"),
        aegis_test_support::verify_only_binary(),
    ] {
        std::fs::copy(&built, release.join(built.file_name().unwrap())).unwrap();
    }

    // Each command runs in a brace group (not a subshell: `T=…` and `export` carry on),
    // its output kept per step, its status appended to a list the test reads back.
    let mut script = String::new();
    for (n, step) in steps.iter().enumerate() {
        let _ = write!(
            script,
            "{{\n{}\n}} >\"$OUT/{n}.out\" 2>\"$OUT/{n}.err\" </dev/null\necho \"{n} $?\" >>\"$OUT/status\"\n",
            step.text
        );
    }
    let run = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("TMPDIR", &tmp)
        .env("NO_COLOR", "1")
        .env("OUT", &out)
        .env("B", env!("CARGO_BIN_EXE_aegis"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "the script itself failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    let status = std::fs::read_to_string(out.join("status")).unwrap();
    let codes: Vec<i32> = status
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert_eq!(codes.len(), steps.len(), "not every command ran");
    let mut failures = String::new();
    for (n, (step, code)) in steps.iter().zip(&codes).enumerate() {
        let stdout = std::fs::read_to_string(out.join(format!("{n}.out"))).unwrap_or_default();
        let stderr = std::fs::read_to_string(out.join(format!("{n}.err"))).unwrap_or_default();
        let first = stdout.lines().next().unwrap_or("");
        let verdict_ok = step.verdict.is_none_or(|v| first.starts_with(v));
        if *code != step.exit || !verdict_ok {
            let _ = writeln!(
                failures,
                "README.md:{}: exit {code} (the README announces {}), first line {first:?}\n  {}\n  stderr: {}",
                step.line,
                step.exit,
                step.text.replace('\n', "\n  "),
                stderr.trim_end().replace('\n', "\n          ")
            );
        }
    }
    assert!(failures.is_empty(), "{failures}");

    // The tour's first key went into directories keygen made, private to the user.
    use std::os::unix::fs::PermissionsExt as _;
    for d in [home.join(".config"), home.join(".config/aegis")] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
}

/// The evidence script's claims (spec/evidence-claims.tsv) against the documents and
/// the tree: each claim's ID has its row in spec/FINDINGS.md, each command names a
/// package and a test target that exist, and each test name it filters on is a test
/// function in that target, so no claim can quietly run nothing. (The script refuses a
/// claim whose command ran no test; this catches it before anything is built.)
#[test]
fn every_evidence_claim_is_in_the_findings_and_names_real_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let claims = std::fs::read_to_string(root.join("spec/evidence-claims.tsv")).unwrap();
    let findings = std::fs::read_to_string(root.join("spec/FINDINGS.md")).unwrap();
    // Package name -> its directory, from the workspace members' manifests.
    let mut packages = std::collections::HashMap::new();
    for dir in ["host", "stations", "sinks", "tests", "."] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let manifest = entry.path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            if let Some(name) = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|r| r.strip_suffix('"'))
            {
                packages.insert(name.to_owned(), entry.path());
            }
        }
    }
    let mut seen = 0;
    let mut problems = Vec::new();
    for (n, line) in claims.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "evidence-claims.tsv:{}: {line}", n + 1);
        let (id, command) = (fields[0], fields[2]);
        seen += 1;
        if !findings.contains(&format!("| {id} |")) {
            problems.push(format!("{id}: no row in spec/FINDINGS.md"));
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
        };
        let (Some(package), Some(target)) = (after("-p"), after("--test")) else {
            problems.push(format!("{id}: no -p PACKAGE --test TARGET in {command:?}"));
            continue;
        };
        let Some(dir) = packages.get(*package) else {
            problems.push(format!("{id}: no package {package}"));
            continue;
        };
        // A target is `tests/T.rs`, or `tests/T/main.rs` with a module per topic.
        let tests = dir.join("tests");
        let (file, modules) = match tests.join(format!("{target}.rs")) {
            f if f.is_file() => (f, None),
            _ => (tests.join(target).join("main.rs"), Some(tests.join(target))),
        };
        let Ok(source) = std::fs::read_to_string(&file) else {
            problems.push(format!("{id}: no test target {}", file.display()));
            continue;
        };
        // Names after `--` (a filter, or the value of a `--skip`) must be tests there:
        // `module::` a module of the target, `module::name` a test in it, `name` a test
        // in a single-file target.
        if let Some(dash) = words.iter().position(|w| *w == "--") {
            for name in words[dash + 1..].iter().filter(|w| !w.starts_with('-')) {
                let found = match (name.split_once("::"), &modules) {
                    (Some((module, rest)), Some(dir)) => {
                        std::fs::read_to_string(dir.join(format!("{module}.rs")))
                            .is_ok_and(|m| rest.is_empty() || m.contains(&format!("fn {rest}")))
                    }
                    (None, None) => source.contains(&format!("fn {name}")),
                    // A module inside a single-file target.
                    (Some((module, rest)), None) => {
                        source.contains(&format!("mod {module} {{"))
                            && (rest.is_empty() || source.contains(&format!("fn {rest}")))
                    }
                    _ => false,
                };
                if !found {
                    problems.push(format!("{id}: {target} has no test or module {name}"));
                }
            }
        }
    }
    assert!(seen >= 20, "only {seen} claims");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every `builtin:NAME` the docs, examples and profiles name is a plugin this binary
/// links: a copied comment naming one that does not exist fails a profile at load.
#[test]
fn every_builtin_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let known: Vec<String> = aegis_runtime::Registry::new()
        .builtins()
        .iter()
        .map(|p| p.metadata().name.to_string())
        .collect();
    let mut files = vec![root.join("README.md"), root.join("SECURITY.md")];
    for dir in [
        "spec",
        "examples",
        "examples/cedar",
        "profiles",
        "host/cli/src",
    ] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            files.push(entry.path());
        }
    }
    for dir in ["host", "stations", "sinks"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            files.push(entry.path().join("README.md"));
        }
    }
    let mut named = 0;
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (at, _) in text.match_indices("builtin:") {
            let name: String = text[at + "builtin:".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            // `builtin:NAME` as a placeholder, or the prefix alone in prose.
            if name.is_empty() || name == "NAME" || name.chars().all(|c| c.is_ascii_uppercase()) {
                continue;
            }
            named += 1;
            assert!(
                known.contains(&name),
                "{} names builtin:{name}, which is not one of {known:?}",
                file.display()
            );
        }
    }
    assert!(named > 5, "the docs name built-ins; found {named}");
}
