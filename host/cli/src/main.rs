//! `aegis`: a thin command line over the Aegis library crates.
//!
//! Each subcommand turns its arguments into one library call and the result into an exit
//! code. Data goes to stdout; diagnostics go to stderr as `error: …`.

use clap::{CommandFactory as _, Parser, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use error::CliError;

mod approvals;
mod confine;
mod console;
mod demo;
mod error;
mod gateway;
mod help;
mod interrupt;
mod key;
mod log;
mod pins;
mod plugins;
mod recheck;
mod rotate;
mod run;
mod settings;
mod store;
mod style;
mod wrap;

/// mimalloc rather than glibc's malloc: a call allocates on one worker thread and often
/// frees on another, and glibc's malloc took a fifth of the gateway's CPU samples at 16
/// clients; with mimalloc the same build served 16–54 % more calls/s (median 27 %, five
/// pairs; `benches/results/gateway.md`, run 9). Plugins keep their own allocator: abi_stable
/// values free through the vtable of the side that made them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// The record is busy: another process is writing it (run, wrap and gateway with
    /// --no-wait, export).
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
    /// run: the record could not be written; any output was withheld. wrap and
    /// gateway: an intent, outcome or the close line could not be written.
    pub const RECORD_FAILED: u8 = 17;
    /// gateway: the transport could not be bound or failed, or the sandbox not built.
    pub const SERVE_FAILED: u8 = 18;
    // recheck's own outcomes take codes no other command uses: 1 stays every command's
    // usage error and 3 verify's Indeterminate, so a script cannot mistake a change
    // for a typo or a record verify would not call Tampered.
    /// recheck: the new policy decides at least one recorded call otherwise.
    pub const RECHECK_CHANGED: u8 = 6;
    /// recheck: no decided call changes, but some calls could not be decided.
    pub const RECHECK_UNDECIDABLE: u8 = 7;
    /// recheck: the record is Tampered; nothing was replayed.
    pub const RECHECK_TAMPERED: u8 = 8;
    /// pins diff: the server's tools differ from the pins file (or a tool is held). Not
    /// 1 (a usage error) nor recheck's 6, so a script tells a change from a typo and
    /// from a recheck verdict.
    pub const PINS_DIFFER: u8 = 9;
    /// approvals approve/deny: the request was already decided (the first decision
    /// stands), or its decision already used.
    pub const APPROVAL_SETTLED: u8 = 19;
    /// approvals approve/deny: the request expired before it was decided.
    pub const APPROVAL_EXPIRED: u8 = 20;
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
    about = "Run AI agents' tool calls under policy, capability grants and a sandbox, and prove afterwards what happened.",
    after_help = help::TOP
)]
struct Cli {
    /// The profile to run with (run, wrap, pins, gateway, recheck, export, profiles show; the other
    /// commands refuse it): a name ($AEGIS_PROFILE_PATH, the user and system config
    /// dirs, then the embedded ones; never the working directory) or a path to a
    /// profile file (anything containing `/` or ending in `.toml`, e.g.
    /// ./profiles/mine.toml). [default: default]
    #[arg(long, global = true, value_name = "NAME|PATH")]
    profile: Option<String>,
    /// When to colour output: auto (a terminal, and NO_COLOR unset), always or never.
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto")]
    color: style::When,
    /// Say less on stderr: errors, and each command's result, only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Say more on stderr: where the compilation cache is, what a call was granted, and
    /// each operator setting (key, audit, role, pins, grants) with where it came from.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a record file offline: Verified, Indeterminate or Tampered.
    #[command(after_help = aegis_verify::after_help("aegis verify"))]
    Verify(aegis_verify::VerifyArgs),
    /// Replay a record's policy decisions under another policy (the profile's, or
    /// --policy) and list the calls it would decide otherwise. Runs nothing.
    ///
    /// The record is verified first, as `aegis verify` does: a Tampered record is
    /// refused; an Indeterminate one (or one not pinned with --key) is rechecked after a
    /// warning. Each call's recorded tool, role, session and capability axes are asked
    /// of the new station; a call whose record does not state what the policy needs
    /// (no outcome, axes not recorded, a rate limit whose budget depends on times the
    /// record does not hold) is listed as undecidable, with why, never guessed.
    #[command(after_help = help::RECHECK)]
    Recheck(Box<recheck::RecheckArgs>),
    /// Read a record as a person does: its verdict, then one line a call (time, session,
    /// tool, verdict, station, duration, call id, reason) and each tool change a relay
    /// saw. Runs nothing.
    ///
    /// The record is verified first, as `aegis verify` does; a Tampered record lists
    /// nothing. Text the record holds is escaped for the terminal. With --follow, it
    /// keeps reading as the record grows, listing each call once its lines verify.
    #[command(after_help = help::LOG)]
    Log(Box<log::LogArgs>),
    /// Serve a web page that watches a record (or a directory of session files) as it
    /// grows: calls newest first (time, host, session, tool, verdict, station, reason,
    /// duration), each file's verdict, each call's evidence; and, with an approver key,
    /// the approvals queue to approve or deny from. Runs no tool.
    ///
    /// The page and its script come from this binary (nothing from another site) and
    /// are served on loopback; its API needs a token, which the address printed on
    /// stderr carries in its fragment (`#token=…`). Stops at SIGINT or SIGTERM.
    #[command(after_help = help::CONSOLE)]
    Console(Box<console::ConsoleArgs>),
    /// Write a fresh ed25519 signing key (mode 0600) and print its public key and key_id.
    ///
    /// Missing directories on the way are created with mode 0700; existing ones are
    /// left as they are. --force replaces an existing key file, never anything that is
    /// not a regular file (a device, a link).
    #[command(after_help = help::KEYGEN)]
    Keygen {
        /// Where to write the seed.
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Replace an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Hand a record to a new signing key: append a session whose key_handoff line the
    /// current key signs, naming the next key, closed by the next key.
    ///
    /// Later sessions signed by the next key (run, wrap, gateway with --signing-key
    /// NEW) verify as continuing the rotation, and `aegis verify --key OLD` accepts them
    /// through the hand-off. The record is opened as `run --audit` opens it: the file
    /// sink, waiting its turn while another process writes it (--no-wait: exit 5).
    #[command(after_help = help::ROTATE)]
    Rotate(Box<rotate::RotateArgs>),
    /// Inspect a signing key: `aegis key show KEYFILE`.
    #[command(after_help = help::KEY)]
    Key {
        #[command(subcommand)]
        command: key::KeyCommand,
    },
    /// Run one tool call through the profile's stations: policy, capability, sandbox,
    /// audit. The tool's output goes to stdout, the verdict to stderr.
    ///
    /// Writers of one record take turns: while another process writes it, run waits,
    /// saying once on stderr which process holds it (--no-wait fails at once instead).
    #[command(after_help = help::RUN)]
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
    #[command(after_help = help::WRAP)]
    Wrap(Box<wrap::WrapArgs>),
    /// Review an MCP server's tools against a pins file (`aegis wrap --pins`), and
    /// accept them: `aegis pins diff PINS -- CMD`, `aegis pins accept PINS -- CMD`.
    #[command(after_help = help::PINS)]
    Pins {
        #[command(subcommand)]
        command: pins::PinsCommand,
    },
    /// Serve the WebAssembly tools of a manifest as an MCP server (stdio, or Streamable
    /// HTTP with --http), each tools/call through policy, capability, sandbox and audit.
    ///
    /// Every component is loaded before anything is served. A refusal, trap or ceiling
    /// is a result with isError naming the station and the call id. Runs until the
    /// client closes stdin (stdio) or SIGINT/SIGTERM; running calls are cancelled, each
    /// gets its outcome, and the record is closed.
    #[command(after_help = help::GATEWAY)]
    Gateway(Box<gateway::GatewayArgs>),
    /// Run a native command confined by Landlock and seccomp (no MCP, no record): it
    /// may read the exec-support set and what --allow-read/--allow-exec/--allow-write
    /// grant (and run what --allow-exec grants), reach
    /// only --allow-net ports, and inherits no descriptor but stdio. Prints what the
    /// kernel enforced.
    ///
    #[command(after_help = help::CONFINE)]
    Confine(Box<confine::ConfineArgs>),
    /// A guided walk: write a signed session, verify it, then tamper with it.
    ///
    /// Runs on the embedded default profile, with a key and files in a temporary
    /// directory that is removed when it ends (Ctrl-C included).
    #[command(after_help = help::DEMO)]
    Demo,
    /// List plugins: built-in, and loadable libraries found on the plugin path.
    #[command(after_help = help::PLUGINS)]
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
    /// Write every line the profile's audit sink holds to a file, byte-exact, for
    /// `aegis verify`; from a store of many sessions (PostgreSQL), one file per session
    /// into a directory. Never creates the sink: a record that is not there is an error.
    #[command(after_help = help::EXPORT)]
    Export {
        /// Where to write the record: a file, or for a store of many sessions a
        /// directory (made if missing).
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Replace existing output files.
        #[arg(long)]
        force: bool,
        /// Only sessions opened on this host (its hostname); stores of many sessions only.
        #[arg(long, value_name = "HOSTNAME")]
        host: Option<String>,
        /// Only sessions opened at or after this UTC time (2026-12-04,
        /// 2026-12-04T10:00:00Z or the record's own form); stores of many sessions only.
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
    },
    /// Prepare the profile's audit store (PostgreSQL): tables, append-only triggers and
    /// the writer's rights.
    #[command(after_help = help::STORE)]
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Decide calls a policy parked for approval: list the queue, show what approving a
    /// request authorises, approve or deny it with your signing key.
    #[command(after_help = help::APPROVALS)]
    Approvals {
        #[command(subcommand)]
        command: approvals::ApprovalsCommand,
    },
    /// List profiles, or show one resolved.
    #[command(after_help = help::PROFILES)]
    Profiles {
        #[command(subcommand)]
        command: ProfilesCommand,
    },
    /// Print a shell completion script for aegis on stdout.
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print aegis's man page (roff) on stdout, or one command's.
    #[command(after_help = help::MAN)]
    Man {
        /// A command, for its own page (e.g. `run`, `profiles`).
        #[arg(value_name = "COMMAND")]
        command: Option<String>,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Every built-in and discovered plugin: the name a profile uses, kinds, version,
    /// API major, where it comes from, or why it is refused.
    #[command(after_help = help::PLUGINS_LIST)]
    List {
        /// Search these directories instead of the plugin path; repeatable.
        #[arg(long = "path", value_name = "DIR")]
        paths: Vec<PathBuf>,
        /// Print one JSON object per plugin, one per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Make the store as an administrator, so the profile's writer role may only add
    /// lines: run once, and again to change the retention. Idempotent.
    #[command(after_help = help::STORE_INIT)]
    Init {
        /// A file holding the administrator's libpq connection string (mode 0600:
        /// it may hold a password).
        #[arg(long, value_name = "FILE", conflicts_with = "admin_connection")]
        admin_connection_file: Option<PathBuf>,
        /// The administrator's libpq connection string (no password here: the command
        /// line is visible to every user; use --admin-connection-file for one).
        #[arg(long, value_name = "CONNINFO")]
        admin_connection: Option<String>,
    },
}

#[derive(Subcommand)]
enum ProfilesCommand {
    /// Every profile reachable by name (the name --profile takes), with where it comes
    /// from.
    #[command(after_help = help::PROFILES_LIST)]
    List,
    /// One profile with each station's plugin built from its config (as run builds
    /// it), its version and where it came from.
    #[command(after_help = help::PROFILES_SHOW)]
    Show {
        /// The profile (defaults to --profile).
        name: Option<String>,
        /// Print it as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// The command as the operator typed it, for messages: `verify`, `profiles list`.
    fn name(&self) -> &'static str {
        match self {
            Command::Verify(_) => "verify",
            Command::Recheck(_) => "recheck",
            Command::Log(_) => "log",
            Command::Console(_) => "console",
            Command::Keygen { .. } => "keygen",
            Command::Key { .. } => "key show",
            Command::Rotate(_) => "rotate",
            Command::Run(_) => "run",
            Command::Wrap(_) => "wrap",
            Command::Pins { command } => command.name(),
            Command::Gateway(_) => "gateway",
            Command::Confine(_) => "confine",
            Command::Demo => "demo",
            Command::Plugins { .. } => "plugins list",
            Command::Export { .. } => "export",
            Command::Store { .. } => "store init",
            Command::Approvals { command } => command.name(),
            Command::Profiles {
                command: ProfilesCommand::List,
            } => "profiles list",
            Command::Profiles {
                command: ProfilesCommand::Show { .. },
            } => "profiles show",
            Command::Completions { .. } => "completions",
            Command::Man { .. } => "man",
        }
    }

    /// Whether the command runs with a profile (and so takes --profile).
    fn uses_profile(&self) -> bool {
        matches!(
            self,
            Command::Run(_)
                | Command::Recheck(_)
                | Command::Wrap(_)
                | Command::Pins { .. }
                | Command::Gateway(_)
                | Command::Confine(_)
                | Command::Export { .. }
                | Command::Store { .. }
                | Command::Approvals { .. }
                | Command::Console(_)
                | Command::Profiles {
                    command: ProfilesCommand::Show { .. }
                }
        )
    }
}

/// How much the commands say on stderr besides errors and results.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

static VERBOSITY: std::sync::OnceLock<Verbosity> = std::sync::OnceLock::new();

fn verbosity() -> Verbosity {
    VERBOSITY.get().copied().unwrap_or(Verbosity::Normal)
}

fn main() -> ExitCode {
    // The confinement helper runs before anything else, while this is the only thread.
    if let Some(code) = aegis_runtime::confine::helper_main() {
        return ExitCode::from(code);
    }
    // The MCP server the demo wraps is this binary too, so the demo needs nothing else.
    if let Some(code) = demo::server::main_if_asked() {
        return ExitCode::from(code);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; every usage error,
            // clap's own included, exits 1 as each command's help says.
            let code = if e.use_stderr() {
                exit::TAMPERED_OR_USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let _ = VERBOSITY.set(if cli.quiet {
        Verbosity::Quiet
    } else if cli.verbose {
        Verbosity::Verbose
    } else {
        Verbosity::Normal
    });
    style::set(cli.color);
    let code = dispatch(cli).unwrap_or_else(failed);
    // Data that could not be written is a failure, even if the command's work succeeded.
    if let Some(e) = STDOUT_FAILED.get()
        && code == exit::OK
    {
        error(format_args!("standard output could not be written: {e}"));
        return ExitCode::from(exit::UNREADABLE);
    }
    ExitCode::from(code)
}

/// Says why the command failed (unless it was said already) and gives its exit code:
/// the one place a [`CliError`] is printed.
fn failed(e: CliError) -> u8 {
    if !e.said() {
        error(&e);
    }
    e.exit_code()
}

/// Runs the command: its exit code, or why it failed.
fn dispatch(cli: Cli) -> Result<u8, CliError> {
    // A global option must not be silently ignored where it means nothing.
    if cli.profile.is_some() && !cli.command.uses_profile() {
        return Err(CliError::Usage(format!(
            "--profile has no effect on `aegis {}`, which uses no profile; leave it out",
            cli.command.name()
        )));
    }
    let profile = cli.profile.as_deref().unwrap_or("default");
    match cli.command {
        // verify keeps its own errors: its crate is the auditor's build too.
        Command::Verify(args) => Ok(aegis_verify::run(&args)),
        Command::Recheck(args) => recheck::recheck(profile, &args),
        Command::Log(args) => log::log(&args),
        Command::Console(args) => console::console(&args, cli.profile.as_deref()),
        Command::Keygen { out, force } => key::keygen(&out, force),
        Command::Key {
            command: key::KeyCommand::Show { keyfile },
        } => key::show(&keyfile),
        Command::Rotate(args) => rotate::rotate(&args),
        Command::Run(args) => run::run(profile, &args),
        Command::Wrap(args) => wrap::wrap(profile, &args),
        Command::Pins { command } => pins::pins(profile, &command),
        Command::Gateway(args) => gateway::gateway(profile, &args),
        Command::Confine(args) => confine::confine(profile, &args),
        Command::Demo => {
            // The walk runs on the embedded default profile.
            note(format_args!(
                "aegis: profile default ({})",
                aegis_runtime::ProfileSource::Embedded
            ));
            demo::run()
        }
        Command::Plugins {
            command: PluginsCommand::List { paths, json },
        } => plugins::list(&paths, json),
        Command::Profiles {
            command: ProfilesCommand::List,
        } => plugins::list_profiles(),
        Command::Export {
            out,
            force,
            host,
            since,
        } => plugins::export(
            profile,
            &out,
            force,
            &store::Filter::new(host, since.as_deref())?,
        ),
        Command::Store {
            command:
                StoreCommand::Init {
                    admin_connection_file,
                    admin_connection,
                },
        } => store::init(profile, admin_connection, admin_connection_file),
        Command::Approvals { command } => approvals::approvals(&command, cli.profile.as_deref()),
        Command::Profiles {
            command: ProfilesCommand::Show { name, json },
        } => plugins::show_profile(name.as_deref().unwrap_or(profile), json),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "aegis", &mut out);
            print(&out).map_err(|_| CliError::Stdout)?;
            Ok(exit::OK)
        }
        Command::Man { command } => man(command.as_deref()),
    }
}

/// `aegis man [COMMAND]`: the page, rendered from the clap definitions (so it lists what
/// `--help` lists, EXAMPLES and EXIT STATUS included).
fn man(command: Option<&str>) -> Result<u8, CliError> {
    let mut top = Cli::command();
    top.build();
    let page = match command {
        None => top,
        Some(name) => match top.find_subcommand(name) {
            // Built, a subcommand is displayed as `aegis-NAME`, the page's title.
            // A subcommand carries no version of its own; its page names aegis's.
            Some(sub) => sub.clone().version(env!("CARGO_PKG_VERSION")),
            None => {
                return Err(CliError::Usage(format!(
                    "no command {:?} (one of: {})",
                    aegis_record::text::escape(name),
                    top.get_subcommands()
                        .map(|c| c.get_name().to_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        },
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| CliError::Unreadable(format!("the man page could not be rendered: {e}")))?;
    print(&out).map_err(|_| CliError::Stdout)?;
    Ok(exit::OK)
}

/// Opens the host, taking turns on a record another process is writing (as cargo does on
/// a shared directory) unless `no_wait`: says once what it waits for, and a signal ends
/// the wait. Nothing is recorded when it cannot open.
///
/// # Errors
/// [`CliError::Busy`] (with the signal's code if one ended the wait) for a busy record,
/// [`CliError::Refused`] otherwise.
fn open_host(
    builder: aegis_runtime::HostBuilder,
    no_wait: bool,
    interrupts: &interrupt::Interrupts,
) -> Result<aegis_runtime::Host, CliError> {
    let host = waiting(builder, no_wait, interrupts)
        .open()
        .map_err(|e| open_failed(e, interrupts))?;
    detail(format_args!("aegis: record open; {}", host.notice()));
    Ok(host)
}

/// `builder`, set to wait its turn on a busy record unless `no_wait` (see [`open_host`]):
/// for a caller that opens the host itself (the gateway).
fn waiting(
    builder: aegis_runtime::HostBuilder,
    no_wait: bool,
    interrupts: &interrupt::Interrupts,
) -> aegis_runtime::HostBuilder {
    if no_wait {
        return builder;
    }
    builder.wait_when_busy(interrupts.token().clone(), |why| {
        note(format_args!(
            "aegis: waiting for the record: {}",
            aegis_record::text::escape(why)
        ));
    })
}

/// Why the host did not open (see [`open_host`]).
fn open_failed(
    e: aegis_runtime::pipeline::OpenError,
    interrupts: &interrupt::Interrupts,
) -> CliError {
    match e {
        aegis_runtime::pipeline::OpenError::Busy(_) => {
            CliError::Busy(e.to_string()).or_interrupted(interrupts.exit_code())
        }
        _ => CliError::Refused(e.to_string()),
    }
}

/// The flags `run`, `wrap` and `gateway` share: the operator's overrides of the
/// profile's stations (the host records each next to what the profile said), the role
/// every call asserts, and whether to wait for a busy record. `--audit`,
/// `--signing-key` and `--role` replace the profile's `[operator]` values
/// ([`settings`]).
#[derive(clap::Args)]
pub struct HostFlags {
    /// A policy YAML file, instead of the profile's policy station.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Append the record to this file (a durable file sink) instead of the profile's
    /// sink; needs a signing key (this flag's or the profile's). A directory (`DIR/`)
    /// gives each session a new file of its own in it, so sessions never wait on one
    /// another. Replaces the profile's `[operator]` audit.
    #[arg(long, value_name = "PATH")]
    pub audit: Option<PathBuf>,
    /// The signing key (`aegis keygen`); required by a durable sink. Replaces the
    /// profile's `[operator]` signing_key.
    #[arg(long, value_name = "PATH")]
    pub signing_key: Option<PathBuf>,
    /// The role the caller asserts, for policy rules (every call of the session).
    /// Replaces the profile's `[operator]` role.
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// Fail at once (exit 5) when another process is writing the record, instead of
    /// waiting for it to finish.
    #[arg(long)]
    pub no_wait: bool,
    /// Record each call's whole arguments on its outcome (bounded: over 4 KiB, their
    /// length and SHA-256 only). Without it the record keeps only the path-like
    /// arguments each tool's binding names. Replaces the profile's `[operator]`
    /// record_arguments.
    #[arg(long)]
    pub record_arguments: bool,
    /// How long a call a rule parks waits for a person's decision before the host
    /// denies it as expired: a whole number and s, m or h (90s, 10m, 1h) [default: 10m].
    /// Replaces the profile's `[operator.approvals]` timeout.
    #[arg(long, value_name = "DURATION", value_parser = approval_timeout)]
    pub approval_timeout: Option<std::time::Duration>,
    /// The approvals queue directory where parked calls are filed [default:
    /// $XDG_STATE_HOME/aegis/approvals, else ~/.local/state/aegis/approvals]. Replaces
    /// the profile's `[operator.approvals]` dir.
    #[arg(long = "approvals", value_name = "DIR")]
    pub approvals_dir: Option<PathBuf>,
}

/// `--approve-via`, which `wrap` and `gateway` share: who is asked to decide a call a
/// rule parks.
#[derive(clap::Args)]
pub struct ApproveViaFlag {
    /// Who is asked to decide a call a rule parks: `queue` (the approvals queue, for
    /// `aegis approvals approve`) or `client` (the MCP client's user, through
    /// elicitation, when the client declared it; the queue still decides otherwise, and
    /// whichever decides first wins). A client's answer is recorded as `via: client`,
    /// never as a signature.
    #[arg(long, value_enum, value_name = "WHO", default_value_t = ApproveVia::Queue)]
    approve_via: ApproveVia,
}

impl ApproveViaFlag {
    /// Whether the client's user is asked too (`--approve-via client`).
    pub fn asks_client(&self) -> bool {
        self.approve_via == ApproveVia::Client
    }
}

/// Who decides a parked call (`--approve-via`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ApproveVia {
    /// The approvals queue only.
    Queue,
    /// The MCP client's user through elicitation, else the queue.
    Client,
}

fn approval_timeout(text: &str) -> Result<std::time::Duration, String> {
    aegis_runtime::operator::parse_timeout(text)
}

/// Finds the profile a command runs with and says on stderr which one it is and where
/// it came from, so a profile picked up from an unexpected place is visible.
///
/// # Errors
/// Why the profile was refused.
fn use_profile(name_or_path: &str) -> Result<aegis_runtime::Profile, CliError> {
    let p =
        aegis_runtime::Profile::find(name_or_path).map_err(|e| CliError::Refused(e.to_string()))?;
    // A profile's name and path are the operator's, but a path can hold anything.
    let source = p.source.to_string();
    note(format_args!(
        "aegis: profile {} ({})",
        aegis_record::text::escape(&p.name),
        aegis_record::text::escape(&source)
    ));
    Ok(p)
}

/// Set when stdout refused a write for any reason but a closed pipe.
static STDOUT_FAILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// One diagnostic line on stderr. Guest- or record-derived parts must already be
/// escaped ([`aegis_record::text`]); a closed or failing stderr is ignored, never a panic.
fn say(line: impl std::fmt::Display) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// A line on stderr that says what the command did (`aegis: …`); left out with -q.
fn note(line: impl std::fmt::Display) {
    if verbosity() > Verbosity::Quiet {
        say(line);
    }
}

/// A line on stderr for -v only: detail most runs do not need.
fn detail(line: impl std::fmt::Display) {
    if verbosity() >= Verbosity::Verbose {
        say(line);
    }
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
