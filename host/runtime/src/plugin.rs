//! Loading plugin libraries, and the one handle type built-in and loaded plugins share.
//!
//! # Guarantees
//! - Before a library is opened (and its initialisers run), the file must be a regular
//!   file (not a symlink to one), owned by root or the current user, not writable by
//!   group or others, and match the profile's pinned SHA-256 if one is given.
//! - A library is accepted only if abi_stable finds the same station-API major and the
//!   same layout for every type reachable from the root module; a library that ships no
//!   layout to check is refused rather than trusted.
//! - Each refusal is one line naming the library and what differed.
//! - Libraries are loaded with `lib_header_from_path(..).init_root_module()`, so several
//!   plugin libraries coexist in one process.
//!
//! # Non-guarantees
//! - A loaded plugin runs with the host's privileges. The checks above decide which
//!   code is loaded; they do not sandbox it.
//! - Libraries are never unloaded.

use abi_stable::library::{LibraryError, lib_header_from_path};
use abi_stable::std_types::RStr;
use aegis_station_api::{
    API_MAJOR, AuditSinkBox, ConfinementBackendBox, Kinds, PluginError, PluginModuleRef,
    PolicyEvaluatorBox,
};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a plugin's code came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Linked into this binary.
    Builtin,
    /// Loaded from a library file, whose SHA-256 was taken before loading.
    Library {
        /// The file.
        path: PathBuf,
        /// SHA-256 of its bytes.
        sha256: [u8; 32],
    },
}

impl Origin {
    /// `builtin`, or the library's SHA-256 in hex: what the record's provenance states.
    pub fn digest_label(&self) -> String {
        match self {
            Origin::Builtin => "builtin".to_owned(),
            Origin::Library { sha256, .. } => hex(sha256),
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A plugin's self-description, copied out of the library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it provides.
    pub kinds: Kinds,
    /// The station API major it was built against.
    pub api_major: u32,
}

impl Metadata {
    /// The kinds as words: `policy`, `confinement`, `sink`.
    pub fn kind_names(&self) -> Vec<&'static str> {
        [
            (Kinds::POLICY, "policy"),
            (Kinds::CONFINEMENT, "confinement"),
            (Kinds::SINK, "sink"),
        ]
        .into_iter()
        .filter(|(k, _)| self.kinds.contains(*k))
        .map(|(_, n)| n)
        .collect()
    }
}

/// A plugin ready to build station objects; built-in and loaded alike.
#[derive(Clone)]
pub struct Plugin {
    metadata: Metadata,
    module: PluginModuleRef,
    origin: Origin,
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("metadata", &self.metadata)
            .field("origin", &self.origin)
            .finish()
    }
}

