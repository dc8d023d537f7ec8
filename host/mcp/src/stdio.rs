//! The I/O around a [`Relay`]: `aegis wrap`'s session with one MCP stdio server.
//!
//! [`Session::run`] starts the server with piped stdin and stdout (stderr inherited),
//! relays newline-delimited frames between it and the client, forwards signals to it,
//! stops it once the client has gone, and returns its exit status once every pending
//! call has an end.
//!
//! Threads: a reader per peer hands each frame to the one relay (behind a mutex) and
//! pushes the resulting frames onto the destination's queue while still holding the
//! relay, so frames leave in the order the relay decided them. A writer per peer drains
//! its queue. When the other peer's queue is idle, the reader claims its frame and
//! writes it itself once it has let go of the relay, which spares a thread wake-up per
//! relayed message; a reader never writes to the peer it reads from (that peer may be
//! blocked writing to it), so at worst it stalls behind the other peer, as the peers
//! would without wrap. A call the relay parks for approval gets a thread of its own that
//! waits for the park's decision ([`crate::relay::Waiter`]) without holding the relay,
//! and then hands it to [`Relay::settle`]. The calling thread watches the server process, the signals and the client's
//! end of its input: client EOF (seen by the reader, or as a hang-up on the client's
//! input, whichever comes first) closes the server's stdin once what was queued for it is
//! written; the server gets SIGTERM `grace` later and SIGKILL after another `grace`. A
//! forwarded signal is followed by SIGKILL if the server still runs `grace` later.
//!
//! # Guarantees
//! - Nothing holds the relay while it waits on a peer. Queues never block the thread
//!   that pushes; a reader waits for room in the queues *before* it takes the relay, so a
//!   peer that stops reading stalls only the reader feeding it and that peer's writer.
//! - The exit path waits on no peer without a deadline: once the server has exited, it
//!   waits at most [`DRAIN`] for the server's last frames, takes the relay (which nobody
//!   holds for long), ends every pending call as [`CallEnd::ServerExited`] (its outcome is
//!   written before anything is sent), and gives the client at most
//!   [`StdioConfig::exit_delivery`] to take the answers owed at exit.
//! - A client that hangs up while the reader is stuck behind a server that does not
//!   read its stdin still starts the stop sequence: the hang-up is polled on the client's
//!   input directly (on Linux a pipe's read end reports it once no writer remains, even
//!   with data unread).
//! - Frames to each destination leave in the relay's order.
//!
//! # Non-guarantees
//! - Threads blocked on a peer (a reader on a client that never closes its end, a
//!   writer on a peer that never reads) are left running when [`Session::run`] returns;
//!   they end when the peer does, or with the process. Frames they hand in after the end
//!   are dropped.
//! - A hang-up is seen only on inputs that report one (pipes, terminals, sockets). A
//!   regular file or `/dev/null` ends with EOF, which the reader sees.
//! - The gate runs under the relay's lock: a gate that blocks (a slow disk) holds up both
//!   directions.
//! - If the process running the session is killed with SIGKILL, nothing more is
//!   written: calls in flight keep their intent without an outcome and the session has
//!   no close line (see the crate README).
//!
//! # Limits
//! - Each queue holds at most [`StdioConfig::queue_bytes`] plus one frame per reader
//!   feeding it (each at most `max_frame` bytes, or a reply the relay built), so a peer
//!   that stops reading costs bounded memory.

