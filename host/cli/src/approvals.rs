//! `aegis approvals list|show|approve|deny`: a person's side of the approvals queue
//! (`aegis-approvals`). A host files each call its policy parks; these commands read
//! the queue and place one signed decision per request, which wakes the waiting host.

use crate::{CliError, exit, print};
use aegis_approvals::{DecideError, DecisionFile, Listed, Queue, QueueError, State};
use aegis_record::json::Object;
use aegis_record::key::{KeyError, SigningKey};
use aegis_record::text::escape;
use aegis_record::{ApprovalScope, DecisionVerdict};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `aegis approvals …`.
#[derive(clap::Subcommand)]
pub enum ApprovalsCommand {
    /// Every request in the queue, oldest park first: id, state, tool, who parked it
    /// and until when it can be decided.
    #[command(after_help = crate::help::APPROVALS_LIST)]
    List {
        #[command(flatten)]
        queue: QueueFlag,
        /// Print one JSON object per request, one per line.
        #[arg(long)]
        json: bool,
    },
    /// One request: exactly what approving it authorises (tool, arguments and their
    /// digest, bound axes, filesystem and network authority, expiry), who parked it,
    /// the rule and its reason, and its state.
    #[command(after_help = crate::help::APPROVALS_SHOW)]
    Show {
        /// The approval id (`apr-` and 32 hex digits).
        id: String,
        #[command(flatten)]
        queue: QueueFlag,
        /// Print it as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Approve a request with the scope it names, signed with your key: the waiting
    /// host runs the call once. The first decision of a request stands.
    #[command(after_help = crate::help::APPROVALS_APPROVE)]
    Approve {
        /// The approval id (`apr-` and 32 hex digits).
        id: String,
        /// Your signing key (`aegis keygen`); its key id is recorded as the approver's.
        #[arg(long, value_name = "KEY")]
        approver_key: PathBuf,
        /// Narrow the approval to expire this long from now (`90s`, `5m`, `1h`) instead
        /// of at the park's own expiry, which it may not pass.
        #[arg(long, value_name = "DURATION", value_parser = expires_in)]
        expires_in: Option<std::time::Duration>,
        #[command(flatten)]
        queue: QueueFlag,
    },
    /// Deny a request, signed with your key: the waiting host answers the call with
    /// your reason. The first decision of a request stands.
    #[command(after_help = crate::help::APPROVALS_DENY)]
    Deny {
        /// The approval id (`apr-` and 32 hex digits).
        id: String,
        /// Why; the client is told this.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Your signing key (`aegis keygen`); its key id is recorded as the approver's.
        #[arg(long, value_name = "KEY")]
        approver_key: PathBuf,
        #[command(flatten)]
        queue: QueueFlag,
    },
}

impl ApprovalsCommand {
    /// The command as typed, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            ApprovalsCommand::List { .. } => "approvals list",
            ApprovalsCommand::Show { .. } => "approvals show",
            ApprovalsCommand::Approve { .. } => "approvals approve",
            ApprovalsCommand::Deny { .. } => "approvals deny",
        }
    }
}

