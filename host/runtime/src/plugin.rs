//! Loading plugin libraries, and the one handle type built-in and loaded plugins share.
//!
//! # Guarantees
//! - The library that is loaded is the file that was checked and hashed. The path is
//!   walked once, one component at a time through directory descriptors, and the file is
//!   opened once; its type, owner, mode and SHA-256 are taken through that descriptor,
//!   and the dynamic loader is handed the same descriptor (`/proc/self/fd/N`). Renaming
//!   or replacing anything on the path after the check changes nothing that is loaded.
//! - The file must be a regular file (not a symlink to one), owned by root or the
//!   current user, not writable by group or others, and match the profile's pinned
//!   SHA-256 if one is given.
//! - Every directory the walk passes through — each ancestor, and each directory holding
//!   a symlink that is followed on the way — must be owned by root or the current user
//!   and not writable by group or others, unless it is sticky (like `/tmp`: others may
//!   add entries but not rename or remove ours). So no other non-root user can choose
//!   which file the path names.
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
//! - The file's owner (the current user or root) can still rewrite it in place after it
//!   was hashed; such a writer already has the host's authority.
//! - The libraries a plugin itself depends on (`DT_NEEDED`) are found by the system's
//!   loader rules, not by these checks.
//! - Libraries are never unloaded, and the descriptor each was loaded through stays open
//!   for the life of the process (see [`CheckedLibrary::load`]).
//!
//! # Limits
//! - Linux only: loading goes through `/proc/self/fd`, which must be mounted.
//! - At most [`MAX_SYMLINKS`] symlinks are followed in one path, as the kernel does.

mod walk;

use abi_stable::library::{LibraryError, lib_header_from_path};
use abi_stable::std_types::RStr;
use aegis_record::digest::encode_hex;
use aegis_station_api::{
    API_MAJOR, AuditSinkBox, ConfinementBackendBox, Kinds, PluginError, PluginModuleRef,
    PolicyEvaluatorBox,
};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The most symlinks one plugin path may pass through; the kernel's own limit, so a
/// path that loads here would also open there.
pub const MAX_SYMLINKS: usize = 40;

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
            Origin::Library { sha256, .. } => encode_hex(sha256),
        }
    }
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
    /// A directory on the way to it lets group or others rename or replace its entries.
    #[error(
        "plugin {path}: directory {dir} has mode {mode:04o}, which lets group or others replace what the path names"
    )]
    DirectoryWritable {
        /// The library.
        path: PathBuf,
        /// The directory, as reached by the walk (symlinks followed).
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A directory on the way to it is owned by another user.
    #[error("plugin {path}: directory {dir} is owned by uid {owner}, not root or the current user")]
    DirectoryOwner {
        /// The library.
        path: PathBuf,
        /// The directory, as reached by the walk (symlinks followed).
        dir: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// This platform has no way to load a library through the descriptor that was checked.
    #[error("plugin {path}: loading plugin libraries needs Linux (/proc/self/fd)")]
    Unsupported {
        /// The library.
        path: PathBuf,
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

    /// Checks and loads the plugin library at `path`: [`CheckedLibrary::open`], then
    /// [`CheckedLibrary::load`].
    ///
    /// # Errors
    /// See [`LoadError`]: every file and directory check happens before the library is
    /// handed to the dynamic loader.
    pub fn load(path: &Path, pin: Option<&[u8; 32]>) -> Result<Plugin, LoadError> {
        CheckedLibrary::open(path, pin)?.load()
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

/// A plugin library opened and checked but not yet loaded: the descriptor whose bytes were
/// hashed is the one [`CheckedLibrary::load`] hands to the dynamic loader.
#[derive(Debug)]
pub struct CheckedLibrary {
    path: PathBuf,
    file: File,
    sha256: [u8; 32],
}

impl CheckedLibrary {
    /// Walks `path` (relative paths start at the working directory), checks every
    /// directory on the way and the file itself, opens the file once and hashes it
    /// through that descriptor. Nothing of the library runs yet.
    ///
    /// # Errors
    /// [`LoadError::Io`] if the path cannot be walked or read (too many symlinks, a
    /// missing component), [`LoadError::NotRegularFile`], [`LoadError::Writable`],
    /// [`LoadError::Owner`], [`LoadError::DirectoryWritable`],
    /// [`LoadError::DirectoryOwner`], [`LoadError::PinMismatch`].
    pub fn open(path: &Path, pin: Option<&[u8; 32]>) -> Result<CheckedLibrary, LoadError> {
        let file = walk::open_checked(path)?;
        let sha256 = hash(&file).map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?;
        if let Some(expected) = pin
            && *expected != sha256
        {
            return Err(LoadError::PinMismatch {
                path: path.to_owned(),
                expected: encode_hex(expected),
                found: encode_hex(&sha256),
            });
        }
        Ok(CheckedLibrary {
            path: path.to_owned(),
            file,
            sha256,
        })
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the bytes read through its descriptor.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// Loads the checked file — through its descriptor, never its path — and reads its
    /// root module.
    ///
    /// The descriptor is kept open for the life of the process, as the library is. The
    /// loader remembers a library by the name it was opened under, `/proc/self/fd/N`; if
    /// N were closed and reused for another plugin, that name would hand back the first
    /// library instead of the second.
    ///
    /// # Errors
    /// [`LoadError::Abi`] (abi_stable refused it), [`LoadError::ApiMajor`],
    /// [`LoadError::Unsupported`] off Linux.
    pub fn load(self) -> Result<Plugin, LoadError> {
        let CheckedLibrary { path, file, sha256 } = self;
        let by_fd = descriptor_path(&path, &file)?;
        let abi = |summary: String| LoadError::Abi {
            path: path.clone(),
            summary: summary.replace(&by_fd.display().to_string(), &path.display().to_string()),
        };
        let header = lib_header_from_path(&by_fd);
        // From here the loader may hold the name `/proc/self/fd/N`, whatever happened.
        std::mem::forget(file);
        let header = header.map_err(|e| abi(summarize(&e, None)))?;
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
                path,
                found: metadata.api_major,
            });
        }
        Ok(Plugin {
            metadata,
            module,
            origin: Origin::Library { path, sha256 },
        })
    }
}

#[cfg(target_os = "linux")]
fn descriptor_path(_path: &Path, file: &File) -> Result<PathBuf, LoadError> {
    use std::os::fd::AsRawFd as _;
    Ok(PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())))
}

#[cfg(not(target_os = "linux"))]
fn descriptor_path(path: &Path, _file: &File) -> Result<PathBuf, LoadError> {
    Err(LoadError::Unsupported {
        path: path.to_owned(),
    })
}

/// SHA-256 of everything readable through `file`, streamed: debug plugin builds run to
/// tens of megabytes.
fn hash(mut file: &File) -> std::io::Result<[u8; 32]> {
    use std::io::Read as _;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(hasher.finalize().into()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
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
