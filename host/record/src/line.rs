//! The line types and the objects inside them.
//!
//! Each type converts to the body of a line (its own members, without the four chain
//! members and the signature) and back. Parsing checks the members this version defines
//! and ignores others: a newer emitter may add members, and they are still hashed.
//!
//! Every string and list a body writes passes through [`crate::bound`], so no member,
//! whoever supplied its text, can grow a line past what the verifier reads.
//!
//! Which lines are signed is a property of the type: [`SignedBody`] is implemented for
//! outcome and decision bodies and never for [`IntentLine`], so the writer has no path
//! that signs an intent. Both traits are sealed.

use crate::approval::Approver;
use crate::bound::{insert_list, text_value, text_values};
use crate::digest::{
    ArgumentsDigest, ComponentDigest, DefinitionDigest, HexError, KeyId, LineHash, PolicySetHash,
    RequestDigest, ResponseDigest,
};
use crate::json::{Object, SafeInt, Value};
use crate::key::PublicKey;
use crate::refusal::Cause;

/// The `schema_version` this crate reads and writes.
pub const SCHEMA_VERSION: u32 = 2;

/// A line type token as it appears in `line_type`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LineType {
    /// First line of a session; signed.
    Open,
    /// Written before a call runs; hashed into the chain, never signed.
    Intent,
    /// The record of one call, on every exit path; signed.
    Outcome,
    /// A human verdict on a parked call; signed.
    Decision,
    /// Last line of a session; signed.
    Close,
    /// A tool definition an MCP relay saw change against its pins; signed.
    ToolChange,
    /// The session's key hands the chain to a next key; signed by the current key.
    KeyHandoff,
    /// Reserved: signed, defined so adding it later is not a breaking change.
    Checkpoint,
    /// A token this version does not define, preserved as written.
    Unknown(String),
}

impl LineType {
    /// Reads a `line_type` token.
    pub fn from_token(token: &str) -> LineType {
        match token {
            "open" => LineType::Open,
            "intent" => LineType::Intent,
            "outcome" => LineType::Outcome,
            "decision" => LineType::Decision,
            "close" => LineType::Close,
            "tool_change" => LineType::ToolChange,
            "key_handoff" => LineType::KeyHandoff,
            "checkpoint" => LineType::Checkpoint,
            other => LineType::Unknown(other.to_owned()),
        }
    }

    /// The token as written.
    pub fn token(&self) -> &str {
        match self {
            LineType::Open => "open",
            LineType::Intent => "intent",
            LineType::Outcome => "outcome",
            LineType::Decision => "decision",
            LineType::Close => "close",
            LineType::ToolChange => "tool_change",
            LineType::KeyHandoff => "key_handoff",
            LineType::Checkpoint => "checkpoint",
            LineType::Unknown(t) => t,
        }
    }

    /// Whether lines of this type must carry a valid signature. Unknown types are not in
    /// the set: whether they must be signed is unknowable to this version.
    pub fn is_signed(&self) -> bool {
        matches!(
            self,
            LineType::Open
                | LineType::Outcome
                | LineType::Decision
                | LineType::Close
                | LineType::ToolChange
                | LineType::KeyHandoff
                | LineType::Checkpoint
        )
    }
}

/// Why a line's members do not match its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// A required member is absent.
    #[error("{0}: missing")]
    Missing(String),
    /// A member has the wrong JSON type.
    #[error("{field}: expected {expected}")]
    Type {
        /// Path of the member, e.g. `policy.reason`.
        field: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A digest, key or signature member is not in wire form.
    #[error("{field}: {source}")]
    Hex {
        /// Path of the member.
        field: String,
        /// The cause.
        source: HexError,
    },
    /// A tag member names no variant of this version.
    #[error("{field}: unknown value {}", crate::json::quote(found))]
    Tag {
        /// Path of the tag member.
        field: String,
        /// The token found.
        found: String,
    },
    /// A member is outside its domain.
    #[error("{field}: {what}")]
    Domain {
        /// Path of the member.
        field: String,
        /// What is wrong.
        what: &'static str,
    },
}

/// Typed access to an object's members, naming each member by its path in errors.
pub(crate) struct Fields<'a> {
    obj: &'a Object,
    prefix: &'a str,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(obj: &'a Object, prefix: &'a str) -> Self {
        Fields { obj, prefix }
    }

    pub(crate) fn path(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.prefix)
        }
    }

    fn get(&self, key: &str) -> Result<&'a Value, FieldError> {
        self.obj
            .get(key)
            .ok_or_else(|| FieldError::Missing(self.path(key)))
    }

    fn type_err(&self, key: &str, expected: &'static str) -> FieldError {
        FieldError::Type {
            field: self.path(key),
            expected,
        }
    }

    pub(crate) fn str(&self, key: &str) -> Result<&'a str, FieldError> {
        self.get(key)?
            .as_str()
            .ok_or_else(|| self.type_err(key, "a string"))
    }

    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&'a str>, FieldError> {
        match self.obj.get(key) {
            None => Ok(None),
            Some(_) => self.str(key).map(Some),
        }
    }

    pub(crate) fn string(&self, key: &str) -> Result<String, FieldError> {
        self.str(key).map(str::to_owned)
    }

    pub(crate) fn opt_string(&self, key: &str) -> Result<Option<String>, FieldError> {
        Ok(self.opt_str(key)?.map(str::to_owned))
    }

    pub(crate) fn int(&self, key: &str) -> Result<SafeInt, FieldError> {
        match self.get(key)? {
            Value::Int(i) => Ok(*i),
            _ => Err(self.type_err(key, "an integer")),
        }
    }

    fn opt_int(&self, key: &str) -> Result<Option<SafeInt>, FieldError> {
        match self.obj.get(key) {
            None => Ok(None),
            Some(_) => self.int(key).map(Some),
        }
    }

    pub(crate) fn hex<T>(
        &self,
        key: &str,
        parse: fn(&str) -> Result<T, HexError>,
    ) -> Result<T, FieldError> {
        parse(self.str(key)?).map_err(|source| FieldError::Hex {
            field: self.path(key),
            source,
        })
    }

    pub(crate) fn opt_hex<T>(
        &self,
        key: &str,
        parse: fn(&str) -> Result<T, HexError>,
    ) -> Result<Option<T>, FieldError> {
        match self.obj.get(key) {
            None => Ok(None),
            Some(_) => self.hex(key, parse).map(Some),
        }
    }

    pub(crate) fn object(&self, key: &str) -> Result<&'a Object, FieldError> {
        self.get(key)?
            .as_object()
            .ok_or_else(|| self.type_err(key, "an object"))
    }

    pub(crate) fn opt_object(&self, key: &str) -> Result<Option<&'a Object>, FieldError> {
        match self.obj.get(key) {
            None => Ok(None),
            Some(_) => self.object(key).map(Some),
        }
    }

    fn array(&self, key: &str) -> Result<&'a [Value], FieldError> {
        self.get(key)?
            .as_array()
            .ok_or_else(|| self.type_err(key, "an array"))
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, FieldError> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.type_err(key, "an array of strings"))
            })
            .collect()
    }
}

