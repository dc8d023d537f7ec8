//! A record read as calls: each call one [`Row`] (when, which session, which tool, its
//! verdict, the station that decided and why, how long it ran), each session's opening
//! one [`Opened`]. `aegis log` lists them; the console shows them.
//!
//! Rows are read from lines a verifier has judged: [`entries`] reads a whole record
//! (every call in the order its intent came), [`Assembler`] a record as it grows (a call
//! once its outcome line holds). Neither verifies: the caller shows rows under the
//! verdict of the same bytes, and a Tampered record is evidence of nothing. [`Judged`]
//! cuts a growing record into whole lines and passes on only those the verifier's
//! per-line rules accept.
//!
//! # Guarantees
//! - A call is one row, by its intent and outcome together (matched by session and
//!   `call_id`); an outcome with no intent read is a row of its own, and an intent whose
//!   session ended (closed, or superseded by a new open) without its outcome is a row
//!   with verdict `no_outcome`.
//! - The verdict is one of [`VERDICTS`], from the outcome's [`CallClass`]; a tool
//!   change a relay saw is a row with verdict `tool_change` (station `pins`).
//! - Text from the record (tool ids, reasons a tool or server wrote) is kept as
//!   recorded; escaping it for a terminal or a page is the renderer's job.
//!
//! # Non-guarantees
//! - A line that does not read as its type is skipped: the verdict of the bytes already
//!   says what it is.

use aegis_record::json::{Object, SafeInt, Value};
use aegis_record::line::LineType;
use aegis_record::{
    CallClass, CapabilityOutcome, ExecutionOutcome, IntentLine, OutcomeLine, PolicyOutcome,
    ToolChangeLine,
};
use std::collections::HashMap;

mod judged;
pub use judged::Judged;

/// Every verdict a row may have, as filters name them.
pub const VERDICTS: [&str; 10] = [
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

/// One call (or one tool change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The time of its outcome line (its intent's until the outcome comes).
    pub time: Option<String>,
    /// Its session's index in the record, from 0.
    pub session: u64,
    /// The tool called.
    pub tool: String,
    /// One of [`VERDICTS`].
    pub verdict: &'static str,
    /// The station that decided (`policy`, `capability`, `sandbox`, …); empty when the
    /// call ran.
    pub station: String,
    /// Why it did not run (or how it failed); empty when it ran.
    pub reason: String,
    /// How long the tool ran, as the outcome records it.
    pub wall_ms: Option<u64>,
    /// Empty for a tool change.
    pub call_id: String,
    /// The key id that signed the outcome (or the tool change).
    pub key: Option<String>,
    /// What the call tried: its bound arguments as recorded (canonical JSON text).
    pub tried: Option<String>,
}

/// Where and how a session opened, from its open line: when, on which host, which front
/// end (and what it fronted), under which key.
#[derive(Clone, Debug, PartialEq)]
pub struct Opened {
    /// The open line's time.
    pub time: Option<String>,
    /// The key id the session opened under.
    pub key: Option<String>,
    /// The provenance's `host` object, as recorded.
    pub host: Option<Object>,
    /// The provenance's `front` object, as recorded.
    pub front: Option<Object>,
}

/// One entry of a record read whole: a session's opening, or a call.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A session (its index) opened.
    Session(u64, Box<Opened>),
    /// A call, or a tool change.
    Call(Row),
}

/// Which rows a reader keeps: by tool, verdict, and time (`since`, as the record writes
/// times). A filter left `None` keeps every row.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only calls to this tool.
    pub tool: Option<String>,
    /// Only rows with this verdict (one of [`VERDICTS`]).
    pub verdict: Option<String>,
    /// Only rows timed at or after this time.
    pub since: Option<String>,
}

impl Filter {
    /// Whether the filter keeps `row`; a row without a time is not kept under `since`.
    pub fn keeps(&self, row: &Row) -> bool {
        self.tool.as_ref().is_none_or(|t| *t == row.tool)
            && self.verdict.as_deref().is_none_or(|v| v == row.verdict)
            && self
                .since
                .as_ref()
                .is_none_or(|since| row.time.as_ref().is_some_and(|t| t >= since))
    }
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

