//! The relay's decision state machine: frames in, [`Action`]s out, no I/O.
//!
//! The caller reads frames from the client and the server (see [`crate::frame`]), hands
//! each to [`Relay::from_client`] or [`Relay::from_server`], and carries out the actions in
//! order. Every `tools/call` goes through a [`Gate`] (policy, capability, durable intent)
//! before it may be forwarded.
//!
//! # Guarantees
//! - `ToServer` and `ToClient` carry either a frame's exact bytes or a reply the relay
//!   built itself (a refusal result or a JSON-RPC error echoing the request id's exact
//!   text). Forwarded frames are never re-serialized.
//! - A `tools/call` is forwarded only when [`Gate::open`] returned a pending call, and
//!   every pending call reaches [`Gate::finish`] exactly once: on its response, on the
//!   client's `notifications/cancelled`, when its batch is refused, at
//!   [`Relay::server_exited`], or at [`Relay::shutdown`] (also run on drop).
//! - A `tools/call` is refused before the gate is asked when its frame has colliding keys
//!   anywhere, its tool name is not one exact string, its arguments are named by a key
//!   that is not exactly `arguments` (see [`crate::message::AmbiguousArguments`]), its id is already pending, the
//!   pending table is full, or (in [`PinMode::Enforce`]) the tool is unknown, changed,
//!   removed, listed twice, or listed unreadably; refusals the relay makes itself are
//!   reported through [`Gate::refused`] so they can be audited too. A call to a tool the
//!   server never listed is refused in both pin modes.
//! - A client frame the relay cannot classify is not forwarded (the MCP stdio transport
//!   forbids a client from writing anything but MCP messages), unless the operator opted
//!   in with [`RelayConfig::forward_unparsed_client_lines`], and even then only a line that
//!   is not JSON at all. A `tools/call` without an id is never forwarded.
//! - A batch (MCP 2025-03-26) is forwarded whole or not at all: if any element would be
//!   refused or dropped, every request in it is answered (refusal results for refused
//!   calls, a JSON-RPC error for the others) and nothing reaches the server. A batch of
//!   more than [`MAX_BATCH`] messages is refused before any element is decided.
//! - A server batch is relayed whole or not at all, by the same rule.
//! - A request id cancelled by the client while pending stays a *tombstone* until the
//!   server answers it (at most [`RelayConfig::max_pending`] tombstones, the oldest
//!   forgotten with a log line): a new request reusing it is refused as if it were still
//!   pending, and the server's late answer is dropped, never taken for another request.
//! - A server line the relay will not relay (not JSON, a bare `\r`, ambiguous members,
//!   over a bound, an answer to a `tools/call` with duplicate keys) that answers a pending
//!   request whose id can be read without choosing is replaced by a JSON-RPC error
//!   ([`UNRELAYABLE_ANSWER`]) for that id, and a pending call ends with that error as its
//!   response ([`CallEnd::Unrelayable`]).
//! - Handling one frame costs memory bounded independently of the frame bound (see the
//!   `json` module) and yields at most [`MAX_LOG_LINES`] + 1 diagnostics.
//!
//! - The relay lists the server's tools itself (ids [`OWN_REQUEST_ID_PREFIX`]`N`) after
//!   the client's `notifications/initialized` and after the server's
//!   `notifications/tools/list_changed`, follows every `nextCursor` (at most
//!   [`MAX_LISTING_PAGES`] pages and [`MAX_LISTING_BYTES`] bytes, else the listing fails
//!   closed), and never shows those answers to the client. No call runs before a complete
//!   listing (the client's or its own) pinned the session, or pins were loaded: a call
//!   that arrives while its own listing is under way and nothing usable is pinned (or the
//!   tools changed since) waits, at most [`RelayConfig::max_pending`] of them, and is
//!   decided when a listing ends; cancelled while waiting, it is recorded as refused and
//!   never reaches the server. The client's own listings are compared with the pins page
//!   by page as they pass.
//! - A call the gate parks for approval ([`Opened::Park`]) is neither forwarded nor
//!   answered while it waits: the relay holds the request exactly as sent, its id stays
//!   in use (and counts against [`RelayConfig::max_pending`]), and its [`Waiter`] goes to
//!   the caller. Settled ([`Relay::settle`]), an approved call is forwarded byte for byte
//!   as the client sent it once [`Gate::resume`] opened it as a new call, and a refused one
//!   is answered with the refusal. A park whose request ends first (the client cancels,
//!   the server exits, the relay stops) goes to [`Gate::withdraw`], exactly once, and its
//!   late settlement does nothing. A client that gave a progress token hears
//!   `notifications/progress` while it waits ([`Relay::keep_alive`]).
//! - With `approve_via_client` on and a client that declared form elicitation in its
//!   `initialize`, a park also asks the client's user (`elicitation/create`, ids under
//!   `aegis-relay/elicit/`). The client's answer to it is never forwarded to the server;
//!   it goes to the gate as the client's decision, which the first decision of anyone
//!   else may precede. A question still open when its park settles is withdrawn.
//! - With `approve_via_client` on, a park whose request declares MCP 2026-07-28 (or
//!   later) and form elicitation in its `_meta` is answered at once `input_required`:
//!   the same question under `inputRequests.approval`, the approval id as
//!   `requestState`; nothing is held. The client's retry (a `tools/call` echoing that
//!   `requestState`) must repeat the tool and the exact arguments text and carry the
//!   answer under `inputResponses.approval`, else it is refused (recorded,
//!   `approval_mismatch`) and the park left as it was. Taken, the answer goes to the
//!   gate as the client's ([`ClientMechanism::InputRequired`]) and the retry is held as
//!   any park; approved, it is forwarded without `requestState` and `inputResponses`
//!   (every other byte the client's), the frame [`Gate::resume`] decided on.
//! - A refusal answering a request of MCP 2026-07-28 or later names `resultType:
//!   "complete"`, which that revision requires of every result.
//! - A change seen once (a tool changed, added, removed or listed twice) refuses that
//!   tool for the rest of the session, even if a later listing shows it as pinned again,
//!   and is written to the pins file as `held`. A tool whose definition names a pinned
//!   field by another spelling (`Description`) is refused in both pin modes.
//! - Enforced, such a tool is also left out of every page of the client's `tools/list`
//!   as it passes (`result.tools` shortened, everything else as the server wrote it), so
//!   its changed definition never reaches the model; the operator is warned once per
//!   tool ([`Action::Warn`]). A server batch answering a client's listing is not relayed.
//!
//! # Non-guarantees
//! - A frame over the size bound cannot be read, so nothing can answer it: it is dropped
//!   and logged, and a call whose response was too long stays pending until shutdown.
//! - After `notifications/tools/list_changed`, calls are refused until a listing asked
//!   for after it completes (the relay's own, normally within one round trip).
//! - A server that answers the relay's listing and the client's differently is caught
//!   only on what the client is shown: its pages are compared with the pins (pages shown
//!   before any pins existed, as soon as they do; a page the relay cannot read is never
//!   shown, the client gets error −32003 instead), but a client that caches a listing
//!   from another session is not shown anything the relay can compare.
//! - A call waits for the relay's listing without a deadline: a server that never
//!   answers it keeps such calls until it exits (then they are answered as refused).
//!   Calls inside a JSON-RPC batch never wait: with nothing usable pinned they are
//!   refused. At most [`MAX_LISTING_BYTES`] of waiting frames are held; past that a
//!   call is decided at once (and refused).
//! - A call inside a batch cannot wait for approval (the batch is answered as one): a
//!   park there is withdrawn and the batch refused.
//! - A client's answer to an elicitation says that the client answered, not that a
//!   person read the question: a client may accept on its own. An answer sent inside a
//!   client batch is not used (the batch is refused; the queue can still decide).
//! - A park answered `input_required` is decided by nobody until its retry comes: a
//!   client that never retries leaves it to the approvals queue (a person may decide
//!   it there, but nothing runs without the retry) and it is settled, withdrawn or
//!   expired, only when the server exits or the relay stops. At most
//!   [`RelayConfig::max_pending`] await a retry, keeping at most
//!   [`MAX_AWAITING_RETRY_BYTES`] of tool names and arguments; past either a park is
//!   held as before.
//! - The `requestState` is the approval id, not a secret. A retry can only settle that
//!   park and run that exact call; one naming no waiting park (forged, or used) is not
//!   refused but decided as a new call, which the policy parks afresh.
//! - A retry inside a client batch is not taken (batches end before 2026-07-28).
//! - A task-augmented `tools/call` (MCP 2025-11-25) finishes when the server answers with
//!   the task handle; the work the task does afterwards is not followed.
//! - [`CallEnd::Cancelled`] means the client cancelled; the server may have run the call
//!   anyway (MCP lets it ignore a cancellation), and its late answer is dropped.
//! - A dropped server line whose id cannot be read without choosing (two `id` members, a
//!   line broken before its `id`) answers nobody: the request it may answer stays pending
//!   until the server exits.
//! - A response id the server re-spells (`1` echoed as `1.0`) does not match and is dropped.
//! - Once [`RelayConfig::max_pending`] cancelled requests wait for answers, the oldest
//!   tombstone is forgotten rather than new requests refused: MCP asks servers not to
//!   answer a cancelled request, so with a well-behaved server tombstones never clear, and
//!   refusing at the bound would end every long session that cancels often. A client
//!   that then reuses the forgotten id (SDKs count ids up; reuse is the client's own
//!   choice) may get the old call's late answer for the new one. Both calls passed the
//!   stations, and the record holds the bytes that reached the client as that id's answer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::frame::Frame;
use crate::json::{self, Node};
use crate::message::{
    Batch, IdKey, Message, Notification, Request, RequestId, Response, classify, recoverable_ids,
};
use crate::pins::{Change, ListingError, MAX_DEFINITIONS, MAX_TOOLS, PinDigest, PinSet, diff};
use aegis_record::approval::question;
use aegis_record::{DefinitionDigest, ToolChangeAction, ToolChangeKind, ToolChangeLine};

/// JSON-RPC "Invalid Request".
const INVALID_REQUEST: i64 = -32600;
/// Implementation-defined (−32000…−32019): the relay did not forward the request.
const NOT_FORWARDED: i64 = -32001;
/// Implementation-defined: the server exited before answering.
const SERVER_EXITED: i64 = -32002;
/// Implementation-defined: the server answered, but its answer could not be relayed
/// (not JSON, ambiguous, over a bound), so the relay answered instead.
pub const UNRELAYABLE_ANSWER: i64 = -32003;

/// The most messages a batch may hold. Each `tools/call` in a batch is decided, and may
/// leave an intent and an outcome on the record, so one frame must not ask for more than
/// a few hundred. JSON-RPC batches exist only in MCP 2025-03-26, and the SDKs send one
/// message a line; 256 is a quarter of the default pending table.
pub const MAX_BATCH: usize = 256;

/// The most diagnostic lines one frame produces; the rest are counted in one more line,
/// so a frame of many bad parts cannot flood stderr.
pub const MAX_LOG_LINES: usize = 16;

/// What a client's cancellation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cancelled {
    /// A request pending at the server.
    Pending,
    /// A call waiting for the relay's listing, which never reached the server.
    Waiting,
    /// Nothing that is pending.
    Nothing,
}

/// The members of `notifications/cancelled` the relay acts on.
const CANCEL_MEMBERS: [&str; 2] = ["requestId", "reason"];

/// The namespaced `_meta` key carrying a refusal's facts.
pub const REFUSAL_META_KEY: &str = aegis_record::refusal::META_KEY;

/// The default bound on requests waiting for an answer: a client that never lets the
/// server answer cannot grow the table without end.
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// The Aegis side of a relayed `tools/call`: implemented over the runtime by
/// `host_gate::HostGate` (feature `runtime`).
pub trait Gate {
    /// A decided, forwarded call waiting for its end. `Send`, so a multi-threaded relay can
    /// finish it from the thread that reads the server.
    type Pending: Send;

    /// A call parked for approval, which the relay holds (unanswered, unforwarded)
    /// until its park is settled. [`NeverParked`] for a gate that never parks.
    type Parked: Send;

    /// How a park is waited on, by a thread of its own, off the relay's lock.
    type Waiter: Waiter;