/// The body of a line: its own members. Sealed.
pub trait LineBody: sealed::Sealed {
    /// The `line_type` token.
    const LINE_TYPE: &'static str;
    /// The members this body contributes to the line.
    fn to_object(&self) -> Object;
}

/// A body the writer signs. Sealed: intent lines never implement it.
pub trait SignedBody: LineBody {}

/// A body the writer appends unsigned. Sealed: only intent lines implement it.
pub trait UnsignedBody: LineBody {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::IntentLine {}
    impl Sealed for super::OutcomeLine {}
    impl Sealed for super::DecisionLine {}
    impl Sealed for super::ToolChangeLine {}
    impl Sealed for super::KeyHandoffLine {}
}

/// The open line's own members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenLine {
    /// The key every signed line of the session is signed under.
    pub public_key: PublicKey,
    /// The previous session's final line hash; absent for the first session of a file.
    pub prev_session_tail: Option<LineHash>,
}

impl OpenLine {
    /// Reads the members of an open line.
    ///
    /// # Errors
    /// A missing or ill-typed member.
    pub fn from_object(obj: &Object) -> Result<OpenLine, FieldError> {
        let f = Fields::new(obj, "");
        Ok(OpenLine {
            public_key: f.hex("public_key", PublicKey::from_hex)?,
            prev_session_tail: f.opt_hex("prev_session_tail", LineHash::from_hex)?,
        })
    }
}

/// A key hand-off: signed by the session's current key, it names the key every later
/// line of the session is signed under. Deliberately not a [`SignedBody`]: only
/// [`crate::Session::hand_off`] writes it, because the writer must switch keys in the
/// same critical section that lands the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyHandoffLine {
    /// The key that signs the session's lines after this one.
    pub next_public_key: PublicKey,
    /// The key id of `next_public_key`, as written; a verifier checks that it is.
    pub next_key_id: KeyId,
}

impl LineBody for KeyHandoffLine {
    const LINE_TYPE: &'static str = "key_handoff";
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("next_key_id", self.next_key_id);
        o.insert("next_public_key", self.next_public_key);
        o
    }
}

impl KeyHandoffLine {
    /// The hand-off to `next`, with its key id.
    pub fn to(next: PublicKey) -> KeyHandoffLine {
        KeyHandoffLine {
            next_public_key: next,
            next_key_id: next.key_id(),
        }
    }

    /// Reads the members of a key hand-off line. Whether they agree with each other and
    /// with the session is the verifier's question, not this one's.
    ///
    /// # Errors
    /// A missing or ill-typed member.
    pub fn from_object(obj: &Object) -> Result<KeyHandoffLine, FieldError> {
        let f = Fields::new(obj, "");
        Ok(KeyHandoffLine {
            next_public_key: f.hex("next_public_key", PublicKey::from_hex)?,
            next_key_id: f.hex("next_key_id", KeyId::from_hex)?,
        })
    }
}

/// A call's pre-execution line: durable before any effect, never signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentLine {
    /// Pairs this line with the call's outcome.
    pub call_id: String,
    /// The tool being called.
    pub tool_id: String,
    /// SHA-256 over the verbatim request bytes.
    pub request_digest: RequestDigest,
}

impl LineBody for IntentLine {
    const LINE_TYPE: &'static str = "intent";
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("call_id", text_value(&self.call_id));
        o.insert("tool_id", text_value(&self.tool_id));
        o.insert("request_digest", self.request_digest);
        o
    }
}
impl UnsignedBody for IntentLine {}

impl IntentLine {
    /// Reads the members of an intent line.
    ///
    /// # Errors
    /// A missing or ill-typed member.
    pub fn from_object(obj: &Object) -> Result<IntentLine, FieldError> {
        let f = Fields::new(obj, "");
        Ok(IntentLine {
            call_id: f.string("call_id")?,
            tool_id: f.string("tool_id")?,
            request_digest: f.hex("request_digest", RequestDigest::from_hex)?,
        })
    }
}

/// The policy station's verdict, tagged by `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyOutcome {
    /// The call may proceed.
    Allowed,
    /// A rule refused the call.
    Denied {
        /// Why.
        reason: String,
    },
    /// A rate limit refused the call.
    RateLimited {
        /// Why.
        reason: String,
    },
    /// The call was parked for a human; it did not run.
    PendingApproval {
        /// Names the park; a decision line answers it.
        approval_id: String,
        /// What approving it would authorise: the scope a decision may grant at most.
        /// Absent on lines written before approvals could be decided.
        scope: Option<ApprovalScope>,
    },
}

