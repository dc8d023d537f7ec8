//! Confining a native program: the host's side of the confinement station.
//!
//! A confined program is never confined by the host process itself (it has threads;
//! Landlock and seccomp bind the calling thread, and nothing may run between `fork` and
//! `exec` in a threaded process). Instead the host re-executes its own binary as a
//! helper, `aegis __confine-exec CHANNEL PLAN -- PROGRAM ARGS…`, which the binary
//! dispatches first thing in `main`, before any thread exists ([`helper_main`]). The
//! helper:
//! 1. connects the report channel: a unix stream to the abstract socket CHANNEL, on
//!    which the host accepts only the helper's own process (`SO_PEERCRED`). Handing the
//!    helper descriptors instead would need a `pre_exec` hook, which makes std fork the
//!    threaded host rather than `posix_spawn` it (0.3 ms a start on the bench, more for
//!    a larger host);
//! 2. resolves the plan's backend plugin and asks it to confine the process;
//! 3. writes the backend's report (or its refusal) to the channel;
//! 4. waits for the host's go on the channel: the host records the report first, so no
//!    byte of the program runs before the record says how it is confined;
//! 5. marks every descriptor but stdio close-on-exec, so the program inherits none;
//! 6. execs the program. The channel closes on exec; a failed exec is reported on it.
//!
//! The host ([`spawn`]) reads the report, then [`Confined::start`] says go and reads
//! the channel to its end. A [`Confined`] dropped unstarted lets the helper exit
//! without running the program.
//!
//! # Guarantees
//! - At the required level, a plan the backend cannot enforce fully starts nothing:
//!   [`spawn`] returns [`ConfineError::Refused`] with the backend's one-line reason.
//! - The program inherits stdio and nothing else from the helper or the host.
//! - The exec-support set ([`exec_support`]) is named, short and checked in: `/usr`
//!   and the library directories, the program's own prefix, a list of `/etc` files,
//!   a few `/dev` nodes and `/proc` read-only — never all of `/etc` or `$HOME`.
//!
//! # Non-guarantees
//! - What the backend enforces is what its report says; `none` enforces nothing.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use aegis_record::json::{self, Object, Value};
use aegis_station_api::abi_stable::std_types::{RSlice, RStr};
use aegis_station_api::{ConfinementLevel, ConfinementRequest, Enforcement};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

use crate::registry::{PluginSpec, Registry};

/// The first argument that makes the binary the helper.
pub const HELPER_ARG: &str = "__confine-exec";

/// How often the host, waiting for its helper to connect, checks that it still runs.
const HELPER_POLL: Duration = Duration::from_millis(20);

/// Exit status of a helper whose confinement was refused.
pub const EXIT_REFUSED: u8 = 125;
/// Exit status of a helper that could not exec the program.
pub const EXIT_EXEC: u8 = 127;

/// What to confine a program to, and with which backend.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The backend plugin (`builtin:confine-landlock`, a name or a path).
    pub backend: String,
    /// The backend's config section (TOML text).
    pub config: String,
    /// The backend file's pinned SHA-256, when the profile pins it.
    pub pin: Option<[u8; 32]>,
    /// Refuse or best effort.
    pub best_effort: bool,
    /// Read beneath.
    pub read: Vec<PathBuf>,
    /// Read and execute beneath.
    pub exec: Vec<PathBuf>,
    /// Read, write, create, remove beneath.
    pub write: Vec<PathBuf>,
    /// `host:port` TCP destinations.
    pub connect: Vec<String>,
}

/// What the operator grants a confined program beyond the exec-support set.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// `--allow-read`.
    pub read: Vec<PathBuf>,
    /// `--allow-exec`: read and execute beneath.
    pub exec: Vec<PathBuf>,
    /// `--allow-write`.
    pub write: Vec<PathBuf>,
    /// `--allow-net HOST:PORT`.
    pub connect: Vec<String>,
    /// `--best-effort`.
    pub best_effort: bool,
}

impl Grants {
    /// Whether the operator granted anything (or lowered the level).
    pub fn is_empty(&self) -> bool {
        self.read.is_empty()
            && self.exec.is_empty()
            && self.write.is_empty()
            && self.connect.is_empty()
            && !self.best_effort
    }
}

