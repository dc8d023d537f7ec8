//! `aegis wrap`: stand between an MCP client and an MCP stdio server, relaying every
//! line both ways and sending each `tools/call` through the profile's stations first.
//!
//! Threads: one reads the client (our stdin), one reads the server's stdout; both hand
//! frames to one [`Relay`] behind a mutex and carry out its actions while holding it, so
//! frames leave in the order the relay decided them. The main thread watches the server
//! process, the client's end of stdin and the signals, and stops the server: client EOF
//! closes the server's stdin, then after `--grace-ms` sends SIGTERM, then after another
//! grace SIGKILL. Once the server has exited, calls still pending end as `ServerDied`,
//! the session's close line is written, and `wrap` exits with the server's status.
//!
//! A wrapped server's tools reach station 2 as relayed tools
//! ([`ToolKind::Relayed`](aegis_runtime::capability::ToolKind)): the registry grants any
//! tool the relay lets through (the relay refuses a tool the server never listed) a
//! grant with no roots or destinations, whose id starts `relayed-`. The host never runs
//! it; the policy still decides each call by the tool's listed name.

use aegis_mcp::frame::{DEFAULT_MAX_FRAME, Frame, FrameReader};
use aegis_mcp::pins::PinSet;
use aegis_mcp::relay::{
    Action, CallEnd, Gate, PinMode, Refusal, RefusedCall, Relay, RelayConfig, ToolCall,
};
use aegis_record::json::MAX_SAFE_INTEGER;
use aegis_record::text::escape;
use aegis_runtime::capability::{Limits, ToolRegistry};
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_runtime::{Ending, Executed, Host, OwnedCall, Pipeline};
use std::io::{BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::exit;

/// A relayed grant's ceilings: wrap enforces none on the server, so the grant claims
/// none (the largest the record can carry).
const UNBOUNDED: Limits = Limits {
    max_memory_bytes: MAX_SAFE_INTEGER,
    max_wall_ms: MAX_SAFE_INTEGER,
    max_output_bytes: MAX_SAFE_INTEGER,
};

/// `aegis wrap`'s arguments.
#[derive(clap::Args)]
pub struct WrapArgs {
    /// A policy YAML file, instead of the profile's policy station. Rules name tools by
    /// the name the server lists them under.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Append the record to this file (a durable file sink) instead of the profile's.
    #[arg(long, value_name = "PATH", requires = "signing_key")]
    audit: Option<PathBuf>,
    /// The signing key (`aegis keygen`); required by a durable sink.
    #[arg(long, value_name = "PATH")]
    signing_key: Option<PathBuf>,
    /// The role every call asserts, for policy rules.
    #[arg(long, value_name = "ROLE")]
    role: Option<String>,
    /// The longest line relayed either way; longer lines are dropped and logged.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FRAME)]
    max_frame: usize,
    /// Compare the server's tool listings with these pins (written by --write-pins)
    /// instead of pinning the session's first listing.
    #[arg(long, value_name = "FILE")]
    pins: Option<PathBuf>,
    /// When the server exits, write the session's pins to this file.
    #[arg(long, value_name = "FILE")]
    write_pins: Option<PathBuf>,
    /// Log changed tool definitions instead of refusing calls to them.
    #[arg(long)]
    pins_record_only: bool,
    /// After the client closes its stdin, how long the server has to exit before
    /// SIGTERM, and again before SIGKILL.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    grace_ms: u64,
    /// The server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The runtime behind the relay's [`Gate`].
struct HostGate {
    pipeline: Arc<Pipeline>,
    role: Option<String>,
    /// Set when an outcome could not be written: `wrap` then exits [`exit::RECORD_FAILED`].
    record_failed: Arc<AtomicBool>,
}

/// A forwarded call: its open guard and when it was handed to the server.
struct Pending {
    call: OwnedCall,
    started: Instant,
}

impl HostGate {
    fn request<'a>(&'a self, frame: &'a [u8], tool: &'a str) -> CallRequest<'a> {
        CallRequest {
            // The digest is over the tools/call message exactly as the client sent it.
            frame: Some(frame),
            role: self.role.as_deref(),
            ..CallRequest::new(tool, b"")
        }
    }

    fn failed(&self, what: impl std::fmt::Display) {
        self.record_failed.store(true, Ordering::SeqCst);
        crate::error(what);
    }
}

