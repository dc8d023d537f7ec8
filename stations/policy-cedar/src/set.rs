//! The parsed policy set: Cedar policies and a Cedar schema in, a validated,
//! immutable set out.
//!
//! # Guarantees
//! - The schema parses and the policies validate against it in Cedar's strict mode, or
//!   the load is refused with one line: `<file>:<line>: <what>`. The line is Cedar's
//!   own for syntax and validation errors; for this station's annotation errors it is
//!   the line the policy starts on.
//! - The schema models what the host asks: an action `"call"` whose principals include
//!   `Role` and whose resources include `Tool` (unnamespaced). A schema without it is
//!   refused, since no request this station builds would fit it.
//! - Every annotation is read or refused: a misspelt `@rate_limt` is an error, never a
//!   permit without its limit. Restricting annotations on a `forbid` are refused.
//! - Policy ids are unique: `@id("…")` replaces Cedar's positional `policyN`, and a
//!   clash between any two ids is refused.
//! - The policy set hash covers the parsed set, not the text (see [`CedarSet::hash`]):
//!   whitespace and comments do not move it; any change to a policy, an annotation or
//!   the schema does.
//!
//! # Limits
//! - [`MAX_TEXT_BYTES`] (16 MiB) of policy text and of schema text; more is refused.
//!
//! # Non-guarantees
//! - Cedar templates (policies with `?principal` / `?resource` slots) are refused, not
//!   linked: a profile has nowhere to link them.
//! - Validation is of the policies against the schema. The requests built at run time
//!   are not validated against it: a call's arguments have whatever shape the caller
//!   sent, and an attribute the schema does not declare is simply there (or not).

use aegis_record::PolicySetHash;
use aegis_station_api::abi_stable::std_types::{RArc, RString, RVec};
use aegis_station_api::{DecisionTable, NarrowingLimits};
use cedar_policy::{
    Effect, Entities, EntityTypeName, EntityUid, Policy, PolicyId, PolicySet, Schema,
    SchemaFragment, ValidationMode, Validator,
};
use miette::Diagnostic;
use std::collections::HashMap;
use std::str::FromStr;

/// The largest policy text and the largest schema text read, in bytes (16 MiB each).
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// The entity type of the principal: the caller's role.
pub const ROLE_TYPE: &str = "Role";
/// The entity type of the resource: the tool called.
pub const TOOL_TYPE: &str = "Tool";
/// The action id asked for an axis that names no capability.
pub const CALL_ACTION: &str = "call";

/// Names the form [`CedarSet::hash`] covers; changes whenever that form does.
pub const HASH_FORMAT: &str = "aegis-policy-cedar/1";

/// The annotations this station reads; any other is refused.
pub const ANNOTATIONS: [&str; 7] = [
    "id",
    "reason",
    "rate_limit",
    "pending_approval",
    "max_wall_ms",
    "max_memory_bytes",
    "max_output_bytes",
];

/// A load error: one line, `<file>:<line>: <what>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct LoadError {
    /// The file at fault (the policies or the schema).
    pub file: String,
    /// 1-based line (0 when the whole file is at fault).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Something a valid set says that may not do what its author expects (Cedar's
/// validation and schema warnings); loading goes on. One line,
/// `<file>:<line>: warning: <what>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: warning: {message}")]
pub struct LoadWarning {
    /// The file.
    pub file: String,
    /// 1-based line (0 when not known).
    pub line: usize,
    /// What may not hold.
    pub message: String,
}

/// A `@rate_limit`: at most `max` calls per `per_seconds` (the station API's one type).
pub use aegis_station_api::Rate;

/// What this station reads from one policy beside Cedar's own meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyMeta {
    /// `@id`, else Cedar's positional id (`policy0`, …).
    pub id: String,
    /// Permit or forbid.
    pub forbid: bool,
    /// `@rate_limit`, on a permit.
    pub rate: Option<Rate>,
    /// `@pending_approval`, on a permit: a satisfied permit parks the call.
    pub pending_approval: bool,
    /// `@max_*` ceilings, on a permit.
    pub limits: NarrowingLimits,
    /// The line the policy starts on.
    pub line: usize,
}

