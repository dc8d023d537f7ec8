//! One way to assemble a host: a [`Profile`] plus the operator's overrides, turned into
//! a running [`Pipeline`] by [`HostBuilder::open`]. `aegis run`, `aegis demo`, the
//! suites and the benches all assemble through it, and so will `wrap` and `gateway`.
//!
//! # Guarantees
//! - This is the only way to assemble a [`Pipeline`]: there is no public constructor
//!   that takes stations already built, so every pipeline's open line says what
//!   assembled it.
//! - The profile is never edited: an override (a policy file or plugin, an audit file
//!   or sink plugin, named or already in hand) is a separate choice made next to it, and
//!   errors about it name the override (`--policy: [policy] …`), not a line of the
//!   profile — except the profile's own `[operator] audit`
//!   ([`HostBuilder::operator_audit`]), named by its line
//!   (`ops.toml:7: operator.audit: [audit] …`). An override's plugin must provide its
//!   station's kind, as a profile's must.
//! - Every override is recorded in the open line's provenance, under `overrides`,
//!   next to what the profile said: the station, who made it (`by`, e.g. `--policy`),
//!   the plugin the profile named, the plugin and file that replaced it, and for a
//!   policy the hash of the set the replacement loaded. So the record says what ran.
//!   With no override, the open line is exactly what it was before this member existed.
//! - The defaults are the profile's: no override, the development key (which only a
//!   volatile sink accepts, see [`crate::audit`]), no tools, no handlers, a sandbox
//!   with no compilation cache and no instance pool, and no waiting for a busy audit
//!   sink (a record another process holds fails the open with [`OpenError::Busy`]).
//! - The policy station is handed a rate ledger over the audit sink before the session
//!   opens ([`crate::rate`]): its rate limits are the store's when the store keeps
//!   buckets, the host process's otherwise, and a store error refuses the call. A
//!   station that refuses the ledger fails the open, with nothing recorded.
//!   [`policy_station`] (what `aegis recheck` asks) hands none.
//!
//! # Non-guarantees
//! - An override's file is read when the host opens; a later change to it is the
//!   plugin's business (the YAML evaluator keeps the set it loaded).

