//! Property: an honest session always verifies. Whatever text a guest or a caller puts
//! into any member of any line — control characters that escape sixfold, invalid UTF-8
//! converted at the boundary, multi-byte characters at the cut point, every member near
//! its bound at once, ids of megabytes, lists of thousands of entries — every line the
//! writer produces is accepted by the real verifier and the file is Verified.

mod support;

use aegis_record::approval::ClientMechanism;
use aegis_record::bound::{MAX_BODY_BYTES, MAX_TEXT_BYTES};
use aegis_record::json::{Object, SafeInt};
use aegis_record::verify::{Options, Verdict, verify};
use aegis_record::*;
use proptest::prelude::*;
use std::sync::Arc;
use support::vectors::key;

/// Text as a guest or caller might send it.
fn text() -> impl Strategy<Value = String> {
    let heavy = prop::sample::select(vec!['\u{1}', '"', '\\', '\n', 'x', 'é', '€', '😀', '\u{0}']);
    prop_oneof![
        // Anything, short.
        any::<String>(),
        // One character many times: escapes up to sixfold, multi-byte up to four bytes.
        (heavy.clone(), 0usize..100_000).prop_map(|(c, n)| std::iter::repeat_n(c, n).collect()),
        // Raw guest bytes, converted at the boundary the way the host converts them
        // (a WIT `string` is validated by the canonical ABI; raw bytes go through
        // `from_utf8_lossy`), so invalid UTF-8 becomes U+FFFD.
        prop::collection::vec(any::<u8>(), 0..20_000)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        // Just under, at and over the bound with a multi-byte or escaped tail, so the
        // cut lands inside where a character would be split.
        (0usize..8, heavy).prop_map(|(k, c)| {
            let mut s = "y".repeat(MAX_TEXT_BYTES - 4 + k);
            s.push(c);
            s.push(c);
            s
        }),
    ]
}

fn texts() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(text(), 0..12)
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    prop::option::of(text())
}

#[derive(Debug, Clone)]
struct Fields {
    call_id: String,
    tool_id: String,
    reason: String,
    message: String,
    grant_id: String,
    read_paths: Vec<String>,
    write_paths: Vec<String>,
    host: String,
    methods: Vec<String>,
    ports: Vec<u16>,
    rules: usize,
    axes: [Option<String>; 8],
    approval_id: String,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (text(), text(), text(), text(), text()),
        (texts(), texts(), text(), texts()),
        (prop::collection::vec(any::<u16>(), 0..20_000), 0usize..4),
        [
            opt_text(),
            opt_text(),
            opt_text(),
            opt_text(),
            opt_text(),
            opt_text(),
            opt_text(),
            opt_text(),
        ],
        text(),
    )
        .prop_map(
            |(
                (call_id, tool_id, reason, message, grant_id),
                (read_paths, write_paths, host, methods),
                (ports, rules),
                axes,
                approval_id,
            )| Fields {
                call_id,
                tool_id,
                reason,
                message,
                grant_id,
                read_paths,
                write_paths,
                host,
                methods,
                ports,
                rules,
                axes,
                approval_id,
            },
        )
}

fn fs(f: &Fields) -> FsScope {
    FsScope {
        read_paths: f.read_paths.clone(),
        write_paths: f.write_paths.clone(),
    }
}

fn net(f: &Fields) -> NetScope {
    NetScope {
        http: (0..f.rules)
            .map(|_| HttpRule {
                host: f.host.clone(),
                ports: f.ports.clone(),
                methods: f.methods.clone(),
            })
            .collect(),
    }
}