/// Why a confined program was not started.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The backend could not enforce the plan (exit 125).
    #[error("confinement refused: {0}")]
    Refused(String),
    /// The program could not be found or executed (exit 127).
    #[error("{0}")]
    Exec(String),
    /// The helper could not be started, or broke its protocol.
    #[error("confinement helper: {0}")]
    Helper(String),
}

/// What the backend reported it enforced.
#[derive(Clone, Debug)]
pub struct Report {
    /// `full`, `partial` or `none`.
    pub enforcement: String,
    /// The kernel ABI the backend negotiated (Landlock's), 0 if none.
    pub abi: u32,
    /// What was asked and is not enforced, a line each.
    pub gaps: Vec<String>,
    /// The backend's details, plus the plan (`plan`) and the level.
    pub details: Object,
}

impl Report {
    /// The report as one JSON object (for the record and `--report`).
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("enforcement", self.enforcement.as_str());
        o.insert("abi", self.abi);
        o.insert(
            "gaps",
            Value::Array(self.gaps.iter().map(|g| Value::from(g.as_str())).collect()),
        );
        o.insert("details", self.details.clone());
        o
    }
}

fn path_strings(paths: &[PathBuf]) -> Value {
    Value::Array(
        paths
            .iter()
            .map(|p| Value::from(p.to_string_lossy().into_owned()))
            .collect(),
    )
}

/// The backend a profile with no `[sandbox] confinement` uses for `aegis confine`.
pub const DEFAULT_BACKEND: &str = "builtin:confine-landlock";

impl Plan {
    /// The plan for `program` (absolute): the profile's backend and level (or
    /// [`DEFAULT_BACKEND`], required), the exec-support set, and the operator's grants
    /// (made absolute). `best_effort` lowers a required level; it never raises one.
    ///
    /// # Errors
    /// A grant path that cannot be made absolute.
    pub fn for_program(
        profile: &crate::Profile,
        program: &Path,
        grants: Grants,
    ) -> Result<Plan, ConfineError> {
        let absolute = |paths: Vec<PathBuf>| -> Result<Vec<PathBuf>, ConfineError> {
            paths
                .into_iter()
                .map(|p| {
                    std::path::absolute(&p)
                        .map_err(|e| ConfineError::Refused(format!("{}: {e}", p.display())))
                })
                .collect()
        };
        let (mut read, mut exec, mut write) = exec_support(program);
        read.extend(absolute(grants.read)?);
        exec.extend(absolute(grants.exec)?);
        write.extend(absolute(grants.write)?);
        let (backend, config, pin, profile_best_effort) = match &profile.confinement {
            Some(c) => (
                c.plugin.spec.to_string(),
                c.plugin.config.clone(),
                c.plugin.sha256,
                c.best_effort,
            ),
            None => (DEFAULT_BACKEND.to_owned(), String::new(), None, false),
        };
        Ok(Plan {
            backend,
            config,
            pin,
            best_effort: grants.best_effort || profile_best_effort,
            read,
            exec,
            write,
            connect: grants.connect,
        })
    }

    fn to_json(&self) -> Result<String, ConfineError> {
        for p in self.read.iter().chain(&self.exec).chain(&self.write) {
            if p.to_str().is_none() || !p.is_absolute() {
                return Err(ConfineError::Refused(format!(
                    "rule path {} is not an absolute UTF-8 path",
                    p.display()
                )));
            }
        }
        let mut o = Object::new();
        o.insert("backend", self.backend.as_str());
        o.insert("config", self.config.as_str());
        o.insert_opt(
            "sha256",
            self.pin.map(|p| aegis_record::digest::encode_hex(&p)),
        );
        o.insert("best_effort", self.best_effort);
        o.insert("read", path_strings(&self.read));
        o.insert("exec", path_strings(&self.exec));
        o.insert("write", path_strings(&self.write));
        o.insert(
            "connect",
            Value::Array(
                self.connect
                    .iter()
                    .map(|c| Value::from(c.as_str()))
                    .collect(),
            ),
        );
        String::from_utf8(Value::Object(o).to_canonical())
            .map_err(|e| ConfineError::Helper(e.to_string()))
    }
}

