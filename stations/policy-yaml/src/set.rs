//! The parsed policy set: version-1 YAML in, an immutable rule set out.
//!
//! # Guarantees
//! - Every error names the file, the line and the field: unknown fields, duplicate ids,
//!   a `rate` block on the wrong action or with a zero, a missing `rate` on `rate_limit`.
//! - Resolution never depends on file order except as the last tie-break: any matching
//!   deny wins; otherwise the most specific rule (most constrained axes), then the
//!   highest priority, then the earliest; no match is the set's default.
//! - The policy set hash covers the parsed set, not the text: reindenting, reordering
//!   mapping keys or rewriting `"*"` as an omitted axis keeps the hash; any change the
//!   evaluator reads moves it.
//! - One document per file: a second YAML document (after `---` or `...`) is refused
//!   with the line it starts on, never silently dropped. YAML syntax errors carry the
//!   line the parser stopped on.
//! - Loading is linear in the file: one YAML parse, one pass over the rules, duplicate
//!   ids found through a hash map. A second, event-only parse runs only when a line
//!   starts with `---` or `...` after the first (to find a second document exactly).
//! - A rule that restricts (deny, rate_limit, pending_approval) and names a `role` is
//!   loaded with a [`PolicyWarning`]: the role is what the caller asserts, so a caller
//!   who omits or changes it is not matched by that rule.
//!
//! # Limits
//! - [`MAX_POLICY_BYTES`] (16 MiB) of text and [`MAX_RULES`] (262,144) rules; more is
//!   refused with an error naming the limit. Time per rule is flat from 1k to 200k
//!   rules; 200,000 rules (14 MB) took 4.5 s in a release build on a heavily loaded
//!   2-core machine (`benches/policy_load.rs`, `benches/results/policy.md`).
//!
//! # Non-guarantees
//! - Roles are self-asserted: nothing here authenticates a role. Rules keyed on role
//!   sort cooperating callers; they do not confine a hostile one.
//! - Selecting the rule for a call looks at the rules naming that tool and the rules
//!   naming no tool (an index built once at load, in precedence order) and stops at the
//!   first that matches: a call that many tool-less rules fail to match still costs
//!   what scanning them costs.

use crate::arguments::{self, ArgumentMatcher, CallArguments, Fit, Matcher};
use aegis_record::PolicySetHash;
use aegis_record::json::{Object, Value, quote};
use aegis_station_api::abi_stable::std_types::{RArc, RString, RVec};
use aegis_station_api::{DecisionTable, NarrowingLimits};
use marked_yaml::LoadError;
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, Node};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// The largest policy file read, in bytes (16 MiB).
pub const MAX_POLICY_BYTES: usize = 16 << 20;

/// The most rules one policy set holds (2^18).
pub const MAX_RULES: usize = 1 << 18;

/// What a rule does when it is selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The call proceeds to the capability station.
    Allow,
    /// The call is refused.
    Deny,
    /// The call proceeds while the rule's token bucket has a token, and is refused after.
    RateLimit,
    /// The call is refused with an approval id a human can answer.
    PendingApproval,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::RateLimit => "rate_limit",
            Action::PendingApproval => "pending_approval",
        }
    }
}

/// A `rate` block: at most `max` calls per `per_seconds` (the station API's one type).
pub use aegis_station_api::Rate;

/// One rule. An axis of `None` matches anything; a named axis matches only a request
/// that names the same value (a rule on `role` never matches a call that claims none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Unique within the set.
    pub id: String,
    /// What it does.
    pub action: Action,
    /// Tool axis.
    pub tool: Option<String>,
    /// Capability axis.
    pub capability: Option<String>,
    /// Role axis.
    pub role: Option<String>,
    /// Tie-break among equally specific rules; higher wins.
    pub priority: i64,
    /// Why, for the record.
    pub reason: Option<String>,
    /// With `rate_limit` only.
    pub rate: Option<Rate>,
    /// Ceilings; each only narrows a grant.
    pub limits: NarrowingLimits,
    /// Matchers over the call's arguments, sorted by name; all must hold.
    pub arguments: Vec<ArgumentMatcher>,
    /// The line the rule starts on, for messages.
    pub line: usize,
}

impl Rule {
    /// Each named axis and each argument matcher counts one.
    fn specificity(&self) -> usize {
        [&self.tool, &self.capability, &self.role]
            .iter()
            .filter(|a| a.is_some())
            .count()
            + self.arguments.len()
    }

