//! What one hostile frame can cost the MCP relay, in bytes allocated (never in time).
//!
//! Each shape below is built to the default frame bound (4 MiB) and handed to a relay
//! whose session listed its tools and has calls pending, from the side it would come
//! from. `allocation_counter` (a counting global allocator, per thread) reports the peak
//! bytes live while the relay handles it; the frame itself is allocated before the
//! measure. Before the relay read frames lazily, `[0,0,…]` alone cost over 100 MB in the
//! classifier's tree.
//!
//! The stated bound: handling one frame never holds more than `PEAK_BOUND` (12 MiB, three
//! times the frame) beyond the frame itself. What may grow with the frame is the hash
//! list of one object's keys (8 bytes a key, while the list grows 24) and strings the
//! relay decodes (a tool name); both stay under it at the frame bound, and the value
//! bound (2^20) caps the first whatever the frame bound.

use std::cell::Cell;

use aegis_mcp::frame::{DEFAULT_MAX_FRAME, Frame};
use aegis_mcp::relay::{
    Action, CallEnd, Gate, MAX_BATCH, NeverParked, Opened, Refusal, RefusedCall, Relay,
    RelayConfig, ToolCall,
};

const PEAK_BOUND: u64 = 3 * DEFAULT_MAX_FRAME as u64;

/// Opens every call; counts what it saw.
#[derive(Default)]
struct Counting {
    opened: Cell<u64>,
    finished: Cell<u64>,
    refused: Cell<u64>,
}

impl Gate for Counting {
    type Pending = u64;
    type Parked = NeverParked;
    type Waiter = NeverParked;

    fn open(&self, _call: &ToolCall<'_>) -> Result<Opened<Self>, Refusal> {
        self.opened.set(self.opened.get() + 1);
        Ok(Opened::Forward(self.opened.get()))
    }

    fn resume(
        &self,
        parked: NeverParked,
        _: NeverParked,
        _: &ToolCall<'_>,
    ) -> Result<u64, Refusal> {
        match parked {}
    }

    fn withdraw(&self, parked: NeverParked, _: &str) {
        match parked {}
    }

    fn finish(&self, _pending: u64, _end: CallEnd<'_>) {
        self.finished.set(self.finished.get() + 1);
    }

    fn tool_changed(&self, _change: &aegis_record::ToolChangeLine) {}

    fn refused(&self, _call: &RefusedCall<'_>) -> Option<String> {
        self.refused.set(self.refused.get() + 1);
        None
    }
}

fn line(text: &str) -> Frame {
    Frame::Line(format!("{text}\n").into_bytes())
}