use crate::audit::{AuditNotice, OpenedAudit, ProvenanceExtra, open_shared_audit};
use crate::capability::{ToolManifest, ToolRegistry};
use crate::handler::HostHandler;
use crate::pipeline::{
    ArgumentRecording, CallRecord, CallRequest, OpenError, OwnedCall, Pipeline, PipelineError,
    Resume,
};
use crate::plugin::Plugin;
use crate::profile::{PluginChoice, Profile, ProfileError};
use crate::rate::{RateHeld, StoreLedger};
use crate::registry::{PluginSpec, Registry};
use crate::sandbox::{CancelToken, Options, Sandbox};
use aegis_record::PolicySetHash;
use aegis_record::json::Object;
use aegis_record::key::SigningKey;
use aegis_station_api::{AuditSinkBox, ErrorKind, PluginError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A running host: the four stations assembled and an audit session open. Cheap to
/// share: calls begun with [`Host::begin`] hold their own share of it.
///
/// It dereferences to its [`Pipeline`], for the borrowed guard ([`Pipeline::begin`])
/// and [`Pipeline::decide`].
#[derive(Debug)]
pub struct Host {
    pipeline: Arc<Pipeline>,
    /// The rate ledger the policy station took, if it took one.
    rate: Option<StoreLedger>,
}

/// How a host's sandbox is had.
enum SandboxSource {
    /// Built at open with these options.
    Build(Options),
    /// Shared with other hosts (engines are meant to be shared).
    Shared(Arc<Sandbox>),
}

/// The plugin an override puts in a station's place.
#[derive(Clone, Debug)]
pub enum PluginSource {
    /// Named as a profile names one, and resolved through the builder's [`Registry`].
    Named(PluginSpec),
    /// Already loaded (or linked in) by the caller: not looked up anywhere.
    InHand(Plugin),
}

impl From<PluginSpec> for PluginSource {
    fn from(spec: PluginSpec) -> PluginSource {
        PluginSource::Named(spec)
    }
}

impl From<Plugin> for PluginSource {
    fn from(plugin: Plugin) -> PluginSource {
        PluginSource::InHand(plugin)
    }
}

/// The `by` recorded for an audit file the profile's `[operator] audit` names.
pub const OPERATOR_AUDIT: &str = "profile operator.audit";

/// An operator's replacement for a profile's station.
struct Override {
    station: &'static str,
    /// Who made it: the flag, or the caller's name for it.
    by: &'static str,
    plugin: PluginSource,
    /// The plugin's config section, as TOML text.
    config: String,
    /// The file it names, if it names one (recorded).
    file: Option<PathBuf>,
    /// The profile's `[operator]` key and line that made it, if the profile did.
    setting: Option<(&'static str, usize)>,
}

impl Override {
    fn new(
        station: &'static str,
        by: &'static str,
        plugin: PluginSource,
        config: String,
    ) -> Override {
        Override {
            station,
            by,
            plugin,
            config,
            file: None,
            setting: None,
        }
    }

    fn file(station: &'static str, by: &'static str, plugin: &str, path: &Path) -> Override {
        Override {
            file: Some(path.to_owned()),
            ..Override::new(
                station,
                by,
                PluginSource::Named(PluginSpec::parse(plugin)),
                path_config(path),
            )
        }
    }

    /// The choice as errors about it see it: made by `by`, not by a profile line.
    fn choice(&self) -> PluginChoice {
        let spec = match &self.plugin {
            PluginSource::Named(spec) => spec.clone(),
            PluginSource::InHand(p) => match p.origin() {
                crate::plugin::Origin::Library { path, .. } => PluginSpec::Path(path.clone()),
                crate::plugin::Origin::Builtin => PluginSpec::Builtin(p.metadata().name.clone()),
            },
        };
        match self.setting {
            Some((key, line)) => PluginChoice::from_setting(key, line, spec, self.config.clone()),
            None => PluginChoice::from_flag(self.by, spec, self.config.clone()),
        }
    }
}

/// The plugin filling `station`, and the choice it was made by: the override's if
/// there is one, else the profile's. A plugin in hand is held to the same kind check
/// as one resolved.
fn station_plugin(
    profile: &Profile,
    registry: &Registry,
    station: &'static str,
    said: &PluginChoice,
    replaced: Option<&Override>,
) -> Result<(PluginChoice, Plugin), ProfileError> {
    let Some(o) = replaced else {
        return Ok((said.clone(), profile.resolve(registry, station, said)?));
    };
    let choice = o.choice();
    let plugin = match &o.plugin {
        PluginSource::Named(_) => profile.resolve(registry, station, &choice)?,
        PluginSource::InHand(p) => profile.check_kind(station, &choice, p.clone())?,
    };
    Ok((choice, plugin))
}

/// The policy station a host opened on `profile` would ask — the profile's, or with
/// `policy_file` the YAML evaluator over that file, resolved exactly as
/// [`HostBuilder::policy_file`] resolves it — built alone: no audit session, no sandbox,
/// no tools, nothing written (`aegis recheck`). Also returns the plugin that built it.
/// It is handed no rate ledger: its rate limits are its own, so a replay never spends
/// a live budget held in the audit store.
///
/// # Errors
/// As [`HostBuilder::open`] for the policy station: the plugin cannot be resolved or
/// loaded, provides no policy evaluator, or refuses its config (a policy file that
/// does not parse). The error names the profile line or the `--policy` flag.
pub fn policy_station(
    profile: &Profile,
    registry: &Registry,
    policy_file: Option<&Path>,
) -> Result<(Plugin, aegis_station_api::PolicyEvaluatorBox), ProfileError> {
    let replaced =
        policy_file.map(|path| Override::file("policy", "--policy", "builtin:policy-yaml", path));
    let (choice, plugin) = station_plugin(
        profile,
        registry,
        "policy",
        &profile.policy,
        replaced.as_ref(),
    )?;
    let evaluator = plugin
        .policy_evaluator(&choice.config)
        .map_err(|e| profile.plugin_error("policy", &choice, e.to_string()))?;
    Ok((plugin, evaluator))
}

/// The record file a session writes for the audit setting `path`: `path` itself, or,
/// when it names a directory (ends in `/`, or is a directory and not a link to one), a
/// new file in it named `<host>-<UTC start time>-<16 random hex>.aarl`, so files from
/// many processes and hosts never collide and each holds one chain, verifiable alone
/// (`aegis verify DIR` checks them all). The host part keeps letters, digits, `.` and
/// `-` of the hostname (others become `_`), at most 64 of them.
pub fn session_file(path: &Path) -> PathBuf {
    let named_dir = path.as_os_str().as_encoded_bytes().ends_with(b"/");
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    if !named_dir && !is_dir {
        return path.to_owned();
    }
    let host = crate::whereabouts::this_host();
    let hostname = host
        .get("hostname")
        .and_then(aegis_record::json::Value::as_str)
        .unwrap_or("host");
    let mut random = [0u8; 8];
    // Should the system give no randomness, two sessions started in the same
    // microsecond on one host could name one file; the file sink's lock then makes the
    // second wait for the first (or exit 5 with --no-wait), as one file always did.
    let _ = getrandom::fill(&mut random);
    path.join(session_file_name(
        hostname,
        &aegis_record::time::now(),
        &aegis_record::digest::encode_hex(&random),
    ))
}

/// `<host>-<time>-<tag>.aarl`, a session's file name: the host's letters, digits, `.`
/// and `-` (others become `_`, at most 64), the time without its `:` and `-`, and the
/// tag likewise (at most 64). Never a path separator nor a name starting with `.`,
/// whatever the parts hold: `aegis export` names files after what a store says.
pub fn session_file_name(hostname: &str, time: &str, tag: &str) -> String {
    let plain = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect()
    };
    let mut host = plain(hostname);
    if host.is_empty() || host.starts_with('.') {
        host.insert(0, '_');
    }
    let time: String = time.chars().filter(|c| !matches!(c, ':' | '-')).collect();
    format!("{host}-{}-{}.aarl", plain(&time), plain(tag))
}

/// A `path = "…"` config section, quoted by the toml crate.
fn path_config(path: &Path) -> String {
    let mut table = toml::Table::new();
    table.insert("path".into(), path.display().to_string().into());
    table.to_string()
}

/// Builds a [`Host`]. Deny by default: every setter widens nothing the profile and
/// the manifests do not already grant.
#[must_use = "a builder does nothing until opened"]
pub struct HostBuilder {
    profile: Profile,
    registry: Registry,
    policy: Option<Override>,
    audit: Option<Override>,
    key: Option<SigningKey>,
    tools: ToolRegistry,
    manifests: Vec<ToolManifest>,
    handlers: BTreeMap<String, HostHandler>,
    sandbox: SandboxSource,
    busy: Option<WaitWhenBusy>,
    confined: Option<Object>,
    serving: Option<Object>,
    front: Option<Object>,
    record_arguments: bool,
    approval_timeout: Option<std::time::Duration>,
}

/// What [`HostBuilder::open`] does while the audit sink says it is busy: wait, telling
/// the operator once, until the sink can be built or `cancel` fires.
struct WaitWhenBusy {
    notice: Box<dyn FnOnce(&str) + Send>,
    cancel: CancelToken,
}

/// The first pause between two attempts to build a busy sink; each pause doubles, up to
/// [`BUSY_POLL_MAX`]. A held record lock is usually one `aegis run` (tens of ms), so the
/// first retries are quick; the cap bounds both the added latency and the wake-ups of
/// a long wait.
const BUSY_POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(5);
/// The longest pause between two attempts to build a busy sink.
const BUSY_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(100);

impl Host {
    /// A builder over `profile`, with no overrides, the development key, no tools and
    /// a sandbox built with default options (no cache, no pool).
    pub fn builder(profile: Profile) -> HostBuilder {
        HostBuilder {
            profile,
            registry: Registry::new(),
            policy: None,
            audit: None,
            key: None,
            tools: ToolRegistry::new(),
            manifests: Vec::new(),
            handlers: BTreeMap::new(),
            sandbox: SandboxSource::Build(Options::default()),
            busy: None,
            confined: None,
            serving: None,
            front: None,
            record_arguments: false,
            approval_timeout: None,
        }
    }

    /// Runs one call through all four stations (see [`Pipeline::call`]).
    ///
    /// # Errors
    /// Only a failure to keep the record: see [`PipelineError`].
    pub fn call(&self, request: &CallRequest<'_>) -> Result<CallRecord, PipelineError> {
        self.pipeline.call(request)
    }

    /// Opens a call whose guard can move between threads (see [`OwnedCall`]).
    ///
    /// # Errors
    /// [`PipelineError::Intent`]: nothing ran and no outcome is owed.
    pub fn begin(&self, request: &CallRequest<'_>) -> Result<OwnedCall, PipelineError> {
        self.pipeline.begin_owned(request)
    }

    /// The assembled pipeline, shared.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Where the record goes, for the operator.
    pub fn notice(&self) -> &AuditNotice {
        self.pipeline.notice()
    }

    /// Ends the host and its session with the close line, so the record ends anchored:
    /// the one place a front end (`run`, `wrap`, `gateway`, the demo) closes one.
    ///
    /// # Errors
    /// [`CloseError::CallOpen`]: a call begun with [`Host::begin`] is still open (the
    /// session is left to its drop, which closes it after that call's outcome); or the
    /// close line could not be written.
    pub fn close(self) -> Result<(), CloseError> {
        let audit = self.into_audit().map_err(|_| CloseError::CallOpen)?;
        audit.session.close().map(drop).map_err(CloseError::Write)
    }

    /// [`Host::close`], then the sink's whole record: the only way to see a volatile
    /// sink's lines, which end with the process.
    ///
    /// # Errors
    /// As [`Host::close`], or the sink could not be read.
    pub fn close_and_export(self) -> Result<Vec<u8>, CloseError> {
        let audit = self.into_audit().map_err(|_| CloseError::CallOpen)?;
        audit.close_and_export().map_err(CloseError::Export)
    }

    /// Ends the host, handing back its audit session (to close or export it).
    ///
    /// # Errors
    /// The host itself, unchanged, while a call begun with [`Host::begin`] is still
    /// open: closing the session under it would leave that call without an outcome.
    pub fn into_audit(self) -> Result<OpenedAudit, Host> {
        match Arc::try_unwrap(self.pipeline) {
            Ok(pipeline) => pipeline.into_audit().map_err(|pipeline| Host {
                pipeline: Arc::new(*pipeline),
                rate: self.rate,
            }),
            Err(pipeline) => Err(Host {
                pipeline,
                rate: self.rate,
            }),
        }
    }

    /// Where the policy station's rate-limit buckets are held: `None` when the station
    /// did not take the host's ledger (it keeps no budget, or keeps its own in its
    /// process); else as far as the audit store's first answer has said
    /// ([`RateHeld::NotYet`] before the first rate-limited call).
    pub fn rate_limits(&self) -> Option<RateHeld> {
        self.rate.as_ref().map(StoreLedger::held)
    }
}

/// Why a host's session could not be closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// A call is still open; its outcome is owed first.
    #[error("a call is still open")]
    CallOpen,
    /// The close line could not be written.
    #[error(transparent)]
    Write(aegis_record::chain::WriteError),
    /// The close line could not be written, or the record read back.
    #[error(transparent)]
    Export(std::io::Error),
}

