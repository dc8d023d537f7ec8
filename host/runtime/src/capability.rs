//! The capability station: tool manifests in, grants out. Always the host's, never a
//! plugin.
//!
//! # Guarantees
//! - **Default-deny.** Only a registered manifest mints a [`Grant`]; an unregistered
//!   tool or a capability the manifest does not declare is refused before any effect.
//! - **A grant is proof.** [`Grant`] has no public constructor: only
//!   [`ToolRegistry::resolve`] mints one, and [`Grant::narrow`] can only shrink it.
//! - **Least authority.** A call that names a capability gets only that axis of the
//!   manifest: `fs.read` gets the read roots and the write roots' contents, read-only;
//!   `fs.write` the write roots; `net.http` the destinations. A name that is not exactly
//!   one of these three ([`Capability`]'s `FromStr`: no case folding, no trimming) is
//!   refused as undeclared.
//! - **The axes a grant carries are known before it is minted.** [`ToolRegistry::axes`]
//!   says which [`Capability`] axes [`ToolRegistry::resolve`] would hand over for the
//!   same call, and [`Grant::axes`] says which one did; both come from the same
//!   computation. A write root is readable in the sandbox, so a grant with write roots
//!   carries `fs.read` as well as `fs.write`. The pipeline asks the policy about every
//!   one of them (see `pipeline`).
//! - **Limits only narrow.** Policy limits are applied as a minimum on every axis; a
//!   narrowed grant never exceeds its parent (property-tested).
//! - **Roots are held by handle.** Registration resolves every root once (symlinks,
//!   `..`), opens it, and keeps the open directory ([`HeldRoot`]) with its device and
//!   inode. Every grant hands over that same directory: the sandbox preopens it through
//!   the held descriptor and a host handler resolves paths beneath it, so no call
//!   resolves a root's path again. Replacing a root's path with a symlink or another
//!   directory between calls changes nothing a later call sees.
//! - **A removed root is refused.** [`Grant::check_roots`] checks each root of the
//!   grant on its handle (`fstat`, no path lookup): a directory with no links left
//!   (removed since registration) is refused as [`RootGone`], naming the root. The
//!   pipeline calls it when execution starts, just before the tool is handed its roots,
//!   so the check sits next to the use rather than in minting (stations 1–2 make no
//!   system call).
//! - **Per-manifest work is done once.** Registration precomputes, for each way a call
//!   can name a capability, what the grant hands over, the axes it carries, its record
//!   form (with the decision axes of its single root or destination) and its id's
//!   prefix; minting a grant shares these, checks the roots and numbers it.
//! - **A component is named by its bytes.** Registration reads a wasm tool's component
//!   once and keeps its SHA-256; every grant for the tool carries it into the record
//!   (`component_digest`), and the sandbox refuses to run a file whose bytes no longer
//!   match it (see [`crate::sandbox::Sandbox::run`]).
//!
//! # Non-guarantees
//! - A manifest states authority; it does not enforce it. The sandbox (or, for host
//!   tools, the checks in the handler context) does.
//! - A root renamed or moved since registration (rather than removed) is still the
//!   directory the grant hands over, wherever it now lives; the record names the path
//!   it had at registration. Only removal is detected (its link count drops to zero).
//! - A root removed after the grant was minted and before the tool touches it is not
//!   refused: the call gets the removed, empty directory, where the kernel refuses to
//!   create anything.

use aegis_record::ComponentDigest;
use aegis_record::json::MAX_SAFE_INTEGER;
use cap_std::fs::Dir;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// An axis of a grant: what a call may be handed. Policy rules keyed on a capability
/// apply to every call whose grant carries that axis, whatever the call named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `fs.read`: reading beneath a root (read roots, and write roots too).
    FsRead,
    /// `fs.write`: writing beneath a write root.
    FsWrite,
    /// `net.http`: reaching a declared destination.
    NetHttp,
}

impl Capability {
    /// Every axis, in the fixed order the policy is asked about them.
    pub const ALL: [Capability; 3] = [Capability::FsRead, Capability::FsWrite, Capability::NetHttp];

    /// The name rules and the record use.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::FsRead => "fs.read",
            Capability::FsWrite => "fs.write",
            Capability::NetHttp => "net.http",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A capability name that is not exactly `fs.read`, `fs.write` or `net.http`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown capability {0:?}: expected fs.read, fs.write or net.http")]
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;

