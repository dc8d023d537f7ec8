//! Attacks on who decided a parked call (spec/SPEC.md §6.3 `decision`, §8.3 step 12,
//! §8.9, §8.10): a host that forges, re-attributes or widens a person's approval after
//! they signed it, claims to have approved itself, or runs a call the approval does not
//! allow. Every file here is written by the real writer, whose own chain signatures are
//! valid: only the approval is wrong, and the verifier must see it.

mod support;

use aegis_record::approval::{self, Approver, ApproverProblem, ClientMechanism, HostSettled};
use aegis_record::verify::{
    Indeterminate, Misuse, Options, Report, Tampered, TrustAnchor, Unpinned, Verdict, Widening,
    verify, verify_line_by_line,
};
use aegis_record::*;
use proptest::prelude::*;
use support::vectors::{
    PARK_ID, approval_session, approved, approver, key, outsider, park_scope, signed_decision,
};

/// A change made to a scope.
type Change = Box<dyn Fn(&mut ApprovalScope)>;

fn check(bytes: &[u8], approvers: Option<Vec<TrustAnchor>>) -> Report {
    let options = Options {
        trust: None,
        approvers,
        threads: 2,
    };
    let report = verify(bytes, &options).unwrap();
    // The batch path and the line-by-line path agree on every file here.
    assert_eq!(report, verify_line_by_line(bytes, &options).unwrap());
    report
}

/// The file a decision makes: a park, `decision`, one resumed `deploy` call, a close.
fn with(decision: &DecisionLine) -> Vec<u8> {
    approval_session(&key(), decision, &[("call-resumed", "deploy")], &|_| {})
}

fn bad_approver(report: &Report) -> ApproverProblem {
    match report.verdict() {
        Verdict::Tampered(Tampered::BadApprover {
            line: 4,
            approval_id,
            problem,
            ..
        }) if approval_id == PARK_ID => *problem,
        other => panic!("expected bad_approver on line 4, got {other:?}"),
    }
}

fn widened(report: &Report) -> Widening {
    match report.verdict() {
        Verdict::Tampered(Tampered::ApprovalWidened {
            line: 4, widening, ..
        }) => *widening,
        other => panic!("expected approval_widened on line 4, got {other:?}"),
    }
}

fn pinned_to_approver() -> Option<Vec<TrustAnchor>> {
    Some(vec![approver().public_key().into()])
}

#[test]
fn an_honest_approval_verifies_pinned_or_not_and_the_report_names_the_approver() {
    let file = with(&signed_decision(approved()));
    let unpinned = check(&file, None);
    assert_eq!(unpinned.verdict(), &Verdict::Verified(Trust::Unpinned));
    let seen = unpinned.approvers().expect("a decision names an approver");
    assert!(!seen.pinned);
    assert_eq!(seen.keys, vec![(approver().key_id(), 1)]);
    let text = unpinned.to_text();
    assert!(
        text.contains(&format!(
            "approver key_id {} decisions 1 (unpinned) (the approver vector key, whose seed is public: proves nothing)\n",
            approver().key_id()
        )),
        "{text}"
    );
    let json = String::from_utf8(unpinned.to_json()).unwrap();
    assert!(json.contains("\"approvers\":{"), "{json}");
    // By key id as well as by public key.
    for pin in [pinned_to_approver(), Some(vec![approver().key_id().into()])] {
        let pinned = check(&file, pin);
        assert_eq!(pinned.verdict(), &Verdict::Verified(Trust::Unpinned));
        assert!(
            pinned
                .to_text()
                .contains(" (pinned) (the approver vector key")
        );
    }
}

/// A record without decisions reports no approvers: older reports keep their bytes.
#[test]
fn a_record_without_approvers_reports_none() {
    let bytes = std::fs::read(support::vectors_dir().join("golden/golden.aarl")).unwrap();
    let report = check(&bytes, None);
    assert!(report.approvers().is_none());
    assert!(!report.to_text().contains("approver"));
}

/// A decision whose approver does not stand behind it is Tampered.
mod forged {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any bit of the approver's signature flipped: Tampered bad_approver, never
        /// Verified, pinned or not.
        #[test]
        fn a_flipped_signature_bit_is_caught(byte in 0usize..64, bit in 0u8..8) {
            let mut decision = signed_decision(approved());
            if let Some(Approver::Key { signature, .. }) = &mut decision.approver {
                let mut bytes = *signature.as_bytes();
                bytes[byte] ^= 1 << bit;
                *signature = Signature::from_bytes(bytes);
            }
            let file = with(&decision);
            for pins in [None, pinned_to_approver()] {
                let report = check(&file, pins);
                let problem = bad_approver(&report);
                prop_assert!(
                    matches!(problem, ApproverProblem::BadSignature),
                    "{problem:?}"
                );
            }
        }