/// Where the queue is.
#[derive(clap::Args)]
pub struct QueueFlag {
    /// The approvals queue directory [default: $XDG_STATE_HOME/aegis/approvals, else
    /// ~/.local/state/aegis/approvals].
    #[arg(long = "approvals", value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

impl QueueFlag {
    /// The queue the hosts file parks in: `--approvals DIR`; else, with `--profile`,
    /// its `[operator.approvals] dir`, or the queue its audit store keeps (a database
    /// every host writes); else the default directory.
    pub fn open(&self, profile: Option<&str>) -> Result<Queue, CliError> {
        let dir = match (&self.dir, profile) {
            (Some(d), _) => d.clone(),
            (None, Some(profile)) => {
                let profile = crate::use_profile(profile)?;
                match &profile.operator.approvals_dir {
                    Some(dir) => dir.value.clone(),
                    None => match crate::plugins::store_queue(&profile)? {
                        Some(queue) => return Ok(queue),
                        None => default_dir()?,
                    },
                }
            }
            (None, None) => default_dir()?,
        };
        Queue::open(&dir).map_err(queue_error)
    }
}

fn default_dir() -> Result<PathBuf, CliError> {
    Queue::default_dir().map_err(|e| CliError::Usage(e.to_string()))
}

/// `aegis approvals …`.
pub fn approvals(command: &ApprovalsCommand, profile: Option<&str>) -> Result<u8, CliError> {
    match command {
        ApprovalsCommand::List { queue, json } => list(&queue.open(profile)?, *json),
        ApprovalsCommand::Show { id, queue, json } => {
            let id = checked(id)?;
            show(&queue.open(profile)?, id, *json)
        }
        ApprovalsCommand::Approve {
            id,
            approver_key,
            expires_in,
            queue,
        } => {
            let id = checked(id)?;
            decide(
                &queue.open(profile)?,
                id,
                approver_key,
                Verdict::Approve {
                    expires_in: *expires_in,
                },
            )
        }
        ApprovalsCommand::Deny {
            id,
            reason,
            approver_key,
            queue,
        } => {
            let id = checked(id)?;
            if reason.trim().is_empty() {
                return Err(CliError::Usage(
                    "deny: --reason is empty; say why (the client is told)".into(),
                ));
            }
            decide(
                &queue.open(profile)?,
                id,
                approver_key,
                Verdict::Deny { reason },
            )
        }
    }
}

/// The id, if it is one; otherwise a usage error (before the queue is touched).
fn checked(id: &str) -> Result<&str, CliError> {
    if aegis_approvals::is_approval_id(id) {
        Ok(id)
    } else {
        Err(CliError::Usage(format!(
            "{:?}: not an approval id (apr- and 32 lowercase hex digits, as `aegis approvals list` prints)",
            escape(id)
        )))
    }
}

/// A queue failure's exit code: the directory or a file in it refused (4), unreadable
/// or missing (2). Text a file holds is escaped.
fn queue_error(e: QueueError) -> CliError {
    let message = escape(&e.to_string()).into_owned();
    match e {
        QueueError::Directory { .. }
        | QueueError::Foreign { .. }
        | QueueError::Json { .. }
        | QueueError::Field { .. }
        | QueueError::TooMany { .. } => CliError::Refused(message),
        QueueError::File(aegis_files::FileError::NotAFile { .. })
        | QueueError::File(aegis_files::FileError::TooLarge { .. }) => CliError::Refused(message),
        QueueError::BadId { .. } | QueueError::NoDefaultDir => CliError::Usage(message),
        _ => CliError::Unreadable(message),
    }
}

/// `aegis approvals list`.
fn list(queue: &Queue, json: bool) -> Result<u8, CliError> {
    let listed = queue.list().map_err(queue_error)?;
    let mut out = String::new();
    for l in &listed {
        if json {
            out.push_str(&canonical(&l.to_object()));
            out.push('\n');
        } else {
            let r = &l.request;
            let _ = writeln!(
                out,
                "{}  {:<8}  {}  {} on {} (pid {})  parked {}  expires {}{}",
                r.approval_id,
                l.state.name(),
                escape(&r.tool_id),
                r.front.as_str(),
                escape(&r.host),
                r.pid,
                r.parked_at,
                r.expires_at,
                r.rule
                    .as_ref()
                    .map(|rule| format!("  rule {}", escape(rule)))
                    .unwrap_or_default(),
            );
        }
    }
    if !json && listed.is_empty() {
        crate::note(format_args!(
            "aegis: no requests in {}",
            escape(&queue.location())
        ));
    }
    print(out.as_bytes()).map_err(|_| CliError::Stdout)?;
    Ok(exit::OK)
}

fn canonical(o: &Object) -> String {
    String::from_utf8(o.to_canonical()).unwrap_or_default()
}

/// `aegis approvals show ID`.
fn show(queue: &Queue, id: &str, json: bool) -> Result<u8, CliError> {
    let request = queue.request(id).map_err(queue_error)?;
    let state = queue.state(id).map_err(queue_error)?;
    let listed = Listed { request, state };
    let text = if json {
        format!("{}\n", canonical(&listed.to_object()))
    } else {
        describe(&listed)
    };
    print(text.as_bytes()).map_err(|_| CliError::Stdout)?;
    Ok(exit::OK)
}

/// What `show` prints: what approving authorises first, then where it came from.
fn describe(l: &Listed) -> String {
    let r = &l.request;
    let mut out = String::new();
    let mut row = |name: &str, value: &str| {
        let _ = writeln!(out, "{name:<17} {value}");
    };
    row("approval_id", &r.approval_id);
    row("state", l.state.name());
    row("tool", &escape(&r.scope.tool_id));
    if r.tool_id != r.scope.tool_id {
        row("called as", &escape(&r.tool_id));
    }
    row(
        "arguments",
        &match (&r.arguments, r.arguments_cut) {
            (Some(a), _) => escape(a).into_owned(),
            (None, true) => "(over 64 KiB: not shown; the digest below binds them)".into(),
            (None, false) => "(none)".into(),
        },
    );
    for (name, value) in scope_rows(&r.scope) {
        row(&name, &value);
    }
    row(
        "bound",
        &r.bound
            .as_ref()
            .map_or("(none)".into(), |b| escape(&canonical(b)).into_owned()),
    );
    row("request expires", &r.expires_at);
    row("parked_at", &r.parked_at);
    row(
        "parked by",
        &format!(
            "{} on {} (pid {})",
            r.front.as_str(),
            escape(&r.host),
            r.pid
        ),
    );
    row("record", &escape(&r.record));
    row(
        "rule",
        &r.rule.as_deref().map_or("(unnamed)".into(), |s| escape(s)),
    );
    row(
        "reason",
        &r.reason
            .as_deref()
            .map_or("(none given)".into(), |s| escape(s)),
    );
    if let State::Decided(d) | State::Used(d) = &l.state {
        row("decided_at", &d.decided_at);
        row("verdict", &escape(&canonical(&d.verdict.to_object())));
        row("approver", &escape(&canonical(&d.approver.to_object())));
    }
    out
}

/// The authority an approval grants, a row each, nothing left out: what is absent is
/// said to be.
fn scope_rows(scope: &ApprovalScope) -> Vec<(String, String)> {
    let list = |items: &[String]| {
        if items.is_empty() {
            "(none)".to_owned()
        } else {
            items
                .iter()
                .map(|p| escape(p).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut rows = vec![(
        "arguments digest".to_owned(),
        scope
            .arguments_digest
            .map_or("(none: any arguments)".into(), |d| d.to_string()),
    )];
    match &scope.fs {
        Some(fs) => {
            rows.push(("fs read".into(), list(&fs.read_paths)));
            rows.push(("fs write".into(), list(&fs.write_paths)));
        }
        None => rows.push(("fs".into(), "(none)".into())),
    }
    match &scope.net {
        Some(net) if !net.http.is_empty() => {
            for rule in &net.http {
                let ports: Vec<String> = rule.ports.iter().map(u16::to_string).collect();
                rows.push((
                    "net".into(),
                    format!(
                        "{} ports {} methods {}",
                        escape(&rule.host),
                        if ports.is_empty() {
                            "(any)".into()
                        } else {
                            ports.join(",")
                        },
                        list(&rule.methods)
                    ),
                ));
            }
        }
        _ => rows.push(("net".into(), "(none)".into())),
    }
    rows.push((
        "approval expires".into(),
        scope
            .expires_at
            .clone()
            .unwrap_or_else(|| "(not bounded by the scope)".into()),
    ));
    rows
}

fn expires_in(text: &str) -> Result<std::time::Duration, String> {
    aegis_runtime::operator::parse_timeout(text)
}

/// What a person decides.
enum Verdict<'a> {
    /// The parked scope, or narrowed to expire sooner.
    Approve {
        expires_in: Option<std::time::Duration>,
    },
    /// With the reason the client is told.
    Deny { reason: &'a str },
}

/// The parked `scope`, expiring `after` from now: an approval may end sooner than its
/// park, never later.
fn narrowed(
    scope: &aegis_record::ApprovalScope,
    after: std::time::Duration,
) -> Result<aegis_record::ApprovalScope, CliError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after);
    let at = aegis_record::time::format_micros(u64::try_from(now.as_micros()).unwrap_or(u64::MAX));
    if let Some(parked) = &scope.expires_at
        && at.as_str() > parked.as_str()
    {
        return Err(CliError::Usage(format!(
            "--expires-in: {at} is after the park's own expiry, {parked}; an approval may only narrow what was parked"
        )));
    }
    Ok(aegis_record::ApprovalScope {
        expires_at: Some(at),
        ..scope.clone()
    })
}

/// Signs the verdict with the approver's key and places it as the request's one
/// decision.
fn decide(queue: &Queue, id: &str, key_path: &Path, said: Verdict<'_>) -> Result<u8, CliError> {
    let key = SigningKey::load(key_path).map_err(|e| match e {
        KeyError::Io { .. } => CliError::Unreadable(e.to_string()),
        _ => CliError::Refused(e.to_string()),
    })?;
    let request = queue.request(id).map_err(queue_error)?;
    let verdict = match said {
        Verdict::Approve { expires_in: None } => DecisionVerdict::Approved {
            scope: request.scope.clone(),
        },
        Verdict::Approve {
            expires_in: Some(after),
        } => DecisionVerdict::Approved {
            scope: narrowed(&request.scope, after)?,
        },
        Verdict::Deny { reason } => DecisionVerdict::Denied {
            reason: reason.to_owned(),
        },
    };
    let denied = matches!(verdict, DecisionVerdict::Denied { .. });
    let decision = DecisionFile::signed(&key, id, verdict);
    queue.decide(&decision).map_err(|e| match e {
        DecideError::AlreadyDecided { .. } => CliError::Settled(escape(&e.to_string()).into()),
        DecideError::Expired { .. } => CliError::Expired(e.to_string()),
        DecideError::NoSuchRequest { .. } => CliError::Unreadable(e.to_string()),
        DecideError::Queue(e) => queue_error(e),
        _ => CliError::Unreadable(e.to_string()),
    })?;
    crate::note(format_args!(
        "aegis: {} {id} ({}), signed by key {}; the waiting host is woken",
        if denied { "denied" } else { "approved" },
        escape(&request.tool_id),
        key.key_id()
    ));
    Ok(exit::OK)
}
