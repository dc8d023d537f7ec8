//! The pipeline, station by station and end to end (issue targets in brackets).
//!
//! - `policy_yaml/{allow_all,multi_rule}/{plain,builtin,loaded}`: one evaluation by the
//!   YAML station as the host asks for it (`evaluate_axes_indexed`, one axis), as a
//!   plain Rust call, as a built-in through the station trait object, and from its
//!   loaded cdylib [≤ 60 ns through the boundary; `multi_rule` ≤ 1.5 × `allow_all`].
//!   `…/{plain,builtin,loaded}_owned` is `evaluate`, whose answer owns its strings (what
//!   the plain forms timed up to run 7 of `benches/results/pipeline.md`).
//! - `stations_1_2/{allow,allow_no_roots,deny}`: policy then capability as the
//!   pipeline runs them (`Pipeline::decide`: request digest, outcome draft, grant
//!   record), minting a grant or refusing [≤ 300 ns; `allow` ≤ 2 × `deny`].
//!   `stations_1_2/bare_*` is the
//!   two stations' own work alone: one policy evaluation through the boundary and one
//!   `ToolRegistry::resolve`, as the reference measured it.
//! - `call/warm_volatile`: a whole audited Model A call (intent, policy, capability, a
//!   warm sandbox run of `echo`, signed outcome) on the volatile memory sink [≤ 50 µs].
//!   `call/warm_volatile_world` is the same with the WIT-world guest `world-reverse`;
//!   `call/seal_floor` is the signed outcome line alone, for the ratio.
//! - `call/durable/{1,16}`: the same call through the file sink (fsync, group commit)
//!   with 1 and 16 concurrent callers; throughput in calls per second.

use aegis_test_support as support;

use aegis_benches::write_policy;
use aegis_policy_yaml::{PolicyEngine, PolicySet};
use aegis_record::key::SigningKey;
use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest, ToolRegistry};
use aegis_runtime::pipeline::{CallClass, CallRequest};
use aegis_runtime::sandbox::Sandbox;
use aegis_runtime::{Host, Plugin, PluginSpec, Registry};
use aegis_station_api::abi_stable::std_types::{RSlice, RSliceMut, RStr};
use aegis_station_api::{IndexedAnswer, IndexedDecision, Policy as _, PolicyRequest};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALLOW_ALL: &str = "version: 1\ndefault: allow\n";

/// Twenty rules of mixed shape; the request below (`read-notes`, `fs.read`, `ops`) can be
/// matched by eight of them and is decided by the most specific, `notes-ops`.
fn multi_rule() -> String {
    let mut y = String::from("version: 1\ndefault: deny\nrules:\n");
    for i in 0..6 {
        y += &format!("  - id: deny-tool-{i}\n    action: deny\n    tool: shell-{i}\n");
        y += &format!(
            "  - id: rate-{i}\n    action: rate_limit\n    tool: search-{i}\n    rate: {{ max: 100, per_seconds: 60 }}\n"
        );
        y += &format!("  - id: role-{i}\n    action: allow\n    role: team-{i}\n");
    }
    y += "  - id: notes-any\n    action: allow\n    tool: read-notes\n";
    y += "  - id: echo-ops\n    action: allow\n    tool: echo\n    role: ops\n";
    y += "  - id: notes-ops\n    action: allow\n    tool: read-notes\n    role: ops\n    priority: 3\n";
    y
}

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/wasm/{name}.wasm"))
}

fn config_for(path: &Path) -> String {
    format!("path = {:?}", path.display().to_string())
}