impl PolicyOutcome {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        match self {
            PolicyOutcome::Allowed => {
                o.insert("status", "allowed");
            }
            PolicyOutcome::Denied { reason } => {
                o.insert("status", "denied");
                o.insert("reason", text_value(reason));
            }
            PolicyOutcome::RateLimited { reason } => {
                o.insert("status", "rate_limited");
                o.insert("reason", text_value(reason));
            }
            PolicyOutcome::PendingApproval { approval_id, scope } => {
                o.insert("status", "pending_approval");
                o.insert("approval_id", text_value(approval_id));
                o.insert_opt("scope", scope.as_ref().map(ApprovalScope::to_object));
            }
        }
        o
    }

    fn from_object(obj: &Object) -> Result<Self, FieldError> {
        let f = Fields::new(obj, "policy");
        Ok(match f.str("status")? {
            "allowed" => PolicyOutcome::Allowed,
            "denied" => PolicyOutcome::Denied {
                reason: f.string("reason")?,
            },
            "rate_limited" => PolicyOutcome::RateLimited {
                reason: f.string("reason")?,
            },
            "pending_approval" => PolicyOutcome::PendingApproval {
                approval_id: f.string("approval_id")?,
                scope: f
                    .opt_object("scope")?
                    .map(|o| ApprovalScope::from_object(o, "policy.scope"))
                    .transpose()?,
            },
            other => return Err(tag_err("policy.status", other)),
        })
    }
}

fn tag_err(field: &str, found: &str) -> FieldError {
    FieldError::Tag {
        field: field.to_owned(),
        found: found.to_owned(),
    }
}

/// Filesystem roots a grant or approval covers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FsScope {
    /// Roots readable by the call.
    pub read_paths: Vec<String>,
    /// Roots writable by the call.
    pub write_paths: Vec<String>,
}

impl FsScope {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        insert_list(&mut o, "read_paths", text_values(&self.read_paths));
        insert_list(&mut o, "write_paths", text_values(&self.write_paths));
        o
    }

    fn from_object(obj: &Object, prefix: &str) -> Result<Self, FieldError> {
        let f = Fields::new(obj, prefix);
        Ok(FsScope {
            read_paths: f.strings("read_paths")?,
            write_paths: f.strings("write_paths")?,
        })
    }
}

/// One network destination a grant or approval covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRule {
    /// Host name or address.
    pub host: String,
    /// Allowed ports.
    pub ports: Vec<u16>,
    /// Allowed methods, e.g. `GET`.
    pub methods: Vec<String>,
}

/// Network destinations a grant or approval covers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NetScope {
    /// HTTP destinations.
    pub http: Vec<HttpRule>,
}

impl NetScope {
    fn to_object(&self) -> Object {
        let rules: Vec<Value> = self
            .http
            .iter()
            .map(|r| {
                let mut o = Object::new();
                o.insert("host", text_value(&r.host));
                insert_list(
                    &mut o,
                    "ports",
                    r.ports.iter().map(|&p| Value::from(p)).collect(),
                );
                insert_list(&mut o, "methods", text_values(&r.methods));
                Value::Object(o)
            })
            .collect();
        let mut o = Object::new();
        insert_list(&mut o, "http", rules);
        o
    }

    fn from_object(obj: &Object, prefix: &str) -> Result<Self, FieldError> {
        let f = Fields::new(obj, prefix);
        let path = format!("{prefix}.http");
        let mut http = Vec::new();
        for v in f.array("http")? {
            let rule = v.as_object().ok_or_else(|| FieldError::Type {
                field: path.clone(),
                expected: "an array of objects",
            })?;
            let r = Fields::new(rule, &path);
            let ports = r
                .array("ports")?
                .iter()
                .map(|p| {
                    p.as_int()
                        .and_then(|n| u16::try_from(n).ok())
                        .ok_or_else(|| FieldError::Domain {
                            field: format!("{path}.ports"),
                            what: "expected port numbers 0..=65535",
                        })
                })
                .collect::<Result<_, _>>()?;
            http.push(HttpRule {
                host: r.string("host")?,
                ports,
                methods: r.strings("methods")?,
            });
        }
        Ok(NetScope { http })
    }
}

/// The authority minted for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapabilityGrant {
    /// Names the grant.
    pub grant_id: String,
    /// The tool it was minted for.
    pub tool_id: String,
    /// Filesystem roots, if any.
    pub fs: Option<FsScope>,
    /// Network destinations, if any.
    pub net: Option<NetScope>,
    /// Memory ceiling for the call.
    pub max_memory_bytes: SafeInt,
    /// Wall-clock ceiling for the call.
    pub max_wall_ms: SafeInt,
    /// Output ceiling for the call.
    pub max_output_bytes: SafeInt,
    /// SHA-256 of the WebAssembly component the grant runs; absent for tools that are
    /// not a component (host handlers).
    pub component_digest: Option<ComponentDigest>,
}

impl CapabilityGrant {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("grant_id", text_value(&self.grant_id));
        o.insert("tool_id", text_value(&self.tool_id));
        o.insert_opt("fs", self.fs.as_ref().map(FsScope::to_object));
        o.insert_opt("net", self.net.as_ref().map(NetScope::to_object));
        o.insert("max_memory_bytes", self.max_memory_bytes);
        o.insert("max_wall_ms", self.max_wall_ms);
        o.insert("max_output_bytes", self.max_output_bytes);
        o.insert_opt("component_digest", self.component_digest);
        o
    }

    fn from_object(obj: &Object, prefix: &str) -> Result<Self, FieldError> {
        let f = Fields::new(obj, prefix);
        Ok(CapabilityGrant {
            grant_id: f.string("grant_id")?,
            tool_id: f.string("tool_id")?,
            fs: f
                .opt_object("fs")?
                .map(|o| FsScope::from_object(o, &format!("{prefix}.fs")))
                .transpose()?,
            net: f
                .opt_object("net")?
                .map(|o| NetScope::from_object(o, &format!("{prefix}.net")))
                .transpose()?,
            max_memory_bytes: f.int("max_memory_bytes")?,
            max_wall_ms: f.int("max_wall_ms")?,
            max_output_bytes: f.int("max_output_bytes")?,
            component_digest: f.opt_hex("component_digest", ComponentDigest::from_hex)?,
        })
    }
}

