//! The capability station: tool manifests in, grants out. Always the host's, never a
//! plugin.
//!
//! # Guarantees
//! - **Default-deny.** Only a registered manifest mints a [`Grant`]; an unregistered
//!   tool, a capability the manifest does not declare, or a root that no longer
//!   resolves is refused before any effect.
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
//! - **Roots are canonical.** Registration resolves every root once (symlinks, `..`),
//!   so the sandbox is configured from real paths.
//! - **A component is named by its bytes.** Registration reads a wasm tool's component
//!   once and keeps its SHA-256; every grant for the tool carries it into the record
//!   (`component_digest`), and the sandbox refuses to run a file whose bytes no longer
//!   match it (see [`crate::sandbox::Sandbox::run`]).
//!
//! # Non-guarantees
//! - A manifest states authority; it does not enforce it. The sandbox (or, for host
//!   tools, the checks in the handler context) does.

use aegis_record::ComponentDigest;
use aegis_record::json::MAX_SAFE_INTEGER;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

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
    pub fn as_str(self) -> &'static str {
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

/// Ceilings a policy asks for; each only narrows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NarrowingLimits {
    /// Memory ceiling, if any.
    pub max_memory_bytes: Option<u64>,
    /// Wall-clock ceiling, if any.
    pub max_wall_ms: Option<u64>,
    /// Output ceiling, if any.
    pub max_output_bytes: Option<u64>,
}

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
    /// A root of the manifest no longer resolves.
    #[error("tool {tool:?}: root {root} no longer resolves")]
    RootGone {
        /// The tool.
        tool: String,
        /// The root.
        root: PathBuf,
    },
}

impl CapabilityDenied {
    /// The axis refused, for the record's `denied_capability`.
    pub fn axis(&self) -> &str {
        match self {
            CapabilityDenied::Unregistered(_) => "tool.registry",
            CapabilityDenied::Undeclared { capability, .. } => capability,
            CapabilityDenied::Unasked { capability, .. } => capability.as_str(),
            CapabilityDenied::RootGone { .. } => "fs",
        }
    }
}

/// Authority minted for one call. Only [`ToolRegistry::resolve`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    grant_id: String,
    tool_id: String,
    fs_read: Vec<PathBuf>,
    fs_write: Vec<PathBuf>,
    net: Vec<NetRule>,
    limits: Limits,
    /// The grant's only root, as the manifest gave it and canonical, if it has one root.
    single_root: Option<(PathBuf, PathBuf)>,
    /// SHA-256 of the component registered for a wasm tool; `None` for host tools.
    component_digest: Option<ComponentDigest>,
}

impl Grant {
    /// Names the grant in the record.
    pub fn id(&self) -> &str {
        &self.grant_id
    }
    /// The tool it was minted for.
    pub fn tool_id(&self) -> &str {
        &self.tool_id
    }
    /// Canonical roots readable.
    pub fn fs_read(&self) -> &[PathBuf] {
        &self.fs_read
    }
    /// Canonical roots writable.
    pub fn fs_write(&self) -> &[PathBuf] {
        &self.fs_write
    }
    /// Reachable destinations.
    pub fn net(&self) -> &[NetRule] {
        &self.net
    }
    /// Ceilings.
    pub fn limits(&self) -> Limits {
        self.limits
    }
    /// SHA-256 of the component the tool was registered with; `None` for host tools.
    pub fn component_digest(&self) -> Option<ComponentDigest> {
        self.component_digest
    }

    /// The axes this grant carries, in [`Capability::ALL`] order.
    pub fn axes(&self) -> Vec<Capability> {
        carried(&self.fs_read, &self.fs_write, &self.net)
    }

    /// The grant's only filesystem root as `(as the manifest gave it, canonical)`, when
    /// its read and write roots together name exactly one directory.
    pub fn single_root(&self) -> Option<(&Path, &Path)> {
        self.single_root
            .as_ref()
            .map(|(raw, canonical)| (raw.as_path(), canonical.as_path()))
    }

    /// The grant's only network destination, when it has one rule with one port.
    pub fn single_destination(&self) -> Option<(&str, u16)> {
        match self.net.as_slice() {
            [rule] if rule.ports.len() == 1 => Some((&rule.host, rule.ports[0])),
            _ => None,
        }
    }

    /// The same grant with smaller ceilings: never larger on any axis.
    #[must_use]
    pub fn narrow(&self, by: &NarrowingLimits) -> Grant {
        Grant {
            limits: self.limits.narrowed(by),
            ..self.clone()
        }
    }

    /// The grant as the record states it.
    pub fn to_record(&self) -> aegis_record::CapabilityGrant {
        let safe =
            |n: u64| aegis_record::json::SafeInt::new(n.min(MAX_SAFE_INTEGER)).unwrap_or_default();
        let paths = |p: &[PathBuf]| p.iter().map(|p| p.display().to_string()).collect();
        aegis_record::CapabilityGrant {
            grant_id: self.grant_id.clone(),
            tool_id: self.tool_id.clone(),
            fs: (!self.fs_read.is_empty() || !self.fs_write.is_empty()).then(|| {
                aegis_record::FsScope {
                    read_paths: paths(&self.fs_read),
                    write_paths: paths(&self.fs_write),
                }
            }),
            net: (!self.net.is_empty()).then(|| aegis_record::NetScope {
                http: self
                    .net
                    .iter()
                    .map(|r| aegis_record::HttpRule {
                        host: r.host.clone(),
                        ports: r.ports.clone(),
                        methods: r.methods.clone(),
                    })
                    .collect(),
            }),
            max_memory_bytes: safe(self.limits.max_memory_bytes),
            max_wall_ms: safe(self.limits.max_wall_ms),
            max_output_bytes: safe(self.limits.max_output_bytes),
            component_digest: self.component_digest,
        }
    }
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

/// What a grant for one call hands over, before it is minted.
struct Scope<'m> {
    manifest: &'m ToolManifest,
    fs_read: Vec<PathBuf>,
    fs_write: Vec<PathBuf>,
    net: Vec<NetRule>,
}

