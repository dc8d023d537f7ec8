//! `aegis confine`: run one native command under the confinement backend, without MCP,
//! and show what was enforced.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use aegis_record::json::Value;
use aegis_runtime::Profile;
use aegis_runtime::confine::{self, ConfineError, Confined, Grants, Plan};
use aegis_runtime::operator::{Setting, Source};

use crate::CliError;

/// What the operator grants a confined program (`confine`, and `wrap` under a profile
/// that confines).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct GrantArgs {
    /// Allow reading files and listing directories beneath PATH (repeatable; replaces
    /// the profile's `[operator]` allow_read).
    #[arg(long = "allow-read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Allow executing, and reading, files beneath PATH, a file or a directory
    /// (repeatable; replaces the profile's `[operator]` allow_exec): what `npx`, `uvx` or
    /// an interpreter shim runs from outside `/usr`.
    #[arg(long = "allow-exec", value_name = "PATH")]
    pub exec: Vec<PathBuf>,
    /// Allow reading, writing, creating and removing beneath PATH (repeatable; replaces
    /// the profile's `[operator]` allow_write).
    #[arg(long = "allow-write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Allow TCP connections to HOST:PORT (repeatable; replaces the profile's
    /// `[operator]` allow_net). Landlock enforces the port only: the port is reachable
    /// on every host.
    #[arg(long = "allow-net", value_name = "HOST:PORT")]
    pub net: Vec<String>,
    /// Run with whatever the kernel can enforce instead of refusing; the gaps are
    /// printed and recorded.
    #[arg(long)]
    pub best_effort: bool,
    /// Where each list came from: the flags, unless [`GrantArgs::with_profile`] took
    /// the profile's.
    #[arg(skip)]
    pub from: GrantFrom,
}

/// Where each of a grant's lists came from.
#[derive(Clone, Debug)]
pub struct GrantFrom {
    /// `--allow-read` or `operator.allow_read`.
    pub read: Source,
    /// `--allow-exec` or `operator.allow_exec`.
    pub exec: Source,
    /// `--allow-write` or `operator.allow_write`.
    pub write: Source,
    /// `--allow-net` or `operator.allow_net`.
    pub net: Source,
}

impl Default for GrantFrom {
    fn default() -> GrantFrom {
        GrantFrom {
            read: Source::Flag("--allow-read"),
            exec: Source::Flag("--allow-exec"),
            write: Source::Flag("--allow-write"),
            net: Source::Flag("--allow-net"),
        }
    }
}

impl GrantArgs {
    /// The flags over `profile`'s `[operator]` grants: for each list, the flags' when
    /// any was given (they replace the profile's whole list), else the profile's.
    /// `--best-effort` is a flag only (the profile's level is `[sandbox]`'s).
    pub fn with_profile(&self, profile: &Profile) -> GrantArgs {
        fn pick<T: Clone>(
            profile: &Profile,
            flags: &[T],
            setting: Option<&Setting<Vec<T>>>,
            flag: &Source,
        ) -> (Vec<T>, Source) {
            match setting {
                Some(s) if flags.is_empty() => (s.value.clone(), profile.source_of(s)),
                _ => (flags.to_vec(), flag.clone()),
            }
        }
        let o = &profile.operator;
        let (read, read_from) = pick(profile, &self.read, o.allow_read.as_ref(), &self.from.read);
        let (exec, exec_from) = pick(profile, &self.exec, o.allow_exec.as_ref(), &self.from.exec);
        let (write, write_from) = pick(
            profile,
            &self.write,
            o.allow_write.as_ref(),
            &self.from.write,
        );
        let (net, net_from) = pick(profile, &self.net, o.allow_net.as_ref(), &self.from.net);
        GrantArgs {
            read,
            exec,
            write,
            net,
            best_effort: self.best_effort,
            from: GrantFrom {
                read: read_from,
                exec: exec_from,
                write: write_from,
                net: net_from,
            },
        }
    }

