//! The session `tools/call` answered in place: a POST that is nothing but a tools/call
//! in a live session is run and answered as one JSON body by the HTTP handler, without
//! rmcp's session worker, its per-request task and channels, its event stream and its
//! resumption cache. Everything else goes to rmcp untouched.
//!
//! Why: at one client, rmcp's session machinery cost more than the sandboxed, audited
//! call itself (`benches/results/gateway.md`, runs 3 and 4).
//!
//! # Guarantees
//! - Taken only when every check rmcp would make on the same request is known to pass
//!   and would route it to the session's `tools/call`: `Host` (and `Origin`, if sent)
//!   exactly one of the server's own names (checked before this module, by
//!   `http::check_host`); `Accept` naming both JSON and the event
//!   stream, `Content-Type` JSON; a body within the cap that is one JSON-RPC request
//!   for `tools/call` with no per-request protocol version; an `MCP-Protocol-Version`
//!   header absent or naming a revision before 2026-07-28 (which has no sessions and
//!   no standard headers to check); a session id rmcp holds. Anything short of that
//!   (a request in another shape, a stateless request, a name or header this module
//!   does not recognise) is handed to rmcp, which answers as it always does.
//! - The call itself is [`GatewayServer::call`], the same as rmcp's dispatch reaches:
//!   the same stations, record, capacity and refusals. The answer is the JSON-RPC
//!   response rmcp would put in its event stream, as an `application/json` body,
//!   which Streamable HTTP lets a server choose for any request. A call that gave a
//!   progress token and is still parked one keep-alive interval after it was filed is
//!   answered as an event stream instead (its `Accept` names one): a progress
//!   notification each interval, as rmcp's path sends, then the response. The stream
//!   holds its connection as a body being awaited does: it counts against the
//!   connection cap, the write timeout still closes it when its client stops reading,
//!   and the gateway's stop ends it (its park is withdrawn, and its answer sent).
//! - With clients asked about parked calls (`--approve-via client`), a session whose
//!   `initialize` declared elicitation has no call taken here: rmcp's path can send
//!   the question on the call's stream and route the answer back; this one cannot.
//! - The middleware wraps rmcp's service alone, so it sees every path rmcp serves
//!   (`/mcp`, `/mcp/`, `/mcp/…`) and none that rmcp does not; the bearer-token layer
//!   runs before it.
//! - `notifications/cancelled` naming a call taken here, and the session's end (a
//!   `DELETE`, or closing it for idleness), cancel that call, as rmcp does for its
//!   own. The notification and the `DELETE` go to rmcp first, whatever their headers,
//!   and act here only when rmcp accepted them: a refused request changes nothing. A
//!   notification from another session cancels nothing here. As on rmcp's path, a
//!   call so cancelled gets no JSON-RPC answer (an event stream that ends empty).
//! - The answers are rmcp's, message for message: `tests/all/direct_vs_rmcp.rs` sends
//!   the same requests here and to rmcp alone. Only the framing of a call's answer
//!   differs (one JSON body here, an event stream there).
//! - A call's entry lives as long as the call, not as long as its request: a call
//!   whose client left can still be cancelled, and its id is still in use.
//! - A request reusing the id of one still being answered in its session, here or by
//!   rmcp, is refused with a JSON-RPC error: its cancellation would be ambiguous, and
//!   rmcp, given two, answers one and leaves the other's stream open for the session's
//!   life. It is not a call, so nothing is recorded for it.
//! - rmcp's own idle timer cannot see calls taken here, so it is off, and this module
//!   closes a session after [`HttpOptions::session_idle`](crate::http::HttpOptions)
//!   with no accepted request starting and no call taken here running. Marked closing
//!   under the lock calls register under, a session takes no new call while it closes.
//! - A POST naming no session (one asking rmcp for a new session) is answered 503
//!   while [`HttpOptions::max_sessions`](crate::http::HttpOptions) are open, and 413
//!   when its body is over [`MAX_NEW_SESSION_BODY`]. So is an `initialize` (or a
//!   batch) inside a session: rmcp keeps its parameters for the session's life.
//!
//! # Non-guarantees
//! - A client that disconnects mid-call does not cancel it: the call runs to its end
//!   and its outcome is recorded (as on rmcp's path). A parked call whose client left
//!   waits in the queue until it is decided or expires.
//! - Whether a session's client can be asked is read from the `initialize` body as it
//!   passes (`capabilities.elicitation`, any object); a client that declares it some
//!   other way is not routed to rmcp, and its parks are left to the queue.
//! - A request that went to rmcp counts as use when it starts, not while it lasts:
//!   a `tools/call` or an event stream on rmcp's path that outlasts the idle time may
//!   see its session closed (as rmcp's own timer would).
//! - The cap on sessions is checked when one is asked for: requests asking at the same
//!   moment may pass it together (by at most the connections open).

