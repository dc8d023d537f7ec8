//! The MCP server: `tools/list` from the manifest, `tools/call` through the host's
//! pipeline (policy, capability, sandbox, audit), on any rmcp transport.
//!
//! # Guarantees
//! - Every `tools/call` is on the record: one intent, one outcome. That includes calls
//!   the gateway refuses itself before the stations (arguments that do not match the
//!   input schema, the gateway at capacity): their outcome says the stations were not
//!   reached and why. A call of a tool the manifest does not declare goes through the
//!   stations, where the capability station refuses it, and is answered with a
//!   JSON-RPC error (MCP's answer for an unknown tool) naming the call id.
//! - A refusal, trap or ceiling is a result with `isError: true` whose text names the
//!   station (`policy`, `capability`, `sandbox`, or `gateway` before the stations) and
//!   the call id.
//! - No result for a call whose outcome could not be recorded: the client gets a
//!   JSON-RPC internal error instead, and [`GatewayServer::record_failed`] turns true.
//! - The request digest is the gateway's own ([`request_frame`]): SHA-256 of the
//!   RFC 8785 canonical JSON of `{"arguments": …, "name": …}`, the same whatever the
//!   transport's framing (`spec/SPEC.md` §3.2).
//! - A client's `notifications/cancelled` (or its session ending) cancels the call
//!   through the runtime's [`CancelToken`]: the guest is stopped and the outcome says
//!   `cancelled: …`.
//! - At most `capacity` calls run at once (the sandbox pool's size); one more is
//!   refused, recorded, and answered `isError` naming the gateway, never queued.
//! - With a desk ([`crate::Gateway::with_desk`]), a call the policy parks is filed in
//!   the approvals queue and its request held, with no sandbox slot, until the park
//!   is settled ([`Desk::settle`], on the blocking pool). Approved, it runs again as a
//!   new call under the approval (a slot taken again, so at capacity it is refused as
//!   any call is) and is answered with its result; denied or expired, with that
//!   refusal as a result (`isError`). Cancelled (the client's notification, its
//!   session's end, the gateway closing), the park is withdrawn: the host's decision
//!   is placed ([`Desk::call_off`]) and the settle thread, the one claimant, records
//!   it; nothing runs. [`GatewayServer::shut_down`] waits for waiting parks too.
//! - A parked call whose client gave a progress token hears a progress notification
//!   every [`KEEP_ALIVE`] while it waits, on rmcp's path and on the direct one (which
//!   then answers as an event stream, `crate::direct`).
//! - Asking clients ([`crate::Gateway::asking_clients`]), a filed park whose client
//!   declared form elicitation (before protocol 2026-07-28, which forbids a server's
//!   requests) is also put to the client's user: the `elicitation/create` `aegis wrap`
//!   sends ([`question`]), on the request's own stream. An answer that decides (accept
//!   with `approve`, decline, cancel) is placed with the desk as the client's decision
//!   ([`Desk::client_decided`], `via: client`); the park's one decision is whichever
//!   was placed first, a person's key or the expiry included, and the settle records
//!   it as for any park. A question still open when the call ends is withdrawn
//!   (`notifications/cancelled`). A client that cannot be asked, or whose answer
//!   decides nothing, leaves the park to the queue.
//! - Asking clients, a filed park whose request is on protocol 2026-07-28 or later and
//!   declares form elicitation in its own client capabilities
//!   (`_meta["io.modelcontextprotocol/clientCapabilities"]`) is answered at once with
//!   an `InputRequiredResult` (MCP multi round-trip requests): one input request, under
//!   [`INPUT_KEY`], the same question as an `elicitation/create`, and the approval id
//!   as `requestState`. The park's outcome is recorded as for any park; nobody waits on
//!   it (a call resumed in the background would have no request to answer). The
//!   client's retry (the same `tools/call` with `inputResponses` and the `requestState`
//!   echoed) must name a park this gateway answered so and still keeps, be the same tool
//!   with the same arguments (the same request frame), and carry the answer; otherwise
//!   it is refused before the stations (recorded, `approval_mismatch`), nothing runs and
//!   the park is left as it was. A retry that passes takes the park (a second one is
//!   refused), places the answer as the client's decision as above (not once the park
//!   expired: the host's expiry denial is then placed and recorded), and waits for
//!   the park to settle as any parked call does: a person's decision placed first wins,
//!   an answer that decides nothing leaves it to the queue, and, approved, the retry is
//!   answered with the result of the call run under the approval. The retry adds no
//!   intent of its own when it is settled: the park's, the decision and the resumed
//!   call are its record. At most [`MAX_INPUT_REQUIRED`] parks await their retry; past
//!   that a park waits for the queue, its request held, as before. Parks still awaiting
//!   their retry when the gateway closes are settled by the host and recorded: expired,
//!   or else withdrawn (a decision placed first is recorded as it is).
//!
//! # Non-guarantees
//! - A client's answer to the question says the client answered, not that a person
//!   read it: a client may accept on its own. The record says `via: client`, which
//!   `aegis verify --approver-key` does not take for a person's signature.
//! - The withdrawal of an open question reaches a stdio client, but over HTTP rmcp
//!   routes a cancellation by the id it names (the gateway's own request's, which is
//!   no stream's), so it goes on the session's standalone stream: a client with none
//!   open does not hear it. Its question just goes unanswered; an answer sent after
//!   the call ended decides nothing.
//! - The question is the one `aegis wrap` sends, but rmcp adds a `_meta.progressToken`
//!   of its own to every request it sends.
//! - A park answered `input_required` whose client never retries is decided by nobody
//!   while the gateway runs: it expires in the queue with no decision on the record
//!   until a late retry or the gateway's close settles it as expired (a person's
//!   decision placed there first is likewise recorded only then). Expired ones are
//!   forgotten, unrecorded, when [`MAX_INPUT_REQUIRED`] parks await a retry and another
//!   is answered so; a retry after that is refused as naming no park.
//! - The `requestState` is the approval id, not a secret: any client of the gateway
//!   that knows it may send the retry. It can only settle that park and run that exact
//!   call (same tool, same arguments), checked against the park.
//! - Keep-alives are best effort: a client's stream that does not take them falls
//!   behind and some are not sent (they carry no decision).
//! - A client that cancels just as a person approves may leave an approval on the
//!   record with no call under it (its request is gone, so nothing runs).
//! - A tool's stderr goes to the operator ([`Note::ToolStderr`]); when the tool failed,
//!   its last 2 KiB (escaped) also goes to the client after the refusal's words, marked
//!   as the tool's output (`aegis_record::refusal::Refusal::with_tool_stderr`): what a
//!   tool writes is untrusted either way, like its stdout.
//! - Output that is not UTF-8 is not served as text: the record says the tool
//!   succeeded, the client gets `isError` saying why it got no text. Likewise a tool
//!   declared `output = "content"` whose output is not valid content blocks (see
//!   [`crate::manifest`]). The response digest covers the output bytes the pipeline
//!   handed back, whatever they became.

