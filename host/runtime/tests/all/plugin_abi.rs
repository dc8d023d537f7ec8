//! Plugins loaded from their built cdylibs: every kind, several libraries in one
//! process, incompatible libraries refused in one line, panics contained, the checks
//! made before a library is opened, and the retention rule over real sinks.

use aegis_record::verify::{Options, Trust, Verdict, verify};
use aegis_record::{IntentLine, RequestDigest, SigningKey};
use aegis_runtime::audit::{AuditNotice, RetentionError, open_audit};
use aegis_runtime::{LoadError, Plugin, Profile, ProfileSource};
use aegis_station_api::abi_stable::std_types::{RSlice, RStr};
use aegis_station_api::{
    ConfinementLevel, ConfinementRequest, Enforcement, ErrorKind, Kinds, PolicyRequest, Retention,
    Verdict as PolicyVerdict,
};

use aegis_test_support as support;
use support::cdylib;

fn request(tool: &str) -> PolicyRequest<'_> {
    PolicyRequest {
        tool_id: RStr::from(tool),
        capability: RStr::from("fs.read"),
        role: RStr::from("ops"),
        session: RStr::from(""),
    }
}

/// Opens `sink` under a freshly generated key, as an operator with a real key would.
fn open_with_fresh_key(
    sink: aegis_station_api::AuditSinkBox,
    plugin: &Plugin,
) -> Result<aegis_runtime::OpenedAudit, RetentionError> {
    open_audit(
        sink,
        plugin,
        Some(SigningKey::generate().unwrap()),
        &profile(),
        &[],
    )
}

fn profile() -> Profile {
    Profile::find("default").unwrap()
}

#[test]
fn every_kind_loads_from_its_cdylib_and_libraries_coexist() {
    let misbehaving = Plugin::load(&cdylib("aegis-test-plugin-misbehaving"), None).unwrap();
    let m = misbehaving.metadata();
    assert_eq!(m.name, "misbehaving");
    assert!(
        m.kinds
            .contains(Kinds::POLICY.with(Kinds::CONFINEMENT).with(Kinds::SINK))
    );

    let policy = misbehaving.policy_evaluator("").unwrap();
    let decision = policy
        .evaluate(&request("read-notes"))
        .into_result()
        .unwrap();
    assert_eq!(decision.verdict, PolicyVerdict::DENY);

    let backend = misbehaving.confinement_backend("").unwrap();
    let none: &[RStr<'_>] = &[];
    let report = backend
        .apply(&ConfinementRequest {
            read_paths: RSlice::from_slice(none),
            exec_paths: RSlice::from_slice(none),
            write_paths: RSlice::from_slice(none),
            net_connect: RSlice::from_slice(none),
            level: ConfinementLevel::BEST_EFFORT,
        })
        .into_result()
        .unwrap();
    assert_eq!(report.enforcement, Enforcement::NONE);
    assert_eq!(report.gaps.len(), 1);

    // Three more libraries, loaded beside the first, all usable at once.
    let file = Plugin::load(&cdylib("aegis-sink-file-plugin"), None).unwrap();
    let memory = Plugin::load(&cdylib("aegis-sink-memory-plugin"), None).unwrap();
    let fixed = Plugin::load(&cdylib("aegis-policy-static-plugin"), None).unwrap();
    assert_eq!(file.metadata().name, "file-sink");
    assert_eq!(memory.metadata().name, "memory-sink");
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!("path = {:?}\n", dir.path().join("r.aarl"));
    assert_eq!(
        file.audit_sink(&cfg).unwrap().retention(),
        Retention::DURABLE
    );
    assert_eq!(
        memory.audit_sink("").unwrap().retention(),
        Retention::VOLATILE
    );
    let allow = fixed.policy_evaluator("verdict = \"allow\"").unwrap();
    assert_eq!(
        allow.evaluate(&request("x")).into_result().unwrap().verdict,
        PolicyVerdict::ALLOW
    );
    assert_eq!(
        policy
            .evaluate(&request("x"))
            .into_result()
            .unwrap()
            .verdict,
        PolicyVerdict::DENY
    );
    // A kind a library lacks answers `unsupported`.
    assert_eq!(
        memory.policy_evaluator("").err().unwrap().kind,
        ErrorKind::UNSUPPORTED
    );
}

#[test]
fn incompatible_libraries_are_refused_in_one_line() {
    let e = Plugin::load(&cdylib("aegis-test-plugin-incompatible-major"), None)
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains("libaegis_test_plugin_incompatible_major.so"),
        "{e}"
    );
    assert!(
        e.contains("built against station API 2.0.0, this host speaks 1.0.0"),
        "{e}"
    );

    let e = Plugin::load(&cdylib("aegis-test-plugin-incompatible-layout"), None)
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.contains("libaegis_test_plugin_incompatible_layout.so"),
        "{e}"
    );
    assert!(
        e.contains("built against station API 1.0.0, whose types differ from this host's 1.0.0"),
        "{e}"
    );
    assert!(
        e.contains("first difference: PluginModule: mismatched package (expected aegis-station-api, found aegis-test-plugin-incompatible-layout)"),
        "{e}"
    );
    assert!(e.len() < 400, "{e}");
}

