//! Profiles: which plugin fills each station, chosen by a TOML file.
//!
//! # Guarantees
//! - A profile has `name`, `description`, exactly one table per station —
//!   `[policy]`, `[capability]`, `[sandbox]`, `[audit]` — and at most one `[operator]`
//!   table of settings a flag would otherwise give ([`crate::operator`]), and nothing
//!   else. The station order is the host's: no key can reorder, skip, repeat or add a
//!   station.
//! - Every error is one line: `<file>:<line>: <what>`, naming the key at fault.
//! - `default` resolves from any directory with no files present: it is embedded.
//! - A profile is never read from the working directory unless the operator names it as
//!   a path (`--profile ./x.toml`): names are looked up only in `$AEGIS_PROFILE_PATH`
//!   (absolute entries), the user's and the system's config directories, then among the
//!   embedded profiles. A `profiles/default.toml` planted in a checkout is not read.
//! - A relative plugin path in a profile file is taken relative to the directory of the
//!   profile file, never the working directory; an embedded profile, having no
//!   directory, may not name a plugin by a relative path at all.
//! - **Nothing accepted is ignored.** Every key a profile accepts is used.
//!   `[sandbox] confinement` names the backend that confines the native programs the
//!   host starts (`aegis wrap`'s server, `aegis confine`'s command) and its level;
//!   commands that start no native program (`run`, `gateway`: their tools run in
//!   wasmtime) record it in provenance and need nothing more from it.
//!   [`Profile::resolve`] refuses a plugin that does not provide its station's kind
//!   before anything is built from it. An `[operator]` key is used by the commands
//!   whose flag it stands for, and ignored by the others (as that flag would not be
//!   given to them); grants there need a confinement backend, so they are never
//!   accepted with nothing to enforce them.
//!
//! - A relative `path` in a station's config (the file and SQLite sinks' record, by
//!   their shared convention; the YAML policy file), or a relative `policies` or
//!   `schema` (the Cedar station's files), is taken relative to the profile file's
//!   directory too;
//!   in an embedded profile it stays relative to the working directory.
//!
//! # Non-guarantees
//! - Plugin config sections are passed to the plugin as TOML text; apart from the paths
//!   above, their contents are the plugin's to check.
//! - The profile file itself is read by its path; who may write it is not checked. The
//!   plugins it names are (see [`crate::plugin`]), and the profile's SHA-256 is recorded.

use crate::operator::Operator;
use crate::plugin::{Origin, Plugin};
use crate::registry::{PluginSpec, Registry, ResolveError};
use aegis_station_api::Kinds;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Profiles compiled into the binary, by name.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("default", include_str!("../../../profiles/default.toml")),
    (
        "durable-file",
        include_str!("../../../profiles/durable-file.toml"),
    ),
    (
        "linux-confined",
        include_str!("../../../profiles/linux-confined.toml"),
    ),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    description: String,
    policy: StationTable,
    capability: CapabilityTable,
    sandbox: SandboxTable,
    audit: StationTable,
    /// Read again on its own ([`crate::operator::table`]), so its errors name their key.
    operator: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StationTable {
    plugin: Spanned<String>,
    sha256: Option<Spanned<String>>,
    config: Option<toml::Table>,
}

/// The capability station is the host's own; no setting is defined yet.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CapabilityTable {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxTable {
    confinement: Option<ConfinementTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfinementTable {
    plugin: Spanned<String>,
    sha256: Option<Spanned<String>>,
    config: Option<toml::Table>,
    /// `required` (the default) or `best-effort`.
    level: Option<Spanned<String>>,
}

/// The confinement backend a profile names, and what it must achieve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfinementChoice {
    /// The backend plugin.
    pub plugin: PluginChoice,
    /// Run with what the kernel enforces instead of refusing (`level = "best-effort"`).
    pub best_effort: bool,
}

/// Where a profile came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileSource {
    /// Compiled into the binary.
    Embedded,
    /// Read from a file.
    File(PathBuf),
}

impl std::fmt::Display for ProfileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProfileSource::Embedded => f.write_str("embedded"),
            ProfileSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A plugin choice for one station, as the profile wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginChoice {
    /// The plugin reference.
    pub spec: PluginSpec,
    /// The pinned SHA-256 of the plugin file, if any.
    pub sha256: Option<[u8; 32]>,
    /// The plugin's config section, as TOML text.
    pub config: String,
    /// The line of the `plugin` key, for errors.
    line: usize,
    /// The command-line flag that replaced the profile's choice, if one did.
    flag: Option<&'static str>,
    /// The `[operator]` key that replaced the station's choice, if one did (its line
    /// is `line`).
    setting: Option<&'static str>,
}

