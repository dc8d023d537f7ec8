//! A real, throwaway PostgreSQL cluster for the tests (issue 34, item 6).
//!
//! [`shared`] gives the test process one cluster; [`private`] gives a test a cluster of
//! its own, for a test that stops or restarts the server. Both are made by
//! `tests/postgres/cluster.sh`, the same script `.ci/run` uses, so initdb and the server's
//! settings live in one place.
//!
//! Every cluster has the superuser [`SUPERUSER`] (trust authentication), a database
//! [`DATABASE`], no TCP listener, a Unix socket in its own directory, `fsync` and
//! `synchronous_commit` on, and `max_connections` 120. Running as root (CI), initdb and
//! the server run as `$AEGIS_PG_USER` (default `nobody`) through `runuser`.
//!
//! ```rust,ignore
//! let pg = aegis_test_support::postgres::shared();
//! let db = pg.fresh_database();
//! pg.sql_in(&db, postgres::SUPERUSER, "CREATE ROLE sink LOGIN")?;
//! let client = postgres::Client::connect(&pg.conninfo_in(&db, "sink"), NoTls)?;
//! ```
//!
//! # Guarantees
//!
//! - A cluster this module starts is stopped and its directory removed when the test
//!   process exits on any path, `kill -9` included: a supervisor (`cluster.sh supervise`)
//!   holds the server and waits for end of file on a pipe whose only writer is the test
//!   process; the kernel closes it however the process ends. A [`private`] cluster is also
//!   stopped and removed when dropped.
//! - No silent skip: a machine without PostgreSQL fails the test with one message saying
//!   what to install (`apt-get install postgresql-15`, or set `AEGIS_PG_BIN`).
//!
//! # Non-guarantees
//!
//! - The [`shared`] cluster is shared by every test of the process, and under `.ci/run`
//!   by every test binary: a test makes its own database ([`Cluster::fresh_database`])
//!   and names its roles uniquely (roles are cluster-wide).
//! - If the supervisor itself is killed with `-9`, its server is left running.
//!
//! # Environment
//!
//! - `AEGIS_TEST_PG=DIR:PORT` — [`shared`] uses the running cluster whose socket is in
//!   `DIR` on port `PORT` (set by `.ci/run`), superuser [`SUPERUSER`], as is.
//! - `AEGIS_PG_BIN` — the directory of initdb, pg_ctl and psql; otherwise the newest
//!   `/usr/lib/postgresql/*/bin`, then `initdb` on `PATH`, then `pg_config --bindir`.
//! - `AEGIS_PG_USER` — the unprivileged user the server runs as when the tests run as root.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// The cluster's superuser.
pub const SUPERUSER: &str = "aegis_admin";

/// The database every cluster has.
pub const DATABASE: &str = "aegis";

/// The environment variable naming an already-running cluster, as `DIR:PORT`.
pub const ENV_CLUSTER: &str = "AEGIS_TEST_PG";

/// How [`Cluster::stop`] and [`Cluster::restart`] shut the server down (`pg_ctl -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `-m fast`: clients are disconnected, open transactions roll back, and a checkpoint
    /// is written; a clean shutdown.
    Fast,
    /// `-m immediate`: every server process quits at once, with no checkpoint; the next
    /// start replays the WAL, as after a crash of the server (not of the machine: what
    /// the kernel had been given stays).
    Immediate,
}

/// A running PostgreSQL cluster reached through a Unix socket.
#[derive(Debug)]
pub struct Cluster {
    socket_dir: PathBuf,
    port: u16,
    /// The supervisor of a cluster this process started; `None` for [`ENV_CLUSTER`]'s.
    supervisor: Option<Supervisor>,
}

#[derive(Debug)]
struct Supervisor {
    child: Child,
    /// The pipe whose end of file tells the supervisor to stop the cluster.
    stdin: Option<ChildStdin>,
}

impl Cluster {
    /// The directory holding the server's Unix socket (libpq's `host`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The server's port, which with a Unix socket names the socket file.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's name, [`SUPERUSER`].
    pub fn superuser(&self) -> &str {
        SUPERUSER
    }

    /// A libpq key=value connection string for `user` to the database [`DATABASE`]:
    /// `host='<socket dir>' port=<port> user='<user>' dbname='aegis'`, values quoted as
    /// libpq (and the `postgres` crate's `Config`) read them.
    pub fn conninfo(&self, user: &str) -> String {
        self.conninfo_in(DATABASE, user)
    }