impl Gate for HostGate {
    type Pending = Pending;

    fn open(&self, call: &ToolCall<'_>) -> Result<Pending, Refusal> {
        let request = self.request(call.frame, call.name);
        let mut owned = match self.pipeline.begin_owned(&request) {
            Ok(c) => c,
            Err(e) => {
                self.failed(&e);
                return Err(Refusal {
                    station: "audit".into(),
                    reason: format!("the call's intent could not be recorded: {e}"),
                    call_id: None,
                });
            }
        };
        if let Some(grant) = owned.authorize() {
            if grant.limits() == UNBOUNDED {
                return Ok(Pending {
                    call: owned,
                    started: Instant::now(),
                });
            }
            // Fail closed: a ceiling the policy set would be recorded but not enforced.
            let reason = "the policy sets ceilings (limits) on this tool, and aegis wrap cannot hold a relayed server to them";
            let call_id = owned.call_id().to_owned();
            if let Err(e) = owned.finish(Executed::NotStarted {
                reason: reason.into(),
            }) {
                self.failed(&e);
            }
            return Err(Refusal {
                station: "host".into(),
                reason: reason.into(),
                call_id: Some(call_id),
            });
        }
        let call_id = owned.call_id().to_owned();
        match owned.finish(Executed::NotRun) {
            Ok(record) => {
                let station = match record.class() {
                    CallClass::CapabilityDenied => "capability",
                    _ => "policy",
                };
                Err(Refusal {
                    station: station.into(),
                    reason: crate::run::verdict(&record),
                    call_id: Some(call_id),
                })
            }
            Err(e) => {
                self.failed(&e);
                Err(Refusal {
                    station: "audit".into(),
                    reason: format!("refused, and the refusal could not be recorded: {e}"),
                    call_id: Some(call_id),
                })
            }
        }
    }

