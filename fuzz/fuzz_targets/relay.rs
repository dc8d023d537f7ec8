//! Fuzz target `relay`: arbitrary bytes as frames from both sides of an `aegis-mcp` relay.
//!
//! Input layout: byte 0 picks the configuration (bit 0: record-only pins, bit 1: forward
//! unparsed client lines). The rest is split at `0x00` bytes (JSON never holds a raw NUL,
//! so JSON seeds stay whole) into segments; a segment's first byte picks what it is (low
//! two bits: 0 client bytes, 1 server bytes, 2 the server exits, 3 server bytes), and its
//! other bytes are cut into frames by `FrameReader` with a 512-byte bound, so over-long
//! lines are exercised too.
//!
//! A segment whose first byte has bit 2 set is *repeated*, to reach frames near the real
//! 4 MiB bound from a small input: its next two bytes are a count `n` (big-endian), and
//! the rest is `head 0x01 element 0x01 tail` (JSON never holds a raw `0x01` either). The
//! bytes `head`, `element` × (`n` × 64), `tail`, cut at 4 MiB + 1 and at their first
//! newline, are one frame under the default 4 MiB bound. So `[` `0,` `0]` with `n` = 0xffff is the `[0,0,…]` flood,
//! and `{"id":1,"method":"tools/call","params":…}` with `,` in the element a huge batch.
//!
//! The gate opens every call except to tools named `rm` or starting with `x`.
//!
//! Properties:
//! - No panic.
//! - Every pending call is finished at most once (a second finish panics in the gate) and,
//!   after `shutdown`, every opened call has been finished.
//! - While a frame is handled in which a call was refused (by the gate or by the relay's
//!   own checks), no `ToServer` action is produced: a refused call, or its batch, never
//!   reaches the server.
//! - Every `ToServer` action is exactly the client frame being handled, and every
//!   `ToClient` action produced for a server frame is exactly that frame, or the relay's
//!   own JSON-RPC errors (code -32003) for the requests a dropped frame answered.
//! - One frame yields at most `MAX_LOG_LINES` + 1 log lines.
//!
//! Memory: run with `-rss_limit_mb` and `-malloc_limit_mb` (see the README) so that a
//! frame whose handling allocates without bound fails the campaign.
#![no_main]
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeSet;

use aegis_mcp::frame::{DEFAULT_MAX_FRAME, Frame, FrameReader};
use aegis_mcp::relay::{
    Action, CallEnd, Cause, Gate, MAX_LOG_LINES, NeverParked, Opened, PinMode, Refusal,
    RefusedCall, Relay, RelayConfig, ToolCall,
};
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct CountingGate {
    opened: RefCell<u64>,
    finished: RefCell<BTreeSet<u64>>,
    refusals: RefCell<u64>,
}

impl Gate for CountingGate {
    type Pending = u64;
    type Parked = NeverParked;
    type Waiter = NeverParked;

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

    fn open(&self, call: &ToolCall<'_>) -> Result<Opened<Self>, Refusal> {
        if call.name == "rm" || call.name.starts_with('x') {
            *self.refusals.borrow_mut() += 1;
            return Err(Refusal::new(Cause::Denied, "denied"));
        }
        let mut opened = self.opened.borrow_mut();
        *opened += 1;
        Ok(Opened::Forward(*opened))
    }

    fn finish(&self, pending: u64, _end: CallEnd<'_>) {
        assert!(
            self.finished.borrow_mut().insert(pending),
            "pending {pending} finished twice"
        );
    }

    fn tool_changed(&self, _change: &aegis_record::ToolChangeLine) {}

    fn refused(&self, _call: &RefusedCall<'_>) -> Option<String> {
        *self.refusals.borrow_mut() += 1;
        None
    }
}

/// The bytes of a repeated segment (see the layout above), at most 4 MiB + 1.
fn repeat(bytes: &[u8]) -> Vec<u8> {
    let Some((count, rest)) = bytes.split_first_chunk::<2>() else {
        return Vec::new();
    };
    let count = usize::from(u16::from_be_bytes(*count)) * 64;
    let mut parts = rest.splitn(3, |&b| b == 1);
    let head = parts.next().unwrap_or_default();
    let element = parts.next().unwrap_or_default();
    let tail = parts.next().unwrap_or_default();
    let cap = DEFAULT_MAX_FRAME + 1;
    let mut out = Vec::with_capacity(cap.min(head.len() + element.len() * count + tail.len()));
    out.extend_from_slice(head);
    if !element.is_empty() {
        for _ in 0..count {
            if out.len() + element.len() > cap {
                break;
            }
            out.extend_from_slice(element);
        }
    }
    out.extend_from_slice(tail);
    out.truncate(cap);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let config = RelayConfig {
        pin_mode: if mode & 1 == 1 {
            PinMode::RecordOnly
        } else {
            PinMode::Enforce
        },
        forward_unparsed_client_lines: mode & 2 == 2,
        ..RelayConfig::default()
    };
    let mut relay = Relay::new(CountingGate::default(), config);
    for segment in rest.split(|&b| b == 0) {
        let Some((&kind, bytes)) = segment.split_first() else {
            continue;
        };
        if kind & 3 == 2 {
            relay.server_exited("exited");
            continue;
        }
        let from_client = kind & 3 == 0;
        let repeated;
        let (bytes, bound) = if kind & 4 == 4 {
            repeated = repeat(bytes);
            (&repeated[..], DEFAULT_MAX_FRAME)
        } else {
            (bytes, 512)
        };
        // A repeated segment is one frame (up to its first newline): a frame of
        // thousands of small lines would only cost the campaign its speed.
        let bytes = if kind & 4 == 4 {
            let end = bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |at| at + 1);
            &bytes[..end]
        } else {
            bytes
        };
        for frame in FrameReader::new(bytes, bound) {
            let frame = frame.expect("reading a slice cannot fail");
            let input = match &frame {
                Frame::Line(bytes) => Some(bytes.clone()),
                Frame::TooLong { .. } => None,
            };
            let before = *relay.gate().refusals.borrow();
            let actions = if from_client {
                relay.from_client(frame)
            } else {
                relay.from_server(frame)
            };
            let refused = *relay.gate().refusals.borrow() > before;
            let logs = actions
                .iter()
                .filter(|a| matches!(a, Action::Log(_) | Action::Warn(_)))
                .count();
            assert!(logs <= MAX_LOG_LINES + 1, "{logs} log lines for one frame");
            for action in &actions {
                match action {
                    Action::ToServer(bytes) => {
                        assert!(from_client, "a server frame produced ToServer");
                        assert!(!refused, "a refused call reached the server");
                        assert_eq!(Some(bytes), input.as_ref(), "forwarded bytes differ");
                    }
                    Action::ToClient(bytes) if !from_client && Some(bytes) != input.as_ref() => {
                        let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
                        // The relay's errors, or a listing with tools left out.
                        let shortened = has(b"\"tools\":[")
                            && input.as_ref().is_some_and(|i| bytes.len() < i.len());
                        assert!(
                            has(b"\"error\":{\"code\":-32003") || shortened,
                            "a server frame was changed into something else than the relay's errors or a shortened listing"
                        );
                    }
                    Action::ToClient(_) | Action::Log(_) | Action::Warn(_) => {}
                }
            }
        }
    }
    relay.shutdown();
    let gate = relay.gate();
    assert_eq!(
        gate.finished.borrow().len() as u64,
        *gate.opened.borrow(),
        "an opened call was never finished"
    );
});