impl PluginChoice {
    /// A choice made by a command-line flag instead of the profile file; errors about
    /// it name the flag.
    pub fn from_flag(flag: &'static str, spec: PluginSpec, config: String) -> PluginChoice {
        PluginChoice {
            spec,
            sha256: None,
            config,
            line: 0,
            flag: Some(flag),
            setting: None,
        }
    }

    /// A choice made by the profile's `[operator]` key `key` (at `line`) instead of
    /// the station's table; errors about it name that line and key.
    pub fn from_setting(
        key: &'static str,
        line: usize,
        spec: PluginSpec,
        config: String,
    ) -> PluginChoice {
        PluginChoice {
            spec,
            sha256: None,
            config,
            line,
            flag: None,
            setting: Some(key),
        }
    }
}

/// A parsed profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// One line for `aegis profiles list`.
    pub description: String,
    /// Where it came from.
    pub source: ProfileSource,
    /// SHA-256 of its bytes, recorded in provenance.
    pub sha256: [u8; 32],
    /// The policy evaluator.
    pub policy: PluginChoice,
    /// The audit sink.
    pub audit: PluginChoice,
    /// The backend confining native programs the host starts, if the profile names one.
    pub confinement: Option<ConfinementChoice>,
    /// The operator's settings (`[operator]`): none when the table is absent.
    pub operator: Operator,
    /// What errors call it: the path as the operator gave it, or `embedded:NAME`.
    label: String,
}

