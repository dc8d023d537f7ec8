//! `aegis console`: a web page over a record or a directory of session files, served
//! from this binary on loopback, with the approvals queue when one is named.

use crate::CliError;
use crate::approvals::QueueFlag;
use aegis_console::feed::{SessionStore, Source, StoredSession};
use aegis_record::key::{KeyError, SigningKey};
use aegis_record::verify::TrustAnchor;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `aegis console`'s arguments.
#[derive(clap::Args)]
pub struct ConsoleArgs {
    /// A key the records must be signed by, as its public key or key id (64 lowercase
    /// hex, as `aegis verify --key` takes it); repeatable.
    #[arg(long = "key", value_name = "HEX", value_parser = parse_anchor)]
    keys: Vec<TrustAnchor>,
    /// A file of accepted keys, one a line, as `aegis verify --trust-store` reads it.
    #[arg(long, value_name = "PATH")]
    trust_store: Option<PathBuf>,
    /// Where to serve the page: a loopback address and port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8767")]
    http: SocketAddr,
    /// A file whose first line is the token the page's API requires (mode 0600, as
    /// `aegis gateway --token-file`). Without one, a fresh token is made for this run.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Your signing key (`aegis keygen`): the page may then approve and deny parked
    /// calls, each decision signed with it. Without it the queue is shown read-only.
    #[arg(long, value_name = "KEY")]
    approver_key: Option<PathBuf>,
    /// The approvals queue: shown when this, --profile or --approver-key is given.
    #[command(flatten)]
    queue: QueueFlag,
    /// The record file, or a directory of session files (every file beneath it is
    /// followed; new ones are picked up as they appear). Without it, --profile names
    /// what to show: where its commands record (`[operator] audit`, its file sink's
    /// path, or its store of many sessions, PostgreSQL).
    #[arg(value_name = "PATH")]
    path: Option<PathBuf>,
}

fn parse_anchor(s: &str) -> Result<TrustAnchor, String> {
    TrustAnchor::from_hex(s).map_err(|e| e.to_string())
}

/// Serves the console until SIGINT or SIGTERM. The address to open, with the token in
/// its fragment, goes to stderr.
pub fn console(a: &ConsoleArgs, profile: Option<&str>) -> Result<u8, CliError> {
    let token = match &a.token_file {
        Some(path) => {
            aegis_http::read_token(path).map_err(|e| CliError::Unreadable(e.to_string()))?
        }
        None => fresh_token()?,
    };
    // A token from a file is the operator's to keep (and may be shared with a
    // gateway): it is not printed where logs would keep it.
    let printed = match &a.token_file {
        Some(path) => format!(
            " (to open it, add #token= and the token in {} to the address)",
            path.display()
        ),
        None => format!("#token={token}"),
    };
    let trust = aegis_verify::trust_slice(&aegis_verify::VerifyArgs {
        keys: a.keys.clone(),
        trust_store: a.trust_store.clone(),
        approver_keys: Vec::new(),
        json: false,
        paths: Vec::new(),
    })
    .map_err(|e| CliError::Unreadable(e.to_string()))?;
    let source = match (&a.path, profile) {
        (Some(path), _) => path_source(path)?,
        (None, Some(profile)) => match crate::plugins::recorded(profile)? {
            crate::plugins::Recorded::File(path) => path_source(&path)?,
            crate::plugins::Recorded::Store(sink) => Source::Store(Arc::new(SinkSessions {
                sink,
                profile: profile.to_owned(),
            })),
        },
        (None, None) => {
            return Err(CliError::Usage(
                "console shows a record: give its file or a directory of session files, or --profile to show where the profile records".into(),
            ));
        }
    };
    let approver = match &a.approver_key {
        Some(path) => Some(Arc::new(SigningKey::load(path).map_err(|e| match e {
            KeyError::Io { .. } => CliError::Unreadable(e.to_string()),
            _ => CliError::Refused(e.to_string()),
        })?)),
        None => None,
    };
    let approvals = if a.queue.dir.is_some() || profile.is_some() || approver.is_some() {
        Some(a.queue.open(profile)?)
    } else {
        None
    };
    let console = aegis_console::Console {
        source,
        trust,
        approvals,
        approver,
    };
    let warn: aegis_http::Warn = Arc::new(|w: &str| crate::say(format_args!("aegis: {w}")));
    if a.keys.is_empty() && a.trust_store.is_none() {
        crate::note(format_args!(
            "aegis: no --key or --trust-store: records are checked unpinned (consistent, but signed by keys nobody here vouched for), and the page says so"
        ));
    }
    aegis_console::run(
        console,
        (a.http, false),
        Arc::from(token),
        warn,
        move |bound| {
            crate::say(format_args!(
                "aegis: console at http://{bound}/{printed} (SIGINT or SIGTERM stops it)"
            ));
        },
    )
    .map_err(|e| CliError::ServeFailed(e.to_string()))?;
    Ok(crate::exit::OK)
}

/// A file, or a directory of session files. A link is named, never followed, as
/// `aegis verify` treats one; a record not there yet is looked for again.
fn path_source(path: &std::path::Path) -> Result<Source, CliError> {
    // Named absolutely, so the page's `aegis verify` command works from anywhere.
    let path = std::path::absolute(path)
        .map_err(|e| CliError::Unreadable(format!("{}: {e}", path.display())))?;
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => Ok(Source::Directory(path)),
        Ok(_) => Ok(Source::File(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Source::File(path)),
        Err(e) => Err(CliError::Unreadable(format!("{}: {e}", path.display()))),
    }
}

/// A store of many sessions read through the profile's audit sink.
struct SinkSessions {
    sink: aegis_station_api::AuditSinkBox,
    /// The profile, as given, for the commands that export and verify a session.
    profile: String,
}

impl SessionStore for SinkSessions {
    fn location(&self) -> String {
        self.sink.location().to_string()
    }

    fn sessions(&self) -> Result<Vec<StoredSession>, String> {
        let listed = aegis_runtime::stored_sessions(&self.sink, "", "")
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        Ok(listed
            .into_iter()
            .map(|s| StoredSession {
                id: s.id.into(),
                lines: s.lines,
            })
            .collect())
    }

    fn read(&self, id: &str, start: u64, max: u32) -> Result<Vec<Vec<u8>>, String> {
        self.sink
            .read_session(id.into(), start, max)
            .into_result()
            .map(|lines| lines.into_iter().map(|l| l.into_vec()).collect())
            .map_err(|e| e.to_string())
    }

    fn verify_command(&self, _id: &str) -> String {
        let profile = self.profile.replace('\'', r"'\''");
        format!(
            "aegis --profile '{profile}' export --out DIR && aegis verify DIR (the session's file is named after its host, time and id)"
        )
    }
}

/// 32 random bytes as hex: the token of a run given no token file.
fn fresh_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::Refused(format!("no randomness for a token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
