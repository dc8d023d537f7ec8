//! A plugin that misbehaves on request, to test that the host survives it: it panics
//! inside methods and constructors, and offers a durable sink that cannot read its tail.

use aegis_station_api::abi_stable::std_types::{ROption, RString, RVec};
use aegis_station_api::*;

plugin_module! {
    fn plugin_module {
        name: "misbehaving",
        version: env!("CARGO_PKG_VERSION"),
        policy: Misbehaving::from_config,
        confinement: Misbehaving::from_config,
        sink: Misbehaving::from_config,
    }
}
export_root!(crate::plugin_module);

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    panic_on_build: bool,
    #[serde(default)]
    tail: Option<String>,
}

struct Misbehaving {
    tail: Option<String>,
}

impl Misbehaving {
    fn from_config(text: &str) -> Result<Misbehaving, PluginError> {
        let c: Config =
            toml::from_str(text).map_err(|e| PluginError::new(ErrorKind::CONFIG, e.message()))?;
        assert!(!c.panic_on_build, "constructor panicked on purpose");
        Ok(Misbehaving { tail: c.tail })
    }
}

impl Policy for Misbehaving {
    fn policy_set_hash(&self) -> [u8; 32] {
        [7; 32]
    }

    fn evaluate(&self, request: &PolicyRequest<'_>) -> Result<PolicyDecision, PluginError> {
        assert!(
            request.tool_id.as_str() != "panic",
            "evaluate panicked on purpose"
        );
        Ok(PolicyDecision {
            verdict: Verdict::DENY,
            matched_rule: ROption::RSome(RString::from("misbehaving")),
            reason: RString::from("the misbehaving plugin says no"),
            limits: Limits::default(),
            approval_id: ROption::RNone,
        })
    }
}

impl Confinement for Misbehaving {
    fn apply(&self, _: &ConfinementRequest<'_>) -> Result<ConfinementReport, PluginError> {
        Ok(ConfinementReport {
            enforcement: Enforcement::NONE,
            abi: 0,
            gaps: RVec::from(vec![RString::from("this test backend enforces nothing")]),
            details: RString::from("{}"),
        })
    }
}

impl Sink for Misbehaving {
    fn retention(&self) -> Retention {
        Retention::DURABLE
    }

    fn location(&self) -> String {
        "nowhere".into()
    }

    fn existing_tail(&self) -> Result<Tail, PluginError> {
        match self.tail.as_deref() {
            Some("panic") => panic!("existing_tail panicked on purpose"),
            _ => Err(PluginError::new(
                ErrorKind::IO,
                "the tail is unreadable on purpose",
            )),
        }
    }

    fn append(&self, _: &[u8]) -> Result<(), PluginError> {
        Err(PluginError::new(ErrorKind::IO, "refuses everything"))
    }

    fn sync(&self) -> Result<(), PluginError> {
        Err(PluginError::new(ErrorKind::IO, "refuses everything"))
    }

    fn read_lines(&self, _: u64, _: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        Ok(vec![])
    }
}
