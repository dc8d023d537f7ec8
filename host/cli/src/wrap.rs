//! `aegis wrap`: stand between an MCP client and an MCP stdio server, relaying every
//! line both ways and sending each `tools/call` through the profile's stations first.
//!
//! The session itself (threads, queues, the stop sequence, exit delivery) lives in
//! [`aegis_mcp::stdio`], and the gate over the runtime in [`aegis_mcp::host_gate`]. This
//! module parses the flags, opens the host with the operator's overrides, prints what the
//! session says (escaped, on stderr), writes the pins file, closes the record and picks
//! the exit code: the server's status, or one of [`crate::exit`]'s when the record or
//! the session failed.

use aegis_mcp::frame::DEFAULT_MAX_FRAME;
use aegis_mcp::host_gate::{self, HostGate};
use aegis_mcp::pins::PinSet;
use aegis_mcp::relay::{PinMode, Relay, RelayConfig};
use aegis_mcp::stdio::{Ended, Notice, Session, Sink, StdioConfig, StdioError};
use aegis_record::text::escape;
use aegis_runtime::Host;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::confine::{GrantArgs, HostFile};
use crate::settings::{HostSettings, PinSettings};
use crate::{CliError, exit};
use aegis_runtime::operator::{Source, Sourced};

/// `aegis wrap`'s arguments.
#[derive(clap::Args)]
pub struct WrapArgs {
    #[command(flatten)]
    host: crate::HostFlags,
    /// The longest line relayed either way; longer lines are dropped and logged.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FRAME)]
    max_frame: usize,
    /// Compare the server's tool listings with these pins (written by --write-pins)
    /// instead of pinning the session's first listing. A tool the file marks "held" is
    /// refused until the operator deletes the mark. Replaces the profile's `[operator]`
    /// pins.
    #[arg(long, value_name = "FILE")]
    pins: Option<PathBuf>,
    /// When the server exits, write the session's pins to this file (replaced
    /// atomically; a link, FIFO or device there is refused, never written through). A
    /// tool that changed during the session is marked "held".
    /// Refused beneath an --allow-write directory, as are --pins, --policy and --audit;
    /// --signing-key beneath any granted directory. Replaces the profile's `[operator]`
    /// write_pins.
    #[arg(long, value_name = "FILE")]
    write_pins: Option<PathBuf>,
    /// Log changed tool definitions instead of refusing calls to them (whatever the
    /// profile's `[operator]` pins_record_only says).
    #[arg(long)]
    pins_record_only: bool,
    #[command(flatten)]
    approve_via: crate::ApproveViaFlag,
    /// After the client closes its stdin, how long the server has to exit before
    /// SIGTERM, and again before SIGKILL.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    grace_ms: u64,
    /// Under a profile that confines native programs (`--profile linux-confined`):
    /// what the server may reach beyond the exec-support set.
    #[command(flatten)]
    grant: crate::confine::GrantArgs,
    /// The server's command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<std::ffi::OsString>,
}

/// What the session says goes to stderr as the CLI says everything: `aegis: …` for
/// what it did, `error: …` for failures, escaped (the relay's lines quote peers' bytes).
fn stderr_sink() -> Sink {
    Arc::new(|notice: Notice<'_>| match notice {
        Notice::Note(line) => crate::note(format_args!("aegis: {}", escape(line))),
        Notice::Warning(line) => crate::say(format_args!("warning: {}", escape(line))),
        Notice::Error(line) => crate::error(escape(line)),
    })
}

/// Our stdout as the client's side of the session: a closed pipe is not an error, and
/// any other failure is remembered for the exit code ([`crate::print`]).
struct ClientOut;

