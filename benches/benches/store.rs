//! Criterion benches for the PostgreSQL store (`sinks/postgres`, issue 34 item 7): signed
//! lines per second written through the chain writer into PostgreSQL by one session and
//! by 16 at once, beside the same server's own single-row INSERT + COMMIT, all in one run
//! against one cluster of the bench's own (fsync and synchronous_commit on; the sink
//! refuses to open otherwise).
//!
//! `cargo bench -p aegis-benches --bench store`. What each id times is in
//! `benches/README.md`; numbers live in `benches/results/store.md`.
//!
//! Every line is an outcome signed by `Session::append` (the signed half of a call; the
//! unsigned intent is not written here), synced before `append` returns, as the host
//! does. The floor inserts the same outcome lines' bytes, one row per autocommit
//! statement, into a table of the store's shape (no trigger), then into the store's own
//! table (trigger included). After the run each session's rows are
//! counted and one session is read back and verified, so a bench cannot silently time a
//! failing path.

use aegis_benches::{bench_key, outcome};
use aegis_record::json::Object;
use aegis_record::{LineSink, Options, OutcomeLine, Session, Trust, VecSink, Verdict};
use aegis_sink_postgres::PostgresSink;
use aegis_station_api::Sink;
use aegis_test_support::postgres::{self as pg, Cluster};
use criterion::{Criterion, SamplingMode, Throughput, criterion_main};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Concurrent sessions (threads, each with its own sink and connection, as processes
/// would be) in the `…/sixteen` ids.
const SESSIONS: usize = 16;

/// The floor's table: the store's columns, key and index, without the append-only
/// trigger (a cost the store pays, so it belongs above the floor, not in it).
const FLOOR_TABLE: &str = "
CREATE TABLE floor_lines (
    session   text        NOT NULL,
    seq       bigint      NOT NULL CHECK (seq >= 0),
    host      text        NOT NULL,
    line_time text        NOT NULL,
    line      bytea       NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session, seq)
);
CREATE INDEX floor_lines_opened ON floor_lines (line_time, session) WHERE seq = 0;
";

/// A database and writer role of the bench's own, with the store made in it.
struct Store {
    cluster: Cluster,
    db: String,
    writer: String,
}

impl Store {
    fn new() -> Store {
        let cluster = pg::private();
        let db = cluster.fresh_database();
        let writer = format!("{db}_w");
        let su = cluster.superuser().to_owned();
        cluster
            .sql(&su, &format!("CREATE ROLE {writer} LOGIN"))
            .expect("create the writer role");
        cluster
            .sql_in(
                &db,
                &su,
                &format!("{FLOOR_TABLE}GRANT SELECT, INSERT ON floor_lines TO {writer};"),
            )
            .expect("create the floor table");
        let store = Store {
            cluster,
            db,
            writer,
        };
        // The first open makes the store as the superuser (`aegis store init`).
        let init = format!(
            "init = {{ connection = {:?} }}\n",
            store.cluster.conninfo_in(&store.db, &su)
        );
        drop(PostgresSink::from_config(&store.config(&init)).unwrap_or_else(|e| panic!("{e}")));
        store
    }

    fn config(&self, extra: &str) -> String {
        format!(
            "connection = {:?}\nretention_days = 30\n{extra}",
            self.cluster.conninfo_in(&self.db, &self.writer)
        )
    }

    /// A sink as a host process opens it: its own connection, the store checked.
    fn sink(&self) -> Arc<PostgresSink> {
        Arc::new(PostgresSink::from_config(&self.config("")).unwrap_or_else(|e| panic!("{e}")))
    }

    /// A plain client as the writer role, for the floor.
    fn client(&self) -> postgres::Client {
        postgres::Client::connect(
            &self.cluster.conninfo_in(&self.db, &self.writer),
            postgres::NoTls,
        )
        .expect("connect as the writer")
    }

    fn admin(&self, sql: &str) -> String {
        self.cluster
            .sql_in(&self.db, self.cluster.superuser(), sql)
            .expect("admin query")
    }
}

/// The chain writer's view of the sink, as the host adapts it.
struct Lines(Arc<PostgresSink>);

