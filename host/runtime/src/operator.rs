//! Operator settings: what an operator would otherwise type as flags on every command
//! (the signing key, the audit file, the role, the pins files, a confined program's
//! grants), kept in a profile's `[operator]` table, and where each effective setting
//! came from.
//!
//! # Guarantees
//! - A flag the operator gives replaces the profile's value for that key; for a list
//!   (`allow_read`, …) the flag's list replaces the profile's whole list. Nothing is
//!   merged.
//! - Every effective setting carries its [`Source`]: the flag, or the profile file and
//!   line. Errors about a setting name that source.
//! - A relative path is taken against the profile file's directory, as a station's
//!   config path is; an embedded profile, having no directory, may not give one.
//! - Unknown keys, wrong types and duplicate keys are refused with the line.
//! - Grants (`allow_*`) in a profile that names no confinement backend are refused when
//!   the profile is parsed, by every command: nothing would enforce them.
//! - `allow_net` entries are held to the confinement backend's own rule (`HOST:PORT`,
//!   a port from 1 to 65535) at their line, before any command runs.
//!
//! # Non-guarantees
//! - `~` and `$VARIABLES` are not expanded: a shell expands them in a flag, nothing
//!   expands them here.
//! - The files named are not opened here: the command that uses a setting checks it as
//!   it checks the flag (the key's mode, a file beneath a grant, a pins file's shape).
//! - `[operator.approvals]` (`timeout`, `dir`, `approvers`) is parsed and checked for
//!   shape here; the directory and key files are opened by the command that uses them.

use aegis_policy_arguments::binding::Binding;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// The `[operator]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorTable {
    signing_key: Option<Spanned<String>>,
    audit: Option<Spanned<String>>,
    role: Option<Spanned<String>>,
    pins: Option<Spanned<String>>,
    write_pins: Option<Spanned<String>>,
    pins_record_only: Option<Spanned<bool>>,
    allow_read: Option<Spanned<Vec<String>>>,
    allow_write: Option<Spanned<Vec<String>>>,
    allow_exec: Option<Spanned<Vec<String>>>,
    allow_net: Option<Spanned<Vec<String>>>,
    record_arguments: Option<Spanned<bool>>,
    bind: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    approvals: Option<ApprovalsTable>,
}

/// The `[operator.approvals]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsTable {
    timeout: Option<Spanned<String>>,
    dir: Option<Spanned<String>>,
    approvers: Option<Spanned<Vec<String>>>,
}

/// How long a parked call waits for a decision when nothing says otherwise.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest approval timeout a setting may give: a week. A park is a held request;
/// longer than this is a mistake, not a wait.
pub const MAX_APPROVAL_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Reads a timeout written as a whole number and one unit, `s`, `m` or `h`
/// (`90s`, `10m`, `1h`): more than zero and at most [`MAX_APPROVAL_TIMEOUT`].
///
/// # Errors
/// A one-line reason, for the caller to put after the key or flag.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration: write a whole number and s, m or h (10m)");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 9 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(bad()),
    };
    let d = Duration::from_secs(n.saturating_mul(per));
    if d.is_zero() {
        return Err(format!("{text:?}: a timeout must be more than zero"));
    }
    if d > MAX_APPROVAL_TIMEOUT {
        return Err(format!("{text:?}: longer than the most allowed, 168h"));
    }
    Ok(d)
}

/// The profile text read for its `[operator]` table alone (the rest was checked
/// already), so that an error is known to be the table's.
#[derive(Deserialize)]
struct OnlyOperator {
    operator: OperatorTable,
}

/// The `[operator]` table of `text`, which has one.
///
/// # Errors
/// The line and a message naming the key at fault (`operator.KEY: …`): an unknown key,
/// a wrong type.
pub(crate) fn table(text: &str) -> Result<OperatorTable, (usize, String)> {
    toml::from_str::<OnlyOperator>(text)
        .map(|o| o.operator)
        .map_err(|e| {
            let line = e
                .span()
                .map_or(0, |s| crate::profile::line_of(text, s.start));
            let message = e.message().trim().replace('\n', " ");
            // The key on the error's line, when the line assigns one.
            let key = text
                .lines()
                .nth(line.saturating_sub(1))
                .and_then(|l| l.split_once('='))
                .map(|(k, _)| k.trim())
                .filter(|k| {
                    *k != "operator"
                        && !k.is_empty()
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                });
            match key {
                Some(key) => (line, format!("operator.{key}: {message}")),
                None => (line, format!("operator: {message}")),
            }
        })
}

