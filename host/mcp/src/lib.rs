//! The relay behind `aegis wrap`: a core of pure logic, and the stdio session around it.
//!
//! `aegis wrap` sits between an MCP client and an MCP stdio server and relays
//! newline-delimited JSON-RPC both ways. This crate holds everything about that relay that
//! can be decided without I/O:
//!
//! - [`frame`] cuts a byte stream into lines, bounded in memory;
//! - [`message`] classifies one line as a JSON-RPC request, notification, response or
//!   batch, with duplicate-key detection and ids kept as their exact JSON text;
//! - [`pins`] digests tool definitions over a canonical form and compares listings;
//! - [`review`] lays out what differs between pins and a listing, field by field, for
//!   an operator to read (`aegis pins diff`);
//! - [`relay`] is the state machine that decides what each frame becomes, and calls a
//!   [`relay::Gate`] for every `tools/call`.
//!
//! Around that core, with I/O:
//!
//! - [`stdio`] runs a session: it spawns the server, relays between it and the client on
//!   reader and writer threads with bounded queues, stops the server when the client
//!   leaves, and ends every pending call;
//! - [`lister`] lists a server's tools outside a session (`aegis pins diff` and
//!   `aegis pins accept`), bounded in time, pages and size;
//! - `host_gate` (cargo feature `runtime`, on by default) implements the gate over the
//!   Aegis runtime's pipeline. Without the feature the crate does not depend on the
//!   runtime.
//!
//! # Guarantees
//! - Forwarded bytes are the bytes received, never re-serialized.
//! - A `tools/call` is forwarded only after [`relay::Gate::open`] allowed it, and every
//!   allowed call is finished exactly once ([`relay::Gate::finish`] takes it by value and
//!   the relay finishes whatever is still pending when it shuts down or is dropped).
//!
//! # Non-guarantees
//! - The relay cannot see what the server does with a call; it sees the bytes going in and
//!   coming back. Wrapping a server is weaker than running a tool in the sandbox.
#![forbid(unsafe_code)]

pub mod frame;
#[cfg(feature = "runtime")]
pub mod host_gate;
mod json;
pub mod lister;
pub mod message;
mod outbox;
pub mod pins;
pub mod relay;
pub mod review;
pub mod stdio;