fn call(id: usize, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

/// A relay whose session listed `read` and has call 1 pending.
fn session() -> Relay<Counting> {
    let mut relay = Relay::new(Counting::default(), RelayConfig::default());
    relay.from_client(line(r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#));
    relay.from_server(line(
        r#"{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"read","description":"Reads"}]}}"#,
    ));
    relay.from_client(line(&call(1, "read", "{}")));
    relay.from_client(line(r#"{"jsonrpc":"2.0","id":"l2","method":"tools/list"}"#));
    assert_eq!(relay.pending(), 2);
    relay
}

/// `head`, then `element` (joined by `sep`) as many times as fit, then `tail`: one frame
/// just under the bound.
fn fill(head: &str, element: &str, sep: &str, tail: &str) -> String {
    let room = DEFAULT_MAX_FRAME - head.len() - tail.len() - 1;
    let count = room / (element.len() + sep.len());
    let mut out = String::with_capacity(DEFAULT_MAX_FRAME);
    out.push_str(head);
    for i in 0..count {
        if i > 0 {
            out.push_str(sep);
        }
        out.push_str(element);
    }
    out.push_str(tail);
    assert!(out.len() < DEFAULT_MAX_FRAME && out.len() > DEFAULT_MAX_FRAME - 64 * 1024);
    out
}

/// Like [`fill`], with each element made distinct by its index.
fn fill_indexed(head: &str, element: impl Fn(usize) -> String, tail: &str) -> String {
    let mut out = String::with_capacity(DEFAULT_MAX_FRAME);
    out.push_str(head);
    let mut i = 0;
    loop {
        let next = element(i);
        if out.len() + next.len() + 1 + tail.len() >= DEFAULT_MAX_FRAME {
            break;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(&next);
        i += 1;
    }
    out.push_str(tail);
    out
}

struct Shape {
    name: &'static str,
    from_client: bool,
    frame: String,
}

fn shapes() -> Vec<Shape> {
    // 120 levels inside the message's own four: just under the reader's 128.
    let nested = format!("{}1{}", "[".repeat(120), "]".repeat(120));
    let mut shapes = vec![
        Shape {
            name: "[0,0,…] from the client (over the value bound)",
            from_client: true,
            frame: fill("[", "0", ",", "]"),
        },
        Shape {
            name: "[0,0,…] as the server's answer to call 1",
            from_client: false,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":1,"result":{"v":["#,
                "0",
                ",",
                "]}}",
            ),
        },
        Shape {
            name: "small numbers under the value bound, answering call 1",
            from_client: false,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"v":["#,
                "1234567",
                ",",
                "]}}}",
            ),
        },
        Shape {
            name: "deep-but-legal nesting, many times, in a call's arguments",
            from_client: true,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","arguments":{"a":["#,
                &nested,
                ",",
                "]}}}",
            ),
        },
        Shape {
            name: "a batch of tools/call far over the batch bound",
            from_client: true,
            frame: fill_indexed("[", |i| call(i + 10, "read", "{}"), "]"),
        },
        Shape {
            name: "many small objects in a result",
            from_client: false,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":["#,
                r#"{"a":0}"#,
                ",",
                "]}}",
            ),
        },
        Shape {
            name: "one object of many keys in a call's arguments",
            from_client: true,
            frame: fill_indexed(
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"#,
                |i| format!(r#""{i:x}":0"#),
                "}}}",
            ),
        },
        Shape {
            name: "a long plain string in a call's arguments",
            from_client: true,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read","arguments":{"s":""#,
                "x",
                "",
                r#""}}}"#,
            ),
        },
        Shape {
            name: "a long escaped string as the tool name",
            from_client: true,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":""#,
                r"\u00e9",
                "",
                r#"","arguments":{}}}"#,
            ),
        },
        Shape {
            name: "a tools/list answer whose one tool has a name of the frame's length",
            from_client: false,
            frame: fill(
                r#"{"jsonrpc":"2.0","id":"l2","result":{"tools":[{"name":""#,
                r"\u00e9",
                "",
                r#""}]}}"#,
            ),
        },
        Shape {
            name: "a tools/list answer of many small tools (over the tool bound)",
            from_client: false,
            frame: fill_indexed(
                r#"{"jsonrpc":"2.0","id":"l2","result":{"tools":["#,
                |i| format!(r#"{{"name":"t{i}"}}"#),
                "]}}",
            ),
        },
        Shape {
            name: "a tools/list answer of 9000 tools with long descriptions",
            from_client: false,
            frame: {
                let description = "d".repeat(400);
                let tools: Vec<String> = (0..9000)
                    .map(|i| {
                        format!(
                            r#"{{"name":"t{i}","description":"{description}","inputSchema":{{"type":"object"}}}}"#
                        )
                    })
                    .collect();
                format!(
                    r#"{{"jsonrpc":"2.0","id":"l2","result":{{"tools":[{}]}}}}"#,
                    tools.join(",")
                )
            },
        },
    ];
    // A batch exactly at the bound, each call with arguments large enough to fill the
    // frame: every element is decided.
    let per_call = DEFAULT_MAX_FRAME / MAX_BATCH - 200;
    let arguments = format!(r#"{{"s":"{}"}}"#, "y".repeat(per_call));
    let calls: Vec<String> = (0..MAX_BATCH)
        .map(|i| call(i + 100_000, "read", &arguments))
        .collect();
    shapes.push(Shape {
        name: "a batch of tools/call at the batch bound, filling the frame",
        from_client: true,
        frame: format!("[{}]", calls.join(",")),
    });
    shapes
}

#[test]
fn one_max_size_frame_of_each_shape_stays_under_the_bound() {
    let mut report = Vec::new();
    let mut over = Vec::new();
    for shape in shapes() {
        assert!(shape.frame.len() < DEFAULT_MAX_FRAME, "{}", shape.name);
        let mut relay = session();
        let frame = line(&shape.frame);
        let mut actions: Vec<Action> = Vec::new();
        let info = allocation_counter::measure(|| {
            actions = if shape.from_client {
                relay.from_client(frame)
            } else {
                relay.from_server(frame)
            };
            // What the caller is handed counts too, but not the frame it forwards,
            // which was allocated before.
        });
        report.push(format!(
            "{:>10} bytes peak, {:>7} allocations: {}",
            info.bytes_max, info.count_total, shape.name
        ));
        if info.bytes_max > PEAK_BOUND {
            over.push(shape.name);
        }
        let logs = actions
            .iter()
            .filter(|a| matches!(a, Action::Log(_)))
            .count();
        assert!(
            logs <= aegis_mcp::relay::MAX_LOG_LINES + 1,
            "{}",
            shape.name
        );
    }
    // Printed for the record (`cargo test -- --nocapture`).
    println!("{}", report.join("\n"));
    assert!(over.is_empty(), "over {PEAK_BOUND} bytes: {over:?}");
}

/// The bound is not vacuous: the measure sees a frame-sized allocation.
#[test]
fn the_measure_sees_allocations() {
    let info = allocation_counter::measure(|| {
        let copy = std::hint::black_box(vec![0u8; DEFAULT_MAX_FRAME]);
        drop(copy);
    });
    assert!(info.bytes_max >= DEFAULT_MAX_FRAME as u64);
}