use crate::manifest::{Delivery, OutputKind, ToolSpec};
use aegis_policy_arguments::unambiguous::canonical_of;
use aegis_record::ExecutionOutcome;
use aegis_record::approval::{ClientMechanism, question};
use aegis_record::json::Value;
use aegis_runtime::approvals::{Desk, Ticket as Filed};
use aegis_runtime::pipeline::{Approval, CallRecord, CallRequest};
use aegis_runtime::refusal::{Cause, META_KEY, Refusal, refusal_of};
use aegis_runtime::{AuditNotice, CancelToken, Pipeline, PipelineError};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::model::{
    CustomRequest, ElicitRequest, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RequestContext, RoleServer};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the server tells the operator (the CLI prints it on stderr, escaped).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Note<'a> {
    /// A line a tool wrote to its stderr.
    ToolStderr {
        /// The tool.
        tool: &'a str,
        /// The call.
        call_id: &'a str,
        /// The line, as the tool wrote it (not escaped).
        line: &'a str,
    },
    /// The record could not be written: the call got no result.
    RecordFailed(&'a str),
    /// Something about serving that the operator should know: the HTTP side at its
    /// connection cap, or failing to accept. Told once each time it starts.
    Serving(&'a str),
    /// The approvals queue failed a parked call: it could not be filed (its client
    /// was answered that it was not run), or withdrawn (the host settles it at its
    /// expiry).
    Approvals(&'a str),
}

/// Where [`Note`]s go.
pub type Notes = Arc<dyn Fn(Note<'_>) + Send + Sync>;

/// A manifest tool as served: its spec, its listing, its compiled schemas.
pub(crate) struct Served {
    pub(crate) spec: ToolSpec,
    pub(crate) listing: Tool,
    input: jsonschema::Validator,
    output: Option<jsonschema::Validator>,
}

impl Served {
    /// Compiles the schemas (already checked when the manifest was parsed).
    pub(crate) fn new(spec: ToolSpec) -> Result<Served, String> {
        let compile = |schema: &JsonObject| {
            jsonschema::validator_for(&serde_json::Value::Object(schema.clone()))
                .map_err(|e| e.to_string())
        };
        let input = compile(&spec.input_schema)?;
        let output = spec.output_schema.as_ref().map(compile).transpose()?;
        let mut listing = Tool::new(
            spec.id.clone(),
            spec.description.clone(),
            Arc::new(spec.input_schema.clone()),
        );
        listing.output_schema = spec.output_schema.clone().map(Arc::new);
        let a = &spec.annotations;
        if *a != crate::manifest::Annotations::default() {
            let mut hints = ToolAnnotations::new();
            hints.title = a.title.clone();
            hints.read_only_hint = a.read_only;
            hints.destructive_hint = a.destructive;
            hints.idempotent_hint = a.idempotent;
            hints.open_world_hint = a.open_world;
            listing.annotations = Some(hints);
            listing.title = a.title.clone();
        }
        Ok(Served {
            spec,
            listing,
            input,
            output,
        })
    }
}

/// Calls running now, parks waiting for a person, and the pipeline while the gateway
/// is open.
struct State {
    /// Taken out when the gateway closes: no call starts after that.
    pipeline: Option<Arc<Pipeline>>,
    running: HashMap<u64, CancelToken>,
    /// Parked calls waiting for a decision: they hold no sandbox slot (capacity counts
    /// `running` only), but the gateway still withdraws and awaits them when it closes.
    parked: HashMap<u64, CancelToken>,
}

struct Inner {
    tools: BTreeMap<String, Served>,
    listing: Vec<Tool>,
    capacity: usize,
    role: Option<String>,
    state: Mutex<State>,
    idle: Condvar,
    /// The audit sink syncs each line to its medium (see [`GatewayServer::spawn_call`]).
    sink_syncs: bool,
    next: AtomicU64,
    record_failed: AtomicBool,
    notes: Notes,
    /// Where parked calls are filed and settled; unset, a parked call is answered at
    /// once as not run.
    desk: OnceLock<Desk>,
    /// Ask the client's user about each parked call too, when the client can be asked
    /// (`--approve-via client`).
    ask_clients: AtomicBool,
    /// How often a parked call's client hears that it waits ([`KEEP_ALIVE`] but in
    /// tests; at least 100 ms).
    keep_alive: Duration,
    /// Parks answered `input_required` (MCP 2026-07-28), by approval id (the
    /// `requestState` their retry echoes): filed, waited on by nobody until the retry
    /// comes. At most [`MAX_INPUT_REQUIRED`]; an entry goes when its retry takes it, when
    /// it expires (swept as another is added), or when the gateway closes (withdrawn).
    input_required: Mutex<HashMap<String, Asked>>,
}

/// A park answered `input_required`, awaiting the client's retry.
struct Asked {
    ticket: Filed,
    /// The tool, and the request frame the retry must match.
    name: String,
    frame: Vec<u8>,
}

/// How many parks answered `input_required` await their retry at once; past it, a park
/// waits for the queue as before (its request held open).
pub const MAX_INPUT_REQUIRED: usize = 1024;

/// The key of the one input request (the approval question) in an `input_required`
/// answer, and of its answer in the retry's `inputResponses`.
pub use aegis_record::approval::question::INPUT_KEY;

/// The rmcp [`ServerHandler`](rmcp::ServerHandler) behind `aegis gateway`. Cheap to
/// clone (every HTTP session gets a clone); all clones serve the same calls.
#[derive(Clone)]
pub struct GatewayServer {
    inner: Arc<Inner>,
}

/// A call's place in [`State::running`] (a sandbox slot) or [`State::parked`];
/// dropping it frees the place.
struct Ticket {
    inner: Arc<Inner>,
    n: u64,
    parked: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.inner.lock();
        if self.parked {
            state.parked.remove(&self.n);
        } else {
            state.running.remove(&self.n);
        }
        self.inner.idle.notify_all();
    }
}

/// How often a parked call tells its client it is alive, when the client gave a
/// progress token (as `aegis wrap` does: `aegis_mcp::relay::DEFAULT_KEEP_ALIVE`).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What a parked call does every [`KEEP_ALIVE`] while it waits for a person. Called on
/// a thread of the blocking pool: it must not block.
pub(crate) type KeepAlive = Arc<dyn Fn(&str) + Send + Sync>;

/// A parked call, filed, to put to the client's user: sent by the call's task to the
/// request's handler, which asks (the request's own task, so rmcp sends the question on
/// the request's stream).
pub(crate) struct Ask {
    ticket: Filed,
    tool: String,
    /// The arguments as canonical JSON.
    arguments: String,
}

/// What a parked call's client hears while it waits: progress every [`KEEP_ALIVE`]
/// (`keep_alive`), and the question to its user (`ask`, taken when the park is filed;
/// or, on protocol 2026-07-28 and later, `input_required`, the request's revision: the
/// call is answered with the question instead of waiting).
#[derive(Default)]
pub(crate) struct Waiting {
    pub(crate) keep_alive: Option<KeepAlive>,
    pub(crate) ask: Option<tokio::sync::oneshot::Sender<Ask>>,
    pub(crate) input_required: Option<String>,
    /// The client as the record names it, should it answer a question in a retry.
    pub(crate) client: Option<String>,
}

/// The `n`th progress notification a call parked as `approval_id` sends its client
/// (the client's `progress_token`), on either path.
pub(crate) fn waiting_progress(
    progress_token: &ProgressToken,
    n: u64,
    approval_id: &str,
) -> ProgressNotificationParam {
    let mut param = ProgressNotificationParam::new(progress_token.clone(), n as f64);
    param.message = Some(format!(
        "waiting for approval {approval_id} (aegis approvals show {approval_id})"
    ));
    param
}

/// How [`GatewayServer::run`] ended.
enum Ran {
    /// Through the pipeline.
    Recorded(Box<CallRecord>),
    /// Refused by the gateway before the stations (recorded), answered with this.
    Refused(CallToolResult),
}

/// Why a call could not get a slot.
enum NoSlot {
    /// The gateway is closing or closed.
    Closed,
    /// Every slot is taken (the pipeline, to record the refusal).
    Full(Arc<Pipeline>),
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a cancelled call's outcome says stopped it.
pub(crate) const CANCELLED: &str =
    "the client cancelled the request (notifications/cancelled) or its session ended";

/// Why calls stop, and new ones are refused, once the gateway is stopping.
pub(crate) const SHUTTING_DOWN: &str = "the gateway is shutting down";

/// What a refused or failed call is answered with: the one refusal result `wrap` sends
/// too ([`Refusal::tool_result`]): the text a model reads, `isError`, and the facts in
/// `_meta`.
fn refused(refusal: &Refusal) -> CallToolResult {
    let mut content = vec![ContentBlock::text(refusal.text())];
    content.extend(refusal.tool_stderr_text().map(ContentBlock::text));
    let mut result = CallToolResult::error(content);
    let meta = Value::Object(refusal.meta()).to_canonical();
    // Canonical JSON of an object always reads back as one.
    if let Ok(facts) = serde_json::from_slice::<serde_json::Value>(&meta) {
        let mut object = serde_json::Map::new();
        object.insert(META_KEY.to_owned(), facts);
        result.meta = Some(rmcp::model::MetaObject(object));
    }
    result
}

/// Where an operator raises the ceiling `kind` that stopped a call: the tool's
/// `[tool.limits]` in the manifest, unless a policy rule's `limits` holds it lower.
fn raise_hint(kind: &str) -> String {
    let field = match kind {
        "memory" => "memory_bytes",
        "wall_time" => "wall_ms",
        "output" => "output_bytes",
        _ => return String::new(),
    };
    format!(
        " (the operator raises it with limits.{field} in the tool's manifest, unless a policy rule's limits hold it lower)"
    )
}

/// Output the gateway withholds after the call succeeded (it is not what the manifest
/// declares), placed on the record as `call_id`.
fn withheld(reason: String, call_id: &str) -> CallToolResult {
    refused(&Refusal::new(Cause::OutputWithheld, reason).recorded(call_id))
}

/// The frame the gateway's request digest is taken over: the RFC 8785 canonical JSON
/// of `{"arguments": <the call's arguments, {} when absent>, "name": <the tool>}`.
/// Stdio lines and HTTP bodies frame one call differently; this does not.
pub fn request_frame(name: &str, arguments: &JsonObject) -> Vec<u8> {
    frame_of(name, &canonical_of(arguments))
}

/// [`request_frame`] from the arguments' canonical JSON, already made for the policy
/// and the tool's input. RFC 8785 writes an object as its members in key order, each
/// key and value canonical, and `"arguments"` sorts before `"name"`.
fn frame_of(name: &str, canonical_arguments: &str) -> Vec<u8> {
    let name = serde_json_canonicalizer::to_string(&serde_json::Value::String(name.to_owned()))
        .unwrap_or_default();
    let mut frame = Vec::with_capacity(canonical_arguments.len() + name.len() + 24);
    frame.extend_from_slice(b"{\"arguments\":");
    frame.extend_from_slice(canonical_arguments.as_bytes());
    frame.extend_from_slice(b",\"name\":");
    frame.extend_from_slice(name.as_bytes());
    frame.push(b'}');
    frame
}

/// A manifest tool's call as [`GatewayServer::hold`] runs it again once approved.
struct Call<'a> {
    tool: &'a Served,
    name: &'a str,
    frame: &'a [u8],
    invocation: &'a Invocation,
    token: &'a CancelToken,
}

/// A `tools/call` echoing a `requestState`: the retry of a park answered
/// `input_required` ([`GatewayServer::retried`]).
struct Retry<'a> {
    name: &'a str,
    frame: &'a [u8],
    arguments: &'a serde_json::Value,
    /// The arguments as canonical JSON.
    canonical: String,
    state: &'a str,
    responses: Option<&'a InputResponses>,
}

/// What a tool is given: its input bytes and its arguments.
struct Invocation {
    input: Vec<u8>,
    args: Vec<String>,
    /// The arguments object as RFC 8785 canonical JSON, for the policy.
    arguments: String,
}

/// An argument's value as one argv element or input: strings as they are, numbers
/// and booleans as their JSON text; anything else is refused.
fn scalar(arguments: &serde_json::Value, name: &str) -> Result<String, String> {
    match arguments.get(name) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => Ok(v.to_string()),
        Some(_) => Err(format!(
            "argument {name:?} must be a string, a number or a boolean to be passed on argv or stdin"
        )),
        None => Err(format!("argument {name:?} is missing")),
    }
}

