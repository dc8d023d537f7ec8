//! `aegis plugins list`, `aegis profiles list` and `aegis profiles show`.

use crate::CliError;
use aegis_record::json::{Object, Value};
use aegis_runtime::{Origin, Plugin, PluginChoice, Profile, ProfileSource, Registry};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn origin(p: &Plugin) -> String {
    match p.origin() {
        Origin::Builtin => "builtin".to_owned(),
        Origin::Library { path, sha256 } => {
            let hex = aegis_record::digest::encode_hex(&sha256[..8]);
            format!("{} (sha256 {hex}…)", path.display())
        }
    }
}

/// The name a profile's `plugin =` takes for `p`: `builtin:NAME` for a built-in; for
/// a library, the bare name when that name finds this very file on the plugin path,
/// else its absolute path.
fn reference(p: &Plugin, registry: &Registry) -> String {
    let path = match p.origin() {
        Origin::Builtin => return format!("builtin:{}", p.metadata().name),
        Origin::Library { path, .. } => path,
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
    let name = absolute
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".so"))
        .map(|n| n.strip_prefix("lib").unwrap_or(n).to_owned());
    if let Some(name) = name
        && first_on_path(registry, &name).is_some_and(|found| found == absolute)
    {
        return name;
    }
    absolute.display().to_string()
}

/// The file a bare plugin name resolves to, as [`Registry::resolve`] looks for it.
fn first_on_path(registry: &Registry, name: &str) -> Option<PathBuf> {
    registry
        .find(name)
        .map(|p| std::path::absolute(&p).unwrap_or(p))
}

fn row(p: &Plugin, registry: &Registry) -> String {
    let m = p.metadata();
    let reference = reference(p, registry);
    // A library may call itself something else than its file; say so, not hide it.
    let calls_itself = match p.origin() {
        Origin::Library { .. } if m.name != reference => format!(" (calls itself {})", m.name),
        _ => String::new(),
    };
    format!(
        "{:<24} {:<9} {:<4} {:<26} {}{calls_itself}\n",
        reference,
        m.version,
        m.api_major,
        m.kind_names().join(","),
        origin(p)
    )
}

fn plugin_json(p: &Plugin, registry: &Registry) -> Object {
    let m = p.metadata();
    let mut o = Object::new();
    o.insert("name", reference(p, registry));
    o.insert("plugin", m.name.as_str());
    o.insert("version", m.version.as_str());
    o.insert("api_major", m.api_major);
    o.insert(
        "kinds",
        m.kind_names()
            .into_iter()
            .map(Value::from)
            .collect::<Vec<Value>>(),
    );
    match p.origin() {
        Origin::Builtin => {
            o.insert("source", "builtin");
        }
        Origin::Library { path, sha256 } => {
            o.insert("source", path.display().to_string());
            o.insert("sha256", aegis_record::digest::encode_hex(sha256));
        }
    }
    o
}

fn json_line(o: &Object) -> String {
    let mut line = String::from_utf8_lossy(&o.to_canonical()).into_owned();
    line.push('\n');
    line
}

/// `aegis plugins list`. A --path that cannot be read is said as it is found and the
/// rest listed, so it ends as `Ok(exit::UNREADABLE)`, not as an error.
pub fn list(paths: &[PathBuf], json: bool) -> Result<u8, CliError> {
    let registry = Registry::new();
    let mut code = crate::exit::OK;
    // A directory that is not there is a typo more often than not: say so.
    for dir in paths {
        if let Err(e) = std::fs::read_dir(dir) {
            crate::error(format_args!("--path {}: {e}", dir.display()));
            code = crate::exit::UNREADABLE;
        }
    }
    let mut out = if json {
        String::new()
    } else {
        format!(
            "{:<24} {:<9} {:<4} {:<26} {}\n",
            "NAME", "VERSION", "API", "KINDS", "SOURCE"
        )
    };
    for p in registry.builtins() {
        if json {
            out.push_str(&json_line(&plugin_json(p, &registry)));
        } else {
            out.push_str(&row(p, &registry));
        }
    }
    let dirs = (!paths.is_empty()).then_some(paths);
    for (path, loaded) in registry.discover(dirs) {
        match loaded {
            Ok(p) if json => out.push_str(&json_line(&plugin_json(&p, &registry))),
            Ok(p) => out.push_str(&row(&p, &registry)),
            Err(e) if json => {
                let mut o = Object::new();
                o.insert("source", path.display().to_string());
                o.insert("refused", e.to_string());
                out.push_str(&json_line(&o));
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "{:<24} {:<9} {:<4} {:<26} refused: {e}",
                    "-", "-", "-", "-"
                );
            }
        }
    }
    if json {
        let _ = crate::print(out.as_bytes());
    } else {
        let _ = crate::print(shown(&out).as_bytes());
    }
    Ok(code)
}