    /// As [`Cluster::conninfo`], to the database `dbname`.
    pub fn conninfo_in(&self, dbname: &str, user: &str) -> String {
        format!(
            "host={} port={} user={} dbname={}",
            quote(&self.socket_dir.to_string_lossy()),
            self.port,
            quote(user),
            quote(dbname)
        )
    }

    /// Runs `sql` as `user` in the database [`DATABASE`] with the cluster's `psql`
    /// (`-X -A -t -q -v ON_ERROR_STOP=1`, the text on standard input, so each statement
    /// runs on its own, as a client would send it) and answers what it printed: rows one
    /// a line, columns separated by `|`, without the last newline.
    ///
    /// # Errors
    ///
    /// psql's standard error, when a statement fails or psql cannot connect.
    pub fn sql(&self, user: &str, sql: &str) -> Result<String, String> {
        self.sql_in(DATABASE, user, sql)
    }

    /// As [`Cluster::sql`], in the database `dbname`.
    ///
    /// # Errors
    ///
    /// psql's standard error, when a statement fails or psql cannot connect.
    pub fn sql_in(&self, dbname: &str, user: &str, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(bindir().join("psql"));
        // A developer's PGOPTIONS, PGSERVICE or PGSSLMODE must not change what runs.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.port.to_string(), "-U", user, "-d", dbname])
            .env("PGCONNECT_TIMEOUT", "10")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running psql: {e}"))?;
        let mut stdin = child.stdin.take().expect("psql's stdin is piped");
        let text = sql.to_owned();
        // Written from a thread: psql answers while it reads, and both pipes are bounded.
        let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for psql: {e}"))?;
        // psql stops reading when a statement fails; a broken pipe then says nothing more.
        let _ = writer.join();
        if out.status.success() {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.ends_with('\n') {
                text.pop();
            }
            Ok(text)
        } else {
            Err(format!(
                "psql as {user} in {dbname} ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            ))
        }
    }

    /// Creates a database no other test in this cluster uses (`t_<pid>_<time>_<n>`, owned
    /// by the superuser) and answers its name. The time is there because a long CI run
    /// reuses process ids, and its cluster outlives each test binary.
    ///
    /// # Panics
    ///
    /// If `CREATE DATABASE` fails.
    pub fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!(
            "t_{}_{nanos:x}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(e) = self.sql(SUPERUSER, &format!("CREATE DATABASE {name}")) {
            panic!("creating database {name}: {e}");
        }
        name
    }

    /// Stops the server (`pg_ctl stop -m fast|immediate`, waiting until it is gone).
    /// `&mut`: only a cluster of the test's own ([`private`]) can be stopped.
    ///
    /// # Panics
    ///
    /// If the cluster was not started by this process, or pg_ctl fails (the message
    /// carries the server log's last lines).
    pub fn stop(&mut self, how: Shutdown) {
        let action = match how {
            Shutdown::Fast => "stop-fast",
            Shutdown::Immediate => "stop-immediate",
        };
        self.server(action);
    }

    /// Starts a stopped server and waits until it accepts connections (at most 60 s).
    ///
    /// # Panics
    ///
    /// If the cluster was not started by this process, or the server does not start
    /// (the message carries the server log's last lines).
    pub fn start(&mut self) {
        self.server("start");
    }

    /// [`Cluster::stop`] with `how`, then [`Cluster::start`]: same socket, port and data.
    ///
    /// # Panics
    ///
    /// As [`Cluster::stop`] and [`Cluster::start`].
    pub fn restart(&mut self, how: Shutdown) {
        self.stop(how);
        self.start();
    }

    fn server(&self, action: &str) {
        assert!(
            self.supervisor.is_some(),
            "{ENV_CLUSTER}'s cluster is not this process's to stop or start; use postgres::private()"
        );
        let out = Command::new("bash")
            .arg(script())
            .arg("server")
            .arg(&self.socket_dir)
            .arg(action)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "cluster.sh server {} {action}: {}",
            self.socket_dir.display(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
}

impl Drop for Cluster {
    /// Closes the supervisor's pipe and waits for it to stop the server and remove the
    /// directory, so a dropped private cluster is gone when `drop` returns.
    fn drop(&mut self) {
        if let Some(sup) = &mut self.supervisor {
            drop(sup.stdin.take());
            let _ = sup.child.wait();
        }
    }
}

/// The test process's cluster: [`ENV_CLUSTER`]'s if set, else one started on first use
/// and stopped when the process exits (see the module's guarantees).
///
/// # Panics
///
/// If PostgreSQL is not installed (the message says what to install), the cluster does
/// not start, or [`ENV_CLUSTER`] is malformed or its server does not answer.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| match std::env::var_os(ENV_CLUSTER) {
        Some(v) => external(&v.to_string_lossy()),
        None => private(),
    })
}