/// What the tool gets, from the arguments and their canonical JSON.
fn invocation(
    delivery: &Delivery,
    arguments: &serde_json::Value,
    canonical: String,
) -> Result<Invocation, String> {
    match delivery {
        Delivery::Json => Ok(Invocation {
            input: canonical.clone().into_bytes(),
            args: Vec::new(),
            arguments: canonical,
        }),
        Delivery::Argv { argv, stdin } => Ok(Invocation {
            arguments: canonical,
            args: argv
                .iter()
                .map(|n| scalar(arguments, n))
                .collect::<Result<_, _>>()?,
            input: match stdin {
                Some(n) => scalar(arguments, n)?.into_bytes(),
                None => Vec::new(),
            },
        }),
    }
}

impl GatewayServer {
    pub(crate) fn new(
        pipeline: Arc<Pipeline>,
        tools: Vec<Served>,
        capacity: usize,
        role: Option<String>,
        keep_alive: Duration,
        notes: Notes,
    ) -> GatewayServer {
        let listing = tools.iter().map(|t| t.listing.clone()).collect();
        let sink_syncs = !matches!(pipeline.notice(), AuditNotice::Volatile);
        GatewayServer {
            inner: Arc::new(Inner {
                tools: tools.into_iter().map(|t| (t.spec.id.clone(), t)).collect(),
                listing,
                capacity: capacity.max(1),
                role,
                state: Mutex::new(State {
                    pipeline: Some(pipeline),
                    running: HashMap::new(),
                    parked: HashMap::new(),
                }),
                idle: Condvar::new(),
                sink_syncs,
                next: AtomicU64::new(0),
                record_failed: AtomicBool::new(false),
                notes,
                desk: OnceLock::new(),
                ask_clients: AtomicBool::new(false),
                keep_alive: keep_alive.max(Duration::from_millis(100)),
                input_required: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The tools as listed.
    pub fn tools(&self) -> &[Tool] {
        &self.inner.listing
    }

    /// How many calls may run at once.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// True once an intent or outcome could not be written.
    pub fn record_failed(&self) -> bool {
        self.inner.record_failed.load(Ordering::SeqCst)
    }

    /// Files the calls a rule parks with `desk` and holds each until a person decides
    /// it (see [`crate::Gateway::with_desk`]). Set once: a second desk is ignored.
    pub(crate) fn set_desk(&self, desk: Desk) {
        let _ = self.inner.desk.set(desk);
    }

    /// Asks the client's user about each parked call too, through MCP elicitation,
    /// when the client declared form elicitation (see [`crate::Gateway::asking_clients`]).
    pub(crate) fn set_ask_clients(&self) {
        self.inner.ask_clients.store(true, Ordering::SeqCst);
    }

    /// Whether parked calls are put to the client's user too (and a desk files them).
    pub fn asks_clients(&self) -> bool {
        self.inner.ask_clients.load(Ordering::SeqCst) && self.inner.desk.get().is_some()
    }

    /// Stops taking calls, cancels every running one with `why`, and waits until each
    /// has finished (its outcome written). Afterwards the server holds no share of the
    /// pipeline, so the host's record can close.
    pub fn shut_down(&self, why: &str) {
        let mut state = self.inner.lock();
        let pipeline = state.pipeline.take();
        for token in state.running.values().chain(state.parked.values()) {
            token.cancel(why);
        }
        while !state.running.is_empty() || !state.parked.is_empty() {
            state = self
                .inner
                .idle
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(state);
        // Parks answered `input_required` whose retry never came: nobody waits on them,
        // so the host settles each here and records it: expired, or withdrawn (a
        // decision placed first, a person's, is recorded as it is); nothing runs.
        let asked: Vec<Asked> = self.asked().drain().map(|(_, a)| a).collect();
        if let (Some(pipeline), Some(desk)) = (pipeline, self.inner.desk.get()) {
            for a in asked {
                // Expired ones are settled as expired (a failure leaves one undecided
                // in the queue, as the non-guarantees say).
                desk.withdraw(&pipeline, &a.ticket, why);
            }
        }
    }

    fn asked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Asked>> {
        self.inner
            .input_required
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn enter(&self, token: &CancelToken) -> Result<(Ticket, Arc<Pipeline>), NoSlot> {
        let mut state = self.inner.lock();
        let Some(pipeline) = state.pipeline.clone() else {
            return Err(NoSlot::Closed);
        };
        if state.running.len() >= self.inner.capacity {
            return Err(NoSlot::Full(pipeline));
        }
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        state.running.insert(n, token.clone());
        let ticket = Ticket {
            inner: Arc::clone(&self.inner),
            n,
            parked: false,
        };
        Ok((ticket, pipeline))
    }

    /// A place among the parked calls (no sandbox slot); `None` once the gateway is
    /// closing.
    fn park(&self, token: &CancelToken) -> Option<(Ticket, Arc<Pipeline>)> {
        let mut state = self.inner.lock();
        let pipeline = state.pipeline.clone()?;
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        state.parked.insert(n, token.clone());
        let ticket = Ticket {
            inner: Arc::clone(&self.inner),
            n,
            parked: true,
        };
        Some((ticket, pipeline))
    }

    /// Where the server's notes go.
    pub(crate) fn notes(&self) -> Notes {
        Arc::clone(&self.inner.notes)
    }

    fn pipeline(&self) -> Option<Arc<Pipeline>> {
        self.inner.lock().pipeline.clone()
    }

    fn failed(&self, e: &PipelineError) -> McpError {
        self.inner.record_failed.store(true, Ordering::SeqCst);
        let said = e.to_string();
        (self.inner.notes)(Note::RecordFailed(&said));
        McpError::internal_error(
            format!("the call's record could not be written, so no result is given: {said}"),
            None,
        )
    }

    /// Records a call the gateway refuses before the stations, as every such call is
    /// ([`Pipeline::refuse_before_stations`]), and answers it.
    fn refuse(
        &self,
        pipeline: &Pipeline,
        name: &str,
        frame: &[u8],
        refusal: Refusal,
    ) -> Result<CallToolResult, McpError> {
        let request = CallRequest {
            frame: Some(frame),
            role: self.inner.role.as_deref(),
            ..CallRequest::new(name, b"")
        };
        match pipeline.refuse_before_stations(&request, &refusal) {
            Ok(record) => Ok(refused(&refusal.recorded(record.outcome.call_id))),
            Err(e) => Err(self.failed(&e)),
        }
    }

    /// One `tools/call`, through the pipeline, in a task that owns it: it runs to its
    /// outcome even if this future is dropped. On a volatile sink the tool runs in
    /// that task; on a sink that syncs, on tokio's blocking pool. `ct` is the
    /// request's cancellation (rmcp, or the HTTP side's direct path, cancels it on
    /// `notifications/cancelled` and when the session ends).
    ///
    /// # Errors
    /// A JSON-RPC error: an unknown tool, the gateway closed, or a record write failed.
    pub async fn call(
        &self,
        params: CallToolRequestParams,
        ct: CancellationToken,
    ) -> Result<CallToolResult, McpError> {
        // Nothing here answers `input_required` (that is asked for in `Waiting`).
        match self.call_waiting(params, ct, Waiting::default()).await? {
            CallToolResponse::Complete(result) => Ok(result),
            _ => Err(McpError::internal_error(
                "the gateway answered a call with no result",
                None,
            )),
        }
    }

    /// [`GatewayServer::call`], telling the client while a parked call waits for a
    /// person ([`Waiting`]).
    async fn call_waiting(
        &self,
        params: CallToolRequestParams,
        ct: CancellationToken,
        waiting: Waiting,
    ) -> Result<CallToolResponse, McpError> {
        let token = CancelToken::new();
        let mut job = self.spawn_call(params, token.clone(), (), waiting);
        let joined = tokio::select! {
            joined = &mut job => joined,
            () = ct.cancelled() => {
                token.cancel(CANCELLED);
                job.await
            }
        };
        joined.map_err(|e| McpError::internal_error(format!("the gateway failed: {e}"), None))?
    }

    /// Starts one `tools/call` in a task of its own, so it runs to its outcome whether
    /// or not its handle is awaited (a client that leaves mid-call still leaves a
    /// recorded call); `token` stops the tool, and `guard` is dropped once the call has
    /// ended (a parked call ends when its park is settled and, approved, it has run).
    /// On a volatile sink the task is an async one and the tool runs in it
    /// ([`Pipeline::call_async`]): no thread hand-off. On a sink that syncs, the call
    /// goes to the blocking pool, where waiting for the disk holds no worker.
    pub(crate) fn spawn_call<G: Send + 'static>(
        &self,
        params: CallToolRequestParams,
        token: CancelToken,
        guard: G,
        waiting: Waiting,
    ) -> tokio::task::JoinHandle<Result<CallToolResponse, McpError>> {
        let server = self.clone();
        if self.inner.sink_syncs {
            let handle = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                let answered = handle.block_on(server.answer(params, &token, waiting));
                drop(guard);
                answered
            })
        } else {
            tokio::spawn(async move {
                let answered = server.answer(params, &token, waiting).await;
                drop(guard);
                answered
            })
        }
    }

    /// One `tools/call`, through the pipeline, driven by the task awaiting it;
    /// `token` stops the tool. A call echoing a `requestState` is the retry of a park
    /// answered `input_required` ([`GatewayServer::retried`]).
    async fn answer(
        &self,
        params: CallToolRequestParams,
        token: &CancelToken,
        waiting: Waiting,
    ) -> Result<CallToolResponse, McpError> {
        let name = params.name.to_string();
        let map = params.arguments.unwrap_or_default();
        // One canonical form serves the digest's frame, the policy and the tool's input:
        // the host's one (the body was refused before here if it read two ways).
        let canonical = canonical_of(&map);
        let frame = frame_of(&name, &canonical);
        let arguments = serde_json::Value::Object(map);
        if let Some(state) = params.request_state {
            let retry = Retry {
                name: &name,
                frame: &frame,
                arguments: &arguments,
                canonical,
                state: &state,
                responses: params.input_responses.as_ref(),
            };
            return self
                .retried(retry, token, waiting)
                .await
                .map(CallToolResponse::Complete);
        }
        let closed = || McpError::internal_error(SHUTTING_DOWN, None);
        let Some(tool) = self.inner.tools.get(&name) else {
            // Through the stations all the same: the capability station refuses a tool
            // it has no manifest for, and that refusal is on the record.
            let nothing = Invocation {
                input: Vec::new(),
                args: Vec::new(),
                arguments: canonical,
            };
            let record = match self.run(&name, &frame, &nothing, token, None).await? {
                Ran::Recorded(record) => record,
                Ran::Refused(result) => return Ok(result.into()),
            };
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool {name:?}: {} (call {})",
                    refusal_of(&record).reason,
                    record.outcome.call_id
                ),
                None,
            ));
        };
        let mismatch: Vec<String> = tool
            .input
            .iter_errors(&arguments)
            .take(3)
            .map(|e| format!("{} at {:?}", e, e.instance_path().to_string()))
            .collect();
        if !mismatch.is_empty() {
            let pipeline = self.pipeline().ok_or_else(closed)?;
            let reason = format!(
                "the arguments do not match the tool's input schema: {}",
                mismatch.join("; ")
            );
            return self
                .refuse(
                    &pipeline,
                    &name,
                    &frame,
                    Refusal::new(Cause::InvalidArguments, reason),
                )
                .map(Into::into);
        }
        let invocation = match invocation(&tool.spec.delivery, &arguments, canonical) {
            Ok(i) => i,
            Err(reason) => {
                let pipeline = self.pipeline().ok_or_else(closed)?;
                return self
                    .refuse(
                        &pipeline,
                        &name,
                        &frame,
                        Refusal::new(Cause::InvalidArguments, reason),
                    )
                    .map(Into::into);
            }
        };
        let record = match self.run(&name, &frame, &invocation, token, None).await? {
            Ran::Recorded(record) => record,
            Ran::Refused(result) => return Ok(result.into()),
        };
        if record.park().is_some()
            && let Some(desk) = self.inner.desk.get()
        {
            let call = Call {
                tool,
                name: &name,
                frame: &frame,
                invocation: &invocation,
                token,
            };
            return self.hold(&call, desk, &record, waiting).await;
        }
        Ok(self.result(tool, &record).into())
    }

