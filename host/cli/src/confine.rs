//! `aegis confine`: run one native command under the confinement backend, without MCP,
//! and show what was enforced.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use aegis_record::json::Value;
use aegis_runtime::confine::{self, ConfineError, Plan};

use crate::exit;

/// Flags of `aegis confine`.
#[derive(clap::Args)]
#[command(after_help = "\
EXAMPLES:
    aegis confine --allow-read ~/notes -- python3 summarize.py ~/notes
    aegis confine --allow-write /tmp/out --report - -- ./tool
    aegis confine --allow-net api.example.com:443 -- node client.js

EXIT STATUS:
    the command's own status when it ran (128 + N when killed by signal N; SIGSYS means
    seccomp killed it), 1 usage error, 125 the confinement could not be enforced (nothing
    was started), 127 the command could not be found or executed.")]
pub struct ConfineArgs {
    /// Allow reading files and listing directories beneath PATH (repeatable).
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Allow reading, writing, creating and removing beneath PATH (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Allow TCP connections to HOST:PORT (repeatable). Landlock enforces the port
    /// only: the port is reachable on every host.
    #[arg(long = "allow-net", value_name = "HOST:PORT")]
    net: Vec<String>,
    /// Run with whatever the kernel can enforce instead of refusing; the gaps are
    /// printed (and recorded where there is a record).
    #[arg(long)]
    best_effort: bool,
    /// The confinement backend plugin.
    #[arg(
        long,
        value_name = "PLUGIN",
        default_value = "builtin:confine-landlock"
    )]
    backend: String,
    /// Write the enforcement report (one JSON object) to FILE, or `-` for stderr.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

fn absolute(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    paths
        .iter()
        .map(|p| std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display())))
        .collect()
}

/// Runs `aegis confine`.
pub fn confine(args: &ConfineArgs) -> ExitCode {
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => return usage("no command given"),
    };
    let program = match confine::resolve_program(program) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(confine::EXIT_EXEC);
        }
    };
    let (read, write) = match (absolute(&args.read), absolute(&args.write)) {
        (Ok(r), Ok(w)) => (r, w),
        (Err(e), _) | (_, Err(e)) => return usage(&e),
    };
    let (mut support_read, exec, mut support_write) = confine::exec_support(&program);
    support_read.extend(read);
    support_write.extend(write);
    let plan = Plan {
        backend: args.backend.clone(),
        config: String::new(),
        best_effort: args.best_effort,
        read: support_read,
        exec,
        write: support_write,
        connect: args.net.clone(),
    };
    let helper = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find the aegis binary to start the confinement helper: {e}");
            return ExitCode::from(confine::EXIT_REFUSED);
        }
    };
    let (mut child, report) = match confine::spawn(&helper, &plan, &program, rest, |_| {}) {
        Ok(started) => started,
        Err(e @ ConfineError::Exec(_)) => {
            eprintln!("error: {e}");
            return ExitCode::from(confine::EXIT_EXEC);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(confine::EXIT_REFUSED);
        }
    };
    let seccomp = report
        .details
        .get("seccomp")
        .and_then(Value::as_object)
        .and_then(|s| s.get("sha256"))
        .and_then(Value::as_str)
        .map_or(String::new(), |h| {
            format!(", seccomp {}", &h[..h.len().min(12)])
        });
    eprintln!(
        "aegis: confined by {} ({} enforcement, ABI {}{seccomp})",
        args.backend, report.enforcement, report.abi
    );
    for gap in &report.gaps {
        eprintln!("aegis: not enforced: {gap}");
    }
    if let Some(to) = &args.report {
        let mut text = Value::Object(report.to_object()).to_canonical();
        text.push(b'\n');
        let written = if to.as_os_str() == "-" {
            std::io::Write::write_all(&mut std::io::stderr(), &text)
        } else {
            std::fs::write(to, &text)
        };
        if let Err(e) = written {
            eprintln!("error: --report {}: {e}", to.display());
        }
    }
    match child.wait() {
        Ok(status) => ExitCode::from(status_code(status)),
        Err(e) => {
            eprintln!("error: waiting for the command: {e}");
            ExitCode::from(exit::UNREADABLE)
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal.
fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(u8::MAX);
    }
    let signal = status.signal().unwrap_or(0);
    if signal == 31 {
        eprintln!("aegis: the command was killed by seccomp (SIGSYS)");
    } else {
        eprintln!("aegis: the command was killed by signal {signal}");
    }
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

fn usage(what: &str) -> ExitCode {
    eprintln!("error: {what}");
    ExitCode::from(exit::TAMPERED_OR_USAGE)
}