    /// Whether the rule can allow a call (so an unknown argument must not select it).
    pub fn can_allow(&self) -> bool {
        matches!(self.action, Action::Allow | Action::RateLimit)
    }

    fn matches(&self, tool: &str, capability: &str, role: &str, args: &CallArguments) -> bool {
        axis_matches(&self.tool, tool)
            && self.matches_beyond_tool(capability, role)
            && arguments::fit(&self.arguments, args, &mut serde_json::Map::new()) != Fit::NoMatch
    }

    /// [`Rule::matches`] for a rule whose tool axis is already known to match.
    fn matches_beyond_tool(&self, capability: &str, role: &str) -> bool {
        axis_matches(&self.capability, capability) && axis_matches(&self.role, role)
    }
}

fn axis_matches(rule: &Option<String>, asked: &str) -> bool {
    match rule {
        None => true,
        Some(want) => !asked.is_empty() && want == asked,
    }
}

/// A parsed, validated, immutable policy set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySet {
    /// What happens when no rule matches.
    pub default: Action,
    /// The rules, in file order. Private so the index built from them cannot go stale.
    rules: Vec<Rule>,
    /// Which rules can match each tool, built once at load.
    index: RuleIndex,
    /// The rule ids and reasons decisions name, built once at load.
    names: Names,
    /// Some rule has argument matchers.
    reads_arguments: bool,
    hash: PolicySetHash,
    warnings: Vec<PolicyWarning>,
}

/// Positions of the reasons every set shares, in each set's [`DecisionTable`].
pub(crate) mod reason {
    /// No rule matched and the default is deny.
    pub const DEFAULT_DENY: u32 = 0;
    /// No rule matched and the default is allow.
    pub const DEFAULT_ALLOW: u32 = 1;
    /// A rule that can allow needed arguments it could not compare.
    pub const ARGUMENTS_UNKNOWN: u32 = 6;
    /// The fixed texts, in position order.
    pub(super) const FIXED: [&str; 7] = [
        "no rule matched; the policy's default is deny",
        "no rule matched; the policy's default is allow",
        "allowed by rule",
        "denied by rule",
        "needs a human's approval",
        "within its rate limit",
        "refused: the rule that would decide compares arguments that are missing, \
         relative or of another type",
    ];
}

/// What a set's decisions name, built once when it is parsed: the [`DecisionTable`]
/// (every rule id, in file order, so a rule's position in the set is its position in
/// the table; the fixed reasons, then each reason a rule brings) and, per rule, the
/// position of its reason when it is selected and, for a rate_limit rule, when its
/// bucket is empty. So deciding a call builds no string, and the answer shares the
/// table instead (benches/results/pipeline.md, run 8).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Names {
    table: RArc<DecisionTable>,
    /// Per rule: `[selected, over its rate limit]`.
    reasons: Box<[[u32; 2]]>,
}

impl Names {
    fn build(rules: &[Rule]) -> Names {
        let mut reasons: Vec<RString> = reason::FIXED.iter().map(|&r| r.into()).collect();
        // MAX_RULES (2^18) rules bring at most two reasons each: positions fit in u32.
        let mut push = |text: String| {
            reasons.push(text.into());
            u32::try_from(reasons.len() - 1).expect("MAX_RULES keeps positions within u32")
        };
        let per_rule = rules
            .iter()
            .map(|rule| {
                if let Some(own) = &rule.reason {
                    let at = push(own.clone());
                    return [at, at];
                }
                let fixed = match rule.action {
                    Action::Allow => 2,
                    Action::Deny => 3,
                    Action::PendingApproval => 4,
                    Action::RateLimit => 5,
                };
                let over = match rule.rate {
                    Some(rate) if rule.action == Action::RateLimit => push(format!(
                        "rate limit: {} calls per {} s ({})",
                        rate.max, rate.per_seconds, rule.id
                    )),
                    _ => fixed,
                };
                [fixed, over]
            })
            .collect();
        Names {
            table: RArc::new(DecisionTable {
                rules: rules.iter().map(|r| RString::from(r.id.as_str())).collect(),
                reasons: RVec::from(reasons),
            }),
            reasons: per_rule,
        }
    }
}