    /// A call the policy parked: filed with the desk and held, with no sandbox slot,
    /// until its park is settled; then, approved, run again as a new call under the
    /// approval (a slot taken again) and answered with its result, or answered with
    /// the refusal the desk settled on. The call's cancellation withdraws the park.
    /// A call whose request may be answered `input_required` is answered with the
    /// question once filed, and held by nobody ([`GatewayServer::input_required`]).
    async fn hold(
        &self,
        call: &Call<'_>,
        desk: &Desk,
        record: &CallRecord,
        waiting: Waiting,
    ) -> Result<CallToolResponse, McpError> {
        // Closing: nothing is filed; the park's own refusal (not run) answers.
        let Some((place, pipeline)) = self.park(call.token) else {
            return Ok(refused(&refusal_of(record)).into());
        };
        let filed = {
            let desk = desk.clone();
            let pipeline = Arc::clone(&pipeline);
            let record = record.clone();
            let arguments = call.invocation.arguments.clone();
            // The queue writes and syncs files: not on an async worker.
            tokio::task::spawn_blocking(move || desk.file(&pipeline, &record, Some(&arguments)))
                .await
        };
        let ticket = match filed {
            Ok(Ok(ticket)) => ticket,
            Ok(Err(e)) => return Ok(self.not_filed(record, &e).into()),
            Err(e) => return Ok(self.not_filed(record, &e).into()),
        };
        if let Some(protocol) = &waiting.input_required
            && let Some(asked) = self.input_required(call, &ticket, protocol)
        {
            // Nobody waits: the retry settles it, or the gateway's close withdraws it.
            drop(pipeline);
            drop(place);
            return Ok(asked.into());
        }
        // Filed: the client's user may be asked now (the handler asks; first decider wins).
        if let Some(ask) = waiting.ask {
            let _ = ask.send(Ask {
                ticket: ticket.clone(),
                tool: call.name.to_owned(),
                arguments: call.invocation.arguments.clone(),
            });
        }
        self.settle_and_resume(call, desk, ticket, (place, pipeline), waiting.keep_alive)
            .await
            .map(Into::into)
    }

