//! `aegis`: a thin command line over the Aegis library crates.
//!
//! Each subcommand turns its arguments into one library call and the result into an exit
//! code. Data goes to stdout; diagnostics go to stderr as `error: …`.

use clap::{Parser, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

mod confine;
mod demo;
mod gateway;
mod interrupt;
mod key;
mod plugins;
mod run;
mod style;
mod wrap;

/// Exit codes shared by the subcommands. `verify`'s are API (CI gates script them) and
/// live with it in [`aegis_verify::exit`], which the auditor's build shares; the codes
/// both use are checked to agree below.
mod exit {
    /// Success (verify: Verified).
    pub const OK: u8 = 0;
    /// verify: Tampered. Every command: a usage error.
    pub const TAMPERED_OR_USAGE: u8 = 1;
    /// A file could not be read or written (verify: the record or the trust store).
    pub const UNREADABLE: u8 = 2;
    // 3 is verify's Indeterminate (aegis_verify::exit::INDETERMINATE) and nothing else's.
    /// A profile, plugin, key or sink was refused (plugins, profiles, run).
    pub const REFUSED: u8 = 4;
    /// The record is busy: another process is writing it (run --no-wait, export).
    pub const BUSY: u8 = 5;
    /// run: a policy rule refused the call.
    pub const POLICY_DENIED: u8 = 10;
    /// run: a rate limit refused the call.
    pub const RATE_LIMITED: u8 = 11;
    /// run: the call was parked for approval (and not run).
    pub const PENDING_APPROVAL: u8 = 12;
    /// run: the capability station refused the call (no grant).
    pub const CAPABILITY_DENIED: u8 = 13;
    /// run: the tool trapped, failed or exited non-zero.
    pub const TRAP: u8 = 14;
    /// run: a ceiling (memory, wall time, output) stopped the tool.
    pub const RESOURCE_EXCEEDED: u8 = 15;
    /// run: the host could not start the tool.
    pub const HOST_DENIED: u8 = 16;
    /// run: the record could not be written; any output was withheld. wrap: an intent,
    /// outcome or the close line could not be written.
    pub const RECORD_FAILED: u8 = 17;
    /// gateway: the transport could not be bound or failed, or the sandbox not built.
    pub const SERVE_FAILED: u8 = 18;
}

const _: () = assert!(
    exit::OK == aegis_verify::exit::VERIFIED
        && exit::TAMPERED_OR_USAGE == aegis_verify::exit::TAMPERED_OR_USAGE
        && exit::UNREADABLE == aegis_verify::exit::UNREADABLE
);

#[derive(Parser)]
#[command(
    name = "aegis",
    version,
    about = "Run AI agents' tool calls under policy, capability grants and a sandbox, and prove afterwards what happened."
)]
struct Cli {
    /// The profile to run with: a name ($AEGIS_PROFILE_PATH, the user and system config
    /// dirs, then the embedded ones; never the working directory) or a path to a profile
    /// file (anything containing `/` or ending in `.toml`, e.g. ./profiles/mine.toml).
    #[arg(
        long,
        global = true,
        value_name = "NAME|PATH",
        default_value = "default"
    )]
    profile: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a record file offline: Verified, Indeterminate or Tampered.
    ///
    /// Exit codes: 0 Verified, 1 Tampered or a usage error, 2 the record or the trust
    /// store could not be read (or the report could not be written), 3 Indeterminate.
    Verify(aegis_verify::VerifyArgs),
    /// Write a fresh ed25519 signing key (mode 0600) and print its public key and key_id.
    ///
    /// Missing directories on the way are created with mode 0700; existing ones are
    /// left as they are. --force replaces an existing key file, never anything that is
    /// not a regular file (a device, a link).
    ///
    /// Exit codes: 0 written, 1 a usage error, the file exists (without --force) or is
    /// not a regular file, 2 a directory, the file or the public key could not be written.
    Keygen {
        /// Where to write the seed.
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Inspect a signing key: `aegis key show KEYFILE`.
    Key {
        #[command(subcommand)]
        command: key::KeyCommand,
    },
    /// Run one tool call through the profile's stations: policy, capability, sandbox,
    /// audit. The tool's output goes to stdout, the verdict to stderr.
    ///
    /// Writers of one record take turns: while another process writes it, run waits,
    /// saying once on stderr which process holds it (--no-wait fails at once instead).
    ///
    /// Exit codes: 0 success, 1 usage error, 2 the input, component or a root could not
    /// be read, 4 the profile, a plugin, the key or the sink was refused, 5 the record
    /// is busy (--no-wait, or a signal ended the wait: then 129/130/143), 10 refused by
    /// policy, 11 rate limited, 12 parked for approval, 13 refused by the capability
    /// station, 14 the tool trapped or exited non-zero, 15 a ceiling stopped it, 16 the
    /// host could not start it, 17 the record could not be written (output withheld),
    /// 129/130/143 stopped by SIGHUP/SIGINT/SIGTERM (its outcome is recorded first).
    Run(Box<run::RunArgs>),
    /// Relay an MCP stdio server, sending every tools/call through the profile's
    /// policy, capability and audit stations before the server sees it.
    ///
    /// Starts CMD with piped stdin and stdout (stderr inherited) and relays lines
    /// between it and this process's stdin/stdout. A refused call is answered with an
    /// error result naming the station and the call id, and never reaches the server.
    /// When the client closes stdin, the server's stdin is closed; it gets SIGTERM after
    /// --grace-ms, and SIGKILL after another. SIGINT, SIGTERM and SIGHUP are forwarded
    /// to the server, and SIGKILL follows if it still runs --grace-ms later.
    ///
    /// Exit codes: the server's exit status, or 128+N when signal N ended it (e.g. 137
    /// after SIGKILL); otherwise 1 usage error, 2 the server could not be started or
    /// the pins file read, 4 the profile, a plugin, the key or the sink was refused,
    /// 5 the record is busy (--no-wait; without it wrap waits its turn), 17 an intent, outcome or the close line could not be written. A server exiting
    /// with one of these codes itself is indistinguishable from them.
    Wrap(Box<wrap::WrapArgs>),
    /// Serve the WebAssembly tools of a manifest as an MCP server (stdio, or Streamable
    /// HTTP with --http), each tools/call through policy, capability, sandbox and audit.
    ///
    /// Every component is loaded before anything is served. A refusal, trap or ceiling
    /// is a result with isError naming the station and the call id. Runs until the
    /// client closes stdin (stdio) or SIGINT/SIGTERM; running calls are cancelled, each
    /// gets its outcome, and the record is closed.
    ///
    /// Exit codes: 0 served and the record closed, 1 usage error, 2 the manifest, a
    /// component, a root or the token file could not be read or was refused, 4 the
    /// profile, a plugin, the key or the sink was refused, 17 an intent, outcome or the
    /// close line could not be written, 18 the address could not be bound, the
    /// transport failed or the sandbox could not be built.
    Gateway(Box<gateway::GatewayArgs>),
    /// Run a native command confined by Landlock and seccomp (no MCP, no record): it
    /// may read the exec-support set and what --allow-read/--allow-write grant, reach
    /// only --allow-net ports, and inherits no descriptor but stdio. Prints what the
    /// kernel enforced.
    ///
    /// Exit codes: the command's own (128 + N when killed by signal N), 1 usage error,
    /// 125 the confinement could not be enforced (nothing was started), 127 the command
    /// could not be found or executed.
    Confine(confine::ConfineArgs),
    /// A guided walk: write a signed session, verify it, then tamper with it.
    Demo,
    /// List plugins: built-in, and loadable libraries found on the plugin path.
    ///
    /// Exit codes: 0 listed (a refused library is listed with why), 1 usage error.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Write every line the profile's audit sink holds to a file, byte-exact, for
    /// `aegis verify`.
    ///
    /// Exit codes: 0 written, 1 usage error or the output exists (without --force),
    /// 2 the sink or the output could not be read or written, 4 the profile was refused,
    /// 5 the sink is busy (another process is writing the record; try again).
    Export {
        /// Where to write the record.
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Replace an existing output file.
        #[arg(long)]
        force: bool,
    },
    /// List profiles, or show one resolved.
    ///
    /// Exit codes: 0 shown, 1 usage error, 4 the profile or one of its plugins was refused.
    Profiles {
        #[command(subcommand)]
        command: ProfilesCommand,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Every built-in and discovered plugin: kinds, version, API major, loads or why not.
    List {
        /// Search these directories instead of the plugin path; repeatable.
        #[arg(long = "path", value_name = "DIR")]
        paths: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ProfilesCommand {
    /// Every profile reachable by name, with where it comes from.
    List,
    /// One profile with each station's plugin resolved and where it came from.
    Show {
        /// The profile (defaults to --profile).
        name: Option<String>,
    },
}

fn main() -> ExitCode {
    // The confinement helper runs before anything else, while this is the only thread.
    if let Some(code) = aegis_runtime::confine::helper_main() {
        return ExitCode::from(code);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::TAMPERED_OR_USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let code = match cli.command {
        Command::Verify(args) => aegis_verify::run(&args),
        Command::Keygen { out, force } => key::keygen(&out, force),
        Command::Key {
            command: key::KeyCommand::Show { keyfile },
        } => key::show(&keyfile),
        Command::Run(args) => run::run(&cli.profile, &args),
        Command::Wrap(args) => wrap::wrap(&cli.profile, &args),
        Command::Gateway(args) => gateway::gateway(&cli.profile, &args),
        Command::Confine(args) => confine::confine(&cli.profile, &args),
        Command::Demo => {
            // The walk runs on the embedded default profile whatever --profile says.
            say(format_args!(
                "aegis: profile default ({})",
                aegis_runtime::ProfileSource::Embedded
            ));
            demo::run()
        }
        Command::Plugins {
            command: PluginsCommand::List { paths },
        } => plugins::list(&paths),
        Command::Profiles {
            command: ProfilesCommand::List,
        } => plugins::list_profiles(),
        Command::Export { out, force } => plugins::export(&cli.profile, &out, force),
        Command::Profiles {
            command: ProfilesCommand::Show { name },
        } => plugins::show_profile(name.as_deref().unwrap_or(&cli.profile)),
    };
    // Data that could not be written is a failure, even if the command's work succeeded.
    if let Some(e) = STDOUT_FAILED.get()
        && code == exit::OK
    {
        error(format_args!("standard output could not be written: {e}"));
        return ExitCode::from(exit::UNREADABLE);
    }
    ExitCode::from(code)
}

/// Opens the host, taking turns on a record another process is writing (as cargo does on
/// a shared directory) unless `no_wait`: says once what it waits for, and a signal ends
/// the wait. The exit code when it cannot open: [`exit::BUSY`] (or the signal's code)
/// for a busy record, [`exit::REFUSED`] otherwise. Nothing is recorded either way.
fn open_host(
    builder: aegis_runtime::HostBuilder,
    no_wait: bool,
    interrupts: &interrupt::Interrupts,
) -> Result<aegis_runtime::Host, u8> {
    let builder = if no_wait {
        builder
    } else {
        builder.wait_when_busy(interrupts.token().clone(), |why| {
            say(format_args!(
                "aegis: waiting for the record: {}",
                aegis_record::text::escape(why)
            ));
        })
    };
    match builder.open() {
        Ok(host) => Ok(host),
        Err(e @ aegis_runtime::pipeline::OpenError::Busy(_)) => {
            error(e);
            Err(interrupts.exit_code().unwrap_or(exit::BUSY))
        }
        Err(e) => {
            error(e);
            Err(exit::REFUSED)
        }
    }
}

/// The operator's `--policy`, `--audit` and `--signing-key`, as overrides of the
/// profile's stations (the host records each next to what the profile said).
///
/// # Errors
/// The exit code, after saying why, when the key cannot be loaded.
fn with_overrides(
    builder: aegis_runtime::HostBuilder,
    policy: Option<&std::path::Path>,
    audit: Option<&std::path::Path>,
    signing_key: Option<&std::path::Path>,
) -> Result<aegis_runtime::HostBuilder, u8> {
    let mut builder = builder;
    if let Some(policy) = policy {
        builder = builder.policy_file("--policy", policy);
    }
    if let Some(audit) = audit {
        builder = builder.audit_file("--audit", audit);
    }
    if let Some(path) = signing_key {
        match aegis_record::key::SigningKey::load(path) {
            Ok(k) => builder = builder.signing_key(k),
            Err(e) => {
                error(format_args!("--signing-key: {e}"));
                return Err(exit::REFUSED);
            }
        }
    }
    Ok(builder)
}

/// Finds the profile a command runs with and says on stderr which one it is and where
/// it came from, so a profile picked up from an unexpected place is visible.
///
/// # Errors
/// The exit code, after printing why the profile was refused.
fn use_profile(name_or_path: &str) -> Result<aegis_runtime::Profile, u8> {
    match aegis_runtime::Profile::find(name_or_path) {
        Ok(p) => {
            // A profile's name and path are the operator's, but a path can hold anything.
            let source = p.source.to_string();
            say(format_args!(
                "aegis: profile {} ({})",
                aegis_record::text::escape(&p.name),
                aegis_record::text::escape(&source)
            ));
            Ok(p)
        }
        Err(e) => {
            error(e);
            Err(exit::REFUSED)
        }
    }
}

/// Set when stdout refused a write for any reason but a closed pipe.
static STDOUT_FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// One diagnostic line on stderr. Guest- or record-derived parts must already be
/// escaped ([`aegis_record::text`]); a closed or failing stderr is ignored, never a panic.
fn say(line: impl std::fmt::Display) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

fn error(message: impl std::fmt::Display) {
    say(format_args!("error: {message}"));
}

/// Writes to stdout. A closed pipe (`aegis verify f | head -1`) is not an error; any
/// other failure (a full disk, `/dev/full`) is remembered, and turns a successful exit
/// into [`exit::UNREADABLE`] (see [`main`]).
fn print(text: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = STDOUT_FAILED.set(e.to_string());
            Err(e)
        }
        _ => Ok(()),
    }
}