impl LineSink for Lines {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        self.0
            .append(line)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0
            .sync()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

fn open_session(sink: &Arc<PostgresSink>, host: &str) -> Session {
    let mut whereabouts = Object::new();
    whereabouts.insert("hostname", host);
    let mut provenance = Object::new();
    provenance.insert("host", whereabouts);
    let mut extensions = Object::new();
    extensions.insert("provenance", provenance);
    Session::open(Arc::new(Lines(sink.clone())), bench_key(), None, extensions)
        .expect("open a session on the store")
}

/// The outcome lines the sessions write, and their bytes as the writer seals them (for
/// the floor's rows): 64 calls over the bench crate's exit classes.
fn lines() -> (Vec<OutcomeLine>, Vec<Vec<u8>>) {
    let outcomes: Vec<OutcomeLine> = (0..64).map(outcome).collect();
    let sink = VecSink::new();
    let session = Session::open(Arc::new(sink.clone()), bench_key(), None, Object::new())
        .expect("open in memory");
    for o in &outcomes {
        session.append(o).expect("append in memory");
    }
    drop(session);
    let bytes: Vec<Vec<u8>> = sink
        .contents()
        .split(|&b| b == b'\n')
        .filter(|l| is_outcome(l))
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(bytes.len(), outcomes.len(), "one sealed line per outcome");
    let sizes: Vec<usize> = bytes.iter().map(Vec::len).collect();
    println!(
        "store: outcome lines of {}..{} bytes, mean {}",
        sizes.iter().min().unwrap_or(&0),
        sizes.iter().max().unwrap_or(&0),
        sizes.iter().sum::<usize>() / sizes.len().max(1)
    );
    (outcomes, bytes)
}

/// Whether a canonical line is an outcome (the session also wrote an open and a close).
fn is_outcome(line: &[u8]) -> bool {
    let needle = b"\"line_type\":\"outcome\"";
    line.windows(needle.len()).any(|w| w == needle)
}

/// One floor connection: a prepared single-row INSERT, autocommit (one COMMIT each).
struct Floor {
    client: postgres::Client,
    insert: postgres::Statement,
    session: String,
}

impl Floor {
    fn new(store: &Store, n: usize, table: &str) -> Floor {
        let mut client = store.client();
        let insert = client
            .prepare(&format!(
                "INSERT INTO {table} (session, seq, host, line_time, line) VALUES ($1, $2, $3, $4, $5)"
            ))
            .expect("prepare the floor insert");
        Floor {
            client,
            insert,
            session: format!("{n:064x}"),
        }
    }

    fn insert(&mut self, seq: i64, line: &[u8]) {
        let rows = self
            .client
            .execute(
                &self.insert,
                &[
                    &self.session,
                    &seq,
                    &"bench-floor",
                    &"2026-12-04T00:00:00.000000Z",
                    &line,
                ],
            )
            .expect("floor insert");
        assert_eq!(rows, 1);
    }
}

/// Splits `iters` over `SESSIONS` workers; worker `t` does `share(iters, t)`.
fn share(iters: u64, t: usize) -> u64 {
    let n = SESSIONS as u64;
    iters / n + u64::from((t as u64) < iters % n)
}

/// The floor's ids into `table`, named `name` and `name_sixteen`: one connection, then 16.
fn floor(c: &mut Criterion, store: &Store, bytes: &[Vec<u8>], table: &str, name: &str) {
    let mut g = c.benchmark_group("floor");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(12));
    g.throughput(Throughput::Elements(1));
    let seq = AtomicI64::new(0);
    let mut one = Floor::new(store, 0, table);
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let s = seq.fetch_add(1, Ordering::Relaxed);
                one.insert(s, &bytes[(s % 64) as usize]);
            }
            start.elapsed()
        });
    });
    let mut many: Vec<Floor> = (1..=SESSIONS)
        .map(|n| Floor::new(store, n, table))
        .collect();
    g.bench_function(format!("{name}_sixteen"), |b| {
        b.iter_custom(|iters| {
            run_sixteen(&mut many, iters, |f, _| {
                let s = seq.fetch_add(1, Ordering::Relaxed);
                f.insert(s, &bytes[(s % 64) as usize]);
            })
        });
    });
    g.finish();
    let stored = store.admin(&format!(
        "SELECT count(*) FROM {table} WHERE host = 'bench-floor'"
    ));
    assert_eq!(
        stored,
        seq.load(Ordering::Relaxed).to_string(),
        "every floor row stored"
    );
}