use std::io::{BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::frame::{DEFAULT_MAX_FRAME, Frame, FrameReader};
use crate::outbox::{Next, Outbox};
use crate::pins::PinSet;
use crate::relay::{Action, Gate, Relay, Waiter as _};

#[cfg(doc)]
use crate::relay::CallEnd;

/// The default time the server has after the client left (and again after SIGTERM).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// The default bound on bytes queued for one peer before its readers wait.
pub const DEFAULT_QUEUE_BYTES: usize = 256 * 1024;

/// The default time the client has to take the answers owed at exit.
pub const DEFAULT_EXIT_DELIVERY: Duration = Duration::from_secs(2);

/// How long the exit path waits for the server's last frames once it has exited: a
/// grandchild may still hold its stdout open.
pub const DRAIN: Duration = Duration::from_secs(1);

/// How often the watcher looks at the server and the client's input when nothing else
/// wakes it.
const TICK: Duration = Duration::from_millis(20);

/// A session's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioConfig {
    /// The longest line relayed either way (default [`DEFAULT_MAX_FRAME`]); longer lines
    /// are dropped and logged.
    pub max_frame: usize,
    /// After the client leaves, how long the server has before SIGTERM, and again before
    /// SIGKILL (default [`DEFAULT_GRACE`]).
    pub grace: Duration,
    /// Bytes queued for one peer before the readers feeding it wait (default
    /// [`DEFAULT_QUEUE_BYTES`]).
    pub queue_bytes: usize,
    /// How long the client has to take the answers owed at exit (default
    /// [`DEFAULT_EXIT_DELIVERY`]).
    pub exit_delivery: Duration,
}

impl Default for StdioConfig {
    fn default() -> Self {
        StdioConfig {
            max_frame: DEFAULT_MAX_FRAME,
            grace: DEFAULT_GRACE,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            exit_delivery: DEFAULT_EXIT_DELIVERY,
        }
    }
}