    /// `{"index", "time", "key_id", "host", "front"}`, the provenance as recorded.
    pub fn to_json(&self, session: u64) -> Object {
        let mut o = Object::new();
        o.insert("index", SafeInt::new(session).unwrap_or_default());
        o.insert_opt("time", self.time.clone());
        o.insert_opt("key_id", self.key.clone());
        o.insert_opt("host", self.host.clone());
        o.insert_opt("front", self.front.clone());
        o
    }

    /// The host's name, as its provenance records it.
    pub fn hostname(&self) -> Option<&str> {
        self.host.as_ref()?.get("hostname")?.as_str()
    }
}

impl Row {
    /// A call by its intent, until its outcome comes.
    fn of_intent(time: Option<String>, session: u64, intent: IntentLine) -> Row {
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
    fn of_outcome(
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
        row.complete(outcome, key);
        row
    }

    /// The row with its outcome's verdict, station, reason, duration, signing key and
    /// what it tried.
    fn complete(&mut self, outcome: &OutcomeLine, key: Option<String>) {
        let (verdict, station, reason) = judged(outcome);
        self.verdict = verdict;
        self.station = station;
        self.reason = reason;
        self.wall_ms = outcome.wall_ms.map(|w| w.get());
        self.key = key;
        self.tried = outcome
            .decision_axes
            .bound
            .as_ref()
            .map(|b| b.values.clone());
    }

    /// `{"time", "session", "tool_id", "verdict", "station", "reason", "wall_ms",
    /// "call_id", "key_id", "tried"}`; members with nothing to say are left out.
    pub fn to_json(&self) -> Object {
        let mut o = Object::new();
        o.insert_opt("time", self.time.clone());
        o.insert("session", SafeInt::new(self.session).unwrap_or_default());
        o.insert("tool_id", self.tool.as_str());
        o.insert("verdict", self.verdict);
        if !self.station.is_empty() {
            o.insert("station", self.station.as_str());
        }
        if !self.reason.is_empty() {
            o.insert("reason", self.reason.as_str());
        }
        o.insert_opt("wall_ms", self.wall_ms.and_then(SafeInt::new));
        if !self.call_id.is_empty() {
            o.insert("call_id", self.call_id.as_str());
        }
        o.insert_opt("key_id", self.key.clone());
        o.insert_opt("tried", self.tried.clone());
        o
    }
}

/// A line as the rows read it.
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
    /// `None` for a line that does not read as a type rows are made of.
    fn of(line: &[u8]) -> Option<Read> {
        let Ok(Value::Object(obj)) = aegis_record::json::parse(line) else {
            return None;
        };
        Read::of_object(&obj)
    }