/// Positions of the reasons every set shares, in each set's [`DecisionTable`].
pub(crate) mod reason {
    /// No permit is satisfied: Cedar's default deny.
    pub const NO_PERMIT: u32 = 0;
    /// The call's arguments cannot be given to Cedar (not an object, too deep).
    pub const BAD_ARGUMENTS: u32 = 1;
    /// The request could not be built.
    pub const BAD_REQUEST: u32 = 2;
    /// A policy that applies reads arguments that are unknown or cannot be compared.
    pub const ARGUMENTS_UNKNOWN: u32 = 3;
    /// The fixed texts, in position order.
    pub(super) const FIXED: [&str; 4] = [
        "no policy permits the call; Cedar's default is deny",
        "the call's arguments cannot be given to Cedar, so the call is refused",
        "the request cannot be put to Cedar, so the call is refused",
        "refused: a policy that applies reads the call's arguments, which are unknown or \
         cannot be compared (a path with no normal form, a key another key folds to)",
    ];
}

/// Per policy, the positions in the table of the reason recorded when it decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reasons {
    /// The policy decided (a forbid refused, a permit allowed or parked).
    pub decided: u32,
    /// A rate-limited permit whose bucket is empty.
    pub over_limit: u32,
    /// The policy failed to evaluate (a missing attribute, a type error).
    pub error: u32,
}

/// A parsed, validated, immutable Cedar policy set with its schema.
#[derive(Debug)]
pub struct CedarSet {
    policies: PolicySet,
    /// The scope of every policy whose conditions read `context.arguments`, as a permit
    /// with no conditions (same id): asked when the arguments are not known, to find
    /// a policy that might have decided otherwise. `None` when no policy reads them.
    argument_scopes: Option<PolicySet>,
    /// By position: sorted by id. A policy's position is its position in the table.
    meta: Vec<PolicyMeta>,
    positions: HashMap<PolicyId, u32>,
    reasons: Vec<Reasons>,
    /// The schema's action entities, so `action in Action::"…"` sees its groups.
    entities: Entities,
    table: RArc<DecisionTable>,
    hash: PolicySetHash,
    warnings: Vec<LoadWarning>,
}

fn err(file: &str, line: usize, message: impl Into<String>) -> LoadError {
    LoadError {
        file: file.to_owned(),
        line,
        message: one_line(&message.into()),
    }
}

/// Keeps a message on one line: line breaks and other controls become spaces or
/// escapes, so a policy text cannot forge a second diagnostic line.
fn one_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    // An offset inside a character counts the line it is on.
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of a Cedar diagnostic's first labelled span in `text`, or 0.
fn diagnostic_line(d: &dyn Diagnostic, text: &str) -> usize {
    d.labels()
        .and_then(|mut l| l.next())
        .map_or(0, |l| line_at(text, l.offset()))
}

/// A Cedar diagnostic as one line: its message and, when it has one, its help.
fn diagnostic_message(d: &dyn Diagnostic) -> String {
    let mut m = d.to_string();
    if let Some(help) = d.help() {
        m.push_str(" (");
        m.push_str(&help.to_string());
        m.push(')');
    }
    m
}

