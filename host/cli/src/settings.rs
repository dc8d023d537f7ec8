//! The operator's settings a command runs with: each flag the operator gave, else the
//! profile's `[operator]` value ([`aegis_runtime::operator`]), each with where it came
//! from, so errors and `-v` can name the flag or the profile line.
//!
//! Which command reads what: `run`, `wrap` and `gateway` the signing key, the audit
//! file and the role ([`HostSettings`]); `wrap` the pins keys ([`PinSettings`]) and,
//! with `confine`, the grants ([`crate::confine::GrantArgs::with_profile`]). A key a
//! command does not read is ignored by it.

use aegis_record::text::escape;
use aegis_runtime::operator::{Sourced, quoted};
use aegis_runtime::{HostBuilder, Profile};
use std::path::PathBuf;
use std::time::Duration;

use crate::{CliError, HostFlags};

/// What `run`, `wrap` and `gateway` take from the flags and the profile.
pub struct HostSettings {
    /// `--policy` (a flag only: the profile has its `[policy]` station).
    pub policy: Option<PathBuf>,
    /// `--audit`, else `operator.audit`.
    pub audit: Option<Sourced<PathBuf>>,
    /// `--signing-key`, else `operator.signing_key`.
    pub signing_key: Option<Sourced<PathBuf>>,
    /// `--role`, else `operator.role`.
    pub role: Option<Sourced<String>>,
    /// `--no-wait`.
    pub no_wait: bool,
    /// `--record-arguments`, else `operator.record_arguments`.
    pub record_arguments: Option<Sourced<bool>>,
    /// `--approval-timeout`, else `operator.approvals.timeout`.
    pub approval_timeout: Option<Sourced<Duration>>,
    /// `--approvals`, else `operator.approvals.dir`.
    pub approvals_dir: Option<Sourced<PathBuf>>,
    /// `operator.approvals.approvers` (a profile setting only).
    pub approvers: Option<Sourced<Vec<PathBuf>>>,
}

impl HostFlags {
    /// The flags alone, for checks made before the profile is read.
    pub fn flags_only(&self) -> HostSettings {
        let flag = |name, v: &Option<PathBuf>| {
            v.clone().map(|value| Sourced {
                value,
                source: aegis_runtime::operator::Source::Flag(name),
            })
        };
        HostSettings {
            policy: self.policy.clone(),
            audit: flag("--audit", &self.audit),
            signing_key: flag("--signing-key", &self.signing_key),
            role: self.role.clone().map(|value| Sourced {
                value,
                source: aegis_runtime::operator::Source::Flag("--role"),
            }),
            no_wait: self.no_wait,
            record_arguments: self.record_arguments.then_some(Sourced {
                value: true,
                source: aegis_runtime::operator::Source::Flag("--record-arguments"),
            }),
            approval_timeout: self.approval_timeout.map(|value| Sourced {
                value,
                source: aegis_runtime::operator::Source::Flag("--approval-timeout"),
            }),
            approvals_dir: flag("--approvals", &self.approvals_dir),
            approvers: None,
        }
    }

    /// The flags over `profile`'s settings: a flag given replaces the profile's value.
    ///
    /// # Errors
    /// [`CliError::Usage`]: an audit file (from either) with no signing key from either,
    /// as a durable sink needs one.
    pub fn with_profile(&self, profile: &Profile) -> Result<HostSettings, CliError> {
        let o = &profile.operator;
        let settings = HostSettings {
            policy: self.policy.clone(),
            audit: profile.choose("--audit", self.audit.clone(), o.audit.as_ref()),
            signing_key: profile.choose(
                "--signing-key",
                self.signing_key.clone(),
                o.signing_key.as_ref(),
            ),
            role: profile.choose("--role", self.role.clone(), o.role.as_ref()),
            no_wait: self.no_wait,
            record_arguments: profile.choose(
                "--record-arguments",
                self.record_arguments.then_some(true),
                o.record_arguments.as_ref(),
            ),
            approval_timeout: profile.choose(
                "--approval-timeout",
                self.approval_timeout,
                o.approval_timeout.as_ref(),
            ),
            approvals_dir: profile.choose(
                "--approvals",
                self.approvals_dir.clone(),
                o.approvals_dir.as_ref(),
            ),
            approvers: o.approvers.as_ref().map(|s| Sourced {
                value: s.value.clone(),
                source: profile.source_of(s),
            }),
        };
        if let (Some(audit), None) = (&settings.audit, &settings.signing_key) {
            return Err(CliError::Usage(format!(
                "{}: a durable audit file needs a signing key: give --signing-key, or set signing_key under the profile's [operator]",
                escape(&audit.source.name())
            )));
        }
        Ok(settings)
    }
}

