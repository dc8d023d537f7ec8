//! The PostgreSQL store (sinks/postgres) at the command line, with real processes and a
//! real server (issue 34, item 6): many writers at once, a writer killed mid-call, the
//! server restarted mid-session, a row altered behind the writers' backs, and the
//! operator's mistakes. Each test makes its own database and writer role in the
//! cluster `aegis_test_support::postgres` gives it, and reads the store back the way an
//! auditor would: `aegis export --out DIR`, then `aegis verify`.

use crate::common::{at, field, object, text};

use aegis_record::digest::RequestDigest;
use aegis_record::json::{Object, Value};
use aegis_test_support::postgres::{self, Cluster, SUPERUSER, Shutdown};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn aegis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp/echo_server.py")
}

/// The profile every test writes with: policy allows, so every call reaches the store's
/// intent and the server; the audit is the PostgreSQL sink loaded by path.
fn profile_text(connection: &str) -> String {
    format!(
        "name = \"fleet\"\ndescription = \"one store for a fleet\"\n\n[policy]\n\
         plugin = \"builtin:policy-static\"\nconfig = {{ verdict = \"allow\" }}\n\n\
         [capability]\n\n[sandbox]\n\n[audit]\nplugin = {:?}\n\
         config = {{ connection = {connection:?}, retention_days = 30 }}\n",
        aegis_test_support::cdylib("aegis-sink-postgres")
            .display()
            .to_string(),
    )
}

/// A database of its own in a cluster, its writer role (`<db>_w`, roles are
/// cluster-wide) and a profile that writes to it as that role.
pub(crate) struct Store {
    dir: tempfile::TempDir,
    db: String,
    writer: String,
    pub(crate) profile: PathBuf,
}

impl Store {
    /// A store made with `aegis store init`, as the cluster's superuser.
    pub(crate) fn new(pg: &Cluster) -> Store {
        let store = Store::uninitialised(pg);
        let out = store.init(&pg.conninfo_in(&store.db, SUPERUSER));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        store
    }

    /// The database, the role and the profile, without `aegis store init`.
    fn uninitialised(pg: &Cluster) -> Store {
        let db = pg.fresh_database();
        let writer = format!("{db}_w");
        pg.sql_in(&db, SUPERUSER, &format!("CREATE ROLE {writer} LOGIN"))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("fleet.toml");
        std::fs::write(&profile, profile_text(&pg.conninfo_in(&db, &writer))).unwrap();
        Store {
            dir,
            db,
            writer,
            profile,
        }
    }

    /// Runs `sql` in the store's database as its writer role, as anyone holding the
    /// writer's connection could.
    pub(crate) fn as_writer(&self, pg: &Cluster, sql: &str) -> Result<String, String> {
        pg.sql_in(&self.db, &self.writer, sql)
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `aegis --profile P store init --admin-connection ADMIN`.
    fn init(&self, admin: &str) -> Output {
        aegis()
            .arg("--profile")
            .arg(&self.profile)
            .args(["store", "init", "--admin-connection", admin])
            .output()
            .unwrap()
    }

    /// `aegis --profile P export --out DIR` with `flags`; asserts it succeeded.
    pub(crate) fn export(&self, out: &Path, flags: &[&str]) -> Vec<Session> {
        let done = aegis()
            .arg("--profile")
            .arg(&self.profile)
            .arg("export")
            .arg("--out")
            .arg(out)
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(
            done.status.code(),
            Some(0),
            "export {flags:?}: {}",
            text(&done.stderr)
        );
        sessions_in(out)
    }

    /// `aegis --profile P run` of the echo guest, signed with `key`: one session of one
    /// call.
    fn run_echo(&self, key: &Path) -> Output {
        aegis()
            .arg("--profile")
            .arg(&self.profile)
            .args(["run", "--component"])
            .arg(crate::common::guest("echo"))
            .args(["--id", "echo", "--input", "hi", "--signing-key"])
            .arg(key)
            .output()
            .unwrap()
    }
}

/// A fresh signing key in `dir`, and its key id as `aegis key show` prints it.
pub(crate) fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let key = dir.join(name);
    let out = aegis()
        .args(["keygen", "--out"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = aegis().args(["key", "show"]).arg(&key).output().unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let id = key_id_in(&text(&shown.stdout))
        .unwrap_or_else(|| panic!("no key id in `aegis key show`: {}", text(&shown.stdout)));
    (key, id)
}

/// The `key_id` line of `aegis key show`.
fn key_id_in(printed: &str) -> Option<String> {
    printed
        .lines()
        .find_map(|l| l.strip_prefix("key_id "))
        .map(str::to_owned)
}

/// One exported session file, read.
pub(crate) struct Session {
    file: PathBuf,
    pub(crate) lines: Vec<Object>,
}

impl Session {
    fn open(&self) -> &Object {
        let open = &self.lines[0];
        assert_eq!(field(open, "line_type"), "open", "{}", self.file.display());
        open
    }

    fn nonce(&self) -> String {
        field(self.open(), "nonce")
    }

    fn opened(&self) -> String {
        field(self.open(), "time")
    }

    fn hostname(&self) -> String {
        at(self.open(), &["provenance", "host", "hostname"])
    }

    pub(crate) fn of_type(&self, line_type: &str) -> Vec<&Object> {
        self.lines
            .iter()
            .filter(|l| field(l, "line_type") == line_type)
            .collect()
    }
}

/// Every file `aegis export` wrote in `dir`, in name order.
fn sessions_in(dir: &Path) -> Vec<Session> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let lines = std::fs::read(&file)
                .unwrap()
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .map(object)
                .collect();
            Session { file, lines }
        })
        .collect()
}