use crate::server::{CANCELLED, GatewayServer, KeepAlive, Waiting, waiting_progress};
use aegis_runtime::CancelToken;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ProgressToken, ServerNotification};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, GetMeta as _,
    JsonRpcVersion2_0, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::HEADER_SESSION_ID;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Protocol revisions whose requests rmcp routes to a session with no header checks
/// beyond the version's own: the ones before 2026-07-28.
const SESSION_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The largest body of a request for a new session (an `initialize`): 64 KiB. rmcp
/// keeps its parameters as long as the session, so the general body cap, times the
/// session cap, would be what a client could make the server hold.
pub const MAX_NEW_SESSION_BODY: usize = 64 * 1024;

/// What this module keeps per session.
#[derive(Default)]
struct SessionUse {
    /// The last request naming the session, or the last call here ending.
    last: Option<Instant>,
    /// Calls taken here and running, by their JSON-RPC id (as JSON text).
    running: HashMap<String, CancelToken>,
    /// Requests handed to rmcp whose answer has not ended, by id (as JSON text).
    passed: HashSet<String>,
    /// The idle sweep is closing the session: no call is taken here any more.
    closing: bool,
    /// The gateway asks clients about parked calls and this session's client declared
    /// elicitation in its `initialize`: its calls go to rmcp, which can ask it (this
    /// module answers with one body, and has no way to send the client a request).
    asked: bool,
}

impl SessionUse {
    /// Whether `key` names a request of the session still being answered, here or by
    /// rmcp.
    fn id_in_use(&self, key: &str) -> bool {
        self.running.contains_key(key) || self.passed.contains(key)
    }
}

/// The JSON-RPC error for a request reusing an id in use: its cancellation would be
/// ambiguous, and rmcp, given two, answers one and leaves the other's stream open.
fn id_in_use(key: &str, id: RequestId) -> Response {
    let refused = ErrorData::invalid_request(
        format!("request id {key} is already in use by a request being answered in this session"),
        None,
    );
    json_response(&ServerJsonRpcMessage::error(refused, Some(id)))
}

/// The state behind the middleware [`route`].
pub(crate) struct Direct {
    server: GatewayServer,
    sessions: Arc<LocalSessionManager>,
    max_body: usize,
    idle: Duration,
    max_sessions: usize,
    /// Off, no call is taken here: rmcp answers every request (see
    /// [`HttpOptions::direct_calls`](crate::http::HttpOptions)); the rest of this
    /// module's bookkeeping is the same.
    take_calls: bool,
    uses: Mutex<HashMap<Arc<str>, SessionUse>>,
}

impl Direct {
    pub(crate) fn new(
        server: GatewayServer,
        sessions: Arc<LocalSessionManager>,
        max_body: usize,
        idle: Duration,
        max_sessions: usize,
        take_calls: bool,
    ) -> Direct {
        Direct {
            server,
            sessions,
            max_body,
            idle,
            max_sessions,
            take_calls,
            uses: Mutex::new(HashMap::new()),
        }
    }