/// The rules that can match a call, by the tool it names: each tool named by some rule
/// maps to that tool's rules with the rules that name no tool merged in; any other tool
/// gets the rules that name no tool. Each list is in precedence order — deny first, then
/// the most specific, then the highest priority, then file order — so the first rule in
/// it that matches is the one the linear scan would select, and selecting stops there.
/// Built once when the set is parsed.
///
/// Every candidate is still checked on its other axes (the lookup has matched its tool),
/// so the index decides nothing itself: it only skips rules whose tool axis cannot match
/// and orders the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct RuleIndex {
    /// Positions in `rules`, in precedence order, for each tool a rule names.
    by_tool: HashMap<String, Box<[u32]>, BuildHasherDefault<ToolHasher>>,
    /// Positions of the rules that name no tool, in precedence order.
    any_tool: Box<[u32]>,
}

/// A rule's place in the order [`best_of`] picks by: larger wins; among equals, the
/// earlier position (compared separately) wins.
fn precedence(rule: &Rule) -> (bool, usize, i64) {
    (
        rule.action == Action::Deny,
        rule.specificity(),
        rule.priority,
    )
}

impl RuleIndex {
    fn build(rules: &[Rule]) -> RuleIndex {
        // MAX_RULES (2^18) keeps every position within u32.
        let pos = |i: usize| u32::try_from(i).expect("MAX_RULES fits in u32");
        // Descending precedence, then ascending position: a total order on positions.
        let before = |a: u32, b: u32| {
            let (ra, rb) = (&rules[a as usize], &rules[b as usize]);
            precedence(rb).cmp(&precedence(ra)).then(a.cmp(&b))
        };
        let mut any_tool: Vec<u32> = (0..rules.len())
            .filter(|&i| rules[i].tool.is_none())
            .map(pos)
            .collect();
        any_tool.sort_by(|&a, &b| before(a, b));
        let mut by_tool: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, rule) in rules.iter().enumerate() {
            if let Some(tool) = &rule.tool {
                by_tool.entry(tool.clone()).or_default().push(pos(i));
            }
        }
        let by_tool = by_tool
            .into_iter()
            .map(|(tool, mut own)| {
                own.sort_by(|&a, &b| before(a, b));
                // Two lists in the same total order merged stay in it.
                let mut merged = Vec::with_capacity(own.len() + any_tool.len());
                let (mut a, mut b) = (own.iter().peekable(), any_tool.iter().peekable());
                loop {
                    let next = match (a.peek(), b.peek()) {
                        (Some(&&x), Some(&&y)) if before(x, y).is_lt() => a.next(),
                        (Some(_), Some(_)) => b.next(),
                        (Some(_), None) => a.next(),
                        (None, Some(_)) => b.next(),
                        (None, None) => break,
                    };
                    merged.extend(next.copied());
                }
                (tool, merged.into_boxed_slice())
            })
            .collect();
        RuleIndex {
            by_tool,
            any_tool: any_tool.into_boxed_slice(),
        }
    }

    /// Positions of the rules that can match a call of `tool`, in precedence order: each
    /// names `tool` or no tool.
    fn candidates(&self, tool: &str) -> &[u32] {
        // A rule naming a tool never matches a call that names none (`Rule::matches`).
        if tool.is_empty() {
            return &self.any_tool;
        }
        self.by_tool.get(tool).unwrap_or(&self.any_tool)
    }
}

/// A word-at-a-time multiplicative hash for the tool index (the scheme of rustc's
/// `FxHasher`), cheaper per call than SipHash. Flooding resistance is not needed here:
/// the keys are the tool ids the operator's policy names, fixed at load; a caller only
/// looks them up.
#[derive(Clone, Copy, Debug, Default)]
struct ToolHasher(u64);

impl ToolHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0xf135_7aea_2e62_a9c5);
    }
}

impl Hasher for ToolHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.add(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            // The length keeps "ab" and "ab\0" apart.
            self.add(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        // The multiply leaves the low bits weakest; the table picks buckets by them.
        self.0.rotate_left(26)
    }
}

/// Something a valid policy says that may not do what its author expects; loading goes
/// on. One line, `<file>:<line>: warning: <what>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: warning: {message}")]
pub struct PolicyWarning {
    /// The file.
    pub file: String,
    /// 1-based line of the rule.
    pub line: usize,
    /// What may not hold, naming the rule.
    pub message: String,
}

/// A policy file error: one line, `<file>:<line>: <field>: <what>`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}:{line}: {message}")]
pub struct PolicyError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the whole file is at fault).
    pub line: usize,
    /// What is wrong, naming the field.
    pub message: String,
}

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn err(&self, line: usize, message: impl fmt::Display) -> PolicyError {
        PolicyError {
            file: self.file.to_owned(),
            line,
            message: message.to_string(),
        }
    }
}