impl std::io::Write for ClientOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::print(buf).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn wrap(profile_name: &str, a: &WrapArgs) -> Result<u8, CliError> {
    let profile = crate::use_profile(profile_name)?;
    let settings = Settings::of(a, &profile)?;
    settings.show();
    let host_files = refuse_host_files(&settings, &profile)?;
    refuse_ceilings(a, &profile)?;
    let pins = settings
        .pins
        .pins
        .as_ref()
        .map(|p| {
            PinSet::read_pins_file(&p.value).map_err(|e| {
                // A flag's path is in the error already; a profile's line is not.
                let e = e.to_string();
                CliError::Unreadable(match &p.source {
                    Source::Flag(_) => e,
                    from => format!("{}: {}", escape(&from.name()), e),
                })
            })
        })
        .transpose()?;
    if a.max_frame == 0 {
        return Err(CliError::Usage("--max-frame must be at least 1".to_owned()));
    }
    let builder = settings
        .host
        .apply(Host::builder(profile.clone()).tool_registry(host_gate::tool_registry()))?;
    let sink = stderr_sink();
    let session = Session::new(
        StdioConfig {
            max_frame: a.max_frame,
            grace: Duration::from_millis(a.grace_ms),
            ..StdioConfig::default()
        },
        sink.clone(),
    );
    let forwarder = session.signal_forwarder();
    // Caught from before the server starts, so none is lost between spawn and watch.
    let interrupts =
        crate::interrupt::Interrupts::install_with(move |signal| forwarder.forward(signal))
            .map_err(|e| {
                CliError::Refused(format!("signal handlers could not be installed: {e}"))
            })?;
    let confined = confine_server(a, &settings.grant, &profile, &host_files)?;
    let builder = match &confined {
        Some(c) => builder.confinement_report(c.report().to_object()),
        None => builder,
    };
    // Where the record can say what this session fronted: the argv and the executable.
    let builder = builder.front(aegis_runtime::whereabouts::wrap_front(&a.command));
    // Nothing is recorded and no server started until the host is open.
    let host = crate::open_host(builder, settings.host.no_wait, &interrupts)?;
    crate::note(format_args!("aegis: {}", host.notice()));
    let desk = settings
        .host
        .desk(aegis_approvals::Front::Wrap, host.notice().location())?;
    let gate = HostGate::new(
        host.pipeline().clone(),
        settings.host.role().map(str::to_owned),
        sink,
    )
    .with_desk(desk);
    let health = gate.health();
    let relay = relay(
        gate,
        pins,
        settings.pins.record_only(),
        a.approve_via.asks_client(),
    );
    let ended = serve(session, relay, confined, &a.command);
    drop(interrupts);
    finish(settings.pins.write_pins.as_ref(), host, &health, ended)
}

/// Everything `wrap` takes from its flags and the profile's `[operator]` table.
struct Settings {
    host: HostSettings,
    pins: PinSettings,
    grant: GrantArgs,
}

impl Settings {
    fn of(a: &WrapArgs, profile: &aegis_runtime::Profile) -> Result<Settings, CliError> {
        Ok(Settings {
            host: a.host.with_profile(profile)?,
            pins: PinSettings::new(
                a.pins.as_ref(),
                a.write_pins.as_ref(),
                a.pins_record_only,
                profile,
            ),
            grant: a.grant.with_profile(profile),
        })
    }

    /// With -v, each effective setting and where it came from.
    fn show(&self) {
        self.host.show();
        self.pins.show();
        self.grant.show();
    }
}

/// The relay over `gate`: comparing listings with `pins` when given, else pinning the
/// session's first listing; enforcing them unless `record_only`; asking the client's
/// user about parked calls when `ask_client`.
fn relay(
    gate: HostGate,
    pins: Option<PinSet>,
    record_only: bool,
    ask_client: bool,
) -> Relay<HostGate> {
    let config = RelayConfig {
        approve_via_client: ask_client,
        pin_mode: if record_only {
            PinMode::RecordOnly
        } else {
            PinMode::Enforce
        },
        ..RelayConfig::default()
    };
    match pins {
        Some(pins) => Relay::with_pins(gate, config, pins),
        None => Relay::new(gate, config),
    }
}

/// After the session: writes the pins file, closes the record, and picks the exit code
/// (the server's status, unless the record or the session failed).
fn finish(
    write_pins: Option<&Sourced<PathBuf>>,
    host: Host,
    health: &host_gate::RecordHealth,
    ended: Result<Ended, CliError>,
) -> Result<u8, CliError> {
    let ended = match ended {
        Ok(ended) => ended,
        Err(e) => {
            let _ = host.close();
            return Err(e);
        }
    };
    // Pins that cannot be written are said; the record is closed all the same.
    if let (Some(path), Some(pins)) = (write_pins, &ended.pins)
        && let Err(e) = pins.write_pins_file(&path.value)
    {
        match &path.source {
            Source::Flag(_) => crate::error(e),
            from => crate::error(format_args!("{}: {e}", escape(&from.name()))),
        }
    }
    host.close().map_err(|e| {
        CliError::RecordFailed(format!(
            "the session's close line could not be written: {e}"
        ))
    })?;
    if health.failed() {
        return Err(CliError::RecordFailedSaid);
    }
    Ok(ended.exit_code().unwrap_or(exit::UNREADABLE))
}

/// The files the session trusts or writes (the shared flags, the profile's, the pins),
/// refused beneath what the server is granted: checked before the server starts, so it
/// cannot replace one (a link, a FIFO, pins of its own choosing) nor read the key.
///
/// # Errors
/// [`CliError::Usage`], naming the file and the grant.
fn refuse_host_files(
    settings: &Settings,
    profile: &aegis_runtime::Profile,
) -> Result<Vec<HostFile>, CliError> {
    let pins = [&settings.pins.pins, &settings.pins.write_pins];
    let host_files = crate::confine::host_files(
        Some(&settings.host),
        Some(profile),
        pins.into_iter()
            .flatten()
            .map(|p| HostFile::new(p.source.name(), &p.value)),
    );
    // Against the grants as given before any of them is read; against everything the
    // confined server may reach (its exec-support set too) when it is started.
    let granted = crate::confine::Reach::of_grant(&settings.grant);
    crate::confine::refuse_granted(&granted, &host_files)?;
    Ok(host_files)
}

