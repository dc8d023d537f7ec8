//! `aegis recheck`: replay a record's policy decisions under another policy station and
//! print what would change. The record is verified first, with `aegis verify`'s code;
//! the replay itself is [`aegis_runtime::recheck`]. Nothing runs and nothing is written:
//! no sandbox is built and no audit session opened.

use crate::{CliError, exit, note, print};
use aegis_record::json::{Object, SafeInt};
use aegis_record::text::escape;
use aegis_record::verify::{Options, Trust, Verdict as RecordVerdict, verify};
use aegis_runtime::recheck::{Recheck, RecheckedCall, Replayed, Verdict};
use std::fmt::Write as _;
use std::path::PathBuf;

/// `recheck`'s arguments: verify's (the record and the keys it is pinned to) and the
/// policy to replay under.
#[derive(clap::Args)]
pub struct RecheckArgs {
    /// A policy YAML file to replay under, instead of the profile's policy station.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    #[command(flatten)]
    record: aegis_verify::VerifyArgs,
}

/// The most of a record recheck reads. The replay needs the bytes the verifier checked,
/// so it keeps them all in memory, and its listing grows with the calls anyway: 256 MiB
/// is about 250 000 calls at the ~1 KiB a call's two lines take. A larger record (a
/// long-lived host's) is rechecked a session at a time: `--audit DIR/` writes one file
/// per session. Without a cap, an endless well-formed stream would take all memory.
pub const MAX_RECHECK_RECORD: u64 = 256 << 20;

/// A reader that keeps a copy of what it passes on, and fails past
/// [`MAX_RECHECK_RECORD`]: a record verified and then read again (`recheck`, `log`) is
/// read once, so the bytes verified are the bytes read, whatever happens to the file.
pub(crate) struct Kept {
    source: Box<dyn std::io::Read>,
    /// What was read so far.
    pub(crate) bytes: Vec<u8>,
}

impl Kept {
    /// The record at `path` (`-`: standard input), never through a final link, a FIFO
    /// or a device; with its name for messages.
    ///
    /// # Errors
    /// [`CliError::Unreadable`] when the file cannot be opened.
    pub(crate) fn open(path: &std::path::Path) -> Result<(String, Kept), CliError> {
        let stdin = path.as_os_str() == "-";
        let name = if stdin {
            "standard input".to_owned()
        } else {
            escape(&path.display().to_string()).into_owned()
        };
        let source: Box<dyn std::io::Read> = if stdin {
            Box::new(std::io::stdin().lock())
        } else {
            let file = aegis_files::open(path)
                .map_err(|e| CliError::Unreadable(escape(&e.to_string()).into_owned()))?;
            Box::new(file)
        };
        let kept = Kept {
            source,
            bytes: Vec::new(),
        };
        Ok((name, kept))
    }
}

impl std::io::Read for Kept {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.source.read(buf)?;
        if self.bytes.len() as u64 + n as u64 > MAX_RECHECK_RECORD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "larger than {} MiB, the most recheck and log read (they keep the record to read again the bytes they verified); give one session's file at a time",
                    MAX_RECHECK_RECORD >> 20
                ),
            ));
        }
        self.bytes.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

/// The groups a change is listed under, by the new verdict, in the order printed.
const GROUPS: [(Verdict, &str, &str); 4] = [
    (Verdict::Denied, "newly refused", "newly_refused"),
    (Verdict::Allowed, "newly allowed", "newly_allowed"),
    (Verdict::PendingApproval, "newly parked", "newly_parked"),
    (
        Verdict::RateLimited,
        "newly rate-limited (allowed or limited by the rule's budget; not refused)",
        "newly_rate_limited",
    ),
];

