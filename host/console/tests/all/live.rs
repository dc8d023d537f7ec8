//! Records followed as a host writes them: calls arrive as their lines verify, each
//! file under its verdict, a Tampered backlog shows nothing, a line tampered later
//! turns the file's verdict at once, a directory's new session files are picked up,
//! and a call opens to its raw lines.

use crate::client::{Events, bearer, body, get, host, of_kind, over, text, verdict, watch};
use aegis_console::feed::Source;
use aegis_record::SigningKey;
use aegis_record::chain::Session;
use aegis_record::json::{Object, Value};
use aegis_record::verify::{Options, TrustAnchor, Verdict, verify};
use aegis_test_support::lines::{self, AppendFile};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn vector(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../spec/vectors")
        .join(path)
}

/// A session writing to `path`, its open line naming `hostname`.
fn session(path: &Path, hostname: &str) -> Session {
    session_signed_by(path, hostname, SigningKey::generate().unwrap())
}

fn session_signed_by(path: &Path, hostname: &str, key: SigningKey) -> Session {
    let mut host = Object::new();
    host.insert("hostname", hostname);
    let mut provenance = Object::new();
    provenance.insert("host", host);
    let mut extensions = Object::new();
    extensions.insert("provenance", provenance);
    Session::open(AppendFile::at(path), key, None, extensions).unwrap()
}

/// A call the policy refused with `reason`: its intent and outcome.
fn denied(session: &Session, call: &str, tool: &str, reason: &str) {
    session.append_unsigned(&lines::intent(call, tool)).unwrap();
    session
        .append(&lines::policy_denied(call, tool, reason))
        .unwrap();
}

/// A console over the record at `file`, and a page's stream of it once its first
/// `calls` calls have come.
async fn following(file: &Path, calls_first: usize) -> (Events, CancellationToken) {
    let (_, stop, mut events) = watch(over(Source::File(file.to_owned()))).await;
    events.until(|e| calls(e).len() == calls_first).await;
    (events, stop)
}

fn calls(events: &[Object]) -> Vec<&Object> {
    of_kind(events, "call")
}

fn tool(call: &Object) -> &str {
    text(call, &["row", "tool_id"]).unwrap()
}

#[tokio::test]
async fn a_records_calls_come_under_its_verdict_and_none_of_a_tampered_one() {
    let (_, stop, mut events) = watch(over(Source::File(vector("golden/golden.aarl")))).await;
    let seen = events.until_judged().await;
    // Consistent, but pinned to no key: not called verified.
    assert_eq!(verdict(seen), Some("unpinned"), "{seen:#?}");
    // The backlog is published with its verdict, not before it.
    assert_eq!(calls(seen).len(), 9, "{seen:#?}");
    assert_eq!(of_kind(seen, "session").len(), 1, "{seen:#?}");
    stop.cancel();

    // Every committed tampered vector: the console's verdict is `aegis verify`'s for
    // the same bytes (unpinned), and a Tampered one shows no call.
    let mut tampered = 0;
    for entry in std::fs::read_dir(vector("tampered")).unwrap() {
        let record = entry.unwrap().path();
        if record.extension().is_none_or(|e| e != "aarl") {
            continue;
        }
        let bytes = std::fs::read(&record).unwrap();
        let report = verify(bytes.as_slice(), &Options::default()).unwrap();
        let expected = aegis_console::feed::verdict_of(&report).0;
        assert_eq!(
            expected == "tampered",
            matches!(report.verdict(), Verdict::Tampered(_))
        );
        let (_, stop, mut events) = watch(over(Source::File(record.clone()))).await;
        let seen = events.until_judged().await;
        assert_eq!(verdict(seen), Some(expected), "{record:?}: {seen:#?}");
        if expected == "tampered" {
            tampered += 1;
            assert!(calls(seen).is_empty(), "{record:?}: {seen:#?}");
        }
        stop.cancel();
    }
    assert!(tampered >= 20, "{tampered}");
}

