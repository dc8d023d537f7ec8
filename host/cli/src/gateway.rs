//! `aegis gateway`: serve the manifest's WebAssembly tools as an MCP server, every call
//! through the profile's stations.
//!
//! Flags, printing and exit codes only: the manifest, the server, the transports and the
//! record's close live in [`aegis_gateway`].

use aegis_gateway::http::{
    DEFAULT_MAX_BODY, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS, DEFAULT_READ_TIMEOUT,
    DEFAULT_WRITE_TIMEOUT, HttpOptions, MAX_CLIENT_TIMEOUT,
};
use aegis_gateway::{Gateway, GatewayError, GatewayOptions, Manifest, Note, Notes, Transport};
use aegis_record::text::escape;
use aegis_runtime::Host;
use aegis_runtime::sandbox::DEFAULT_CONCURRENT_CALLS;
use clap::builder::TypedValueParser as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::CliError;
use crate::confine::{HostFile, Reach};

/// `aegis gateway`'s arguments.
#[derive(clap::Args)]
pub struct GatewayArgs {
    /// The tools manifest (TOML): each tool's component, shape, schemas, grants.
    #[arg(long, value_name = "FILE")]
    tools: PathBuf,
    /// Serve Streamable HTTP at this address (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// With --http: require `Authorization: Bearer <the file's first line>`.
    #[arg(long, value_name = "FILE", requires = "http")]
    token_file: Option<PathBuf>,
    /// With --http: the largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY, requires = "http")]
    max_body: usize,
    /// With --http: accept an ADDR that is not loopback (by default refused).
    #[arg(long, requires = "http")]
    allow_non_loopback: bool,
    /// With --http: connections served at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize), requires = "http")]
    max_connections: usize,
    /// With --http: sessions kept at once; asking for one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SESSIONS,
          value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize), requires = "http")]
    max_sessions: usize,
    /// With --http: seconds a client has to send a request's head, and then its body
    /// (at most a day).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=MAX_CLIENT_TIMEOUT.as_secs()),
          requires = "http")]
    read_timeout: u64,
    /// With --http: seconds a client may take no bytes of an answer before its
    /// connection is closed (at most a day).
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_WRITE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=MAX_CLIENT_TIMEOUT.as_secs()),
          requires = "http")]
    write_timeout: u64,
    /// Calls at once (the sandbox pool's size); one more is refused, and recorded.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CONCURRENT_CALLS)]
    max_calls: u32,
    #[command(flatten)]
    approve_via: crate::ApproveViaFlag,
    /// Milliseconds between the progress notifications a parked call's client hears
    /// (when it gave a progress token) [default: 15000]. For tests: hidden, and at least
    /// 100, so it cannot flood a client.
    #[arg(long, value_name = "MS", hide = true,
          value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    keep_alive_ms: Option<u64>,
    #[command(flatten)]
    host: crate::HostFlags,
}

/// The server's notes on stderr, escaped: a tool's stderr lines, record failures, and
/// warnings about serving.
fn notes() -> Notes {
    Arc::new(|note: Note<'_>| match note {
        Note::ToolStderr {
            tool,
            call_id,
            line,
        } => crate::say(format_args!(
            "{} [{}]: {}",
            escape(tool),
            escape(call_id),
            escape(line)
        )),
        Note::RecordFailed(what) => crate::error(escape(what)),
        // A problem with serving, not a note on what was done: said even with -q.
        Note::Serving(what) => crate::say(format_args!("warning: {}", escape(what))),
        Note::Approvals(what) => crate::say(format_args!("warning: {}", escape(what))),
        _ => {}
    })
}

/// Why a gateway failed to start, serve or close, by the code its kind takes.
fn gateway_failed(e: GatewayError) -> CliError {
    let message = e.to_string();
    match e {
        GatewayError::Open(_) => CliError::Refused(message),
        GatewayError::Bind { .. } | GatewayError::Serve(_) | GatewayError::Sandbox(_) => {
            CliError::ServeFailed(message)
        }
        GatewayError::Close(_) => CliError::RecordFailed(message),
        _ => CliError::Unreadable(message),
    }
}

/// Where the manifest's tools may write and read, each root named by its tool.
fn tools_reach(manifest: &Manifest) -> Reach {
    let mut reach = Reach::default();
    for tool in &manifest.tools {
        for root in &tool.write {
            reach.write(
                root,
                format!("tool {}'s write root {}", escape(&tool.id), shown(root)),
            );
        }
        for root in &tool.read {
            reach.read(
                root,
                format!("tool {}'s read root {}", escape(&tool.id), shown(root)),
            );
        }
    }
    reach
}

fn shown(p: &std::path::Path) -> String {
    escape(&p.display().to_string()).into_owned()
}

