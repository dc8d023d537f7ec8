//! Headless Chromium driven over WebDriver (chromedriver, from Debian's `chromium` and
//! `chromium-driver`): plain HTTP and JSON, no client crate.
//!
//! Without chromedriver on the PATH the browser tests say so and pass, unless
//! `AEGIS_BROWSER_TESTS=require` (set by `.ci/run`, which installs both), where its
//! absence fails them.

use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a test waits for the page to show what it expects: generous, so a loaded
/// machine does not fail it; nothing asserts how long anything took.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A browser session, ended (and chromedriver stopped) when dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

/// The element id WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// A headless Chromium, or `None` (said on stderr) when chromedriver is not
    /// installed and the tests are not required.
    pub fn start() -> Option<Browser> {
        let required = std::env::var("AEGIS_BROWSER_TESTS").is_ok_and(|v| v == "require");
        let found = ["chromedriver", "chromium"]
            .iter()
            .all(|program| on_path(program));
        if !found {
            assert!(
                !required,
                "AEGIS_BROWSER_TESTS=require, but chromium or chromedriver is not on the PATH (apt-get install chromium chromium-driver)"
            );
            eprintln!(
                "SKIPPED: the console's browser tests need chromium and chromedriver (apt-get install chromium chromium-driver); .ci/run installs them and requires these tests"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + PATIENCE;
        while browser.call("GET", "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        let created = browser
            .call(
                "POST",
                "/session",
                Some(json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": which("chromium"),
                        // CI runs as root, where Chromium's own sandbox cannot start.
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--window-size=1280,1000"]
                    }
                }}})),
            )
            .unwrap();
        browser.session = created["sessionId"].as_str().unwrap().to_owned();
        Some(browser)
    }

    /// One WebDriver command: its `value`, or the error it answered with.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        tcp.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        tcp.write_all(body.as_bytes()).map_err(|e| e.to_string())?;
        let mut reader = BufReader::new(tcp);
        let mut status = String::new();
        reader.read_line(&mut status).map_err(|e| e.to_string())?;
        let mut length = None;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).map_err(|e| e.to_string())?;
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        let mut answer = Vec::new();
        match length {
            Some(n) => {
                answer.resize(n, 0);
                reader.read_exact(&mut answer).map_err(|e| e.to_string())?;
            }
            None => {
                reader.read_to_end(&mut answer).map_err(|e| e.to_string())?;
            }
        }
        let parsed: Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
        if !status.contains(" 200 ") {
            return Err(format!("{status}: {parsed}"));
        }
        Ok(parsed["value"].clone())
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.call(method, &path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// The elements matching `css`.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        let found = self.command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_array()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .iter()
            .map(|e| {
                e[ELEMENT]
                    .as_str()
                    .unwrap_or_else(|| panic!("{css}: {e}"))
                    .to_owned()
            })
            .collect()
    }

    /// Waits until an element matching `css` has text for which `wanted` holds; its id.
    pub fn wait_for(&self, css: &str, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            for element in self.find_all(css) {
                // An element redrawn between the find and the read is looked for again.
                if let Ok(text) = self.call(
                    "GET",
                    &format!("/session/{}/element/{element}/text", self.session),
                    None,
                ) && wanted(text.as_str().unwrap_or_default())
                {
                    return element;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {css} as wanted; the page: {}",
                self.text_of("body")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The text of the first element matching `css`.
    pub fn text_of(&self, css: &str) -> String {
        match self.find_all(css).first() {
            Some(e) => self.text(e),
            None => String::new(),
        }
    }

    pub fn text(&self, element: &str) -> String {
        self.command("GET", &format!("/element/{element}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn click(&self, element: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        );
    }

    /// Types `text` into `element`, as a keyboard would.
    pub fn type_into(&self, element: &str, text: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Runs `script` (a function body; `arguments[0]` is the callback of an async
    /// one) in the page: what it returned.
    pub fn script(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    pub fn script_async(&self, script: &str) -> Value {
        self.command(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Resizes the window (a phone's, a laptop's).
    pub fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        let encoded = self.command("GET", "/screenshot", None);
        base64_decode(encoded.as_str().unwrap())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn on_path(program: &str) -> bool {
    !which(program).is_empty()
}

fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'=' && c != b'\n').collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in group.iter().enumerate() {
            n |= u32::from(value(c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    out
}
