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
//!   anywhere, its tool name is not one exact string, its id is already pending, the
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
//!   calls, a JSON-RPC error for the others) and nothing reaches the server.
//!
//! # Non-guarantees
//! - A frame over the size bound cannot be read, so nothing can answer it: it is dropped
//!   and logged, and a call whose response was too long stays pending until shutdown.
//! - After `notifications/tools/list_changed` the relay cannot list the tools itself; in
//!   enforce mode it refuses calls until the client has listed them again.
//! - A task-augmented `tools/call` (MCP 2025-11-25) finishes when the server answers with
//!   the task handle; the work the task does afterwards is not followed.
//! - [`CallEnd::Cancelled`] means the client cancelled; the server may have run the call
//!   anyway (MCP lets it ignore a cancellation), and its late answer is dropped.
//! - A server message whose `id`, `result` or `error` is ambiguous cannot be matched: it is
//!   relayed, and the call it may answer stays pending until the server exits.
//! - A response id the server re-spells (`1` echoed as `1.0`) does not match and is dropped.

use std::collections::{BTreeMap, BTreeSet};

use crate::frame::Frame;
use crate::json::{self, Node};
use crate::message::{IdKey, Message, Notification, Request, RequestId, Response, classify};
use crate::pins::{Change, PinSet, diff};

/// JSON-RPC "Invalid Request".
const INVALID_REQUEST: i64 = -32600;
/// Implementation-defined (−32000…−32019): the relay did not forward the request.
const NOT_FORWARDED: i64 = -32001;
/// Implementation-defined: the server exited before answering.
const SERVER_EXITED: i64 = -32002;

/// The namespaced `_meta` key carrying a refusal's facts.
pub const REFUSAL_META_KEY: &str = "dev.aegis/refusal";

/// The default bound on requests waiting for an answer: a client that never lets the
/// server answer cannot grow the table without end.
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// The Aegis side of a relayed `tools/call`: implemented by the CLI over the runtime.
pub trait Gate {
    /// A decided, forwarded call waiting for its end. `Send`, so a multi-threaded relay can
    /// finish it from the thread that reads the server.
    type Pending: Send;

    /// Decides a `tools/call` before it is forwarded (policy, capability, intent durable).
    ///
    /// # Errors
    /// A [`Refusal`] when the call must not run; the relay answers the client with it and
    /// never forwards the call. The gate records its own refusals.
    fn open(&self, call: &ToolCall<'_>) -> Result<Self::Pending, Refusal>;

    /// Ends a forwarded call. Called exactly once per pending call.
    fn finish(&self, pending: Self::Pending, end: CallEnd<'_>);

    /// Records a call the relay refused itself, before asking [`Gate::open`]; returns the
    /// audit's call id if one was assigned, to be named in the answer.
    fn refused(&self, call: &RefusedCall<'_>) -> Option<String>;
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
    /// True when the call arrived in a JSON-RPC batch.
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

/// Why a call was refused, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The station that refused: `relay`, `pins`, or one of the gate's (`policy`, …).
    pub station: String,
    /// The reason, for a person.
    pub reason: String,
    /// The audit record's call id, when the refusal was recorded.
    pub call_id: Option<String>,
}

impl Refusal {
    fn new(station: &str, reason: impl Into<String>) -> Self {
        Refusal {
            station: station.to_owned(),
            reason: reason.into(),
            call_id: None,
        }
    }
}

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
    /// The client cancelled the call (`notifications/cancelled`).
    Cancelled {
        /// The reason the client gave.
        reason: Option<&'a str>,
    },
    /// Allowed, but never forwarded: another call in its batch was refused.
    NotSent,
    /// The server exited before answering.
    ServerExited,
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
    /// The most requests (of any method) that may wait at once, in each direction.
    pub max_pending: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            pin_mode: PinMode::Enforce,
            forward_unparsed_client_lines: false,
            max_pending: DEFAULT_MAX_PENDING,
        }
    }
}

/// A client request waiting for the server.
struct Outstanding<P> {
    raw_id: String,
    kind: Kind<P>,
}

enum Kind<P> {
    Call(P),
    ToolsList { first_page: bool },
    Other,
}

/// What the relay knows about the server's tools.
#[derive(Default)]
struct PinState {
    /// Set by the first complete listing, or loaded from a pins file.
    pinned: Option<PinSet>,
    /// The listing being received (pages so far).
    listing: PinSet,
    /// Differences found against `pinned`, by tool.
    changes: BTreeMap<String, Change>,
    /// Why the last page could not be read, until a complete listing is read.
    unreadable: Option<String>,
    /// The server announced a change it has not listed since.
    stale: bool,
}