impl std::ops::Deref for Host {
    type Target = Pipeline;

    fn deref(&self) -> &Pipeline {
        &self.pipeline
    }
}

impl HostBuilder {
    /// Where plugins named without `builtin:` are looked for. By default
    /// [`Registry::new`]: the built-ins and the plugin search path.
    pub fn registry(mut self, registry: Registry) -> HostBuilder {
        self.registry = registry;
        self
    }

    /// Replaces the profile's policy station with the YAML evaluator over `path`
    /// (`aegis run --policy`). `by` names the override in errors and in the record.
    pub fn policy_file(mut self, by: &'static str, path: &Path) -> HostBuilder {
        self.policy = Some(Override::file("policy", by, "builtin:policy-yaml", path));
        self
    }

    /// Replaces the profile's policy station with `plugin` (named, or a [`Plugin`] in
    /// hand), given `config` (its config section as TOML text). `by` names the override
    /// in errors and in the record.
    pub fn policy_plugin(
        mut self,
        by: &'static str,
        plugin: impl Into<PluginSource>,
        config: impl Into<String>,
    ) -> HostBuilder {
        self.policy = Some(Override::new("policy", by, plugin.into(), config.into()));
        self
    }

    /// Replaces the profile's audit sink with `plugin` (named, or a [`Plugin`] in hand),
    /// given `config` (its config section as TOML text). `by` names the override in
    /// errors and in the record. The retention rule holds as for the profile's sink.
    pub fn audit_plugin(
        mut self,
        by: &'static str,
        plugin: impl Into<PluginSource>,
        config: impl Into<String>,
    ) -> HostBuilder {
        self.audit = Some(Override::new("audit", by, plugin.into(), config.into()));
        self
    }