    fn uses(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, SessionUse>> {
        self.uses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a request naming `session`. Only sessions already known here are noted
    /// (the idle sweep and this module's calls add them, both for sessions rmcp holds),
    /// so requests naming made-up ids add nothing to keep.
    fn touch(&self, session: &str) {
        if let Some(u) = self.uses().get_mut(session) {
            u.last = Some(Instant::now());
        }
    }

    /// Cancels every call taken here for `session`.
    fn end_session(&self, session: &str) {
        if let Some(u) = self.uses().remove(session) {
            for token in u.running.values() {
                token.cancel(CANCELLED);
            }
        }
    }

    /// Whether `session`'s calls go to rmcp, so that its client can be asked about a
    /// parked call (see [`SessionUse::asked`]).
    fn asks(&self, session: &str) -> bool {
        self.uses().get(session).is_some_and(|u| u.asked)
    }

    /// Notes that `session`, just made by rmcp for an `initialize` whose client can be
    /// asked, has its calls answered by rmcp.
    fn ask_in(&self, session: &str) {
        let mut uses = self.uses();
        let u = uses.entry(Arc::from(session)).or_default();
        u.asked = true;
        u.last = Some(Instant::now());
    }

    fn cancel_call(&self, session: &str, id: &RequestId) {
        let key = id_key(id);
        if let Some(token) = self.uses().get(session).and_then(|u| u.running.get(&key)) {
            token.cancel(CANCELLED);
        }
    }

    /// Closes the sessions nobody used for `idle`, until `stop`. rmcp's own idle timer
    /// is off (see the module's guarantees); this is its replacement.
    pub(crate) async fn close_idle_sessions(self: Arc<Self>, stop: CancellationToken) {
        let period = (self.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
            let listed = Instant::now();
            let open: HashSet<Arc<str>> = self
                .sessions
                .sessions
                .read()
                .await
                .keys()
                .cloned()
                .collect();
            let now = Instant::now();
            let mut idle = Vec::new();
            {
                let mut uses = self.uses();
                // An entry noted after the listing may name a session made since: kept
                // for the next sweep to judge.
                uses.retain(|id, u| {
                    !u.running.is_empty()
                        || open.contains(id)
                        || u.last.is_some_and(|last| last >= listed)
                });
                for id in open {
                    let u = uses.entry(id.clone()).or_default();
                    let last = *u.last.get_or_insert(now);
                    // Marked under the lock that calls register under: from here on no
                    // call is taken for it, so none can start in a closing session.
                    if u.running.is_empty() && now.duration_since(last) >= self.idle {
                        u.closing = true;
                        idle.push(id);
                    }
                }
            }
            for id in idle {
                // A session already gone is what was wanted.
                let _ = self.sessions.close_session(&id).await;
                self.end_session(&id);
            }
        }
    }

    /// Whether a request with these headers may be taken here (its body decides the rest).
    fn takeable(&self, headers: &HeaderMap) -> bool {
        if !self.take_calls {
            return false;
        }
        // Host and Origin were checked before this module (`http::check_host`).
        let field = |name| one(headers, name);
        if !matches!(field(header::CONTENT_TYPE), Field::One(t) if is_json(t)) {
            return false;
        }
        if !accepts_json_and_stream(headers) {
            return false;
        }
        match field(header::HeaderName::from_static("mcp-protocol-version")) {
            Field::Absent => {}
            Field::One(version) if SESSION_REVISIONS.contains(&version) => {}
            _ => return false,
        }
        matches!(
            field(header::HeaderName::from_static("mcp-session-id")),
            Field::One(_)
        )
    }

    /// Whether rmcp holds `session`.
    async fn holds(&self, session: &str) -> bool {
        self.sessions.sessions.read().await.contains_key(session)
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// `Accept` lists `application/json` and `text/event-stream`, each plainly (an entry
/// with parameters is not counted: a `q=0` would mean the opposite).
fn accepts_json_and_stream(headers: &HeaderMap) -> bool {
    let (mut json, mut stream) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        // A quoted parameter may hold commas; rmcp splits around quotes, this does not
        // try to, and leaves such a request to rmcp.
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains('"') {
            return false;
        }
        for entry in value.split(',').map(str::trim) {
            json |= entry.eq_ignore_ascii_case("application/json");
            stream |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && stream
}

/// A request id as a map key: its JSON text, so `1` and `"1"` stay apart.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

fn json_response(message: &ServerJsonRpcMessage) -> Response {
    match serde_json::to_vec(message) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        // Serializing rmcp's own message type does not fail; if it did, say so.
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("aegis gateway: the answer could not be serialized: {e}\n"),
        )
            .into_response(),
    }
}

/// The middleware around rmcp's service (the endpoint's only one, so every path
/// rmcp serves passes here): takes the requests the module's guarantees describe,
/// passes on the rest (with the body it had to read).
pub(crate) async fn route(
    State(direct): State<Arc<Direct>>,
    request: Request,
    next: Next,
) -> Response {
    let session = request
        .headers()
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(session) = session else {
        // A POST naming no session asks rmcp for a new one (no other is served
        // without one): refused at the cap before rmcp makes it, and held to a
        // smaller body, since rmcp keeps the initialize request's parameters for the
        // session's life.
        if request.method() == Method::POST {
            if direct.sessions.sessions.read().await.len() >= direct.max_sessions {
                return sessions_full(direct.max_sessions);
            }
            let (parts, body) = request.into_parts();
            let bytes = match whole(body, direct.max_body).await {
                Ok(bytes) => bytes,
                Err(refused) => return refused,
            };
            if let Some(refused) = kept_too_large(&bytes, false) {
                return refused;
            }
            let asked = direct.server.asks_clients() && declares_elicitation(&bytes);
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            if asked
                && response.status().is_success()
                && let Some(made) = response
                    .headers()
                    .get(HEADER_SESSION_ID)
                    .and_then(|v| v.to_str().ok())
            {
                direct.ask_in(made);
            }
            return response;
        }
        return next.run(request).await;
    };
    let response = match *request.method() {
        Method::DELETE => {
            // Only a deletion rmcp accepted (token, Host, Origin, a session it holds)
            // ends the calls taken here: a refused request changes nothing.
            let response = next.run(request).await;
            if response.status().is_success() {
                direct.end_session(&session);
                // rmcp answers 202; the SDKs take 200 or 204 as "ended" and log
                // anything else as a failed termination (the Python SDK for every
                // session), and there is nothing left to accept: 204.
                return StatusCode::NO_CONTENT.into_response();
            }
            response
        }
        Method::POST => post(&direct, &session, request, next).await,
        _ => next.run(request).await,
    };
    // A request rmcp (or this module) accepted keeps its session open.
    if response.status().is_success() {
        direct.touch(&session);
    }
    response
}

fn sessions_full(max_sessions: usize) -> Response {
    crate::http::refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "aegis gateway: {max_sessions} sessions are open, the most it keeps; end one \
             (DELETE) or wait for one to be closed idle\n"
        ),
        &[(header::RETRY_AFTER, "1")],
    )
}

/// A POST naming `session`.
async fn post(direct: &Arc<Direct>, session: &str, request: Request, next: Next) -> Response {
    let takeable = direct.takeable(request.headers()) && !direct.asks(session);
    let (parts, body) = request.into_parts();
    let bytes = match whole(body, direct.max_body).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    if let Some(refused) = kept_too_large(&bytes, true) {
        return refused;
    }
    let pass = |bytes: Bytes, next: Next| {
        let request = Request::from_parts(parts, Body::from(bytes));
        next.run(request)
    };
    if takeable
        && let Ok(call) = serde_json::from_slice::<SessionCall>(&bytes)
        && call.method == "tools/call"
        && direct.holds(session).await
    {
        let mut params = CallToolRequestParams::new(call.params.name);
        params.arguments = call.params.arguments;
        return match take_call(direct, session, call.id, params, None).await {
            Some(answer) => answer,
            None => pass(bytes, next).await,
        };
    }
    let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) else {
        return pass(bytes, next).await;
    };
    match message {
        ClientJsonRpcMessage::Request(request) => {
            let id = request.id.clone();
            let progress = request.request.get_meta().get_progress_token();
            if takeable
                && request.request.get_meta().protocol_version().is_none()
                && let ClientRequest::CallToolRequest(call) = request.request
                && direct.holds(session).await
                && let Some(answer) =
                    take_call(direct, session, request.id, call.params, progress).await
            {
                return answer;
            }
            pass_request(direct, session, id, pass(bytes, next)).await
        }
        // Whatever its headers, a cancellation rmcp accepts also reaches the calls
        // taken here (after rmcp said yes, as a DELETE does).
        ClientJsonRpcMessage::Notification(n) => {
            let response = pass(bytes, next).await;
            if let ClientNotification::CancelledNotification(c) = &n.notification
                && let Some(id) = &c.params.request_id
                && response.status().is_success()
            {
                direct.cancel_call(session, id);
            }
            response
        }
        _ => pass(bytes, next).await,
    }
}