impl HostSettings {
    /// The policy file, the audit file and the signing key applied to `builder`.
    ///
    /// # Errors
    /// [`CliError::Refused`] when the key cannot be loaded (a wrong mode, not a key),
    /// naming the flag or the profile line it came from.
    pub fn apply(&self, builder: HostBuilder) -> Result<HostBuilder, CliError> {
        let mut builder = builder;
        if let Some(policy) = &self.policy {
            builder = builder.policy_file("--policy", policy);
        }
        match &self.audit {
            Some(audit) if !audit.source.is_profile() => {
                builder = builder.audit_file("--audit", &audit.value);
            }
            Some(_) => builder = builder.operator_audit(),
            None => {}
        }
        if let Some(key) = &self.signing_key {
            let loaded = aegis_record::key::SigningKey::load(&key.value)
                .map_err(|e| CliError::Refused(format!("{}: {}", escape(&key.source.name()), e)))?;
            builder = builder.signing_key(loaded);
        }
        if let Some(t) = &self.approval_timeout {
            builder = builder.approval_timeout(t.value);
        }
        let whole = self.record_arguments.as_ref().is_some_and(|r| r.value);
        Ok(builder.record_arguments(whole))
    }

    /// The approvals desk for `front`, whose parks are on `record`: the queue directory
    /// (opened when a call is first parked) and the approvers the operator trusts.
    ///
    /// # Errors
    /// [`CliError::Refused`] for an approver key file that cannot be read, naming the
    /// profile line.
    pub fn desk(
        &self,
        front: aegis_approvals::Front,
        record: String,
    ) -> Result<aegis_runtime::approvals::Desk, CliError> {
        let approvers = match &self.approvers {
            None => None,
            Some(files) => Some(aegis_verify::approver_anchors(&files.value).map_err(|e| {
                CliError::Refused(format!("{}: {}", escape(&files.source.name()), e))
            })?),
        };
        let dir = self.approvals_dir.as_ref().map(|d| d.value.clone());
        Ok(aegis_runtime::approvals::Desk::new(
            dir, front, record, approvers,
        ))
    }

    /// The role every call asserts.
    pub fn role(&self) -> Option<&str> {
        self.role.as_ref().map(|r| r.value.as_str())
    }

    /// With -v, each effective setting and where it came from, a line each on stderr.
    pub fn show(&self) {
        show_path("signing_key", self.signing_key.as_ref());
        show_path("audit", self.audit.as_ref());
        if let Some(r) = &self.role {
            show_one("role", &quoted(&r.value), &r.source);
        }
        if let Some(r) = &self.record_arguments {
            show_one("record_arguments", &r.value.to_string(), &r.source);
        }
        if let Some(t) = &self.approval_timeout {
            show_one(
                "approvals.timeout",
                &format!("{}s", t.value.as_secs()),
                &t.source,
            );
        }
        show_path("approvals.dir", self.approvals_dir.as_ref());
        if let Some(a) = &self.approvers {
            let files: Vec<String> = a.value.iter().map(|p| p.display().to_string()).collect();
            show_one("approvals.approvers", &files.join(", "), &a.source);
        }
    }
}

/// What `wrap` takes for its pins.
pub struct PinSettings {
    /// `--pins`, else `operator.pins`.
    pub pins: Option<Sourced<PathBuf>>,
    /// `--write-pins`, else `operator.write_pins`.
    pub write_pins: Option<Sourced<PathBuf>>,
    /// `--pins-record-only`, else `operator.pins_record_only`; false when neither.
    pub record_only: Option<Sourced<bool>>,
}

impl PinSettings {
    /// The flags over `profile`'s settings. `--pins-record-only` given replaces the
    /// profile's value; absent, the profile's (`true` or `false`) holds.
    pub fn new(
        pins: Option<&PathBuf>,
        write_pins: Option<&PathBuf>,
        record_only: bool,
        profile: &Profile,
    ) -> PinSettings {
        let o = &profile.operator;
        PinSettings {
            pins: profile.choose("--pins", pins.cloned(), o.pins.as_ref()),
            write_pins: profile.choose("--write-pins", write_pins.cloned(), o.write_pins.as_ref()),
            record_only: profile.choose(
                "--pins-record-only",
                record_only.then_some(true),
                o.pins_record_only.as_ref(),
            ),
        }
    }

    /// Whether changed tools are logged rather than refused.
    pub fn record_only(&self) -> bool {
        self.record_only.as_ref().is_some_and(|s| s.value)
    }

    /// With -v, each effective setting and where it came from.
    pub fn show(&self) {
        show_path("pins", self.pins.as_ref());
        show_path("write_pins", self.write_pins.as_ref());
        if let Some(r) = &self.record_only {
            show_one("pins_record_only", &r.value.to_string(), &r.source);
        }
    }
}

fn show_path(key: &str, s: Option<&Sourced<PathBuf>>) {
    if let Some(s) = s {
        show_one(key, &quoted(&s.value.display().to_string()), &s.source);
    }
}

/// One `-v` line: `aegis: setting role = "analyst" (profile ops.toml:6)`.
pub fn show_one(key: &str, value: &str, source: &aegis_runtime::operator::Source) {
    crate::detail(format_args!(
        "aegis: setting {key} = {} ({})",
        escape(value),
        escape(&source.to_string())
    ));
}
