//! When the record cannot be kept, the pipeline says so and keeps its promises: a call
//! whose intent cannot be written does not run, and a call whose outcome cannot be
//! written returns no output. The sink here is a real plugin through the station
//! boundary that stores lines until a budget runs out, as a full disk would, put in
//! the profile's place through the host builder like any operator's sink.

use aegis_record::json::{Object, Value};
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallRequest, PipelineError};
use aegis_runtime::{Host, OpenError, Plugin, PluginSpec, Profile, ProfileError};
use aegis_station_api::{ErrorKind, PluginError, Retention, Sink, Tail, TailKind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

aegis_station_api::plugin_module! {
    fn full_disk {
        name: "full-disk",
        version: "0",
        sink: FullDisk::from_config,
    }
}

/// Stores the first `budget` lines, then refuses every append.
struct FullDisk {
    budget: usize,
    lines: Mutex<Vec<Vec<u8>>>,
}

impl FullDisk {
    fn from_config(config: &str) -> Result<FullDisk, PluginError> {
        let budget = config
            .trim()
            .strip_prefix("budget = ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| PluginError::new(ErrorKind::CONFIG, "budget = N"))?;
        Ok(FullDisk {
            budget,
            lines: Mutex::default(),
        })
    }
}

impl Sink for FullDisk {
    fn retention(&self) -> Retention {
        Retention::VOLATILE
    }
    fn location(&self) -> String {
        String::new()
    }
    fn existing_tail(&self) -> Result<Tail, PluginError> {
        Ok(Tail {
            kind: TailKind::EMPTY,
            line: Default::default(),
        })
    }
    fn append(&self, line: &[u8]) -> Result<(), PluginError> {
        let mut lines = self.lines.lock().unwrap();
        if lines.len() >= self.budget {
            return Err(PluginError::new(ErrorKind::IO, "no space left on device"));
        }
        lines.push(line.to_vec());
        Ok(())
    }
    fn sync(&self) -> Result<(), PluginError> {
        Ok(())
    }
    fn read_lines(&self, start: u64, max: u32) -> Result<Vec<Vec<u8>>, PluginError> {
        let lines = self.lines.lock().unwrap();
        Ok(lines
            .iter()
            .skip(start as usize)
            .take(max as usize)
            .cloned()
            .collect())
    }
}

const BY: &str = "the record-failure suite";

/// A host on the default profile whose sink, in place of the profile's, is a full-disk
/// plugin holding `budget` lines; with one host tool that counts its runs.
fn pipeline(budget: usize, runs: Arc<AtomicUsize>) -> Host {
    let handler: HostHandler = Arc::new(move |_, _| {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(b"the output".to_vec())
    });
    Host::builder(Profile::embedded("default").unwrap())
        .audit_plugin(BY, Plugin::builtin(full_disk()), budget_config(budget))
        .sandbox(aegis_suites::sandbox())
        .tool(ToolManifest {
            id: "count".into(),
            kind: ToolKind::Host,
            fs_read: vec![],
            fs_write: vec![],
            net: vec![],
            limits: DEFAULT_LIMITS,
        })
        .handler("count", handler)
        .open()
        .unwrap()
}

fn budget_config(budget: usize) -> String {
    format!("budget = {budget}")
}

#[test]
fn a_call_whose_intent_cannot_be_written_does_not_run() {
    let runs = Arc::new(AtomicUsize::new(0));
    // Room for the open line only.
    let p = pipeline(1, runs.clone());
    let err = p.call(&CallRequest::new("count", b"x")).unwrap_err();
    assert!(matches!(err, PipelineError::Intent(_)), "{err}");
    assert!(err.to_string().contains("nothing ran"), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool must not run");
}

#[test]
fn a_call_whose_outcome_cannot_be_written_returns_no_output() {
    let runs = Arc::new(AtomicUsize::new(0));
    // Room for the open line and the intent, not the outcome.
    let p = pipeline(2, runs.clone());
    let err = p.call(&CallRequest::new("count", b"x")).unwrap_err();
    let PipelineError::Outcome { call_id, .. } = &err else {
        panic!("{err}")
    };
    assert!(call_id.starts_with("call-"));
    assert!(err.to_string().contains("output was withheld"), "{err}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the tool ran; its output did not leave"
    );
}

/// A sink plugin in hand and a named policy plugin, both put in the profile's place:
/// the open line records each next to what the profile named, and the plugins list
/// says what ran.
#[test]
fn a_sink_in_hand_and_a_policy_plugin_are_recorded_next_to_what_the_profile_said() {
    let profile = Profile::embedded("default").unwrap();
    let host = Host::builder(profile.clone())
        .audit_plugin(BY, Plugin::builtin(full_disk()), budget_config(10))
        .policy_plugin(
            BY,
            PluginSpec::parse("builtin:policy-static"),
            "verdict = \"deny\"",
        )
        .sandbox(aegis_suites::sandbox())
        .open()
        .unwrap();
    let bytes = host.into_audit().unwrap().close_and_export().unwrap();
    let first = bytes.split(|&b| b == b'\n').next().unwrap();
    let Ok(Value::Object(open)) = aegis_record::json::parse(first) else {
        panic!("the open line is an object")
    };
    let Some(Value::Object(provenance)) = open.get("provenance") else {
        panic!("provenance is an object")
    };
    let Some(Value::Array(overrides)) = provenance.get("overrides") else {
        panic!("overrides is an array")
    };
    let entry = |station: &str| -> &Object {
        overrides
            .iter()
            .find_map(|v| match v {
                Value::Object(o) if o.get("station") == Some(&Value::from(station)) => Some(o),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no override of {station}"))
    };
    for (station, said, plugin) in [
        ("audit", &profile.audit, "full-disk"),
        ("policy", &profile.policy, "policy-static"),
    ] {
        let o = entry(station);
        assert_eq!(o.get("by"), Some(&Value::from(BY)), "{station}");
        assert_eq!(
            o.get("profile_plugin"),
            Some(&Value::from(said.spec.to_string())),
            "{station}"
        );
        assert_eq!(o.get("plugin"), Some(&Value::from(plugin)), "{station}");
    }
    assert_eq!(overrides.len(), 2);
    // The plugins list names what filled the sink station: the plugin in hand.
    let Some(Value::Array(plugins)) = provenance.get("plugins") else {
        panic!("plugins is an array")
    };
    assert!(plugins.iter().any(|p| matches!(p, Value::Object(o)
        if o.get("station") == Some(&Value::from("audit"))
            && o.get("name") == Some(&Value::from("full-disk")))));
}

/// A plugin in hand is held to its station's kind, as a profile's is: a sink offered
/// as the policy station is refused before anything is recorded, and the error names
/// the override, not a profile line.
#[test]
fn a_plugin_in_hand_of_the_wrong_kind_is_refused() {
    let err = Host::builder(Profile::embedded("default").unwrap())
        .policy_plugin(BY, Plugin::builtin(full_disk()), budget_config(10))
        .sandbox(aegis_suites::sandbox())
        .open()
        .unwrap_err();
    let OpenError::Profile(ProfileError::Flag { flag, station, .. }) = &err else {
        panic!("{err}")
    };
    assert_eq!((*flag, *station), (BY, "policy"));
    assert!(
        err.to_string().contains("provides sink, not policy"),
        "{err}"
    );
}