/// A line for the operator, unescaped: the receiver escapes it for its terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice<'a> {
    /// What the relay or the session did (`aegis: …` on the CLI).
    Note(&'a str),
    /// What the operator must see even with `-q` (`warning: …` on the CLI): a tool the
    /// server changed, withheld from the client.
    Warning(&'a str),
    /// Something failed that the operator must know about (`error: …` on the CLI).
    Error(&'a str),
}

/// Where a session's [`Notice`]s go. Called from any of its threads.
pub type Sink = Arc<dyn Fn(Notice<'_>) + Send + Sync>;

/// Why a session could not start. The relay is dropped (nothing was pending).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StdioError {
    /// The server's command could not be started.
    #[error("{program}: {source}")]
    Spawn {
        /// The program, as given.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A reader or writer thread could not be started; the server was killed.
    #[error("a {role} thread could not start: {source}")]
    Thread {
        /// `reader` or `writer`.
        role: &'static str,
        /// Why.
        source: std::io::Error,
    },
}

/// How a session ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct Ended {
    /// The server's exit status; `None` when it could not be waited for (said as a
    /// [`Notice::Error`]).
    pub status: Option<ExitStatus>,
    /// The session's pins, once a listing completed (or were loaded), for a pins file.
    pub pins: Option<PinSet>,
    /// Whether the client took everything owed to it before the session ended.
    pub delivered: bool,
}

impl Ended {
    /// The server's exit code, or 128 + the signal that ended it (a shell's convention);
    /// `None` when neither is known.
    pub fn exit_code(&self) -> Option<u8> {
        use std::os::unix::process::ExitStatusExt as _;
        let status = self.status?;
        if let Some(code) = status.code() {
            return u8::try_from(code & 0xff).ok();
        }
        status
            .signal()
            .map(|n| u8::try_from(128 + n).unwrap_or(u8::MAX))
    }
}

/// What the watcher waits for.
enum Event {
    ClientClosed,
    ServerClosed,
    Signal(i32),
}

/// Hands signals the caller caught to a session's server. Cheap to clone.
#[derive(Clone)]
pub struct SignalForwarder(Sender<Event>);

impl SignalForwarder {
    /// Forwards `signal` (a raw number) to the server, and starts the SIGKILL grace.
    /// Does nothing once the session has ended.
    pub fn forward(&self, signal: i32) {
        let _ = self.0.send(Event::Signal(signal));
    }
}

/// One stdio session: create it (early, so signals caught before the server starts are
/// kept), hand its [`SignalForwarder`] to a signal handler, then [`Session::run`] it.
pub struct Session {
    config: StdioConfig,
    sink: Sink,
    events_tx: Sender<Event>,
    events: Receiver<Event>,
}

impl Session {
    /// A session with these settings, saying what it does to `sink`.
    pub fn new(config: StdioConfig, sink: Sink) -> Self {
        let (events_tx, events) = channel();
        Session {
            config,
            sink,
            events_tx,
            events,
        }
    }

    /// Where caught signals go.
    pub fn signal_forwarder(&self) -> SignalForwarder {
        SignalForwarder(self.events_tx.clone())
    }

    /// Starts `server` (its stdin and stdout are replaced by pipes; stderr is inherited;
    /// in a process group of its own, [`in_own_group`])
    /// and relays between it and the client (`client_in`, `client_out`) until it exits.
    /// Every call still pending then ends as [`CallEnd::ServerExited`] and is answered.
    ///
    /// # Errors
    /// [`StdioError`] when the server or a thread could not start; nothing was relayed.
    pub fn run<G, R, W>(
        self,
        relay: Relay<G>,
        mut server: Command,
        client_in: R,
        client_out: W,
    ) -> Result<Ended, StdioError>
    where
        G: Gate + Send + 'static,
        R: Read + AsFd + Send + 'static,
        W: Write + Send + 'static,
    {
        let child = in_own_group(&mut server)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| StdioError::Spawn {
                program: server.get_program().to_string_lossy().into_owned(),
                source,
            })?;
        self.run_child(relay, child, client_in, client_out)
    }

    /// [`Session::run`] with a server already started by the caller (e.g. through a
    /// confinement helper), whose stdin and stdout are pipes.
    ///
    /// # Errors
    /// [`StdioError`] when the server's pipes are missing or a thread could not start;
    /// the server is stopped and nothing was relayed.
    pub fn run_child<G, R, W>(
        self,
        relay: Relay<G>,
        mut child: Child,
        client_in: R,
        client_out: W,
    ) -> Result<Ended, StdioError>
    where
        G: Gate + Send + 'static,
        R: Read + AsFd + Send + 'static,
        W: Write + Send + 'static,
    {
        let Session {
            config,
            sink,
            events_tx,
            events,
        } = self;
        // Both pipes were asked for above; without them there is nothing to relay.
        let (Some(server_in), Some(server_out)) = (child.stdin.take(), child.stdout.take()) else {
            stop_now(&mut child);
            return Err(StdioError::Thread {
                role: "reader",
                source: std::io::Error::other("the server's pipes are missing"),
            });
        };
        let shared = Arc::new(Shared {
            relay: Mutex::new(Some(relay)),
            to_client: Outbox::new(config.queue_bytes),
            to_server: Outbox::new(config.queue_bytes),
            client_out: Mutex::new(Some(Box::new(client_out))),
            server_in: Mutex::new(Some(server_in)),
            sink: sink.clone(),
        });
        // A duplicate of the client's input, polled for a hang-up the reader may be too
        // busy to see. Without one the reader's EOF still ends the session.
        let hangup = client_in.as_fd().try_clone_to_owned().ok();
        let server_reader =
            match start_threads(&shared, server_out, client_in, config.max_frame, &events_tx) {
                Ok(handle) => handle,
                Err(e) => {
                    stop_now(&mut child);
                    shared.to_client.discard();
                    shared.to_server.discard();
                    return Err(e);
                }
            };
        drop(events_tx);
        let status = watch(&mut child, &events, config.grace, hangup, &*sink);
        // The server is gone; read what it wrote before it went.
        let deadline = Instant::now() + DRAIN;
        while !server_reader.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Nobody holds the relay while waiting on a peer, so this is never a long wait.
        let relay = lock(&shared.relay).take();
        shared.to_server.discard();
        let mut pins = None;
        if let Some(mut relay) = relay {
            // Every pending call's outcome is written here, before anything is sent.
            let actions = relay.server_exited(&how_it_ended(status.as_ref()));
            pins = relay.pins().cloned();
            drop(relay);
            shared.carry_out(actions);
        }
        shared.to_client.finish();
        let delivered = shared.to_client.wait_drained(config.exit_delivery);
        if !delivered {
            sink(Notice::Note(
                "the client is not reading; the answers owed at exit were not delivered \
                 (their outcomes are recorded)",
            ));
        }
        Ok(Ended {
            status,
            pins,
            delivered,
        })
    }
}

/// What the session's threads share.
struct Shared<G: Gate> {
    /// `None` once the session is ending: frames read after that are dropped.
    relay: Mutex<Option<Relay<G>>>,
    to_client: Outbox,
    to_server: Outbox,
    /// The client's output and the server's input, written by whoever holds the frame
    /// their outbox handed out (the writer thread or a claiming reader), so never by two
    /// threads at once: these locks are never waited for. `None` once closed.
    client_out: Mutex<Option<Box<dyn Write + Send>>>,
    server_in: Mutex<Option<ChildStdin>>,
    sink: Sink,
}

/// A peer to write to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Client,
    Server,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A thread that panicked under the relay left no half-written frame: frames are
    // queued whole.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<G: Gate + Send + 'static> Shared<G> {
    /// Hands one frame to the relay and queues what it decided; a call it parked gets a
    /// thread that waits for the park's decision ([`Shared::wait_for`]).
    fn hand(self: &Arc<Self>, frame: Frame, from_client: bool) {
        // Room first, outside the relay's lock: a full queue means a peer is not
        // reading, and only this reader should wait for it.
        if from_client {
            self.to_server.wait_for_room();
        }
        self.to_client.wait_for_room();
        // Never the peer this reader reads from: it may be blocked writing to us.
        let other = if from_client {
            Peer::Server
        } else {
            Peer::Client
        };
        let (logs, claimed, waiters, keep_alive) = {
            let mut relay = lock(&self.relay);
            let Some(r) = relay.as_mut() else { return };
            let actions = if from_client {
                r.from_client(frame)
            } else {
                r.from_server(frame)
            };
            // Queued (or claimed) under the lock, so each destination gets frames in the
            // relay's order.
            let (logs, claimed) = self.queue(actions, Some(other));
            (logs, claimed, r.take_waiters(), r.keep_alive_every())
        };
        if let Some(frame) = claimed {
            // The relay is let go of: this write may wait on the other peer.
            self.write(other, &frame);
        }
        self.say(logs);
        for (approval_id, waiter) in waiters {
            self.wait_for(approval_id, waiter, keep_alive);
        }
    }

    /// Waits for a park's decision on a thread of its own, then hands it to the relay.
    /// A thread that cannot start settles nothing: the park stays until the session
    /// ends, when it is withdrawn.
    fn wait_for(self: &Arc<Self>, approval_id: String, waiter: G::Waiter, every: Duration) {
        let shared = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name("aegis-wrap-approval".into())
            .spawn(move || {
                let mut keep_alive = || shared.with_relay(|r| r.keep_alive(&approval_id));
                let settled = waiter.wait(every, &mut keep_alive);
                shared.with_relay(|r| r.settle(&approval_id, settled));
            });
        if let Err(e) = started {
            (self.sink)(Notice::Error(&format!(
                "no thread could wait for an approval ({e}); the call waits until the session ends"
            )));
        }
    }

    /// Runs `f` on the relay, if the session still has one, and carries out what it
    /// decided.
    fn with_relay(&self, f: impl FnOnce(&mut Relay<G>) -> Vec<Action>) {
        let logs = {
            let mut relay = lock(&self.relay);
            let Some(r) = relay.as_mut() else { return };
            self.queue(f(r), None).0
        };
        self.say(logs);
    }

    /// Queues the frames; returns the log lines, and the frame claimed for `claim` when
    /// its queue was idle (the caller writes it with [`Shared::write`]).
    fn queue(&self, actions: Vec<Action>, claim: Option<Peer>) -> (Vec<Action>, Option<Vec<u8>>) {
        let mut logs = Vec::new();
        let mut claimed = None;
        for action in actions {
            let (to, bytes) = match action {
                Action::ToClient(bytes) => (Peer::Client, bytes),
                Action::ToServer(bytes) => (Peer::Server, bytes),
                said @ (Action::Log(_) | Action::Warn(_)) => {
                    logs.push(said);
                    continue;
                }
            };
            let outbox = self.outbox(to);
            if claim == Some(to) && claimed.is_none() {
                claimed = outbox.push_or_claim(bytes);
            } else {
                outbox.push(bytes);
            }
        }
        (logs, claimed)
    }

    /// Queues frames, claiming none, and says the log lines.
    fn carry_out(&self, actions: Vec<Action>) {
        self.say(self.queue(actions, None).0);
    }

    fn say(&self, logs: Vec<Action>) {
        for said in logs {
            match said {
                Action::Warn(line) => (self.sink)(Notice::Warning(&line)),
                Action::Log(line) => (self.sink)(Notice::Note(&line)),
                Action::ToClient(_) | Action::ToServer(_) => {}
            }
        }
    }

    fn outbox(&self, peer: Peer) -> &Outbox {
        match peer {
            Peer::Client => &self.to_client,
            Peer::Server => &self.to_server,
        }
    }

    /// Writes a frame its outbox handed out, then tells the outbox it is done.
    fn write(&self, to: Peer, frame: &[u8]) {
        match to {
            Peer::Server => {
                let mut pipe = lock(&self.server_in);
                if let Some(p) = pipe.as_mut()
                    && let Err(e) = p.write_all(frame).and_then(|()| p.flush())
                {
                    // What is still queued is dropped as it comes.
                    *pipe = None;
                    drop(pipe);
                    (self.sink)(Notice::Note(&format!(
                        "the server's stdin could not be written ({e}); closing it"
                    )));
                }
            }
            Peer::Client => {
                // A client that went away loses its copies; the outcomes are recorded.
                if let Some(out) = lock(&self.client_out).as_mut() {
                    let _ = out.write_all(frame).and_then(|()| out.flush());
                }
            }
        }
        self.outbox(to).written(frame.len());
    }
}

