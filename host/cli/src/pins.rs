//! `aegis pins diff` and `aegis pins accept`: the operator's review of a server's tools
//! against a pins file, and the taking of what was reviewed.
//!
//! Both start the server (confined under a profile that confines native programs, with
//! the same grant flags as `wrap`), list its tools with [`aegis_mcp::lister`], and end
//! it as `wrap` ends one ([`aegis_mcp::stdio::end_server`]). No call is made and no
//! record is written. The server's stderr is shown line by line, escaped, after
//! `server: ` (a server may write terminal escapes to hide what is reviewed).

use std::ffi::OsString;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aegis_mcp::frame::{Frame, FrameReader};
use aegis_mcp::lister::{self, ListerConfig};
use aegis_mcp::pins::PinSet;
use aegis_mcp::review::{Kind, Review, Side};
use aegis_mcp::stdio::{self, Notice};
use aegis_record::text::escape;

use crate::confine::{GrantArgs, HostFile};
use crate::{CliError, exit};

/// The longest line of the server's stderr shown; longer ones are counted, not shown.
const MAX_STDERR_LINE: usize = 4096;

/// SIGKILL's number (POSIX fixes it), for [`stdio::forward_signal`].
const SIGKILL: i32 = 9;

/// How long the server's last stderr lines are waited for once it has exited (a
/// grandchild may hold the pipe open).
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// `aegis pins`'s subcommands.
#[derive(clap::Subcommand)]
pub enum PinsCommand {
    /// Show what differs between a pins file and the tools a server lists now: each
    /// changed field pinned and current, tools added and removed, and held marks.
    ///
    /// Starts CMD, initializes it, lists every page of its tools, and ends it (stdin
    /// closed, then SIGTERM and SIGKILL, each after --grace-ms). No tool is called.
    /// Under a profile that confines native programs (`--profile linux-confined`) the
    /// server is started confined, as wrap starts it; otherwise as the operator would
    /// run it.
    #[command(after_help = crate::help::PINS_DIFF)]
    Diff(Box<DiffArgs>),
    /// Take the tools a server lists now into a pins file (created if missing): all of
    /// them, or only the --tool ones, clearing their held marks.
    ///
    /// Lists the server as `pins diff` does, prints what changes, and replaces the file
    /// atomically. A listing that names a tool twice, or a pinned field by another
    /// spelling, is refused: nothing is written.
    #[command(after_help = crate::help::PINS_ACCEPT)]
    Accept(Box<AcceptArgs>),
}

impl PinsCommand {
    pub fn name(&self) -> &'static str {
        match self {
            PinsCommand::Diff(_) => "pins diff",
            PinsCommand::Accept(_) => "pins accept",
        }
    }
}

/// How the server is started, listed and ended.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// How long the server has to answer each step: initialize, and each tools/list page.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
    /// Once listed, how long the server has to exit after its stdin is closed, and
    /// again after SIGTERM before SIGKILL.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    grace_ms: u64,
    /// Under a profile that confines native programs (`--profile linux-confined`):
    /// what the server may reach beyond the exec-support set.
    #[command(flatten)]
    grant: GrantArgs,
    /// The server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// `aegis pins diff`'s arguments.
