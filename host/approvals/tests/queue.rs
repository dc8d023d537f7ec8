//! The queue on real files, with real threads and a real second process.

use aegis_approvals::{
    ClaimError, DecideError, DecisionFile, Front, Queue, QueueError, Request, State,
};
use aegis_record::approval::HostSettled;
use aegis_record::json::SafeInt;
use aegis_record::{ApprovalScope, Approver, DecisionVerdict, SigningKey};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The record's time `secs` from now (negative: in the past).
fn time_in(secs: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    aegis_record::time::format_micros((now + secs * 1_000_000) as u64)
}

fn request(expires_in: i64) -> Request {
    let mut r = Request {
        approval_id: aegis_record::line::new_approval_id(),
        parked_at: time_in(0),
        expires_at: time_in(expires_in),
        host: "test-host".into(),
        pid: SafeInt::from(std::process::id()),
        front: Front::Wrap,
        record: "/tmp/record.aarl".into(),
        tool_id: "read_file".into(),
        rule: Some("ask-for-reads".into()),
        reason: Some("reads need a person".into()),
        arguments: None,
        arguments_cut: false,
        bound: None,
        scope: scope(),
    };
    r.set_arguments(r#"{"path":"/notes/a.txt"}"#.into());
    r
}

fn scope() -> ApprovalScope {
    ApprovalScope {
        tool_id: "read_file".into(),
        arguments_digest: None,
        fs: None,
        net: None,
        expires_at: Some(time_in(600)),
    }
}

/// A decision by a fresh key (`via` "key") or by the host on expiry (`via` "host",
/// which only denies).
fn decision(id: &str, via: &str, approve: bool) -> DecisionFile {
    let verdict = if approve && via != "host" {
        DecisionVerdict::Approved { scope: scope() }
    } else {
        DecisionVerdict::Denied {
            reason: "no".into(),
        }
    };
    let approver = if via == "host" {
        Approver::Host {
            why: HostSettled::Expired,
        }
    } else {
        aegis_record::approval::sign(&SigningKey::generate().unwrap(), id, &verdict)
    };
    DecisionFile {
        approval_id: id.to_owned(),
        verdict,
        approver,
        decided_at: time_in(0),
    }
}

fn queue() -> (tempfile::TempDir, Queue) {
    let tmp = tempfile::tempdir().unwrap();
    let q = Queue::open(&tmp.path().join("state/aegis/approvals")).unwrap();
    (tmp, q)
}

#[test]
fn open_makes_private_directories_and_refuses_unsafe_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b/approvals");
    Queue::open(&dir).unwrap();
    for d in [tmp.path().join("a"), tmp.path().join("a/b"), dir.clone()] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    // Open to others.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = Queue::open(&dir).unwrap_err();
    assert!(matches!(e, QueueError::Directory { .. }), "{e}");
    assert!(e.to_string().contains("0755"), "{e}");
    // A link to a good directory.
    let good = tmp.path().join("good");
    Queue::open(&good).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let e = Queue::open(&link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A file.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let e = Queue::open(&file).unwrap_err();
    assert!(e.to_string().contains("not a directory"), "{e}");
}

#[test]
fn a_directory_of_another_user_is_refused() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs root to give a directory away");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("approvals");
    Queue::open(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
    let e = Queue::open(&dir).unwrap_err();
    assert!(e.to_string().contains("uid 65534"), "{e}");
}

#[test]
fn a_request_round_trips_and_a_listing_ignores_other_names() {
    let (_tmp, q) = queue();
    let r = request(600);
    q.file(&r).unwrap();
    assert_eq!(q.request(&r.approval_id).unwrap(), r);
    // Filing it again never replaces it.
    assert!(q.file(&r).is_err());
    for name in [
        "notes.txt",
        "apr-XYZ.request",
        "apr-0123.request",
        &format!("{}.request.bak", r.approval_id),
        &format!("{}.request", r.approval_id.to_uppercase()),
        ".aegis-0011223344556677.tmp",
    ] {
        std::fs::write(q.dir().unwrap().join(name), b"{garbage").unwrap();
    }
    std::fs::create_dir(q.dir().unwrap().join("apr-0000.request")).unwrap();
    let listed = q.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].request, r);
    assert_eq!(listed[0].state, State::Pending);
}