    /// Replaces the profile's audit sink with the durable file sink appending to
    /// `path` (`aegis run --audit`); a durable sink needs [`HostBuilder::signing_key`].
    /// A directory (a path ending in `/`, or naming a directory that is not a link)
    /// gets a new file of the session's own ([`session_file`]), so sessions of many
    /// processes never wait on one another.
    pub fn audit_file(mut self, by: &'static str, path: &Path) -> HostBuilder {
        let path = session_file(path);
        self.audit = Some(Override::file("audit", by, "builtin:file-sink", &path));
        self
    }

    /// The durable file sink at the path the profile's `[operator] audit` names, if it
    /// names one, as [`HostBuilder::audit_file`] makes it: recorded with
    /// `by = "profile operator.audit"`, and errors about it name that line of the
    /// profile. Without the key this changes nothing. A caller that lets a flag
    /// (`--audit`) replace the profile's setting calls [`HostBuilder::audit_file`]
    /// instead.
    pub fn operator_audit(mut self) -> HostBuilder {
        if let Some(s) = &self.profile.operator.audit {
            let path = session_file(&s.value);
            let mut o = Override::file("audit", OPERATOR_AUDIT, "builtin:file-sink", &path);
            o.setting = Some((s.key, s.line));
            self.audit = Some(o);
        }
        self
    }