impl CedarSet {
    /// Parses and validates `policies` (named `policies_file` in errors) against
    /// `schema` (named `schema_file`).
    ///
    /// # Errors
    /// The first problem found, naming its file and line.
    pub fn parse(
        policies: &str,
        policies_file: &str,
        schema: &str,
        schema_file: &str,
    ) -> Result<CedarSet, LoadError> {
        for (text, file) in [(policies, policies_file), (schema, schema_file)] {
            if text.len() > MAX_TEXT_BYTES {
                return Err(err(
                    file,
                    0,
                    format!(
                        "{} bytes, more than the {MAX_TEXT_BYTES}-byte limit",
                        text.len()
                    ),
                ));
            }
        }
        let mut warnings = Vec::new();
        let (cedar_schema, schema_json) = load_schema(schema, schema_file, &mut warnings)?;
        let parsed = static_policies(policies, policies_file)?;
        let metas = named_policies(&parsed, policies, policies_file)?;
        let set = PolicySet::from_policies(metas.iter().map(|(_, p)| p.clone()))
            .map_err(|e| err(policies_file, 0, e.to_string()))?;
        validate(&set, &cedar_schema, policies, policies_file, &mut warnings)?;
        let entities = cedar_schema
            .action_entities()
            .map_err(|e| err(schema_file, 0, format!("schema: actions: {e}")))?;

        let argument_scopes =
            argument_scopes(metas.iter().map(|(_, p)| p)).map_err(|e| err(policies_file, 0, e))?;
        let hash = hash_of(&metas, schema_json, policies_file)?;
        let (table, reasons) = build_table(&metas);
        let positions = metas
            .iter()
            .enumerate()
            .map(|(i, (m, _))| (PolicyId::new(&m.id), position(i)))
            .collect();
        Ok(CedarSet {
            policies: set,
            argument_scopes,
            meta: metas.into_iter().map(|(m, _)| m).collect(),
            positions,
            reasons,
            entities,
            table,
            hash,
            warnings,
        })
    }

    /// The scopes of the policies that read `context.arguments`, as condition-free
    /// permits with the same ids; `None` when no policy reads them.
    pub fn argument_scopes(&self) -> Option<&PolicySet> {
        self.argument_scopes.as_ref()
    }

    /// SHA-256 of the canonical form of the parsed set: RFC 8785 canonical JSON of
    /// `{"format": HASH_FORMAT, "policies": [{"id", "policy"}…], "schema"}`, where
    /// `policies` is sorted by id and each `policy` is Cedar's JSON form of it (its
    /// annotations included), and `schema` is Cedar's JSON form of the schema.
    pub fn hash(&self) -> PolicySetHash {
        self.hash
    }

    /// Cedar's and the schema's warnings, for the operator.
    pub fn warnings(&self) -> &[LoadWarning] {
        &self.warnings
    }

    /// What the station reads from each policy, sorted by id (a policy's position here
    /// is its position in [`CedarSet::decision_table`]).
    pub fn policies(&self) -> &[PolicyMeta] {
        &self.meta
    }

    /// The rule ids (policy ids, sorted) and reasons this set's decisions name. Built
    /// once at load; shared, not copied, by each answer.
    pub fn decision_table(&self) -> &RArc<DecisionTable> {
        &self.table
    }

    pub(crate) fn cedar(&self) -> &PolicySet {
        &self.policies
    }

    pub(crate) fn entities(&self) -> &Entities {
        &self.entities
    }

    pub(crate) fn position(&self, id: &PolicyId) -> Option<u32> {
        self.positions.get(id).copied()
    }

    pub(crate) fn reasons(&self, position: u32) -> Option<Reasons> {
        self.reasons.get(position as usize).copied()
    }
}

// Positions fit in u32: a set holds at most MAX_TEXT_BYTES of text, and each policy
// takes more than one byte.
fn position(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Refuses a schema in which the station's requests do not fit.
fn check_model(schema: &Schema, file: &str) -> Result<(), LoadError> {
    let call = action_uid(CALL_ACTION);
    let named = |mut it: Box<dyn Iterator<Item = &EntityTypeName> + '_>, want: &str| {
        it.any(|t| t.to_string() == want)
    };
    let principals = schema
        .principals_for_action(&call)
        .map(|i| named(Box::new(i), ROLE_TYPE));
    let resources = schema
        .resources_for_action(&call)
        .map(|i| named(Box::new(i), TOOL_TYPE));
    match (principals, resources) {
        (Some(true), Some(true)) => Ok(()),
        (None, _) | (_, None) => Err(err(
            file,
            0,
            format!(
                "schema: no action \"{CALL_ACTION}\"; this station asks `{ROLE_TYPE}` × `Action::\"{CALL_ACTION}\"` × `{TOOL_TYPE}` (see the crate README)"
            ),
        )),
        _ => Err(err(
            file,
            0,
            format!(
                "schema: action \"{CALL_ACTION}\" must apply to principal {ROLE_TYPE} and resource {TOOL_TYPE}"
            ),
        )),
    }
}

