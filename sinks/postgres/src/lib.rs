//! An audit sink in PostgreSQL, shipped the way a vendor would: a separate library,
//! loaded by path, never built into the host.
//!
//! Many processes on many hosts write one store at once. Each session is its own chain:
//! a row per line, keyed by the session's nonce and the line's seq, holding the line's
//! exact bytes with the host its open line names.
//!
//! # Guarantees
//! - `sync` returns only once every line appended before it is committed, in one
//!   transaction for all of them (group commit), with `synchronous_commit` not `off`
//!   and `fsync` on — both checked at open, or the sink is refused. So a call never runs
//!   before its intent line is stored.
//! - The store refuses to rewrite history, whatever the writer sends: the writer role
//!   may only INSERT and SELECT lines; a trigger refuses UPDATE and TRUNCATE, and
//!   DELETE of a row younger than the retention. A writer that could do more (it owns
//!   the table, or holds UPDATE, DELETE or TRUNCATE on it) is refused at open, as is a
//!   store whose triggers are disabled or whose retention is shorter than the
//!   profile declares.
//! - A (session, seq) is stored once: a second row for it is refused by the database.
//! - After any failure (the server lost, a refused insert) the sink refuses everything
//!   after, like the file sink: nothing runs until the host opens a new session on a
//!   new sink.
//! - `read_session` returns the stored bytes unchanged, so `aegis export --out DIR`
//!   writes files `aegis verify` checks byte for byte.
//!
//! # Non-guarantees
//! - The table's owner and superusers can disable the trigger and rewrite rows; the
//!   signatures then make the session Tampered, but cannot bring the lines back.
//! - No TLS: `sslmode=require` is refused at connect. Use a Unix socket or a trusted
//!   network (see the README).

mod config;
mod schema;

use aegis_station_api::{
    ErrorKind, PluginError, Retention, Sink, StoredApproval, StoredSession, Tail, TailKind,
};
use config::{Config, Names, server};
use std::sync::{Mutex, MutexGuard, PoisonError};

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "postgres-sink",
        version: env!("CARGO_PKG_VERSION"),
        sink: PostgresSink::from_config,
    }
}
aegis_station_api::export_root!(crate::plugin_module);

/// One line waiting for the next commit.
struct Row {
    session: String,
    seq: i64,
    host: String,
    time: String,
    line: Vec<u8>,
}

/// The session the lines being appended belong to: set by its open line.
struct Current {
    session: String,
    host: String,
    /// Its close line has been appended: the next line must open a new session.
    closed: bool,
}

/// Lines appended and not yet committed. Its own lock, so appending never waits on a
/// commit in flight.
#[derive(Default)]
struct Pending {
    rows: Vec<Row>,
    appended: u64,
    current: Option<Current>,
    failed: Option<String>,
}

/// The connection and how far it has committed.
struct Link {
    client: postgres::Client,
    /// The insert, prepared once: a statement per commit, not a parse and a plan.
    insert: postgres::Statement,
    committed: u64,
}

/// Record lines as rows of one PostgreSQL table, one chain per session.
pub struct PostgresSink {
    names: Names,
    /// How the writer connects: again for each wait on the approvals queue, which
    /// listens on a connection of its own.
    writer: postgres::Config,
    server: String,
    pending: Mutex<Pending>,
    link: Mutex<Link>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The members of a record line the store keys rows by.
#[derive(serde::Deserialize)]
struct Head {
    line_type: String,
    seq: u64,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    nonce: Option<String>,
    #[serde(default)]
    provenance: Option<Provenance>,
}

#[derive(serde::Deserialize)]
struct Provenance {
    #[serde(default)]
    host: Option<HostInfo>,
}

/// `provenance.host` of an open line: the writer's hostname, when it could read one.
#[derive(serde::Deserialize)]
struct HostInfo {
    #[serde(default)]
    hostname: Option<String>,
}

impl PostgresSink {
    /// Connects as the profile's writer and checks the store; with the host's `init`
    /// table (`aegis store init`), first makes the store as its administrator.
    ///
    /// # Errors
    /// A bad config; the server unreachable (one line naming it); a store that is not
    /// made, not append-only for this writer, or not durable.
    pub fn from_config(text: &str) -> Result<PostgresSink, PluginError> {
        let config = Config::parse(text)?;
        let server = server(&config.writer);
        if let Some(admin) = &config.init {
            init(admin, &config)?;
        }
        let client = config
            .writer
            .connect(postgres::NoTls)
            .map_err(|e| unreachable(&server, &e))?;
        let mut client = client;
        check(&mut client, &config, &server)?;
        let insert = client
            .prepare(&insert_sql(&config.names))
            .map_err(|e| PluginError::new(ErrorKind::IO, format!("{server}: {}", detail(&e))))?;
        let link = Link {
            client,
            insert,
            committed: 0,
        };
        Ok(PostgresSink {
            names: config.names,
            writer: config.writer,
            server,
            pending: Mutex::new(Pending::default()),
            link: Mutex::new(link),
        })
    }

