//! A parked call states what approving it would grant; a call resumed under an
//! approval runs only as approved (same tool, same arguments, before its expiry, its
//! grant within the approved scope), and the record says which approval it ran under.
//! A decision is recorded only when its approver stands behind it. `recheck` tells a
//! call a new policy would park from one it would refuse, and judges a resumed call by
//! the decision the record holds.

use aegis_record::approval::{self, Approver, HostSettled};
use aegis_record::key::SigningKey;
use aegis_record::refusal::Cause;
use aegis_record::{
    ApprovalScope, ArgumentsDigest, CapabilityOutcome, DecisionLine, DecisionVerdict, FsScope,
    PolicyOutcome, RequestDigest,
};
use aegis_runtime::capability::DEFAULT_LIMITS;
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_runtime::recheck::{Replayed, Verdict};
use aegis_runtime::{Approval, PipelineError};
use aegis_suites::{Harness, check_record, wasm_tool};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// read-file is parked; everything else allowed.
const PARK_READS: &str = "version: 1\ndefault: allow\nrules:\n  - id: ask-first\n    action: pending_approval\n    tool: read-file\n";

/// A canonical base dir with a read root holding a note, and a sibling root.
struct Layout {
    _dir: tempfile::TempDir,
    base: PathBuf,
    ro: PathBuf,
    other: PathBuf,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let (ro, other) = (base.join("ro"), base.join("other"));
    std::fs::create_dir(&ro).unwrap();
    std::fs::create_dir(&other).unwrap();
    std::fs::write(ro.join("notes.md"), b"meeting at 10").unwrap();
    std::fs::write(ro.join("plans.md"), b"launch on friday").unwrap();
    std::fs::write(other.join("notes.md"), b"elsewhere").unwrap();
    Layout {
        _dir: dir,
        base,
        ro,
        other,
    }
}

