//! The two kinds of file in the queue, `<id>.request` and `<id>.decision` (later
//! `<id>.used`), as values and as their one canonical JSON form.

use crate::QueueError;
use aegis_record::json::{Object, SafeInt, Value};
use aegis_record::{ApprovalScope, Approver, DecisionVerdict};
use std::cell::RefCell;
use std::path::Path;

/// The `format` member of a request file.
pub const REQUEST_FORMAT: &str = "aegis-approval-request/1";
/// The `format` member of a decision file.
pub const DECISION_FORMAT: &str = "aegis-approval-decision/1";
/// The most a request carries of the call's arguments (canonical JSON text): over it,
/// they are left out and `arguments_cut` says so.
pub const ARGUMENTS_CAP: usize = 64 << 10;

/// The front end that parked a call and waits on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// `aegis wrap`.
    Wrap,
    /// `aegis gateway`.
    Gateway,
    /// `aegis run`.
    Run,
}

impl Front {
    /// The name in the file: `wrap`, `gateway`, `run`.
    pub fn as_str(self) -> &'static str {
        match self {
            Front::Wrap => "wrap",
            Front::Gateway => "gateway",
            Front::Run => "run",
        }
    }
}

/// `<id>.request`: a parked call, filed by the host that parked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The park's approval id (`apr-` and 32 hex digits).
    pub approval_id: String,
    /// When the call was parked (the record's time form).
    pub parked_at: String,
    /// After this time the request can no longer be decided but by its host.
    pub expires_at: String,
    /// The parking host's hostname.
    pub host: String,
    /// The parking process.
    pub pid: SafeInt,
    /// The front end waiting on it.
    pub front: Front,
    /// Where the park outcome is: a record path, or `postgres:<table>`.
    pub record: String,
    /// The tool called.
    pub tool_id: String,
    /// The rule that parked it, if the policy named one.
    pub rule: Option<String>,
    /// Why the policy parked it, if it said.
    pub reason: Option<String>,
    /// The call's arguments as canonical JSON text; `None` when the call had none or
    /// they were over [`ARGUMENTS_CAP`] (then `arguments_cut`).
    pub arguments: Option<String>,
    /// The arguments were over [`ARGUMENTS_CAP`] and left out.
    pub arguments_cut: bool,
    /// The argument axes the binding derived (as `decision_axes.bound`).
    pub bound: Option<Object>,
    /// What an approval grants, exactly as the park outcome records it.
    pub scope: ApprovalScope,
}

impl Request {
    /// Sets the arguments from their canonical JSON text, leaving them out (and setting
    /// `arguments_cut`) when they are over [`ARGUMENTS_CAP`].
    pub fn set_arguments(&mut self, canonical: String) {
        if canonical.len() > ARGUMENTS_CAP {
            self.arguments = None;
            self.arguments_cut = true;
        } else {
            self.arguments = Some(canonical);
            self.arguments_cut = false;
        }
    }

    /// The file's members.
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("format", REQUEST_FORMAT);
        o.insert("approval_id", self.approval_id.as_str());
        o.insert("parked_at", self.parked_at.as_str());
        o.insert("expires_at", self.expires_at.as_str());
        o.insert("host", self.host.as_str());
        o.insert("pid", Value::Int(self.pid));
        o.insert("front", self.front.as_str());
        o.insert("record", self.record.as_str());
        o.insert("tool_id", self.tool_id.as_str());
        o.insert_opt("rule", self.rule.as_deref());
        o.insert_opt("reason", self.reason.as_deref());
        o.insert_opt("arguments", self.arguments.as_deref());
        if self.arguments_cut {
            o.insert("arguments_cut", true);
        }
        o.insert_opt("bound", self.bound.clone());
        o.insert("scope", self.scope.to_object());
        o
    }

    /// Reads a request file's members; `path` names it in errors.
    ///
    /// # Errors
    /// A missing, ill-typed or unknown member, another format, an ill-formed id or time.
    pub fn from_object(obj: &Object, path: &Path) -> Result<Request, QueueError> {
        let m = Members::new(obj, path);
        m.format(REQUEST_FORMAT)?;
        let front = match m.str("front")? {
            "wrap" => Front::Wrap,
            "gateway" => Front::Gateway,
            "run" => Front::Run,
            other => {
                return Err(QueueError::field(
                    path,
                    "front",
                    format!("{other:?}: not wrap, gateway or run"),
                ));
            }
        };
        let arguments = m.opt_str("arguments")?.map(str::to_owned);
        let arguments_cut = match m.get("arguments_cut") {
            None => false,
            Some(Value::Bool(true)) => true,
            Some(_) => return Err(QueueError::field(path, "arguments_cut", "not true")),
        };
        if arguments_cut && arguments.is_some() {
            return Err(QueueError::field(
                path,
                "arguments_cut",
                "given with arguments",
            ));
        }
        if arguments.as_ref().is_some_and(|a| a.len() > ARGUMENTS_CAP) {
            return Err(QueueError::field(path, "arguments", "longer than 64 KiB"));
        }
        let r = Request {
            approval_id: m.id()?,
            parked_at: m.time("parked_at")?,
            expires_at: m.time("expires_at")?,
            host: m.str("host")?.to_owned(),
            pid: match m.get("pid") {
                Some(Value::Int(n)) => *n,
                Some(_) => return Err(QueueError::field(path, "pid", "not an integer")),
                None => return Err(QueueError::field(path, "pid", "missing")),
            },
            front,
            record: m.str("record")?.to_owned(),
            tool_id: m.str("tool_id")?.to_owned(),
            rule: m.opt_str("rule")?.map(str::to_owned),
            reason: m.opt_str("reason")?.map(str::to_owned),
            arguments,
            arguments_cut,
            bound: m.opt_object("bound")?.cloned(),
            scope: ApprovalScope::from_object(m.object("scope")?, "scope")
                .map_err(|source| member(path, source))?,
        };
        m.no_others()?;
        Ok(r)
    }
}