    /// Exact names only: `FS.WRITE`, ` fs.write` or `fs.write\n` are not `fs.write`,
    /// and are refused rather than guessed at.
    fn from_str(s: &str) -> Result<Capability, UnknownCapability> {
        Capability::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCapability(s.to_owned()))
    }
}

/// Default ceilings for a manifest that names none.
pub const DEFAULT_LIMITS: Limits = Limits {
    max_memory_bytes: 64 << 20,
    max_wall_ms: 5_000,
    max_output_bytes: 1 << 20,
};

/// Resource ceilings for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Total linear memory.
    pub max_memory_bytes: u64,
    /// Wall-clock time.
    pub max_wall_ms: u64,
    /// Bytes of output.
    pub max_output_bytes: u64,
}

/// Ceilings a policy asks for; each only narrows. One type for the host and the policy
/// stations, converting to and from the ABI's [`aegis_station_api::Limits`].
pub use aegis_station_api::NarrowingLimits;

impl Limits {
    /// The smaller of each ceiling.
    #[must_use]
    pub fn narrowed(self, by: &NarrowingLimits) -> Limits {
        let min = |a: u64, b: Option<u64>| b.map_or(a, |b| a.min(b));
        Limits {
            max_memory_bytes: min(self.max_memory_bytes, by.max_memory_bytes),
            max_wall_ms: min(self.max_wall_ms, by.max_wall_ms),
            max_output_bytes: min(self.max_output_bytes, by.max_output_bytes),
        }
    }
}

/// What runs the tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolKind {
    /// A WebAssembly component, run in the per-call sandbox.
    Wasm {
        /// The component file.
        component: PathBuf,
    },
    /// A host handler (Model B): checked, not isolated.
    Host,
    /// A tool of a server this host only relays to (an MCP server behind `aegis
    /// wrap`). The host never runs it: its grant carries no roots or destinations (the
    /// server's own authority is not the host's to grant) and its id starts
    /// `relayed-`, so the record does not read as a sandboxed run.
    Relayed,
}

/// One allowed network destination.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NetRule {
    /// Host name or address.
    pub host: String,
    /// Allowed ports.
    pub ports: Vec<u16>,
    /// Allowed methods, upper case.
    pub methods: Vec<String>,
}

/// A tool's declared authority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolManifest {
    /// Unique id.
    pub id: String,
    /// What runs it.
    pub kind: ToolKind,
    /// Roots it may read beneath.
    pub fs_read: Vec<PathBuf>,
    /// Roots it may write beneath.
    pub fs_write: Vec<PathBuf>,
    /// Destinations it may reach.
    pub net: Vec<NetRule>,
    /// Its ceilings ([`DEFAULT_LIMITS`] when not given).
    pub limits: Limits,
}

/// Why a manifest could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistrationError {
    /// Another manifest has this id.
    #[error("tool {0:?} is already registered")]
    DuplicateId(String),
    /// A root does not resolve to a directory.
    #[error("tool {tool:?}: root {root} does not resolve: {source}")]
    Root {
        /// The tool.
        tool: String,
        /// The root as given.
        root: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A root resolves to something other than a directory.
    #[error("tool {tool:?}: root {root} is not a directory")]
    NotADirectory {
        /// The tool.
        tool: String,
        /// The root as given.
        root: PathBuf,
    },
    /// A root was replaced while it was being registered: the directory opened is not
    /// the one its canonical path names.
    #[error("tool {tool:?}: root {root} changed while it was being registered")]
    RootChanged {
        /// The tool.
        tool: String,
        /// The root as given.
        root: PathBuf,
    },
    /// A wasm tool whose component file is missing, or is not a file.
    #[error("tool {tool:?}: component {component} is not a readable file")]
    Component {
        /// The tool.
        tool: String,
        /// The component path.
        component: PathBuf,
    },
    /// A wasm tool's component file could not be read to take its digest.
    #[error("tool {tool:?}: component {component}: {source}")]
    ComponentRead {
        /// The tool.
        tool: String,
        /// The component path.
        component: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A ceiling of zero, or beyond what the record can carry.
    #[error("tool {tool:?}: {field} must be between 1 and 2^53 - 1")]
    Limit {
        /// The tool.
        tool: String,
        /// Which ceiling.
        field: &'static str,
    },
    /// An empty id or host.
    #[error("tool {tool:?}: {what}")]
    Invalid {
        /// The tool.
        tool: String,
        /// What is wrong.
        what: &'static str,
    },
}

/// Why a call got no grant. Each variant names the axis refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CapabilityDenied {
    /// No manifest for the tool.
    #[error("tool {0:?} is not registered")]
    Unregistered(String),
    /// The tool's manifest does not declare the capability asked for.
    #[error("tool {tool:?} does not declare capability {capability:?}")]
    Undeclared {
        /// The tool.
        tool: String,
        /// The capability.
        capability: String,
    },
    /// The grant would carry an axis the policy was not asked about (never expected:
    /// the axes asked and the grant come from one computation; refused if they differ).
    #[error("tool {tool:?}: the grant would carry {capability}, which policy was not asked about")]
    Unasked {
        /// The tool.
        tool: String,
        /// The axis.
        capability: Capability,
    },
}