    /// [`Read::of`] a line already parsed.
    fn of_object(obj: &Object) -> Option<Read> {
        let time = obj.get("time").and_then(Value::as_str).map(str::to_owned);
        let key = obj.get("key_id").and_then(Value::as_str).map(str::to_owned);
        let line_type = obj.get("line_type").and_then(Value::as_str).unwrap_or("");
        Some(match LineType::from_token(line_type) {
            LineType::Open => Read::Open(Box::new(Opened::of(obj))),
            LineType::Close => Read::Close,
            LineType::Intent => Read::Intent(time, IntentLine::from_object(obj).ok()?),
            LineType::Outcome => {
                Read::Outcome(time, Box::new(OutcomeLine::from_object(obj).ok()?), key)
            }
            LineType::ToolChange => {
                let change = ToolChangeLine::from_object(obj).ok()?;
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

/// Every session's opening, every call (by its intent, or its outcome when it has none)
/// and every tool change of a whole record, in file order (a call where its intent is).
pub fn entries(bytes: &[u8]) -> Vec<Entry> {
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
                rows.push(Entry::Call(Row::of_intent(time, session, intent)));
            }
            Some(Read::Outcome(time, outcome, key)) => {
                match by_call.remove(&(session, outcome.call_id.clone())) {
                    Some(i) => {
                        if let Entry::Call(row) = &mut rows[i] {
                            row.complete(&outcome, key);
                        }
                    }
                    None => rows.push(Entry::Call(Row::of_outcome(time, session, &outcome, key))),
                }
            }
            Some(Read::Change(row)) => rows.push(Entry::Call(Row { session, ..*row })),
            Some(Read::Close) | None => {}
        }
    }
    rows
}

/// Rows of a record as it grows: fed each line once it holds (with its session, as the
/// verifier placed it), it hands back a session's opening at once and a call once its
/// outcome comes, or, `no_outcome`, once its session ends without one.
#[derive(Debug, Default)]
pub struct Assembler {
    /// (session, call_id) → (intent order, its row).
    pending: HashMap<(u64, String), (u64, Row)>,
    next: u64,
}

impl Assembler {
    /// An assembler that has read nothing.
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// What the line `bytes` (of session `session`) completes, in order.
    pub fn line(&mut self, session: u64, bytes: &[u8]) -> Vec<Entry> {
        self.read(
            session,
            Read::of(bytes.strip_suffix(b"\n").unwrap_or(bytes)),
        )
    }

    /// [`Assembler::line`] for a line the caller has already parsed (as `obj`), so a
    /// reader that needs the object itself parses each line once.
    pub fn line_object(&mut self, session: u64, obj: &Object) -> Vec<Entry> {
        self.read(session, Read::of_object(obj))
    }

    fn read(&mut self, session: u64, read: Option<Read>) -> Vec<Entry> {
        let mut out = Vec::new();
        match read {
            // A new session: the calls left in flight before it will get no outcome.
            Some(Read::Open(opened)) => {
                self.unfinished(|_| true, &mut out);
                out.push(Entry::Session(session, opened));
            }
            Some(Read::Close) => self.unfinished(|s| s == session, &mut out),
            Some(Read::Intent(time, intent)) => {
                let key = (session, intent.call_id.clone());
                let row = Row::of_intent(time, session, intent);
                self.pending.insert(key, (self.next, row));
                self.next += 1;
            }
            Some(Read::Outcome(time, outcome, key)) => {
                let row = match self.pending.remove(&(session, outcome.call_id.clone())) {
                    Some((_, mut row)) => {
                        row.complete(&outcome, key);
                        row
                    }
                    None => Row::of_outcome(time, session, &outcome, key),
                };
                out.push(Entry::Call(row));
            }
            Some(Read::Change(row)) => out.push(Entry::Call(Row { session, ..*row })),
            None => {}
        }
        out
    }

    /// The calls still waiting for their outcome, in intent order.
    pub fn in_flight(&self) -> Vec<&Row> {
        let mut rows: Vec<&(u64, Row)> = self.pending.values().collect();
        rows.sort_unstable_by_key(|(order, _)| *order);
        rows.into_iter().map(|(_, row)| row).collect()
    }

    /// The calls of the sessions `ended` names, as `no_outcome`, in intent order.
    fn unfinished(&mut self, ended: impl Fn(u64) -> bool, out: &mut Vec<Entry>) {
        let keys: Vec<(u64, String)> = self
            .pending
            .keys()
            .filter(|(session, _)| ended(*session))
            .cloned()
            .collect();
        let mut rows: Vec<(u64, Row)> =
            keys.iter().filter_map(|k| self.pending.remove(k)).collect();
        rows.sort_unstable_by_key(|(order, _)| *order);
        out.extend(rows.into_iter().map(|(_, row)| Entry::Call(row)));
    }
}

/// The verdict token, the station that decided (empty when it ran) and why.
fn judged(outcome: &OutcomeLine) -> (&'static str, String, String) {
    let class = CallClass::of(outcome);
    let verdict = match class {
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
        (class, &outcome.capability)
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOLDEN: &[u8] = include_bytes!("../../../spec/vectors/golden/golden.aarl");
    const UNFINISHED: &[u8] =
        include_bytes!("../../../spec/vectors/verified/unfinished_calls.aarl");
    const TOOL_CHANGE: &[u8] = include_bytes!("../../../spec/vectors/verified/tool_change.aarl");

    fn calls(entries: &[Entry]) -> Vec<&Row> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Call(row) => Some(row),
                Entry::Session(..) => None,
            })
            .collect()
    }