    /// Waits for `ticket`'s park to be settled, holding `place` (and a share of the
    /// pipeline); approved, runs `call` again under the approval and answers with its
    /// result, else with the refusal the desk settled on. The call's cancellation
    /// withdraws the park.
    async fn settle_and_resume(
        &self,
        call: &Call<'_>,
        desk: &Desk,
        ticket: Filed,
        (place, pipeline): (Ticket, Arc<Pipeline>),
        keep_alive: Option<KeepAlive>,
    ) -> Result<CallToolResult, McpError> {
        let settling = {
            let desk = desk.clone();
            let pipeline = Arc::clone(&pipeline);
            let ticket = ticket.clone();
            let id = ticket.approval_id.clone();
            let every = self.inner.keep_alive;
            tokio::task::spawn_blocking(move || {
                let mut alive = || {
                    if let Some(k) = &keep_alive {
                        k(&id);
                    }
                };
                desk.settle(&pipeline, &ticket, every, &mut alive)
            })
        };
        tokio::pin!(settling);
        let settled = tokio::select! {
            settled = &mut settling => settled,
            why = call.token.cancelled() => {
                // The settle thread owns the claim: placing the withdrawal wakes it, and
                // it records whichever decision stands. Its answer goes nowhere.
                let calling_off = {
                    let desk = desk.clone();
                    let ticket = ticket.clone();
                    let why = why.clone();
                    tokio::task::spawn_blocking(move || desk.call_off(&ticket, &why)).await
                };
                let withdrawn = || {
                    Refusal::new(
                        Cause::ApprovalDenied,
                        format!(
                            "parked for approval {}, and withdrawn: {why}; not run",
                            ticket.approval_id
                        ),
                    )
                };
                let failed = match calling_off {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(e) = failed {
                    (self.inner.notes)(Note::Approvals(&format!(
                        "park {} could not be withdrawn ({e}); the host settles it at its expiry",
                        ticket.approval_id
                    )));
                }
                // Awaited either way: the settle thread records the park's one decision
                // and holds a share of the pipeline until it has.
                let refusal = match settling.await {
                    // What the record says: the host's withdrawal, or a denial placed
                    // first, or the expiry.
                    Ok(Err(refusal)) => refusal,
                    // An approval that came first is not acted on: the request is gone.
                    _ => withdrawn(),
                };
                drop(pipeline);
                drop(place);
                return Ok(refused(&refusal));
            }
        };
        // The pipeline share goes before the place, as in `run`.
        drop(pipeline);
        drop(place);
        let approval = match settled {
            Ok(Ok(approval)) => approval,
            Ok(Err(refusal)) => return Ok(refused(&refusal)),
            Err(e) => {
                let refusal = Refusal::new(
                    Cause::PendingApproval,
                    format!(
                        "parked for approval {}, and waiting for its decision failed: {e}; not run",
                        ticket.approval_id
                    ),
                );
                return Ok(refused(&refusal));
            }
        };
        let resumed = self
            .run(
                call.name,
                call.frame,
                call.invocation,
                call.token,
                Some(&approval),
            )
            .await?;
        match resumed {
            Ran::Recorded(record) => Ok(self.result(call.tool, &record)),
            Ran::Refused(result) => Ok(result),
        }
    }

    /// The `input_required` answer to `call`, filed as `ticket`: one input request, the
    /// approval question (the `elicitation/create` `aegis wrap` sends, for revision
    /// `protocol`), under [`INPUT_KEY`], and the approval id as `requestState`. The park
    /// is kept for the retry ([`Asked`]). `None` (the park then waits for the queue, as
    /// before) when [`MAX_INPUT_REQUIRED`] parks await their retry already, or the
    /// question could not be made.
    fn input_required(
        &self,
        call: &Call<'_>,
        ticket: &Filed,
        protocol: &str,
    ) -> Option<InputRequiredResult> {
        let id = ticket.approval_id.clone();
        let note = |what: String| (self.inner.notes)(Note::Approvals(&what));
        let params = question::elicitation_params(
            &id,
            call.name,
            &call.invocation.arguments,
            Some(protocol),
        );
        let request = serde_json::from_slice::<serde_json::Value>(&params)
            .and_then(|params| {
                serde_json::from_value::<ElicitRequest>(serde_json::json!({
                    "method": "elicitation/create",
                    "params": params,
                }))
            })
            .map_err(|e| {
                note(format!(
                    "the client could not be asked about {id} ({e}); it waits for the approvals queue"
                ));
            })
            .ok()?;
        {
            let mut asked = self.asked();
            if asked.len() >= MAX_INPUT_REQUIRED {
                // Full: expired parks make room (their retry would only be told they
                // expired; now it is told it names no park).
                asked.retain(|_, a| !a.ticket.expired());
            }
            if asked.len() >= MAX_INPUT_REQUIRED {
                drop(asked);
                note(format!(
                    "{MAX_INPUT_REQUIRED} parked calls await their client's retry already; {id} waits for the approvals queue"
                ));
                return None;
            }
            asked.insert(
                id.clone(),
                Asked {
                    ticket: ticket.clone(),
                    name: call.name.to_owned(),
                    frame: call.frame.to_vec(),
                },
            );
        }
        let mut requests = InputRequests::new();
        requests.insert(INPUT_KEY.to_owned(), InputRequest::Elicitation(request));
        Some(InputRequiredResult::new(Some(requests), Some(id)))
    }

    /// The retry of a park answered `input_required`: `retry.state` must name a park
    /// this gateway asked about and awaits, `retry` be the same tool with the same
    /// arguments (the same request frame), and its `inputResponses` hold the answer
    /// under [`INPUT_KEY`]; otherwise it is refused (recorded, `approval_mismatch`) and
    /// nothing runs, the park left as it was. The answer, read as `aegis wrap` reads
    /// one ([`question::answer`]), is placed with the desk as the client's decision
    /// (unless the park expired: the host's expiry stands); one that decides nothing
    /// leaves the park to the queue, this request held until it is settled. The park is
    /// then settled as any (a person's decision placed first wins) and, approved, the
    /// call runs under the approval.
    async fn retried(
        &self,
        retry: Retry<'_>,
        token: &CancelToken,
        waiting: Waiting,
    ) -> Result<CallToolResult, McpError> {
        let closed = || McpError::internal_error(SHUTTING_DOWN, None);
        let state = retry.state;
        let refuse = |why: &str| -> Result<CallToolResult, McpError> {
            let pipeline = self.pipeline().ok_or_else(closed)?;
            let reason = format!(
                "a retry echoing requestState {:?} {why}; not run",
                question::bounded(&aegis_record::text::escape(state), 200)
            );
            self.refuse(
                &pipeline,
                retry.name,
                retry.frame,
                Refusal::new(Cause::ApprovalMismatch, reason),
            )
        };
        let Some(desk) = self.inner.desk.get() else {
            return refuse("names no park this gateway asked about");
        };
        let known = {
            let asked = self.asked();
            match asked.get(state) {
                None => Err(
                    "names no park this gateway asked about (unknown, already settled, or expired)",
                ),
                Some(a) if a.name != retry.name || a.frame != retry.frame => {
                    Err("is not the call that was parked: another tool, or other arguments")
                }
                Some(_) => Ok(()),
            }
        };
        if let Err(why) = known {
            return refuse(why);
        }
        let Some(answer) = retry.responses.and_then(|r| r.get(INPUT_KEY)) else {
            return refuse(&format!(
                "carries no answer to the question (inputResponses.{INPUT_KEY})"
            ));
        };
        // The same frame as the park's: a manifest tool whose arguments passed before.
        let Some(tool) = self.inner.tools.get(retry.name) else {
            return refuse("names no tool this gateway serves");
        };
        let invocation = match invocation(&tool.spec.delivery, retry.arguments, retry.canonical) {
            Ok(i) => i,
            Err(why) => return refuse(&why),
        };
        let Some((place, pipeline)) = self.park(token) else {
            return Err(closed());
        };
        // Taken now: a second retry of the same park is refused.
        let Some(asked) = self.asked().remove(state) else {
            return refuse(
                "names no park this gateway asked about (unknown, already settled, or expired)",
            );
        };
        let ticket = asked.ticket;
        let id = ticket.approval_id.clone();
        let note = |what: String| (self.inner.notes)(Note::Approvals(&what));
        match elicited(answer) {
            // Past its expiry nothing is placed: the settle places the host's denial.
            Some(approved) => {
                let client = waiting
                    .client
                    .clone()
                    .unwrap_or_else(|| question::client_name("unnamed client", None));
                let asked = ClientMechanism::InputRequired;
                place_client_answer(desk, &ticket, (approved, asked), client, note).await;
            }
            None => note(format!(
                "the client's answer about {id} decides nothing (no yes or no); it waits for the approvals queue"
            )),
        }
        let call = Call {
            tool,
            name: retry.name,
            frame: retry.frame,
            invocation: &invocation,
            token,
        };
        self.settle_and_resume(&call, desk, ticket, (place, pipeline), waiting.keep_alive)
            .await
    }

    /// The answer to a park that could not be filed: its own refusal, saying so; the
    /// operator is told too.
    fn not_filed(&self, record: &CallRecord, e: &dyn std::fmt::Display) -> CallToolResult {
        (self.inner.notes)(Note::Approvals(&format!(
            "a parked call ({}) could not be filed in the approvals queue: {e}",
            record.outcome.call_id
        )));
        let refusal = refusal_of(record);
        refused(&Refusal {
            reason: format!(
                "{}; it could not be filed in the approvals queue ({e})",
                refusal.reason
            ),
            ..refusal
        })
    }

    /// Runs a call through the pipeline (under `approval` when it resumes a park); a
    /// call over capacity is refused and recorded instead.
    async fn run(
        &self,
        name: &str,
        frame: &[u8],
        invocation: &Invocation,
        token: &CancelToken,
        approval: Option<&Approval>,
    ) -> Result<Ran, McpError> {
        let (ticket, pipeline) = match self.enter(token) {
            Ok(entered) => entered,
            Err(NoSlot::Closed) => {
                return Err(McpError::internal_error(SHUTTING_DOWN, None));
            }
            Err(NoSlot::Full(pipeline)) => {
                let reason = format!(
                    "at capacity: {} calls are running, as many as the sandbox pool holds; \
                     try again when one ends",
                    self.inner.capacity
                );
                let refusal = Refusal::new(Cause::AtCapacity, reason);
                return Ok(Ran::Refused(self.refuse(&pipeline, name, frame, refusal)?));
            }
        };
        let args: Vec<&str> = invocation.args.iter().map(String::as_str).collect();
        let request = CallRequest {
            frame: Some(frame),
            args: &args,
            role: self.inner.role.as_deref(),
            arguments: Some(&invocation.arguments),
            cancel: Some(token),
            approval,
            ..CallRequest::new(name, &invocation.input)
        };
        let result = pipeline.call_async(&request).await;
        // The pipeline share goes before the slot: once every slot is free, the host's
        // share is the only one left and the record can close.
        drop(pipeline);
        drop(ticket);
        let record = result.map_err(|e| self.failed(&e))?;
        for line in String::from_utf8_lossy(&record.stderr).lines() {
            (self.inner.notes)(Note::ToolStderr {
                tool: &record.outcome.tool_id,
                call_id: &record.outcome.call_id,
                line,
            });
        }
        Ok(Ran::Recorded(Box::new(record)))
    }

    /// The MCP result for a recorded call of a manifest tool.
    fn result(&self, tool: &Served, record: &CallRecord) -> CallToolResult {
        let call_id = &record.outcome.call_id;
        let Some(output) = &record.output else {
            // A tool that failed usually said why on stderr: its tail goes with the
            // refusal, as the tool's words.
            let mut refusal = refusal_of(record).with_tool_stderr(&record.stderr);
            if let ExecutionOutcome::ResourceExceeded { kind } = &record.outcome.execution {
                refusal.reason.push_str(&raise_hint(kind));
            }
            return refused(&refusal);
        };
        if tool.spec.output == OutputKind::Content {
            return match crate::content::blocks(output) {
                Ok(blocks) => CallToolResult::success(blocks),
                Err(why) => withheld(
                    format!("the tool succeeded but its output is not MCP content blocks: {why}"),
                    call_id,
                ),
            };
        }
        let Ok(text) = std::str::from_utf8(output) else {
            return withheld(
                format!(
                    "the tool succeeded but its output ({} bytes) is not UTF-8 text, which this gateway does not serve",
                    output.len()
                ),
                call_id,
            );
        };
        let Some(schema) = &tool.output else {
            return CallToolResult::success(vec![ContentBlock::text(text)]);
        };
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return withheld(
                    format!("the tool's output is not the JSON its output schema declares: {e}"),
                    call_id,
                );
            }
        };
        if let Some(e) = schema.iter_errors(&value).next() {
            return withheld(
                format!("the tool's output does not match its output schema: {e}"),
                call_id,
            );
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(value);
        result
    }
}

