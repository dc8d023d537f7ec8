//! When the record cannot be kept, the pipeline says so and keeps its promises: a call
//! whose intent cannot be written does not run, and a call whose outcome cannot be
//! written returns no output. The sink here is a real plugin through the station
//! boundary that stores lines until a budget runs out, as a full disk would.

use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest, ToolRegistry};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallRequest, Pipeline, PipelineError};
use aegis_runtime::{Plugin, Profile, open_audit};
use aegis_station_api::{ErrorKind, PluginError, Retention, Sink, Tail, TailKind};
use std::collections::BTreeMap;
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

/// A pipeline whose sink holds `budget` lines, with one host tool that counts its runs.
fn pipeline(budget: usize, runs: Arc<AtomicUsize>) -> Pipeline {
    let plugin = Plugin::builtin(full_disk());
    let sink = plugin.audit_sink(&format!("budget = {budget}")).unwrap();
    let profile = Profile::find("default").unwrap();
    let audit = open_audit(sink, &plugin, None, &profile, &[]).unwrap();
    let policy = aegis_runtime::Registry::new()
        .resolve(
            &aegis_runtime::PluginSpec::parse("builtin:policy-static"),
            None,
        )
        .unwrap()
        .policy_evaluator("verdict = \"allow\"")
        .unwrap();
    let mut tools = ToolRegistry::new();
    tools
        .register(ToolManifest {
            id: "count".into(),
            kind: ToolKind::Host,
            fs_read: vec![],
            fs_write: vec![],
            net: vec![],
            limits: DEFAULT_LIMITS,
        })
        .unwrap();
    let mut handlers: BTreeMap<String, HostHandler> = BTreeMap::new();
    handlers.insert(
        "count".into(),
        Arc::new(move |_, _| {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(b"the output".to_vec())
        }),
    );
    Pipeline::from_parts(policy, audit, tools, handlers, aegis_suites::sandbox())
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