        /// A key that did not sign, under a matching key id, cannot pass for the approver.
        #[test]
        fn another_key_cannot_take_the_signature(seed in any::<[u8; 32]>()) {
            let other = SigningKey::from_seed(seed);
            prop_assume!(other.public_key() != approver().public_key());
            let mut decision = signed_decision(approved());
            if let Some(Approver::Key { public_key, key_id, .. }) = &mut decision.approver {
                *public_key = other.public_key();
                *key_id = other.key_id();
            }
            let report = check(&with(&decision), Some(vec![other.public_key().into()]));
            prop_assert!(matches!(
                bad_approver(&report),
                ApproverProblem::BadSignature | ApproverProblem::BadKey
            ));
        }
    }

    /// The approver's key id swapped for another key's: the signature itself is fine, the
    /// attribution is not.
    #[test]
    fn a_swapped_key_id_is_caught() {
        let mut decision = signed_decision(approved());
        if let Some(Approver::Key { key_id, .. }) = &mut decision.approver {
            *key_id = outsider().key_id();
        }
        let report = check(&with(&decision), Some(vec![outsider().key_id().into()]));
        assert_eq!(bad_approver(&report), ApproverProblem::KeyIdMismatch);
    }

    /// The host changes what the person approved after they signed it — any member of the
    /// scope, or the approval id, or approval into denial: the signature no longer holds.
    #[test]
    fn a_scope_changed_after_signing_is_caught() {
        let signed = signed_decision(approved());
        let changes: Vec<(&str, Change)> = vec![
            ("tool", Box::new(|s| s.tool_id = "shell".into())),
            (
                "arguments",
                Box::new(|s| {
                    s.arguments_digest = Some(ArgumentsDigest::of_canonical_arguments(
                        br#"{"env":"production"}"#,
                    ));
                }),
            ),
            ("no arguments", Box::new(|s| s.arguments_digest = None)),
            (
                "fs",
                Box::new(|s| {
                    s.fs.as_mut()
                        .unwrap()
                        .write_paths
                        .push("/srv/deploy".into())
                }),
            ),
            (
                "net",
                Box::new(|s| s.net.as_mut().unwrap().http[0].ports.push(22)),
            ),
            ("no expiry", Box::new(|s| s.expires_at = None)),
            // Narrowing is a change too: the person signed what they signed.
            ("narrower", Box::new(|s| s.net = None)),
        ];
        for (name, change) in changes {
            let mut decision = signed.clone();
            let DecisionVerdict::Approved { scope } = &mut decision.verdict else {
                unreachable!()
            };
            change(scope);
            let report = check(&with(&decision), None);
            assert_eq!(
                bad_approver(&report),
                ApproverProblem::BadSignature,
                "{name}"
            );
        }
        let mut other_id = signed.clone();
        other_id.approval_id = "apr-ffffffffffffffffffffffffffffffff".into();
        let report = check(&with(&other_id), None);
        assert!(matches!(
            report.verdict(),
            Verdict::Tampered(Tampered::BadApprover { .. })
        ));
        let mut denied = signed;
        denied.verdict = DecisionVerdict::Denied {
            reason: "no".into(),
        };
        let report = check(&with(&denied), None);
        assert_eq!(bad_approver(&report), ApproverProblem::BadSignature);
    }

    #[test]
    fn the_host_cannot_approve() {
        let decision = DecisionLine {
            approval_id: PARK_ID.into(),
            verdict: approved(),
            approver: Some(Approver::Host {
                why: HostSettled::Withdrawn,
            }),
        };
        for pins in [None, pinned_to_approver()] {
            let report = check(&with(&decision), pins);
            assert_eq!(bad_approver(&report), ApproverProblem::HostApproved);
        }
    }
}