    /// Decides a `tools/call` before it is forwarded (policy, capability, intent durable).
    ///
    /// # Errors
    /// A [`Refusal`] when the call must not run; the relay answers the client with it and
    /// never forwards the call. The gate records its own refusals.
    fn open(&self, call: &ToolCall<'_>) -> Result<Opened<Self>, Refusal>;

    /// Runs a parked call the approval `approved` settled: a new call, decided under the
    /// approval, whose request is `call` (what will be forwarded: the parked request, or
    /// the client's `input_required` retry of it). Called at most once per park, with
    /// what its [`Waiter`] returned.
    ///
    /// # Errors
    /// A [`Refusal`] (recorded by the gate) when the approval does not cover the call.
    fn resume(
        &self,
        parked: Self::Parked,
        approved: <Self::Waiter as Waiter>::Approved,
        call: &ToolCall<'_>,
    ) -> Result<Self::Pending, Refusal>;

    /// Gives up a parked call whose request ended before its park was settled (the
    /// client cancelled it, the server exited, the relay stopped): the gate settles the
    /// park as withdrawn, unless a decision came first.
    fn withdraw(&self, parked: Self::Parked, why: &str);

    /// Ends a forwarded call. Called exactly once per pending call.
    fn finish(&self, pending: Self::Pending, end: CallEnd<'_>);

    /// Records a call the relay refused itself, before asking [`Gate::open`]; returns the
    /// audit's call id if one was assigned, to be named in the answer.
    fn refused(&self, call: &RefusedCall<'_>) -> Option<String>;

    /// Records a tool definition that changed against the pins: called once a tool and
    /// session, when the change is first seen, before any call it refuses is recorded.
    fn tool_changed(&self, change: &ToolChangeLine);

    /// The client's user answered the relay's question about a parked call
    /// ([`RelayConfig::approve_via_client`]), asked as `asked` says: `approved` or not,
    /// as the client `client` (its `clientInfo`) reported. The gate places it as the
    /// client's decision where the park's [`Waiter`] will find it; it is never an
    /// approver's signature. The default does nothing (the park waits for another
    /// decider).
    fn client_answered(
        &self,
        parked: &Self::Parked,
        approved: bool,
        client: &str,
        asked: ClientMechanism,
    ) {
        let _ = (parked, approved, client, asked);
    }
}

/// What the gate made of a `tools/call` it did not refuse.
pub enum Opened<G: Gate + ?Sized> {
    /// Forward it to the server, and end it with [`Gate::finish`].
    Forward(G::Pending),
    /// Hold it: a rule parked it for a person's approval. The relay keeps the request
    /// open, hands `waiter` to its caller ([`Relay::take_waiters`]), and answers or
    /// resumes the call when [`Relay::settle`] is told the park's end.
    Park {
        /// The park's id, as recorded.
        approval_id: String,
        /// What [`Gate::resume`] or [`Gate::withdraw`] is given back.
        parked: G::Parked,
        /// What waits for the decision.
        waiter: G::Waiter,
    },
}

/// How a park ended, as its [`Waiter`] says.
#[derive(Debug)]
pub enum Settled<A> {
    /// Approved: resume the call with this.
    Approved(A),
    /// Denied, expired or withdrawn: answer the client with this refusal.
    Refused(Refusal),
}

/// Waits for a park's decision. Runs on a thread of its own, never holding the relay.
pub trait Waiter: Send + 'static {
    /// What an approval hands to [`Gate::resume`].
    type Approved: Send;

    /// Blocks until the park is settled. While it waits it calls `keep_alive` about
    /// every `every`, so the relay can tell a client that asked for progress that the
    /// call is still alive.
    fn wait(self, every: Duration, keep_alive: &mut dyn FnMut()) -> Settled<Self::Approved>;
}

/// The parked call and waiter of a gate that never parks: no value exists.
#[derive(Debug)]
pub enum NeverParked {}

impl Waiter for NeverParked {
    type Approved = NeverParked;

    fn wait(self, _: Duration, _: &mut dyn FnMut()) -> Settled<NeverParked> {
        match self {}
    }
}

/// A `tools/call` to decide.
#[derive(Clone, Copy, Debug)]
pub struct ToolCall<'a> {
    /// The exact bytes of the message, from its `{` to its `}` (without the line's
    /// surrounding whitespace and `\n`; for a batch element, the element's bytes).
    pub frame: &'a [u8],
    /// The JSON-RPC id's exact text.
    pub id: &'a str,
    /// The tool's name.
    pub name: &'a str,
    /// The exact text of `params.arguments`, when present.
    pub arguments: Option<&'a str>,
    /// The tool's `inputSchema` as pinned (canonical JSON), when the pins hold its
    /// definition: what the host finds the tool's path-like arguments from.
    pub input_schema: Option<&'a str>,
    /// True when the call arrived in a JSON-RPC batch. A batch is answered as one
    /// array, so a call in it cannot wait for approval: the gate should refuse rather
    /// than park it (a park it returns anyway is withdrawn and refused).
    pub in_batch: bool,
}

/// A `tools/call` the relay refused itself.
#[derive(Clone, Copy, Debug)]
pub struct RefusedCall<'a> {
    /// The exact bytes of the message.
    pub frame: &'a [u8],
    /// The JSON-RPC id's exact text.
    pub id: &'a str,
    /// The tool's name, when it could be read.
    pub name: Option<&'a str>,
    /// Why.
    pub refusal: &'a Refusal,
}

pub use aegis_record::approval::ClientMechanism;
pub use aegis_record::refusal::{Cause, Refusal, Station};

/// How a forwarded call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEnd<'a> {
    /// The server answered with a `result`; `tool_error` when its `isError` is true.
    Response {
        /// The response's exact bytes (for a batch, the whole batch frame).
        frame: &'a [u8],
        /// The tool reported an error (`isError: true`).
        tool_error: bool,
    },
    /// The server answered with a JSON-RPC `error`.
    Error {
        /// The response's exact bytes (for a batch, the whole batch frame).
        frame: &'a [u8],
    },
    /// The server answered, but the relay could not pass the answer on (not JSON,
    /// ambiguous, over a bound), so it answered the client with a JSON-RPC error
    /// ([`UNRELAYABLE_ANSWER`]) instead.
    Unrelayable {
        /// The relay's error frame, as the client got it.
        frame: &'a [u8],
        /// Why the server's answer was dropped.
        reason: &'a str,
    },
    /// The client cancelled the call (`notifications/cancelled`).
    Cancelled {
        /// The reason the client gave.
        reason: Option<&'a str>,
    },
    /// Allowed, but never forwarded: another call in its batch was refused.
    NotSent,
    /// The server exited before answering; `how` says how ("exited with status 1",
    /// "was killed by signal 9").
    ServerExited {
        /// How it ended, for the record.
        how: &'a str,
    },
    /// The relay shut down before the server answered.
    Shutdown,
}

/// What the caller must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes to the server's stdin.
    ToServer(Vec<u8>),
    /// Write these bytes to the client (our stdout).
    ToClient(Vec<u8>),
    /// A one-line diagnostic for stderr.
    Log(String),
    /// A one-line warning the operator must see whatever the verbosity: a tool the
    /// server changed, withheld from the client.
    Warn(String),
}

/// What to do when a listing differs from the pins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PinMode {
    /// Refuse calls to a changed, added, removed or duplicated tool (the default).
    #[default]
    Enforce,
    /// Only log changes; calls to changed tools run. Calls to tools never listed are
    /// still refused.
    RecordOnly,
}

/// How often a client waiting on a parked call that asked for progress is told the
/// call is alive: well inside the TypeScript SDK's default 60-second request timeout,
/// which progress resets when the client opts in.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The relay's settings. By default: pins enforced, unreadable client lines dropped,
/// at most [`DEFAULT_MAX_PENDING`] requests pending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayConfig {
    /// What a changed listing does (default [`PinMode::Enforce`]).
    pub pin_mode: PinMode,
    /// Forward client lines that are not JSON at all, instead of dropping them. Off by
    /// default: a server whose parser accepts what ours does not would run a call the
    /// relay never saw.
    pub forward_unparsed_client_lines: bool,
    /// The most requests (of any method) that may wait at once, in each direction;
    /// parked calls count.
    pub max_pending: usize,
    /// How often a parked call that gave a progress token gets a progress notification
    /// ([`DEFAULT_KEEP_ALIVE`]).
    pub keep_alive: Duration,
    /// Ask the client's user to approve each parked call through MCP elicitation (form
    /// mode), when the client declared it can be asked; its answer goes to
    /// [`Gate::client_answered`]. Off by default: parks wait for the approvals queue.
    pub approve_via_client: bool,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            pin_mode: PinMode::Enforce,
            forward_unparsed_client_lines: false,
            max_pending: DEFAULT_MAX_PENDING,
            keep_alive: DEFAULT_KEEP_ALIVE,
            approve_via_client: false,
        }
    }
}

/// A client's `tools/call` held while its park waits for a decision.
struct HeldForApproval<K> {
    raw_id: String,
    approval_id: String,
    /// The request exactly as the client sent it, forwarded as such if it resumes (for
    /// an `input_required` retry, without the members answering the relay).
    frame: Vec<u8>,
    /// Its tool, and the exact text of its arguments.
    tool: String,
    arguments: Option<String>,
    /// Whether its answer names its `resultType` ([`names_result_type`]).
    names_result_type: bool,
    parked: K,
    /// `params._meta.progressToken`'s text, and how many notifications were sent.
    progress: Option<(String, u64)>,
}

/// A park answered `input_required` (MCP 2026-07-28): its request was answered with the
/// question, and nobody waits on it until the client's retry brings the answer.
struct AwaitingRetry<K, W> {
    /// The parked request's tool, and the exact text of its arguments: the retry must
    /// repeat both.
    tool: String,
    arguments: Option<String>,
    parked: K,
    waiter: W,
}

/// A client request waiting for the server.
struct Outstanding<P> {
    raw_id: String,
    kind: Kind<P>,
}

enum Kind<P> {
    Call(P),
    /// The client's `tools/list`: whether it asks for the first page, and the
    /// generation of the tool list it was asked in (see `PinState::generation`).
    ToolsList {
        first_page: bool,
        generation: u64,
    },
    Other,
}

/// The most pages the relay follows in a listing of its own. Real servers list tens of
/// tools on one page; a listing that does not end within this many pages fails closed.
pub const MAX_LISTING_PAGES: usize = 64;

/// The most bytes of answers the relay reads in a listing of its own (all pages); past
/// it the listing fails closed. 32 MiB is eight default-sized frames, hundreds of times
/// a real server's tool list.
pub const MAX_LISTING_BYTES: usize = 32 << 20;

/// How the relay's own `tools/list` requests are named: this prefix and a count. A client
/// request reusing the id of one still waiting is refused.
pub const OWN_REQUEST_ID_PREFIX: &str = "aegis-relay/tools-list/";

/// The most bytes of tool names and arguments the parks awaiting an `input_required`
/// retry keep, all together: past it, a park is held as any (its frame counted among the
/// pending requests), so a client that never retries cannot make the relay keep more.
pub const MAX_AWAITING_RETRY_BYTES: usize = 32 << 20;

/// How the relay's own `elicitation/create` requests to the client are named: this
/// prefix and a count.
pub const ELICIT_REQUEST_ID_PREFIX: &str = "aegis-relay/elicit/";

/// The most bytes of a call's tool name and arguments the client's user is shown when
/// asked ([`aegis_record::approval::question`], the gateway's too).
pub const MAX_ELICIT_ARGUMENTS: usize = question::MAX_SHOWN;

/// The most bytes of the client's `clientInfo` name and version kept for the record.
pub const MAX_CLIENT_NAME: usize = question::MAX_CLIENT_NAME;

/// Where a request of MCP 2026-07-28 or later declares its client, in `params._meta`.
const META_PROTOCOL: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// What the client's `initialize` (or, from MCP 2026-07-28 on, a request's `_meta`)
/// said about it.
#[derive(Clone, Debug, Default)]
struct ClientInfo {
    /// It declared `capabilities.elicitation` with form mode (an empty object, or one
    /// naming `form`).
    elicit_form: bool,
    /// `clientInfo` name and version, escaped and bounded.
    name: Option<String>,
    /// The protocol version it asked for.
    protocol: Option<String>,
}

impl ClientInfo {
    /// Reads an `initialize` request's params; anything not read one way only counts
    /// as absent (no elicitation).
    fn of(request: &Request<'_>) -> ClientInfo {
        if request.duplicate_keys {
            return ClientInfo::default();
        }
        let Some(params) = request.params.and_then(|p| p.object()) else {
            return ClientInfo::default();
        };
        let [capabilities, client_info, protocol] =
            params.lookup_each(["capabilities", "clientInfo", "protocolVersion"]);
        ClientInfo::read(capabilities, client_info, protocol)
    }

    /// What a request of MCP [`question::INPUT_REQUIRED_FROM`] or later says of its
    /// client in `params._meta` (such a session has no `initialize`); `None` for a
    /// request that declares an earlier revision, or none read one way only.
    fn of_meta(request: &Request<'_>) -> Option<ClientInfo> {
        use crate::json::Lookup;
        if request.duplicate_keys {
            return None;
        }
        let Lookup::One(meta) = request.params?.object()?.lookup("_meta") else {
            return None;
        };
        let [capabilities, client_info, protocol] =
            meta.object()?
                .lookup_each([META_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL]);
        let info = ClientInfo::read(capabilities, client_info, protocol);
        let modern = info
            .protocol
            .as_deref()
            .is_some_and(|p| p >= question::INPUT_REQUIRED_FROM);
        modern.then_some(info)
    }

    /// Reads a client's capabilities, `clientInfo` and protocol revision, wherever they
    /// were declared.
    fn read(
        capabilities: crate::json::Lookup<'_>,
        client_info: crate::json::Lookup<'_>,
        protocol: crate::json::Lookup<'_>,
    ) -> ClientInfo {
        use crate::json::{Lookup, Value};
        let mut info = ClientInfo::default();
        if let Lookup::One(capabilities) = capabilities
            && let Some(capabilities) = capabilities.object()
            && let Lookup::One(elicitation) = capabilities.lookup("elicitation")
            && let Some(elicitation) = elicitation.object()
        {
            // 2025-11-25: `{}` means form mode; `{"url": {}}` alone means URL mode only.
            let [form, url] = elicitation.lookup_each(["form", "url"]);
            info.elicit_form = match (form, url) {
                (Lookup::One(form), _) => form.object().is_some(),
                (Lookup::Absent, Lookup::Absent) => true,
                _ => false,
            };
        }
        if let Lookup::One(client_info) = client_info
            && let Some(client_info) = client_info.object()
        {
            let [name, version] = client_info.lookup_each(["name", "version"]);
            let text = |l: Lookup<'_>| match l {
                Lookup::One(node) => node.exact_str().map(|s| s.into_owned()),
                _ => None,
            };
            if let Some(name) = text(name) {
                info.name = Some(question::client_name(&name, text(version).as_deref()));
            }
        }
        if let Lookup::One(protocol) = protocol
            && let Value::String(s) = protocol.value()
            && s.exact
            && s.text.len() <= 32
        {
            info.protocol = Some(s.text.into_owned());
        }
        info
    }
}