/// Why a plugin library was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be inspected or read.
    #[error("plugin {path}: {source}")]
    Io {
        /// The library.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a regular file (a directory, a device, a symlink).
    #[error("plugin {path}: not a regular file")]
    NotRegularFile {
        /// The library.
        path: PathBuf,
    },
    /// Group or others may write it.
    #[error("plugin {path}: mode {mode:04o} lets group or others modify it")]
    Writable {
        /// The library.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Owned by another user.
    #[error("plugin {path}: owned by uid {owner}, not root or the current user")]
    Owner {
        /// The library.
        path: PathBuf,
        /// The owner.
        owner: u32,
    },
    /// The bytes differ from the profile's pin.
    #[error("plugin {path}: sha256 {found} does not match the pinned {expected}")]
    PinMismatch {
        /// The library.
        path: PathBuf,
        /// The pin.
        expected: String,
        /// The file's digest.
        found: String,
    },
    /// abi_stable refused it; `summary` is one line.
    #[error("plugin {path}: {summary}")]
    Abi {
        /// The library.
        path: PathBuf,
        /// What differed.
        summary: String,
    },
    /// The plugin describes an API major this host does not speak.
    #[error("plugin {path}: reports station API major {found}, this host speaks {API_MAJOR}")]
    ApiMajor {
        /// The library.
        path: PathBuf,
        /// What it reports.
        found: u32,
    },
}

impl Plugin {
    /// Wraps a built-in plugin's root module.
    pub fn builtin(module: PluginModuleRef) -> Plugin {
        let metadata = read_metadata(module);
        Plugin {
            metadata,
            module,
            origin: Origin::Builtin,
        }
    }

    /// Checks and loads the plugin library at `path`.
    ///
    /// # Errors
    /// See [`LoadError`]: every check happens before the library is opened.
    pub fn load(path: &Path, pin: Option<&[u8; 32]>) -> Result<Plugin, LoadError> {
        let sha256 = check_file(path, pin)?;
        let abi = |summary: String| LoadError::Abi {
            path: path.to_owned(),
            summary,
        };
        let header = lib_header_from_path(path).map_err(|e| abi(summarize(&e, None)))?;
        if header.layout().is_none() {
            return Err(abi(
                "exports no type layout to check; refusing to load it unchecked".into(),
            ));
        }
        let module = header.init_root_module::<PluginModuleRef>().map_err(|e| {
            abi(summarize(
                &e,
                Some(header.version_strings().version.to_string()),
            ))
        })?;
        let metadata = read_metadata(module);
        if metadata.api_major != API_MAJOR {
            return Err(LoadError::ApiMajor {
                path: path.to_owned(),
                found: metadata.api_major,
            });
        }
        Ok(Plugin {
            metadata,
            module,
            origin: Origin::Library {
                path: path.to_owned(),
                sha256,
            },
        })
    }

    /// Its self-description.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Where its code came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Builds its policy evaluator from a config section.
    ///
    /// # Errors
    /// The plugin's own error, `unsupported` if it provides no evaluator.
    pub fn policy_evaluator(&self, config: &str) -> Result<PolicyEvaluatorBox, PluginError> {
        (self.module.new_policy_evaluator())(RStr::from(config)).into_result()
    }

    /// Builds its confinement backend from a config section.
    ///
    /// # Errors
    /// The plugin's own error, `unsupported` if it provides no backend.
    pub fn confinement_backend(&self, config: &str) -> Result<ConfinementBackendBox, PluginError> {
        (self.module.new_confinement_backend())(RStr::from(config)).into_result()
    }

    /// Builds its audit sink from a config section.
    ///
    /// # Errors
    /// The plugin's own error, `unsupported` if it provides no sink.
    pub fn audit_sink(&self, config: &str) -> Result<AuditSinkBox, PluginError> {
        (self.module.new_audit_sink())(RStr::from(config)).into_result()
    }
}

fn read_metadata(module: PluginModuleRef) -> Metadata {
    let m = (module.metadata())();
    Metadata {
        name: m.name.into(),
        version: m.version.into(),
        kinds: m.kinds,
        api_major: m.api_major,
    }
}

/// The checks made before a library is opened; returns its SHA-256.
fn check_file(path: &Path, pin: Option<&[u8; 32]>) -> Result<[u8; 32], LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(LoadError::NotRegularFile {
            path: path.to_owned(),
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(LoadError::Writable {
                path: path.to_owned(),
                mode,
            });
        }
        let me = rustix::process::getuid().as_raw();
        if meta.uid() != 0 && meta.uid() != me {
            return Err(LoadError::Owner {
                path: path.to_owned(),
                owner: meta.uid(),
            });
        }
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let sha256: [u8; 32] = Sha256::digest(&bytes).into();
    if let Some(expected) = pin
        && *expected != sha256
    {
        return Err(LoadError::PinMismatch {
            path: path.to_owned(),
            expected: hex(expected),
            found: hex(&sha256),
        });
    }
    Ok(sha256)
}

/// Turns abi_stable's error (often hundreds of lines) into one line.
fn summarize(e: &LibraryError, found_version: Option<String>) -> String {
    let first_line = |s: &str| {
        s.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("unknown error")
            .to_owned()
    };
    match e {
        LibraryError::OpenError { err, .. } => {
            format!("cannot be opened: {}", first_line(&err.to_string()))
        }
        LibraryError::GetSymbolError { .. } => {
            "is not an Aegis plugin (it exports no abi_stable root module)".to_owned()
        }
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => format!(
            "built against station API {actual_version}, this host speaks {expected_version}"
        ),
        LibraryError::AbiInstability(err) => {
            let text = err.to_string();
            format!(
                "built against station API {}, whose types differ from this host's {}; first difference: {}",
                found_version.as_deref().unwrap_or("(unknown version)"),
                aegis_station_api_version(),
                first_difference(&text)
            )
        }
        LibraryError::InvalidAbiHeader(_) => {
            "built with an abi_stable version this host cannot load".to_owned()
        }
        LibraryError::RootModule { err, .. } => {
            format!("its root module failed: {}", first_line(&err.to_string()))
        }
        other => first_line(&other.to_string()),
    }
}

fn aegis_station_api_version() -> String {
    let v = <PluginModuleRef as abi_stable::library::RootModule>::VERSION_STRINGS;
    v.version.to_string()
}

/// Reads abi_stable's layout report (often hundreds of lines) for the first mismatch:
/// the type it was found in, what differed, and the expected and found values.
fn first_difference(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let Some(err) = lines.iter().position(|l| l.starts_with("Error:")) else {
        return "layout mismatch".to_owned();
    };
    let what = lines[err].trim_start_matches("Error:").trim();
    let after = |label: &str| {
        lines[err..]
            .iter()
            .position(|l| *l == label)
            .and_then(|i| lines.get(err + i + 1))
            .copied()
    };
    let ty = lines[..err]
        .iter()
        .rposition(|l| l.starts_with("Layout of expected type:"))
        .and_then(|i| lines[i..err].iter().find_map(|l| l.strip_prefix("type:")));
    let mut out = match ty {
        Some(t) => format!("{t}: {what}"),
        None => what.to_owned(),
    };
    if let (Some(e), Some(f)) = (after("Expected:"), after("Found:")) {
        out.push_str(&format!(" (expected {e}, found {f})"));
    }
    out.chars().take(300).collect()
}