fn harness(l: &Layout, policy: &str) -> Harness {
    Harness::new(
        policy,
        vec![
            wasm_tool("read-file", "read-file", &[&l.ro], &[], DEFAULT_LIMITS),
            wasm_tool("read-other", "read-file", &[&l.other], &[], DEFAULT_LIMITS),
        ],
        BTreeMap::new(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Calls `tool` with the command argument `path`, under `approval` when given.
fn call(h: &Harness, tool: &str, path: &Path, approval: Option<&Approval>) -> CallRecord {
    let args = [s(path)];
    h.pipeline
        .call(&CallRequest {
            args: &args,
            approval,
            ..CallRequest::new(tool, b"")
        })
        .expect("the record is kept")
}

/// The approval a person would give a park: exactly its scope.
fn approval_of(parked: &CallRecord) -> Approval {
    let park = parked.park().expect("parked");
    Approval {
        approval_id: park.approval_id.to_owned(),
        scope: park.scope.expect("a park states its scope").clone(),
    }
}

fn signed_approval(key: &SigningKey, a: &Approval) -> DecisionLine {
    let verdict = DecisionVerdict::Approved {
        scope: a.scope.clone(),
    };
    DecisionLine {
        approver: Some(approval::sign(key, &a.approval_id, &verdict)),
        approval_id: a.approval_id.clone(),
        verdict,
    }
}

fn assert_mismatch(r: &CallRecord, words: &str) {
    let stop = r.outcome.stop.as_ref().expect("a stop");
    assert_eq!(stop.cause, Cause::ApprovalMismatch, "{:?}", r.outcome);
    assert_eq!(r.output, None);
    assert_eq!(r.outcome.response_digest, None);
    let refusal = r.station_refusal().expect("refused");
    assert!(refusal.contains(words), "{refusal}");
}

#[test]
fn a_park_states_the_scope_approving_it_would_grant() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let micros = || {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        u64::try_from(d.as_micros()).unwrap()
    };
    let ten_minutes = 600_000_000;
    let before = aegis_record::time::format_micros(micros() + ten_minutes);
    let parked = call(&h, "read-file", &note, None);
    let after = aegis_record::time::format_micros(micros() + ten_minutes);
    assert_eq!(parked.class(), CallClass::PendingApproval);
    let park = parked.park().expect("parked");
    assert!(park.approval_id.starts_with("apr-"), "{}", park.approval_id);
    assert_eq!(park.matched_rule, Some("ask-first"));
    assert_eq!(park.reason, aegis_runtime::pipeline::PARKED);
    let scope = park.scope.expect("scope");
    assert_eq!(scope.tool_id, "read-file");
    // No arguments object: the invocation's digest (what `aegis run` gives).
    let invocation = RequestDigest::of_invocation(&[s(&note)], b"");
    assert_eq!(
        scope.arguments_digest,
        Some(ArgumentsDigest::of_invocation(invocation))
    );
    assert_eq!(
        scope.fs,
        Some(FsScope {
            read_paths: vec![s(&l.ro).to_owned()],
            write_paths: vec![],
        })
    );
    assert_eq!(scope.net, None);
    // Ten minutes from the park, by default.
    let expires = scope.expires_at.as_deref().expect("expiry");
    assert!(
        before.as_str() <= expires && expires <= after.as_str(),
        "{before} <= {expires} <= {after}"
    );
    assert_eq!(
        h.pipeline.approval_timeout(),
        std::time::Duration::from_secs(600)
    );
    // A call with an arguments object is bound by their canonical digest.
    let with_arguments = h
        .pipeline
        .call(&CallRequest {
            arguments: Some(r#"{"path":"notes.md"}"#),
            ..CallRequest::new("read-file", b"")
        })
        .unwrap();
    assert_eq!(
        with_arguments
            .park()
            .unwrap()
            .scope
            .unwrap()
            .arguments_digest,
        Some(ArgumentsDigest::of_canonical_arguments(
            br#"{"path":"notes.md"}"#
        ))
    );
    let checked = h.finish();
    // The scope is on the record as written.
    let o = checked.outcome(&parked.outcome.call_id);
    let PolicyOutcome::PendingApproval {
        scope: Some(recorded),
        ..
    } = &o.policy
    else {
        panic!("{:?}", o.policy)
    };
    assert_eq!(recorded, scope);
}

#[test]
fn a_call_resumed_with_its_approval_runs_and_names_it() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let parked = call(&h, "read-file", &note, None);
    let approval = approval_of(&parked);
    let resumed = call(&h, "read-file", &note, Some(&approval));
    assert_eq!(resumed.class(), CallClass::Success, "{:?}", resumed.outcome);
    assert_eq!(resumed.output.as_deref(), Some(&b"meeting at 10"[..]));
    assert_ne!(resumed.outcome.call_id, parked.outcome.call_id);
    let checked = h.finish();
    let o = checked.outcome(&resumed.outcome.call_id);
    assert_eq!(o.policy, PolicyOutcome::Allowed);
    assert_eq!(o.decision_axes.matched_rule.as_deref(), Some("ask-first"));
    assert_eq!(
        o.decision_axes.approval_ref.as_deref(),
        Some(approval.approval_id.as_str())
    );
    assert!(matches!(o.capability, CapabilityOutcome::Granted { .. }));
}

#[test]
fn a_resumed_call_that_is_not_what_was_approved_is_refused_before_the_stations() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let approval = approval_of(&call(&h, "read-file", &note, None));

    // Other arguments: another file under the same root.
    let r = call(&h, "read-file", &l.ro.join("plans.md"), Some(&approval));
    assert_mismatch(&r, "the arguments differ");
    assert!(r.outcome.stopped_before_the_stations());
    assert_eq!(r.class(), CallClass::HostDenied);

    // Another tool, with the same arguments.
    let r = call(&h, "read-other", &note, Some(&approval));
    assert_mismatch(&r, "is for tool \"read-file\", not \"read-other\"");

    // Expired.
    let mut expired = approval.clone();
    expired.scope.expires_at = Some("2020-01-01T00:00:00.000000Z".to_owned());
    let r = call(&h, "read-file", &note, Some(&expired));
    assert_mismatch(&r, "expired at 2020-01-01T00:00:00.000000Z");

    // A scope without an arguments digest approves no arguments.
    let mut open = approval.clone();
    open.scope.arguments_digest = None;
    let r = call(&h, "read-file", &note, Some(&open));
    assert_mismatch(&r, "states no arguments digest");

    let checked = h.finish();
    for o in checked.outcomes.iter().skip(1) {
        assert_eq!(
            o.decision_axes.approval_ref.as_deref(),
            Some(approval.approval_id.as_str())
        );
        assert!(o.stopped_before_the_stations(), "{o:?}");
    }
}

#[test]
fn a_resumed_call_whose_grant_is_outside_the_approved_scope_is_refused() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let approval = approval_of(&call(&h, "read-file", &note, None));
    let with_fs = |fs: Option<FsScope>| Approval {
        scope: ApprovalScope {
            fs,
            ..approval.scope.clone()
        },
        ..approval.clone()
    };
    let read = |paths: &[&Path]| {
        Some(FsScope {
            read_paths: paths.iter().map(|p| s(p).to_owned()).collect(),
            write_paths: vec![],
        })
    };
    for (scope, why) in [
        (None, "no fs in the scope"),
        (read(&[&l.ro.join("sub")]), "a narrower root"),
        (read(&[&l.other]), "a sibling root"),
        (
            read(&[Path::new(&format!("{}-x", s(&l.ro)))]),
            "a name prefix, not a path prefix",
        ),
        (
            Some(FsScope {
                read_paths: vec![],
                write_paths: vec![s(&l.ro).to_owned()],
            }),
            "write, not read",
        ),
    ] {
        let r = call(&h, "read-file", &note, Some(&with_fs(scope)));
        assert_eq!(r.output, None, "{why}");
        let stop = r.outcome.stop.as_ref().expect(why);
        assert_eq!(stop.cause, Cause::ApprovalMismatch, "{why}");
        assert_eq!(stop.axis.as_deref(), Some("fs.read"), "{why}");
        assert_eq!(r.outcome.policy, PolicyOutcome::Allowed, "{why}");
        let CapabilityOutcome::Denied {
            reason,
            denied_capability,
        } = &r.outcome.capability
        else {
            panic!("{why}: {:?}", r.outcome.capability)
        };
        assert!(
            reason.starts_with("outside the approved scope: "),
            "{reason}"
        );
        assert_eq!(denied_capability.as_deref(), Some("fs.read"));
        assert_eq!(r.outcome.grant_id, None, "{why}");
    }
    // A wider approved root holds the grant's.
    let r = call(&h, "read-file", &note, Some(&with_fs(read(&[&l.base]))));
    assert_eq!(r.class(), CallClass::Success, "{:?}", r.outcome);
    h.finish();
}