/// `/etc` files a dynamically linked program, Python or Node reads to start and to
/// resolve names; each is granted only if it exists.
pub const ETC_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/gai.conf",
    "/etc/resolv.conf",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/mime.types",
];

/// Library and program directories granted read and execute.
pub const EXEC_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"];

/// `/dev` nodes granted read (and `/dev/null` write).
pub const DEV_READ: &[&str] = &["/dev/urandom", "/dev/random", "/dev/zero"];

/// The exec-support set for `program` (an absolute path): `(read, exec, write)`.
/// `/proc` is read-only. A program outside the exec directories gets read and execute
/// on what it needs of its own, never a whole home directory:
/// - an interpreter laid out as `P/bin/prog` (a Python under `~/.pyenv/versions/X`):
///   `P/bin` and `P/lib`, `P/lib64` — not the rest of `P`, which may be `~/.local`;
/// - any other program: the program file alone.
pub fn exec_support(program: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let existing = |list: &[&str]| -> Vec<PathBuf> {
        list.iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect()
    };
    let mut read = existing(ETC_FILES);
    read.extend(existing(DEV_READ));
    read.push(PathBuf::from("/proc"));
    let mut exec = existing(EXEC_DIRS);
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    if !exec.iter().any(|d| real.starts_with(d)) {
        exec.extend(own_support(&real));
    }
    let write = existing(&["/dev/null"]);
    (read, exec, write)
}

/// What a program outside the exec directories is granted of its own (see
/// [`exec_support`]).
fn own_support(program: &Path) -> Vec<PathBuf> {
    let dir = program.parent();
    let prefix = dir
        .filter(|d| d.file_name() == Some(OsStr::new("bin")))
        .and_then(Path::parent)
        .filter(|p| p.parent().is_some());
    match (dir, prefix) {
        (Some(bin), Some(prefix)) => {
            let mut own = vec![bin.to_path_buf()];
            own.extend(
                ["lib", "lib64"]
                    .iter()
                    .map(|l| prefix.join(l))
                    .filter(|p| p.is_dir()),
            );
            own
        }
        _ => vec![program.to_path_buf()],
    }
}

/// Finds `command` the way a shell would: as given if it has a `/`, else on `$PATH`.
///
/// # Errors
/// Not found, or not an executable file.
pub fn resolve_program(command: &OsStr) -> Result<PathBuf, ConfineError> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let given = Path::new(command);
    if command.as_encoded_bytes().contains(&b'/') {
        let abs = std::path::absolute(given).map_err(|e| ConfineError::Exec(e.to_string()))?;
        return if runnable(&abs) {
            Ok(abs)
        } else {
            Err(ConfineError::Exec(format!(
                "{}: not an executable file",
                given.display()
            )))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(given))
        .find(|p| runnable(p))
        .ok_or_else(|| ConfineError::Exec(format!("{}: command not found", given.display())))
}

/// A confined helper that has reported and waits for [`Confined::start`].
#[derive(Debug)]
pub struct Confined {
    child: Child,
    report: Report,
    channel: BufReader<UnixStream>,
}

impl Confined {
    /// What the backend enforced.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The helper's process (stdio as configured by [`spawn`]'s caller).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Lets the helper exec the program; returns once it has (the channel closed).
    ///
    /// # Errors
    /// The program could not be executed ([`ConfineError::Exec`]) or the helper broke
    /// its protocol; the helper has been waited for.
    pub fn start(self) -> Result<Child, ConfineError> {
        let Confined {
            mut child,
            mut channel,
            ..
        } = self;
        let said = channel.get_mut().write_all(b"g");
        if let Err(e) = said {
            let _ = child.wait();
            return Err(ConfineError::Helper(format!("could not say go: {e}")));
        }
        // Empty when the exec succeeded (the channel closed with it); one line when not.
        if let Some(Ok(line)) = channel.split(b'\n').next() {
            let failure = match parse_message(&line) {
                Message::Report(_) => ConfineError::Helper("a second report".into()),
                other => other.into_error(),
            };
            let _ = child.wait();
            return Err(failure);
        }
        Ok(child)
    }
}