/// The capability station's result, tagged by `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapabilityOutcome {
    /// A grant was minted.
    Granted {
        /// The grant.
        grant: CapabilityGrant,
    },
    /// No grant: the call never reached the sandbox.
    Denied {
        /// Why.
        reason: String,
        /// The axis that was refused, e.g. `fs` or `net.http`.
        denied_capability: Option<String>,
    },
}

impl CapabilityOutcome {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        match self {
            CapabilityOutcome::Granted { grant } => {
                o.insert("status", "granted");
                o.insert("grant", grant.to_object());
            }
            CapabilityOutcome::Denied {
                reason,
                denied_capability,
            } => {
                o.insert("status", "denied");
                o.insert("reason", text_value(reason));
                o.insert_opt(
                    "denied_capability",
                    denied_capability.as_deref().map(text_value),
                );
            }
        }
        o
    }

    fn from_object(obj: &Object) -> Result<Self, FieldError> {
        let f = Fields::new(obj, "capability");
        Ok(match f.str("status")? {
            "granted" => CapabilityOutcome::Granted {
                grant: CapabilityGrant::from_object(f.object("grant")?, "capability.grant")?,
            },
            "denied" => CapabilityOutcome::Denied {
                reason: f.string("reason")?,
                denied_capability: f.opt_string("denied_capability")?,
            },
            other => return Err(tag_err("capability.status", other)),
        })
    }
}

/// What happened in the sandbox, tagged by `status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutionOutcome {
    /// The tool ran to completion.
    Success,
    /// The tool trapped (a host panic is recorded as a trap too).
    Trap {
        /// The trap message.
        message: String,
    },
    /// A resource ceiling stopped the tool.
    ResourceExceeded {
        /// Which ceiling, e.g. `memory`, `wall_time`, `output`.
        kind: String,
    },
    /// The host did not run the tool (refused earlier, or the call was abandoned).
    HostDenied {
        /// Why.
        reason: String,
    },
}

impl ExecutionOutcome {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        match self {
            ExecutionOutcome::Success => {
                o.insert("status", "success");
            }
            ExecutionOutcome::Trap { message } => {
                o.insert("status", "trap");
                o.insert("message", text_value(message));
            }
            ExecutionOutcome::ResourceExceeded { kind } => {
                o.insert("status", "resource_exceeded");
                o.insert("kind", text_value(kind));
            }
            ExecutionOutcome::HostDenied { reason } => {
                o.insert("status", "host_denied");
                o.insert("reason", text_value(reason));
            }
        }
        o
    }

    fn from_object(obj: &Object) -> Result<Self, FieldError> {
        let f = Fields::new(obj, "execution");
        Ok(match f.str("status")? {
            "success" => ExecutionOutcome::Success,
            "trap" => ExecutionOutcome::Trap {
                message: f.string("message")?,
            },
            "resource_exceeded" => ExecutionOutcome::ResourceExceeded {
                kind: f.string("kind")?,
            },
            "host_denied" => ExecutionOutcome::HostDenied {
                reason: f.string("reason")?,
            },
            other => return Err(tag_err("execution.status", other)),
        })
    }
}

/// The filesystem scope a grant resolved to: its single root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsAxis {
    /// The root as requested.
    pub path_raw: String,
    /// The root after canonicalization. Not assumed equal to `path_raw`.
    pub path_canonical: String,
}

/// The network scope a grant resolved to: its single host and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetAxis {
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// The inputs a verdict turned on. Always present on an outcome, possibly empty.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DecisionAxes {
    /// The capability the call requested, e.g. `fs.read`.
    pub capability: Option<String>,
    /// The role the caller asserted.
    pub role: Option<String>,
    /// The policy session scope (not the audit session).
    pub session: Option<String>,
    /// The rule that decided.
    pub matched_rule: Option<String>,
    /// The approval a resumed call ran under.
    pub approval_ref: Option<String>,
    /// The grant's single filesystem root, when it has exactly one.
    pub fs: Option<FsAxis>,
    /// The grant's single host and port, when it has exactly one.
    pub net: Option<NetAxis>,
    /// The call's argument values the deciding rule compared, as the RFC 8785
    /// canonical JSON text of one object (a string, because arguments may hold values
    /// the record's own value space does not: negative numbers, fractions, `null`).
    pub arguments: Option<String>,
    /// The call's bound arguments: what the tool's binding names, recorded on every
    /// call so a replay can decide rules over them (`spec/SPEC.md` §6.3).
    pub bound: Option<BoundArguments>,
    /// The call's whole arguments object as RFC 8785 canonical JSON text, when the
    /// operator asked for arguments to be recorded; bounded like every string, so a
    /// long one keeps its length and digest only.
    pub call_arguments: Option<String>,
}

/// The arguments a tool's binding names, as one call gave them.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BoundArguments {
    /// The names (a key, or a JSON Pointer) whose value this states: present in
    /// `values`, or known to be absent from the call. A name the binding holds whose
    /// value could not be known is left out, so a reader reads it as unknown.
    pub names: Vec<String>,
    /// RFC 8785 canonical JSON text of one object: each name of `names` the call gave,
    /// with its value exactly as given (not normalised).
    pub values: String,
}

