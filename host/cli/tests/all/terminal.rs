//! `aegis run` on a real terminal (a pseudo-terminal this test opens): stdout and stderr
//! share it, as in an operator's shell. Output that does not end with a newline must
//! not run into the verdict, and text the tool chose is escaped there.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `aegis` with `args`, its stdout and stderr both on one new pseudo-terminal, and
/// returns everything the terminal received (its line discipline writes `\r\n`).
fn on_a_terminal(args: &[&str]) -> (Option<i32>, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_aegis"))
        .args(args)
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("aegis-run-tests-cache"),
        )
        .stdin(Stdio::null())
        .stdout(terminal.try_clone().unwrap())
        .stderr(terminal)
        .spawn()
        .unwrap();
    // Our copies of the terminal's end went into the Command, dropped with it here;
    // once the child exits nothing holds it, and reading the master ends (EIO).
    let mut master = std::fs::File::from(master);
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match master.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&chunk[..n]),
        }
    }
    let status = child.wait().unwrap();
    (status.code(), String::from_utf8_lossy(&seen).into_owned())
}

fn echo() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/wasm/echo.wasm")
        .display()
        .to_string()
}

/// Before, `hello` and `aegis: success …` could share one line.
#[test]
fn the_verdict_starts_on_its_own_line_after_output_without_a_newline() {
    let echo = echo();
    let (code, seen) = on_a_terminal(&[
        "run",
        "--component",
        &echo,
        "--id",
        "echo",
        "--input",
        "no newline here",
    ]);
    assert_eq!(code, Some(0), "{seen}");
    assert!(
        seen.contains("no newline here\r\naegis: success"),
        "the verdict is not on its own line: {seen:?}"
    );
}

/// Output that ends its line gets no blank line before the verdict.
#[test]
fn output_ending_with_a_newline_gets_no_extra_line() {
    let echo = echo();
    let (code, seen) = on_a_terminal(&[
        "run",
        "--component",
        &echo,
        "--id",
        "echo",
        "--input",
        "a line\n",
    ]);
    assert_eq!(code, Some(0), "{seen}");
    assert!(seen.contains("a line\r\naegis: success"), "{seen:?}");
}

/// A carriage return the tool wrote cannot overwrite the verdict on the terminal.
#[test]
fn a_tools_control_characters_are_escaped_on_the_terminal() {
    let echo = echo();
    let (code, seen) = on_a_terminal(&[
        "run",
        "--component",
        &echo,
        "--id",
        "echo",
        "--input",
        "fake\raegis: forged",
    ]);
    assert_eq!(code, Some(0), "{seen}");
    assert!(!seen.contains("fake\raegis"), "{seen:?}");
    assert!(seen.contains("fake\\u{d}aegis: forged\r\n"), "{seen:?}");
}
