//! `aegis console` in a real browser (headless Chromium over WebDriver): a call made by
//! `aegis run` appears live, a filter narrows the calls, a call opens to its evidence,
//! an XSS payload a policy wrote stays text, a request without the token or from
//! another origin is refused, and a parked call is approved from the page while the
//! waiting MCP client gets its result.
//!
//! `AEGIS_CONSOLE_SCREENSHOT=docs/console.png` writes the README's screenshot.

use crate::common::approvals::{approver, one_request};
use crate::common::browser::Browser;
use crate::common::text;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// Not allowed to run: denied, with a reason that is markup and script.
const HOSTILE: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;

/// And a right-to-left override, which would show what follows it reversed, and an
/// invisible tag character past U+FFFF (judged by code point, not by UTF-16 half).
const REVERSED: &str = "\u{202e}fdp.exe\u{e0041}";

fn echo_wasm() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm/echo.wasm")
}

fn echo_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/echo_server.py")
}

/// A running `aegis console`, stopped when dropped.
struct Console {
    child: Child,
    /// `http://127.0.0.1:PORT`
    origin: String,
    token: String,
}

impl Console {
    fn start(args: &[&std::ffi::OsStr]) -> Console {
        let mut child = Command::new(env!("CARGO_BIN_EXE_aegis"))
            .args(["console", "--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (_stderr, host, token) = crate::console::address(&mut child);
        let origin = format!("http://{host}");
        Console {
            child,
            origin,
            token,
        }
    }

    /// The address as the console printed it, token in the fragment.
    fn url(&self) -> String {
        format!("{}/#token={}", self.origin, self.token)
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(dir: &Path, tool: &str, input: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
        .arg("run")
        .arg("--component")
        .arg(echo_wasm())
        .args(["--id", tool, "--input", input, "--policy"])
        .arg(dir.join("policy.yaml"))
        .arg("--audit")
        .arg(dir.join("record.aarl"))
        .arg("--signing-key")
        .arg(dir.join("host.key"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The rows the page shows now.
fn rows(browser: &Browser) -> usize {
    browser.find_all("#calls tbody tr").len()
}

fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + crate::common::browser::PATIENCE;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "waited in vain: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_call_from_aegis_run_appears_live_filters_narrow_and_hostile_text_stays_text() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    approver(dir.path(), "host.key");
    std::fs::write(
        dir.path().join("policy.yaml"),
        format!(
            "version: 1\ndefault: allow\nrules:\n  - id: no-deploys\n    action: deny\n    tool: deploy\n    reason: '{HOSTILE}{REVERSED}'\n"
        ),
    )
    .unwrap();
    let first = run(dir.path(), "echo", "hello");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let console = Console::start(&[dir.path().join("record.aarl").as_os_str()]);
    browser.goto(&console.url());
    browser.wait_for("#calls tbody tr", |t| {
        t.contains("echo") && t.contains("ok")
    });
    // The token left the address bar once read.
    let address = browser.script("return location.href;");
    assert!(!address.as_str().unwrap().contains("token"), "{address}");

    // A call made now appears without the page asking: it is pushed.
    let denied = run(dir.path(), "deploy", "prod");
    assert_ne!(denied.status.code(), Some(0));
    let row = browser.wait_for("#calls tbody tr", |t| {
        t.contains("deploy") && t.contains("denied")
    });
    let shown = browser.text(&row);
    assert!(shown.contains(HOSTILE), "{shown}");
    // The override is shown as an escape, never obeyed.
    assert!(shown.contains("\\u{202e}fdp.exe\\u{e0041}"), "{shown}");
    assert!(!shown.contains(['\u{202e}', '\u{e0041}']), "{shown}");
    let inert = browser.script(
        "return [typeof window.__pwned, document.querySelectorAll('main img, main script').length];",
    );
    assert_eq!(
        inert,
        serde_json::json!(["undefined", 0]),
        "the payload ran"
    );
    browser.wait_for("#files li", |t| t.contains("unpinned"));

    // The tool filter, typed as a person types.
    assert_eq!(rows(&browser), 2);
    let filter = browser.find_all("#f-tool")[0].clone();
    browser.type_into(&filter, "deploy");
    until("one row after filtering", || rows(&browser) == 1);
    browser.wait_for("#shown", |t| t.starts_with("1 of 2"));

    // The call's evidence, opened from the keyboard (Enter on the tool's button),
    // and the command that checks it offline.
    let open = browser.find_all("#calls tbody tr td[data-label=Tool] button")[0].clone();
    browser.type_into(&open, "\u{E007}");
    let evidence = browser.wait_for("#evidence", |t| t.contains("aegis verify"));
    let shown = browser.text(&evidence);
    for part in [
        "Outcome",
        "Intent",
        "Session opened",
        "no-deploys",
        HOSTILE,
        "\\u{202e}fdp.exe",
    ] {
        assert!(shown.contains(part), "{part} not in {shown}");
    }
    let inert = browser.script("return typeof window.__pwned;");
    assert_eq!(inert, "undefined", "the payload ran in the evidence view");
    // Focus moved to what was opened, for a keyboard or screen reader user.
    let focused = browser.script("return document.activeElement.id;");
    assert_eq!(focused, "evidence");

    // Every control has a label a screen reader reads, and every button a name.
    let labelled = browser.script(
        "return [...document.querySelectorAll('input, select')].every((e) => e.labels.length > 0) \
         && [...document.querySelectorAll('button')].every((b) => b.textContent.trim() !== '');",
    );
    assert_eq!(labelled, true);
    // Readable at a laptop's 100 columns and on a phone: nothing wider than the
    // window, so nothing to scroll sideways.
    for (width, height) in [(800, 900), (390, 844)] {
        browser.resize(width, height);
        let fits = browser.script(
            "return [window.innerWidth, document.documentElement.scrollWidth <= document.documentElement.clientWidth];",
        );
        assert!(fits[0].as_u64().unwrap() <= u64::from(width), "{fits}");
        assert_eq!(fits[1], true, "the page is wider than a {width} px window");
    }
}

/// `aegis wrap` over the echo server, its client's side driven here: each answer read
/// on a thread so a test never blocks on one that does not come.
struct Wrap {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
}

impl Wrap {
    fn start(dir: &Path) -> Wrap {
        let mut child = Command::new(env!("CARGO_BIN_EXE_aegis"))
            .arg("wrap")
            .arg("--audit")
            .arg(dir.join("record.aarl"))
            .arg("--signing-key")
            .arg(dir.join("host.key"))
            .arg("--policy")
            .arg(dir.join("policy.yaml"))
            .arg("--approvals")
            .arg(dir.join("queue"))
            .arg("--")
            .arg("python3")
            .arg(echo_server())
            .arg("--log")
            .arg(dir.join("server.log"))
            .arg("--pid-file")
            .arg(dir.join("server.pid"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("wrap.err")).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Wrap {
            child,
            stdin,
            answers,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn answer(&self) -> String {
        self.answers
            .recv_timeout(Duration::from_secs(120))
            .expect("wrap answered nothing")
    }
}

impl Drop for Wrap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_parked_call_is_approved_from_the_page_and_the_waiting_client_gets_its_result() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    approver(dir.path(), "host.key");
    let (alice, _) = approver(dir.path(), "alice.key");
    std::fs::write(
        dir.path().join("policy.yaml"),
        "version: 1\ndefault: allow\nrules:\n  - id: echo-needs-a-person\n    action: pending_approval\n    tool: echo\n    reason: a person reads what is echoed\n",
    )
    .unwrap();
    let mut wrap = Wrap::start(dir.path());
    wrap.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    wrap.answer();
    wrap.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    wrap.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#);
    wrap.answer();
    wrap.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"ship it"}}}"#);
    let queue = dir.path().join("queue");
    let id = one_request(&queue, || None);

    let console = Console::start(&[
        "--approvals".as_ref(),
        queue.as_os_str(),
        "--approver-key".as_ref(),
        alice.as_os_str(),
        dir.path().join("record.aarl").as_os_str(),
    ]);
    // Without the token the page is refused, and says so.
    browser.goto(&format!("{}/", console.origin));
    browser.wait_for("#problem", |t| t.contains("refused"));
    // A page of another origin holding the token can still place nothing: its
    // requests carry its own Origin, which the console refuses.
    browser.goto("data:text/html,<p>another site</p>");
    let tried = browser.script_async(&format!(
        r#"const done = arguments[0];
        const url = "{}/api/approvals/{id}";
        const body = JSON.stringify({{verdict: "approve"}});
        const auth = "Bearer {}";
        Promise.allSettled([
          fetch(url, {{method: "POST", headers: {{Authorization: auth, "Content-Type": "application/json"}}, body}}),
          fetch(url, {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body}}),
        ]).then((r) => done(r.map((x) => x.status === "fulfilled" ? String(x.value.status) : "blocked")));"#,
        console.origin, console.token
    ));
    assert_eq!(tried[0], "blocked", "{tried}");
    assert!(
        !queue.join(format!("{id}.decision")).exists(),
        "a decision was placed from another origin"
    );

    browser.goto(&console.url());
    let request = browser.wait_for("#requests article", |t| {
        t.contains("echo") && t.contains("pending")
    });
    let shown = browser.text(&request);
    for part in [
        id.as_str(),
        r#"{"text":"ship it"}"#,
        "echo-needs-a-person",
        "fs",
        "net",
    ] {
        assert!(shown.contains(part), "{part} not in {shown}");
    }
    browser.wait_for("#calls tbody tr", |t| t.contains("parked"));
    if let Some(path) = std::env::var_os("AEGIS_CONSOLE_SCREENSHOT") {
        std::fs::write(path, browser.screenshot()).unwrap();
    }

    let approve = browser.find_all(&format!("#approve-{id}"))[0].clone();
    browser.click(&approve);
    // The waiting client gets the tool's result.
    let answer = wrap.answer();
    assert!(answer.contains(r#""id":3"#), "{answer}");
    assert!(answer.contains("ship it"), "{answer}");
    assert!(!answer.contains("isError\":true"), "{answer}");
    // And the page shows the decision taken and the call run.
    browser.wait_for("#requests article", |t| {
        t.contains("echo") && (t.contains("used") || t.contains("approved"))
    });
    browser.wait_for("#calls tbody tr", |t| {
        t.contains("echo") && t.contains(" ok")
    });
    // The resumed call's evidence names the park, the decision and who decided: the
    // key the console signed with.
    let alice_id = text(
        &Command::new(env!("CARGO_BIN_EXE_aegis"))
            .args(["key", "show"])
            .arg(&alice)
            .output()
            .unwrap()
            .stdout,
    );
    let key_id = alice_id
        .lines()
        .find_map(|l| l.strip_prefix("key_id "))
        .unwrap()
        .trim()
        .to_owned();
    let open = browser.find_all("#calls tbody tr.ok td[data-label=Tool] button")[0].clone();
    browser.click(&open);
    let evidence = browser.wait_for("#evidence", |t| t.contains("Decision and approver"));
    let shown = browser.text(&evidence);
    for part in [
        "Parked (what approving authorised)",
        id.as_str(),
        key_id.as_str(),
        "approved",
    ] {
        assert!(shown.contains(part), "{part} not in {shown}");
    }
    wrap.stdin = None;
    assert!(wrap.child.wait().unwrap().success());
    drop(console);
}