/// `aegis verify --json` of `paths`, pinned to `keys` if any: each file's report by
/// file name, the summary, and the exit code.
fn verify_json(paths: &[&Path], keys: &[&str]) -> (BTreeMap<String, Object>, Object, i32) {
    let mut cmd = aegis();
    cmd.args(["verify", "--json"]);
    for key in keys {
        cmd.args(["--key", key]);
    }
    let out = cmd.args(paths).output().unwrap();
    let mut reports = BTreeMap::new();
    let mut summary = None;
    for line in out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let o = object(line);
        if let Some(Value::Object(s)) = o.get("summary") {
            summary = Some(s.clone());
        } else {
            let report = match o.get("report") {
                Some(Value::Object(r)) => r.clone(),
                _ => panic!("no report: {}", text(line)),
            };
            // By file name: verify names a directory's files as it walked them.
            let file = PathBuf::from(field(&o, "file"));
            assert!(
                reports.insert(name_of(&file), report).is_none(),
                "{}",
                file.display()
            );
        }
    }
    let summary = summary.unwrap_or_else(|| panic!("no summary: {}", text(&out.stdout)));
    (reports, summary, out.status.code().unwrap_or(-1))
}

/// A file's name, as [`verify_json`] keys its reports.
fn name_of(file: &Path) -> String {
    file.file_name().unwrap().to_string_lossy().into_owned()
}

/// The report [`verify_json`] gave of `file`.
fn report_of<'a>(reports: &'a BTreeMap<String, Object>, file: &Path) -> &'a Object {
    reports.get(&name_of(file)).unwrap_or_else(|| {
        panic!(
            "no report of {}: {:?}",
            file.display(),
            reports.keys().collect::<Vec<_>>()
        )
    })
}

/// `aegis verify DIR`'s text summary, `[files, verified, indeterminate, tampered,
/// unreadable]`, and the exit code.
fn verify_summary(dir: &Path) -> ([usize; 5], i32) {
    let out = aegis().arg("verify").arg(dir).output().unwrap();
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary: {stdout}{}", text(&out.stderr)));
    // "summary: 16 files: 16 Verified, 0 Indeterminate, 0 Tampered, 0 unreadable"
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    let counts: [usize; 5] = numbers
        .try_into()
        .unwrap_or_else(|_| panic!("a summary of five counts: {line}"));
    (counts, out.status.code().unwrap_or(-1))
}

fn number(o: &Object, key: &str) -> u64 {
    o.get(key).and_then(Value::as_int).unwrap_or(u64::MAX)
}

fn list<'a>(o: &'a Object, key: &str) -> &'a [Value] {
    match o.get(key) {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

/// The frame a client sends to call echo with `said`.
pub(crate) fn echo_frame(id: u64, said: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{said}"}}}}}}"#
    )
}

/// The hostname a second "host" takes, when this machine can give one process a
/// hostname of its own (`unshare -u`, as root); else `None`, and both hosts share the
/// machine's.
fn second_hostname() -> Option<&'static str> {
    const NAME: &str = "aegis-fleet-b";
    let ok = Command::new("unshare")
        .args(["-u", "sh", "-c", "hostname \"$0\" && hostname", NAME])
        .output()
        .is_ok_and(|o| o.status.success() && text(&o.stdout).trim() == NAME);
    if !ok {
        eprintln!("unshare -u is not available: both hosts have the machine's hostname");
    }
    ok.then_some(NAME)
}

fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// A running `aegis --profile P wrap` over the echo server, driven as its MCP client:
/// each request waits for its answer. The server appends every line it receives to
/// `<tag>-server.log`, the side effect the tests compare with the store.
pub(crate) struct Writer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    tag: String,
}

impl Writer {
    /// Starts wrap in `dir` under the name `tag`, as the host `hostname` when given.
    fn start(store: &Store, key: &Path, dir: &Path, tag: &str, hostname: Option<&str>) -> Writer {
        Writer::start_with(store, key, dir, tag, hostname, &[])
    }

