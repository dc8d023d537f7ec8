//! A capability is an axis of the grant, not a claim of the caller (issue 8, item 4).
//!
//! Found by an outside attacker: with `allow tool notes` and `deny tool notes capability
//! fs.write`, a call that named no capability was asked about with an empty capability,
//! matched only the allow, got the full grant, write roots included, and wrote. Here no
//! way of stating or omitting a capability gets past a deny keyed on one: every call is
//! refused, or runs under a grant that does not carry the denied axis. Each case is
//! checked on the record (which must verify) and on disk, through the real pipeline
//! and the committed `write-file` guest.

use aegis_record::{CapabilityGrant, CapabilityOutcome, PolicyOutcome};
use aegis_runtime::capability::{DEFAULT_LIMITS, NetRule, ToolManifest};
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_suites::{Harness, wasm_tool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The axes a policy can deny, with what the record's grant shows for each.
const AXES: [&str; 3] = ["fs.read", "fs.write", "net.http"];

/// Every way a call can state its capability: none, each real name, and names that
/// are not one (case, whitespace, empty, wildcards, unknown words).
const STATEMENTS: [Option<&str>; 14] = [
    None,
    Some("fs.read"),
    Some("fs.write"),
    Some("net.http"),
    Some(""),
    Some("FS.WRITE"),
    Some("Fs.Read"),
    Some(" fs.write"),
    Some("fs.write "),
    Some("fs.write\n"),
    Some("fs.write\0"),
    Some("*"),
    Some("fs"),
    Some("file.write"),
];

/// A canonical temp dir with a read root and a write root.
struct Roots {
    _dir: tempfile::TempDir,
    read: PathBuf,
    write: PathBuf,
}

fn roots() -> Roots {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (read, write) = (base.join("read"), base.join("write"));
    std::fs::create_dir(&read).unwrap();
    std::fs::create_dir(&write).unwrap();
    Roots {
        _dir: dir,
        read,
        write,
    }
}

/// `notes` (the write-file guest) declares all three axes; `writer` only a write root;
/// `reader` only a read root.
fn tools(r: &Roots) -> Vec<ToolManifest> {
    let mut notes = wasm_tool(
        "notes",
        "write-file",
        &[&r.read],
        &[&r.write],
        DEFAULT_LIMITS,
    );
    notes.net = vec![NetRule {
        host: "example.com".into(),
        ports: vec![80],
        methods: vec!["GET".into()],
    }];
    vec![
        notes,
        wasm_tool("writer", "write-file", &[], &[&r.write], DEFAULT_LIMITS),
        wasm_tool("reader", "write-file", &[&r.read], &[], DEFAULT_LIMITS),
    ]
}

/// Allow each tool, deny `axis` on each.
fn policy(axis: &str) -> String {
    let mut p = String::from("version: 1\ndefault: deny\nrules:\n");
    for tool in ["notes", "writer", "reader"] {
        p.push_str(&format!(
            "  - {{ id: allow-{tool}, action: allow, tool: {tool} }}\n\
             \x20 - {{ id: deny-{tool}, action: deny, tool: {tool}, capability: {axis} }}\n"
        ));
    }
    p
}

/// Whether `grant` (as recorded) carries `axis`. Write roots are readable in the
/// sandbox, so they carry fs.read too.
fn carries(grant: &CapabilityGrant, axis: &str) -> bool {
    let fs = grant.fs.as_ref();
    let reads = fs.is_some_and(|f| !f.read_paths.is_empty() || !f.write_paths.is_empty());
    let writes = fs.is_some_and(|f| !f.write_paths.is_empty());
    match axis {
        "fs.read" => reads,
        "fs.write" => writes,
        "net.http" => grant.net.as_ref().is_some_and(|n| !n.http.is_empty()),
        other => panic!("not an axis: {other}"),
    }
}

fn call(h: &Harness, tool: &str, capability: Option<&str>, target: &Path) -> CallRecord {
    let target = target.to_str().unwrap();
    h.pipeline
        .call(&CallRequest {
            capability,
            args: &[target],
            ..CallRequest::new(tool, b"payload")
        })
        .expect("the record is kept")
}

#[test]
fn no_way_of_stating_a_capability_gets_past_a_deny_keyed_on_it() {
    for denied in AXES {
        let r = roots();
        let h = Harness::new(&policy(denied), tools(&r), BTreeMap::new());
        let mut calls = Vec::new();
        let mut n = 0;
        for tool in ["notes", "writer", "reader"] {
            for stated in STATEMENTS {
                n += 1;
                let target = r.write.join(format!("out-{n}.txt"));
                let rec = call(&h, tool, stated, &target);
                let case = format!("deny {denied}, {tool} naming {stated:?}");
                let granted = match &rec.outcome.capability {
                    CapabilityOutcome::Granted { grant } => {
                        assert!(!carries(grant, denied), "{case}: granted {grant:?}");
                        Some(grant.clone())
                    }
                    CapabilityOutcome::Denied { .. } => None,
                };
                if granted.is_none() {
                    assert_ne!(rec.class(), CallClass::Success, "{case}");
                }
                // On disk: a file appears only under a grant that carried the write root.
                let wrote = target.exists();
                let could_write = granted.as_ref().is_some_and(|g| carries(g, "fs.write"));
                assert!(!wrote || could_write, "{case}: wrote without a write grant");
                if denied != "net.http" {
                    assert!(!wrote, "{case}: wrote past a deny on {denied}");
                }
                calls.push((case, rec));
            }
        }
        // The record verifies and says what each call returned.
        let checked = h.finish();
        for (case, rec) in &calls {
            let recorded = checked.outcome(&rec.outcome.call_id);
            assert_eq!(recorded, &rec.outcome, "{case}");
        }
    }
}

/// The reported case, exactly: allow notes, deny notes fs.write, a call naming nothing.
/// It is refused by policy, on the record with the axis, and nothing is written.
#[test]
fn the_reported_call_naming_no_capability_is_refused_on_its_write_axis() {
    let r = roots();
    let policy = "version: 1\nrules:\n\
                  \x20 - { id: allow-notes, action: allow, tool: notes }\n\
                  \x20 - { id: no-writes, action: deny, tool: notes, capability: fs.write }\n";
    let h = Harness::new(policy, tools(&r), BTreeMap::new());
    let target = r.write.join("pwned.txt");
    let rec = call(&h, "notes", None, &target);
    assert_eq!(rec.class(), CallClass::PolicyDenied);
    let PolicyOutcome::Denied { reason } = &rec.outcome.policy else {
        panic!("{:?}", rec.outcome.policy)
    };
    assert_eq!(reason, "fs.write: denied by rule");
    assert_eq!(
        rec.outcome.decision_axes.matched_rule.as_deref(),
        Some("no-writes")
    );
    assert_eq!(rec.outcome.decision_axes.capability, None);
    assert!(!target.exists());
    // Naming fs.read hands over the write root read-only: allowed, and still no write.
    let rec = call(&h, "notes", Some("fs.read"), &target);
    let CapabilityOutcome::Granted { grant } = &rec.outcome.capability else {
        panic!("{:?}", rec.outcome.capability)
    };
    let fs = grant.fs.as_ref().unwrap();
    assert!(fs.write_paths.is_empty(), "{grant:?}");
    assert!(fs.read_paths.contains(&r.write.display().to_string()));
    assert_eq!(rec.class(), CallClass::Trap, "the guest's write fails");
    assert!(!target.exists());
    // Naming fs.write is refused too.
    let rec = call(&h, "notes", Some("fs.write"), &target);
    assert_eq!(rec.class(), CallClass::PolicyDenied);
    assert!(!target.exists());
    h.finish();
}

/// A rate_limit rule counts one token per call, however many axes the call's grant
/// carries: the policy station is asked about them all in one `evaluate_axes`.
#[test]
fn a_rate_limit_counts_a_call_once_whatever_its_axes() {
    let r = roots();
    let policy = "version: 1\nrules:\n\
                  \x20 - { id: notes-rate, action: rate_limit, tool: notes, rate: { max: 2, per_seconds: 3600 } }\n";
    let h = Harness::new(policy, tools(&r), BTreeMap::new());
    for n in 0..2 {
        let target = r.write.join(format!("ok-{n}.txt"));
        let rec = call(&h, "notes", None, &target);
        assert_eq!(
            rec.class(),
            CallClass::Success,
            "call {n}: {:?}",
            rec.outcome
        );
        assert!(target.exists());
    }
    let rec = call(&h, "notes", None, &r.write.join("third.txt"));
    assert_eq!(rec.class(), CallClass::RateLimited);
    let PolicyOutcome::RateLimited { reason } = &rec.outcome.policy else {
        panic!("{:?}", rec.outcome.policy)
    };
    assert!(
        reason.starts_with("fs.read: rate limit: 2 calls per 3600 s"),
        "{reason}"
    );
    h.finish();
}

/// Every axis's answer narrows the grant: the limits are the narrowest of them all.
#[test]
fn limits_are_the_narrowest_of_every_axis_answer() {
    let r = roots();
    let policy = "version: 1\nrules:\n\
                  \x20 - { id: r, action: allow, tool: notes, capability: fs.read, limits: { max_wall_ms: 3000, max_output_bytes: 900 } }\n\
                  \x20 - { id: w, action: allow, tool: notes, capability: fs.write, limits: { max_output_bytes: 500 } }\n\
                  \x20 - { id: n, action: allow, tool: notes, capability: net.http, limits: { max_memory_bytes: 33554432 } }\n";
    let h = Harness::new(policy, tools(&r), BTreeMap::new());
    let rec = call(&h, "notes", None, &r.write.join("x.txt"));
    let CapabilityOutcome::Granted { grant } = &rec.outcome.capability else {
        panic!("{:?}", rec.outcome.capability)
    };
    assert_eq!(
        (
            grant.max_wall_ms.get(),
            grant.max_output_bytes.get(),
            grant.max_memory_bytes.get()
        ),
        (3000, 500, 33_554_432)
    );
    // The rule recorded for an allow is the first axis's.
    assert_eq!(rec.outcome.decision_axes.matched_rule.as_deref(), Some("r"));
    h.finish();
}