impl rmcp::ServerHandler for GatewayServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("aegis-gateway", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Sandboxed WebAssembly tools. Every tools/call runs through Aegis's policy, \
             capability, sandbox and audit stations; a refusal is a result with isError \
             naming the station and the call id."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.listing.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.get(name).map(|t| t.listing.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // A client that gave a progress token hears that a parked call is alive.
        let keep_alive = context.meta.get_progress_token().map(|progress_token| {
            let peer = context.peer.clone();
            let handle = tokio::runtime::Handle::current();
            let sent = Arc::new(AtomicU64::new(0));
            let keep_alive: KeepAlive = Arc::new(move |approval_id: &str| {
                let n = sent.fetch_add(1, Ordering::Relaxed) + 1;
                let param = waiting_progress(&progress_token, n, approval_id);
                let peer = peer.clone();
                // Called on the settle thread: the send is the runtime's to do.
                handle.spawn(async move {
                    let _ = peer.notify_progress(param).await;
                });
            });
            keep_alive
        });
        let client = context.client_info().map(|info| {
            let version = Some(info.version.as_str()).filter(|v| !v.is_empty());
            question::client_name(&info.name, version)
        });
        let Some(asked_client) = self.client_to_ask(&context.peer) else {
            let waiting = Waiting {
                keep_alive,
                ask: None,
                input_required: self.input_required_revision(&context),
                client,
            };
            return self.call_waiting(request, context.ct, waiting).await;
        };
        let (ask, asked) = tokio::sync::oneshot::channel();
        let waiting = Waiting {
            keep_alive,
            ask: Some(ask),
            input_required: None,
            client,
        };
        let call = self.call_waiting(request, context.ct, waiting);
        self.asking(call, asked, &context.peer, asked_client).await
    }
}