/// `Absent`, or the one value as text; a repeated or non-text field is `Unusable`
/// (rmcp would read one of the values, and a check here another).
fn one(headers: &HeaderMap, name: header::HeaderName) -> Field<'_> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Field::Absent,
        (Some(v), None) => v.to_str().map_or(Field::Unusable, Field::One),
        (Some(_), Some(_)) => Field::Unusable,
    }
}

/// A POST's body: already read whole, within the cap, by `http::read_body_in_time`,
/// so this only takes it.
async fn whole(body: Body, max_body: usize) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, max_body).await.map_err(|_| {
        crate::http::refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "aegis gateway: the request body is over {max_body} bytes, or could not be read\n"
            ),
            &[],
        )
    })
}

/// A 413 for a body rmcp would keep for a session's life that is over
/// [`MAX_NEW_SESSION_BODY`]: any request for a new session (`in_session` false), or,
/// in a session, an `initialize` or anything that is not one JSON object.
fn kept_too_large(body: &[u8], in_session: bool) -> Option<Response> {
    if body.len() <= MAX_NEW_SESSION_BODY || (in_session && is_one_message_but_initialize(body)) {
        return None;
    }
    Some(crate::http::refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "aegis gateway: a request for a session, or an initialize, is held to \
             {MAX_NEW_SESSION_BODY} bytes\n"
        ),
        &[],
    ))
}