#[derive(clap::Args)]
pub struct DiffArgs {
    /// The pins file (`aegis wrap --write-pins`, or `aegis pins accept`).
    #[arg(value_name = "PINS")]
    pins: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// `aegis pins accept`'s arguments.
#[derive(clap::Args)]
pub struct AcceptArgs {
    /// The pins file to write (created when missing).
    #[arg(value_name = "PINS")]
    pins: PathBuf,
    /// Accept only this tool (repeatable): the others stay as pinned, held marks kept.
    /// A tool the server no longer lists is removed from the file.
    #[arg(long = "tool", value_name = "NAME")]
    tools: Vec<String>,
    /// The listing's SHA-256 `pins diff` printed: accept only if the server lists
    /// exactly what that review showed, else write nothing (exit 4). Without it, accept
    /// takes whatever the server lists now, which may not be what was reviewed.
    #[arg(long, value_name = "SHA256")]
    expect: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn pins(profile_name: &str, command: &PinsCommand) -> Result<u8, CliError> {
    match command {
        PinsCommand::Diff(a) => diff(profile_name, a),
        PinsCommand::Accept(a) => accept(profile_name, a),
    }
}

/// The digest of a listing as reviewed: SHA-256 of the pins file it would be (sorted,
/// canonical, every definition), so `diff` and `accept` name the same listing alike.
fn listing_digest(current: &PinSet) -> String {
    aegis_record::digest::encode_hex(&aegis_record::digest::sha256(
        current.to_pins_file().as_bytes(),
    ))
}

fn shown(path: &Path) -> String {
    escape(&path.display().to_string()).into_owned()
}

fn diff(profile_name: &str, a: &DiffArgs) -> Result<u8, CliError> {
    let profile = crate::use_profile(profile_name)?;
    let pinned = PinSet::read_pins_file(&a.pins)
        .map_err(|e| CliError::Unreadable(escape(&e.to_string()).into_owned()))?;
    let current = list(&profile, &a.server, &a.pins)?;
    let review = Review::new(&pinned, &current);
    let mut out = if a.json {
        review.to_json() + "\n"
    } else {
        render(&review)
    };
    if !a.json && !review.definitions {
        out.push_str(
            "(a version 1 pins file: pinned definitions are not stored, only their digests)\n",
        );
    }
    crate::print(out.as_bytes()).map_err(|_| CliError::Stdout)?;
    // What accept --expect takes, shown even with -q: it ties the write to this review.
    crate::say(format_args!(
        "aegis: listing sha256 {} (aegis pins accept --expect takes it)",
        listing_digest(&current)
    ));
    let tools = current.tools().count();
    if review.differs() {
        crate::note(format_args!(
            "aegis: {} of {} to review against the server's {tools} tools",
            review.entries.len(),
            shown(&a.pins)
        ));
        Ok(exit::PINS_DIFFER)
    } else {
        crate::note(format_args!(
            "aegis: {} matches the server's {tools} tools",
            shown(&a.pins)
        ));
        Ok(exit::OK)
    }
}

fn accept(profile_name: &str, a: &AcceptArgs) -> Result<u8, CliError> {
    let profile = crate::use_profile(profile_name)?;
    let pinned = match PinSet::read_pins_file(&a.pins) {
        Ok(pinned) => pinned,
        Err(e) if e.is_not_found() => {
            crate::note(format_args!(
                "aegis: {} does not exist; it will be created",
                shown(&a.pins)
            ));
            PinSet::new()
        }
        Err(e) => return Err(CliError::Unreadable(escape(&e.to_string()).into_owned())),
    };
    let current = list(&profile, &a.server, &a.pins)?;
    let digest = listing_digest(&current);
    match &a.expect {
        Some(expected) if *expected != digest => {
            return Err(CliError::Refused(format!(
                "the server now lists other tools than the review showed (listing sha256 {digest}, --expect {}); nothing accepted",
                escape(expected)
            )));
        }
        Some(_) => {}
        None => crate::say(format_args!(
            "warning: accepting the listing read now (sha256 {digest}); give pins diff's --expect to be sure it is the one reviewed"
        )),
    }
    if let Some(name) = current.duplicates().next() {
        return Err(CliError::Refused(format!(
            "the server lists tool {} more than once, so which definition a client uses is unknown; nothing accepted",
            escape(&format!("{name:?}"))
        )));
    }
    if let Some((name, key)) = current.ambiguous().next() {
        return Err(CliError::Refused(format!(
            "the server defines tool {} with a member {}, which clients may read as a pinned field; nothing accepted",
            escape(&format!("{name:?}")),
            escape(&format!("{key:?}"))
        )));
    }
    let accepted = if a.tools.is_empty() {
        current.clone()
    } else {
        let mut set = pinned.clone();
        for name in &a.tools {
            if !set.accept(&current, name) {
                return Err(CliError::Usage(format!(
                    "--tool {}: {} does not pin it and the server does not list it",
                    escape(name),
                    shown(&a.pins)
                )));
            }
        }
        set.fill_definitions(&current);
        set
    };
    // What changes: the review of the file as it was against the file as it will be
    // (a held mark that stays is no change).
    let mut review = Review::new(&pinned, &accepted);
    review
        .entries
        .retain(|e| !(e.kind == Kind::Held && accepted.held(e.name).is_some()));
    crate::print(render(&review).as_bytes()).map_err(|_| CliError::Stdout)?;
    if !accepted.has_definitions() {
        crate::say(format_args!(
            "warning: {} stays a version 1 file: some pins kept from it have no stored definition (they changed and were not accepted)",
            shown(&a.pins)
        ));
    }
    accepted
        .write_pins_file(&a.pins)
        .map_err(|e| CliError::Unreadable(escape(&e.to_string()).into_owned()))?;
    crate::note(format_args!(
        "aegis: wrote {}: {} tools pinned, {} changed",
        shown(&a.pins),
        accepted.tools().count(),
        review.entries.len()
    ));
    Ok(exit::OK)
}

/// The review as text: per entry a header line, then per field the pinned and the
/// current value, every untrusted part escaped.
fn render(review: &Review<'_>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for entry in &review.entries {
        let _ = write!(out, "{}: {}", escape(entry.name), escape(&entry.what));
        if let Some(why) = entry.held {
            let _ = write!(out, " [held: {}]", escape(why));
        }
        out.push('\n');
        for field in &entry.fields {
            let _ = writeln!(out, "  {}", field.field);
            for (label, side) in [("pinned: ", field.pinned), ("current:", field.current)] {
                let value = match side {
                    Side::Absent => "(absent)".to_owned(),
                    Side::Value(text) => escape(text).into_owned(),
                    Side::Digest(digest) => format!("(not stored; sha256 {digest})"),
                };
                let _ = writeln!(out, "    {label} {value}");
            }
        }
    }
    out
}

/// Starts the server, lists its tools and ends it.
///
/// # Errors
/// The server could not be started (exit 2, or a confined one's 125/127) or listed
/// (exit 2); a grant was given that nothing would enforce, or the pins file lies where
/// the confined server may write (exit 1).
fn list(profile: &aegis_runtime::Profile, a: &ServerArgs, pins: &Path) -> Result<PinSet, CliError> {
    let host_files =
        crate::confine::host_files(None, Some(profile), [HostFile::new("the pins file", pins)]);
    // The profile's [operator] grants apply as they do to wrap; flags replace them.
    let grant = a.grant.with_profile(profile);
    crate::confine::refuse_granted(&crate::confine::Reach::of_grant(&grant), &host_files)?;
    if a.timeout_ms == 0 {
        return Err(CliError::Usage(
            "--timeout-ms must be at least 1".to_owned(),
        ));
    }
    let grace = Duration::from_millis(a.grace_ms);
    // A signal to this process goes to the server, and SIGKILL follows --grace-ms later
    // if it still runs: the listing then ends (its output closes) and the command exits
    // with the signal's code, leaving no server behind. Caught from before the server
    // starts, so none is lost between spawn and listing.
    let server = Arc::new(AtomicU32::new(0));
    let running = server.clone();
    let interrupts = crate::interrupt::Interrupts::install_with(move |signal| {
        let pid = running.load(Ordering::SeqCst);
        if pid != 0 && stdio::forward_signal(pid, signal) {
            std::thread::sleep(grace);
            if running.load(Ordering::SeqCst) == pid {
                stdio::forward_signal(pid, SIGKILL);
            }
        }
    })
    .map_err(|e| CliError::Refused(format!("signal handlers could not be installed: {e}")))?;
    let mut child = start(profile, a, &grant, &host_files)?;
    server.store(child.id(), Ordering::SeqCst);
    let (Some(to_server), Some(from_server)) = (child.stdin.take(), child.stdout.take()) else {
        unreachable!("both pipes were asked for");
    };
    let stderr = child.stderr.take().map(show_stderr);
    let config = ListerConfig {
        step_timeout: Duration::from_millis(a.timeout_ms),
        ..ListerConfig::default()
    };
    let listed = lister::list_tools(from_server, to_server, &config);
    let sink = |notice: Notice<'_>| match notice {
        Notice::Note(line) => crate::note(format_args!("aegis: {}", escape(line))),
        Notice::Warning(line) => crate::say(format_args!("warning: {}", escape(line))),
        Notice::Error(line) => crate::error(escape(line)),
    };
    // Not signalled once it may be reaped (its number could then name another process).
    server.store(0, Ordering::SeqCst);
    stdio::end_server(&mut child, grace, &sink);
    let interrupted = interrupts.exit_code();
    drop(interrupts);
    if let Some(stderr) = stderr {
        let deadline = Instant::now() + STDERR_DRAIN;
        while !stderr.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if interrupted.is_some() {
        return Err(
            CliError::Refused("interrupted; the server was stopped".to_owned())
                .or_interrupted(interrupted),
        );
    }
    let listing = listed.map_err(|e| {
        CliError::Unreadable(format!(
            "the server's tools could not be listed: {}",
            escape(&e.to_string())
        ))
    })?;
    crate::detail(format_args!(
        "aegis: listed {} tools in {} pages",
        listing.pins.tools().count(),
        listing.pages
    ));
    Ok(listing.pins)
}

/// Starts the server with its stdio piped: confined under a profile that confines,
/// plainly otherwise (where grant flags are a usage error, as for wrap).
fn start(
    profile: &aegis_runtime::Profile,
    a: &ServerArgs,
    grant: &GrantArgs,
    host_files: &[HostFile],
) -> Result<Child, CliError> {
    // In a process group of its own, so what the server starts ends with it.
    let piped = |server: &mut Command| {
        aegis_mcp::stdio::in_own_group(server)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    };
    if profile.confinement.is_some() {
        let confined = crate::confine::start(profile, grant, &a.command, host_files, piped)?;
        return confined.start().map_err(CliError::Confine);
    }
    if !grant.grants().is_empty() {
        return Err(CliError::Usage(format!(
            "--allow-read, --allow-exec, --allow-write, --allow-net and --best-effort confine the server, but profile {} names no confinement backend; use --profile linux-confined",
            escape(&profile.name)
        )));
    }
    let (program, args) = a.command.split_first().expect("clap requires a command");
    let mut server = Command::new(program);
    server.args(args);
    piped(&mut server);
    server.spawn().map_err(|e| {
        CliError::Unreadable(format!(
            "{}: {}",
            escape(&program.to_string_lossy()),
            escape(&e.to_string())
        ))
    })
}

/// Shows the server's stderr, a line at a time, escaped, until it closes.
fn show_stderr(stderr: std::process::ChildStderr) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = FrameReader::new(BufReader::new(stderr), MAX_STDERR_LINE);
        while let Ok(Some(frame)) = lines.next_frame() {
            match frame {
                Frame::Line(line) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end_matches(['\n', '\r']);
                    crate::note(format_args!("server: {}", escape(text)));
                }
                Frame::TooLong { seen } => {
                    crate::note(format_args!("server: (a line of {seen} bytes, not shown)"));
                }
            }
        }
    })
}