/// Registered tools. Built once; read by every call.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, ToolManifest>,
    /// Each canonical root's spelling in the manifest, for the record's decision axes.
    given: BTreeMap<PathBuf, PathBuf>,
    /// Each wasm tool's component digest, taken once at registration.
    components: BTreeMap<String, ComponentDigest>,
    minted: std::sync::atomic::AtomicU64,
}

fn canonical_root(tool: &str, root: &Path) -> Result<PathBuf, RegistrationError> {
    let canonical = std::fs::canonicalize(root).map_err(|source| RegistrationError::Root {
        tool: tool.to_owned(),
        root: root.to_owned(),
        source,
    })?;
    if !canonical.is_dir() {
        return Err(RegistrationError::NotADirectory {
            tool: tool.to_owned(),
            root: root.to_owned(),
        });
    }
    Ok(canonical)
}

impl ToolRegistry {
    /// An empty registry: every call is refused until a manifest is registered.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Checks and stores a manifest, canonicalizing its roots once.
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
                std::fs::read(component).map_err(|source| RegistrationError::ComponentRead {
                    tool: tool.clone(),
                    component: component.clone(),
                    source,
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
        let mut given = Vec::new();
        for roots in [&mut m.fs_read, &mut m.fs_write] {
            for root in roots.iter_mut() {
                let canonical = canonical_root(&tool, root)?;
                given.push((canonical.clone(), std::mem::replace(root, canonical)));
            }
        }
        // The first spelling of a root wins; a later manifest naming it again keeps it.
        for (canonical, raw) in given {
            self.given.entry(canonical).or_insert(raw);
        }
        for rule in &mut m.net {
            rule.methods
                .iter_mut()
                .for_each(|x| x.make_ascii_uppercase());
            rule.host.make_ascii_lowercase();
        }
        if let Some(d) = digest {
            self.components.insert(tool.clone(), d);
        }
        self.tools.insert(tool, m);
        Ok(())
    }

    /// The manifest for `tool`, if registered.
    pub fn manifest(&self, tool: &str) -> Option<&ToolManifest> {
        self.tools.get(tool)
    }

    /// What a grant for `tool` would hand over when the call names `capability`: the
    /// one computation behind both [`ToolRegistry::axes`] and [`ToolRegistry::resolve`].
    fn scope(&self, tool: &str, capability: Option<&str>) -> Result<Scope<'_>, CapabilityDenied> {
        let m = self
            .tools
            .get(tool)
            .ok_or_else(|| CapabilityDenied::Unregistered(tool.to_owned()))?;
        let named = match capability {
            None => None,
            Some(c) => match c.parse::<Capability>() {
                Ok(named) if carried(&m.fs_read, &m.fs_write, &m.net).contains(&named) => {
                    Some(named)
                }
                // Unknown names and axes the manifest does not declare alike.
                _ => {
                    return Err(CapabilityDenied::Undeclared {
                        tool: tool.to_owned(),
                        capability: c.to_owned(),
                    });
                }
            },
        };
        let (fs_read, fs_write, net) = match named {
            None => (m.fs_read.clone(), m.fs_write.clone(), m.net.clone()),
            // fs.read also covers the write roots' contents, read-only.
            Some(Capability::FsRead) => {
                let mut r = m.fs_read.clone();
                r.extend(m.fs_write.iter().cloned());
                (r, Vec::new(), Vec::new())
            }
            Some(Capability::FsWrite) => (Vec::new(), m.fs_write.clone(), Vec::new()),
            Some(Capability::NetHttp) => (Vec::new(), Vec::new(), m.net.clone()),
        };
        Ok(Scope {
            manifest: m,
            fs_read,
            fs_write,
            net,
        })
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
    ) -> Result<Vec<Capability>, CapabilityDenied> {
        self.scope(tool, capability)
            .map(|s| carried(&s.fs_read, &s.fs_write, &s.net))
    }

    /// Mints a grant for one call, default-deny, narrowed by the policy's limits.
    ///
    /// `capability` is the axis the call names (`fs.read`, `fs.write`, `net.http`,
    /// exactly), or `None` for everything the manifest declares.
    ///
    /// # Errors
    /// See [`CapabilityDenied`]; nothing is minted.
    pub fn resolve(
        &self,
        tool: &str,
        capability: Option<&str>,
        policy_limits: &NarrowingLimits,
    ) -> Result<Grant, CapabilityDenied> {
        let Scope {
            manifest: m,
            fs_read,
            fs_write,
            net,
        } = self.scope(tool, capability)?;
        for root in fs_read.iter().chain(&fs_write) {
            if !root.is_dir() {
                return Err(CapabilityDenied::RootGone {
                    tool: tool.to_owned(),
                    root: root.clone(),
                });
            }
        }
        let mut roots: Vec<&PathBuf> = fs_read.iter().chain(&fs_write).collect();
        roots.sort();
        roots.dedup();
        let single_root = match roots.as_slice() {
            [only] => Some((
                self.given
                    .get(*only)
                    .cloned()
                    .unwrap_or_else(|| (*only).clone()),
                (*only).clone(),
            )),
            _ => None,
        };
        let n = self
            .minted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Grant {
            grant_id: format!("grant-{tool}-{n}"),
            tool_id: tool.to_owned(),
            fs_read,
            fs_write,
            net,
            limits: m.limits.narrowed(policy_limits),
            single_root,
            component_digest: self.components.get(tool).copied(),
        })
    }
}