impl GatewayServer {
    /// The client's name for the record, when its parked calls are to be put to its
    /// user: asking is on (`--approve-via client`, with a desk), and the client declared
    /// form elicitation in its `initialize` (an empty `elicitation` object, or one
    /// naming `form`) on a revision that allows the server to ask (before 2026-07-28).
    fn client_to_ask(&self, peer: &Peer<RoleServer>) -> Option<String> {
        if !self.asks_clients() {
            return None;
        }
        let info = peer.peer_info()?;
        let elicitation = info.capabilities.elicitation.as_ref()?;
        let form = elicitation.form.is_some() || elicitation.url.is_none();
        if !form || info.protocol_version.as_str() >= question::INPUT_REQUIRED_FROM {
            return None;
        }
        let version = Some(info.client_info.version.as_str()).filter(|v| !v.is_empty());
        Some(question::client_name(&info.client_info.name, version))
    }

    /// The request's protocol revision, when a call of it the policy parks is to be
    /// answered `input_required` with the question to the client's user: asking is on
    /// (`--approve-via client`, with a desk), the revision is 2026-07-28 or later, and
    /// the request's client capabilities (its `_meta`) declare form elicitation (an
    /// empty `elicitation` object, or one naming `form`).
    fn input_required_revision(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        if !self.asks_clients() {
            return None;
        }
        let protocol = context.protocol_version()?;
        if protocol.as_str() < question::INPUT_REQUIRED_FROM {
            return None;
        }
        let capabilities = context.client_capabilities()?;
        let elicitation = capabilities.elicitation.as_ref()?;
        let form = elicitation.form.is_some() || elicitation.url.is_none();
        form.then(|| protocol.as_str().to_owned())
    }