#[test]
fn an_approval_never_overrides_a_deny() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let approval = approval_of(&call(&h, "read-file", &note, None));
    drop(h.finish());
    // The same tool, now denied by the policy.
    let deny = "version: 1\ndefault: allow\nrules:\n  - id: no-reads\n    action: deny\n    tool: read-file\n";
    let h = harness(&l, deny);
    let r = call(&h, "read-file", &note, Some(&approval));
    assert_eq!(r.class(), CallClass::PolicyDenied, "{:?}", r.outcome);
    assert_eq!(r.output, None);
    assert_eq!(
        r.outcome.decision_axes.matched_rule.as_deref(),
        Some("no-reads")
    );
    assert_eq!(
        r.outcome.decision_axes.approval_ref.as_deref(),
        Some(approval.approval_id.as_str())
    );
    h.finish();
}

#[test]
fn a_decision_is_recorded_only_when_its_approver_stands_behind_it() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let approval = approval_of(&call(&h, "read-file", &note, None));
    let person = SigningKey::from_seed([9; 32]);
    let good = signed_approval(&person, &approval);

    // Signed over another id.
    let mut forged = good.clone();
    forged.approver = signed_approval(
        &person,
        &Approval {
            approval_id: "apr-00000000000000000000000000000000".to_owned(),
            ..approval.clone()
        },
    )
    .approver;
    // The scope widened after signing.
    let mut widened = good.clone();
    widened.verdict = DecisionVerdict::Approved {
        scope: ApprovalScope {
            fs: Some(FsScope {
                read_paths: vec!["/".to_owned()],
                write_paths: vec![],
            }),
            ..approval.scope.clone()
        },
    };
    // The host approving by itself, and no approver at all.
    let host_approved = DecisionLine {
        approver: Some(Approver::Host {
            why: HostSettled::Expired,
        }),
        ..good.clone()
    };
    let unattributed = DecisionLine {
        approver: None,
        ..good.clone()
    };
    for (bad, why) in [
        (&forged, "does not verify"),
        (&widened, "does not verify"),
        (&host_approved, "cannot approve"),
        (&unattributed, "names no approver"),
    ] {
        let err = h.pipeline.record_decision(bad).unwrap_err();
        assert!(
            matches!(&err, PipelineError::Unattributed { .. }) && err.to_string().contains(why),
            "{err}"
        );
    }
    let seq = h.pipeline.record_decision(&good).expect("recorded");
    assert!(seq > 0);
    let (_dir, record, key) = close(h);
    let bytes = std::fs::read(&record).unwrap();
    let decisions: Vec<DecisionLine> = bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| match aegis_record::json::parse(l) {
            Ok(aegis_record::json::Value::Object(o))
                if o.get("line_type").and_then(|v| v.as_str()) == Some("decision") =>
            {
                Some(DecisionLine::from_object(&o).unwrap())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        decisions,
        [good],
        "exactly the good decision is on the record"
    );
    check_record(&record, &key);
}