/// The uid `Action::"id"`.
pub(crate) fn action_uid(id: &str) -> EntityUid {
    entity_uid(&ACTION_TYPE, id)
}

pub(crate) fn entity_uid(ty: &EntityTypeName, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(ty.clone(), cedar_policy::EntityId::new(id))
}

/// Entity type names, parsed once.
pub(crate) static ACTION_TYPE: std::sync::LazyLock<EntityTypeName> =
    std::sync::LazyLock::new(|| type_name("Action"));
pub(crate) static ROLE: std::sync::LazyLock<EntityTypeName> =
    std::sync::LazyLock::new(|| type_name(ROLE_TYPE));
pub(crate) static TOOL: std::sync::LazyLock<EntityTypeName> =
    std::sync::LazyLock::new(|| type_name(TOOL_TYPE));

fn type_name(name: &str) -> EntityTypeName {
    // The names are constants that parse; a failure is a bug caught by every test.
    EntityTypeName::from_str(name).expect("a constant entity type name parses")
}

/// The line each of `texts` (policy source texts, in source order) starts on in `src`.
fn policy_lines(src: &str, texts: impl Iterator<Item = String>) -> Vec<usize> {
    let mut cursor = 0;
    texts
        .map(|t| match src.get(cursor..).and_then(|rest| rest.find(&t)) {
            Some(at) => {
                let start = cursor + at;
                cursor = start + t.len();
                line_at(src, start)
            }
            None => 0,
        })
        .collect()
}

/// Reads and checks the station's annotations on one policy.
fn read_meta(policy: &Policy, line: usize, file: &str) -> Result<PolicyMeta, LoadError> {
    let forbid = policy.effect() == Effect::Forbid;
    let fail = |m: String| err(file, line, m);
    for (key, _) in policy.annotations() {
        if !ANNOTATIONS.contains(&key) {
            return Err(fail(format!(
                "@{key}: unknown annotation (this station reads @{})",
                ANNOTATIONS.join(", @")
            )));
        }
        if forbid && !matches!(key, "id" | "reason") {
            return Err(fail(format!(
                "@{key}: only a permit takes it; a forbid refuses outright"
            )));
        }
    }
    let id = match policy.annotation("id") {
        Some("") => return Err(fail("@id: empty".to_owned())),
        Some(id) => id.to_owned(),
        None => policy.id().to_string(),
    };
    if policy.annotation("reason") == Some("") {
        return Err(fail(format!("@reason: empty in policy {id:?}")));
    }
    let rate = policy
        .annotation("rate_limit")
        .map(|v| parse_rate(v).map_err(|m| fail(format!("@rate_limit: {m}"))))
        .transpose()?;
    let pending_approval = policy.annotation("pending_approval").is_some();
    if pending_approval && rate.is_some() {
        return Err(fail(format!(
            "policy {id:?}: @pending_approval and @rate_limit together; a permit either parks the call or counts it"
        )));
    }
    let ceiling = |key: &str| {
        policy
            .annotation(key)
            .map(|v| {
                v.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    fail(format!(
                        "@{key}: expected a whole number above 0, found {v:?}"
                    ))
                })
            })
            .transpose()
    };
    Ok(PolicyMeta {
        limits: NarrowingLimits {
            max_memory_bytes: ceiling("max_memory_bytes")?,
            max_wall_ms: ceiling("max_wall_ms")?,
            max_output_bytes: ceiling("max_output_bytes")?,
        },
        id,
        forbid,
        rate,
        pending_approval,
        line,
    })
}

/// `N/second`, `N/minute`, `N/hour`, `N/day` or `N/Ss` (a window of S seconds).
fn parse_rate(v: &str) -> Result<Rate, String> {
    let bad = || format!("expected N/second, N/minute, N/hour, N/day or N/<seconds>s, found {v:?}");
    let (max, per) = v.split_once('/').ok_or_else(bad)?;
    let max = max
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(bad)?;
    let per_seconds = match per.trim() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        s => s
            .strip_suffix('s')
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(bad)?,
    };
    Ok(Rate { max, per_seconds })
}

