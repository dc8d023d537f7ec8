//! The capability station: default-deny, canonical roots, least authority, and grants
//! that narrowing never widens.

use aegis_runtime::capability::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn manifest(id: &str, read: &[&Path], write: &[&Path]) -> ToolManifest {
    ToolManifest {
        id: id.into(),
        kind: ToolKind::Host,
        fs_read: read.iter().map(|p| p.to_path_buf()).collect(),
        fs_write: write.iter().map(|p| p.to_path_buf()).collect(),
        net: vec![NetRule {
            host: "API.example.test".into(),
            ports: vec![443],
            methods: vec!["get".into()],
        }],
        limits: DEFAULT_LIMITS,
    }
}

#[test]
fn default_deny_and_registration_checks() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut reg = ToolRegistry::new();
    let none = NarrowingLimits::default();
    assert_eq!(
        reg.resolve("notes", None, &none).unwrap_err(),
        CapabilityDenied::Unregistered("notes".into())
    );
    assert_eq!(
        reg.resolve("notes", None, &none).unwrap_err().axis(),
        "tool.registry"
    );

    // Roots are canonicalized once: `..` and symlinks resolve to the real directory.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&data, &link).unwrap();
    let dotted = data.join("..").join("link");
    reg.register(manifest("notes", &[&dotted], &[])).unwrap();
    let m = reg.manifest("notes").unwrap();
    assert_eq!(m.fs_read, vec![std::fs::canonicalize(&data).unwrap()]);
    assert_eq!(m.net[0].host, "api.example.test");
    assert_eq!(m.net[0].methods, vec!["GET".to_owned()]);

    assert!(matches!(
        reg.register(manifest("notes", &[&data], &[])),
        Err(RegistrationError::DuplicateId(_))
    ));
    assert!(matches!(
        reg.register(manifest("gone", &[&dir.path().join("missing")], &[])),
        Err(RegistrationError::Root { .. })
    ));
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(
        reg.register(manifest("file-root", &[&file], &[])),
        Err(RegistrationError::NotADirectory { .. })
    ));
    let mut wasm = manifest("wasm", &[], &[]);
    wasm.kind = ToolKind::Wasm {
        component: dir.path().join("missing.wasm"),
    };
    assert!(matches!(
        reg.register(wasm),
        Err(RegistrationError::Component { .. })
    ));
    let mut zero = manifest("zero", &[], &[]);
    zero.limits.max_wall_ms = 0;
    assert!(matches!(
        reg.register(zero),
        Err(RegistrationError::Limit {
            field: "max_wall_ms",
            ..
        })
    ));

    // An undeclared capability is refused and named.
    let e = reg.resolve("notes", Some("fs.write"), &none).unwrap_err();
    assert_eq!(e.axis(), "fs.write");
    assert!(reg.resolve("notes", Some("exec"), &none).is_err());

    // A root deleted after registration: minting makes no system call, so the grant
    // is minted; checking its roots (as execution does first) refuses it, naming it.
    let held = reg.resolve("notes", Some("fs.read"), &none).unwrap();
    held.check_roots().unwrap();
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_dir(&data).unwrap();
    let grant = reg.resolve("notes", Some("fs.read"), &none).unwrap();
    let gone = grant.check_roots().unwrap_err();
    assert_eq!(gone.tool, "notes");
    assert!(
        gone.to_string().contains("removed since registration"),
        "{gone}"
    );
    assert!(
        held.check_roots().is_err(),
        "a grant minted before is refused too"
    );
}

