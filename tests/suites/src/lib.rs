//! The harness the suites share: a host assembled as an operator would (the embedded
//! default profile, a YAML policy file and a durable file sink in its place, a fresh
//! key), and a check of the record it leaves.

use aegis_record::json::{Object, Value};
use aegis_record::key::SigningKey;
use aegis_record::verify::{Options, Report, Verdict, verify};
use aegis_record::{IntentLine, OutcomeLine};
use aegis_runtime::capability::{DEFAULT_LIMITS, Limits, ToolKind, ToolManifest};
use aegis_runtime::handler::HostHandler;
use aegis_runtime::pipeline::{CallRecord, CallRequest};
use aegis_runtime::sandbox::Sandbox;
use aegis_runtime::{Host, HostBuilder, PluginSpec, Profile};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Who the harness's overrides are recorded as having come from.
pub const SUITE: &str = "the suite harness";

/// A host builder as an operator would set one up: the embedded default profile, the
/// durable file sink appending to `dir/record.aarl` in place of the profile's sink,
/// the shared sandbox; and that record's path. The caller chooses the policy and the
/// key.
pub fn suite_builder(dir: &Path) -> (HostBuilder, PathBuf) {
    let record = dir.join("record.aarl");
    let profile = Profile::embedded("default").expect("the default profile is embedded");
    let builder = Host::builder(profile)
        .audit_file(SUITE, &record)
        .sandbox(sandbox());
    (builder, record)
}

/// A committed guest component from `tests/fixtures/wasm`.
pub fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/wasm")
        .join(format!("{name}.wasm"))
}

/// One sandbox per test binary: engines are meant to be shared.
pub fn sandbox() -> Arc<Sandbox> {
    static SANDBOX: OnceLock<Arc<Sandbox>> = OnceLock::new();
    SANDBOX
        .get_or_init(|| Arc::new(Sandbox::new().expect("engine")))
        .clone()
}

/// A wasm tool's manifest.
pub fn wasm_tool(
    id: &str,
    guest_name: &str,
    read: &[&Path],
    write: &[&Path],
    limits: Limits,
) -> ToolManifest {
    ToolManifest {
        id: id.into(),
        kind: ToolKind::Wasm {
            component: guest(guest_name),
        },
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: write.iter().map(|p| p.to_path_buf()).collect(),
        net: Vec::new(),
        limits,
    }
}

/// A wasm tool with no roots and the default ceilings.
pub fn plain_tool(id: &str, guest_name: &str) -> ToolManifest {
    wasm_tool(id, guest_name, &[], &[], DEFAULT_LIMITS)
}

/// A Model B tool (a host handler) with no roots and the default ceilings.
pub fn host_tool(id: &str) -> ToolManifest {
    ToolManifest {
        id: id.into(),
        kind: ToolKind::Host,
        fs_read: vec![],
        fs_write: vec![],
        net: vec![],
        limits: DEFAULT_LIMITS,
    }
}

/// The guests that exhaust each ceiling, as `(tool id, guest, ceiling kind)`.
pub const EXHAUSTERS: [(&str, &str, &str); 3] = [
    ("bomb", "memory-bomb", "memory"),
    ("spin", "spin", "wall_time"),
    ("flood", "flood", "output"),
];

/// Ceilings small enough for [`EXHAUSTERS`] to trip each quickly.
pub const TIGHT: Limits = Limits {
    max_memory_bytes: 16 << 20,
    max_wall_ms: 150,
    max_output_bytes: 1 << 10,
};

/// A harness allowing everything, with the [`EXHAUSTERS`] registered under [`TIGHT`].
pub fn exhaustion_harness() -> Harness {
    Harness::new(
        "version: 1\ndefault: allow\n",
        EXHAUSTERS
            .iter()
            .map(|(id, guest_name, _)| wasm_tool(id, guest_name, &[], &[], TIGHT))
            .collect(),
        BTreeMap::new(),
    )
}

/// A temp dir holding `policy` as `policy.yaml`, and that file's path.
fn policy_dir(policy: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, policy).expect("write policy");
    (dir, path)
}

/// A host over a real profile, and where its record goes.
pub struct Harness {
    /// Holds the policy file, the key and the record.
    pub dir: tempfile::TempDir,
    /// The assembled host (it dereferences to its pipeline).
    pub pipeline: Host,
    /// The key the record must verify under.
    pub key: SigningKey,
    /// The record file.
    pub record: PathBuf,
}

impl Harness {
    /// Assembles `policy` (YAML), `tools` and `handlers` with a durable file sink.
    pub fn new(
        policy: &str,
        tools: Vec<ToolManifest>,
        handlers: BTreeMap<String, HostHandler>,
    ) -> Harness {
        Harness::with_sandbox_and_handlers(policy, tools, handlers, sandbox())
    }

    /// The same, with any policy plugin (`plugin` as a profile names it, given
    /// `config`) in `dir`.
    pub fn with_policy_plugin(
        dir: tempfile::TempDir,
        plugin: &str,
        config: &str,
        tools: Vec<ToolManifest>,
        handlers: BTreeMap<String, HostHandler>,
    ) -> Harness {
        let (builder, _) = suite_builder(dir.path());
        let builder = builder.policy_plugin(SUITE, PluginSpec::parse(plugin), config);
        Harness::assemble(dir, builder, tools, handlers)
    }