/// See [`CedarSet::hash`].
fn hash_of(
    metas: &[(PolicyMeta, Policy)],
    schema: serde_json::Value,
    file: &str,
) -> Result<PolicySetHash, LoadError> {
    let mut policies = Vec::with_capacity(metas.len());
    for (meta, policy) in metas {
        let json = policy
            .to_json()
            .map_err(|e| err(file, meta.line, format!("policy {:?}: {e}", meta.id)))?;
        policies.push(serde_json::json!({ "id": meta.id, "policy": json }));
    }
    let form = serde_json::json!({
        "format": HASH_FORMAT,
        "policies": policies,
        "schema": schema,
    });
    let canonical = serde_json_canonicalizer::to_vec(&form)
        .map_err(|e| err(file, 0, format!("canonical form: {e}")))?;
    Ok(PolicySetHash::of_canonical_set(&canonical))
}

/// The table of rule ids (in position order) and reasons, and each policy's reasons.
fn build_table(metas: &[(PolicyMeta, Policy)]) -> (RArc<DecisionTable>, Vec<Reasons>) {
    let mut texts: Vec<RString> = reason::FIXED.iter().map(|&r| r.into()).collect();
    let mut push = |text: String| {
        texts.push(text.into());
        position(texts.len() - 1)
    };
    let reasons = metas
        .iter()
        .map(|(m, p)| {
            let own = p.annotation("reason").map(str::to_owned);
            let decided = push(own.clone().unwrap_or_else(|| {
                if m.forbid {
                    format!("forbidden by policy {}", m.id)
                } else if m.pending_approval {
                    format!("needs a human's approval (policy {})", m.id)
                } else if m.rate.is_some() {
                    format!("within its rate limit (policy {})", m.id)
                } else {
                    format!("permitted by policy {}", m.id)
                }
            }));
            let over_limit = match m.rate {
                Some(r) => push(format!(
                    "rate limit: {} calls per {} s ({})",
                    r.max, r.per_seconds, m.id
                )),
                None => decided,
            };
            let error = push(format!(
                "policy {} failed to evaluate (a missing attribute or a type error), so the call is refused",
                m.id
            ));
            Reasons {
                decided,
                over_limit,
                error,
            }
        })
        .collect();
    let table = DecisionTable {
        rules: metas
            .iter()
            .map(|(m, _)| RString::from(m.id.as_str()))
            .collect(),
        reasons: RVec::from(texts),
    };
    (RArc::new(table), reasons)
}

/// The policies among `policies` whose conditions read the call's arguments, each as
/// a permit with its scope and no conditions, under its own id. A policy reads them
/// when the JSON form of its conditions names `arguments` anywhere (a string literal
/// `"arguments"` counts too: the test errs toward asking).
fn argument_scopes<'p>(
    policies: impl Iterator<Item = &'p Policy>,
) -> Result<Option<PolicySet>, String> {
    let mut scopes = Vec::new();
    for policy in policies {
        let mut json = policy
            .to_json()
            .map_err(|e| format!("policy {}: {e}", policy.id()))?;
        let Some(fields) = json.as_object_mut() else {
            continue;
        };
        let reads = fields
            .get("conditions")
            .is_some_and(|c| c.to_string().contains("\"arguments\""));
        if !reads {
            continue;
        }
        fields.insert("effect".into(), serde_json::Value::from("permit"));
        fields.insert("conditions".into(), serde_json::Value::Array(Vec::new()));
        fields.remove("annotations");
        let scope = Policy::from_json(Some(policy.id().clone()), json)
            .map_err(|e| format!("policy {}: its scope: {e}", policy.id()))?;
        scopes.push(scope);
    }
    if scopes.is_empty() {
        return Ok(None);
    }
    PolicySet::from_policies(scopes)
        .map(Some)
        .map_err(|e| format!("the scopes of the policies that read arguments: {e}"))
}
/// The schema twice: once as Cedar's validator takes it, once as the fragment whose
/// JSON form the policy set's hash covers; its warnings added to `warnings`.
fn load_schema(
    schema: &str,
    schema_file: &str,
    warnings: &mut Vec<LoadWarning>,
) -> Result<(Schema, serde_json::Value), LoadError> {
    let (fragment, schema_warnings) =
        SchemaFragment::from_cedarschema_str(schema).map_err(|e| {
            err(
                schema_file,
                diagnostic_line(&e, schema),
                format!("schema: {}", diagnostic_message(&e)),
            )
        })?;
    for w in schema_warnings {
        warnings.push(LoadWarning {
            file: schema_file.to_owned(),
            line: diagnostic_line(&w, schema),
            message: one_line(&diagnostic_message(&w)),
        });
    }
    let schema_json = fragment
        .to_json_value()
        .map_err(|e| err(schema_file, 0, format!("schema: {e}")))?;
    let (cedar_schema, _) = Schema::from_cedarschema_str(schema).map_err(|e| {
        err(
            schema_file,
            diagnostic_line(&e, schema),
            format!("schema: {}", diagnostic_message(&e)),
        )
    })?;
    check_model(&cedar_schema, schema_file)?;

    Ok((cedar_schema, schema_json))
}