    /// [`Writer::start`], with more flags for wrap.
    pub(crate) fn start_with(
        store: &Store,
        key: &Path,
        dir: &Path,
        tag: &str,
        hostname: Option<&str>,
        flags: &[&std::ffi::OsStr],
    ) -> Writer {
        let mut command = match hostname {
            Some(name) => {
                let mut c = Command::new("unshare");
                c.args(["-u", "sh", "-c", "hostname \"$0\" && exec \"$@\"", name])
                    .arg(env!("CARGO_BIN_EXE_aegis"));
                c
            }
            None => aegis(),
        };
        // A queue directory of the test's own, which a store's queue leaves untouched.
        let mut child = command
            .env("XDG_STATE_HOME", dir.join("state"))
            .arg("--profile")
            .arg(&store.profile)
            .arg("wrap")
            .arg("--signing-key")
            .arg(key)
            .args(flags)
            .arg("--")
            .arg("python3")
            .arg(server_script())
            .arg("--log")
            .arg(dir.join(format!("{tag}-server.log")))
            .arg("--pid-file")
            .arg(dir.join(format!("{tag}-server.pid")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("{tag}-wrap.err"))).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Writer {
            child,
            stdin,
            stdout,
            dir: dir.to_owned(),
            tag: tag.to_owned(),
        }
    }

    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The answer to request `id`, parsed.
    pub(crate) fn answer(&mut self, id: u64) -> Object {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(
            n > 0,
            "{}: aegis wrap closed its stdout unanswered: {}",
            self.tag,
            self.stderr()
        );
        let answer = object(line.as_bytes());
        assert_eq!(answer.get("id").and_then(Value::as_int), Some(id), "{line}");
        answer
    }

    fn request(&mut self, id: u64, method: &str, params: &str) -> Object {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ));
        self.answer(id)
    }

    pub(crate) fn initialize(&mut self) {
        self.request(
            1,
            "initialize",
            r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}"#,
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        self.request(2, "tools/list", "{}");
    }

    /// Calls echo with `said` and answers what came back.
    fn echo(&mut self, id: u64, said: &str) -> Object {
        self.send(&echo_frame(id, said));
        self.answer(id)
    }

    /// Closes the client's side and waits for wrap to exit.
    pub(crate) fn close(&mut self) -> ExitStatus {
        self.stdin = None;
        self.child.wait().unwrap()
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}-wrap.err", self.tag))).unwrap_or_default()
    }

    /// Every line the server received.
    fn server_saw(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}-server.log", self.tag)))
            .unwrap_or_default()
    }

    fn server_pid(&self) -> i32 {
        std::fs::read_to_string(self.dir.join(format!("{}-server.pid", self.tag)))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text of an echo answer, or `None` when the call was refused or failed.
pub(crate) fn echoed(answer: &Object) -> Option<String> {
    let result = answer.get("result").and_then(Value::as_object)?;
    if result.get("isError") == Some(&Value::Bool(true)) {
        return None;
    }
    match result.get("content") {
        Some(Value::Array(items)) => items
            .first()
            .and_then(Value::as_object)
            .map(|c| field(c, "text")),
        _ => None,
    }
}

/// What an answer says, whatever its shape (a result's text or a JSON-RPC error).
fn answer_says(answer: &Object) -> String {
    let mut out = Vec::new();
    answer_text(&Value::Object(answer.clone()), &mut out);
    out.join(" ")
}

fn answer_text(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| answer_text(i, out)),
        Value::Object(o) => o.iter().for_each(|(_, i)| answer_text(i, out)),
        _ => {}
    }
}

const HOSTS: usize = 2;
const PROCESSES_PER_HOST: usize = 8;
const CALLS_PER_PROCESS: u64 = 100;

