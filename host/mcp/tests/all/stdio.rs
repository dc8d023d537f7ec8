//! The stdio session with real processes and real pipes: what it relays, in what order,
//! and that it ends when a peer stops cooperating. The calls' record is the CLI's
//! business (host/cli/tests/all/wrap.rs drives the same session over the runtime); here the
//! gate refuses every call, and the traffic is requests and notifications.

use aegis_mcp::relay::{
    CallEnd, Cause, Gate, NeverParked, Opened, Refusal, RefusedCall, Relay, RelayConfig, ToolCall,
};
use aegis_mcp::stdio::{Ended, Notice, Session, Sink, StdioConfig};
use std::io::{PipeReader, Read, Write};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Refuses every call; nothing here sends one.
struct NoCalls;

impl Gate for NoCalls {
    type Pending = ();
    type Parked = NeverParked;
    type Waiter = NeverParked;

    fn open(&self, _: &ToolCall<'_>) -> Result<Opened<Self>, Refusal> {
        Err(Refusal::new(Cause::UnenforceableLimits, "no calls here"))
    }

    fn resume(&self, parked: NeverParked, _: NeverParked, _: &ToolCall<'_>) -> Result<(), Refusal> {
        match parked {}
    }

    fn withdraw(&self, parked: NeverParked, _: &str) {
        match parked {}
    }

    fn finish(&self, (): (), _: CallEnd<'_>) {}

    fn tool_changed(&self, _: &aegis_record::ToolChangeLine) {}

    fn refused(&self, _: &RefusedCall<'_>) -> Option<String> {
        None
    }
}

/// What the session said, in order.
#[derive(Clone, Default)]
struct Said(Arc<Mutex<Vec<String>>>);

impl Said {
    fn sink(&self) -> Sink {
        let lines = self.0.clone();
        Arc::new(move |notice: Notice<'_>| {
            let line = match notice {
                Notice::Note(l) => format!("note: {l}"),
                Notice::Warning(l) => format!("warning: {l}"),
                Notice::Error(l) => format!("error: {l}"),
            };
            lines.lock().unwrap().push(line);
        })
    }

    fn all(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

/// Short graces, so a stop sequence that must run does; a small queue, so it fills.
fn config() -> StdioConfig {
    StdioConfig {
        grace: Duration::from_millis(200),
        queue_bytes: 4096,
        exit_delivery: Duration::from_millis(200),
        ..StdioConfig::default()
    }
}

/// Runs a session over `server`, with the client's input fed by `feed` on its own
/// thread (closing it when `feed` returns) and its output collected. The grace is long:
/// the server is expected to end by itself.
fn run(server: Command, feed: impl FnOnce(&mut dyn Write) + Send + 'static) -> (Ended, Vec<u8>) {
    let (client_in, mut feeder) = std::io::pipe().unwrap();
    let (mut from_session, client_out) = std::io::pipe().unwrap();
    let collector = std::thread::spawn(move || {
        let mut got = Vec::new();
        from_session.read_to_end(&mut got).unwrap();
        got
    });
    std::thread::spawn(move || feed(&mut feeder));
    let said = Said::default();
    let patient = StdioConfig {
        grace: Duration::from_secs(30),
        ..config()
    };
    let session = Session::new(patient, said.sink());
    let relay = Relay::new(NoCalls, RelayConfig::default());
    let ended = session.run(relay, server, client_in, client_out).unwrap();
    assert!(!said.all().contains("SIGTERM"), "{}", said.all());
    // The session's writer may outlive `run` only while a peer does not read; this one
    // reads, so the pipe closes once the writer is done.
    (ended, collector.join().unwrap())
}

/// Every line the client sends comes back from `cat` as the server's, in order and byte
/// for byte; the client's EOF closes the server's stdin, so `cat` ends by itself.
#[test]
fn lines_pass_through_in_order_and_client_eof_ends_the_server() {
    let mut sent = Vec::new();
    for n in 0..2000 {
        sent.extend_from_slice(
            format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"n":{n}}}}}"#)
                .as_bytes(),
        );
        sent.push(b'\n');
    }
    let feed = sent.clone();
    let (ended, got) = run(Command::new("cat"), move |w| w.write_all(&feed).unwrap());
    assert_eq!(ended.exit_code(), Some(0));
    assert!(ended.delivered);
    assert_eq!(got, sent);
}

/// A server that never reads its stdin, and a client that writes more than the session
/// holds toward it and then hangs up: the session's reader is stuck behind the full pipe
/// and never reads the EOF, yet the hang-up starts the stop sequence.
#[test]
fn a_hang_up_is_seen_while_the_reader_is_stuck_behind_a_server_that_does_not_read() {
    let (client_in, mut feeder) = std::io::pipe().unwrap();
    let (_never_read, client_out) = std::io::pipe().unwrap();
    // 768 KiB of notifications: past the server's pipe (64 KiB), the queue (4 KiB) and
    // the readers' buffers, and within what the widened client pipe holds (1 MiB, the
    // default most an unprivileged process may ask for).
    rustix::pipe::fcntl_setpipe_size(&feeder, 1024 * 1024).unwrap();
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{{\"data\":\"{}\"}}}}\n",
        "d".repeat(1000)
    );
    for _ in 0..(768 * 1024 / line.len()) {
        feeder.write_all(line.as_bytes()).unwrap();
    }
    drop(feeder);
    let said = Said::default();
    let session = Session::new(config(), said.sink());
    let relay = Relay::new(NoCalls, RelayConfig::default());
    let mut server = Command::new("sleep");
    server.arg("3600");
    let ended = session.run(relay, server, client_in, client_out).unwrap();
    let said = said.all();
    assert_eq!(ended.exit_code(), Some(128 + 15), "{said}");
    assert!(
        said.contains("after the client closed its stdin; sending SIGTERM"),
        "{said}"
    );
}

/// A client that never reads while the server writes without end: the queue toward the
/// client fills, the server blocks, and the client's hang-up still ends the session; the
/// session says the client was not reading.
#[test]
fn a_client_that_never_reads_does_not_keep_the_session_alive() {
    let (client_in, feeder) = std::io::pipe().unwrap();
    let (never_read, client_out) = std::io::pipe().unwrap();
    let said = Said::default();
    let session = Session::new(config(), said.sink());
    let relay = Relay::new(NoCalls, RelayConfig::default());
    let mut server = Command::new("yes");
    server.arg(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#);
    drop(feeder);
    let ended = session.run(relay, server, client_in, client_out).unwrap();
    let said = said.all();
    assert_eq!(ended.exit_code(), Some(128 + 15), "{said}");
    assert!(!ended.delivered);
    assert!(said.contains("the client is not reading"), "{said}");
    drop(never_read);
}

/// A server that cannot start is an error naming the program; nothing runs.
#[test]
fn a_server_that_cannot_start_is_an_error() {
    let (client_in, _feeder) = std::io::pipe().unwrap();
    let (_out, client_out): (PipeReader, _) = std::io::pipe().unwrap();
    let session = Session::new(config(), Said::default().sink());
    let relay = Relay::new(NoCalls, RelayConfig::default());
    let err = session
        .run(
            relay,
            Command::new("/nonexistent/mcp-server"),
            client_in,
            client_out,
        )
        .unwrap_err();
    assert!(
        err.to_string().starts_with("/nonexistent/mcp-server: "),
        "{err}"
    );
}