    /// Like [`Harness::new`], on a sandbox of the caller's.
    pub fn with_sandbox(policy: &str, tools: Vec<ToolManifest>, sandbox: Arc<Sandbox>) -> Harness {
        Harness::with_sandbox_and_handlers(policy, tools, BTreeMap::new(), sandbox)
    }

    fn with_sandbox_and_handlers(
        policy: &str,
        tools: Vec<ToolManifest>,
        handlers: BTreeMap<String, HostHandler>,
        sandbox: Arc<Sandbox>,
    ) -> Harness {
        let (dir, policy_file) = policy_dir(policy);
        let (builder, _) = suite_builder(dir.path());
        let builder = builder.policy_file(SUITE, &policy_file).sandbox(sandbox);
        Harness::assemble(dir, builder, tools, handlers)
    }

    fn assemble(
        dir: tempfile::TempDir,
        builder: HostBuilder,
        tools: Vec<ToolManifest>,
        handlers: BTreeMap<String, HostHandler>,
    ) -> Harness {
        let key = SigningKey::generate().expect("key");
        let record = dir.path().join("record.aarl");
        let pipeline = builder
            .signing_key(key.clone())
            .tools(tools)
            .handlers(handlers)
            .open()
            .expect("host");
        Harness {
            dir,
            pipeline,
            key,
            record,
        }
    }

    /// Calls `tool` with `input`, expecting the record to be kept.
    pub fn call(&self, tool: &str, input: &[u8]) -> CallRecord {
        self.pipeline
            .call(&CallRequest::new(tool, input))
            .expect("the record is kept")
    }

    /// Calls `tool` with `input` and command arguments.
    pub fn call_args(&self, tool: &str, input: &[u8], args: &[&str]) -> CallRecord {
        self.pipeline
            .call(&CallRequest {
                args,
                ..CallRequest::new(tool, input)
            })
            .expect("the record is kept")
    }

    /// Closes the session and checks its record: Verified pinned to the key, and exactly
    /// one intent and one outcome per call. Returns the outcomes in record order.
    pub fn finish(self) -> Checked {
        self.pipeline
            .into_audit()
            .expect("every call begun has finished")
            .session
            .close()
            .expect("close line");
        check_record(&self.record, &self.key)
    }
}

/// Checks a closed record: Verified pinned to `key`, and exactly one intent and one
/// outcome per call, each pair naming the same tool and request digest. Returns the
/// outcomes in record order.
pub fn check_record(record: &Path, key: &SigningKey) -> Checked {
    let bytes = std::fs::read(record).expect("read record");
    let report = verify(
        &bytes[..],
        &Options {
            trust: Some(vec![key.public_key().into()]),
            threads: 0,
            approvers: None,
        },
    )
    .expect("verify");
    assert!(
        matches!(report.verdict(), Verdict::Verified(_)),
        "the record must verify: {}",
        report.to_text()
    );
    let mut intents = Vec::new();
    let mut outcomes = Vec::new();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(Value::Object(o)) = aegis_record::json::parse(line) else {
            panic!("a line that is not an object");
        };
        match line_type(&o) {
            "intent" => intents.push(IntentLine::from_object(&o).expect("intent")),
            "outcome" => outcomes.push(OutcomeLine::from_object(&o).expect("outcome")),
            _ => {}
        }
    }
    let intent_ids: BTreeSet<&str> = intents.iter().map(|i| i.call_id.as_str()).collect();
    let outcome_ids: BTreeSet<&str> = outcomes.iter().map(|o| o.call_id.as_str()).collect();
    assert_eq!(intent_ids.len(), intents.len(), "an intent written twice");
    assert_eq!(
        outcome_ids.len(),
        outcomes.len(),
        "an outcome written twice"
    );
    assert_eq!(
        intent_ids, outcome_ids,
        "an intent without its outcome, or the reverse"
    );
    for o in &outcomes {
        let i = intents.iter().find(|i| i.call_id == o.call_id).unwrap();
        assert_eq!(i.request_digest, o.request_digest, "{}", o.call_id);
        assert_eq!(i.tool_id, o.tool_id, "{}", o.call_id);
    }
    Checked { report, outcomes }
}

fn line_type(o: &Object) -> &str {
    match o.get("line_type") {
        Some(Value::String(s)) => s,
        _ => "",
    }
}

/// A record that verified, with its outcomes.
pub struct Checked {
    /// The verifier's report.
    pub report: Report,
    /// Every outcome, in record order.
    pub outcomes: Vec<OutcomeLine>,
}

impl Checked {
    /// The outcome of `call_id`.
    pub fn outcome(&self, call_id: &str) -> &OutcomeLine {
        self.outcomes
            .iter()
            .find(|o| o.call_id == call_id)
            .unwrap_or_else(|| panic!("no outcome for {call_id}"))
    }
}