/// Refuses a YAML policy (`--policy`, or the profile's `builtin:policy-yaml`) with a
/// rule that sets ceilings: wrap relays calls to a native server it cannot hold to a
/// memory, time or output ceiling, so every call such a rule allowed would be refused.
/// Said once at start, naming the rule's line, instead of at every call. Other policy
/// stations' ceilings are still refused call by call (`host_gate`). A policy that cannot
/// be read or parsed is left to the station, which reports it as it always does.
///
/// # Errors
/// [`CliError::Refused`] naming the file, line and rule.
fn refuse_ceilings(a: &WrapArgs, profile: &aegis_runtime::Profile) -> Result<(), CliError> {
    use aegis_runtime::registry::PluginSpec;
    let path = match &a.host.policy {
        Some(path) => path.clone(),
        None if profile.policy.spec == PluginSpec::Builtin("policy-yaml".into()) => {
            let config = toml::from_str::<toml::Table>(&profile.policy.config).ok();
            match config.as_ref().and_then(|c| c.get("path")) {
                Some(toml::Value::String(path)) => PathBuf::from(path),
                _ => return Ok(()),
            }
        }
        None => return Ok(()),
    };
    let cap = aegis_files::Cap::new(
        aegis_policy_yaml::set::MAX_POLICY_BYTES as u64 + 1,
        "a policy file",
    );
    let Ok(text) = aegis_files::read_to_string(&path, cap) else {
        return Ok(());
    };
    let file = path.display().to_string();
    let Ok(set) = aegis_policy_yaml::PolicySet::parse(&text, &file) else {
        return Ok(());
    };
    match set.rules().iter().find(|r| r.limits != Default::default()) {
        Some(rule) => Err(CliError::Refused(format!(
            "{file}:{}: rule {:?}: limits: aegis wrap cannot hold a relayed MCP server to memory, time or output ceilings, so every call the rule allows would be refused; remove the limits or give wrap a policy of its own",
            rule.line,
            escape(&rule.id)
        ))),
        None => Ok(()),
    }
}

/// Under a confining profile, the helper, confined and reporting what is enforced (so
/// the open line can say it), waiting to run the server until the host is open and
/// says go; `None` under a profile that confines nothing.
///
/// # Errors
/// The server could not be confined as required, or grants were given that nothing
/// would enforce.
fn confine_server(
    a: &WrapArgs,
    grant: &GrantArgs,
    profile: &aegis_runtime::Profile,
    host_files: &[HostFile],
) -> Result<Option<aegis_runtime::confine::Confined>, CliError> {
    if profile.confinement.is_none() {
        // A profile's own grants need a backend to parse at all; these are the flags.
        if !grant.grants().is_empty() {
            return Err(CliError::Usage(format!(
                "--allow-read, --allow-exec, --allow-write, --allow-net and --best-effort confine the server, but profile {} names no confinement backend; use --profile linux-confined",
                escape(&profile.name)
            )));
        }
        return Ok(None);
    }
    let confined = crate::confine::start(profile, grant, &a.command, host_files, |server| {
        // In a process group of its own, as an unconfined server is (stdio::Session::run).
        aegis_mcp::stdio::in_own_group(server)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
    })?;
    Ok(Some(confined))
}

/// Starts the server (or lets the confined one go) and relays until the session ends.
///
/// # Errors
/// The server could not be started (exit 2, or a confined one's 125/127), or the
/// session failed (exit 4).
fn serve(
    session: Session,
    relay: Relay<HostGate>,
    confined: Option<aegis_runtime::confine::Confined>,
    command: &[std::ffi::OsString],
) -> Result<Ended, CliError> {
    let ended = match confined {
        Some(confined) => {
            let child = confined.start().map_err(CliError::Confine)?;
            session.run_child(relay, child, std::io::stdin(), ClientOut)
        }
        None => {
            let (program, args) = command.split_first().expect("clap requires a command");
            let mut server = Command::new(program);
            server.args(args);
            session.run(relay, server, std::io::stdin(), ClientOut)
        }
    };
    ended.map_err(|e| {
        let message = escape(&e.to_string()).into_owned();
        match e {
            StdioError::Spawn { .. } => CliError::Unreadable(message),
            _ => CliError::Refused(message),
        }
    })
}
