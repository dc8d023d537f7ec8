//! The retention rule, enforced here for every sink, built in or loaded.
//!
//! # Guarantees
//! - A durable sink is never opened with the public development key: the open fails
//!   and says how to make a key.
//! - A sink whose retention value this host does not know is refused.
//! - A sink that cannot answer its existing tail, or whose tail is torn or not a
//!   record line, is refused at open (fail closed).
//! - A new session chains to the stored tail through `prev_session_tail`.
//! - The open line records provenance: the aegis version, the profile's name and
//!   SHA-256, every plugin's name, version, kinds and library SHA-256 (or `builtin`),
//!   and the sink's declared retention; and, when the operator replaced a station the
//!   profile names, what replaced it (`overrides`, see [`crate::host`]).
//! - The sink only stores bytes; numbering, linking and signing happen in
//!   `aegis_record::Session`.
//!
//! # Non-guarantees
//! - A volatile sink's records die with the process; the notice says so.

use crate::plugin::Plugin;
use crate::profile::{Profile, provenance_of};
use abi_stable::std_types::RVec;
use aegis_record::json::{self, Object, Value};
use aegis_record::{LineHash, LineSink, Session, SigningKey, WriteError};
use aegis_station_api::{AuditSinkBox, ErrorKind, PluginError, Retention, StoredSession, TailKind};
use std::sync::Arc;

/// What the operator is told about where records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditNotice {
    /// Nothing is retained. No path is named: there is none to name.
    Volatile,
    /// Records are kept at `location`.
    Durable {
        /// Where (a path, a database).
        location: String,
    },
}

impl AuditNotice {
    /// Where the record is, as an approvals request names it: the durable sink's
    /// location, or `(volatile)`.
    pub fn location(&self) -> String {
        match self {
            AuditNotice::Volatile => "(volatile)".to_owned(),
            AuditNotice::Durable { location } => location.clone(),
        }
    }
}

impl std::fmt::Display for AuditNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuditNotice::Volatile => {
                f.write_str("Audit: (volatile sink — records are not retained)")
            }
            AuditNotice::Durable { location } => write!(f, "Audit: {location}"),
        }
    }
}

/// Why an audit sink was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// Durable sink and no signing key given.
    #[error(
        "audit sink {plugin} is durable ({location}) but no signing key was given, and the public development key proves nothing; create one with `aegis keygen --out PATH` and pass --signing-key PATH"
    )]
    DevelopmentKeyOnDurable {
        /// The sink plugin.
        plugin: String,
        /// Where it keeps records.
        location: String,
    },
    /// The signing key given for a durable sink is one whose seed is published (the
    /// development key or a spec vector key).
    #[error(
        "audit sink {plugin} is durable ({location}) but the signing key given is the published {key} (key_id {key_id}), whose seed anyone can read; create a key of your own with `aegis keygen --out PATH`"
    )]
    PublishedKeyOnDurable {
        /// The sink plugin.
        plugin: String,
        /// Where it keeps records.
        location: String,
        /// Which published key it is.
        key: &'static str,
        /// Its fingerprint.
        key_id: String,
    },
    /// A retention value this host does not define.
    #[error("audit sink {plugin} declares retention {value}, which this host does not know")]
    UnknownRetention {
        /// The sink plugin.
        plugin: String,
        /// The value.
        value: u32,
    },
    /// The sink could not say what it holds.
    #[error("audit sink {plugin} cannot report its existing tail: {message}")]
    TailUnreadable {
        /// The sink plugin.
        plugin: String,
        /// Its error.
        message: String,
    },
    /// The stored tail is torn.
    #[error("audit sink {plugin} ends in a torn line{}; repair it before appending", at(.location))]
    TornTail {
        /// The sink plugin.
        plugin: String,
        /// Where.
        location: String,
    },
    /// The stored tail is not a record line.
    #[error("audit sink {plugin}: its last line is not a record line ({detail})")]
    TailNotARecord {
        /// The sink plugin.
        plugin: String,
        /// Why.
        detail: String,
    },
    /// Writing the open line failed.
    #[error("audit sink {plugin}: {source}")]
    Write {
        /// The sink plugin.
        plugin: String,
        /// The cause.
        source: WriteError,
    },
}