/// Closes the harness's session, keeping its directory (and so its record).
fn close(h: Harness) -> (tempfile::TempDir, PathBuf, SigningKey) {
    let Harness {
        dir,
        pipeline,
        key,
        record,
    } = h;
    pipeline
        .into_audit()
        .expect("every call begun has finished")
        .session
        .close()
        .expect("close line");
    (dir, record, key)
}

fn station(policy: &str) -> (tempfile::TempDir, aegis_station_api::PolicyEvaluatorBox) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, policy).unwrap();
    let profile = aegis_runtime::Profile::find("default").unwrap();
    let (_, station) =
        aegis_runtime::host::policy_station(&profile, &aegis_runtime::Registry::new(), Some(&path))
            .unwrap();
    (dir, station)
}

fn replayed<'a>(r: &'a aegis_runtime::recheck::Recheck, call_id: &str) -> &'a Replayed {
    &r.calls
        .iter()
        .find(|c| c.call_id == call_id)
        .unwrap_or_else(|| panic!("{call_id} not replayed"))
        .replayed
}

#[test]
fn recheck_tells_newly_parked_from_refused_and_judges_resumed_calls_by_their_decision() {
    let l = layout();
    let h = harness(&l, PARK_READS);
    let note = l.ro.join("notes.md");
    let plans = l.ro.join("plans.md");
    // A call allowed outright.
    let plain = call(&h, "read-other", &l.other.join("notes.md"), None);
    assert_eq!(plain.class(), CallClass::Success);
    // A park, approved by a person, resumed.
    let approval = approval_of(&call(&h, "read-file", &note, None));
    h.pipeline
        .record_decision(&signed_approval(&SigningKey::from_seed([3; 32]), &approval))
        .unwrap();
    let resumed = call(&h, "read-file", &note, Some(&approval));
    assert_eq!(resumed.class(), CallClass::Success);
    // A resumed call whose approval the record holds no decision for.
    let undecided = approval_of(&call(&h, "read-file", &plans, None));
    let unbacked = call(&h, "read-file", &plans, Some(&undecided));
    assert_eq!(unbacked.class(), CallClass::Success);
    let (_dir, record, key) = close(h);
    check_record(&record, &key);
    let bytes = std::fs::read(&record).unwrap();

    // The same policy: the approved call stays allowed, under its approval; the one
    // without a decision would be parked again.
    let (_d, same) = station(PARK_READS);
    let r = aegis_runtime::recheck::recheck(&bytes, &same).unwrap();
    assert_eq!(
        replayed(&r, &resumed.outcome.call_id),
        &Replayed::Unchanged {
            verdict: Verdict::Allowed,
            rule: Some("ask-first".to_owned()),
            approval: Some(approval.approval_id.clone()),
        }
    );
    assert!(
        matches!(
            replayed(&r, &unbacked.outcome.call_id),
            Replayed::Changed {
                old: Verdict::Allowed,
                new: Verdict::PendingApproval,
                ..
            }
        ),
        "{:?}",
        replayed(&r, &unbacked.outcome.call_id)
    );
    assert!(matches!(
        replayed(&r, &plain.outcome.call_id),
        Replayed::Unchanged { approval: None, .. }
    ));

    // A policy that parks every read: the call that ran outright is newly parked, not
    // newly refused.
    let park_all = "version: 1\ndefault: allow\nrules:\n  - id: ask-first\n    action: pending_approval\n    tool: read-file\n  - id: ask-other\n    action: pending_approval\n    tool: read-other\n";
    let (_d, parks) = station(park_all);
    let r = aegis_runtime::recheck::recheck(&bytes, &parks).unwrap();
    assert!(
        matches!(
            replayed(&r, &plain.outcome.call_id),
            Replayed::Changed {
                old: Verdict::Allowed,
                new: Verdict::PendingApproval,
                ..
            }
        ),
        "{:?}",
        replayed(&r, &plain.outcome.call_id)
    );
    assert!(matches!(
        replayed(&r, &resumed.outcome.call_id),
        Replayed::Unchanged {
            approval: Some(_),
            ..
        }
    ));

    // A policy that denies reads: a deny stays a deny, approval or not.
    let deny = "version: 1\ndefault: allow\nrules:\n  - id: no-reads\n    action: deny\n    tool: read-file\n";
    let (_d, denies) = station(deny);
    let r = aegis_runtime::recheck::recheck(&bytes, &denies).unwrap();
    assert!(
        matches!(
            replayed(&r, &resumed.outcome.call_id),
            Replayed::Changed {
                old: Verdict::Allowed,
                new: Verdict::Denied,
                ..
            }
        ),
        "{:?}",
        replayed(&r, &resumed.outcome.call_id)
    );
}