/// Two hosts (two signing keys) of eight writers each, all at once, 100 calls apiece
/// into one store: every session comes back whole and verifies, the filters select
/// by host and by time, and each key's sessions verify pinned to that key alone.
///
/// Each writer is a real long-lived host: `aegis wrap` over the echo server, one
/// session of 100 `tools/call`s, each awaited before the next (so 16 commits can be in
/// flight at once across processes, and every call's intent is committed before the
/// server sees it). Not 1600 one-call `aegis run`s: those would measure process start,
/// not a store written by many sessions at once.
#[test]
fn sixteen_writers_on_two_hosts_share_one_store_and_every_session_verifies() {
    let pg = postgres::shared();
    let store = Store::new(pg);
    let keys = [
        keygen(store.dir.path(), "host-a.key"),
        keygen(store.dir.path(), "host-b.key"),
    ];
    let own = machine_hostname();
    let second = second_hostname();
    let hostnames = [own.clone(), second.map_or(own.clone(), str::to_owned)];
    let logs = store.path("writers");
    std::fs::create_dir(&logs).unwrap();

    let started = Instant::now();
    std::thread::scope(|s| {
        let mut running = Vec::new();
        for (h, (key, _)) in keys.iter().enumerate() {
            for p in 0..PROCESSES_PER_HOST {
                let (store, logs) = (&store, &logs);
                let as_host = if h == 1 { second } else { None };
                running.push(s.spawn(move || {
                    let tag = format!("h{h}-p{p}");
                    let mut w = Writer::start(store, key, logs, &tag, as_host);
                    w.initialize();
                    for c in 0..CALLS_PER_PROCESS {
                        let said = format!("{tag}-c{c}");
                        let answer = w.echo(10 + c, &said);
                        assert_eq!(echoed(&answer).as_deref(), Some(said.as_str()));
                    }
                    let status = w.close();
                    assert_eq!(status.code(), Some(0), "{tag}: {}", w.stderr());
                }));
            }
        }
        for r in running {
            r.join().unwrap();
        }
    });
    let writing = started.elapsed();

    let all = store.path("all");
    let sessions = store.export(&all, &[]);
    let writers = HOSTS * PROCESSES_PER_HOST;
    assert_eq!(sessions.len(), writers);
    let (counts, code) = verify_summary(&all);
    assert_eq!(counts, [writers, writers, 0, 0, 0], "{:?}", counts);
    assert_eq!(code, 0);

    // Each session: its 100 calls, each with one intent and one outcome that completed,
    // and the calls' frames are the ones the client sent (by their digest).
    let mut by_host: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for session in &sessions {
        let intents = session.of_type("intent");
        let outcomes = session.of_type("outcome");
        assert_eq!(
            intents.len() as u64,
            CALLS_PER_PROCESS,
            "{}",
            session.file.display()
        );
        assert_eq!(outcomes.len() as u64, CALLS_PER_PROCESS);
        assert_eq!(session.of_type("close").len(), 1);
        for outcome in &outcomes {
            assert_eq!(
                at(outcome, &["execution", "status"]),
                "success",
                "{outcome:?}"
            );
        }
        let digests: BTreeSet<String> =
            intents.iter().map(|i| field(i, "request_digest")).collect();
        let writer = (0..HOSTS)
            .flat_map(|h| (0..PROCESSES_PER_HOST).map(move |p| format!("h{h}-p{p}")))
            .find(|tag| {
                (0..CALLS_PER_PROCESS).all(|c| {
                    let frame = echo_frame(10 + c, &format!("{tag}-c{c}"));
                    digests.contains(&RequestDigest::of_request(frame.as_bytes()).to_hex())
                })
            })
            .unwrap_or_else(|| panic!("{}: not one writer's calls", session.file.display()));
        by_host
            .entry(session.hostname())
            .or_default()
            .insert(writer);
    }
    let writers_of = |h: usize| -> BTreeSet<String> {
        (0..PROCESSES_PER_HOST)
            .map(|p| format!("h{h}-p{p}"))
            .collect()
    };
    if second.is_some() {
        assert_eq!(by_host[&hostnames[0]], writers_of(0));
        assert_eq!(by_host[&hostnames[1]], writers_of(1));
    } else {
        let mut both = writers_of(0);
        both.extend(writers_of(1));
        assert_eq!(by_host[&own], both);
    }

    // --host: each host's sessions, and none for a host that wrote nothing.
    for (h, name) in hostnames.iter().enumerate() {
        let dir = store.path(&format!("host-{h}"));
        let picked = store.export(&dir, &["--host", name]);
        let expected: BTreeSet<String> = sessions
            .iter()
            .filter(|s| &s.hostname() == name)
            .map(Session::nonce)
            .collect();
        let got: BTreeSet<String> = picked.iter().map(Session::nonce).collect();
        assert_eq!(got, expected, "--host {name}");
        let wanted = if second.is_some() {
            PROCESSES_PER_HOST
        } else {
            writers
        };
        assert_eq!(got.len(), wanted);
    }
    let none = store.export(&store.path("host-none"), &["--host", "no-such-host"]);
    assert!(none.is_empty());

    // --since: the sessions opened at or after the ninth opening, in the record's form;
    // a date before them all selects every one, a date after them none.
    let mut opened: Vec<String> = sessions.iter().map(Session::opened).collect();
    opened.sort();
    let since = &opened[writers / 2];
    let later = store.export(&store.path("since"), &["--since", since]);
    let expected: BTreeSet<String> = sessions
        .iter()
        .filter(|s| s.opened() >= *since)
        .map(Session::nonce)
        .collect();
    assert!(expected.len() < writers && !expected.is_empty());
    assert_eq!(
        later.iter().map(Session::nonce).collect::<BTreeSet<_>>(),
        expected
    );
    let all_of_today = store.export(&store.path("since-date"), &["--since", &opened[0][..10]]);
    assert_eq!(all_of_today.len(), writers);
    let future = store.export(&store.path("since-future"), &["--since", "2999-01-01"]);
    assert!(future.is_empty());

    // Pinned: each key's sessions verify under that key alone, and not under the other.
    let (reports, _, code) = verify_json(&[&all], &[]);
    assert_eq!(code, 0);
    for (h, (_, key_id)) in keys.iter().enumerate() {
        let mine: Vec<PathBuf> = reports
            .iter()
            .filter(|(_, r)| {
                list(r, "keys")
                    .iter()
                    .any(|k| k.as_object().is_some_and(|k| field(k, "key_id") == *key_id))
            })
            .map(|(name, _)| all.join(name))
            .collect();
        let mine: Vec<&Path> = mine.iter().map(PathBuf::as_path).collect();
        assert_eq!(mine.len(), PROCESSES_PER_HOST, "key {h}");
        let (pinned, summary, code) = verify_json(&mine, &[key_id]);
        assert_eq!(code, 0, "{summary:?}");
        assert_eq!(number(&summary, "verified"), PROCESSES_PER_HOST as u64);
        for report in pinned.values() {
            assert_eq!(field(report, "verdict"), "verified");
            assert_eq!(field(report, "trust"), "pinned_to");
        }
        let other = &keys[1 - h].1;
        let (_, summary, code) = verify_json(&mine, &[other]);
        assert_ne!(code, 0, "key {h}'s sessions pinned to the other key");
        assert_eq!(number(&summary, "verified"), 0);
    }
    eprintln!(
        "{writers} writers x {CALLS_PER_PROCESS} calls into one store: {:.1} s",
        writing.as_secs_f64()
    );
}

