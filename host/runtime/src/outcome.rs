//! How a call ended, in the host's own words: the vocabulary every caller finishes a
//! call with, whether the tool ran in this host's wasmtime sandbox, as a host handler,
//! or in a server this host only relays to (an MCP server behind `aegis wrap`).
//!
//! The sandbox reports its runs in these types too ([`crate::sandbox`] re-exports
//! them), so there is one mapping from an ending to the record, in
//! [`crate::pipeline`], and a relay never has to name a sandbox type.
//!
//! # Non-guarantees
//! - An ending is what the caller reports. For a relayed server the host cannot see
//!   inside the server: `ServerDied` and `ToolError` are the relay's reading of what
//!   came back, recorded as such.

/// Which ceiling stopped a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exceeded {
    /// Total linear memory.
    Memory,
    /// Wall-clock time.
    WallTime,
    /// Output bytes.
    Output,
}

impl Exceeded {
    /// The record's `resource_exceeded.kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Exceeded::Memory => "memory",
            Exceeded::WallTime => "wall_time",
            Exceeded::Output => "output",
        }
    }
}

/// How a tool's run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It finished and exited 0; its output is returned.
    Success,
    /// It exited with a non-zero code.
    Exit(i32),
    /// It trapped.
    Trap(String),
    /// A ceiling stopped it.
    Exceeded(Exceeded),
    /// The tool finished and declined: a world component's `run` returned
    /// `err(message)`, or a relayed server answered with an error result (MCP
    /// `isError`). From the sandbox no output is returned; the message is the tool's
    /// own words, held to the output ceiling.
    ToolError(String),
    /// The caller cancelled it (a [`crate::CancelToken`], a client's
    /// `notifications/cancelled`), for this reason. No output is returned.
    Cancelled(String),
    /// The server a relayed call was handed to died (exited, closed its pipe) before
    /// it answered. No output is returned.
    ServerDied(String),
}
