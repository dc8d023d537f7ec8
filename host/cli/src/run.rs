//! `aegis run`: one tool call through the profile's stations.
//!
//! The tool's output goes to stdout, the pipeline's verdict to stderr, and the exit code
//! names the class of the ending (see [`crate::exit`]).

use aegis_record::ExecutionOutcome;
use aegis_record::text::escape;
use aegis_runtime::Host;
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolKind, ToolManifest, ToolRegistry};
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_runtime::sandbox::Options;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;

use crate::{CliError, exit};

/// `aegis run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The WebAssembly component to run (a wasip2 command, or the aegis tool world).
    #[arg(long, value_name = "FILE")]
    component: PathBuf,
    /// The tool's id: what policy rules and the record name it by.
    #[arg(long, value_name = "ID")]
    id: String,
    /// The input, as given (the tool's stdin).
    #[arg(long, value_name = "STR", conflicts_with = "input_file")]
    input: Option<String>,
    /// Read the input from a file (otherwise from stdin when it is not a terminal).
    #[arg(long, value_name = "PATH")]
    input_file: Option<PathBuf>,
    /// A directory the tool may read beneath; repeatable.
    #[arg(long = "allow-read", value_name = "DIR")]
    allow_read: Vec<PathBuf>,
    /// A directory the tool may read and write beneath; repeatable.
    #[arg(long = "allow-write", value_name = "DIR")]
    allow_write: Vec<PathBuf>,
    /// Ceiling on the tool's total linear memory, in bytes.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<u64>,
    /// Ceiling on the call's wall-clock time, in milliseconds.
    #[arg(long, value_name = "MS")]
    max_wall_ms: Option<u64>,
    /// Ceiling on the tool's output, in bytes (more fails the call; nothing is cut).
    #[arg(long, value_name = "BYTES")]
    max_output: Option<u64>,
    /// The capability the call names (fs.read, fs.write, net.http); it gets only that.
    #[arg(long, value_name = "NAME")]
    capability: Option<String>,
    #[command(flatten)]
    host: crate::HostFlags,
    /// Print one JSON object on stdout instead of the tool's output: the verdict, the
    /// class, the exit code, the call's place on the record, the output and stderr.
    #[arg(long)]
    json: bool,
    /// Run a call a person approved after `aegis run` parked it: the approval id it
    /// printed. The call must be the one parked (same tool, same arguments), before the
    /// approval expires; it runs once.
    #[arg(long, value_name = "ID")]
    approval: Option<String>,
    /// Arguments for a command component, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
}

/// Where compiled components are cached between runs, if the environment names a home:
/// `$XDG_CACHE_HOME/aegis/wasmtime`, else `~/.cache/aegis/wasmtime`.
pub(crate) fn cache_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("aegis").join("wasmtime"))
}

/// The compilation cache to use ([`cache_path`]), if it can be written: a cache that
/// cannot be written weakens nothing, so the tool runs uncached, with one warning,
/// instead of being refused.
///
/// A cache the tools may write beneath (a write root of `$HOME`, or a link into a
/// root) is refused instead: cached code runs as native code in this process, so a
/// tool that planted an entry there would leave the sandbox at the next load of any
/// later command, whatever that command grants. Not using it here would not help.
///
/// # Errors
/// [`CliError::Usage`] for a cache beneath a tool's write root.
pub(crate) fn cache_dir(tools: &crate::confine::Reach) -> Result<Option<PathBuf>, CliError> {
    let Some(dir) = cache_path() else {
        return Ok(None);
    };
    if let Some(named) = tools.writes_at(&dir) {
        return Err(CliError::Usage(format!(
            "the compilation cache {} is beneath {named}: a tool could plant native code there that a later aegis loads; set XDG_CACHE_HOME to a directory outside the tools' roots",
            aegis_record::text::escape(&dir.display().to_string())
        )));
    }
    match usable_cache(&dir) {
        Ok(()) => {
            crate::detail(format_args!("aegis: compilation cache {}", dir.display()));
            Ok(Some(dir))
        }
        Err(e) => {
            crate::say(format_args!(
                "warning: the compilation cache {} cannot be used ({e}); running uncached",
                dir.display()
            ));
            Ok(None)
        }
    }
}

