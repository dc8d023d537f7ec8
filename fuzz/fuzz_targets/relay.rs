//! Fuzz target `relay`: arbitrary bytes as frames from both sides of an `aegis-mcp` relay.
//!
//! Input layout: byte 0 picks the configuration (bit 0: record-only pins, bit 1: forward
//! unparsed client lines). The rest is split at `0x00` bytes (JSON never holds a raw NUL,
//! so JSON seeds stay whole) into segments; a segment's first byte picks what it is (low
//! two bits: 0 client bytes, 1 server bytes, 2 the server exits, 3 server bytes), and its
//! other bytes are cut into frames by `FrameReader` with a 512-byte bound, so over-long
//! lines are exercised too.
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
//!   `ToClient` action produced for a server frame is exactly that frame.
#![no_main]
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeSet;

use aegis_mcp::frame::{Frame, FrameReader};
use aegis_mcp::relay::{
    Action, CallEnd, Gate, PinMode, Refusal, RefusedCall, Relay, RelayConfig, ToolCall,
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

    fn open(&self, call: &ToolCall<'_>) -> Result<u64, Refusal> {
        if call.name == "rm" || call.name.starts_with('x') {
            *self.refusals.borrow_mut() += 1;
            return Err(Refusal {
                station: "policy".into(),
                reason: "denied".into(),
                call_id: None,
            });
        }
        let mut opened = self.opened.borrow_mut();
        *opened += 1;
        Ok(*opened)
    }

    fn finish(&self, pending: u64, _end: CallEnd<'_>) {
        assert!(
            self.finished.borrow_mut().insert(pending),
            "pending {pending} finished twice"
        );
    }

    fn refused(&self, _call: &RefusedCall<'_>) -> Option<String> {
        *self.refusals.borrow_mut() += 1;
        None
    }
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
            relay.server_exited();
            continue;
        }
        let from_client = kind & 3 == 0;
        for frame in FrameReader::new(bytes, 512) {
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
            for action in &actions {
                match action {
                    Action::ToServer(bytes) => {
                        assert!(from_client, "a server frame produced ToServer");
                        assert!(!refused, "a refused call reached the server");
                        assert_eq!(Some(bytes), input.as_ref(), "forwarded bytes differ");
                    }
                    Action::ToClient(bytes) if !from_client => {
                        assert_eq!(Some(bytes), input.as_ref(), "relayed bytes differ");
                    }
                    Action::ToClient(_) | Action::Log(_) => {}
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