/// Starts the helper for `program` (absolute) with `args` under `plan`, through
/// `helper` (the `aegis` binary); `configure` sets the child's stdio. Returns once the
/// helper has confined itself and reported, before the program runs.
///
/// # Errors
/// See [`ConfineError`]; a refusal has started nothing.
pub fn spawn(
    helper: &Path,
    plan: &Plan,
    program: &Path,
    args: &[OsString],
    configure: impl FnOnce(&mut Command),
) -> Result<Confined, ConfineError> {
    let plan_json = plan.to_json()?;
    let (listener, name) = listen()?;
    let mut command = Command::new(helper);
    command
        .arg(HELPER_ARG)
        .arg(&name)
        .arg(plan_json)
        .arg("--")
        .arg(program)
        .args(args);
    configure(&mut command);
    let mut child = command
        .spawn()
        .map_err(|e| ConfineError::Helper(format!("cannot start {}: {e}", helper.display())))?;
    let stream = match accept_helper(&listener, &mut child) {
        Ok(stream) => stream,
        Err(why) => {
            let _ = child.kill();
            let status = child.wait();
            return Err(ConfineError::Helper(format!(
                "{why} ({})",
                status.map_or_else(|e| e.to_string(), |s| s.to_string())
            )));
        }
    };
    drop(listener);
    let mut channel = BufReader::new(stream);
    let mut line = Vec::new();
    let message = match channel.read_until(b'\n', &mut line) {
        Ok(n) if n > 0 => parse_message(&line),
        _ => Message::Garbled("ended without a report".into()),
    };
    let failure = match message {
        Message::Report(report) => {
            return Ok(Confined {
                child,
                report,
                channel,
            });
        }
        other => other.into_error(),
    };
    drop(channel);
    let status = child.wait();
    Err(match failure {
        ConfineError::Helper(why) => ConfineError::Helper(format!(
            "{why} ({})",
            status.map_or_else(|e| e.to_string(), |s| s.to_string())
        )),
        other => other,
    })
}

/// A listening abstract unix socket with a fresh random name, for one helper.
fn listen() -> Result<(UnixListener, String), ConfineError> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random)
        .map_err(|e| ConfineError::Helper(format!("no randomness for the channel: {e}")))?;
    let name = format!(
        "aegis-confine-{}-{}",
        std::process::id(),
        aegis_record::digest::encode_hex(&random)
    );
    let listener = SocketAddr::from_abstract_name(name.as_bytes())
        .and_then(|addr| UnixListener::bind_addr(&addr))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| ConfineError::Helper(format!("cannot open the report channel: {e}")))?;
    Ok((listener, name))
}

/// Accepts the helper's connection. Anything else that connects (an abstract name is
/// reachable by every process in the network namespace) is dropped unread: only the
/// process the host started may report. Fails when the helper ends without connecting.
fn accept_helper(listener: &UnixListener, child: &mut Child) -> Result<UnixStream, String> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let helper = child.id();
    let tick = Timespec {
        tv_sec: 0,
        tv_nsec: i64::try_from(HELPER_POLL.as_nanos()).unwrap_or(i64::MAX),
    };
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let peer = rustix::net::sockopt::socket_peercred(&stream)
                    .map(|c| c.pid.as_raw_nonzero().get());
                if peer.is_ok_and(|pid| u32::try_from(pid) == Ok(helper)) {
                    stream
                        .set_nonblocking(false)
                        .map_err(|e| format!("the report channel: {e}"))?;
                    return Ok(stream);
                }
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("the report channel: {e}")),
        }
        if let Ok(Some(_)) = child.try_wait() {
            return Err("ended without a report".into());
        }
        let mut ready = [PollFd::new(listener, PollFlags::IN)];
        match rustix::event::poll(&mut ready, Some(&tick)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("the report channel: {e}")),
        }
    }
}

enum Message {
    Report(Report),
    Refused(String),
    ExecFailed(String),
    Garbled(String),
}