/// A root of a grant was removed since registration (its held directory has no links
/// left), or its handle can no longer be examined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool {tool:?}: root {root} was removed since registration")]
pub struct RootGone {
    /// The tool.
    pub tool: String,
    /// The root.
    pub root: PathBuf,
}

impl CapabilityDenied {
    /// The record's `stop` for this refusal: its cause, about the axis refused.
    pub fn stop(&self) -> aegis_record::line::Stop {
        use aegis_record::line::Stop;
        use aegis_record::refusal::Cause;
        match self {
            CapabilityDenied::Unregistered(_) => Stop::new(Cause::Unregistered),
            CapabilityDenied::Undeclared { .. } => Stop::about(Cause::Undeclared, self.axis()),
            CapabilityDenied::Unasked { .. } => Stop::about(Cause::Unasked, self.axis()),
        }
    }

    /// The axis refused, for the record's `denied_capability`.
    pub fn axis(&self) -> &str {
        match self {
            CapabilityDenied::Unregistered(_) => "tool.registry",
            CapabilityDenied::Undeclared { capability, .. } => capability,
            CapabilityDenied::Unasked { capability, .. } => capability.as_str(),
        }
    }
}

/// A granted root, opened once when the tool was registered.
///
/// Every grant that carries the root shares this one open directory, so every call
/// reaches the same directory (same device and inode) whatever has happened to its path
/// since. Two tools naming the same directory share one [`HeldRoot`].
#[derive(Debug)]
pub struct HeldRoot {
    /// As the first manifest to name it spelled it.
    given: PathBuf,
    /// Canonical at registration.
    path: PathBuf,
    dir: Dir,
    dev: u64,
    ino: u64,
}

impl PartialEq for HeldRoot {
    fn eq(&self, other: &HeldRoot) -> bool {
        (self.dev, self.ino, &self.path) == (other.dev, other.ino, &other.path)
    }
}

impl Eq for HeldRoot {}