/// The name `--profile` finds a listed profile by: its file's stem (`NAME.toml`), or an
/// embedded profile's name.
fn lookup_name(p: &Profile) -> String {
    match &p.source {
        ProfileSource::File(f) => f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        ProfileSource::Embedded => p.name.clone(),
    }
}

pub fn list_profiles() -> Result<u8, CliError> {
    let mut out = format!("{:<16} {:<40} {}\n", "NAME", "SOURCE", "DESCRIPTION");
    for p in Profile::list() {
        match p {
            Ok(p) => {
                let name = lookup_name(&p);
                // The file's own `name` is what the record's provenance says: show it
                // when it differs from the name --profile takes.
                let also = if p.name == name {
                    String::new()
                } else {
                    format!(" (name = {:?} inside)", p.name)
                };
                let _ = writeln!(
                    out,
                    "{:<16} {:<40} {}{also}",
                    name,
                    p.source.to_string(),
                    p.description
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{:<16} {:<40} refused: {e}", "-", "-");
            }
        }
    }
    let _ = crate::print(shown(&out).as_bytes());
    Ok(crate::exit::OK)
}

/// What building a station's plugin from its config, as `run` would, came to.
enum Built {
    /// Accepted its config.
    Ok,
    /// A sink another process holds: its config is fine, and the record is in use.
    Busy(String),
    /// Refused: the one-line reason.
    Refused(String),
}

/// Builds the station's object from its config and drops it at once: a config `run`
/// would refuse is refused here too. A sink may create its record when built (the
/// file and SQLite sinks do): where the config's `path` names no file yet, the sink is
/// built on a scratch path instead ([`scratch_config`]), so showing creates nothing.
/// (Creating the record and removing it again would race a command that began writing
/// it meanwhile, and remove its record.)
fn build(profile: &Profile, station: &'static str, choice: &PluginChoice, p: &Plugin) -> Built {
    let built = match station {
        "policy" => p.policy_evaluator(&choice.config).map(drop),
        "sandbox.confinement" => p.confinement_backend(&choice.config).map(drop),
        _ => match scratch_config(&choice.config) {
            Ok(Some((config, _scratch))) => p.audit_sink(&config).map(drop),
            Ok(None) => p.audit_sink(&choice.config).map(drop),
            Err(e) => return Built::Refused(profile.plugin_error(station, choice, e).to_string()),
        },
    };
    match built {
        Ok(()) => Built::Ok,
        Err(e) if e.kind == aegis_station_api::ErrorKind::BUSY => Built::Busy(e.to_string()),
        Err(e) => Built::Refused(
            profile
                .plugin_error(station, choice, e.to_string())
                .to_string(),
        ),
    }
}

pub fn show_profile(name: &str, json: bool) -> Result<u8, CliError> {
    let profile = crate::use_profile(name)?;
    let registry = Registry::new();
    let sha = aegis_record::digest::encode_hex(&profile.sha256);
    let mut out = String::new();
    let mut doc = Object::new();
    doc.insert("name", profile.name.as_str());
    doc.insert("description", profile.description.as_str());
    doc.insert("source", profile.source.to_string());
    doc.insert("sha256", sha.as_str());
    let _ = writeln!(out, "name         {}", profile.name);
    let _ = writeln!(out, "description  {}", profile.description);
    let _ = writeln!(out, "source       {}", profile.source);
    let _ = writeln!(out, "sha256       {sha}");
    let mut refusals = Vec::new();
    let mut station = |out: &mut String,
                       doc: &mut Object,
                       label: &str,
                       key: &'static str,
                       choice: &PluginChoice| {
        let mut o = Object::new();
        match profile.resolve(&registry, key, choice) {
            Ok(p) => {
                let m = p.metadata();
                o.insert("plugin", m.name.as_str());
                o.insert("version", m.version.as_str());
                o.insert("source", origin(&p));
                o.insert("config", choice.config.as_str());
                let _ = writeln!(
                    out,
                    "{label:<12} {} {} from {}",
                    m.name,
                    m.version,
                    origin(&p)
                );
                for line in choice.config.lines() {
                    let _ = writeln!(out, "{:<12}   {line}", "");
                }
                match build(&profile, key, choice, &p) {
                    Built::Ok => {}
                    Built::Busy(why) => {
                        o.insert("busy", why.as_str());
                        let _ = writeln!(out, "{:<12}   (in use: {why})", "");
                    }
                    Built::Refused(why) => {
                        o.insert("refused", why.as_str());
                        refusals.push(why);
                    }
                }
            }
            Err(e) => {
                o.insert("refused", e.to_string());
                refusals.push(e.to_string());
            }
        }
        doc.insert(key, o);
    };
    station(&mut out, &mut doc, "policy", "policy", &profile.policy);
    let _ = writeln!(
        out,
        "capability   host (default-deny grants; never a plugin)"
    );
    match &profile.confinement {
        None => {
            let _ = writeln!(
                out,
                "sandbox      host wasmtime sandbox; native programs run unconfined"
            );
        }
        Some(c) => {
            let level = if c.best_effort {
                "best-effort"
            } else {
                "required"
            };
            let _ = writeln!(
                out,
                "sandbox      host wasmtime sandbox; native programs confined ({level}):"
            );
            station(
                &mut out,
                &mut doc,
                "  confinement",
                "sandbox.confinement",
                &c.plugin,
            );
        }
    }
    station(&mut out, &mut doc, "audit", "audit", &profile.audit);
    if profile.operator.audit.is_some() {
        let _ = writeln!(
            out,
            "{:<12}   (run, wrap and gateway write operator.audit instead)",
            ""
        );
    }
    operator_settings(&profile, &mut out, &mut doc);
    // A refused profile is one line on stderr, as `run` says it; nothing on stdout.
    // The first, as `run` stops at the first.
    if let Some(why) = refusals.first() {
        return Err(CliError::Refused(
            aegis_record::text::escape(why).into_owned(),
        ));
    }
    if json {
        let _ = crate::print(json_line(&doc).as_bytes());
    } else {
        let _ = crate::print(shown(&out).as_bytes());
    }
    Ok(crate::exit::OK)
}

/// The profile's `[operator]` settings for `profiles show`, each with its line: the
/// values a command uses when no flag replaces them.
fn operator_settings(profile: &Profile, out: &mut String, doc: &mut Object) {
    let entries = profile.operator.entries();
    if entries.is_empty() {
        let _ = writeln!(out, "operator     none (each setting from its flag)");
    }
    let mut settings = Object::new();
    for (i, (key, value, line)) in entries.iter().enumerate() {
        let from = format!("profile {}:{line}", profile.label());
        let label = if i == 0 { "operator" } else { "" };
        let _ = writeln!(out, "{label:<12} {key} = {value}  ({from})");
        let mut o = Object::new();
        // The value as the command uses it (paths resolved), typed.
        let typed = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"));
        o.insert(
            "value",
            typed.as_ref().map_or(Value::from(value.as_str()), json_of),
        );
        o.insert("source", from);
        settings.insert(*key, o);
    }
    doc.insert("operator", settings);
}

/// A setting's TOML value as JSON: strings, booleans and arrays of them.
fn json_of(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::from(s.as_str()),
        toml::Value::Boolean(b) => Value::from(*b),
        toml::Value::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        other => Value::from(other.to_string()),
    }
}