impl DecisionAxes {
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert_opt("capability", self.capability.as_deref().map(text_value));
        o.insert_opt("role", self.role.as_deref().map(text_value));
        o.insert_opt("session", self.session.as_deref().map(text_value));
        o.insert_opt("matched_rule", self.matched_rule.as_deref().map(text_value));
        o.insert_opt("approval_ref", self.approval_ref.as_deref().map(text_value));
        o.insert_opt("arguments", self.arguments.as_deref().map(text_value));
        o.insert_opt(
            "call_arguments",
            self.call_arguments.as_deref().map(text_value),
        );
        if let Some(bound) = &self.bound {
            let mut b = Object::new();
            insert_list(&mut b, "names", text_values(&bound.names));
            b.insert("values", text_value(&bound.values));
            o.insert("bound", b);
        }
        if let Some(fs) = &self.fs {
            let mut f = Object::new();
            f.insert("path_raw", text_value(&fs.path_raw));
            f.insert("path_canonical", text_value(&fs.path_canonical));
            o.insert("fs", f);
        }
        if let Some(net) = &self.net {
            let mut n = Object::new();
            n.insert("host", text_value(&net.host));
            n.insert("port", net.port);
            o.insert("net", n);
        }
        o
    }

    fn from_object(obj: &Object) -> Result<Self, FieldError> {
        let f = Fields::new(obj, "decision_axes");
        let fs = f
            .opt_object("fs")?
            .map(|o| {
                let g = Fields::new(o, "decision_axes.fs");
                Ok::<_, FieldError>(FsAxis {
                    path_raw: g.string("path_raw")?,
                    path_canonical: g.string("path_canonical")?,
                })
            })
            .transpose()?;
        let net = f
            .opt_object("net")?
            .map(|o| {
                let g = Fields::new(o, "decision_axes.net");
                let port = u16::try_from(g.int("port")?.get()).map_err(|_| FieldError::Domain {
                    field: "decision_axes.net.port".into(),
                    what: "expected a port number 0..=65535",
                })?;
                Ok::<_, FieldError>(NetAxis {
                    host: g.string("host")?,
                    port,
                })
            })
            .transpose()?;
        let bound = f
            .opt_object("bound")?
            .map(|o| {
                let g = Fields::new(o, "decision_axes.bound");
                Ok::<_, FieldError>(BoundArguments {
                    names: g.strings("names")?,
                    values: g.string("values")?,
                })
            })
            .transpose()?;
        Ok(DecisionAxes {
            capability: f.opt_string("capability")?,
            role: f.opt_string("role")?,
            session: f.opt_string("session")?,
            matched_rule: f.opt_string("matched_rule")?,
            approval_ref: f.opt_string("approval_ref")?,
            fs,
            net,
            arguments: f.opt_string("arguments")?,
            bound,
            call_arguments: f.opt_string("call_arguments")?,
        })
    }
}

/// The Agent Action Record: one per call, on every exit path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeLine {
    /// Matches the call's intent line.
    pub call_id: String,
    /// The tool called.
    pub tool_id: String,
    /// Identical to the intent line's.
    pub request_digest: RequestDigest,
    /// The policy set that governed the call.
    pub policy_set_hash: PolicySetHash,
    /// The policy station's verdict.
    pub policy: PolicyOutcome,
    /// The capability station's result.
    pub capability: CapabilityOutcome,
    /// What happened in the sandbox.
    pub execution: ExecutionOutcome,
    /// The grant the call ran under, if one was minted.
    pub grant_id: Option<String>,
    /// Digest of the response bytes that actually left; absent when none did.
    pub response_digest: Option<ResponseDigest>,
    /// Wall time in the sandbox; absent when it never ran.
    pub wall_ms: Option<SafeInt>,
    /// Peak memory in the sandbox; absent when it never ran.
    pub peak_memory_bytes: Option<SafeInt>,
    /// The inputs the verdict turned on.
    pub decision_axes: DecisionAxes,
    /// What stopped a call the host did not run, as tokens; `None` when the tool ran to
    /// an ending of its own, or on a line written before the member existed (see
    /// [`OutcomeLine::stopped`]).
    pub stop: Option<Stop>,
}

/// What stopped a call the host did not run (an outcome's `stop`): a [`Cause`] (so its
/// station), and the grant axis the refusal was about when it was about one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    /// Why.
    pub cause: Cause,
    /// The grant axis refused (`fs.write`), when the refusal names one.
    pub axis: Option<String>,
}

impl Stop {
    /// A stop about no particular axis.
    pub fn new(cause: Cause) -> Stop {
        Stop { cause, axis: None }
    }

    /// A stop about `axis`.
    pub fn about(cause: Cause, axis: impl Into<String>) -> Stop {
        Stop {
            cause,
            axis: Some(axis.into()),
        }
    }

    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert_opt("axis", self.axis.as_deref().map(text_value));
        o.insert("cause", self.cause.token());
        o.insert("station", self.cause.station().name());
        o
    }

    fn from_object(obj: &Object) -> Result<Stop, FieldError> {
        let f = Fields::new(obj, "stop");
        Ok(Stop {
            // A pair this version does not know is a later version's: read as unknown,
            // never as malformed (spec/SPEC.md §12).
            cause: Cause::of_tokens(f.str("station")?, f.str("cause")?),
            axis: f.opt_string("axis")?,
        })
    }
}

impl LineBody for OutcomeLine {
    const LINE_TYPE: &'static str = "outcome";
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("call_id", text_value(&self.call_id));
        o.insert("tool_id", text_value(&self.tool_id));
        o.insert("request_digest", self.request_digest);
        o.insert("policy_set_hash", self.policy_set_hash);
        o.insert("policy", self.policy.to_object());
        o.insert("capability", self.capability.to_object());
        o.insert("execution", self.execution.to_object());
        o.insert_opt("grant_id", self.grant_id.as_deref().map(text_value));
        o.insert_opt("response_digest", self.response_digest);
        o.insert_opt("wall_ms", self.wall_ms);
        o.insert_opt("peak_memory_bytes", self.peak_memory_bytes);
        o.insert("decision_axes", self.decision_axes.to_object());
        o.insert_opt("stop", self.stop.as_ref().map(Stop::to_object));
        o
    }
}
impl SignedBody for OutcomeLine {}