/// A decision no pinned approver made is never Verified under approver pins.
mod untrusted {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// An approver key nobody pinned is never Verified once approvers are pinned.
        #[test]
        fn an_untrusted_approver_is_not_verified(seed in any::<[u8; 32]>()) {
            let someone = SigningKey::from_seed(seed);
            prop_assume!(someone.public_key() != approver().public_key());
            let verdict = approved();
            let decision = DecisionLine {
                approval_id: PARK_ID.into(),
                approver: Some(approval::sign(&someone, PARK_ID, &verdict)),
                verdict,
            };
            let file = with(&decision);
            let unpinned = check(&file, None);
            prop_assert_eq!(unpinned.verdict(), &Verdict::Verified(Trust::Unpinned));
            let report = check(&file, pinned_to_approver());
            match report.verdict() {
                Verdict::Indeterminate(Indeterminate::UntrustedApprover {
                    line: 4,
                    approver: Unpinned::Key(k),
                    ..
                }) => prop_assert_eq!(*k, someone.key_id()),
                other => prop_assert!(false, "{other:?}"),
            }
        }
    }

    /// A client's approval is no person's key: listed unpinned, Indeterminate pinned. A
    /// client's or the host's denial ran nothing and stands either way.
    #[test]
    fn a_client_approval_is_not_a_pinned_approver() {
        let client = Approver::Client {
            client: "inspector 1.0".into(),
            mechanism: ClientMechanism::Elicitation,
        };
        let approved_by_client = DecisionLine {
            approval_id: PARK_ID.into(),
            verdict: approved(),
            approver: Some(client.clone()),
        };
        let file = with(&approved_by_client);
        let unpinned = check(&file, None);
        assert_eq!(unpinned.verdict(), &Verdict::Verified(Trust::Unpinned));
        assert_eq!(unpinned.approvers().unwrap().client, 1);
        assert!(matches!(
            check(&file, pinned_to_approver()).verdict(),
            Verdict::Indeterminate(Indeterminate::UntrustedApprover {
                approver: Unpinned::Client,
                ..
            })
        ));
        for approver in [
            client,
            Approver::Host {
                why: HostSettled::Expired,
            },
        ] {
            let denial = DecisionLine {
                approval_id: PARK_ID.into(),
                verdict: DecisionVerdict::Denied {
                    reason: "declined".into(),
                },
                approver: Some(approver),
            };
            let file = approval_session(&key(), &denial, &[], &|_| {});
            assert_eq!(
                check(&file, pinned_to_approver()).verdict(),
                &Verdict::Verified(Trust::Unpinned)
            );
        }
    }

    /// With approvers pinned, a decision that names no approver (written before approvers
    /// were recorded) is not Verified; unpinned, it verifies as it always did.
    #[test]
    fn an_unattributed_decision_is_verified_only_unpinned() {
        let decision = DecisionLine {
            approval_id: PARK_ID.into(),
            verdict: approved(),
            approver: None,
        };
        let file = with(&decision);
        let unpinned = check(&file, None);
        assert_eq!(unpinned.verdict(), &Verdict::Verified(Trust::Unpinned));
        assert!(unpinned.approvers().is_none());
        assert!(matches!(
            check(&file, Some(vec![])).verdict(),
            Verdict::Indeterminate(Indeterminate::UntrustedApprover {
                approver: Unpinned::Unattributed,
                ..
            })
        ));
    }
}

/// An approval run against its verdict, or wider than its park, is Tampered.
mod misused {
    use super::*;

    /// An approval wider than its park in any member is Tampered even though the person's
    /// signature holds; a narrower one verifies.
    #[test]
    fn an_approval_wider_than_its_park_is_caught() {
        let cases: Vec<(Widening, Change)> = vec![
            (Widening::Tool, Box::new(|s| s.tool_id = "shell".into())),
            (
                Widening::ArgumentsDigest,
                Box::new(|s| s.arguments_digest = None),
            ),
            (
                Widening::Fs,
                Box::new(|s| s.fs.as_mut().unwrap().read_paths = vec!["/srv/deploy-other".into()]),
            ),
            (
                Widening::Fs,
                Box::new(|s| {
                    s.fs.as_mut().unwrap().read_paths = vec!["/srv/deploy/../../etc".into()];
                }),
            ),
            (
                Widening::Fs,
                Box::new(|s| s.fs.as_mut().unwrap().write_paths = vec!["/srv/deploy".into()]),
            ),
            (
                Widening::Net,
                Box::new(|s| s.net.as_mut().unwrap().http[0].host = "evil.example.test".into()),
            ),
            (
                Widening::Net,
                Box::new(|s| {
                    s.net.as_mut().unwrap().http[0]
                        .methods
                        .push("DELETE".into())
                }),
            ),
            (
                Widening::ExpiresAt,
                Box::new(|s| s.expires_at = Some("2026-12-04T00:10:00.000001Z".into())),
            ),
            (Widening::ExpiresAt, Box::new(|s| s.expires_at = None)),
        ];
        for (expected, change) in cases {
            let mut scope = park_scope();
            change(&mut scope);
            let report = check(
                &with(&signed_decision(DecisionVerdict::Approved { scope })),
                None,
            );
            assert_eq!(widened(&report), expected);
        }
        // Narrower in every member: verifies.
        let mut narrow = park_scope();
        narrow.fs.as_mut().unwrap().read_paths = vec!["/srv/deploy/staging".into()];
        narrow.net = None;
        narrow.expires_at = Some("2026-12-04T00:05:00.000000Z".into());
        let report = check(
            &with(&signed_decision(DecisionVerdict::Approved {
                scope: narrow,
            })),
            None,
        );
        assert_eq!(report.verdict(), &Verdict::Verified(Trust::Unpinned));
    }

