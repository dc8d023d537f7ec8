//! `aegis store init`, and `aegis export` from a store of many sessions: one file per
//! session, named as the directory mode names them.

use crate::CliError;
use aegis_runtime::Registry;
use aegis_station_api::{AuditSinkBox, StoredSession};
use std::path::{Path, PathBuf};

/// Which sessions `export` writes out.
#[derive(Debug, Default)]
pub struct Filter {
    /// Only this hostname; empty for any.
    pub host: String,
    /// Only sessions opened at or after this time, in the record's form; empty for any.
    pub since: String,
}

impl Filter {
    /// The `--host` and `--since` flags, `--since` read as a date, a UTC time to the
    /// second or the record's own form, and written in the record's form (which orders
    /// as text the way it orders as time).
    ///
    /// # Errors
    /// A `--since` in none of these forms (exit 1).
    pub fn new(host: Option<String>, since: Option<&str>) -> Result<Filter, CliError> {
        let since = match since {
            None => String::new(),
            Some(text) => {
                let full = match text.len() {
                    10 => format!("{text}T00:00:00.000000Z"),
                    20 if text.ends_with('Z') => format!("{}.000000Z", &text[..19]),
                    _ => text.to_owned(),
                };
                if !aegis_record::time::is_valid(&full) {
                    return Err(CliError::Usage(format!(
                        "--since {text:?}: expected a UTC date or time: 2026-12-04, 2026-12-04T10:00:00Z or 2026-12-04T10:00:00.000000Z"
                    )));
                }
                full
            }
        };
        Ok(Filter {
            host: host.unwrap_or_default(),
            since,
        })
    }

    fn is_empty(&self) -> bool {
        self.host.is_empty() && self.since.is_empty()
    }
}

/// The sessions `sink` holds that `filter` selects; `None` for a sink of one chain,
/// which refuses a filter.
///
/// # Errors
/// The sink cannot list them (exit 2); a filter for a sink of one chain (exit 1).
pub fn sessions(
    sink: &AuditSinkBox,
    filter: &Filter,
) -> Result<Option<Vec<StoredSession>>, CliError> {
    let listed = aegis_runtime::stored_sessions(sink, &filter.host, &filter.since)
        .map_err(|e| CliError::Unreadable(format!("{}: {e}", sink.location())))?;
    if listed.is_none() && !filter.is_empty() {
        return Err(CliError::Usage(format!(
            "--host and --since select sessions of a store of many sessions; {} keeps one chain, exported whole",
            sink.location()
        )));
    }
    Ok(listed)
}

/// Writes each session to its own file in `dir` (made if missing, never through a
/// link): `<host>-<opened>-<session>.aarl`, byte-exact. Files already there are refused
/// unless `force`; a file is only ever replaced whole.
///
/// # Errors
/// `dir` is not a directory or cannot be made (exit 1 or 2); a session cannot be read
/// or written (exit 2).
pub fn export_sessions(
    sink: &AuditSinkBox,
    sessions: &[StoredSession],
    dir: &Path,
    force: bool,
) -> Result<u8, CliError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(CliError::Usage(format!(
                "{}: not a directory (this store holds many sessions: --out names a directory, one file per session)",
                dir.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(dir)
            .map_err(|e| CliError::Unreadable(format!("{}: {e}", dir.display())))?,
        Err(e) => return Err(CliError::Unreadable(format!("{}: {e}", dir.display()))),
    }
    let replace = if force {
        aegis_files::Replace::RegularFile
    } else {
        aegis_files::Replace::Never
    };
    let mut lines = 0u64;
    for session in sessions {
        let name =
            aegis_runtime::host::session_file_name(&session.host, &session.opened, &session.id);
        let path: PathBuf = dir.join(name);
        let failed = |e: String| CliError::Unreadable(format!("{}: {e}", path.display()));
        let file =
            aegis_files::AtomicFile::create(&path, replace, 0o666).map_err(|e| match &e {
                aegis_files::FileError::Exists { .. } => CliError::Usage(format!(
                    "{}: already exists (pass --force to replace it)",
                    path.display()
                )),
                aegis_files::FileError::NotAFile { .. } => CliError::Usage(e.to_string()),
                _ => failed(e.to_string()),
            })?;
        let mut writer = std::io::BufWriter::new(file);
        let n = aegis_runtime::export_session(sink, &session.id, &mut writer)
            .map_err(|e| failed(e.to_string()))?;
        let file = writer
            .into_inner()
            .map_err(|e| failed(e.into_error().to_string()))?;
        file.commit().map_err(|e| failed(e.to_string()))?;
        lines += n;
    }
    crate::note(format_args!(
        "exported {} sessions ({lines} lines) from {} to {}; check them with `aegis verify {}`",
        sessions.len(),
        sink.location(),
        dir.display(),
        dir.display()
    ));
    Ok(crate::exit::OK)
}

/// `aegis store init`: builds the profile's audit sink with the administrator's
/// connection added to its config as `init`, which a sink that prepares a store reads
/// (spec/PLUGINS.md); a sink that cannot refuses the key, and is reported as such.
///
/// # Errors
/// No administrator connection (exit 1); the profile, the sink or the init refused
/// (exit 4).
pub fn init(
    profile: &str,
    connection: Option<String>,
    connection_file: Option<PathBuf>,
) -> Result<u8, CliError> {
    let mut init = toml::Table::new();
    match (connection, connection_file) {
        (Some(text), None) => {
            init.insert("connection".into(), text.into());
        }
        (None, Some(path)) => {
            let path = std::path::absolute(&path)
                .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
            init.insert("connection_file".into(), path.display().to_string().into());
        }
        _ => {
            return Err(CliError::Usage(
                "store init: give the administrator's connection with --admin-connection-file FILE (or --admin-connection CONNINFO)".into(),
            ));
        }
    }
    let profile = crate::use_profile(profile)?;
    let registry = Registry::new();
    let plugin = profile
        .resolve(&registry, "audit", &profile.audit)
        .map_err(|e| CliError::Refused(e.to_string()))?;
    let mut config: toml::Table = toml::from_str(&profile.audit.config).map_err(|e| {
        CliError::Refused(
            profile
                .plugin_error("audit", &profile.audit, e.message().to_owned())
                .to_string(),
        )
    })?;
    if config.contains_key("init") {
        return Err(CliError::Refused(
            profile
                .plugin_error(
                    "audit",
                    &profile.audit,
                    "config: `init` is the host's to add, for `aegis store init`; remove it from the profile".into(),
                )
                .to_string(),
        ));
    }
    config.insert("init".into(), init.into());
    let sink = plugin.audit_sink(&config.to_string()).map_err(|e| {
        let message = if e.message.contains("unknown field `init`") {
            format!(
                "{} has no store to prepare: `aegis store init` is for stores such as the PostgreSQL sink",
                profile.audit.spec
            )
        } else {
            e.to_string()
        };
        CliError::Refused(
            profile
                .plugin_error("audit", &profile.audit, message)
                .to_string(),
        )
    })?;
    crate::note(format_args!(
        "store ready: {} (the writer may only add lines)",
        sink.location()
    ));
    Ok(crate::exit::OK)
}
