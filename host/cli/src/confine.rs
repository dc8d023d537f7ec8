//! `aegis confine`: run one native command under the confinement backend, without MCP,
//! and show what was enforced.

use std::ffi::OsString;
use std::path::PathBuf;

use aegis_record::json::Value;
use aegis_runtime::Profile;
use aegis_runtime::confine::{self, ConfineError, Confined, Grants, Plan};

use crate::exit;

/// What the operator grants a confined program (`confine`, and `wrap` under a profile
/// that confines).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct GrantArgs {
    /// Allow reading files and listing directories beneath PATH (repeatable).
    #[arg(long = "allow-read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Allow reading, writing, creating and removing beneath PATH (repeatable).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Allow TCP connections to HOST:PORT (repeatable). Landlock enforces the port
    /// only: the port is reachable on every host.
    #[arg(long = "allow-net", value_name = "HOST:PORT")]
    pub net: Vec<String>,
    /// Run with whatever the kernel can enforce instead of refusing; the gaps are
    /// printed and recorded.
    #[arg(long)]
    pub best_effort: bool,
}

impl GrantArgs {
    pub fn grants(&self) -> Grants {
        Grants {
            read: self.read.clone(),
            write: self.write.clone(),
            connect: self.net.clone(),
            best_effort: self.best_effort,
        }
    }
}

/// Flags of `aegis confine`.
#[derive(clap::Args)]
pub struct ConfineArgs {
    #[command(flatten)]
    grant: GrantArgs,
    /// Write the enforcement report (one JSON object) to FILE, or `-` for stderr.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// The helper to start: `aegis-confine-helper` beside this binary (small, so it starts
/// quickly), else this binary itself, whose `main` runs the same helper first.
fn helper_binary() -> std::io::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let small = me.with_file_name("aegis-confine-helper");
    Ok(if small.is_file() { small } else { me })
}

/// Says why a confined start failed and picks its exit code.
pub fn failed(e: &ConfineError) -> u8 {
    crate::error(aegis_record::text::escape(&e.to_string()));
    match e {
        ConfineError::Exec(_) => confine::EXIT_EXEC,
        _ => confine::EXIT_REFUSED,
    }
}

/// Starts `command` confined as `profile` and `grant` say, with `configure` setting
/// its stdio; returns the helper waiting for its go, and prints what is enforced.
pub fn start(
    profile: &Profile,
    grant: &GrantArgs,
    command: &[OsString],
    configure: impl FnOnce(&mut std::process::Command),
) -> Result<Confined, u8> {
    let Some((program, rest)) = command.split_first() else {
        crate::error("no command given");
        return Err(exit::TAMPERED_OR_USAGE);
    };
    let program = confine::resolve_program(program).map_err(|e| failed(&e))?;
    let plan = Plan::for_program(profile, &program, grant.grants()).map_err(|e| failed(&e))?;
    let helper = helper_binary().map_err(|e| {
        failed(&ConfineError::Helper(format!(
            "cannot find the aegis binary to start: {e}"
        )))
    })?;
    let confined =
        confine::spawn(&helper, &plan, &program, rest, configure).map_err(|e| failed(&e))?;
    let report = confined.report();
    let seccomp = report
        .details
        .get("seccomp")
        .and_then(Value::as_object)
        .and_then(|s| s.get("sha256"))
        .and_then(Value::as_str)
        .map_or(String::new(), |h| {
            format!(", seccomp {}", &h[..h.len().min(12)])
        });
    crate::say(format_args!(
        "aegis: confined by {} ({} enforcement, ABI {}{seccomp})",
        aegis_record::text::escape(&plan.backend),
        report.enforcement,
        report.abi
    ));
    for gap in &report.gaps {
        crate::say(format_args!(
            "aegis: not enforced: {}",
            aegis_record::text::escape(gap)
        ));
    }
    Ok(confined)
}

/// Runs `aegis confine`.
pub fn confine(profile_name: &str, args: &ConfineArgs) -> u8 {
    let profile = match Profile::find(profile_name) {
        Ok(p) => p,
        Err(e) => {
            crate::error(e);
            return exit::REFUSED;
        }
    };
    let confined = match start(&profile, &args.grant, &args.command, |_| {}) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(to) = &args.report {
        let mut text = Value::Object(confined.report().to_object()).to_canonical();
        text.push(b'\n');
        let written = if to.as_os_str() == "-" {
            std::io::Write::write_all(&mut std::io::stderr(), &text)
        } else {
            std::fs::write(to, &text)
        };
        if let Err(e) = written {
            crate::error(format_args!("--report {}: {e}", to.display()));
        }
    }
    let mut child = match confined.start() {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match child.wait() {
        Ok(status) => status_code(status),
        Err(e) => {
            crate::error(format_args!("waiting for the command: {e}"));
            exit::UNREADABLE
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal.
pub fn status_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(u8::MAX);
    }
    let signal = status.signal().unwrap_or(0);
    if signal == 31 {
        crate::say(
            "aegis: the command was killed by SIGSYS (the seccomp filter kills a foreign-architecture or x32 system call; a process can also raise SIGSYS itself)",
        );
    } else {
        crate::say(format_args!(
            "aegis: the command was killed by signal {signal}"
        ));
    }
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}