/// One value the profile sets, with the line of its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting<T> {
    /// The key under `[operator]`: `signing_key`, `allow_read`, …
    pub key: &'static str,
    /// The value; a path already resolved against the profile's directory.
    pub value: T,
    /// The 1-based line of the key in the profile file.
    pub line: usize,
}

/// A profile's `[operator]` settings. Every key is optional; a profile without the
/// table sets none, and every command behaves as it did before the table existed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Operator {
    /// The signing key (`--signing-key`): `run`, `wrap`, `gateway`.
    pub signing_key: Option<Setting<PathBuf>>,
    /// A durable file sink for the record (`--audit`): `run`, `wrap`, `gateway`.
    pub audit: Option<Setting<PathBuf>>,
    /// The role every call asserts (`--role`): `run`, `wrap`, `gateway`.
    pub role: Option<Setting<String>>,
    /// Pins to compare listings with (`--pins`): `wrap`.
    pub pins: Option<Setting<PathBuf>>,
    /// Where to write the session's pins (`--write-pins`): `wrap`.
    pub write_pins: Option<Setting<PathBuf>>,
    /// Log changed tools instead of refusing them (`--pins-record-only`): `wrap`.
    pub pins_record_only: Option<Setting<bool>>,
    /// `--allow-read`: `wrap`, `confine`.
    pub allow_read: Option<Setting<Vec<PathBuf>>>,
    /// `--allow-write`: `wrap`, `confine`.
    pub allow_write: Option<Setting<Vec<PathBuf>>>,
    /// `--allow-exec`: `wrap`, `confine`.
    pub allow_exec: Option<Setting<Vec<PathBuf>>>,
    /// `--allow-net HOST:PORT`: `wrap`, `confine`.
    pub allow_net: Option<Setting<Vec<String>>>,
    /// Record each call's whole arguments (`--record-arguments`): `run`, `wrap`,
    /// `gateway`.
    pub record_arguments: Option<Setting<bool>>,
    /// Each tool's path-like arguments, named by the operator (`bind = { TOOL =
    /// ["NAME", …] }`), replacing what the tool's schema suggests: `run`, `wrap`,
    /// `gateway`. Names are checked when the profile is read.
    pub bind: Option<Setting<BTreeMap<String, Binding>>>,
    /// How long a parked call waits for a decision (`[operator.approvals] timeout`,
    /// `--approval-timeout`): `wrap`, `gateway`, `run`.
    pub approval_timeout: Option<Setting<Duration>>,
    /// The approvals queue directory (`[operator.approvals] dir`, `--approvals`).
    pub approvals_dir: Option<Setting<PathBuf>>,
    /// The approvers' public key files the operator trusts (`[operator.approvals]
    /// approvers`); none set: any approver key whose signature verifies.
    pub approvers: Option<Setting<Vec<PathBuf>>>,
}

