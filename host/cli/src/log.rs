//! `aegis log`: a record read as a person reads it, one line a call, after the verdict
//! `aegis verify` gives the same bytes.
//!
//! The record is read once and kept (as `recheck` keeps it), verified, then listed: a
//! Tampered record lists nothing (it is evidence of nothing), an Indeterminate one lists
//! what it holds under its verdict. Every text the record holds (tool ids, reasons a tool
//! or server wrote) is escaped for the terminal.

use aegis_record::json::{Object, Value};
use aegis_record::line::{LineType, OutcomeLine};
use aegis_record::text::escape;
use aegis_record::verify::{Options, Verdict, verify};
use aegis_record::{
    CapabilityOutcome, ExecutionOutcome, IntentLine, PolicyOutcome, ToolChangeLine,
};
use aegis_runtime::pipeline::CallClass;
use std::collections::HashMap;

use crate::recheck::Kept;

mod follow;
use crate::{CliError, exit, print};

/// `aegis log`'s arguments.
#[derive(clap::Args)]
pub struct LogArgs {
    /// The record, its trust options and --json, as `aegis verify` takes them (one
    /// record).
    #[command(flatten)]
    record: aegis_verify::VerifyArgs,
    /// Only calls to this tool.
    #[arg(long, value_name = "TOOL")]
    tool: Option<String>,
    /// Only calls with this verdict: ok, denied, rate_limited, parked, no_grant, failed,
    /// ceiling, refused, no_outcome, or tool_change for the tool definitions a relay saw
    /// change.
    #[arg(long, value_name = "VERDICT", value_parser = clap::builder::PossibleValuesParser::new(VERDICTS))]
    verdict: Option<String>,
    /// Only lines timed at or after TIME (RFC 3339 UTC, as the record writes it:
    /// 2026-12-04T06:10:00.000000Z); lines without a time are left out.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    since: Option<String>,
    /// Keep reading as the record grows, as `tail -f` does, verifying each line before
    /// listing it: a call is listed once its outcome line verifies. A Tampered line, a
    /// file that shrinks or whose name leads to another file (a record only grows) stop
    /// it with exit 1; SIGINT or SIGTERM stop it with exit 0 and the verdict so far.
    /// With -, standard input is read until it ends.
    #[arg(long)]
    follow: bool,
}

const VERDICTS: [&str; 10] = [
    "ok",
    "denied",
    "rate_limited",
    "parked",
    "no_grant",
    "failed",
    "ceiling",
    "refused",
    "no_outcome",
    "tool_change",
];

fn parse_time(text: &str) -> Result<String, String> {
    if aegis_record::time::is_valid(text) {
        Ok(text.to_owned())
    } else {
        Err(
            "expected RFC 3339 UTC with six fractional digits, as 2026-12-04T06:10:00.000000Z"
                .into(),
        )
    }
}

/// One row of the log.
struct Row {
    time: Option<String>,
    session: u64,
    tool: String,
    verdict: &'static str,
    station: String,
    reason: String,
    wall_ms: Option<u64>,
    call_id: String,
    /// The key id that signed the outcome (or the tool change).
    key: Option<String>,
    /// What the call tried: its bound arguments as recorded (canonical JSON text).
    tried: Option<String>,
}

pub fn log(args: &LogArgs) -> Result<u8, CliError> {
    let [path] = args.record.paths.as_slice() else {
        return Err(CliError::Usage(
            "log reads one record: give one file, or - for standard input".into(),
        ));
    };
    let trust =
        aegis_verify::trust_slice(&args.record).map_err(|e| CliError::Unreadable(e.to_string()))?;
    let approvers = aegis_verify::approver_slice(&args.record)
        .map_err(|e| CliError::Unreadable(e.to_string()))?;
    if args.follow {
        return follow::follow(args, path, trust, approvers);
    }
    let (name, mut kept) = Kept::open(path)?;
    let report = verify(
        &mut kept,
        &Options {
            trust,
            threads: 0,
            approvers: approvers.clone(),
        },
    )
    .map_err(|e| CliError::Unreadable(format!("{name}: {e}")))?;
    let code = match report.verdict() {
        Verdict::Verified(_) => exit::OK,
        Verdict::Tampered(_) => aegis_verify::exit::TAMPERED_OR_USAGE,
        Verdict::Indeterminate(_) => aegis_verify::exit::INDETERMINATE,
    };
    let entries = if matches!(report.verdict(), Verdict::Tampered(_)) {
        Vec::new()
    } else {
        rows_of(&kept.bytes)
    };
    let mut out = Vec::new();
    if args.record.json {
        // {"verify": <the report aegis verify --json prints>}
        out.extend_from_slice(b"{\"verify\":");
        out.extend(report.to_json());
        out.push(b'}');
        out.push(b'\n');
    } else {
        out.extend(format!("# {}\n", report.headline()).into_bytes());
    }
    for entry in &entries {
        match entry {
            Entry::Session(session, opened) => {
                out.extend(opened.listed(*session, args.record.json));
            }
            Entry::Call(row) if keep(args, row) => out.extend(row_listed(row, args.record.json)),
            Entry::Call(_) => {}
        }
    }
    print(&out).map_err(|_| CliError::Stdout)?;
    Ok(code)
}