/// Keeps a message from the YAML loader on one line: controls and bidi characters
/// from the file become `\u{..}` escapes.
fn one_line(message: &str) -> String {
    message
        .chars()
        .map(|c| {
            let bidi = matches!(u32::from(c), 0x202a..=0x202e | 0x2066..=0x2069 | 0x200e | 0x200f | 0x061c);
            if c.is_control() || bidi {
                format!("\\u{{{:04x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn line_of(node: &Node) -> usize {
    node.span().start().map_or(0, |m| m.line())
}

fn key_line(key: &MarkedScalarNode) -> usize {
    key.span().start().map_or(0, |m| m.line())
}

/// Refuses any key of `map` not in `allowed`.
fn only(
    ctx: &Ctx<'_>,
    map: &MarkedMappingNode,
    what: &str,
    allowed: &[&str],
) -> Result<(), PolicyError> {
    for (key, _) in map.iter() {
        if !allowed.contains(&key.as_str()) {
            return Err(ctx.err(
                key_line(key),
                format!(
                    "{what}: unknown field {}, expected one of {}",
                    quote(key.as_str()),
                    allowed
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn scalar<'n>(
    ctx: &Ctx<'_>,
    node: &'n Node,
    field: &str,
) -> Result<&'n MarkedScalarNode, PolicyError> {
    node.as_scalar().ok_or_else(|| {
        ctx.err(
            line_of(node),
            format!("{field}: expected a value, found a mapping or list"),
        )
    })
}

fn string(ctx: &Ctx<'_>, node: &Node, field: &str) -> Result<String, PolicyError> {
    Ok(scalar(ctx, node, field)?.as_str().to_owned())
}

fn positive(ctx: &Ctx<'_>, node: &Node, field: &str) -> Result<u64, PolicyError> {
    match scalar(ctx, node, field)?.as_str().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ctx.err(
            line_of(node),
            format!("{field}: expected a whole number above 0"),
        )),
    }
}

fn axis(ctx: &Ctx<'_>, node: Option<&Node>, field: &str) -> Result<Option<String>, PolicyError> {
    match node {
        None => Ok(None),
        Some(n) => {
            let v = string(ctx, n, field)?;
            if v.is_empty() {
                return Err(ctx.err(
                    line_of(n),
                    format!("{field}: empty; omit it or write \"*\" to match anything"),
                ));
            }
            Ok((v != "*").then_some(v))
        }
    }
}

impl PolicySet {
    /// Parses version-1 policy YAML. `file` names it in errors.
    ///
    /// # Errors
    /// A [`PolicyError`] naming the line and field at fault.
    pub fn parse(text: &str, file: &str) -> Result<PolicySet, PolicyError> {
        let ctx = Ctx { file };
        if text.len() > MAX_POLICY_BYTES {
            return Err(ctx.err(
                0,
                format!(
                    "policy: {} bytes, more than the {MAX_POLICY_BYTES}-byte limit",
                    text.len()
                ),
            ));
        }
        let options = marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true);
        let root = marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
            ctx.err(
                load_error_line(&e),
                format!("not a policy document: {}", one_line(&e.to_string())),
            )
        })?;
        if let Some(line) = second_document(text) {
            return Err(ctx.err(
                line,
                "policy: a second YAML document; a policy file holds exactly one",
            ));
        }
        let top = root
            .as_mapping()
            .ok_or_else(|| ctx.err(line_of(&root), "expected a mapping at the top"))?;
        only(&ctx, top, "policy", &["version", "default", "rules"])?;

        let version = top
            .get_node("version")
            .ok_or_else(|| ctx.err(1, "version: missing (this reader knows version 1)"))?;
        if scalar(&ctx, version, "version")?.as_str() != "1" {
            return Err(ctx.err(line_of(version), "version: expected 1"));
        }
        let default = match top.get_node("default") {
            None => Action::Allow,
            Some(n) => match scalar(&ctx, n, "default")?.as_str() {
                "allow" => Action::Allow,
                "deny" => Action::Deny,
                other => {
                    return Err(ctx.err(
                        line_of(n),
                        format!("default: expected allow or deny, found {}", quote(other)),
                    ));
                }
            },
        };

        let mut rules: Vec<Rule> = Vec::new();
        if let Some(list) = top.get_node("rules") {
            let seq = list
                .as_sequence()
                .ok_or_else(|| ctx.err(line_of(list), "rules: expected a list of rules"))?;
            if seq.len() > MAX_RULES {
                return Err(ctx.err(
                    line_of(list),
                    format!(
                        "rules: {} rules, more than the limit of {MAX_RULES}",
                        seq.len()
                    ),
                ));
            }
            rules.reserve(seq.len());
            // Each id's first line: one lookup per rule keeps loading linear.
            let mut seen: HashMap<String, usize> = HashMap::with_capacity(seq.len());
            for node in seq.iter() {
                let rule = parse_rule(&ctx, node)?;
                if let Some(first) = seen.insert(rule.id.clone(), rule.line) {
                    return Err(ctx.err(
                        rule.line,
                        format!(
                            "id: duplicate id {} (first at line {first})",
                            quote(&rule.id),
                        ),
                    ));
                }
                rules.push(rule);
            }
        }
        let hash = PolicySetHash::of_canonical_set(&projection(default, &rules).to_canonical());
        let warnings = rules.iter().filter_map(|r| role_warning(file, r)).collect();
        let index = RuleIndex::build(&rules);
        let names = Names::build(&rules);
        let reads_arguments = rules.iter().any(|r| !r.arguments.is_empty());
        Ok(PolicySet {
            default,
            rules,
            index,
            names,
            reads_arguments,
            hash,
            warnings,
        })
    }

    /// What loaded but may not do what its author expects (see [`PolicyWarning`]).
    pub fn warnings(&self) -> &[PolicyWarning] {
        &self.warnings
    }

    /// SHA-256 of the canonical JSON projection of the parsed set.
    pub fn hash(&self) -> PolicySetHash {
        self.hash
    }

    /// The rules, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule that decides a call whose arguments are not given, or `None` for the
    /// set's default.
    ///
    /// Looks only at the rules the tool index gives for `tool`, in precedence order, and
    /// stops at the first that matches (see `RuleIndex`); the answer is the one
    /// [`PolicySet::select_linear`] gives by scanning every rule.
    pub fn select(&self, tool: &str, capability: &str, role: &str) -> Option<&Rule> {
        self.select_position(tool, capability, role)
            .map(|i| &self.rules[i as usize])
    }

    /// [`PolicySet::select`], answering the rule's position in [`PolicySet::rules`].
    pub fn select_position(&self, tool: &str, capability: &str, role: &str) -> Option<u32> {
        self.select_call(tool, capability, role, &CallArguments::Unknown)
            .map(|s| s.position)
    }

    /// Whether any rule reads arguments (when none does, a call's are never parsed).
    pub fn reads_arguments(&self) -> bool {
        self.reads_arguments
    }

    /// The rule that decides a call with `args`, and how its argument matchers fit: the
    /// first candidate in precedence order whose axes match and whose arguments do not
    /// plainly miss. An [`Fit::Unknown`] selects the rule too; the caller refuses the
    /// call when that rule can allow.
    pub fn select_call(
        &self,
        tool: &str,
        capability: &str,
        role: &str,
        args: &CallArguments,
    ) -> Option<Selected> {
        for &i in self.index.candidates(tool) {
            let rule = &self.rules[i as usize];
            // Every candidate names `tool` or no tool (`RuleIndex::candidates`).
            if !rule.matches_beyond_tool(capability, role) {
                continue;
            }
            if rule.arguments.is_empty() {
                return Some(Selected {
                    position: i,
                    fit: Fit::Match,
                    read: serde_json::Map::new(),
                });
            }
            let mut read = serde_json::Map::new();
            match arguments::fit(&rule.arguments, args, &mut read) {
                Fit::NoMatch => continue,
                fit => {
                    return Some(Selected {
                        position: i,
                        fit,
                        read,
                    });
                }
            }
        }
        None
    }

    /// The rule ids and reasons this set's decisions name: rule ids in file order
    /// (a rule's position in [`PolicySet::rules`] is its position here), then the
    /// reasons. Built once when the set is parsed; shared, not copied, by each answer.
    pub fn decision_table(&self) -> &RArc<DecisionTable> {
        &self.names.table
    }

    /// The position in [`PolicySet::decision_table`] of the reason recorded when the rule
    /// at `position` decides: `over_limit` for a rate_limit rule whose bucket is empty.
    /// `None` for a position past the last rule.
    pub fn reason_position(&self, position: u32, over_limit: bool) -> Option<u32> {
        let [selected, over] = *self.names.reasons.get(position as usize)?;
        Some(if over_limit { over } else { selected })
    }

    /// The first rule (in precedence order) that applies to a call by tool, capability
    /// and role and reads an argument `args` cannot give a comparable value for.
    pub fn first_unknown(
        &self,
        tool: &str,
        capability: &str,
        role: &str,
        args: &CallArguments,
    ) -> Option<u32> {
        self.index.candidates(tool).iter().copied().find(|&i| {
            let rule = &self.rules[i as usize];
            !rule.arguments.is_empty()
                && rule.matches_beyond_tool(capability, role)
                && arguments::fit(&rule.arguments, args, &mut serde_json::Map::new())
                    == Fit::Unknown
        })
    }

    /// [`PolicySet::select`] by scanning every rule in file order, without the index:
    /// the definition the index is tested against.
    pub fn select_linear(&self, tool: &str, capability: &str, role: &str) -> Option<&Rule> {
        self.select_linear_call(tool, capability, role, &CallArguments::Unknown)
    }

    /// [`PolicySet::select_call`]'s rule, by scanning every rule in file order.
    pub fn select_linear_call(
        &self,
        tool: &str,
        capability: &str,
        role: &str,
        args: &CallArguments,
    ) -> Option<&Rule> {
        best_of(self.rules.iter(), tool, capability, role, args)
    }
}

/// The rule [`PolicySet::select_call`] chose.
#[derive(Clone, Debug)]
pub struct Selected {
    /// Its position in [`PolicySet::rules`].
    pub position: u32,
    /// How its argument matchers fit ([`Fit::Match`] for a rule without any).
    pub fit: Fit,
    /// The argument values its matchers compared, as compared.
    pub read: serde_json::Map<String, serde_json::Value>,
}

/// Among `rules` (in file order), the one that decides the call: any matching deny
/// wins, then the most specific, then the highest priority, then the earliest.
fn best_of<'r>(
    rules: impl Iterator<Item = &'r Rule>,
    tool: &str,
    capability: &str,
    role: &str,
    args: &CallArguments,
) -> Option<&'r Rule> {
    let mut best: Option<&Rule> = None;
    for rule in rules.filter(|r| r.matches(tool, capability, role, args)) {
        let better = match best {
            None => true,
            Some(b) => precedence(rule) > precedence(b),
        };
        if better {
            best = Some(rule);
        }
    }
    best
}

/// The line a YAML loader error points at.
fn load_error_line(e: &LoadError) -> usize {
    match e {
        LoadError::TopLevelMustBeMapping(m)
        | LoadError::TopLevelMustBeSequence(m)
        | LoadError::UnexpectedAnchor(m)
        | LoadError::MappingKeyMustBeScalar(m)
        | LoadError::UnexpectedTag(m)
        | LoadError::ScanError(m, _) => m.line(),
        LoadError::DuplicateKey(inner) => inner.key.span().start().map_or(0, |m| m.line()),
    }
}

/// The line a second YAML document starts on, if `text` holds more than one.
///
/// The loader reads only the first document. A later one needs a line starting with
/// `---` or `...` (YAML forbids such a line inside any scalar), so only then is the
/// text parsed again, as events alone, to find where the second document starts.
fn second_document(text: &str) -> Option<usize> {
    let marker = |l: &str| l.starts_with("---") || l.starts_with("...");
    if !text.lines().skip(1).any(marker) {
        return None;
    }
    let mut parser = yaml_rust2::parser::Parser::new_from_str(text);
    let mut documents = 0;
    loop {
        match parser.next_token() {
            Ok((yaml_rust2::Event::DocumentStart, mark)) => {
                documents += 1;
                if documents == 2 {
                    return Some(mark.line().max(1));
                }
            }
            Ok((yaml_rust2::Event::StreamEnd, _)) => return None,
            Ok(_) => {}
            // A syntax error past the first document is still a second document.
            Err(e) => return (documents >= 1).then_some(e.marker().line().max(1)),
        }
    }
}

/// The warning for a rule that restricts by role, which the caller asserts.
fn role_warning(file: &str, rule: &Rule) -> Option<PolicyWarning> {
    let role = rule.role.as_deref()?;
    if rule.action == Action::Allow {
        return None;
    }
    let only = if rule.tool.is_none() && rule.capability.is_none() {
        "only on "
    } else {
        "on "
    };
    Some(PolicyWarning {
        file: file.to_owned(),
        line: rule.line,
        message: format!(
            "rule {} is a {} keyed {only}role {}: a role is what the caller asserts, so a \
             caller who omits or changes it is not matched",
            quote(&rule.id),
            rule.action.word(),
            quote(role)
        ),
    })
}

fn parse_rule(ctx: &Ctx<'_>, node: &Node) -> Result<Rule, PolicyError> {
    let line = line_of(node);
    let map = node
        .as_mapping()
        .ok_or_else(|| ctx.err(line, "rules: each rule is a mapping"))?;
    only(
        ctx,
        map,
        "rule",
        &[
            "id",
            "action",
            "tool",
            "capability",
            "role",
            "priority",
            "reason",
            "rate",
            "limits",
            "arguments",
        ],
    )?;
    let id = match map.get_node("id") {
        Some(n) => string(ctx, n, "id")?,
        None => return Err(ctx.err(line, "id: missing")),
    };
    let action_node = map
        .get_node("action")
        .ok_or_else(|| ctx.err(line, format!("action: missing in rule {}", quote(&id))))?;
    let action = match scalar(ctx, action_node, "action")?.as_str() {
        "allow" => Action::Allow,
        "deny" => Action::Deny,
        "rate_limit" => Action::RateLimit,
        "pending_approval" => Action::PendingApproval,
        other => {
            return Err(ctx.err(
                line_of(action_node),
                format!(
                    "action: expected allow, deny, rate_limit or pending_approval, found {}",
                    quote(other)
                ),
            ));
        }
    };
    let priority = match map.get_node("priority") {
        None => 0,
        Some(n) => scalar(ctx, n, "priority")?
            .as_str()
            .parse::<i64>()
            .map_err(|_| ctx.err(line_of(n), "priority: expected a whole number"))?,
    };
    let rate = match (map.get_node("rate"), action) {
        (None, Action::RateLimit) => {
            return Err(ctx.err(
                line,
                format!(
                    "rate: rule {} is rate_limit and needs `rate: {{ max, per_seconds }}`",
                    quote(&id)
                ),
            ));
        }
        (None, _) => None,
        (Some(n), Action::RateLimit) => {
            let r = n
                .as_mapping()
                .ok_or_else(|| ctx.err(line_of(n), "rate: expected `{ max, per_seconds }`"))?;
            only(ctx, r, "rate", &["max", "per_seconds"])?;
            let get = |k: &str| {
                r.get_node(k)
                    .ok_or_else(|| ctx.err(line_of(n), format!("rate.{k}: missing")))
                    .and_then(|v| positive(ctx, v, &format!("rate.{k}")))
            };
            Some(Rate {
                max: get("max")?,
                per_seconds: get("per_seconds")?,
            })
        }
        (Some(n), other) => {
            return Err(ctx.err(
                line_of(n),
                format!(
                    "rate: only a rate_limit rule takes a rate, and {} is {}",
                    quote(&id),
                    other.word()
                ),
            ));
        }
    };
    let limits = match map.get_node("limits") {
        None => NarrowingLimits::default(),
        Some(n) => {
            let l = n
                .as_mapping()
                .ok_or_else(|| ctx.err(line_of(n), "limits: expected a mapping"))?;
            only(
                ctx,
                l,
                "limits",
                &["max_memory_bytes", "max_wall_ms", "max_output_bytes"],
            )?;
            let get = |k: &str| {
                l.get_node(k)
                    .map(|v| positive(ctx, v, &format!("limits.{k}")))
                    .transpose()
            };
            NarrowingLimits {
                max_memory_bytes: get("max_memory_bytes")?,
                max_wall_ms: get("max_wall_ms")?,
                max_output_bytes: get("max_output_bytes")?,
            }
        }
    };
    let arguments = match map.get_node("arguments") {
        None => Vec::new(),
        Some(n) => parse_arguments(ctx, n)?,
    };
    Ok(Rule {
        arguments,
        tool: axis(ctx, map.get_node("tool"), "tool")?,
        capability: axis(ctx, map.get_node("capability"), "capability")?,
        role: axis(ctx, map.get_node("role"), "role")?,
        reason: map
            .get_node("reason")
            .map(|n| string(ctx, n, "reason"))
            .transpose()?,
        id,
        action,
        priority,
        rate,
        limits,
        line,
    })
}

/// The canonical projection the hash covers: every field the evaluator reads, numbers
/// as decimal strings (so no policy can leave the record's value space), rule order kept.
fn projection(default: Action, rules: &[Rule]) -> Object {
    let mut set = Object::new();
    set.insert("version", "1");
    set.insert("default", default.word());
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| {
            let mut o = Object::new();
            o.insert("id", r.id.as_str());
            o.insert("action", r.action.word());
            o.insert_opt("tool", r.tool.as_deref());
            o.insert_opt("capability", r.capability.as_deref());
            o.insert_opt("role", r.role.as_deref());
            o.insert("priority", r.priority.to_string());
            o.insert_opt("reason", r.reason.as_deref());
            if let Some(rate) = r.rate {
                let mut q = Object::new();
                q.insert("max", rate.max.to_string());
                q.insert("per_seconds", rate.per_seconds.to_string());
                o.insert("rate", q);
            }
            let mut l = Object::new();
            l.insert_opt(
                "max_memory_bytes",
                r.limits.max_memory_bytes.map(|n| n.to_string()),
            );
            l.insert_opt("max_wall_ms", r.limits.max_wall_ms.map(|n| n.to_string()));
            l.insert_opt(
                "max_output_bytes",
                r.limits.max_output_bytes.map(|n| n.to_string()),
            );
            if !l.is_empty() {
                o.insert("limits", l);
            }
            if !r.arguments.is_empty() {
                let mut a = Object::new();
                for m in &r.arguments {
                    let mut q = Object::new();
                    match &m.matcher {
                        Matcher::Equals(v) => {
                            q.insert("equals", v.as_str());
                        }
                        Matcher::Under(root) => {
                            q.insert("under", root.as_str());
                        }
                        Matcher::Bounds { min, max } => {
                            q.insert_opt("min", min.map(number_text));
                            q.insert_opt("max", max.map(number_text));
                        }
                    }
                    a.insert(m.name.as_str(), q);
                }
                o.insert("arguments", a);
            }
            Value::Object(o)
        })
        .collect();
    set.insert("rules", Value::Array(rules));
    set
}