pub fn recheck(profile: &str, args: &RecheckArgs) -> Result<u8, CliError> {
    // The station first: a policy that does not load is a config error, whatever the
    // record holds.
    let profile = crate::use_profile(profile)?;
    let registry = aegis_runtime::Registry::new();
    let (plugin, policy) =
        aegis_runtime::host::policy_station(&profile, &registry, args.policy.as_deref())
            .map_err(|e| CliError::Refused(e.to_string()))?;
    let trust =
        aegis_verify::trust_slice(&args.record).map_err(|e| CliError::Unreadable(e.to_string()))?;
    let approvers = aegis_verify::approver_slice(&args.record)
        .map_err(|e| CliError::Unreadable(e.to_string()))?;
    // Read once: the bytes verified are the bytes replayed, whatever happens to the file.
    // The verifier streams them and stops at the first Tampered finding (an endless
    // source without a newline ends there); the copy kept for the replay is capped.
    let [path] = args.record.paths.as_slice() else {
        return Err(CliError::Usage(
            "recheck replays one record: give one file, or - for standard input".into(),
        ));
    };
    let (name, mut kept) = Kept::open(path)?;
    let report = verify(
        &mut kept,
        &Options {
            trust,
            threads: 0,
            approvers,
        },
    )
    .map_err(|e| CliError::Unreadable(format!("{name}: {e}")))?;
    let bytes = kept.bytes;
    match report.verdict() {
        RecordVerdict::Tampered(_) => {
            return Err(CliError::Tampered(format!(
                "{name}: the record is {}; nothing was replayed",
                report.headline()
            )));
        }
        RecordVerdict::Indeterminate(_) => note(format_args!(
            "aegis: warning: the record is {}; rechecking the calls it holds",
            report.headline()
        )),
        RecordVerdict::Verified(Trust::Unpinned) => note(
            "aegis: warning: the record is Verified (unpinned): consistent, but no --key or \
             --trust-store says whose it is",
        ),
        RecordVerdict::Verified(_) => {}
    }
    let m = plugin.metadata();
    note(format_args!(
        "aegis: rechecking under policy station {} {}",
        escape(&m.name),
        escape(&m.version)
    ));
    let rechecked = aegis_runtime::recheck::recheck(&bytes, &policy)
        .map_err(|e| CliError::Unreadable(format!("{name}: {e}")))?;
    let out = if args.record.json {
        let mut b = json(&rechecked, &report.headline()).to_canonical();
        b.push(b'\n');
        b
    } else {
        text(&rechecked).into_bytes()
    };
    print(&out).map_err(|_| CliError::Stdout)?;
    let counts = rechecked.counts();
    Ok(if counts.changed > 0 {
        exit::RECHECK_CHANGED
    } else if counts.undecidable > 0 {
        exit::RECHECK_UNDECIDABLE
    } else {
        exit::OK
    })
}

/// `rule R`, or `the default` when no rule decided.
fn rule_words(rule: Option<&str>) -> String {
    match rule {
        Some(r) => format!("rule {}", escape(r)),
        None => "the default".to_owned(),
    }
}

/// The text report: one section per group that has calls, then the undecidable calls,
/// then the summary line.
fn text(r: &Recheck) -> String {
    let mut s = String::new();
    for (group, title, _) in GROUPS {
        let mut calls = changes(r, group).peekable();
        if calls.peek().is_none() {
            continue;
        }
        let _ = writeln!(s, "{title}:");
        // The new reason is in --json; a line says who decides, not every word of why.
        for (call, old, rule, _) in calls {
            let _ = writeln!(
                s,
                "  {}  {}  {} → {}  {}",
                escape(&call.call_id),
                escape(&call.tool_id),
                old.as_str(),
                group.as_str(),
                rule_words(rule)
            );
        }
    }
    // Unchanged, but only because a recorded approval answers the new park: shown so a
    // reader sees which calls now rest on a person's decision.
    let mut under = under_approval(r).peekable();
    if under.peek().is_some() {
        s.push_str("allowed under their approval (the new policy parks them):\n");
        for (call, id, rule) in under {
            let _ = writeln!(
                s,
                "  {}  {}  approval {}  {}",
                escape(&call.call_id),
                escape(&call.tool_id),
                escape(id),
                rule_words(rule)
            );
        }
    }
    let mut undecidable = r
        .calls
        .iter()
        .filter_map(|c| match &c.replayed {
            Replayed::Undecidable(why) => Some((c, why)),
            _ => None,
        })
        .peekable();
    if undecidable.peek().is_some() {
        s.push_str("undecidable:\n");
        for (call, why) in undecidable {
            let _ = writeln!(
                s,
                "  {}  {}  {}",
                escape(&call.call_id),
                escape(&call.tool_id),
                escape(&why.to_string())
            );
        }
    }
    let c = r.counts();
    let n = r.calls.len();
    let _ = writeln!(
        s,
        "{n} {}: {} unchanged, {} changed, {} undecidable",
        if n == 1 { "call" } else { "calls" },
        c.unchanged,
        c.changed,
        c.undecidable
    );
    s
}

/// The changed calls whose new verdict is `group`: the call, its old verdict, the rule
/// and reason that decide now.
fn changes(
    r: &Recheck,
    group: Verdict,
) -> impl Iterator<Item = (&RecheckedCall, Verdict, Option<&str>, Option<&str>)> {
    r.calls.iter().filter_map(move |c| match &c.replayed {
        Replayed::Changed {
            old,
            new,
            rule,
            reason,
        } if *new == group => Some((c, *old, rule.as_deref(), reason.as_deref())),
        _ => None,
    })
}