/// Every line type, every member filled from `f`, written by the real writer.
fn write(f: &Fields) -> Vec<u8> {
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    let request_digest = RequestDigest::of_invocation(&[f.tool_id.as_str()], f.message.as_bytes());
    s.append_unsigned(&IntentLine {
        call_id: f.call_id.clone(),
        tool_id: f.tool_id.clone(),
        request_digest,
    })
    .unwrap();
    let [
        capability,
        role,
        session,
        matched_rule,
        approval_ref,
        path_raw,
        path_canonical,
        host,
    ] = f.axes.clone();
    let axes = DecisionAxes {
        capability,
        role,
        session,
        matched_rule,
        approval_ref,
        fs: path_raw.map(|path_raw| FsAxis {
            path_raw,
            path_canonical: path_canonical.unwrap_or_default(),
        }),
        net: host.map(|host| NetAxis { host, port: 443 }),
        // Every argument member at once: the line bound holds with all of them full.
        arguments: Some(f.message.clone()),
        bound: Some(BoundArguments {
            names: f.read_paths.clone(),
            values: f.message.clone(),
        }),
        call_arguments: Some(f.message.clone()),
    };
    let granted = OutcomeLine {
        stop: None,
        call_id: f.call_id.clone(),
        tool_id: f.tool_id.clone(),
        request_digest,
        policy_set_hash: PolicySetHash::of_canonical_set(b"{}"),
        policy: PolicyOutcome::Allowed,
        capability: CapabilityOutcome::Granted {
            grant: CapabilityGrant {
                grant_id: f.grant_id.clone(),
                tool_id: f.tool_id.clone(),
                fs: Some(fs(f)),
                net: Some(net(f)),
                max_memory_bytes: SafeInt::from(1u32),
                max_wall_ms: SafeInt::from(1u32),
                max_output_bytes: SafeInt::from(1u32),
                component_digest: Some(ComponentDigest::of_component(f.message.as_bytes())),
            },
        },
        execution: ExecutionOutcome::Trap {
            message: f.message.clone(),
        },
        grant_id: Some(f.grant_id.clone()),
        response_digest: None,
        wall_ms: Some(SafeInt::from(1u32)),
        peak_memory_bytes: Some(SafeInt::from(1u32)),
        decision_axes: axes.clone(),
    };
    s.append(&granted).unwrap();
    for (policy, execution) in [
        (
            PolicyOutcome::Denied {
                reason: f.reason.clone(),
            },
            ExecutionOutcome::HostDenied {
                reason: f.reason.clone(),
            },
        ),
        (
            PolicyOutcome::RateLimited {
                reason: f.reason.clone(),
            },
            ExecutionOutcome::ResourceExceeded {
                kind: f.reason.clone(),
            },
        ),
        (
            PolicyOutcome::PendingApproval {
                approval_id: f.approval_id.clone(),
                scope: Some(scope(f)),
            },
            ExecutionOutcome::Success,
        ),
    ] {
        s.append(&OutcomeLine {
            stop: None,
            policy,
            capability: CapabilityOutcome::Denied {
                reason: f.reason.clone(),
                denied_capability: Some(f.reason.clone()),
            },
            execution,
            ..granted.clone()
        })
        .unwrap();
    }
    s.append(&DecisionLine {
        approval_id: format!("1{}", f.approval_id),
        verdict: DecisionVerdict::Approved { scope: scope(f) },
        approver: Some(Approver::Client {
            client: f.reason.clone(),
            mechanism: ClientMechanism::Elicitation,
        }),
    })
    .unwrap();
    // The approver signs the whole id and verdict; the line carries them bounded, and
    // the statement bounds them the same way, so the signature still holds.
    let approval_id = format!("2{}", f.approval_id);
    let verdict = DecisionVerdict::Denied {
        reason: f.reason.clone(),
    };
    s.append(&DecisionLine {
        approver: Some(aegis_record::approval::sign(
            &SigningKey::from_seed([3; 32]),
            &approval_id,
            &verdict,
        )),
        approval_id,
        verdict,
    })
    .unwrap();
    s.close().unwrap();
    sink.contents()
}

/// The largest scope the fields make: every member present, each as long as drawn.
fn scope(f: &Fields) -> ApprovalScope {
    ApprovalScope {
        tool_id: f.tool_id.clone(),
        arguments_digest: Some(ArgumentsDigest::of_canonical_arguments(f.reason.as_bytes())),
        fs: Some(fs(f)),
        net: Some(net(f)),
        expires_at: Some(aegis_record::time::format_micros(u64::MAX)),
    }
}

fn check(bytes: &[u8]) {
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert!(
            line.len() <= MAX_BODY_BYTES,
            "a line of {} bytes exceeds the documented bound",
            line.len()
        );
    }
    let report = verify(bytes, &Options::default()).unwrap();
    assert_eq!(
        report.verdict(),
        &Verdict::Verified(Trust::Unpinned),
        "{}",
        report.to_text()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever goes into the members, the honest session verifies.
    #[test]
    fn every_line_the_writer_produces_verifies(f in fields()) {
        check(&write(&f));
    }
}

/// The sum must still fit: every member at once, each far over its own bound, in the
/// form that escapes most (U+0001, six bytes each), with the most list entries.
#[test]
fn every_member_at_its_worst_at_once_still_verifies() {
    let worst = "\u{1}".repeat(1 << 20);
    let many: Vec<String> = (0..2000).map(|_| worst[..5000].to_owned()).collect();
    let f = Fields {
        call_id: worst.clone(),
        tool_id: worst.clone(),
        reason: worst.clone(),
        message: worst.clone(),
        grant_id: worst.clone(),
        read_paths: many.clone(),
        write_paths: many.clone(),
        host: worst.clone(),
        methods: many[..200].to_vec(),
        ports: (0..=u16::MAX).collect(),
        rules: 16,
        axes: std::array::from_fn(|_| Some(worst.clone())),
        approval_id: worst,
    };
    check(&write(&f));
}

/// The reported failure: a tool's error of 200,000 U+0001 characters fit a 1 MiB output
/// ceiling but escaped to a 1.2 MB outcome line, which the verifier calls malformed.
#[test]
fn regression_a_control_character_error_message_no_longer_breaks_the_chain() {
    let mut o = support::unrun_outcome("call-1", "tool");
    o.execution = ExecutionOutcome::Trap {
        message: format!("the tool returned an error: {}", "\u{1}".repeat(200_000)),
    };
    let sink = VecSink::new();
    let s = Session::open(Arc::new(sink.clone()), key(), None, Object::new()).unwrap();
    s.append_unsigned(&support::intent_for("call-1", "tool"))
        .unwrap();
    s.append(&o).unwrap();
    s.close().unwrap();
    let bytes = sink.contents();
    check(&bytes);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains("...[truncated: 200028 bytes, sha256 "));
}