pub fn export(
    profile: &str,
    out: &std::path::Path,
    force: bool,
    filter: &crate::store::Filter,
) -> Result<u8, CliError> {
    let profile = crate::use_profile(profile)?;
    let registry = Registry::new();
    let plugin = profile
        .resolve(&registry, "audit", &profile.audit)
        .map_err(|e| CliError::Refused(e.to_string()))?;
    // Building a sink may create its record (the file and SQLite sinks do): export
    // reads, so a record that is not there is said, never made.
    if let Some(path) = config_path(&profile.audit.config)
        && std::fs::symlink_metadata(&path).is_err()
    {
        return Err(CliError::Unreadable(format!(
            "{}: no record there to export (the sink has never written one)",
            path.display()
        )));
    }
    let sink = build_sink(&profile, &plugin)?;
    // A volatile sink is empty in every process but the one that wrote to it: an
    // export here would be an empty file that reads as "nothing happened".
    if sink.retention() == aegis_station_api::Retention::VOLATILE {
        return Err(CliError::Unreadable(format!(
            "profile {}: its audit sink ({}) is volatile: it keeps its lines only in the process that wrote them, so there is no record to export here; use a profile whose sink retains them (durable-file) or pass --audit PATH to the command that records",
            profile.name, profile.audit.spec
        )));
    }
    if let Some(sessions) = crate::store::sessions(&sink, filter)? {
        return crate::store::export_sessions(&sink, &sessions, out, force);
    }
    // --force replaces an earlier export and nothing else: a device, a FIFO or a link at
    // `out` is refused. The lines go to a fresh file beside `out` (O_EXCL | O_NOFOLLOW),
    // which takes its place only once complete and flushed (aegis_files): a link planted
    // meanwhile is replaced, never written through, and an export cut short leaves `out`
    // as it was.
    let replace = if force {
        aegis_files::Replace::RegularFile
    } else {
        aegis_files::Replace::Never
    };
    let refused = |e: aegis_files::FileError| match &e {
        aegis_files::FileError::NotAFile { .. } => CliError::Usage(e.to_string()),
        aegis_files::FileError::Exists { .. } => CliError::Usage(format!(
            "{}: already exists (pass --force to replace it)",
            out.display()
        )),
        _ => CliError::Unreadable(e.to_string()),
    };
    let file = aegis_files::AtomicFile::create(out, replace, 0o666).map_err(refused)?;
    let mut writer = std::io::BufWriter::new(file);
    let (n, file) = aegis_runtime::export(&sink, &mut writer)
        .and_then(|n| {
            let file = writer
                .into_inner()
                .map_err(std::io::IntoInnerError::into_error)?;
            Ok((n, file))
        })
        // The unfinished file is removed when dropped; `out` is as it was.
        .map_err(|e| CliError::Unreadable(format!("{}: {e}", out.display())))?;
    file.commit().map_err(refused)?;
    crate::note(format_args!(
        "exported {n} lines from {} to {}",
        sink.location(),
        out.display()
    ));
    Ok(crate::exit::OK)
}