impl OutcomeLine {
    /// Reads the members of an outcome line.
    ///
    /// # Errors
    /// A missing or ill-typed member.
    pub fn from_object(obj: &Object) -> Result<OutcomeLine, FieldError> {
        let f = Fields::new(obj, "");
        Ok(OutcomeLine {
            call_id: f.string("call_id")?,
            tool_id: f.string("tool_id")?,
            request_digest: f.hex("request_digest", RequestDigest::from_hex)?,
            policy_set_hash: f.hex("policy_set_hash", PolicySetHash::from_hex)?,
            policy: PolicyOutcome::from_object(f.object("policy")?)?,
            capability: CapabilityOutcome::from_object(f.object("capability")?)?,
            execution: ExecutionOutcome::from_object(f.object("execution")?)?,
            grant_id: f.opt_string("grant_id")?,
            response_digest: f.opt_hex("response_digest", ResponseDigest::from_hex)?,
            wall_ms: f.opt_int("wall_ms")?,
            peak_memory_bytes: f.opt_int("peak_memory_bytes")?,
            decision_axes: DecisionAxes::from_object(f.object("decision_axes")?)?,
            stop: f.opt_object("stop")?.map(Stop::from_object).transpose()?,
        })
    }

    /// What stopped the call: the line's `stop`, or for a line without one (written
    /// before the member existed) what this host's earlier reasons state
    /// ([`crate::legacy::stop_of`]). `None` when the tool ran to an ending of its own.
    pub fn stopped(&self) -> Option<Stop> {
        match &self.stop {
            Some(stop) => Some(stop.clone()),
            None => crate::legacy::stop_of(self),
        }
    }

    /// True when no station decided the call: a front end or the host stopped it first.
    pub fn stopped_before_the_stations(&self) -> bool {
        self.stopped()
            .is_some_and(|stop| stop.cause.before_the_stations())
    }
}

/// The authority an approval grants. It rides inside the approved verdict, so an approval
/// without a recorded scope cannot be expressed; a park states the scope approving it
/// would grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalScope {
    /// The tool approved.
    pub tool_id: String,
    /// The exact arguments approved ([`ArgumentsDigest`]); a resumed call whose
    /// arguments differ is refused. Absent on lines written before it was recorded.
    pub arguments_digest: Option<ArgumentsDigest>,
    /// Filesystem roots approved, if any.
    pub fs: Option<FsScope>,
    /// Network destinations approved, if any.
    pub net: Option<NetScope>,
    /// The last time the approval may be used ([`crate::time`] form).
    pub expires_at: Option<String>,
}

impl ApprovalScope {
    /// The scope's members as a JSON object.
    pub fn to_object(&self) -> Object {
        let mut s = Object::new();
        s.insert("tool_id", text_value(&self.tool_id));
        s.insert_opt("arguments_digest", self.arguments_digest.map(Value::from));
        s.insert_opt("fs", self.fs.as_ref().map(FsScope::to_object));
        s.insert_opt("net", self.net.as_ref().map(NetScope::to_object));
        s.insert_opt("expires_at", self.expires_at.as_deref().map(Value::from));
        s
    }

    /// Reads a scope; `prefix` names it in errors (`verdict.scope`).
    ///
    /// # Errors
    /// A missing or ill-typed member, or an `expires_at` not in the one time form.
    pub fn from_object(obj: &Object, prefix: &str) -> Result<ApprovalScope, FieldError> {
        let s = Fields::new(obj, prefix);
        let expires_at = s.opt_string("expires_at")?;
        if expires_at
            .as_deref()
            .is_some_and(|t| !crate::time::is_valid(t))
        {
            return Err(FieldError::Domain {
                field: s.path("expires_at"),
                what: "not a time in the one form (RFC 3339, UTC, six fractional digits)",
            });
        }
        Ok(ApprovalScope {
            tool_id: s.string("tool_id")?,
            arguments_digest: s.opt_hex("arguments_digest", ArgumentsDigest::from_hex)?,
            fs: s
                .opt_object("fs")?
                .map(|o| FsScope::from_object(o, &s.path("fs")))
                .transpose()?,
            net: s
                .opt_object("net")?
                .map(|o| NetScope::from_object(o, &s.path("net")))
                .transpose()?,
            expires_at,
        })
    }
}

/// A human's verdict on a parked call, tagged by `verdict`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecisionVerdict {
    /// Approved, with the authority granted.
    Approved {
        /// What the approval covers.
        scope: ApprovalScope,
    },
    /// Refused.
    Denied {
        /// Why.
        reason: String,
    },
}

/// A fresh approval id for a parked call (`PolicyOutcome::PendingApproval`): `apr-` and
/// 128 random bits in hex. Every policy station makes them this one way.
pub fn new_approval_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness: fall back to time, still unique within this process.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = t.to_le_bytes();
    }
    format!("apr-{}", crate::digest::encode_hex(&bytes))
}

/// A human approval verdict for one `approval_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionLine {
    /// The park this answers.
    pub approval_id: String,
    /// The verdict.
    pub verdict: DecisionVerdict,
    /// Who decided ([`Approver`]); absent on lines written before approvers were
    /// recorded, which attribute the decision to no one but the host that signed it.
    pub approver: Option<Approver>,
}

impl DecisionVerdict {
    /// The verdict as the line's `verdict` object.
    pub fn to_object(&self) -> Object {
        let mut v = Object::new();
        match self {
            DecisionVerdict::Approved { scope } => {
                v.insert("verdict", "approved");
                v.insert("scope", scope.to_object());
            }
            DecisionVerdict::Denied { reason } => {
                v.insert("verdict", "denied");
                v.insert("reason", text_value(reason));
            }
        }
        v
    }