/// A plugin built against a copy of this very station API (same package, same version)
/// with one field added is refused, and the line names the type and the sizes.
#[test]
fn a_plugin_built_against_an_altered_api_is_refused_naming_the_type() {
    let so = support::altered_api_plugin();
    let e = Plugin::load(&so, None).unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(
        e.ends_with(
            "built against station API 1.0.0, whose types differ from this host's 1.0.0; first difference: PolicyRequest<'a>: incompatible type size (expected 64, found 80)"
        ),
        "{e}"
    );
}

#[test]
fn a_panicking_plugin_becomes_an_error_and_the_host_keeps_working() {
    let plugin = Plugin::load(&cdylib("aegis-test-plugin-misbehaving"), None).unwrap();
    let policy = plugin.policy_evaluator("").unwrap();
    let err = policy
        .evaluate(&request("panic"))
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PANIC);
    assert!(
        err.message.contains("evaluate panicked on purpose"),
        "{}",
        err.message
    );
    // The same object still answers afterwards.
    assert!(
        policy
            .evaluate(&request("read-notes"))
            .into_result()
            .is_ok()
    );

    let err = plugin
        .policy_evaluator("panic_on_build = true")
        .err()
        .unwrap();
    assert_eq!(err.kind, ErrorKind::PANIC);

    let sink = plugin.audit_sink("tail = \"panic\"").unwrap();
    let err = open_with_fresh_key(sink, &plugin).unwrap_err();
    assert!(
        matches!(err, RetentionError::TailUnreadable { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("panicked"), "{err}");
}

#[test]
fn a_durable_sink_that_cannot_answer_its_tail_is_refused() {
    let plugin = Plugin::load(&cdylib("aegis-test-plugin-misbehaving"), None).unwrap();
    let sink = plugin.audit_sink("").unwrap();
    let err = open_with_fresh_key(sink, &plugin).unwrap_err();
    assert!(
        matches!(err, RetentionError::TailUnreadable { .. }),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'));
}

#[cfg(unix)]
#[test]
fn files_are_checked_before_they_are_opened() {
    use std::os::unix::fs::PermissionsExt as _;
    let original = cdylib("aegis-sink-memory-plugin");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("libcopy.so");
    std::fs::copy(&original, &copy).unwrap();

    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        Plugin::load(&copy, None),
        Err(LoadError::Writable { mode: 0o666, .. })
    ));
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();

    let link = dir.path().join("liblink.so");
    std::os::unix::fs::symlink(&copy, &link).unwrap();
    assert!(matches!(
        Plugin::load(&link, None),
        Err(LoadError::NotRegularFile { .. })
    ));

    assert!(matches!(
        Plugin::load(&copy, Some(&[0; 32])),
        Err(LoadError::PinMismatch { .. })
    ));
    let digest: [u8; 32] = {
        use sha2::Digest as _;
        sha2::Sha256::digest(std::fs::read(&copy).unwrap()).into()
    };
    let loaded = Plugin::load(&copy, Some(&digest)).unwrap();
    assert_eq!(
        loaded.origin().digest_label(),
        aegis_record::digest::LineHash::from_bytes(digest).to_hex()
    );

    let not_a_plugin = dir.path().join("libnot.so");
    std::fs::write(&not_a_plugin, b"not an elf file").unwrap();
    let e = Plugin::load(&not_a_plugin, None).unwrap_err().to_string();
    assert!(e.contains("cannot be opened") && !e.contains('\n'), "{e}");
}