#[test]
fn a_named_capability_gets_only_its_axis() {
    let dir = tempfile::tempdir().unwrap();
    let (r, w) = (dir.path().join("r"), dir.path().join("w"));
    std::fs::create_dir(&r).unwrap();
    std::fs::create_dir(&w).unwrap();
    let mut reg = ToolRegistry::new();
    reg.register(manifest("t", &[&r], &[&w])).unwrap();
    let none = NarrowingLimits::default();
    let read = reg.resolve("t", Some("fs.read"), &none).unwrap();
    assert!(read.fs_write().is_empty() && read.net().is_empty());
    assert_eq!(
        read.fs_read().len(),
        2,
        "read covers the write roots, read-only"
    );
    let write = reg.resolve("t", Some("fs.write"), &none).unwrap();
    assert!(write.fs_read().is_empty() && write.net().is_empty() && write.fs_write().len() == 1);
    let net = reg.resolve("t", Some("net.http"), &none).unwrap();
    assert!(net.fs_read().is_empty() && net.fs_write().is_empty() && net.net().len() == 1);
    let all = reg.resolve("t", None, &none).unwrap();
    assert_eq!(
        (all.fs_read().len(), all.fs_write().len(), all.net().len()),
        (1, 1, 1)
    );
    assert_ne!(all.id(), net.id(), "every grant has its own id");
    let record = all.to_record();
    assert_eq!(record.fs.unwrap().write_paths.len(), 1);
}

fn limits() -> impl Strategy<Value = Limits> {
    (1u64..=1 << 40, 1u64..=1 << 30, 1u64..=1 << 40).prop_map(|(m, w, o)| Limits {
        max_memory_bytes: m,
        max_wall_ms: w,
        max_output_bytes: o,
    })
}

fn narrowing() -> impl Strategy<Value = NarrowingLimits> {
    (
        proptest::option::of(0u64..=u64::MAX),
        proptest::option::of(0u64..=u64::MAX),
        proptest::option::of(0u64..=u64::MAX),
    )
        .prop_map(|(m, w, o)| NarrowingLimits {
            max_memory_bytes: m,
            max_wall_ms: w,
            max_output_bytes: o,
        })
}

fn within(child: Limits, parent: Limits) -> bool {
    child.max_memory_bytes <= parent.max_memory_bytes
        && child.max_wall_ms <= parent.max_wall_ms
        && child.max_output_bytes <= parent.max_output_bytes
}

fn subset(child: &[PathBuf], parent: &[PathBuf]) -> bool {
    child.iter().all(|c| parent.contains(c))
}

