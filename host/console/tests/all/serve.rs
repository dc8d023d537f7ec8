//! The console served on a loopback port, asked as a browser and as an attacker would:
//! the page and its security header fields, the API behind the token, foreign hosts
//! and origins refused.

use crate::client::{bearer, get, host, over, start};
use aegis_console::CSP;
use aegis_console::feed::Source;
use std::path::Path;

fn golden() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/vectors/golden/golden.aarl")
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_policy_and_no_data() {
    let (addr, stop) = start(over(Source::File(golden()))).await;
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
    let (addr, stop) = start(over(Source::File(golden()))).await;
    let host = host(addr);
    let bearer = bearer();
    let (status, _) = get(addr, "/api/calls/999999", &[("Host", &host)]).await;
    assert_eq!(status, 401);
    let (status, _) = get(
        addr,
        "/api/calls/999999",
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
        "/api/calls/999999",
        &[
            ("Host", &host),
            ("Origin", "http://evil.example"),
            ("Authorization", &bearer),
        ],
    )
    .await;
    assert_eq!(status, 403);
    let (status, refused) = get(
        addr,
        "/",
        &[("Host", &format!("evil.example:{}", addr.port()))],
    )
    .await;
    assert_eq!(status, 403);
    // The guard's own refusals carry the security header fields too.
    let lower = refused.to_ascii_lowercase();
    assert!(
        lower.contains("content-security-policy: default-src 'none'")
            && lower.contains("x-content-type-options: nosniff"),
        "{refused}"
    );
    let (status, answer) = get(
        addr,
        "/api/calls/999999",
        &[
            ("Host", &host),
            ("Origin", &format!("http://{host}")),
            ("Authorization", &bearer),
        ],
    )
    .await;
    // Past the token and the names: there is no such call.
    assert_eq!(status, 404, "{answer}");
    stop.cancel();
}
