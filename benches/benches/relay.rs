//! `aegis wrap`'s per-frame reading, without pipes or processes: what
//! `aegis_mcp::message::classify` costs for the frames a recorded call is made of.
//!
//! - `classify/call_request`: a client's `tools/call` (small arguments).
//! - `classify/call_response_4k`: the server's answer, a 4 KiB text result.
//! - `classify/list_response`: a `tools/list` answer of 20 tools with schemas.
//!
//! - `arguments/{serde,unambiguous}/{small,4k}`: a call's arguments read as a plain
//!   `serde_json::Value`, against the host's one-way check (`unambiguous::read_object`,
//!   which the pipeline runs on every call's arguments): the ratio is the check's cost.
//!
//! Each frame is classified once before timing and the shape checked, so the bench
//! cannot time a path that refuses the frame.

use aegis_mcp::message::{Message, classify};
use criterion::{Criterion, Throughput, criterion_main};
use std::hint::black_box;

fn call_request() -> Vec<u8> {
    br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/data/report.txt","encoding":"utf-8"},"_meta":{"progressToken":42}}}"#
        .to_vec()
}

fn call_response() -> Vec<u8> {
    let text = "lorem ipsum dolor sit amet, ".repeat(4096 / 28);
    format!(
        r#"{{"jsonrpc":"2.0","id":42,"result":{{"content":[{{"type":"text","text":"{text}"}}],"isError":false}}}}"#
    )
    .into_bytes()
}

fn list_response() -> Vec<u8> {
    let tools: Vec<String> = (0..20)
        .map(|i| {
            format!(
                r#"{{"name":"tool_{i}","description":"Tool number {i}, which does one thing well.","inputSchema":{{"type":"object","properties":{{"path":{{"type":"string","description":"Where"}},"depth":{{"type":"integer","minimum":0}}}},"required":["path"]}},"annotations":{{"readOnlyHint":true}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{}]}}}}"#,
        tools.join(",")
    )
    .into_bytes()
}

fn relay(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    let frames = [
        ("call_request", call_request(), "request"),
        ("call_response_4k", call_response(), "response"),
        ("list_response", list_response(), "response"),
    ];
    for (id, frame, shape) in &frames {
        let seen = match classify(frame) {
            Message::Request(r) if !r.duplicate_keys => "request",
            Message::Response(r) if !r.duplicate_keys && !r.is_error => "response",
            other => panic!("{id}: classified as {other:?}"),
        };
        assert_eq!(seen, *shape, "{id}");
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(*id, |b| b.iter(|| black_box(classify(black_box(frame)))));
    }
    g.finish();
}

fn arguments(c: &mut Criterion) {
    use aegis_policy_arguments::unambiguous::read_object;
    let small = br#"{"path":"/srv/data/report.txt","encoding":"utf-8"}"#.to_vec();
    let rows: Vec<String> = (0..48)
        .map(|i| format!(r#"{{"id":{i},"name":"row {i}","tags":["a","b"],"ok":true}}"#))
        .collect();
    let large = format!(r#"{{"path":"/srv/data","rows":[{}]}}"#, rows.join(",")).into_bytes();
    let mut g = c.benchmark_group("arguments");
    for (id, text) in [("small", &small), ("4k", &large)] {
        assert!(read_object(text).is_ok(), "{id}");
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(format!("serde/{id}"), |b| {
            b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(text))))
        });
        g.bench_function(format!("unambiguous/{id}"), |b| {
            b.iter(|| black_box(read_object(black_box(text))))
        });
    }
    g.finish();
}

// The same as `criterion_group!`, which would define an undocumented `pub fn`.
fn benches() {
    let mut c = Criterion::default().configure_from_args();
    relay(&mut c);
    arguments(&mut c);
}

criterion_main!(benches);
