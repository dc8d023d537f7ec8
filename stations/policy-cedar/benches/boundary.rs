//! The Cedar station beside the YAML station, as the host asks them
//! (`evaluate_axes_indexed`, one axis), plain and through their loaded cdylibs, in one
//! run so the ratio Cedar / YAML is fair:
//! `policy_boundary/{allow_all,multi_rule}/{yaml,cedar}_{plain,loaded}`.
//!
//! The policies are those of `policy_yaml/*` in `benches/benches/pipeline.rs` and
//! their Cedar forms; the request is `read-notes`, `fs.read`, role `ops`. The loaded
//! forms need the release cdylibs first:
//! `cargo build --release -p aegis-policy-cedar-plugin -p aegis-policy-yaml-plugin`.

use aegis_station_api::abi_stable::library::lib_header_from_path;
use aegis_station_api::abi_stable::std_types::{RSlice, RSliceMut, RStr};
use aegis_station_api::{
    IndexedDecision, PluginModuleRef, PolicyEvaluatorBox, PolicyRequest, Verdict,
};
use criterion::{BenchmarkId, Criterion, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};

const CEDAR_SCHEMA: &str = include_str!("../../../examples/cedar/schema.cedarschema");

/// Twenty rules; the request can be matched by eight, decided by `notes-ops`.
fn multi_rule_yaml() -> String {
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

/// The same twenty rules in Cedar: two permits are satisfied (`notes-any` is named).
fn multi_rule_cedar() -> String {
    let mut c = String::new();
    for i in 0..6 {
        c += &format!(
            "@id(\"deny-tool-{i}\") forbid (principal, action, resource == Tool::\"shell-{i}\");\n"
        );
        c += &format!(
            "@id(\"rate-{i}\") @rate_limit(\"100/minute\") permit (principal, action, resource == Tool::\"search-{i}\");\n"
        );
        c += &format!(
            "@id(\"role-{i}\") permit (principal == Role::\"team-{i}\", action, resource);\n"
        );
    }
    c += "@id(\"notes-any\") permit (principal, action, resource == Tool::\"read-notes\");\n";
    c += "@id(\"echo-ops\") permit (principal == Role::\"ops\", action, resource == Tool::\"echo\");\n";
    c += "@id(\"notes-ops\") permit (principal == Role::\"ops\", action, resource == Tool::\"read-notes\");\n";
    c
}

fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("bench binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_owned()
}

/// A policy evaluator from the release cdylib `lib<name>.so`, loaded as the host loads one.
fn loaded(name: &str, config: &str) -> PolicyEvaluatorBox {
    let path = release_dir().join(format!("lib{name}.so"));
    let module = lib_header_from_path(&path)
        .and_then(|h| h.init_root_module::<PluginModuleRef>())
        .unwrap_or_else(|e| panic!("{}: {e} (build the release cdylibs first)", path.display()));
    (module.new_policy_evaluator())(config.into())
        .into_result()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn request() -> PolicyRequest<'static> {
    PolicyRequest {
        tool_id: RStr::from("read-notes"),
        capability: RStr::from("fs.read"),
        role: RStr::from("ops"),
        session: RStr::from("s-1"),
    }
}

fn boundary(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.cedarschema");
    std::fs::write(&schema, CEDAR_SCHEMA).unwrap();
    let req = request();
    let axes = [RStr::from("fs.read")];
    let mut g = c.benchmark_group("policy_boundary");
    for (name, yaml, cedar) in [
        (
            "allow_all",
            "version: 1\ndefault: allow\n".to_owned(),
            "@id(\"all\") permit (principal, action, resource);".to_owned(),
        ),
        ("multi_rule", multi_rule_yaml(), multi_rule_cedar()),
    ] {
        let yaml_path = dir.path().join(format!("{name}.yaml"));
        let cedar_path = dir.path().join(format!("{name}.cedar"));
        std::fs::write(&yaml_path, &yaml).unwrap();
        std::fs::write(&cedar_path, &cedar).unwrap();
        let yaml_plain = aegis_policy_yaml::PolicyEngine::new(
            aegis_policy_yaml::PolicySet::parse(&yaml, "bench").unwrap(),
        );
        let cedar_plain = aegis_policy_cedar::CedarEngine::new(
            aegis_policy_cedar::CedarSet::parse(&cedar, "bench", CEDAR_SCHEMA, "schema").unwrap(),
        );
        for (form, plain) in [
            ("yaml_plain", &yaml_plain as &dyn aegis_station_api::Policy),
            ("cedar_plain", &cedar_plain),
        ] {
            let mut slots = [IndexedDecision::default(); 1];
            plain
                .evaluate_axes_indexed(&req, &axes, &mut slots)
                .unwrap();
            assert_eq!(slots[0].verdict, Verdict::ALLOW, "{name}/{form}");
            g.bench_function(BenchmarkId::new(name, form), |b| {
                b.iter(|| {
                    let mut slots = [IndexedDecision::default(); 1];
                    let a = plain.evaluate_axes_indexed(black_box(&req), &axes, &mut slots);
                    black_box((a, slots))
                })
            });
        }
        let yaml_loaded = loaded(
            "aegis_policy_yaml_plugin",
            &format!("path = {:?}", yaml_path.display().to_string()),
        );
        let cedar_loaded = loaded(
            "aegis_policy_cedar_plugin",
            &format!(
                "policies = {:?}\nschema = {:?}",
                cedar_path.display().to_string(),
                schema.display().to_string()
            ),
        );
        for (form, station) in [
            ("yaml_loaded", &yaml_loaded),
            ("cedar_loaded", &cedar_loaded),
        ] {
            let mut slots = [IndexedDecision::default(); 1];
            station
                .evaluate_axes_indexed(
                    &req,
                    RSlice::from_slice(&axes),
                    RSliceMut::from(&mut slots[..]),
                )
                .unwrap();
            assert_eq!(slots[0].verdict, Verdict::ALLOW, "{name}/{form}");
            g.bench_function(BenchmarkId::new(name, form), |b| {
                b.iter(|| {
                    let mut slots = [IndexedDecision::default(); 1];
                    let a = station.evaluate_axes_indexed(
                        black_box(&req),
                        RSlice::from_slice(&axes),
                        RSliceMut::from(&mut slots[..]),
                    );
                    black_box((a, slots))
                })
            });
        }
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    boundary(&mut c);
}

criterion_main!(benches);