impl PinState {
    /// Why a call to `name` must not run; `Ok(Some(note))` when it may run despite a change.
    fn check(&self, name: &str, mode: PinMode) -> Result<Option<String>, String> {
        let known = self.pinned.as_ref().unwrap_or(&self.listing);
        let listed = known.get(name).is_some() || self.changes.contains_key(name);
        if !listed {
            return Err(format!("tool {name:?} was never listed by the server"));
        }
        let problem = if let Some(reason) = &self.unreadable {
            Some(format!(
                "the server's tool list could not be read: {reason}"
            ))
        } else if let Some(change) = self.changes.get(name) {
            Some(change.to_string())
        } else if known.is_duplicate(name) {
            Some(Change::Duplicate(name.to_owned()).to_string())
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

    fn page(&mut self, first_page: bool, result: Option<&Node<'_>>, logs: &mut Vec<String>) {
        if first_page {
            self.listing = PinSet::new();
        }
        let Some(result) = result else { return };
        let mut page = PinSet::new();
        let more = match page.add_result(result) {
            Ok(more) => more,
            Err(e) => {
                logs.push(format!(
                    "tools/list: {e}; calls are refused until a readable listing"
                ));
                self.unreadable = Some(e.to_string());
                return;
            }
        };
        let before: BTreeSet<String> = self.listing.tools().map(|(n, _)| n.to_owned()).collect();
        self.listing.absorb(page.clone());
        if let Some(pinned) = &self.pinned {
            for change in pinned.changed_in(&page) {
                self.note(change, logs);
            }
        }
        for (name, _) in page.tools() {
            if before.contains(name) {
                self.note(Change::Duplicate(name.to_owned()), logs);
            }
        }
        if more {
            return;
        }
        let listing = std::mem::take(&mut self.listing);
        self.unreadable = None;
        self.stale = false;
        match &self.pinned {
            None => {
                logs.push(format!(
                    "tools/list: pinned {} tools",
                    listing.tools().count()
                ));
                self.changes = BTreeMap::new();
                for name in listing.duplicates() {
                    self.note(Change::Duplicate(name.to_owned()), logs);
                }
                self.pinned = Some(listing);
            }
            Some(pinned) => {
                // The full comparison replaces what the pages found: a tool changed back
                // is clean again, and removals can only be seen now.
                let changes = diff(pinned, &listing);
                self.changes = BTreeMap::new();
                for change in changes {
                    self.note(change, logs);
                }
            }
        }
    }

    fn note(&mut self, change: Change, logs: &mut Vec<String>) {
        if !self.changes.contains_key(change.tool()) {
            logs.push(format!("tools/list: {change}"));
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
    /// Server requests (sampling, elicitation, roots) waiting for the client, by id.
    server_requests: BTreeSet<IdKey>,
    pins: PinState,
}

/// What one message becomes.
enum Plan {
    Forward,
    Reply(Vec<u8>),
    Drop,
}

/// One batch element, decided.
enum Element<P> {
    Call(RequestId, P),
    Refused(RequestId, Refusal),
    Plain(RequestId, Kind<P>),
    Failed(RequestId, String),
    Cancel(Option<IdKey>, Option<String>),
    Notify,
    Answer(IdKey),
    Unusable(String),
}

impl<G: Gate> Relay<G> {
    /// A relay with no pins: the first complete listing of the session pins the tools.
    pub fn new(gate: G, config: RelayConfig) -> Self {
        Relay {
            gate,
            config,
            client_requests: BTreeMap::new(),
            server_requests: BTreeSet::new(),
            pins: PinState::default(),
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
        let mut logs = Vec::new();
        let plan = {
            let message = classify(&bytes);
            self.client_message(message, &mut logs)
        };
        finish_plan(plan, bytes, logs, Action::ToServer, Action::ToClient)
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
        let mut logs = Vec::new();
        let plan = {
            let message = classify(&bytes);
            self.server_message(&bytes, message, &mut logs)
        };
        finish_plan(plan, bytes, logs, Action::ToClient, Action::ToServer)
    }

    /// The server exited: every pending call ends as [`CallEnd::ServerExited`], and every
    /// request still waiting is answered with a JSON-RPC error.
    pub fn server_exited(&mut self) -> Vec<Action> {
        let mut actions = Vec::new();
        for (_, outstanding) in std::mem::take(&mut self.client_requests) {
            if let Kind::Call(pending) = outstanding.kind {
                self.gate.finish(pending, CallEnd::ServerExited);
            }
            let mut reply = error_reply(
                &outstanding.raw_id,
                SERVER_EXITED,
                "the MCP server exited before answering",
            );
            reply.push(b'\n');
            actions.push(Action::ToClient(reply));
        }
        self.server_requests.clear();
        actions.push(Action::Log("server exited".into()));
        actions
    }

    /// The relay stops: every pending call ends as [`CallEnd::Shutdown`]. Nothing is sent.
    pub fn shutdown(&mut self) -> Vec<Action> {
        let count = self.client_requests.len();
        for (_, outstanding) in std::mem::take(&mut self.client_requests) {
            if let Kind::Call(pending) = outstanding.kind {
                self.gate.finish(pending, CallEnd::Shutdown);
            }
        }
        self.server_requests.clear();
        if count == 0 {
            Vec::new()
        } else {
            vec![Action::Log(format!(
                "shut down with {count} requests unanswered"
            ))]
        }
    }

    fn client_message(&mut self, message: Message<'_>, logs: &mut Vec<String>) -> Plan {
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
            Message::Notification(notification) => match self.client_notification(&notification) {
                Ok(()) => Plan::Forward,
                Err(why) => {
                    logs.push(format!("client: dropped a notification: {why}"));
                    Plan::Drop
                }
            },
            Message::Response(response) => {
                if response.duplicate_keys {
                    logs.push("client: dropped a response with duplicate keys".into());
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
            Message::Batch(items) => self.client_batch(items, logs),
        }
    }

    fn client_notification(&mut self, notification: &Notification<'_>) -> Result<(), String> {
        if notification.duplicate_keys {
            return Err("duplicate keys".into());
        }
        match notification.method.as_str() {
            "tools/call" => Err("a tools/call without an id".into()),
            "notifications/cancelled" => {
                if let Some(key) = notification.cancelled_request() {
                    self.cancel(&key, notification.cancel_reason());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn cancel(&mut self, key: &IdKey, reason: Option<&str>) {
        if let Some(outstanding) = self.client_requests.remove(key)
            && let Kind::Call(pending) = outstanding.kind
        {
            self.gate.finish(pending, CallEnd::Cancelled { reason });
        }
    }

    /// Why a new request with this id cannot wait for an answer.
    fn id_problem(&self, id: &RequestId, batch_ids: &BTreeSet<IdKey>) -> Option<String> {
        if self.client_requests.contains_key(&id.key) || batch_ids.contains(&id.key) {
            Some(format!("request id {} is already pending", id.raw))
        } else if self.client_requests.len() + batch_ids.len() >= self.config.max_pending {
            Some(format!(
                "{} requests are already pending",
                self.config.max_pending
            ))
        } else {
            None
        }
    }

    fn client_request(&mut self, request: Request<'_>, logs: &mut Vec<String>) -> Plan {
        let id_problem = self.id_problem(&request.id, &BTreeSet::new());
        if request.method == "tools/call" {
            let decided = match id_problem {
                Some(why) => Err(self.refuse_here(&request, Refusal::new("relay", why))),
                None => self.decide_call(&request, false, logs),
            };
            return match decided {
                Ok(pending) => {
                    self.client_requests.insert(
                        request.id.key.clone(),
                        Outstanding {
                            raw_id: request.id.raw.clone(),
                            kind: Kind::Call(pending),
                        },
                    );
                    Plan::Forward
                }
                Err(refusal) => {
                    logs.push(refusal_log(&request.id, &refusal));
                    let mut reply = refusal_reply(&request.id.raw, &refusal);
                    reply.push(b'\n');
                    Plan::Reply(reply)
                }
            };
        }
        let problem = id_problem.or_else(|| {
            request
                .duplicate_keys
                .then(|| "the request has duplicate keys".to_owned())
        });
        if let Some(why) = problem {
            logs.push(format!(
                "client: answered {} with an error: {why}",
                request.id.raw
            ));
            let mut reply = error_reply(&request.id.raw, INVALID_REQUEST, &why);
            reply.push(b'\n');
            return Plan::Reply(reply);
        }
        let kind = plain_kind(&request);
        self.client_requests.insert(
            request.id.key,
            Outstanding {
                raw_id: request.id.raw,
                kind,
            },
        );
        Plan::Forward
    }

    /// The relay's own checks, then the gate. A refusal comes back recorded.
    fn decide_call(
        &mut self,
        request: &Request<'_>,
        in_batch: bool,
        logs: &mut Vec<String>,
    ) -> Result<G::Pending, Refusal> {
        if request.duplicate_keys {
            let why = "the frame has duplicate keys, so the server may read another call than the one decided";
            return Err(self.refuse_here(request, Refusal::new("relay", why)));
        }
        let name = match request.tool_name() {
            Ok(name) => name,
            Err(problem) => {
                return Err(self.refuse_here(request, Refusal::new("relay", problem.to_string())));
            }
        };
        match self.pins.check(name, self.config.pin_mode) {
            Err(why) => return Err(self.refuse_here(request, Refusal::new("pins", why))),
            Ok(Some(note)) => logs.push(format!("pins (record only): calling anyway: {note}")),
            Ok(None) => {}
        }
        self.gate.open(&ToolCall {
            frame: request.raw,
            id: &request.id.raw,
            name,
            arguments: request.arguments(),
            in_batch,
        })
    }

    fn refuse_here(&self, request: &Request<'_>, mut refusal: Refusal) -> Refusal {
        refusal.call_id = self.gate.refused(&RefusedCall {
            frame: request.raw,
            id: &request.id.raw,
            name: request.tool_name().ok(),
            refusal: &refusal,
        });
        refusal
    }

    fn client_batch(&mut self, items: Vec<Message<'_>>, logs: &mut Vec<String>) -> Plan {
        let mut batch_ids = BTreeSet::new();
        let mut elements = Vec::new();
        for item in items {
            let element = match item {
                Message::Request(request) => {
                    let id_problem = self.id_problem(&request.id, &batch_ids);
                    batch_ids.insert(request.id.key.clone());
                    if request.method == "tools/call" {
                        let decided = match id_problem {
                            Some(why) => {
                                Err(self.refuse_here(&request, Refusal::new("relay", why)))
                            }
                            None => self.decide_call(&request, true, logs),
                        };
                        match decided {
                            Ok(pending) => Element::Call(request.id, pending),
                            Err(refusal) => {
                                logs.push(refusal_log(&request.id, &refusal));
                                Element::Refused(request.id, refusal)
                            }
                        }
                    } else if let Some(why) = id_problem {
                        Element::Failed(request.id, why)
                    } else if request.duplicate_keys {
                        Element::Failed(request.id, "the request has duplicate keys".into())
                    } else {
                        let kind = plain_kind(&request);
                        Element::Plain(request.id, kind)
                    }
                }
                Message::Notification(n) if n.duplicate_keys => {
                    Element::Unusable("a notification with duplicate keys".into())
                }
                Message::Notification(n) if n.method == "tools/call" => {
                    Element::Unusable("a tools/call without an id".into())
                }
                Message::Notification(n) if n.method == "notifications/cancelled" => {
                    Element::Cancel(n.cancelled_request(), n.cancel_reason().map(str::to_owned))
                }
                Message::Notification(_) => Element::Notify,
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
            };
            elements.push(element);
        }
        let whole = elements.iter().all(|e| {
            !matches!(
                e,
                Element::Refused(..) | Element::Failed(..) | Element::Unusable(_)
            )
        });
        if whole {
            let mut cancels = Vec::new();
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
                    _ => {}
                }
            }
            for (key, reason) in cancels {
                self.cancel(&key, reason.as_deref());
            }
            return Plan::Forward;
        }
        // Refused whole: answer every request, forward nothing.
        let not_run = "not run: another message in its batch was refused";
        let mut answers: Vec<Vec<u8>> = Vec::new();
        for element in elements {
            match element {
                Element::Call(id, pending) => {
                    self.gate.finish(pending, CallEnd::NotSent);
                    answers.push(error_reply(&id.raw, NOT_FORWARDED, not_run));
                }
                Element::Refused(id, refusal) => answers.push(refusal_reply(&id.raw, &refusal)),
                Element::Plain(id, _) => answers.push(error_reply(&id.raw, NOT_FORWARDED, not_run)),
                Element::Failed(id, why) => {
                    answers.push(error_reply(&id.raw, INVALID_REQUEST, &why))
                }
                Element::Unusable(why) => logs.push(format!("client batch: {why}")),
                Element::Cancel(..) | Element::Notify | Element::Answer(_) => {}
            }
        }
        logs.push(format!(
            "client: refused a batch whole, {} requests answered, nothing forwarded",
            answers.len()
        ));
        if answers.is_empty() {
            return Plan::Drop;
        }
        let mut reply = b"[".to_vec();
        reply.extend(answers.join(&b","[..]));
        reply.extend_from_slice(b"]\n");
        Plan::Reply(reply)
    }

    fn server_message(
        &mut self,
        frame: &[u8],
        message: Message<'_>,
        logs: &mut Vec<String>,
    ) -> Plan {
        match message {
            // Not relayed: the stdio transport lets a server write only MCP messages, and
            // a line the relay cannot read unambiguously (ambiguous members, nesting past
            // its bound, a bare `\r`) may be read by the client as a listing or an answer
            // the relay never saw, slipping past the pins or the record.
            Message::NotJson => {
                logs.push("server: dropped a line that is not JSON".into());
                Plan::Drop
            }
            Message::Invalid(reason) => {
                logs.push(format!(
                    "server: dropped a line the relay cannot read: {reason}"
                ));
                Plan::Drop
            }
            Message::Batch(items) => {
                let mut any = false;
                for item in items {
                    any |= self.server_item(frame, item, logs);
                }
                if any { Plan::Forward } else { Plan::Drop }
            }
            item => {
                if self.server_item(frame, item, logs) {
                    Plan::Forward
                } else {
                    Plan::Drop
                }
            }
        }
    }

    /// Handles one message from the server; false when it must not reach the client.
    fn server_item(&mut self, frame: &[u8], message: Message<'_>, logs: &mut Vec<String>) -> bool {
        match message {
            Message::Response(response) => self.server_response(frame, &response, logs),
            Message::Request(request) => {
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
                    return false;
                }
                self.server_requests.insert(request.id.key);
                true
            }
            Message::Notification(notification) => {
                match notification.method.as_str() {
                    "notifications/tools/list_changed" => {
                        logs.push("server: tools changed; calls wait for a new listing".into());
                        self.pins.stale = true;
                    }
                    "notifications/cancelled" => {
                        if let Some(key) = notification.cancelled_request() {
                            self.server_requests.remove(&key);
                        }
                    }
                    _ => {}
                }
                true
            }
            Message::Invalid(_) | Message::NotJson | Message::Batch(_) => true,
        }
    }

    fn server_response(
        &mut self,
        frame: &[u8],
        response: &Response<'_>,
        logs: &mut Vec<String>,
    ) -> bool {
        let Some(outstanding) = self.client_requests.remove(&response.id.key) else {
            logs.push(format!(
                "server: dropped a response to {}, which no request is waiting for",
                response.id.raw
            ));
            return false;
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
            Kind::ToolsList { first_page } => self.pins.page(first_page, response.result(), logs),
            Kind::Other => {}
        }
        true
    }
}

impl<G: Gate> Drop for Relay<G> {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn plain_kind<P>(request: &Request<'_>) -> Kind<P> {
    if request.method == "tools/list" {
        Kind::ToolsList {
            first_page: !request.has_cursor(),
        }
    } else {
        Kind::Other
    }
}

fn finish_plan(
    plan: Plan,
    bytes: Vec<u8>,
    logs: Vec<String>,
    forward: fn(Vec<u8>) -> Action,
    back: fn(Vec<u8>) -> Action,
) -> Vec<Action> {
    let mut actions: Vec<Action> = logs.into_iter().map(Action::Log).collect();
    match plan {
        Plan::Forward => actions.push(forward(bytes)),
        Plan::Reply(reply) => actions.push(back(reply)),
        Plan::Drop => {}
    }
    actions
}

fn refusal_log(id: &RequestId, refusal: &Refusal) -> String {
    format!(
        "refused tools/call {} at {}: {}",
        id.raw,
        refusal.station,
        refusal.reason.escape_debug()
    )
}

/// The answer to a refused call: a `result` with `isError`, so the model reads the reason.
fn refusal_reply(raw_id: &str, refusal: &Refusal) -> Vec<u8> {
    let call_id = refusal.call_id.as_deref().unwrap_or("none recorded");
    let text = format!(
        "Aegis refused this tool call at the {} station: {} (call id: {call_id})",
        refusal.station, refusal.reason
    );
    let mut out =
        format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"result":{{"content":[{{"type":"text","text":"#);
    json::write_string(&text, &mut out);
    out.push_str(r#"}],"isError":true,"_meta":{"#);
    json::write_string(REFUSAL_META_KEY, &mut out);
    out.push_str(r#":{"call_id":"#);
    match &refusal.call_id {
        Some(id) => json::write_string(id, &mut out),
        None => out.push_str("null"),
    }
    out.push_str(r#","reason":"#);
    json::write_string(&refusal.reason, &mut out);
    out.push_str(r#","station":"#);
    json::write_string(&refusal.station, &mut out);
    out.push_str("}}}}");
    out.into_bytes()
}

fn error_reply(raw_id: &str, code: i64, message: &str) -> Vec<u8> {
    let mut out = format!(r#"{{"jsonrpc":"2.0","id":{raw_id},"error":{{"code":{code},"message":"#);
    json::write_string(message, &mut out);
    out.push_str("}}");
    out.into_bytes()
}