/// Starts the writers and the readers; returns the server reader's handle.
fn start_threads<G, R>(
    shared: &Arc<Shared<G>>,
    server_out: ChildStdout,
    client_in: R,
    max_frame: usize,
    events: &Sender<Event>,
) -> Result<JoinHandle<()>, StdioError>
where
    G: Gate + Send + 'static,
    R: Read + Send + 'static,
{
    let spawn = |name: &str, role: &'static str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(|source| StdioError::Thread { role, source })
    };
    let s = shared.clone();
    spawn(
        "aegis-wrap-to-server",
        "writer",
        Box::new(move || drain(&s, Peer::Server)),
    )?;
    let s = shared.clone();
    spawn(
        "aegis-wrap-to-client",
        "writer",
        Box::new(move || drain(&s, Peer::Client)),
    )?;
    let (s, tx) = (shared.clone(), events.clone());
    let server_reader = spawn(
        "aegis-wrap-server",
        "reader",
        Box::new(move || read_loop(&s, server_out, max_frame, false, &tx)),
    )?;
    let (s, tx) = (shared.clone(), events.clone());
    spawn(
        "aegis-wrap-client",
        "reader",
        Box::new(move || read_loop(&s, client_in, max_frame, true, &tx)),
    )?;
    Ok(server_reader)
}

