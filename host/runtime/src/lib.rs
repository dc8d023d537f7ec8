//! The Aegis host: it alone owns the station order, grants, the chain rule, the signing
//! key and the retention rule. Plugins fill stations; they never reorder them.
//!
//! This crate holds the plugin loader and registry ([`plugin`], [`registry`]), profiles
//! ([`profile`]) and the retention rule ([`audit`]). The pipeline, capability resolver
//! and sandbox land next, on top of these.

pub mod audit;
pub mod capability;
pub mod handler;
pub mod plugin;
pub mod profile;
pub mod registry;
pub mod sandbox;

pub use audit::{AuditNotice, OpenedAudit, RetentionError, export, open_audit};
pub use plugin::{LoadError, Metadata, Origin, Plugin};
pub use profile::{PluginChoice, Profile, ProfileError, ProfileSource};
pub use registry::{PluginSpec, Registry, ResolveError};