#[tokio::test]
async fn calls_arrive_as_the_record_grows_and_a_tampered_line_turns_the_verdict_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    let writer = session(&file, "build-07");
    denied(&writer, "c0", "read", "before the console");
    let (addr, stop, mut events) = watch(over(Source::File(file.clone()))).await;
    events.until(|e| calls(e).len() == 1).await;
    // A page that connects later is sent everything from the start.
    let mut late = Events::open(addr).await;
    late.until(|e| calls(e).len() == 1).await;

    denied(&writer, "c1", "write", "<img src=x onerror=alert(1)>");
    let seen = events.until(|e| calls(e).len() == 2).await;
    let c1 = calls(seen)[1];
    assert_eq!(tool(c1), "write");
    assert_eq!(text(c1, &["host"]), Some("build-07"));
    assert_eq!(text(c1, &["row", "verdict"]), Some("denied"));
    // Text a tool or policy wrote is sent as the record holds it; the page writes it
    // as text (the browser tests show it stays inert).
    assert_eq!(
        text(c1, &["row", "reason"]),
        Some("<img src=x onerror=alert(1)>")
    );
    assert_eq!(verdict(seen), Some("indeterminate"), "unpinned: {seen:#?}");

    // A line that contradicts the record: the file is Tampered at once, and nothing
    // after it is read.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    f.write_all(b"{\"line_type\":\"outcome\",\"seq\":99}\n")
        .unwrap();
    denied(&writer, "c2", "read", "after the forgery");
    let seen = events.until(|e| verdict(e) == Some("tampered")).await;
    let last = of_kind(seen, "file").last().copied().unwrap();
    assert!(text(last, &["stopped"]).is_some(), "{last:?}");
    let seen = late.until(|e| verdict(e) == Some("tampered")).await;
    assert!(
        calls(seen)
            .iter()
            .all(|c| tool(c) != "read" || text(c, &["row", "call_id"]) != Some("c2"))
    );
    stop.cancel();
}

#[tokio::test]
async fn a_record_cut_shorter_is_tampered_and_one_replaced_is_followed_anew() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    let writer = session(&file, "h");
    denied(&writer, "c0", "read", "x");
    let (mut events, stop) = following(&file, 1).await;
    // The bytes read are no longer the file's: Tampered.
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let seen = events.until(|e| verdict(e) == Some("tampered")).await;
    let last = of_kind(seen, "file").last().copied().unwrap();
    assert!(
        text(last, &["headline"]).is_some_and(|h| h.contains("shrank")),
        "{last:?}"
    );
    stop.cancel();

    // Another record put in its place: what was read keeps its verdict, and the new
    // file is followed as one of its own.
    let other = dir.path().join("s.aarl");
    let writer = session(&other, "h");
    denied(&writer, "c0", "read", "x");
    let (mut events, stop) = following(&other, 1).await;
    let replacement = dir.path().join("new.aarl");
    let next = session(&replacement, "h3");
    denied(&next, "c0", "read", "the replacement");
    std::fs::rename(&replacement, &other).unwrap();
    let seen = events
        .until(|e| calls(e).iter().any(|c| text(c, &["host"]) == Some("h3")))
        .await;
    let stopped = of_kind(seen, "file")
        .into_iter()
        .find(|f| text(f, &["stopped"]).is_some_and(|s| s.contains("replaced")))
        .unwrap_or_else(|| panic!("{seen:#?}"));
    assert_ne!(text(stopped, &["verdict"]), Some("tampered"), "{stopped:?}");
    stop.cancel();
}

#[tokio::test]
async fn a_directorys_session_files_are_followed_and_new_ones_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let first = session(&dir.path().join("a.aarl"), "web-1");
    denied(&first, "c0", "fetch", "one");
    // Neither a link nor a FIFO beneath it is opened.
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.aarl")).unwrap();
    let (_, stop, mut events) = watch(over(Source::Directory(dir.path().to_owned()))).await;
    events.until(|e| calls(e).len() == 1).await;

    std::fs::create_dir(dir.path().join("later")).unwrap();
    let second = session(&dir.path().join("later/b.aarl"), "db-2");
    denied(&second, "c0", "query", "two");
    denied(&first, "c1", "fetch", "three");
    let seen = events.until(|e| calls(e).len() == 3).await;
    let hosts: Vec<_> = calls(seen)
        .iter()
        .map(|c| (tool(c), text(c, &["host"]).unwrap()))
        .collect();
    assert!(hosts.contains(&("query", "db-2")), "{hosts:?}");
    assert_eq!(hosts.iter().filter(|(_, h)| *h == "web-1").count(), 2);
    let files = of_kind(seen, "file");
    let link = files
        .iter()
        .find(|f| text(f, &["name"]).is_some_and(|n| n.ends_with("link.aarl")))
        .unwrap_or_else(|| panic!("{files:#?}"));
    assert_eq!(text(link, &["verdict"]), Some("unread"), "{link:?}");
    stop.cancel();
}