/// Whether the sandbox can use `dir` as its cache: made (0700, as the sandbox makes
/// it), writable (a scratch file, removed at once), and private, by the sandbox's own
/// rule (cached code runs as native code): owned by this user, no access for others.
/// The sandbox checks the last again; here a failure only means running uncached.
fn usable_cache(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let scratch = tempfile::tempfile_in(dir)?;
    let (meta, mine) = (std::fs::metadata(dir)?, scratch.metadata()?);
    if meta.uid() != mine.uid() {
        return Err(std::io::Error::other(format!(
            "owned by uid {}, not by this user",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "mode {mode:o} lets others in (cached code runs as native code; use mode 700)"
        )));
    }
    Ok(())
}

/// The most input `run` reads (from --input-file or stdin). The input is held in
/// memory, digested, and handed to the tool whole; 64 MiB is far past a tool call's
/// arguments, and stops an endless file or pipe from taking the host's memory.
const MAX_INPUT: aegis_files::Cap = aegis_files::Cap::new(64 << 20, "a tool's input");

fn read_input(a: &RunArgs) -> Result<Vec<u8>, String> {
    if let Some(s) = &a.input {
        return Ok(s.as_bytes().to_vec());
    }
    if let Some(p) = &a.input_file {
        // Never through a final link, never a FIFO or a device (aegis_files).
        return aegis_files::read(p, MAX_INPUT).map_err(|e| e.to_string());
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(Vec::new());
    }
    let mut bytes = Vec::new();
    stdin
        .take(MAX_INPUT.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("stdin: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT.bytes {
        return Err(format!(
            "stdin: larger than {} MiB, the most aegis reads of {}",
            MAX_INPUT.bytes >> 20,
            MAX_INPUT.what
        ));
    }
    Ok(bytes)
}

pub fn run(profile_name: &str, a: &RunArgs) -> Result<u8, CliError> {
    if let Some(id) = &a.approval
        && !aegis_approvals::is_approval_id(id)
    {
        return Err(CliError::Usage(format!(
            "--approval {}: not an approval id (apr- and 32 lowercase hex digits, as run printed it)",
            escape(id)
        )));
    }
    // The tool may write (and read) beneath its roots: a file the host trusts or writes
    // must not be there (an allow rule appended to the policy, a key read and used).
    let reach = crate::confine::Reach::of_grant(&crate::confine::GrantArgs {
        read: a.allow_read.clone(),
        write: a.allow_write.clone(),
        ..Default::default()
    });
    let host_files = crate::confine::host_files(Some(&a.host.flags_only()), None, []);
    crate::confine::refuse_granted(&reach, &host_files)?;
    let input = read_input(a).map_err(CliError::Unreadable)?;
    let limits = Limits {
        max_memory_bytes: a.max_memory.unwrap_or(DEFAULT_LIMITS.max_memory_bytes),
        max_wall_ms: a.max_wall_ms.unwrap_or(DEFAULT_LIMITS.max_wall_ms),
        max_output_bytes: a.max_output.unwrap_or(DEFAULT_LIMITS.max_output_bytes),
    };
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolManifest {
            id: a.id.clone(),
            kind: ToolKind::Wasm {
                component: a.component.clone(),
            },
            fs_read: a.allow_read.clone(),
            fs_write: a.allow_write.clone(),
            net: Vec::new(),
            limits,
        })
        .map_err(|e| CliError::Unreadable(e.to_string()))?;
    let profile = crate::use_profile(profile_name)?;
    let settings = a.host.with_profile(&profile)?;
    settings.show();
    // The profile's own files, now that it is known, and the directories a later
    // command loads profiles and plugins from. (The component may be beneath the
    // tool's roots: one it rewrites runs with the same grants next time.)
    let host_files = crate::confine::host_files(
        Some(&settings),
        Some(&profile),
        crate::confine::searched_host_files(),
    );
    crate::confine::refuse_granted(&reach, &host_files)?;
    let builder = settings.apply(
        Host::builder(profile)
            .tool_registry(tools)
            .front(aegis_runtime::whereabouts::front("run")),
    )?;
    // One call per process: reserving an instance pool (about 3-4 ms) would cost more
    // than it saves (benches/results/sandbox.md).
    let builder = builder.sandbox_options(Options {
        cache_dir: cache_dir(&reach)?,
        concurrent_calls: None,
    });
    // From here on a signal stops the tool and lets the record end whole.
    let interrupts = crate::interrupt::Interrupts::install()
        .map_err(|e| CliError::Refused(format!("signal handlers could not be installed: {e}")))?;
    let host = crate::open_host(builder, settings.no_wait, &interrupts)?;
    let roots = |dirs: &[PathBuf]| {
        if dirs.is_empty() {
            "nothing".to_owned()
        } else {
            // The tool sees a root at its canonical path, not as the flag spelled it.
            dirs.iter()
                .map(|d| {
                    let given = escape(&d.display().to_string()).into_owned();
                    match std::fs::canonicalize(d) {
                        Ok(seen) if seen != *d => format!(
                            "{given} (the tool sees {})",
                            escape(&seen.display().to_string())
                        ),
                        _ => given,
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    crate::detail(format_args!(
        "aegis: {} may read {}, and write {}",
        escape(&a.id),
        roots(&a.allow_read),
        roots(&a.allow_write)
    ));
    let args: Vec<&str> = a.args.iter().map(String::as_str).collect();
    // A tool given a JSON object on stdin is given arguments: the policy may read them.
    let arguments = json_object_arguments(&input);
    let desk = settings.desk(aegis_approvals::Front::Run, host.notice().location())?;
    let approval = match &a.approval {
        None => None,
        Some(id) => match settle(&desk, &host, id) {
            Ok(approval) => Some(approval),
            Err(exit_code) => {
                let closed = host.close();
                closed.map_err(|e| {
                    CliError::RecordFailed(format!(
                        "the session's close line could not be written: {e}"
                    ))
                })?;
                return exit_code;
            }
        },
    };
    let request = CallRequest {
        args: &args,
        arguments: arguments.as_deref(),
        capability: a.capability.as_deref(),
        role: settings.role(),
        cancel: Some(interrupts.token()),
        approval: approval.as_ref(),
        ..CallRequest::new(&a.id, &input)
    };
    let result = host.call(&request);
    // A park is filed for a person to decide, before the session closes.
    let filed = match &result {
        Ok(record) if record.park().is_some() => Some(
            desk.file(host.pipeline(), record, arguments.as_deref())
                .map(|ticket| ticket.approval_id)
                .map_err(|e| e.to_string()),
        ),
        _ => None,
    };
    let notice = host.notice().to_string();
    // Close the session so the record ends anchored. No call is open: `call` finished it.
    let closed = host.close();
    let record = result.map_err(|e| CliError::RecordFailed(e.to_string()))?;
    let next = filed.map(|filed| next_step(filed.as_deref().map_err(String::as_str)));
    if a.json {
        show_json(&a.id, &record, next.as_deref());
        crate::say(format_args!("aegis: {}", escape(&describe(&record))));
        crate::note(format_args!("aegis: {notice}"));
    } else {
        show(&a.id, &record, &notice, next.as_deref());
    }
    closed.map_err(|e| {
        CliError::RecordFailed(format!(
            "the session's close line could not be written: {e}"
        ))
    })?;
    Ok(interrupts
        .exit_code()
        .unwrap_or_else(|| code(record.class())))
}

/// Hands the output to stdout and tells the operator, on stderr, what happened.
///
/// Everything the tool chose is escaped before it reaches a terminal: its stderr and
/// any message in the verdict always, its output when stdout is a terminal (a pipe or
/// a file gets the exact bytes). So a tool can neither forge the verdict line with a
/// carriage return nor hide it behind an escape sequence.
fn show(tool_id: &str, record: &CallRecord, notice: &str, next: Option<&str>) {
    use aegis_record::text::escape_keeping_lines;
    use std::io::IsTerminal as _;
    let stdout_is_terminal = std::io::stdout().is_terminal();
    if let Some(output) = &record.output {
        if stdout_is_terminal {
            let text = String::from_utf8_lossy(output);
            let _ = crate::print(escape_keeping_lines(&text).as_bytes());
            // The verdict starts on a line of its own, even after output without a
            // final newline.
            if !output.is_empty() && !output.ends_with(b"\n") && std::io::stderr().is_terminal() {
                crate::say("");
            }
        } else {
            let _ = crate::print(output);
        }
    }
    let tool = escape(tool_id);
    for line in String::from_utf8_lossy(&record.stderr).lines() {
        crate::say(format_args!("{tool}: {}", escape(line)));
    }
    crate::say(format_args!("aegis: {}", escape(&describe(record))));
    if let Some(next) = next {
        crate::say(format_args!("aegis: {next}"));
    }
    crate::note(format_args!("aegis: {notice}"));
}

/// What a parked call's operator is told to do next: how to approve it and run it, or
/// why it could not be filed.
fn next_step(filed: Result<&str, &str>) -> String {
    match filed {
        Ok(id) => format!(
            "filed for approval as {id}: a person approves it with `aegis approvals approve {id} --approver-key KEY` (or denies it), then run this same command again with --approval {id}"
        ),
        Err(e) => format!(
            "the park could not be filed in the approvals queue ({e}), so nobody can approve it; it was not run"
        ),
    }
}

/// Settles the park `id` for `run --approval`: its decision claimed, judged and
/// recorded on this session. `Err` is the exit to take instead of running anything.
fn settle(
    desk: &aegis_runtime::approvals::Desk,
    host: &Host,
    id: &str,
) -> Result<aegis_runtime::pipeline::Approval, Result<u8, CliError>> {
    use aegis_record::refusal::Cause;
    use aegis_runtime::approvals::DeskError;
    match desk.take(host.pipeline(), id) {
        Ok(Ok(approval)) => {
            crate::note(format_args!(
                "aegis: approval {id} claimed; running the call it approved"
            ));
            Ok(approval)
        }
        Ok(Err(refusal)) => {
            crate::say(format_args!("aegis: {}", escape(&refusal.reason)));
            Err(Ok(match refusal.cause {
                Cause::ApprovalExpired => exit::APPROVAL_EXPIRED,
                Cause::NotRecorded => exit::RECORD_FAILED,
                _ => exit::POLICY_DENIED,
            }))
        }
        Err(DeskError::NotDecided(_)) => {
            crate::say(format_args!(
                "aegis: approval {id} is not decided yet (aegis approvals show {id}); nothing was run"
            ));
            Err(Ok(exit::PENDING_APPROVAL))
        }
        Err(e @ DeskError::AlreadyUsed(_)) => Err(Err(CliError::Settled(format!(
            "{e}: an approval runs its call once; nothing was run"
        )))),
        Err(e) => Err(Err(CliError::Unreadable(format!(
            "approval {id}: {e}; nothing was run"
        )))),
    }
}

/// `run --json`: one object on stdout for the whole call. The output is a string when
/// it is UTF-8, else `output_hex`; nothing the tool wrote reaches stdout raw.
fn show_json(tool_id: &str, record: &CallRecord, next: Option<&str>) {
    use aegis_record::json::Object;
    let class = record.class();
    let mut o = Object::new();
    o.insert("tool", tool_id);
    o.insert("call_id", record.outcome.call_id.to_string());
    if let Ok(seq) = aegis_record::json::SafeInt::try_from(record.seq) {
        o.insert("seq", seq);
    }
    o.insert("class", class_name(class));
    o.insert("exit_code", u32::from(code(class)));
    o.insert("verdict", verdict(record));
    if let Some(park) = record.park() {
        o.insert("approval_id", park.approval_id);
    }
    o.insert_opt("next", next);
    if let Some(output) = &record.output {
        match std::str::from_utf8(output) {
            Ok(text) => o.insert("output", text),
            Err(_) => o.insert("output_hex", aegis_record::digest::encode_hex(output)),
        };
    }
    o.insert(
        "stderr",
        String::from_utf8_lossy(&record.stderr).into_owned(),
    );
    let mut line = o.to_canonical();
    line.push(b'\n');
    let _ = crate::print(&line);
}

/// A class as `run --json` names it.
fn class_name(class: CallClass) -> &'static str {
    match class {
        CallClass::Success => "success",
        CallClass::PolicyDenied => "policy_denied",
        CallClass::RateLimited => "rate_limited",
        CallClass::PendingApproval => "pending_approval",
        CallClass::CapabilityDenied => "capability_denied",
        CallClass::Trap => "trap",
        CallClass::ResourceExceeded => "resource_exceeded",
        CallClass::HostDenied => "host_denied",
    }
}

/// The exit code of each ending; documented in `aegis run --help`.
pub fn code(class: CallClass) -> u8 {
    match class {
        CallClass::Success => exit::OK,
        CallClass::PolicyDenied => exit::POLICY_DENIED,
        CallClass::RateLimited => exit::RATE_LIMITED,
        CallClass::PendingApproval => exit::PENDING_APPROVAL,
        CallClass::CapabilityDenied => exit::CAPABILITY_DENIED,
        CallClass::Trap => exit::TRAP,
        CallClass::ResourceExceeded => exit::RESOURCE_EXCEEDED,
        CallClass::HostDenied => exit::HOST_DENIED,
    }
}

/// One line: what each station decided, and the call's place on the record.
pub fn describe(record: &CallRecord) -> String {
    let o = &record.outcome;
    format!(
        "{} [{} · outcome seq {}]",
        verdict(record),
        o.call_id,
        record.seq
    )
}

/// What each station decided, in words: [`describe`] without the call's place. A call
/// that did not succeed says what the one refusal type says of it
/// ([`aegis_runtime::refusal::refusal_of`]), as `wrap` and `gateway` do.
pub fn verdict(record: &CallRecord) -> String {
    let o = &record.outcome;
    if record.station_refusal().is_none() && matches!(o.execution, ExecutionOutcome::Success) {
        return format!(
            "success: {} bytes out in {} ms",
            record.output.as_ref().map_or(0, Vec::len),
            o.wall_ms.map_or(0, |w| w.get())
        );
    }
    let reason = aegis_runtime::refusal::refusal_of(record).reason;
    let flag = match &o.execution {
        ExecutionOutcome::ResourceExceeded { kind } => match kind.as_str() {
            "memory" => "--max-memory",
            "wall_time" => "--max-wall-ms",
            "output" => "--max-output",
            _ => return reason,
        },
        _ => return reason,
    };
    format!("{reason}; raise it with {flag}, unless a policy rule's limits hold it lower")
}

/// The arguments `input` states: input that opens as a JSON object (its first byte
/// past whitespace is `{`) is the tool's arguments, given to the policy as RFC 8785
/// canonical JSON. Text that opens so but does not read one way only (a key twice, keys
/// that fold together, `NaN`) is passed as it is, and the pipeline refuses the call on
/// the record: the tool would read what the policy did not. Other input states no
/// arguments (`None`), so argument rules treat them as unknown.
fn json_object_arguments(input: &[u8]) -> Option<String> {
    if input.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    Some(
        aegis_policy_arguments::unambiguous::canonical_object(input)
            .unwrap_or_else(|_| String::from_utf8_lossy(input).into_owned()),
    )
}