/// What the relay knows about the server's tools.
#[derive(Default)]
struct PinState {
    /// Set by the first complete listing (the client's or the relay's own), or loaded
    /// from a pins file. Calls are refused until it is set.
    pinned: Option<PinSet>,
    /// The client's listing being received (pages so far), and the generation its
    /// first page was asked in.
    client: PinSet,
    client_generation: u64,
    /// The client's listing began with a first page, in `client_generation`, and has
    /// not ended: only such a listing may complete (one begun at a cursor is partial).
    client_open: bool,
    /// The client's pages read while nothing was pinned: the model was shown them, so
    /// they are compared with the pins as soon as there are any.
    preview: Vec<PinSet>,
    /// More changes or ambiguous tools than [`MAX_TOOLS`] were seen: every call is
    /// refused for the rest of the session (the maps are bounded, the refusal is not).
    too_many: bool,
    /// The relay's own listing, which follows every page whatever the client does.
    own: OwnListing,
    /// Differences found against `pinned`, by tool. Never cleared: a tool seen changed
    /// stays refused for the session, even if a later listing shows it as pinned again
    /// (and it is held in the pins file written at the end).
    changes: BTreeMap<String, Change>,
    /// Tools whose definition could not be read one way only, by name, with the key at
    /// fault. Never cleared; refused in both pin modes.
    ambiguous: BTreeMap<String, String>,
    /// Changes seen (at most one a tool, as `changes`) and not yet handed to the gate
    /// to be recorded: written before any call they refuse is recorded.
    /// Kept small (a name and a digest; the line is built when handed over): a listing
    /// of thousands of added tools notes each one within one frame.
    unrecorded: Vec<Unrecorded>,
    /// With `--pins-record-only`: each (tool, listed digest) already on the record, so
    /// every definition the client is shown is recorded once (at most [`MAX_TOOLS`]).
    listed_seen: BTreeSet<(String, PinDigest)>,
    /// Why the last listing could not be read, until a complete listing is read.
    unreadable: Option<String>,
    /// Whether a change refuses the tool (and withholds it from the client's listings)
    /// or is only recorded.
    mode: PinMode,
    /// Counts `notifications/tools/list_changed`: only a listing asked for after the
    /// last one clears `stale`.
    generation: u64,
    /// The server announced a change it has not listed since.
    stale: bool,
}

/// A change noted and not yet recorded (see [`PinState::line_of`]).
enum Unrecorded {
    /// A change in [`PinState::changes`], and the listed definition's digest.
    Change(String, Option<PinDigest>),
    /// A tool in [`PinState::ambiguous`].
    Ambiguous(String),
    /// A further change to a tool already changed, shown to the client.
    Again(Change, Option<PinDigest>),
}

/// A change's kind and fields, as the record writes them.
fn kind_of(change: Option<&Change>) -> (ToolChangeKind, Vec<String>) {
    match change {
        Some(Change::Added(_)) => (ToolChangeKind::Added, Vec::new()),
        Some(Change::Removed(_)) => (ToolChangeKind::Removed, Vec::new()),
        Some(Change::Changed { fields, .. }) => (ToolChangeKind::Changed, fields.clone()),
        Some(Change::Duplicate(_)) | None => (ToolChangeKind::Duplicate, Vec::new()),
    }
}

/// The relay's own `tools/list`: one request at a time, each page asked for when the
/// last one names a next.
#[derive(Default)]
struct OwnListing {
    /// The request waiting for the server's answer.
    waiting: Option<IdKey>,
    /// The generation the listing began in.
    generation: u64,
    listing: PinSet,
    pages: usize,
    bytes: usize,
    /// The server announced a change while this listing was under way: list again
    /// when it ends.
    again: bool,
    /// Requests sent so far (for the next id).
    sent: u64,
}

impl PinState {
    /// Why a call to `name` must not run; `Ok(Some(note))` when it may run despite a change.
    fn check(&self, name: &str, mode: PinMode) -> Result<Option<String>, String> {
        if self.too_many {
            return Err(format!(
                "the server changed or misdefined more than {MAX_TOOLS} tools in this session"
            ));
        }
        if let Some(key) = self.ambiguous.get(name) {
            return Err(format!(
                "tool {name:?} is defined with a member {key:?}, which clients may read as a pinned field; its definition cannot be pinned"
            ));
        }
        let Some(pinned) = &self.pinned else {
            return Err(match &self.unreadable {
                Some(reason) => format!("the server's tool list could not be read: {reason}"),
                None => {
                    "the server's tools are not pinned yet: no complete tools/list has been read"
                        .into()
                }
            });
        };
        let listed = pinned.get(name).is_some() || self.changes.contains_key(name);
        if !listed {
            return Err(format!("tool {name:?} was never listed by the server"));
        }
        let problem = if let Some(reason) = &self.unreadable {
            Some(format!(
                "the server's tool list could not be read: {reason}"
            ))
        } else if let Some(change) = self.changes.get(name) {
            Some(change.to_string())
        } else if pinned.is_duplicate(name) {
            Some(Change::Duplicate(name.to_owned()).to_string())
        } else if let Some(why) = pinned.held(name) {
            Some(format!(
                "held by the pins file since an earlier session ({why}); the operator reviews it with aegis pins diff and takes it with aegis pins accept"
            ))
        } else if self.stale {
            Some(
                "the server announced that its tools changed and they were not listed again".into(),
            )
        } else {
            None
        };
        match (problem, mode) {
            (None, _) => Ok(None),
            (Some(p), PinMode::Enforce) => Err(p),
            (Some(p), PinMode::RecordOnly) => Ok(Some(p)),
        }
    }

    /// Why the client must not be shown `name` in a listing: the same changes that refuse
    /// its calls (changed, added, listed twice, held by the pins file, a pinned field
    /// spelt another way), so a rewritten description never reaches the model. Nothing
    /// is withheld with `--pins-record-only`, and nothing before there are pins.
    fn withheld(&self, name: &str) -> bool {
        if self.mode == PinMode::RecordOnly {
            return false;
        }
        self.ambiguous.contains_key(name)
            || self.changes.contains_key(name)
            || self
                .pinned
                .as_ref()
                .is_some_and(|p| p.is_duplicate(name) || p.held(name).is_some())
    }

    /// A page of the client's listing (`None`: the server answered with an error, which
    /// is passed on). False when the page could not be read: it must not reach the
    /// client, who would be shown what the relay never compared.
    fn client_page(
        &mut self,
        first_page: bool,
        generation: u64,
        result: Option<Node<'_>>,
        logs: &mut Logs,
    ) -> bool {
        if first_page {
            self.client = PinSet::new();
            self.client_generation = generation;
            self.client_open = true;
        }
        let Some(result) = result else { return true };
        // A page asked for before the tools last changed, or of a listing that did not
        // begin at its first page, is compared but never completes a listing.
        let continues = self.client_open && generation == self.client_generation;
        let mut listing = if continues {
            std::mem::take(&mut self.client)
        } else {
            PinSet::new()
        };
        match self.read_page(&mut listing, result, true, logs) {
            None => {
                self.client_open = false;
                false
            }
            Some(Some(_)) => {
                if continues {
                    self.client = listing;
                }
                true
            }
            Some(None) => {
                if continues {
                    self.client_open = false;
                    self.complete(listing, generation, logs);
                }
                true
            }
        }
    }

    /// Reads one page into `listing` and compares it with the pins: `Some(cursor)` of
    /// the next page, `Some(None)` when the listing is complete, `None` when the page
    /// could not be read (then calls are refused until a readable listing).
    fn read_page(
        &mut self,
        listing: &mut PinSet,
        result: Node<'_>,
        from_client: bool,
        logs: &mut Logs,
    ) -> Option<Option<String>> {
        let mut page = PinSet::new();
        // Definitions are kept while they may pin the session or teach version 1 pins
        // theirs; a listing compared with pins that hold theirs needs digests alone.
        let definitions = self.pinned.as_ref().is_none_or(|p| !p.has_definitions());
        let cursor = match page.add_result_keeping(result, definitions) {
            Ok(cursor) => cursor,
            Err(e) => {
                self.fail(e.to_string(), logs);
                return None;
            }
        };
        if listing.tools().count() + page.tools().count() > MAX_TOOLS {
            self.fail(
                format!("the listing's pages hold more than {MAX_TOOLS} tools"),
                logs,
            );
            return None;
        }
        if listing.definition_bytes() + page.definition_bytes() > MAX_DEFINITIONS {
            self.fail(ListingError::TooLarge.to_string(), logs);
            return None;
        }
        // Judged before it joins the listing, so the page is never copied: a page of
        // thousands of tools is held once.
        let mut found: Vec<(Change, Option<PinDigest>)> = match &self.pinned {
            Some(pinned) => pinned
                .changed_in(&page)
                .into_iter()
                .map(|change| {
                    let listed = page.get(change.tool()).map(|p| p.digest);
                    (change, listed)
                })
                .collect(),
            None => Vec::new(),
        };
        for (name, pin) in page.tools() {
            if listing.get(name).is_some() {
                found.push((Change::Duplicate(name.to_owned()), Some(pin.digest)));
            }
        }
        for (name, key) in page.ambiguous() {
            if self.ambiguous.len() >= MAX_TOOLS {
                self.too_many = true;
            } else if !self.ambiguous.contains_key(name) {
                logs.warn(format!(
                    "tools/list: tool {name:?} names a pinned field as {key:?}; it is not shown to the client and its calls are refused"
                ));
                self.ambiguous.insert(name.to_owned(), key.to_owned());
                self.unrecorded.push(Unrecorded::Ambiguous(name.to_owned()));
            }
        }
        if from_client && self.pinned.is_none() {
            let seen: usize = self.preview.iter().map(|p| p.tools().count()).sum();
            if seen + page.tools().count() > MAX_TOOLS {
                self.fail(
                    format!(
                        "the client was shown more than {MAX_TOOLS} tools before any were pinned"
                    ),
                    logs,
                );
                return None;
            }
            // Only compared later: the digests do, and keep the preview's memory at
            // digests however large the definitions.
            self.preview.push(page.digests_only());
        }
        listing.absorb(page);
        for (change, listed) in found {
            self.note(change, listed, logs);
        }
        Some(cursor)
    }

    /// A listing read to its end: the first pins the session, any later one is compared.
    fn complete(&mut self, listing: PinSet, generation: u64, logs: &mut Logs) {
        // Only a listing asked for after the last change or failure ends either.
        if generation == self.generation {
            self.stale = false;
            self.unreadable = None;
        }
        match &self.pinned {
            None => {
                logs.push(format!(
                    "tools/list: pinned {} tools",
                    listing.tools().count()
                ));
                let duplicates: Vec<String> = listing.duplicates().map(str::to_owned).collect();
                let mut pinned = listing;
                // Changes seen before there were pins are held in the file too.
                for (name, change) in &self.changes {
                    pinned.hold(name, &change.summary());
                }
                // What the client was shown before the pins existed is judged now.
                let shown: Vec<(Change, Option<PinDigest>)> = std::mem::take(&mut self.preview)
                    .iter()
                    .flat_map(|page| {
                        pinned.changed_in(page).into_iter().map(|change| {
                            let listed = page.get(change.tool()).map(|p| p.digest);
                            (change, listed)
                        })
                    })
                    .collect();
                self.pinned = Some(pinned);
                for name in duplicates {
                    let listed = self
                        .pinned
                        .as_ref()
                        .and_then(|p| p.get(&name))
                        .map(|p| p.digest);
                    self.note(Change::Duplicate(name), listed, logs);
                }
                for (change, listed) in shown {
                    self.note(change, listed, logs);
                }
            }
            Some(pinned) => {
                // Removals can only be seen now. What the pages found stays: a tool
                // changed back is not clean again.
                let changes = diff(pinned, &listing);
                // Pins from a version 1 file learn the definitions their digests were
                // taken over, so the pins file written at the end can hold them.
                if let Some(pinned) = &mut self.pinned {
                    pinned.fill_definitions(&listing);
                }
                for change in changes {
                    let listed = listing.get(change.tool()).map(|p| p.digest);
                    self.note(change, listed, logs);
                }
            }
        }
    }

    fn fail(&mut self, why: String, logs: &mut Logs) {
        logs.push(format!(
            "tools/list: {why}; calls are refused until a readable listing"
        ));
        self.unreadable = Some(why);
        // A listing under way began before the failure: it does not end it.
        self.generation += 1;
    }

    /// The record line of a change noted.
    fn line_of(&self, entry: Unrecorded) -> ToolChangeLine {
        let action = match self.mode {
            PinMode::Enforce => ToolChangeAction::Withheld,
            PinMode::RecordOnly => ToolChangeAction::Shown,
        };
        match entry {
            Unrecorded::Ambiguous(name) => ToolChangeLine {
                fields: self.ambiguous.get(&name).cloned().into_iter().collect(),
                pinned_digest: self.pinned_digest(&name),
                tool_id: name,
                change: ToolChangeKind::Ambiguous,
                listed_digest: None,
                // Refused in both modes, but shown with --pins-record-only.
                action,
            },
            Unrecorded::Change(name, listed) => {
                let (change, fields) = kind_of(self.changes.get(&name));
                ToolChangeLine {
                    pinned_digest: self.pinned_digest(&name),
                    listed_digest: listed.and_then(definition_digest),
                    tool_id: name,
                    change,
                    fields,
                    action,
                }
            }
            Unrecorded::Again(change, listed) => {
                let (kind, fields) = kind_of(Some(&change));
                ToolChangeLine {
                    pinned_digest: self.pinned_digest(change.tool()),
                    listed_digest: listed.and_then(definition_digest),
                    tool_id: change.tool().to_owned(),
                    change: kind,
                    fields,
                    action,
                }
            }
        }
    }