    /// Reads a `verdict` object; `prefix` names it in errors.
    ///
    /// # Errors
    /// A missing or ill-typed member, or an unknown tag.
    pub fn from_object(obj: &Object, prefix: &str) -> Result<DecisionVerdict, FieldError> {
        let v = Fields::new(obj, prefix);
        Ok(match v.str("verdict")? {
            "approved" => DecisionVerdict::Approved {
                scope: ApprovalScope::from_object(v.object("scope")?, &v.path("scope"))?,
            },
            "denied" => DecisionVerdict::Denied {
                reason: v.string("reason")?,
            },
            other => return Err(tag_err(&v.path("verdict"), other)),
        })
    }
}

impl LineBody for DecisionLine {
    const LINE_TYPE: &'static str = "decision";
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("approval_id", text_value(&self.approval_id));
        o.insert("verdict", self.verdict.to_object());
        o.insert_opt("approver", self.approver.as_ref().map(Approver::to_object));
        o
    }
}
impl SignedBody for DecisionLine {}

impl DecisionLine {
    /// Reads the members of a decision line.
    ///
    /// # Errors
    /// A missing or ill-typed member.
    pub fn from_object(obj: &Object) -> Result<DecisionLine, FieldError> {
        let f = Fields::new(obj, "");
        Ok(DecisionLine {
            approval_id: f.string("approval_id")?,
            verdict: DecisionVerdict::from_object(f.object("verdict")?, "verdict")?,
            approver: f
                .opt_object("approver")?
                .map(|o| Approver::from_object(o, "approver"))
                .transpose()?,
        })
    }
}

/// What a relay saw differ between a tool's pinned definition and a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChangeKind {
    /// A tool the pins do not hold.
    Added,
    /// A pinned tool the listing no longer holds.
    Removed,
    /// Pinned fields differ; `fields` names them.
    Changed,
    /// One name listed more than once.
    Duplicate,
    /// A member that folds onto a pinned field (`Description`); `fields` holds it as spelt.
    Ambiguous,
}

impl ToolChangeKind {
    /// Every kind, in token order.
    pub const ALL: [ToolChangeKind; 5] = [
        ToolChangeKind::Added,
        ToolChangeKind::Ambiguous,
        ToolChangeKind::Changed,
        ToolChangeKind::Duplicate,
        ToolChangeKind::Removed,
    ];

    /// The token written as `change`.
    pub fn token(self) -> &'static str {
        match self {
            ToolChangeKind::Added => "added",
            ToolChangeKind::Removed => "removed",
            ToolChangeKind::Changed => "changed",
            ToolChangeKind::Duplicate => "duplicate",
            ToolChangeKind::Ambiguous => "ambiguous",
        }
    }

    fn of_token(token: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.token() == token)
    }
}

/// What the relay did with a changed tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChangeAction {
    /// Left out of what the client is shown; its calls refused for the session.
    Withheld,
    /// Shown and callable (the operator chose to record changes only).
    Shown,
}

impl ToolChangeAction {
    /// The token written as `action`.
    pub fn token(self) -> &'static str {
        match self {
            ToolChangeAction::Withheld => "withheld",
            ToolChangeAction::Shown => "shown",
        }
    }
}

/// A tool definition a relay saw change against its pins: written once per tool and
/// session, when the change is first seen, whether or not the tool is ever called.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolChangeLine {
    /// The tool's name as listed.
    pub tool_id: String,
    /// What differs.
    pub change: ToolChangeKind,
    /// For [`ToolChangeKind::Changed`], the pinned fields that differ; for
    /// [`ToolChangeKind::Ambiguous`], the member as the server spelt it; else empty.
    pub fields: Vec<String>,
    /// The pinned definition's digest, when the tool was pinned.
    pub pinned_digest: Option<DefinitionDigest>,
    /// The listed definition's digest, when the listing holds the tool.
    pub listed_digest: Option<DefinitionDigest>,
    /// What the relay did.
    pub action: ToolChangeAction,
}

impl LineBody for ToolChangeLine {
    const LINE_TYPE: &'static str = "tool_change";
    fn to_object(&self) -> Object {
        let mut o = Object::new();
        o.insert("action", self.action.token());
        o.insert("change", self.change.token());
        if !self.fields.is_empty() {
            o.insert("fields", Value::Array(text_values(&self.fields)));
        }
        o.insert_opt("listed_digest", self.listed_digest);
        o.insert_opt("pinned_digest", self.pinned_digest);
        o.insert("tool_id", text_value(&self.tool_id));
        o
    }
}
impl SignedBody for ToolChangeLine {}