/// `server` set to start as the leader of a process group of its own, so everything it
/// starts can be ended with it (`signal_server`, `try_reap`): a server's child that
/// ignores SIGTERM, or outlives its parent, must not outlive the session (found by a
/// review of `aegis pins`). Every server a session or `aegis pins` starts is made so.
pub fn in_own_group(server: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    server.process_group(0)
}

/// Sends `signal` to the server's process group, or to the server alone when it leads
/// none (a caller started it without [`in_own_group`]).
fn signal_server(pid: rustix::process::Pid, signal: rustix::process::Signal) -> bool {
    use rustix::process::{kill_process, kill_process_group};
    kill_process_group(pid, signal).is_ok() || kill_process(pid, signal).is_ok()
}

/// [`Child::try_wait`], but once the server has exited and before it is reaped, what is
/// left of its process group is killed: while the leader is unreaped its id cannot name
/// another process or group, so the signal reaches only what the server started.
pub fn try_reap(child: &mut Child) -> std::io::Result<Option<ExitStatus>> {
    use rustix::process::{Pid, Signal, WaitId, WaitIdOptions, kill_process_group, waitid};
    let pid = Pid::from_child(child);
    let exited = waitid(
        WaitId::Pid(pid),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    );
    if matches!(exited, Ok(Some(_))) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
    child.try_wait()
}