/// Refuses a file the gateway trusts beneath a tool's roots: the manifest (a tool that
/// rewrites it widens its own grants at the next start), a component (another tool's
/// code), the profile's files, `--policy` and `--audit`, the directories a later
/// command loads profiles and plugins from; and the signing key or the bearer token
/// where a tool may read them. The compilation cache is checked apart
/// ([`crate::run::cache_dir`]).
fn refuse_tools_reach(
    reach: &Reach,
    a: &GatewayArgs,
    settings: &crate::settings::HostSettings,
    manifest: &Manifest,
    profile: &aegis_runtime::Profile,
) -> Result<(), CliError> {
    let mut more = vec![HostFile::new("--tools", &manifest.path)];
    more.extend(
        manifest
            .tools
            .iter()
            .map(|t| HostFile::new(format!("tool {}'s component", escape(&t.id)), &t.component)),
    );
    more.extend(
        a.token_file
            .as_deref()
            .map(|p| HostFile::secret("--token-file", p)),
    );
    more.extend(crate::confine::searched_host_files());
    let files = crate::confine::host_files(Some(settings), Some(profile), more);
    crate::confine::refuse_granted(reach, &files)
}

pub fn gateway(profile_name: &str, a: &GatewayArgs) -> Result<u8, CliError> {
    if a.max_calls == 0 {
        return Err(CliError::Usage("--max-calls must be at least 1".to_owned()));
    }
    let manifest = Manifest::load(&a.tools).map_err(|e| CliError::Unreadable(e.to_string()))?;
    let transport = match a.http {
        None => Transport::Stdio,
        Some(addr) => {
            let token = a
                .token_file
                .as_deref()
                .map(aegis_gateway::http::read_token)
                .transpose()
                .map_err(|e| CliError::Unreadable(e.to_string()))?;
            Transport::Http(HttpOptions {
                token,
                max_body: a.max_body,
                allow_non_loopback: a.allow_non_loopback,
                max_connections: a.max_connections,
                max_sessions: a.max_sessions,
                read_timeout: std::time::Duration::from_secs(a.read_timeout),
                write_timeout: std::time::Duration::from_secs(a.write_timeout),
                ..HttpOptions::new(addr)
            })
        }
    };
    let profile = crate::use_profile(profile_name)?;
    let settings = a.host.with_profile(&profile)?;
    settings.show();
    let reach = tools_reach(&manifest);
    refuse_tools_reach(&reach, a, &settings, &manifest, &profile)?;
    let cache_dir = crate::run::cache_dir(&reach)?;
    // What the record should say about how the calls came in.
    let mut serving = aegis_record::json::Object::new();
    serving.insert("command", "gateway");
    match &transport {
        Transport::Stdio => serving.insert("transport", "stdio"),
        Transport::Http(h) => {
            serving.insert("bind", h.addr.to_string());
            serving.insert("allow_non_loopback", h.allow_non_loopback);
            serving.insert("bearer_token", h.token.is_some());
            serving.insert("transport", "http")
        }
    };
    serving.insert("max_calls", a.max_calls);
    // An approver key that cannot be read is refused before anything is recorded (the
    // desk itself is made once the record's location is known).
    settings.desk(aegis_approvals::Front::Gateway, String::new())?;
    let builder = settings.apply(Host::builder(profile).serving(serving))?;
    // Caught from before the wait for a busy record (a signal ends it, nothing
    // recorded); the server watches the same two itself once it runs.
    let interrupts = crate::interrupt::Interrupts::install_stop_signals()
        .map_err(|e| CliError::Refused(format!("signal handlers could not be installed: {e}")))?;
    let builder = crate::waiting(builder, settings.no_wait, &interrupts);
    let options = GatewayOptions {
        capacity: a.max_calls,
        cache_dir,
        role: settings.role().map(str::to_owned),
        keep_alive: a.keep_alive_ms.map_or(
            aegis_gateway::server::KEEP_ALIVE,
            std::time::Duration::from_millis,
        ),
    };
    let gateway = Gateway::open(builder, &manifest, &options, notes()).map_err(|e| match e {
        GatewayError::Open(e) => crate::open_failed(e, &interrupts),
        e => gateway_failed(e),
    })?;
    // A signal that came while the tools were loaded ends the gateway before it serves.
    if let Some(code) = interrupts.exit_code() {
        let _ = gateway.close();
        return Ok(code);
    }
    // Parked calls wait in the approvals queue for a person (--approvals, the profile's
    // [operator.approvals]); the queue is made when a call is first parked.
    let desk = settings.desk(aegis_approvals::Front::Gateway, gateway.notice().location())?;
    let gateway = gateway.with_desk(desk);
    // Parked calls also put to the client's user, when the client can be asked.
    let gateway = if a.approve_via.asks_client() {
        gateway.asking_clients()
    } else {
        gateway
    };
    let names: Vec<String> = gateway
        .server()
        .tools()
        .iter()
        .map(|t| escape(&t.name).to_string())
        .collect();
    crate::note(format_args!("aegis: {}", gateway.notice()));
    let count = names.len();
    let listed = names.join(", ");
    let ready = Box::new(move |at: &str| {
        crate::note(format_args!(
            "aegis: gateway serving {count} tools ({listed}) on {}",
            escape(at)
        ));
    });
    aegis_gateway::run(gateway, transport, ready).map_err(gateway_failed)?;
    Ok(crate::exit::OK)
}