/// The policies as Cedar parses them; a template (`?principal`, `?resource`) is
/// refused at its line: this station takes only static policies.
fn static_policies(policies: &str, policies_file: &str) -> Result<PolicySet, LoadError> {
    let parsed = PolicySet::from_str(policies).map_err(|e| {
        err(
            policies_file,
            diagnostic_line(&e, policies),
            diagnostic_message(&e),
        )
    })?;
    if let Some(t) = parsed.templates().next() {
        let line = policy_lines(policies, std::iter::once(t.to_string()))
            .first()
            .copied()
            .unwrap_or(0);
        return Err(err(
            policies_file,
            line,
            "a template (a policy with ?principal or ?resource); this station takes only static policies",
        ));
    }

    Ok(parsed)
}

/// Each policy with what this station reads from it ([`PolicyMeta`]), renamed to its
/// `@id`, sorted by id; a duplicate id is refused at its line.
fn named_policies(
    parsed: &PolicySet,
    policies: &str,
    policies_file: &str,
) -> Result<Vec<(PolicyMeta, Policy)>, LoadError> {
    // Cedar names policies `policy0`, `policy1`, … in source order; the lines are
    // found by walking the text in that order.
    let mut in_order: Vec<(usize, &Policy)> = parsed
        .policies()
        .map(|p| {
            let n = p
                .id()
                .to_string()
                .strip_prefix("policy")
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(usize::MAX);
            (n, p)
        })
        .collect();
    in_order.sort_by_key(|&(n, _)| n);
    let lines = policy_lines(policies, in_order.iter().map(|(_, p)| p.to_string()));

    let mut metas: Vec<(PolicyMeta, Policy)> = Vec::with_capacity(in_order.len());
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(in_order.len());
    for (i, (_, policy)) in in_order.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(0);
        let meta = read_meta(policy, line, policies_file)?;
        if let Some(first) = seen.insert(meta.id.clone(), line) {
            return Err(err(
                policies_file,
                line,
                format!(
                    "@id: duplicate policy id {:?} (first at line {first})",
                    meta.id
                ),
            ));
        }
        let renamed = policy.new_id(PolicyId::new(&meta.id));
        metas.push((meta, renamed));
    }
    metas.sort_by(|a, b| a.0.id.cmp(&b.0.id));

    Ok(metas)
}

/// Strict validation against the schema: the first error refuses the set, warnings are
/// added to `warnings`.
fn validate(
    set: &PolicySet,
    cedar_schema: &Schema,
    policies: &str,
    policies_file: &str,
    warnings: &mut Vec<LoadWarning>,
) -> Result<(), LoadError> {
    let validation = Validator::new(cedar_schema.clone()).validate(set, ValidationMode::Strict);
    if let Some(e) = validation.validation_errors().next() {
        return Err(err(
            policies_file,
            diagnostic_line(e, policies),
            format!(
                "does not validate against the schema: {}",
                diagnostic_message(e)
            ),
        ));
    }
    for w in validation.validation_warnings() {
        warnings.push(LoadWarning {
            file: policies_file.to_owned(),
            line: diagnostic_line(w, policies),
            message: one_line(&diagnostic_message(w)),
        });
    }
    Ok(())
}