impl HeldRoot {
    /// Opens `root` (following symlinks, as resolving its canonical path does) and
    /// checks that the directory opened is the one the canonical path names, so that a
    /// swap during registration is refused rather than held.
    fn open(tool: &str, root: &Path) -> Result<HeldRoot, RegistrationError> {
        let io = |source| RegistrationError::Root {
            tool: tool.to_owned(),
            root: root.to_owned(),
            source,
        };
        let canonical = std::fs::canonicalize(root).map_err(io)?;
        // Registration is where the host's ambient authority over the file system is
        // turned into handles; calls only ever use the handles.
        let dir = Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) {
                RegistrationError::NotADirectory {
                    tool: tool.to_owned(),
                    root: root.to_owned(),
                }
            } else {
                io(e)
            }
        })?;
        let held = rustix::fs::fstat(&dir).map_err(|e| io(e.into()))?;
        let named = rustix::fs::stat(&canonical).map_err(|e| io(e.into()))?;
        if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino) {
            return Err(RegistrationError::RootChanged {
                tool: tool.to_owned(),
                root: root.to_owned(),
            });
        }
        Ok(HeldRoot {
            given: root.to_owned(),
            path: canonical,
            dir,
            dev: held.st_dev,
            ino: held.st_ino,
        })
    }

    /// The canonical path the root had at registration (the name the sandbox gives the
    /// guest, and the record's).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root as the manifest that first named it spelled it.
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// The open directory: resolve paths beneath the root through it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The directory's device and inode, taken at registration.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    /// Whether the held directory is still in the file system, by `fstat` on the
    /// handle (no path is looked up): a directory removed since registration has no
    /// links left.
    ///
    /// # Errors
    /// The directory was removed, or `fstat` failed.
    pub fn check(&self) -> std::io::Result<()> {
        let st = rustix::fs::fstat(&self.dir)?;
        if st.st_nlink == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "removed since registration",
            ));
        }
        Ok(())
    }

    /// A path that names the held directory itself, not whatever the root's path names
    /// now: `/proc/self/fd/<n>` of the held descriptor, for an API that only takes a
    /// path (wasmtime-wasi's preopens). Opening it reaches this directory as long as
    /// `self` is alive; a caller should still compare what it opened with
    /// [`HeldRoot::identity`], since the path is only as good as the `/proc` mounted.
    #[cfg(target_os = "linux")]
    pub fn fd_path(&self) -> PathBuf {
        use std::os::fd::{AsFd, AsRawFd};
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_fd().as_raw_fd()))
    }
}

/// What a grant hands over for one way of naming a capability, computed once per
/// manifest at registration.
#[derive(Debug, PartialEq, Eq)]
struct Scope {
    tool_id: String,
    fs_read: Vec<Arc<HeldRoot>>,
    fs_write: Vec<Arc<HeldRoot>>,
    fs_read_paths: Vec<PathBuf>,
    fs_write_paths: Vec<PathBuf>,
    net: Vec<NetRule>,
    axes: Vec<Capability>,
    /// Every distinct root, each checked once when a call starts ([`Grant::check_roots`]).
    distinct: Vec<Arc<HeldRoot>>,
    /// The grant's only root, when read and write roots name exactly one directory.
    single_root: Option<Arc<HeldRoot>>,
    /// The manifest's ceilings, before the policy narrows them.
    limits: Limits,
    /// The record form, less the grant id and the (narrowed) ceilings.
    record: aegis_record::CapabilityGrant,
    /// `single_root` as the record's decision axes state it.
    fs_axis: Option<aegis_record::FsAxis>,
    /// The single destination as the record's decision axes state it.
    net_axis: Option<aegis_record::NetAxis>,
    /// `grant-<tool>-` (`relayed-<tool>-` for a relayed tool): a grant id is this and
    /// the grant's number.
    id_prefix: String,
    /// The tool runs in a server the host relays to, never here.
    relayed: bool,
}

impl Scope {
    fn new(
        tool_id: &str,
        fs_read: Vec<Arc<HeldRoot>>,
        fs_write: Vec<Arc<HeldRoot>>,
        net: Vec<NetRule>,
        limits: Limits,
        component_digest: Option<ComponentDigest>,
    ) -> Scope {
        let paths = |r: &[Arc<HeldRoot>]| r.iter().map(|h| h.path.clone()).collect::<Vec<_>>();
        let (fs_read_paths, fs_write_paths) = (paths(&fs_read), paths(&fs_write));
        let axes = carried(&fs_read_paths, &fs_write_paths, &net);
        let mut distinct: Vec<Arc<HeldRoot>> = Vec::new();
        for h in fs_read.iter().chain(&fs_write) {
            if !distinct.iter().any(|d| Arc::ptr_eq(d, h)) {
                distinct.push(h.clone());
            }
        }
        let single_root = match distinct.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        };
        let fs_axis = single_root.as_ref().map(|h| aegis_record::FsAxis {
            path_raw: h.given.display().to_string(),
            path_canonical: h.path.display().to_string(),
        });
        let net_axis = match net.as_slice() {
            [rule] if rule.ports.len() == 1 => Some(aegis_record::NetAxis {
                host: rule.host.clone(),
                port: rule.ports[0],
            }),
            _ => None,
        };
        let shown = |p: &[PathBuf]| p.iter().map(|p| p.display().to_string()).collect();
        let record = aegis_record::CapabilityGrant {
            grant_id: String::new(),
            tool_id: tool_id.to_owned(),
            fs: (!fs_read_paths.is_empty() || !fs_write_paths.is_empty()).then(|| {
                aegis_record::FsScope {
                    read_paths: shown(&fs_read_paths),
                    write_paths: shown(&fs_write_paths),
                }
            }),
            net: (!net.is_empty()).then(|| aegis_record::NetScope {
                http: net
                    .iter()
                    .map(|r| aegis_record::HttpRule {
                        host: r.host.clone(),
                        ports: r.ports.clone(),
                        methods: r.methods.clone(),
                    })
                    .collect(),
            }),
            max_memory_bytes: Default::default(),
            max_wall_ms: Default::default(),
            max_output_bytes: Default::default(),
            component_digest,
        };
        Scope {
            tool_id: tool_id.to_owned(),
            fs_read,
            fs_write,
            fs_read_paths,
            fs_write_paths,
            net,
            axes,
            distinct,
            single_root,
            limits,
            record,
            fs_axis,
            net_axis,
            id_prefix: format!("grant-{tool_id}-"),
            relayed: false,
        }
    }

    /// A relayed tool's scope: nothing handed over, ids marked `relayed-`.
    fn relayed(tool_id: &str, limits: Limits) -> Scope {
        Scope {
            id_prefix: format!("relayed-{tool_id}-"),
            relayed: true,
            ..Scope::new(tool_id, Vec::new(), Vec::new(), Vec::new(), limits, None)
        }
    }
}