    /// With -v, each list the profile gave, and where.
    pub fn show(&self) {
        let paths =
            |v: &[PathBuf]| -> Vec<String> { v.iter().map(|p| p.display().to_string()).collect() };
        let lists = [
            ("allow_read", paths(&self.read), &self.from.read),
            ("allow_exec", paths(&self.exec), &self.from.exec),
            ("allow_write", paths(&self.write), &self.from.write),
            ("allow_net", self.net.clone(), &self.from.net),
        ];
        for (key, items, from) in lists {
            if items.is_empty() && !from.is_profile() {
                continue;
            }
            let items: Vec<String> = items
                .iter()
                .map(|i| aegis_runtime::operator::quoted(i))
                .collect();
            crate::settings::show_one(key, &format!("[{}]", items.join(", ")), from);
        }
    }

    pub fn grants(&self) -> Grants {
        Grants {
            read: self.read.clone(),
            exec: self.exec.clone(),
            write: self.write.clone(),
            connect: self.net.clone(),
            best_effort: self.best_effort,
        }
    }
}

/// A file the host reads or writes for the operator while an untrusted program runs.
pub struct HostFile {
    /// What names it, for the message: `--write-pins`, `profile`, `audit.config.path`.
    pub what: String,
    /// The path as given.
    pub path: PathBuf,
    /// A secret (the signing key, a bearer token): refused where the program can read,
    /// not only where it can write.
    pub secret: bool,
    /// The host's own program: refused beneath an `--allow-exec` grant.
    pub program: bool,
}

impl HostFile {
    /// A file the host trusts or writes.
    pub fn new(what: impl Into<String>, path: &Path) -> HostFile {
        HostFile {
            what: what.into(),
            path: path.to_owned(),
            secret: false,
            program: false,
        }
    }

    /// A program of the host's own, which a confined program is not granted to run
    /// (see [`Reach::holding`]).
    pub fn program(what: impl Into<String>, path: &Path) -> HostFile {
        HostFile {
            program: true,
            ..HostFile::new(what, path)
        }
    }

    /// A file whose reading alone gives the host away.
    pub fn secret(what: impl Into<String>, path: &Path) -> HostFile {
        HostFile {
            secret: true,
            ..HostFile::new(what, path)
        }
    }
}

/// The host's own files for a command: the shared flags (`--policy`, `--audit`,
/// `--signing-key`, the key a secret), the files `profile` makes the host load (the
/// profile, plugin libraries, station config paths), then `more`. What
/// [`refuse_granted`] checks.
pub fn host_files(
    host: Option<&crate::settings::HostSettings>,
    profile: Option<&Profile>,
    more: impl IntoIterator<Item = HostFile>,
) -> Vec<HostFile> {
    let mut files: Vec<HostFile> = more.into_iter().collect();
    // The program that decides: this binary, and the helper it would start to confine
    // a program (whether or not it is there yet: a program could put one there).
    if let Ok(me) = std::env::current_exe() {
        files.push(HostFile::program("the aegis binary", &me));
        files.push(HostFile::program(
            "the confinement helper",
            &me.with_file_name("aegis-confine-helper"),
        ));
    }
    if let Some(host) = host {
        files.extend(host.policy.as_deref().map(|p| HostFile::new("--policy", p)));
        files.extend(
            host.audit
                .as_ref()
                .map(|a| HostFile::new(a.source.name(), &a.value)),
        );
        files.extend(
            host.signing_key
                .as_ref()
                .map(|k| HostFile::secret(k.source.name(), &k.value)),
        );
        // A tool that could write in the approvals queue, or replace an approver's key
        // file, could approve the calls the policy parks for a person.
        let queue = match &host.approvals_dir {
            Some(dir) => Some(dir.value.clone()),
            None => aegis_approvals::Queue::default_dir().ok(),
        };
        files.extend(queue.map(|q| HostFile::new("the approvals queue", &q)));
        if let Some(approvers) = &host.approvers {
            files.extend(
                approvers
                    .value
                    .iter()
                    .map(|k| HostFile::new(approvers.source.name(), k)),
            );
        }
    }
    if let Some(profile) = profile {
        // A station a flag replaces loads nothing of the profile's.
        let replaced = |what: &str| {
            host.is_some_and(|h| {
                (what.starts_with("policy.") && h.policy.is_some())
                    || (what.starts_with("audit.") && h.audit.is_some())
            })
        };
        let registry = aegis_runtime::Registry::new();
        files.extend(
            profile
                .files(&registry)
                .into_iter()
                .filter(|(what, _)| !replaced(what))
                .map(|(what, path)| HostFile::new(what, &path)),
        );
        // The key the profile names is the operator's whichever command runs (one that
        // signs nothing too: `confine`, `pins`): a grant over it would let the program
        // read it. Found missing from `pins` by a review; now every caller gets it here.
        files.extend(
            profile
                .operator
                .signing_key
                .as_ref()
                .map(|k| HostFile::secret(profile.source_of(k).name(), &k.value)),
        );
    }
    files
}