    /// The record fed to an [`Assembler`] line by line, sessions counted as the
    /// verifier counts them.
    fn assembled(bytes: &[u8]) -> Vec<Entry> {
        let mut calls = Assembler::new();
        let (mut session, mut opened) = (0, false);
        let mut out = Vec::new();
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            if line.windows(17).any(|w| w == br#""line_type":"open"#) {
                session += u64::from(opened);
                opened = true;
            }
            out.extend(calls.line(session, line));
        }
        out
    }

    #[test]
    fn every_class_of_the_golden_record_is_one_row_with_its_verdict() {
        let entries = entries(GOLDEN);
        let verdicts: Vec<&str> = calls(&entries).iter().map(|r| r.verdict).collect();
        assert_eq!(
            verdicts,
            [
                "ok",
                "denied",
                "rate_limited",
                "parked",
                "no_grant",
                "failed",
                "ceiling",
                "failed",
                "refused"
            ]
        );
        let rows = calls(&entries);
        assert!(rows[0].station.is_empty() && rows[0].reason.is_empty());
        assert_eq!(rows[1].station, "policy");
        assert!(
            rows[3].reason.starts_with("parked for approval apr-"),
            "{:?}",
            rows[3]
        );
        assert!(matches!(entries[0], Entry::Session(0, _)));
    }

    #[test]
    fn a_growing_record_gives_the_same_rows_as_the_whole() {
        for record in [GOLDEN, UNFINISHED, TOOL_CHANGE] {
            let mut whole: Vec<Row> = calls(&entries(record)).into_iter().cloned().collect();
            let mut grown: Vec<Row> = calls(&assembled(record)).into_iter().cloned().collect();
            let by_call = |r: &Row| (r.session, r.call_id.clone(), r.time.clone());
            whole.sort_by_key(by_call);
            grown.sort_by_key(by_call);
            assert_eq!(whole, grown);
        }
    }

    #[test]
    fn a_line_parsed_by_the_caller_gives_the_same_rows() {
        for record in [GOLDEN, UNFINISHED, TOOL_CHANGE] {
            let (mut by_bytes, mut by_object) = (Assembler::new(), Assembler::new());
            // Sessions counted from 0 at the first open line, as the verifier counts.
            let mut opens = 0u64;
            for line in record.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                let Ok(Value::Object(obj)) = aegis_record::json::parse(line) else {
                    continue;
                };
                if obj.get("line_type").and_then(Value::as_str) == Some("open") {
                    opens += 1;
                }
                let session = opens.saturating_sub(1);
                let shown = |entries: Vec<Entry>| -> Vec<String> {
                    entries.iter().map(|e| format!("{e:?}")).collect()
                };
                assert_eq!(
                    shown(by_bytes.line(session, line)),
                    shown(by_object.line_object(session, &obj))
                );
            }
        }
    }

    #[test]
    fn calls_a_session_never_finished_are_no_outcome_once_it_ends() {
        let rows: Vec<Row> = calls(&assembled(UNFINISHED)).into_iter().cloned().collect();
        assert!(rows.iter().any(|r| r.verdict == "no_outcome"), "{rows:?}");
        let whole = entries(UNFINISHED);
        assert!(calls(&whole).iter().any(|r| r.verdict == "no_outcome"));
    }

    #[test]
    fn a_tool_change_is_a_row_of_the_pins_station() {
        let entries = entries(TOOL_CHANGE);
        let change = calls(&entries)
            .into_iter()
            .find(|r| r.verdict == "tool_change")
            .expect("a tool change row");
        assert_eq!(change.station, "pins");
        assert!(change.call_id.is_empty() && !change.reason.is_empty());
    }

    #[test]
    fn filters_keep_by_tool_verdict_and_time() {
        let entries = entries(GOLDEN);
        let rows = calls(&entries);
        let kept = |f: &Filter| rows.iter().filter(|r| f.keeps(r)).count();
        assert_eq!(kept(&Filter::default()), rows.len());
        let denied = Filter {
            verdict: Some("denied".into()),
            ..Filter::default()
        };
        assert_eq!(kept(&denied), 1);
        let tool = Filter {
            tool: Some(rows[0].tool.clone()),
            ..Filter::default()
        };
        assert!(kept(&tool) >= 1);
        let future = Filter {
            since: Some("2999-01-01T00:00:00.000000Z".into()),
            ..Filter::default()
        };
        assert_eq!(kept(&future), 0);
    }

    #[test]
    fn rows_and_sessions_are_json_the_record_can_hold() {
        for entry in entries(GOLDEN) {
            let json = match entry {
                Entry::Call(row) => row.to_json(),
                Entry::Session(i, opened) => opened.to_json(i),
            };
            let text = json.to_canonical();
            assert!(aegis_record::json::parse(&text).is_ok());
        }
    }
}