impl ToolChangeLine {
    /// Reads the members of a tool change line.
    ///
    /// # Errors
    /// A missing or ill-typed member, or a tag this version does not define.
    pub fn from_object(obj: &Object) -> Result<ToolChangeLine, FieldError> {
        let f = Fields::new(obj, "");
        let change = f.str("change")?;
        let action = match f.str("action")? {
            "withheld" => ToolChangeAction::Withheld,
            "shown" => ToolChangeAction::Shown,
            other => return Err(tag_err("action", other)),
        };
        Ok(ToolChangeLine {
            tool_id: f.string("tool_id")?,
            change: ToolChangeKind::of_token(change).ok_or_else(|| tag_err("change", change))?,
            fields: match obj.get("fields") {
                None => Vec::new(),
                Some(_) => f.strings("fields")?,
            },
            pinned_digest: f.opt_hex("pinned_digest", DefinitionDigest::from_hex)?,
            listed_digest: f.opt_hex("listed_digest", DefinitionDigest::from_hex)?,
            action,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_outcome() -> OutcomeLine {
        OutcomeLine {
            stop: None,
            call_id: "c".into(),
            tool_id: "t".into(),
            request_digest: RequestDigest::of_request(b"req"),
            policy_set_hash: PolicySetHash::of_canonical_set(b"{}"),
            policy: PolicyOutcome::Allowed,
            capability: CapabilityOutcome::Granted {
                grant: CapabilityGrant {
                    grant_id: "g".into(),
                    tool_id: "t".into(),
                    fs: Some(FsScope {
                        read_paths: vec!["/data".into()],
                        write_paths: vec![],
                    }),
                    net: Some(NetScope {
                        http: vec![HttpRule {
                            host: "example.test".into(),
                            ports: vec![443],
                            methods: vec!["GET".into()],
                        }],
                    }),
                    max_memory_bytes: SafeInt::from(1u32 << 20),
                    max_wall_ms: SafeInt::from(100u32),
                    max_output_bytes: SafeInt::from(4096u32),
                    component_digest: Some(ComponentDigest::of_component(b"\0asm")),
                },
            },
            execution: ExecutionOutcome::Success,
            grant_id: Some("g".into()),
            response_digest: Some(ResponseDigest::of_response(b"ok")),
            wall_ms: Some(SafeInt::from(3u32)),
            peak_memory_bytes: Some(SafeInt::from(65536u32)),
            decision_axes: DecisionAxes {
                capability: Some("fs.read".into()),
                fs: Some(FsAxis {
                    path_raw: "./data".into(),
                    path_canonical: "/data".into(),
                }),
                net: Some(NetAxis {
                    host: "example.test".into(),
                    port: 443,
                }),
                ..DecisionAxes::default()
            },
        }
    }

    #[test]
    fn outcome_round_trips() {
        let o = sample_outcome();
        assert_eq!(OutcomeLine::from_object(&o.to_object()).unwrap(), o);
    }

    #[test]
    fn bound_and_call_arguments_round_trip() {
        let mut o = sample_outcome();
        o.decision_axes.bound = Some(BoundArguments {
            names: vec!["/opts/dest".into(), "path".into()],
            values: r#"{"path":"../secret.txt"}"#.into(),
        });
        o.decision_axes.call_arguments = Some(r#"{"mode":-1,"path":"../secret.txt"}"#.into());
        let obj = o.to_object();
        let axes = obj.get("decision_axes").and_then(Value::as_object).unwrap();
        let bound = axes.get("bound").and_then(Value::as_object).unwrap();
        assert_eq!(
            bound.get("values").and_then(Value::as_str),
            Some(r#"{"path":"../secret.txt"}"#)
        );
        assert_eq!(OutcomeLine::from_object(&obj).unwrap(), o);
    }

    #[test]
    fn empty_axes_serialize_as_empty_object() {
        let mut o = sample_outcome();
        o.decision_axes = DecisionAxes::default();
        let obj = o.to_object();
        assert_eq!(
            obj.get("decision_axes"),
            Some(&Value::Object(Object::new()))
        );
    }

    #[test]
    fn decision_round_trips() {
        for verdict in [
            DecisionVerdict::Approved {
                scope: ApprovalScope {
                    tool_id: "t".into(),
                    arguments_digest: None,
                    fs: None,
                    net: None,
                    expires_at: None,
                },
            },
            DecisionVerdict::Approved {
                scope: ApprovalScope {
                    tool_id: "t".into(),
                    arguments_digest: Some(ArgumentsDigest::of_canonical_arguments(b"{}")),
                    fs: Some(FsScope {
                        read_paths: vec!["/srv".into()],
                        write_paths: vec![],
                    }),
                    net: Some(NetScope::default()),
                    expires_at: Some("2026-12-05T06:00:00.000000Z".into()),
                },
            },
            DecisionVerdict::Denied {
                reason: "no".into(),
            },
        ] {
            let d = DecisionLine {
                approval_id: "a".into(),
                approver: Some(crate::approval::sign(
                    &crate::SigningKey::from_seed([1; 32]),
                    "a",
                    &verdict,
                )),
                verdict,
            };
            assert_eq!(DecisionLine::from_object(&d.to_object()).unwrap(), d);
        }
    }

    #[test]
    fn an_expiry_not_in_the_one_time_form_is_refused() {
        let mut scope = Object::new();
        scope.insert("tool_id", "t");
        scope.insert("expires_at", "2026-12-05T06:00:00Z");
        assert!(matches!(
            ApprovalScope::from_object(&scope, "verdict.scope"),
            Err(FieldError::Domain { field, .. }) if field == "verdict.scope.expires_at"
        ));
    }

    #[test]
    fn tool_change_round_trips_and_refuses_unknown_tags() {
        let digest = |b: u8| Some(DefinitionDigest::from_bytes([b; 32]));
        for change in ToolChangeKind::ALL {
            for action in [ToolChangeAction::Withheld, ToolChangeAction::Shown] {
                let line = ToolChangeLine {
                    tool_id: "read".into(),
                    change,
                    fields: if change == ToolChangeKind::Changed {
                        vec!["description".into(), "inputSchema".into()]
                    } else {
                        Vec::new()
                    },
                    pinned_digest: digest(1),
                    listed_digest: digest(2),
                    action,
                };
                let obj = line.to_object();
                assert_eq!(ToolChangeLine::from_object(&obj).unwrap(), line);
                assert_eq!(obj.contains_key("fields"), !line.fields.is_empty());
            }
        }
        let mut obj = ToolChangeLine {
            tool_id: "t".into(),
            change: ToolChangeKind::Added,
            fields: Vec::new(),
            pinned_digest: None,
            listed_digest: digest(3),
            action: ToolChangeAction::Withheld,
        }
        .to_object();
        obj.insert("action", "hidden");
        assert_eq!(
            ToolChangeLine::from_object(&obj).unwrap_err().to_string(),
            "action: unknown value \"hidden\""
        );
        obj.insert("action", "shown");
        obj.insert("listed_digest", "ABC");
        assert!(
            ToolChangeLine::from_object(&obj)
                .unwrap_err()
                .to_string()
                .starts_with("listed_digest: ")
        );
    }

    #[test]
    fn field_errors_name_the_member_path() {
        let mut obj = sample_outcome().to_object();
        let mut policy = Object::new();
        policy.insert("status", "denied");
        obj.insert("policy", policy);
        assert_eq!(
            OutcomeLine::from_object(&obj).unwrap_err().to_string(),
            "policy.reason: missing"
        );
    }
}