    /// The operator's signing key. Without one the development key signs, which only a
    /// volatile sink accepts.
    pub fn signing_key(mut self, key: SigningKey) -> HostBuilder {
        self.key = Some(key);
        self
    }

    /// Tools already registered (their registration errors already reported).
    pub fn tool_registry(mut self, tools: ToolRegistry) -> HostBuilder {
        self.tools = tools;
        self
    }

    /// A tool to register when the host opens. None by default: a call of an
    /// unregistered tool is refused by the capability station.
    pub fn tool(mut self, manifest: ToolManifest) -> HostBuilder {
        self.manifests.push(manifest);
        self
    }

    /// Tools to register when the host opens.
    pub fn tools(mut self, manifests: impl IntoIterator<Item = ToolManifest>) -> HostBuilder {
        self.manifests.extend(manifests);
        self
    }

    /// The handler for `host` tool `id`. None by default: a host tool without one is
    /// not run.
    pub fn handler(mut self, id: impl Into<String>, handler: HostHandler) -> HostBuilder {
        self.handlers.insert(id.into(), handler);
        self
    }

    /// Handlers for `host` tools, by tool id, added to any already given.
    pub fn handlers(mut self, handlers: BTreeMap<String, HostHandler>) -> HostBuilder {
        self.handlers.extend(handlers);
        self
    }