    fn finish(&self, pending: Pending, end: CallEnd<'_>) {
        let wall_ms = u64::try_from(pending.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (ending, response) = ending_of(end);
        let executed = Executed::Relayed {
            ending,
            response,
            wall_ms,
        };
        if let Err(e) = pending.call.finish(executed) {
            self.failed(&e);
        }
    }

    fn refused(&self, call: &RefusedCall<'_>) -> Option<String> {
        // The relay refused before the stations: an intent, then an outcome whose
        // stations say "not reached" and whose execution names the relay's reason.
        let request = self.request(call.frame, call.name.unwrap_or("(unreadable)"));
        let owned = match self.pipeline.begin_owned(&request) {
            Ok(c) => c,
            Err(e) => {
                self.failed(&e);
                return None;
            }
        };
        let call_id = owned.call_id().to_owned();
        let reason = format!(
            "refused by the relay ({}): {}",
            call.refusal.station, call.refusal.reason
        );
        match owned.finish(Executed::NotStarted { reason }) {
            Ok(_) => Some(call_id),
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }
}

/// How a relayed call's end is recorded (spec/SPEC.md, "Relayed calls"): the server's
/// answer is kept (and digested) when it answered, with a result or a JSON-RPC error.
fn ending_of(end: CallEnd<'_>) -> (Ending, Option<Vec<u8>>) {
    match end {
        CallEnd::Response {
            frame,
            tool_error: false,
        } => (Ending::Success, Some(frame.to_vec())),
        CallEnd::Response {
            frame,
            tool_error: true,
        } => (
            Ending::ToolError("the server's result has isError: true".into()),
            Some(frame.to_vec()),
        ),
        CallEnd::Error { frame } => (
            Ending::ToolError("the server answered with a JSON-RPC error".into()),
            Some(frame.to_vec()),
        ),
        CallEnd::Cancelled { reason } => (
            Ending::Cancelled(format!(
                "the client cancelled: {}",
                reason.unwrap_or("no reason given")
            )),
            None,
        ),
        CallEnd::ServerExited => (
            Ending::ServerDied("the server exited before answering".into()),
            None,
        ),
        CallEnd::Shutdown => (Ending::Cancelled("relay shut down".into()), None),
        CallEnd::NotSent => (
            Ending::Cancelled("not sent: another call in its batch was refused".into()),
            None,
        ),
    }
}

/// What the relay and both readers share.
///
/// Lock order: `relay`, then `client_out` or `server_stdin`. A reader takes the writer
/// lock its actions need while it still holds the relay, so frames leave in the order
/// the relay decided them, then lets the relay go before writing: a server blocked
/// writing its stdout must still be read while the client's reader blocks writing the
/// server's stdin.
struct Shared {
    /// `None` once the session is ending: frames read after that are dropped.
    relay: Mutex<Option<Relay<HostGate>>>,
    /// Held while writing to the client (our stdout).
    client_out: Mutex<()>,
    /// `None` once closed (client EOF, or the server is gone).
    server_stdin: Mutex<Option<ChildStdin>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A reader that panicked has left nothing half-written that matters here.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type ServerStdin<'a> = MutexGuard<'a, Option<ChildStdin>>;

impl Shared {
    /// Carries out the relay's actions in order, holding the writer locks throughout.
    fn act(&self, actions: Vec<Action>) {
        let _client = lock(&self.client_out);
        self.write(actions, Some(lock(&self.server_stdin)));
    }

    /// Writes the actions; `server` must be held when any goes to the server.
    fn write(&self, actions: Vec<Action>, mut server: Option<ServerStdin<'_>>) {
        for action in actions {
            match action {
                Action::ToClient(bytes) => {
                    let _ = crate::print(&bytes);
                }
                Action::ToServer(bytes) => {
                    let Some(stdin) = server.as_mut() else {
                        continue;
                    };
                    if let Some(pipe) = stdin.as_mut()
                        && let Err(e) = pipe.write_all(&bytes).and_then(|()| pipe.flush())
                    {
                        crate::say(format_args!(
                            "aegis: the server's stdin could not be written ({e}); closing it"
                        ));
                        **stdin = None;
                    }
                }
                Action::Log(line) => crate::say(format_args!("aegis: {}", escape(&line))),
            }
        }
    }

    /// Hands one frame to the relay, from the client or the server.
    fn relay(&self, frame: Frame, from_client: bool) {
        let mut relay = lock(&self.relay);
        let Some(r) = relay.as_mut() else { return };
        let actions = if from_client {
            r.from_client(frame)
        } else {
            r.from_server(frame)
        };
        let needs = |f: fn(&Action) -> bool| actions.iter().any(f);
        let _client = needs(|a| matches!(a, Action::ToClient(_))).then(|| lock(&self.client_out));
        let server = needs(|a| matches!(a, Action::ToServer(_))).then(|| lock(&self.server_stdin));
        drop(relay);
        self.write(actions, server);
    }
}

/// What the main thread waits for.
enum Event {
    ClientClosed,
    ServerClosed,
    Signal(i32),
}

fn read_loop(
    shared: Arc<Shared>,
    input: impl std::io::Read,
    max_frame: usize,
    from_client: bool,
    events: Sender<Event>,
) {
    let mut frames = FrameReader::new(BufReader::new(input), max_frame);
    loop {
        match frames.next_frame() {
            Ok(Some(frame)) => shared.relay(frame, from_client),
            Ok(None) => break,
            Err(e) => {
                let side = if from_client { "client" } else { "server" };
                crate::say(format_args!("aegis: reading the {side}: {e}"));
                break;
            }
        }
    }
    if from_client {
        // The server reads EOF: MCP's stdio shutdown starts here.
        *lock(&shared.server_stdin) = None;
        let _ = events.send(Event::ClientClosed);
    } else {
        let _ = events.send(Event::ServerClosed);
    }
}

pub fn wrap(profile_name: &str, a: &WrapArgs) -> u8 {
    let pins = match &a.pins {
        Some(path) => match PinSet::read_pins_file(path) {
            Ok(p) => Some(p),
            Err(e) => {
                crate::error(e);
                return exit::UNREADABLE;
            }
        },
        None => None,
    };
    let profile = match crate::use_profile(profile_name) {
        Ok(p) => p,
        Err(code) => return code,
    };
    if a.max_frame == 0 {
        crate::error("--max-frame must be at least 1");
        return exit::TAMPERED_OR_USAGE;
    }
    let mut tools = ToolRegistry::new();
    tools.relay_unregistered(UNBOUNDED);
    let builder = match crate::with_overrides(
        Host::builder(profile).tool_registry(tools),
        a.policy.as_deref(),
        a.audit.as_deref(),
        a.signing_key.as_deref(),
    ) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let (events_tx, events) = channel();
    let signal_tx = Mutex::new(events_tx.clone());
    // Caught from before the server starts, so none is lost between spawn and watch.
    let interrupts = match crate::interrupt::Interrupts::install_with(move |signal| {
        let _ = lock(&signal_tx).send(Event::Signal(signal));
    }) {
        Ok(i) => i,
        Err(e) => {
            crate::error(format_args!("signal handlers could not be installed: {e}"));
            return exit::REFUSED;
        }
    };
    let host = match builder.open() {
        Ok(h) => h,
        Err(e) => {
            crate::error(e);
            return exit::REFUSED;
        }
    };
    crate::say(format_args!("aegis: {}", host.notice()));
    let (program, args) = a.command.split_first().expect("clap requires a command");
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            crate::error(format_args!("{}: {e}", escape(program)));
            let _ = close(host);
            return exit::UNREADABLE;
        }
    };
    let record_failed = Arc::new(AtomicBool::new(false));
    let gate = HostGate {
        pipeline: host.pipeline().clone(),
        role: a.role.clone(),
        record_failed: record_failed.clone(),
    };
    let config = RelayConfig {
        pin_mode: if a.pins_record_only {
            PinMode::RecordOnly
        } else {
            PinMode::Enforce
        },
        ..RelayConfig::default()
    };
    let relay = match pins {
        Some(pins) => Relay::with_pins(gate, config, pins),
        None => Relay::new(gate, config),
    };
    let shared = Arc::new(Shared {
        relay: Mutex::new(Some(relay)),
        client_out: Mutex::new(()),
        server_stdin: Mutex::new(child.stdin.take()),
    });
    let server_out = child.stdout.take().expect("stdout was piped");
    let spawn = |name: &str, input: Box<dyn std::io::Read + Send>, from_client: bool| {
        let (shared, tx, max) = (shared.clone(), events_tx.clone(), a.max_frame);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || read_loop(shared, input, max, from_client, tx))
    };
    let readers = spawn("aegis-wrap-server", Box::new(server_out), false).and_then(|server| {
        spawn("aegis-wrap-client", Box::new(std::io::stdin()), true).map(|_| server)
    });
    let server_reader = match readers {
        Ok(s) => s,
        Err(e) => {
            crate::error(format_args!("a reader thread could not start: {e}"));
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::KILL,
            );
            let _ = child.wait();
            return exit::REFUSED;
        }
    };
    drop(events_tx);
    let status = watch(&mut child, &events, Duration::from_millis(a.grace_ms));
    // The server is gone; read what it wrote before it went (bounded: a grandchild may
    // still hold its stdout).
    let drained = Instant::now() + Duration::from_secs(1);
    while !server_reader.is_finished() && Instant::now() < drained {
        std::thread::sleep(Duration::from_millis(10));
    }
    let relay = lock(&shared.relay).take();
    if let Some(mut relay) = relay {
        // Every pending call's outcome is written here, before anything is sent.
        let actions = relay.server_exited();
        deliver_at_exit(&shared, actions);
        if let (Some(path), Some(pins)) = (&a.write_pins, relay.pins())
            && let Err(e) = pins.write_pins_file(path)
        {
            crate::error(e);
        }
        // Dropping the relay drops its gate's share of the pipeline.
    }
    drop(interrupts);
    let closed = close(host);
    if let Err(e) = closed {
        crate::error(format_args!(
            "the session's close line could not be written: {e}"
        ));
        return exit::RECORD_FAILED;
    }
    if record_failed.load(Ordering::SeqCst) {
        return exit::RECORD_FAILED;
    }
    status_code(status)
}