#[tokio::test]
async fn a_call_opens_to_its_raw_lines_and_the_command_that_verifies_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("it's.aarl");
    let writer = session(&file, "h");
    denied(&writer, "c0", "read", "no");
    let (addr, stop, mut events) = watch(over(Source::File(file.clone()))).await;
    let seen = events.until(|e| calls(e).len() == 1).await;
    let n = calls(seen)[0].get("call").unwrap().as_int().unwrap();
    let (status, answer) = get(
        addr,
        &format!("/api/calls/{n}"),
        &[("Host", &host(addr)), ("Authorization", &bearer())],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let evidence = body(&answer);
    let Some(Value::Array(lines)) = evidence.get("lines") else {
        panic!("{evidence:?}")
    };
    let kinds: Vec<_> = lines
        .iter()
        .map(|l| text(l.as_object().unwrap(), &["kind"]).unwrap())
        .collect();
    assert_eq!(kinds, ["open", "intent", "outcome"]);
    // Each line as the file holds it.
    let written = std::fs::read_to_string(&file).unwrap();
    for l in lines {
        let line = text(l.as_object().unwrap(), &["line"]).unwrap();
        assert!(written.lines().any(|w| w == line), "{line}");
    }
    assert_eq!(
        text(&evidence, &["verify"]),
        Some(
            format!(
                "aegis verify -- '{}'",
                file.display().to_string().replace('\'', r"'\''")
            )
            .as_str()
        )
    );
    stop.cancel();
}

#[tokio::test]
async fn a_record_is_called_verified_only_when_pinned_to_the_operators_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    let key = SigningKey::generate().unwrap();
    let public = key.public_key();
    let writer = session_signed_by(&file, "h", key);
    denied(&writer, "c0", "read", "no");
    writer.close().unwrap();
    for (trust, expected) in [
        (None, "unpinned"),
        (Some(vec![TrustAnchor::from(public)]), "verified"),
    ] {
        let mut console = over(Source::File(file.clone()));
        console.trust = trust;
        let (_, stop, mut events) = watch(console).await;
        let seen = events.until_judged().await;
        assert_eq!(verdict(seen), Some(expected), "{seen:#?}");
        stop.cancel();
    }
}

#[tokio::test]
async fn a_record_removed_is_no_longer_followed_nor_called_tampered_and_its_successor_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.aarl");
    let writer = session(&file, "h");
    denied(&writer, "c0", "read", "x");
    let (mut events, stop) = following(&file, 1).await;
    std::fs::remove_file(&file).unwrap();
    let seen = events
        .until(|e| {
            of_kind(e, "file")
                .last()
                .is_some_and(|f| text(f, &["stopped"]).is_some())
        })
        .await;
    let last = of_kind(seen, "file").last().copied().unwrap();
    assert!(
        text(last, &["stopped"]).is_some_and(|s| s.contains("removed")),
        "{last:?}"
    );
    assert_ne!(text(last, &["verdict"]), Some("tampered"), "{last:?}");
    // A new record at that name (a rotation) is followed as a file of its own.
    let next = session(&file, "h2");
    denied(&next, "c0", "read", "after the rotation");
    events
        .until(|e| calls(e).iter().any(|c| text(c, &["host"]) == Some("h2")))
        .await;
    stop.cancel();
}

