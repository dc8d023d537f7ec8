//! The approvals desk against decisions an attacker could place in the queue: anyone who
//! can write the queue directory can write a decision file, so the host honours one only
//! when its approver's signature verifies, its key is trusted (when the operator named
//! approvers), it is not the host approving itself, and the scope it approves is within
//! the parked one. Anything else settles the park as the host's own denial, which is
//! what the record then holds; the call never runs.

use aegis_approvals::{DecisionFile, Front, Queue};
use aegis_record::approval::{self, Approver, HostSettled};
use aegis_record::key::SigningKey;
use aegis_record::refusal::Cause;
use aegis_record::verify::TrustAnchor;
use aegis_record::{ApprovalScope, ArgumentsDigest, DecisionLine, DecisionVerdict, FsScope};
use aegis_runtime::approvals::{Desk, Ticket};
use aegis_runtime::capability::DEFAULT_LIMITS;
use aegis_runtime::pipeline::{CallClass, CallRecord, CallRequest};
use aegis_suites::{Harness, check_record, wasm_tool};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const PARK_READS: &str = "version: 1\ndefault: allow\nrules:\n  - id: ask-first\n    action: pending_approval\n    tool: read-file\n";

struct Setup {
    _dir: tempfile::TempDir,
    h: Harness,
    queue_dir: PathBuf,
    note: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let ro = base.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let note = ro.join("notes.md");
    std::fs::write(&note, b"meeting at 10").unwrap();
    let h = Harness::new(
        PARK_READS,
        vec![wasm_tool(
            "read-file",
            "read-file",
            &[&ro],
            &[],
            DEFAULT_LIMITS,
        )],
        BTreeMap::new(),
    );
    Setup {
        _dir: dir,
        h,
        queue_dir: base.join("queue"),
        note,
    }
}

impl Setup {
    fn call(&self, approval: Option<&aegis_runtime::Approval>) -> CallRecord {
        let args = [self.note.to_str().unwrap()];
        self.h
            .pipeline
            .call(&CallRequest {
                args: &args,
                approval,
                ..CallRequest::new("read-file", b"")
            })
            .expect("recorded")
    }

    fn desk(&self, approvers: Option<Vec<TrustAnchor>>) -> Desk {
        Desk::new(Some(self.queue_dir.clone()), Front::Run, "test", approvers)
    }

    /// Parks the call and files it.
    fn park(&self, desk: &Desk) -> Ticket {
        let parked = self.call(None);
        assert_eq!(parked.class(), CallClass::PendingApproval);
        desk.file(&self.h.pipeline, &parked, None).expect("filed")
    }

    /// Places `decision` in the queue as a writer of the directory could, then lets the
    /// desk settle the park.
    fn settle(
        &self,
        desk: &Desk,
        ticket: &Ticket,
        decision: DecisionFile,
    ) -> Result<aegis_runtime::Approval, aegis_record::refusal::Refusal> {
        Queue::open(&self.queue_dir)
            .unwrap()
            .decide(&decision)
            .expect("placed");
        desk.settle(
            &self.h.pipeline,
            ticket,
            Duration::from_secs(60),
            &mut || {},
        )
    }

    /// The decision lines on the record.
    fn decisions(&self) -> Vec<DecisionLine> {
        std::fs::read(&self.h.record)
            .unwrap()
            .split(|&b| b == b'\n')
            .filter_map(|l| match aegis_record::json::parse(l) {
                Ok(aegis_record::json::Value::Object(o))
                    if o.get("line_type").and_then(|v| v.as_str()) == Some("decision") =>
                {
                    Some(DecisionLine::from_object(&o).unwrap())
                }
                _ => None,
            })
            .collect()
    }
}

fn decision(id: &str, verdict: DecisionVerdict, approver: Approver) -> DecisionFile {
    DecisionFile {
        approval_id: id.to_owned(),
        verdict,
        approver,
        decided_at: aegis_record::time::now(),
    }
}

fn signed(key: &SigningKey, id: &str, scope: ApprovalScope) -> DecisionFile {
    let verdict = DecisionVerdict::Approved { scope };
    let approver = approval::sign(key, id, &verdict);
    decision(id, verdict, approver)
}

/// The host's own denial is on the record in place of the decision placed, and the
/// client is told why, as a denial.
fn assert_not_honoured(
    s: &Setup,
    settled: Result<aegis_runtime::Approval, aegis_record::refusal::Refusal>,
    words: &str,
) {
    let refusal = settled.expect_err("not honoured");
    assert_eq!(refusal.cause, Cause::ApprovalDenied, "{refusal:?}");
    assert!(refusal.reason.contains(words), "{}", refusal.reason);
    let decisions = s.decisions();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert!(
        matches!(
            decisions[0].approver,
            Some(Approver::Host {
                why: HostSettled::Withdrawn
            })
        ),
        "{decisions:?}"
    );
    assert!(matches!(
        decisions[0].verdict,
        DecisionVerdict::Denied { .. }
    ));
}