/// Runs `iters` calls of `each` spread over the 16 workers, all started together;
/// answers the wall time from the start to the last worker's end.
fn run_sixteen<W: Send>(
    workers: &mut [W],
    iters: u64,
    each: impl Fn(&mut W, u64) + Sync,
) -> Duration {
    let start_line = Barrier::new(workers.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .enumerate()
            .map(|(t, w)| {
                let (start_line, each) = (&start_line, &each);
                s.spawn(move || {
                    start_line.wait();
                    for i in 0..share(iters, t) {
                        each(w, i);
                    }
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("worker");
        }
        start.elapsed()
    })
}

fn sessions(c: &mut Criterion, store: &Store, outcomes: &[OutcomeLine]) {
    let mut g = c.benchmark_group("session");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(12));
    g.throughput(Throughput::Elements(1));
    let sink = store.sink();
    let one = open_session(&sink, "bench-one");
    let mut written = 0u64;
    g.bench_function("one", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                one.append(&outcomes[(written % 64) as usize])
                    .expect("append");
                written += 1;
            }
            start.elapsed()
        });
    });
    one.close().expect("close");
    check_session(store, &sink, "bench-one", written);

    let mut many: Vec<(Session, u64)> = (0..SESSIONS)
        .map(|t| (open_session(&store.sink(), &format!("bench-{t:02}")), 0))
        .collect();
    g.bench_function("sixteen", |b| {
        b.iter_custom(|iters| {
            run_sixteen(&mut many, iters, |(session, written), _| {
                session
                    .append(&outcomes[(*written % 64) as usize])
                    .expect("append");
                *written += 1;
            })
        });
    });
    g.finish();
    for (t, (session, written)) in many.into_iter().enumerate() {
        session.close().expect("close");
        let rows = store.admin(&format!(
            "SELECT count(*) FROM public.aegis_lines WHERE host = 'bench-{t:02}'"
        ));
        assert_eq!(rows, (written + 2).to_string(), "open, outcomes, close");
    }
}

/// The session's rows are all there, and read back they verify: open, `written`
/// signed outcomes, close.
fn check_session(store: &Store, sink: &PostgresSink, host: &str, written: u64) {
    let listed = sink.sessions(host, "").expect("list sessions");
    assert_eq!(listed.len(), 1, "one session from {host}");
    assert_eq!(listed[0].lines, written + 2, "open, outcomes, close");
    let mut bytes = Vec::new();
    let mut start = 0;
    loop {
        let page = sink
            .read_session(&listed[0].id, start, 10_000)
            .expect("read the session back");
        for line in &page {
            bytes.extend_from_slice(line);
            bytes.push(b'\n');
        }
        start += page.len() as u64;
        if page.len() < 10_000 {
            break;
        }
    }
    let report = aegis_record::verify(
        bytes.as_slice(),
        &Options {
            trust: None,
            threads: 0,
            approvers: None,
        },
    )
    .expect("verify from memory");
    assert_eq!(
        report.verdict(),
        &Verdict::Verified(Trust::Unpinned),
        "{}",
        report.headline()
    );
    let total = store.admin("SELECT count(*) FROM public.aegis_lines");
    println!("store: {host} verified, {written} outcomes; {total} rows in the store");
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    let store = Store::new();
    let (outcomes, bytes) = lines();
    println!(
        "store: cluster {} port {}, fsync {}, synchronous_commit {}",
        store.cluster.socket_dir().display(),
        store.cluster.port(),
        store.admin("SHOW fsync"),
        store.admin("SHOW synchronous_commit")
    );
    floor(&mut c, &store, &bytes, "floor_lines", "insert_commit");
    // The same into the store's own table: its append-only trigger stamps every row.
    floor(
        &mut c,
        &store,
        &bytes,
        "public.aegis_lines",
        "insert_commit_store_table",
    );
    sessions(&mut c, &store, &outcomes);
}

criterion_main!(benches);
