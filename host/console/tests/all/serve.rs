//! The console served on a loopback port, asked as a browser and as an attacker would:
//! the page and its security header fields, the API behind the token, foreign hosts
//! and origins refused, a record's calls under its verdict.

use aegis_console::{CSP, Console, serve};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "console-test-token-7d1f";

fn vector(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/vectors")
        .join(path)
}

/// A console over `record`, served until the returned token is cancelled.
async fn start(record: &Path) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let console = Console {
        record: record.to_owned(),
        trust: None,
    };
    tokio::spawn(serve(
        listener,
        console,
        Arc::from(TOKEN),
        Arc::new(|w: &str| eprintln!("{w}")),
        stop.clone(),
    ));
    (addr, stop)
}

/// One GET with `headers`, on a connection of its own: the status and the whole answer.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap();
    (status, answer)
}

fn host(addr: SocketAddr) -> String {
    format!("127.0.0.1:{}", addr.port())
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_policy_and_no_data() {
    let (addr, stop) = start(&vector("golden/golden.aarl")).await;
    let host = host(addr);
    for path in ["/", "/app.js", "/app.css"] {
        let (status, answer) = get(addr, path, &[("Host", &host)]).await;
        assert_eq!(status, 200, "{path}: {answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(
            lower.contains(&format!(
                "content-security-policy: {}",
                CSP.to_ascii_lowercase()
            )),
            "{answer}"
        );
        assert!(
            lower.contains("x-content-type-options: nosniff"),
            "{answer}"
        );
        assert!(lower.contains("referrer-policy: no-referrer"), "{answer}");
        assert!(lower.contains("cache-control: no-store"), "{answer}");
    }
    let (_, page) = get(addr, "/", &[("Host", &host)]).await;
    // No inline script: the one script is the server's own file.
    assert_eq!(page.matches("<script").count(), 1, "{page}");
    assert!(page.contains(r#"<script src="/app.js" defer></script>"#));
    assert!(!page.contains("golden"), "the page carries no record data");
    stop.cancel();
}

#[tokio::test]
async fn the_api_needs_the_token_and_this_servers_names() {
    let (addr, stop) = start(&vector("golden/golden.aarl")).await;
    let host = host(addr);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _) = get(addr, "/api/calls", &[("Host", &host)]).await;
    assert_eq!(status, 401);
    let (status, _) = get(
        addr,
        "/api/calls",
        &[
            ("Host", &host),
            ("Authorization", "Bearer console-test-token-7d1e"),
        ],
    )
    .await;
    assert_eq!(status, 401, "a token one byte off");
    // A page of another site, or a name rebound to this address, is refused before
    // the token is even read.
    let (status, _) = get(
        addr,
        "/api/calls",
        &[
            ("Host", &host),
            ("Origin", "http://evil.example"),
            ("Authorization", &bearer),
        ],
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = get(
        addr,
        "/",
        &[("Host", &format!("evil.example:{}", addr.port()))],
    )
    .await;
    assert_eq!(status, 403);
    let (status, answer) = get(
        addr,
        "/api/calls",
        &[
            ("Host", &host),
            ("Origin", &format!("http://{host}")),
            ("Authorization", &bearer),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    stop.cancel();
}

/// The JSON body of an answer.
fn body(answer: &str) -> aegis_record::json::Object {
    let json = answer.split("\r\n\r\n").nth(1).unwrap();
    match aegis_record::json::parse(json.as_bytes()).unwrap() {
        aegis_record::json::Value::Object(o) => o,
        other => panic!("{other:?}"),
    }
}

/// `GET /api/calls` with the token: its JSON body.
async fn listed(addr: SocketAddr) -> aegis_record::json::Object {
    let bearer = format!("Bearer {TOKEN}");
    let (_, answer) = get(
        addr,
        "/api/calls",
        &[("Host", &host(addr)), ("Authorization", &bearer)],
    )
    .await;
    body(&answer)
}

#[tokio::test]
async fn a_records_calls_are_listed_under_its_verdict_and_none_of_a_tampered_one() {
    let (addr, stop) = start(&vector("golden/golden.aarl")).await;
    let listing = listed(addr).await;
    assert_eq!(
        listing.get("verdict").and_then(|v| v.as_str()),
        Some("verified")
    );
    let calls = listing.get("calls").and_then(|c| c.as_array()).unwrap();
    assert_eq!(calls.len(), 9, "{listing:?}");
    stop.cancel();

    let tampered = std::fs::read_dir(vector("tampered"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "aarl"))
        .unwrap();
    let (addr, stop) = start(&tampered).await;
    let listing = listed(addr).await;
    assert_eq!(
        listing.get("verdict").and_then(|v| v.as_str()),
        Some("tampered")
    );
    assert_eq!(
        listing
            .get("calls")
            .and_then(|c| c.as_array())
            .map(|calls| calls.len()),
        Some(0)
    );
    stop.cancel();
}