/// The unchanged calls a recorded approval answers the new park of: the call, the
/// approval id and the parking rule.
fn under_approval(r: &Recheck) -> impl Iterator<Item = (&RecheckedCall, &str, Option<&str>)> {
    r.calls.iter().filter_map(|c| match &c.replayed {
        Replayed::Unchanged {
            approval: Some(id),
            rule,
            ..
        } => Some((c, id.as_str(), rule.as_deref())),
        _ => None,
    })
}

/// The `--json` report: one object (see the README's recheck section for its members).
fn json(r: &Recheck, headline: &str) -> Object {
    let c = r.counts();
    let mut o = Object::new();
    o.insert("record", headline);
    o.insert_opt("policy_set_hash", r.policy_set_hash);
    o.insert("calls", int(r.calls.len() as u64));
    o.insert("unchanged", int(c.unchanged));
    o.insert("changed", int(c.changed));
    o.insert("undecidable", int(c.undecidable));
    let mut changed: Vec<aegis_record::json::Value> = Vec::new();
    for (group, _, token) in GROUPS {
        for (call, old, rule, reason) in changes(r, group) {
            let mut e = call_object(call);
            e.insert("group", token);
            e.insert("old", old.as_str());
            e.insert("new", group.as_str());
            e.insert_opt("rule", rule);
            e.insert_opt("reason", reason);
            changed.push(e.into());
        }
    }
    o.insert("changed_calls", changed);
    let approved: Vec<aegis_record::json::Value> = under_approval(r)
        .map(|(call, id, rule)| {
            let mut e = call_object(call);
            e.insert("approval_ref", id);
            e.insert_opt("rule", rule);
            e.into()
        })
        .collect();
    o.insert("approved_calls", approved);
    let undecidable = r
        .calls
        .iter()
        .filter_map(|call| match &call.replayed {
            Replayed::Undecidable(why) => {
                let mut e = call_object(call);
                e.insert_opt("old", call.recorded.map(Verdict::as_str));
                e.insert("code", why.code());
                e.insert("reason", why.to_string());
                Some(e.into())
            }
            _ => None,
        })
        .collect::<Vec<aegis_record::json::Value>>();
    o.insert("undecidable_calls", undecidable);
    o
}

/// A count for the JSON report: a record never holds 2^53 calls, so never clamped in
/// practice.
fn int(n: u64) -> SafeInt {
    SafeInt::new(n.min(aegis_record::json::MAX_SAFE_INTEGER)).unwrap_or_default()
}

fn call_object(call: &RecheckedCall) -> Object {
    let mut e = Object::new();
    e.insert("call_id", call.call_id.as_str());
    e.insert("tool_id", call.tool_id.as_str());
    e.insert("session", int(call.session));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, recorded: Verdict, replayed: Replayed) -> RecheckedCall {
        RecheckedCall {
            call_id: id.into(),
            tool_id: "read_file".into(),
            session: 0,
            recorded: Some(recorded),
            replayed,
        }
    }

    /// A call the new policy would park is listed as newly parked, never refused; a
    /// resumed call its recorded approval answers is listed apart, and counted
    /// unchanged.
    #[test]
    fn newly_parked_and_allowed_under_approval_are_reported_apart() {
        let r = Recheck {
            calls: vec![
                call(
                    "c-1",
                    Verdict::Allowed,
                    Replayed::Changed {
                        old: Verdict::Allowed,
                        new: Verdict::PendingApproval,
                        rule: Some("ask".into()),
                        reason: Some("parked as apr-1".into()),
                    },
                ),
                call(
                    "c-2",
                    Verdict::Allowed,
                    Replayed::Unchanged {
                        verdict: Verdict::Allowed,
                        rule: Some("ask".into()),
                        approval: Some("apr-2".into()),
                    },
                ),
            ],
            policy_set_hash: None,
        };
        let t = text(&r);
        assert!(
            t.contains("newly parked:\n  c-1  read_file  allowed → pending_approval  rule ask\n"),
            "{t}"
        );
        assert!(!t.contains("newly refused"), "{t}");
        assert!(
            t.contains("allowed under their approval (the new policy parks them):\n  c-2  read_file  approval apr-2  rule ask\n"),
            "{t}"
        );
        assert!(
            t.ends_with("2 calls: 1 unchanged, 1 changed, 0 undecidable\n"),
            "{t}"
        );
        let j = String::from_utf8(json(&r, "Verified").to_canonical()).unwrap();
        assert!(j.contains(r#""group":"newly_parked""#), "{j}");
        assert!(
            j.contains(r#""approved_calls":[{"approval_ref":"apr-2","call_id":"c-2","rule":"ask","session":0,"tool_id":"read_file"}]"#),
            "{j}"
        );
    }
}