/// A cluster of the caller's own, for a test that stops or restarts the server; stopped
/// and removed when dropped or when the process exits.
///
/// # Panics
///
/// If PostgreSQL is not installed (the message says what to install) or the cluster
/// does not start.
pub fn private() -> Cluster {
    let mut child = Command::new("bash")
        .arg(script())
        .arg("supervise")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let stdin = child.stdin.take();
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .unwrap_or(0);
    // The supervisor says nothing on stderr once it has answered, so reading it to the
    // end is for the failure path only.
    if read == 0 {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let status = child.wait().expect("waiting for cluster.sh");
        panic!(
            "no PostgreSQL cluster for the tests (cluster.sh supervise {status}): {}",
            err.trim_end()
        );
    }
    let (socket_dir, port) = parse_dir_port(line.trim_end())
        .unwrap_or_else(|e| panic!("cluster.sh supervise answered {line:?}: {e}"));
    Cluster {
        socket_dir,
        port,
        supervisor: Some(Supervisor { child, stdin }),
    }
}

/// The directory of the PostgreSQL binaries (see the module's environment), looked up
/// once.
///
/// # Panics
///
/// If PostgreSQL is not installed, with a message saying what to install.
pub fn bindir() -> &'static Path {
    static BINDIR: OnceLock<PathBuf> = OnceLock::new();
    BINDIR.get_or_init(|| {
        let out = Command::new("bash")
            .arg(script())
            .arg("bindir")
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim_end())
    })
}

/// The script that makes clusters, shared with `.ci/run`.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../postgres/cluster.sh")
}

/// [`ENV_CLUSTER`]'s cluster, checked to answer.
fn external(value: &str) -> Cluster {
    let (socket_dir, port) =
        parse_dir_port(value).unwrap_or_else(|e| panic!("{ENV_CLUSTER}={value:?}: {e}"));
    let cluster = Cluster {
        socket_dir,
        port,
        supervisor: None,
    };
    if let Err(e) = cluster.sql(SUPERUSER, "SELECT 1") {
        panic!("{ENV_CLUSTER}={value:?} does not answer: {e}");
    }
    cluster
}

/// `DIR:PORT`, split at the last colon (a directory may hold one).
fn parse_dir_port(value: &str) -> Result<(PathBuf, u16), String> {
    let (dir, port) = value
        .rsplit_once(':')
        .ok_or("expected DIR:PORT, found no colon")?;
    let port = port
        .parse()
        .map_err(|_| format!("expected a port after the last colon, found {port:?}"))?;
    if !dir.starts_with('/') {
        return Err(format!(
            "expected an absolute socket directory, found {dir:?}"
        ));
    }
    Ok((PathBuf::from(dir), port))
}

