//! `aegis wrap` end to end, as a client sees it: the built binary between this process
//! (the client) and a minimal MCP stdio server (this same executable, re-run with
//! `AEGIS_WRAP_BENCH_SERVER=1`), against the same server on a bare pipe.
//!
//! - `unrecorded/{bare,wrapped}`: one `ping` request and its answer, which wrap relays
//!   without the pipeline [wrapped − bare ≤ 20 µs].
//! - `recorded/{volatile,durable}/{1,8}`: one `tools/call` through wrap — policy,
//!   capability, intent line, the server's answer, outcome line — on the default
//!   profile's memory sink, and on a file sink (`--audit FILE --signing-key KEY`), with 1
//!   and with 8 requests kept outstanding (pipelined); time per call, and calls/s
//!   [volatile ≤ 2 × `floor/seal_two`; durable ≤ 1.2 × `floor/two_fsyncs`].
//! - `floor/seal_two`: sealing the intent and the outcome line that wrap wrote for one
//!   call (`aegis_record::seal`: canonical JSON, SHA-256, ed25519 for the outcome).
//!   `floor/seal_outcome` is the outcome line alone.
//! - `floor/two_fsyncs`: appending a 1 KiB line and `fdatasync`, twice, on a file in the
//!   directory the durable record lives in; measured right before the durable calls, and
//!   again right after them as `floor/two_fsyncs_after`. `floor/two_fsyncs_sink` (and
//!   `…_after_sink`) append and sync the same two lines through the file sink itself.
//!   `floor/two_fsyncs_handoff` (and `…_after_handoff`) syncs the same two lines the way
//!   a call does: from two threads, each woken through a pipe by the one before (the
//!   intent on one reader thread, the outcome on the other). Reported beside the
//!   target's floor, never instead of it.
//!
//! Each floor runs next to the calls it is the floor of: seal floors, volatile calls,
//! fsync floor, durable calls, fsync floor again.
//!
//! Run with `cargo bench -p aegis --bench wrap`; results in `benches/results/wrap.md`.
//!
//! After each id the bench also prints, per request, the CPU time (user and system) and
//! the voluntary context switches (a thread blocking, to be woken later) of wrap's
//! process and of the server, read from `/proc` before and after the id ran, warm-up
//! included: where the time goes, not a timing.
//!
//! Before any timing, each wrapped session's `tools/call` must come back as the server
//! wrote it (allowed, not refused); inside the loops every answer is checked for its id
//! and its ending, and after each session wrap must exit 0 (an intent or outcome it
//! could not write makes it exit 17). The durable records must pass `aegis verify` with
//! one intent and one successful outcome per call sent. The files live under cargo's
//! `CARGO_TARGET_TMPDIR` (the target directory's disk, not a tmpfs).

use aegis_record::json::{Object, Value, parse};
use aegis_record::key::SigningKey;
use aegis_record::{LineHash, seal};
use aegis_station_api::Sink as _;
use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of the server this executable runs as.
const SERVER_ENV: &str = "AEGIS_WRAP_BENCH_SERVER";

/// The one tool the server lists.
const TOOL: &str = "bench";

/// Requests kept outstanding in the pipelined runs.
const IN_FLIGHT: usize = 8;

/// How every answer begins: the server writes `jsonrpc` then `id` first, and wrap relays
/// the bytes as written.
const ANSWER_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// How the server's `tools/call` answer ends; a refusal by wrap says `"isError":true`.
const CALL_RESULT_END: &[u8] = b"\"isError\":false}}\n";
/// How the server's answer to `ping` (and anything else) ends.
const EMPTY_RESULT_END: &[u8] = b"\"result\":{}}\n";

// ---------------------------------------------------------------------------------------
// The server