fn at(location: &str) -> String {
    if location.is_empty() {
        String::new()
    } else {
        format!(" ({location})")
    }
}

/// An audit sink as the chain writer sees it. The sink is shared with the host's rate
/// ledger ([`crate::rate`]), which takes rate-limit tokens from the same store.
struct SinkAdapter(Arc<AuditSinkBox>);

impl LineSink for SinkAdapter {
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        self.0
            .append(line.into())
            .into_result()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    fn sync(&self) -> std::io::Result<()> {
        self.0
            .sync()
            .into_result()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// An open audit session and what to tell the operator about it.
pub struct OpenedAudit {
    /// The session: every line goes through its chain rule.
    pub session: Session,
    /// Where records go.
    pub notice: AuditNotice,
    sink: Arc<SinkAdapter>,
    /// The hash of the session's open line, which names it.
    open_line: LineHash,
}

impl std::fmt::Debug for OpenedAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedAudit")
            .field("session", &self.session)
            .field("notice", &self.notice)
            .finish_non_exhaustive()
    }
}

impl OpenedAudit {
    /// The hash of the session's open line, which names it.
    pub fn open_line(&self) -> LineHash {
        self.open_line
    }

    /// Whether the sink holds many sessions, each a chain of its own (a database many
    /// hosts write), so a stopped session can be followed by a new one on a new sink.
    pub fn holds_many_sessions(&self) -> bool {
        // A time no session can have opened at or after: the answer says only whether
        // the sink lists sessions at all.
        matches!(
            stored_sessions(&self.sink.0, "", "9999-12-31T23:59:59.999999Z"),
            Ok(Some(_))
        )
    }

    /// The approvals queue the session's store keeps (a database many hosts write), so a
    /// park filed here can be decided from any machine reaching the store; `None` when
    /// the sink keeps none.
    ///
    /// # Errors
    /// The store failed to say.
    pub fn approvals_queue(
        &self,
    ) -> Result<Option<aegis_approvals::Queue>, aegis_approvals::QueueError> {
        crate::approvals::store_queue(&self.sink.0)
    }

    /// Writes every line this session's sink holds to `out` (see [`export`]). For a
    /// volatile sink this is the only way to see its record before the process ends.
    ///
    /// # Errors
    /// The sink's read error, or the write error.
    pub fn export(&self, out: &mut impl std::io::Write) -> std::io::Result<u64> {
        export(&self.sink.0, out)
    }

    /// Closes the session (writing its close line) and returns the sink's whole record.
    ///
    /// # Errors
    /// The close line could not be written, or the sink could not be read.
    pub fn close_and_export(self) -> std::io::Result<Vec<u8>> {
        self.session.close().map_err(std::io::Error::other)?;
        let mut out = Vec::new();
        export(&self.sink.0, &mut out)?;
        Ok(out)
    }
}

/// The provenance object for the open line.
pub fn provenance(profile: &Profile, plugins: &[(&str, &Plugin)], retention: Retention) -> Object {
    provenance_with(profile, plugins, retention, ProvenanceExtra::default())
}

/// What a host adds to the open line's provenance beyond the profile and its plugins.
#[derive(Clone, Debug, Default)]
pub struct ProvenanceExtra {
    /// The operator's overrides of the profile (see [`crate::host`]), each an object
    /// saying what replaced what; the `overrides` member is left out when there are none.
    pub overrides: Vec<Object>,
    /// The profile's confinement backend and level, and what it enforced on the native
    /// program this session started (spec/SPEC.md, "Confinement"); left out when the
    /// profile names none.
    pub confinement: Option<Object>,
    /// How a long-lived host serves its calls (`aegis gateway`: transport, address,
    /// concurrency cap, whether non-loopback clients were allowed); left out otherwise.
    pub serving: Option<Object>,
    /// The front end (`run`, `wrap`, `gateway`) and what it fronts; left out when the
    /// embedder names none.
    pub front: Option<Object>,
    /// The session this one follows because it stopped (a write to its sink failed):
    /// `{"open_line_hash": …}` of the stopped session; left out otherwise.
    pub resumes: Option<Object>,
}