    /// Build the sandbox with `options` (compilation cache, instance pool) when the
    /// host opens. By default [`Options::default`]: neither.
    pub fn sandbox_options(mut self, options: Options) -> HostBuilder {
        self.sandbox = SandboxSource::Build(options);
        self
    }

    /// Wait for an audit sink that reports itself busy ([`ErrorKind::BUSY`]: the file
    /// sink's record is locked by another process) instead of failing: `notice` is
    /// called once, with the sink's message (which names the holder), and the sink is
    /// built again after a pause (5 ms, doubling up to 100 ms) until it is free or
    /// `cancel` fires. By default the open fails at once with [`OpenError::Busy`].
    ///
    /// [`ErrorKind::BUSY`]: aegis_station_api::ErrorKind::BUSY
    pub fn wait_when_busy(
        mut self,
        cancel: CancelToken,
        notice: impl FnOnce(&str) + Send + 'static,
    ) -> HostBuilder {
        self.busy = Some(WaitWhenBusy {
            notice: Box::new(notice),
            cancel,
        });
        self
    }

    /// Records what the profile's confinement backend enforced on the native program
    /// this session starts (its report, see [`crate::confine::Report::to_object`]) in
    /// the open line's provenance, under `confinement.report`.
    pub fn confinement_report(mut self, report: Object) -> HostBuilder {
        self.confined = Some(report);
        self
    }

    /// Records how this host serves its calls (a gateway's transport, address and
    /// limits) in the open line's provenance, under `serving`.
    pub fn serving(mut self, how: Object) -> HostBuilder {
        self.serving = Some(how);
        self
    }

    /// Records the front end this session serves (`run`, `wrap` with the server it
    /// started, `gateway` with its manifest) in the open line's provenance, under `front`.
    pub fn front(mut self, front: Object) -> HostBuilder {
        self.front = Some(front);
        self
    }

    /// Records each call's whole arguments object (bounded) on its outcome, beside the
    /// bound arguments every call records (`decision_axes.call_arguments`).
    pub fn record_arguments(mut self, whole: bool) -> HostBuilder {
        self.record_arguments = whole;
        self
    }

    /// How long an approval of a parked call may be used (`--approval-timeout`),
    /// replacing the profile's `[operator.approvals] timeout`.
    pub fn approval_timeout(mut self, timeout: std::time::Duration) -> HostBuilder {
        self.approval_timeout = Some(timeout);
        self
    }

    /// Use a sandbox shared with other hosts instead of building one.
    pub fn sandbox(mut self, sandbox: Arc<Sandbox>) -> HostBuilder {
        self.sandbox = SandboxSource::Shared(sandbox);
        self
    }

    /// Registers the tools, resolves and builds the policy and audit stations (the
    /// profile's, or the overrides'), builds the sandbox, and opens the audit session,
    /// whose open line records the provenance.
    ///
    /// # Errors
    /// See [`OpenError`]; nothing is recorded unless the session opened.
    pub fn open(self) -> Result<Host, OpenError> {
        let HostBuilder {
            profile,
            registry,
            policy,
            audit,
            key,
            mut tools,
            manifests,
            handlers,
            sandbox,
            busy,
            confined,
            serving,
            front,
            record_arguments,
            approval_timeout,
        } = self;
        for m in manifests {
            tools.register(m).map_err(OpenError::Tool)?;
        }
        let sandbox = match sandbox {
            SandboxSource::Shared(s) => s,
            SandboxSource::Build(options) => Arc::new(Sandbox::with_options(&options)?),
        };
        let overrides = Overrides {
            policy,
            audit,
            busy,
            confined,
            serving,
            front,
        };
        let (mut pipeline, rate) = assemble(
            &profile, &registry, overrides, key, tools, handlers, sandbox,
        )?;
        let bindings = profile
            .operator
            .bind
            .as_ref()
            .map(|s| s.value.clone())
            .unwrap_or_default();
        pipeline.set_recording(ArgumentRecording::new(bindings, record_arguments));
        // The builder's (a flag's) timeout, else the profile's, else the default.
        if let Some(timeout) =
            approval_timeout.or_else(|| profile.operator.approval_timeout.as_ref().map(|s| s.value))
        {
            pipeline.set_approval_timeout(timeout);
        }
        Ok(Host {
            pipeline: Arc::new(pipeline),
            rate,
        })
    }
}