/// Past the cap of files read at once, a new session file in a directory takes the
/// place of one whose session closed: the newest live session is never the one left
/// out.
#[tokio::test]
async fn past_the_cap_a_new_session_takes_the_place_of_a_closed_one() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..aegis_console::feed::MAX_FILES {
        let closed = session(&dir.path().join(format!("a-{i:04}.aarl")), "old");
        denied(&closed, "c0", "read", "old");
        closed.close().unwrap();
    }
    let (_, stop, mut events) = watch(over(Source::Directory(dir.path().to_owned()))).await;
    events
        .until(|e| calls(e).len() == aegis_console::feed::MAX_FILES)
        .await;
    let live = session(&dir.path().join("z-live.aarl"), "new");
    denied(&live, "c0", "write", "the newest");
    let seen = events
        .until(|e| calls(e).iter().any(|c| text(c, &["host"]) == Some("new")))
        .await;
    let let_go = of_kind(seen, "file")
        .into_iter()
        .filter(|f| text(f, &["stopped"]).is_some_and(|s| s.contains("to make room")))
        .count();
    assert_eq!(let_go, 1, "one closed session let go for the new one");
    stop.cancel();
}

/// A store of one session, its lines written by the record's writer: listed `behind`
/// lines short of what it holds (as a database's listing lags a host committing
/// between the console's listing and its read), and named `twice` in its listing.
struct OneSessionStore {
    lines: Vec<Vec<u8>>,
    behind: usize,
    twice: bool,
}

impl aegis_console::feed::SessionStore for OneSessionStore {
    fn location(&self) -> String {
        "a test store".into()
    }
    fn sessions(&self) -> Result<Vec<aegis_console::feed::StoredSession>, String> {
        let listed = aegis_console::feed::StoredSession {
            id: "s1".into(),
            lines: (self.lines.len() - self.behind) as u64,
        };
        let mut sessions = vec![listed.clone()];
        if self.twice {
            sessions.push(aegis_console::feed::StoredSession { lines: 1, ..listed });
        }
        Ok(sessions)
    }
    fn read(&self, _id: &str, start: u64, max: u32) -> Result<Vec<Vec<u8>>, String> {
        // Everything committed, whatever the listing said.
        Ok(self
            .lines
            .iter()
            .skip(start as usize)
            .take(max as usize)
            .cloned()
            .collect())
    }
    fn verify_command(&self, id: &str) -> String {
        format!("export {id}, then aegis verify it")
    }
}

/// A store holding one session of three refused calls.
fn one_session_store(behind: usize, twice: bool) -> OneSessionStore {
    let sink = aegis_record::chain::VecSink::new();
    let writer = Session::open(
        Arc::new(sink.clone()),
        SigningKey::generate().unwrap(),
        None,
        Object::new(),
    )
    .unwrap();
    for i in 0..3 {
        denied(&writer, &format!("c{i}"), "read", "x");
    }
    let lines = sink
        .contents()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    OneSessionStore {
        lines,
        behind,
        twice,
    }
}

/// The lines past a store's listing wait for a listing that names them, and the
/// session is not called Tampered for holding more than it was listed with.
#[tokio::test]
async fn a_stored_session_is_read_no_further_than_its_listing() {
    // Listed without the last call's two lines.
    let store = one_session_store(2, false);
    let (addr, stop, mut events) = watch(over(Source::Store(Arc::new(store)))).await;
    let seen = events.until_judged().await;
    assert_ne!(verdict(seen), Some("tampered"), "{seen:#?}");
    assert_eq!(calls(seen).len(), 2, "{seen:#?}");
    // Looked at again for a while: still not Tampered.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let mut again = Events::open(addr).await;
    let seen = again.until_judged().await;
    assert!(
        of_kind(seen, "file")
            .iter()
            .all(|f| text(f, &["verdict"]) != Some("tampered")),
        "{seen:#?}"
    );
    stop.cancel();
}

/// A listing that names a session twice (with two line counts) is refused, not read
/// as either mention.
#[tokio::test]
async fn a_store_listing_a_session_twice_is_refused() {
    let store = one_session_store(0, true);
    let (_, stop, mut events) = watch(over(Source::Store(Arc::new(store)))).await;
    let seen = events.until(|e| verdict(e) == Some("unread")).await;
    let refused = of_kind(seen, "file").last().copied().unwrap();
    assert!(
        text(refused, &["headline"]).is_some_and(|h| h.contains("twice")),
        "{refused:?}"
    );
    assert!(calls(seen).is_empty(), "{seen:#?}");
    stop.cancel();
}
