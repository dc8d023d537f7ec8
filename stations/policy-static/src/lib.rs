//! A policy evaluator with one fixed verdict: `allow` or `deny` for every call.
//!
//! It is the smallest real evaluator: the baseline the plugin-boundary bench compares
//! against, and a policy for profiles that leave every decision to capability grants.
//!
//! # Guarantees
//! - Its policy set hash is SHA-256 of the canonical JSON of its parsed config, so two
//!   configs that mean the same thing hash the same.
//! - There is no default: the config must name the verdict.

use aegis_record::PolicySetHash;
use aegis_record::json::Object;
use aegis_station_api::abi_stable::std_types::{ROption, RString};
use aegis_station_api::{
    ErrorKind, Limits, PluginError, Policy, PolicyDecision, PolicyRequest, Verdict,
};

aegis_station_api::plugin_module! {
    pub fn plugin_module {
        name: "policy-static",
        version: env!("CARGO_PKG_VERSION"),
        policy: StaticPolicy::from_config,
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    verdict: VerdictName,
    reason: Option<String>,
}

#[derive(serde::Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum VerdictName {
    Allow,
    Deny,
}

/// Answers every call with the configured verdict.
#[derive(Debug)]
pub struct StaticPolicy {
    verdict: Verdict,
    reason: String,
    hash: [u8; 32],
}

impl StaticPolicy {
    /// Builds the evaluator from `verdict = "allow" | "deny"` and an optional `reason`.
    ///
    /// # Errors
    /// A missing verdict, an unknown value or key.
    pub fn from_config(config: &str) -> Result<StaticPolicy, PluginError> {
        let c: Config = toml::from_str(config)
            .map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message().to_owned()))?;
        let (verdict, word) = match c.verdict {
            VerdictName::Allow => (Verdict::ALLOW, "allow"),
            VerdictName::Deny => (Verdict::DENY, "deny"),
        };
        let reason = c.reason.unwrap_or_else(|| format!("static policy: {word}"));
        let mut set = Object::new();
        set.insert("verdict", word);
        set.insert("reason", reason.as_str());
        let hash = *PolicySetHash::of_canonical_set(&set.to_canonical()).as_bytes();
        Ok(StaticPolicy {
            verdict,
            reason,
            hash,
        })
    }
}

impl Policy for StaticPolicy {
    fn policy_set_hash(&self) -> [u8; 32] {
        self.hash
    }

    fn evaluate(&self, _request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
        Ok(PolicyDecision {
            verdict: self.verdict,
            matched_rule: ROption::RNone,
            reason: RString::from(self.reason.as_str()),
            limits: Limits::default(),
            approval_id: ROption::RNone,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aegis_station_api::abi_stable::std_types::RStr;

    fn ask(p: &StaticPolicy) -> Verdict {
        let r = PolicyRequest {
            tool_id: RStr::from("t"),
            capability: RStr::from(""),
            role: RStr::from(""),
            session: RStr::from(""),
        };
        p.evaluate(&r).unwrap().verdict
    }

    #[test]
    fn verdict_is_required_and_applied() {
        assert_eq!(
            ask(&StaticPolicy::from_config("verdict = \"deny\"").unwrap()),
            Verdict::DENY
        );
        assert_eq!(
            ask(&StaticPolicy::from_config("verdict = \"allow\"").unwrap()),
            Verdict::ALLOW
        );
        assert!(
            StaticPolicy::from_config("")
                .unwrap_err()
                .message
                .contains("verdict")
        );
        assert!(StaticPolicy::from_config("verdict = \"maybe\"").is_err());
        assert!(
            StaticPolicy::from_config("verdict = \"deny\"\nx = 1")
                .unwrap_err()
                .message
                .contains('x')
        );
    }

    #[test]
    fn hash_follows_meaning_not_spelling() {
        let a = StaticPolicy::from_config("verdict = \"deny\"").unwrap();
        let b = StaticPolicy::from_config("# comment\nverdict   =   'deny'\n").unwrap();
        let c = StaticPolicy::from_config("verdict = \"allow\"").unwrap();
        assert_eq!(a.hash, b.hash);
        assert_ne!(a.hash, c.hash);
    }
}