    /// The digest `name` is pinned with, for the record.
    fn pinned_digest(&self, name: &str) -> Option<DefinitionDigest> {
        let pin = self.pinned.as_ref()?.get(name)?;
        definition_digest(pin.digest)
    }

    /// A change seen in a listing whose definition of the tool (if it holds one) has
    /// digest `listed`: warned about and recorded once a tool and session.
    fn note(&mut self, change: Change, listed: Option<PinDigest>, logs: &mut Logs) {
        // Shown to the client (--pins-record-only), each definition it is shown is on the
        // record once: a second change to a tool is a new line (found by a review). Enforced,
        // the tool is withheld whatever it becomes, so its first change says all.
        let shown = self.mode == PinMode::RecordOnly;
        let new_definition = |seen: &mut BTreeSet<(String, PinDigest)>| {
            listed.is_some_and(|d| seen.insert((change.tool().to_owned(), d)))
        };
        if self.changes.contains_key(change.tool()) {
            if shown && self.listed_seen.len() < MAX_TOOLS && new_definition(&mut self.listed_seen)
            {
                logs.warn(format!(
                    "tools/list: {change} (again: another definition); shown and callable (--pins-record-only)"
                ));
                self.unrecorded.push(Unrecorded::Again(change, listed));
            } else if shown && self.listed_seen.len() >= MAX_TOOLS {
                self.too_many = true;
            }
            return;
        }
        if self.changes.len() >= MAX_TOOLS {
            self.too_many = true;
            return;
        }
        if shown {
            new_definition(&mut self.listed_seen);
        }
        self.unrecorded
            .push(Unrecorded::Change(change.tool().to_owned(), listed));
        logs.warn(match self.mode {
            PinMode::Enforce => format!(
                "tools/list: {change}; the client is not shown it and its calls are refused for the rest of the session (aegis pins accept to take the change)"
            ),
            PinMode::RecordOnly => {
                format!("tools/list: {change}; shown and callable (--pins-record-only)")
            }
        });
        if let Some(pinned) = &mut self.pinned {
            pinned.hold(change.tool(), &change.summary());
        }
        self.changes.insert(change.tool().to_owned(), change);
    }
}

/// The relay state machine. See the module documentation.
pub struct Relay<G: Gate> {
    gate: G,
    config: RelayConfig,
    /// Client requests waiting for the server, by id.
    client_requests: BTreeMap<IdKey, Outstanding<G::Pending>>,
    /// Client requests cancelled while pending, which the server may still answer: by id,
    /// their order of cancellation and raw id. Their ids are not reused until then.
    tombstones: BTreeMap<IdKey, (u64, String)>,
    /// The same tombstones by order of cancellation, oldest first.
    tombstone_order: BTreeMap<u64, IdKey>,
    next_tombstone: u64,
    /// Server requests (sampling, elicitation, roots) waiting for the client, by id.
    server_requests: BTreeSet<IdKey>,
    pins: PinState,
    /// Requests of the relay's own for the server, sent after the frame being handled.
    own_requests: Vec<Vec<u8>>,
    /// Calls that arrived while the relay's own listing was under way and the session
    /// had no usable pins: by id, the frame as received. Decided when the listing ends.
    held: Vec<(IdKey, Vec<u8>)>,
    /// The bytes of the frames in `held`, at most [`MAX_LISTING_BYTES`].
    held_bytes: usize,
    /// What deciding held calls led to, carried out after the frame being handled.
    released: Vec<Action>,
    /// Calls parked for approval, by id, until their park is settled.
    parked: BTreeMap<IdKey, HeldForApproval<G::Parked>>,
    /// Parks answered `input_required`, by approval id (the `requestState` their retry
    /// echoes); at most [`RelayConfig::max_pending`].
    awaiting_retry: BTreeMap<String, AwaitingRetry<G::Parked, G::Waiter>>,
    /// The bytes of tool names and arguments in `awaiting_retry`, at most
    /// [`MAX_AWAITING_RETRY_BYTES`].
    awaiting_bytes: usize,
    /// Waiters of parks opened since the caller last took them.
    waiters: Vec<(String, G::Waiter)>,
    /// What the client's `initialize` said.
    client: ClientInfo,
    /// The relay's `elicitation/create` requests the client has not answered: by id,
    /// the approval id each asks about.
    elicits: BTreeMap<IdKey, String>,
    next_elicit: u64,
}

/// The diagnostics of one frame: at most [`MAX_LOG_LINES`], the rest counted.
#[derive(Default)]
struct Logs {
    lines: Vec<Action>,
    more: usize,
}

impl Logs {
    fn push(&mut self, line: String) {
        self.add(Action::Log(line));
    }

    /// A warning: a change the operator must see even with `-q`.
    fn warn(&mut self, line: String) {
        self.add(Action::Warn(line));
    }

    fn add(&mut self, action: Action) {
        if self.lines.len() < MAX_LOG_LINES {
            self.lines.push(action);
        } else {
            self.more += 1;
        }
    }

    fn into_actions(self) -> Vec<Action> {
        let mut actions = self.lines;
        if self.more > 0 {
            actions.push(Action::Log(format!(
                "… and {} more diagnostics for this frame",
                self.more
            )));
        }
        actions
    }
}

/// What one message becomes.
enum Plan {
    /// Pass the frame on, as received.
    Forward,
    /// Answer the side it came from with these bytes.
    Reply(Vec<u8>),
    /// Send these bytes on instead of the frame (answers the relay built).
    Substitute(Vec<u8>),
    Drop,
    /// A client's `tools/call` that waits for the relay's listing to end.
    Hold(IdKey),
}

/// One batch element, decided.
enum Element<P> {
    Call(RequestId, P),
    Refused(RequestId, Refusal),
    Plain(RequestId, Kind<P>),
    Failed(RequestId, String),
    Cancel(Option<IdKey>, Option<String>),
    Notify,
    Initialized,
    Answer(IdKey),
    Unusable(String),
}

impl<G: Gate> Relay<G> {
    /// A relay with no pins: the first complete listing of the session pins the tools.
    pub fn new(gate: G, config: RelayConfig) -> Self {
        let mode = config.pin_mode;
        Relay {
            gate,
            config,
            client_requests: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            tombstone_order: BTreeMap::new(),
            next_tombstone: 0,
            server_requests: BTreeSet::new(),
            pins: PinState {
                mode,
                ..PinState::default()
            },
            own_requests: Vec::new(),
            held: Vec::new(),
            held_bytes: 0,
            released: Vec::new(),
            parked: BTreeMap::new(),
            awaiting_retry: BTreeMap::new(),
            awaiting_bytes: 0,
            waiters: Vec::new(),
            client: ClientInfo::default(),
            elicits: BTreeMap::new(),
            next_elicit: 0,
        }
    }

    /// A relay whose pins come from an earlier session (a pins file): the first listing is
    /// compared with them instead of pinning itself.
    pub fn with_pins(gate: G, config: RelayConfig, pins: PinSet) -> Self {
        let mut relay = Relay::new(gate, config);
        relay.pins.pinned = Some(pins);
        relay
    }

    /// The pinned tools, once a listing completed (or loaded), to write a pins file.
    pub fn pins(&self) -> Option<&PinSet> {
        self.pins.pinned.as_ref()
    }

    /// The gate.
    pub fn gate(&self) -> &G {
        &self.gate
    }

    /// How many client requests wait for the server.
    pub fn pending(&self) -> usize {
        self.client_requests.len()
    }

    /// How often a parked call's client that asked for progress is told it is alive.
    pub fn keep_alive_every(&self) -> Duration {
        self.config.keep_alive
    }

    /// How many calls wait for an approval (held, not those answered `input_required`).
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// How many parks answered `input_required` await their client's retry.
    pub fn awaiting_retry(&self) -> usize {
        self.awaiting_retry.len()
    }

    /// The waiters of the parks opened since the last call, each with its approval id:
    /// the caller runs each [`Waiter::wait`] on a thread of its own and hands the result
    /// to [`Relay::settle`].
    pub fn take_waiters(&mut self) -> Vec<(String, G::Waiter)> {
        std::mem::take(&mut self.waiters)
    }

    /// A park's end: an approved call is resumed through [`Gate::resume`] and forwarded
    /// as the client sent it; a refused one is answered with the refusal. A park whose
    /// request already ended (cancelled, server gone) leaves nothing to do.
    pub fn settle(
        &mut self,
        approval_id: &str,
        settled: Settled<<G::Waiter as Waiter>::Approved>,
    ) -> Vec<Action> {
        let Some(key) = self
            .parked
            .iter()
            .find(|(_, held)| held.approval_id == approval_id)
            .map(|(key, _)| key.clone())
        else {
            return vec![Action::Log(format!(
                "approval {approval_id} settled after its request ended"
            ))];
        };
        let Some(held) = self.parked.remove(&key) else {
            return Vec::new();
        };
        // A question still open on the client is moot now: the client is told so.
        let mut actions: Vec<Action> = self
            .call_off_question(approval_id)
            .map(Action::ToClient)
            .into_iter()
            .collect();
        let call = ToolCall {
            frame: &held.frame,
            id: &held.raw_id,
            name: &held.tool,
            arguments: held.arguments.as_deref(),
            input_schema: None,
            in_batch: false,
        };
        let refusal = match settled {
            Settled::Approved(approved) => match self.gate.resume(held.parked, approved, &call) {
                Ok(pending) => {
                    self.client_requests.insert(
                        key,
                        Outstanding {
                            raw_id: held.raw_id.clone(),
                            kind: Kind::Call(pending),
                        },
                    );
                    let mut frame = held.frame;
                    frame.push(b'\n');
                    actions.push(Action::Log(format!(
                        "client: tools/call {} approved ({approval_id}); forwarded",
                        held.raw_id
                    )));
                    actions.push(Action::ToServer(frame));
                    return actions;
                }
                Err(refusal) => refusal,
            },
            Settled::Refused(refusal) => refusal,
        };
        let mut reply = refusal_reply(&held.raw_id, &refusal, held.names_result_type);
        reply.push(b'\n');
        actions.push(Action::Log(format!(
            "client: tools/call {} not run ({approval_id}): {}",
            held.raw_id,
            aegis_record::text::escape(&refusal.reason)
        )));
        actions.push(Action::ToClient(reply));
        actions
    }