proptest! {
    /// Whatever the manifest, the roots, the capability asked for and the policy's
    /// limits, a grant never exceeds its manifest on any axis, never exceeds the policy's
    /// limits, and narrowing a grant again never widens it.
    #[test]
    fn a_grant_never_exceeds_its_parent(
        manifest_limits in limits(),
        policy in narrowing(),
        again in narrowing(),
        reads in proptest::collection::vec(0usize..4, 0..4),
        writes in proptest::collection::vec(0usize..4, 0..3),
        capability in proptest::option::of(prop_oneof![Just("fs.read"), Just("fs.write"), Just("net.http")]),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let roots: Vec<PathBuf> = (0..4).map(|i| {
            let p = dir.path().join(format!("root{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        }).collect();
        let mut reads: Vec<&Path> = reads.iter().map(|&i| roots[i].as_path()).collect();
        let mut writes: Vec<&Path> = writes.iter().map(|&i| roots[i].as_path()).collect();
        reads.dedup();
        writes.dedup();
        let mut m = manifest("t", &reads, &writes);
        m.limits = manifest_limits;
        let mut reg = ToolRegistry::new();
        reg.register(m).unwrap();
        let parent = reg.manifest("t").unwrap().clone();
        match reg.resolve("t", capability, &policy) {
            Ok(grant) => {
                prop_assert!(within(grant.limits(), parent.limits));
                let cap = |v: Option<u64>, g: u64| v.is_none_or(|v| g <= v);
                prop_assert!(cap(policy.max_memory_bytes, grant.limits().max_memory_bytes));
                prop_assert!(cap(policy.max_wall_ms, grant.limits().max_wall_ms));
                prop_assert!(cap(policy.max_output_bytes, grant.limits().max_output_bytes));
                let readable: Vec<PathBuf> = parent.fs_read.iter().chain(&parent.fs_write).cloned().collect();
                prop_assert!(subset(grant.fs_read(), &readable));
                prop_assert!(subset(grant.fs_write(), &parent.fs_write));
                prop_assert!(grant.net().iter().all(|r| parent.net.contains(r)));
                let narrower = grant.narrow(&again);
                prop_assert!(within(narrower.limits(), grant.limits()));
                prop_assert_eq!(narrower.fs_read(), grant.fs_read());
                prop_assert_eq!(narrower.fs_write(), grant.fs_write());
            }
            Err(CapabilityDenied::Undeclared { capability: c, .. }) => {
                // Refused only when the manifest really lacks the axis.
                let declared = match c.as_str() {
                    "fs.read" => !parent.fs_read.is_empty() || !parent.fs_write.is_empty(),
                    "fs.write" => !parent.fs_write.is_empty(),
                    _ => !parent.net.is_empty(),
                };
                prop_assert!(!declared);
            }
            Err(other) => prop_assert!(false, "unexpected refusal {other}"),
        }
    }
}

/// A wasm tool's component is hashed once, at registration: every grant for it (and
/// its record form) names that digest, even after the file changes; a host tool's
/// grant names none.
#[test]
fn a_wasm_grant_names_the_component_registered() {
    let dir = tempfile::tempdir().unwrap();
    let component = dir.path().join("tool.wasm");
    std::fs::write(&component, b"\0asm first bytes").unwrap();
    let mut reg = ToolRegistry::new();
    let mut wasm = manifest("wasm", &[], &[]);
    wasm.kind = ToolKind::Wasm {
        component: component.clone(),
    };
    reg.register(wasm).unwrap();
    reg.register(manifest("host", &[], &[])).unwrap();
    let none = NarrowingLimits::default();
    let registered = aegis_record::ComponentDigest::of_component(b"\0asm first bytes");
    std::fs::write(&component, b"\0asm other bytes").unwrap();
    let grant = reg.resolve("wasm", None, &none).unwrap();
    assert_eq!(grant.component_digest(), Some(registered));
    assert_eq!(grant.to_record().component_digest, Some(registered));
    assert_eq!(
        grant.narrow(&none).to_record().component_digest,
        Some(registered)
    );
    let host = reg.resolve("host", None, &none).unwrap();
    assert_eq!(host.to_record().component_digest, None);
}

/// A relayed tool's grant hands nothing over and says it is relayed; only a registry
/// told to relay unregistered tools grants them, and never an axis.
#[test]
fn relayed_tools_get_a_grant_with_nothing_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let none = NarrowingLimits::default();
    let mut reg = ToolRegistry::new();
    // A relayed tool cannot be given roots: the host cannot confine its server.
    assert!(matches!(
        reg.register(ToolManifest {
            kind: ToolKind::Relayed,
            ..manifest("rooted", &[dir.path()], &[])
        }),
        Err(RegistrationError::Invalid { .. })
    ));
    assert_eq!(
        reg.resolve("listed", None, &none).unwrap_err(),
        CapabilityDenied::Unregistered("listed".into())
    );
    reg.relay_unregistered(DEFAULT_LIMITS);
    let grant = reg.resolve("listed", None, &none).unwrap();
    assert!(grant.is_relayed());
    assert!(grant.id().starts_with("relayed-listed-"));
    assert!(grant.axes().is_empty() && grant.fs_read().is_empty() && grant.net().is_empty());
    assert_eq!(grant.component_digest(), None);
    let record = grant.to_record();
    assert!(record.fs.is_none() && record.net.is_none());
    assert!(reg.axes("listed", None).unwrap().is_empty());
    assert!(matches!(
        reg.resolve("listed", Some("fs.read"), &none),
        Err(CapabilityDenied::Undeclared { .. })
    ));
    // A registered tool keeps its manifest.
    reg.register(manifest("notes", &[dir.path()], &[])).unwrap();
    let notes = reg.resolve("notes", None, &none).unwrap();
    assert!(!notes.is_relayed());
    assert!(notes.id().starts_with("grant-notes-"));
    // A registered relayed tool: the same empty grant.
    reg.register(ToolManifest {
        kind: ToolKind::Relayed,
        net: Vec::new(),
        ..manifest("relayed", &[], &[])
    })
    .unwrap();
    let relayed = reg.resolve("relayed", None, &none).unwrap();
    assert!(relayed.is_relayed() && relayed.axes().is_empty());
}
