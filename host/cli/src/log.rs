//! `aegis log`: a record read as a person reads it, one line a call, after the verdict
//! `aegis verify` gives the same bytes.
//!
//! The record is read once and kept (as `recheck` keeps it), verified, then listed: a
//! Tampered record lists nothing (it is evidence of nothing), an Indeterminate one lists
//! what it holds under its verdict. Every text the record holds (tool ids, reasons a tool
//! or server wrote) is escaped for the terminal.

use aegis_calls::{Entry, Filter, Opened, Row};
use aegis_record::json::{Object, Value};
use aegis_record::text::escape;
use aegis_record::verify::{Options, Verdict, verify};

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

use aegis_calls::VERDICTS;

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
        aegis_calls::entries(&kept.bytes)
    };
    let keep = filter(args);
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
                out.extend(session_listed(opened, *session, args.record.json));
            }
            Entry::Call(row) if keep.keeps(row) => out.extend(row_listed(row, args.record.json)),
            Entry::Call(_) => {}
        }
    }
    print(&out).map_err(|_| CliError::Stdout)?;
    Ok(code)
}

/// What the filters keep.
fn filter(args: &LogArgs) -> Filter {
    Filter {
        tool: args.tool.clone(),
        verdict: args.verdict.clone(),
        since: args.since.clone(),
    }
}

/// The session's line: `# session N opened TIME on HOST by FRONT, key KEY`, or
/// with `json` `{"session":{…}}` holding the provenance's `host` and `front` as
/// recorded. Text from the record is escaped.
fn session_listed(opened: &Opened, session: u64, json: bool) -> Vec<u8> {
    if json {
        let mut line = Object::new();
        line.insert("session", opened.to_json(session));
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
    let hostname = text(&opened.host, &["hostname"]).unwrap_or_else(|| "-".into());
    let mut front = text(&opened.front, &["command"]).unwrap_or_else(|| "-".into());
    let argv: Vec<String> = opened
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
    if let Some(manifest) = text(&opened.front, &["manifest"]) {
        front.push(' ');
        front.push_str(&manifest);
    }
    let key = opened
        .key
        .as_deref()
        .map_or("-", |k| k.get(..16).unwrap_or(k));
    format!(
        "# session {session} opened {} on {hostname} by {front}, key {}\n",
        opened.time.as_deref().unwrap_or("-"),
        escape(key)
    )
    .into_bytes()
}

/// A call's row as listed: a line of text, or one JSON object.
fn row_listed(row: &Row, json: bool) -> Vec<u8> {
    if json {
        let mut out = row.to_json().to_canonical();
        out.push(b'\n');
        out
    } else {
        row_text(row).into_bytes()
    }
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