/// The operator's replacements for the profile's stations, and how to treat a busy sink.
struct Overrides {
    policy: Option<Override>,
    audit: Option<Override>,
    busy: Option<WaitWhenBusy>,
    confined: Option<Object>,
    serving: Option<Object>,
    front: Option<Object>,
}

/// The one assembly: resolves and builds the policy and audit stations (the
/// profile's, or the overrides'), hands the policy station the rate ledger over the
/// audit sink, and opens the audit session with the provenance. Returns the ledger
/// when the station took it.
fn assemble(
    profile: &Profile,
    registry: &Registry,
    overrides: Overrides,
    key: Option<SigningKey>,
    tools: ToolRegistry,
    handlers: BTreeMap<String, HostHandler>,
    sandbox: Arc<Sandbox>,
) -> Result<(Pipeline, Option<StoreLedger>), OpenError> {
    let Overrides {
        policy,
        audit,
        busy,
        confined,
        serving,
        front,
    } = overrides;
    // The confinement backend is resolved and built with its config whatever the
    // command, so a profile that `wrap` would refuse is refused everywhere.
    let confinement = match &profile.confinement {
        None => {
            if confined.is_some() {
                return Err(OpenError::Profile(ProfileError::Invalid {
                    path: profile.name.clone(),
                    line: 0,
                    message: "a confinement report was given for a profile that names no confinement backend".into(),
                }));
            }
            None
        }
        Some(c) => {
            let plugin = profile.resolve(registry, "sandbox.confinement", &c.plugin)?;
            plugin.confinement_backend(&c.plugin.config).map_err(|e| {
                profile.plugin_error("sandbox.confinement", &c.plugin, e.to_string())
            })?;
            let mut o = crate::profile::provenance_of("sandbox.confinement", &plugin);
            o.insert(
                "level",
                if c.best_effort {
                    "best-effort"
                } else {
                    "required"
                },
            );
            o.insert_opt("report", confined);
            Some(o)
        }
    };
    let (policy_choice, policy_plugin) = station_plugin(
        profile,
        registry,
        "policy",
        &profile.policy,
        policy.as_ref(),
    )?;
    let evaluator = policy_plugin
        .policy_evaluator(&policy_choice.config)
        .map_err(|e| profile.plugin_error("policy", &policy_choice, e.to_string()))?;
    let (audit_choice, sink_plugin) =
        station_plugin(profile, registry, "audit", &profile.audit, audit.as_ref())?;
    let sink = build_sink(&sink_plugin, &audit_choice.config, busy).map_err(|e| {
        let busy = e.kind == ErrorKind::BUSY;
        let e = profile.plugin_error("audit", &audit_choice, e.to_string());
        if busy {
            OpenError::Busy(e)
        } else {
            OpenError::Profile(e)
        }
    })?;
    // The station's rate limits go to the audit store (or, when it keeps none, to
    // buckets the host keeps in this process), before the first call and before the
    // session opens, so a station that refuses the ledger leaves nothing recorded.
    let sink = Arc::new(sink);
    let ledger = StoreLedger::new(sink.clone());
    let shared = evaluator
        .share_rate_limits(ledger.boxed())
        .into_result()
        .map_err(|e| {
            profile.plugin_error(
                "policy",
                &policy_choice,
                format!("refused the host's rate-limit ledger: {e}"),
            )
        })?;
    let mut recorded = Vec::new();
    if let Some(o) = &policy {
        let mut entry = override_entry(o, &profile.policy, &policy_plugin);
        // The set the replacement loaded; a station that cannot say is recorded as
        // such rather than as the hash of nothing.
        match evaluator.policy_set_hash().into_result() {
            Ok(bytes) => {
                entry.insert("policy_set_hash", PolicySetHash::from_bytes(bytes));
            }
            Err(e) => {
                entry.insert("policy_set_hash_error", e.to_string());
            }
        }
        recorded.push(entry);
    }
    if let Some(o) = &audit {
        recorded.push(override_entry(o, &profile.audit, &sink_plugin));
    }
    let extra = ProvenanceExtra {
        overrides: recorded,
        confinement,
        serving,
        front,
        resumes: None,
    };
    let opened = open_shared_audit(
        sink,
        &sink_plugin,
        key.clone(),
        profile,
        &[("policy", &policy_plugin), ("audit", &sink_plugin)],
        extra.clone(),
    )?;
    let resumable = opened.holds_many_sessions();
    let mut pipeline = Pipeline::from_parts(evaluator, opened, tools, handlers, sandbox);
    if resumable {
        let (profile, config) = (profile.clone(), audit_choice.config.clone());
        let ledger = ledger.clone();
        pipeline.set_resume(Resume::new(move |stopped: &OpenedAudit| {
            let sink = Arc::new(sink_plugin.audit_sink(&config).map_err(|e| e.to_string())?);
            let mut resumes = Object::new();
            resumes.insert("open_line_hash", stopped.open_line().to_hex());
            let opened = open_shared_audit(
                sink.clone(),
                &sink_plugin,
                key.clone(),
                &profile,
                &[("policy", &policy_plugin), ("audit", &sink_plugin)],
                ProvenanceExtra {
                    resumes: Some(resumes),
                    ..extra.clone()
                },
            )
            .map_err(|e| e.to_string())?;
            // The stopped sink's connection is gone: rate limits follow the new one.
            ledger.follow(sink);
            Ok(opened)
        }));
    }
    Ok((pipeline, shared.then_some(ledger)))
}