/// Authority minted for one call. Only [`ToolRegistry::resolve`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    grant_id: String,
    /// What it hands over, shared with every grant for the same tool and capability.
    scope: Arc<Scope>,
    limits: Limits,
}

impl Grant {
    /// Checks each distinct root of the grant on its held handle ([`HeldRoot::check`],
    /// one `fstat` each, no path lookup).
    ///
    /// # Errors
    /// [`RootGone`] naming the first root removed since registration.
    pub fn check_roots(&self) -> Result<(), RootGone> {
        for root in &self.scope.distinct {
            if root.check().is_err() {
                return Err(RootGone {
                    tool: self.tool_id().to_owned(),
                    root: root.path.clone(),
                });
            }
        }
        Ok(())
    }

    /// Names the grant in the record.
    pub fn id(&self) -> &str {
        &self.grant_id
    }
    /// The tool it was minted for.
    pub fn tool_id(&self) -> &str {
        &self.scope.tool_id
    }
    /// Canonical roots readable (as they were at registration).
    pub fn fs_read(&self) -> &[PathBuf] {
        &self.scope.fs_read_paths
    }
    /// Canonical roots writable (as they were at registration).
    pub fn fs_write(&self) -> &[PathBuf] {
        &self.scope.fs_write_paths
    }
    /// The readable roots' held directories, in [`Grant::fs_read`] order.
    pub fn read_roots(&self) -> &[Arc<HeldRoot>] {
        &self.scope.fs_read
    }
    /// The writable roots' held directories, in [`Grant::fs_write`] order.
    pub fn write_roots(&self) -> &[Arc<HeldRoot>] {
        &self.scope.fs_write
    }
    /// Reachable destinations.
    pub fn net(&self) -> &[NetRule] {
        &self.scope.net
    }
    /// Ceilings.
    pub fn limits(&self) -> Limits {
        self.limits
    }
    /// SHA-256 of the component the tool was registered with; `None` for host tools.
    pub fn component_digest(&self) -> Option<ComponentDigest> {
        self.scope.record.component_digest
    }

    /// True for a tool the host only relays to ([`ToolKind::Relayed`]): the grant hands
    /// nothing over and the host must not run the tool itself.
    pub fn is_relayed(&self) -> bool {
        self.scope.relayed
    }

    /// The axes this grant carries, in [`Capability::ALL`] order.
    pub fn axes(&self) -> &[Capability] {
        &self.scope.axes
    }

    /// The grant's only filesystem root as `(as the manifest gave it, canonical)`, when
    /// its read and write roots together name exactly one directory.
    pub fn single_root(&self) -> Option<(&Path, &Path)> {
        self.scope
            .single_root
            .as_ref()
            .map(|h| (h.given.as_path(), h.path.as_path()))
    }