#[test]
fn long_arguments_are_left_out_and_said_to_be() {
    let (_tmp, q) = queue();
    let mut r = request(600);
    r.set_arguments(format!(r#"{{"text":"{}"}}"#, "x".repeat(70 << 10)));
    assert!(r.arguments.is_none() && r.arguments_cut);
    q.file(&r).unwrap();
    assert!(q.request(&r.approval_id).unwrap().arguments_cut);
}

#[test]
fn a_request_with_a_duplicate_key_or_an_unknown_member_is_refused() {
    let (_tmp, q) = queue();
    let r = request(600);
    let good = String::from_utf8(r.to_object().to_canonical()).unwrap();
    let path = q.request_path(&r.approval_id);
    let write = |text: &str| {
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    // The tool named twice: which one would a person be approving?
    write(&good.replacen('{', r#"{"tool_id":"delete_everything","#, 1));
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(matches!(e, QueueError::Json { .. }), "{e}");
    assert!(e.to_string().contains("duplicate key"), "{e}");
    assert!(q.list().is_err(), "a listing refuses it too");
    write(&good.replacen('{', r#"{"extra":"x","#, 1));
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(e.to_string().contains("extra: not a member"), "{e}");
    // Named for one id, holding another.
    let other = request(600);
    write(&String::from_utf8(other.to_object().to_canonical()).unwrap());
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(e.to_string().contains("named for"), "{e}");
}

#[test]
fn a_link_a_fifo_a_foreign_or_writable_file_is_refused() {
    let (tmp, q) = queue();
    let r = request(600);
    let path = q.request_path(&r.approval_id);
    // A link to a well-formed request elsewhere.
    let elsewhere = tmp.path().join("planted");
    std::fs::write(&elsewhere, r.to_object().to_canonical()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    std::fs::remove_file(&path).unwrap();
    // A FIFO: refused, not blocked on.
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");
    std::fs::remove_file(&path).unwrap();
    // Writable by others.
    q.file(&r).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o622)).unwrap();
    let e = q.request(&r.approval_id).unwrap_err();
    assert!(matches!(e, QueueError::Foreign { .. }), "{e}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    q.request(&r.approval_id).unwrap();
    if rustix::process::geteuid().as_raw() == 0 {
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let e = q.request(&r.approval_id).unwrap_err();
        assert!(e.to_string().contains("uid 65534"), "{e}");
    }
}

#[test]
fn an_id_of_another_form_is_refused() {
    let (_tmp, q) = queue();
    for id in [
        "",
        "apr-",
        "../etc/passwd",
        "apr-0123456789ABCDEF0123456789abcdef",
    ] {
        assert!(
            matches!(q.request(id), Err(QueueError::BadId { .. })),
            "{id}"
        );
        assert!(matches!(
            q.claim(id),
            Err(ClaimError::Queue(QueueError::BadId { .. }))
        ));
    }
}

#[test]
fn deciders_racing_have_exactly_one_winner() {
    let (_tmp, q) = queue();
    for _ in 0..20 {
        let r = request(600);
        q.file(&r).unwrap();
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (q, barrier, id) = (q.clone(), barrier.clone(), r.approval_id.clone());
                std::thread::spawn(move || {
                    let d = decision(&id, if i == 0 { "host" } else { "key" }, i % 2 == 0);
                    barrier.wait();
                    q.decide(&d).map(|()| d)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "{results:?}");
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(matches!(e, DecideError::AlreadyDecided { .. }), "{e}");
        }
        // The decision that stands is the winner's.
        assert_eq!(
            q.state(&r.approval_id).unwrap(),
            State::Decided(won[0].clone())
        );
    }
}

/// A host waiting on a request claims a decision the moment it appears (`aegis
/// gateway` and `wrap` do, woken by inotify): the decider is still told its decision
/// was placed, not that another came first, and the claim is of that decision.
#[test]
fn a_decision_claimed_as_soon_as_it_is_placed_is_reported_placed() {
    let (_tmp, q) = queue();
    for _ in 0..50 {
        let r = request(600);
        q.file(&r).unwrap();
        let claimer = {
            let (q, id) = (q.clone(), r.approval_id.clone());
            std::thread::spawn(move || {
                loop {
                    match q.claim(&id) {
                        Ok(d) => return d,
                        Err(ClaimError::NotDecided { .. }) => std::hint::spin_loop(),
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        };
        let d = decision(&r.approval_id, "key", true);
        q.decide(&d).unwrap();
        assert_eq!(claimer.join().unwrap(), d);
    }
}

#[test]
fn a_decision_is_claimed_once_and_never_replaced() {
    let (_tmp, q) = queue();
    let r = request(600);
    q.file(&r).unwrap();
    let id = &r.approval_id;
    assert!(matches!(q.claim(id), Err(ClaimError::NotDecided { .. })));
    let d = decision(id, "key", true);
    q.decide(&d).unwrap();
    let barrier = Arc::new(Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (q, barrier, id) = (q.clone(), barrier.clone(), id.clone());
            std::thread::spawn(move || {
                barrier.wait();
                q.claim(&id)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let claimed: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(claimed, [&d], "{results:?}");
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(matches!(e, ClaimError::AlreadyUsed { .. }), "{e}");
    }
    assert!(matches!(q.claim(id), Err(ClaimError::AlreadyUsed { .. })));
    // Once used, no second decision can be placed to be claimed again.
    let e = q.decide(&decision(id, "key", false)).unwrap_err();
    assert!(matches!(e, DecideError::AlreadyDecided { .. }), "{e}");
    assert!(!q.dir().unwrap().join(format!("{id}.decision")).exists());
    assert_eq!(q.state(id).unwrap(), State::Used(d));
    q.remove(id).unwrap();
    assert!(q.list().unwrap().is_empty());
    assert!(
        std::fs::read_dir(q.dir().unwrap())
            .unwrap()
            .next()
            .is_none()
    );
}

#[test]
fn an_expired_request_takes_only_the_hosts_own_decision() {
    let (_tmp, q) = queue();
    let r = request(-1);
    q.file(&r).unwrap();
    assert_eq!(q.state(&r.approval_id).unwrap(), State::Expired);
    let e = q
        .decide(&decision(&r.approval_id, "key", true))
        .unwrap_err();
    assert!(matches!(e, DecideError::Expired { .. }), "{e}");
    q.decide(&decision(&r.approval_id, "host", false)).unwrap();
    let missing = decision(&aegis_record::line::new_approval_id(), "key", true);
    assert!(matches!(
        q.decide(&missing),
        Err(DecideError::NoSuchRequest { .. })
    ));
}

#[test]
fn a_wait_ends_at_its_deadline_without_a_decision() {
    let (_tmp, q) = queue();
    let r = request(600);
    q.file(&r).unwrap();
    // Other files coming and going do not end it.
    let other = request(600);
    q.file(&other).unwrap();
    q.decide(&decision(&other.approval_id, "key", true))
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(300);
    assert_eq!(q.wait(&r.approval_id, deadline).unwrap(), None);
    // The contract, not a speed: a wait that finds nothing never returns early.
    assert!(Instant::now() >= deadline);
}

#[test]
fn a_wait_is_woken_by_a_decision_from_another_thread() {
    let (_tmp, q) = queue();
    let r = request(600);
    q.file(&r).unwrap();
    let d = decision(&r.approval_id, "key", false);
    let decider = {
        let (q, d) = (q.clone(), d.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            q.decide(&d).unwrap();
        })
    };
    // A wait that timed out returns None: Some means the decision woke it.
    let got = q
        .wait(&r.approval_id, Instant::now() + Duration::from_secs(60))
        .unwrap();
    assert_eq!(got, Some(d));
    decider.join().unwrap();
    // Already decided: the wait finds it without an event.
    assert!(
        q.wait(&r.approval_id, Instant::now() + Duration::from_secs(60))
            .unwrap()
            .is_some()
    );
}

/// The child of `a_wait_is_woken_by_a_decision_from_another_process`: decides the
/// request its environment names, after a moment. Does nothing when run as a test.
#[test]
fn child_decides() {
    let Ok(job) = std::env::var("AEGIS_APPROVALS_TEST_CHILD") else {
        return;
    };
    let (dir, id) = job.split_once('\n').unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let q = Queue::open(Path::new(dir)).unwrap();
    q.decide(&decision(id, "key", true)).unwrap();
}

#[test]
fn a_wait_is_woken_by_a_decision_from_another_process() {
    let (_tmp, q) = queue();
    let r = request(600);
    q.file(&r).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_decides", "--quiet", "--test-threads=1"])
        .env(
            "AEGIS_APPROVALS_TEST_CHILD",
            format!("{}\n{}", q.dir().unwrap().display(), r.approval_id),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Some, not None: the child's decision woke the wait before its deadline.
    let got = q
        .wait(&r.approval_id, Instant::now() + Duration::from_secs(60))
        .unwrap()
        .expect("the child's decision");
    assert_eq!(got.approval_id, r.approval_id);
    assert!(child.wait().unwrap().success());
    assert_eq!(q.claim(&r.approval_id).unwrap(), got);
}

#[test]
fn a_listing_past_its_bound_is_refused_not_cut() {
    let (_tmp, q) = queue();
    for i in 0..=aegis_approvals::MAX_ENTRIES {
        std::fs::write(q.dir().unwrap().join(format!("junk-{i}")), b"").unwrap();
    }
    let e = q.list().unwrap_err();
    assert!(matches!(e, QueueError::TooMany { .. }), "{e}");
}

/// The queue over a store that answers what no real store should (the PostgreSQL store
/// is tested against a real server: sinks/postgres/tests/store.rs and aegis's
/// approvals_store tests): what it lists is refused rather than read one of two ways.
mod over_a_store {
    use super::request;
    use aegis_approvals::{Queue, QueueError, Store, Stored};
    use std::sync::Arc;
    use std::time::Duration;

    /// A store whose listing is fixed, and which refuses everything else.
    #[derive(Debug)]
    struct Listing(Vec<Stored>);

    impl Store for Listing {
        fn location(&self) -> String {
            "test-store".into()
        }
        fn file(&self, _: &str, _: &[u8]) -> Result<bool, String> {
            Err("read-only".into())
        }
        fn read(&self, id: &str) -> Result<Option<Stored>, String> {
            Ok(self.0.iter().find(|r| r.id == id).cloned())
        }
        fn list(&self, _: usize) -> Result<Vec<Stored>, String> {
            Ok(self.0.clone())
        }
        fn decide(&self, _: &str, _: &[u8]) -> Result<bool, String> {
            Err("read-only".into())
        }
        fn claim(&self, _: &str) -> Result<Option<Vec<u8>>, String> {
            Err("read-only".into())
        }
        fn wait(&self, _: &str, _: Duration) -> Result<bool, String> {
            Err("read-only".into())
        }
        fn remove(&self, _: &str) -> Result<(), String> {
            Err("read-only".into())
        }
    }

    fn row(id: &str, request: &[u8]) -> Stored {
        Stored {
            id: id.into(),
            request: request.to_vec(),
            decision: None,
            used: false,
        }
    }

    #[test]
    fn a_listing_naming_one_id_twice_or_a_malformed_id_is_refused() {
        let r = request(600);
        let bytes = r.to_object().to_canonical();
        let once = Queue::in_store(Arc::new(Listing(vec![row(&r.approval_id, &bytes)])));
        assert_eq!(once.list().unwrap().len(), 1);
        let twice = Queue::in_store(Arc::new(Listing(vec![
            row(&r.approval_id, &bytes),
            row(&r.approval_id, &bytes),
        ])));
        let e = twice.list().unwrap_err();
        assert!(
            matches!(e, QueueError::Field { .. }) && e.to_string().contains("listed twice"),
            "{e}"
        );
        let bad = Queue::in_store(Arc::new(Listing(vec![row("apr-nope", b"{}")])));
        assert!(matches!(bad.list().unwrap_err(), QueueError::BadId { .. }));
    }
}