/// A writer killed with SIGKILL while its call runs leaves its session as it stood: the
/// intent stored, no outcome, no close. Its session is not Tampered but Indeterminate
/// with that call in flight; the writers beside it go on and verify.
#[test]
fn a_writer_killed_mid_call_leaves_its_call_in_flight_and_the_others_untouched() {
    let pg = postgres::shared();
    let store = Store::new(pg);
    let (key, _) = keygen(store.dir.path(), "k");
    let dir = store.path("writers");
    std::fs::create_dir(&dir).unwrap();
    let mut a = Writer::start(&store, &key, &dir, "a", None);
    let mut b = Writer::start(&store, &key, &dir, "b", None);
    let mut victim = Writer::start(&store, &key, &dir, "victim", None);
    for (i, w) in [&mut a, &mut b, &mut victim].into_iter().enumerate() {
        w.initialize();
        for c in 0..3 {
            let said = format!("w{i}-c{c}");
            assert_eq!(echoed(&w.echo(10 + c, &said)), Some(said));
        }
    }
    // The server sleeps on "hang": once it has the call, its intent is stored.
    victim.send(&echo_frame(20, "hang"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !victim.server_saw().contains("\"hang\"") {
        assert!(Instant::now() < deadline, "the server never got the call");
        std::thread::sleep(Duration::from_millis(20));
    }
    victim.child.kill().unwrap();
    let status = victim.child.wait().unwrap();
    assert_eq!(status.code(), None, "killed by a signal");
    let server = rustix::process::Pid::from_raw(victim.server_pid()).unwrap();
    rustix::process::kill_process(server, rustix::process::Signal::KILL).unwrap();
    for (i, w) in [&mut a, &mut b].into_iter().enumerate() {
        for c in 3..6 {
            let said = format!("w{i}-c{c}");
            assert_eq!(echoed(&w.echo(10 + c, &said)), Some(said));
        }
        assert_eq!(w.close().code(), Some(0), "{}", w.stderr());
    }

    let out = store.path("out");
    let sessions = store.export(&out, &[]);
    assert_eq!(sessions.len(), 3);
    let (reports, summary, code) = verify_json(&[&out], &[]);
    assert_eq!(code, 3, "the worst is Indeterminate: {summary:?}");
    assert_eq!(number(&summary, "verified"), 2);
    assert_eq!(number(&summary, "indeterminate"), 1);
    assert_eq!(number(&summary, "tampered"), 0);
    let hang = RequestDigest::of_request(echo_frame(20, "hang").as_bytes()).to_hex();
    for session in &sessions {
        let report = report_of(&reports, &session.file);
        let intents = session.of_type("intent");
        let killed = intents.iter().any(|i| field(i, "request_digest") == hang);
        if killed {
            assert_eq!(field(report, "verdict"), "indeterminate");
            assert_eq!(field(report, "class"), "unanchored_tail");
            let in_flight = list(report, "in_flight");
            assert_eq!(in_flight.len(), 1, "{report:?}");
            let call = in_flight[0].as_object().unwrap();
            let last = session.lines.last().unwrap();
            assert_eq!(field(last, "line_type"), "intent");
            assert_eq!(field(last, "request_digest"), hang);
            assert_eq!(field(call, "call_id"), field(last, "call_id"));
            assert_eq!(field(call, "tool_id"), "echo");
            assert_eq!((intents.len(), session.of_type("outcome").len()), (4, 3));
            assert!(session.of_type("close").is_empty());
        } else {
            assert_eq!(field(report, "verdict"), "verified", "{report:?}");
            assert_eq!((intents.len(), session.of_type("outcome").len()), (6, 6));
        }
    }
    assert_eq!(
        sessions
            .iter()
            .filter(|s| field(report_of(&reports, &s.file), "verdict") == "indeterminate")
            .count(),
        1
    );
    // `aegis verify` of the file alone says so in its words.
    let killed = sessions
        .iter()
        .find(|s| field(report_of(&reports, &s.file), "verdict") == "indeterminate")
        .unwrap();
    let out = aegis().arg("verify").arg(&killed.file).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stdout).contains("1 call in flight"),
        "{}",
        text(&out.stdout)
    );
    // `aegis log` lists the call with no outcome, and every other call as answered.
    let out = aegis()
        .args(["log", "--color", "never"])
        .arg(&killed.file)
        .output()
        .unwrap();
    let listed = text(&out.stdout);
    let call_id = field(killed.lines.last().unwrap(), "call_id");
    let open: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("no_outcome"))
        .collect();
    assert_eq!(open.len(), 1, "{listed}");
    assert!(open[0].contains(&call_id), "{listed}");
}