    /// The grant's only network destination, when it has one rule with one port.
    pub fn single_destination(&self) -> Option<(&str, u16)> {
        self.scope
            .net_axis
            .as_ref()
            .map(|n| (n.host.as_str(), n.port))
    }

    /// [`Grant::single_root`] as the record's decision axes state it (built once per
    /// manifest).
    pub fn fs_axis(&self) -> Option<&aegis_record::FsAxis> {
        self.scope.fs_axis.as_ref()
    }

    /// [`Grant::single_destination`] as the record's decision axes state it (built once
    /// per manifest).
    pub fn net_axis(&self) -> Option<&aegis_record::NetAxis> {
        self.scope.net_axis.as_ref()
    }

    /// The same grant with smaller ceilings: never larger on any axis.
    #[must_use]
    pub fn narrow(&self, by: &NarrowingLimits) -> Grant {
        Grant {
            limits: self.limits.narrowed(by),
            ..self.clone()
        }
    }

    /// The grant as the record states it (its form is built once per manifest; this
    /// copies it and adds the id and the ceilings).
    pub fn to_record(&self) -> aegis_record::CapabilityGrant {
        let safe =
            |n: u64| aegis_record::json::SafeInt::new(n.min(MAX_SAFE_INTEGER)).unwrap_or_default();
        aegis_record::CapabilityGrant {
            grant_id: self.grant_id.clone(),
            max_memory_bytes: safe(self.limits.max_memory_bytes),
            max_wall_ms: safe(self.limits.max_wall_ms),
            max_output_bytes: safe(self.limits.max_output_bytes),
            ..self.scope.record.clone()
        }
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// The axes a grant of these roots and destinations carries, in [`Capability::ALL`]
/// order. A write root is readable in the sandbox, so it carries `fs.read` too.
fn carried(fs_read: &[PathBuf], fs_write: &[PathBuf], net: &[NetRule]) -> Vec<Capability> {
    Capability::ALL
        .into_iter()
        .filter(|c| match c {
            Capability::FsRead => !fs_read.is_empty() || !fs_write.is_empty(),
            Capability::FsWrite => !fs_write.is_empty(),
            Capability::NetHttp => !net.is_empty(),
        })
        .collect()
}

/// A registered tool: its manifest and, for each way a call can name a capability
/// (none, `fs.read`, `fs.write`, `net.http`), what a grant hands over.
#[derive(Debug)]
struct Registered {
    manifest: ToolManifest,
    /// Indexed by [`scope_index`].
    scopes: [Arc<Scope>; 4],
}

/// Which of a tool's precomputed scopes a call naming `named` gets.
fn scope_index(named: Option<Capability>) -> usize {
    match named {
        None => 0,
        Some(Capability::FsRead) => 1,
        Some(Capability::FsWrite) => 2,
        Some(Capability::NetHttp) => 3,
    }
}

/// Registered tools. Built once; read by every call.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    /// Every root opened so far, by canonical path: a directory two manifests name is
    /// held once, under the first spelling.
    held: BTreeMap<PathBuf, Arc<HeldRoot>>,
    minted: std::sync::atomic::AtomicU64,
    /// Set by [`ToolRegistry::relay_unregistered`]: the ceilings of the relayed grant
    /// an unregistered tool gets.
    relay_unregistered: Option<Limits>,
}

impl ToolRegistry {
    /// An empty registry: every call is refused until a manifest is registered.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Checks and stores a manifest, opening each of its roots once (see [`HeldRoot`])
    /// and precomputing what its grants hand over.
    ///
    /// # Errors
    /// See [`RegistrationError`].
    pub fn register(&mut self, mut m: ToolManifest) -> Result<(), RegistrationError> {
        let tool = m.id.clone();
        if tool.is_empty() {
            return Err(RegistrationError::Invalid {
                tool,
                what: "empty id",
            });
        }
        if self.tools.contains_key(&tool) {
            return Err(RegistrationError::DuplicateId(tool));
        }
        if m.kind == ToolKind::Relayed
            && (!m.fs_read.is_empty() || !m.fs_write.is_empty() || !m.net.is_empty())
        {
            return Err(RegistrationError::Invalid {
                tool,
                what: "a relayed tool with roots or destinations (the host cannot confine its server)",
            });
        }
        let mut digest = None;
        if let ToolKind::Wasm { component } = &m.kind {
            if !component.is_file() {
                return Err(RegistrationError::Component {
                    tool,
                    component: component.clone(),
                });
            }
            // Once per tool, not per call: the sandbox compares what it compiles to this.
            let bytes =
                aegis_files::read(component, crate::sandbox::MAX_COMPONENT).map_err(|e| {
                    RegistrationError::ComponentRead {
                        tool: tool.clone(),
                        component: component.clone(),
                        source: e.into_io(),
                    }
                })?;
            digest = Some(ComponentDigest::of_component(&bytes));
        }
        for (field, v) in [
            ("max_memory_bytes", m.limits.max_memory_bytes),
            ("max_wall_ms", m.limits.max_wall_ms),
            ("max_output_bytes", m.limits.max_output_bytes),
        ] {
            if v == 0 || v > MAX_SAFE_INTEGER {
                return Err(RegistrationError::Limit { tool, field });
            }
        }
        if m.net.iter().any(|r| r.host.is_empty()) {
            return Err(RegistrationError::Invalid {
                tool,
                what: "a net rule with an empty host",
            });
        }
        // Open every root before keeping any, so a refused manifest leaves no trace.
        let mut opened: Vec<HeldRoot> = Vec::new();
        for root in m.fs_read.iter().chain(&m.fs_write) {
            opened.push(HeldRoot::open(&tool, root)?);
        }
        let mut held = |h: HeldRoot| -> Arc<HeldRoot> {
            match self.held.get(&h.path) {
                // The same directory under the same canonical path: keep the first
                // handle (and spelling). A different directory now at that path (the
                // first was replaced since) gets its own handle.
                Some(existing) if existing.identity() == h.identity() => existing.clone(),
                _ => {
                    let h = Arc::new(h);
                    self.held.entry(h.path.clone()).or_insert_with(|| h.clone());
                    h
                }
            }
        };
        let read_n = m.fs_read.len();
        let mut roots: Vec<Arc<HeldRoot>> = opened.into_iter().map(&mut held).collect();
        let write_roots = roots.split_off(read_n);
        let read_roots = roots;
        // The manifest keeps the canonical paths, as before.
        m.fs_read = read_roots.iter().map(|h| h.path.clone()).collect();
        m.fs_write = write_roots.iter().map(|h| h.path.clone()).collect();
        for rule in &mut m.net {
            rule.methods
                .iter_mut()
                .for_each(|x| x.make_ascii_uppercase());
            rule.host.make_ascii_lowercase();
        }
        let relayed = m.kind == ToolKind::Relayed;
        let scope = |r: &[Arc<HeldRoot>], w: &[Arc<HeldRoot>], n: &[NetRule]| {
            if relayed {
                return Arc::new(Scope::relayed(&tool, m.limits));
            }
            Arc::new(Scope::new(
                &tool,
                r.to_vec(),
                w.to_vec(),
                n.to_vec(),
                m.limits,
                digest,
            ))
        };
        // fs.read also covers the write roots' contents, read-only.
        let readable: Vec<Arc<HeldRoot>> = read_roots.iter().chain(&write_roots).cloned().collect();
        let scopes = [
            scope(&read_roots, &write_roots, &m.net),
            scope(&readable, &[], &[]),
            scope(&[], &write_roots, &[]),
            scope(&[], &[], &m.net),
        ];
        self.tools.insert(
            tool,
            Registered {
                manifest: m,
                scopes,
            },
        );
        Ok(())
    }