    fn misuse(report: &Report) -> (u64, Misuse) {
        match report.verdict() {
            Verdict::Tampered(Tampered::ApprovalMisused { line, misuse, .. }) => {
                (*line, misuse.clone())
            }
            other => panic!("expected approval_misused, got {other:?}"),
        }
    }

    #[test]
    fn a_call_run_against_its_approval_is_caught() {
        let denied = signed_decision(DecisionVerdict::Denied {
            reason: "no".into(),
        });
        let file = approval_session(&key(), &denied, &[("call-resumed", "deploy")], &|_| {});
        assert_eq!(misuse(&check(&file, None)), (6, Misuse::Denied));
        let file = approval_session(
            &key(),
            &signed_decision(approved()),
            &[("call-resumed", "read-notes")],
            &|_| {},
        );
        assert_eq!(
            misuse(&check(&file, None)),
            (
                6,
                Misuse::OtherTool {
                    tool_id: "read-notes".into()
                }
            )
        );
        let file = approval_session(
            &key(),
            &signed_decision(approved()),
            &[("call-resumed", "deploy"), ("call-replayed", "deploy")],
            &|_| {},
        );
        assert_eq!(misuse(&check(&file, None)), (8, Misuse::SecondUse));
    }

    /// A resumed call the host refused (it did not match the approval, or the approval was
    /// denied or used) is the honest record of a refusal, not a misuse.
    #[test]
    fn a_refused_resumed_call_is_not_a_misuse() {
        let denied = signed_decision(DecisionVerdict::Denied {
            reason: "no".into(),
        });
        let refused = |s: &Session| {
            s.append_unsigned(&support::intent_for("call-retried", "deploy"))
                .unwrap();
            let mut o = support::vectors::resumed("call-retried", "deploy", PARK_ID);
            o.execution = ExecutionOutcome::HostDenied {
                reason: "approval_mismatch: the approval was denied".into(),
            };
            s.append(&o).unwrap();
        };
        let file = approval_session(&key(), &denied, &[], &refused);
        assert_eq!(
            check(&file, None).verdict(),
            &Verdict::Verified(Trust::Unpinned)
        );
    }

    /// A park whose filesystem and network scope is too large to hold (the walk's
    /// memory stays bounded) still bounds the tool, the arguments and the expiry; its
    /// paths are not judged.
    #[test]
    fn a_park_too_large_to_hold_still_bounds_tool_arguments_and_expiry() {
        let mut big = park_scope();
        big.fs.as_mut().unwrap().read_paths =
            (0..200).map(|i| format!("/srv/deploy/{i:040}")).collect();
        let file = |approved: ApprovalScope| {
            let sink = VecSink::new();
            let s = Session::open(
                std::sync::Arc::new(sink.clone()),
                key(),
                None,
                aegis_record::json::Object::new(),
            )
            .unwrap();
            s.append_unsigned(&support::intent_for("call-parked", "deploy"))
                .unwrap();
            s.append(&support::vectors::parked(
                "call-parked",
                PARK_ID,
                Some(big.clone()),
            ))
            .unwrap();
            s.append(&signed_decision(DecisionVerdict::Approved {
                scope: approved,
            }))
            .unwrap();
            s.close().unwrap();
            sink.contents()
        };
        let mut other_paths = big.clone();
        other_paths.fs.as_mut().unwrap().read_paths = vec!["/".into()];
        assert_eq!(
            check(&file(other_paths), None).verdict(),
            &Verdict::Verified(Trust::Unpinned)
        );
        let mut other_tool = big.clone();
        other_tool.tool_id = "shell".into();
        assert_eq!(widened(&check(&file(other_tool), None)), Widening::Tool);
        let mut later = big.clone();
        later.expires_at = None;
        assert_eq!(widened(&check(&file(later), None)), Widening::ExpiresAt);
    }
}