impl Message {
    /// The error a message other than a report stands for.
    fn into_error(self) -> ConfineError {
        match self {
            Message::Refused(why) => ConfineError::Refused(why),
            Message::ExecFailed(why) => ConfineError::Exec(why),
            Message::Garbled(why) => ConfineError::Helper(why),
            Message::Report(_) => ConfineError::Helper("an unexpected report".into()),
        }
    }
}

fn parse_message(line: &[u8]) -> Message {
    let Ok(Value::Object(o)) = json::parse(line) else {
        return Message::Garbled("a report line that is not a JSON object".into());
    };
    let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_owned);
    if let Some(why) = text("refused") {
        return Message::Refused(why);
    }
    if let Some(why) = text("exec_failed") {
        return Message::ExecFailed(why);
    }
    let (Some(enforcement), Some(abi), Some(Value::Array(gaps)), Some(Value::Object(details))) = (
        text("enforcement"),
        o.get("abi").and_then(Value::as_int),
        o.get("gaps"),
        o.get("details"),
    ) else {
        return Message::Garbled("a report without enforcement, abi, gaps and details".into());
    };
    Message::Report(Report {
        enforcement,
        abi: u32::try_from(abi).unwrap_or(u32::MAX),
        gaps: gaps
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        details: details.clone(),
    })
}

/// Runs the helper if this process was started as one (`argv[1]` is [`HELPER_ARG`]):
/// never returns when the program was exec'd; returns the exit status otherwise.
/// Call it first in `main`, before anything starts a thread.
pub fn helper_main() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(HELPER_ARG)) {
        return None;
    }
    // The channel first: once confined, the helper may not be able to connect.
    let channel = args
        .next()
        .and_then(|name| SocketAddr::from_abstract_name(name.as_encoded_bytes()).ok())
        .and_then(|addr| UnixStream::connect_addr(&addr).ok());
    let Some(channel) = channel else {
        eprintln!(
            "aegis {HELPER_ARG}: no report channel to connect to; this mode is started by aegis itself"
        );
        return Some(EXIT_REFUSED);
    };
    let mut say = |o: Object| {
        let mut line = Value::Object(o).to_canonical();
        line.push(b'\n');
        let _ = (&channel).write_all(&line);
    };
    let refuse = |say: &mut dyn FnMut(Object), why: String| {
        let mut o = Object::new();
        o.insert("refused", why);
        say(o);
        Some(EXIT_REFUSED)
    };
    let plan = args.next();
    if args.next().as_deref() != Some(OsStr::new("--")) {
        return refuse(
            &mut say,
            "helper arguments: expected PLAN -- PROGRAM ARGS".into(),
        );
    }
    let Some(program) = args.next() else {
        return refuse(&mut say, "helper arguments: no program".into());
    };
    let rest: Vec<OsString> = args.collect();
    let report = match plan
        .ok_or_else(|| "no plan".to_owned())
        .and_then(|p| confine_self(p.as_encoded_bytes()))
    {
        Ok(r) => r,
        Err(why) => return refuse(&mut say, why),
    };
    say(report);
    // The host records the report before the program may run; without its go (the host
    // gave up, e.g. the record could not be opened) nothing is started.
    let mut byte = [0u8; 1];
    if !matches!(std::io::Read::read(&mut &channel, &mut byte), Ok(1)) || byte[0] != b'g' {
        return Some(EXIT_REFUSED);
    }
    // Nothing the helper or the host holds reaches the program: the channel, the
    // plugin's descriptor, anything inherited. stdio stays.
    close_fds::CloseFdsBuilder::new().cloexecfrom(3);
    let error = Command::new(&program).args(&rest).exec();
    let mut o = Object::new();
    o.insert(
        "exec_failed",
        format!("{}: {error}", Path::new(&program).display()),
    );
    say(o);
    Some(EXIT_EXEC)
}

fn strs(v: &[String]) -> Vec<RStr<'_>> {
    v.iter().map(|s| RStr::from(s.as_str())).collect()
}