    /// From now on a tool that is not registered is treated as a [`ToolKind::Relayed`]
    /// tool with these ceilings: its grant carries no roots or destinations. For `aegis
    /// wrap`, whose server lists its tools only after the host opened; the relay refuses
    /// a tool the server never listed before the pipeline is asked, and the policy
    /// still decides every call by tool id. A registered tool keeps its manifest.
    pub fn relay_unregistered(&mut self, limits: Limits) {
        self.relay_unregistered = Some(limits);
    }

    /// The manifest for `tool`, if registered.
    pub fn manifest(&self, tool: &str) -> Option<&ToolManifest> {
        self.tools.get(tool).map(|r| &r.manifest)
    }

    /// What a grant for `tool` would hand over when the call names `capability`: the
    /// one computation behind both [`ToolRegistry::axes`] and [`ToolRegistry::resolve`].
    fn scope(
        &self,
        tool: &str,
        capability: Option<&str>,
    ) -> Result<std::borrow::Cow<'_, Arc<Scope>>, CapabilityDenied> {
        let Some(r) = self.tools.get(tool) else {
            return match (self.relay_unregistered, capability) {
                (Some(limits), None) => Ok(std::borrow::Cow::Owned(Arc::new(Scope::relayed(
                    tool, limits,
                )))),
                // A relayed grant carries no axis, so none can be named.
                (Some(_), Some(c)) => Err(CapabilityDenied::Undeclared {
                    tool: tool.to_owned(),
                    capability: c.to_owned(),
                }),
                (None, _) => Err(CapabilityDenied::Unregistered(tool.to_owned())),
            };
        };
        let all = &r.scopes[0];
        let named = match capability {
            None => None,
            Some(c) => match c.parse::<Capability>() {
                Ok(named) if all.axes.contains(&named) => Some(named),
                // Unknown names and axes the manifest does not declare alike.
                _ => {
                    return Err(CapabilityDenied::Undeclared {
                        tool: tool.to_owned(),
                        capability: c.to_owned(),
                    });
                }
            },
        };
        Ok(std::borrow::Cow::Borrowed(&r.scopes[scope_index(named)]))
    }