/// Ends a server the caller talked to without a [`Session`] (`aegis pins`), as a session
/// ends one once its client has gone: its stdin is closed (taken from `child`, if the
/// caller has not closed it already), then it has `grace` to exit, then SIGTERM and
/// another `grace`, then SIGKILL. Each signal is said to `sink`. Returns its exit status
/// once reaped; `None` when it could not be waited for (said as a [`Notice::Error`]).
pub fn end_server(
    child: &mut Child,
    grace: Duration,
    sink: &(dyn Fn(Notice<'_>) + Send + Sync),
) -> Option<ExitStatus> {
    use rustix::process::{Pid, Signal};
    drop(child.stdin.take());
    let pid = Pid::from_child(child);
    for (signal, after) in [
        (Some(Signal::TERM), "its stdin was closed"),
        (Some(Signal::KILL), "SIGTERM"),
        (None, "SIGKILL"),
    ] {
        let deadline = Instant::now() + grace;
        loop {
            match try_reap(child) {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(e) => {
                    sink(Notice::Error(&format!("waiting for the server: {e}")));
                    return None;
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(TICK);
        }
        let Some(signal) = signal else {
            // SIGKILL cannot be refused: only an uninterruptible sleep delays it.
            return child.wait().ok();
        };
        let name = if signal == Signal::TERM {
            "SIGTERM"
        } else {
            "SIGKILL"
        };
        sink(Notice::Note(&format!(
            "the server still runs {} ms after {after}; sending {name}",
            grace.as_millis()
        )));
        let _ = signal_server(pid, signal);
    }
    child.wait().ok()
}

/// Sends the raw signal `signal` to the process `pid`, as a session forwards one to its
/// server: for a caller that started a server without a [`Session`] and has not reaped
/// it yet (after that the number may name another process). False when it was not sent.
pub fn forward_signal(pid: u32, signal: i32) -> bool {
    use rustix::process::{Pid, Signal};
    let (Some(pid), Some(signal)) = (
        i32::try_from(pid).ok().and_then(Pid::from_raw),
        Signal::from_named_raw(signal),
    ) else {
        return false;
    };
    signal_server(pid, signal)
}

/// Kills the server at once (a session that could not start) and reaps it.
fn stop_now(child: &mut Child) {
    use rustix::process::{Pid, Signal};
    let _ = signal_server(Pid::from_child(child), Signal::KILL);
    let _ = child.wait();
}

/// A writer thread: writes what `to`'s queue hands out until it is finished and empty.
fn drain<G: Gate + Send + 'static>(shared: &Shared<G>, to: Peer) {
    while let Next::Frame(frame) = shared.outbox(to).next() {
        shared.write(to, &frame);
    }
    // Nothing is queued or being written any more. Closing the server's stdin starts
    // MCP's stdio shutdown.
    if to == Peer::Server {
        lock(&shared.server_in).take();
    }
}

fn read_loop<G: Gate + Send + 'static>(
    shared: &Arc<Shared<G>>,
    input: impl Read,
    max_frame: usize,
    from_client: bool,
    events: &Sender<Event>,
) {
    let mut frames = FrameReader::new(BufReader::new(input), max_frame);
    loop {
        match frames.next_frame() {
            Ok(Some(frame)) => shared.hand(frame, from_client),
            Ok(None) => break,
            Err(e) => {
                let side = if from_client { "client" } else { "server" };
                (shared.sink)(Notice::Note(&format!("reading the {side}: {e}")));
                break;
            }
        }
    }
    if from_client {
        // The server's stdin closes once what was queued for it is written.
        shared.to_server.finish();
        let _ = events.send(Event::ClientClosed);
    } else {
        let _ = events.send(Event::ServerClosed);
    }
}

/// True when the client's end of `fd` hung up (no writer remains), data unread or not.
fn hung_up(fd: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    #[cfg(target_os = "linux")]
    let interest = PollFlags::IN | PollFlags::RDHUP;
    #[cfg(not(target_os = "linux"))]
    let interest = PollFlags::IN;
    let mut fds = [PollFd::new(fd, interest)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(n) if n > 0 => {
            let seen = fds[0].revents();
            #[cfg(target_os = "linux")]
            let gone = PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR;
            #[cfg(not(target_os = "linux"))]
            let gone = PollFlags::HUP | PollFlags::ERR;
            seen.intersects(gone)
        }
        _ => false,
    }
}

/// Waits for the server to exit, forwarding signals and stopping it after the client
/// has gone: SIGTERM after `grace`, then SIGKILL after another. A signal forwarded to a
/// server that outlives it by `grace` is followed by SIGKILL too, so a supervisor's
/// SIGTERM to the session ends both.
/// How the server ended, for the outcome of a call it left unanswered.
fn how_it_ended(status: Option<&ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        None => "exited (its status could not be read)".into(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(31)) => "was killed by SIGSYS (a confining seccomp filter kills a foreign-architecture or x32 system call; a process can also raise SIGSYS itself)".into(),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => "exited".into(),
        },
    }
}