/// A minimal MCP server: answers `initialize`, `tools/list` (one tool) and
/// `tools/call` with fixed small results and anything else with an empty result;
/// ignores notifications. It finds `id` and `method` by searching the line, not by
/// parsing it, so its cost is small and the same bare and wrapped.
fn serve() {
    let stdin = std::io::stdin().lock();
    let mut input = BufReader::new(stdin);
    let mut out = std::io::stdout().lock();
    let mut line = Vec::new();
    let mut answer = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Some(id) = after(&line, br#""id":"#).map(digits) else {
            continue; // a notification
        };
        let method = after(&line, br#""method":""#)
            .map(|m| &m[..m.iter().position(|&b| b == b'"').unwrap_or(m.len())])
            .unwrap_or_default();
        let result: &[u8] = match method {
            b"initialize" => {
                br#"{"capabilities":{"tools":{}},"protocolVersion":"2025-06-18","serverInfo":{"name":"wrap-bench","version":"1"}}"#
            }
            b"tools/list" => {
                br#"{"tools":[{"description":"Answers ok.","inputSchema":{"type":"object"},"name":"bench"}]}"#
            }
            b"tools/call" => br#"{"content":[{"text":"ok","type":"text"}],"isError":false}"#,
            _ => b"{}",
        };
        answer.clear();
        answer.extend_from_slice(ANSWER_PREFIX);
        answer.extend_from_slice(id);
        answer.extend_from_slice(br#","result":"#);
        answer.extend_from_slice(result);
        answer.extend_from_slice(b"}\n");
        if out.write_all(&answer).and_then(|()| out.flush()).is_err() {
            return;
        }
    }
}

/// The bytes after the first `needle` in `hay`.
fn after<'a>(hay: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .map(|i| &hay[i + needle.len()..])
}

/// The leading ASCII digits of `s`.
fn digits(s: &[u8]) -> &[u8] {
    &s[..s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len())]
}

// ---------------------------------------------------------------------------------------
// Accounting

/// A process's CPU time and voluntary context switches, all threads, from `/proc`.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    /// In clock ticks (`USER_HZ`, 100 per second on Linux's stable ABI).
    user_ticks: u64,
    sys_ticks: u64,
    switches: u64,
}

/// Linux reports CPU times in `USER_HZ` ticks, fixed at 100 for user space.
const TICKS_PER_SECOND: f64 = 100.0;

impl Usage {
    /// `None` when `/proc` does not have the process (gone, or not Linux).
    fn of(pid: u32) -> Option<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which may hold spaces: state is field 3,
        // utime 14, stime 15.
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let user_ticks = rest.get(11)?.parse().ok()?;
        let sys_ticks = rest.get(12)?.parse().ok()?;
        let mut switches = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let status = std::fs::read_to_string(task.ok()?.path().join("status")).ok()?;
            let count = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok());
            switches += count.unwrap_or(0);
        }
        Some(Usage {
            user_ticks,
            sys_ticks,
            switches,
        })
    }

    /// What `self` (later) adds over `before`, per request, as a short text.
    fn per_request(&self, before: &Usage, requests: u64) -> String {
        let n = requests.max(1) as f64;
        let us = |ticks: u64| ticks as f64 / TICKS_PER_SECOND * 1e6 / n;
        let user = us(self.user_ticks.saturating_sub(before.user_ticks));
        let sys = us(self.sys_ticks.saturating_sub(before.sys_ticks));
        let switches = self.switches.saturating_sub(before.switches) as f64 / n;
        format!(
            "{:.1} µs CPU (user {user:.1}, sys {sys:.1}), {switches:.2} voluntary switches",
            user + sys
        )
    }
}

// ---------------------------------------------------------------------------------------
// The client

fn aegis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_aegis"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One MCP session over a child's stdin and stdout: the server itself, or `aegis wrap`.
struct Peer {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Where wrap's stderr goes (its notice, and any error), for a failure message.
    stderr: Option<PathBuf>,
    /// The server's pid when it is wrap's child.
    server: Option<u32>,
    next_id: u64,
    /// `tools/call` requests sent.
    calls: u64,
    request: Vec<u8>,
    answer: Vec<u8>,
}

impl Peer {
    /// Starts the server directly.
    fn bare() -> Peer {
        let mut cmd = Command::new(std::env::current_exe().expect("the bench executable"));
        cmd.env(SERVER_ENV, "1");
        Peer::start("bare".into(), cmd, None)
    }

    /// Starts `aegis wrap [flags] -- <this executable as the server>`.
    fn wrapped(name: &str, flags: &[&std::ffi::OsStr], stderr: PathBuf) -> Peer {
        let mut cmd = aegis();
        cmd.arg("wrap")
            .args(flags)
            .arg("--")
            .arg(std::env::current_exe().expect("the bench executable"))
            .env(SERVER_ENV, "1")
            .stderr(std::fs::File::create(&stderr).expect("wrap's stderr file"));
        Peer::start(name.into(), cmd, Some(stderr))
    }

