//! Shared fixtures for the benches (see `benches/`).
//!
//! Everything here is deterministic: fixed seeds, fixed call ids, no clock and no
//! randomness, so two runs of a bench measure the same bytes. The outcome builders follow
//! `host/record/tests/support/vectors.rs`, which writes the committed golden vectors: the
//! lines built here have the same shape and size (roughly 850 to 1,200 bytes per outcome).

use aegis_record::json::{self, Object, SafeInt, Value};
use aegis_record::line::LineBody as _;
use aegis_record::{
    CapabilityGrant, CapabilityOutcome, ComponentDigest, DecisionAxes, ExecutionOutcome, FsAxis,
    FsScope, IntentLine, LineHash, NetAxis, OutcomeLine, PolicyOutcome, PolicySetHash,
    RequestDigest, ResponseDigest, Session, SigningKey, VecSink,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The golden outcome line `spec/vectors/golden/02-outcome-success.json`: a signed
/// outcome of a successful call, canonical, without a trailing newline.
pub const GOLDEN_OUTCOME: &[u8] =
    include_bytes!("../../spec/vectors/golden/02-outcome-success.json");

/// The committed golden session `spec/vectors/golden/golden.aarl`: 21 lines, 12 of them
/// signed (open, nine outcomes, a decision, close).
pub const GOLDEN_FILE: &[u8] = include_bytes!("../../spec/vectors/golden/golden.aarl");

/// Seed of the key that signs the committed vectors (public and worthless by design).
pub const VECTOR_SEED: [u8; 32] = *b"aegis spec/vectors: public seed!";

/// Seed of the key that signs the synthetic files built here.
pub const BENCH_SEED: [u8; 32] = *b"aegis benches: public bench seed";

/// The key that signed the committed vectors.
pub fn vector_key() -> SigningKey {
    SigningKey::from_seed(VECTOR_SEED)
}

/// The key that signs the synthetic files.
pub fn bench_key() -> SigningKey {
    SigningKey::from_seed(BENCH_SEED)
}

/// Parses canonical bytes that must hold a JSON object.
///
/// # Panics
/// When the bytes are not a JSON object of the record's value space.
pub fn parse_object(bytes: &[u8]) -> Object {
    match json::parse(bytes) {
        Ok(Value::Object(o)) => o,
        other => panic!("expected a JSON object, got {other:?}"),
    }
}

/// A signed line taken apart into what [`aegis_record::seal`] takes and what it produced.
#[derive(Clone, Debug)]
pub struct SplitLine {
    /// The line's `line_type`.
    pub line_type: String,
    /// The line without its chain members: the input of `seal`.
    pub body: Object,
    /// The line's `seq`.
    pub seq: u64,
    /// The line's `prev_hash`.
    pub prev_hash: LineHash,
    /// The signing input: the canonical line without `signature`.
    pub signing_input: Vec<u8>,
    /// The signature, as 64 bytes.
    pub signature: aegis_record::Signature,
}

/// Takes a signed canonical line apart.
///
/// # Panics
/// When the line lacks a chain member or a signature.
pub fn split_signed_line(line: &[u8]) -> SplitLine {
    let obj = parse_object(line);
    let mut signing_input = Vec::with_capacity(line.len());
    obj.write_canonical_skipping(Some("signature"), &mut signing_input);
    let str_of = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("line has no string member {k:?}"))
            .to_owned()
    };
    let signature = aegis_record::Signature::from_hex(&str_of("signature")).expect("hex signature");
    let prev_hash = LineHash::from_hex(&str_of("prev_hash")).expect("hex prev_hash");
    let seq = obj.get("seq").and_then(Value::as_int).expect("integer seq");
    let line_type = str_of("line_type");
    let mut body = obj;
    for m in aegis_record::chain::CHAIN_MEMBERS {
        body.remove(m);
    }
    SplitLine {
        line_type,
        body,
        seq,
        prev_hash,
        signing_input,
        signature,
    }
}

fn int(n: u64) -> SafeInt {
    SafeInt::new(n).expect("inside the value space")
}