/// The provenance object, with the [`ProvenanceExtra`] members.
fn provenance_with(
    profile: &Profile,
    plugins: &[(&str, &Plugin)],
    retention: Retention,
    extra: ProvenanceExtra,
) -> Object {
    let ProvenanceExtra {
        overrides,
        confinement,
        serving,
        front,
        resumes,
    } = extra;
    let mut p = Object::new();
    p.insert("aegis_version", env!("CARGO_PKG_VERSION"));
    p.insert("host", crate::whereabouts::this_host());
    let mut prof = Object::new();
    prof.insert("name", profile.name.as_str());
    prof.insert("sha256", aegis_record::digest::encode_hex(&profile.sha256));
    p.insert("profile", prof);
    p.insert(
        "plugins",
        Value::Array(
            plugins
                .iter()
                .map(|(station, plugin)| Value::Object(provenance_of(station, plugin)))
                .collect(),
        ),
    );
    p.insert(
        "retention",
        if retention == Retention::DURABLE {
            "durable"
        } else {
            "volatile"
        },
    );
    if !overrides.is_empty() {
        p.insert(
            "overrides",
            Value::Array(overrides.into_iter().map(Value::Object).collect()),
        );
    }
    p.insert_opt("confinement", confinement);
    p.insert_opt("serving", serving);
    p.insert_opt("front", front);
    p.insert_opt("resumes", resumes);
    p
}

/// Opens an audit session on `sink` under the retention rule.
///
/// `key` is the operator's signing key; `None` means the development key, which only a
/// volatile sink accepts. `plugins` lists every station plugin for the provenance.
///
/// # Errors
/// See [`RetentionError`].
pub fn open_audit(
    sink: AuditSinkBox,
    sink_plugin: &Plugin,
    key: Option<SigningKey>,
    profile: &Profile,
    plugins: &[(&str, &Plugin)],
) -> Result<OpenedAudit, RetentionError> {
    open_audit_with(
        sink,
        sink_plugin,
        key,
        profile,
        plugins,
        ProvenanceExtra::default(),
    )
}

/// [`open_audit`], recording the operator's `overrides` of the profile in the
/// provenance (each an object saying what replaced what; see [`crate::host`]).
///
/// # Errors
/// See [`RetentionError`].
pub fn open_audit_with(
    sink: AuditSinkBox,
    sink_plugin: &Plugin,
    key: Option<SigningKey>,
    profile: &Profile,
    plugins: &[(&str, &Plugin)],
    extra: ProvenanceExtra,
) -> Result<OpenedAudit, RetentionError> {
    open_shared_audit(Arc::new(sink), sink_plugin, key, profile, plugins, extra)
}

