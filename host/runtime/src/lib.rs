//! The Aegis host: it alone owns the station order, grants, the chain rule, the signing
//! key and the retention rule. Plugins fill stations; they never reorder them.
//!
//! [`pipeline`] walks every call through the stations in order: the policy plugin, the
//! capability station ([`capability`]), the wasmtime sandbox ([`sandbox`], Model A) or a
//! checked host handler ([`handler`], Model B), and the audit session opened under the
//! retention rule ([`audit`]). Plugins are loaded by [`plugin`] and found by
//! [`registry`]; [`profile`] says which fills each station. [`recheck`] replays a
//! record's decisions under another policy station, running nothing.

pub mod approvals;
pub mod audit;
pub mod capability;
pub mod confine;
pub mod handler;
pub mod host;
pub mod operator;
pub mod outcome;
pub mod pipeline;
pub mod plugin;
pub mod profile;
pub mod rate;
pub mod recheck;
pub mod refusal;
pub mod registry;
pub mod sandbox;
pub mod whereabouts;

pub use audit::{
    AuditNotice, OpenedAudit, RetentionError, export, export_session, open_audit, stored_sessions,
};
pub use host::{CloseError, Host, HostBuilder, PluginSource};
pub use outcome::{Ending, Exceeded};
pub use pipeline::{
    Approval, Call, CallClass, CallRecord, CallRequest, Executed, OpenError, OwnedCall, Park,
    Pipeline, PipelineError,
};
pub use plugin::{CheckedLibrary, LoadError, Metadata, Origin, Plugin};
pub use profile::{PluginChoice, Profile, ProfileError, ProfileSource};
pub use registry::{PluginSpec, Registry, ResolveError};
pub use sandbox::CancelToken;