fn policy_hash() -> PolicySetHash {
    PolicySetHash::of_canonical_set(br#"{"default":"deny","rules":[],"version":"1"}"#)
}

fn axes(rule: &str) -> DecisionAxes {
    DecisionAxes {
        capability: Some("fs.read".into()),
        role: Some("ops".into()),
        session: Some("sess-bench".into()),
        matched_rule: Some(rule.into()),
        approval_ref: None,
        fs: Some(FsAxis {
            path_raw: "./notes".into(),
            path_canonical: "/srv/notes".into(),
        }),
        net: None,
        arguments: None,
        bound: None,
        call_arguments: None,
    }
}

fn ran(call: &str, execution: ExecutionOutcome, response: Option<&[u8]>) -> OutcomeLine {
    OutcomeLine {
        stop: None,
        call_id: call.into(),
        tool_id: "read-notes".into(),
        request_digest: RequestDigest::of_request(call.as_bytes()),
        policy_set_hash: policy_hash(),
        policy: PolicyOutcome::Allowed,
        capability: CapabilityOutcome::Granted {
            grant: CapabilityGrant {
                grant_id: format!("grant-{call}"),
                tool_id: "read-notes".into(),
                fs: Some(FsScope {
                    read_paths: vec!["/srv/notes".into()],
                    write_paths: vec![],
                }),
                net: None,
                max_memory_bytes: int(64 << 20),
                max_wall_ms: int(2000),
                max_output_bytes: int(1 << 20),
                // A wasm grant carries its component's digest, as the host writes it.
                component_digest: Some(ComponentDigest::of_component(b"read-notes.wasm")),
            },
        },
        execution,
        grant_id: Some(format!("grant-{call}")),
        response_digest: response.map(ResponseDigest::of_response),
        wall_ms: Some(int(3)),
        peak_memory_bytes: Some(int(1_179_648)),
        decision_axes: axes("allow-notes"),
    }
}

fn not_run(call: &str, tool: &str, policy: PolicyOutcome) -> OutcomeLine {
    OutcomeLine {
        stop: None,
        call_id: call.into(),
        tool_id: tool.into(),
        request_digest: RequestDigest::of_request(call.as_bytes()),
        policy_set_hash: policy_hash(),
        policy,
        capability: CapabilityOutcome::Denied {
            reason: "policy refused before capability".into(),
            denied_capability: None,
        },
        execution: ExecutionOutcome::HostDenied {
            reason: "not executed".into(),
        },
        grant_id: None,
        response_digest: None,
        wall_ms: None,
        peak_memory_bytes: None,
        decision_axes: axes("deny-default"),
    }
}

/// The call id of call number `i`.
pub fn call_id(i: u64) -> String {
    format!("call-bench-{i:08}")
}

/// A realistic outcome for call number `i`. The exit class rotates with `i` over the
/// classes of the golden session, weighted towards success as a real workload would be:
/// of every 8 calls, 4 succeed, 1 is refused by policy, 1 is rate limited, 1 is refused
/// a capability and 1 traps.
pub fn outcome(i: u64) -> OutcomeLine {
    let call = call_id(i);
    match i % 8 {
        0 | 2 | 4 | 6 => ran(&call, ExecutionOutcome::Success, Some(call.as_bytes())),
        1 => not_run(
            &call,
            "shell",
            PolicyOutcome::Denied {
                reason: "shell is never allowed".into(),
            },
        ),
        3 => not_run(
            &call,
            "search",
            PolicyOutcome::RateLimited {
                reason: "search: 10 calls per 60 s".into(),
            },
        ),
        5 => {
            let mut o = not_run(&call, "fetch", PolicyOutcome::Allowed);
            o.capability = CapabilityOutcome::Denied {
                reason: "host api.example.test is not in the manifest".into(),
                denied_capability: Some("net.http".into()),
            };
            o.decision_axes = DecisionAxes {
                capability: Some("net.http".into()),
                net: Some(NetAxis {
                    host: "api.example.test".into(),
                    port: 443,
                }),
                ..DecisionAxes::default()
            };
            o
        }
        _ => ran(
            &call,
            ExecutionOutcome::Trap {
                message: "wasm trap: unreachable instruction".into(),
            },
            None,
        ),
    }
}

/// The intent line that precedes [`outcome`]`(i)`.
pub fn intent(i: u64) -> IntentLine {
    let o = outcome(i);
    IntentLine {
        call_id: o.call_id,
        tool_id: o.tool_id,
        request_digest: o.request_digest,
    }
}

/// The body (members before sealing) of [`outcome`]`(i)`.
pub fn outcome_body(i: u64) -> Object {
    outcome(i).to_object()
}

/// A chain file built in memory by the real writer.
#[derive(Clone, Debug)]
pub struct ChainFile {
    /// The file's bytes: canonical lines, each ending in `\n`.
    pub bytes: Vec<u8>,
    /// How many lines it has.
    pub lines: u64,
    /// How many of them carry a signature (counted by parsing every line).
    pub signed_lines: u64,
}

/// Builds a closed session of exactly `lines` lines (at least 2) with [`Session`] over a
/// [`VecSink`]: an open line, then intent + outcome pairs, then a close line. With an
/// odd number of lines the last call has an intent and no outcome before the close.
///
/// # Panics
/// When `lines < 2`, or the writer fails (a `VecSink` never does).
pub fn chain_file(lines: u64) -> ChainFile {
    assert!(lines >= 2, "a session has at least an open and a close");
    let sink = VecSink::new();
    let session = Session::open(Arc::new(sink.clone()), bench_key(), None, Object::new())
        .expect("open the session");
    let body_lines = lines - 2;
    for n in 0..body_lines {
        let call = n / 2;
        if n % 2 == 0 {
            session.append_unsigned(&intent(call)).expect("append");
        } else {
            session.append(&outcome(call)).expect("append");
        }
    }
    session.close().expect("close the session");
    let file = ChainFile::from_bytes(sink.contents());
    assert_eq!(file.lines, lines, "the writer wrote one line per append");
    file
}

impl ChainFile {
    /// Wraps the bytes of a chain file, counting its lines and signed lines by parsing.
    ///
    /// # Panics
    /// When a line is not a JSON object of the record's value space.
    pub fn from_bytes(bytes: Vec<u8>) -> ChainFile {
        let mut lines = 0u64;
        let mut signed_lines = 0u64;
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            if parse_object(line).contains_key("signature") {
                signed_lines += 1;
            }
        }
        ChainFile {
            bytes,
            lines,
            signed_lines,
        }
    }
}