    /// Drives `call` and, once its park is filed (`asked`), asks the client's user about
    /// it on `peer` ([`question`], the one `aegis wrap` asks). The answer is placed with
    /// the desk as the client's decision ([`Desk::client_decided`]), which a decision
    /// placed first (a person's, the expiry) precedes. A question still open when the
    /// call ends is withdrawn (`notifications/cancelled`). Awaited in the request's own
    /// task: rmcp sends a request made there on the request's stream.
    async fn asking<F>(
        &self,
        call: F,
        asked: tokio::sync::oneshot::Receiver<Ask>,
        peer: &Peer<RoleServer>,
        client: String,
    ) -> Result<CallToolResponse, McpError>
    where
        F: std::future::Future<Output = Result<CallToolResponse, McpError>>,
    {
        tokio::pin!(call);
        let ask = tokio::select! {
            answered = &mut call => return answered,
            ask = asked => match ask {
                Ok(ask) => ask,
                // Not filed (not parked, or the queue failed): nothing to ask.
                Err(_) => return call.await,
            },
        };
        let id = ask.ticket.approval_id.clone();
        let note = |what: String| (self.inner.notes)(Note::Approvals(&what));
        let protocol = peer
            .peer_info()
            .map(|info| info.protocol_version.as_str().to_owned());
        let params =
            question::elicitation_params(&id, &ask.tool, &ask.arguments, protocol.as_deref());
        let params = match serde_json::from_slice::<serde_json::Value>(&params) {
            Ok(params) => params,
            Err(e) => {
                note(format!(
                    "the client could not be asked about {id} ({e}); it waits for the approvals queue"
                ));
                return call.await;
            }
        };
        let request =
            ServerRequest::CustomRequest(CustomRequest::new("elicitation/create", Some(params)));
        let mut handle = match peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                note(format!(
                    "the client could not be asked about {id} ({e}); it waits for the approvals queue"
                ));
                return call.await;
            }
        };
        let answer = tokio::select! {
            answered = &mut call => Err(answered),
            answer = &mut handle.rx => Ok(answer),
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(answered) => {
                // Settled otherwise (or the call ended): the question is withdrawn.
                let _ = handle
                    .cancel(Some(format!("{id} was settled otherwise")))
                    .await;
                return answered;
            }
        };
        let approved = match answer {
            Ok(Ok(result)) => serde_json::to_value(&result)
                .ok()
                .and_then(|result| elicited(&result)),
            _ => None,
        };
        match (approved, self.inner.desk.get()) {
            (Some(approved), Some(desk)) => {
                let asked = ClientMechanism::Elicitation;
                place_client_answer(desk, &ask.ticket, (approved, asked), client, note).await;
            }
            _ => note(format!(
                "the client's answer about {id} decides nothing (an error, or no yes or no); it waits for the approvals queue"
            )),
        }
        call.await
    }
}

/// The yes or no an elicitation result (`{action, content}`) gives, as
/// [`question::answer`] reads it; `None` when it decides nothing.
fn elicited(result: &serde_json::Value) -> Option<bool> {
    let action = result.get("action")?.as_str()?;
    let approve = result
        .get("content")
        .and_then(|c| c.get(question::APPROVE_FIELD))
        .and_then(serde_json::Value::as_bool);
    question::answer(action, approve)
}

/// Places the client's answer about `ticket`'s park with the desk (off the async
/// threads: the queue's I/O blocks); a failure is noted, and the park waits for the
/// approvals queue.
async fn place_client_answer(
    desk: &Desk,
    ticket: &aegis_runtime::approvals::Ticket,
    (approved, asked): (bool, ClientMechanism),
    client: String,
    note: impl Fn(String),
) {
    let (desk, ticket) = (desk.clone(), ticket.clone());
    let id = ticket.approval_id.clone();
    let placed =
        tokio::task::spawn_blocking(move || desk.client_decided(&ticket, approved, &client, asked))
            .await;
    let failed = match placed {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    if let Some(e) = failed {
        note(format!(
            "the client's answer about {id} could not be placed ({e}); it waits for the approvals queue"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: serde_json::Value) -> JsonObject {
        match v {
            serde_json::Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn the_frame_is_canonical_whatever_the_key_order_or_spacing() {
        let a = object(serde_json::json!({"b": 1.5, "a": [null, -2, "x"]}));
        let b: JsonObject =
            serde_json::from_str(r#"{ "a" : [ null , -2 , "x" ] , "b" : 1.50 }"#).unwrap();
        assert_eq!(request_frame("t", &a), request_frame("t", &b));
        assert_eq!(
            request_frame("t", &a),
            br#"{"arguments":{"a":[null,-2,"x"],"b":1.5},"name":"t"}"#
        );
        assert_eq!(
            request_frame("t", &JsonObject::new()),
            br#"{"arguments":{},"name":"t"}"#
        );
    }

    /// The arguments as the gateway gets them, and their canonical JSON.
    fn given(v: serde_json::Value) -> (serde_json::Value, String) {
        let canonical = serde_json_canonicalizer::to_string(&v).unwrap();
        (v, canonical)
    }

    #[test]
    fn the_frame_from_canonical_arguments_is_the_whole_call_canonicalized() {
        let names = [
            "t",
            "",
            "quote\"back\\slash",
            "ctl\u{1}\u{1f}\n\t\u{7f}",
            "ünï\u{2028}cödé 🦀",
        ];
        let arguments = [
            serde_json::json!({}),
            serde_json::json!({"b": 1e21, "a": [null, -0.0, 1.5, "x\u{0}"], "é": {"z": true, "y": false}}),
            serde_json::json!({"\u{10000}": 1, "\u{ffff}": 2}),
        ];
        for name in names {
            for a in &arguments {
                let (value, canonical) = given(a.clone());
                let whole = serde_json::json!({"name": name, "arguments": value});
                assert_eq!(
                    frame_of(name, &canonical),
                    serde_json_canonicalizer::to_vec(&whole).unwrap(),
                    "{name:?} {a}"
                );
                assert_eq!(
                    request_frame(name, &object(a.clone())),
                    frame_of(name, &canonical)
                );
            }
        }
    }

    #[test]
    fn argv_delivery_passes_scalars_and_refuses_the_rest() {
        let d = Delivery::Argv {
            argv: vec!["path".into(), "n".into()],
            stdin: Some("text".into()),
        };
        let (v, c) = given(serde_json::json!({"path": "/a b", "n": 3, "text": "hi"}));
        let i = invocation(&d, &v, c).unwrap();
        assert_eq!(i.args, ["/a b", "3"]);
        assert_eq!(i.input, b"hi");
        let (v, c) = given(serde_json::json!({"path": "/a", "n": [1]}));
        let e = invocation(&d, &v, c).err().unwrap();
        assert!(e.contains("\"n\" must be a string"), "{e}");
        let (v, c) = given(serde_json::json!({"path": "/a", "n": 1}));
        let e = invocation(&d, &v, c).err().unwrap();
        assert!(e.contains("\"text\" is missing"), "{e}");
    }

    #[test]
    fn json_delivery_gives_the_canonical_arguments() {
        let (v, c) = given(serde_json::json!({"z": 1, "a": "b"}));
        let i = invocation(&Delivery::Json, &v, c).unwrap();
        assert_eq!(i.input, br#"{"a":"b","z":1}"#);
        assert!(i.args.is_empty());
    }
}