/// Why a profile was refused. Displayed as one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// No profile by that name anywhere on the search path or embedded.
    #[error(
        "no profile named {name:?} (looked in {searched}, and the embedded profiles: {embedded})"
    )]
    NotFound {
        /// The name.
        name: String,
        /// Directories searched.
        searched: String,
        /// Embedded names.
        embedded: String,
    },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid profile.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// The file (or `embedded:NAME`).
        path: String,
        /// 1-based line, 0 when the whole file is at fault.
        line: usize,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A plugin named by a command-line flag could not be resolved or built.
    #[error("{flag}: [{station}] {message}")]
    Flag {
        /// The flag, e.g. `--policy`.
        flag: &'static str,
        /// The station.
        station: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A station's plugin could not be resolved or built.
    #[error("{path}:{line}: [{station}] {message}")]
    Plugin {
        /// The profile file.
        path: String,
        /// The line of the station's `plugin` key.
        line: usize,
        /// The station.
        station: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// The keys of a station's config whose relative string value is a file taken against
/// the profile's directory: every station's `path`, and the Cedar station's `policies`
/// and `schema`.
const CONFIG_PATH_KEYS: [&str; 3] = ["path", "policies", "schema"];

/// One station's plugin choice as the profile wrote it: the spec (a relative path taken
/// against the profile's directory), the pin and the config section.
fn plugin_choice(
    text: &str,
    label: &str,
    source: &ProfileSource,
    station: &str,
    plugin: Spanned<String>,
    sha256: Option<Spanned<String>>,
    config: Option<toml::Table>,
) -> Result<PluginChoice, ProfileError> {
    let invalid = |line: usize, message: String| ProfileError::Invalid {
        path: label.to_owned(),
        line,
        message,
    };
    let line = line_of(text, plugin.span().start);
    let sha256 = match sha256 {
        None => None,
        Some(s) => {
            let l = line_of(text, s.span().start);
            Some(parse_sha256(s.get_ref()).ok_or_else(|| {
                invalid(
                    l,
                    format!("{station}.sha256: expected 64 lowercase hex characters"),
                )
            })?)
        }
    };
    let config = match config {
        None => String::new(),
        Some(mut table) => {
            // A relative `path` (a sink's record, a policy file) means the same file
            // wherever the command runs: the profile file's directory, as for a plugin
            // path. An embedded profile's stays relative to the working directory
            // (`durable-file`'s ./aegis-audit.aarl). The Cedar station's two files,
            // `policies` and `schema`, follow the same rule.
            for key in CONFIG_PATH_KEYS {
                if let ProfileSource::File(f) = source
                    && let Some(toml::Value::String(path)) = table.get(key)
                    && Path::new(path).is_relative()
                {
                    let joined = profile_dir(f).join(path);
                    let Some(joined) = joined.to_str() else {
                        return Err(invalid(
                            line,
                            format!(
                                "{station}.config.{key}: the profile's directory is not UTF-8, so a relative path cannot be resolved; give it absolute"
                            ),
                        ));
                    };
                    table.insert(key.to_owned(), toml::Value::String(joined.to_owned()));
                }
            }
            toml::to_string(&table).map_err(|e| invalid(line, format!("{station}.config: {e}")))?
        }
    };
    let spec = match PluginSpec::parse(plugin.get_ref()) {
        PluginSpec::Path(p) if p.is_relative() => match source {
            ProfileSource::File(f) => PluginSpec::Path(profile_dir(f).join(p)),
            ProfileSource::Embedded => {
                return Err(invalid(
                    line,
                    format!(
                        "{station}.plugin: relative path {:?} in an embedded profile, which has no directory to resolve it against",
                        p.display().to_string()
                    ),
                ));
            }
        },
        spec => spec,
    };
    Ok(PluginChoice {
        spec,
        sha256,
        config,
        line,
        flag: None,
        setting: None,
    })
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl Profile {
    /// Parses profile text. `label` names it in errors (a path, or `embedded:NAME`).
    ///
    /// # Errors
    /// [`ProfileError::Invalid`], with the line and key at fault.
    pub fn parse(text: &str, label: &str, source: ProfileSource) -> Result<Profile, ProfileError> {
        let invalid = |line: usize, message: String| ProfileError::Invalid {
            path: label.to_owned(),
            line,
            message,
        };
        let file: ProfileFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            let mut message = e.message().trim().replace('\n', " ");
            // Some messages ("duplicate key") do not say which key: quote the text.
            if let Some(span) = e.span().filter(|_| !message.contains('`')) {
                let at: String = text[span]
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(40)
                    .collect();
                message.push_str(&format!(" `{}`", at.trim()));
            }
            invalid(line, message)
        })?;
        let choice = |station: &str, t: StationTable| -> Result<PluginChoice, ProfileError> {
            let StationTable {
                plugin,
                sha256,
                config,
            } = t;
            plugin_choice(text, label, &source, station, plugin, sha256, config)
        };
        let confinement = match file.sandbox.confinement {
            None => None,
            Some(c) => {
                let best_effort = match &c.level {
                    None => false,
                    Some(l) => match l.get_ref().as_str() {
                        "required" => false,
                        "best-effort" => true,
                        other => {
                            return Err(invalid(
                                line_of(text, l.span().start),
                                format!(
                                    "sandbox.confinement.level: {other:?} is not \"required\" or \"best-effort\""
                                ),
                            ));
                        }
                    },
                };
                let plugin = plugin_choice(
                    text,
                    label,
                    &source,
                    "sandbox.confinement",
                    c.plugin,
                    c.sha256,
                    c.config,
                )?;
                Some(ConfinementChoice {
                    plugin,
                    best_effort,
                })
            }
        };
        // `[capability]` takes no keys: the table is required, and empty.
        let CapabilityTable {} = file.capability;
        let policy = choice("policy", file.policy)?;
        let audit = choice("audit", file.audit)?;
        let dir = match &source {
            ProfileSource::File(f) => Some(profile_dir(f)),
            ProfileSource::Embedded => None,
        };
        let operator = match file.operator {
            None => Operator::default(),
            Some(_) => crate::operator::table(text)
                .and_then(|table| {
                    crate::operator::parse(table, text, dir.as_deref(), confinement.is_some())
                })
                .map_err(|(line, message)| invalid(line, message))?,
        };
        let source = match source {
            ProfileSource::File(f) => ProfileSource::File(std::path::absolute(&f).unwrap_or(f)),
            embedded => embedded,
        };
        Ok(Profile {
            name: file.name,
            description: file.description,
            source,
            sha256: Sha256::digest(text.as_bytes()).into(),
            policy,
            audit,
            confinement,
            operator,
            label: label.to_owned(),
        })
    }

    /// Finds a profile by name or path: a path (containing `/` or ending in `.toml`) is
    /// read as is; a name is looked up as `NAME.toml` in [`search_path`] — never the
    /// working directory — then among the embedded profiles.
    ///
    /// # Errors
    /// Not found, unreadable, or invalid.
    pub fn find(name_or_path: &str) -> Result<Profile, ProfileError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            return Profile::read(Path::new(name_or_path));
        }
        let dirs = search_path();
        for dir in &dirs {
            let path = dir.join(format!("{name_or_path}.toml"));
            if path.is_file() {
                return Profile::read(&path);
            }
        }
        if let Some((name, text)) = EMBEDDED.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(text, &format!("embedded:{name}"), ProfileSource::Embedded);
        }
        Err(ProfileError::NotFound {
            name: name_or_path.to_owned(),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            embedded: EMBEDDED
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The profile compiled into the binary as `name`, whatever the search path holds:
    /// for a caller that must not pick up an operator's file of the same name (the
    /// demo, the suites).
    ///
    /// # Errors
    /// [`ProfileError::NotFound`] when no embedded profile has that name.
    pub fn embedded(name: &str) -> Result<Profile, ProfileError> {
        match EMBEDDED.iter().find(|(n, _)| *n == name) {
            Some((name, text)) => {
                Profile::parse(text, &format!("embedded:{name}"), ProfileSource::Embedded)
            }
            None => Err(ProfileError::NotFound {
                name: name.to_owned(),
                searched: String::new(),
                embedded: EMBEDDED
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// Reads and parses the profile file at `path`.
    ///
    /// # Errors
    /// Unreadable or invalid.
    pub fn read(path: &Path) -> Result<Profile, ProfileError> {
        let label = path.display().to_string();
        // Never through a final link, never a FIFO or a device, at most 4 MiB.
        let text = aegis_files::read_to_string(path, aegis_files::CONFIG).map_err(|e| {
            ProfileError::Io {
                path: label.clone(),
                source: e.into_io(),
            }
        })?;
        Profile::parse(&text, &label, ProfileSource::File(path.to_owned()))
    }

    /// Every profile reachable by name, first occurrence winning, with where it is.
    pub fn list() -> Vec<Result<Profile, ProfileError>> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for dir in search_path() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            paths.sort();
            for p in paths {
                let stem = p
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if seen.insert(stem) {
                    out.push(Profile::read(&p));
                }
            }
        }
        for (name, text) in EMBEDDED {
            if seen.insert((*name).to_owned()) {
                out.push(Profile::parse(
                    text,
                    &format!("embedded:{name}"),
                    ProfileSource::Embedded,
                ));
            }
        }
        out
    }

    /// What errors call this profile: the path as the operator gave it, or
    /// `embedded:NAME`.
    pub fn label(&self) -> String {
        self.label.clone()
    }

    /// The files this profile makes the host read or write, each with what names it
    /// (`profile`, `audit.plugin`, `policy.config.policies`, …): the profile file, each
    /// plugin library (a bare name as `registry` finds it on the search path) and each
    /// config path a station keeps its files under. A caller that starts an untrusted
    /// program checks these against what the program may write: a profile, plugin or
    /// policy it could replace would be the next session's.
    pub fn files(&self, registry: &Registry) -> Vec<(String, PathBuf)> {
        let mut files = Vec::new();
        if let ProfileSource::File(f) = &self.source {
            files.push(("profile".to_owned(), f.clone()));
        }
        let stations = [("policy", &self.policy), ("audit", &self.audit)]
            .into_iter()
            .chain(self.confinement.iter().map(|c| ("confinement", &c.plugin)));
        for (station, choice) in stations {
            let library = match &choice.spec {
                PluginSpec::Path(p) => Some(p.clone()),
                PluginSpec::Name(n) => registry.find(n),
                PluginSpec::Builtin(_) => None,
            };
            if let Some(library) = library {
                files.push((format!("{station}.plugin"), library));
            }
            // The config text is what `Profile::parse` wrote with `toml::to_string`, so it
            // reads; a station given text that does not refuses it when it is built.
            let Ok(config) = toml::from_str::<toml::Table>(&choice.config) else {
                continue;
            };
            for key in CONFIG_PATH_KEYS {
                if let Some(toml::Value::String(path)) = config.get(key) {
                    files.push((format!("{station}.config.{key}"), PathBuf::from(path)));
                }
            }
        }
        files
    }

    /// Resolves (and loads) the plugin for `station` (`policy` or `audit`) as this
    /// profile names it, and checks that it provides that station's kind: a plugin
    /// named for a station it cannot fill is refused here, before anything is built
    /// from it, so nothing lists it as that station.
    ///
    /// # Errors
    /// [`ProfileError::Plugin`] (or [`ProfileError::Flag`]) naming the profile line
    /// of that station's `plugin` key: unresolvable, refused by the loader, the wrong
    /// kind, or a station that takes no plugin in this host.
    pub fn resolve(
        &self,
        registry: &Registry,
        station: &'static str,
        choice: &PluginChoice,
    ) -> Result<Plugin, ProfileError> {
        // Refused before anything is loaded for it.
        if station_kind(station).is_none() {
            return Err(self.plugin_error(
                station,
                choice,
                format!("no plugin fills the {station} station in this host"),
            ));
        }
        let plugin = registry
            .resolve(&choice.spec, choice.sha256.as_ref())
            .map_err(|e: ResolveError| self.plugin_error(station, choice, e.to_string()))?;
        self.check_kind(station, choice, plugin)
    }

    /// `plugin`, if it provides the kind `station` takes (and the station takes a
    /// plugin in this host): the check [`Profile::resolve`] makes, for a plugin the
    /// caller already holds.
    ///
    /// # Errors
    /// As [`Profile::resolve`], placed at `choice`.
    pub fn check_kind(
        &self,
        station: &'static str,
        choice: &PluginChoice,
        plugin: Plugin,
    ) -> Result<Plugin, ProfileError> {
        let Some((kind, kind_name)) = station_kind(station) else {
            return Err(self.plugin_error(
                station,
                choice,
                format!("no plugin fills the {station} station in this host"),
            ));
        };
        let m = plugin.metadata();
        if !m.kinds.contains(kind) {
            let provides = m.kind_names();
            let provides = if provides.is_empty() {
                "nothing".to_owned()
            } else {
                provides.join(", ")
            };
            return Err(self.plugin_error(
                station,
                choice,
                format!(
                    "plugin {:?} {} provides {provides}, not {kind_name}",
                    m.name, m.version
                ),
            ));
        }
        Ok(plugin)
    }

    /// A one-line error about `station`'s plugin, placed at its `plugin` key.
    pub fn plugin_error(
        &self,
        station: &'static str,
        choice: &PluginChoice,
        message: String,
    ) -> ProfileError {
        if let Some(flag) = choice.flag {
            return ProfileError::Flag {
                flag,
                station,
                message,
            };
        }
        if let Some(key) = choice.setting {
            return ProfileError::Invalid {
                path: self.label(),
                line: choice.line,
                message: format!("operator.{key}: [{station}] {message}"),
            };
        }
        ProfileError::Plugin {
            path: self.label(),
            line: choice.line,
            station,
            message,
        }
    }
}

/// The kind a station's plugin must provide, and its word (as
/// [`crate::plugin::Metadata::kind_names`] says it). Only the stations this host wires
/// to a plugin have one.
fn station_kind(station: &str) -> Option<(Kinds, &'static str)> {
    match station {
        "policy" => Some((Kinds::POLICY, "policy")),
        "audit" => Some((Kinds::SINK, "sink")),
        "sandbox.confinement" => Some((Kinds::CONFINEMENT, "confinement")),
        _ => None,
    }
}

/// A plugin's provenance entry: what the open line records about it.
pub fn provenance_of(station: &str, plugin: &Plugin) -> aegis_record::json::Object {
    let mut o = aegis_record::json::Object::new();
    o.insert("station", station);
    o.insert("name", plugin.metadata().name.as_str());
    o.insert("version", plugin.metadata().version.as_str());
    o.insert("kinds", plugin.metadata().kind_names().join(","));
    o.insert("library_sha256", plugin.origin().digest_label());
    if let Origin::Library { path, .. } = plugin.origin() {
        o.insert("library", path.display().to_string());
    }
    o
}

fn parse_sha256(s: &str) -> Option<[u8; 32]> {
    aegis_record::digest::LineHash::from_hex(s)
        .ok()
        .map(|h| *h.as_bytes())
}

/// The directory a profile file's relative plugin paths are resolved against.
fn profile_dir(file: &Path) -> PathBuf {
    let file = std::path::absolute(file).unwrap_or_else(|_| file.to_owned());
    file.parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_owned)
}

/// Directories searched for profiles named without a path, in order:
/// `$AEGIS_PROFILE_PATH`, the user's config directory, `/etc/aegis/profiles`.
///
/// The working directory is not among them, and a relative entry in
/// `$AEGIS_PROFILE_PATH` is skipped, so what a name means does not depend on where the
/// command runs: a checkout cannot plant the profile (and with it the native plugin)
/// that a plain `aegis run` would use.
pub fn search_path() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(v) = std::env::var_os("AEGIS_PROFILE_PATH") {
        dirs.extend(std::env::split_paths(&v).filter(|p| p.is_absolute()));
    }
    if let Some(c) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| Path::new(v).is_absolute()) {
        dirs.push(Path::new(&c).join("aegis/profiles"));
    } else if let Some(home) = std::env::var_os("HOME").filter(|v| Path::new(v).is_absolute()) {
        dirs.push(Path::new(&home).join(".config/aegis/profiles"));
    }
    dirs.push(PathBuf::from("/etc/aegis/profiles"));
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "name = \"t\"\ndescription = \"d\"\n\n[policy]\nplugin = \"builtin:policy-static\"\nconfig = { verdict = \"deny\" }\n\n[capability]\n\n[sandbox]\n\n[audit]\nplugin = \"builtin:memory-sink\"\n";

    fn err(text: &str) -> String {
        Profile::parse(text, "p.toml", ProfileSource::Embedded)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_valid_profile_parses_and_config_round_trips() {
        let p = Profile::parse(GOOD, "p.toml", ProfileSource::Embedded).unwrap();
        assert_eq!(p.policy.spec, PluginSpec::Builtin("policy-static".into()));
        assert_eq!(p.policy.config.trim(), "verdict = \"deny\"");
        assert_eq!(p.policy.line, 5);
    }

    /// A confinement table names a backend and a level; a level it does not know is
    /// refused at its line, and a plugin that is not a confinement backend is refused
    /// by `resolve` (before, any table here was accepted and ignored).
    #[test]
    fn a_confinement_table_names_a_backend_and_a_level() {
        let registry = Registry::new().with_search_path(Vec::new());
        let with = |sandbox: &str| GOOD.replace("[sandbox]\n", sandbox);
        let p = Profile::parse(
            &with("[sandbox]\nconfinement = { plugin = \"builtin:confine-landlock\" }\n"),
            "p.toml",
            ProfileSource::Embedded,
        )
        .unwrap();
        let c = p.confinement.clone().unwrap();
        assert!(!c.best_effort);
        p.resolve(&registry, "sandbox.confinement", &c.plugin)
            .unwrap();

        let p = Profile::parse(
            &with("[sandbox]\n\n[sandbox.confinement]\nplugin = \"builtin:confine-none\"\nlevel = \"best-effort\"\n"),
            "p.toml",
            ProfileSource::Embedded,
        )
        .unwrap();
        assert!(p.confinement.unwrap().best_effort);

        let text = with(
            "[sandbox]\nconfinement = { plugin = \"builtin:confine-landlock\", level = \"maybe\" }\n",
        );
        let e = err(&text);
        assert!(
            e.starts_with("p.toml:11: sandbox.confinement.level: \"maybe\""),
            "{e}"
        );
        let e = err(&with("[sandbox]\nconfinement = \"anything\"\n"));
        assert!(e.starts_with("p.toml:11: "), "{e}");

        let p = Profile::parse(
            &with("[sandbox]\nconfinement = { plugin = \"builtin:policy-static\" }\n"),
            "p.toml",
            ProfileSource::Embedded,
        )
        .unwrap();
        let e = p
            .resolve(
                &registry,
                "sandbox.confinement",
                &p.confinement.clone().unwrap().plugin,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("[sandbox.confinement]"), "{e}");
        assert!(e.contains("provides policy, not confinement"), "{e}");
    }

    /// Before, a plugin named for a station it cannot fill resolved and was listed
    /// as that station; only building it failed, later, on some paths.
    #[test]
    fn a_plugin_of_the_wrong_kind_is_refused_for_every_station() {
        let registry = Registry::new().with_search_path(Vec::new());
        let swapped = GOOD
            .replace("builtin:policy-static", "builtin:SINK")
            .replace("builtin:memory-sink", "builtin:policy-static")
            .replace("builtin:SINK", "builtin:memory-sink");
        let p = Profile::parse(&swapped, "p.toml", ProfileSource::Embedded).unwrap();
        let e = p
            .resolve(&registry, "policy", &p.policy)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("p.toml:5: [policy] ") && e.contains("provides sink, not policy"),
            "{e}"
        );
        let e = p
            .resolve(&registry, "audit", &p.audit)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("p.toml:13: [audit] ") && e.contains("provides policy, not sink"),
            "{e}"
        );
        // A station that takes no plugin here refuses any.
        let e = p
            .resolve(&registry, "sandbox", &p.audit)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no plugin fills the sandbox station"), "{e}");
        // The right kinds still resolve.
        let good = Profile::parse(GOOD, "p.toml", ProfileSource::Embedded).unwrap();
        good.resolve(&registry, "policy", &good.policy).unwrap();
        good.resolve(&registry, "audit", &good.audit).unwrap();
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        let e = err(&GOOD.replace("[capability]\n", "[capability]\nmanifests = 1\n"));
        assert!(
            e.starts_with("p.toml:9: ") && e.contains("manifests"),
            "{e}"
        );
        let e = err(&format!("order = [\"audit\", \"policy\"]\n{GOOD}"));
        assert!(e.starts_with("p.toml:1: ") && e.contains("order"), "{e}");
        let e = err(&GOOD.replace(
            "plugin = \"builtin:memory-sink\"",
            "plugin = \"builtin:memory-sink\"\npath = \"x\"",
        ));
        assert!(e.starts_with("p.toml:14: ") && e.contains("path"), "{e}");
    }

    #[test]
    fn stations_cannot_be_skipped_repeated_or_added() {
        let e = err(&GOOD.replace("[sandbox]\n", ""));
        assert!(e.contains("sandbox"), "{e}");
        let e = err(&format!("{GOOD}\n[audit]\nplugin = \"x\"\n"));
        assert!(e.contains("audit"), "{e}");
        let e = err(&format!("{GOOD}\n[network]\n"));
        assert!(e.contains("network"), "{e}");
        let e = err("not toml at all [");
        assert!(e.starts_with("p.toml:1: "), "{e}");
    }

    /// Before, a sink's relative `path` was opened against the working directory, so
    /// one profile meant a different record in each directory it ran from.
    #[test]
    fn a_relative_config_path_is_taken_from_the_profile_files_directory() {
        let text = GOOD.replace(
            "plugin = \"builtin:memory-sink\"",
            "plugin = \"builtin:file-sink\"\nconfig = { path = \"records/a.aarl\" }",
        );
        let file =
            Profile::parse(&text, "p.toml", ProfileSource::File("/etc/x/p.toml".into())).unwrap();
        assert_eq!(file.audit.config.trim(), "path = \"/etc/x/records/a.aarl\"");
        let absolute = text.replace("records/a.aarl", "/var/a.aarl");
        let file = Profile::parse(
            &absolute,
            "p.toml",
            ProfileSource::File("/etc/x/p.toml".into()),
        )
        .unwrap();
        assert_eq!(file.audit.config.trim(), "path = \"/var/a.aarl\"");
        let embedded = Profile::parse(&text, "p.toml", ProfileSource::Embedded).unwrap();
        assert_eq!(embedded.audit.config.trim(), "path = \"records/a.aarl\"");
    }

    /// The Cedar station's two files resolve as `path` does; other keys are left alone.
    #[test]
    fn relative_cedar_files_are_taken_from_the_profile_files_directory() {
        let text = GOOD.replace(
            "plugin = \"builtin:memory-sink\"",
            "plugin = \"builtin:memory-sink\"\nconfig = { policies = \"c/p.cedar\", schema = \"/abs/s.cedarschema\", other = \"o\" }",
        );
        let file =
            Profile::parse(&text, "p.toml", ProfileSource::File("/etc/x/p.toml".into())).unwrap();
        let config: toml::Table = toml::from_str(&file.audit.config).unwrap();
        assert_eq!(config["policies"].as_str(), Some("/etc/x/c/p.cedar"));
        assert_eq!(config["schema"].as_str(), Some("/abs/s.cedarschema"));
        assert_eq!(config["other"].as_str(), Some("o"));
    }

    #[test]
    fn a_bad_pin_is_named() {
        let e = err(&GOOD.replace(
            "plugin = \"builtin:memory-sink\"",
            "plugin = \"x.so\"\nsha256 = \"ABC\"",
        ));
        assert!(e.starts_with("p.toml:14: audit.sha256"), "{e}");
    }

    #[test]
    fn embedded_profiles_parse_and_are_named_for_their_key() {
        for (name, text) in EMBEDDED {
            let p = Profile::parse(text, name, ProfileSource::Embedded).unwrap();
            assert_eq!(p.name, *name);
        }
    }
}