/// A bound as the hash sees it: the shortest text that reads back as the same `f64`.
fn number_text(x: f64) -> String {
    format!("{x:?}")
}

/// The `arguments:` block of a rule: a mapping of argument name (or JSON Pointer) to
/// one matcher (`equals`, `under`, or `min`/`max`).
fn parse_arguments(ctx: &Ctx<'_>, node: &Node) -> Result<Vec<ArgumentMatcher>, PolicyError> {
    let map = node.as_mapping().ok_or_else(|| {
        ctx.err(
            line_of(node),
            "arguments: expected a mapping of argument name to matcher",
        )
    })?;
    if map.is_empty() {
        return Err(ctx.err(
            line_of(node),
            "arguments: empty; omit it to match any arguments",
        ));
    }
    let mut out = Vec::with_capacity(map.len());
    for (key, value) in map.iter() {
        let name = key.as_str();
        let field = format!("arguments.{name}");
        if name.is_empty() {
            return Err(ctx.err(key_line(key), "arguments: an empty argument name"));
        }
        let m = value.as_mapping().ok_or_else(|| {
            ctx.err(
                line_of(value),
                format!("{field}: expected `{{ equals: … }}`, `{{ under: … }}` or `{{ min: …, max: … }}`"),
            )
        })?;
        only(ctx, m, &field, &["equals", "under", "min", "max"])?;
        let number = |k: &str| -> Result<Option<f64>, PolicyError> {
            m.get_node(k)
                .map(|n| {
                    let text = scalar(ctx, n, &format!("{field}.{k}"))?.as_str();
                    text.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| {
                            ctx.err(
                                line_of(n),
                                format!("{field}.{k}: expected a number, found {}", quote(text)),
                            )
                        })
                })
                .transpose()
        };
        let (equals, under) = (m.get_node("equals"), m.get_node("under"));
        let (min, max) = (number("min")?, number("max")?);
        let matcher = match (equals, under, min.is_some() || max.is_some()) {
            (Some(e), None, false) => Matcher::Equals(string(ctx, e, &format!("{field}.equals"))?),
            (None, Some(u), false) => {
                let raw = string(ctx, u, &format!("{field}.under"))?;
                let root = aegis_policy_arguments::normalise(&raw)
                    .filter(|_| raw.starts_with('/'))
                    .ok_or_else(|| {
                        ctx.err(
                            line_of(u),
                            format!(
                                "{field}.under: expected an absolute path, found {}",
                                quote(&raw)
                            ),
                        )
                    })?;
                Matcher::Under(root)
            }
            (None, None, true) => {
                if let (Some(lo), Some(hi)) = (min, max)
                    && lo > hi
                {
                    return Err(ctx.err(line_of(value), format!("{field}: min is above max")));
                }
                Matcher::Bounds { min, max }
            }
            _ => {
                return Err(ctx.err(
                    line_of(value),
                    format!("{field}: expected exactly one of `equals`, `under`, or `min`/`max`"),
                ));
            }
        };
        out.push(ArgumentMatcher {
            name: name.to_owned(),
            matcher,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}