/// Parses the plan, loads its backend and applies it to this process.
fn confine_self(plan: &[u8]) -> Result<Object, String> {
    let Ok(Value::Object(plan)) = json::parse(plan) else {
        return Err("the plan is not a JSON object".into());
    };
    let text = |k: &str| {
        plan.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("plan: missing {k}"))
    };
    let list = |k: &str| -> Result<Vec<String>, String> {
        match plan.get(k) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or(format!("plan: {k}")))
                .collect(),
            _ => Err(format!("plan: missing {k}")),
        }
    };
    let backend = text("backend")?;
    let config = text("config")?;
    let pin = match plan.get("sha256").and_then(Value::as_str) {
        None => None,
        Some(hex) => Some(
            aegis_record::digest::decode_hex::<32>(hex)
                .map_err(|e| format!("plan: sha256: {e}"))?,
        ),
    };
    let best_effort = matches!(plan.get("best_effort"), Some(Value::Bool(true)));
    let (read, exec, write, connect) = (
        list("read")?,
        list("exec")?,
        list("write")?,
        list("connect")?,
    );
    let plugin = Registry::new()
        .resolve(&PluginSpec::parse(backend), pin.as_ref())
        .map_err(|e| format!("backend {backend}: {e}"))?;
    let confinement = plugin
        .confinement_backend(config)
        .map_err(|e| format!("backend {backend}: {}", e.message))?;
    let (read, exec, write, connect) = (strs(&read), strs(&exec), strs(&write), strs(&connect));
    let request = ConfinementRequest {
        read_paths: RSlice::from_slice(&read),
        exec_paths: RSlice::from_slice(&exec),
        write_paths: RSlice::from_slice(&write),
        net_connect: RSlice::from_slice(&connect),
        level: if best_effort {
            ConfinementLevel::BEST_EFFORT
        } else {
            ConfinementLevel::REQUIRED
        },
    };
    let report = confinement
        .apply(&request)
        .into_result()
        .map_err(|e| e.message.to_string())?;
    let enforcement = match report.enforcement {
        Enforcement::FULL => "full",
        Enforcement::PARTIAL => "partial",
        Enforcement::NONE => "none",
        _ => return Err("the backend reported an unknown enforcement".into()),
    };
    if !best_effort && report.enforcement == Enforcement::NONE {
        return Err(format!("backend {backend} enforces nothing"));
    }
    let Ok(Value::Object(mut details)) = json::parse(report.details.as_str().as_bytes()) else {
        return Err(format!(
            "backend {backend}: its details are not a JSON object"
        ));
    };
    details.insert("plugin", backend);
    let mut o = Object::new();
    o.insert("enforcement", enforcement);
    o.insert("abi", report.abi);
    o.insert(
        "gaps",
        Value::Array(
            report
                .gaps
                .iter()
                .map(|g| Value::from(g.as_str()))
                .collect(),
        ),
    );
    o.insert("details", details);
    Ok(o)
}

/// The `none` backend: enforces nothing and says so, for profiles that run native
/// programs unconfined on purpose. Refused at the required level by the helper.
#[derive(Debug)]
struct NoConfinement;