/// `<id>.decision`: a verdict on one request, created once; `<id>.used` once claimed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionFile {
    /// The request decided.
    pub approval_id: String,
    /// The verdict, as on the record's decision line.
    pub verdict: DecisionVerdict,
    /// Who decided, as on the record's decision line.
    pub approver: Approver,
    /// When (the record's time form).
    pub decided_at: String,
}

impl DecisionFile {
    /// A person's decision on request `approval_id`, signed with their `key` and timed
    /// now.
    pub fn signed(
        key: &aegis_record::key::SigningKey,
        approval_id: &str,
        verdict: DecisionVerdict,
    ) -> DecisionFile {
        let approver = aegis_record::approval::sign(key, approval_id, &verdict);
        DecisionFile {
            approval_id: approval_id.to_owned(),
            verdict,
            approver,
            decided_at: aegis_record::time::now(),
        }
    }

    /// The file's members.
    pub fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("format", DECISION_FORMAT);
        o.insert("approval_id", self.approval_id.as_str());
        o.insert("verdict", self.verdict.to_object());
        o.insert("approver", self.approver.to_object());
        o.insert("decided_at", self.decided_at.as_str());
        o
    }

    /// Reads a decision file's members; `path` names it in errors.
    ///
    /// # Errors
    /// A missing, ill-typed or unknown member, another format, an ill-formed id or time.
    pub fn from_object(obj: &Object, path: &Path) -> Result<DecisionFile, QueueError> {
        let m = Members::new(obj, path);
        m.format(DECISION_FORMAT)?;
        let d = DecisionFile {
            approval_id: m.id()?,
            verdict: DecisionVerdict::from_object(m.object("verdict")?, "verdict")
                .map_err(|source| member(path, source))?,
            approver: Approver::from_object(m.object("approver")?, "approver")
                .map_err(|source| member(path, source))?,
            decided_at: m.time("decided_at")?,
        };
        m.no_others()?;
        Ok(d)
    }

    /// Whether the host decided it (expiry, withdrawal) rather than a person.
    pub fn by_host(&self) -> bool {
        matches!(self.approver, Approver::Host { .. })
    }
}

fn member(path: &Path, source: aegis_record::line::FieldError) -> QueueError {
    QueueError::Member {
        path: path.to_owned(),
        source,
    }
}

/// A file's members, read once each; any member not read is refused ([`Members::no_others`]).
struct Members<'a> {
    obj: &'a Object,
    path: &'a Path,
    seen: RefCell<Vec<&'static str>>,
}

impl<'a> Members<'a> {
    fn new(obj: &'a Object, path: &'a Path) -> Self {
        Members {
            obj,
            path,
            seen: RefCell::new(Vec::new()),
        }
    }

    fn get(&self, key: &'static str) -> Option<&'a Value> {
        self.seen.borrow_mut().push(key);
        self.obj.get(key)
    }

    fn format(&self, want: &str) -> Result<(), QueueError> {
        match self.str("format")? {
            f if f == want => Ok(()),
            other => Err(QueueError::field(
                self.path,
                "format",
                format!("{other:?}: this aegis reads {want:?}"),
            )),
        }
    }

    fn str(&self, key: &'static str) -> Result<&'a str, QueueError> {
        self.opt_str(key)?
            .ok_or_else(|| QueueError::field(self.path, key, "missing"))
    }

    fn opt_str(&self, key: &'static str) -> Result<Option<&'a str>, QueueError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(QueueError::field(self.path, key, "not a string")),
        }
    }

    fn object(&self, key: &'static str) -> Result<&'a Object, QueueError> {
        self.opt_object(key)?
            .ok_or_else(|| QueueError::field(self.path, key, "missing"))
    }

    fn opt_object(&self, key: &'static str) -> Result<Option<&'a Object>, QueueError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(_) => Err(QueueError::field(self.path, key, "not an object")),
        }
    }

    fn time(&self, key: &'static str) -> Result<String, QueueError> {
        let t = self.str(key)?;
        if !aegis_record::time::is_valid(t) {
            return Err(QueueError::field(
                self.path,
                key,
                format!("{t:?}: not a time in the record's form"),
            ));
        }
        Ok(t.to_owned())
    }

    fn id(&self) -> Result<String, QueueError> {
        let id = self.str("approval_id")?;
        if !crate::is_approval_id(id) {
            return Err(QueueError::field(
                self.path,
                "approval_id",
                format!("{id:?}: not an approval id"),
            ));
        }
        Ok(id.to_owned())
    }

    fn no_others(&self) -> Result<(), QueueError> {
        let seen = self.seen.borrow();
        match self.obj.iter().find(|(k, _)| !seen.contains(k)) {
            None => Ok(()),
            Some((k, _)) => Err(QueueError::field(
                self.path,
                k,
                "not a member of this format; refused",
            )),
        }
    }
}