impl Operator {
    /// Every setting the profile makes, in the order the keys are documented: its key, its
    /// value as TOML (a quoted string, a boolean, an array) and its line.
    pub fn entries(&self) -> Vec<(&'static str, String, usize)> {
        fn path(s: &Setting<PathBuf>) -> (&'static str, String, usize) {
            (s.key, quoted(&s.value.display().to_string()), s.line)
        }
        fn paths(s: &Setting<Vec<PathBuf>>) -> (&'static str, String, usize) {
            let items: Vec<String> = s.value.iter().map(|p| p.display().to_string()).collect();
            (s.key, list(&items), s.line)
        }
        let mut out = Vec::new();
        out.extend(self.signing_key.as_ref().map(path));
        out.extend(self.audit.as_ref().map(path));
        out.extend(
            self.role
                .as_ref()
                .map(|s| (s.key, quoted(&s.value), s.line)),
        );
        out.extend(self.pins.as_ref().map(path));
        out.extend(self.write_pins.as_ref().map(path));
        out.extend(
            self.pins_record_only
                .as_ref()
                .map(|s| (s.key, s.value.to_string(), s.line)),
        );
        out.extend(self.allow_read.as_ref().map(paths));
        out.extend(self.allow_write.as_ref().map(paths));
        out.extend(self.allow_exec.as_ref().map(paths));
        out.extend(
            self.allow_net
                .as_ref()
                .map(|s| (s.key, list(&s.value), s.line)),
        );
        out.extend(
            self.record_arguments
                .as_ref()
                .map(|s| (s.key, s.value.to_string(), s.line)),
        );
        out.extend(self.bind.as_ref().map(|s| {
            let tools: Vec<String> = s
                .value
                .iter()
                .map(|(tool, b)| format!("{} = {}", quoted(tool), list(b.names())))
                .collect();
            (s.key, format!("{{ {} }}", tools.join(", ")), s.line)
        }));
        out.extend(
            self.approval_timeout
                .as_ref()
                .map(|s| (s.key, quoted(&timeout_text(s.value)), s.line)),
        );
        out.extend(self.approvals_dir.as_ref().map(path));
        out.extend(self.approvers.as_ref().map(paths));
        out
    }

    /// The first grant key the profile sets (any `allow_*`, even an empty list), for a
    /// profile that has nothing to enforce them with.
    fn first_grant(&self) -> Option<(&'static str, usize)> {
        let paths = [&self.allow_read, &self.allow_write, &self.allow_exec];
        paths
            .into_iter()
            .flatten()
            .map(|s| (s.key, s.line))
            .chain(self.allow_net.as_ref().map(|s| (s.key, s.line)))
            .min_by_key(|(_, line)| *line)
    }
}

/// A timeout as [`parse_timeout`] reads it: in the largest unit that divides it.
fn timeout_text(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// A string as TOML writes it (quoted, escaped).
pub fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", items.join(", "))
}

/// Where an effective setting came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A flag the operator typed, e.g. `--role`.
    Flag(&'static str),
    /// The profile's `[operator]` table.
    Profile {
        /// The key, e.g. `role`.
        key: &'static str,
        /// The profile file as errors name it (the path as given, or `embedded:NAME`).
        file: String,
        /// The key's line.
        line: usize,
    },
}

impl Source {
    /// What names the setting at the start of a message: `--role`, or
    /// `ops.toml:6: operator.role`.
    pub fn name(&self) -> String {
        match self {
            Source::Flag(flag) => (*flag).to_owned(),
            Source::Profile { key, file, line } => format!("{file}:{line}: operator.{key}"),
        }
    }

    /// The setting with `value`, named as a grant is in a refusal: `--allow-write DIR`,
    /// or `operator.allow_write DIR (ops.toml:9)`.
    pub fn naming(&self, value: &str) -> String {
        match self {
            Source::Flag(flag) => format!("{flag} {value}"),
            Source::Profile { key, file, line } => {
                format!("operator.{key} {value} ({file}:{line})")
            }
        }
    }

    /// Whether the setting came from the profile.
    pub fn is_profile(&self) -> bool {
        matches!(self, Source::Profile { .. })
    }
}

impl std::fmt::Display for Source {
    /// `flag --role`, or `profile ops.toml:6`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Profile { file, line, .. } => write!(f, "profile {file}:{line}"),
        }
    }
}

/// An effective setting and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl crate::Profile {
    /// The flag's value when the operator gave the flag, else the profile's setting:
    /// the one precedence rule, each value with its [`Source`].
    pub fn choose<T: Clone>(
        &self,
        flag: &'static str,
        given: Option<T>,
        setting: Option<&Setting<T>>,
    ) -> Option<Sourced<T>> {
        match (given, setting) {
            (Some(value), _) => Some(Sourced {
                value,
                source: Source::Flag(flag),
            }),
            (None, Some(s)) => Some(Sourced {
                value: s.value.clone(),
                source: self.source_of(s),
            }),
            (None, None) => None,
        }
    }

    /// Where the profile set `setting`.
    pub fn source_of<T>(&self, setting: &Setting<T>) -> Source {
        Source::Profile {
            key: setting.key,
            file: self.label(),
            line: setting.line,
        }
    }
}