impl aegis_station_api::Confinement for NoConfinement {
    fn apply(
        &self,
        _: &ConfinementRequest<'_>,
    ) -> Result<aegis_station_api::ConfinementReport, aegis_station_api::PluginError> {
        use aegis_station_api::abi_stable::std_types::{RString, RVec};
        Ok(aegis_station_api::ConfinementReport {
            enforcement: Enforcement::NONE,
            abi: 0,
            gaps: RVec::from(vec![RString::from(
                "the none backend enforces nothing: the program runs with the host's rights",
            )]),
            details: RString::from(r#"{"backend":"none"}"#),
        })
    }
}

fn no_confinement(config: &str) -> Result<NoConfinement, aegis_station_api::PluginError> {
    if config.trim().is_empty() {
        Ok(NoConfinement)
    } else {
        Err(aegis_station_api::PluginError::new(
            aegis_station_api::ErrorKind::CONFIG,
            "confine-none takes no config",
        ))
    }
}

aegis_station_api::plugin_module! {
    pub(crate) fn none_module {
        name: "confine-none",
        version: env!("CARGO_PKG_VERSION"),
        confinement: no_confinement,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that connects to `name`, says `me`, and waits for one byte.
    fn connecting_child(name: &str) -> Child {
        Command::new("python3")
            .args([
                "-c",
                "import socket, sys\n\
                 s = socket.socket(socket.AF_UNIX)\n\
                 s.connect('\\0' + sys.argv[1])\n\
                 s.sendall(b'me\\n')\n\
                 sys.exit(0 if s.recv(1) == b'g' else 1)",
                name,
            ])
            .spawn()
            .expect("python3")
    }

    /// The channel's name is reachable by any process in the network namespace: one
    /// that connects first is dropped unread, and the helper's own connection is taken.
    #[test]
    fn only_the_started_process_may_report() {
        let (listener, name) = listen().unwrap();
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let mut stranger = UnixStream::connect_addr(&addr).unwrap();
        let mut child = connecting_child(&name);
        let stream = accept_helper(&listener, &mut child).unwrap();
        // The stranger never writes: taking it would time out here, not hang.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut channel = BufReader::new(stream);
        let mut line = String::new();
        channel.read_line(&mut line).unwrap();
        assert_eq!(line, "me\n");
        channel.get_mut().write_all(b"g").unwrap();
        assert!(child.wait().unwrap().success());
        stranger
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut stranger, &mut byte).unwrap(), 0);
    }

    #[test]
    fn a_helper_that_ends_without_connecting_is_an_error_not_a_hang() {
        let (listener, _) = listen().unwrap();
        let mut child = Command::new("true").spawn().unwrap();
        assert_eq!(
            accept_helper(&listener, &mut child).unwrap_err(),
            "ended without a report"
        );
    }

    #[test]
    fn each_channel_has_its_own_name() {
        let (_a, one) = listen().unwrap();
        let (_b, two) = listen().unwrap();
        assert_ne!(one, two);
    }

    #[test]
    fn a_program_outside_the_exec_dirs_gets_its_own_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("py");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib")).unwrap();
        std::fs::create_dir_all(prefix.join("share/keyrings")).unwrap();
        assert_eq!(
            own_support(&prefix.join("bin/python3")),
            vec![prefix.join("bin"), prefix.join("lib")]
        );
        // Not laid out as an interpreter: the file alone, not its directory.
        assert_eq!(
            own_support(&dir.path().join("tool")),
            vec![dir.path().join("tool")]
        );
        // `/bin/x` has no prefix above `/`: the file alone.
        assert_eq!(
            own_support(Path::new("/bin/x")),
            vec![PathBuf::from("/bin/x")]
        );
    }

    /// `--allow-exec` lands in the plan's exec list, absolute, and nowhere else: the
    /// backend gives that list read and execute, the write list never execute.
    #[test]
    fn an_exec_grant_joins_the_exec_list_only() {
        let profile = crate::Profile::embedded("linux-confined").unwrap();
        let grants = Grants {
            exec: vec![PathBuf::from("node_modules")],
            ..Grants::default()
        };
        assert!(!grants.is_empty());
        let plan = Plan::for_program(&profile, Path::new("/usr/bin/env"), grants).unwrap();
        let granted = std::path::absolute("node_modules").unwrap();
        assert!(plan.exec.contains(&granted), "{:?}", plan.exec);
        assert!(!plan.read.contains(&granted) && !plan.write.contains(&granted));
        assert!(plan.to_json().unwrap().contains("node_modules"));
    }

    #[test]
    fn exec_support_never_grants_all_of_etc_or_home() {
        let (read, exec, write) = exec_support(Path::new("/usr/bin/env"));
        for p in read.iter().chain(&exec).chain(&write) {
            assert_ne!(p, Path::new("/etc"));
            assert_ne!(p, Path::new("/"));
            if let Some(home) = std::env::var_os("HOME") {
                assert_ne!(p.as_os_str(), home.as_os_str());
            }
        }
        assert!(read.contains(&PathBuf::from("/proc")));
        assert!(!exec.contains(&PathBuf::from("/proc")));
    }
}