/// The policy request every policy bench evaluates: a read of notes by an operator.
pub fn policy_request() -> aegis_station_api::PolicyRequest<'static> {
    use aegis_station_api::abi_stable::std_types::RStr;
    aegis_station_api::PolicyRequest {
        tool_id: RStr::from("read-notes"),
        capability: RStr::from("fs.read"),
        role: RStr::from("ops"),
        session: RStr::from("s-1"),
    }
}

/// Writes `yaml` as `policy.yaml` in `dir` and returns its path.
///
/// # Panics
/// When the file cannot be written.
pub fn write_policy(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, yaml).expect("write the bench policy");
    path
}

/// A host builder as `aegis run --policy --audit` assembles one: the default profile,
/// `yaml` as its policy (written into `dir` by [`write_policy`]), lines signed by
/// [`bench_key`], on the default profile's memory sink or, with `record`, on the file
/// sink at that path (fsync, group commit). Tools, handlers and the sandbox are the
/// caller's to add.
pub fn host_builder(dir: &Path, yaml: &str, record: Option<&Path>) -> aegis_runtime::HostBuilder {
    let policy = write_policy(dir, yaml);
    let builder = aegis_runtime::Host::builder(
        aegis_runtime::Profile::embedded("default").expect("the embedded default profile"),
    )
    .policy_file("the bench", &policy)
    .signing_key(bench_key());
    match record {
        Some(r) => builder.audit_file("the bench", r),
        None => builder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_outcome_reseals_byte_for_byte() {
        let split = split_signed_line(GOLDEN_OUTCOME);
        let sealed = aegis_record::seal(
            &split.line_type,
            split.body.clone(),
            split.seq,
            split.prev_hash,
            Some(&vector_key()),
        )
        .unwrap();
        assert_eq!(sealed.bytes, GOLDEN_OUTCOME);
    }

    #[test]
    fn small_chain_file_verifies() {
        let file = chain_file(11);
        assert_eq!(file.lines, 11);
        // open + 4 outcomes + close; the fifth call has only its intent.
        assert_eq!(file.signed_lines, 6);
        let report = aegis_record::verify(
            &file.bytes[..],
            &aegis_record::Options {
                trust: None,
                threads: 1,
                approvers: None,
            },
        )
        .unwrap();
        assert_eq!(
            report.verdict(),
            &aegis_record::Verdict::Verified(aegis_record::Trust::Unpinned)
        );
    }
}