/// Parses the `[operator]` table: paths resolved against `dir` (the profile file's
/// directory; `None` for an embedded profile, which refuses a relative path), and
/// grants refused when `confines` is false.
///
/// # Errors
/// The line and a message naming the key, for [`crate::ProfileError::Invalid`].
pub(crate) fn parse(
    table: OperatorTable,
    text: &str,
    dir: Option<&Path>,
    confines: bool,
) -> Result<Operator, (usize, String)> {
    let line_of = |s: usize| crate::profile::line_of(text, s);
    let path = |key: &'static str, p: &str, line: usize| -> Result<PathBuf, (usize, String)> {
        if p.is_empty() {
            return Err((line, format!("operator.{key}: an empty path")));
        }
        let p = Path::new(p);
        if p.is_absolute() {
            return Ok(p.to_owned());
        }
        match dir {
            Some(dir) => Ok(dir.join(p)),
            None => Err((
                line,
                format!(
                    "operator.{key}: relative path {:?} in an embedded profile, which has no directory to resolve it against",
                    p.display().to_string()
                ),
            )),
        }
    };
    let one = |key: &'static str, v: Option<Spanned<String>>| {
        v.map(|v| {
            let line = line_of(v.span().start);
            path(key, v.get_ref(), line).map(|value| Setting { key, value, line })
        })
        .transpose()
    };
    let many = |key: &'static str, v: Option<Spanned<Vec<String>>>| {
        v.map(|v| {
            let line = line_of(v.span().start);
            let value = v
                .get_ref()
                .iter()
                .map(|p| path(key, p, line))
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, (usize, String)>(Setting { key, value, line })
        })
        .transpose()
    };
    let OperatorTable {
        signing_key,
        audit,
        role,
        pins,
        write_pins,
        pins_record_only,
        allow_read,
        allow_write,
        allow_exec,
        allow_net,
        record_arguments,
        bind,
        approvals,
    } = table;
    let ApprovalsTable {
        timeout,
        dir: approvals_dir,
        approvers,
    } = approvals.unwrap_or(ApprovalsTable {
        timeout: None,
        dir: None,
        approvers: None,
    });
    let approval_timeout = timeout
        .map(|v| {
            let line = line_of(v.span().start);
            parse_timeout(v.get_ref())
                .map(|value| Setting {
                    key: "approvals.timeout",
                    value,
                    line,
                })
                .map_err(|why| (line, format!("operator.approvals.timeout: {why}")))
        })
        .transpose()?;
    let bind = bind
        .map(|v| {
            let line = line_of(v.span().start);
            let mut tools = BTreeMap::new();
            for (tool, names) in v.into_inner() {
                let binding = Binding::named(&names)
                    .map_err(|e| (line, format!("operator.bind.{}: {e}", quoted(&tool))))?;
                tools.insert(tool, binding);
            }
            Ok::<_, (usize, String)>(Setting {
                key: "bind",
                value: tools,
                line,
            })
        })
        .transpose()?;
    let allow_net = allow_net
        .map(|v| {
            let line = line_of(v.span().start);
            for d in v.get_ref() {
                if !is_destination(d) {
                    return Err((
                        line,
                        format!(
                            "operator.allow_net: {d:?} is not HOST:PORT with a port from 1 to 65535"
                        ),
                    ));
                }
            }
            Ok(Setting {
                key: "allow_net",
                value: v.into_inner(),
                line,
            })
        })
        .transpose()?;
    let operator = Operator {
        signing_key: one("signing_key", signing_key)?,
        audit: one("audit", audit)?,
        role: role.map(|v| Setting {
            key: "role",
            line: line_of(v.span().start),
            value: v.into_inner(),
        }),
        pins: one("pins", pins)?,
        write_pins: one("write_pins", write_pins)?,
        pins_record_only: pins_record_only.map(|v| Setting {
            key: "pins_record_only",
            line: line_of(v.span().start),
            value: v.into_inner(),
        }),
        allow_read: many("allow_read", allow_read)?,
        allow_write: many("allow_write", allow_write)?,
        allow_exec: many("allow_exec", allow_exec)?,
        allow_net,
        record_arguments: record_arguments.map(|v| Setting {
            key: "record_arguments",
            line: line_of(v.span().start),
            value: v.into_inner(),
        }),
        bind,
        approval_timeout,
        approvals_dir: one("approvals.dir", approvals_dir)?,
        approvers: many("approvals.approvers", approvers)?,
    };
    if !confines && let Some((key, line)) = operator.first_grant() {
        return Err((
            line,
            format!(
                "operator.{key}: grants confine a native program, but this profile names no confinement backend ([sandbox] confinement)"
            ),
        ));
    }
    Ok(operator)
}