/// `config` with its `path` moved into a fresh private directory, when the path names
/// nothing yet: the sink is built (its other keys checked) without making a record
/// where the operator's would be. The directory goes when the second value is dropped.
/// `None` when the config names no path or the path exists.
fn scratch_config(config: &str) -> Result<Option<(String, tempfile::TempDir)>, String> {
    let Ok(mut table) = toml::from_str::<toml::Table>(config) else {
        return Ok(None); // the plugin says what is wrong with it
    };
    let Some(path) = table
        .get("path")
        .and_then(toml::Value::as_str)
        .map(PathBuf::from)
    else {
        return Ok(None);
    };
    // A path whose directory is missing is built where it is: the sink refuses it as
    // `run` would, and creates nothing there.
    let directory_there = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .is_none_or(Path::is_dir);
    if std::fs::symlink_metadata(&path).is_ok() || !directory_there {
        return Ok(None);
    }
    let scratch = tempfile::tempdir().map_err(|e| format!("a scratch directory: {e}"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let moved = scratch.path().join(name);
    let Some(moved) = moved.to_str().map(str::to_owned) else {
        return Err(format!(
            "a scratch directory: {} is not UTF-8",
            moved.display()
        ));
    };
    table.insert("path".to_owned(), toml::Value::String(moved));
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    Ok(Some((text, scratch)))
}

/// The `path` a plugin's config names, by the convention the file and SQLite sinks
/// share; `None` when it names none.
/// The profile's audit sink, built from its plugin.
fn build_sink(
    profile: &aegis_runtime::Profile,
    plugin: &aegis_runtime::Plugin,
) -> Result<aegis_station_api::AuditSinkBox, CliError> {
    plugin.audit_sink(&profile.audit.config).map_err(|e| {
        let busy = e.kind == aegis_station_api::ErrorKind::BUSY;
        let message = profile
            .plugin_error("audit", &profile.audit, e.to_string())
            .to_string();
        if busy {
            CliError::Busy(message)
        } else {
            CliError::Refused(message)
        }
    })
}

/// The approvals queue the profile's audit store keeps, when it is a store without a
/// file (a database): `None` for a sink that names a `path` or is replaced by the
/// profile's `[operator] audit` file (a file a running host may hold; never opened
/// here), and for a sink that keeps no queue.
///
/// # Errors
/// The sink cannot be built, or cannot say whether it keeps a queue.
pub fn store_queue(
    profile: &aegis_runtime::Profile,
) -> Result<Option<aegis_approvals::Queue>, CliError> {
    if profile.operator.audit.is_some() || config_path(&profile.audit.config).is_some() {
        return Ok(None);
    }
    let registry = Registry::new();
    let plugin = profile
        .resolve(&registry, "audit", &profile.audit)
        .map_err(|e| CliError::Refused(e.to_string()))?;
    let sink = std::sync::Arc::new(build_sink(profile, &plugin)?);
    aegis_runtime::approvals::store_queue(&sink)
        .map_err(|e| CliError::Unreadable(aegis_record::text::escape(&e.to_string()).into_owned()))
}

/// Where a profile's commands record: a file, or a store of many sessions.
pub enum Recorded {
    /// `[operator] audit`, or the path its audit sink writes.
    File(PathBuf),
    /// Its audit sink, a store that keeps one chain per session.
    Store(aegis_station_api::AuditSinkBox),
}

/// What `aegis --profile P console` shows when given no path: where the profile's
/// commands record.
///
/// # Errors
/// The profile or its sink refused (exit 4); a volatile sink, or one that keeps one
/// chain with no file to read (exit 2); the store unreachable (exit 2).
pub fn recorded(profile: &str) -> Result<Recorded, CliError> {
    let profile = crate::use_profile(profile)?;
    if let Some(audit) = &profile.operator.audit {
        return Ok(Recorded::File(audit.value.clone()));
    }
    if let Some(path) = config_path(&profile.audit.config) {
        return Ok(Recorded::File(path));
    }
    let registry = Registry::new();
    let plugin = profile
        .resolve(&registry, "audit", &profile.audit)
        .map_err(|e| CliError::Refused(e.to_string()))?;
    let sink = build_sink(&profile, &plugin)?;
    if sink.retention() == aegis_station_api::Retention::VOLATILE {
        return Err(CliError::Unreadable(format!(
            "profile {}: its audit sink ({}) is volatile: nothing is kept for the console to show; use a profile whose sink retains its lines, or give the record's path",
            profile.name, profile.audit.spec
        )));
    }
    match aegis_runtime::stored_sessions(&sink, "", "") {
        Ok(Some(_)) => Ok(Recorded::Store(sink)),
        Ok(None) => Err(CliError::Unreadable(format!(
            "profile {}: its audit sink ({}) keeps one chain and names no file: `aegis export` it to a file and give that path",
            profile.name, profile.audit.spec
        ))),
        Err(e) => Err(CliError::Unreadable(format!(
            "{}: {}",
            sink.location(),
            aegis_record::text::escape(&e.to_string())
        ))),
    }
}

fn config_path(config: &str) -> Option<PathBuf> {
    let table: toml::Table = toml::from_str(config).ok()?;
    table.get("path")?.as_str().map(PathBuf::from)
}

/// A listing as it may reach a terminal: plugin metadata, profile descriptions and
/// error text come from files and libraries, so their control characters are escaped.
fn shown(listing: &str) -> std::borrow::Cow<'_, str> {
    aegis_record::text::escape_keeping_lines(listing)
}