    fn stopped(why: &str) -> PluginError {
        PluginError::new(ErrorKind::IO, format!("sink stopped: {why}"))
    }

    fn db_error(&self, e: &postgres::Error) -> PluginError {
        PluginError::new(ErrorKind::IO, format!("{}: {}", self.server, detail(e)))
    }

    /// A failure of the approvals queue; a store made before it had one is told how
    /// to add it.
    fn queue_error(&self, e: &postgres::Error) -> PluginError {
        if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) {
            return PluginError::new(
                ErrorKind::IO,
                format!(
                    "{}: no table {}; this store was made before it kept the approvals queue: run `aegis store init` again",
                    self.server,
                    self.names.object("_approvals")
                ),
            );
        }
        self.db_error(e)
    }

    /// Runs `f` on the writer's connection, its error as the queue's.
    fn on_link<T>(
        &self,
        f: impl FnOnce(&mut postgres::Client) -> Result<T, postgres::Error>,
    ) -> Result<T, PluginError> {
        f(&mut lock(&self.link).client).map_err(|e| self.queue_error(&e))
    }
}

/// A queue row as the host reads it.
fn stored_approval(r: &postgres::Row) -> StoredApproval {
    StoredApproval {
        id: r.get::<_, String>(0).into(),
        request: r.get::<_, Vec<u8>>(1).into(),
        decision: r.get::<_, Option<Vec<u8>>>(2).map(Into::into).into(),
        used: r.get(3),
    }
}

/// The database's own message where there is one (`ERROR: …`), else the client's.
fn detail(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

fn unreachable(server: &str, e: &postgres::Error) -> PluginError {
    PluginError::new(
        ErrorKind::IO,
        format!("cannot reach the {server}: {}", detail(e)),
    )
}

fn init(admin: &postgres::Config, config: &Config) -> Result<(), PluginError> {
    let admin_server = server(admin);
    let writer = config.writer.get_user().unwrap_or_default();
    if admin.get_user() == Some(writer) {
        return Err(PluginError::new(
            ErrorKind::REFUSED,
            format!(
                "store init: the administrator and the writer are one role ({writer}); the writer must not own the record, or it could rewrite it"
            ),
        ));
    }
    let mut client = admin
        .connect(postgres::NoTls)
        .map_err(|e| unreachable(&admin_server, &e))?;
    let sql = schema::init_sql(&config.names, writer, config.retention_days);
    let fail = |e: postgres::Error| {
        PluginError::new(
            ErrorKind::IO,
            format!("store init on the {admin_server}: {}", detail(&e)),
        )
    };
    let mut tx = client.transaction().map_err(fail)?;
    tx.batch_execute(&sql).map_err(fail)?;
    tx.commit().map_err(fail)
}

/// Refuses a store that would not keep what is written as written.
fn check(client: &mut postgres::Client, config: &Config, server: &str) -> Result<(), PluginError> {
    let lines = config.names.lines();
    let refused = |why: String| PluginError::new(ErrorKind::REFUSED, format!("{server}: {why}"));
    let io =
        |e: postgres::Error| PluginError::new(ErrorKind::IO, format!("{server}: {}", detail(&e)));
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&lines])
        .map_err(io)?
        .get(0);
    if exists.is_none() {
        return Err(refused(format!(
            "no table {lines}; make the store first with `aegis store init --profile P --admin-connection-file F`"
        )));
    }
    let row = client
        .query_one(&schema::check_sql(&config.names), &[])
        .map_err(io)?;
    let synchronous_commit: String = row.get(0);
    let fsync: String = row.get(1);
    let owns: bool = row.get(2);
    let (update, delete, truncate): (bool, bool, bool) = (row.get(3), row.get(4), row.get(5));
    let triggers: i64 = row.get(6);
    let retention: i32 = row.get(7);
    if synchronous_commit == "off" {
        return Err(refused(
            "synchronous_commit is off, so a commit can return before it is durable; set it on for this role".into(),
        ));
    }
    if fsync != "on" {
        return Err(refused(format!(
            "fsync is {fsync}, so a commit is not durable"
        )));
    }
    let writer = config.writer.get_user().unwrap_or_default();
    if owns {
        return Err(refused(format!(
            "the writer {writer} owns {lines}, so it could rewrite the record; let an administrator own it (`aegis store init`)"
        )));
    }
    let rights: Vec<&str> = [
        (update, "UPDATE"),
        (delete, "DELETE"),
        (truncate, "TRUNCATE"),
    ]
    .into_iter()
    .filter_map(|(has, name)| has.then_some(name))
    .collect();
    if !rights.is_empty() {
        return Err(refused(format!(
            "the writer {writer} may {} {lines}, so it could rewrite the record; grant it only INSERT and SELECT",
            rights.join(", ")
        )));
    }
    if triggers != 2 {
        return Err(refused(format!(
            "{lines} is missing its enabled append-only triggers; run `aegis store init` again"
        )));
    }
    if i64::from(retention) < i64::from(config.retention_days) {
        return Err(refused(format!(
            "the store keeps rows {retention} days, less than the {} the profile declares; run `aegis store init` with this profile",
            config.retention_days
        )));
    }
    Ok(())
}