/// `HOST:PORT` (`[v6]:port` too) with a port from 1 to 65535: the rule the Landlock
/// backend holds `--allow-net` to, checked here so a profile's mistake is named at
/// its line rather than when a program is started.
fn is_destination(d: &str) -> bool {
    let Some((host, port)) = d.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p > 0)
}

#[cfg(test)]
mod tests {
    use crate::{Profile, ProfileSource};
    use std::path::PathBuf;

    const CONFINED: &str = "name = \"t\"\ndescription = \"d\"\n\n[policy]\nplugin = \"builtin:policy-static\"\n\n[capability]\n\n[sandbox]\nconfinement = { plugin = \"builtin:confine-landlock\" }\n\n[audit]\nplugin = \"builtin:memory-sink\"\n";

    fn file(text: &str) -> Result<Profile, String> {
        Profile::parse(text, "p.toml", ProfileSource::File("/etc/x/p.toml".into()))
            .map_err(|e| e.to_string())
    }

    fn with(operator: &str) -> String {
        format!("{CONFINED}\n[operator]\n{operator}")
    }

    /// Every key parses to its value and line; relative paths are the profile
    /// directory's, absolute ones are kept.
    #[test]
    fn every_key_parses_with_its_line_and_paths_resolve_against_the_profile() {
        let p = file(&with(
            "signing_key = \"keys/k\"\naudit = \"/var/a.aarl\"\nrole = \"analyst\"\npins = \"p.json\"\nwrite_pins = \"w.json\"\npins_record_only = true\nallow_read = [\"data\", \"/srv\"]\nallow_write = []\nallow_exec = [\"bin\"]\nallow_net = [\"example.org:443\", \"[::1]:8080\"]\n",
        ))
        .unwrap();
        let o = &p.operator;
        let k = o.signing_key.as_ref().unwrap();
        assert_eq!(
            (k.value.clone(), k.line),
            (PathBuf::from("/etc/x/keys/k"), 16)
        );
        assert_eq!(
            o.audit.as_ref().unwrap().value,
            PathBuf::from("/var/a.aarl")
        );
        assert_eq!(o.role.as_ref().unwrap().value, "analyst");
        assert_eq!(
            o.pins.as_ref().unwrap().value,
            PathBuf::from("/etc/x/p.json")
        );
        assert!(o.pins_record_only.as_ref().unwrap().value);
        assert_eq!(
            o.allow_read.as_ref().unwrap().value,
            [PathBuf::from("/etc/x/data"), PathBuf::from("/srv")]
        );
        assert!(o.allow_write.as_ref().unwrap().value.is_empty());
        assert_eq!(o.allow_net.as_ref().unwrap().line, 25);
        let keys: Vec<&str> = o.entries().iter().map(|(k, _, _)| *k).collect();
        assert_eq!(keys.len(), 10, "{keys:?}");
        let (_, shown, line) = &o.entries()[6];
        assert_eq!((shown.as_str(), *line), ("[\"/etc/x/data\", \"/srv\"]", 22));
    }