/// How long the answers owed at exit may take to reach the client.
const EXIT_DELIVERY: Duration = Duration::from_secs(2);

/// Sends the answers owed at exit, on a thread of their own, waiting at most
/// [`EXIT_DELIVERY`]: a client that stopped reading its input (a reader of ours may be
/// blocked writing to it, holding the client's lock) must not keep the session from
/// its close line. The outcomes are already recorded; only the client's copies are lost.
fn deliver_at_exit(shared: &Arc<Shared>, actions: Vec<Action>) {
    let (done_tx, done) = channel();
    let shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("aegis-wrap-exit".into())
        .spawn(move || {
            *lock(&shared.server_stdin) = None;
            shared.act(actions);
            let _ = done_tx.send(());
        });
    if spawned.is_err() || done.recv_timeout(EXIT_DELIVERY).is_err() {
        crate::say(
            "aegis: the client is not reading; the answers owed at exit were not delivered \
             (their outcomes are recorded)",
        );
    }
}

/// Ends the session with its close line.
fn close(host: Host) -> Result<(), String> {
    match host.into_audit() {
        Ok(audit) => audit.session.close().map(drop).map_err(|e| e.to_string()),
        Err(_) => Err("a call is still open".to_owned()),
    }
}

/// Waits for the server to exit, forwarding signals and stopping it after the client
/// has gone: stdin closed, then SIGTERM after `grace`, then SIGKILL after another. A
/// signal forwarded to a server that outlives it by `grace` is followed by SIGKILL too,
/// so a supervisor's SIGTERM to wrap ends both.
fn watch(
    child: &mut Child,
    events: &Receiver<Event>,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    use rustix::process::{Pid, Signal, kill_process};
    use std::sync::mpsc::RecvTimeoutError;
    let pid = Pid::from_child(child);
    // The next step of the stop sequence: when it is due, what it sends, and why.
    let mut next: Option<(Instant, Signal, &str)> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => {
                crate::error(format_args!("waiting for the server: {e}"));
                return None;
            }
        }
        if let Some((at, signal, after)) = next
            && Instant::now() >= at
        {
            let name = if signal == Signal::TERM {
                "SIGTERM"
            } else {
                "SIGKILL"
            };
            crate::say(format_args!(
                "aegis: the server still runs {} ms after {after}; sending {name}",
                grace.as_millis()
            ));
            let _ = kill_process(pid, signal);
            next =
                (signal == Signal::TERM).then(|| (Instant::now() + grace, Signal::KILL, "SIGTERM"));
        }
        match events.recv_timeout(Duration::from_millis(20)) {
            Ok(Event::ClientClosed) => {
                if next.is_none() {
                    next = Some((
                        Instant::now() + grace,
                        Signal::TERM,
                        "the client closed its stdin",
                    ));
                }
            }
            Ok(Event::Signal(n)) => {
                if let Some(signal) = Signal::from_named_raw(n) {
                    let _ = kill_process(pid, signal);
                }
                if next.is_none_or(|(_, s, _)| s == Signal::TERM) {
                    next = Some((Instant::now() + grace, Signal::KILL, "a forwarded signal"));
                }
            }
            // The server closed its stdout; it is likely exiting. Keep polling.
            Ok(Event::ServerClosed) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The server's exit code, or 128 + the signal that ended it.
fn status_code(status: Option<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(status) = status else {
        return exit::UNREADABLE;
    };
    if let Some(code) = status.code() {
        return u8::try_from(code & 0xff).unwrap_or(u8::MAX);
    }
    match status.signal() {
        Some(n) => u8::try_from(128 + n).unwrap_or(u8::MAX),
        None => exit::UNREADABLE,
    }
}