impl Sink for PostgresSink {
    fn retention(&self) -> Retention {
        Retention::DURABLE
    }

    fn location(&self) -> String {
        format!("{}, table {}", self.server, self.names.lines())
    }

    fn existing_tail(&self) -> Result<Tail, PluginError> {
        // Each session is a chain of its own: a new one starts from nothing.
        Ok(Tail {
            kind: TailKind::EMPTY,
            line: Default::default(),
        })
    }

    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        let mut p = lock(&self.pending);
        if let Some(why) = &p.failed {
            return Err(Self::stopped(why));
        }
        let Some(line) = line.strip_suffix(b"\n").filter(|l| !l.contains(&b'\n')) else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "append takes exactly one line ending in a newline",
            ));
        };
        let head: Head = serde_json::from_slice(line)
            .map_err(|e| PluginError::new(ErrorKind::OTHER, format!("not a record line: {e}")))?;
        if head.line_type == "open" {
            // A line carries no session of its own: with two open at once, which one a
            // line belongs to could only be guessed.
            if let Some(open) = p.current.as_ref().filter(|c| !c.closed) {
                return Err(PluginError::new(
                    ErrorKind::OTHER,
                    format!(
                        "session {} is still open on this sink; one sink writes one session at a time",
                        open.session
                    ),
                ));
            }
            let Some(nonce) = head.nonce else {
                return Err(PluginError::new(
                    ErrorKind::OTHER,
                    "an open line without a nonce cannot start a session in this store",
                ));
            };
            // A host that could read no hostname (a container without one) is listed
            // as such, not refused: its lines matter as much.
            let host = head
                .provenance
                .and_then(|p| p.host)
                .and_then(|h| h.hostname)
                .unwrap_or_default();
            p.current = Some(Current {
                session: nonce,
                host,
                closed: false,
            });
        }
        let Some(current) = p.current.as_mut().filter(|c| !c.closed) else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                format!("a {} line outside any open session", head.line_type),
            ));
        };
        let seq = i64::try_from(head.seq)
            .map_err(|_| PluginError::new(ErrorKind::OTHER, "seq beyond PostgreSQL's bigint"))?;
        let row = Row {
            session: current.session.clone(),
            seq,
            host: current.host.clone(),
            time: head.time.unwrap_or_default(),
            line: line.to_vec(),
        };
        current.closed = head.line_type == "close";
        p.rows.push(row);
        p.appended += 1;
        Ok(())
    }

    fn sync(&self) -> Result<(), PluginError> {
        let target = lock(&self.pending).appended;
        let mut link = lock(&self.link);
        // Whoever held the link before us may have committed our lines with theirs.
        if link.committed >= target {
            return match &lock(&self.pending).failed {
                Some(why) => Err(Self::stopped(why)),
                None => Ok(()),
            };
        }
        let (rows, upto) = {
            let mut p = lock(&self.pending);
            if let Some(why) = &p.failed {
                return Err(Self::stopped(why));
            }
            (std::mem::take(&mut p.rows), p.appended)
        };
        let Link {
            client,
            insert: statement,
            ..
        } = &mut *link;
        match insert(client, statement, &rows) {
            Ok(()) => {
                link.committed = upto;
                Ok(())
            }
            Err(e) => {
                let error = self.db_error(&e);
                lock(&self.pending).failed = Some(error.message.to_string());
                Err(error)
            }
        }
    }

    fn read_lines(&self, _start: u64, _max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        Err(PluginError::new(
            ErrorKind::UNSUPPORTED,
            "this store keeps one chain per session; export it with `aegis export --out DIR`, one file per session",
        ))
    }

    fn sessions(&self, host: &str, since: &str) -> Result<Vec<StoredSession>, PluginError> {
        let lines = self.names.lines();
        let sql = format!(
            "SELECT o.session, o.host, o.line_time,
                    (SELECT count(*) FROM {lines} l WHERE l.session = o.session)
               FROM {lines} o
              WHERE o.seq = 0 AND ($1 = '' OR o.host = $1) AND ($2 = '' OR o.line_time >= $2)
              ORDER BY o.line_time, o.session"
        );
        let rows = lock(&self.link)
            .client
            .query(&sql, &[&host, &since])
            .map_err(|e| self.db_error(&e))?;
        Ok(rows
            .iter()
            .map(|r| StoredSession {
                id: r.get::<_, String>(0).into(),
                host: r.get::<_, String>(1).into(),
                opened: r.get::<_, String>(2).into(),
                lines: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
            })
            .collect())
    }

    fn read_session(&self, id: &str, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        let sql = format!(
            "SELECT line FROM {} WHERE session = $1 ORDER BY seq OFFSET $2 LIMIT $3",
            self.names.lines()
        );
        let offset = i64::try_from(start).unwrap_or(i64::MAX);
        let rows = lock(&self.link)
            .client
            .query(&sql, &[&id, &offset, &i64::from(max)])
            .map_err(|e| self.db_error(&e))?;
        Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
    }

    fn take_rate(&self, bucket: &str, max: u64, per_seconds: u64) -> Result<bool, PluginError> {
        let too_big = || PluginError::new(ErrorKind::OTHER, "rate beyond PostgreSQL's bigint");
        let max = i64::try_from(max).map_err(|_| too_big())?;
        let per = i64::try_from(per_seconds).map_err(|_| too_big())?;
        let sql = format!("SELECT {}($1, $2, $3)", self.names.object("_take"));
        lock(&self.link)
            .client
            .query_one(&sql, &[&bucket, &max, &per])
            .map(|r| r.get::<_, bool>(0))
            .map_err(|e| self.db_error(&e))
    }

    // The approvals queue: a row per request in `<table>_approvals`, whose trigger
    // lets the request, the decision and the claim each be written once and notifies
    // waiters.
    fn approval_file(&self, id: &str, request: &[u8]) -> Result<bool, PluginError> {
        let sql = format!(
            "INSERT INTO {} (approval_id, request) VALUES ($1, $2) ON CONFLICT (approval_id) DO NOTHING",
            self.names.object("_approvals")
        );
        self.on_link(|c| c.execute(&sql, &[&id, &request]))
            .map(|n| n == 1)
    }

    fn approval_read(&self, id: &str) -> Result<Option<StoredApproval>, PluginError> {
        let sql = format!("{} WHERE approval_id = $1", self.approvals_select());
        self.on_link(|c| c.query_opt(&sql, &[&id]))
            .map(|r| r.as_ref().map(stored_approval))
    }

    fn approval_list(&self, max: u32) -> Result<Vec<StoredApproval>, PluginError> {
        let sql = format!(
            "{} ORDER BY filed_at, approval_id LIMIT $1",
            self.approvals_select()
        );
        self.on_link(|c| c.query(&sql, &[&i64::from(max)]))
            .map(|rows| rows.iter().map(stored_approval).collect())
    }

    fn approval_decide(&self, id: &str, decision: &[u8]) -> Result<bool, PluginError> {
        // Deciders racing: the second waits on the first's row lock, then finds the
        // decision there and changes nothing.
        let sql = format!(
            "UPDATE {} SET decision = $2 WHERE approval_id = $1 AND decision IS NULL",
            self.names.object("_approvals")
        );
        self.on_link(|c| c.execute(&sql, &[&id, &decision]))
            .map(|n| n == 1)
    }

    fn approval_claim(&self, id: &str) -> Result<Option<Vec<u8>>, PluginError> {
        let sql = format!(
            "UPDATE {} SET used = true WHERE approval_id = $1 AND decision IS NOT NULL AND NOT used RETURNING decision",
            self.names.object("_approvals")
        );
        self.on_link(|c| c.query_opt(&sql, &[&id]))
            .map(|r| r.map(|r| r.get::<_, Vec<u8>>(0)))
    }

    /// Listens on a connection of its own (the writer's stays free for lines), looks
    /// once (so a decision placed before the listen is seen), then sleeps until the
    /// server notifies a decision of `id` or `timeout_ms` passes.
    fn approval_wait(&self, id: &str, timeout_ms: u64) -> Result<bool, PluginError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
        let mut client = self
            .writer
            .connect(postgres::NoTls)
            .map_err(|e| unreachable(&self.server, &e))?;
        let fail = |e: postgres::Error| self.queue_error(&e);
        let channel = schema::quote_identifier(&schema::approvals_channel(&self.names));
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .map_err(fail)?;
        let sql = format!(
            "SELECT decision IS NOT NULL FROM {} WHERE approval_id = $1",
            self.names.object("_approvals")
        );
        let decided = client.query_opt(&sql, &[&id]).map_err(fail)?;
        if decided.is_some_and(|r| r.get::<_, bool>(0)) {
            return Ok(true);
        }
        use postgres::fallible_iterator::FallibleIterator as _;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        {
            let mut notifications = client.notifications();
            let mut iter = notifications.timeout_iter(left);
            while let Some(n) = iter.next().map_err(fail)? {
                if n.payload() == id {
                    return Ok(true);
                }
            }
        }
        // `None` is the timeout, or the server gone: the latter is said, never read as
        // "no decision yet" (which a waiter would answer by waiting again at once).
        if client.is_closed() {
            return Err(PluginError::new(
                ErrorKind::IO,
                format!("{}: the connection waiting on {id} was lost", self.server),
            ));
        }
        Ok(false)
    }

    fn approval_remove(&self, id: &str) -> Result<(), PluginError> {
        let sql = format!(
            "DELETE FROM {} WHERE approval_id = $1",
            self.names.object("_approvals")
        );
        self.on_link(|c| c.execute(&sql, &[&id])).map(|_| ())
    }
}

impl PostgresSink {
    fn approvals_select(&self) -> String {
        format!(
            "SELECT approval_id, request, decision, used FROM {}",
            self.names.object("_approvals")
        )
    }
}

/// Lines as rows: many in one statement, so one commit for all of them.
fn insert_sql(names: &Names) -> String {
    format!(
        "INSERT INTO {} (session, seq, host, line_time, line)
         SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::text[], $5::bytea[])",
        names.lines()
    )
}

/// All of `rows` in one statement, so one commit.
fn insert(
    client: &mut postgres::Client,
    statement: &postgres::Statement,
    rows: &[Row],
) -> Result<(), postgres::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let sessions: Vec<&str> = rows.iter().map(|r| r.session.as_str()).collect();
    let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    let hosts: Vec<&str> = rows.iter().map(|r| r.host.as_str()).collect();
    let times: Vec<&str> = rows.iter().map(|r| r.time.as_str()).collect();
    let bytes: Vec<&[u8]> = rows.iter().map(|r| r.line.as_slice()).collect();
    client.execute(statement, &[&sessions, &seqs, &hosts, &times, &bytes])?;
    Ok(())
}