/// A properly signed approval of more than the park asked for: every way a scope can be
/// wider (another tool, other arguments, none stated, a later expiry or none, a wider
/// root) is refused.
#[test]
fn an_approval_wider_than_its_park_is_not_honoured() {
    let person = SigningKey::from_seed([7; 32]);
    type Widen = fn(&mut ApprovalScope);
    let widenings: [(Widen, &str); 6] = [
        (|s| s.tool_id = "read-other".into(), "approves tool"),
        (
            |s| s.arguments_digest = Some(ArgumentsDigest::of_canonical_arguments(b"{}")),
            "other arguments",
        ),
        (|s| s.arguments_digest = None, "other arguments"),
        (|s| s.expires_at = None, "(never)"),
        (
            |s| s.expires_at = Some("2999-01-01T00:00:00.000000Z".into()),
            "after the park",
        ),
        (
            |s| {
                s.fs = Some(FsScope {
                    read_paths: vec!["/".into()],
                    write_paths: vec![],
                })
            },
            "outside the approved scope",
        ),
    ];
    for (widen, words) in widenings {
        let s = setup();
        let desk = s.desk(None);
        let ticket = s.park(&desk);
        let mut scope = ticket.scope.clone();
        widen(&mut scope);
        let settled = s.settle(&desk, &ticket, signed(&person, &ticket.approval_id, scope));
        assert_not_honoured(&s, settled, words);
    }
}

/// With approvers named, a valid signature by any other key is refused.
#[test]
fn an_approval_by_a_key_the_operator_does_not_trust_is_not_honoured() {
    let s = setup();
    let trusted = SigningKey::from_seed([1; 32]);
    let stranger = SigningKey::from_seed([2; 32]);
    let desk = s.desk(Some(vec![TrustAnchor::from(trusted.public_key())]));
    let ticket = s.park(&desk);
    let settled = s.settle(
        &desk,
        &ticket,
        signed(&stranger, &ticket.approval_id, ticket.scope.clone()),
    );
    assert_not_honoured(&s, settled, "not one of the approvers");
}

/// A signature that does not verify (made over another id, or by another key than the
/// one named), and the host approving itself, are refused.
#[test]
fn a_forged_or_host_approval_is_not_honoured() {
    let person = SigningKey::from_seed([3; 32]);
    let other = SigningKey::from_seed([4; 32]);
    type Forge = fn(&Ticket, &SigningKey, &SigningKey) -> DecisionFile;
    let forgeries: [(Forge, &str); 3] = [
        (
            |t, p, _| {
                let mut d = signed(p, "apr-00000000000000000000000000000000", t.scope.clone());
                d.approval_id = t.approval_id.clone();
                d
            },
            "does not verify",
        ),
        (
            |t, p, o| {
                let mut d = signed(p, &t.approval_id, t.scope.clone());
                if let (
                    Approver::Key {
                        public_key, key_id, ..
                    },
                    Approver::Key {
                        public_key: pk,
                        key_id: kid,
                        ..
                    },
                ) = (
                    &mut d.approver,
                    signed(o, &t.approval_id, t.scope.clone()).approver,
                ) {
                    *public_key = pk;
                    *key_id = kid;
                }
                d
            },
            "does not verify",
        ),
        (
            |t, _, _| {
                decision(
                    &t.approval_id,
                    DecisionVerdict::Approved {
                        scope: t.scope.clone(),
                    },
                    Approver::Host {
                        why: HostSettled::Expired,
                    },
                )
            },
            "cannot approve",
        ),
    ];
    for (forge, words) in forgeries {
        let s = setup();
        let desk = s.desk(None);
        let ticket = s.park(&desk);
        let settled = s.settle(&desk, &ticket, forge(&ticket, &person, &other));
        assert_not_honoured(&s, settled, words);
    }
}

/// The honest path, for contrast: a trusted key approving exactly the park resumes it,
/// its decision is the one on the record, the call runs, and the record verifies.
#[test]
fn an_approval_by_a_trusted_key_of_exactly_the_park_resumes_it() {
    let s = setup();
    let trusted = SigningKey::from_seed([5; 32]);
    let desk = s.desk(Some(vec![TrustAnchor::from(trusted.public_key())]));
    let ticket = s.park(&desk);
    let approval = s
        .settle(
            &desk,
            &ticket,
            signed(&trusted, &ticket.approval_id, ticket.scope.clone()),
        )
        .expect("honoured");
    let resumed = s.call(Some(&approval));
    assert_eq!(resumed.class(), CallClass::Success, "{:?}", resumed.outcome);
    assert_eq!(resumed.output.as_deref(), Some(&b"meeting at 10"[..]));
    let decisions = s.decisions();
    assert!(matches!(
        decisions[..],
        [DecisionLine {
            approver: Some(Approver::Key { .. }),
            ..
        }]
    ));
    // One use: the queue says the decision is used, and a second claim is refused.
    assert!(desk.take(&s.h.pipeline, &ticket.approval_id).is_err());
    let Setup { h, _dir, .. } = s;
    let (record, key) = (h.record.clone(), h.key.clone());
    h.pipeline
        .into_audit()
        .expect("finished")
        .session
        .close()
        .expect("close");
    check_record(&record, &key);
}