/// [`open_audit_with`] on a sink shared with the host's rate ledger.
pub(crate) fn open_shared_audit(
    sink: Arc<AuditSinkBox>,
    sink_plugin: &Plugin,
    key: Option<SigningKey>,
    profile: &Profile,
    plugins: &[(&str, &Plugin)],
    extra: ProvenanceExtra,
) -> Result<OpenedAudit, RetentionError> {
    let name = sink_plugin.metadata().name.clone();
    let retention = sink.retention();
    let location = sink.location().to_string();
    let notice = match retention {
        Retention::VOLATILE => AuditNotice::Volatile,
        Retention::DURABLE => AuditNotice::Durable {
            location: location.clone(),
        },
        Retention(value) => {
            return Err(RetentionError::UnknownRetention {
                plugin: name,
                value,
            });
        }
    };
    let key = match key {
        // A key whose seed is printed in the spec proves nothing about who signed, so
        // it never signs a record anyone keeps.
        Some(k) if retention == Retention::DURABLE => {
            if let Some(published) = aegis_record::key::published_test_key(&k.public_key()) {
                return Err(RetentionError::PublishedKeyOnDurable {
                    plugin: name,
                    location,
                    key: published,
                    key_id: k.key_id().to_hex(),
                });
            }
            k
        }
        Some(k) => k,
        None if retention == Retention::VOLATILE => SigningKey::development(),
        None => {
            return Err(RetentionError::DevelopmentKeyOnDurable {
                plugin: name,
                location,
            });
        }
    };
    let tail = sink
        .existing_tail()
        .into_result()
        .map_err(|e| RetentionError::TailUnreadable {
            plugin: name.clone(),
            message: e.to_string(),
        })?;
    let prev_session_tail = match tail.kind {
        TailKind::EMPTY => None,
        TailKind::LINE => {
            Some(
                tail_hash(&tail.line).map_err(|detail| RetentionError::TailNotARecord {
                    plugin: name.clone(),
                    detail,
                })?,
            )
        }
        TailKind::TORN => {
            return Err(RetentionError::TornTail {
                plugin: name,
                location,
            });
        }
        TailKind(other) => {
            return Err(RetentionError::TailUnreadable {
                plugin: name,
                message: format!("unknown tail kind {other}"),
            });
        }
    };
    let mut extensions = Object::new();
    extensions.insert(
        "provenance",
        provenance_with(profile, plugins, retention, extra),
    );
    let sink = Arc::new(SinkAdapter(sink));
    let session =
        Session::open(sink.clone(), key, prev_session_tail, extensions).map_err(|source| {
            RetentionError::Write {
                plugin: name,
                source,
            }
        })?;
    Ok(OpenedAudit {
        open_line: session.tail(),
        session,
        notice,
        sink,
    })
}

/// The line hash of a stored line: SHA-256 of its canonical form.
fn tail_hash(line: &[u8]) -> Result<LineHash, String> {
    match json::parse(line) {
        Ok(Value::Object(o)) => Ok(LineHash::of_line(&o.to_canonical())),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// How many lines `export` asks a sink for at once.
const EXPORT_PAGE: u32 = 1024;

/// Writes every line a sink holds to `out`, byte-exact, one per line: a file that
/// `aegis verify` reads. Returns the number of lines.
///
/// # Errors
/// The sink's read error, or the write error.
pub fn export(sink: &AuditSinkBox, out: &mut impl std::io::Write) -> std::io::Result<u64> {
    write_pages(out, |start| sink.read_lines(start, EXPORT_PAGE))
}

/// Writes the pages `read(start)` answers to `out`, a line each, until one comes back
/// short. Returns the number of lines.
fn write_pages(
    out: &mut impl std::io::Write,
    read: impl Fn(u64) -> abi_stable::std_types::RResult<RVec<RVec<u8>>, PluginError>,
) -> std::io::Result<u64> {
    let mut written = 0u64;
    loop {
        let page = read(written)
            .into_result()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        for line in &page {
            out.write_all(line)?;
            out.write_all(b"\n")?;
        }
        written += page.len() as u64;
        if page.len() < EXPORT_PAGE as usize {
            out.flush()?;
            return Ok(written);
        }
    }
}

/// The sessions a store of many sessions holds, oldest first, on `host` (any when
/// empty) opened at or after `since` (the record's time form; any when empty); `None`
/// for a sink that keeps one chain (its lines are read with [`export`]).
///
/// # Errors
/// The sink's error, other than "unsupported".
pub fn stored_sessions(
    sink: &AuditSinkBox,
    host: &str,
    since: &str,
) -> std::io::Result<Option<Vec<StoredSession>>> {
    match sink.sessions(host.into(), since.into()).into_result() {
        Ok(sessions) => Ok(Some(sessions.into_vec())),
        Err(e) if e.kind == ErrorKind::UNSUPPORTED => Ok(None),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// Writes every line of session `id` of a store of many sessions to `out`, byte-exact,
/// one per line: a file that `aegis verify` reads. Returns the number of lines.
///
/// # Errors
/// The sink's read error, or the write error.
pub fn export_session(
    sink: &AuditSinkBox,
    id: &str,
    out: &mut impl std::io::Write,
) -> std::io::Result<u64> {
    write_pages(out, |start| {
        sink.read_session(id.into(), start, EXPORT_PAGE)
    })
}
