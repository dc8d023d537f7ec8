//! One rate limit across processes: the host hands its policy station a ledger over the
//! audit sink. Two hosts whose sinks write to one store that keeps buckets (as two
//! processes writing to one database) spend one budget; without such a store each host
//! keeps its own; a store that fails refuses the call at the policy station; and a
//! replay (`recheck`) never spends the store's budget.
//!
//! The store here is a test sink plugin built in (`store_module`): its lines live in
//! the sink, its buckets in a process-wide map keyed by the store name its config
//! gives, so two sinks opened on one name share them as two connections to one
//! database would.

use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
use aegis_runtime::rate::RateHeld;
use aegis_runtime::recheck::Replayed;
use aegis_runtime::{CallRequest, Host, Plugin};
use aegis_station_api::{ErrorKind, PluginError, RateLimits, Retention, Sink, Tail, TailKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

const POLICY: &str = "version: 1
default: deny
rules:
  - id: search-rate
    action: rate_limit
    tool: search
    rate: { max: 3, per_seconds: 3600 }
";

/// One store's buckets and how many takes it answered, by store name.
#[derive(Default)]
struct Shared {
    buckets: RateLimits,
    takes: Mutex<u64>,
}

fn stores() -> &'static Mutex<HashMap<String, Arc<Shared>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<Shared>>>> = OnceLock::new();
    STORES.get_or_init(Mutex::default)
}

fn store(name: &str) -> Arc<Shared> {
    stores()
        .lock()
        .unwrap()
        .entry(name.to_owned())
        .or_default()
        .clone()
}

fn takes(name: &str) -> u64 {
    *store(name).takes.lock().unwrap()
}

/// A sink over the store its config names (`name`), or one whose buckets are
/// unreachable (`down`).
struct StoreSink {
    shared: Arc<Shared>,
    down: bool,
    lines: Mutex<Vec<Vec<u8>>>,
}

impl StoreSink {
    fn from_config(config: &str) -> Result<StoreSink, PluginError> {
        Ok(StoreSink {
            shared: store(config),
            down: config == "down",
            lines: Mutex::default(),
        })
    }
}

impl Sink for StoreSink {
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
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        self.lines.lock().unwrap().push(line.to_vec());
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
    fn take_rate(&self, bucket: &str, max: u64, per_seconds: u64) -> Result<bool, PluginError> {
        if self.down {
            return Err(PluginError::new(ErrorKind::IO, "connection refused"));
        }
        *self.shared.takes.lock().unwrap() += 1;
        Ok(self.shared.buckets.take(bucket, max, per_seconds))
    }
}

aegis_station_api::plugin_module! {
    fn store_module {
        name: "test-store",
        version: "0.1.0",
        sink: StoreSink::from_config,
    }
}

fn policy_file(dir: &Path) -> PathBuf {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    path
}

/// A host deciding with [`POLICY`] (its own YAML station, built for it as a process
/// builds one) over the echo tool as `search`, recording to `audit`: the test store
/// named by its config, or a built-in sink.
fn host(policy: &Path, audit: Option<&str>) -> Host {
    let echo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/wasm/echo.wasm");
    let mut b = Host::builder(aegis_runtime::Profile::find("default").unwrap())
        .policy_file("the test", policy)
        .tool(ToolManifest {
            id: "search".into(),
            kind: ToolKind::Wasm { component: echo },
            fs_read: vec![],
            fs_write: vec![],
            net: vec![],
            limits: DEFAULT_LIMITS,
        });
    if let Some(config) = audit {
        b = b.audit_plugin("the test", Plugin::builtin(store_module()), config);
    }
    b.open().unwrap()
}

fn search() -> CallRequest<'static> {
    CallRequest::new("search", b"{}")
}

fn allowed(h: &Host) -> bool {
    h.pipeline().decide(&search()).1.is_some()
}

#[test]
fn two_hosts_on_one_store_spend_one_budget() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path());
    let (a, b) = (host(&policy, Some("one")), host(&policy, Some("one")));
    assert_eq!(a.rate_limits(), Some(RateHeld::NotYet));
    let spent: Vec<bool> = (0..6)
        .map(|i| allowed(if i % 2 == 0 { &a } else { &b }))
        .collect();
    assert_eq!(spent, [true, true, true, false, false, false]);
    assert_eq!(takes("one"), 6);
    assert_eq!(a.rate_limits(), Some(RateHeld::Store));
    assert_eq!(b.rate_limits(), Some(RateHeld::Store));
    // Another store is another budget.
    assert!(allowed(&host(&policy, Some("two"))));
}

#[test]
fn without_a_store_each_host_keeps_its_own_budget() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path());
    // The default profile's sink (memory) keeps no buckets.
    let (a, b) = (host(&policy, None), host(&policy, None));
    for h in [&a, &b] {
        let spent: Vec<bool> = (0..4).map(|_| allowed(h)).collect();
        assert_eq!(spent, [true, true, true, false]);
        assert_eq!(h.rate_limits(), Some(RateHeld::Process));
    }
}

#[test]
fn a_store_that_fails_refuses_the_call_at_the_policy_station() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path());
    let h = host(&policy, Some("down"));
    for _ in 0..2 {
        let call = h.call(&search()).unwrap();
        assert!(call.output.is_none(), "the tool never ran");
        let refusal = call.station_refusal().unwrap();
        assert!(
            refusal.contains("the policy station failed, so the call is refused")
                && refusal.contains("rate-limit bucket \"search-rate\"")
                && refusal.ends_with("connection refused"),
            "{refusal}"
        );
    }
    assert_eq!(h.rate_limits(), Some(RateHeld::NotYet));
}

/// A replay asks a station built for it, which holds its own buckets: it never spends
/// (or reads) the store's budget. The store's bucket is empty when the replay runs; a
/// replay through it would rate-limit the recorded allows.
#[test]
fn recheck_spends_its_own_budget_never_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path());
    let h = host(&policy, Some("replayed"));
    for _ in 0..3 {
        assert!(h.call(&search()).unwrap().output.is_some());
    }
    assert!(!allowed(&h), "the store's bucket is empty");
    let record = h.close_and_export().unwrap();
    let before = takes("replayed");
    let profile = aegis_runtime::Profile::find("default").unwrap();
    let (_, station) = aegis_runtime::host::policy_station(
        &profile,
        &aegis_runtime::Registry::new(),
        Some(&policy),
    )
    .unwrap();
    let replay = aegis_runtime::recheck::recheck(&record, &station).unwrap();
    assert_eq!(replay.calls.len(), 3);
    for call in &replay.calls {
        assert!(
            matches!(call.replayed, Replayed::Unchanged { .. }),
            "{call:?}"
        );
    }
    assert_eq!(
        takes("replayed"),
        before,
        "the replay took nothing from the store"
    );
}