/// Whether the filters keep `r`.
fn keep(args: &LogArgs, r: &Row) -> bool {
    args.tool.as_ref().is_none_or(|t| *t == r.tool)
        && args.verdict.as_deref().is_none_or(|v| v == r.verdict)
        && args
            .since
            .as_ref()
            .is_none_or(|since| r.time.as_ref().is_some_and(|t| t >= since))
}

/// One entry of the listing: a session's opening, or a call.
enum Entry {
    Session(u64, Box<Opened>),
    Call(Row),
}

/// Where and how a session opened, from its open line: when, on which host, which
/// front end (and what it fronted), under which key.
struct Opened {
    time: Option<String>,
    key: Option<String>,
    host: Option<Object>,
    front: Option<Object>,
}

impl Opened {
    fn of(obj: &Object) -> Opened {
        let provenance = obj.get("provenance").and_then(Value::as_object);
        let member = |name: &str| {
            provenance
                .and_then(|p| p.get(name))
                .and_then(Value::as_object)
                .cloned()
        };
        Opened {
            time: obj.get("time").and_then(Value::as_str).map(str::to_owned),
            key: obj.get("key_id").and_then(Value::as_str).map(str::to_owned),
            host: member("host"),
            front: member("front"),
        }
    }

    /// The session's line: `# session N opened TIME on HOST by FRONT, key KEY`, or
    /// with `json` `{"session":{…}}` holding the provenance's `host` and `front` as
    /// recorded. Text from the record is escaped.
    fn listed(&self, session: u64, json: bool) -> Vec<u8> {
        if json {
            let mut o = Object::new();
            o.insert(
                "index",
                aegis_record::json::SafeInt::new(session).unwrap_or_default(),
            );
            o.insert_opt("time", self.time.clone());
            o.insert_opt("key_id", self.key.clone());
            o.insert_opt("host", self.host.clone());
            o.insert_opt("front", self.front.clone());
            let mut line = Object::new();
            line.insert("session", o);
            let mut out = line.to_canonical();
            out.push(b'\n');
            return out;
        }
        let text = |o: &Option<Object>, path: &[&str]| -> Option<String> {
            let (last, inner) = path.split_last()?;
            let mut at = o.as_ref()?;
            for key in inner {
                at = at.get(key)?.as_object()?;
            }
            at.get(last)?.as_str().map(|s| escape(s).into_owned())
        };
        let hostname = text(&self.host, &["hostname"]).unwrap_or_else(|| "-".into());
        let mut front = text(&self.front, &["command"]).unwrap_or_else(|| "-".into());
        let argv: Vec<String> = self
            .front
            .as_ref()
            .and_then(|f| f.get("server")?.as_object()?.get("argv")?.as_array())
            .map(|argv| {
                argv.iter()
                    .filter_map(Value::as_str)
                    .map(|a| escape(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if !argv.is_empty() {
            front.push_str(" -- ");
            front.push_str(&argv.join(" "));
        }
        if let Some(manifest) = text(&self.front, &["manifest"]) {
            front.push(' ');
            front.push_str(&manifest);
        }
        let key = self
            .key
            .as_deref()
            .map_or("-", |k| k.get(..16).unwrap_or(k));
        format!(
            "# session {session} opened {} on {hostname} by {front}, key {}\n",
            self.time.as_deref().unwrap_or("-"),
            escape(key)
        )
        .into_bytes()
    }
}

/// A call's row as listed: a line of text, or one JSON object.
fn row_listed(row: &Row, json: bool) -> Vec<u8> {
    if json {
        let mut out = row_json(row).to_canonical();
        out.push(b'\n');
        out
    } else {
        row_text(row).into_bytes()
    }
}

/// Every session's opening, every call (by its intent, or its outcome when it has
/// none) and every tool change, in file order. Lines the verifier accepted are read
/// again here; one that does not read as its type is skipped (the verdict above
/// already says what it is).
fn rows_of(bytes: &[u8]) -> Vec<Entry> {
    let mut rows: Vec<Entry> = Vec::new();
    let mut by_call: HashMap<(u64, String), usize> = HashMap::new();
    let mut session = 0u64;
    let mut opened = false;
    for line in bytes.split(|&b| b == b'\n') {
        match Read::of(line) {
            Some(Read::Open(o)) => {
                if opened {
                    session += 1;
                }
                opened = true;
                rows.push(Entry::Session(session, o));
            }
            Some(Read::Intent(time, intent)) => {
                by_call.insert((session, intent.call_id.clone()), rows.len());
                rows.push(Entry::Call(intent_row(time, session, intent)));
            }
            Some(Read::Outcome(time, outcome, key)) => {
                match by_call.remove(&(session, outcome.call_id.clone())) {
                    Some(i) => {
                        if let Entry::Call(row) = &mut rows[i] {
                            complete(row, &outcome, key);
                        }
                    }
                    None => rows.push(Entry::Call(outcome_row(time, session, &outcome, key))),
                }
            }
            Some(Read::Change(row)) => rows.push(Entry::Call(Row { session, ..*row })),
            Some(Read::Close) | None => {}
        }
    }
    rows
}

/// A line as the listing reads it.
enum Read {
    Open(Box<Opened>),
    Intent(Option<String>, IntentLine),
    /// The outcome, with the line's time and the key id that signed it.
    Outcome(Option<String>, Box<OutcomeLine>, Option<String>),
    /// A tool change's row (its session is the caller's to set).
    Change(Box<Row>),
    Close,
}

impl Read {
    /// `None` for a line that does not read as a type the listing shows.
    fn of(line: &[u8]) -> Option<Read> {
        let Ok(Value::Object(obj)) = aegis_record::json::parse(line) else {
            return None;
        };
        let time = obj.get("time").and_then(Value::as_str).map(str::to_owned);
        let key = obj.get("key_id").and_then(Value::as_str).map(str::to_owned);
        let line_type = obj.get("line_type").and_then(Value::as_str).unwrap_or("");
        Some(match LineType::from_token(line_type) {
            LineType::Open => Read::Open(Box::new(Opened::of(&obj))),
            LineType::Close => Read::Close,
            LineType::Intent => Read::Intent(time, IntentLine::from_object(&obj).ok()?),
            LineType::Outcome => {
                Read::Outcome(time, Box::new(OutcomeLine::from_object(&obj).ok()?), key)
            }
            LineType::ToolChange => {
                let change = ToolChangeLine::from_object(&obj).ok()?;
                let mut reason = format!("{} ({})", change.change.token(), change.action.token());
                if !change.fields.is_empty() {
                    reason.push_str(": ");
                    reason.push_str(&change.fields.join(", "));
                }
                Read::Change(Box::new(Row {
                    time,
                    session: 0,
                    tool: change.tool_id,
                    verdict: "tool_change",
                    station: "pins".into(),
                    reason,
                    wall_ms: None,
                    call_id: String::new(),
                    key,
                    tried: None,
                }))
            }
            _ => return None,
        })
    }
}

/// A call by its intent, until its outcome comes.
fn intent_row(time: Option<String>, session: u64, intent: IntentLine) -> Row {
    Row {
        time,
        session,
        tool: intent.tool_id,
        verdict: "no_outcome",
        station: String::new(),
        reason: String::new(),
        wall_ms: None,
        call_id: intent.call_id,
        key: None,
        tried: None,
    }
}

/// A call by its outcome alone, when no intent was read for it.
fn outcome_row(
    time: Option<String>,
    session: u64,
    outcome: &OutcomeLine,
    key: Option<String>,
) -> Row {
    let mut row = Row {
        time,
        session,
        tool: outcome.tool_id.clone(),
        verdict: "no_outcome",
        station: String::new(),
        reason: String::new(),
        wall_ms: None,
        call_id: outcome.call_id.clone(),
        key: None,
        tried: None,
    };
    complete(&mut row, outcome, key);
    row
}

/// A call's row with its outcome's verdict, station, reason, duration, signing key and
/// what it tried.
fn complete(row: &mut Row, outcome: &OutcomeLine, key: Option<String>) {
    let (verdict, station, reason) = judged(outcome);
    row.verdict = verdict;
    row.station = station;
    row.reason = reason;
    row.wall_ms = outcome.wall_ms.map(|w| w.get());
    row.key = key;
    row.tried = outcome
        .decision_axes
        .bound
        .as_ref()
        .map(|b| b.values.clone());
}

/// The verdict token, the station that decided (empty when it ran) and why.
fn judged(outcome: &OutcomeLine) -> (&'static str, String, String) {
    let verdict = match CallClass::of(outcome) {
        CallClass::Success => "ok",
        CallClass::PolicyDenied => "denied",
        CallClass::RateLimited => "rate_limited",
        CallClass::PendingApproval => "parked",
        CallClass::CapabilityDenied => "no_grant",
        CallClass::Trap => "failed",
        CallClass::ResourceExceeded => "ceiling",
        CallClass::HostDenied => "refused",
    };
    let station = match outcome.stopped() {
        Some(stop) => stop.cause.station().to_string(),
        None => match &outcome.execution {
            ExecutionOutcome::Success => String::new(),
            _ => "sandbox".into(),
        },
    };
    if let (CallClass::CapabilityDenied, CapabilityOutcome::Denied { reason, .. }) =
        (CallClass::of(outcome), &outcome.capability)
    {
        return (verdict, station, reason.clone());
    }
    let reason = match (&outcome.policy, &outcome.execution) {
        (PolicyOutcome::Denied { reason } | PolicyOutcome::RateLimited { reason }, _)
            if !reason.starts_with("not reached") =>
        {
            reason.clone()
        }
        (PolicyOutcome::PendingApproval { approval_id, .. }, _) => {
            format!("parked for approval {approval_id}")
        }
        (_, ExecutionOutcome::HostDenied { reason }) => reason.clone(),
        (_, ExecutionOutcome::Trap { message }) => message.clone(),
        (_, ExecutionOutcome::ResourceExceeded { kind }) => format!("the {kind} ceiling"),
        (_, ExecutionOutcome::Success) => String::new(),
    };
    (verdict, station, reason)
}

fn row_text(r: &Row) -> String {
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            escape(s).into_owned()
        }
    };
    // A key by its first 16 hex digits, as verify's report shortens them.
    let key = r.key.as_deref().map_or("-", |k| k.get(..16).unwrap_or(k));
    format!(
        "{}  s{}  {}  {}  {}  {}  {}  key {}  tried {}  {}\n",
        r.time.as_deref().unwrap_or("-"),
        r.session,
        dash(&r.tool),
        r.verdict,
        dash(&r.station),
        r.wall_ms
            .map_or_else(|| "-".to_owned(), |ms| format!("{ms}ms")),
        dash(&r.call_id),
        escape(key),
        dash(r.tried.as_deref().unwrap_or("")),
        dash(&r.reason),
    )
}

fn row_json(r: &Row) -> Object {
    let mut o = Object::new();
    o.insert_opt("time", r.time.clone());
    o.insert(
        "session",
        aegis_record::json::SafeInt::new(r.session).unwrap_or_default(),
    );
    o.insert("tool_id", r.tool.as_str());
    o.insert("verdict", r.verdict);
    if !r.station.is_empty() {
        o.insert("station", r.station.as_str());
    }
    if !r.reason.is_empty() {
        o.insert("reason", r.reason.as_str());
    }
    o.insert_opt(
        "wall_ms",
        r.wall_ms.and_then(aegis_record::json::SafeInt::new),
    );
    if !r.call_id.is_empty() {
        o.insert("call_id", r.call_id.as_str());
    }
    o.insert_opt("key_id", r.key.clone());
    o.insert_opt("tried", r.tried.clone());
    o
}