/// What an untrusted program may reach: directories it may write beneath, (for
/// secrets) read beneath and (for the host's programs) execute beneath by the
/// operator's `--allow-exec`, each with the words that name where the grant came from.
#[derive(Default)]
pub struct Reach {
    write: Vec<(PathBuf, String)>,
    read: Vec<(PathBuf, String)>,
    exec: Vec<(PathBuf, String)>,
}

impl Reach {
    /// What `grant` gives, as the operator wrote it (each path named by its flag or
    /// profile line).
    pub fn of_grant(grant: &GrantArgs) -> Reach {
        let named = |paths: &[PathBuf], from: &Source| {
            paths
                .iter()
                .map(|p| (p.clone(), from.naming(&shown(p))))
                .collect()
        };
        let exec: Vec<(PathBuf, String)> = named(&grant.exec, &grant.from.exec);
        let mut read: Vec<(PathBuf, String)> = named(&grant.read, &grant.from.read);
        // Execute implies read.
        read.extend(exec.iter().cloned());
        Reach {
            write: named(&grant.write, &grant.from.write),
            read,
            exec,
        }
    }

    /// What a confined program started by `plan` gets: the operator's grants and the
    /// exec-support set (its interpreter's prefix, the library directories), which it
    /// may read too.
    pub fn of_plan(plan: &Plan, grant: &GrantArgs) -> Reach {
        let granted = Reach::of_grant(grant);
        let mut reach = Reach::default();
        let name = |p: &Path, from: &[(PathBuf, String)]| -> String {
            from.iter()
                .find(|(g, _)| std::path::absolute(g).is_ok_and(|g| g == p))
                .map_or_else(
                    || format!("the program's exec-support directory {}", shown(p)),
                    |(_, n)| n.clone(),
                )
        };
        for p in &plan.write {
            reach.write.push((p.clone(), name(p, &granted.write)));
        }
        for p in plan.read.iter().chain(&plan.exec) {
            reach.read.push((p.clone(), name(p, &granted.read)));
        }
        // Only the operator's exec grants: the exec-support set holds `/usr`, where the
        // aegis binary itself is usually installed, and running it confined gives the
        // program nothing the kernel does not still confine.
        for p in &plan.exec {
            if let Some((_, named)) = granted
                .exec
                .iter()
                .find(|(g, _)| std::path::absolute(g).is_ok_and(|g| g == *p))
            {
                reach.exec.push((p.clone(), named.clone()));
            }
        }
        reach
    }

    /// Adds a directory the program may write beneath (and so read).
    pub fn write(&mut self, dir: &Path, named: String) {
        self.write.push((dir.to_owned(), named));
    }

    /// Adds a directory the program may read beneath.
    pub fn read(&mut self, dir: &Path, named: String) {
        self.read.push((dir.to_owned(), named));
    }