fn write_session(plugin: &Plugin, config: &str, key: &SigningKey, calls: usize) -> AuditNotice {
    let sink = plugin.audit_sink(config).unwrap();
    let opened = open_audit(
        sink,
        plugin,
        Some(key.clone()),
        &profile(),
        &[("audit", plugin)],
    )
    .unwrap();
    for i in 0..calls {
        opened
            .session
            .append_unsigned(&IntentLine {
                call_id: format!("call-{i}"),
                tool_id: "echo".into(),
                request_digest: RequestDigest::of_request(b"x"),
            })
            .unwrap();
    }
    let notice = opened.notice.clone();
    opened.session.close().unwrap();
    notice
}

/// A session written through the loaded file sink verifies, and a session appended
/// later (a new process would open a new sink) chains to the first.
#[test]
fn sessions_through_the_loaded_file_sink_verify_and_chain() {
    let plugin = Plugin::load(&cdylib("aegis-sink-file-plugin"), None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.aarl");
    let config = format!("path = {:?}\n", path);
    let key = SigningKey::generate().unwrap();
    let notice = write_session(&plugin, &config, &key, 2);
    assert_eq!(notice.to_string(), format!("Audit: {}", path.display()));
    write_session(&plugin, &config, &key, 1);

    let bytes = std::fs::read(&path).unwrap();
    let report = verify(
        &bytes[..],
        &Options {
            trust: Some(vec![key.public_key().into()]),
            threads: 0,
            approvers: None,
        },
    )
    .unwrap();
    assert_eq!(
        report.verdict(),
        &Verdict::Verified(Trust::PinnedTo(key.key_id()))
    );
    assert_eq!(report.coverage().unwrap().session, 1);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("\"prev_session_tail\""));
    assert!(text.contains("\"retention\":\"durable\""));
    assert!(text.contains(&format!(
        "\"library_sha256\":\"{}\"",
        plugin.origin().digest_label()
    )));
}

