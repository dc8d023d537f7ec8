//! `aegis confine`: run one native command under the confinement backend, without MCP,
//! and show what was enforced.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

/// A file the host reads or writes for the operator while a confined program runs.
pub struct HostFile<'a> {
    /// The flag that named it, for the message: `--write-pins`.
    pub flag: &'static str,
    /// The path as given.
    pub path: &'a Path,
    /// A secret (the signing key): refused beneath a read grant too.
    pub secret: bool,
}

/// The host's own files among the shared flags (`--policy`, `--audit`, `--signing-key`,
/// the key a secret), then `more`: what [`refuse_granted`] checks.
pub fn host_files<'a>(
    host: &'a crate::HostFlags,
    more: &[(&'static str, Option<&'a Path>)],
) -> Vec<HostFile<'a>> {
    more.iter()
        .map(|&(flag, path)| (flag, path, false))
        .chain([
            ("--policy", host.policy.as_deref(), false),
            ("--audit", host.audit.as_deref(), false),
            ("--signing-key", host.signing_key.as_deref(), true),
        ])
        .filter_map(|(flag, path, secret)| path.map(|path| HostFile { flag, path, secret }))
        .collect()
}

/// Refuses, after one line saying why, a host file beneath a directory the confined
/// program is granted: beneath a write grant the program could put a link or a FIFO in
/// its place (the host would write through the one and wait forever on the other), or
/// rewrite what the host trusts (pins, a policy) before the next session; a secret is
/// refused beneath a read grant as well, since a program that reads the signing key can
/// sign a record of its own. `aegis_files` keeps the final name from being followed
/// wherever the file is; this refusal also covers the directories on the way, which no
/// open flag does.
///
/// # Errors
/// The usage exit code.
pub fn refuse_granted(grant: &GrantArgs, files: &[HostFile<'_>]) -> Result<(), u8> {
    for f in files {
        let (found, how) = match aegis_files::inside(f.path, &grant.write) {
            Some(dir) => (Some(dir), "--allow-write"),
            None if f.secret => (aegis_files::inside(f.path, &grant.read), "--allow-read"),
            None => (None, ""),
        };
        if let Some(dir) = found {
            let why = if f.secret {
                "where the confined program could read it and sign records as this host"
            } else {
                "where the confined program could replace it (with a link, a FIFO or content of its own)"
            };
            crate::error(format_args!(
                "{} {} is beneath {how} {}, {why}; keep it outside what the program is granted",
                f.flag,
                aegis_record::text::escape(&f.path.display().to_string()),
                aegis_record::text::escape(&dir.display().to_string()),
            ));
            return Err(exit::TAMPERED_OR_USAGE);
        }
    }
    Ok(())
}

/// Flags of `aegis confine`.
#[derive(clap::Args)]
pub struct ConfineArgs {
    #[command(flatten)]
    grant: GrantArgs,
    /// Write the enforcement report (one JSON object) to FILE, or `-` for stderr. FILE is
    /// replaced atomically; a link, FIFO or device there is refused, and so is a FILE
    /// beneath an --allow-write directory.
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
    if let Some(report) = args.report.as_deref().filter(|r| r.as_os_str() != "-") {
        let report = HostFile {
            flag: "--report",
            path: report,
            secret: false,
        };
        if let Err(code) = refuse_granted(&args.grant, &[report]) {
            return code;
        }
    }
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
            std::io::Write::write_all(&mut std::io::stderr(), &text).map_err(|e| e.to_string())
        } else {
            // Never through a link, never blocking on a FIFO: a link planted by an earlier
            // run's command is refused, not followed (issue 29).
            aegis_files::write(to, &text).map_err(|e| e.into_io().to_string())
        };
        if let Err(e) = written {
            crate::error(format_args!(
                "--report {}: {}",
                aegis_record::text::escape(&to.display().to_string()),
                aegis_record::text::escape(&e)
            ));
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