    /// The axes a grant for this call would carry, in [`Capability::ALL`] order, without
    /// minting it: what the policy must be asked about. `capability` is read exactly as
    /// by [`ToolRegistry::resolve`].
    ///
    /// # Errors
    /// The refusal [`ToolRegistry::resolve`] would give for an unregistered tool or an
    /// undeclared capability (a root that has gone is found only when minting).
    pub fn axes(
        &self,
        tool: &str,
        capability: Option<&str>,
    ) -> Result<&[Capability], CapabilityDenied> {
        match self.scope(tool, capability)? {
            std::borrow::Cow::Borrowed(s) => Ok(s.axes.as_slice()),
            // Only a relayed scope is built per call, and it carries no axis.
            std::borrow::Cow::Owned(_) => Ok(&[]),
        }
    }

    /// The filesystem and network authority a grant for `tool` (naming `capability`)
    /// would carry, as the record states it ([`Grant::to_record`]), before any policy
    /// narrowing and without minting one: what approving a parked call would grant.
    /// Nothing for a tool with no grant to mint.
    pub(crate) fn would_grant(
        &self,
        tool: &str,
        capability: Option<&str>,
    ) -> (
        Option<aegis_record::FsScope>,
        Option<aegis_record::NetScope>,
    ) {
        match self.scope(tool, capability) {
            Ok(scope) => (scope.record.fs.clone(), scope.record.net.clone()),
            Err(_) => (None, None),
        }
    }

    /// Mints a grant for one call, default-deny, narrowed by the policy's limits.
    ///
    /// `capability` is the axis the call names (`fs.read`, `fs.write`, `net.http`,
    /// exactly), or `None` for everything the manifest declares. No system call: the
    /// roots were resolved and opened at registration, and whether they still exist is
    /// checked when the call starts ([`Grant::check_roots`]).
    ///
    /// # Errors
    /// See [`CapabilityDenied`]; nothing is minted.
    pub fn resolve(
        &self,
        tool: &str,
        capability: Option<&str>,
        policy_limits: &NarrowingLimits,
    ) -> Result<Grant, CapabilityDenied> {
        let scope = self.scope(tool, capability)?.into_owned();
        let limits = scope.limits.narrowed(policy_limits);
        let n = self
            .minted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut grant_id = String::with_capacity(scope.id_prefix.len() + 20);
        grant_id.push_str(&scope.id_prefix);
        grant_id.push_str(decimal(n, &mut [0; 20]));
        Ok(Grant {
            grant_id,
            scope,
            limits,
        })
    }
}

#[cfg(test)]
mod tests {
    /// Grant ids number grants as `format!` would.
    #[test]
    fn decimal_writes_what_format_writes() {
        for n in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            assert_eq!(super::decimal(n, &mut [0; 20]), n.to_string());
        }
    }
}
