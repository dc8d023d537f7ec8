//! The PostgreSQL sink against a real server (a throwaway cluster: see
//! `tests/support`'s `postgres` module): a store made by `init`, record sessions written
//! through the chain writer and read back byte-exact, and every way the store or the
//! writer could let history be rewritten, refused.

use aegis_record::json::Object;
use aegis_record::{LineSink, Session, SigningKey};
use aegis_sink_postgres::PostgresSink;
use aegis_station_api::{ErrorKind, PluginError, Sink};
use aegis_test_support::postgres::{self, Cluster, Shutdown};
use std::sync::{Arc, Mutex};

/// A database and a writer role of this test's own, made by the superuser.
struct Store<'c> {
    cluster: &'c Cluster,
    db: String,
    writer: String,
}

impl<'c> Store<'c> {
    fn new(cluster: &'c Cluster) -> Store<'c> {
        let db = cluster.fresh_database();
        let writer = format!("{db}_w");
        cluster
            .sql(cluster.superuser(), &format!("CREATE ROLE {writer} LOGIN"))
            .unwrap();
        Store {
            cluster,
            db,
            writer,
        }
    }

    fn config(&self, extra: &str) -> String {
        format!(
            "connection = {:?}\nretention_days = 30\n{extra}",
            self.cluster.conninfo_in(&self.db, &self.writer)
        )
    }

    fn init_config(&self) -> String {
        self.config(&format!(
            "init = {{ connection = {:?} }}\n",
            self.cluster.conninfo_in(&self.db, self.cluster.superuser())
        ))
    }

    /// Makes the store as its administrator and opens it as the writer.
    fn init(&self) -> PostgresSink {
        PostgresSink::from_config(&self.init_config()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn open(&self) -> Result<PostgresSink, PluginError> {
        PostgresSink::from_config(&self.config(""))
    }

    fn admin(&self, sql: &str) -> Result<String, String> {
        self.cluster.sql_in(&self.db, self.cluster.superuser(), sql)
    }

    fn as_writer(&self, sql: &str) -> Result<String, String> {
        self.cluster.sql_in(&self.db, &self.writer, sql)
    }
}

/// Gives the chain writer the sink, and keeps a copy of every line it was given.
struct Tee {
    sink: Arc<PostgresSink>,
    copy: Mutex<Vec<u8>>,
}

impl LineSink for Tee {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        self.sink
            .append(line)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.copy.lock().unwrap().extend_from_slice(line);
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        self.sink
            .sync()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

fn open_session(sink: &Arc<PostgresSink>, host: &str) -> (Session, Arc<Tee>) {
    try_open_session(sink, host).unwrap()
}

fn try_open_session(
    sink: &Arc<PostgresSink>,
    host: &str,
) -> Result<(Session, Arc<Tee>), aegis_record::WriteError> {
    let tee = Arc::new(Tee {
        sink: sink.clone(),
        copy: Mutex::new(Vec::new()),
    });
    let mut whereabouts = Object::new();
    whereabouts.insert("hostname", host);
    let mut provenance = Object::new();
    provenance.insert("host", whereabouts);
    let mut extensions = Object::new();
    extensions.insert("provenance", provenance);
    let key = SigningKey::from_seed([7; 32]);
    let session = Session::open(tee.clone(), key, None, extensions)?;
    Ok((session, tee))
}

fn intent(call: usize) -> aegis_record::IntentLine {
    aegis_record::IntentLine {
        call_id: format!("call-{call}"),
        tool_id: "echo".into(),
        request_digest: aegis_record::RequestDigest::of_request(
            format!("{{\"n\":{call}}}").as_bytes(),
        ),
    }
}

fn read_all(sink: &PostgresSink, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let page = sink.read_session(id, start, 3).unwrap();
        for line in &page {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        start += page.len() as u64;
        if page.len() < 3 {
            return out;
        }
    }
}

#[test]
fn sessions_from_two_hosts_are_stored_and_read_back_byte_exact() {
    let store = Store::new(postgres::shared());
    let sink = Arc::new(store.init());
    assert_eq!(sink.retention(), aegis_station_api::Retention::DURABLE);
    assert!(!sink.location().contains("password"));
    // Two writers, as two processes would be, each with a session of its own.
    let other = Arc::new(store.open().unwrap());
    let (a, tee_a) = open_session(&sink, "alpha");
    let (b, tee_b) = open_session(&other, "beta");
    // One sink writes one session at a time: a line cannot say which it belongs to.
    let e = try_open_session(&sink, "alpha").err().unwrap();
    assert!(e.to_string().contains("still open"), "{e}");
    for call in 0..7 {
        a.append_unsigned(&intent(call)).unwrap();
        b.append_unsigned(&intent(call + 100)).unwrap();
    }
    a.close().unwrap();
    b.close().unwrap();
    let all = sink.sessions("", "").unwrap();
    assert_eq!(all.len(), 2);
    // The refused open left nothing behind; after a close, a new session may open.
    let (c, _) = open_session(&sink, "alpha");
    c.close().unwrap();
    assert_eq!(sink.sessions("", "").unwrap().len(), 3);
    for (session, tee) in [(&all[0], &tee_a), (&all[1], &tee_b)] {
        assert_eq!(session.lines, 9, "open, 7 intents, close");
        assert_eq!(read_all(&sink, &session.id), *tee.copy.lock().unwrap());
    }
    let beta = sink.sessions("beta", "").unwrap();
    assert_eq!(beta.len(), 1);
    assert_eq!(beta[0].host.as_str(), "beta");
    assert!(
        sink.sessions("", "2999-01-01T00:00:00.000000Z")
            .unwrap()
            .is_empty()
    );
    let now = sink.sessions("", "").unwrap();
    let since = &now[1].opened;
    assert_eq!(
        sink.sessions("", since).unwrap(),
        now.iter()
            .filter(|s| s.opened >= *since)
            .cloned()
            .collect::<Vec<_>>()
    );
    let e = sink.read_lines(0, 10).err().unwrap();
    assert_eq!(e.kind, ErrorKind::UNSUPPORTED);
    assert!(e.message.contains("--out DIR"), "{}", e.message);
}

#[test]
fn the_database_refuses_to_rewrite_history() {
    let store = Store::new(postgres::shared());
    let sink = Arc::new(store.init());
    let (s, _) = open_session(&sink, "alpha");
    s.append_unsigned(&intent(1)).unwrap();
    let table = "public.aegis_lines";
    for statement in [
        format!("UPDATE {table} SET line = 'x'"),
        format!("DELETE FROM {table}"),
        format!("TRUNCATE {table}"),
        "DROP TABLE public.aegis_lines".to_owned(),
        "ALTER TABLE public.aegis_lines DISABLE TRIGGER ALL".to_owned(),
    ] {
        let e = store
            .as_writer(&statement)
            .err()
            .unwrap_or_else(|| panic!("the writer ran {statement}"));
        assert!(
            e.contains("permission denied") || e.contains("must be owner"),
            "{statement}: {e}"
        );
    }
    // The owner holds every privilege; the trigger still refuses.
    for statement in [
        format!("UPDATE {table} SET line = 'x'"),
        format!("DELETE FROM {table}"),
        format!("TRUNCATE {table}"),
    ] {
        let e = store
            .admin(&statement)
            .err()
            .unwrap_or_else(|| panic!("the owner ran {statement}"));
        assert!(e.contains("append-only"), "{statement}: {e}");
    }
    // A writer cannot backdate a row into deletability: the server stamps it.
    store
        .as_writer("INSERT INTO public.aegis_lines (session, seq, host, line_time, line, stored_at) VALUES ('x', 0, 'h', 't', 'l', '2000-01-01')")
        .unwrap();
    let stamped = store
        .admin("SELECT stored_at > now() - interval '1 hour' FROM public.aegis_lines WHERE session = 'x'")
        .unwrap();
    assert_eq!(stamped, "t");
    // One (session, seq) is stored once.
    let e = store
        .as_writer("INSERT INTO public.aegis_lines (session, seq, host, line_time, line) VALUES ('x', 0, 'h', 't', 'again')")
        .err()
        .unwrap();
    assert!(e.contains("duplicate key"), "{e}");
    assert_eq!(
        store
            .admin("SELECT count(*) FROM public.aegis_lines")
            .unwrap(),
        "3",
        "open, intent, and the writer's own row"
    );
}

#[test]
fn a_store_that_could_be_rewritten_or_lose_a_commit_is_refused_at_open() {
    let store = Store::new(postgres::shared());
    let e = store.open().err().unwrap();
    assert_eq!(e.kind, ErrorKind::REFUSED);
    assert!(e.message.contains("aegis store init"), "{}", e.message);
    drop(store.init());
    store.open().unwrap_or_else(|e| panic!("{e}"));
    let w = &store.writer;
    let cases = [
        (format!("GRANT UPDATE ON public.aegis_lines TO {w}"), "may UPDATE", format!("REVOKE UPDATE ON public.aegis_lines FROM {w}")),
        (format!("GRANT DELETE, TRUNCATE ON public.aegis_lines TO {w}"), "may DELETE, TRUNCATE", format!("REVOKE DELETE, TRUNCATE ON public.aegis_lines FROM {w}")),
        (format!("ALTER TABLE public.aegis_lines OWNER TO {w}"), "owns", format!("ALTER TABLE public.aegis_lines OWNER TO {}", store.cluster.superuser())),
        ("ALTER TABLE public.aegis_lines DISABLE TRIGGER aegis_lines_append_only".to_owned(), "append-only triggers", "ALTER TABLE public.aegis_lines ENABLE TRIGGER aegis_lines_append_only".to_owned()),
        (format!("ALTER ROLE {w} SET synchronous_commit = off"), "synchronous_commit is off", format!("ALTER ROLE {w} RESET synchronous_commit")),
        (format!("ALTER ROLE {w} SUPERUSER"), "may UPDATE", format!("ALTER ROLE {w} NOSUPERUSER")),
        ("CREATE OR REPLACE FUNCTION public.aegis_lines_retention_days() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 7'".to_owned(), "keeps rows 7 days", "CREATE OR REPLACE FUNCTION public.aegis_lines_retention_days() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 30'".to_owned()),
    ];
    for (weaken, says, restore) in cases {
        store.admin(&weaken).unwrap();
        let e = store
            .open()
            .err()
            .unwrap_or_else(|| panic!("opened after {weaken}"));
        assert_eq!(e.kind, ErrorKind::REFUSED, "{weaken}: {}", e.message);
        assert!(e.message.contains(says), "{weaken}: {}", e.message);
        store.admin(&restore).unwrap();
        store
            .open()
            .unwrap_or_else(|e| panic!("after {restore}: {e}"));
    }
    // The administrator must not be the writer.
    let same = store.config(&format!(
        "init = {{ connection = {:?} }}\n",
        store.cluster.conninfo_in(&store.db, w)
    ));
    let e = PostgresSink::from_config(&same).err().unwrap();
    assert!(e.message.contains("one role"), "{}", e.message);
}

#[test]
fn an_unreachable_server_is_named_in_one_line() {
    let cfg = "connection = \"host=/nonexistent/aegis port=1 user=w dbname=d\"\nretention_days = 1";
    let e = PostgresSink::from_config(cfg).err().unwrap();
    assert_eq!(e.kind, ErrorKind::IO);
    assert!(
        e.message.contains(
            "cannot reach the postgresql server /nonexistent/aegis port 1 database d as w"
        ),
        "{}",
        e.message
    );
    assert!(!e.message.contains('\n'), "{}", e.message);
}

#[test]
fn rate_buckets_are_shared_and_refilled_by_the_servers_clock() {
    let store = Store::new(postgres::shared());
    let one = store.init();
    let two = store.open().unwrap();
    // Three calls an hour, from two writers: three tokens in all.
    let taken: Vec<bool> = (0..5)
        .map(|i| {
            if i % 2 == 0 { &one } else { &two }
                .take_rate("rule-a", 3, 3600)
                .unwrap()
        })
        .collect();
    assert_eq!(taken, [true, true, true, false, false]);
    // Another bucket is another budget; a changed rate starts afresh.
    assert!(one.take_rate("rule-b", 1, 3600).unwrap());
    assert!(two.take_rate("rule-a", 4, 3600).unwrap());
    // Refilled continuously: 1000 a second is one a millisecond.
    assert!(one.take_rate("fast", 1000, 1).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(two.take_rate("fast", 1000, 1).unwrap());
}

#[test]
fn a_server_lost_mid_session_stops_the_sink_and_nothing_is_skipped() {
    let mut cluster = postgres::private();
    let store = Store::new(&cluster);
    let sink = Arc::new(store.init());
    let (s, _) = open_session(&sink, "alpha");
    s.append_unsigned(&intent(1)).unwrap();
    let db = store.db.clone();
    drop(store);
    cluster.stop(Shutdown::Immediate);
    let e = s.append_unsigned(&intent(2)).err().unwrap();
    assert!(e.to_string().contains("postgresql server"), "{e}");
    cluster.start();
    // The sink stays stopped: the session's next line is refused, not skipped.
    assert!(s.append_unsigned(&intent(3)).is_err());
    let e = sink.append(b"{}\n").err().unwrap();
    assert!(e.message.contains("sink stopped"), "{}", e.message);
    let stored = cluster
        .sql_in(
            &db,
            cluster.superuser(),
            "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM public.aegis_lines",
        )
        .unwrap();
    assert_eq!(
        stored, "0,1",
        "the open and the first intent; nothing after"
    );
}

/// Lines appended by many writer threads before one sync go in as one statement and one
/// commit (group commit), and come back byte-exact in seq order.
#[test]
fn lines_appended_before_one_sync_are_committed_together() {
    let store = Store::new(postgres::shared());
    let sink = store.init();
    // Real record lines, sealed by the chain writer into memory first.
    let memory = Arc::new(aegis_record::VecSink::new());
    let mut whereabouts = Object::new();
    whereabouts.insert("hostname", "alpha");
    let mut provenance = Object::new();
    provenance.insert("host", whereabouts);
    let mut extensions = Object::new();
    extensions.insert("provenance", provenance);
    let session = Session::open(
        memory.clone(),
        SigningKey::from_seed([9; 32]),
        None,
        extensions,
    )
    .unwrap();
    for call in 0..5 {
        session.append_unsigned(&intent(call)).unwrap();
    }
    session.close().unwrap();
    let written = memory.contents();
    for line in written.split_inclusive(|b| *b == b'\n') {
        sink.append(line).unwrap();
    }
    sink.sync().unwrap();
    let listed = sink.sessions("", "").unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].lines, 7);
    assert_eq!(read_all(&sink, &listed[0].id), written);
}

/// The store's approvals queue: what `aegis approvals` and a waiting host rely on.
mod approvals_queue {
    use super::*;

    /// An approval id, numbered.
    fn approval_id(n: u8) -> String {
        format!("apr-{}", format!("{n:02x}").repeat(16))
    }

    #[test]
    fn the_approvals_queue_is_shared_between_writers_and_each_step_is_taken_once() {
        let store = Store::new(postgres::shared());
        let here = store.init();
        let there = store.open().unwrap();
        let id = approval_id(1);
        assert!(here.approval_file(&id, b"{\"request\":1}").unwrap());
        assert!(
            !there.approval_file(&id, b"{\"request\":2}").unwrap(),
            "a request of one id is filed once"
        );
        let listed = there.approval_list(10).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].request.as_slice(), b"{\"request\":1}");
        assert!(listed[0].decision.is_none() && !listed[0].used);
        assert!(
            here.approval_claim(&id).unwrap().is_none(),
            "nothing to claim yet"
        );
        assert!(there.approval_decide(&id, b"yes").unwrap());
        assert!(
            !here.approval_decide(&id, b"no").unwrap(),
            "the first decision stands"
        );
        assert!(!here.approval_decide(&approval_id(2), b"yes").unwrap());
        assert_eq!(
            here.approval_claim(&id).unwrap().as_deref(),
            Some(&b"yes"[..])
        );
        assert!(there.approval_claim(&id).unwrap().is_none(), "claimed once");
        let read = there.approval_read(&id).unwrap().unwrap();
        assert!(read.used);
        assert_eq!(read.decision.into_option().unwrap().as_slice(), b"yes");
        here.approval_remove(&id).unwrap();
        assert!(there.approval_read(&id).unwrap().is_none());
        assert!(there.approval_list(10).unwrap().is_empty());
    }

    #[test]
    fn a_waiter_is_woken_by_a_decision_from_another_writer() {
        let store = Store::new(postgres::shared());
        let here = Arc::new(store.init());
        let there = store.open().unwrap();
        let (id, other) = (approval_id(3), approval_id(4));
        here.approval_file(&id, b"{}").unwrap();
        here.approval_file(&other, b"{}").unwrap();
        // Nothing decides: the wait ends at its timeout with no decision.
        assert!(!here.approval_wait(&id, 50).unwrap());
        let waiter = {
            let (here, id) = (Arc::clone(&here), id.clone());
            std::thread::spawn(move || here.approval_wait(&id, 120_000))
        };
        // Decided only once the waiter has looked and sleeps on the channel, so it is the
        // notification that wakes it; another id's decision comes first and must not.
        let listening = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND state = 'idle' AND query LIKE 'SELECT decision IS NOT NULL%'",
            store.db
        );
        let mut looks = 0;
        while store.admin(&listening).unwrap() != "1" {
            looks += 1;
            assert!(looks < 6000, "the waiter never started listening");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(there.approval_decide(&other, b"no").unwrap());
        assert!(there.approval_decide(&id, b"yes").unwrap());
        assert!(waiter.join().unwrap().unwrap(), "woken by the decision");
        // Decided before the wait began: seen at once.
        assert!(here.approval_wait(&id, 120_000).unwrap());
    }

    #[test]
    fn deciders_and_claimers_racing_from_many_connections_win_once() {
        let store = Store::new(postgres::shared());
        let first = store.init();
        let id = approval_id(5);
        first.approval_file(&id, b"{}").unwrap();
        let sinks: Vec<PostgresSink> = (0..6).map(|_| store.open().unwrap()).collect();
        let race = |step: &(dyn Fn(&PostgresSink, usize) -> bool + Sync)| -> usize {
            let barrier = std::sync::Barrier::new(sinks.len());
            std::thread::scope(|s| {
                let runs: Vec<_> = sinks
                    .iter()
                    .enumerate()
                    .map(|(n, sink)| {
                        let barrier = &barrier;
                        s.spawn(move || {
                            barrier.wait();
                            step(sink, n)
                        })
                    })
                    .collect();
                runs.into_iter()
                    .map(|r| r.join().unwrap())
                    .filter(|won| *won)
                    .count()
            })
        };
        let decided = race(&|sink, n| {
            sink.approval_decide(&id, format!("d{n}").as_bytes())
                .unwrap()
        });
        assert_eq!(decided, 1, "exactly one decision stands");
        let claimed = race(&|sink, _| sink.approval_claim(&id).unwrap().is_some());
        assert_eq!(claimed, 1, "exactly one claim");
    }

    #[test]
    fn the_writer_cannot_rewrite_a_request_its_decision_or_its_claim() {
        let store = Store::new(postgres::shared());
        let sink = store.init();
        let (decided, pending) = (approval_id(6), approval_id(7));
        sink.approval_file(&decided, b"{}").unwrap();
        sink.approval_file(&pending, b"{}").unwrap();
        sink.approval_decide(&decided, b"yes").unwrap();
        sink.approval_claim(&decided).unwrap().unwrap();
        let table = "public.aegis_lines_approvals";
        for statement in [
            format!("UPDATE {table} SET request = 'x' WHERE approval_id = '{pending}'"),
            format!("UPDATE {table} SET decision = 'no' WHERE approval_id = '{decided}'"),
            format!("UPDATE {table} SET decision = NULL WHERE approval_id = '{decided}'"),
            format!("UPDATE {table} SET used = false WHERE approval_id = '{decided}'"),
            format!("UPDATE {table} SET used = true WHERE approval_id = '{pending}'"),
            format!(
                "UPDATE {table} SET approval_id = '{}' WHERE approval_id = '{pending}'",
                approval_id(8)
            ),
            format!(
                "UPDATE {table} SET filed_at = now() - interval '1 day' WHERE approval_id = '{pending}'"
            ),
        ] {
            let e = store
                .as_writer(&statement)
                .err()
                .unwrap_or_else(|| panic!("the writer ran {statement}"));
            assert!(e.contains("written once"), "{statement}: {e}");
        }
        let e = store
            .as_writer(&format!(
                "INSERT INTO {table} (approval_id, request) VALUES ('apr-x', 'r')"
            ))
            .unwrap_err();
        assert!(e.contains("check constraint"), "{e}");
        let row = sink.approval_read(&decided).unwrap().unwrap();
        assert_eq!(row.decision.into_option().unwrap().as_slice(), b"yes");
        assert!(row.used);
    }

    #[test]
    fn a_store_made_before_the_queue_says_to_run_init_again() {
        let store = Store::new(postgres::shared());
        let sink = store.init();
        store
            .admin("DROP TABLE public.aegis_lines_approvals")
            .unwrap();
        let e = sink.approval_list(0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::IO);
        assert!(e.message.contains("aegis store init"), "{e}");
        // Init again adds it, and the queue works.
        let sink = store.init();
        assert!(sink.approval_list(0).unwrap().is_empty());
    }
}