fn policy_yaml(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("policy_yaml");
    let req = aegis_benches::policy_request();
    // The host asks about the axes a grant carries; for this request, `fs.read` alone.
    let axes = [RStr::from("fs.read")];
    let axes = RSlice::from_slice(&axes);
    let loaded_plugin = Plugin::load(&support::cdylib("aegis-policy-yaml-plugin"), None).unwrap();
    for (name, yaml, rule) in [
        ("allow_all", ALLOW_ALL.to_owned(), None),
        ("multi_rule", multi_rule(), Some("notes-ops")),
    ] {
        // Each form must allow, by the rule expected, before it is timed.
        let check = |d: aegis_station_api::PolicyDecision| {
            assert_eq!(d.verdict, aegis_station_api::Verdict::ALLOW, "{name}");
            let matched = d.matched_rule.into_option();
            assert_eq!(matched.as_ref().map(|r| r.as_str()), rule, "{name}");
        };
        let check_indexed = |a: IndexedAnswer, slots: &[IndexedDecision; 1]| {
            assert_eq!(a.answered, 1, "{name}");
            assert_eq!(
                slots[0].verdict,
                aegis_station_api::Verdict::ALLOW,
                "{name}"
            );
            assert_eq!(a.table.rule(slots[0].rule), rule, "{name}");
        };
        let path = write_policy(dir.path(), &yaml);
        let plain = PolicyEngine::new(PolicySet::parse(&yaml, "bench").unwrap());
        let mut slots = [IndexedDecision::default(); 1];
        check_indexed(
            plain
                .evaluate_axes_indexed(&req, axes.as_slice(), &mut slots)
                .unwrap(),
            &slots,
        );
        g.bench_function(BenchmarkId::new(name, "plain"), |b| {
            b.iter(|| {
                let mut slots = [IndexedDecision::default(); 1];
                let a = plain.evaluate_axes_indexed(black_box(&req), axes.as_slice(), &mut slots);
                black_box((a, slots))
            })
        });
        check(plain.evaluate(&req).unwrap());
        g.bench_function(BenchmarkId::new(name, "plain_owned"), |b| {
            b.iter(|| black_box(plain.evaluate(black_box(&req))))
        });
        let builtin = Registry::new()
            .resolve(&PluginSpec::parse("builtin:policy-yaml"), None)
            .unwrap()
            .policy_evaluator(&config_for(&path))
            .unwrap();
        let loaded = loaded_plugin.policy_evaluator(&config_for(&path)).unwrap();
        for (form, station) in [("builtin", &builtin), ("loaded", &loaded)] {
            let mut slots = [IndexedDecision::default(); 1];
            let a = station
                .evaluate_axes_indexed(&req, axes, RSliceMut::from(&mut slots[..]))
                .unwrap();
            check_indexed(a, &slots);
            g.bench_function(BenchmarkId::new(name, form), |b| {
                b.iter(|| {
                    let mut slots = [IndexedDecision::default(); 1];
                    let a = station.evaluate_axes_indexed(
                        black_box(&req),
                        axes,
                        RSliceMut::from(&mut slots[..]),
                    );
                    black_box((a, slots))
                })
            });
            check(station.evaluate(&req).unwrap());
            g.bench_function(BenchmarkId::new(name, format!("{form}_owned")), |b| {
                b.iter(|| black_box(station.evaluate(black_box(&req))))
            });
        }
    }
    g.finish();
}

/// A host on the default profile's memory sink, or on a file sink at `record`, with
/// `yaml` as its policy (`aegis_benches::host_builder`) and three wasm tools.
fn pipeline(dir: &Path, yaml: &str, record: Option<&Path>, sandbox: Arc<Sandbox>) -> Host {
    let mut builder = aegis_benches::host_builder(dir, yaml, record).sandbox(sandbox);
    let notes = dir.join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    for (id, guest_name, read) in [
        ("echo", "echo", vec![]),
        ("reverse", "world-reverse", vec![]),
        ("read-notes", "read-file", vec![notes.clone()]),
    ] {
        builder = builder.tool(ToolManifest {
            id: id.into(),
            kind: ToolKind::Wasm {
                component: guest(guest_name),
            },
            fs_read: read,
            fs_write: vec![],
            net: vec![],
            limits: DEFAULT_LIMITS,
        });
    }
    builder.open().unwrap()
}