/// The profile's `[operator.approvals] timeout` reaches the pipeline (a park expires
/// that long after it), and the builder's (a flag's) replaces it.
#[test]
fn the_profiles_approval_timeout_sets_a_parks_expiry_and_the_builders_replaces_it() {
    let l = layout();
    let (_, default) = aegis_runtime::profile::EMBEDDED
        .iter()
        .find(|(n, _)| *n == "default")
        .unwrap();
    let text = format!("{default}\n[operator.approvals]\ntimeout = \"2m\"\n");
    for (flag, want) in [(None, 120), (Some(30), 30)] {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(&policy, PARK_READS).unwrap();
        let profile = aegis_runtime::Profile::parse(
            &text,
            "p.toml",
            aegis_runtime::ProfileSource::File(dir.path().join("p.toml")),
        )
        .unwrap();
        let mut builder = aegis_runtime::Host::builder(profile)
            .audit_file(aegis_suites::SUITE, &dir.path().join("record.aarl"))
            .policy_file(aegis_suites::SUITE, &policy)
            .sandbox(aegis_suites::sandbox())
            .signing_key(SigningKey::generate().unwrap())
            .tools(vec![wasm_tool(
                "read-file",
                "read-file",
                &[&l.ro],
                &[],
                DEFAULT_LIMITS,
            )]);
        if let Some(secs) = flag {
            builder = builder.approval_timeout(std::time::Duration::from_secs(secs));
        }
        let host = builder.open().unwrap();
        assert_eq!(
            host.approval_timeout(),
            std::time::Duration::from_secs(want)
        );
        let now = || {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            u64::try_from(d.as_micros()).unwrap() + want * 1_000_000
        };
        let lower = aegis_record::time::format_micros(now());
        let note = l.ro.join("notes.md");
        let args = [s(&note)];
        let parked = host
            .call(&CallRequest {
                args: &args,
                ..CallRequest::new("read-file", b"")
            })
            .unwrap();
        let upper = aegis_record::time::format_micros(now());
        let expires = parked
            .park()
            .unwrap()
            .scope
            .unwrap()
            .expires_at
            .clone()
            .unwrap();
        assert!(
            lower <= expires && expires <= upper,
            "{lower} <= {expires} <= {upper}"
        );
    }
}