/// The server restarted (an immediate shutdown: every backend gone at once) while a
/// wrap session makes calls: the call in flight is refused as not recorded; once the
/// server is back, the next calls run in a new session whose open line names the
/// stopped one; and nothing ran without its intent stored: every call the server
/// received (its side effect, a line in its log) has its intent in the store.
#[test]
fn a_server_restarted_mid_session_refuses_the_call_in_flight_then_resumes_and_nothing_ran_unrecorded()
 {
    let mut pg = postgres::private();
    let store = Store::new(&pg);
    let (key, _) = keygen(store.dir.path(), "k");
    let dir = store.path("writers");
    std::fs::create_dir(&dir).unwrap();
    let (restarted_tx, restarted) = std::sync::mpsc::channel::<()>();
    let mut w = Writer::start(&store, &key, &dir, "w", None);
    w.initialize();
    let client = std::thread::spawn(move || {
        // (said, answer) for every call, in order.
        let mut answers: Vec<(String, Object)> = Vec::new();
        let mut next = 10;
        let mut call = |w: &mut Writer, answers: &mut Vec<(String, Object)>| {
            let said = format!("c{next}");
            let answer = w.echo(next, &said);
            answers.push((said, answer));
            next += 1;
        };
        // Until a call is refused (the server went away)...
        while answers.iter().all(|(_, a)| echoed(a).is_some()) {
            assert!(answers.len() < 100_000, "no call was ever refused");
            call(&mut w, &mut answers);
        }
        // ...and three more once it is back.
        restarted.recv().unwrap();
        for _ in 0..3 {
            call(&mut w, &mut answers);
        }
        let status = w.close();
        (answers, status, w.stderr(), w.server_saw())
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(dir.join("w-server.log"))
        .unwrap_or_default()
        .matches("tools/call")
        .count()
        < 10
    {
        assert!(
            Instant::now() < deadline,
            "the calls never reached the server"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    pg.restart(Shutdown::Immediate);
    restarted_tx.send(()).unwrap();
    let (answers, status, stderr, server_saw) = client.join().unwrap();

    // The answers: calls answered until the server went, the one in flight refused as
    // not recorded, and the three after the restart answered again.
    let first_refused = answers
        .iter()
        .position(|(_, a)| echoed(a).is_none())
        .unwrap();
    assert!(first_refused >= 10, "{first_refused}");
    assert_eq!(answers.len(), first_refused + 4);
    for (said, answer) in answers[..first_refused]
        .iter()
        .chain(&answers[first_refused + 1..])
    {
        assert_eq!(echoed(answer).as_deref(), Some(said.as_str()), "{stderr}");
    }
    let (said, answer) = &answers[first_refused];
    assert!(
        answer_says(answer).contains("could not be recorded"),
        "{said}: {}",
        answer_says(answer)
    );
    assert!(stderr.contains("postgresql server"), "{stderr}");
    let _ = status;

    // The side effects: the calls the server received, each with its intent stored.
    let ran: Vec<String> = server_saw
        .lines()
        .filter(|l| l.contains("tools/call"))
        .map(|l| at(&object(l.as_bytes()), &["params", "arguments", "text"]))
        .collect();
    let refused: BTreeSet<&str> = BTreeSet::from([answers[first_refused].0.as_str()]);
    assert!(ran.len() >= first_refused, "{} ran", ran.len());
    assert!(ran.iter().all(|s| !refused.contains(s.as_str())), "{ran:?}");
    let out = store.path("out");
    let sessions = store.export(&out, &[]);
    assert_eq!(
        sessions.len(),
        2,
        "the stopped session and the one after it"
    );
    let stored: BTreeSet<String> = sessions
        .iter()
        .flat_map(|s| s.of_type("intent"))
        .map(|i| field(i, "request_digest"))
        .collect();
    let id_of = |said: &str| -> u64 { said[1..].parse().unwrap() };
    for said in &ran {
        let digest = RequestDigest::of_request(echo_frame(id_of(said), said).as_bytes()).to_hex();
        assert!(
            stored.contains(&digest),
            "{said} ran without its intent stored"
        );
    }
    eprintln!(
        "restarted: {first_refused} calls answered, one refused ({}), {} ran, {} intents stored",
        answer_says(&answers[first_refused].1),
        ran.len(),
        stored.len(),
    );
    // The first session stops where the store did: not Tampered, open at its end. The
    // second names it and verifies.
    let (reports, _, code) = verify_json(&[&out], &[]);
    assert_eq!(code, 3);
    let report = report_of(&reports, &sessions[0].file);
    assert_eq!(field(report, "class"), "unanchored_tail", "{report:?}");
    let report = report_of(&reports, &sessions[1].file);
    assert_eq!(field(report, "verdict"), "verified", "{report:?}");
    let first_open = aegis_record::LineHash::of_line(
        std::fs::read_to_string(&sessions[0].file)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .as_bytes(),
    );
    let second = std::fs::read_to_string(&sessions[1].file).unwrap();
    assert!(
        second.lines().next().unwrap().contains(&format!(
            "\"resumes\":{{\"open_line_hash\":\"{}\"}}",
            first_open.to_hex()
        )),
        "{second}"
    );
}

/// The writer can only add lines: DELETE, UPDATE and TRUNCATE are refused it, and so
/// is disabling the trigger. A row altered by the table's owner (the trigger disabled
/// for the while) makes its session Tampered, and only that one.
#[test]
fn the_writer_cannot_rewrite_the_store_and_an_altered_row_is_found_tampered() {
    let pg = postgres::shared();
    let store = Store::new(pg);
    let (key, _) = keygen(store.dir.path(), "k");
    for _ in 0..3 {
        let out = store.run_echo(&key);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let (db, writer) = (&store.db, &store.writer);
    let count = || {
        pg.sql_in(db, writer, "SELECT count(*) FROM aegis_lines")
            .unwrap()
    };
    let before = count();
    for statement in [
        "DELETE FROM aegis_lines",
        "UPDATE aegis_lines SET host = 'elsewhere'",
        "TRUNCATE aegis_lines",
        "ALTER TABLE aegis_lines DISABLE TRIGGER aegis_lines_append_only",
    ] {
        let refused = pg.sql_in(db, writer, statement).unwrap_err();
        assert!(
            refused.contains("permission denied") || refused.contains("must be owner"),
            "{statement}: {refused}"
        );
    }
    assert_eq!(count(), before);

    // The owner rewrites the time of one session's outcome line.
    let session = pg
        .sql_in(
            db,
            SUPERUSER,
            "SELECT session FROM aegis_lines WHERE seq = 0 ORDER BY line_time LIMIT 1",
        )
        .unwrap();
    let altered = pg
        .sql_in(
            db,
            SUPERUSER,
            &format!(
                "ALTER TABLE aegis_lines DISABLE TRIGGER aegis_lines_append_only;
                 UPDATE aegis_lines
                    SET line = convert_to(regexp_replace(convert_from(line, 'UTF8'),
                                          '\"time\":\"2', '\"time\":\"1'), 'UTF8')
                  WHERE session = '{session}'
                    AND convert_from(line, 'UTF8') LIKE '%\"line_type\":\"outcome\"%'
                 RETURNING seq;
                 ALTER TABLE aegis_lines ENABLE TRIGGER aegis_lines_append_only;"
            ),
        )
        .unwrap();
    assert_eq!(altered.lines().count(), 1, "one outcome line: {altered}");

    let out = store.path("out");
    let sessions = store.export(&out, &[]);
    assert_eq!(sessions.len(), 3);
    let (reports, summary, code) = verify_json(&[&out], &[]);
    assert_eq!(code, 1, "Tampered: {summary:?}");
    for s in &sessions {
        let verdict = field(report_of(&reports, &s.file), "verdict");
        if s.nonce() == session {
            assert_eq!(verdict, "tampered", "{:?}", report_of(&reports, &s.file));
        } else {
            assert_eq!(verdict, "verified", "{:?}", report_of(&reports, &s.file));
        }
    }
}

/// `cmd`'s exit code and its error, which must be one line (`error: …`); the notes
/// beside it (`aegis: profile …`) are not part of it.
fn one_line_failure(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (out.status.code().unwrap_or(-1), one_error_line(&out))
}

/// The one `error: …` line of a failed command's standard error.
fn one_error_line(out: &Output) -> String {
    let stderr = text(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("aegis: "))
        .collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    assert!(errors[0].starts_with("error: "), "{stderr}");
    errors[0].to_owned()
}

/// The operator's mistakes, each said in one line with its documented exit code.
#[test]
fn operator_errors_are_one_line_with_their_exit_code() {
    let pg = postgres::shared();
    let store = Store::uninitialised(pg);
    let (key, _) = keygen(store.dir.path(), "k");

    // A store not made yet: run is refused (4), naming the command that makes it.
    let out = store.run_echo(&key);
    let stderr = one_error_line(&out);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("aegis store init"), "{stderr}");

    // The writer as the administrator: refused, and nothing made.
    let (code, stderr) = one_line_failure(
        aegis()
            .arg("--profile")
            .arg(&store.profile)
            .args(["store", "init", "--admin-connection"])
            .arg(pg.conninfo_in(&store.db, &store.writer)),
    );
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("one role"), "{stderr}");
    assert_eq!(
        pg.sql_in(
            &store.db,
            SUPERUSER,
            "SELECT to_regclass('aegis_lines') IS NULL"
        )
        .unwrap(),
        "t"
    );

    // An unreachable server: refused (4), naming it.
    let nowhere = store.path("no-server");
    std::fs::create_dir(&nowhere).unwrap();
    let unreachable = store.path("unreachable.toml");
    std::fs::write(
        &unreachable,
        profile_text(&format!(
            "host={} port=5999 user={} dbname={}",
            nowhere.display(),
            store.writer,
            store.db
        )),
    )
    .unwrap();
    let (code, stderr) = one_line_failure(
        aegis()
            .arg("--profile")
            .arg(&unreachable)
            .args(["run", "--component"])
            .arg(crate::common::guest("echo"))
            .args(["--id", "echo", "--input", "hi", "--signing-key"])
            .arg(&key),
    );
    assert_eq!(code, 4, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "postgresql server {} port 5999",
            nowhere.display()
        )),
        "{stderr}"
    );

    // A file-sink profile has no store to prepare, and keeps one chain: no --host.
    let file_profile = store.path("file.toml");
    std::fs::write(
        &file_profile,
        format!(
            "name = \"file\"\ndescription = \"d\"\n[policy]\nplugin = \"builtin:policy-static\"\n\
             config = {{ verdict = \"allow\" }}\n[capability]\n[sandbox]\n[audit]\n\
             plugin = \"builtin:file-sink\"\nconfig = {{ path = {:?} }}\n",
            store.path("record.aarl").display().to_string()
        ),
    )
    .unwrap();
    let (code, stderr) = one_line_failure(
        aegis()
            .arg("--profile")
            .arg(&file_profile)
            .args(["store", "init", "--admin-connection"])
            .arg(pg.conninfo_in(&store.db, SUPERUSER)),
    );
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("has no store to prepare"), "{stderr}");
    let run = aegis()
        .arg("--profile")
        .arg(&file_profile)
        .args(["run", "--component"])
        .arg(crate::common::guest("echo"))
        .args(["--id", "echo", "--input", "hi", "--signing-key"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let (code, stderr) = one_line_failure(
        aegis()
            .arg("--profile")
            .arg(&file_profile)
            .args(["export", "--host", "h", "--out"])
            .arg(store.path("file-out")),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--host"), "{stderr}");

    // The PostgreSQL store exports to a directory, never to a file.
    let out = store.init(&pg.conninfo_in(&store.db, SUPERUSER));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = store.run_echo(&key);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let file = store.path("a-file");
    std::fs::write(&file, b"kept").unwrap();
    let (code, stderr) = one_line_failure(
        aegis()
            .arg("--profile")
            .arg(&store.profile)
            .arg("export")
            .arg("--out")
            .arg(&file),
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not a directory"), "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), b"kept");
}

/// A policy's rate limit held in the store: six `aegis run`s at once, each a process
/// of its own with a budget of 3 an hour, get 3 calls between them, and a seventh
/// afterwards none. With a file record instead, each process keeps its own budget and
/// all six run: the store is what makes the budget one.
#[test]
fn a_rate_limit_holds_across_processes_through_the_store() {
    let pg = postgres::shared();
    let store = Store::new(pg);
    let (key, _) = keygen(store.dir.path(), "k");
    let policy = store.path("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: deny\nrules:\n  - id: echo-budget\n    action: rate_limit\n    \
         tool: echo\n    rate: { max: 3, per_seconds: 3600 }\n",
    )
    .unwrap();
    let run = |audit: Option<&Path>| {
        let mut cmd = aegis();
        cmd.arg("--profile")
            .arg(&store.profile)
            .args(["run", "--policy"])
            .arg(&policy)
            .arg("--component")
            .arg(crate::common::guest("echo"))
            .args(["--id", "echo", "--input", "hi", "--signing-key"])
            .arg(&key);
        if let Some(dir) = audit {
            cmd.arg("--audit").arg(dir);
        }
        cmd
    };
    let at_once = |audit: Option<&Path>| -> Vec<i32> {
        let children: Vec<_> = (0..6)
            .map(|_| {
                run(audit)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut codes: Vec<i32> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                out.status
                    .code()
                    .unwrap_or_else(|| panic!("{}", text(&out.stderr)))
            })
            .collect();
        codes.sort_unstable();
        codes
    };
    assert_eq!(at_once(None), [0, 0, 0, 11, 11, 11]);
    let late = run(None).output().unwrap();
    assert_eq!(late.status.code(), Some(11), "{}", text(&late.stderr));
    assert!(
        text(&late.stderr).contains("echo-budget"),
        "{}",
        text(&late.stderr)
    );
    // The refusals are on the record like any call: 7 sessions, 3 of them allowed.
    let out = store.path("out");
    let sessions = store.export(&out, &[]);
    assert_eq!(sessions.len(), 7);
    let allowed = sessions
        .iter()
        .flat_map(|s| s.of_type("outcome"))
        .filter(|o| at(o, &["policy", "status"]) == "allowed")
        .count();
    assert_eq!(allowed, 3);
    // Without the store, a process's budget is its own.
    let files = store.path("files");
    std::fs::create_dir(&files).unwrap();
    assert_eq!(at_once(Some(&files)), [0; 6]);
}