/// Whether `body` is one JSON object whose `method` is not `initialize` (what may be
/// larger than [`MAX_NEW_SESSION_BODY`]).
fn is_one_message_but_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method<'_>>(body)
        .is_ok_and(|m| m.method.as_deref() != Some("initialize"))
}

/// Whether `body` is an `initialize` whose client declares elicitation (any
/// `capabilities.elicitation` object): its session's calls go to rmcp, which decides
/// whether the client can be asked. Read generously: sending a call to rmcp is never
/// less safe, only slower.
fn declares_elicitation(body: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    message.get("method").and_then(serde_json::Value::as_str) == Some("initialize")
        && message
            .get("params")
            .and_then(|p| p.get("capabilities"))
            .and_then(|c| c.get("elicitation"))
            .is_some_and(serde_json::Value::is_object)
}

/// A header field as [`Direct::takeable`] reads it.
enum Field<'h> {
    Absent,
    One(&'h str),
    Unusable,
}

/// A `tools/call` in its plainest form: these members and no others (no `_meta`, so
/// no per-request protocol version), each once. Parsed before rmcp's own message type,
/// which costs several times as much; whatever this does not parse is parsed that way.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionCall {
    #[expect(dead_code, reason = "checked by parsing: only \"2.0\" parses")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    method: String,
    params: PlainParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams {
    name: String,
    #[serde(default)]
    arguments: Option<rmcp::model::JsonObject>,
}