    /// `bind` names each tool's path-like arguments, checked at its line; and
    /// `record_arguments` is a boolean.
    #[test]
    fn bind_and_record_arguments_parse_and_bad_names_are_refused_at_their_line() {
        let p = file(&with(
            "record_arguments = true\nbind = { read_file = [\"path\", \"/opts/dest\"], \"my tool\" = [] }\n",
        ))
        .unwrap();
        let o = &p.operator;
        assert!(o.record_arguments.as_ref().unwrap().value);
        let bind = o.bind.as_ref().unwrap();
        assert_eq!(bind.line, 17);
        assert_eq!(bind.value["read_file"].names(), ["/opts/dest", "path"]);
        assert!(bind.value["my tool"].is_empty());
        let (key, shown, _) = o.entries().pop().unwrap();
        assert_eq!(
            (key, shown.as_str()),
            (
                "bind",
                "{ \"my tool\" = [], \"read_file\" = [\"/opts/dest\", \"path\"] }"
            )
        );
        let e = file(&with("bind = { read = [\"path\", \"/path\"] }\n")).unwrap_err();
        assert_eq!(
            e,
            "p.toml:16: operator.bind.\"read\": argument \"path\" is named twice"
        );
        let e = file(&with("bind = { read = [\"/a~2\"] }\n")).unwrap_err();
        assert!(
            e.starts_with("p.toml:16: operator.bind.\"read\": argument name"),
            "{e}"
        );
        let e = file(&with("bind = { read = \"path\" }\n")).unwrap_err();
        assert!(e.starts_with("p.toml:16: operator.bind"), "{e}");
    }

    /// `[operator.approvals]`: a timeout in one unit, the queue directory and the
    /// approvers' key files resolved against the profile; unknown keys, bad durations
    /// and a zero or too long timeout refused at their line.
    #[test]
    fn approval_settings_parse_and_bad_ones_are_refused_at_their_line() {
        let p = file(&with(
            "role = \"r\"\n\n[operator.approvals]\ntimeout = \"90s\"\ndir = \"queue\"\napprovers = [\"alice.pub\", \"/k/bob.pub\"]\n",
        ))
        .unwrap();
        let o = &p.operator;
        let t = o.approval_timeout.as_ref().unwrap();
        assert_eq!((t.value, t.line), (std::time::Duration::from_secs(90), 19));
        assert_eq!(
            o.approvals_dir.as_ref().unwrap().value,
            PathBuf::from("/etc/x/queue")
        );
        assert_eq!(
            o.approvers.as_ref().unwrap().value,
            [
                PathBuf::from("/etc/x/alice.pub"),
                PathBuf::from("/k/bob.pub")
            ]
        );
        let keys: Vec<&str> = o.entries().iter().map(|(k, _, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "role",
                "approvals.timeout",
                "approvals.dir",
                "approvals.approvers"
            ]
        );
        assert_eq!(o.entries()[1].1, "\"90s\"");
        for (timeout, words) in [
            ("10", "is not a duration"),
            ("10d", "is not a duration"),
            ("m", "is not a duration"),
            ("-1m", "is not a duration"),
            ("0s", "more than zero"),
            ("169h", "longer than the most allowed"),
        ] {
            let e = file(&with(&format!(
                "[operator.approvals]\ntimeout = \"{timeout}\"\n"
            )))
            .unwrap_err();
            assert!(
                e.starts_with("p.toml:17: operator.approvals.timeout: ") && e.contains(words),
                "{timeout}: {e}"
            );
        }
        let e = file(&with("[operator.approvals]\nwho = \"me\"\n")).unwrap_err();
        assert!(
            e.starts_with("p.toml:17: ") && e.contains("unknown field `who`"),
            "{e}"
        );
        assert_eq!(
            super::parse_timeout("10m"),
            Ok(super::DEFAULT_APPROVAL_TIMEOUT)
        );
    }

    /// A profile without the table sets nothing (existing profiles are unchanged).
    #[test]
    fn no_table_sets_nothing() {
        assert_eq!(file(CONFINED).unwrap().operator, super::Operator::default());
    }