fn watch(
    child: &mut Child,
    events: &Receiver<Event>,
    grace: Duration,
    mut hangup: Option<OwnedFd>,
    sink: &(dyn Fn(Notice<'_>) + Send + Sync),
) -> Option<ExitStatus> {
    use rustix::process::{Pid, Signal};
    let pid = Pid::from_child(child);
    // The next step of the stop sequence: when it is due, what it sends, and why.
    let mut next: Option<(Instant, Signal, &'static str)> = None;
    let client_left = |next: &mut Option<(Instant, Signal, &'static str)>| {
        if next.is_none() {
            *next = Some((
                Instant::now() + grace,
                Signal::TERM,
                "the client closed its stdin",
            ));
        }
    };
    loop {
        match try_reap(child) {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => {
                sink(Notice::Error(&format!("waiting for the server: {e}")));
                return None;
            }
        }
        if hangup.as_ref().is_some_and(hung_up) {
            hangup = None;
            client_left(&mut next);
        }
        if let Some((at, signal, after)) = next
            && Instant::now() >= at
        {
            let name = if signal == Signal::TERM {
                "SIGTERM"
            } else {
                "SIGKILL"
            };
            sink(Notice::Note(&format!(
                "the server still runs {} ms after {after}; sending {name}",
                grace.as_millis()
            )));
            let _ = signal_server(pid, signal);
            next =
                (signal == Signal::TERM).then(|| (Instant::now() + grace, Signal::KILL, "SIGTERM"));
        }
        match events.recv_timeout(TICK) {
            Ok(Event::ClientClosed) => {
                hangup = None;
                client_left(&mut next);
            }
            Ok(Event::Signal(n)) => {
                if let Some(signal) = Signal::from_named_raw(n) {
                    let _ = signal_server(pid, signal);
                }
                if next.is_none_or(|(_, s, _)| s == Signal::TERM) {
                    next = Some((Instant::now() + grace, Signal::KILL, "a forwarded signal"));
                }
            }
            // The server closed its stdout; it is likely exiting. Keep polling.
            Ok(Event::ServerClosed) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(TICK),
        }
    }
}