/// Runs a call taken here and answers it; its id must not name a call still running
/// in the session. None when the session is closing: rmcp answers for it. A call that
/// gave a `progress` token and is still parked one keep-alive interval after it was
/// filed is answered as an event stream ([`waiting_stream`]); any other, as one body.
async fn take_call(
    direct: &Arc<Direct>,
    session: &str,
    id: RequestId,
    params: CallToolRequestParams,
    progress: Option<ProgressToken>,
) -> Option<Response> {
    let key = id_key(&id);
    let token = CancelToken::new();
    {
        let mut uses = direct.uses();
        let u = uses.entry(Arc::from(session)).or_default();
        if u.closing {
            return None;
        }
        if u.id_in_use(&key) {
            return Some(id_in_use(&key, id));
        }
        u.running.insert(key.clone(), token.clone());
    }
    // The entry lives as long as the call, not as long as this request: a client that
    // leaves mid-call leaves a call that can still be cancelled (and is not reused).
    let running = Running {
        direct: Arc::clone(direct),
        session: Arc::from(session),
        key,
    };
    // Each keep-alive of a parked call, as the progress notification it makes.
    let (alive, mut alive_rx) = tokio::sync::mpsc::channel::<ServerJsonRpcMessage>(KEPT_ALIVE);
    let keep_alive = progress.map(|progress_token| {
        let sent = Arc::new(AtomicU64::new(0));
        let keep_alive: KeepAlive = Arc::new(move |approval_id: &str| {
            let n = sent.fetch_add(1, Ordering::Relaxed) + 1;
            let param = waiting_progress(&progress_token, n, approval_id);
            let notification = ServerNotification::ProgressNotification(
                rmcp::model::ProgressNotification::new(param),
            );
            // Called on the settle thread: never blocks. A stream that is not read is
            // sent no more than KEPT_ALIVE behind (the client is told the call waits;
            // how often is no promise).
            let _ = alive.try_send(ServerJsonRpcMessage::notification(notification));
        });
        keep_alive
    });
    let waiting = Waiting {
        keep_alive,
        ..Waiting::default()
    };
    let mut job = direct
        .server
        .spawn_call(params, token.clone(), running, waiting);
    let answered = tokio::select! {
        answered = &mut job => answered,
        Some(first) = alive_rx.recv() => {
            return Some(waiting_stream(first, alive_rx, job, token, id));
        }
    };
    // Cancelled by the client (its notification, or its session's end): no answer, as
    // rmcp sends none for a request it cancelled (MCP: the receiver should not
    // respond). The call's outcome is still on the record.
    if token.reason().as_deref() == Some(CANCELLED) {
        return Some(no_answer());
    }
    Some(json_response(&answer_of(answered, id)))
}

/// How many keep-alive notifications wait for a stream that is slow to send them.
const KEPT_ALIVE: usize = 4;

/// The JSON-RPC answer to a call taken here, as `answered`.
fn answer_of(
    answered: Result<Result<CallToolResponse, ErrorData>, tokio::task::JoinError>,
    id: RequestId,
) -> ServerJsonRpcMessage {
    match answered {
        Ok(Ok(result)) => {
            let mut result = ServerResult::from(result);
            // What rmcp's handler does for every session (all negotiated before
            // 2026-07-28, the first revision without sessions): such peers get no
            // `resultType` and no structured content that is not an object.
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            ServerJsonRpcMessage::response(result, id)
        }
        Ok(Err(error)) => ServerJsonRpcMessage::error(error, Some(id)),
        Err(e) => ServerJsonRpcMessage::error(
            ErrorData::internal_error(format!("the gateway failed: {e}"), None),
            Some(id),
        ),
    }
}