fn stations_1_2(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(
        dir.path(),
        &multi_rule(),
        None,
        Arc::new(Sandbox::new().unwrap()),
    );
    let mut g = c.benchmark_group("stations_1_2");
    let allow = CallRequest {
        capability: Some("fs.read"),
        role: Some("ops"),
        ..CallRequest::new("read-notes", b"{}")
    };
    assert!(p.decide(&allow).1.is_some());
    g.bench_function("allow", |b| {
        b.iter(|| black_box(p.decide(black_box(&allow))))
    });
    // The same without a root to check (no `stat`, no paths to record).
    let no_roots = CallRequest {
        role: Some("ops"),
        ..CallRequest::new("echo", b"{}")
    };
    assert!(p.decide(&no_roots).1.is_some());
    g.bench_function("allow_no_roots", |b| {
        b.iter(|| black_box(p.decide(black_box(&no_roots))))
    });
    // The stations' own work, without the record: the same evaluator and registry.
    let policy = Registry::new()
        .resolve(&PluginSpec::parse("builtin:policy-yaml"), None)
        .unwrap()
        .policy_evaluator(&config_for(&write_policy(dir.path(), &multi_rule())))
        .unwrap();
    let notes = dir.path().join("notes");
    let mut tools = ToolRegistry::new();
    for (id, read) in [("read-notes", vec![notes]), ("echo", vec![])] {
        tools
            .register(ToolManifest {
                id: id.into(),
                kind: ToolKind::Wasm {
                    component: guest("echo"),
                },
                fs_read: read,
                fs_write: vec![],
                net: vec![],
                limits: DEFAULT_LIMITS,
            })
            .unwrap();
    }
    for (name, tool, capability) in [
        ("bare_allow", "read-notes", Some("fs.read")),
        ("bare_allow_no_roots", "echo", None),
    ] {
        let ask = PolicyRequest {
            tool_id: RStr::from(tool),
            capability: RStr::from(capability.unwrap_or("")),
            role: RStr::from("ops"),
            session: RStr::from(""),
        };
        g.bench_function(name, |b| {
            b.iter(|| {
                let d = policy.evaluate(black_box(&ask)).unwrap();
                assert_eq!(d.verdict, aegis_station_api::Verdict::ALLOW);
                black_box(
                    tools
                        .resolve(tool, capability, &Default::default())
                        .unwrap(),
                )
            })
        });
    }
    let deny = CallRequest::new("shell-3", b"{}");
    assert!(p.decide(&deny).1.is_none());
    g.bench_function("deny", |b| b.iter(|| black_box(p.decide(black_box(&deny)))));
    g.finish();
}

fn call(c: &mut Criterion) {
    let sandbox = Arc::new(Sandbox::new().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut g = c.benchmark_group("call");
    let warm = pipeline(dir.path(), ALLOW_ALL, None, sandbox.clone());
    let req = CallRequest::new("echo", b"hello");
    assert_eq!(warm.call(&req).unwrap().class(), CallClass::Success);
    g.bench_function("warm_volatile", |b| {
        b.iter(|| black_box(warm.call(black_box(&req)).unwrap()))
    });
    let world = CallRequest::new("reverse", b"hello");
    assert_eq!(warm.call(&world).unwrap().class(), CallClass::Success);
    g.bench_function("warm_volatile_world", |b| {
        b.iter(|| black_box(warm.call(black_box(&world)).unwrap()))
    });
    let key = SigningKey::generate().unwrap();
    let line = warm.call(&req).unwrap().outcome;
    g.bench_function("seal_floor", |b| {
        b.iter(|| {
            use aegis_record::line::LineBody as _;
            black_box(
                aegis_record::seal(
                    "outcome",
                    line.to_object(),
                    7,
                    aegis_record::LineHash::GENESIS,
                    Some(&key),
                )
                .unwrap(),
            )
        })
    });

    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1));
    for callers in [1u64, 16] {
        let d = tempfile::tempdir().unwrap();
        let durable = pipeline(
            d.path(),
            ALLOW_ALL,
            Some(&d.path().join("record.aarl")),
            sandbox.clone(),
        );
        g.bench_with_input(BenchmarkId::new("durable", callers), &callers, |b, &n| {
            b.iter_custom(|iters| {
                let per = iters.div_ceil(n).max(1);
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..n {
                        let durable = &durable;
                        s.spawn(move || {
                            for _ in 0..per {
                                durable.call(&CallRequest::new("echo", b"hello")).unwrap();
                            }
                        });
                    }
                });
                // Report the time per call actually made.
                start.elapsed().mul_f64(iters as f64 / (per * n) as f64)
            })
        });
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    policy_yaml(&mut c);
    stations_1_2(&mut c);
    call(&mut c);
}

criterion_main!(benches);