    fn start(name: String, mut cmd: Command, stderr: Option<PathBuf>) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: cannot start: {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut peer = Peer {
            name,
            child,
            stdin,
            stdout,
            stderr,
            server: None,
            next_id: 1,
            calls: 0,
            request: Vec::with_capacity(256),
            answer: Vec::with_capacity(256),
        };
        peer.handshake();
        if peer.stderr.is_some() {
            // wrap's only child, started before it answered the handshake.
            let pid = peer.child.id();
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"));
            peer.server = children
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse().ok());
        }
        peer
    }

    /// The usage of wrap (or the bare server) and of the wrapped server, and the
    /// requests sent so far.
    fn usage(&self) -> (Option<Usage>, Option<Usage>, u64) {
        let server = self.server.and_then(Usage::of);
        (Usage::of(self.child.id()), server, self.next_id)
    }

    /// Prints what the process(es) spent per request since `before`.
    fn report(&self, id: &str, before: (Option<Usage>, Option<Usage>, u64)) {
        let after = self.usage();
        let requests = after.2 - before.2;
        let own = if self.stderr.is_some() {
            "wrap"
        } else {
            "server"
        };
        let mut line = format!("{id}: {requests} requests; per request:");
        if let (Some(b), Some(a)) = (before.0, after.0) {
            line += &format!(" {own} {}", a.per_request(&b, requests));
        }
        if let (Some(b), Some(a)) = (before.1, after.1) {
            line += &format!("; server {}", a.per_request(&b, requests));
        }
        println!("{line}");
    }

    fn handshake(&mut self) {
        let id = self.send(
            "initialize",
            r#"{"capabilities":{},"clientInfo":{"name":"wrap-bench","version":"1"},"protocolVersion":"2025-06-18"}"#,
        );
        self.expect(id, b"}}\n");
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        self.write_line(note);
        // wrap refuses a call to a tool the server has not listed: list it first.
        let id = self.send("tools/list", "{}");
        self.expect(id, b"]}}\n");
    }

    fn write_line(&mut self, line: &[u8]) {
        self.request.clear();
        self.request.extend_from_slice(line);
        self.request.push(b'\n');
        self.flush_request();
    }

    fn flush_request(&mut self) {
        let stdin = self.stdin.as_mut().expect("the session is open");
        // One write(2) per request: a ChildStdin is not buffered.
        if let Err(e) = stdin.write_all(&self.request) {
            panic!(
                "{}: writing a request: {e}{}",
                self.name,
                self.diagnostics()
            );
        }
    }

    /// Sends a request; returns its id.
    fn send(&mut self, method: &str, params: &str) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if method == "tools/call" {
            self.calls += 1;
        }
        self.request.clear();
        write!(
            self.request,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        )
        .expect("writing to a Vec");
        self.request.push(b'\n');
        self.flush_request();
        id
    }

    fn ping(&mut self) -> u64 {
        self.send("ping", "{}")
    }

    fn call(&mut self) -> u64 {
        self.send("tools/call", r#"{"arguments":{},"name":"bench"}"#)
    }

    /// Reads the next answer; returns its id after checking that it ends with `end`.
    fn recv(&mut self, end: &[u8]) -> u64 {
        self.answer.clear();
        match self.stdout.read_until(b'\n', &mut self.answer) {
            Ok(n) if n > 0 => {}
            other => panic!("{}: no answer ({other:?}){}", self.name, self.diagnostics()),
        }
        let id = self
            .answer
            .strip_prefix(ANSWER_PREFIX)
            .map(digits)
            .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok());
        match id {
            Some(id) if self.answer.ends_with(end) => id,
            _ => panic!(
                "{}: unexpected answer: {}{}",
                self.name,
                text(&self.answer),
                self.diagnostics()
            ),
        }
    }

    /// Reads the next answer and checks it answers `id`.
    fn expect(&mut self, id: u64, end: &[u8]) {
        let got = self.recv(end);
        assert_eq!(got, id, "{}: answers out of order", self.name);
    }

    /// One request, then its answer.
    fn round_trip(&mut self, call: bool) {
        if call {
            let id = self.call();
            self.expect(id, CALL_RESULT_END);
        } else {
            let id = self.ping();
            self.expect(id, EMPTY_RESULT_END);
        }
    }

    /// `iters` calls with up to [`IN_FLIGHT`] outstanding at a time; returns the time
    /// from the first request to the last answer.
    fn pipelined(&mut self, iters: u64) -> Duration {
        let mut outstanding = VecDeque::with_capacity(IN_FLIGHT);
        let start = Instant::now();
        let mut sent = 0;
        while sent < iters && outstanding.len() < IN_FLIGHT {
            outstanding.push_back(self.call());
            sent += 1;
        }
        while let Some(&oldest) = outstanding.front() {
            let id = self.recv(CALL_RESULT_END);
            // JSON-RPC lets answers come in any order; each must answer a pending id.
            if id == oldest {
                outstanding.pop_front();
            } else {
                let at = outstanding.iter().position(|&p| p == id);
                let at = at.unwrap_or_else(|| panic!("{}: answer to id {id}", self.name));
                outstanding.remove(at);
            }
            if sent < iters {
                outstanding.push_back(self.call());
                sent += 1;
            }
        }
        start.elapsed()
    }

    /// Closes the session and waits for the peer to exit; it must exit 0.
    fn close(mut self) {
        self.stdin = None;
        let status = self.child.wait().expect("waiting for the peer");
        assert_eq!(
            status.code(),
            Some(0),
            "{} exited with {status}{}",
            self.name,
            self.diagnostics()
        );
    }

    fn diagnostics(&self) -> String {
        match &self.stderr {
            Some(path) => format!(
                "\nwrap's stderr:\n{}",
                std::fs::read_to_string(path).unwrap_or_default()
            ),
            None => String::new(),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // After close() the child has been reaped; otherwise (a panic) do not leave it.
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures

/// The directory the records and the fsync floor's file live in, and the signing key.
struct Fixture {
    dir: tempfile::TempDir,
    key: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        // Under the target directory: on this machine /tmp is the same disk, but a tmpfs
        // /tmp elsewhere would make every fsync free.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a bench directory");
        let key = dir.path().join("signing.key");
        let out = aegis()
            .args(["keygen", "--out"])
            .arg(&key)
            .output()
            .expect("aegis keygen");
        assert!(out.status.success(), "keygen: {}", text(&out.stderr));
        Fixture { dir, key }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `aegis wrap` on the default profile (memory sink, development key).
    fn volatile(&self, name: &str) -> Peer {
        Peer::wrapped(name, &[], self.path(&format!("{name}.stderr")))
    }

    /// `aegis wrap --audit <name>.aarl --signing-key KEY`.
    fn durable(&self, name: &str) -> (Peer, PathBuf) {
        let record = self.path(&format!("{name}.aarl"));
        let flags = [
            "--audit".as_ref(),
            record.as_os_str(),
            "--signing-key".as_ref(),
            self.key.as_os_str(),
        ];
        let peer = Peer::wrapped(name, &flags, self.path(&format!("{name}.stderr")));
        (peer, record)
    }
}

fn object(line: &[u8]) -> Object {
    match parse(line) {
        Ok(Value::Object(o)) => o,
        other => panic!("a record line that is not an object: {other:?}"),
    }
}

fn str_of<'a>(o: &'a Object, key: &str) -> &'a str {
    o.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Checks a closed session's record: `aegis verify` says Verified, and there is one
/// intent and one successful outcome of the bench tool per call sent. Returns the lines,
/// without their newlines.
fn check_record(record: &Path, calls: u64) -> Vec<Vec<u8>> {
    let out = aegis()
        .arg("verify")
        .arg(record)
        .output()
        .expect("aegis verify");
    let report = text(&out.stdout);
    assert!(
        out.status.success() && report.starts_with("Verified"),
        "{}: {report}{}",
        record.display(),
        text(&out.stderr)
    );
    let bytes = std::fs::read(record).expect("the record");
    let lines: Vec<Vec<u8>> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let (mut intents, mut outcomes) = (0, 0);
    for line in &lines {
        let o = object(line);
        match str_of(&o, "line_type") {
            "intent" => intents += 1,
            "outcome" => {
                let status = o
                    .get("execution")
                    .and_then(Value::as_object)
                    .map(|e| str_of(e, "status"));
                assert_eq!(status, Some("success"), "{}", text(line));
                assert_eq!(str_of(&o, "tool_id"), TOOL);
                outcomes += 1;
            }
            _ => {}
        }
    }
    assert_eq!((intents, outcomes), (calls, calls), "{}", record.display());
    lines
}

/// A record line taken apart into `seal`'s arguments.
struct Split {
    line_type: String,
    body: Object,
    seq: u64,
    prev_hash: LineHash,
    signed: bool,
}

fn split(line: &[u8]) -> Split {
    let mut body = object(line);
    let line_type = str_of(&body, "line_type").to_owned();
    let seq = body.get("seq").and_then(Value::as_int).expect("seq");
    let prev_hash = LineHash::from_hex(str_of(&body, "prev_hash")).expect("prev_hash");
    let signed = body.contains_key("signature");
    for m in aegis_record::chain::CHAIN_MEMBERS {
        body.remove(m);
    }
    Split {
        line_type,
        body,
        seq,
        prev_hash,
        signed,
    }
}

fn reseal(s: &Split, body: Object, key: &SigningKey) -> Vec<u8> {
    let signer = s.signed.then_some(key);
    seal(&s.line_type, body, s.seq, s.prev_hash, signer)
        .expect("seal")
        .bytes
}

// ---------------------------------------------------------------------------------------
// The benches

fn unrecorded(c: &mut Criterion, fx: &Fixture) {
    let mut g = c.benchmark_group("unrecorded");
    let mut bare = Peer::bare();
    let before = bare.usage();
    g.bench_function("bare", |b| b.iter(|| bare.round_trip(false)));
    bare.report("unrecorded/bare", before);
    bare.close();
    let mut wrapped = fx.volatile("unrecorded-wrapped");
    let before = wrapped.usage();
    g.bench_function("wrapped", |b| b.iter(|| wrapped.round_trip(false)));
    wrapped.report("unrecorded/wrapped", before);
    wrapped.close();
    g.finish();
}

/// One recorded-call bench: a session per bench id, checked before and after.
fn recorded_one(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    sink: &str,
    in_flight: usize,
    peer: &mut Peer,
) {
    // Allowed and relayed: the server's own answer comes back, not a refusal.
    peer.round_trip(true);
    let before = peer.usage();
    g.bench_with_input(BenchmarkId::new(sink, in_flight), &in_flight, |b, &n| {
        if n == 1 {
            b.iter(|| peer.round_trip(true));
        } else {
            b.iter_custom(|iters| peer.pipelined(iters));
        }
    });
    peer.report(&format!("recorded/{sink}/{in_flight}"), before);
}

/// `recorded/<sink>/{1,8}`, each on a session of its own from `open`, whose record (if
/// durable) is checked once the session has closed.
fn recorded(c: &mut Criterion, sink: &str, open: impl Fn(&str) -> (Peer, Option<PathBuf>)) {
    let mut g = c.benchmark_group("recorded");
    g.throughput(Throughput::Elements(1));
    if sink == "durable" {
        // A durable call waits for two fsyncs (milliseconds): fewer, flat samples.
        g.sampling_mode(SamplingMode::Flat);
        g.sample_size(30);
    }
    for n in [1, IN_FLIGHT] {
        let (mut peer, record) = open(&format!("{sink}-{n}"));
        recorded_one(&mut g, sink, n, &mut peer);
        let calls = peer.calls;
        peer.close();
        if let Some(record) = record {
            check_record(&record, calls);
        }
    }
    g.finish();
}

fn seal_floors(c: &mut Criterion, fx: &Fixture) {
    let mut g = c.benchmark_group("floor");
    // The two lines wrap wrote for one call, resealed byte for byte.
    let (mut peer, record) = fx.durable("floor");
    peer.round_trip(true);
    let calls = peer.calls;
    peer.close();
    let lines = check_record(&record, calls);
    let key = SigningKey::load(&fx.key).expect("the signing key");
    let of_type = |t: &str| {
        let line = lines
            .iter()
            .find(|l| str_of(&object(l), "line_type") == t)
            .unwrap_or_else(|| panic!("no {t} line"));
        (split(line), line.clone())
    };
    let (intent, intent_line) = of_type("intent");
    let (outcome, outcome_line) = of_type("outcome");
    assert!(
        !intent.signed && outcome.signed,
        "intents unsigned, outcomes signed"
    );
    assert_eq!(reseal(&intent, intent.body.clone(), &key), intent_line);
    assert_eq!(reseal(&outcome, outcome.body.clone(), &key), outcome_line);
    g.bench_function("seal_two", |b| {
        b.iter_batched(
            || (intent.body.clone(), outcome.body.clone()),
            |(i, o)| (reseal(&intent, i, &key), reseal(&outcome, o, &key)),
            BatchSize::SmallInput,
        );
    });
    g.bench_function("seal_outcome", |b| {
        b.iter_batched(
            || outcome.body.clone(),
            |o| reseal(&outcome, o, &key),
            BatchSize::SmallInput,
        );
    });

    g.finish();
}

/// The file sink's durable append, twice: write the line, then fdatasync. Measured
/// right before and right after the durable calls (`name`), because an fsync on a
/// shared disk costs what the other writers on it make it cost at that minute.
fn fsync_floor(c: &mut Criterion, fx: &Fixture, name: &str) {
    let mut g = c.benchmark_group("floor");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(fx.path("fsync-floor.aarl"))
        .expect("the fsync floor's file");
    let mut line = vec![b'x'; 1023];
    line.push(b'\n');
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(30);
    g.bench_function(name, |b| {
        b.iter(|| {
            for _ in 0..2 {
                file.write_all(&line).expect("append");
                file.sync_data().expect("fdatasync");
            }
        });
    });
    // The same two lines through the file sink wrap's record uses (its lock, its group
    // commit): what of a durable call's cost above the fsyncs is the sink's own.
    let sink = aegis_sink_file::FileSink::open(&fx.path(&format!("{name}-sink.aarl")))
        .expect("the sink floor's file");
    g.bench_function(format!("{name}_sink"), |b| {
        b.iter(|| {
            for _ in 0..2 {
                sink.append(&line).expect("append");
                sink.sync().expect("sync");
            }
        });
    });
    // Shaped like a call: the first line synced on one thread, which then wakes a
    // second thread through a pipe; that one syncs the second line and wakes the first.
    let file = std::sync::Arc::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(fx.path(&format!("{name}-handoff.aarl")))
            .expect("the hand-off floor's file"),
    );
    let (mut second_wakes, mut wake_second) = std::io::pipe().expect("a pipe");
    let (mut first_wakes, mut wake_first) = std::io::pipe().expect("a pipe");
    let second = {
        let (file, line) = (file.clone(), line.clone());
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            while std::io::Read::read(&mut second_wakes, &mut byte).is_ok_and(|n| n == 1) {
                (&*file).write_all(&line).expect("append");
                file.sync_data().expect("fdatasync");
                wake_first.write_all(&byte).expect("wake the first thread");
            }
        })
    };
    g.bench_function(format!("{name}_handoff"), |b| {
        b.iter(|| {
            let mut byte = [0u8; 1];
            (&*file).write_all(&line).expect("append");
            file.sync_data().expect("fdatasync");
            wake_second.write_all(b"x").expect("wake the second thread");
            std::io::Read::read_exact(&mut first_wakes, &mut byte).expect("woken");
        });
    });
    drop(wake_second);
    second.join().expect("the second thread");
    g.finish();
}

fn main() {
    if std::env::var_os(SERVER_ENV).is_some() {
        serve();
        return;
    }
    let fx = Fixture::new();
    let mut c = Criterion::default().configure_from_args();
    unrecorded(&mut c, &fx);
    // Each floor is measured next to the calls it is a floor of.
    seal_floors(&mut c, &fx);
    recorded(&mut c, "volatile", |name| (fx.volatile(name), None));
    fsync_floor(&mut c, &fx, "two_fsyncs");
    recorded(&mut c, "durable", |name| {
        let (peer, record) = fx.durable(name);
        (peer, Some(record))
    });
    fsync_floor(&mut c, &fx, "two_fsyncs_after");
    c.final_summary();
}