#[test]
fn the_retention_rule_holds_for_loaded_sinks() {
    let file = Plugin::load(&cdylib("aegis-sink-file-plugin"), None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.aarl");
    let sink = file.audit_sink(&format!("path = {:?}\n", path)).unwrap();
    let err = open_audit(sink, &file, None, &profile(), &[]).unwrap_err();
    assert!(matches!(
        err,
        RetentionError::DevelopmentKeyOnDurable { .. }
    ));
    assert!(err.to_string().contains("aegis keygen"), "{err}");
    assert!(!path.exists(), "a refused open leaves no file");
    // Every key whose seed is published is refused by name, and the refused open
    // leaves no empty record file behind.
    for published in aegis_record::key::PUBLISHED_TEST_KEYS {
        let sink = file.audit_sink(&format!("path = {:?}\n", path)).unwrap();
        let key = SigningKey::from_seed(published.seed);
        let err = open_audit(sink, &file, Some(key.clone()), &profile(), &[]).unwrap_err();
        assert!(
            matches!(err, RetentionError::PublishedKeyOnDurable { .. }),
            "{err}"
        );
        let said = err.to_string();
        assert!(said.contains(published.name), "{said}");
        assert!(said.contains(&key.key_id().to_hex()), "{said}");
        assert!(!path.exists(), "a refused open leaves no file");
    }

    std::fs::write(&path, b"{\"half a line").unwrap();
    let sink = file.audit_sink(&format!("path = {:?}\n", path)).unwrap();
    let err = open_audit(
        sink,
        &file,
        Some(SigningKey::generate().unwrap()),
        &profile(),
        &[],
    )
    .unwrap_err();
    assert!(matches!(err, RetentionError::TornTail { .. }), "{err}");

    let memory = Plugin::load(&cdylib("aegis-sink-memory-plugin"), None).unwrap();
    let sink = memory.audit_sink("").unwrap();
    let opened = open_audit(sink, &memory, None, &profile(), &[("audit", &memory)]).unwrap();
    assert_eq!(
        opened.notice.to_string(),
        "Audit: (volatile sink — records are not retained)"
    );
    opened.session.close().unwrap();
}

#[test]
fn the_embedded_default_profile_resolves_every_station() {
    let p = Profile::parse(
        aegis_runtime::profile::EMBEDDED[0].1,
        "embedded:default",
        ProfileSource::Embedded,
    )
    .unwrap();
    let registry = aegis_runtime::Registry::new();
    let policy = p.resolve(&registry, "policy", &p.policy).unwrap();
    let audit = p.resolve(&registry, "audit", &p.audit).unwrap();
    assert_eq!(policy.origin(), &aegis_runtime::Origin::Builtin);
    let evaluator = policy.policy_evaluator(&p.policy.config).unwrap();
    assert_eq!(
        evaluator
            .evaluate(&request("x"))
            .into_result()
            .unwrap()
            .verdict,
        PolicyVerdict::ALLOW
    );
    assert_eq!(
        audit.audit_sink(&p.audit.config).unwrap().retention(),
        Retention::VOLATILE
    );
}

/// A session kept by the loaded memory sink exports and verifies — unpinned, and marked
/// as signed by the public development key, which is all a volatile sink gets by default.
#[test]
fn a_session_through_the_loaded_memory_sink_verifies() {
    let plugin = Plugin::load(&cdylib("aegis-sink-memory-plugin"), None).unwrap();
    let sink = plugin.audit_sink("").unwrap();
    let opened = open_audit(sink, &plugin, None, &profile(), &[("audit", &plugin)]).unwrap();
    opened
        .session
        .append_unsigned(&IntentLine {
            call_id: "call-1".into(),
            tool_id: "echo".into(),
            request_digest: RequestDigest::of_request(b"x"),
        })
        .unwrap();
    let record = opened.close_and_export().unwrap();
    assert_eq!(record.iter().filter(|&&b| b == b'\n').count(), 3);
    let report = verify(&record[..], &Options::default()).unwrap();
    assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    assert!(
        report
            .to_text()
            .contains("(the public development key: proves nothing)")
    );
}

/// A policy with every verdict, both kinds of reason (a rule's own and the station's
/// fixed text), limits, a rate limit that runs out and a default.
const EVERY_VERDICT: &str = "version: 1
default: deny
rules:
  - id: read-ops
    action: allow
    tool: notes
    role: ops
    reason: ops may read the notes
    limits: { max_wall_ms: 500 }
  - id: read-any
    action: allow
    tool: notes
  - id: no-writes
    action: deny
    tool: notes
    capability: fs.write
  - id: echo-once
    action: rate_limit
    tool: echo
    rate: { max: 1, per_seconds: 3600 }
  - id: park
    action: pending_approval
    tool: park
";

/// A host deciding with `policy`, over tools that between them reach every rule of
/// [`EVERY_VERDICT`]: `notes` carries a read and a write root (two axes).
fn host_with(policy: Plugin, config: &str, dir: &std::path::Path) -> aegis_runtime::Host {
    use aegis_runtime::capability::{DEFAULT_LIMITS, ToolKind, ToolManifest};
    let echo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/wasm/echo.wasm");
    let (read, write) = (dir.join("read"), dir.join("write"));
    std::fs::create_dir_all(&read).unwrap();
    std::fs::create_dir_all(&write).unwrap();
    let mut builder = aegis_runtime::Host::builder(profile())
        .policy_plugin("the test", policy, config)
        .signing_key(SigningKey::generate().unwrap());
    for (id, fs_read, fs_write) in [
        ("notes", vec![read.clone()], vec![write.clone()]),
        ("echo", vec![], vec![]),
        ("park", vec![], vec![]),
        ("other", vec![], vec![]),
    ] {
        builder = builder.tool(ToolManifest {
            id: id.into(),
            kind: ToolKind::Wasm {
                component: echo.clone(),
            },
            fs_read,
            fs_write,
            net: vec![],
            limits: DEFAULT_LIMITS,
        });
    }
    builder.open().unwrap()
}

/// The call's arguments cross the boundary: the YAML station loaded from its cdylib
/// decides a rule over a path argument through `evaluate_call`, normalising the path,
/// reports the value it compared, and refuses when the arguments are not given.
#[test]
fn a_loaded_policy_plugin_decides_on_arguments() {
    use aegis_station_api::IndexedDecision;
    use aegis_station_api::abi_stable::std_types::RSliceMut;

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ndefault: deny\nrules:\n  - id: data-only\n    action: allow\n    \
         tool: notes\n    arguments:\n      path: { under: /data }\n",
    )
    .unwrap();
    let config = format!("path = {:?}", policy.display().to_string());
    let plugin = Plugin::load(&cdylib("aegis-policy-yaml-plugin"), None).unwrap();
    let evaluator = plugin.policy_evaluator(&config).unwrap();
    let axes = [RStr::from("fs.read")];
    let ask = |arguments: &str| {
        let mut slot = [IndexedDecision::default(); 1];
        let a = evaluator
            .evaluate_call(
                &request("notes"),
                RStr::from(arguments),
                RSlice::from_slice(&axes),
                RSliceMut::from(&mut slot[..]),
            )
            .into_result()
            .unwrap();
        (
            slot[0].verdict,
            a.answer.table.rule(slot[0].rule).map(str::to_owned),
            a.arguments_read.to_string(),
            a.arguments_needed,
        )
    };
    assert_eq!(
        ask(r#"{"path":"/data/./a"}"#),
        (
            PolicyVerdict::ALLOW,
            Some("data-only".into()),
            r#"{"path":"/data/a"}"#.into(),
            false
        )
    );
    assert_eq!(
        ask(r#"{"path":"/data/../etc/passwd"}"#),
        (PolicyVerdict::DENY, None, String::new(), false)
    );
    let (verdict, rule, _, needed) = ask("");
    assert_eq!(
        (verdict, rule.as_deref(), needed),
        (PolicyVerdict::DENY, Some("data-only"), true)
    );
}

/// What happens to an older policy plugin. The YAML station built against the station
/// API as it was before `evaluate_axes_indexed` (tests/plugin-abi/previous-api) is
/// refused at load: abi_stable 0.11's layout check refuses a library whose trait vtable
/// has fewer entries than the host's, though the entry was added after the last prefix
/// field with a default body. So the method's default body serves authors who do not
/// override it, not older libraries. (Found by this test; the same check applies to
/// `evaluate_axes`, added the same way before it.) The current build, loaded or built
/// in, shares its set's table and records byte for byte the same lines.
#[test]
fn a_policy_plugin_built_before_indexed_answers_is_refused_and_the_current_build_agrees() {
    use aegis_runtime::pipeline::CallRequest;
    use aegis_station_api::IndexedDecision;
    use aegis_station_api::abi_stable::std_types::RSliceMut;

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, EVERY_VERDICT).unwrap();
    let config = format!("path = {:?}", policy.display().to_string());
    let older = match Plugin::load(&support::previous_api_yaml_plugin(), None) {
        Ok(_) => panic!("an older policy plugin loaded"),
        Err(e) => e.to_string(),
    };
    assert!(!older.contains('\n'), "{older}");
    assert!(
        older.ends_with("first difference: VTable: too many fields (expected 9, found 5)"),
        "{older}"
    );
    let current = Plugin::load(&cdylib("aegis-policy-yaml-plugin"), None).unwrap();

    // The current station shares its set's table: every rule id, the same allocation
    // each call (a per-call table from the default body would hold one rule).
    let evaluator = current.policy_evaluator(&config).unwrap();
    let axes = [RStr::from("fs.read")];
    let answer = |slots: &mut [IndexedDecision; 1]| {
        evaluator
            .evaluate_axes_indexed(
                &request("notes"),
                RSlice::from_slice(&axes),
                RSliceMut::from(&mut slots[..]),
            )
            .into_result()
            .unwrap()
    };
    let (mut one, mut two) = (
        [IndexedDecision::default(); 1],
        [IndexedDecision::default(); 1],
    );
    let (a, b) = (answer(&mut one), answer(&mut two));
    assert_eq!((a.answered, one), (b.answered, two));
    let d = one[0];
    assert_eq!(d.verdict, PolicyVerdict::ALLOW);
    assert_eq!(a.table.rule(d.rule), Some("read-ops"));
    assert_eq!(a.table.reason(d.reason), Some("ops may read the notes"));
    assert_eq!(d.limits.max_wall_ms.into_option(), Some(500));
    assert_eq!(a.table.rules.len(), 5);
    assert!(std::ptr::eq(&*a.table, &*b.table));

    let hosts = [
        host_with(
            Plugin::builtin(aegis_policy_yaml::plugin_module()),
            &config,
            dir.path(),
        ),
        host_with(current, &config, dir.path()),
    ];
    let calls = [
        // Allowed by a rule with its own reason and limits.
        CallRequest {
            capability: Some("fs.read"),
            role: Some("ops"),
            ..CallRequest::new("notes", b"{}")
        },
        // Allowed by a rule with the station's fixed reason.
        CallRequest {
            capability: Some("fs.read"),
            ..CallRequest::new("notes", b"{}")
        },
        // Two axes: fs.read allowed, fs.write denied by rule.
        CallRequest {
            role: Some("ops"),
            ..CallRequest::new("notes", b"{}")
        },
        // Within its rate limit, then over it.
        CallRequest::new("echo", b"{}"),
        CallRequest::new("echo", b"{}"),
        // No rule: the default denies.
        CallRequest::new("other", b"{}"),
    ];
    use aegis_record::line::LineBody as _;
    let mut seen = Vec::new();
    for call in &calls {
        let lines: Vec<Vec<u8>> = hosts
            .iter()
            .map(|h| h.pipeline().decide(call).0.to_object().to_canonical())
            .collect();
        assert_eq!(lines[0], lines[1], "built in and loaded differ");
        seen.push(String::from_utf8(lines[0].clone()).unwrap());
    }
    // The calls reached what they were written for.
    for (line, expected) in seen.iter().zip([
        "\"matched_rule\":\"read-ops\"",
        "\"matched_rule\":\"read-any\"",
        "\"reason\":\"fs.write: denied by rule\"",
        "\"matched_rule\":\"echo-once\"",
        "\"reason\":\"rate limit: 1 calls per 3600 s (echo-once)\"",
        "\"reason\":\"no rule matched; the policy's default is deny\"",
    ]) {
        assert!(line.contains(expected), "{expected} not in {line}");
    }
    // A park carries a fresh approval id, so only its shape is compared.
    for h in &hosts {
        let line = h.pipeline().decide(&CallRequest::new("park", b"{}")).0;
        match line.policy {
            aegis_record::PolicyOutcome::PendingApproval { approval_id, .. } => {
                assert!(approval_id.starts_with("apr-"), "{approval_id}");
            }
            other => panic!("expected a park, got {other:?}"),
        }
        assert_eq!(line.decision_axes.matched_rule.as_deref(), Some("park"));
    }
}