/// Builds the audit sink; while it says it is busy and the caller chose to wait, says so
/// once and tries again after a pause, until it is built, fails otherwise, or the wait
/// is cancelled (then the busy error is returned).
fn build_sink(
    plugin: &Plugin,
    config: &str,
    busy: Option<WaitWhenBusy>,
) -> Result<AuditSinkBox, PluginError> {
    let Some(WaitWhenBusy { notice, cancel }) = busy else {
        return plugin.audit_sink(config);
    };
    let mut notice = Some(notice);
    let mut pause = BUSY_POLL_FIRST;
    loop {
        match plugin.audit_sink(config) {
            Err(e) if e.kind == ErrorKind::BUSY && !cancel.is_cancelled() => {
                if let Some(notice) = notice.take() {
                    notice(&e.to_string());
                }
                // A signal cancels the token but does not interrupt the sleep; the pause
                // is short enough that the operator does not wait on it.
                std::thread::sleep(pause);
                pause = (pause * 2).min(BUSY_POLL_MAX);
            }
            other => return other,
        }
    }
}

/// An override's provenance entry: what replaced what the profile said.
fn override_entry(o: &Override, said: &PluginChoice, by: &Plugin) -> Object {
    let mut entry = Object::new();
    entry.insert("station", o.station);
    entry.insert("by", o.by);
    entry.insert("profile_plugin", said.spec.to_string());
    entry.insert("plugin", by.metadata().name.as_str());
    if let Some(file) = &o.file {
        entry.insert("path", file.display().to_string());
    }
    entry
}

#[cfg(test)]
mod session_file_tests {
    use super::session_file;

    /// A file stays itself; a directory, named with `/` or existing, gets a new file
    /// per session; a link to a directory is not taken for one (the file sink then
    /// refuses the link, as it refuses any).
    #[test]
    fn a_directory_gets_a_file_per_session_and_a_link_is_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("record.aarl");
        assert_eq!(session_file(&file), file);
        let a = session_file(dir.path());
        let b = session_file(dir.path());
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(dir.path()));
        assert!(a.extension().is_some_and(|e| e == "aarl"), "{a:?}");
        let named = dir.path().join("later/");
        assert_eq!(
            session_file(&named).parent(),
            Some(dir.path().join("later").as_path())
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(session_file(&link), link);
    }
}