    /// Where `path` is writable, else (for a secret) readable, else (for a host
    /// program) executable by the operator's grant: the grant's words. One
    /// [`aegis_files::inside`] walk per list, its answer mapped back to its words.
    ///
    /// A host program is kept out of `--allow-exec`: run from inside, the aegis binary
    /// would load the operator's profiles and plugins and could write records and pins
    /// in the operator's name, still confined but acting as the host that judges it.
    fn holding(&self, path: &Path, secret: bool, program: bool) -> Option<&str> {
        fn beneath<'r>(list: &'r [(PathBuf, String)], path: &Path) -> Option<&'r str> {
            let dirs: Vec<PathBuf> = list.iter().map(|(d, _)| d.clone()).collect();
            let found = aegis_files::inside(path, &dirs)?;
            list.iter()
                .zip(&dirs)
                .find(|(_, d)| d.as_path() == found)
                .map(|((_, named), _)| named.as_str())
        }
        beneath(&self.write, path)
            .or_else(|| secret.then(|| beneath(&self.read, path)).flatten())
            .or_else(|| program.then(|| beneath(&self.exec, path)).flatten())
    }

    /// Whether the program is granted no directory at all.
    pub fn is_empty(&self) -> bool {
        self.write.is_empty() && self.read.is_empty()
    }

    /// Whether the program may write beneath `dir` (the grant's words, when it may).
    pub fn writes_at(&self, dir: &Path) -> Option<&str> {
        self.holding(dir, false, false)
    }
}

/// Whether the file at `path` (not followed) has more than one name.
fn other_names(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.nlink() > 1)
}

fn shown(p: &Path) -> std::borrow::Cow<'_, str> {
    // The escape makes a path with control characters one printable line.
    std::borrow::Cow::Owned(aegis_record::text::escape(&p.display().to_string()).into_owned())
}

/// Refuses, after one line saying why, a host file beneath a directory an untrusted
/// program may write: it could put a link or a FIFO in its place (the host would write
/// through the one and wait forever on the other), or rewrite what the host trusts
/// (pins, a policy, a profile, a plugin) before the next session; a secret is refused
/// where the program may read as well, since a program that reads the signing key can
/// sign a record of its own. `aegis_files` keeps the final name from being followed
/// wherever the file is; this refusal also covers the directories on the way, which no
/// open flag does.
///
/// # Errors
/// [`CliError::Usage`], naming the file and the grant.
pub fn refuse_granted(reach: &Reach, files: &[HostFile]) -> Result<(), CliError> {
    for f in files {
        // A secret with another name (a hard link) may be read through that name from
        // a granted directory; names cannot be listed cheaply, so any second name is
        // refused while the program is granted anything.
        if f.secret && !reach.is_empty() && other_names(&f.path) {
            return Err(CliError::Usage(format!(
                "{} {} has another name (a hard link), which the program could read it by; keep a single name",
                f.what,
                shown(&f.path),
            )));
        }
        if let Some(named) = reach.holding(&f.path, f.secret, f.program) {
            let why = if f.secret {
                "where the program could read it and act as this host"
            } else if f.program && reach.writes_at(&f.path).is_none() {
                "where the program could run it and act as this host"
            } else {
                "where the program could replace it (with a link, a FIFO or content of its own)"
            };
            return Err(CliError::Usage(format!(
                "{} {} is beneath {named}, {why}; keep it outside what the program is granted",
                f.what,
                shown(&f.path),
            )));
        }
    }
    Ok(())
}

/// Warns, one line each, about directories the host searches by name (profiles,
/// plugins) that a confined native program may write beneath: a profile or plugin
/// planted there is what a later command picks up. A warning, not a refusal, for `wrap`
/// and `confine`: a native program granted a home directory can already plant what the
/// user's shell runs. A WASM tool's roots are held stricter ([`searched_host_files`]).
pub fn warn_granted(reach: &Reach, dirs: &[(&str, PathBuf)]) {
    for (what, dir) in dirs {
        if let Some(named) = reach.writes_at(dir) {
            crate::say(format_args!(
                "warning: the {what} {} is beneath {named}: the program can plant files a later aegis command loads from there",
                shown(dir)
            ));
        }
    }
}

/// Warns, one line each, where an `--allow-exec` grant and an `--allow-write` grant
/// overlap: the program can run there whatever it writes there. A warning, not a
/// refusal: `npx` and `uvx` write the packages they fetch into their cache and run them
/// from it, so refusing would leave them unusable confined; and a program granted any
/// interpreter can already run what it writes, as a script. What it runs stays under
/// the same Landlock domain and seccomp filter; only the choice of executable widens.
pub fn warn_write_exec(grant: &GrantArgs) {
    // The grants as they resolve, so a symlink or `..` cannot hide an overlap.
    let real = |p: &Path| std::fs::canonicalize(p).or_else(|_| std::path::absolute(p));
    for e in &grant.exec {
        let Ok(exec) = real(e) else { continue };
        for w in &grant.write {
            let Ok(write) = real(w) else { continue };
            if exec.starts_with(&write) || write.starts_with(&exec) {
                crate::say(format_args!(
                    "warning: {} overlaps {}: the program can run anything it writes there",
                    grant.from.exec.naming(&shown(e)),
                    grant.from.write.naming(&shown(w))
                ));
            }
        }
    }
}