/// A libpq conninfo value: quoted, with `\` and `'` escaped.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn shared_cluster_answers() {
        let pg = shared();
        assert_eq!(pg.sql(SUPERUSER, "SELECT 1").unwrap(), "1");
        assert_eq!(
            pg.sql(SUPERUSER, "SELECT current_user, current_database()")
                .unwrap(),
            "aegis_admin|aegis"
        );
    }

    /// The durability a sink's test relies on is the server's, so it must not be off.
    #[test]
    fn shared_cluster_flushes_commits() {
        let pg = shared();
        assert_eq!(pg.sql(SUPERUSER, "SHOW fsync").unwrap(), "on");
        assert_eq!(pg.sql(SUPERUSER, "SHOW synchronous_commit").unwrap(), "on");
        let max: u32 = pg
            .sql(SUPERUSER, "SHOW max_connections")
            .unwrap()
            .parse()
            .unwrap();
        assert!(max >= 100, "max_connections {max}");
    }

    #[test]
    fn sql_reports_a_failing_statement_and_stops_there() {
        let pg = shared();
        let db = pg.fresh_database();
        let err = pg
            .sql_in(
                &db,
                SUPERUSER,
                "CREATE TABLE t (x int); SELECT nope; CREATE TABLE u (x int);",
            )
            .unwrap_err();
        assert!(err.contains("nope"), "{err}");
        let tables = pg
            .sql_in(
                &db,
                SUPERUSER,
                "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class \
                 WHERE relname IN ('t', 'u')",
            )
            .unwrap();
        assert_eq!(tables, "t");
    }

    #[test]
    fn conninfo_names_the_socket_and_database() {
        let pg = shared();
        assert_eq!(
            pg.conninfo("sink"),
            format!(
                "host='{}' port={} user='sink' dbname='aegis'",
                pg.socket_dir().display(),
                pg.port()
            )
        );
        assert_eq!(quote(r"a'b\c"), r"'a\'b\\c'");
        // libpq itself reads it: psql given the string where a database name goes.
        let out = Command::new(bindir().join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-c",
                "SELECT current_user, current_database()",
            ])
            .arg(pg.conninfo(SUPERUSER))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            "aegis_admin|aegis"
        );
    }

    #[test]
    fn dir_port_is_parsed_at_the_last_colon() {
        assert_eq!(
            parse_dir_port("/tmp/a:b:5432").unwrap(),
            (PathBuf::from("/tmp/a:b"), 5432)
        );
        assert!(parse_dir_port("/tmp/a").is_err());
        assert!(parse_dir_port("/tmp/a:x").is_err());
        assert!(parse_dir_port("rel:5432").is_err());
    }

    /// A committed row survives both kinds of shutdown; the server answers after each.
    #[test]
    fn private_cluster_restarts_and_keeps_committed_rows() {
        let mut pg = private();
        pg.sql(
            SUPERUSER,
            "CREATE TABLE t (x int); INSERT INTO t VALUES (1)",
        )
        .unwrap();
        pg.restart(Shutdown::Fast);
        pg.sql(SUPERUSER, "INSERT INTO t VALUES (2)").unwrap();
        pg.restart(Shutdown::Immediate);
        assert_eq!(pg.sql(SUPERUSER, "SELECT sum(x) FROM t").unwrap(), "3");
        pg.stop(Shutdown::Fast);
        assert!(
            pg.sql(SUPERUSER, "SELECT 1").is_err(),
            "a stopped server answered"
        );
        pg.start();
        assert_eq!(pg.sql(SUPERUSER, "SELECT 1").unwrap(), "1");
    }

    #[test]
    fn dropping_a_private_cluster_removes_it() {
        let pg = private();
        let dir = pg.socket_dir().to_owned();
        let pid = postmaster_pid(&dir);
        drop(pg);
        assert!(!dir.exists(), "{} is still there", dir.display());
        assert!(!alive(pid), "postmaster {pid} is still running");
    }

    /// A cluster named by `AEGIS_TEST_PG` is used as is: dropping its handle leaves the
    /// server running, and stopping it through the handle is refused.
    #[test]
    fn a_named_cluster_is_used_not_owned() {
        let own = private();
        let value = format!("{}:{}", own.socket_dir().display(), own.port());
        let named = external(&value);
        assert_eq!(named.sql(SUPERUSER, "SELECT 1").unwrap(), "1");
        drop(named);
        assert_eq!(own.sql(SUPERUSER, "SELECT 1").unwrap(), "1");
        let mut named = external(&value);
        let refused =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| named.stop(Shutdown::Fast)));
        assert!(refused.is_err(), "a named cluster was stopped");
        assert_eq!(own.sql(SUPERUSER, "SELECT 1").unwrap(), "1");
    }

    const HOLDER_ENV: &str = "AEGIS_PG_HOLDER";

    /// Not a test: the child of `a_killed_process_leaves_no_server`, which holds a
    /// cluster, says where, and waits to be killed. Run by hand (`--include-ignored`),
    /// it does nothing rather than wait ten minutes.
    #[test]
    #[ignore = "run by a_killed_process_leaves_no_server as its child"]
    fn holder() {
        if std::env::var_os(HOLDER_ENV).is_none() {
            return;
        }
        let pg = private();
        println!("HOLDER {}", pg.socket_dir().display());
        std::thread::sleep(Duration::from_secs(600));
    }

    /// The supervisor stops the server and removes its directory when the process that
    /// held the cluster is killed with -9 (no destructor runs).
    #[test]
    fn a_killed_process_leaves_no_server() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "postgres::tests::holder",
                "--ignored",
                "--nocapture",
            ])
            .env(HOLDER_ENV, "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let dir = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("HOLDER ").map(PathBuf::from))
            .expect("the holder names its cluster");
        let pid = postmaster_pid(&dir);
        assert!(alive(pid));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (alive(pid) || dir.exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(!alive(pid), "postmaster {pid} outlived its holder by 30 s");
        assert!(
            !dir.exists(),
            "{} outlived its holder by 30 s",
            dir.display()
        );
    }

    fn postmaster_pid(dir: &Path) -> u32 {
        let text = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
        text.lines().next().unwrap().parse().unwrap()
    }

    /// Whether `pid` names a live process that is not a zombie.
    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the command name's closing parenthesis.
            Ok(stat) => !stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z')),
            Err(_) => false,
        }
    }
}