    /// A progress notification for the parked call of `approval_id`, when its client
    /// gave a progress token: the call is alive, waiting for a person.
    pub fn keep_alive(&mut self, approval_id: &str) -> Vec<Action> {
        let Some(held) = self
            .parked
            .values_mut()
            .find(|held| held.approval_id == approval_id)
        else {
            return Vec::new();
        };
        let Some((token, sent)) = held.progress.as_mut() else {
            return Vec::new();
        };
        *sent += 1;
        let mut out = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":{sent},"message":"#
        );
        json::write_string(
            &format!("waiting for approval {approval_id} (aegis approvals show {approval_id})"),
            &mut out,
        );
        out.push_str("}}\n");
        vec![Action::ToClient(out.into_bytes())]
    }

    /// How many cancelled client requests the server may still answer (their ids are
    /// not reused until it does, or until they are forgotten).
    pub fn cancelled_unanswered(&self) -> usize {
        self.tombstones.len()
    }

    /// Handles one frame read from the client.
    pub fn from_client(&mut self, frame: Frame) -> Vec<Action> {
        let bytes = match frame {
            Frame::Line(bytes) => bytes,
            Frame::TooLong { seen } => {
                return vec![Action::Log(format!(
                    "client: dropped a {seen}-byte line over the frame bound"
                ))];
            }
        };
        let mut logs = Logs::default();
        let plan = {
            let message = classify(&bytes);
            self.client_message(message, &mut logs)
        };
        let mut actions = self.carry_out(plan, bytes, logs);
        self.record_changes();
        actions.append(&mut self.released);
        actions.extend(self.own_requests.drain(..).map(Action::ToServer));
        actions
    }

    /// Handles one frame read from the server.
    pub fn from_server(&mut self, frame: Frame) -> Vec<Action> {
        let bytes = match frame {
            Frame::Line(bytes) => bytes,
            Frame::TooLong { seen } => {
                return vec![Action::Log(format!(
                    "server: dropped a {seen}-byte line over the frame bound"
                ))];
            }
        };
        let mut logs = Logs::default();
        let plan = {
            let message = classify(&bytes);
            self.server_message(&bytes, message, &mut logs)
        };
        let mut actions = finish_plan(plan, bytes, logs, Action::ToClient, Action::ToServer);
        self.record_changes();
        actions.append(&mut self.released);
        actions.extend(self.own_requests.drain(..).map(Action::ToServer));
        actions
    }

    /// The server exited (`how`, see [`CallEnd::ServerExited`]): every pending call ends
    /// as [`CallEnd::ServerExited`], and every request still waiting is answered with a
    /// JSON-RPC error.
    pub fn server_exited(&mut self, how: &str) -> Vec<Action> {
        let mut actions = Vec::new();
        for (_, outstanding) in std::mem::take(&mut self.client_requests) {
            if let Kind::Call(pending) = outstanding.kind {
                self.gate.finish(pending, CallEnd::ServerExited { how });
            }
            let mut reply = error_reply(
                &outstanding.raw_id,
                SERVER_EXITED,
                "the MCP server exited before answering",
            );
            reply.push(b'\n');
            actions.push(Action::ToClient(reply));
        }
        self.give_up_retries("the MCP server exited before the client retried the call");
        for (_, held) in std::mem::take(&mut self.parked) {
            self.gate.withdraw(
                held.parked,
                "the MCP server exited while the call waited for approval",
            );
            let mut reply = error_reply(
                &held.raw_id,
                SERVER_EXITED,
                "the MCP server exited while the call waited for approval",
            );
            reply.push(b'\n');
            actions.push(Action::ToClient(reply));
        }
        self.server_requests.clear();
        self.forget_tombstones();
        self.pins.own.waiting = None;
        self.held_bytes = 0;
        for (_, frame) in std::mem::take(&mut self.held) {
            if let Some(reply) =
                self.refuse_held(&frame, "the server exited before its tools could be listed")
            {
                actions.push(Action::ToClient(reply));
            }
        }
        actions.push(Action::Log("server exited".into()));
        actions
    }

    /// The relay stops: every pending call ends as [`CallEnd::Shutdown`]. Nothing is sent.
    pub fn shutdown(&mut self) -> Vec<Action> {
        let count = self.client_requests.len() + self.parked.len();
        for (_, outstanding) in std::mem::take(&mut self.client_requests) {
            if let Kind::Call(pending) = outstanding.kind {
                self.gate.finish(pending, CallEnd::Shutdown);
            }
        }
        for (_, held) in std::mem::take(&mut self.parked) {
            self.gate.withdraw(
                held.parked,
                "the relay stopped while the call waited for approval",
            );
        }
        self.give_up_retries("the relay stopped before the client retried the call");
        self.server_requests.clear();
        self.forget_tombstones();
        self.pins.own.waiting = None;
        self.held_bytes = 0;
        for (_, frame) in std::mem::take(&mut self.held) {
            self.refuse_held(
                &frame,
                "the relay stopped before the server's tools could be listed",
            );
        }
        if count == 0 {
            Vec::new()
        } else {
            vec![Action::Log(format!(
                "shut down with {count} requests unanswered"
            ))]
        }
    }

    /// Settles every park answered `input_required` whose retry never came (nobody
    /// waits on them): withdrawn, or expired once past their timeout.
    fn give_up_retries(&mut self, why: &str) {
        self.awaiting_bytes = 0;
        for (_, awaiting) in std::mem::take(&mut self.awaiting_retry) {
            self.gate.withdraw(awaiting.parked, why);
        }
    }

    fn forget_tombstones(&mut self) {
        self.tombstones.clear();
        self.tombstone_order.clear();
    }

    fn client_message(&mut self, message: Message<'_>, logs: &mut Logs) -> Plan {
        match message {
            Message::NotJson if self.config.forward_unparsed_client_lines => {
                logs.push("client: forwarded a line that is not JSON (as configured)".into());
                Plan::Forward
            }
            Message::NotJson => {
                logs.push("client: dropped a line that is not JSON".into());
                Plan::Drop
            }
            Message::Invalid(why) => {
                logs.push(format!("client: dropped an unreadable message: {why}"));
                Plan::Drop
            }
            Message::Request(request) => self.client_request(request, logs),
            Message::Notification(notification) => {
                match self.client_notification(&notification, logs) {
                    Ok(()) => Plan::Forward,
                    Err(why) => {
                        logs.push(format!("client: dropped a notification: {why}"));
                        Plan::Drop
                    }
                }
            }
            Message::Response(response) => {
                if response.duplicate_keys {
                    logs.push("client: dropped a response with duplicate keys".into());
                    Plan::Drop
                } else if let Some(approval_id) = self.elicits.remove(&response.id.key) {
                    // The relay's own question: answered here, never shown to the server.
                    self.client_answered(&approval_id, &response, logs);
                    Plan::Drop
                } else if self.server_requests.remove(&response.id.key) {
                    Plan::Forward
                } else {
                    logs.push(format!(
                        "client: dropped a response to {} , which the server is not waiting for",
                        response.id.raw
                    ));
                    Plan::Drop
                }
            }
            Message::Batch(batch) => self.client_batch(batch, logs),
        }
    }

    fn client_notification(
        &mut self,
        notification: &Notification<'_>,
        logs: &mut Logs,
    ) -> Result<(), String> {
        if notification.duplicate_keys {
            return Err("duplicate keys".into());
        }
        match notification.method.as_str() {
            "tools/call" => Err("a tools/call without an id".into()),
            // The server is ready once the client says so: list its tools now, so the
            // session is pinned whether or not the client lists them (or all their pages).
            "notifications/initialized" => {
                self.list_tools(logs);
                Ok(())
            }
            "notifications/cancelled" if notification.ambiguous_params(&CANCEL_MEMBERS) => {
                Err("a cancellation whose requestId or reason cannot be read one way only".into())
            }
            "notifications/cancelled"
                if self.pins.own.waiting.is_some()
                    && notification.cancelled_request().as_ref()
                        == self.pins.own.waiting.as_ref() =>
            {
                Err("it names the relay's own tools/list".into())
            }
            "notifications/cancelled" => {
                if let Some(key) = notification.cancelled_request() {
                    let reason = notification.cancel_reason();
                    if self.cancel(&key, reason.as_deref(), logs) == Cancelled::Waiting {
                        return Err("it cancels a call that never reached the server".into());
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Ends a pending request the client cancelled, and keeps its id as a tombstone: the
    /// server may still answer it (MCP lets a cancellation race its answer), and that late
    /// answer must never be taken for a new request reusing the id. A cancellation of an
    /// id not pending (never sent, already answered) leaves nothing to wait for.
    fn cancel(&mut self, key: &IdKey, reason: Option<&str>, logs: &mut Logs) -> Cancelled {
        if let Some(at) = self.held.iter().position(|(held, _)| held == key) {
            let (_, frame) = self.held.remove(at);
            self.held_bytes -= frame.len();
            self.refuse_held(
                &frame,
                "cancelled by the client while it waited for the server's tools to be pinned",
            );
            return Cancelled::Waiting;
        }
        if let Some(held) = self.parked.remove(key) {
            let why = format!(
                "the client cancelled the call while it waited for approval: {}",
                reason.unwrap_or("no reason given")
            );
            logs.push(format!(
                "client: withdrew tools/call {} parked as {}",
                held.raw_id, held.approval_id
            ));
            self.gate.withdraw(held.parked, &why);
            if let Some(notice) = self.call_off_question(&held.approval_id) {
                self.released.push(Action::ToClient(notice));
            }
            return Cancelled::Waiting;
        }
        let Some(outstanding) = self.client_requests.remove(key) else {
            return Cancelled::Nothing;
        };
        if let Kind::Call(pending) = outstanding.kind {
            self.gate.finish(pending, CallEnd::Cancelled { reason });
        }
        if self.tombstones.len() >= self.config.max_pending.max(1)
            && let Some((_, oldest)) = self.tombstone_order.pop_first()
            && let Some((_, raw)) = self.tombstones.remove(&oldest)
        {
            logs.push(format!(
                "client: forgot cancelled request {raw} ({} cancelled requests are still unanswered); a late answer to it will be dropped only while the id is not reused",
                self.config.max_pending
            ));
        }
        let order = self.next_tombstone;
        self.next_tombstone += 1;
        self.tombstones
            .insert(key.clone(), (order, outstanding.raw_id));
        self.tombstone_order.insert(order, key.clone());
        Cancelled::Pending
    }

    /// Removes the tombstone of `key`, when there is one; true if there was.
    fn unbury(&mut self, key: &IdKey) -> bool {
        match self.tombstones.remove(key) {
            Some((order, _)) => {
                self.tombstone_order.remove(&order);
                true
            }
            None => false,
        }
    }

    /// Why a new request with this id cannot wait for an answer.
    fn id_problem(&self, id: &RequestId, batch_ids: &BTreeSet<IdKey>) -> Option<String> {
        if self.pins.own.waiting.as_ref() == Some(&id.key) {
            Some(format!(
                "request id {} is the relay's own tools/list, still waiting for the server",
                id.raw
            ))
        } else if self.client_requests.contains_key(&id.key)
            || self.parked.contains_key(&id.key)
            || batch_ids.contains(&id.key)
            || self.held.iter().any(|(key, _)| *key == id.key)
        {
            Some(format!("request id {} is already pending", id.raw))
        } else if self.tombstones.contains_key(&id.key) {
            Some(format!(
                "request id {} was cancelled and the server may still answer it",
                id.raw
            ))
        } else if self.client_requests.len() + self.parked.len() + self.held.len() + batch_ids.len()
            >= self.config.max_pending
        {
            Some(format!(
                "{} requests are already pending",
                self.config.max_pending
            ))
        } else {
            None
        }
    }

    fn client_request(&mut self, request: Request<'_>, logs: &mut Logs) -> Plan {
        let id_problem = self.id_problem(&request.id, &BTreeSet::new());
        if request.method == "tools/call"
            && let Some(state) = request_state(&request)
            && self.awaiting_retry.contains_key(state.as_ref())
        {
            return self.retried(&request, &state, id_problem, logs);
        }
        if request.method == "tools/call"
            && id_problem.is_none()
            && self.must_wait(request.raw.len())
        {
            logs.push(format!(
                "client: tools/call {} waits for the relay's listing of the server's tools",
                request.id.raw
            ));
            return Plan::Hold(request.id.key);
        }
        if request.method == "tools/call" {
            return match self.decide_call(&request, id_problem, false, logs) {
                Ok(Opened::Forward(pending)) => {
                    self.client_requests.insert(
                        request.id.key.clone(),
                        Outstanding {
                            raw_id: request.id.raw.clone(),
                            kind: Kind::Call(pending),
                        },
                    );
                    Plan::Forward
                }
                Ok(Opened::Park {
                    approval_id,
                    parked,
                    waiter,
                }) => {
                    let (parked, waiter) =
                        match self.input_required(&request, &approval_id, parked, waiter, logs) {
                            Ok(reply) => return Plan::Reply(reply),
                            Err(kept) => kept,
                        };
                    logs.push(format!(
                        "client: tools/call {} parked for approval as {approval_id}; it waits",
                        request.id.raw
                    ));
                    self.waiters.push((approval_id.clone(), waiter));
                    let question = self.ask_client(&request, &approval_id, logs);
                    self.parked.insert(
                        request.id.key.clone(),
                        HeldForApproval {
                            raw_id: request.id.raw.clone(),
                            approval_id,
                            frame: request.raw.to_vec(),
                            tool: request.tool_name().unwrap_or_default(),
                            arguments: request.arguments().ok().flatten().map(str::to_owned),
                            names_result_type: names_result_type(&request),
                            parked,
                            progress: request.progress_token().map(|t| (t.to_owned(), 0)),
                        },
                    );
                    // The question is the relay's own request to the client, sent back
                    // the way the call came; the call itself stays unanswered.
                    question.map_or(Plan::Drop, Plan::Reply)
                }
                Err(refusal) => {
                    logs.push(refusal_log(&request.id, &refusal));
                    Plan::Reply(refusal_answer(&request, &refusal))
                }
            };
        }
        let problem = id_problem.or_else(|| request_problem(&request));
        if let Some(why) = problem {
            logs.push(format!(
                "client: answered {} with an error: {why}",
                request.id.raw
            ));
            let mut reply = error_reply(&request.id.raw, INVALID_REQUEST, &why);
            reply.push(b'\n');
            return Plan::Reply(reply);
        }
        if request.method == "initialize" {
            self.client = ClientInfo::of(&request);
        }
        let kind = self.plain_kind(&request);
        self.client_requests.insert(
            request.id.key,
            Outstanding {
                raw_id: request.id.raw,
                kind,
            },
        );
        Plan::Forward
    }

    /// Answers the parked `request` (`approval_id`) `input_required` with the question to
    /// the client's user, when asking is on, the request is of MCP
    /// [`question::INPUT_REQUIRED_FROM`] or later and declares form elicitation, and
    /// fewer than [`RelayConfig::max_pending`] parks await their retry: the park is kept
    /// for the retry ([`Relay::retried`]) and the reply returned. Otherwise the park is
    /// handed back, to be held as any.
    fn input_required(
        &mut self,
        request: &Request<'_>,
        approval_id: &str,
        parked: G::Parked,
        waiter: G::Waiter,
        logs: &mut Logs,
    ) -> Result<Vec<u8>, (G::Parked, G::Waiter)> {
        if !self.config.approve_via_client {
            return Err((parked, waiter));
        }
        let Some(client) = ClientInfo::of_meta(request) else {
            return Err((parked, waiter));
        };
        if !client.elicit_form {
            logs.push(format!(
                "client: cannot be asked (its request declares no form elicitation); {approval_id} waits for the approvals queue"
            ));
            return Err((parked, waiter));
        }
        let tool = request.tool_name().unwrap_or_default();
        let arguments = request.arguments().ok().flatten();
        let bytes = tool.len() + arguments.map_or(0, str::len);
        if self.awaiting_retry.len() >= self.config.max_pending
            || self.awaiting_bytes + bytes > MAX_AWAITING_RETRY_BYTES
        {
            logs.push(format!(
                "client: {} parks ({} bytes) await their client's retry already; {approval_id} waits for the approvals queue",
                self.awaiting_retry.len(),
                self.awaiting_bytes
            ));
            return Err((parked, waiter));
        }
        self.awaiting_bytes += bytes;
        let params = question::elicitation_params(
            approval_id,
            &tool,
            arguments.unwrap_or("{}"),
            client.protocol.as_deref(),
        );
        let mut out = format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"input_required","inputRequests":{{"#,
            request.id.raw
        );
        json::write_string(question::INPUT_KEY, &mut out);
        out.push_str(r#":{"method":"elicitation/create","params":"#);
        out.push_str(&String::from_utf8_lossy(&params));
        out.push_str(r#"}},"requestState":"#);
        json::write_string(approval_id, &mut out);
        out.push_str("}}\n");
        logs.push(format!(
            "client: tools/call {} parked for approval as {approval_id}; answered input_required (its user is asked; the retry brings the answer)",
            request.id.raw
        ));
        self.awaiting_retry.insert(
            approval_id.to_owned(),
            AwaitingRetry {
                tool,
                arguments: arguments.map(str::to_owned),
                parked,
                waiter,
            },
        );
        Ok(out.into_bytes())
    }

    /// The client's retry of the park answered `input_required` that `state` names. It
    /// must be the parked call again (the same tool, the same arguments text) and carry
    /// the answer (`inputResponses`); otherwise it is refused (recorded,
    /// `approval_mismatch`) and the park is left as it was. The answer is placed as the
    /// client's decision (one that decides nothing leaves the park to the queue); the
    /// retry is then held as any parked call, its park's waiter handed out, and, once
    /// approved, forwarded without the members that answered the relay.
    fn retried(
        &mut self,
        request: &Request<'_>,
        state: &str,
        id_problem: Option<String>,
        logs: &mut Logs,
    ) -> Plan {
        let frame = match self.retry_checked(request, state, id_problem, logs) {
            Ok(frame) => frame,
            Err(refusal) => {
                logs.push(refusal_log(&request.id, &refusal));
                return Plan::Reply(refusal_answer(request, &refusal));
            }
        };
        let Some(awaiting) = self.awaiting_retry.remove(state) else {
            return Plan::Drop;
        };
        self.awaiting_bytes -=
            awaiting.tool.len() + awaiting.arguments.as_ref().map_or(0, String::len);
        match input_response(request).and_then(elicit_answer) {
            Some(approved) => {
                let client = ClientInfo::of_meta(request)
                    .and_then(|c| c.name)
                    .unwrap_or_else(|| "(unnamed client)".to_owned());
                logs.push(format!(
                    "client: its user {} {state} (input_required retry {})",
                    if approved { "approved" } else { "declined" },
                    request.id.raw
                ));
                let asked = ClientMechanism::InputRequired;
                self.gate
                    .client_answered(&awaiting.parked, approved, &client, asked);
            }
            None => logs.push(format!(
                "client: its answer about {state} decides nothing (no yes or no, or not read one way only); retry {} waits for the approvals queue",
                request.id.raw
            )),
        }
        self.waiters.push((state.to_owned(), awaiting.waiter));
        self.parked.insert(
            request.id.key.clone(),
            HeldForApproval {
                raw_id: request.id.raw.clone(),
                approval_id: state.to_owned(),
                frame,
                tool: awaiting.tool,
                arguments: awaiting.arguments,
                names_result_type: names_result_type(request),
                parked: awaiting.parked,
                progress: request.progress_token().map(|t| (t.to_owned(), 0)),
            },
        );
        Plan::Drop
    }

    /// The frame to forward for the retry of the park `state` names, once approved; or
    /// why the retry is refused (recorded).
    fn retry_checked(
        &self,
        request: &Request<'_>,
        state: &str,
        id_problem: Option<String>,
        logs: &mut Logs,
    ) -> Result<Vec<u8>, Refusal> {
        let (name, arguments) = self.read_call(request, id_problem, logs)?;
        let mismatch = |why: &str| {
            let reason = format!(
                "a retry echoing requestState {:?} {why}; not run",
                question::bounded(&aegis_record::text::escape(state), 200)
            );
            self.refuse_here(request, Refusal::new(Cause::ApprovalMismatch, reason))
        };
        let same = self
            .awaiting_retry
            .get(state)
            .is_some_and(|a| a.tool == name && a.arguments.as_deref() == arguments);
        if !same {
            return Err(mismatch(
                "is not the call that was parked: another tool, or other arguments",
            ));
        }
        if input_response(request).is_none() {
            return Err(mismatch(&format!(
                "carries no answer to the question (inputResponses.{}) read one way only",
                question::INPUT_KEY
            )));
        }
        without_retry_members(request).ok_or_else(|| {
            let why = "its params could not be rewritten without the retry's members";
            self.refuse_here(request, Refusal::new(Cause::UnreadableRequest, why))
        })
    }

    /// The relay's `elicitation/create` asking the client's user to approve the parked
    /// call `request` (`approval_id`), when so configured and the client declared form
    /// elicitation; `None` otherwise (the park waits for the approvals queue).
    fn ask_client(
        &mut self,
        request: &Request<'_>,
        approval_id: &str,
        logs: &mut Logs,
    ) -> Option<Vec<u8>> {
        if !self.config.approve_via_client {
            return None;
        }
        if !self.client.elicit_form {
            logs.push(format!(
                "client: cannot be asked (no form elicitation declared); {approval_id} waits for the approvals queue"
            ));
            return None;
        }
        let id = loop {
            let n = self.next_elicit;
            self.next_elicit += 1;
            let id = format!("{ELICIT_REQUEST_ID_PREFIX}{n}");
            if !self.server_requests.contains(&IdKey::String(id.clone())) {
                break id;
            }
        };
        let tool = request.tool_name().unwrap_or_default();
        let arguments = request.arguments().ok().flatten().unwrap_or("{}");
        let mut out = String::from(r#"{"jsonrpc":"2.0","id":"#);
        json::write_string(&id, &mut out);
        out.push_str(r#","method":"elicitation/create","params":"#);
        // The question the gateway asks too; form mode named from 2025-11-25 on.
        let params = question::elicitation_params(
            approval_id,
            &tool,
            arguments,
            self.client.protocol.as_deref(),
        );
        out.push_str(&String::from_utf8_lossy(&params));
        out.push_str("}\n");
        logs.push(format!(
            "client: asked its user to approve {approval_id} (elicitation {id})"
        ));
        self.elicits
            .insert(IdKey::String(id), approval_id.to_owned());
        Some(out.into_bytes())
    }

    /// The client's answer to the relay's question about `approval_id`: accepted with
    /// `approve: true` approves, accepted with `false`, declined or cancelled denies;
    /// an error or an answer not read one way only decides nothing (the queue still can).
    fn client_answered(&mut self, approval_id: &str, response: &Response<'_>, logs: &mut Logs) {
        let Some(held) = self
            .parked
            .values()
            .find(|held| held.approval_id == approval_id)
        else {
            logs.push(format!(
                "client: answered about {approval_id} after its call ended; ignored"
            ));
            return;
        };
        let Some(approved) = response.result().and_then(elicit_answer) else {
            logs.push(format!(
                "client: its answer about {approval_id} decides nothing (an error, or not read one way only); it waits for the approvals queue"
            ));
            return;
        };
        let client = self
            .client
            .name
            .clone()
            .unwrap_or_else(|| "(unnamed client)".to_owned());
        logs.push(format!(
            "client: its user {} {approval_id}",
            if approved { "approved" } else { "declined" }
        ));
        self.gate.client_answered(
            &held.parked,
            approved,
            &client,
            ClientMechanism::Elicitation,
        );
    }

    /// Forgets the open question about `approval_id`, if any: a
    /// `notifications/cancelled` for it, to send the client.
    fn call_off_question(&mut self, approval_id: &str) -> Option<Vec<u8>> {
        let key = self
            .elicits
            .iter()
            .find(|(_, asked)| *asked == approval_id)
            .map(|(key, _)| key.clone())?;
        self.elicits.remove(&key);
        let IdKey::String(id) = key else {
            return None;
        };
        let mut out = String::from(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#,
        );
        json::write_string(&id, &mut out);
        out.push_str(r#","reason":"#);
        json::write_string(&format!("{approval_id} was settled otherwise"), &mut out);
        out.push_str("}}\n");
        Some(out.into_bytes())
    }

    /// The relay's own checks, the request id's first, then the gate. A refusal comes
    /// back recorded.
    fn decide_call(
        &mut self,
        request: &Request<'_>,
        id_problem: Option<String>,
        in_batch: bool,
        logs: &mut Logs,
    ) -> Result<Opened<G>, Refusal> {
        let (name, arguments) = self.read_call(request, id_problem, logs)?;
        let input_schema = self
            .pins
            .pinned
            .as_ref()
            .and_then(|pinned| pinned.get(&name))
            .and_then(|pin| pin.field("inputSchema"));
        self.gate.open(&ToolCall {
            frame: request.raw,
            id: &request.id.raw,
            name: &name,
            arguments,
            input_schema,
            in_batch,
        })
    }

    /// The relay's own checks of a `tools/call`, the request id's first: its tool's name
    /// and the exact text of its arguments, or the refusal (recorded).
    fn read_call<'r>(
        &self,
        request: &'r Request<'_>,
        id_problem: Option<String>,
        logs: &mut Logs,
    ) -> Result<(String, Option<&'r str>), Refusal> {
        if let Some(why) = id_problem {
            return Err(self.refuse_here(request, Refusal::new(Cause::IdInUse, why)));
        }
        if request.duplicate_keys {
            let why = "the frame has duplicate keys, so the server may read another call than the one decided";
            return Err(self.refuse_here(request, Refusal::new(Cause::UnreadableRequest, why)));
        }
        let name = match request.tool_name() {
            Ok(name) => name,
            Err(problem) => {
                return Err(self.refuse_here(
                    request,
                    Refusal::new(Cause::UnreadableRequest, problem.to_string()),
                ));
            }
        };
        let arguments = match request.arguments() {
            Ok(arguments) => arguments,
            Err(problem) => {
                return Err(self.refuse_here(
                    request,
                    Refusal::new(Cause::UnreadableRequest, problem.to_string()),
                ));
            }
        };
        match self.pins.check(&name, self.config.pin_mode) {
            Err(why) => {
                return Err(self.refuse_here(request, Refusal::new(Cause::PinMismatch, why)));
            }
            Ok(Some(note)) => logs.push(format!("pins (record only): calling anyway: {note}")),
            Ok(None) => {}
        }
        Ok((name, arguments))
    }

    fn refuse_here(&self, request: &Request<'_>, mut refusal: Refusal) -> Refusal {
        let name = request.tool_name().ok();
        refusal.call_id = self.gate.refused(&RefusedCall {
            frame: request.raw,
            id: &request.id.raw,
            name: name.as_deref(),
            refusal: &refusal,
        });
        refusal
    }

    /// A batch longer than [`MAX_BATCH`]: nothing in it is decided, recorded or
    /// forwarded. The first [`MAX_BATCH`] elements that are requests get an error each,
    /// and one error with a null id says the rest went unanswered.
    fn oversized_batch(&mut self, batch: Batch<'_>, len: usize, logs: &mut Logs) -> Plan {
        let why = format!(
            "a batch of {len} messages is over the relay's bound of {MAX_BATCH}; nothing in it was forwarded"
        );
        let mut answers: Vec<Vec<u8>> = batch
            .messages()
            .take(MAX_BATCH)
            .filter_map(|message| match message {
                Message::Request(request) => {
                    Some(error_reply(&request.id.raw, INVALID_REQUEST, &why))
                }
                _ => None,
            })
            .collect();
        let rest = len - MAX_BATCH;
        answers.push(error_reply(
            "null",
            INVALID_REQUEST,
            &format!("{why}; the last {rest} messages are not answered"),
        ));
        logs.push(format!("client: refused {why}"));
        Plan::Reply(json_array(&answers))
    }

    fn client_batch(&mut self, batch: Batch<'_>, logs: &mut Logs) -> Plan {
        let len = batch.len();
        if len > MAX_BATCH {
            return self.oversized_batch(batch, len, logs);
        }
        // Every element is decided before any is acted on: one refused refuses the batch.
        let mut batch_ids = BTreeSet::new();
        let mut elements = Vec::new();
        for item in batch.messages() {
            let element = self.batch_element(item, &mut batch_ids, logs);
            elements.push(element);
        }
        let whole = elements.iter().all(|e| {
            !matches!(
                e,
                Element::Refused(..) | Element::Failed(..) | Element::Unusable(_)
            )
        });
        if whole {
            self.forward_batch(elements, logs);
            return Plan::Forward;
        }
        self.refuse_batch(elements, logs)
    }

    /// Decides one batch element without acting on it.
    fn batch_element(
        &mut self,
        item: Message<'_>,
        batch_ids: &mut BTreeSet<IdKey>,
        logs: &mut Logs,
    ) -> Element<G::Pending> {
        match item {
            Message::Request(request) => self.batch_request(request, batch_ids, logs),
            Message::Notification(n) => self.batch_notification(&n),
            Message::Response(r)
                if !r.duplicate_keys && self.server_requests.contains(&r.id.key) =>
            {
                Element::Answer(r.id.key)
            }
            Message::Response(r) => Element::Unusable(format!(
                "a response to {} that cannot be delivered",
                r.id.raw
            )),
            Message::Invalid(why) => Element::Unusable(why),
            Message::NotJson | Message::Batch(_) => Element::Unusable("a nested batch".into()),
        }
    }

    /// A request in a batch: a tools/call is decided (a refusal is recorded), any other
    /// request checked. Its id counts as pending for the rest of the batch.
    fn batch_request(
        &mut self,
        request: Request<'_>,
        batch_ids: &mut BTreeSet<IdKey>,
        logs: &mut Logs,
    ) -> Element<G::Pending> {
        let id_problem = self.id_problem(&request.id, batch_ids);
        batch_ids.insert(request.id.key.clone());
        if request.method == "tools/call" {
            return match self.decide_call(&request, id_problem, true, logs) {
                Ok(Opened::Forward(pending)) => Element::Call(request.id, pending),
                Ok(Opened::Park {
                    approval_id,
                    parked,
                    ..
                }) => {
                    let why =
                        "a call in a batch cannot wait for approval: the batch is answered as one";
                    self.gate.withdraw(parked, why);
                    let refusal = Refusal::new(
                        Cause::PendingApproval,
                        format!("parked for approval {approval_id}, and withdrawn: {why}"),
                    );
                    logs.push(refusal_log(&request.id, &refusal));
                    Element::Refused(request.id, refusal)
                }
                Err(refusal) => {
                    logs.push(refusal_log(&request.id, &refusal));
                    Element::Refused(request.id, refusal)
                }
            };
        }
        if let Some(why) = id_problem.or_else(|| request_problem(&request)) {
            return Element::Failed(request.id, why);
        }
        let kind = self.plain_kind(&request);
        Element::Plain(request.id, kind)
    }

    /// A notification in a batch; what a lone one would be dropped for makes it unusable.
    fn batch_notification(&self, n: &Notification<'_>) -> Element<G::Pending> {
        if n.duplicate_keys {
            return Element::Unusable("a notification with duplicate keys".into());
        }
        match n.method.as_str() {
            "tools/call" => Element::Unusable("a tools/call without an id".into()),
            "notifications/cancelled" if n.ambiguous_params(&CANCEL_MEMBERS) => {
                Element::Unusable("a cancellation that cannot be read one way only".into())
            }
            "notifications/cancelled"
                if self.pins.own.waiting.is_some()
                    && n.cancelled_request().as_ref() == self.pins.own.waiting.as_ref() =>
            {
                Element::Unusable("a cancellation of the relay's own tools/list".into())
            }
            "notifications/cancelled" => Element::Cancel(n.cancelled_request(), n.cancel_reason()),
            "notifications/initialized" => Element::Initialized,
            _ => Element::Notify,
        }
    }

    /// A batch with nothing refused: its requests become pending and its answers are
    /// delivered; its cancellations act once every request in it is pending.
    fn forward_batch(&mut self, elements: Vec<Element<G::Pending>>, logs: &mut Logs) {
        let mut cancels = Vec::new();
        let mut initialized = false;
        for element in elements {
            match element {
                Element::Call(id, pending) => {
                    self.client_requests.insert(
                        id.key,
                        Outstanding {
                            raw_id: id.raw,
                            kind: Kind::Call(pending),
                        },
                    );
                }
                Element::Plain(id, kind) => {
                    self.client_requests.insert(
                        id.key,
                        Outstanding {
                            raw_id: id.raw,
                            kind,
                        },
                    );
                }
                Element::Answer(key) => {
                    self.server_requests.remove(&key);
                }
                Element::Cancel(Some(key), reason) => cancels.push((key, reason)),
                Element::Initialized => initialized = true,
                _ => {}
            }
        }
        for (key, reason) in cancels {
            let _ = self.cancel(&key, reason.as_deref(), logs);
        }
        if initialized {
            self.list_tools(logs);
        }
    }

    /// Refused whole: answer every request, forward nothing.
    fn refuse_batch(&mut self, elements: Vec<Element<G::Pending>>, logs: &mut Logs) -> Plan {
        let not_run = "not run: another message in its batch was refused";
        let mut answers: Vec<Vec<u8>> = Vec::new();
        for element in elements {
            match element {
                Element::Call(id, pending) => {
                    self.gate.finish(pending, CallEnd::NotSent);
                    answers.push(error_reply(&id.raw, NOT_FORWARDED, not_run));
                }
                Element::Refused(id, refusal) => {
                    // Batches end before MCP 2026-07-28, which names result types.
                    answers.push(refusal_reply(&id.raw, &refusal, false));
                }
                Element::Plain(id, _) => answers.push(error_reply(&id.raw, NOT_FORWARDED, not_run)),
                Element::Failed(id, why) => {
                    answers.push(error_reply(&id.raw, INVALID_REQUEST, &why))
                }
                Element::Unusable(why) => logs.push(format!("client batch: {why}")),
                Element::Cancel(..)
                | Element::Notify
                | Element::Initialized
                | Element::Answer(_) => {}
            }
        }
        logs.push(format!(
            "client: refused a batch whole, {} requests answered, nothing forwarded",
            answers.len()
        ));
        if answers.is_empty() {
            return Plan::Drop;
        }
        Plan::Reply(json_array(&answers))
    }

    fn plain_kind(&self, request: &Request<'_>) -> Kind<G::Pending> {
        if request.method == "tools/list" {
            Kind::ToolsList {
                first_page: !request.has_cursor(),
                generation: self.pins.generation,
            }
        } else {
            Kind::Other
        }
    }

    /// Starts the relay's own listing of the server's tools, or (one is under way)
    /// marks it to start again when that one ends.
    fn list_tools(&mut self, logs: &mut Logs) {
        let own = &mut self.pins.own;
        if own.waiting.is_some() {
            own.again = true;
            return;
        }
        own.generation = self.pins.generation;
        own.listing = PinSet::new();
        own.pages = 0;
        own.bytes = 0;
        own.again = false;
        self.ask_page(None, logs);
    }

    /// Sends the relay's own `tools/list` for the page at `cursor` (`None`: the first).
    fn ask_page(&mut self, cursor: Option<&str>, logs: &mut Logs) {
        // An id no client request is waiting on (a client reusing it meanwhile is
        // refused: see `id_problem`).
        let (id, key) = loop {
            let n = self.pins.own.sent;
            self.pins.own.sent += 1;
            let id = format!("{OWN_REQUEST_ID_PREFIX}{n}");
            let key = IdKey::String(id.clone());
            let taken = self.client_requests.contains_key(&key)
                || self.tombstones.contains_key(&key)
                || self.held.iter().any(|(held, _)| *held == key);
            if !taken {
                break (id, key);
            }
        };
        let mut request = String::from(r#"{"jsonrpc":"2.0","id":"#);
        json::write_string(&id, &mut request);
        request.push_str(r#","method":"tools/list""#);
        if let Some(cursor) = cursor {
            request.push_str(r#","params":{"cursor":"#);
            json::write_string(cursor, &mut request);
            request.push('}');
        }
        request.push_str("}\n");
        if self.pins.own.pages == 0 {
            logs.push("relay: listing the server's tools to pin them".into());
        }
        self.pins.own.waiting = Some(key);
        self.own_requests.push(request.into_bytes());
    }

    /// The server's answer to the relay's own `tools/list` (never forwarded).
    fn own_page(&mut self, frame_len: usize, response: &Response<'_>, logs: &mut Logs) {
        self.pins.own.waiting = None;
        let own = &mut self.pins.own;
        own.pages += 1;
        own.bytes = own.bytes.saturating_add(frame_len);
        let Some(result) = response.result() else {
            logs.push(
                "server: answered the relay's tools/list with an error; the session is pinned by the client's listing, if any".into(),
            );
            self.list_again(logs);
            return;
        };
        if own.pages > MAX_LISTING_PAGES || own.bytes > MAX_LISTING_BYTES {
            let why = format!(
                "the listing did not end within {MAX_LISTING_PAGES} pages and {MAX_LISTING_BYTES} bytes"
            );
            self.pins.fail(why, logs);
            self.list_again(logs);
            return;
        }
        let mut listing = std::mem::take(&mut self.pins.own.listing);
        match self.pins.read_page(&mut listing, result, false, logs) {
            Some(Some(cursor)) => {
                self.pins.own.listing = listing;
                self.ask_page(Some(&cursor), logs);
            }
            Some(None) => {
                let generation = self.pins.own.generation;
                self.pins.complete(listing, generation, logs);
                self.list_again(logs);
            }
            None => self.list_again(logs),
        }
    }

    /// The relay's listing ended: starts another if the server announced a change
    /// meanwhile.
    fn list_again(&mut self, logs: &mut Logs) {
        if std::mem::take(&mut self.pins.own.again) {
            self.list_tools(logs);
        }
        self.release_held();
    }

    /// True while a call must wait: the relay's listing is under way and the session
    /// has no pins yet, or its tools changed since they were last listed.
    fn must_wait(&self, frame_len: usize) -> bool {
        self.pins.own.waiting.is_some()
            && (self.pins.pinned.is_none() || self.pins.stale || self.pins.unreadable.is_some())
            && self.held_bytes.saturating_add(frame_len) <= MAX_LISTING_BYTES
    }

    /// What a client frame's plan becomes; a held call is kept, not answered.
    fn carry_out(&mut self, plan: Plan, bytes: Vec<u8>, logs: Logs) -> Vec<Action> {
        if let Plan::Hold(key) = plan {
            self.held_bytes += bytes.len();
            self.held.push((key, bytes));
            return logs.into_actions();
        }
        finish_plan(plan, bytes, logs, Action::ToServer, Action::ToClient)
    }

    /// Hands the changes seen since the last call to the gate, to be recorded.
    fn record_changes(&mut self) {
        for entry in std::mem::take(&mut self.pins.unrecorded) {
            let line = self.pins.line_of(entry);
            self.gate.tool_changed(&line);
        }
    }

    /// Decides the calls that waited, in the order they came (those that must still
    /// wait are held again).
    fn release_held(&mut self) {
        // A change is on the record before any call it refuses.
        self.record_changes();
        self.held_bytes = 0;
        for (_, frame) in std::mem::take(&mut self.held) {
            let mut logs = Logs::default();
            let plan = {
                let message = classify(&frame);
                self.client_message(message, &mut logs)
            };
            let actions = self.carry_out(plan, frame, logs);
            self.released.extend(actions);
        }
    }

    /// Records a held call as refused by the relay for `why`; the answer saying so.
    fn refuse_held(&mut self, frame: &[u8], why: &str) -> Option<Vec<u8>> {
        match classify(frame) {
            Message::Request(request) => {
                let refusal = self.refuse_here(&request, Refusal::new(Cause::Unlisted, why));
                Some(refusal_answer(&request, &refusal))
            }
            _ => None,
        }
    }

    fn server_message(&mut self, frame: &[u8], message: Message<'_>, logs: &mut Logs) -> Plan {
        match message {
            // Not relayed: the stdio transport lets a server write only MCP messages, and
            // a line the relay cannot read unambiguously (ambiguous members, nesting past
            // its bound, a bare `\r`) may be read by the client as a listing or an answer
            // the relay never saw, slipping past the pins or the record.
            Message::NotJson => self.drop_server_frame(frame, "a line that is not JSON", logs),
            Message::Invalid(reason) => self.drop_server_frame(
                frame,
                &format!("a line the relay cannot read: {reason}"),
                logs,
            ),
            Message::Batch(batch) => self.server_batch(frame, batch, logs),
            Message::Response(response) if self.answer_unusable(&response) => self
                .drop_server_frame(
                    frame,
                    "an answer to a tools/call with duplicate keys, which the client and the record may read differently",
                    logs,
                ),
            item => match self.server_item(frame, item, logs) {
                Pass::Forward => Plan::Forward,
                Pass::Drop => Plan::Drop,
                Pass::Instead(bytes) => Plan::Substitute(bytes),
            },
        }
    }

    /// True for an answer to a pending `tools/call` that must not reach the client: keys
    /// collide in it, so what the client reads (`isError`, the content) may not be what
    /// the record says.
    fn answer_unusable(&self, response: &Response<'_>) -> bool {
        (response.duplicate_keys || response.tool_error_ambiguous())
            && matches!(
                self.client_requests.get(&response.id.key),
                Some(Outstanding {
                    kind: Kind::Call(_),
                    ..
                })
            )
    }

    /// Drops a server frame, and answers every pending client request it seems to answer
    /// (its id read without choosing, see [`recoverable_ids`]) with a JSON-RPC error,
    /// ending a call with that error as its response: the client is not left waiting for
    /// an answer that will never come. A request whose id cannot be read stays pending.
    fn drop_server_frame(&mut self, frame: &[u8], why: &str, logs: &mut Logs) -> Plan {
        logs.push(format!("server: dropped {why}"));
        let mut answered = Vec::new();
        let own = self.pins.own.waiting.clone();
        let ids = recoverable_ids(frame, |key| {
            self.client_requests.contains_key(key)
                || self.tombstones.contains_key(key)
                || own.as_ref() == Some(key)
        });
        for id in ids {
            if own.as_ref() == Some(&id.key) {
                self.pins.own.waiting = None;
                self.pins.fail(
                    format!("the server's answer to the relay's tools/list: {why}"),
                    logs,
                );
                self.list_again(logs);
            } else if let Some(outstanding) = self.client_requests.remove(&id.key) {
                answered.push(outstanding);
            } else if self.unbury(&id.key) {
                logs.push(format!(
                    "server: that line answered cancelled request {}",
                    id.raw
                ));
            }
        }
        if answered.is_empty() {
            return Plan::Drop;
        }
        let message = format!("the MCP server's answer could not be relayed: {why}");
        let answers: Vec<Vec<u8>> = answered
            .iter()
            .map(|o| error_reply(&o.raw_id, UNRELAYABLE_ANSWER, &message))
            .collect();
        let is_batch = frame.trim_ascii_start().starts_with(b"[");
        let bytes = if is_batch {
            json_array(&answers)
        } else {
            let mut lines = answers.join(&b"\n"[..]);
            lines.push(b'\n');
            lines
        };
        for outstanding in answered {
            logs.push(format!(
                "server: answered {} for the server with error {UNRELAYABLE_ANSWER}",
                outstanding.raw_id
            ));
            if let Kind::Call(pending) = outstanding.kind {
                // The record's response is what the client got: the relay's error.
                let end = CallEnd::Unrelayable {
                    frame: &bytes,
                    reason: why,
                };
                self.gate.finish(pending, end);
            }
        }
        Plan::Substitute(bytes)
    }

    /// A server batch is relayed whole or not at all: if any element would be dropped
    /// alone, the batch is dropped, and the pending requests it answers get an error.
    fn server_batch(&mut self, frame: &[u8], batch: Batch<'_>, logs: &mut Logs) -> Plan {
        let len = batch.len();
        if len > MAX_BATCH {
            let why = format!("a batch of {len} messages, over the bound of {MAX_BATCH}");
            return self.drop_server_frame(frame, &why, logs);
        }
        let mut answers = BTreeSet::new();
        let mut requests = 0;
        let mut problem = None;
        for item in batch.messages() {
            let unusable = match &item {
                Message::Response(r) if self.answer_unusable(r) => {
                    Some("an answer to a tools/call with duplicate keys".to_owned())
                }
                Message::Response(r) if !self.client_requests.contains_key(&r.id.key) => {
                    Some(format!("a response to {}, which is not pending", r.id.raw))
                }
                Message::Response(r) if !answers.insert(r.id.key.clone()) => {
                    Some(format!("a second response to {}", r.id.raw))
                }
                // A listing may have to reach the client with tools left out, which a
                // batch relayed whole cannot do.
                Message::Response(r)
                    if matches!(
                        self.client_requests.get(&r.id.key).map(|o| &o.kind),
                        Some(Kind::ToolsList { .. })
                    ) =>
                {
                    Some(format!("an answer to the client's tools/list {}", r.id.raw))
                }
                Message::Request(_)
                    if self.server_requests.len() + requests >= self.config.max_pending =>
                {
                    Some("a request over the bound on server requests".to_owned())
                }
                Message::Request(_) => {
                    requests += 1;
                    None
                }
                Message::Notification(_) | Message::Response(_) => None,
                Message::Invalid(why) => Some(why.clone()),
                Message::NotJson | Message::Batch(_) => Some("a nested batch".to_owned()),
            };
            if unusable.is_some() {
                problem = unusable;
                break;
            }
        }
        if let Some(why) = problem {
            return self.drop_server_frame(frame, &format!("a batch holding {why}"), logs);
        }
        for item in batch.messages() {
            // Never `Instead`: a batch answering a listing was refused above.
            self.server_item(frame, item, logs);
        }
        Plan::Forward
    }

    /// Handles one message from the server: what reaches the client.
    fn server_item(&mut self, frame: &[u8], message: Message<'_>, logs: &mut Logs) -> Pass {
        match message {
            Message::Response(response) => self.server_response(frame, &response, logs),
            Message::Request(request) => {
                if self.elicits.contains_key(&request.id.key) {
                    logs.push(format!(
                        "server: dropped request {}: the id is the relay's own question to the client",
                        request.id.raw
                    ));
                    return Pass::Drop;
                }
                if self.server_requests.contains(&request.id.key) {
                    logs.push(format!(
                        "server: request id {} reused while pending",
                        request.id.raw
                    ));
                } else if self.server_requests.len() >= self.config.max_pending {
                    logs.push(format!(
                        "server: dropped request {}: {} server requests already wait for the client",
                        request.id.raw, self.config.max_pending
                    ));
                    return Pass::Drop;
                }
                self.server_requests.insert(request.id.key);
                Pass::Forward
            }
            Message::Notification(notification) => {
                match notification.method.as_str() {
                    "notifications/tools/list_changed" => {
                        logs.push(
                            "server: tools changed; calls are refused until they are listed again"
                                .into(),
                        );
                        self.pins.stale = true;
                        self.pins.generation += 1;
                        self.list_tools(logs);
                    }
                    "notifications/cancelled" => {
                        if let Some(key) = notification.cancelled_request() {
                            self.server_requests.remove(&key);
                        }
                    }
                    _ => {}
                }
                Pass::Forward
            }
            Message::Invalid(_) | Message::NotJson | Message::Batch(_) => Pass::Forward,
        }
    }

    fn server_response(&mut self, frame: &[u8], response: &Response<'_>, logs: &mut Logs) -> Pass {
        if self.pins.own.waiting.as_ref() == Some(&response.id.key) {
            self.own_page(frame.len(), response, logs);
            return Pass::Drop;
        }
        let Some(outstanding) = self.client_requests.remove(&response.id.key) else {
            if self.unbury(&response.id.key) {
                logs.push(format!(
                    "server: dropped a late answer to cancelled request {}",
                    response.id.raw
                ));
            } else {
                logs.push(format!(
                    "server: dropped a response to {}, which no request is waiting for",
                    response.id.raw
                ));
            }
            return Pass::Drop;
        };
        match outstanding.kind {
            Kind::Call(pending) => {
                let end = if response.is_error {
                    CallEnd::Error { frame }
                } else {
                    CallEnd::Response {
                        frame,
                        tool_error: response.tool_error(),
                    }
                };
                self.gate.finish(pending, end);
            }
            Kind::ToolsList {
                first_page,
                generation,
            } => {
                let readable =
                    self.pins
                        .client_page(first_page, generation, response.result(), logs);
                if !readable {
                    // Never shown to the client: it would read what the relay could not.
                    // The relay lists again, and calls wait for that listing.
                    let mut reply = error_reply(
                        &outstanding.raw_id,
                        UNRELAYABLE_ANSWER,
                        "the MCP server's tools/list answer could not be read one way only",
                    );
                    reply.push(b'\n');
                    self.released.push(Action::ToClient(reply));
                    self.list_tools(logs);
                    return Pass::Drop;
                }
                // The client's listing may have pinned the session or ended a change:
                // calls that waited are decided (those that must still wait, wait).
                if !self.held.is_empty() {
                    self.release_held();
                }
                if let Some(result) = response.result()
                    && let Some(instead) = self.without_withheld(&outstanding.raw_id, result, logs)
                {
                    return Pass::Instead(instead);
                }
            }
            Kind::Other => {}
        }
        Pass::Forward
    }

    /// The client's listing page without the tools it must not be shown
    /// ([`PinState::withheld`]), as the server's answer with only `result.tools`
    /// shortened (every other member as the server wrote it); `None` when the page
    /// shows none of them.
    fn without_withheld(&self, raw_id: &str, result: Node<'_>, logs: &mut Logs) -> Option<Vec<u8>> {
        let object = result.object()?;
        let json::Lookup::One(tools) = object.lookup("tools") else {
            return None;
        };
        let json::Value::Array(tools) = tools.value() else {
            return None;
        };
        let mut kept = Vec::new();
        let mut left_out: Vec<String> = Vec::new();
        for tool in tools.items() {
            let name: Option<String> = tool.object().and_then(|t| match t.lookup("name") {
                json::Lookup::One(name) => name.exact_str().map(|n| n.to_string()),
                _ => None,
            });
            match name {
                Some(name) if self.pins.withheld(&name) => left_out.push(name),
                _ => kept.push(tool.raw_text()),
            }
        }
        if left_out.is_empty() {
            return None;
        }
        logs.push(format!(
            "tools/list: left out of what the client is shown: {}",
            left_out
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let mut out = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{{"#);
        for (key, value) in object.members() {
            if key.text != "tools" {
                json::write_string(&key.text, &mut out);
                out.push(':');
                out.push_str(value.raw_text());
                out.push(',');
            }
        }
        out.push_str(r#""tools":["#);
        out.push_str(&kept.join(","));
        out.push_str("]}}\n");
        Some(out.into_bytes())
    }
}

/// What becomes of one message from the server.
enum Pass {
    /// It reaches the client as the server wrote it.
    Forward,
    /// It does not reach the client.
    Drop,
    /// These bytes reach the client instead (a listing with tools left out).
    Instead(Vec<u8>),
}

impl<G: Gate> Drop for Relay<G> {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Why a request other than a `tools/call` cannot be forwarded: keys collide in it, or
/// a `tools/list` names its cursor so that the relay and the server may read different
/// pages (the relay keeps the client's pages to compare them with the pins).
/// What an answer to the approval question (an elicitation result) decides
/// ([`question::answer`]): `None` when it decides nothing, or is not read one way only.
fn elicit_answer(result: Node<'_>) -> Option<bool> {
    use crate::json::{Lookup, Value};
    let result = result.object()?;
    let [action, content] = result.lookup_each(["action", "content"]);
    let Lookup::One(action) = action else {
        return None;
    };
    // Read only for an accept; a refusal's content, whatever it is, is not.
    let approve = match content {
        Lookup::One(content) => {
            content
                .object()
                .and_then(|content| match content.lookup(question::APPROVE_FIELD) {
                    Lookup::One(approve) => match approve.value() {
                        Value::Bool(approve) => Some(approve),
                        _ => None,
                    },
                    _ => None,
                })
        }
        _ => None,
    };
    question::answer(action.exact_str()?.as_ref(), approve)
}

/// The members of a `tools/call`'s `params` that carry a retry's answer to the relay:
/// never forwarded.
const RETRY_MEMBERS: [&str; 2] = ["requestState", "inputResponses"];

/// A `tools/call`'s `params.requestState`, when it is one exact string: what a retry of
/// an `input_required` answer echoes.
fn request_state<'a>(request: &Request<'a>) -> Option<std::borrow::Cow<'a, str>> {
    match request.params?.object()?.lookup(RETRY_MEMBERS[0]) {
        crate::json::Lookup::One(state) => state.exact_str(),
        _ => None,
    }
}

/// The answer under [`question::INPUT_KEY`] in a retry's `params.inputResponses`, each
/// read one way only.
fn input_response<'a>(request: &Request<'a>) -> Option<Node<'a>> {
    use crate::json::Lookup;
    let Lookup::One(responses) = request.params?.object()?.lookup(RETRY_MEMBERS[1]) else {
        return None;
    };
    match responses.object()?.lookup(question::INPUT_KEY) {
        Lookup::One(answer) => Some(answer),
        _ => None,
    }
}

/// A retry's frame without the members that answered the relay ([`RETRY_MEMBERS`], any
/// spelling): what the server is sent. Every other byte is the client's.
fn without_retry_members(request: &Request<'_>) -> Option<Vec<u8>> {
    let message = json::parse(request.raw).ok()?.object()?;
    let params = request.params?.object()?.without(&RETRY_MEMBERS);
    message.replacing("params", &params).map(String::into_bytes)
}

fn request_problem(request: &Request<'_>) -> Option<String> {
    if request.duplicate_keys {
        Some("the request has duplicate keys".into())
    } else if request.method == "tools/list" && request.ambiguous_params(&["cursor"]) {
        Some("params.cursor cannot be read one way only".into())
    } else {
        None
    }
}

fn finish_plan(
    plan: Plan,
    bytes: Vec<u8>,
    logs: Logs,
    forward: fn(Vec<u8>) -> Action,
    back: fn(Vec<u8>) -> Action,
) -> Vec<Action> {
    let mut actions = logs.into_actions();
    match plan {
        Plan::Forward => actions.push(forward(bytes)),
        Plan::Substitute(instead) => actions.push(forward(instead)),
        Plan::Reply(reply) => actions.push(back(reply)),
        // Only client frames are held (see `Relay::carry_out`); nothing to do here.
        Plan::Drop | Plan::Hold(_) => {}
    }
    actions
}

/// Answers as one JSON array line.
fn json_array(answers: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"[".to_vec();
    out.extend(answers.join(&b","[..]));
    out.extend_from_slice(b"]\n");
    out
}

fn refusal_log(id: &RequestId, refusal: &Refusal) -> String {
    format!(
        "refused tools/call {} at {}: {}",
        id.raw,
        refusal.station(),
        aegis_record::text::escape(&refusal.reason)
    )
}

/// The answer to a refused call: a `result` with `isError`, so the model reads the reason
/// ([`Refusal::tool_result`], the one format the gateway sends too).
/// The answer refusing `request`, a line: its result names its `resultType` when the
/// request is of MCP 2026-07-28 or later, whose clients refuse a result without one.
fn refusal_answer(request: &Request<'_>, refusal: &Refusal) -> Vec<u8> {
    let mut reply = refusal_reply(&request.id.raw, refusal, names_result_type(request));
    reply.push(b'\n');
    reply
}

/// Whether a result answering `request` must name its `resultType` (`complete`, or
/// `input_required`): from MCP 2026-07-28 on, declared in the request's `_meta`.
fn names_result_type(request: &Request<'_>) -> bool {
    ClientInfo::of_meta(request).is_some()
}

/// A refusal result answering the request `raw_id`, naming its `resultType` if
/// `result_type` ([`names_result_type`]).
fn refusal_reply(raw_id: &str, refusal: &Refusal, result_type: bool) -> Vec<u8> {
    let mut result = refusal.tool_result();
    if result_type {
        result.insert("resultType", "complete");
    }
    let result = aegis_record::json::Value::Object(result).to_canonical();
    let mut out = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":"#).into_bytes();
    out.extend(result);
    out.push(b'}');
    out
}

fn error_reply(raw_id: &str, code: i64, message: &str) -> Vec<u8> {
    let mut out = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"error":{{"code":{code},"message":"#);
    json::write_string(message, &mut out);
    out.push_str("}}");
    out.into_bytes()
}

/// A pin's digest as the record's type (the same SHA-256, spelt the same way).
fn definition_digest(pin: PinDigest) -> Option<DefinitionDigest> {
    DefinitionDigest::from_hex(&pin.to_string()).ok()
}