    /// Unknown keys, wrong types and duplicates are refused at their line, naming the key.
    #[test]
    fn unknown_keys_wrong_types_and_duplicates_are_refused_at_their_line() {
        let e = file(&with("role = \"a\"\napprove = true\n")).unwrap_err();
        assert!(
            e.starts_with("p.toml:17: operator.approve: unknown field `approve`"),
            "{e}"
        );
        let e = file(&with("pins_record_only = \"yes\"\n")).unwrap_err();
        assert!(
            e.starts_with("p.toml:16: operator.pins_record_only: "),
            "{e}"
        );
        let e = file(&with("allow_read = \"/srv\"\n")).unwrap_err();
        assert!(e.starts_with("p.toml:16: operator.allow_read: "), "{e}");
        let e = file(&format!("operator = 5\n{CONFINED}")).unwrap_err();
        assert!(e.starts_with("p.toml:1: operator: "), "{e}");
        let e = file(&with("role = \"a\"\nrole = \"b\"\n")).unwrap_err();
        assert!(e.starts_with("p.toml:17: ") && e.contains("role"), "{e}");
        let e = file(&with("audit = \"\"\n")).unwrap_err();
        assert!(e.starts_with("p.toml:16: operator.audit: "), "{e}");
    }

    /// A destination the backend would refuse is refused at its line, before any run.
    #[test]
    fn a_bad_destination_is_refused_at_its_line() {
        for bad in ["example.org", ":443", "h:0", "h:65536", "h:+1"] {
            let e = file(&with(&format!("allow_net = [\"{bad}\"]\n"))).unwrap_err();
            assert!(
                e.starts_with("p.toml:16: operator.allow_net: "),
                "{bad}: {e}"
            );
        }
    }

    /// Grants in a profile that names no confinement backend would be enforced by
    /// nothing: refused, as the flags are, at the grant's line.
    #[test]
    fn grants_without_a_confinement_backend_are_refused() {
        let unconfined = CONFINED.replace(
            "confinement = { plugin = \"builtin:confine-landlock\" }\n",
            "",
        );
        let e = file(&format!(
            "{unconfined}\n[operator]\nrole = \"r\"\nallow_write = []\n"
        ))
        .unwrap_err();
        assert!(
            e.starts_with("p.toml:16: operator.allow_write: ")
                && e.contains("names no confinement backend"),
            "{e}"
        );
        // Settings that are not grants are fine there.
        file(&format!("{unconfined}\n[operator]\nrole = \"r\"\n")).unwrap();
    }

    /// An embedded profile has no directory: a relative path in it is refused.
    #[test]
    fn an_embedded_profile_refuses_a_relative_path() {
        let e = Profile::parse(
            &with("signing_key = \"k\"\n"),
            "embedded:t",
            ProfileSource::Embedded,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("embedded:t:16: operator.signing_key: relative path"),
            "{e}"
        );
    }

    /// A flag replaces the profile's value (a list wholly); each value says where it
    /// came from.
    #[test]
    fn a_flag_replaces_the_profiles_value_and_sources_say_which() {
        let p = file(&with("role = \"analyst\"\nallow_read = [\"/a\", \"/b\"]\n")).unwrap();
        let role = p.choose("--role", None, p.operator.role.as_ref()).unwrap();
        assert_eq!(role.value, "analyst");
        assert_eq!(role.source.to_string(), "profile p.toml:16");
        assert_eq!(role.source.name(), "p.toml:16: operator.role");
        let role = p
            .choose("--role", Some("ops".to_owned()), p.operator.role.as_ref())
            .unwrap();
        assert_eq!(
            (role.value.as_str(), role.source.to_string()),
            ("ops", "flag --role".to_owned())
        );
        let read = p
            .choose(
                "--allow-read",
                Some(vec![PathBuf::from("/c")]),
                p.operator.allow_read.as_ref(),
            )
            .unwrap();
        assert_eq!(read.value, [PathBuf::from("/c")]);
        assert!(p.choose::<String>("--pins", None, None).is_none());
    }
}