/// The directories a later command loads from without naming a file: profiles and
/// plugins found by name, and the compilation cache (native code), for
/// [`warn_granted`].
pub fn searched_dirs() -> Vec<(&'static str, PathBuf)> {
    let profiles = aegis_runtime::profile::search_path()
        .into_iter()
        .map(|d| ("profile directory", d));
    let plugins = aegis_runtime::Registry::new()
        .search_path()
        .to_vec()
        .into_iter()
        .map(|d| ("plugin directory", d));
    let cache = crate::run::cache_path()
        .into_iter()
        .map(|d| ("compilation cache", d));
    profiles.chain(plugins).chain(cache).collect()
}

/// The searched profile and plugin directories as host files, for `run` and `gateway`:
/// a WASM tool has no other way out of its sandbox than what the host loads later, so
/// a root over one of them is refused, as the compilation cache is
/// ([`crate::run::cache_dir`], which says so in its own words).
pub fn searched_host_files() -> impl Iterator<Item = HostFile> {
    searched_dirs()
        .into_iter()
        .filter(|(what, _)| *what != "compilation cache")
        .map(|(what, dir)| HostFile::new(format!("the {what}"), &dir))
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

/// Starts `command` confined as `profile` and `grant` say, with `configure` setting
/// its stdio; returns the helper waiting for its go, and prints what is enforced.
/// Before the helper is started, `host_files` are refused where the program could
/// replace them (or, for a secret, read them): its grants and its exec-support set,
/// as [`refuse_granted`] says; the directories later commands search get a warning.
pub fn start(
    profile: &Profile,
    grant: &GrantArgs,
    command: &[OsString],
    host_files: &[HostFile],
    configure: impl FnOnce(&mut std::process::Command),
) -> Result<Confined, CliError> {
    let Some((program, rest)) = command.split_first() else {
        return Err(CliError::Usage("no command given".to_owned()));
    };
    let program = confine::resolve_program(program).map_err(CliError::Confine)?;
    let plan = Plan::for_program(profile, &program, grant.grants()).map_err(CliError::Confine)?;
    let reach = Reach::of_plan(&plan, grant);
    refuse_granted(&reach, host_files)?;
    warn_granted(&reach, &searched_dirs());
    warn_write_exec(grant);
    let helper = helper_binary().map_err(|e| {
        CliError::Confine(ConfineError::Helper(format!(
            "cannot find the aegis binary to start: {e}"
        )))
    })?;
    let confined =
        confine::spawn(&helper, &plan, &program, rest, configure).map_err(CliError::Confine)?;
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
pub fn confine(profile_name: &str, args: &ConfineArgs) -> Result<u8, CliError> {
    let profile = crate::use_profile(profile_name)?;
    let report = args
        .report
        .as_deref()
        .filter(|r| r.as_os_str() != "-")
        .map(|r| HostFile::new("--report", r));
    // The profile's signing key is among the host files (see host_files).
    let host_files = host_files(None, Some(&profile), report);
    let grant = args.grant.with_profile(&profile);
    grant.show();
    let confined = start(&profile, &grant, &args.command, &host_files, |_| {})?;
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
        // A report that cannot be written is said, and the command runs all the same.
        if let Err(e) = written {
            crate::error(format_args!(
                "--report {}: {}",
                aegis_record::text::escape(&to.display().to_string()),
                aegis_record::text::escape(&e)
            ));
        }
    }
    let mut child = confined.start().map_err(CliError::Confine)?;
    let status = child
        .wait()
        .map_err(|e| CliError::Unreadable(format!("waiting for the command: {e}")))?;
    Ok(status_code(status))
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