/// The answer to a parked call that gave a progress token, once it has waited one
/// keep-alive interval: an event stream (which Streamable HTTP lets a server choose for
/// any request, and which the call's `Accept` names), of `first` and each progress
/// notification after it, then the call's answer, as rmcp's own path sends them. The
/// stream ends with no answer when the client cancelled the call, as rmcp's does.
///
/// The stream holds its connection as long as the park waits, as one JSON body would:
/// the connection still counts against the cap, and the write timeout still closes it
/// when the client stops taking its bytes. A client that leaves does not cancel the
/// call (as on the one-body path): it runs to its end, recorded.
fn waiting_stream(
    first: ServerJsonRpcMessage,
    mut alive: tokio::sync::mpsc::Receiver<ServerJsonRpcMessage>,
    mut job: tokio::task::JoinHandle<Result<CallToolResponse, ErrorData>>,
    token: CancelToken,
    id: RequestId,
) -> Response {
    let (mut events, body) = http_body_util::Channel::<Bytes, axum::Error>::new(KEPT_ALIVE);
    tokio::spawn(async move {
        if events.send_data(event(&first)).await.is_err() {
            return;
        }
        let answered = loop {
            tokio::select! {
                answered = &mut job => break answered,
                Some(note) = alive.recv() => {
                    // The client left: the call goes on without it (the job's own task).
                    if events.send_data(event(&note)).await.is_err() {
                        return;
                    }
                }
            }
        };
        if token.reason().as_deref() == Some(CANCELLED) {
            return;
        }
        let _ = events.send_data(event(&answer_of(answered, id))).await;
    });
    let mut response = Response::new(Body::new(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One server-sent event holding `message`.
fn event(message: &ServerJsonRpcMessage) -> Bytes {
    // Serializing rmcp's own message type does not fail (see `json_response`).
    let json = serde_json::to_string(message).unwrap_or_default();
    Bytes::from(format!("event: message\ndata: {json}\n\n"))
}

/// The answer to a call the client cancelled: an event stream that ends with no
/// message, what rmcp's own answer to such a request comes to.
fn no_answer() -> Response {
    let mut response = Response::new(Body::empty());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// Hands a request to rmcp (`passing`) unless its id names a request of the session
/// still being answered, here or by rmcp: rmcp would send one answer to the later
/// stream and leave the earlier one open for the session's life. The id stays taken
/// until the answer's body ends or is dropped.
async fn pass_request(
    direct: &Arc<Direct>,
    session: &str,
    id: RequestId,
    passing: impl Future<Output = Response>,
) -> Response {
    // A session rmcp does not hold gets rmcp's refusal, and no entry here.
    if !direct.holds(session).await {
        return passing.await;
    }
    let key = id_key(&id);
    {
        let mut uses = direct.uses();
        let u = uses.entry(Arc::from(session)).or_default();
        if u.id_in_use(&key) {
            return id_in_use(&key, id);
        }
        u.passed.insert(key.clone());
    }
    let passed = Passed {
        direct: Arc::clone(direct),
        session: Arc::from(session),
        key,
    };
    passing.await.map(|body| {
        Body::new(Answering {
            body,
            _passed: passed,
        })
    })
}

/// An id in [`SessionUse::passed`], given back when dropped.
struct Passed {
    direct: Arc<Direct>,
    session: Arc<str>,
    key: String,
}

impl Drop for Passed {
    fn drop(&mut self) {
        if let Some(u) = self.direct.uses().get_mut(&*self.session) {
            u.passed.remove(&self.key);
        }
    }
}

/// rmcp's answer to a passed request, holding its id taken while it is sent.
struct Answering {
    body: Body,
    _passed: Passed,
}

impl http_body::Body for Answering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A call's entry in [`SessionUse::running`]; dropped when the call ends, however it
/// ends.
struct Running {
    direct: Arc<Direct>,
    session: Arc<str>,
    key: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut uses = self.direct.uses();
        if let Some(u) = uses.get_mut(&*self.session) {
            u.running.remove(&self.key);
            u.last = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_initialize_declaring_elicitation_sends_its_session_to_rmcp() {
        let init = |capabilities: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{capabilities},"clientInfo":{{"name":"c","version":"1"}}}}}}"#
            )
        };
        assert!(declares_elicitation(
            init(r#"{"elicitation":{}}"#).as_bytes()
        ));
        assert!(declares_elicitation(
            init(r#"{"elicitation":{"form":{}}}"#).as_bytes()
        ));
        // URL mode only still goes to rmcp, which decides not to ask: never less safe.
        assert!(declares_elicitation(
            init(r#"{"elicitation":{"url":{}}}"#).as_bytes()
        ));
        assert!(!declares_elicitation(init("{}").as_bytes()));
        assert!(!declares_elicitation(
            init(r#"{"elicitation":true}"#).as_bytes()
        ));
        assert!(!declares_elicitation(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"capabilities":{"elicitation":{}}}}"#
        ));
        assert!(!declares_elicitation(b"not json"));
    }

    #[test]
    fn an_event_holds_one_message_as_data() {
        let message = ServerJsonRpcMessage::error(
            ErrorData::internal_error("x\ny", None),
            Some(RequestId::Number(7)),
        );
        let text = String::from_utf8(event(&message).to_vec()).unwrap();
        assert!(text.starts_with("event: message\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n"), "{text}");
        // One data line: JSON escapes the message's own newlines.
        assert_eq!(text.lines().filter(|l| l.starts_with("data:")).count(), 1);
    }
}
